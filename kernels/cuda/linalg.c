/*
 * linalg.c - matmul, gemm and attention on the CUDA backend through cuBLASLt (docs/ops.md).
 *
 * DESIGN
 * Layout. Tensors are row-major; cuBLASLt is used in its default column-major order with the
 * usual identity: a row-major [M, N] = op(A) op(B) is, read as column-major, the [N, M] matrix
 * op(B)^T op(A)^T. So every product is issued as D = op(b) x op(a) with m = N, n = M, the
 * row-major b as cuBLASLt's A operand and a as its B operand, with the transpose flags as
 * given. No data moves and no CUBLASLT_ORDER_ROW layouts are needed (those have fewer kernels).
 *
 * Types. f32 computes in CUBLAS_COMPUTE_32F, or 32F_FAST_TF32 when the backend allows TF32;
 * f16 and bf16 take f16/bf16 operands and output with f32 accumulation (CUBLAS_COMPUTE_32F,
 * f32 alpha and beta), so the result is rounded once, as on the CPU.
 *
 * Batches. matmul's batch dims broadcast. When b is one shared matrix and a is not transposed,
 * the batch folds into the rows of a (one GEMM of M' = batch x M). Otherwise, when each
 * operand is either one matrix per batch or one matrix for all, one strided-batched call
 * (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET, stride 0 for the shared one);
 * any other pattern ([2,1] x [1,3] batch dims) is one GEMM per output matrix.
 *
 * Algorithms. cublasLtMatmulAlgoGetHeuristic picks one algorithm for the backend's workspace
 * and the operands' pointer alignment (set as MIN_ALIGNMENT preferences, so an unaligned batch
 * offset never gets an algorithm that needs 256-byte alignment). The choice is cached in a
 * process-wide table of ALGO_CACHE entries keyed by the handle, every dimension, stride,
 * dtype, transpose and alignment, guarded by a mutex and replaced round-robin.
 *
 * gemm. c is broadcast into y first by a small kernel (linalg-kernels.cu), then the GEMM adds
 * alpha op(a) op(b) with beta as its C scale (C = D = y). With K = 0 the kernel writes beta c.
 *
 * attention. Per block of heads: scores S = scale q k^T in f32 scratch by one strided-batched
 * call (f16/bf16 q and k, f32 output), a row-softmax kernel with the causal and user masks, then
 * out = P v by a second strided-batched call. For f32 inputs P overwrites S; for f16/bf16, P is
 * rounded to the input dtype so the second GEMM runs on tensor cores with f32 accumulation:
 * probabilities carry about 3 (f16) or 2 (bf16) significant digits there, against the CPU's
 * f32 P, which the tests' tolerances account for. Heads go in blocks whose scores fit in
 * ATTN_SCRATCH bytes (at least one head per block).
 */
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/backend-impl.h"
#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/linalg-kernels.h"

#define ALGO_CACHE 128                   /* cached heuristic results */
#define ATTN_SCRATCH ((size_t)256 << 20) /* bytes of scores per block of heads, at most */

/* Checks a cuBLAS(Lt) call: 0 on CUBLAS_STATUS_SUCCESS, else RTX_EGPU with the status name,
 * the statement, the function, the file and line in err. */
#define RTX_CUBLAS_CHECK(err, stmt)                                                               \
    cublas_check((stmt), #stmt, __func__, __FILE__, __LINE__, (err))

static int cublas_check(cublasStatus_t st, const char *stmt, const char *func, const char *file,
                        int line, struct rtx_err *err) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    return rtx_err_set(err, RTX_EGPU, "%s: %s (%s in %s, %s:%d)", cublasLtGetStatusName(st),
                       cublasLtGetStatusString(st), stmt, func, file, line);
}

/* ------------------------------------------------------------------------------------------
 * One cuBLASLt product, row-major
 * ---------------------------------------------------------------------------------------- */

/* c[batch][M, N] = alpha op(a)[M, K] op(b)[K, N] + beta c, all row-major. */
struct lt_gemm {
    cudaDataType_t ab_type, c_type; /* operand and output storage types */
    bool ta, tb;
    int64_t M, N, K;
    int64_t lda, ldb, ldc; /* row-major leading dims, elements */
    int64_t batch;         /* >= 1 */
    int64_t sa, sb, sc;    /* batch strides, elements; 0: one shared matrix */
    float alpha, beta;
    const void *a, *b;
    void *c; /* read (beta != 0) and written */
};

struct algo_key {
    const void *handle;
    int ab_type, c_type, compute;
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc, batch, sa, sb, sc;
    uint32_t align_a, align_b, align_c;
};

struct algo_entry {
    bool used;
    struct algo_key key;
    cublasLtMatmulAlgo_t algo;
};

static pthread_mutex_t algo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct algo_entry algo_cache[ALGO_CACHE];
static int algo_next; /* round-robin victim */

static bool algo_lookup(const struct algo_key *k, cublasLtMatmulAlgo_t *algo) {
    bool found = false;
    pthread_mutex_lock(&algo_lock);
    for (int i = 0; i < ALGO_CACHE && !found; i++) {
        if (algo_cache[i].used && memcmp(&algo_cache[i].key, k, sizeof *k) == 0) {
            *algo = algo_cache[i].algo;
            found = true;
        }
    }
    pthread_mutex_unlock(&algo_lock);
    return found;
}

static void algo_store(const struct algo_key *k, const cublasLtMatmulAlgo_t *algo) {
    pthread_mutex_lock(&algo_lock);
    struct algo_entry *e = &algo_cache[algo_next];
    algo_next = (algo_next + 1) % ALGO_CACHE;
    e->used = true;
    e->key = *k;
    e->algo = *algo;
    pthread_mutex_unlock(&algo_lock);
}

/* The largest power of two (up to 256) that divides the address. */
static uint32_t ptr_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && v % al != 0)
        al >>= 1;
    return al;
}

/* A column-major layout of rows x cols with leading dim ld, batched. */
static int make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                       int64_t ld, int64_t batch, int64_t stride, struct rtx_err *err) {
    int rc = RTX_CUBLAS_CHECK(
        err, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (rc < 0) return rc;
    if (batch > 1) {
        int32_t n = (int32_t)batch;
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatrixLayoutSetAttribute(
                                       *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(
                err, cublasLtMatrixLayoutSetAttribute(
                         *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return rc;
}

static int lt_matmul(struct rtx_cuda *cu, const struct lt_gemm *g, struct rtx_err *err) {
    cublasLtHandle_t h = (cublasLtHandle_t)cu->blaslt;
    if (g->batch > INT32_MAX)
        return rtx_err_set(err, RTX_ELIMIT, "batch of %lld matrices over %d", (long long)g->batch,
                           INT32_MAX);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (g->ab_type == CUDA_R_32F && cu->allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    /* cuBLASLt's A is our b, its B our a (see DESIGN). */
    cublasOperation_t op_a = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    if (rc == 0)
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(
                                       desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    if (rc == 0)
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(
                                       desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (rc == 0)
        rc = make_layout(&la, g->ab_type, g->tb ? g->K : g->N, g->tb ? g->N : g->K, g->ldb,
                         g->batch, g->sb, err);
    if (rc == 0)
        rc = make_layout(&lb, g->ab_type, g->ta ? g->M : g->K, g->ta ? g->K : g->M, g->lda,
                         g->batch, g->sa, err);
    if (rc == 0) rc = make_layout(&lc, g->c_type, g->N, g->M, g->ldc, g->batch, g->sc, err);
    if (rc < 0) goto done;

    struct algo_key key;
    memset(&key, 0, sizeof key); /* padding too: the key is compared with memcmp */
    key.handle = cu->blaslt;
    key.ab_type = g->ab_type;
    key.c_type = g->c_type;
    key.compute = compute;
    key.ta = g->ta;
    key.tb = g->tb;
    key.M = g->M;
    key.N = g->N;
    key.K = g->K;
    key.lda = g->lda;
    key.ldb = g->ldb;
    key.ldc = g->ldc;
    key.batch = g->batch;
    key.sa = g->sa;
    key.sb = g->sb;
    key.sc = g->sc;
    key.align_a = ptr_align(g->b); /* cuBLASLt's A */
    key.align_b = ptr_align(g->a);
    key.align_c = ptr_align(g->c);
    cublasLtMatmulAlgo_t algo;
    if (!algo_lookup(&key, &algo)) {
        uint64_t ws = cu->blaslt_workspace_bytes;
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceCreate(&pref));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(
                err, cublasLtMatmulPreferenceSetAttribute(
                         pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                           pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &key.align_a, sizeof key.align_a));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                           pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &key.align_b, sizeof key.align_b));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                           pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &key.align_c, sizeof key.align_c));
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                           pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &key.align_c, sizeof key.align_c));
        cublasLtMatmulHeuristicResult_t res;
        int n_res = 0;
        memset(&res, 0, sizeof res);
        if (rc == 0)
            rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc,
                                                                      pref, 1, &res, &n_res));
        if (rc < 0) goto done;
        if (n_res < 1) {
            rc = rtx_err_set(err, RTX_EUNSUPPORTED,
                             "cuBLASLt has no algorithm for [%lld,%lld]x[%lld,%lld] (batch %lld)",
                             (long long)g->M, (long long)g->K, (long long)g->K, (long long)g->N,
                             (long long)g->batch);
            goto done;
        }
        algo = res.algo;
        algo_store(&key, &algo);
    }
    rc = RTX_CUBLAS_CHECK(err, cublasLtMatmul(h, desc, &g->alpha, g->b, la, g->a, lb, &g->beta,
                                              g->c, lc, g->c, lc, &algo, cu->blaslt_workspace,
                                              cu->blaslt_workspace_bytes, cu->stream));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return rc;
}

static int dtype_cuda(enum rtx_dtype dt, cudaDataType_t *t) {
    switch (dt) {
    case RTX_F32: *t = CUDA_R_32F; return 0;
    case RTX_F16: *t = CUDA_R_16F; return 0;
    case RTX_BF16: *t = CUDA_R_16BF; return 0;
    default: return RTX_EUNSUPPORTED;
    }
}

/* Prefixes a failing product's message with the node, as rtx__cuda_node_err does. */
static int node_fail(const struct rtx_node_args *a, int rc, struct rtx_err *err) {
    if (err == NULL) return rc;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    return rtx__cuda_node_err(err, a, rc, "%s", msg);
}

/* ------------------------------------------------------------------------------------------
 * matmul
 * ---------------------------------------------------------------------------------------- */

static int run_matmul(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (dtype_cuda(A->dtype, &ct) < 0 || B->dtype != A->dtype || Y->dtype != A->dtype)
        return rtx__cuda_node_err(err, a, RTX_EUNSUPPORTED, "matmul of %s",
                                  rtx_dtype_name(A->dtype));
    struct rtx__matmul_geom geo;
    char why[128];
    if (rtx__matmul_geometry(a->node, A, B, &geo, why, sizeof why))
        return rtx__cuda_node_err(err, a, RTX_EINVAL, "%s", why);
    bool ta = geo.ta, tb = geo.tb;
    int64_t M = geo.M, K = geo.K, N = geo.N, nbatch = geo.nbatch;
    int64_t a_mats = geo.a_mats, b_mats = geo.b_mats;
    int nbat = geo.nbat;
    const int64_t *odims = geo.batch_dims, *astr = geo.a_stride, *bstr = geo.b_stride;
    if (rtx_tensor_numel(Y) != nbatch * M * N)
        return rtx__cuda_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                  (long long)rtx_tensor_numel(Y), (long long)(nbatch * M * N));
    if (nbatch * M * N == 0) return 0;
    size_t esz = rtx_dtype_size(A->dtype);
    if (K == 0)
        return RTX_CUDA_CHECK(err, cudaMemsetAsync(rtx_tensor_data(Y), 0,
                                                   (size_t)(nbatch * M * N) * esz, cu->stream));

    struct lt_gemm g = {
        .ab_type = ct,
        .c_type = ct,
        .ta = ta,
        .tb = tb,
        .M = M,
        .N = N,
        .K = K,
        .lda = ta ? M : K,
        .ldb = tb ? K : N,
        .ldc = N,
        .batch = 1,
        .alpha = 1.0f,
        .beta = 0.0f,
        .a = rtx_tensor_data(A),
        .b = rtx_tensor_data(B),
        .c = rtx_tensor_data(Y),
    };
    int rc;
    if (nbatch == 1 || (b_mats == 1 && !ta)) {
        g.M = nbatch * M; /* a's batch folds into its rows */
        rc = lt_matmul(cu, &g, err);
    } else if ((a_mats == 1 || a_mats == nbatch) && (b_mats == 1 || b_mats == nbatch)) {
        g.batch = nbatch;
        g.sa = a_mats == 1 ? 0 : M * K;
        g.sb = b_mats == 1 ? 0 : K * N;
        g.sc = M * N;
        rc = lt_matmul(cu, &g, err);
    } else {
        /* One GEMM per output matrix, the operands found by an odometer over the batch dims. */
        int64_t idx[RTX_MAX_DIMS] = {0}, ao = 0, bo = 0;
        rc = 0;
        for (int64_t i = 0; i < nbatch && rc == 0; i++) {
            g.a = (const char *)rtx_tensor_data(A) + (size_t)(ao * M * K) * esz;
            g.b = (const char *)rtx_tensor_data(B) + (size_t)(bo * K * N) * esz;
            g.c = (char *)rtx_tensor_data(Y) + (size_t)(i * M * N) * esz;
            rc = lt_matmul(cu, &g, err);
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
    return rc < 0 ? node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * gemm
 * ---------------------------------------------------------------------------------------- */

static int run_gemm(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *A = a->in[0], *B = a->in[1];
    const struct rtx_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    struct rtx_tensor *Y = a->out[0];
    cudaDataType_t ct;
    if (dtype_cuda(A->dtype, &ct) < 0 || B->dtype != A->dtype || Y->dtype != A->dtype ||
        (C && C->dtype != A->dtype))
        return rtx__cuda_node_err(err, a, RTX_EUNSUPPORTED, "gemm of %s",
                                  rtx_dtype_name(A->dtype));
    struct rtx__gemm_geom geo;
    char why[128];
    if (rtx__gemm_geometry(a->node, A, B, C, Y, &geo, why, sizeof why))
        return rtx__cuda_node_err(err, a, RTX_EINVAL, "%s", why);
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
    struct lt_gemm g = {
        .ab_type = ct,
        .c_type = ct,
        .ta = ta,
        .tb = tb,
        .M = M,
        .N = N,
        .K = K,
        .lda = ta ? M : K,
        .ldb = tb ? K : N,
        .ldc = N,
        .batch = 1,
        .alpha = alpha,
        .beta = C ? beta : 0.0f,
        .a = rtx_tensor_data(A),
        .b = rtx_tensor_data(B),
        .c = y,
    };
    rc = lt_matmul(cu, &g, err);
    return rc < 0 ? node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * attention
 * ---------------------------------------------------------------------------------------- */

static int run_attention(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *Q = a->in[0], *K = a->in[1], *V = a->in[2];
    const struct rtx_tensor *Mk = a->n_in > 3 ? a->in[3] : NULL;
    struct rtx_tensor *Y = a->out[0];
    enum rtx_dtype dt = Q->dtype;
    cudaDataType_t ct;
    if (dtype_cuda(dt, &ct) < 0 || K->dtype != dt || V->dtype != dt || Y->dtype != dt)
        return rtx__cuda_node_err(err, a, RTX_EUNSUPPORTED, "attention of %s", rtx_dtype_name(dt));
    int nd = Q->ndim;
    if (nd < 2 || K->ndim != nd || V->ndim != nd)
        return rtx__cuda_node_err(err, a, RTX_EINVAL, "q, k, v need one rank >= 2");
    int lead = nd - 2;
    int64_t BH = 1;
    for (int d = 0; d < lead; d++) {
        if (K->dims[d] != Q->dims[d] || V->dims[d] != Q->dims[d])
            return rtx__cuda_node_err(err, a, RTX_EINVAL, "leading dimension %d differs", d);
        BH *= Q->dims[d];
    }
    int64_t Lq = Q->dims[nd - 2], D = Q->dims[nd - 1], Lk = K->dims[nd - 2];
    int64_t Dv = V->dims[nd - 1];
    if (K->dims[nd - 1] != D || V->dims[nd - 2] != Lk)
        return rtx__cuda_node_err(err, a, RTX_EINVAL, "k or v does not match q's shape");
    if (rtx_tensor_numel(Y) != BH * Lq * Dv)
        return rtx__cuda_node_err(err, a, RTX_EINTERNAL, "output has %lld elements, want %lld",
                                  (long long)rtx_tensor_numel(Y), (long long)(BH * Lq * Dv));
    bool causal = rtx_node_attr_int(a->node, "causal", 0) != 0;
    float scale =
        (float)rtx_node_attr_float(a->node, "scale", D > 0 ? 1.0 / sqrt((double)D) : 1.0);
    struct rtx_cuda_attn_mask mk;
    memset(&mk, 0, sizeof mk);
    if (Mk) {
        if (Mk->ndim > nd)
            return rtx__cuda_node_err(err, a, RTX_EINVAL, "mask has rank %d > %d", Mk->ndim, nd);
        if (Mk->dtype != RTX_BOOL && Mk->dtype != dt)
            return rtx__cuda_node_err(err, a, RTX_EINVAL, "mask of %s", rtx_dtype_name(Mk->dtype));
        int64_t full[RTX_MAX_DIMS], str[RTX_MAX_DIMS], step = 1;
        memcpy(full, Q->dims, (size_t)lead * sizeof *full);
        full[nd - 2] = Lq;
        full[nd - 1] = Lk;
        for (int d = nd - 1; d >= 0; d--) {
            int md = d - (nd - Mk->ndim);
            int64_t dm = md >= 0 ? Mk->dims[md] : 1;
            if (dm != 1 && dm != full[d])
                return rtx__cuda_node_err(err, a, RTX_EINVAL,
                                          "mask dimension %d (%lld) does not broadcast to %lld",
                                          md, (long long)dm, (long long)full[d]);
            str[d] = dm == 1 ? 0 : step;
            step *= dm;
        }
        mk.data = rtx_tensor_data(Mk);
        mk.dt = Mk->dtype;
        mk.lead = lead;
        memcpy(mk.lead_dims, Q->dims, (size_t)lead * sizeof *mk.lead_dims);
        memcpy(mk.lead_str, str, (size_t)lead * sizeof *str);
        mk.str_q = str[nd - 2];
        mk.str_k = str[nd - 1];
    }
    if (BH * Lq * Dv == 0) return 0;
    size_t esz = rtx_dtype_size(dt);
    if (Lk == 0)
        return RTX_CUDA_CHECK(
            err, cudaMemsetAsync(rtx_tensor_data(Y), 0, rtx_tensor_nbytes(Y), cu->stream));

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
            struct lt_gemm sg = {
                .ab_type = ct,
                .c_type = CUDA_R_32F,
                .ta = false,
                .tb = true,
                .M = Lq,
                .N = Lk,
                .K = D,
                .lda = D,
                .ldb = D,
                .ldc = Lk,
                .batch = n,
                .sa = Lq * D,
                .sb = Lk * D,
                .sc = Lq * Lk,
                .alpha = scale,
                .beta = 0.0f,
                .a = q + (size_t)(h0 * Lq * D) * esz,
                .b = k + (size_t)(h0 * Lk * D) * esz,
                .c = s,
            };
            rc = lt_matmul(cu, &sg, err);
        }
        if (rc == 0)
            rc = RTX_CUDA_CHECK(
                err, rtx__cuda_attn_softmax(s, p, dt, n, h0, Lq, Lk, causal, &mk, cu->stream));
        if (rc == 0) {
            struct lt_gemm og = {
                .ab_type = ct,
                .c_type = ct,
                .ta = false,
                .tb = false,
                .M = Lq,
                .N = Dv,
                .K = Lk,
                .lda = Lk,
                .ldb = Dv,
                .ldc = Dv,
                .batch = n,
                .sa = Lq * Lk,
                .sb = Lk * Dv,
                .sc = Lq * Dv,
                .alpha = 1.0f,
                .beta = 0.0f,
                .a = p,
                .b = v + (size_t)(h0 * Lk * Dv) * esz,
                .c = y + (size_t)(h0 * Lq * Dv) * esz,
            };
            rc = lt_matmul(cu, &og, err);
        }
    }
    rtx__cuda_scratch_release(cu, scratch);
    return rc < 0 ? node_fail(a, rc, err) : 0;
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
    return rtx__cuda_node_err(err, a, RTX_EINTERNAL, "not a linalg op");
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
