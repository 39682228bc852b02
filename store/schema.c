/*
 * schema.c - the store's schema as a list of migration steps and the code that applies them.
 *
 * DESIGN
 * Step N brings a database from version N-1 to N. Each step runs in its own IMMEDIATE
 * transaction that also records the step in schema_version (version, time, description), so a
 * crash between steps leaves a database at a valid older version that the next open
 * continues from; the version is read again inside the transaction, so two processes opening
 * the same file at once apply each step once. A file whose version is newer than the steps
 * this build knows is refused: its meaning is unknown to this code.
 * Steps are append-only: once released, a step's SQL never changes; a change of schema is a
 * new step.
 *
 * Tables: jobs (one row per job, every rtx_job_info field), job_labels (ordered key/value
 * pairs, indexed for filtering), job_requests (the serialized SubmitRequest, apart from the
 * row so lists and gets never read it), blobs (output bytes keyed by their SHA-256) and
 * job_outputs (per job and position: name, dtype, dims, bytes, digest, and `blob`, the
 * reference to blobs that retention clears). Step 3 adds the placement columns: jobs.device
 * (where the job runs or ran, "" until it starts) and jobs.requested_device (what the submitter
 * asked for, the default applied; "" for jobs journaled before step 3, read as "auto").
 */
#include <assert.h>
#include <string.h>
#include <time.h>

#include "store/store-impl.h"

struct migration {
    int version;
    const char *description;
    const char *sql;
};

static const struct migration migrations[] = {
    {1, "job journal: jobs, labels, requests",
     "CREATE TABLE jobs ("
     "  id TEXT PRIMARY KEY NOT NULL,"
     "  state INTEGER NOT NULL CHECK (state BETWEEN 1 AND 6),"
     "  reason TEXT NOT NULL,"
     "  lane TEXT NOT NULL,"
     "  graph_name TEXT NOT NULL,"
     "  idempotency_key TEXT NOT NULL,"
     "  restart_policy INTEGER NOT NULL,"
     "  created_ms INTEGER NOT NULL,"
     "  started_ms INTEGER NOT NULL,"
     "  finished_ms INTEGER NOT NULL,"
     "  deadline_ms INTEGER NOT NULL,"
     "  attempts INTEGER NOT NULL,"
     "  run_ms REAL NOT NULL,"
     "  peak_bytes INTEGER NOT NULL);"
     "CREATE UNIQUE INDEX jobs_idempotency_key ON jobs(idempotency_key)"
     "  WHERE idempotency_key != '';"
     "CREATE INDEX jobs_created ON jobs(created_ms, id);"
     "CREATE INDEX jobs_unfinished ON jobs(created_ms, id) WHERE state IN (1, 2);"
     "CREATE TABLE job_labels ("
     "  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
     "  position INTEGER NOT NULL,"
     "  key TEXT NOT NULL,"
     "  value TEXT NOT NULL,"
     "  PRIMARY KEY (job_id, position)) WITHOUT ROWID;"
     "CREATE INDEX job_labels_key_value ON job_labels(key, value);"
     "CREATE TABLE job_requests ("
     "  job_id TEXT PRIMARY KEY NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
     "  data BLOB NOT NULL);"},
    {2, "outputs: content-addressed blobs and job outputs",
     "ALTER TABLE jobs ADD COLUMN outputs_available INTEGER NOT NULL DEFAULT 1;"
     "CREATE INDEX jobs_retention ON jobs(finished_ms, id)"
     "  WHERE state = 3 AND outputs_available = 1;"
     "CREATE TABLE blobs ("
     "  sha256 TEXT PRIMARY KEY NOT NULL,"
     "  bytes INTEGER NOT NULL,"
     "  data BLOB NOT NULL);"
     "CREATE TABLE job_outputs ("
     "  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
     "  position INTEGER NOT NULL,"
     "  name TEXT NOT NULL,"
     "  dtype TEXT NOT NULL,"
     "  dims TEXT NOT NULL,"
     "  bytes INTEGER NOT NULL,"
     "  sha256 TEXT NOT NULL,"
     "  blob TEXT REFERENCES blobs(sha256),"
     "  PRIMARY KEY (job_id, position)) WITHOUT ROWID;"
     "CREATE INDEX job_outputs_blob ON job_outputs(blob) WHERE blob IS NOT NULL;"},
    {3, "placement: the device a job asked for and the device it ran on",
     "ALTER TABLE jobs ADD COLUMN device TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE jobs ADD COLUMN requested_device TEXT NOT NULL DEFAULT '';"},
    {4, "scheduler: learned run-time averages per device and cost key",
     "CREATE TABLE sched_costs ("
     "  device TEXT NOT NULL,"
     "  cost_key INTEGER NOT NULL,"
     "  ema_ns INTEGER NOT NULL CHECK (ema_ns > 0),"
     "  samples INTEGER NOT NULL,"
     "  updated_ms INTEGER NOT NULL,"
     "  PRIMARY KEY (device, cost_key)) WITHOUT ROWID;"},
    {5, "failure codes: the gRPC status name of a failed job's failure",
     "ALTER TABLE jobs ADD COLUMN failure_code TEXT NOT NULL DEFAULT '';"},
};
static_assert(sizeof migrations / sizeof migrations[0] == RTX__STORE_SCHEMA_VERSION,
              "one migration step per schema version");

static int exec_sql(sqlite3 *db, const char *sql, const char *what, struct rtx_err *err) {
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return rtx__store_db_err(err, db, rc, "%s", what);
    return 0;
}

int rtx__store_schema_version(sqlite3 *db, struct rtx_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT COUNT(*) FROM sqlite_master "
                                "WHERE type = 'table' AND name = 'schema_version'",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int code = rtx__store_db_err(err, db, rc, "read the schema version");
        sqlite3_finalize(st);
        return code;
    }
    bool exists = sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (!exists) return 0;
    st = NULL;
    rc = sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(version), 0) FROM schema_version", -1, &st,
                            NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int code = rtx__store_db_err(err, db, rc, "read the schema version");
        sqlite3_finalize(st);
        return code;
    }
    int v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Applies one step inside its own transaction (nothing when another connection did). */
static int apply_step(sqlite3 *db, const struct migration *m, struct rtx_err *err) {
    int rc = exec_sql(db, "BEGIN IMMEDIATE", "begin", err);
    if (rc) return rc;
    int v = rtx__store_schema_version(db, err);
    if (v < 0) {
        rc = v;
        goto fail;
    }
    if (v >= m->version) return exec_sql(db, "COMMIT", "commit", err);
    rc = exec_sql(db,
                  "CREATE TABLE IF NOT EXISTS schema_version ("
                  "  version INTEGER PRIMARY KEY NOT NULL,"
                  "  applied_ms INTEGER NOT NULL,"
                  "  description TEXT NOT NULL)",
                  "create schema_version", err);
    if (rc) goto fail;
    rc = exec_sql(db, m->sql, "apply", err);
    if (rc) goto fail;
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db,
                                 "INSERT INTO schema_version(version, applied_ms, description) "
                                 "VALUES(?1, ?2, ?3)",
                                 -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int(st, 1, m->version);
        sqlite3_bind_int64(st, 2, now_ms());
        sqlite3_bind_text(st, 3, m->description, -1, SQLITE_STATIC);
        src = sqlite3_step(st);
    }
    if (src != SQLITE_DONE) {
        rc = rtx__store_db_err(err, db, src, "record the version");
        sqlite3_finalize(st);
        goto fail;
    }
    sqlite3_finalize(st);
    rc = exec_sql(db, "COMMIT", "commit", err);
    if (rc) goto fail;
    return 0;
fail:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int rtx__store_migrate(sqlite3 *db, int target, struct rtx_err *err) {
    struct rtx_err local_err;
    if (!err) err = &local_err; /* internal code always has an rtx_err to fill */
    if (target < 0 || target > RTX__STORE_SCHEMA_VERSION)
        return rtx_err_set(err, RTX_EINVAL, "no schema version %d (this build knows 1..%d)",
                           target, RTX__STORE_SCHEMA_VERSION);
    int v = rtx__store_schema_version(db, err);
    if (v < 0) return v;
    if (v > RTX__STORE_SCHEMA_VERSION)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "database schema version %d is newer than this rtxd supports (%d); "
                           "run a newer rtxd or point the store at another file",
                           v, RTX__STORE_SCHEMA_VERSION);
    for (int i = v; i < target; i++) {
        int rc = apply_step(db, &migrations[i], err);
        if (rc) {
            rtx_err_prefix(err, "migrate the schema from version %d to %d (%s)", i,
                           migrations[i].version, migrations[i].description);
            return rc;
        }
    }
    return 0;
}
