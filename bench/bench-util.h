/*
 * bench-util.h - what every benchmark program shares: the clock, the median and spread of
 * timing windows, the report-only switch and the slow-a-side knobs (docs/benchmarks.md, "How
 * every comparison is timed"; bench/bench_harness.py is the Python side of the same rules).
 */
#ifndef RTX_BENCH_UTIL_H
#define RTX_BENCH_UTIL_H

#include <stdbool.h>
#include <stdio.h>

/* Seconds of CLOCK_MONOTONIC. */
double bench_now_s(void);

/* Median, min and max of a set of window figures. */
struct bench_summary {
    double median, lo, hi; /* NaN when no figure was a number */
};

/* Summarizes v[0 .. n-1], skipping NaNs (a window that measured nothing). Sorts v in place. */
struct bench_summary bench_summarize(double *v, int n);

/* Whether targets are reported without judging: --report among argv[1 .. argc-1], or
 * RTX_BENCH_REPORT set to anything but "" or "0". */
bool bench_report_only(int argc, char **argv);

/* Microseconds from the environment variable `name` (RTX_BENCH_DELAY_US: slow rtxd's side;
 * RTX_BENCH_REF_DELAY_US: slow the reference): 0 into *us when unset; -1, with a message on
 * stderr naming the variable, when it is not a number in 0 .. 1000000. */
int bench_env_us(const char *name, double *us);

/* Waits us microseconds. Busy-waits below a millisecond (a sleep's wake-up would add more
 * than the wait), sleeps above. */
void bench_wait_us(double us);

/* Writes s as a JSON string body (quotes and backslashes escaped, controls as spaces). */
void bench_json_escape(FILE *out, const char *s);

#endif /* RTX_BENCH_UTIL_H */
