/*
 * linalg-kernels.h - the extern "C" launchers of linalg-kernels.cu, the small kernels around
 * the cuBLASLt calls of linalg.c: gemm's bias broadcast and attention's masked row softmax.
 * Only kernels/cuda/linalg.c includes it. Like every .cu entry point, a launcher returns the
 * launch's cudaError_t and checks nothing itself; the caller checks with RTX_CUDA_CHECK.
 */
#ifndef RTX_KERNELS_CUDA_LINALG_KERNELS_H
#define RTX_KERNELS_CUDA_LINALG_KERNELS_H

#include "kernels/cuda/cuda-impl.h"
#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[i, j] = scale * c[cM == 1 ? 0 : i, cN == 1 ? 0 : j] for the [M, N] output y of dtype dt,
 * c of the same dtype broadcast from [cM, cN] (cM is 1 or M, cN is 1 or N). Computed in f32,
 * rounded once. */
cudaError_t rtx__cuda_bias_broadcast(void *y, const void *c, enum rtx_dtype dt, int64_t M,
                                     int64_t N, int64_t cM, int64_t cN, float scale,
                                     cudaStream_t stream);

/* Where attention's mask comes from for one block of heads: element (bh, i, j) of the mask
 * broadcast to [..., Lq, Lk] is at lead offset(bh) + i * str_q + j * str_k, where the lead
 * offset walks bh over lead_dims with lead_str (0 for a broadcast dim). */
struct rtx_cuda_attn_mask {
    const void *data;  /* NULL: no mask */
    enum rtx_dtype dt; /* RTX_BOOL (true = may attend) or additive in q's dtype */
    int lead;          /* leading dims */
    int64_t lead_dims[RTX_MAX_DIMS];
    int64_t lead_str[RTX_MAX_DIMS]; /* elements */
    int64_t str_q, str_k;           /* elements */
};

/* Row softmax of attention scores s [n_heads, Lq, Lk] (f32, already scaled), heads
 * bh0 .. bh0 + n_heads - 1 of the whole batch (for the mask's lead offsets). Applies causal
 * masking (key j > query i is masked) and the mask; a row with every key masked becomes zeros,
 * a row with a NaN or +inf score NaN. Writes the probabilities to p in dtype p_dt (f32: p may
 * be s itself, f16 / bf16: rounded once). */
cudaError_t rtx__cuda_attn_softmax(float *s, void *p, enum rtx_dtype p_dt, int64_t n_heads,
                                   int64_t bh0, int64_t Lq, int64_t Lk, bool causal,
                                   const struct rtx_cuda_attn_mask *mask, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_LINALG_KERNELS_H */
