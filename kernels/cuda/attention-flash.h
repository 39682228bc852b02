/*
 * attention-flash.h - the fused (FlashAttention-2 style) attention forward kernel of
 * attention-flash.cu, called by kernels/cuda/linalg.c's run_attention for the cases it
 * supports (rtx__cuda_flash_supported); the rest take the unfused cuBLASLt route there.
 * Only kernels/cuda/linalg.c includes it. Like every .cu entry point, the launcher returns the
 * launch's cudaError_t and checks nothing beyond its arguments; the caller checks with
 * RTX_CUDA_CHECK.
 *
 * DESIGN
 * One struct of plain fields carries the whole problem (launch.h's convention): q [bh, lq, d],
 * k [bh, lk, d], v [bh, lk, d] and out [bh, lq, d], contiguous, f16 or bf16, d 64 or 128;
 * the optional mask is linalg-kernels.h's broadcast description with bh0 = 0. `tile` picks a
 * tile configuration (RTX_FLASH_TILE_*); RTX_FLASH_TILE_AUTO is the measured default, the
 * others exist so that the routes can be measured against each other (docs/gpu.md).
 */
#ifndef RTX_KERNELS_CUDA_ATTENTION_FLASH_H
#define RTX_KERNELS_CUDA_ATTENTION_FLASH_H

#include "kernels/cuda/linalg-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile configurations: query rows per CTA x keys per streamed K/V tile, and the MMA route.
 * The others measured (docs/benchmarks.md) were slower everywhere and are not compiled. */
enum rtx_flash_tile {
    RTX_FLASH_TILE_AUTO = 0, /* the default per device and head dim (docs/gpu.md) */
    RTX_FLASH_TILE_M64_N64,  /* mma.sync, 4 warps x 16 rows, Q fragments in registers */
    RTX_FLASH_TILE_M128_N64, /* mma.sync, 4 warps x 32 rows (FlashAttention-2's shape) */
    RTX_FLASH_TILE_WG1_N64,  /* wgmma (sm_90a), 1 warpgroup x 64 rows */
    RTX_FLASH_TILE_WP1_N64,  /* wgmma pipelined: S of tile j + 1 during the softmax of j */
    RTX_FLASH_TILE_COUNT
};

struct rtx_cuda_flash {
    const void *q, *k, *v;          /* device, 16-byte aligned, contiguous */
    void *out;                      /* device, [bh, lq, d], 4-byte aligned */
    int64_t bh;                     /* batch x heads, >= 1 */
    int64_t lq, lk;                 /* query and key lengths, 1 .. INT32_MAX / 2 */
    int32_t d;                      /* head dim of q, k and v: 64 or 128 */
    int32_t dt;                     /* enum rtx_dtype: RTX_F16 or RTX_BF16 */
    int32_t causal;                 /* key j > query i masked (top-left aligned) */
    int32_t tile;                   /* enum rtx_flash_tile */
    int32_t cc;                     /* the device's compute capability, major * 10 + minor */
    float scale;                    /* applied to q k^T before the mask is added */
    struct rtx_cuda_attn_mask mask; /* data NULL: none; bool or additive in dt */
};

/* True when the fused kernel runs this problem: f16 / bf16 q, k, v and out, q's and v's
 * head dim both 64 or both 128, lengths within int32 range, q, k, v 16-byte aligned, out
 * 4-byte aligned, a device of compute capability 8.0 or newer (cc = major * 10 + minor), a
 * mask (if any) of RTX_BOOL or the input dtype. Pure: no CUDA call. */
bool rtx__cuda_flash_supported(enum rtx_dtype dt, int64_t d, int64_t dv, int64_t lq, int64_t lk,
                               const void *q, const void *k, const void *v, const void *out,
                               const struct rtx_cuda_attn_mask *mask, int cc);

/* Queues out = softmax(scale q k^T + mask) v for every head on `stream`; a query row with
 * every key masked gives zeros, a NaN score a NaN row. p must describe a supported problem
 * (else cudaErrorInvalidValue, nothing queued); lq or lk of 0 queues nothing (the caller
 * zero-fills). Returns the launch's error. */
cudaError_t rtx__cuda_flash_attention(const struct rtx_cuda_flash *p, cudaStream_t stream);

/* The tile configuration named `name` ("auto", "m64n64", "m128n64", "wg1n64", "wp1n64"),
 * or -1. On a device other than compute capability 9.0 the wgmma tiles mean "auto". */
int rtx__cuda_flash_tile_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_ATTENTION_FLASH_H */
