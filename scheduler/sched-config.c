/*
 * sched-config.c - the scheduler's settings (sched.h): defaults, one setting from text, the
 * [scheduler] and [lane.NAME] sections of an INI text, lane selection and the checks.
 *
 * DESIGN
 * Lanes are INI sections named after them, [lane.realtime], with one key per lane field; the
 * scheduler's own knobs are in [scheduler]. Sections, not flat settings ("lanes.realtime.
 * weight"), because a lane is a record and the set of lanes is open: daemon/config.c's table
 * holds fixed settings, and a lane section reads like the lane it defines. Two tables drive
 * the parsing (lane keys and scheduler keys: name, type, offset, bounds), so adding a knob is
 * one line. Parsing writes into a copy and commits only on success, so a bad value never
 * leaves a half-set lane. Everything here is pure: text in, struct out, no file or clock.
 * The key tables also say which settings a running scheduler cannot take
 * (rtx_sched_reconfigure): executors, max_running and cost_keys size its storage or belong to
 * its owner; the listing marks every other setting mutable, which is what a reload applies.
 */
#include "scheduler/sched.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define US 1000LL
#define MS (1000 * US)
#define SEC (1000 * MS)

static const char *const timeout_names[RTX_SCHED_TIMEOUT_COUNT] = {
#define TIMEOUT_NAME(name, str) [RTX_SCHED_TIMEOUT_##name] = str,
    RTX_SCHED_TIMEOUT_MAP(TIMEOUT_NAME)
#undef TIMEOUT_NAME
};
_Static_assert(sizeof timeout_names / sizeof timeout_names[0] == RTX_SCHED_TIMEOUT_COUNT,
               "a name per timeout action");

const char *rtx_sched_timeout_name(enum rtx_sched_timeout t) {
    return (unsigned)t < RTX_SCHED_TIMEOUT_COUNT ? timeout_names[t] : "?";
}

/* ------------------------------------------------------------------------------------------
 * Defaults
 * ---------------------------------------------------------------------------------------- */

static void lane_generic(struct rtx_sched_lane_config *l, const char *name) {
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->target_ns = 1 * SEC;
    l->weight = 1;
    l->max_queued = 10000;
    l->on_timeout = RTX_SCHED_TIMEOUT_REJECT;
    l->preemptible = false;
}

void rtx_sched_config_init(struct rtx_sched_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    struct rtx_sched_lane_config *l = cfg->lanes;
    lane_generic(&l[0], "realtime");
    l[0].target_ns = 50 * MS;
    l[0].weight = 8;
    l[0].max_queued = 1000;
    lane_generic(&l[1], "interactive");
    l[1].target_ns = 500 * MS;
    l[1].weight = 2;
    l[1].max_queued = 5000;
    lane_generic(&l[2], "batch");
    l[2].target_ns = 60 * SEC;
    l[2].weight = 1;
    l[2].max_queued = 20000;
    l[2].preemptible = true;
    cfg->n_lanes = 3;
    cfg->executors = 1;
    cfg->max_running = 4096;
    cfg->default_cost_ns = 10 * MS;
    cfg->cost_ema_alpha = 0.2;
    cfg->cost_keys = 4096;
    cfg->brownout_window_ns = 1 * SEC;
    cfg->brownout_exit_window_ns = 5 * SEC;
    cfg->brownout_enter_pressure = 1.0;
    cfg->brownout_exit_pressure = 0.5;
    cfg->brownout_delay_factor = 0.5;
}

/* ------------------------------------------------------------------------------------------
 * Key tables
 * ---------------------------------------------------------------------------------------- */

enum key_type {
    KEY_INT,     /* int in [min, max] */
    KEY_INT64,   /* int64_t in [min, max], times `scale` (text in us or ms, field in ns) */
    KEY_DOUBLE,  /* double in (dmin, dmax] */
    KEY_BOOL,    /* bool: true/false, yes/no, on/off, 1/0 */
    KEY_TIMEOUT, /* enum rtx_sched_timeout by name */
};

struct key {
    const char *name;
    enum key_type type;
    size_t offset;
    int64_t min, max; /* integers: bounds of the text's value (before scaling) */
    int64_t scale;    /* KEY_INT64: multiplier from the text's unit to the field's */
    double dmin, dmax;
    const char *description;
    bool restart_only; /* fixed when a scheduler is made (rtx_sched_reconfigure refuses it) */
};

#define L(field) offsetof(struct rtx_sched_lane_config, field)
#define C(field) offsetof(struct rtx_sched_config, field)
/* clang-format off */
static const struct key lane_keys[] = {
    {"target_p99_us", KEY_INT64, L(target_ns), 1, 3600LL * 1000 * 1000, US, 0, 0,
     "the lane's latency target: p99 of queueing + run, microseconds", false},
    {"weight", KEY_INT, L(weight), 1, 1000, 0, 0, 0,
     "the lane's share of the executors against the other lanes", false},
    {"max_queued", KEY_INT64, L(max_queued), 1, 10000000, 1, 0, 0,
     "items queued in the lane at most (admission refuses beyond)", false},
    {"on_timeout", KEY_TIMEOUT, L(on_timeout), 0, 0, 0, 0, 0,
     "reject: refuse what cannot meet its deadline; delay: queue it anyway", false},
    {"preemptible", KEY_BOOL, L(preemptible), 0, 0, 0, 0, 0,
     "running work may yield at a batch boundary", false},
};
static const struct key sched_keys[] = {
    {"executors", KEY_INT, C(executors), 1, 65536, 0, 0, 0,
     "items that run at once (the job manager and serving set their own)", true},
    {"max_running", KEY_INT64, C(max_running), 1, 10000000, 1, 0, 0,
     "items dispatched and not finished at most", true},
    {"default_cost_us", KEY_INT64, C(default_cost_ns), 1, 3600LL * 1000 * 1000, US, 0, 0,
     "cost of an item with no learned estimate, microseconds", false},
    {"cost_ema_alpha", KEY_DOUBLE, C(cost_ema_alpha), 0, 0, 0, 0.0, 1.0,
     "weight of a new run time in the learned moving average", false},
    {"cost_keys", KEY_INT, C(cost_keys), 1, 1 << 20, 0, 0, 0,
     "learned cost keys remembered at most", true},
    {"brownout_window_ms", KEY_INT64, C(brownout_window_ns), 1, 3600 * 1000, MS, 0, 0,
     "overload lasting this long sheds one more lane, milliseconds", false},
    {"brownout_exit_window_ms", KEY_INT64, C(brownout_exit_window_ns), 1, 3600 * 1000, MS,
     0, 0, "calm lasting this long readmits one shed lane, milliseconds", false},
    {"brownout_enter_pressure", KEY_DOUBLE, C(brownout_enter_pressure), 0, 0, 0, 0.0, 1000.0,
     "estimated delay / target above which a lane is overloaded", false},
    {"brownout_exit_pressure", KEY_DOUBLE, C(brownout_exit_pressure), 0, 0, 0, 0.0, 1000.0,
     "estimated delay / target below which a lane is calm", false},
    {"brownout_delay_factor", KEY_DOUBLE, C(brownout_delay_factor), 0, 0, 0, 0.0, 1.0,
     "batching delays are multiplied by this per shed lane", false},
};
/* clang-format on */
#undef L
#undef C
#define N_LANE_KEYS ((int)(sizeof lane_keys / sizeof lane_keys[0]))
#define N_SCHED_KEYS ((int)(sizeof sched_keys / sizeof sched_keys[0]))
_Static_assert(N_SCHED_KEYS + N_LANE_KEYS * RTX_SCHED_MAX_LANES <= RTX_SCHED_SETTINGS_MAX,
               "RTX_SCHED_SETTINGS_MAX holds every setting");

static int parse_integer(const char *text, int64_t *out) {
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE || *end) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *text, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(text, yes[i]) == 0) return *out = true, 0;
        if (strcmp(text, no[i]) == 0) return *out = false, 0;
    }
    return -1;
}

/* Parses text for key k into the struct at base. `where` names the setting for errors. */
static int set_key(void *base, const struct key *k, const char *where, const char *text,
                   struct rtx_err *err) {
    char *field = (char *)base + k->offset;
    switch (k->type) {
    case KEY_INT:
    case KEY_INT64: {
        int64_t v;
        if (parse_integer(text, &v))
            return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not an integer", where, text);
        if (v < k->min || v > k->max)
            return rtx_err_set(err, RTX_EINVAL, "%s: %lld is out of range [%lld, %lld]", where,
                               (long long)v, (long long)k->min, (long long)k->max);
        if (k->type == KEY_INT)
            *(int *)field = (int)v;
        else
            *(int64_t *)field = v * k->scale;
        return 0;
    }
    case KEY_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno == ERANGE || !isfinite(v))
            return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not a number", where, text);
        if (!(v > k->dmin && v <= k->dmax))
            return rtx_err_set(err, RTX_EINVAL, "%s: %g is out of range (%g, %g]", where, v,
                               k->dmin, k->dmax);
        *(double *)field = v;
        return 0;
    }
    case KEY_BOOL:
        if (parse_bool(text, (bool *)field))
            return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not true or false", where, text);
        return 0;
    case KEY_TIMEOUT:
        for (int t = 0; t < RTX_SCHED_TIMEOUT_COUNT; t++)
            if (strcmp(text, timeout_names[t]) == 0) {
                *(enum rtx_sched_timeout *)field = (enum rtx_sched_timeout)t;
                return 0;
            }
        return rtx_err_set(err, RTX_EINVAL, "%s: \"%s\" is not reject or delay", where, text);
    }
    return rtx_err_set(err, RTX_EINTERNAL, "%s: bad key type", where);
}

static const struct key *find_key(const struct key *keys, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

int rtx_sched_lane_name_check(const char *name, size_t len, const char *where,
                              struct rtx_err *err) {
    if (len == 0) return rtx_err_set(err, RTX_EINVAL, "%s: empty lane name", where);
    if (len > RTX_SCHED_LANE_NAME_MAX)
        return rtx_err_set(err, RTX_EINVAL, "%s: lane name \"%.*s\" is longer than %d", where,
                           (int)len, name, RTX_SCHED_LANE_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: lane name \"%.*s\" has characters outside [a-z0-9_-]", where,
                               (int)len, name);
    }
    return 0;
}

int rtx_sched_lane_names(const char *text, const char *where,
                         char names[RTX_SCHED_MAX_LANES][RTX_SCHED_LANE_NAME_MAX + 1],
                         struct rtx_err *err) {
    int n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *q = end;
        while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
            q--;
        size_t len = (size_t)(q - p);
        int rc = rtx_sched_lane_name_check(p, len, where, err);
        if (rc) return rc;
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
                return rtx_err_set(err, RTX_EINVAL, "%s: lane \"%.*s\" is listed twice", where,
                                   (int)len, p);
        if (n == RTX_SCHED_MAX_LANES)
            return rtx_err_set(err, RTX_EINVAL, "%s: more than %d lanes", where,
                               RTX_SCHED_MAX_LANES);
        memcpy(names[n], p, len);
        names[n++][len] = '\0';
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

static int lane_index(const struct rtx_sched_config *cfg, const char *name, size_t len) {
    for (int i = 0; i < cfg->n_lanes; i++)
        if (strlen(cfg->lanes[i].name) == len && memcmp(cfg->lanes[i].name, name, len) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------------------------- */

int rtx_sched_config_set(struct rtx_sched_config *cfg, const char *section, const char *key,
                         const char *value, struct rtx_err *err) {
    char where[160];
    if (!cfg || !section || !key || !value)
        return rtx_err_set(err, RTX_EINVAL, "scheduler config: missing argument");
    snprintf(where, sizeof where, "[%s] %s", section, key);
    if (strcmp(section, "scheduler") == 0) {
        const struct key *k = find_key(sched_keys, N_SCHED_KEYS, key);
        if (!k) return rtx_err_set(err, RTX_EINVAL, "%s: unknown scheduler setting", where);
        struct rtx_sched_config copy = *cfg;
        int rc = set_key(&copy, k, where, value, err);
        if (rc == 0) *cfg = copy;
        return rc;
    }
    if (strncmp(section, "lane.", 5) != 0)
        return rtx_err_set(err, RTX_ENOTFOUND, "[%s] is not a scheduler section", section);
    const char *name = section + 5;
    int rc = rtx_sched_lane_name_check(name, strlen(name), where, err);
    if (rc) return rc;
    const struct key *k = find_key(lane_keys, N_LANE_KEYS, key);
    if (!k)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s: unknown lane setting (target_p99_us, weight, max_queued, "
                           "on_timeout, preemptible)",
                           where);
    int idx = lane_index(cfg, name, strlen(name));
    struct rtx_sched_lane_config lane;
    if (idx >= 0) {
        lane = cfg->lanes[idx];
    } else {
        if (cfg->n_lanes >= RTX_SCHED_MAX_LANES)
            return rtx_err_set(err, RTX_EINVAL, "%s: more than %d lanes", where,
                               RTX_SCHED_MAX_LANES);
        lane_generic(&lane, name);
    }
    rc = set_key(&lane, k, where, value, err);
    if (rc) return rc;
    if (idx < 0) idx = cfg->n_lanes++;
    cfg->lanes[idx] = lane;
    return 0;
}

struct parse_ctx {
    struct rtx_sched_config *cfg;
    const char *text;
    const char *origin;
    struct rtx_err *err;
    int line;        /* line of the failure */
    int code;        /* 0 or the failure */
    const char *pos; /* the reader's position in text */
};

/* inih's reader over a string, counting lines so errors can name theirs. */
static char *read_line(char *str, int num, void *stream) {
    struct parse_ctx *pc = stream;
    if (pc->code || !*pc->pos) return NULL;
    int n = 0;
    while (n < num - 1 && pc->pos[n] && pc->pos[n] != '\n')
        n++;
    if (n == num - 1 && pc->pos[n] && pc->pos[n] != '\n') {
        pc->line++;
        pc->code = rtx_err_set(pc->err, RTX_EINVAL, "line longer than %d bytes", num - 2);
        return NULL;
    }
    memcpy(str, pc->pos, (size_t)n);
    if (pc->pos[n] == '\n') str[n++] = '\n';
    str[n] = '\0';
    pc->pos += n;
    pc->line++;
    return str;
}

static int on_value(void *user, const char *section, const char *key, const char *value) {
    struct parse_ctx *pc = user;
    if (pc->code) return 0;
    if (strcmp(section, "scheduler") != 0 && strncmp(section, "lane.", 5) != 0) return 1;
    int rc = rtx_sched_config_set(pc->cfg, section, key, value, pc->err);
    if (rc == 0) return 1;
    pc->code = rc;
    return 0;
}

int rtx_sched_config_parse(struct rtx_sched_config *cfg, const char *text, const char *origin,
                           struct rtx_err *err) {
    if (!cfg || !text) return rtx_err_set(err, RTX_EINVAL, "scheduler config: missing text");
    struct parse_ctx pc = {
        .cfg = cfg, .text = text, .origin = origin ? origin : "config", .err = err, .pos = text};
    int rc = ini_parse_stream(read_line, &pc, on_value, &pc);
    if (pc.code) {
        if (err) rtx_err_prefix(err, "%s:%d", pc.origin, pc.line);
        return pc.code;
    }
    if (rc > 0)
        return rtx_err_set(err, RTX_EINVAL, "%s:%d: not an INI line ([section] or key = value)",
                           pc.origin, rc);
    if (rc < 0) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", pc.origin);
    return 0;
}

int rtx_sched_config_select_lanes(struct rtx_sched_config *cfg, const char *names,
                                  struct rtx_err *err) {
    if (!cfg || !names) return rtx_err_set(err, RTX_EINVAL, "lanes: missing argument");
    char list[RTX_SCHED_MAX_LANES][RTX_SCHED_LANE_NAME_MAX + 1];
    int n = rtx_sched_lane_names(names, "lanes", list, err);
    if (n < 0) return n;
    struct rtx_sched_lane_config out[RTX_SCHED_MAX_LANES];
    for (int i = 0; i < n; i++) {
        int idx = lane_index(cfg, list[i], strlen(list[i]));
        if (idx >= 0)
            out[i] = cfg->lanes[idx];
        else
            lane_generic(&out[i], list[i]);
    }
    memcpy(cfg->lanes, out, sizeof out[0] * (size_t)n);
    cfg->n_lanes = n;
    return 0;
}

int rtx_sched_config_check(const struct rtx_sched_config *cfg, struct rtx_err *err) {
    if (!cfg) return rtx_err_set(err, RTX_EINVAL, "scheduler config: missing");
    if (cfg->n_lanes < 1 || cfg->n_lanes > RTX_SCHED_MAX_LANES)
        return rtx_err_set(err, RTX_EINVAL, "scheduler config: %d lanes (1..%d)", cfg->n_lanes,
                           RTX_SCHED_MAX_LANES);
    for (int i = 0; i < cfg->n_lanes; i++) {
        const struct rtx_sched_lane_config *l = &cfg->lanes[i];
        size_t len = strnlen(l->name, sizeof l->name);
        if (len == sizeof l->name)
            return rtx_err_set(err, RTX_EINVAL, "lane %d: name is not terminated", i);
        int rc = rtx_sched_lane_name_check(l->name, len, "lane", err);
        if (rc) return rc;
        if (lane_index(cfg, l->name, len) != i)
            return rtx_err_set(err, RTX_EINVAL, "lane \"%s\" is defined twice", l->name);
        if (l->target_ns < 1 * US || l->target_ns > 3600 * SEC)
            return rtx_err_set(err, RTX_EINVAL, "lane %s: target %lld ns is out of [1 us, 1 h]",
                               l->name, (long long)l->target_ns);
        if (l->weight < 1 || l->weight > 1000)
            return rtx_err_set(err, RTX_EINVAL, "lane %s: weight %d is out of [1, 1000]", l->name,
                               l->weight);
        if (l->max_queued < 1 || l->max_queued > 10000000)
            return rtx_err_set(err, RTX_EINVAL, "lane %s: max_queued %lld is out of [1, 1e7]",
                               l->name, (long long)l->max_queued);
        if ((unsigned)l->on_timeout >= RTX_SCHED_TIMEOUT_COUNT)
            return rtx_err_set(err, RTX_EINVAL, "lane %s: bad timeout action %d", l->name,
                               (int)l->on_timeout);
    }
    if (cfg->executors < 1 || cfg->executors > 65536)
        return rtx_err_set(err, RTX_EINVAL, "scheduler: executors %d is out of [1, 65536]",
                           cfg->executors);
    if (cfg->max_running < cfg->executors || cfg->max_running > 10000000)
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: max_running %lld is out of [executors (%d), 1e7]",
                           (long long)cfg->max_running, cfg->executors);
    if (cfg->default_cost_ns < 1 || cfg->default_cost_ns > 3600 * SEC)
        return rtx_err_set(err, RTX_EINVAL, "scheduler: default cost %lld ns is out of [1, 1 h]",
                           (long long)cfg->default_cost_ns);
    if (!(cfg->cost_ema_alpha > 0 && cfg->cost_ema_alpha <= 1))
        return rtx_err_set(err, RTX_EINVAL, "scheduler: cost_ema_alpha %g is out of (0, 1]",
                           cfg->cost_ema_alpha);
    if (cfg->cost_keys < 1 || cfg->cost_keys > (1 << 20))
        return rtx_err_set(err, RTX_EINVAL, "scheduler: cost_keys %d is out of [1, 1048576]",
                           cfg->cost_keys);
    if (cfg->brownout_window_ns < 1 || cfg->brownout_exit_window_ns < 1)
        return rtx_err_set(err, RTX_EINVAL, "scheduler: brownout windows must be positive");
    if (!(cfg->brownout_enter_pressure > 0 && cfg->brownout_enter_pressure <= 1000))
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: brownout_enter_pressure %g is out of (0, 1000]",
                           cfg->brownout_enter_pressure);
    if (!(cfg->brownout_exit_pressure > 0 &&
          cfg->brownout_exit_pressure < cfg->brownout_enter_pressure))
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: brownout_exit_pressure %g must be in (0, enter pressure "
                           "%g) for hysteresis",
                           cfg->brownout_exit_pressure, cfg->brownout_enter_pressure);
    if (!(cfg->brownout_delay_factor > 0 && cfg->brownout_delay_factor <= 1))
        return rtx_err_set(err, RTX_EINVAL, "scheduler: brownout_delay_factor %g is out of (0, 1]",
                           cfg->brownout_delay_factor);
    int64_t slots = cfg->max_running;
    for (int i = 0; i < cfg->n_lanes; i++)
        slots += cfg->lanes[i].max_queued;
    if (slots > 20000000)
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: %lld item slots (max_running + every max_queued) is "
                           "more than 20000000",
                           (long long)slots);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Listing
 * ---------------------------------------------------------------------------------------- */

/* The text of key k's field in the struct at base, in the INI file's units. */
static void format_key(const void *base, const struct key *k, char *out, size_t len) {
    const char *field = (const char *)base + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(out, len, "%d", *(const int *)field); return;
    case KEY_INT64: snprintf(out, len, "%lld", (long long)(*(const int64_t *)field / k->scale));
        return;
    case KEY_DOUBLE: {
        double v = *(const double *)field;
        snprintf(out, len, "%.15g", v); /* the shortest form that reads back exactly */
        if (strtod(out, NULL) != v) snprintf(out, len, "%.17g", v);
        return;
    }
    case KEY_BOOL: snprintf(out, len, "%s", *(const bool *)field ? "true" : "false"); return;
    case KEY_TIMEOUT:
        snprintf(out, len, "%s", rtx_sched_timeout_name(*(const enum rtx_sched_timeout *)field));
        return;
    }
    snprintf(out, len, "?");
}

static void list_keys(const void *base, const void *def, const struct key *keys, int n,
                      const char *section, struct rtx_sched_setting *out) {
    for (int i = 0; i < n; i++) {
        char dv[sizeof out[i].value];
        snprintf(out[i].section, sizeof out[i].section, "%s", section);
        out[i].key = keys[i].name;
        out[i].description = keys[i].description;
        format_key(base, &keys[i], out[i].value, sizeof out[i].value);
        format_key(def, &keys[i], dv, sizeof dv);
        out[i].is_default = strcmp(dv, out[i].value) == 0;
        out[i].is_mutable = !keys[i].restart_only;
    }
}

int rtx_sched_config_list(const struct rtx_sched_config *cfg, struct rtx_sched_setting *out) {
    struct rtx_sched_config def;
    rtx_sched_config_init(&def);
    list_keys(cfg, &def, sched_keys, N_SCHED_KEYS, "scheduler", out);
    int n = N_SCHED_KEYS;
    for (int l = 0; l < cfg->n_lanes && l < RTX_SCHED_MAX_LANES; l++) {
        const struct rtx_sched_lane_config *lane = &cfg->lanes[l];
        struct rtx_sched_lane_config ld;
        int d = lane_index(&def, lane->name, strlen(lane->name));
        if (d >= 0)
            ld = def.lanes[d];
        else
            lane_generic(&ld, lane->name);
        char section[sizeof out->section];
        snprintf(section, sizeof section, "lane.%s", lane->name);
        list_keys(lane, &ld, lane_keys, N_LANE_KEYS, section, out + n);
        n += N_LANE_KEYS;
    }
    return n;
}
