/*
 * linalg.c - matmul, gemm and attention on the CUDA backend through cuBLASLt (docs/ops.md).
 *
 * DESIGN
 * Products. Every GEMM goes through rtx__cuda_lt_gemm (gemm-lt.c): row-major operands issued
 * as cuBLASLt's column-major D^T = op(b)^T op(a)^T with no data movement; f32 computes in
 * CUBLAS_COMPUTE_32F, or 32F_FAST_TF32 when the backend allows TF32; f16 and bf16 take
 * f16/bf16 operands and output with f32 accumulation (f32 alpha and beta), so the result is
 * rounded once, as on the CPU. Algorithms come from the heuristic, cached there.
 *
 * Batches. matmul's batch dims broadcast. When b is one shared matrix and a is not transposed,
 * the batch folds into the rows of a (one GEMM of M' = batch x M). Otherwise, when each
 * operand is either one matrix per batch or one matrix for all, one strided-batched call
 * (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET, stride 0 for the shared one);
 * any other pattern ([2,1] x [1,3] batch dims) is one GEMM per output matrix.
 *
 * gemm. c is broadcast into y first by a small kernel (linalg-kernels.cu), then the GEMM adds
 * alpha op(a) op(b) with beta as its C scale (C = D = y). With K = 0 the kernel writes beta c.
 *
 * attention. Three routes, chosen per run by RTX_ATTN_ROUTE (environment; "auto" when unset):
 * "cudnn", cuDNN's fused flash-attention engine (attention-cudnn.c: loaded at run time,
 * unmasked f16 / bf16, head dims multiples of 8); "flash" / "flash:TILE", the hand-written
 * fused kernels of attention-flash.cu (f16 / bf16, head dim 64 or 128, masks too); "unfused",
 * below. auto takes cuDNN wherever it can run the problem (cudnn_preferred: it measured faster
 * everywhere, docs/benchmarks.md), else the hand-written kernel where it applies, else the
 * unfused route; a forced route that cannot run the problem fails the node.
 * Unfused, per block of heads: scores S = scale q k^T in f32 scratch by one strided-batched
 * call (f16/bf16 q and k, f32 output), a row-softmax kernel with the causal and user masks, then
 * out = P v by a second strided-batched call. For f32 inputs P overwrites S; for f16/bf16, P is
 * rounded to the input dtype so the second GEMM runs on tensor cores with f32 accumulation:
 * probabilities carry about 3 (f16) or 2 (bf16) significant digits there, against the CPU's
 * f32 P, which the tests' tolerances account for. Heads go in blocks whose scores fit in
 * ATTN_SCRATCH bytes (at least one head per block).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention-cudnn.h"
#include "kernels/cuda/attention-flash.h"
#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/linalg-kernels.h"
#include "kernels/geometry.h"
#include "runtime/backend-impl.h"

#define ATTN_SCRATCH ((size_t)256 << 20) /* bytes of scores per block of heads, at most */

/* ------------------------------------------------------------------------------------------
 * matmul
 * ---------------------------------------------------------------------------------------- */

static int run_matmul(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (rtx__cuda_data_type(A->dtype, &ct) < 0 || B->dtype != A->dtype || Y->dtype != A->dtype)
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "matmul of %s",
                                     rtx_dtype_name(A->dtype));
    struct rtx__matmul_geom geo;
    char why[128];
    if (rtx__matmul_geometry(a->node, A, B, &geo, why, sizeof why))
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s", why);
    bool ta = geo.ta, tb = geo.tb;
    int64_t M = geo.M, K = geo.K, N = geo.N, nbatch = geo.nbatch;
    int64_t a_mats = geo.a_mats, b_mats = geo.b_mats;
    int nbat = geo.nbat;
    const int64_t *odims = geo.batch_dims, *astr = geo.a_stride, *bstr = geo.b_stride;
    if (rtx_tensor_numel(Y) != nbatch * M * N)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                     (long long)rtx_tensor_numel(Y), (long long)(nbatch * M * N));
    if (nbatch * M * N == 0) return 0;
    size_t esz = rtx_dtype_size(A->dtype);
    if (K == 0)
        return RTX_CUDA_CHECK(err, cudaMemsetAsync(rtx_tensor_data(Y), 0,
                                                   (size_t)(nbatch * M * N) * esz, cu->stream));

    struct rtx__cuda_lt g = {
        .type = ct,
        .ta = ta,
        .tb = tb,
        .M = M,
        .N = N,
        .K = K,
        .lda = ta ? M : K,
        .ldb = tb ? K : N,
        .ldd = N,
        .batch = 1,
        .alpha = 1.0f,
        .beta = 0.0f,
        .a = rtx_tensor_data(A),
        .b = rtx_tensor_data(B),
        .d = rtx_tensor_data(Y),
    };
    int rc;
    if (nbatch == 1 || (b_mats == 1 && !ta)) {
        g.M = nbatch * M; /* a's batch folds into its rows */
        rc = rtx__cuda_lt_gemm(cu, &g, err);
    } else if ((a_mats == 1 || a_mats == nbatch) && (b_mats == 1 || b_mats == nbatch)) {
        g.batch = nbatch;
        g.sa = a_mats == 1 ? 0 : M * K;
        g.sb = b_mats == 1 ? 0 : K * N;
        g.sd = M * N;
        rc = rtx__cuda_lt_gemm(cu, &g, err);
    } else {
        /* One GEMM per output matrix, the operands found by an odometer over the batch dims. */
        int64_t idx[RTX_MAX_DIMS] = {0}, ao = 0, bo = 0;
        rc = 0;
        for (int64_t i = 0; i < nbatch && rc == 0; i++) {
            g.a = (const char *)rtx_tensor_data(A) + (size_t)(ao * M * K) * esz;
            g.b = (const char *)rtx_tensor_data(B) + (size_t)(bo * K * N) * esz;
            g.d = (char *)rtx_tensor_data(Y) + (size_t)(i * M * N) * esz;
            rc = rtx__cuda_lt_gemm(cu, &g, err);
            for (int d = nbat - 1; d >= 0; d--) {
                ao += astr[d];
                bo += bstr[d];
                if (++idx[d] < odims[d]) break;
                ao -= astr[d] * odims[d];
                bo -= bstr[d] * odims[d];
                idx[d] = 0;
            }
        }
    }
    return rc < 0 ? rtx__cuda_node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * gemm
 * ---------------------------------------------------------------------------------------- */

static int run_gemm(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    const struct rtx_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (rtx__cuda_data_type(A->dtype, &ct) < 0 || B->dtype != A->dtype || Y->dtype != A->dtype ||
        (C && C->dtype != A->dtype))
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "gemm of %s",
                                     rtx_dtype_name(A->dtype));
    struct rtx__gemm_geom geo;
    char why[128];
    if (rtx__gemm_geometry(a->node, A, B, C, Y, &geo, why, sizeof why))
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s", why);
    bool ta = geo.ta, tb = geo.tb;
    float alpha = geo.alpha, beta = geo.beta;
    int64_t M = geo.M, K = geo.K, N = geo.N, cM = geo.cM, cN = geo.cN;
    if (M * N == 0) return 0;
    void *y = rtx_tensor_data(Y);
    int rc;
    if (C) {
        /* y = c (then beta in the GEMM), or beta c outright when there is no product */
        rc =
            RTX_CUDA_CHECK(err, rtx__cuda_bias_broadcast(y, rtx_tensor_data(C), Y->dtype, M, N, cM,
                                                         cN, K == 0 ? beta : 1.0f, cu->stream));
        if (rc < 0 || K == 0) return rc;
    } else if (K == 0) {
        return RTX_CUDA_CHECK(err, cudaMemsetAsync(y, 0, rtx_tensor_nbytes(Y), cu->stream));
    }
    struct rtx__cuda_lt g = { /* C = D = y, holding c broadcast when beta applies */
        .type = ct,
        .ta = ta,
        .tb = tb,
        .M = M,
        .N = N,
        .K = K,
        .lda = ta ? M : K,
        .ldb = tb ? K : N,
        .ldd = N,
        .batch = 1,
        .alpha = alpha,
        .beta = C ? beta : 0.0f,
        .a = rtx_tensor_data(A),
        .b = rtx_tensor_data(B),
        .d = y,
    };
    rc = rtx__cuda_lt_gemm(cu, &g, err);
    return rc < 0 ? rtx__cuda_node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * attention
 * ---------------------------------------------------------------------------------------- */

/* RTX_ATTN_ROUTE (decision 68): auto, cudnn, flash, flash:TILE or unfused. */
enum { ROUTE_AUTO, ROUTE_CUDNN, ROUTE_FLASH, ROUTE_UNFUSED };
struct attn_route {
    int kind;
    int tile; /* enum rtx_flash_tile for the hand-written kernel */
};

static int attn_route_parse(const char *s, struct attn_route *r) {
    r->kind = ROUTE_AUTO;
    r->tile = RTX_FLASH_TILE_AUTO;
    if (!s || !*s || strcmp(s, "auto") == 0) return 0;
    if (strcmp(s, "cudnn") == 0) r->kind = ROUTE_CUDNN;
    else if (strcmp(s, "unfused") == 0) r->kind = ROUTE_UNFUSED;
    else if (strcmp(s, "flash") == 0) r->kind = ROUTE_FLASH;
    else if (strncmp(s, "flash:", 6) == 0) {
        r->kind = ROUTE_FLASH;
        r->tile = rtx__cuda_flash_tile_parse(s + 6);
    } else {
        return -1;
    }
    return r->tile < 0 ? -1 : 0;
}

/* Whether auto takes cuDNN's engine for this problem: wherever it can run it (it measured
 * 1.2 to 1.8 times the hand-written kernels on every benchmark case, docs/benchmarks.md),
 * except non-causal problems of more than 1024 keys on cuDNN 9.13 and 9.14, whose engine is
 * known to fault under CUDA graph replay there (decision 78). */
static bool cudnn_preferred(bool causal, int64_t lk) {
    long v = rtx__cudnn_version(NULL, 0);
    return !(v >= 91300 && v < 91500 && !causal && lk > 1024);
}

static int run_attention(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *Q = a->in[0], *K = a->in[1], *V = a->in[2];
    const struct rtx_tensor *Mk = a->n_in > 3 ? a->in[3] : NULL;
    struct rtx_tensor *Y = a->out[0];
    enum rtx_dtype dt = Q->dtype;
    cudaDataType_t ct;
    if (rtx__cuda_data_type(dt, &ct) < 0 || K->dtype != dt || V->dtype != dt || Y->dtype != dt)
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "attention of %s",
                                     rtx_dtype_name(dt));
    struct rtx__attention_geom geo;
    char why[128];
    int grc = rtx__attention_geometry(a->node, Q, K, V, Mk, Y, &geo, why, sizeof why);
    if (grc) return rtx__backend_node_err(err, a, grc, "%s", why);
    if (Mk && Mk->dtype != RTX_BOOL && Mk->dtype != dt)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "mask of %s", rtx_dtype_name(Mk->dtype));
    int nd = Q->ndim;
    int64_t BH = geo.BH, Lq = geo.Lq, D = geo.D, Lk = geo.Lk, Dv = geo.Dv;
    bool causal = geo.causal;
    float scale = geo.scale;
    struct rtx_cuda_attn_mask mk;
    memset(&mk, 0, sizeof mk);
    if (Mk) {
        mk.data = rtx_tensor_data(Mk);
        mk.dt = Mk->dtype;
        mk.lead = geo.lead;
        memcpy(mk.lead_dims, geo.lead_dims, (size_t)geo.lead * sizeof *mk.lead_dims);
        memcpy(mk.lead_str, geo.mask_lead_str, (size_t)geo.lead * sizeof *mk.lead_str);
        mk.str_q = geo.mask_str_q;
        mk.str_k = geo.mask_str_k;
    }
    if (BH * Lq * Dv == 0) return 0;
    size_t esz = rtx_dtype_size(dt);
    if (Lk == 0)
        return RTX_CUDA_CHECK(
            err, cudaMemsetAsync(rtx_tensor_data(Y), 0, rtx_tensor_nbytes(Y), cu->stream));
    struct attn_route rt;
    if (attn_route_parse(getenv("RTX_ATTN_ROUTE"), &rt) < 0)
        return rtx__backend_node_err(err, a, RTX_EINVAL,
                                     "RTX_ATTN_ROUTE='%s': want auto, cudnn, flash, unfused or "
                                     "flash:TILE (m64n64, m128n64, wg1n64, wp1n64)",
                                     getenv("RTX_ATTN_ROUTE"));
    int cc = cu->cc_major * 10 + cu->cc_minor;
    bool try_cudnn = rt.kind == ROUTE_CUDNN ||
                     (rt.kind == ROUTE_AUTO && !Mk && cudnn_preferred(causal, Lk));
    if (try_cudnn) {
        int64_t h = nd >= 3 ? Q->dims[nd - 3] : 1;
        struct rtx_cuda_sdpa sp = {
            .dt = dt, .b = BH / h, .h = h, .lq = Lq, .lk = Lk, .d = D, .dv = Dv,
            .q_str = {h * Lq * D, Lq * D, D, 1}, .k_str = {h * Lk * D, Lk * D, D, 1},
            .v_str = {h * Lk * Dv, Lk * Dv, Dv, 1}, .o_str = {h * Lq * Dv, Lq * Dv, Dv, 1},
            .causal = causal, .scale = scale,
            .q = rtx_tensor_data(Q), .k = rtx_tensor_data(K), .v = rtx_tensor_data(V),
            .out = rtx_tensor_data(Y),
        };
        if (rt.kind == ROUTE_CUDNN || rtx__cudnn_sdpa_supported(&sp, cc)) {
            int rc = Mk ? rtx_err_set(err, RTX_EUNSUPPORTED, "the cuDNN route takes no mask")
                        : rtx__cudnn_sdpa(cu, &sp, err);
            if (rc == 0) {
                cu->attention_route = "cudnn";
                return 0;
            }
            if (rt.kind == ROUTE_CUDNN || rc != RTX_EUNSUPPORTED)
                return rtx__cuda_node_fail(a, rc, err);
            /* auto: cuDNN cannot run it here (no library, no engine); the other routes can */
            if (err) memset(err, 0, sizeof *err);
        }
    }
    if (rt.kind != ROUTE_UNFUSED &&
        rtx__cuda_flash_supported(dt, D, Dv, Lq, Lk, rtx_tensor_data(Q), rtx_tensor_data(K),
                                  rtx_tensor_data(V), rtx_tensor_data(Y), &mk, cc)) {
        struct rtx_cuda_flash fp = {
            .q = rtx_tensor_data(Q),
            .k = rtx_tensor_data(K),
            .v = rtx_tensor_data(V),
            .out = rtx_tensor_data(Y),
            .bh = BH,
            .lq = Lq,
            .lk = Lk,
            .d = (int32_t)D,
            .dt = dt,
            .causal = causal,
            .tile = rt.tile,
            .cc = cc,
            .scale = scale,
            .mask = mk,
        };
        if (RTX_CUDA_CHECK(err, rtx__cuda_flash_attention(&fp, cu->stream)) < 0)
            return rtx__cuda_node_fail(a, RTX_EGPU, err);
        cu->attention_route = "flash";
        return 0;
    }

    /* Heads per block: scores (f32) and, for f16/bf16, P in the input dtype. */
    size_t head_bytes = (size_t)(Lq * Lk) * (sizeof(float) + (dt == RTX_F32 ? 0 : esz));
    int64_t hb = (int64_t)(ATTN_SCRATCH / head_bytes);
    if (hb < 1) hb = 1;
    if (hb > BH) hb = BH;
    void *scratch = NULL;
    int rc = rtx__cuda_scratch(cu, head_bytes * (size_t)hb, &scratch, err);
    if (rc < 0) return rc;
    float *s = scratch;
    void *p = dt == RTX_F32 ? scratch : (void *)(s + hb * Lq * Lk);
    const char *q = rtx_tensor_data(Q), *k = rtx_tensor_data(K), *v = rtx_tensor_data(V);
    char *y = rtx_tensor_data(Y);
    for (int64_t h0 = 0; h0 < BH && rc == 0; h0 += hb) {
        int64_t n = BH - h0 < hb ? BH - h0 : hb;
        if (D == 0) {
            rc = RTX_CUDA_CHECK(
                err, cudaMemsetAsync(s, 0, (size_t)(n * Lq * Lk) * sizeof(float), cu->stream));
        } else {
            struct rtx__cuda_lt sg = {
                .type = ct,
                .d_f32 = true,
                .ta = false,
                .tb = true,
                .M = Lq,
                .N = Lk,
                .K = D,
                .lda = D,
                .ldb = D,
                .ldd = Lk,
                .batch = n,
                .sa = Lq * D,
                .sb = Lk * D,
                .sd = Lq * Lk,
                .alpha = scale,
                .beta = 0.0f,
                .a = q + (size_t)(h0 * Lq * D) * esz,
                .b = k + (size_t)(h0 * Lk * D) * esz,
                .d = s,
            };
            rc = rtx__cuda_lt_gemm(cu, &sg, err);
        }
        if (rc == 0)
            rc = RTX_CUDA_CHECK(
                err, rtx__cuda_attn_softmax(s, p, dt, n, h0, Lq, Lk, causal, &mk, cu->stream));
        if (rc == 0) {
            struct rtx__cuda_lt og = {
                .type = ct,
                .ta = false,
                .tb = false,
                .M = Lq,
                .N = Dv,
                .K = Lk,
                .lda = Lk,
                .ldb = Dv,
                .ldd = Dv,
                .batch = n,
                .sa = Lq * Lk,
                .sb = Lk * Dv,
                .sd = Lq * Dv,
                .alpha = 1.0f,
                .beta = 0.0f,
                .a = p,
                .b = v + (size_t)(h0 * Lk * Dv) * esz,
                .d = y + (size_t)(h0 * Lq * Dv) * esz,
            };
            rc = rtx__cuda_lt_gemm(cu, &og, err);
        }
    }
    rtx__cuda_scratch_release(cu, scratch);
    if (rc < 0) return rtx__cuda_node_fail(a, rc, err);
    cu->attention_route = "unfused";
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------------------------- */

int rtx__cuda_linalg(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_MATMUL: return run_matmul(cu, a, err);
    case RTX_OP_GEMM: return run_gemm(cu, a, err);
    case RTX_OP_ATTENTION: return run_attention(cu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a linalg op");
}

bool rtx__cuda_linalg_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    if (n->op != RTX_OP_MATMUL && n->op != RTX_OP_GEMM && n->op != RTX_OP_ATTENTION) return false;
    if (n->n_inputs < 1 || n->inputs[0] < 0) return false;
    enum rtx_dtype dt = g->values[n->inputs[0]].dtype;
    if (dt != RTX_F32 && dt != RTX_F16 && dt != RTX_BF16) return false;
    if (n->op == RTX_OP_ATTENTION && n->n_inputs > 3 && n->inputs[3] >= 0) {
        enum rtx_dtype mdt = g->values[n->inputs[3]].dtype;
        if (mdt != RTX_BOOL && mdt != dt) return false;
    }
    return true;
}
