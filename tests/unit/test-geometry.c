/*
 * test-geometry.c - the geometry both backends share (kernels/geometry.c), called directly (the
 * validator infers shapes that never reach most of these checks through a plan): the conv2d /
 * pool window, its fields and every error path; the strided-copy views (which view each of
 * transpose, expand and slice reads, how dims simplify, and the CUDA copy's unit widening,
 * whose kernel runs only on a GPU but whose choice of unit is pure arithmetic).
 */
#include <string.h>

#include "kernels/geometry.h"
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

/* ------------------------------------------------------------------------------------------
 * Strided-copy views: rtx__shape_view, rtx__view_simplify, rtx__view_widen
 * ---------------------------------------------------------------------------------------- */

static struct rtx__strided_view view2(int nd, const int64_t *dims, const int64_t *strides) {
    struct rtx__strided_view v = {.ndim = nd};
    memcpy(v.dims, dims, (size_t)nd * sizeof *dims);
    memcpy(v.strides, strides, (size_t)nd * sizeof *strides);
    return v;
}

static void assert_view(const struct rtx__strided_view *v, int nd, const int64_t *dims,
                        const int64_t *strides) {
    ck_assert_int_eq(v->ndim, nd);
    for (int d = 0; d < nd; d++) {
        ck_assert_int_eq(v->dims[d], dims[d]);
        ck_assert_int_eq(v->strides[d], strides[d]);
    }
}

START_TEST(shape_view_of_each_op) {
    char why[128] = "";
    struct rtx__strided_view v;
    /* attention's head split: [8, 512, 16, 64] perm (0, 2, 1, 3) */
    struct rtx_graph *gt = one_node("transpose");
    const int64_t perm[4] = {0, 2, 1, 3};
    set_ints(gt, "perm", perm, 4);
    struct rtx_tensor *x = t4(8, 512, 16, 64), *y = t4(8, 16, 512, 64), *bad = t4(8, 512, 16, 64);
    ck_assert_int_eq(rtx__shape_view(&gt->nodes[0], x, y, &v, why, sizeof why), 0);
    assert_view(&v, 4, (const int64_t[]){8, 16, 512, 64}, (const int64_t[]){524288, 64, 1024, 1});
    ck_assert_int_eq(v.offset, 0);
    ck_assert_int_eq(rtx__shape_view(&gt->nodes[0], x, bad, &v, why, sizeof why), RTX_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(why, "does not match the transpose"));
    struct rtx_graph *gp = one_node("transpose");
    const int64_t not_perm[4] = {0, 2, 2, 3};
    set_ints(gp, "perm", not_perm, 4);
    ck_assert_int_eq(rtx__shape_view(&gp->nodes[0], x, y, &v, why, sizeof why), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "permutation"));
    rtx_graph_free(gp);
    /* expand [3, 1, 5] to [2, 3, 4, 5]: stride 0 where it repeats */
    struct rtx_graph *ge = one_node("expand");
    const int64_t xd[3] = {3, 1, 5};
    struct rtx_tensor *xe = tu_tensor(RTX_F32, 3, xd, NULL), *ye = t4(2, 3, 4, 5);
    ck_assert_int_eq(rtx__shape_view(&ge->nodes[0], xe, ye, &v, why, sizeof why), 0);
    assert_view(&v, 4, (const int64_t[]){2, 3, 4, 5}, (const int64_t[]){0, 5, 0, 1});
    /* slice [:, 8:24] of [6, 32]: offset 8, strides of the input */
    struct rtx_graph *gs = one_node("slice");
    set_ints(gs, "starts", (const int64_t[]){8}, 1);
    set_ints(gs, "ends", (const int64_t[]){24}, 1);
    set_ints(gs, "axes", (const int64_t[]){1}, 1);
    const int64_t sd[2] = {6, 32}, sy[2] = {6, 16};
    struct rtx_tensor *xs = tu_tensor(RTX_F32, 2, sd, NULL), *ys = tu_tensor(RTX_F32, 2, sy, NULL);
    ck_assert_int_eq(rtx__shape_view(&gs->nodes[0], xs, ys, &v, why, sizeof why), 0);
    assert_view(&v, 2, sy, (const int64_t[]){32, 1});
    ck_assert_int_eq(v.offset, 8);
    ck_assert_int_eq(rtx__shape_view(&gs->nodes[0], xs, xs, &v, why, sizeof why), RTX_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(why, "does not match the slice"));
    /* an op that is not a view */
    struct rtx_graph *gr = one_node("relu");
    ck_assert_int_eq(rtx__shape_view(&gr->nodes[0], x, x, &v, why, sizeof why), RTX_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(why, "not a view op"));
    rtx_graph_free(gr);
    rtx_tensor_unref(ys);
    rtx_tensor_unref(xs);
    rtx_graph_free(gs);
    rtx_tensor_unref(ye);
    rtx_tensor_unref(xe);
    rtx_graph_free(ge);
    rtx_tensor_unref(bad);
    rtx_tensor_unref(y);
    rtx_tensor_unref(x);
    rtx_graph_free(gt);
}
END_TEST

START_TEST(view_simplify_drops_and_merges) {
    /* size-1 dims dropped, a contiguous view becomes one run */
    struct rtx__strided_view v = view2(4, (const int64_t[]){2, 1, 3, 4},
                                       (const int64_t[]){12, 99, 4, 1});
    v.offset = 7;
    ck_assert_int_eq(rtx__view_simplify(&v), 24);
    assert_view(&v, 1, (const int64_t[]){24}, (const int64_t[]){1});
    ck_assert_int_eq(v.offset, 7);
    /* a transpose stays two dims; the head split stays four */
    v = view2(2, (const int64_t[]){4, 3}, (const int64_t[]){1, 4});
    ck_assert_int_eq(rtx__view_simplify(&v), 12);
    assert_view(&v, 2, (const int64_t[]){4, 3}, (const int64_t[]){1, 4});
    v = view2(4, (const int64_t[]){8, 16, 512, 64}, (const int64_t[]){524288, 64, 1024, 1});
    ck_assert_int_eq(rtx__view_simplify(&v), 4194304);
    ck_assert_int_eq(v.ndim, 4);
    /* [2, 3, 4, 5] perm (0, 1, 3, 2): the batch dims merge, the swapped pair does not */
    v = view2(4, (const int64_t[]){2, 3, 5, 4}, (const int64_t[]){60, 20, 1, 5});
    ck_assert_int_eq(rtx__view_simplify(&v), 120);
    assert_view(&v, 3, (const int64_t[]){6, 5, 4}, (const int64_t[]){20, 1, 5});
    v = view2(3, (const int64_t[]){2, 3, 4}, (const int64_t[]){4, 8, 1});
    ck_assert_int_eq(rtx__view_simplify(&v), 24);
    assert_view(&v, 3, (const int64_t[]){2, 3, 4}, (const int64_t[]){4, 8, 1});
    /* broadcasts: a repeated row stays two dims, repeats of one element merge */
    v = view2(2, (const int64_t[]){3, 4}, (const int64_t[]){0, 1});
    rtx__view_simplify(&v);
    assert_view(&v, 2, (const int64_t[]){3, 4}, (const int64_t[]){0, 1});
    v = view2(2, (const int64_t[]){2, 3}, (const int64_t[]){0, 0});
    rtx__view_simplify(&v);
    assert_view(&v, 1, (const int64_t[]){6}, (const int64_t[]){0});
    /* reversed: rows reversed stay apart, a fully reversed block is one run of stride -1 */
    v = view2(2, (const int64_t[]){5, 4}, (const int64_t[]){-4, 1});
    rtx__view_simplify(&v);
    assert_view(&v, 2, (const int64_t[]){5, 4}, (const int64_t[]){-4, 1});
    v = view2(2, (const int64_t[]){5, 4}, (const int64_t[]){-4, -1});
    rtx__view_simplify(&v);
    assert_view(&v, 1, (const int64_t[]){20}, (const int64_t[]){-1});
    /* one element: rank 0; empty: 0 and v untouched */
    v = view2(2, (const int64_t[]){1, 1}, (const int64_t[]){5, 3});
    ck_assert_int_eq(rtx__view_simplify(&v), 1);
    ck_assert_int_eq(v.ndim, 0);
    v = view2(2, (const int64_t[]){3, 0}, (const int64_t[]){0, 1});
    ck_assert_int_eq(rtx__view_simplify(&v), 0);
    assert_view(&v, 2, (const int64_t[]){3, 0}, (const int64_t[]){0, 1});
}
END_TEST

/* rtx__view_widen of a copy of v; checks the unit and the resulting view. */
static void widen_is(struct rtx__strided_view v, size_t esize, uintptr_t src, uintptr_t dst,
                     size_t max_unit, size_t unit, int nd, const int64_t *dims,
                     const int64_t *strides) {
    ck_assert_uint_eq(rtx__view_widen(&v, esize, src, dst, max_unit), unit);
    assert_view(&v, nd, dims, strides);
}

START_TEST(view_widen_picks_the_widest_unit) {
    const uintptr_t A = 0x10000, B = 0x20000; /* aligned to everything */
    const int64_t d616[2] = {6, 16}, s32[2] = {32, 1};
    struct rtx__strided_view rows = view2(2, d616, s32); /* [6, 16] rows of a [6, 32] */
    /* f32: 64-byte runs, 128-byte strides: 16-byte units */
    widen_is(rows, 4, A + 32, B, 16, 16, 2, (const int64_t[]){6, 4}, (const int64_t[]){8, 1});
    /* the head split in bf16: 8 units of 16 bytes per 64-element row */
    widen_is(view2(4, (const int64_t[]){8, 16, 512, 64},
                   (const int64_t[]){524288, 64, 1024, 1}),
             2, A, B, 16, 16, 4, (const int64_t[]){8, 16, 512, 8},
             (const int64_t[]){65536, 8, 128, 1});
    /* i8 from a slice starting 8 bytes in: 8-byte units (the source is not 16-aligned) */
    widen_is(rows, 1, A + 8, B, 16, 8, 2, (const int64_t[]){6, 2}, (const int64_t[]){4, 1});
    /* a destination 8 bytes off 16: 8-byte units */
    widen_is(rows, 4, A, B + 8, 16, 8, 2, (const int64_t[]){6, 8}, (const int64_t[]){16, 1});
    /* max_unit caps */
    widen_is(rows, 4, A, B, 8, 8, 2, (const int64_t[]){6, 8}, (const int64_t[]){16, 1});
    /* bf16 pairs ([3, 5, 2] perm (1, 0, 2)): 4-byte units */
    widen_is(view2(3, (const int64_t[]){5, 3, 2}, (const int64_t[]){2, 10, 1}), 2, A, B, 16, 4,
             3, (const int64_t[]){5, 3, 1}, (const int64_t[]){1, 5, 1});
    /* a stride of 24 bytes allows 8-byte units, not 16 */
    widen_is(view2(2, (const int64_t[]){4, 8}, (const int64_t[]){12, 1}), 2, A, B, 16, 8, 2,
             (const int64_t[]){4, 2}, (const int64_t[]){3, 1});
    /* broadcast rows and reversed rows widen too */
    widen_is(view2(2, (const int64_t[]){7, 16}, (const int64_t[]){0, 1}), 2, A, B, 16, 16, 2,
             (const int64_t[]){7, 2}, (const int64_t[]){0, 1});
    widen_is(view2(2, d616, (const int64_t[]){-32, 1}), 4, A + 160 * 4, B, 16, 16, 2,
             (const int64_t[]){6, 4}, (const int64_t[]){-8, 1});
    /* no wider unit: odd run (6 bytes), source off by one element, inner stride not 1, rank 0 */
    const int64_t d43[2] = {4, 3}, s61[2] = {6, 1};
    widen_is(view2(2, d43, s61), 2, A, B, 16, 2, 2, d43, s61);
    widen_is(rows, 4, A + 4, B, 16, 4, 2, d616, s32);
    widen_is(rows, 2, A + 2, B, 16, 2, 2, d616, s32);
    const int64_t d48[2] = {4, 8}, s14[2] = {1, 4};
    widen_is(view2(2, d48, s14), 2, A, B, 16, 2, 2, d48, s14);
    struct rtx__strided_view scalar = {.ndim = 0};
    ck_assert_uint_eq(rtx__view_widen(&scalar, 2, A, B, 16), 2);
    /* an 8-byte element already is the unit when only 8 fits */
    widen_is(rows, 8, A + 8, B, 16, 8, 2, d616, s32);
}
END_TEST

Suite *rtx_geometry_suite(void) {
    Suite *s = suite_create("geometry");
    TCase *tc = tcase_create("window");
    tcase_add_test(tc, conv_window_fields);
    tcase_add_test(tc, conv_window_errors);
    tcase_add_test(tc, pool_window_ceil_mode_and_errors);
    suite_add_tcase(s, tc);
    TCase *tv = tcase_create("views");
    tcase_add_test(tv, shape_view_of_each_op);
    tcase_add_test(tv, view_simplify_drops_and_merges);
    tcase_add_test(tv, view_widen_picks_the_widest_unit);
    suite_add_tcase(s, tv);
    return s;
}
