/*
 * test-gen-kv-blocks.c - the paged KV cache's block manager (generation/kv-blocks-impl.h):
 * allocation, reference counts, prefix matching through the hash chain, LRU eviction, the
 * statistics, and a long random trace checked step by step against a reference model.
 */
#include <openssl/evp.h>
#include <string.h>

#include "generation/kv-blocks-impl.h"
#include "tests/unit/test-util.h"

static struct rtx_kv_blocks *kv_new(int n_blocks, int block_size, bool prefix_caching) {
    struct rtx_kv_blocks *b = NULL;
    struct rtx_err err = {0};
    int rc = rtx__kv_blocks_new(n_blocks, block_size, prefix_caching, &b, &err);
    ck_assert_msg(rc == 0, "rtx__kv_blocks_new: %s", err.msg);
    return b;
}

static void assert_stats(const struct rtx_kv_blocks *b, int64_t used, int64_t cached,
                         int64_t free_) {
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_int_eq(st.used, used);
    ck_assert_int_eq(st.cached, cached);
    ck_assert_int_eq(st.free, free_);
    ck_assert_int_eq(st.used + st.cached + st.free, st.n_blocks);
    ck_assert_int_eq(rtx__kv_blocks_available(b), cached + free_);
}

/* Allocates a block per full block of tokens and registers each under its chain hash, as the
 * engine does after computing them; blocks[] gets the ids. Returns the number of blocks. */
static int fill_and_register(struct rtx_kv_blocks *b, const int32_t *tokens, int n,
                             int32_t *blocks) {
    int bs = rtx__kv_blocks_block_size(b), full = n / bs;
    uint8_t h[RTX_KV_HASH_BYTES], parent[RTX_KV_HASH_BYTES];
    for (int i = 0; i < full; i++) {
        ck_assert_int_eq(rtx__kv_blocks_alloc(b, &blocks[i]), 0);
        rtx__kv_blocks_hash(i ? parent : NULL, tokens + i * bs, bs, h);
        rtx__kv_blocks_register(b, blocks[i], h);
        memcpy(parent, h, sizeof h);
    }
    return full;
}

static void unref_all(struct rtx_kv_blocks *b, const int32_t *blocks, int n) {
    for (int i = 0; i < n; i++)
        rtx__kv_blocks_unref(b, blocks[i]);
}

START_TEST(kv_blocks_new_rejects_bad_sizes) {
    struct rtx_kv_blocks *b = (void *)1;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__kv_blocks_new(0, 16, true, &b, &err), RTX_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_blocks"));
    ck_assert_int_eq(rtx__kv_blocks_new(8, 0, true, &b, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "block_size"));
    ck_assert_int_eq(rtx__kv_blocks_new(-3, 16, false, &b, NULL), RTX_EINVAL);
    rtx__kv_blocks_free(NULL);
}
END_TEST

START_TEST(kv_blocks_new_oom_loop) {
    for (int n = 1;; n++) {
        struct rtx_kv_blocks *b = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        int rc = rtx__kv_blocks_new(100, 16, true, &b, &err);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ck_assert_int_gt(n, 2);
            assert_stats(b, 0, 0, 100);
            rtx__kv_blocks_free(b);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
        ck_assert_ptr_null(b);
        ck_assert_ptr_nonnull(strstr(err.msg, "out of memory"));
    }
}
END_TEST

START_TEST(kv_blocks_alloc_until_exhausted) {
    struct rtx_kv_blocks *b = kv_new(8, 16, true);
    ck_assert_int_eq(rtx__kv_blocks_block_size(b), 16);
    bool seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        int32_t id = -1;
        ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
        ck_assert(id >= 0 && id < 8 && !seen[id]);
        seen[id] = true;
        assert_stats(b, i + 1, 0, 7 - i);
    }
    int32_t id = 1234;
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), RTX_ENOMEM);
    ck_assert_int_eq(id, 1234);
    ck_assert_int_eq(rtx__kv_blocks_available(b), 0);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_unref_frees_and_cycles) {
    struct rtx_kv_blocks *b = kv_new(5, 4, true);
    for (int cycle = 0; cycle < 100; cycle++) {
        int32_t ids[5];
        for (int i = 0; i < 5; i++)
            ck_assert_int_eq(rtx__kv_blocks_alloc(b, &ids[i]), 0);
        assert_stats(b, 5, 0, 0);
        rtx__kv_blocks_ref(b, ids[2]); /* a forked choice shares it */
        for (int i = 0; i < 5; i++)
            rtx__kv_blocks_unref(b, ids[i]);
        assert_stats(b, 1, 0, 4); /* unregistered blocks are free at count 0, not cached */
        rtx__kv_blocks_unref(b, ids[2]);
        assert_stats(b, 0, 0, 5);
    }
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.evictions, 0);
    rtx__kv_blocks_free(b);
}
END_TEST

/* SHA-256 of parent (or the chain seed) and the token ids, through OpenSSL directly. */
static void sha256_of(const uint8_t *parent, const int32_t *tokens, int n, uint8_t *out) {
    unsigned int len = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    ck_assert_ptr_nonnull(c);
    ck_assert(EVP_DigestInit_ex(c, EVP_sha256(), NULL));
    ck_assert(EVP_DigestUpdate(c, parent, RTX_KV_HASH_BYTES));
    ck_assert(EVP_DigestUpdate(c, tokens, (size_t)n * sizeof *tokens));
    ck_assert(EVP_DigestFinal_ex(c, out, &len));
    ck_assert_uint_eq(len, RTX_KV_HASH_BYTES);
    EVP_MD_CTX_free(c);
}

START_TEST(kv_blocks_hash_is_a_sha256_chain) {
    const int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8}, t2b[4] = {5, 6, 7, 9};
    uint8_t h1[32], h2[32], h2b[32], again[32], want[32], zero[32] = {0};
    rtx__kv_blocks_hash(NULL, t1, 4, h1);
    rtx__kv_blocks_hash(NULL, t1, 4, again);
    ck_assert_mem_eq(h1, again, 32);
    ck_assert(memcmp(h1, zero, 32) != 0);
    rtx__kv_blocks_hash(h1, t2, 4, h2);
    sha256_of(h1, t2, 4, want);
    ck_assert_mem_eq(h2, want, 32);
    rtx__kv_blocks_hash(h1, t2b, 4, h2b);
    ck_assert(memcmp(h2, h2b, 32) != 0);
    /* the same tokens after another parent hash differently */
    rtx__kv_blocks_hash(NULL, t2, 4, again);
    ck_assert(memcmp(h2, again, 32) != 0);
    /* a block chained from "no hash" has none either */
    rtx__kv_blocks_hash(zero, t2, 4, again);
    ck_assert_mem_eq(again, zero, 32);
}
END_TEST

START_TEST(kv_blocks_match_shares_a_prefix) {
    enum { BS = 4 };
    struct rtx_kv_blocks *b = kv_new(16, BS, true);
    int32_t a[14], ids[4], got[4];
    for (int i = 0; i < 14; i++)
        a[i] = 100 + i;
    ck_assert_int_eq(fill_and_register(b, a, 14, ids), 3); /* 12 tokens in 3 full blocks */
    assert_stats(b, 3, 0, 13);

    /* a second prompt equal through token 9 (block 2 differs at token 10) */
    int32_t p[20];
    memcpy(p, a, sizeof a);
    p[10] = 7;
    for (int i = 14; i < 20; i++)
        p[i] = i;
    uint8_t hashes[4][RTX_KV_HASH_BYTES];
    ck_assert_int_eq(rtx__kv_blocks_match(b, p, 20, 4, got, hashes), 2);
    ck_assert_int_eq(got[0], ids[0]);
    ck_assert_int_eq(got[1], ids[1]);
    uint8_t h[RTX_KV_HASH_BYTES];
    rtx__kv_blocks_hash(NULL, a, BS, h);
    ck_assert_mem_eq(hashes[0], h, sizeof h);
    rtx__kv_blocks_hash(h, a + BS, BS, h);
    ck_assert_mem_eq(hashes[1], h, sizeof h);
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.prefix_queries, 4); /* (20 - 1) / 4 full blocks could have matched */
    ck_assert_uint_eq(st.prefix_hits, 2);
    assert_stats(b, 3, 0, 13); /* shared blocks: the same ids, counts 2 */
    unref_all(b, got, 2);

    /* the whole prompt again: never every token, one is left to compute */
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 12, 4, got, NULL), 2);
    unref_all(b, got, 2);
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 13, 4, got, NULL), 3);
    unref_all(b, got, 3);
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 13, 1, got, NULL), 1); /* max_blocks */
    unref_all(b, got, 1);
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 1, 4, got, NULL), 0);
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 13, 0, got, NULL), 0);
    /* a prompt that differs in its first token matches nothing */
    p[0] = 99;
    ck_assert_int_eq(rtx__kv_blocks_match(b, p, 20, 4, got, NULL), 0);
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.prefix_queries, 4 + 2 + 3 + 1 + 0 + 0 + 4);
    ck_assert_uint_eq(st.prefix_hits, 2 + 2 + 3 + 1);

    /* released, the blocks stay matchable from the cache */
    unref_all(b, ids, 3);
    assert_stats(b, 0, 3, 13);
    ck_assert_int_eq(rtx__kv_blocks_match(b, a, 14, 4, got, NULL), 3);
    ck_assert_int_eq(got[2], ids[2]);
    assert_stats(b, 3, 0, 13);
    unref_all(b, got, 3);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_register_keeps_the_first_holder) {
    struct rtx_kv_blocks *b = kv_new(6, 2, true);
    const int32_t t[4] = {1, 2, 3, 4};
    int32_t x[2], y[2], got[2];
    fill_and_register(b, t, 4, x);
    fill_and_register(b, t, 4, y); /* the same tokens computed again by another sequence */
    rtx__kv_blocks_register(b, x[0], (uint8_t[RTX_KV_HASH_BYTES]){0}); /* "no hash": ignored */
    ck_assert_int_eq(rtx__kv_blocks_match(b, t, 5, 2, got, NULL), 2);
    ck_assert_int_eq(got[0], x[0]);
    ck_assert_int_eq(got[1], x[1]);
    unref_all(b, got, 2);
    unref_all(b, y, 2); /* y never registered: free, not cached */
    assert_stats(b, 2, 0, 4);
    unref_all(b, x, 2);
    assert_stats(b, 0, 2, 4);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_evicts_least_recently_released) {
    enum { BS = 2 };
    struct rtx_kv_blocks *b = kv_new(4, BS, true);
    const int32_t pa[5] = {1, 2, 3, 4, 0}, pb[3] = {9, 9, 0};
    int32_t a[2], c[1], got[2], id;
    fill_and_register(b, pa, 4, a);
    fill_and_register(b, pb, 2, c);
    /* released: a[1] first, then c[0], then a[0] */
    rtx__kv_blocks_unref(b, a[1]);
    rtx__kv_blocks_unref(b, c[0]);
    rtx__kv_blocks_unref(b, a[0]);
    assert_stats(b, 0, 3, 1);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0); /* the free block first */
    ck_assert(id != a[0] && id != a[1] && id != c[0]);
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
    ck_assert_int_eq(id, a[1]); /* least recently released */
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.evictions, 1);
    /* a[1]'s hash is gone: pa matches its first block only */
    ck_assert_int_eq(rtx__kv_blocks_match(b, pa, 5, 2, got, NULL), 1);
    ck_assert_int_eq(got[0], a[0]);
    /* matching took a[0] out of the cache; released again it is the most recent */
    rtx__kv_blocks_unref(b, a[0]);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
    ck_assert_int_eq(id, c[0]);
    ck_assert_int_eq(rtx__kv_blocks_match(b, pb, 3, 1, got, NULL), 0);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
    ck_assert_int_eq(id, a[0]);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), RTX_ENOMEM);
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.evictions, 3);
    assert_stats(b, 4, 0, 0);
    /* the evicted block holding other tokens now is never matched for the old ones */
    uint8_t h[RTX_KV_HASH_BYTES];
    const int32_t other[2] = {7, 7};
    rtx__kv_blocks_hash(NULL, other, BS, h);
    rtx__kv_blocks_register(b, id, h);
    ck_assert_int_eq(rtx__kv_blocks_match(b, pa, 5, 2, got, NULL), 0);
    ck_assert_int_eq(rtx__kv_blocks_match(b, (const int32_t[]){7, 7, 1}, 3, 2, got, NULL), 1);
    ck_assert_int_eq(got[0], id);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_prefix_caching_off) {
    struct rtx_kv_blocks *b = kv_new(4, 2, false);
    const int32_t t[5] = {1, 2, 3, 4, 5};
    int32_t ids[2], got[2];
    fill_and_register(b, t, 4, ids);
    ck_assert_int_eq(rtx__kv_blocks_match(b, t, 5, 2, got, NULL), 0);
    unref_all(b, ids, 2);
    assert_stats(b, 0, 0, 4); /* nothing cached */
    ck_assert_int_eq(rtx__kv_blocks_match(b, t, 5, 2, got, NULL), 0);
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.prefix_queries, 0);
    ck_assert_uint_eq(st.prefix_hits, 0);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_shared_block_is_not_evicted) {
    struct rtx_kv_blocks *b = kv_new(3, 2, true);
    const int32_t t[3] = {4, 5, 6}, u[3] = {8, 9, 1};
    int32_t s[1], o[1], got[1], id;
    fill_and_register(b, t, 2, s);
    rtx__kv_blocks_ref(b, s[0]); /* two choices share the prompt's block */
    fill_and_register(b, u, 2, o);
    rtx__kv_blocks_unref(b, o[0]);
    rtx__kv_blocks_unref(b, s[0]); /* one choice finished: count 1, still used */
    assert_stats(b, 1, 1, 1);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
    ck_assert(id != s[0] && id != o[0]);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), 0);
    ck_assert_int_eq(id, o[0]);
    ck_assert_int_eq(rtx__kv_blocks_alloc(b, &id), RTX_ENOMEM);
    ck_assert_int_eq(rtx__kv_blocks_match(b, t, 3, 1, got, NULL), 1); /* still in use */
    ck_assert_int_eq(got[0], s[0]);
    rtx__kv_blocks_free(b);
}
END_TEST

START_TEST(kv_blocks_reset_cache_forgets_cached_blocks) {
    struct rtx_kv_blocks *b = kv_new(6, 2, true);
    const int32_t t[5] = {1, 2, 3, 4, 5}, u[3] = {6, 7, 8};
    int32_t ids[2], kept[1], got[2];
    fill_and_register(b, t, 4, ids);
    fill_and_register(b, u, 2, kept);
    unref_all(b, ids, 2);
    assert_stats(b, 1, 2, 3);
    rtx__kv_blocks_reset_cache(b);
    assert_stats(b, 1, 0, 5);
    ck_assert_int_eq(rtx__kv_blocks_match(b, t, 5, 2, got, NULL), 0);
    ck_assert_int_eq(rtx__kv_blocks_match(b, u, 3, 1, got, NULL), 1); /* used: kept its hash */
    ck_assert_int_eq(got[0], kept[0]);
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.evictions, 0);
    rtx__kv_blocks_free(b);
}
END_TEST

/* ---- a random trace against a reference model ---- */

enum { M_BLOCKS = 12, M_BS = 3, M_PROMPTS = 6, M_LEN = 16, M_FULL = M_LEN / M_BS };

struct model {
    int ref[M_BLOCKS];
    int hash_of[M_BLOCKS];   /* -1 or the index into chains[][] (prompt * M_FULL + block) */
    long released[M_BLOCKS]; /* when a cached block was released */
    long clock;
    uint64_t queries, hits, evictions;
};

struct prompts {
    int32_t tok[M_PROMPTS][M_LEN];
    uint8_t chains[M_PROMPTS * M_FULL][RTX_KV_HASH_BYTES];
};

/* Prompts that share prefixes of different lengths (and one with a repeated block). */
static void prompts_init(struct prompts *p, struct rtx_rng *r) {
    for (int i = 0; i < M_PROMPTS; i++) {
        int shared = i == 0 ? 0 : (int)(rtx_rng_next(r) % M_LEN);
        for (int j = 0; j < M_LEN; j++)
            p->tok[i][j] = j < shared ? p->tok[0][j] : (int32_t)(rtx_rng_next(r) % 3);
        for (int k = 0; k < M_FULL; k++)
            rtx__kv_blocks_hash(k ? p->chains[i * M_FULL + k - 1] : NULL, p->tok[i] + k * M_BS,
                                M_BS, p->chains[i * M_FULL + k]);
    }
}

static int model_holder(const struct model *m, const struct prompts *p, int chain) {
    for (int i = 0; i < M_BLOCKS; i++)
        if (m->hash_of[i] >= 0 &&
            memcmp(p->chains[m->hash_of[i]], p->chains[chain], RTX_KV_HASH_BYTES) == 0)
            return i;
    return -1;
}

static void model_check(const struct model *m, const struct rtx_kv_blocks *b) {
    int used = 0, cached = 0;
    for (int i = 0; i < M_BLOCKS; i++) {
        used += m->ref[i] > 0;
        cached += m->ref[i] == 0 && m->hash_of[i] >= 0;
    }
    assert_stats(b, used, cached, M_BLOCKS - used - cached);
    struct rtx_kv_blocks_stats st;
    rtx__kv_blocks_stats(b, &st);
    ck_assert_uint_eq(st.prefix_queries, m->queries);
    ck_assert_uint_eq(st.prefix_hits, m->hits);
    ck_assert_uint_eq(st.evictions, m->evictions);
}

static void model_alloc(struct model *m, struct rtx_kv_blocks *b) {
    int32_t id = -1;
    int rc = rtx__kv_blocks_alloc(b, &id);
    int n_free = 0, oldest = -1;
    for (int i = 0; i < M_BLOCKS; i++) {
        n_free += m->ref[i] == 0 && m->hash_of[i] < 0;
        if (m->ref[i] == 0 && m->hash_of[i] >= 0 &&
            (oldest < 0 || m->released[i] < m->released[oldest]))
            oldest = i;
    }
    if (n_free == 0 && oldest < 0) {
        ck_assert_int_eq(rc, RTX_ENOMEM);
        return;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert(id >= 0 && id < M_BLOCKS && m->ref[id] == 0);
    if (n_free > 0) {
        ck_assert_int_lt(m->hash_of[id], 0); /* a free block before any eviction */
    } else {
        ck_assert_int_eq(id, oldest);
        m->hash_of[id] = -1;
        m->evictions++;
    }
    m->ref[id] = 1;
}

static int random_used(const struct model *m, struct rtx_rng *r) {
    int start = (int)(rtx_rng_next(r) % M_BLOCKS);
    for (int k = 0; k < M_BLOCKS; k++)
        if (m->ref[(start + k) % M_BLOCKS] > 0) return (start + k) % M_BLOCKS;
    return -1;
}

static void model_match(struct model *m, struct rtx_kv_blocks *b, const struct prompts *p,
                        int prompt, int n, int max_blocks, bool caching) {
    int32_t got[M_FULL];
    int found = rtx__kv_blocks_match(b, p->tok[prompt], n, max_blocks, got, NULL);
    if (!caching) {
        ck_assert_int_eq(found, 0);
        return;
    }
    int full = n < 2 ? 0 : (n - 1) / M_BS;
    if (full > max_blocks) full = max_blocks;
    m->queries += (uint64_t)full;
    int want = 0;
    for (; want < full; want++) {
        int holder = model_holder(m, p, prompt * M_FULL + want);
        if (holder < 0) break;
        ck_assert_int_gt(found, want);
        ck_assert_int_eq(got[want], holder);
        m->ref[holder]++;
    }
    ck_assert_int_eq(found, want);
    m->hits += (uint64_t)want;
}

static void random_trace(bool caching, uint64_t seed) {
    struct rtx_rng r;
    rtx_rng_seed(&r, seed);
    struct prompts p;
    prompts_init(&p, &r);
    struct model m = {0};
    for (int i = 0; i < M_BLOCKS; i++)
        m.hash_of[i] = -1;
    struct rtx_kv_blocks *b = kv_new(M_BLOCKS, M_BS, caching);
    for (int step = 0; step < 20000; step++) {
        int op = (int)(rtx_rng_next(&r) % 100), id;
        if (op < 25) {
            model_alloc(&m, b);
        } else if (op < 50) {
            if ((id = random_used(&m, &r)) < 0) continue;
            rtx__kv_blocks_unref(b, id);
            if (--m.ref[id] == 0 && m.hash_of[id] >= 0) m.released[id] = ++m.clock;
        } else if (op < 58) {
            if ((id = random_used(&m, &r)) < 0) continue;
            rtx__kv_blocks_ref(b, id);
            m.ref[id]++;
        } else if (op < 78) {
            if ((id = random_used(&m, &r)) < 0 || m.hash_of[id] >= 0) continue;
            int chain = (int)(rtx_rng_next(&r) % (M_PROMPTS * M_FULL));
            rtx__kv_blocks_register(b, id, p.chains[chain]);
            if (caching && model_holder(&m, &p, chain) < 0) m.hash_of[id] = chain;
        } else if (op < 99) {
            int prompt = (int)(rtx_rng_next(&r) % M_PROMPTS);
            int n = (int)(rtx_rng_next(&r) % (M_LEN + 1));
            int max_blocks = (int)(rtx_rng_next(&r) % (M_FULL + 2));
            model_match(&m, b, &p, prompt, n, max_blocks, caching);
        } else {
            rtx__kv_blocks_reset_cache(b);
            for (int i = 0; i < M_BLOCKS; i++)
                if (m.ref[i] == 0) m.hash_of[i] = -1;
        }
        model_check(&m, b);
    }
    if (caching) ck_assert_uint_gt(m.hits, 1000); /* the trace did exercise sharing */
    if (caching) ck_assert_uint_gt(m.evictions, 100);
    rtx__kv_blocks_free(b);
}

START_TEST(kv_blocks_random_trace_matches_model) {
    random_trace(true, 1);
    random_trace(true, 2);
    random_trace(false, 3);
}
END_TEST

Suite *rtx_gen_kv_blocks_suite(void) {
    Suite *s = suite_create("gen_kv_blocks");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, kv_blocks_new_rejects_bad_sizes);
    tcase_add_test(tc, kv_blocks_new_oom_loop);
    tcase_add_test(tc, kv_blocks_alloc_until_exhausted);
    tcase_add_test(tc, kv_blocks_unref_frees_and_cycles);
    tcase_add_test(tc, kv_blocks_hash_is_a_sha256_chain);
    tcase_add_test(tc, kv_blocks_match_shares_a_prefix);
    tcase_add_test(tc, kv_blocks_register_keeps_the_first_holder);
    tcase_add_test(tc, kv_blocks_evicts_least_recently_released);
    tcase_add_test(tc, kv_blocks_prefix_caching_off);
    tcase_add_test(tc, kv_blocks_shared_block_is_not_evicted);
    tcase_add_test(tc, kv_blocks_reset_cache_forgets_cached_blocks);
    tcase_add_test(tc, kv_blocks_random_trace_matches_model);
    suite_add_tcase(s, tc);
    return s;
}
