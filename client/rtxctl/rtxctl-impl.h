/*
 * rtxctl-impl.h - what rtxctl's own files share: the invocation (struct ctl) and exit codes,
 * messages and allocation (main.c), argument helpers (args.c), the output module: tables,
 * human formats and JSON documents built with jansson (output.c), and the command functions
 * that main.c's command table lists (admin.c, generation.c, jobs.c, submit.c, models.c,
 * generate.c).
 *
 * DESIGN
 * rtxctl is a program, not a library: nothing here is exported, so the cross-file names carry
 * a short ctl_ prefix instead of rtx__. A command parses its own options, contacts the daemon
 * through librtx (client/rtx.h), and prints either human text (aligned tables, key: value
 * lines) or exactly one JSON document: it builds the document as a jansson tree with the
 * ctl_json_* helpers, which never return NULL (out of memory exits, as every allocation of
 * this short-lived command does), and hands it to ctl_json_print.
 */
#ifndef RTXCTL_IMPL_H
#define RTXCTL_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/rtx.h"

/* Exit codes (documented in --help and docs/rtxctl.md). */
enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,       /* the daemon answered with an error */
    EXIT_USAGE = 2,
    EXIT_FAILED = 3,      /* a waited job failed */
    EXIT_CANCELLED = 4,   /* ... was cancelled */
    EXIT_EXPIRED = 5,     /* ... expired */
    EXIT_UNAVAILABLE = 6, /* the daemon cannot be reached or is unavailable */
    EXIT_TIMEOUT = 7,
    EXIT_LOCAL = 8,       /* a local file cannot be read or written */
};

/* One invocation: the global options and the connection. */
struct ctl {
    const char *address;
    int timeout_ms;                     /* per call; 0: librtx's default */
    bool json;
    bool help;
    struct rtx_client *client;          /* connected on first use */
};

/* ---- main.c: messages, allocation, errors and the connection ---------------------------- */

/* Prints "rtxctl: <message>" to stderr. */
void ctl_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints a usage error naming the help of `cmd` ("jobs list ", or NULL for the top help);
 * returns EXIT_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation that cannot fail quietly: out of memory exits with EXIT_LOCAL. */
void *ctl_calloc(size_t n, size_t size);
void *ctl_realloc(void *p, size_t size);
char *ctl_strdup(const char *s);

/* Reports a failed librtx call (`what` says what was tried) and returns the exit code. */
int ctl_call_failed(struct ctl *ctl, const char *what, const struct rtx_client_err *err);

/* Connects on first use; returns EXIT_OK or an exit code (message printed). */
int ctl_connect(struct ctl *ctl);

/* ---- args.c: argument helpers ----------------------------------------------------------- */

/* Whether argv[*i] is option `name` taking a value ("--name VALUE" or "--name=VALUE").
 * Returns 1 with *val set, 0 when it is not that option, -1 (message printed) when the
 * value is missing. */
int ctl_opt_value(const char *cmd, const char *name, int argc, char **argv, int *i,
                  const char **val);

/* Decimal integers within [lo, hi], and unsigned 64-bit integers. */
bool ctl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool ctl_parse_u64(const char *s, uint64_t *out);

/* A duration: "90s", "15m", "2h", "7d", "1h30m", "500ms"; a plain number is seconds. */
bool ctl_parse_duration_ms(const char *s, int64_t *out);

/* Labels given with --label KEY=VALUE, owning their key copies. */
struct ctl_labels {
    struct rtx_client_label *v;
    char **keys;
    int n;
};

/* Adds "KEY=VALUE" (the value points into arg); false when arg is not of that form. */
bool ctl_labels_add(struct ctl_labels *l, const char *arg);
void ctl_labels_free(struct ctl_labels *l);

/* Collects exactly one positional argument (the job id, the graph file); returns 1 when
 * arg was taken, 0 when it is an option, -1 (message printed) when it is one too many. */
int ctl_positional(const char *cmd, const char *arg, const char **slot, const char *what);

/* ---- output.c: human formats and tables -------------------------------------------------- */

int64_t ctl_now_unix_ms(void);

/* "2026-11-29T20:30:00.123Z" (with_ms) or "2026-11-29 20:30:00"; "-" for 0. */
const char *ctl_fmt_time(int64_t ms, bool with_ms, char *buf, size_t len);
/* "512 B", "1.5 KiB", ... */
const char *ctl_fmt_bytes(int64_t bytes, char *buf, size_t len);
/* "3d 4h 5m 6s" */
const char *ctl_fmt_duration(int64_t ms, char *buf, size_t len);
/* A duration in µs: "850us", "12.5ms", "3.20s". */
const char *ctl_fmt_us(int64_t us, char *buf, size_t len);
/* "f32[2,3]" */
const char *ctl_fmt_shape(enum rtx_client_dtype dt, int ndim, const int64_t *dims, char *buf,
                          size_t len);
/* "-" for an empty string. */
const char *ctl_dash(const char *s);

/* A table printed with aligned columns; cells are added row by row. */
struct ctl_table {
    int ncols;                          /* at most 16 */
    const char *const *headers;
    char **cells;
    int n_cells, cap_cells;
};

void ctl_table_add(struct ctl_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ctl_table_print(const struct ctl_table *t, int indent);
void ctl_table_free(struct ctl_table *t);

/* ---- output.c: JSON documents ------------------------------------------------------------ */

/* New containers and values; never NULL. A string with invalid UTF-8 has those bytes
 * replaced by U+FFFD (NULL is ""); a real that is NaN or out of range is null. */
json_t *ctl_json_object(void);
json_t *ctl_json_array(void);
json_t *ctl_json_str(const char *s);
json_t *ctl_json_int(int64_t v);
json_t *ctl_json_real(double v);
/* [dims[0], ...] */
json_t *ctl_json_shape(int ndim, const int64_t *dims);

/* obj[key] = v, taking v's reference (the key is cleaned as strings are). */
void ctl_json_set(json_t *obj, const char *key, json_t *v);
void ctl_json_set_str(json_t *obj, const char *key, const char *v);
void ctl_json_set_int(json_t *obj, const char *key, int64_t v);
void ctl_json_set_real(json_t *obj, const char *key, double v);
void ctl_json_set_bool(json_t *obj, const char *key, bool v);
/* Appends v to arr, taking v's reference. */
void ctl_json_append(json_t *arr, json_t *v);

/* Prints doc on stdout as one line (keys in insertion order) and drops the reference. */
void ctl_json_print(json_t *doc);

/* ---- jobs.c: jobs shared with submit ----------------------------------------------------- */

/* A job as `jobs show --json` prints it. */
json_t *ctl_job_json(const struct rtx_client_job *job);

/* The exit code that reflects a job's final state. */
int ctl_state_exit(enum rtx_client_job_state s);

/* Waits for job_id (timeout_ms < 0: forever), printing state changes unless --json; *out
 * receives the final job. Returns EXIT_OK when the wait ended (whatever the state) or an
 * exit code (message printed). */
int ctl_wait_job(struct ctl *ctl, const char *job_id, int64_t timeout_ms,
                 struct rtx_client_job **out);

/* ---- the commands (main.c's table): argc/argv are the arguments after the command words -- */

int ctl_cmd_status(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_devices(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_pools(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_lanes(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_generation(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_health(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_config(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_drain(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_jobs_list(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_jobs_show(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_jobs_wait(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_jobs_cancel(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_models_list(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_models_show(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_models_load(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_models_unload(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_outputs(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_generate(struct ctl *ctl, int argc, char **argv);

#endif
