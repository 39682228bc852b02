/*
 * test-cpu-reduce.c - the CPU reference kernels of the reductions and normalizations
 * (reduce_*, argmax, softmax, log_softmax, layer_norm, rms_norm) against hand-computed values.
 */
#include <check.h>

#include "tests/unit/test-util.h"

START_TEST(reduce_sum_last_axis_f32) {
    int64_t d[] = {2, 3};
    struct rtx_tensor *in = tu_tensor(RTX_F32, 2, d, (double[]){1, 2, 3, 4, 5, 6});
    struct rtx_tensor *out = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("reduce_sum", "axes=I:-1", &in, 1, &out, 1, &err), 0);
    tu_assert_shape(out, RTX_F32, 1, (int64_t[]){2});
    tu_assert_close(out, (double[]){6, 15}, 0, 0);
    rtx_tensor_unref(out);
    rtx_tensor_unref(in);
}
END_TEST

Suite *rtx_cpu_reduce_suite(void) {
    Suite *s = suite_create("cpu_reduce");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reduce_sum_last_axis_f32);
    suite_add_tcase(s, tc);
    return s;
}
