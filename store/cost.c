/*
 * cost.c - the scheduler's learned run times in the store (store.h): one row per device and
 * cost key in sched_costs, listed at the job manager's start and upserted when it saves.
 *
 * DESIGN
 * The rows are small and few (the scheduler remembers a bounded number of keys per device),
 * so a save writes every row in one transaction on the writer thread; SQLite's upsert keeps
 * one row per (device, key). Keys are 64-bit unsigned hashes stored in SQLite's signed
 * INTEGER by reinterpreting the bits, so every key round-trips exactly.
 */
#include <string.h>

#include "store/store-impl.h"

struct put_args {
    const struct rtx_store_cost *rows;
    int n;
    int64_t now_ms;
};

static int exec_put(struct rtx__store_conn *c, void *args, struct rtx_err *err) {
    const struct put_args *a = args;
    for (int i = 0; i < a->n; i++) {
        const struct rtx_store_cost *r = &a->rows[i];
        sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_COST_PUT, err);
        if (!st) return rtx_err_prefix(err, "store: save costs");
        int64_t key;
        memcpy(&key, &r->key, sizeof key);
        rtx__store_bind_text(st, 1, r->device);
        sqlite3_bind_int64(st, 2, key);
        sqlite3_bind_int64(st, 3, r->ema_ns);
        sqlite3_bind_int64(st, 4, r->samples);
        sqlite3_bind_int64(st, 5, a->now_ms);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            return rtx__store_db_err(err, c->db, rc, "store: save the cost of %s key %d",
                                     r->device, i);
    }
    return 0;
}

int rtx_store_cost_put(struct rtx_store *s, const struct rtx_store_cost *rows, int n,
                       int64_t now_ms, struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err;
    if (!s || n < 0 || (n > 0 && !rows))
        return rtx_err_set(err, RTX_EINVAL, "store: save costs: invalid argument");
    for (int i = 0; i < n; i++) {
        const struct rtx_store_cost *r = &rows[i];
        if (!r->device[0] || memchr(r->device, '\0', sizeof r->device) == NULL)
            return rtx_err_set(err, RTX_EINVAL, "store: cost row %d has no device name", i);
        if (r->key == 0 || r->ema_ns <= 0 || r->samples < 0)
            return rtx_err_set(err, RTX_EINVAL,
                               "store: cost row %d (%s): key must be nonzero, ema_ns > 0 and "
                               "samples >= 0",
                               i, r->device);
    }
    if (n == 0) return 0;
    struct put_args a = {rows, n, now_ms};
    struct rtx__store_wreq r = {.exec = exec_put, .args = &a};
    snprintf(r.what, sizeof r.what, "save %d scheduler costs", n);
    return rtx__store_submit(s, &r, err);
}

int rtx_store_cost_list(struct rtx_store *s, struct rtx_store_cost **rows, int *n,
                        struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err;
    if (!s || !rows || !n)
        return rtx_err_set(err, RTX_EINVAL, "store: list costs: invalid argument");
    *rows = NULL;
    *n = 0;
    struct rtx__store_conn *c;
    int rc = rtx__store_reader_get(s, &c, err);
    if (rc) return rc;
    struct rtx_store_cost *out = NULL;
    int count = 0, cap = 0, src = SQLITE_DONE;
    sqlite3_stmt *st = rtx__store_stmt(c, RTX__SQL_COST_LIST, err);
    if (!st) {
        rc = rtx_err_prefix(err, "store: list costs");
        goto out;
    }
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            int ncap = cap ? 2 * cap : 64;
            void *p = rtx_realloc(out, (size_t)ncap * sizeof *out);
            if (!p) {
                rc = rtx_err_set(err, RTX_ENOMEM, "store: list costs: out of memory");
                goto out;
            }
            out = p;
            cap = ncap;
        }
        struct rtx_store_cost *r = &out[count];
        memset(r, 0, sizeof *r);
        const unsigned char *dev = sqlite3_column_text(st, 0);
        snprintf(r->device, sizeof r->device, "%s", dev ? (const char *)dev : "");
        int64_t key = sqlite3_column_int64(st, 1);
        memcpy(&r->key, &key, sizeof key);
        r->ema_ns = sqlite3_column_int64(st, 2);
        r->samples = sqlite3_column_int64(st, 3);
        count++;
    }
    if (src != SQLITE_DONE) rc = rtx__store_db_err(err, c->db, src, "store: list costs");
out:
    rtx__store_conn_reset(c);
    rtx__store_reader_put(s, c);
    if (rc) {
        rtx_free(out);
        return rc;
    }
    if (!out && !(out = rtx_malloc(sizeof *out)))
        return rtx_err_set(err, RTX_ENOMEM, "store: list costs: out of memory");
    *rows = out;
    *n = count;
    return 0;
}
