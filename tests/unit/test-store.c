/*
 * test-store.c - the SQLite store: job ids and state names, schema migrations, the job
 * journal and its state machine, outputs (content addressing, digest checks), lists with
 * filters and pages, and retention. Concurrent writers, I/O faults and out of memory are
 * test-store-stress.c's; the fixture and job helpers are in test-store-util.h.
 *
 * Each test works in its own directory from mkdtemp under /tmp and removes it at the end.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/store-impl.h"
#include "tests/unit/test-store-util.h"

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
    suite_add_tcase(s, tc);
    return s;
}
