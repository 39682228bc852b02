/*
 * kv-blocks.c - the paged KV cache's block manager (generation/kv-blocks-impl.h): reference
 * counts, the free list, the cached blocks in LRU order, and prefix matching through the hash
 * chain of full blocks.
 *
 * DESIGN
 * Everything is sized from n_blocks (at most 2^30) at rtx__kv_blocks_new and nothing is
 * allocated later, so the engine's step never allocates here (OpenSSL allocates a digest
 * context for each hash; its failure is a miss, see below). Per block: its count, its chain hash
 * (when registered), its links in the LRU list and its link in a hash-table bucket. Free blocks
 * sit on a stack (the most recently freed block is handed out first, so its memory is warm);
 * cached blocks on a doubly linked list, least recently released at the head, which
 * allocation evicts first; the hash table (chaining through the blocks, a power-of-two number
 * of buckets at least n_blocks, so the load stays under one) maps a hash to the one block
 * registered under it, used or cached. Bucket index: the hash's first 8 bytes (SHA-256 spreads
 * them). alloc, ref, unref and register are O(1) (a bucket's chain is expected O(1)); match is
 * O(blocks matched) plus one SHA-256 per block looked up.
 *
 * A hash of 32 zero bytes stands for "no hash": rtx__kv_blocks_hash writes it when OpenSSL
 * fails (only when it cannot allocate its context) and for every block chained from such a
 * parent, register ignores it and match stops at it. A failed hash therefore costs a cache
 * miss, never a false match. (SHA-256 itself yields zero bytes with probability 2^-256.)
 */
#include <assert.h>
#include <string.h>

#include <openssl/evp.h>

#include "generation/kv-blocks-impl.h"

#define NONE (-1)
#define MAX_BLOCKS (1 << 30)

struct rtx_kv_blocks {
    int n_blocks, block_size;
    bool prefix_caching;
    int32_t *ref;                       /* [n_blocks] reference counts */
    uint8_t *hashed;                    /* [n_blocks] 1: registered under hash[i] */
    uint8_t (*hash)[RTX_KV_HASH_BYTES]; /* [n_blocks] chain hashes */
    int32_t *lru_prev, *lru_next;       /* [n_blocks] links of cached blocks */
    int32_t lru_head, lru_tail;         /* least / most recently released cached block */
    int32_t *chain;                     /* [n_blocks] next block in the same bucket */
    int32_t *buckets;                   /* [n_buckets] first block of each bucket */
    uint64_t bucket_mask;               /* n_buckets - 1 */
    int32_t *free_stack;                /* [n_blocks] free blocks, top at n_free - 1 */
    int n_free, n_cached, n_used;
    uint64_t prefix_queries, prefix_hits, evictions;
};

/* The chain's first parent. */
static const uint8_t chain_seed[RTX_KV_HASH_BYTES] = "rtxd kv-blocks hash chain, v1 ..";

static bool hash_is_none(const uint8_t *h) {
    for (int i = 0; i < RTX_KV_HASH_BYTES; i++)
        if (h[i]) return false;
    return true;
}

void rtx__kv_blocks_hash(const uint8_t *parent, const int32_t *tokens, int block_size,
                         uint8_t out[RTX_KV_HASH_BYTES]) {
    if (parent && hash_is_none(parent)) {
        memset(out, 0, RTX_KV_HASH_BYTES);
        return;
    }
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int n = 0;
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(c, parent ? parent : chain_seed, RTX_KV_HASH_BYTES) &&
             EVP_DigestUpdate(c, tokens, (size_t)block_size * sizeof *tokens) &&
             EVP_DigestFinal_ex(c, out, &n) && n == RTX_KV_HASH_BYTES;
    EVP_MD_CTX_free(c);
    if (!ok) memset(out, 0, RTX_KV_HASH_BYTES);
}

/* ---- the hash table ---- */

static uint64_t bucket_of(const struct rtx_kv_blocks *b, const uint8_t *h) {
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return v & b->bucket_mask;
}

static int32_t table_find(const struct rtx_kv_blocks *b, const uint8_t *h) {
    for (int32_t i = b->buckets[bucket_of(b, h)]; i != NONE; i = b->chain[i])
        if (memcmp(b->hash[i], h, RTX_KV_HASH_BYTES) == 0) return i;
    return NONE;
}

static void table_insert(struct rtx_kv_blocks *b, int32_t block, const uint8_t *h) {
    uint64_t k = bucket_of(b, h);
    memcpy(b->hash[block], h, RTX_KV_HASH_BYTES);
    b->hashed[block] = 1;
    b->chain[block] = b->buckets[k];
    b->buckets[k] = block;
}

static void table_remove(struct rtx_kv_blocks *b, int32_t block) {
    int32_t *p = &b->buckets[bucket_of(b, b->hash[block])];
    while (*p != block) {
        assert(*p != NONE);
        p = &b->chain[*p];
    }
    *p = b->chain[block];
    b->chain[block] = NONE;
    b->hashed[block] = 0;
}

/* ---- the LRU list of cached blocks ---- */

static void lru_push_tail(struct rtx_kv_blocks *b, int32_t block) {
    b->lru_prev[block] = b->lru_tail;
    b->lru_next[block] = NONE;
    if (b->lru_tail != NONE)
        b->lru_next[b->lru_tail] = block;
    else
        b->lru_head = block;
    b->lru_tail = block;
    b->n_cached++;
}

static void lru_remove(struct rtx_kv_blocks *b, int32_t block) {
    int32_t p = b->lru_prev[block], n = b->lru_next[block];
    if (p != NONE)
        b->lru_next[p] = n;
    else
        b->lru_head = n;
    if (n != NONE)
        b->lru_prev[n] = p;
    else
        b->lru_tail = p;
    b->lru_prev[block] = b->lru_next[block] = NONE;
    b->n_cached--;
}

/* ---- life cycle ---- */

int rtx__kv_blocks_new(int n_blocks, int block_size, bool prefix_caching,
                       struct rtx_kv_blocks **out, struct rtx_err *err) {
    *out = NULL;
    if (n_blocks < 1 || n_blocks > MAX_BLOCKS)
        return rtx_err_set(err, RTX_EINVAL, "kv blocks: n_blocks must be in [1, %d], got %d",
                           MAX_BLOCKS, n_blocks);
    if (block_size < 1)
        return rtx_err_set(err, RTX_EINVAL, "kv blocks: block_size must be at least 1, got %d",
                           block_size);
    size_t n_buckets = 1;
    while (n_buckets < (size_t)n_blocks)
        n_buckets <<= 1;
    size_t n = (size_t)n_blocks;
    struct rtx_kv_blocks *b = rtx_calloc(1, sizeof *b);
    if (!b) goto oom;
    b->ref = rtx_calloc(n, sizeof *b->ref);
    b->hashed = rtx_calloc(n, sizeof *b->hashed);
    b->hash = rtx_malloc(n * sizeof *b->hash);
    b->lru_prev = rtx_malloc(n * sizeof *b->lru_prev);
    b->lru_next = rtx_malloc(n * sizeof *b->lru_next);
    b->chain = rtx_malloc(n * sizeof *b->chain);
    b->buckets = rtx_malloc(n_buckets * sizeof *b->buckets);
    b->free_stack = rtx_malloc(n * sizeof *b->free_stack);
    if (!b->ref || !b->hashed || !b->hash || !b->lru_prev || !b->lru_next || !b->chain ||
        !b->buckets || !b->free_stack)
        goto oom;
    b->n_blocks = n_blocks;
    b->block_size = block_size;
    b->prefix_caching = prefix_caching;
    b->bucket_mask = n_buckets - 1;
    b->lru_head = b->lru_tail = NONE;
    for (size_t i = 0; i < n_buckets; i++)
        b->buckets[i] = NONE;
    for (int i = 0; i < n_blocks; i++) {
        b->lru_prev[i] = b->lru_next[i] = b->chain[i] = NONE;
        b->free_stack[i] = n_blocks - 1 - i; /* block 0 is handed out first */
    }
    b->n_free = n_blocks;
    *out = b;
    return 0;
oom:
    rtx__kv_blocks_free(b);
    return rtx_err_set(err, RTX_ENOMEM, "kv blocks: out of memory for %d blocks", n_blocks);
}

void rtx__kv_blocks_free(struct rtx_kv_blocks *b) {
    if (!b) return;
    rtx_free(b->ref);
    rtx_free(b->hashed);
    rtx_free(b->hash);
    rtx_free(b->lru_prev);
    rtx_free(b->lru_next);
    rtx_free(b->chain);
    rtx_free(b->buckets);
    rtx_free(b->free_stack);
    rtx_free(b);
}

int rtx__kv_blocks_block_size(const struct rtx_kv_blocks *b) {
    return b->block_size;
}

/* ---- blocks ---- */

/* A cached or used block gains a reference. */
static void take(struct rtx_kv_blocks *b, int32_t block) {
    if (b->ref[block] == 0) {
        lru_remove(b, block);
        b->n_used++;
    }
    b->ref[block]++;
}

int rtx__kv_blocks_match(struct rtx_kv_blocks *b, const int32_t *tokens, int n, int max_blocks,
                         int32_t *blocks, uint8_t (*hashes)[RTX_KV_HASH_BYTES]) {
    if (!b->prefix_caching || n < 2 || max_blocks < 1) return 0;
    int full = (n - 1) / b->block_size; /* at least one token left to compute */
    if (full > max_blocks) full = max_blocks;
    b->prefix_queries += (uint64_t)full;
    uint8_t h[RTX_KV_HASH_BYTES];
    const uint8_t *parent = NULL;
    int found = 0;
    while (found < full) {
        rtx__kv_blocks_hash(parent, tokens + (size_t)found * b->block_size, b->block_size, h);
        if (hash_is_none(h)) break;
        int32_t block = table_find(b, h);
        if (block == NONE) break;
        take(b, block);
        blocks[found] = block;
        if (hashes) memcpy(hashes[found], h, RTX_KV_HASH_BYTES);
        parent = b->hash[block];
        found++;
    }
    b->prefix_hits += (uint64_t)found;
    return found;
}

int rtx__kv_blocks_available(const struct rtx_kv_blocks *b) {
    return b->n_free + b->n_cached;
}

int rtx__kv_blocks_alloc(struct rtx_kv_blocks *b, int32_t *block) {
    int32_t i;
    if (b->n_free > 0) {
        i = b->free_stack[--b->n_free];
    } else if (b->lru_head != NONE) {
        i = b->lru_head;
        lru_remove(b, i);
        table_remove(b, i);
        b->evictions++;
    } else {
        return RTX_ENOMEM;
    }
    assert(b->ref[i] == 0 && !b->hashed[i]);
    b->ref[i] = 1;
    b->n_used++;
    *block = i;
    return 0;
}

void rtx__kv_blocks_ref(struct rtx_kv_blocks *b, int32_t block) {
    assert(block >= 0 && block < b->n_blocks && b->ref[block] > 0);
    b->ref[block]++;
}

void rtx__kv_blocks_unref(struct rtx_kv_blocks *b, int32_t block) {
    assert(block >= 0 && block < b->n_blocks && b->ref[block] > 0);
    if (--b->ref[block] > 0) return;
    b->n_used--;
    if (b->hashed[block]) {
        lru_push_tail(b, block);
    } else {
        b->free_stack[b->n_free++] = block;
    }
}

void rtx__kv_blocks_register(struct rtx_kv_blocks *b, int32_t block,
                             const uint8_t hash[RTX_KV_HASH_BYTES]) {
    assert(block >= 0 && block < b->n_blocks && b->ref[block] > 0);
    if (!b->prefix_caching || hash_is_none(hash)) return;
    if (b->hashed[block]) {
        /* a full block's content, hence its hash, does not change while it is held */
        assert(memcmp(b->hash[block], hash, RTX_KV_HASH_BYTES) == 0);
        return;
    }
    if (table_find(b, hash) != NONE) return; /* another block holds these tokens */
    table_insert(b, block, hash);
}

void rtx__kv_blocks_reset_cache(struct rtx_kv_blocks *b) {
    while (b->lru_head != NONE) {
        int32_t i = b->lru_head;
        lru_remove(b, i);
        table_remove(b, i);
        b->free_stack[b->n_free++] = i;
    }
}

void rtx__kv_blocks_stats(const struct rtx_kv_blocks *b, struct rtx_kv_blocks_stats *st) {
    st->n_blocks = b->n_blocks;
    st->used = b->n_used;
    st->cached = b->n_cached;
    st->free = b->n_free;
    st->prefix_queries = b->prefix_queries;
    st->prefix_hits = b->prefix_hits;
    st->evictions = b->evictions;
}
