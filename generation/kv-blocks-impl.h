/*
 * kv-blocks-impl.h - the paged KV cache's block manager (generation/kv-blocks.c), private to
 * generation/. It holds no tensor memory: the engine owns the pool (per layer a K and a V
 * tensor [n_blocks, block_size, n_kv_heads, head_dim]); this module decides which block ids
 * a sequence uses.
 *
 * DESIGN
 * Blocks are numbered 0..n_blocks-1, each with a reference count. A block is free (count 0,
 * no content worth keeping), used (count > 0) or cached (count 0 but it holds a full block of
 * known tokens: reusable by a later sequence whose prompt starts the same way, evictable
 * least-recently-released first). A full block's identity is a hash chain: hash(block i) =
 * SHA-256(hash(block i-1) || its block_size token ids) (block 0 chains from a fixed seed), so
 * two sequences share a block only when every token before its end is the same. Allocation
 * takes a free block first, else evicts the least recently released cached block (dropping
 * its hash). Nothing here locks: the engine's thread is the only caller.
 */
#ifndef RTX_GENERATION_KV_BLOCKS_IMPL_H
#define RTX_GENERATION_KV_BLOCKS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"

#define RTX_KV_HASH_BYTES 32

struct rtx_kv_blocks;

struct rtx_kv_blocks_stats {
    int64_t n_blocks, used, cached, free;       /* used + cached + free = n_blocks */
    uint64_t prefix_queries, prefix_hits;       /* full blocks looked up / found */
    uint64_t evictions;                         /* cached blocks reused for other content */
};

/* prefix_caching false: full blocks are never registered or matched (every block is free
 * once its count drops to 0). RTX_EINVAL for n_blocks < 1 or block_size < 1, RTX_ENOMEM. */
int rtx__kv_blocks_new(int n_blocks, int block_size, bool prefix_caching,
                       struct rtx_kv_blocks **out, struct rtx_err *err);
void rtx__kv_blocks_free(struct rtx_kv_blocks *b); /* NULL: no-op */
int rtx__kv_blocks_block_size(const struct rtx_kv_blocks *b);

/* The chain hash of a full block: parent is the previous block's hash (NULL for the first
 * block), tokens its block_size ids. */
void rtx__kv_blocks_hash(const uint8_t *parent, const int32_t *tokens, int block_size,
                         uint8_t out[RTX_KV_HASH_BYTES]);

/* Looks up the longest run of full blocks of tokens[0..n) that is cached or in use, from the
 * first block on (at most max_blocks, and never the whole of tokens: at least one token is
 * left to compute, so the step that finishes the prompt has a query). Takes a reference to
 * each block found, writes their ids to blocks[] and their hashes to hashes[] (may be NULL),
 * and returns how many (0 with prefix caching off). Counts queries and hits. */
int rtx__kv_blocks_match(struct rtx_kv_blocks *b, const int32_t *tokens, int n, int max_blocks,
                         int32_t *blocks, uint8_t (*hashes)[RTX_KV_HASH_BYTES]);

/* How many blocks rtx__kv_blocks_alloc can give now (free + cached). */
int rtx__kv_blocks_available(const struct rtx_kv_blocks *b);
/* Takes one block (count 1): a free one, else the least recently released cached one (its
 * hash is forgotten: an eviction). RTX_ENOMEM when every block is used. */
int rtx__kv_blocks_alloc(struct rtx_kv_blocks *b, int32_t *block);
/* One more reference (a forked choice sharing its prompt's blocks). */
void rtx__kv_blocks_ref(struct rtx_kv_blocks *b, int32_t block);
/* Drops one reference; at 0 a registered block becomes cached (most recently released),
 * another becomes free. */
void rtx__kv_blocks_unref(struct rtx_kv_blocks *b, int32_t block);
/* Registers a block the caller has just filled with a full block of tokens under its chain
 * hash, so later sequences can match it. When another block already holds that hash, nothing
 * changes (the caller keeps its own copy). No-op with prefix caching off. */
void rtx__kv_blocks_register(struct rtx_kv_blocks *b, int32_t block,
                             const uint8_t hash[RTX_KV_HASH_BYTES]);
/* Forgets every cached block's hash (they become free): after the pool's contents were lost,
 * e.g. a device fault. Used blocks keep theirs. */
void rtx__kv_blocks_reset_cache(struct rtx_kv_blocks *b);
void rtx__kv_blocks_stats(const struct rtx_kv_blocks *b, struct rtx_kv_blocks_stats *st);

#endif /* RTX_GENERATION_KV_BLOCKS_IMPL_H */
