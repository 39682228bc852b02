/*
 * log.c - structured logs (log.h): one line per event on stderr, as text or JSON.
 *
 * DESIGN
 * The level and the format are two atomics, so rtx_log_configure may run on any thread (SIGHUP)
 * while others log. A line is built in a buffer on the caller's stack and written with a single
 * write(2); lines are capped at PIPE_BUF bytes, so concurrent writers to a pipe never interleave
 * inside a line. Text that does not fit is cut at a character boundary and marked with "...";
 * the line stays well-formed (a JSON line stays valid JSON). The request id lives in a C11
 * _Thread_local buffer, so each serving thread tags only its own lines.
 *
 * Every string goes through one escaper: control characters become \n, \t, \r or \u00XX,
 * bytes that are not valid UTF-8 become U+FFFD, and in JSON and quoted text values '"' and '\'
 * are escaped too. Text values are quoted only when they need it (empty, spaces, '=', '"',
 * '\', control characters), so ordinary values read as key=value.
 */
#include "daemon/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"

enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON, LOG_FORMAT_COUNT };

static const char *const level_names[] = {
    [RTX_LOG_DEBUG] = "debug",
    [RTX_LOG_INFO] = "info",
    [RTX_LOG_WARN] = "warn",
    [RTX_LOG_ERROR] = "error",
};
static const char *const format_names[LOG_FORMAT_COUNT] = {
    [LOG_FORMAT_TEXT] = "text",
    [LOG_FORMAT_JSON] = "json",
};
_Static_assert(sizeof level_names / sizeof level_names[0] == RTX_LOG_ERROR + 1,
               "one name per log level");

#define LINE_MAX_BYTES PIPE_BUF /* a line, newline included; write(2) of it is atomic */
#define REQUEST_ID_MAX 128      /* bytes kept of a request id */
#define MESSAGE_MAX 2048        /* bytes of an rtx_logf message */
/* Appending below a limit L: escaped text stays within L (its "..." included), a closing quote
 * may take L + 1, the mark for dropped fields L + 1 + MARK_MAX. */
#define MARK_MAX 11 /* ,"...":true */
/* Room kept free while the message and fields are added: the mark, a closing quote, the
 * request id field (,"req":"...", every byte escaped to 6) and the closing "}\n". */
#define TAIL_RESERVE (1 + MARK_MAX + 8 + 6 * REQUEST_ID_MAX + 1 + 2)

static atomic_int log_level = RTX_LOG_INFO;
static atomic_int log_format = LOG_FORMAT_TEXT;
static _Thread_local char request_id[REQUEST_ID_MAX + 1];

/* A line being built; once `full` is set nothing more is appended except the closing. */
struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
    bool full;
};

/* How a string is written. */
enum esc_mode {
    ESC_BARE,   /* text message or unquoted value: only control characters escaped */
    ESC_QUOTED, /* inside "...": '"' and '\' escaped too */
};

static int lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(s, names[i]) == 0) return i;
    return -1;
}

int rtx_log_configure(const char *format, const char *level) {
    int f = format ? lookup(format, format_names, LOG_FORMAT_COUNT) : -1;
    int l = level ? lookup(level, level_names, RTX_LOG_ERROR + 1) : -1;
    if (level && strcmp(level, "off") == 0) l = RTX_LOG_ERROR + 1; /* nothing is enabled */
    if (f < 0 || l < 0) return RTX_EINVAL;
    atomic_store_explicit(&log_format, f, memory_order_relaxed);
    atomic_store_explicit(&log_level, l, memory_order_relaxed);
    return 0;
}

bool rtx_log_enabled(enum rtx_log_level level) {
    return (int)level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void rtx_log_set_request_id(const char *id) {
    if (!id) id = "";
    size_t n = strlen(id);
    if (n > REQUEST_ID_MAX) n = REQUEST_ID_MAX;
    memcpy(request_id, id, n);
    request_id[n] = '\0';
}

const char *rtx_log_request_id(void) {
    return request_id;
}

/* Appends raw bytes when they fit below `limit` (also on a full line: closing quotes and
 * braces are written this way); returns whether they did. */
static bool put_raw(struct line *ln, const char *s, size_t n, size_t limit) {
    if (ln->len + n > limit) return false;
    memcpy(ln->buf + ln->len, s, n);
    ln->len += n;
    return true;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the bytes there are not one
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    size_t n;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    return n;
}

/* The escaped form of the character at s into out (at most 6 bytes); *adv gets the bytes of
 * s consumed. */
static size_t escape_char(const char *s, enum esc_mode mode, char out[8], size_t *adv) {
    unsigned char c = (unsigned char)s[0];
    *adv = 1;
    if (c < 0x20 || c == 0x7f) {
        switch (c) {
        case '\n': memcpy(out, "\\n", 2); return 2;
        case '\r': memcpy(out, "\\r", 2); return 2;
        case '\t': memcpy(out, "\\t", 2); return 2;
        default: snprintf(out, 8, "\\u%04x", c); return 6;
        }
    }
    if (mode == ESC_QUOTED && (c == '"' || c == '\\')) {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    size_t n = utf8_len((const unsigned char *)s);
    if (n == 0) {
        memcpy(out, "\xef\xbf\xbd", 3); /* U+FFFD */
        return 3;
    }
    memcpy(out, s, n);
    *adv = n;
    return n;
}

/* Appends s escaped; when it does not fit below `limit`, appends as much as fits followed by
 * "..." and marks the line full. The caller keeps 3 bytes free below limit for the mark. */
static void put_escaped(struct line *ln, const char *s, enum esc_mode mode, size_t limit) {
    while (*s && !ln->full) {
        char e[8];
        size_t adv, n = escape_char(s, mode, e, &adv);
        if (!put_raw(ln, e, n, limit - 3)) {
            put_raw(ln, "...", 3, limit);
            ln->full = true;
            return;
        }
        s += adv;
    }
}

/* Whether a text-format value must be quoted to read back as one value. */
static bool text_needs_quotes(const char *s) {
    if (!*s) return true;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == 0x7f || c == '"' || c == '=' || c == '\\') return true;
    }
    return false;
}

/* Appends ` key=value` (text) or `,"key":"value"` (JSON); a NULL value is written as null. */
static void put_field(struct line *ln, enum log_format fmt, const char *key, const char *value,
                      size_t limit) {
    if (ln->full) return;
    /* a field is added only when its key and the start of its value fit */
    if (ln->len + strlen(key) * 6 + 16 > limit) {
        const char *mark = fmt == LOG_FORMAT_JSON ? ",\"...\":true" : " ...";
        put_raw(ln, mark, strlen(mark), limit + 1 + MARK_MAX);
        ln->full = true;
        return;
    }
    if (fmt == LOG_FORMAT_JSON) {
        put_raw(ln, ",\"", 2, limit);
        put_escaped(ln, key, ESC_QUOTED, limit);
        if (!value) {
            put_raw(ln, "\":null", 6, limit);
            return;
        }
        put_raw(ln, "\":\"", 3, limit);
        put_escaped(ln, value, ESC_QUOTED, limit);
        put_raw(ln, "\"", 1, limit + 1);
        return;
    }
    put_raw(ln, " ", 1, limit);
    put_escaped(ln, key, ESC_BARE, limit);
    put_raw(ln, "=", 1, limit);
    if (!value) {
        put_raw(ln, "(null)", 6, limit);
    } else if (text_needs_quotes(value)) {
        put_raw(ln, "\"", 1, limit);
        put_escaped(ln, value, ESC_QUOTED, limit);
        put_raw(ln, "\"", 1, limit + 1);
    } else {
        put_escaped(ln, value, ESC_BARE, limit);
    }
}

/* "2026-11-29T20:30:00.123Z" (UTC, milliseconds) into out[32]. */
static void format_time(char out[32]) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void write_all(const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* nowhere left to report it */
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Builds and writes one line: msg, then the key/value pairs of `ap` (NULL-terminated) unless
 * ap is NULL, then the request id. */
static void emit(enum rtx_log_level level, const char *msg, va_list *ap,
                 const char *const *fields) {
    int saved_errno = errno;
    enum log_format fmt = (enum log_format)atomic_load_explicit(&log_format, memory_order_relaxed);
    const char *lvl = (unsigned)level <= RTX_LOG_ERROR ? level_names[level] : "error";
    size_t limit = LINE_MAX_BYTES - TAIL_RESERVE;
    struct line ln;
    char ts[32];
    ln.len = 0;
    ln.full = false;
    format_time(ts);
    if (!msg) msg = "";

    if (fmt == LOG_FORMAT_JSON) {
        put_raw(&ln, "{\"ts\":\"", 7, limit);
        put_raw(&ln, ts, strlen(ts), limit);
        put_raw(&ln, "\",\"level\":\"", 11, limit);
        put_raw(&ln, lvl, strlen(lvl), limit);
        put_raw(&ln, "\",\"msg\":\"", 9, limit);
        put_escaped(&ln, msg, ESC_QUOTED, limit);
        put_raw(&ln, "\"", 1, limit + 1);
    } else {
        put_raw(&ln, ts, strlen(ts), limit);
        put_raw(&ln, " ", 1, limit);
        put_raw(&ln, lvl, strlen(lvl), limit);
        put_raw(&ln, " ", 1, limit);
        put_escaped(&ln, msg, ESC_BARE, limit);
    }
    if (ap) {
        for (;;) {
            const char *key = va_arg(*ap, const char *);
            if (!key) break;
            const char *value = va_arg(*ap, const char *);
            put_field(&ln, fmt, key, value, limit);
        }
    }
    for (int i = 0; fields && fields[i]; i += 2)
        put_field(&ln, fmt, fields[i], fields[i + 1], limit);
    /* the request id and the closing always fit: TAIL_RESERVE was kept for them */
    ln.full = false;
    if (request_id[0]) put_field(&ln, fmt, "req", request_id, LINE_MAX_BYTES - 3);
    if (fmt == LOG_FORMAT_JSON) put_raw(&ln, "}", 1, LINE_MAX_BYTES - 1);
    put_raw(&ln, "\n", 1, LINE_MAX_BYTES);
    write_all(ln.buf, ln.len);
    errno = saved_errno;
}

void rtx_log(enum rtx_log_level level, const char *msg, ...) {
    if (!rtx_log_enabled(level)) return;
    va_list ap;
    va_start(ap, msg);
    emit(level, msg, &ap, NULL);
    va_end(ap);
}

void rtx_log_fields(enum rtx_log_level level, const char *msg, const char *const *fields) {
    if (!rtx_log_enabled(level)) return;
    emit(level, msg, NULL, fields);
}

void rtx_logf(enum rtx_log_level level, const char *fmt, ...) {
    if (!rtx_log_enabled(level)) return;
    char msg[MESSAGE_MAX];
    int saved_errno = errno; /* so %m and the caller both see the original errno */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    errno = saved_errno;
    emit(level, msg, NULL, NULL);
}
