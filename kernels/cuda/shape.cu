/*
 * shape.cu - the kernels behind the CUDA shape ops (shape.c): one strided gather into a
 * contiguous destination, serving transpose, expand and slice, and the gather op's kernel.
 *
 * DESIGN
 * Elements are moved by size, never converted, so the kernels are templated on an unsigned
 * type of the element's width (1, 2, 4 or 8 bytes). Each thread computes the source offset
 * of its output element from the merged dims and strides (32-bit divisions when the output
 * has fewer than 2^31 elements); consecutive threads write consecutive outputs, so stores
 * always coalesce and loads do whenever the innermost source stride is small. gather copies
 * whole rows in the widest unit that divides them; an index out of range writes zeros and
 * records its position with atomicMin, which the C side reads after a stream sync to fail
 * the node with the same message as the CPU.
 */
#include <stdint.h>

#include "kernels/cuda/launch.h"

#define SHAPE_THREADS 256
#define SHAPE_MAX_BLOCKS 8192

__device__ __forceinline__ int64_t thread_index() {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

template <typename I>
__device__ __forceinline__ int64_t src_offset(const rtx_cuda_copy &p, I i) {
    int64_t off = 0;
    for (int d = p.ndim - 1; d > 0; d--) {
        I dim = (I)p.dims[d];
        off += (int64_t)(i % dim) * p.str[d];
        i /= dim;
    }
    return off + (int64_t)i * p.str[0];
}

template <typename T>
__global__ void strided_copy(const rtx_cuda_copy p) {
    const T *src = (const T *)p.src;
    T *dst = (T *)p.dst;
    for (int64_t i = thread_index(); i < p.n; i += grid_stride()) {
        int64_t off = p.n <= INT32_MAX ? src_offset<uint32_t>(p, (uint32_t)i)
                                       : src_offset<int64_t>(p, i);
        dst[i] = src[off];
    }
}

template <typename T>
__global__ void gather_rows(const rtx_cuda_gather p) {
    const T *data = (const T *)p.data;
    T *out = (T *)p.out;
    for (int64_t i = thread_index(); i < p.n_idx; i += grid_stride()) {
        int64_t ix = p.idx64 ? ((const int64_t *)p.idx)[i] : ((const int32_t *)p.idx)[i];
        if (ix < -p.axis_dim || ix >= p.axis_dim) atomicMin(p.bad, (unsigned long long)i);
    }
    int64_t n = p.outer * p.n_idx * p.inner;
    for (int64_t e = thread_index(); e < n; e += grid_stride()) {
        int64_t u = e % p.inner, row = e / p.inner;
        int64_t i = row % p.n_idx, o = row / p.n_idx;
        int64_t ix = p.idx64 ? ((const int64_t *)p.idx)[i] : ((const int32_t *)p.idx)[i];
        if (ix < -p.axis_dim || ix >= p.axis_dim) {
            out[e] = 0;
            continue;
        }
        if (ix < 0) ix += p.axis_dim;
        out[e] = data[(o * p.axis_dim + ix) * p.inner + u];
    }
}

static unsigned blocks_for(int64_t work) {
    int64_t b = (work + SHAPE_THREADS - 1) / SHAPE_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b < SHAPE_MAX_BLOCKS ? b : SHAPE_MAX_BLOCKS);
}

extern "C" cudaError_t rtx__cuda_copy_launch(const struct rtx_cuda_copy *p,
                                             cudaStream_t stream) {
    if (p->n <= 0) return cudaSuccess;
    unsigned b = blocks_for(p->n);
    switch (p->esize) {
    case 1: strided_copy<uint8_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 2: strided_copy<uint16_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 4: strided_copy<uint32_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 8: strided_copy<uint64_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t rtx__cuda_gather_launch(const struct rtx_cuda_gather *p,
                                               cudaStream_t stream) {
    int64_t n = p->outer * p->n_idx * p->inner;
    if (p->n_idx <= 0) return cudaSuccess;
    unsigned b = blocks_for(n > p->n_idx ? n : p->n_idx);
    switch (p->unit) {
    case 1: gather_rows<uint8_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 2: gather_rows<uint16_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 4: gather_rows<uint32_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 8: gather_rows<uint64_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
