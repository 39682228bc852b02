/*
 * ops-linalg.c - CPU kernels for matmul, gemm and attention (docs/ops.md).
 *
 * DESIGN
 * All three go through OpenBLAS cblas_sgemm. f16/bf16 operands are widened to f32 scratch
 * first and the f32 result is rounded once on store. Matmul folds the batch into the rows of
 * one call when b is a single (broadcast) matrix and a is not transposed; otherwise it loops
 * over the broadcast batch, on the pool when each product is small (OpenBLAS runs those on the
 * calling thread) and on the caller when each is large (OpenBLAS threads them itself).
 * Attention splits batch x heads x query-row blocks over the pool. A block's row count keeps
 * each of its two sgemm calls under OpenBLAS's multithreading threshold (about 2^18
 * multiply-adds), so pool workers do not stack OpenBLAS threads on top of their own; with
 * causal masking a block multiplies only the keys its last row can see.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <stdlib.h>

#include "kernels/cpu/cpu-impl.h"

#define SMALL_GEMM_MACS (1 << 18) /* below this OpenBLAS computes on the calling thread */
#define CONVERT_GRAIN (1 << 15)   /* elements per chunk of a dtype conversion */
#define ATTN_ROWS 32              /* query rows per attention task */

/* ------------------------------------------------------------------------------------------
 * f16/bf16 <-> f32 scratch
 * ---------------------------------------------------------------------------------------- */

struct convert_job {
    const void *src;
    void *dst;
    enum rtx_dtype dt; /* the dtype that is not f32 */
};

static void widen_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct convert_job *j = ctx;
    float *dst = j->dst;
    for (int64_t i = begin; i < end; i++) dst[i] = rtx__load_f32(j->src, j->dt, i);
}

static void narrow_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct convert_job *j = ctx;
    const float *src = j->src;
    for (int64_t i = begin; i < end; i++) rtx__store_f32(j->dst, j->dt, i, src[i]);
}

/* The data of a float tensor as f32: the tensor's own memory when it is f32, else a widened
 * copy in *owned (rtx_free it). NULL when out of memory. */
static const float *as_f32(struct rtx_cpu *cpu, const struct rtx_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == RTX_F32) return rtx_tensor_data(t);
    int64_t n = rtx_tensor_numel(t);
    float *f = rtx_malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    if (f == NULL) return NULL;
    struct convert_job j = {.src = rtx_tensor_data(t), .dst = f, .dt = t->dtype};
    rtx__cpu_parallel_for(cpu, n, CONVERT_GRAIN, widen_chunk, &j);
    *owned = f;
    return f;
}

/* Where a kernel writes its f32 result: the output itself when f32, else a scratch in *owned
 * that finish_f32 rounds into the output. */
static float *out_f32(struct rtx_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == RTX_F32) return rtx_tensor_data(t);
    int64_t n = rtx_tensor_numel(t);
    *owned = rtx_malloc((size_t)(n > 0 ? n : 1) * sizeof **owned);
    return *owned;
}

static void finish_f32(struct rtx_cpu *cpu, struct rtx_tensor *t, const float *scratch) {
    if (scratch == NULL) return;
    struct convert_job j = {.src = scratch, .dst = rtx_tensor_data(t), .dt = t->dtype};
    rtx__cpu_parallel_for(cpu, rtx_tensor_numel(t), CONVERT_GRAIN, narrow_chunk, &j);
}

static bool fits_int(int64_t v) {
    return v >= 0 && v <= INT_MAX;
}

/* ------------------------------------------------------------------------------------------
 * matmul
 * ---------------------------------------------------------------------------------------- */

struct batch_job {
    bool ta, tb;
    int M, N, K, lda, ldb;
    const float *a, *b;
    float *y;
    const int64_t *a_off, *b_off; /* per batch, in floats */
    int64_t y_step;               /* M * N */
};

static void batch_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct batch_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                    j->tb ? CblasTrans : CblasNoTrans, j->M, j->N, j->K, 1.0f,
                    j->a + j->a_off[i], j->lda, j->b + j->b_off[i], j->ldb, 0.0f,
                    j->y + i * j->y_step, j->N);
}

/* Rows, columns of the matrix a 1-D-or-more operand stands for, after its transpose. */
static void matrix_dims(const struct rtx_tensor *t, bool is_a, bool trans, int64_t *rows,
                        int64_t *cols) {
    if (t->ndim == 1) {
        *rows = is_a ? 1 : t->dims[0];
        *cols = is_a ? t->dims[0] : 1;
        return;
    }
    int64_t r = t->dims[t->ndim - 2], c = t->dims[t->ndim - 1];
    *rows = trans ? c : r;
    *cols = trans ? r : c;
}

static int run_matmul(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    struct rtx_tensor *Y = a->out[0];
    if (A->ndim < 1 || B->ndim < 1)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "operands must have rank >= 1");
    bool ta = rtx_node_attr_int(a->node, "trans_a", 0) != 0 && A->ndim >= 2;
    bool tb = rtx_node_attr_int(a->node, "trans_b", 0) != 0 && B->ndim >= 2;
    int64_t M, K, Kb, N;
    matrix_dims(A, true, ta, &M, &K);
    matrix_dims(B, false, tb, &Kb, &N);
    if (K != Kb)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "inner dimensions %lld and %lld differ",
                                 (long long)K, (long long)Kb);

    /* Broadcast batch dims; offsets are in matrices, then floats. */
    int abat = A->ndim > 2 ? A->ndim - 2 : 0, bbat = B->ndim > 2 ? B->ndim - 2 : 0;
    int nbat = abat > bbat ? abat : bbat;
    int64_t odims[RTX_MAX_DIMS], astr[RTX_MAX_DIMS], bstr[RTX_MAX_DIMS];
    int64_t nbatch = 1, a_mats = 1, b_mats = 1;
    for (int i = nbat - 1; i >= 0; i--) {
        int ai = i - (nbat - abat), bi = i - (nbat - bbat);
        int64_t da = ai >= 0 ? A->dims[ai] : 1, db = bi >= 0 ? B->dims[bi] : 1;
        if (da != db && da != 1 && db != 1)
            return rtx__cpu_node_err(err, a, RTX_EINVAL,
                                     "batch dimensions %lld and %lld do not broadcast",
                                     (long long)da, (long long)db);
        odims[i] = da == 1 ? db : da;
        astr[i] = da == 1 ? 0 : a_mats;
        bstr[i] = db == 1 ? 0 : b_mats;
        a_mats *= da;
        b_mats *= db;
        nbatch *= odims[i];
    }
    if (rtx_tensor_numel(Y) != nbatch * M * N)
        return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                 (long long)rtx_tensor_numel(Y), (long long)(nbatch * M * N));
    if (nbatch * M * N == 0) return 0;

    bool fold = b_mats == 1 && !ta && fits_int(nbatch * M);
    int64_t rows = fold ? nbatch * M : M;
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    if (!fits_int(rows) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb))
        return rtx__cpu_node_err(err, a, RTX_ELIMIT, "matrix dimension over %d", INT_MAX);

    float *a_own = NULL, *b_own = NULL, *y_own = NULL;
    const float *af = as_f32(cpu, A, &a_own);
    const float *bf = af ? as_f32(cpu, B, &b_own) : NULL;
    float *yf = bf ? out_f32(Y, &y_own) : NULL;
    int64_t *offs = NULL;
    int rc = 0;
    if (yf == NULL) {
        rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    if (K == 0) {
        memset(yf, 0, (size_t)(nbatch * M * N) * sizeof *yf);
    } else if (fold || nbatch == 1) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)rows, (int)N, (int)K, 1.0f, af, (int)lda, bf, (int)ldb, 0.0f, yf,
                    (int)N);
    } else {
        offs = rtx_malloc((size_t)nbatch * 2 * sizeof *offs);
        if (offs == NULL) {
            rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "batch offsets");
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
            .ta = ta, .tb = tb, .M = (int)M, .N = (int)N, .K = (int)K, .lda = (int)lda,
            .ldb = (int)ldb, .a = af, .b = bf, .y = yf, .a_off = offs, .b_off = offs + nbatch,
            .y_step = M * N,
        };
        if (M * N * K <= SMALL_GEMM_MACS)
            rtx__cpu_parallel_for(cpu, nbatch, 1, batch_chunk, &j);
        else
            batch_chunk(&j, 0, nbatch);
    }
    finish_f32(cpu, Y, y_own);
done:
    rtx_free(offs);
    rtx_free(a_own);
    rtx_free(b_own);
    rtx_free(y_own);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * gemm
 * ---------------------------------------------------------------------------------------- */

static int run_gemm(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    const struct rtx_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = a->out[0];
    if (A->ndim != 2 || B->ndim != 2)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "a and b must be 2-D");
    bool ta = rtx_node_attr_int(a->node, "trans_a", 0) != 0;
    bool tb = rtx_node_attr_int(a->node, "trans_b", 0) != 0;
    float alpha = (float)rtx_node_attr_float(a->node, "alpha", 1.0);
    float beta = (float)rtx_node_attr_float(a->node, "beta", 1.0);
    int64_t M = ta ? A->dims[1] : A->dims[0], K = ta ? A->dims[0] : A->dims[1];
    int64_t Kb = tb ? B->dims[1] : B->dims[0], N = tb ? B->dims[0] : B->dims[1];
    if (K != Kb)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "inner dimensions %lld and %lld differ",
                                 (long long)K, (long long)Kb);
    if (Y->ndim != 2 || Y->dims[0] != M || Y->dims[1] != N)
        return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "output shape is not [%lld,%lld]",
                                 (long long)M, (long long)N);
    int64_t cM = 1, cN = 1;
    if (C) {
        if (C->ndim > 2)
            return rtx__cpu_node_err(err, a, RTX_EINVAL, "c has rank %d > 2", C->ndim);
        cN = C->ndim >= 1 ? C->dims[C->ndim - 1] : 1;
        cM = C->ndim == 2 ? C->dims[0] : 1;
        if ((cM != 1 && cM != M) || (cN != 1 && cN != N))
            return rtx__cpu_node_err(err, a, RTX_EINVAL, "c does not broadcast to [%lld,%lld]",
                                     (long long)M, (long long)N);
    }
    if (M * N == 0) return 0;
    if (!fits_int(M) || !fits_int(N) || !fits_int(K))
        return rtx__cpu_node_err(err, a, RTX_ELIMIT, "matrix dimension over %d", INT_MAX);

    float *a_own = NULL, *b_own = NULL, *c_own = NULL, *y_own = NULL;
    const float *af = as_f32(cpu, A, &a_own);
    const float *bf = af ? as_f32(cpu, B, &b_own) : NULL;
    const float *cf = bf && C ? as_f32(cpu, C, &c_own) : NULL;
    float *yf = bf && (cf || !C) ? out_f32(Y, &y_own) : NULL;
    int rc = 0;
    if (yf == NULL) {
        rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "f32 scratch");
        goto done;
    }
    if (C) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                yf[i * N + j] = beta * cf[(cM == 1 ? 0 : i) * cN + (cN == 1 ? 0 : j)];
    }
    if (K == 0) {
        if (!C) memset(yf, 0, (size_t)(M * N) * sizeof *yf);
    } else {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, alpha, af, ta ? (int)M : (int)K, bf,
                    tb ? (int)K : (int)N, C ? 1.0f : 0.0f, yf, (int)N);
    }
    finish_f32(cpu, Y, y_own);
done:
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

/* Masks, scales to probabilities, and zeroes a row whose keys are all masked. */
static void attn_softmax_row(const struct attn_job *j, float *s, int64_t kc, int64_t qi,
                             int64_t mask_row) {
    float mx = -INFINITY;
    for (int64_t c = 0; c < kc; c++) {
        float x = s[c];
        if (j->causal && c > qi) {
            x = -INFINITY;
        } else if (j->mask) {
            int64_t mo = mask_row + c * j->mask_str_k;
            if (j->mask_dt == RTX_BOOL)
                x = ((const uint8_t *)j->mask)[mo] ? x : -INFINITY;
            else
                x += rtx__load_f32(j->mask, j->mask_dt, mo);
        }
        s[c] = x;
        if (x > mx) mx = x;
    }
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)kc * sizeof *s);
        return;
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < kc; c++) {
        s[c] = expf(s[c] - mx);
        sum += s[c];
    }
    float inv = 1.0f / sum;
    for (int64_t c = 0; c < kc; c++) s[c] *= inv;
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
    int nd = Q->ndim;
    if (nd < 2 || K->ndim != nd || V->ndim != nd)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "q, k, v need one rank >= 2");
    int lead = nd - 2;
    int64_t BH = 1;
    for (int d = 0; d < lead; d++) {
        if (K->dims[d] != Q->dims[d] || V->dims[d] != Q->dims[d])
            return rtx__cpu_node_err(err, a, RTX_EINVAL, "leading dimension %d differs", d);
        BH *= Q->dims[d];
    }
    struct attn_job j = {
        .out = Y, .lead = lead, .Lq = Q->dims[nd - 2], .D = Q->dims[nd - 1],
        .Lk = K->dims[nd - 2], .Dv = V->dims[nd - 1],
        .causal = rtx_node_attr_int(a->node, "causal", 0) != 0,
    };
    if (K->dims[nd - 1] != j.D || V->dims[nd - 2] != j.Lk)
        return rtx__cpu_node_err(err, a, RTX_EINVAL, "k or v does not match q's shape");
    if (rtx_tensor_numel(Y) != BH * j.Lq * j.Dv)
        return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                 (long long)rtx_tensor_numel(Y), (long long)(BH * j.Lq * j.Dv));
    if (!fits_int(j.Lq) || !fits_int(j.Lk) || !fits_int(j.D) || !fits_int(j.Dv))
        return rtx__cpu_node_err(err, a, RTX_ELIMIT, "dimension over %d", INT_MAX);
    j.scale = (float)rtx_node_attr_float(a->node, "scale", j.D > 0 ? 1.0 / sqrt((double)j.D)
                                                                    : 1.0);
    memcpy(j.lead_dims, Q->dims, (size_t)lead * sizeof *j.lead_dims);
    if (Mk) {
        if (Mk->ndim > nd)
            return rtx__cpu_node_err(err, a, RTX_EINVAL, "mask has rank %d > %d", Mk->ndim, nd);
        int64_t full[RTX_MAX_DIMS], str[RTX_MAX_DIMS], step = 1;
        memcpy(full, Q->dims, (size_t)lead * sizeof *full);
        full[nd - 2] = j.Lq;
        full[nd - 1] = j.Lk;
        for (int d = nd - 1; d >= 0; d--) {
            int md = d - (nd - Mk->ndim);
            int64_t dm = md >= 0 ? Mk->dims[md] : 1;
            if (dm != 1 && dm != full[d])
                return rtx__cpu_node_err(err, a, RTX_EINVAL,
                                         "mask dimension %d (%lld) does not broadcast to %lld",
                                         md, (long long)dm, (long long)full[d]);
            str[d] = dm == 1 ? 0 : step;
            step *= dm;
        }
        memcpy(j.mask_lead_str, str, (size_t)lead * sizeof *str);
        j.mask_str_q = str[nd - 2];
        j.mask_str_k = str[nd - 1];
        j.mask = rtx_tensor_data(Mk);
        j.mask_dt = Mk->dtype;
    }
    if (BH * j.Lq * j.Dv == 0) return 0;

    j.rb = getenv("RB") ? atoi(getenv("RB")) : ATTN_ROWS;
    if (j.rb > j.Lq) j.rb = j.Lq;
    j.kb_s = SMALL_GEMM_MACS / (j.rb * (j.D > 0 ? j.D : 1));
    j.kb_v = SMALL_GEMM_MACS / (j.rb * (j.Dv > 0 ? j.Dv : 1));
    if (j.kb_s < 1) j.kb_s = 1;
    if (j.kb_v < 1) j.kb_v = 1;
    j.n_blocks = (j.Lq + j.rb - 1) / j.rb;
    atomic_init(&j.failed, 0);

    float *q_own = NULL, *k_own = NULL, *v_own = NULL;
    j.q = as_f32(cpu, Q, &q_own);
    j.k = j.q ? as_f32(cpu, K, &k_own) : NULL;
    j.v = j.k ? as_f32(cpu, V, &v_own) : NULL;
    int rc = 0;
    if (j.v == NULL) {
        rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "f32 scratch");
    } else {
        rtx__cpu_parallel_for(cpu, BH * j.n_blocks, 1, attn_chunk, &j);
        if (atomic_load(&j.failed))
            rc = rtx__cpu_node_err(err, a, RTX_ENOMEM, "score scratch");
    }
    rtx_free(q_own);
    rtx_free(k_own);
    rtx_free(v_own);
    return rc;
}

int rtx__cpu_linalg(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_MATMUL: return run_matmul(cpu, a, err);
    case RTX_OP_GEMM: return run_gemm(cpu, a, err);
    case RTX_OP_ATTENTION: return run_attention(cpu, a, err);
    default: break;
    }
    return rtx__cpu_node_err(err, a, RTX_EINTERNAL, "not a linalg op");
}
