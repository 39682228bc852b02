/*
 * conv.cu - the kernels of conv2d and the 2-D pools on the CUDA backend (conv-kernels.h):
 * im2col, the bias broadcast that seeds conv2d's GEMM, and a direct max / average pool.
 *
 * DESIGN
 * conv2d is im2col + cuBLASLt GEMM (conv.c): im2col here copies elements as raw 2- or 4-byte
 * words (the GEMM reads them in their own dtype), one thread per column element over a grid-
 * stride loop; consecutive threads take consecutive output pixels, so stores are coalesced
 * and loads nearly so for unit strides. The bias is written into y first and the GEMM adds
 * to it with beta = 1, so bias and products are summed in f32 and rounded once, like the
 * CPU's. Pooling is one thread per output pixel that walks its window in the CPU
 * reference's order (rows, then columns) in f32, so results match it bit for bit.
 */
#include <math.h>

#include "kernels/cuda/conv-kernels.h"
#include "kernels/cuda/dtype.cuh"
#include "runtime/runtime.h"

#define CONV_THREADS 256
#define MAX_BLOCKS (1 << 20) /* grid-stride beyond this */

using namespace rtxcu;

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + CONV_THREADS - 1) / CONV_THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

template <typename T>
__global__ static void im2col_kernel(const T *x, T *col, int64_t total, int64_t C, int64_t G,
                                     int64_t Cg, struct rtx__window_geom w) {
    int64_t P = w.Ho * w.Wo, KK = w.kh * w.kw, K = Cg * KK;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        int64_t p = t % P, r = (t / P) % K, ng = t / (P * K);
        int64_t n = ng / G, g = ng % G;
        int64_t c = r / KK, i = (r / w.kw) % w.kh, j = r % w.kw;
        int64_t oh = p / w.Wo, ow = p % w.Wo;
        int64_t ih = oh * w.sh - w.pt + i * w.dh, iw = ow * w.sw - w.pl + j * w.dw;
        T v = 0;
        if (ih >= 0 && ih < w.H && iw >= 0 && iw < w.W)
            v = x[((n * C + g * Cg + c) * w.H + ih) * w.W + iw];
        col[t] = v;
    }
}

extern "C" cudaError_t rtx__cuda_im2col(const void *x, void *col, int esize, int64_t n_img,
                                        int64_t C, int64_t G, const struct rtx__window_geom *w,
                                        cudaStream_t stream) {
    int64_t Cg = C / G, total = n_img * G * Cg * w->kh * w->kw * w->Ho * w->Wo;
    if (total == 0) return cudaSuccess;
    if (esize == 2)
        im2col_kernel<<<grid_for(total), CONV_THREADS, 0, stream>>>(
            (const uint16_t *)x, (uint16_t *)col, total, C, G, Cg, *w);
    else if (esize == 4)
        im2col_kernel<<<grid_for(total), CONV_THREADS, 0, stream>>>(
            (const uint32_t *)x, (uint32_t *)col, total, C, G, Cg, *w);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

template <typename T>
__global__ static void bias_kernel(T *y, const T *b, int64_t total, int64_t O, int64_t P) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride)
        y[t] = b[(t / P) % O];
}

extern "C" cudaError_t rtx__cuda_conv_bias(void *y, const void *b, int esize, int64_t N,
                                           int64_t O, int64_t P, cudaStream_t stream) {
    int64_t total = N * O * P;
    if (total == 0) return cudaSuccess;
    if (esize == 2)
        bias_kernel<<<grid_for(total), CONV_THREADS, 0, stream>>>((uint16_t *)y,
                                                                  (const uint16_t *)b, total,
                                                                  O, P);
    else if (esize == 4)
        bias_kernel<<<grid_for(total), CONV_THREADS, 0, stream>>>((uint32_t *)y,
                                                                  (const uint32_t *)b, total,
                                                                  O, P);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

template <typename T>
__global__ static void pool_kernel(const T *x, T *y, int64_t total, bool is_max, bool incl_pad,
                                   struct rtx__window_geom w) {
    int64_t P = w.Ho * w.Wo, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        int64_t plane = t / P, oh = (t % P) / w.Wo, ow = t % w.Wo;
        const T *xp = x + plane * w.H * w.W;
        int64_t hs = oh * w.sh - w.pt, ws = ow * w.sw - w.pl;
        float v;
        if (is_max) {
            v = -INFINITY;
            for (int64_t i = 0; i < w.kh && !isnan(v); i++) {
                int64_t ih = hs + i * w.dh;
                if (ih < 0 || ih >= w.H) continue;
                for (int64_t j = 0; j < w.kw; j++) {
                    int64_t iw = ws + j * w.dw;
                    if (iw < 0 || iw >= w.W) continue;
                    float e = to_f32(xp[ih * w.W + iw]);
                    if (e > v || isnan(e)) v = e;
                    if (isnan(v)) break;
                }
            }
        } else {
            int64_t he = hs + w.kh < w.H + w.pb ? hs + w.kh : w.H + w.pb;
            int64_t we = ws + w.kw < w.W + w.pr ? ws + w.kw : w.W + w.pr;
            int64_t padded = (he - hs) * (we - ws);
            int64_t h0 = hs > 0 ? hs : 0, w0 = ws > 0 ? ws : 0;
            int64_t h1 = he < w.H ? he : w.H, w1 = we < w.W ? we : w.W;
            float sum = 0.0f;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++)
                    sum = __fadd_rn(sum, to_f32(xp[ih * w.W + iw]));
            int64_t inside = (h1 > h0 && w1 > w0) ? (h1 - h0) * (w1 - w0) : 0;
            int64_t div = incl_pad ? padded : inside;
            v = div > 0 ? __fdiv_rn(sum, (float)div) : 0.0f;
        }
        y[t] = from_f32<T>(v);
    }
}

extern "C" cudaError_t rtx__cuda_pool2d(const void *x, void *y, int dt, int64_t planes,
                                        bool is_max, bool count_include_pad,
                                        const struct rtx__window_geom *w, cudaStream_t stream) {
    int64_t total = planes * w->Ho * w->Wo;
    if (total == 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    switch (dt) {
    case RTX_F32:
        pool_kernel<<<grid, CONV_THREADS, 0, stream>>>((const float *)x, (float *)y, total,
                                                       is_max, count_include_pad, *w);
        break;
    case RTX_F16:
        pool_kernel<<<grid, CONV_THREADS, 0, stream>>>((const __half *)x, (__half *)y, total,
                                                       is_max, count_include_pad, *w);
        break;
    case RTX_BF16:
        pool_kernel<<<grid, CONV_THREADS, 0, stream>>>((const __nv_bfloat16 *)x,
                                                       (__nv_bfloat16 *)y, total, is_max,
                                                       count_include_pad, *w);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
