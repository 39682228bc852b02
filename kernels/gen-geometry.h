/*
 * gen-geometry.h - what the backends share of the text-generation ops (docs/ops.md: rope and
 * paged_attention): the shapes of a node's tensors, checked and read into plain structs
 * (kernels/gen-geometry.c), and paged_attention's rules for its metadata (query_start,
 * context_lens, block_tables, slot_mapping), written once as inline functions that the CPU
 * kernel and the CUDA check kernel both call. Only kernels/ (and its unit tests) include it.
 *
 * DESIGN
 * A bad metadata entry is a fault: its kind, its index and its value, packed into one 64-bit
 * key whose order is the order in which the CPU looks (kind first: query_start, then
 * context_lens, block_tables, slot_mapping; then the index). The CPU stops at the first
 * fault it meets; the CUDA kernel, whose threads look in any order, keeps the smallest key
 * with an atomic minimum. So both report the same fault, in the same words
 * (rtx__paged_fault_why), for the same data.
 */
#ifndef RTX_KERNELS_GEN_GEOMETRY_H
#define RTX_KERNELS_GEN_GEOMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __CUDACC__
#define RTX__GEN_HD __host__ __device__
#else
#define RTX__GEN_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A rope node: x [T, H, D] rotated in its first 2 * half dims of every head. */
struct rtx__rope_geom {
    int64_t T, H, D;
    int64_t half;        /* pairs per head: inv_freq's length, R / 2 */
    int32_t interleaved; /* pairs (2i, 2i + 1) instead of (i, i + half) */
    int32_t pos64;       /* positions are i64 (else i32) */
};
/* Checks x (float), positions (i32 or i64, [T]), inv_freq (f32, [half], 2 * half <= D), y
 * (x's dtype and shape) and the attribute; RTX_EINVAL with the reason in why. */
int rtx__rope_geometry(const struct rtx_node *node, const struct rtx_tensor *x,
                       const struct rtx_tensor *pos, const struct rtx_tensor *inv_freq,
                       const struct rtx_tensor *y, struct rtx__rope_geom *g, char *why,
                       size_t why_len);

/* A paged_attention node (inputs in docs/ops.md's order). */
struct rtx__paged_geom {
    int64_t T, H, Hkv, D; /* q [T, H, D], k and v [T, Hkv, D] */
    int64_t G;            /* query heads per KV head: H / Hkv */
    int64_t NB, BS;       /* caches [NB, BS, Hkv, D]: blocks, tokens per block */
    int64_t S, B;         /* sequences, block-table entries per sequence */
    float scale;
};
/* Most rows, sequences + 1 or block-table entries a node may have: what a fault key holds. */
#define RTX__PAGED_MAX_INDEX (((int64_t)1 << 27) - 1)
/* Checks the dtypes (q, k, v, the caches and y one float dtype; the metadata i32), ranks and
 * dimensions of the nine inputs and y, and reads the scale (default 1 / sqrt(D)). RTX_EINVAL
 * with the reason in why; RTX_ELIMIT past RTX__PAGED_MAX_INDEX. */
int rtx__paged_attention_geometry(const struct rtx_node *node, const struct rtx_tensor *const *in,
                                  const struct rtx_tensor *y, struct rtx__paged_geom *g, char *why,
                                  size_t why_len);

/* Fault kinds, in the order they are looked for. */
enum rtx__paged_fault {
    RTX__PAGED_QUERY_START = 1, /* index s: query_start[s] */
    RTX__PAGED_CONTEXT,         /* index s: context_lens[s] */
    RTX__PAGED_BLOCK,           /* index s * B + b: block_tables[s][b] */
    RTX__PAGED_SLOT,            /* index t: slot_mapping[t] */
};
#define RTX__PAGED_NO_FAULT UINT64_MAX

RTX__GEN_HD static inline uint64_t rtx__paged_fault_key(int kind, int64_t index, int32_t value) {
    return ((uint64_t)kind << 59) | ((uint64_t)index << 32) | (uint32_t)value;
}

/* query_start[s] must lie in 0..T and not below query_start[s - 1]. */
RTX__GEN_HD static inline bool rtx__paged_query_start_bad(const int32_t *qs, int64_t s,
                                                          int64_t T) {
    return qs[s] < 0 || qs[s] > T || (s > 0 && qs[s] < qs[s - 1]);
}

/* context_lens[s] must cover the sequence's new tokens and fit in its block table. */
RTX__GEN_HD static inline bool rtx__paged_context_bad(const int32_t *qs, const int32_t *ctx,
                                                      int64_t s, int64_t B, int64_t BS) {
    int64_t n = (int64_t)qs[s + 1] - qs[s];
    return ctx[s] < 0 || ctx[s] < n || ctx[s] > B * BS;
}

/* Whether block_tables[s][b] holds keys of the sequence (only those entries must be blocks of
 * the cache; the rest may hold anything, -1 say). */
RTX__GEN_HD static inline bool rtx__paged_block_used(const int32_t *ctx, int64_t s, int64_t b,
                                                     int64_t BS) {
    return b * BS < (int64_t)ctx[s];
}

RTX__GEN_HD static inline bool rtx__paged_block_bad(int32_t block, int64_t NB) {
    return block < 0 || block >= NB;
}

/* A slot of -1 (any negative) writes nothing; others must be slots of the cache. */
RTX__GEN_HD static inline bool rtx__paged_slot_bad(int32_t slot, int64_t NB, int64_t BS) {
    return slot >= NB * BS;
}

/* The first fault of the metadata (host arrays), or RTX__PAGED_NO_FAULT. */
uint64_t rtx__paged_check(const struct rtx__paged_geom *g, const int32_t *slots,
                          const int32_t *tables, const int32_t *qs, const int32_t *ctx);
/* The message of a fault key ("sequence 2: block_tables[2][1] = 77 is not a block of the
 * cache (it has 64)"). */
void rtx__paged_fault_why(const struct rtx__paged_geom *g, uint64_t key, char *why,
                          size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_GEN_GEOMETRY_H */
