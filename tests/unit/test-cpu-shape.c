/*
 * test-cpu-shape.c - the CPU shape kernels (transpose, reshape, expand, concat, slice, gather,
 * constant) on several dtypes.
 */
#include "tests/unit/test-util.h"

START_TEST(transpose_2d_f32) {
    int64_t dx[2] = {2, 3};
    double vx[6] = {1, 2, 3, 4, 5, 6};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 2, dx, vx)};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("transpose", "", in, 1, out, 1, &err), 0);
    int64_t dy[2] = {3, 2};
    double want[6] = {1, 4, 2, 5, 3, 6};
    tu_assert_shape(out[0], RTX_F32, 2, dy);
    tu_assert_close(out[0], want, 0, 0);
    rtx_tensor_unref(out[0]);
    rtx_tensor_unref(in[0]);
}
END_TEST

Suite *rtx_cpu_shape_suite(void) {
    Suite *s = suite_create("cpu_shape");
    TCase *tc = tcase_create("shape");
    tcase_add_test(tc, transpose_2d_f32);
    suite_add_tcase(s, tc);
    return s;
}
