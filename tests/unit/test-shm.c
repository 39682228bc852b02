/*
 * test-shm.c - the shared-memory registry (daemon/shm.c): registration with its error classes,
 * status listing, bounds-checked mapping, data visible both ways, mappings that outlive an
 * unregister while a request holds them, and an out-of-memory loop.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/shm.h"

static char key_a[64], key_b[64];

/* Creates POSIX shared-memory object `key` of `size` bytes filled with byte i % 251. */
static void make_object(const char *key, size_t size) {
    shm_unlink(key);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    for (size_t i = 0; i < size; i++)
        p[i] = (unsigned char)(i % 251);
    munmap(p, size);
    close(fd);
}

static void setup(void) {
    snprintf(key_a, sizeof key_a, "/rtx-test-shm-a-%d", (int)getpid());
    snprintf(key_b, sizeof key_b, "/rtx-test-shm-b-%d", (int)getpid());
    make_object(key_a, 3 * 4096);
    make_object(key_b, 100);
}

static void teardown(void) {
    shm_unlink(key_a);
    shm_unlink(key_b);
    rtx_alloc_fail_after(0);
}

static struct rtx_shm *registry(void) {
    struct rtx_shm *r = NULL;
    struct rtx_err err;
    ck_assert_int_eq(rtx_shm_new(&r, &err), 0);
    return r;
}

START_TEST(shm_register_list_and_unregister) {
    struct rtx_shm *r = registry();
    struct rtx_err err;
    ck_assert_int_eq(rtx_shm_register(r, "zeta", key_b, 0, 100, &err), 0);
    ck_assert_int_eq(rtx_shm_register(r, "alpha", key_a, 4096, 8192, &err), 0);
    struct rtx_shm_status *st = NULL;
    int n = -1;
    ck_assert_int_eq(rtx_shm_list(r, NULL, &st, &n, &err), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(st[0].name, "alpha"); /* sorted by name */
    ck_assert_str_eq(st[0].key, key_a);
    ck_assert_uint_eq(st[0].offset, 4096);
    ck_assert_uint_eq(st[0].byte_size, 8192);
    ck_assert_str_eq(st[1].name, "zeta");
    rtx_free(st);

    ck_assert_int_eq(rtx_shm_list(r, "zeta", &st, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(st[0].byte_size, 100);
    rtx_free(st);

    ck_assert_int_eq(rtx_shm_unregister(r, "zeta", &err), 0);
    ck_assert_int_eq(rtx_shm_list(r, "zeta", &st, &n, &err), RTX_ENOTFOUND);
    ck_assert_ptr_null(st);
    ck_assert_ptr_nonnull(strstr(err.msg, "zeta"));
    ck_assert_int_eq(rtx_shm_unregister(r, "zeta", &err), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_shm_unregister(r, NULL, &err), 0); /* all */
    ck_assert_int_eq(rtx_shm_list(r, "", &st, &n, &err), 0);
    ck_assert_int_eq(n, 0);
    rtx_free(st);
    rtx_shm_free(r);
}
END_TEST

START_TEST(shm_register_rejects_bad_arguments) {
    struct rtx_shm *r = registry();
    struct rtx_err err;
    ck_assert_int_eq(rtx_shm_register(r, "", key_a, 0, 10, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "name is empty"));
    ck_assert_int_eq(rtx_shm_register(r, "a", "", 0, 10, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "key is empty"));
    ck_assert_int_eq(rtx_shm_register(r, "a", key_a, 0, 0, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte_size is 0"));
    char long_name[300];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert_int_eq(rtx_shm_register(r, long_name, key_a, 0, 10, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_shm_register(r, "a", "/rtx-test-no-such-key", 0, 10, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot be opened"));
    ck_assert_ptr_nonnull(strstr(err.msg, "'a'"));
    /* past the end of the object, also by overflow */
    ck_assert_int_eq(rtx_shm_register(r, "a", key_b, 50, 51, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "past its end"));
    ck_assert_int_eq(rtx_shm_register(r, "a", key_b, UINT64_MAX, 2, &err), RTX_EIO);
    ck_assert_int_eq(rtx_shm_register(r, "a", key_b, 50, 50, &err), 0);
    ck_assert_int_eq(rtx_shm_register(r, "a", key_a, 0, 10, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "already registered"));
    rtx_shm_free(r);
}
END_TEST

START_TEST(shm_map_is_bounds_checked_and_shares_data) {
    struct rtx_shm *r = registry();
    struct rtx_err err;
    /* an offset inside a page: the mapping starts at the page boundary below it */
    ck_assert_int_eq(rtx_shm_register(r, "in", key_a, 4100, 1000, &err), 0);
    void *addr = NULL;
    struct rtx_shm_ref *ref = NULL;
    ck_assert_int_eq(rtx_shm_map(r, "in", 10, 990, &addr, &ref, &err), 0);
    ck_assert_int_eq(((unsigned char *)addr)[0], (4100 + 10) % 251);
    ck_assert_int_eq(((unsigned char *)addr)[989], (4100 + 999) % 251);
    ((unsigned char *)addr)[0] = 7; /* visible to the client */
    rtx_shm_ref_release(ref);

    int fd = shm_open(key_a, O_RDONLY, 0);
    ck_assert_int_ge(fd, 0);
    unsigned char b = 0;
    ck_assert_int_eq(pread(fd, &b, 1, 4110), 1);
    close(fd);
    ck_assert_int_eq(b, 7);

    ck_assert_int_eq(rtx_shm_map(r, "in", 10, 991, &addr, &ref, &err), RTX_EINVAL);
    ck_assert_ptr_null(ref);
    ck_assert_ptr_nonnull(strstr(err.msg, "holds 1000 bytes"));
    ck_assert_int_eq(rtx_shm_map(r, "in", 1001, 0, &addr, &ref, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_shm_map(r, "in", UINT64_MAX, 2, &addr, &ref, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_shm_map(r, "out", 0, 1, &addr, &ref, &err), RTX_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "'out'"));
    rtx_shm_free(r);
}
END_TEST

START_TEST(shm_mapping_outlives_unregister_while_held) {
    struct rtx_shm *r = registry();
    struct rtx_err err;
    ck_assert_int_eq(rtx_shm_register(r, "held", key_b, 0, 100, &err), 0);
    void *addr = NULL;
    struct rtx_shm_ref *ref = NULL;
    ck_assert_int_eq(rtx_shm_map(r, "held", 0, 100, &addr, &ref, &err), 0);
    ck_assert_int_eq(rtx_shm_unregister(r, "held", &err), 0);
    void *addr2 = NULL;
    struct rtx_shm_ref *ref2 = NULL;
    ck_assert_int_eq(rtx_shm_map(r, "held", 0, 1, &addr2, &ref2, &err), RTX_ENOTFOUND);
    /* the held reference still reads (an unmapped access would crash) */
    ck_assert_int_eq(((unsigned char *)addr)[5], 5);
    rtx_shm_ref_release(ref);
    /* and the registry can go first, too */
    ck_assert_int_eq(rtx_shm_register(r, "held", key_b, 0, 100, &err), 0);
    ck_assert_int_eq(rtx_shm_map(r, "held", 99, 1, &addr, &ref, &err), 0);
    rtx_shm_free(r);
    ck_assert_int_eq(((unsigned char *)addr)[0], 99);
    rtx_shm_ref_release(ref);
    rtx_shm_ref_release(NULL);
    rtx_shm_free(NULL);
}
END_TEST

START_TEST(shm_oom_loop) {
    for (long n = 1; n < 100; n++) {
        struct rtx_shm *r = NULL;
        struct rtx_err err;
        rtx_alloc_fail_after(n);
        int rc = rtx_shm_new(&r, &err);
        if (rc == 0) rc = rtx_shm_register(r, "a", key_a, 0, 64, &err);
        struct rtx_shm_status *st = NULL;
        int cnt = 0;
        if (rc == 0) rc = rtx_shm_list(r, NULL, &st, &cnt, &err);
        rtx_alloc_fail_after(0);
        rtx_free(st);
        rtx_shm_free(r);
        if (rc == 0) return;
        ck_assert_int_eq(rc, RTX_ENOMEM);
    }
    ck_abort_msg("the registry never succeeded");
}
END_TEST

Suite *rtx_shm_suite(void) {
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("registry");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, shm_register_list_and_unregister);
    tcase_add_test(tc, shm_register_rejects_bad_arguments);
    tcase_add_test(tc, shm_map_is_bounds_checked_and_shares_data);
    tcase_add_test(tc, shm_mapping_outlives_unregister_while_held);
    tcase_add_test(tc, shm_oom_loop);
    suite_add_tcase(s, tc);
    return s;
}
