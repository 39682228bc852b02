/*
 * bench-driver.c - the benchmark driver's command loop and its stand-alone timing
 * (bench-driver.h has the protocol).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench-driver.h"

#include <string.h>

void bench_case_init(struct bench_case *c, const char *name, const char *dtype,
                     const struct bench_case_i *iface, void *state) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->dtype, sizeof c->dtype, "%s", dtype);
    c->iface = iface;
    c->state = state;
    c->reps = 20;
}

static void print_error(FILE *out, int i, const char *msg) {
    fprintf(out, "{\"case\": %d, \"error\": \"", i);
    bench_json_escape(out, msg);
    fputs("\"}\n", out);
    fflush(out);
}

static void print_identity(FILE *out, int i, const struct bench_case *c) {
    fprintf(out, "{\"case\": %d, \"name\": \"", i);
    bench_json_escape(out, c->name);
    fputs("\", \"shape\": \"", out);
    bench_json_escape(out, c->shape);
    fprintf(out, "\", \"dtype\": \"%s\"", c->dtype);
}

static int prepare(struct bench_case *c, struct rtx_err *err) {
    if (c->prepared) return 0;
    int rc = c->iface->prepare(c, err);
    if (rc) {
        c->iface->release(c);
        return rc;
    }
    c->prepared = true;
    return 0;
}

/* One window: reps runs between two synchronizations; *ms gets milliseconds per run. */
static int window(struct bench_case *c, int reps, double *ms, struct rtx_err *err) {
    double delay_us;
    if (bench_env_us("RTX_BENCH_DELAY_US", &delay_us))
        return rtx_err_set(err, RTX_EINVAL, "RTX_BENCH_DELAY_US: want microseconds");
    int rc = c->iface->sync(c, err);
    double t0 = bench_now_s();
    for (int r = 0; r < reps && rc == 0; r++) {
        rc = c->iface->run(c, err);
        if (rc == 0) bench_wait_us(delay_us);
    }
    if (rc == 0) rc = c->iface->sync(c, err);
    *ms = (bench_now_s() - t0) * 1e3 / reps;
    return rc;
}

static void release(struct bench_case *c) {
    if (!c->prepared) return;
    c->iface->release(c);
    c->prepared = false;
}

void bench_release_all(struct bench_case *cases, int n) {
    for (int i = 0; i < n; i++) release(&cases[i]);
}

int bench_serve(struct bench_case *cases, int n, FILE *in, FILE *out) {
    char line[256];
    int bad = 0;
    while (fgets(line, sizeof line, in)) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            /* one answer per line: the rest of an overlong line is not a command of its own */
            int ch;
            while ((ch = fgetc(in)) != EOF && ch != '\n') continue;
            print_error(out, -1, "bad command: line too long");
            bad = 1;
            continue;
        }
        char cmd[16] = "";
        int i = -1, reps = 0;
        int got = sscanf(line, "%15s %d %d", cmd, &i, &reps);
        if (got < 1) continue;
        if (strcmp(cmd, "quit") == 0) break;
        if (strcmp(cmd, "list") == 0) {
            fprintf(out, "{\"cases\": %d}\n", n);
            for (int k = 0; k < n; k++) {
                print_identity(out, k, &cases[k]);
                fputs("}\n", out);
            }
            fflush(out);
            continue;
        }
        if (got < 2 || i < 0 || i >= n) {
            print_error(out, i, "bad command: want list, prepare I, window I REPS, release I "
                                "or quit with I a case index");
            bad = 1;
            continue;
        }
        struct bench_case *c = &cases[i];
        struct rtx_err err = {0};
        if (strcmp(cmd, "prepare") == 0) {
            if (prepare(c, &err)) {
                print_error(out, i, err.msg[0] ? err.msg : "prepare failed");
                continue;
            }
            print_identity(out, i, c);
            fputs(", \"route\": \"", out);
            bench_json_escape(out, c->route);
            fprintf(out, "\", \"flops\": %.17g, \"bytes\": %.17g}\n", c->flops, c->bytes);
            fflush(out);
        } else if (strcmp(cmd, "window") == 0 && got == 3 && reps > 0) {
            double ms = 0;
            if (!c->prepared) {
                print_error(out, i, "window before prepare");
            } else if (window(c, reps, &ms, &err)) {
                print_error(out, i, err.msg[0] ? err.msg : "run failed");
            } else {
                fprintf(out, "{\"case\": %d, \"ms\": %.6f, \"reps\": %d}\n", i, ms, reps);
                fflush(out);
            }
        } else if (strcmp(cmd, "release") == 0) {
            release(c);
            fprintf(out, "{\"case\": %d, \"released\": true}\n", i);
            fflush(out);
        } else {
            print_error(out, i, "bad command");
            bad = 1;
        }
    }
    bench_release_all(cases, n);
    return bad;
}

int bench_run_all(struct bench_case *cases, int n, int windows, FILE *out) {
    int failed = 0;
    double ms[64];
    if (windows < 1) windows = 1;
    if (windows > 64) windows = 64;
    for (int i = 0; i < n; i++) {
        struct bench_case *c = &cases[i];
        struct rtx_err err = {0};
        int rc = prepare(c, &err);
        for (int w = 0; w < windows && rc == 0; w++) rc = window(c, c->reps, &ms[w], &err);
        if (rc) {
            print_error(out, i, err.msg[0] ? err.msg : "failed");
            failed++;
            release(c);
            continue;
        }
        struct bench_summary sm = bench_summarize(ms, windows);
        double med = sm.median;
        print_identity(out, i, c);
        fputs(", \"route\": \"", out);
        bench_json_escape(out, c->route);
        fprintf(out, "\", \"ms\": %.6f, \"ms_min\": %.6f, \"ms_max\": %.6f, \"windows\": %d, "
                     "\"reps\": %d", med, sm.lo, sm.hi, windows, c->reps);
        if (c->flops > 0) fprintf(out, ", \"tflops\": %.3f", c->flops / (med * 1e-3) / 1e12);
        if (c->bytes > 0) fprintf(out, ", \"gbps\": %.2f", c->bytes / (med * 1e-3) / 1e9);
        fputs("}\n", out);
        fflush(out);
        release(c);
    }
    return failed;
}
