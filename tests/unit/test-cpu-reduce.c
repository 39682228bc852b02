/*
 * test-cpu-reduce.c - the CPU reference kernels of the reductions and normalizations
 * (reduce_sum, reduce_mean, reduce_max, reduce_min, argmax, softmax, log_softmax, layer_norm,
 * rms_norm), run as one-node graphs against hand-computed values or a double-precision
 * reference written out in the test: axis sets of every shape (last, first, middle,
 * non-adjacent, negative, keepdims), every dtype class, NaN and infinities, empty axes, and
 * tensors large enough to be split across the thread pool.
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

static struct rtx_tensor *run1(const char *op, const char *attrs, struct rtx_tensor *x) {
    return run(op, attrs, &x, 1);
}

/* Checks dtype, shape and values of out, then releases it. */
static void expect(struct rtx_tensor *out, enum rtx_dtype dt, int ndim, const int64_t *dims,
                   const double *want, double rtol, double atol) {
    tu_assert_shape(out, dt, ndim, dims);
    tu_assert_close(out, want, rtol, atol);
    rtx_tensor_unref(out);
}

/* Runs an op that must fail. */
static void run_fails(const char *op, const char *attrs, struct rtx_tensor *x) {
    struct rtx_tensor *out = NULL;
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, &x, 1, &out, 1, &err);
    rtx_tensor_unref(x);
    ck_assert_msg(rc < 0, "%s succeeded", op);
    ck_assert_ptr_null(out);
    ck_assert(err.msg[0] != '\0');
}

/* Values of t as doubles (caller frees). */
static double *values(const struct rtx_tensor *t) {
    int64_t n = rtx_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = rtx_tensor_get(t, i);
    return v;
}

/* x = 0, 1, 2, ... 23 as [2,3,4]. */
static struct rtx_tensor *iota234(enum rtx_dtype dt) {
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = i;
    return T(dt, 3, D(2, 3, 4), v);
}

/* ------------------------------------------------------------------------------------------
 * reduce_sum / reduce_mean: axis sets
 * ---------------------------------------------------------------------------------------- */

START_TEST(reduce_sum_last_axis_f32) {
    struct rtx_tensor *y = run1("reduce_sum", "axes=I:-1",
                                T(RTX_F32, 2, D(2, 3), V(1, 2, 3, 4, 5, 6)));
    expect(y, RTX_F32, 1, D(2), V(6, 15), 0, 0);
}
END_TEST

START_TEST(reduce_sum_without_axes_reduces_everything) {
    expect(run1("reduce_sum", "", T(RTX_F32, 2, D(2, 3), V(1, 2, 3, 4, 5, 6))), RTX_F32, 0,
           SCALAR, V(21), 0, 0);
    expect(run1("reduce_sum", "keepdims=i:1", T(RTX_F32, 2, D(2, 3), V(1, 2, 3, 4, 5, 6))),
           RTX_F32, 2, D(1, 1), V(21), 0, 0);
}
END_TEST

START_TEST(reduce_sum_first_axis_sums_columns) {
    expect(run1("reduce_sum", "axes=I:0", T(RTX_F32, 2, D(3, 2), V(1, 10, 2, 20, 3, 30))),
           RTX_F32, 1, D(2), V(6, 60), 0, 0);
}
END_TEST

START_TEST(reduce_sum_middle_axis) {
    /* sum over j of i*12 + j*4 + k = 3*(12i + k) + 12 */
    double want[8];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) want[i * 4 + k] = 3 * (12 * i + k) + 12;
    expect(run1("reduce_sum", "axes=I:1", iota234(RTX_F32)), RTX_F32, 2, D(2, 4), want, 0, 0);
}
END_TEST

START_TEST(reduce_sum_non_adjacent_axes) {
    /* axes 0 and 2 of [2,3,4]: sum over i, k of 12i + 4j + k = 8*4j + 4*12 + 2*6 */
    double want[3];
    for (int j = 0; j < 3; j++) want[j] = 32 * j + 48 + 12;
    expect(run1("reduce_sum", "axes=I:0,2", iota234(RTX_F32)), RTX_F32, 1, D(3), want, 0, 0);
    expect(run1("reduce_sum", "axes=I:2,0", iota234(RTX_I32)), RTX_I32, 1, D(3), want, 0, 0);
}
END_TEST

START_TEST(reduce_sum_negative_axes_count_from_end) {
    double want[3];
    for (int j = 0; j < 3; j++) want[j] = 32 * j + 60;
    expect(run1("reduce_sum", "axes=I:-1,-3", iota234(RTX_F32)), RTX_F32, 1, D(3), want, 0, 0);
}
END_TEST

START_TEST(reduce_sum_keepdims_keeps_reduced_axes_as_one) {
    double want[8];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) want[i * 4 + k] = 3 * (12 * i + k) + 12;
    expect(run1("reduce_sum", "axes=I:1;keepdims=i:1", iota234(RTX_F32)), RTX_F32, 3,
           D(2, 1, 4), want, 0, 0);
    double want2[3];
    for (int j = 0; j < 3; j++) want2[j] = 32 * j + 60;
    expect(run1("reduce_sum", "axes=I:0,2;keepdims=i:1", iota234(RTX_F32)), RTX_F32, 3,
           D(1, 3, 1), want2, 0, 0);
}
END_TEST

START_TEST(reduce_over_three_separated_axes) {
    /* axes 0,2,4 of [2,3,2,3,2]: three reduced blocks walked by the odometer */
    double v[72], sum[9], mx[9];
    for (int i = 0; i < 72; i++) v[i] = (i * 37) % 19 - 9;
    for (int j = 0; j < 9; j++) {
        sum[j] = 0;
        mx[j] = -INFINITY;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < 3; d++)
                    for (int e = 0; e < 2; e++) {
                        double x = v[(((a * 3 + b) * 2 + c) * 3 + d) * 2 + e];
                        sum[b * 3 + d] += x;
                        mx[b * 3 + d] = fmax(mx[b * 3 + d], x);
                    }
    expect(run1("reduce_sum", "axes=I:0,2,4", T(RTX_F32, 5, D(2, 3, 2, 3, 2), v)), RTX_F32, 2,
           D(3, 3), sum, 0, 0);
    expect(run1("reduce_max", "axes=I:4,0,2;keepdims=i:1", T(RTX_I32, 5, D(2, 3, 2, 3, 2), v)),
           RTX_I32, 5, D(1, 3, 1, 3, 1), mx, 0, 0);
}
END_TEST

START_TEST(reduce_sum_two_leading_axes) {
    /* axes 0,1 of [2,3,4]: sum over i, j of 12i + 4j + k = 6k + 3*12 + 2*12 */
    double want[4];
    for (int k = 0; k < 4; k++) want[k] = 6 * k + 60;
    expect(run1("reduce_sum", "axes=I:0,1", iota234(RTX_F32)), RTX_F32, 1, D(4), want, 0, 0);
}
END_TEST

START_TEST(reduce_over_size1_axis_copies) {
    expect(run1("reduce_max", "axes=I:1", T(RTX_F32, 3, D(2, 1, 2), V(1, -2, 3, 4))), RTX_F32,
           2, D(2, 2), V(1, -2, 3, 4), 0, 0);
}
END_TEST

START_TEST(reduce_sum_of_rank0_is_the_value) {
    expect(run1("reduce_sum", "", T(RTX_F32, 0, SCALAR, V(2.5))), RTX_F32, 0, SCALAR, V(2.5), 0,
           0);
}
END_TEST

START_TEST(reduce_mean_over_axes_f32_f16_bf16) {
    expect(run1("reduce_mean", "axes=I:1", T(RTX_F32, 2, D(2, 3), V(1, 2, 4, -1, 0, 4))),
           RTX_F32, 1, D(2), V(7.0 / 3, 1), 1e-7, 0);
    expect(run1("reduce_mean", "axes=I:0", T(RTX_F16, 2, D(2, 3), V(1, 2, 4, -1, 0, 5))),
           RTX_F16, 1, D(3), V(0, 1, 4.5), 0, 0);
    expect(run1("reduce_mean", "", T(RTX_BF16, 2, D(2, 2), V(1, 2, 3, 4))), RTX_BF16, 0,
           SCALAR, V(2.5), 0, 0);
    double want[3];
    for (int j = 0; j < 3; j++) want[j] = (32 * j + 60) / 8.0;
    expect(run1("reduce_mean", "axes=I:0,2;keepdims=i:1", iota234(RTX_F32)), RTX_F32, 3,
           D(1, 3, 1), want, 1e-7, 0);
}
END_TEST

START_TEST(reduce_sum_f16_rounds_once) {
    /* 2048 + 1 + 1 is 2050 (exact in f16) because the sum is not rounded after each add. */
    expect(run1("reduce_sum", "", T(RTX_F16, 1, D(3), V(2048, 1, 1))), RTX_F16, 0, SCALAR,
           V(2050), 0, 0);
}
END_TEST

START_TEST(reduce_sum_int_accumulates_in_i64_and_wraps) {
    expect(run1("reduce_sum", "", T(RTX_I8, 1, D(3), V(100, 100, -50))), RTX_I8, 0, SCALAR,
           V(-106), 0, 0);
    expect(run1("reduce_sum", "", T(RTX_I8, 1, D(3), V(100, 100, -100))), RTX_I8, 0, SCALAR,
           V(100), 0, 0);
    expect(run1("reduce_sum", "axes=I:0", T(RTX_U8, 2, D(2, 2), V(200, 1, 100, 2))), RTX_U8, 1,
           D(2), V(44, 3), 0, 0);
    expect(run1("reduce_sum", "axes=I:1", T(RTX_I32, 2, D(1, 2), V(INT32_MAX, 1))), RTX_I32, 1,
           D(1), V(INT32_MIN), 0, 0);
    expect(run1("reduce_sum", "", T(RTX_I64, 1, D(2), V(4e15, 5e15))), RTX_I64, 0, SCALAR,
           V(9e15), 0, 0);
}
END_TEST

START_TEST(reduce_sum_accumulates_f32_accurately) {
    /* 2^20 copies of f32(0.1): a naive f32 running sum is off by about 1%. */
    int64_t n = 1 << 20;
    struct rtx_tensor *x = T(RTX_F32, 1, &n, NULL);
    float *p = rtx_tensor_data(x);
    for (int64_t i = 0; i < n; i++) p[i] = 0.1f;
    expect(run1("reduce_sum", "", x), RTX_F32, 0, SCALAR, V((double)0.1f * n), 1e-6, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * reduce_max / reduce_min
 * ---------------------------------------------------------------------------------------- */

START_TEST(reduce_max_min_f32_rows_and_columns) {
    const double x[] = {3, -1, 7, 2, 9, -4};
    expect(run1("reduce_max", "axes=I:1", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 1, D(2), V(7, 9),
           0, 0);
    expect(run1("reduce_min", "axes=I:1", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 1, D(2),
           V(-1, -4), 0, 0);
    expect(run1("reduce_max", "axes=I:0", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 1, D(3),
           V(3, 9, 7), 0, 0);
    expect(run1("reduce_min", "axes=I:0;keepdims=i:1", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 2,
           D(1, 3), V(2, -1, -4), 0, 0);
    expect(run1("reduce_max", "", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 0, SCALAR, V(9), 0, 0);
}
END_TEST

START_TEST(reduce_max_min_propagate_nan) {
    const double x[] = {1, NAN, 3, 4, 5, 6, 7, 8, 9, 10}; /* NaN in row 0, column 1 */
    expect(run1("reduce_max", "axes=I:1", T(RTX_F32, 2, D(2, 5), x)), RTX_F32, 1, D(2),
           V(NAN, 10), 0, 0);
    expect(run1("reduce_min", "axes=I:1", T(RTX_F32, 2, D(2, 5), x)), RTX_F32, 1, D(2),
           V(NAN, 6), 0, 0);
    expect(run1("reduce_max", "axes=I:0", T(RTX_F32, 2, D(2, 5), x)), RTX_F32, 1, D(5),
           V(6, NAN, 8, 9, 10), 0, 0);
    expect(run1("reduce_min", "axes=I:0", T(RTX_BF16, 2, D(2, 5), x)), RTX_BF16, 1, D(5),
           V(1, NAN, 3, 4, 5), 0, 0);
    /* NaN last, after larger values, and in a generic (non-adjacent axes) reduction */
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = i;
    v[23] = NAN;
    expect(run1("reduce_max", "axes=I:0,2", T(RTX_F32, 3, D(2, 3, 4), v)), RTX_F32, 1, D(3),
           V(15, 19, NAN), 0, 0);
}
END_TEST

START_TEST(reduce_max_min_of_infinities) {
    expect(run1("reduce_max", "", T(RTX_F32, 1, D(2), V(-INFINITY, -INFINITY))), RTX_F32, 0,
           SCALAR, V(-INFINITY), 0, 0);
    expect(run1("reduce_min", "", T(RTX_F32, 1, D(2), V(INFINITY, INFINITY))), RTX_F32, 0,
           SCALAR, V(INFINITY), 0, 0);
    expect(run1("reduce_max", "", T(RTX_F16, 1, D(3), V(-INFINITY, 1, INFINITY))), RTX_F16, 0,
           SCALAR, V(INFINITY), 0, 0);
}
END_TEST

START_TEST(reduce_max_min_integers) {
    expect(run1("reduce_max", "axes=I:1", T(RTX_I8, 2, D(2, 2), V(-128, -5, 127, 3))), RTX_I8, 1,
           D(2), V(-5, 127), 0, 0);
    expect(run1("reduce_min", "axes=I:1", T(RTX_I8, 2, D(2, 2), V(-128, -5, 127, 3))), RTX_I8, 1,
           D(2), V(-128, 3), 0, 0);
    expect(run1("reduce_max", "", T(RTX_U8, 1, D(3), V(0, 255, 7))), RTX_U8, 0, SCALAR, V(255),
           0, 0);
    expect(run1("reduce_min", "axes=I:0", T(RTX_I64, 2, D(2, 2), V(-9e15, 1, 5, -2))), RTX_I64,
           1, D(2), V(-9e15, -2), 0, 0);
    expect(run1("reduce_max", "axes=I:0,2", iota234(RTX_I32)), RTX_I32, 1, D(3), V(15, 19, 23),
           0, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Empty axes and large tensors
 * ---------------------------------------------------------------------------------------- */

START_TEST(reduce_of_empty_axis_sum_zero_mean_nan) {
    expect(run1("reduce_sum", "axes=I:1", T(RTX_F32, 2, D(2, 0), NULL)), RTX_F32, 1, D(2),
           V(0, 0), 0, 0);
    expect(run1("reduce_sum", "axes=I:1", T(RTX_I32, 2, D(2, 0), NULL)), RTX_I32, 1, D(2),
           V(0, 0), 0, 0);
    expect(run1("reduce_mean", "axes=I:1", T(RTX_F32, 2, D(2, 0), NULL)), RTX_F32, 1, D(2),
           V(NAN, NAN), 0, 0);
    struct rtx_tensor *y = run1("reduce_sum", "axes=I:1", T(RTX_F32, 2, D(0, 3), NULL));
    tu_assert_shape(y, RTX_F32, 1, D(0));
    rtx_tensor_unref(y);
}
END_TEST

START_TEST(reduce_max_of_empty_axis_fails) {
    run_fails("reduce_max", "axes=I:1", T(RTX_F32, 2, D(2, 0), NULL));
}
END_TEST

START_TEST(reduce_mean_rejects_integers) {
    run_fails("reduce_mean", "", T(RTX_I32, 1, D(2), V(1, 2)));
}
END_TEST

START_TEST(reduce_rejects_axis_out_of_range) {
    run_fails("reduce_sum", "axes=I:2", T(RTX_F32, 2, D(2, 2), NULL));
}
END_TEST

/* Double reference of reduce over axis 1 of [outer, r, inner]. */
static void ref_reduce(const char *op, const double *x, int64_t outer, int64_t r, int64_t inner,
                       double *y) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0, m = x[o * r * inner + i];
            for (int64_t j = 0; j < r; j++) {
                double v = x[(o * r + j) * inner + i];
                s += v;
                m = strcmp(op, "reduce_max") == 0 ? fmax(m, v) : fmin(m, v);
            }
            if (strcmp(op, "reduce_sum") == 0) y[o * inner + i] = s;
            else if (strcmp(op, "reduce_mean") == 0) y[o * inner + i] = s / r;
            else y[o * inner + i] = m;
        }
}

/* Reduces axis 1 of a random [outer, r, inner] tensor and compares with ref_reduce. */
static void check_large(const char *op, enum rtx_dtype dt, int64_t outer, int64_t r,
                        int64_t inner, double rtol, double atol) {
    int64_t dims[] = {outer, r, inner}, ydims[] = {outer, inner};
    struct rtx_tensor *x = tu_tensor_random(dt, 3, dims, -3, 5, (unsigned)(outer + r + inner));
    double *v = values(x), *want = malloc((size_t)(outer * inner) * sizeof *want);
    ref_reduce(op, v, outer, r, inner, want);
    expect(run1(op, "axes=I:1", x), dt, 2, ydims, want, rtol, atol);
    free(v);
    free(want);
}

START_TEST(reduce_large_rows_across_threads) {
    check_large("reduce_sum", RTX_F32, 67, 1500, 1, 1e-6, 1e-5);
    check_large("reduce_mean", RTX_F32, 67, 1500, 1, 1e-6, 1e-6);
    check_large("reduce_max", RTX_F32, 67, 1500, 1, 0, 0);
    check_large("reduce_min", RTX_F16, 67, 1500, 1, 0, 0);
    check_large("reduce_mean", RTX_BF16, 67, 1500, 1, 4e-3, 1e-2);
    check_large("reduce_sum", RTX_I32, 67, 1500, 1, 0, 0);
    check_large("reduce_max", RTX_I64, 67, 1500, 1, 0, 0);
}
END_TEST

START_TEST(reduce_large_columns_across_threads) {
    /* inner 300 spans two accumulator slices; outer 5 gives 10 tasks */
    check_large("reduce_sum", RTX_F32, 5, 900, 300, 1e-6, 1e-5);
    check_large("reduce_mean", RTX_F16, 5, 900, 300, 1e-3, 1e-3);
    check_large("reduce_max", RTX_F32, 5, 900, 300, 0, 0);
    check_large("reduce_min", RTX_I8, 5, 900, 300, 0, 0);
    check_large("reduce_sum", RTX_I64, 1, 2000, 70, 0, 0);
}
END_TEST

START_TEST(reduce_large_generic_axes_across_threads) {
    /* axes 1,3 of [20, 30, 40, 10]: output [20, 40] */
    int64_t dims[] = {20, 30, 40, 10}, ydims[] = {20, 40};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 4, dims, -1, 1, 21);
    double *v = values(x), want[800];
    for (int a = 0; a < 20; a++)
        for (int c = 0; c < 40; c++) {
            double s = 0;
            for (int b = 0; b < 30; b++)
                for (int d = 0; d < 10; d++) s += v[((a * 30 + b) * 40 + c) * 10 + d];
            want[a * 40 + c] = s;
        }
    expect(run1("reduce_sum", "axes=I:1,3", x), RTX_F32, 2, ydims, want, 1e-6, 1e-6);
    free(v);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * argmax
 * ---------------------------------------------------------------------------------------- */

START_TEST(argmax_last_axis_default) {
    expect(run1("argmax", "", T(RTX_F32, 2, D(2, 3), V(1, 9, 3, 7, 2, 8))), RTX_I64, 1, D(2),
           V(1, 2), 0, 0);
}
END_TEST

START_TEST(argmax_first_axis_and_negative_axis) {
    const double x[] = {1, 9, 3, 7, 2, 8};
    expect(run1("argmax", "axis=i:0", T(RTX_F32, 2, D(2, 3), x)), RTX_I64, 1, D(3), V(1, 0, 1),
           0, 0);
    expect(run1("argmax", "axis=i:-2", T(RTX_F32, 2, D(2, 3), x)), RTX_I64, 1, D(3), V(1, 0, 1),
           0, 0);
    /* middle axis of [2,3,4] iota: the last index everywhere */
    expect(run1("argmax", "axis=i:1", iota234(RTX_F32)), RTX_I64, 2, D(2, 4),
           V(2, 2, 2, 2, 2, 2, 2, 2), 0, 0);
}
END_TEST

START_TEST(argmax_keepdims) {
    expect(run1("argmax", "axis=i:1;keepdims=i:1", T(RTX_F32, 2, D(2, 3), V(1, 9, 3, 7, 2, 8))),
           RTX_I64, 2, D(2, 1), V(1, 2), 0, 0);
}
END_TEST

START_TEST(argmax_ties_give_first_index) {
    expect(run1("argmax", "", T(RTX_F32, 2, D(2, 4), V(5, 1, 5, 5, -INFINITY, -INFINITY, -1, -1))),
           RTX_I64, 1, D(2), V(0, 2), 0, 0);
    expect(run1("argmax", "", T(RTX_F32, 1, D(2), V(-INFINITY, -INFINITY))), RTX_I64, 0, SCALAR,
           V(0), 0, 0);
}
END_TEST

START_TEST(argmax_nan_counts_as_maximum) {
    expect(run1("argmax", "", T(RTX_F32, 2, D(3, 4),
                                V(1, 9, NAN, 2, NAN, 1, 2, 3, 4, 5, NAN, NAN))),
           RTX_I64, 1, D(3), V(2, 0, 2), 0, 0);
    expect(run1("argmax", "axis=i:0", T(RTX_F16, 2, D(3, 2), V(1, 2, NAN, 5, 3, NAN))),
           RTX_I64, 1, D(2), V(1, 2), 0, 0);
}
END_TEST

START_TEST(argmax_integers_and_half_types) {
    expect(run1("argmax", "", T(RTX_I8, 1, D(4), V(-128, 127, 5, 127))), RTX_I64, 0, SCALAR,
           V(1), 0, 0);
    expect(run1("argmax", "", T(RTX_U8, 1, D(3), V(0, 200, 255))), RTX_I64, 0, SCALAR, V(2), 0,
           0);
    expect(run1("argmax", "axis=i:0", T(RTX_I64, 2, D(2, 2), V(-5, 3, -6, 4))), RTX_I64, 1,
           D(2), V(0, 1), 0, 0);
    expect(run1("argmax", "", T(RTX_I32, 1, D(3), V(-3, -2, -9))), RTX_I64, 0, SCALAR, V(1), 0,
           0);
    expect(run1("argmax", "", T(RTX_BF16, 1, D(3), V(0.5, 2, 1))), RTX_I64, 0, SCALAR, V(1), 0,
           0);
}
END_TEST

START_TEST(argmax_large_across_threads) {
    int64_t dims[] = {300, 700};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, dims, -1, 1, 31);
    double *v = values(x), want[300];
    for (int o = 0; o < 300; o++) {
        int best = 0;
        for (int j = 1; j < 700; j++)
            if (v[o * 700 + j] > v[o * 700 + best]) best = j;
        want[o] = best;
    }
    expect(run1("argmax", "", x), RTX_I64, 1, D(300), want, 0, 0);
    free(v);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * softmax / log_softmax
 * ---------------------------------------------------------------------------------------- */

/* Double reference along axis 1 of [outer, r, inner]. */
static void ref_softmax(bool is_log, const double *x, int64_t outer, int64_t r, int64_t inner,
                        double *y) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *p = x + o * r * inner + i;
            double *q = y + o * r * inner + i;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < r; j++) m = fmax(m, p[j * inner]);
            for (int64_t j = 0; j < r; j++) s += exp(p[j * inner] - m);
            for (int64_t j = 0; j < r; j++)
                q[j * inner] = is_log ? p[j * inner] - m - log(s) : exp(p[j * inner] - m) / s;
        }
}

START_TEST(softmax_last_axis) {
    double want[6];
    const double x[] = {1, 2, 3, 0, 0, 0};
    ref_softmax(false, x, 2, 3, 1, want);
    expect(run1("softmax", "", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 2, D(2, 3), want, 1e-6, 0);
    ref_softmax(true, x, 2, 3, 1, want);
    expect(run1("log_softmax", "axis=i:-1", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 2, D(2, 3),
           want, 1e-6, 0);
}
END_TEST

START_TEST(softmax_of_large_values_does_not_overflow) {
    double want[3];
    ref_softmax(false, V(0, 1, 2), 1, 3, 1, want);
    expect(run1("softmax", "", T(RTX_F32, 1, D(3), V(1000, 1001, 1002))), RTX_F32, 1, D(3), want,
           1e-6, 0);
    expect(run1("softmax", "", T(RTX_F32, 1, D(3), V(-1000, -999, -998))), RTX_F32, 1, D(3),
           want, 1e-6, 0);
    ref_softmax(true, V(0, 1, 2), 1, 3, 1, want);
    expect(run1("log_softmax", "", T(RTX_F32, 1, D(3), V(1000, 1001, 1002))), RTX_F32, 1, D(3),
           want, 1e-6, 0);
    expect(run1("softmax", "", T(RTX_F16, 1, D(2), V(60000, 60000))), RTX_F16, 1, D(2),
           V(0.5, 0.5), 0, 0);
}
END_TEST

START_TEST(softmax_first_axis) {
    const double x[] = {1, 2, 3, 4, 6, 8};
    double want[6];
    ref_softmax(false, x, 1, 2, 3, want);
    expect(run1("softmax", "axis=i:0", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 2, D(2, 3), want,
           1e-6, 0);
    ref_softmax(true, x, 1, 2, 3, want);
    expect(run1("log_softmax", "axis=i:0", T(RTX_F32, 2, D(2, 3), x)), RTX_F32, 2, D(2, 3),
           want, 1e-6, 1e-7);
}
END_TEST

START_TEST(softmax_masked_entries_give_zero) {
    expect(run1("softmax", "", T(RTX_F32, 1, D(3), V(-INFINITY, 0, -INFINITY))), RTX_F32, 1,
           D(3), V(0, 1, 0), 0, 0);
    expect(run1("log_softmax", "", T(RTX_F32, 1, D(3), V(-INFINITY, 0, 0))), RTX_F32, 1, D(3),
           V(-INFINITY, -M_LN2, -M_LN2), 1e-6, 0);
}
END_TEST

START_TEST(softmax_row_with_nan_is_nan) {
    expect(run1("softmax", "", T(RTX_F32, 2, D(2, 2), V(1, NAN, 0, 0))), RTX_F32, 2, D(2, 2),
           V(NAN, NAN, 0.5, 0.5), 0, 0);
}
END_TEST

START_TEST(softmax_f16_and_bf16) {
    const double x[] = {0.5, -1, 2, 0.25};
    double want[4];
    ref_softmax(false, x, 1, 4, 1, want);
    expect(run1("softmax", "", T(RTX_F16, 1, D(4), x)), RTX_F16, 1, D(4), want, 1e-3, 0);
    expect(run1("softmax", "", T(RTX_BF16, 1, D(4), x)), RTX_BF16, 1, D(4), want, 8e-3, 0);
    ref_softmax(true, x, 1, 4, 1, want);
    expect(run1("log_softmax", "", T(RTX_F16, 1, D(4), x)), RTX_F16, 1, D(4), want, 1e-3, 0);
}
END_TEST

/* Random [outer, r, inner], softmax along axis 1, compared with the double reference. */
static void check_softmax_large(bool is_log, enum rtx_dtype dt, int64_t outer, int64_t r,
                                int64_t inner, double rtol, double atol) {
    int64_t dims[] = {outer, r, inner};
    struct rtx_tensor *x = tu_tensor_random(dt, 3, dims, -8, 8, (unsigned)(outer * 7 + r));
    int64_t n = outer * r * inner;
    double *v = values(x), *want = malloc((size_t)n * sizeof *want);
    ref_softmax(is_log, v, outer, r, inner, want);
    expect(run1(is_log ? "log_softmax" : "softmax", "axis=i:1", x), dt, 3, dims, want, rtol,
           atol);
    free(v);
    free(want);
}

START_TEST(softmax_large_rows_across_threads) {
    check_softmax_large(false, RTX_F32, 97, 1000, 1, 1e-5, 1e-9);
    check_softmax_large(true, RTX_F32, 97, 1000, 1, 1e-6, 1e-6);
    check_softmax_large(false, RTX_F16, 97, 1000, 1, 1e-3, 1e-7);
    check_softmax_large(false, RTX_F32, 8, 300, 50, 1e-5, 1e-9);
    check_softmax_large(true, RTX_BF16, 8, 300, 50, 8e-3, 1e-2);
}
END_TEST

START_TEST(softmax_rejects_integers) {
    run_fails("softmax", "", T(RTX_I32, 1, D(2), V(1, 2)));
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * layer_norm / rms_norm
 * ---------------------------------------------------------------------------------------- */

/* Double reference over rows of r elements; scale, bias may be NULL. */
static void ref_norm(bool is_layer, const double *x, int64_t rows, int64_t r,
                     const double *scale, const double *bias, double eps, double *y) {
    for (int64_t o = 0; o < rows; o++) {
        const double *p = x + o * r;
        double mean = 0, var = 0;
        if (is_layer) {
            for (int64_t j = 0; j < r; j++) mean += p[j];
            mean /= r;
        }
        for (int64_t j = 0; j < r; j++) var += (p[j] - mean) * (p[j] - mean);
        double inv = 1 / sqrt(var / r + eps);
        for (int64_t j = 0; j < r; j++) {
            double v = (p[j] - mean) * inv;
            if (scale) v *= scale[j];
            if (bias) v += bias[j];
            y[o * r + j] = v;
        }
    }
}

START_TEST(layer_norm_without_scale_or_bias) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8};
    double want[8];
    ref_norm(true, x, 2, 4, NULL, NULL, 1e-5, want);
    expect(run1("layer_norm", "", T(RTX_F32, 2, D(2, 4), x)), RTX_F32, 2, D(2, 4), want, 1e-6,
           1e-7);
}
END_TEST

START_TEST(layer_norm_with_scale_and_bias) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8}, sc[] = {1, 2, 0.5, -1}, bi[] = {0, 1, -1, 3};
    double want[8];
    ref_norm(true, x, 2, 4, sc, bi, 1e-5, want);
    struct rtx_tensor *in[3] = {T(RTX_F32, 2, D(2, 4), x), T(RTX_F32, 1, D(4), sc),
                                T(RTX_F32, 1, D(4), bi)};
    expect(run("layer_norm", "", in, 3), RTX_F32, 2, D(2, 4), want, 1e-6, 1e-7);
}
END_TEST

START_TEST(layer_norm_with_bias_only_and_scale_only) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8}, sc[] = {1, 2, 0.5, -1}, bi[] = {0, 1, -1, 3};
    double want[8];
    ref_norm(true, x, 2, 4, NULL, bi, 1e-5, want);
    struct rtx_tensor *in[3] = {T(RTX_F32, 2, D(2, 4), x), NULL, T(RTX_F32, 1, D(4), bi)};
    struct rtx_tensor *y = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(tu_run_op("layer_norm", "", in, 3, &y, 1, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[2]);
    expect(y, RTX_F32, 2, D(2, 4), want, 1e-6, 1e-7);
    ref_norm(true, x, 2, 4, sc, NULL, 1e-5, want);
    struct rtx_tensor *in2[2] = {T(RTX_F32, 2, D(2, 4), x), T(RTX_F32, 1, D(4), sc)};
    expect(run("layer_norm", "", in2, 2), RTX_F32, 2, D(2, 4), want, 1e-6, 1e-7);
}
END_TEST

START_TEST(layer_norm_over_last_two_axes) {
    double x[12], sc[6], want[12];
    for (int i = 0; i < 12; i++) x[i] = (i * 7) % 5 - 1.5 * (i / 6);
    for (int i = 0; i < 6; i++) sc[i] = 0.5 + i;
    ref_norm(true, x, 2, 6, sc, NULL, 1e-5, want);
    struct rtx_tensor *in[2] = {T(RTX_F32, 3, D(2, 2, 3), x), T(RTX_F32, 2, D(2, 3), sc)};
    expect(run("layer_norm", "axis=i:-2", in, 2), RTX_F32, 3, D(2, 2, 3), want, 1e-6, 1e-6);
    ref_norm(true, x, 1, 12, NULL, NULL, 1e-5, want);
    expect(run1("layer_norm", "axis=i:0", T(RTX_F32, 3, D(2, 2, 3), x)), RTX_F32, 3, D(2, 2, 3),
           want, 1e-6, 1e-6);
}
END_TEST

START_TEST(layer_norm_epsilon_attribute) {
    /* A constant row normalizes to 0 (+ bias); epsilon 1 shrinks a unit-variance row. */
    expect(run1("layer_norm", "", T(RTX_F32, 1, D(3), V(5, 5, 5))), RTX_F32, 1, D(3), V(0, 0, 0),
           0, 0);
    double want[2];
    ref_norm(true, V(-1, 1), 1, 2, NULL, NULL, 1.0, want);
    expect(run1("layer_norm", "epsilon=f:1", T(RTX_F32, 1, D(2), V(-1, 1))), RTX_F32, 1, D(2),
           want, 1e-6, 0);
    ck_assert(fabs(want[1] - M_SQRT1_2) < 1e-12);
}
END_TEST

START_TEST(layer_norm_keeps_precision_for_large_offset) {
    /* 10000 + small deviations: mean and variance must not cancel in f32. */
    double x[4] = {10000.0, 10000.5, 10001.0, 10001.5}, want[4];
    ref_norm(true, x, 1, 4, NULL, NULL, 1e-5, want);
    expect(run1("layer_norm", "", T(RTX_F32, 1, D(4), x)), RTX_F32, 1, D(4), want, 1e-5, 1e-6);
}
END_TEST

START_TEST(layer_norm_f16_and_bf16) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8}, sc[] = {1, 2, 0.5, -1}, bi[] = {0, 1, -1, 3};
    double want[8];
    ref_norm(true, x, 2, 4, sc, bi, 1e-5, want);
    struct rtx_tensor *in[3] = {T(RTX_F16, 2, D(2, 4), x), T(RTX_F16, 1, D(4), sc),
                                T(RTX_F16, 1, D(4), bi)};
    expect(run("layer_norm", "", in, 3), RTX_F16, 2, D(2, 4), want, 1e-3, 1e-3);
    struct rtx_tensor *in2[3] = {T(RTX_BF16, 2, D(2, 4), x), T(RTX_BF16, 1, D(4), sc),
                                 T(RTX_BF16, 1, D(4), bi)};
    expect(run("layer_norm", "", in2, 3), RTX_BF16, 2, D(2, 4), want, 8e-3, 8e-3);
}
END_TEST

START_TEST(rms_norm_with_and_without_scale) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8}, sc[] = {1, 2, 0.5, -1};
    double want[8];
    ref_norm(false, x, 2, 4, NULL, NULL, 1e-6, want);
    expect(run1("rms_norm", "", T(RTX_F32, 2, D(2, 4), x)), RTX_F32, 2, D(2, 4), want, 1e-6,
           1e-7);
    ref_norm(false, x, 2, 4, sc, NULL, 1e-6, want);
    struct rtx_tensor *in[2] = {T(RTX_F32, 2, D(2, 4), x), T(RTX_F32, 1, D(4), sc)};
    expect(run("rms_norm", "", in, 2), RTX_F32, 2, D(2, 4), want, 1e-6, 1e-7);
    /* rms of (3, 4) is sqrt(12.5) */
    expect(run1("rms_norm", "epsilon=f:0", T(RTX_F32, 1, D(2), V(3, 4))), RTX_F32, 1, D(2),
           V(3 / sqrt(12.5), 4 / sqrt(12.5)), 1e-6, 0);
}
END_TEST

START_TEST(rms_norm_epsilon_axis_and_half_types) {
    const double x[] = {1, 2, 3, 4, -2, 0, 2, 8};
    double want[8];
    ref_norm(false, x, 1, 8, NULL, NULL, 0.5, want);
    expect(run1("rms_norm", "axis=i:0;epsilon=f:0.5", T(RTX_F32, 2, D(2, 4), x)), RTX_F32, 2,
           D(2, 4), want, 1e-6, 1e-7);
    ref_norm(false, x, 2, 4, NULL, NULL, 1e-6, want);
    expect(run1("rms_norm", "", T(RTX_F16, 2, D(2, 4), x)), RTX_F16, 2, D(2, 4), want, 1e-3,
           1e-4);
    expect(run1("rms_norm", "axis=i:1", T(RTX_BF16, 2, D(2, 4), x)), RTX_BF16, 2, D(2, 4), want,
           8e-3, 1e-3);
    /* an all-zero row stays zero */
    expect(run1("rms_norm", "", T(RTX_F32, 1, D(3), V(0, 0, 0))), RTX_F32, 1, D(3), V(0, 0, 0),
           0, 0);
}
END_TEST

/* Random [rows, r] normalized with random scale and bias, against the double reference. */
static void check_norm_large(bool is_layer, enum rtx_dtype dt, int64_t rows, int64_t r,
                             double rtol, double atol) {
    int64_t dims[] = {rows, r};
    struct rtx_tensor *x = tu_tensor_random(dt, 2, dims, -4, 6, (unsigned)(rows + r));
    struct rtx_tensor *sc = tu_tensor_random(dt, 1, &r, 0.5, 2, 41);
    struct rtx_tensor *bi = tu_tensor_random(dt, 1, &r, -1, 1, 42);
    double *v = values(x), *vs = values(sc), *vb = values(bi);
    double *want = malloc((size_t)(rows * r) * sizeof *want);
    ref_norm(is_layer, v, rows, r, vs, is_layer ? vb : NULL, is_layer ? 1e-5 : 1e-6, want);
    if (is_layer) {
        struct rtx_tensor *in[3] = {x, sc, bi};
        expect(run("layer_norm", "", in, 3), dt, 2, dims, want, rtol, atol);
    } else {
        rtx_tensor_unref(bi);
        struct rtx_tensor *in[2] = {x, sc};
        expect(run("rms_norm", "", in, 2), dt, 2, dims, want, rtol, atol);
    }
    free(v);
    free(vs);
    free(vb);
    free(want);
}

START_TEST(norms_large_rows_across_threads) {
    check_norm_large(true, RTX_F32, 50, 3000, 1e-5, 1e-6);
    check_norm_large(false, RTX_F32, 50, 3000, 1e-5, 1e-6);
    check_norm_large(true, RTX_F16, 40, 1000, 2e-3, 2e-3);
    check_norm_large(false, RTX_BF16, 40, 1000, 8e-3, 8e-3);
    check_norm_large(true, RTX_F32, 3000, 20, 1e-5, 1e-6);
}
END_TEST

START_TEST(layer_norm_rejects_integers) {
    run_fails("layer_norm", "", T(RTX_I32, 1, D(2), V(1, 2)));
}
END_TEST

Suite *rtx_cpu_reduce_suite(void) {
    Suite *s = suite_create("cpu_reduce");
    TCase *tc = tcase_create("reduce");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reduce_sum_last_axis_f32);
    tcase_add_test(tc, reduce_sum_without_axes_reduces_everything);
    tcase_add_test(tc, reduce_sum_first_axis_sums_columns);
    tcase_add_test(tc, reduce_sum_middle_axis);
    tcase_add_test(tc, reduce_sum_non_adjacent_axes);
    tcase_add_test(tc, reduce_sum_negative_axes_count_from_end);
    tcase_add_test(tc, reduce_sum_keepdims_keeps_reduced_axes_as_one);
    tcase_add_test(tc, reduce_sum_two_leading_axes);
    tcase_add_test(tc, reduce_over_three_separated_axes);
    tcase_add_test(tc, reduce_over_size1_axis_copies);
    tcase_add_test(tc, reduce_sum_of_rank0_is_the_value);
    tcase_add_test(tc, reduce_mean_over_axes_f32_f16_bf16);
    tcase_add_test(tc, reduce_sum_f16_rounds_once);
    tcase_add_test(tc, reduce_sum_int_accumulates_in_i64_and_wraps);
    tcase_add_test(tc, reduce_sum_accumulates_f32_accurately);
    tcase_add_test(tc, reduce_max_min_f32_rows_and_columns);
    tcase_add_test(tc, reduce_max_min_propagate_nan);
    tcase_add_test(tc, reduce_max_min_of_infinities);
    tcase_add_test(tc, reduce_max_min_integers);
    tcase_add_test(tc, reduce_of_empty_axis_sum_zero_mean_nan);
    tcase_add_test(tc, reduce_max_of_empty_axis_fails);
    tcase_add_test(tc, reduce_mean_rejects_integers);
    tcase_add_test(tc, reduce_rejects_axis_out_of_range);
    tcase_add_test(tc, reduce_large_rows_across_threads);
    tcase_add_test(tc, reduce_large_columns_across_threads);
    tcase_add_test(tc, reduce_large_generic_axes_across_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("argmax");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, argmax_last_axis_default);
    tcase_add_test(tc, argmax_first_axis_and_negative_axis);
    tcase_add_test(tc, argmax_keepdims);
    tcase_add_test(tc, argmax_ties_give_first_index);
    tcase_add_test(tc, argmax_nan_counts_as_maximum);
    tcase_add_test(tc, argmax_integers_and_half_types);
    tcase_add_test(tc, argmax_large_across_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("softmax");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, softmax_last_axis);
    tcase_add_test(tc, softmax_of_large_values_does_not_overflow);
    tcase_add_test(tc, softmax_first_axis);
    tcase_add_test(tc, softmax_masked_entries_give_zero);
    tcase_add_test(tc, softmax_row_with_nan_is_nan);
    tcase_add_test(tc, softmax_f16_and_bf16);
    tcase_add_test(tc, softmax_large_rows_across_threads);
    tcase_add_test(tc, softmax_rejects_integers);
    suite_add_tcase(s, tc);

    tc = tcase_create("norm");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, layer_norm_without_scale_or_bias);
    tcase_add_test(tc, layer_norm_with_scale_and_bias);
    tcase_add_test(tc, layer_norm_with_bias_only_and_scale_only);
    tcase_add_test(tc, layer_norm_over_last_two_axes);
    tcase_add_test(tc, layer_norm_epsilon_attribute);
    tcase_add_test(tc, layer_norm_keeps_precision_for_large_offset);
    tcase_add_test(tc, layer_norm_f16_and_bf16);
    tcase_add_test(tc, rms_norm_with_and_without_scale);
    tcase_add_test(tc, rms_norm_epsilon_axis_and_half_types);
    tcase_add_test(tc, norms_large_rows_across_threads);
    tcase_add_test(tc, layer_norm_rejects_integers);
    suite_add_tcase(s, tc);
    return s;
}
