/*
 * conv-kernels.h - the extern "C" launchers of conv.cu, the kernels of conv2d, max_pool2d and
 * avg_pool2d on the CUDA backend (conv.c does the checks and the cuBLASLt GEMMs). Only
 * kernels/cuda/conv.c includes it. Like every .cu entry point, a launcher returns the launch's
 * cudaError_t and checks nothing itself; the caller checks with RTX_CUDA_CHECK.
 */
#ifndef RTX_KERNELS_CUDA_CONV_KERNELS_H
#define RTX_KERNELS_CUDA_CONV_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/geometry.h" /* struct rtx__window_geom, shared with the CPU backend */

#ifdef __cplusplus
extern "C" {
#endif

/* im2col of n_img images x [C, H, W] (elements of esize bytes: 2 or 4) into
 * col [n_img, G, Cg * kh * kw, Ho * Wo]: row (c, i, j) of image n, group g holds, for every
 * output pixel, input pixel (g * Cg + c, oh * sh - pt + i * dh, ow * sw - pl + j * dw), or 0
 * in the padding. */
cudaError_t rtx__cuda_im2col(const void *x, void *col, int esize, int64_t n_img, int64_t C,
                             int64_t G, const struct rtx__window_geom *w, cudaStream_t stream);

/* y[n, o, p] = b[o] for y [N, O, P] (elements of esize bytes, 2 or 4, copied bit for bit). */
cudaError_t rtx__cuda_conv_bias(void *y, const void *b, int esize, int64_t N, int64_t O,
                                int64_t P, cudaStream_t stream);

/* Max or average pooling of planes x [H, W] into y [Ho, Wo] (dt: RTX_F32, RTX_F16 or
 * RTX_BF16 as an int). Computed in f32 in the CPU reference's order and rounded once: max
 * ignores padding and propagates NaN; average divides by the in-bounds count, or with
 * count_include_pad by the window clipped to the padded input. */
cudaError_t rtx__cuda_pool2d(const void *x, void *y, int dt, int64_t planes, bool is_max,
                             bool count_include_pad, const struct rtx__window_geom *w,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_CONV_KERNELS_H */
