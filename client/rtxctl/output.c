/*
 * output.c - rtxctl's output: human formats (times, sizes, durations, shapes), aligned tables, and
 * JSON documents built with jansson and printed as one line.
 *
 * DESIGN
 * A JSON document is a jansson tree that a command fills and ctl_json_print dumps, keys in
 * insertion order, reals with 17 significant digits (what the hand-written writer before it
 * printed). jansson refuses strings that are not valid UTF-8; daemon strings (reasons, labels,
 * file names) may hold anything, so the string and key helpers replace each invalid byte with
 * U+FFFD before handing the string over. NaN and infinities are not JSON: they print as null.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/rtxctl/rtxctl-impl.h"

/* ------------------------------------------------------------------------------------------
 * Human formats
 * ---------------------------------------------------------------------------------------- */

int64_t ctl_now_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "2026-11-29T20:30:00.123Z" (with_ms) or "2026-11-29 20:30:00"; "-" for 0. */
const char *ctl_fmt_time(int64_t ms, bool with_ms, char *buf, size_t len) {
    if (ms <= 0) return "-";
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) return "?";
    size_t n = strftime(buf, len, with_ms ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm);
    if (with_ms) snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
    return buf;
}

/* "512 B", "1.5 KiB", ... */
const char *ctl_fmt_bytes(int64_t bytes, char *buf, size_t len) {
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
const char *ctl_fmt_duration(int64_t ms, char *buf, size_t len) {
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

/* "850us", "12.5ms", "3.20s" */
const char *ctl_fmt_us(int64_t us, char *buf, size_t len) {
    if (us < 1000)
        snprintf(buf, len, "%lldus", (long long)us);
    else if (us < 1000000)
        snprintf(buf, len, "%.1fms", (double)us / 1e3);
    else
        snprintf(buf, len, "%.2fs", (double)us / 1e6);
    return buf;
}

/* "f32[2,3]" */
const char *ctl_fmt_shape(enum rtx_client_dtype dt, int ndim, const int64_t *dims, char *buf,
                          size_t len) {
    size_t n = (size_t)snprintf(buf, len, "%s[", rtx_client_dtype_name(dt));
    for (int i = 0; i < ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* "-" for an empty string. */
const char *ctl_dash(const char *s) {
    return s && *s ? s : "-";
}

/* ------------------------------------------------------------------------------------------
 * Tables
 * ---------------------------------------------------------------------------------------- */

void ctl_table_add(struct ctl_table *t, const char *fmt, ...) {
    if (t->n_cells == t->cap_cells) {
        t->cap_cells = t->cap_cells ? t->cap_cells * 2 : 64;
        t->cells = ctl_realloc(t->cells, sizeof *t->cells * (size_t)t->cap_cells);
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = ctl_calloc((size_t)(n < 0 ? 0 : n) + 1, 1);
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

void ctl_table_print(const struct ctl_table *t, int indent) {
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

void ctl_table_free(struct ctl_table *t) {
    for (int i = 0; i < t->n_cells; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->n_cells = t->cap_cells = 0;
}

/* ------------------------------------------------------------------------------------------
 * JSON documents
 * ---------------------------------------------------------------------------------------- */

/* jansson failed to allocate: nothing sensible is left to print. */
static json_t *oom(json_t *v) {
    if (!v) {
        ctl_msg("out of memory");
        exit(EXIT_LOCAL);
    }
    return v;
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

/* A copy of s with every invalid UTF-8 byte replaced by U+FFFD, or NULL when s is valid UTF-8
 * as it is (then no copy is needed). */
static char *utf8_clean(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    size_t bad = 0, len = 0;
    for (int n; s[len]; len += (size_t)(n ? n : 1))
        if ((n = utf8_seq(s + len)) == 0) bad++;
    if (bad == 0) return NULL;
    char *out = ctl_calloc(len + 2 * bad + 1, 1), *o = out;
    for (int n; *s; s += n ? n : 1) {
        if ((n = utf8_seq(s)) == 0) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
        } else {
            memcpy(o, s, (size_t)n);
            o += n;
        }
    }
    return out;
}

json_t *ctl_json_object(void) {
    return oom(json_object());
}

json_t *ctl_json_array(void) {
    return oom(json_array());
}

json_t *ctl_json_str(const char *s) {
    char *clean = utf8_clean(s ? s : "");
    json_t *v = oom(json_string(clean ? clean : s ? s : ""));
    free(clean);
    return v;
}

json_t *ctl_json_int(int64_t v) {
    return oom(json_integer(v));
}

json_t *ctl_json_real(double v) {
    if (v != v || v > 1e308 || v < -1e308) return oom(json_null());
    return oom(json_real(v));
}

json_t *ctl_json_shape(int ndim, const int64_t *dims) {
    json_t *a = ctl_json_array();
    for (int i = 0; i < ndim; i++)
        ctl_json_append(a, ctl_json_int(dims[i]));
    return a;
}

void ctl_json_set(json_t *obj, const char *key, json_t *v) {
    char *clean = utf8_clean(key);
    if (json_object_set_new(obj, clean ? clean : key, v) < 0) oom(NULL);
    free(clean);
}

void ctl_json_set_str(json_t *obj, const char *key, const char *v) {
    ctl_json_set(obj, key, ctl_json_str(v));
}

void ctl_json_set_int(json_t *obj, const char *key, int64_t v) {
    ctl_json_set(obj, key, ctl_json_int(v));
}

void ctl_json_set_real(json_t *obj, const char *key, double v) {
    ctl_json_set(obj, key, ctl_json_real(v));
}

void ctl_json_set_bool(json_t *obj, const char *key, bool v) {
    ctl_json_set(obj, key, oom(json_boolean(v)));
}

void ctl_json_append(json_t *arr, json_t *v) {
    if (json_array_append_new(arr, v) < 0) oom(NULL);
}

void ctl_json_print(json_t *doc) {
    json_dumpf(doc, stdout, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    putchar('\n');
    json_decref(doc);
}
