/*
 * gpu-attention.c - the CUDA backend's attention against the CPU reference, aimed at the fused
 * kernels (kernels/cuda/attention-flash.cu): f16 and bf16, head dims 64 and 128, query and key
 * lengths 1, 17, 127 and 1000 (equal and different), causal and not, on the default route and
 * on each tile configuration of both fused kernels (mma.sync and wgmma) and on cuDNN's fused
 * engine (attention-cudnn.c; cuDNN is optional to rtxd at run time but expected here: a
 * libcudnn.so.9 that cannot be loaded is a failed check, unless RTX_ALLOW_SKIP lists "cudnn",
 * tests/allow-skip.h, when the route's cases are left out with a note), boolean masks (a padding
 * mask over the keys, a full [Lq, Lk] mask with a dead row), additive masks with -inf entries,
 * batch and heads > 1, a scale that makes the softmax peaked; the cases the fused kernel does
 * not take (head dim 96, f32) through the unfused route; both routes on one case, agreeing;
 * and RTX_ATTN_ROUTE's error for a value it does not know.
 *
 * DESIGN
 * Part of rtx-gpu-tests (gpu_attention_tests, called per healthy device like the parity
 * suite). Each case is a one-node graph run through rtx_plan_execute on both backends with the
 * same random host inputs (uniform [-1, 1), fixed seed). The error is max |gpu - cpu| over
 * max |cpu| (NaN must meet NaN): the CPU computes in f32 and rounds once, the GPU rounds the
 * probabilities to the input dtype before P V (as FlashAttention does) and rounds the output
 * once, so the bound is a few units of the dtype's precision: 4e-3 for f16, 2e-2 for bf16
 * (as tests/gpu/gpu-linalg-tests.c allows the unfused route).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "tests/allow-skip.h"
#include "tests/gpu/gpu-tests.h"

enum fill { F_RAND, F_BOOL_PAD, F_BOOL_DEAD_ROW, F_ADD };

struct ain {
    enum rtx_dtype dt;
    int ndim;
    int64_t dims[4];
    enum fill fill;
};

struct acase {
    char what[160];
    int n_in;         /* 3, or 4 with a mask */
    struct ain in[4]; /* q, k, v, mask */
    int causal;       /* -1: attribute not set */
    double scale;     /* 0: attribute not set */
};

static struct rtx_backend *cpu_be, *gpu_be;
static const char *route; /* RTX_ATTN_ROUTE for the GPU runs; NULL: as the environment has it */
static uint64_t rng = 0x51f15eedull;

static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Random data for one input. Masks: F_BOOL_PAD keeps the first 3/4 of the keys of the last
 * dim (at least one); F_BOOL_DEAD_ROW is random with query row 1 fully masked; F_ADD is
 * -inf at 20%, else in (-1, 0]. */
static struct rtx_tensor *make_input(const struct ain *ai) {
    struct rtx_tensor *t = NULL;
    struct rtx_err err = {0};
    if (rtx_tensor_new(ai->dt, ai->ndim, ai->dims, &t, &err) < 0) return NULL;
    int64_t n = rtx_tensor_numel(t);
    int64_t lk = ai->dims[ai->ndim - 1];
    int64_t lq = ai->ndim >= 2 ? ai->dims[ai->ndim - 2] : 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t col = i % lk, row = (i / lk) % lq;
        double v;
        switch (ai->fill) {
        case F_BOOL_PAD: v = col == 0 || col < (3 * lk) / 4; break;
        case F_BOOL_DEAD_ROW: v = (lq > 1 && row == 1) ? 0.0 : urand() < 0.7; break;
        case F_ADD: v = urand() < 0.2 ? -INFINITY : -urand(); break;
        default: v = 2.0 * urand() - 1.0; break;
        }
        rtx_tensor_set(t, i, v);
    }
    return t;
}

/* Runs the attention case on be; *out gets the host output. */
static int run_on(struct rtx_backend *be, const struct acase *c, struct rtx_tensor **in,
                  struct rtx_tensor **out, struct rtx_err *err) {
    static const char *const names[4] = {"q", "k", "v", "mask"};
    struct rtx_graph *g = NULL;
    struct rtx_plan *plan = NULL;
    int rc;
    *out = NULL;
    if ((rc = rtx_graph_new("attention", &g, err)) < 0) return rc;
    for (int k = 0; k < c->n_in && rc >= 0; k++)
        rc = rtx_graph_add_input(g, names[k], c->in[k].dt, c->in[k].ndim, c->in[k].dims, err);
    const char *outs[1] = {"y"};
    int node =
        rc < 0 ? rc : rtx_graph_add_node(g, "attention", "att", names, c->n_in, outs, 1, err);
    rc = node < 0 ? node : 0;
    if (rc == 0 && c->causal >= 0) rc = rtx_graph_set_attr_int(g, node, "causal", c->causal, err);
    if (rc == 0 && c->scale != 0.0) rc = rtx_graph_set_attr_float(g, node, "scale", c->scale, err);
    if (rc == 0) rc = rtx_graph_add_output(g, "y", err);
    if (rc == 0)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, c->n_in, NULL, &plan, err);
    if (rc == 0) rc = rtx_plan_execute(plan, be, in, c->n_in, out, 1, NULL, NULL, err);
    rtx_plan_free(plan);
    rtx_graph_free(g);
    return rc < 0 ? rc : 0;
}

/* max |a - b| / max |a|; NaN on one side only, or different infinities, give +inf. */
static double rel_err(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    int64_t n = rtx_tensor_numel(a);
    if (n != rtx_tensor_numel(b) || a->dtype != b->dtype) return INFINITY;
    double diff = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = rtx_tensor_get(a, i), y = rtx_tensor_get(b, i);
        if (isnan(x) || isnan(y)) {
            if (isnan(x) != isnan(y)) return INFINITY;
            continue;
        }
        if (isinf(x) || isinf(y)) {
            if (x != y) return INFINITY;
            continue;
        }
        diff = fmax(diff, fabs(y - x));
        mag = fmax(mag, fabs(x));
    }
    return diff == 0.0 ? 0.0 : diff / (mag > 0.0 ? mag : 1e-30);
}

/* Query row 1 (when there is one) of every head is all zeros: the dead-row rule. */
static bool dead_row_zero(const struct rtx_tensor *y, int64_t lq, int64_t dv) {
    if (lq < 2) return true;
    int64_t n = rtx_tensor_numel(y);
    for (int64_t base = 0; base < n; base += lq * dv)
        for (int64_t j = 0; j < dv; j++)
            if (rtx_tensor_get(y, base + dv + j) != 0.0) return false;
    return true;
}

static double tol_of(enum rtx_dtype dt) {
    return dt == RTX_BF16 ? 2e-2 : dt == RTX_F16 ? 4e-3 : 1e-4;
}

/* Runs c on the CPU and the GPU and checks the error against the dtype's tolerance. */
static void run_case(const struct acase *c) {
    struct rtx_tensor *in[4] = {NULL, NULL, NULL, NULL}, *want = NULL, *got = NULL;
    struct rtx_err err = {0};
    for (int k = 0; k < c->n_in; k++) {
        if ((in[k] = make_input(&c->in[k])) == NULL) {
            gpu_check(false, "attention %s: input %d", c->what, k);
            goto done;
        }
    }
    if (run_on(cpu_be, c, in, &want, &err) < 0) {
        gpu_check(false, "attention %s: cpu: %s", c->what, err.msg);
        goto done;
    }
    const char *old = getenv("RTX_ATTN_ROUTE");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    if (route) setenv("RTX_ATTN_ROUTE", route, 1);
    int rc = run_on(gpu_be, c, in, &got, &err);
    if (route && old)
        setenv("RTX_ATTN_ROUTE", saved, 1);
    else if (route)
        unsetenv("RTX_ATTN_ROUTE");
    const char *rname = route ? route : old ? old : "auto";
    if (rc < 0) {
        gpu_check(false, "attention %s [%s]: cuda: %s", c->what, rname, err.msg);
        goto done;
    }
    double e = rel_err(want, got), tol = tol_of(c->in[0].dt);
    gpu_check(e <= tol, "attention %s [%s]: rel err %.3g (tol %.1g)", c->what, rname, e, tol);
    if (c->n_in == 4 && c->in[3].fill == F_BOOL_DEAD_ROW)
        gpu_check(
            dead_row_zero(got, c->in[0].dims[c->in[0].ndim - 2], c->in[2].dims[c->in[2].ndim - 1]),
            "attention %s: the fully masked query row is zeros", c->what);
done:
    rtx_tensor_unref(want);
    rtx_tensor_unref(got);
    for (int k = 0; k < 4; k++)
        rtx_tensor_unref(in[k]);
}

/* q [b, h, lq, d], k [b, h, lk, d], v [b, h, lk, dv] of dtype dt. */
static struct acase qkv(enum rtx_dtype dt, int64_t b, int64_t h, int64_t lq, int64_t lk, int64_t d,
                        int64_t dv, int causal) {
    struct acase c;
    memset(&c, 0, sizeof c);
    c.n_in = 3;
    c.causal = causal;
    c.in[0] = (struct ain){dt, 4, {b, h, lq, d}, F_RAND};
    c.in[1] = (struct ain){dt, 4, {b, h, lk, d}, F_RAND};
    c.in[2] = (struct ain){dt, 4, {b, h, lk, dv}, F_RAND};
    snprintf(c.what, sizeof c.what, "%s b%lld h%lld lq%lld lk%lld d%lld%s", rtx_dtype_name(dt),
             (long long)b, (long long)h, (long long)lq, (long long)lk, (long long)d,
             causal > 0 ? " causal" : "");
    if (dv != d) {
        size_t off = strlen(c.what);
        snprintf(c.what + off, sizeof c.what - off, " dv%lld", (long long)dv);
    }
    return c;
}

static void append(struct acase *c, const char *s) {
    size_t off = strlen(c->what);
    snprintf(c->what + off, sizeof c->what - off, "%s", s);
}

/* Every length case on the default route and on each fused tile configuration (on a device
 * without sm_90a the wg* tiles run the default mma.sync tile instead). */
static bool have_cudnn(void);

static void length_tests(void) {
    static const char *const routes[] = {NULL,           "flash:m64n64", "flash:m128n64",
                                         "flash:wg1n64", "flash:wp1n64", "cudnn"};
    static const enum rtx_dtype dts[2] = {RTX_F16, RTX_BF16};
    static const int64_t dims[2] = {64, 128};
    static const int64_t lens[][2] = {{1, 1},    {17, 17},  {127, 127}, {1000, 1000},
                                      {17, 127}, {127, 17}, {1, 1000},  {1000, 17}};
    for (size_t ri = 0; ri < sizeof routes / sizeof routes[0]; ri++) {
        route = routes[ri];
        if (route && strcmp(route, "cudnn") == 0 && !have_cudnn()) continue;
        for (int di = 0; di < 2; di++)
            for (int hi = 0; hi < 2; hi++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                    for (int causal = 0; causal < 2; causal++) {
                        int64_t lq = lens[li][0], lk = lens[li][1];
                        bool big = lq * lk >= 100000;
                        struct acase c = qkv(dts[di], big ? 1 : 2, big ? 2 : 3, lq, lk, dims[hi],
                                             dims[hi], causal);
                        run_case(&c);
                    }
    }
    route = NULL;
}

static void scale_and_mask_tests(void) {
    static const enum rtx_dtype dts[2] = {RTX_F16, RTX_BF16};
    for (int di = 0; di < 2; di++) {
        enum rtx_dtype dt = dts[di];
        for (int hi = 0; hi < 2; hi++) {
            int64_t d = hi ? 128 : 64;
            /* scale 1: scores of several units, a peaked softmax across many key tiles */
            for (int ci = 0; ci < (have_cudnn() ? 2 : 1); ci++) {
                route = ci ? "cudnn" : NULL;
                struct acase sc = qkv(dt, 2, 2, 300, 517, d, d, 0);
                sc.scale = 1.0;
                append(&sc, " scale 1");
                run_case(&sc);
                sc = qkv(dt, 2, 2, 517, 300, d, d, 1);
                sc.scale = 0.7;
                append(&sc, " scale 0.7");
                run_case(&sc);
            }
            route = NULL;
            struct acase c;
            /* padding mask over the keys, broadcast over batch, heads and queries */
            c = qkv(dt, 2, 3, 127, 200, d, d, 0);
            c.n_in = 4;
            c.in[3] = (struct ain){RTX_BOOL, 1, {200}, F_BOOL_PAD};
            append(&c, " bool padding mask [Lk]");
            run_case(&c);
            /* full boolean mask with a dead row, causal on top */
            for (int causal = 0; causal < 2; causal++) {
                c = qkv(dt, 2, 3, 77, 150, d, d, causal);
                c.n_in = 4;
                c.in[3] = (struct ain){RTX_BOOL, 2, {77, 150}, F_BOOL_DEAD_ROW};
                append(&c, " bool mask [Lq,Lk], dead row");
                run_case(&c);
            }
            /* additive mask with -inf entries, per batch, broadcast over heads */
            for (int causal = 0; causal < 2; causal++) {
                c = qkv(dt, 2, 3, 130, 129, d, d, causal);
                c.n_in = 4;
                c.in[3] = (struct ain){dt, 4, {2, 1, 130, 129}, F_ADD};
                append(&c, " additive mask [B,1,Lq,Lk]");
                run_case(&c);
            }
            /* per-head mask [B,H,Lq,Lk], long */
            c = qkv(dt, 1, 2, 1000, 1000, d, d, 0);
            c.n_in = 4;
            c.in[3] = (struct ain){RTX_BOOL, 4, {1, 2, 1000, 1000}, F_BOOL_DEAD_ROW};
            append(&c, " bool mask [B,H,Lq,Lk], dead row");
            run_case(&c);
        }
    }
}

/* Cases the fused kernel leaves to the unfused route, which must still agree. */
static void fallback_tests(void) {
    struct acase c = qkv(RTX_F16, 2, 3, 33, 47, 96, 96, 1);
    append(&c, " (head dim 96: unfused)");
    run_case(&c);
    c = qkv(RTX_BF16, 2, 3, 33, 47, 64, 32, 0);
    append(&c, " (dv != d: unfused)");
    run_case(&c);
    c = qkv(RTX_F32, 2, 3, 33, 47, 64, 64, 1);
    append(&c, " (f32: unfused)");
    run_case(&c);
}

/* The route the backend reports it took (rtx_backend_cuda_attention_route) is `want`. */
static void route_is(const char *want, const char *asked) {
    const char *got = rtx_backend_cuda_attention_route(gpu_be);
    gpu_check(strcmp(got, want) == 0, "attention routes: %s reports route '%s' (want '%s')",
              asked, got, want);
}

/* The fused and the unfused route on one case agree; an unknown route is an error naming the
 * variable. RTX_ATTN_ROUTE is restored afterwards. */
static void route_tests(void) {
    const char *old = getenv("RTX_ATTN_ROUTE");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    struct acase c = qkv(RTX_BF16, 2, 2, 200, 200, 128, 128, 1);
    struct rtx_tensor *in[3] = {NULL, NULL, NULL}, *fused = NULL, *unfused = NULL, *y = NULL;
    struct rtx_err err = {0};
    for (int k = 0; k < 3; k++)
        in[k] = make_input(&c.in[k]);
    if (!gpu_check(in[0] && in[1] && in[2], "attention routes: inputs")) goto done;
    static const char *const tiles[] = {"flash:m64n64", "flash:m128n64", "flash:wg1n64",
                                        "flash:wp1n64"};
    setenv("RTX_ATTN_ROUTE", "unfused", 1);
    int rc = run_on(gpu_be, &c, in, &unfused, &err);
    if (!gpu_check(rc == 0, "attention routes: unfused runs%s%s", rc ? ": " : "", err.msg))
        goto done;
    route_is("unfused", "RTX_ATTN_ROUTE=unfused");
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        setenv("RTX_ATTN_ROUTE", tiles[i], 1);
        rtx_tensor_unref(fused);
        fused = NULL;
        rc = run_on(gpu_be, &c, in, &fused, &err);
        if (!gpu_check(rc == 0, "attention routes: %s runs%s%s", tiles[i], rc ? ": " : "",
                       err.msg))
            goto done;
        double e = rel_err(unfused, fused);
        gpu_check(e <= 2e-2, "attention routes: %s against unfused: rel err %.3g (tol 2e-2)",
                  tiles[i], e);
        route_is("flash", tiles[i]);
    }
    if (have_cudnn()) {
        setenv("RTX_ATTN_ROUTE", "cudnn", 1);
        rtx_tensor_unref(fused);
        fused = NULL;
        rc = run_on(gpu_be, &c, in, &fused, &err);
        if (gpu_check(rc == 0, "attention routes: cudnn runs%s%s", rc ? ": " : "", err.msg)) {
            double e = rel_err(unfused, fused);
            gpu_check(e <= 2e-2, "attention routes: cudnn against unfused: rel err %.3g (tol 2e-2)",
                      e);
            route_is("cudnn", "RTX_ATTN_ROUTE=cudnn");
        }
        /* a mask is the hand-written kernel's: a forced cuDNN route refuses it by name */
        struct acase m = qkv(RTX_BF16, 1, 2, 64, 64, 64, 64, 0);
        m.n_in = 4;
        m.in[3] = (struct ain){RTX_BOOL, 1, {64}, F_BOOL_PAD};
        struct rtx_tensor *min[4] = {NULL, NULL, NULL, NULL}, *my = NULL;
        for (int k = 0; k < 4; k++)
            min[k] = make_input(&m.in[k]);
        memset(&err, 0, sizeof err);
        rc = run_on(gpu_be, &m, min, &my, &err);
        gpu_check(rc == RTX_EUNSUPPORTED && strstr(err.msg, "mask") != NULL,
                  "attention routes: cudnn refuses a mask with RTX_EUNSUPPORTED (%s)", err.msg);
        rtx_tensor_unref(my);
        for (int k = 0; k < 4; k++)
            rtx_tensor_unref(min[k]);
    }
    /* auto: cuDNN's engine where it loads (an unmasked problem of 200 keys), else the kernel */
    unsetenv("RTX_ATTN_ROUTE");
    rtx_tensor_unref(y);
    y = NULL;
    rc = run_on(gpu_be, &c, in, &y, &err);
    if (gpu_check(rc == 0, "attention routes: auto runs%s%s", rc ? ": " : "", err.msg))
        route_is(have_cudnn() ? "cudnn" : "flash", "auto");
    gpu_check(strcmp(rtx_backend_cuda_attention_route(cpu_be), "") == 0,
              "attention routes: the CPU backend reports no CUDA route");
    rtx_tensor_unref(y);
    y = NULL;
    setenv("RTX_ATTN_ROUTE", "flash:m7n7", 1);
    memset(&err, 0, sizeof err);
    rc = run_on(gpu_be, &c, in, &y, &err);
    gpu_check(rc == RTX_EINVAL && strstr(err.msg, "RTX_ATTN_ROUTE") != NULL,
              "attention routes: an unknown route fails with RTX_EINVAL naming the variable (%s)",
              err.msg);
done:
    if (old)
        setenv("RTX_ATTN_ROUTE", saved, 1);
    else
        unsetenv("RTX_ATTN_ROUTE");
    rtx_tensor_unref(y);
    rtx_tensor_unref(fused);
    rtx_tensor_unref(unfused);
    for (int k = 0; k < 3; k++)
        rtx_tensor_unref(in[k]);
}

/* Whether the cuDNN route's cases run here, decided once. cuDNN is expected: when
 * libcudnn.so.9 cannot be loaded (or rtxd was built without cuDNN's headers) that is one failed
 * check, or, with RTX_ALLOW_SKIP listing "cudnn", a note that the route's cases do not run.
 * With cuDNN, one small forced run is timed (a note: the first includes loading the library
 * and making the handle and plan); whether it and the route's cases work, they check. */
static bool have_cudnn(void) {
    static int known = -1;
    if (known >= 0) return known;
    const char *old = getenv("RTX_ATTN_ROUTE");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    struct acase c = qkv(RTX_F16, 1, 1, 16, 16, 64, 64, 0);
    struct rtx_tensor *in[3] = {NULL, NULL, NULL}, *y = NULL;
    struct rtx_err err = {0};
    for (int k = 0; k < 3; k++)
        in[k] = make_input(&c.in[k]);
    setenv("RTX_ATTN_ROUTE", "cudnn", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = in[0] && in[1] && in[2] ? run_on(gpu_be, &c, in, &y, &err) : RTX_ENOMEM;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double first_ms =
        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    char why[256] = "";
    long version = rtx_cuda_cudnn_version(why, sizeof why);
    if (rc == 0) {
        /* the same shape again: the plan is cached, only the run is left */
        rtx_tensor_unref(y);
        y = NULL;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = run_on(gpu_be, &c, in, &y, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double again_ms =
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (rc == 0)
            gpu_note("first cuDNN attention (library, handle, plan) %.1f ms, the same shape "
                     "again %.2f ms (both through rtx_plan_execute)",
                     first_ms, again_ms);
    }
    if (old)
        setenv("RTX_ATTN_ROUTE", saved, 1);
    else
        unsetenv("RTX_ATTN_ROUTE");
    if (version > 0) {
        known = gpu_check(version / 10000 == 9, "cuDNN %ld (9.x) loaded for attention", version);
    } else if (rtx_test_skip_allowed("cudnn")) {
        gpu_note("attention's cuDNN route NOT tested (" RTX_ALLOW_SKIP_ENV " lists cudnn): %s",
                 why);
        known = 0;
    } else {
        gpu_check(false,
                  "cuDNN loads for attention's cuDNN route: %s (set " RTX_ALLOW_SKIP_ENV
                  "=cudnn where this machine is meant to lack cuDNN)",
                  why);
        known = 0;
    }
    rtx_tensor_unref(y);
    for (int k = 0; k < 3; k++)
        rtx_tensor_unref(in[k]);
    return known;
}

void gpu_attention_tests(int index) {
    struct rtx_err err = {0};
    struct rtx_cpu_options co = {.n_threads = 0};
    struct rtx_cuda_options go = {.device = index};
    int rc = rtx_backend_cpu_new(&co, &cpu_be, &err);
    if (!gpu_check(rc == 0, "CPU backend for attention%s%s", rc ? ": " : "", err.msg)) return;
    rc = rtx_backend_cuda_new(&go, &gpu_be, &err);
    if (!gpu_check(rc == 0, "CUDA backend on device %d%s%s", index, rc ? ": " : "", err.msg)) {
        rtx_backend_free(cpu_be);
        cpu_be = NULL;
        return;
    }
    length_tests();
    scale_and_mask_tests();
    fallback_tests();
    route_tests();
    /* a backend without graph capture is a CUDA backend too: it reports its route */
    struct rtx_backend *graphed = gpu_be;
    go.disable_graphs = true;
    rc = rtx_backend_cuda_new(&go, &gpu_be, &err);
    if (gpu_check(rc == 0, "CUDA backend without graphs%s%s", rc ? ": " : "", err.msg)) {
        struct acase c = qkv(RTX_BF16, 1, 2, 64, 64, 64, 64, 0);
        struct rtx_tensor *in[3] = {NULL, NULL, NULL}, *y = NULL;
        for (int k = 0; k < 3; k++)
            in[k] = make_input(&c.in[k]);
        rc = in[0] && in[1] && in[2] ? run_on(gpu_be, &c, in, &y, &err) : RTX_ENOMEM;
        if (gpu_check(rc == 0, "attention without graphs runs%s%s", rc ? ": " : "", err.msg))
            gpu_check(strcmp(rtx_backend_cuda_attention_route(gpu_be), "") != 0,
                      "attention without graphs reports its route ('%s')",
                      rtx_backend_cuda_attention_route(gpu_be));
        rtx_tensor_unref(y);
        for (int k = 0; k < 3; k++)
            rtx_tensor_unref(in[k]);
        rtx_backend_free(gpu_be);
    }
    gpu_be = graphed;
    rtx_backend_free(gpu_be);
    rtx_backend_free(cpu_be);
    gpu_be = cpu_be = NULL;
}
