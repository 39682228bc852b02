/*
 * backend-cpu.c - the CPU backend: its vtable, the node dispatch and the dtype rules of
 * supports_node. Its context, the thread pool that heavy kernels share, is
 * kernels/cpu/thread-pool.c.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cpu/cpu-impl.h"
#include "runtime/backend-impl.h"

#define CPU_MAX_THREADS 1024

typedef int (*cpu_group_fn)(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                            struct rtx_err *err);

typedef int (*cpu_fused_fn)(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                            const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                            struct rtx_err *err);

/* One build of the op groups that have ISA variants (cpu-impl.h). */
struct cpu_kernels {
    const char *isa;
    cpu_group_fn elementwise, reduce, linalg, conv;
    cpu_fused_fn linalg_fused, conv_fused;
    bool wide; /* products with packed weights in AVX-512 (kernels/cpu/gemm-packed.c) */
};

static const struct cpu_kernels generic_kernels = {
    .isa = "generic", .elementwise = rtx__cpu_elementwise, .reduce = rtx__cpu_reduce,
    .linalg = rtx__cpu_linalg, .conv = rtx__cpu_conv, .linalg_fused = rtx__cpu_linalg_fused,
    .conv_fused = rtx__cpu_conv_fused,
};
#ifdef RTX_CPU_HAVE_AVX2
static const struct cpu_kernels avx2_kernels = {
    .isa = "avx2", .elementwise = rtx__cpu_elementwise_avx2, .reduce = rtx__cpu_reduce_avx2,
    .linalg = rtx__cpu_linalg_avx2, .conv = rtx__cpu_conv_avx2,
    .linalg_fused = rtx__cpu_linalg_fused_avx2, .conv_fused = rtx__cpu_conv_fused_avx2,
};
/* the AVX2 build, its products with packed weights in 512-bit registers */
static const struct cpu_kernels avx512_kernels = {
    .isa = "avx512", .elementwise = rtx__cpu_elementwise_avx2, .reduce = rtx__cpu_reduce_avx2,
    .linalg = rtx__cpu_linalg_avx2, .conv = rtx__cpu_conv_avx2,
    .linalg_fused = rtx__cpu_linalg_fused_avx2, .conv_fused = rtx__cpu_conv_fused_avx2,
    .wide = true,
};
#endif

/* The backend with what only buffer_new and run_node need: be first, so cpu_free's
 * rtx_free(be) frees it. */
struct cpu_backend {
    struct rtx_backend be;
    struct rtx_mem_account *account; /* NULL: none */
    const struct cpu_kernels *kern;  /* the ISA build the op groups run */
};

/* What a charged buffer gives back when released: its bytes to its account. One per buffer,
 * freed by its release, which rtx_buffer_unref calls exactly once. */
struct cpu_charge {
    struct rtx_mem_account *account;
    size_t bytes;
};

/* ------------------------------------------------------------------------------------------
 * Supported dtypes (docs/ops.md)
 * ---------------------------------------------------------------------------------------- */

#define DT(x) (1u << RTX_##x)
#define DT_FLOAT (DT(F32) | DT(F16) | DT(BF16))
#define DT_INT (DT(I8) | DT(I32) | DT(I64) | DT(U8))
#define DT_ALL (DT_FLOAT | DT_INT | DT(BOOL))
#define DT_NUM (DT_FLOAT | DT_INT)

/* The dtypes allowed for the data inputs of an op (those that must share one dtype). */
static unsigned op_data_dtypes(enum rtx_op op) {
    switch (op) {
    case RTX_OP_ADD: case RTX_OP_SUB: case RTX_OP_MUL: case RTX_OP_DIV: case RTX_OP_POW:
    case RTX_OP_NEG: case RTX_OP_ABS: case RTX_OP_REDUCE_SUM: case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN: case RTX_OP_ARGMAX:
        return DT_NUM;
    case RTX_OP_RELU:
        return DT_FLOAT | DT(I8) | DT(I32) | DT(I64);
    case RTX_OP_SQRT: case RTX_OP_RSQRT: case RTX_OP_EXP: case RTX_OP_LOG: case RTX_OP_TANH:
    case RTX_OP_ERF: case RTX_OP_GELU: case RTX_OP_SILU: case RTX_OP_SIGMOID:
    case RTX_OP_MATMUL: case RTX_OP_GEMM: case RTX_OP_REDUCE_MEAN: case RTX_OP_SOFTMAX:
    case RTX_OP_LOG_SOFTMAX: case RTX_OP_LAYER_NORM: case RTX_OP_RMS_NORM:
    case RTX_OP_ATTENTION: case RTX_OP_CONV2D: case RTX_OP_MAX_POOL2D: case RTX_OP_AVG_POOL2D:
    case RTX_OP_ROPE: case RTX_OP_PAGED_ATTENTION:
        return DT_FLOAT;
    case RTX_OP_CAST: case RTX_OP_WHERE: case RTX_OP_EQUAL: case RTX_OP_LESS:
    case RTX_OP_GREATER: case RTX_OP_TRANSPOSE: case RTX_OP_RESHAPE: case RTX_OP_EXPAND:
    case RTX_OP_CONCAT: case RTX_OP_SLICE: case RTX_OP_GATHER: case RTX_OP_CONSTANT:
        return DT_ALL;
    case RTX_OP_COUNT:
        break;
    }
    return 0;
}

/* Whether input `i` of an op with dtype dt is allowed, given the first data input's dtype. */
static bool input_dtype_ok(enum rtx_op op, int i, enum rtx_dtype dt, enum rtx_dtype data_dt) {
    if (op == RTX_OP_WHERE && i == 0) return dt == RTX_BOOL;
    if ((op == RTX_OP_GATHER || op == RTX_OP_ROPE) && i == 1)
        return dt == RTX_I32 || dt == RTX_I64;
    if (op == RTX_OP_ROPE && i == 2) return dt == RTX_F32;   /* inv_freq */
    if (op == RTX_OP_PAGED_ATTENTION && i >= 5) return dt == RTX_I32; /* the metadata */
    if (op == RTX_OP_ATTENTION && i == 3) return dt == RTX_BOOL || dt == data_dt;
    if (op == RTX_OP_CAST) return true;
    return dt == data_dt && (op_data_dtypes(op) & (1u << dt)) != 0;
}

/* The dtype of a node input, or false when the graph does not know it yet (an intermediate
 * value whose inference happens at planning) or the input is omitted. */
static bool input_dtype(const struct rtx_graph *g, const struct rtx_node *node, int i,
                        enum rtx_dtype *dt) {
    int v = node->inputs[i];
    if (v < 0 || v >= g->n_values) return false;
    const struct rtx_value *val = &g->values[v];
    if (val->producer >= 0 && val->ndim < 0) return false;
    if ((unsigned)val->dtype >= RTX_DTYPE_COUNT) return false;
    *dt = val->dtype;
    return true;
}

/* Whether input i carries the op's data dtype (the inputs that must all share one dtype). */
static bool is_data_input(enum rtx_op op, int i) {
    return !(op == RTX_OP_WHERE && i == 0) && !(op == RTX_OP_GATHER && i == 1) &&
           !(op == RTX_OP_ATTENTION && i == 3) && !(op == RTX_OP_ROPE && i >= 1) &&
           !(op == RTX_OP_PAGED_ATTENTION && i >= 5);
}

static bool cpu_supports_node(struct rtx_backend *be, const struct rtx_graph *g,
                              const struct rtx_node *node) {
    if (node == NULL || (unsigned)node->op >= RTX_OP_COUNT) return false;
    if (g == NULL) return true;
    enum rtx_dtype data_dt = RTX_F32, dt;
    bool have_data = false;
    for (int i = 0; i < node->n_inputs && !have_data; i++)
        if (is_data_input(node->op, i) && input_dtype(g, node, i, &dt)) {
            data_dt = dt;
            have_data = true;
        }
    for (int i = 0; i < node->n_inputs; i++) {
        if (!input_dtype(g, node, i, &dt)) continue;
        if (!input_dtype_ok(node->op, i, dt, have_data ? data_dt : dt)) return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------
 * The vtable
 * ---------------------------------------------------------------------------------------- */

static const char *cpu_name(struct rtx_backend *be) {
    return "cpu";
}

static void cpu_free(struct rtx_backend *be) {
    rtx__cpu_pool_free(be->ctx);
    rtx_free(be);
}

static void charged_release(void *ctx, void *data) {
    struct cpu_charge *c = ctx;
    rtx_free_aligned(data);
    c->account->credit(c->account, c->bytes);
    rtx_free(c);
}

static int cpu_buffer_new(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                          struct rtx_err *err) {
    struct rtx_mem_account *account = ((struct cpu_backend *)be)->account;
    struct rtx_buffer *buf = rtx_calloc(1, sizeof *buf);
    struct cpu_charge *charge = account ? rtx_malloc(sizeof *charge) : NULL;
    if (buf == NULL || (account && charge == NULL)) {
        rtx_free(buf);
        rtx_free(charge);
        return rtx_err_set(err, RTX_ENOMEM, "cpu: buffer header");
    }
    int rc = account ? account->charge(account, bytes, err) : 0;
    if (rc != 0) {
        rtx_free(buf);
        rtx_free(charge);
        return rc;
    }
    buf->data = rtx_malloc_aligned(bytes > 0 ? bytes : 1);
    if (buf->data == NULL) {
        if (account) account->credit(account, bytes);
        rtx_free(buf);
        rtx_free(charge);
        return rtx_err_set(err, RTX_ENOMEM, "cpu: buffer of %zu bytes", bytes);
    }
    buf->refcount = 1;
    buf->bytes = bytes;
    buf->release = NULL; /* rtx_free_aligned */
    buf->release_ctx = NULL;
    if (account) {
        *charge = (struct cpu_charge){.account = account, .bytes = bytes};
        buf->release = charged_release;
        buf->release_ctx = charge;
    }
    *out = buf;
    return 0;
}

static int cpu_run_node(struct rtx_backend *be, const struct rtx_node_args *a,
                        struct rtx_err *err) {
    struct rtx_cpu *cpu = be->ctx;
    const struct cpu_kernels *k = ((struct cpu_backend *)be)->kern;
    switch (a->node->op) {
    case RTX_OP_ADD: case RTX_OP_SUB: case RTX_OP_MUL: case RTX_OP_DIV: case RTX_OP_POW:
    case RTX_OP_NEG: case RTX_OP_ABS: case RTX_OP_SQRT: case RTX_OP_RSQRT: case RTX_OP_EXP:
    case RTX_OP_LOG: case RTX_OP_TANH: case RTX_OP_ERF: case RTX_OP_RELU: case RTX_OP_GELU:
    case RTX_OP_SILU: case RTX_OP_SIGMOID: case RTX_OP_CAST: case RTX_OP_WHERE:
    case RTX_OP_EQUAL: case RTX_OP_LESS: case RTX_OP_GREATER:
        return k->elementwise(cpu, a, err);
    case RTX_OP_REDUCE_SUM: case RTX_OP_REDUCE_MEAN: case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN: case RTX_OP_ARGMAX: case RTX_OP_SOFTMAX: case RTX_OP_LOG_SOFTMAX:
    case RTX_OP_LAYER_NORM: case RTX_OP_RMS_NORM:
        return k->reduce(cpu, a, err);
    case RTX_OP_MATMUL: case RTX_OP_GEMM: case RTX_OP_ATTENTION:
        return k->linalg(cpu, a, err);
    case RTX_OP_TRANSPOSE: case RTX_OP_RESHAPE: case RTX_OP_EXPAND: case RTX_OP_CONCAT:
    case RTX_OP_SLICE: case RTX_OP_GATHER: case RTX_OP_CONSTANT:
        return rtx__cpu_shape(cpu, a, err);
    case RTX_OP_CONV2D: case RTX_OP_MAX_POOL2D: case RTX_OP_AVG_POOL2D:
        return k->conv(cpu, a, err);
    case RTX_OP_ROPE: case RTX_OP_PAGED_ATTENTION:
        return rtx__cpu_generation(cpu, a, err);
    case RTX_OP_COUNT:
        break;
    }
    return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "op %d has no CPU kernel",
                                 (int)a->node->op);
}

/* ------------------------------------------------------------------------------------------
 * Fused groups: a product and the elementwise nodes after it (cpu-impl.h, rtx__cpu_epilogue)
 * ---------------------------------------------------------------------------------------- */

/* matmul, gemm or conv2d, then up to two adds and at most one relu or gelu (last), each
 * node reading the one before, whose value nothing else reads (DESIGN of plan.c: it may stay
 * unwritten). Shapes are checked when the group runs. */
static int cpu_fused_span(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                          int n, const int *uses) {
    const struct rtx_node *p = &g->nodes[order[0]];
    if ((p->op != RTX_OP_MATMUL && p->op != RTX_OP_GEMM && p->op != RTX_OP_CONV2D) ||
        p->n_outputs != 1)
        return 1;
    int v = p->outputs[0], span = 1, adds = 0;
    while (span < n && span < RTX_BACKEND_FUSE_MAX && uses[v] == 1) {
        const struct rtx_node *x = &g->nodes[order[span]];
        if (x->n_outputs != 1) break;
        bool act = (x->op == RTX_OP_RELU || x->op == RTX_OP_GELU) && x->n_inputs == 1 &&
                   x->inputs[0] == v;
        bool add = x->op == RTX_OP_ADD && x->n_inputs == 2 && adds < 2 &&
                   (x->inputs[0] == v) != (x->inputs[1] == v);
        if (!act && !add) break;
        span++;
        if (act) break;
        adds++;
        v = x->outputs[0];
    }
    return span;
}

static bool same_dims(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* The epilogue of group args[0..n) from its tensors; false when a shape or dtype does not fit
 * (then the nodes run one by one): f32 throughout, each add's other operand a row of the
 * product's last dim (a bias, matmul and gemm only, before any residual) or shaped like the
 * product (a residual). */
static bool group_epilogue(const struct rtx_node_args *args, int n, struct rtx__cpu_epilogue *e) {
    const struct rtx_tensor *prev = args[0].out[0];
    bool conv = args[0].node->op == RTX_OP_CONV2D;
    *e = (struct rtx__cpu_epilogue){.act = RTX_OP_COUNT};
    if (prev->dtype != RTX_F32 || prev->ndim < (conv ? 4 : 1)) return false;
    for (int i = 0; i < args[0].n_in; i++)
        if (args[0].in[i] && args[0].in[i]->dtype != RTX_F32) return false;
    int64_t cols = conv ? prev->dims[2] * prev->dims[3] : prev->dims[prev->ndim - 1];
    for (int i = 1; i < n; i++) {
        const struct rtx_node_args *x = &args[i];
        if (x->n_out != 1 || x->out[0]->dtype != RTX_F32 || !same_dims(x->out[0], prev))
            return false;
        if (x->node->op == RTX_OP_ADD) {
            const struct rtx_tensor *o = x->in[0] == prev ? x->in[1] : x->in[0];
            if (o->dtype != RTX_F32) return false;
            if (same_dims(o, prev) && !e->res) {
                e->res = rtx_tensor_data(o);
                e->res_ld = cols;
            } else if (!conv && !e->bias && !e->res && o->ndim >= 1 &&
                       o->dims[o->ndim - 1] == cols && rtx_tensor_numel(o) == cols) {
                e->bias = rtx_tensor_data(o);
            } else {
                return false;
            }
        } else {
            const char *ap = rtx_node_attr_string(x->node, "approximate", "none");
            e->act = x->node->op;
            e->gelu_tanh = x->node->op == RTX_OP_GELU && ap && strcmp(ap, "tanh") == 0;
            if (x->node->op == RTX_OP_GELU && !e->gelu_tanh && (!ap || strcmp(ap, "none")))
                return false; /* the gelu node reports its bad attribute itself */
        }
        prev = x->out[0];
    }
    return true;
}

static int cpu_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                         struct rtx_err *err) {
    struct rtx__cpu_epilogue e;
    if (!group_epilogue(args, n, &e)) {
        for (int i = 0; i < n; i++) {
            int rc = cpu_run_node(be, &args[i], err);
            if (rc) return rc;
        }
        return 0;
    }
    const struct cpu_kernels *k = ((struct cpu_backend *)be)->kern;
    cpu_fused_fn fn = args[0].node->op == RTX_OP_CONV2D ? k->conv_fused : k->linalg_fused;
    return fn(be->ctx, &args[0], &e, args[n - 1].out[0], err);
}

static const struct rtx_backend_i cpu_iface = {
    .name = cpu_name,                   /* "cpu" */
    .free = cpu_free,                   /* joins the pool, frees the context */
    .supports_node = cpu_supports_node, /* every op, with the dtypes of docs/ops.md */
    .buffer_new = cpu_buffer_new,       /* 64-byte aligned host memory */
    .run_node = cpu_run_node,           /* one switch over the op groups */
    .fused_span = cpu_fused_span,       /* product + bias / residual adds + activation */
    .run_fused = cpu_run_fused,         /* the product with an epilogue (rtx__cpu_epilogue) */
    .synchronize = NULL,                /* optional: the CPU runs synchronously */
};

/* ------------------------------------------------------------------------------------------
 * Creation
 * ---------------------------------------------------------------------------------------- */

/* The best build this CPU runs, or the one RTX_CPU_ISA names (generic | avx2 | avx512): a name
 * this build lacks, or an ISA the CPU lacks, is an error rather than a silent fallback. */
static int pick_kernels(const struct cpu_kernels **out, struct rtx_err *err) {
    const char *want = getenv("RTX_CPU_ISA");
    *out = &generic_kernels;
    if (want != NULL && strcmp(want, "generic") == 0) return 0;
    if (want != NULL && *want != '\0' && strcmp(want, "avx2") != 0 && strcmp(want, "avx512") != 0)
        return rtx_err_set(err, RTX_EINVAL, "cpu: RTX_CPU_ISA=%s: not generic, avx2 or avx512",
                           want);
#ifdef RTX_CPU_HAVE_AVX2
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
    if (want == NULL || *want == '\0') {
        *out = avx512 ? &avx512_kernels : avx2 ? &avx2_kernels : &generic_kernels;
        return 0;
    }
    if (strcmp(want, "avx2") == 0 ? avx2 : avx512) {
        *out = strcmp(want, "avx2") == 0 ? &avx2_kernels : &avx512_kernels;
        return 0;
    }
    return rtx_err_set(err, RTX_EUNSUPPORTED, "cpu: RTX_CPU_ISA=%s: this CPU lacks %s", want,
                       strcmp(want, "avx2") == 0 ? "AVX2, FMA or F16C" : "AVX2, FMA, F16C or "
                                                                          "AVX-512F");
#else
    return rtx_err_set(err, RTX_EUNSUPPORTED, "cpu: RTX_CPU_ISA=%s: not an x86-64 build", want);
#endif
}

int rtx_backend_cpu_new(const struct rtx_cpu_options *opt, struct rtx_backend **out,
                        struct rtx_err *err) {
    if (out == NULL) return rtx_err_set(err, RTX_EINVAL, "cpu: out is NULL");
    *out = NULL;
    long n = opt ? opt->n_threads : 0;
    if (n < 0 || n > CPU_MAX_THREADS)
        return rtx_err_set(err, RTX_EINVAL, "cpu: n_threads %ld not in 0..%d", n,
                           CPU_MAX_THREADS);
    if (n == 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1) n = 1;
        if (n > CPU_MAX_THREADS) n = CPU_MAX_THREADS;
    }
    const struct cpu_kernels *kern;
    int rc = pick_kernels(&kern, err);
    if (rc != 0) return rc;
    struct cpu_backend *cb = rtx_calloc(1, sizeof *cb);
    if (cb == NULL) return rtx_err_set(err, RTX_ENOMEM, "cpu: backend");
    struct rtx_backend *be = &cb->be;
    cb->account = opt ? opt->account : NULL;
    cb->kern = kern;
    struct rtx_cpu *cpu;
    rc = rtx__cpu_pool_new((int)n, &cpu, err);
    if (rc != 0) {
        rtx_free(cb);
        return rc;
    }
    be->iface = &cpu_iface;
    be->ctx = cpu;
    rtx__cpu_set_backend(cpu, be, kern->wide);
    openblas_set_num_threads(1); /* the pool splits products itself (rtx__cpu_sgemm) */
    *out = be;
    return 0;
}
