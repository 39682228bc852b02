/*
 * conn.c - SQLite connections of the store: opening with the store's pragmas, the per-
 * connection statement cache, SQLite error mapping, SHA-256 and binding helpers.
 *
 * DESIGN
 * The writer connection sets WAL mode (persistent in the file), synchronous=FULL (a commit
 * returns after the WAL is fsync'ed), foreign keys and a busy timeout. Read connections are
 * opened read-only, so a bug on a read path cannot write. All connections are opened with
 * SQLITE_OPEN_NOMUTEX: each is used by one thread at a time (the writer thread, or the thread
 * that took it from the pool), and SQLite's own locking keeps the file consistent.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "store/store-impl.h"

#define BUSY_TIMEOUT_MS 5000

static const char *const sql_text[RTX__SQL_COUNT] = {
#define RTX__STORE_SQL_TEXT(name, sql) [RTX__SQL_##name] = sql,
    RTX__STORE_SQL_MAP(RTX__STORE_SQL_TEXT)
#undef RTX__STORE_SQL_TEXT
};

int rtx__store_db_err(struct rtx_err *err, sqlite3 *db, int rc, const char *fmt, ...) {
    int code;
    switch (rc & 0xff) {
    case SQLITE_NOMEM: code = RTX_ENOMEM; break;
    case SQLITE_TOOBIG: code = RTX_ELIMIT; break;
    case SQLITE_CONSTRAINT: code = RTX_EINVAL; break;
    default: code = RTX_EIO; break;
    }
    if (!err) return code;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* sqlite3_errmsg describes the connection's last error; rc may come from a statement
     * that has been reset since (then errmsg could be stale), so prefer it only when the
     * connection agrees on the primary code. */
    bool same = db && (sqlite3_errcode(db) & 0xff) == (rc & 0xff);
    const char *msg = same ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return rtx_err_set(err, code, "%s: %s (sqlite %d)", what, msg, rc);
}

/* Runs one pragma or statement and, when want is not NULL, checks its first text column. */
static int exec_pragma(sqlite3 *db, const char *sql, const char *want, struct rtx_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return rtx__store_db_err(err, db, rc, "%s", sql);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && want) {
        const char *got = (const char *)sqlite3_column_text(st, 0);
        if (!got || strcmp(got, want) != 0) {
            rtx_err_set(err, RTX_EIO, "%s: the database answered '%s', not '%s'", sql,
                        got ? got : "", want);
            sqlite3_finalize(st);
            return RTX_EIO;
        }
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        int code = rtx__store_db_err(err, db, rc, "%s", sql);
        sqlite3_finalize(st);
        return code;
    }
    sqlite3_finalize(st);
    return 0;
}

int rtx__store_conn_open(const char *path, bool writer, struct rtx__store_conn **out,
                         struct rtx_err *err) {
    *out = NULL;
    struct rtx__store_conn *c = rtx_calloc(1, sizeof *c);
    if (!c) return rtx_err_set(err, RTX_ENOMEM, "out of memory opening the store");
    int flags = SQLITE_OPEN_NOMUTEX |
                (writer ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY);
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL);
    if (rc != SQLITE_OK) {
        rtx__store_db_err(err, c->db, rc, "open %s", path);
        goto fail;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
    if (writer) {
        static const struct {
            const char *sql, *want;
        } pragmas[] = {
            {"PRAGMA journal_mode = WAL", "wal"},
            {"PRAGMA synchronous = FULL", NULL},
            {"PRAGMA foreign_keys = ON", NULL},
            {"PRAGMA journal_size_limit = 67108864", NULL}, /* WAL bytes kept after a checkpoint */
        };
        for (size_t i = 0; i < sizeof pragmas / sizeof pragmas[0]; i++) {
            if (exec_pragma(c->db, pragmas[i].sql, pragmas[i].want, err)) {
                rtx_err_prefix(err, "open %s", path);
                goto fail;
            }
        }
    }
    *out = c;
    return 0;
fail:;
    int code = err ? err->code : RTX_EIO;
    rtx__store_conn_close(c);
    return code;
}

void rtx__store_conn_close(struct rtx__store_conn *c) {
    if (!c) return;
    for (int i = 0; i < RTX__SQL_COUNT; i++)
        sqlite3_finalize(c->stmt[i]);
    sqlite3_close_v2(c->db);
    rtx_free(c);
}

void rtx__store_conn_reset(struct rtx__store_conn *c) {
    for (int i = 0; i < RTX__SQL_COUNT; i++)
        if (c->stmt[i]) sqlite3_reset(c->stmt[i]);
}

sqlite3_stmt *rtx__store_stmt(struct rtx__store_conn *c, enum rtx__store_sql id,
                              struct rtx_err *err) {
    sqlite3_stmt *st = c->stmt[id];
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return st;
    }
    int rc = sqlite3_prepare_v3(c->db, sql_text[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
        rtx__store_db_err(err, c->db, rc, "prepare %.60s", sql_text[id]);
        return NULL;
    }
    c->stmt[id] = st;
    return st;
}

int rtx__store_run(struct rtx__store_conn *c, enum rtx__store_sql id, struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, id, err);
    if (!st) return err ? err->code : RTX_EIO;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        int code = rtx__store_db_err(err, c->db, rc, "%s", sql_text[id]);
        sqlite3_reset(st);
        return code;
    }
    sqlite3_reset(st);
    return 0;
}

int rtx__store_query_int64(struct rtx__store_conn *c, enum rtx__store_sql id, int n, int64_t *out,
                           struct rtx_err *err) {
    sqlite3_stmt *st = rtx__store_stmt(c, id, err);
    if (!st) return err ? err->code : RTX_EIO;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int code = rtx__store_db_err(err, c->db, rc, "%.60s", sql_text[id]);
        sqlite3_reset(st);
        return code;
    }
    for (int i = 0; i < n; i++)
        out[i] = sqlite3_column_int64(st, i);
    sqlite3_reset(st);
    return 0;
}

int rtx__store_sha256_hex(const void *data, size_t len, char hex[65], struct rtx_err *err) {
    static const unsigned char empty;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_Digest(len ? data : &empty, len, md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32)
        return rtx_err_set(err, RTX_EIO, "SHA-256 failed (OpenSSL)");
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
    return 0;
}

int rtx__store_bind_blob(sqlite3_stmt *st, int i, const void *data, size_t len) {
    if (len == 0) return sqlite3_bind_zeroblob(st, i, 0);
    return sqlite3_bind_blob64(st, i, data, (sqlite3_uint64)len, SQLITE_STATIC);
}

int rtx__store_bind_text(sqlite3_stmt *st, int i, const char *s) {
    return sqlite3_bind_text(st, i, s ? s : "", -1, SQLITE_STATIC);
}
