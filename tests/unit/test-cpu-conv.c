/*
 * test-cpu-conv.c - the CPU conv2d and pooling kernels, checked against naive loops computed
 * in the test.
 */
#include "tests/unit/test-util.h"

START_TEST(max_pool_2x2_f32) {
    int64_t dx[4] = {1, 1, 2, 2};
    double vx[4] = {1, 4, 3, 2};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 4, dx, vx)};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("max_pool2d", "kernel_shape=I:2,2", in, 1, out, 1, &err), 0);
    int64_t dy[4] = {1, 1, 1, 1};
    double want[1] = {4};
    tu_assert_shape(out[0], RTX_F32, 4, dy);
    tu_assert_close(out[0], want, 0, 0);
    rtx_tensor_unref(out[0]);
    rtx_tensor_unref(in[0]);
}
END_TEST

Suite *rtx_cpu_conv_suite(void) {
    Suite *s = suite_create("cpu_conv");
    TCase *tc = tcase_create("conv");
    tcase_add_test(tc, max_pool_2x2_f32);
    suite_add_tcase(s, tc);
    return s;
}
