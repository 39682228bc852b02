/*
 * read.c - the store's reads: one job, its request, its outputs (verified against their
 * SHA-256), filtered pages of jobs and the unfinished jobs. Every read runs on a read-only
 * connection from the pool, on the calling thread, concurrently with the writer.
 *
 * DESIGN
 * A read that touches several tables (a job row, its labels, its outputs) runs in one read
 * transaction, so it sees one snapshot even while the writer commits. Lists page by keyset:
 * the page token holds the (created_ms, id) of the last row returned and the next page starts
 * strictly after it in the order (created_ms DESC, id DESC), so pages neither skip nor repeat
 * rows when jobs are added between calls. The token is "t1." + 16 hex digits of created_ms +
 * "." + the id; clients treat it as opaque.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store-impl.h"

#define LIST_MAX_STATES 16
#define LIST_MAX_LABELS 64

static char *column_dup(sqlite3_stmt *st, int i) {
    const char *s = (const char *)sqlite3_column_text(st, i);
    return rtx_strdup(s ? s : "");
}

int rtx__store_job_from_row(sqlite3_stmt *st, struct rtx_job_info *out, struct rtx_err *err) {
    memset(out, 0, sizeof *out);
    const char *id = (const char *)sqlite3_column_text(st, 0);
    snprintf(out->id, sizeof out->id, "%s", id ? id : "");
    out->state = (enum rtx_job_state)sqlite3_column_int(st, 1);
    out->reason = column_dup(st, 2);
    out->lane = column_dup(st, 3);
    out->graph_name = column_dup(st, 4);
    out->idempotency_key = column_dup(st, 5);
    out->restart_policy = (enum rtx_restart_policy)sqlite3_column_int(st, 6);
    out->created_ms = sqlite3_column_int64(st, 7);
    out->started_ms = sqlite3_column_int64(st, 8);
    out->finished_ms = sqlite3_column_int64(st, 9);
    out->deadline_ms = sqlite3_column_int64(st, 10);
    out->attempts = sqlite3_column_int(st, 11);
    out->run_ms = sqlite3_column_double(st, 12);
    out->peak_bytes = sqlite3_column_int64(st, 13);
    out->outputs_available = sqlite3_column_int(st, 14) != 0;
    out->device = column_dup(st, 15);
    out->requested_device = column_dup(st, 16);
    out->failure_code = column_dup(st, 17);
    if (!out->reason || !out->lane || !out->graph_name || !out->idempotency_key ||
        !out->device || !out->requested_device || !out->failure_code) {
        rtx_job_info_clear(out);
        return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", id ? id : "");
    }
    return 0;
}

/* Parses "2,3,4" ("" for a scalar). */
static int parse_dims(const char *text, int *ndim, int64_t *dims) {
    *ndim = 0;
    if (!text || !text[0]) return 0;
    const char *p = text;
    for (;;) {
        if (*ndim == RTX_MAX_DIMS) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || errno) return -1;
        dims[(*ndim)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* Columns name, dtype, dims, bytes, sha256 (from column 0) into *o; RTX_EIO when the row does
 * not describe a valid tensor. */
static int output_from_row(sqlite3_stmt *st, const char *id, struct rtx_job_output *o,
                           struct rtx_err *err) {
    memset(o, 0, sizeof *o);
    o->name = column_dup(st, 0);
    if (!o->name) return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", id);
    const char *dtype = (const char *)sqlite3_column_text(st, 1);
    const char *dims = (const char *)sqlite3_column_text(st, 2);
    const char *sha = (const char *)sqlite3_column_text(st, 4);
    o->bytes = sqlite3_column_int64(st, 3);
    if (!dtype || rtx_dtype_from_name(dtype, &o->dtype) != 0 ||
        parse_dims(dims, &o->ndim, o->dims) != 0 || !sha || strlen(sha) != 64 ||
        o->bytes != rtx_shape_numel(o->ndim, o->dims) * (int64_t)rtx_dtype_size(o->dtype))
        return rtx_err_set(err, RTX_EIO,
                           "job %s: output '%s': corrupt description "
                           "(dtype '%s', dims '%s', %" PRId64 " bytes)",
                           id, o->name, dtype ? dtype : "", dims ? dims : "", o->bytes);
    memcpy(o->sha256, sha, 65);
    return 0;
}

static int load_labels(struct rtx__store_conn *c, struct rtx_job_info *job, struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_LABELS, err);
    if (!st) return rtx_err_prefix(err, "job %s", job->id);
    rtx__store_bind_text(st, 1, job->id);
    int cap = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (job->n_labels == cap) {
            int ncap = cap ? 2 * cap : 4;
            void *p = rtx_realloc(job->labels, (size_t)ncap * sizeof *job->labels);
            if (!p) return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", job->id);
            job->labels = p;
            cap = ncap;
        }
        struct rtx_job_label *l = &job->labels[job->n_labels];
        l->key = column_dup(st, 0);
        l->value = column_dup(st, 1);
        job->n_labels++; /* counted at once: rtx_job_info_clear frees what was copied */
        if (!l->key || !l->value)
            return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", job->id);
    }
    if (rc != SQLITE_DONE)
        return rtx__store_db_err(err, c->db, rc, "job %s: read labels", job->id);
    return 0;
}

static int load_outputs(struct rtx__store_conn *c, struct rtx_job_info *job, struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_OUTPUTS, err);
    if (!st) return rtx_err_prefix(err, "job %s", job->id);
    rtx__store_bind_text(st, 1, job->id);
    int cap = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (job->n_outputs == cap) {
            int ncap = cap ? 2 * cap : 4;
            void *p = rtx_realloc(job->outputs, (size_t)ncap * sizeof *job->outputs);
            if (!p) return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", job->id);
            job->outputs = p;
            cap = ncap;
        }
        struct rtx_job_output *o = &job->outputs[job->n_outputs];
        rc = output_from_row(st, job->id, o, err);
        if (o->name) job->n_outputs++;
        if (rc) return rc;
    }
    if (rc != SQLITE_DONE)
        return rtx__store_db_err(err, c->db, rc, "job %s: read outputs", job->id);
    return 0;
}

/* The job of the current row of st, with labels and outputs. out is cleared on failure. */
static int load_job(struct rtx__store_conn *c, sqlite3_stmt *st, struct rtx_job_info *out,
                    struct rtx_err *err) {
    int rc = rtx__store_job_from_row(st, out, err);
    if (!rc) rc = load_labels(c, out, err);
    if (!rc) rc = load_outputs(c, out, err);
    if (rc) rtx_job_info_clear(out);
    return rc;
}

/* Takes a read connection and opens a read transaction on it. */
static int begin_read(struct rtx_store *s, struct rtx__store_conn **c, struct rtx_err *err) {
    int rc = rtx__store_reader_get(s, c, err);
    if (rc) return rc;
    rc = rtx__store_run(*c, RTX__SQL_BEGIN, err);
    if (rc) {
        rtx__store_reader_put(s, *c);
        *c = NULL;
    }
    return rc;
}

/* Steps the cached JOB_GET for id: 0 with the row current, RTX_ENOTFOUND, or a db error. */
static int find_job(struct rtx__store_conn *c, const char *id, sqlite3_stmt **out,
                    struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_GET, err);
    if (!st) return rtx_err_prefix(err, "job %s", id);
    rtx__store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return rtx_err_set(err, RTX_ENOTFOUND, "job %s not found", id);
    if (rc != SQLITE_ROW) return rtx__store_db_err(err, c->db, rc, "job %s: read", id);
    *out = st;
    return 0;
}

int rtx_store_job_get(struct rtx_store *s, const char *id, struct rtx_job_info *out,
                      struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    memset(out, 0, sizeof *out);
    if (!id || !id[0]) return rtx_err_set(err, RTX_EINVAL, "store: empty job id");
    struct rtx__store_conn *c;
    int rc = begin_read(s, &c, err);
    if (rc) return rc;
    sqlite3_stmt *st;
    rc = find_job(c, id, &st, err);
    if (!rc) rc = load_job(c, st, out, err);
    rtx__store_reader_put(s, c);
    return rc;
}

int rtx_store_job_request(struct rtx_store *s, const char *id, void **request, size_t *len,
                          struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    *request = NULL;
    *len = 0;
    if (!id || !id[0]) return rtx_err_set(err, RTX_EINVAL, "store: empty job id");
    struct rtx__store_conn *c;
    int rc = rtx__store_reader_get(s, &c, err);
    if (rc) return rc;
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_REQUEST, err);
    if (!st) {
        rc = rtx_err_prefix(err, "job %s", id);
        goto out;
    }
    rtx__store_bind_text(st, 1, id);
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE) {
        rc = rtx_err_set(err, RTX_ENOTFOUND, "job %s not found", id);
    } else if (src != SQLITE_ROW) {
        rc = rtx__store_db_err(err, c->db, src, "job %s: read request", id);
    } else {
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        const void *data = sqlite3_column_blob(st, 0);
        void *copy = rtx_malloc(n);
        if (!copy) {
            rc = rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory (%zu request bytes)", id, n);
        } else {
            if (n) memcpy(copy, data, n);
            *request = copy;
            *len = n;
        }
    }
out:
    rtx__store_reader_put(s, c);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Outputs
 * ---------------------------------------------------------------------------------------- */

struct output_list {
    struct rtx_tensor **tensors;
    char **names;
    int n, cap;
};

static void output_list_free(struct output_list *l) {
    for (int i = 0; i < l->n; i++) {
        rtx_tensor_unref(l->tensors[i]);
        rtx_free(l->names[i]);
    }
    rtx_free(l->tensors);
    rtx_free(l->names);
    memset(l, 0, sizeof *l);
}

/* Reads the current OUTPUT_DATA row into a new tensor, checking size and digest. */
static int read_output(sqlite3_stmt *st, const char *id, struct output_list *l,
                       struct rtx_err *err) {
    if (l->n == l->cap) {
        int ncap = l->cap ? 2 * l->cap : 4;
        void *t = rtx_realloc(l->tensors, (size_t)ncap * sizeof *l->tensors);
        if (t) l->tensors = t;
        void *nm = t ? rtx_realloc(l->names, (size_t)ncap * sizeof *l->names) : NULL;
        if (nm) l->names = nm;
        if (!t || !nm) return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", id);
        l->cap = ncap;
    }
    struct rtx_job_output o;
    int rc = output_from_row(st, id, &o, err);
    if (rc) {
        rtx_free(o.name);
        return rc;
    }
    if (sqlite3_column_type(st, 5) == SQLITE_NULL) {
        rc = rtx_err_set(err, RTX_EIO, "job %s: output '%s': its data (blob %.12s...) is missing",
                         id, o.name, o.sha256);
        rtx_free(o.name);
        return rc;
    }
    const void *data = sqlite3_column_blob(st, 5);
    int64_t have = sqlite3_column_bytes(st, 5);
    if (have != o.bytes) {
        rc = rtx_err_set(err, RTX_EIO,
                         "job %s: output '%s': stored data has %" PRId64 " bytes, not %" PRId64,
                         id, o.name, have, o.bytes);
        rtx_free(o.name);
        return rc;
    }
    struct rtx_tensor *t = NULL;
    rc = rtx_tensor_new(o.dtype, o.ndim, o.dims, &t, err);
    if (rc) {
        rtx_err_prefix(err, "job %s: output '%s'", id, o.name);
        rtx_free(o.name);
        return rc;
    }
    if (o.bytes) memcpy(rtx_tensor_data(t), data, (size_t)o.bytes);
    char sha[65];
    rc = rtx__store_sha256_hex(rtx_tensor_data(t), (size_t)o.bytes, sha, err);
    if (!rc && strcmp(sha, o.sha256) != 0)
        rc = rtx_err_set(err, RTX_EIO,
                         "job %s: output '%s': stored data does not match its SHA-256 "
                         "(expected %.16s..., read %.16s...): the blob is corrupt",
                         id, o.name, o.sha256, sha);
    if (rc) {
        rtx_tensor_unref(t);
        rtx_free(o.name);
        return rc;
    }
    l->tensors[l->n] = t;
    l->names[l->n] = o.name;
    l->n++;
    return 0;
}

int rtx_store_job_outputs(struct rtx_store *s, const char *id, struct rtx_tensor ***tensors,
                          char ***names, int *n, struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    *tensors = NULL;
    *names = NULL;
    *n = 0;
    if (!id || !id[0]) return rtx_err_set(err, RTX_EINVAL, "store: empty job id");
    struct rtx__store_conn *c;
    int rc = begin_read(s, &c, err);
    if (rc) return rc;
    struct output_list l = {0};
    sqlite3_stmt *st;
    rc = find_job(c, id, &st, err);
    if (rc) goto out;
    enum rtx_job_state state = (enum rtx_job_state)sqlite3_column_int(st, 1);
    bool available = sqlite3_column_int(st, 14) != 0;
    if (state != RTX_JOB_SUCCEEDED) {
        rc = rtx_err_set(err, RTX_EINVAL, "job %s is %s: only a succeeded job has outputs", id,
                         rtx_job_state_name(state));
        goto out;
    }
    if (!available) {
        rc = rtx_err_set(err, RTX_ENOTFOUND, "job %s: outputs deleted by retention", id);
        goto out;
    }
    st = rtx__store_stmt(c, RTX__SQL_OUTPUT_DATA, err);
    if (!st) {
        rc = rtx_err_prefix(err, "job %s", id);
        goto out;
    }
    rtx__store_bind_text(st, 1, id);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        rc = read_output(st, id, &l, err);
        if (rc) goto out;
    }
    if (src != SQLITE_DONE) rc = rtx__store_db_err(err, c->db, src, "job %s: read outputs", id);
out:
    rtx__store_reader_put(s, c);
    if (rc) {
        output_list_free(&l);
        return rc;
    }
    if (!l.tensors) { /* no outputs: still hand back (empty) arrays */
        l.tensors = rtx_malloc(sizeof *l.tensors);
        l.names = l.tensors ? rtx_malloc(sizeof *l.names) : NULL;
        if (!l.names) {
            output_list_free(&l);
            return rtx_err_set(err, RTX_ENOMEM, "job %s: out of memory", id);
        }
    }
    *tensors = l.tensors;
    *names = l.names;
    *n = l.n;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Lists
 * ---------------------------------------------------------------------------------------- */

static void token_format(char out[RTX_JOB_ID_LEN + 32], int64_t created_ms, const char *id) {
    snprintf(out, RTX_JOB_ID_LEN + 32, "t1.%016" PRIx64 ".%s", (uint64_t)created_ms, id);
}

static int token_parse(const char *tok, int64_t *created_ms, char id[RTX_JOB_ID_LEN],
                       struct rtx_err *err) {
    size_t n = strlen(tok);
    if (n < 3 + 16 + 2 || n >= RTX_JOB_ID_LEN + 32 || memcmp(tok, "t1.", 3) != 0 ||
        strspn(tok + 3, "0123456789abcdef") != 16 || tok[19] != '.' || n - 20 >= RTX_JOB_ID_LEN)
        return rtx_err_set(err, RTX_EINVAL, "store: invalid page token");
    char hex[17];
    memcpy(hex, tok + 3, 16);
    hex[16] = '\0';
    *created_ms = (int64_t)strtoull(hex, NULL, 16);
    memcpy(id, tok + 20, n - 20 + 1);
    return 0;
}

/* Appends to a fixed buffer sized by the caller. */
static void append(char *buf, size_t *len, const char *s) {
    size_t n = strlen(s);
    memcpy(buf + *len, s, n + 1);
    *len += n;
}

static int check_filter(const struct rtx_job_filter *f, struct rtx_err *err) {
    if (!f) return rtx_err_set(err, RTX_EINVAL, "store: no list filter");
    if (f->limit < 1 || f->limit > 1000)
        return rtx_err_set(err, RTX_EINVAL, "store: page size %d is not in 1..1000", f->limit);
    if (f->n_states < 0 || f->n_states > LIST_MAX_STATES || (f->n_states && !f->states))
        return rtx_err_set(err, RTX_EINVAL, "store: invalid state filter (at most %d states)",
                           LIST_MAX_STATES);
    for (int i = 0; i < f->n_states; i++)
        if (f->states[i] < RTX_JOB_QUEUED || f->states[i] > RTX_JOB_EXPIRED)
            return rtx_err_set(err, RTX_EINVAL, "store: invalid state %d in filter", f->states[i]);
    if (f->n_labels < 0 || f->n_labels > LIST_MAX_LABELS || (f->n_labels && !f->labels))
        return rtx_err_set(err, RTX_EINVAL, "store: invalid label filter (at most %d labels)",
                           LIST_MAX_LABELS);
    for (int i = 0; i < f->n_labels; i++)
        if (!f->labels[i].key)
            return rtx_err_set(err, RTX_EINVAL, "store: label filter %d has no key", i);
    if (f->created_after_ms < 0 || f->created_before_ms < 0)
        return rtx_err_set(err, RTX_EINVAL, "store: negative creation time bound");
    return 0;
}

#define LIST_LABEL_TERM " AND id IN (SELECT job_id FROM job_labels WHERE key = ? AND value = ?)"

/* The list query for f; *sql from rtx_malloc. The upper bound is one term, so SQLite can use
 * it as the end of its range on jobs_created: either created_ms < before, or - when a page
 * token is given and it lies below `before`, which it then implies - the keyset term
 * (created_ms, id) < (token). With both terms, SQLite would bound the index scan by one of
 * them and filter by the other, walking every row above the page. */
static int list_sql(const struct rtx_job_filter *f, bool keyset, char **sql, struct rtx_err *err) {
    static const char head[] = "SELECT " RTX__STORE_JOB_COLS " FROM jobs WHERE created_ms > ?";
    static const char states[] = " AND state IN ()";
    static const char before[] = " AND created_ms < ?";
    static const char after_token[] = " AND (created_ms, id) < (?, ?)";
    static const char tail[] = " ORDER BY created_ms DESC, id DESC LIMIT ?";
    size_t cap = sizeof head + sizeof states + 2 * (size_t)f->n_states +
                 (size_t)f->n_labels * (sizeof LIST_LABEL_TERM - 1) + sizeof after_token +
                 sizeof tail;
    char *q = rtx_malloc(cap);
    if (!q) return rtx_err_set(err, RTX_ENOMEM, "store: list: out of memory");
    size_t len = 0;
    append(q, &len, head);
    append(q, &len, keyset ? after_token : before);
    if (f->n_states) {
        append(q, &len, " AND state IN (");
        for (int i = 0; i < f->n_states; i++)
            append(q, &len, i ? ",?" : "?");
        append(q, &len, ")");
    }
    for (int i = 0; i < f->n_labels; i++)
        append(q, &len, LIST_LABEL_TERM);
    append(q, &len, tail);
    *sql = q;
    return 0;
}

int rtx_store_job_list(struct rtx_store *s, const struct rtx_job_filter *f,
                       struct rtx_job_info **jobs, int *n, char next_token[RTX_JOB_ID_LEN + 32],
                       struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    *jobs = NULL;
    *n = 0;
    /* The token is parsed before next_token is written: callers may pass one buffer as
     * both f->page_token and next_token. */
    int64_t tok_created = 0;
    char tok_id[RTX_JOB_ID_LEN] = "";
    bool keyset = f && f->page_token && f->page_token[0];
    int rc = keyset ? token_parse(f->page_token, &tok_created, tok_id, err) : 0;
    next_token[0] = '\0';
    if (rc) return rc;
    rc = check_filter(f, err);
    if (rc) return rc;
    /* A token at or above `before` adds nothing: every row below `before` is after it. */
    if (keyset && f->created_before_ms && tok_created >= f->created_before_ms) keyset = false;
    char *sql = NULL;
    rc = list_sql(f, keyset, &sql, err);
    if (rc) return rc;
    struct rtx_job_info *out = rtx_calloc((size_t)f->limit, sizeof *out);
    if (!out) {
        rtx_free(sql);
        return rtx_err_set(err, RTX_ENOMEM, "store: list: out of memory");
    }

    struct rtx__store_conn *c = NULL;
    sqlite3_stmt *st = NULL;
    int count = 0;
    rc = begin_read(s, &c, err);
    if (rc) goto out;
    int src = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (src != SQLITE_OK) {
        rc = rtx__store_db_err(err, c->db, src, "store: list: prepare");
        goto out;
    }
    int p = 1; /* parameters in the order list_sql wrote them */
    sqlite3_bind_int64(st, p++, f->created_after_ms ? f->created_after_ms : INT64_MIN);
    if (keyset) {
        sqlite3_bind_int64(st, p++, tok_created);
        rtx__store_bind_text(st, p++, tok_id);
    } else {
        sqlite3_bind_int64(st, p++, f->created_before_ms ? f->created_before_ms : INT64_MAX);
    }
    for (int i = 0; i < f->n_states; i++)
        sqlite3_bind_int(st, p++, (int)f->states[i]);
    for (int i = 0; i < f->n_labels; i++) {
        rtx__store_bind_text(st, p++, f->labels[i].key);
        rtx__store_bind_text(st, p++, f->labels[i].value);
    }
    sqlite3_bind_int(st, p++, f->limit + 1); /* one more row tells whether a page follows */
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == f->limit) {
            token_format(next_token, out[count - 1].created_ms, out[count - 1].id);
            break;
        }
        rc = load_job(c, st, &out[count], err);
        if (rc) goto out;
        count++;
    }
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        rc = rtx__store_db_err(err, c->db, src, "store: list");
out:
    sqlite3_finalize(st);
    rtx__store_reader_put(s, c);
    rtx_free(sql);
    if (rc) {
        next_token[0] = '\0';
        rtx_job_info_free_array(out, count);
        return rc;
    }
    *jobs = out;
    *n = count;
    return 0;
}

int rtx_store_job_unfinished(struct rtx_store *s, struct rtx_job_info **jobs, int *n,
                             struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    *jobs = NULL;
    *n = 0;
    struct rtx__store_conn *c;
    int rc = begin_read(s, &c, err);
    if (rc) return rc;
    struct rtx_job_info *out = NULL;
    int count = 0, cap = 0, src = SQLITE_DONE;
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_JOB_UNFINISHED, err);
    if (!st) {
        rc = rtx_err_prefix(err, "store: unfinished jobs");
        goto out;
    }
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            int ncap = cap ? 2 * cap : 16;
            void *p = rtx_realloc(out, (size_t)ncap * sizeof *out);
            if (!p) {
                rc = rtx_err_set(err, RTX_ENOMEM, "store: unfinished jobs: out of memory");
                goto out;
            }
            out = p;
            cap = ncap;
        }
        rc = load_job(c, st, &out[count], err);
        if (rc) goto out;
        count++;
    }
    if (src != SQLITE_DONE) rc = rtx__store_db_err(err, c->db, src, "store: unfinished jobs");
out:
    rtx__store_reader_put(s, c);
    if (rc) {
        rtx_job_info_free_array(out, count);
        return rc;
    }
    if (!out) {
        out = rtx_malloc(sizeof *out);
        if (!out) return rtx_err_set(err, RTX_ENOMEM, "store: unfinished jobs: out of memory");
    }
    *jobs = out;
    *n = count;
    return 0;
}
