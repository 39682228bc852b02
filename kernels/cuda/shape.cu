/*
 * shape.cu - the kernels behind the CUDA shape ops (shape.c): one strided gather into a
 * contiguous destination, serving transpose, expand and slice, and the gather op's kernel.
 *
 * DESIGN
 * Elements are moved by size, never converted, so the kernels are templated on an unsigned
 * type of the unit's width (1, 2, 4, 8 or 16 bytes; shape.c widens unit-stride runs to 16-,
 * 8-, 4- or 2-byte units where it can, so one thread then moves up to 16 bytes per offset it
 * computes). Each thread computes the source offset of its output unit from the merged dims
 * and strides (32-bit divisions when the output has fewer than 2^31 units); consecutive
 * threads write consecutive outputs, so stores always coalesce and loads do whenever the
 * innermost source stride is small. When it is not but another dim has stride 1 (a transpose
 * that moves the last dim), the tiled kernel stages 32 x 32 tiles in shared memory (one column
 * of padding against bank conflicts): a warp loads 32 units along the stride-1 dim and stores
 * 32 along the last dim, one block per tile in a grid-stride loop over batches x tiles, the
 * batch offsets decomposed once per tile. gather copies
 * whole rows in the widest unit that divides them; an index out of range reads nothing,
 * writes zeros and records its position with atomicMin, and a one-thread kernel after it
 * copies the first bad index's value beside that position. Nothing waits for them: the
 * backend reads both words at its next synchronize (checks.c, DESIGN) and fails with the
 * CPU's message, so a gather can be captured into a CUDA graph.
 */
#include <stdint.h>

#include "kernels/cuda/launch.h"

#define SHAPE_THREADS 256
#define SHAPE_MAX_BLOCKS 8192
#define COPY_TILE 32      /* units per side of a tiled copy's tile */
#define COPY_TILE_ROWS 8  /* thread rows of its blocks: 32 x 8 threads, 4 units each */

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

/* Source and destination offsets (units) of batch b of a tiled copy, b decomposed over every
 * dim but p.tile and the last; *tile_out: the destination stride of dims[p.tile]. */
__device__ __forceinline__ void tile_batch(const rtx_cuda_copy &p, int64_t b, int64_t *src,
                                           int64_t *dst, int64_t *tile_out) {
    int64_t s = 0, d = 0, out_str = p.dims[p.ndim - 1];
    for (int k = p.ndim - 2; k >= 0; k--) {
        if (k == p.tile) {
            *tile_out = out_str;
        } else {
            int64_t i = b % p.dims[k];
            b /= p.dims[k];
            s += i * p.str[k];
            d += i * out_str;
        }
        out_str *= p.dims[k];
    }
    *src = s;
    *dst = d;
}

template <typename T>
__global__ void __launch_bounds__(COPY_TILE * COPY_TILE_ROWS) tiled_copy(const rtx_cuda_copy p) {
    __shared__ T tile[COPY_TILE][COPY_TILE + 1];
    const T *src = (const T *)p.src;
    T *dst = (T *)p.dst;
    const int64_t R = p.dims[p.tile], C = p.dims[p.ndim - 1];
    const int64_t rs = p.str[p.tile], cs = p.str[p.ndim - 1];
    const int64_t tr = (R + COPY_TILE - 1) / COPY_TILE, tc = (C + COPY_TILE - 1) / COPY_TILE;
    const int64_t tiles = p.n / (R * C) * tr * tc;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        int64_t c0 = t % tc * COPY_TILE, r0 = t / tc % tr * COPY_TILE, so, dof, r_out;
        tile_batch(p, t / tc / tr, &so, &dof, &r_out);
        for (int j = ty; j < COPY_TILE; j += COPY_TILE_ROWS) { /* loads along the tiled dim */
            int64_t r = r0 + tx, c = c0 + j;
            if (r < R && c < C) tile[j][tx] = src[so + r * rs + c * cs];
        }
        __syncthreads();
        for (int j = ty; j < COPY_TILE; j += COPY_TILE_ROWS) { /* stores along the last dim */
            int64_t r = r0 + j, c = c0 + tx;
            if (r < R && c < C) dst[dof + r * r_out + c] = tile[tx][j];
        }
        __syncthreads(); /* the tile is rewritten by the next iteration */
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

/* After gather_rows: the first out-of-range index's value beside its position. */
__global__ void gather_note(const rtx_cuda_gather p) {
    unsigned long long i = p.bad[0];
    if (i == ~0ull) return;
    int64_t ix = p.idx64 ? ((const int64_t *)p.idx)[i] : ((const int32_t *)p.idx)[i];
    p.bad[1] = (unsigned long long)ix;
}

static unsigned blocks_for(int64_t work) {
    int64_t b = (work + SHAPE_THREADS - 1) / SHAPE_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b < SHAPE_MAX_BLOCKS ? b : SHAPE_MAX_BLOCKS);
}

static cudaError_t tiled_copy_launch(const struct rtx_cuda_copy *p, cudaStream_t stream) {
    if (p->tile < 0 || p->tile >= p->ndim - 1) return cudaErrorInvalidValue;
    int64_t R = p->dims[p->tile], C = p->dims[p->ndim - 1];
    int64_t tiles = p->n / (R * C) * ((R + COPY_TILE - 1) / COPY_TILE) *
                    ((C + COPY_TILE - 1) / COPY_TILE);
    unsigned b = (unsigned)(tiles < SHAPE_MAX_BLOCKS ? tiles : SHAPE_MAX_BLOCKS);
    dim3 t(COPY_TILE, COPY_TILE_ROWS);
    switch (p->esize) {
    case 1: tiled_copy<uint8_t><<<b, t, 0, stream>>>(*p); break;
    case 2: tiled_copy<uint16_t><<<b, t, 0, stream>>>(*p); break;
    case 4: tiled_copy<uint32_t><<<b, t, 0, stream>>>(*p); break;
    case 8: tiled_copy<uint64_t><<<b, t, 0, stream>>>(*p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t rtx__cuda_copy_launch(const struct rtx_cuda_copy *p,
                                             cudaStream_t stream) {
    if (p->n <= 0) return cudaSuccess;
    if (p->tile >= 0) return tiled_copy_launch(p, stream);
    unsigned b = blocks_for(p->n);
    switch (p->esize) {
    case 1: strided_copy<uint8_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 2: strided_copy<uint16_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 4: strided_copy<uint32_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 8: strided_copy<uint64_t><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
    case 16: strided_copy<uint4><<<b, SHAPE_THREADS, 0, stream>>>(*p); break;
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
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    gather_note<<<1, 1, 0, stream>>>(*p);
    return cudaGetLastError();
}
