/*
 * args.c - rtxctl's argument helpers: options with values, integers, durations, --label KEY=VALUE
 * lists and single positional arguments. Each command parses its own options with these; main.c
 * takes the global options out first.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

int ctl_opt_value(const char *cmd, const char *name, int argc, char **argv, int *i,
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
        ctl_usage_error(cmd, "option %s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

bool ctl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool ctl_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = v;
    return true;
}

/* A duration: "90s", "15m", "2h", "7d", "1h30m", "500ms"; a plain number is seconds. */
bool ctl_parse_duration_ms(const char *s, int64_t *out) {
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1},      {"s", 1000},     {"m", 60000},
                 {"h", 3600000}, {"d", 86400000}, {"w", 604800000}};
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
    char *key = ctl_calloc(n + 1, 1);
    memcpy(key, arg, n);
    *key_mem = key;
    out->key = key;
    out->value = eq + 1;
    return true;
}

bool ctl_labels_add(struct ctl_labels *l, const char *arg) {
    l->v = ctl_realloc(l->v, sizeof *l->v * (size_t)(l->n + 1));
    l->keys = ctl_realloc(l->keys, sizeof *l->keys * (size_t)(l->n + 1));
    if (!parse_label(arg, &l->v[l->n], &l->keys[l->n])) return false;
    l->n++;
    return true;
}

void ctl_labels_free(struct ctl_labels *l) {
    for (int i = 0; i < l->n; i++)
        free(l->keys[i]);
    free(l->keys);
    free(l->v);
}

/* Collects exactly one positional argument (the job id, the graph file); returns 1 when
 * argv[*i] was taken, 0 when it is an option, -1 (message printed) when it is one too many. */
int ctl_positional(const char *cmd, const char *arg, const char **slot, const char *what) {
    if (arg[0] == '-' && arg[1] != '\0') return 0;
    if (*slot) {
        ctl_usage_error(cmd, "unexpected argument '%s' (one %s only)", arg, what);
        return -1;
    }
    *slot = arg;
    return 1;
}
