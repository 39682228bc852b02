/*
 * test-cpu-elementwise.c - the CPU reference kernels of the elementwise ops (arithmetic,
 * unary math, cast, where, comparisons), run as one-node graphs through the planner and
 * executor, against hand-computed values.
 */
#include <check.h>

#include "tests/unit/test-util.h"

START_TEST(add_same_shape_f32) {
    int64_t d[] = {3};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_F32, 1, d, (double[]){1, 2, 3}),
                                tu_tensor(RTX_F32, 1, d, (double[]){10, 20, 30})};
    struct rtx_tensor *out = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("add", "", in, 2, &out, 1, &err), 0);
    tu_assert_shape(out, RTX_F32, 1, d);
    tu_assert_close(out, (double[]){11, 22, 33}, 0, 0);
    rtx_tensor_unref(out);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
}
END_TEST

Suite *rtx_cpu_elementwise_suite(void) {
    Suite *s = suite_create("cpu_elementwise");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, add_same_shape_f32);
    suite_add_tcase(s, tc);
    return s;
}
