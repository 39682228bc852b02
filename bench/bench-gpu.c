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
 * It runs again device-resident (rtx_plan_execute_device: the input uploaded once, the output
 * left on the device), once replaying the plan's CUDA graph and once node by node on a backend
 * made with disable_graphs; each run ends with the executor's synchronize, as a job does.
 * The transfer case times rtx_backend_upload (chunked through pinned memory on the copy
 * stream) and rtx_backend_download (into a pinned block that becomes the host tensor) of
 * 64 MiB against plain cudaMemcpy from and to (already touched) pageable memory.
 * The allocator case replays one pseudo-random trace (256 slots; each step frees the slot's
 * block or allocates 512 B .. 4 MiB) through rtx_mem_pool over cudaMalloc/cudaFree and
 * through cudaMalloc/cudaFree directly.
 * Attention rows carry the route that ran ("route": RTX_ATTN_ROUTE, or "auto": the fused
 * kernel where it applies, docs/gpu.md). --attention-check DIR runs small attention cases
 * (odd lengths, causal, masks, f16 and bf16) through rtx_plan_execute on the GPU and writes
 * each case's inputs and output as raw little-endian files DIR/attn<i>_{q,k,v,mask,out}.bin
 * with one JSON line describing it, for bench_gpu.py to compare against PyTorch's SDPA.
 * Output: one JSON object per line. Without a CUDA device it prints that it skipped and exits 0.
 * Usage: rtx-bench-gpu [--quick] [--memory] [--attention] [--block] [--attention-check DIR]
 *   --quick: fewer and smaller cases; --memory: only the memory-bound cases (add, layer_norm,
 *   softmax); --attention: only the attention cases;
 *   --block: only the transformer block (all modes) and the transfers;
 *   --attention-check DIR: only the accuracy dump above.
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
#include "tests/gpu/block-graph.h"

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
    const char *route;         /* attention: JSON "route", or NULL */
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
        if (c->route) printf(", \"route\": \"%s\"", c->route);
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
    const char *route = getenv("RTX_ATTN_ROUTE");
    struct op_case c = {.name = "attention", .op = "attention", .out_dt = RTX_BF16,
                        .out_ndim = 4, .out_dims = {b, h, l, d}, .causal = causal,
                        .flops = flops, .route = route && *route ? route : "auto"};
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

/* The block device-resident: x uploaded once, y left on the device, on the graph-replaying
 * backend and on a node-by-node one; one JSON line each. */
static void block_device(const struct rtx_graph *g, const struct rtx_tensor *x, int64_t heads,
                         double flops, int reps) {
    struct rtx_err err = {0};
    struct rtx_backend *plain = NULL;
    struct rtx_cuda_options opt = {.device = 0, .disable_graphs = true};
    int rc = rtx_backend_cuda_new(&opt, &plain, &err);
    struct rtx_backend *bes[2] = {be, plain};
    for (int k = 0; k < 2 && rc == 0; k++) {
        struct rtx_tensor *dx = NULL, *y = NULL;
        struct rtx_plan *plan = NULL;
        struct rtx_exec_stats st = {0};
        rc = rtx_backend_upload(bes[k], x, &dx, &err);
        if (rc == 0)
            rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err);
        double t0 = 0;
        for (int r = -3; r < reps * 4 && rc == 0; r++) { /* three warm-up runs */
            if (r == 0) t0 = now_s();
            rtx_tensor_unref(y);
            y = NULL;
            rc = rtx_plan_execute_device(plan, bes[k], &dx, 1, &y, 1, NULL, &st, &err);
        }
        double ms = (now_s() - t0) * 1e3 / (reps * 4);
        if (rc == 0) {
            char shape[64];
            printf("{\"name\": \"block_device\", \"shape\": \"%s h%lld\", \"dtype\": "
                   "\"bf16\", \"ms\": %.4f, \"reps\": %d, \"tflops\": %.2f, \"mode\": "
                   "\"%s\"}\n", shape_of(x, shape, sizeof shape), (long long)heads, ms,
                   reps * 4, flops / (ms * 1e-3) / 1e12,
                   st.mode == RTX_EXEC_REPLAYED ? "graph replay" : "node by node");
            fflush(stdout);
        }
        rtx_tensor_unref(y);
        rtx_tensor_unref(dx);
        rtx_plan_free(plan);
    }
    if (rc) print_error("block_device", &err);
    rtx_backend_free(plain);
}

static void block_case(int64_t batch, int64_t seq, int64_t width, int64_t heads, int reps) {
    struct {
        struct rtx_graph *g;
        int rc;
        struct rtx_err err;
    } b = {0};
    int64_t ff = 4 * width;
    b.rc = block_graph_new(batch, seq, width, heads, rnd(), &b.g, &b.err);

    struct rtx_tensor *x = NULL, *y = NULL;
    struct rtx_plan *plan = NULL;
    struct rtx_exec_stats st = {0};
    if (b.rc == 0)
        b.rc = host_random(RTX_BF16, 3, (const int64_t[]){batch, seq, width}, 0, 1, &x, &b.err);
    if (b.rc == 0)
        b.rc = rtx_plan_new(b.g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &b.err);
    double t0 = 0, t1 = 0;
    for (int r = -3; r < reps && b.rc == 0; r++) { /* three warm-up runs */
        if (r == 0) t0 = now_s();
        b.rc = rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, &st, &b.err);
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
               "\"upload of x and download of y\", \"mode\": \"%s\"}\n",
               shape_of(x, shape, sizeof shape), (long long)heads, ms, reps,
               flops / (ms * 1e-3) / 1e12, st.mode == RTX_EXEC_REPLAYED ? "graph replay"
                                                                        : "node by node");
        fflush(stdout);
        block_device(b.g, x, heads, flops, reps);
    }
    rtx_tensor_unref(x);
    rtx_plan_free(plan);
    rtx_graph_free(b.g);
}

/* ------------------------------------------------------------------------------------------
 * Transfers: the backend's staged copies against plain cudaMemcpy of pageable memory
 * ---------------------------------------------------------------------------------------- */

static void transfer_case(int64_t bytes, int reps) {
    struct rtx_err err = {0};
    struct rtx_tensor *h = NULL, *d = NULL, *back = NULL, *page = NULL;
    int64_t n = bytes / 2;
    void *raw = NULL;
    double t_up = 0, t_down = 0, t_raw_up = 0, t_raw_down = 0;
    int rc = host_random(RTX_BF16, 1, &n, 0, 1, &h, &err);
    if (rc == 0) rc = host_random(RTX_BF16, 1, &n, 0, 1, &page, &err); /* touched pageable */
    if (rc == 0 && cudaMalloc(&raw, (size_t)bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = rtx_err_set(&err, RTX_EGPU, "cudaMalloc of %lld bytes", (long long)bytes);
    }
    for (int r = -1; r < reps && rc == 0; r++) { /* one warm-up */
        double t0 = now_s();
        rtx_tensor_unref(d);
        d = NULL;
        rc = rtx_backend_upload(be, h, &d, &err);
        if (rc == 0) rc = rtx_backend_synchronize(be, &err);
        double t1 = now_s();
        rtx_tensor_unref(back);
        back = NULL;
        if (rc == 0) rc = rtx_backend_download(be, d, &back, &err);
        double t2 = now_s();
        if (rc == 0 && cudaMemcpy(raw, rtx_tensor_data(h), (size_t)bytes,
                                  cudaMemcpyHostToDevice) != cudaSuccess)
            rc = rtx_err_set(&err, RTX_EGPU, "cudaMemcpy to the device");
        double t3 = now_s();
        if (rc == 0 && cudaMemcpy(rtx_tensor_data(page), raw, (size_t)bytes,
                                  cudaMemcpyDeviceToHost) != cudaSuccess)
            rc = rtx_err_set(&err, RTX_EGPU, "cudaMemcpy to the host");
        double t4 = now_s();
        if (r >= 0) {
            t_up += t1 - t0;
            t_down += t2 - t1;
            t_raw_up += t3 - t2;
            t_raw_down += t4 - t3;
        }
    }
    if (rc == 0) {
        double gb = (double)bytes * reps / 1e9;
        printf("{\"name\": \"transfer\", \"shape\": \"%lld MiB pageable host\", "
               "\"upload_gbps\": %.2f, \"download_gbps\": %.2f, \"raw_upload_gbps\": %.2f, "
               "\"raw_download_gbps\": %.2f, \"bytes\": %lld}\n", (long long)(bytes >> 20),
               gb / t_up, gb / t_down, gb / t_raw_up, gb / t_raw_down, (long long)bytes);
        fflush(stdout);
    } else {
        print_error("transfer", &err);
    }
    if (raw) (void)cudaFree(raw);
    rtx_tensor_unref(h);
    rtx_tensor_unref(page);
    rtx_tensor_unref(d);
    rtx_tensor_unref(back);
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

/* ------------------------------------------------------------------------------------------
 * --attention-check DIR: inputs and GPU outputs of small attention cases, for bench_gpu.py.
 * ---------------------------------------------------------------------------------------- */

/* Writes t's bytes to DIR/attn<i>_<what>.bin; 0 or -1 (printed). */
static int write_raw(const char *dir, int i, const char *what, const struct rtx_tensor *t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/attn%d_%s.bin", dir, i, what);
    FILE *f = fopen(path, "wb");
    size_t n = rtx_tensor_nbytes(t);
    bool ok = f && fwrite(rtx_tensor_data(t), 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "rtx-bench-gpu: cannot write %s\n", path);
    return ok ? 0 : -1;
}

/* One case: q [b,h,lq,d], k/v [b,h,lk,d]; mask 0 none, 1 bool [lk] (the first 3/4 of the keys,
 * at least one), 2 additive [b,1,lq,lk] (-inf at 20%, else in (-1, 0]). */
static void attention_check_case(const char *dir, int i, enum rtx_dtype dt, int64_t b,
                                 int64_t h, int64_t lq, int64_t lk, int64_t d, int causal,
                                 int mask) {
    static const char *const names[4] = {"q", "k", "v", "mask"};
    static const char *const mask_names[3] = {"none", "bool", "additive"};
    struct rtx_err err = {0};
    struct rtx_tensor *in[4] = {NULL, NULL, NULL, NULL}, *out = NULL;
    struct rtx_graph *g = NULL;
    struct rtx_plan *plan = NULL;
    int n_in = mask ? 4 : 3;
    int64_t qd[4] = {b, h, lq, d}, kd[4] = {b, h, lk, d}, md[4] = {b, 1, lq, lk};
    int rc = rtx_tensor_new(dt, 4, qd, &in[0], &err);
    if (rc == 0) rc = rtx_tensor_new(dt, 4, kd, &in[1], &err);
    if (rc == 0) rc = rtx_tensor_new(dt, 4, kd, &in[2], &err);
    if (rc == 0 && mask == 1) rc = rtx_tensor_new(RTX_BOOL, 1, &lk, &in[3], &err);
    if (rc == 0 && mask == 2) rc = rtx_tensor_new(dt, 4, md, &in[3], &err);
    for (int k = 0; k < n_in && rc == 0; k++) {
        int64_t n = rtx_tensor_numel(in[k]);
        for (int64_t e = 0; e < n; e++) {
            double u = (uniform() + 1.0) / 2.0; /* [0, 1) */
            double v = 2.0 * u - 1.0;
            if (k == 3 && mask == 1) v = (e % lk) == 0 || (e % lk) < (3 * lk) / 4;
            if (k == 3 && mask == 2) v = u < 0.2 ? -INFINITY : -u;
            rtx_tensor_set(in[k], e, v);
        }
    }
    if (rc == 0) rc = rtx_graph_new("attention_check", &g, &err);
    /* the graph calls return an index (>= 0) or an error (< 0) */
    for (int k = 0; k < n_in && rc >= 0; k++)
        rc = rtx_graph_add_input(g, names[k], in[k]->dtype, in[k]->ndim, in[k]->dims, &err);
    const char *out_name = "y";
    int node = rc < 0 ? rc
                      : rtx_graph_add_node(g, "attention", "att", names, n_in, &out_name, 1,
                                           &err);
    rc = node < 0 ? node : 0;
    if (rc == 0 && (rc = rtx_graph_set_attr_int(g, node, "causal", causal, &err)) > 0) rc = 0;
    if (rc == 0 && (rc = rtx_graph_add_output(g, "y", &err)) > 0) rc = 0;
    if (rc == 0)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, n_in, NULL, &plan, &err);
    if (rc == 0 && (rc = rtx_plan_execute(plan, be, in, n_in, &out, 1, NULL, NULL, &err)) > 0)
        rc = 0;
    for (int k = 0; k < n_in && rc == 0; k++) rc = write_raw(dir, i, names[k], in[k]);
    if (rc == 0) rc = write_raw(dir, i, "out", out);
    if (rc == 0) {
        printf("{\"name\": \"attention_check\", \"case\": %d, \"dtype\": \"%s\", \"b\": %lld, "
               "\"h\": %lld, \"lq\": %lld, \"lk\": %lld, \"d\": %lld, \"causal\": %d, "
               "\"mask\": \"%s\", \"prefix\": \"%s/attn%d_\"}\n",
               i, rtx_dtype_name(dt), (long long)b, (long long)h, (long long)lq, (long long)lk,
               (long long)d, causal, mask_names[mask], dir, i);
        fflush(stdout);
    } else if (err.msg[0]) {
        print_error("attention_check", &err);
    } else {
        printf("{\"name\": \"attention_check\", \"error\": \"case %d: writing failed\"}\n", i);
    }
    rtx_tensor_unref(out);
    rtx_plan_free(plan);
    rtx_graph_free(g);
    for (int k = 0; k < 4; k++) rtx_tensor_unref(in[k]);
}

static void attention_check(const char *dir) {
    static const enum rtx_dtype dts[2] = {RTX_BF16, RTX_F16};
    static const int64_t lens[][2] = {{1, 17}, {17, 17}, {127, 1000}, {1000, 127}, {257, 257}};
    int i = 0;
    for (int di = 0; di < 2; di++)
        for (int64_t d = 64; d <= 128; d += 64)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                int64_t lq = lens[li][0], lk = lens[li][1];
                attention_check_case(dir, i++, dts[di], 2, 3, lq, lk, d, 0, 0);
                attention_check_case(dir, i++, dts[di], 2, 3, lq, lk, d, 1, 0);
                attention_check_case(dir, i++, dts[di], 2, 3, lq, lk, d, 0, 1 + (int)(li % 2));
            }
}

int main(int argc, char **argv) {
    bool only_attention = false, only_block = false, only_memory = false;
    const char *check_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--memory") == 0) {
            only_memory = true;
        } else if (strcmp(argv[i], "--attention") == 0) {
            only_attention = true;
        } else if (strcmp(argv[i], "--block") == 0) {
            only_block = true;
        } else if (strcmp(argv[i], "--attention-check") == 0 && i + 1 < argc) {
            check_dir = argv[++i];
        } else {
            fprintf(stderr,
                    "usage: rtx-bench-gpu [--quick] [--memory] [--attention] [--block] "
                    "[--attention-check DIR]\n");
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
    if (check_dir) {
        attention_check(check_dir);
        rtx_backend_free(be);
        return 0;
    }
    if (only_block) { /* the block and the transfers only */
        block_case(8, 512, 1024, 16, quick ? 10 : 50);
        transfer_case((int64_t)64 << 20, quick ? 3 : 10);
        rtx_backend_free(be);
        return 0;
    }
    if (!only_attention) {
        if (!only_memory) gemm_case(4096);
        if (!quick && !only_memory) gemm_case(8192);
        static const char *const mem_ops[3] = {"add", "layer_norm", "softmax"};
        static const enum rtx_dtype mem_dts[2] = {RTX_BF16, RTX_F32};
        int64_t rows = quick ? 4096 : 32768;
        for (int o = 0; o < 3; o++)
            for (int d = 0; d < 2; d++) membound_case(mem_ops[o], mem_dts[d], rows, 4096);
        if (only_memory) { /* the memory-bound cases only */
            rtx_backend_free(be);
            return 0;
        }
    }
    static const int64_t seqs[4] = {1024, 2048, 4096, 8192};
    for (int di = 0; di < 2; di++)
        for (int si = 0; si < (quick ? 1 : 4); si++)
            for (int causal = 0; causal < 2; causal++)
                attention_case(8, 16, seqs[si], di ? 128 : 64, causal);
    if (!only_attention) {
        block_case(8, 512, 1024, 16, quick ? 10 : 50);
        transfer_case((int64_t)64 << 20, quick ? 3 : 10);
        alloc_case();
    }
    rtx_backend_free(be);
    return 0;
}
