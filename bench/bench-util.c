/*
 * bench-util.c - the benchmark programs' shared helpers (bench-util.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench-util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) return isnan(y) - isnan(x); /* NaNs first */
    return (x > y) - (x < y);
}

struct bench_summary bench_summarize(double *v, int n) {
    struct bench_summary s = {NAN, NAN, NAN};
    if (n <= 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = 0;
    while (k < n && isnan(v[k]))
        k++;
    if (k == n) return s;
    v += k;
    n -= k;
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s.lo = v[0];
    s.hi = v[n - 1];
    return s;
}

bool bench_report_only(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--report") == 0) return true;
    const char *rep = getenv("RTX_BENCH_REPORT");
    return rep && *rep && strcmp(rep, "0") != 0;
}

int bench_env_us(const char *name, double *us) {
    const char *v = getenv(name);
    *us = 0;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    *us = strtod(v, &end);
    if (errno || *end || !(*us >= 0) || *us > 1e6) {
        fprintf(stderr, "%s=%s: want microseconds, 0 .. 1000000\n", name, v);
        *us = 0;
        return -1;
    }
    return 0;
}

void bench_wait_us(double us) {
    if (us <= 0) return;
    if (us >= 1000) {
        struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        return;
    }
    double until = bench_now_s() + us * 1e-6;
    while (bench_now_s() < until) {
    }
}

void bench_json_escape(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        fputc((unsigned char)*s < ' ' ? ' ' : *s, out);
    }
}
