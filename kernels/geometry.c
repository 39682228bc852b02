/*
 * geometry.c - index arithmetic that every backend needs in the same form: which view of the
 * input a slice node selects, and how a batched matmul's operands map onto its output
 * batches. One implementation, so the CPU reference and the device backends cannot drift.
 */
#include <string.h>

#include "kernels/backend-impl.h"

int rtx__slice_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                    struct rtx__slice_view *v, char *why, size_t why_len) {
    const int64_t *starts, *ends, *axes = NULL, *steps = NULL;
    int k = rtx_node_attr_ints(node, "starts", &starts);
    int ke = rtx_node_attr_ints(node, "ends", &ends);
    int ka = rtx_node_attr_ints(node, "axes", &axes);
    int ks = rtx_node_attr_ints(node, "steps", &steps);
    if (k < 0 || ke != k || (ka >= 0 && ka != k) || (ks >= 0 && ks != k) || k > nd) {
        snprintf(why, why_len, "starts, ends, axes and steps need one length <= rank %d", nd);
        return RTX_EINVAL;
    }
    int64_t xs[RTX_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        xs[d] = s;
        s *= in_dims[d];
    }
    v->ndim = nd;
    memcpy(v->dims, in_dims, (size_t)nd * sizeof *v->dims);
    memcpy(v->strides, xs, (size_t)nd * sizeof *v->strides);
    v->offset = 0;
    bool seen[RTX_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t ax = ka >= 0 ? axes[i] : i, step = ks >= 0 ? steps[i] : 1, first;
        if (ax < 0) ax += nd;
        if (ax < 0 || ax >= nd || seen[ax] || step == 0) {
            snprintf(why, why_len, "bad axis or zero step at entry %d", i);
            return RTX_EINVAL;
        }
        seen[ax] = true;
        v->dims[ax] = rtx_slice_range(in_dims[ax], starts[i], ends[i], step, &first);
        if (v->dims[ax] > 0) v->offset += first * xs[ax];
        v->strides[ax] = xs[ax] * step;
    }
    return 0;
}

/* Rows and columns of an operand as a matrix: 1-D a is a row, 1-D b a column. */
static void matrix_dims(const struct rtx_tensor *t, bool is_a, bool trans, int64_t *rows,
                        int64_t *cols) {
    if (t->ndim == 1) {
        *rows = is_a ? 1 : t->dims[0];
        *cols = is_a ? t->dims[0] : 1;
        return;
    }
    int64_t r = t->dims[t->ndim - 2], c = t->dims[t->ndim - 1];
    *rows = trans ? c : r;
    *cols = trans ? r : c;
}

int rtx__matmul_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                         const struct rtx_tensor *B, struct rtx__matmul_geom *g, char *why,
                         size_t why_len) {
    memset(g, 0, sizeof *g);
    if (A->ndim < 1 || B->ndim < 1) {
        snprintf(why, why_len, "operands must have rank >= 1");
        return RTX_EINVAL;
    }
    g->ta = rtx_node_attr_int(node, "trans_a", 0) != 0 && A->ndim >= 2;
    g->tb = rtx_node_attr_int(node, "trans_b", 0) != 0 && B->ndim >= 2;
    int64_t kb;
    matrix_dims(A, true, g->ta, &g->M, &g->K);
    matrix_dims(B, false, g->tb, &kb, &g->N);
    if (g->K != kb) {
        snprintf(why, why_len, "inner dimensions %lld and %lld differ", (long long)g->K,
                 (long long)kb);
        return RTX_EINVAL;
    }
    int abat = A->ndim > 2 ? A->ndim - 2 : 0, bbat = B->ndim > 2 ? B->ndim - 2 : 0;
    g->nbat = abat > bbat ? abat : bbat;
    g->nbatch = g->a_mats = g->b_mats = 1;
    for (int i = g->nbat - 1; i >= 0; i--) {
        int ai = i - (g->nbat - abat), bi = i - (g->nbat - bbat);
        int64_t da = ai >= 0 ? A->dims[ai] : 1, db = bi >= 0 ? B->dims[bi] : 1;
        if (da != db && da != 1 && db != 1) {
            snprintf(why, why_len, "batch dimensions %lld and %lld do not broadcast",
                     (long long)da, (long long)db);
            return RTX_EINVAL;
        }
        g->batch_dims[i] = da == 1 ? db : da;
        g->a_stride[i] = da == 1 ? 0 : g->a_mats;
        g->b_stride[i] = db == 1 ? 0 : g->b_mats;
        g->a_mats *= da;
        g->b_mats *= db;
        g->nbatch *= g->batch_dims[i];
    }
    return 0;
}
