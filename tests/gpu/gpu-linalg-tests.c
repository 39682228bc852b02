/*
 * gpu-linalg-tests.c - rtx-gpu-linalg-tests: the CUDA backend's matmul, gemm, attention and
 * reduction-group ops (reduce_*, argmax, softmax, log_softmax, layer_norm, rms_norm) against
 * the CPU backend, through rtx_plan_execute, at odd shapes, broadcast batches, 1-D operands,
 * transposes, masks and every dtype each op allows. Prints one line per case and
 * "N passed, M failed"; exits 1 when a case failed.
 *
 * DESIGN
 * A plain C program like rtx-gpu-tests (a CUDA context does not survive Check's fork). Each
 * case is one node in a one-node graph, fed the same random host inputs on both backends; the
 * error is max |gpu - cpu| / max |cpu| (NaN must match NaN), against a tolerance chosen per
 * dtype: the CPU computes in f32/f64 and both round once, so f16/bf16 outputs may differ by
 * an ulp of the output dtype, and TF32 by its 10-bit mantissa. Integer results and argmax are
 * exact. f32 products also run on a second CUDA backend with TF32 allowed, at a looser bound.
 * Without a GPU it fails, as rtx-gpu-tests does, unless RTX_ALLOW_SKIP=gpu says the machine
 * is meant to have none (gpu-util.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "tests/gpu/gpu-util.h"

/* The case tables below leave a case's trailing fields (its attributes) out when it has none. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

enum fill { F_RAND, F_MASK, F_ADDMASK, F_SPECIAL, F_ABSENT };

struct tin {
    enum rtx_dtype dt;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    enum fill fill;
};

enum attr_kind { A_INT, A_FLOAT, A_INTS };

struct tattr {
    const char *name;
    enum attr_kind kind;
    int64_t i;
    double f;
    int n;
    int64_t ints[RTX_MAX_DIMS];
};

#define MAX_ATTRS 6
struct tcase {
    const char *op;
    int n_in;
    struct tin in[4];
    int n_attrs;
    struct tattr attrs[MAX_ATTRS];
};

static struct rtx_backend *cpu_be, *gpu_be, *tf32_be;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Random data for one input; masks have query row 1 (dim ndim-2) fully masked. */
static struct rtx_tensor *make_input(const struct tin *ti) {
    struct rtx_tensor *t = NULL;
    struct rtx_err err = {0};
    if (rtx_tensor_new(ti->dt, ti->ndim, ti->dims, &t, &err) < 0) return NULL;
    int64_t n = rtx_tensor_numel(t);
    int64_t lk = ti->ndim >= 1 ? ti->dims[ti->ndim - 1] : 1;
    int64_t lq = ti->ndim >= 2 ? ti->dims[ti->ndim - 2] : 1;
    for (int64_t i = 0; i < n; i++) {
        bool dead_row = lq > 1 && (i / lk) % lq == 1;
        double v;
        switch (ti->fill) {
        case F_MASK: v = dead_row ? 0.0 : urand() < 0.7; break;
        case F_ADDMASK: v = dead_row || urand() < 0.2 ? -INFINITY : -urand(); break;
        case F_SPECIAL: /* float rows of ties: rare infinities; a rare NaN; signed zeros */
            switch ((i / lk) % 3) {
            case 0: v = urand() < 0.001 ? INFINITY : floor(urand() * 8.0) / 8.0; break;
            case 1: v = urand() < 0.0001 ? NAN : 2.0 * urand() - 1.0; break;
            default: v = urand() < 0.5 ? -0.0 : 0.0; break;
            }
            break;
        default:
            v = rtx_dtype_is_float(ti->dt) ? 2.0 * urand() - 1.0 : floor(urand() * 101.0) - 50.0;
            if (ti->dt == RTX_U8) v = floor(urand() * 256.0);
            break;
        }
        rtx_tensor_set(t, i, v);
    }
    return t;
}

/* Runs the one-node graph of c on backend be; *out gets the host output. */
static int run_on(struct rtx_backend *be, const struct tcase *c, struct rtx_tensor **in,
                  struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    struct rtx_plan *plan = NULL;
    struct rtx_tensor *feed[4];
    const char *names[4] = {"", "", "", ""};
    static const char *const in_names[4] = {"x0", "x1", "x2", "x3"};
    int n_feed = 0, rc;
    *out = NULL;
    if ((rc = rtx_graph_new("t", &g, err)) < 0) return rc;
    for (int k = 0; k < c->n_in; k++) {
        if (c->in[k].fill == F_ABSENT) continue;
        names[k] = in_names[k];
        rc = rtx_graph_add_input(g, in_names[k], c->in[k].dt, c->in[k].ndim, c->in[k].dims, err);
        if (rc < 0) goto done;
        feed[n_feed++] = in[k];
    }
    const char *outs[1] = {"y"};
    int node = rtx_graph_add_node(g, c->op, "n", names, c->n_in, outs, 1, err);
    if ((rc = node) < 0) goto done;
    for (int k = 0; k < c->n_attrs && rc >= 0; k++) {
        const struct tattr *at = &c->attrs[k];
        if (at->kind == A_INT)
            rc = rtx_graph_set_attr_int(g, node, at->name, at->i, err);
        else if (at->kind == A_FLOAT)
            rc = rtx_graph_set_attr_float(g, node, at->name, at->f, err);
        else
            rc = rtx_graph_set_attr_ints(g, node, at->name, at->ints, at->n, err);
    }
    if (rc < 0 || (rc = rtx_graph_add_output(g, "y", err)) < 0) goto done;
    rc = rtx_plan_new(g, (const struct rtx_tensor *const *)feed, n_feed, NULL, &plan, err);
    if (rc < 0) goto done;
    rc = rtx_plan_execute(plan, be, feed, n_feed, out, 1, NULL, NULL, err);
done:
    rtx_plan_free(plan);
    rtx_graph_free(g);
    return rc < 0 ? rc : 0;
}

/* max |g - c| / max |c|; NaN where exactly one side is NaN gives +inf. */
static double rel_err(const struct rtx_tensor *cpu, const struct rtx_tensor *gpu) {
    int64_t n = rtx_tensor_numel(cpu);
    if (n != rtx_tensor_numel(gpu) || cpu->dtype != gpu->dtype) return INFINITY;
    double diff = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double c = rtx_tensor_get(cpu, i), g = rtx_tensor_get(gpu, i);
        if (isnan(c) || isnan(g)) {
            if (isnan(c) != isnan(g)) return INFINITY;
            continue;
        }
        if (isinf(c) || isinf(g)) {
            if (c != g) return INFINITY;
            continue;
        }
        diff = fmax(diff, fabs(g - c));
        mag = fmax(mag, fabs(c));
    }
    return diff == 0.0 ? 0.0 : diff / (mag > 0.0 ? mag : 1e-30);
}

static const char *shape_of(const struct tin *t, char *buf, size_t len) {
    return rtx_shape_str(t->dt, t->ndim, t->dims, buf, len);
}

/* Runs c on the CPU and on be; passes when the relative error is within tol. */
static void run_case(const char *what, const struct tcase *c, struct rtx_backend *be,
                     const char *be_name, double tol) {
    struct rtx_tensor *in[4] = {NULL, NULL, NULL, NULL}, *want = NULL, *got = NULL;
    char desc[512];
    int off = snprintf(desc, sizeof desc, "%s %s [%s]", c->op, what, be_name);
    for (int k = 0; k < c->n_in && off < (int)sizeof desc; k++) {
        char sb[96];
        off += snprintf(desc + off, sizeof desc - (size_t)off, " %s",
                        c->in[k].fill == F_ABSENT ? "-" : shape_of(&c->in[k], sb, sizeof sb));
    }
    for (int k = 0; k < c->n_in; k++) {
        if (c->in[k].fill == F_ABSENT) continue;
        if ((in[k] = make_input(&c->in[k])) == NULL) {
            gpu_check(false, "%s: input %d", desc, k);
            goto done;
        }
    }
    struct rtx_err err = {0};
    if (run_on(cpu_be, c, in, &want, &err) < 0) {
        gpu_check(false, "%s: cpu: %s", desc, err.msg);
        goto done;
    }
    if (run_on(be, c, in, &got, &err) < 0) {
        gpu_check(false, "%s: cuda: %s", desc, err.msg);
        goto done;
    }
    double e = rel_err(want, got);
    gpu_check(e <= tol, "%s: rel err %.3g (tol %.1g)", desc, e, tol);
done:
    rtx_tensor_unref(want);
    rtx_tensor_unref(got);
    for (int k = 0; k < 4; k++) rtx_tensor_unref(in[k]);
}

/* Tolerance of a float result in dtype dt: f32 exact up to accumulation order. */
static double tol_of(enum rtx_dtype dt, double f32_tol) {
    switch (dt) {
    case RTX_F16: return 4e-3;
    case RTX_BF16: return 2e-2;
    case RTX_F32: return f32_tol;
    default: return 0.0;
    }
}

#define TIN(dt_, fill_, ...)                                                                    \
    {                                                                                           \
        .dt = (dt_), .fill = (fill_), .ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) /           \
                                                    sizeof(int64_t)),                           \
        .dims = {__VA_ARGS__}                                                                   \
    }
#define TABSENT {.fill = F_ABSENT}
#define AI(n_, v_) {.name = (n_), .kind = A_INT, .i = (v_)}
#define AF(n_, v_) {.name = (n_), .kind = A_FLOAT, .f = (v_)}
#define AV(n_, ...)                                                                             \
    {                                                                                           \
        .name = (n_), .kind = A_INTS,                                                           \
        .n = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .ints = {__VA_ARGS__}    \
    }

static const enum rtx_dtype floats[] = {RTX_F32, RTX_F16, RTX_BF16};

/* A product case on the plain backend and, for f32, on the TF32 one. */
static void run_product(const char *what, const struct tcase *c) {
    enum rtx_dtype dt = c->in[0].dt;
    run_case(what, c, gpu_be, "cuda", tol_of(dt, 1e-4));
    if (dt == RTX_F32) run_case(what, c, tf32_be, "cuda tf32", 1e-2);
}

static void test_matmul(void) {
    for (size_t d = 0; d < 3; d++) {
        enum rtx_dtype dt = floats[d];
        const struct {
            const char *what;
            struct tcase c;
        } cases[] = {
            {"2-D", {"matmul", 2, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33, 65)}}},
            {"trans_a", {"matmul", 2, {TIN(dt, F_RAND, 33, 17), TIN(dt, F_RAND, 33, 65)}, 1,
                         {AI("trans_a", 1)}}},
            {"trans_b", {"matmul", 2, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 65, 33)}, 1,
                         {AI("trans_b", 1)}}},
            {"trans_a trans_b",
             {"matmul", 2, {TIN(dt, F_RAND, 33, 17), TIN(dt, F_RAND, 65, 33)}, 2,
              {AI("trans_a", 1), AI("trans_b", 1)}}},
            {"batch folded", {"matmul", 2, {TIN(dt, F_RAND, 3, 17, 33), TIN(dt, F_RAND, 33, 65)}}},
            {"batch, shared b, trans_a",
             {"matmul", 2, {TIN(dt, F_RAND, 3, 33, 17), TIN(dt, F_RAND, 33, 65)}, 1,
              {AI("trans_a", 1)}}},
            {"batch, shared a",
             {"matmul", 2, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 4, 33, 65)}}},
            {"batch full",
             {"matmul", 2, {TIN(dt, F_RAND, 2, 3, 17, 33), TIN(dt, F_RAND, 2, 3, 33, 65)}}},
            {"batch crossed",
             {"matmul", 2, {TIN(dt, F_RAND, 2, 1, 17, 33), TIN(dt, F_RAND, 1, 3, 33, 65)}}},
            {"batch crossed trans_b",
             {"matmul", 2, {TIN(dt, F_RAND, 2, 1, 17, 33), TIN(dt, F_RAND, 3, 65, 33)}, 1,
              {AI("trans_b", 1)}}},
            {"1-D a", {"matmul", 2, {TIN(dt, F_RAND, 33), TIN(dt, F_RAND, 33, 65)}}},
            {"1-D b", {"matmul", 2, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33)}}},
            {"1-D both", {"matmul", 2, {TIN(dt, F_RAND, 33), TIN(dt, F_RAND, 33)}}},
            {"batch x 1-D", {"matmul", 2, {TIN(dt, F_RAND, 5, 17, 33), TIN(dt, F_RAND, 33)}}},
            {"1-D x batch", {"matmul", 2, {TIN(dt, F_RAND, 33), TIN(dt, F_RAND, 4, 33, 65)}}},
            {"large", {"matmul", 2, {TIN(dt, F_RAND, 256, 512), TIN(dt, F_RAND, 512, 384)}}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_product(cases[i].what, &cases[i].c);
    }
}

static void test_gemm(void) {
    for (size_t d = 0; d < 3; d++) {
        enum rtx_dtype dt = floats[d];
        const struct {
            const char *what;
            struct tcase c;
        } cases[] = {
            {"no c", {"gemm", 3, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33, 65), TABSENT}}},
            {"c row [N]",
             {"gemm", 3, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33, 65),
                          TIN(dt, F_RAND, 65)}}},
            {"c column [M,1], alpha, beta",
             {"gemm", 3,
              {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33, 65), TIN(dt, F_RAND, 17, 1)}, 2,
              {AF("alpha", 0.5), AF("beta", 2.0)}}},
            {"c full, trans",
             {"gemm", 3,
              {TIN(dt, F_RAND, 33, 17), TIN(dt, F_RAND, 65, 33), TIN(dt, F_RAND, 17, 65)}, 3,
              {AI("trans_a", 1), AI("trans_b", 1), AF("beta", -1.0)}}},
            {"c [1,1]",
             {"gemm", 3, {TIN(dt, F_RAND, 17, 33), TIN(dt, F_RAND, 33, 65),
                          TIN(dt, F_RAND, 1, 1)}}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_product(cases[i].what, &cases[i].c);
    }
}

static void test_attention(void) {
    for (size_t d = 0; d < 3; d++) {
        enum rtx_dtype dt = floats[d];
        const struct {
            const char *what;
            struct tcase c;
        } cases[] = {
            {"plain",
             {"attention", 3,
              {TIN(dt, F_RAND, 2, 3, 17, 16), TIN(dt, F_RAND, 2, 3, 29, 16),
               TIN(dt, F_RAND, 2, 3, 29, 24)}}},
            {"causal",
             {"attention", 3,
              {TIN(dt, F_RAND, 2, 3, 17, 16), TIN(dt, F_RAND, 2, 3, 29, 16),
               TIN(dt, F_RAND, 2, 3, 29, 24)}, 1, {AI("causal", 1)}}},
            {"causal Lq > Lk, scale",
             {"attention", 3,
              {TIN(dt, F_RAND, 3, 40, 32), TIN(dt, F_RAND, 3, 23, 32),
               TIN(dt, F_RAND, 3, 23, 8)}, 2, {AI("causal", 1), AF("scale", 0.3)}}},
            {"bool mask [Lq,Lk], a dead row",
             {"attention", 4,
              {TIN(dt, F_RAND, 2, 3, 17, 16), TIN(dt, F_RAND, 2, 3, 29, 16),
               TIN(dt, F_RAND, 2, 3, 29, 24), TIN(RTX_BOOL, F_MASK, 17, 29)}}},
            {"additive mask [B,1,Lq,Lk], causal",
             {"attention", 4,
              {TIN(dt, F_RAND, 2, 3, 17, 16), TIN(dt, F_RAND, 2, 3, 29, 16),
               TIN(dt, F_RAND, 2, 3, 29, 24), TIN(dt, F_ADDMASK, 2, 1, 17, 29)}, 1,
              {AI("causal", 1)}}},
            {"bool mask [Lk]",
             {"attention", 4,
              {TIN(dt, F_RAND, 4, 17, 64), TIN(dt, F_RAND, 4, 33, 64),
               TIN(dt, F_RAND, 4, 33, 64), TIN(RTX_BOOL, F_MASK, 33)}}},
            {"long",
             {"attention", 3,
              {TIN(dt, F_RAND, 2, 4, 300, 64), TIN(dt, F_RAND, 2, 4, 300, 64),
               TIN(dt, F_RAND, 2, 4, 300, 64)}, 1, {AI("causal", 1)}}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_product(cases[i].what, &cases[i].c);
    }
}

static void test_reduce(void) {
    static const char *const ops[] = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min"};
    static const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_BF16, RTX_I8,
                                         RTX_I32, RTX_I64, RTX_U8};
    for (size_t o = 0; o < 4; o++) {
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            enum rtx_dtype dt = dts[d];
            if (o == 1 && !rtx_dtype_is_float(dt)) continue;
            const struct {
                const char *what;
                struct tcase c;
            } cases[] = {
                {"axes 1 (columns)",
                 {ops[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AV("axes", 1)}}},
                {"axes -1 keepdims (rows)",
                 {ops[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 2,
                  {AV("axes", -1), AI("keepdims", 1)}}},
                {"axes 0,2 (generic)",
                 {ops[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AV("axes", 0, 2)}}},
                {"axes 0", {ops[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AV("axes", 0)}}},
                {"all", {ops[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}}},
                {"long row", {ops[o], 1, {TIN(dt, F_RAND, 3, 100003)}, 1, {AV("axes", 1)}}},
                {"size-1 axes", {ops[o], 1, {TIN(dt, F_RAND, 5, 1, 9)}, 1, {AV("axes", 1)}}},
            };
            /* f16 / bf16 sums round once on output; max / min are exact */
            double tol = o >= 2 ? 0.0 : tol_of(dt, 1e-5);
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                run_case(cases[i].what, &cases[i].c, gpu_be, "cuda", tol);
        }
    }
    static const enum rtx_dtype adts[] = {RTX_F32, RTX_BF16, RTX_I32, RTX_U8};
    for (size_t d = 0; d < sizeof adts / sizeof adts[0]; d++) {
        enum rtx_dtype dt = adts[d];
        const struct {
            const char *what;
            struct tcase c;
        } cases[] = {
            {"axis -1", {"argmax", 1, {TIN(dt, F_RAND, 7, 33, 650)}}},
            {"axis 0 keepdims",
             {"argmax", 1, {TIN(dt, F_RAND, 7, 33, 65)}, 2, {AI("axis", 0), AI("keepdims", 1)}}},
            {"axis 1", {"argmax", 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AI("axis", 1)}}},
            {"one long row", {"argmax", 1, {TIN(dt, F_RAND, 1, 128256)}}},
            {"long rows split", {"argmax", 1, {TIN(dt, F_RAND, 5, 130001)}}},
            {"ties, NaN, zeros", {"argmax", 1, {TIN(dt, F_SPECIAL, 6, 100003)}}},
            {"many long rows", {"argmax", 1, {TIN(dt, F_RAND, 300, 9000)}}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].c.in[0].fill == F_SPECIAL && !rtx_dtype_is_float(dt)) continue;
            run_case(cases[i].what, &cases[i].c, gpu_be, "cuda", 0.0);
        }
    }
}

static void test_softmax_norms(void) {
    static const char *const sm[] = {"softmax", "log_softmax"};
    for (size_t d = 0; d < 3; d++) {
        enum rtx_dtype dt = floats[d];
        double tol = tol_of(dt, 1e-5);
        for (size_t o = 0; o < 2; o++) {
            const struct {
                const char *what;
                struct tcase c;
            } cases[] = {
                {"axis -1", {sm[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}}},
                {"axis 0", {sm[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AI("axis", 0)}}},
                {"axis 1", {sm[o], 1, {TIN(dt, F_RAND, 7, 33, 65)}, 1, {AI("axis", 1)}}},
                {"long rows", {sm[o], 1, {TIN(dt, F_RAND, 5, 4099)}}},
            };
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                run_case(cases[i].what, &cases[i].c, gpu_be, "cuda", tol);
        }
        const struct {
            const char *what;
            struct tcase c;
        } cases[] = {
            {"plain", {"layer_norm", 3, {TIN(dt, F_RAND, 7, 33, 65), TABSENT, TABSENT}}},
            {"scale, bias",
             {"layer_norm", 3,
              {TIN(dt, F_RAND, 7, 33, 65), TIN(dt, F_RAND, 65), TIN(dt, F_RAND, 65)}}},
            {"axis 1, scale only",
             {"layer_norm", 3,
              {TIN(dt, F_RAND, 7, 33, 65), TIN(dt, F_RAND, 33, 65), TABSENT}, 1,
              {AI("axis", 1)}}},
            {"bias only, wide",
             {"layer_norm", 3, {TIN(dt, F_RAND, 6, 4096), TABSENT, TIN(dt, F_RAND, 4096)}}},
            {"plain", {"rms_norm", 2, {TIN(dt, F_RAND, 7, 33, 65), TABSENT}}},
            {"scale", {"rms_norm", 2, {TIN(dt, F_RAND, 7, 33, 65), TIN(dt, F_RAND, 65)}}},
            {"axis 0, eps",
             {"rms_norm", 2, {TIN(dt, F_RAND, 7, 33, 65), TIN(dt, F_RAND, 7, 33, 65)}, 2,
              {AI("axis", 0), AF("epsilon", 1e-3)}}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(cases[i].what, &cases[i].c, gpu_be, "cuda", tol_of(dt, 2e-5));
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = gpu_device_count("rtx-gpu-linalg-tests");
    if (n <= 0) return n == 0 ? 0 : gpu_check_summary();
    struct rtx_err err = {0};
    struct rtx_cpu_options co = {.n_threads = 0};
    struct rtx_cuda_options go = {.device = 0, .allow_tf32 = false};
    struct rtx_cuda_options to = {.device = 0, .allow_tf32 = true};
    if (!gpu_check(rtx_backend_cpu_new(&co, &cpu_be, &err) == 0, "cpu backend %s", err.msg) ||
        !gpu_check(rtx_backend_cuda_new(&go, &gpu_be, &err) == 0, "cuda backend %s", err.msg) ||
        !gpu_check(rtx_backend_cuda_new(&to, &tf32_be, &err) == 0, "cuda tf32 backend %s",
               err.msg))
        return gpu_check_summary();
    test_matmul();
    test_gemm();
    test_attention();
    test_reduce();
    test_softmax_norms();
    rtx_backend_free(tf32_be);
    rtx_backend_free(gpu_be);
    rtx_backend_free(cpu_be);
    return gpu_check_summary();
}
