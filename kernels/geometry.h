/*
 * geometry.h - index geometry shared by the backends (kernels/geometry.c): the strided views of
 * transpose, expand and slice, the batches of a matmul, a gemm's broadcast, the windows of conv2d
 * and 2-D pools, and attention's shapes and mask strides. Only kernels/ (and its unit tests)
 * include it. The functions return 0, or RTX_EINVAL (RTX_EINTERNAL where said) with the reason
 * in why for the caller's node error.
 */
#ifndef RTX_KERNELS_GEOMETRY_H
#define RTX_KERNELS_GEOMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

/* The strided view of a contiguous input that a transpose, expand or slice node copies out:
 * dims, element strides (0 where expand repeats, negative for negative slice steps) and the
 * element offset of its first element. */
struct rtx__strided_view {
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    int64_t strides[RTX_MAX_DIMS]; /* elements */
    int64_t offset;                /* elements */
};
int rtx__transpose_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                        struct rtx__strided_view *v, char *why, size_t why_len);
int rtx__expand_view(int in_nd, const int64_t *in_dims, int out_nd, const int64_t *out_dims,
                     struct rtx__strided_view *v, char *why, size_t why_len);
int rtx__slice_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                    struct rtx__strided_view *v, char *why, size_t why_len);
/* Whether the executor's output tensor has the view's shape. */
bool rtx__view_matches(const struct rtx__strided_view *v, const struct rtx_tensor *out);

/* A (batched) matmul: op(a) is M x K, op(b) K x N, NumPy 1-D promotion applied; the output's
 * nbat batch dims broadcast a's and b's; a_stride/b_stride give, per batch dim, how many
 * matrices of a and b one step moves (0 where that operand broadcasts). */
struct rtx__matmul_geom {
    bool ta, tb;                   /* transposes in effect (operands of rank >= 2) */
    int64_t M, K, N;
    int nbat;
    int64_t batch_dims[RTX_MAX_DIMS];
    int64_t a_stride[RTX_MAX_DIMS], b_stride[RTX_MAX_DIMS]; /* matrices */
    int64_t nbatch;                /* product of batch_dims */
    int64_t a_mats, b_mats;        /* matrices held by a and by b */
};
int rtx__matmul_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                         const struct rtx_tensor *B, struct rtx__matmul_geom *g, char *why,
                         size_t why_len);

/* A gemm: op(a) M x K times op(b) K x N, with c (when given) broadcasting from cM x cN. */
struct rtx__gemm_geom {
    bool ta, tb;
    float alpha, beta;
    int64_t M, K, N;
    int64_t cM, cN;                /* 1 x 1 without c */
};
int rtx__gemm_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                       const struct rtx_tensor *B, const struct rtx_tensor *C,
                       const struct rtx_tensor *Y, struct rtx__gemm_geom *g, char *why,
                       size_t why_len);

/* The window of a conv2d or 2-D pool over NCHW planes, as docs/ops.md defines it. Plain
 * int64 fields only: the CUDA kernels (conv.cu) take it by value. */
struct rtx__window_geom {
    int64_t N, C, H, W, Ho, Wo;  /* images, channels, input and output plane sizes */
    int64_t kh, kw;              /* kernel */
    int64_t sh, sw;              /* strides */
    int64_t pt, pl, pb, pr;      /* pads: top, left, bottom, right */
    int64_t dh, dw;              /* dilations */
};
/* Fills w from x [N, C, H, W], y and the node's strides (default 1, or the kernel when pool),
 * pads (default 0) and dilations (default 1; read only when dilated, else 1); the caller has
 * set w->kh and w->kw. Checks the window and that y's plane is the one it gives (floor, or
 * with ceil_mode rounded up while the last window starts inside the input or its top / left
 * padding) and y's N is x's. RTX_EINVAL for ranks and attributes, RTX_EINTERNAL when y's
 * shape (inferred by validation) disagrees. */
int rtx__window_geometry(const struct rtx_node *node, const struct rtx_tensor *x,
                         const struct rtx_tensor *y, bool pool, bool dilated, bool ceil_mode,
                         struct rtx__window_geom *w, char *why, size_t why_len);

/* A conv2d of x [N, C, H, W] by w [O, C / G, kH, kW] (+ b [O]) into y [N, O, Ho, Wo] as
 * im2col + GEMM: per image and group, y [Og, P] = w_g [Og, K] x columns [K, P]. */
struct rtx__conv2d_geom {
    struct rtx__window_geom w;
    int64_t G, O;                /* groups, output channels */
    int64_t Cg, Og;              /* input and output channels per group */
    int64_t K, P;                /* Cg * kh * kw, Ho * Wo */
    bool direct;                 /* 1x1, unit strides, no pads: the columns are x itself */
};
/* Reads groups and the window (kh, kw from w's dims) and checks w's rank, the channels
 * against the groups and b's shape (RTX_EINVAL), then y (as rtx__window_geometry). B may be
 * NULL. */
int rtx__conv2d_geometry(const struct rtx_node *node, const struct rtx_tensor *X,
                         const struct rtx_tensor *Wt, const struct rtx_tensor *B,
                         const struct rtx_tensor *Y, struct rtx__conv2d_geom *g, char *why,
                         size_t why_len);

/* A max_pool2d (is_max) or avg_pool2d of x into y: kernel_shape (2 ints, required), strides
 * (default: the kernel), pads, dilations (max_pool2d only), ceil_mode, count_include_pad
 * (avg_pool2d: divide by the padded window instead of the in-bounds count). */
struct rtx__pool2d_geom {
    struct rtx__window_geom w;
    bool ceil_mode, count_include_pad;
};
/* RTX_EINVAL for a bad kernel_shape or window, RTX_EINTERNAL when y's shape disagrees. */
int rtx__pool2d_geometry(const struct rtx_node *node, const struct rtx_tensor *X,
                         const struct rtx_tensor *Y, bool is_max, struct rtx__pool2d_geom *g,
                         char *why, size_t why_len);

/* An attention node: q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] into y [..., Lq, Dv]
 * (docs/ops.md), the leading dims equal and folded into BH, with the causal and scale
 * attributes read (scale defaults to 1 / sqrt(D)) and an optional mask (NULL: none) of rank
 * at most q's broadcasting to [..., Lq, Lk]: its element strides per leading dim, query and
 * key (0 where it broadcasts). RTX_EINVAL for ranks and shapes, RTX_EINTERNAL when y's
 * element count (inferred by validation) disagrees. The mask's dtype is the caller's check. */
struct rtx__attention_geom {
    int lead;                                /* leading dims: rank - 2 */
    int64_t lead_dims[RTX_MAX_DIMS];
    int64_t BH, Lq, Lk, D, Dv;
    bool causal;
    float scale;
    int64_t mask_lead_str[RTX_MAX_DIMS];     /* elements */
    int64_t mask_str_q, mask_str_k;          /* elements */
};
int rtx__attention_geometry(const struct rtx_node *node, const struct rtx_tensor *Q,
                            const struct rtx_tensor *K, const struct rtx_tensor *V,
                            const struct rtx_tensor *M, const struct rtx_tensor *Y,
                            struct rtx__attention_geom *g, char *why, size_t why_len);

/* The view a transpose, expand or slice node (chosen by its op) copies out of x, checked
 * against its output y: RTX_EINVAL (why says which attribute) for a bad node, RTX_EINTERNAL
 * when y's shape (inferred by validation) is not the view's or the op is not one of the three. */
int rtx__shape_view(const struct rtx_node *node, const struct rtx_tensor *x,
                    const struct rtx_tensor *y, struct rtx__strided_view *v, char *why,
                    size_t why_len);
/* Prepares a view for a copy loop: drops size-1 dims and merges each dim into its outer
 * neighbour when the two are one run in the source (outer stride = stride * dim), so a
 * contiguous view ends as one dim of stride 1 and a single element as rank 0. Returns the
 * element count; when it is 0 (an empty view) v is left as it was. The offset is not touched. */
int64_t rtx__view_simplify(struct rtx__strided_view *v);
/* For device copies of a simplified view of esize-byte elements from src (the address of the
 * view's first element, its offset already applied) into the contiguous dst: the widest unit
 * of at most max_unit bytes (a power of two), above esize, that the data can move in. That
 * needs the innermost stride to be 1, and the innermost run in bytes, every other stride in
 * bytes and both addresses to be multiples of the unit. On success v's innermost dim and
 * strides are rescaled to units and the unit is returned; otherwise v is unchanged and esize
 * is returned. */
size_t rtx__view_widen(struct rtx__strided_view *v, size_t esize, uintptr_t src, uintptr_t dst,
                       size_t max_unit);

#endif /* RTX_KERNELS_GEOMETRY_H */
