/*
 * writer.c - the store's writer thread: the one connection that writes, fed by a queue of
 * requests whose callers block until their transaction has committed.
 *
 * DESIGN
 * The writer takes every request queued at that moment (up to RTX__STORE_BATCH_MAX) and runs
 * them in one transaction, each inside its own savepoint: a request that fails is rolled back
 * to its savepoint and reported to its caller only, while the others commit together with one
 * WAL fsync (group commit: 16 submitters share one sync instead of queueing 16). When the
 * transaction itself is lost - an I/O error ended it, a savepoint could not be released, or
 * the COMMIT failed - nothing of the batch is on disk, so every request of the batch is run
 * again alone in its own transaction; each caller then gets the result of its own request and
 * nobody sees another request's error. A request's exec function therefore has to be
 * repeatable: it writes its results from scratch each time.
 * Rejections (RTX_EINVAL, RTX_ENOTFOUND: an unknown job, a terminal job, a duplicate id) say
 * nothing about the database; any other failure marks the store not ok in its stats until a
 * later write commits.
 */
#include <string.h>

#include "store/store-impl.h"

static bool is_rejection(int rc) {
    return rc == RTX_EINVAL || rc == RTX_ENOTFOUND;
}

/* Ends a failed transaction (if SQLite has not already rolled it back). */
static void rollback(struct rtx__store_conn *c) {
    rtx__store_conn_reset(c);
    if (!sqlite3_get_autocommit(c->db)) rtx__store_run(c, RTX__SQL_ROLLBACK, NULL);
}

/* Runs one request in a transaction of its own; the result goes to r->rc and r->err. */
static void run_alone(struct rtx__store_conn *c, struct rtx__store_wreq *r) {
    memset(&r->err, 0, sizeof r->err);
    int rc = rtx__store_run(c, RTX__SQL_BEGIN_IMMEDIATE, &r->err);
    if (rc) {
        rtx_err_prefix(&r->err, "%s: begin", r->what);
    } else {
        rc = r->exec(c, r->args, &r->err);
        rtx__store_conn_reset(c);
        if (rc == 0) {
            rc = rtx__store_run(c, RTX__SQL_COMMIT, &r->err);
            if (rc) rtx_err_prefix(&r->err, "%s: commit", r->what);
        }
        if (rc) rollback(c);
    }
    r->rc = rc;
}

/* Runs n requests in one transaction, one savepoint each. False when the transaction was
 * lost (nothing of the batch committed): the caller then runs each request alone. */
static bool run_together(struct rtx__store_conn *c, struct rtx__store_wreq **reqs, int n) {
    if (rtx__store_run(c, RTX__SQL_BEGIN_IMMEDIATE, NULL)) return false;
    for (int i = 0; i < n; i++) {
        struct rtx__store_wreq *r = reqs[i];
        memset(&r->err, 0, sizeof r->err);
        if (rtx__store_run(c, RTX__SQL_SAVEPOINT, NULL)) goto lost;
        r->rc = r->exec(c, r->args, &r->err);
        rtx__store_conn_reset(c);
        if (r->rc == 0) {
            if (rtx__store_run(c, RTX__SQL_RELEASE, NULL)) goto lost;
            continue;
        }
        /* The failure ended the whole transaction (SQLite does so on some I/O errors and
         * when out of memory): the earlier requests of the batch are gone too. */
        if (sqlite3_get_autocommit(c->db)) goto lost;
        if (rtx__store_run(c, RTX__SQL_ROLLBACK_TO, NULL) ||
            rtx__store_run(c, RTX__SQL_RELEASE, NULL))
            goto lost;
    }
    if (rtx__store_run(c, RTX__SQL_COMMIT, NULL) == 0) return true;
lost:
    rollback(c);
    return false;
}

static void run_batch(struct rtx__store_conn *c, struct rtx__store_wreq **reqs, int n) {
    if (n > 1 && run_together(c, reqs, n)) return;
    for (int i = 0; i < n; i++)
        run_alone(c, reqs[i]);
}

void *rtx__store_writer_main(void *arg) {
    struct rtx_store *s = arg;
    rtx_thread_name("rtx-store");
    struct rtx__store_wreq *batch[RTX__STORE_BATCH_MAX];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->wake, &s->mu);
        if (!s->head) break; /* stopping, and every queued request has run */
        int n = 0;
        while (s->head && n < RTX__STORE_BATCH_MAX) {
            batch[n++] = s->head;
            s->head = s->head->next;
        }
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->mu);

        run_batch(s->writer, batch, n);

        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) {
            struct rtx__store_wreq *r = batch[i];
            if (r->rc == 0) {
                s->ok = true;
            } else if (!is_rejection(r->rc)) {
                s->ok = false;
                memcpy(s->last_error, r->err.msg, sizeof s->last_error);
            }
            r->done = true;
            pthread_cond_signal(&r->cv); /* r may be gone once the mutex is released */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int rtx__store_submit(struct rtx_store *s, struct rtx__store_wreq *r, struct rtx_err *err) {
    r->done = false;
    r->next = NULL;
    r->rc = 0;
    pthread_cond_init(&r->cv, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        pthread_cond_destroy(&r->cv);
        return rtx_err_set(err, RTX_EINVAL, "%s: the store is closing", r->what);
    }
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    pthread_cond_signal(&s->wake);
    while (!r->done)
        pthread_cond_wait(&r->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&r->cv);
    if (r->rc && err) *err = r->err;
    return r->rc;
}
