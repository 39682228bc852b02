/*
 * test-cpu-linalg.c - the CPU matmul, gemm and attention kernels, checked against hand values
 * and against naive double-precision loops in this file; plus the CPU pool's parallel_for.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cpu/cpu-impl.h"
#include "runtime/backend-impl.h"
#include "tests/unit/test-util.h"

/* Tolerances: f32 results against a double reference, and f16/bf16 (inputs already rounded,
 * one rounding of the output). */
#define RTOL_F32 1e-5
#define ATOL_F32 1e-5
#define RTOL_HALF 1e-2
#define ATOL_HALF 1e-2

static double rtol_of(enum rtx_dtype dt) { return dt == RTX_F32 ? RTOL_F32 : RTOL_HALF; }
static double atol_of(enum rtx_dtype dt) { return dt == RTX_F32 ? ATOL_F32 : ATOL_HALF; }

/* Runs a one-output op, asserts success and the output dtype/shape; returns the output. */
static struct rtx_tensor *run1(const char *op, const char *attrs, struct rtx_tensor *const *in,
                               int n_in, enum rtx_dtype dt, int ndim, const int64_t *dims) {
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, in, n_in, out, 1, &err);
    ck_assert_msg(rc == 0, "%s failed: %s", op, err.msg);
    tu_assert_shape(out[0], dt, ndim, dims);
    return out[0];
}

static void unref_all(struct rtx_tensor **t, int n) {
    for (int i = 0; i < n; i++) rtx_tensor_unref(t[i]);
}

/* Element of a contiguous tensor of shape (nd, dims) at a broadcast multi-index idx of rank
 * ond (aligned right). */
static double get_bcast(const struct rtx_tensor *t, int ond, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t i = idx[ond - t->ndim + d];
        off = off * t->dims[d] + (t->dims[d] == 1 ? 0 : i);
    }
    return rtx_tensor_get(t, off);
}

/* ------------------------------------------------------------------------------------------
 * matmul
 * ---------------------------------------------------------------------------------------- */

/* NumPy matmul of a and b (after optional transposes of 2-D-or-more operands) in double;
 * returns a malloc'ed array of the output's elements. */
static double *ref_matmul(const struct rtx_tensor *a, const struct rtx_tensor *b, bool ta,
                          bool tb, int *ondim, int64_t *odims) {
    int na = a->ndim, nb = b->ndim;
    ta = ta && na >= 2;
    tb = tb && nb >= 2;
    int64_t M = na == 1 ? 1 : a->dims[na - (ta ? 1 : 2)];
    int64_t K = na == 1 ? a->dims[0] : a->dims[na - (ta ? 2 : 1)];
    int64_t N = nb == 1 ? 1 : b->dims[nb - (tb ? 2 : 1)];
    int abat = na > 2 ? na - 2 : 0, bbat = nb > 2 ? nb - 2 : 0;
    int nbat = abat > bbat ? abat : bbat;
    int64_t bd[RTX_MAX_DIMS], nbatch = 1;
    for (int i = 0; i < nbat; i++) {
        int ai = i - (nbat - abat), bi = i - (nbat - bbat);
        int64_t da = ai >= 0 ? a->dims[ai] : 1, db = bi >= 0 ? b->dims[bi] : 1;
        bd[i] = da == 1 ? db : da;
        nbatch *= bd[i];
    }
    int nd = 0;
    for (int i = 0; i < nbat; i++) odims[nd++] = bd[i];
    if (na > 1) odims[nd++] = M;
    if (nb > 1) odims[nd++] = N;
    *ondim = nd;
    double *y = calloc((size_t)(nbatch * M * N) + 1, sizeof *y);
    for (int64_t bt = 0; bt < nbatch; bt++) {
        int64_t bidx[RTX_MAX_DIMS], rem = bt, aoff = 0, boff = 0;
        for (int i = nbat - 1; i >= 0; i--) {
            bidx[i] = rem % bd[i];
            rem /= bd[i];
        }
        for (int i = 0; i < abat; i++) {
            int64_t d = a->dims[i];
            aoff = aoff * d + (d == 1 ? 0 : bidx[i + nbat - abat]);
        }
        for (int i = 0; i < bbat; i++) {
            int64_t d = b->dims[i];
            boff = boff * d + (d == 1 ? 0 : bidx[i + nbat - bbat]);
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ai = ta ? k * M + m : m * K + k;
                    int64_t bi = tb ? n * K + k : k * N + n;
                    s += rtx_tensor_get(a, aoff * M * K + ai) *
                         rtx_tensor_get(b, boff * K * N + bi);
                }
                y[(bt * M + m) * N + n] = s;
            }
    }
    return y;
}

/* Random a (shape da) times random b (shape db) through the kernel, against ref_matmul. */
static void check_matmul(enum rtx_dtype dt, int na, const int64_t *da, int nb,
                         const int64_t *db, bool ta, bool tb, unsigned seed) {
    struct rtx_tensor *in[2] = {tu_tensor_random(dt, na, da, -1, 1, seed),
                                tu_tensor_random(dt, nb, db, -1, 1, seed + 1)};
    int ond;
    int64_t od[RTX_MAX_DIMS];
    double *want = ref_matmul(in[0], in[1], ta, tb, &ond, od);
    char attrs[64];
    snprintf(attrs, sizeof attrs, "trans_a=i:%d;trans_b=i:%d", ta, tb);
    struct rtx_tensor *y = run1("matmul", attrs, in, 2, dt, ond, od);
    tu_assert_close(y, want, rtol_of(dt), atol_of(dt));
    free(want);
    rtx_tensor_unref(y);
    unref_all(in, 2);
}

START_TEST(matmul_2d_f32) {
    int64_t da[2] = {2, 3}, db[2] = {3, 2}, dy[2] = {2, 2};
    double va[6] = {1, 2, 3, 4, 5, 6}, vb[6] = {7, 8, 9, 10, 11, 12};
    double want[4] = {58, 64, 139, 154};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_F32, 2, da, va), tu_tensor(RTX_F32, 2, db, vb)};
    struct rtx_tensor *y = run1("matmul", "", in, 2, RTX_F32, 2, dy);
    tu_assert_close(y, want, 0, 1e-5);
    rtx_tensor_unref(y);
    unref_all(in, 2);
}
END_TEST

START_TEST(matmul_batch_broadcast) {
    int64_t da[4] = {2, 1, 3, 4}, db[3] = {3, 4, 5};
    check_matmul(RTX_F32, 4, da, 3, db, false, false, 1);
    int64_t da2[3] = {3, 4, 5}, db2[4] = {2, 1, 5, 2};
    check_matmul(RTX_F32, 3, da2, 4, db2, false, false, 2);
}
END_TEST

START_TEST(matmul_batch_folds_shared_b) {
    int64_t da[3] = {2, 3, 4}, db[2] = {4, 5};
    check_matmul(RTX_F32, 3, da, 2, db, false, false, 3);
    check_matmul(RTX_F32, 3, da, 3, (int64_t[]){1, 5, 4}, false, true, 4);
}
END_TEST

START_TEST(matmul_transposes) {
    int64_t da[2] = {4, 3}, db[2] = {5, 4};
    check_matmul(RTX_F32, 2, da, 2, db, true, true, 5);
    int64_t da3[3] = {2, 4, 3}, db3[3] = {2, 4, 5};
    check_matmul(RTX_F32, 3, da3, 3, db3, true, false, 6);
    int64_t db4[2] = {5, 3};
    int64_t da4[3] = {2, 4, 3};
    check_matmul(RTX_F32, 3, da4, 2, db4, false, true, 7);
}
END_TEST

START_TEST(matmul_1d_promotion) {
    int64_t v3[1] = {3}, m32[2] = {3, 2}, m23[2] = {2, 3}, b234[3] = {2, 3, 4};
    check_matmul(RTX_F32, 1, v3, 2, m32, false, false, 8);   /* [3]x[3,2] -> [2] */
    check_matmul(RTX_F32, 2, m23, 1, v3, false, false, 9);   /* [2,3]x[3] -> [2] */
    check_matmul(RTX_F32, 1, v3, 1, v3, false, false, 10);   /* [3]x[3] -> [] */
    check_matmul(RTX_F32, 1, v3, 3, b234, false, false, 11); /* [3]x[2,3,4] -> [2,4] */
    check_matmul(RTX_F32, 3, b234, 1, (int64_t[]){4}, false, false, 12); /* -> [2,3] */
    /* trans_a on a 1-D operand is ignored */
    check_matmul(RTX_F32, 1, v3, 2, m32, true, false, 13);
}
END_TEST

START_TEST(matmul_hand_1d) {
    int64_t dv[1] = {3}, dm[2] = {3, 2}, dy[1] = {2};
    double vv[3] = {1, 2, 3}, vm[6] = {1, 0, 0, 1, 1, 1}, want[2] = {4, 5};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_F32, 1, dv, vv), tu_tensor(RTX_F32, 2, dm, vm)};
    struct rtx_tensor *y = run1("matmul", "", in, 2, RTX_F32, 1, dy);
    tu_assert_close(y, want, 0, 1e-6);
    rtx_tensor_unref(y);
    unref_all(in, 2);
}
END_TEST

START_TEST(matmul_half_dtypes) {
    int64_t da[3] = {2, 5, 7}, db[3] = {2, 7, 3};
    check_matmul(RTX_F16, 3, da, 3, db, false, false, 14);
    check_matmul(RTX_BF16, 3, da, 3, db, false, false, 15);
    int64_t db2[2] = {3, 7};
    check_matmul(RTX_BF16, 3, da, 2, db2, false, true, 16);
}
END_TEST

START_TEST(matmul_many_small_and_few_large_batches) {
    int64_t da[3] = {17, 4, 6}, db[3] = {17, 6, 5};
    check_matmul(RTX_F32, 3, da, 3, db, false, false, 17);  /* pool over batches */
    int64_t dl[3] = {2, 70, 80}, dr[3] = {2, 80, 60};
    check_matmul(RTX_F32, 3, dl, 3, dr, false, false, 18);  /* tiles of rows and columns */
    int64_t dk[3] = {2, 3, 700}, dk2[3] = {2, 700, 5};
    check_matmul(RTX_F32, 3, dk, 3, dk2, false, false, 19); /* long K: one call per batch */
}
END_TEST

START_TEST(matmul_batch_tiles_with_transposes) {
    /* op(a) [3,100,40], op(b) [3,40,150]: ragged tiles of both dims, every transpose combo */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        int64_t da[3] = {3, ta ? 40 : 100, ta ? 100 : 40};
        int64_t db[3] = {3, tb ? 150 : 40, tb ? 40 : 150};
        check_matmul(RTX_F32, 3, da, 3, db, ta, tb, 90 + (unsigned)t);
    }
    int64_t da1[3] = {1, 100, 40}, db1[4] = {2, 3, 40, 150}; /* broadcast a over tiles */
    check_matmul(RTX_BF16, 3, da1, 4, db1, false, false, 95);
}
END_TEST

START_TEST(matmul_empty_inner_gives_zeros) {
    int64_t da[2] = {2, 0}, db[2] = {0, 3}, dy[2] = {2, 3};
    double want[6] = {0};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_F32, 2, da, NULL), tu_tensor(RTX_F32, 2, db, NULL)};
    struct rtx_tensor *y = run1("matmul", "", in, 2, RTX_F32, 2, dy);
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    unref_all(in, 2);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * gemm
 * ---------------------------------------------------------------------------------------- */

static void check_gemm(enum rtx_dtype dt, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                       int c_ndim, const int64_t *c_dims, double alpha, double beta,
                       unsigned seed) {
    int64_t da[2] = {ta ? K : M, ta ? M : K}, db[2] = {tb ? N : K, tb ? K : N};
    struct rtx_tensor *in[3] = {tu_tensor_random(dt, 2, da, -1, 1, seed),
                                tu_tensor_random(dt, 2, db, -1, 1, seed + 1),
                                c_ndim >= 0 ? tu_tensor_random(dt, c_ndim, c_dims, -1, 1, seed + 2)
                                            : NULL};
    double *want = calloc((size_t)(M * N), sizeof *want);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += rtx_tensor_get(in[0], ta ? k * M + m : m * K + k) *
                     rtx_tensor_get(in[1], tb ? n * K + k : k * N + n);
            s *= alpha;
            if (in[2]) s += beta * get_bcast(in[2], 2, (int64_t[]){m, n});
            want[m * N + n] = s;
        }
    char attrs[128];
    snprintf(attrs, sizeof attrs, "trans_a=i:%d;trans_b=i:%d;alpha=f:%g;beta=f:%g", ta, tb,
             alpha, beta);
    int64_t dy[2] = {M, N};
    struct rtx_tensor *y = run1("gemm", attrs, in, in[2] ? 3 : 2, dt, 2, dy);
    tu_assert_close(y, want, rtol_of(dt), atol_of(dt));
    free(want);
    rtx_tensor_unref(y);
    unref_all(in, 3);
}

START_TEST(gemm_bias_broadcasts) {
    check_gemm(RTX_F32, 3, 4, 5, false, false, 1, (int64_t[]){4}, 1, 1, 20);
    check_gemm(RTX_F32, 3, 4, 5, false, false, 2, (int64_t[]){3, 1}, 1, 1, 21);
    check_gemm(RTX_F32, 3, 4, 5, false, false, 2, (int64_t[]){3, 4}, 1, 1, 22);
    check_gemm(RTX_F32, 3, 4, 5, false, false, 0, NULL, 1, 1, 23);
    check_gemm(RTX_F32, 3, 4, 5, false, false, 2, (int64_t[]){1, 4}, 1, 1, 24);
}
END_TEST

START_TEST(gemm_alpha_beta_transposes) {
    check_gemm(RTX_F32, 6, 2, 3, true, true, 1, (int64_t[]){2}, 0.5, -2, 25);
    check_gemm(RTX_F32, 6, 2, 3, true, false, -1, NULL, 2, 1, 26);
    check_gemm(RTX_F32, 6, 2, 3, false, true, 2, (int64_t[]){6, 2}, 1, 0, 27);
}
END_TEST

START_TEST(gemm_hand_values) {
    int64_t da[2] = {2, 2}, dc[1] = {2};
    double va[4] = {1, 2, 3, 4}, vb[4] = {1, 0, 0, 1}, vc[2] = {10, 20};
    double want[4] = {2 * 1 + 30, 2 * 2 + 60, 2 * 3 + 30, 2 * 4 + 60};
    struct rtx_tensor *in[3] = {tu_tensor(RTX_F32, 2, da, va), tu_tensor(RTX_F32, 2, da, vb),
                                tu_tensor(RTX_F32, 1, dc, vc)};
    struct rtx_tensor *y = run1("gemm", "alpha=f:2;beta=f:3", in, 3, RTX_F32, 2, da);
    tu_assert_close(y, want, 0, 1e-5);
    rtx_tensor_unref(y);
    unref_all(in, 3);
}
END_TEST

START_TEST(gemm_half_dtypes) {
    check_gemm(RTX_F16, 4, 3, 6, false, true, 1, (int64_t[]){3}, 1, 1, 28);
    check_gemm(RTX_BF16, 4, 3, 6, true, false, 2, (int64_t[]){4, 1}, 1.5, 0.5, 29);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * attention
 * ---------------------------------------------------------------------------------------- */

/* Scaled dot-product attention in double; q [..., Lq, D] etc. Returns malloc'ed output. */
static double *ref_attention(const struct rtx_tensor *q, const struct rtx_tensor *k,
                             const struct rtx_tensor *v, const struct rtx_tensor *mask,
                             bool causal, double scale) {
    int nd = q->ndim;
    int64_t Lq = q->dims[nd - 2], D = q->dims[nd - 1], Lk = k->dims[nd - 2];
    int64_t Dv = v->dims[nd - 1], BH = 1;
    for (int d = 0; d < nd - 2; d++) BH *= q->dims[d];
    if (scale == 0) scale = 1.0 / sqrt((double)D);
    double *y = calloc((size_t)(BH * Lq * Dv) + 1, sizeof *y);
    double *s = calloc((size_t)Lk + 1, sizeof *s);
    bool *ok = calloc((size_t)Lk + 1, sizeof *ok);
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < Lq; i++) {
            double mx = -INFINITY;
            for (int64_t j = 0; j < Lk; j++) {
                double dot = 0;
                for (int64_t d = 0; d < D; d++)
                    dot += rtx_tensor_get(q, (bh * Lq + i) * D + d) *
                           rtx_tensor_get(k, (bh * Lk + j) * D + d);
                s[j] = scale * dot;
                ok[j] = !(causal && j > i);
                if (mask) {
                    int64_t idx[RTX_MAX_DIMS], rem = bh;
                    for (int d = nd - 3; d >= 0; d--) {
                        idx[d] = rem % q->dims[d];
                        rem /= q->dims[d];
                    }
                    idx[nd - 2] = i;
                    idx[nd - 1] = j;
                    double m = get_bcast(mask, nd, idx);
                    if (mask->dtype == RTX_BOOL)
                        ok[j] = ok[j] && m != 0;
                    else
                        s[j] += m;
                }
                if (ok[j] && s[j] > mx) mx = s[j];
            }
            if (mx == -INFINITY) continue; /* every key masked: zeros */
            double sum = 0;
            for (int64_t j = 0; j < Lk; j++) {
                s[j] = ok[j] ? exp(s[j] - mx) : 0;
                sum += s[j];
            }
            for (int64_t e = 0; e < Dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j < Lk; j++)
                    acc += s[j] / sum * rtx_tensor_get(v, (bh * Lk + j) * Dv + e);
                y[(bh * Lq + i) * Dv + e] = acc;
            }
        }
    free(s);
    free(ok);
    return y;
}

struct attn_case {
    enum rtx_dtype dt;
    int nd;
    int64_t lead[2];
    int64_t Lq, Lk, D, Dv;
    bool causal;
    double scale;        /* 0: default */
    int mask_nd;         /* -1: no mask */
    int64_t mask_dims[4];
    enum rtx_dtype mask_dt;
};

static void check_attention(const struct attn_case *c, unsigned seed, const double *mask_vals) {
    int nd = c->nd;
    int64_t dq[4], dk[4], dv[4], dy[4];
    for (int d = 0; d < nd - 2; d++) dq[d] = dk[d] = dv[d] = dy[d] = c->lead[d];
    dq[nd - 2] = dy[nd - 2] = c->Lq;
    dk[nd - 2] = dv[nd - 2] = c->Lk;
    dq[nd - 1] = dk[nd - 1] = c->D;
    dv[nd - 1] = dy[nd - 1] = c->Dv;
    struct rtx_tensor *in[4] = {
        tu_tensor_random(c->dt, nd, dq, -1, 1, seed),
        tu_tensor_random(c->dt, nd, dk, -1, 1, seed + 1),
        tu_tensor_random(c->dt, nd, dv, -1, 1, seed + 2), NULL};
    if (c->mask_nd >= 0) {
        if (mask_vals)
            in[3] = tu_tensor(c->mask_dt, c->mask_nd, c->mask_dims, mask_vals);
        else if (c->mask_dt == RTX_BOOL)
            in[3] = tu_tensor_random(RTX_BOOL, c->mask_nd, c->mask_dims, 0, 2, seed + 3);
        else
            in[3] = tu_tensor_random(c->mask_dt, c->mask_nd, c->mask_dims, -2, 2, seed + 3);
    }
    double *want = ref_attention(in[0], in[1], in[2], in[3], c->causal, c->scale);
    char attrs[64];
    if (c->scale != 0)
        snprintf(attrs, sizeof attrs, "causal=i:%d;scale=f:%.17g", c->causal, c->scale);
    else
        snprintf(attrs, sizeof attrs, "causal=i:%d", c->causal);
    struct rtx_tensor *y = run1("attention", attrs, in, in[3] ? 4 : 3, c->dt, nd, dy);
    tu_assert_close(y, want, rtol_of(c->dt), atol_of(c->dt) + (c->dt == RTX_F32 ? 1e-5 : 0));
    free(want);
    rtx_tensor_unref(y);
    unref_all(in, 4);
}

START_TEST(attention_plain_f32) {
    struct attn_case c = {.dt = RTX_F32, .nd = 4, .lead = {2, 3}, .Lq = 4, .Lk = 5, .D = 6,
                          .Dv = 3, .mask_nd = -1};
    check_attention(&c, 30, NULL);
    c.scale = 0.25;
    check_attention(&c, 31, NULL);
    struct attn_case c2 = {.dt = RTX_F32, .nd = 2, .Lq = 3, .Lk = 7, .D = 4, .Dv = 5,
                           .mask_nd = -1};
    check_attention(&c2, 32, NULL);
}
END_TEST

START_TEST(attention_hand_values) {
    /* q = k = identity rows, v = [[1,2],[3,4]], scale 1: softmax([1,0]) and ([0,1]). */
    int64_t d[2] = {2, 2};
    double eye[4] = {1, 0, 0, 1}, vv[4] = {1, 2, 3, 4};
    struct rtx_tensor *in[3] = {tu_tensor(RTX_F32, 2, d, eye), tu_tensor(RTX_F32, 2, d, eye),
                                tu_tensor(RTX_F32, 2, d, vv)};
    double p = exp(1.0) / (exp(1.0) + 1.0);
    double want[4] = {p * 1 + (1 - p) * 3, p * 2 + (1 - p) * 4, (1 - p) * 1 + p * 3,
                      (1 - p) * 2 + p * 4};
    struct rtx_tensor *y = run1("attention", "scale=f:1", in, 3, RTX_F32, 2, d);
    tu_assert_close(y, want, 1e-5, 1e-6);
    rtx_tensor_unref(y);
    /* causal: row 0 sees only key 0 */
    double want_c[4] = {1, 2, (1 - p) * 1 + p * 3, (1 - p) * 2 + p * 4};
    y = run1("attention", "scale=f:1;causal=i:1", in, 3, RTX_F32, 2, d);
    tu_assert_close(y, want_c, 1e-5, 1e-6);
    rtx_tensor_unref(y);
    unref_all(in, 3);
}
END_TEST

START_TEST(attention_causal) {
    struct attn_case c = {.dt = RTX_F32, .nd = 3, .lead = {2}, .Lq = 5, .Lk = 5, .D = 4,
                          .Dv = 4, .causal = true, .mask_nd = -1};
    check_attention(&c, 40, NULL);
    c.Lq = 3;
    c.Lk = 6; /* top-left aligned: query i sees keys 0..i */
    check_attention(&c, 41, NULL);
    c.Lq = 6;
    c.Lk = 3;
    check_attention(&c, 42, NULL);
}
END_TEST

START_TEST(attention_bool_mask_and_fully_masked_row) {
    /* mask [Lq, Lk] broadcast over [2, 2]; row 1 masks every key -> zeros */
    double m[12] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0};
    struct attn_case c = {.dt = RTX_F32, .nd = 4, .lead = {2, 2}, .Lq = 3, .Lk = 4, .D = 5,
                          .Dv = 2, .mask_nd = 2, .mask_dims = {3, 4}, .mask_dt = RTX_BOOL};
    check_attention(&c, 50, m);
    /* with causal too: row 0 keeps key 0 only */
    c.causal = true;
    check_attention(&c, 51, m);
    /* random mask of shape [2, 1, 3, 4] */
    struct attn_case c2 = c;
    c2.causal = false;
    c2.mask_nd = 4;
    memcpy(c2.mask_dims, (int64_t[]){2, 1, 3, 4}, 4 * sizeof(int64_t));
    check_attention(&c2, 52, NULL);
}
END_TEST

START_TEST(attention_fully_masked_row_is_zero) {
    int64_t d[2] = {2, 3}, dm[2] = {2, 3};
    double mv[6] = {0, 0, 0, 1, 1, 1};
    struct rtx_tensor *in[4] = {tu_tensor_random(RTX_F32, 2, d, -1, 1, 55),
                                tu_tensor_random(RTX_F32, 2, (int64_t[]){3, 3}, -1, 1, 56),
                                tu_tensor_random(RTX_F32, 2, (int64_t[]){3, 3}, 1, 2, 57),
                                tu_tensor(RTX_BOOL, 2, dm, mv)};
    struct rtx_tensor *y = run1("attention", "", in, 4, RTX_F32, 2, d);
    for (int i = 0; i < 3; i++) ck_assert(rtx_tensor_get(y, i) == 0.0);
    for (int i = 3; i < 6; i++) ck_assert(rtx_tensor_get(y, i) >= 1.0);
    rtx_tensor_unref(y);
    /* an additive mask of -inf everywhere in a row gives zeros too */
    rtx_tensor_unref(in[3]);
    double av[6] = {-INFINITY, -INFINITY, -INFINITY, 0, -1, 0};
    in[3] = tu_tensor(RTX_F32, 2, dm, av);
    y = run1("attention", "", in, 4, RTX_F32, 2, d);
    for (int i = 0; i < 3; i++) ck_assert(rtx_tensor_get(y, i) == 0.0);
    for (int i = 3; i < 6; i++) ck_assert(!isnan(rtx_tensor_get(y, i)));
    rtx_tensor_unref(y);
    unref_all(in, 4);
}
END_TEST

START_TEST(attention_nan_propagates) {
    /* a NaN in query row 1 makes that output row NaN, as the plain formula does */
    int64_t d[2] = {3, 4};
    struct rtx_tensor *in[3] = {tu_tensor_random(RTX_F32, 2, d, -1, 1, 65),
                                tu_tensor_random(RTX_F32, 2, d, -1, 1, 66),
                                tu_tensor_random(RTX_F32, 2, d, -1, 1, 67)};
    rtx_tensor_set(in[0], 5, NAN);
    struct rtx_tensor *y = run1("attention", "", in, 3, RTX_F32, 2, d);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(isnan(rtx_tensor_get(y, i)) == (i >= 4 && i < 8), "element %d", i);
    rtx_tensor_unref(y);
    unref_all(in, 3);
}
END_TEST

START_TEST(attention_additive_mask) {
    struct attn_case c = {.dt = RTX_F32, .nd = 4, .lead = {2, 3}, .Lq = 4, .Lk = 5, .D = 3,
                          .Dv = 3, .mask_nd = 4, .mask_dims = {2, 1, 1, 5}, .mask_dt = RTX_F32};
    check_attention(&c, 60, NULL);
    c.mask_nd = 1;
    c.mask_dims[0] = 5;
    c.causal = true;
    check_attention(&c, 61, NULL);
}
END_TEST

START_TEST(attention_half_dtypes) {
    struct attn_case c = {.dt = RTX_F16, .nd = 3, .lead = {3}, .Lq = 4, .Lk = 6, .D = 8,
                          .Dv = 5, .causal = true, .mask_nd = -1};
    check_attention(&c, 70, NULL);
    c.dt = RTX_BF16;
    c.mask_nd = 2;
    c.mask_dims[0] = 4;
    c.mask_dims[1] = 6;
    c.mask_dt = RTX_BF16;
    check_attention(&c, 71, NULL);
    c.mask_dt = RTX_BOOL;
    check_attention(&c, 72, NULL);
}
END_TEST

START_TEST(attention_row_blocks) {
    /* long keys: several query-row blocks per head, split over the pool */
    struct attn_case c = {.dt = RTX_F32, .nd = 3, .lead = {3}, .Lq = 70, .Lk = 300, .D = 16,
                          .Dv = 8, .causal = true, .mask_nd = -1};
    check_attention(&c, 80, NULL);
    c.causal = false;
    c.mask_nd = 2;
    c.mask_dims[0] = 70;
    c.mask_dims[1] = 300;
    c.mask_dt = RTX_BOOL;
    check_attention(&c, 81, NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * The pool
 * ---------------------------------------------------------------------------------------- */

struct cover {
    int64_t n;
    _Atomic int *hits;
    struct rtx_cpu *cpu;         /* for the nested call, or NULL */
    _Atomic int nested_hits;
};

static void cover_fn(void *ctx, int64_t begin, int64_t end) {
    struct cover *c = ctx;
    ck_assert(begin >= 0 && begin < end && end <= c->n);
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void count_fn(void *ctx, int64_t begin, int64_t end) {
    struct cover *c = ctx;
    atomic_fetch_add(&c->nested_hits, (int)(end - begin));
}

static void nested_fn(void *ctx, int64_t begin, int64_t end) {
    struct cover *c = ctx;
    cover_fn(ctx, begin, end);
    rtx__cpu_parallel_for(c->cpu, 10, 1, count_fn, ctx); /* runs inline: no deadlock */
}

/* grain 0: rtx__cpu_parallel_each (items claimed one at a time) */
static void check_cover(struct rtx_cpu *cpu, int64_t n, int64_t grain, bool nested) {
    struct cover c = {.n = n, .hits = calloc((size_t)n + 1, sizeof(_Atomic int)), .cpu = cpu};
    atomic_init(&c.nested_hits, 0);
    if (grain == 0)
        rtx__cpu_parallel_each(cpu, n, nested ? nested_fn : cover_fn, &c);
    else
        rtx__cpu_parallel_for(cpu, n, grain, nested ? nested_fn : cover_fn, &c);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(atomic_load(&c.hits[i]) == 1, "n %lld grain %lld: index %lld hit %d times",
                      (long long)n, (long long)grain, (long long)i, atomic_load(&c.hits[i]));
    free(c.hits);
}

START_TEST(parallel_for_covers_each_index_once) {
    int threads[3] = {1, 3, 4};
    for (int t = 0; t < 3; t++) {
        struct rtx_backend *be;
        struct rtx_err err = {0};
        ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = threads[t]},
                                             &be, &err), 0);
        struct rtx_cpu *cpu = be->ctx;
        ck_assert_int_eq(rtx__cpu_n_threads(cpu), threads[t]);
        /* shares of 0 to 33,000 items per thread, chunks of one to hundreds */
        int64_t ns[5] = {1, 7, 1001, 4099, 100003}, grains[5] = {0, 1, 3, 7, 1000};
        for (int i = 0; i < 5; i++)
            for (int g = 0; g < 5; g++) check_cover(cpu, ns[i], grains[g], false);
        check_cover(cpu, 0, 1, false);
        check_cover(cpu, 0, 0, false);
        check_cover(cpu, 999, 5, true);
        check_cover(cpu, 37, 0, true);
        for (int r = 0; r < 200; r++) { /* many quick jobs */
            check_cover(cpu, 33, 1, false);
            check_cover(cpu, 5, 0, false);
        }
        rtx_backend_free(be);
    }
}
END_TEST

START_TEST(cpu_backend_basics) {
    struct rtx_backend *be;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), 0);
    ck_assert_str_eq(rtx_backend_name(be), "cpu");
    ck_assert_int_ge(rtx__cpu_n_threads(be->ctx), 1);
    ck_assert_int_eq(rtx_backend_synchronize(be, &err), 0);
    struct rtx_buffer *buf;
    ck_assert_int_eq(rtx_backend_buffer_new(be, 1000, &buf, &err), 0);
    ck_assert_int_eq(buf->refcount, 1);
    ck_assert_uint_eq(buf->bytes, 1000);
    ck_assert_uint_eq((uintptr_t)buf->data % 64, 0);
    ck_assert_ptr_null(buf->release);
    memset(buf->data, 0xab, 1000);
    rtx_free_aligned(buf->data);
    rtx_free(buf);
    rtx_backend_free(be);
    rtx_backend_free(NULL);
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = -1}, &be, &err),
                     RTX_EINVAL);
    ck_assert_ptr_null(be);
}
END_TEST

START_TEST(cpu_supports_node_follows_dtype_rules) {
    struct rtx_err err = {0};
    struct rtx_graph *g;
    struct rtx_backend *be;
    int64_t d[2] = {2, 2};
    ck_assert_int_eq(rtx_graph_new("s", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "f", RTX_F32, 2, d, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "h", RTX_F16, 2, d, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "i", RTX_I32, 2, d, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "b", RTX_BOOL, 2, d, &err), 0);
    ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), 0);
    struct {
        const char *op;
        const char *in[4];
        int n;
        bool ok;
    } cases[] = {
        {"matmul", {"f", "f"}, 2, true},       {"matmul", {"i", "i"}, 2, false},
        {"matmul", {"f", "h"}, 2, false},      {"gather", {"i", "i"}, 2, true},
        {"gather", {"f", "f"}, 2, false},      {"where", {"b", "h", "h"}, 3, true},
        {"where", {"f", "h", "h"}, 3, false},  {"attention", {"h", "h", "h", "b"}, 4, true},
        {"attention", {"f", "f", "f", "h"}, 4, false}, {"cast", {"b"}, 1, true},
        {"relu", {"i"}, 1, true},              {"sqrt", {"i"}, 1, false},
        {"add", {"b", "b"}, 2, false},         {"equal", {"b", "b"}, 2, true},
        {"conv2d", {"i", "i"}, 2, false},      {"transpose", {"b"}, 1, true},
        {"matmul", {"t0", "f"}, 2, true}, /* an intermediate: its dtype comes at planning */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char out[16];
        snprintf(out, sizeof out, "t%zu", c);
        const char *outs[1] = {out};
        int n = rtx_graph_add_node(g, cases[c].op, "", cases[c].in, cases[c].n, outs, 1, &err);
        ck_assert_msg(n >= 0, "%s: %s", cases[c].op, err.msg);
        ck_assert_msg(rtx_backend_supports_node(be, g, &g->nodes[n]) == cases[c].ok,
                      "case %zu (%s)", c, cases[c].op);
    }
    rtx_backend_free(be);
    rtx_graph_free(g);
}
END_TEST

START_TEST(cpu_backend_new_out_of_memory) {
    struct rtx_err err = {0};
    for (long n = 1;; n++) {
        struct rtx_backend *be = NULL;
        rtx_alloc_fail_after(n);
        int rc = rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 3}, &be, &err);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            rtx_backend_free(be);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
        ck_assert_ptr_null(be);
        ck_assert_int_lt(n, 10);
    }
}
END_TEST

Suite *rtx_cpu_linalg_suite(void) {
    Suite *s = suite_create("cpu_linalg");
    TCase *tc = tcase_create("linalg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, matmul_2d_f32);
    tcase_add_test(tc, matmul_batch_broadcast);
    tcase_add_test(tc, matmul_batch_folds_shared_b);
    tcase_add_test(tc, matmul_transposes);
    tcase_add_test(tc, matmul_1d_promotion);
    tcase_add_test(tc, matmul_hand_1d);
    tcase_add_test(tc, matmul_half_dtypes);
    tcase_add_test(tc, matmul_many_small_and_few_large_batches);
    tcase_add_test(tc, matmul_batch_tiles_with_transposes);
    tcase_add_test(tc, matmul_empty_inner_gives_zeros);
    tcase_add_test(tc, gemm_bias_broadcasts);
    tcase_add_test(tc, gemm_alpha_beta_transposes);
    tcase_add_test(tc, gemm_hand_values);
    tcase_add_test(tc, gemm_half_dtypes);
    tcase_add_test(tc, attention_plain_f32);
    tcase_add_test(tc, attention_hand_values);
    tcase_add_test(tc, attention_causal);
    tcase_add_test(tc, attention_bool_mask_and_fully_masked_row);
    tcase_add_test(tc, attention_fully_masked_row_is_zero);
    tcase_add_test(tc, attention_additive_mask);
    tcase_add_test(tc, attention_nan_propagates);
    tcase_add_test(tc, attention_half_dtypes);
    tcase_add_test(tc, attention_row_blocks);
    suite_add_tcase(s, tc);
    TCase *pool = tcase_create("pool");
    tcase_set_timeout(pool, 60);
    tcase_add_test(pool, parallel_for_covers_each_index_once);
    tcase_add_test(pool, cpu_backend_basics);
    tcase_add_test(pool, cpu_supports_node_follows_dtype_rules);
    tcase_add_test(pool, cpu_backend_new_out_of_memory);
    suite_add_tcase(s, pool);
    return s;
}
