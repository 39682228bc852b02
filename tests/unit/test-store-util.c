/*
 * test-store-util.c - the helpers that the store's test files share (declared, with what each
 * does, in test-store-util.h).
 */
#include "tests/unit/test-store-util.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test-util.h"

int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

void fixture_dir(struct fixture *fx) {
    fx->s = NULL;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/rtx-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(fx->dir));
    /* a missing parent directory: open creates it */
    snprintf(fx->path, sizeof fx->path, "%s/var/rtxd.db", fx->dir);
}

void store_open(struct fixture *fx, int64_t max_age_ms, int64_t max_bytes) {
    struct rtx_store_options opt = {fx->path, max_age_ms, max_bytes, false};
    struct rtx_err err = {0};
    int rc = rtx_store_open(&opt, &fx->s, &err);
    ck_assert_msg(rc == 0, "open: %s", err.msg);
}

void fixture_open(struct fixture *fx) {
    fixture_dir(fx);
    store_open(fx, 0, 0);
}

void fixture_close(struct fixture *fx) {
    rtx_store_close(fx->s);
    fx->s = NULL;
    nftw(fx->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void reopen(struct fixture *fx) {
    rtx_store_close(fx->s);
    store_open(fx, 0, 0);
}

/* A job row with fixed defaults; strings point at literals (insert copies nothing). */
void job_init(struct rtx_job_info *j, const char *id, int64_t created_ms) {
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

void insert_ok(struct rtx_store *s, const struct rtx_job_info *j) {
    struct rtx_err err = {0};
    char existing[RTX_JOB_ID_LEN];
    int rc = rtx_store_job_insert(s, j, "req", 3, existing, &err);
    ck_assert_msg(rc == 0, "insert %s: %s", j->id, err.msg);
    ck_assert_str_eq(existing, "");
}

void insert_simple(struct rtx_store *s, const char *id, int64_t created_ms) {
    struct rtx_job_info j;
    job_init(&j, id, created_ms);
    insert_ok(s, &j);
}

void set_state_ok(struct rtx_store *s, const char *id, enum rtx_job_state st,
                  int64_t now_ms) {
    struct rtx_err err = {0};
    int rc = rtx_store_job_set_state(s, id, st, NULL, now_ms, &err);
    ck_assert_msg(rc == 0, "set state %s: %s", id, err.msg);
}

/* Runs one job to success with the given outputs. */
void succeed_ok(struct rtx_store *s, const char *id, int64_t now_ms, int n,
                const char *const *names, struct rtx_tensor *const *outs) {
    set_state_ok(s, id, RTX_JOB_RUNNING, now_ms - 1);
    struct rtx_err err = {0};
    int rc = rtx_store_job_succeed(s, id, now_ms, 1.5, 1024, n, names,
                                   (const struct rtx_tensor *const *)outs, &err);
    ck_assert_msg(rc == 0, "succeed %s: %s", id, err.msg);
}

struct rtx_tensor *filled(enum rtx_dtype dt, int ndim, const int64_t *dims, unsigned seed) {
    bool is_unsigned = dt == RTX_U8 || dt == RTX_BOOL;
    return tu_tensor_random(dt, ndim, dims, is_unsigned ? 0 : -100, 100, seed);
}

void assert_same_tensor(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int i = 0; i < a->ndim; i++)
        ck_assert_int_eq(a->dims[i], b->dims[i]);
    ck_assert(rtx_tensor_is_contiguous(b));
    int64_t n = rtx_tensor_numel(a);
    for (int64_t i = 0; i < n; i++)
        ck_assert(rtx_tensor_get(a, i) == rtx_tensor_get(b, i));
}

void free_outputs(struct rtx_tensor **t, char **names, int n) {
    for (int i = 0; i < n; i++) {
        rtx_tensor_unref(t[i]);
        rtx_free(names[i]);
    }
    rtx_free(t);
    rtx_free(names);
}

struct rtx_store_stats stats(struct rtx_store *s) {
    struct rtx_store_stats st;
    struct rtx_err err = {0};
    int rc = rtx_store_stats(s, &st, &err);
    ck_assert_msg(rc == 0, "stats: %s", err.msg);
    return st;
}
