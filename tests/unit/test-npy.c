/*
 * test-npy.c - NumPy .npy reading and writing (runtime/npy.c): round trips of every dtype,
 * hand-made files of every format version, Fortran order, rank 0, and the errors of
 * truncated, garbage and unsupported files.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tests/unit/test-util.h"

/* A fresh temporary file name (the file exists, empty). */
static void temp_path(char *buf, size_t len) {
    snprintf(buf, len, "/tmp/rtx-npy-test-XXXXXX");
    int fd = mkstemp(buf);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

/* An .npy image in memory: version major.0, the given header dict text (padded as NumPy
 * pads it) and data bytes. Returns the length; buf must hold it. */
static size_t make_npy(uint8_t *buf, int major, const char *dict, const void *data,
                       size_t data_len) {
    size_t pre = major == 1 ? 10 : 12;
    size_t n = strlen(dict);
    size_t hlen = n + 1;
    while ((pre + hlen) % 64)
        hlen++;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (uint8_t)(hlen & 0xff);
        buf[9] = (uint8_t)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++)
            buf[8 + i] = (uint8_t)(hlen >> (8 * i));
    }
    memcpy(buf + pre, dict, n);
    memset(buf + pre + n, ' ', hlen - n - 1);
    buf[pre + hlen - 1] = '\n';
    if (data_len) memcpy(buf + pre + hlen, data, data_len);
    return pre + hlen + data_len;
}

/* Reads an image expecting failure with `code` and a message containing `needle`. */
static void expect_read_error(const uint8_t *buf, size_t len, int code, const char *needle) {
    struct rtx_err err = {0};
    struct rtx_tensor *t = NULL;
    int rc = rtx_npy_read(buf, len, &t, &err);
    ck_assert_msg(rc == code, "rc %d (%s), want %d; message: %s", rc, rtx_strerror(rc), code,
                  err.msg);
    ck_assert_ptr_null(t);
    if (needle) ck_assert_msg(strstr(err.msg, needle), "'%s' not in '%s'", needle, err.msg);
}

static struct rtx_tensor *read_ok(const uint8_t *buf, size_t len) {
    struct rtx_err err = {0};
    struct rtx_tensor *t = NULL;
    int rc = rtx_npy_read(buf, len, &t, &err);
    ck_assert_msg(rc == 0, "npy read: %s", err.msg);
    ck_assert(rtx_tensor_is_contiguous(t));
    return t;
}

START_TEST(npy_round_trip_f32) {
    struct rtx_err err = {0};
    int64_t dims[2] = {2, 3};
    double vals[6] = {1, -2, 3.5, 0, 1.0 / 512, -7};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, dims, vals);
    char path[64];
    temp_path(path, sizeof path);
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

/* Every dtype through a file and back; bf16 comes back as f32 with the same values. */
START_TEST(npy_round_trip_every_dtype) {
    static const double vals[6] = {0, 1, 5, 2, 1, 7};
    static const double fvals[6] = {-1.5, 0.25, 3, -0.0, 2048, 1.0 / 1024};
    static const double bvals[6] = {1, 0, 0, 1, 1, 0};
    int64_t dims[3] = {1, 2, 3};
    for (int dt = 0; dt < RTX_DTYPE_COUNT; dt++) {
        const double *v = rtx_dtype_is_float(dt) ? fvals : dt == RTX_BOOL ? bvals : vals;
        struct rtx_tensor *t = tu_tensor(dt, 3, dims, v);
        char path[64];
        temp_path(path, sizeof path);
        struct rtx_err err = {0};
        ck_assert_msg(rtx_npy_save(path, t, &err) == 0, "%s: %s", rtx_dtype_name(dt), err.msg);
        struct rtx_tensor *u = NULL;
        ck_assert_msg(rtx_npy_load(path, &u, &err) == 0, "%s: %s", rtx_dtype_name(dt), err.msg);
        tu_assert_shape(u, dt == RTX_BF16 ? RTX_F32 : dt, 3, dims);
        tu_assert_close(u, v, 0, 0);
        unlink(path);
        rtx_tensor_unref(t);
        rtx_tensor_unref(u);
    }
}
END_TEST

/* The saved header is version 1.0, NumPy's dict, padded to 64 bytes, ending in '\n'. */
START_TEST(npy_save_writes_numpy_header) {
    int64_t dims[1] = {5};
    struct rtx_tensor *t = tu_tensor(RTX_I64, 1, dims, NULL);
    char path[64];
    temp_path(path, sizeof path);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_npy_save(path, t, &err) == 0, "%s", err.msg);
    uint8_t buf[256];
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert_mem_eq(buf, "\x93NUMPY\x01\x00", 8);
    size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    ck_assert_uint_eq((10 + hlen) % 64, 0);
    ck_assert_uint_eq(n, 10 + hlen + 5 * 8);
    ck_assert_int_eq(buf[10 + hlen - 1], '\n');
    const char *want = "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }";
    ck_assert_mem_eq(buf + 10, want, strlen(want));
    for (size_t i = 10 + strlen(want); i < 10 + hlen - 1; i++)
        ck_assert_int_eq(buf[i], ' ');
    unlink(path);
    rtx_tensor_unref(t);
}
END_TEST

START_TEST(npy_reads_versions_2_and_3) {
    float data[4] = {1, 2, 3, 4};
    for (int major = 1; major <= 3; major++) {
        uint8_t buf[256];
        size_t len = make_npy(buf, major,
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (2, 2), }",
                              data, sizeof data);
        ck_assert_uint_eq((len - sizeof data) % 64, 0);
        struct rtx_tensor *t = read_ok(buf, len);
        int64_t dims[2] = {2, 2};
        tu_assert_shape(t, RTX_F32, 2, dims);
        tu_assert_close(t, (const double[]){1, 2, 3, 4}, 0, 0);
        rtx_tensor_unref(t);
    }
    uint8_t buf[256];
    size_t len =
        make_npy(buf, 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data, 4);
    expect_read_error(buf, len, RTX_EUNSUPPORTED, "version 4.0");
}
END_TEST

START_TEST(npy_fortran_order_is_transposed) {
    /* a = [[0, 1, 2], [3, 4, 5]] stored column-major. */
    int32_t col[6] = {0, 3, 1, 4, 2, 5};
    uint8_t buf[256];
    size_t len = make_npy(buf, 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                          col, sizeof col);
    struct rtx_tensor *t = read_ok(buf, len);
    tu_assert_shape(t, RTX_I32, 2, (const int64_t[]){2, 3});
    tu_assert_close(t, (const double[]){0, 1, 2, 3, 4, 5}, 0, 0);
    rtx_tensor_unref(t);

    /* 3-D: element (i, j, k) of shape (2, 3, 4) holds 100i + 10j + k; Fortran offset
     * i + 2j + 6k. */
    uint8_t f3[24];
    double want[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                f3[i + 2 * j + 6 * k] = (uint8_t)(100 * i + 10 * j + k);
                want[i * 12 + j * 4 + k] = 100 * i + 10 * j + k;
            }
    len = make_npy(buf, 1, "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4), }", f3,
                   sizeof f3);
    t = read_ok(buf, len);
    tu_assert_shape(t, RTX_U8, 3, (const int64_t[]){2, 3, 4});
    tu_assert_close(t, want, 0, 0);
    rtx_tensor_unref(t);

    /* The same through a file (load reads the data in one piece and transposes after). */
    char path[64];
    temp_path(path, sizeof path);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_npy_load(path, &t, &err) == 0, "%s", err.msg);
    tu_assert_close(t, want, 0, 0);
    rtx_tensor_unref(t);
    unlink(path);
}
END_TEST

START_TEST(npy_rank0_and_empty) {
    float x = 2.5f;
    uint8_t buf[256];
    size_t len =
        make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &x, 4);
    struct rtx_tensor *t = read_ok(buf, len);
    ck_assert_int_eq(t->ndim, 0);
    tu_assert_close(t, (const double[]){2.5}, 0, 0);

    /* rank 0 written and read back */
    char path[64];
    temp_path(path, sizeof path);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_npy_save(path, t, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(t);
    ck_assert_msg(rtx_npy_load(path, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t->ndim, 0);
    tu_assert_close(t, (const double[]){2.5}, 0, 0);
    rtx_tensor_unref(t);

    /* zero elements */
    len = make_npy(buf, 1, "{'descr': '<i8', 'fortran_order': True, 'shape': (0, 3), }", NULL, 0);
    t = read_ok(buf, len);
    tu_assert_shape(t, RTX_I64, 2, (const int64_t[]){0, 3});
    ck_assert_msg(rtx_npy_save(path, t, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(t);
    ck_assert_msg(rtx_npy_load(path, &t, &err) == 0, "%s", err.msg);
    tu_assert_shape(t, RTX_I64, 2, (const int64_t[]){0, 3});
    rtx_tensor_unref(t);
    unlink(path);
}
END_TEST

/* Header syntax NumPy and older writers produce: double quotes, other key order, no
 * trailing comma, Python 2 longs, '=' and '|' byte orders, bools normalized to 0/1. */
START_TEST(npy_header_variants) {
    uint8_t data[6] = {0, 2, 1, 0, 255, 1};
    static const char *dicts[] = {
        "{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (6,)}",
        "{'shape': (2L, 3L), 'fortran_order': False, 'descr': '<b1'}",
        "{ 'descr' : '=b1' ,\n'fortran_order':False,'shape':( 3 , 2 , ) , }",
        "{'descr': 'b1', 'fortran_order': False, 'shape': (1, 6), }",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        uint8_t buf[256];
        size_t len = make_npy(buf, 1, dicts[i], data, sizeof data);
        struct rtx_tensor *t = read_ok(buf, len);
        ck_assert_int_eq(t->dtype, RTX_BOOL);
        tu_assert_close(t, (const double[]){0, 1, 1, 0, 1, 1}, 0, 0);
        const uint8_t *p = rtx_tensor_data(t);
        for (int k = 0; k < 6; k++)
            ck_assert_uint_le(p[k], 1);
        rtx_tensor_unref(t);
    }
    float f[2] = {1, 2};
    uint8_t buf[256];
    size_t len =
        make_npy(buf, 1, "{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }", f, sizeof f);
    struct rtx_tensor *t = read_ok(buf, len);
    ck_assert_int_eq(t->dtype, RTX_F32);
    rtx_tensor_unref(t);
}
END_TEST

START_TEST(npy_unsupported_dtypes) {
    double d[2] = {1, 2};
    uint8_t buf[256];
    size_t len =
        make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, sizeof d);
    expect_read_error(buf, len, RTX_EUNSUPPORTED, "float64");
    expect_read_error(buf, len, RTX_EUNSUPPORTED, "astype(np.float32)");
    expect_read_error(buf, len, RTX_EUNSUPPORTED, "'<f8'");

    static const struct {
        const char *descr;
        const char *needle;
    } cases[] = {
        {"<i2", "int16"}, {"<u4", "uint32"},     {"<c8", "complex64"},  {"|O", "'|O'"},
        {"<U3", "'<U3'"}, {">f4", "big-endian"}, {">i8", "big-endian"}, {"<M8[ns]", "M8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (1,), }",
                 cases[i].descr);
        len = make_npy(buf, 1, dict, d, 8);
        expect_read_error(buf, len, RTX_EUNSUPPORTED, cases[i].needle);
    }
    len =
        make_npy(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", d, 4);
    expect_read_error(buf, len, RTX_EUNSUPPORTED, "structured");
    /* '|' says "no byte order", which a 4-byte type cannot have */
    len = make_npy(buf, 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", d, 4);
    expect_read_error(buf, len, RTX_EFORMAT, "byte order");
}
END_TEST

START_TEST(npy_rejects_garbage_headers) {
    static const struct {
        const char *dict;
        const char *needle;
    } cases[] = {
        {"", "expected '{'"},
        {"hello", "expected '{'"},
        {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
        {"{'descr': '<f4', 'shape': (1,)}", "missing key 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (1,)}", "missing key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "unexpected key"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
         "duplicate key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': Flase, 'shape': (1,)}", "True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1)}", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", "non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "shape tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
         "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "after the dict"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", "expected ',' or '}'"},
        {"{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':'"},
        {"{'descr': '<f4", "too long"},
        {"{'descr': '<f4\\x', 'fortran_order': False, 'shape': (1,)}", "unexpected character"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'"},
        {"{'descr': 7, 'fortran_order': False, 'shape': (1,)}", "quoted string"},
        {"{descr: '<f4'}", "quoted string"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", "dimensions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[512];
        float x = 0;
        size_t len = make_npy(buf, 1, cases[i].dict, &x, sizeof x);
        struct rtx_err err = {0};
        struct rtx_tensor *t = NULL;
        int rc = rtx_npy_read(buf, len, &t, &err);
        ck_assert_msg(rc == RTX_EFORMAT || rc == RTX_EUNSUPPORTED, "case %zu: rc %d (%s)", i, rc,
                      err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].needle), "case %zu: '%s' not in '%s'", i,
                      cases[i].needle, err.msg);
    }
}
END_TEST

START_TEST(npy_rejects_truncated_and_bad_files) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    uint8_t buf[256];
    size_t len = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                          data, sizeof data);
    /* every truncation fails cleanly with EFORMAT */
    for (size_t n = 0; n < len; n++)
        expect_read_error(buf, n, RTX_EFORMAT, NULL);
    expect_read_error(buf, len - 1, RTX_EFORMAT, "truncated data");
    expect_read_error(buf, 40, RTX_EFORMAT, "truncated .npy header");
    expect_read_error(buf, 3, RTX_EFORMAT, "magic");
    /* data longer than the shape says */
    uint8_t big[300];
    memcpy(big, buf, len);
    big[len] = 0;
    expect_read_error(big, len + 1, RTX_EFORMAT, "24 bytes");
    /* bad magic */
    memcpy(big, buf, len);
    big[1] = 'X';
    expect_read_error(big, len, RTX_EFORMAT, "magic");
    /* header length beyond the file */
    memcpy(big, buf, len);
    big[8] = 0xff;
    big[9] = 0x7f;
    expect_read_error(big, len, RTX_EFORMAT, "truncated .npy header");
    /* a shape whose byte size overflows */
    len = make_npy(buf, 1,
                   "{'descr': '<f4', 'fortran_order': False, "
                   "'shape': (4294967296, 4294967296), }",
                   data, 4);
    expect_read_error(buf, len, RTX_EFORMAT, "too large");
    /* a huge header length in a 2.0 file */
    len = make_npy(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data, 4);
    buf[11] = 0x7f;
    expect_read_error(buf, len, RTX_EFORMAT, "length");
    expect_read_error(NULL, 0, RTX_EFORMAT, "magic");
    /* a header that ends inside a string (no padding) */
    static const char open_str[] = "{'descr': '<f4";
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(sizeof open_str - 1);
    buf[9] = 0;
    memcpy(buf + 10, open_str, sizeof open_str - 1);
    expect_read_error(buf, 10 + sizeof open_str - 1, RTX_EFORMAT, "unterminated");
}
END_TEST

START_TEST(npy_load_file_errors) {
    struct rtx_err err = {0};
    struct rtx_tensor *t = NULL;
    int rc = rtx_npy_load("/nonexistent/dir/x.npy", &t, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, "/nonexistent/dir/x.npy"), "%s", err.msg);

    char path[64];
    temp_path(path, sizeof path);
    float data[6] = {1, 2, 3, 4, 5, 6};
    uint8_t buf[256];
    size_t len = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                          data, sizeof data);
    for (size_t cut = 0; cut <= len + 1; cut++) {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        size_t n = cut <= len ? cut : len;
        ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
        if (cut > len) fputc(0, f);
        fclose(f);
        rc = rtx_npy_load(path, &t, &err);
        if (cut == len) {
            ck_assert_msg(rc == 0, "%s", err.msg);
            rtx_tensor_unref(t);
            continue;
        }
        ck_assert_msg(rc == RTX_EFORMAT, "cut %zu: %d %s", cut, rc, err.msg);
        ck_assert_msg(strstr(err.msg, path), "%s", err.msg);
    }
    /* an empty file */
    FILE *f = fopen(path, "wb");
    fclose(f);
    rc = rtx_npy_load(path, &t, &err);
    ck_assert_int_eq(rc, RTX_EFORMAT);
    unlink(path);
    /* saving into a missing directory names the path */
    int64_t dims[1] = {1};
    struct rtx_tensor *u = tu_tensor(RTX_F32, 1, dims, NULL);
    rc = rtx_npy_save("/nonexistent/dir/y.npy", u, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err.msg, "/nonexistent/dir/y.npy"), "%s", err.msg);
    rtx_tensor_unref(u);
}
END_TEST

/* A non-contiguous view is written in logical (C) order. */
START_TEST(npy_save_non_contiguous) {
    int64_t dims[2] = {2, 3};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, dims, (const double[]){0, 1, 2, 3, 4, 5});
    struct rtx_tensor *tt = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_tensor_permute(t, (const int[]){1, 0}, &tt, &err), 0);
    char path[64];
    temp_path(path, sizeof path);
    ck_assert_msg(rtx_npy_save(path, tt, &err) == 0, "%s", err.msg);
    struct rtx_tensor *u = NULL;
    ck_assert_msg(rtx_npy_load(path, &u, &err) == 0, "%s", err.msg);
    tu_assert_shape(u, RTX_F32, 2, (const int64_t[]){3, 2});
    tu_assert_close(u, (const double[]){0, 3, 1, 4, 2, 5}, 0, 0);
    unlink(path);
    rtx_tensor_unref(t);
    rtx_tensor_unref(tt);
    rtx_tensor_unref(u);
}
END_TEST

/* Every allocation failure gives RTX_ENOMEM and leaks nothing (checked under ASan). */
START_TEST(npy_out_of_memory) {
    int32_t col[6] = {0, 3, 1, 4, 2, 5};
    uint8_t buf[256];
    size_t len = make_npy(buf, 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                          col, sizeof col);
    char path[64];
    temp_path(path, sizeof path);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    for (int which = 0; which < 3; which++) {
        int rc = -1;
        struct rtx_tensor *t = NULL;
        int64_t dims[2] = {2, 2};
        struct rtx_tensor *bf = which == 2 ? tu_tensor(RTX_BF16, 2, dims, NULL) : NULL;
        for (long n = 1; n < 100 && rc != 0; n++) {
            struct rtx_err err = {0};
            rtx_alloc_fail_after(n);
            if (which == 0)
                rc = rtx_npy_read(buf, len, &t, &err);
            else if (which == 1)
                rc = rtx_npy_load(path, &t, &err);
            else
                rc = rtx_npy_save(path, bf, &err);
            rtx_alloc_fail_after(0);
            if (rc != 0) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
        }
        ck_assert_int_eq(rc, 0);
        rtx_tensor_unref(t);
        rtx_tensor_unref(bf);
    }
    unlink(path);
}
END_TEST

/* Random byte flips of a valid file: the reader never crashes and never leaks. */
START_TEST(npy_mutations_fail_cleanly) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    uint8_t orig[256], buf[256];
    size_t len = make_npy(orig, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                          data, sizeof data);
    uint64_t s = 88172645463325252ull;
    for (int iter = 0; iter < 5000; iter++) {
        memcpy(buf, orig, len);
        for (int k = 0; k < 3; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[(s >> 8) % 96] = (uint8_t)s;
        }
        struct rtx_tensor *t = NULL;
        struct rtx_err err = {0};
        int rc = rtx_npy_read(buf, len, &t, &err);
        ck_assert(rc == 0 || rc == RTX_EFORMAT || rc == RTX_EUNSUPPORTED);
        ck_assert((rc == 0) == (t != NULL));
        rtx_tensor_unref(t);
    }
}
END_TEST

Suite *rtx_npy_suite(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, npy_round_trip_f32);
    tcase_add_test(tc, npy_round_trip_every_dtype);
    tcase_add_test(tc, npy_save_writes_numpy_header);
    tcase_add_test(tc, npy_reads_versions_2_and_3);
    tcase_add_test(tc, npy_fortran_order_is_transposed);
    tcase_add_test(tc, npy_rank0_and_empty);
    tcase_add_test(tc, npy_header_variants);
    tcase_add_test(tc, npy_unsupported_dtypes);
    tcase_add_test(tc, npy_rejects_garbage_headers);
    tcase_add_test(tc, npy_rejects_truncated_and_bad_files);
    tcase_add_test(tc, npy_load_file_errors);
    tcase_add_test(tc, npy_save_non_contiguous);
    tcase_add_test(tc, npy_out_of_memory);
    tcase_add_test(tc, npy_mutations_fail_cleanly);
    suite_add_tcase(s, tc);
    return s;
}
