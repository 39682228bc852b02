/*
 * paged-prefill.cu - paged_attention on the tensor cores (f16 / bf16, head dims 64 and 128):
 * the sequences of a step with p.tc_rows query rows or more (the prompt chunks, and in wide
 * batches the decode rows too: generation.c's tensor_core_rows), attending to their keys in
 * the paged KV cache, after FlashAttention-2 with the tiles of attention-flash.cu's mma.sync
 * kernel (flash-common.cuh). generation.cu's per-row kernel serves the other rows (decode in
 * small batches, where it splits the keys into partitions) and every row when this kernel
 * does not apply (generation-kernels.h: rtx__cuda_paged_prefill_supported). The row loader
 * and the softmax fold are this file's own: with them shared, the dense kernels' f16 d = 128
 * additive-mask case hit an illegal address on the H200 (decision 145).
 *
 * DESIGN
 * Rows. A CTA's 64 MMA rows are (token, query head) pairs of one sequence and one KV head:
 * TPT = 64 / G consecutive tokens of the sequence's chunk times the G query heads that share
 * the KV head (grouped-query attention packed into the rows, so each key and value tile is
 * loaded once for all of them); row r is token r / G, head hk * G + r % G, and rows past the
 * chunk's tokens (or past TPT * G) are zero and never stored. Row r's token at position
 * ctx - n + i sees keys 0 .. ctx - n + i: the causal limit is per row, so the masking step
 * here takes the limit row by row (flash-common.cuh's softmax_tile takes a diagonal).
 *
 * Work. The grid is (tile slots, KV heads) with ceil(T / TPT) + S slots, at least as many as
 * the chunks' tiles; warp 0 of each CTA finds its (sequence, tile) by a warp-wide prefix sum
 * of the sequences' tile counts (32 sequences a round), and a slot past the last tile returns.
 * Key tiles (64 keys) are gathered through the block table by cp.async, 16 bytes a thread,
 * two stages for K and V, while the tile before is in use; the CTA stops at the last key its
 * last token sees. A node whose metadata check failed (the flag word) does nothing.
 *
 * Partitions. A prompt suffix after a cached prefix (64 new tokens over 1,000 cached keys) has
 * few tiles and long key ranges: 5 tiles x 8 KV heads kept 40 CTAs busy for 17 key tiles each
 * while the rest of the device idled. When the CTAs would not fill the device twice, the grid
 * gets a third dimension of tc_parts partitions: the CTA of partition k takes the k-th of
 * tc_parts equal runs of whole key tiles up to its tile's last key, and writes its rows'
 * unnormalized sums, running max (in natural-log units) and sum to tc_acc and tc_ml; then
 * combine_kernel merges the partitions of each row (a partition whose keys are all masked
 * for a row has sum 0 and adds nothing), as generation.cu's per-row kernel does its own.
 */
#include <math.h>

#include "kernels/cuda/flash-common.cuh"
#include "kernels/cuda/generation-kernels.h"

namespace {

using namespace rtxfa;

constexpr int PF_BM = 64; /* MMA rows per CTA: 4 warps x 16 */
constexpr int PF_BN = 64; /* keys per tile */
constexpr int PF_MAX_PARTS = 16;
constexpr float LN2 = 0.6931471805599453f;

/* Queues ROWS rows of D elements into the swizzled tile s; row r comes from src(r), or is
 * zero-filled when src(r) is null (any global address stands in: nothing is read). */
template <typename T, int D, int ROWS, typename F>
__device__ __forceinline__ void load_rows(T *s, F src, const T *any, int tid) {
    constexpr int DC = D / 8;
    static_assert((ROWS * DC) % NTHREADS == 0, "tile chunks must split evenly");
#pragma unroll
    for (int i = 0; i < ROWS * DC / NTHREADS; i++) {
        int idx = tid + i * NTHREADS;
        int r = idx / DC, c = idx % DC;
        const T *g = src(r);
        cp_async16(s + swz<D>(r, c), g ? g + c * 8 : any, g != nullptr);
    }
}

/* The rest of an online-softmax step for the thread's row h of two, once the scores of its
 * NT 8-key tiles are scaled and masked in s and mx is their maximum over the thread's
 * columns: the row's maximum over its quad, the probabilities in place of the scores, the
 * running max and partial sum, and O rescaled. */
template <int NT, int D, typename S, typename O>
__device__ __forceinline__ void softmax_fold(S &s, O &o, float &mrow, float &lrow, float mx,
                                             int h) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(mrow, mx);
    const float mref = mnew == -INFINITY ? 0.0f : mnew;
    const float alpha = ex2(mrow - mref);
    mrow = mnew;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float pe = ex2(acc(s, nt, 2 * h + e) - mref);
            acc(s, nt, 2 * h + e) = pe;
            sum += pe;
        }
    }
    lrow = lrow * alpha + sum;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
        acc(o, dt, 2 * h) *= alpha;
        acc(o, dt, 2 * h + 1) *= alpha;
    }
}

/* The (sequence, tile) of slot `slot` among the tiles of the sequences this kernel serves
 * (those of min_rows rows or more have ceil(n / tpt) tiles); sequence -1 past the last. Warp 0
 * only; lane 0's result. */
__device__ __forceinline__ void find_tile(const int32_t *qs, int S, int tpt, int min_rows,
                                          int slot, int *seq, int *tile) {
    const int lane = threadIdx.x & 31;
    int base = 0;
    *seq = -1;
    *tile = 0;
    for (int s0 = 0; s0 < S; s0 += 32) {
        const int s = s0 + lane;
        const int n = s < S ? qs[s + 1] - qs[s] : 0;
        const int tiles = n >= min_rows ? (n + tpt - 1) / tpt : 0;
        int inc = tiles;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, inc, off);
            if (lane >= off) inc += v;
        }
        const int excl = inc - tiles;
        const bool mine = tiles > 0 && slot >= base + excl && slot < base + inc;
        const unsigned ball = __ballot_sync(0xffffffffu, mine);
        if (ball) {
            const int src = __ffs(ball) - 1;
            const int first = __shfl_sync(0xffffffffu, excl, src);
            *seq = s0 + src;
            *tile = slot - base - first;
            return;
        }
        base += __shfl_sync(0xffffffffu, inc, 31);
    }
}

/* One key tile of the online softmax for a warp's 16 rows: as flash-common.cuh's
 * softmax_tile, with the thread's two rows' last visible keys lim[h] (-1: an empty row). The
 * scores are scaled by scale * log2(e) (ex2 then gives e^x). */
template <int D, typename S, typename O>
__device__ __forceinline__ void softmax_rows(S &s, O &o, float (&mrow)[2], float (&lrow)[2],
                                             bool edge, int n0, const int (&lim)[2],
                                             float scale_log2, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < PF_BN / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = acc(s, nt, 2 * h + e) * scale_log2;
                if (edge && n0 + nt * 8 + 2 * t + e > lim[h]) x = -INFINITY;
                acc(s, nt, 2 * h + e) = x;
                mx = fmaxf(mx, x);
            }
        }
        softmax_fold<PF_BN / 8, D>(s, o, mrow[h], lrow[h], mx, h);
    }
}

/* Heads of 64 are held to 128 registers (158 unbounded; ptxas spills 20 bytes) so that four
 * CTAs share an SM instead of three: the kernel is latency-bound (ncu at ~65 keys: 0.41
 * instructions a scheduler-cycle), and a 256-sequence decode step of the Llama-3.2-1B
 * configuration went 5.66 -> 5.43 ms at ~65 keys, 7.40 -> 6.92 ms at ~520, its prefill of
 * 131,072 tokens 628 -> 596 ms (H200). Heads of 128 would spill 416 bytes: unbounded. */
template <typename T, int D>
__global__ void __launch_bounds__(NTHREADS, D == 64 ? 4 : 1)
    paged_prefill_kernel(const struct rtx_cuda_paged p, float scale_log2, int tpt) {
    if (p.fault != NULL && *(volatile const unsigned long long *)p.fault != RTX__PAGED_NO_FAULT)
        return; /* every thread alike, before any barrier */
    constexpr int KSTEPS = D / 16, NT = PF_BN / 8, DT = D / 8;
    extern __shared__ uint4 smem_u4[];
    __shared__ int s_seq, s_tile;
    T *sq = reinterpret_cast<T *>(smem_u4);
    T *sk = sq + PF_BM * D; /* 2 stages of PF_BN x D */
    T *sv = sk + 2 * PF_BN * D;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    if (warp == 0) {
        int seq, tile;
        find_tile(p.qs, (int)p.g.S, tpt, p.tc_rows, (int)blockIdx.x, &seq, &tile);
        if (lane == 0) s_seq = seq, s_tile = tile;
    }
    __syncthreads();
    const int s = s_seq;
    if (s < 0) return;
    const int G = (int)p.g.G, H = (int)p.g.H, Hkv = (int)p.g.Hkv, BS = (int)p.g.BS;
    const int hk = (int)blockIdx.y;
    const int q0 = p.qs[s], n = p.qs[s + 1] - q0, ctx = p.ctx[s];
    const int tok0 = s_tile * tpt;
    const int ntok = n - tok0 < tpt ? n - tok0 : tpt;
    const int rows = ntok * G;
    const int first = ctx - n + tok0; /* the last key the tile's first token sees */
    const int max_keys = (int)(p.g.B * p.g.BS);
    int n_end = first + ntok < max_keys ? first + ntok : max_keys;
    n_end = n_end > 0 ? n_end : 0;
    const int parts = p.tc_parts > 1 ? p.tc_parts : 1, part = (int)blockIdx.z;
    int kstart = 0, kend = n_end; /* this partition's keys: whole tiles but the last */
    if (parts > 1) {
        const int seg = ((n_end + parts - 1) / parts + PF_BN - 1) / PF_BN * PF_BN;
        kstart = part * seg < n_end ? part * seg : n_end;
        kend = kstart + seg < n_end ? kstart + seg : n_end;
    }
    const int nblocks = (kend - kstart + PF_BN - 1) / PF_BN;
    const T *q = static_cast<const T *>(p.q);
    const T *kc = static_cast<const T *>(p.kc), *vc = static_cast<const T *>(p.vc);
    const int32_t *table = p.tables + (int64_t)s * p.g.B;

    auto q_row = [&](int r) -> const T * {
        return r < rows ? q + ((int64_t)(q0 + tok0 + r / G) * H + hk * G + r % G) * D : nullptr;
    };
    auto kv_row = [&](const T *cache, int j) -> const T * {
        if (j >= n_end) return nullptr;
        int64_t slot = (int64_t)table[j / BS] * BS + j % BS;
        return cache + (slot * Hkv + hk) * D;
    };
    load_rows<T, D, PF_BM>(sq, q_row, q, tid);
    cp_async_commit();
    load_rows<T, D, PF_BN>(sk, [&](int r) { return kv_row(kc, kstart + r); }, kc, tid);
    load_rows<T, D, PF_BN>(sv, [&](int r) { return kv_row(vc, kstart + r); }, vc, tid);
    cp_async_commit();

    float o[DT][4];
    float mrow[2], lrow[2];
    init_rows<D>(o, mrow, lrow);
    const int wrow = warp * 16;
    /* a warp whose 16 rows are all past the tile's (a decode row's tile has G of 64) loads
     * its share and meets every barrier, but computes nothing: warp-uniform */
    const bool idle = wrow >= rows;
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wrow + g + 8 * h;
        lim[h] = r < rows ? first + r / G : -1;
    }
    uint32_t qf[KSTEPS][4];
    cp_async_wait<1>(); /* Q is in */
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++)
        if (!idle)
            ldmatrix_x4(qf[kk], smem_addr(sq + swz<D>(wrow + (lane & 15), kk * 2 + (lane >> 4))));

    for (int j = 0; j < nblocks; j++) {
        const int buf = j & 1;
        const int n0 = kstart + j * PF_BN;
        if (j + 1 < nblocks) {
            const int nn0 = n0 + PF_BN;
            load_rows<T, D, PF_BN>(sk + (buf ^ 1) * PF_BN * D,
                                   [&](int r) { return kv_row(kc, nn0 + r); }, kc, tid);
            load_rows<T, D, PF_BN>(sv + (buf ^ 1) * PF_BN * D,
                                   [&](int r) { return kv_row(vc, nn0 + r); }, vc, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (idle) {
            __syncthreads();
            continue;
        }
        const T *skb = sk + buf * PF_BN * D;
        const T *svb = sv + buf * PF_BN * D;

        float sc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sc[nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
            for (int nn = 0; nn < NT / 2; nn++) {
                uint32_t b[4];
                const int kr = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
                ldmatrix_x4(b, smem_addr(skb + swz<D>(kr, kk * 2 + ((lane >> 3) & 1))));
                mma16816<T>(sc[2 * nn], qf[kk], b[0], b[1]);
                mma16816<T>(sc[2 * nn + 1], qf[kk], b[2], b[3]);
            }
        }

        /* keys past the first token's limit need the per-row mask */
        const bool edge = n0 + PF_BN - 1 > first;
        softmax_rows<D>(sc, o, mrow, lrow, edge, n0, lim, scale_log2, t);

#pragma unroll
        for (int ks = 0; ks < PF_BN / 16; ks++) {
            uint32_t pa[4];
            pack_p<T>(pa, sc, ks);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t b[4];
                ldmatrix_x4_trans(
                    b, smem_addr(svb + swz<D>(ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                              dn * 2 + (lane >> 4))));
                mma16816<T>(o[2 * dn], pa, b[0], b[1]);
                mma16816<T>(o[2 * dn + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* this stage is free for the load two tiles ahead */
    }
    cp_async_wait<0>(); /* an empty partition's prologue loads */

    if (parts > 1) { /* DESIGN: partitions */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = wrow + g + 8 * h;
            float l = lrow[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            if (r >= rows) continue;
            const int64_t at = ((int64_t)(q0 + tok0 + r / G) * H + hk * G + r % G) * parts + part;
            float *dst = p.tc_acc + at * D + 2 * t;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                dst[dt * 8] = acc(o, dt, 2 * h);
                dst[dt * 8 + 1] = acc(o, dt, 2 * h + 1);
            }
            if (t == 0) {
                p.tc_ml[2 * at] = mrow[h] == -INFINITY ? -INFINITY : mrow[h] * LN2;
                p.tc_ml[2 * at + 1] = l;
            }
        }
        return;
    }

    T *y = static_cast<T *>(p.y);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wrow + g + 8 * h;
        const bool ok = r < rows;
        T *row = ok ? y + ((int64_t)(q0 + tok0 + r / G) * H + hk * G + r % G) * D : y;
        store_row<T, D>(row, o, lrow[h], h, ok ? 0 : 1, 1, t);
    }
}

/* Merges the partitions of row blockIdx.x, head blockIdx.y when the row's sequence is this
 * file's (DESIGN: partitions). */
template <typename T>
__global__ void combine_kernel(const struct rtx_cuda_paged p) {
    if (p.fault != NULL && *(volatile const unsigned long long *)p.fault != RTX__PAGED_NO_FAULT)
        return;
    const int64_t row = blockIdx.x, S = p.g.S;
    int64_t lo = 0, hi = S + 1; /* the sequence of the row: the last s with qs[s] <= row */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (p.qs[mid] <= row) lo = mid + 1;
        else hi = mid;
    }
    const int64_t s = lo - 1;
    if (s < 0 || s >= S || p.qs[s + 1] - p.qs[s] < p.tc_rows) return;
    const int64_t D = p.g.D, P = p.tc_parts, th = row * p.g.H + blockIdx.y;
    const float *ml = p.tc_ml + th * P * 2, *pa = p.tc_acc + th * P * D;
    float mx = -INFINITY, l = 0.0f;
    bool nan = false; /* a NaN score makes a partition's sum NaN: the row is NaN, as unsplit */
    for (int64_t k = 0; k < P; k++) {
        nan = nan || ml[2 * k + 1] != ml[2 * k + 1];
        if (ml[2 * k + 1] > 0.0f) mx = fmaxf(mx, ml[2 * k]);
    }
    for (int64_t k = 0; k < P; k++)
        if (ml[2 * k + 1] > 0.0f) l += ml[2 * k + 1] * expf(ml[2 * k] - mx);
    T *y = static_cast<T *>(p.y) + th * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int64_t k = 0; k < P; k++)
            if (ml[2 * k + 1] > 0.0f) a += pa[k * D + d] * expf(ml[2 * k] - mx);
        y[d] = rtxcu::from_f32<T>(nan ? NAN : l > 0.0f ? a / l : 0.0f);
    }
}

template <typename T, int D>
cudaError_t launch(const struct rtx_cuda_paged *p, cudaStream_t stream) {
    const size_t smem = (size_t)(PF_BM + 4 * PF_BN) * D * sizeof(T);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(paged_prefill_kernel<T, D>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return e;
    }
    const int tpt = PF_BM / (int)p->g.G;
    const int parts = p->tc_parts > 1 ? p->tc_parts : 1;
    dim3 grid((unsigned)((p->g.T + tpt - 1) / tpt + p->g.S), (unsigned)p->g.Hkv, (unsigned)parts);
    paged_prefill_kernel<T, D><<<grid, NTHREADS, smem, stream>>>(*p, p->g.scale * LOG2E, tpt);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || parts == 1) return e;
    combine_kernel<T><<<dim3((unsigned)p->g.T, (unsigned)p->g.H), D, 0, stream>>>(*p);
    return cudaGetLastError();
}

} /* namespace */

extern "C" bool rtx__cuda_paged_prefill_supported(const struct rtx_cuda_paged *p, int cc) {
    const struct rtx__paged_geom *g = &p->g;
    if (p->dt != RTX_F16 && p->dt != RTX_BF16) return false;
    if (g->D != 64 && g->D != 128) return false;
    if (g->G < 1 || g->G > PF_BM || g->Hkv > 65535) return false;
    if (g->T + g->S > INT32_MAX / 2 || g->B * g->BS > INT32_MAX) return false;
    uintptr_t bits = (uintptr_t)p->q | (uintptr_t)p->kc | (uintptr_t)p->vc | (uintptr_t)p->y;
    return bits % 16 == 0 && cc >= 80;
}

extern "C" int rtx__cuda_paged_prefill_parts(const struct rtx_cuda_paged *p, int sms) {
    const int64_t tpt = PF_BM / (p->g.G > 0 ? p->g.G : 1);
    const int64_t ctas = ((p->g.T + tpt - 1) / tpt + p->g.S) * p->g.Hkv, want = 2 * (int64_t)sms;
    if (ctas <= 0 || ctas >= want) return 1;
    int64_t parts = (want + ctas - 1) / ctas, tiles = p->g.B * p->g.BS / PF_BN;
    parts = parts < tiles ? parts : tiles;
    parts = parts < PF_MAX_PARTS ? parts : PF_MAX_PARTS;
    return parts > 1 ? (int)parts : 1;
}

extern "C" cudaError_t rtx__cuda_paged_prefill_launch(const struct rtx_cuda_paged *p,
                                                      cudaStream_t stream) {
    if (p->g.T == 0 || p->g.S == 0) return cudaSuccess;
    if (p->dt == RTX_F16)
        return p->g.D == 64 ? launch<__half, 64>(p, stream) : launch<__half, 128>(p, stream);
    return p->g.D == 64 ? launch<__nv_bfloat16, 64>(p, stream)
                        : launch<__nv_bfloat16, 128>(p, stream);
}
