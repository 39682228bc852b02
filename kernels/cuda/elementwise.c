/*
 * elementwise.c - the C half of the CUDA elementwise ops (add .. greater, cast, where): dtype
 * rules, attribute parsing, broadcast strides and dimension merging; elementwise.cu launches.
 *
 * DESIGN
 * Setup mirrors the CPU reference (kernels/cpu/ops-elementwise.c): each input gets a stride
 * per output dim (0 where it broadcasts), size-1 output dims are dropped and neighbours that
 * every operand walks as one are merged. A same-shape op so becomes one flat dim with unit
 * strides, which the kernels take as their vectorized fast path; "matrix + row" becomes two
 * dims, which the kernels take as their row-broadcast vector path. The dtype rules are those
 * of docs/ops.md, checked here so that a node the validator let through but the kernels would
 * not handle fails with a message, never a wrong result.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/launch.h"
#include "runtime/backend-impl.h"

#define DT(x) (1u << RTX_##x)
#define DT_FLOAT (DT(F32) | DT(F16) | DT(BF16))
#define DT_INT (DT(I8) | DT(I32) | DT(I64) | DT(U8))
#define DT_ALL (DT_FLOAT | DT_INT | DT(BOOL))

/* Inputs of the op and the dtypes allowed for its data inputs; 0 when not elementwise. */
static int op_inputs(enum rtx_op op, unsigned *dts) {
    switch (op) {
    case RTX_OP_ADD: case RTX_OP_SUB: case RTX_OP_MUL: case RTX_OP_DIV: case RTX_OP_POW:
        *dts = DT_FLOAT | DT_INT;
        return 2;
    case RTX_OP_NEG: case RTX_OP_ABS:
        *dts = DT_FLOAT | DT_INT;
        return 1;
    case RTX_OP_RELU:
        *dts = DT_FLOAT | DT(I8) | DT(I32) | DT(I64);
        return 1;
    case RTX_OP_SQRT: case RTX_OP_RSQRT: case RTX_OP_EXP: case RTX_OP_LOG: case RTX_OP_TANH:
    case RTX_OP_ERF: case RTX_OP_GELU: case RTX_OP_SILU: case RTX_OP_SIGMOID:
        *dts = DT_FLOAT;
        return 1;
    case RTX_OP_CAST:
        *dts = DT_ALL;
        return 1;
    case RTX_OP_WHERE:
        *dts = DT_ALL;
        return 3;
    case RTX_OP_EQUAL: case RTX_OP_LESS: case RTX_OP_GREATER:
        *dts = DT_ALL;
        return 2;
    default:
        *dts = 0;
        return 0;
    }
}

/* A node input's dtype when the graph knows it (false for values inferred at planning). */
static bool known_dtype(const struct rtx_graph *g, const struct rtx_node *n, int i,
                        enum rtx_dtype *dt) {
    int v = n->inputs[i];
    if (g == NULL || v < 0 || v >= g->n_values) return false;
    const struct rtx_value *val = &g->values[v];
    if (val->producer >= 0 && val->ndim < 0) return false;
    if ((unsigned)val->dtype >= RTX_DTYPE_COUNT) return false;
    *dt = val->dtype;
    return true;
}

bool rtx__cuda_elementwise_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    unsigned dts;
    int n_in = op_inputs(n->op, &dts);
    if (n_in == 0) return false;
    for (int i = 0; i < n->n_inputs && i < n_in; i++) {
        enum rtx_dtype dt;
        if (!known_dtype(g, n, i, &dt)) continue;
        bool cond = n->op == RTX_OP_WHERE && i == 0;
        if (cond ? dt != RTX_BOOL : (dts & (1u << dt)) == 0) return false;
    }
    return true;
}

/* Sets st[d], t's stride in elements along output dim d (0 where it broadcasts). */
static bool bcast_strides(const struct rtx_tensor *t, const struct rtx_tensor *y, int64_t *st) {
    int lead = y->ndim - t->ndim;
    int64_t s = 1;
    if (lead < 0) return false;
    for (int d = y->ndim - 1; d >= 0; d--) {
        int64_t td = d < lead ? 1 : t->dims[d - lead];
        if (td == y->dims[d])
            st[d] = s;
        else if (td == 1)
            st[d] = 0;
        else
            return false;
        s *= td;
    }
    return true;
}

int rtx__cuda_elementwise(struct rtx_cuda *cu, const struct rtx_node_args *a,
                          struct rtx_err *err) {
    struct rtx_cuda_ew p;
    memset(&p, 0, sizeof p);
    p.op = (int32_t)a->node->op;
    unsigned dts;
    int n_in = op_inputs(a->node->op, &dts);
    if (n_in == 0) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not an elementwise op");
    if (a->n_out < 1 || !a->out[0] || a->n_in < n_in)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "expected %d inputs and an output",
                                     n_in);
    struct rtx_tensor *y = a->out[0];
    const struct rtx_tensor *data0 = a->in[n_in == 3 ? 1 : 0]; /* where: x; else input 0 */
    enum rtx_dtype data_dt = data0 ? data0->dtype : y->dtype;
    for (int k = 0; k < n_in; k++) {
        const struct rtx_tensor *t = a->in[k];
        if (!t) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "input %d is missing", k);
        bool cond = p.op == RTX_OP_WHERE && k == 0;
        bool ok = cond ? t->dtype == RTX_BOOL
                       : t->dtype == data_dt && (dts & (1u << t->dtype)) != 0;
        if (!ok)
            return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "input %d has dtype %s", k,
                                         rtx_dtype_name(t->dtype));
        p.in[k] = rtx_tensor_data(t);
        p.in_dt[k] = (int32_t)t->dtype;
    }
    bool cmp = p.op == RTX_OP_EQUAL || p.op == RTX_OP_LESS || p.op == RTX_OP_GREATER;
    if ((cmp && y->dtype != RTX_BOOL) ||
        (!cmp && p.op != RTX_OP_CAST && y->dtype != data_dt))
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output dtype %s does not match",
                                     rtx_dtype_name(y->dtype));
    if (p.op == RTX_OP_GELU) {
        const char *ap = rtx_node_attr_string(a->node, "approximate", "none");
        if (strcmp(ap, "tanh") == 0)
            p.gelu_tanh = 1;
        else if (strcmp(ap, "none") != 0)
            return rtx__backend_node_err(
                err, a, RTX_EINVAL, "approximate must be \"none\" or \"tanh\", not \"%s\"", ap);
    }
    p.n_in = n_in;
    p.out_dt = (int32_t)y->dtype;
    p.out = rtx_tensor_data(y);
    p.n = rtx_tensor_numel(y);
    if (p.n == 0) return 0;

    int64_t st[RTX_CUDA_EW_IN][RTX_MAX_DIMS];
    for (int k = 0; k < n_in; k++) {
        if (!bcast_strides(a->in[k], y, st[k])) {
            char sb[96], sy[96];
            const struct rtx_tensor *t = a->in[k];
            return rtx__backend_node_err(err, a, RTX_EINTERNAL,
                                         "input %d shape %s does not broadcast to %s", k,
                                         rtx_shape_str(t->dtype, t->ndim, t->dims, sb, sizeof sb),
                                         rtx_shape_str(y->dtype, y->ndim, y->dims, sy, sizeof sy));
        }
    }
    for (int d = 0; d < y->ndim; d++) {
        if (y->dims[d] == 1) continue;
        int q = p.ndim - 1;
        bool merge = q >= 0;
        for (int k = 0; k < n_in && merge; k++) merge = p.st[k][q] == st[k][d] * y->dims[d];
        if (merge) {
            p.dims[q] *= y->dims[d];
            for (int k = 0; k < n_in; k++) p.st[k][q] = st[k][d];
            continue;
        }
        p.dims[p.ndim] = y->dims[d];
        for (int k = 0; k < n_in; k++) p.st[k][p.ndim] = st[k][d];
        p.ndim++;
    }
    if (p.ndim == 0) {
        p.ndim = 1;
        p.dims[0] = 1;
        for (int k = 0; k < n_in; k++) p.st[k][0] = 0;
    }
    int rc = RTX_CUDA_CHECK(err, rtx__cuda_ew_launch(&p, cu->stream));
    if (rc && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return rtx__backend_node_err(err, a, rc, "%s", msg);
    }
    return rc;
}
