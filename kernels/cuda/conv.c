/*
 * conv.c - conv2d, max_pool2d and avg_pool2d on the CUDA backend (docs/ops.md), for f32, f16
 * and bf16 NCHW tensors.
 *
 * DESIGN
 * conv2d is im2col + one cuBLASLt GEMM per group: for group g, the output planes
 * y[n, g*Og .. (g+1)*Og) = w[g] [Og, K] x columns(n, g) [K, P], K = Cg*kH*kW, P = Ho*Wo,
 * issued as one strided-batched call over the images of a chunk (w's batch stride 0). As in
 * linalg.c a row-major product is cuBLASLt's column-major D^T = B^T A^T, so the columns are
 * cuBLASLt's A (P x K, ld P) and w its B (K x Og, ld K), with no transposes. Images go in
 * chunks whose columns fit in COL_SCRATCH bytes (at least one image), from the backend's
 * pool. A 1x1 kernel with unit strides and no padding uses x itself as the columns. The bias
 * is broadcast into y first and the GEMM runs with beta = 1, so sum and bias are added in f32
 * and rounded once (the CPU's order of rounding); f16 and bf16 multiply on tensor cores with
 * f32 accumulation, f32 in f32 (TF32 when the backend allows it), through gemm-lt.c (cached
 * heuristic, the backend's fixed workspace: capturable into a CUDA graph), with the pointers'
 * alignment over every group and chunk as preference. Pools are direct kernels (conv.cu).
 * The window and its checks are the CPU's own (rtx__conv2d_geometry and rtx__pool2d_geometry
 * of kernels/geometry.c).
 */
#include <string.h>

#include "kernels/cuda/conv-kernels.h"
#include "kernels/cuda/cuda-impl.h"
#include "kernels/geometry.h"
#include "runtime/backend-impl.h"

#define COL_SCRATCH ((size_t)256 << 20) /* bytes of im2col columns per chunk, at most */

/* ------------------------------------------------------------------------------------------
 * conv2d
 * ---------------------------------------------------------------------------------------- */

static int run_conv2d(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *X = a->in[0], *Wt = a->in[1];
    const struct rtx_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (rtx__cuda_data_type(X->dtype, &ct) || Wt->dtype != X->dtype || Y->dtype != X->dtype ||
        (B && B->dtype != X->dtype))
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "conv2d of %s",
                                     rtx_dtype_name(X->dtype));
    struct rtx__conv2d_geom geo;
    char why[128];
    int rc = rtx__conv2d_geometry(a->node, X, Wt, B, Y, &geo, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    const struct rtx__window_geom w = geo.w;
    int64_t N = w.N, C = w.C, O = geo.O, G = geo.G;
    int64_t Cg = geo.Cg, Og = geo.Og, K = geo.K, P = geo.P;
    size_t es = rtx_dtype_size(X->dtype);
    void *y = rtx_tensor_data(Y);
    if (N * O * P == 0) return 0;
    if (B)
        rc = RTX_CUDA_CHECK(err, rtx__cuda_conv_bias(y, rtx_tensor_data(B), (int)es, N, O, P,
                                                     cu->stream));
    else if (K == 0)
        rc = RTX_CUDA_CHECK(err, cudaMemsetAsync(y, 0, rtx_tensor_nbytes(Y), cu->stream));
    if (rc || K == 0) return rc ? rtx__cuda_node_fail(a, rc, err) : 0;
    if (K > INT32_MAX || P > INT32_MAX || Og > INT32_MAX)
        return rtx__backend_node_err(err, a, RTX_ELIMIT, "im2col matrix dimension over %d",
                                     INT32_MAX);

    bool direct = geo.direct;
    size_t per_image = (size_t)(G * K * P) * es; /* bytes of columns per image */
    int64_t chunk = direct ? N : (int64_t)(COL_SCRATCH / per_image);
    if (chunk < 1) chunk = 1;
    if (chunk > N) chunk = N;
    if (chunk > INT32_MAX) chunk = INT32_MAX;
    void *col = NULL;
    if (!direct && (rc = rtx__cuda_scratch(cu, (size_t)chunk * per_image, &col, err)))
        return rtx__cuda_node_fail(a, rc, err);
    const char *x = rtx_tensor_data(X), *wt = rtx_tensor_data(Wt);
    /* per group: d [Og, P] = w_g [Og, K] x columns [K, P] (+ the bias already in d: beta 1) */
    struct rtx__cuda_lt gm = {
        .type = ct, .M = Og, .N = P, .K = K, .lda = K, .ldb = P, .ldd = P,
        .sb = direct ? C * w.H * w.W : G * K * P, .sd = O * P,
        .alpha = 1.0f, .beta = B ? 1.0f : 0.0f,
    };
    /* the alignment of every pointer the group GEMMs use: bases and steps between them */
    const char *colbase = direct ? x : col;
    uintptr_t al = (uintptr_t)colbase | (uintptr_t)wt | (uintptr_t)y |
                   (uintptr_t)((size_t)(direct ? Cg * w.H * w.W : K * P) * es) |
                   (uintptr_t)((size_t)(Og * K) * es) | (uintptr_t)((size_t)(Og * P) * es) |
                   (uintptr_t)((size_t)gm.sb * es) | (uintptr_t)((size_t)gm.sd * es) |
                   (uintptr_t)((size_t)(chunk * O * P) * es);
    gm.align = rtx__cuda_lt_align(al);
    for (int64_t n0 = 0; n0 < N && rc == 0; n0 += chunk) {
        int64_t nc = N - n0 < chunk ? N - n0 : chunk;
        const char *cols = x + (size_t)(n0 * C * w.H * w.W) * es;
        if (!direct) {
            rc = RTX_CUDA_CHECK(err, rtx__cuda_im2col(cols, col, (int)es, nc, C, G, &w,
                                                      cu->stream));
            cols = col;
        }
        gm.batch = nc;
        for (int64_t g = 0; g < G && rc == 0; g++) {
            size_t goff = (size_t)(direct ? g * Cg * w.H * w.W : g * K * P) * es;
            gm.a = wt + (size_t)(g * Og * K) * es;
            gm.b = cols + goff;
            gm.d = (char *)y + (size_t)((n0 * O + g * Og) * P) * es;
            rc = rtx__cuda_lt_gemm(cu, &gm, err);
        }
    }
    if (col) rtx__cuda_scratch_release(cu, col);
    return rc ? rtx__cuda_node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------------------------- */

static int run_pool(struct rtx_cuda *cu, const struct rtx_node_args *a, bool is_max,
                    struct rtx_err *err) {
    const struct rtx_tensor *X = a->in[0];
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (rtx__cuda_data_type(X->dtype, &ct) || Y->dtype != X->dtype)
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "%s of %s",
                                     rtx_op_name(a->node->op), rtx_dtype_name(X->dtype));
    struct rtx__pool2d_geom geo;
    char why[128];
    int rc = rtx__pool2d_geometry(a->node, X, Y, is_max, &geo, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    int64_t planes = X->dims[0] * X->dims[1];
    rc = RTX_CUDA_CHECK(err, rtx__cuda_pool2d(rtx_tensor_data(X), rtx_tensor_data(Y),
                                              (int)X->dtype, planes, is_max,
                                              geo.count_include_pad, &geo.w, cu->stream));
    return rc ? rtx__cuda_node_fail(a, rc, err) : 0;
}

int rtx__cuda_conv(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    if (a->n_in < 1 || a->n_out < 1 || !a->in[0] || !a->out[0] ||
        (a->node->op == RTX_OP_CONV2D && (a->n_in < 2 || !a->in[1])))
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing input or output tensor");
    switch (a->node->op) {
    case RTX_OP_CONV2D: return run_conv2d(cu, a, err);
    case RTX_OP_MAX_POOL2D: return run_pool(cu, a, true, err);
    case RTX_OP_AVG_POOL2D: return run_pool(cu, a, false, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a conv or pool op");
}

bool rtx__cuda_conv_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    if (n->op != RTX_OP_CONV2D && n->op != RTX_OP_MAX_POOL2D && n->op != RTX_OP_AVG_POOL2D)
        return false;
    if (n->n_inputs < 1 || n->inputs[0] < 0) return false;
    enum rtx_dtype dt = g->values[n->inputs[0]].dtype;
    if (dt != RTX_F32 && dt != RTX_F16 && dt != RTX_BF16) return false;
    for (int i = 1; i < n->n_inputs; i++)
        if (n->inputs[i] >= 0 && g->values[n->inputs[i]].dtype != dt) return false;
    return true;
}
