/*
 * ops-conv.c - CPU kernels for conv2d, max_pool2d and avg_pool2d on NCHW tensors
 * (docs/ops.md).
 *
 * DESIGN
 * conv2d is im2col + sgemm per image and group: the columns matrix holds, for each
 * (input channel, kernel row, kernel column), the input pixels each output pixel sees (0 in
 * the padding), so out[g] = w[g] . columns. A 1x1 kernel with unit stride and no padding
 * uses the input itself as the columns matrix. When the product of one (image, group) pair is
 * small the pairs are split over the pool (OpenBLAS then computes on each worker's thread);
 * when it is large they go one by one, im2col split over the pool and sgemm threaded by
 * OpenBLAS.
 * f16/bf16 are widened to f32 first and rounded once on store. Pooling walks each output
 * pixel's window directly, with channel planes split over the pool.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"

#define SMALL_GEMM_MACS (1 << 18) /* below this OpenBLAS computes on the calling thread */
#define CONVERT_GRAIN (1 << 15)   /* elements per chunk of a dtype conversion */

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

/* Reads an optional attribute of `count` ints into v (dflt when absent); false when it is
 * present with another length. */
static bool attr_ints_n(const struct rtx_node *n, const char *name, int count,
                        const int64_t *dflt, int64_t *v) {
    const int64_t *p;
    int k = rtx_node_attr_ints(n, name, &p);
    for (int i = 0; i < count; i++) v[i] = k == count ? p[i] : dflt[i];
    return k < 0 || k == count;
}

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Common geometry of conv and pooling. */
struct window {
    int64_t N, C, H, W, Ho, Wo;
    int64_t kh, kw;              /* kernel */
    int64_t sh, sw;              /* strides */
    int64_t pt, pl, pb, pr;      /* pads: top, left, bottom, right */
    int64_t dh, dw;              /* dilations */
};

/* Reads strides (default: 1, or the kernel for pooling), pads and dilations (when `dilated`),
 * and checks the output dims against the inferred ones. */
static int read_window(const struct rtx_node_args *a, struct window *w, bool pool,
                       bool dilated, bool ceil_mode, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0], *y = a->out[0];
    if (x->ndim != 4 || y->ndim != 4)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "x must be 4-D (NCHW)");
    w->N = x->dims[0];
    w->C = x->dims[1];
    w->H = x->dims[2];
    w->W = x->dims[3];
    const int64_t s0[2] = {pool ? w->kh : 1, pool ? w->kw : 1}, p0[4] = {0}, d0[2] = {1, 1};
    int64_t s[2], p[4], d[2];
    if (!attr_ints_n(a->node, "strides", 2, s0, s) || !attr_ints_n(a->node, "pads", 4, p0, p) ||
        !attr_ints_n(a->node, "dilations", 2, d0, d))
        return rtx__cpu_node_err(err, a, RTX_EINVAL,
                                 "strides and dilations need 2 ints, pads 4");
    if (!dilated) memcpy(d, d0, sizeof d);
    w->sh = s[0];
    w->sw = s[1];
    w->pt = p[0];
    w->pl = p[1];
    w->pb = p[2];
    w->pr = p[3];
    w->dh = d[0];
    w->dw = d[1];
    if (w->kh < 1 || w->kw < 1 || w->dh < 1 || w->dw < 1 || w->sh < 1 || w->sw < 1 ||
        w->pt < 0 || w->pl < 0 || w->pb < 0 || w->pr < 0)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "bad kernel, stride, pad or dilation");
    int64_t nh = w->H + w->pt + w->pb - w->dh * (w->kh - 1) - 1;
    int64_t nw = w->W + w->pl + w->pr - w->dw * (w->kw - 1) - 1;
    int64_t ho = floor_div(nh, w->sh) + 1, wo = floor_div(nw, w->sw) + 1;
    if (ceil_mode) {
        ho = floor_div(nh + w->sh - 1, w->sh) + 1;
        wo = floor_div(nw + w->sw - 1, w->sw) + 1;
        if ((ho - 1) * w->sh >= w->H + w->pt) ho--; /* last window must start inside */
        if ((wo - 1) * w->sw >= w->W + w->pl) wo--;
    }
    w->Ho = y->dims[2];
    w->Wo = y->dims[3];
    if (ho != w->Ho || wo != w->Wo || y->dims[0] != w->N)
        return rtx__cpu_node_err(err, a, RTX_EINTERNAL,
                                 "output is %lldx%lld, the window gives %lldx%lld",
                                 (long long)w->Ho, (long long)w->Wo, (long long)ho,
                                 (long long)wo);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * conv2d
 * ---------------------------------------------------------------------------------------- */

struct conv_job {
    struct window w;
    int64_t G, Cg, Og;           /* groups, input and output channels per group */
    int64_t K, P;                /* Cg * kh * kw, Ho * Wo */
    bool direct;                 /* 1x1, unit stride, no pad: columns = the input */
    const float *x, *wt, *bias;
    float *y;                    /* f32 output [N, O, Ho, Wo] */
    atomic_int failed;           /* a chunk could not allocate its columns */
};

/* Rows [r0, r1) of the columns matrix of one image group (img: [Cg, H, W]). */
static void im2col_rows(const struct conv_job *j, const float *img, float *col, int64_t r0,
                        int64_t r1) {
    const struct window *w = &j->w;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / (w->kh * w->kw), kh = r / w->kw % w->kh, kw = r % w->kw;
        const float *plane = img + c * w->H * w->W;
        float *dst = col + r * j->P;
        int64_t off = kw * w->dw - w->pl; /* iw = ow * sw + off */
        int64_t lo = off >= 0 ? 0 : (-off + w->sw - 1) / w->sw;
        int64_t hi = w->W - 1 - off < 0 ? -1 : (w->W - 1 - off) / w->sw; /* last valid ow */
        if (lo > w->Wo) lo = w->Wo;
        if (hi >= w->Wo) hi = w->Wo - 1;
        for (int64_t oh = 0; oh < w->Ho; oh++) {
            int64_t ih = oh * w->sh - w->pt + kh * w->dh;
            float *d = dst + oh * w->Wo;
            if (ih < 0 || ih >= w->H || hi < lo) {
                memset(d, 0, (size_t)w->Wo * sizeof *d);
                continue;
            }
            const float *srow = plane + ih * w->W;
            memset(d, 0, (size_t)lo * sizeof *d);
            if (w->sw == 1) {
                memcpy(d + lo, srow + lo + off, (size_t)(hi - lo + 1) * sizeof *d);
            } else {
                for (int64_t ow = lo; ow <= hi; ow++) d[ow] = srow[ow * w->sw + off];
            }
            memset(d + hi + 1, 0, (size_t)(w->Wo - hi - 1) * sizeof *d);
        }
    }
}

struct im2col_job {
    const struct conv_job *conv;
    const float *img;
    float *col;
};

static void im2col_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct im2col_job *j = ctx;
    im2col_rows(j->conv, j->img, j->col, begin, end);
}

/* out[n, group g] = w[g] . columns of (n, g), for task ng = n * G + g; im2col goes over the
 * pool when cpu is not NULL. */
static void conv_group(const struct conv_job *j, int64_t ng, float *col, struct rtx_cpu *cpu) {
    const struct window *w = &j->w;
    int64_t n = ng / j->G, g = ng % j->G;
    const float *img = j->x + (n * w->C + g * j->Cg) * w->H * w->W;
    const float *cols = img;
    if (!j->direct) {
        if (cpu) {
            struct im2col_job ij = {.conv = j, .img = img, .col = col};
            rtx__cpu_parallel_for(cpu, j->K, 1, im2col_chunk, &ij);
        } else {
            im2col_rows(j, img, col, 0, j->K);
        }
        cols = col;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->Og, (int)j->P, (int)j->K,
                1.0f, j->wt + g * j->Og * j->K, (int)j->K, cols, (int)j->P, 0.0f,
                j->y + ng * j->Og * j->P, (int)j->P);
}

static void conv_groups_chunk(void *ctx, int64_t begin, int64_t end) {
    struct conv_job *j = ctx;
    float *col = NULL;
    if (!j->direct) {
        col = rtx_malloc((size_t)(j->K * j->P) * sizeof *col);
        if (col == NULL) {
            atomic_store(&j->failed, 1);
            return;
        }
    }
    for (int64_t ng = begin; ng < end; ng++) conv_group(j, ng, col, NULL);
    rtx_free(col);
}

struct bias_job {
    float *y;
    const float *bias;
    int64_t O, P;
    void *out;                   /* non-f32 output to round into, or NULL */
    enum rtx_dtype dt;
};

static void bias_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct bias_job *j = ctx;
    for (int64_t pl = begin; pl < end; pl++) {
        float *p = j->y + pl * j->P;
        if (j->bias) {
            float b = j->bias[pl % j->O];
            for (int64_t i = 0; i < j->P; i++) p[i] += b;
        }
        if (j->out)
            for (int64_t i = 0; i < j->P; i++) rtx__store_f32(j->out, j->dt, pl * j->P + i, p[i]);
    }
}

static int run_conv2d(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *X = a->in[0], *Wt = a->in[1];
    const struct rtx_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = a->out[0];
    struct conv_job j = {.G = rtx_node_attr_int(a->node, "groups", 1)};
    if (Wt->ndim != 4)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "w must be 4-D [O, C/groups, kH, kW]");
    j.w.kh = Wt->dims[2];
    j.w.kw = Wt->dims[3];
    int rc = read_window(a, &j.w, false, true, false, err);
    if (rc) return rc;
    int64_t O = Wt->dims[0];
    if (j.G < 1 || j.w.C % j.G || O % j.G || Wt->dims[1] != j.w.C / j.G || Y->dims[1] != O)
        return rtx__cpu_node_err(err, a, RTX_EINVAL,
                                 "channels (x %lld, w %lldx%lld) do not fit groups %lld",
                                 (long long)j.w.C, (long long)O, (long long)Wt->dims[1],
                                 (long long)j.G);
    if (B && (B->ndim != 1 || B->dims[0] != O))
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "b must be [%lld]", (long long)O);
    j.Cg = j.w.C / j.G;
    j.Og = O / j.G;
    j.K = j.Cg * j.w.kh * j.w.kw;
    j.P = j.w.Ho * j.w.Wo;
    j.direct = j.w.kh == 1 && j.w.kw == 1 && j.w.sh == 1 && j.w.sw == 1 && j.w.pt == 0 &&
               j.w.pl == 0 && j.w.pb == 0 && j.w.pr == 0;
    atomic_init(&j.failed, 0);
    if (j.w.N * O * j.P == 0) return 0;
    if (j.K > INT_MAX || j.P > INT_MAX || j.Og > INT_MAX)
        return rtx__cpu_node_err(err, a, RTX_ELIMIT, "im2col matrix dimension over %d",
                                 INT_MAX);

    float *x_own = NULL, *w_own = NULL, *b_own = NULL, *y_own = NULL, *col = NULL;
    j.x = rtx__cpu_as_f32(cpu, X, &x_own);
    j.wt = j.x ? rtx__cpu_as_f32(cpu, Wt, &w_own) : NULL;
    j.bias = j.wt && B ? rtx__cpu_as_f32(cpu, B, &b_own) : NULL;
    if (Y->dtype == RTX_F32)
        j.y = rtx_tensor_data(Y);
    else if (j.wt && (j.bias || !B))
        j.y = y_own = rtx_malloc((size_t)rtx_tensor_numel(Y) * sizeof *y_own);
    if (j.y == NULL || !j.wt || (B && !j.bias)) {
        rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    if (j.K == 0) {
        memset(j.y, 0, (size_t)rtx_tensor_numel(Y) * sizeof *j.y);
    } else if (j.w.N * j.G > 1 && j.Og * j.P * j.K <= SMALL_GEMM_MACS) {
        rtx__cpu_parallel_for(cpu, j.w.N * j.G, 1, conv_groups_chunk, &j);
        if (atomic_load(&j.failed)) {
            rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "im2col scratch");
            goto done;
        }
    } else {
        if (!j.direct && (col = rtx_malloc((size_t)(j.K * j.P) * sizeof *col)) == NULL) {
            rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "im2col scratch");
            goto done;
        }
        for (int64_t ng = 0; ng < j.w.N * j.G; ng++) conv_group(&j, ng, col, cpu);
    }
    if (j.bias || y_own) {
        struct bias_job bj = {.y = j.y, .bias = j.bias, .O = O, .P = j.P,
                              .out = y_own ? rtx_tensor_data(Y) : NULL, .dt = Y->dtype};
        rtx__cpu_parallel_for(cpu, j.w.N * O, CONVERT_GRAIN / j.P + 1, bias_chunk, &bj);
    }
done:
    rtx_free(col);
    rtx_free(x_own);
    rtx_free(w_own);
    rtx_free(b_own);
    rtx_free(y_own);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Pooling
 * ---------------------------------------------------------------------------------------- */

struct pool_job {
    struct window w;
    const void *x;
    void *y;
    enum rtx_dtype dt;
    bool is_max, count_include_pad;
};

static void pool_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct pool_job *j = ctx;
    const struct window *w = &j->w;
    for (int64_t pl = begin; pl < end; pl++) {
        int64_t xb = pl * w->H * w->W, yb = pl * w->Ho * w->Wo;
        for (int64_t oh = 0; oh < w->Ho; oh++) {
            int64_t hs = oh * w->sh - w->pt;
            for (int64_t ow = 0; ow < w->Wo; ow++) {
                int64_t ws = ow * w->sw - w->pl;
                float v;
                if (j->is_max) {
                    v = -INFINITY;
                    for (int64_t kh = 0; kh < w->kh; kh++) {
                        int64_t ih = hs + kh * w->dh;
                        if (ih < 0 || ih >= w->H) continue;
                        for (int64_t kw = 0; kw < w->kw; kw++) {
                            int64_t iw = ws + kw * w->dw;
                            if (iw < 0 || iw >= w->W) continue;
                            float e = rtx__load_f32(j->x, j->dt, xb + ih * w->W + iw);
                            if (e > v || isnan(e)) v = e;
                            if (isnan(v)) break;
                        }
                    }
                } else {
                    int64_t he = hs + w->kh < w->H + w->pb ? hs + w->kh : w->H + w->pb;
                    int64_t we = ws + w->kw < w->W + w->pr ? ws + w->kw : w->W + w->pr;
                    int64_t padded = (he - hs) * (we - ws);
                    int64_t h0 = hs > 0 ? hs : 0, w0 = ws > 0 ? ws : 0;
                    int64_t h1 = he < w->H ? he : w->H, w1 = we < w->W ? we : w->W;
                    float sum = 0.0f;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++)
                            sum += rtx__load_f32(j->x, j->dt, xb + ih * w->W + iw);
                    int64_t inside = (h1 > h0 && w1 > w0) ? (h1 - h0) * (w1 - w0) : 0;
                    int64_t div = j->count_include_pad ? padded : inside;
                    v = div > 0 ? sum / (float)div : 0.0f;
                }
                rtx__store_f32(j->y, j->dt, yb + oh * w->Wo + ow, v);
            }
        }
    }
}

static int run_pool(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool is_max,
                    struct rtx_err *err) {
    const struct rtx_tensor *X = a->in[0];
    struct rtx_tensor *Y = a->out[0];
    struct pool_job j = {
        .x = rtx_tensor_data(X), .y = rtx_tensor_data(Y), .dt = X->dtype, .is_max = is_max,
        .count_include_pad = rtx_node_attr_int(a->node, "count_include_pad", 0) != 0,
    };
    const int64_t *ks;
    if (rtx_node_attr_ints(a->node, "kernel_shape", &ks) != 2)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "kernel_shape needs 2 ints");
    j.w.kh = ks[0];
    j.w.kw = ks[1];
    bool ceil_mode = rtx_node_attr_int(a->node, "ceil_mode", 0) != 0;
    int rc = read_window(a, &j.w, true, is_max, ceil_mode, err);
    if (rc) return rc;
    if (Y->dims[1] != j.w.C)
        return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "output channels differ from input");
    int64_t planes = j.w.N * j.w.C, work = j.w.Ho * j.w.Wo * j.w.kh * j.w.kw;
    if (planes * j.w.Ho * j.w.Wo == 0) return 0;
    rtx__cpu_parallel_for(cpu, planes, (1 << 16) / (work > 0 ? work : 1) + 1, pool_chunk, &j);
    return 0;
}

int rtx__cpu_conv(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_CONV2D: return run_conv2d(cpu, a, err);
    case RTX_OP_MAX_POOL2D: return run_pool(cpu, a, true, err);
    case RTX_OP_AVG_POOL2D: return run_pool(cpu, a, false, err);
    default: break;
    }
    return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "not a conv op");
}
