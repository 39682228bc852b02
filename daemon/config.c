/*
 * config.c - rtxd's settings (config.h): the table of every setting and the four sources that
 * fill it: embedded defaults, the INI file, RTXD_* environment variables, command-line flags.
 *
 * DESIGN
 * One static table (after Redis's config.c) describes every setting: its name, type, field
 * in struct rtx_config, default (as text, parsed like any other source), bounds, whether a
 * reload may change it, an optional apply hook, and a description. Everything else - parsing,
 * bounds, --print-config, --help, Admin.Config, reload - is a loop over the table; adding a
 * setting is one line here plus its field.
 *
 * Loading builds a complete staging config (defaults, then file, then environment, then
 * flags, each value parsed and checked as it arrives, so an error can name its source:
 * "FILE:LINE", "RTXD_X" or "--x"), then runs the checks that span settings, and only then
 * hands the result to the caller. Reload builds a staging config the same way from the file
 * and the environment, keeps the values that came from flags (flags keep precedence), checks
 * it, and then merges: mutable settings that differ take the new value (origin "reload"),
 * immutable ones keep theirs with a warning. All allocation happens before the caller's
 * config is touched, so a reload that fails leaves it as it was.
 *
 * The [scheduler] and [lane.NAME] sections reload the same way, driven by the scheduler's
 * own listing (rtx_sched_config_list says which settings a running scheduler can take): the
 * new file's mutable ones are set, as text, into a copy of the current ones. A changed lane
 * set (jobs.lanes, a lane added or removed) cannot reach the running schedulers, whose lane
 * indices are baked into queued work, so then no lane setting is taken and a warning says
 * why; the [scheduler] knobs still are. Their origins are not in the table's array: a flag
 * per listed setting (sched_reloaded) remembers which ones a reload changed; the others say
 * "default" or "file" by their value, as before. Putting the new values to the schedulers is
 * the caller's (daemon/main.c: the job manager and the model versions).
 *
 * Types: string, int and int64 (decimal), size (int64 with an optional k/m/g/t suffix,
 * powers of 1024), enum (one of a fixed list), lane list (comma-separated names, normalized
 * to "a,b,c") and lane name. String values may not hold control characters, begin or end
 * with blanks, or contain a blank followed by ';' (an INI comment), so that every value
 * --print-config writes reads back the same.
 *
 * jobs.cpu_threads = 0 (the default) is resolved here to max(1, online CPUs / jobs.workers),
 * so consumers always get a thread count >= 1; the resolved number is what lists and prints
 * show (with the origin of the 0 it came from).
 */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"

extern char **environ;

enum origin { ORIGIN_DEFAULT, ORIGIN_FILE, ORIGIN_ENV, ORIGIN_FLAG, ORIGIN_RELOAD, ORIGIN_COUNT };

static const char *const origin_names[ORIGIN_COUNT] = {
    [ORIGIN_DEFAULT] = "default", [ORIGIN_FILE] = "file",     [ORIGIN_ENV] = "env",
    [ORIGIN_FLAG] = "flag",       [ORIGIN_RELOAD] = "reload",
};

enum setting_type {
    TYPE_STRING, /* char *, length in [min, max] */
    TYPE_INT,    /* int in [min, max] */
    TYPE_INT64,  /* int64_t in [min, max] */
    TYPE_SIZE,   /* int64_t bytes in [min, max], suffixes k, m, g, t */
    TYPE_ENUM,   /* char *, one of `choices` */
    TYPE_LANES,  /* char *, comma-separated lane names, 1..RTX_SCHED_MAX_LANES of them */
    TYPE_LANE,   /* char *, one lane name */
    TYPE_FRACTION, /* double in [min, max] thousandths, written as a decimal ("0.25") */
};

#define NAME_MAX_LEN 64 /* bytes of a setting name, NUL included */

struct setting {
    const char *name; /* "section.key" */
    enum setting_type type;
    size_t offset;                               /* of the field in struct rtx_config */
    const char *def;                             /* default, as text */
    int64_t min, max;                            /* numbers: bounds; strings: length bounds */
    const char *const *choices;                  /* TYPE_ENUM: allowed values, NULL-terminated */
    bool is_mutable;                             /* a reload (SIGHUP) may change it */
    void (*apply)(const struct rtx_config *cfg); /* optional: puts a new value to use */
    const char *description;
};

static void apply_log(const struct rtx_config *cfg) {
    /* both values were checked against the same lists that rtx_log_configure accepts */
    rtx_log_configure(cfg->log_format, cfg->log_level);
}

static const char *const restart_policies[] = {"rerun", "fail", NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const store_syncs[] = {"full", "normal", NULL};
static const char *const job_devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const model_controls[] = {"none", "explicit", "poll", NULL};

#define F(field) offsetof(struct rtx_config, field)
#define KIB ((int64_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

/* clang-format off */
static const struct setting settings[] = {
    {.name = "server.listen", .type = TYPE_STRING, .offset = F(listen),
     .def = "127.0.0.1:8001", .min = 1, .max = 255,
     .description = "gRPC listen address (host:port, [v6]:port or unix:PATH)"},
    {.name = "server.cq_threads", .type = TYPE_INT, .offset = F(cq_threads), .def = "2",
     .min = 1, .max = 64, .description = "gRPC completion-queue threads"},
    {.name = "server.max_message_bytes", .type = TYPE_SIZE, .offset = F(max_message_bytes),
     .def = "64m", .min = 4 * KIB, .max = INT_MAX,
     .description = "largest gRPC message received or sent, bytes"},
    {.name = "http.listen", .type = TYPE_STRING, .offset = F(http_listen),
     .def = "127.0.0.1:8000", .min = 0, .max = 255,
     .description = "KServe v2 HTTP/REST and Prometheus /metrics address (host:port); "
                    "empty = no HTTP server"},
    {.name = "http.max_body_bytes", .type = TYPE_SIZE, .offset = F(http_max_body_bytes),
     .def = "64m", .min = 4 * KIB, .max = INT_MAX,
     .description = "largest HTTP request body, bytes (larger: 413)"},
    {.name = "store.path", .type = TYPE_STRING, .offset = F(store_path),
     .def = "./var/rtxd.db", .min = 1, .max = 4095, .description = "SQLite job store file"},
    {.name = "store.retention_max_age_s", .type = TYPE_INT64, .offset = F(retention_max_age_s),
     .def = "604800", .min = 0, .max = 100 * 366 * 86400LL, .is_mutable = true,
     .description = "seconds job outputs are kept after the job ends; 0 keeps them forever"},
    {.name = "store.retention_max_bytes", .type = TYPE_SIZE, .offset = F(retention_max_bytes),
     .def = "1g", .min = 0, .max = INT64_MAX, .is_mutable = true,
     .description = "bytes of job outputs kept, oldest deleted first; 0 = unlimited"},
    {.name = "store.sync", .type = TYPE_ENUM, .offset = F(store_sync), .def = "full",
     .choices = store_syncs,
     .description = "full: every commit is fsynced (jobs survive a machine crash); normal: "
                    "fsync at checkpoints only (jobs survive an rtxd crash)"},
    {.name = "jobs.workers", .type = TYPE_INT, .offset = F(workers), .def = "1", .min = 1,
     .max = 256, .description = "job worker threads"},
    {.name = "jobs.cpu_threads", .type = TYPE_INT, .offset = F(cpu_threads), .def = "0",
     .min = 0, .max = 1024,
     .description = "CPU backend threads per worker; 0 = online CPUs / workers (at least 1)"},
    {.name = "jobs.lanes", .type = TYPE_LANES, .offset = F(lanes),
     .def = "realtime,interactive,batch", .min = 1, .max = 1023,
     .description = "lanes, highest first, comma-separated (at most 16, each [a-z0-9_-], up "
                    "to 32 characters); [lane.NAME] sections set each lane's target, weight, "
                    "bound; by default also every lane such a section adds"},
    {.name = "jobs.default_lane", .type = TYPE_LANE, .offset = F(default_lane), .def = "batch",
     .min = 1, .max = RTX_SCHED_LANE_NAME_MAX,
     .description = "lane of a job submitted without one; must be in jobs.lanes"},
    {.name = "jobs.restart_policy", .type = TYPE_ENUM, .offset = F(restart_policy),
     .def = "rerun", .choices = restart_policies, .is_mutable = true,
     .description = "what a restart does with a job that was running: rerun it or fail it"},
    {.name = "jobs.max_graph_nodes", .type = TYPE_INT64, .offset = F(max_graph_nodes),
     .def = "100000", .min = 1, .max = 100000000,
     .description = "nodes a submitted graph may have"},
    {.name = "jobs.max_tensor_bytes", .type = TYPE_SIZE, .offset = F(max_tensor_bytes),
     .def = "1g", .min = 1, .max = INT64_MAX,
     .description = "bytes a single tensor of a job may have"},
    {.name = "jobs.max_queued", .type = TYPE_INT64, .offset = F(max_queued), .def = "100000",
     .min = 1, .max = 100000000,
     .description = "jobs waiting at most before Submit is refused"},
    {.name = "jobs.device", .type = TYPE_ENUM, .offset = F(device), .def = "auto",
     .choices = job_devices,
     .description = "device of a job that names none: auto (a healthy GPU when there is one, "
                    "else the CPU), cpu, or cuda (any healthy GPU)"},
    {.name = "jobs.gpu_workers_per_device", .type = TYPE_INT,
     .offset = F(gpu_workers_per_device), .def = "1", .min = 0, .max = 64,
     .description = "job workers per healthy CUDA device, each with its own stream and memory "
                    "pools; 0 runs no job on a GPU"},
    {.name = "device.memory_fraction", .type = TYPE_FRACTION, .offset = F(memory_fraction),
     .def = "0.9", .min = 10, .max = 1000,
     .description = "of each device's memory (RAM for the CPU) its budget holds, 0.01 to 1; "
                    "the rest is left to the CUDA context, libraries and the host"},
    {.name = "device.memory_cap_bytes", .type = TYPE_SIZE, .offset = F(memory_cap_bytes),
     .def = "0", .min = 0, .max = INT64_MAX,
     .description = "bytes any device's budget holds at most; 0 = no cap"},
    {.name = "device.jobs_reserve", .type = TYPE_FRACTION, .offset = F(jobs_reserve),
     .def = "0.25", .min = 0, .max = 1000,
     .description = "of each device's budget reserved for jobs, 0 to 1; beyond it jobs borrow "
                    "what no consumer reserved; a job needing more fails RESOURCE_EXHAUSTED"},
    {.name = "device.plan_cache", .type = TYPE_INT, .offset = F(plan_cache), .def = "64",
     .min = 0, .max = 4096,
     .description = "plans each device keeps: a run with a kept plan's graph, input shapes and "
                    "limits on its backend reuses it (GPU: CUDA graph replay); 0 = none"},
    {.name = "device.plan_cache_bytes", .type = TYPE_SIZE, .offset = F(plan_cache_bytes),
     .def = "1g", .min = 0, .max = INT64_MAX,
     .description = "bytes the kept plans of one device may hold (initializers, arena, inputs "
                    "and outputs of each), least recently used dropped first; 0 = no bound but "
                    "device.plan_cache"},
    {.name = "models.repository", .type = TYPE_STRING, .offset = F(models_repository),
     .def = "", .min = 0, .max = 4095,
     .description = "model repository directory served over KServe v2 (docs/serving.md); "
                    "empty = serve no models"},
    {.name = "models.control", .type = TYPE_ENUM, .offset = F(models_control), .def = "none",
     .choices = model_controls,
     .description = "none: load every model at start; explicit: load models.startup at start, "
                    "then load/unload on request; poll: as none, and rescan the repository"},
    {.name = "models.poll_ms", .type = TYPE_INT, .offset = F(models_poll_ms), .def = "5000",
     .min = 10, .max = 3600000,
     .description = "milliseconds between repository scans in models.control=poll"},
    {.name = "models.startup", .type = TYPE_STRING, .offset = F(models_startup), .def = "",
     .min = 0, .max = 4095,
     .description = "models loaded at start in models.control=explicit, comma-separated; "
                    "* = all"},
    {.name = "models.max_queue", .type = TYPE_INT64, .offset = F(models_max_queue),
     .def = "10000", .min = 1, .max = 100000000,
     .description = "inference requests waiting per model version before new ones are refused"},
    {.name = "models.cpu_threads", .type = TYPE_INT, .offset = F(models_cpu_threads),
     .def = "0", .min = 0, .max = 1024,
     .description = "CPU backend threads per model instance; 0 = online CPUs"},
    {.name = "drain.grace_ms", .type = TYPE_INT, .offset = F(drain_grace_ms), .def = "30000",
     .min = 0, .max = 3600000, .is_mutable = true,
     .description = "milliseconds a drain waits for running jobs before interrupting them"},
    {.name = "log.format", .type = TYPE_ENUM, .offset = F(log_format), .def = "text",
     .choices = log_formats, .is_mutable = true, .apply = apply_log,
     .description = "log line format"},
    {.name = "log.level", .type = TYPE_ENUM, .offset = F(log_level), .def = "info",
     .choices = log_levels, .is_mutable = true, .apply = apply_log,
     .description = "least severe level logged"},
};
/* clang-format on */

#undef F
#define N_SETTINGS ((int)(sizeof settings / sizeof settings[0]))
_Static_assert(sizeof settings / sizeof settings[0] == RTX_CONFIG_N_SETTINGS,
               "RTX_CONFIG_N_SETTINGS matches the table");
_Static_assert(ORIGIN_COUNT <= UCHAR_MAX, "origins fit struct rtx_config.origin");

/* ------------------------------------------------------------------------------------------
 * Fields
 * ---------------------------------------------------------------------------------------- */

static bool is_string_type(enum setting_type t) {
    return t == TYPE_STRING || t == TYPE_ENUM || t == TYPE_LANES || t == TYPE_LANE;
}

static char **str_field(struct rtx_config *c, const struct setting *s) {
    return (char **)((char *)c + s->offset);
}

static const char *str_value(const struct rtx_config *c, const struct setting *s) {
    const char *v = *(char *const *)((const char *)c + s->offset);
    return v ? v : "";
}

static double *frac_field(const struct rtx_config *c, const struct setting *s) {
    return (double *)((char *)c + s->offset);
}

static int64_t num_value(const struct rtx_config *c, const struct setting *s) {
    const char *p = (const char *)c + s->offset;
    return s->type == TYPE_INT ? *(const int *)p : *(const int64_t *)p;
}

static void set_num(struct rtx_config *c, const struct setting *s, int64_t v) {
    char *p = (char *)c + s->offset;
    if (s->type == TYPE_INT)
        *(int *)p = (int)v;
    else
        *(int64_t *)p = v;
}

/* The value as text (what --print-config writes and Admin.Config shows). */
static void format_value(const struct rtx_config *c, const struct setting *s, char *out,
                         size_t cap) {
    if (is_string_type(s->type))
        snprintf(out, cap, "%s", str_value(c, s));
    else if (s->type == TYPE_FRACTION)
        snprintf(out, cap, "%.3g", *frac_field(c, s));
    else
        snprintf(out, cap, "%lld", (long long)num_value(c, s));
}

static bool same_value(const struct rtx_config *a, const struct rtx_config *b,
                       const struct setting *s) {
    if (is_string_type(s->type)) return strcmp(str_value(a, s), str_value(b, s)) == 0;
    if (s->type == TYPE_FRACTION) return *frac_field(a, s) == *frac_field(b, s);
    return num_value(a, s) == num_value(b, s);
}

static int find_setting(const char *name) {
    for (int i = 0; i < N_SETTINGS; i++)
        if (strcmp(settings[i].name, name) == 0) return i;
    return -1;
}

/* Settings under an older name (docs/decisions.md 111): a renamed one is set under its new
 * name, a retired one (now NULL) is accepted and ignored; either way with a warning. */
static const struct {
    const char *old, *now;
} old_names[] = {
    {"jobs.plan_cache", "device.plan_cache"},
    {"jobs.plan_cache_bytes", "device.plan_cache_bytes"},
    {"jobs.gpu_pool_cap_bytes", NULL}, /* the device budgets bound what jobs take */
};
#define SETTING_RETIRED (-2) /* find_setting_or_old: accepted, ignored */

/* find_setting, or for an old name the setting it became (SETTING_RETIRED when none); *old
 * gets the old name's entry (-1 when name is current). */
static int find_setting_or_old(const char *name, int *old) {
    *old = -1;
    int idx = find_setting(name);
    for (int k = 0; idx < 0 && k < (int)(sizeof old_names / sizeof old_names[0]); k++) {
        if (strcmp(old_names[k].old, name) != 0) continue;
        *old = k;
        idx = old_names[k].now ? find_setting(old_names[k].now) : SETTING_RETIRED;
    }
    return idx;
}

/* The warning for a setting given under old name k from `source`. */
static void warn_old_name(int k, const char *source) {
    if (old_names[k].now)
        rtx_log(RTX_LOG_WARN, "deprecated setting name: use the new one", "setting",
                old_names[k].old, "new", old_names[k].now, "source", source, NULL);
    else
        rtx_log(RTX_LOG_WARN,
                "retired setting ignored: the device memory budgets (device.memory_fraction, "
                "device.memory_cap_bytes, device.jobs_reserve) bound what jobs take",
                "setting", old_names[k].old, "source", source, NULL);
}

/* "RTXD_SERVER_LISTEN" for "server.listen". */
static void env_name(const struct setting *s, char out[NAME_MAX_LEN + 8]) {
    size_t n = 0;
    memcpy(out, "RTXD_", 5);
    n = 5;
    for (const char *p = s->name; *p && n < NAME_MAX_LEN + 6; p++)
        out[n++] = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
    out[n] = '\0';
}

/* ------------------------------------------------------------------------------------------
 * Parsing one value
 * ---------------------------------------------------------------------------------------- */

/* A decimal integer with an optional sign, nothing else. */
static bool parse_int(const char *text, int64_t *out, const char **end) {
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return false;
    char *e;
    errno = 0;
    long long v = strtoll(text, &e, 10);
    if (errno == ERANGE) return false;
    *out = v;
    *end = e;
    return true;
}

static int parse_number(const struct setting *s, const char *text, int64_t *out,
                        struct rtx_err *err) {
    int64_t v = 0;
    const char *end = text;
    bool ok = parse_int(text, &v, &end);
    if (ok && s->type == TYPE_SIZE && *end) {
        static const char suffixes[] = "kmgt";
        const char *sfx = strchr(suffixes, tolower((unsigned char)*end));
        if (sfx && end[1] == '\0') {
            for (int i = 0; i <= sfx - suffixes && ok; i++) {
                ok = v <= INT64_MAX / 1024 && v >= INT64_MIN / 1024;
                if (ok) v *= 1024;
            }
            end++;
        }
        if (!ok) return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is too large", s->name, text);
    }
    if (!ok || *end) {
        if (s->type == TYPE_SIZE)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: \"%s\" is not a size (an integer, optionally followed by "
                               "k, m, g or t)",
                               s->name, text);
        return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not an integer", s->name, text);
    }
    if (v < s->min || v > s->max)
        return rtx_err_set(err, RTX_EINVAL, "%s: %lld is out of range [%lld, %lld]", s->name,
                           (long long)v, (long long)s->min, (long long)s->max);
    *out = v;
    return 0;
}

/* Checks a lane list and writes its normalized form ("a,b,c", blanks around names dropped)
 * into out (at least strlen(text) + 1 bytes). */
static int parse_lanes(const struct setting *s, const char *text, char *out, struct rtx_err *err) {
    char names[RTX_SCHED_MAX_LANES][RTX_SCHED_LANE_NAME_MAX + 1];
    int n = rtx_sched_lane_names(text, s->name, names, err);
    if (n < 0) return n;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (i) out[o++] = ',';
        memcpy(out + o, names[i], len);
        o += len;
    }
    out[o] = '\0';
    return 0;
}

/* Strings must read back the same from an INI file: see the DESIGN note. */
static int check_string(const struct setting *s, const char *text, struct rtx_err *err) {
    size_t len = strlen(text);
    if ((int64_t)len < s->min || (int64_t)len > s->max)
        return rtx_err_set(err, RTX_EINVAL, "%s: length %zu is out of range [%lld, %lld]", s->name,
                           len, (long long)s->min, (long long)s->max);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < 0x20 || ch == 0x7f)
            return rtx_err_set(err, RTX_EINVAL, "%s: control character in \"%s\"", s->name, text);
        if (ch == ';' && i > 0 && isspace((unsigned char)text[i - 1]))
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: \"%s\" has a blank followed by ';' (an INI comment)", s->name,
                               text);
    }
    if (len && (isspace((unsigned char)text[0]) || isspace((unsigned char)text[len - 1])))
        return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" begins or ends with a blank", s->name,
                           text);
    return 0;
}

static int enum_error(const struct setting *s, const char *text, struct rtx_err *err) {
    char list[128] = "";
    size_t n = 0;
    for (int i = 0; s->choices[i] && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", s->choices[i]);
    return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not one of %s", s->name, text, list);
}

/* Parses text for setting idx into c (replacing the old value) with origin o. The error
 * names the setting; the caller adds the source. */
/* A decimal fraction in [min, max] thousandths. */
static int parse_fraction(const struct setting *s, const char *text, double *out,
                          struct rtx_err *err) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || isspace((unsigned char)*text) || *end || errno == ERANGE || v != v)
        return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not a decimal number", s->name,
                           text);
    if (v * 1000 < (double)s->min || v * 1000 > (double)s->max)
        return rtx_err_set(err, RTX_EINVAL, "%s: %s is out of range [%g, %g]", s->name, text,
                           (double)s->min / 1000, (double)s->max / 1000);
    *out = v;
    return 0;
}

static int set_value(struct rtx_config *c, int idx, const char *text, enum origin o,
                     struct rtx_err *err) {
    const struct setting *s = &settings[idx];
    int rc = 0;
    char *copy = NULL;
    switch (s->type) {
    case TYPE_FRACTION: {
        double v = 0;
        rc = parse_fraction(s, text, &v, err);
        if (rc) return rc;
        *frac_field(c, s) = v;
        c->origin[idx] = (unsigned char)o;
        return 0;
    }
    case TYPE_INT:
    case TYPE_INT64:
    case TYPE_SIZE: {
        int64_t v = 0;
        rc = parse_number(s, text, &v, err);
        if (rc) return rc;
        set_num(c, s, v);
        c->origin[idx] = (unsigned char)o;
        return 0;
    }
    case TYPE_ENUM: {
        int k = 0;
        while (s->choices[k] && strcmp(s->choices[k], text) != 0)
            k++;
        if (!s->choices[k]) return enum_error(s, text, err);
        break;
    }
    case TYPE_STRING: rc = check_string(s, text, err); break;
    case TYPE_LANE: rc = rtx_sched_lane_name_check(text, strlen(text), s->name, err); break;
    case TYPE_LANES:
        if ((int64_t)strlen(text) > s->max)
            return rtx_err_set(err, RTX_EINVAL, "%s: longer than %lld characters", s->name,
                               (long long)s->max);
        copy = rtx_malloc(strlen(text) + 1);
        if (!copy) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", s->name);
        rc = parse_lanes(s, text, copy, err);
        if (rc) {
            rtx_free(copy);
            return rc;
        }
        break;
    }
    if (rc) return rc;
    if (!copy) copy = rtx_strdup(text);
    if (!copy) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", s->name);
    char **field = str_field(c, s);
    rtx_free(*field);
    *field = copy;
    c->origin[idx] = (unsigned char)o;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Whole configs
 * ---------------------------------------------------------------------------------------- */

void rtx_config_free(struct rtx_config *cfg) {
    if (!cfg) return;
    for (int i = 0; i < N_SETTINGS; i++)
        if (is_string_type(settings[i].type)) rtx_free(*str_field(cfg, &settings[i]));
    rtx_free(cfg->config_path);
    memset(cfg, 0, sizeof *cfg);
}

static int set_defaults(struct rtx_config *c, struct rtx_err *err) {
    memset(c, 0, sizeof *c);
    rtx_sched_config_init(&c->sched);
    for (int i = 0; i < N_SETTINGS; i++) {
        int rc = set_value(c, i, settings[i].def, ORIGIN_DEFAULT, err);
        if (rc) return rtx_err_prefix(err, "default");
    }
    return 0;
}

/* Copies setting idx (value and origin) from src into dst. */
static int copy_setting(struct rtx_config *dst, const struct rtx_config *src, int idx,
                        struct rtx_err *err) {
    const struct setting *s = &settings[idx];
    if (is_string_type(s->type)) {
        char *copy = rtx_strdup(str_value(src, s));
        if (!copy) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", s->name);
        char **field = str_field(dst, s);
        rtx_free(*field);
        *field = copy;
    } else if (s->type == TYPE_FRACTION) {
        *frac_field(dst, s) = *frac_field(src, s);
    } else {
        set_num(dst, s, num_value(src, s));
    }
    dst->origin[idx] = src->origin[idx];
    return 0;
}

/* Reconciles jobs.lanes with the lanes of the [lane.NAME] sections (config.h): the default
 * jobs.lanes becomes every defined lane; an explicit one selects and orders them and must
 * list every lane a section added. Then checks the scheduler's settings as a whole. */
static int resolve_lanes(struct rtx_config *c, struct rtx_err *err) {
    int ln = find_setting("jobs.lanes");
    struct rtx_sched_config defaults;
    rtx_sched_config_init(&defaults);
    int rc;
    if (c->origin[ln] == ORIGIN_DEFAULT) {
        char names[RTX_SCHED_MAX_LANES * (RTX_SCHED_LANE_NAME_MAX + 1) + 1] = "";
        for (int i = 0; i < c->sched.n_lanes; i++) {
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", i ? "," : "",
                     c->sched.lanes[i].name);
        }
        char *copy = rtx_strdup(names);
        if (!copy) return rtx_err_set(err, RTX_ENOMEM, "jobs.lanes: out of memory");
        rtx_free(c->lanes);
        c->lanes = copy;
    } else {
        for (int i = defaults.n_lanes; i < c->sched.n_lanes; i++) {
            const char *name = c->sched.lanes[i].name;
            size_t n = strlen(name);
            bool listed = false;
            for (const char *p = c->lanes; p && !listed; p = strchr(p, ',')) {
                if (*p == ',') p++;
                listed = strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0');
            }
            if (!listed)
                return rtx_err_set(err, RTX_EINVAL,
                                   "[lane.%s] defines a lane that jobs.lanes (%s: %s) does not "
                                   "list",
                                   name, origin_names[c->origin[ln]], c->lanes);
        }
        if ((rc = rtx_sched_config_select_lanes(&c->sched, c->lanes, err)) < 0)
            return rtx_err_prefix(err, "jobs.lanes");
    }
    if ((rc = rtx_sched_config_check(&c->sched, err)) < 0)
        return rtx_err_prefix(err, "lanes and [scheduler]");
    return 0;
}

/* Whether two scheduler configs have the same lanes (names) in the same order. */
static bool same_lane_set(const struct rtx_sched_config *a, const struct rtx_sched_config *b) {
    if (a->n_lanes != b->n_lanes) return false;
    for (int i = 0; i < a->n_lanes; i++)
        if (strcmp(a->lanes[i].name, b->lanes[i].name) != 0) return false;
    return true;
}

/* The scheduler settings a reload gives: cur with next's mutable settings (those a running
 * scheduler takes: rtx_sched_setting.is_mutable), its lanes' only when the lane set is the
 * same. Goes through the settings' text, so it needs no list of fields. */
static int merge_sched(const struct rtx_sched_config *cur, const struct rtx_sched_config *next,
                       struct rtx_sched_config *out, struct rtx_err *err) {
    struct rtx_sched_setting ss[RTX_SCHED_SETTINGS_MAX];
    bool lanes = same_lane_set(cur, next);
    int n = rtx_sched_config_list(next, ss), rc = 0;
    *out = *cur;
    for (int k = 0; k < n && rc == 0; k++)
        if (ss[k].is_mutable && (lanes || strcmp(ss[k].section, "scheduler") == 0))
            rc = rtx_sched_config_set(out, ss[k].section, ss[k].key, ss[k].value, err);
    return rc;
}

/* Logs what a reload does with the scheduler's settings (cur: before, next: the file's,
 * merged: after): a warning for a changed lane set and for each changed restart-only knob,
 * one info line listing the settings that changed, which merged marks reloaded. Returns how
 * many changed. */
static int report_sched(const struct rtx_config *cur, const struct rtx_config *next,
                        struct rtx_config *merged) {
    struct rtx_sched_setting was[RTX_SCHED_SETTINGS_MAX], is[RTX_SCHED_SETTINGS_MAX];
    if (!same_lane_set(&cur->sched, &next->sched))
        rtx_log(RTX_LOG_WARN,
                "the set of lanes changes only at restart; lane settings not applied", "current",
                cur->lanes, "configured", next->lanes, NULL);
    int n = rtx_sched_config_list(&cur->sched, was);
    rtx_sched_config_list(&next->sched, is);
    for (int k = 0; k < n && strcmp(was[k].section, "scheduler") == 0; k++)
        if (!was[k].is_mutable && strcmp(was[k].value, is[k].value) != 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "setting scheduler.%s changes only at restart", was[k].key);
            rtx_log(RTX_LOG_WARN, msg, "current", was[k].value, "configured", is[k].value, NULL);
        }
    rtx_sched_config_list(&merged->sched, is); /* the same lanes as cur: the same order */
    char list[2048] = "";
    size_t used = 0;
    int n_changed = 0;
    memcpy(merged->sched_reloaded, cur->sched_reloaded, sizeof merged->sched_reloaded);
    for (int k = 0; k < n; k++) {
        if (strcmp(was[k].value, is[k].value) == 0) continue;
        merged->sched_reloaded[k] = true;
        n_changed++;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s.%s=%s->%s",
                                     used ? " " : "", is[k].section, is[k].key, was[k].value,
                                     is[k].value);
    }
    if (n_changed) rtx_log(RTX_LOG_INFO, "lanes reconfigured", "changed", list, NULL);
    return n_changed;
}

/* Resolves jobs.cpu_threads = 0 and the lanes, and runs the checks that span settings. */
static int finish(struct rtx_config *c, struct rtx_err *err) {
    if (c->cpu_threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cpus > 0 ? cpus / (c->workers > 0 ? c->workers : 1) : 1;
        c->cpu_threads = per >= 1 ? (int)(per > 1024 ? 1024 : per) : 1;
    }
    int rc = resolve_lanes(c, err);
    if (rc < 0) return rc;
    /* jobs.lanes is normalized ("a,b,c"), so a match is a comma-bounded substring */
    size_t n = strlen(c->default_lane);
    for (const char *p = c->lanes; p; p = strchr(p, ',')) {
        if (*p == ',') p++;
        if (strncmp(p, c->default_lane, n) == 0 && (p[n] == ',' || p[n] == '\0')) return 0;
    }
    int dl = find_setting("jobs.default_lane"), ln = find_setting("jobs.lanes");
    return rtx_err_set(
        err, RTX_EINVAL, "jobs.default_lane (%s): \"%s\" is not one of jobs.lanes (%s): %s",
        origin_names[c->origin[dl]], c->default_lane, origin_names[c->origin[ln]], c->lanes);
}

/* ------------------------------------------------------------------------------------------
 * Sources: file, environment, flags
 * ---------------------------------------------------------------------------------------- */

struct file_ctx {
    struct rtx_config *c;
    const char *path;
    FILE *fp;
    int line;                              /* lines read so far = the line being parsed */
    int first_line[RTX_CONFIG_N_SETTINGS]; /* where each setting was set, 0: not yet */
    bool failed;                           /* err is set; stop reading */
    int code;
    int err_line;
    struct rtx_err *err;
};

/* inih's reader: fgets that counts lines and refuses lines inih would split. */
static char *read_line(char *str, int num, void *stream) {
    struct file_ctx *fc = stream;
    if (fc->failed || !fgets(str, num, fc->fp)) return NULL;
    fc->line++;
    size_t n = strlen(str);
    if (n > 0 && str[n - 1] != '\n' && (int)n == num - 1) {
        int ch = getc(fc->fp);
        if (ch != EOF) {
            fc->failed = true;
            fc->err_line = fc->line;
            fc->code = rtx_err_set(fc->err, RTX_EINVAL, "%s:%d: line longer than %d bytes",
                                   fc->path, fc->line, num - 3);
            return NULL;
        }
    }
    return str;
}

static int on_ini_value(void *user, const char *section, const char *key, const char *value) {
    struct file_ctx *fc = user;
    char name[NAME_MAX_LEN];
    int idx = -1, old = -1;
    int rc;
    if ((size_t)snprintf(name, sizeof name, "%s.%s", section, key) < sizeof name)
        idx = find_setting_or_old(name, &old);
    if (old >= 0) warn_old_name(old, fc->path);
    if (idx == SETTING_RETIRED) {
        rc = 0;
    } else if (idx < 0 &&
               (strcmp(section, "scheduler") == 0 || strncmp(section, "lane.", 5) == 0)) {
        /* the scheduler's sections: it checks and applies them (docs/scheduler.md) */
        rc = rtx_sched_config_set(&fc->c->sched, section, key, value, fc->err);
    } else if (idx < 0) {
        if (!*section)
            rc = rtx_err_set(fc->err, RTX_EINVAL, "unknown setting \"%s\" (outside a [section])",
                             key);
        else
            rc = rtx_err_set(fc->err, RTX_EINVAL, "unknown setting \"%s.%s\"", section, key);
    } else if (fc->first_line[idx]) {
        rc = rtx_err_set(fc->err, RTX_EINVAL,
                         "%s set again (first at line %d; an indented line continues the "
                         "value above it)",
                         name, fc->first_line[idx]);
    } else {
        fc->first_line[idx] = fc->line;
        rc = set_value(fc->c, idx, value, ORIGIN_FILE, fc->err);
    }
    if (rc == 0) return 1;
    fc->failed = true;
    fc->code = rc;
    fc->err_line = fc->line;
    rtx_err_prefix(fc->err, "%s:%d", fc->path, fc->line);
    return 0;
}

static int read_file(struct rtx_config *c, const char *path, struct rtx_err *err) {
    struct file_ctx fc = {.c = c, .path = path, .err = err};
    fc.fp = fopen(path, "r");
    if (!fc.fp) {
        int code = -errno;
        return rtx_err_set(err, code, "config file %s: %s", path, strerror(-code));
    }
    int rv = ini_parse_stream(read_line, &fc, on_ini_value, &fc);
    bool read_error = ferror(fc.fp) != 0;
    fclose(fc.fp);
    if (rv > 0 && (!fc.failed || rv < fc.err_line))
        return rtx_err_set(err, RTX_EINVAL,
                           "%s:%d: syntax error (expected [section] or "
                           "key = value)",
                           path, rv);
    if (fc.failed) return fc.code;
    if (rv == -2) return rtx_err_set(err, RTX_ENOMEM, "config file %s: out of memory", path);
    if (read_error || rv < 0) return rtx_err_set(err, RTX_EIO, "config file %s: read error", path);
    return 0;
}

/* "RTXD_JOBS_PLAN_CACHE" for "jobs.plan_cache". */
static void env_name_of(const char *setting, char out[NAME_MAX_LEN + 8]) {
    struct setting s = {.name = setting};
    env_name(&s, out);
}

static int read_env(struct rtx_config *c, struct rtx_err *err) {
    for (int k = 0; k < (int)(sizeof old_names / sizeof old_names[0]); k++) {
        char name[NAME_MAX_LEN + 8];
        env_name_of(old_names[k].old, name);
        const char *v = getenv(name);
        if (!v) continue;
        warn_old_name(k, name);
        int idx = old_names[k].now ? find_setting(old_names[k].now) : -1;
        int rc = idx >= 0 ? set_value(c, idx, v, ORIGIN_ENV, err) : 0;
        if (rc) return rtx_err_prefix(err, "environment %s", name);
    }
    for (int i = 0; i < N_SETTINGS; i++) {
        char name[NAME_MAX_LEN + 8];
        env_name(&settings[i], name);
        const char *v = getenv(name);
        if (!v) continue;
        int rc = set_value(c, i, v, ORIGIN_ENV, err);
        if (rc) {
            rtx_err_prefix(err, "environment %s", name);
            return rc;
        }
    }
    return 0;
}

/* Logs RTXD_* variables that are neither a setting nor RTXD_CONFIG (likely typos). */
static void warn_unknown_env(void) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "RTXD_", 5) != 0 || strncmp(*e, "RTXD_CONFIG=", 12) == 0) continue;
        bool known = false;
        for (int i = 0; i < N_SETTINGS && !known; i++) {
            char name[NAME_MAX_LEN + 8];
            env_name(&settings[i], name);
            size_t n = strlen(name);
            known = strncmp(*e, name, n) == 0 && (*e)[n] == '=';
        }
        for (int k = 0; k < (int)(sizeof old_names / sizeof old_names[0]) && !known; k++) {
            char name[NAME_MAX_LEN + 8];
            env_name_of(old_names[k].old, name);
            size_t n = strlen(name);
            known = strncmp(*e, name, n) == 0 && (*e)[n] == '=';
        }
        if (!known) {
            const char *eq = strchr(*e, '=');
            char name[128];
            snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - *e) : 120, *e);
            rtx_log(RTX_LOG_WARN, "environment variable is not a setting", "name", name, NULL);
        }
    }
}

/* What one command-line argument is. */
enum arg_kind {
    ARG_SETTING, /* --section.key=value or --section.key value */
    ARG_CONFIG,  /* --config PATH or --config=PATH: read here, removed from argv */
    ARG_OTHER,   /* left for the caller */
    ARG_END,     /* "--": it and everything after it are left for the caller */
};

struct arg {
    enum arg_kind kind;
    int n_args;        /* argv entries it takes (1 or 2) */
    int idx;           /* ARG_SETTING: the setting (SETTING_RETIRED: ignored) */
    int old;           /* ARG_SETTING: its old_names entry when given by an old name; -1 */
    const char *value; /* ARG_SETTING, ARG_CONFIG */
};

static int classify_arg(int argc, char **argv, int i, struct arg *a, struct rtx_err *err) {
    const char *s = argv[i];
    *a = (struct arg){.kind = ARG_OTHER, .n_args = 1, .idx = -1, .old = -1};
    if (strcmp(s, "--") == 0) {
        a->kind = ARG_END;
        return 0;
    }
    if (strncmp(s, "--", 2) != 0) return 0;
    const char *name = s + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    bool is_config = len == 6 && strncmp(name, "config", 6) == 0;
    if (!is_config && !memchr(name, '.', len)) return 0;
    if (!is_config) {
        char key[NAME_MAX_LEN];
        if (len < sizeof key) {
            memcpy(key, name, len);
            key[len] = '\0';
            a->idx = find_setting_or_old(key, &a->old);
        }
        if (a->idx < 0 && a->idx != SETTING_RETIRED)
            return rtx_err_set(err, RTX_EINVAL, "unknown setting --%.*s", (int)len, name);
    }
    a->kind = is_config ? ARG_CONFIG : ARG_SETTING;
    if (eq) {
        a->value = eq + 1;
    } else if (i + 1 < argc && argv[i + 1] && strncmp(argv[i + 1], "--", 2) != 0) {
        a->value = argv[i + 1];
        a->n_args = 2;
    } else {
        return rtx_err_set(err, RTX_EINVAL, "--%.*s needs a value", (int)len, name);
    }
    return 0;
}

/* The file --config names (the last one given), or NULL. */
static int find_config_flag(int argc, char **argv, const char **path, struct rtx_err *err) {
    *path = NULL;
    for (int i = 1; i < argc;) {
        struct arg a;
        int rc = classify_arg(argc, argv, i, &a, err);
        if (rc) return rc;
        if (a.kind == ARG_END) break;
        if (a.kind == ARG_CONFIG) *path = a.value;
        i += a.n_args;
    }
    return 0;
}

static int read_flags(struct rtx_config *c, int argc, char **argv, struct rtx_err *err) {
    for (int i = 1; i < argc;) {
        struct arg a;
        int rc = classify_arg(argc, argv, i, &a, err);
        if (rc) return rc;
        if (a.kind == ARG_END) break;
        if (a.kind == ARG_SETTING && a.old >= 0) warn_old_name(a.old, "flag");
        if (a.kind == ARG_SETTING && a.idx != SETTING_RETIRED) {
            rc = set_value(c, a.idx, a.value, ORIGIN_FLAG, err);
            if (rc) {
                rtx_err_prefix(err, "flag --%s", settings[a.idx].name);
                return rc;
            }
        }
        i += a.n_args;
    }
    return 0;
}

/* Leaves in argv only what is neither a setting flag nor --config (which is handled here),
 * argv[0] kept, NULL-terminated. */
static void compact_args(int *argc, char **argv) {
    int out = 1, i = 1;
    while (i < *argc) {
        struct arg a;
        classify_arg(*argc, argv, i, &a, NULL); /* cannot fail: read_flags passed */
        if (a.kind == ARG_END) break;
        if (a.kind == ARG_OTHER)
            for (int k = 0; k < a.n_args; k++)
                argv[out++] = argv[i + k];
        i += a.n_args;
    }
    while (i < *argc)
        argv[out++] = argv[i++];
    argv[out] = NULL;
    *argc = out;
}

/* Defaults, then the file (if any), then the environment. */
static int read_sources(struct rtx_config *c, const char *path, struct rtx_err *err) {
    int rc = set_defaults(c, err);
    if (rc == 0 && path) {
        c->config_path = rtx_strdup(path);
        rc = c->config_path ? read_file(c, path, err)
                            : rtx_err_set(err, RTX_ENOMEM, "config: out of memory");
    }
    if (rc == 0) rc = read_env(c, err);
    return rc;
}

static void run_apply_hooks(const struct rtx_config *cfg) {
    for (int i = 0; i < N_SETTINGS; i++)
        if (settings[i].apply) settings[i].apply(cfg);
}

int rtx_config_load(struct rtx_config *cfg, int *argc, char **argv, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!cfg || !argc || !argv || *argc < 1)
        return rtx_err_set(err, RTX_EINVAL, "config: no arguments");
    memset(cfg, 0, sizeof *cfg);

    const char *path;
    int rc = find_config_flag(*argc, argv, &path, err);
    if (rc) return rc;
    if (!path) {
        const char *env = getenv("RTXD_CONFIG");
        path = env && *env ? env : NULL;
    }
    struct rtx_config stage;
    rc = read_sources(&stage, path, err);
    if (rc == 0) rc = read_flags(&stage, *argc, argv, err);
    if (rc == 0) rc = finish(&stage, err);
    if (rc) {
        rtx_config_free(&stage);
        return rc;
    }
    compact_args(argc, argv);
    *cfg = stage;
    run_apply_hooks(cfg);
    warn_unknown_env();
    return 0;
}

int rtx_config_reload(struct rtx_config *cfg, int *changed, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (changed) *changed = 0;
    if (!cfg) return rtx_err_set(err, RTX_EINVAL, "config: no config");

    /* what a restart with the same flags would give */
    struct rtx_config next, merged;
    memset(&merged, 0, sizeof merged);
    int rc = read_sources(&next, cfg->config_path, err);
    for (int i = 0; i < N_SETTINGS && rc == 0; i++)
        if (cfg->origin[i] == ORIGIN_FLAG) rc = copy_setting(&next, cfg, i, err);
    if (rc == 0) rc = finish(&next, err);

    /* the current settings with the mutable changes */
    bool take[RTX_CONFIG_N_SETTINGS] = {false};
    if (rc == 0 && cfg->config_path) {
        merged.config_path = rtx_strdup(cfg->config_path);
        if (!merged.config_path) rc = rtx_err_set(err, RTX_ENOMEM, "config: out of memory");
    }
    for (int i = 0; i < N_SETTINGS && rc == 0; i++) {
        take[i] = settings[i].is_mutable && !same_value(cfg, &next, &settings[i]);
        rc = copy_setting(&merged, take[i] ? &next : cfg, i, err);
        if (take[i]) merged.origin[i] = ORIGIN_RELOAD;
    }
    if (rc == 0) rc = merge_sched(&cfg->sched, &next.sched, &merged.sched, err);
    if (rc == 0) rc = finish(&merged, err);
    if (rc) {
        rtx_config_free(&next);
        rtx_config_free(&merged);
        return rc;
    }

    int n_changed = report_sched(cfg, &next, &merged);
    for (int i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        char now[256], want[256], msg[128];
        format_value(cfg, s, now, sizeof now);
        format_value(&next, s, want, sizeof want);
        if (take[i]) {
            n_changed++;
            rtx_log(RTX_LOG_INFO, "setting changed", "setting", s->name, "from", now, "to", want,
                    NULL);
        } else if (!same_value(cfg, &next, s)) {
            snprintf(msg, sizeof msg, "setting %s changes only at restart", s->name);
            rtx_log(RTX_LOG_WARN, msg, "current", now, "configured", want, NULL);
        }
    }
    rtx_config_free(&next);
    rtx_config_free(cfg);
    *cfg = merged;
    for (int i = 0; i < N_SETTINGS; i++)
        if (take[i] && settings[i].apply) settings[i].apply(cfg);
    if (changed) *changed = n_changed;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Listing, printing, usage
 * ---------------------------------------------------------------------------------------- */

/* The origin of the scheduler setting listed k-th (rtx_sched_config_list): "reload" once a
 * reload changed it, else "default" for the built-in value and "file" for another. */
static const char *sched_origin(const struct rtx_config *cfg, const struct rtx_sched_setting *ss,
                                int k) {
    if (cfg->sched_reloaded[k]) return origin_names[ORIGIN_RELOAD];
    return origin_names[ss->is_default ? ORIGIN_DEFAULT : ORIGIN_FILE];
}

int rtx_config_list(const struct rtx_config *cfg, struct rtx_setting_view **views, int *n) {
    if (!cfg || !views || !n) return RTX_EINVAL;
    struct rtx_sched_setting *ss = rtx_malloc(sizeof *ss * RTX_SCHED_SETTINGS_MAX);
    struct rtx_setting_view *v = rtx_malloc(sizeof *v * (N_SETTINGS + RTX_SCHED_SETTINGS_MAX));
    if (!v || !ss) {
        rtx_free(ss);
        rtx_free(v);
        return RTX_ENOMEM;
    }
    for (int i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        snprintf(v[i].name, sizeof v[i].name, "%s", s->name);
        format_value(cfg, s, v[i].value, sizeof v[i].value);
        v[i].origin = cfg->origin[i] < ORIGIN_COUNT ? origin_names[cfg->origin[i]] : "default";
        v[i].is_mutable = s->is_mutable;
        v[i].description = s->description;
    }
    int ns = rtx_sched_config_list(&cfg->sched, ss);
    for (int k = 0; k < ns; k++) {
        struct rtx_setting_view *o = &v[N_SETTINGS + k];
        snprintf(o->name, sizeof o->name, "%s.%s", ss[k].section, ss[k].key);
        snprintf(o->value, sizeof o->value, "%s", ss[k].value);
        o->origin = sched_origin(cfg, &ss[k], k);
        o->is_mutable = ss[k].is_mutable;
        o->description = ss[k].description;
    }
    rtx_free(ss);
    *views = v;
    *n = N_SETTINGS + ns;
    return 0;
}

/* Length of the section part of a setting name ("server" of "server.listen"). */
static int section_len(const struct setting *s) {
    return (int)(strchr(s->name, '.') - s->name);
}

void rtx_config_print(const struct rtx_config *cfg, FILE *out) {
    fprintf(out, "# rtxd settings (rtxd --print-config); load them with --config FILE\n");
    for (int i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        int sl = section_len(s);
        if (i == 0 || sl != section_len(&settings[i - 1]) ||
            strncmp(s->name, settings[i - 1].name, (size_t)sl) != 0)
            fprintf(out, "\n[%.*s]\n", sl, s->name);
        int o = cfg->origin[i] < ORIGIN_COUNT ? cfg->origin[i] : ORIGIN_DEFAULT;
        fprintf(out, "# %s\n# origin: %s, %s\n%s = ", s->description, origin_names[o],
                s->is_mutable ? "mutable" : "immutable", s->name + sl + 1);
        char value[256];
        format_value(cfg, s, value, sizeof value);
        fprintf(out, "%s\n", value);
    }
    /* the scheduler's sections (docs/scheduler.md) */
    struct rtx_sched_setting ss[RTX_SCHED_SETTINGS_MAX];
    int ns = rtx_sched_config_list(&cfg->sched, ss);
    for (int k = 0; k < ns; k++) {
        if (k == 0 || strcmp(ss[k].section, ss[k - 1].section) != 0)
            fprintf(out, "\n[%s]\n", ss[k].section);
        fprintf(out, "# %s\n# origin: %s, %s\n%s = %s\n", ss[k].description,
                sched_origin(cfg, &ss[k], k), ss[k].is_mutable ? "mutable" : "immutable",
                ss[k].key, ss[k].value);
    }
}

void rtx_config_usage(FILE *out) {
    fprintf(out, "Settings: --section.key=VALUE (or --section.key VALUE) on the command line,\n"
                 "RTXD_SECTION_KEY in the environment, or \"key = value\" under [section] in the\n"
                 "file given by --config PATH or RTXD_CONFIG. Flags win over the environment,\n"
                 "which wins over the file. SIGHUP re-reads the file and the environment and\n"
                 "applies the settings marked (reload).\n\n");
    for (int i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        char arg[96], range[64] = "";
        switch (s->type) {
        case TYPE_STRING: snprintf(arg, sizeof arg, "--%s=STRING", s->name); break;
        case TYPE_LANES: snprintf(arg, sizeof arg, "--%s=NAME,...", s->name); break;
        case TYPE_LANE: snprintf(arg, sizeof arg, "--%s=NAME", s->name); break;
        case TYPE_SIZE: snprintf(arg, sizeof arg, "--%s=SIZE", s->name); break;
        case TYPE_INT:
        case TYPE_INT64: snprintf(arg, sizeof arg, "--%s=N", s->name); break;
        case TYPE_FRACTION:
            snprintf(arg, sizeof arg, "--%s=X", s->name);
            snprintf(range, sizeof range, ", %g..%g", (double)s->min / 1000,
                     (double)s->max / 1000);
            break;
        case TYPE_ENUM: {
            int n = snprintf(arg, sizeof arg, "--%s=", s->name);
            for (int k = 0; s->choices[k] && n < (int)sizeof arg; k++)
                n +=
                    snprintf(arg + n, sizeof arg - (size_t)n, "%s%s", k ? "|" : "", s->choices[k]);
            break;
        }
        }
        bool numeric = s->type == TYPE_INT || s->type == TYPE_INT64 || s->type == TYPE_SIZE;
        if (numeric && s->max == INT64_MAX)
            snprintf(range, sizeof range, ", at least %lld", (long long)s->min);
        else if (numeric)
            snprintf(range, sizeof range, ", %lld..%lld", (long long)s->min, (long long)s->max);
        fprintf(out, "  %s%s\n      %s\n      default %s%s\n", arg,
                s->is_mutable ? "  (reload)" : "", s->description, s->def, range);
    }
    fprintf(out, "\nSIZE is bytes, optionally with a k, m, g or t suffix (powers of 1024).\n");
}
