/*
 * generation.cu - the kernels of rope and paged_attention on the CUDA backend
 * (generation-kernels.h), for f32, f16 and bf16.
 *
 * DESIGN
 * rope: one block per token (a grid-stride loop past the grid's size). The block computes the
 * angles of a chunk of ROPE_CHUNK frequencies once into shared memory (positions[t] *
 * inv_freq[i] in f32, then sincosf, as docs/ops.md says), then its threads rotate that chunk's
 * pairs in every head; the dims past the rotated ones are copied.
 *
 * paged_attention runs as three or four kernels. The check kernel looks at every metadata
 * entry (the rules of kernels/gen-geometry.h, shared with the CPU) and keeps the smallest
 * fault key with atomicMin in a flag word; the kernels after it return at once when the word
 * is set, so nothing is written or read through a bad entry, and the backend's synchronize
 * reads the word (generation.c defers it) and fails with the CPU's message. The write kernel copies each row's k and v into its slot, one
 * block per row, in the widest unit the row and the pointers allow. The attention kernel runs
 * one block of PA_THREADS threads per (query row, KV head, key partition) and serves the G
 * query heads that share the KV head, so each key and value is read from the cache once per
 * row rather than once per query head (decode is bound by those reads). The block finds its
 * row's sequence by a binary search of query_start, loads its G queries (scaled, f32) into
 * shared memory, then walks its keys in tiles: a tile of keys and values is gathered through
 * the block table into shared memory (16-byte loads where the rows allow), each warp takes
 * keys and computes their G scores with its lanes over the head dims and a shuffle sum (when a
 * key is at most 32 16-byte units, a warp takes several keys at once, a group of lanes per
 * key summing within the group: tile_scores_grouped); one warp per head then folds the tile
 * into that head's running max and sum (an online softmax, f32, as FlashAttention), and the
 * threads, one per (head, dim), fold the tile's p . v into
 * f32 accumulators in shared memory. A row attends to keys 0 .. its position, so its last
 * partition simply ends there and no mask is needed. With one partition the block writes the
 * normalized row; when rows x KV heads are too few to fill the device (a short decode batch
 * over long contexts), the keys are split into partitions whose partial max, sum and
 * accumulator go to scratch, and a combine kernel merges them (flash-decoding). Padding rows
 * write zeros.
 */
#include <math.h>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/generation-kernels.h"

#define ROPE_THREADS 256
#define ROPE_CHUNK 256 /* frequencies per shared-memory chunk: one per thread */
#define PA_THREADS 128 /* 4 warps */
#define PA_WARPS (PA_THREADS / 32)
#define CHECK_THREADS 256
#define MAX_BLOCKS (1 << 20) /* grid-stride beyond this */

using namespace rtxcu;

static unsigned grid_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

/* ------------------------------------------------------------------------------------------
 * rope
 * ---------------------------------------------------------------------------------------- */

template <typename T> __global__ static void rope_kernel(const struct rtx_cuda_rope p) {
    __shared__ float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    const struct rtx__rope_geom g = p.g;
    const T *x = (const T *)p.x;
    T *y = (T *)p.y;
    int64_t pass = g.D - 2 * g.half;
    for (int64_t t = blockIdx.x; t < g.T; t += gridDim.x) {
        float pos =
            g.pos64 ? (float)((const int64_t *)p.pos)[t] : (float)((const int32_t *)p.pos)[t];
        for (int64_t c0 = 0; c0 < g.half; c0 += ROPE_CHUNK) {
            int64_t nc = g.half - c0 < ROPE_CHUNK ? g.half - c0 : ROPE_CHUNK;
            __syncthreads(); /* the previous chunk is done with cs and sn */
            if (threadIdx.x < nc)
                sincosf(pos * p.inv_freq[c0 + threadIdx.x], &sn[threadIdx.x], &cs[threadIdx.x]);
            __syncthreads();
            for (int64_t i = threadIdx.x; i < g.H * nc; i += blockDim.x) {
                int64_t h = i / nc, c = i % nc, pair = c0 + c, base = (t * g.H + h) * g.D;
                int64_t ia = base + (g.interleaved ? 2 * pair : pair);
                int64_t ib = base + (g.interleaved ? 2 * pair + 1 : pair + g.half);
                float a = to_f32(x[ia]), b = to_f32(x[ib]);
                y[ia] = from_f32<T>(a * cs[c] - b * sn[c]);
                y[ib] = from_f32<T>(b * cs[c] + a * sn[c]);
            }
        }
        for (int64_t i = threadIdx.x; i < g.H * pass; i += blockDim.x) {
            int64_t at = (t * g.H + i / pass) * g.D + 2 * g.half + i % pass;
            y[at] = x[at];
        }
    }
}

extern "C" cudaError_t rtx__cuda_rope_launch(const struct rtx_cuda_rope *p, cudaStream_t stream) {
    if (p->g.T * p->g.H * p->g.D == 0) return cudaSuccess;
    unsigned grid = (unsigned)(p->g.T < MAX_BLOCKS ? p->g.T : MAX_BLOCKS);
    switch (p->dt) {
    case RTX_F32: rope_kernel<float><<<grid, ROPE_THREADS, 0, stream>>>(*p); break;
    case RTX_F16: rope_kernel<__half><<<grid, ROPE_THREADS, 0, stream>>>(*p); break;
    case RTX_BF16: rope_kernel<__nv_bfloat16><<<grid, ROPE_THREADS, 0, stream>>>(*p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------
 * paged_attention: metadata check and cache writes
 * ---------------------------------------------------------------------------------------- */

/* Whether the node's metadata check found a fault (the kernels after it then do nothing). */
__device__ static inline bool faulted(const struct rtx_cuda_paged &p) {
    return p.fault != NULL && *(volatile const unsigned long long *)p.fault != RTX__PAGED_NO_FAULT;
}

/* Items: query_start (S + 1), context_lens (S), block_tables (S * B), slot_mapping (T). */
__global__ static void check_kernel(const struct rtx_cuda_paged p) {
    const struct rtx__paged_geom g = p.g;
    int64_t n_qs = g.S + 1, n_tb = g.S * g.B, total = n_qs + g.S + n_tb + g.T;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        uint64_t key = RTX__PAGED_NO_FAULT;
        if (i < n_qs) {
            if (rtx__paged_query_start_bad(p.qs, i, g.T))
                key = rtx__paged_fault_key(RTX__PAGED_QUERY_START, i, p.qs[i]);
        } else if (i < n_qs + g.S) {
            int64_t s = i - n_qs;
            if (rtx__paged_context_bad(p.qs, p.ctx, s, g.B, g.BS))
                key = rtx__paged_fault_key(RTX__PAGED_CONTEXT, s, p.ctx[s]);
        } else if (i < n_qs + g.S + n_tb) {
            int64_t e = i - n_qs - g.S;
            if (rtx__paged_block_used(p.ctx, e / g.B, e % g.B, g.BS) &&
                rtx__paged_block_bad(p.tables[e], g.NB))
                key = rtx__paged_fault_key(RTX__PAGED_BLOCK, e, p.tables[e]);
        } else {
            int64_t t = i - n_qs - g.S - n_tb;
            if (rtx__paged_slot_bad(p.slots[t], g.NB, g.BS))
                key = rtx__paged_fault_key(RTX__PAGED_SLOT, t, p.slots[t]);
        }
        if (key != RTX__PAGED_NO_FAULT) atomicMin(p.fault, (unsigned long long)key);
    }
}

extern "C" cudaError_t rtx__cuda_paged_check_launch(const struct rtx_cuda_paged *p,
                                                    cudaStream_t stream) {
    const struct rtx__paged_geom *g = &p->g;
    int64_t total = g->S + 1 + g->S + g->S * g->B + g->T;
    check_kernel<<<grid_for(total, CHECK_THREADS), CHECK_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

/* Row t of k and v (row_units units of U) into slot slots[t] of the caches. */
template <typename U>
__global__ static void write_kernel(const struct rtx_cuda_paged p, int64_t row_units) {
    if (faulted(p)) return;
    int64_t n_slots = p.g.NB * p.g.BS;
    for (int64_t t = blockIdx.x; t < p.g.T; t += gridDim.x) {
        int64_t slot = p.slots[t];
        if (slot < 0 || slot >= n_slots) continue;
        const U *k = (const U *)p.k + t * row_units, *v = (const U *)p.v + t * row_units;
        U *kc = (U *)p.kc + slot * row_units, *vc = (U *)p.vc + slot * row_units;
        for (int64_t i = threadIdx.x; i < row_units; i += blockDim.x) {
            kc[i] = k[i];
            vc[i] = v[i];
        }
    }
}

extern "C" cudaError_t rtx__cuda_paged_write_launch(const struct rtx_cuda_paged *p,
                                                    cudaStream_t stream) {
    int esize = p->dt == RTX_F32 ? 4 : 2;
    int64_t row_bytes = p->g.Hkv * p->g.D * esize;
    if (p->g.T == 0 || row_bytes == 0) return cudaSuccess;
    uintptr_t bits = (uintptr_t)p->k | (uintptr_t)p->v | (uintptr_t)p->kc | (uintptr_t)p->vc |
                     (uintptr_t)row_bytes;
    unsigned grid = (unsigned)(p->g.T < MAX_BLOCKS ? p->g.T : MAX_BLOCKS);
    if (bits % 16 == 0)
        write_kernel<uint4><<<grid, 128, 0, stream>>>(*p, row_bytes / 16);
    else if (bits % 8 == 0)
        write_kernel<uint2><<<grid, 128, 0, stream>>>(*p, row_bytes / 8);
    else if (bits % 4 == 0)
        write_kernel<uint32_t><<<grid, 128, 0, stream>>>(*p, row_bytes / 4);
    else
        write_kernel<uint16_t><<<grid, 128, 0, stream>>>(*p, row_bytes / 2);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------
 * paged_attention: attention
 * ---------------------------------------------------------------------------------------- */

/* Floats of the attention kernel's f32 shared arrays, rounded up to 16 bytes. */
static __host__ __device__ int64_t f32_floats(int64_t G, int64_t D, int64_t tile) {
    return (2 * G * D + G * tile + 3 * G + 3) / 4 * 4;
}

extern "C" size_t rtx__cuda_paged_smem(const struct rtx__paged_geom *g, int esize, int tile) {
    return (size_t)f32_floats(g->G, g->D, tile) * sizeof(float) +
           2 * (size_t)tile * (size_t)g->D * (size_t)esize;
}

/* The sequence of row t: the s with qs[s] <= t < qs[s + 1], or -1 for a padding row. */
__device__ static int64_t row_sequence(const int32_t *qs, int64_t S, int64_t t) {
    int64_t lo = 0, hi = S + 1; /* upper bound: the first index with qs[i] > t */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (qs[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1 >= 0 && lo - 1 < S ? lo - 1 : -1;
}

/* Keys kt0 .. kt0 + nk - 1 of sequence s, KV head hk, from the caches into sk and sv. The
 * index math is 32-bit (a key position is below B x BS, checked at launch): 64-bit divisions
 * per 16-byte unit cost more than the loads. When the block's threads are a multiple of a
 * key's 16-byte units, each thread keeps one unit column and steps over keys, dividing once
 * per key instead of per unit. */
template <typename T>
__device__ static void load_tile(const struct rtx_cuda_paged &p, int64_t s, int64_t hk,
                                 int64_t kt0, int64_t nk, T *sk, T *sv) {
    const struct rtx__paged_geom &g = p.g;
    const int32_t *table = p.tables + s * g.B;
    const int bs = (int)g.BS, k0 = (int)kt0, n = (int)nk, nt = (int)blockDim.x;
    const int64_t hkv = g.Hkv;
    if (p.vec16) {
        const int upk = (int)(g.D * (int64_t)sizeof(T) / 16); /* 16-byte units per key */
        const uint4 *kc = (const uint4 *)p.kc, *vc = (const uint4 *)p.vc;
        uint4 *dk = (uint4 *)sk, *dv = (uint4 *)sv;
        if (nt % upk == 0) {
            const int c = (int)threadIdx.x % upk, step = nt / upk;
            for (int j = (int)threadIdx.x / upk; j < n; j += step) {
                const int pos = k0 + j;
                const int64_t row = ((int64_t)table[pos / bs] * bs + pos % bs) * hkv + hk;
                dk[j * upk + c] = kc[row * upk + c];
                dv[j * upk + c] = vc[row * upk + c];
            }
            return;
        }
        for (int u = (int)threadIdx.x; u < n * upk; u += nt) {
            const int j = u / upk, c = u % upk, pos = k0 + j;
            const int64_t row = ((int64_t)table[pos / bs] * bs + pos % bs) * hkv + hk;
            dk[u] = kc[row * upk + c];
            dv[u] = vc[row * upk + c];
        }
        return;
    }
    const int D = (int)g.D;
    for (int e = (int)threadIdx.x; e < n * D; e += nt) {
        const int j = e / D, d = e % D, pos = k0 + j;
        const int64_t row = ((int64_t)table[pos / bs] * bs + pos % bs) * hkv + hk;
        sk[e] = ((const T *)p.kc)[row * D + d];
        sv[e] = ((const T *)p.vc)[row * D + d];
    }
}

/* The tile's scores ss[h, j] = q_h . k_j when a key is upk 16-byte units and upk divides 32:
 * each warp takes 32 / upk keys at once, a lane one unit of one key (loaded once, dotted with
 * the G queries' matching dims), and the upk lanes of a key sum by shuffles within their group
 * (log2(upk) shuffles per head and key group instead of 5 per head and key). */
template <typename T>
__device__ static void tile_scores_grouped(const float *sq, const T *sk, float *ss, int64_t G,
                                           int64_t D, int64_t tile, int64_t nk, int upk) {
    constexpr int E = 16 / (int)sizeof(T); /* elements per unit */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kpw = 32 / upk;
    const int sub = lane / upk, c = lane % upk;
    for (int64_t j0 = (int64_t)warp * kpw; j0 < nk; j0 += (int64_t)PA_WARPS * kpw) {
        const int64_t j = j0 + sub;
        float x[E];
        if (j < nk) {
            uint4 u = ((const uint4 *)(sk + j * D))[c];
            const T *e = (const T *)&u;
#pragma unroll
            for (int i = 0; i < E; i++) x[i] = to_f32(e[i]);
        } else {
#pragma unroll
            for (int i = 0; i < E; i++) x[i] = 0.0f;
        }
        for (int64_t h = 0; h < G; h++) {
            const float *q = sq + h * D + (int64_t)c * E;
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < E; i++) a += q[i] * x[i];
            for (int off = upk / 2; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
            if (c == 0 && j < nk) ss[h * tile + j] = a;
        }
    }
}

template <typename T> __global__ static void attention_kernel(const struct rtx_cuda_paged p) {
    if (faulted(p)) return; /* every thread of the block alike: before any barrier */
    extern __shared__ float4 smem4[];
    const struct rtx__paged_geom &g = p.g;
    const int64_t G = g.G, D = g.D, tile = p.tile, t = blockIdx.x, hk = blockIdx.y;
    const int part = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *sq = (float *)smem4; /* [G, D] scaled queries */
    float *acc = sq + G * D;    /* [G, D] sum of p . v */
    float *ss = acc + G * D;    /* [G, tile] scores, then probabilities */
    float *sm = ss + G * tile;  /* [G] running max */
    float *sl = sm + G;         /* [G] running sum */
    float *sc = sl + G;         /* [G] the tile's rescaling of acc */
    T *sk = (T *)((float *)smem4 + f32_floats(G, D, tile)); /* [tile, D] */
    T *sv = sk + tile * D;                                  /* [tile, D] */

    const int upk = (int)(D * (int64_t)sizeof(T) / 16); /* a key's 16-byte units */
    int64_t s = row_sequence(p.qs, g.S, t), k1 = 0, k0 = (int64_t)part * p.part_keys;
    if (p.tc_rows && s >= 0 && p.qs[s + 1] - p.qs[s] >= p.tc_rows) return; /* paged-prefill.cu */
    if (s >= 0) {
        int64_t n = (int64_t)p.qs[s + 1] - p.qs[s];
        int64_t keys = (int64_t)p.ctx[s] - n + (t - p.qs[s]) + 1; /* 0 .. position */
        keys = keys < g.B * g.BS ? keys : g.B * g.BS;             /* never past the table */
        k1 = keys < k0 + p.part_keys ? keys : k0 + p.part_keys;
    }
    for (int64_t i = threadIdx.x; i < G * D; i += blockDim.x) {
        acc[i] = 0.0f;
        sq[i] = s >= 0 ? to_f32(((const T *)p.q)[(t * g.H + hk * G) * D + i]) * g.scale : 0.0f;
    }
    for (int64_t i = threadIdx.x; i < G; i += blockDim.x) {
        sm[i] = -INFINITY;
        sl[i] = 0.0f;
    }
    __syncthreads();
    for (int64_t kt0 = k0; kt0 < k1; kt0 += tile) {
        int64_t nk = k1 - kt0 < tile ? k1 - kt0 : tile;
        load_tile<T>(p, s, hk, kt0, nk, sk, sv);
        __syncthreads();
        if (p.vec16 && 32 % upk == 0)
            tile_scores_grouped<T>(sq, sk, ss, G, D, tile, nk, upk);
        else
            for (int64_t j = warp; j < nk; j += PA_WARPS)
                for (int64_t h = 0; h < G; h++) {
                    float a = 0.0f;
                    for (int64_t d = lane; d < D; d += 32)
                        a += sq[h * D + d] * to_f32(sk[j * D + d]);
                    a = warp_sum(a);
                    if (lane == 0) ss[h * tile + j] = a;
                }
        __syncthreads();
        for (int64_t h = warp; h < G; h += PA_WARPS) {
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t j = lane; j < nk; j += 32)
                mx = nan_max(mx, ss[h * tile + j]);
            mx = warp_max(mx);
            float m_new = nan_max(sm[h], mx);
            float base = m_new == -INFINITY ? 0.0f : m_new; /* every score -inf: adds nothing */
            for (int64_t j = lane; j < nk; j += 32) {
                float e = expf(ss[h * tile + j] - base);
                ss[h * tile + j] = e;
                sum += e;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                float corr = expf(sm[h] - base);
                sc[h] = corr;
                sl[h] = sl[h] * corr + sum;
                sm[h] = m_new;
            }
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < G * D; i += blockDim.x) {
            int64_t h = i / D, d = i % D;
            const float *pr = ss + h * tile;
            float a = acc[i] * sc[h];
            for (int64_t j = 0; j < nk; j++)
                a += pr[j] * to_f32(sv[j * D + d]);
            acc[i] = a;
        }
        __syncthreads();
    }
    if (p.parts == 1) {
        T *y = (T *)p.y + (t * g.H + hk * G) * D;
        for (int64_t i = threadIdx.x; i < G * D; i += blockDim.x) {
            float l = sl[i / D];
            y[i] = from_f32<T>(l > 0.0f ? acc[i] / l : acc[i] != acc[i] ? acc[i] : 0.0f);
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < G * D; i += blockDim.x) {
        int64_t h = hk * G + i / D;
        p.part_acc[((t * g.H + h) * p.parts + part) * D + i % D] = acc[i];
    }
    for (int64_t i = threadIdx.x; i < G; i += blockDim.x) {
        int64_t at = ((t * g.H + hk * G + i) * p.parts + part) * 2;
        p.part_ml[at] = sm[i];
        p.part_ml[at + 1] = sl[i];
    }
}

/* Merges the partitions of row blockIdx.x, head blockIdx.y. */
template <typename T> __global__ static void combine_kernel(const struct rtx_cuda_paged p) {
    if (faulted(p)) return;
    if (p.tc_rows) {
        int64_t s = row_sequence(p.qs, p.g.S, blockIdx.x);
        if (s >= 0 && p.qs[s + 1] - p.qs[s] >= p.tc_rows) return; /* paged-prefill.cu's */
    }
    const int64_t D = p.g.D, P = p.parts, th = (int64_t)blockIdx.x * p.g.H + blockIdx.y;
    const float *ml = p.part_ml + th * P * 2, *pa = p.part_acc + th * P * D;
    float mx = -INFINITY;
    for (int64_t k = 0; k < P; k++)
        if (ml[2 * k + 1] > 0.0f || ml[2 * k] != ml[2 * k]) mx = nan_max(mx, ml[2 * k]);
    float l = 0.0f;
    for (int64_t k = 0; k < P; k++)
        if (ml[2 * k + 1] > 0.0f) l += ml[2 * k + 1] * expf(ml[2 * k] - mx);
    T *y = (T *)p.y + th * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int64_t k = 0; k < P; k++)
            if (ml[2 * k + 1] > 0.0f) a += pa[k * D + d] * expf(ml[2 * k] - mx);
        y[d] = from_f32<T>(mx != mx ? mx : l > 0.0f ? a / l : 0.0f);
    }
}

template <typename T>
static cudaError_t attention_launch(const struct rtx_cuda_paged *p, size_t smem,
                                    cudaStream_t stream) {
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(
            attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    dim3 grid((unsigned)p->g.T, (unsigned)p->g.Hkv, (unsigned)p->parts);
    attention_kernel<T><<<grid, PA_THREADS, smem, stream>>>(*p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || p->parts == 1) return e;
    dim3 rows((unsigned)p->g.T, (unsigned)p->g.H);
    unsigned threads = p->g.D < 128 ? 32 * (unsigned)((p->g.D + 31) / 32) : 128;
    combine_kernel<T><<<rows, threads, 0, stream>>>(*p);
    return cudaGetLastError();
}

extern "C" cudaError_t rtx__cuda_paged_attention_launch(const struct rtx_cuda_paged *p,
                                                        size_t smem, cudaStream_t stream) {
    if (p->g.T * p->g.H * p->g.D == 0) return cudaSuccess;
    if (p->g.T > INT32_MAX || p->g.Hkv > 65535 || p->g.H > 65535 || p->parts > 65535 ||
        p->parts < 1 || p->tile < 1 || p->g.B * p->g.BS > INT32_MAX ||
        p->tile * p->g.D > INT32_MAX)
        return cudaErrorInvalidValue;
    switch (p->dt) {
    case RTX_F32: return attention_launch<float>(p, smem, stream);
    case RTX_F16: return attention_launch<__half>(p, smem, stream);
    case RTX_BF16: return attention_launch<__nv_bfloat16>(p, smem, stream);
    default: return cudaErrorInvalidValue;
    }
}
