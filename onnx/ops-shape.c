/*
 * ops-shape.c - lowering ONNX's shape and data-movement ops. Every output shape is known at
 * instantiation, so the shape arguments ONNX passes as tensors (Reshape's shape, Slice's
 * starts and ends, Unsqueeze's axes, Expand's shape) must be constants by then: they are read
 * here and become attributes of rtx ops. Shape, Size, ConstantOfShape and Range produce
 * constants directly; Trilu becomes a where with a constant mask.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "onnx/onnx-impl.h"

#define MAXV 64 /* shape arguments: at most this many values */

static const char *arg_of(const struct ox *c) {
    return rtx__onnx_op(c->node->op_type)->arg;
}

int ox_lower_reshape(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t shape[MAXV];
    int n;
    int rc = ox_const_ints(c, 1, shape, MAXV, &n, err);
    if (rc) return rc;
    if (n > RTX_MAX_DIMS) return ox_unsupported(c, err, "a shape of rank %d", n);
    bool allowzero = ox_attr_int(c, "allowzero", 0) != 0;
    int64_t known = 1, infer_at = -1, total = rtx_shape_numel(x->ndim, x->dims);
    for (int d = 0; d < n; d++) {
        if (shape[d] == 0 && !allowzero) {
            if (d >= x->ndim)
                return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Reshape): 0 at position %d "
                                   "copies a dimension the input (rank %d) lacks",
                                   c->node->name, d, x->ndim);
            shape[d] = x->dims[d];
        }
        if (shape[d] == -1) {
            if (infer_at >= 0)
                return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Reshape): two -1 in the shape",
                                   c->node->name);
            infer_at = d;
            continue;
        }
        if (shape[d] < 0)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Reshape): dimension %lld",
                               c->node->name, (long long)shape[d]);
        known *= shape[d];
    }
    if (infer_at >= 0) {
        if (known == 0 || total % known)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Reshape): %lld elements do not fit "
                               "the shape", c->node->name, (long long)total);
        shape[infer_at] = total / known;
    }
    return ox_reshape(c, x->name, n, shape, ox_out_name(c, 0), err);
}

int ox_lower_flatten(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t axis = ox_attr_int(c, "axis", 1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis > x->ndim)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Flatten): axis out of range",
                           c->node->name);
    int64_t dims[2] = {rtx_shape_numel((int)axis, x->dims),
                       rtx_shape_numel(x->ndim - (int)axis, x->dims + axis)};
    return ox_reshape(c, x->name, 2, dims, ox_out_name(c, 0), err);
}

/* Squeeze and Unsqueeze: axes from the input (opset 13 on) as a reshape. */
int ox_lower_squeeze(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    bool un = !strcmp(arg_of(c), "unsqueeze");
    int64_t axes[MAXV];
    int n = 0, rc;
    if (ox_has_in(c, 1) && (rc = ox_const_ints(c, 1, axes, MAXV, &n, err))) return rc;
    int out_rank = un ? x->ndim + n : x->ndim;
    if (out_rank > RTX_MAX_DIMS) return ox_unsupported(c, err, "rank %d", out_rank);
    bool mark[RTX_MAX_DIMS + MAXV] = {0};
    for (int i = 0; i < n; i++) {
        int a;
        if ((rc = ox_axis(c, axes[i], out_rank, &a, err))) return rc;
        if (mark[a])
            return rtx_err_set(err, RTX_EGRAPH, "node '%s': axis %d repeated", c->node->name, a);
        mark[a] = true;
        if (!un && x->dims[a] != 1)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Squeeze): dimension %d is %lld, "
                               "not 1", c->node->name, a, (long long)x->dims[a]);
    }
    int64_t dims[RTX_MAX_DIMS];
    int r = 0;
    if (un) {
        for (int d = 0, s = 0; d < out_rank; d++) dims[r++] = mark[d] ? 1 : x->dims[s++];
    } else {
        for (int d = 0; d < x->ndim; d++)
            if (!(n ? mark[d] : x->dims[d] == 1)) dims[r++] = x->dims[d];
    }
    return ox_reshape(c, x->name, r, dims, ox_out_name(c, 0), err);
}

int ox_lower_transpose(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *in = x->name;
    int k = ox_node(c, "transpose", &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    const int64_t *perm;
    int n = ox_attr_ints(c, "perm", &perm);
    int rc = n >= 0 ? rtx_graph_set_attr_ints(c->g, k, "perm", perm, n, err) : 0;
    return rc ? rc : ox_finish(c, k, err);
}

int ox_lower_concat(struct ox *c, struct rtx_err *err) {
    int n = (int)c->node->n_input;
    if (n < 1 || n > MAXV) return ox_unsupported(c, err, "%d inputs", n);
    const char *ins[MAXV];
    int m = 0, rank = -1;
    for (int i = 0; i < n; i++) {
        struct rtx_value *v = ox_in(c, i, err);
        if (!v) return RTX_EGRAPH;
        rank = v->ndim;
        /* ONNX allows empty inputs along the axis; rtx's concat takes them too */
        ins[m++] = v->name;
    }
    int axis;
    int rc = ox_axis(c, ox_attr_int(c, "axis", 0), rank, &axis, err);
    if (rc) return rc;
    int k = ox_node(c, "concat", ins, m, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_int(c->g, k, "axis", axis, err);
    return rc ? rc : ox_finish(c, k, err);
}

/* One slice of x along the given axes into out. */
static int emit_slice(struct ox *c, const char *x, const int64_t *starts, const int64_t *ends,
                      const int64_t *axes, const int64_t *steps, int n, const char *out,
                      struct rtx_err *err) {
    int k = ox_node(c, "slice", &x, 1, out, err);
    if (k < 0) return k;
    int rc = rtx_graph_set_attr_ints(c->g, k, "starts", starts, n, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "ends", ends, n, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "axes", axes, n, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "steps", steps, n, err);
    return rc ? rc : ox_finish(c, k, err);
}

int ox_lower_slice(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t starts[MAXV], ends[MAXV], axes[MAXV], steps[MAXV];
    int ns, ne, na = -1, nt = -1, rc;
    if ((rc = ox_const_ints(c, 1, starts, MAXV, &ns, err))) return rc;
    if ((rc = ox_const_ints(c, 2, ends, MAXV, &ne, err))) return rc;
    if (ox_has_in(c, 3) && (rc = ox_const_ints(c, 3, axes, MAXV, &na, err))) return rc;
    if (ox_has_in(c, 4) && (rc = ox_const_ints(c, 4, steps, MAXV, &nt, err))) return rc;
    if (ne != ns || (na >= 0 && na != ns) || (nt >= 0 && nt != ns))
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Slice): starts, ends, axes and steps "
                           "differ in length", c->node->name);
    for (int i = 0; i < ns; i++) {
        int a = (int)i;
        if (na >= 0 && (rc = ox_axis(c, axes[i], x->ndim, &a, err))) return rc;
        axes[i] = a;
        if (nt < 0) steps[i] = 1;
        if (steps[i] == 0)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Slice): a step of 0", c->node->name);
        /* walking backwards from before the first element: ONNX clamps the start to 0 where
         * Python's slice (rtx's) gives an empty range */
        if (steps[i] < 0 && starts[i] < -x->dims[a]) starts[i] = 0;
    }
    return emit_slice(c, x->name, starts, ends, axes, steps, ns, ox_out_name(c, 0), err);
}

int ox_lower_split(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int axis, rc;
    if ((rc = ox_axis(c, ox_attr_int(c, "axis", 0), x->ndim, &axis, err))) return rc;
    int n_out = (int)c->node->n_output;
    if (n_out < 1 || n_out > MAXV) return ox_unsupported(c, err, "%d outputs", n_out);
    int64_t split[MAXV];
    int n = 0;
    if (ox_has_in(c, 1)) {
        if ((rc = ox_const_ints(c, 1, split, MAXV, &n, err))) return rc;
    } else {
        const int64_t *v;
        int k = ox_attr_ints(c, "split", &v); /* before opset 13 only; tolerated */
        for (int i = 0; i < k && i < MAXV; i++) split[n++] = v[i];
    }
    int64_t dim = x->dims[axis];
    if (n == 0) { /* equal parts; the last smaller when it does not divide (opset 18) */
        int64_t parts = ox_attr_int(c, "num_outputs", n_out);
        if (parts != n_out)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Split): num_outputs %lld, %d "
                               "outputs", c->node->name, (long long)parts, n_out);
        int64_t each = (dim + n_out - 1) / n_out;
        if (c->m->opset < 18 && dim % n_out)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Split): %lld does not split in %d",
                               c->node->name, (long long)dim, n_out);
        for (int i = 0; i < n_out; i++) {
            int64_t left = dim - each * i;
            split[n++] = left < each ? (left < 0 ? 0 : left) : each;
        }
    }
    if (n != n_out)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Split): %d sizes for %d outputs",
                           c->node->name, n, n_out);
    int64_t at = 0;
    for (int i = 0; i < n_out; i++) {
        int64_t s = at, e = at + split[i], a = axis, st = 1;
        at = e;
        if (!*ox_out_name(c, i)) continue;
        if ((rc = emit_slice(c, x->name, &s, &e, &a, &st, 1, ox_out_name(c, i), err)))
            return rc;
    }
    if (at != dim)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Split): sizes add up to %lld, the "
                           "dimension is %lld", c->node->name, (long long)at, (long long)dim);
    return 0;
}

int ox_lower_gather(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err), *idx = x ? ox_in(c, 1, err) : NULL;
    if (!idx) return RTX_EGRAPH;
    int axis, rc;
    if ((rc = ox_axis(c, ox_attr_int(c, "axis", 0), x->ndim, &axis, err))) return rc;
    const char *ins[2] = {x->name, idx->name};
    int k = ox_node(c, "gather", ins, 2, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_int(c->g, k, "axis", axis, err);
    return rc ? rc : ox_finish(c, k, err);
}

/* A new i64 constant tensor of n values (rank 1, or rank 0 when scalar) named out. */
static int const_i64(struct ox *c, const int64_t *v, int n, bool scalar, const char *out,
                     struct rtx_err *err) {
    struct rtx_tensor *t = NULL;
    int64_t d = n;
    int rc = rtx_tensor_new(RTX_I64, scalar ? 0 : 1, &d, &t, err);
    if (rc) return rc;
    if (n) memcpy(rtx_tensor_data(t), v, sizeof *v * (size_t)n);
    rc = ox_const(c, out, t, err);
    rtx_tensor_unref(t);
    return rc;
}

int ox_lower_shape(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int r = x->ndim;
    int64_t s = ox_attr_int(c, "start", 0), e = ox_attr_int(c, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    if (e < s) e = s;
    return const_i64(c, x->dims + s, (int)(e - s), false, ox_out_name(c, 0), err);
}

int ox_lower_size(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t n = rtx_shape_numel(x->ndim, x->dims);
    return const_i64(c, &n, 1, true, ox_out_name(c, 0), err);
}

int ox_lower_constant(struct ox *c, struct rtx_err *err) {
    const Onnx__AttributeProto *a = NULL;
    static const char *const kinds[] = {"value", "value_float", "value_floats", "value_int",
                                        "value_ints"};
    int kind = -1;
    for (int i = 0; i < 5 && kind < 0; i++)
        if ((a = ox_attr(c, kinds[i]))) kind = i;
    if (kind < 0)
        return ox_unsupported(c, err, "no value (value_string(s) and sparse_value are not "
                              "supported)");
    if ((kind == 1 && !a->has_f) || (kind == 3 && !a->has_i))
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Constant): %s has no value",
                           c->node->name, kinds[kind]);
    struct rtx_tensor *t = NULL;
    int rc = 0;
    int64_t n;
    switch (kind) {
    case 0:
        if (!a->t) return rtx_err_set(err, RTX_EFORMAT, "node '%s' (Constant): value is not a "
                                      "tensor", c->node->name);
        rc = rtx__onnx_tensor(a->t, NULL, c->node->name, c->lim, &t, err);
        break;
    case 1:
    case 2:
        n = kind == 1 ? 1 : (int64_t)a->n_floats;
        rc = rtx_tensor_new(RTX_F32, kind == 1 ? 0 : 1, &n, &t, err);
        for (int64_t i = 0; !rc && i < n; i++)
            ((float *)rtx_tensor_data(t))[i] = kind == 1 ? a->f : a->floats[i];
        break;
    default:
        n = kind == 3 ? 1 : (int64_t)a->n_ints;
        rc = rtx_tensor_new(RTX_I64, kind == 3 ? 0 : 1, &n, &t, err);
        for (int64_t i = 0; !rc && i < n; i++)
            ((int64_t *)rtx_tensor_data(t))[i] = kind == 3 ? a->i : a->ints[i];
        break;
    }
    if (!rc) rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}

int ox_lower_constant_of_shape(struct ox *c, struct rtx_err *err) {
    int64_t dims[MAXV];
    int n, rc;
    if ((rc = ox_const_ints(c, 0, dims, MAXV, &n, err))) return rc;
    if (n > RTX_MAX_DIMS) return ox_unsupported(c, err, "rank %d", n);
    /* the limits before the allocation: the shape may come from anywhere */
    int64_t total = 1;
    for (int d = 0; d < n; d++) {
        if (dims[d] < 0)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (ConstantOfShape): dimension %lld",
                               c->node->name, (long long)dims[d]);
        if (dims[d] && total > c->lim->max_elements / dims[d] + 1) total = INT64_MAX;
        else total *= dims[d];
    }
    if (total > c->lim->max_elements || total * 8 > c->lim->max_tensor_bytes)
        return rtx_err_set(err, RTX_ELIMIT, "node '%s' (ConstantOfShape): %lld elements, limit "
                           "%lld", c->node->name, (long long)total,
                           (long long)c->lim->max_elements);
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    struct rtx_tensor *v = NULL, *t = NULL;
    enum rtx_dtype dt = RTX_F32;
    double fill = 0;
    if (a && a->t) {
        if ((rc = rtx__onnx_tensor(a->t, NULL, c->node->name, c->lim, &v, err))) return rc;
        dt = v->dtype;
        fill = rtx_tensor_numel(v) ? rtx_tensor_get(v, 0) : 0;
        rtx_tensor_unref(v);
    }
    if ((rc = rtx_tensor_new(dt, n, dims, &t, err))) return rc;
    if (fill != 0)
        for (int64_t i = 0; i < total; i++) rtx_tensor_set(t, i, fill);
    rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}

int ox_lower_range(struct ox *c, struct rtx_err *err) {
    double v[3];
    int rc;
    struct rtx_value *s = ox_in(c, 0, err);
    if (!s) return RTX_EGRAPH;
    for (int i = 0; i < 3; i++)
        if ((rc = ox_const_scalar(c, i, &v[i], err))) return rc;
    if (v[2] == 0)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Range): delta 0", c->node->name);
    double count = ceil((v[1] - v[0]) / v[2]);
    int64_t n = count > 0 ? (int64_t)count : 0;
    if (n > c->lim->max_elements)
        return rtx_err_set(err, RTX_ELIMIT, "node '%s' (Range): %lld elements", c->node->name,
                           (long long)n);
    struct rtx_tensor *t = NULL;
    if ((rc = rtx_tensor_new(s->dtype, 1, &n, &t, err))) return rc;
    for (int64_t i = 0; i < n; i++) {
        if (s->dtype == RTX_I64)
            ((int64_t *)rtx_tensor_data(t))[i] = (int64_t)v[0] + i * (int64_t)v[2];
        else
            rtx_tensor_set(t, i, v[0] + (double)i * v[2]);
    }
    rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}

int ox_lower_expand(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t shape[MAXV];
    int n, rc;
    if ((rc = ox_const_ints(c, 1, shape, MAXV, &n, err))) return rc;
    if (n > RTX_MAX_DIMS) return ox_unsupported(c, err, "rank %d", n);
    const char *in = x->name;
    int k = ox_node(c, "expand", &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_ints(c->g, k, "shape", shape, n, err);
    return rc ? rc : ox_finish(c, k, err);
}

/* Trilu: where(mask, x, 0) with the mask of the last two dimensions a constant. */
int ox_lower_trilu(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    if (x->ndim < 2)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Trilu): rank %d (at least 2)",
                           c->node->name, x->ndim);
    double kd = 0;
    int rc;
    if (ox_has_in(c, 1) && (rc = ox_const_scalar(c, 1, &kd, err))) return rc;
    int64_t k = (int64_t)kd;
    bool upper = ox_attr_int(c, "upper", 1) != 0;
    int64_t dims[2] = {x->dims[x->ndim - 2], x->dims[x->ndim - 1]};
    struct rtx_tensor *mask = NULL;
    if ((rc = rtx_tensor_new(RTX_BOOL, 2, dims, &mask, err))) return rc;
    uint8_t *m = rtx_tensor_data(mask);
    for (int64_t i = 0; i < dims[0]; i++)
        for (int64_t j = 0; j < dims[1]; j++)
            m[i * dims[1] + j] = upper ? j - i >= k : j - i <= k;
    const char *mname = ox_tmp(c, "mask");
    rc = ox_const(c, mname, mask, err);
    rtx_tensor_unref(mask);
    if (rc) return rc;
    const char *zero = ox_scalar(c, x->dtype, 0, err);
    if (!zero) return RTX_ENOMEM;
    const char *ins[3] = {mname, x->name, zero};
    return ox_emit(c, "where", ins, 3, ox_out_name(c, 0), err);
}
