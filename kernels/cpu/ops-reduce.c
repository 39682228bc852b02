/*
 * ops-reduce.c - CPU reference kernels of the reductions (reduce_sum, reduce_mean, reduce_max,
 * reduce_min, argmax) and of the normalizations along axes (softmax, log_softmax, layer_norm,
 * rms_norm), as docs/ops.md defines them.
 *
 * DESIGN
 * A reduction sees its (contiguous) input as axes that are kept (K) or reduced (R). Size-1 axes
 * are dropped and neighbours of one kind merged. When one R block is left the input is
 * [outer, r, inner] and two fast shapes cover it: rows (inner = 1: one accumulator per output,
 * fed from a contiguous run) and columns (inner > 1: an array of accumulators over a slice of
 * the inner axis, fed by a contiguous load from each of the r planes). Anything else (R K R ...)
 * walks the reduced axes with an odometer per output element, the innermost reduced axis as
 * a strided run. argmax, softmax and log_softmax act along one axis, so their input is always
 * [outer, r, inner] and each output row is a run of stride inner; layer_norm and rms_norm act
 * on contiguous rows of the dims axis..end. Rows, column slices and output elements are split
 * across the thread pool.
 *
 * Accuracy: float sums and the normalizations' statistics accumulate in double over 8 lanes
 * (which GCC vectorizes; more accurate than the f32 sum the op page promises, at the same
 * speed), so f32 results stay within a few ulp of a float64 reference. max/min compare in f32
 * and remember whether a NaN was seen, which then wins, as in NumPy. Integer sums wrap in
 * uint64 and then to the dtype. f16/bf16 (and the integer types) are read into f32 (int64)
 * blocks of RD_BLOCK elements on the stack; contiguous f32 runs are read in place.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"

#define RD_BLOCK 256           /* elements per stack block */
#define RD_GRAIN 32768         /* input elements per task */

struct rd_ctx {
    const struct rtx_node_args *a;
    enum rtx_op op;
    enum rtx_dtype dt;                  /* input dtype */
    const void *x;
    void *y;
    int64_t count;                      /* input elements reduced into each output */
    int64_t outer, r, inner;            /* [outer, r, inner] view (one reduced block) */
    int nk, nr;                         /* generic view: kept and reduced blocks */
    int64_t kdims[RTX_MAX_DIMS], kst[RTX_MAX_DIMS];
    int64_t rdims[RTX_MAX_DIMS], rst[RTX_MAX_DIMS];
    const void *scale, *bias;           /* layer_norm / rms_norm, may be NULL */
    double eps;
};

/* ------------------------------------------------------------------------------------------
 * Loads and stores
 * ---------------------------------------------------------------------------------------- */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Runs BODY for i in [0, n), groups of 8 as a fixed-trip loop: GCC's -O2 vectorizer takes
 * those, where it leaves a loop of unknown trip count that would need an epilogue. */
#define LOOP8(n, BODY)                                                                          \
    do {                                                                                        \
        int64_t b8_ = 0;                                                                        \
        for (; b8_ + 8 <= (n); b8_ += 8)                                                        \
            for (int l8_ = 0; l8_ < 8; l8_++) {                                                 \
                int64_t i = b8_ + l8_;                                                          \
                BODY;                                                                           \
            }                                                                                   \
        for (int64_t i = b8_; i < (n); i++) {                                                   \
            BODY;                                                                               \
        }                                                                                       \
    } while (0)

/* Elements off + i * st, i in [0, n) (n <= RD_BLOCK unless returned in place), as f32: in
 * place when the tensor holds contiguous f32, else converted into buf. */
static const float *load_f32(const void *base, enum rtx_dtype dt, int64_t off, int64_t st,
                             int64_t n, float *buf) {
    if (dt == RTX_F32) {
        const float *p = (const float *)base + off;
        if (st == 1) return p;
        for (int64_t i = 0; i < n; i++) buf[i] = p[i * st];
    } else if (dt == RTX_F16) {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) buf[i] = rtx_f16_to_f32(p[i * st]);
    } else if (dt == RTX_BF16) {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) buf[i] = rtx_bf16_to_f32(p[i * st]);
    } else {
        for (int64_t i = 0; i < n; i++) buf[i] = rtx__load_f32(base, dt, off + i * st);
    }
    return buf;
}

/* The same for the integer types, as int64 (i64 contiguous in place). */
static const int64_t *load_i64(const void *base, enum rtx_dtype dt, int64_t off, int64_t st,
                               int64_t n, int64_t *buf) {
    switch (dt) {
    case RTX_I64: {
        const int64_t *p = (const int64_t *)base + off;
        if (st == 1) return p;
        for (int64_t i = 0; i < n; i++) buf[i] = p[i * st];
        break;
    }
    case RTX_I8: {
        const int8_t *p = (const int8_t *)base + off;
        for (int64_t i = 0; i < n; i++) buf[i] = p[i * st];
        break;
    }
    case RTX_I32: {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) buf[i] = p[i * st];
        break;
    }
    case RTX_U8: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) buf[i] = p[i * st];
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = 0;
        break;
    }
    return buf;
}

/* Where a block of n f32 results for elements [off, off + n) goes: the output itself when it
 * is f32, else buf (then flush_f32 rounds it into the output). */
static float *out_f32(void *base, enum rtx_dtype dt, int64_t off, float *buf) {
    return dt == RTX_F32 ? (float *)base + off : buf;
}

static void flush_f32(void *base, enum rtx_dtype dt, int64_t off, const float *src, int64_t n) {
    if (dt == RTX_F16) {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = rtx_f32_to_f16(src[i]);
    } else if (dt == RTX_BF16) {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = rtx_f32_to_bf16(src[i]);
    }
}

/* Stores one integer result, wrapping to the dtype's width (modular in GCC and Clang). */
static void store_int(void *base, enum rtx_dtype dt, int64_t i, int64_t v) {
    switch (dt) {
    case RTX_I8: ((int8_t *)base)[i] = (int8_t)v; break;
    case RTX_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case RTX_I64: ((int64_t *)base)[i] = v; break;
    case RTX_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    default: break;
    }
}

/* ------------------------------------------------------------------------------------------
 * Run kernels: 8 independent lanes so the compiler can keep them in vector registers.
 * ---------------------------------------------------------------------------------------- */

static double sum_run(const float *p, int64_t n) {
    double s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += p[i + l];
    double t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += p[i];
    return t;
}

static double sumsq_run(const float *p, int64_t n) {
    double s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += (double)p[i + l] * p[i + l];
    double t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += (double)p[i] * p[i];
    return t;
}

/* Sum of (p[i] - mean)^2. */
static double sumdev_run(const float *p, int64_t n, double mean) {
    double s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            double d = p[i + l] - mean;
            s[l] += d * d;
        }
    double t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += (p[i] - mean) * (p[i] - mean);
    return t;
}

/* Folds p[0..n) into the running max (is_max) or min *m; *nan is set when a NaN was seen. */
static void maxmin_run(const float *p, int64_t n, bool is_max, float *m, bool *nan) {
    float v8[8];
    int n8[8] = {0};
    for (int l = 0; l < 8; l++) v8[l] = *m;
    int64_t i = 0;
    if (is_max) {
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++) {
                float v = p[i + l];
                v8[l] = v > v8[l] ? v : v8[l];
                n8[l] |= v != v;
            }
    } else {
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++) {
                float v = p[i + l];
                v8[l] = v < v8[l] ? v : v8[l];
                n8[l] |= v != v;
            }
    }
    float t = *m;
    int any = 0;
    for (int l = 0; l < 8; l++) {
        t = is_max ? (v8[l] > t ? v8[l] : t) : (v8[l] < t ? v8[l] : t);
        any |= n8[l];
    }
    for (; i < n; i++) {
        t = is_max ? (p[i] > t ? p[i] : t) : (p[i] < t ? p[i] : t);
        any |= p[i] != p[i];
    }
    *m = t;
    *nan = *nan || any;
}

static uint64_t isum_run(const int64_t *p, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (uint64_t)p[i];
    return s;
}

static int64_t imaxmin_run(const int64_t *p, int64_t n, bool is_max, int64_t m) {
    if (is_max) {
        for (int64_t i = 0; i < n; i++) m = p[i] > m ? p[i] : m;
    } else {
        for (int64_t i = 0; i < n; i++) m = p[i] < m ? p[i] : m;
    }
    return m;
}

/* ------------------------------------------------------------------------------------------
 * reduce_sum, reduce_mean, reduce_max, reduce_min
 * ---------------------------------------------------------------------------------------- */

/* One output's running state. */
struct rd_acc {
    double sum;                         /* float sum / mean */
    float m;                            /* float max / min */
    bool nan;                           /* float max / min saw a NaN */
    uint64_t isum;                      /* integer sum, wrapping */
    int64_t im;                         /* integer max / min */
};

static void acc_init(const struct rd_ctx *c, struct rd_acc *acc) {
    bool is_max = c->op == RTX_OP_REDUCE_MAX;
    acc->sum = 0.0;
    acc->m = is_max ? -INFINITY : INFINITY;
    acc->nan = false;
    acc->isum = 0;
    acc->im = is_max ? INT64_MIN : INT64_MAX;
}

/* Feeds elements off + i * st, i in [0, n). */
static void acc_feed(const struct rd_ctx *c, struct rd_acc *acc, int64_t off, int64_t st,
                     int64_t n) {
    bool is_max = c->op == RTX_OP_REDUCE_MAX;
    bool is_sum = c->op == RTX_OP_REDUCE_SUM || c->op == RTX_OP_REDUCE_MEAN;
    if (rtx_dtype_is_float(c->dt)) {
        float buf[RD_BLOCK];
        /* A contiguous f32 run is read in place, whole. */
        int64_t blk = c->dt == RTX_F32 && st == 1 ? n : RD_BLOCK;
        for (int64_t k = 0; k < n; k += blk) {
            int64_t m = min64(blk, n - k);
            const float *p = load_f32(c->x, c->dt, off + k * st, st, m, buf);
            if (is_sum)
                acc->sum += sum_run(p, m);
            else
                maxmin_run(p, m, is_max, &acc->m, &acc->nan);
        }
    } else {
        int64_t buf[RD_BLOCK];
        int64_t blk = c->dt == RTX_I64 && st == 1 ? n : RD_BLOCK;
        for (int64_t k = 0; k < n; k += blk) {
            int64_t m = min64(blk, n - k);
            const int64_t *p = load_i64(c->x, c->dt, off + k * st, st, m, buf);
            if (is_sum)
                acc->isum += isum_run(p, m);
            else
                acc->im = imaxmin_run(p, m, is_max, acc->im);
        }
    }
}

static double float_result(const struct rd_ctx *c, double sum, float m, bool nan) {
    switch (c->op) {
    case RTX_OP_REDUCE_SUM: return sum;
    case RTX_OP_REDUCE_MEAN: return c->count > 0 ? sum / (double)c->count : NAN;
    default: return nan ? NAN : m;
    }
}

static void acc_store(const struct rd_ctx *c, const struct rd_acc *acc, int64_t i) {
    if (rtx_dtype_is_float(c->dt)) {
        float v = (float)float_result(c, acc->sum, acc->m, acc->nan);
        if (c->dt == RTX_F32)
            ((float *)c->y)[i] = v;
        else
            rtx__store_f32(c->y, c->dt, i, v);
    } else {
        bool is_sum = c->op == RTX_OP_REDUCE_SUM;
        store_int(c->y, c->dt, i, is_sum ? (int64_t)acc->isum : acc->im);
    }
}

/* Rows: output o reduces the contiguous run [o * r, o * r + r). */
static void rd_rows_task(void *ctx, int64_t begin, int64_t end) {
    const struct rd_ctx *c = ctx;
    for (int64_t o = begin; o < end; o++) {
        struct rd_acc acc;
        acc_init(c, &acc);
        acc_feed(c, &acc, o * c->r, 1, c->r);
        acc_store(c, &acc, o);
    }
}

/* Columns: task t is outer index t / nblk and inner slice (t % nblk) * RD_BLOCK, whose
 * accumulators take one contiguous block from each of the r planes. */
static void rd_cols_task(void *ctx, int64_t begin, int64_t end) {
    const struct rd_ctx *c = ctx;
    int64_t nblk = (c->inner + RD_BLOCK - 1) / RD_BLOCK;
    bool is_max = c->op == RTX_OP_REDUCE_MAX;
    bool is_sum = c->op == RTX_OP_REDUCE_SUM || c->op == RTX_OP_REDUCE_MEAN;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / nblk, i0 = (t % nblk) * RD_BLOCK;
        int64_t n = min64(RD_BLOCK, c->inner - i0);
        int64_t base = o * c->r * c->inner + i0, obase = o * c->inner + i0;
        if (rtx_dtype_is_float(c->dt)) {
            double s[RD_BLOCK];
            float m[RD_BLOCK], buf[RD_BLOCK];
            int nan[RD_BLOCK];
            for (int64_t i = 0; i < n; i++) {
                s[i] = 0.0;
                m[i] = is_max ? -INFINITY : INFINITY;
                nan[i] = 0;
            }
            for (int64_t j = 0; j < c->r; j++) {
                const float *p = load_f32(c->x, c->dt, base + j * c->inner, 1, n, buf);
                if (is_sum)
                    LOOP8(n, s[i] += p[i]);
                else if (is_max)
                    LOOP8(n, m[i] = p[i] > m[i] ? p[i] : m[i]; nan[i] |= p[i] != p[i]);
                else
                    LOOP8(n, m[i] = p[i] < m[i] ? p[i] : m[i]; nan[i] |= p[i] != p[i]);
            }
            float *y = out_f32(c->y, c->dt, obase, buf);
            for (int64_t i = 0; i < n; i++) y[i] = (float)float_result(c, s[i], m[i], nan[i]);
            flush_f32(c->y, c->dt, obase, y, n);
        } else {
            uint64_t s[RD_BLOCK];
            int64_t m[RD_BLOCK], buf[RD_BLOCK];
            for (int64_t i = 0; i < n; i++) {
                s[i] = 0;
                m[i] = is_max ? INT64_MIN : INT64_MAX;
            }
            for (int64_t j = 0; j < c->r; j++) {
                const int64_t *p = load_i64(c->x, c->dt, base + j * c->inner, 1, n, buf);
                if (is_sum)
                    LOOP8(n, s[i] += (uint64_t)p[i]);
                else if (is_max)
                    LOOP8(n, m[i] = p[i] > m[i] ? p[i] : m[i]);
                else
                    LOOP8(n, m[i] = p[i] < m[i] ? p[i] : m[i]);
            }
            for (int64_t i = 0; i < n; i++)
                store_int(c->y, c->dt, obase + i, is_sum ? (int64_t)s[i] : m[i]);
        }
    }
}

/* Any pattern: output q's kept coordinates give a base offset; an odometer walks the outer
 * reduced blocks and the innermost one is fed as a strided run. */
static void rd_generic_task(void *ctx, int64_t begin, int64_t end) {
    const struct rd_ctx *c = ctx;
    int lr = c->nr - 1;
    for (int64_t q = begin; q < end; q++) {
        int64_t rem = q, base = 0;
        for (int d = c->nk - 1; d >= 0; d--) {
            base += (rem % c->kdims[d]) * c->kst[d];
            rem /= c->kdims[d];
        }
        struct rd_acc acc;
        acc_init(c, &acc);
        int64_t coord[RTX_MAX_DIMS] = {0}, off = base;
        for (;;) {
            acc_feed(c, &acc, off, c->rst[lr], c->rdims[lr]);
            int d = lr - 1;
            while (d >= 0 && ++coord[d] == c->rdims[d]) {
                coord[d] = 0;
                off -= (c->rdims[d] - 1) * c->rst[d];
                d--;
            }
            if (d < 0) break;
            off += c->rst[d];
        }
        acc_store(c, &acc, q);
    }
}

/* Sets red[d] for each axis in the "axes" attribute (all axes when absent or empty). */
static int read_axes(const struct rtx_node_args *a, int ndim, bool *red, struct rtx_err *err) {
    const int64_t *axes = NULL;
    int na = rtx_node_attr_ints(a->node, "axes", &axes);
    for (int d = 0; d < ndim; d++) red[d] = na <= 0;
    for (int k = 0; k < na; k++) {
        int64_t ax = axes[k] < 0 ? axes[k] + ndim : axes[k];
        if (ax < 0 || ax >= ndim)
            return rtx__backend_node_err(err, a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                         (long long)axes[k], ndim);
        red[ax] = true;
    }
    return 0;
}

static int run_reduce(struct rtx_cpu *cpu, struct rd_ctx *c, struct rtx_err *err) {
    const struct rtx_tensor *x = c->a->in[0];
    bool red[RTX_MAX_DIMS];
    int rc = read_axes(c->a, x->ndim, red, err);
    if (rc < 0) return rc;
    if (c->op == RTX_OP_REDUCE_MEAN && !rtx_dtype_is_float(c->dt))
        return rtx__backend_node_err(err, c->a, RTX_EUNSUPPORTED,
                                     "reduce_mean needs a float input");
    int64_t n_out = rtx_tensor_numel(c->a->out[0]);
    c->count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (red[d]) c->count *= x->dims[d];
    if (n_out == 0) return 0;
    if (c->count == 0) {
        /* An empty reduced axis: the identity of sum, NaN for mean, no max or min. */
        if (c->op == RTX_OP_REDUCE_MAX || c->op == RTX_OP_REDUCE_MIN)
            return rtx__backend_node_err(err, c->a, RTX_EINVAL, "cannot reduce an empty axis");
        struct rd_acc acc;
        acc_init(c, &acc);
        for (int64_t i = 0; i < n_out; i++) acc_store(c, &acc, i);
        return 0;
    }

    /* Drop size-1 axes, merge neighbours of one kind. */
    int nb = 0;
    int64_t bdims[RTX_MAX_DIMS];
    bool bred[RTX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (x->dims[d] == 1) continue;
        if (nb > 0 && bred[nb - 1] == red[d]) {
            bdims[nb - 1] *= x->dims[d];
            continue;
        }
        bdims[nb] = x->dims[d];
        bred[nb++] = red[d];
    }
    int n_rblocks = 0, rb = -1;
    for (int b = 0; b < nb; b++) {
        if (bred[b]) {
            n_rblocks++;
            rb = b;
        }
    }

    if (n_rblocks <= 1) {
        c->outer = c->r = c->inner = 1;
        for (int b = 0; b < nb; b++) {
            if (b == rb)
                c->r = bdims[b];
            else if (rb < 0 || b < rb)
                c->outer *= bdims[b];
            else
                c->inner *= bdims[b];
        }
        if (c->inner == 1) {
            rtx__cpu_parallel_for(cpu, c->outer, 1 + RD_GRAIN / c->r, rd_rows_task, c);
        } else {
            int64_t nblk = (c->inner + RD_BLOCK - 1) / RD_BLOCK;
            int64_t work = c->r * min64(c->inner, RD_BLOCK);
            rtx__cpu_parallel_for(cpu, c->outer * nblk, 1 + RD_GRAIN / work, rd_cols_task, c);
        }
        return 0;
    }

    int64_t bst[RTX_MAX_DIMS], s = 1;
    for (int b = nb - 1; b >= 0; b--) {
        bst[b] = s;
        s *= bdims[b];
    }
    c->nk = c->nr = 0;
    for (int b = 0; b < nb; b++) {
        if (bred[b]) {
            c->rdims[c->nr] = bdims[b];
            c->rst[c->nr++] = bst[b];
        } else {
            c->kdims[c->nk] = bdims[b];
            c->kst[c->nk++] = bst[b];
        }
    }
    rtx__cpu_parallel_for(cpu, n_out, 1 + RD_GRAIN / c->count, rd_generic_task, c);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * argmax, softmax, log_softmax: rows along one axis
 * ---------------------------------------------------------------------------------------- */

/* Normalizes the "axis" attribute and sets outer, r, inner around it. */
static int axis_view(struct rd_ctx *c, int64_t dflt, struct rtx_err *err) {
    const struct rtx_tensor *x = c->a->in[0];
    int64_t axis = rtx_node_attr_int(c->a->node, "axis", dflt);
    int nd = x->ndim;
    c->outer = c->r = c->inner = 1;
    if (nd == 0) return 0; /* a scalar is one row of one element */
    int64_t ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd)
        return rtx__backend_node_err(err, c->a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                     (long long)axis, nd);
    for (int d = 0; d < nd; d++) {
        if (d < ax)
            c->outer *= x->dims[d];
        else if (d == ax)
            c->r = x->dims[d];
        else
            c->inner *= x->dims[d];
    }
    return 0;
}

/* First index of the maximum of the run; the first NaN wins. */
static int64_t argmax_run(const struct rd_ctx *c, int64_t off, int64_t st, int64_t n) {
    int64_t best_i = 0;
    if (rtx_dtype_is_float(c->dt)) {
        float buf[RD_BLOCK], best = 0.0f;
        for (int64_t k = 0; k < n; k += RD_BLOCK) {
            int64_t m = min64(RD_BLOCK, n - k);
            const float *p = load_f32(c->x, c->dt, off + k * st, st, m, buf);
            for (int64_t i = 0; i < m; i++) {
                float v = p[i];
                if (v != v) return k + i;
                if ((k == 0 && i == 0) || v > best) {
                    best = v;
                    best_i = k + i;
                }
            }
        }
    } else {
        int64_t buf[RD_BLOCK], best = INT64_MIN;
        for (int64_t k = 0; k < n; k += RD_BLOCK) {
            int64_t m = min64(RD_BLOCK, n - k);
            const int64_t *p = load_i64(c->x, c->dt, off + k * st, st, m, buf);
            for (int64_t i = 0; i < m; i++) {
                if ((k == 0 && i == 0) || p[i] > best) {
                    best = p[i];
                    best_i = k + i;
                }
            }
        }
    }
    return best_i;
}

/* Task t is the row of outer index t / inner and inner index t % inner. */
static void argmax_task(void *ctx, int64_t begin, int64_t end) {
    const struct rd_ctx *c = ctx;
    int64_t *y = c->y;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / c->inner, i = t % c->inner;
        y[t] = argmax_run(c, o * c->r * c->inner + i, c->inner, c->r);
    }
}

/* softmax / log_softmax of the run off + i * st, i in [0, r). */
static void softmax_run(const struct rd_ctx *c, int64_t off, int64_t st) {
    bool is_log = c->op == RTX_OP_LOG_SOFTMAX;
    /* f32 rows in place: exp is computed once, stored, then scaled. */
    bool direct = c->dt == RTX_F32 && st == 1 && !is_log;
    int64_t n = c->r;
    float buf[RD_BLOCK], obuf[RD_BLOCK];
    float mx = -INFINITY;
    bool nan = false;
    for (int64_t k = 0; k < n; k += RD_BLOCK) {
        int64_t m = min64(RD_BLOCK, n - k);
        maxmin_run(load_f32(c->x, c->dt, off + k * st, st, m, buf), m, true, &mx, &nan);
    }
    if (nan) mx = NAN;
    double sum = 0.0;
    for (int64_t k = 0; k < n; k += RD_BLOCK) {
        int64_t m = min64(RD_BLOCK, n - k);
        const float *p = load_f32(c->x, c->dt, off + k * st, st, m, buf);
        float *e = direct ? (float *)c->y + off + k : obuf;
        for (int64_t i = 0; i < m; i++) e[i] = expf(p[i] - mx);
        sum += sum_run(e, m);
    }
    double lse = log(sum);
    float inv = (float)(1.0 / sum);
    for (int64_t k = 0; k < n; k += RD_BLOCK) {
        int64_t m = min64(RD_BLOCK, n - k);
        if (direct) {
            float *y = (float *)c->y + off + k;
            LOOP8(m, y[i] *= inv);
            continue;
        }
        const float *p = load_f32(c->x, c->dt, off + k * st, st, m, buf);
        if (is_log) {
            for (int64_t i = 0; i < m; i++) obuf[i] = (float)((double)p[i] - mx - lse);
        } else {
            for (int64_t i = 0; i < m; i++) obuf[i] = expf(p[i] - mx) * inv;
        }
        for (int64_t i = 0; i < m; i++) rtx__store_f32(c->y, c->dt, off + (k + i) * st, obuf[i]);
    }
}

static void softmax_task(void *ctx, int64_t begin, int64_t end) {
    const struct rd_ctx *c = ctx;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / c->inner, i = t % c->inner;
        softmax_run(c, o * c->r * c->inner + i, c->inner);
    }
}

/* ------------------------------------------------------------------------------------------
 * layer_norm, rms_norm: contiguous rows of r = prod(dims[axis:]) elements
 * ---------------------------------------------------------------------------------------- */

static void norm_row(const struct rd_ctx *c, int64_t row) {
    bool is_layer = c->op == RTX_OP_LAYER_NORM;
    int64_t n = c->r, off = row * n;
    float buf[RD_BLOCK], sbuf[RD_BLOCK], bbuf[RD_BLOCK], obuf[RD_BLOCK];
    int64_t blk = c->dt == RTX_F32 ? n : RD_BLOCK;
    double mean = 0.0, acc = 0.0;
    if (is_layer) {
        for (int64_t k = 0; k < n; k += blk) {
            int64_t m = min64(blk, n - k);
            mean += sum_run(load_f32(c->x, c->dt, off + k, 1, m, buf), m);
        }
        mean /= (double)n;
        for (int64_t k = 0; k < n; k += blk) {
            int64_t m = min64(blk, n - k);
            acc += sumdev_run(load_f32(c->x, c->dt, off + k, 1, m, buf), m, mean);
        }
    } else {
        for (int64_t k = 0; k < n; k += blk) {
            int64_t m = min64(blk, n - k);
            acc += sumsq_run(load_f32(c->x, c->dt, off + k, 1, m, buf), m);
        }
    }
    double rstd = 1.0 / sqrt(acc / (double)n + c->eps);
    for (int64_t k = 0; k < n; k += blk) {
        int64_t m = min64(blk, n - k);
        const float *p = load_f32(c->x, c->dt, off + k, 1, m, buf);
        const float *sc = c->scale ? load_f32(c->scale, c->dt, k, 1, m, sbuf) : NULL;
        const float *bi = c->bias ? load_f32(c->bias, c->dt, k, 1, m, bbuf) : NULL;
        float *y = out_f32(c->y, c->dt, off + k, obuf);
        if (sc && bi)
            RTX__VLOOP(float, y, m, (float)(((double)p[i] - mean) * rstd * sc[i] + bi[i]));
        else if (sc)
            RTX__VLOOP(float, y, m, (float)(((double)p[i] - mean) * rstd * sc[i]));
        else if (bi)
            RTX__VLOOP(float, y, m, (float)(((double)p[i] - mean) * rstd + bi[i]));
        else
            RTX__VLOOP(float, y, m, (float)(((double)p[i] - mean) * rstd));
        flush_f32(c->y, c->dt, off + k, y, m);
    }
}

static void norm_task(void *ctx, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; row++) norm_row(ctx, row);
}

static int run_norm(struct rtx_cpu *cpu, struct rd_ctx *c, struct rtx_err *err) {
    const struct rtx_tensor *x = c->a->in[0];
    bool is_layer = c->op == RTX_OP_LAYER_NORM;
    int64_t axis = rtx_node_attr_int(c->a->node, "axis", -1);
    int nd = x->ndim;
    int64_t ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= (nd > 0 ? nd : 1))
        return rtx__backend_node_err(err, c->a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                     (long long)axis, nd);
    c->outer = c->r = 1;
    for (int d = 0; d < nd; d++) {
        if (d < ax)
            c->outer *= x->dims[d];
        else
            c->r *= x->dims[d];
    }
    c->eps = rtx_node_attr_float(c->a->node, "epsilon", is_layer ? 1e-5 : 1e-6);
    int n_params = is_layer ? 2 : 1;
    for (int k = 1; k <= n_params && k < c->a->n_in; k++) {
        const struct rtx_tensor *p = c->a->in[k];
        if (!p) continue;
        if (p->dtype != c->dt || rtx_tensor_numel(p) != c->r)
            return rtx__backend_node_err(err, c->a, RTX_EINVAL, "input %d must be %s with %lld "
                                         "elements", k, rtx_dtype_name(c->dt), (long long)c->r);
        if (k == 1)
            c->scale = rtx_tensor_data(p);
        else
            c->bias = rtx_tensor_data(p);
    }
    if (c->outer == 0 || c->r == 0) return 0;
    rtx__cpu_parallel_for(cpu, c->outer, 1 + RD_GRAIN / c->r, norm_task, c);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Entry point
 * ---------------------------------------------------------------------------------------- */

int rtx__cpu_reduce(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    struct rd_ctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.op = a->node->op;
    if (a->n_in < 1 || !a->in[0] || a->n_out < 1 || !a->out[0])
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing input or output tensor");
    c.dt = a->in[0]->dtype;
    c.x = rtx_tensor_data(a->in[0]);
    c.y = rtx_tensor_data(a->out[0]);
    enum rtx_dtype ydt = a->out[0]->dtype;
    bool is_float = rtx_dtype_is_float(c.dt);
    int rc;
    switch (c.op) {
    case RTX_OP_REDUCE_SUM:
    case RTX_OP_REDUCE_MEAN:
    case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN:
        if (c.dt == RTX_BOOL || ydt != c.dt) break;
        return run_reduce(cpu, &c, err);
    case RTX_OP_ARGMAX:
        if (c.dt == RTX_BOOL || ydt != RTX_I64) break;
        if ((rc = axis_view(&c, -1, err)) < 0) return rc;
        if (rtx_tensor_numel(a->out[0]) == 0) return 0;
        if (c.r == 0) return rtx__backend_node_err(err, a, RTX_EINVAL, "argmax of an empty axis");
        rtx__cpu_parallel_for(cpu, c.outer * c.inner, 1 + RD_GRAIN / c.r, argmax_task, &c);
        return 0;
    case RTX_OP_SOFTMAX:
    case RTX_OP_LOG_SOFTMAX:
        if (!is_float || ydt != c.dt) break;
        if ((rc = axis_view(&c, -1, err)) < 0) return rc;
        if (rtx_tensor_numel(a->out[0]) == 0) return 0;
        rtx__cpu_parallel_for(cpu, c.outer * c.inner, 1 + RD_GRAIN / c.r, softmax_task, &c);
        return 0;
    case RTX_OP_LAYER_NORM:
    case RTX_OP_RMS_NORM:
        if (!is_float || ydt != c.dt) break;
        return run_norm(cpu, &c, err);
    default:
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "not a reduction op");
    }
    return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED,
                                 "unsupported dtypes (input %s, output %s)", rtx_dtype_name(c.dt),
                                 rtx_dtype_name(ydt));
}
