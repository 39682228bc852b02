/*
 * gpu-parity.c - the CUDA backend against the CPU reference (ggml's test-backend-ops idea):
 * every elementwise and shape op on several shapes (odd sizes, broadcasting, rank 0, size-1
 * dims) and dtypes, as a one-node graph run through rtx_plan_execute on both backends and
 * compared element by element, with cases aimed at each unit the strided copy can move and at
 * its tiled transpose; softmax and log_softmax through each of their kernels; a random
 * multi-node elementwise graph with an initializer, run twice; gather's out-of-range error;
 * and bandwidth figures for add, the attention block's transposes (beside a device copy of the
 * same bytes) and bf16 softmax, printed as notes (gpu_note), not counted as checks.
 *
 * DESIGN
 * Tolerances by output dtype: |gpu - cpu| <= tol * max(1, |cpu|), tol 1e-5 for f32, 1e-3
 * for f16 and 8e-3 for bf16 (one rounding step of each format, since the f32 results may
 * differ in their last bits and round to neighbours), exact for integers and bool; NaN must
 * meet NaN and an infinity the same infinity. Inputs are random from a fixed seed per case,
 * drawn from a range that suits the op (positive for log and sqrt, small integers for pow,
 * special values such as NaN, infinities and out-of-range magnitudes for cast).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "tests/gpu/gpu-tests.h"

enum fill { F_ANY, F_POS, F_SMALL, F_SPECIAL, F_HALF, F_WIDE };

struct tin {
    enum rtx_dtype dt;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    enum fill fill;
    int64_t bound;                 /* F_ANY indices: values in [-bound, bound) when > 0 */
};

struct ints_attr {
    const char *name;
    int n;
    int64_t v[RTX_MAX_DIMS];
};

struct spec {
    const char *op;
    int n_in;
    struct tin in[4];
    const char *sattr, *sval;      /* a string attribute, or NULL */
    const char *iattr;             /* an int attribute, or NULL */
    int64_t ival;
    struct ints_attr ints[4];      /* up to four ints attributes (name NULL: none) */
    struct rtx_tensor *value;      /* constant's value, or NULL */
};

static struct rtx_backend *cpu_be, *gpu_be;
/* runtime's xorshift64* (rtx_rng_next), its state set directly so the data stay fixed */
static struct rtx_rng rng = {.s = 0x2545f4914f6cdd1dull};

static uint64_t rng_next(void) {
    return rtx_rng_next(&rng);
}

/* uniform in [0, 1) */
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static int64_t rng_int(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static double special_value(enum rtx_dtype dt) {
    static const double f[] = {NAN, INFINITY, -INFINITY, 1e10, -1e10, 300.7, -300.7, 2.5, -2.5,
                               0.0, -0.4, 127.9, 128.0, -129.5, 255.5, 256.0, 3e9, -3e9, 1e30};
    static const double i[] = {0, 1, -1, 127, -128, 255, 256, 2147483647.0, -2147483648.0,
                               4611686018427387904.0, -4611686018427387904.0, 65535, 70000};
    if (rtx_dtype_is_float(dt)) {
        if (rng_unit() < 0.5) return (rng_unit() - 0.5) * 600.0;
        return f[rng_next() % (sizeof f / sizeof f[0])];
    }
    if (dt == RTX_BOOL) return (double)(rng_next() & 1);
    return i[rng_next() % (sizeof i / sizeof i[0])];
}

static double draw(const struct tin *t) {
    enum rtx_dtype dt = t->dt;
    bool fl = rtx_dtype_is_float(dt);
    if (dt == RTX_BOOL) return (double)(rng_next() & 1);
    switch (t->fill) {
    case F_POS: return fl ? 0.05 + 4.0 * rng_unit() : (double)rng_int(1, 20);
    case F_SMALL: return fl ? (double)rng_int(-4, 4) * 0.5 : (double)rng_int(-3, 3);
    case F_HALF: return fl ? (double)rng_int(-6, 6) * 0.5 : (double)rng_int(-2, 5);
    case F_SPECIAL: return special_value(dt);
    case F_WIDE: return fl ? (rng_unit() - 0.5) * 80.0 : (double)rng_int(-40, 40);
    case F_ANY: break;
    }
    if (t->bound > 0) return (double)rng_int(-t->bound, t->bound - 1);
    if (fl) return (rng_unit() - 0.5) * 6.0;
    switch (dt) {
    case RTX_I8: return (double)rng_int(-128, 127);
    case RTX_U8: return (double)rng_int(0, 255);
    default: return (double)rng_int(-1000, 1000);
    }
}

static const char *const in_names[] = {"x0", "x1", "x2", "x3"};

static int build(const struct spec *s, struct rtx_graph **out, struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new(s->op, &g, err);
    for (int i = 0; i < s->n_in && rc >= 0; i++)
        rc = rtx_graph_add_input(g, in_names[i], s->in[i].dt, s->in[i].ndim, s->in[i].dims, err);
    const char *outs[] = {"y"};
    int node = rc >= 0 ? rtx_graph_add_node(g, s->op, "n", in_names, s->n_in, outs, 1, err) : rc;
    rc = node;
    if (rc >= 0 && s->sattr) rc = rtx_graph_set_attr_string(g, node, s->sattr, s->sval, err);
    if (rc >= 0 && s->iattr) rc = rtx_graph_set_attr_int(g, node, s->iattr, s->ival, err);
    for (int k = 0; k < 4 && rc >= 0 && s->ints[k].name; k++)
        rc = rtx_graph_set_attr_ints(g, node, s->ints[k].name, s->ints[k].v, s->ints[k].n, err);
    if (rc >= 0 && s->value) rc = rtx_graph_set_attr_tensor(g, node, "value", s->value, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

static double tolerance(enum rtx_dtype dt) {
    switch (dt) {
    case RTX_F32: return 1e-5;
    case RTX_F16: return 1e-3;
    case RTX_BF16: return 8e-3;
    default: return 0.0;
    }
}

/* Compares two host tensors; describes the first mismatch in why. */
static bool same(const struct rtx_tensor *ref, const struct rtx_tensor *got, double tol,
                 char *why, size_t why_size) {
    char sr[96], sg[96];
    if (ref->dtype != got->dtype || ref->ndim != got->ndim ||
        memcmp(ref->dims, got->dims, sizeof(int64_t) * (size_t)ref->ndim) != 0) {
        snprintf(why, why_size, "shape %s vs %s",
                 rtx_shape_str(ref->dtype, ref->ndim, ref->dims, sr, sizeof sr),
                 rtx_shape_str(got->dtype, got->ndim, got->dims, sg, sizeof sg));
        return false;
    }
    int64_t n = rtx_tensor_numel(ref), bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = rtx_tensor_get(ref, i), b = rtx_tensor_get(got, i);
        bool ok;
        if (isnan(a) || isnan(b))
            ok = isnan(a) && isnan(b);
        else if (isinf(a) || isinf(b))
            ok = a == b;
        else
            ok = fabs(a - b) <= tol * fmax(1.0, fabs(a));
        if (!ok) {
            if (first < 0) first = i;
            bad++;
            if (!isnan(a) && !isnan(b) && fabs(a - b) > worst) worst = fabs(a - b);
        }
    }
    if (bad == 0) return true;
    snprintf(why, why_size, "%lld of %lld differ; first at %lld: cpu %.9g gpu %.9g (worst %.3g)",
             (long long)bad, (long long)n, (long long)first, rtx_tensor_get(ref, first),
             rtx_tensor_get(got, first), worst);
    return false;
}

static int execute(struct rtx_backend *be, const struct rtx_graph *g, struct rtx_tensor **in,
                   int n_in, struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_plan *plan = NULL;
    int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, n_in, NULL, &plan, err);
    if (rc == 0) rc = rtx_plan_execute(plan, be, in, n_in, out, g->n_outputs, NULL, NULL, err);
    rtx_plan_free(plan);
    return rc;
}

/* Builds the inputs of a spec from the current random state. */
static int make_inputs(const struct spec *s, struct rtx_tensor **in, struct rtx_err *err) {
    for (int i = 0; i < s->n_in; i++) {
        int rc = rtx_tensor_new(s->in[i].dt, s->in[i].ndim, s->in[i].dims, &in[i], err);
        if (rc) return rc;
        int64_t n = rtx_tensor_numel(in[i]);
        for (int64_t k = 0; k < n; k++) rtx_tensor_set(in[i], k, draw(&s->in[i]));
    }
    return 0;
}

static void shape_text(const struct spec *s, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_in && len < size; i++) {
        char t[96];
        rtx_shape_str(s->in[i].dt, s->in[i].ndim, s->in[i].dims, t, sizeof t);
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", t);
    }
}

/* Runs a one-node spec on both backends and compares; returns whether it matched. */
static bool parity(const struct spec *s) {
    struct rtx_graph *g = NULL;
    struct rtx_tensor *in[4] = {NULL}, *ref = NULL, *got = NULL;
    struct rtx_err err = {0};
    char what[400], why[300] = "";
    shape_text(s, what, sizeof what);
    int rc = build(s, &g, &err);
    if (rc == 0) rc = make_inputs(s, in, &err);
    if (rc == 0 && (rc = execute(cpu_be, g, in, s->n_in, &ref, &err)))
        rtx_err_prefix(&err, "cpu");
    if (rc == 0 && (rc = execute(gpu_be, g, in, s->n_in, &got, &err)))
        rtx_err_prefix(&err, "gpu");
    bool ok = rc == 0 && same(ref, got, tolerance(ref->dtype), why, sizeof why);
    char extra[64] = "";
    if (s->sattr) snprintf(extra, sizeof extra, " %s=%s", s->sattr, s->sval);
    gpu_check(ok, "parity %s(%s)%s%s%s%s", s->op, what, extra, ok ? "" : ": ",
              rc ? err.msg : "", why);
    for (int i = 0; i < s->n_in; i++) rtx_tensor_unref(in[i]);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(got);
    rtx_graph_free(g);
    return ok;
}

static struct tin T(enum rtx_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3) {
    struct tin t = {.dt = dt, .ndim = ndim, .dims = {d0, d1, d2, d3}, .fill = F_ANY};
    return t;
}

static struct tin TF(struct tin t, enum fill f) {
    t.fill = f;
    return t;
}

/* ------------------------------------------------------------------------------------------
 * Elementwise
 * ---------------------------------------------------------------------------------------- */

struct shape2 {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
};

static const struct shape2 binary_shapes[] = {
    {2, {7, 13}, 2, {7, 13}},           /* same shape, odd: flat path with a tail */
    {1, {4099}, 1, {4099}},             /* flat, vectorized, many blocks */
    {3, {3, 1, 5}, 2, {4, 1}},          /* both broadcast */
    {0, {0}, 0, {0}},                   /* rank 0 */
    {2, {2, 3}, 0, {0}},                /* tensor and scalar */
    {1, {1}, 3, {5, 1, 1}},             /* size-1 dims */
    {2, {33, 65}, 1, {65}},             /* matrix + row */
    {2, {33, 65}, 2, {33, 1}},          /* matrix + column */
};

static void elementwise_tests(void) {
    const enum rtx_dtype all_num[] = {RTX_F32, RTX_F16, RTX_BF16, RTX_I8, RTX_I32, RTX_I64,
                                      RTX_U8};
    const char *binary[] = {"add", "sub", "mul", "div", "pow"};
    for (size_t o = 0; o < sizeof binary / sizeof *binary; o++)
        for (size_t d = 0; d < sizeof all_num / sizeof *all_num; d++)
            for (size_t k = 0; k < sizeof binary_shapes / sizeof *binary_shapes; k++) {
                const struct shape2 *sh = &binary_shapes[k];
                struct spec s = {.op = binary[o], .n_in = 2};
                s.in[0] = T(all_num[d], sh->na, sh->a[0], sh->a[1], sh->a[2], sh->a[3]);
                s.in[1] = T(all_num[d], sh->nb, sh->b[0], sh->b[1], sh->b[2], sh->b[3]);
                if (strcmp(binary[o], "pow") == 0) {
                    bool fl = rtx_dtype_is_float(all_num[d]);
                    s.in[0].fill = fl ? F_POS : F_SMALL;
                    s.in[1].fill = fl ? F_ANY : F_HALF;
                }
                parity(&s);
            }

    struct un {
        const char *op;
        unsigned dts;              /* bit per dtype */
        enum fill fill;
        const char *approx;
    };
#define B(x) (1u << RTX_##x)
    const unsigned fl = B(F32) | B(F16) | B(BF16), in = B(I8) | B(I32) | B(I64) | B(U8);
    const struct un unary[] = {
        {"neg", fl | in, F_ANY, NULL},     {"abs", fl | in, F_ANY, NULL},
        {"relu", fl | B(I8) | B(I32) | B(I64), F_ANY, NULL},
        {"sqrt", fl, F_POS, NULL},         {"rsqrt", fl, F_POS, NULL},
        {"exp", fl, F_ANY, NULL},          {"log", fl, F_POS, NULL},
        {"tanh", fl, F_ANY, NULL},         {"erf", fl, F_ANY, NULL},
        {"sigmoid", fl, F_ANY, NULL},      {"silu", fl, F_ANY, NULL},
        {"gelu", fl, F_ANY, NULL},         {"gelu", fl, F_ANY, "tanh"},
        {"gelu", fl, F_ANY, "none"},
    };
#undef B
    const struct tin ushapes[] = {
        T(RTX_F32, 2, 7, 13, 0, 0), T(RTX_F32, 0, 0, 0, 0, 0), T(RTX_F32, 3, 1, 1, 5, 0),
        T(RTX_F32, 1, 4097, 0, 0, 0),
    };
    for (size_t o = 0; o < sizeof unary / sizeof *unary; o++)
        for (int dt = 0; dt < RTX_DTYPE_COUNT; dt++) {
            if (!(unary[o].dts & (1u << dt))) continue;
            for (size_t k = 0; k < sizeof ushapes / sizeof *ushapes; k++) {
                struct spec s = {.op = unary[o].op, .n_in = 1, .in = {ushapes[k]}};
                s.in[0].dt = (enum rtx_dtype)dt;
                s.in[0].fill = unary[o].fill;
                if (unary[o].approx) {
                    s.sattr = "approximate";
                    s.sval = unary[o].approx;
                }
                parity(&s);
            }
        }

    /* cast between every pair of dtypes, special values included */
    for (int from = 0; from < RTX_DTYPE_COUNT; from++)
        for (int to = 0; to < RTX_DTYPE_COUNT; to++) {
            struct spec s = {.op = "cast", .n_in = 1, .sattr = "to",
                             .sval = rtx_dtype_name((enum rtx_dtype)to)};
            s.in[0] = TF(T((enum rtx_dtype)from, 2, 5, 37, 0, 0), F_SPECIAL);
            parity(&s);
            s.in[0] = T((enum rtx_dtype)from, 0, 0, 0, 0, 0);
            parity(&s);
            /* long enough for several blocks of the flat float cast, with a tail */
            s.in[0] = TF(T((enum rtx_dtype)from, 2, 3, 20483, 0, 0), F_SPECIAL);
            parity(&s);
        }

    /* comparisons and where, every dtype, with equal values and broadcasting */
    const char *cmp[] = {"equal", "less", "greater"};
    for (size_t o = 0; o < 3; o++)
        for (int dt = 0; dt < RTX_DTYPE_COUNT; dt++) {
            struct spec s = {.op = cmp[o], .n_in = 2};
            s.in[0] = TF(T((enum rtx_dtype)dt, 3, 3, 1, 5, 0), F_SMALL);
            s.in[1] = TF(T((enum rtx_dtype)dt, 2, 4, 1, 0, 0), F_SMALL);
            parity(&s);
            s.in[0] = TF(T((enum rtx_dtype)dt, 1, 1001, 0, 0, 0), F_SMALL);
            s.in[1] = TF(T((enum rtx_dtype)dt, 1, 1001, 0, 0, 0), F_SMALL);
            parity(&s);
        }
    for (int dt = 0; dt < RTX_DTYPE_COUNT; dt++) {
        struct spec s = {.op = "where", .n_in = 3};
        s.in[0] = T(RTX_BOOL, 3, 3, 1, 5, 0);
        s.in[1] = T((enum rtx_dtype)dt, 2, 4, 1, 0, 0);
        s.in[2] = T((enum rtx_dtype)dt, 1, 5, 0, 0, 0);
        parity(&s);
        s.in[0] = T(RTX_BOOL, 0, 0, 0, 0, 0);
        s.in[1] = T((enum rtx_dtype)dt, 2, 9, 7, 0, 0);
        s.in[2] = T((enum rtx_dtype)dt, 2, 9, 7, 0, 0);
        parity(&s);
    }
}

/* ------------------------------------------------------------------------------------------
 * Shape ops
 * ---------------------------------------------------------------------------------------- */

/* The CUDA copy's unit widening and tiled transpose (shape.c / shape.cu) on dtype dt: each
 * case's comment says which unit or kernel it takes for 4-byte / 2-byte / 1-byte / 8-byte
 * elements (device buffers are at least 16-byte aligned). */
static void wide_copy_tests(enum rtx_dtype dt) {
    const struct spec cases[] = {
        /* head split, runs of 16 elements: 16-byte units for every size */
        {.op = "transpose", .n_in = 1, .in = {T(dt, 4, 2, 6, 4, 16)},
         .ints = {{"perm", 4, {0, 2, 1, 3}}}},
        /* runs of 2: units of 8 / 4 / 2 / 16 bytes */
        {.op = "transpose", .n_in = 1, .in = {T(dt, 3, 3, 5, 2, 0)},
         .ints = {{"perm", 3, {1, 0, 2}}}},
        /* runs of 3: no wider unit fits, element by element */
        {.op = "transpose", .n_in = 1, .in = {T(dt, 3, 4, 6, 3, 0)},
         .ints = {{"perm", 3, {1, 0, 2}}}},
        /* slices of rows: at 8 elements in (16 / 16 / 8 / 16 bytes), 2 in (8 / 4 / 2 / 16), 1 in
         * (misaligned for every wider unit), and rows reversed (a negative outer stride) */
        {.op = "slice", .n_in = 1, .in = {T(dt, 2, 6, 32, 0, 0)},
         .ints = {{"starts", 1, {8}}, {"ends", 1, {24}}, {"axes", 1, {1}}}},
        {.op = "slice", .n_in = 1, .in = {T(dt, 2, 6, 32, 0, 0)},
         .ints = {{"starts", 1, {2}}, {"ends", 1, {18}}, {"axes", 1, {1}}}},
        {.op = "slice", .n_in = 1, .in = {T(dt, 2, 6, 32, 0, 0)},
         .ints = {{"starts", 1, {1}}, {"ends", 1, {17}}, {"axes", 1, {1}}}},
        {.op = "slice", .n_in = 1, .in = {T(dt, 2, 6, 32, 0, 0)},
         .ints = {{"starts", 1, {-1}}, {"ends", 1, {-100}}, {"axes", 1, {0}},
                  {"steps", 1, {-1}}}},
        /* broadcast rows (stride 0) in 16-byte units */
        {.op = "expand", .n_in = 1, .in = {T(dt, 3, 5, 1, 16, 0)},
         .ints = {{"shape", 3, {5, 7, 16}}}},
        /* the tiled transpose: last two dims with partial tiles, the tiled dim first with a
         * batch dim between, and batch dims on both sides */
        {.op = "transpose", .n_in = 1, .in = {T(dt, 3, 3, 40, 50, 0)},
         .ints = {{"perm", 3, {0, 2, 1}}}},
        {.op = "transpose", .n_in = 1, .in = {T(dt, 3, 40, 3, 50, 0)},
         .ints = {{"perm", 3, {2, 1, 0}}}},
        {.op = "transpose", .n_in = 1, .in = {T(dt, 4, 5, 20, 3, 18)},
         .ints = {{"perm", 4, {0, 3, 2, 1}}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) parity(&cases[k]);
}

static void shape_tests(void) {
    const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_I8, RTX_I64, RTX_BOOL, RTX_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        enum rtx_dtype dt = dts[d];
        struct spec s = {.op = "transpose", .n_in = 1, .in = {T(dt, 4, 2, 3, 5, 7)},
                         .ints = {{"perm", 4, {0, 2, 3, 1}}}};
        parity(&s);
        struct spec s2 = {.op = "transpose", .n_in = 1, .in = {T(dt, 2, 33, 65, 0, 0)}};
        parity(&s2);
        struct spec s3 = {.op = "transpose", .n_in = 1, .in = {T(dt, 4, 1, 4, 1, 3)},
                          .ints = {{"perm", 4, {3, 2, 1, 0}}}};
        parity(&s3);

        struct spec r = {.op = "reshape", .n_in = 1, .in = {T(dt, 3, 3, 4, 5, 0)},
                         .ints = {{"shape", 2, {5, -1}}}};
        parity(&r);

        struct spec e = {.op = "expand", .n_in = 1, .in = {T(dt, 3, 3, 1, 5, 0)},
                         .ints = {{"shape", 4, {2, 3, 4, 5}}}};
        parity(&e);
        struct spec e2 = {.op = "expand", .n_in = 1, .in = {T(dt, 0, 0, 0, 0, 0)},
                          .ints = {{"shape", 2, {3, 2}}}};
        parity(&e2);

        struct spec c = {.op = "concat", .n_in = 3, .iattr = "axis", .ival = 1,
                         .in = {T(dt, 3, 2, 3, 4, 0), T(dt, 3, 2, 1, 4, 0),
                                T(dt, 3, 2, 5, 4, 0)}};
        parity(&c);
        struct spec c2 = {.op = "concat", .n_in = 2, .iattr = "axis", .ival = -1,
                          .in = {T(dt, 2, 7, 3, 0, 0), T(dt, 2, 7, 5, 0, 0)}};
        parity(&c2);
        struct spec c3 = {.op = "concat", .n_in = 2, .iattr = "axis", .ival = 0,
                          .in = {T(dt, 2, 3, 6, 0, 0), T(dt, 2, 0, 6, 0, 0)}};
        parity(&c3);

        struct spec sl = {.op = "slice", .n_in = 1, .in = {T(dt, 3, 10, 11, 6, 0)},
                          .ints = {{"starts", 2, {-2, 1}}, {"ends", 2, {-11, 100}},
                                   {"axes", 2, {0, 2}}, {"steps", 2, {-3, 2}}}};
        parity(&sl);
        struct spec sl2 = {.op = "slice", .n_in = 1, .in = {T(dt, 2, 10, 11, 0, 0)},
                           .ints = {{"starts", 1, {1}}, {"ends", 1, {9}}}};
        parity(&sl2);
        struct spec sl3 = {.op = "slice", .n_in = 1, .in = {T(dt, 2, 10, 11, 0, 0)},
                           .ints = {{"starts", 1, {5}}, {"ends", 1, {2}}}};
        parity(&sl3); /* empty */
        struct spec sl4 = {.op = "slice", .n_in = 1, .in = {T(dt, 1, 17, 0, 0, 0)},
                           .ints = {{"starts", 1, {100}}, {"ends", 1, {-100}},
                                    {"steps", 1, {-1}}}};
        parity(&sl4); /* reversed */

        wide_copy_tests(dt);

        struct spec gt = {.op = "gather", .n_in = 2,
                          .in = {T(dt, 3, 10, 4, 3, 0), T(RTX_I64, 2, 2, 3, 0, 0)}};
        gt.in[1].bound = 10;
        parity(&gt);
        struct spec g1 = {.op = "gather", .n_in = 2, .iattr = "axis", .ival = 1,
                          .in = {T(dt, 3, 5, 4, 3, 0), T(RTX_I32, 1, 7, 0, 0, 0)}};
        g1.in[1].bound = 4;
        parity(&g1);
        struct spec g2 = {.op = "gather", .n_in = 2, .iattr = "axis", .ival = -1,
                          .in = {T(dt, 2, 5, 9, 0, 0), T(RTX_I32, 0, 0, 0, 0, 0)}};
        g2.in[1].bound = 9;
        parity(&g2);
    }

    /* constant: f32 matrix, i64 vector, bool scalar */
    const struct tin cv[] = {T(RTX_F32, 2, 3, 4, 0, 0), T(RTX_I64, 1, 5, 0, 0, 0),
                             T(RTX_BOOL, 0, 0, 0, 0, 0), T(RTX_BF16, 1, 3, 0, 0, 0)};
    for (size_t k = 0; k < sizeof cv / sizeof *cv; k++) {
        struct rtx_tensor *v = NULL;
        struct rtx_err err = {0};
        if (rtx_tensor_new(cv[k].dt, cv[k].ndim, cv[k].dims, &v, &err)) {
            gpu_check(false, "parity constant %zu: its value: %s", k, err.msg);
            continue;
        }
        for (int64_t i = 0; i < rtx_tensor_numel(v); i++) rtx_tensor_set(v, i, draw(&cv[k]));
        struct spec s = {.op = "constant", .n_in = 0, .value = v};
        struct rtx_graph *g = NULL;
        struct rtx_tensor *ref = NULL, *got = NULL;
        char why[300] = "";
        int rc = build(&s, &g, &err);
        if (rc == 0) rc = execute(cpu_be, g, NULL, 0, &ref, &err);
        if (rc == 0) rc = execute(gpu_be, g, NULL, 0, &got, &err);
        bool ok = rc == 0 && same(ref, got, 0.0, why, sizeof why);
        char sh[96];
        gpu_check(ok, "parity constant(%s)%s%s%s",
                  rtx_shape_str(v->dtype, v->ndim, v->dims, sh, sizeof sh), ok ? "" : ": ",
                  rc ? err.msg : "", why);
        rtx_tensor_unref(ref);
        rtx_tensor_unref(got);
        rtx_graph_free(g);
        rtx_tensor_unref(v);
    }
}

/* ------------------------------------------------------------------------------------------
 * softmax / log_softmax (reduce.cu): every kernel the last axis can take, per float dtype
 * ---------------------------------------------------------------------------------------- */

static void softmax_tests(void) {
    const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_BF16};
    const char *const ops[] = {"softmax", "log_softmax"};
    /* rows of r elements; for 2-byte types (8 per 16-byte pack) and f32 (4 per pack): */
    const struct {
        int64_t rows, r;
        enum fill fill;
    } shapes[] = {
        {33, 64, F_ANY},    /* a warp per row, 1 pack per lane (bf16 8 packs, f32 16) */
        {9, 400, F_ANY},    /* bf16: 2 packs per lane; f32: 4 */
        {5, 1000, F_WIDE},  /* bf16: 4 per lane; f32: a block, packs past the row */
        {3, 4096, F_ANY},   /* the benchmark's row: a block of 128 (bf16) or 256 (f32) */
        {2, 8200, F_ANY},   /* bf16: a block with packs past the row; f32: too long, rows kernel */
        {4, 4100, F_WIDE},  /* not whole packs: the block-per-row kernel */
        {16, 64, F_SPECIAL}, /* NaN, infinities and 1e30 in the rows: NaN where the CPU has NaN */
    };
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t o = 0; o < 2; o++) {
            for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
                struct spec s = {.op = ops[o], .n_in = 1,
                                 .in = {TF(T(dts[d], 2, shapes[k].rows, shapes[k].r, 0, 0),
                                           shapes[k].fill)}};
                parity(&s);
            }
            struct spec cols = {.op = ops[o], .n_in = 1, .iattr = "axis", .ival = 0,
                                .in = {TF(T(dts[d], 2, 50, 24, 0, 0), F_WIDE)}};
            parity(&cols); /* another axis: a thread per column */
        }
}

/* gather with an index out of range fails on both backends with the same message. */
static void gather_error_test(void) {
    struct spec s = {.op = "gather", .n_in = 2,
                     .in = {T(RTX_F32, 2, 6, 3, 0, 0), T(RTX_I64, 1, 4, 0, 0, 0)}};
    struct rtx_graph *g = NULL;
    struct rtx_tensor *in[2] = {NULL}, *out = NULL;
    struct rtx_err ec = {0}, eg = {0};
    if (build(&s, &g, &ec) || make_inputs(&s, in, &ec)) {
        gpu_check(false, "gather error test setup: %s", ec.msg);
        return;
    }
    const double idx[] = {1, -6, 6, 2}; /* element 2 is out of range */
    for (int i = 0; i < 4; i++) rtx_tensor_set(in[1], i, idx[i]);
    int rc_cpu = execute(cpu_be, g, in, 2, &out, &ec);
    rtx_tensor_unref(out);
    out = NULL;
    int rc_gpu = execute(gpu_be, g, in, 2, &out, &eg);
    rtx_tensor_unref(out);
    gpu_check(rc_cpu == RTX_EINVAL && rc_gpu == RTX_EINVAL && strcmp(ec.msg, eg.msg) == 0 &&
                  strstr(eg.msg, "'n'") && strstr(eg.msg, "index 6"),
              "gather out of range: RTX_EINVAL with the CPU's message (gpu: %s)", eg.msg);
    /* the backend keeps working after the failed node */
    const double good[] = {1, -6, 5, 0};
    for (int i = 0; i < 4; i++) rtx_tensor_set(in[1], i, good[i]);
    out = NULL;
    struct rtx_tensor *ref = NULL;
    int rc = execute(cpu_be, g, in, 2, &ref, &ec);
    if (rc == 0) rc = execute(gpu_be, g, in, 2, &out, &eg);
    char why[300] = "";
    gpu_check(rc == 0 && same(ref, out, 0.0, why, sizeof why),
              "gather works again after the error%s%s", why, rc ? eg.msg : "");
    rtx_tensor_unref(ref);
    rtx_tensor_unref(out);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
    rtx_graph_free(g);
}

/* ------------------------------------------------------------------------------------------
 * A random elementwise graph
 * ---------------------------------------------------------------------------------------- */

static int random_graph(uint64_t seed, int n_nodes, struct rtx_graph **out,
                        struct rtx_err *err) {
    rng.s = seed * 0x9e3779b97f4a7c15ull + 1;
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new("random", &g, err);
    const int64_t mat[] = {16, 33}, row[] = {33};
    if (rc >= 0) rc = rtx_graph_add_input(g, "a", RTX_F32, 2, mat, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "b", RTX_F32, 1, row, err);
    struct rtx_tensor *w = NULL;
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, mat, &w, err);
    if (rc >= 0) {
        for (int64_t i = 0; i < 16 * 33; i++) rtx_tensor_set(w, i, rng_unit() - 0.5);
        rc = rtx_graph_add_initializer(g, "w", w, err);
    }
    rtx_tensor_unref(w);
    char names[64][16];
    int n_names = 3;
    snprintf(names[0], sizeof names[0], "a");
    snprintf(names[1], sizeof names[1], "b");
    snprintf(names[2], sizeof names[2], "w");
    static const char *const ops[] = {"add", "sub", "mul", "tanh", "sigmoid", "relu", "neg",
                                      "silu", "gelu", "where", "cast"};
    for (int k = 0; k < n_nodes && rc >= 0 && n_names < 64; k++) {
        const char *op = ops[rng_next() % (sizeof ops / sizeof *ops)];
        char y[16];
        snprintf(y, sizeof y, "v%d", k);
        const char *x0 = names[rng_next() % (unsigned)n_names];
        const char *x1 = names[rng_next() % (unsigned)n_names];
        const char *outs[] = {y};
        if (strcmp(op, "where") == 0) {
            char c[16];
            snprintf(c, sizeof c, "c%d", k);
            const char *cin[] = {x0, x1}, *cout[] = {c};
            rc = rtx_graph_add_node(g, "less", "", cin, 2, cout, 1, err);
            const char *win[] = {c, x1, x0};
            if (rc >= 0) rc = rtx_graph_add_node(g, "where", "", win, 3, outs, 1, err);
        } else if (strcmp(op, "cast") == 0) { /* through f16 and back */
            char h[16];
            snprintf(h, sizeof h, "h%d", k);
            const char *hin[] = {x0}, *hout[] = {h};
            int nd = rtx_graph_add_node(g, "cast", "", hin, 1, hout, 1, err);
            rc = nd >= 0 ? rtx_graph_set_attr_string(g, nd, "to", "f16", err) : nd;
            const char *bin[] = {h};
            nd = rc >= 0 ? rtx_graph_add_node(g, "cast", "", bin, 1, outs, 1, err) : rc;
            rc = nd >= 0 ? rtx_graph_set_attr_string(g, nd, "to", "f32", err) : nd;
        } else if (strcmp(op, "add") == 0 || strcmp(op, "sub") == 0 ||
                   strcmp(op, "mul") == 0) {
            const char *bin[] = {x0, x1};
            rc = rtx_graph_add_node(g, op, "", bin, 2, outs, 1, err);
        } else {
            const char *uin[] = {x0};
            rc = rtx_graph_add_node(g, op, "", uin, 1, outs, 1, err);
        }
        snprintf(names[n_names++], sizeof names[0], "%s", y);
    }
    /* a squashed sum of the last values, and one intermediate as a second output */
    const char *fin[] = {names[n_names - 1], names[n_names - 2]}, *fout[] = {"s"};
    if (rc >= 0) rc = rtx_graph_add_node(g, "add", "", fin, 2, fout, 1, err);
    const char *tin_[] = {"s"}, *tout[] = {"out"};
    if (rc >= 0) rc = rtx_graph_add_node(g, "tanh", "", tin_, 1, tout, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "out", err);
    if (rc >= 0) rc = rtx_graph_add_output(g, names[n_names / 2], err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

static void random_graph_tests(void) {
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct rtx_graph *g = NULL;
        struct rtx_err err = {0};
        struct rtx_tensor *in[2] = {NULL}, *ref[2] = {NULL}, *got[2] = {NULL};
        struct rtx_plan *plan = NULL;
        char why[300] = "";
        int rc = random_graph(seed, 24, &g, &err);
        const int64_t mat[] = {16, 33}, row[] = {33};
        if (rc == 0) rc = rtx_tensor_new(RTX_F32, 2, mat, &in[0], &err);
        if (rc == 0) rc = rtx_tensor_new(RTX_F32, 1, row, &in[1], &err);
        for (int i = 0; rc == 0 && i < 2; i++)
            for (int64_t k = 0; k < rtx_tensor_numel(in[i]); k++)
                rtx_tensor_set(in[i], k, 2.0 * rng_unit() - 1.0);
        if (rc == 0) rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, 2, NULL, &plan,
                                       &err);
        if (rc == 0) rc = rtx_plan_execute(plan, cpu_be, in, 2, ref, 2, NULL, NULL, &err);
        bool ok = rc == 0;
        /* twice on the GPU: the second run reuses the uploaded initializer */
        for (int run = 0; run < 2 && ok; run++) {
            rc = rtx_plan_execute(plan, gpu_be, in, 2, got, 2, NULL, NULL, &err);
            ok = rc == 0;
            for (int o = 0; o < 2 && ok; o++) ok = same(ref[o], got[o], 1e-3, why, sizeof why);
            for (int o = 0; o < 2; o++) {
                rtx_tensor_unref(got[o]);
                got[o] = NULL;
            }
        }
        gpu_check(ok, "random elementwise graph, seed %llu (%d nodes), run twice%s%s%s",
                  (unsigned long long)seed, g ? g->n_nodes : 0, ok ? "" : ": ",
                  rc ? err.msg : "", why);
        rtx_plan_free(plan);
        for (int i = 0; i < 2; i++) {
            rtx_tensor_unref(in[i]);
            rtx_tensor_unref(ref[i]);
        }
        rtx_graph_free(g);
    }
}

/* ------------------------------------------------------------------------------------------
 * Bandwidth of add (device-resident tensors, through the backend's run_node)
 * ---------------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Times the one-node spec s on device-resident inputs (zeros) into an output of out_dims, 20
 * runs after two warm-up runs, through the backend's run_node; reports GB/s for `moved` bytes
 * per run. */
static void bandwidth_case(const char *what, const struct spec *s, int out_ndim,
                           const int64_t *out_dims, double moved) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    struct rtx_tensor *host[4] = {NULL}, *dev[4] = {NULL}, *y = NULL;
    struct rtx_buffer *buf = NULL;
    enum rtx_dtype dt = s->in[0].dt;
    int rc = build(s, &g, &err);
    for (int i = 0; i < s->n_in && rc == 0; i++) {
        rc = rtx_tensor_new(s->in[i].dt, s->in[i].ndim, s->in[i].dims, &host[i], &err);
        if (rc == 0) rc = rtx_backend_upload(gpu_be, host[i], &dev[i], &err);
    }
    size_t bytes = (size_t)rtx_shape_numel(out_ndim, out_dims) * rtx_dtype_size(dt);
    if (rc == 0) rc = rtx_backend_buffer_new(gpu_be, bytes, &buf, &err);
    if (rc == 0) rc = rtx_tensor_from_buffer(buf, 0, dt, out_ndim, out_dims, &y, &err);
    struct rtx_tensor *outs[1] = {y};
    struct rtx_node_args a = {.graph = g, .node = g ? &g->nodes[0] : NULL, .n_in = s->n_in,
                              .in = dev, .n_out = 1, .out = outs};
    const int reps = 20;
    double t0 = 0, t1 = 0;
    for (int r = -2; r < reps && rc == 0; r++) { /* two warm-up runs */
        if (r == 0) {
            rc = rtx_backend_synchronize(gpu_be, &err);
            t0 = now_s();
        }
        if (rc == 0) rc = rtx_backend_run_node(gpu_be, &a, &err);
    }
    if (rc == 0) rc = rtx_backend_synchronize(gpu_be, &err);
    t1 = now_s();
    /* a figure, not a check: a note when the runs worked (the parity cases check these ops'
     * results), a failed check when they did not */
    if (rc == 0)
        gpu_note("%s: %.3f ms per run, %.0f GB/s", what, (t1 - t0) * 1e3 / reps,
                 moved * reps / (t1 - t0) / 1e9);
    else
        gpu_check(false, "%s: the timed runs: %s", what, err.msg);
    rtx_tensor_unref(y);
    rtx_buffer_unref(buf);
    for (int i = 0; i < s->n_in; i++) {
        rtx_tensor_unref(host[i]);
        rtx_tensor_unref(dev[i]);
    }
    rtx_graph_free(g);
}

static void bandwidth(enum rtx_dtype dt, int64_t n, bool row_broadcast) {
    int64_t dims[2] = {n / 1024, 1024}, bdims[1] = {1024};
    struct spec s = {.op = "add", .n_in = 2};
    s.in[0] = T(dt, 2, dims[0], dims[1], 0, 0);
    s.in[1] = row_broadcast ? T(dt, 1, bdims[0], 0, 0, 0) : s.in[0];
    char what[64];
    snprintf(what, sizeof what, "add %s [%lld]%s", rtx_dtype_name(dt), (long long)n,
             row_broadcast ? " + row" : "");
    double bytes = (double)n * (double)rtx_dtype_size(dt);
    bandwidth_case(what, &s, 2, dims, bytes * (row_broadcast ? 2.0 : 3.0));
}

/* The copies of the bf16 transformer block's attention (8 x 512 tokens, 16 heads of 64) and
 * the benchmark's softmax, beside a plain device copy (reshape) of the same bytes: the
 * memory-bound figures of docs/gpu.md. */
static void memory_bound_bandwidth(void) {
    const double head_bytes = 8.0 * 512 * 16 * 64 * 2;
    struct spec copy = {.op = "reshape", .n_in = 1, .in = {T(RTX_BF16, 4, 8, 512, 16, 64)},
                        .ints = {{"shape", 3, {8, 512, 1024}}}};
    bandwidth_case("device copy (reshape) bf16 [8,512,16,64]", &copy, 3,
                   (const int64_t[]){8, 512, 1024}, 2 * head_bytes);
    struct spec split = {.op = "transpose", .n_in = 1, .in = {T(RTX_BF16, 4, 8, 512, 16, 64)},
                         .ints = {{"perm", 4, {0, 2, 1, 3}}}};
    bandwidth_case("transpose bf16 [8,512,16,64] perm (0,2,1,3)", &split, 4,
                   (const int64_t[]){8, 16, 512, 64}, 2 * head_bytes);
    struct spec merge = {.op = "transpose", .n_in = 1, .in = {T(RTX_BF16, 4, 8, 16, 512, 64)},
                         .ints = {{"perm", 4, {0, 2, 1, 3}}}};
    bandwidth_case("transpose bf16 [8,16,512,64] perm (0,2,1,3)", &merge, 4,
                   (const int64_t[]){8, 512, 16, 64}, 2 * head_bytes);
    struct spec keys = {.op = "transpose", .n_in = 1, .in = {T(RTX_BF16, 4, 8, 16, 512, 64)},
                        .ints = {{"perm", 4, {0, 1, 3, 2}}}};
    bandwidth_case("transpose bf16 [8,16,512,64] perm (0,1,3,2)", &keys, 4,
                   (const int64_t[]){8, 16, 64, 512}, 2 * head_bytes);
    const int64_t rows = 32768, cols = 4096;
    const double sm_bytes = 2.0 * (double)rows * cols * 2;
    struct spec sm = {.op = "softmax", .n_in = 1, .in = {T(RTX_BF16, 2, rows, cols, 0, 0)}};
    bandwidth_case("softmax bf16 [32768,4096]", &sm, 2, (const int64_t[]){rows, cols}, sm_bytes);
    struct spec lsm = {.op = "log_softmax", .n_in = 1,
                       .in = {T(RTX_BF16, 2, rows, cols, 0, 0)}};
    bandwidth_case("log_softmax bf16 [32768,4096]", &lsm, 2, (const int64_t[]){rows, cols},
                   sm_bytes);
}

void gpu_parity_tests(int index) {
    struct rtx_err err = {0};
    struct rtx_cpu_options co = {.n_threads = 0};
    struct rtx_cuda_options go = {.device = index};
    int rc = rtx_backend_cpu_new(&co, &cpu_be, &err);
    if (!gpu_check(rc == 0, "CPU backend for parity%s%s", rc ? ": " : "", err.msg)) return;
    rc = rtx_backend_cuda_new(&go, &gpu_be, &err);
    if (!gpu_check(rc == 0, "CUDA backend on device %d%s%s", index, rc ? ": " : "", err.msg)) {
        rtx_backend_free(cpu_be);
        return;
    }
    char name[16];
    snprintf(name, sizeof name, "cuda:%d", index);
    gpu_check(strcmp(rtx_backend_name(gpu_be), name) == 0, "backend name %s",
              rtx_backend_name(gpu_be));
    gpu_check(!rtx_backend_is_host(gpu_be), "the CUDA backend is not host memory");
    elementwise_tests();
    shape_tests();
    softmax_tests();
    gather_error_test();
    random_graph_tests();
    bandwidth(RTX_F32, (int64_t)1 << 26, false);
    bandwidth(RTX_BF16, (int64_t)1 << 26, false);
    bandwidth(RTX_F32, (int64_t)1 << 26, true);
    memory_bound_bandwidth();
    rtx_backend_free(gpu_be);
    rtx_backend_free(cpu_be);
    gpu_be = cpu_be = NULL;
}
