/*
 * attention-flash.cu - fused scaled dot-product attention forward for f16 / bf16 with head
 * dims 64 and 128 (attention-flash.h), after FlashAttention-2 (Dao, 2023): no score matrix in
 * memory, one pass over the keys per tile of queries. Two MMA routes: mma.sync (any device of
 * compute capability 8.0+, and every masked problem) and Hopper's wgmma (sm_90a, unmasked).
 *
 * DESIGN
 * Work split. A CTA owns a tile of consecutive query rows of one head; the grid is (query
 * tiles, heads), heads past 65535 looping in the CTA. With causal masking the query tiles run
 * in reverse order, so the CTAs with the most key tiles start first, and a CTA stops at the
 * last key tile its last row can see.
 *
 * Memory. The Q tile and the K and V tiles sit in dynamic shared memory with 16-byte chunks
 * XOR-swizzled by (row & 7), so 8-row ldmatrix phases hit 8 different bank groups and the
 * wgmma tiles are its 128-byte swizzle atoms (those store d = 128 as two [rows][64] blocks and
 * align the tiles to 1 KiB). Tiles arrive by cp.async, 16 bytes per thread and instruction,
 * zero-filled past the sequence ends, while earlier tiles are in use: two K/V stages for the
 * mma.sync and plain wgmma kernels, three K and two V stages for the pipelined one.
 *
 * mma.sync kernel (4 warps, 16 or 32 rows each). S = Q K^T and O += P V are
 * mma.sync.m16n8k16 (row.col, f32 accumulators); K fragments come from ldmatrix.x4 (rows of
 * K are the columns of K^T), V fragments from ldmatrix.x4.trans, Q's stay in registers with
 * 16 rows per warp. P never leaves registers: the accumulator layout of two adjacent 8-key
 * score tiles is the A-operand layout of one 16-key step, so P is rounded to the input dtype
 * in place (as FlashAttention does), while the row sums use the f32 values.
 *
 * wgmma kernels (warpgroups of 128 threads, 64 rows each). S = Q K^T is wgmma m64nBNk16 with
 * both operands from shared-memory descriptors (K-major, 128-byte swizzle, 1024-byte stride
 * between 8-row groups, +32 bytes per k-step inside an atom); O += P V takes P from registers
 * (the wgmma accumulator layout of a warp's 16 rows is again the A-fragment layout) and V as
 * an MN-major descriptor (transposed B: d contiguous; LBO = the stride between 64-column
 * blocks, SBO = 1024 bytes between 8-key groups). Writes by cp.async reach wgmma's async
 * proxy through fence.proxy.async before the barrier. The pipelined kernel issues S for tile
 * j + 1 into a second accumulator set before the softmax of tile j, so the tensor cores work
 * while the warpgroup computes exponentials, then issues P V of tile j and waits for both.
 * These kernels are sm_90a code only: the Makefile builds this file for sm_90a plus compute_90
 * PTX, the wgmma bodies are compiled out of the PTX (they trap), and the launcher picks them
 * on compute capability 9.0 only.
 *
 * Softmax. Scores are scaled by scale * log2(e) once, the additive mask is added times
 * log2(e), and exp2 (ex2.approx) replaces exp. Each thread keeps the running max and a partial
 * sum of its two rows (row g and g + 8 of each 16-row tile); maxima are reduced over the quad
 * of threads sharing a row per tile, sums only at the end. A row whose max is still -inf
 * (every key so far masked) uses 0 as its reference, so exp2 gives 0, never NaN; such a row
 * ends with sum 0 and is written as zeros, as docs/ops.md asks. A NaN score is skipped by the
 * max but makes its exp2, the sum and so the row NaN, as on the CPU.
 *
 * Masking per element (key past lk, causal j > i, the user's mask) runs only in tiles that
 * need it: the last key tile, the tiles crossing the causal diagonal, and every tile when a
 * mask is given (its values are read from global memory, through L1/L2, per element).
 *
 * Code shared by the kernels. The steps every kernel takes in the same form (the CTA's query
 * and key tiles, the head's inputs, accumulator start, the online-softmax step, P as an MMA
 * operand, the epilogue; for wgmma the S = Q K^T issue and the P V step) are __forceinline__
 * helpers, and the f16 / bf16 MMA wrappers are one asm statement each through a macro, so each
 * kernel compiles to the arithmetic, in the order, it had with the steps written out in place
 * (PTX compared kernel by kernel when this was split out). The helpers the mma.sync route
 * shares with paged_attention's prompt kernel (paged-prefill.cu) live in flash-common.cuh.
 *
 * Tiles. RTX_FLASH_TILE_AUTO is, on compute capability 9.0, the plain wgmma kernel with one
 * warpgroup and 64-key tiles for d = 64 and the pipelined one for d = 128; elsewhere the
 * mma.sync kernel with 32 rows per warp; masked problems always the mma.sync kernel with 16
 * rows per warp. These won on the H200 against 2- and 3-warpgroup CTAs, 128-key tiles and
 * the other mma.sync shapes (docs/benchmarks.md has every figure).
 */
#include <math.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/attention-flash.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/flash-common.cuh"

namespace {

using namespace rtxfa;

/* ------------------------------------------------------------------------------------------
 * The mma.sync route
 * ---------------------------------------------------------------------------------------- */

template <typename T, int D, int MT, int BN, int MASK>
__global__ void __launch_bounds__(NTHREADS)
    flash_fwd_kernel(const struct rtx_cuda_flash p, float scale_log2) {
    constexpr int BM = 16 * MT * NWARPS;
    constexpr bool QREG = MT == 1;
    constexpr int KSTEPS = D / 16; /* k-steps of S = Q K^T */
    constexpr int NT = BN / 8;     /* 8-key score tiles */
    constexpr int DT = D / 8;      /* 8-column output tiles */
    extern __shared__ uint4 smem_u4[];
    T *sq = reinterpret_cast<T *>(smem_u4);
    T *sk = sq + BM * D; /* 2 stages of BN x D */
    T *sv = sk + 2 * BN * D;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int lq = (int)p.lq, lk = (int)p.lk; /* at most INT32_MAX / 2 */
    const bool causal = p.causal != 0;
    const int m0 = query_tile_row<BM>(causal);
    const int wrow = warp * 16 * MT; /* the warp's first row in the tile */
    const int nblocks = key_tiles<BM, BN>(causal, lk, m0);

    for (int64_t bh = blockIdx.y; bh < p.bh; bh += gridDim.y) {
        const T *q, *k, *v;
        head_inputs<T, D>(p, bh, lq, lk, m0, q, k, v);
        const uint8_t *mb = nullptr;
        const T *ma = nullptr;
        if constexpr (MASK != MASK_NONE) {
            int64_t off = mask_lead_offset(p.mask, bh);
            if constexpr (MASK == MASK_BOOL)
                mb = static_cast<const uint8_t *>(p.mask.data) + off;
            else
                ma = static_cast<const T *>(p.mask.data) + off;
        }

        load_tile<T, D, BM>(sq, q, lq - m0, tid);
        cp_async_commit();
        load_tile<T, D, BN>(sk, k, lk, tid);
        load_tile<T, D, BN>(sv, v, lk, tid);
        cp_async_commit();

        float o[MT][DT][4];
        float mrow[MT][2], lrow[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            init_rows<D>(o[mt], mrow[mt], lrow[mt]);
        uint32_t qf[QREG ? KSTEPS : 1][4];
        cp_async_wait<1>(); /* Q is in */
        __syncthreads();
        if constexpr (QREG) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++)
                ldmatrix_x4(qf[kk],
                            smem_addr(sq + swz<D>(wrow + (lane & 15), kk * 2 + (lane >> 4))));
        }

        for (int j = 0; j < nblocks; j++) {
            const int buf = j & 1;
            const int n0 = j * BN;
            if (j + 1 < nblocks) {
                const int64_t next = (int64_t)(n0 + BN) * D;
                load_tile<T, D, BN>(sk + (buf ^ 1) * BN * D, k + next, lk - n0 - BN, tid);
                load_tile<T, D, BN>(sv + (buf ^ 1) * BN * D, v + next, lk - n0 - BN, tid);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            const T *skb = sk + buf * BN * D;
            const T *svb = sv + buf * BN * D;

            /* S = Q K^T */
            float s[MT][NT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[mt][nt][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t a[QREG ? 1 : MT][4];
                if constexpr (!QREG) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
                        ldmatrix_x4(a[mt], smem_addr(sq + swz<D>(wrow + mt * 16 + (lane & 15),
                                                                 kk * 2 + (lane >> 4))));
                } else {
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        a[0][r] = qf[kk][r];
                }
#pragma unroll
                for (int nn = 0; nn < NT / 2; nn++) {
                    uint32_t b[4];
                    const int kr = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
                    ldmatrix_x4(b, smem_addr(skb + swz<D>(kr, kk * 2 + ((lane >> 3) & 1))));
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816<T>(s[mt][2 * nn], a[QREG ? 0 : mt], b[0], b[1]);
                        mma16816<T>(s[mt][2 * nn + 1], a[QREG ? 0 : mt], b[2], b[3]);
                    }
                }
            }

            /* Masks, online softmax; P in place of S. */
            const bool edge = MASK != MASK_NONE || n0 + BN > lk || (causal && n0 + BN - 1 > m0);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                softmax_tile<BN, D, MASK, T>(s[mt], o[mt], mrow[mt], lrow[mt], edge, n0,
                                             m0 + wrow + mt * 16 + g, lk, lq, causal,
                                             scale_log2, t, p.mask, mb, ma);

            /* O += P V */
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    pack_p<T>(pa[mt], s[mt], ks);
#pragma unroll
                for (int dn = 0; dn < D / 16; dn++) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(
                        b, smem_addr(svb + swz<D>(ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                  dn * 2 + (lane >> 4))));
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816<T>(o[mt][2 * dn], pa[mt], b[0], b[1]);
                        mma16816<T>(o[mt][2 * dn + 1], pa[mt], b[2], b[3]);
                    }
                }
            }
            __syncthreads(); /* this stage is free for the load two tiles ahead */
        }

        /* out = O / l, rows past lq not written. */
        T *out = static_cast<T *>(p.out) + bh * (int64_t)lq * D;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                store_row<T, D>(out, o[mt], lrow[mt][h], h, m0 + wrow + mt * 16 + g + 8 * h, lq,
                                t);
        __syncthreads(); /* the next head reloads the tiles */
    }
}

/* ------------------------------------------------------------------------------------------
 * The wgmma route (sm_90a): warpgroup MMAs from shared-memory descriptors.
 * ---------------------------------------------------------------------------------------- */

/* Element offset of 16-byte chunk c of row r in a tile of ROWS rows of D elements stored as
 * D / 64 blocks of [ROWS][64], each row's chunks XOR-swizzled by (r & 7): wgmma's 128-byte
 * swizzle atom (8 rows x 128 bytes, 1024-byte aligned). */
template <int D, int ROWS> __device__ __forceinline__ int swz_wg(int r, int c) {
    return (c >> 3) * ROWS * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3);
}

template <typename T, int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile_wg(T *s, const T *g, int64_t nvalid, int tid) {
    constexpr int DC = D / 8, TOTAL = ROWS * DC;
#pragma unroll
    for (int i = 0; i < (TOTAL + NT - 1) / NT; i++) {
        int idx = tid + i * NT;
        if (TOTAL % NT != 0 && idx >= TOTAL) break;
        int r = idx / DC, c = idx % DC;
        bool ok = r < nvalid;
        const T *src = ok ? g + (int64_t)r * D + c * 8 : g;
        cp_async16(s + swz_wg<D, ROWS>(r, c), src, ok);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RTX_FLASH_WGMMA 1

/* A shared-memory matrix descriptor, 128-byte swizzle (byte offsets, multiples of 16). */
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* Keeps the compiler from moving accesses to r across the asynchronous MMAs. */
template <int N> __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

/* The accumulators of the m64n64 and m64n128 wgmma wrappers, as asm operands. */
#define RTX_WGMMA_D32                                                                             \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),           \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),       \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),    \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),    \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define RTX_WGMMA_D64                                                                             \
    RTX_WGMMA_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),  \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),    \
    "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),    \
    "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),    \
    "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

/* The accumulator registers of an m64n64 / m64n128 wgmma, as asm template text. */
#define RTX_WGMMA_ACC32                                                                           \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                     \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define RTX_WGMMA_ACC64                                                                           \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                     \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                            \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                            \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

/* The wgmma wrappers below are one asm statement each, for f16 or bf16 operands: the macros
 * write it once with the type (a string literal, "f16" or "bf16") pasted into the opcode. */
#define RTX_WGMMA_SS_N64(TY)                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                     \
            "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                           \
            RTX_WGMMA_ACC32                                                                       \
            ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                     \
        : RTX_WGMMA_D32                                                                           \
        : "l"(da), "l"(db), "r"(scale_d))
/* d (+)= A B for m64n64k16, A and B from shared memory (descriptors), K-major. */
template <typename T>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db,
                                             int scale_d) {
    if constexpr (std::is_same<T, __half>::value)
        RTX_WGMMA_SS_N64("f16");
    else
        RTX_WGMMA_SS_N64("bf16");
}

#define RTX_WGMMA_RS_N64(TY)                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
            "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                           \
            RTX_WGMMA_ACC32                                                                       \
            ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"                                          \
        : RTX_WGMMA_D32                                                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
/* d += A B for m64n64k16, A from registers, B from shared memory, MN-major. */
template <typename T>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (std::is_same<T, __half>::value)
        RTX_WGMMA_RS_N64("f16");
    else
        RTX_WGMMA_RS_N64("bf16");
}

#define RTX_WGMMA_SS_N128(TY)                                                                     \
    asm volatile(                                                                                 \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
            "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                          \
            RTX_WGMMA_ACC64                                                                       \
            ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                     \
        : RTX_WGMMA_D64                                                                           \
        : "l"(da), "l"(db), "r"(scale_d))
/* d (+)= A B for m64n128k16, A and B from shared memory (descriptors), K-major. */
template <typename T>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db,
                                              int scale_d) {
    if constexpr (std::is_same<T, __half>::value)
        RTX_WGMMA_SS_N128("f16");
    else
        RTX_WGMMA_SS_N128("bf16");
}

#define RTX_WGMMA_RS_N128(TY)                                                                     \
    asm volatile(                                                                                 \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                          \
            "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                          \
            RTX_WGMMA_ACC64                                                                       \
            ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"                                          \
        : RTX_WGMMA_D64                                                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
/* d += A B for m64n128k16, A from registers, B from shared memory, MN-major. */
template <typename T>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4],
                                              uint64_t db) {
    if constexpr (std::is_same<T, __half>::value)
        RTX_WGMMA_RS_N128("f16");
    else
        RTX_WGMMA_RS_N128("bf16");
}

template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db,
                                         int scale_d) {
    if constexpr (N == 64)
        wgmma_ss_n64<T>(d, da, db, scale_d);
    else
        wgmma_ss_n128<T>(d, da, db, scale_d);
}
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (N == 64)
        wgmma_rs_n64<T>(d, a, db);
    else
        wgmma_rs_n128<T>(d, a, db);
}

/* Makes the tiles cp.async wrote visible to wgmma's async proxy (before the barrier). */
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Issues S = Q K^T for warpgroup wg's 64 rows of the Q tile (BM rows at aq) against a K tile
 * at ak, both K-major (rows of q and k hold the d elements), and commits the group; the caller
 * waits for it. The K tile is in stage `tile` (STAGES 0) or tile % STAGES of the ring. */
template <typename T, int D, int BN, int BM, int STAGES>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], uint32_t aq, uint32_t ak, int tile,
                                         int wg) {
    fence_regs(s);
    wgmma_fence();
    const int stage = STAGES ? tile % STAGES : tile;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t qa = aq + ((kk >> 2) * BM * 64 + wg * 64 * 64) * 2 + (kk & 3) * 32;
        const uint32_t ka = ak + (stage * BN * D + (kk >> 2) * BN * 64) * 2 + (kk & 3) * 32;
        wgmma_ss<T, BN>(s, gmma_desc(qa, 16, 1024), gmma_desc(ka, 16, 1024), kk > 0);
    }
    wgmma_commit();
}

/* O += P V with P from registers (pack_p fragments) and the V tile in stage `stage` at av,
 * MN-major (rows of v hold the d elements); waits for every committed group. */
template <typename T, int D, int BN>
__device__ __forceinline__ void pv_wait(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4],
                                        uint32_t av, int stage) {
    constexpr int DB = D / 64; /* 64-column blocks */
    fence_regs(o);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ks++) {
        const uint32_t va = av + (stage * BN * D + ks * 16 * 64) * 2;
        wgmma_rs<T, D>(o, pa[ks], gmma_desc(va, DB > 1 ? BN * 128 : 16, 1024));
    }
    wgmma_commit();
    wgmma_wait0();
    fence_regs(o);
}
#endif

/* One CTA of NWG warpgroups owns BM = 64 * NWG query rows (64 per warpgroup); K/V tiles of BN
 * keys are shared by the warpgroups. No mask input (those take the mma.sync kernel). */
template <typename T, int D, int BN, int NWG>
__global__ void __launch_bounds__(NWG * 128, 1)
    flash_wgmma_kernel(const struct rtx_cuda_flash p, float scale_log2) {
#if defined(RTX_FLASH_WGMMA)
    constexpr int BM = 64 * NWG, NT = NWG * 128;
    constexpr int SN = BN / 2; /* S accumulators per thread */
    constexpr int ON = D / 2;  /* O accumulators per thread */
    extern __shared__ uint4 smem_u4[];
    /* 1024-byte alignment for the swizzle atoms (the launch asks for 1 KiB extra) */
    const uint32_t raw = smem_addr(smem_u4);
    char *base = reinterpret_cast<char *>(smem_u4) + ((1024 - (raw & 1023)) & 1023);
    T *sq = reinterpret_cast<T *>(base);
    T *sk = sq + BM * D; /* 2 stages of BN x D */
    T *sv = sk + 2 * BN * D;
    const uint32_t aq = smem_addr(sq), ak = smem_addr(sk), av = smem_addr(sv);

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int lq = (int)p.lq, lk = (int)p.lk;
    const bool causal = p.causal != 0;
    const int m0 = query_tile_row<BM>(causal);
    const int wrow = wg * 64 + warp * 16; /* this warp's first row in the tile */
    const int nblocks = key_tiles<BM, BN>(causal, lk, m0);

    for (int64_t bh = blockIdx.y; bh < p.bh; bh += gridDim.y) {
        const T *q, *k, *v;
        head_inputs<T, D>(p, bh, lq, lk, m0, q, k, v);
        load_tile_wg<T, D, BM, NT>(sq, q, lq - m0, tid);
        load_tile_wg<T, D, BN, NT>(sk, k, lk, tid);
        load_tile_wg<T, D, BN, NT>(sv, v, lk, tid);
        cp_async_commit();

        float o[ON], mrow[2], lrow[2];
        init_rows<D>(o, mrow, lrow);

        for (int j = 0; j < nblocks; j++) {
            const int buf = j & 1;
            const int n0 = j * BN;
            if (j + 1 < nblocks) {
                const int64_t next = (int64_t)(n0 + BN) * D;
                load_tile_wg<T, D, BN, NT>(sk + (buf ^ 1) * BN * D, k + next, lk - n0 - BN, tid);
                load_tile_wg<T, D, BN, NT>(sv + (buf ^ 1) * BN * D, v + next, lk - n0 - BN, tid);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            fence_proxy_async();
            __syncthreads();

            /* S = Q K^T */
            float s[SN];
            issue_qk<T, D, BN, BM, 0>(s, aq, ak, buf, wg);
            wgmma_wait0();
            fence_regs(s);

            const bool edge = n0 + BN > lk || (causal && n0 + BN - 1 > m0);
            softmax_tile<BN, D, MASK_NONE, T>(s, o, mrow, lrow, edge, n0, m0 + wrow + g, lk, lq,
                                              causal, scale_log2, t, p.mask, nullptr, nullptr);

            /* O += P V */
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++)
                pack_p<T>(pa[ks], s, ks);
            pv_wait<T, D, BN>(o, pa, av, buf);
            __syncthreads(); /* this stage is free for the load two tiles ahead */
        }

        T *out = static_cast<T *>(p.out) + bh * (int64_t)lq * D;
#pragma unroll
        for (int h = 0; h < 2; h++)
            store_row<T, D>(out, o, lrow[h], h, m0 + wrow + g + 8 * h, lq, t);
        __syncthreads(); /* the next head reloads the tiles */
    }
#else
    __trap(); /* compiled without sm_90a: the launcher never picks this kernel */
#endif
}

/* Allows kern smem bytes of dynamic shared memory, then launches it with `threads` threads
 * over the grid (query tiles of BM rows, heads up to 65535: CTAs loop over the rest). */
template <int BM, typename K>
cudaError_t launch_kernel(K kern, int threads, size_t smem, const struct rtx_cuda_flash *p,
                          cudaStream_t stream) {
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    int64_t mblocks = (p->lq + BM - 1) / BM;
    int64_t heads = p->bh < 65535 ? p->bh : 65535;
    dim3 grid((unsigned)mblocks, (unsigned)heads);
    kern<<<grid, threads, smem, stream>>>(*p, p->scale * LOG2E);
    return cudaGetLastError();
}

/* Q, two K and two V stages, and 1 KiB to align them. */
template <typename T, int D, int BN, int NWG>
cudaError_t launch_wgmma(const struct rtx_cuda_flash *p, cudaStream_t stream) {
    constexpr int BM = 64 * NWG;
    return launch_kernel<BM>(flash_wgmma_kernel<T, D, BN, NWG>, NWG * 128,
                             (size_t)(BM + 4 * BN) * D * sizeof(T) + 1024, p, stream);
}

/* The pipelined wgmma kernel: while a warpgroup runs the softmax of key tile j, its tensor
 * cores already compute S for tile j + 1 (two S accumulator sets), and P V of tile j is issued
 * behind it; K streams three tiles deep and V two, so the loads of tiles j + 2 / j + 3 are in
 * flight during tile j. One cp.async group per iteration keeps the waits uniform. */
template <typename T, int D, int BN, int NWG>
__global__ void __launch_bounds__(NWG * 128, 1)
    flash_wgmma_pipe_kernel(const struct rtx_cuda_flash p, float scale_log2) {
#if defined(RTX_FLASH_WGMMA)
    constexpr int BM = 64 * NWG, NT = NWG * 128;
    constexpr int SN = BN / 2, ON = D / 2;
    extern __shared__ uint4 smem_u4[];
    const uint32_t raw = smem_addr(smem_u4);
    char *base = reinterpret_cast<char *>(smem_u4) + ((1024 - (raw & 1023)) & 1023);
    T *sq = reinterpret_cast<T *>(base);
    T *sk = sq + BM * D;     /* 3 stages of BN x D */
    T *sv = sk + 3 * BN * D; /* 2 stages */
    const uint32_t aq = smem_addr(sq), ak = smem_addr(sk), av = smem_addr(sv);

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int lq = (int)p.lq, lk = (int)p.lk;
    const bool causal = p.causal != 0;
    const int m0 = query_tile_row<BM>(causal);
    const int row0 = m0 + wg * 64 + warp * 16 + g;
    const int nblocks = key_tiles<BM, BN>(causal, lk, m0);

    for (int64_t bh = blockIdx.y; bh < p.bh; bh += gridDim.y) {
        const T *q, *k, *v;
        head_inputs<T, D>(p, bh, lq, lk, m0, q, k, v);
        auto load_k = [&](int j) {
            if (j < nblocks)
                load_tile_wg<T, D, BN, NT>(sk + (j % 3) * BN * D, k + (int64_t)j * BN * D,
                                           lk - j * BN, tid);
        };
        auto load_v = [&](int j) {
            if (j < nblocks)
                load_tile_wg<T, D, BN, NT>(sv + (j & 1) * BN * D, v + (int64_t)j * BN * D,
                                           lk - j * BN, tid);
        };
        /* groups: {Q, K0, K1, V0}, then {K2, V1}; iteration j then adds {K(j+3), V(j+2)} */
        load_tile_wg<T, D, BM, NT>(sq, q, lq - m0, tid);
        load_k(0);
        load_k(1);
        load_v(0);
        cp_async_commit();
        load_k(2);
        load_v(1);
        cp_async_commit();

        float o[ON], mrow[2], lrow[2];
        init_rows<D>(o, mrow, lrow);
        float s[SN], sn[SN];
#pragma unroll
        for (int i = 0; i < SN; i++)
            sn[i] = 0.0f;

        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        issue_qk<T, D, BN, BM, 3>(s, aq, ak, 0, wg);
        wgmma_wait0();
        fence_regs(s);

        for (int j = 0; j < nblocks; j++) {
            const int n0 = j * BN;
            const bool more = j + 1 < nblocks;
            cp_async_wait<1>(); /* K(j + 1) and V(j) are in */
            fence_proxy_async();
            __syncthreads();
            if (more) /* S for tile j + 1, in flight during the softmax of tile j */
                issue_qk<T, D, BN, BM, 3>(sn, aq, ak, j + 1, wg);
            const bool edge = n0 + BN > lk || (causal && n0 + BN - 1 > m0);
            softmax_tile<BN, D, MASK_NONE, T>(s, o, mrow, lrow, edge, n0, row0, lk, lq, causal,
                                              scale_log2, t, p.mask, nullptr, nullptr);
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++)
                pack_p<T>(pa[ks], s, ks);
            pv_wait<T, D, BN>(o, pa, av, j & 1);
            fence_regs(sn);
            __syncthreads(); /* K(j) and V(j) are free: refill them three and two tiles on */
            load_k(j + 3);
            load_v(j + 2);
            cp_async_commit();
#pragma unroll
            for (int i = 0; i < SN; i++)
                s[i] = sn[i];
        }
        cp_async_wait<0>();

        T *out = static_cast<T *>(p.out) + bh * (int64_t)lq * D;
#pragma unroll
        for (int h = 0; h < 2; h++)
            store_row<T, D>(out, o, lrow[h], h, row0 + 8 * h, lq, t);
        __syncthreads(); /* the next head reloads the tiles */
    }
#else
    __trap(); /* compiled without sm_90a: the launcher never picks this kernel */
#endif
}

/* Q, three K and two V stages, and 1 KiB to align them. */
template <typename T, int D, int BN, int NWG>
cudaError_t launch_wgmma_pipe(const struct rtx_cuda_flash *p, cudaStream_t stream) {
    constexpr int BM = 64 * NWG;
    return launch_kernel<BM>(flash_wgmma_pipe_kernel<T, D, BN, NWG>, NWG * 128,
                             (size_t)(BM + 5 * BN) * D * sizeof(T) + 1024, p, stream);
}

/* Q, two K and two V stages. */
template <typename T, int D, int MT, int BN, int MASK>
cudaError_t launch(const struct rtx_cuda_flash *p, cudaStream_t stream) {
    constexpr int BM = 16 * MT * NWARPS;
    return launch_kernel<BM>(flash_fwd_kernel<T, D, MT, BN, MASK>, NTHREADS,
                             (size_t)(BM + 4 * BN) * D * sizeof(T), p, stream);
}

/* Masked problems take the mma.sync kernel with 16 rows per warp (the wgmma kernels take no
 * mask; one tile per mask kind bounds the number of kernels compiled). */
template <typename T, int D>
cudaError_t launch_masked(const struct rtx_cuda_flash *p, cudaStream_t stream) {
    if (p->mask.dt == RTX_BOOL) return launch<T, D, 1, 64, MASK_BOOL>(p, stream);
    return launch<T, D, 1, 64, MASK_ADD>(p, stream);
}

template <typename T, int D>
cudaError_t launch_dim(const struct rtx_cuda_flash *p, cudaStream_t stream) {
    int tile = p->tile;
    /* The wgmma kernels exist as sm_90a code only (the Makefile's flags for this file). */
    const bool wgmma = p->cc == 90;
    if (p->mask.data != nullptr) return launch_masked<T, D>(p, stream);
    if (tile >= RTX_FLASH_TILE_WG1_N64 && !wgmma) tile = RTX_FLASH_TILE_AUTO;
    if (tile == RTX_FLASH_TILE_AUTO) /* the measured defaults (docs/gpu.md) */
        tile = !wgmma    ? RTX_FLASH_TILE_M128_N64
               : D == 64 ? RTX_FLASH_TILE_WG1_N64
                         : RTX_FLASH_TILE_WP1_N64;
    switch (tile) {
    case RTX_FLASH_TILE_M64_N64: return launch<T, D, 1, 64, MASK_NONE>(p, stream);
    case RTX_FLASH_TILE_M128_N64: return launch<T, D, 2, 64, MASK_NONE>(p, stream);
    case RTX_FLASH_TILE_WG1_N64: return launch_wgmma<T, D, 64, 1>(p, stream);
    case RTX_FLASH_TILE_WP1_N64: return launch_wgmma_pipe<T, D, 64, 1>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} /* namespace */

extern "C" bool rtx__cuda_flash_supported(enum rtx_dtype dt, int64_t d, int64_t dv, int64_t lq,
                                          int64_t lk, const void *q, const void *k, const void *v,
                                          const void *out, const struct rtx_cuda_attn_mask *mask,
                                          int cc) {
    if (dt != RTX_F16 && dt != RTX_BF16) return false;
    if (d != dv || (d != 64 && d != 128)) return false;
    if (lq < 0 || lk < 0 || lq > INT32_MAX / 2 || lk > INT32_MAX / 2) return false;
    if ((uintptr_t)q % 16 || (uintptr_t)k % 16 || (uintptr_t)v % 16 || (uintptr_t)out % 4)
        return false;
    if (mask && mask->data && mask->dt != RTX_BOOL && mask->dt != dt) return false;
    return cc >= 80;
}

extern "C" cudaError_t rtx__cuda_flash_attention(const struct rtx_cuda_flash *p,
                                                 cudaStream_t stream) {
    if (p->tile < 0 || p->tile >= RTX_FLASH_TILE_COUNT || p->bh < 0 ||
        !rtx__cuda_flash_supported((enum rtx_dtype)p->dt, p->d, p->d, p->lq, p->lk, p->q, p->k,
                                   p->v, p->out, &p->mask, p->cc))
        return cudaErrorInvalidValue;
    if (p->bh == 0 || p->lq == 0 || p->lk == 0) return cudaSuccess;
    if (p->dt == RTX_F16)
        return p->d == 64 ? launch_dim<__half, 64>(p, stream) : launch_dim<__half, 128>(p, stream);
    return p->d == 64 ? launch_dim<__nv_bfloat16, 64>(p, stream)
                      : launch_dim<__nv_bfloat16, 128>(p, stream);
}

extern "C" int rtx__cuda_flash_tile_parse(const char *name) {
    static const char *const names[] = {"auto", "m64n64", "m128n64", "wg1n64", "wp1n64"};
    static_assert(sizeof names / sizeof names[0] == RTX_FLASH_TILE_COUNT, "one name per tile");
    for (int i = 0; i < RTX_FLASH_TILE_COUNT; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}
