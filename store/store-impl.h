/*
 * store-impl.h - internals shared by the store's own files and its tests: the store handle,
 * connections with their prepared statements, the write queue, schema migrations, helpers.
 *
 * DESIGN
 * Every connection (the writer's and each pooled read-only one) owns a table of prepared
 * statements, one per entry of RTX__STORE_SQL_MAP, prepared on first use and kept for the
 * life of the connection. A statement is reset when it is taken (rtx__store_stmt) and every
 * statement of a connection is reset before its transaction ends and before it goes back to
 * the pool, so an idle connection never holds a read snapshot that would stop WAL
 * checkpoints.
 * A write is a request (an exec function and its arguments) on the store's queue; the writer
 * thread runs requests inside a transaction and signals each caller, which waits on its own
 * condition variable (writer.c).
 */
#ifndef RTX_STORE_IMPL_H
#define RTX_STORE_IMPL_H

#include <pthread.h>
#include <sqlite3.h>

#include "store/store.h"

/* Schema version this build creates and reads (schema.c holds one step per version). */
#define RTX__STORE_SCHEMA_VERSION 5

/* The columns of a job row, in the order rtx__store_job_from_row reads them. */
#define RTX__STORE_JOB_COLS                                                                     \
    "id, state, reason, lane, graph_name, idempotency_key, restart_policy, created_ms, "        \
    "started_ms, finished_ms, deadline_ms, attempts, run_ms, peak_bytes, outputs_available, "   \
    "device, requested_device, failure_code"

/* Retention visits candidate jobs in chunks of this many rows. */
#define RTX__STORE_RETENTION_CHUNK 64

/* Every statement a connection may prepare once and reuse: {name, SQL}. */
#define RTX__STORE_SQL_MAP(X)                                                                   \
    X(BEGIN, "BEGIN")                                                                           \
    X(BEGIN_IMMEDIATE, "BEGIN IMMEDIATE")                                                       \
    X(COMMIT, "COMMIT")                                                                         \
    X(ROLLBACK, "ROLLBACK")                                                                     \
    X(SAVEPOINT, "SAVEPOINT w")                                                                 \
    X(RELEASE, "RELEASE w")                                                                     \
    X(ROLLBACK_TO, "ROLLBACK TO w")                                                             \
    X(JOB_BY_KEY, "SELECT id FROM jobs WHERE idempotency_key = ?1 AND idempotency_key != ''")  \
    X(JOB_INSERT,                                                                               \
      "INSERT INTO jobs(id, state, reason, lane, graph_name, idempotency_key, restart_policy, " \
      "created_ms, started_ms, finished_ms, deadline_ms, attempts, run_ms, peak_bytes, "        \
      "device, requested_device) "                                                              \
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)")          \
    X(LABEL_INSERT, "INSERT INTO job_labels(job_id, position, key, value) VALUES(?1,?2,?3,?4)") \
    X(REQUEST_INSERT, "INSERT INTO job_requests(job_id, data) VALUES(?1, ?2)")                  \
    X(JOB_STATE, "SELECT state, started_ms, finished_ms, attempts FROM jobs WHERE id = ?1")     \
    X(JOB_SET_STATE,                                                                            \
      "UPDATE jobs SET state = ?2, reason = COALESCE(?3, reason), started_ms = ?4, "            \
      "finished_ms = ?5, attempts = ?6, failure_code = COALESCE(?7, failure_code) "             \
      "WHERE id = ?1")                                                                          \
    X(JOB_SET_DEVICE, "UPDATE jobs SET device = ?2 WHERE id = ?1")                              \
    X(JOB_SUCCEED,                                                                              \
      "UPDATE jobs SET state = 3, finished_ms = ?2, run_ms = ?3, peak_bytes = ?4, "             \
      "outputs_available = 1 WHERE id = ?1")                                                    \
    X(BLOB_INSERT,                                                                              \
      "INSERT INTO blobs(sha256, bytes, data) VALUES(?1, ?2, ?3) "                              \
      "ON CONFLICT(sha256) DO NOTHING")                                                         \
    X(OUTPUT_INSERT,                                                                            \
      "INSERT INTO job_outputs(job_id, position, name, dtype, dims, bytes, sha256, blob) "      \
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)")                                                 \
    X(RETENTION_CANDIDATES,                                                                     \
      "SELECT id, finished_ms FROM jobs WHERE state = 3 AND outputs_available = 1 "             \
      "AND (finished_ms, id) > (?1, ?2) AND finished_ms < ?3 "                                  \
      "AND EXISTS (SELECT 1 FROM job_outputs o WHERE o.job_id = jobs.id) "                      \
      "ORDER BY finished_ms, id LIMIT ?4")                                                      \
    X(RETENTION_JOB_BLOBS,                                                                      \
      "SELECT DISTINCT blob FROM job_outputs WHERE job_id = ?1 AND blob IS NOT NULL")           \
    X(RETENTION_UNLINK, "UPDATE job_outputs SET blob = NULL WHERE job_id = ?1")                 \
    X(RETENTION_MARK, "UPDATE jobs SET outputs_available = 0 WHERE id = ?1")                    \
    X(RETENTION_BLOB_DELETE,                                                                    \
      "DELETE FROM blobs WHERE sha256 = ?1 "                                                    \
      "AND NOT EXISTS (SELECT 1 FROM job_outputs WHERE blob = ?1) RETURNING bytes")             \
    X(BLOB_SWEEP,                                                                               \
      "DELETE FROM blobs WHERE NOT EXISTS "                                                     \
      "(SELECT 1 FROM job_outputs o WHERE o.blob = blobs.sha256)")                              \
    X(BLOB_TOTALS, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM blobs")                       \
    X(JOB_COUNT, "SELECT COUNT(*) FROM jobs")                                                   \
    X(JOB_GET, "SELECT " RTX__STORE_JOB_COLS " FROM jobs WHERE id = ?1")                        \
    X(JOB_LABELS, "SELECT key, value FROM job_labels WHERE job_id = ?1 ORDER BY position")      \
    X(JOB_OUTPUTS,                                                                              \
      "SELECT name, dtype, dims, bytes, sha256 FROM job_outputs WHERE job_id = ?1 "             \
      "ORDER BY position")                                                                      \
    X(OUTPUT_DATA,                                                                              \
      "SELECT o.name, o.dtype, o.dims, o.bytes, o.sha256, b.data FROM job_outputs o "           \
      "LEFT JOIN blobs b ON b.sha256 = o.blob WHERE o.job_id = ?1 ORDER BY o.position")         \
    X(JOB_REQUEST, "SELECT data FROM job_requests WHERE job_id = ?1")                           \
    X(JOB_UNFINISHED,                                                                           \
      "SELECT " RTX__STORE_JOB_COLS " FROM jobs WHERE state IN (1, 2) "                         \
      "ORDER BY created_ms, id")                                                                \
    X(COST_PUT,                                                                                 \
      "INSERT INTO sched_costs(device, cost_key, ema_ns, samples, updated_ms) "                 \
      "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(device, cost_key) DO UPDATE SET "                 \
      "ema_ns = ?3, samples = ?4, updated_ms = ?5")                                             \
    X(COST_LIST, "SELECT device, cost_key, ema_ns, samples FROM sched_costs "                   \
                 "ORDER BY device, cost_key")

enum rtx__store_sql {
#define RTX__STORE_SQL_ENUM(name, sql) RTX__SQL_##name,
    RTX__STORE_SQL_MAP(RTX__STORE_SQL_ENUM)
#undef RTX__STORE_SQL_ENUM
    RTX__SQL_COUNT
};

/* A database connection with its statement cache. */
struct rtx__store_conn {
    sqlite3 *db;
    sqlite3_stmt *stmt[RTX__SQL_COUNT]; /* NULL until first use */
    struct rtx__store_conn *next;       /* in the store's idle read pool */
};

/* A queued write. exec runs on the writer thread inside a transaction (it must not commit);
 * it returns 0 or a negative code with err filled, and may be run again after a rollback,
 * so it writes its results only through args and from scratch each time. */
struct rtx__store_wreq {
    int (*exec)(struct rtx__store_conn *c, void *args, struct rtx_err *err);
    void *args;
    char what[80];                      /* for messages: "insert job j..." */
    int rc;
    struct rtx_err err;
    bool done;                          /* set by the writer under the store's mutex */
    pthread_cond_t cv;                  /* signalled when done */
    struct rtx__store_wreq *next;
};

#define RTX__STORE_POOL_MAX 8           /* idle read connections kept */
#define RTX__STORE_BATCH_MAX 64         /* requests per writer transaction */

struct rtx_store {
    char *path;
    struct rtx__store_conn *writer;     /* owned by the writer thread once it runs */
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;                 /* guards the fields below */
    pthread_cond_t wake;                /* the writer waits here for requests */
    struct rtx__store_wreq *head, *tail;
    bool stopping;
    int64_t max_age_ms;                 /* retention, 0 = keep */
    int64_t max_bytes;                  /* retention, bytes, 0 = unlimited */
    bool ok;                            /* the last write reached the disk */
    char last_error[256];

    pthread_mutex_t pool_mu;            /* guards idle, n_idle */
    struct rtx__store_conn *idle;
    int n_idle;
};

/* conn.c: connections, statements, errors, hashing */
int rtx__store_conn_open(const char *path, bool writer, struct rtx__store_conn **out,
                         struct rtx_err *err);
void rtx__store_conn_close(struct rtx__store_conn *c); /* NULL: no-op */
/* Resets every cached statement (ends the reads they hold). */
void rtx__store_conn_reset(struct rtx__store_conn *c);
/* The cached statement `id`, reset and with cleared bindings; NULL with err filled. */
sqlite3_stmt *rtx__store_stmt(struct rtx__store_conn *c, enum rtx__store_sql id,
                              struct rtx_err *err);
/* Runs a statement without results (BEGIN, COMMIT, ...); 0 or a code with err filled. */
int rtx__store_run(struct rtx__store_conn *c, enum rtx__store_sql id, struct rtx_err *err);
/* Runs a query without parameters that returns one row; reads its first n integer columns. */
int rtx__store_query_int64(struct rtx__store_conn *c, enum rtx__store_sql id, int n,
                           int64_t *out, struct rtx_err *err);
/* Fills err for SQLite result rc: "<what>: <sqlite3_errmsg>" with RTX_ENOMEM for
 * SQLITE_NOMEM, RTX_ELIMIT for SQLITE_TOOBIG, RTX_EINVAL for constraint violations and
 * RTX_EIO for everything else. Returns the code. */
int rtx__store_db_err(struct rtx_err *err, sqlite3 *db, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Lower-case hex SHA-256 of data (OpenSSL EVP). 0 or RTX_EIO. */
int rtx__store_sha256_hex(const void *data, size_t len, char hex[65], struct rtx_err *err);
/* Binds data as a blob (an empty blob, never NULL, when len is 0). */
int rtx__store_bind_blob(sqlite3_stmt *st, int i, const void *data, size_t len);
/* Binds a string; NULL binds "". */
int rtx__store_bind_text(sqlite3_stmt *st, int i, const char *s);

/* Read connections (store.c): take one from the pool (or open one), give it back. */
int rtx__store_reader_get(struct rtx_store *s, struct rtx__store_conn **out,
                          struct rtx_err *err);
void rtx__store_reader_put(struct rtx_store *s, struct rtx__store_conn *c);

/* schema.c: brings db (a writable connection) to schema version `target` (<= the known
 * version) one step per transaction; RTX_EUNSUPPORTED when the file is newer than this build
 * knows. */
int rtx__store_migrate(sqlite3 *db, int target, struct rtx_err *err);
/* The schema version recorded in db (0 for an empty database), or a negative code. */
int rtx__store_schema_version(sqlite3 *db, struct rtx_err *err);

/* writer.c: the writer thread and the queue. */
void *rtx__store_writer_main(void *arg);
/* Queues r and waits until the writer has run it; returns r->rc, copying r->err to err. */
int rtx__store_submit(struct rtx_store *s, struct rtx__store_wreq *r, struct rtx_err *err);

/* read.c: a job row of RTX__STORE_JOB_COLS (from column 0) into *out (strings copied). */
int rtx__store_job_from_row(sqlite3_stmt *st, struct rtx_job_info *out, struct rtx_err *err);

#endif /* RTX_STORE_IMPL_H */
