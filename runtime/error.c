/*
 * error.c - error codes, messages and the allocation wrappers (with a failure-injection hook
 * for out-of-memory tests).
 */
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

const char *rtx_strerror(int code) {
    switch (code) {
    case RTX_OK: return "success";
#define RTX_ERRNO_CASE(name, msg) case RTX_##name: return msg;
        RTX_ERRNO_MAP(RTX_ERRNO_CASE)
#undef RTX_ERRNO_CASE
    default: break;
    }
    if (code < 0 && code > RTX__ERRNO_FIRST) return strerror(-code);
    return "unknown error";
}

int rtx_err_set(struct rtx_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int rtx_err_prefix(struct rtx_err *err, const char *fmt, ...) {
    if (!err) return RTX_EINVAL;
    char prefix[sizeof err->msg];
    char old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 2;
    size_t m = strnlen(old, room - 1);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
    return err->code;
}

/* ---- allocation ---- */

static atomic_long fail_countdown; /* 0: off; otherwise allocations left before failing */

static int should_fail(void) {
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n == 0) return 0;
    if (n == 1) return 1; /* stays at 1: every later allocation fails too */
    atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
    return 0;
}

void rtx_alloc_fail_after(long n) { atomic_store(&fail_countdown, n < 0 ? 0 : n); }

void *rtx_malloc(size_t bytes) { return should_fail() ? NULL : malloc(bytes ? bytes : 1); }

void *rtx_calloc(size_t n, size_t bytes) {
    if (should_fail()) return NULL;
    return calloc(n ? n : 1, bytes ? bytes : 1);
}

void *rtx_realloc(void *p, size_t bytes) {
    return should_fail() ? NULL : realloc(p, bytes ? bytes : 1);
}

void rtx_free(void *p) { free(p); }

char *rtx_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = rtx_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *rtx_malloc_aligned(size_t bytes) {
    if (should_fail()) return NULL;
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
    return p;
}

void rtx_free_aligned(void *p) { free(p); }

int64_t rtx_err_retry_after_ms(const char *msg, size_t len) {
    static const char hint[] = "retry after ";
    const char *at = msg ? memmem(msg, len, hint, sizeof hint - 1) : NULL;
    if (!at) return -1;
    int64_t ms = 0;
    const char *p = at + sizeof hint - 1, *end = msg + len;
    if (p >= end || *p < '0' || *p > '9') return -1;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (ms > (INT64_MAX - 9) / 10) return -1;
        ms = ms * 10 + (*p - '0');
    }
    return ms;
}

void rtx_host_memory_keep_freed(void) {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
}
