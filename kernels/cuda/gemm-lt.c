/*
 * gemm-lt.c - the CUDA backend's one path to cuBLASLt: a row-major product with an optional
 * C operand and bias / GELU epilogue, used by matmul, gemm and unfused attention (linalg.c),
 * conv2d's per-group GEMMs (conv.c) and the fused matmul + bias (+ GELU | + residual) groups
 * (fused.c); and the small helpers those files share around it (dtype mapping, alignment,
 * node-prefixed failures).
 *
 * DESIGN
 * Layout. Tensors are row-major; cuBLASLt is used in its default column-major order with the
 * usual identity: the row-major D[M, N] = op(a) op(b) is, read as column-major, the [N, M]
 * matrix op(b)^T op(a)^T. So every product is issued as cuBLASLt's D = op(b) x op(a) with
 * m = N, n = M, our b as its A operand and our a as its B operand, with the transpose flags as
 * given. No data moves and no CUBLASLT_ORDER_ROW layouts are needed (those have fewer kernels).
 * A bias of N elements is then a vector over cuBLASLt's rows, which is exactly what
 * CUBLASLT_EPILOGUE_BIAS adds (broadcast over the M rows of the row-major result); GELU_BIAS
 * applies the tanh-approximated GELU after it.
 *
 * Types. f32 computes in CUBLAS_COMPUTE_32F, or 32F_FAST_TF32 when the backend allows TF32;
 * f16 and bf16 take f16/bf16 operands with f32 accumulation (CUBLAS_COMPUTE_32F, f32 alpha and
 * beta), so D = alpha op(a) op(b) + beta C + bias is rounded once to D's type (the input
 * dtype, or f32 for attention's scores).
 *
 * Algorithms. cublasLtMatmulAlgoGetHeuristic picks one algorithm for the backend's fixed
 * workspace (so products can be captured into CUDA graphs) and the operands' alignment, set
 * as MIN_ALIGNMENT preferences so an unaligned batch offset never gets an algorithm that needs
 * 256-byte alignment: each base pointer's own, or one alignment the caller computed over every
 * pointer of a series of calls (conv2d's groups and chunks). The choice is cached in a
 * process-wide table of LT_CACHE entries keyed by every field that reaches the heuristic
 * (handle, types, compute type, epilogue, transposes, dimensions, strides, alignments),
 * guarded by a mutex and replaced round-robin: repeated plans pay the heuristic once.
 */
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "runtime/backend-impl.h"
#include "runtime/runtime.h"

#define LT_CACHE 128 /* cached heuristic results */

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
 * Shared helpers
 * ---------------------------------------------------------------------------------------- */

int rtx__cuda_data_type(enum rtx_dtype dt, cudaDataType_t *t) {
    switch (dt) {
    case RTX_F32: *t = CUDA_R_32F; return 0;
    case RTX_F16: *t = CUDA_R_16F; return 0;
    case RTX_BF16: *t = CUDA_R_16BF; return 0;
    default: return RTX_EUNSUPPORTED;
    }
}

int rtx__cuda_node_fail(const struct rtx_node_args *a, int rc, struct rtx_err *err) {
    if (err == NULL) return rc;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    return rtx__backend_node_err(err, a, rc, "%s", msg);
}

uint32_t rtx__cuda_lt_align(uintptr_t bits) {
    uint32_t al = 256;
    while (al > 1 && bits % al != 0) al >>= 1;
    return al;
}

/* ------------------------------------------------------------------------------------------
 * The algorithm cache
 * ---------------------------------------------------------------------------------------- */

struct lt_key {
    const void *handle;
    int type, d_type, compute, epilogue;
    int ta, tb, has_c;
    int64_t M, N, K, lda, ldb, ldd, batch, sa, sb, sc, sd;
    uint32_t align_a, align_b, align_c, align_d; /* cuBLASLt's A (our b), B (our a), C, D */
};

static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool used;
    struct lt_key key;
    cublasLtMatmulAlgo_t algo;
} lt_cache[LT_CACHE];
static int lt_next; /* round-robin victim */

static bool lt_lookup(const struct lt_key *k, cublasLtMatmulAlgo_t *algo) {
    bool found = false;
    pthread_mutex_lock(&lt_lock);
    for (int i = 0; i < LT_CACHE && !found; i++)
        if (lt_cache[i].used && memcmp(&lt_cache[i].key, k, sizeof *k) == 0) {
            *algo = lt_cache[i].algo;
            found = true;
        }
    pthread_mutex_unlock(&lt_lock);
    return found;
}

static void lt_store(const struct lt_key *k, const cublasLtMatmulAlgo_t *algo) {
    pthread_mutex_lock(&lt_lock);
    lt_cache[lt_next].used = true;
    lt_cache[lt_next].key = *k;
    lt_cache[lt_next].algo = *algo;
    lt_next = (lt_next + 1) % LT_CACHE;
    pthread_mutex_unlock(&lt_lock);
}

/* ------------------------------------------------------------------------------------------
 * One product
 * ---------------------------------------------------------------------------------------- */

/* A column-major layout of rows x cols with leading dim ld, batched. */
static int layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                  int64_t ld, int64_t batch, int64_t stride, struct rtx_err *err) {
    int rc = RTX_CUBLAS_CHECK(
        err, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (rc == 0 && batch > 1) {
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

static int desc_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                     size_t n, struct rtx_err *err) {
    return RTX_CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(d, a, v, n));
}

/* The heuristic's algorithm for desc and the layouts, under the key's alignments. */
static int lt_heuristic(struct rtx_cuda *cu, const struct rtx__cuda_lt *g,
                        const struct lt_key *key, cublasLtMatmulDesc_t desc,
                        cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                        cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                        cublasLtMatmulAlgo_t *algo, struct rtx_err *err) {
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = cu->blaslt_workspace_bytes;
    int rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceCreate(&pref));
    if (rc == 0)
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws));
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const uint32_t *bytes;
    } al[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_d},
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0] && rc == 0; i++)
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulPreferenceSetAttribute(
                                       pref, al[i].attr, al[i].bytes, sizeof *al[i].bytes));
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    memset(&res, 0, sizeof res);
    if (rc == 0)
        rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)cu->blaslt,
                                                                  desc, la, lb, lc, ld, pref, 1,
                                                                  &res, &n_res));
    if (rc == 0 && n_res < 1)
        rc = rtx_err_set(err, RTX_EUNSUPPORTED,
                         "cuBLASLt has no algorithm for [%lld,%lld]x[%lld,%lld] (batch %lld, "
                         "epilogue %d)",
                         (long long)g->M, (long long)g->K, (long long)g->K, (long long)g->N,
                         (long long)g->batch, key->epilogue);
    if (rc == 0) *algo = res.algo;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

int rtx__cuda_lt_gemm(struct rtx_cuda *cu, const struct rtx__cuda_lt *g, struct rtx_err *err) {
    if (g->batch < 1 || g->batch > INT32_MAX)
        return rtx_err_set(err, RTX_ELIMIT, "GEMM batch of %lld outside [1, %d]",
                           (long long)g->batch, INT32_MAX);
    cudaDataType_t t = g->type, td = g->d_f32 ? CUDA_R_32F : g->type;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (t == CUDA_R_32F && cu->allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasLtEpilogue_t epi = g->bias ? (g->gelu ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                : CUBLASLT_EPILOGUE_BIAS)
                                     : (g->gelu ? CUBLASLT_EPILOGUE_GELU
                                                : CUBLASLT_EPILOGUE_DEFAULT);
    /* cuBLASLt's A is our b, its B our a (see DESIGN). */
    cublasOperation_t op_a = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    int rc = RTX_CUBLAS_CHECK(err, cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    if (rc == 0) rc = desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a, err);
    if (rc == 0) rc = desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b, err);
    if (rc == 0 && epi != CUBLASLT_EPILOGUE_DEFAULT) /* DEFAULT is the descriptor's own */
        rc = desc_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, err);
    if (rc == 0 && g->bias) {
        rc = desc_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias, err);
        if (rc == 0) rc = desc_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t, err);
    }
    if (rc == 0)
        rc = layout(&la, t, g->tb ? g->K : g->N, g->tb ? g->N : g->K, g->ldb, g->batch, g->sb,
                    err);
    if (rc == 0)
        rc = layout(&lb, t, g->ta ? g->M : g->K, g->ta ? g->K : g->M, g->lda, g->batch, g->sa,
                    err);
    if (rc == 0) rc = layout(&ld, td, g->N, g->M, g->ldd, g->batch, g->sd, err);
    if (rc == 0 && g->c) rc = layout(&lc, td, g->N, g->M, g->ldd, g->batch, g->sc, err);
    if (rc) goto done;

    struct lt_key key;
    memset(&key, 0, sizeof key); /* padding too: the key is compared with memcmp */
    key.handle = cu->blaslt;
    key.type = t;
    key.d_type = td;
    key.compute = compute;
    key.epilogue = epi;
    key.ta = g->ta;
    key.tb = g->tb;
    key.has_c = g->c != NULL;
    key.M = g->M;
    key.N = g->N;
    key.K = g->K;
    key.lda = g->lda;
    key.ldb = g->ldb;
    key.ldd = g->ldd;
    key.batch = g->batch;
    key.sa = g->sa;
    key.sb = g->sb;
    key.sc = g->c ? g->sc : 0;
    key.sd = g->sd;
    if (g->align) {
        key.align_a = key.align_b = key.align_c = key.align_d = g->align;
    } else {
        key.align_a = rtx__cuda_lt_align((uintptr_t)g->b);
        key.align_b = rtx__cuda_lt_align((uintptr_t)g->a);
        key.align_c = rtx__cuda_lt_align((uintptr_t)(g->c ? g->c : g->d));
        key.align_d = rtx__cuda_lt_align((uintptr_t)g->d);
    }
    cublasLtMatmulAlgo_t algo;
    if (!lt_lookup(&key, &algo)) {
        rc = lt_heuristic(cu, g, &key, desc, la, lb, g->c ? lc : ld, ld, &algo, err);
        if (rc) goto done;
        lt_store(&key, &algo);
    }
    rc = RTX_CUBLAS_CHECK(err, cublasLtMatmul((cublasLtHandle_t)cu->blaslt, desc, &g->alpha, g->b,
                                              la, g->a, lb, &g->beta, g->c ? g->c : g->d,
                                              g->c ? lc : ld, g->d, ld, &algo,
                                              cu->blaslt_workspace, cu->blaslt_workspace_bytes,
                                              cu->stream));
done:
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return rc;
}
