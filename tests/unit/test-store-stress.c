/*
 * test-store-stress.c - the SQLite store under stress: concurrent writers (durable, distinct
 * ids; batched writes that fail only their own callers; a reopen that shows everything), I/O
 * faults through a fault-injecting sqlite3_vfs, and out-of-memory loops over the read paths.
 * The fixture and job helpers are in test-store-util.h.
 *
 * Each test works in its own directory from mkdtemp under /tmp and removes it at the end.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/store-impl.h"
#include "tests/unit/test-store-util.h"

/* ------------------------------------------------------------------------------------------
 * Concurrency
 * ---------------------------------------------------------------------------------------- */

#define WRITER_THREADS 16
#define INSERTS_PER_THREAD 100

struct insert_ctx {
    struct rtx_store *s;
    int thread;
    char ids[INSERTS_PER_THREAD][RTX_JOB_ID_LEN];
    int failures;
    char msg[256];
};

static void *insert_thread(void *arg) {
    struct insert_ctx *c = arg;
    static unsigned char req[10 * 1024];
    for (int i = 0; i < INSERTS_PER_THREAD; i++) {
        struct rtx_job_info j;
        char id[RTX_JOB_ID_LEN];
        rtx_store_new_job_id(id);
        job_init(&j, id, 1000000 + c->thread * 1000 + i);
        char key[32];
        snprintf(key, sizeof key, "t%d-%d", c->thread, i);
        j.idempotency_key = key;
        struct rtx_job_label l = {"thread", key};
        j.n_labels = 1;
        j.labels = &l;
        struct rtx_err err = {0};
        char existing[RTX_JOB_ID_LEN];
        if (rtx_store_job_insert(c->s, &j, req, sizeof req, existing, &err) != 0 || existing[0]) {
            c->failures++;
            snprintf(c->msg, sizeof c->msg, "%.*s", (int)(sizeof c->msg) - 1, err.msg);
        }
        memcpy(c->ids[i], id, RTX_JOB_ID_LEN);
    }
    return NULL;
}

struct reader_ctx {
    struct rtx_store *s;
    atomic_int *stop;
    int failures;
    int reads;
};

static void *reader_thread(void *arg) {
    struct reader_ctx *c = arg;
    while (!atomic_load(c->stop)) {
        struct rtx_job_filter f = {.limit = 50};
        struct rtx_job_info *jobs;
        int n;
        char next[RTX_JOB_ID_LEN + 32];
        if (rtx_store_job_list(c->s, &f, &jobs, &n, next, NULL) != 0) {
            c->failures++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            struct rtx_job_info g;
            if (rtx_store_job_get(c->s, jobs[i].id, &g, NULL) != 0) c->failures++;
            rtx_job_info_clear(&g);
        }
        rtx_job_info_free_array(jobs, n);
        c->reads++;
    }
    return NULL;
}

START_TEST(concurrent_inserts_are_durable_and_distinct) {
    struct fixture fx;
    fixture_open(&fx);
    static struct insert_ctx ctx[WRITER_THREADS];
    pthread_t th[WRITER_THREADS], rd;
    atomic_int stop = 0;
    struct reader_ctx rctx = {fx.s, &stop, 0, 0};
    ck_assert_int_eq(pthread_create(&rd, NULL, reader_thread, &rctx), 0);
    for (int t = 0; t < WRITER_THREADS; t++) {
        memset(&ctx[t], 0, sizeof ctx[t]);
        ctx[t].s = fx.s;
        ctx[t].thread = t;
        ck_assert_int_eq(pthread_create(&th[t], NULL, insert_thread, &ctx[t]), 0);
    }
    for (int t = 0; t < WRITER_THREADS; t++)
        pthread_join(th[t], NULL);
    atomic_store(&stop, 1);
    pthread_join(rd, NULL);
    ck_assert_int_eq(rctx.failures, 0);
    for (int t = 0; t < WRITER_THREADS; t++)
        ck_assert_msg(ctx[t].failures == 0, "thread %d: %s", t, ctx[t].msg);

    reopen(&fx);
    ck_assert_int_eq(stats(fx.s).jobs, WRITER_THREADS * INSERTS_PER_THREAD);
    for (int t = 0; t < WRITER_THREADS; t++) {
        for (int i = 0; i < INSERTS_PER_THREAD; i += 9) {
            struct rtx_job_info g;
            ck_assert_int_eq(rtx_store_job_get(fx.s, ctx[t].ids[i], &g, NULL), 0);
            ck_assert_int_eq(g.created_ms, 1000000 + t * 1000 + i);
            ck_assert_str_eq(g.labels[0].value, g.idempotency_key);
            rtx_job_info_clear(&g);
        }
    }
    /* every job once through the pages */
    int total = 0;
    char token[RTX_JOB_ID_LEN + 32] = "";
    do {
        struct rtx_job_filter f = {.limit = 333, .page_token = token};
        struct rtx_job_info *jobs;
        int n;
        ck_assert_int_eq(rtx_store_job_list(fx.s, &f, &jobs, &n, token, NULL), 0);
        total += n;
        rtx_job_info_free_array(jobs, n);
    } while (token[0]);
    ck_assert_int_eq(total, WRITER_THREADS * INSERTS_PER_THREAD);
    fixture_close(&fx);
}
END_TEST

/* Mixed concurrent writes: rejected requests must fail only their own callers. */
struct mixed_ctx {
    struct rtx_store *s;
    int thread;
    int wrong;
};

static void *mixed_thread(void *arg) {
    struct mixed_ctx *c = arg;
    for (int i = 0; i < 40; i++) {
        char id[RTX_JOB_ID_LEN];
        snprintf(id, sizeof id, "m%d-%d", c->thread, i);
        struct rtx_job_info j;
        job_init(&j, id, i);
        struct rtx_err err = {0};
        int want = 0, rc;
        switch ((c->thread + i) % 4) {
        case 0: /* a fresh job */ rc = rtx_store_job_insert(c->s, &j, "r", 1, NULL, &err); break;
        case 1: /* a duplicate id */
            snprintf(j.id, sizeof j.id, "fixed");
            rc = rtx_store_job_insert(c->s, &j, "r", 1, NULL, &err);
            want = RTX_EINVAL;
            break;
        case 2: /* moving a terminal job */
            rc = rtx_store_job_set_state(c->s, "fixed", RTX_JOB_RUNNING, NULL, 1, &err);
            want = RTX_EINVAL;
            break;
        default: /* an unknown job */
            rc = rtx_store_job_set_state(c->s, id, RTX_JOB_RUNNING, NULL, 1, &err);
            want = RTX_ENOTFOUND;
            break;
        }
        if (rc != want) c->wrong++;
        if (rc && !strstr(err.msg, (c->thread + i) % 4 == 3 ? id : "fixed")) c->wrong++;
    }
    return NULL;
}

START_TEST(batched_writes_report_failures_to_their_own_callers) {
    struct fixture fx;
    fixture_open(&fx);
    insert_simple(fx.s, "fixed", 0);
    set_state_ok(fx.s, "fixed", RTX_JOB_CANCELLED, 1);
    struct mixed_ctx ctx[8];
    pthread_t th[8];
    for (int t = 0; t < 8; t++) {
        ctx[t] = (struct mixed_ctx){fx.s, t, 0};
        ck_assert_int_eq(pthread_create(&th[t], NULL, mixed_thread, &ctx[t]), 0);
    }
    for (int t = 0; t < 8; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 8; t++)
        ck_assert_int_eq(ctx[t].wrong, 0);
    ck_assert_int_eq(stats(fx.s).jobs, 1 + 8 * 10);
    ck_assert(stats(fx.s).ok);
    fixture_close(&fx);
}
END_TEST

START_TEST(reopen_after_close_shows_everything) {
    struct fixture fx;
    fixture_open(&fx);
    int64_t d[] = {3, 5};
    struct rtx_tensor *t = filled(RTX_I32, 2, d, 3);
    const char *names[] = {"y"};
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "p%02d", i);
        insert_simple(fx.s, id, i);
        if (i % 2) succeed_ok(fx.s, id, 100 + i, 1, names, &t);
    }
    struct rtx_store_stats before = stats(fx.s);
    reopen(&fx);
    struct rtx_store_stats after = stats(fx.s);
    ck_assert_int_eq(after.jobs, 20);
    ck_assert_int_eq(after.blobs, before.blobs);
    ck_assert_int_eq(after.blob_bytes, 60);
    struct rtx_job_info *jobs;
    int n;
    ck_assert_int_eq(rtx_store_job_unfinished(fx.s, &jobs, &n, NULL), 0);
    ck_assert_int_eq(n, 10);
    rtx_job_info_free_array(jobs, n);
    struct rtx_tensor **got;
    char **got_names;
    int got_n;
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "p19", &got, &got_names, &got_n, NULL), 0);
    assert_same_tensor(t, got[0]);
    free_outputs(got, got_names, got_n);
    rtx_tensor_unref(t);
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * I/O faults: a VFS that wraps the default one and fails xWrite/xSync after N calls
 * ---------------------------------------------------------------------------------------- */

struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* the wrapped file, allocated right after this struct */
};

static sqlite3_vfs *fault_orig;
static sqlite3_vfs fault_vfs;
static atomic_int fault_countdown = -1; /* < 0: off; 0: every write/sync fails */
static atomic_int fault_hits;

static bool fault_now(void) {
    int n = atomic_load(&fault_countdown);
    while (n > 0 && !atomic_compare_exchange_weak(&fault_countdown, &n, n - 1)) {
    }
    if (n != 0) return false;
    atomic_fetch_add(&fault_hits, 1);
    return true;
}

static void fault_arm(int after) {
    atomic_store(&fault_countdown, after);
    atomic_store(&fault_hits, 0);
}

#define REAL(f) (((struct fault_file *)(f))->real)

static int f_close(sqlite3_file *f) {
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int f_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
    return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}
static int f_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
    if (fault_now()) return SQLITE_IOERR_WRITE;
    return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size) {
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags) {
    if (fault_now()) return SQLITE_IOERR_FSYNC;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size) {
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int f_lock(sqlite3_file *f, int l) {
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l) {
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_reserved(sqlite3_file *f, int *out) {
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int f_control(sqlite3_file *f, int op, void *arg) {
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int f_sector(sqlite3_file *f) {
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_devchar(sqlite3_file *f) {
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **p) {
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, extend, p);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags) {
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f) {
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shm_unmap(sqlite3_file *f, int del) {
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **p) {
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, p);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods fault_io = {
    .iVersion = 3,
    .xClose = f_close,
    .xRead = f_read,
    .xWrite = f_write,
    .xTruncate = f_truncate,
    .xSync = f_sync,
    .xFileSize = f_size,
    .xLock = f_lock,
    .xUnlock = f_unlock,
    .xCheckReservedLock = f_reserved,
    .xFileControl = f_control,
    .xSectorSize = f_sector,
    .xDeviceCharacteristics = f_devchar,
    .xShmMap = f_shm_map,
    .xShmLock = f_shm_lock,
    .xShmBarrier = f_shm_barrier,
    .xShmUnmap = f_shm_unmap,
    .xFetch = f_fetch,
    .xUnfetch = f_unfetch,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                  int *out_flags) {
    struct fault_file *ff = (struct fault_file *)file;
    ff->real = (sqlite3_file *)&ff[1];
    ff->base.pMethods = NULL;
    int rc = fault_orig->xOpen(fault_orig, name, ff->real, flags, out_flags);
    if (ff->real->pMethods) ff->base.pMethods = &fault_io;
    return rc;
}
static int v_delete(sqlite3_vfs *vfs, const char *name, int sync) {
    return fault_orig->xDelete(fault_orig, name, sync);
}
static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    return fault_orig->xAccess(fault_orig, name, flags, out);
}
static int v_full(sqlite3_vfs *vfs, const char *name, int n, char *out) {
    return fault_orig->xFullPathname(fault_orig, name, n, out);
}
static int v_random(sqlite3_vfs *vfs, int n, char *out) {
    return fault_orig->xRandomness(fault_orig, n, out);
}
static int v_sleep(sqlite3_vfs *vfs, int us) {
    return fault_orig->xSleep(fault_orig, us);
}
static int v_time(sqlite3_vfs *vfs, double *out) {
    return fault_orig->xCurrentTime(fault_orig, out);
}
static int v_last_error(sqlite3_vfs *vfs, int n, char *out) {
    return fault_orig->xGetLastError(fault_orig, n, out);
}
static int v_time64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    return fault_orig->xCurrentTimeInt64(fault_orig, out);
}

static void fault_install(void) {
    fault_orig = sqlite3_vfs_find(NULL);
    ck_assert_ptr_nonnull(fault_orig);
    fault_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct fault_file) + fault_orig->szOsFile,
        .mxPathname = fault_orig->mxPathname,
        .zName = "rtx-fault",
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_full,
        .xRandomness = v_random,
        .xSleep = v_sleep,
        .xCurrentTime = v_time,
        .xGetLastError = v_last_error,
        .xCurrentTimeInt64 = v_time64,
    };
    fault_arm(-1);
    ck_assert_int_eq(sqlite3_vfs_register(&fault_vfs, 1), SQLITE_OK);
}

static void fault_uninstall(void) {
    fault_arm(-1);
    sqlite3_vfs_unregister(&fault_vfs);
    sqlite3_vfs_register(fault_orig, 1);
}

START_TEST(io_faults_fail_writes_with_eio_and_the_store_recovers) {
    struct fixture fx;
    fixture_dir(&fx);
    fault_install();
    store_open(&fx, 0, 0);
    struct rtx_err err = {0};
    insert_simple(fx.s, "before", 1);

    /* every write fails */
    fault_arm(0);
    struct rtx_job_info j;
    job_init(&j, "lost", 2);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, "r", 1, NULL, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "lost"));
    ck_assert_ptr_nonnull(strstr(err.msg, "I/O"));
    ck_assert_int_gt(atomic_load(&fault_hits), 0);
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "before", RTX_JOB_RUNNING, NULL, 3, &err),
                     RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "before"));
    fault_arm(-1);
    set_state_ok(fx.s, "before", RTX_JOB_RUNNING, 3);
    fault_arm(0);
    int64_t d[] = {8};
    struct rtx_tensor *t = filled(RTX_F32, 1, d, 1);
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "before", 4, 1, 1, 1, (const char *const[]){"y"},
                                           (const struct rtx_tensor *const *)&t, &err),
                     RTX_EIO);
    struct rtx_store_stats st = stats(fx.s); /* reads still work */
    ck_assert(!st.ok);
    ck_assert_ptr_nonnull(strstr(st.last_error, "I/O"));
    ck_assert_int_eq(st.jobs, 1);
    struct rtx_job_info g;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "before", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_RUNNING);
    ck_assert_int_eq(g.n_outputs, 0);
    rtx_job_info_clear(&g);

    /* the fault clears: writes succeed again and the store is ok */
    fault_arm(-1);
    insert_simple(fx.s, "after", 3);
    ck_assert(stats(fx.s).ok);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "lost", &g, &err), RTX_ENOTFOUND);

    /* a fault after N writes/syncs, for each N until the insert gets through */
    int survived = 0, failed = 0;
    for (int n = 1; n < 60; n++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", n);
        job_init(&j, id, 10 + n);
        fault_arm(n);
        int rc = rtx_store_job_insert(fx.s, &j, "r", 1, NULL, &err);
        fault_arm(-1);
        if (rc == 0) {
            survived++;
            ck_assert_int_eq(rtx_store_job_get(fx.s, id, &g, NULL), 0);
            rtx_job_info_clear(&g);
        } else {
            failed++;
            ck_assert_int_eq(rc, RTX_EIO);
            ck_assert_ptr_nonnull(strstr(err.msg, id));
            ck_assert_int_eq(rtx_store_job_get(fx.s, id, &g, NULL), RTX_ENOTFOUND);
        }
        /* and the next write succeeds */
        set_state_ok(fx.s, "after", n % 2 ? RTX_JOB_RUNNING : RTX_JOB_QUEUED, n);
    }
    ck_assert_int_gt(failed, 0);
    ck_assert_int_gt(survived, 0);
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "before", 100, 1, 1, 1,
                                           (const char *const[]){"y"},
                                           (const struct rtx_tensor *const *)&t, &err),
                     0);
    rtx_tensor_unref(t);
    rtx_store_close(fx.s);
    fx.s = NULL;
    fault_uninstall();

    store_open(&fx, 0, 0);
    ck_assert_int_eq(stats(fx.s).jobs, 2 + survived);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "before", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_SUCCEEDED);
    rtx_job_info_clear(&g);
    fixture_close(&fx);
}
END_TEST

#define FAULT_THREADS 8
#define FAULT_INSERTS 6

struct fault_ctx {
    struct rtx_store *s;
    int round, thread;
    int rc[FAULT_INSERTS];
    char msg[FAULT_INSERTS][256];
};

static void *fault_thread(void *arg) {
    struct fault_ctx *c = arg;
    for (int i = 0; i < FAULT_INSERTS; i++) {
        char id[32];
        snprintf(id, sizeof id, "b%d-%d-%d", c->round % 100, c->thread % 100, i % 100);
        struct rtx_job_info j;
        job_init(&j, id, i);
        struct rtx_err err = {0};
        c->rc[i] = rtx_store_job_insert(c->s, &j, "r", 1, NULL, &err);
        memcpy(c->msg[i], err.msg, sizeof err.msg);
    }
    return NULL;
}

START_TEST(io_faults_in_batched_writes_fail_only_their_callers) {
    struct fixture fx;
    fixture_dir(&fx);
    fault_install();
    store_open(&fx, 0, 0);
    static struct fault_ctx ctx[FAULT_THREADS];
    int ok = 0, failed = 0;
    for (int round = 0; round < 8; round++) {
        pthread_t th[FAULT_THREADS];
        fault_arm(5 + 40 * round);
        for (int t = 0; t < FAULT_THREADS; t++) {
            ctx[t] = (struct fault_ctx){.s = fx.s, .round = round, .thread = t};
            ck_assert_int_eq(pthread_create(&th[t], NULL, fault_thread, &ctx[t]), 0);
        }
        for (int t = 0; t < FAULT_THREADS; t++)
            pthread_join(th[t], NULL);
        fault_arm(-1);
        for (int t = 0; t < FAULT_THREADS; t++) {
            for (int i = 0; i < FAULT_INSERTS; i++) {
                char id[32];
                snprintf(id, sizeof id, "b%d-%d-%d", round % 100, t % 100, i % 100);
                struct rtx_job_info g;
                int rc = rtx_store_job_get(fx.s, id, &g, NULL);
                if (ctx[t].rc[i] == 0) {
                    ok++;
                    ck_assert_msg(rc == 0, "%s acknowledged but not found", id);
                    rtx_job_info_clear(&g);
                } else {
                    failed++;
                    ck_assert_int_eq(ctx[t].rc[i], RTX_EIO);
                    ck_assert_msg(strstr(ctx[t].msg[i], id), "%s: %s", id, ctx[t].msg[i]);
                    ck_assert_int_eq(rc, RTX_ENOTFOUND);
                }
            }
        }
        char probe[32];
        snprintf(probe, sizeof probe, "probe%d", round);
        insert_simple(fx.s, probe, 0);
        ck_assert(stats(fx.s).ok);
    }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(failed, 0);
    rtx_store_close(fx.s);
    fx.s = NULL;
    fault_uninstall();
    store_open(&fx, 0, 0);
    ck_assert_int_eq(stats(fx.s).jobs, ok + 8);
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Out of memory
 * ---------------------------------------------------------------------------------------- */

START_TEST(reads_survive_out_of_memory) {
    struct fixture fx;
    fixture_open(&fx);
    int64_t d[] = {4, 4};
    struct rtx_tensor *outs[] = {filled(RTX_F32, 2, d, 1), filled(RTX_I64, 2, d, 2)};
    const char *names[] = {"a", "b"};
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "x%d", i);
        struct rtx_job_label labels[] = {{"k1", "v1"}, {"k2", "v2"}, {"k3", "v3"}};
        struct rtx_job_info j;
        job_init(&j, id, i);
        j.n_labels = 3;
        j.labels = labels;
        insert_ok(fx.s, &j);
        if (i % 2) succeed_ok(fx.s, id, 100, 2, names, outs);
    }

    int steps = 0;
    for (long n = 1;; n++) {
        struct rtx_job_info g;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_get(fx.s, "x1", &g, &err);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ck_assert_int_eq(g.n_labels, 3);
            ck_assert_int_eq(g.n_outputs, 2);
            rtx_job_info_clear(&g);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
        ck_assert_ptr_null(g.lane);
        steps++;
    }
    ck_assert_int_gt(steps, 8);

    steps = 0;
    for (long n = 1;; n++) {
        struct rtx_job_filter f = {.limit = 4};
        struct rtx_job_info *jobs = NULL;
        int cnt = -1;
        char next[RTX_JOB_ID_LEN + 32];
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_list(fx.s, &f, &jobs, &cnt, next, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ck_assert_int_eq(cnt, 4);
            ck_assert_str_ne(next, "");
            rtx_job_info_free_array(jobs, cnt);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
        ck_assert_ptr_null(jobs);
        ck_assert_int_eq(cnt, 0);
        steps++;
    }
    ck_assert_int_gt(steps, 20);

    for (long n = 1;; n++) {
        struct rtx_tensor **t = NULL;
        char **nm = NULL;
        int cnt = 0;
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_outputs(fx.s, "x3", &t, &nm, &cnt, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ck_assert_int_eq(cnt, 2);
            assert_same_tensor(outs[1], t[1]);
            free_outputs(t, nm, cnt);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
        ck_assert_ptr_null(t);
    }
    for (long n = 1;; n++) {
        struct rtx_job_info *jobs = NULL;
        int cnt = 0;
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_unfinished(fx.s, &jobs, &cnt, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ck_assert_int_eq(cnt, 3);
            rtx_job_info_free_array(jobs, cnt);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
    }
    for (long n = 1;; n++) {
        void *req = NULL;
        size_t len = 0;
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_request(fx.s, "x0", &req, &len, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            rtx_free(req);
            break;
        }
        ck_assert_int_eq(rc, RTX_ENOMEM);
    }
    /* a write that cannot prepare its outputs fails cleanly too */
    insert_simple(fx.s, "w", 50);
    set_state_ok(fx.s, "w", RTX_JOB_RUNNING, 51);
    int64_t big[] = {3, 5};
    struct rtx_tensor *base = filled(RTX_F32, 2, big, 4), *view;
    int perm[] = {1, 0};
    ck_assert_int_eq(rtx_tensor_permute(base, perm, &view, NULL), 0);
    const struct rtx_tensor *vo[] = {view};
    for (long n = 1;; n++) {
        rtx_alloc_fail_after(n);
        int rc = rtx_store_job_succeed(fx.s, "w", 60, 1, 1, 1, names, vo, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) break;
        ck_assert_int_eq(rc, RTX_ENOMEM);
    }
    rtx_tensor_unref(view);
    rtx_tensor_unref(base);
    rtx_tensor_unref(outs[0]);
    rtx_tensor_unref(outs[1]);
    fixture_close(&fx);
}
END_TEST

Suite *rtx_store_stress_suite(void) {
    Suite *s = suite_create("store_stress");
    TCase *tc = tcase_create("stress");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, concurrent_inserts_are_durable_and_distinct);
    tcase_add_test(tc, batched_writes_report_failures_to_their_own_callers);
    tcase_add_test(tc, reopen_after_close_shows_everything);
    tcase_add_test(tc, io_faults_fail_writes_with_eio_and_the_store_recovers);
    tcase_add_test(tc, io_faults_in_batched_writes_fail_only_their_callers);
    tcase_add_test(tc, reads_survive_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
