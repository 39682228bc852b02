/*
 * bench-driver.h - the rtxd side of a benchmark comparison: a table of cases that a Python
 * script (bench/bench_harness.py) times in windows alternating with its reference, or that the
 * driver times alone.
 *
 * DESIGN
 * Every benchmark that compares rtxd with a reference (PyTorch on the GPU, NumPy on the CPU)
 * times both sides the same way: warm-up, then N runs back to back between two
 * synchronizations, several such windows, the median window and its spread. The reference
 * lives in Python and rtxd in C, so the C program is a driver that the Python harness steers
 * over a pipe, one window at a time, alternating with its own windows of the reference; clock
 * and thermal drift then fall on both sides alike. A case is built once ("prepare": graph,
 * uploads, warm-up runs, the route that ran), then timed per window ("window": synchronize,
 * clock, reps runs, synchronize, clock). The line protocol, one command per line on stdin and
 * one JSON object per line on stdout:
 *   list                 {"cases": N} then {"case": i, "name": ..., "shape": ...} per case
 *   prepare I            {"case": I, "name", "shape", "dtype", "route", "flops", "bytes"}
 *                        or {"case": I, "error": "..."}
 *   window I REPS        {"case": I, "ms": per-run milliseconds, "reps": REPS} or an error
 *   release I            {"case": I, "released": true}
 *   quit (or EOF)        exits 0
 * Without --serve the driver prepares and times every selected case itself (bench_run_all) and
 * prints one line each with the median and spread of its windows; its exit status is 1 when a
 * case failed.
 * RTX_BENCH_DELAY_US (environment, microseconds) waits that long after every timed run of the
 * rtxd side, inside the window: a deliberately slowed rtxd, with which the harness's own tests
 * check that a verdict can flip (bench_harness.py has RTX_BENCH_REF_DELAY_US for the reference).
 */
#ifndef RTX_BENCH_DRIVER_H
#define RTX_BENCH_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "bench/bench-util.h"
#include "runtime/runtime.h"

struct bench_case;

/* What a benchmark program gives the driver for one case. */
struct bench_case_i {
    /* Builds the case (graph, inputs on the device, outputs preallocated), runs it at least
     * once to warm up and sets c->route. */
    int (*prepare)(struct bench_case *c, struct rtx_err *err);
    /* Queues one run (it may return before the device finished). */
    int (*run)(struct bench_case *c, struct rtx_err *err);
    /* Waits until every queued run has finished. */
    int (*sync)(struct bench_case *c, struct rtx_err *err);
    /* Frees what prepare made; also after a failed prepare. */
    void (*release)(struct bench_case *c);
};

struct bench_case {
    char name[48];        /* "gemm", "attention" */
    char shape[96];       /* "4096x4096x4096" */
    char dtype[8];        /* "bf16" */
    char route[64];       /* the kernel or route that ran, set by prepare; "" if one only */
    double flops;         /* per run; 0 for memory-bound cases */
    double bytes;         /* moved per run; 0 when not meaningful */
    int reps;             /* runs per window when the driver times alone */
    const struct bench_case_i *iface;
    void *state;          /* the program's */
    bool prepared;
};

/* Fills the identity of a case. */
void bench_case_init(struct bench_case *c, const char *name, const char *dtype,
                     const struct bench_case_i *iface, void *state);

/* Runs the command loop on in/out over cases[0 .. n-1]; returns 0 at quit or EOF, 1 after a
 * malformed command (answered with an error line, the loop goes on) was seen. */
int bench_serve(struct bench_case *cases, int n, FILE *in, FILE *out);

/* Prepares and times every case alone: `windows` windows of c->reps runs each, one JSON line
 * per case with the median, min and max of the per-run time. Returns the cases that failed. */
int bench_run_all(struct bench_case *cases, int n, int windows, FILE *out);

/* Releases every prepared case. */
void bench_release_all(struct bench_case *cases, int n);

#endif /* RTX_BENCH_DRIVER_H */
