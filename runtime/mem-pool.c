/*
 * mem-pool.c - the caching allocator of runtime/mem-pool.h.
 *
 * DESIGN
 * Every block is a struct block: its address and rounded size, its state (allocated, held
 * back for events, free) and its neighbours in its segment (prev/next, address order). The
 * first block of a segment is its head: merging keeps the lower block, splitting keeps the
 * lower part in the old struct, so a head stays the head for the segment's life and the
 * segment list links heads. Free blocks sit in one treap per pool kind keyed by (stream,
 * size, address), intrusive (left/right/prio in the block), so best fit is a lower-bound
 * search in O(log n) expected and inserting or removing never allocates. Allocated and
 * held-back blocks sit in an intrusive hash table keyed by address; its bucket array grows
 * when it can and otherwise keeps longer chains, so releasing never allocates either.
 * Block structs come from a spare list that rtx_mem_pool_alloc tops up to two entries
 * (a new segment plus a split remainder) before it touches anything, so a failing metadata
 * allocation leaves the pool unchanged. Released blocks with stream uses wait on a pending
 * list; each allocation first moves those whose events completed into the free trees.
 * The account (when set) is charged before each device allocation and credited after each
 * segment goes back, so what it is charged always equals bytes_reserved; a refused charge
 * reads as the device refusing, and its reason is kept for the RTX_ENOMEM message.
 * One mutex guards everything; device and account calls run under it.
 */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "runtime/mem-pool.h"

#define SPARE_MAX 64         /* block structs kept for reuse */
#define HASH_MIN_BUCKETS 64  /* initial bucket count (a power of two) */

enum block_state { BLOCK_FREE, BLOCK_ALLOCATED, BLOCK_PENDING };

/* A stream other than the block's own that used it, and the event that fences that use. */
struct stream_use {
    void *stream;
    void *event;
};

struct block {
    char *ptr;                   /* first byte */
    size_t size;                 /* bytes, a multiple of RTX_MEM_POOL_ROUND */
    size_t requested;            /* bytes the caller asked for (allocated blocks) */
    void *stream;                /* owning stream */
    enum rtx_mem_pool_kind kind;
    enum block_state state;
    struct block *prev, *next;   /* neighbours in the segment, address order */
    struct block *seg_prev, *seg_next; /* segment list (heads only) */
    struct block *left, *right;  /* free tree (free blocks) */
    uint32_t prio;               /* free tree heap priority */
    struct block *hnext;         /* hash chain (allocated and pending blocks) */
    struct block *pnext;         /* pending list */
    struct stream_use *uses;     /* rtx_malloc'd; n_uses in use */
    int n_uses, cap_uses;
};

struct tree_key {
    uintptr_t stream;
    size_t size;
    uintptr_t addr;
};

/* Counters kept per kind and for the total (index RTX_MEM_POOL_KIND_COUNT). */
struct counters {
    size_t requested, allocated, allocated_peak, active, reserved, reserved_peak;
    size_t n_active, n_free, n_segments;
    uint64_t n_allocs, n_frees, n_hits, n_seg_allocs, n_seg_frees, n_retries, n_ooms;
};

struct rtx_mem_pool {
    pthread_mutex_t mu;
    struct rtx_mem_pool_device_i dev;
    void *ctx;
    char name[32];
    size_t cap;                             /* bytes; 0 = none */
    struct rtx_mem_account *account;        /* NULL: none */
    struct block *free_tree[RTX_MEM_POOL_KIND_COUNT];
    struct block *segments;                 /* heads */
    struct block *pending;
    struct block **buckets;
    size_t n_buckets, n_hashed;
    struct block *spare;                    /* linked through hnext */
    int n_spare;
    uint64_t rng;                           /* treap priorities */
    struct counters c[RTX_MEM_POOL_KIND_COUNT + 1];
    /* the account's last refusal, ""; last, so that the fields every allocation reads stay
     * together in the first cache lines */
    char refusal[sizeof ((struct rtx_err *)0)->msg];
};

#define TOTAL RTX_MEM_POOL_KIND_COUNT

static const char *const kind_names[] = {"small", "large"};
static_assert(sizeof kind_names / sizeof kind_names[0] == RTX_MEM_POOL_KIND_COUNT,
              "kind_names must name every rtx_mem_pool_kind");

const char *rtx_mem_pool_kind_name(enum rtx_mem_pool_kind kind) {
    return (unsigned)kind < RTX_MEM_POOL_KIND_COUNT ? kind_names[kind] : "?";
}

/* ---- sizes ---- */

static size_t round_size(size_t bytes) {
    if (bytes == 0) bytes = 1;
    return (bytes + RTX_MEM_POOL_ROUND - 1) & ~(RTX_MEM_POOL_ROUND - 1);
}

static size_t segment_size(size_t rounded) {
    if (rounded <= RTX_MEM_POOL_SMALL_MAX) return RTX_MEM_POOL_SMALL_SEGMENT;
    if (rounded < RTX_MEM_POOL_LARGE_OWN_MIN) return RTX_MEM_POOL_LARGE_SEGMENT;
    return (rounded + RTX_MEM_POOL_LARGE_ROUND - 1) & ~(RTX_MEM_POOL_LARGE_ROUND - 1);
}

static bool should_split(const struct block *b, size_t rounded) {
    size_t rest = b->size - rounded;
    if (b->kind == RTX_MEM_POOL_SMALL) return rest >= RTX_MEM_POOL_ROUND;
    return rest > RTX_MEM_POOL_SMALL_MAX;
}

/* ---- counters ---- */

/* Adds n to (add) or takes it from a size_t field of the kind's and the total counters;
 * off is the field's offset in struct counters. Peaks follow. */
static void count(struct rtx_mem_pool *pool, enum rtx_mem_pool_kind kind, size_t off, size_t n,
                  bool add) {
    for (int i = 0; i < 2; i++) {
        struct counters *c = &pool->c[i == 0 ? (int)kind : TOTAL];
        size_t *f = (size_t *)((char *)c + off);
        *f = add ? *f + n : *f - n;
        if (c->allocated > c->allocated_peak) c->allocated_peak = c->allocated;
        if (c->reserved > c->reserved_peak) c->reserved_peak = c->reserved;
    }
}

/* Counts one occurrence in a uint64_t field of the kind's and the total counters. */
static void count_event(struct rtx_mem_pool *pool, enum rtx_mem_pool_kind kind, size_t off) {
    for (int i = 0; i < 2; i++) {
        struct counters *c = &pool->c[i == 0 ? (int)kind : TOTAL];
        (*(uint64_t *)((char *)c + off))++;
    }
}

#define COUNT_ADD(pool, kind, field, n) count(pool, kind, offsetof(struct counters, field), n, 1)
#define COUNT_SUB(pool, kind, field, n) count(pool, kind, offsetof(struct counters, field), n, 0)
#define EVENT(pool, kind, field) count_event(pool, kind, offsetof(struct counters, field))

/* ---- free trees (treaps keyed by stream, size, address) ---- */

static struct tree_key key_of(const struct block *b) {
    return (struct tree_key){(uintptr_t)b->stream, b->size, (uintptr_t)b->ptr};
}

static bool key_less(struct tree_key a, struct tree_key b) {
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.size != b.size) return a.size < b.size;
    return a.addr < b.addr;
}

/* Splits t into the blocks with keys < k (*l) and >= k (*r). */
static void tree_split(struct block *t, struct tree_key k, struct block **l, struct block **r) {
    if (!t) {
        *l = *r = NULL;
    } else if (key_less(key_of(t), k)) {
        tree_split(t->right, k, &t->right, r);
        *l = t;
    } else {
        tree_split(t->left, k, l, &t->left);
        *r = t;
    }
}

/* Joins two trees where every key of l is below every key of r. */
static struct block *tree_merge(struct block *l, struct block *r) {
    if (!l) return r;
    if (!r) return l;
    if (l->prio > r->prio) {
        l->right = tree_merge(l->right, r);
        return l;
    }
    r->left = tree_merge(l, r->left);
    return r;
}

static struct block *tree_insert(struct block *t, struct block *b) {
    if (!t) return b;
    if (b->prio > t->prio) {
        tree_split(t, key_of(b), &b->left, &b->right);
        return b;
    }
    if (key_less(key_of(b), key_of(t)))
        t->left = tree_insert(t->left, b);
    else
        t->right = tree_insert(t->right, b);
    return t;
}

static struct block *tree_remove(struct block *t, const struct block *b) {
    assert(t);
    if (t == b) return tree_merge(t->left, t->right);
    if (key_less(key_of(b), key_of(t)))
        t->left = tree_remove(t->left, b);
    else
        t->right = tree_remove(t->right, b);
    return t;
}

/* The first block with key >= k, or NULL. */
static struct block *tree_lower_bound(struct block *t, struct tree_key k) {
    struct block *best = NULL;
    while (t) {
        if (key_less(key_of(t), k)) {
            t = t->right;
        } else {
            best = t;
            t = t->left;
        }
    }
    return best;
}

static uint32_t next_prio(struct rtx_mem_pool *pool) {
    uint64_t x = pool->rng; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    pool->rng = x;
    return (uint32_t)(x >> 32);
}

static void free_insert(struct rtx_mem_pool *pool, struct block *b) {
    b->state = BLOCK_FREE;
    b->left = b->right = NULL;
    b->prio = next_prio(pool);
    pool->free_tree[b->kind] = tree_insert(pool->free_tree[b->kind], b);
    COUNT_ADD(pool, b->kind, n_free, 1);
}

static void free_remove(struct rtx_mem_pool *pool, struct block *b) {
    assert(b->state == BLOCK_FREE);
    pool->free_tree[b->kind] = tree_remove(pool->free_tree[b->kind], b);
    COUNT_SUB(pool, b->kind, n_free, 1);
}

/* ---- allocated blocks by address ---- */

static size_t hash_ptr(const void *p, size_t n_buckets) {
    uint64_t h = (uint64_t)(uintptr_t)p * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(h >> 32) & (n_buckets - 1);
}

static void hash_grow(struct rtx_mem_pool *pool) {
    size_t n = pool->n_buckets * 2;
    struct block **nb = rtx_calloc(n, sizeof *nb);
    if (!nb) return; /* longer chains, still correct */
    for (size_t i = 0; i < pool->n_buckets; i++) {
        struct block *b = pool->buckets[i];
        while (b) {
            struct block *nx = b->hnext;
            size_t j = hash_ptr(b->ptr, n);
            b->hnext = nb[j];
            nb[j] = b;
            b = nx;
        }
    }
    rtx_free(pool->buckets);
    pool->buckets = nb;
    pool->n_buckets = n;
}

static void hash_insert(struct rtx_mem_pool *pool, struct block *b) {
    if (pool->n_hashed >= 2 * pool->n_buckets) hash_grow(pool);
    size_t i = hash_ptr(b->ptr, pool->n_buckets);
    b->hnext = pool->buckets[i];
    pool->buckets[i] = b;
    pool->n_hashed++;
}

static struct block *hash_find(struct rtx_mem_pool *pool, const void *ptr) {
    for (struct block *b = pool->buckets[hash_ptr(ptr, pool->n_buckets)]; b; b = b->hnext)
        if (b->ptr == ptr) return b;
    return NULL;
}

static void hash_remove(struct rtx_mem_pool *pool, struct block *b) {
    struct block **pp = &pool->buckets[hash_ptr(b->ptr, pool->n_buckets)];
    while (*pp != b) pp = &(*pp)->hnext;
    *pp = b->hnext;
    b->hnext = NULL;
    pool->n_hashed--;
}

/* ---- block structs ---- */

static bool spare_reserve(struct rtx_mem_pool *pool, int n) {
    while (pool->n_spare < n) {
        struct block *b = rtx_malloc(sizeof *b);
        if (!b) return false;
        b->hnext = pool->spare;
        pool->spare = b;
        pool->n_spare++;
    }
    return true;
}

static struct block *spare_take(struct rtx_mem_pool *pool) {
    struct block *b = pool->spare;
    assert(b);
    pool->spare = b->hnext;
    pool->n_spare--;
    memset(b, 0, sizeof *b);
    return b;
}

static void spare_put(struct rtx_mem_pool *pool, struct block *b) {
    assert(b->n_uses == 0);
    rtx_free(b->uses);
    if (pool->n_spare >= SPARE_MAX) {
        rtx_free(b);
        return;
    }
    b->uses = NULL;
    b->hnext = pool->spare;
    pool->spare = b;
    pool->n_spare++;
}

/* ---- segments ---- */

static void segment_link(struct rtx_mem_pool *pool, struct block *h) {
    h->seg_prev = NULL;
    h->seg_next = pool->segments;
    if (pool->segments) pool->segments->seg_prev = h;
    pool->segments = h;
}

static void segment_unlink(struct rtx_mem_pool *pool, struct block *h) {
    if (h->seg_prev)
        h->seg_prev->seg_next = h->seg_next;
    else
        pool->segments = h->seg_next;
    if (h->seg_next) h->seg_next->seg_prev = h->seg_prev;
}

/* Obtains a segment for a request of `rounded` bytes into *out (a whole-segment block, in
 * no tree). RTX_ENOMEM when the cap or the device refuses; err gets a device error. */
static int segment_alloc(struct rtx_mem_pool *pool, enum rtx_mem_pool_kind kind, void *stream,
                         size_t rounded, struct block **out, struct rtx_err *err) {
    size_t bytes = segment_size(rounded);
    pool->refusal[0] = '\0';
    if (bytes < rounded) return RTX_ENOMEM; /* size overflow */
    if (pool->cap && (pool->c[TOTAL].reserved > pool->cap ||
                      bytes > pool->cap - pool->c[TOTAL].reserved))
        return RTX_ENOMEM;
    if (pool->account) {
        struct rtx_err aerr = {0};
        if (pool->account->charge(pool->account, bytes, &aerr) != 0) {
            snprintf(pool->refusal, sizeof pool->refusal, "%s",
                     aerr.msg[0] ? aerr.msg : "the memory account refused");
            return RTX_ENOMEM;
        }
    }
    void *p = NULL;
    int rc = pool->dev.alloc(pool->ctx, bytes, &p);
    if ((rc != 0 || !p) && pool->account) pool->account->credit(pool->account, bytes);
    if (rc == RTX_ENOMEM) return rc;
    if (rc != 0 || !p) {
        if (rc == 0) rc = RTX_EGPU;
        return rtx_err_set(err, rc, "pool %s: device allocation of %zu bytes failed: %s",
                           pool->name, bytes, rtx_strerror(rc));
    }
    struct block *b = spare_take(pool);
    b->ptr = p;
    b->size = bytes;
    b->stream = stream;
    b->kind = kind;
    b->state = BLOCK_FREE;
    segment_link(pool, b);
    COUNT_ADD(pool, kind, reserved, bytes);
    COUNT_ADD(pool, kind, n_segments, 1);
    EVENT(pool, kind, n_seg_allocs);
    *out = b;
    return 0;
}

/* Bytes of the segment whose head is h: the sum of its blocks. */
static size_t segment_bytes(const struct block *h) {
    size_t n = 0;
    for (const struct block *b = h; b; b = b->next) n += b->size;
    return n;
}

/* Returns every segment whose only block is free to the device. */
static void release_free_segments(struct rtx_mem_pool *pool) {
    struct block *h = pool->segments;
    while (h) {
        struct block *nx = h->seg_next;
        if (h->state == BLOCK_FREE && !h->next) {
            free_remove(pool, h);
            segment_unlink(pool, h);
            pool->dev.free(pool->ctx, h->ptr);
            if (pool->account) pool->account->credit(pool->account, h->size);
            COUNT_SUB(pool, h->kind, reserved, h->size);
            COUNT_SUB(pool, h->kind, n_segments, 1);
            EVENT(pool, h->kind, n_seg_frees);
            spare_put(pool, h);
        }
        h = nx;
    }
}

/* ---- freeing blocks ---- */

static void destroy_uses(struct rtx_mem_pool *pool, struct block *b) {
    for (int i = 0; i < b->n_uses; i++) pool->dev.event_destroy(pool->ctx, b->uses[i].event);
    b->n_uses = 0;
}

/* Merges `from` (the free or just-freed neighbour after `into`) into `into`. */
static void merge_next(struct rtx_mem_pool *pool, struct block *into, struct block *from) {
    into->size += from->size;
    into->next = from->next;
    if (from->next) from->next->prev = into;
    spare_put(pool, from);
}

/* Makes an active block (allocated then released, events done) free, merged with free
 * neighbours. */
static void block_make_free(struct rtx_mem_pool *pool, struct block *b) {
    destroy_uses(pool, b);
    COUNT_SUB(pool, b->kind, active, b->size);
    COUNT_SUB(pool, b->kind, n_active, 1);
    if (b->next && b->next->state == BLOCK_FREE) {
        free_remove(pool, b->next);
        merge_next(pool, b, b->next);
    }
    if (b->prev && b->prev->state == BLOCK_FREE) {
        struct block *p = b->prev;
        free_remove(pool, p);
        merge_next(pool, p, b);
        b = p;
    }
    free_insert(pool, b);
}

/* 1 when every event of b completed, 0 when not yet (or a query failed). */
static int uses_done(struct rtx_mem_pool *pool, struct block *b) {
    for (int i = 0; i < b->n_uses; i++)
        if (pool->dev.event_query(pool->ctx, b->uses[i].event) != 1) return 0;
    return 1;
}

/* Frees held-back blocks whose events completed; all of them when `all`. */
static void process_pending(struct rtx_mem_pool *pool, bool all) {
    struct block **pp = &pool->pending;
    while (*pp) {
        struct block *b = *pp;
        if (all || uses_done(pool, b)) {
            *pp = b->pnext;
            b->pnext = NULL;
            hash_remove(pool, b);
            block_make_free(pool, b);
        } else {
            pp = &b->pnext;
        }
    }
}

/* Frees the cache: held-back blocks (after synchronize, when there is one), then unused
 * segments. */
static void release_cache(struct rtx_mem_pool *pool) {
    bool synced = pool->pending && pool->dev.synchronize && pool->dev.synchronize(pool->ctx) == 0;
    process_pending(pool, synced);
    release_free_segments(pool);
}

/* ---- allocation ---- */

/* Takes the best-fitting free block of the stream out of its tree, or returns NULL. */
static struct block *find_free(struct rtx_mem_pool *pool, enum rtx_mem_pool_kind kind,
                               void *stream, size_t rounded) {
    struct tree_key k = {(uintptr_t)stream, rounded, 0};
    struct block *b = tree_lower_bound(pool->free_tree[kind], k);
    if (!b || b->stream != stream) return NULL;
    free_remove(pool, b);
    return b;
}

static int oom(struct rtx_mem_pool *pool, enum rtx_mem_pool_kind kind, size_t bytes,
               size_t rounded, struct rtx_err *err) {
    EVENT(pool, kind, n_ooms);
    const struct counters *t = &pool->c[TOTAL];
    char cap[48];
    if (pool->cap)
        snprintf(cap, sizeof cap, "%zu bytes", pool->cap);
    else
        snprintf(cap, sizeof cap, "none");
    if (pool->refusal[0]) /* the account's reason first: it names whose share ran out */
        return rtx_err_set(err, RTX_ENOMEM,
                           "%s (pool %s: %zu bytes requested, %zu allocated, %zu reserved, "
                           "cap %s)",
                           pool->refusal, pool->name, bytes, t->allocated, t->reserved, cap);
    return rtx_err_set(err, RTX_ENOMEM,
                       "pool %s: out of memory allocating %zu bytes (%zu rounded, %s pool, "
                       "segment %zu): %zu bytes allocated, %zu reserved, cap %s",
                       pool->name, bytes, rounded, kind_names[kind], segment_size(rounded),
                       t->allocated, t->reserved, cap);
}

static int pool_alloc(struct rtx_mem_pool *pool, size_t bytes, void *stream, void **ptr,
                      struct rtx_err *err) {
    if (bytes > SIZE_MAX - RTX_MEM_POOL_LARGE_ROUND)
        return rtx_err_set(err, RTX_ENOMEM, "pool %s: request of %zu bytes is too large",
                           pool->name, bytes);
    size_t rounded = round_size(bytes);
    enum rtx_mem_pool_kind kind =
        rounded <= RTX_MEM_POOL_SMALL_MAX ? RTX_MEM_POOL_SMALL : RTX_MEM_POOL_LARGE;
    if (!spare_reserve(pool, 2))
        return rtx_err_set(err, RTX_ENOMEM, "pool %s: out of host memory for block records",
                           pool->name);
    if (pool->pending) process_pending(pool, false);

    struct block *b = find_free(pool, kind, stream, rounded);
    bool hit = b != NULL;
    if (!b) {
        int rc = segment_alloc(pool, kind, stream, rounded, &b, err);
        if (rc == RTX_ENOMEM) {
            EVENT(pool, kind, n_retries);
            release_cache(pool);
            b = find_free(pool, kind, stream, rounded);
            hit = b != NULL;
            if (!b) rc = segment_alloc(pool, kind, stream, rounded, &b, err);
            else rc = 0;
        }
        if (rc == RTX_ENOMEM) return oom(pool, kind, bytes, rounded, err);
        if (rc != 0) return rc;
    }

    if (should_split(b, rounded)) {
        struct block *r = spare_take(pool);
        r->ptr = b->ptr + rounded;
        r->size = b->size - rounded;
        r->stream = stream;
        r->kind = kind;
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        b->next = r;
        b->size = rounded;
        free_insert(pool, r);
    }
    b->state = BLOCK_ALLOCATED;
    b->requested = bytes;
    hash_insert(pool, b);
    COUNT_ADD(pool, kind, allocated, b->size);
    COUNT_ADD(pool, kind, requested, bytes);
    COUNT_ADD(pool, kind, active, b->size);
    COUNT_ADD(pool, kind, n_active, 1);
    EVENT(pool, kind, n_allocs);
    if (hit) EVENT(pool, kind, n_hits);
    *ptr = b->ptr;
    return 0;
}

/* ---- public ---- */

int rtx_mem_pool_new(const struct rtx_mem_pool_device_i *dev, void *ctx,
                     const struct rtx_mem_pool_config *cfg, struct rtx_mem_pool **out,
                     struct rtx_err *err) {
    if (!out) return rtx_err_set(err, RTX_EINVAL, "mem pool: out is NULL");
    *out = NULL;
    if (!dev || !dev->alloc || !dev->free || !dev->event_create || !dev->event_record ||
        !dev->event_query || !dev->event_destroy)
        return rtx_err_set(err, RTX_EINVAL, "mem pool: device interface lacks a required slot");
    struct rtx_mem_pool *pool = rtx_calloc(1, sizeof *pool);
    if (!pool) return rtx_err_set(err, RTX_ENOMEM, "mem pool: out of memory");
    pool->buckets = rtx_calloc(HASH_MIN_BUCKETS, sizeof *pool->buckets);
    if (!pool->buckets) {
        rtx_free(pool);
        return rtx_err_set(err, RTX_ENOMEM, "mem pool: out of memory");
    }
    if (pthread_mutex_init(&pool->mu, NULL) != 0) {
        rtx_free(pool->buckets);
        rtx_free(pool);
        return rtx_err_set(err, RTX_EINTERNAL, "mem pool: cannot create its mutex");
    }
    pool->n_buckets = HASH_MIN_BUCKETS;
    pool->dev = *dev;
    pool->ctx = ctx;
    snprintf(pool->name, sizeof pool->name, "%s", cfg && cfg->name ? cfg->name : "unnamed");
    pool->cap = cfg ? cfg->cap_bytes : 0;
    pool->account = cfg ? cfg->account : NULL;
    pool->rng = UINT64_C(0x2545f4914f6cdd1d);
    *out = pool;
    return 0;
}

void rtx_mem_pool_free(struct rtx_mem_pool *pool) {
    if (!pool) return;
    if (pool->dev.synchronize) pool->dev.synchronize(pool->ctx);
    for (struct block *h = pool->segments; h;) {
        struct block *nh = h->seg_next;
        pool->dev.free(pool->ctx, h->ptr);
        if (pool->account) pool->account->credit(pool->account, segment_bytes(h));
        for (struct block *b = h; b;) {
            struct block *nb = b->next;
            destroy_uses(pool, b);
            rtx_free(b->uses);
            rtx_free(b);
            b = nb;
        }
        h = nh;
    }
    while (pool->spare) {
        struct block *b = pool->spare;
        pool->spare = b->hnext;
        rtx_free(b);
    }
    rtx_free(pool->buckets);
    pthread_mutex_destroy(&pool->mu);
    rtx_free(pool);
}

int rtx_mem_pool_alloc(struct rtx_mem_pool *pool, size_t bytes, void *stream, void **ptr,
                       struct rtx_err *err) {
    if (!pool || !ptr) return rtx_err_set(err, RTX_EINVAL, "mem pool: pool or ptr is NULL");
    *ptr = NULL;
    pthread_mutex_lock(&pool->mu);
    int rc = pool_alloc(pool, bytes, stream, ptr, err);
    pthread_mutex_unlock(&pool->mu);
    return rc;
}

int rtx_mem_pool_release(struct rtx_mem_pool *pool, void *ptr, struct rtx_err *err) {
    if (!ptr) return 0;
    if (!pool) return rtx_err_set(err, RTX_EINVAL, "mem pool: pool is NULL");
    int rc = 0;
    pthread_mutex_lock(&pool->mu);
    struct block *b = hash_find(pool, ptr);
    if (!b || b->state != BLOCK_ALLOCATED) {
        rc = rtx_err_set(err, RTX_EINVAL, "pool %s: %p is not an allocated block", pool->name,
                         ptr);
        goto out;
    }
    bool done = false;
    for (int i = 0; i < b->n_uses && rc == 0; i++)
        rc = pool->dev.event_record(pool->ctx, b->uses[i].event, b->uses[i].stream);
    if (rc != 0) {
        if (!pool->dev.synchronize || pool->dev.synchronize(pool->ctx) != 0) {
            rc = rtx_err_set(err, rc, "pool %s: cannot record the release of %p: %s",
                             pool->name, ptr, rtx_strerror(rc));
            goto out;
        }
        rc = 0;
        done = true; /* the device is idle: every use has completed */
    }
    COUNT_SUB(pool, b->kind, allocated, b->size);
    COUNT_SUB(pool, b->kind, requested, b->requested);
    EVENT(pool, b->kind, n_frees);
    if (b->n_uses > 0 && !done) {
        b->state = BLOCK_PENDING;
        b->pnext = pool->pending;
        pool->pending = b;
    } else {
        hash_remove(pool, b);
        block_make_free(pool, b);
    }
out:
    pthread_mutex_unlock(&pool->mu);
    return rc;
}

int rtx_mem_pool_record_stream(struct rtx_mem_pool *pool, void *ptr, void *stream,
                               struct rtx_err *err) {
    if (!pool || !ptr) return rtx_err_set(err, RTX_EINVAL, "mem pool: pool or ptr is NULL");
    int rc = 0;
    pthread_mutex_lock(&pool->mu);
    struct block *b = hash_find(pool, ptr);
    if (!b || b->state != BLOCK_ALLOCATED) {
        rc = rtx_err_set(err, RTX_EINVAL, "pool %s: %p is not an allocated block", pool->name,
                         ptr);
        goto out;
    }
    if (stream == b->stream) goto out;
    for (int i = 0; i < b->n_uses; i++)
        if (b->uses[i].stream == stream) goto out;
    if (b->n_uses == b->cap_uses) {
        int ncap = b->cap_uses ? 2 * b->cap_uses : 2;
        struct stream_use *u = rtx_realloc(b->uses, (size_t)ncap * sizeof *u);
        if (!u) {
            rc = rtx_err_set(err, RTX_ENOMEM, "pool %s: out of host memory", pool->name);
            goto out;
        }
        b->uses = u;
        b->cap_uses = ncap;
    }
    void *ev = NULL;
    rc = pool->dev.event_create(pool->ctx, &ev);
    if (rc != 0) {
        rc = rtx_err_set(err, rc, "pool %s: cannot create an event: %s", pool->name,
                         rtx_strerror(rc));
        goto out;
    }
    b->uses[b->n_uses++] = (struct stream_use){stream, ev};
out:
    pthread_mutex_unlock(&pool->mu);
    return rc;
}

void rtx_mem_pool_empty_cache(struct rtx_mem_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    release_cache(pool);
    pthread_mutex_unlock(&pool->mu);
}

void rtx_mem_pool_set_cap(struct rtx_mem_pool *pool, size_t cap_bytes) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->cap = cap_bytes;
    pthread_mutex_unlock(&pool->mu);
}

/* Adds the free bytes of a tree and its largest block per kind. */
static void tree_free_bytes(const struct block *t, size_t *bytes, size_t *largest) {
    for (; t; t = t->right) {
        tree_free_bytes(t->left, bytes, largest);
        *bytes += t->size;
        if (t->size > *largest) *largest = t->size;
    }
}

static void fill_stats(const struct counters *c, size_t free_bytes, size_t largest,
                       struct rtx_mem_pool_kind_stats *s) {
    *s = (struct rtx_mem_pool_kind_stats){
        .bytes_requested = c->requested,
        .bytes_allocated = c->allocated,
        .bytes_allocated_peak = c->allocated_peak,
        .bytes_active = c->active,
        .bytes_reserved = c->reserved,
        .bytes_reserved_peak = c->reserved_peak,
        .bytes_free = free_bytes,
        .bytes_free_largest = largest,
        .fragmentation = free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0,
        .n_active_blocks = c->n_active,
        .n_free_blocks = c->n_free,
        .n_segments = c->n_segments,
        .n_allocs = c->n_allocs,
        .n_frees = c->n_frees,
        .n_cache_hits = c->n_hits,
        .n_segment_allocs = c->n_seg_allocs,
        .n_segment_frees = c->n_seg_frees,
        .n_retries = c->n_retries,
        .n_ooms = c->n_ooms,
    };
}

void rtx_mem_pool_get_stats(struct rtx_mem_pool *pool, struct rtx_mem_pool_stats *out) {
    if (!pool || !out) return;
    pthread_mutex_lock(&pool->mu);
    size_t all_bytes = 0, all_largest = 0;
    for (int k = 0; k < RTX_MEM_POOL_KIND_COUNT; k++) {
        size_t bytes = 0, largest = 0;
        tree_free_bytes(pool->free_tree[k], &bytes, &largest);
        fill_stats(&pool->c[k], bytes, largest, &out->kind[k]);
        all_bytes += bytes;
        if (largest > all_largest) all_largest = largest;
    }
    fill_stats(&pool->c[TOTAL], all_bytes, all_largest, &out->total);
    out->cap_bytes = pool->cap;
    pthread_mutex_unlock(&pool->mu);
}

void rtx_mem_pool_reset_peaks(struct rtx_mem_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    for (int i = 0; i <= TOTAL; i++) {
        pool->c[i].allocated_peak = pool->c[i].allocated;
        pool->c[i].reserved_peak = pool->c[i].reserved;
    }
    pthread_mutex_unlock(&pool->mu);
}

/* ---- invariants ---- */

/* Checks a tree's order and that every node is a free block of the kind; counts nodes. */
static int check_tree(const struct block *t, enum rtx_mem_pool_kind kind, const struct block *lo,
                      const struct block *hi, size_t *n, struct rtx_err *err) {
    for (; t; lo = t, t = t->right) {
        if (t->state != BLOCK_FREE || t->kind != kind)
            return rtx_err_set(err, RTX_EINTERNAL, "free tree holds a non-free block %p",
                               (void *)t->ptr);
        if ((lo && !key_less(key_of(lo), key_of(t))) || (hi && !key_less(key_of(t), key_of(hi))))
            return rtx_err_set(err, RTX_EINTERNAL, "free tree out of order at %p",
                               (void *)t->ptr);
        if ((t->left && t->left->prio > t->prio) || (t->right && t->right->prio > t->prio))
            return rtx_err_set(err, RTX_EINTERNAL, "free tree heap order broken at %p",
                               (void *)t->ptr);
        int rc = check_tree(t->left, kind, lo, t, n, err);
        if (rc) return rc;
        (*n)++;
    }
    return 0;
}

static int check_locked(struct rtx_mem_pool *pool, struct rtx_err *err) {
    struct counters sum[RTX_MEM_POOL_KIND_COUNT];
    memset(sum, 0, sizeof sum);
    size_t n_hashed = 0;
    for (const struct block *h = pool->segments; h; h = h->seg_next) {
        if (h->prev) return rtx_err_set(err, RTX_EINTERNAL, "segment head has a prev");
        struct counters *c = &sum[h->kind];
        c->n_segments++;
        for (const struct block *b = h; b; b = b->next) {
            if (b->kind != h->kind || b->stream != h->stream)
                return rtx_err_set(err, RTX_EINTERNAL, "block %p differs from its segment",
                                   (void *)b->ptr);
            if (b->size == 0 || b->size % RTX_MEM_POOL_ROUND)
                return rtx_err_set(err, RTX_EINTERNAL, "block %p has size %zu",
                                   (void *)b->ptr, b->size);
            if (b->next && (b->next->prev != b || b->next->ptr != b->ptr + b->size))
                return rtx_err_set(err, RTX_EINTERNAL, "blocks do not tile at %p",
                                   (void *)b->ptr);
            if (b->state == BLOCK_FREE && b->next && b->next->state == BLOCK_FREE)
                return rtx_err_set(err, RTX_EINTERNAL, "free neighbours not merged at %p",
                                   (void *)b->ptr);
            c->reserved += b->size;
            if (b->state == BLOCK_FREE) {
                c->n_free++;
                continue;
            }
            if (hash_find(pool, b->ptr) != b)
                return rtx_err_set(err, RTX_EINTERNAL, "active block %p not in the table",
                                   (void *)b->ptr);
            n_hashed++;
            c->active += b->size;
            c->n_active++;
            if (b->state == BLOCK_ALLOCATED) {
                c->allocated += b->size;
                c->requested += b->requested;
            }
        }
    }
    if (n_hashed != pool->n_hashed)
        return rtx_err_set(err, RTX_EINTERNAL, "table holds %zu blocks, segments %zu",
                           pool->n_hashed, n_hashed);
    struct counters total = {0};
    for (int k = 0; k < RTX_MEM_POOL_KIND_COUNT; k++) {
        size_t n = 0;
        int rc = check_tree(pool->free_tree[k], (enum rtx_mem_pool_kind)k, NULL, NULL, &n, err);
        if (rc) return rc;
        const struct counters *c = &pool->c[k], *s = &sum[k];
        if (n != s->n_free || c->n_free != s->n_free)
            return rtx_err_set(err, RTX_EINTERNAL, "%s: %zu free blocks, tree %zu, count %zu",
                               kind_names[k], s->n_free, n, c->n_free);
        if (c->reserved != s->reserved || c->allocated != s->allocated ||
            c->active != s->active || c->requested != s->requested ||
            c->n_active != s->n_active || c->n_segments != s->n_segments)
            return rtx_err_set(err, RTX_EINTERNAL,
                               "%s: counters (reserved %zu, allocated %zu, active %zu) differ "
                               "from blocks (%zu, %zu, %zu)",
                               kind_names[k], c->reserved, c->allocated, c->active,
                               s->reserved, s->allocated, s->active);
        if (c->allocated > c->active || c->active > c->reserved ||
            c->allocated > c->allocated_peak || c->reserved > c->reserved_peak)
            return rtx_err_set(err, RTX_EINTERNAL, "%s: counters out of order", kind_names[k]);
        total.reserved += s->reserved;
        total.allocated += s->allocated;
        total.active += s->active;
    }
    const struct counters *t = &pool->c[TOTAL];
    if (t->reserved != total.reserved || t->allocated != total.allocated ||
        t->active != total.active)
        return rtx_err_set(err, RTX_EINTERNAL, "total counters differ from the kinds");
    for (const struct block *b = pool->pending; b; b = b->pnext)
        if (b->state != BLOCK_PENDING)
            return rtx_err_set(err, RTX_EINTERNAL, "pending list holds block %p in state %d",
                               (void *)b->ptr, (int)b->state);
    return 0;
}

int rtx_mem_pool_check(struct rtx_mem_pool *pool, struct rtx_err *err) {
    if (!pool) return rtx_err_set(err, RTX_EINVAL, "mem pool: pool is NULL");
    pthread_mutex_lock(&pool->mu);
    int rc = check_locked(pool, err);
    pthread_mutex_unlock(&pool->mu);
    return rc;
}

/* ---- host interface ---- */

static char host_event; /* host events need no state: work is complete when recorded */

static int host_alloc(void *ctx, size_t bytes, void **ptr) {
    *ptr = rtx_malloc_aligned(bytes);
    return *ptr ? 0 : RTX_ENOMEM;
}

static void host_free(void *ctx, void *ptr) { rtx_free_aligned(ptr); }

static int host_event_create(void *ctx, void **event) {
    *event = &host_event;
    return 0;
}

static int host_event_record(void *ctx, void *event, void *stream) { return 0; }
static int host_event_query(void *ctx, void *event) { return 1; }
static void host_event_destroy(void *ctx, void *event) {}

static const struct rtx_mem_pool_device_i host_iface = {
    .alloc = host_alloc,
    .free = host_free,
    .event_create = host_event_create,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_destroy = host_event_destroy,
    .synchronize = NULL,
};

const struct rtx_mem_pool_device_i *rtx_mem_pool_host_interface(void) { return &host_iface; }
