/*
 * bench-gpu.c - speed of the CUDA backend (kernels/backend.h) on device-resident data: GEMM,
 * memory-bound ops, attention, a bf16 transformer block end to end, and the caching device
 * allocator against raw cudaMalloc/cudaFree. bench/bench_gpu.py runs it beside PyTorch.
 *
 * DESIGN
 * Each op case is a one-node graph made with the runtime's graph builder. Its inputs are
 * uploaded once (rtx_backend_upload), its output is a backend buffer viewed as a tensor, and
 * the node runs through rtx_backend_run_node: warm-up runs, a synchronize, then N runs and a
 * synchronize, timed by the wall clock (so the figure includes the launch overhead the daemon
 * pays). Bytes are what the op must read and write once; FLOPs are 2·M·N·K for GEMM and
 * 4·B·H·L²·D for attention (halved when causal, as FlashAttention and PyTorch count).
 * The transformer block runs through rtx_plan_execute, which uploads the input and downloads
 * the output on every run (the weights are uploaded once per plan): its time includes both.
 * The allocator case replays one pseudo-random trace (256 slots; each step frees the slot's
 * block or allocates 512 B .. 4 MiB) through rtx_mem_pool over cudaMalloc/cudaFree and
 * through cudaMalloc/cudaFree directly.
 * Output: one JSON object per line. Without a CUDA device it prints that it skipped and exits 0.
 * Usage: rtx-bench-gpu [--quick]  (--quick: fewer and smaller cases)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "runtime/mem-pool.h"

static struct rtx_backend *be;
static bool quick;
static uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float uniform(void) { /* [-1, 1) */
    return (float)((double)(rnd() >> 11) * 0x1.0p-52 - 1.0);
}

/* A host tensor of uniform values center + scale * [-1, 1). */
static int host_random(enum rtx_dtype dt, int ndim, const int64_t *dims, float center,
                       float scale, struct rtx_tensor **out, struct rtx_err *err) {
    int rc = rtx_tensor_new(dt, ndim, dims, out, err);
    if (rc) return rc;
    int64_t n = rtx_tensor_numel(*out);
    void *p = rtx_tensor_data(*out);
    for (int64_t i = 0; i < n; i++) {
        float v = center + scale * uniform();
        if (dt == RTX_BF16)
            ((uint16_t *)p)[i] = rtx_f32_to_bf16(v);
        else
            ((float *)p)[i] = v;
    }
    return 0;
}

static const char *shape_of(const struct rtx_tensor *t, char *buf, size_t len) {
    return rtx_shape_str(t->dtype, t->ndim, t->dims, buf, len);
}

/* One op case: inputs (host), the node's attributes set by `attrs`, the output shape. */
struct op_case {
    const char *name;          /* JSON "name" */
    const char *op;
    int n_in;
    struct rtx_tensor *in[3];  /* host tensors (owned) */
    enum rtx_dtype out_dt;
    int out_ndim;
    int64_t out_dims[RTX_MAX_DIMS];
    int64_t causal;            /* attention: the causal attribute; -1: not set */
    double flops;              /* per run, 0 for memory-bound ops */
    double bytes;              /* per run */
    int reps;
    char shape[128];           /* JSON "shape" */
};

static void op_case_free(struct op_case *c) {
    for (int i = 0; i < c->n_in; i++) rtx_tensor_unref(c->in[i]);
}

static void print_error(const char *name, const struct rtx_err *err) {
    char msg[512];
    size_t j = 0;
    for (const char *s = err->msg; *s && j + 2 < sizeof msg; s++) {
        if (*s == '"' || *s == '\\') msg[j++] = '\\';
        msg[j++] = *s < ' ' ? ' ' : *s;
    }
    msg[j] = '\0';
    printf("{\"name\": \"%s\", \"error\": \"%s\"}\n", name, msg);
    fflush(stdout);
}

/* Builds the one-node graph, uploads, runs and prints the JSON line. */
static void run_case(struct op_case *c) {
    static const char *const in_names[3] = {"a", "b", "c"};
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    struct rtx_tensor *dev[3] = {NULL}, *y = NULL;
    struct rtx_buffer *buf = NULL;
    int rc = rtx_graph_new(c->name, &g, &err);
    for (int i = 0; i < c->n_in && rc >= 0; i++)
        rc = rtx_graph_add_input(g, in_names[i], c->in[i]->dtype, c->in[i]->ndim,
                                 c->in[i]->dims, &err);
    const char *out_name = "y";
    int node = rc < 0 ? rc
                      : rtx_graph_add_node(g, c->op, c->op, in_names, c->n_in, &out_name, 1,
                                           &err);
    rc = node < 0 ? node : 0;
    if (rc == 0 && c->causal >= 0) rc = rtx_graph_set_attr_int(g, node, "causal", c->causal, &err);
    if (rc == 0) rc = rtx_graph_add_output(g, "y", &err);
    for (int i = 0; i < c->n_in && rc == 0; i++)
        rc = rtx_backend_upload(be, c->in[i], &dev[i], &err);
    size_t out_bytes = (size_t)rtx_shape_numel(c->out_ndim, c->out_dims) *
                       rtx_dtype_size(c->out_dt);
    if (rc == 0) rc = rtx_backend_buffer_new(be, out_bytes, &buf, &err);
    if (rc == 0)
        rc = rtx_tensor_from_buffer(buf, 0, c->out_dt, c->out_ndim, c->out_dims, &y, &err);
    struct rtx_tensor *outs[1] = {y};
    struct rtx_node_args a = {.graph = g, .node = rc == 0 ? &g->nodes[node] : NULL,
                              .n_in = c->n_in, .in = dev, .n_out = 1, .out = outs};
    double t0 = 0, t1 = 0;
    for (int r = -2; r < c->reps && rc == 0; r++) { /* two warm-up runs */
        if (r == 0) {
            rc = rtx_backend_synchronize(be, &err);
            t0 = now_s();
        }
        if (rc == 0) rc = rtx_backend_run_node(be, &a, &err);
    }
    if (rc == 0) rc = rtx_backend_synchronize(be, &err);
    t1 = now_s();
    if (rc) {
        print_error(c->name, &err);
    } else {
        double s = (t1 - t0) / c->reps;
        printf("{\"name\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"ms\": %.4f, "
               "\"reps\": %d", c->name, c->shape, rtx_dtype_name(c->in[0]->dtype), s * 1e3,
               c->reps);
        if (c->flops > 0) printf(", \"tflops\": %.2f", c->flops / s / 1e12);
        if (c->bytes > 0) printf(", \"gbps\": %.1f", c->bytes / s / 1e9);
        printf("}\n");
        fflush(stdout);
    }
    rtx_tensor_unref(y);
    rtx_buffer_unref(buf);
    for (int i = 0; i < c->n_in; i++) rtx_tensor_unref(dev[i]);
    rtx_graph_free(g);
}

static void gemm_case(int64_t n) {
    struct rtx_err err = {0};
    struct op_case c = {.name = "gemm", .op = "matmul", .n_in = 2, .out_dt = RTX_BF16,
                        .out_ndim = 2, .out_dims = {n, n}, .causal = -1,
                        .flops = 2.0 * (double)n * (double)n * (double)n,
                        .reps = n >= 8192 ? 20 : 50};
    float s = 1.0f / sqrtf((float)n);
    int rc = host_random(RTX_BF16, 2, (const int64_t[]){n, n}, 0, 1, &c.in[0], &err);
    if (rc == 0) rc = host_random(RTX_BF16, 2, (const int64_t[]){n, n}, 0, s, &c.in[1], &err);
    c.n_in = c.in[1] ? 2 : c.in[0] ? 1 : 0;
    snprintf(c.shape, sizeof c.shape, "%lldx%lldx%lld", (long long)n, (long long)n,
             (long long)n);
    if (rc == 0) run_case(&c); else print_error(c.name, &err);
    op_case_free(&c);
}

/* add (x + row), layer_norm (scale, bias over the last axis) or softmax (last axis). */
static void membound_case(const char *op, enum rtx_dtype dt, int64_t rows, int64_t cols) {
    struct rtx_err err = {0};
    struct op_case c = {.name = op, .op = op, .out_dt = dt, .out_ndim = 2,
                        .out_dims = {rows, cols}, .causal = -1, .reps = 30};
    size_t es = rtx_dtype_size(dt);
    double x_bytes = (double)rows * (double)cols * (double)es;
    int rc = host_random(dt, 2, c.out_dims, 0, 1, &c.in[c.n_in++], &err);
    if (strcmp(op, "add") == 0) {
        if (rc == 0) rc = host_random(dt, 1, &cols, 0, 1, &c.in[c.n_in++], &err);
        c.bytes = 2 * x_bytes + (double)cols * (double)es;
    } else if (strcmp(op, "layer_norm") == 0) {
        if (rc == 0) rc = host_random(dt, 1, &cols, 1, 0.1f, &c.in[c.n_in++], &err);
        if (rc == 0) rc = host_random(dt, 1, &cols, 0, 0.1f, &c.in[c.n_in++], &err);
        c.bytes = 2 * x_bytes + 2.0 * (double)cols * (double)es;
    } else {
        c.bytes = 2 * x_bytes;
    }
    snprintf(c.shape, sizeof c.shape, "%lldx%lld", (long long)rows, (long long)cols);
    if (rc == 0) run_case(&c); else print_error(c.name, &err);
    op_case_free(&c);
}

static void attention_case(int64_t b, int64_t h, int64_t l, int64_t d, bool causal) {
    struct rtx_err err = {0};
    int64_t dims[4] = {b, h, l, d};
    double flops = 4.0 * (double)(b * h) * (double)l * (double)l * (double)d;
    if (causal) flops /= 2;
    struct op_case c = {.name = "attention", .op = "attention", .out_dt = RTX_BF16,
                        .out_ndim = 4, .out_dims = {b, h, l, d}, .causal = causal,
                        .flops = flops};
    c.reps = flops > 2e12 ? 3 : flops > 2e11 ? 8 : 20;
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = host_random(RTX_BF16, 4, dims, 0, 1, &c.in[c.n_in++], &err);
    snprintf(c.shape, sizeof c.shape, "b%lld h%lld l%lld d%lld%s", (long long)b, (long long)h,
             (long long)l, (long long)d, causal ? " causal" : "");
    if (rc == 0) run_case(&c); else print_error(c.name, &err);
    op_case_free(&c);
}

/* ------------------------------------------------------------------------------------------
 * The transformer block: pre-LayerNorm, causal attention, tanh-GELU MLP (examples/README.md's
 * structure), bf16, through rtx_plan_execute.
 * ---------------------------------------------------------------------------------------- */

struct gb {
    struct rtx_graph *g;
    int rc;
    struct rtx_err err;
};

static int gb_node(struct gb *b, const char *op, const char *name, const char *const *ins,
                   int n, const char *out) {
    if (b->rc) return -1;
    int rc = rtx_graph_add_node(b->g, op, name, ins, n, &out, 1, &b->err);
    if (rc < 0) b->rc = rc;
    return rc;
}

static void gb_weight(struct gb *b, const char *name, int ndim, const int64_t *dims,
                      float center, float scale) {
    if (b->rc) return;
    struct rtx_tensor *t = NULL;
    b->rc = host_random(RTX_BF16, ndim, dims, center, scale, &t, &b->err);
    if (b->rc == 0) {
        int rc = rtx_graph_add_initializer(b->g, name, t, &b->err);
        if (rc < 0) b->rc = rc;
    }
    rtx_tensor_unref(t);
}

static void gb_ints(struct gb *b, int node, const char *name, const int64_t *v, int n) {
    if (b->rc == 0) b->rc = rtx_graph_set_attr_ints(b->g, node, name, v, n, &b->err);
}

#define IN(...)                                                                                   \
    (const char *const[]){__VA_ARGS__},                                                           \
        (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))

static void block_projection(struct gb *b, const char *src, const char *name, int64_t width,
                             int64_t heads) {
    char w[16], bias[16], mm[16], sum[16], split[16], hd[16];
    snprintf(w, sizeof w, "w%s", name);
    snprintf(bias, sizeof bias, "b%s", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(sum, sizeof sum, "%s", name);
    snprintf(split, sizeof split, "%s_split", name);
    snprintf(hd, sizeof hd, "%s_heads", name);
    float s = 1.0f / sqrtf((float)width);
    gb_weight(b, w, 2, (const int64_t[]){width, width}, 0, s);
    gb_weight(b, bias, 1, &width, 0, s);
    gb_node(b, "matmul", mm, IN(src, w), mm);
    gb_node(b, "add", sum, IN(mm, bias), sum);
    int n = gb_node(b, "reshape", split, IN(sum), split);
    gb_ints(b, n, "shape", (const int64_t[]){0, 0, heads, width / heads}, 4);
    n = gb_node(b, "transpose", hd, IN(split), hd);
    gb_ints(b, n, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
}

static void block_case(int64_t batch, int64_t seq, int64_t width, int64_t heads, int reps) {
    struct gb b = {0};
    int64_t ff = 4 * width;
    float s = 1.0f / sqrtf((float)width), sf = 1.0f / sqrtf((float)ff);
    b.rc = rtx_graph_new("block", &b.g, &b.err);
    if (b.rc == 0) {
        int rc = rtx_graph_add_input(b.g, "x", RTX_BF16, 3, (const int64_t[]){batch, seq, width},
                                     &b.err);
        if (rc < 0) b.rc = rc;
    }
    gb_weight(&b, "ln1_scale", 1, &width, 1, 0.1f);
    gb_weight(&b, "ln1_bias", 1, &width, 0, 0.1f);
    gb_node(&b, "layer_norm", "ln1", IN("x", "ln1_scale", "ln1_bias"), "h");
    block_projection(&b, "h", "q", width, heads);
    block_projection(&b, "h", "k", width, heads);
    block_projection(&b, "h", "v", width, heads);
    int n = gb_node(&b, "attention", "attention", IN("q_heads", "k_heads", "v_heads"), "att");
    if (b.rc == 0) b.rc = rtx_graph_set_attr_int(b.g, n, "causal", 1, &b.err);
    n = gb_node(&b, "transpose", "att_t", IN("att"), "att_t");
    gb_ints(&b, n, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
    n = gb_node(&b, "reshape", "att_merge", IN("att_t"), "att_m");
    gb_ints(&b, n, "shape", (const int64_t[]){0, 0, width}, 3);
    gb_weight(&b, "wo", 2, (const int64_t[]){width, width}, 0, s);
    gb_weight(&b, "bo", 1, &width, 0, s);
    gb_node(&b, "matmul", "o_mm", IN("att_m", "wo"), "o_mm");
    gb_node(&b, "add", "o", IN("o_mm", "bo"), "o");
    gb_node(&b, "add", "res1", IN("x", "o"), "res1");
    gb_weight(&b, "ln2_scale", 1, &width, 1, 0.1f);
    gb_weight(&b, "ln2_bias", 1, &width, 0, 0.1f);
    gb_node(&b, "layer_norm", "ln2", IN("res1", "ln2_scale", "ln2_bias"), "h2");
    gb_weight(&b, "w_up", 2, (const int64_t[]){width, ff}, 0, s);
    gb_weight(&b, "b_up", 1, &ff, 0, s);
    gb_weight(&b, "w_down", 2, (const int64_t[]){ff, width}, 0, sf);
    gb_weight(&b, "b_down", 1, &width, 0, sf);
    gb_node(&b, "matmul", "up_mm", IN("h2", "w_up"), "up_mm");
    gb_node(&b, "add", "up", IN("up_mm", "b_up"), "up");
    n = gb_node(&b, "gelu", "gelu", IN("up"), "act");
    if (b.rc == 0) b.rc = rtx_graph_set_attr_string(b.g, n, "approximate", "tanh", &b.err);
    gb_node(&b, "matmul", "down_mm", IN("act", "w_down"), "down_mm");
    gb_node(&b, "add", "down", IN("down_mm", "b_down"), "down");
    gb_node(&b, "add", "y", IN("res1", "down"), "y");
    if (b.rc == 0) b.rc = rtx_graph_add_output(b.g, "y", &b.err);

    struct rtx_tensor *x = NULL, *y = NULL;
    struct rtx_plan *plan = NULL;
    if (b.rc == 0)
        b.rc = host_random(RTX_BF16, 3, (const int64_t[]){batch, seq, width}, 0, 1, &x, &b.err);
    if (b.rc == 0)
        b.rc = rtx_plan_new(b.g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &b.err);
    double t0 = 0, t1 = 0;
    for (int r = -3; r < reps && b.rc == 0; r++) { /* three warm-up runs */
        if (r == 0) t0 = now_s();
        b.rc = rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, NULL, &b.err);
        rtx_tensor_unref(y);
        y = NULL;
    }
    t1 = now_s();
    if (b.rc) {
        print_error("block", &b.err);
    } else {
        char shape[64];
        /* matmul FLOPs: q, k, v, o (4·w²) and the MLP (2·w·ff) per token, attention causal */
        double tokens = (double)(batch * seq);
        double flops = 2.0 * tokens * (4.0 * (double)(width * width) + 2.0 * (double)(width * ff))
                       + 2.0 * (double)(batch * seq) * (double)seq * (double)width;
        double ms = (t1 - t0) * 1e3 / reps;
        printf("{\"name\": \"block\", \"shape\": \"%s h%lld\", \"dtype\": \"bf16\", "
               "\"ms\": %.4f, \"reps\": %d, \"tflops\": %.2f, \"includes\": "
               "\"upload of x and download of y\"}\n",
               shape_of(x, shape, sizeof shape), (long long)heads, ms, reps,
               flops / (ms * 1e-3) / 1e12);
        fflush(stdout);
    }
    rtx_tensor_unref(x);
    rtx_plan_free(plan);
    rtx_graph_free(b.g);
}

/* ------------------------------------------------------------------------------------------
 * Allocator: rtx_mem_pool over cudaMalloc/cudaFree against cudaMalloc/cudaFree
 * ---------------------------------------------------------------------------------------- */

static int cu_alloc(void *ctx, size_t bytes, void **ptr) {
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return RTX_ENOMEM;
    }
    return e == cudaSuccess ? 0 : RTX_EGPU;
}
static void cu_free(void *ctx, void *ptr) { (void)cudaFree(ptr); }
static int cu_event_create(void *ctx, void **event) {
    return cudaEventCreateWithFlags((cudaEvent_t *)event, cudaEventDisableTiming) == cudaSuccess
               ? 0 : RTX_EGPU;
}
static int cu_event_record(void *ctx, void *event, void *stream) {
    return cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream) == cudaSuccess ? 0
                                                                                    : RTX_EGPU;
}
static int cu_event_query(void *ctx, void *event) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : RTX_EGPU;
}
static void cu_event_destroy(void *ctx, void *event) { (void)cudaEventDestroy(event); }
static int cu_synchronize(void *ctx) {
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : RTX_EGPU;
}

static const struct rtx_mem_pool_device_i cu_iface = {
    .alloc = cu_alloc,
    .free = cu_free,
    .event_create = cu_event_create,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_destroy = cu_event_destroy,
    .synchronize = cu_synchronize,
};

#define SLOTS 256

/* Replays the trace through the pool, or cudaMalloc/cudaFree when pool is NULL; returns the
 * allocations plus frees done, or -1 on a failure. */
static long alloc_trace(struct rtx_mem_pool *pool, long ops, cudaStream_t stream) {
    void *slot[SLOTS] = {0};
    long done = 0;
    rng = UINT64_C(0x2545f4914f6cdd1d);
    for (long i = 0; i < ops; i++) {
        int k = (int)(rnd() % SLOTS);
        if (slot[k]) {
            if (pool)
                (void)rtx_mem_pool_release(pool, slot[k], NULL);
            else
                cu_free(NULL, slot[k]);
            slot[k] = NULL;
        } else {
            int bits = 9 + (int)(rnd() % 13); /* 512 B .. 4 MiB */
            size_t bytes = ((size_t)1 << bits) + (size_t)(rnd() % ((size_t)1 << bits));
            int rc = pool ? rtx_mem_pool_alloc(pool, bytes, stream, &slot[k], NULL)
                          : cu_alloc(NULL, bytes, &slot[k]);
            if (rc) return -1;
        }
        done++;
    }
    for (int k = 0; k < SLOTS; k++) {
        if (!slot[k]) continue;
        if (pool)
            (void)rtx_mem_pool_release(pool, slot[k], NULL);
        else
            cu_free(NULL, slot[k]);
    }
    return done;
}

static void alloc_case(void) {
    long raw_ops = quick ? 2000 : 20000, pool_ops = quick ? 200000 : 2000000;
    struct rtx_err err = {0};
    struct rtx_mem_pool *pool = NULL;
    struct rtx_mem_pool_config cfg = {.name = "bench"};
    cudaStream_t stream = NULL;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        printf("{\"name\": \"alloc\", \"error\": \"cudaStreamCreate failed\"}\n");
        return;
    }
    double t0 = now_s();
    long n_raw = alloc_trace(NULL, raw_ops, stream);
    double raw_s = now_s() - t0;
    int rc = rtx_mem_pool_new(&cu_iface, NULL, &cfg, &pool, &err);
    long n_pool = -1;
    double pool_s = 0;
    if (rc == 0 && alloc_trace(pool, pool_ops / 10, stream) >= 0) { /* warm the cache */
        t0 = now_s();
        n_pool = alloc_trace(pool, pool_ops, stream);
        pool_s = now_s() - t0;
    }
    if (n_raw < 0 || n_pool < 0) {
        printf("{\"name\": \"alloc\", \"error\": \"an allocation failed\"}\n");
    } else {
        printf("{\"name\": \"alloc\", \"shape\": \"512 B..4 MiB, 256 slots\", "
               "\"raw_ops_per_s\": %.0f, \"pool_ops_per_s\": %.0f, \"raw_ops\": %ld, "
               "\"pool_ops\": %ld}\n", (double)n_raw / raw_s, (double)n_pool / pool_s, n_raw,
               n_pool);
    }
    fflush(stdout);
    rtx_mem_pool_free(pool);
    (void)cudaStreamDestroy(stream);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else {
            fprintf(stderr, "usage: rtx-bench-gpu [--quick]\n");
            return 2;
        }
    }
    char why[256] = "";
    if (rtx_cuda_device_count(why, sizeof why, NULL) == 0) {
        printf("rtx-bench-gpu: skipped: no CUDA device (%s)\n", why);
        return 0;
    }
    struct rtx_err err = {0};
    struct rtx_cuda_options opt = {.device = 0};
    if (rtx_backend_cuda_new(&opt, &be, &err) != 0) {
        fprintf(stderr, "rtx-bench-gpu: %s\n", err.msg);
        return 1;
    }
    gemm_case(4096);
    if (!quick) gemm_case(8192);
    static const char *const mem_ops[3] = {"add", "layer_norm", "softmax"};
    static const enum rtx_dtype mem_dts[2] = {RTX_BF16, RTX_F32};
    int64_t rows = quick ? 4096 : 32768;
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < 2; d++) membound_case(mem_ops[o], mem_dts[d], rows, 4096);
    static const int64_t seqs[4] = {1024, 2048, 4096, 8192};
    for (int di = 0; di < 2; di++)
        for (int si = 0; si < (quick ? 1 : 4); si++)
            for (int causal = 0; causal < 2; causal++)
                attention_case(8, 16, seqs[si], di ? 128 : 64, causal);
    block_case(8, 512, 1024, 16, quick ? 10 : 50);
    alloc_case();
    rtx_backend_free(be);
    return 0;
}
