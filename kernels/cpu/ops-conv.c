/*
 * ops-conv.c - CPU kernels for conv2d, max_pool2d and avg_pool2d on NCHW tensors
 * (docs/ops.md).
 *
 * DESIGN
 * conv2d is im2col + sgemm: the columns matrix holds, for each (input channel, kernel row,
 * kernel column), the input pixels each output pixel sees (0 in the padding), so
 * out[g] = w[g] . columns. An ungrouped conv puts the columns of a chunk of images side by
 * side (up to 64 MiB of scratch) and computes them in one sgemm threaded by OpenBLAS (a wide
 * product instead of one skinny product per image: ResNet's 3x3 convs have 16-64 output
 * channels), then moves each image's rows into place. A 1x1 kernel with unit stride and no
 * padding uses the input itself as the columns matrix, per image. Grouped convs go per
 * (image, group): split over the pool when each product is small (OpenBLAS then computes on
 * each worker's thread), one by one with im2col over the pool when large.
 * f16/bf16 are widened to f32 first and rounded once on store. Pooling walks each output
 * pixel's window directly, with channel planes split over the pool. The window and its checks
 * come from kernels/geometry.c, shared with the CUDA backend.
 */
#include <cblas.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/geometry.h"

#define CONVERT_GRAIN (1 << 15)   /* elements per chunk of a dtype conversion */
#define POOL_ROW_MAX 4096         /* input row length of the separable max pooling, at most */
#define POOL_ROW_SLACK 32         /* floats past it that its 8-output vectors read */

/* ------------------------------------------------------------------------------------------
 * conv2d
 * ---------------------------------------------------------------------------------------- */

struct conv_job {
    struct rtx__conv2d_geom g;   /* window, groups, GEMM sizes */
    const float *x, *wt, *bias;
    float *y;                    /* f32 output [N, O, Ho, Wo] */
    atomic_int failed;           /* a chunk could not allocate its columns */
};

/* Rows [r0, r1) of the columns matrix of one image group (img: [Cg, H, W]); row r starts at
 * col + r * ld. */
static void im2col_rows(const struct conv_job *j, const float *img, float *col, int64_t ld,
                        int64_t r0, int64_t r1) {
    const struct rtx__window_geom *w = &j->g.w;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / (w->kh * w->kw), kh = r / w->kw % w->kh, kw = r % w->kw;
        const float *plane = img + c * w->H * w->W;
        float *dst = col + r * ld;
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
            if (w->Wo < 32) { /* short rows (late ResNet stages): calls would cost more */
                for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0.0f;
                for (int64_t ow = lo; ow <= hi; ow++) d[ow] = srow[ow * w->sw + off];
                for (int64_t ow = hi + 1; ow < w->Wo; ow++) d[ow] = 0.0f;
                continue;
            }
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
    im2col_rows(j->conv, j->img, j->col, j->conv->g.P, begin, end);
}

/* out[n, group g] = w[g] . columns of (n, g), for task ng = n * G + g; im2col goes over the
 * pool when cpu is not NULL. */
static void conv_group(const struct conv_job *j, int64_t ng, float *col, struct rtx_cpu *cpu) {
    const struct rtx__window_geom *w = &j->g.w;
    int64_t n = ng / j->g.G, g = ng % j->g.G;
    const float *img = j->x + (n * w->C + g * j->g.Cg) * w->H * w->W;
    const float *cols = img;
    if (!j->g.direct) {
        if (cpu) {
            struct im2col_job ij = {.conv = j, .img = img, .col = col};
            rtx__cpu_parallel_for(cpu, j->g.K, 1, im2col_chunk, &ij);
        } else {
            im2col_rows(j, img, col, j->g.P, 0, j->g.K);
        }
        cols = col;
    }
    const float *wg = j->wt + g * j->g.Og * j->g.K;
    float *y = j->y + ng * j->g.Og * j->g.P;
    if (cpu) /* one group at a time: the product goes over the pool */
        rtx__cpu_sgemm(cpu, false, false, j->g.Og, j->g.P, j->g.K, 1.0f, wg, j->g.K, cols,
                       j->g.P, 0.0f, y, j->g.P);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->g.Og, (int)j->g.P,
                    (int)j->g.K, 1.0f, wg, (int)j->g.K, cols, (int)j->g.P, 0.0f, y,
                    (int)j->g.P);
}

static void conv_groups_chunk(void *ctx, int64_t begin, int64_t end) {
    struct conv_job *j = ctx;
    float *col = NULL;
    if (!j->g.direct) {
        col = rtx_malloc((size_t)(j->g.K * j->g.P) * sizeof *col);
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

/* Scratch bytes of one batched product (columns and result of a chunk of images). */
#define BATCH_SCRATCH_BYTES ((int64_t)64 << 20)

/* A chunk of images [n0, n0 + nb) of an ungrouped conv as one product: their columns side
 * by side ([K, nb * P]), one sgemm w [O, K] . columns into t [O, nb * P] (threaded by
 * OpenBLAS: one call with a wide right-hand side instead of nb skinny ones), then each image's
 * rows moved into y. */
struct batch_job {
    const struct conv_job *conv;
    int64_t n0, nb;
    float *col, *t;
};

static void batch_im2col_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct batch_job *b = ctx;
    const struct conv_job *j = b->conv;
    int64_t K = j->g.K, P = j->g.P, CHW = j->g.w.C * j->g.w.H * j->g.w.W;
    for (int64_t q = begin; q < end; q++) { /* q = image i of the chunk, row r */
        int64_t i = q / K, r = q % K;
        im2col_rows(j, j->x + (b->n0 + i) * CHW, b->col + i * P, b->nb * P, r, r + 1);
    }
}

static void batch_scatter_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct batch_job *b = ctx;
    const struct conv_job *j = b->conv;
    int64_t O = j->g.O, P = j->g.P;
    for (int64_t q = begin; q < end; q++) { /* q = image i, channel o */
        int64_t i = q / O, o = q % O;
        memcpy(j->y + ((b->n0 + i) * O + o) * P, b->t + o * b->nb * P + i * P,
               (size_t)P * sizeof *j->y);
    }
}

static int conv_batched(struct rtx_cpu *cpu, const struct conv_job *j) {
    int64_t N = j->g.w.N, K = j->g.K, P = j->g.P, O = j->g.O;
    int64_t per_image = (K + O) * P * (int64_t)sizeof(float);
    int64_t nb = BATCH_SCRATCH_BYTES / (per_image > 0 ? per_image : 1);
    if (nb < 1) nb = 1;
    if (nb > N) nb = N;
    if (nb * P > INT_MAX) nb = INT_MAX / P;
    struct batch_job b = {.conv = j};
    b.col = rtx_malloc((size_t)(K * nb * P) * sizeof *b.col);
    b.t = nb > 1 ? rtx_malloc((size_t)(O * nb * P) * sizeof *b.t) : NULL;
    if (!b.col || (nb > 1 && !b.t)) {
        rtx_free(b.col);
        rtx_free(b.t);
        return RTX_ENOMEM;
    }
    for (b.n0 = 0; b.n0 < N; b.n0 += b.nb) {
        b.nb = N - b.n0 < nb ? N - b.n0 : nb;
        int64_t width = b.nb * P;
        rtx__cpu_parallel_for(cpu, b.nb * K, 1 + (1 << 16) / (P > 0 ? P : 1),
                              batch_im2col_chunk, &b);
        float *dst = b.nb > 1 ? b.t : j->y + b.n0 * O * P;
        rtx__cpu_sgemm(cpu, false, false, O, width, K, 1.0f, j->wt, K, b.col, width, 0.0f, dst,
                       width);
        if (b.nb > 1)
            rtx__cpu_parallel_for(cpu, b.nb * O, 1 + (1 << 16) / (P > 0 ? P : 1),
                                  batch_scatter_chunk, &b);
    }
    rtx_free(b.col);
    rtx_free(b.t);
    return 0;
}

/* conv2d; with e (rows: the output planes), the conv then e, into out (the fused group's
 * output) instead. */
static int run_conv2d(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                      const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                      struct rtx_err *err) {
    const struct rtx_tensor *X = a->in[0], *Wt = a->in[1];
    const struct rtx_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = out ? out : a->out[0];
    struct rtx__conv2d_geom geo;
    char why[128];
    int rc = rtx__conv2d_geometry(a->node, X, Wt, B, Y, &geo, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    int64_t O = geo.O;
    struct conv_job j = {.g = geo};
    atomic_init(&j.failed, 0);
    if (j.g.w.N * O * j.g.P == 0) return 0;
    if (j.g.K > INT_MAX || j.g.P > INT_MAX || j.g.Og > INT_MAX)
        return rtx__backend_node_err(err, a, RTX_ELIMIT, "im2col matrix dimension over %d",
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
        rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    if (j.g.K == 0) {
        memset(j.y, 0, (size_t)rtx_tensor_numel(Y) * sizeof *j.y);
#ifdef RTX_CPU_VARIANT
    } else if (rtx__cpu_conv_winograd_fits(&j.g) || rtx__cpu_conv_direct_fits(&j.g)) {
        int wv = a->node->inputs[1];
        const struct rtx_tensor *wc =
            w_own == NULL && wv >= 0 && a->graph->values[wv].constant ? Wt : NULL;
        bool wino = rtx__cpu_conv_winograd_fits(&j.g);
        if ((wino ? rtx__cpu_conv_winograd : rtx__cpu_conv_direct)(cpu, &j.g, j.x, j.wt, wc,
                                                                   j.bias, e, j.y)) {
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "%s conv scratch",
                                       wino ? "winograd" : "direct");
            goto done;
        }
        j.bias = NULL; /* added with the tiles, and e too */
        e = NULL;
#endif
    } else if (j.g.G == 1 && !j.g.direct) {
        if (conv_batched(cpu, &j)) {
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "im2col scratch");
            goto done;
        }
    } else if (j.g.w.N * j.g.G > 1 && j.g.Og * j.g.P * j.g.K <= RTX__CPU_SMALL_GEMM_MACS) {
        rtx__cpu_parallel_for(cpu, j.g.w.N * j.g.G, 1, conv_groups_chunk, &j);
        if (atomic_load(&j.failed)) {
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "im2col scratch");
            goto done;
        }
    } else {
        col = j.g.direct ? NULL : rtx_malloc((size_t)(j.g.K * j.g.P) * sizeof *col);
        if (!j.g.direct && col == NULL) {
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "im2col scratch");
            goto done;
        }
        for (int64_t ng = 0; ng < j.g.w.N * j.g.G; ng++) conv_group(&j, ng, col, cpu);
    }
    if (j.bias || y_own) {
        struct bias_job bj = {.y = j.y, .bias = j.bias, .O = O, .P = j.g.P,
                              .out = y_own ? rtx_tensor_data(Y) : NULL, .dt = Y->dtype};
        rtx__cpu_parallel_for(cpu, j.g.w.N * O, CONVERT_GRAIN / j.g.P + 1, bias_chunk, &bj);
    }
    if (e) rtx__cpu_epilogue_run(cpu, e, j.y, j.g.w.N * O, j.g.P);
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
    struct rtx__window_geom w;
    const void *x;
    void *y;
    enum rtx_dtype dt;
    bool is_max, count_include_pad;
};

/* The kernel taps [lo, hi) of a window starting at s (stride-free: the tap k reads
 * s + k * d) that fall inside [0, n). */
static void taps(int64_t s, int64_t d, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = s >= 0 ? 0 : (-s + d - 1) / d;
    *hi = s + (k - 1) * d < n ? k : (n - 1 - s) / d + 1;
    if (*hi < *lo) *hi = *lo;
}

/* max that keeps a NaN of either side (NaN wins, as NumPy), branch-free: `|`, not `||`,
 * so the compiler makes it compares and a blend (|| made a branch per element, which
 * mispredicts on real data) */
static inline float max_nan(float a, float b) {
    return (a > b) | (a != a) ? a : b;
}

/* The max pooling rows below are written with vectors of POOL_VL floats (8 in the AVX2
 * build, 4 in the generic one): the vectorizer peeled the last iterations of a stride-2
 * gather into scalar branches. */
#ifdef RTX_CPU_VARIANT
#define POOL_VL 8
#define POOL_EVENS {0, 2, 4, 6, 8, 10, 12, 14}
#else
#define POOL_VL 4
#define POOL_EVENS {0, 2, 4, 6}
#endif
typedef float pool_v __attribute__((vector_size(POOL_VL * 4)));
typedef int pool_i __attribute__((vector_size(POOL_VL * 4)));
typedef float pool_vu __attribute__((vector_size(POOL_VL * 4), aligned(4), may_alias));

/* max_nan per lane, into *a: the max instruction (a > b ? a : b, so a NaN b wins), then a
 * NaN a put back (three instructions; the mask form took six) */
static inline void max_nan_v(pool_v *a, pool_v b) {
#if defined(RTX_CPU_VARIANT)
    __m256 x = (__m256)*a, r = _mm256_max_ps(x, (__m256)b);
    *a = (pool_v)_mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
#elif defined(__SSE2__)
    __m128 x = (__m128)*a, r = _mm_max_ps(x, (__m128)b), nan = _mm_cmpunord_ps(x, x);
    *a = (pool_v)_mm_or_ps(_mm_and_ps(nan, x), _mm_andnot_ps(nan, r));
#else
    pool_i m = (*a > b) | (*a != *a);
    *a = (pool_v)(((pool_i)*a & m) | ((pool_i)b & ~m));
#endif
}

/* cm[c] = the max over the nr rows x + r rs (r < nr) of their column c (NaN wins), c < n;
 * -inf when nr is 0 */
static void pool_col_max(float *restrict cm, const float *x, int64_t rs, int64_t nr, int64_t n) {
    int64_t c = 0;
    for (; c + POOL_VL <= n; c += POOL_VL) {
        pool_v m = (pool_v){0} - INFINITY;
        if (nr > 0) m = *(const pool_vu *)(x + c);
        for (int64_t r = 1; r < nr; r++) {
            pool_v v = *(const pool_vu *)(x + r * rs + c);
            max_nan_v(&v, m);
            m = v;
        }
        *(pool_vu *)(cm + c) = m;
    }
    for (; c < n; c++) {
        float m = nr > 0 ? x[c] : -INFINITY;
        for (int64_t r = 1; r < nr; r++) m = max_nan(x[r * rs + c], m);
        cm[c] = m;
    }
}

/* yr[ow] = the max over taps k < kw of colmax[ow sw + k dw], ow < Wo, POOL_VL outputs at a
 * time (sw 1 or 2: contiguous loads, or two loads and an even-lane shuffle); colmax is read
 * up to POOL_VL outputs past Wo (the caller's slack), those lanes are dropped. */
static void pool_row_max(float *restrict yr, const float *restrict colmax, int64_t Wo, int64_t kw,
                         int64_t dw, int64_t sw) {
    const pool_i evens = POOL_EVENS;
    for (int64_t ow = 0; ow < Wo; ow += POOL_VL) {
        pool_v m = {0};
        for (int64_t k = 0; k < kw; k++) {
            const float *t = colmax + ow * sw + k * dw;
            pool_v v;
            if (sw == 1) {
                v = *(const pool_vu *)t;
            } else {
                pool_v lo = *(const pool_vu *)t, hi = *(const pool_vu *)(t + POOL_VL);
                v = __builtin_shuffle(lo, hi, evens);
            }
            if (k == 0)
                m = v;
            else
                max_nan_v(&m, v);
        }
        if (ow + POOL_VL <= Wo) {
            *(pool_vu *)(yr + ow) = m;
        } else {
            float tail[POOL_VL];
            memcpy(tail, &m, sizeof tail);
            for (int64_t q = 0; ow + q < Wo; q++) yr[ow + q] = tail[q];
        }
    }
}

/* Pooling of f32 planes with pointers and in-bounds tap ranges instead of a checked load per
 * element. Max pooling goes separably: per output row, the max over the window's in-bounds
 * input rows of every column (contiguous, vectorizable), kept in colmax between -inf columns
 * standing for the padding (colmax holds POOL_ROW_MAX floats: the padded row's columns the
 * windows reach, pool_padded_width), then per output pixel the max over its kw columns of
 * that, without bounds checks (colmax holds POOL_ROW_SLACK more floats, which the last
 * vectors of a row read). */
static void pool_f32(const struct pool_job *j, int64_t begin, int64_t end, float *colmax) {
    const struct rtx__window_geom *w = &j->w;
    int64_t wp = (w->Wo - 1) * w->sw + (w->kw - 1) * w->dw + 1; /* padded columns read */
    if (j->is_max) /* the padding columns, and the slack pool_row_max reads past them, once */
        for (int64_t c = 0; c < wp + POOL_ROW_SLACK; c++) colmax[c] = -INFINITY;
    float *cm = colmax + w->pl; /* cm[c]: input column c */
    int64_t cols = w->W < wp - w->pl ? w->W : wp - w->pl; /* input columns a window reads */
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = (const float *)j->x + pl * w->H * w->W;
        float *y = (float *)j->y + pl * w->Ho * w->Wo;
        for (int64_t oh = 0; oh < w->Ho; oh++) {
            int64_t hs = oh * w->sh - w->pt, h0, h1;
            taps(hs, w->dh, w->kh, w->H, &h0, &h1);
            if (j->is_max) {
                pool_col_max(cm, x + (hs + h0 * w->dh) * w->W, w->dh * w->W, h1 - h0, cols);
                float *yr = y + oh * w->Wo;
                if (w->sw <= 2)
                    pool_row_max(yr, colmax, w->Wo, w->kw, w->dw, w->sw);
                else
                    for (int64_t ow = 0; ow < w->Wo; ow++) {
                        float m = colmax[ow * w->sw];
                        for (int64_t k = 1; k < w->kw; k++)
                            m = max_nan(m, colmax[ow * w->sw + k * w->dw]);
                        yr[ow] = m;
                    }
                continue;
            }
            for (int64_t ow = 0; ow < w->Wo; ow++) {
                int64_t ws = ow * w->sw - w->pl, w0, w1;
                taps(ws, w->dw, w->kw, w->W, &w0, &w1);
                int64_t he = hs + w->kh < w->H + w->pb ? hs + w->kh : w->H + w->pb;
                int64_t we = ws + w->kw < w->W + w->pr ? ws + w->kw : w->W + w->pr;
                float sum = 0.0f;
                for (int64_t kh = h0; kh < h1; kh++) {
                    const float *row = x + (hs + kh) * w->W + ws;
                    for (int64_t kw = w0; kw < w1; kw++) sum += row[kw];
                }
                int64_t inside = (h1 - h0) * (w1 - w0);
                int64_t div = j->count_include_pad ? (he - hs) * (we - ws) : inside;
                y[oh * w->Wo + ow] = div > 0 ? sum / (float)div : 0.0f;
            }
        }
    }
}

static void pool_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct pool_job *j = ctx;
    int64_t wp = (j->w.Wo - 1) * j->w.sw + (j->w.kw - 1) * j->w.dw + 1;
    if (j->dt == RTX_F32 && (!j->is_max || (wp <= POOL_ROW_MAX && j->w.pl < wp))) {
        float colmax[POOL_ROW_MAX + POOL_ROW_SLACK];
        pool_f32(j, begin, end, colmax);
        return;
    }
    /* other dtypes, and max pooling of padded rows longer than POOL_ROW_MAX */
    const struct rtx__window_geom *w = &j->w;
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
    struct rtx__pool2d_geom geo;
    char why[128];
    int rc = rtx__pool2d_geometry(a->node, X, Y, is_max, &geo, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    struct pool_job j = {
        .w = geo.w, .x = rtx_tensor_data(X), .y = rtx_tensor_data(Y), .dt = X->dtype,
        .is_max = is_max, .count_include_pad = geo.count_include_pad,
    };
    int64_t planes = j.w.N * j.w.C, work = j.w.Ho * j.w.Wo * j.w.kh * j.w.kw;
    if (planes * j.w.Ho * j.w.Wo == 0) return 0;
    rtx__cpu_parallel_for(cpu, planes, (1 << 16) / (work > 0 ? work : 1) + 1, pool_chunk, &j);
    return 0;
}

int rtx__cpu_conv(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_CONV2D: return run_conv2d(cpu, a, NULL, NULL, err);
    case RTX_OP_MAX_POOL2D: return run_pool(cpu, a, true, err);
    case RTX_OP_AVG_POOL2D: return run_pool(cpu, a, false, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a conv op");
}

int rtx__cpu_conv_fused(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                        const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                        struct rtx_err *err) {
    if (a->node->op != RTX_OP_CONV2D)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a conv2d");
    return run_conv2d(cpu, a, e, out, err);
}
