/*
 * test-cpu-conv.c - the CPU conv2d and pooling kernels, against hand values and naive
 * double-precision loops in this file.
 */
#include <math.h>
#include <stdlib.h>

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

static double tol(enum rtx_dtype dt) {
    return dt == RTX_F32 ? 1e-4 : 2e-2;
}

/* ------------------------------------------------------------------------------------------
 * conv2d
 * ---------------------------------------------------------------------------------------- */

struct conv_case {
    enum rtx_dtype dt;
    int64_t N, C, H, W, O, kh, kw;
    int64_t sh, sw, pt, pl, pb, pr, dh, dw, groups;
    bool bias;
};

static void check_conv(const struct conv_case *c, unsigned seed) {
    int64_t Cg = c->C / c->groups, Og = c->O / c->groups;
    int64_t Ho = (c->H + c->pt + c->pb - c->dh * (c->kh - 1) - 1) / c->sh + 1;
    int64_t Wo = (c->W + c->pl + c->pr - c->dw * (c->kw - 1) - 1) / c->sw + 1;
    int64_t dx[4] = {c->N, c->C, c->H, c->W}, dw[4] = {c->O, Cg, c->kh, c->kw};
    int64_t db[1] = {c->O}, dy[4] = {c->N, c->O, Ho, Wo};
    struct rtx_tensor *in[3] = {tu_tensor_random(c->dt, 4, dx, -1, 1, seed),
                                tu_tensor_random(c->dt, 4, dw, -1, 1, seed + 1),
                                c->bias ? tu_tensor_random(c->dt, 1, db, -1, 1, seed + 2)
                                        : NULL};
    double *want = calloc((size_t)(c->N * c->O * Ho * Wo), sizeof *want);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t y = 0; y < Ho; y++)
                for (int64_t x = 0; x < Wo; x++) {
                    double s = c->bias ? rtx_tensor_get(in[2], o) : 0;
                    int64_t g = o / Og;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t iy = y * c->sh - c->pt + i * c->dh;
                                int64_t ix = x * c->sw - c->pl + j * c->dw;
                                if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                                int64_t ch = g * Cg + ci;
                                int64_t xi = ((n * c->C + ch) * c->H + iy) * c->W + ix;
                                int64_t wi = ((o * Cg + ci) * c->kh + i) * c->kw + j;
                                s += rtx_tensor_get(in[0], xi) * rtx_tensor_get(in[1], wi);
                            }
                    want[((n * c->O + o) * Ho + y) * Wo + x] = s;
                }
    char attrs[160];
    snprintf(attrs, sizeof attrs,
             "strides=I:%lld,%lld;pads=I:%lld,%lld,%lld,%lld;dilations=I:%lld,%lld;groups=i:%lld",
             (long long)c->sh, (long long)c->sw, (long long)c->pt, (long long)c->pl,
             (long long)c->pb, (long long)c->pr, (long long)c->dh, (long long)c->dw,
             (long long)c->groups);
    struct rtx_tensor *y = run1("conv2d", attrs, in, c->bias ? 3 : 2, c->dt, 4, dy);
    tu_assert_close(y, want, tol(c->dt), tol(c->dt));
    free(want);
    rtx_tensor_unref(y);
    for (int i = 0; i < 3; i++) rtx_tensor_unref(in[i]);
}

START_TEST(conv_hand_values) {
    /* 3x3 input 1..9, 2x2 kernel of ones, bias 0.5: sums of each 2x2 window */
    int64_t dx[4] = {1, 1, 3, 3}, dw[4] = {1, 1, 2, 2}, db[1] = {1}, dy[4] = {1, 1, 2, 2};
    double vx[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, vw[4] = {1, 1, 1, 1}, vb[1] = {0.5};
    struct rtx_tensor *in[3] = {tu_tensor(RTX_F32, 4, dx, vx), tu_tensor(RTX_F32, 4, dw, vw),
                                tu_tensor(RTX_F32, 1, db, vb)};
    double want[4] = {12.5, 16.5, 24.5, 28.5};
    struct rtx_tensor *y = run1("conv2d", "", in, 3, RTX_F32, 4, dy);
    tu_assert_close(y, want, 0, 1e-6);
    rtx_tensor_unref(y);
    /* pads 1 on every side, stride 2: windows start at -1 and 1 in each direction */
    double want_p[4] = {1 + 0.5, 2 + 3 + 0.5, 4 + 7 + 0.5, 5 + 6 + 8 + 9 + 0.5};
    y = run1("conv2d", "pads=I:1,1,1,1;strides=I:2,2", in, 3, RTX_F32, 4, dy);
    tu_assert_close(y, want_p, 0, 1e-6);
    rtx_tensor_unref(y);
    for (int i = 0; i < 3; i++) rtx_tensor_unref(in[i]);
}
END_TEST

START_TEST(conv_padding_stride_dilation) {
    struct conv_case c = {.dt = RTX_F32, .N = 1, .C = 3, .H = 7, .W = 6, .O = 4, .kh = 3,
                          .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                          .dh = 1, .dw = 1, .groups = 1, .bias = true};
    check_conv(&c, 1);
    c.sh = 2;
    c.sw = 3;
    c.pt = 0;
    c.pl = 2;
    c.pb = 1;
    c.pr = 0;
    check_conv(&c, 2);
    c.dh = 2;
    c.dw = 3;
    c.sh = c.sw = 1;
    c.bias = false;
    check_conv(&c, 3);
    c.kh = 1;
    c.kw = 2;
    c.sh = 2;
    check_conv(&c, 4);
    /* the AVX2 build's direct conv: channel blocks with a partial last one, stride phases
     * with dilation, asymmetric pads, several pixel tasks per image */
    struct conv_case d = {.dt = RTX_F32, .N = 2, .C = 19, .H = 23, .W = 21, .O = 10, .kh = 5,
                          .kw = 4, .sh = 3, .sw = 2, .pt = 2, .pl = 0, .pb = 1, .pr = 3,
                          .dh = 2, .dw = 1, .groups = 1, .bias = true};
    check_conv(&d, 5);
    d.sh = d.sw = 1;
    d.H = 40;
    d.W = 37;
    check_conv(&d, 6);
    /* the channel-vector tiles (16+ or 32+ output channels) read one padded plane per
     * channel at the stride, or x itself without padding: strided, dilated, unpadded, 1x1 */
    struct conv_case v = {.dt = RTX_F32, .N = 3, .C = 6, .H = 17, .W = 15, .O = 40, .kh = 3,
                          .kw = 3, .sh = 2, .sw = 3, .pt = 1, .pl = 2, .pb = 0, .pr = 1,
                          .dh = 1, .dw = 2, .groups = 1, .bias = true};
    check_conv(&v, 7);
    v.pt = v.pl = v.pb = v.pr = 0;
    check_conv(&v, 8);
    v.kh = v.kw = 1;
    v.sw = 2;
    check_conv(&v, 9);
}
END_TEST

/* 3x3 stride-1 convs of 16+ output channels go through Winograd F(2x2, 3x3) in the AVX2
 * build (kernels/cpu/conv-winograd.c): rows of 1 to 17 tiles (the scalar, 4- and 8-wide row
 * transforms and their overlapping last segments), odd output sizes (a last tile half
 * outside), uneven and 2-wide pads, blocks of tile rows that span images or end inside one,
 * channel counts off the register tile, 1 and 3 input channels. */
START_TEST(conv_winograd_tiles) {
    static const struct {
        int64_t N, C, H, W, O, pt, pl, pb, pr;
        bool bias;
    } cs[] = {
        {3, 1, 1, 1, 16, 1, 1, 1, 1, true},    /* a 1x1 output: one tile, 3 of 4 outside */
        {2, 3, 5, 7, 16, 1, 1, 1, 1, false},   /* 5x7: 4 tiles a row, the last half out */
        {2, 4, 4, 5, 16, 0, 0, 0, 0, true},    /* no pads, 2x3: rows of 2 tiles (scalar) */
        {4, 33, 9, 13, 17, 1, 1, 1, 1, true},  /* 7 tiles a row: two overlapping 4-wide */
        {1, 17, 16, 16, 20, 1, 1, 1, 1, true}, /* 8 a row; 20 channels: a partial block */
        {2, 5, 19, 18, 24, 0, 2, 2, 0, true},  /* uneven pads; 9 a row: overlapping 8-wide */
        {3, 8, 12, 33, 16, 2, 2, 0, 1, false}, /* 17 a row, two blocks, one ends in an image */
        {5, 16, 6, 10, 33, 1, 0, 1, 0, true},  /* one block over five images */
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        struct conv_case c = {.dt = RTX_F32, .N = cs[i].N, .C = cs[i].C, .H = cs[i].H,
                              .W = cs[i].W, .O = cs[i].O, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                              .pt = cs[i].pt, .pl = cs[i].pl, .pb = cs[i].pb, .pr = cs[i].pr,
                              .dh = 1, .dw = 1, .groups = 1, .bias = cs[i].bias};
        check_conv(&c, 30 + 3 * (unsigned)i);
    }
}
END_TEST

START_TEST(conv_groups_and_depthwise) {
    struct conv_case c = {.dt = RTX_F32, .N = 2, .C = 4, .H = 5, .W = 5, .O = 6, .kh = 3,
                          .kw = 2, .sh = 1, .sw = 1, .pt = 1, .pl = 0, .pb = 1, .pr = 1,
                          .dh = 1, .dw = 1, .groups = 2, .bias = true};
    check_conv(&c, 10);
    c.groups = 4; /* depthwise, two filters per channel */
    c.O = 8;
    c.dh = 2;
    check_conv(&c, 11);
}
END_TEST

START_TEST(conv_pointwise_and_batches) {
    struct conv_case c = {.dt = RTX_F32, .N = 3, .C = 5, .H = 4, .W = 6, .O = 7, .kh = 1,
                          .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1, .groups = 1,
                          .bias = true};
    check_conv(&c, 20); /* 1x1: the input is the columns matrix */
    c.groups = 5;
    c.O = 5;
    check_conv(&c, 21);
    /* one large image: im2col over the pool, OpenBLAS threads the product */
    struct conv_case big = {.dt = RTX_F32, .N = 1, .C = 8, .H = 20, .W = 20, .O = 16, .kh = 3,
                            .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                            .dh = 1, .dw = 1, .groups = 1, .bias = true};
    check_conv(&big, 22);
    big.N = 2;
    big.sw = 2;
    check_conv(&big, 23);
    /* many small images: split over the pool */
    struct conv_case many = {.dt = RTX_F32, .N = 9, .C = 2, .H = 5, .W = 4, .O = 3, .kh = 2,
                             .kw = 2, .sh = 1, .sw = 1, .pt = 0, .pl = 1, .pb = 0, .pr = 1,
                             .dh = 1, .dw = 1, .groups = 1, .bias = false};
    check_conv(&many, 24);
}
END_TEST

START_TEST(conv_half_dtypes) {
    struct conv_case c = {.dt = RTX_F16, .N = 2, .C = 4, .H = 6, .W = 5, .O = 4, .kh = 3,
                          .kw = 3, .sh = 2, .sw = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                          .dh = 1, .dw = 1, .groups = 2, .bias = true};
    check_conv(&c, 30);
    c.dt = RTX_BF16;
    check_conv(&c, 31);
    c.bias = false;
    check_conv(&c, 32);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Pooling
 * ---------------------------------------------------------------------------------------- */

struct pool_case {
    enum rtx_dtype dt;
    bool is_max;
    int64_t N, C, H, W, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
    bool ceil_mode, count_include_pad;
};

/* Output size as PyTorch computes it, written independently of the kernel. */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t d,
                        bool ceil_mode) {
    double span = (double)(in + p0 + p1 - d * (k - 1) - 1) / (double)s;
    int64_t o = (int64_t)(ceil_mode ? ceil(span) : floor(span)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p0) o--;
    return o;
}

static void check_pool(const struct pool_case *c, unsigned seed) {
    int64_t Ho = pool_out(c->H, c->kh, c->sh, c->pt, c->pb, c->dh, c->ceil_mode);
    int64_t Wo = pool_out(c->W, c->kw, c->sw, c->pl, c->pr, c->dw, c->ceil_mode);
    int64_t dx[4] = {c->N, c->C, c->H, c->W}, dy[4] = {c->N, c->C, Ho, Wo};
    struct rtx_tensor *in[1] = {tu_tensor_random(c->dt, 4, dx, -3, 3, seed)};
    double *want = calloc((size_t)(c->N * c->C * Ho * Wo), sizeof *want);
    for (int64_t pl = 0; pl < c->N * c->C; pl++)
        for (int64_t y = 0; y < Ho; y++)
            for (int64_t x = 0; x < Wo; x++) {
                double best = -INFINITY, sum = 0;
                int64_t inside = 0, padded = 0;
                for (int64_t i = 0; i < c->kh; i++)
                    for (int64_t j = 0; j < c->kw; j++) {
                        int64_t iy = y * c->sh - c->pt + i * c->dh;
                        int64_t ix = x * c->sw - c->pl + j * c->dw;
                        if (iy < c->H + c->pb && ix < c->W + c->pr) padded++;
                        if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                        double v = rtx_tensor_get(in[0], (pl * c->H + iy) * c->W + ix);
                        best = v > best ? v : best;
                        sum += v;
                        inside++;
                    }
                double r = c->is_max ? best : sum / (double)(c->count_include_pad ? padded
                                                                                  : inside);
                want[(pl * Ho + y) * Wo + x] = r;
            }
    char attrs[200];
    int k = snprintf(attrs, sizeof attrs,
                     "kernel_shape=I:%lld,%lld;strides=I:%lld,%lld;pads=I:%lld,%lld,%lld,%lld;"
                     "ceil_mode=i:%d",
                     (long long)c->kh, (long long)c->kw, (long long)c->sh, (long long)c->sw,
                     (long long)c->pt, (long long)c->pl, (long long)c->pb, (long long)c->pr,
                     c->ceil_mode);
    if (c->is_max)
        snprintf(attrs + k, sizeof attrs - (size_t)k, ";dilations=I:%lld,%lld",
                 (long long)c->dh, (long long)c->dw);
    else
        snprintf(attrs + k, sizeof attrs - (size_t)k, ";count_include_pad=i:%d",
                 c->count_include_pad);
    struct rtx_tensor *y = run1(c->is_max ? "max_pool2d" : "avg_pool2d", attrs, in, 1, c->dt, 4,
                                dy);
    tu_assert_close(y, want, tol(c->dt), tol(c->dt));
    free(want);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}

START_TEST(max_pool_2x2_f32) {
    int64_t dx[4] = {1, 1, 2, 2}, dy[4] = {1, 1, 1, 1};
    double vx[4] = {1, 4, 3, 2}, want[1] = {4};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 4, dx, vx)};
    struct rtx_tensor *y = run1("max_pool2d", "kernel_shape=I:2,2", in, 1, RTX_F32, 4, dy);
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

START_TEST(pool_hand_values_ceil_mode_and_padding) {
    int64_t dx[4] = {1, 1, 3, 3}, d2[4] = {1, 1, 2, 2};
    double vx[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 4, dx, vx)};
    /* ceil_mode adds the ragged last row and column */
    double want_avg[4] = {3, 4.5, 7.5, 9}, want_max[4] = {5, 6, 8, 9};
    struct rtx_tensor *y = run1("avg_pool2d", "kernel_shape=I:2,2;ceil_mode=i:1", in, 1,
                                RTX_F32, 4, d2);
    tu_assert_close(y, want_avg, 0, 1e-6);
    rtx_tensor_unref(y);
    y = run1("max_pool2d", "kernel_shape=I:2,2;ceil_mode=i:1", in, 1, RTX_F32, 4, d2);
    tu_assert_close(y, want_max, 0, 0);
    rtx_tensor_unref(y);
    /* k 3, stride 2, pads 1: the top-left window holds 1,2,4,5 and five pad cells */
    double want_ex[4] = {3, 4, 6, 7}, want_in[4] = {12 / 9.0, 16 / 9.0, 24 / 9.0, 28 / 9.0};
    y = run1("avg_pool2d", "kernel_shape=I:3,3;strides=I:2,2;pads=I:1,1,1,1", in, 1, RTX_F32, 4,
             d2);
    tu_assert_close(y, want_ex, 0, 1e-6);
    rtx_tensor_unref(y);
    y = run1("avg_pool2d", "kernel_shape=I:3,3;strides=I:2,2;pads=I:1,1,1,1;count_include_pad=i:1",
             in, 1, RTX_F32, 4, d2);
    tu_assert_close(y, want_in, 0, 1e-6);
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

START_TEST(max_pool_cases) {
    struct pool_case c = {.dt = RTX_F32, .is_max = true, .N = 2, .C = 3, .H = 7, .W = 8,
                          .kh = 3, .kw = 2, .sh = 2, .sw = 2, .dh = 1, .dw = 1};
    check_pool(&c, 1);
    c.ceil_mode = true;
    check_pool(&c, 2);
    c.pt = 1;
    c.pb = 1;
    c.pl = 1;
    check_pool(&c, 3);
    c.dh = 2;
    c.dw = 3;
    c.pl = 0;
    check_pool(&c, 4);
    c.ceil_mode = false;
    c.sh = 1;
    check_pool(&c, 5);
    c.dt = RTX_F16;
    check_pool(&c, 6);
    c.dt = RTX_BF16;
    c.ceil_mode = true;
    check_pool(&c, 7);
    /* the f32 rows' vector loops (8 or 4 outputs at a time): stride 1 and 2 rows with a
     * partial last vector, a dilated stride-1 row, stride 3 (the scalar row) */
    struct pool_case v = {.dt = RTX_F32, .is_max = true, .N = 2, .C = 3, .H = 9, .W = 21,
                          .kh = 3, .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1, .pb = 1,
                          .pr = 1, .dh = 1, .dw = 1};
    check_pool(&v, 11);
    v.sw = 2;
    v.W = 37;
    check_pool(&v, 12);
    v.sw = 1;
    v.dw = 2;
    v.kw = 4;
    check_pool(&v, 13);
    v.sw = 3;
    v.kw = 5;
    v.dw = 1;
    check_pool(&v, 14);
    /* f32 rows longer than the separable kernel's column buffer take the per-pixel loop */
    struct pool_case wide = {.dt = RTX_F32, .is_max = true, .N = 1, .C = 2, .H = 3, .W = 4099,
                             .kh = 3, .kw = 3, .sh = 2, .sw = 2, .pt = 1, .pl = 1, .pb = 1,
                             .pr = 1, .dh = 1, .dw = 1};
    check_pool(&wide, 9);
    /* ceil_mode would add a window starting in the bottom padding: PyTorch drops it */
    struct pool_case e = {.dt = RTX_F32, .is_max = true, .N = 1, .C = 2, .H = 5, .W = 5,
                          .kh = 2, .kw = 2, .sh = 2, .sw = 2, .pt = 1, .pl = 1, .pb = 1,
                          .pr = 1, .dh = 1, .dw = 1, .ceil_mode = true};
    ck_assert_int_eq(pool_out(5, 2, 2, 1, 1, 1, true), 3);
    check_pool(&e, 8);
    e.is_max = false;
    check_pool(&e, 9);
    e.count_include_pad = true;
    check_pool(&e, 10);
}
END_TEST

START_TEST(avg_pool_cases) {
    struct pool_case c = {.dt = RTX_F32, .N = 2, .C = 2, .H = 7, .W = 6, .kh = 3, .kw = 3,
                          .sh = 2, .sw = 2, .dh = 1, .dw = 1};
    for (int m = 0; m < 8; m++) {
        c.ceil_mode = m & 1;
        c.count_include_pad = (m >> 1) & 1;
        c.pt = c.pl = (m >> 2) & 1;
        c.pb = 1;
        c.pr = 0;
        check_pool(&c, 10 + (unsigned)m);
    }
    c.dt = RTX_F16;
    check_pool(&c, 20);
    c.dt = RTX_BF16;
    c.kw = 2;
    c.sw = 3;
    check_pool(&c, 21);
}
END_TEST

/* NaN, -inf and signed zeros at positions the vector rows reach (rows of 37 columns: the
 * column max and the strided row max run 8 lanes at a time in the AVX2 build, 4 in the
 * generic one), against a scalar reference where any NaN in a window wins. */
START_TEST(max_pool_nan_in_vector_rows) {
    enum { H = 9, W = 37, HO = 5, WO = 19 };
    int64_t dx[4] = {1, 2, H, W}, dy[4] = {1, 2, HO, WO};
    double vx[2 * H * W], want[2 * HO * WO];
    for (int i = 0; i < 2 * H * W; i++) vx[i] = (float)((double)((i * 37) % 101) / 50.0 - 1.0);
    const int nan_at[] = {5, 40, 77, 150, 333, 400, 512, 613};
    for (size_t k = 0; k < sizeof nan_at / sizeof *nan_at; k++) vx[nan_at[k]] = NAN;
    vx[20] = -INFINITY;
    vx[21] = -0.0;
    vx[22] = 0.0;
    for (int c = 0; c < 2; c++)
        for (int oh = 0; oh < HO; oh++)
            for (int ow = 0; ow < WO; ow++) {
                double m = -INFINITY;
                bool nan = false;
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++) {
                        int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        double v = vx[(c * H + ih) * W + iw];
                        nan |= isnan(v);
                        if (v > m) m = v;
                    }
                want[(c * HO + oh) * WO + ow] = nan ? NAN : m;
            }
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 4, dx, vx)};
    struct rtx_tensor *y = run1("max_pool2d", "kernel_shape=I:3,3;strides=I:2,2;pads=I:1,1,1,1",
                                in, 1, RTX_F32, 4, dy);
    for (int i = 0; i < 2 * HO * WO; i++) {
        double got = rtx_tensor_get(y, i);
        ck_assert_msg(isnan(want[i]) ? isnan(got) : got == want[i], "[%d]: %g, want %g", i, got,
                      want[i]);
    }
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

START_TEST(max_pool_propagates_nan) {
    int64_t dx[4] = {1, 1, 2, 2}, dy[4] = {1, 1, 1, 1};
    double vx[4] = {1, NAN, 3, 2}, want[1] = {NAN};
    struct rtx_tensor *in[1] = {tu_tensor(RTX_F32, 4, dx, vx)};
    struct rtx_tensor *y = run1("max_pool2d", "kernel_shape=I:2,2", in, 1, RTX_F32, 4, dy);
    tu_assert_close(y, want, 0, 0);
    ck_assert(isnan(rtx_tensor_get(y, 0)));
    rtx_tensor_unref(y);
    rtx_tensor_unref(in[0]);
}
END_TEST

Suite *rtx_cpu_conv_suite(void) {
    Suite *s = suite_create("cpu_conv");
    TCase *tc = tcase_create("conv");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, conv_hand_values);
    tcase_add_test(tc, conv_padding_stride_dilation);
    tcase_add_test(tc, conv_winograd_tiles);
    tcase_add_test(tc, conv_groups_and_depthwise);
    tcase_add_test(tc, conv_pointwise_and_batches);
    tcase_add_test(tc, conv_half_dtypes);
    tcase_add_test(tc, max_pool_2x2_f32);
    tcase_add_test(tc, pool_hand_values_ceil_mode_and_padding);
    tcase_add_test(tc, max_pool_cases);
    tcase_add_test(tc, avg_pool_cases);
    tcase_add_test(tc, max_pool_propagates_nan);
    tcase_add_test(tc, max_pool_nan_in_vector_rows);
    suite_add_tcase(s, tc);
    return s;
}
