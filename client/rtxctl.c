/*
 * rtxctl.c - the operator CLI of rtxd: status, devices, pools, lanes, health, config and drain
 * of a daemon; listing, showing, waiting for and cancelling jobs; submitting graph files with
 * .npy or random inputs; writing job outputs as .npy files; listing, loading, unloading and
 * describing served models. Human tables by default, one
 * JSON object or array per command with --json.
 *
 * DESIGN
 * rtxctl talks to rtxd only through librtx (client/rtx.h). It also links rtxd's runtime
 * library, for .npy files and for random inputs of every dtype; runtime tensors and librtx
 * tensors convert without copying (both are dense row-major buffers). Arguments are parsed
 * completely, and local files read, before the daemon is contacted, so usage errors and
 * --help never need a daemon. Commands are rows of one table with their usage and help
 * text; each command parses its own options.
 *
 * Exit codes (documented in --help and docs/rtxctl.md): 0 ok (a waited job succeeded),
 * 1 the daemon answered with an error, 2 usage error, 3/4/5 a waited job failed / was
 * cancelled / expired, 6 the daemon cannot be reached or is unavailable, 7 timeout, 8 local
 * error (a file cannot be read or written).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "client/rtx.h"
#include "runtime/runtime.h"

enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_FAILED = 3,
    EXIT_CANCELLED = 4,
    EXIT_EXPIRED = 5,
    EXIT_UNAVAILABLE = 6,
    EXIT_TIMEOUT = 7,
    EXIT_LOCAL = 8,
};

#define DEFAULT_ADDRESS "127.0.0.1:8001"
#define MAX_TIMEOUT_MS 86400000 /* one day */

struct ctl {
    const char *address;
    int timeout_ms;                     /* per call; 0: librtx's default */
    bool json;
    bool help;
    struct rtx_client *client;          /* connected on first use */
};

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "rtxctl: <message>" to stderr. */
static void msg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rtxctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints a usage error naming the command's help; returns EXIT_USAGE. */
static int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rtxctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see rtxctl %s--help)\n", cmd ? cmd : "");
    va_end(ap);
    return EXIT_USAGE;
}

/* Allocation that cannot fail quietly: rtxctl is a short-lived command. */
static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        msg("out of memory");
        exit(EXIT_LOCAL);
    }
    return p;
}

static void *xrealloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        msg("out of memory");
        exit(EXIT_LOCAL);
    }
    return q;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xcalloc(n, 1), s, n);
}

/* ------------------------------------------------------------------------------------------
 * Formatting: times, sizes, JSON, tables
 * ---------------------------------------------------------------------------------------- */

static int64_t now_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "2026-11-29T20:30:00.123Z" (with_ms) or "2026-11-29 20:30:00"; "-" for 0. */
static const char *fmt_time(int64_t ms, bool with_ms, char *buf, size_t len) {
    if (ms <= 0) return "-";
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) return "?";
    size_t n = strftime(buf, len, with_ms ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm);
    if (with_ms) snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
    return buf;
}

/* "512 B", "1.5 KiB", ... */
static const char *fmt_bytes(int64_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lld B", (long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

/* "3d 4h 5m 6s" */
static const char *fmt_duration(int64_t ms, char *buf, size_t len) {
    int64_t s = ms / 1000;
    int64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
    if (d > 0)
        snprintf(buf, len, "%lldd %lldh %lldm %llds", (long long)d, (long long)h, (long long)m,
                 (long long)(s % 60));
    else if (h > 0)
        snprintf(buf, len, "%lldh %lldm %llds", (long long)h, (long long)m, (long long)(s % 60));
    else if (m > 0)
        snprintf(buf, len, "%lldm %llds", (long long)m, (long long)(s % 60));
    else
        snprintf(buf, len, "%.3fs", (double)ms / 1000.0);
    return buf;
}

/* "f32[2,3]" */
static const char *fmt_shape(enum rtx_client_dtype dt, int ndim, const int64_t *dims,
                             char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "%s[", rtx_client_dtype_name(dt));
    for (int i = 0; i < ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* A JSON writer for one document on stdout: it places the commas. */
struct json {
    int depth;
    bool after_key;
    bool not_first[32];                 /* per depth: an element was written */
};

static void j_sep(struct json *j) {
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (j->not_first[j->depth]) fputs(", ", stdout);
    j->not_first[j->depth] = true;
}

static void j_open(struct json *j, char c) {
    j_sep(j);
    putchar(c);
    j->depth++;
    j->not_first[j->depth] = false;
}

static void j_close(struct json *j, char c) {
    j->depth--;
    putchar(c);
    if (j->depth == 0) putchar('\n');
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not valid. */
static int utf8_seq(const unsigned char *s) {
    int n;
    unsigned cp, min;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2, cp = s[0] & 0x1fu, min = 0x80;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3, cp = s[0] & 0x0fu, min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4, cp = s[0] & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

/* A JSON string: quotes, backslashes and control characters escaped, invalid UTF-8 bytes
 * replaced by U+FFFD. */
static void j_str(struct json *j, const char *str) {
    j_sep(j);
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    putchar('"');
    while (*s) {
        int n = 1;
        switch (*s) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        default:
            if (*s < 0x20 || *s == 0x7f) {
                printf("\\u%04x", *s);
            } else if ((n = utf8_seq(s)) == 0) {
                fputs("\\ufffd", stdout);
                n = 1;
            } else {
                fwrite(s, 1, (size_t)n, stdout);
            }
        }
        s += n;
    }
    putchar('"');
}

static void j_key(struct json *j, const char *key) {
    j_str(j, key);
    fputs(": ", stdout);
    j->after_key = true;
}

static void j_int(struct json *j, int64_t v) {
    j_sep(j);
    printf("%" PRId64, v);
}

static void j_num(struct json *j, double v) {
    j_sep(j);
    if (v != v || v > 1e308 || v < -1e308)
        fputs("null", stdout); /* NaN and infinities are not JSON */
    else
        printf("%.17g", v);
}

static void j_null(struct json *j) {
    j_sep(j);
    fputs("null", stdout);
}

static void j_bool(struct json *j, bool v) {
    j_sep(j);
    fputs(v ? "true" : "false", stdout);
}

static void j_kstr(struct json *j, const char *k, const char *v) {
    j_key(j, k);
    j_str(j, v);
}

static void j_kint(struct json *j, const char *k, int64_t v) {
    j_key(j, k);
    j_int(j, v);
}

static void j_kbool(struct json *j, const char *k, bool v) {
    j_key(j, k);
    j_bool(j, v);
}

static void j_shape(struct json *j, const char *k, int ndim, const int64_t *dims) {
    j_key(j, k);
    j_open(j, '[');
    for (int i = 0; i < ndim; i++)
        j_int(j, dims[i]);
    j_close(j, ']');
}

/* A table printed with aligned columns; cells are added row by row. */
struct table {
    int ncols;
    const char *const *headers;
    char **cells;
    int n_cells, cap_cells;
};

static void table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void table_add(struct table *t, const char *fmt, ...) {
    if (t->n_cells == t->cap_cells) {
        t->cap_cells = t->cap_cells ? t->cap_cells * 2 : 64;
        t->cells = xrealloc(t->cells, sizeof *t->cells * (size_t)t->cap_cells);
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xcalloc((size_t)(n < 0 ? 0 : n) + 1, 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->cells[t->n_cells++] = s;
}

/* Display width of a UTF-8 string (code points; every one counted as one column). */
static int text_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80) w++;
    return w;
}

static void table_print(const struct table *t, int indent) {
    int width[16] = {0};
    for (int c = 0; c < t->ncols && c < 16; c++)
        width[c] = text_width(t->headers[c]);
    for (int i = 0; i < t->n_cells; i++) {
        int w = text_width(t->cells[i]);
        if (w > width[i % t->ncols]) width[i % t->ncols] = w;
    }
    int rows = t->n_cells / t->ncols;
    for (int r = -1; r < rows; r++) {
        printf("%*s", indent, "");
        for (int c = 0; c < t->ncols; c++) {
            const char *s = r < 0 ? t->headers[c] : t->cells[r * t->ncols + c];
            if (c == t->ncols - 1)
                printf("%s\n", s);
            else
                printf("%s%*s", s, width[c] - text_width(s) + 2, "");
        }
    }
}

static void table_free(struct table *t) {
    for (int i = 0; i < t->n_cells; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->n_cells = t->cap_cells = 0;
}

/* "-" for an empty string. */
static const char *dash(const char *s) {
    return s && *s ? s : "-";
}

/* ------------------------------------------------------------------------------------------
 * Errors and connections
 * ---------------------------------------------------------------------------------------- */

/* Reports a failed librtx call (`what` says what was tried) and returns the exit code. */
static int call_failed(struct ctl *ctl, const char *what, const struct rtx_client_err *err) {
    switch (err->code) {
    case RTX_CLIENT_EUNAVAILABLE:
        msg("%s: cannot reach rtxd at %s, or it is unavailable: %s", what, ctl->address,
            err->msg);
        return EXIT_UNAVAILABLE;
    case RTX_CLIENT_ETIMEDOUT:
        msg("%s: deadline exceeded: %s (rtxd at %s; calls time out after %d ms, see --timeout)",
            what, err->msg, ctl->address, rtx_client_timeout_ms(ctl->client));
        return EXIT_TIMEOUT;
    default:
        break;
    }
    if (err->grpc_status >= 0 || err->code == RTX_CLIENT_EPROTO) {
        const char *rid = ctl->client ? rtx_client_last_request_id(ctl->client) : "";
        if (*rid)
            msg("%s: %s [%s; request %s]", what, err->msg, rtx_client_strerror(err->code), rid);
        else
            msg("%s: %s [%s]", what, err->msg, rtx_client_strerror(err->code));
        return EXIT_ERROR;
    }
    msg("%s: %s", what, err->msg);
    return EXIT_LOCAL;
}

/* Connects on first use; returns EXIT_OK or an exit code (message printed). */
static int ctl_connect(struct ctl *ctl) {
    if (ctl->client) return EXIT_OK;
    struct rtx_client_err err;
    if (rtx_client_connect(ctl->address, ctl->timeout_ms, &ctl->client, &err) < 0) {
        msg("cannot use address '%s': %s", ctl->address, err.msg);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Argument helpers
 * ---------------------------------------------------------------------------------------- */

/* Whether argv[*i] is option `name` taking a value ("--name VALUE" or "--name=VALUE").
 * Returns 1 with *val set, 0 when it is not that option, -1 (message printed) when the
 * value is missing. */
static int opt_value(const char *cmd, const char *name, int argc, char **argv, int *i,
                     const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        usage_error(cmd, "option %s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = v;
    return true;
}

/* A duration: "90s", "15m", "2h", "7d", "1h30m", "500ms"; a plain number is seconds. */
static bool parse_duration_ms(const char *s, int64_t *out) {
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
                 {"w", 604800000}};
    if (!s || !*s) return false;
    int64_t total = 0;
    while (*s) {
        if (*s < '0' || *s > '9') return false;
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno != 0 || v > (unsigned long long)INT64_MAX / 604800000ull) return false;
        s = end;
        int64_t unit = 1000;
        if (*s) {
            size_t best = 0;
            for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
                size_t n = strlen(units[k].unit);
                if (strncmp(s, units[k].unit, n) == 0 && n > best &&
                    (s[n] == '\0' || (s[n] >= '0' && s[n] <= '9'))) {
                    best = n;
                    unit = units[k].ms;
                }
            }
            if (best == 0) return false;
            s += best;
        }
        int64_t add = (int64_t)v * unit;
        if (total > INT64_MAX - add) return false;
        total += add;
    }
    *out = total;
    return true;
}

/* Splits "KEY=VALUE" (KEY not empty) into a label whose strings point into arg. The key is
 * copied since arg must not change; *key_mem receives it (free it). */
static bool parse_label(const char *arg, struct rtx_client_label *out, char **key_mem) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return false;
    size_t n = (size_t)(eq - arg);
    char *key = xcalloc(n + 1, 1);
    memcpy(key, arg, n);
    *key_mem = key;
    out->key = key;
    out->value = eq + 1;
    return true;
}

/* Labels given with --label, owning their key copies. */
struct labels {
    struct rtx_client_label *v;
    char **keys;
    int n;
};

static bool labels_add(struct labels *l, const char *arg) {
    l->v = xrealloc(l->v, sizeof *l->v * (size_t)(l->n + 1));
    l->keys = xrealloc(l->keys, sizeof *l->keys * (size_t)(l->n + 1));
    if (!parse_label(arg, &l->v[l->n], &l->keys[l->n])) return false;
    l->n++;
    return true;
}

static void labels_free(struct labels *l) {
    for (int i = 0; i < l->n; i++)
        free(l->keys[i]);
    free(l->keys);
    free(l->v);
}

/* Collects exactly one positional argument (the job id, the graph file); returns 1 when
 * argv[*i] was taken, 0 when it is an option, -1 (message printed) when it is one too many. */
static int positional(const char *cmd, const char *arg, const char **slot, const char *what) {
    if (arg[0] == '-' && arg[1] != '\0') return 0;
    if (*slot) {
        usage_error(cmd, "unexpected argument '%s' (one %s only)", arg, what);
        return -1;
    }
    *slot = arg;
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * Jobs: printing
 * ---------------------------------------------------------------------------------------- */

static void j_job(struct json *j, const struct rtx_client_job *job) {
    j_open(j, '{');
    j_kstr(j, "id", job->id);
    j_kstr(j, "state", rtx_client_job_state_name(job->state));
    j_kstr(j, "reason", job->reason);
    j_kstr(j, "lane", job->lane);
    j_key(j, "labels");
    j_open(j, '{');
    for (int i = 0; i < job->n_labels; i++)
        j_kstr(j, job->labels[i].key, job->labels[i].value);
    j_close(j, '}');
    j_kstr(j, "graph_name", job->graph_name);
    j_kstr(j, "idempotency_key", job->idempotency_key);
    j_kstr(j, "restart_policy", rtx_client_restart_policy_name(job->restart_policy));
    j_kint(j, "created_unix_ms", job->created_unix_ms);
    j_kint(j, "started_unix_ms", job->started_unix_ms);
    j_kint(j, "finished_unix_ms", job->finished_unix_ms);
    j_kint(j, "deadline_unix_ms", job->deadline_unix_ms);
    j_kint(j, "attempts", job->attempts);
    j_key(j, "run_ms");
    j_num(j, job->run_ms);
    j_kint(j, "peak_bytes", job->peak_bytes);
    j_key(j, "outputs");
    j_open(j, '[');
    for (int i = 0; i < job->n_outputs; i++) {
        const struct rtx_client_output_info *o = &job->outputs[i];
        j_open(j, '{');
        j_kstr(j, "name", o->name);
        j_kstr(j, "dtype", rtx_client_dtype_name(o->dtype));
        j_shape(j, "shape", o->ndim, o->dims);
        j_kint(j, "bytes", o->bytes);
        j_kstr(j, "sha256", o->sha256);
        j_close(j, '}');
    }
    j_close(j, ']');
    j_kbool(j, "outputs_available", job->outputs_available);
    j_kstr(j, "device", job->device);
    j_kstr(j, "requested_device", job->requested_device);
    j_kstr(j, "exec_mode", job->exec_mode);
    j_kbool(j, "plan_reused", job->plan_reused);
    j_close(j, '}');
}

/* "a=b,c=d" into buf. */
static const char *fmt_labels(const struct rtx_client_job *job, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < job->n_labels && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", i ? "," : "", job->labels[i].key,
                              job->labels[i].value);
    return dash(buf);
}

static void print_job(const struct rtx_client_job *job) {
    char t1[64], t2[64], b[64], l[1024];
    printf("%-16s %s\n", "id:", job->id);
    printf("%-16s %s\n", "state:", rtx_client_job_state_name(job->state));
    if (*job->reason) printf("%-16s %s\n", "reason:", job->reason);
    printf("%-16s %s\n", "graph:", dash(job->graph_name));
    printf("%-16s %s\n", "lane:", dash(job->lane));
    printf("%-16s %s (asked for %s)\n", "device:", dash(job->device),
           dash(job->requested_device));
    if (*job->exec_mode)
        printf("%-16s %s%s\n", "execution:", job->exec_mode,
               job->plan_reused ? " (plan reused)" : "");
    printf("%-16s %s\n", "labels:", fmt_labels(job, l, sizeof l));
    printf("%-16s %s\n", "idempotency key:", dash(job->idempotency_key));
    printf("%-16s %s\n", "restart policy:", rtx_client_restart_policy_name(job->restart_policy));
    printf("%-16s %s\n", "created:", fmt_time(job->created_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "started:", fmt_time(job->started_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "finished:", fmt_time(job->finished_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "deadline:", fmt_time(job->deadline_unix_ms, true, t2, sizeof t2));
    printf("%-16s %d\n", "attempts:", job->attempts);
    if (job->attempts > 0) {
        printf("%-16s %.3f ms\n", "run time:", job->run_ms);
        printf("%-16s %s\n", "peak memory:", fmt_bytes(job->peak_bytes, b, sizeof b));
    }
    if (job->n_outputs == 0) return;
    printf("outputs%s:\n", job->outputs_available ? "" : " (data deleted by retention)");
    static const char *const headers[] = {"NAME", "SHAPE", "BYTES", "SHA256"};
    struct table t = {.ncols = 4, .headers = headers};
    for (int i = 0; i < job->n_outputs; i++) {
        const struct rtx_client_output_info *o = &job->outputs[i];
        char shape[256];
        table_add(&t, "%s", o->name);
        table_add(&t, "%s", fmt_shape(o->dtype, o->ndim, o->dims, shape, sizeof shape));
        table_add(&t, "%" PRId64, o->bytes);
        table_add(&t, "%s", dash(o->sha256));
    }
    table_print(&t, 2);
    table_free(&t);
}

/* The exit code that reflects a job's final state. */
static int state_exit(enum rtx_client_job_state s) {
    switch (s) {
    case RTX_CLIENT_JOB_SUCCEEDED: return EXIT_OK;
    case RTX_CLIENT_JOB_FAILED: return EXIT_FAILED;
    case RTX_CLIENT_JOB_CANCELLED: return EXIT_CANCELLED;
    case RTX_CLIENT_JOB_EXPIRED: return EXIT_EXPIRED;
    default: return EXIT_ERROR;
    }
}

/* What the Wait callback remembers and prints. */
struct watch {
    bool quiet;                         /* --json: print nothing while waiting */
    enum rtx_client_job_state last;
    bool seen;
};

static void watch_cb(void *ctx, const struct rtx_client_job *job) {
    struct watch *w = ctx;
    if (!w->quiet && (!w->seen || job->state != w->last)) {
        char t[64];
        printf("%s  %s  %s", fmt_time(now_unix_ms(), true, t, sizeof t), job->id,
               rtx_client_job_state_name(job->state));
        if (job->state == RTX_CLIENT_JOB_SUCCEEDED)
            printf(" (run %.3f ms, %d output%s)", job->run_ms, job->n_outputs,
                   job->n_outputs == 1 ? "" : "s");
        if (*job->reason) printf(": %s", job->reason);
        putchar('\n');
        fflush(stdout);
    }
    w->last = job->state;
    w->seen = true;
}

/* Waits for job_id (timeout_ms < 0: forever); *out receives the final job. Returns EXIT_OK
 * when the wait ended (whatever the state) or an exit code (message printed). */
static int wait_job(struct ctl *ctl, const char *job_id, int64_t timeout_ms,
                    struct rtx_client_job **out) {
    struct watch w = {.quiet = ctl->json};
    struct rtx_client_err err;
    int rc = rtx_client_wait_job(ctl->client, job_id, timeout_ms < 0 ? RTX_CLIENT_WAIT_FOREVER
                                                                     : timeout_ms,
                                 watch_cb, &w, out, &err);
    if (rc == RTX_CLIENT_ETIMEDOUT && timeout_ms >= 0) {
        msg("job %s has not finished after %.3f s (state %s)", job_id,
            (double)timeout_ms / 1000.0, w.seen ? rtx_client_job_state_name(w.last) : "unknown");
        return EXIT_TIMEOUT;
    }
    if (rc < 0) {
        char what[160];
        snprintf(what, sizeof what, "wait for job %s", job_id);
        return call_failed(ctl, what, &err);
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Outputs to .npy files
 * ---------------------------------------------------------------------------------------- */

/* The runtime dtype of a librtx dtype (the names are the same). */
static bool runtime_dtype(enum rtx_client_dtype dt, enum rtx_dtype *out) {
    return rtx_dtype_from_name(rtx_client_dtype_name(dt), out) == 0;
}

/* Writes every tensor to DIR/NAME.npy; files[i] receives each path (free them). Returns
 * EXIT_OK or EXIT_LOCAL (message printed). */
static int write_outputs(const char *dir, const struct rtx_client_tensor *ts, int n,
                         char **files) {
    int rc = rtx_make_dirs(dir);
    if (rc < 0) {
        msg("output directory %s: %s", dir, strerror(-rc));
        return EXIT_LOCAL;
    }
    for (int i = 0; i < n; i++) {
        const struct rtx_client_tensor *ct = &ts[i];
        files[i] = rtx_npy_output_path(dir, ct->name ? ct->name : "", files, i);
        if (!files[i]) {
            msg("output %s: out of memory", ct->name);
            return EXIT_LOCAL;
        }
        enum rtx_dtype dt;
        if (!runtime_dtype(ct->dtype, &dt)) {
            msg("output %s: dtype %d cannot be saved", ct->name, (int)ct->dtype);
            return EXIT_LOCAL;
        }
        static char empty_data[1];
        struct rtx_tensor *t = NULL;
        struct rtx_err err = {0};
        if (rtx_tensor_wrap(dt, ct->ndim, ct->dims, ct->data ? ct->data : empty_data, ct->bytes,
                            NULL, NULL, &t, &err) < 0 ||
            rtx_npy_save(files[i], t, &err) < 0) {
            rtx_tensor_unref(t);
            msg("output %s: %s", ct->name, err.msg);
            return EXIT_LOCAL;
        }
        rtx_tensor_unref(t);
    }
    return EXIT_OK;
}

/* Fetches the outputs of job_id and writes them to dir; prints what was written (a JSON
 * array under the current JSON writer when j is not NULL). */
static int fetch_outputs(struct ctl *ctl, const char *job_id, const char *dir, struct json *j) {
    struct rtx_client_tensor *ts = NULL;
    int n = 0;
    struct rtx_client_err err;
    if (rtx_client_get_outputs(ctl->client, job_id, &ts, &n, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "outputs of job %s", job_id);
        return call_failed(ctl, what, &err);
    }
    char **files = xcalloc((size_t)n, sizeof *files);
    int rc = write_outputs(dir, ts, n, files);
    if (rc == EXIT_OK && j) {
        j_open(j, '[');
        for (int i = 0; i < n; i++) {
            j_open(j, '{');
            j_kstr(j, "name", ts[i].name);
            j_kstr(j, "dtype", rtx_client_dtype_name(ts[i].dtype));
            j_shape(j, "shape", ts[i].ndim, ts[i].dims);
            j_kint(j, "bytes", (int64_t)ts[i].bytes);
            j_kstr(j, "file", files[i]);
            j_close(j, '}');
        }
        j_close(j, ']');
    } else if (rc == EXIT_OK) {
        static const char *const headers[] = {"OUTPUT", "SHAPE", "BYTES", "FILE"};
        struct table t = {.ncols = 4, .headers = headers};
        for (int i = 0; i < n; i++) {
            char shape[256];
            table_add(&t, "%s", ts[i].name);
            table_add(&t, "%s", fmt_shape(ts[i].dtype, ts[i].ndim, ts[i].dims, shape,
                                          sizeof shape));
            table_add(&t, "%zu", ts[i].bytes);
            table_add(&t, "%s", files[i]);
        }
        if (n == 0)
            printf("job %s has no outputs\n", job_id);
        else
            table_print(&t, 0);
        table_free(&t);
    }
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    rtx_client_tensors_free(ts, n);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Commands: admin
 * ---------------------------------------------------------------------------------------- */

/* Rejects any argument of a command that takes none. */
static int no_args(const char *cmd, int argc, char **argv) {
    if (argc > 0) return usage_error(cmd, "unexpected argument '%s'", argv[0]);
    return EXIT_OK;
}

static void j_device(struct json *j, const struct rtx_client_device *d) {
    j_open(j, '{');
    j_kint(j, "index", d->index);
    j_kstr(j, "kind", d->kind);
    j_kstr(j, "name", d->name);
    j_kint(j, "threads", d->threads);
    j_kint(j, "sm_count", d->sm_count);
    j_kint(j, "memory_bytes", d->memory_bytes);
    j_kstr(j, "compute_capability", d->compute_capability);
    j_kbool(j, "healthy", d->healthy);
    j_kstr(j, "detail", d->detail);
    j_kint(j, "workers", d->workers);
    j_close(j, '}');
}

static void print_devices(const struct rtx_client_device *devs, int n, int indent) {
    static const char *const headers[] = {"INDEX", "KIND",   "NAME",    "THREADS", "SMS",
                                          "MEMORY", "CC", "HEALTHY", "DETAIL"};
    struct table t = {.ncols = 9, .headers = headers};
    for (int i = 0; i < n; i++) {
        const struct rtx_client_device *d = &devs[i];
        char b[64];
        table_add(&t, "%d", d->index);
        table_add(&t, "%s", dash(d->kind));
        table_add(&t, "%s", dash(d->name));
        table_add(&t, d->threads ? "%d" : "-", d->threads);
        table_add(&t, d->sm_count ? "%d" : "-", d->sm_count);
        table_add(&t, "%s", d->memory_bytes ? fmt_bytes(d->memory_bytes, b, sizeof b) : "-");
        table_add(&t, "%s", dash(d->compute_capability));
        table_add(&t, "%s", d->healthy ? "yes" : "no");
        table_add(&t, "%s", dash(d->detail));
    }
    table_print(&t, indent);
    table_free(&t);
}

static int cmd_status(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("status ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_status *st = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_status(ctl->client, &st, &err) < 0)
        return call_failed(ctl, "status", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "address", ctl->address);
        j_kstr(&j, "version", st->version);
        j_kstr(&j, "build_id", st->build_id);
        j_kint(&j, "uptime_ms", st->uptime_ms);
        j_kbool(&j, "draining", st->draining);
        j_kint(&j, "jobs_succeeded", st->jobs_succeeded);
        j_kint(&j, "jobs_failed", st->jobs_failed);
        j_key(&j, "store");
        j_open(&j, '{');
        j_kbool(&j, "ok", st->store.ok);
        j_kstr(&j, "path", st->store.path);
        j_kint(&j, "db_bytes", st->store.db_bytes);
        j_kint(&j, "jobs", st->store.jobs);
        j_kint(&j, "blob_bytes", st->store.blob_bytes);
        j_kstr(&j, "last_error", st->store.last_error);
        j_close(&j, '}');
        j_key(&j, "devices");
        j_open(&j, '[');
        for (int i = 0; i < st->n_devices; i++)
            j_device(&j, &st->devices[i]);
        j_close(&j, ']');
        j_key(&j, "lanes");
        j_open(&j, '[');
        for (int i = 0; i < st->n_lanes; i++) {
            j_open(&j, '{');
            j_kstr(&j, "lane", st->lanes[i].lane);
            j_kint(&j, "queued", st->lanes[i].queued);
            j_kint(&j, "running", st->lanes[i].running);
            j_close(&j, '}');
        }
        j_close(&j, ']');
        j_close(&j, '}');
    } else {
        char b1[64], b2[64], b3[64];
        printf("rtxd %s (build %s) at %s\n", dash(st->version), dash(st->build_id),
               ctl->address);
        printf("%-9s %s\n", "uptime:", fmt_duration(st->uptime_ms, b1, sizeof b1));
        printf("%-9s %s\n", "state:", st->draining ? "draining" : "serving");
        printf("%-9s %" PRId64 " succeeded, %" PRId64 " failed since start\n", "jobs:",
               st->jobs_succeeded, st->jobs_failed);
        printf("%-9s %s, %s: database %s, %" PRId64 " jobs, outputs %s\n", "store:",
               st->store.ok ? "ok" : "FAILING", dash(st->store.path),
               fmt_bytes(st->store.db_bytes, b2, sizeof b2), st->store.jobs,
               fmt_bytes(st->store.blob_bytes, b3, sizeof b3));
        if (*st->store.last_error) printf("%-9s %s\n", "", st->store.last_error);
        printf("devices:\n");
        print_devices(st->devices, st->n_devices, 2);
        printf("lanes:\n");
        static const char *const headers[] = {"LANE", "QUEUED", "RUNNING"};
        struct table t = {.ncols = 3, .headers = headers};
        for (int i = 0; i < st->n_lanes; i++) {
            table_add(&t, "%s", st->lanes[i].lane);
            table_add(&t, "%d", st->lanes[i].queued);
            table_add(&t, "%d", st->lanes[i].running);
        }
        table_print(&t, 2);
        table_free(&t);
    }
    rtx_client_status_free(st);
    return EXIT_OK;
}

static int cmd_devices(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("devices ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_device_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_devices(ctl->client, &l, &err) < 0)
        return call_failed(ctl, "devices", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '[');
        for (int i = 0; i < l->n_devices; i++)
            j_device(&j, &l->devices[i]);
        j_close(&j, ']');
    } else {
        print_devices(l->devices, l->n_devices, 0);
    }
    rtx_client_device_list_free(l);
    return EXIT_OK;
}

static int cmd_pools(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("pools ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_pool_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_pools(ctl->client, &l, &err) < 0) return call_failed(ctl, "pools", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '[');
        for (int i = 0; i < l->n_pools; i++) {
            const struct rtx_client_pool *p = &l->pools[i];
            j_open(&j, '{');
            j_kstr(&j, "device", p->device);
            j_kstr(&j, "kind", p->kind);
            j_kint(&j, "pools", p->pools);
            j_kint(&j, "allocated_bytes", p->allocated_bytes);
            j_kint(&j, "reserved_bytes", p->reserved_bytes);
            j_kint(&j, "active_bytes", p->active_bytes);
            j_kint(&j, "allocated_peak_bytes", p->allocated_peak_bytes);
            j_kint(&j, "reserved_peak_bytes", p->reserved_peak_bytes);
            j_key(&j, "fragmentation");
            j_num(&j, p->fragmentation);
            j_kint(&j, "alloc_retries", p->alloc_retries);
            j_kint(&j, "ooms", p->ooms);
            j_kint(&j, "cap_bytes", p->cap_bytes);
            j_kint(&j, "free_bytes", p->free_bytes);
            j_kint(&j, "allocs", p->allocs);
            j_kint(&j, "cache_hits", p->cache_hits);
            j_kint(&j, "segments", p->segments);
            j_kbool(&j, "healthy", p->healthy);
            j_kstr(&j, "detail", p->detail);
            j_close(&j, '}');
        }
        j_close(&j, ']');
    } else {
        static const char *const headers[] = {"DEVICE", "ALLOCATED", "RESERVED", "ACTIVE",
                                              "PEAK",   "FRAG",      "RETRIES",  "OOMS",
                                              "CAP",    "HEALTHY"};
        struct table t = {.ncols = 10, .headers = headers};
        for (int i = 0; i < l->n_pools; i++) {
            const struct rtx_client_pool *p = &l->pools[i];
            char b1[64], b2[64], b3[64], b4[64], b5[64];
            bool pooled = p->pools > 0;
            table_add(&t, "%s", dash(p->device));
            table_add(&t, "%s", pooled ? fmt_bytes(p->allocated_bytes, b1, sizeof b1) : "-");
            table_add(&t, "%s", pooled ? fmt_bytes(p->reserved_bytes, b2, sizeof b2) : "-");
            table_add(&t, "%s", pooled ? fmt_bytes(p->active_bytes, b3, sizeof b3) : "-");
            table_add(&t, "%s", fmt_bytes(p->allocated_peak_bytes, b4, sizeof b4));
            table_add(&t, pooled ? "%.3f" : "-", p->fragmentation);
            table_add(&t, pooled ? "%" PRId64 : "-", p->alloc_retries);
            table_add(&t, pooled ? "%" PRId64 : "-", p->ooms);
            table_add(&t, "%s", p->cap_bytes ? fmt_bytes(p->cap_bytes, b5, sizeof b5) : "-");
            table_add(&t, "%s", p->healthy ? "yes" : "no");
        }
        table_print(&t, 0);
        table_free(&t);
        for (int i = 0; i < l->n_pools; i++)
            if (*l->pools[i].detail)
                printf("%s: %s\n", l->pools[i].device, l->pools[i].detail);
    }
    rtx_client_pool_list_free(l);
    return EXIT_OK;
}

/* A duration in µs as "850us", "12.5ms", "3.20s". */
static const char *fmt_us(int64_t us, char *buf, size_t len) {
    if (us < 1000)
        snprintf(buf, len, "%" PRId64 "us", us);
    else if (us < 1000000)
        snprintf(buf, len, "%.1fms", (double)us / 1e3);
    else
        snprintf(buf, len, "%.2fs", (double)us / 1e6);
    return buf;
}

static void j_lane(struct json *j, const struct rtx_client_lane *l) {
    j_open(j, '{');
    j_kstr(j, "device", l->device);
    j_kstr(j, "lane", l->lane);
    j_kint(j, "priority", l->priority);
    j_kint(j, "target_p99_us", l->target_p99_us);
    j_kint(j, "weight", l->weight);
    j_kint(j, "max_queued", l->max_queued);
    j_kstr(j, "on_timeout", l->on_timeout);
    j_kbool(j, "preemptible", l->preemptible);
    j_kint(j, "queued", l->queued);
    j_kint(j, "delayed", l->delayed);
    j_kint(j, "running", l->running);
    j_kint(j, "queued_work_us", l->queued_work_us);
    j_kint(j, "est_delay_us", l->est_delay_us);
    j_key(j, "pressure");
    j_num(j, l->pressure);
    j_kbool(j, "shed", l->shed);
    j_kint(j, "wait_samples", l->wait_samples);
    j_kint(j, "wait_p50_us", l->wait_p50_us);
    j_kint(j, "wait_p90_us", l->wait_p90_us);
    j_kint(j, "wait_p99_us", l->wait_p99_us);
    j_kint(j, "wait_max_us", l->wait_max_us);
    j_kint(j, "admitted", l->admitted);
    j_kint(j, "rejected_full", l->rejected_full);
    j_kint(j, "rejected_deadline", l->rejected_deadline);
    j_kint(j, "rejected_shed", l->rejected_shed);
    j_kint(j, "expired", l->expired);
    j_kint(j, "dispatched", l->dispatched);
    j_kint(j, "completed", l->completed);
    j_kint(j, "failed", l->failed);
    j_kint(j, "cancelled", l->cancelled);
    j_kint(j, "preempted", l->preempted);
    j_close(j, '}');
}

static int cmd_lanes(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("lanes ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_lane_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_lanes(ctl->client, &l, &err) < 0) return call_failed(ctl, "lanes", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "default_lane", l->default_lane);
        j_key(&j, "schedulers");
        j_open(&j, '[');
        for (int i = 0; i < l->n_schedulers; i++) {
            const struct rtx_client_lane_scheduler *s = &l->schedulers[i];
            j_open(&j, '{');
            j_kstr(&j, "device", s->device);
            j_kstr(&j, "kind", s->kind);
            j_kint(&j, "executors", s->executors);
            j_kbool(&j, "healthy", s->healthy);
            j_kint(&j, "running", s->running);
            j_kint(&j, "brownout_level", s->brownout_level);
            j_kint(&j, "brownout_entries", s->brownout_entries);
            j_kint(&j, "brownout_exits", s->brownout_exits);
            j_key(&j, "batch_delay_factor");
            j_num(&j, s->batch_delay_factor);
            j_kint(&j, "cost_keys", s->cost_keys);
            j_close(&j, '}');
        }
        j_close(&j, ']');
        j_key(&j, "lanes");
        j_open(&j, '[');
        for (int i = 0; i < l->n_lanes; i++)
            j_lane(&j, &l->lanes[i]);
        j_close(&j, ']');
        j_close(&j, '}');
    } else {
        static const char *const headers[] = {
            "DEVICE",   "LANE",     "TARGET", "WEIGHT", "QUEUED",    "RUNNING", "WAIT_P50",
            "WAIT_P99", "ADMITTED", "REJECTED", "SHED", "EXPIRED", "COMPLETED", "STATE"};
        struct table t = {.ncols = 14, .headers = headers};
        for (int i = 0; i < l->n_lanes; i++) {
            const struct rtx_client_lane *x = &l->lanes[i];
            char b1[32], b2[32], b3[32];
            table_add(&t, "%s", dash(x->device));
            table_add(&t, "%s", dash(x->lane));
            table_add(&t, "%s", fmt_us(x->target_p99_us, b1, sizeof b1));
            table_add(&t, "%d", x->weight);
            table_add(&t, "%" PRId64 "/%" PRId64, x->queued + x->delayed, x->max_queued);
            table_add(&t, "%" PRId64, x->running);
            table_add(&t, "%s", x->wait_samples ? fmt_us(x->wait_p50_us, b2, sizeof b2) : "-");
            table_add(&t, "%s", x->wait_samples ? fmt_us(x->wait_p99_us, b3, sizeof b3) : "-");
            table_add(&t, "%" PRId64, x->admitted);
            table_add(&t, "%" PRId64, x->rejected_full + x->rejected_deadline);
            table_add(&t, "%" PRId64, x->rejected_shed);
            table_add(&t, "%" PRId64, x->expired);
            table_add(&t, "%" PRId64, x->completed);
            table_add(&t, "%s", x->shed ? "shed" : "open");
        }
        table_print(&t, 0);
        table_free(&t);
        for (int i = 0; i < l->n_schedulers; i++) {
            const struct rtx_client_lane_scheduler *s = &l->schedulers[i];
            bool infer = strcmp(s->kind, "inference") == 0;
            printf("%s: %d %s%s, %" PRId64 " running, brownout %s (level %d; %" PRId64
                   " entries, %" PRId64 " exits), %" PRId64 " learned cost%s\n",
                   s->device, s->executors, infer ? "model instance" : "executor",
                   s->executors == 1 ? "" : "s", s->running,
                   s->brownout_level ? "on" : "off", s->brownout_level, s->brownout_entries,
                   s->brownout_exits, s->cost_keys, s->cost_keys == 1 ? "" : "s");
        }
        printf("default lane: %s\n", l->default_lane);
    }
    rtx_client_lane_list_free(l);
    return EXIT_OK;
}

static int cmd_health(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("health ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_health *h = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_health(ctl->client, &h, &err) < 0) return call_failed(ctl, "health", &err);
    const char *s = h->status == RTX_CLIENT_SERVING       ? "serving"
                    : h->status == RTX_CLIENT_NOT_SERVING ? "not_serving"
                                                          : "unspecified";
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "status", s);
        j_kstr(&j, "detail", h->detail);
        j_close(&j, '}');
    } else {
        printf("%s%s%s\n", s, *h->detail ? ": " : "", h->detail);
    }
    rc = h->status == RTX_CLIENT_SERVING ? EXIT_OK : EXIT_ERROR;
    rtx_client_health_free(h);
    return rc;
}

static int cmd_config(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("config ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_config *cfg = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_config(ctl->client, &cfg, &err) < 0)
        return call_failed(ctl, "config", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '[');
        for (int i = 0; i < cfg->n_settings; i++) {
            const struct rtx_client_setting *s = &cfg->settings[i];
            j_open(&j, '{');
            j_kstr(&j, "name", s->name);
            j_kstr(&j, "value", s->value);
            j_kstr(&j, "origin", s->origin);
            j_kbool(&j, "mutable", s->is_mutable);
            j_kstr(&j, "description", s->description);
            j_close(&j, '}');
        }
        j_close(&j, ']');
    } else {
        static const char *const headers[] = {"SETTING", "VALUE", "ORIGIN", "MUTABLE",
                                              "DESCRIPTION"};
        struct table t = {.ncols = 5, .headers = headers};
        for (int i = 0; i < cfg->n_settings; i++) {
            const struct rtx_client_setting *s = &cfg->settings[i];
            table_add(&t, "%s", s->name);
            table_add(&t, "%s", *s->value ? s->value : "\"\"");
            table_add(&t, "%s", dash(s->origin));
            table_add(&t, "%s", s->is_mutable ? "yes" : "no");
            table_add(&t, "%s", s->description);
        }
        table_print(&t, 0);
        table_free(&t);
    }
    rtx_client_config_free(cfg);
    return EXIT_OK;
}

static int cmd_drain(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "drain ";
    int64_t grace = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = opt_value(cmd, "--grace-ms", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m == 0) return usage_error(cmd, "unexpected argument '%s'", argv[i]);
        if (!parse_i64(v, 0, INT32_MAX, &grace))
            return usage_error(cmd, "--grace-ms wants milliseconds (0..%d), got '%s'",
                               INT32_MAX, v);
    }
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_drain_result r;
    struct rtx_client_err err;
    if (rtx_client_drain(ctl->client, (int)grace, &r, &err) < 0)
        return call_failed(ctl, "drain", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kint(&j, "running", r.running);
        j_kint(&j, "queued", r.queued);
        j_close(&j, '}');
    } else {
        printf("rtxd at %s is draining: %d running job%s may finish", ctl->address, r.running,
               r.running == 1 ? "" : "s");
        if (grace > 0)
            printf(" within %lld ms", (long long)grace);
        else
            printf(" within its drain.grace_ms");
        printf(", %d queued job%s kept for its next start; it exits when done\n", r.queued,
               r.queued == 1 ? "" : "s");
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Commands: jobs
 * ---------------------------------------------------------------------------------------- */

/* Parses "JOB" and nothing else (or the options a caller handles: returns 0 for those). */
static int job_arg(const char *cmd, int argc, char **argv, const char **job_id) {
    for (int i = 0; i < argc; i++) {
        int p = positional(cmd, argv[i], job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!*job_id) return usage_error(cmd, "no job id given");
    return EXIT_OK;
}

static int cmd_jobs_show(struct ctl *ctl, int argc, char **argv) {
    const char *job_id = NULL;
    int rc = job_arg("jobs show ", argc, argv, &job_id);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_job(ctl->client, job_id, &job, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "job %s", job_id);
        return call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        struct json j = {0};
        j_job(&j, job);
    } else {
        print_job(job);
    }
    rtx_client_job_free(job);
    return EXIT_OK;
}

static int cmd_jobs_cancel(struct ctl *ctl, int argc, char **argv) {
    const char *job_id = NULL;
    int rc = job_arg("jobs cancel ", argc, argv, &job_id);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    if (rtx_client_cancel_job(ctl->client, job_id, &job, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "cancel job %s", job_id);
        return call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        struct json j = {0};
        j_job(&j, job);
    } else if (job->state == RTX_CLIENT_JOB_CANCELLED) {
        printf("%s cancelled\n", job->id);
    } else if (rtx_client_job_state_is_terminal(job->state)) {
        printf("%s had already ended (%s): nothing to cancel\n", job->id,
               rtx_client_job_state_name(job->state));
    } else {
        printf("%s is %s: cancel requested, it stops at its next op (rtxctl jobs wait %s)\n",
               job->id, rtx_client_job_state_name(job->state), job->id);
    }
    rtx_client_job_free(job);
    return EXIT_OK;
}

static int cmd_jobs_wait(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "jobs wait ", *job_id = NULL;
    int64_t timeout_s = -1;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = opt_value(cmd, "--timeout-s", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m > 0) {
            if (!parse_i64(v, 1, 86400 * 365, &timeout_s))
                return usage_error(cmd, "--timeout-s wants seconds (1 or more), got '%s'", v);
            continue;
        }
        int p = positional(cmd, argv[i], &job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!job_id) return usage_error(cmd, "no job id given");
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    rc = wait_job(ctl, job_id, timeout_s < 0 ? -1 : timeout_s * 1000, &job);
    if (rc != EXIT_OK) return rc;
    if (ctl->json) {
        struct json j = {0};
        j_job(&j, job);
    }
    rc = state_exit(job->state);
    rtx_client_job_free(job);
    return rc;
}

static int cmd_jobs_list(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "jobs list ";
    enum rtx_client_job_state states[64];
    int n_states = 0;
    struct labels labels = {0};
    int64_t since_ms = -1, after_ms = -1, limit = 0;
    const char *token = NULL;
    bool all = false;
    int rc = EXIT_OK;
    for (int i = 0; i < argc && rc == EXIT_OK; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (strcmp(a, "--all") == 0) {
            all = true;
        } else if ((m = opt_value(cmd, "--state", argc, argv, &i, &v)) != 0) {
            if (m < 0) {
                rc = EXIT_USAGE;
                break;
            }
            char *list = xstrdup(v), *save = NULL;
            for (char *s = strtok_r(list, ",", &save); s && rc == EXIT_OK;
                 s = strtok_r(NULL, ",", &save)) {
                enum rtx_client_job_state st;
                if (rtx_client_job_state_from_name(s, &st) < 0 ||
                    st == RTX_CLIENT_JOB_UNSPECIFIED)
                    rc = usage_error(cmd, "unknown state '%s' (queued, running, succeeded, "
                                          "failed, cancelled, expired)", s);
                else if (n_states == (int)(sizeof states / sizeof states[0]))
                    rc = usage_error(cmd, "too many --state values");
                else
                    states[n_states++] = st;
            }
            free(list);
        } else if ((m = opt_value(cmd, "--label", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!labels_add(&labels, v))
                rc = usage_error(cmd, "--label wants KEY=VALUE, got '%s'", v);
        } else if ((m = opt_value(cmd, "--since", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!parse_duration_ms(v, &since_ms))
                rc = usage_error(cmd, "--since wants a duration like 90s, 15m, 2h, 7d, got '%s'",
                                 v);
        } else if ((m = opt_value(cmd, "--after", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!parse_i64(v, 0, INT64_MAX, &after_ms))
                rc = usage_error(cmd, "--after wants unix milliseconds, got '%s'", v);
        } else if ((m = opt_value(cmd, "--limit", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!parse_i64(v, 1, INT32_MAX, &limit))
                rc = usage_error(cmd, "--limit wants a positive number, got '%s'", v);
        } else if ((m = opt_value(cmd, "--page-token", argc, argv, &i, &v)) != 0) {
            if (m < 0) rc = EXIT_USAGE;
            token = v;
        } else {
            rc = usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (rc == EXIT_OK && since_ms >= 0 && after_ms >= 0)
        rc = usage_error(cmd, "--since and --after exclude each other");
    if (rc == EXIT_OK) rc = ctl_connect(ctl);
    if (rc != EXIT_OK) {
        labels_free(&labels);
        return rc;
    }
    struct rtx_client_list_filter f = {
        .states = states,
        .n_states = n_states,
        .labels = labels.v,
        .n_labels = labels.n,
        .created_after_unix_ms = since_ms >= 0 ? now_unix_ms() - since_ms : after_ms,
    };
    if (f.created_after_unix_ms < 0) f.created_after_unix_ms = 0;
    struct rtx_client_job_list **pages = NULL;
    int n_pages = 0;
    int64_t got = 0;
    const char *next = token ? token : "";
    for (;;) {
        int64_t want = limit ? limit - got : 0;
        f.page_size = want > 1000 ? 1000 : want > 0 ? (int)want : all ? 1000 : 0;
        struct rtx_client_job_list *page = NULL;
        struct rtx_client_err err;
        if (rtx_client_list_jobs(ctl->client, &f, next, &page, &err) < 0) {
            rc = call_failed(ctl, "list jobs", &err);
            break;
        }
        pages = xrealloc(pages, sizeof *pages * (size_t)(n_pages + 1));
        pages[n_pages++] = page;
        got += page->n_jobs;
        next = page->next_page_token;
        if (!*next || (limit && got >= limit) || (!all && !limit) || page->n_jobs == 0) break;
    }
    if (rc == EXIT_OK && ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_key(&j, "jobs");
        j_open(&j, '[');
        for (int p = 0; p < n_pages; p++)
            for (int i = 0; i < pages[p]->n_jobs; i++)
                j_job(&j, &pages[p]->jobs[i]);
        j_close(&j, ']');
        j_kstr(&j, "next_page_token", next);
        j_close(&j, '}');
    } else if (rc == EXIT_OK) {
        static const char *const headers[] = {"ID",     "STATE",  "LANE",  "GRAPH",
                                              "CREATED (UTC)", "RUN MS", "LABELS"};
        struct table t = {.ncols = 7, .headers = headers};
        for (int p = 0; p < n_pages; p++) {
            for (int i = 0; i < pages[p]->n_jobs; i++) {
                const struct rtx_client_job *job = &pages[p]->jobs[i];
                char tm[64], l[1024];
                table_add(&t, "%s", job->id);
                table_add(&t, "%s", rtx_client_job_state_name(job->state));
                table_add(&t, "%s", dash(job->lane));
                table_add(&t, "%s", dash(job->graph_name));
                table_add(&t, "%s", fmt_time(job->created_unix_ms, false, tm, sizeof tm));
                if (job->state == RTX_CLIENT_JOB_SUCCEEDED)
                    table_add(&t, "%.3f", job->run_ms);
                else
                    table_add(&t, "-");
                table_add(&t, "%s", fmt_labels(job, l, sizeof l));
            }
        }
        if (got == 0)
            printf("no jobs\n");
        else
            table_print(&t, 0);
        table_free(&t);
        if (*next) fprintf(stderr, "more jobs: rtxctl jobs list ... --page-token %s\n", next);
    }
    for (int p = 0; p < n_pages; p++)
        rtx_client_job_list_free(pages[p]);
    free(pages);
    labels_free(&labels);
    return rc;
}

static int cmd_outputs(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "outputs ", *job_id = NULL, *dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = opt_value(cmd, "--dir", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m > 0) {
            if (!*v) return usage_error(cmd, "--dir needs a directory");
            dir = v;
            continue;
        }
        int p = positional(cmd, argv[i], &job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!job_id) return usage_error(cmd, "no job id given");
    if (!dir) return usage_error(cmd, "no output directory given (--dir DIR)");
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct json j = {0};
    return fetch_outputs(ctl, job_id, dir, ctl->json ? &j : NULL);
}

/* ------------------------------------------------------------------------------------------
 * Commands: submit
 * ---------------------------------------------------------------------------------------- */

struct input_arg {
    const char *name;                   /* points into the argument; name_len bytes */
    size_t name_len;
    const char *path;
};

struct submit_args {
    const char *graph_path;
    struct input_arg *inputs;
    int n_inputs;
    bool random_inputs;
    uint64_t seed;
    const char *lane;
    struct labels labels;
    int64_t deadline_ms;                /* relative; 0: none */
    const char *idempotency_key;
    enum rtx_client_restart_policy policy;
    const char *device;
    bool wait;
    const char *output_dir;
};

static int parse_submit(int argc, char **argv, struct submit_args *a) {
    const char *cmd = "submit ";
    a->inputs = xcalloc((size_t)argc, sizeof *a->inputs);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int m;
        if (strcmp(arg, "--random-inputs") == 0) {
            a->random_inputs = true;
        } else if (strcmp(arg, "--wait") == 0) {
            a->wait = true;
        } else if ((m = opt_value(cmd, "--input", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1])
                return usage_error(cmd, "--input wants NAME=FILE.npy, got '%s'", v);
            size_t n = (size_t)(eq - v);
            for (int k = 0; k < a->n_inputs; k++)
                if (a->inputs[k].name_len == n && strncmp(a->inputs[k].name, v, n) == 0)
                    return usage_error(cmd, "--input %.*s given twice", (int)n, v);
            a->inputs[a->n_inputs++] = (struct input_arg){v, n, eq + 1};
        } else if ((m = opt_value(cmd, "--seed", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!parse_u64(v, &a->seed))
                return usage_error(cmd, "--seed wants a non-negative integer, got '%s'", v);
        } else if ((m = opt_value(cmd, "--lane", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return usage_error(cmd, "--lane needs a lane name");
            a->lane = v;
        } else if ((m = opt_value(cmd, "--label", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!labels_add(&a->labels, v))
                return usage_error(cmd, "--label wants KEY=VALUE, got '%s'", v);
        } else if ((m = opt_value(cmd, "--deadline-ms", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!parse_i64(v, 1, (int64_t)1 << 40, &a->deadline_ms))
                return usage_error(cmd, "--deadline-ms wants milliseconds from now (1 or "
                                        "more), got '%s'", v);
        } else if ((m = opt_value(cmd, "--idempotency-key", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return usage_error(cmd, "--idempotency-key needs a key");
            a->idempotency_key = v;
        } else if ((m = opt_value(cmd, "--restart-policy", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (strcmp(v, "rerun") == 0)
                a->policy = RTX_CLIENT_RESTART_RERUN;
            else if (strcmp(v, "fail") == 0)
                a->policy = RTX_CLIENT_RESTART_FAIL;
            else
                return usage_error(cmd, "--restart-policy wants rerun or fail, got '%s'", v);
        } else if ((m = opt_value(cmd, "--device", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return usage_error(cmd, "--device needs auto, cpu, cuda or cuda:N");
            a->device = v;
        } else if ((m = opt_value(cmd, "--output-dir", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return usage_error(cmd, "--output-dir needs a directory");
            a->output_dir = v;
            a->wait = true;
        } else {
            int p = positional(cmd, arg, &a->graph_path, "graph file");
            if (p < 0) return EXIT_USAGE;
            if (p == 0) return usage_error(cmd, "unknown option '%s'", arg);
        }
    }
    if (!a->graph_path) return usage_error(cmd, "no graph file given");
    return EXIT_OK;
}

/* Inputs prepared for Submit: runtime tensors (from .npy files or random) and librtx views
 * of them. */
struct bound_inputs {
    int n;
    struct rtx_tensor **tensors;
    struct rtx_client_tensor *views;
    char **names;
};

static void bound_inputs_free(struct bound_inputs *b) {
    for (int i = 0; i < b->n; i++) {
        rtx_tensor_unref(b->tensors[i]);
        free(b->names[i]);
    }
    free(b->tensors);
    free(b->views);
    free(b->names);
}

/* Views runtime tensor t (contiguous) as the librtx tensor named `name`. */
static bool view_tensor(const char *name, const struct rtx_tensor *t,
                        struct rtx_client_tensor *out) {
    memset(out, 0, sizeof *out);
    if (rtx_client_dtype_from_name(rtx_dtype_name(t->dtype), &out->dtype) < 0 ||
        t->ndim > RTX_CLIENT_MAX_DIMS || !rtx_tensor_is_contiguous(t))
        return false;
    out->name = name;
    out->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        out->dims[i] = t->dims[i];
    out->data = rtx_tensor_data(t);
    out->bytes = rtx_tensor_nbytes(t);
    return true;
}

/* Fills a new random tensor for a declared input (dims of -1 become 1). */
static int random_input(const struct rtx_client_value_info *vi, struct rtx_rng *r,
                        struct rtx_tensor **out) {
    if (vi->ndim < 0)
        return usage_error("submit ", "input %s declares no shape: give it with --input %s=FILE",
                           vi->name, vi->name);
    enum rtx_dtype dt;
    if (!runtime_dtype(vi->dtype, &dt)) {
        msg("input %s: dtype %s cannot be generated", vi->name, rtx_client_dtype_name(vi->dtype));
        return EXIT_LOCAL;
    }
    struct rtx_err err = {0};
    if (rtx_tensor_random(r, dt, vi->ndim, vi->dims, out, &err) < 0) {
        msg("input %s: %s", vi->name, err.msg);
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

/* Binds every graph input from --input files or random data. */
static int bind_inputs(const struct submit_args *a, const struct rtx_client_graph *g,
                       struct bound_inputs *b) {
    const char *cmd = "submit ";
    int n = rtx_client_graph_n_inputs(g);
    b->tensors = xcalloc((size_t)n, sizeof *b->tensors);
    b->views = xcalloc((size_t)n, sizeof *b->views);
    b->names = xcalloc((size_t)n, sizeof *b->names);
    b->n = n;
    struct rtx_client_value_info *decl = xcalloc((size_t)n, sizeof *decl);
    int rc = EXIT_OK;
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        struct rtx_client_err err;
        if (rtx_client_graph_input(g, i, &decl[i], &err) < 0) {
            msg("%s: %s", a->graph_path, err.msg);
            rc = EXIT_LOCAL;
        }
    }
    for (int k = 0; k < a->n_inputs && rc == EXIT_OK; k++) {
        const struct input_arg *in = &a->inputs[k];
        int slot = -1;
        for (int i = 0; i < n; i++)
            if (strlen(decl[i].name) == in->name_len &&
                strncmp(decl[i].name, in->name, in->name_len) == 0)
                slot = i;
        if (slot < 0) {
            char list[512] = "";
            size_t pos = 0;
            for (int i = 0; i < n && pos < sizeof list; i++)
                pos += (size_t)snprintf(list + pos, sizeof list - pos, "%s%s", i ? ", " : "",
                                        decl[i].name);
            rc = usage_error(cmd, "--input %.*s: the graph has no input of that name (inputs: %s)",
                             (int)in->name_len, in->name, n ? list : "none");
            break;
        }
        struct rtx_err err = {0};
        if (rtx_npy_load(in->path, &b->tensors[slot], &err) < 0) {
            msg("input %.*s: %s", (int)in->name_len, in->name, err.msg);
            rc = EXIT_LOCAL;
        }
    }
    struct rtx_rng rng;
    rtx_rng_seed(&rng, a->seed);
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        if (b->tensors[i]) continue;
        if (!a->random_inputs) {
            rc = usage_error(cmd, "input %s not given (use --input %s=FILE.npy or "
                                  "--random-inputs)", decl[i].name, decl[i].name);
            break;
        }
        rc = random_input(&decl[i], &rng, &b->tensors[i]);
    }
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        b->names[i] = xstrdup(decl[i].name);
        if (!view_tensor(b->names[i], b->tensors[i], &b->views[i])) {
            msg("input %s: the tensor cannot be sent", decl[i].name);
            rc = EXIT_LOCAL;
        }
    }
    free(decl);
    return rc;
}

static int cmd_submit(struct ctl *ctl, int argc, char **argv) {
    struct submit_args a = {0};
    struct rtx_client_graph *g = NULL;
    struct bound_inputs b = {0};
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    int rc = parse_submit(argc, argv, &a);
    if (rc == EXIT_OK && rtx_client_graph_load(a.graph_path, &g, &err) < 0) {
        msg("%s", err.msg);
        rc = EXIT_LOCAL;
    }
    if (rc == EXIT_OK) rc = bind_inputs(&a, g, &b);
    if (rc == EXIT_OK) rc = ctl_connect(ctl);
    char job_id[RTX_CLIENT_JOB_ID_MAX] = "";
    bool dedup = false;
    if (rc == EXIT_OK) {
        struct rtx_client_submit_options opt = {
            .lane = a.lane,
            .deadline_unix_ms = a.deadline_ms ? now_unix_ms() + a.deadline_ms : 0,
            .labels = a.labels.v,
            .n_labels = a.labels.n,
            .idempotency_key = a.idempotency_key,
            .restart_policy = a.policy,
            .device = a.device,
        };
        if (rtx_client_submit(ctl->client, g, b.views, b.n, &opt, job_id, &dedup, &err) < 0) {
            char what[512];
            snprintf(what, sizeof what, "submit %s", a.graph_path);
            rc = call_failed(ctl, what, &err);
        }
    }
    if (rc == EXIT_OK && !ctl->json) {
        if (dedup)
            printf("%s (an existing job: idempotency key %s)\n", job_id, a.idempotency_key);
        else
            printf("submitted %s\n", job_id);
        fflush(stdout);
    }
    /* Once the job exists its id is printed whatever happens next (with --json: the object
     * has null for a wait or outputs that failed; the exit status says why). */
    if (rc == EXIT_OK && a.wait) {
        rc = wait_job(ctl, job_id, -1, &job);
        if (rc == EXIT_OK) rc = state_exit(job->state);
    }
    bool outputs = job && job->state == RTX_CLIENT_JOB_SUCCEEDED && a.output_dir;
    if (*job_id && ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "job_id", job_id);
        j_kbool(&j, "deduplicated", dedup);
        if (a.wait) {
            j_key(&j, "job");
            if (job)
                j_job(&j, job);
            else
                j_null(&j);
        }
        if (a.output_dir) {
            j_key(&j, "outputs");
            int orc = outputs ? fetch_outputs(ctl, job_id, a.output_dir, &j) : EXIT_OK;
            if (!outputs || orc != EXIT_OK) j_null(&j);
            if (orc != EXIT_OK) rc = orc;
        }
        j_close(&j, '}');
    } else if (outputs) {
        rc = fetch_outputs(ctl, job_id, a.output_dir, NULL);
    }
    rtx_client_job_free(job);
    bound_inputs_free(&b);
    rtx_client_graph_free(g);
    labels_free(&a.labels);
    free(a.inputs);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * The command table and help
 * ---------------------------------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * Models (inference.GRPCInferenceService)
 * ---------------------------------------------------------------------------------------- */

static int cmd_models_list(struct ctl *ctl, int argc, char **argv) {
    bool ready = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--ready") == 0)
            ready = true;
        else
            return usage_error("models list ", "unknown argument '%s'", argv[i]);
    }
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_model_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_models(ctl->client, ready, &l, &err) < 0)
        return call_failed(ctl, "models list", &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '[');
        for (int i = 0; i < l->n_models; i++) {
            const struct rtx_client_model *m = &l->models[i];
            j_open(&j, '{');
            j_kstr(&j, "name", m->name);
            j_kint(&j, "version", m->version);
            j_kstr(&j, "state", m->state);
            j_kstr(&j, "reason", m->reason);
            j_close(&j, '}');
        }
        j_close(&j, ']');
    } else {
        static const char *const headers[] = {"MODEL", "VERSION", "STATE", "REASON"};
        struct table t = {.ncols = 4, .headers = headers};
        for (int i = 0; i < l->n_models; i++) {
            const struct rtx_client_model *m = &l->models[i];
            table_add(&t, "%s", m->name);
            if (m->version > 0)
                table_add(&t, "%" PRId64, m->version);
            else
                table_add(&t, "-");
            table_add(&t, "%s", m->state);
            table_add(&t, "%s", dash(m->reason));
        }
        table_print(&t, 0);
        table_free(&t);
    }
    rtx_client_model_list_free(l);
    return EXIT_OK;
}

/* The MODEL argument of models show/load/unload, with the options the command takes. */
struct model_args {
    const char *name;
    int64_t version;     /* show --version */
    const char *config;  /* load --config FILE */
};

static int model_args_parse(const char *cmd, int argc, char **argv, bool show,
                            struct model_args *a) {
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (show && (m = opt_value(cmd, "--version", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!parse_i64(v, 1, INT64_MAX, &a->version))
                return usage_error(cmd, "--version wants a positive integer, got '%s'", v);
            continue;
        }
        if (!show && strcmp(cmd, "models load ") == 0 &&
            (m = opt_value(cmd, "--config", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            a->config = v;
            continue;
        }
        int p = positional(cmd, argv[i], &a->name, "model name");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!a->name) return usage_error(cmd, "no model name given");
    return EXIT_OK;
}

static void j_model_tensors(struct json *j, const char *key,
                            const struct rtx_client_model_tensor *ts, int n) {
    j_key(j, key);
    j_open(j, '[');
    for (int i = 0; i < n; i++) {
        j_open(j, '{');
        j_kstr(j, "name", ts[i].name);
        j_kstr(j, "datatype", ts[i].datatype);
        j_shape(j, "shape", ts[i].ndim, ts[i].dims);
        j_close(j, '}');
    }
    j_close(j, ']');
}

static void print_model_tensors(const char *kind, const struct rtx_client_model_tensor *ts,
                                int n) {
    for (int i = 0; i < n; i++) {
        char shape[160] = "[";
        size_t k = 1;
        for (int d = 0; d < ts[i].ndim && k < sizeof shape - 24; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, d ? "," : "",
                                  ts[i].dims[d]);
        snprintf(shape + k, sizeof shape - k, "]");
        printf("  %-7s %s %s%s\n", kind, ts[i].name, ts[i].datatype, shape);
    }
}

static int cmd_models_show(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models show ", argc, argv, true, &a);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_model_info *m = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_model(ctl->client, a.name, a.version, &m, &err) < 0) {
        char what[200];
        snprintf(what, sizeof what, "model %s", a.name);
        return call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "name", m->name);
        j_kint(&j, "version", m->version);
        j_kstr(&j, "platform", m->platform);
        j_kbool(&j, "ready", m->ready);
        j_kint(&j, "max_batch_size", m->max_batch_size);
        j_model_tensors(&j, "inputs", m->inputs, m->n_inputs);
        j_model_tensors(&j, "outputs", m->outputs, m->n_outputs);
        j_kbool(&j, "dynamic_batching", m->dynamic_batching);
        j_key(&j, "preferred_batch_sizes");
        j_open(&j, '[');
        for (int i = 0; i < m->n_preferred_batch_sizes; i++)
            j_int(&j, m->preferred_batch_sizes[i]);
        j_close(&j, ']');
        j_kint(&j, "max_queue_delay_us", m->max_queue_delay_us);
        j_kint(&j, "instances", m->instances);
        j_kstr(&j, "instance_kind", m->instance_kind);
        j_kint(&j, "last_inference_unix_ms", m->last_inference_ms);
        j_kint(&j, "inference_count", m->inference_count);
        j_kint(&j, "execution_count", m->execution_count);
        j_kint(&j, "success_count", m->success_count);
        j_kint(&j, "fail_count", m->fail_count);
        j_kint(&j, "success_ns", m->success_ns);
        j_kint(&j, "queue_ns", m->queue_ns);
        j_kint(&j, "compute_infer_ns", m->compute_infer_ns);
        j_close(&j, '}');
    } else {
        char t[64];
        printf("model     %s (version %" PRId64 ", %s)\n", m->name, m->version,
               m->ready ? "ready" : "not ready");
        printf("platform  %s\n", m->platform);
        printf("instances %d %s\n", m->instances, m->instance_kind);
        if (m->max_batch_size > 0)
            printf("batching  max batch size %d, dynamic batching %s", m->max_batch_size,
                   m->dynamic_batching ? "on" : "off");
        else
            printf("batching  none (no batch dimension)");
        if (m->dynamic_batching) {
            printf(" (preferred");
            for (int i = 0; i < m->n_preferred_batch_sizes; i++)
                printf(" %d", m->preferred_batch_sizes[i]);
            printf("%s, max queue delay %" PRId64 " us)", m->n_preferred_batch_sizes ? "" : " -",
                   m->max_queue_delay_us);
        }
        printf("\n");
        print_model_tensors("input", m->inputs, m->n_inputs);
        print_model_tensors("output", m->outputs, m->n_outputs);
        printf("requests  %" PRId64 " succeeded, %" PRId64 " failed, %" PRId64
               " inferences in %" PRId64 " executions\n",
               m->success_count, m->fail_count, m->inference_count, m->execution_count);
        if (m->success_count > 0)
            printf("latency   %.1f us mean (queue %.1f us, compute %.1f us)\n",
                   (double)m->success_ns / 1e3 / (double)m->success_count,
                   (double)m->queue_ns / 1e3 / (double)m->success_count,
                   (double)m->compute_infer_ns / 1e3 / (double)m->success_count);
        printf("last      %s\n",
               m->last_inference_ms ? fmt_time(m->last_inference_ms, true, t, sizeof t) : "-");
    }
    rtx_client_model_info_free(m);
    return EXIT_OK;
}

/* Reads a whole text file (for load --config); NULL with a message on failure. */
static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        msg("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = xcalloc(cap, 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            buf = xrealloc(buf, cap * 2);
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        msg("cannot read %s", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int cmd_models_load(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models load ", argc, argv, false, &a);
    if (rc != EXIT_OK) return rc;
    char *config = NULL;
    if (a.config && !(config = read_text_file(a.config))) return EXIT_LOCAL;
    if ((rc = ctl_connect(ctl)) != EXIT_OK) {
        free(config);
        return rc;
    }
    struct rtx_client_err err;
    char what[200];
    snprintf(what, sizeof what, "load %s", a.name);
    if (rtx_client_load_model(ctl->client, a.name, config, &err) < 0) {
        free(config);
        return call_failed(ctl, what, &err);
    }
    free(config);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "model", a.name);
        j_kstr(&j, "state", "READY");
        j_close(&j, '}');
    } else {
        printf("%s loaded\n", a.name);
    }
    return EXIT_OK;
}

static int cmd_models_unload(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models unload ", argc, argv, false, &a);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_err err;
    char what[200];
    snprintf(what, sizeof what, "unload %s", a.name);
    if (rtx_client_unload_model(ctl->client, a.name, &err) < 0)
        return call_failed(ctl, what, &err);
    if (ctl->json) {
        struct json j = {0};
        j_open(&j, '{');
        j_kstr(&j, "model", a.name);
        j_kstr(&j, "state", "UNAVAILABLE");
        j_close(&j, '}');
    } else {
        printf("%s unloaded\n", a.name);
    }
    return EXIT_OK;
}

static const char exit_help[] =
    "Exit status: 0 ok, 1 the daemon answered with an error, 2 usage error, 6 daemon\n"
    "unreachable or unavailable, 7 timeout, 8 local file error.\n";

static const char wait_exit_help[] =
    "Exit status: 0 the job succeeded, 3 it failed, 4 it was cancelled, 5 it expired;\n"
    "1 the daemon answered with an error (an unknown job), 2 usage error, 6 daemon\n"
    "unreachable or unavailable, 7 timeout, 8 local file error.\n";

struct command {
    const char *group;                  /* "jobs", "models" or NULL */
    const char *name;
    const char *synopsis;               /* arguments after the command words */
    const char *summary;
    const char *help;                   /* the description and options */
    const char *exits;
    int (*run)(struct ctl *ctl, int argc, char **argv);
};

static const struct command commands[] = {
    {NULL, "status", "", "version, uptime, devices, lanes, store and job counters",
     "Shows the daemon's version and build, uptime, whether it drains, the jobs that\n"
     "succeeded and failed since it started, its job store, its devices and the queued and\n"
     "running jobs of each lane. With --json: one object with version, build_id, uptime_ms,\n"
     "draining, jobs_succeeded, jobs_failed, store {...}, devices [...], lanes [...].\n",
     exit_help, cmd_status},
    {NULL, "devices", "", "the daemon's compute devices",
     "Lists the daemon's devices: index, kind (cpu, cuda), name, CPU threads or CUDA\n"
     "multiprocessors, memory, compute capability, health. A GPU that hit a sticky error\n"
     "while running a job is unhealthy, with the error as detail. With --json: an array of\n"
     "objects (also with workers: the job workers on the device).\n",
     exit_help, cmd_devices},
    {NULL, "pools", "", "memory pool statistics per device",
     "Lists the memory pools of each device jobs run on: a CUDA device's caching pool, its\n"
     "pinned host staging pool (DEVICE/pinned), and the CPU (no caching pool: only the\n"
     "largest job's peak). Columns: bytes allocated to callers, reserved from the device,\n"
     "active (allocated + held back for stream events), peak allocated, fragmentation\n"
     "(1 - largest free block / free bytes), allocation retries after freeing the cache,\n"
     "out-of-memory failures, the cap per pool, health. A row sums the pools of the\n"
     "device's workers. With --json: an array of objects with device, kind, pools,\n"
     "allocated_bytes, reserved_bytes, active_bytes, allocated_peak_bytes,\n"
     "reserved_peak_bytes, fragmentation, alloc_retries, ooms, cap_bytes, free_bytes,\n"
     "allocs, cache_hits, segments, healthy, detail.\n",
     exit_help, cmd_pools},
    {NULL, "lanes", "", "SLA lanes of the job schedulers",
     "Lists the SLA lanes of each device's job scheduler (the CPU, then each CUDA device\n"
     "with workers): latency target, weight, depth (queued/bound), running jobs, wait\n"
     "(enqueue to dispatch) p50 and p99, and since start: jobs admitted, rejected (lane\n"
     "full or deadline unmeetable), shed by brownout, expired before running, completed;\n"
     "and whether brownout sheds the lane now. Then each scheduler's executors and brownout\n"
     "state, and the default lane. With --json: {default_lane, schedulers: [{device,\n"
     "executors, healthy, running, brownout_level, brownout_entries, brownout_exits,\n"
     "batch_delay_factor, cost_keys}], lanes: [{device, lane, priority, target_p99_us,\n"
     "weight, max_queued, on_timeout, preemptible, queued, delayed, running, queued_work_us,\n"
     "est_delay_us, pressure, shed, wait_samples, wait_p50_us, wait_p90_us, wait_p99_us,\n"
     "wait_max_us, admitted, rejected_full, rejected_deadline, rejected_shed, expired,\n"
     "dispatched, completed, failed, cancelled, preempted}]}.\n",
     exit_help, cmd_lanes},
    {NULL, "health", "", "whether the daemon serves",
     "Asks whether the daemon serves. Prints serving or not_serving (draining, or a failing\n"
     "store) with a detail. With --json: {\"status\": ..., \"detail\": ...}.\n",
     "Exit status: 0 serving, 1 not serving (or an error answer), 2 usage error, 6 daemon\n"
     "unreachable, 7 timeout.\n",
     cmd_health},
    {NULL, "config", "", "every daemon setting with its value and origin",
     "Lists every daemon setting: name, value, origin (default, file, env, flag, reload),\n"
     "whether SIGHUP may change it, and its description. With --json: an array of objects\n"
     "with name, value, origin, mutable, description.\n",
     exit_help, cmd_config},
    {"jobs", "list",
     "[--state S]... [--label K=V]... [--since DURATION | --after UNIXMS] [--limit N]\n"
     "       [--page-token T] [--all]",
     "jobs, newest first, with filters and pages",
     "Lists jobs, newest first: id, state, lane, graph, creation time (UTC), run time and\n"
     "labels. Without --all and --limit one page is shown (the daemon's page size, 100);\n"
     "when more jobs exist, the token of the next page is printed on stderr.\n"
     "  --state S          only jobs in state S: queued, running, succeeded, failed,\n"
     "                     cancelled, expired (repeatable, or comma-separated: any of them)\n"
     "  --label K=V        only jobs with this label (repeatable: all of them)\n"
     "  --since DURATION   only jobs created within DURATION: 90s, 15m, 2h, 7d, 1h30m\n"
     "                     (a plain number is seconds)\n"
     "  --after UNIXMS     only jobs created after this time (unix milliseconds)\n"
     "  --limit N          at most N jobs (fetching as many pages as that takes)\n"
     "  --page-token T     start at the page a previous listing pointed to\n"
     "  --all              every page\n"
     "With --json: {\"jobs\": [...], \"next_page_token\": \"...\"} (\"\" after the last "
     "page);\neach job as `jobs show --json` prints it.\n",
     exit_help, cmd_jobs_list},
    {"jobs", "show", "JOB", "one job in detail",
     "Shows one job: state and reason, graph, lane, labels, idempotency key, restart policy,\n"
     "times, attempts, run time, peak memory and its outputs (name, shape, bytes, SHA-256).\n"
     "With --json: one object with the fields of rtx.v1.Job (state as a name: queued,\n"
     "running, succeeded, failed, cancelled, expired; times in unix milliseconds, 0 unset).\n",
     exit_help, cmd_jobs_show},
    {"jobs", "wait", "JOB [--timeout-s N]", "follow a job until it ends",
     "Follows a job until it ends, printing its state when the wait starts and at each\n"
     "change; the exit status tells how it ended. With --json nothing is printed while\n"
     "waiting and the final job is printed as `jobs show --json` does.\n"
     "  --timeout-s N      give up after N seconds (exit 7; the job is not cancelled)\n",
     wait_exit_help, cmd_jobs_wait},
    {"jobs", "cancel", "JOB", "cancel a queued or running job",
     "Cancels a job: a queued job is cancelled at once, a running one stops at its next op\n"
     "(follow it with `rtxctl jobs wait JOB`); a job that has ended is left as it is.\n"
     "With --json: the job after the call, as `jobs show --json` prints it.\n",
     exit_help, cmd_jobs_cancel},
    {"models", "list", "[--ready]", "the models of the daemon's repository",
     "Lists the models of the daemon's model repository (KServe v2 RepositoryIndex): name,\n"
     "the version loaded (or that failed), its state (UNKNOWN, LOADING, READY, UNLOADING,\n"
     "UNAVAILABLE) and why it is unavailable.\n"
     "  --ready            only models that are ready\n"
     "With --json: an array of {name, version (0: none), state, reason}.\n",
     exit_help, cmd_models_list},
    {"models", "show", "MODEL [--version N]", "one model: inputs, outputs, batching, stats",
     "Describes a ready model version: platform, instances, max batch size and dynamic\n"
     "batching, inputs and outputs (KServe datatype and shape, -1 for any size), and its\n"
     "statistics (requests, inferences, executions, mean latency).\n"
     "  --version N        that version (default: the newest ready one)\n"
     "With --json: one object with those fields (durations in ns).\n",
     exit_help, cmd_models_show},
    {"models", "load", "MODEL [--config FILE]", "load or reload a model",
     "Loads (or reloads) a model from the daemon's repository and returns once it is ready;\n"
     "a failed reload keeps the version that was serving. Needs models.control=explicit.\n"
     "  --config FILE      use this config.json instead of the repository's\n"
     "With --json: {\"model\", \"state\"}.\n",
     exit_help, cmd_models_load},
    {"models", "unload", "MODEL", "unload a model",
     "Unloads a model: new requests fail at once, requests in flight finish, then its\n"
     "memory is freed. Needs models.control=explicit. With --json: {\"model\", \"state\"}.\n",
     exit_help, cmd_models_unload},
    {NULL, "submit",
     "GRAPH.rtxg [--input NAME=FILE.npy]... [--random-inputs] [--seed N]\n"
     "       [--lane L] [--label K=V]... [--deadline-ms N] [--idempotency-key K]\n"
     "       [--restart-policy rerun|fail] [--device D] [--wait] [--output-dir DIR]",
     "submit a graph file with .npy or random inputs",
     "Submits a graph file (a serialized rtx.v1.Graph) as a job and prints its id. Every\n"
     "graph input needs a value: from an .npy file, or random.\n"
     "  --input NAME=FILE.npy   bind graph input NAME (repeatable)\n"
     "  --random-inputs         fill the other inputs with random data as rtxrun does:\n"
     "                          floats in [-1,1), integers in [0,10), random bools;\n"
     "                          dimensions declared -1 become 1\n"
     "  --seed N                seed of --random-inputs (default 0)\n"
     "  --lane L                the scheduling lane (default: the daemon's default lane)\n"
     "  --label K=V             a label (repeatable)\n"
     "  --deadline-ms N         the job expires unless it starts within N ms from now\n"
     "  --idempotency-key K     a second submit with the same key returns the first job\n"
     "  --restart-policy P      rerun or fail: what a daemon restart does if the job runs\n"
     "  --device D              auto (a healthy GPU, else the CPU), cpu, cuda (any healthy\n"
     "                          GPU) or cuda:N (default: the daemon's setting jobs.device)\n"
     "  --wait                  follow the job until it ends (as jobs wait)\n"
     "  --output-dir DIR        wait, then write each output to DIR/NAME.npy\n"
     "With --json: {\"job_id\", \"deduplicated\", \"job\" (the final job, with --wait),\n"
     "\"outputs\" (the files written, with --output-dir)}.\n",
     "Exit status: 0 submitted (with --wait: the job succeeded), 3 it failed, 4 it was\n"
     "cancelled, 5 it expired; 1 the daemon refused the job (an invalid graph or input),\n"
     "2 usage error, 6 daemon unreachable or unavailable (draining, queue full), 7 timeout,\n"
     "8 a graph or .npy file cannot be read, or an output cannot be written.\n",
     cmd_submit},
    {NULL, "outputs", "JOB --dir DIR", "write a succeeded job's outputs as .npy files",
     "Fetches the outputs of a succeeded job and writes each to DIR/NAME.npy (DIR is\n"
     "created; '/' and ':' in names become '_'; bf16 is written as float32). Prints the\n"
     "files; with --json an array of {name, dtype, shape, bytes, file}.\n",
     exit_help, cmd_outputs},
    {NULL, "drain", "[--grace-ms N]", "stop accepting jobs, finish running ones, exit",
     "Asks the daemon to drain: it stops accepting jobs, lets running jobs finish within the\n"
     "grace period, keeps queued jobs in its journal for its next start, and exits 0.\n"
     "  --grace-ms N       the grace period in ms (default: the daemon's drain.grace_ms)\n"
     "With --json: {\"running\": N, \"queued\": M} as the drain began.\n",
     exit_help, cmd_drain},
};

#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const char global_usage[] =
    "usage: rtxctl [--address HOST:PORT] [--timeout MS] [--json] COMMAND [ARGS]\n";

static void print_top_help(FILE *f) {
    fputs(global_usage, f);
    fputs("Operates an rtxd daemon through its gRPC API (rtx.v1.Jobs, rtx.v1.Admin and, for\n"
          "models, inference.GRPCInferenceService).\n\n"
          "Commands:\n", f);
    for (int i = 0; i < N_COMMANDS; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", commands[i].group ? commands[i].group : "",
                 commands[i].group ? " " : "", commands[i].name);
        fprintf(f, "  %-14s %s\n", name, commands[i].summary);
    }
    fputs("\nGlobal options (before or after the command):\n"
          "  --address HOST:PORT  the daemon (default: $RTXCTL_ADDRESS, else " DEFAULT_ADDRESS
          ")\n"
          "  --timeout MS         deadline of each call in milliseconds (default 10000)\n"
          "  --json               print one JSON object or array instead of tables\n"
          "  --help, -h           this help; `rtxctl COMMAND --help` describes a command\n"
          "\nExit status (the same for every command):\n"
          "  0  success (jobs wait, submit --wait: the job succeeded)\n"
          "  1  the daemon answered with an error (an unknown job, an invalid graph, ...)\n"
          "  2  usage error\n"
          "  3  the waited job failed, 4 it was cancelled, 5 it expired\n"
          "  6  the daemon cannot be reached, or it is unavailable (draining, queue full)\n"
          "  7  timeout: a call's deadline (--timeout) or jobs wait --timeout-s\n"
          "  8  local error: a graph or .npy file cannot be read, an output not written\n",
          f);
}

static void print_command_help(const struct command *c) {
    printf("usage: rtxctl [global options] %s%s%s%s%s\n", c->group ? c->group : "",
           c->group ? " " : "", c->name, *c->synopsis ? " " : "", c->synopsis);
    fputs(c->help, stdout);
    fputs("Global options: --address HOST:PORT, --timeout MS, --json (see rtxctl --help).\n",
          stdout);
    fputs(c->exits, stdout);
}

static void print_group_help(const char *group) {
    printf("usage: rtxctl [global options] %s SUBCOMMAND [ARGS]\n", group);
    printf("Subcommands (rtxctl %s SUBCOMMAND --help describes each):\n", group);
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].group && strcmp(commands[i].group, group) == 0)
            printf("  %s %s %s\n      %s\n", group, commands[i].name, commands[i].synopsis,
                   commands[i].summary);
    fputs(exit_help, stdout);
    if (strcmp(group, "jobs") == 0)
        fputs("jobs wait exits 0 when the job succeeded, 3 failed, 4 cancelled, 5 expired.\n",
              stdout);
}

/* ------------------------------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------------------------- */

/* Takes the global options out of argv (they may stand anywhere); the rest goes to *rest. */
static int parse_globals(int argc, char **argv, struct ctl *ctl, char **rest, int *n_rest) {
    *n_rest = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (strcmp(a, "--") == 0) {
            while (++i < argc)
                rest[(*n_rest)++] = argv[i];
            break;
        }
        if (strcmp(a, "--json") == 0) {
            ctl->json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            ctl->help = true;
        } else if ((m = opt_value(NULL, "--address", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return usage_error(NULL, "--address needs HOST:PORT");
            ctl->address = v;
        } else if ((m = opt_value(NULL, "--timeout", argc, argv, &i, &v)) != 0) {
            int64_t t = 0;
            if (m < 0) return EXIT_USAGE;
            if (!parse_i64(v, 1, MAX_TIMEOUT_MS, &t))
                return usage_error(NULL, "--timeout wants milliseconds (1..%d), got '%s'",
                                   MAX_TIMEOUT_MS, v);
            ctl->timeout_ms = (int)t;
        } else {
            rest[(*n_rest)++] = argv[i];
        }
    }
    return EXIT_OK;
}

static int run(struct ctl *ctl, int n, char **rest) {
    if (n > 0 && strcmp(rest[0], "help") == 0) {
        ctl->help = true;
        rest++;
        n--;
    }
    if (n == 0) {
        if (ctl->help) {
            print_top_help(stdout);
            return EXIT_OK;
        }
        print_top_help(stderr);
        msg("no command given");
        return EXIT_USAGE;
    }
    bool is_group = false;
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].group && strcmp(commands[i].group, rest[0]) == 0) is_group = true;
    if (is_group && (n == 1 || (rest[1][0] == '-' && ctl->help))) {
        if (ctl->help) {
            print_group_help(rest[0]);
            return EXIT_OK;
        }
        char cmd[64];
        snprintf(cmd, sizeof cmd, "%s ", rest[0]);
        return usage_error(cmd, "%s needs a subcommand", rest[0]);
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        const struct command *c = &commands[i];
        bool match = is_group ? c->group && strcmp(c->group, rest[0]) == 0 &&
                                    strcmp(c->name, rest[1]) == 0
                              : !c->group && strcmp(c->name, rest[0]) == 0;
        if (!match) continue;
        if (ctl->help) {
            print_command_help(c);
            return EXIT_OK;
        }
        int skip = is_group ? 2 : 1;
        return c->run(ctl, n - skip, rest + skip);
    }
    if (is_group) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "%s ", rest[0]);
        return usage_error(cmd, "unknown subcommand '%s %s'", rest[0], rest[1]);
    }
    if (rest[0][0] == '-') return usage_error(NULL, "unknown option '%s'", rest[0]);
    return usage_error(NULL, "unknown command '%s'", rest[0]);
}

int main(int argc, char **argv) {
    const char *env = getenv("RTXCTL_ADDRESS");
    struct ctl ctl = {.address = env && *env ? env : DEFAULT_ADDRESS};
    char **rest = xcalloc((size_t)argc, sizeof *rest);
    int n_rest = 0;
    int rc = parse_globals(argc, argv, &ctl, rest, &n_rest);
    if (rc == EXIT_OK) rc = run(&ctl, n_rest, rest);
    if (fflush(stdout) != 0 && rc == EXIT_OK) {
        msg("writing to stdout: %s", strerror(errno));
        rc = EXIT_LOCAL;
    }
    rtx_client_close(ctl.client);
    free(rest);
    return rc;
}
