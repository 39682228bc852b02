/*
 * gpu-exec.c - the CUDA backend's execution machinery on a GPU: conv2d and the 2-D pools
 * against the CPU reference, CUDA graph capture and replay through rtx_plan_execute, device-
 * resident execution, and the staged copies.
 *
 * DESIGN
 * Parity cases are one-node graphs at odd sizes, strides, pads, dilations, groups and every
 * float dtype, compared as gpu-parity.c does (|gpu - cpu| <= tol * max(1, |cpu|), tol 1e-5,
 * 1e-3 and 8e-3 for f32, f16 and bf16). Replay cases compare against a second CUDA backend
 * made with disable_graphs, which launches the same kernels one by one: replayed results
 * must be the same bits. Each replay case checks the execution modes a plan goes through
 * (fixed buffers, captured, replayed), runs the graph 100 times on two alternating input
 * sets (so stale inputs would show), changes the input shape through a second plan, and
 * moves a plan between backends. A graph whose first node is a gather (an embedding) must be
 * captured and replayed like the rest: its index check is read at the run's end, and an index
 * out of range in the capturing run or a replay fails that run with the CPU backend's message
 * while the next good run replays again, without pool memory left held.
 * RTX_GPU_LIGHT=1 cuts the 100 replays to 10 and skips the timing, for compute-sanitizer.
 * The bf16 transformer block (block-graph.h) runs end to end against the CPU backend: fused
 * GEMM epilogues, reshape views, the fused arena layout and cuDNN's attention all take part,
 * so a GPU-only mistake in any of them (a group overwriting its own input) shows as a
 * difference from the CPU, which replaying against another GPU backend would not reveal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "tests/gpu/block-graph.h"
#include "tests/gpu/gpu-tests.h"

static struct rtx_backend *cpu_be, *gpu_be, *plain_be;
static struct rtx_rng rng;
static bool light; /* RTX_GPU_LIGHT=1: 10 replays instead of 100, no timing (for sanitizers) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tol_of(enum rtx_dtype dt) {
    return dt == RTX_F32 ? 1e-5 : dt == RTX_F16 ? 1e-3 : dt == RTX_BF16 ? 8e-3 : 0.0;
}

/* One execution of a fresh plan of g. */
static int run_once(struct rtx_backend *be, const struct rtx_graph *g, struct rtx_tensor **in,
                    struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_plan *plan = NULL;
    int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, g->n_inputs, NULL, &plan, err);
    if (rc == 0) rc = rtx_plan_execute(plan, be, in, g->n_inputs, out, g->n_outputs, NULL, NULL,
                                       err);
    rtx_plan_free(plan);
    return rc;
}

static void unref_all(struct rtx_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        rtx_tensor_unref(t[i]);
        t[i] = NULL;
    }
}

/* ------------------------------------------------------------------------------------------
 * conv2d and pools against the CPU
 * ---------------------------------------------------------------------------------------- */

struct conv_case {
    int64_t N, C, H, W, O, kh, kw;
    int64_t s[2], p[4], d[2], groups;
    bool bias;
};

static void conv_parity(const struct conv_case *c, enum rtx_dtype dt) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    struct rtx_tensor *in[3] = {NULL}, *ref = NULL, *got = NULL;
    const int64_t xd[4] = {c->N, c->C, c->H, c->W};
    const int64_t wd[4] = {c->O, c->C / c->groups, c->kh, c->kw}, bd[1] = {c->O};
    const char *names[] = {"x", "w", "b"}, *outs[] = {"y"};
    int n_in = c->bias ? 3 : 2;
    int rc = rtx_graph_new("conv", &g, &err);
    if (rc == 0) rc = rtx_graph_add_input(g, "x", dt, 4, xd, &err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "w", dt, 4, wd, &err);
    if (rc >= 0 && c->bias) rc = rtx_graph_add_input(g, "b", dt, 1, bd, &err);
    int nd = rc >= 0 ? rtx_graph_add_node(g, "conv2d", "conv", names, n_in, outs, 1, &err) : rc;
    rc = nd;
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "strides", c->s, 2, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "pads", c->p, 4, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "dilations", c->d, 2, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_int(g, nd, "groups", c->groups, &err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", &err);
    if (rc > 0) rc = 0;
    if (rc == 0) rc = rtx_tensor_random(&rng, dt, 4, xd, &in[0], &err);
    if (rc == 0) rc = rtx_tensor_random(&rng, dt, 4, wd, &in[1], &err);
    if (rc == 0 && c->bias) rc = rtx_tensor_random(&rng, dt, 1, bd, &in[2], &err);
    if (rc == 0 && (rc = run_once(cpu_be, g, in, &ref, &err))) rtx_err_prefix(&err, "cpu");
    if (rc == 0 && (rc = run_once(plain_be, g, in, &got, &err))) rtx_err_prefix(&err, "gpu");
    char why[200] = "";
    bool ok = rc == 0 && gpu_close_to(ref, got, tol_of(dt), why, sizeof why);
    gpu_check(ok, "conv2d %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%lld,%lld "
              "p%lld,%lld,%lld,%lld d%lld,%lld g%lld%s%s%s%s", rtx_dtype_name(dt),
              (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
              (long long)wd[0], (long long)wd[1], (long long)wd[2], (long long)wd[3],
              (long long)c->s[0], (long long)c->s[1], (long long)c->p[0], (long long)c->p[1],
              (long long)c->p[2], (long long)c->p[3], (long long)c->d[0], (long long)c->d[1],
              (long long)c->groups, c->bias ? " bias" : "", ok ? "" : ": ", rc ? err.msg : "",
              why);
    unref_all(in, 3);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(got);
    rtx_graph_free(g);
}

struct pool_case {
    const char *op;
    int64_t N, C, H, W, k[2], s[2], p[4], d[2];
    int ceil_mode, count_include_pad;
};

static void pool_parity(const struct pool_case *c, enum rtx_dtype dt) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    struct rtx_tensor *x = NULL, *ref = NULL, *got = NULL;
    const int64_t xd[4] = {c->N, c->C, c->H, c->W};
    const char *names[] = {"x"}, *outs[] = {"y"};
    bool is_max = strcmp(c->op, "max_pool2d") == 0;
    int rc = rtx_graph_new("pool", &g, &err);
    if (rc == 0) rc = rtx_graph_add_input(g, "x", dt, 4, xd, &err);
    int nd = rc >= 0 ? rtx_graph_add_node(g, c->op, "pool", names, 1, outs, 1, &err) : rc;
    rc = nd;
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "kernel_shape", c->k, 2, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "strides", c->s, 2, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_ints(g, nd, "pads", c->p, 4, &err);
    if (rc >= 0 && is_max) rc = rtx_graph_set_attr_ints(g, nd, "dilations", c->d, 2, &err);
    if (rc >= 0) rc = rtx_graph_set_attr_int(g, nd, "ceil_mode", c->ceil_mode, &err);
    if (rc >= 0 && !is_max)
        rc = rtx_graph_set_attr_int(g, nd, "count_include_pad", c->count_include_pad, &err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", &err);
    if (rc > 0) rc = 0;
    if (rc == 0) rc = rtx_tensor_random(&rng, dt, 4, xd, &x, &err);
    if (rc == 0 && is_max) rtx_tensor_set(x, 3, NAN); /* NaN propagates through max */
    if (rc == 0 && (rc = run_once(cpu_be, g, &x, &ref, &err))) rtx_err_prefix(&err, "cpu");
    if (rc == 0 && (rc = run_once(plain_be, g, &x, &got, &err))) rtx_err_prefix(&err, "gpu");
    char why[200] = "";
    bool ok = rc == 0 && gpu_close_to(ref, got, tol_of(dt), why, sizeof why);
    gpu_check(ok, "%s %s x[%lld,%lld,%lld,%lld] k%lld,%lld s%lld,%lld p%lld,%lld,%lld,%lld "
              "d%lld,%lld ceil %d incl_pad %d%s%s%s", c->op, rtx_dtype_name(dt),
              (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
              (long long)c->k[0], (long long)c->k[1], (long long)c->s[0], (long long)c->s[1],
              (long long)c->p[0], (long long)c->p[1], (long long)c->p[2], (long long)c->p[3],
              (long long)c->d[0], (long long)c->d[1], c->ceil_mode, c->count_include_pad,
              ok ? "" : ": ", rc ? err.msg : "", why);
    rtx_tensor_unref(x);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(got);
    rtx_graph_free(g);
}

static void conv_tests(void) {
    static const struct conv_case convs[] = {
        {1, 3, 7, 9, 5, 3, 3, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},
        {2, 4, 11, 13, 6, 3, 5, {2, 1}, {1, 2, 0, 1}, {1, 2}, 2, true},
        {3, 6, 5, 5, 6, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6, false},   /* depthwise */
        {2, 8, 9, 7, 4, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},    /* 1x1: x as columns */
        {2, 8, 9, 7, 4, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2, false},   /* 1x1, groups */
        {1, 5, 6, 6, 7, 2, 2, {3, 3}, {1, 0, 1, 0}, {2, 2}, 1, false},
        {2, 3, 4, 4, 4, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1, true},    /* 1x1, strided */
        {3, 6, 17, 15, 9, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 3, true},
        {4, 16, 32, 32, 32, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
        {1, 2, 3, 3, 3, 5, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1, true},    /* kernel > input */
    };
    const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_BF16};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_parity(&convs[i], dts[d]);
    static const struct pool_case pools[] = {
        {"max_pool2d", 2, 3, 9, 11, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0},
        {"max_pool2d", 1, 4, 10, 7, {2, 3}, {1, 2}, {0, 1, 0, 1}, {2, 1}, 0, 0},
        {"max_pool2d", 2, 2, 8, 8, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, 0},
        {"avg_pool2d", 2, 3, 9, 11, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0},
        {"avg_pool2d", 2, 3, 9, 11, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 1},
        {"avg_pool2d", 1, 5, 7, 13, {2, 4}, {3, 1}, {1, 2, 0, 1}, {1, 1}, 1, 0},
        {"avg_pool2d", 1, 5, 7, 13, {2, 4}, {3, 1}, {1, 2, 0, 1}, {1, 1}, 1, 1},
        {"avg_pool2d", 3, 2, 5, 5, {5, 5}, {5, 5}, {2, 2, 2, 2}, {1, 1}, 0, 1},
    };
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) pool_parity(&pools[i], dts[d]);
}

/* ------------------------------------------------------------------------------------------
 * Fused matmul + bias (+ tanh GELU) groups against the CPU
 * ---------------------------------------------------------------------------------------- */

/* x [3, 5, 64] -> matmul w1 [64, 96] -> add b1 -> gelu(tanh) -> matmul w2 [96, 64] -> add b2
 * -> add x (a residual): two fused groups of three. bias_first puts the bias as the add's
 * first input; row_bias makes b1 [1, 96], which the fused kernel does not take (the nodes
 * then run one by one). */
static int mlp_graph(enum rtx_dtype dt, bool bias_first, bool row_bias, struct rtx_graph **out,
                     struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    const int64_t xd[3] = {3, 5, 64}, w1d[2] = {64, 96}, w2d[2] = {96, 64};
    const int64_t b1d[2] = {1, 96}, b2d[1] = {64};
    int rc = rtx_graph_new("mlp", &g, err);
    if (rc == 0) rc = rtx_graph_add_input(g, "x", dt, 3, xd, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "w1", dt, 2, w1d, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "b1", dt, row_bias ? 2 : 1,
                                          row_bias ? b1d : b1d + 1, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "w2", dt, 2, w2d, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "b2", dt, 1, b2d, err);
    const char *m1i[] = {"x", "w1"}, *m1o[] = {"m1"}, *a1o[] = {"s1"}, *go[] = {"h"};
    const char *a1i[] = {bias_first ? "b1" : "m1", bias_first ? "m1" : "b1"}, *gi[] = {"s1"};
    const char *m2i[] = {"h", "w2"}, *m2o[] = {"m2"}, *a2i[] = {"m2", "b2"}, *a2o[] = {"s2"};
    const char *ri[] = {"x", "s2"}, *ro[] = {"y"};
    if (rc >= 0) rc = rtx_graph_add_node(g, "matmul", "up", m1i, 2, m1o, 1, err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "add", "up_bias", a1i, 2, a1o, 1, err);
    int gn = rc >= 0 ? rtx_graph_add_node(g, "gelu", "gelu", gi, 1, go, 1, err) : rc;
    rc = gn;
    if (rc >= 0) rc = rtx_graph_set_attr_string(g, gn, "approximate", "tanh", err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "matmul", "down", m2i, 2, m2o, 1, err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "add", "down_bias", a2i, 2, a2o, 1, err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "add", "residual", ri, 2, ro, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Largest |a - b| over the elements. */
static double max_diff(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    double m = 0;
    for (int64_t i = 0; i < rtx_tensor_numel(a); i++) {
        double d = fabs(rtx_tensor_get(a, i) - rtx_tensor_get(b, i));
        m = d > m || isnan(d) ? d : m;
    }
    return m;
}

/* The GPU's (fused) result against the CPU's at tolerance tol, and both against the f32
 * result of the same rounded inputs: the fused path rounds less, so its error may not exceed
 * the CPU's by more than a quarter plus one unit of the dtype at the output's scale. Weights
 * are scaled by 1 / sqrt(K), as a network's are, so outputs stay near 1. */
static void fused_parity(enum rtx_dtype dt, bool bias_first, bool row_bias, double tol) {
    struct rtx_graph *g = NULL, *g32 = NULL;
    struct rtx_err err = {0};
    struct rtx_tensor *in[5] = {NULL}, *in32[5] = {NULL}, *ref = NULL, *got = NULL;
    struct rtx_tensor *truth = NULL;
    int rc = mlp_graph(dt, bias_first, row_bias, &g, &err);
    if (rc == 0) rc = mlp_graph(RTX_F32, bias_first, row_bias, &g32, &err);
    for (int i = 0; i < 5 && rc == 0; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        rc = rtx_tensor_random(&rng, dt, v->ndim, v->dims, &in[i], &err);
        if (rc == 0) rc = rtx_tensor_new(RTX_F32, v->ndim, v->dims, &in32[i], &err);
        double scale = i == 1 ? 1.0 / 8.0 : i == 3 ? 1.0 / sqrt(96.0) : 1.0;
        for (int64_t k = 0; rc == 0 && k < rtx_tensor_numel(in[i]); k++) {
            rtx_tensor_set(in[i], k, rtx_tensor_get(in[i], k) * scale);
            rtx_tensor_set(in32[i], k, rtx_tensor_get(in[i], k)); /* exact */
        }
    }
    if (rc == 0 && (rc = run_once(cpu_be, g, in, &ref, &err))) rtx_err_prefix(&err, "cpu");
    if (rc == 0 && (rc = run_once(cpu_be, g32, in32, &truth, &err)))
        rtx_err_prefix(&err, "cpu f32");
    if (rc == 0 && (rc = run_once(gpu_be, g, in, &got, &err))) rtx_err_prefix(&err, "gpu");
    char why[200] = "";
    bool ok = rc == 0 && gpu_close_to(ref, got, tol, why, sizeof why);
    double e_gpu = rc == 0 ? max_diff(got, truth) : 0, e_cpu = rc == 0 ? max_diff(ref, truth) : 0;
    double unit = dt == RTX_F32 ? 1e-6 : dt == RTX_F16 ? 1.0 / 1024 : 1.0 / 128;
    bool closer = rc == 0 && e_gpu <= 1.25 * e_cpu + unit;
    gpu_check(ok && closer, "fused matmul+bias+gelu / +residual chain %s%s%s: vs cpu within %g, "
              "error vs f32 %.3g (cpu's %.3g)%s%s%s", rtx_dtype_name(dt),
              bias_first ? ", bias first" : "", row_bias ? ", [1, N] bias (not fused)" : "",
              tol, e_gpu, e_cpu, ok ? "" : ": ", rc ? err.msg : "", why);
    unref_all(in, 5);
    unref_all(in32, 5);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(got);
    rtx_tensor_unref(truth);
    rtx_graph_free(g);
    rtx_graph_free(g32);
}

static void fused_tests(void) {
    const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_BF16};
    const double tols[] = {1e-4, 4e-3, 3e-2}; /* two layers, roundings differ from the CPU's */
    for (int d = 0; d < 3; d++) {
        fused_parity(dts[d], false, false, tols[d]);
        fused_parity(dts[d], true, false, tols[d]);
        fused_parity(dts[d], false, true, tols[d]);
    }
}

/* ------------------------------------------------------------------------------------------
 * Graph replay
 * ---------------------------------------------------------------------------------------- */

/* Random inputs for g, with dynamic dims set to `batch`. */
static int inputs_for(const struct rtx_graph *g, int64_t batch, struct rtx_tensor **in,
                      struct rtx_err *err) {
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        int64_t dims[RTX_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? batch : v->dims[d];
        int rc = rtx_tensor_random(&rng, v->dtype, v->ndim, dims, &in[i], err);
        if (rc) return rc;
    }
    return 0;
}

#define MAX_IO 4

/* Runs plan on the graph backend `runs` times on inputs alternating between set A and B and
 * checks every result bit for bit against refs[set]; the modes of runs 1-3 as expected. */
static bool replay_runs(const char *what, struct rtx_plan *plan, const struct rtx_graph *g,
                        struct rtx_tensor *in[2][MAX_IO], struct rtx_tensor *ref[2][MAX_IO],
                        int runs, const enum rtx_exec_mode *want) {
    struct rtx_err err = {0};
    struct rtx_tensor *out[MAX_IO] = {NULL};
    int bad = -1, rc = 0;
    enum rtx_exec_mode mode = RTX_EXEC_PLAIN;
    for (int r = 0; r < runs && bad < 0; r++) {
        struct rtx_exec_stats st;
        int set = r % 2;
        rc = rtx_plan_execute(plan, gpu_be, in[set], g->n_inputs, out, g->n_outputs, NULL, &st,
                              &err);
        mode = st.mode;
        if (rc || (want && r < 3 && st.mode != want[r])) bad = r;
        for (int o = 0; o < g->n_outputs && bad < 0; o++)
            if (!gpu_same_bits(ref[set][o], out[o])) bad = r;
        unref_all(out, g->n_outputs);
    }
    return gpu_check(bad < 0, "%s: %d runs replay the plain results bit for bit%s%s%s (run %d, "
                     "mode %d)%s%s", what, runs, rc ? ": " : "", rc ? err.msg : "",
                     bad >= 0 ? " FAILED" : "", bad, (int)mode,
                     rtx_plan_capture_note(plan)[0] ? "; " : "", rtx_plan_capture_note(plan));
}

/* The plain backend's results for both input sets. */
static int references(const struct rtx_graph *g, struct rtx_tensor *in[2][MAX_IO],
                      struct rtx_tensor *ref[2][MAX_IO], struct rtx_err *err) {
    for (int s = 0; s < 2; s++) {
        int rc = run_once(plain_be, g, in[s], ref[s], err);
        if (rc) return rc;
    }
    return 0;
}

static const enum rtx_exec_mode replay_modes[3] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED,
                                                   RTX_EXEC_REPLAYED};

/* Replay of g at batch sizes b1 and b2 (two plans), 100 runs, backend switches. */
static void replay_graph(const char *name, const struct rtx_graph *g, int64_t b1, int64_t b2) {
    struct rtx_err err = {0};
    struct rtx_tensor *in[2][2][MAX_IO] = {{{NULL}}}, *ref[2][2][MAX_IO] = {{{NULL}}};
    struct rtx_plan *plan[2] = {NULL};
    const int64_t batch[2] = {b1, b2};
    char what[160];
    int rc = g->n_inputs <= MAX_IO && g->n_outputs <= MAX_IO ? 0 : RTX_ELIMIT;
    for (int b = 0; b < 2 && rc == 0; b++) {
        for (int s = 0; s < 2 && rc == 0; s++) rc = inputs_for(g, batch[b], in[b][s], &err);
        if (rc == 0) rc = references(g, in[b], ref[b], &err);
        if (rc == 0) rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in[b][0],
                                       g->n_inputs, NULL, &plan[b], &err);
    }
    if (!gpu_check(rc == 0, "%s: inputs, plans and plain references%s%s", name,
                   rc ? ": " : "", err.msg))
        goto out;
    snprintf(what, sizeof what, "%s batch %lld", name, (long long)b1);
    replay_runs(what, plan[0], g, in[0], ref[0], light ? 10 : 100, replay_modes);
    /* a new shape is a new plan with its own capture; the first plan still replays */
    snprintf(what, sizeof what, "%s batch %lld after batch %lld", name, (long long)b2,
             (long long)b1);
    replay_runs(what, plan[1], g, in[1], ref[1], 6, replay_modes);
    const enum rtx_exec_mode again[3] = {RTX_EXEC_REPLAYED, RTX_EXEC_REPLAYED,
                                         RTX_EXEC_REPLAYED};
    snprintf(what, sizeof what, "%s batch %lld again", name, (long long)b1);
    replay_runs(what, plan[0], g, in[0], ref[0], 4, again);
    /* another backend drops the graph; back on the GPU the plan captures again */
    struct rtx_tensor *out[MAX_IO] = {NULL};
    struct rtx_exec_stats st;
    rc = rtx_plan_execute(plan[0], cpu_be, in[0][0], g->n_inputs, out, g->n_outputs, NULL, &st,
                          &err);
    gpu_check(rc == 0 && st.mode == RTX_EXEC_PLAIN, "%s: the plan runs on the CPU in between%s%s",
              name, rc ? ": " : "", err.msg);
    unref_all(out, g->n_outputs);
    snprintf(what, sizeof what, "%s batch %lld back on the GPU", name, (long long)b1);
    replay_runs(what, plan[0], g, in[0], ref[0], 4, replay_modes);
out:
    for (int b = 0; b < 2; b++) {
        rtx_plan_free(plan[b]);
        for (int s = 0; s < 2; s++) {
            unref_all(in[b][s], MAX_IO);
            unref_all(ref[b][s], MAX_IO);
        }
    }
}

/* Cancellation before a launch, and device-resident execution, on one plan of g. */
static void replay_cancel_and_device(const char *name, const struct rtx_graph *g) {
    struct rtx_err err = {0};
    struct rtx_tensor *in[2][MAX_IO] = {{NULL}}, *ref[2][MAX_IO] = {{NULL}};
    struct rtx_tensor *out[MAX_IO] = {NULL}, *dev_in[MAX_IO] = {NULL}, *host = NULL;
    struct rtx_plan *plan = NULL;
    int rc = inputs_for(g, 2, in[0], &err);
    if (rc == 0) rc = inputs_for(g, 2, in[1], &err);
    if (rc == 0) rc = references(g, in, ref, &err);
    if (rc == 0) rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in[0], g->n_inputs, NULL,
                                   &plan, &err);
    for (int r = 0; r < 2 && rc == 0; r++) /* fixed, then captured */
        rc = rtx_plan_execute(plan, gpu_be, in[0], g->n_inputs, out, g->n_outputs, NULL, NULL,
                              &err);
    unref_all(out, g->n_outputs);
    if (!gpu_check(rc == 0, "%s: plan captured for the cancel test%s%s", name, rc ? ": " : "",
                   err.msg))
        goto out;
    volatile int cancel = 1;
    rc = rtx_plan_execute(plan, gpu_be, in[0], g->n_inputs, out, g->n_outputs, &cancel, NULL,
                          &err);
    gpu_check(rc == RTX_ECANCELED && strstr(err.msg, "graph launch"),
              "%s: a set cancel flag stops the replay before its launch (%s)", name, err.msg);
    cancel = 0;
    rc = rtx_plan_execute(plan, gpu_be, in[1], g->n_inputs, out, g->n_outputs, &cancel, NULL,
                          &err);
    gpu_check(rc == 0 && gpu_same_bits(ref[1][0], out[0]), "%s: replays again after the cancel%s%s",
              name, rc ? ": " : "", rc ? err.msg : "");
    unref_all(out, g->n_outputs);

    /* inputs already on the device, outputs left there */
    for (int i = 0; i < g->n_inputs && rc == 0; i++)
        rc = rtx_backend_upload(gpu_be, in[1][i], &dev_in[i], &err);
    struct rtx_exec_stats st = {0};
    for (int r = 0; r < 3 && rc == 0; r++) {
        unref_all(out, g->n_outputs);
        rc = rtx_plan_execute_device(plan, gpu_be, dev_in, g->n_inputs, out, g->n_outputs, NULL,
                                     &st, &err);
    }
    if (rc == 0) rc = rtx_backend_download(gpu_be, out[0], &host, &err);
    gpu_check(rc == 0 && st.mode == RTX_EXEC_REPLAYED && gpu_same_bits(ref[1][0], host),
              "%s: device-resident execution replays with the plain result%s%s", name,
              rc ? ": " : "", rc ? err.msg : "");
    rtx_tensor_unref(host);
out:
    unref_all(out, MAX_IO);
    unref_all(dev_in, MAX_IO);
    rtx_plan_free(plan);
    for (int s = 0; s < 2; s++) {
        unref_all(in[s], MAX_IO);
        unref_all(ref[s], MAX_IO);
    }
}

/* A random graph over x [b, 24] and y [24, 24]: matmuls, elementwise ops, norms, softmax. */
static int random_graph(uint64_t seed, struct rtx_graph **out, struct rtx_err *err) {
    struct rtx_rng r;
    rtx_rng_seed(&r, seed);
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new("random", &g, err);
    const int64_t xd[2] = {-1, 24}, yd[2] = {24, 24};
    if (rc == 0) rc = rtx_graph_add_input(g, "x", RTX_F32, 2, xd, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "y", RTX_F32, 2, yd, err);
    char names[40][16];
    int n = 0;
    snprintf(names[n++], sizeof names[0], "x");
    static const char *const ops[] = {"matmul", "add", "mul", "tanh", "gelu", "softmax",
                                      "layer_norm", "sigmoid", "sub"};
    for (int k = 0; k < 16 && rc >= 0; k++) {
        const char *op = ops[rtx_rng_next(&r) % (sizeof ops / sizeof ops[0])];
        const char *a = names[n - 1], *b = names[rtx_rng_next(&r) % (uint64_t)n];
        char o[16];
        snprintf(o, sizeof o, "v%d", k);
        const char *outs[] = {o};
        if (strcmp(op, "matmul") == 0) {
            const char *ins[] = {a, "y"};
            rc = rtx_graph_add_node(g, op, "", ins, 2, outs, 1, err);
        } else if (strcmp(op, "add") == 0 || strcmp(op, "mul") == 0 || strcmp(op, "sub") == 0) {
            const char *ins[] = {a, b};
            rc = rtx_graph_add_node(g, op, "", ins, 2, outs, 1, err);
        } else if (strcmp(op, "layer_norm") == 0) {
            const char *ins[] = {a};
            rc = rtx_graph_add_node(g, op, "", ins, 1, outs, 1, err);
        } else {
            const char *ins[] = {a};
            rc = rtx_graph_add_node(g, op, "", ins, 1, outs, 1, err);
        }
        snprintf(names[n++], sizeof names[0], "%s", o);
    }
    if (rc >= 0) rc = rtx_graph_add_output(g, names[n - 1], err);
    if (rc >= 0) rc = rtx_graph_add_output(g, names[n / 2], err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* x [10, 6] f32 and indices [4] of idt; y = tanh(gather(x, i)): a gather first, as in every
 * ONNX transformer's embedding. */
static int gather_graph(enum rtx_dtype idt, struct rtx_graph **out, struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    const int64_t xd[2] = {10, 6}, id[1] = {4};
    const char *gin[] = {"x", "i"}, *gout[] = {"g"}, *tin[] = {"g"}, *tout[] = {"y"};
    int rc = rtx_graph_new("gather", &g, err);
    if (rc == 0) rc = rtx_graph_add_input(g, "x", RTX_F32, 2, xd, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "i", idt, 1, id, err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "gather", "gather", gin, 2, gout, 1, err);
    if (rc >= 0) rc = rtx_graph_add_node(g, "tanh", "tanh", tin, 1, tout, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Device memory held by callers of gpu_be's pools (device and pinned), for leak checks. */
static size_t held_bytes(void) {
    struct rtx_mem_pool_stats d, h;
    if (rtx_backend_cuda_pool_stats(gpu_be, &d, &h, NULL) != 0) return (size_t)-1;
    return d.total.bytes_allocated + h.total.bytes_allocated;
}

/* One run of plan on `in` that must fail with the CPU backend's message for the same inputs,
 * in mode `want`. */
static void gather_bad_run(const char *what, struct rtx_plan *plan, const struct rtx_graph *g,
                           struct rtx_tensor **in, enum rtx_exec_mode want) {
    struct rtx_err ec = {0}, eg = {0};
    struct rtx_tensor *out[MAX_IO] = {NULL};
    struct rtx_exec_stats st = {0};
    int rc_cpu = run_once(cpu_be, g, in, out, &ec);
    unref_all(out, MAX_IO);
    int rc = rtx_plan_execute(plan, gpu_be, in, g->n_inputs, out, g->n_outputs, NULL, &st, &eg);
    unref_all(out, MAX_IO);
    gpu_check(rc_cpu == RTX_EINVAL && rc == RTX_EINVAL && st.mode == want &&
                  strcmp(ec.msg, eg.msg) == 0 && strstr(eg.msg, "'gather'"),
              "%s: an index out of range fails the %s run with the CPU's message (gpu: %s; "
              "cpu: %s)", what, rtx_exec_mode_name(want), eg.msg, ec.msg);
}

/* A plan whose first node is a gather is captured on run 2 and replayed after: the gather's
 * index check is read at the run's end, not inside the node. A bad index fails the captured
 * and the replayed run with the CPU's message, and the next good run replays again (the
 * graph re-arms its check); nothing stays allocated. */
static void gather_capture_test(enum rtx_dtype idt, int64_t bad_index) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    const int64_t xd[2] = {10, 6}, id[1] = {4};
    struct rtx_tensor *in[2][MAX_IO] = {{NULL}}, *ref[2][MAX_IO] = {{NULL}};
    struct rtx_tensor *bad[MAX_IO] = {NULL};
    struct rtx_plan *plan[2] = {NULL};
    char what[64];
    snprintf(what, sizeof what, "gather graph, %s indices", rtx_dtype_name(idt));
    size_t held0 = held_bytes();
    int rc = gather_graph(idt, &g, &err);
    for (int s = 0; s < 2 && rc == 0; s++) {
        rc = rtx_tensor_random(&rng, RTX_F32, 2, xd, &in[s][0], &err);
        if (rc == 0) rc = rtx_tensor_new(idt, 1, id, &in[s][1], &err);
        for (int k = 0; k < 4 && rc == 0; k++) /* negative ones too: they wrap */
            rtx_tensor_set(in[s][1], k, (double)((k * 3 + s) % 10 - (k == 1 ? 10 : 0)));
    }
    if (rc == 0) rc = rtx_tensor_new(idt, 1, id, &bad[1], &err);
    for (int k = 0; k < 4 && rc == 0; k++)
        rtx_tensor_set(bad[1], k, k == 2 ? (double)bad_index : (double)k);
    if (rc == 0) bad[0] = rtx_tensor_ref(in[0][0]);
    if (rc == 0) rc = references(g, in, ref, &err);
    for (int k = 0; k < 2 && rc == 0; k++)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in[0], 2, NULL, &plan[k], &err);
    if (!gpu_check(rc == 0, "%s%s%s", what, rc ? ": " : "", err.msg)) goto out;
    if (replay_runs(what, plan[0], g, in, ref, 6, replay_modes))
        gpu_check(rtx_plan_capture_note(plan[0])[0] == '\0',
                  "%s: the capture succeeded, with no note (%s)", what,
                  rtx_plan_capture_note(plan[0]));
    /* run 7 replays with a bad index, run 8 and on replay good ones */
    gather_bad_run(what, plan[0], g, bad, RTX_EXEC_REPLAYED);
    const enum rtx_exec_mode again[3] = {RTX_EXEC_REPLAYED, RTX_EXEC_REPLAYED,
                                         RTX_EXEC_REPLAYED};
    char after[96];
    snprintf(after, sizeof after, "%s after the error", what);
    replay_runs(after, plan[0], g, in, ref, 3, again);
    /* a bad index in the run that captures: its check goes with the graph it launches */
    struct rtx_tensor *out[MAX_IO] = {NULL};
    rc = rtx_plan_execute(plan[1], gpu_be, in[0], 2, out, 1, NULL, NULL, &err);
    unref_all(out, MAX_IO);
    if (gpu_check(rc == 0, "%s: second plan, run 1%s%s", what, rc ? ": " : "", err.msg)) {
        snprintf(after, sizeof after, "%s, second plan", what);
        gather_bad_run(after, plan[1], g, bad, RTX_EXEC_CAPTURED);
        snprintf(after, sizeof after, "%s, second plan after the error", what);
        replay_runs(after, plan[1], g, in, ref, 2, again);
    }
out:
    rtx_plan_free(plan[0]);
    rtx_plan_free(plan[1]);
    for (int s = 0; s < 2; s++) {
        unref_all(in[s], MAX_IO);
        unref_all(ref[s], MAX_IO);
    }
    unref_all(bad, MAX_IO);
    rtx_graph_free(g);
    size_t held1 = held_bytes();
    gpu_check(held0 != (size_t)-1 && held1 == held0,
              "%s: the plans, their graphs and the checks leave no pool memory held (%zu bytes "
              "before, %zu after)", what, held0, held1);
}

/* Time per run of the transformer example, node by node and replayed. */
static void replay_speed(const struct rtx_graph *g) {
    struct rtx_err err = {0};
    struct rtx_tensor *in[MAX_IO] = {NULL}, *dev_in[MAX_IO] = {NULL}, *out[MAX_IO] = {NULL};
    struct rtx_backend *bes[2] = {plain_be, gpu_be};
    double ms[2] = {0, 0};
    int rc = inputs_for(g, 8, in, &err);
    for (int i = 0; i < g->n_inputs && rc == 0; i++)
        rc = rtx_backend_upload(gpu_be, in[i], &dev_in[i], &err);
    for (int b = 0; b < 2 && rc == 0; b++) {
        struct rtx_plan *plan = NULL;
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, g->n_inputs, NULL, &plan, &err);
        const int reps = 200;
        double t0 = 0;
        for (int r = -3; r < reps && rc == 0; r++) {
            if (r == 0) t0 = now_s();
            unref_all(out, g->n_outputs);
            rc = rtx_plan_execute_device(plan, bes[b], dev_in, g->n_inputs, out, g->n_outputs,
                                         NULL, NULL, &err);
        }
        ms[b] = (now_s() - t0) * 1e3 / reps;
        unref_all(out, MAX_IO);
        rtx_plan_free(plan);
    }
    /* a figure, not a check (replay_tests checks the same plans' results) */
    if (rc == 0)
        gpu_note("transformer example, batch 8, device-resident: %.3f ms node by node, %.3f ms "
                 "replayed", ms[0], ms[1]);
    else
        gpu_check(false, "transformer example, batch 8, device-resident, timed: %s", err.msg);
    unref_all(in, MAX_IO);
    unref_all(dev_in, MAX_IO);
}

static void replay_tests(void) {
    const char *build = getenv("RTX_BUILD");
    const char *examples[] = {"mlp", "transformer_block"};
    struct rtx_graph *tb = NULL;
    for (int e = 0; e < 2; e++) {
        char path[512];
        snprintf(path, sizeof path, "%s/examples/%s.rtxg", build ? build : "build", examples[e]);
        struct rtx_graph *g = NULL;
        struct rtx_err err = {0};
        int rc = rtx_graph_load_file(path, NULL, &g, &err);
        if (!gpu_check(rc == 0, "load %s%s%s", path, rc ? ": " : "", err.msg)) continue;
        replay_graph(examples[e], g, 1, 3);
        replay_cancel_and_device(examples[e], g);
        if (e == 1) tb = g;
        else rtx_graph_free(g);
    }
    for (uint64_t seed = 1; seed <= 3; seed++) {
        struct rtx_graph *g = NULL;
        struct rtx_err err = {0};
        int rc = random_graph(seed, &g, &err);
        char name[48];
        snprintf(name, sizeof name, "random graph %llu", (unsigned long long)seed);
        if (!gpu_check(rc == 0, "%s%s%s", name, rc ? ": " : "", err.msg)) continue;
        replay_graph(name, g, 5, 17);
        rtx_graph_free(g);
    }
    gather_capture_test(RTX_I64, 10);
    gather_capture_test(RTX_I32, -11);
    if (tb && !light) replay_speed(tb);
    rtx_graph_free(tb);
}

/* ------------------------------------------------------------------------------------------
 * Staged copies: chunked through pinned memory on the copy stream
 * ---------------------------------------------------------------------------------------- */

static void copy_tests(void) {
    struct rtx_err err = {0};
    const int64_t sizes[] = {5, (1 << 20) + 3, (37 << 20) / 4 + 1}; /* f32 elements */
    for (size_t k = 0; k < 3; k++) {
        struct rtx_tensor *h = NULL, *d = NULL, *d2 = NULL, *back = NULL, *h2 = NULL;
        int rc = rtx_tensor_random(&rng, RTX_F32, 1, &sizes[k], &h, &err);
        if (rc == 0) rc = rtx_backend_upload(gpu_be, h, &d, &err);
        if (rc == 0) rc = rtx_backend_upload(gpu_be, h, &d2, &err);
        if (rc == 0) rc = rtx_tensor_random(&rng, RTX_F32, 1, &sizes[k], &h2, &err);
        /* host into an existing device tensor, then device to device */
        if (rc == 0) rc = rtx_backend_copy_into(gpu_be, h2, d, &err);
        if (rc == 0) rc = rtx_backend_copy_into(gpu_be, d, d2, &err);
        if (rc == 0) rc = rtx_backend_download(gpu_be, d2, &back, &err);
        gpu_check(rc == 0 && gpu_same_bits(h2, back), "copies of %lld bytes (upload, copy_into from "
                  "host and device, download) keep every bit%s%s",
                  (long long)(sizes[k] * 4), rc ? ": " : "", err.msg);
        rtx_tensor_unref(h);
        rtx_tensor_unref(h2);
        rtx_tensor_unref(d);
        rtx_tensor_unref(d2);
        rtx_tensor_unref(back);
    }
    /* a downloaded tensor (pinned memory of the backend) outlives its backend */
    {
        struct rtx_backend *be = NULL;
        struct rtx_cuda_options o = {.device = 0};
        struct rtx_tensor *src = NULL, *dev = NULL, *out = NULL;
        const int64_t n = (3 << 20) + 7;
        int rc = rtx_backend_cuda_new(&o, &be, &err);
        if (rc == 0) rc = rtx_tensor_random(&rng, RTX_F32, 1, &n, &src, &err);
        if (rc == 0) rc = rtx_backend_upload(be, src, &dev, &err);
        if (rc == 0) rc = rtx_backend_download(be, dev, &out, &err);
        rtx_tensor_unref(dev);
        rtx_backend_free(be); /* out still holds a pinned block: the backend waits for it */
        gpu_check(rc == 0 && gpu_same_bits(src, out), "a downloaded tensor outlives its backend%s%s",
                  rc ? ": " : "", err.msg);
        rtx_tensor_unref(out); /* destroys the backend */
        rtx_tensor_unref(src);
    }
    struct rtx_tensor *h = NULL, *small = NULL;
    const int64_t one = 1, two = 2;
    int rc = rtx_tensor_new(RTX_F32, 1, &one, &h, &err);
    if (rc == 0) rc = rtx_tensor_new(RTX_F32, 1, &two, &small, &err);
    if (rc == 0) rc = rtx_backend_copy_into(gpu_be, small, h, &err);
    gpu_check(rc == RTX_EINVAL, "copy_into refuses a size mismatch (%s)", err.msg);
    rc = rtx_backend_copy_into(gpu_be, h, h, &err);
    gpu_check(rc == RTX_EINVAL && strstr(err.msg, "not cuda"),
              "copy_into refuses a host destination (%s)", err.msg);
    rtx_tensor_unref(h);
    rtx_tensor_unref(small);
}

/* ------------------------------------------------------------------------------------------
 * The bf16 transformer block against the CPU
 * ---------------------------------------------------------------------------------------- */

/* max |a - b| / max |b| and mean |a - b| / mean |b|. */
static void block_errors(const struct rtx_tensor *a, const struct rtx_tensor *b, double *max_rel,
                         double *mean_rel) {
    double md = 0, mb = 0, sd = 0, sb = 0;
    int64_t n = rtx_tensor_numel(b);
    for (int64_t i = 0; i < n; i++) {
        double x = rtx_tensor_get(a, i), y = rtx_tensor_get(b, i), d = fabs(x - y);
        if (!(d <= md)) md = d; /* NaN sticks */
        if (fabs(y) > mb) mb = fabs(y);
        sd += d;
        sb += fabs(y);
    }
    *max_rel = mb > 0 ? md / mb : md;
    *mean_rel = sb > 0 ? sd / sb : sd;
}

static void block_test(void) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    struct rtx_tensor *x = NULL, *want = NULL;
    struct rtx_plan *plan = NULL;
    const int64_t dims[3] = {2, 128, 256};
    int rc = block_graph_new(2, 128, 256, 4, 7, &g, &err);
    if (rc == 0) rc = rtx_tensor_random(&rng, RTX_BF16, 3, dims, &x, &err);
    if (rc == 0) rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err);
    if (rc == 0) rc = rtx_plan_execute(plan, cpu_be, &x, 1, &want, 1, NULL, NULL, &err);
    if (!gpu_check(rc == 0, "bf16 block [2,128,256] h4 on the CPU%s%s", rc ? ": " : "", err.msg))
        goto out;
    for (int r = 0; r < 3; r++) { /* fixed, captured, replayed */
        struct rtx_tensor *got = NULL;
        struct rtx_exec_stats st = {0};
        rc = rtx_plan_execute(plan, gpu_be, &x, 1, &got, 1, NULL, &st, &err);
        double max_rel = 0, mean_rel = 0;
        if (rc == 0) block_errors(got, want, &max_rel, &mean_rel);
        gpu_check(rc == 0 && st.mode == replay_modes[r] && max_rel <= 4e-2 && mean_rel <= 1e-2,
                  "bf16 block [2,128,256] h4 on the GPU, run %d (%s) against the CPU: max err "
                  "%.3g of max |y| (tol 4e-2), mean err %.3g of mean |y| (tol 1e-2)%s%s",
                  r + 1, rtx_exec_mode_name(st.mode), max_rel, mean_rel,
                  rc ? ": " : "", err.msg);
        rtx_tensor_unref(got);
    }
out:
    rtx_plan_free(plan);
    rtx_tensor_unref(want);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}

void gpu_exec_tests(int index) {
    struct rtx_err err = {0};
    struct rtx_cpu_options co = {.n_threads = 0};
    struct rtx_cuda_options go = {.device = index}, po = {.device = index,
                                                          .disable_graphs = true};
    rtx_rng_seed(&rng, 20261129);
    const char *l = getenv("RTX_GPU_LIGHT");
    light = l && strcmp(l, "1") == 0;
    int rc = rtx_backend_cpu_new(&co, &cpu_be, &err);
    if (rc == 0) rc = rtx_backend_cuda_new(&go, &gpu_be, &err);
    if (rc == 0) rc = rtx_backend_cuda_new(&po, &plain_be, &err);
    if (gpu_check(rc == 0, "backends for the execution tests on device %d%s%s", index,
                  rc ? ": " : "", err.msg)) {
        gpu_check(rtx_backend_can_capture(gpu_be) && !rtx_backend_can_capture(plain_be) &&
                      !rtx_backend_can_capture(cpu_be),
                  "only the CUDA backend with graphs on can capture");
        conv_tests();
        fused_tests();
        copy_tests();
        replay_tests();
        block_test();
    }
    rtx_backend_free(plain_be);
    rtx_backend_free(gpu_be);
    rtx_backend_free(cpu_be);
    plain_be = gpu_be = cpu_be = NULL;
}
