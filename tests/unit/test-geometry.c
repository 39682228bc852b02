/*
 * test-geometry.c - the conv2d / pool window geometry both backends share (kernels/geometry.c):
 * the fields it computes and every error path, called directly (the validator infers shapes
 * that never reach most of these checks through a plan).
 */
#include <string.h>

#include "kernels/backend-impl.h"
#include "tests/unit/test-util.h"

/* A graph with one node `op`; its attributes are set by the caller through g and node 0. */
static struct rtx_graph *one_node(const char *op) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_new("geometry", &g, &err), 0);
    const int64_t d4[4] = {1, 1, 1, 1};
    ck_assert_int_eq(rtx_graph_add_input(g, "x", RTX_F32, 4, d4, &err), 0);
    const char *in[] = {"x"}, *out[] = {"y"};
    ck_assert_int_eq(rtx_graph_add_node(g, op, "n", in, 1, out, 1, &err), 0);
    return g;
}

static void set_ints(struct rtx_graph *g, const char *name, const int64_t *v, int n) {
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_set_attr_ints(g, 0, name, v, n, &err), 0);
}

static struct rtx_tensor *t4(int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t dims[4] = {a, b, c, d};
    return tu_tensor(RTX_F32, 4, dims, NULL);
}

START_TEST(conv_window_fields) {
    struct rtx_graph *g = one_node("conv2d");
    const int64_t s[2] = {2, 1}, p[4] = {1, 0, 2, 0}, d[2] = {1, 2};
    set_ints(g, "strides", s, 2);
    set_ints(g, "pads", p, 4);
    set_ints(g, "dilations", d, 2);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_set_attr_int(g, 0, "groups", 2, &err), 0);
    /* H: (7 + 1 + 2 - 1*(3-1) - 1) / 2 + 1 = 4; W: (9 - 2*(2-1) - 1) / 1 + 1 = 7 */
    struct rtx_tensor *x = t4(2, 4, 7, 9), *w = t4(6, 2, 3, 2), *y = t4(2, 6, 4, 7);
    const int64_t bd[1] = {6};
    struct rtx_tensor *b = tu_tensor(RTX_F32, 1, bd, NULL);
    struct rtx__conv2d_geom geo;
    char why[128] = "";
    ck_assert_int_eq(rtx__conv2d_geometry(&g->nodes[0], x, w, b, y, &geo, why, sizeof why), 0);
    ck_assert_int_eq(geo.w.N, 2);
    ck_assert_int_eq(geo.w.C, 4);
    ck_assert_int_eq(geo.w.Ho, 4);
    ck_assert_int_eq(geo.w.Wo, 7);
    ck_assert_int_eq(geo.w.sh, 2);
    ck_assert_int_eq(geo.w.pb, 2);
    ck_assert_int_eq(geo.w.dw, 2);
    ck_assert_int_eq(geo.G, 2);
    ck_assert_int_eq(geo.O, 6);
    ck_assert_int_eq(geo.Cg, 2);
    ck_assert_int_eq(geo.Og, 3);
    ck_assert_int_eq(geo.K, 2 * 3 * 2);
    ck_assert_int_eq(geo.P, 4 * 7);
    ck_assert(!geo.direct);
    rtx_tensor_unref(b);
    rtx_tensor_unref(y);
    rtx_tensor_unref(w);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* Runs rtx__conv2d_geometry of node 0 of g on x [1, 2, 5, 5] and w, b (or NULL), y; checks
 * the code and that why names the problem. */
static void conv_fails(struct rtx_graph *g, struct rtx_tensor *w, struct rtx_tensor *b,
                       struct rtx_tensor *y, int code, const char *why_part) {
    struct rtx_tensor *x = t4(1, 2, 5, 5);
    struct rtx__conv2d_geom geo;
    char why[128] = "";
    ck_assert_int_eq(rtx__conv2d_geometry(&g->nodes[0], x, w, b, y, &geo, why, sizeof why),
                     code);
    ck_assert_msg(strstr(why, why_part), "why '%s' lacks '%s'", why, why_part);
    rtx_tensor_unref(x);
}

START_TEST(conv_window_errors) {
    struct rtx_graph *g = one_node("conv2d");
    struct rtx_tensor *w = t4(4, 2, 3, 3), *y = t4(1, 4, 3, 3);
    const int64_t d2[2] = {4, 18};
    struct rtx_tensor *w2 = tu_tensor(RTX_F32, 2, d2, NULL);
    conv_fails(g, w2, NULL, y, RTX_EINVAL, "w must be 4-D");
    struct rtx_tensor *y3 = tu_tensor(RTX_F32, 2, d2, NULL);
    conv_fails(g, w, NULL, y3, RTX_EINVAL, "4-D (NCHW)");
    struct rtx_tensor *y_bad = t4(1, 4, 4, 3), *y_n = t4(2, 4, 3, 3);
    conv_fails(g, w, NULL, y_bad, RTX_EINTERNAL, "the window gives 3x3");
    conv_fails(g, w, NULL, y_n, RTX_EINTERNAL, "images");
    const int64_t bd[1] = {3};
    struct rtx_tensor *b = tu_tensor(RTX_F32, 1, bd, NULL);
    conv_fails(g, w, b, y, RTX_EINVAL, "b must be [4]");
    struct rtx_tensor *w_c = t4(4, 1, 3, 3);
    conv_fails(g, w_c, NULL, y, RTX_EINVAL, "do not fit groups 1");
    struct rtx_graph *g3 = one_node("conv2d"), *g0 = one_node("conv2d");
    const int64_t three[3] = {1, 1, 1}, zero[2] = {0, 1};
    set_ints(g3, "strides", three, 3);
    conv_fails(g3, w, NULL, y, RTX_EINVAL, "need 2 ints");
    set_ints(g0, "strides", zero, 2);
    conv_fails(g0, w, NULL, y, RTX_EINVAL, "bad kernel, stride");
    rtx_graph_free(g0);
    rtx_graph_free(g3);
    rtx_tensor_unref(w_c);
    rtx_tensor_unref(b);
    rtx_tensor_unref(y_n);
    rtx_tensor_unref(y_bad);
    rtx_tensor_unref(y3);
    rtx_tensor_unref(w2);
    rtx_tensor_unref(y);
    rtx_tensor_unref(w);
    rtx_graph_free(g);
}
END_TEST

START_TEST(pool_window_ceil_mode_and_errors) {
    struct rtx_graph *g = one_node("max_pool2d");
    struct rtx_tensor *x = t4(1, 3, 5, 5), *y3 = t4(1, 3, 3, 3), *y2 = t4(1, 3, 2, 2);
    struct rtx__pool2d_geom geo;
    char why[128] = "";
    ck_assert_int_eq(rtx__pool2d_geometry(&g->nodes[0], x, y2, true, &geo, why, sizeof why),
                     RTX_EINVAL); /* no kernel_shape */
    ck_assert_ptr_nonnull(strstr(why, "kernel_shape"));
    const int64_t k[2] = {2, 2};
    set_ints(g, "kernel_shape", k, 2);
    /* strides default to the kernel: floor gives 2x2, ceil_mode 3x3 */
    ck_assert_int_eq(rtx__pool2d_geometry(&g->nodes[0], x, y2, true, &geo, why, sizeof why), 0);
    ck_assert_int_eq(geo.w.sh, 2);
    ck_assert(!geo.ceil_mode);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_set_attr_int(g, 0, "ceil_mode", 1, &err), 0);
    ck_assert_int_eq(rtx__pool2d_geometry(&g->nodes[0], x, y3, true, &geo, why, sizeof why), 0);
    ck_assert(geo.ceil_mode);
    ck_assert_int_eq(geo.w.Ho, 3);
    ck_assert_int_eq(rtx__pool2d_geometry(&g->nodes[0], x, y2, true, &geo, why, sizeof why),
                     RTX_EINTERNAL);
    struct rtx_tensor *yc = t4(1, 2, 3, 3);
    ck_assert_int_eq(rtx__pool2d_geometry(&g->nodes[0], x, yc, true, &geo, why, sizeof why),
                     RTX_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(why, "channels"));
    rtx_tensor_unref(yc);
    rtx_tensor_unref(y2);
    rtx_tensor_unref(y3);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

Suite *rtx_geometry_suite(void) {
    Suite *s = suite_create("geometry");
    TCase *tc = tcase_create("window");
    tcase_add_test(tc, conv_window_fields);
    tcase_add_test(tc, conv_window_errors);
    tcase_add_test(tc, pool_window_ceil_mode_and_errors);
    suite_add_tcase(s, tc);
    return s;
}
