/*
 * store.c - the store handle: open (directories, writer connection, migrations, writer
 * thread), close, the pool of read-only connections, retention settings and stats.
 *
 * DESIGN
 * Open does everything that can fail before it starts the writer thread, so a failed open
 * has no thread to stop. Read connections are taken from a small pool of idle ones (or opened
 * when the pool is empty) and given back after each call; at most RTX__STORE_POOL_MAX idle
 * connections are kept, the rest are closed. Close lets the writer finish every queued
 * request, then closes the readers before the writer connection so the last connection to
 * close checkpoints the WAL into the database file.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store-impl.h"

/* Creates the missing parent directories of path (like mkdir -p of its dirname). */
static int make_parent_dirs(const char *path, struct rtx_err *err) {
    char *dir = rtx_strdup(path);
    if (!dir) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    int rc = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            rc = rtx_err_set(err, RTX_EIO, "store %s: cannot create directory %s: %s", path, dir,
                             strerror(errno));
            break;
        }
        *p = '/';
    }
    rtx_free(dir);
    return rc;
}

int rtx__store_reader_get(struct rtx_store *s, struct rtx__store_conn **out, struct rtx_err *err) {
    pthread_mutex_lock(&s->pool_mu);
    struct rtx__store_conn *c = s->idle;
    if (c) {
        s->idle = c->next;
        s->n_idle--;
        c->next = NULL;
    }
    pthread_mutex_unlock(&s->pool_mu);
    if (c) {
        *out = c;
        return 0;
    }
    return rtx__store_conn_open(s->path, false, out, err);
}

void rtx__store_reader_put(struct rtx_store *s, struct rtx__store_conn *c) {
    if (!c) return;
    rtx__store_conn_reset(c);
    if (!sqlite3_get_autocommit(c->db)) rtx__store_run(c, RTX__SQL_ROLLBACK, NULL);
    pthread_mutex_lock(&s->pool_mu);
    if (s->n_idle < RTX__STORE_POOL_MAX) {
        c->next = s->idle;
        s->idle = c;
        s->n_idle++;
        c = NULL;
    }
    pthread_mutex_unlock(&s->pool_mu);
    rtx__store_conn_close(c);
}

static void close_pool(struct rtx_store *s) {
    while (s->idle) {
        struct rtx__store_conn *c = s->idle;
        s->idle = c->next;
        rtx__store_conn_close(c);
    }
    s->n_idle = 0;
}

static void free_store(struct rtx_store *s) {
    close_pool(s);
    rtx__store_conn_close(s->writer);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->pool_mu);
    rtx_free(s->path);
    rtx_free(s);
}

int rtx_store_open(const struct rtx_store_options *opt, struct rtx_store **out,
                   struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    if (!out) return rtx_err_set(err, RTX_EINVAL, "store: no output handle");
    *out = NULL;
    if (!opt || !opt->path || !opt->path[0])
        return rtx_err_set(err, RTX_EINVAL, "store: no database path");
    if (opt->retention_max_age_ms < 0 || opt->retention_max_bytes < 0)
        return rtx_err_set(err, RTX_EINVAL, "store %s: negative retention limit", opt->path);
    if (!sqlite3_threadsafe())
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "store %s: SQLite was built without thread support", opt->path);
    int rc = make_parent_dirs(opt->path, err);
    if (rc) return rc;

    struct rtx_store *s = rtx_calloc(1, sizeof *s);
    if (!s) return rtx_err_set(err, RTX_ENOMEM, "store %s: out of memory", opt->path);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->max_age_ms = opt->retention_max_age_ms;
    s->max_bytes = opt->retention_max_bytes;
    s->ok = true;
    s->path = rtx_strdup(opt->path);
    if (!s->path) {
        rc = rtx_err_set(err, RTX_ENOMEM, "store %s: out of memory", opt->path);
        goto fail;
    }
    rc = rtx__store_conn_open(s->path, true, &s->writer, err);
    if (rc) goto fail;
    if (opt->sync_normal) {
        char *msg = NULL;
        if (sqlite3_exec(s->writer->db, "PRAGMA synchronous = NORMAL", NULL, NULL, &msg) !=
            SQLITE_OK) {
            rc = rtx_err_set(err, RTX_EIO, "store %s: synchronous = NORMAL: %s", s->path,
                             msg ? msg : "?");
            sqlite3_free(msg);
            goto fail;
        }
    }
    rc = rtx__store_migrate(s->writer->db, RTX__STORE_SCHEMA_VERSION, err);
    if (rc) {
        rtx_err_prefix(err, "store %s", s->path);
        goto fail;
    }
    /* One read connection now: a file readers cannot open fails here, not on first use. */
    struct rtx__store_conn *reader = NULL;
    rc = rtx__store_reader_get(s, &reader, err);
    if (rc) goto fail;
    rtx__store_reader_put(s, reader);

    int prc = pthread_create(&s->thread, NULL, rtx__store_writer_main, s);
    if (prc != 0) {
        rc = rtx_err_set(err, RTX_EIO, "store %s: cannot start the writer thread: %s", s->path,
                         strerror(prc));
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return 0;
fail:
    free_store(s);
    return rc;
}

void rtx_store_close(struct rtx_store *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    free_store(s);
}

void rtx_store_set_retention(struct rtx_store *s, int64_t max_age_ms, int64_t max_bytes) {
    pthread_mutex_lock(&s->mu);
    s->max_age_ms = max_age_ms > 0 ? max_age_ms : 0;
    s->max_bytes = max_bytes > 0 ? max_bytes : 0;
    pthread_mutex_unlock(&s->mu);
}

static int64_t file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

int rtx_store_stats(struct rtx_store *s, struct rtx_store_stats *st, struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&s->mu);
    st->ok = s->ok;
    memcpy(st->last_error, s->last_error, sizeof st->last_error);
    pthread_mutex_unlock(&s->mu);

    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", s->path);
    st->db_bytes = file_bytes(s->path) + file_bytes(wal);

    struct rtx__store_conn *c = NULL;
    int rc = rtx__store_reader_get(s, &c, err);
    if (rc) return rc;
    int64_t blobs[2] = {0, 0};
    rc = rtx__store_run(c, RTX__SQL_BEGIN, err);
    if (!rc) rc = rtx__store_query_int64(c, RTX__SQL_JOB_COUNT, 1, &st->jobs, err);
    if (!rc) rc = rtx__store_query_int64(c, RTX__SQL_BLOB_TOTALS, 2, blobs, err);
    st->blobs = blobs[0];
    st->blob_bytes = blobs[1];
    rtx__store_reader_put(s, c);
    if (rc) rtx_err_prefix(err, "store %s: stats", s->path);
    return rc;
}
