/*
 * linalg-kernels.cu - the kernels around linalg.c's cuBLASLt calls: gemm's bias broadcast and
 * attention's masked row softmax (linalg-kernels.h).
 *
 * DESIGN
 * The attention softmax runs one block of ATTN_THREADS threads per score row. A first pass
 * applies the causal and user masks in place (a masked score becomes -inf) and takes the row
 * max; a second sums exp(s - max); a third writes the probabilities, in f32 over s itself or
 * rounded once to f16 / bf16 into a separate buffer for the second GEMM. The row stays in L1/L2
 * between passes (it is at most a few tens of KiB), so the extra reads cost little next to
 * the two GEMMs. The CPU reference's rules hold: all keys masked gives zeros, a NaN or +inf
 * score gives a NaN row.
 */
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/linalg-kernels.h"

#define BIAS_THREADS 256
#define ATTN_THREADS 256
#define MAX_GRID 65535 /* y-dimension limit; x loops beyond it too */

using namespace rtxcu;

template <typename T>
__global__ static void bias_kernel(T *y, const T *c, int64_t M, int64_t N, int64_t cM, int64_t cN,
                                   float scale) {
    int64_t n = M * N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t i = t / N, j = t % N;
        int64_t ci = (cM == 1 ? 0 : i) * cN + (cN == 1 ? 0 : j);
        y[t] = from_f32<T>(scale * to_f32(c[ci]));
    }
}

extern "C" cudaError_t rtx__cuda_bias_broadcast(void *y, const void *c, enum rtx_dtype dt,
                                                int64_t M, int64_t N, int64_t cM, int64_t cN,
                                                float scale, cudaStream_t stream) {
    int64_t n = M * N;
    if (n == 0) return cudaSuccess;
    int64_t blocks = (n + BIAS_THREADS - 1) / BIAS_THREADS;
    unsigned grid = (unsigned)(blocks < 8 * MAX_GRID ? blocks : 8 * MAX_GRID);
    switch (dt) {
    case RTX_F32:
        bias_kernel<<<grid, BIAS_THREADS, 0, stream>>>((float *)y, (const float *)c, M, N, cM, cN,
                                                       scale);
        break;
    case RTX_F16:
        bias_kernel<<<grid, BIAS_THREADS, 0, stream>>>((__half *)y, (const __half *)c, M, N, cM,
                                                       cN, scale);
        break;
    case RTX_BF16:
        bias_kernel<<<grid, BIAS_THREADS, 0, stream>>>(
            (__nv_bfloat16 *)y, (const __nv_bfloat16 *)c, M, N, cM, cN, scale);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* The mask's contribution to a score: -inf for a masked bool entry, else the added value. */
template <typename M> __device__ __forceinline__ float mask_value(const M *m, int64_t i);
template <> __device__ __forceinline__ float mask_value<uint8_t>(const uint8_t *m, int64_t i) {
    return m[i] ? 0.0f : -INFINITY;
}
template <> __device__ __forceinline__ float mask_value<float>(const float *m, int64_t i) {
    return m[i];
}
template <> __device__ __forceinline__ float mask_value<__half>(const __half *m, int64_t i) {
    return __half2float(m[i]);
}
template <>
__device__ __forceinline__ float mask_value<__nv_bfloat16>(const __nv_bfloat16 *m, int64_t i) {
    return __bfloat162float(m[i]);
}

/* One block per row (blockIdx.x: query row, blockIdx.y + y0: head within this call). */
template <typename M, typename P>
__global__ static void __launch_bounds__(ATTN_THREADS)
    attn_softmax_kernel(float *s, P *p, int64_t n_heads, int64_t bh0, int64_t Lq, int64_t Lk,
                        bool causal, struct rtx_cuda_attn_mask mk) {
    __shared__ float sh[32];
    for (int64_t h = blockIdx.y; h < n_heads; h += gridDim.y) {
        for (int64_t qi = blockIdx.x; qi < Lq; qi += gridDim.x) {
            float *row = s + (h * Lq + qi) * Lk;
            P *prow = p + (h * Lq + qi) * Lk;
            const M *mrow = NULL;
            if (mk.data) {
                int64_t rem = bh0 + h, off = qi * mk.str_q;
                for (int d = mk.lead - 1; d >= 0; d--) {
                    off += (rem % mk.lead_dims[d]) * mk.lead_str[d];
                    rem /= mk.lead_dims[d];
                }
                mrow = (const M *)mk.data + off;
            }
            float mx = -INFINITY;
            bool bad = false; /* a NaN or +inf score */
            for (int64_t j = threadIdx.x; j < Lk; j += blockDim.x) {
                float v = row[j];
                if (causal && j > qi)
                    v = -INFINITY;
                else if (mrow)
                    v += mask_value<M>(mrow, j * mk.str_k);
                row[j] = v;
                bad |= v != v || v == INFINITY;
                mx = v > mx ? v : mx;
            }
            int any_bad = __syncthreads_or(bad);
            mx = block_max(mx, sh);
            if (any_bad || mx == -INFINITY) {
                float fill = any_bad ? NAN : 0.0f;
                for (int64_t j = threadIdx.x; j < Lk; j += blockDim.x)
                    prow[j] = from_f32<P>(fill);
                continue;
            }
            float sum = 0.0f;
            for (int64_t j = threadIdx.x; j < Lk; j += blockDim.x)
                sum += expf(row[j] - mx);
            sum = block_sum(sum, sh);
            float inv = 1.0f / sum;
            for (int64_t j = threadIdx.x; j < Lk; j += blockDim.x)
                prow[j] = from_f32<P>(expf(row[j] - mx) * inv);
            __syncthreads(); /* prow may alias row: every read of this row is done */
        }
    }
}

template <typename M>
static void attn_launch(float *s, void *p, enum rtx_dtype p_dt, int64_t n_heads, int64_t bh0,
                        int64_t Lq, int64_t Lk, bool causal, const struct rtx_cuda_attn_mask *mk,
                        cudaStream_t stream) {
    dim3 grid((unsigned)(Lq < 8 * MAX_GRID ? Lq : 8 * MAX_GRID),
              (unsigned)(n_heads < MAX_GRID ? n_heads : MAX_GRID));
    switch (p_dt) {
    case RTX_F32:
        attn_softmax_kernel<M, float>
            <<<grid, ATTN_THREADS, 0, stream>>>(s, (float *)p, n_heads, bh0, Lq, Lk, causal, *mk);
        break;
    case RTX_F16:
        attn_softmax_kernel<M, __half>
            <<<grid, ATTN_THREADS, 0, stream>>>(s, (__half *)p, n_heads, bh0, Lq, Lk, causal, *mk);
        break;
    default:
        attn_softmax_kernel<M, __nv_bfloat16><<<grid, ATTN_THREADS, 0, stream>>>(
            s, (__nv_bfloat16 *)p, n_heads, bh0, Lq, Lk, causal, *mk);
        break;
    }
}

extern "C" cudaError_t rtx__cuda_attn_softmax(float *s, void *p, enum rtx_dtype p_dt,
                                              int64_t n_heads, int64_t bh0, int64_t Lq, int64_t Lk,
                                              bool causal, const struct rtx_cuda_attn_mask *mask,
                                              cudaStream_t stream) {
    if (n_heads == 0 || Lq == 0 || Lk == 0) return cudaSuccess;
    if (p_dt != RTX_F32 && p_dt != RTX_F16 && p_dt != RTX_BF16) return cudaErrorInvalidValue;
    enum rtx_dtype mdt = mask->data ? mask->dt : RTX_BOOL;
    switch (mdt) {
    case RTX_BOOL:
        attn_launch<uint8_t>(s, p, p_dt, n_heads, bh0, Lq, Lk, causal, mask, stream);
        break;
    case RTX_F32:
        attn_launch<float>(s, p, p_dt, n_heads, bh0, Lq, Lk, causal, mask, stream);
        break;
    case RTX_F16:
        attn_launch<__half>(s, p, p_dt, n_heads, bh0, Lq, Lk, causal, mask, stream);
        break;
    case RTX_BF16:
        attn_launch<__nv_bfloat16>(s, p, p_dt, n_heads, bh0, Lq, Lk, causal, mask, stream);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
