/*
 * ops-elementwise.c - CPU reference kernels of the elementwise ops: add, sub, mul, div, pow,
 * the unary math ops, cast, where and the comparisons equal, less and greater (docs/ops.md).
 *
 * DESIGN
 * Every op maps the NumPy broadcast of its inputs onto a contiguous output. Setup computes,
 * for each input, its stride (in elements) along each output dimension, 0 where it broadcasts,
 * then drops the output's size-1 dimensions and merges neighbours that every operand walks as
 * one, so a same-shape op becomes a single flat run and "matrix + row" becomes runs of the
 * row's length. The output's element range is split across the thread pool; each task walks
 * its range with an odometer and hands runs (output offset, per-input offsets and inner
 * strides, length) to the op's row function.
 *
 * Row functions work on f32 in place. f16/bf16 are converted to f32 and the integer types to
 * int64 in blocks of EW_BLOCK elements on the stack, computed there and rounded (floats) or
 * wrapped (integers) once on store. Integer arithmetic goes through uint64 so that overflow
 * wraps instead of being undefined. Inner loops run in groups of 8 through a temporary
 * (VLOOP): GCC's -O2 vectorizer does not version loops for possible aliasing between output
 * and inputs, but it does vectorize a fixed 8-wide loop into a local array.
 *
 * Choices the op page leaves open: integer pow, computed in double, truncates toward zero and
 * saturates at the output type's range like cast (a NaN gives 0); relu keeps a NaN
 * (as PyTorch and NumPy's maximum). gelu's tanh form is evaluated as x * sigmoid(2u), an
 * identity of 0.5 x (1 + tanh u) that does not cancel for negative x.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif
#include "kernels/cpu/cpu-impl.h"

#define EW_MAX_IN 3
#define EW_BLOCK 256           /* elements converted per stack block */
#define EW_GRAIN 32768         /* output elements per task, cheap ops */
#define EW_GRAIN_HEAVY 8192    /* output elements per task, transcendental ops */

struct ew_ctx;

/* Computes output elements [o, o + n) from input k's elements off[k] + i * st[k]. */
typedef void (*ew_row_fn)(const struct ew_ctx *c, int64_t o, const int64_t *off,
                          const int64_t *st, int64_t n);

struct ew_ctx {
    enum rtx_op op;
    int n_in;
    const void *in[EW_MAX_IN];
    enum rtx_dtype in_dt[EW_MAX_IN];
    void *out;
    enum rtx_dtype out_dt;
    bool gelu_tanh;                         /* gelu: approximate = "tanh" */
    int64_t lo, hi;                         /* integer output range (pow, cast) */
    ew_row_fn row;
    int ndim;                               /* merged output rank, >= 1 */
    int64_t dims[RTX_MAX_DIMS];             /* merged output dims */
    int64_t st[EW_MAX_IN][RTX_MAX_DIMS];    /* per input: elements per step of each dim */
};

/* o[i] = FN(a[i * sa], b[i * sb]), specialized for the stride pairs broadcasting produces. */
#define BIN_RUN(T, FN, o, a, sa, b, sb, n)                                                      \
    do {                                                                                        \
        if ((sa) == 1 && (sb) == 1) {                                                           \
            RTX__VLOOP(T, o, n, FN((a)[i], (b)[i]));                                               \
        } else if ((sa) == 0 && (sb) == 1) {                                                    \
            T a0_ = (a)[0];                                                                     \
            RTX__VLOOP(T, o, n, FN(a0_, (b)[i]));                                                  \
        } else if ((sa) == 1 && (sb) == 0) {                                                    \
            T b0_ = (b)[0];                                                                     \
            RTX__VLOOP(T, o, n, FN((a)[i], b0_));                                                  \
        } else {                                                                                \
            RTX__VLOOP(T, o, n, FN((a)[i * (sa)], (b)[i * (sb)]));                                 \
        }                                                                                       \
    } while (0)

/* o[i] = FN(x[i * sx]). */
#define UN_RUN(T, FN, o, x, sx, n)                                                              \
    do {                                                                                        \
        if ((sx) == 1)                                                                          \
            RTX__VLOOP(T, o, n, FN((x)[i]));                                                       \
        else                                                                                    \
            RTX__VLOOP(T, o, n, FN((x)[i * (sx)]));                                                \
    } while (0)

/* ------------------------------------------------------------------------------------------
 * Scalar operations
 * ---------------------------------------------------------------------------------------- */

#define SQRT_2_OVER_PI 0.79788456080286535588f
#define SQRT_1_2 0.70710678118654752440f

static inline float f_add(float x, float y) { return x + y; }
static inline float f_sub(float x, float y) { return x - y; }
static inline float f_mul(float x, float y) { return x * y; }
static inline float f_div(float x, float y) { return x / y; }
static inline float f_pow(float x, float y) { return powf(x, y); }

static inline float f_neg(float x) { return -x; }
static inline float f_abs(float x) { return fabsf(x); }
static inline float f_sqrt(float x) { return sqrtf(x); }
static inline float f_rsqrt(float x) { return 1.0f / sqrtf(x); }
static inline float f_exp(float x) { return expf(x); }
static inline float f_log(float x) { return logf(x); }
static inline float f_tanh(float x) { return tanhf(x); }
/* erf as x * P(x^2) / Q(x^2) over [-4, 4] (erf is +-1 in f32 beyond): a rational fit of
 * degree 13/8 whose error is below 4.2e-7 absolute and relative over the whole line (checked
 * against the double-precision erf at 2e6 points), branch-free and without libm's call per
 * element, which dominated BERT-style models (GELU). */
/* The coefficients once, for this scalar form and gelu_erf8's vectors (Horner: p = p x2 + c;
 * x - c and x + (-c) round alike). */
#define ERF_P0 -2.72614225801306e-10f
#define ERF_P(F)                                                                                  \
    F(2.77068142495902e-08f) F(-2.10102402082508e-06f) F(-5.69250639462346e-05f)                 \
    F(-7.34990630326855e-04f) F(-2.95459980854025e-03f) F(-1.60960333262415e-02f)
#define ERF_Q0 -1.45660718464996e-05f
#define ERF_Q(F)                                                                                  \
    F(-2.13374055278905e-04f) F(-1.68282697438203e-03f) F(-7.37332916720468e-03f)                \
    F(-1.42647390514189e-02f)
static inline float fast_erf(float x) {
    float c = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x;
    float x2 = c * c;
    float p = ERF_P0, q = ERF_Q0;
#define ERF_STEP_P(k) p = p * x2 + (k);
#define ERF_STEP_Q(k) q = q * x2 + (k);
    ERF_P(ERF_STEP_P)
    ERF_Q(ERF_STEP_Q)
    return c * p / q;
}
static inline float f_erf(float x) { return fast_erf(x); }
static inline float f_relu(float x) { return x < 0.0f ? 0.0f : x; }
/* x * Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2; below -1.5 through erfc(-x / sqrt 2),
 * where 1 + erf would cancel (Phi is tiny there), so the result stays exact relative to
 * itself on the whole line. */
static inline float f_gelu_erf(float x) { return 0.5f * x * (1.0f + fast_erf(x * SQRT_1_2)); }
/* 0.5 x erfc(z), z = -x / sqrt 2 >= 1.06, as t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2)
 * (Numerical Recipes' erfcc, relative error 1.2e-7). The amplified part, -z^2 = -x^2 / 2, is
 * formed without rounding x / sqrt 2 first: x = s + (x - s) with s holding x's top 12
 * mantissa bits, so s^2 is exact. Within 7e-7 relative of the double-precision value for
 * x >= -3.5, 5e-6 down to -12 (checked at 1e6 points); 0 below about -13, where erfcf gives
 * denormals. Branch-free, so runs of it vectorize. */
#define TAIL_P0 0.17087277f
#define TAIL_P(F)                                                                                 \
    F(-0.82215223f) F(1.48851587f) F(-1.13520398f) F(0.27886807f) F(-0.18628806f)              \
    F(0.09678418f) F(0.37409196f) F(1.00002368f) F(-1.26551223f)
static inline float f_gelu_tail(float x) {
    float z = -x * SQRT_1_2;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = TAIL_P0;
#define TAIL_STEP(k) p = p * t + (k);
    TAIL_P(TAIL_STEP)
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    xb &= 0xfffff000u;
    float s;
    memcpy(&s, &xb, sizeof s);
    float arg = -0.5f * (s * s) + (0.5f * ((s - x) * (s + x)) + p);
    return 0.5f * x * t * rtx__exp_nonpos(arg < 0.0f ? arg : 0.0f);
}

/* GELU over a run, in blocks through a stack copy (so o may be x): every element through the
 * branch-free erf form (vectorizable), then the ones below -1.5 (a minority in a model's
 * activations) through the tail: gathered by a branch-free index pass (tail_indices: eight
 * lanes at a time in the AVX2 build), computed as one vector loop, scattered back (a branch
 * per element choosing the tail mispredicted and left the tail scalar: 0.49 -> 0.41 ms for
 * 512 x 512 normal values on one core). */
#ifdef __AVX2__
/* tail_lanes[m]: the positions of m's set bits (m a mask of 8 lanes), one per byte from the
 * lowest: what a left-pack of 8 indices needs (the AVX2 build has no compress instruction). */
static uint64_t tail_lanes[256];
__attribute__((constructor)) static void tail_lanes_init(void) {
    for (int m = 0; m < 256; m++) {
        uint64_t v = 0;
        for (int i = 0, k = 0; i < 8; i++)
            if (m >> i & 1) v |= (uint64_t)i << (8 * k++);
        tail_lanes[m] = v;
    }
}

/* idx[0..) = the i < m with t[i] < -1.5 in order; their count. Eight at a time: a compare's
 * mask picks the packed positions, widened and offset, stored whole (idx has 8 entries of
 * slack), and the count advances by the mask's bits: no loop-carried store per element. */
static int tail_indices(const float *t, int m, int *idx) {
    int nt = 0, i = 0;
    const __m256 lim = _mm256_set1_ps(-1.5f);
    for (; i + 8 <= m; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(t + i), lim, _CMP_LT_OQ));
        __m256i pos = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)tail_lanes[mask]));
        _mm256_storeu_si256((__m256i *)(idx + nt), _mm256_add_epi32(pos, _mm256_set1_epi32(i)));
        nt += __builtin_popcount((unsigned)mask);
    }
    for (; i < m; i++) {
        idx[nt] = i;
        nt += t[i] < -1.5f;
    }
    return nt;
}
#else
static int tail_indices(const float *t, int m, int *idx) {
    int nt = 0;
    for (int i = 0; i < m; i++) { /* the tail's elements, without a branch */
        idx[nt] = i;
        nt += t[i] < -1.5f;
    }
    return nt;
}
#endif

static void gelu_run(float *o, const float *x, int64_t sx, int64_t n) {
    float t[EW_BLOCK];
    for (int64_t b = 0; b < n; b += EW_BLOCK) {
        int64_t m = n - b < EW_BLOCK ? n - b : EW_BLOCK;
        for (int64_t i = 0; i < m; i++) t[i] = x[(b + i) * sx];
        float *ob = o + b;
        RTX__VLOOP(float, ob, m, f_gelu_erf(t[i]));
        int idx[EW_BLOCK + 8];
        int nt = tail_indices(t, (int)m, idx);
        float g[EW_BLOCK], r[EW_BLOCK];
        for (int k = 0; k < nt; k++) g[k] = t[idx[k]];
        RTX__VLOOP(float, r, nt, f_gelu_tail(g[i]));
        for (int k = 0; k < nt; k++) ob[idx[k]] = r[k];
    }
}
/* 0.5 x (1 + tanh u) = x / (1 + exp(-2u)), through exp(-|2u|) so the branch-free exp of the
 * softmaxes serves (vectorizable): x / (1 + e) for u >= 0, x e / (1 + e) below. */
static inline float f_gelu_tanh(float x) {
    float t = -2.0f * SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    float e = rtx__exp_nonpos(t <= 0.0f ? t : -t);
    return (t <= 0.0f ? x : x * e) / (1.0f + e);
}
#ifdef __AVX2__
/* exp(x) for x <= 0 (0 below -87) of U vectors in place, eight lanes each: rtx__exp_nonpos
 * (cpu-impl.h) operation for operation, so that the two builds agree bit for bit
 * (test-cpu-isa.c): the same clamp on the bits (signed compares, valid for the sign-set inputs
 * it serves and for positive ones, which it keeps), the same products and sums in the same
 * order, no FMA. Each step is taken for all U vectors before the next: the polynomial is a
 * chain of ~100 cycles of latency, and one vector at a time kept the out-of-order window too
 * short to overlap more than a few (the tanh GELU ran at a third of its arithmetic rate). */
#define EXP_U(stmt)                                                                             \
    _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) { stmt; }
static inline __attribute__((always_inline)) void exp_nonpos8_u(__m256 *x, int U) {
    const __m256i lim = _mm256_set1_epi32((int)0xc2ae0000u);
    const __m256 big = _mm256_set1_ps(12582912.0f);
    __m256i drop[4];
    __m256 t[4], r[4], p[4];
    EXP_U(__m256i xb = _mm256_castps_si256(x[u]);
          drop[u] = _mm256_and_si256(_mm256_cmpgt_epi32(xb, lim), _mm256_srai_epi32(xb, 31));
          x[u] = _mm256_castsi256_ps(_mm256_blendv_epi8(xb, lim, drop[u])))
    EXP_U(t[u] = _mm256_add_ps(_mm256_mul_ps(x[u], _mm256_set1_ps(1.44269504f)), big))
    EXP_U(__m256 n = _mm256_sub_ps(t[u], big);
          r[u] = _mm256_sub_ps(_mm256_sub_ps(x[u], _mm256_mul_ps(n, _mm256_set1_ps(0.693145752f))),
                               _mm256_mul_ps(n, _mm256_set1_ps(1.42860677e-06f))))
    EXP_U(p[u] = _mm256_set1_ps(1.0f / 5040.0f))
#define EXP_STEP8(c) EXP_U(p[u] = _mm256_add_ps(_mm256_mul_ps(p[u], r[u]), _mm256_set1_ps(c)))
    EXP_STEP8(1.0f / 720.0f)
    EXP_STEP8(1.0f / 120.0f)
    EXP_STEP8(1.0f / 24.0f)
    EXP_STEP8(1.0f / 6.0f)
    EXP_STEP8(0.5f)
    EXP_STEP8(1.0f)
    EXP_STEP8(1.0f)
#undef EXP_STEP8
    EXP_U(__m256i e = _mm256_slli_epi32(
              _mm256_add_epi32(_mm256_sub_epi32(_mm256_castps_si256(t[u]),
                                                _mm256_set1_epi32(0x4b400000)),
                               _mm256_set1_epi32(127)),
              23);
          __m256 y = _mm256_mul_ps(p[u], _mm256_castsi256_ps(e));
          x[u] = _mm256_castsi256_ps(_mm256_andnot_si256(drop[u], _mm256_castps_si256(y))))
}

static inline __m256 exp_nonpos8(__m256 x) {
    exp_nonpos8_u(&x, 1);
    return x;
}

/* f_gelu_tanh of U vectors at x, stored at o (o may be x), its steps as exp_nonpos8_u's. */
static inline __attribute__((always_inline)) void gelu_tanh8_u(float *o, const float *x,
                                                               int U) {
    const __m256 k3 = _mm256_set1_ps(0.044715f), k = _mm256_set1_ps(-2.0f * SQRT_2_OVER_PI);
    __m256 v[4], neg[4], e[4];
    EXP_U(v[u] = _mm256_loadu_ps(x + 8 * u);
          __m256 c3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k3, v[u]), v[u]), v[u]);
          __m256 t = _mm256_mul_ps(k, _mm256_add_ps(v[u], c3)); /* as f_gelu_tanh */
          neg[u] = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LE_OQ);
          e[u] = _mm256_blendv_ps(_mm256_xor_ps(t, _mm256_set1_ps(-0.0f)), t, neg[u])) /* -|t| */
    exp_nonpos8_u(e, U);
    EXP_U(__m256 num = _mm256_blendv_ps(_mm256_mul_ps(v[u], e[u]), v[u], neg[u]);
          _mm256_storeu_ps(o + 8 * u,
                           _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e[u]))))
}

/* f_gelu_tanh over a contiguous run, four vectors at a time (o may be x). */
static void gelu_tanh_run8(float *o, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) gelu_tanh8_u(o + i, x + i, 4);
    for (; i + 8 <= n; i += 8) gelu_tanh8_u(o + i, x + i, 1);
    for (; i < n; i++) o[i] = f_gelu_tanh(x[i]);
}

/* gelu_run's values over a contiguous run, eight lanes at a time (o may be x): f_gelu_erf for
 * every element, then f_gelu_tail for those below -1.5, gathered into whole vectors (blending
 * the tail into each vector with a lane below -1.5 computed it for most vectors). Operation for
 * operation as the scalar forms (no FMA, the same clamps, selects and coefficients), so the two
 * builds agree bit for bit. The GEMM epilogues call it on 64-column rows, where gelu_run's block
 * copy and its scalar tail cost more than the arithmetic. */
static inline __m256 mul8(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
static inline __m256 add8(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
static inline __m256 sub8(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
static inline __m256 k8(float c) { return _mm256_set1_ps(c); }

/* f_gelu_erf of U vectors at x, stored at o (o may be x), a step for all U at a time (as
 * exp_nonpos8_u). */
static inline __attribute__((always_inline)) void gelu_erf8_u(float *o, const float *x, int U) {
    __m256 v[4], c[4], x2[4], p[4], q[4];
    EXP_U(v[u] = _mm256_loadu_ps(x + 8 * u); __m256 a = mul8(v[u], k8(SQRT_1_2));
          c[u] = _mm256_blendv_ps(a, k8(-4.0f), _mm256_cmp_ps(a, k8(-4.0f), _CMP_LT_OQ));
          c[u] = _mm256_blendv_ps(c[u], k8(4.0f), _mm256_cmp_ps(a, k8(4.0f), _CMP_GT_OQ));
          x2[u] = mul8(c[u], c[u]); p[u] = k8(ERF_P0); q[u] = k8(ERF_Q0))
#define ERF_STEP_P8(k) EXP_U(p[u] = add8(mul8(p[u], x2[u]), k8(k)))
#define ERF_STEP_Q8(k) EXP_U(q[u] = add8(mul8(q[u], x2[u]), k8(k)))
    ERF_P(ERF_STEP_P8)
    ERF_Q(ERF_STEP_Q8)
    EXP_U(__m256 erf = _mm256_div_ps(mul8(c[u], p[u]), q[u]);
          _mm256_storeu_ps(o + 8 * u, mul8(mul8(k8(0.5f), v[u]), add8(k8(1.0f), erf))))
}
#undef EXP_U

static inline __m256 gelu_tail8(__m256 x) {
    __m256 z = mul8(_mm256_xor_ps(x, k8(-0.0f)), k8(SQRT_1_2));
    __m256 t = _mm256_div_ps(k8(1.0f), add8(k8(1.0f), mul8(k8(0.5f), z)));
    __m256 p = k8(TAIL_P0);
#define TAIL_STEP8(k) p = add8(mul8(p, t), k8(k));
    TAIL_P(TAIL_STEP8)
    __m256 s = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32((int)0xfffff000u)));
    __m256 arg = add8(mul8(k8(-0.5f), mul8(s, s)),
                      add8(mul8(k8(0.5f), mul8(sub8(s, x), add8(s, x))), p));
    arg = _mm256_blendv_ps(_mm256_setzero_ps(), arg,
                           _mm256_cmp_ps(arg, _mm256_setzero_ps(), _CMP_LT_OQ));
    return mul8(mul8(mul8(k8(0.5f), x), t), exp_nonpos8(arg));
}

static void gelu_erf_run8(float *o, const float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += EW_BLOCK) {
        int m = (int)(n - b < EW_BLOCK ? n - b : EW_BLOCK);
        const float *xb = x + b;
        float *ob = o + b;
        int idx[EW_BLOCK + 8];
        float g[EW_BLOCK + 8];
        int nt = tail_indices(xb, m, idx); /* before o (which may be x) is written */
        for (int k = 0; k < nt; k++) g[k] = xb[idx[k]];
        int i = 0;
        for (; i + 32 <= m; i += 32) gelu_erf8_u(ob + i, xb + i, 4);
        for (; i + 8 <= m; i += 8) gelu_erf8_u(ob + i, xb + i, 1);
        for (; i < m; i++) ob[i] = f_gelu_erf(xb[i]);
        /* the last vector padded (a 64-column row of an epilogue has a handful of tails) */
        for (int k = nt; k < (nt + 7) / 8 * 8; k++) g[k] = -2.0f;
        for (int k = 0; k < nt; k += 8) _mm256_storeu_ps(g + k, gelu_tail8(_mm256_loadu_ps(g + k)));
        for (int k = 0; k < nt; k++) ob[idx[k]] = g[k];
    }
}
#endif
static inline float f_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float f_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline int64_t i_add(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
static inline int64_t i_sub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
static inline int64_t i_mul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }
static inline int64_t i_neg(int64_t x) { return (int64_t)(0u - (uint64_t)x); }
/* Truncating division; x / 0 is 0 and INT64_MIN / -1 wraps to INT64_MIN. */
static inline int64_t i_div(int64_t x, int64_t y) {
    if (y == 0) return 0;
    if (y == -1) return i_neg(x);
    return x / y;
}
static inline int64_t i_abs(int64_t x) { return x < 0 ? i_neg(x) : x; }
static inline int64_t i_relu(int64_t x) { return x < 0 ? 0 : x; }

/* Truncates toward zero and clamps to [lo, hi]; NaN gives 0. */
static inline int64_t sat_i64(double v, int64_t lo, int64_t hi) {
    if (v != v) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: anything below it fits */
    return (int64_t)v;
}

static void int_range(enum rtx_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case RTX_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case RTX_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case RTX_U8: *lo = 0; *hi = UINT8_MAX; break;
    case RTX_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* ------------------------------------------------------------------------------------------
 * Typed runs
 * ---------------------------------------------------------------------------------------- */

static void bin_f32(enum rtx_op op, float *o, const float *a, int64_t sa, const float *b,
                    int64_t sb, int64_t n) {
    switch (op) {
    case RTX_OP_ADD: BIN_RUN(float, f_add, o, a, sa, b, sb, n); break;
    case RTX_OP_SUB: BIN_RUN(float, f_sub, o, a, sa, b, sb, n); break;
    case RTX_OP_MUL: BIN_RUN(float, f_mul, o, a, sa, b, sb, n); break;
    case RTX_OP_DIV: BIN_RUN(float, f_div, o, a, sa, b, sb, n); break;
    case RTX_OP_POW: BIN_RUN(float, f_pow, o, a, sa, b, sb, n); break;
    default: break;
    }
}

static void bin_i64(enum rtx_op op, int64_t *o, const int64_t *a, int64_t sa, const int64_t *b,
                    int64_t sb, int64_t n, int64_t lo, int64_t hi) {
    switch (op) {
    case RTX_OP_ADD: BIN_RUN(int64_t, i_add, o, a, sa, b, sb, n); break;
    case RTX_OP_SUB: BIN_RUN(int64_t, i_sub, o, a, sa, b, sb, n); break;
    case RTX_OP_MUL: BIN_RUN(int64_t, i_mul, o, a, sa, b, sb, n); break;
    case RTX_OP_DIV: BIN_RUN(int64_t, i_div, o, a, sa, b, sb, n); break;
    case RTX_OP_POW:
        for (int64_t i = 0; i < n; i++)
            o[i] = sat_i64(pow((double)a[i * sa], (double)b[i * sb]), lo, hi);
        break;
    default: break;
    }
}

static void un_f32(enum rtx_op op, bool gelu_tanh, float *o, const float *x, int64_t sx,
                   int64_t n) {
    switch (op) {
    case RTX_OP_NEG: UN_RUN(float, f_neg, o, x, sx, n); break;
    case RTX_OP_ABS: UN_RUN(float, f_abs, o, x, sx, n); break;
    case RTX_OP_SQRT: UN_RUN(float, f_sqrt, o, x, sx, n); break;
    case RTX_OP_RSQRT: UN_RUN(float, f_rsqrt, o, x, sx, n); break;
    case RTX_OP_EXP: UN_RUN(float, f_exp, o, x, sx, n); break;
    case RTX_OP_LOG: UN_RUN(float, f_log, o, x, sx, n); break;
    case RTX_OP_TANH: UN_RUN(float, f_tanh, o, x, sx, n); break;
    case RTX_OP_ERF: UN_RUN(float, f_erf, o, x, sx, n); break;
    case RTX_OP_RELU: UN_RUN(float, f_relu, o, x, sx, n); break;
    case RTX_OP_SILU: UN_RUN(float, f_silu, o, x, sx, n); break;
    case RTX_OP_SIGMOID: UN_RUN(float, f_sigmoid, o, x, sx, n); break;
    case RTX_OP_GELU:
        if (gelu_tanh) {
#ifdef __AVX2__
            if (sx == 1) {
                gelu_tanh_run8(o, x, n);
                break;
            }
#endif
            UN_RUN(float, f_gelu_tanh, o, x, sx, n);
        } else {
#ifdef __AVX2__
            if (sx == 1) {
                gelu_erf_run8(o, x, n);
                break;
            }
#endif
            gelu_run(o, x, sx, n);
        }
        break;
    default: break;
    }
}

static void un_i64(enum rtx_op op, int64_t *o, const int64_t *x, int64_t sx, int64_t n) {
    switch (op) {
    case RTX_OP_NEG: UN_RUN(int64_t, i_neg, o, x, sx, n); break;
    case RTX_OP_ABS: UN_RUN(int64_t, i_abs, o, x, sx, n); break;
    case RTX_OP_RELU: UN_RUN(int64_t, i_relu, o, x, sx, n); break;
    default: break;
    }
}

/* ------------------------------------------------------------------------------------------
 * Block conversion. A loader returns a pointer to the run's values as f32 (or int64) and
 * updates *st to the stride to read them with: the tensor itself when it already holds that
 * type, else buf (stride 1, or 0 for a broadcast run, of which only one element is read).
 * ---------------------------------------------------------------------------------------- */

static const float *load_f32(const void *base, enum rtx_dtype dt, int64_t off, int64_t *st,
                             int64_t n, float *buf) {
    if (dt == RTX_F32) return (const float *)base + off;
    int64_t s = *st, m = s == 0 ? 1 : n;
    if (dt == RTX_F16) {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = rtx_f16_to_f32(p[i * s]);
    } else if (dt == RTX_BF16) {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = rtx_bf16_to_f32(p[i * s]);
    } else {
        for (int64_t i = 0; i < m; i++) buf[i] = rtx__load_f32(base, dt, off + i * s);
    }
    *st = s == 0 ? 0 : 1;
    return buf;
}

static const int64_t *load_i64(const void *base, enum rtx_dtype dt, int64_t off, int64_t *st,
                               int64_t n, int64_t *buf) {
    if (dt == RTX_I64) return (const int64_t *)base + off;
    int64_t s = *st, m = s == 0 ? 1 : n;
    switch (dt) {
    case RTX_I8: {
        const int8_t *p = (const int8_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = p[i * s];
        break;
    }
    case RTX_I32: {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = p[i * s];
        break;
    }
    case RTX_U8: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = p[i * s];
        break;
    }
    case RTX_BOOL: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < m; i++) buf[i] = p[i * s] != 0;
        break;
    }
    default:
        for (int64_t i = 0; i < m; i++) buf[i] = 0;
        break;
    }
    *st = s == 0 ? 0 : 1;
    return buf;
}

/* Stores n f32 values at element off of a float tensor, rounding once. */
static void store_f32(void *base, enum rtx_dtype dt, int64_t off, const float *src, int64_t n) {
    if (dt == RTX_F32) {
        float *p = (float *)base + off;
        if (p != src) memcpy(p, src, (size_t)n * sizeof *p);
    } else if (dt == RTX_F16) {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = rtx_f32_to_f16(src[i]);
    } else if (dt == RTX_BF16) {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = rtx_f32_to_bf16(src[i]);
    }
}

/* Stores n int64 values at element off of an integer tensor, wrapping to its width; bool
 * stores v != 0. The narrowing conversions are modular in GCC and Clang. */
static void store_i64(void *base, enum rtx_dtype dt, int64_t off, const int64_t *src,
                      int64_t n) {
    switch (dt) {
    case RTX_I8: {
        int8_t *p = (int8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = (int8_t)src[i];
        break;
    }
    case RTX_I32: {
        int32_t *p = (int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = (int32_t)src[i];
        break;
    }
    case RTX_I64: {
        int64_t *p = (int64_t *)base + off;
        if (p != src) memcpy(p, src, (size_t)n * sizeof *p);
        break;
    }
    case RTX_U8: {
        uint8_t *p = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)src[i];
        break;
    }
    case RTX_BOOL: {
        uint8_t *p = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = src[i] != 0;
        break;
    }
    default: break;
    }
}

/* ------------------------------------------------------------------------------------------
 * Row functions
 * ---------------------------------------------------------------------------------------- */

static void row_binary(const struct ew_ctx *c, int64_t o, const int64_t *off,
                       const int64_t *st, int64_t n) {
    enum rtx_dtype dt = c->out_dt;
    if (dt == RTX_F32) {
        bin_f32(c->op, (float *)c->out + o, (const float *)c->in[0] + off[0], st[0],
                (const float *)c->in[1] + off[1], st[1], n);
        return;
    }
    if (dt == RTX_I64) {
        bin_i64(c->op, (int64_t *)c->out + o, (const int64_t *)c->in[0] + off[0], st[0],
                (const int64_t *)c->in[1] + off[1], st[1], n, c->lo, c->hi);
        return;
    }
    for (int64_t k = 0; k < n; k += EW_BLOCK) {
        int64_t m = n - k < EW_BLOCK ? n - k : EW_BLOCK;
        int64_t sa = st[0], sb = st[1];
        if (rtx_dtype_is_float(dt)) {
            float ba[EW_BLOCK], bb[EW_BLOCK], bo[EW_BLOCK];
            const float *pa = load_f32(c->in[0], dt, off[0] + k * sa, &sa, m, ba);
            const float *pb = load_f32(c->in[1], dt, off[1] + k * sb, &sb, m, bb);
            bin_f32(c->op, bo, pa, sa, pb, sb, m);
            store_f32(c->out, dt, o + k, bo, m);
        } else {
            int64_t ba[EW_BLOCK], bb[EW_BLOCK], bo[EW_BLOCK];
            const int64_t *pa = load_i64(c->in[0], dt, off[0] + k * sa, &sa, m, ba);
            const int64_t *pb = load_i64(c->in[1], dt, off[1] + k * sb, &sb, m, bb);
            bin_i64(c->op, bo, pa, sa, pb, sb, m, c->lo, c->hi);
            store_i64(c->out, dt, o + k, bo, m);
        }
    }
}

static void row_unary(const struct ew_ctx *c, int64_t o, const int64_t *off, const int64_t *st,
                      int64_t n) {
    enum rtx_dtype dt = c->out_dt;
    if (dt == RTX_F32) {
        un_f32(c->op, c->gelu_tanh, (float *)c->out + o, (const float *)c->in[0] + off[0],
               st[0], n);
        return;
    }
    if (dt == RTX_I64) {
        un_i64(c->op, (int64_t *)c->out + o, (const int64_t *)c->in[0] + off[0], st[0], n);
        return;
    }
    for (int64_t k = 0; k < n; k += EW_BLOCK) {
        int64_t m = n - k < EW_BLOCK ? n - k : EW_BLOCK;
        int64_t sx = st[0];
        if (rtx_dtype_is_float(dt)) {
            float bx[EW_BLOCK], bo[EW_BLOCK];
            const float *px = load_f32(c->in[0], dt, off[0] + k * sx, &sx, m, bx);
            un_f32(c->op, c->gelu_tanh, bo, px, sx, m);
            store_f32(c->out, dt, o + k, bo, m);
        } else {
            int64_t bx[EW_BLOCK], bo[EW_BLOCK];
            const int64_t *px = load_i64(c->in[0], dt, off[0] + k * sx, &sx, m, bx);
            un_i64(c->op, bo, px, sx, m);
            store_i64(c->out, dt, o + k, bo, m);
        }
    }
}

static void row_cast(const struct ew_ctx *c, int64_t o, const int64_t *off, const int64_t *st,
                     int64_t n) {
    enum rtx_dtype sd = c->in_dt[0], dd = c->out_dt;
    if (sd == dd && st[0] == 1) {
        size_t es = rtx_dtype_size(sd);
        memcpy((char *)c->out + o * (int64_t)es, (const char *)c->in[0] + off[0] * (int64_t)es,
               (size_t)n * es);
        return;
    }
    bool from_float = rtx_dtype_is_float(sd), to_float = rtx_dtype_is_float(dd);
    for (int64_t k = 0; k < n; k += EW_BLOCK) {
        int64_t m = n - k < EW_BLOCK ? n - k : EW_BLOCK;
        int64_t s = st[0];
        float fb[EW_BLOCK], fo[EW_BLOCK];
        int64_t ib[EW_BLOCK], io[EW_BLOCK];
        if (from_float) {
            const float *p = load_f32(c->in[0], sd, off[0] + k * s, &s, m, fb);
            if (to_float) {
                for (int64_t i = 0; i < m; i++) fo[i] = p[i * s];
            } else if (dd == RTX_BOOL) {
                for (int64_t i = 0; i < m; i++) io[i] = p[i * s] != 0.0f;
            } else {
                for (int64_t i = 0; i < m; i++) io[i] = sat_i64(p[i * s], c->lo, c->hi);
            }
        } else {
            const int64_t *p = load_i64(c->in[0], sd, off[0] + k * s, &s, m, ib);
            if (to_float) {
                for (int64_t i = 0; i < m; i++) fo[i] = (float)p[i * s];
            } else {
                for (int64_t i = 0; i < m; i++) io[i] = p[i * s];
            }
        }
        if (to_float)
            store_f32(c->out, dd, o + k, fo, m);
        else
            store_i64(c->out, dd, o + k, io, m);
    }
}

#define CMP_RUN(T, o, a, sa, b, sb, n, op)                                                      \
    do {                                                                                        \
        if ((op) == RTX_OP_EQUAL)                                                               \
            RTX__VLOOP(uint8_t, o, n, (uint8_t)((a)[i * (sa)] == (b)[i * (sb)]));                  \
        else if ((op) == RTX_OP_LESS)                                                           \
            RTX__VLOOP(uint8_t, o, n, (uint8_t)((a)[i * (sa)] < (b)[i * (sb)]));                   \
        else                                                                                    \
            RTX__VLOOP(uint8_t, o, n, (uint8_t)((a)[i * (sa)] > (b)[i * (sb)]));                   \
    } while (0)

static void row_compare(const struct ew_ctx *c, int64_t o, const int64_t *off,
                        const int64_t *st, int64_t n) {
    enum rtx_dtype dt = c->in_dt[0];
    uint8_t *y = (uint8_t *)c->out + o;
    for (int64_t k = 0; k < n; k += EW_BLOCK) {
        int64_t m = n - k < EW_BLOCK ? n - k : EW_BLOCK;
        int64_t sa = st[0], sb = st[1];
        if (rtx_dtype_is_float(dt)) {
            float ba[EW_BLOCK], bb[EW_BLOCK];
            const float *pa = load_f32(c->in[0], dt, off[0] + k * sa, &sa, m, ba);
            const float *pb = load_f32(c->in[1], dt, off[1] + k * sb, &sb, m, bb);
            CMP_RUN(float, y + k, pa, sa, pb, sb, m, c->op);
        } else {
            int64_t ba[EW_BLOCK], bb[EW_BLOCK];
            const int64_t *pa = load_i64(c->in[0], dt, off[0] + k * sa, &sa, m, ba);
            const int64_t *pb = load_i64(c->in[1], dt, off[1] + k * sb, &sb, m, bb);
            CMP_RUN(int64_t, y + k, pa, sa, pb, sb, m, c->op);
        }
    }
}

#define WHERE_RUN(T)                                                                            \
    do {                                                                                        \
        const T *x_ = (const T *)c->in[1] + off[1];                                             \
        const T *y_ = (const T *)c->in[2] + off[2];                                             \
        T *o_ = (T *)c->out + o;                                                                \
        RTX__VLOOP(T, o_, n, cond[i * st[0]] ? x_[i * st[1]] : y_[i * st[2]]);                     \
    } while (0)

static void row_where(const struct ew_ctx *c, int64_t o, const int64_t *off, const int64_t *st,
                      int64_t n) {
    const uint8_t *cond = (const uint8_t *)c->in[0] + off[0];
    switch (rtx_dtype_size(c->out_dt)) {
    case 1: WHERE_RUN(uint8_t); break;
    case 2: WHERE_RUN(uint16_t); break;
    case 4: WHERE_RUN(uint32_t); break;
    default: WHERE_RUN(uint64_t); break;
    }
}

/* ------------------------------------------------------------------------------------------
 * Broadcast walk
 * ---------------------------------------------------------------------------------------- */

/* Sets st[d], input t's stride in elements along output dimension d (0 where it broadcasts).
 * Returns false when t's shape does not broadcast to y's. */
static bool bcast_strides(const struct rtx_tensor *t, const struct rtx_tensor *y, int64_t *st) {
    int lead = y->ndim - t->ndim;
    int64_t s = 1;
    if (lead < 0) return false;
    for (int d = y->ndim - 1; d >= 0; d--) {
        int64_t td = d < lead ? 1 : t->dims[d - lead];
        if (td == y->dims[d])
            st[d] = s;
        else if (td == 1)
            st[d] = 0;
        else
            return false;
        s *= td;
    }
    return true;
}

/* Fills c->ndim, c->dims and c->st from the output shape and the inputs' shapes. */
static int ew_setup(struct ew_ctx *c, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *y = a->out[0];
    int nd = y->ndim;
    int64_t st[EW_MAX_IN][RTX_MAX_DIMS];
    for (int k = 0; k < c->n_in; k++) {
        const struct rtx_tensor *t = a->in[k];
        if (!bcast_strides(t, y, st[k])) {
            char sb[96], sy[96];
            return rtx__backend_node_err(err, a, RTX_EINTERNAL,
                                         "input %d shape %s does not broadcast to the output "
                                         "shape %s", k,
                                         rtx_shape_str(t->dtype, t->ndim, t->dims, sb, sizeof sb),
                                         rtx_shape_str(y->dtype, y->ndim, y->dims, sy, sizeof sy));
        }
    }
    c->ndim = 0;
    for (int d = 0; d < nd; d++) {
        if (y->dims[d] == 1) continue;
        int p = c->ndim - 1;
        bool merge = p >= 0;
        for (int k = 0; k < c->n_in && merge; k++)
            merge = c->st[k][p] == st[k][d] * y->dims[d];
        if (merge) {
            c->dims[p] *= y->dims[d];
            for (int k = 0; k < c->n_in; k++) c->st[k][p] = st[k][d];
            continue;
        }
        c->dims[c->ndim] = y->dims[d];
        for (int k = 0; k < c->n_in; k++) c->st[k][c->ndim] = st[k][d];
        c->ndim++;
    }
    if (c->ndim == 0) {
        c->ndim = 1;
        c->dims[0] = 1;
        for (int k = 0; k < c->n_in; k++) c->st[k][0] = 0;
    }
    return 0;
}

/* Task body: output elements [begin, end) as runs along the merged last dimension. */
static void ew_task(void *ctx, int64_t begin, int64_t end) {
    const struct ew_ctx *c = ctx;
    int last = c->ndim - 1;
    int64_t coord[RTX_MAX_DIMS], off[EW_MAX_IN] = {0}, inner[EW_MAX_IN] = {0};
    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        coord[d] = rem % c->dims[d];
        rem /= c->dims[d];
    }
    for (int k = 0; k < c->n_in; k++) {
        for (int d = 0; d <= last; d++) off[k] += coord[d] * c->st[k][d];
        inner[k] = c->st[k][last];
    }
    int64_t pos = begin;
    while (pos < end) {
        int64_t n = c->dims[last] - coord[last];
        if (n > end - pos) n = end - pos;
        c->row(c, pos, off, inner, n);
        pos += n;
        coord[last] += n;
        for (int k = 0; k < c->n_in; k++) off[k] += n * inner[k];
        for (int d = last; d > 0 && coord[d] == c->dims[d]; d--) {
            coord[d] = 0;
            coord[d - 1]++;
            for (int k = 0; k < c->n_in; k++)
                off[k] += c->st[k][d - 1] - c->dims[d] * c->st[k][d];
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Entry point
 * ---------------------------------------------------------------------------------------- */

static bool is_int_arith(enum rtx_dtype dt) {
    return dt == RTX_I8 || dt == RTX_I32 || dt == RTX_I64 || dt == RTX_U8;
}

#define EPI_TILE 4096 /* floats: the packed GEMM's panel columns, up to 96 x 16 and 128 x 32 */
void rtx__cpu_epilogue_apply(const struct rtx__cpu_epilogue *e, float *c, int64_t ldc,
                             int64_t row0, int64_t col0, int64_t m, int64_t n) {
    if (!e->bias && !e->res && e->act != RTX_OP_RELU && e->act != RTX_OP_COUNT && m > 1 &&
        n <= 32 && m * n <= EPI_TILE) {
        /* an activation alone on a GEMM's panel column (rows of 16 or 32; a single row, as
         * the convs' epilogues pass, is contiguous already): its rows through
         * one contiguous run, so that the vector forms take several vectors at a time and a
         * call's fixed costs spread over a few thousand elements */
        static _Thread_local float t[EPI_TILE];
        for (int64_t r = 0; r < m; r++) /* rows of 64 or 128 bytes: no memcpy call each */
            for (int64_t j = 0; j < n; j++) t[r * n + j] = c[r * ldc + j];
        un_f32(e->act, e->gelu_tanh, t, t, 1, m * n);
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < n; j++) c[r * ldc + j] = t[r * n + j];
        return;
    }
    for (int64_t r = 0; r < m; r++) {
        float *y = c + r * ldc;
        if (e->bias) {
            const float *b = e->bias + col0;
            RTX__VLOOP(float, y, n, f_add(y[i], b[i]));
        }
        if (e->res) {
            const float *q = e->res + (row0 + r) * e->res_ld + col0;
            RTX__VLOOP(float, y, n, f_add(y[i], q[i]));
        }
        if (e->act != RTX_OP_COUNT) un_f32(e->act, e->gelu_tanh, y, y, 1, n);
    }
}

struct epi_job {
    const struct rtx__cpu_epilogue *e;
    float *y;
    int64_t cols;
};

static void epi_rows(void *ctx, int64_t begin, int64_t end) {
    const struct epi_job *j = ctx;
    rtx__cpu_epilogue_apply(j->e, j->y + begin * j->cols, j->cols, begin, 0, end - begin, j->cols);
}

void rtx__cpu_epilogue_run(struct rtx_cpu *cpu, const struct rtx__cpu_epilogue *e, float *y,
                           int64_t rows, int64_t cols) {
    struct epi_job j = {.e = e, .y = y, .cols = cols};
    if (rows * cols > 0)
        rtx__cpu_parallel_for(cpu, rows, EW_GRAIN_HEAVY / (cols > 0 ? cols : 1) + 1, epi_rows, &j);
}

int rtx__cpu_elementwise(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                         struct rtx_err *err) {
    struct ew_ctx c;
    memset(&c, 0, sizeof c);
    c.op = a->node->op;
    if (a->n_out < 1 || !a->out[0])
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing output tensor");
    enum rtx_dtype dt = a->out[0]->dtype, want_in = dt;
    bool ok, heavy = false;
    switch (c.op) {
    case RTX_OP_ADD:
    case RTX_OP_SUB:
    case RTX_OP_MUL:
    case RTX_OP_DIV:
    case RTX_OP_POW:
        c.n_in = 2;
        c.row = row_binary;
        ok = rtx_dtype_is_float(dt) || is_int_arith(dt);
        heavy = c.op == RTX_OP_POW;
        break;
    case RTX_OP_NEG:
    case RTX_OP_ABS:
        c.n_in = 1;
        c.row = row_unary;
        ok = rtx_dtype_is_float(dt) || is_int_arith(dt);
        break;
    case RTX_OP_RELU:
        c.n_in = 1;
        c.row = row_unary;
        ok = rtx_dtype_is_float(dt) || dt == RTX_I8 || dt == RTX_I32 || dt == RTX_I64;
        break;
    case RTX_OP_GELU: {
        const char *ap = rtx_node_attr_string(a->node, "approximate", "none");
        if (strcmp(ap, "tanh") == 0)
            c.gelu_tanh = true;
        else if (strcmp(ap, "none") != 0)
            return rtx__backend_node_err(
                err, a, RTX_EINVAL, "approximate must be \"none\" or \"tanh\", not \"%s\"", ap);
    }
        /* fall through */
    case RTX_OP_SQRT:
    case RTX_OP_RSQRT:
    case RTX_OP_EXP:
    case RTX_OP_LOG:
    case RTX_OP_TANH:
    case RTX_OP_ERF:
    case RTX_OP_SILU:
    case RTX_OP_SIGMOID:
        c.n_in = 1;
        c.row = row_unary;
        ok = rtx_dtype_is_float(dt);
        heavy = c.op != RTX_OP_SQRT;
        break;
    case RTX_OP_CAST:
        c.n_in = 1;
        c.row = row_cast;
        ok = true;
        want_in = a->n_in >= 1 && a->in[0] ? a->in[0]->dtype : dt;
        break;
    case RTX_OP_WHERE:
        c.n_in = 3;
        c.row = row_where;
        ok = a->n_in >= 3 && a->in[0] && a->in[0]->dtype == RTX_BOOL;
        break;
    case RTX_OP_EQUAL:
    case RTX_OP_LESS:
    case RTX_OP_GREATER:
        c.n_in = 2;
        c.row = row_compare;
        ok = dt == RTX_BOOL;
        want_in = a->n_in >= 1 && a->in[0] ? a->in[0]->dtype : dt;
        break;
    default:
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "not an elementwise op");
    }
    if (a->n_in < c.n_in)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "expected %d inputs, got %d", c.n_in,
                                     a->n_in);
    for (int k = 0; k < c.n_in; k++) {
        const struct rtx_tensor *t = a->in[k];
        if (!t) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "input %d is missing", k);
        bool is_cond = c.op == RTX_OP_WHERE && k == 0;
        if (!is_cond && t->dtype != want_in) ok = false;
        c.in[k] = rtx_tensor_data(t);
        c.in_dt[k] = t->dtype;
    }
    if (!ok)
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "unsupported dtypes (input %s, "
                                     "output %s)", rtx_dtype_name(a->in[0]->dtype),
                                     rtx_dtype_name(dt));
    c.out = rtx_tensor_data(a->out[0]);
    c.out_dt = dt;
    int_range(dt, &c.lo, &c.hi);
    int rc = ew_setup(&c, a, err);
    if (rc < 0) return rc;
    int64_t n = rtx_tensor_numel(a->out[0]);
    if (n == 0) return 0;
    rtx__cpu_parallel_for(cpu, n, heavy ? EW_GRAIN_HEAVY : EW_GRAIN, ew_task, &c);
    return 0;
}
