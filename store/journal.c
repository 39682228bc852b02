/*
 * journal.c - the store's writes: journaling a job, state changes, success with outputs, and
 * retention. Each public function checks its arguments and prepares what it can on the
 * calling thread (hashing outputs among it), then queues a request whose exec function runs
 * on the writer thread inside a transaction (writer.c).
 *
 * DESIGN
 * Output bytes go to `blobs` once per SHA-256; job_outputs rows point at them through `blob`.
 * Retention clears those pointers for the jobs it visits (the output metadata stays, so a job
 * still tells what it produced) and deletes blobs that nothing points at any more. Jobs are
 * visited oldest-finished first in keyset-paged chunks, so a run over many jobs never holds a
 * cursor over rows it is changing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store/store-impl.h"

/* Job ids: 1..31 characters of [0-9A-Za-z._-] (rtx_store_new_job_id makes "j" + 28 hex). */
static int check_new_id(const char *id, struct rtx_err *err) {
    if (!id || !id[0]) return rtx_err_set(err, RTX_EINVAL, "store: empty job id");
    size_t n = strnlen(id, RTX_JOB_ID_LEN);
    if (n >= RTX_JOB_ID_LEN)
        return rtx_err_set(err, RTX_EINVAL, "store: job id longer than %d characters",
                           RTX_JOB_ID_LEN - 1);
    if (strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-") != n)
        return rtx_err_set(err, RTX_EINVAL,
                           "store: job id '%s' has characters other than "
                           "letters, digits, '.', '_' and '-'",
                           id);
    return 0;
}

static int check_id(const char *id, struct rtx_err *err) {
    if (!id || !id[0]) return rtx_err_set(err, RTX_EINVAL, "store: empty job id");
    return 0;
}

/* A TEXT column; "" for NULL (the columns read here are NOT NULL). */
static const char *column_text(sqlite3_stmt *st, int i) {
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s ? s : "";
}

static bool valid_state(enum rtx_job_state s) {
    return s >= RTX_JOB_QUEUED && s <= RTX_JOB_EXPIRED;
}

/* Steps a statement that returns no rows; a db error names the job and the action. */
static int step_done(struct rtx__store_conn *c, sqlite3_stmt *st, const char *id,
                     const char *action, struct rtx_err *err) {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return 0;
    return rtx__store_db_err(err, c->db, rc, "job %s: %s", id, action);
}

/* Reads the state columns of a job: RTX_ENOTFOUND when there is none. */
static int job_state(struct rtx__store_conn *c, const char *id, int64_t cols[4],
                     struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_STATE, err);
    if (!st) return rtx_err_prefix(err, "job %s", id);
    rtx__store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return rtx_err_set(err, RTX_ENOTFOUND, "job %s not found", id);
    if (rc != SQLITE_ROW) return rtx__store_db_err(err, c->db, rc, "job %s: read state", id);
    for (int i = 0; i < 4; i++)
        cols[i] = sqlite3_column_int64(st, i);
    sqlite3_reset(st);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Insert
 * ---------------------------------------------------------------------------------------- */

struct insert_args {
    const struct rtx_job_info *job;
    const void *request;
    size_t request_len;
    char *existing_id;
};

static int exec_insert(struct rtx__store_conn *c, void *p, struct rtx_err *err) {
    struct insert_args *a = p;
    const struct rtx_job_info *job = a->job;
    const char *id = job->id;
    a->existing_id[0] = '\0';
    sqlite3_stmt *st;
    int rc;
    if (job->idempotency_key && job->idempotency_key[0]) {
        st = rtx__store_stmt(c, RTX__SQL_JOB_BY_KEY, err);
        if (!st) return rtx_err_prefix(err, "job %s", id);
        rtx__store_bind_text(st, 1, job->idempotency_key);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            snprintf(a->existing_id, RTX_JOB_ID_LEN, "%s", column_text(st, 0));
            sqlite3_reset(st);
            return 0;
        }
        if (rc != SQLITE_DONE)
            return rtx__store_db_err(err, c->db, rc, "job %s: look up idempotency key", id);
    }

    st = rtx__store_stmt(c, RTX__SQL_JOB_INSERT, err);
    if (!st) return rtx_err_prefix(err, "job %s", id);
    rtx__store_bind_text(st, 1, id);
    sqlite3_bind_int(st, 2, (int)job->state);
    rtx__store_bind_text(st, 3, job->reason);
    rtx__store_bind_text(st, 4, job->lane);
    rtx__store_bind_text(st, 5, job->graph_name);
    rtx__store_bind_text(st, 6, job->idempotency_key);
    sqlite3_bind_int(st, 7, (int)job->restart_policy);
    sqlite3_bind_int64(st, 8, job->created_ms);
    sqlite3_bind_int64(st, 9, job->started_ms);
    sqlite3_bind_int64(st, 10, job->finished_ms);
    sqlite3_bind_int64(st, 11, job->deadline_ms);
    sqlite3_bind_int(st, 12, job->attempts);
    sqlite3_bind_double(st, 13, job->run_ms);
    sqlite3_bind_int64(st, 14, job->peak_bytes);
    rtx__store_bind_text(st, 15, job->device);
    rtx__store_bind_text(st, 16, job->requested_device);
    rc = step_done(c, st, id, "insert", err);
    if (rc) return rc;

    for (int i = 0; i < job->n_labels; i++) {
        st = rtx__store_stmt(c, RTX__SQL_LABEL_INSERT, err);
        if (!st) return rtx_err_prefix(err, "job %s", id);
        rtx__store_bind_text(st, 1, id);
        sqlite3_bind_int(st, 2, i);
        rtx__store_bind_text(st, 3, job->labels[i].key);
        rtx__store_bind_text(st, 4, job->labels[i].value);
        rc = step_done(c, st, id, "insert label", err);
        if (rc) return rc;
    }

    st = rtx__store_stmt(c, RTX__SQL_REQUEST_INSERT, err);
    if (!st) return rtx_err_prefix(err, "job %s", id);
    rtx__store_bind_text(st, 1, id);
    rtx__store_bind_blob(st, 2, a->request, a->request_len);
    return step_done(c, st, id, "insert request", err);
}

int rtx_store_job_insert(struct rtx_store *s, const struct rtx_job_info *job, const void *request,
                         size_t request_len, char existing_id[RTX_JOB_ID_LEN],
                         struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    char unused[RTX_JOB_ID_LEN];
    if (!existing_id) existing_id = unused;
    existing_id[0] = '\0';
    if (!job) return rtx_err_set(err, RTX_EINVAL, "store: no job to insert");
    int rc = check_new_id(job->id, err);
    if (rc) return rc;
    if (!valid_state(job->state))
        return rtx_err_set(err, RTX_EINVAL, "job %s: invalid state %d", job->id, job->state);
    if (job->restart_policy != RTX_RESTART_RERUN && job->restart_policy != RTX_RESTART_FAIL)
        return rtx_err_set(err, RTX_EINVAL, "job %s: invalid restart policy %d", job->id,
                           job->restart_policy);
    if (job->n_labels < 0 || (job->n_labels > 0 && !job->labels))
        return rtx_err_set(err, RTX_EINVAL, "job %s: invalid labels", job->id);
    for (int i = 0; i < job->n_labels; i++)
        if (!job->labels[i].key || !job->labels[i].key[0])
            return rtx_err_set(err, RTX_EINVAL, "job %s: label %d has no key", job->id, i);
    if (!request && request_len > 0)
        return rtx_err_set(err, RTX_EINVAL, "job %s: no request bytes", job->id);

    struct insert_args a = {job, request, request_len, existing_id};
    struct rtx__store_wreq r = {.exec = exec_insert, .args = &a};
    snprintf(r.what, sizeof r.what, "insert job %s", job->id);
    return rtx__store_submit(s, &r, err);
}

/* ------------------------------------------------------------------------------------------
 * State changes
 * ---------------------------------------------------------------------------------------- */

struct state_args {
    const char *id;
    enum rtx_job_state state;
    const char *reason;
    int64_t now_ms;
    const char *device; /* NULL: leave the device column as it is */
    const char *failure_code; /* NULL: leave the failure_code column as it is */
};

static int exec_set_state(struct rtx__store_conn *c, void *p, struct rtx_err *err) {
    struct state_args *a = p;
    int64_t cols[4]; /* state, started_ms, finished_ms, attempts */
    int rc = job_state(c, a->id, cols, err);
    if (rc) return rc;
    enum rtx_job_state cur = (enum rtx_job_state)cols[0];
    if (rtx_job_state_is_terminal(cur))
        return rtx_err_set(err, RTX_EINVAL, "job %s is already %s; it cannot become %s", a->id,
                           rtx_job_state_name(cur), rtx_job_state_name(a->state));
    int64_t started = cols[1], finished = cols[2], attempts = cols[3];
    if (a->state == RTX_JOB_RUNNING) {
        started = a->now_ms;
        attempts++;
    }
    if (rtx_job_state_is_terminal(a->state)) finished = a->now_ms;

    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_SET_STATE, err);
    if (!st) return rtx_err_prefix(err, "job %s", a->id);
    rtx__store_bind_text(st, 1, a->id);
    sqlite3_bind_int(st, 2, (int)a->state);
    if (a->reason)
        rtx__store_bind_text(st, 3, a->reason);
    else
        sqlite3_bind_null(st, 3);
    sqlite3_bind_int64(st, 4, started);
    sqlite3_bind_int64(st, 5, finished);
    sqlite3_bind_int64(st, 6, attempts);
    if (a->failure_code)
        rtx__store_bind_text(st, 7, a->failure_code);
    else
        sqlite3_bind_null(st, 7);
    rc = step_done(c, st, a->id, "set state", err);
    if (rc || !a->device) return rc;
    st = rtx__store_stmt(c, RTX__SQL_JOB_SET_DEVICE, err);
    if (!st) return rtx_err_prefix(err, "job %s", a->id);
    rtx__store_bind_text(st, 1, a->id);
    rtx__store_bind_text(st, 2, a->device);
    return step_done(c, st, a->id, "set device", err);
}

/* Journals a state change (and a failure code when it is not NULL). */
static int set_state(struct rtx_store *s, const char *id, enum rtx_job_state state,
                     const char *reason, const char *failure_code, int64_t now_ms,
                     struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    int rc = check_id(id, err);
    if (rc) return rc;
    if (!valid_state(state))
        return rtx_err_set(err, RTX_EINVAL, "job %s: invalid state %d", id, state);
    struct state_args a = {id, state, reason, now_ms, NULL, failure_code};
    struct rtx__store_wreq r = {.exec = exec_set_state, .args = &a};
    snprintf(r.what, sizeof r.what, "job %.31s: set state %s", id, rtx_job_state_name(state));
    return rtx__store_submit(s, &r, err);
}

int rtx_store_job_set_state(struct rtx_store *s, const char *id, enum rtx_job_state state,
                            const char *reason, int64_t now_ms, struct rtx_err *err) {
    return set_state(s, id, state, reason, NULL, now_ms, err);
}

int rtx_store_job_fail(struct rtx_store *s, const char *id, const char *failure_code,
                       const char *reason, int64_t now_ms, struct rtx_err *err) {
    return set_state(s, id, RTX_JOB_FAILED, reason, failure_code ? failure_code : "", now_ms,
                     err);
}

int rtx_store_job_start(struct rtx_store *s, const char *id, const char *device, int64_t now_ms,
                        struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    int rc = check_id(id, err);
    if (rc) return rc;
    if (!device || !device[0] || strlen(device) >= RTX_JOB_ID_LEN)
        return rtx_err_set(err, RTX_EINVAL, "job %s: a device name of 1..%d characters is needed",
                           id, RTX_JOB_ID_LEN - 1);
    struct state_args a = {id, RTX_JOB_RUNNING, "", now_ms, device, NULL};
    struct rtx__store_wreq r = {.exec = exec_set_state, .args = &a};
    snprintf(r.what, sizeof r.what, "job %.31s: start on %.31s", id, device);
    return rtx__store_submit(s, &r, err);
}

/* ------------------------------------------------------------------------------------------
 * Success with outputs
 * ---------------------------------------------------------------------------------------- */

struct output_item {
    const char *name;
    struct rtx_tensor *t; /* contiguous (one reference owned) */
    size_t bytes;         /* bytes */
    char sha256[65];
    char dims[RTX_MAX_DIMS * 21 + 1]; /* "2,3,4" */
};

struct succeed_args {
    const char *id;
    int64_t now_ms;
    double run_ms;
    int64_t peak_bytes;
    int n;
    struct output_item *items;
};

static int exec_succeed(struct rtx__store_conn *c, void *p, struct rtx_err *err) {
    struct succeed_args *a = p;
    int64_t cols[4];
    int rc = job_state(c, a->id, cols, err);
    if (rc) return rc;
    enum rtx_job_state cur = (enum rtx_job_state)cols[0];
    if (cur != RTX_JOB_RUNNING)
        return rtx_err_set(err, RTX_EINVAL, "job %s is %s, not running; it cannot succeed", a->id,
                           rtx_job_state_name(cur));
    for (int i = 0; i < a->n; i++) {
        const struct output_item *o = &a->items[i];
        sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_BLOB_INSERT, err);
        if (!st) return rtx_err_prefix(err, "job %s", a->id);
        rtx__store_bind_text(st, 1, o->sha256);
        sqlite3_bind_int64(st, 2, (int64_t)o->bytes);
        rtx__store_bind_blob(st, 3, rtx_tensor_data(o->t), o->bytes);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            return rtx__store_db_err(err, c->db, rc, "job %s: store output '%s'", a->id, o->name);
        st = rtx__store_stmt(c, RTX__SQL_OUTPUT_INSERT, err);
        if (!st) return rtx_err_prefix(err, "job %s", a->id);
        rtx__store_bind_text(st, 1, a->id);
        sqlite3_bind_int(st, 2, i);
        rtx__store_bind_text(st, 3, o->name);
        rtx__store_bind_text(st, 4, rtx_dtype_name(o->t->dtype));
        rtx__store_bind_text(st, 5, o->dims);
        sqlite3_bind_int64(st, 6, (int64_t)o->bytes);
        rtx__store_bind_text(st, 7, o->sha256);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            return rtx__store_db_err(err, c->db, rc, "job %s: record output '%s'", a->id, o->name);
    }
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_SUCCEED, err);
    if (!st) return rtx_err_prefix(err, "job %s", a->id);
    rtx__store_bind_text(st, 1, a->id);
    sqlite3_bind_int64(st, 2, a->now_ms);
    sqlite3_bind_double(st, 3, a->run_ms);
    sqlite3_bind_int64(st, 4, a->peak_bytes);
    return step_done(c, st, a->id, "mark succeeded", err);
}

static void free_items(struct output_item *items, int n) {
    if (!items) return;
    for (int i = 0; i < n; i++)
        rtx_tensor_unref(items[i].t);
    rtx_free(items);
}

/* A contiguous reference to output i with its digest and dims text. */
static int prepare_item(const char *id, int i, const char *name, const struct rtx_tensor *t,
                        struct output_item *o, struct rtx_err *err) {
    if (!name || !t)
        return rtx_err_set(err, RTX_EINVAL, "job %s: output %d has no %s", id, i,
                           name ? "tensor" : "name");
    o->name = name;
    int rc = rtx_tensor_contiguous(t, &o->t, err);
    if (rc) return rtx_err_prefix(err, "job %s: output '%s'", id, name);
    o->bytes = rtx_tensor_nbytes(o->t);
    rc = rtx__store_sha256_hex(rtx_tensor_data(o->t), o->bytes, o->sha256, err);
    if (rc) return rtx_err_prefix(err, "job %s: output '%s'", id, name);
    size_t len = 0;
    o->dims[0] = '\0';
    for (int d = 0; d < o->t->ndim; d++)
        len += (size_t)snprintf(o->dims + len, sizeof o->dims - len, d ? ",%" PRId64 : "%" PRId64,
                                o->t->dims[d]);
    return 0;
}

int rtx_store_job_succeed(struct rtx_store *s, const char *id, int64_t now_ms, double run_ms,
                          int64_t peak_bytes, int n_outputs, const char *const *names,
                          const struct rtx_tensor *const *outputs, struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    int rc = check_id(id, err);
    if (rc) return rc;
    if (n_outputs < 0 || (n_outputs > 0 && (!names || !outputs)))
        return rtx_err_set(err, RTX_EINVAL, "job %s: invalid outputs", id);
    struct output_item *items = NULL;
    if (n_outputs > 0) {
        items = rtx_calloc((size_t)n_outputs, sizeof *items);
        if (!items) return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", id);
    }
    for (int i = 0; i < n_outputs; i++) {
        rc = prepare_item(id, i, names[i], outputs[i], &items[i], err);
        if (rc) {
            free_items(items, n_outputs);
            return rc;
        }
    }
    struct succeed_args a = {id, now_ms, run_ms, peak_bytes, n_outputs, items};
    struct rtx__store_wreq r = {.exec = exec_succeed, .args = &a};
    snprintf(r.what, sizeof r.what, "job %.31s: succeed", id);
    rc = rtx__store_submit(s, &r, err);
    free_items(items, n_outputs);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Retention
 * ---------------------------------------------------------------------------------------- */

struct retention_args {
    int64_t now_ms;
    int64_t max_age_ms;    /* 0 = keep */
    int64_t max_bytes;     /* 0 = unlimited */
    int64_t deleted_bytes; /* result */
};

/* Unlinks a job's outputs from their blobs, marks its outputs gone and deletes the blobs no
 * other output points at; *freed gets their bytes. */
static int drop_outputs(struct rtx__store_conn *c, const char *id, int64_t *freed,
                        struct rtx_err *err) {
    *freed = 0;
    char(*shas)[65] = NULL;
    int n = 0, cap = 0, rc = 0, src;
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_RETENTION_JOB_BLOBS, err);
    if (!st) return rtx_err_prefix(err, "retention: job %s", id);
    rtx__store_bind_text(st, 1, id);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            int ncap = cap ? 2 * cap : 8;
            void *p = rtx_realloc(shas, (size_t)ncap * sizeof *shas);
            if (!p) {
                rc = rtx_err_set(err, RTX_ENOMEM, "retention: job %s: out of memory", id);
                goto out;
            }
            shas = p;
            cap = ncap;
        }
        snprintf(shas[n++], sizeof shas[0], "%s", column_text(st, 0));
    }
    if (src != SQLITE_DONE) {
        rc = rtx__store_db_err(err, c->db, src, "retention: job %s: read outputs", id);
        goto out;
    }
    sqlite3_reset(st);

    static const enum rtx__store_sql updates[] = {RTX__SQL_RETENTION_UNLINK,
                                                  RTX__SQL_RETENTION_MARK};
    for (size_t i = 0; i < sizeof updates / sizeof updates[0]; i++) {
        st = rtx__store_stmt(c, updates[i], err);
        if (!st) {
            rc = rtx_err_prefix(err, "retention: job %s", id);
            goto out;
        }
        rtx__store_bind_text(st, 1, id);
        rc = step_done(c, st, id, "retention: unlink outputs", err);
        if (rc) goto out;
    }
    for (int i = 0; i < n; i++) {
        st = rtx__store_stmt(c, RTX__SQL_RETENTION_BLOB_DELETE, err);
        if (!st) {
            rc = rtx_err_prefix(err, "retention: job %s", id);
            goto out;
        }
        rtx__store_bind_text(st, 1, shas[i]);
        while ((src = sqlite3_step(st)) == SQLITE_ROW)
            *freed += sqlite3_column_int64(st, 0);
        if (src != SQLITE_DONE) {
            rc = rtx__store_db_err(err, c->db, src, "retention: job %s: delete blob %s", id,
                                   shas[i]);
            goto out;
        }
    }
out:
    rtx_free(shas);
    return rc;
}

/* Drops outputs of succeeded jobs that finished before `cutoff`, oldest first, until
 * *total (blob bytes) is at most max_bytes (max_bytes < 0: all of them). */
static int drop_oldest(struct rtx__store_conn *c, int64_t cutoff, int64_t max_bytes,
                       int64_t *total, struct rtx_err *err) {
    char ids[RTX__STORE_RETENTION_CHUNK][RTX_JOB_ID_LEN];
    int64_t last_finished = INT64_MIN;
    char last_id[RTX_JOB_ID_LEN] = "";
    for (;;) {
        if (max_bytes >= 0 && *total <= max_bytes) return 0;
        sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_RETENTION_CANDIDATES, err);
        if (!st) return rtx_err_prefix(err, "retention");
        sqlite3_bind_int64(st, 1, last_finished);
        rtx__store_bind_text(st, 2, last_id);
        sqlite3_bind_int64(st, 3, cutoff);
        sqlite3_bind_int(st, 4, RTX__STORE_RETENTION_CHUNK);
        int n = 0, src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW && n < RTX__STORE_RETENTION_CHUNK) {
            snprintf(ids[n++], RTX_JOB_ID_LEN, "%s", column_text(st, 0));
            last_finished = sqlite3_column_int64(st, 1);
        }
        if (src != SQLITE_DONE && src != SQLITE_ROW)
            return rtx__store_db_err(err, c->db, src, "retention: find jobs");
        sqlite3_reset(st);
        for (int i = 0; i < n; i++) {
            int64_t freed = 0;
            int rc = drop_outputs(c, ids[i], &freed, err);
            if (rc) return rc;
            *total -= freed;
            if (max_bytes >= 0 && *total <= max_bytes) return 0;
        }
        if (n < RTX__STORE_RETENTION_CHUNK) return 0;
        memcpy(last_id, ids[n - 1], sizeof last_id);
    }
}

static int exec_retention(struct rtx__store_conn *c, void *p, struct rtx_err *err) {
    struct retention_args *a = p;
    a->deleted_bytes = 0;
    int64_t before[2], after[2]; /* blobs, bytes */
    int rc = rtx__store_query_int64(c, RTX__SQL_BLOB_TOTALS, 2, before, err);
    if (rc) return rtx_err_prefix(err, "retention");
    int64_t total = before[1];
    if (a->max_age_ms > 0) {
        rc = drop_oldest(c, a->now_ms - a->max_age_ms, -1, &total, err);
        if (rc) return rc;
    }
    if (a->max_bytes > 0 && total > a->max_bytes) {
        rc = drop_oldest(c, INT64_MAX, a->max_bytes, &total, err);
        if (rc) return rc;
    }
    /* Also catches blobs left unreferenced by anything else. */
    rc = rtx__store_run(c, RTX__SQL_BLOB_SWEEP, err);
    if (!rc) rc = rtx__store_query_int64(c, RTX__SQL_BLOB_TOTALS, 2, after, err);
    if (rc) return rtx_err_prefix(err, "retention");
    a->deleted_bytes = before[1] - after[1];
    return 0;
}

int rtx_store_retention_run(struct rtx_store *s, int64_t now_ms, int64_t *deleted_bytes,
                            struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    if (deleted_bytes) *deleted_bytes = 0;
    struct retention_args a = {.now_ms = now_ms};
    pthread_mutex_lock(&s->mu);
    a.max_age_ms = s->max_age_ms;
    a.max_bytes = s->max_bytes;
    pthread_mutex_unlock(&s->mu);
    struct rtx__store_wreq r = {.exec = exec_retention, .args = &a};
    snprintf(r.what, sizeof r.what, "retention");
    int rc = rtx__store_submit(s, &r, err);
    if (rc == 0 && deleted_bytes) *deleted_bytes = a.deleted_bytes;
    return rc;
}
