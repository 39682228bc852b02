/*
 * test-store.c - the SQLite store: schema migrations, the job journal and its state machine,
 * outputs (content addressing, digest checks), lists with filters and pages, retention,
 * concurrent writers, I/O faults through a fault-injecting sqlite3_vfs, and out-of-memory
 * loops over the read paths.
 *
 * Each test works in its own directory from mkdtemp under /tmp and removes it at the end.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/store-impl.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

struct fixture {
    char dir[64];
    char path[128];
    struct rtx_store *s;
};

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

static void fixture_dir(struct fixture *fx) {
    fx->s = NULL;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/rtx-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(fx->dir));
    /* a missing parent directory: open creates it */
    snprintf(fx->path, sizeof fx->path, "%s/var/rtxd.db", fx->dir);
}

static void store_open(struct fixture *fx, int64_t max_age_ms, int64_t max_bytes) {
    struct rtx_store_options opt = {fx->path, max_age_ms, max_bytes, false};
    struct rtx_err err = {0};
    int rc = rtx_store_open(&opt, &fx->s, &err);
    ck_assert_msg(rc == 0, "open: %s", err.msg);
}

static void fixture_open(struct fixture *fx) {
    fixture_dir(fx);
    store_open(fx, 0, 0);
}

static void fixture_close(struct fixture *fx) {
    rtx_store_close(fx->s);
    fx->s = NULL;
    nftw(fx->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void reopen(struct fixture *fx) {
    rtx_store_close(fx->s);
    store_open(fx, 0, 0);
}

/* A job row with fixed defaults; strings point at literals (insert copies nothing). */
static void job_init(struct rtx_job_info *j, const char *id, int64_t created_ms) {
    memset(j, 0, sizeof *j);
    snprintf(j->id, sizeof j->id, "%s", id);
    j->state = RTX_JOB_QUEUED;
    j->reason = "";
    j->lane = "default";
    j->graph_name = "mlp";
    j->idempotency_key = "";
    j->restart_policy = RTX_RESTART_RERUN;
    j->created_ms = created_ms;
}

static void insert_ok(struct rtx_store *s, const struct rtx_job_info *j) {
    struct rtx_err err = {0};
    char existing[RTX_JOB_ID_LEN];
    int rc = rtx_store_job_insert(s, j, "req", 3, existing, &err);
    ck_assert_msg(rc == 0, "insert %s: %s", j->id, err.msg);
    ck_assert_str_eq(existing, "");
}

static void insert_simple(struct rtx_store *s, const char *id, int64_t created_ms) {
    struct rtx_job_info j;
    job_init(&j, id, created_ms);
    insert_ok(s, &j);
}

static void set_state_ok(struct rtx_store *s, const char *id, enum rtx_job_state st,
                         int64_t now_ms) {
    struct rtx_err err = {0};
    int rc = rtx_store_job_set_state(s, id, st, NULL, now_ms, &err);
    ck_assert_msg(rc == 0, "set state %s: %s", id, err.msg);
}

/* Runs one job to success with the given outputs. */
static void succeed_ok(struct rtx_store *s, const char *id, int64_t now_ms, int n,
                       const char *const *names, struct rtx_tensor *const *outs) {
    set_state_ok(s, id, RTX_JOB_RUNNING, now_ms - 1);
    struct rtx_err err = {0};
    int rc = rtx_store_job_succeed(s, id, now_ms, 1.5, 1024, n, names,
                                   (const struct rtx_tensor *const *)outs, &err);
    ck_assert_msg(rc == 0, "succeed %s: %s", id, err.msg);
}

static struct rtx_tensor *filled(enum rtx_dtype dt, int ndim, const int64_t *dims, unsigned seed) {
    bool is_unsigned = dt == RTX_U8 || dt == RTX_BOOL;
    return tu_tensor_random(dt, ndim, dims, is_unsigned ? 0 : -100, 100, seed);
}

static void assert_same_tensor(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int i = 0; i < a->ndim; i++)
        ck_assert_int_eq(a->dims[i], b->dims[i]);
    ck_assert(rtx_tensor_is_contiguous(b));
    int64_t n = rtx_tensor_numel(a);
    for (int64_t i = 0; i < n; i++)
        ck_assert(rtx_tensor_get(a, i) == rtx_tensor_get(b, i));
}

static void free_outputs(struct rtx_tensor **t, char **names, int n) {
    for (int i = 0; i < n; i++) {
        rtx_tensor_unref(t[i]);
        rtx_free(names[i]);
    }
    rtx_free(t);
    rtx_free(names);
}

static struct rtx_store_stats stats(struct rtx_store *s) {
    struct rtx_store_stats st;
    struct rtx_err err = {0};
    int rc = rtx_store_stats(s, &st, &err);
    ck_assert_msg(rc == 0, "stats: %s", err.msg);
    return st;
}

/* Runs SQL on a separate connection to the store's file (as another process would). */
static void raw_exec(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
    sqlite3_close(db);
}

static int64_t raw_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* ------------------------------------------------------------------------------------------
 * Ids, names
 * ---------------------------------------------------------------------------------------- */

START_TEST(job_ids_are_unique_and_time_ordered) {
    char prev[RTX_JOB_ID_LEN] = "";
    for (int i = 0; i < 1000; i++) {
        char id[RTX_JOB_ID_LEN];
        rtx_store_new_job_id(id);
        ck_assert_uint_eq(strlen(id), 29);
        ck_assert_int_eq(id[0], 'j');
        ck_assert_uint_eq(strspn(id + 1, "0123456789abcdef"), 28);
        ck_assert_str_ne(id, prev);
        ck_assert_int_ge(strncmp(id, prev, 13), 0);
        memcpy(prev, id, sizeof id);
    }
}
END_TEST

START_TEST(state_names_and_terminal_states) {
    ck_assert_str_eq(rtx_job_state_name(RTX_JOB_QUEUED), "queued");
    ck_assert_str_eq(rtx_job_state_name(RTX_JOB_EXPIRED), "expired");
    ck_assert_str_eq(rtx_job_state_name((enum rtx_job_state)0), "?");
    ck_assert_str_eq(rtx_job_state_name((enum rtx_job_state)7), "?");
    ck_assert(!rtx_job_state_is_terminal(RTX_JOB_QUEUED));
    ck_assert(!rtx_job_state_is_terminal(RTX_JOB_RUNNING));
    ck_assert(rtx_job_state_is_terminal(RTX_JOB_SUCCEEDED));
    ck_assert(rtx_job_state_is_terminal(RTX_JOB_FAILED));
    ck_assert(rtx_job_state_is_terminal(RTX_JOB_CANCELLED));
    ck_assert(rtx_job_state_is_terminal(RTX_JOB_EXPIRED));
    rtx_job_info_clear(NULL);
    rtx_job_info_free_array(NULL, 3);
    rtx_store_close(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Open, schema
 * ---------------------------------------------------------------------------------------- */

START_TEST(open_creates_wal_database_and_reopens) {
    struct fixture fx;
    fixture_open(&fx);
    insert_simple(fx.s, "a1", 100);
    struct rtx_store_stats st = stats(fx.s);
    ck_assert(st.ok);
    ck_assert_int_eq(st.jobs, 1);
    ck_assert_int_gt(st.db_bytes, 0);
    ck_assert_int_eq(raw_int(fx.path, "SELECT MAX(version) FROM schema_version"),
                     RTX__STORE_SCHEMA_VERSION);
    ck_assert_int_eq(raw_int(fx.path, "SELECT COUNT(*) FROM schema_version"),
                     RTX__STORE_SCHEMA_VERSION);
    reopen(&fx);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(fx.path, &db), SQLITE_OK);
    sqlite3_stmt *q;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(q, 0), "wal");
    sqlite3_finalize(q);
    sqlite3_close(db);
    struct rtx_job_info j;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "a1", &j, NULL), 0);
    rtx_job_info_clear(&j);
    ck_assert_int_eq(stats(fx.s).jobs, 1);
    fixture_close(&fx);
}
END_TEST

START_TEST(open_migrates_an_older_database) {
    struct fixture fx;
    fixture_dir(&fx);
    snprintf(fx.path, sizeof fx.path, "%s/old.db", fx.dir);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(fx.path, &db), SQLITE_OK);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__store_migrate(db, 1, &err), 0);
    ck_assert_int_eq(rtx__store_schema_version(db, &err), 1);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "INSERT INTO jobs VALUES('old1', 3, '', 'default', 'g', 'k1',"
                                  " 1, 10, 11, 12, 0, 1, 2.5, 64);"
                                  "INSERT INTO job_labels VALUES('old1', 0, 'team', 'ml');"
                                  "INSERT INTO job_requests VALUES('old1', x'0102');",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    store_open(&fx, 0, 0);
    ck_assert_int_eq(raw_int(fx.path, "SELECT MAX(version) FROM schema_version"),
                     RTX__STORE_SCHEMA_VERSION);
    struct rtx_job_info j;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "old1", &j, &err), 0);
    ck_assert_int_eq(j.state, RTX_JOB_SUCCEEDED);
    ck_assert_str_eq(j.idempotency_key, "k1");
    ck_assert_int_eq(j.n_labels, 1);
    ck_assert_str_eq(j.labels[0].value, "ml");
    ck_assert(j.outputs_available);
    ck_assert_int_eq(j.n_outputs, 0);
    rtx_job_info_clear(&j);
    /* the migrated file takes new writes of the new schema */
    insert_simple(fx.s, "new1", 20);
    succeed_ok(fx.s, "new1", 30, 0, NULL, NULL);
    fixture_close(&fx);
}
END_TEST

START_TEST(open_refuses_a_newer_schema) {
    struct fixture fx;
    fixture_open(&fx);
    rtx_store_close(fx.s);
    fx.s = NULL;
    raw_exec(fx.path, "INSERT INTO schema_version VALUES(99, 0, 'from the future')");
    struct rtx_store_options opt = {fx.path, 0, 0, false};
    struct rtx_err err = {0};
    struct rtx_store *s = (struct rtx_store *)1;
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EUNSUPPORTED);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err.msg, "99"));
    ck_assert_ptr_nonnull(strstr(err.msg, "newer"));
    ck_assert_ptr_nonnull(strstr(err.msg, fx.path));
    fixture_close(&fx);
}
END_TEST

START_TEST(open_rejects_bad_arguments_and_files) {
    struct fixture fx;
    fixture_dir(&fx);
    struct rtx_store *s = NULL;
    struct rtx_err err = {0};
    struct rtx_store_options opt = {NULL, 0, 0, false};
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EINVAL);
    opt.path = "";
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_store_open(NULL, &s, &err), RTX_EINVAL);
    opt.path = fx.path;
    opt.retention_max_bytes = -1;
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EINVAL);
    opt.retention_max_bytes = 0;

    /* not a database */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/garbage.db", fx.dir);
    FILE *f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not an sqlite database file\n", f);
    fclose(f);
    opt.path = bad;
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EIO);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err.msg, "garbage.db"));

    /* a parent that is a file */
    snprintf(bad, sizeof bad, "%s/garbage.db/x/rtxd.db", fx.dir);
    opt.path = bad;
    ck_assert_int_eq(rtx_store_open(&opt, &s, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "directory"));
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Journal
 * ---------------------------------------------------------------------------------------- */

START_TEST(insert_get_round_trips_every_field) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_job_label labels[] = {{"team", "vision"}, {"env", "prod"}, {"team", "ml"}};
    struct rtx_job_info j;
    char id[RTX_JOB_ID_LEN];
    rtx_store_new_job_id(id);
    job_init(&j, id, 1700000000123);
    j.reason = "why not";
    j.lane = "batch";
    j.graph_name = "transformer_block";
    j.idempotency_key = "key-1";
    j.restart_policy = RTX_RESTART_FAIL;
    j.n_labels = 3;
    j.labels = labels;
    j.started_ms = 5;
    j.finished_ms = 0;
    j.deadline_ms = 1700000060000;
    j.attempts = 2;
    j.run_ms = 12.25;
    j.peak_bytes = 1 << 20;
    unsigned char req[10000];
    for (size_t i = 0; i < sizeof req; i++)
        req[i] = (unsigned char)(i * 7 + 3);
    char existing[RTX_JOB_ID_LEN] = "x";
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, req, sizeof req, existing, &err), 0);
    ck_assert_str_eq(existing, "");

    for (int pass = 0; pass < 2; pass++) {
        struct rtx_job_info g;
        ck_assert_int_eq(rtx_store_job_get(fx.s, id, &g, &err), 0);
        ck_assert_str_eq(g.id, id);
        ck_assert_int_eq(g.state, RTX_JOB_QUEUED);
        ck_assert_str_eq(g.reason, "why not");
        ck_assert_str_eq(g.lane, "batch");
        ck_assert_str_eq(g.graph_name, "transformer_block");
        ck_assert_str_eq(g.idempotency_key, "key-1");
        ck_assert_int_eq(g.restart_policy, RTX_RESTART_FAIL);
        ck_assert_int_eq(g.n_labels, 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_str_eq(g.labels[i].key, labels[i].key);
            ck_assert_str_eq(g.labels[i].value, labels[i].value);
        }
        ck_assert_int_eq(g.created_ms, 1700000000123);
        ck_assert_int_eq(g.started_ms, 5);
        ck_assert_int_eq(g.finished_ms, 0);
        ck_assert_int_eq(g.deadline_ms, 1700000060000);
        ck_assert_int_eq(g.attempts, 2);
        ck_assert(g.run_ms == 12.25);
        ck_assert_int_eq(g.peak_bytes, 1 << 20);
        ck_assert_int_eq(g.n_outputs, 0);
        ck_assert(g.outputs_available);
        rtx_job_info_clear(&g);
        ck_assert_ptr_null(g.lane);

        void *back = NULL;
        size_t len = 0;
        ck_assert_int_eq(rtx_store_job_request(fx.s, id, &back, &len, &err), 0);
        ck_assert_uint_eq(len, sizeof req);
        ck_assert_int_eq(memcmp(back, req, len), 0);
        rtx_free(back);
        reopen(&fx); /* the second pass reads what survived a close */
    }
    fixture_close(&fx);
}
END_TEST

START_TEST(insert_rejects_bad_jobs_and_unknown_ids_are_not_found) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_err err = {0};
    struct rtx_job_info j;
    job_init(&j, "dup", 1);
    insert_ok(fx.s, &j);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 0, NULL, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "dup"));
    job_init(&j, "bad id!", 1);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 0, NULL, &err), RTX_EINVAL);
    job_init(&j, "", 1);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 0, NULL, &err), RTX_EINVAL);
    job_init(&j, "ok", 1);
    j.state = (enum rtx_job_state)9;
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 0, NULL, &err), RTX_EINVAL);
    job_init(&j, "ok", 1);
    j.restart_policy = (enum rtx_restart_policy)0;
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 0, NULL, &err), RTX_EINVAL);
    job_init(&j, "ok", 1);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, NULL, 5, NULL, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_store_job_insert(fx.s, NULL, NULL, 0, NULL, &err), RTX_EINVAL);
    ck_assert(stats(fx.s).ok); /* rejections are not storage failures */

    struct rtx_job_info g;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "nope", &g, &err), RTX_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "nope"));
    void *req;
    size_t len;
    ck_assert_int_eq(rtx_store_job_request(fx.s, "nope", &req, &len, &err), RTX_ENOTFOUND);
    ck_assert_ptr_null(req);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "", &g, &err), RTX_EINVAL);
    /* an empty request round-trips as empty */
    ck_assert_int_eq(rtx_store_job_request(fx.s, "dup", &req, &len, &err), 0);
    ck_assert_uint_eq(len, 3);
    rtx_free(req);
    ck_assert_int_eq(stats(fx.s).jobs, 1);
    fixture_close(&fx);
}
END_TEST

START_TEST(idempotency_key_returns_the_first_job) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_err err = {0};
    struct rtx_job_info j;
    job_init(&j, "first", 1);
    j.idempotency_key = "same";
    insert_ok(fx.s, &j);
    job_init(&j, "second", 2);
    j.idempotency_key = "same";
    char existing[RTX_JOB_ID_LEN] = "";
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, "x", 1, existing, &err), 0);
    ck_assert_str_eq(existing, "first");
    struct rtx_job_info g;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "second", &g, &err), RTX_ENOTFOUND);
    /* empty keys are not unique */
    insert_simple(fx.s, "nokey1", 3);
    insert_simple(fx.s, "nokey2", 4);
    /* another key is another job, also after a reopen */
    reopen(&fx);
    job_init(&j, "third", 5);
    j.idempotency_key = "same";
    ck_assert_int_eq(rtx_store_job_insert(fx.s, &j, "x", 1, existing, &err), 0);
    ck_assert_str_eq(existing, "first");
    j.idempotency_key = "other";
    insert_ok(fx.s, &j);
    ck_assert_int_eq(stats(fx.s).jobs, 4);
    fixture_close(&fx);
}
END_TEST

START_TEST(state_changes_follow_the_rules_and_terminal_is_final) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_err err = {0};
    struct rtx_job_info g;
    insert_simple(fx.s, "s1", 100);

    set_state_ok(fx.s, "s1", RTX_JOB_RUNNING, 200);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "s1", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_RUNNING);
    ck_assert_int_eq(g.started_ms, 200);
    ck_assert_int_eq(g.attempts, 1);
    ck_assert_int_eq(g.finished_ms, 0);
    rtx_job_info_clear(&g);

    /* a re-run after a restart keeps the times */
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s1", RTX_JOB_QUEUED, "restarted", 300, &err),
                     0);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "s1", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_QUEUED);
    ck_assert_int_eq(g.started_ms, 200);
    ck_assert_str_eq(g.reason, "restarted");
    rtx_job_info_clear(&g);

    set_state_ok(fx.s, "s1", RTX_JOB_RUNNING, 400);
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s1", RTX_JOB_FAILED, "kernel died", 500, &err),
                     0);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "s1", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_FAILED);
    ck_assert_int_eq(g.started_ms, 400);
    ck_assert_int_eq(g.attempts, 2);
    ck_assert_int_eq(g.finished_ms, 500);
    ck_assert_str_eq(g.reason, "kernel died");
    rtx_job_info_clear(&g);

    /* terminal is final: no move, and the row is unchanged */
    static const enum rtx_job_state all[] = {RTX_JOB_QUEUED, RTX_JOB_RUNNING,   RTX_JOB_SUCCEEDED,
                                             RTX_JOB_FAILED, RTX_JOB_CANCELLED, RTX_JOB_EXPIRED};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s1", all[i], "late", 900, &err),
                         RTX_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "s1"));
        ck_assert_ptr_nonnull(strstr(err.msg, "failed"));
    }
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "s1", 900, 1, 1, 0, NULL, NULL, &err),
                     RTX_EINVAL);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "s1", &g, &err), 0);
    ck_assert_int_eq(g.finished_ms, 500);
    ck_assert_str_eq(g.reason, "kernel died");
    rtx_job_info_clear(&g);

    /* cancel and expire are terminal too; a reason of NULL keeps the old one */
    insert_simple(fx.s, "s2", 100);
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s2", RTX_JOB_CANCELLED, NULL, 50, &err), 0);
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s2", RTX_JOB_EXPIRED, NULL, 60, &err),
                     RTX_EINVAL);
    ck_assert_int_eq(rtx_store_job_get(fx.s, "s2", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_CANCELLED);
    ck_assert_int_eq(g.finished_ms, 50);
    ck_assert_str_eq(g.reason, "");
    rtx_job_info_clear(&g);

    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "ghost", RTX_JOB_RUNNING, NULL, 1, &err),
                     RTX_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "ghost"));
    ck_assert_int_eq(rtx_store_job_set_state(fx.s, "s2", (enum rtx_job_state)0, NULL, 1, &err),
                     RTX_EINVAL);
    ck_assert(stats(fx.s).ok);
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Outputs
 * ---------------------------------------------------------------------------------------- */

START_TEST(succeed_stores_outputs_of_every_dtype_once_per_content) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_err err = {0};
    int64_t d23[] = {2, 3}, d4[] = {4}, d0[] = {3, 0}, d234[] = {2, 3, 4};
    struct rtx_tensor *base = filled(RTX_F32, 3, d234, 7), *perm;
    int p[] = {2, 0, 1};
    ck_assert_int_eq(rtx_tensor_permute(base, p, &perm, &err), 0); /* not contiguous */
    struct rtx_tensor *outs[] = {
        filled(RTX_F32, 2, d23, 1),  filled(RTX_F16, 1, d4, 2),
        filled(RTX_BF16, 2, d23, 3), filled(RTX_I8, 1, d4, 4),
        filled(RTX_I32, 2, d23, 5),  filled(RTX_I64, 1, d4, 6),
        filled(RTX_U8, 0, NULL, 7),  filled(RTX_BOOL, 1, d4, 8),
        filled(RTX_F32, 2, d0, 9),   perm,
    };
    const char *names[] = {"f32", "f16", "bf16", "i8",    "i32", /* one per output */
                           "i64", "u8",  "bool", "empty", "perm"};
    int n = 10;

    insert_simple(fx.s, "o1", 1);
    succeed_ok(fx.s, "o1", 1000, n, names, outs);
    struct rtx_store_stats st1 = stats(fx.s);
    ck_assert_int_eq(st1.blobs, n);

    for (int pass = 0; pass < 2; pass++) {
        struct rtx_tensor **got;
        char **got_names;
        int got_n;
        ck_assert_int_eq(rtx_store_job_outputs(fx.s, "o1", &got, &got_names, &got_n, &err), 0);
        ck_assert_int_eq(got_n, n);
        for (int i = 0; i < n; i++) {
            ck_assert_str_eq(got_names[i], names[i]);
            assert_same_tensor(outs[i], got[i]);
        }
        free_outputs(got, got_names, got_n);
        reopen(&fx);
    }

    struct rtx_job_info g;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "o1", &g, &err), 0);
    ck_assert_int_eq(g.state, RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(g.finished_ms, 1000);
    ck_assert(g.run_ms == 1.5);
    ck_assert_int_eq(g.peak_bytes, 1024);
    ck_assert_int_eq(g.n_outputs, n);
    ck_assert_str_eq(g.outputs[0].name, "f32");
    ck_assert_int_eq(g.outputs[0].dtype, RTX_F32);
    ck_assert_int_eq(g.outputs[0].ndim, 2);
    ck_assert_int_eq(g.outputs[0].dims[1], 3);
    ck_assert_int_eq(g.outputs[0].bytes, 24);
    ck_assert_uint_eq(strlen(g.outputs[0].sha256), 64);
    ck_assert_int_eq(g.outputs[6].ndim, 0);
    ck_assert_int_eq(g.outputs[8].bytes, 0);
    ck_assert_str_eq(g.outputs[8].sha256,
                     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    ck_assert_int_eq(g.outputs[9].dims[0], 4);
    rtx_job_info_clear(&g);

    /* the same content again (twice within the job, and in a second job) is stored once */
    insert_simple(fx.s, "o2", 2);
    struct rtx_tensor *again[] = {outs[0], outs[0], outs[3]};
    const char *again_names[] = {"a", "b", "c"};
    succeed_ok(fx.s, "o2", 1001, 3, again_names, again);
    struct rtx_store_stats st2 = stats(fx.s);
    ck_assert_int_eq(st2.blobs, st1.blobs);
    ck_assert_int_eq(st2.blob_bytes, st1.blob_bytes);
    struct rtx_tensor **got;
    char **got_names;
    int got_n;
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "o2", &got, &got_names, &got_n, &err), 0);
    ck_assert_int_eq(got_n, 3);
    assert_same_tensor(outs[0], got[1]);
    ck_assert_str_eq(got_names[2], "c");
    free_outputs(got, got_names, got_n);

    /* a job with no outputs */
    insert_simple(fx.s, "o3", 3);
    succeed_ok(fx.s, "o3", 1002, 0, NULL, NULL);
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "o3", &got, &got_names, &got_n, &err), 0);
    ck_assert_int_eq(got_n, 0);
    free_outputs(got, got_names, got_n);

    /* errors: not running, unknown, not succeeded */
    insert_simple(fx.s, "o4", 4);
    const struct rtx_tensor *one[] = {outs[0]};
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "o4", 5, 1, 1, 1, names, one, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "queued"));
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "ghost", 5, 1, 1, 1, names, one, &err),
                     RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "o4", &got, &got_names, &got_n, &err),
                     RTX_EINVAL);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "ghost", &got, &got_names, &got_n, &err),
                     RTX_ENOTFOUND);
    const char *null_name[] = {NULL};
    set_state_ok(fx.s, "o4", RTX_JOB_RUNNING, 5);
    ck_assert_int_eq(rtx_store_job_succeed(fx.s, "o4", 5, 1, 1, 1, null_name, one, &err),
                     RTX_EINVAL);
    ck_assert_int_eq(stats(fx.s).blobs, st1.blobs);

    for (int i = 0; i < n; i++)
        rtx_tensor_unref(outs[i]);
    rtx_tensor_unref(base);
    fixture_close(&fx);
}
END_TEST

START_TEST(corrupt_blob_is_detected_on_read) {
    struct fixture fx;
    fixture_open(&fx);
    struct rtx_err err = {0};
    int64_t d[] = {64};
    struct rtx_tensor *good = filled(RTX_F32, 1, d, 11), *bad = filled(RTX_F32, 1, d, 12);
    struct rtx_tensor *outs[] = {good, bad};
    const char *names[] = {"logits", "hidden"};
    insert_simple(fx.s, "c1", 1);
    succeed_ok(fx.s, "c1", 10, 2, names, outs);
    struct rtx_job_info g;
    ck_assert_int_eq(rtx_store_job_get(fx.s, "c1", &g, &err), 0);
    char sql[256];
    /* same length, one byte changed, through a separate connection */
    snprintf(sql, sizeof sql,
             "UPDATE blobs SET data = CAST(x'ff' || substr(data, 2) AS BLOB) "
             "WHERE sha256 = '%s'",
             g.outputs[1].sha256);
    rtx_job_info_clear(&g);
    raw_exec(fx.path, sql);

    struct rtx_tensor **got = NULL;
    char **got_names = NULL;
    int got_n = -1;
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "c1", &got, &got_names, &got_n, &err), RTX_EIO);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(got_n, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "c1"));
    ck_assert_ptr_nonnull(strstr(err.msg, "hidden"));
    ck_assert_ptr_nonnull(strstr(err.msg, "SHA-256"));

    /* a truncated blob and a missing one are caught as well */
    snprintf(sql, sizeof sql, "UPDATE blobs SET data = x'00' WHERE bytes = 256");
    raw_exec(fx.path, sql);
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "c1", &got, &got_names, &got_n, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "logits"));
    raw_exec(fx.path, "PRAGMA foreign_keys = OFF; DELETE FROM blobs");
    ck_assert_int_eq(rtx_store_job_outputs(fx.s, "c1", &got, &got_names, &got_n, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing"));
    rtx_tensor_unref(good);
    rtx_tensor_unref(bad);
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Lists
 * ---------------------------------------------------------------------------------------- */

#define LIST_JOBS 250

static const char *const teams[] = {"vision", "speech", "ml"};

/* Job i: created at 1000 + i/2 (pairs share a millisecond), team i%3, env i%2, state by i%5. */
static void make_list_jobs(struct rtx_store *s) {
    for (int i = 0; i < LIST_JOBS; i++) {
        char id[RTX_JOB_ID_LEN];
        snprintf(id, sizeof id, "L%04d", i);
        struct rtx_job_label labels[] = {{"team", (char *)teams[i % 3]},
                                         {"env", i % 2 ? "prod" : "dev"}};
        struct rtx_job_info j;
        job_init(&j, id, 1000 + i / 2);
        j.n_labels = 2;
        j.labels = labels;
        insert_ok(s, &j);
        if (i % 5 == 1) set_state_ok(s, id, RTX_JOB_RUNNING, 5000);
        if (i % 5 == 2) set_state_ok(s, id, RTX_JOB_CANCELLED, 5000);
    }
}

static bool list_wants(int i, const struct rtx_job_filter *f) {
    enum rtx_job_state st = i % 5 == 1   ? RTX_JOB_RUNNING
                            : i % 5 == 2 ? RTX_JOB_CANCELLED
                                         : RTX_JOB_QUEUED;
    bool ok = f->n_states == 0;
    for (int k = 0; k < f->n_states; k++)
        ok = ok || f->states[k] == st;
    for (int k = 0; k < f->n_labels; k++) {
        const char *want = f->labels[k].value;
        if (strcmp(f->labels[k].key, "team") == 0)
            ok = ok && strcmp(want, teams[i % 3]) == 0;
        else if (strcmp(f->labels[k].key, "env") == 0)
            ok = ok && strcmp(want, i % 2 ? "prod" : "dev") == 0;
        else
            ok = false;
    }
    int64_t c = 1000 + i / 2;
    if (f->created_after_ms) ok = ok && c > f->created_after_ms;
    if (f->created_before_ms) ok = ok && c < f->created_before_ms;
    return ok;
}

/* Pages through f and checks: every matching job once, newest first, ties by id. */
static void check_pages(struct rtx_store *s, struct rtx_job_filter f) {
    bool seen[LIST_JOBS] = {false};
    int expected = 0, total = 0, pages = 0;
    for (int i = 0; i < LIST_JOBS; i++)
        expected += list_wants(i, &f);
    char token[RTX_JOB_ID_LEN + 32] = "";
    int64_t prev_created = INT64_MAX;
    char prev_id[RTX_JOB_ID_LEN] = "~";
    do {
        struct rtx_job_info *jobs;
        int n;
        struct rtx_err err = {0};
        f.page_token = token;
        char next[RTX_JOB_ID_LEN + 32];
        int rc = rtx_store_job_list(s, &f, &jobs, &n, next, &err);
        ck_assert_msg(rc == 0, "list: %s", err.msg);
        ck_assert_int_le(n, f.limit);
        for (int k = 0; k < n; k++) {
            int i = atoi(jobs[k].id + 1);
            ck_assert(list_wants(i, &f));
            ck_assert(!seen[i]);
            seen[i] = true;
            ck_assert(jobs[k].created_ms < prev_created ||
                      (jobs[k].created_ms == prev_created && strcmp(jobs[k].id, prev_id) < 0));
            prev_created = jobs[k].created_ms;
            snprintf(prev_id, sizeof prev_id, "%s", jobs[k].id);
            ck_assert_int_eq(jobs[k].n_labels, 2);
        }
        total += n;
        pages++;
        if (next[0]) ck_assert_int_eq(n, f.limit);
        rtx_job_info_free_array(jobs, n);
        memcpy(token, next, sizeof token);
    } while (token[0]);
    ck_assert_int_eq(total, expected);
    ck_assert_int_eq(pages, expected / f.limit + 1 - (expected && expected % f.limit == 0));
}

START_TEST(list_filters_and_pages_newest_first) {
    struct fixture fx;
    fixture_open(&fx);
    make_list_jobs(fx.s);
    struct rtx_job_filter f = {.limit = 17};
    check_pages(fx.s, f); /* all 250 */
    f.limit = 1000;
    check_pages(fx.s, f);
    f.limit = 250;
    check_pages(fx.s, f); /* exactly one full page, then an empty last page is not needed */
    f.limit = 1;
    check_pages(fx.s, f);

    enum rtx_job_state running[] = {RTX_JOB_RUNNING};
    enum rtx_job_state two[] = {RTX_JOB_QUEUED, RTX_JOB_CANCELLED};
    struct rtx_job_label team[] = {{"team", "ml"}};
    struct rtx_job_label team_env[] = {{"team", "speech"}, {"env", "prod"}};
    struct rtx_job_label none[] = {{"team", "nobody"}};
    f = (struct rtx_job_filter){.limit = 7, .n_states = 1, .states = running};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 9, .n_states = 2, .states = two};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 10, .n_labels = 1, .labels = team};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 10, .n_labels = 2, .labels = team_env};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 10, .n_labels = 1, .labels = none};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 11, .created_after_ms = 1020, .created_before_ms = 1100};
    check_pages(fx.s, f);
    f = (struct rtx_job_filter){.limit = 5,
                                .n_states = 2,
                                .states = two,
                                .n_labels = 2,
                                .labels = team_env,
                                .created_after_ms = 1010};
    check_pages(fx.s, f);

    struct rtx_job_info *jobs;
    int n;
    char next[RTX_JOB_ID_LEN + 32];
    struct rtx_err err = {0};
    f = (struct rtx_job_filter){.limit = 0};
    ck_assert_int_eq(rtx_store_job_list(fx.s, &f, &jobs, &n, next, &err), RTX_EINVAL);
    f.limit = 1001;
    ck_assert_int_eq(rtx_store_job_list(fx.s, &f, &jobs, &n, next, &err), RTX_EINVAL);
    f.limit = 10;
    f.page_token = "garbage";
    ck_assert_int_eq(rtx_store_job_list(fx.s, &f, &jobs, &n, next, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "token"));
    f.page_token = NULL;
    enum rtx_job_state bad[] = {(enum rtx_job_state)42};
    f.n_states = 1;
    f.states = bad;
    ck_assert_int_eq(rtx_store_job_list(fx.s, &f, &jobs, &n, next, &err), RTX_EINVAL);
    fixture_close(&fx);
}
END_TEST

START_TEST(unfinished_jobs_come_in_creation_order) {
    struct fixture fx;
    fixture_open(&fx);
    static const int created[] = {50, 10, 40, 20, 30, 60, 5};
    for (int i = 0; i < 7; i++) {
        char id[16];
        snprintf(id, sizeof id, "u%d", i);
        insert_simple(fx.s, id, created[i]);
    }
    set_state_ok(fx.s, "u2", RTX_JOB_RUNNING, 70); /* 40: running, stays */
    set_state_ok(fx.s, "u3", RTX_JOB_FAILED, 70);  /* 20: finished, leaves */
    set_state_ok(fx.s, "u6", RTX_JOB_EXPIRED, 70); /* 5: finished, leaves */
    reopen(&fx);
    struct rtx_job_info *jobs;
    int n;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_store_job_unfinished(fx.s, &jobs, &n, &err), 0);
    ck_assert_int_eq(n, 5);
    static const char *const want[] = {"u1", "u4", "u2", "u0", "u5"};
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(jobs[i].id, want[i]);
    ck_assert_int_eq(jobs[2].state, RTX_JOB_RUNNING);
    rtx_job_info_free_array(jobs, n);
    fixture_close(&fx);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Retention
 * ---------------------------------------------------------------------------------------- */

/* Job r<i> finished at 1000 * (i + 1) with one output of 1000 bytes (u8, seed i). */
static void make_retention_jobs(struct rtx_store *s, int n) {
    int64_t d[] = {1000};
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        insert_simple(s, id, i);
        struct rtx_tensor *t = filled(RTX_U8, 1, d, (unsigned)i + 100);
        const char *names[] = {"out"};
        succeed_ok(s, id, 1000 * (i + 1), 1, names, &t);
        rtx_tensor_unref(t);
    }
}

static bool outputs_available(struct rtx_store *s, const char *id) {
    struct rtx_job_info g;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_store_job_get(s, id, &g, &err), 0);
    bool avail = g.outputs_available;
    ck_assert_int_eq(g.n_outputs, 1); /* the description stays */
    rtx_job_info_clear(&g);
    struct rtx_tensor **t;
    char **names;
    int n;
    int rc = rtx_store_job_outputs(s, id, &t, &names, &n, &err);
    if (avail) {
        ck_assert_int_eq(rc, 0);
        free_outputs(t, names, n);
    } else {
        ck_assert_int_eq(rc, RTX_ENOTFOUND);
        ck_assert_ptr_nonnull(strstr(err.msg, "deleted by retention"));
    }
    return avail;
}

START_TEST(retention_by_age_deletes_old_outputs_and_keeps_jobs) {
    struct fixture fx;
    fixture_dir(&fx);
    store_open(&fx, 4500, 0);
    make_retention_jobs(fx.s, 8); /* finished at 1000..8000 */
    /* a newer job shares r0's content: that blob must survive r0's retention */
    int64_t d[] = {1000};
    struct rtx_tensor *shared = filled(RTX_U8, 1, d, 100);
    const char *names[] = {"same"};
    insert_simple(fx.s, "keep", 99);
    succeed_ok(fx.s, "keep", 9000, 1, names, &shared);
    rtx_tensor_unref(shared);
    insert_simple(fx.s, "failed", 100);
    set_state_ok(fx.s, "failed", RTX_JOB_FAILED, 10);
    ck_assert_int_eq(stats(fx.s).blobs, 8);

    int64_t freed = -1;
    struct rtx_err err = {0};
    /* now 10000, max age 4500: finished before 5500 goes (r0..r4), r0's blob stays */
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 10000, &freed, &err), 0);
    ck_assert_int_eq(freed, 4000);
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        ck_assert_int_eq(outputs_available(fx.s, id), i >= 5);
    }
    ck_assert(outputs_available(fx.s, "keep"));
    struct rtx_store_stats st = stats(fx.s);
    ck_assert_int_eq(st.jobs, 10);
    ck_assert_int_eq(st.blobs, 4);
    ck_assert_int_eq(st.blob_bytes, 4000);

    /* nothing more to do at the same time; a later run takes the rest but "keep" */
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 10000, &freed, &err), 0);
    ck_assert_int_eq(freed, 0);
    rtx_store_set_retention(fx.s, 1000, 0);
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 10000, &freed, &err), 0);
    ck_assert_int_eq(freed, 3000);
    ck_assert(outputs_available(fx.s, "keep"));
    ck_assert_int_eq(stats(fx.s).blobs, 1);
    /* 0 = keep: nothing happens */
    rtx_store_set_retention(fx.s, 0, 0);
    ck_assert_int_eq(rtx_store_retention_run(fx.s, INT64_MAX / 2, &freed, &err), 0);
    ck_assert_int_eq(freed, 0);
    fixture_close(&fx);
}
END_TEST

START_TEST(retention_by_bytes_deletes_oldest_first) {
    struct fixture fx;
    fixture_dir(&fx);
    store_open(&fx, 0, 3500);
    make_retention_jobs(fx.s, 10);
    ck_assert_int_eq(stats(fx.s).blob_bytes, 10000);
    int64_t freed = 0;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 20000, &freed, &err), 0);
    ck_assert_int_eq(freed, 7000);
    ck_assert_int_eq(stats(fx.s).blob_bytes, 3000);
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        ck_assert_int_eq(outputs_available(fx.s, id), i >= 7);
    }
    /* under the limit: nothing */
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 20000, &freed, NULL), 0);
    ck_assert_int_eq(freed, 0);
    /* age and bytes together, across more than one chunk of candidates */
    rtx_store_close(fx.s);
    nftw(fx.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    fixture_dir(&fx);
    store_open(&fx, 150500, 20000);
    make_retention_jobs(fx.s, 200); /* finished at 1000..200000 */
    ck_assert_int_eq(rtx_store_retention_run(fx.s, 200000, &freed, &err), 0);
    /* age leaves jobs finished at >= 49500 (r49..r199: 151), bytes leaves the newest 20 */
    ck_assert_int_eq(freed, 180000);
    ck_assert_int_eq(stats(fx.s).blobs, 20);
    ck_assert(!outputs_available(fx.s, "r179"));
    ck_assert(outputs_available(fx.s, "r180"));
    fixture_close(&fx);
}
END_TEST

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
            snprintf(c->msg, sizeof c->msg, "%s", err.msg);
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

Suite *rtx_store_suite(void) {
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, job_ids_are_unique_and_time_ordered);
    tcase_add_test(tc, state_names_and_terminal_states);
    tcase_add_test(tc, open_creates_wal_database_and_reopens);
    tcase_add_test(tc, open_migrates_an_older_database);
    tcase_add_test(tc, open_refuses_a_newer_schema);
    tcase_add_test(tc, open_rejects_bad_arguments_and_files);
    tcase_add_test(tc, insert_get_round_trips_every_field);
    tcase_add_test(tc, insert_rejects_bad_jobs_and_unknown_ids_are_not_found);
    tcase_add_test(tc, idempotency_key_returns_the_first_job);
    tcase_add_test(tc, state_changes_follow_the_rules_and_terminal_is_final);
    tcase_add_test(tc, succeed_stores_outputs_of_every_dtype_once_per_content);
    tcase_add_test(tc, corrupt_blob_is_detected_on_read);
    tcase_add_test(tc, list_filters_and_pages_newest_first);
    tcase_add_test(tc, unfinished_jobs_come_in_creation_order);
    tcase_add_test(tc, retention_by_age_deletes_old_outputs_and_keeps_jobs);
    tcase_add_test(tc, retention_by_bytes_deletes_oldest_first);
    tcase_add_test(tc, concurrent_inserts_are_durable_and_distinct);
    tcase_add_test(tc, batched_writes_report_failures_to_their_own_callers);
    tcase_add_test(tc, reopen_after_close_shows_everything);
    tcase_add_test(tc, io_faults_fail_writes_with_eio_and_the_store_recovers);
    tcase_add_test(tc, io_faults_in_batched_writes_fail_only_their_callers);
    tcase_add_test(tc, reads_survive_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
