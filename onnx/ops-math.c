/*
 * ops-math.c - lowering ONNX's elementwise, logic, matrix, reduction and normalisation ops
 * to rtx ops (docs/onnx.md). Most are one rtx op; the rest are short compositions
 * (LessOrEqual = not greater, And = where(a, b, false), Reciprocal = 1 / x).
 */
#include <string.h>

#include "onnx/onnx-impl.h"

static const char *arg_of(const struct ox *c) {
    return rtx__onnx_op(c->node->op_type)->arg;
}

int ox_lower_unary(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *in = x->name;
    return ox_emit(c, arg_of(c), &in, 1, ox_out_name(c, 0), err);
}

/* a and b with b cast to a's dtype when the op allows mixed types (Pow's exponent). */
int ox_lower_binary(struct ox *c, struct rtx_err *err) {
    struct rtx_value *a = ox_in(c, 0, err), *b = a ? ox_in(c, 1, err) : NULL;
    if (!b) return RTX_EGRAPH;
    const char *ins[2] = {a->name, b->name};
    if (a->dtype != b->dtype) {
        if (strcmp(arg_of(c), "pow"))
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): inputs are %s and %s",
                               c->node->name, c->node->op_type, rtx_dtype_name(a->dtype),
                               rtx_dtype_name(b->dtype));
        const char *cast = ox_tmp(c, "cast");
        int k = ox_node(c, "cast", &ins[1], 1, cast, err);
        if (k < 0) return k;
        int rc = rtx_graph_set_attr_string(c->g, k, "to", rtx_dtype_name(a->dtype), err);
        if (rc || (rc = ox_finish(c, k, err))) return rc;
        ins[1] = cast;
    }
    return ox_emit(c, arg_of(c), ins, 2, ox_out_name(c, 0), err);
}

/* not(x) as x == false, into out. */
static int emit_not(struct ox *c, const char *x, const char *out, struct rtx_err *err) {
    const char *f = ox_scalar(c, RTX_BOOL, 0, err);
    if (!f) return RTX_ENOMEM;
    const char *ins[2] = {x, f};
    return ox_emit(c, "equal", ins, 2, out, err);
}

int ox_lower_compare(struct ox *c, struct rtx_err *err) {
    struct rtx_value *a = ox_in(c, 0, err), *b = a ? ox_in(c, 1, err) : NULL;
    if (!b) return RTX_EGRAPH;
    const char *ins[2] = {a->name, b->name};
    const char *t = ox_tmp(c, "cmp");
    /* a <= b is not (a > b); a >= b is not (a < b) */
    int rc = ox_emit(c, !strcmp(arg_of(c), "<=") ? "greater" : "less", ins, 2, t, err);
    return rc ? rc : emit_not(c, t, ox_out_name(c, 0), err);
}

int ox_lower_logic(struct ox *c, struct rtx_err *err) {
    const char *what = arg_of(c);
    struct rtx_value *a = ox_in(c, 0, err);
    if (!a) return RTX_EGRAPH;
    if (!strcmp(what, "not")) return emit_not(c, a->name, ox_out_name(c, 0), err);
    struct rtx_value *b = ox_in(c, 1, err);
    if (!b) return RTX_EGRAPH;
    bool is_and = !strcmp(what, "and");
    const char *k = ox_scalar(c, RTX_BOOL, is_and ? 0 : 1, err);
    if (!k) return RTX_ENOMEM;
    /* and: a ? b : false; or: a ? true : b */
    const char *ins[3] = {a->name, is_and ? b->name : k, is_and ? k : b->name};
    return ox_emit(c, "where", ins, 3, ox_out_name(c, 0), err);
}

int ox_lower_identity(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int rc = ox_alias(c, 0, x->name, err);
    if (rc || !*ox_out_name(c, 1)) return rc;
    /* Dropout's mask at inference: all true */
    struct rtx_tensor *mask = NULL;
    if ((rc = rtx_tensor_new(RTX_BOOL, x->ndim, x->dims, &mask, err))) return rc;
    memset(rtx_tensor_data(mask), 1, rtx_tensor_nbytes(mask));
    rc = ox_const(c, ox_out_name(c, 1), mask, err);
    rtx_tensor_unref(mask);
    return rc;
}

int ox_lower_reciprocal(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *one = ox_scalar(c, x->dtype, 1, err);
    if (!one) return RTX_ENOMEM;
    const char *ins[2] = {one, x->name};
    return ox_emit(c, "div", ins, 2, ox_out_name(c, 0), err);
}

int ox_lower_gelu(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    char buf[16];
    const char *approx = ox_attr_str(c, "approximate", "none", buf, sizeof buf);
    if (strcmp(approx, "none") && strcmp(approx, "tanh"))
        return ox_unsupported(c, err, "approximate '%s' (none or tanh)", approx);
    const char *in = x->name;
    int k = ox_node(c, "gelu", &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    int rc = rtx_graph_set_attr_string(c->g, k, "approximate", approx, err);
    return rc ? rc : ox_finish(c, k, err);
}

int ox_lower_cast(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    enum rtx_dtype to;
    int rc = rtx__onnx_dtype((int)ox_attr_int(c, "to", 0), &to, err);
    if (rc) return rtx_err_prefix(err, "node '%s' (Cast): to", c->node->name);
    if (ox_attr_int(c, "saturate", 1) != 1 && !rtx_dtype_is_float(to))
        return ox_unsupported(c, err, "saturate 0");
    const char *in = x->name;
    int k = ox_node(c, "cast", &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_string(c->g, k, "to", rtx_dtype_name(to), err);
    return rc ? rc : ox_finish(c, k, err);
}

int ox_lower_where(struct ox *c, struct rtx_err *err) {
    struct rtx_value *cond = ox_in(c, 0, err), *x = cond ? ox_in(c, 1, err) : NULL,
                     *y = x ? ox_in(c, 2, err) : NULL;
    if (!y) return RTX_EGRAPH;
    const char *ins[3] = {cond->name, x->name, y->name};
    return ox_emit(c, "where", ins, 3, ox_out_name(c, 0), err);
}

int ox_lower_softmax(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int axis;
    int rc = ox_axis(c, ox_attr_int(c, "axis", -1), x->ndim, &axis, err);
    if (rc) return rc;
    const char *in = x->name;
    int k = ox_node(c, arg_of(c), &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_int(c->g, k, "axis", axis, err);
    return rc ? rc : ox_finish(c, k, err);
}

int ox_lower_matmul(struct ox *c, struct rtx_err *err) {
    struct rtx_value *a = ox_in(c, 0, err), *b = a ? ox_in(c, 1, err) : NULL;
    if (!b) return RTX_EGRAPH;
    const char *ins[2] = {a->name, b->name};
    return ox_emit(c, "matmul", ins, 2, ox_out_name(c, 0), err);
}

int ox_lower_gemm(struct ox *c, struct rtx_err *err) {
    struct rtx_value *a = ox_in(c, 0, err), *b = a ? ox_in(c, 1, err) : NULL;
    if (!b) return RTX_EGRAPH;
    const char *ins[3] = {a->name, b->name, ox_has_in(c, 2) ? ox_in_name(c, 2) : ""};
    int k = ox_node(c, "gemm", ins, ox_has_in(c, 2) ? 3 : 2, ox_out_name(c, 0), err);
    if (k < 0) return k;
    int rc = rtx_graph_set_attr_float(c->g, k, "alpha", ox_attr_float(c, "alpha", 1.0), err);
    if (!rc) rc = rtx_graph_set_attr_float(c->g, k, "beta", ox_attr_float(c, "beta", 1.0), err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "trans_a", ox_attr_int(c, "transA", 0), err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "trans_b", ox_attr_int(c, "transB", 0), err);
    return rc ? rc : ox_finish(c, k, err);
}

/* The axes of a Reduce*: the attribute (ReduceMean/Max/Min before opset 18) or the optional
 * second input (ReduceSum from 13, all from 18). n = 0: none given. */
static int reduce_axes(struct ox *c, int rank, int64_t *axes, int *n, struct rtx_err *err) {
    bool by_input = c->m->opset >= 18 || !strcmp(c->node->op_type, "ReduceSum");
    *n = 0;
    if (by_input) {
        if (!ox_has_in(c, 1)) return 0;
        int rc = ox_const_ints(c, 1, axes, RTX_MAX_DIMS, n, err);
        if (rc) return rc;
    } else {
        const int64_t *v;
        int k = ox_attr_ints(c, "axes", &v);
        if (k > RTX_MAX_DIMS)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s': %d axes", c->node->name, k);
        for (int i = 0; i < k; i++) axes[i] = v[i];
        *n = k < 0 ? 0 : k;
    }
    for (int i = 0; i < *n; i++) {
        int a;
        int rc = ox_axis(c, axes[i], rank, &a, err);
        if (rc) return rc;
        axes[i] = a;
    }
    return 0;
}

int ox_lower_reduce(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t axes[RTX_MAX_DIMS];
    int n;
    int rc = reduce_axes(c, x->ndim, axes, &n, err);
    if (rc) return rc;
    if (n == 0 && ox_attr_int(c, "noop_with_empty_axes", 0)) return ox_alias(c, 0, x->name, err);
    if (n == 0) /* every axis */
        for (int d = 0; d < x->ndim; d++) axes[n++] = d;
    const char *in = x->name;
    int k = ox_node(c, arg_of(c), &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = n ? rtx_graph_set_attr_ints(c->g, k, "axes", axes, n, err) : 0;
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "keepdims", ox_attr_int(c, "keepdims", 1), err);
    return rc ? rc : ox_finish(c, k, err);
}

/* ArgMax; with select_last_index, the first maximum of x reversed along the axis, counted
 * back from the end (n - 1 - index). */
int ox_lower_argmax(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    bool last = ox_attr_int(c, "select_last_index", 0) != 0;
    int axis;
    int rc = ox_axis(c, ox_attr_int(c, "axis", 0), x->ndim, &axis, err);
    if (rc) return rc;
    const char *in = x->name;
    if (last) {
        const char *rev = ox_tmp(c, "rev");
        int64_t start = -1, end = INT64_MIN, ax = axis, step = -1;
        int k = ox_node(c, "slice", &in, 1, rev, err);
        if (k < 0) return k;
        if ((rc = rtx_graph_set_attr_ints(c->g, k, "starts", &start, 1, err)) ||
            (rc = rtx_graph_set_attr_ints(c->g, k, "ends", &end, 1, err)) ||
            (rc = rtx_graph_set_attr_ints(c->g, k, "axes", &ax, 1, err)) ||
            (rc = rtx_graph_set_attr_ints(c->g, k, "steps", &step, 1, err)) ||
            (rc = ox_finish(c, k, err)))
            return rc;
        in = rev;
    }
    const char *idx = last ? ox_tmp(c, "idx") : ox_out_name(c, 0);
    int k = ox_node(c, "argmax", &in, 1, idx, err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_int(c->g, k, "axis", axis, err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "keepdims", ox_attr_int(c, "keepdims", 1), err);
    if (rc || (rc = ox_finish(c, k, err)) || !last) return rc;
    const char *n1 = ox_scalar(c, RTX_I64, (double)(x->dims[axis] - 1), err);
    if (!n1) return RTX_ENOMEM;
    const char *ins[2] = {n1, idx};
    return ox_emit(c, "sub", ins, 2, ox_out_name(c, 0), err);
}

/* LayerNormalization (x, scale, bias) and RMSNormalization (x, scale); arg: the rtx op.
 * stash_type needs nothing: both compute in f32 whatever x's type. */
int ox_lower_layernorm(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int axis;
    int rc = ox_axis(c, ox_attr_int(c, "axis", -1), x->ndim, &axis, err);
    if (rc) return rc;
    const char *ins[3] = {x->name, ox_in_name(c, 1), ox_in_name(c, 2)};
    int n_in = ox_has_in(c, 2) ? 3 : ox_has_in(c, 1) ? 2 : 1;
    /* scale and bias as rtx wants them: exactly x.shape[axis:] (ONNX broadcasts them) */
    for (int j = 1; j < n_in; j++) {
        if (!ox_has_in(c, j)) continue;
        struct rtx_value *s = ox_in(c, j, err);
        if (!s) return RTX_EGRAPH;
        int r = x->ndim - axis;
        bool same = s->ndim == r;
        for (int d = 0; same && d < r; d++) same = s->dims[d] == x->dims[axis + d];
        if (same) continue;
        const char *e = ox_tmp(c, "ln");
        const char *in = s->name;
        int k = ox_node(c, "expand", &in, 1, e, err);
        if (k < 0) return k;
        rc = rtx_graph_set_attr_ints(c->g, k, "shape", x->dims + axis, r, err);
        if (rc || (rc = ox_finish(c, k, err))) return rc;
        ins[j] = e;
    }
    int k = ox_node(c, arg_of(c), ins, n_in, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_int(c->g, k, "axis", axis, err);
    if (!rc)
        rc = rtx_graph_set_attr_float(c->g, k, "epsilon", ox_attr_float(c, "epsilon", 1e-5), err);
    return rc ? rc : ox_finish(c, k, err);
}
