/*
 * fused.c - fused node groups on the CUDA backend: a matmul by a 2-D weight followed by the
 * add of a bias row, and optionally by a tanh GELU or by a residual add, as one cuBLASLt call
 * with a BIAS or GELU_BIAS epilogue (gemm-lt.c).
 *
 * DESIGN
 * The executor asks the backend, before each node, how many of the following nodes it runs
 * as one group (rtx_backend_fused_span) and passes how many readers every value has. The
 * group is matmul(a, w) -> add(mm, b) [-> gelu(approximate = "tanh") | -> add(s, r)] where
 * each link's value has exactly one reader (the next node) and is not a graph output, so it
 * may stay unwritten. The residual r goes in as cuBLASLt's C with beta = 1.
 * Shapes are known only at run time: rtx__cuda_run_fused checks them (w 2-D [K, N], no
 * transposes, b [N] of the same dtype, the add's output shaped like the product) and runs the
 * nodes one by one when they do not fit. The product's rows fold every leading dim of a
 * (M = numel(a) / K). The epilogue adds the bias to the f32 accumulator and rounds once,
 * where the unfused path rounds the product first (so the fused result is the closer one).
 * The GELU epilogue (tanh approximation, cuBLASLt's own) is used for bf16 only, where its
 * difference from the CPU's formula stays below half a bf16 unit; f16 and f32 run the gelu
 * node by itself after the fused matmul + bias.
 */
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "runtime/backend-impl.h"

int rtx__cuda_fused_span(const struct rtx_graph *g, const int *order, int n, const int *uses) {
    if (n < 2) return 1;
    const struct rtx_node *mm = &g->nodes[order[0]], *add = &g->nodes[order[1]];
    if (mm->op != RTX_OP_MATMUL || mm->n_inputs != 2 || mm->n_outputs != 1 ||
        rtx_node_attr_int(mm, "trans_a", 0) != 0 || rtx_node_attr_int(mm, "trans_b", 0) != 0)
        return 1;
    int v = mm->outputs[0];
    if (uses[v] != 1 || add->op != RTX_OP_ADD || add->n_inputs != 2 || add->n_outputs != 1 ||
        (add->inputs[0] == v) == (add->inputs[1] == v))
        return 1;
    int s = add->outputs[0];
    if (n < 3 || uses[s] != 1) return 2;
    const struct rtx_node *nx = &g->nodes[order[2]];
    const char *approx = rtx_node_attr_string(nx, "approximate", "none");
    if (nx->op == RTX_OP_GELU && nx->n_inputs == 1 && nx->inputs[0] == s && approx &&
        strcmp(approx, "tanh") == 0)
        return 3;
    if (nx->op == RTX_OP_ADD && nx->n_inputs == 2 && nx->n_outputs == 1 &&
        (nx->inputs[0] == s) != (nx->inputs[1] == s))
        return 3;
    return 2;
}

static bool same_shape(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

int rtx__cuda_run_fused(struct rtx_cuda *cu, const struct rtx_node_args *args, int n,
                        int (*run_node)(struct rtx_cuda *cu, const struct rtx_node_args *a,
                                        struct rtx_err *err),
                        struct rtx_err *err) {
    const struct rtx_node_args *am = &args[0], *aa = &args[1];
    bool fits = n >= 2 && n <= 3 && am->n_in == 2 && aa->n_in == 2 && am->n_out == 1 &&
                aa->n_out == 1;
    const struct rtx_tensor *A = fits ? am->in[0] : NULL, *W = fits ? am->in[1] : NULL;
    const struct rtx_tensor *MM = fits ? am->out[0] : NULL, *Y1 = fits ? aa->out[0] : NULL;
    const struct rtx_tensor *bias = NULL;
    if (fits) bias = aa->in[0] == MM ? aa->in[1] : aa->in[0];
    enum rtx_dtype dt = A ? A->dtype : RTX_F32;
    cudaDataType_t ct = CUDA_R_32F;
    fits = fits && rtx__cuda_data_type(dt, &ct) == 0 && W->dtype == dt &&
           bias->dtype == dt && Y1->dtype == dt && A->ndim >= 2 && W->ndim == 2 &&
           bias->ndim == 1 && W->dims[0] == A->dims[A->ndim - 1] && bias->dims[0] == W->dims[1] &&
           same_shape(MM, Y1) && rtx_tensor_numel(Y1) > 0 && W->dims[0] > 0;
    bool third = fits && n == 3 && args[2].n_out == 1 && args[2].out[0]->dtype == dt &&
                 same_shape(args[2].out[0], Y1);
    bool gelu = third && args[2].node->op == RTX_OP_GELU && dt == RTX_BF16;
    const struct rtx_tensor *res = NULL;
    if (third && args[2].node->op == RTX_OP_ADD && args[2].n_in == 2) {
        res = args[2].in[0] == Y1 ? args[2].in[1] : args[2].in[0];
        if (res->dtype != dt || !same_shape(res, Y1)) res = NULL;
    }
    if (!fits) {
        for (int i = 0; i < n; i++) {
            int rc = run_node(cu, &args[i], err);
            if (rc) return rc;
        }
        return 0;
    }
    int64_t K = W->dims[0], N = W->dims[1];
    struct rtx__cuda_lt lt = {
        .type = ct, .M = rtx_tensor_numel(A) / K, .N = N, .K = K, .lda = K, .ldb = N, .ldd = N,
        .batch = 1, .alpha = 1.0f, .beta = res ? 1.0f : 0.0f, .a = rtx_tensor_data(A),
        .b = rtx_tensor_data(W), .c = res ? rtx_tensor_data(res) : NULL,
        .bias = rtx_tensor_data(bias),
        .d = rtx_tensor_data(gelu || res ? args[2].out[0] : Y1), .gelu = gelu,
    };
    /* one alignment for every operand, the bias included */
    lt.align = rtx__cuda_lt_align((uintptr_t)lt.a | (uintptr_t)lt.b | (uintptr_t)lt.d |
                                  (uintptr_t)lt.c | (uintptr_t)lt.bias);
    int rc = rtx__cuda_lt_gemm(cu, &lt, err);
    if (rc) return rtx__backend_node_err(err, am, rc, "fused with its bias add%s: %s",
                                         gelu ? " and gelu" : res ? " and residual add" : "",
                                         err ? err->msg : "");
    if (n == 3 && !gelu && !res) return run_node(cu, &args[2], err);
    return 0;
}
