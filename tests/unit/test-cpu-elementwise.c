/*
 * test-cpu-elementwise.c - the CPU reference kernels of the elementwise ops (arithmetic,
 * unary math, cast, where, comparisons), run as one-node graphs through the planner and
 * executor, against hand-computed values: every op, every dtype class, NumPy broadcasting,
 * integer wrap-around and division by zero, cast saturation, and tensors large enough to be
 * split across the thread pool.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test-util.h"

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})
#define SCALAR D(1) /* dims for ndim 0 (not read) */

static struct rtx_tensor *T(enum rtx_dtype dt, int ndim, const int64_t *dims, const double *v) {
    return tu_tensor(dt, ndim, dims, v);
}

/* Runs a one-output op on `in` (released here) and returns the output. */
static struct rtx_tensor *run(const char *op, const char *attrs, struct rtx_tensor **in,
                              int n_in) {
    struct rtx_tensor *out = NULL;
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, in, n_in, &out, 1, &err);
    for (int i = 0; i < n_in; i++) rtx_tensor_unref(in[i]);
    ck_assert_msg(rc == 0, "%s failed: %s", op, err.msg);
    return out;
}

/* Checks dtype, shape and values of out, then releases it. */
static void expect(struct rtx_tensor *out, enum rtx_dtype dt, int ndim, const int64_t *dims,
                   const double *want, double rtol, double atol) {
    tu_assert_shape(out, dt, ndim, dims);
    tu_assert_close(out, want, rtol, atol);
    rtx_tensor_unref(out);
}

static struct rtx_tensor *run2(const char *op, struct rtx_tensor *a, struct rtx_tensor *b) {
    return run(op, "", (struct rtx_tensor *[]){a, b}, 2);
}

static struct rtx_tensor *run1(const char *op, const char *attrs, struct rtx_tensor *x) {
    return run(op, attrs, &x, 1);
}

/* Runs an op that must fail; returns its code. */
static int run_fails(const char *op, const char *attrs, struct rtx_tensor **in, int n_in) {
    struct rtx_tensor *out = NULL;
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, in, n_in, &out, 1, &err);
    for (int i = 0; i < n_in; i++) rtx_tensor_unref(in[i]);
    ck_assert_msg(rc < 0, "%s succeeded", op);
    ck_assert_ptr_null(out);
    ck_assert(err.msg[0] != '\0');
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Binary arithmetic and broadcasting
 * ---------------------------------------------------------------------------------------- */

START_TEST(add_same_shape_f32) {
    struct rtx_tensor *y = run2("add", T(RTX_F32, 1, D(3), V(1, 2, 3)),
                                T(RTX_F32, 1, D(3), V(10, 20, 30.5)));
    expect(y, RTX_F32, 1, D(3), V(11, 22, 33.5), 0, 0);
}
END_TEST

START_TEST(sub_mul_div_f32_same_shape) {
    const double a[] = {1.5, -2, 7, 0.25}, b[] = {0.5, 4, -2, 8};
    expect(run2("sub", T(RTX_F32, 2, D(2, 2), a), T(RTX_F32, 2, D(2, 2), b)), RTX_F32, 2,
           D(2, 2), V(1, -6, 9, -7.75), 0, 0);
    expect(run2("mul", T(RTX_F32, 2, D(2, 2), a), T(RTX_F32, 2, D(2, 2), b)), RTX_F32, 2,
           D(2, 2), V(0.75, -8, -14, 2), 0, 0);
    expect(run2("div", T(RTX_F32, 2, D(2, 2), a), T(RTX_F32, 2, D(2, 2), b)), RTX_F32, 2,
           D(2, 2), V(3, -0.5, -3.5, 0.03125), 0, 0);
}
END_TEST

START_TEST(add_broadcasts_row_over_matrix) {
    struct rtx_tensor *y = run2("add", T(RTX_F32, 2, D(2, 3), V(1, 2, 3, 4, 5, 6)),
                                T(RTX_F32, 1, D(3), V(10, 20, 30)));
    expect(y, RTX_F32, 2, D(2, 3), V(11, 22, 33, 14, 25, 36), 0, 0);
}
END_TEST

START_TEST(add_broadcasts_column_over_matrix) {
    struct rtx_tensor *y = run2("add", T(RTX_F32, 2, D(2, 3), V(1, 2, 3, 4, 5, 6)),
                                T(RTX_F32, 2, D(2, 1), V(100, 200)));
    expect(y, RTX_F32, 2, D(2, 3), V(101, 102, 103, 204, 205, 206), 0, 0);
}
END_TEST

START_TEST(sub_broadcasts_both_operands_to_outer_shape) {
    /* [3,1] - [1,4] -> [3,4] */
    struct rtx_tensor *y = run2("sub", T(RTX_F32, 2, D(3, 1), V(10, 20, 30)),
                                T(RTX_F32, 2, D(1, 4), V(1, 2, 3, 4)));
    expect(y, RTX_F32, 2, D(3, 4), V(9, 8, 7, 6, 19, 18, 17, 16, 29, 28, 27, 26), 0, 0);
}
END_TEST

START_TEST(mul_broadcasts_rank0_scalar) {
    struct rtx_tensor *y = run2("mul", T(RTX_F32, 0, SCALAR, V(3)),
                                T(RTX_F32, 2, D(2, 2), V(1, -2, 0.5, 4)));
    expect(y, RTX_F32, 2, D(2, 2), V(3, -6, 1.5, 12), 0, 0);
    y = run2("div", T(RTX_F32, 2, D(2, 2), V(1, -2, 0.5, 4)), T(RTX_F32, 0, SCALAR, V(2)));
    expect(y, RTX_F32, 2, D(2, 2), V(0.5, -1, 0.25, 2), 0, 0);
}
END_TEST

START_TEST(add_of_two_rank0_scalars_is_rank0) {
    struct rtx_tensor *y = run2("add", T(RTX_I32, 0, SCALAR, V(40)),
                                T(RTX_I32, 0, SCALAR, V(2)));
    expect(y, RTX_I32, 0, SCALAR, V(42), 0, 0);
}
END_TEST

START_TEST(add_broadcasts_size1_dims_in_rank3) {
    /* [2,1,3] + [4,1] -> [2,4,3]: y[i,j,k] = a[i,k] + b[j] */
    double a[6], b[4], want[24];
    for (int i = 0; i < 6; i++) a[i] = i + 1;
    for (int j = 0; j < 4; j++) b[j] = 100 * (j + 1);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) want[(i * 4 + j) * 3 + k] = a[i * 3 + k] + b[j];
    struct rtx_tensor *y = run2("add", T(RTX_F32, 3, D(2, 1, 3), a), T(RTX_F32, 2, D(4, 1), b));
    expect(y, RTX_F32, 3, D(2, 4, 3), want, 0, 0);
}
END_TEST

START_TEST(mul_broadcasts_alternating_dims_rank5) {
    /* [2,1,3,1,2] * [2,1,2,1] -> [2,2,3,2,2]: no two neighbouring dims merge. */
    double a[12], b[4], want[48];
    for (int i = 0; i < 12; i++) a[i] = i + 1;
    for (int i = 0; i < 4; i++) b[i] = (i + 1) * 10;
    int n = 0;
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 2; i1++)
            for (int i2 = 0; i2 < 3; i2++)
                for (int i3 = 0; i3 < 2; i3++)
                    for (int i4 = 0; i4 < 2; i4++)
                        want[n++] = a[(i0 * 3 + i2) * 2 + i4] * b[i1 * 2 + i3];
    struct rtx_tensor *y = run2("mul", T(RTX_F32, 5, D(2, 1, 3, 1, 2), a),
                                T(RTX_F32, 4, D(2, 1, 2, 1), b));
    expect(y, RTX_F32, 5, D(2, 2, 3, 2, 2), want, 0, 0);
}
END_TEST

START_TEST(add_of_empty_tensor_is_empty) {
    struct rtx_tensor *y = run2("add", T(RTX_F32, 2, D(0, 3), NULL),
                                T(RTX_F32, 1, D(3), V(1, 2, 3)));
    tu_assert_shape(y, RTX_F32, 2, D(0, 3));
    rtx_tensor_unref(y);
}
END_TEST

START_TEST(div_f32_by_zero_gives_inf_and_nan) {
    struct rtx_tensor *y = run2("div", T(RTX_F32, 1, D(3), V(1, -1, 0)),
                                T(RTX_F32, 1, D(3), V(0, 0, 0)));
    expect(y, RTX_F32, 1, D(3), V(INFINITY, -INFINITY, NAN), 0, 0);
}
END_TEST

START_TEST(pow_f32) {
    struct rtx_tensor *y = run2("pow", T(RTX_F32, 1, D(4), V(2, 9, 2, -2)),
                                T(RTX_F32, 1, D(4), V(10, 0.5, -1, 3)));
    expect(y, RTX_F32, 1, D(4), V(1024, 3, 0.5, -8), 1e-6, 0);
}
END_TEST

START_TEST(add_large_f32_across_threads) {
    /* Big enough for several tasks; odd length so chunks end mid-block. */
    int64_t n = 200003;
    struct rtx_tensor *a = tu_tensor_random(RTX_F32, 1, &n, -10, 10, 1);
    struct rtx_tensor *b = tu_tensor_random(RTX_F32, 1, &n, -10, 10, 2);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = (float)((float)rtx_tensor_get(a, i) + (float)rtx_tensor_get(b, i));
    expect(run2("add", a, b), RTX_F32, 1, &n, want, 0, 0);
    free(want);
}
END_TEST

START_TEST(sub_large_broadcast_chunks_start_mid_row) {
    /* [301, 457] - [457]: task boundaries (multiples of the grain) fall inside rows. */
    int64_t dm[] = {301, 457}, dr[] = {457};
    struct rtx_tensor *a = tu_tensor_random(RTX_F32, 2, dm, -5, 5, 3);
    struct rtx_tensor *b = tu_tensor_random(RTX_F32, 1, dr, -5, 5, 4);
    int64_t n = dm[0] * dm[1];
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = (float)((float)rtx_tensor_get(a, i) - (float)rtx_tensor_get(b, i % dm[1]));
    expect(run2("sub", a, b), RTX_F32, 2, dm, want, 0, 0);
    free(want);
}
END_TEST

START_TEST(mul_large_f16_column_broadcast_across_threads) {
    int64_t dm[] = {700, 97}, dc[] = {700, 1};
    struct rtx_tensor *a = tu_tensor_random(RTX_F16, 2, dm, -4, 4, 5);
    struct rtx_tensor *b = tu_tensor_random(RTX_F16, 2, dc, -4, 4, 6);
    int64_t n = dm[0] * dm[1];
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        float p = (float)rtx_tensor_get(a, i) * (float)rtx_tensor_get(b, i / dm[1]);
        want[i] = rtx_f16_to_f32(rtx_f32_to_f16(p)); /* one rounding of the f32 product */
    }
    expect(run2("mul", a, b), RTX_F16, 2, dm, want, 0, 0);
    free(want);
}
END_TEST

START_TEST(add_large_i32_across_threads) {
    int64_t n = 100001;
    struct rtx_tensor *a = tu_tensor_random(RTX_I32, 1, &n, -1000, 1000, 7);
    struct rtx_tensor *b = tu_tensor_random(RTX_I32, 1, &n, -1000, 1000, 8);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = rtx_tensor_get(a, i) + rtx_tensor_get(b, i);
    expect(run2("add", a, b), RTX_I32, 1, &n, want, 0, 0);
    free(want);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * f16 / bf16: computed in f32, rounded once
 * ---------------------------------------------------------------------------------------- */

START_TEST(add_f16_rounds_f32_sum_once_to_nearest_even) {
    /* f16(0.1) + f16(0.2) = 0.2999267578125 exactly in f32, a tie between the f16 neighbours
     * 0.2998046875 (even) and 0.300048828125. */
    struct rtx_tensor *y = run2("add", T(RTX_F16, 1, D(2), V(0.1, 1)),
                                T(RTX_F16, 1, D(2), V(0.2, 2048)));
    expect(y, RTX_F16, 1, D(2), V(0.2998046875, 2048), 0, 0);
}
END_TEST

START_TEST(mul_bf16_rounds_to_bf16) {
    /* bf16(1.1) = 1.1015625, bf16(2.3) = 2.296875; product 2.530...: bf16 2.53125. */
    struct rtx_tensor *y = run2("mul", T(RTX_BF16, 1, D(2), V(1.1, 3)),
                                T(RTX_BF16, 1, D(2), V(2.3, 0.5)));
    expect(y, RTX_BF16, 1, D(2), V(2.53125, 1.5), 0, 0);
}
END_TEST

START_TEST(div_f16_broadcasts_scalar) {
    struct rtx_tensor *y = run2("div", T(RTX_F16, 1, D(3), V(1, 2, -3)),
                                T(RTX_F16, 0, SCALAR, V(4)));
    expect(y, RTX_F16, 1, D(3), V(0.25, 0.5, -0.75), 0, 0);
}
END_TEST

START_TEST(sub_bf16_broadcasts_row) {
    struct rtx_tensor *y = run2("sub", T(RTX_BF16, 2, D(2, 2), V(1, 2, 3, 4)),
                                T(RTX_BF16, 1, D(2), V(0.5, 1)));
    expect(y, RTX_BF16, 2, D(2, 2), V(0.5, 1, 2.5, 3), 0, 0);
}
END_TEST

START_TEST(add_f16_overflows_to_inf) {
    struct rtx_tensor *y = run2("add", T(RTX_F16, 1, D(1), V(65504)),
                                T(RTX_F16, 1, D(1), V(65504)));
    expect(y, RTX_F16, 1, D(1), V(INFINITY), 0, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Integers
 * ---------------------------------------------------------------------------------------- */

START_TEST(div_int_truncates_toward_zero) {
    const double a[] = {7, -7, 7, -7, 1}, b[] = {2, 2, -2, -2, 3};
    const double want[] = {3, -3, -3, 3, 0};
    expect(run2("div", T(RTX_I32, 1, D(5), a), T(RTX_I32, 1, D(5), b)), RTX_I32, 1, D(5), want,
           0, 0);
    expect(run2("div", T(RTX_I8, 1, D(5), a), T(RTX_I8, 1, D(5), b)), RTX_I8, 1, D(5), want, 0,
           0);
    expect(run2("div", T(RTX_I64, 1, D(5), a), T(RTX_I64, 1, D(5), b)), RTX_I64, 1, D(5), want,
           0, 0);
}
END_TEST

START_TEST(div_int_by_zero_gives_zero) {
    static const enum rtx_dtype dts[] = {RTX_I8, RTX_I32, RTX_I64, RTX_U8};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        struct rtx_tensor *y = run2("div", T(dts[i], 1, D(3), V(5, 0, 100)),
                                    T(dts[i], 1, D(3), V(0, 0, 7)));
        expect(y, dts[i], 1, D(3), V(0, 0, 14), 0, 0);
    }
}
END_TEST

START_TEST(div_int_min_by_minus_one_wraps) {
    expect(run2("div", T(RTX_I8, 1, D(2), V(-128, -128)), T(RTX_I8, 1, D(2), V(-1, 1))), RTX_I8,
           1, D(2), V(-128, -128), 0, 0);
    expect(run2("div", T(RTX_I32, 1, D(1), V(INT32_MIN)), T(RTX_I32, 1, D(1), V(-1))), RTX_I32,
           1, D(1), V(INT32_MIN), 0, 0);
    expect(run2("div", T(RTX_I64, 1, D(1), V(-9223372036854775808.0)),
                T(RTX_I64, 1, D(1), V(-1))),
           RTX_I64, 1, D(1), V(-9223372036854775808.0), 0, 0);
}
END_TEST

START_TEST(add_int_overflow_wraps) {
    expect(run2("add", T(RTX_I8, 1, D(2), V(127, -128)), T(RTX_I8, 1, D(2), V(1, -1))), RTX_I8,
           1, D(2), V(-128, 127), 0, 0);
    expect(run2("add", T(RTX_U8, 1, D(1), V(250)), T(RTX_U8, 1, D(1), V(10))), RTX_U8, 1, D(1),
           V(4), 0, 0);
    expect(run2("add", T(RTX_I32, 1, D(1), V(INT32_MAX)), T(RTX_I32, 1, D(1), V(1))), RTX_I32, 1,
           D(1), V(INT32_MIN), 0, 0);
    /* INT64_MAX is not a double: write it directly. */
    struct rtx_tensor *a = T(RTX_I64, 1, D(2), NULL), *b = T(RTX_I64, 1, D(2), V(1, 2));
    int64_t *pa = rtx_tensor_data(a);
    pa[0] = INT64_MAX;
    pa[1] = INT64_MAX - 1;
    struct rtx_tensor *y = run2("add", a, b);
    tu_assert_shape(y, RTX_I64, 1, D(2));
    const int64_t *py = rtx_tensor_data(y);
    ck_assert(py[0] == INT64_MIN);
    ck_assert(py[1] == INT64_MIN);
    rtx_tensor_unref(y);
}
END_TEST

START_TEST(sub_and_mul_int_wrap) {
    expect(run2("sub", T(RTX_U8, 1, D(2), V(3, 0)), T(RTX_U8, 1, D(2), V(5, 1))), RTX_U8, 1,
           D(2), V(254, 255), 0, 0);
    expect(run2("mul", T(RTX_I8, 1, D(2), V(16, -100)), T(RTX_I8, 1, D(2), V(16, 3))), RTX_I8,
           1, D(2), V(0, -44), 0, 0);
    /* 2^62 * 4 wraps to 0 in i64; 2^32 * 2^32 too. */
    expect(run2("mul", T(RTX_I64, 1, D(2), V(4611686018427387904.0, 4294967296.0)),
                T(RTX_I64, 1, D(2), V(4, 4294967296.0))),
           RTX_I64, 1, D(2), V(0, 0), 0, 0);
}
END_TEST

START_TEST(add_int_broadcasts_row_and_column) {
    expect(run2("add", T(RTX_I64, 2, D(2, 1), V(10, 20)), T(RTX_I64, 1, D(3), V(1, 2, 3))),
           RTX_I64, 2, D(2, 3), V(11, 12, 13, 21, 22, 23), 0, 0);
    expect(run2("mul", T(RTX_U8, 2, D(2, 3), V(1, 2, 3, 4, 5, 6)), T(RTX_U8, 0, SCALAR, V(2))),
           RTX_U8, 2, D(2, 3), V(2, 4, 6, 8, 10, 12), 0, 0);
}
END_TEST

START_TEST(pow_int_computes_in_double_and_truncates) {
    expect(run2("pow", T(RTX_I32, 1, D(5), V(2, -2, 2, 3, 0)),
                T(RTX_I32, 1, D(5), V(10, 3, -1, 0, 0))),
           RTX_I32, 1, D(5), V(1024, -8, 0, 1, 1), 0, 0);
    expect(run2("pow", T(RTX_I64, 1, D(2), V(10, 3)), T(RTX_I64, 1, D(2), V(15, 2))), RTX_I64,
           1, D(2), V(1e15, 9), 0, 0);
}
END_TEST

START_TEST(pow_int_saturates_at_dtype_range) {
    /* 2^10 and 0^-1 = inf saturate; (-2)^9 = -512 saturates low. */
    expect(run2("pow", T(RTX_I8, 1, D(3), V(2, 0, -2)), T(RTX_I8, 1, D(3), V(10, -1, 9))),
           RTX_I8, 1, D(3), V(127, 127, -128), 0, 0);
    expect(run2("pow", T(RTX_U8, 1, D(2), V(2, 3)), T(RTX_U8, 1, D(2), V(9, 5))), RTX_U8, 1,
           D(2), V(255, 243), 0, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Unary ops
 * ---------------------------------------------------------------------------------------- */

static const double ux[] = {-3, -1.5, -0.25, 0, 0.5, 1, 2.5, 4};
#define NUX 8

/* 0.5 x (1 + erf(x / sqrt 2)), through erfc so that it keeps its digits for negative x. */
static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_gelu_tanh(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* Checks op(x) against f(x) on ux for one float dtype, with tolerance rtol (+ a tiny atol). */
static void check_unary(const char *op, const char *attrs, enum rtx_dtype dt,
                        double (*f)(double), double rtol) {
    double want[NUX], x[NUX];
    for (int i = 0; i < NUX; i++) {
        x[i] = ux[i];
        want[i] = f(x[i]);
    }
    struct rtx_tensor *y = run1(op, attrs, T(dt, 1, D(NUX), x));
    tu_assert_shape(y, dt, 1, D(NUX));
    tu_assert_close(y, want, rtol, 1e-7);
    rtx_tensor_unref(y);
}

static double ref_neg(double x) { return -x; }
static double ref_relu(double x) { return x < 0 ? 0 : x; }
static double ref_silu(double x) { return x * ref_sigmoid(x); }

START_TEST(unary_float_ops_match_libm_f32) {
    check_unary("neg", "", RTX_F32, ref_neg, 0);
    check_unary("abs", "", RTX_F32, fabs, 0);
    check_unary("exp", "", RTX_F32, exp, 1e-6);
    check_unary("tanh", "", RTX_F32, tanh, 1e-6);
    check_unary("erf", "", RTX_F32, erf, 1e-6);
    check_unary("relu", "", RTX_F32, ref_relu, 0);
    check_unary("gelu", "", RTX_F32, ref_gelu, 1e-6);
    check_unary("gelu", "approximate=s:none", RTX_F32, ref_gelu, 1e-6);
    check_unary("gelu", "approximate=s:tanh", RTX_F32, ref_gelu_tanh, 1e-6);
    check_unary("silu", "", RTX_F32, ref_silu, 1e-6);
    check_unary("sigmoid", "", RTX_F32, ref_sigmoid, 1e-6);
}
END_TEST

START_TEST(unary_float_ops_in_f16_and_bf16_precision) {
    static const enum rtx_dtype dts[] = {RTX_F16, RTX_BF16};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == RTX_F16 ? 1e-3 : 8e-3; /* a half ulp of the rounded result */
        check_unary("neg", "", dts[k], ref_neg, 0);
        check_unary("exp", "", dts[k], exp, tol);
        check_unary("tanh", "", dts[k], tanh, tol);
        check_unary("erf", "", dts[k], erf, tol);
        check_unary("relu", "", dts[k], ref_relu, 0);
        check_unary("gelu", "", dts[k], ref_gelu, tol);
        check_unary("gelu", "approximate=s:tanh", dts[k], ref_gelu_tanh, tol);
        check_unary("silu", "", dts[k], ref_silu, tol);
        check_unary("sigmoid", "", dts[k], ref_sigmoid, tol);
    }
}
END_TEST

START_TEST(sqrt_rsqrt_log_of_positive_zero_and_negative) {
    const double x[] = {4, 0.25, 0, -1};
    expect(run1("sqrt", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4), V(2, 0.5, 0, NAN), 0, 0);
    expect(run1("rsqrt", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4),
           V(0.5, 2, INFINITY, NAN), 0, 0);
    expect(run1("log", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4),
           V(log(4.0), log(0.25), -INFINITY, NAN), 1e-6, 0);
    expect(run1("sqrt", "", T(RTX_F16, 1, D(2), V(9, 2))), RTX_F16, 1, D(2), V(3, 1.4140625), 0,
           0);
    expect(run1("rsqrt", "", T(RTX_BF16, 1, D(1), V(16))), RTX_BF16, 1, D(1), V(0.25), 0, 0);
}
END_TEST

START_TEST(sigmoid_silu_gelu_saturate_at_extremes) {
    const double x[] = {-100, -30, 30, 100};
    expect(run1("sigmoid", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4),
           V(0, 9.357622968840175e-14, 1, 1), 1e-5, 1e-30);
    expect(run1("silu", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4),
           V(0, -30 * 9.357622968840175e-14, 30, 100), 1e-5, 1e-30);
    /* gelu(-10) = -10 * Phi(-10) ~ -7.6e-23: exact where 1 + erf would cancel to 0. */
    expect(run1("gelu", "", T(RTX_F32, 1, D(3), V(-10, 10, 0))), RTX_F32, 1, D(3),
           V(ref_gelu(-10), 10, 0), 1e-4, 0);
    expect(run1("gelu", "approximate=s:tanh", T(RTX_F32, 1, D(3), V(-5, 5, 0))), RTX_F32, 1,
           D(3), V(ref_gelu_tanh(-5), 5, 0), 1e-4, 0);
}
END_TEST

START_TEST(exp_overflows_to_inf_and_tanh_saturates) {
    expect(run1("exp", "", T(RTX_F32, 1, D(3), V(100, -200, 0))), RTX_F32, 1, D(3),
           V(INFINITY, 0, 1), 0, 0);
    expect(run1("tanh", "", T(RTX_F32, 1, D(2), V(50, -50))), RTX_F32, 1, D(2), V(1, -1), 0, 0);
}
END_TEST

START_TEST(relu_keeps_nan_and_zeroes_negative_infinity) {
    expect(run1("relu", "", T(RTX_F32, 1, D(3), V(NAN, -INFINITY, INFINITY))), RTX_F32, 1, D(3),
           V(NAN, 0, INFINITY), 0, 0);
}
END_TEST

START_TEST(neg_abs_relu_integers) {
    expect(run1("neg", "", T(RTX_I32, 1, D(3), V(5, -7, 0))), RTX_I32, 1, D(3), V(-5, 7, 0), 0,
           0);
    expect(run1("abs", "", T(RTX_I64, 1, D(3), V(5, -7, 0))), RTX_I64, 1, D(3), V(5, 7, 0), 0,
           0);
    expect(run1("relu", "", T(RTX_I8, 1, D(3), V(5, -7, 0))), RTX_I8, 1, D(3), V(5, 0, 0), 0, 0);
    expect(run1("relu", "", T(RTX_I64, 1, D(2), V(-1, 9))), RTX_I64, 1, D(2), V(0, 9), 0, 0);
    expect(run1("abs", "", T(RTX_U8, 1, D(2), V(200, 0))), RTX_U8, 1, D(2), V(200, 0), 0, 0);
}
END_TEST

START_TEST(neg_and_abs_wrap_at_int_min_and_u8) {
    expect(run1("abs", "", T(RTX_I8, 1, D(2), V(-128, -127))), RTX_I8, 1, D(2), V(-128, 127), 0,
           0);
    expect(run1("neg", "", T(RTX_I8, 1, D(1), V(-128))), RTX_I8, 1, D(1), V(-128), 0, 0);
    expect(run1("neg", "", T(RTX_U8, 1, D(3), V(5, 0, 255))), RTX_U8, 1, D(3), V(251, 0, 1), 0,
           0);
    expect(run1("neg", "", T(RTX_I64, 1, D(1), V(-9223372036854775808.0))), RTX_I64, 1, D(1),
           V(-9223372036854775808.0), 0, 0);
}
END_TEST

START_TEST(unary_large_f32_and_bf16_across_threads) {
    int64_t n = 150001;
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, &n, -6, 6, 9);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = tanh(rtx_tensor_get(x, i));
    expect(run1("tanh", "", rtx_tensor_ref(x)), RTX_F32, 1, &n, want, 1e-6, 1e-7);
    for (int64_t i = 0; i < n; i++) want[i] = ref_silu(rtx_tensor_get(x, i));
    expect(run1("silu", "", x), RTX_F32, 1, &n, want, 1e-5, 1e-7);
    struct rtx_tensor *h = tu_tensor_random(RTX_BF16, 1, &n, -6, 6, 10);
    for (int64_t i = 0; i < n; i++) want[i] = ref_relu(rtx_tensor_get(h, i));
    expect(run1("relu", "", h), RTX_BF16, 1, &n, want, 0, 0);
    free(want);
}
END_TEST

START_TEST(gelu_rejects_unknown_approximation) {
    struct rtx_tensor *x = T(RTX_F32, 1, D(1), V(1));
    run_fails("gelu", "approximate=s:erf", &x, 1);
}
END_TEST

START_TEST(float_only_unary_rejects_integers) {
    struct rtx_tensor *x = T(RTX_I32, 1, D(1), V(4));
    run_fails("sqrt", "", &x, 1);
}
END_TEST

START_TEST(arithmetic_rejects_bool_and_mixed_dtypes) {
    struct rtx_tensor *in[2] = {T(RTX_BOOL, 1, D(1), V(1)), T(RTX_BOOL, 1, D(1), V(1))};
    run_fails("add", "", in, 2);
    struct rtx_tensor *mixed[2] = {T(RTX_F32, 1, D(1), V(1)), T(RTX_F16, 1, D(1), V(1))};
    run_fails("mul", "", mixed, 2);
}
END_TEST

START_TEST(add_rejects_shapes_that_do_not_broadcast) {
    struct rtx_tensor *in[2] = {T(RTX_F32, 1, D(3), NULL), T(RTX_F32, 1, D(4), NULL)};
    run_fails("add", "", in, 2);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * cast
 * ---------------------------------------------------------------------------------------- */

START_TEST(cast_float_to_int_truncates_toward_zero) {
    const double x[] = {2.7, -2.7, 0.5, -0.5, 100};
    expect(run1("cast", "to=s:i32", T(RTX_F32, 1, D(5), x)), RTX_I32, 1, D(5),
           V(2, -2, 0, 0, 100), 0, 0);
    expect(run1("cast", "to=s:i64", T(RTX_F16, 1, D(5), x)), RTX_I64, 1, D(5),
           V(2, -2, 0, 0, 100), 0, 0);
    expect(run1("cast", "to=s:i8", T(RTX_BF16, 1, D(5), x)), RTX_I8, 1, D(5),
           V(2, -2, 0, 0, 100), 0, 0);
}
END_TEST

START_TEST(cast_float_to_int_saturates_and_nan_gives_zero) {
    const double x[] = {300, -300, NAN, INFINITY, -INFINITY, 127.9};
    expect(run1("cast", "to=s:i8", T(RTX_F32, 1, D(6), x)), RTX_I8, 1, D(6),
           V(127, -128, 0, 127, -128, 127), 0, 0);
    expect(run1("cast", "to=s:u8", T(RTX_F32, 1, D(6), x)), RTX_U8, 1, D(6),
           V(255, 0, 0, 255, 0, 127), 0, 0);
    expect(run1("cast", "to=s:i32", T(RTX_F32, 1, D(4), V(3e9, -3e9, NAN, -2147483648.0))),
           RTX_I32, 1, D(4), V(INT32_MAX, INT32_MIN, 0, INT32_MIN), 0, 0);
    expect(run1("cast", "to=s:u8", T(RTX_F16, 1, D(2), V(-1, 65504))), RTX_U8, 1, D(2),
           V(0, 255), 0, 0);
    /* i64 limits: check the bits, since INT64_MAX is not a double. */
    struct rtx_tensor *y =
        run1("cast", "to=s:i64", T(RTX_F32, 1, D(4), V(1e19, -1e19, INFINITY, NAN)));
    tu_assert_shape(y, RTX_I64, 1, D(4));
    const int64_t *p = rtx_tensor_data(y);
    ck_assert(p[0] == INT64_MAX && p[1] == INT64_MIN && p[2] == INT64_MAX && p[3] == 0);
    rtx_tensor_unref(y);
}
END_TEST

START_TEST(cast_to_bool_is_nonzero) {
    expect(run1("cast", "to=s:bool", T(RTX_F32, 1, D(5), V(0, -0.0, 0.5, NAN, -INFINITY))),
           RTX_BOOL, 1, D(5), V(0, 0, 1, 1, 1), 0, 0);
    expect(run1("cast", "to=s:bool", T(RTX_I32, 1, D(3), V(0, -5, 256))), RTX_BOOL, 1, D(3),
           V(0, 1, 1), 0, 0);
    expect(run1("cast", "to=s:bool", T(RTX_BF16, 1, D(2), V(0, 1e-30))), RTX_BOOL, 1, D(2),
           V(0, 1), 0, 0);
}
END_TEST

START_TEST(cast_bool_to_numbers_gives_zero_or_one) {
    static const enum rtx_dtype dts[] = {RTX_F32, RTX_F16, RTX_BF16, RTX_I8,
                                         RTX_I32, RTX_I64, RTX_U8,   RTX_BOOL};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        char attrs[32];
        snprintf(attrs, sizeof attrs, "to=s:%s", rtx_dtype_name(dts[i]));
        expect(run1("cast", attrs, T(RTX_BOOL, 2, D(1, 3), V(1, 0, 1))), dts[i], 2, D(1, 3),
               V(1, 0, 1), 0, 0);
    }
}
END_TEST

START_TEST(cast_int_to_int_wraps) {
    expect(run1("cast", "to=s:u8", T(RTX_I32, 1, D(3), V(300, -1, 255))), RTX_U8, 1, D(3),
           V(44, 255, 255), 0, 0);
    expect(run1("cast", "to=s:i8", T(RTX_U8, 1, D(2), V(200, 127))), RTX_I8, 1, D(2),
           V(-56, 127), 0, 0);
    expect(run1("cast", "to=s:i32", T(RTX_I64, 1, D(1), V(4294967297.0))), RTX_I32, 1, D(1),
           V(1), 0, 0);
    expect(run1("cast", "to=s:i64", T(RTX_I8, 1, D(2), V(-128, 7))), RTX_I64, 1, D(2),
           V(-128, 7), 0, 0);
}
END_TEST

START_TEST(cast_between_float_types_rounds_to_nearest_even) {
    /* f32 -> f16: 1/3 -> 0.333251953125; 65519 -> 65504; 65520 -> inf; 2049 -> 2048 (tie). */
    expect(run1("cast", "to=s:f16", T(RTX_F32, 1, D(4), V(1.0 / 3, 65519, 65520, 2049))),
           RTX_F16, 1, D(4), V(0.333251953125, 65504, INFINITY, 2048), 0, 0);
    /* f32 -> bf16: 257 -> 256 (tie to even), 259 -> 260. */
    expect(run1("cast", "to=s:bf16", T(RTX_F32, 1, D(3), V(257, 259, 1.0 / 3))), RTX_BF16, 1,
           D(3), V(256, 260, 0.333984375), 0, 0);
    /* f16 -> f32 and bf16 -> f32 are exact; f16 -> bf16 rounds. */
    expect(run1("cast", "to=s:f32", T(RTX_F16, 1, D(2), V(0.1, -2))), RTX_F32, 1, D(2),
           V(0.0999755859375, -2), 0, 0);
    expect(run1("cast", "to=s:bf16", T(RTX_F16, 1, D(2), V(0.1, NAN))), RTX_BF16, 1, D(2),
           V(0.10009765625, NAN), 0, 0);
    expect(run1("cast", "to=s:f32", T(RTX_BF16, 1, D(1), V(3.140625))), RTX_F32, 1, D(1),
           V(3.140625), 0, 0);
}
END_TEST

START_TEST(cast_int_to_float) {
    expect(run1("cast", "to=s:f32", T(RTX_I64, 1, D(3), V(16777217, -5, 0))), RTX_F32, 1, D(3),
           V(16777216, -5, 0), 0, 0);
    expect(run1("cast", "to=s:f16", T(RTX_I32, 1, D(3), V(70000, 2049, -3))), RTX_F16, 1, D(3),
           V(INFINITY, 2048, -3), 0, 0);
    /* 255 has 8 significant bits: exact in bf16; 257 ties to even. */
    expect(run1("cast", "to=s:bf16", T(RTX_U8, 1, D(2), V(255, 3))), RTX_BF16, 1, D(2),
           V(255, 3), 0, 0);
    expect(run1("cast", "to=s:bf16", T(RTX_I32, 1, D(2), V(257, -259))), RTX_BF16, 1, D(2),
           V(256, -260), 0, 0);
}
END_TEST

START_TEST(cast_to_same_dtype_copies) {
    expect(run1("cast", "to=s:i32", T(RTX_I32, 2, D(2, 2), V(1, -2, 3, -4))), RTX_I32, 2,
           D(2, 2), V(1, -2, 3, -4), 0, 0);
    expect(run1("cast", "to=s:f16", T(RTX_F16, 0, SCALAR, V(1.5))), RTX_F16, 0, SCALAR, V(1.5),
           0, 0);
}
END_TEST

START_TEST(cast_large_f32_to_i32_across_threads) {
    int64_t n = 100003;
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, &n, -1e3, 1e3, 11);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = trunc(rtx_tensor_get(x, i));
    expect(run1("cast", "to=s:i32", x), RTX_I32, 1, &n, want, 0, 0);
    free(want);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * where
 * ---------------------------------------------------------------------------------------- */

START_TEST(where_selects_elementwise) {
    struct rtx_tensor *in[3] = {T(RTX_BOOL, 1, D(4), V(1, 0, 0, 1)),
                                T(RTX_F32, 1, D(4), V(1, 2, 3, 4)),
                                T(RTX_F32, 1, D(4), V(-1, -2, -3, -4))};
    expect(run("where", "", in, 3), RTX_F32, 1, D(4), V(1, -2, -3, 4), 0, 0);
}
END_TEST

START_TEST(where_broadcasts_cond_column_and_scalar_else) {
    /* cond [2,1], x [2,3], y rank 0 -> [2,3] */
    struct rtx_tensor *in[3] = {T(RTX_BOOL, 2, D(2, 1), V(1, 0)),
                                T(RTX_I64, 2, D(2, 3), V(1, 2, 3, 4, 5, 6)),
                                T(RTX_I64, 0, SCALAR, V(-9))};
    expect(run("where", "", in, 3), RTX_I64, 2, D(2, 3), V(1, 2, 3, -9, -9, -9), 0, 0);
}
END_TEST

START_TEST(where_broadcasts_all_three_operands) {
    /* cond [3] (row), x [2,1] (column), y [1] -> [2,3] */
    struct rtx_tensor *in[3] = {T(RTX_BOOL, 1, D(3), V(1, 0, 1)),
                                T(RTX_F16, 2, D(2, 1), V(0.5, 1.5)),
                                T(RTX_F16, 1, D(1), V(-2))};
    expect(run("where", "", in, 3), RTX_F16, 2, D(2, 3), V(0.5, -2, 0.5, 1.5, -2, 1.5), 0, 0);
}
END_TEST

START_TEST(where_on_every_element_size) {
    static const enum rtx_dtype dts[] = {RTX_BOOL, RTX_I8, RTX_U8, RTX_BF16, RTX_I32};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        double x = dts[i] == RTX_BOOL ? 1 : 3, y = dts[i] == RTX_BOOL ? 0 : 7;
        struct rtx_tensor *in[3] = {T(RTX_BOOL, 1, D(3), V(0, 1, 0)), T(dts[i], 1, D(1), &x),
                                    T(dts[i], 1, D(3), V(y, y, y))};
        expect(run("where", "", in, 3), dts[i], 1, D(3), V(y, x, y), 0, 0);
    }
}
END_TEST

START_TEST(where_large_across_threads) {
    int64_t d[] = {400, 300}, dc[] = {300};
    struct rtx_tensor *c = tu_tensor_random(RTX_BOOL, 1, dc, 0, 2, 12);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -1, 1, 13);
    struct rtx_tensor *y = tu_tensor_random(RTX_F32, 2, d, -1, 1, 14);
    int64_t n = d[0] * d[1];
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = rtx_tensor_get(c, i % d[1]) != 0 ? rtx_tensor_get(x, i) : rtx_tensor_get(y, i);
    expect(run("where", "", (struct rtx_tensor *[]){c, x, y}, 3), RTX_F32, 2, d, want, 0, 0);
    free(want);
}
END_TEST

START_TEST(where_rejects_non_bool_condition) {
    struct rtx_tensor *in[3] = {T(RTX_I32, 1, D(1), V(1)), T(RTX_F32, 1, D(1), V(1)),
                                T(RTX_F32, 1, D(1), V(2))};
    run_fails("where", "", in, 3);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Comparisons
 * ---------------------------------------------------------------------------------------- */

START_TEST(compare_f32_gives_bool_and_nan_compares_false) {
    const double a[] = {1, 2, 3, NAN, -0.0}, b[] = {2, 2, 2, NAN, 0};
    expect(run2("equal", T(RTX_F32, 1, D(5), a), T(RTX_F32, 1, D(5), b)), RTX_BOOL, 1, D(5),
           V(0, 1, 0, 0, 1), 0, 0);
    expect(run2("less", T(RTX_F32, 1, D(5), a), T(RTX_F32, 1, D(5), b)), RTX_BOOL, 1, D(5),
           V(1, 0, 0, 0, 0), 0, 0);
    expect(run2("greater", T(RTX_F32, 1, D(5), a), T(RTX_F32, 1, D(5), b)), RTX_BOOL, 1, D(5),
           V(0, 0, 1, 0, 0), 0, 0);
}
END_TEST

START_TEST(compare_every_dtype) {
    static const enum rtx_dtype dts[] = {RTX_F16, RTX_BF16, RTX_I8, RTX_I32,
                                         RTX_I64, RTX_U8};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        const double a[] = {1, 5, 3}, b[] = {1, 4, 9};
        expect(run2("equal", T(dts[i], 1, D(3), a), T(dts[i], 1, D(3), b)), RTX_BOOL, 1, D(3),
               V(1, 0, 0), 0, 0);
        expect(run2("less", T(dts[i], 1, D(3), a), T(dts[i], 1, D(3), b)), RTX_BOOL, 1, D(3),
               V(0, 0, 1), 0, 0);
        expect(run2("greater", T(dts[i], 1, D(3), a), T(dts[i], 1, D(3), b)), RTX_BOOL, 1, D(3),
               V(0, 1, 0), 0, 0);
    }
    expect(run2("less", T(RTX_I8, 1, D(2), V(-128, 127)), T(RTX_I8, 1, D(2), V(127, -128))),
           RTX_BOOL, 1, D(2), V(1, 0), 0, 0);
    expect(run2("greater", T(RTX_U8, 1, D(1), V(255)), T(RTX_U8, 1, D(1), V(0))), RTX_BOOL, 1,
           D(1), V(1), 0, 0);
}
END_TEST

START_TEST(compare_bool_inputs) {
    const double a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
    expect(run2("equal", T(RTX_BOOL, 1, D(4), a), T(RTX_BOOL, 1, D(4), b)), RTX_BOOL, 1, D(4),
           V(1, 0, 0, 1), 0, 0);
    expect(run2("less", T(RTX_BOOL, 1, D(4), a), T(RTX_BOOL, 1, D(4), b)), RTX_BOOL, 1, D(4),
           V(0, 1, 0, 0), 0, 0);
    expect(run2("greater", T(RTX_BOOL, 1, D(4), a), T(RTX_BOOL, 1, D(4), b)), RTX_BOOL, 1, D(4),
           V(0, 0, 1, 0), 0, 0);
}
END_TEST

START_TEST(compare_broadcasts_scalar_and_row) {
    expect(run2("greater", T(RTX_I32, 2, D(2, 3), V(1, 5, 3, 7, 0, 4)),
                T(RTX_I32, 0, SCALAR, V(3))),
           RTX_BOOL, 2, D(2, 3), V(0, 1, 0, 1, 0, 1), 0, 0);
    expect(run2("equal", T(RTX_F32, 1, D(3), V(1, 2, 3)), T(RTX_F32, 2, D(2, 1), V(2, 3))),
           RTX_BOOL, 2, D(2, 3), V(0, 1, 0, 0, 0, 1), 0, 0);
}
END_TEST

START_TEST(compare_rejects_mixed_dtypes) {
    struct rtx_tensor *in[2] = {T(RTX_I32, 1, D(1), V(1)), T(RTX_I64, 1, D(1), V(1))};
    run_fails("equal", "", in, 2);
}
END_TEST

Suite *rtx_cpu_elementwise_suite(void) {
    Suite *s = suite_create("cpu_elementwise");
    TCase *tc = tcase_create("binary");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, add_same_shape_f32);
    tcase_add_test(tc, sub_mul_div_f32_same_shape);
    tcase_add_test(tc, add_broadcasts_row_over_matrix);
    tcase_add_test(tc, add_broadcasts_column_over_matrix);
    tcase_add_test(tc, sub_broadcasts_both_operands_to_outer_shape);
    tcase_add_test(tc, mul_broadcasts_rank0_scalar);
    tcase_add_test(tc, add_of_two_rank0_scalars_is_rank0);
    tcase_add_test(tc, add_broadcasts_size1_dims_in_rank3);
    tcase_add_test(tc, mul_broadcasts_alternating_dims_rank5);
    tcase_add_test(tc, add_of_empty_tensor_is_empty);
    tcase_add_test(tc, div_f32_by_zero_gives_inf_and_nan);
    tcase_add_test(tc, pow_f32);
    tcase_add_test(tc, add_large_f32_across_threads);
    tcase_add_test(tc, sub_large_broadcast_chunks_start_mid_row);
    tcase_add_test(tc, mul_large_f16_column_broadcast_across_threads);
    tcase_add_test(tc, add_large_i32_across_threads);
    tcase_add_test(tc, add_f16_rounds_f32_sum_once_to_nearest_even);
    tcase_add_test(tc, mul_bf16_rounds_to_bf16);
    tcase_add_test(tc, div_f16_broadcasts_scalar);
    tcase_add_test(tc, sub_bf16_broadcasts_row);
    tcase_add_test(tc, add_f16_overflows_to_inf);
    tcase_add_test(tc, div_int_truncates_toward_zero);
    tcase_add_test(tc, div_int_by_zero_gives_zero);
    tcase_add_test(tc, div_int_min_by_minus_one_wraps);
    tcase_add_test(tc, add_int_overflow_wraps);
    tcase_add_test(tc, sub_and_mul_int_wrap);
    tcase_add_test(tc, add_int_broadcasts_row_and_column);
    tcase_add_test(tc, pow_int_computes_in_double_and_truncates);
    tcase_add_test(tc, pow_int_saturates_at_dtype_range);
    tcase_add_test(tc, arithmetic_rejects_bool_and_mixed_dtypes);
    tcase_add_test(tc, add_rejects_shapes_that_do_not_broadcast);
    suite_add_tcase(s, tc);

    tc = tcase_create("unary");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, unary_float_ops_match_libm_f32);
    tcase_add_test(tc, unary_float_ops_in_f16_and_bf16_precision);
    tcase_add_test(tc, sqrt_rsqrt_log_of_positive_zero_and_negative);
    tcase_add_test(tc, sigmoid_silu_gelu_saturate_at_extremes);
    tcase_add_test(tc, exp_overflows_to_inf_and_tanh_saturates);
    tcase_add_test(tc, relu_keeps_nan_and_zeroes_negative_infinity);
    tcase_add_test(tc, neg_abs_relu_integers);
    tcase_add_test(tc, neg_and_abs_wrap_at_int_min_and_u8);
    tcase_add_test(tc, unary_large_f32_and_bf16_across_threads);
    tcase_add_test(tc, gelu_rejects_unknown_approximation);
    tcase_add_test(tc, float_only_unary_rejects_integers);
    suite_add_tcase(s, tc);

    tc = tcase_create("cast");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, cast_float_to_int_truncates_toward_zero);
    tcase_add_test(tc, cast_float_to_int_saturates_and_nan_gives_zero);
    tcase_add_test(tc, cast_to_bool_is_nonzero);
    tcase_add_test(tc, cast_bool_to_numbers_gives_zero_or_one);
    tcase_add_test(tc, cast_int_to_int_wraps);
    tcase_add_test(tc, cast_between_float_types_rounds_to_nearest_even);
    tcase_add_test(tc, cast_int_to_float);
    tcase_add_test(tc, cast_to_same_dtype_copies);
    tcase_add_test(tc, cast_large_f32_to_i32_across_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("select");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, where_selects_elementwise);
    tcase_add_test(tc, where_broadcasts_cond_column_and_scalar_else);
    tcase_add_test(tc, where_broadcasts_all_three_operands);
    tcase_add_test(tc, where_on_every_element_size);
    tcase_add_test(tc, where_large_across_threads);
    tcase_add_test(tc, where_rejects_non_bool_condition);
    tcase_add_test(tc, compare_f32_gives_bool_and_nan_compares_false);
    tcase_add_test(tc, compare_every_dtype);
    tcase_add_test(tc, compare_bool_inputs);
    tcase_add_test(tc, compare_broadcasts_scalar_and_row);
    tcase_add_test(tc, compare_rejects_mixed_dtypes);
    suite_add_tcase(s, tc);
    return s;
}
