/*
 * conv-direct.c - conv2d without im2col, for the AVX2 build only (kernels/cpu/cpu-impl.h, ISA
 * variants; ops-conv.c calls it from that build, the generic build keeps im2col + sgemm).
 *
 * DESIGN
 * At the channel counts of small CNNs (16-64) writing and packing the im2col matrix cost as
 * much as the products. Here each image is first rearranged once into its zero-padded input
 * split in stride phases: phase (py, px) holds the padded pixels (i * sh + py, j * sw + px),
 * a plane of Hq x Wq. A tap (kh, kw) of output pixel (oh, ow) then reads phase
 * ((kh dh) % sh, (kw dw) % sw) at (oh + kh dh / sh, ow + kw dw / sw): with the output indexed
 * as j = oh * Wq + ow over the phase width (the columns past Wo are computed and dropped),
 * every tap of every channel is one contiguous run starting at a fixed offset, whatever the
 * stride, dilation and padding. When the layer has at least NRO output channels, a tile holds
 * NRO output channels (two vectors) x MRP output pixels in registers (tile_oc): per input
 * channel and tap it loads the channels' weights as vectors and broadcasts each pixel's input
 * value, read at that pixel's own offset, so only real output pixels are computed (at an 8x8
 * output with padding 1 the pixel-vector tile below computed 96 columns for 64). Reading
 * single values, it needs no phases: its input is one zero-padded copy of each channel plane
 * (rows copied whole), or x itself when the layer has no padding. Otherwise
 * the kernel holds a tile of OC output channels x PX pixels in
 * registers and adds, for each input channel and tap, one broadcast weight times the run;
 * the weights are repacked [O / OC][C][taps][OC] so a tile reads its weights as one run. The bias,
 * then a fused group's epilogue (residual, activation), are applied when the tile is stored. Tiles
 * (image, channel block, pixel block) are spread over the pool. The build uses FMA
 * (-ffp-contract=fast for this file), so results differ from the generic build's sgemm in the last
 * bits, as any two summation orders do.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/geometry.h"

#ifdef RTX_CONV_WIDE /* the AVX-512 object: 8 channels x 32 pixels in 16 zmm registers */
#define OC 8
#define VP 2
#define VW 16
#define BCAST _mm512_set1_ps
#define CONV_DIRECT rtx__cpu_conv_direct_wide
#else
#define OC 4 /* output channels per tile */
#define VP 3 /* vectors of VW pixels per tile */
#define VW 8 /* floats per vector */
#define BCAST _mm256_set1_ps
#define CONV_DIRECT conv_direct_narrow
#endif
#define PX (VP * VW)                    /* pixels per tile */
#define NRO (2 * VW)                    /* output channels per channel-vector tile */
#define MRP (VW == 16 ? 8 : 6)          /* pixels per channel-vector tile */
#define OC_TASK_PIXELS (16 * MRP)       /* pixels per task of channel-vector tiles */
#define TILES_PER_TASK 4                /* pixel tiles per pool task */
#define PHASE_BYTES ((int64_t)64 << 20) /* phase planes of a chunk of images, at most */

typedef float v8 __attribute__((vector_size(VW * 4)));
typedef float v8u __attribute__((vector_size(VW * 4), aligned(4), may_alias));

struct dconv {
    const struct rtx__conv2d_geom *g;
    const float *x, *bias;
    const struct rtx__cpu_epilogue *epi; /* after the bias; NULL: none */
    float *wr; /* weights [Op / blk][C][taps][blk], Op = O rounded up to blk,
                * zeros past O: a tile's weights are one contiguous run */
    float *xq; /* phase planes of images n0.., [n][phase][C][Hq][Wq] + slack */
    float *y;
    int64_t n0;
    int64_t Hq, Wq, plane, img; /* phase plane Hq x Wq; img: floats per image */
    int64_t Op, taps, ob, pb;      /* padded O, kh * kw, channel blocks, pixel tasks per image */
    int64_t *off;                  /* per tap: its phase's offset + its run's start in the plane */
    bool by_oc;                    /* channel-vector tiles (tile_oc), else pixel-vector ones */
    int64_t blk;                   /* output channels per tile: OC or NRO */
    int slot[16];                  /* per phase (py * sw + px): its place in xq, -1 when no tap
                                    * reads it (a 1x1 stride-2 conv reads one phase of four) */
    int64_t used;                  /* phases some tap reads */
    int64_t psh, psw;              /* the phases' strides: the geometry's, or 1 for the
                                    * channel-vector tiles (one zero-padded plane per channel:
                                    * they step by the stride themselves, rs and cs) */
    int64_t rs, cs;                /* tile_oc: a pixel's step per output row and column */
    const float *xin;              /* what the tiles read: xq, or x itself (no padding) */
};

int CONV_DIRECT(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                const struct rtx__cpu_epilogue *e, float *y);

#ifndef RTX_CONV_WIDE
bool rtx__cpu_conv_direct_fits(const struct rtx__conv2d_geom *g) {
    return g->G == 1 && !g->direct && g->w.sh <= 4 && g->w.sw <= 4 && g->O >= OC;
}
#endif

/* Phase planes of image n0 + i: xq[i][slot[py * sw + px]][c][a][b] = padded
 * x[c][a sh + py][b sw + px], for the phases some tap reads. A plane is zeroed by one memset,
 * then its in-range rows' columns copied: the padding's few zeros per row, written as loops,
 * became two memset calls a row (11% of a 32->64 stride-2 conv at 16x16, batch 8). */
static void phase_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct dconv *d = ctx;
    const struct rtx__window_geom *w = &d->g->w;
    int64_t sh = d->psh, sw = d->psw;
    for (int64_t q = begin; q < end; q++) { /* q = (image i, channel c) */
        int64_t i = q / w->C, c = q % w->C;
        const float *src = d->x + ((d->n0 + i) * w->C + c) * w->H * w->W;
        for (int64_t py = 0; py < sh; py++)
            for (int64_t px = 0; px < sw; px++) {
                int slot = d->slot[py * sw + px];
                if (slot < 0) continue;
                float *dst = d->xq + i * d->img + (slot * w->C + c) * d->plane;
                memset(dst, 0, (size_t)d->plane * sizeof *dst);
                /* columns b with 0 <= b sw + px - pl < W: [b0, b1) */
                int64_t first = w->pl - px, b0 = first > 0 ? (first + sw - 1) / sw : 0;
                int64_t b1 = (w->W - 1 + w->pl - px) / sw + 1;
                if (w->W - 1 + w->pl - px < 0) b1 = 0;
                if (b1 > d->Wq) b1 = d->Wq;
                if (b0 > b1) b0 = b1;
                for (int64_t a = 0; a < d->Hq; a++) {
                    int64_t r = a * sh + py - w->pt;
                    if (r < 0 || r >= w->H) continue;
                    float *restrict row = dst + a * d->Wq + b0;
                    const float *restrict sp = src + r * w->W + b0 * sw + px - w->pl;
                    if (sw == 1)
                        for (int64_t b = 0; b < b1 - b0; b++) row[b] = sp[b];
                    else
                        for (int64_t b = 0; b < b1 - b0; b++) row[b] = sp[b * sw];
                }
            }
    }
}

/* One tile: output channels [o0, o0 + OC) x ext pixels [p0, p0 + PX) of image i. */
static inline void tile(const struct dconv *d, int64_t i, int64_t o0, int64_t p0) {
    const struct rtx__window_geom *w = &d->g->w;
    v8 acc[OC][VP];
    for (int o = 0; o < OC; o++)
        for (int v = 0; v < VP; v++)
            acc[o][v] = (v8){0};
    const float *xi = d->xin + i * d->img + p0;
    for (int64_t c = 0; c < w->C; c++) {
        const float *xc = xi + c * d->plane;
        const float *wc = d->wr + (o0 / OC * w->C + c) * d->taps * OC;
        for (int64_t k = 0; k < d->taps; k++) {
            const float *xp = xc + d->off[k];
            const float *wk = wc + k * OC;
            v8 xv[VP];
            for (int v = 0; v < VP; v++)
                xv[v] = *(const v8u *)(xp + VW * v);
            for (int o = 0; o < OC; o++) {
                v8 wv = (v8)BCAST(wk[o]);
                for (int v = 0; v < VP; v++)
                    acc[o][v] += wv * xv[v];
            }
        }
    }
    float out[OC][PX];
    memcpy(out, acc, sizeof out);
    /* the tile's pixels, row segment by row segment of the output */
    int64_t n = d->n0 + i, P = w->Ho * w->Wo;
    for (int64_t p = 0, oh = p0 / d->Wq, ow = p0 % d->Wq; p < PX && oh < w->Ho;) {
        int64_t len = PX - p < d->Wq - ow ? PX - p : d->Wq - ow; /* to the row's end */
        int64_t valid = ow < w->Wo ? (len < w->Wo - ow ? len : w->Wo - ow) : 0;
        for (int o = 0; o < OC && o0 + o < d->g->O && valid > 0; o++) {
            float b = d->bias ? d->bias[o0 + o] : 0.0f;
            int64_t plane = n * d->g->O + o0 + o;
            float *dst = d->y + plane * P + oh * w->Wo + ow;
            const struct rtx__cpu_epilogue *e = d->epi;
            const float *res = e && e->res ? e->res + plane * e->res_ld + oh * w->Wo + ow : NULL;
            bool relu = e && e->act == RTX_OP_RELU;
            /* the epilogue's common cases inline (same operations, same order), the rest
             * through it */
            rtx__cpu_store_run(dst, &out[o][p], 1, valid, b, res, relu);
            if (e && e->act != RTX_OP_COUNT && !relu) {
                struct rtx__cpu_epilogue act = {.act = e->act, .gelu_tanh = e->gelu_tanh};
                rtx__cpu_epilogue_apply(&act, dst, 0, plane, oh * w->Wo + ow, 1, valid);
            }
        }
        p += len;
        ow += len;
        if (ow == d->Wq) {
            ow = 0;
            oh++;
        }
    }
}

static void tile_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct dconv *d = ctx;
    for (int64_t t = begin; t < end; t++) { /* t = (image i, channel block, pixel task) */
        int64_t i = t / (d->ob * d->pb), ob = t / d->pb % d->ob, pt = t % d->pb;
        int64_t ext = d->g->w.Ho * d->Wq;
        for (int64_t p0 = pt * TILES_PER_TASK * PX, e = 0; e < TILES_PER_TASK && p0 < ext;
             e++, p0 += PX)
            tile(d, i, ob * OC, p0);
    }
}

#if VW == 8
/* A channel-vector tile's store in the AVX2 object, for 16 whole channels and an epilogue of
 * at most a residual and relu: acc[r] and acc[MRP + r] hold pixel r's channels 0-7 and 8-15
 * (zero past m). The bias is added to them as they are, each half is transposed in registers
 * (8 x 8: channel j's pixels in one vector), the residual added and relu taken there, and
 * each channel's m pixels stored with one masked store: the same operations in the same
 * order as rtx__cpu_store_run, without its 16 strided scalar runs (they cost more than the
 * products of a 1x1 conv or of the 3-channel stem). Not inlined into the tile, whose k loop
 * keeps 12 accumulators in 16 registers. */
static __attribute__((noinline)) void tile_oc_store8(const struct dconv *d, const v8 *acc,
                                                     int64_t i, int64_t o0, int64_t p0, int m) {
    const struct rtx__window_geom *w = &d->g->w;
    const struct rtx__cpu_epilogue *e = d->epi;
    int64_t n = d->n0 + i, P = w->Ho * w->Wo;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(m),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int h = 0; h < 2; h++) {
        __m256 r[8];
        __m256 b = d->bias ? _mm256_loadu_ps(d->bias + o0 + 8 * h) : _mm256_setzero_ps();
        for (int q = 0; q < 8; q++)
            r[q] = q < MRP ? _mm256_add_ps((__m256)acc[h * MRP + q], b) : _mm256_setzero_ps();
        /* 8 x 8 transpose: r[q] lane j (pixel q, channel j) -> t[j] lane q */
        __m256 a[8], c[8], t[8];
        for (int q = 0; q < 8; q += 2) {
            a[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
            a[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
        }
        for (int q = 0; q < 8; q += 4)
            for (int k = 0; k < 2; k++) {
                c[q + 2 * k] = _mm256_shuffle_ps(a[q + k], a[q + k + 2], 0x44);
                c[q + 2 * k + 1] = _mm256_shuffle_ps(a[q + k], a[q + k + 2], 0xee);
            }
        for (int k = 0; k < 4; k++) {
            t[k] = _mm256_permute2f128_ps(c[k], c[k + 4], 0x20);
            t[k + 4] = _mm256_permute2f128_ps(c[k], c[k + 4], 0x31);
        }
        for (int j = 0; j < 8; j++) {
            int64_t plane = n * d->g->O + o0 + 8 * h + j;
            float *dst = d->y + plane * P + p0;
            __m256 v = t[j];
            if (m == 6) { /* a whole tile: 4 + 2 floats (masked moves cost more on AMD) */
                __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
                if (e && e->res) {
                    const float *rq = e->res + plane * e->res_ld + p0;
                    lo = _mm_add_ps(lo, _mm_loadu_ps(rq));
                    hi = _mm_add_ps(hi, _mm_castsi128_ps(_mm_loadu_si64(rq + 4)));
                }
                if (e && e->act == RTX_OP_RELU) {
                    lo = _mm_max_ps(_mm_setzero_ps(), lo);
                    hi = _mm_max_ps(_mm_setzero_ps(), hi);
                }
                _mm_storeu_ps(dst, lo);
                _mm_storeu_si64(dst + 4, _mm_castps_si128(hi));
                continue;
            }
            if (e && e->res)
                v = _mm256_add_ps(v, _mm256_maskload_ps(e->res + plane * e->res_ld + p0, mask));
            if (e && e->act == RTX_OP_RELU) v = _mm256_max_ps(_mm256_setzero_ps(), v);
            _mm256_maskstore_ps(dst, mask, v);
        }
    }
}
#endif

/* One channel-vector tile: output channels [o0, o0 + NRO) x the m (<= MRP) output pixels
 * p0.. of image i (p = oh * Wo + ow, across rows): the weights of the channels are vectors,
 * each pixel's input value is broadcast, so no computed column is dropped (the pixel-vector
 * tile computes the phase width's columns past Wo and rounds the plane up to its width). m is
 * a constant after inlining. */
static inline __attribute__((always_inline)) void tile_oc(const struct dconv *d, int64_t i,
                                                          int64_t o0, int64_t p0, int m) {
    const struct rtx__window_geom *w = &d->g->w;
    v8 c0[MRP], c1[MRP];
    const float *xr[MRP];
    const float *xi = d->xin + i * d->img;
#pragma GCC unroll 8
    for (int r = 0; r < MRP; r++) {
        int64_t p = p0 + (r < m ? r : 0);
        xr[r] = xi + p / w->Wo * d->rs + p % w->Wo * d->cs;
        c0[r] = c1[r] = (v8){0};
    }
    const float *wb = d->wr + o0 / NRO * w->C * d->taps * NRO;
    for (int64_t c = 0; c < w->C; c++) {
        int64_t cb = c * d->plane;
        for (int64_t k = 0; k < d->taps; k++, wb += NRO) {
            int64_t off = cb + d->off[k];
            v8 b0 = *(const v8u *)wb, b1 = *(const v8u *)(wb + VW);
#pragma GCC unroll 8
            for (int r = 0; r < MRP; r++) {
                if (r >= m) break;
                v8 a = (v8)BCAST(xr[r][off]);
                c0[r] += a * b0;
                c1[r] += a * b1;
            }
        }
    }
#if VW == 8
    if (o0 + NRO <= d->g->O && (!d->epi || d->epi->act == RTX_OP_COUNT ||
                                d->epi->act == RTX_OP_RELU)) {
        v8 acc[2 * MRP];
#pragma GCC unroll 8
        for (int r = 0; r < MRP; r++) {
            acc[r] = r < m ? c0[r] : (v8){0};
            acc[MRP + r] = r < m ? c1[r] : (v8){0};
        }
        tile_oc_store8(d, acc, i, o0, p0, m);
        return;
    }
#endif
    float out[MRP][NRO];
#pragma GCC unroll 8
    for (int r = 0; r < MRP; r++) {
        memcpy(out[r], &c0[r], sizeof c0[r]);
        memcpy(out[r] + VW, &c1[r], sizeof c1[r]);
    }
    int64_t n = d->n0 + i, P = w->Ho * w->Wo;
    const struct rtx__cpu_epilogue *e = d->epi;
    bool relu = e && e->act == RTX_OP_RELU;
    for (int o = 0; o < NRO && o0 + o < d->g->O; o++) {
        float b = d->bias ? d->bias[o0 + o] : 0.0f;
        int64_t plane = n * d->g->O + o0 + o;
        float *dst = d->y + plane * P + p0;
        const float *res = e && e->res ? e->res + plane * e->res_ld + p0 : NULL;
        /* as the pixel-vector tile's store: the epilogue's common cases inline */
        rtx__cpu_store_run(dst, &out[0][o], NRO, m, b, res, relu);
        if (e && e->act != RTX_OP_COUNT && !relu) {
            struct rtx__cpu_epilogue act = {.act = e->act, .gelu_tanh = e->gelu_tanh};
            rtx__cpu_epilogue_apply(&act, dst, 0, plane, p0, 1, m);
        }
    }
}

static void tile_oc_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct dconv *d = ctx;
    int64_t P = d->g->w.Ho * d->g->w.Wo;
    for (int64_t t = begin; t < end; t++) { /* t = (image i, channel block, pixel task) */
        int64_t i = t / (d->ob * d->pb), ob = t / d->pb % d->ob, pt = t % d->pb;
        int64_t p1 = (pt + 1) * OC_TASK_PIXELS < P ? (pt + 1) * OC_TASK_PIXELS : P;
        for (int64_t p0 = pt * OC_TASK_PIXELS; p0 < p1; p0 += MRP) {
            switch (p1 - p0 < MRP ? p1 - p0 : MRP) { /* one specialization per pixel count */
#if MRP == 8
            case 8: tile_oc(d, i, ob * NRO, p0, 8); break;
            case 7: tile_oc(d, i, ob * NRO, p0, 7); break;
#endif
            case 6: tile_oc(d, i, ob * NRO, p0, 6); break;
            case 5: tile_oc(d, i, ob * NRO, p0, 5); break;
            case 4: tile_oc(d, i, ob * NRO, p0, 4); break;
            case 3: tile_oc(d, i, ob * NRO, p0, 3); break;
            case 2: tile_oc(d, i, ob * NRO, p0, 2); break;
            default: tile_oc(d, i, ob * NRO, p0, 1); break;
            }
        }
    }
}

/* The weights [O][C][kh][kw] as [Op / blk][C][taps][blk] into dst. */
static void repack_weights(const struct dconv *d, const float *wt, float *dst0) {
    int64_t O = d->g->O, C = d->g->w.C, blk = d->blk;
    for (int64_t ob = 0; ob < d->ob; ob++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t k = 0; k < d->taps; k++) {
                float *dst = dst0 + ((ob * C + c) * d->taps + k) * blk;
                for (int64_t i = 0; i < blk; i++) {
                    int64_t o = ob * blk + i;
                    dst[i] = o < O ? wt[(o * C + c) * d->taps + k] : 0.0f;
                }
            }
}

/* rtx__const_derived's make and drop for the repacked weights of a constant: a buffer of the
 * backend (charged to its memory account, as the device copies of constants are) */
struct repack_req {
    const struct dconv *d;
    struct rtx_backend *be;
};

static void *make_repacked(void *ctx, const struct rtx_tensor *t) {
    const struct repack_req *q = ctx;
    const struct dconv *d = q->d;
    struct rtx_buffer *buf = NULL;
    size_t bytes = (size_t)(d->g->w.C * d->taps * d->Op) * sizeof(float);
    if (rtx_backend_buffer_new(q->be, bytes, &buf, NULL) != 0) return NULL;
    repack_weights(d, rtx_tensor_data(t), buf->data);
    return buf;
}

static void drop_repacked(void *p) {
    rtx_buffer_unref(p);
}

int CONV_DIRECT(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                const struct rtx__cpu_epilogue *e, float *y) {
    const struct rtx__window_geom *w = &g->w;
    struct dconv d = {.g = g, .x = x, .bias = bias, .epi = e, .y = y, .taps = w->kh * w->kw};
    /* channel-vector tiles when the output channels fill one (measured faster at every layer
     * of a ResNet-style model, the 3-channel stem included). They broadcast one input value
     * per pixel and tap, read at any stride: their input is one zero-padded plane per channel
     * (a row copy; the stride phases' strided gathers cost 3x more: 0.07 ms of a 32->64
     * stride-2 conv at 16x16, batch 8), or x itself when there is no padding. */
    d.by_oc = g->O >= NRO;
    d.psh = d.by_oc ? 1 : w->sh;
    d.psw = d.by_oc ? 1 : w->sw;
    d.Hq = (w->H + w->pt + w->pb + d.psh - 1) / d.psh;
    d.Wq = (w->W + w->pl + w->pr + d.psw - 1) / d.psw;
    d.plane = d.Hq * d.Wq;
    d.rs = d.by_oc ? w->sh * d.Wq : d.Wq;
    d.cs = d.by_oc ? w->sw : 1;
    bool unpadded = d.by_oc && w->pt == 0 && w->pl == 0 && w->pb == 0 && w->pr == 0;
    d.blk = d.by_oc ? NRO : OC;
    d.Op = (g->O + d.blk - 1) / d.blk * d.blk;
    d.ob = d.Op / d.blk;
    int64_t ext = w->Ho * d.Wq, max_off = 0;
    d.pb = d.by_oc ? (w->Ho * w->Wo + OC_TASK_PIXELS - 1) / OC_TASK_PIXELS
                   : (ext + TILES_PER_TASK * PX - 1) / (TILES_PER_TASK * PX);
    float *kept = NULL; /* the weights' repacked form kept for the constant, if any */
    d.off = rtx_malloc((size_t)d.taps * sizeof *d.off);
    if (d.off == NULL) goto oom;
    /* a constant's repacked weights are kept with the backend's entry for it (the layout
     * depends on blk and the vector width: the kind), else repacked for this call */
    size_t wr_bytes = (size_t)(w->C * d.taps * d.Op) * sizeof *d.wr;
    struct rtx_backend *be = rtx__cpu_backend(cpu);
    struct repack_req rq = {&d, be};
    struct rtx_buffer *kept_buf =
        wt_const && be
            ? rtx__const_derived(be, wt_const, 0x434f4e00u ^ (uint32_t)(d.blk << 1 | (VW == 16)),
                                 wr_bytes, make_repacked, &rq, drop_repacked)
            : NULL;
    kept = kept_buf ? kept_buf->data : NULL;
    d.wr = kept ? kept : rtx_malloc(wr_bytes);
    if (d.wr == NULL) goto oom;
    for (int p = 0; p < 16; p++)
        d.slot[p] = -1;
    for (int64_t kh = 0; kh < w->kh; kh++)
        for (int64_t kw = 0; kw < w->kw; kw++) {
            int64_t r = kh * w->dh, c = kw * w->dw;
            int64_t phase = (r % d.psh) * d.psw + c % d.psw;
            if (d.slot[phase] < 0) d.slot[phase] = (int)d.used++;
            d.off[kh * w->kw + kw] = d.slot[phase] * w->C * d.plane + r / d.psh * d.Wq + c / d.psw;
            if (d.off[kh * w->kw + kw] > max_off) max_off = d.off[kh * w->kw + kw];
        }
    /* a tile reads PX pixels past its start, the last one starting below ext */
    int64_t planes_end = d.used * w->C * d.plane;
    d.img = planes_end;
    int64_t reach = d.by_oc ? 0 : (w->C - 1) * d.plane + max_off + d.pb * TILES_PER_TASK * PX;
    if (reach > d.img) d.img = reach;
    d.img = unpadded ? planes_end : (d.img + 15) / 16 * 16; /* unpadded: x's own images */
    int64_t nb = unpadded ? w->N : PHASE_BYTES / (d.img * (int64_t)sizeof(float));
    if (nb < 1) nb = 1;
    if (nb > w->N) nb = w->N;
    if (!unpadded) {
        d.xq = rtx_malloc((size_t)(nb * d.img) * sizeof *d.xq);
        if (d.xq == NULL) goto oom;
        for (int64_t i = 0; i < nb; i++) /* the slack past the planes, which tiles read */
            memset(d.xq + i * d.img + planes_end, 0, (size_t)(d.img - planes_end) * sizeof *d.xq);
    }
    if (!kept) repack_weights(&d, wt, d.wr);
    for (d.n0 = 0; d.n0 < w->N; d.n0 += nb) {
        int64_t n = w->N - d.n0 < nb ? w->N - d.n0 : nb;
        if (unpadded) {
            d.xin = x + d.n0 * d.img;
        } else {
            d.xin = d.xq;
            rtx__cpu_parallel_for(cpu, n * w->C, 1 + (1 << 14) / (d.plane * d.used), phase_chunk,
                                  &d);
        }
        rtx__cpu_parallel_for(cpu, n * d.ob * d.pb, 1, d.by_oc ? tile_oc_chunk : tile_chunk, &d);
    }
    rtx_free(d.xq);
    if (!kept) rtx_free(d.wr);
    rtx_free(d.off);
    return 0;
oom:
    if (!kept) rtx_free(d.wr);
    rtx_free(d.off);
    return RTX_ENOMEM;
}

#ifndef RTX_CONV_WIDE
int rtx__cpu_conv_direct_wide(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g,
                              const float *x, const float *wt, const struct rtx_tensor *wt_const,
                              const float *bias, const struct rtx__cpu_epilogue *e, float *y);

int rtx__cpu_conv_direct(struct rtx_cpu *cpu, const struct rtx__conv2d_geom *g, const float *x,
                         const float *wt, const struct rtx_tensor *wt_const, const float *bias,
                         const struct rtx__cpu_epilogue *e, float *y) {
    if (rtx__cpu_wide(cpu) && g->O >= 8) /* the AVX-512 object's tile is 8 channels high */
        return rtx__cpu_conv_direct_wide(cpu, g, x, wt, wt_const, bias, e, y);
    return conv_direct_narrow(cpu, g, x, wt, wt_const, bias, e, y);
}
#endif
