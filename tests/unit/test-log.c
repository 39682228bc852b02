/*
 * test-log.c - structured logging: text and JSON lines, escaping, level filtering, the
 * per-thread request id, line length limits and concurrent writers, checked by capturing
 * stderr through a pipe.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------------------------------
 * Capturing stderr: fd 2 goes to a pipe that a thread drains into a buffer.
 * ---------------------------------------------------------------------------------------- */

struct capture {
    int saved_fd, read_fd;
    pthread_t reader;
    char *buf;
    size_t len, cap;
};

static void *drain_pipe(void *arg) {
    struct capture *c = arg;
    for (;;) {
        if (c->cap - c->len < 4096) {
            c->cap = c->cap * 2 + 8192;
            c->buf = realloc(c->buf, c->cap);
            ck_assert_ptr_nonnull(c->buf);
        }
        ssize_t n = read(c->read_fd, c->buf + c->len, c->cap - c->len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        c->len += (size_t)n;
    }
    c->buf[c->len] = '\0';
    return NULL;
}

static void capture_start(struct capture *c) {
    int fds[2];
    memset(c, 0, sizeof *c);
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stderr);
    c->saved_fd = dup(STDERR_FILENO);
    ck_assert_int_ge(c->saved_fd, 0);
    ck_assert_int_ge(dup2(fds[1], STDERR_FILENO), 0);
    close(fds[1]);
    c->read_fd = fds[0];
    ck_assert_int_eq(pthread_create(&c->reader, NULL, drain_pipe, c), 0);
}

/* Restores stderr and returns everything written meanwhile (free() it). */
static char *capture_stop(struct capture *c) {
    dup2(c->saved_fd, STDERR_FILENO); /* closes the pipe's last write end */
    close(c->saved_fd);
    pthread_join(c->reader, NULL);
    close(c->read_fd);
    return c->buf;
}

/* ------------------------------------------------------------------------------------------
 * Checks
 * ---------------------------------------------------------------------------------------- */

/* Whether s starts with a UTC timestamp "YYYY-MM-DDTHH:MM:SS.mmmZ". */
static bool is_timestamp(const char *s) {
    static const char pattern[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    for (size_t i = 0; i < sizeof pattern - 1; i++) {
        if (pattern[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != pattern[i]) return false;
    }
    return true;
}

/* Skips a JSON string at *p (which is at the opening quote); false when it is not valid. */
static bool json_string(const char **p) {
    const char *s = *p;
    if (*s++ != '"') return false;
    while (*s != '"') {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20) return false;
        if (c == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i]) return false;
                s += 5;
                continue;
            }
            if (!*s || !strchr("\"\\/bfnrt", *s)) return false;
        }
        s++;
    }
    *p = s + 1;
    return true;
}

/* Whether line (without its newline) is one flat JSON object whose values are strings, true,
 * false or null - all rtx_log writes. */
static bool json_flat_object(const char *line) {
    const char *p = line;
    if (*p++ != '{') return false;
    for (bool first = true;; first = false) {
        if (*p == '}' && first) return p[1] == '\0';
        if (!json_string(&p) || *p++ != ':') return false;
        if (*p == '"') {
            if (!json_string(&p)) return false;
        } else if (strncmp(p, "true", 4) == 0 || strncmp(p, "null", 4) == 0) {
            p += 4;
        } else {
            return false;
        }
        if (*p == '}') return p[1] == '\0';
        if (*p++ != ',') return false;
    }
}

/* Asserts out is exactly one text line: a timestamp, a space, then `rest` (with newline). */
static void assert_text_line(const char *out, const char *rest) {
    ck_assert_msg(is_timestamp(out), "no timestamp: %s", out);
    ck_assert_str_eq(out + 24, rest);
}

/* Asserts out is one JSON line {"ts":"<timestamp>", then `rest` (with newline). */
static void assert_json_line(const char *out, const char *rest) {
    ck_assert_msg(strncmp(out, "{\"ts\":\"", 7) == 0, "not JSON: %s", out);
    ck_assert_msg(is_timestamp(out + 7), "no timestamp: %s", out);
    ck_assert_str_eq(out + 31, rest);
    size_t n = strlen(out);
    ck_assert(n > 0 && out[n - 1] == '\n');
    char *line = strndup(out, n - 1);
    ck_assert_msg(json_flat_object(line), "invalid JSON: %s", line);
    free(line);
}

static void reset_log(void) {
    rtx_log_configure("text", "info");
    rtx_log_set_request_id(NULL);
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

START_TEST(log_configure_rejects_unknown_values) {
    ck_assert_int_eq(rtx_log_configure("text", "info"), 0);
    ck_assert_int_eq(rtx_log_configure("xml", "info"), RTX_EINVAL);
    ck_assert_int_eq(rtx_log_configure("text", "loud"), RTX_EINVAL);
    ck_assert_int_eq(rtx_log_configure(NULL, "info"), RTX_EINVAL);
    ck_assert(rtx_log_enabled(RTX_LOG_WARN));
    ck_assert(!rtx_log_enabled(RTX_LOG_DEBUG));
    /* a rejected call changes nothing */
    ck_assert_int_eq(rtx_log_configure("json", "bogus"), RTX_EINVAL);
    ck_assert(!rtx_log_enabled(RTX_LOG_DEBUG));
}
END_TEST

START_TEST(log_text_line_has_time_level_message_fields) {
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_INFO, "job finished", "job", "j1", "state", "succeeded", NULL);
    char *out = capture_stop(&c);
    assert_text_line(out, " info job finished job=j1 state=succeeded\n");
    free(out);
}
END_TEST

START_TEST(log_text_quotes_values_that_need_it) {
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_ERROR, "two\nlines", "path", "/a b", "q", "say \"hi\"", "eq", "a=b", "empty",
            "", "bs", "c:\\x", "nul", NULL, NULL);
    char *out = capture_stop(&c);
    assert_text_line(out, " error two\\nlines path=\"/a b\" q=\"say \\\"hi\\\"\" eq=\"a=b\" "
                          "empty=\"\" bs=\"c:\\\\x\" nul=(null)\n");
    free(out);
}
END_TEST

START_TEST(log_json_line_is_exact) {
    rtx_log_configure("json", "info");
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_WARN, "disk low", "free", "12%", "none", NULL, NULL);
    char *out = capture_stop(&c);
    reset_log();
    assert_json_line(out, "\",\"level\":\"warn\",\"msg\":\"disk low\",\"free\":\"12%\","
                          "\"none\":null}\n");
    free(out);
}
END_TEST

START_TEST(log_json_escapes_quotes_controls_and_bad_utf8) {
    rtx_log_configure("json", "debug");
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_DEBUG, "q\"b\\s/", "ctl", "\x01\b\t\n\r\x1f\x7f", "utf8", "caf\xc3\xa9", "bad",
            "a\xff"
            "b\xc3",
            "k\"ey", "v", NULL);
    char *out = capture_stop(&c);
    reset_log();
    assert_json_line(out, "\",\"level\":\"debug\",\"msg\":\"q\\\"b\\\\s/\","
                          "\"ctl\":\"\\u0001\\u0008\\t\\n\\r\\u001f\\u007f\","
                          "\"utf8\":\"caf\xc3\xa9\",\"bad\":\"a\xef\xbf\xbd"
                          "b\xef\xbf\xbd\","
                          "\"k\\\"ey\":\"v\"}\n");
    free(out);
}
END_TEST

START_TEST(log_utf8_overlong_and_surrogates_are_replaced) {
    rtx_log_configure("json", "info");
    struct capture c;
    capture_start(&c);
    /* overlong '/', a UTF-16 surrogate, past U+10FFFF, then a valid 4-byte character */
    rtx_log(RTX_LOG_INFO, "u", "v", "\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xf0\x9f\x98\x80",
            NULL);
    char *out = capture_stop(&c);
    reset_log();
    const char *r = "\xef\xbf\xbd";
    char want[256];
    snprintf(want, sizeof want,
             "\",\"level\":\"info\",\"msg\":\"u\",\"v\":\"%s%s|%s%s%s|%s%s%s%s|"
             "\xf0\x9f\x98\x80\"}\n",
             r, r, r, r, r, r, r, r, r);
    assert_json_line(out, want);
    free(out);
}
END_TEST

START_TEST(log_level_off_silences_even_errors) {
    ck_assert_int_eq(rtx_log_configure("text", "off"), 0);
    ck_assert(!rtx_log_enabled(RTX_LOG_ERROR));
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_ERROR, "e", NULL);
    rtx_logf(RTX_LOG_ERROR, "ef %d", 1);
    char *out = capture_stop(&c);
    reset_log();
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

START_TEST(log_level_filters_lines) {
    rtx_log_configure("text", "warn");
    ck_assert(!rtx_log_enabled(RTX_LOG_INFO));
    ck_assert(rtx_log_enabled(RTX_LOG_WARN));
    ck_assert(rtx_log_enabled(RTX_LOG_ERROR));
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_DEBUG, "d", NULL);
    rtx_log(RTX_LOG_INFO, "i", NULL);
    rtx_logf(RTX_LOG_INFO, "if %d", 1);
    rtx_log(RTX_LOG_WARN, "w", NULL);
    rtx_logf(RTX_LOG_ERROR, "e %d", 2);
    char *out = capture_stop(&c);
    reset_log();
    ck_assert_ptr_null(strstr(out, " d\n"));
    ck_assert_ptr_null(strstr(out, " i\n"));
    ck_assert_ptr_null(strstr(out, "if 1"));
    char *second = strchr(out, '\n') + 1;
    assert_text_line(second, " error e 2\n");
    second[0] = '\0';
    assert_text_line(out, " warn w\n");
    free(out);
}
END_TEST

START_TEST(log_logf_formats_and_keeps_errno) {
    struct capture c;
    capture_start(&c);
    errno = ENOENT;
    rtx_logf(RTX_LOG_INFO, "open %s: %m (%d)", "x.db", 7);
    ck_assert_int_eq(errno, ENOENT);
    rtx_log(RTX_LOG_INFO, "plain", NULL);
    ck_assert_int_eq(errno, ENOENT);
    char *out = capture_stop(&c);
    char want[128];
    snprintf(want, sizeof want, " info open x.db: %s (7)\n", strerror(ENOENT));
    char *second = strchr(out, '\n') + 1;
    assert_text_line(second, " info plain\n");
    second[0] = '\0';
    assert_text_line(out, want);
    free(out);
}
END_TEST

struct req_thread {
    char id_seen_at_start[16];
};

static void *log_from_thread(void *arg) {
    struct req_thread *t = arg;
    snprintf(t->id_seen_at_start, sizeof t->id_seen_at_start, "%s", rtx_log_request_id());
    rtx_log(RTX_LOG_INFO, "in thread", NULL);
    rtx_log_set_request_id("r-2");
    rtx_log(RTX_LOG_INFO, "in thread", NULL);
    return NULL;
}

START_TEST(log_request_id_is_per_thread) {
    struct capture c;
    rtx_log_set_request_id("r-1");
    ck_assert_str_eq(rtx_log_request_id(), "r-1");
    capture_start(&c);
    rtx_log(RTX_LOG_INFO, "main", "k", "v", NULL);
    struct req_thread t = {0};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, log_from_thread, &t), 0);
    pthread_join(th, NULL);
    rtx_log(RTX_LOG_INFO, "main again", NULL);
    rtx_log_set_request_id("");
    rtx_log(RTX_LOG_INFO, "cleared", NULL);
    char *out = capture_stop(&c);
    ck_assert_str_eq(t.id_seen_at_start, "");
    ck_assert_str_eq(rtx_log_request_id(), "");

    const char *want[] = {" info main k=v req=r-1\n", " info in thread\n",
                          " info in thread req=r-2\n", " info main again req=r-1\n",
                          " info cleared\n"};
    char *line = out;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        char saved = nl[1];
        nl[1] = '\0';
        assert_text_line(line, want[i]);
        nl[1] = saved;
        line = nl + 1;
    }
    ck_assert_str_eq(line, "");
    free(out);
}
END_TEST

START_TEST(log_json_carries_request_id) {
    rtx_log_configure("json", "info");
    rtx_log_set_request_id("req \"7\"");
    struct capture c;
    capture_start(&c);
    rtx_log(RTX_LOG_INFO, "m", "a", "b", NULL);
    char *out = capture_stop(&c);
    reset_log();
    assert_json_line(out, "\",\"level\":\"info\",\"msg\":\"m\",\"a\":\"b\","
                          "\"req\":\"req \\\"7\\\"\"}\n");
    free(out);
}
END_TEST

START_TEST(log_long_lines_are_cut_and_stay_well_formed) {
    size_t big = 3 * PIPE_BUF;
    char *msg = malloc(big + 1), *val = malloc(big + 1), *ctl = malloc(big + 1);
    memset(msg, 'm', big);
    memset(val, 'v', big);
    memset(ctl, '\x01', big); /* 6 bytes each when escaped */
    msg[big] = val[big] = ctl[big] = '\0';
    char rid[300];
    memset(rid, '\x01', sizeof rid - 1); /* longer than kept, every byte escaped to 6 */
    rid[sizeof rid - 1] = '\0';
    char rid_json[1100] = "", rid_text[1024] = " req=\"";
    for (int i = 0; i < 128; i++)
        strcat(rid_text, "\\u0001"); /* 128 bytes are kept */
    strcat(rid_text, "\"");
    snprintf(rid_json, sizeof rid_json, ",\"req\":%s}", rid_text + 5);

    for (int f = 0; f < 2; f++) {
        rtx_log_configure(f ? "json" : "text", "info");
        rtx_log_set_request_id(rid);
        struct capture c;
        capture_start(&c);
        rtx_log(RTX_LOG_INFO, msg, "k", "v", NULL);
        rtx_log(RTX_LOG_INFO, "short", "a", val, "b", "never", NULL);
        rtx_log(RTX_LOG_INFO, "short", "c", ctl, NULL);
        rtx_log(RTX_LOG_INFO, "fields", "key", "0123456789012345678901234567890123456789", "k1",
                val, "k2", "x", NULL);
        char *out = capture_stop(&c);
        rtx_log_set_request_id(NULL);
        int lines = 0;
        for (char *line = out; *line; lines++) {
            char *nl = strchr(line, '\n');
            ck_assert_ptr_nonnull(nl);
            ck_assert_uint_le((size_t)(nl - line) + 1, PIPE_BUF);
            *nl = '\0';
            ck_assert_msg(strstr(line, "...") != NULL, "not marked as cut: %.80s", line);
            /* the request id is whole and ends the line */
            const char *tail = f ? rid_json : rid_text;
            size_t len = strlen(line), tl = strlen(tail);
            ck_assert_msg(len > tl && strcmp(line + len - tl, tail) == 0, "tail: %s",
                          line + (len > 40 ? len - 40 : 0));
            if (f) ck_assert_msg(json_flat_object(line), "invalid JSON: %.200s", line);
            line = nl + 1;
        }
        ck_assert_int_eq(lines, 4);
        free(out);
    }
    reset_log();
    free(msg);
    free(val);
    free(ctl);
}
END_TEST

#define WRITERS 4
#define LINES_PER_WRITER 2000

static void *write_lines(void *arg) {
    long id = (long)arg;
    char rid[32], n[32];
    snprintf(rid, sizeof rid, "w%ld", id);
    rtx_log_set_request_id(rid);
    for (int i = 0; i < LINES_PER_WRITER; i++) {
        snprintf(n, sizeof n, "%d", i);
        if (id == 0 && i % 10 == 0) rtx_log_configure(i % 20 ? "json" : "text", "info");
        rtx_log(RTX_LOG_INFO, "line", "writer", rid, "n", n, "pad",
                "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", NULL);
    }
    return NULL;
}

START_TEST(log_concurrent_writers_never_interleave) {
    struct capture c;
    capture_start(&c);
    pthread_t th[WRITERS];
    for (long i = 0; i < WRITERS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, write_lines, (void *)i), 0);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    char *out = capture_stop(&c);
    reset_log();
    int count[WRITERS] = {0}, lines = 0;
    for (char *line = out; *line; lines++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        int w = -1, n = -1;
        if (line[0] == '{') {
            ck_assert_msg(json_flat_object(line), "bad line: %s", line);
            char *p = strstr(line, "\"writer\":\"w");
            ck_assert_ptr_nonnull(p);
            ck_assert_int_eq(sscanf(p, "\"writer\":\"w%d\",\"n\":\"%d\"", &w, &n), 2);
            ck_assert_ptr_nonnull(strstr(line, "\"req\":\"w"));
        } else {
            ck_assert_msg(is_timestamp(line), "bad line: %s", line);
            char *p = strstr(line, " writer=w");
            ck_assert_ptr_nonnull(p);
            ck_assert_int_eq(sscanf(p, " writer=w%d n=%d", &w, &n), 2);
        }
        ck_assert(w >= 0 && w < WRITERS);
        ck_assert_int_eq(n, count[w]); /* each writer's lines arrive whole and in order */
        count[w]++;
        line = nl + 1;
    }
    ck_assert_int_eq(lines, WRITERS * LINES_PER_WRITER);
    free(out);
}
END_TEST

Suite *rtx_log_suite(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, reset_log, reset_log);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, log_configure_rejects_unknown_values);
    tcase_add_test(tc, log_text_line_has_time_level_message_fields);
    tcase_add_test(tc, log_text_quotes_values_that_need_it);
    tcase_add_test(tc, log_json_line_is_exact);
    tcase_add_test(tc, log_json_escapes_quotes_controls_and_bad_utf8);
    tcase_add_test(tc, log_utf8_overlong_and_surrogates_are_replaced);
    tcase_add_test(tc, log_level_filters_lines);
    tcase_add_test(tc, log_level_off_silences_even_errors);
    tcase_add_test(tc, log_logf_formats_and_keeps_errno);
    tcase_add_test(tc, log_request_id_is_per_thread);
    tcase_add_test(tc, log_json_carries_request_id);
    tcase_add_test(tc, log_long_lines_are_cut_and_stay_well_formed);
    tcase_add_test(tc, log_concurrent_writers_never_interleave);
    suite_add_tcase(s, tc);
    return s;
}
