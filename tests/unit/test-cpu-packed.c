/*
 * test-cpu-packed.c - products whose right operand is a constant of the graph
 * (kernels/cpu/gemm-packed.c): under every ISA build this CPU runs (generic: OpenBLAS; avx2
 * and avx512: the weight packed once), gemm and matmul with f32, f16 and bf16 weights, either
 * layout, at shapes with row, column and k tails, with a bias, alpha and beta, and fused with
 * the activation after them, against a double-precision reference; and the packs' lifetime:
 * made on the first run, shared by the plans of one graph, dropped with the last of them (also
 * when the backend went first); a direct conv's repacked weights likewise.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend-impl.h"
#include "runtime/mem-pool.h"
#include "runtime/runtime-impl.h"
#include "tests/unit/test-util.h"

static const char *const ISAS[] = {"generic", "avx2", "avx512"};

/* A CPU backend of two threads built for isa, charging account (NULL: none); NULL when this
 * CPU or build lacks the ISA. The variable is restored before returning. */
static struct rtx_backend *backend_with(const char *isa, struct rtx_mem_account *account) {
    const char *old = getenv("RTX_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("RTX_CPU_ISA", isa, 1);
    struct rtx_backend *be = NULL;
    struct rtx_err err = {0};
    int rc = rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 2, .account = account},
                                 &be, &err);
    if (saved) {
        setenv("RTX_CPU_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("RTX_CPU_ISA");
    }
    ck_assert_msg(rc == 0 || rc == RTX_EUNSUPPORTED, "RTX_CPU_ISA=%s: %s", isa, err.msg);
    return rc == 0 ? be : NULL;
}

static struct rtx_backend *backend_for(const char *isa) {
    return backend_with(isa, NULL);
}

struct product {
    const char *op; /* "gemm" or "matmul" */
    int64_t batch;  /* matmul: x is [batch, M, K] (folded into rows); gemm: 1 */
    int64_t M, K, N;
    bool tb;            /* w stored [N, K] */
    bool bias;          /* gemm: c [N] (a row bias, added in the product's stores) */
    bool c_full;        /* gemm: c [M, N] instead (added to y before the product) */
    float alpha, beta;  /* gemm */
    bool relu;          /* a relu after the product (a fused group) */
    enum rtx_dtype wdt; /* the weight's dtype */
    /* matmul's fused epilogue: an add of a bias [N], an add of a residual shaped like y, then
     * act ("relu", "gelu", "gelu_tanh"; NULL: none), in the products' register tiles */
    bool add_bias, add_res;
    const char *act;
};

/* The graph x -> op(x, w[, c]) [-> relu] -> y with w (and c) initializers, or matmul's
 * epilogue (bias c, residual r, act); w, c and r are returned (references the caller drops). */
static struct rtx_graph *product_graph(const struct product *p, struct rtx_tensor **w,
                                       struct rtx_tensor **c, struct rtx_tensor **r) {
    struct rtx_graph *g;
    struct rtx_err err;
    ck_assert_int_eq(rtx_graph_new("packed", &g, &err), 0);
    int64_t xd[3] = {p->batch, -1, p->K}, wd[2] = {p->tb ? p->N : p->K, p->tb ? p->K : p->N};
    bool mm = strcmp(p->op, "matmul") == 0;
    ck_assert_int_ge(rtx_graph_add_input(g, "x", p->wdt, mm ? 3 : 2, mm ? xd : xd + 1, &err), 0);
    *w = tu_tensor_random(p->wdt, 2, wd, -1, 1, 40 + (unsigned)(p->M * 7 + p->N));
    ck_assert_int_ge(rtx_graph_add_initializer(g, "w", *w, &err), 0);
    *c = *r = NULL;
    const char *in[3] = {"x", "w", "c"};
    if (p->bias) {
        int64_t cd[2] = {p->M, p->N};
        *c = p->c_full ? tu_tensor_random(p->wdt, 2, cd, -1, 1, 41)
                       : tu_tensor_random(p->wdt, 1, &p->N, -1, 1, 41);
        ck_assert_int_ge(rtx_graph_add_initializer(g, "c", *c, &err), 0);
    }
    const char *out[1] = {p->relu || p->add_bias || p->add_res || p->act ? "prod" : "y"};
    int n = rtx_graph_add_node(g, p->op, "product", in, p->bias ? 3 : 2, out, 1, &err);
    ck_assert_msg(n >= 0, "%s", err.msg);
    char attrs[96];
    if (mm)
        snprintf(attrs, sizeof attrs, "trans_b=i:%d", p->tb);
    else
        snprintf(attrs, sizeof attrs, "trans_b=i:%d;alpha=f:%g;beta=f:%g", p->tb, p->alpha,
                 p->beta);
    tu_set_attrs(g, n, attrs);
    if (p->relu) {
        const char *rin[1] = {"prod"}, *rout[1] = {"y"};
        ck_assert_int_ge(rtx_graph_add_node(g, "relu", "act", rin, 1, rout, 1, &err), 0);
    }
    const char *v = "prod";
    if (p->add_bias) {
        *c = tu_tensor_random(RTX_F32, 1, &p->N, -1, 1, 43);
        ck_assert_int_ge(rtx_graph_add_initializer(g, "b", *c, &err), 0);
        const char *ain[2] = {"prod", "b"}, *aout[1] = {"biased"};
        ck_assert_int_ge(rtx_graph_add_node(g, "add", "bias", ain, 2, aout, 1, &err), 0);
        v = "biased";
    }
    if (p->add_res) {
        int64_t rd[3] = {p->batch, p->M, p->N};
        *r = tu_tensor_random(RTX_F32, 3, rd, -1, 1, 44);
        ck_assert_int_ge(rtx_graph_add_initializer(g, "r", *r, &err), 0);
        const char *ain[2] = {"r", v}, *aout[1] = {p->act ? "summed" : "y"};
        ck_assert_int_ge(rtx_graph_add_node(g, "add", "residual", ain, 2, aout, 1, &err), 0);
        v = "summed";
    }
    if (p->act) {
        const char *ain[1] = {v}, *aout[1] = {"y"};
        bool tanh_form = strcmp(p->act, "gelu_tanh") == 0;
        int a = rtx_graph_add_node(g, tanh_form ? "gelu" : p->act, "act", ain, 1, aout, 1, &err);
        ck_assert_msg(a >= 0, "%s", err.msg);
        if (tanh_form) tu_set_attrs(g, a, "approximate=s:tanh");
    }
    ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
    return g;
}

/* y as the graph defines it, in double precision. */
static double *reference(const struct product *p, const struct rtx_tensor *x,
                         const struct rtx_tensor *w, const struct rtx_tensor *c,
                         const struct rtx_tensor *r) {
    int64_t rows = p->batch * p->M;
    double *y = malloc((size_t)(rows * p->N) * sizeof *y);
    ck_assert_ptr_nonnull(y);
    bool mm = strcmp(p->op, "matmul") == 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < p->N; j++) {
            double s = 0;
            for (int64_t k = 0; k < p->K; k++)
                s += rtx_tensor_get(x, i * p->K + k) *
                     rtx_tensor_get(w, p->tb ? j * p->K + k : k * p->N + j);
            if (!mm)
                s = p->alpha * s +
                    (c ? p->beta * rtx_tensor_get(c, p->c_full ? i * p->N + j : j) : 0.0);
            if (p->add_bias) s += rtx_tensor_get(c, j);
            if (p->add_res) s += rtx_tensor_get(r, i * p->N + j);
            if (p->act && strcmp(p->act, "gelu") == 0)
                s = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
            else if (p->act && strcmp(p->act, "gelu_tanh") == 0)
                s = 0.5 * s * (1.0 + tanh(sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
            y[i * p->N + j] =
                (p->relu || (p->act && strcmp(p->act, "relu") == 0)) && s < 0 ? 0.0 : s;
        }
    return y;
}

static void check_product(struct rtx_backend *be, const char *isa, const struct product *p) {
    struct rtx_tensor *w, *c, *r;
    struct rtx_graph *g = product_graph(p, &w, &c, &r);
    bool mm = strcmp(p->op, "matmul") == 0;
    int64_t xd[3] = {p->batch, p->M, p->K};
    struct rtx_tensor *x = tu_tensor_random(p->wdt, mm ? 3 : 2, mm ? xd : xd + 1, -1, 1, 42);
    double *want = reference(p, x, w, c, r);
    struct rtx_plan *plan;
    struct rtx_err err;
    ck_assert_msg(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err) == 0,
                  "%s", err.msg);
    for (int run = 0; run < 2; run++) { /* the pack made, then found */
        struct rtx_tensor *y = NULL;
        ck_assert_msg(rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, NULL, &err) == 0, "%s %s: %s",
                      isa, p->op, err.msg);
        /* f32 sums of up to 300 products of magnitude <= 1, in another order; f16 and bf16
         * results rounded once (half an ulp: 2^-11, 2^-8 relative) */
        double rel = p->wdt == RTX_BF16 ? 4e-3 : p->wdt == RTX_F16 ? 5e-4 : 1e-5;
        ck_assert_int_eq(rtx_tensor_numel(y), p->batch * p->M * p->N);
        for (int64_t i = 0; i < rtx_tensor_numel(y); i++) {
            double got = rtx_tensor_get(y, i), d = fabs(got - want[i]);
            ck_assert_msg(d <= 2e-5 + rel * fabs(want[i]),
                          "%s %s M=%lld K=%lld N=%lld tb=%d %s [%lld]: %.7g, want %.7g", isa,
                          p->op, (long long)p->M, (long long)p->K, (long long)p->N, p->tb,
                          rtx_dtype_name(p->wdt), (long long)i, got, want[i]);
        }
        rtx_tensor_unref(y);
    }
    rtx_plan_free(plan);
    free(want);
    rtx_tensor_unref(x);
    rtx_tensor_unref(w);
    rtx_tensor_unref(c);
    rtx_tensor_unref(r);
    rtx_graph_free(g);
}

START_TEST(products_with_constant_weights_match_a_double_reference) {
    const struct product cases[] = {
        {"gemm", 1, 64, 256, 512, true, true, false, 1.0f, 1.0f, false, RTX_F32, .act = NULL},
        {"gemm", 1, 13, 300, 37, true, true, false, 0.5f, 2.0f, false, RTX_F32,
         .act = NULL}, /* tails */
        {"gemm", 1, 13, 300, 37, false, true, true, 0.5f, 2.0f, true, RTX_F32, .act = NULL},
        {"gemm", 1, 7, 33, 70, false, false, false, 1.5f, 0.0f, true, RTX_F32, .act = NULL},
        {"gemm", 1, 1, 9, 5, true, true, false, 1.0f, 1.0f, true, RTX_BF16, .act = NULL},
        {"gemm", 1, 100, 64, 48, false, true, false, 1.0f, -1.0f, true, RTX_F16, .act = NULL},
        {"matmul", 3, 5, 260, 33, false, false, false, 1.0f, 0.0f, false, RTX_F32, .act = NULL},
        {"matmul", 2, 17, 16, 100, true, false, false, 1.0f, 0.0f, true, RTX_BF16, .act = NULL},
        {"matmul", 1, 200, 48, 96, false, false, false, 1.0f, 0.0f, false, RTX_F16, .act = NULL},
        /* fused epilogues in the register tiles: full and partial panels, one k block and
         * three (K > 256: the epilogue on the last only), rows past a task's */
        {"matmul", 2, 67, 40, 70, false, .wdt = RTX_F32, .add_bias = true, .add_res = true,
         .act = "relu"},
        {"matmul", 1, 130, 600, 50, true, .wdt = RTX_F32, .add_bias = true, .add_res = true,
         .act = "gelu_tanh"},
        {"matmul", 1, 64, 128, 96, false, .wdt = RTX_F32, .add_bias = true, .act = "gelu"},
        {"matmul", 3, 7, 300, 33, false, .wdt = RTX_F32, .add_res = true},
        {"matmul", 1, 9, 16, 40, false, .wdt = RTX_F32, .act = "gelu_tanh"},
    };
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        struct rtx_backend *be = backend_for(ISAS[i]);
        if (be == NULL) continue;
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
            check_product(be, ISAS[i], &cases[k]);
        rtx_backend_free(be);
    }
}
END_TEST

/* x [1, rows, 48] . w [48, 40]: the plan for `rows`. */
static struct rtx_plan *plan_rows(const struct rtx_graph *g, int64_t rows, struct rtx_tensor **x) {
    int64_t xd[3] = {1, rows, 48};
    *x = tu_tensor_random(RTX_F32, 3, xd, -1, 1, 50 + (unsigned)rows);
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)x, 1, NULL, &p, &err), 0);
    return p;
}

static void run(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor *x) {
    struct rtx_tensor *y = NULL;
    struct rtx_err err;
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, NULL, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(y);
}

START_TEST(packs_live_as_long_as_the_plans_that_use_them) {
    struct product prod = {"matmul", 1,    1,    48,    40,      false,      false,
                           false,    1.0f, 0.0f, false, RTX_F32, .act = NULL};
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        struct rtx_backend *be = backend_for(ISAS[i]);
        if (be == NULL) continue;
        bool packs = strcmp(ISAS[i], "generic") != 0;
        struct rtx_tensor *w, *c, *r, *x1, *x2;
        struct rtx_graph *g = product_graph(&prod, &w, &c, &r);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), 0);
        struct rtx_plan *p1 = plan_rows(g, 3, &x1), *p2 = plan_rows(g, 29, &x2);
        run(p1, be, x1);
        size_t one = rtx__const_derived_bytes(be);
        /* 40 columns in panels of 16 (avx2) or 32 (avx512), zeros past them */
        size_t want = strcmp(ISAS[i], "avx2") == 0 ? 48 * 48 * 4 : 48 * 64 * 4;
        ck_assert_uint_eq(one, packs ? want : 0);
        run(p2, be, x2); /* the other shape's plan finds the same pack */
        run(p1, be, x1);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), one);
        ck_assert_int_eq(rtx__const_cache_entries(be), 1);
        rtx_plan_free(p1);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), one);
        rtx_plan_free(p2);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), 0);
        ck_assert_int_eq(rtx__const_cache_entries(be), 0);
        /* a plan freed after its backend drops its pack into the closed cache */
        rtx_tensor_unref(x1);
        rtx_tensor_unref(x2);
        struct rtx_tensor *x3;
        p1 = plan_rows(g, 5, &x3);
        run(p1, be, x3);
        rtx_backend_free(be);
        rtx_plan_free(p1);
        rtx_tensor_unref(x3);
        rtx_tensor_unref(w);
        rtx_graph_free(g);
    }
}
END_TEST

/* A conv2d's weight, a constant, is repacked once for the direct conv (kernels/cpu/
 * conv-direct.c; a stride-2 conv) or transformed once for Winograd's (conv-winograd.c; a
 * 3x3 stride-1 one) and kept while the plan lives; the results equal a repack per call (a
 * plan run by a backend whose cache does not hold the weight). */
START_TEST(conv_weights_are_repacked_once) {
    static const char *const geometry[2] = {"pads=I:1,1,1,1", "pads=I:1,1,1,1;strides=I:2,2"};
    for (size_t i = 0; i < 2 * sizeof ISAS / sizeof *ISAS; i++) {
        const char *isa = ISAS[i / 2];
        struct rtx_backend *be = backend_for(isa), *other = backend_for(isa);
        if (be == NULL) continue;
        struct rtx_graph *g;
        struct rtx_err err;
        ck_assert_int_eq(rtx_graph_new("conv", &g, &err), 0);
        int64_t xd[4] = {2, 5, 9, 11}, wd[4] = {40, 5, 3, 3};
        ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 4, xd, &err), 0);
        struct rtx_tensor *w = tu_tensor_random(RTX_F32, 4, wd, -1, 1, 60);
        ck_assert_int_ge(rtx_graph_add_initializer(g, "w", w, &err), 0);
        const char *in[2] = {"x", "w"}, *out[1] = {"y"};
        int n = rtx_graph_add_node(g, "conv2d", "conv", in, 2, out, 1, &err);
        ck_assert_int_ge(n, 0);
        tu_set_attrs(g, n, geometry[i % 2]);
        ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
        struct rtx_tensor *x = tu_tensor_random(RTX_F32, 4, xd, -1, 1, 61), *y[2] = {0};
        struct rtx_plan *p;
        ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err),
                         0);
        ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y[0], 1, NULL, NULL, &err), 0);
        bool kept = strcmp(isa, "generic") != 0;
        ck_assert_msg((rtx__const_derived_bytes(be) > 0) == kept, "%s %s: %zu bytes", isa,
                      geometry[i % 2], rtx__const_derived_bytes(be));
        rtx_tensor_unref(y[0]);
        ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y[0], 1, NULL, NULL, &err), 0);
        /* the other backend's cache: the plan's constants are entered there when it runs
         * there; the same bits either way */
        ck_assert_int_eq(rtx_plan_execute(p, other, &x, 1, &y[1], 1, NULL, NULL, &err), 0);
        ck_assert(memcmp(rtx_tensor_data(y[0]), rtx_tensor_data(y[1]), rtx_tensor_nbytes(y[0])) ==
                  0);
        rtx_plan_free(p);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), 0);
        ck_assert_uint_eq(rtx__const_derived_bytes(other), 0);
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(y[1]);
        rtx_tensor_unref(x);
        rtx_tensor_unref(w);
        rtx_graph_free(g);
        rtx_backend_free(be);
        rtx_backend_free(other);
    }
}
END_TEST

/* A memory account that counts what is charged and refuses past a limit. */
struct counting_account {
    struct rtx_mem_account a;
    size_t held, limit;
};

static int count_charge(struct rtx_mem_account *a, size_t bytes, struct rtx_err *err) {
    struct counting_account *c = (struct counting_account *)a;
    if (c->held + bytes > c->limit)
        return rtx_err_set(err, RTX_ENOMEM, "test account: %zu bytes over its limit", bytes);
    c->held += bytes;
    return 0;
}

static void count_credit(struct rtx_mem_account *a, size_t bytes) {
    ((struct counting_account *)a)->held -= bytes;
}

/* The kept packs are buffers of the backend, charged to its account while kept; an account
 * that refuses them leaves each call to pack for itself (same bits), never a failure. */
START_TEST(kept_packs_are_charged_to_the_account) {
    struct product prod = {"gemm", 1,    7,    48,   40,      true,       true,
                           false,  1.0f, 1.0f, true, RTX_F32, .act = NULL};
    const char *isa = "avx512";
    struct rtx_backend *probe = backend_for(isa);
    if (probe == NULL) isa = "avx2";
    rtx_backend_free(probe);
    for (int refuse = 0; refuse < 2; refuse++) {
        struct counting_account acct = {{count_charge, count_credit}, 0, SIZE_MAX};
        struct rtx_backend *be = backend_with(isa, &acct.a);
        if (be == NULL) return; /* no AVX2: nothing is packed (the generic build) */
        struct rtx_err err;
        struct rtx_tensor *w, *c, *r, *x, *y[2] = {0};
        struct rtx_graph *g = product_graph(&prod, &w, &c, &r);
        int64_t xd[2] = {7, 48};
        x = tu_tensor_random(RTX_F32, 2, xd, -1, 1, 70);
        struct rtx_plan *p;
        ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err),
                         0);
        for (int run = 0; run < 2; run++) {
            /* room for the run's output and arena (buffers too), not for the pack (9 KiB) */
            if (refuse) acct.limit = acct.held + 4096;
            ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &y[run], 1, NULL, NULL, &err) == 0, "%s",
                          err.msg);
        }
        size_t packs = rtx__const_derived_bytes(be);
        if (refuse) {
            ck_assert_uint_eq(packs, 0);
        } else {
            ck_assert_uint_gt(packs, 0);
            ck_assert_uint_ge(acct.held, packs);
        }
        ck_assert(memcmp(rtx_tensor_data(y[0]), rtx_tensor_data(y[1]), rtx_tensor_nbytes(y[0])) ==
                  0);
        rtx_plan_free(p);
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(y[1]);
        ck_assert_uint_eq(rtx__const_derived_bytes(be), 0);
        rtx_backend_free(be);
        ck_assert_uint_eq(acct.held, 0); /* every charge given back */
        rtx_tensor_unref(x);
        rtx_tensor_unref(w);
        rtx_tensor_unref(c);
        rtx_graph_free(g);
    }
}
END_TEST

Suite *rtx_cpu_packed_suite(void) {
    Suite *s = suite_create("cpu_packed");
    TCase *tc = tcase_create("packed");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, products_with_constant_weights_match_a_double_reference);
    tcase_add_test(tc, packs_live_as_long_as_the_plans_that_use_them);
    tcase_add_test(tc, conv_weights_are_repacked_once);
    tcase_add_test(tc, kept_packs_are_charged_to_the_account);
    suite_add_tcase(s, tc);
    return s;
}
