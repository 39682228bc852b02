/*
 * test-error.c - error codes, messages and the allocation failure hook.
 */
#include <errno.h>
#include <string.h>

#include "tests/unit/test-util.h"

START_TEST(strerror_names_every_code) {
    ck_assert_str_eq(rtx_strerror(RTX_OK), "success");
    ck_assert_str_eq(rtx_strerror(RTX_ENOMEM), "out of memory");
    ck_assert_str_eq(rtx_strerror(RTX_EGRAPH), "invalid graph");
    ck_assert_str_eq(rtx_strerror(-ENOENT), strerror(ENOENT));
    ck_assert_str_eq(rtx_strerror(12345), "unknown error");
    for (int c = RTX__ERRNO_FIRST + 1; c < RTX__ERRNO_END; c++)
        ck_assert_str_ne(rtx_strerror(c), "unknown error");
}
END_TEST

START_TEST(err_set_formats_and_prefix_keeps_code) {
    struct rtx_err err;
    ck_assert_int_eq(rtx_err_set(&err, RTX_EINVAL, "bad %d", 7), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "bad 7");
    ck_assert_int_eq(rtx_err_prefix(&err, "node %d", 3), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "node 3: bad 7");
    ck_assert_int_eq(rtx_err_set(NULL, RTX_EIO, "ignored"), RTX_EIO);
}
END_TEST

START_TEST(err_messages_truncate_safely) {
    struct rtx_err err;
    char big[sizeof err.msg + 600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    rtx_err_set(&err, RTX_EINVAL, "%s", big);
    ck_assert_uint_eq(strlen(err.msg), sizeof err.msg - 1);
    rtx_err_prefix(&err, "%s", big);
    ck_assert_uint_lt(strlen(err.msg), sizeof err.msg);
}
END_TEST

START_TEST(retry_hint_is_read_from_overload_messages) {
    const char *m = "overloaded on cpu (shed): lane batch; retry after 250 ms";
    ck_assert_int_eq(rtx_err_retry_after_ms(m, strlen(m)), 250);
    const char *z = "retry after 0 ms";
    ck_assert_int_eq(rtx_err_retry_after_ms(z, strlen(z)), 0);
    /* a length that cuts the number short reads only what is inside it */
    ck_assert_int_eq(rtx_err_retry_after_ms(m, strlen(m) - 4), 25);
    const char *none[] = {"no hint here", "retry after soon", "retry after -5 ms", "retry after ",
                          "retry after 99999999999999999999 ms"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        ck_assert_int_eq(rtx_err_retry_after_ms(none[i], strlen(none[i])), -1);
    ck_assert_int_eq(rtx_err_retry_after_ms(NULL, 0), -1);
    ck_assert_int_eq(rtx_err_retry_after_ms(m, 0), -1);
}
END_TEST

START_TEST(alloc_fail_after_fails_nth_and_later) {
    rtx_alloc_fail_after(3);
    void *a = rtx_malloc(8), *b = rtx_malloc(8), *c = rtx_malloc(8), *d = rtx_calloc(1, 8);
    rtx_alloc_fail_after(0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(c);
    ck_assert_ptr_null(d);
    void *e = rtx_malloc(8);
    ck_assert_ptr_nonnull(e);
    rtx_free(a);
    rtx_free(b);
    rtx_free(e);
}
END_TEST

Suite *rtx_error_suite(void) {
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, strerror_names_every_code);
    tcase_add_test(tc, err_set_formats_and_prefix_keeps_code);
    tcase_add_test(tc, err_messages_truncate_safely);
    tcase_add_test(tc, alloc_fail_after_fails_nth_and_later);
    tcase_add_test(tc, retry_hint_is_read_from_overload_messages);
    suite_add_tcase(s, tc);
    return s;
}
