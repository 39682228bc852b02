/*
 * bench-cpu.c - rtxd's side of the CPU benchmark (bench/bench_cpu.py): graphs run through the
 * runtime's plan and executor on the CPU backend, exactly as rtxrun runs a graph file, timed
 * by the benchmark driver (bench-driver.h) in windows that bench_cpu.py alternates with NumPy.
 *
 * DESIGN
 * Two cases. "gemm": a one-node f32 matmul graph [N,N] x [N,N] made with the graph builder;
 * the CPU backend makes it one cblas_sgemm call that OpenBLAS threads itself. "transformer_block":
 * a graph file (by default the example that make-examples writes), its -1 dimensions bound to
 * --batch. Each case does what rtxrun does between loading and reporting: validate, bind seeded
 * random inputs (rtx_tensor_random, as rtxrun --random-inputs), plan once (rtx_plan_new), then
 * every run drops the previous outputs and calls rtx_plan_execute on one CPU backend made with
 * --threads (0, the default, is rtxrun's default too: one thread per online CPU; the backend
 * gives OpenBLAS the same count). Planning and the two warm-up runs belong to prepare and are
 * not timed. With --data DIR prepare writes each case's inputs and the outputs of its last
 * warm-up run as DIR/CASE-VALUE.npy, so that the reference can check it computes the same
 * thing from the same inputs.
 *
 * Usage: rtx-bench-cpu [--serve] [--quick] [--threads N] [--gemm N] [--block GRAPH]
 *                      [--batch B] [--data DIR] [--windows N] | --blas
 * --blas prints OpenBLAS's own description of itself (version, build, core) and exits.
 * Without --serve it times every case alone and prints one JSON line each (bench-driver.h);
 * exit status 1 when a case failed, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench-driver.h"
#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend.h"

#define WARMUP_RUNS 2

static const char usage_text[] =
    "usage: rtx-bench-cpu [--serve] [--quick] [--threads N] [--gemm N] [--block GRAPH]\n"
    "                     [--batch B] [--data DIR] [--windows N] | --blas\n"
    "  --serve        answer bench/bench_harness.py's commands on stdin (bench/bench-driver.h)\n"
    "  --quick        GEMM 256 (unless --gemm), 3 windows\n"
    "  --threads N    CPU backend threads (default 0: one per online CPU, as rtxrun)\n"
    "  --gemm N       the GEMM case's size: [N,N] x [N,N] (default 1024)\n"
    "  --block GRAPH  the transformer-block graph file (default\n"
    "                 $RTX_BUILD/examples/transformer_block.rtxg, else build/examples/...)\n"
    "  --batch B      the value of the graph's -1 dimensions (default 1)\n"
    "  --data DIR     write each case's inputs and outputs as DIR/CASE-VALUE.npy at prepare\n"
    "  --windows N    windows per case when timing alone (default 7)\n"
    "  --blas         print the linked OpenBLAS's configuration and exit\n";

/* One graph case. */
struct graph_case {
    const char *path;               /* graph file, or NULL: the GEMM graph made here */
    int64_t gemm_n;                 /* GEMM size when path is NULL */
    uint64_t seed;                  /* of the random inputs */
    struct rtx_graph *g;
    struct rtx_plan *plan;
    struct rtx_tensor **inputs;     /* g->n_inputs */
    struct rtx_tensor **outputs;    /* g->n_outputs: the last run's */
};

static struct rtx_backend *be; /* the one CPU backend every case runs on */
static int n_threads;          /* its thread count */
static int64_t batch = 1;      /* -1 dimensions of the graphs' inputs */
static const char *data_dir;   /* --data, or NULL */

static void drop_outputs(struct graph_case *s) {
    for (int i = 0; s->outputs && i < s->g->n_outputs; i++) {
        rtx_tensor_unref(s->outputs[i]);
        s->outputs[i] = NULL;
    }
}

/* The GEMM graph: c = a @ b with a, b f32 [n, n]. */
static int gemm_graph(int64_t n, struct rtx_graph **out, struct rtx_err *err) {
    const int64_t dims[2] = {n, n};
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new("gemm", &g, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "a", RTX_F32, 2, dims, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "b", RTX_F32, 2, dims, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "matmul", "mm", (const char *const[]){"a", "b"}, 2,
                                (const char *const[]){"c"}, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "c", err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Writes DIR/CASE-NAME.npy. */
static int save_value(const char *case_name, const char *value, const struct rtx_tensor *t,
                      struct rtx_err *err) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s-%s.npy", data_dir, case_name, value);
    if (n < 0 || (size_t)n >= sizeof path)
        return rtx_err_set(err, RTX_EINVAL, "--data path too long");
    int rc = rtx_npy_save(path, t, err);
    return rc < 0 ? rc : 0;
}

static int case_run(struct bench_case *c, struct rtx_err *err) {
    struct graph_case *s = c->state;
    drop_outputs(s);
    struct rtx_exec_stats stats = {0};
    int rc = rtx_plan_execute(s->plan, be, s->inputs, s->g->n_inputs, s->outputs,
                              s->g->n_outputs, NULL, &stats, err);
    return rc < 0 ? rc : 0;
}

static int case_sync(struct bench_case *c, struct rtx_err *err) {
    (void)c;
    int rc = rtx_backend_synchronize(be, err);
    return rc < 0 ? rc : 0;
}

static void case_release(struct bench_case *c) {
    struct graph_case *s = c->state;
    if (s->g) {
        drop_outputs(s);
        for (int i = 0; s->inputs && i < s->g->n_inputs; i++)
            rtx_tensor_unref(s->inputs[i]);
    }
    free(s->inputs);
    free(s->outputs);
    rtx_plan_free(s->plan);
    rtx_graph_free(s->g);
    s->inputs = s->outputs = NULL;
    s->plan = NULL;
    s->g = NULL;
}

/* Graph, inputs, plan and warm-up runs, as rtxrun does them; then the --data files. */
static int case_prepare(struct bench_case *c, struct rtx_err *err) {
    struct graph_case *s = c->state;
    struct rtx_limits lim = rtx_limits_default();
    int rc = s->path ? rtx_graph_load_file(s->path, &lim, &s->g, err)
                     : gemm_graph(s->gemm_n, &s->g, err);
    if (rc < 0) return rc;
    if ((rc = rtx_graph_validate(s->g, &lim, err)) < 0) return rc;
    const struct rtx_graph *g = s->g;
    s->inputs = calloc((size_t)g->n_inputs + 1, sizeof *s->inputs);
    s->outputs = calloc((size_t)g->n_outputs + 1, sizeof *s->outputs);
    if (!s->inputs || !s->outputs) return rtx_err_set(err, RTX_ENOMEM, "case tables");
    struct rtx_rng rng;
    rtx_rng_seed(&rng, s->seed);
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        int64_t dims[RTX_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? batch : v->dims[d];
        if ((rc = rtx_tensor_random(&rng, v->dtype, v->ndim, dims, &s->inputs[i], err)) < 0)
            return rc;
    }
    rc = rtx_plan_new(g, (const struct rtx_tensor *const *)s->inputs, g->n_inputs, &lim,
                      &s->plan, err);
    if (rc < 0) return rc;
    for (int r = 0; r < WARMUP_RUNS; r++)
        if ((rc = case_run(c, err)) != 0) return rc;

    if (s->path) {
        const struct rtx_tensor *x = s->inputs[0];
        char dims[80];
        rtx_shape_str(x->dtype, x->ndim, x->dims, dims, sizeof dims);
        snprintf(c->shape, sizeof c->shape, "%s %s", g->values[g->inputs[0]].name, dims);
        snprintf(c->route, sizeof c->route, "%d-node plan, CPU backend + OpenBLAS, %d thread%s",
                 g->n_nodes, n_threads, n_threads == 1 ? "" : "s");
    } else {
        int64_t n = s->gemm_n;
        snprintf(c->route, sizeof c->route, "OpenBLAS cblas_sgemm (%s), %d thread%s",
                 openblas_get_corename(), n_threads, n_threads == 1 ? "" : "s");
        c->flops = 2.0 * (double)n * (double)n * (double)n;
    }
    for (int i = 0; data_dir && i < g->n_inputs; i++)
        if ((rc = save_value(c->name, g->values[g->inputs[i]].name, s->inputs[i], err)) != 0)
            return rc;
    for (int i = 0; data_dir && i < g->n_outputs; i++)
        if ((rc = save_value(c->name, g->values[g->outputs[i]].name, s->outputs[i], err)) != 0)
            return rc;
    return 0;
}

static const struct bench_case_i graph_case_iface = {
    .prepare = case_prepare,
    .run = case_run,
    .sync = case_sync,
    .release = case_release,
};

/* Parses a decimal integer in [lo, hi]. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int usage_error(const char *fmt, const char *arg) {
    fputs("rtx-bench-cpu: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    fputs(usage_text, stderr);
    return 2;
}

int main(int argc, char **argv) {
    bool serve = false, quick = false;
    long long threads = 0, gemm_n = 0, windows = 0;
    const char *block = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long b;
        if (strcmp(a, "--serve") == 0) {
            serve = true;
        } else if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (strcmp(a, "--blas") == 0) {
            printf("%s\n", openblas_get_config());
            return 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(a, "--threads") == 0 && v) {
            if (!parse_int(v, 0, 1024, &threads)) return usage_error("bad --threads '%s'", v);
            i++;
        } else if (strcmp(a, "--gemm") == 0 && v) {
            if (!parse_int(v, 1, 32768, &gemm_n)) return usage_error("bad --gemm '%s'", v);
            i++;
        } else if (strcmp(a, "--batch") == 0 && v) {
            if (!parse_int(v, 1, 1 << 20, &b)) return usage_error("bad --batch '%s'", v);
            batch = b;
            i++;
        } else if (strcmp(a, "--windows") == 0 && v) {
            if (!parse_int(v, 1, 64, &windows)) return usage_error("bad --windows '%s'", v);
            i++;
        } else if (strcmp(a, "--block") == 0 && v) {
            block = v;
            i++;
        } else if (strcmp(a, "--data") == 0 && v) {
            data_dir = v;
            i++;
        } else {
            return usage_error("unknown option or missing value: '%s'", a);
        }
    }
    if (gemm_n == 0) gemm_n = quick ? 256 : 1024;
    if (windows == 0) windows = quick ? 3 : 7;
    char block_default[4096];
    if (!block) {
        const char *build = getenv("RTX_BUILD");
        snprintf(block_default, sizeof block_default, "%s/examples/transformer_block.rtxg",
                 build && *build ? build : "build");
        block = block_default;
    }

    struct rtx_err err = {0};
    struct rtx_cpu_options cpu = {.n_threads = (int)threads};
    if (rtx_backend_cpu_new(&cpu, &be, &err) < 0) {
        fprintf(stderr, "rtx-bench-cpu: CPU backend: %s\n", err.msg);
        return 1;
    }
    /* the backend's own rule for 0 (kernels/cpu/backend-cpu.c), for the route */
    n_threads = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;

    struct graph_case states[] = {
        {.path = NULL, .gemm_n = gemm_n, .seed = 1},
        {.path = block, .seed = 2},
    };
    struct bench_case cases[2];
    bench_case_init(&cases[0], "gemm", "f32", &graph_case_iface, &states[0]);
    bench_case_init(&cases[1], "transformer_block", "f32", &graph_case_iface, &states[1]);
    snprintf(cases[0].shape, sizeof cases[0].shape, "%lldx%lldx%lld", gemm_n, gemm_n, gemm_n);

    int rc;
    if (serve) {
        rc = bench_serve(cases, 2, stdin, stdout);
    } else {
        rc = bench_run_all(cases, 2, (int)windows, stdout) ? 1 : 0;
    }
    bench_release_all(cases, 2);
    rtx_backend_free(be);
    return rc;
}
