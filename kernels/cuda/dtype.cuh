/*
 * dtype.cuh - device-side loads and stores of rtxd's dtypes for the .cu files of kernels/cuda/
 * (linalg-kernels.cu, reduce.cu), and the warp and block reductions they share.
 *
 * DESIGN
 * Float kernels load every storage type to f32 (f16 and bf16 through cuda_fp16.h /
 * cuda_bf16.h intrinsics), compute in f32 and round once on store with round-to-nearest-even,
 * as docs/ops.md asks. Integer types load to int64. The block reductions assume blockDim.x is
 * a multiple of 32 and at most 1024, and use a caller-provided shared array of 32 slots.
 */
#ifndef RTX_KERNELS_CUDA_DTYPE_CUH
#define RTX_KERNELS_CUDA_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace rtxcu {

template <typename T> __device__ __forceinline__ float to_f32(T v) {
    return (float)v;
}
template <> __device__ __forceinline__ float to_f32<__half>(__half v) {
    return __half2float(v);
}
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_f32(float v) {
    return (T)v;
}
template <> __device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* The NaN-propagating max: a NaN anywhere gives NaN. */
__device__ __forceinline__ float nan_max(float a, float b) {
    return (b > a || b != b) ? b : a;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block; every thread gets the result. sh holds 32 elements of T. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read from an earlier call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warps ? sh[lane] : (T)0;
    return warp_sum(v);
}

/* NaN-propagating max over the block; every thread gets the result. */
__device__ __forceinline__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warps ? sh[lane] : -INFINITY;
    return warp_max(v);
}

} /* namespace rtxcu */

#endif /* RTX_KERNELS_CUDA_DTYPE_CUH */
