/*
 * ops-linalg.c - CPU kernels for matmul, gemm and attention (docs/ops.md).
 *
 * DESIGN
 * All three go through OpenBLAS cblas_sgemm. f16/bf16 operands are widened to f32 scratch
 * first and the f32 result is rounded once on store. OpenBLAS runs single-threaded: one
 * product (2-D matmul, gemm, or a batch folded into the rows of a when b is one shared matrix
 * and a is not transposed) is split in column panels over our pool (rtx__cpu_sgemm), since
 * OpenBLAS's own workers spin between calls and took turns with ours on the cores (on 2
 * cores, 28% of a small transformer's time went to the scheduler). A real batch is cut into
 * tiles of at most RTX__CPU_SMALL_GEMM_MACS multiply-adds spread over our pool. When K is so
 * long that such tiles would be slivers, the batch goes one call at a time on the caller
 * instead.
 * Attention splits batch x heads x blocks of query rows over the pool, under the same bound:
 * the scores and p.v products of a block are made in key blocks that stay under it. With
 * causal masking a block multiplies only the keys its last row can see. The softmax uses a
 * branch-free exp so its loops vectorize; in attention it costs about as much as the sgemms.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/geometry.h"

#define CONVERT_GRAIN (1 << 15)   /* elements per chunk of a dtype conversion */
#define ATTN_ROWS 64              /* query rows per attention task, at most */

/* ------------------------------------------------------------------------------------------
 * helpers
 * ---------------------------------------------------------------------------------------- */

static bool fits_int(int64_t v) {
    return v >= 0 && v <= INT_MAX;
}

#ifndef RTX_CPU_VARIANT /* one rtx__cpu_sgemm: OpenBLAS does its arithmetic */
struct panel_job {
    bool ta, tb, by_rows;
    int64_t M, N, K, lda, ldb, ldc, width; /* width: columns (or rows) per panel */
    float alpha, beta;
    const float *a, *b;
    float *c;
    rtx__cpu_block_fn epi;
    const void *epi_ctx;
};

static void panel_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct panel_job *j = ctx;
    for (int64_t p = begin; p < end; p++) {
        int64_t s = p * j->width, total = j->by_rows ? j->M : j->N;
        int64_t n = total - s < j->width ? total - s : j->width;
        const float *a = j->a, *b = j->b;
        float *c = j->c;
        int64_t m = j->M, cols = j->N;
        if (j->by_rows) { /* rows s.. of op(a): a column block of a when transposed */
            a += j->ta ? s : s * j->lda;
            c += s * j->ldc;
            m = n;
        } else { /* columns s.. of op(b): rows of b when transposed */
            b += j->tb ? s * j->ldb : s;
            c += s;
            cols = n;
        }
        cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                    j->tb ? CblasTrans : CblasNoTrans, (int)m, (int)cols, (int)j->K, j->alpha, a,
                    (int)j->lda, b, (int)j->ldb, j->beta, c, (int)j->ldc);
        if (j->epi) j->epi(j->epi_ctx, c, j->ldc, j->by_rows ? s : 0, j->by_rows ? 0 : s, m, cols);
    }
}

void rtx__cpu_sgemm(struct rtx_cpu *cpu, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc) {
    rtx__cpu_sgemm_epi(cpu, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, NULL, NULL);
}

void rtx__cpu_sgemm_epi(struct rtx_cpu *cpu, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                        float beta, float *c, int64_t ldc, rtx__cpu_block_fn epi,
                        const void *epi_ctx) {
    int threads = rtx__cpu_n_threads(cpu);
    struct panel_job j = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb,
                          .ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c,
                          .epi = epi, .epi_ctx = epi_ctx};
    /* panels of at least 32 columns (rows), one per thread; small products stay whole. Each
     * panel packs all of the other operand: column panels repack op(a) [M, K] per thread, row
     * panels op(b) [K, N], so the split goes along the longer of M and N */
    if (threads > 1 && M * N * K >= 4 * RTX__CPU_SMALL_GEMM_MACS) {
        j.by_rows = N < 32 * threads || (M > N && M >= 32 * threads);
        int64_t total = j.by_rows ? M : N;
        j.width = (total + threads - 1) / threads;
        if (j.width < 32) j.width = 32;
        j.width = (j.width + 15) / 16 * 16;
        int64_t panels = (total + j.width - 1) / j.width;
        if (panels > 1) {
            rtx__cpu_parallel_for(cpu, panels, 1, panel_chunk, &j);
            return;
        }
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    if (epi) epi(epi_ctx, c, ldc, 0, 0, M, N);
}
#endif

/* ------------------------------------------------------------------------------------------
 * matmul
 * ---------------------------------------------------------------------------------------- */

/* A batched product split into tiles of op(a) rows x op(b) columns, one sgemm call each. */
struct batch_job {
    bool ta, tb;
    int64_t M, N, K, lda, ldb;
    const float *a, *b;
    float *y;
    const int64_t *a_off, *b_off; /* per batch, in floats */
    int64_t rb, nb;               /* tile rows and columns */
    int64_t row_tiles, col_tiles;
};

static void batch_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct batch_job *j = ctx;
    int64_t per_batch = j->row_tiles * j->col_tiles;
    for (int64_t t = begin; t < end; t++) {
        int64_t bt = t / per_batch, r0 = t % per_batch / j->col_tiles * j->rb;
        int64_t c0 = t % j->col_tiles * j->nb;
        int64_t m = j->M - r0 < j->rb ? j->M - r0 : j->rb;
        int64_t n = j->N - c0 < j->nb ? j->N - c0 : j->nb;
        /* row r0 of op(a) is a column of a when transposed; likewise for b's columns */
        const float *a = j->a + j->a_off[bt] + (j->ta ? r0 : r0 * j->lda);
        const float *b = j->b + j->b_off[bt] + (j->tb ? c0 * j->ldb : c0);
        cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                    j->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)j->K, 1.0f, a,
                    (int)j->lda, b, (int)j->ldb, 0.0f, j->y + bt * j->M * j->N + r0 * j->N + c0,
                    (int)j->N);
    }
}

/* Tiles of at most RTX__CPU_SMALL_GEMM_MACS multiply-adds, so pool workers never make OpenBLAS
 * start threads of its own; false when K is so long that the tiles would be slivers. */
static bool batch_tiles(struct batch_job *j) {
    int64_t area = RTX__CPU_SMALL_GEMM_MACS / j->K; /* rows x columns per tile */
    if (area >= j->M * j->N) {
        j->rb = j->M;
        j->nb = j->N;
    } else {
        if (area < 512) return false;
        j->nb = j->N < 64 ? j->N : 64;
        while (j->nb * 2 <= j->N && j->nb * 2 * 16 <= area) j->nb *= 2;
        j->rb = area / j->nb < j->M ? area / j->nb : j->M;
    }
    j->row_tiles = (j->M + j->rb - 1) / j->rb;
    j->col_tiles = (j->N + j->nb - 1) / j->nb;
    return true;
}

static void epi_block(const void *ctx, float *c, int64_t ldc, int64_t row0, int64_t col0,
                      int64_t m, int64_t n) {
    rtx__cpu_epilogue_apply(ctx, c, ldc, row0, col0, m, n);
}

/* Node a's right operand B [K, N] packed, when it is a constant of the graph and this is the
 * variant build (kernels/cpu/gemm-packed.c); *pb NULL: the product goes through OpenBLAS.
 * *owned: a pack made for this call (free_packed). RTX_ENOMEM. */
static int packed_b(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool ta, bool tb,
                    int64_t K, int64_t N, const struct rtx__cpu_packed_b **pb,
                    struct rtx__cpu_packed_b **owned) {
    *pb = NULL;
    *owned = NULL;
#ifdef RTX_CPU_VARIANT
    return ta || K == 0 ? 0 : rtx__cpu_packed_b_of(cpu, a, tb, K, N, pb, owned);
#else
    (void)cpu, (void)a, (void)ta, (void)tb, (void)K, (void)N;
    return 0;
#endif
}

static void free_packed(struct rtx__cpu_packed_b *owned) {
#ifdef RTX_CPU_VARIANT
    rtx__cpu_packed_b_free(owned);
#else
    (void)owned;
#endif
}

/* y [M, N] = alpha a [M, K] . B (+ beta bias[j] when bias; + y when accumulate), then e on
 * each block. */
static void product_packed(struct rtx_cpu *cpu, const struct rtx__cpu_packed_b *pb, int64_t M,
                           int64_t K, int64_t N, float alpha, const float *a, const float *bias,
                           float beta, bool accumulate, float *y,
                           const struct rtx__cpu_epilogue *e) {
#ifdef RTX_CPU_VARIANT
    rtx__cpu_gemm_packed(cpu, M, alpha, a, K, pb, bias, beta, accumulate, y, N, e);
#else
    (void)cpu, (void)pb, (void)M, (void)K, (void)N, (void)alpha, (void)a, (void)bias;
    (void)beta, (void)accumulate, (void)y, (void)e;
#endif
}

/* matmul; with e, the product then e, into out (the fused group's output) instead. */
static int run_matmul(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                      const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                      struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    struct rtx_tensor *Y = out ? out : a->out[0];
    struct rtx__matmul_geom geo;
    char why[128];
    if (rtx__matmul_geometry(a->node, A, B, &geo, why, sizeof why))
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s", why);
    bool ta = geo.ta, tb = geo.tb;
    int64_t M = geo.M, K = geo.K, N = geo.N, nbatch = geo.nbatch, b_mats = geo.b_mats;
    int nbat = geo.nbat;
    const int64_t *odims = geo.batch_dims, *astr = geo.a_stride, *bstr = geo.b_stride;
    if (rtx_tensor_numel(Y) != nbatch * M * N)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                     (long long)rtx_tensor_numel(Y), (long long)(nbatch * M * N));
    if (nbatch * M * N == 0) return 0;

    bool fold = b_mats == 1 && !ta && fits_int(nbatch * M);
    int64_t rows = fold ? nbatch * M : M;
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    if (!fits_int(rows) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb))
        return rtx__backend_node_err(err, a, RTX_ELIMIT, "matrix dimension over %d", INT_MAX);

    const struct rtx__cpu_packed_b *pb = NULL;
    struct rtx__cpu_packed_b *pb_own = NULL;
    if ((fold || nbatch == 1) && packed_b(cpu, a, ta, tb, K, N, &pb, &pb_own))
        return rtx__backend_node_err(err, a, RTX_ENOMEM, "packing the weight");
    float *a_own = NULL, *b_own = NULL, *y_own = NULL;
    const float *af = rtx__cpu_as_f32(cpu, A, &a_own);
    const float *bf = af && !pb ? rtx__cpu_as_f32(cpu, B, &b_own) : NULL;
    float *yf = af && (bf || pb) ? rtx__cpu_out_f32(Y, &y_own) : NULL;
    int64_t *offs = NULL;
    int rc = 0;
    if (yf == NULL) {
        rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    if (K == 0) {
        memset(yf, 0, (size_t)(nbatch * M * N) * sizeof *yf);
        if (e) rtx__cpu_epilogue_run(cpu, e, yf, nbatch * M, N);
    } else if (pb) {
        product_packed(cpu, pb, rows, K, N, 1.0f, af, NULL, 0.0f, false, yf, e);
    } else if (fold || nbatch == 1) {
        rtx__cpu_sgemm_epi(cpu, ta, tb, rows, N, K, 1.0f, af, lda, bf, ldb, 0.0f, yf, N,
                           e ? epi_block : NULL, e);
    } else {
        offs = rtx_malloc((size_t)nbatch * 2 * sizeof *offs);
        if (offs == NULL) {
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "batch offsets");
            goto done;
        }
        int64_t idx[RTX_MAX_DIMS] = {0}, ao = 0, bo = 0;
        for (int64_t i = 0; i < nbatch; i++) {
            offs[i] = ao * M * K;
            offs[nbatch + i] = bo * K * N;
            for (int d = nbat - 1; d >= 0; d--) {
                ao += astr[d];
                bo += bstr[d];
                if (++idx[d] < odims[d]) break;
                ao -= astr[d] * odims[d];
                bo -= bstr[d] * odims[d];
                idx[d] = 0;
            }
        }
        struct batch_job j = {
            .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .a = af,
            .b = bf, .y = yf, .a_off = offs, .b_off = offs + nbatch,
        };
        if (batch_tiles(&j)) {
            rtx__cpu_parallel_for(cpu, nbatch * j.row_tiles * j.col_tiles, 1, batch_chunk, &j);
        } else {
            j.rb = M; /* one call per batch, threaded by OpenBLAS */
            j.nb = N;
            j.row_tiles = j.col_tiles = 1;
            batch_chunk(&j, 0, nbatch);
        }
        if (e) rtx__cpu_epilogue_run(cpu, e, yf, nbatch * M, N);
    }
    rtx__cpu_finish_f32(cpu, Y, y_own);
done:
    free_packed(pb_own);
    rtx_free(offs);
    rtx_free(a_own);
    rtx_free(b_own);
    rtx_free(y_own);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * gemm
 * ---------------------------------------------------------------------------------------- */

/* y[i, j] = beta * c broadcast from [cM, cN] to [M, N], rows [begin, end). */
struct bias_job {
    float *y;
    const float *c;
    int64_t N, cM, cN;
    float beta;
};

static void bias_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct bias_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const float *c = j->c + (j->cM == 1 ? 0 : i) * j->cN;
        float *y = j->y + i * j->N;
        if (j->cN == 1)
            for (int64_t k = 0; k < j->N; k++) y[k] = j->beta * c[0];
        else
            for (int64_t k = 0; k < j->N; k++) y[k] = j->beta * c[k];
    }
}

/* gemm; with e, as run_matmul. */
static int run_gemm(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                    const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                    struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    const struct rtx_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = out ? out : a->out[0];
    struct rtx__gemm_geom geo;
    char why[128];
    if (rtx__gemm_geometry(a->node, A, B, C, Y, &geo, why, sizeof why))
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s", why);
    bool ta = geo.ta, tb = geo.tb;
    float alpha = geo.alpha, beta = geo.beta;
    int64_t M = geo.M, K = geo.K, N = geo.N, cM = geo.cM, cN = geo.cN;
    if (M * N == 0) return 0;
    if (!fits_int(M) || !fits_int(N) || !fits_int(K))
        return rtx__backend_node_err(err, a, RTX_ELIMIT, "matrix dimension over %d", INT_MAX);

    const struct rtx__cpu_packed_b *pb;
    struct rtx__cpu_packed_b *pb_own;
    if (packed_b(cpu, a, ta, tb, K, N, &pb, &pb_own))
        return rtx__backend_node_err(err, a, RTX_ENOMEM, "packing the weight");
    float *a_own = NULL, *b_own = NULL, *c_own = NULL, *y_own = NULL;
    const float *af = rtx__cpu_as_f32(cpu, A, &a_own);
    const float *bf = af && !pb ? rtx__cpu_as_f32(cpu, B, &b_own) : NULL;
    const float *cf = (bf || pb) && C ? rtx__cpu_as_f32(cpu, C, &c_own) : NULL;
    float *yf = af && (bf || pb) && (cf || !C) ? rtx__cpu_out_f32(Y, &y_own) : NULL;
    int rc = 0;
    if (yf == NULL) {
        rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    /* a row bias goes into the packed product's stores; any other c fills y first */
    bool row_bias = pb && C && K > 0 && cM == 1 && cN == N;
    if (C && !row_bias) {
        struct bias_job bj = {.y = yf, .c = cf, .N = N, .cM = cM, .cN = cN, .beta = beta};
        rtx__cpu_parallel_for(cpu, M, CONVERT_GRAIN / N + 1, bias_chunk, &bj);
    }
    if (K == 0) {
        if (!C) memset(yf, 0, (size_t)(M * N) * sizeof *yf);
        if (e) rtx__cpu_epilogue_run(cpu, e, yf, M, N);
    } else if (pb) {
        product_packed(cpu, pb, M, K, N, alpha, af, row_bias ? cf : NULL, beta,
                       C != NULL && !row_bias, yf, e);
    } else {
        rtx__cpu_sgemm_epi(cpu, ta, tb, M, N, K, alpha, af, ta ? M : K, bf, tb ? K : N,
                           C ? 1.0f : 0.0f, yf, N, e ? epi_block : NULL, e);
    }
    rtx__cpu_finish_f32(cpu, Y, y_own);
done:
    free_packed(pb_own);
    rtx_free(a_own);
    rtx_free(b_own);
    rtx_free(c_own);
    rtx_free(y_own);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * attention
 * ---------------------------------------------------------------------------------------- */

struct attn_job {
    const float *q, *k, *v;   /* [BH, Lq, D], [BH, Lk, D], [BH, Lk, Dv] */
    struct rtx_tensor *out;   /* [BH, Lq, Dv] */
    const void *mask;         /* NULL, bool or the data dtype */
    enum rtx_dtype mask_dt;
    int lead;                 /* leading (batch) dims */
    int64_t lead_dims[RTX_MAX_DIMS];
    int64_t mask_lead_str[RTX_MAX_DIMS]; /* mask strides of the leading dims (0: broadcast) */
    int64_t mask_str_q, mask_str_k;      /* mask strides of the Lq and Lk dims */
    int64_t Lq, Lk, D, Dv;
    int64_t rb, n_blocks;         /* query rows per task, tasks per head */
    int64_t kb_s, kb_v;           /* keys per sgemm call for scores, for p . v */
    bool causal;
    float scale;
    atomic_int failed;        /* set when a chunk could not allocate its scratch */
};

static void scale_row(float *s, int64_t n, float f) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[i + k] *= f;
    for (; i < n; i++) s[i] *= f;
}

/* Applies the mask (added, or bool: -inf where false) and the causal cut (-inf past qi) to a
 * row of scores; the dtype is picked once per row, so the f32 and bool loops vectorize. */
static void attn_mask_row(const struct attn_job *j, float *s, int64_t kc, int64_t qi,
                          int64_t mask_row) {
    int64_t st = j->mask_str_k;
    if (j->mask && j->mask_dt == RTX_F32) {
        const float *m = (const float *)j->mask + mask_row;
        if (st == 1)
            RTX__VLOOP(float, s, kc, s[i] + m[i]);
        else
            for (int64_t c = 0; c < kc; c++) s[c] += m[c * st];
    } else if (j->mask && j->mask_dt == RTX_BOOL) {
        const uint8_t *m = (const uint8_t *)j->mask + mask_row;
        for (int64_t c = 0; c < kc; c++) s[c] = m[c * st] ? s[c] : -INFINITY;
    } else if (j->mask) {
        for (int64_t c = 0; c < kc; c++)
            s[c] += rtx__load_f32(j->mask, j->mask_dt, mask_row + c * st);
    }
    if (j->causal)
        for (int64_t c = qi + 1; c < kc; c++) s[c] = -INFINITY;
}

/* Masks, turns scores into probabilities, and zeroes a row whose keys are all masked. A NaN
 * score, or +inf, makes the row NaN (as the plain formula would). */
static void attn_softmax_row(const struct attn_job *j, float *s, int64_t kc, int64_t qi,
                             int64_t mask_row) {
    attn_mask_row(j, s, kc, qi, mask_row);
    float mx = -INFINITY;
    bool nan = false;
    for (int64_t c = 0; c < kc; c++) {
        mx = s[c] > mx ? s[c] : mx;
        nan |= s[c] != s[c];
    }
    if (nan || mx == INFINITY) {
        for (int64_t c = 0; c < kc; c++) s[c] = NAN;
        return;
    }
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)kc * sizeof *s);
        return;
    }
    scale_row(s, kc, 1.0f / rtx__exp_sum(s, kc, mx));
}

static void attn_chunk(void *ctx, int64_t begin, int64_t end) {
    struct attn_job *j = ctx;
    bool narrow = j->out->dtype != RTX_F32;
    float *s = rtx_malloc((size_t)(j->rb * (j->Lk > 0 ? j->Lk : 1) +
                                   (narrow ? j->rb * j->Dv : 0)) * sizeof *s);
    if (s == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *o_tmp = s + j->rb * (j->Lk > 0 ? j->Lk : 1);
    for (int64_t t = begin; t < end; t++) {
        int64_t bh = t / j->n_blocks, r0 = (t % j->n_blocks) * j->rb;
        int64_t r1 = r0 + j->rb < j->Lq ? r0 + j->rb : j->Lq, m = r1 - r0;
        int64_t kc = j->causal && r1 < j->Lk ? r1 : j->Lk; /* keys any row here can see */
        float *o = narrow ? o_tmp : (float *)rtx_tensor_data(j->out) + (bh * j->Lq + r0) * j->Dv;
        int64_t mask_base = 0, rem = bh;
        for (int d = j->lead - 1; d >= 0; d--) {
            mask_base += (rem % j->lead_dims[d]) * j->mask_lead_str[d];
            rem /= j->lead_dims[d];
        }
        if (kc == 0 || j->Dv == 0) {
            memset(o, 0, (size_t)(m * j->Dv) * sizeof *o);
        } else {
            /* scores = scale * q[r0:r1] . k[0:kc]^T, in column blocks of kb_s keys */
            const float *qb = j->q + (bh * j->Lq + r0) * j->D, *kb = j->k + bh * j->Lk * j->D;
            if (j->D == 0) memset(s, 0, (size_t)(m * kc) * sizeof *s);
            for (int64_t c0 = 0; c0 < kc && j->D > 0; c0 += j->kb_s) {
                int64_t n = kc - c0 < j->kb_s ? kc - c0 : j->kb_s;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)j->D,
                            j->scale, qb, (int)j->D, kb + c0 * j->D, (int)j->D, 0.0f, s + c0,
                            (int)kc);
            }
            for (int64_t i = 0; i < m; i++)
                attn_softmax_row(j, s + i * kc, kc, r0 + i, mask_base + (r0 + i) * j->mask_str_q);
            /* out = p . v[0:kc], accumulated over row blocks of kb_v keys */
            const float *vb = j->v + bh * j->Lk * j->Dv;
            for (int64_t c0 = 0; c0 < kc; c0 += j->kb_v) {
                int64_t n = kc - c0 < j->kb_v ? kc - c0 : j->kb_v;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)j->Dv, (int)n,
                            1.0f, s + c0, (int)kc, vb + c0 * j->Dv, (int)j->Dv,
                            c0 == 0 ? 0.0f : 1.0f, o, (int)j->Dv);
            }
        }
        if (narrow) {
            void *dst = rtx_tensor_data(j->out);
            int64_t base = (bh * j->Lq + r0) * j->Dv;
            for (int64_t i = 0; i < m * j->Dv; i++)
                rtx__store_f32(dst, j->out->dtype, base + i, o[i]);
        }
    }
    rtx_free(s);
}

static int run_attention(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                         struct rtx_err *err) {
    const struct rtx_tensor *Q = a->in[0], *K = a->in[1], *V = a->in[2];
    const struct rtx_tensor *Mk = a->n_in > 3 ? a->in[3] : NULL;
    struct rtx_tensor *Y = a->out[0];
    struct rtx__attention_geom geo;
    char why[128];
    int grc = rtx__attention_geometry(a->node, Q, K, V, Mk, Y, &geo, why, sizeof why);
    if (grc) return rtx__backend_node_err(err, a, grc, "%s", why);
    int64_t BH = geo.BH;
    struct attn_job j = {
        .out = Y, .lead = geo.lead, .Lq = geo.Lq, .D = geo.D, .Lk = geo.Lk, .Dv = geo.Dv,
        .causal = geo.causal, .scale = geo.scale,
    };
    if (!fits_int(j.Lq) || !fits_int(j.Lk) || !fits_int(j.D) || !fits_int(j.Dv))
        return rtx__backend_node_err(err, a, RTX_ELIMIT, "dimension over %d", INT_MAX);
    memcpy(j.lead_dims, geo.lead_dims, (size_t)geo.lead * sizeof *j.lead_dims);
    if (Mk) {
        memcpy(j.mask_lead_str, geo.mask_lead_str, (size_t)geo.lead * sizeof *j.mask_lead_str);
        j.mask_str_q = geo.mask_str_q;
        j.mask_str_k = geo.mask_str_k;
        j.mask = rtx_tensor_data(Mk);
        j.mask_dt = Mk->dtype;
    }
    if (BH * j.Lq * j.Dv == 0) return 0;

    /* ATTN_ROWS query rows per task, fewer when that leaves threads idle */
    int64_t want_tasks = 2 * (int64_t)rtx__cpu_n_threads(cpu);
    j.rb = ATTN_ROWS;
    while (j.rb > 8 && BH * ((j.Lq + j.rb - 1) / j.rb) < want_tasks) j.rb /= 2;
    if (j.rb > j.Lq) j.rb = j.Lq;
    j.kb_s = RTX__CPU_SMALL_GEMM_MACS / (j.rb * (j.D > 0 ? j.D : 1));
    j.kb_v = RTX__CPU_SMALL_GEMM_MACS / (j.rb * (j.Dv > 0 ? j.Dv : 1));
    if (j.kb_s < 1) j.kb_s = 1;
    if (j.kb_v < 1) j.kb_v = 1;
    j.n_blocks = (j.Lq + j.rb - 1) / j.rb;
    atomic_init(&j.failed, 0);

    float *q_own = NULL, *k_own = NULL, *v_own = NULL;
    j.q = rtx__cpu_as_f32(cpu, Q, &q_own);
    j.k = j.q ? rtx__cpu_as_f32(cpu, K, &k_own) : NULL;
    j.v = j.k ? rtx__cpu_as_f32(cpu, V, &v_own) : NULL;
    int rc = 0;
    if (j.v == NULL) {
        rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "f32 scratch");
    } else {
        rtx__cpu_parallel_for(cpu, BH * j.n_blocks, 1, attn_chunk, &j);
        if (atomic_load(&j.failed))
            rc = rtx__backend_node_err(err, a, RTX_ENOMEM, "score scratch");
    }
    rtx_free(q_own);
    rtx_free(k_own);
    rtx_free(v_own);
    return rc;
}

int rtx__cpu_linalg(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_MATMUL: return run_matmul(cpu, a, NULL, NULL, err);
    case RTX_OP_GEMM: return run_gemm(cpu, a, NULL, NULL, err);
    case RTX_OP_ATTENTION: return run_attention(cpu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a linalg op");
}

int rtx__cpu_linalg_fused(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                          const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                          struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_MATMUL: return run_matmul(cpu, a, e, out, err);
    case RTX_OP_GEMM: return run_gemm(cpu, a, e, out, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a matmul or gemm");
}
