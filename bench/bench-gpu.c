/*
 * bench-gpu.c - the rtxd side of the GPU benchmark (bench/bench_gpu.py times PyTorch beside
 * it): GEMM, memory-bound ops, attention, a bf16 transformer block, host<->device transfers
 * and the caching device allocator, each a case of bench/bench-driver.h.
 *
 * DESIGN
 * Every case is prepared once (graph built with the runtime's builder, inputs uploaded,
 * output buffers preallocated, two warm-up runs) and then timed by the driver in windows of
 * back-to-back runs between two synchronizations, the same method bench_gpu.py applies to
 * PyTorch, window for window, alternating. A run queues its work and returns; the window's
 * closing synchronize waits for it, so launch overhead counts on both sides.
 * - Op cases are one-node graphs run through rtx_backend_run_node. Bytes are what the op must
 *   read and write once; FLOPs are 2*M*N*K for GEMM and 4*B*H*L^2*D for attention (halved when
 *   causal, as FlashAttention and PyTorch count). An attention case's route is the one the
 *   backend reports it took (rtx_backend_cuda_attention_route), not the one asked for.
 * - The transformer block (tests/gpu/block-graph.h) runs through rtx_plan_execute (x
 *   uploaded from pageable memory and y downloaded into pinned memory every run: "block_io")
 *   and device-resident through rtx_plan_execute_device, once on the graph-replaying backend
 *   and once on a backend made with disable_graphs (route "graph replay" / "node by node").
 *   Each plan execution ends with the executor's synchronize, as a job's does; bench_gpu.py
 *   judges the device-resident rows against PyTorch runs that synchronize too.
 * - Transfers of 64 MiB: rtx_backend_upload from pageable host memory (staged through pinned
 *   chunks on the copy stream) and synchronized, as PyTorch's copy_ from pageable memory is,
 *   and rtx_backend_download into the backend's pinned pool (it returns when the copy is done).
 * - The allocator: one pseudo-random trace (256 slots; a step frees the slot's block or
 *   allocates 512 B .. 4 MiB) per run, through rtx_mem_pool over cudaMalloc/cudaFree, through
 *   cudaMallocAsync/cudaFreeAsync on the device's default memory pool with its release
 *   threshold raised so it keeps its memory (its warm state), and through cudaMalloc/cudaFree
 *   directly. The warm-up runs in prepare fill both caches first.
 * --attention-check DIR runs small attention cases (odd lengths, causal, masks, f16 and bf16)
 * through rtx_plan_execute and writes each case's inputs and output as raw little-endian
 * files DIR/attn<i>_{q,k,v,mask,out}.bin with one JSON line describing it, for bench_gpu.py to
 * compare against PyTorch's SDPA.
 * Usage: rtx-bench-gpu [--serve] [--quick] [--memory] [--attention] [--block] [--alloc]
 *                      [--windows N] [--attention-check DIR]
 *   --serve: the driver's command loop (bench_gpu.py); otherwise every selected case is timed
 *   alone and printed as one JSON line. --quick: fewer and smaller cases; --memory,
 *   --attention, --block (block and transfers), --alloc: only those cases.
 * Exit status: 0; 1 when a case failed (alone), a command was malformed (--serve) or an
 * installed driver failed; 3 when there is no CUDA device (the reason printed as
 * {"error": ...}).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench/bench-driver.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "runtime/mem-pool.h"
#include "tests/gpu/block-graph.h"

static struct rtx_backend *be;
static bool quick;
static uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);

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

static int be_sync(struct bench_case *c, struct rtx_err *err) {
    return rtx_backend_synchronize(be, err);
}

/* ------------------------------------------------------------------------------------------
 * One-node op cases: GEMM, add / layer_norm / softmax, attention
 * ---------------------------------------------------------------------------------------- */

enum op_kind { OP_GEMM, OP_ADD, OP_LAYER_NORM, OP_SOFTMAX, OP_ATTENTION };

struct op_case {
    enum op_kind kind;
    enum rtx_dtype dt;
    int64_t dims[4];            /* gemm: n; membound: rows, cols; attention: b, h, l, d */
    bool causal;
    int n_in;
    struct rtx_tensor *in[3];   /* host inputs */
    struct rtx_tensor *dev[3];  /* the same on the device */
    struct rtx_tensor *y;       /* the preallocated output */
    struct rtx_graph *g;
    struct rtx_node_args args;
};

/* The host inputs of a case, with its FLOPs and bytes. */
static int op_inputs(struct bench_case *c, struct op_case *o, struct rtx_err *err) {
    int rc = 0;
    const int64_t *d = o->dims;
    size_t es = rtx_dtype_size(o->dt);
    switch (o->kind) {
    case OP_GEMM: {
        int64_t nn[2] = {d[0], d[0]};
        rc = host_random(o->dt, 2, nn, 0, 1, &o->in[o->n_in++], err);
        if (rc == 0)
            rc = host_random(o->dt, 2, nn, 0, 1.0f / sqrtf((float)d[0]), &o->in[o->n_in++],
                             err);
        c->flops = 2.0 * (double)d[0] * (double)d[0] * (double)d[0];
        return rc;
    }
    case OP_ADD:
    case OP_LAYER_NORM:
    case OP_SOFTMAX: {
        double x_bytes = (double)d[0] * (double)d[1] * (double)es;
        rc = host_random(o->dt, 2, d, 0, 1, &o->in[o->n_in++], err);
        if (rc == 0 && o->kind != OP_SOFTMAX)
            rc = host_random(o->dt, 1, &d[1], o->kind == OP_LAYER_NORM ? 1 : 0,
                             o->kind == OP_LAYER_NORM ? 0.1f : 1, &o->in[o->n_in++], err);
        if (rc == 0 && o->kind == OP_LAYER_NORM)
            rc = host_random(o->dt, 1, &d[1], 0, 0.1f, &o->in[o->n_in++], err);
        c->bytes = 2 * x_bytes + (double)(o->n_in - 1) * (double)d[1] * (double)es;
        return rc;
    }
    case OP_ATTENTION:
        for (int i = 0; i < 3 && rc == 0; i++)
            rc = host_random(o->dt, 4, d, 0, 1, &o->in[o->n_in++], err);
        c->flops = 4.0 * (double)(d[0] * d[1]) * (double)d[2] * (double)d[2] * (double)d[3] /
                   (o->causal ? 2 : 1);
        return rc;
    }
    return rtx_err_set(err, RTX_EINVAL, "unknown case");
}

static int op_prepare(struct bench_case *c, struct rtx_err *err) {
    static const char *const in_names[3] = {"a", "b", "c"};
    static const char *const ops[] = {"matmul", "add", "layer_norm", "softmax", "attention"};
    struct op_case *o = c->state;
    const char *op = ops[o->kind];
    int rc = op_inputs(c, o, err);
    if (rc == 0) rc = rtx_graph_new(c->name, &o->g, err);
    for (int i = 0; i < o->n_in && rc >= 0; i++)
        rc = rtx_graph_add_input(o->g, in_names[i], o->in[i]->dtype, o->in[i]->ndim,
                                 o->in[i]->dims, err);
    const char *out_name = "y";
    int node = rc < 0 ? rc : rtx_graph_add_node(o->g, op, op, in_names, o->n_in, &out_name, 1,
                                                err);
    rc = node < 0 ? node : 0;
    if (rc == 0 && o->kind == OP_ATTENTION)
        rc = rtx_graph_set_attr_int(o->g, node, "causal", o->causal, err);
    if (rc == 0) rc = rtx_graph_add_output(o->g, "y", err);
    for (int i = 0; i < o->n_in && rc == 0; i++)
        rc = rtx_backend_upload(be, o->in[i], &o->dev[i], err);
    /* the output: shaped like the first input (GEMM's operands are square) */
    const struct rtx_tensor *x = o->in[0];
    struct rtx_buffer *buf = NULL;
    if (rc == 0) rc = rtx_backend_buffer_new(be, rtx_tensor_nbytes(x), &buf, err);
    if (rc == 0) rc = rtx_tensor_from_buffer(buf, 0, x->dtype, x->ndim, x->dims, &o->y, err);
    rtx_buffer_unref(buf);
    if (rc) return rc;
    o->args = (struct rtx_node_args){.graph = o->g, .node = &o->g->nodes[node],
                                     .n_in = o->n_in, .in = o->dev, .n_out = 1, .out = &o->y};
    for (int r = 0; r < 2 && rc == 0; r++) rc = rtx_backend_run_node(be, &o->args, err);
    if (rc == 0) rc = rtx_backend_synchronize(be, err);
    if (rc) return rc;
    if (o->kind == OP_GEMM) snprintf(c->route, sizeof c->route, "cuBLASLt");
    else if (o->kind == OP_ATTENTION)
        snprintf(c->route, sizeof c->route, "%s", rtx_backend_cuda_attention_route(be));
    else snprintf(c->route, sizeof c->route, "rtxd %s kernel", op);
    return 0;
}

static int op_run(struct bench_case *c, struct rtx_err *err) {
    struct op_case *o = c->state;
    return rtx_backend_run_node(be, &o->args, err);
}

static void op_release(struct bench_case *c) {
    struct op_case *o = c->state;
    for (int i = 0; i < o->n_in; i++) {
        rtx_tensor_unref(o->in[i]);
        rtx_tensor_unref(o->dev[i]);
        o->in[i] = o->dev[i] = NULL;
    }
    o->n_in = 0;
    rtx_tensor_unref(o->y);
    o->y = NULL;
    rtx_graph_free(o->g);
    o->g = NULL;
}

static const struct bench_case_i op_iface = {
    .prepare = op_prepare, .run = op_run, .sync = be_sync, .release = op_release,
};

/* ------------------------------------------------------------------------------------------
 * The transformer block: pre-LayerNorm, causal attention, tanh-GELU MLP (block-graph.h), bf16
 * ---------------------------------------------------------------------------------------- */

enum block_mode { BLOCK_IO, BLOCK_REPLAY, BLOCK_NODES };

struct block_case {
    enum block_mode mode;
    int64_t batch, seq, width, heads;
    struct rtx_backend *be;     /* be, or a backend without graphs (BLOCK_NODES, owned) */
    struct rtx_graph *g;
    struct rtx_plan *plan;
    struct rtx_tensor *x;       /* host (pageable) */
    struct rtx_tensor *dx;      /* x on the device (device-resident modes) */
    struct rtx_tensor *y;       /* the last output */
    struct rtx_exec_stats st;
};

static int block_run(struct bench_case *c, struct rtx_err *err) {
    struct block_case *k = c->state;
    rtx_tensor_unref(k->y);
    k->y = NULL;
    if (k->mode == BLOCK_IO)
        return rtx_plan_execute(k->plan, k->be, &k->x, 1, &k->y, 1, NULL, &k->st, err);
    return rtx_plan_execute_device(k->plan, k->be, &k->dx, 1, &k->y, 1, NULL, &k->st, err);
}

static int block_sync(struct bench_case *c, struct rtx_err *err) {
    struct block_case *k = c->state;
    return rtx_backend_synchronize(k->be, err);
}

static int block_prepare(struct bench_case *c, struct rtx_err *err) {
    struct block_case *k = c->state;
    int rc = 0;
    k->be = be;
    if (k->mode == BLOCK_NODES) {
        struct rtx_cuda_options opt = {.device = 0, .disable_graphs = true};
        rc = rtx_backend_cuda_new(&opt, &k->be, err);
    }
    if (rc == 0) rc = block_graph_new(k->batch, k->seq, k->width, k->heads, rnd(), &k->g, err);
    if (rc == 0)
        rc = host_random(RTX_BF16, 3, (const int64_t[]){k->batch, k->seq, k->width}, 0, 1,
                         &k->x, err);
    if (rc == 0)
        rc = rtx_plan_new(k->g, (const struct rtx_tensor *const *)&k->x, 1, NULL, &k->plan,
                          err);
    if (rc == 0 && k->mode != BLOCK_IO) rc = rtx_backend_upload(k->be, k->x, &k->dx, err);
    for (int r = 0; r < 3 && rc == 0; r++) rc = block_run(c, err); /* capture, then replays */
    if (rc) return rc;
    /* matmul FLOPs: q, k, v, o (4 w^2) and the MLP (2 w ff) per token, attention causal */
    double tokens = (double)(k->batch * k->seq), w = (double)k->width;
    c->flops = 2.0 * tokens * (4.0 * w * w + 2.0 * w * 4.0 * w) + 2.0 * tokens *
               (double)k->seq * w;
    snprintf(c->route, sizeof c->route, "%s%s",
             k->st.mode == RTX_EXEC_REPLAYED ? "graph replay" : "node by node",
             k->mode == BLOCK_IO ? ", x from pageable, y to pinned" : "");
    return 0;
}

static void block_release(struct bench_case *c) {
    struct block_case *k = c->state;
    rtx_tensor_unref(k->y);
    rtx_tensor_unref(k->dx);
    rtx_tensor_unref(k->x);
    rtx_plan_free(k->plan);
    rtx_graph_free(k->g);
    if (k->be != be) rtx_backend_free(k->be);
    k->y = k->dx = k->x = NULL;
    k->plan = NULL;
    k->g = NULL;
    k->be = NULL;
}

static const struct bench_case_i block_iface = {
    .prepare = block_prepare, .run = block_run, .sync = block_sync, .release = block_release,
};

/* ------------------------------------------------------------------------------------------
 * Transfers: upload from pageable memory, download into the backend's pinned pool
 * ---------------------------------------------------------------------------------------- */

struct transfer_case {
    bool download;
    int64_t bytes;
    struct rtx_tensor *host, *dev, *back;
};

static int transfer_run(struct bench_case *c, struct rtx_err *err) {
    struct transfer_case *t = c->state;
    if (!t->download) { /* synchronized per run, as PyTorch's pageable copy_ is */
        rtx_tensor_unref(t->dev);
        t->dev = NULL;
        int rc = rtx_backend_upload(be, t->host, &t->dev, err);
        return rc ? rc : rtx_backend_synchronize(be, err);
    }
    rtx_tensor_unref(t->back);
    t->back = NULL;
    return rtx_backend_download(be, t->dev, &t->back, err);
}

static int transfer_prepare(struct bench_case *c, struct rtx_err *err) {
    struct transfer_case *t = c->state;
    int64_t n = t->bytes / 2;
    int rc = host_random(RTX_BF16, 1, &n, 0, 1, &t->host, err); /* touched pageable memory */
    if (rc == 0) rc = rtx_backend_upload(be, t->host, &t->dev, err);
    for (int r = 0; r < 2 && rc == 0; r++) rc = transfer_run(c, err);
    if (rc == 0) rc = rtx_backend_synchronize(be, err);
    c->bytes = (double)t->bytes;
    snprintf(c->route, sizeof c->route, "%s",
             t->download ? "device to the pinned pool" : "pageable through pinned chunks");
    return rc;
}

static void transfer_release(struct bench_case *c) {
    struct transfer_case *t = c->state;
    rtx_tensor_unref(t->host);
    rtx_tensor_unref(t->dev);
    rtx_tensor_unref(t->back);
    t->host = t->dev = t->back = NULL;
}

static const struct bench_case_i transfer_iface = {
    .prepare = transfer_prepare, .run = transfer_run, .sync = be_sync,
    .release = transfer_release,
};

/* ------------------------------------------------------------------------------------------
 * Allocator: rtx_mem_pool over cudaMalloc/cudaFree, warm cudaMallocAsync, cudaMalloc/cudaFree
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
#define TRACE_SEED UINT64_C(0x2545f4914f6cdd1d)

enum alloc_kind { ALLOC_POOL, ALLOC_ASYNC, ALLOC_CUDAMALLOC };

struct alloc_case {
    enum alloc_kind kind;
    long ops;                   /* allocations plus frees per run */
    struct rtx_mem_pool *pool;
    cudaStream_t stream;
    cudaMemPool_t mp;           /* ALLOC_ASYNC: the device's default pool, else NULL */
    uint64_t old_threshold;     /* its release threshold before prepare, bytes */
};

static int trace_alloc(struct alloc_case *a, size_t bytes, void **p) {
    switch (a->kind) {
    case ALLOC_POOL: return rtx_mem_pool_alloc(a->pool, bytes, a->stream, p, NULL);
    case ALLOC_ASYNC: return cudaMallocAsync(p, bytes, a->stream) == cudaSuccess ? 0 : RTX_EGPU;
    case ALLOC_CUDAMALLOC: return cu_alloc(NULL, bytes, p);
    }
    return RTX_EINVAL;
}

static void trace_free(struct alloc_case *a, void *p) {
    switch (a->kind) {
    case ALLOC_POOL: (void)rtx_mem_pool_release(a->pool, p, NULL); break;
    case ALLOC_ASYNC: (void)cudaFreeAsync(p, a->stream); break;
    case ALLOC_CUDAMALLOC: cu_free(NULL, p); break;
    }
}

/* One pass of the trace (bench_gpu.py's alloc_trace replays the same one through PyTorch):
 * xorshift64 from TRACE_SEED; a step picks a slot, frees its block if it holds one, else
 * allocates 2^bits + (r mod 2^bits) bytes with bits in 9 .. 21; what is left is freed. */
static int alloc_run(struct bench_case *c, struct rtx_err *err) {
    struct alloc_case *a = c->state;
    void *slot[SLOTS] = {0};
    uint64_t s = TRACE_SEED;
#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
    int rc = 0;
    for (long i = 0; i < a->ops && rc == 0; i++) {
        int k = (int)(NEXT() % SLOTS);
        if (slot[k]) {
            trace_free(a, slot[k]);
            slot[k] = NULL;
        } else {
            int bits = 9 + (int)(NEXT() % 13);
            size_t bytes = ((size_t)1 << bits) + (size_t)(NEXT() % ((size_t)1 << bits));
            rc = trace_alloc(a, bytes, &slot[k]);
        }
    }
#undef NEXT
    for (int k = 0; k < SLOTS; k++)
        if (slot[k]) trace_free(a, slot[k]);
    return rc ? rtx_err_set(err, rc, "%s: an allocation failed", c->name) : 0;
}

static int alloc_sync(struct bench_case *c, struct rtx_err *err) {
    struct alloc_case *a = c->state;
    return cudaStreamSynchronize(a->stream) == cudaSuccess
               ? 0 : rtx_err_set(err, RTX_EGPU, "cudaStreamSynchronize");
}

static int alloc_prepare(struct bench_case *c, struct rtx_err *err) {
    struct alloc_case *a = c->state;
    static const char *const routes[] = {
        "rtx_mem_pool over cudaMalloc", "cudaMallocAsync, default pool kept warm",
        "cudaMalloc/cudaFree"};
    if (cudaStreamCreateWithFlags(&a->stream, cudaStreamNonBlocking) != cudaSuccess)
        return rtx_err_set(err, RTX_EGPU, "cudaStreamCreate");
    int rc = 0;
    if (a->kind == ALLOC_POOL) {
        struct rtx_mem_pool_config cfg = {.name = "bench"};
        rc = rtx_mem_pool_new(&cu_iface, NULL, &cfg, &a->pool, err);
    } else if (a->kind == ALLOC_ASYNC) {
        uint64_t keep = UINT64_MAX;
        cudaMemPool_t mp;
        if (cudaDeviceGetDefaultMemPool(&mp, 0) != cudaSuccess ||
            cudaMemPoolGetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &a->old_threshold) !=
                cudaSuccess ||
            cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
            rc = rtx_err_set(err, RTX_EGPU, "the default memory pool's release threshold");
        else
            a->mp = mp;
    }
    for (int r = 0; r < 2 && rc == 0; r++) rc = alloc_run(c, err); /* fills the caches */
    if (rc == 0) rc = alloc_sync(c, err);
    snprintf(c->route, sizeof c->route, "%s", routes[a->kind]);
    snprintf(c->shape, sizeof c->shape, "%ld ops: 512 B..4 MiB, %d slots", a->ops, SLOTS);
    return rc;
}

static void alloc_release(struct bench_case *c) {
    struct alloc_case *a = c->state;
    rtx_mem_pool_free(a->pool);
    a->pool = NULL;
    if (a->stream) (void)cudaStreamSynchronize(a->stream);
    if (a->mp) { /* the default pool as it was, its cached memory returned */
        (void)cudaMemPoolSetAttribute(a->mp, cudaMemPoolAttrReleaseThreshold, &a->old_threshold);
        (void)cudaMemPoolTrimTo(a->mp, 0);
        a->mp = NULL;
    }
    if (a->stream) (void)cudaStreamDestroy(a->stream);
    a->stream = NULL;
}

static const struct bench_case_i alloc_iface = {
    .prepare = alloc_prepare, .run = alloc_run, .sync = alloc_sync, .release = alloc_release,
};

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
        printf("{\"name\": \"attention_check\", \"error\": \"");
        bench_json_escape(stdout, err.msg);
        printf("\"}\n");
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

/* ------------------------------------------------------------------------------------------
 * The case table
 * ---------------------------------------------------------------------------------------- */

#define MAX_CASES 64

static struct bench_case cases[MAX_CASES];
static int n_cases;
static struct op_case op_states[MAX_CASES];
static struct block_case block_states[3];
static struct transfer_case transfer_states[2];
static struct alloc_case alloc_states[3];

static struct bench_case *add_case(const char *name, enum rtx_dtype dt,
                                   const struct bench_case_i *iface, void *state, int reps) {
    struct bench_case *c = &cases[n_cases++];
    bench_case_init(c, name, rtx_dtype_name(dt), iface, state);
    c->reps = reps;
    return c;
}

static void add_op(enum op_kind kind, enum rtx_dtype dt, const int64_t *dims, bool causal,
                   int reps) {
    static const char *const names[] = {"gemm", "add", "layer_norm", "softmax", "attention"};
    struct op_case *o = &op_states[n_cases];
    *o = (struct op_case){.kind = kind, .dt = dt, .causal = causal};
    memcpy(o->dims, dims, sizeof o->dims);
    struct bench_case *c = add_case(names[kind], dt, &op_iface, o, reps);
    long long d[4] = {(long long)dims[0], (long long)dims[1], (long long)dims[2],
                      (long long)dims[3]};
    if (kind == OP_GEMM)
        snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld", d[0], d[0], d[0]);
    else if (kind == OP_ATTENTION)
        snprintf(c->shape, sizeof c->shape, "b%lld h%lld l%lld d%lld%s", d[0], d[1], d[2],
                 d[3], causal ? " causal" : "");
    else
        snprintf(c->shape, sizeof c->shape, "%lldx%lld", d[0], d[1]);
}

static void add_block(enum block_mode mode, int reps) {
    static const char *const names[] = {"block_io", "block_device", "block_device"};
    struct block_case *k = &block_states[mode];
    *k = (struct block_case){.mode = mode, .batch = 8, .seq = 512, .width = 1024, .heads = 16};
    struct bench_case *c = add_case(names[mode], RTX_BF16, &block_iface, k, reps);
    snprintf(c->shape, sizeof c->shape, "[%lld,%lld,%lld] h%lld", (long long)k->batch,
             (long long)k->seq, (long long)k->width, (long long)k->heads);
}

static void add_transfers(int reps) {
    static const char *const names[2] = {"upload", "download"};
    for (int i = 0; i < 2; i++) {
        transfer_states[i] = (struct transfer_case){.download = i == 1, .bytes = 64 << 20};
        struct bench_case *c = add_case(names[i], RTX_BF16, &transfer_iface,
                                        &transfer_states[i], reps);
        snprintf(c->shape, sizeof c->shape, "64 MiB");
    }
}

static void add_allocs(void) {
    static const char *const names[3] = {"alloc_pool", "alloc_async", "alloc_cudamalloc"};
    for (int i = 0; i < 3; i++) {
        alloc_states[i] = (struct alloc_case){.kind = (enum alloc_kind)i,
                                              .ops = i == ALLOC_CUDAMALLOC ? 500 : 20000};
        struct bench_case *c = add_case(names[i], RTX_U8, &alloc_iface, &alloc_states[i], 3);
        snprintf(c->shape, sizeof c->shape, "%ld ops", alloc_states[i].ops);
    }
}

static void add_cases(bool memory, bool attention, bool block, bool alloc) {
    bool all = !memory && !attention && !block && !alloc;
    if (all) {
        add_op(OP_GEMM, RTX_BF16, (const int64_t[4]){4096}, false, 50);
        if (!quick) add_op(OP_GEMM, RTX_BF16, (const int64_t[4]){8192}, false, 20);
    }
    if (all || memory) {
        static const enum op_kind ops[3] = {OP_ADD, OP_LAYER_NORM, OP_SOFTMAX};
        static const enum rtx_dtype dts[2] = {RTX_BF16, RTX_F32};
        for (int o = 0; o < 3; o++)
            for (int d = 0; d < 2; d++)
                add_op(ops[o], dts[d], (const int64_t[4]){quick ? 4096 : 32768, 4096}, false,
                       30);
    }
    if (all || attention) {
        static const int64_t seqs[4] = {1024, 2048, 4096, 8192};
        for (int di = 0; di < 2; di++)
            for (int si = 0; si < (quick ? 1 : 4); si++)
                for (int causal = 0; causal < 2; causal++)
                    add_op(OP_ATTENTION, RTX_BF16,
                           (const int64_t[4]){8, 16, seqs[si], di ? 128 : 64}, causal,
                           seqs[si] >= 4096 ? 5 : 20);
    }
    if (all || block) {
        add_block(BLOCK_IO, 20);
        add_block(BLOCK_REPLAY, 50);
        add_block(BLOCK_NODES, 50);
        add_transfers(10);
    }
    if (all || alloc) add_allocs();
}

int main(int argc, char **argv) {
    bool serve = false, memory = false, attention = false, block = false, alloc = false;
    int windows = 5;
    const char *check_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--serve") == 0) serve = true;
        else if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--memory") == 0) memory = true;
        else if (strcmp(argv[i], "--attention") == 0) attention = true;
        else if (strcmp(argv[i], "--block") == 0) block = true;
        else if (strcmp(argv[i], "--alloc") == 0) alloc = true;
        else if (strcmp(argv[i], "--windows") == 0 && i + 1 < argc) windows = atoi(argv[++i]);
        else if (strcmp(argv[i], "--attention-check") == 0 && i + 1 < argc)
            check_dir = argv[++i];
        else {
            fprintf(stderr, "usage: rtx-bench-gpu [--serve] [--quick] [--memory] [--attention] "
                            "[--block] [--alloc] [--windows N] [--attention-check DIR]\n");
            return 2;
        }
    }
    char why[256] = "";
    bool driver_fault = false;
    if (rtx_cuda_device_count(why, sizeof why, &driver_fault) == 0) {
        /* an installed driver that fails is a failure, not a machine without a GPU */
        printf("{\"error\": \"%s", driver_fault ? "the CUDA driver failed: " : "no CUDA device: ");
        bench_json_escape(stdout, why);
        printf("\"}\n");
        return driver_fault ? 1 : 3;
    }
    struct rtx_err err = {0};
    struct rtx_cuda_options opt = {.device = 0};
    if (rtx_backend_cuda_new(&opt, &be, &err) != 0) {
        printf("{\"error\": \"");
        bench_json_escape(stdout, err.msg);
        printf("\"}\n");
        return 1;
    }
    int rc = 0;
    if (check_dir) {
        attention_check(check_dir);
    } else {
        add_cases(memory, attention, block, alloc);
        rc = serve ? bench_serve(cases, n_cases, stdin, stdout)
                   : bench_run_all(cases, n_cases, windows, stdout) > 0;
    }
    rtx_backend_free(be);
    return rc;
}
