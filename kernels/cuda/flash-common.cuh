/*
 * flash-common.cuh - the device helpers the FlashAttention-style kernels share: cp.async and
 * ldmatrix wrappers, the m16n8k16 MMA, the swizzled tile layout, the online-softmax step, P as
 * an MMA operand and the row epilogue. attention-flash.cu (dense attention) and
 * paged-prefill.cu (paged_attention's prompt chunks) include it; attention-flash.cu's DESIGN
 * explains them. Everything is __forceinline__ (a kernel compiles to the code it would have
 * with the steps written out) in namespace rtxfa.
 */
#ifndef RTX_KERNELS_CUDA_FLASH_COMMON_CUH
#define RTX_KERNELS_CUDA_FLASH_COMMON_CUH

#include <math.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/attention-flash.h"
#include "kernels/cuda/dtype.cuh"

namespace rtxfa {

constexpr int NWARPS = 4;
constexpr int NTHREADS = NWARPS * 32;
constexpr float LOG2E = 1.4426950408889634f;

enum mask_kind { MASK_NONE, MASK_BOOL, MASK_ADD };

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* The mma.sync for operands of type TY ("f16" or "bf16", pasted into the opcode). */
#define RTX_MMA16816(TY)                                                                          \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "                               \
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                 \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                          \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

/* c += a b for one m16n8k16 tile, f32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
    if constexpr (std::is_same<T, __half>::value)
        RTX_MMA16816("f16");
    else
        RTX_MMA16816("bf16");
}

/* Two floats rounded to T, lo in the low half. */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t r;
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        memcpy(&r, &h, sizeof r);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        memcpy(&r, &h, sizeof r);
    }
    return r;
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Element offset of 16-byte chunk c of row r in a swizzled tile of D-element rows. */
template <int D> __device__ __forceinline__ int swz(int r, int c) {
    return r * D + ((c ^ (r & 7)) << 3);
}

/* Queues the copy of `rows` rows (of D elements, contiguous from g) into the swizzled tile s;
 * rows at or past nvalid are zero-filled. */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t nvalid, int tid) {
    constexpr int DC = D / 8;
    static_assert((ROWS * DC) % NTHREADS == 0, "tile chunks must split evenly");
#pragma unroll
    for (int i = 0; i < ROWS * DC / NTHREADS; i++) {
        int idx = tid + i * NTHREADS;
        int r = idx / DC, c = idx % DC;
        bool ok = r < nvalid;
        const T *src = ok ? g + (int64_t)r * D + c * 8 : g;
        cp_async16(s + swz<D>(r, c), src, ok);
    }
}

/* The mask's element offset of head bh's row 0, column 0. */
__device__ __forceinline__ int64_t mask_lead_offset(const struct rtx_cuda_attn_mask &mk,
                                                    int64_t bh) {
    int64_t off = 0, rem = bh;
    for (int d = mk.lead - 1; d >= 0; d--) {
        off += (rem % mk.lead_dims[d]) * mk.lead_str[d];
        rem /= mk.lead_dims[d];
    }
    return off;
}

/* ------------------------------------------------------------------------------------------
 * What every kernel shares: the CTA's tiles, the online-softmax step, P as an MMA operand and
 * the epilogue. All __forceinline__, so each kernel compiles to the code it had with these
 * steps written out in place.
 * ---------------------------------------------------------------------------------------- */

/* The first row of the CTA's query tile of BM rows: causal grids run the query tiles in
 * reverse, so the CTAs with the most key tiles start first. */
template <int BM> __device__ __forceinline__ int query_tile_row(bool causal) {
    const int mblk = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    return mblk * BM;
}

/* How many key tiles of BN the query tile at m0 visits: a causal CTA stops at the last key
 * tile its last row can see. */
template <int BM, int BN> __device__ __forceinline__ int key_tiles(bool causal, int lk, int m0) {
    const int n_end = causal ? (m0 + BM < lk ? m0 + BM : lk) : lk;
    return (n_end + BN - 1) / BN;
}

/* Head bh's q (from the tile's row m0 on), k and v. */
template <typename T, int D>
__device__ __forceinline__ void head_inputs(const struct rtx_cuda_flash &p, int64_t bh, int lq,
                                            int lk, int m0, const T *&q, const T *&k,
                                            const T *&v) {
    q = static_cast<const T *>(p.q) + (bh * lq + m0) * D;
    k = static_cast<const T *>(p.k) + bh * (int64_t)lk * D;
    v = static_cast<const T *>(p.v) + bh * (int64_t)lk * D;
}

/* Element e (0..3) of 8-column tile i of a thread's MMA accumulators (a warp's 16 rows:
 * e = 2h + c is row g + 8h, column 2t + c), stored as [tiles][4] (the mma.sync kernel) or flat
 * (the wgmma kernels, 4 * i + e). */
template <int N> __device__ __forceinline__ float &acc(float (&a)[N][4], int i, int e) {
    return a[i][e];
}
template <int N> __device__ __forceinline__ float &acc(float (&a)[N], int i, int e) {
    return a[4 * i + e];
}

/* Starts a warp's 16 rows: O (16 x D) zero, running max -inf, partial sums 0. */
template <int D, typename O>
__device__ __forceinline__ void init_rows(O &o, float (&mrow)[2], float (&lrow)[2]) {
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc(o, dt, e) = 0.0f;
    mrow[0] = mrow[1] = -INFINITY;
    lrow[0] = lrow[1] = 0.0f;
}

/* One key tile of the online softmax for a warp's 16 rows (row0 = its row g, the thread's
 * rows are row0 and row0 + 8): s holds the 16 x BN scores (acc layout, key n0 + 8nt + 2t + c);
 * on return it holds the probabilities, and o (16 x D), the running max and the partial sums
 * are rescaled. edge: apply the per-element masks (keys past lk, causal, the user's mask of
 * kind MASK through mb / ma, for rows below lq). */
template <int BN, int D, int MASK, typename T, typename S, typename O>
__device__ __forceinline__ void softmax_tile(S &s, O &o, float (&mrow)[2], float (&lrow)[2],
                                             bool edge, int n0, int row0, int lk, int lq,
                                             bool causal, float scale_log2, int t,
                                             const struct rtx_cuda_attn_mask &mk,
                                             const uint8_t *mb, const T *ma) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = acc(s, nt, 2 * h + e) * scale_log2;
                if (edge) {
                    const int col = n0 + nt * 8 + 2 * t + e;
                    if (col >= lk || (causal && col > row)) {
                        x = -INFINITY;
                    } else if (MASK != MASK_NONE && row < lq) {
                        int64_t mo = (int64_t)row * mk.str_q + (int64_t)col * mk.str_k;
                        if constexpr (MASK == MASK_BOOL) {
                            if (!mb[mo]) x = -INFINITY;
                        } else if constexpr (MASK == MASK_ADD) {
                            x += rtxcu::to_f32(ma[mo]) * LOG2E;
                        }
                    }
                }
                acc(s, nt, 2 * h + e) = x;
                mx = fmaxf(mx, x);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(mrow[h], mx);
        const float mref = mnew == -INFINITY ? 0.0f : mnew;
        const float alpha = ex2(mrow[h] - mref);
        mrow[h] = mnew;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float pe = ex2(acc(s, nt, 2 * h + e) - mref);
                acc(s, nt, 2 * h + e) = pe;
                sum += pe;
            }
        }
        lrow[h] = lrow[h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            acc(o, dt, 2 * h) *= alpha;
            acc(o, dt, 2 * h + 1) *= alpha;
        }
    }
}

/* The probabilities of 16-key step ks (score tiles 2ks and 2ks + 1) rounded to T in place of
 * an A fragment: the accumulator layout of two adjacent 8-key tiles is the A-operand layout of
 * one 16-key step. */
template <typename T, typename S>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[4], S &s, int ks) {
    pa[0] = pack2<T>(acc(s, 2 * ks, 0), acc(s, 2 * ks, 1));
    pa[1] = pack2<T>(acc(s, 2 * ks, 2), acc(s, 2 * ks, 3));
    pa[2] = pack2<T>(acc(s, 2 * ks + 1, 0), acc(s, 2 * ks + 1, 1));
    pa[3] = pack2<T>(acc(s, 2 * ks + 1, 2), acc(s, 2 * ks + 1, 3));
}

/* out = O / l for the thread's row h of two (row = row0 + 8h): l, the thread's partial sum,
 * is first reduced over the quad sharing the row; a row with sum 0 (fully masked) is written
 * as zeros, a row at or past lq not at all. out: the head's output. */
template <typename T, int D, typename O>
__device__ __forceinline__ void store_row(T *out, O &o, float l, int h, int row, int lq, int t) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    if (row >= lq) return;
    T *orow = out + (int64_t)row * D + 2 * t;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
        uint32_t w = pack2<T>(acc(o, dt, 2 * h) * inv, acc(o, dt, 2 * h + 1) * inv);
        *reinterpret_cast<uint32_t *>(orow + dt * 8) = w;
    }
}

} /* namespace rtxfa */

#endif /* RTX_KERNELS_CUDA_FLASH_COMMON_CUH */
