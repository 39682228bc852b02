/*
 * test-cpu-isa.c - the CPU backend's ISA builds (kernels/cpu/cpu-impl.h, ISA variants): the
 * AVX2 build computes the same bits as the generic one for every op group it covers (conv2d,
 * convolved directly there, within 1e-5), on
 * inputs long enough for the vector loops and with odd tails; RTX_CPU_ISA picks a build
 * (generic, avx2, avx512) and rejects what it cannot give. Products with constant weights,
 * packed in the avx2 and avx512 builds, are checked by test-cpu-packed.c. The values themselves are checked against NumPy-style
 * references by the cpu_* suites, which `make test-unit` runs under both builds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "tests/unit/test-util.h"

static bool have_avx2(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

/* op on in[] under RTX_CPU_ISA=isa; the variable is restored before returning. */
static struct rtx_tensor *run_isa(const char *isa, const char *op, const char *attrs,
                                  struct rtx_tensor *const *in, int n_in) {
    const char *old = getenv("RTX_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("RTX_CPU_ISA", isa, 1);
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, in, n_in, out, 1, &err);
    if (saved) {
        setenv("RTX_CPU_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("RTX_CPU_ISA");
    }
    ck_assert_msg(rc == 0, "%s under %s: %s", op, isa, err.msg);
    return out[0];
}

static bool have_avx512(void) {
#if defined(__x86_64__)
    return have_avx2() && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* The generic build and the AVX2 one (its 256-bit and 512-bit kernels, RTX_CPU_ISA=avx2 and
 * avx512) give identical bytes for op, when the CPU has them; with rtol > 0, values within
 * rtol instead (conv2d: the AVX2 build convolves directly with FMA, the generic one through
 * im2col and OpenBLAS). */
static void compare_builds(const char *op, const char *attrs, struct rtx_tensor *const *in,
                           int n_in, double rtol) {
    struct rtx_tensor *g = run_isa("generic", op, attrs, in, n_in);
    const char *isas[2] = {"avx2", "avx512"};
    bool have[2] = {have_avx2(), have_avx512()};
    for (int k = 0; k < 2; k++) {
        if (!have[k]) continue;
        struct rtx_tensor *v = run_isa(isas[k], op, attrs, in, n_in);
        ck_assert_int_eq(g->dtype, v->dtype);
        ck_assert_int_eq(rtx_tensor_numel(g), rtx_tensor_numel(v));
        if (rtol > 0) {
            for (int64_t i = 0; i < rtx_tensor_numel(g); i++) {
                double a = rtx_tensor_get(g, i), b = rtx_tensor_get(v, i);
                ck_assert_msg(fabs(a - b) <= rtol * (1 + fabs(a)), "%s (%s) %s [%lld]: %g vs %g",
                              op, attrs, isas[k], (long long)i, a, b);
            }
        } else {
            ck_assert_msg(memcmp(rtx_tensor_data(g), rtx_tensor_data(v),
                                 (size_t)rtx_tensor_numel(g) * rtx_dtype_size(g->dtype)) == 0,
                          "%s (%s): the %s build differs from the generic one", op, attrs,
                          isas[k]);
        }
        rtx_tensor_unref(v);
    }
    rtx_tensor_unref(g);
    for (int i = 0; i < n_in; i++) rtx_tensor_unref(in[i]);
}

static void same_bits(const char *op, const char *attrs, struct rtx_tensor *const *in,
                      int n_in) {
    compare_builds(op, attrs, in, n_in, 0);
}

START_TEST(avx2_build_matches_generic_bit_for_bit) {
    int64_t d1[1] = {1037}, row[2] = {37, 129}, bias[1] = {129};
    const char *unary[] = {"gelu", "exp", "tanh", "erf", "sigmoid", "silu", "relu", "sqrt"};
    for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) {
        struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d1, -9, 9, 10 + (unsigned)i);
        same_bits(unary[i], "", &x, 1);
    }
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d1, -9, 9, 20);
    same_bits("gelu", "approximate=s:tanh", &x, 1);
    x = tu_tensor_random(RTX_F16, 1, d1, -4, 4, 21);
    same_bits("gelu", "", &x, 1);
    /* the erf GELU's edges, in vectors of eight: the tail's threshold, the erf clamp at
     * +-4 sqrt 2, signed zeros, infinities, NaN, deep negatives where exp underflows */
    double edge[24] = {-1.5, -1.5000001, -1.4999999, -5.656854, -5.656855, 5.656854,
                       5.656855, 0.0, -0.0, INFINITY, -INFINITY, NAN,
                       -13.0, -14.0, -40.0, -1e30, 1e30, 1e-30,
                       -1e-30, 3.0, -3.0, -2.0, 2.0, -1.0};
    int64_t d_edge[1] = {24};
    x = tu_tensor(RTX_F32, 1, d_edge, edge);
    same_bits("gelu", "", &x, 1);
    struct rtx_tensor *ab[2] = {tu_tensor_random(RTX_F32, 2, row, -2, 2, 22),
                                tu_tensor_random(RTX_F32, 1, bias, -2, 2, 23)};
    same_bits("add", "", ab, 2);
    ab[0] = tu_tensor_random(RTX_F32, 2, row, -2, 2, 24);
    ab[1] = tu_tensor_random(RTX_F32, 1, bias, 0.5, 2, 25);
    same_bits("div", "", ab, 2);
    x = tu_tensor_random(RTX_F32, 2, row, -30, 30, 26);
    same_bits("softmax", "axis=i:-1", &x, 1);
    struct rtx_tensor *ln[3] = {tu_tensor_random(RTX_F32, 2, row, -3, 3, 27),
                                tu_tensor_random(RTX_F32, 1, bias, 0.5, 1.5, 28),
                                tu_tensor_random(RTX_F32, 1, bias, -1, 1, 29)};
    same_bits("layer_norm", "axis=i:-1;epsilon=f:1e-5", ln, 3);
    x = tu_tensor_random(RTX_F32, 2, row, -3, 3, 30);
    same_bits("reduce_sum", "axes=I:1", &x, 1);
    int64_t dq[4] = {2, 3, 41, 16};
    struct rtx_tensor *qkv[3] = {tu_tensor_random(RTX_F32, 4, dq, -1, 1, 31),
                                 tu_tensor_random(RTX_F32, 4, dq, -1, 1, 32),
                                 tu_tensor_random(RTX_F32, 4, dq, -1, 1, 33)};
    same_bits("attention", "causal=i:1", qkv, 3);
    int64_t dx[4] = {2, 5, 13, 11}, dw[4] = {7, 5, 3, 3}, db[1] = {7};
    struct rtx_tensor *cv[3] = {tu_tensor_random(RTX_F32, 4, dx, -1, 1, 34),
                                tu_tensor_random(RTX_F32, 4, dw, -1, 1, 35),
                                tu_tensor_random(RTX_F32, 1, db, -1, 1, 36)};
    compare_builds("conv2d", "pads=I:1,1,1,1", cv, 3, 1e-5);
    /* the direct conv's tiles and phases: 8+ channels take the 512-bit pixel tile, 16+ (32+)
     * the channel-vector tiles (40: a partial last block); strides with uneven padding read
     * every phase's first and last columns; a 1x1 stride-2 conv reads one phase of four */
    static const struct {
        int64_t o, k;
        bool bias;
        const char *attrs;
    } convs[] = {
        {19, 3, true, "pads=I:1,1,1,1;strides=I:2,2"},
        {19, 1, false, "strides=I:2,2"},
        {19, 3, false, "pads=I:1,1,1,1"},
        {40, 3, true, "pads=I:1,1,1,1;strides=I:2,2"},
        {40, 3, false, "pads=I:2,1,0,1;dilations=I:2,1"},
        {40, 3, false, "pads=I:2,0,1,3;strides=I:3,4"},
        {19, 3, false, "pads=I:0,3,2,1;strides=I:2,3"},
    };
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) {
        int64_t dx2[4] = {2, 6, 17, 15}, dw2[4] = {convs[i].o, 6, convs[i].k, convs[i].k};
        unsigned seed = 38 + 3 * (unsigned)i;
        struct rtx_tensor *in[3] = {tu_tensor_random(RTX_F32, 4, dx2, -1, 1, seed),
                                    tu_tensor_random(RTX_F32, 4, dw2, -1, 1, seed + 1),
                                    tu_tensor_random(RTX_F32, 1, &convs[i].o, -1, 1, seed + 2)};
        if (!convs[i].bias) rtx_tensor_unref(in[2]);
        compare_builds("conv2d", convs[i].attrs, in, convs[i].bias ? 3 : 2, 1e-5);
    }
    x = tu_tensor_random(RTX_F32, 4, dx, -1, 1, 37);
    same_bits("max_pool2d", "kernel_shape=I:3,3;strides=I:2,2;pads=I:1,1,1,1", &x, 1);
}
END_TEST

START_TEST(rtx_cpu_isa_picks_or_refuses) {
    const char *old = getenv("RTX_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    struct rtx_backend *be = NULL;
    struct rtx_err err = {0};
    setenv("RTX_CPU_ISA", "generic", 1);
    ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), 0);
    rtx_backend_free(be);
    const char *isas[2] = {"avx2", "avx512"};
    bool have[2] = {have_avx2(), have_avx512()};
    for (int k = 0; k < 2; k++) { /* made where the CPU has the ISA, refused where not */
        setenv("RTX_CPU_ISA", isas[k], 1);
        int rc = rtx_backend_cpu_new(NULL, &be, &err);
        ck_assert_int_eq(rc, have[k] ? 0 : RTX_EUNSUPPORTED);
        if (have[k])
            rtx_backend_free(be);
        else
            ck_assert_ptr_null(be);
    }
    setenv("RTX_CPU_ISA", "sse9", 1);
    ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), RTX_EINVAL);
    ck_assert_ptr_null(be);
    ck_assert_ptr_nonnull(strstr(err.msg, "RTX_CPU_ISA=sse9"));
    if (saved) {
        setenv("RTX_CPU_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("RTX_CPU_ISA");
    }
}
END_TEST

Suite *rtx_cpu_isa_suite(void) {
    Suite *s = suite_create("cpu_isa");
    TCase *tc = tcase_create("isa");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, avx2_build_matches_generic_bit_for_bit);
    tcase_add_test(tc, rtx_cpu_isa_picks_or_refuses);
    suite_add_tcase(s, tc);
    return s;
}
