/*
 * conv-winograd.c - 3x3 stride-1 conv2d by Winograd's minimal filtering F(2x2, 3x3), for the
 * AVX2 build only (kernels/cpu/cpu-impl.h, ISA variants; ops-conv.c calls it from that build
 * ahead of conv-direct.c).
 *
 * DESIGN
 * F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
 * computes a 2x2 block of outputs from a 4x4 input tile d as Y = A^T [U (.) V] A with
 * V = B^T d B per input channel, U = G g G^T per filter and (.) summed over the input channels:
 * 16 products of C-long dot products per 4 outputs instead of 36, so the multiply-adds of a
 * 3x3 layer drop 2.25x. Its transforms use only 0, +-1 and +-1/2, so it rounds about as a
 * direct summation does (F(4x4, 3x3), 4x fewer, has coefficients up to 8 and loses about a
 * decimal digit: not used). Layout, per block of whole rows of tiles (any images):
 *   - input transform: each input row of a tile row is read once into a zero-padded row, its
 *     horizontal transform taken for every tile of the row (a loop over tiles the compiler
 *     vectorizes), then the vertical one, into V[16][C][tiles];
 *   - 16 products M[xi] = U[xi] V[xi] ([O x C] by [C x tiles]), each with the register tile of
 *     conv-direct.c's pixel-vector kernel (OC output channels x VP vectors of tiles);
 *   - output transform per output channel and tile row, vectorized over the row's tiles, the
 *     bias and the fused group's epilogue applied to the output rows as they are stored.
 * A block's V and M (16 C and 16 O floats per tile) are sized to stay in the core's L2; blocks
 * are spread over the pool. U is made once per constant weight and kept (rtx__const_derived,
 * a buffer of the backend as conv-direct.c's repack), else per call.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/geometry.h"

#ifdef RTX_CONV_WIDE /* the AVX-512 object: 8 channels x 32 tiles in 16 zmm registers */
#define OC 8
#define VP 2
#define VW 16
#define BCAST _mm512_set1_ps
#define CONV_WINOGRAD rtx__cpu_conv_winograd_wide
#else
#define OC 4 /* output channels per register tile */
#define VP 3 /* vectors of VW tiles per register tile */
#define VW 8 /* floats per vector */
#define BCAST _mm256_set1_ps
#define CONV_WINOGRAD conv_winograd_narrow
#endif
#define PX (VP * VW)           /* tiles per register tile */
#define BLOCK_FLOATS (1 << 16) /* V's floats per block (256 KiB) */
#define MAX_BLOCK_TILES 256

typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4), may_alias));

struct wconv {
    const struct rtx__conv2d_geom *g;
    const float *x, *bias, *u; /* u: U [16][Op / OC][C][OC], zeros past O */
    const struct rtx__cpu_epilogue *epi;
    float *y;
    int64_t TH, TW; /* tile rows and tiles per row of an image */
    int64_t rows;   /* tile rows per block (of N * TH) */
    int64_t tbp;    /* tiles per block, rounded up to VW: V's and M's row length */
    int64_t vs, ms; /* V's and M's planes (one per xi): C tbp and Op tbp floats plus 16, so
                     * that the transforms' 16 streams, one per plane, do not fall in one
                     * set of the L1 cache (planes of a multiple of 4 KiB would) */
    int64_t Op;     /* O rounded up to OC */
    int failed;     /* a block's scratch could not be allocated (read after the pool) */
};

int CONV_WINOGRAD(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                  const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                  const struct rtx__cpu_epilogue *e, float *y);

#ifndef RTX_CONV_WIDE
bool rtx__cpu_conv_winograd_fits(const struct rtx__conv2d_geom *g) {
    const struct rtx__window_geom *w = &g->w;
    /* any input channel count (a 3-channel stem too: 0.21 ms against 0.29 direct, batch 8 of
     * 3x32x32 to 32 channels), 16+ output channels (the register tile's height, and below
     * that the direct conv's pixel tiles waste nothing) */
    return g->G == 1 && w->kh == 3 && w->kw == 3 && w->sh == 1 && w->sw == 1 && w->dh == 1 &&
           w->dw == 1 && g->O >= 16;
}
#endif

/* The L floats xr[i0 .. i0 + L) of a row of W floats, zero where the index is outside
 * [0, W): the row's zero padding, read with masked loads (lanes masked off are not read, so
 * nothing outside the row is touched) instead of copying each row into a padded buffer. */
typedef int i8m __attribute__((vector_size(32)));
typedef int i4m __attribute__((vector_size(16)));
typedef float f8l __attribute__((vector_size(32), aligned(4), may_alias));
typedef float f4l __attribute__((vector_size(16), aligned(4), may_alias));
static inline __attribute__((always_inline)) __m256 load8(const float *xr, int64_t W, int64_t i0) {
    if (i0 >= 0 && i0 + 8 <= W) return (__m256) * (const f8l *)(xr + i0);
    const i8m iota = {0, 1, 2, 3, 4, 5, 6, 7};
    i8m idx = iota + (int)i0;
    i8m mask = (idx >= 0) & (idx < (int)W);
    return _mm256_maskload_ps(xr + i0, (__m256i)mask);
}
static inline __attribute__((always_inline)) __m128 load4(const float *xr, int64_t W, int64_t i0) {
    if (i0 >= 0 && i0 + 4 <= W) return (__m128) * (const f4l *)(xr + i0);
    const i4m iota = {0, 1, 2, 3};
    i4m idx = iota + (int)i0;
    i4m mask = (idx >= 0) & (idx < (int)W);
    return _mm_maskload_ps(xr + i0, (__m128i)mask);
}

/* Row transforms over a segment of L tiles [s, s + L) of a tile row, with vectors of L floats
 * (8 or 4; a row of TW tiles is covered by segments at 0, L, ... and a last one at TW - L,
 * overlapping, so every tile of the row is written without a scalar tail):
 *  - hrow: the horizontal transform of one input row xr of W floats, zero-padded (p[k] =
 *    xr[k + i0], i0 = -pl, zero outside the row), h[j * TW + tw] for j = 0..3, from p's even
 *    and odd columns (E[k] = p[2k], O[k] = p[2k+1]):
 *    h0 = E[tw] - E[tw+1], h1 = O[tw] + E[tw+1], h2 = E[tw+1] - O[tw], h3 = O[tw] - O[tw+1];
 *  - vrow: the vertical transform of four such rows into V[i * 4 + j][t0 + tw];
 *  - orow: the output transform of M's 16 planes at t0 + tw into the two output rows' columns
 *    2 tw and 2 tw + 1. */
/* orow's fused store (NULL: the plain one): bias b, the residual rows (NULL: none), relu. */
struct orow_epi {
    float b;
    const float *res0, *res1;
    bool relu;
};

#define ROW_OPS(L)                                                                                \
    typedef float f##L __attribute__((vector_size(L * 4)));                                       \
    typedef float f##L##u __attribute__((vector_size(L * 4), aligned(4), may_alias));             \
    typedef int i##L __attribute__((vector_size(L * 4)));                                         \
    static inline void hrow##L(const float *xr, int64_t W, int64_t i0, float *h, int64_t TW,      \
                               int64_t s) {                                                       \
        const i##L ev = EVENS##L, od = ODDS##L;                                                   \
        f##L a = load##L(xr, W, i0 + 2 * s), b = load##L(xr, W, i0 + 2 * s + L);                  \
        f##L a1 = load##L(xr, W, i0 + 2 * s + 2), b1 = load##L(xr, W, i0 + 2 * s + 2 + L);        \
        f##L e0 = __builtin_shuffle(a, b, ev), o0 = __builtin_shuffle(a, b, od);                  \
        f##L e1 = __builtin_shuffle(a1, b1, ev), o1 = __builtin_shuffle(a1, b1, od);              \
        *(f##L##u *)(h + s) = e0 - e1;                                                            \
        *(f##L##u *)(h + TW + s) = o0 + e1;                                                       \
        *(f##L##u *)(h + 2 * TW + s) = e1 - o0;                                                   \
        *(f##L##u *)(h + 3 * TW + s) = o0 - o1;                                                   \
    }                                                                                             \
    static inline void vrow##L(const float *h0, const float *h1, const float *h2,                 \
                               const float *h3, float *v, int64_t plane, int64_t TW, int64_t s) { \
        for (int j = 0; j < 4; j++) {                                                             \
            f##L r0 = *(const f##L##u *)(h0 + j * TW + s);                                        \
            f##L r1 = *(const f##L##u *)(h1 + j * TW + s);                                        \
            f##L r2 = *(const f##L##u *)(h2 + j * TW + s);                                        \
            f##L r3 = *(const f##L##u *)(h3 + j * TW + s);                                        \
            *(f##L##u *)(v + j * plane + s) = r0 - r2;                                            \
            *(f##L##u *)(v + (4 + j) * plane + s) = r1 + r2;                                      \
            *(f##L##u *)(v + (8 + j) * plane + s) = r2 - r1;                                      \
            *(f##L##u *)(v + (12 + j) * plane + s) = r1 - r3;                                     \
        }                                                                                         \
    }                                                                                             \
    static inline void orow##L(const float *m, int64_t plane, float *y0, float *y1, int64_t s,    \
                               const struct orow_epi *ep) {                                       \
        f##L r[2][4];                                                                             \
        for (int j = 0; j < 4; j++) {                                                             \
            f##L m0 = *(const f##L##u *)(m + j * plane + s);                                      \
            f##L m1 = *(const f##L##u *)(m + (4 + j) * plane + s);                                \
            f##L m2 = *(const f##L##u *)(m + (8 + j) * plane + s);                                \
            f##L m3 = *(const f##L##u *)(m + (12 + j) * plane + s);                               \
            r[0][j] = m0 + m1 + m2;                                                               \
            r[1][j] = m1 - m2 - m3;                                                               \
        }                                                                                         \
        const i##L lo = LOW##L, hi = HIGH##L;                                                     \
        for (int q = 0; q < 2; q++) {                                                             \
            float *yq = q ? y1 : y0;                                                              \
            if (yq == NULL) continue;                                                             \
            f##L ev = r[q][0] + r[q][1] + r[q][2], od = r[q][1] - r[q][2] - r[q][3];              \
            f##L a = __builtin_shuffle(ev, od, lo), c = __builtin_shuffle(ev, od, hi);            \
            if (ep) { /* rtx__cpu_store_run's operations, in its order */                         \
                a += ep->b;                                                                       \
                c += ep->b;                                                                       \
                const float *rq = q ? ep->res1 : ep->res0;                                        \
                if (rq) {                                                                         \
                    a += *(const f##L##u *)(rq + 2 * s);                                          \
                    c += *(const f##L##u *)(rq + 2 * s + L);                                      \
                }                                                                                 \
                if (ep->relu) { /* 0 > v ? 0 : v: keeps a NaN and -0 */                           \
                    a = (f##L)((i##L)a & ~(i##L)((f##L){0} > a));                                 \
                    c = (f##L)((i##L)c & ~(i##L)((f##L){0} > c));                                 \
                }                                                                                 \
            }                                                                                     \
            *(f##L##u *)(yq + 2 * s) = a;                                                         \
            *(f##L##u *)(yq + 2 * s + L) = c;                                                     \
        }                                                                                         \
    }
#define EVENS8                                                                                    \
    { 0, 2, 4, 6, 8, 10, 12, 14 }
#define ODDS8                                                                                     \
    { 1, 3, 5, 7, 9, 11, 13, 15 }
#define LOW8                                                                                      \
    { 0, 8, 1, 9, 2, 10, 3, 11 }
#define HIGH8                                                                                     \
    { 4, 12, 5, 13, 6, 14, 7, 15 }
#define EVENS4                                                                                    \
    { 0, 2, 4, 6 }
#define ODDS4                                                                                     \
    { 1, 3, 5, 7 }
#define LOW4                                                                                      \
    { 0, 4, 1, 5 }
#define HIGH4                                                                                     \
    { 2, 6, 3, 7 }
ROW_OPS(8)
ROW_OPS(4)

/* The segments' starts for a row of TW tiles with vectors of L: 0, L, ..., then TW - L. */
#define FOR_SEGMENTS(s, L, TW)                                                                    \
    for (int64_t s = 0, last_ = 0; !last_;                                                        \
         s = s + 2 * (L) <= (TW) ? s + (L) : (last_ = s + (L) >= (TW), (TW) - (L)))

/* The scalar form of the three, for rows of fewer than 4 tiles. */
static void hrow1(const float *p, float *h, int64_t TW) {
    for (int64_t tw = 0; tw < TW; tw++) {
        const float *q = p + 2 * tw;
        h[tw] = q[0] - q[2];
        h[TW + tw] = q[1] + q[2];
        h[2 * TW + tw] = q[2] - q[1];
        h[3 * TW + tw] = q[1] - q[3];
    }
}

static void vrow1(const float *h0, const float *h1, const float *h2, const float *h3, float *v,
                  int64_t plane, int64_t TW) {
    for (int j = 0; j < 4; j++)
        for (int64_t tw = 0; tw < TW; tw++) {
            int64_t k = j * TW + tw;
            v[j * plane + tw] = h0[k] - h2[k];
            v[(4 + j) * plane + tw] = h1[k] + h2[k];
            v[(8 + j) * plane + tw] = h2[k] - h1[k];
            v[(12 + j) * plane + tw] = h1[k] - h3[k];
        }
}

static void orow1(const float *m, int64_t plane, float *y0, float *y1, int64_t TW) {
    for (int64_t tw = 0; tw < TW; tw++) {
        float r[2][4];
        for (int j = 0; j < 4; j++) {
            float m0 = m[j * plane + tw], m1 = m[(4 + j) * plane + tw];
            float m2 = m[(8 + j) * plane + tw], m3 = m[(12 + j) * plane + tw];
            r[0][j] = m0 + m1 + m2;
            r[1][j] = m1 - m2 - m3;
        }
        y0[2 * tw] = r[0][0] + r[0][1] + r[0][2];
        y0[2 * tw + 1] = r[0][1] - r[0][2] - r[0][3];
        y1[2 * tw] = r[1][0] + r[1][1] + r[1][2];
        y1[2 * tw + 1] = r[1][1] - r[1][2] - r[1][3];
    }
}

/* Zero-padded copies of input rows a0.. (n of them) of channel plane xc: rows[k][q] =
 * x[a0 + k][q - pl], zero outside the plane, each row 2 TW + 2 floats (what hrow1 reads). */
static void padded_rows(const struct wconv *d, const float *xc, int64_t a0, int64_t n,
                        float *rows) {
    const struct rtx__window_geom *w = &d->g->w;
    int64_t len = 2 * d->TW + 2;
    int64_t lead = w->pl < len ? w->pl : len;
    int64_t cnt = len - lead < w->W ? len - lead : w->W;
    for (int64_t k = 0; k < n; k++) {
        float *p = rows + k * len;
        int64_t a = a0 + k;
        if (a < 0 || a >= w->H) {
            memset(p, 0, (size_t)len * sizeof *p);
            continue;
        }
        for (int64_t q = 0; q < lead; q++)
            p[q] = 0.0f;
        memcpy(p + lead, xc + a * w->W, (size_t)cnt * sizeof *p);
        for (int64_t q = lead + cnt; q < len; q++)
            p[q] = 0.0f;
    }
}

/* The input transform of tile rows [th0, th1) of image n, channel c, into V[xi][c][t0..]
 * (the rows' tiles one after another): the horizontal transform of each input row the tile
 * rows read, once, then the vertical one per tile row. rows (rows of fewer than 4 tiles
 * only): (2 (th1 - th0) + 2) x (2 TW + 2) floats, hr: (2 (th1 - th0) + 2) x 4 TW. */
static void input_rows(const struct wconv *d, const float *xc, int64_t th0, int64_t th1, float *v,
                       int64_t plane, float *rows, float *hr) {
    const struct rtx__window_geom *w = &d->g->w;
    int64_t TW = d->TW, n = 2 * (th1 - th0) + 2, len = 2 * TW + 2, a0 = 2 * th0 - w->pt;
    if (TW < 4) /* short rows: through zero-padded copies, scalar */
        padded_rows(d, xc, a0, n, rows);
    for (int64_t k = 0; k < n; k++) {
        float *h = hr + k * 4 * TW;
        int64_t a = a0 + k;
        if (TW < 4) {
            hrow1(rows + k * len, h, TW);
        } else if (a < 0 || a >= w->H) {
            for (int64_t q = 0; q < 4 * TW; q++)
                h[q] = 0.0f;
        } else if (TW >= 8) {
            FOR_SEGMENTS(s, 8, TW) hrow8(xc + a * w->W, w->W, -w->pl, h, TW, s);
        } else {
            FOR_SEGMENTS(s, 4, TW) hrow4(xc + a * w->W, w->W, -w->pl, h, TW, s);
        }
    }
    for (int64_t th = th0; th < th1; th++) {
        const float *h = hr + 2 * (th - th0) * 4 * TW;
        float *vt = v + (th - th0) * TW;
        if (TW >= 8) {
            FOR_SEGMENTS(s, 8, TW) vrow8(h, h + 4 * TW, h + 8 * TW, h + 12 * TW, vt, plane, TW, s);
        } else if (TW >= 4) {
            FOR_SEGMENTS(s, 4, TW) vrow4(h, h + 4 * TW, h + 8 * TW, h + 12 * TW, vt, plane, TW, s);
        } else {
            vrow1(h, h + 4 * TW, h + 8 * TW, h + 12 * TW, vt, plane, TW);
        }
    }
}

/* One register tile of M[xi]: OC output channels x vp vectors of tiles from t0 (vp <= VP, a
 * constant after inlining: a block's last tiles take only the vectors they fill). */
static inline __attribute__((always_inline)) void product_tile(int vp, int64_t C, int64_t tbp,
                                                               const float *vp0, const float *up,
                                                               float *mx) {
    vf acc[OC][VP];
    for (int o = 0; o < OC; o++)
        for (int q = 0; q < vp; q++)
            acc[o][q] = (vf){0};
    for (int64_t c = 0; c < C; c++, vp0 += tbp, up += OC) {
        vf xv[VP];
        for (int q = 0; q < vp; q++)
            xv[q] = *(const vfu *)(vp0 + VW * q);
        for (int o = 0; o < OC; o++) {
            vf wv = (vf)BCAST(up[o]);
            for (int q = 0; q < vp; q++)
                acc[o][q] += wv * xv[q];
        }
    }
    for (int o = 0; o < OC; o++)
        for (int q = 0; q < vp; q++)
            *(vfu *)(mx + o * tbp + VW * q) = acc[o][q];
}

/* M[xi][o][t] = sum_c U[xi][o][c] V[xi][c][t] for the block's tbp tiles, o < Op. */
static void products(const struct wconv *d, const float *v, float *m) {
    int64_t C = d->g->w.C, ob_n = d->Op / OC, tbp = d->tbp;
    for (int xi = 0; xi < 16; xi++) {
        const float *vx = v + xi * d->vs;
        for (int64_t ob = 0; ob < ob_n; ob++) {
            const float *ux = d->u + (xi * ob_n + ob) * C * OC;
            float *mx = m + xi * d->ms + ob * OC * tbp;
            int64_t t0 = 0;
            for (; t0 + PX <= tbp; t0 += PX)
                product_tile(VP, C, tbp, vx + t0, ux, mx + t0);
            switch ((tbp - t0) / VW) { /* tbp is a multiple of VW */
#if VP > 2
            case 2: product_tile(2, C, tbp, vx + t0, ux, mx + t0); break;
#endif
            case 1: product_tile(1, C, tbp, vx + t0, ux, mx + t0); break;
            default: break;
            }
        }
    }
}

/* The output transform of output channel o over tile row (n, th), whose tiles start at t0 in
 * M; out: 4 TW floats of scratch. */
static void output_row(const struct wconv *d, const float *m, int64_t o, int64_t n, int64_t th,
                       int64_t t0, float *out) {
    const struct rtx__window_geom *w = &d->g->w;
    int64_t TW = d->TW, ms = d->ms;
    const float *mo = m + o * d->tbp + t0;
    const struct rtx__cpu_epilogue *e = d->epi;
    bool relu = e && e->act == RTX_OP_RELU;
    float b = d->bias ? d->bias[o] : 0.0f;
    int64_t plane = n * d->g->O + o, P = w->Ho * w->Wo;
    float *dst0 = d->y + plane * P + 2 * th * w->Wo;
    /* rows of an even width take the bias and the common epilogues in the transform's
     * registers and go straight to y (every segment ends inside the row); the rest through
     * out (output rows 2 th and 2 th + 1, 2 TW columns) and rtx__cpu_store_run */
    if (TW >= 4 && w->Wo == 2 * TW && (e == NULL || e->act == RTX_OP_COUNT || relu)) {
        bool two = 2 * th + 1 < w->Ho;
        const float *res0 = e && e->res ? e->res + plane * e->res_ld + 2 * th * w->Wo : NULL;
        struct orow_epi ep = {b, res0, res0 && two ? res0 + w->Wo : NULL, relu};
        float *dst1 = two ? dst0 + w->Wo : NULL;
        if (TW >= 8) {
            FOR_SEGMENTS(s, 8, TW) orow8(mo, ms, dst0, dst1, s, &ep);
        } else {
            FOR_SEGMENTS(s, 4, TW) orow4(mo, ms, dst0, dst1, s, &ep);
        }
        return;
    }
    float *y0 = out, *y1 = out + 2 * TW;
    if (TW >= 8) {
        FOR_SEGMENTS(s, 8, TW) orow8(mo, ms, y0, y1, s, NULL);
    } else if (TW >= 4) {
        FOR_SEGMENTS(s, 4, TW) orow4(mo, ms, y0, y1, s, NULL);
    } else {
        orow1(mo, ms, y0, y1, TW);
    }
    for (int r = 0; r < 2 && 2 * th + r < w->Ho; r++) {
        int64_t col0 = (2 * th + r) * w->Wo;
        float *dst = d->y + plane * P + col0;
        const float *res = e && e->res ? e->res + plane * e->res_ld + col0 : NULL;
        rtx__cpu_store_run(dst, out + r * 2 * TW, 1, w->Wo, b, res, relu);
        if (e && e->act != RTX_OP_COUNT && !relu) {
            struct rtx__cpu_epilogue act = {.act = e->act, .gelu_tanh = e->gelu_tanh};
            rtx__cpu_epilogue_apply(&act, dst, 0, plane, col0, 1, w->Wo);
        }
    }
}

static void block_chunk(void *ctx, int64_t begin, int64_t end) {
    struct wconv *d = ctx;
    const struct rtx__window_geom *w = &d->g->w;
    int64_t C = w->C, TW = d->TW, total = w->N * d->TH;
    size_t vf_n = (size_t)(16 * d->vs), mf_n = (size_t)(16 * d->ms);
    size_t hr_n = (size_t)((2 * d->rows + 2) * 4 * TW);
    size_t prow_n = TW < 4 ? (size_t)((2 * d->rows + 2) * (2 * TW + 2)) : 0; /* padded_rows */
    float *v = rtx_malloc((vf_n + mf_n + hr_n + prow_n) * sizeof(float));
    if (v == NULL) {
        __atomic_store_n(&d->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *m = v + vf_n, *hr = m + mf_n, *prow = hr + hr_n;
    for (int64_t blk = begin; blk < end; blk++) {
        int64_t r0 = blk * d->rows, r1 = r0 + d->rows < total ? r0 + d->rows : total;
        int64_t tiles = (r1 - r0) * TW;
        for (int xi = 0; xi < 16 && tiles < d->tbp; xi++) /* padded tiles: zeros */
            for (int64_t c = 0; c < C; c++)
                memset(v + xi * d->vs + c * d->tbp + tiles, 0,
                       (size_t)(d->tbp - tiles) * sizeof *v);
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = r0; r < r1;) { /* the block's tile rows, image by image */
                int64_t n = r / d->TH, th0 = r % d->TH;
                int64_t th1 = r1 - r < d->TH - th0 ? th0 + (r1 - r) : d->TH;
                input_rows(d, d->x + (n * C + c) * w->H * w->W, th0, th1,
                           v + c * d->tbp + (r - r0) * TW, d->vs, prow, hr);
                r += th1 - th0;
            }
        products(d, v, m);
        for (int64_t o = 0; o < d->g->O; o++)
            for (int64_t r = r0; r < r1; r++)
                output_row(d, m, o, r / d->TH, r % d->TH, (r - r0) * TW, hr);
    }
    rtx_free(v);
}

/* U [16][Op / OC][C][OC] = G g G^T of every filter g [O][C][3][3] (computed in double, rounded
 * once), zeros for the channels past O. */
static void transform_filters(const struct rtx__conv2d_geom *g, int64_t Op, const float *wt,
                              float *u) {
    int64_t C = g->w.C, ob_n = Op / OC;
    for (int64_t o = 0; o < Op; o++)
        for (int64_t c = 0; c < C; c++) {
            double t[4][3], uu[4][4];
            const float *k = wt + (o * C + c) * 9;
            for (int j = 0; j < 3; j++) {
                double g0 = o < g->O ? k[j] : 0, g1 = o < g->O ? k[3 + j] : 0;
                double g2 = o < g->O ? k[6 + j] : 0;
                t[0][j] = g0;
                t[1][j] = (g0 + g1 + g2) / 2;
                t[2][j] = (g0 - g1 + g2) / 2;
                t[3][j] = g2;
            }
            for (int i = 0; i < 4; i++) {
                uu[i][0] = t[i][0];
                uu[i][1] = (t[i][0] + t[i][1] + t[i][2]) / 2;
                uu[i][2] = (t[i][0] - t[i][1] + t[i][2]) / 2;
                uu[i][3] = t[i][2];
            }
            for (int xi = 0; xi < 16; xi++)
                u[((xi * ob_n + o / OC) * C + c) * OC + o % OC] = (float)uu[xi / 4][xi % 4];
        }
}

/* rtx__const_derived's make and drop for a constant's U: a buffer of the backend */
struct filters_req {
    const struct rtx__conv2d_geom *g;
    int64_t Op;
    struct rtx_backend *be;
};

static void *make_filters(void *ctx, const struct rtx_tensor *t) {
    const struct filters_req *q = ctx;
    struct rtx_buffer *buf = NULL;
    size_t bytes = (size_t)(16 * q->g->w.C * q->Op) * sizeof(float);
    if (rtx_backend_buffer_new(q->be, bytes, &buf, NULL) != 0) return NULL;
    transform_filters(q->g, q->Op, rtx_tensor_data(t), buf->data);
    return buf;
}

static void drop_filters(void *p) {
    rtx_buffer_unref(p);
}

int CONV_WINOGRAD(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                  const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                  const struct rtx__cpu_epilogue *e, float *y) {
    const struct rtx__window_geom *w = &g->w;
    struct wconv d = {.g = g, .x = x, .bias = bias, .epi = e, .y = y};
    d.TH = (w->Ho + 1) / 2;
    d.TW = (w->Wo + 1) / 2;
    d.Op = (g->O + OC - 1) / OC * OC;
    /* tile rows per block: V (16 C floats a tile) and M (16 O) within about BLOCK_FLOATS
     * each, at least one register tile wide, smaller while there are fewer blocks than
     * twice the pool's threads */
    int64_t wide = w->C > g->O ? w->C : g->O;
    int64_t target = BLOCK_FLOATS / (16 * wide);
    if (target > MAX_BLOCK_TILES) target = MAX_BLOCK_TILES;
    if (target < PX) target = PX;
    int64_t total = w->N * d.TH;
    d.rows = target / d.TW > 1 ? target / d.TW : 1;
    while (d.rows > 1 && (total + d.rows - 1) / d.rows < 2 * rtx__cpu_n_threads(cpu) &&
           d.rows / 2 * d.TW >= PX)
        d.rows /= 2;
    d.tbp = (d.rows * d.TW + VW - 1) / VW * VW; /* products' last register tile is narrower */
    d.vs = w->C * d.tbp + 16;
    d.ms = d.Op * d.tbp + 16;

    size_t u_bytes = (size_t)(16 * w->C * d.Op) * sizeof(float);
    struct rtx_backend *be = rtx__cpu_backend(cpu);
    struct filters_req rq = {g, d.Op, be};
    struct rtx_buffer *kept =
        wt_const && be ? rtx__const_derived(be, wt_const, 0x57494e00u ^ (uint32_t)(VW == 16),
                                            u_bytes, make_filters, &rq, drop_filters)
                       : NULL;
    float *own = NULL;
    if (kept) {
        d.u = kept->data;
    } else {
        own = rtx_malloc(u_bytes);
        if (own == NULL) return RTX_ENOMEM;
        transform_filters(g, d.Op, wt, own);
        d.u = own;
    }
    rtx__cpu_parallel_for(cpu, (total + d.rows - 1) / d.rows, 1, block_chunk, &d);
    rtx_free(own);
    return d.failed ? RTX_ENOMEM : 0;
}

#ifndef RTX_CONV_WIDE
int rtx__cpu_conv_winograd_wide(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g,
                                const float *x, const float *wt, const struct rtx_tensor *wt_const,
                                const float *bias, const struct rtx__cpu_epilogue *e, float *y);

int rtx__cpu_conv_winograd(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                           const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                           const struct rtx__cpu_epilogue *e, float *y) {
    if (rtx__cpu_wide(cpu))
        return rtx__cpu_conv_winograd_wide(cpu, g, x, wt, wt_const, bias, e, y);
    return conv_winograd_narrow(cpu, g, x, wt, wt_const, bias, e, y);
}
#endif
