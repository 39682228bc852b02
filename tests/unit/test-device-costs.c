/*
 * test-device-costs.c - the device set's book of learned costs (device/device.h, "Learned
 * costs"): read once from the store's rows of both consumers (devices' names for jobs,
 * "infer" for serving), read back per place, written back only where dirty, kept dirty after
 * a failed write and after a put that came in while a save ran.
 *
 * DESIGN
 * The store is made to fail from a second SQLite connection to its file: renaming the table
 * away makes every write fail at once (and renaming it back heals it); an open write
 * transaction makes the store's write wait (its busy timeout), long enough for a put to land
 * while the save is in the middle of its write.
 */
#include <check.h>
#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "store/store.h"

static char dir[64], path[128];
static struct rtx_store *store;
static struct rtx_devices *set;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(p);
}

static void put_rows(const struct rtx_store_cost *rows, int n) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_cost_put(store, rows, n, 1, &err) == 0, "%s", err.msg);
}

/* A store with rows of both consumers, and a CPU-only device set whose book is not open. */
static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/rtx-costs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/rtxd.db", dir);
    struct rtx_store_options so = {.path = path, .sync_normal = true};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &store, &err) == 0, "%s", err.msg);
    const struct rtx_store_cost rows[] = {
        {.device = "cpu", .key = 7, .ema_ns = 700, .samples = 3},
        {.device = "cpu", .key = 5, .ema_ns = 500, .samples = 2},
        {.device = "cuda:0", .key = 5, .ema_ns = 50, .samples = 9},
        {.device = "infer", .key = 5, .ema_ns = 5000, .samples = 4},
    };
    put_rows(rows, 4);
    struct rtx_devices_options o = {.cpu_threads = 1, .cpu_memory_bytes = (size_t)1 << 30};
    ck_assert_msg(rtx_devices_new(&o, &set, &err) == 0, "%s", err.msg);
}

static void teardown(void) {
    rtx_devices_free(set);
    set = NULL;
    rtx_store_close(store);
    store = NULL;
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void open_book(void) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_costs_open(set, store, &err) == 0, "%s", err.msg);
}

static void put_ok(const char *where, uint64_t key, int64_t ema_ns, int64_t samples) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_cost_put(set, where, key, ema_ns, samples, &err) == 0, "%s",
                  err.msg);
}

/* The store's row for (device, key): its ema_ns, or -1 when there is none. */
static int64_t stored_ema(const char *device, uint64_t key) {
    struct rtx_store_cost *rows;
    int n;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_cost_list(store, &rows, &n, &err) == 0, "%s", err.msg);
    int64_t ema = -1;
    for (int i = 0; i < n; i++)
        if (rows[i].key == key && strcmp(rows[i].device, device) == 0) ema = rows[i].ema_ns;
    rtx_free(rows);
    return ema;
}

/* SQL on a second connection to the store's file. */
static sqlite3 *other_open(void) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static void other_exec(sqlite3 *db, const char *sql) {
    char *msg = NULL;
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql,
                  msg ? msg : "");
}

struct seen {
    int n;
    uint64_t keys[8];
    int64_t emas[8];
};

static void see(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples) {
    struct seen *s = ctx;
    ck_assert_int_lt(s->n, 8);
    s->keys[s->n] = key;
    s->emas[s->n++] = ema_ns;
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

/* Open reads every row once: jobs' rows per device name and serving's "infer" rows are kept
 * apart; each lists one place in key order; nothing is dirty. */
START_TEST(costs_open_reads_rows_of_every_consumer) {
    open_book();
    int64_t ema = 0, samples = 0;
    ck_assert(rtx_devices_cost_get(set, "cpu", 5, &ema, &samples));
    ck_assert_int_eq(ema, 500);
    ck_assert_int_eq(samples, 2);
    ck_assert(rtx_devices_cost_get(set, "infer", 5, &ema, &samples));
    ck_assert_int_eq(ema, 5000);
    ck_assert(rtx_devices_cost_get(set, "cuda:0", 5, &ema, &samples));
    ck_assert_int_eq(ema, 50);
    ck_assert(!rtx_devices_cost_get(set, "infer", 7, &ema, &samples));
    ck_assert(!rtx_devices_cost_get(set, "cuda:1", 5, &ema, &samples));
    struct seen s = {0};
    rtx_devices_costs_each(set, "cpu", see, &s);
    ck_assert_int_eq(s.n, 2);
    ck_assert(s.keys[0] == 5 && s.emas[0] == 500);
    ck_assert(s.keys[1] == 7 && s.emas[1] == 700);
    s.n = 0;
    rtx_devices_costs_each(set, "cuda:3", see, &s);
    ck_assert_int_eq(s.n, 0);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
}
END_TEST

/* A save writes the new and changed rows only: a row put again unchanged is not dirty, and a
 * clean row that someone else changed in the store meanwhile is not overwritten. */
START_TEST(costs_save_writes_only_dirty_rows) {
    open_book();
    put_ok("cpu", 5, 500, 2); /* unchanged */
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
    put_ok("cpu", 7, 710, 4);    /* changed */
    put_ok("infer", 9, 9000, 1); /* new */
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 2);
    const struct rtx_store_cost other = {
        .device = "cuda:0", .key = 5, .ema_ns = 55, .samples = 10};
    put_rows(&other, 1);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_costs_save(set, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
    ck_assert_int_eq(stored_ema("cpu", 7), 710);
    ck_assert_int_eq(stored_ema("infer", 9), 9000);
    ck_assert_int_eq(stored_ema("cpu", 5), 500);
    ck_assert_int_eq(stored_ema("cuda:0", 5), 55); /* clean in the book: not written */
    ck_assert_int_eq(stored_ema("infer", 5), 5000);
    /* nothing dirty: a save writes nothing */
    ck_assert_msg(rtx_devices_costs_save(set, &err) == 0, "%s", err.msg);
}
END_TEST

/* A failed write keeps the rows dirty; the next save writes them. */
START_TEST(costs_failed_save_is_retried) {
    open_book();
    put_ok("cpu", 7, 720, 5);
    sqlite3 *db = other_open();
    other_exec(db, "ALTER TABLE sched_costs RENAME TO sched_costs_away");
    struct rtx_err err = {0};
    ck_assert_int_lt(rtx_devices_costs_save(set, &err), 0);
    ck_assert(err.msg[0] != '\0');
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 1);
    other_exec(db, "ALTER TABLE sched_costs_away RENAME TO sched_costs");
    sqlite3_close(db);
    ck_assert_int_eq(stored_ema("cpu", 7), 700);
    err = (struct rtx_err){0};
    ck_assert_msg(rtx_devices_costs_save(set, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
    ck_assert_int_eq(stored_ema("cpu", 7), 720);
}
END_TEST

static void *save_thread(void *arg) {
    struct rtx_err err = {0};
    *(int *)arg = rtx_devices_costs_save(set, &err);
    return NULL;
}

/* A put while a save is writing: the save writes the value it copied, and the row stays dirty
 * for the next save, which writes the newer one. */
START_TEST(costs_put_during_save_stays_dirty) {
    open_book();
    put_ok("infer", 5, 6000, 5);
    sqlite3 *db = other_open();
    other_exec(db, "BEGIN IMMEDIATE"); /* the store's write waits for it */
    int rc = -1;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, save_thread, &rc), 0);
    usleep(300 * 1000); /* the save copied its rows and waits in the store */
    put_ok("infer", 5, 7000, 6);
    other_exec(db, "ROLLBACK");
    pthread_join(t, NULL);
    sqlite3_close(db);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(stored_ema("infer", 5), 6000);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 1);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_costs_save(set, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(stored_ema("infer", 5), 7000);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
}
END_TEST

/* What the store would refuse never enters the book. */
START_TEST(costs_put_rejects_what_the_store_refuses) {
    open_book();
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_devices_cost_put(set, "cpu", 0, 1, 1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_devices_cost_put(set, "cpu", 1, 0, 1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_devices_cost_put(set, "cpu", 1, 1, -1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_devices_cost_put(set, "", 1, 1, 1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_devices_cost_put(set, "a-place-name-far-too-long", 1, 1, 1, &err),
                     RTX_EINVAL);
    ck_assert_int_eq(rtx_devices_costs_dirty(set), 0);
}
END_TEST

/* A book never opened keeps nothing; one opened without a store keeps costs in memory only. */
START_TEST(costs_unopened_or_without_a_store) {
    int64_t ema, samples;
    put_ok("cpu", 11, 100, 1);
    ck_assert(!rtx_devices_cost_get(set, "cpu", 11, &ema, &samples));
    ck_assert(!rtx_devices_cost_get(set, "cpu", 5, &ema, &samples)); /* the store is not read */
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_costs_open(set, NULL, &err) == 0, "%s", err.msg);
    put_ok("cpu", 11, 100, 1);
    ck_assert(rtx_devices_cost_get(set, "cpu", 11, &ema, &samples));
    ck_assert_int_eq(ema, 100);
    ck_assert_msg(rtx_devices_costs_save(set, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(stored_ema("cpu", 11), -1);
}
END_TEST

Suite *rtx_device_costs_suite(void) {
    Suite *s = suite_create("device_costs");
    TCase *tc = tcase_create("costs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, costs_open_reads_rows_of_every_consumer);
    tcase_add_test(tc, costs_save_writes_only_dirty_rows);
    tcase_add_test(tc, costs_failed_save_is_retried);
    tcase_add_test(tc, costs_put_during_save_stays_dirty);
    tcase_add_test(tc, costs_put_rejects_what_the_store_refuses);
    tcase_add_test(tc, costs_unopened_or_without_a_store);
    suite_add_tcase(s, tc);
    return s;
}
