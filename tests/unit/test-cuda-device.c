/*
 * test-cuda-device.c - CUDA device discovery where CI runs it: without a GPU. No device is a
 * reason, not an error (empty list, the reason in words); calls about a device that is not
 * there give RTX_EGPU with a message naming the CUDA call, its function, file and line; NULL
 * arguments give RTX_EINVAL; creating the CUDA backend gives RTX_EGPU saying why. The runner
 * hides every GPU (CUDA_VISIBLE_DEVICES="", tests/unit/main.c), so these checks run, and mean
 * the same, on a host with a GPU too; the GPU machine's program (tests/gpu/gpu-tests.c) covers
 * the devices themselves.
 */
#include <string.h>

#include "kernels/cuda/backend-cuda.h"
#include "tests/unit/test-util.h"

START_TEST(no_gpu_count_is_zero_with_a_reason) {
    char why[256] = "unset";
    bool fault = true;
    ck_assert_int_eq(rtx_cuda_device_count(why, sizeof why, &fault), 0);
    ck_assert_str_ne(why, "unset");
    ck_assert_int_gt((int)strlen(why), 0);
    if (!fault) ck_assert(strstr(why, "driver") != NULL);
    /* a short buffer is truncated, never overrun */
    char small[8];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(rtx_cuda_device_count(small, sizeof small, NULL), 0);
    ck_assert_int_eq(small[7], '\0');
}
END_TEST

START_TEST(no_gpu_list_is_empty_and_says_why) {
    struct rtx_cuda_devices l;
    memset(&l, 0x5a, sizeof l);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_cuda_devices_init(&l, true, &err), 0);
    ck_assert_int_eq(l.n, 0);
    ck_assert_ptr_null(l.devs);
    ck_assert_int_gt((int)strlen(l.absent), 0);
    rtx_cuda_devices_close(&l);
    ck_assert_int_eq(l.n, 0);
    rtx_cuda_devices_close(NULL);
}
END_TEST

START_TEST(no_gpu_query_gives_egpu_naming_the_call) {
    struct rtx_cuda_device d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_cuda_device_query(0, &d, &err), RTX_EGPU);
    ck_assert_int_eq(err.code, RTX_EGPU);
    ck_assert_msg(strstr(err.msg, "cudaGetDeviceProperties") &&
                      strstr(err.msg, "rtx_cuda_device_query") &&
                      strstr(err.msg, "kernels/cuda/device.c:"),
                  "message: %s", err.msg);
    ck_assert(!d.healthy);
    ck_assert_int_eq(rtx_cuda_device_query(0, &d, NULL), RTX_EGPU);
}
END_TEST

START_TEST(no_gpu_selftest_gives_egpu_and_process_goes_on) {
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_cuda_device_selftest(0, &err), RTX_EGPU);
    ck_assert_msg(strstr(err.msg, "cudaSetDevice") && strstr(err.msg, "selftest"), "message: %s",
                  err.msg);
    /* the failure is not sticky for what follows */
    ck_assert_int_eq(rtx_cuda_device_count(NULL, 0, NULL), 0);
    ck_assert_int_eq(rtx_cuda_device_selftest(-1, NULL), RTX_EGPU);
}
END_TEST

START_TEST(no_gpu_backend_new_gives_egpu_with_the_reason) {
    struct rtx_backend *be = (struct rtx_backend *)&be; /* must be reset to NULL */
    struct rtx_err err = {0};
    struct rtx_cuda_options opt = {.device = 0};
    ck_assert_int_eq(rtx_backend_cuda_new(&opt, &be, &err), RTX_EGPU);
    ck_assert_ptr_null(be);
    ck_assert_int_eq(err.code, RTX_EGPU);
    ck_assert_msg(strstr(err.msg, "cuda:0") && strstr(err.msg, "no CUDA device"), "message: %s",
                  err.msg);
    /* NULL options mean device 0; a NULL err is allowed */
    ck_assert_int_eq(rtx_backend_cuda_new(NULL, &be, NULL), RTX_EGPU);
    ck_assert_ptr_null(be);
    opt.device = 3;
    ck_assert_int_eq(rtx_backend_cuda_new(&opt, &be, &err), RTX_EGPU);
    ck_assert_msg(strstr(err.msg, "cuda:3"), "message: %s", err.msg);
    ck_assert_int_eq(rtx_backend_cuda_new(&opt, NULL, &err), RTX_EINVAL);
}
END_TEST

START_TEST(null_arguments_are_einval) {
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_cuda_devices_init(NULL, false, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_cuda_device_query(0, NULL, &err), RTX_EINVAL);
    ck_assert(strstr(err.msg, "NULL") != NULL);
}
END_TEST

Suite *rtx_cuda_device_suite(void) {
    Suite *s = suite_create("cuda_device");
    TCase *tc = tcase_create("discovery");
    tcase_add_test(tc, no_gpu_count_is_zero_with_a_reason);
    tcase_add_test(tc, no_gpu_list_is_empty_and_says_why);
    tcase_add_test(tc, no_gpu_query_gives_egpu_naming_the_call);
    tcase_add_test(tc, no_gpu_selftest_gives_egpu_and_process_goes_on);
    tcase_add_test(tc, no_gpu_backend_new_gives_egpu_with_the_reason);
    tcase_add_test(tc, null_arguments_are_einval);
    suite_add_tcase(s, tc);
    return s;
}
