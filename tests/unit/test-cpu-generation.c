/*
 * test-cpu-generation.c - the CPU kernels of rope and paged_attention (kernels/cpu/
 * ops-generation.c) and the runtime's handling of an op that writes its inputs.
 *
 * rope is checked against the formula of docs/ops.md evaluated here in double (from the f32
 * angle the spec prescribes), in both pairings, with rotated dims fewer than the head size,
 * i32 and i64 positions and every float dtype. paged_attention is checked three ways: a
 * single prefill over contiguous blocks against the existing attention op (causal, KV heads
 * repeated for GQA); a ragged batch (decoding, a chunk that starts mid-context, a prefill,
 * padding rows and a padding sequence, shuffled block tables, stale data in every cache slot)
 * against a naive reference written here; and the caches, which must hold the new rows'
 * keys and values afterwards and nothing else changed, across two steps of one sequence run
 * through plans on the caller's tensors. Every bad input fails with a message naming the node
 * and the value, leaving the caches as they were.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend.h"
#include "tests/unit/test-util.h"

static double tol_of(enum rtx_dtype dt) {
    return dt == RTX_F32 ? 2e-5 : dt == RTX_F16 ? 2e-3 : 1.6e-2;
}

static void unref_all(struct rtx_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        rtx_tensor_unref(t[i]);
}

/* |got - want| <= tol * (1 + |want|) everywhere. */
static void assert_near(const struct rtx_tensor *got, const double *want, double tol,
                        const char *what) {
    int64_t n = rtx_tensor_numel(got);
    for (int64_t i = 0; i < n; i++) {
        double g = rtx_tensor_get(got, i);
        ck_assert_msg(fabs(g - want[i]) <= tol * (1.0 + fabs(want[i])),
                      "%s: element %lld is %.9g, want %.9g", what, (long long)i, g, want[i]);
    }
}

/* ------------------------------------------------------------------------------------------
 * rope
 * ---------------------------------------------------------------------------------------- */

/* docs/ops.md's rope in double, from the f32 angle. */
static double *rope_ref(const struct rtx_tensor *x, const struct rtx_tensor *pos,
                        const struct rtx_tensor *inv, bool interleaved) {
    int64_t T = x->dims[0], H = x->dims[1], D = x->dims[2], half = inv->dims[0];
    double *y = malloc(sizeof *y * (size_t)(T * H * D + 1));
    for (int64_t i = 0; i < T * H * D; i++)
        y[i] = rtx_tensor_get(x, i);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < half; i++) {
                float th = (float)rtx_tensor_get(pos, t) * (float)rtx_tensor_get(inv, i);
                int64_t base = (t * H + h) * D;
                int64_t ia = base + (interleaved ? 2 * i : i);
                int64_t ib = base + (interleaved ? 2 * i + 1 : i + half);
                double a = rtx_tensor_get(x, ia), b = rtx_tensor_get(x, ib);
                y[ia] = a * cos((double)th) - b * sin((double)th);
                y[ib] = b * cos((double)th) + a * sin((double)th);
            }
    return y;
}

/* Llama-style inverse frequencies theta^(-2i/R) for i < half. */
static struct rtx_tensor *inv_freq(int64_t half, int64_t R, double theta) {
    double v[64];
    ck_assert(half <= 64);
    for (int64_t i = 0; i < half; i++)
        v[i] = pow(theta, -2.0 * (double)i / (double)R);
    return tu_tensor(RTX_F32, 1, &half, v);
}

static void check_rope(enum rtx_dtype dt, enum rtx_dtype pdt, int64_t T, int64_t H, int64_t D,
                       int64_t half, int interleaved, double pos_scale, unsigned seed) {
    int64_t xd[3] = {T, H, D};
    struct rtx_tensor *in[3] = {tu_tensor_random(dt, 3, xd, -2, 2, seed),
                                tu_tensor_random(pdt, 1, &T, 0, 1000, seed + 1),
                                inv_freq(half, 2 * half, 10000.0)};
    for (int64_t t = 0; t < T; t++)
        rtx_tensor_set(in[1], t, floor(rtx_tensor_get(in[1], t) * pos_scale));
    double *want = rope_ref(in[0], in[1], in[2], interleaved);
    char attrs[32];
    snprintf(attrs, sizeof attrs, "interleaved=i:%d", interleaved);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_msg(tu_run_op("rope", attrs, in, 3, out, 1, &err) == 0, "rope: %s", err.msg);
    tu_assert_shape(out[0], dt, 3, xd);
    char what[96];
    snprintf(what, sizeof what, "rope %s pos %s D %lld R %lld interleaved %d", rtx_dtype_name(dt),
             rtx_dtype_name(pdt), (long long)D, (long long)(2 * half), interleaved);
    assert_near(out[0], want, tol_of(dt), what);
    /* the dims past R are the input's, bit for bit */
    size_t es = rtx_dtype_size(dt);
    for (int64_t r = 0; r < T * H && 2 * half < D; r++)
        ck_assert_msg(memcmp((char *)rtx_tensor_data(out[0]) + (size_t)(r * D + 2 * half) * es,
                             (char *)rtx_tensor_data(in[0]) + (size_t)(r * D + 2 * half) * es,
                             (size_t)(D - 2 * half) * es) == 0,
                      "%s: row %lld's unrotated dims changed", what, (long long)r);
    free(want);
    rtx_tensor_unref(out[0]);
    unref_all(in, 3);
}

START_TEST(rope_hand_values) {
    /* (1, 0) turned by 90 degrees is (0, 1); by 180, (-1, 0); position 0 changes nothing */
    int64_t xd[3] = {3, 1, 2}, T = 3, one = 1;
    double xv[6] = {1, 0, 1, 0, 0.5, 2}, pv[3] = {1, 2, 0}, fv[1] = {M_PI / 2};
    struct rtx_tensor *in[3] = {tu_tensor(RTX_F32, 3, xd, xv), tu_tensor(RTX_I32, 1, &T, pv),
                                tu_tensor(RTX_F32, 1, &one, fv)};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_msg(tu_run_op("rope", "", in, 3, out, 1, &err) == 0, "%s", err.msg);
    double want[6] = {0, 1, -1, 0, 0.5, 2};
    tu_assert_close(out[0], want, 0, 1e-6);
    rtx_tensor_unref(out[0]);
    unref_all(in, 3);
}
END_TEST

START_TEST(rope_both_pairings_all_dtypes) {
    static const enum rtx_dtype dts[3] = {RTX_F32, RTX_F16, RTX_BF16};
    for (int k = 0; k < 3; k++)
        for (int il = 0; il <= 1; il++) {
            check_rope(dts[k], RTX_I32, 7, 3, 16, 8, il, 1.0, 10 + (unsigned)k); /* R = D */
            check_rope(dts[k], RTX_I64, 5, 2, 20, 6, il, 1.0, 20 + (unsigned)k); /* R < D */
        }
}
END_TEST

START_TEST(rope_large_positions_and_no_rotation) {
    check_rope(RTX_F32, RTX_I64, 9, 2, 8, 4, 0, 300.0, 31); /* positions up to 300000 */
    check_rope(RTX_F32, RTX_I32, 4, 3, 6, 0, 1, 1.0, 32);   /* R = 0: a copy */
    check_rope(RTX_BF16, RTX_I32, 33, 4, 64, 16, 0, 1.0, 33);
}
END_TEST

/* Runs rope on bad inputs; the message names the node and contains `want`. */
static void rope_fails(enum rtx_dtype xdt, int xnd, enum rtx_dtype pdt, int64_t half,
                       const char *attrs, const char *want) {
    int64_t xd[3] = {2, 2, 8}, T = 2;
    struct rtx_tensor *in[3] = {tu_tensor(xdt, xnd, xd, NULL), tu_tensor(pdt, 1, &T, NULL),
                                tu_tensor(RTX_F32, 1, &half, NULL)};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("rope", attrs, in, 3, out, 1, &err), RTX_EGRAPH);
    ck_assert_msg(strstr(err.msg, "node 0 'n' (rope)") && strstr(err.msg, want),
                  "message '%s' lacks '%s'", err.msg, want);
    unref_all(in, 3);
}

START_TEST(rope_rejects_bad_inputs) {
    rope_fails(RTX_F32, 3, RTX_I32, 5, "", "10 rotated dims exceed the head size 8");
    rope_fails(RTX_F32, 3, RTX_F32, 4, "", "positions must be i32 or i64, not f32");
    rope_fails(RTX_I32, 3, RTX_I32, 4, "", "x must be f32, f16 or bf16, not i32");
    rope_fails(RTX_F32, 2, RTX_I32, 4, "", "x must have rank 3, not 2");
    rope_fails(RTX_F32, 3, RTX_I32, 4, "interleaved=i:2", "'interleaved' must be 0 or 1, not 2");
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * paged_attention
 * ---------------------------------------------------------------------------------------- */

enum { Q, K, V, KC, VC, SLOTS, TABLES, QSTART, CTX, N_IN };

/* A paged_attention problem: geometry, and the nine inputs once made. */
struct pa {
    enum rtx_dtype dt;
    int64_t T, H, Hkv, D, NB, BS, S, B;
    struct rtx_tensor *in[N_IN];
};

/* Random q, k, v and caches (every slot holds stale data) for p's geometry. */
static void pa_make_data(struct pa *p, unsigned seed) {
    int64_t qd[3] = {p->T, p->H, p->D}, kd[3] = {p->T, p->Hkv, p->D};
    int64_t cd[4] = {p->NB, p->BS, p->Hkv, p->D};
    p->in[Q] = tu_tensor_random(p->dt, 3, qd, -1, 1, seed);
    p->in[K] = tu_tensor_random(p->dt, 3, kd, -1, 1, seed + 1);
    p->in[V] = tu_tensor_random(p->dt, 3, kd, -1, 1, seed + 2);
    p->in[KC] = tu_tensor_random(p->dt, 4, cd, -1, 1, seed + 3);
    p->in[VC] = tu_tensor_random(p->dt, 4, cd, -1, 1, seed + 4);
}

/* The metadata tensors from arrays. */
static void pa_make_meta(struct pa *p, const double *slots, const double *tables, const double *qs,
                         const double *ctx) {
    int64_t td[2] = {p->S, p->B}, s1 = p->S + 1;
    p->in[SLOTS] = tu_tensor(RTX_I32, 1, &p->T, slots);
    p->in[TABLES] = tu_tensor(RTX_I32, 2, td, tables);
    p->in[QSTART] = tu_tensor(RTX_I32, 1, &s1, qs);
    p->in[CTX] = tu_tensor(RTX_I32, 1, &p->S, ctx);
}

static void pa_free(struct pa *p) {
    unref_all(p->in, N_IN);
}

/* A double copy of a cache. */
static double *cache_copy(const struct rtx_tensor *c) {
    int64_t n = rtx_tensor_numel(c);
    double *d = malloc(sizeof *d * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = rtx_tensor_get(c, i);
    return d;
}

/* The naive reference of docs/ops.md from p's inputs as they are before the run: the writes
 * applied to copies of the caches, then per row and head a softmax over the keys 0..position
 * read through the block table. kc_out and vc_out receive the caches after the writes. */
static double *pa_reference(const struct pa *p, double scale, double **kc_out, double **vc_out) {
    int64_t row = p->Hkv * p->D, G = p->H / p->Hkv;
    double *kc = cache_copy(p->in[KC]), *vc = cache_copy(p->in[VC]);
    for (int64_t t = 0; t < p->T; t++) {
        int64_t slot = (int64_t)rtx_tensor_get(p->in[SLOTS], t);
        for (int64_t e = 0; e < row && slot >= 0; e++) {
            kc[slot * row + e] = rtx_tensor_get(p->in[K], t * row + e);
            vc[slot * row + e] = rtx_tensor_get(p->in[V], t * row + e);
        }
    }
    double *y = calloc((size_t)(p->T * p->H * p->D + 1), sizeof *y);
    double *w = malloc(sizeof *w * (size_t)(p->NB * p->BS + 1));
    for (int64_t s = 0; s < p->S; s++) {
        int64_t q0 = (int64_t)rtx_tensor_get(p->in[QSTART], s);
        int64_t n = (int64_t)rtx_tensor_get(p->in[QSTART], s + 1) - q0;
        int64_t L = (int64_t)rtx_tensor_get(p->in[CTX], s);
        for (int64_t r = 0; r < n; r++)
            for (int64_t h = 0; h < p->H; h++) {
                int64_t t = q0 + r, pos = L - n + r, hk = h / G;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j <= pos; j++) {
                    int64_t blk = (int64_t)rtx_tensor_get(p->in[TABLES], s * p->B + j / p->BS);
                    int64_t kb = ((blk * p->BS + j % p->BS) * p->Hkv + hk) * p->D;
                    double dot = 0.0;
                    for (int64_t d = 0; d < p->D; d++)
                        dot += rtx_tensor_get(p->in[Q], (t * p->H + h) * p->D + d) * kc[kb + d];
                    w[j] = scale * dot;
                    mx = fmax(mx, w[j]);
                }
                for (int64_t j = 0; j <= pos; j++)
                    sum += (w[j] = exp(w[j] - mx));
                for (int64_t j = 0; j <= pos; j++) {
                    int64_t blk = (int64_t)rtx_tensor_get(p->in[TABLES], s * p->B + j / p->BS);
                    int64_t vb = ((blk * p->BS + j % p->BS) * p->Hkv + hk) * p->D;
                    for (int64_t d = 0; d < p->D; d++)
                        y[(t * p->H + h) * p->D + d] += w[j] / sum * vc[vb + d];
                }
            }
    }
    free(w);
    *kc_out = kc;
    *vc_out = vc;
    return y;
}

/* Runs paged_attention on p's inputs (the caches written in place); 0 or the error. */
static int pa_run(struct pa *p, const char *attrs, struct rtx_tensor **out, struct rtx_err *err) {
    return tu_run_op("paged_attention", attrs, p->in, N_IN, out, 1, err);
}

/* Runs p and checks the output against pa_reference and the caches against the writes. */
static void pa_check(struct pa *p, const char *attrs, double scale, const char *what) {
    double *kc, *vc;
    double *want = pa_reference(p, scale, &kc, &vc);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_msg(pa_run(p, attrs, out, &err) == 0, "%s: %s", what, err.msg);
    int64_t od[3] = {p->T, p->H, p->D};
    tu_assert_shape(out[0], p->dt, 3, od);
    assert_near(out[0], want, tol_of(p->dt), what);
    int64_t n = rtx_tensor_numel(p->in[KC]);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(rtx_tensor_get(p->in[KC], i) == kc[i] &&
                          rtx_tensor_get(p->in[VC], i) == vc[i],
                      "%s: cache element %lld is not what the writes leave", what, (long long)i);
    free(want);
    free(kc);
    free(vc);
    rtx_tensor_unref(out[0]);
}

/* One prefill of L tokens over contiguous blocks against attention(causal=1) with the KV
 * heads repeated for GQA. */
static void check_prefill_is_causal_attention(enum rtx_dtype dt, int64_t L, int64_t H, int64_t Hkv,
                                              int64_t D, int64_t BS, unsigned seed) {
    struct pa p = {.dt = dt, .T = L, .H = H, .Hkv = Hkv, .D = D, .BS = BS, .S = 1};
    p.B = (L + BS - 1) / BS;
    p.NB = p.B + 2;
    pa_make_data(&p, seed);
    double *slots = malloc(sizeof *slots * (size_t)L), *tables = malloc(sizeof *tables * 64);
    ck_assert(p.B <= 64);
    for (int64_t t = 0; t < L; t++)
        slots[t] = (double)t;
    for (int64_t b = 0; b < p.B; b++)
        tables[b] = (double)b;
    double qs[2] = {0, (double)L}, ctx[1] = {(double)L};
    pa_make_meta(&p, slots, tables, qs, ctx);
    int64_t d4[4] = {1, H, L, D};
    struct rtx_tensor *att_in[3] = {tu_tensor(dt, 4, d4, NULL), tu_tensor(dt, 4, d4, NULL),
                                    tu_tensor(dt, 4, d4, NULL)};
    for (int64_t h = 0; h < H; h++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t d = 0; d < D; d++) {
                int64_t at = (h * L + l) * D + d, kv = (l * Hkv + h / (H / Hkv)) * D + d;
                rtx_tensor_set(att_in[0], at, rtx_tensor_get(p.in[Q], (l * H + h) * D + d));
                rtx_tensor_set(att_in[1], at, rtx_tensor_get(p.in[K], kv));
                rtx_tensor_set(att_in[2], at, rtx_tensor_get(p.in[V], kv));
            }
    struct rtx_tensor *ya[1] = {NULL}, *yp[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_msg(tu_run_op("attention", "causal=i:1", att_in, 3, ya, 1, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(pa_run(&p, "", yp, &err) == 0, "%s", err.msg);
    double *want = malloc(sizeof *want * (size_t)(L * H * D));
    for (int64_t l = 0; l < L; l++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++)
                want[(l * H + h) * D + d] = rtx_tensor_get(ya[0], (h * L + l) * D + d);
    char what[96];
    snprintf(what, sizeof what, "prefill %s L %lld H %lld Hkv %lld D %lld BS %lld",
             rtx_dtype_name(dt), (long long)L, (long long)H, (long long)Hkv, (long long)D,
             (long long)BS);
    /* both round once from f32 sums taken in different orders */
    assert_near(yp[0], want, dt == RTX_F32 ? 2e-5 : dt == RTX_F16 ? 2e-3 : 8e-3, what);
    free(want);
    free(slots);
    free(tables);
    rtx_tensor_unref(ya[0]);
    rtx_tensor_unref(yp[0]);
    unref_all(att_in, 3);
    pa_free(&p);
}

START_TEST(paged_prefill_equals_causal_attention) {
    check_prefill_is_causal_attention(RTX_F32, 13, 4, 2, 16, 4, 1);
    check_prefill_is_causal_attention(RTX_BF16, 37, 8, 2, 32, 8, 2);
    check_prefill_is_causal_attention(RTX_F16, 5, 2, 2, 8, 16, 3);
    check_prefill_is_causal_attention(RTX_F32, 9, 3, 1, 8, 1, 4);     /* blocks of 1, MQA */
    check_prefill_is_causal_attention(RTX_F32, 600, 4, 2, 16, 16, 5); /* key chunks, tasks */
}
END_TEST

/* The ragged batch of the file comment: 3 sequences and a padding one, rows 0 and 10..11
 * padding; blocks of 4 from a shuffled pool of 20. */
static void make_ragged(struct pa *p, enum rtx_dtype dt, int64_t H, int64_t Hkv, int64_t D,
                        unsigned seed) {
    *p = (struct pa){
        .dt = dt, .T = 12, .H = H, .Hkv = Hkv, .D = D, .NB = 20, .BS = 4, .S = 4, .B = 4};
    pa_make_data(p, seed);
    /* seq 0: 10 keys, decodes position 9; seq 1: 7 keys, a chunk at positions 4..6; seq 2: a
     * prefill of 5; seq 3: padding (no rows, no keys, a table of -1) */
    double tables[16] = {13, 2, 17, -1, 5, 11, -1, -1, 0, 19, -1, -1, -1, -1, -1, -1};
    double qs[5] = {1, 2, 5, 10, 10}, ctx[4] = {10, 7, 5, 0};
    double slots[12] = {-1};
    int64_t t = 1;
    for (int64_t s = 0; s < 3; s++) {
        int64_t n = (int64_t)(qs[s + 1] - qs[s]), L = (int64_t)ctx[s];
        for (int64_t pos = L - n; pos < L; pos++, t++)
            slots[t] = tables[s * 4 + pos / 4] * 4 + (double)(pos % 4);
    }
    slots[10] = slots[11] = -1;
    pa_make_meta(p, slots, tables, qs, ctx);
}

START_TEST(paged_ragged_batch_matches_reference) {
    static const enum rtx_dtype dts[3] = {RTX_F32, RTX_BF16, RTX_F16};
    for (int k = 0; k < 3; k++) {
        struct pa p;
        make_ragged(&p, dts[k], 4, 2, 8, 40 + (unsigned)k);
        char what[64];
        snprintf(what, sizeof what, "ragged %s", rtx_dtype_name(dts[k]));
        pa_check(&p, "", 1.0 / sqrt(8.0), what);
        pa_free(&p);
    }
    struct pa p;
    make_ragged(&p, RTX_F32, 6, 3, 16, 50); /* another G and D, with a scale */
    pa_check(&p, "scale=f:0.7", 0.7, "ragged f32 scale 0.7");
    pa_free(&p);
}
END_TEST

START_TEST(paged_padding_rows_are_zero) {
    /* the backend's output buffer is not zeroed: the kernel must write the padding rows */
    struct pa p;
    make_ragged(&p, RTX_F32, 4, 2, 8, 60);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_msg(pa_run(&p, "", out, &err) == 0, "%s", err.msg);
    int64_t per_row = p.H * p.D;
    for (int64_t r = 0; r < p.T; r++)
        for (int64_t e = 0; e < per_row && (r == 0 || r >= 10); e++)
            ck_assert_msg(rtx_tensor_get(out[0], r * per_row + e) == 0.0,
                          "padding row %lld is not zero", (long long)r);
    rtx_tensor_unref(out[0]);
    pa_free(&p);
}
END_TEST

START_TEST(paged_survives_allocation_failures) {
    /* the Nth allocation fails, for every N up to the first run that succeeds: each failure
     * is RTX_ENOMEM, leaks nothing (the sanitizer build checks), and the run that succeeds
     * gives the reference (the writes of runs that failed are the same bytes again) */
    struct pa p;
    make_ragged(&p, RTX_F32, 4, 2, 8, 65);
    double *kc, *vc;
    double *want = pa_reference(&p, 1.0 / sqrt(8.0), &kc, &vc);
    struct rtx_tensor *out[1] = {NULL};
    int rc = RTX_ENOMEM, n = 0;
    while (rc == RTX_ENOMEM && n < 10000) {
        struct rtx_err err = {0};
        rtx_alloc_fail_after(++n);
        rc = pa_run(&p, "", out, &err);
        rtx_alloc_fail_after(0);
        ck_assert_msg(rc == 0 || rc == RTX_ENOMEM, "allocation %d: %d (%s)", n, rc, err.msg);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 1);
    assert_near(out[0], want, tol_of(RTX_F32), "after allocation failures");
    free(want);
    free(kc);
    free(vc);
    rtx_tensor_unref(out[0]);
    pa_free(&p);
}
END_TEST

/* p with one metadata entry changed must fail naming the node and `want`, and leave the
 * caches as they were. */
static void pa_fails(struct pa *p, int input, int64_t index, double value, const char *want) {
    double old = rtx_tensor_get(p->in[input], index);
    rtx_tensor_set(p->in[input], index, value);
    double *kc = cache_copy(p->in[KC]), *vc = cache_copy(p->in[VC]);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(pa_run(p, "", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "node 0 'n' (paged_attention)") && strstr(err.msg, want),
                  "message '%s' lacks '%s'", err.msg, want);
    ck_assert_ptr_null(out[0]);
    for (int64_t i = 0; i < rtx_tensor_numel(p->in[KC]); i++)
        ck_assert_msg(rtx_tensor_get(p->in[KC], i) == kc[i] &&
                          rtx_tensor_get(p->in[VC], i) == vc[i],
                      "a failed run changed cache element %lld", (long long)i);
    free(kc);
    free(vc);
    rtx_tensor_set(p->in[input], index, old);
}

START_TEST(paged_rejects_bad_metadata) {
    struct pa p;
    make_ragged(&p, RTX_F32, 4, 2, 8, 70);
    pa_fails(&p, SLOTS, 3, 80, "row 3: slot_mapping[3] = 80 is not a slot of the cache");
    pa_fails(&p, TABLES, 5, 20, "sequence 1: block_tables[1][1] = 20 is not a block");
    pa_fails(&p, TABLES, 0, -1, "sequence 0: block_tables[0][0] = -1 is not a block");
    pa_fails(&p, CTX, 1, 2, "sequence 1: context_lens[1] = 2 is less than its new tokens");
    pa_fails(&p, CTX, 2, 17, "sequence 2: context_lens[2] = 17 exceeds the 16 keys");
    pa_fails(&p, CTX, 0, -4, "sequence 0: context_lens[0] = -4 is less than");
    pa_fails(&p, QSTART, 2, 1, "query_start[2] = 1");
    pa_fails(&p, QSTART, 4, 13, "query_start[4] = 13");
    pa_fails(&p, QSTART, 0, -1, "query_start[0] = -1");
    /* several faults: the first in the documented order is named */
    rtx_tensor_set(p.in[SLOTS], 1, 1000);
    pa_fails(&p, TABLES, 9, 99, "block_tables[2][1] = 99");
    rtx_tensor_set(p.in[SLOTS], 1, -7); /* any negative slot writes nothing */
    pa_check(&p, "", 1.0 / sqrt(8.0), "negative slot");
    pa_free(&p);
}
END_TEST

/* paged_attention built from inputs of these dtypes and shapes fails validation with `want`
 * (and the node named). */
static void pa_shape_fails(const enum rtx_dtype *dts, const int *nds, int64_t (*dims)[4],
                           const char *want) {
    struct rtx_tensor *in[N_IN];
    for (int i = 0; i < N_IN; i++)
        in[i] = tu_tensor(dts[i], nds[i], dims[i], NULL);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("paged_attention", "", in, N_IN, out, 1, &err), RTX_EGRAPH);
    ck_assert_msg(strstr(err.msg, "node 0 'n' (paged_attention)") && strstr(err.msg, want),
                  "message '%s' lacks '%s'", err.msg, want);
    unref_all(in, N_IN);
}

START_TEST(paged_rejects_bad_shapes_and_dtypes) {
    enum rtx_dtype dts[N_IN] = {RTX_F32, RTX_F32, RTX_F32, RTX_F32, RTX_F32,
                                RTX_I32, RTX_I32, RTX_I32, RTX_I32};
    int nds[N_IN] = {3, 3, 3, 4, 4, 1, 2, 1, 1};
    int64_t dims[N_IN][4] = {{5, 6, 8}, {5, 4, 8}, {5, 4, 8}, {3, 4, 4, 8}, {3, 4, 4, 8},
                             {5},       {2, 3},    {3},       {2}};
    pa_shape_fails(dts, nds, dims, "q has 6 heads, not a multiple of the 4 KV heads of k");
    dims[0][1] = 8;
    dts[SLOTS] = RTX_I64;
    pa_shape_fails(dts, nds, dims, "slot_mapping must be i32, not i64");
    dts[SLOTS] = RTX_I32;
    dts[VC] = RTX_BF16;
    pa_shape_fails(dts, nds, dims, "v_cache is bf16, q is f32");
    dts[VC] = RTX_F32;
    nds[TABLES] = 1;
    pa_shape_fails(dts, nds, dims, "block_tables must have rank 2, not 1");
    nds[TABLES] = 2;
    dims[QSTART][0] = 2;
    pa_shape_fails(dts, nds, dims,
                   "query_start dimension 0 is 2, must be context_lens' "
                   "sequences + 1 (3)");
    dims[QSTART][0] = 3;
    dims[KC][3] = 4;
    pa_shape_fails(dts, nds, dims, "k_cache dimension 3 is 4, must be q's head size (8)");
    dims[KC][3] = 8;
    dims[VC][0] = 2;
    pa_shape_fails(dts, nds, dims, "v_cache dimension 0 is 2, must be as in k_cache (3)");
    dims[VC][0] = 3;
    dims[V][0] = 4;
    pa_shape_fails(dts, nds, dims, "v dimension 0 is 4, must be as in k (5)");
    dims[V][0] = 5;
    dts[Q] = dts[K] = dts[V] = dts[KC] = dts[VC] = RTX_I32;
    pa_shape_fails(dts, nds, dims, "q must be f32, f16 or bf16, not i32");
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Through plans: the caller's caches, written in place
 * ---------------------------------------------------------------------------------------- */

/* A layer's attention as the text-generation engine builds it: q and k through rope (the
 * inverse frequencies an initializer), then paged_attention with the caches as graph inputs.
 * T (rows), S (sequences) and B (block-table width) are bound at run time. Inputs: q, k, v,
 * positions, k_cache, v_cache, slots, tables, qs, ctx; output y. With `dead`, the graph's
 * output is the rotated q instead, and nothing reads the attention. */
#define STEP_IN 10
static struct rtx_graph *step_graph(int64_t H, int64_t Hkv, int64_t D, int64_t NB, int64_t BS,
                                    bool dead) {
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_new("step", &g, &err), 0);
    const int64_t qd[3] = {-1, H, D}, kd[3] = {-1, Hkv, D}, cd[4] = {NB, BS, Hkv, D};
    const int64_t t1[1] = {-1}, tb[2] = {-1, -1};
    struct {
        const char *name;
        enum rtx_dtype dt;
        int nd;
        const int64_t *dims;
    } ins[STEP_IN] = {{"q", RTX_F32, 3, qd},     {"k", RTX_F32, 3, kd},
                      {"v", RTX_F32, 3, kd},     {"pos", RTX_I32, 1, t1},
                      {"kc", RTX_F32, 4, cd},    {"vc", RTX_F32, 4, cd},
                      {"slots", RTX_I32, 1, t1}, {"tables", RTX_I32, 2, tb},
                      {"qs", RTX_I32, 1, t1},    {"ctx", RTX_I32, 1, t1}};
    for (int i = 0; i < STEP_IN; i++)
        ck_assert_int_ge(
            rtx_graph_add_input(g, ins[i].name, ins[i].dt, ins[i].nd, ins[i].dims, &err), 0);
    struct rtx_tensor *inv = inv_freq(D / 2, D, 10000.0);
    ck_assert_int_ge(rtx_graph_add_initializer(g, "inv_freq", inv, &err), 0);
    rtx_tensor_unref(inv);
    const char *rq[] = {"q", "pos", "inv_freq"}, *rk[] = {"k", "pos", "inv_freq"};
    const char *pa[] = {"qr", "kr", "v", "kc", "vc", "slots", "tables", "qs", "ctx"};
    const char *oq[] = {"qr"}, *ok[] = {"kr"}, *oy[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "rope", "rope_q", rq, 3, oq, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "rope", "rope_k", rk, 3, ok, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "paged_attention", "attn", pa, 9, oy, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, dead ? "qr" : "y", &err), 0);
    return g;
}

/* The step inputs of one sequence whose table is `blocks` (BS 4): rows for positions
 * first .. first + n - 1 of a context of first + n keys; q, k, v are rows first .. of
 * qkv[3] (made for the whole sequence). kc and vc are the caller's caches. */
static void step_inputs(struct rtx_tensor **in, struct rtx_tensor *const *qkv, int64_t first,
                        int64_t n, const double *blocks, int64_t B, struct rtx_tensor *kc,
                        struct rtx_tensor *vc) {
    for (int i = 0; i < 3; i++) {
        int64_t dims[3] = {n, qkv[i]->dims[1], qkv[i]->dims[2]}, row = dims[1] * dims[2];
        in[i] = tu_tensor(RTX_F32, 3, dims, NULL);
        memcpy(rtx_tensor_data(in[i]), (float *)rtx_tensor_data(qkv[i]) + first * row,
               (size_t)(n * row) * sizeof(float));
    }
    double pos[16], slots[16], qs[2] = {0, (double)n}, ctx[1] = {(double)(first + n)};
    ck_assert(n <= 16);
    for (int64_t r = 0; r < n; r++) {
        pos[r] = (double)(first + r);
        slots[r] = blocks[(first + r) / 4] * 4 + (double)((first + r) % 4);
    }
    int64_t one = 1, two = 2, td[2] = {1, B};
    in[3] = tu_tensor(RTX_I32, 1, &n, pos);
    in[4] = rtx_tensor_ref(kc);
    in[5] = rtx_tensor_ref(vc);
    in[6] = tu_tensor(RTX_I32, 1, &n, slots);
    in[7] = tu_tensor(RTX_I32, 2, td, blocks);
    in[8] = tu_tensor(RTX_I32, 1, &two, qs);
    in[9] = tu_tensor(RTX_I32, 1, &one, ctx);
}

/* Plans g for in and runs it on the CPU with rtx_plan_execute; returns the output. */
static struct rtx_tensor *run_step(struct rtx_graph *g, struct rtx_backend *cpu,
                                   struct rtx_tensor **in) {
    struct rtx_plan *plan;
    struct rtx_err err = {0};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_exec_stats st;
    ck_assert_msg(
        rtx_plan_new(g, (const struct rtx_tensor *const *)in, STEP_IN, NULL, &plan, &err) == 0,
        "%s", err.msg);
    ck_assert_msg(rtx_plan_execute(plan, cpu, in, STEP_IN, out, 1, NULL, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(st.mode, RTX_EXEC_PLAIN);
    ck_assert_int_eq(st.nodes_run, 3);
    rtx_plan_free(plan);
    return out[0];
}

/* What the plan tests share: a CPU backend, the step graph, random q, k, v of `rows` rows. */
struct step_fx {
    struct rtx_backend *cpu;
    struct rtx_graph *g;
    struct rtx_tensor *qkv[3];
};

static void step_fx_init(struct step_fx *fx, int64_t rows, int64_t H, int64_t Hkv, int64_t D,
                         int64_t NB, int64_t BS, bool dead, unsigned seed) {
    int64_t qd[3] = {rows, H, D}, kd[3] = {rows, Hkv, D};
    struct rtx_err err = {0};
    fx->qkv[0] = tu_tensor_random(RTX_F32, 3, qd, -1, 1, seed);
    fx->qkv[1] = tu_tensor_random(RTX_F32, 3, kd, -1, 1, seed + 1);
    fx->qkv[2] = tu_tensor_random(RTX_F32, 3, kd, -1, 1, seed + 2);
    fx->g = step_graph(H, Hkv, D, NB, BS, dead);
    ck_assert_int_eq(
        rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 2}, &fx->cpu, &err), 0);
}

static void step_fx_close(struct step_fx *fx) {
    unref_all(fx->qkv, 3);
    rtx_backend_free(fx->cpu);
    rtx_graph_free(fx->g);
}

START_TEST(plan_steps_write_the_callers_caches) {
    const int64_t H = 4, Hkv = 2, D = 8, NB = 6, BS = 4, B = 2, L = 7;
    const double blocks[2] = {3, 1};
    int64_t cd[4] = {NB, BS, Hkv, D};
    struct step_fx fx;
    step_fx_init(&fx, L, H, Hkv, D, NB, BS, false, 80);
    /* the engine's way: a prefill of 6, then one decode step, on the caller's caches */
    struct rtx_tensor *kc = tu_tensor_random(RTX_F32, 4, cd, -1, 1, 83);
    struct rtx_tensor *vc = tu_tensor_random(RTX_F32, 4, cd, -1, 1, 84);
    /* the reference: one prefill of all 7 on fresh caches */
    struct rtx_tensor *kc_ref = tu_tensor(RTX_F32, 4, cd, NULL);
    struct rtx_tensor *vc_ref = tu_tensor(RTX_F32, 4, cd, NULL);
    struct rtx_tensor *in[STEP_IN];
    step_inputs(in, fx.qkv, 0, 6, blocks, B, kc, vc);
    struct rtx_tensor *y1 = run_step(fx.g, fx.cpu, in);
    unref_all(in, STEP_IN);
    step_inputs(in, fx.qkv, 6, 1, blocks, B, kc, vc);
    struct rtx_tensor *y2 = run_step(fx.g, fx.cpu, in);
    unref_all(in, STEP_IN);
    step_inputs(in, fx.qkv, 0, L, blocks, B, kc_ref, vc_ref);
    struct rtx_tensor *yr = run_step(fx.g, fx.cpu, in);
    unref_all(in, STEP_IN);
    /* the caller's caches hold the rotated keys and the values of all 7 positions */
    int64_t row = Hkv * D;
    for (int64_t p = 0; p < L; p++) {
        int64_t slot = (int64_t)blocks[p / 4] * 4 + p % 4;
        ck_assert_msg(memcmp((float *)rtx_tensor_data(kc) + slot * row,
                             (float *)rtx_tensor_data(kc_ref) + slot * row,
                             (size_t)row * sizeof(float)) == 0 &&
                          memcmp((float *)rtx_tensor_data(vc) + slot * row,
                                 (float *)rtx_tensor_data(fx.qkv[2]) + p * row,
                                 (size_t)row * sizeof(float)) == 0,
                      "position %lld is not in the caller's caches", (long long)p);
    }
    /* the decode step saw the prefill's keys: its row equals row 6 of the full prefill, and
     * the prefill's rows equal rows 0..5 */
    int64_t hd = H * D;
    double *want = malloc(sizeof *want * (size_t)(L * hd));
    for (int64_t i = 0; i < L * hd; i++)
        want[i] = rtx_tensor_get(yr, i);
    assert_near(y1, want, 2e-5, "prefill step");
    assert_near(y2, want + 6 * hd, 2e-5, "decode step");
    free(want);
    struct rtx_tensor *t[7] = {kc, vc, kc_ref, vc_ref, y1, y2, yr};
    unref_all(t, 7);
    step_fx_close(&fx);
}
END_TEST

START_TEST(plan_keeps_a_writer_nothing_reads) {
    const int64_t Hkv = 1, D = 4, cd[4] = {2, 4, Hkv, D};
    const double blocks[1] = {1};
    struct step_fx fx;
    step_fx_init(&fx, 2, 2, Hkv, D, 2, 4, true, 90);
    struct rtx_tensor *kc = tu_tensor(RTX_F32, 4, cd, NULL), *vc = tu_tensor(RTX_F32, 4, cd, NULL);
    struct rtx_tensor *in[STEP_IN];
    step_inputs(in, fx.qkv, 0, 2, blocks, 1, kc, vc);
    struct rtx_tensor *y = run_step(fx.g, fx.cpu, in); /* three nodes ran: the writer too */
    ck_assert_msg(memcmp((float *)rtx_tensor_data(vc) + 4 * Hkv * D, rtx_tensor_data(fx.qkv[2]),
                         (size_t)(2 * Hkv * D) * sizeof(float)) == 0,
                  "v was not written to block 1");
    rtx_tensor_unref(y);
    unref_all(in, STEP_IN);
    rtx_tensor_unref(kc);
    rtx_tensor_unref(vc);
    step_fx_close(&fx);
}
END_TEST

START_TEST(plan_rejects_a_strided_cache) {
    const int64_t Hkv = 2, D = 4, cd[4] = {2, 4, Hkv, D}, sd[4] = {2, 4, D, Hkv};
    const double blocks[1] = {0};
    struct step_fx fx;
    step_fx_init(&fx, 1, 2, Hkv, D, 2, 4, false, 95);
    struct rtx_tensor *base = tu_tensor(RTX_F32, 4, sd, NULL), *kc;
    struct rtx_tensor *vc = tu_tensor(RTX_F32, 4, cd, NULL);
    struct rtx_err err = {0};
    const int perm[4] = {0, 1, 3, 2};
    ck_assert_int_eq(rtx_tensor_permute(base, perm, &kc, &err), 0);
    struct rtx_tensor *in[STEP_IN], *out[1] = {NULL};
    step_inputs(in, fx.qkv, 0, 1, blocks, 1, kc, vc);
    struct rtx_plan *plan;
    ck_assert_int_eq(
        rtx_plan_new(fx.g, (const struct rtx_tensor *const *)in, STEP_IN, NULL, &plan, &err), 0);
    ck_assert_int_eq(rtx_plan_execute(plan, fx.cpu, in, STEP_IN, out, 1, NULL, NULL, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "input 'kc' is written in place by the graph, so it must be "
                                  "contiguous"),
                  "%s", err.msg);
    rtx_plan_free(plan);
    unref_all(in, STEP_IN);
    struct rtx_tensor *t[3] = {base, kc, vc};
    unref_all(t, 3);
    step_fx_close(&fx);
}
END_TEST

/* A graph whose paged_attention reads caches kc / vc as `how` makes them fails validation
 * with `want`. how: 0 kc an initializer, 1 kc a node's output, 2 kc passed as both caches. */
static void written_input_fails(int how, const char *want) {
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_new("bad", &g, &err), 0);
    const int64_t qd[3] = {2, 2, 4}, cd[4] = {2, 4, 2, 4}, t1[1] = {2}, tb[2] = {1, 1},
                  s1[1] = {1};
    const char *names[] = {"q", "k", "v", "kc0", "vc", "slots", "tables", "qs", "ctx"};
    const int nds[] = {3, 3, 3, 4, 4, 1, 2, 1, 1};
    const int64_t *dims[] = {qd, qd, qd, cd, cd, t1, tb, t1, s1};
    for (int i = 0; i < 9; i++) {
        if (i == 3 && how == 0) {
            struct rtx_tensor *c = tu_tensor(RTX_F32, 4, cd, NULL);
            ck_assert_int_ge(rtx_graph_add_initializer(g, "kc0", c, &err), 0);
            rtx_tensor_unref(c);
            continue;
        }
        ck_assert_int_ge(
            rtx_graph_add_input(g, names[i], i < 5 ? RTX_F32 : RTX_I32, nds[i], dims[i], &err), 0);
    }
    const char *neg_in[] = {"kc0"}, *neg_out[] = {"kc1"}, *out[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "neg", "copy", neg_in, 1, neg_out, 1, &err), 0);
    const char *pa[] = {
        "q",      "k",  "v",  how == 1 ? "kc1" : "kc0", how == 2 ? "kc0" : "vc", "slots",
        "tables", "qs", "ctx"};
    ck_assert_int_ge(rtx_graph_add_node(g, "paged_attention", "attn", pa, 9, out, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(rtx_graph_validate(g, NULL, &err), RTX_EGRAPH);
    ck_assert_msg(strstr(err.msg, "node 1 'attn' (paged_attention)") && strstr(err.msg, want),
                  "message '%s' lacks '%s'", err.msg, want);
    rtx_graph_free(g);
}

START_TEST(validation_wants_caches_the_caller_owns) {
    written_input_fails(0, "input 3 'kc0' is written in place, so it must be a graph input (a "
                           "tensor the caller owns), not an initializer");
    written_input_fails(1, "input 3 'kc1' is written in place, so it must be a graph input (a "
                           "tensor the caller owns), not a node's output");
    written_input_fails(2, "inputs 3 and 4 are both 'kc0'; the op writes each of them");
}
END_TEST

Suite *rtx_cpu_generation_suite(void) {
    Suite *s = suite_create("cpu_generation");
    TCase *tc = tcase_create("rope");
    tcase_add_test(tc, rope_hand_values);
    tcase_add_test(tc, rope_both_pairings_all_dtypes);
    tcase_add_test(tc, rope_large_positions_and_no_rotation);
    tcase_add_test(tc, rope_rejects_bad_inputs);
    suite_add_tcase(s, tc);
    tc = tcase_create("paged_attention");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, paged_prefill_equals_causal_attention);
    tcase_add_test(tc, paged_ragged_batch_matches_reference);
    tcase_add_test(tc, paged_padding_rows_are_zero);
    tcase_add_test(tc, paged_survives_allocation_failures);
    tcase_add_test(tc, paged_rejects_bad_metadata);
    tcase_add_test(tc, paged_rejects_bad_shapes_and_dtypes);
    suite_add_tcase(s, tc);
    tc = tcase_create("plan");
    tcase_add_test(tc, plan_steps_write_the_callers_caches);
    tcase_add_test(tc, plan_keeps_a_writer_nothing_reads);
    tcase_add_test(tc, plan_rejects_a_strided_cache);
    tcase_add_test(tc, validation_wants_caches_the_caller_owns);
    suite_add_tcase(s, tc);
    return s;
}
