/*
 * test-npy.c - NumPy .npy reading and writing (runtime/npy.c).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tests/unit/test-util.h"

START_TEST(npy_round_trip_f32) {
    struct rtx_err err = {0};
    int64_t dims[2] = {2, 3};
    double vals[6] = {1, -2, 3.5, 0, 1e-3, -7};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, dims, vals);
    char path[] = "/tmp/rtx-npy-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(rtx_npy_save(path, t, &err) == 0, "%s", err.msg);
    struct rtx_tensor *u = NULL;
    ck_assert_msg(rtx_npy_load(path, &u, &err) == 0, "%s", err.msg);
    tu_assert_shape(u, RTX_F32, 2, dims);
    tu_assert_close(u, vals, 0, 0);
    unlink(path);
    rtx_tensor_unref(t);
    rtx_tensor_unref(u);
}
END_TEST

Suite *rtx_npy_suite(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, npy_round_trip_f32);
    suite_add_tcase(s, tc);
    return s;
}
