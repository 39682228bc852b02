/*
 * test-mem-pool.c - the caching allocator (runtime/mem-pool.h) over a fake device.
 *
 * DESIGN
 * The fake device allocates with plain malloc (so rtx_alloc_fail_after reaches only the
 * pool's own bookkeeping), counts raw allocations, refuses any allocation that would take
 * its outstanding bytes over a limit, poisons memory before freeing it and checks that the
 * pool frees only what it got. Its events carry a sequence number from a device clock and
 * complete when the test moves `done` up to it; synchronize completes everything. Streams
 * are the addresses of a few static bytes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mem-pool.h"
#include "tests/unit/test-util.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define POISON 0xdd

static char stream_a, stream_b, stream_c;
#define SA ((void *)&stream_a)
#define SB ((void *)&stream_b)
#define SC ((void *)&stream_c)

struct fake_seg {
    void *p;
    size_t bytes;
};

struct fake_dev {
    size_t limit;          /* bytes outstanding allowed */
    size_t outstanding;    /* bytes */
    long n_allocs, n_frees;
    int alloc_error;       /* returned by the next alloc when nonzero (then cleared) */
    int record_error;      /* returned by every event_record when nonzero */
    int create_error;      /* returned by every event_create when nonzero */
    bool has_sync;
    long n_syncs;
    bool poison;
    uint64_t clock, done;  /* events complete when seq <= done */
    long n_events;         /* live events */
    struct fake_seg *segs;
    int n_segs, cap_segs;
};

struct fake_event {
    uint64_t seq;
};

static int fake_alloc(void *ctx, size_t bytes, void **ptr) {
    struct fake_dev *d = ctx;
    if (d->alloc_error) {
        int rc = d->alloc_error;
        d->alloc_error = 0;
        return rc;
    }
    if (bytes > d->limit - d->outstanding) return RTX_ENOMEM;
    void *p = malloc(bytes);
    ck_assert_ptr_nonnull(p);
    if (d->n_segs == d->cap_segs) {
        d->cap_segs = d->cap_segs ? 2 * d->cap_segs : 16;
        d->segs = realloc(d->segs, (size_t)d->cap_segs * sizeof *d->segs);
        ck_assert_ptr_nonnull(d->segs);
    }
    d->segs[d->n_segs++] = (struct fake_seg){p, bytes};
    d->outstanding += bytes;
    d->n_allocs++;
    *ptr = p;
    return 0;
}

static void fake_free(void *ctx, void *ptr) {
    struct fake_dev *d = ctx;
    for (int i = 0; i < d->n_segs; i++) {
        if (d->segs[i].p != ptr) continue;
        if (d->poison) memset(ptr, POISON, d->segs[i].bytes);
        d->outstanding -= d->segs[i].bytes;
        d->segs[i] = d->segs[--d->n_segs];
        d->n_frees++;
        free(ptr);
        return;
    }
    ck_abort_msg("pool freed %p, which the device never handed out", ptr);
}

static int fake_event_create(void *ctx, void **event) {
    struct fake_dev *d = ctx;
    if (d->create_error) return d->create_error;
    struct fake_event *e = calloc(1, sizeof *e);
    ck_assert_ptr_nonnull(e);
    d->n_events++;
    *event = e;
    return 0;
}

static int fake_event_record(void *ctx, void *event, void *stream) {
    struct fake_dev *d = ctx;
    if (d->record_error) return d->record_error;
    ((struct fake_event *)event)->seq = ++d->clock;
    return 0;
}

static int fake_event_query(void *ctx, void *event) {
    struct fake_dev *d = ctx;
    return ((struct fake_event *)event)->seq <= d->done ? 1 : 0;
}

static void fake_event_destroy(void *ctx, void *event) {
    struct fake_dev *d = ctx;
    d->n_events--;
    free(event);
}

static int fake_sync(void *ctx) {
    struct fake_dev *d = ctx;
    ck_assert(d->has_sync);
    d->n_syncs++;
    d->done = d->clock;
    return 0;
}

static const struct rtx_mem_pool_device_i fake_iface = {
    .alloc = fake_alloc,
    .free = fake_free,
    .event_create = fake_event_create,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_destroy = fake_event_destroy,
    .synchronize = NULL,
};

static const struct rtx_mem_pool_device_i fake_iface_sync = {
    .alloc = fake_alloc,
    .free = fake_free,
    .event_create = fake_event_create,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_destroy = fake_event_destroy,
    .synchronize = fake_sync,
};

static struct fake_dev dev;
static struct rtx_mem_pool *pool;

/* A memory account that allows `limit` bytes charged at once and counts its calls. */
struct test_account {
    struct rtx_mem_account a; /* first: the slots cast back */
    size_t limit, charged;    /* bytes */
    long n_charges, n_credits, n_refusals;
};

static int test_charge(struct rtx_mem_account *a, size_t bytes, struct rtx_err *err) {
    struct test_account *t = (struct test_account *)a;
    if (bytes > t->limit - t->charged) {
        t->n_refusals++;
        return rtx_err_set(err, RTX_ENOMEM, "test account: share of %zu bytes exhausted",
                           t->limit);
    }
    t->charged += bytes;
    t->n_charges++;
    return 0;
}

static void test_credit(struct rtx_mem_account *a, size_t bytes) {
    struct test_account *t = (struct test_account *)a;
    ck_assert_uint_le(bytes, t->charged);
    t->charged -= bytes;
    t->n_credits++;
}

static struct test_account acct;

static void setup_pool_account(size_t limit, size_t cap, bool sync, struct rtx_mem_account *a) {
    memset(&dev, 0, sizeof dev);
    dev.limit = limit;
    dev.poison = true;
    dev.has_sync = sync;
    struct rtx_mem_pool_config cfg = {.name = "fake:0", .cap_bytes = cap, .account = a};
    struct rtx_err err;
    ck_assert_int_eq(rtx_mem_pool_new(sync ? &fake_iface_sync : &fake_iface, &dev, &cfg, &pool,
                                      &err),
                     0);
}

static void setup_pool(size_t limit, size_t cap, bool sync) {
    setup_pool_account(limit, cap, sync, NULL);
}

static void setup_account(size_t share) {
    acct = (struct test_account){.a = {.charge = test_charge, .credit = test_credit},
                                 .limit = share};
    setup_pool_account(SIZE_MAX, 0, false, &acct.a);
}

static void teardown_pool(void) {
    rtx_mem_pool_free(pool);
    pool = NULL;
    ck_assert_uint_eq(dev.outstanding, 0);
    ck_assert_int_eq(dev.n_segs, 0);
    ck_assert_int_eq(dev.n_events, 0);
    free(dev.segs);
}

static void *pa(size_t bytes, void *stream) {
    void *p = NULL;
    struct rtx_err err = {0};
    int rc = rtx_mem_pool_alloc(pool, bytes, stream, &p, &err);
    ck_assert_msg(rc == 0, "alloc %zu: %s", bytes, err.msg);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void pr(void *p) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_mem_pool_release(pool, p, &err) == 0, "release: %s", err.msg);
}

static void check_pool(void) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_mem_pool_check(pool, &err) == 0, "check: %s", err.msg);
}

static struct rtx_mem_pool_stats stats(void) {
    struct rtx_mem_pool_stats s;
    rtx_mem_pool_get_stats(pool, &s);
    return s;
}

/* ---- tests ---- */

START_TEST(mem_pool_rounds_sizes_to_512) {
    setup_pool(SIZE_MAX, 0, false);
    void *a = pa(1, NULL), *b = pa(512, NULL), *c = pa(513, NULL), *z = pa(0, NULL);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.bytes_allocated, 512 + 512 + 1024 + 512);
    ck_assert_uint_eq(s.total.bytes_requested, 1 + 512 + 513 + 0);
    ck_assert_uint_eq((char *)b - (char *)a, 512);
    ck_assert_uint_eq((char *)c - (char *)b, 512);
    ck_assert_uint_eq((char *)z - (char *)c, 1024);
    ck_assert_uint_eq(s.total.bytes_reserved, 2 * MIB);
    pr(a), pr(b), pr(c), pr(z);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_separates_small_and_large) {
    setup_pool(SIZE_MAX, 0, false);
    void *s1 = pa(MIB, NULL);     /* small: 2 MiB segment */
    void *l1 = pa(MIB + 1, NULL); /* large: 20 MiB shared segment */
    char *l2 = pa(22 * MIB + 1, NULL); /* own segment, 24 MiB; the 2 MiB rest is split */
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_SMALL].bytes_reserved, 2 * MIB);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_LARGE].bytes_reserved, 20 * MIB + 24 * MIB);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_LARGE].bytes_allocated, MIB + 22 * MIB + 1024);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_LARGE].n_segments, 2);
    pr(l1);
    /* a small request does not take the free large block, nor a large one the small rest */
    void *s2 = pa(512 * KIB, NULL);
    ck_assert_uint_eq((char *)s2 - (char *)s1, MIB);
    void *l3 = pa(MIB + 1, NULL); /* best fit: l2's rest, not the free 20 MiB segment */
    ck_assert_ptr_eq(l3, l2 + 22 * MIB + 512);
    void *l4 = pa(12 * MIB, NULL); /* under 20 MiB: carved from the free shared segment */
    ck_assert_ptr_eq(l4, l1);
    ck_assert_int_eq(dev.n_allocs, 3);
    pr(s1), pr(s2), pr(l2), pr(l3), pr(l4);
    check_pool();
    ck_assert_str_eq(rtx_mem_pool_kind_name(RTX_MEM_POOL_LARGE), "large");
    ck_assert_str_eq(rtx_mem_pool_kind_name(RTX_MEM_POOL_KIND_COUNT), "?");
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_picks_best_fit) {
    setup_pool(SIZE_MAX, 0, false);
    /* one small segment: a(64K) x b(128K) y c(32K) w, with x, y, w kept */
    char *a = pa(64 * KIB, NULL), *x = pa(512, NULL), *b = pa(128 * KIB, NULL);
    char *y = pa(512, NULL), *c = pa(32 * KIB, NULL), *w = pa(512, NULL);
    ck_assert_ptr_eq(c, a + 64 * KIB + 512 + 128 * KIB + 512);
    pr(a), pr(b), pr(c);
    ck_assert_ptr_eq(pa(30 * KIB, NULL), c);   /* smallest that fits: c */
    ck_assert_ptr_eq(pa(100 * KIB, NULL), b);  /* a is too small */
    ck_assert_ptr_eq(pa(64 * KIB, NULL), a);   /* exact fit */
    ck_assert_int_eq(dev.n_allocs, 1);
    check_pool();
    (void)x, (void)y, (void)w;
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_splits_and_coalesces) {
    setup_pool(SIZE_MAX, 0, false);
    char *a = pa(4 * KIB, NULL), *b = pa(4 * KIB, NULL), *c = pa(4 * KIB, NULL);
    ck_assert_ptr_eq(b, a + 4 * KIB);
    ck_assert_ptr_eq(c, b + 4 * KIB);
    pr(b);
    pr(a); /* a and b merge */
    check_pool();
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_free_blocks, 2); /* a+b, and the rest after c */
    ck_assert_ptr_eq(pa(8 * KIB, NULL), a);
    pr(a);
    pr(c); /* all three merge with the rest: one free block, the whole segment */
    s = stats();
    ck_assert_uint_eq(s.total.n_free_blocks, 1);
    ck_assert_uint_eq(s.total.bytes_free_largest, 2 * MIB);
    ck_assert(s.total.fragmentation == 0.0);
    /* large pool: a rest of <= 1 MiB is not split off, a larger one is */
    char *l = pa(19 * MIB + 512 * KIB, NULL);
    ck_assert_uint_eq(stats().kind[RTX_MEM_POOL_LARGE].bytes_allocated, 20 * MIB);
    pr(l);
    char *m = pa(18 * MIB, NULL);
    ck_assert_ptr_eq(m, l);
    ck_assert_uint_eq(stats().kind[RTX_MEM_POOL_LARGE].bytes_allocated, 18 * MIB);
    char *n = pa(2 * MIB, NULL);
    ck_assert_ptr_eq(n, m + 18 * MIB);
    ck_assert_int_eq(dev.n_allocs, 2);
    pr(m), pr(n);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_reuses_cached_blocks) {
    setup_pool(SIZE_MAX, 0, false);
    void *a = pa(300 * KIB, NULL), *b = pa(30 * MIB, NULL);
    pr(a), pr(b);
    for (int i = 0; i < 100; i++) {
        ck_assert_ptr_eq(pa(300 * KIB, NULL), a);
        ck_assert_ptr_eq(pa(30 * MIB, NULL), b);
        pr(a), pr(b);
    }
    ck_assert_int_eq(dev.n_allocs, 2);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_cache_hits, 200);
    ck_assert_uint_eq(s.total.n_allocs, 202);
    ck_assert_uint_eq(s.total.n_segment_allocs, 2);
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_isolates_streams) {
    setup_pool(SIZE_MAX, 0, false);
    void *a = pa(4 * KIB, SA);
    pr(a);
    void *b = pa(4 * KIB, SB); /* a's segment belongs to stream A */
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(dev.n_allocs, 2);
    ck_assert_ptr_eq(pa(4 * KIB, SA), a);
    void *c = pa(4 * KIB, NULL); /* the default stream is a stream of its own */
    ck_assert_int_eq(dev.n_allocs, 3);
    pr(a), pr(b), pr(c);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_defers_reuse_until_events_complete) {
    setup_pool(SIZE_MAX, 0, false);
    struct rtx_err err;
    void *a = pa(64 * KIB, SA);
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), 0);
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), 0); /* repeated: no-op */
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SA, &err), 0); /* own: no-op */
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SC, &err), 0);
    ck_assert_int_eq(dev.n_events, 2);
    pr(a);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.bytes_allocated, 0);
    ck_assert_uint_eq(s.total.bytes_active, 64 * KIB);
    ck_assert_uint_eq(s.total.n_active_blocks, 1);
    ck_assert_int_eq(rtx_mem_pool_release(pool, a, &err), RTX_EINVAL); /* already released */
    void *b = pa(64 * KIB, SA);
    ck_assert_ptr_ne(b, a);
    pr(b);
    dev.done = 1; /* the event on B completed, the one on C not yet */
    void *c = pa(64 * KIB, SA);
    ck_assert_ptr_ne(c, a);
    dev.done = 2;
    void *d = pa(64 * KIB, SA);
    ck_assert_ptr_eq(d, a);
    ck_assert_int_eq(dev.n_events, 0);
    pr(c), pr(d);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_record_stream_errors) {
    setup_pool(SIZE_MAX, 0, false);
    struct rtx_err err;
    int x;
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, &x, SB, &err), RTX_EINVAL);
    void *a = pa(1000, SA);
    dev.create_error = RTX_EGPU;
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), RTX_EGPU);
    ck_assert_ptr_nonnull(strstr(err.msg, "event"));
    dev.create_error = 0;
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), 0);
    /* recording fails and there is no synchronize: the block stays allocated */
    dev.record_error = RTX_EGPU;
    ck_assert_int_eq(rtx_mem_pool_release(pool, a, &err), RTX_EGPU);
    ck_assert_uint_eq(stats().total.bytes_allocated, 512 * 2);
    dev.record_error = 0;
    pr(a);
    dev.done = dev.clock;
    ck_assert_ptr_eq(pa(1000, SA), a);
    pr(a);
    ck_assert_int_eq(rtx_mem_pool_release(pool, NULL, &err), 0);
    ck_assert_int_eq(rtx_mem_pool_release(pool, &x, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, 1, NULL, NULL, &err), RTX_EINVAL);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_release_synchronizes_when_record_fails) {
    setup_pool(SIZE_MAX, 0, true);
    struct rtx_err err;
    void *a = pa(1000, SA);
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), 0);
    dev.record_error = RTX_EGPU;
    ck_assert_int_eq(rtx_mem_pool_release(pool, a, &err), 0);
    ck_assert_int_eq(dev.n_syncs, 1);
    ck_assert_int_eq(dev.n_events, 0);
    dev.record_error = 0;
    ck_assert_ptr_eq(pa(1000, SA), a);
    pr(a);
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_device_error_passes_through) {
    setup_pool(SIZE_MAX, 0, false);
    struct rtx_err err;
    void *p = &err;
    dev.alloc_error = RTX_EGPU;
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, 100, NULL, &p, &err), RTX_EGPU);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err.msg, "device allocation"));
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_retries, 0);
    ck_assert_uint_eq(s.total.n_ooms, 0);
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, SIZE_MAX - 10, NULL, &p, &err), RTX_ENOMEM);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_oom_retry_frees_cache_then_succeeds) {
    setup_pool(21 * MIB, 0, false);
    void *a = pa(KIB, NULL);
    void *b = pa(KIB, SB);  /* a second small segment, on stream B */
    pr(a);
    pr(b);
    ck_assert_uint_eq(dev.outstanding, 4 * MIB);
    void *l = pa(5 * MIB, NULL); /* needs 20 MiB: only fits once the cache is gone */
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_retries, 1);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_LARGE].n_retries, 1);
    ck_assert_uint_eq(s.total.n_ooms, 0);
    ck_assert_uint_eq(s.total.n_segment_frees, 2);
    ck_assert_uint_eq(s.total.bytes_reserved, 20 * MIB);
    ck_assert_int_eq(dev.n_frees, 2);
    pr(l);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_oom_retry_waits_for_pending_with_synchronize) {
    setup_pool(20 * MIB, 0, true);
    struct rtx_err err;
    void *a = pa(12 * MIB, SA);
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, a, SB, &err), 0);
    pr(a); /* held back for B's event */
    /* OOM -> synchronize -> a's segment is unused and goes back -> room for a new one */
    void *b = pa(12 * MIB, SA);
    ck_assert_int_eq(dev.n_syncs, 1);
    ck_assert_int_eq(dev.n_events, 0);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_retries, 1);
    ck_assert_uint_eq(s.total.n_segment_frees, 1);
    ck_assert_uint_eq(s.total.bytes_reserved, 12 * MIB);
    pr(b);
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_oom_fails_with_message_and_counts) {
    setup_pool(10 * MIB, 0, false);
    void *a = pa(KIB, NULL);
    void *p = a;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, 12 * MIB, NULL, &p, &err), RTX_ENOMEM);
    ck_assert_int_eq(err.code, RTX_ENOMEM);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err.msg, "fake:0"));
    ck_assert_ptr_nonnull(strstr(err.msg, "12582912 bytes"));
    ck_assert_ptr_nonnull(strstr(err.msg, "1024 bytes allocated"));
    ck_assert_ptr_nonnull(strstr(err.msg, "2097152 reserved"));
    ck_assert_ptr_nonnull(strstr(err.msg, "cap none"));
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_ooms, 1);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_LARGE].n_ooms, 1);
    ck_assert_uint_eq(s.kind[RTX_MEM_POOL_SMALL].n_ooms, 0);
    ck_assert_uint_eq(s.total.n_retries, 1);
    ck_assert_uint_eq(s.total.bytes_allocated, KIB);
    ck_assert_uint_eq(s.total.n_allocs, 1);
    pr(pa(KIB, NULL)); /* still usable */
    pr(a);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_account_is_charged_per_segment_and_credited) {
    setup_account(SIZE_MAX);
    void *a = pa(KIB, NULL), *b = pa(5 * MIB, NULL), *c = pa(16 * MIB, NULL);
    void *d = pa(KIB, NULL); /* from a's segment: no charge */
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(acct.charged, 2 * MIB + 20 * MIB + 16 * MIB);
    ck_assert_uint_eq(acct.charged, s.total.bytes_reserved);
    ck_assert_int_eq(acct.n_charges, 3);
    pr(a), pr(b), pr(c);
    ck_assert_uint_eq(acct.charged, s.total.bytes_reserved); /* cached: still charged */
    rtx_mem_pool_empty_cache(pool);
    ck_assert_uint_eq(acct.charged, 2 * MIB); /* d keeps its segment */
    ck_assert_int_eq(acct.n_credits, 2);
    (void)d;
    teardown_pool(); /* frees d's segment with the pool: credited too */
    ck_assert_uint_eq(acct.charged, 0);
    ck_assert_int_eq(acct.n_credits, 3);
}
END_TEST

START_TEST(mem_pool_account_refusal_retries_after_cache_release) {
    setup_account(4 * MIB);
    void *a = pa(KIB, NULL), *b = pa(KIB, SB);
    pr(a), pr(b); /* two cached 2 MiB segments use the whole share */
    ck_assert_uint_eq(acct.charged, 4 * MIB);
    void *c = pa(KIB, SC); /* a new segment: refused, cache returned, charged again */
    ck_assert_int_eq(acct.n_refusals, 1);
    ck_assert_uint_eq(acct.charged, 2 * MIB);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_retries, 1);
    ck_assert_uint_eq(s.total.n_ooms, 0);
    ck_assert_uint_eq(s.total.n_segment_frees, 2);
    pr(c);
    check_pool();
    teardown_pool();
    ck_assert_uint_eq(acct.charged, 0);
}
END_TEST

START_TEST(mem_pool_account_refusal_fails_with_its_reason) {
    setup_account(3 * MIB);
    void *a = pa(KIB, NULL);
    long allocs = dev.n_allocs;
    void *p = (void *)1;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, KIB, SB, &p, &err), RTX_ENOMEM);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(err.code, RTX_ENOMEM);
    ck_assert_msg(strstr(err.msg, "test account: share of 3145728 bytes exhausted") &&
                      strstr(err.msg, "pool fake:0") && strstr(err.msg, "2097152 reserved"),
                  "%s", err.msg);
    ck_assert_int_eq(dev.n_allocs, allocs); /* the device was never asked */
    ck_assert_int_eq(acct.n_refusals, 2);  /* the first try and the retry */
    ck_assert_uint_eq(acct.charged, 2 * MIB);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_ooms, 1);
    ck_assert_uint_eq(s.total.n_retries, 1);
    /* a refusal by the device afterwards does not repeat the account's stale reason */
    acct.limit = SIZE_MAX;
    dev.limit = dev.outstanding;
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, KIB, SB, &p, &err), RTX_ENOMEM);
    ck_assert_ptr_null(strstr(err.msg, "test account"));
    ck_assert_uint_eq(acct.charged, 2 * MIB); /* the refused segment was credited back */
    pr(a);
    teardown_pool();
    ck_assert_uint_eq(acct.charged, 0);
}
END_TEST

START_TEST(mem_pool_account_credited_when_device_fails) {
    setup_account(SIZE_MAX);
    dev.alloc_error = RTX_EGPU;
    void *p;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, KIB, NULL, &p, &err), RTX_EGPU);
    ck_assert_uint_eq(acct.charged, 0);
    ck_assert_int_eq(acct.n_charges, 1);
    ck_assert_int_eq(acct.n_credits, 1);
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_enforces_cap) {
    setup_pool(SIZE_MAX, 4 * MIB, false);
    void *a = pa(MIB, NULL), *b = pa(MIB, NULL), *c = pa(MIB, NULL), *d = pa(MIB, NULL);
    ck_assert_int_eq(dev.n_allocs, 2);
    void *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, 512, NULL, &p, &err), RTX_ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "cap 4194304 bytes"));
    ck_assert_int_eq(rtx_mem_pool_alloc(pool, 2 * MIB, NULL, &p, &err), RTX_ENOMEM);
    ck_assert_int_eq(dev.n_allocs, 2); /* the device was never asked */
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_ooms, 2);
    ck_assert_uint_eq(s.cap_bytes, 4 * MIB);
    ck_assert_uint_le(s.total.bytes_reserved_peak, 4 * MIB);
    rtx_mem_pool_set_cap(pool, 0);
    void *e = pa(2 * MIB, NULL);
    pr(a), pr(b), pr(c), pr(d), pr(e);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_empty_cache_releases_unused_segments) {
    setup_pool(SIZE_MAX, 0, false);
    struct rtx_err err;
    void *a = pa(KIB, NULL), *b = pa(KIB, SB), *l = pa(3 * MIB, NULL), *h = pa(40 * MIB, SA);
    void *keep = pa(KIB, NULL); /* keeps a's segment */
    ck_assert_int_eq(rtx_mem_pool_record_stream(pool, h, SB, &err), 0);
    pr(a), pr(b), pr(l), pr(h);
    rtx_mem_pool_empty_cache(pool); /* h still waits for its event */
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.n_segments, 2);
    ck_assert_uint_eq(s.total.bytes_reserved, 2 * MIB + 40 * MIB);
    ck_assert_uint_eq(dev.outstanding, s.total.bytes_reserved);
    dev.done = dev.clock;
    rtx_mem_pool_empty_cache(pool);
    s = stats();
    ck_assert_uint_eq(s.total.bytes_reserved, 2 * MIB);
    ck_assert_uint_eq(s.total.n_segment_frees, 3);
    pr(keep);
    rtx_mem_pool_empty_cache(pool);
    ck_assert_uint_eq(stats().total.bytes_reserved, 0);
    ck_assert_uint_eq(dev.outstanding, 0);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_stats_add_up) {
    setup_pool(SIZE_MAX, 0, false);
    char *a = pa(100, NULL), *b = pa(64 * KIB, NULL), *c = pa(700, NULL);
    void *l = pa(11 * MIB, NULL);
    pr(b); /* free in the small segment: 64K hole, then the rest after c */
    struct rtx_mem_pool_stats s = stats();
    const struct rtx_mem_pool_kind_stats *k = &s.kind[RTX_MEM_POOL_SMALL];
    size_t rest = 2 * MIB - 512 - 64 * KIB - 1024;
    ck_assert_uint_eq(k->bytes_allocated, 512 + 1024);
    ck_assert_uint_eq(k->bytes_allocated_peak, 512 + 64 * KIB + 1024);
    ck_assert_uint_eq(k->bytes_requested, 800);
    ck_assert_uint_eq(k->bytes_reserved, 2 * MIB);
    ck_assert_uint_eq(k->bytes_free, 64 * KIB + rest);
    ck_assert_uint_eq(k->bytes_free, k->bytes_reserved - k->bytes_active);
    ck_assert_uint_eq(k->bytes_free_largest, rest);
    ck_assert(k->fragmentation > 0.0312 && k->fragmentation < 0.0313); /* 64K / 2046.5K */
    ck_assert_uint_eq(k->n_active_blocks, 2);
    ck_assert_uint_eq(k->n_free_blocks, 2);
    ck_assert_uint_eq(k->n_allocs, 3);
    ck_assert_uint_eq(k->n_frees, 1);
    ck_assert_uint_eq(s.total.bytes_allocated, 512 + 1024 + 12 * MIB);
    ck_assert_uint_eq(s.total.bytes_reserved, 2 * MIB + 12 * MIB);
    ck_assert_uint_eq(s.total.bytes_reserved_peak, 14 * MIB);
    ck_assert_uint_eq(s.total.n_segments, 2);
    ck_assert_uint_eq(s.total.n_allocs, 4);
    pr(l);
    rtx_mem_pool_empty_cache(pool);
    rtx_mem_pool_reset_peaks(pool);
    s = stats();
    ck_assert_uint_eq(s.total.bytes_reserved_peak, 2 * MIB);
    ck_assert_uint_eq(s.total.bytes_allocated_peak, 512 + 1024);
    pr(a), pr(c);
    check_pool();
    teardown_pool();
}
END_TEST

START_TEST(mem_pool_new_rejects_bad_interface) {
    struct rtx_mem_pool_device_i bad = fake_iface;
    bad.event_query = NULL;
    struct rtx_mem_pool *p = (void *)&bad;
    struct rtx_err err;
    ck_assert_int_eq(rtx_mem_pool_new(&bad, NULL, NULL, &p, &err), RTX_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(rtx_mem_pool_new(NULL, NULL, NULL, &p, &err), RTX_EINVAL);
    rtx_mem_pool_free(NULL);
}
END_TEST

START_TEST(mem_pool_host_interface_works) {
    struct rtx_mem_pool *hp = NULL;
    struct rtx_err err;
    ck_assert_int_eq(rtx_mem_pool_new(rtx_mem_pool_host_interface(), NULL, NULL, &hp, &err), 0);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(rtx_mem_pool_alloc(hp, 3000, NULL, &a, &err), 0);
    ck_assert_uint_eq((uintptr_t)a % 64, 0);
    memset(a, 1, 3000);
    ck_assert_int_eq(rtx_mem_pool_record_stream(hp, a, SB, &err), 0);
    ck_assert_int_eq(rtx_mem_pool_release(hp, a, &err), 0);
    ck_assert_int_eq(rtx_mem_pool_alloc(hp, 3000, NULL, &b, &err), 0);
    ck_assert_ptr_eq(a, b); /* host events complete at once */
    ck_assert_int_eq(rtx_mem_pool_check(hp, &err), 0);
    rtx_mem_pool_free(hp); /* b still held: freed with the pool */
}
END_TEST

/* ---- random trace ---- */

struct live {
    char *p;
    size_t bytes;
    void *stream;
    unsigned char pat;
};

/* Blocks released with stream uses whose last event is not done: no allocation may
 * overlap them until it is. */
struct fence {
    char *p;
    size_t bytes;
    uint64_t seq;
};

static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Sizes 1 B .. 64 MiB: mostly small, log-uniform within each band. */
static size_t random_size(void) {
    unsigned band = (unsigned)(rnd() % 100);
    int lo_bits, hi_bits;
    if (band < 70) lo_bits = 0, hi_bits = 16;       /* 1 B .. 64 KiB */
    else if (band < 92) lo_bits = 16, hi_bits = 21; /* 64 KiB .. 2 MiB */
    else lo_bits = 21, hi_bits = 26;                /* 2 MiB .. 64 MiB */
    int bits = lo_bits + (int)(rnd() % (unsigned)(hi_bits - lo_bits));
    size_t base = (size_t)1 << bits;
    return base + (size_t)(rnd() % base); /* [2^bits, 2^(bits+1)) */
}

/* Fills a block with its pattern byte: whole up to 64 KiB; above, the first and last 4 KiB
 * and one byte every 512 (so every 512-byte unit another block could start in is marked;
 * the address-interval check catches overlap exactly). */
static void fill(const struct live *l) {
    if (l->bytes <= 64 * KIB) {
        memset(l->p, l->pat, l->bytes);
        return;
    }
    memset(l->p, l->pat, 4 * KIB);
    memset(l->p + l->bytes - 4 * KIB, l->pat, 4 * KIB);
    for (size_t o = 4 * KIB; o < l->bytes - 4 * KIB; o += 512) l->p[o] = (char)l->pat;
}

/* Whether every byte of [p, p + n) is c (n > 0). */
static bool all_equal(const unsigned char *p, size_t n, unsigned char c) {
    return p[0] == c && (n == 1 || memcmp(p, p + 1, n - 1) == 0);
}

/* Checks what fill wrote (plain ifs: a Check assertion per byte would be slow). */
static void verify(const struct live *l) {
    const unsigned char *p = (const unsigned char *)l->p;
    bool ok;
    if (l->bytes <= 64 * KIB) {
        ok = all_equal(p, l->bytes, l->pat);
    } else {
        ok = all_equal(p, 4 * KIB, l->pat) && all_equal(p + l->bytes - 4 * KIB, 4 * KIB, l->pat);
        for (size_t o = 4 * KIB; ok && o < l->bytes - 4 * KIB; o += 512) ok = p[o] == l->pat;
    }
    if (!ok) ck_abort_msg("block %p (%zu bytes) corrupted", (void *)p, l->bytes);
}

static bool overlaps(const char *a, size_t an, const char *b, size_t bn) {
    return a < b + bn && b < a + an;
}

#define TRACE_SLOTS 384
#define TRACE_OPS 100000

START_TEST(mem_pool_random_trace_keeps_blocks_disjoint_and_intact) {
    setup_pool(768 * MIB, 0, false);
    rng_state = UINT64_C(0x9e3779b97f4a7c15);
    static struct live live[TRACE_SLOTS];
    static struct fence fences[4096];
    int n_fences = 0;
    memset(live, 0, sizeof live);
    void *streams[3] = {NULL, SA, SB};
    long n_oom = 0, n_alloc = 0;
    for (int op = 0; op < TRACE_OPS; op++) {
        struct live *l = &live[rnd() % TRACE_SLOTS];
        if (l->p) {
            verify(l);
            if (rnd() % 8 == 0) {
                void *other = streams[rnd() % 3];
                struct rtx_err err;
                ck_assert_int_eq(rtx_mem_pool_record_stream(pool, l->p, other, &err), 0);
                if (other != l->stream && n_fences < 4096)
                    fences[n_fences++] = (struct fence){l->p, l->bytes, dev.clock + 1};
            }
            pr(l->p);
            l->p = NULL;
        } else {
            size_t bytes = random_size();
            void *s = streams[rnd() % 3];
            void *p = NULL;
            struct rtx_err err;
            int rc = rtx_mem_pool_alloc(pool, bytes, s, &p, &err);
            if (rc == RTX_ENOMEM) {
                n_oom++;
                continue;
            }
            ck_assert_msg(rc == 0, "alloc: %s", err.msg);
            n_alloc++;
            *l = (struct live){p, bytes, s, (unsigned char)(1 + rnd() % 200)};
            for (int i = 0; i < TRACE_SLOTS; i++)
                if (live[i].p && &live[i] != l &&
                    overlaps(l->p, l->bytes, live[i].p, live[i].bytes))
                    ck_abort_msg("live blocks %p and %p overlap", (void *)l->p,
                                 (void *)live[i].p);
            for (int i = 0; i < n_fences; i++)
                if (fences[i].seq > dev.done &&
                    overlaps(l->p, l->bytes, fences[i].p, fences[i].bytes))
                    ck_abort_msg("reused a block before its event completed");
            fill(l);
        }
        if (rnd() % 64 == 0) { /* the device makes progress */
            dev.done += rnd() % 4;
            if (dev.done > dev.clock) dev.done = dev.clock;
            int k = 0;
            for (int i = 0; i < n_fences; i++)
                if (fences[i].seq > dev.done) fences[k++] = fences[i];
            n_fences = k;
        }
        if (op % 5000 == 0) rtx_mem_pool_empty_cache(pool);
        if (op % 1000 == 0) {
            check_pool();
            struct rtx_mem_pool_stats s = stats();
            size_t live_bytes = 0;
            for (int i = 0; i < TRACE_SLOTS; i++) live_bytes += live[i].p ? live[i].bytes : 0;
            ck_assert_uint_eq(s.total.bytes_requested, live_bytes);
            ck_assert_uint_le(s.total.bytes_allocated, s.total.bytes_reserved);
            ck_assert_uint_eq(s.total.bytes_reserved, dev.outstanding);
            ck_assert_uint_eq(s.total.bytes_reserved,
                              s.total.bytes_active + s.total.bytes_free);
        }
    }
    for (int i = 0; i < TRACE_SLOTS; i++)
        if (live[i].p) verify(&live[i]), pr(live[i].p);
    dev.done = dev.clock;
    rtx_mem_pool_empty_cache(pool);
    struct rtx_mem_pool_stats s = stats();
    ck_assert_uint_eq(s.total.bytes_reserved, 0);
    ck_assert_uint_eq(s.total.n_active_blocks, 0);
    ck_assert_int_gt(n_alloc, TRACE_OPS / 3);
    ck_assert_uint_gt(s.total.n_cache_hits, (uint64_t)n_alloc / 2);
    ck_assert_uint_eq(s.total.n_ooms, (uint64_t)n_oom);
    check_pool();
    teardown_pool();
}
END_TEST

/* ---- out of memory in the pool's own bookkeeping ---- */

/* A fixed workload: splits, merges, stream uses, a retry and empty_cache. Returns 0 or the
 * first failure's code; every block it got is released (or left to rtx_mem_pool_free). */
static int oom_workload(struct rtx_mem_pool *p) {
    void *b[40] = {0};
    int rc = 0;
    for (int i = 0; i < 40 && rc == 0; i++)
        rc = rtx_mem_pool_alloc(p, (size_t)(i % 7 + 1) * 3000 + (i % 5 == 0 ? 3 * MIB : 0),
                                i % 3 == 0 ? SA : NULL, &b[i], NULL);
    for (int i = 0; i < 40 && rc == 0; i += 4)
        if (b[i]) rc = rtx_mem_pool_record_stream(p, b[i], SB, NULL);
    for (int i = 0; i < 40; i += 2)
        if (b[i] && rtx_mem_pool_release(p, b[i], NULL) == 0) b[i] = NULL;
    dev.done = dev.clock;
    rtx_mem_pool_empty_cache(p);
    ck_assert_int_eq(rtx_mem_pool_check(p, NULL), 0);
    for (int i = 1; i < 40; i += 2)
        if (b[i]) ck_assert_int_eq(rtx_mem_pool_release(p, b[i], NULL), 0);
    return rc;
}

START_TEST(mem_pool_metadata_oom_loop) {
    int n;
    for (n = 1; n < 1000; n++) {
        memset(&dev, 0, sizeof dev);
        dev.limit = SIZE_MAX;
        struct rtx_mem_pool *p = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        int rc = rtx_mem_pool_new(&fake_iface, &dev, NULL, &p, &err);
        if (rc == 0) rc = oom_workload(p);
        rtx_alloc_fail_after(0);
        ck_assert_msg(rc == 0 || rc == RTX_ENOMEM, "n=%d: rc %d", n, rc);
        if (p) ck_assert_int_eq(rtx_mem_pool_check(p, NULL), 0);
        rtx_mem_pool_free(p);
        ck_assert_uint_eq(dev.outstanding, 0);
        ck_assert_int_eq(dev.n_events, 0);
        free(dev.segs);
        if (rc == 0) break;
    }
    ck_assert_int_gt(n, 3);
    ck_assert_int_lt(n, 1000);
}
END_TEST

/* ---- threads ---- */

static void *thread_hammer(void *arg) {
    struct rtx_mem_pool *p = ((void **)arg)[0];
    void *stream = ((void **)arg)[1];
    uint64_t r = (uintptr_t)stream;
    void *held[16] = {0};
    for (int i = 0; i < 20000; i++) {
        r = r * 6364136223846793005u + 1442695040888963407u;
        int k = (int)(r >> 60);
        if (held[k]) {
            if (*(void **)held[k] != held[k]) return (void *)1;
            rtx_mem_pool_release(p, held[k], NULL);
            held[k] = NULL;
        } else if (rtx_mem_pool_alloc(p, (size_t)(r >> 40) % (256 * KIB) + 8, stream, &held[k],
                                      NULL) == 0) {
            *(void **)held[k] = held[k];
        }
    }
    for (int k = 0; k < 16; k++) rtx_mem_pool_release(p, held[k], NULL);
    return NULL;
}

START_TEST(mem_pool_is_thread_safe) {
    struct rtx_mem_pool *hp = NULL;
    ck_assert_int_eq(rtx_mem_pool_new(rtx_mem_pool_host_interface(), NULL, NULL, &hp, NULL), 0);
    pthread_t t[4];
    void *args[4][2];
    void *streams[4] = {NULL, SA, SB, SA};
    for (int i = 0; i < 4; i++) {
        args[i][0] = hp;
        args[i][1] = streams[i];
        ck_assert_int_eq(pthread_create(&t[i], NULL, thread_hammer, args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *res = (void *)1;
        pthread_join(t[i], &res);
        ck_assert_ptr_null(res);
    }
    struct rtx_mem_pool_stats s;
    rtx_mem_pool_get_stats(hp, &s);
    ck_assert_uint_eq(s.total.bytes_allocated, 0);
    ck_assert_uint_eq(s.total.n_allocs, s.total.n_frees);
    ck_assert_int_eq(rtx_mem_pool_check(hp, NULL), 0);
    rtx_mem_pool_free(hp);
}
END_TEST

Suite *rtx_mem_pool_suite(void) {
    Suite *s = suite_create("mem_pool");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, mem_pool_rounds_sizes_to_512);
    tcase_add_test(tc, mem_pool_separates_small_and_large);
    tcase_add_test(tc, mem_pool_picks_best_fit);
    tcase_add_test(tc, mem_pool_splits_and_coalesces);
    tcase_add_test(tc, mem_pool_reuses_cached_blocks);
    tcase_add_test(tc, mem_pool_isolates_streams);
    tcase_add_test(tc, mem_pool_defers_reuse_until_events_complete);
    tcase_add_test(tc, mem_pool_record_stream_errors);
    tcase_add_test(tc, mem_pool_release_synchronizes_when_record_fails);
    tcase_add_test(tc, mem_pool_device_error_passes_through);
    tcase_add_test(tc, mem_pool_oom_retry_frees_cache_then_succeeds);
    tcase_add_test(tc, mem_pool_oom_retry_waits_for_pending_with_synchronize);
    tcase_add_test(tc, mem_pool_oom_fails_with_message_and_counts);
    tcase_add_test(tc, mem_pool_enforces_cap);
    tcase_add_test(tc, mem_pool_account_is_charged_per_segment_and_credited);
    tcase_add_test(tc, mem_pool_account_refusal_retries_after_cache_release);
    tcase_add_test(tc, mem_pool_account_refusal_fails_with_its_reason);
    tcase_add_test(tc, mem_pool_account_credited_when_device_fails);
    tcase_add_test(tc, mem_pool_empty_cache_releases_unused_segments);
    tcase_add_test(tc, mem_pool_stats_add_up);
    tcase_add_test(tc, mem_pool_new_rejects_bad_interface);
    tcase_add_test(tc, mem_pool_host_interface_works);
    tcase_add_test(tc, mem_pool_metadata_oom_loop);
    tcase_add_test(tc, mem_pool_is_thread_safe);
    suite_add_tcase(s, tc);
    TCase *trace = tcase_create("trace");
    tcase_set_timeout(trace, 300);
    tcase_add_test(trace, mem_pool_random_trace_keeps_blocks_disjoint_and_intact);
    suite_add_tcase(s, trace);
    return s;
}
