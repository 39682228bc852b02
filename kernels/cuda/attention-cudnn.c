/*
 * attention-cudnn.c - attention through cuDNN's fused flash-attention engine, described with
 * the cuDNN 9 backend (C) API and loaded at run time (attention-cudnn.h).
 *
 * DESIGN
 * Loading. libcudnn.so.9 is opened once per process (dlopen, RTLD_LOCAL) and the dozen
 * functions used here are looked up by name; their types come from cudnn_graph.h, so a
 * library whose major version is not 9 is refused. When the headers were not present at build
 * time the route reports that and never loads anything.
 *
 * The graph. cuDNN recognizes scaled dot-product attention as an operation graph of its
 * generic ops and runs it with one fused kernel (on Hopper its sm90 flash-attention engine,
 * the one PyTorch's SDPA uses there). The graph is the one cuDNN's own frontend builds for
 * inference before cuDNN 9.21:
 *     S = matmul(Q, K^T)                     f32, K^T a transposed view of K (strides swapped)
 *     S = S * scale                          scale a by-value f32 scalar
 *     [causal] S = select(row >= col, S, lowest)   row / col from GEN_INDEX on axes 2 and 3
 *     M = max_reduce(S); E = exp(S - M); Z = add_reduce(E); P = E / Z (in the input dtype)
 *     [stats = M + log(Z), virtual: the engine's softmax pattern includes it]
 *     O = matmul(P, V)
 * Every intermediate is virtual (never in memory); only Q, K, V, O and the by-value scalars
 * are bound at execution. A masked key gets float's lowest value rather than -inf, so that
 * exp(S - M) is 0 without an inf - inf anywhere.
 *
 * Plans. Engine heuristics (mode A) rank the engine configurations; the first whose execution
 * plan finalizes is kept, with its workspace size, in a per-backend cache keyed by dtype,
 * shape, strides and causal (scale is bound per run). A key cuDNN has no engine for is cached
 * as refused too, so the fallback costs one lookup afterwards. Plans are never evicted while
 * the backend lives: a captured CUDA graph may hold kernels of a plan's engine (runtime
 * compiled modules), so freeing one could leave a graph pointing into unloaded code. Past
 * PLAN_CACHE shapes per device the route refuses new shapes (auto then takes the hand-written
 * kernel). Each run binds the
 * pointers in a fresh variant pack, takes the workspace from the backend's scratch (so a CUDA
 * graph capture keeps it) and executes on cu->stream. The handle is the backend's own, made
 * on first use on its device; calls on one backend are serialized by its worker, as for
 * cuBLASLt, and a mutex guards only the handle's creation and the cache.
 */
#include <dlfcn.h>
#include <float.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/attention-cudnn.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/runtime.h"

#if defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define RTX_HAVE_CUDNN 1
#endif
#endif
#ifndef RTX_HAVE_CUDNN
#define RTX_HAVE_CUDNN 0
#endif

#define ALIGN_BYTES 16

static bool strides_ok(const int64_t *s, size_t esz) {
    return s[3] == 1 && (s[0] * (int64_t)esz) % ALIGN_BYTES == 0 &&
           (s[1] * (int64_t)esz) % ALIGN_BYTES == 0 && (s[2] * (int64_t)esz) % ALIGN_BYTES == 0;
}

bool rtx__cudnn_sdpa_supported(const struct rtx_cuda_sdpa *p, int cc) {
    if (!RTX_HAVE_CUDNN || cc < 80) return false;
    if (p->dt != RTX_F16 && p->dt != RTX_BF16) return false;
    int64_t dmax = cc >= 90 ? 256 : 128;
    if (p->d < 8 || p->d > dmax || p->d % 8 || p->dv < 8 || p->dv > dmax || p->dv % 8)
        return false;
    if (p->b < 1 || p->h < 1 || p->lq < 1 || p->lk < 1) return false;
    if (p->b * p->h > INT32_MAX || p->lq > INT32_MAX || p->lk > INT32_MAX) return false;
    size_t esz = rtx_dtype_size(p->dt);
    if (!strides_ok(p->q_str, esz) || !strides_ok(p->k_str, esz) || !strides_ok(p->v_str, esz) ||
        !strides_ok(p->o_str, esz))
        return false;
    return ((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v | (uintptr_t)p->out) %
               ALIGN_BYTES == 0;
}

#if RTX_HAVE_CUDNN

/* ------------------------------------------------------------------------------------------
 * The library, loaded once per process
 * ---------------------------------------------------------------------------------------- */

static struct {
    __typeof__(&cudnnGetVersion) get_version;
    __typeof__(&cudnnCreate) create;
    __typeof__(&cudnnDestroy) destroy;
    __typeof__(&cudnnSetStream) set_stream;
    __typeof__(&cudnnGetErrorString) error_string;
    __typeof__(&cudnnGetLastErrorString) last_error;
    __typeof__(&cudnnBackendCreateDescriptor) create_desc;
    __typeof__(&cudnnBackendDestroyDescriptor) destroy_desc;
    __typeof__(&cudnnBackendSetAttribute) set_attr;
    __typeof__(&cudnnBackendGetAttribute) get_attr;
    __typeof__(&cudnnBackendFinalize) finalize;
    __typeof__(&cudnnBackendExecute) execute;
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;
static long dnn_version; /* 0: not loaded, see dnn_why */
static char dnn_why[256];

/* dlsym into a function pointer without a cast between object and function pointers. */
static bool load_sym(void *lib, const char *name, void *slot) {
    void *f = dlsym(lib, name);
    if (!f) {
        snprintf(dnn_why, sizeof dnn_why, "libcudnn.so.9 lacks %s", name);
        return false;
    }
    memcpy(slot, &f, sizeof f);
    return true;
}

static void load_library(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(dnn_why, sizeof dnn_why, "cannot load libcudnn.so.9: %s", e ? e : "not found");
        return;
    }
    bool ok = load_sym(lib, "cudnnGetVersion", &dnn.get_version) &&
              load_sym(lib, "cudnnCreate", &dnn.create) &&
              load_sym(lib, "cudnnDestroy", &dnn.destroy) &&
              load_sym(lib, "cudnnSetStream", &dnn.set_stream) &&
              load_sym(lib, "cudnnGetErrorString", &dnn.error_string) &&
              load_sym(lib, "cudnnGetLastErrorString", &dnn.last_error) &&
              load_sym(lib, "cudnnBackendCreateDescriptor", &dnn.create_desc) &&
              load_sym(lib, "cudnnBackendDestroyDescriptor", &dnn.destroy_desc) &&
              load_sym(lib, "cudnnBackendSetAttribute", &dnn.set_attr) &&
              load_sym(lib, "cudnnBackendGetAttribute", &dnn.get_attr) &&
              load_sym(lib, "cudnnBackendFinalize", &dnn.finalize) &&
              load_sym(lib, "cudnnBackendExecute", &dnn.execute);
    if (!ok) {
        dlclose(lib);
        return;
    }
    long v = (long)dnn.get_version();
    if (v / 10000 != 9) {
        snprintf(dnn_why, sizeof dnn_why, "libcudnn.so.9 reports version %ld, want 9.x", v);
        dlclose(lib);
        return;
    }
    dnn_version = v; /* the library stays loaded for the life of the process */
}

long rtx__cudnn_version(char *why, size_t why_len) {
    pthread_once(&dnn_once, load_library);
    if (!dnn_version && why && why_len) snprintf(why, why_len, "%s", dnn_why);
    return dnn_version;
}

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

/* Fills err from a failed cuDNN call; returns code. */
static int dnn_fail(struct rtx_err *err, int code, const char *what, cudnnStatus_t st) {
    char last[192] = "";
    dnn.last_error(last, sizeof last);
    return rtx_err_set(err, code, "cuDNN %s: %s%s%s", what, dnn.error_string(st),
                       last[0] ? ": " : "", last);
}

/* ------------------------------------------------------------------------------------------
 * Building the graph: every descriptor made goes into one list, destroyed together
 * ---------------------------------------------------------------------------------------- */

#define MAX_DESCS 64

struct build {
    cudnnBackendDescriptor_t d[MAX_DESCS];
    int n;
    cudnnStatus_t st;  /* the first failure */
    const char *what;  /* what failed */
};

static cudnnBackendDescriptor_t make(struct build *b, cudnnBackendDescriptorType_t type) {
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->n == MAX_DESCS) {
        b->st = CUDNN_STATUS_INTERNAL_ERROR;
        b->what = "descriptor list full";
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = dnn.create_desc(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        b->what = "creating a descriptor";
        return NULL;
    }
    b->d[b->n++] = d;
    return d;
}

static void set(struct build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *value,
                const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = dnn.set_attr(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        b->what = what;
    }
}

static void fin(struct build *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = dnn.finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        b->what = what;
    }
}

static void build_free(struct build *b) {
    for (int i = b->n - 1; i >= 0; i--) dnn.destroy_desc(b->d[i]);
    b->n = 0;
}

/* A 4-D tensor; virtual ones never reach memory, by-value ones are host scalars. */
static cudnnBackendDescriptor_t tensor(struct build *b, int64_t uid, cudnnDataType_t type,
                                       const int64_t dims[4], const int64_t str[4], bool virt,
                                       bool by_value) {
    cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = ALIGN_BYTES;
    set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
    set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (virt) set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "virtual");
    if (by_value)
        set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "by value");
    fin(b, t, "finalizing a tensor");
    return t;
}

/* y = mode(x [, b2] [, t]) with f32 math (boolean for comparisons); axis for GEN_INDEX. */
static cudnnBackendDescriptor_t pointwise(struct build *b, cudnnPointwiseMode_t mode,
                                          cudnnDataType_t prec, int64_t axis,
                                          cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b2,
                                          cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise math");
    if (axis >= 0)
        set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    fin(b, pw, "finalizing a pointwise descriptor");
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
        "pointwise op");
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "pointwise x");
    if (b2)
        set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b2,
            "pointwise b");
    if (t)
        set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
            "pointwise t");
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "pointwise y");
    fin(b, op, "finalizing a pointwise op");
    return op;
}

/* y = reduce(x) over the last axis, f32. */
static cudnnBackendDescriptor_t reduction(struct build *b, cudnnReduceTensorOp_t mode,
                                          cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
        "reduction mode");
    set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction math");
    fin(b, r, "finalizing a reduction descriptor");
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
        "reduction op");
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "reduction x");
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "reduction y");
    fin(b, op, "finalizing a reduction op");
    return op;
}

/* c = a b (batched over the first two dims), f32 accumulation. */
static cudnnBackendDescriptor_t matmul(struct build *b, cudnnBackendDescriptor_t a,
                                       cudnnBackendDescriptor_t bm, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t m = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul math");
    fin(b, m, "finalizing a matmul descriptor");
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm,
        "matmul b");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m,
        "matmul op");
    fin(b, op, "finalizing a matmul op");
    return op;
}

/* ------------------------------------------------------------------------------------------
 * Plans, cached per backend
 * ---------------------------------------------------------------------------------------- */

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, UID_LOWEST, UID_VIRTUAL = 100 };

#define PLAN_CACHE 128
#define MAX_ENGINE_CONFIGS 8

struct sdpa_key {
    int32_t dt, causal;
    int64_t b, h, lq, lk, d, dv;
    int64_t q_str[4], k_str[4], v_str[4], o_str[4];
};

struct sdpa_plan {
    bool used;
    struct sdpa_key key;
    struct build descs;        /* the graph's descriptors, the plan's last */
    cudnnBackendDescriptor_t plan; /* NULL: cuDNN has no engine for this key (why) */
    int64_t workspace;         /* bytes */
    char why[320];
};

struct rtx__cudnn {
    pthread_mutex_t lock;
    cudnnHandle_t handle;
    bool handle_failed;
    char handle_why[200];
    struct sdpa_plan plans[PLAN_CACHE];
    int n;                     /* plans[0 .. n - 1] are used; never evicted (DESIGN) */
};

static void key_of(const struct rtx_cuda_sdpa *p, struct sdpa_key *k) {
    memset(k, 0, sizeof *k);
    k->dt = (int32_t)p->dt;
    k->causal = p->causal;
    k->b = p->b, k->h = p->h, k->lq = p->lq, k->lk = p->lk, k->d = p->d, k->dv = p->dv;
    memcpy(k->q_str, p->q_str, sizeof k->q_str);
    memcpy(k->k_str, p->k_str, sizeof k->k_str);
    memcpy(k->v_str, p->v_str, sizeof k->v_str);
    memcpy(k->o_str, p->o_str, sizeof k->o_str);
}

/* The operation graph of the DESIGN note into b; returns the graph, or NULL. */
static cudnnBackendDescriptor_t build_graph(struct rtx__cudnn *s, const struct sdpa_key *k,
                                            struct build *b) {
    cudnnDataType_t io = k->dt == RTX_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bl = CUDNN_DATA_BOOLEAN;
    int64_t uid = UID_VIRTUAL;
    const int64_t qd[4] = {k->b, k->h, k->lq, k->d};
    const int64_t ktd[4] = {k->b, k->h, k->d, k->lk};
    const int64_t kts[4] = {k->k_str[0], k->k_str[1], k->k_str[3], k->k_str[2]};
    const int64_t vd[4] = {k->b, k->h, k->lk, k->dv};
    const int64_t od[4] = {k->b, k->h, k->lq, k->dv};
    const int64_t sd[4] = {k->b, k->h, k->lq, k->lk};
    const int64_t ss[4] = {k->h * k->lq * k->lk, k->lq * k->lk, k->lk, 1};
    const int64_t rd[4] = {k->b, k->h, k->lq, 1};
    const int64_t rs[4] = {k->h * k->lq, k->lq, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};

    cudnnBackendDescriptor_t q = tensor(b, UID_Q, io, qd, k->q_str, false, false);
    cudnnBackendDescriptor_t kt = tensor(b, UID_K, io, ktd, kts, false, false);
    cudnnBackendDescriptor_t v = tensor(b, UID_V, io, vd, k->v_str, false, false);
    cudnnBackendDescriptor_t o = tensor(b, UID_O, io, od, k->o_str, false, false);
    cudnnBackendDescriptor_t scale = tensor(b, UID_SCALE, f32, one, one, false, true);
    cudnnBackendDescriptor_t ops[16];
    int n = 0;

    cudnnBackendDescriptor_t s0 = tensor(b, uid++, f32, sd, ss, true, false);
    ops[n++] = matmul(b, q, kt, s0);
    cudnnBackendDescriptor_t s1 = tensor(b, uid++, f32, sd, ss, true, false);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_MUL, f32, -1, s0, scale, NULL, s1);
    if (k->causal) {
        cudnnBackendDescriptor_t lowest = tensor(b, UID_LOWEST, f32, one, one, false, true);
        cudnnBackendDescriptor_t row = tensor(b, uid++, i32, sd, ss, true, false);
        cudnnBackendDescriptor_t col = tensor(b, uid++, i32, sd, ss, true, false);
        cudnnBackendDescriptor_t keep = tensor(b, uid++, bl, sd, ss, true, false);
        cudnnBackendDescriptor_t s2 = tensor(b, uid++, f32, sd, ss, true, false);
        ops[n++] = pointwise(b, CUDNN_POINTWISE_GEN_INDEX, f32, 2, s1, NULL, NULL, row);
        ops[n++] = pointwise(b, CUDNN_POINTWISE_GEN_INDEX, f32, 3, s1, NULL, NULL, col);
        ops[n++] = pointwise(b, CUDNN_POINTWISE_CMP_GE, bl, -1, row, col, NULL, keep);
        ops[n++] = pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, f32, -1, s1, lowest, keep, s2);
        s1 = s2;
    }
    cudnnBackendDescriptor_t mx = tensor(b, uid++, f32, rd, rs, true, false);
    cudnnBackendDescriptor_t sub = tensor(b, uid++, f32, sd, ss, true, false);
    cudnnBackendDescriptor_t ex = tensor(b, uid++, f32, sd, ss, true, false);
    cudnnBackendDescriptor_t sum = tensor(b, uid++, f32, rd, rs, true, false);
    /* P in the input dtype, as the engine wants it for the second product (an f32 P finds no
     * engine) and as the hand-written kernel rounds it (decision 69) */
    cudnnBackendDescriptor_t p = tensor(b, uid++, io, sd, ss, true, false);
    ops[n++] = reduction(b, CUDNN_REDUCE_TENSOR_MAX, s1, mx);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_SUB, f32, -1, s1, mx, NULL, sub);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_EXP, f32, -1, sub, NULL, NULL, ex);
    ops[n++] = reduction(b, CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    /* the softmax statistics (log-sum-exp) as a virtual output: the engine's pattern has them
     * whether or not anyone reads them */
    cudnnBackendDescriptor_t lg = tensor(b, uid++, f32, rd, rs, true, false);
    cudnnBackendDescriptor_t stats = tensor(b, uid++, f32, rd, rs, true, false);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_LOG, f32, -1, sum, NULL, NULL, lg);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_ADD, f32, -1, mx, lg, NULL, stats);
    ops[n++] = pointwise(b, CUDNN_POINTWISE_DIV, f32, -1, ex, sum, NULL, p);
    ops[n++] = matmul(b, p, v, o);

    cudnnBackendDescriptor_t g = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle, "graph handle");
    set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops, "graph ops");
    fin(b, g, "finalizing the operation graph");
    return b->st == CUDNN_STATUS_SUCCESS ? g : NULL;
}

/* Builds e's plan for e->key: heuristics, then the first engine configuration that
 * finalizes. On failure e->plan stays NULL and e->why says why. */
static void build_plan(struct rtx__cudnn *s, struct sdpa_plan *e) {
    struct build *b = &e->descs;
    memset(b, 0, sizeof *b);
    cudnnBackendDescriptor_t g = build_graph(s, &e->key, b);
    cudnnBackendDescriptor_t heur = g ? make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) : NULL;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g,
        "heuristics graph");
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    fin(b, heur, "heuristics for the attention graph");
    int64_t count = 0;
    if (b->st == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = dnn.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        if (st != CUDNN_STATUS_SUCCESS) b->st = st, b->what = "counting engine configurations";
    }
    if (count > MAX_ENGINE_CONFIGS) count = MAX_ENGINE_CONFIGS;
    cudnnBackendDescriptor_t cfg[MAX_ENGINE_CONFIGS] = {0};
    for (int64_t i = 0; i < count; i++) cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (b->st == CUDNN_STATUS_SUCCESS && count > 0) {
        cudnnStatus_t st = dnn.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
        if (st != CUDNN_STATUS_SUCCESS) b->st = st, b->what = "reading engine configurations";
    }
    if (b->st != CUDNN_STATUS_SUCCESS) {
        char last[160] = "";
        dnn.last_error(last, sizeof last);
        snprintf(e->why, sizeof e->why, "cuDNN %s: %s%s%s", b->what, dnn.error_string(b->st),
                 last[0] ? ": " : "", last);
        build_free(b);
        return;
    }
    cudnnStatus_t last_st = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < got && !e->plan; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (dnn.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
            break;
        last_st = dnn.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                               &s->handle);
        if (last_st == CUDNN_STATUS_SUCCESS)
            last_st = dnn.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last_st == CUDNN_STATUS_SUCCESS) last_st = dnn.finalize(plan);
        int64_t ws = 0, n = 0;
        if (last_st == CUDNN_STATUS_SUCCESS)
            last_st = dnn.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &ws);
        if (last_st != CUDNN_STATUS_SUCCESS || b->n == MAX_DESCS) {
            dnn.destroy_desc(plan);
            continue;
        }
        b->d[b->n++] = plan;
        e->plan = plan;
        e->workspace = ws;
    }
    if (!e->plan) {
        char last[160] = "";
        dnn.last_error(last, sizeof last);
        snprintf(e->why, sizeof e->why,
                 "cuDNN has no engine for this attention (%lld configurations tried): %s%s%s",
                 (long long)got, dnn.error_string(last_st), last[0] ? ": " : "", last);
        build_free(b);
    }
}

/* The backend's cuDNN state, made (with its handle) on first use; NULL with err filled when
 * cuDNN is not usable here. Called with nothing locked. */
static struct rtx__cudnn *state_of(struct rtx_cuda *cu, struct rtx_err *err) {
    char why[256];
    if (!rtx__cudnn_version(why, sizeof why)) {
        rtx_err_set(err, RTX_EUNSUPPORTED, "%s", why);
        return NULL;
    }
    struct rtx__cudnn *s = __atomic_load_n((struct rtx__cudnn **)&cu->cudnn, __ATOMIC_ACQUIRE);
    if (!s) {
        s = rtx_calloc(1, sizeof *s);
        if (!s) {
            rtx_err_set(err, RTX_ENOMEM, "out of memory for the cuDNN state");
            return NULL;
        }
        pthread_mutex_init(&s->lock, NULL);
        void *expected = NULL;
        if (!__atomic_compare_exchange_n(&cu->cudnn, &expected, s, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            pthread_mutex_destroy(&s->lock);
            rtx_free(s);
            s = expected;
        }
    }
    pthread_mutex_lock(&s->lock);
    if (!s->handle && !s->handle_failed) {
        cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
        if (cudaSetDevice(cu->device) != cudaSuccess) {
            (void)cudaGetLastError();
            st = CUDNN_STATUS_EXECUTION_FAILED;
        } else {
            st = dnn.create(&s->handle);
        }
        if (st != CUDNN_STATUS_SUCCESS) {
            s->handle = NULL;
            s->handle_failed = true;
            char last[128] = "";
            dnn.last_error(last, sizeof last);
            snprintf(s->handle_why, sizeof s->handle_why, "cudnnCreate: %s%s%s",
                     dnn.error_string(st), last[0] ? ": " : "", last);
        }
    }
    bool failed = s->handle_failed;
    pthread_mutex_unlock(&s->lock);
    if (failed) {
        rtx_err_set(err, RTX_EUNSUPPORTED, "%s", s->handle_why);
        return NULL;
    }
    return s;
}

/* The cached plan for p (built now if new); NULL with err filled when there is none. */
static struct sdpa_plan *plan_for(struct rtx__cudnn *s, const struct rtx_cuda_sdpa *p,
                                  struct rtx_err *err) {
    struct sdpa_key k;
    key_of(p, &k);
    pthread_mutex_lock(&s->lock);
    struct sdpa_plan *e = NULL;
    for (int i = 0; i < PLAN_CACHE && !e; i++)
        if (s->plans[i].used && memcmp(&s->plans[i].key, &k, sizeof k) == 0) e = &s->plans[i];
    if (!e && s->n == PLAN_CACHE) {
        pthread_mutex_unlock(&s->lock);
        rtx_err_set(err, RTX_EUNSUPPORTED,
                    "cuDNN attention: %d shapes planned on this device already (the limit)",
                    PLAN_CACHE);
        return NULL;
    }
    if (!e) {
        e = &s->plans[s->n++];
        e->used = true;
        e->key = k;
        build_plan(s, e);
    }
    struct sdpa_plan *r = e->plan ? e : NULL;
    if (!r) rtx_err_set(err, RTX_EUNSUPPORTED, "%s", e->why);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int rtx__cudnn_sdpa(struct rtx_cuda *cu, const struct rtx_cuda_sdpa *p, struct rtx_err *err) {
    if (!rtx__cudnn_sdpa_supported(p, cu->cc_major * 10 + cu->cc_minor))
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "cuDNN attention takes f16 / bf16 with head dims that are multiples "
                           "of 8 (at most %d), unit last strides and 16-byte alignment",
                           cu->cc_major >= 9 ? 256 : 128);
    struct rtx__cudnn *s = state_of(cu, err);
    if (!s) return err ? err->code : RTX_EUNSUPPORTED;
    struct sdpa_plan *e = plan_for(s, p, err);
    if (!e) return RTX_EUNSUPPORTED;
    void *ws = NULL;
    int rc = 0;
    if (e->workspace > 0 && (rc = rtx__cuda_scratch(cu, (size_t)e->workspace, &ws, err)))
        return rc;
    float scale = p->scale, lowest = -FLT_MAX;
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_LOWEST};
    void *ptrs[6] = {(void *)p->q, (void *)p->k, (void *)p->v, p->out, &scale, &lowest};
    int64_t n = p->causal ? 6 : 5;
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t st = dnn.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    const char *what = "creating the variant pack";
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "binding the tensors";
        st = dnn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
        if (st == CUDNN_STATUS_SUCCESS)
            st = dnn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                              ptrs);
        if (st == CUDNN_STATUS_SUCCESS)
            st = dnn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                              &ws);
        if (st == CUDNN_STATUS_SUCCESS) st = dnn.finalize(pack);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "setting the stream";
        st = dnn.set_stream(s->handle, cu->stream);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "executing the attention plan";
        st = dnn.execute(s->handle, e->plan, pack);
    }
    if (st != CUDNN_STATUS_SUCCESS) rc = dnn_fail(err, RTX_EGPU, what, st);
    if (pack) dnn.destroy_desc(pack);
    if (ws) rtx__cuda_scratch_release(cu, ws);
    return rc;
}

void rtx__cudnn_free(struct rtx_cuda *cu) {
    struct rtx__cudnn *s = cu->cudnn;
    if (!s) return;
    for (int i = 0; i < PLAN_CACHE; i++)
        if (s->plans[i].used) build_free(&s->plans[i].descs);
    if (s->handle) dnn.destroy(s->handle);
    pthread_mutex_destroy(&s->lock);
    rtx_free(s);
    cu->cudnn = NULL;
}

#else /* !RTX_HAVE_CUDNN */

long rtx__cudnn_version(char *why, size_t why_len) {
    if (why && why_len) snprintf(why, why_len, "rtxd was built without cuDNN's headers");
    return 0;
}

int rtx__cudnn_sdpa(struct rtx_cuda *cu, const struct rtx_cuda_sdpa *p, struct rtx_err *err) {
    return rtx_err_set(err, RTX_EUNSUPPORTED, "rtxd was built without cuDNN's headers");
}

void rtx__cudnn_free(struct rtx_cuda *cu) {}

#endif /* RTX_HAVE_CUDNN */

long rtx_cuda_cudnn_version(char *why, size_t why_size) {
    return rtx__cudnn_version(why, why_size);
}
