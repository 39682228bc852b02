/*
 * test-tensor.c - tensors: creation, reference counts, views, permutes, contiguous copies,
 * dtype table and half/bfloat16 conversions.
 */
#include <math.h>
#include <string.h>

#include "tests/unit/test-util.h"

START_TEST(tensor_new_is_zeroed_and_contiguous) {
    int64_t dims[] = {2, 3, 4};
    struct rtx_tensor *t;
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 3, dims, &t, NULL), 0);
    ck_assert_int_eq(rtx_tensor_numel(t), 24);
    ck_assert_uint_eq(rtx_tensor_nbytes(t), 96);
    ck_assert(rtx_tensor_is_contiguous(t));
    ck_assert_int_eq(t->strides[0], 12);
    ck_assert_int_eq(t->strides[2], 1);
    for (int i = 0; i < 24; i++) ck_assert(rtx_tensor_get(t, i) == 0.0);
    ck_assert_uint_eq((uintptr_t)rtx_tensor_data(t) % 64, 0);
    rtx_tensor_unref(t);
}
END_TEST

START_TEST(tensor_new_rejects_bad_shapes) {
    struct rtx_tensor *t;
    struct rtx_err err;
    int64_t neg[] = {2, -1};
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 2, neg, &t, &err), RTX_EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "negative"));
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 9, nine, &t, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_tensor_new((enum rtx_dtype)99, 1, nine, &t, &err), RTX_EINVAL);
    int64_t huge[] = {INT64_C(1) << 40, INT64_C(1) << 40};
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 2, huge, &t, &err), RTX_ELIMIT);
}
END_TEST

START_TEST(tensor_scalar_and_empty) {
    struct rtx_tensor *s, *e;
    ck_assert_int_eq(rtx_tensor_new(RTX_I64, 0, NULL, &s, NULL), 0);
    ck_assert_int_eq(rtx_tensor_numel(s), 1);
    rtx_tensor_set(s, 0, 42);
    ck_assert(rtx_tensor_get(s, 0) == 42);
    int64_t d[] = {3, 0};
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 2, d, &e, NULL), 0);
    ck_assert_int_eq(rtx_tensor_numel(e), 0);
    rtx_tensor_unref(s);
    rtx_tensor_unref(e);
}
END_TEST

static int released;
static void count_release(void *ctx, void *data) {
    (void)data;
    released += *(int *)ctx;
}

START_TEST(wrapped_memory_released_by_last_view) {
    static float data[6] = {0, 1, 2, 3, 4, 5};
    int one = 1;
    released = 0;
    int64_t dims[] = {2, 3};
    struct rtx_tensor *t, *v;
    ck_assert_int_eq(rtx_tensor_wrap(RTX_F32, 2, dims, data, sizeof data, count_release, &one,
                                     &t, NULL), 0);
    int perm[] = {1, 0};
    ck_assert_int_eq(rtx_tensor_permute(t, perm, &v, NULL), 0);
    rtx_tensor_unref(t);
    ck_assert_int_eq(released, 0);
    ck_assert(!rtx_tensor_is_contiguous(v));
    ck_assert(rtx_tensor_get(v, 1) == 3.0); /* v[0][1] = t[1][0] */
    rtx_tensor_unref(v);
    ck_assert_int_eq(released, 1);
}
END_TEST

START_TEST(wrap_rejects_short_buffer) {
    float data[3];
    int64_t dims[] = {4};
    struct rtx_tensor *t;
    struct rtx_err err;
    ck_assert_int_eq(rtx_tensor_wrap(RTX_F32, 1, dims, data, sizeof data, NULL, NULL, &t, &err),
                     RTX_EINVAL);
}
END_TEST

START_TEST(contiguous_copies_permuted_view) {
    int64_t dims[] = {2, 3, 4};
    double vals[24];
    for (int i = 0; i < 24; i++) vals[i] = i;
    struct rtx_tensor *t = tu_tensor(RTX_I32, 3, dims, vals), *v, *c;
    int perm[] = {2, 0, 1};
    ck_assert_int_eq(rtx_tensor_permute(t, perm, &v, NULL), 0);
    ck_assert_int_eq(rtx_tensor_contiguous(v, &c, NULL), 0);
    ck_assert(rtx_tensor_is_contiguous(c));
    int64_t want_dims[] = {4, 2, 3};
    tu_assert_shape(c, RTX_I32, 3, want_dims);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++)
                ck_assert(rtx_tensor_get(c, a * 6 + b * 3 + k) == b * 12 + k * 4 + a);
    struct rtx_tensor *same;
    ck_assert_int_eq(rtx_tensor_contiguous(c, &same, NULL), 0);
    ck_assert_ptr_eq(same, c);
    rtx_tensor_unref(same);
    rtx_tensor_unref(c);
    rtx_tensor_unref(v);
    rtx_tensor_unref(t);
}
END_TEST

START_TEST(view_outside_buffer_is_rejected) {
    int64_t dims[] = {4};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 1, dims, NULL), *v;
    int64_t vd[] = {3}, vs[] = {2};
    struct rtx_err err;
    ck_assert_int_eq(rtx_tensor_view(t, 1, vd, vs, 0, &v, &err), RTX_EINVAL);
    int64_t okd[] = {2};
    ck_assert_int_eq(rtx_tensor_view(t, 1, okd, vs, 4, &v, &err), 0);
    rtx_tensor_unref(v);
    int perm[] = {1};
    ck_assert_int_eq(rtx_tensor_permute(t, perm, &v, &err), RTX_EINVAL);
    rtx_tensor_unref(t);
}
END_TEST

START_TEST(dtype_table_round_trips) {
    for (int i = 0; i < RTX_DTYPE_COUNT; i++) {
        enum rtx_dtype dt;
        ck_assert_int_eq(rtx_dtype_from_name(rtx_dtype_name((enum rtx_dtype)i), &dt), 0);
        ck_assert_int_eq(dt, i);
        ck_assert_uint_gt(rtx_dtype_size(dt), 0);
    }
    enum rtx_dtype dt;
    ck_assert_int_eq(rtx_dtype_from_name("f64", &dt), RTX_EINVAL);
    ck_assert_str_eq(rtx_dtype_name(RTX_DTYPE_COUNT), "?");
}
END_TEST

START_TEST(f16_round_trips_every_value) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rtx_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert(isnan(rtx_f16_to_f32(rtx_f32_to_f16(f))));
            continue;
        }
        ck_assert_msg(rtx_f32_to_f16(f) == h, "half 0x%04x -> %g -> 0x%04x", h, (double)f,
                      rtx_f32_to_f16(f));
    }
}
END_TEST

START_TEST(f16_rounds_to_nearest_even) {
    ck_assert_uint_eq(rtx_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(rtx_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(rtx_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    ck_assert_uint_eq(rtx_f32_to_f16(-2.0f), 0xc000);
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0) */
    ck_assert_uint_eq(rtx_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(rtx_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    ck_assert_uint_eq(rtx_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie, odd -> up */
    ck_assert_uint_eq(rtx_f32_to_f16(0x1p-24f), 0x0001);               /* smallest subnormal */
    ck_assert_uint_eq(rtx_f32_to_f16(0x1p-25f), 0x0000);               /* tie to even: zero */
    ck_assert_uint_eq(rtx_f32_to_f16(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(rtx_f32_to_f16(INFINITY), 0x7c00);
    ck_assert(isnan(rtx_f16_to_f32(rtx_f32_to_f16(NAN))));
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even) {
    ck_assert_uint_eq(rtx_f32_to_bf16(1.0f), 0x3f80);
    ck_assert(rtx_bf16_to_f32(0x3f80) == 1.0f);
    ck_assert_uint_eq(rtx_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);           /* tie -> even */
    ck_assert_uint_eq(rtx_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);       /* tie, odd -> up */
    ck_assert_uint_eq(rtx_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    ck_assert(isnan(rtx_bf16_to_f32(rtx_f32_to_bf16(NAN))));
    ck_assert(isinf(rtx_bf16_to_f32(rtx_f32_to_bf16(INFINITY))));
}
END_TEST

START_TEST(shape_str_formats) {
    char buf[64];
    int64_t d[] = {2, 3};
    ck_assert_str_eq(rtx_shape_str(RTX_BF16, 2, d, buf, sizeof buf), "bf16[2,3]");
    ck_assert_str_eq(rtx_shape_str(RTX_F32, 0, d, buf, sizeof buf), "f32[]");
}
END_TEST

Suite *rtx_tensor_suite(void) {
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, tensor_new_is_zeroed_and_contiguous);
    tcase_add_test(tc, tensor_new_rejects_bad_shapes);
    tcase_add_test(tc, tensor_scalar_and_empty);
    tcase_add_test(tc, wrapped_memory_released_by_last_view);
    tcase_add_test(tc, wrap_rejects_short_buffer);
    tcase_add_test(tc, contiguous_copies_permuted_view);
    tcase_add_test(tc, view_outside_buffer_is_rejected);
    tcase_add_test(tc, dtype_table_round_trips);
    tcase_add_test(tc, f16_round_trips_every_value);
    tcase_add_test(tc, f16_rounds_to_nearest_even);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, shape_str_formats);
    suite_add_tcase(s, tc);
    return s;
}
