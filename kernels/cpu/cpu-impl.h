/*
 * cpu-impl.h - internals of the CPU backend, shared by its files only.
 *
 * DESIGN
 * Kernels receive contiguous inputs and preallocated contiguous outputs (struct rtx_node_args)
 * and return 0 or a negative code with err filled. f16/bf16 are loaded to f32, computed in
 * f32 and rounded once on store. Heavy loops are split across a small fixed thread pool with
 * rtx__cpu_parallel_for; GEMMs go to OpenBLAS single-threaded, split over the same pool
 * (rtx__cpu_sgemm).
 *
 * ISA variants: the op files whose loops the compiler vectorizes (ops-elementwise.c,
 * ops-reduce.c, ops-linalg.c, ops-conv.c) are compiled twice on x86-64: for the baseline ISA
 * and, with RTX_CPU_VARIANT=avx2, for AVX2 + FMA + F16C; the second build's entry points get
 * the suffix _avx2 (the renames below). backend-cpu.c picks one set at creation from
 * __builtin_cpu_supports, or from RTX_CPU_ISA (generic | avx2) when set. The build is ISO C
 * (-ffp-contract=off), so the two compute the same values, bit for bit.
 */
#ifndef RTX_CPU_IMPL_H
#define RTX_CPU_IMPL_H

#include <string.h>

#include "runtime/backend-impl.h"

#ifdef RTX_CPU_VARIANT /* a variant build: its entry points carry the suffix */
#define RTX__CPU_PASTE2(a, b) a##_##b
#define RTX__CPU_PASTE(a, b) RTX__CPU_PASTE2(a, b)
#define rtx__cpu_elementwise RTX__CPU_PASTE(rtx__cpu_elementwise, RTX_CPU_VARIANT)
#define rtx__cpu_reduce RTX__CPU_PASTE(rtx__cpu_reduce, RTX_CPU_VARIANT)
#define rtx__cpu_linalg RTX__CPU_PASTE(rtx__cpu_linalg, RTX_CPU_VARIANT)
#define rtx__cpu_conv RTX__CPU_PASTE(rtx__cpu_conv, RTX_CPU_VARIANT)
#define rtx__cpu_conv_direct RTX__CPU_PASTE(rtx__cpu_conv_direct, RTX_CPU_VARIANT)
#define rtx__cpu_epilogue_apply RTX__CPU_PASTE(rtx__cpu_epilogue_apply, RTX_CPU_VARIANT)
#define rtx__cpu_epilogue_run RTX__CPU_PASTE(rtx__cpu_epilogue_run, RTX_CPU_VARIANT)
#define rtx__cpu_linalg_fused RTX__CPU_PASTE(rtx__cpu_linalg_fused, RTX_CPU_VARIANT)
#define rtx__cpu_conv_fused RTX__CPU_PASTE(rtx__cpu_conv_fused, RTX_CPU_VARIANT)
#define rtx__cpu_conv_direct_fits RTX__CPU_PASTE(rtx__cpu_conv_direct_fits, RTX_CPU_VARIANT)
#define rtx__cpu_conv_winograd RTX__CPU_PASTE(rtx__cpu_conv_winograd, RTX_CPU_VARIANT)
#define rtx__cpu_conv_winograd_fits RTX__CPU_PASTE(rtx__cpu_conv_winograd_fits, RTX_CPU_VARIANT)
#define rtx__cpu_packed_b_of RTX__CPU_PASTE(rtx__cpu_packed_b_of, RTX_CPU_VARIANT)
#define rtx__cpu_gemm_packed RTX__CPU_PASTE(rtx__cpu_gemm_packed, RTX_CPU_VARIANT)
#define rtx__cpu_packed_b_free RTX__CPU_PASTE(rtx__cpu_packed_b_free, RTX_CPU_VARIANT)
#endif

struct rtx_cpu; /* the backend context: its thread pool (kernels/cpu/thread-pool.c) */

/* A pool of n threads (n >= 1): n - 1 workers and the caller of rtx__cpu_parallel_for. Workers
 * block every signal. RTX_ENOMEM, or the -errno of a failed pthread_create. */
int rtx__cpu_pool_new(int n, struct rtx_cpu **out, struct rtx_err *err);
/* Stops and joins the workers, then frees the pool; NULL is a no-op. */
void rtx__cpu_pool_free(struct rtx_cpu *cpu);

/* Calls fn(ctx, begin, end) over [0, n) split into chunks of at least `grain` items, on the
 * pool's threads and the caller's; returns when all chunks are done. Runs inline when n is
 * small or the pool has one thread. Safe to call from one thread at a time per backend. */
void rtx__cpu_parallel_for(struct rtx_cpu *cpu, int64_t n, int64_t grain,
                           void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);
/* As rtx__cpu_parallel_for, but the items are claimed one at a time: for a few tens of
 * coarse items of equal cost (a GEMM's blocks), where chunks of several left one thread
 * with a chunk more than the others (36 blocks: chunks of 4, nine of them on two threads). */
void rtx__cpu_parallel_each(struct rtx_cpu *cpu, int64_t n,
                            void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);
int rtx__cpu_n_threads(const struct rtx_cpu *cpu);
/* The backend whose pool this is (set once at creation; NULL for a bare pool), and whether its
 * products with packed weights use AVX-512 (the avx512 build, backend-cpu.c). */
void rtx__cpu_set_backend(struct rtx_cpu *cpu, struct rtx_backend *be, bool wide);
struct rtx_backend *rtx__cpu_backend(const struct rtx_cpu *cpu);
bool rtx__cpu_wide(const struct rtx_cpu *cpu);

/* What a fused group (backend-cpu.c, cpu_fused_span) does to a product's f32 result, in this
 * order, as the nodes it replaces would: add a row bias, add a residual shaped like the
 * result, apply an activation. Applied to each block of the result while it is in cache. */
struct rtx__cpu_epilogue {
    const float *bias;           /* [N]: added to every row; NULL: none */
    const float *res;            /* added at the result's own index (row * res_ld + col) */
    int64_t res_ld;
    enum rtx_op act;             /* RTX_OP_RELU, RTX_OP_GELU, or RTX_OP_COUNT for none */
    bool gelu_tanh;              /* gelu: approximate = "tanh" */
};
/* The epilogue on the block of m rows x n columns at c (row stride ldc) that starts at row
 * row0, column col0 of the result (kernels/cpu/ops-elementwise.c: the ops' own row code). */
void rtx__cpu_epilogue_apply(const struct rtx__cpu_epilogue *e, float *c, int64_t ldc,
                             int64_t row0, int64_t col0, int64_t m, int64_t n);
/* The epilogue on all of y [rows, cols] (row stride cols), rows split over the pool. */
void rtx__cpu_epilogue_run(struct rtx_cpu *cpu, const struct rtx__cpu_epilogue *e, float *y,
                           int64_t rows, int64_t cols);

/* One row-major product C = alpha op(A) op(B) + beta C (op: transposed when ta / tb) through
 * OpenBLAS, which runs single-threaded in the backend: a large product is split in column
 * panels (row panels when it is narrow) over the pool, each panel one sgemm on its thread
 * (kernels/cpu/ops-linalg.c). OpenBLAS's own workers spin between calls and took turns with
 * the pool's on the cores; one set of threads does not. */
void rtx__cpu_sgemm(struct rtx_cpu *cpu, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
/* The same, then epi(ctx, block, ldc, row0, col0, m, n) on each block of C once it is
 * computed (on the thread that computed it); epi NULL: none. */
typedef void (*rtx__cpu_block_fn)(const void *ctx, float *c, int64_t ldc, int64_t row0,
                                  int64_t col0, int64_t m, int64_t n);
void rtx__cpu_sgemm_epi(struct rtx_cpu *cpu, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                        float beta, float *c, int64_t ldc, rtx__cpu_block_fn epi,
                        const void *epi_ctx);

/* dst[q] = src[q * stride] + b (+ res[q]) (then relu: 0 > v ? 0 : v, which keeps a NaN),
 * q < n: the epilogue's common cases for the convs' tiles (conv-direct.c, conv-winograd.c),
 * in the nodes' order, each case a loop of its own so the relu is a max instruction, not a
 * branch per element (which mispredicts). */
static inline void rtx__cpu_store_run(float *dst, const float *src, int64_t stride, int64_t n, float b,
                             const float *res, bool relu) {
    if (res && relu) {
        for (int64_t q = 0; q < n; q++) {
            float v = src[q * stride] + b + res[q];
            dst[q] = 0.0f > v ? 0.0f : v;
        }
    } else if (res) {
        for (int64_t q = 0; q < n; q++)
            dst[q] = src[q * stride] + b + res[q];
    } else if (relu) {
        for (int64_t q = 0; q < n; q++) {
            float v = src[q * stride] + b;
            dst[q] = 0.0f > v ? 0.0f : v;
        }
    } else {
        for (int64_t q = 0; q < n; q++)
            dst[q] = src[q * stride] + b;
    }
}

/* Products whose right operand is a constant of the graph (a weight): the variant build packs
 * it once (kernels/cpu/gemm-packed.c, DESIGN). */
struct rtx__cpu_packed_b;
#ifdef RTX_CPU_VARIANT
/* The packed form of node a's input 1, B [K, N] (tb: stored as [N, K]), when it is a float
 * constant of a's graph (else *out NULL: the caller takes the unpacked path): the form kept
 * with the backend's cache entry for it (rtx__const_derived), made on first use, or one made
 * for this call in *owned (free it with rtx__cpu_packed_b_free). RTX_ENOMEM. */
int rtx__cpu_packed_b_of(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool tb, int64_t K,
                         int64_t N, const struct rtx__cpu_packed_b **out,
                         struct rtx__cpu_packed_b **owned);
void rtx__cpu_packed_b_free(struct rtx__cpu_packed_b *b); /* NULL is a no-op */
/* y [M, N] (row stride ldy) = alpha a [M, K] (row stride lda) . B, plus beta bias[j] when bias
 * (a row of N) is given, plus y's own values when accumulate; then the epilogue e (NULL: none),
 * on each register tile as it is stored (its bias, residual and relu in the registers).
 * Split over the pool. */
void rtx__cpu_gemm_packed(struct rtx_cpu *cpu, int64_t M, float alpha, const float *a,
                          int64_t lda, const struct rtx__cpu_packed_b *b, const float *bias,
                          float beta, bool accumulate, float *y, int64_t ldy,
                          const struct rtx__cpu_epilogue *e);
#endif

/* Element access by dtype for generic (slow) paths. */
static inline float rtx__load_f32(const void *base, enum rtx_dtype dt, int64_t i) {
    switch (dt) {
    case RTX_F32: return ((const float *)base)[i];
    case RTX_F16: return rtx_f16_to_f32(((const uint16_t *)base)[i]);
    case RTX_BF16: return rtx_bf16_to_f32(((const uint16_t *)base)[i]);
    case RTX_I8: return (float)((const int8_t *)base)[i];
    case RTX_I32: return (float)((const int32_t *)base)[i];
    case RTX_I64: return (float)((const int64_t *)base)[i];
    case RTX_U8: return (float)((const uint8_t *)base)[i];
    case RTX_BOOL: return ((const uint8_t *)base)[i] ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}
static inline void rtx__store_f32(void *base, enum rtx_dtype dt, int64_t i, float v) {
    switch (dt) {
    case RTX_F32: ((float *)base)[i] = v; break;
    case RTX_F16: ((uint16_t *)base)[i] = rtx_f32_to_f16(v); break;
    case RTX_BF16: ((uint16_t *)base)[i] = rtx_f32_to_bf16(v); break;
    default: break; /* integer stores go through the integer paths */
    }
}

/* dst[i] = EXPR for i in [0, n); EXPR reads `i`. Groups of 8 go through a local array, so a
 * store that may alias the inputs does not stop the vectorizer. */
#define RTX__VLOOP(T, dst, n, EXPR)                                                                \
    do {                                                                                        \
        int64_t b8_ = 0;                                                                        \
        for (; b8_ + 8 <= (n); b8_ += 8) {                                                      \
            T t8_[8];                                                                           \
            for (int l8_ = 0; l8_ < 8; l8_++) {                                                 \
                int64_t i = b8_ + l8_;                                                          \
                t8_[l8_] = (EXPR);                                                              \
            }                                                                                   \
            for (int l8_ = 0; l8_ < 8; l8_++) (dst)[b8_ + l8_] = t8_[l8_];                      \
        }                                                                                       \
        for (int64_t i = b8_; i < (n); i++) (dst)[i] = (EXPR);                                  \
    } while (0)

/* Products of at most this many multiply-adds OpenBLAS computes on the calling thread; a
 * larger call made from several pool workers at once starts OpenBLAS threads on top of ours
 * and runs several times slower (measured), so kernels that call sgemm from the pool keep
 * each call under it. */
#define RTX__CPU_SMALL_GEMM_MACS (1 << 18)

/* exp(x) for the x <= 0 of a max-subtracted softmax, within 2 ulp of expf; x below -87 (and
 * -inf) gives 0, where expf would give at most a denormal. It is branch-free so the block
 * loops of the softmaxes vectorize: 2^n * e^r with n = round(x / ln 2), e^r by its Taylor
 * series to r^7 (|r| <= ln 2 / 2, so the series error is under 1e-8). A NaN x must be caught
 * before. */
static inline float rtx__exp_nonpos(float x) {
    uint32_t xb, tb, yb;
    memcpy(&xb, &x, sizeof xb);
    uint32_t keep = xb > 0xc2ae0000u ? 0u : ~0u; /* bits above -87.0f's: more negative */
    xb = xb > 0xc2ae0000u ? 0xc2ae0000u : xb;
    float c;
    memcpy(&c, &xb, sizeof c);
    float t = c * 1.44269504f + 12582912.0f; /* + 1.5 * 2^23 rounds to an integer */
    float n = t - 12582912.0f;
    float r = c - n * 0.693145752f - n * 1.42860677e-06f; /* ln 2 in two parts */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    memcpy(&tb, &t, sizeof tb);
    uint32_t e = (tb - 0x4b400000u + 127u) << 23; /* 2^n: n sits in t's low mantissa bits */
    float s;
    memcpy(&s, &e, sizeof s);
    float y = p * s;
    memcpy(&yb, &y, sizeof yb);
    yb &= keep;
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* s[i] = exp(s[i] - mx) for s[i] <= mx; returns the sum. Blocks of 8 let the compiler
 * vectorize at -O2. */
static inline float rtx__exp_sum(float *s, int64_t n, float mx) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            s[i + k] = rtx__exp_nonpos(s[i + k] - mx);
            acc[k] += s[i + k];
        }
    float sum = 0.0f;
    for (; i < n; i++) {
        s[i] = rtx__exp_nonpos(s[i] - mx);
        sum += s[i];
    }
    for (int k = 0; k < 8; k++) sum += acc[k];
    return sum;
}

/* f32 views of float tensors for kernels that compute in f32 (kernels/cpu/f32-scratch.c).
 * as_f32: t's own data when f32, else a widened copy returned in *owned (rtx_free it); NULL
 * when out of memory. out_f32: where to write an f32 result for t (t itself, or scratch in
 * *owned); finish_f32 then rounds the scratch into t (a no-op for NULL scratch). */
const float *rtx__cpu_as_f32(struct rtx_cpu *cpu, const struct rtx_tensor *t, float **owned);
float *rtx__cpu_out_f32(struct rtx_tensor *t, float **owned);
void rtx__cpu_finish_f32(struct rtx_cpu *cpu, struct rtx_tensor *t, const float *scratch);

/* Op groups, one per file; each switches on args->node->op. */
int rtx__cpu_elementwise(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_reduce(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_linalg(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_shape(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_conv(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
/* A matmul or gemm node (linalg), or a conv2d node (conv), with an epilogue, its result
 * written to out (the fused group's last output, f32, shaped like the node's own output). */
int rtx__cpu_linalg_fused(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                          const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                          struct rtx_err *err);
int rtx__cpu_conv_fused(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                        const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                        struct rtx_err *err);
int rtx__cpu_generation(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                        struct rtx_err *err); /* rope, paged_attention */

#ifdef RTX_CPU_VARIANT
/* conv2d without im2col (kernels/cpu/conv-direct.c, built for the variants only): whether it
 * takes this geometry (ungrouped, not the 1x1 case whose columns are x itself), and the conv
 * of f32 x [N, C, H, W] by wt [O, C, kh, kw] plus bias [O] (NULL: none), then e (NULL: none;
 * its rows are the output planes), into y [N, O, Ho, Wo]. wt_const: the weight tensor when it
 * is an f32 constant of the graph (its repacked form is then kept, rtx__const_derived), else
 * NULL. RTX_ENOMEM when its scratch cannot be allocated. */
struct rtx__conv2d_geom;
bool rtx__cpu_conv_direct_fits(const struct rtx__conv2d_geom *g);
int rtx__cpu_conv_direct(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                         const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                         const struct rtx__cpu_epilogue *e, float *y);
/* 3x3 stride-1 conv2d by Winograd F(2x2, 3x3) (kernels/cpu/conv-winograd.c, variants only):
 * whether it takes this geometry (ungrouped, undilated, 16+ channels in and out), and the
 * same computation with the same arguments as rtx__cpu_conv_direct. */
bool rtx__cpu_conv_winograd_fits(const struct rtx__conv2d_geom *g);
int rtx__cpu_conv_winograd(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                           const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                           const struct rtx__cpu_epilogue *e, float *y);
#endif

#if !defined(RTX_CPU_VARIANT) && defined(RTX_CPU_HAVE_AVX2)
/* The AVX2 builds of the op groups above (DESIGN: ISA variants). */
int rtx__cpu_elementwise_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                              struct rtx_err *err);
int rtx__cpu_reduce_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_linalg_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_conv_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err);
int rtx__cpu_linalg_fused_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                               const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                               struct rtx_err *err);
int rtx__cpu_conv_fused_avx2(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                             const struct rtx__cpu_epilogue *e, struct rtx_tensor *out,
                             struct rtx_err *err);
#endif

#endif /* RTX_CPU_IMPL_H */
