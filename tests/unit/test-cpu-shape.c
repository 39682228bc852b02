/*
 * test-cpu-shape.c - the CPU shape kernels (transpose, reshape, expand, concat, slice, gather,
 * constant) on several dtypes, against hand values and index arithmetic done in this file.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "tests/unit/test-util.h"

static struct rtx_tensor *run1(const char *op, const char *attrs, struct rtx_tensor *const *in,
                               int n_in, enum rtx_dtype dt, int ndim, const int64_t *dims) {
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    int rc = tu_run_op(op, attrs, in, n_in, out, 1, &err);
    ck_assert_msg(rc == 0, "%s failed: %s", op, err.msg);
    tu_assert_shape(out[0], dt, ndim, dims);
    return out[0];
}

/* A tensor whose element i holds (i % mod) + 1, exact in every dtype for mod <= 100. */
static struct rtx_tensor *iota(enum rtx_dtype dt, int ndim, const int64_t *dims, int mod) {
    int64_t n = rtx_shape_numel(ndim, dims);
    double *v = malloc((size_t)(n + 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = dt == RTX_BOOL ? (double)(i % 3 == 0) : i % mod + 1;
    struct rtx_tensor *t = tu_tensor(dt, ndim, dims, v);
    free(v);
    return t;
}

/* Row-major linear index of idx in dims. */
static int64_t lin(int nd, const int64_t *dims, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off = off * dims[d] + idx[d];
    return off;
}

/* idx = the multi-index of linear index i in dims. */
static void unlin(int nd, const int64_t *dims, int64_t i, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
}

static const enum rtx_dtype all_dtypes[] = {RTX_F32, RTX_F16, RTX_BF16, RTX_I8,
                                            RTX_I32, RTX_I64, RTX_U8,  RTX_BOOL};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* ------------------------------------------------------------------------------------------
 * transpose
 * ---------------------------------------------------------------------------------------- */

START_TEST(transpose_2d_f32) {
    int64_t dx[2] = {2, 3}, dy[2] = {3, 2};
    double vx[6] = {1, 2, 3, 4, 5, 6}, want[6] = {1, 4, 2, 5, 3, 6};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 2, dx, vx)};
    struct rtx_tensor *y = run1("transpose", "", in, 1, RTX_F32, 2, dy);
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

static void check_transpose(enum rtx_dtype dt, int nd, const int64_t *dx, const int *perm) {
    struct rtx_tensor *in[1] = {iota(dt, nd, dx, 97)};
    int64_t dy[RTX_MAX_DIMS], n = rtx_shape_numel(nd, dx);
    char attrs[64] = "";
    if (perm) {
        int k = snprintf(attrs, sizeof attrs, "perm=I:");
        for (int d = 0; d < nd; d++)
            k += snprintf(attrs + k, sizeof attrs - (size_t)k, "%s%d", d ? "," : "", perm[d]);
    }
    int p[RTX_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        p[d] = perm ? perm[d] : nd - 1 - d;
        dy[d] = dx[p[d]];
    }
    double *want = malloc((size_t)(n + 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        int64_t oi[RTX_MAX_DIMS], xi[RTX_MAX_DIMS];
        unlin(nd, dy, i, oi);
        for (int d = 0; d < nd; d++) xi[p[d]] = oi[d];
        want[i] = rtx_tensor_get(in[0], lin(nd, dx, xi));
    }
    struct rtx_tensor *y = run1("transpose", attrs, in, 1, dt, nd, dy);
    tu_assert_close(y, want, 0, 0);
    free(want);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}

START_TEST(transpose_every_dtype) {
    int64_t dx[3] = {2, 3, 4};
    int perm[3] = {1, 0, 2};
    for (int i = 0; i < N_DTYPES; i++) {
        check_transpose(all_dtypes[i], 3, dx, perm);
        check_transpose(all_dtypes[i], 3, dx, NULL);
    }
}
END_TEST

START_TEST(transpose_tiled_and_4d) {
    int64_t big[2] = {67, 131}; /* tiles with ragged edges */
    check_transpose(RTX_F32, 2, big, NULL);
    check_transpose(RTX_U8, 2, big, NULL);
    check_transpose(RTX_F16, 2, big, NULL);
    check_transpose(RTX_I64, 2, big, NULL);
    int64_t d4[4] = {2, 5, 3, 7};
    check_transpose(RTX_F32, 4, d4, (int[]){0, 2, 1, 3});
    check_transpose(RTX_BF16, 4, d4, (int[]){0, 1, 3, 2});
    check_transpose(RTX_I32, 4, d4, (int[]){3, 1, 0, 2});
    check_transpose(RTX_I8, 4, d4, (int[]){0, 3, 1, 2});
    int64_t d3[3] = {40, 1, 50}; /* a size-1 dim between */
    check_transpose(RTX_F32, 3, d3, (int[]){2, 1, 0});
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * reshape, expand, concat
 * ---------------------------------------------------------------------------------------- */

START_TEST(reshape_copies_bytes) {
    int64_t dx[3] = {2, 3, 4}, dy[2] = {2, 12};
    for (int i = 0; i < N_DTYPES; i++) {
        struct rtx_tensor *in[1] = {iota(all_dtypes[i], 3, dx, 50)};
        double want[24];
        for (int k = 0; k < 24; k++) want[k] = rtx_tensor_get(in[0], k);
        struct rtx_tensor *y = run1("reshape", "shape=I:0,-1", in, 1, all_dtypes[i], 2, dy);
        tu_assert_close(y, want, 0, 0);
        rtx_tensor_unref(y);
        rtx_tensor_unref(in[0]);
    }
}
END_TEST

static void check_expand(enum rtx_dtype dt, int nx, const int64_t *dx, const char *attrs,
                         int ny, const int64_t *dy) {
    struct rtx_tensor *in[1] = {iota(dt, nx, dx, 89)};
    int64_t n = rtx_shape_numel(ny, dy);
    double *want = malloc((size_t)(n + 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        int64_t oi[RTX_MAX_DIMS], xi[RTX_MAX_DIMS];
        unlin(ny, dy, i, oi);
        for (int d = 0; d < nx; d++) xi[d] = dx[d] == 1 ? 0 : oi[d + ny - nx];
        want[i] = rtx_tensor_get(in[0], lin(nx, dx, xi));
    }
    struct rtx_tensor *y = run1("expand", attrs, in, 1, dt, ny, dy);
    tu_assert_close(y, want, 0, 0);
    free(want);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}

START_TEST(expand_broadcasts) {
    int64_t dx[2] = {3, 1}, dy[3] = {2, 3, 4};
    check_expand(RTX_F32, 2, dx, "shape=I:2,3,4", 3, dy);
    check_expand(RTX_BOOL, 2, dx, "shape=I:2,3,4", 3, dy);
    check_expand(RTX_I64, 2, dx, "shape=I:2,1,4", 3, dy); /* a 1 keeps x's dim */
    int64_t dx2[3] = {1, 3, 1}, dy2[2] = {3, 5};
    check_expand(RTX_F16, 2, (int64_t[]){1, 5}, "shape=I:3,1", 2, dy2);
    check_expand(RTX_U8, 3, dx2, "shape=I:4,1,6", 3, (int64_t[]){4, 3, 6});
}
END_TEST

START_TEST(concat_axes_and_dtypes) {
    int64_t d0[3] = {2, 1, 3}, d1[3] = {2, 3, 3}, d2[3] = {2, 2, 3}, dy[3] = {2, 6, 3};
    for (int t = 0; t < N_DTYPES; t++) {
        enum rtx_dtype dt = all_dtypes[t];
        struct rtx_tensor *in[3] = {iota(dt, 3, d0, 7), iota(dt, 3, d1, 11), iota(dt, 3, d2, 13)};
        double want[36];
        for (int64_t i = 0; i < 36; i++) {
            int64_t idx[3];
            unlin(3, dy, i, idx);
            int k = idx[1] < 1 ? 0 : idx[1] < 4 ? 1 : 2;
            int64_t start = k == 0 ? 0 : k == 1 ? 1 : 4;
            int64_t xi[3] = {idx[0], idx[1] - start, idx[2]};
            want[i] = rtx_tensor_get(in[k], lin(3, in[k]->dims, xi));
        }
        struct rtx_tensor *y = run1("concat", t % 2 ? "axis=i:1" : "axis=i:-2", in, 3, dt, 3, dy);
        tu_assert_close(y, want, 0, 0);
        rtx_tensor_unref(y);
        for (int i = 0; i < 3; i++) rtx_tensor_unref(in[i]);
    }
}
END_TEST

START_TEST(concat_hand_values) {
    int64_t da[2] = {2, 1}, db[2] = {2, 2}, dy[2] = {2, 3}, dz[2] = {4, 2};
    double va[2] = {1, 2}, vb[4] = {3, 4, 5, 6};
    struct rtx_tensor *in[2] = {tu_tensor(RTX_I32, 2, da, va), tu_tensor(RTX_I32, 2, db, vb)};
    double want[6] = {1, 3, 4, 2, 5, 6};
    struct rtx_tensor *y = run1("concat", "axis=i:1", in, 2, RTX_I32, 2, dy);
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
    in[0] = tu_tensor(RTX_I32, 2, db, vb);
    double want0[8] = {3, 4, 5, 6, 3, 4, 5, 6};
    y = run1("concat", "axis=i:0", in, 2, RTX_I32, 2, dz);
    tu_assert_close(y, want0, 0, 0);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * slice
 * ---------------------------------------------------------------------------------------- */

START_TEST(slice_hand_values) {
    int64_t dx[1] = {6};
    double vx[6] = {10, 11, 12, 13, 14, 15};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_I64, 1, dx, vx)};
    struct {
        const char *attrs;
        int64_t n;
        double want[6];
    } cases[] = {
        {"starts=I:1;ends=I:4", 3, {11, 12, 13}},
        {"starts=I:-1;ends=I:-9223372036854775807;steps=I:-1", 6, {15, 14, 13, 12, 11, 10}},
        {"starts=I:5;ends=I:0;steps=I:-2", 3, {15, 13, 11}},
        {"starts=I:-100;ends=I:100;steps=I:4", 2, {10, 14}},
        {"starts=I:4;ends=I:2", 0, {0}},
        {"starts=I:100;ends=I:-100;steps=I:-3", 2, {15, 12}},
        {"starts=I:-3;ends=I:1000", 3, {13, 14, 15}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct rtx_tensor *y = run1("slice", cases[c].attrs, in, 1, RTX_I64, 1, &cases[c].n);
        tu_assert_close(y, cases[c].want, 0, 0);
        rtx_tensor_unref(y);
    }
    rtx_tensor_unref(in[0]);
}
END_TEST

START_TEST(slice_multi_axis_dtypes) {
    int64_t dx[3] = {4, 5, 6}, dy[3] = {4, 2, 3};
    for (int t = 0; t < N_DTYPES; t++) {
        enum rtx_dtype dt = all_dtypes[t];
        struct rtx_tensor *in[1] = {iota(dt, 3, dx, 100)};
        /* axis 2: 5::-2 -> 5,3,1; axis 1: 1:5:2 -> 1,3; axis 0 whole */
        double want[24];
        for (int64_t i = 0; i < 24; i++) {
            int64_t idx[3];
            unlin(3, dy, i, idx);
            int64_t xi[3] = {idx[0], 1 + 2 * idx[1], 5 - 2 * idx[2]};
            want[i] = rtx_tensor_get(in[0], lin(3, dx, xi));
        }
        struct rtx_tensor *y = run1(
            "slice", "starts=I:5,1;ends=I:-100,5;axes=I:-1,1;steps=I:-2,2", in, 1, dt, 3, dy);
        tu_assert_close(y, want, 0, 0);
        rtx_tensor_unref(y);
        rtx_tensor_unref(in[0]);
    }
}
END_TEST

START_TEST(slice_empty_result) {
    int64_t dx[2] = {3, 4}, dy[2] = {0, 4};
    struct rtx_tensor *in[1] = {iota(RTX_F32, 2, dx, 10)};
    struct rtx_tensor *y = run1("slice", "starts=I:2;ends=I:1", in, 1, RTX_F32, 2, dy);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * gather
 * ---------------------------------------------------------------------------------------- */

START_TEST(gather_embedding_rows) {
    int64_t dd[2] = {4, 3}, di[2] = {2, 2}, dy[3] = {2, 2, 3};
    double vd[12] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, vi[4] = {3, 0, -1, 1};
    double want[12] = {30, 31, 32, 0, 1, 2, 30, 31, 32, 10, 11, 12};
    enum rtx_dtype idt[2] = {RTX_I64, RTX_I32}, ddt[3] = {RTX_F32, RTX_BF16, RTX_I8};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            struct rtx_tensor *in[2] = {tu_tensor(ddt[b], 2, dd, vd),
                                        tu_tensor(idt[a], 2, di, vi)};
            struct rtx_tensor *y = run1("gather", "", in, 2, ddt[b], 3, dy);
            tu_assert_close(y, want, 0, 0);
            rtx_tensor_unref(y);
            rtx_tensor_unref(in[0]);
            rtx_tensor_unref(in[1]);
        }
}
END_TEST

START_TEST(gather_inner_axis) {
    int64_t dd[3] = {2, 3, 2}, di[1] = {4}, dy[4] = {2, 4, 2};
    struct rtx_tensor *in[2] = {iota(RTX_U8, 3, dd, 100), NULL};
    double vi[4] = {2, -3, 1, 2};
    in[1] = tu_tensor(RTX_I32, 1, di, vi);
    double want[16];
    for (int64_t i = 0; i < 16; i++) {
        int64_t idx[3];
        unlin(3, dy, i, idx);
        int64_t k = (int64_t)vi[idx[1]];
        if (k < 0) k += 3;
        int64_t xi[3] = {idx[0], k, idx[2]};
        want[i] = rtx_tensor_get(in[0], lin(3, dd, xi));
    }
    struct rtx_tensor *y = run1("gather", "axis=i:1", in, 2, RTX_U8, 3, dy);
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    /* scalar indices drop the axis */
    rtx_tensor_unref(in[1]);
    double one = -1;
    in[1] = tu_tensor(RTX_I64, 0, NULL, &one);
    y = run1("gather", "axis=i:-1", in, 2, RTX_U8, 2, (int64_t[]){2, 3});
    double want2[6];
    for (int64_t i = 0; i < 6; i++) want2[i] = rtx_tensor_get(in[0], i * 2 + 1);
    tu_assert_close(y, want2, 0, 0);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
}
END_TEST

START_TEST(gather_out_of_range_fails) {
    int64_t dd[2] = {5, 2}, di[1] = {3};
    double bad[2][3] = {{0, 5, 1}, {0, -6, 1}};
    const char *want[2] = {"index 5", "index -6"};
    for (int c = 0; c < 2; c++) {
        struct rtx_tensor *in[2] = {iota(RTX_F32, 2, dd, 10), tu_tensor(RTX_I64, 1, di, bad[c])};
        struct rtx_tensor *out[1] = {NULL};
        struct rtx_err err = {0};
        ck_assert_int_eq(tu_run_op("gather", "", in, 2, out, 1, &err), RTX_EINVAL);
        ck_assert_ptr_null(out[0]);
        ck_assert_msg(strstr(err.msg, want[c]) && strstr(err.msg, "size 5") &&
                          strstr(err.msg, "gather"),
                      "message: %s", err.msg);
        rtx_tensor_unref(in[0]);
        rtx_tensor_unref(in[1]);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * constant
 * ---------------------------------------------------------------------------------------- */

START_TEST(constant_copies_value) {
    int64_t dv[2] = {2, 3};
    double vals[6] = {1, -2, 3, -4, 5, -6};
    for (int t = 0; t < N_DTYPES; t++) {
        enum rtx_dtype dt = all_dtypes[t];
        if (dt == RTX_U8 || dt == RTX_BOOL) continue;
        struct rtx_err err = {0};
        struct rtx_graph *g;
        struct rtx_plan *plan;
        struct rtx_backend *be;
        struct rtx_tensor *value = tu_tensor(dt, 2, dv, vals), *y = NULL;
        const char *outs[1] = {"y"};
        ck_assert_int_eq(rtx_graph_new("c", &g, &err), 0);
        int node = rtx_graph_add_node(g, "constant", "k", NULL, 0, outs, 1, &err);
        ck_assert_msg(node >= 0, "%s", err.msg);
        ck_assert_int_eq(rtx_graph_set_attr_tensor(g, node, "value", value, &err), 0);
        ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
        ck_assert_msg(rtx_plan_new(g, NULL, 0, NULL, &plan, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), 0);
        ck_assert_msg(rtx_plan_execute(plan, be, NULL, 0, &y, 1, NULL, NULL, &err) == 0, "%s",
                      err.msg);
        tu_assert_shape(y, dt, 2, dv);
        tu_assert_close(y, vals, 0, 0);
        ck_assert_ptr_ne(rtx_tensor_data(y), rtx_tensor_data(value));
        rtx_tensor_unref(y);
        rtx_backend_free(be);
        rtx_plan_free(plan);
        rtx_graph_free(g);
        rtx_tensor_unref(value);
    }
}
END_TEST

Suite *rtx_cpu_shape_suite(void) {
    Suite *s = suite_create("cpu_shape");
    TCase *tc = tcase_create("shape");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, transpose_2d_f32);
    tcase_add_test(tc, transpose_every_dtype);
    tcase_add_test(tc, transpose_tiled_and_4d);
    tcase_add_test(tc, reshape_copies_bytes);
    tcase_add_test(tc, expand_broadcasts);
    tcase_add_test(tc, concat_axes_and_dtypes);
    tcase_add_test(tc, concat_hand_values);
    tcase_add_test(tc, slice_hand_values);
    tcase_add_test(tc, slice_multi_axis_dtypes);
    tcase_add_test(tc, slice_empty_result);
    tcase_add_test(tc, gather_embedding_rows);
    tcase_add_test(tc, gather_inner_axis);
    tcase_add_test(tc, gather_out_of_range_fails);
    tcase_add_test(tc, constant_copies_value);
    suite_add_tcase(s, tc);
    return s;
}
