/*
 * ops-extra.c - ONNX ops that rtx spells as short compositions rather than one op: Clip,
 * Min / Max / Sum / Mean (variadic, broadcasting), LeakyRelu, HardSigmoid, HardSwish, Pad
 * (constant mode) and Tile. Each composition is exact (selects, adds, one multiply or
 * divide), so the answers equal onnxruntime's.
 */
#include <string.h>

#include "onnx/onnx-impl.h"

static const char *arg_of(const struct ox *c) {
    return rtx__onnx_op(c->node->op_type)->arg;
}

/* op(a, b) into out (a fresh value when out is NULL); NULL on error. */
static const char *bin(struct ox *c, const char *op, const char *a, const char *b,
                       const char *out, struct rtx_err *err) {
    if (!a || !b) return NULL;
    const char *ins[2] = {a, b};
    if (!out) out = ox_tmp(c, op);
    return ox_emit(c, op, ins, 2, out, err) ? NULL : out;
}

/* where(cond, x, y) into out (fresh when NULL). */
static const char *sel(struct ox *c, const char *cond, const char *x, const char *y,
                       const char *out, struct rtx_err *err) {
    if (!cond || !x || !y) return NULL;
    const char *ins[3] = {cond, x, y};
    if (!out) out = ox_tmp(c, "where");
    return ox_emit(c, "where", ins, 3, out, err) ? NULL : out;
}

/* The larger (max) or smaller of a and b; a NaN in a propagates. */
static const char *pick(struct ox *c, bool max, const char *a, const char *b, const char *out,
                        struct rtx_err *err) {
    /* max: b where b > a, else a; min: b where b < a, else a */
    return sel(c, bin(c, max ? "greater" : "less", b, a, NULL, err), b, a, out, err);
}

/* Clip(x, min, max): min and max optional scalar inputs (opset 11 on). */
int ox_lower_clip(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *v = x->name;
    bool lo = ox_has_in(c, 1), hi = ox_has_in(c, 2);
    if (!lo && !hi) return ox_alias(c, 0, v, err);
    if (lo) v = pick(c, true, v, ox_in_name(c, 1), hi ? NULL : ox_out_name(c, 0), err);
    if (v && hi) v = pick(c, false, v, ox_in_name(c, 2), ox_out_name(c, 0), err);
    return v ? 0 : RTX_EGRAPH;
}

/* Min, Max, Sum, Mean over one or more inputs. */
int ox_lower_variadic(struct ox *c, struct rtx_err *err) {
    const char *what = arg_of(c);
    int n = (int)c->node->n_input;
    struct rtx_value *first = ox_in(c, 0, err);
    if (!first) return RTX_EGRAPH;
    if (n == 1) return ox_alias(c, 0, first->name, err);
    bool mean = !strcmp(what, "mean");
    const char *acc = first->name;
    for (int i = 1; i < n && acc; i++) {
        if (!ox_in(c, i, err)) return RTX_EGRAPH;
        const char *out = i == n - 1 && !mean ? ox_out_name(c, 0) : NULL;
        if (!strcmp(what, "max") || !strcmp(what, "min"))
            acc = pick(c, !strcmp(what, "max"), acc, ox_in_name(c, i), out, err);
        else
            acc = bin(c, "add", acc, ox_in_name(c, i), out, err);
    }
    if (acc && mean)
        acc = bin(c, "div", acc, ox_scalar(c, first->dtype, n, err), ox_out_name(c, 0), err);
    return acc ? 0 : RTX_EGRAPH;
}

/* LeakyRelu: x < 0 ? alpha x : x. */
int ox_lower_leaky_relu(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *neg = bin(c, "less", x->name, ox_scalar(c, x->dtype, 0, err), NULL, err);
    const char *ax = bin(c, "mul", x->name,
                         ox_scalar(c, x->dtype, ox_attr_float(c, "alpha", 0.01), err), NULL, err);
    return sel(c, neg, ax, x->name, ox_out_name(c, 0), err) ? 0 : RTX_EGRAPH;
}

/* HardSigmoid max(0, min(1, alpha x + beta)) and HardSwish x * HardSigmoid(x) with alpha 1/6,
 * beta 1/2. */
int ox_lower_hard_sigmoid(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    bool swish = !strcmp(arg_of(c), "swish");
    double alpha = swish ? 1.0 / 6 : ox_attr_float(c, "alpha", 0.2);
    double beta = swish ? 0.5 : ox_attr_float(c, "beta", 0.5);
    const char *t = bin(c, "add",
                        bin(c, "mul", x->name, ox_scalar(c, x->dtype, alpha, err), NULL, err),
                        ox_scalar(c, x->dtype, beta, err), NULL, err);
    t = pick(c, false, t, ox_scalar(c, x->dtype, 1, err), NULL, err);
    t = pick(c, true, t, ox_scalar(c, x->dtype, 0, err), swish ? NULL : ox_out_name(c, 0), err);
    if (t && swish) t = bin(c, "mul", x->name, t, ox_out_name(c, 0), err);
    return t ? 0 : RTX_EGRAPH;
}

/* A constant of x's dtype and shape dims filled with v. */
static const char *filled(struct ox *c, enum rtx_dtype dt, int ndim, const int64_t *dims,
                          double v, struct rtx_err *err) {
    struct rtx_tensor *t = NULL;
    if (rtx_tensor_new(dt, ndim, dims, &t, err)) return NULL;
    int64_t n = rtx_tensor_numel(t);
    if (v != 0)
        for (int64_t i = 0; i < n; i++) rtx_tensor_set(t, i, v);
    const char *name = ox_tmp(c, "pad");
    int rc = ox_const(c, name, t, err);
    rtx_tensor_unref(t);
    return rc ? NULL : name;
}

/* Pad, constant mode: per axis, a slice for negative pads, then constants concatenated before
 * and after. */
int ox_lower_pad(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    char buf[16];
    const char *mode = ox_attr_str(c, "mode", "constant", buf, sizeof buf);
    if (strcmp(mode, "constant"))
        return ox_unsupported(c, err, "mode '%s' (only constant)", mode);
    int r = x->ndim, np, na = -1;
    int64_t pads[2 * RTX_MAX_DIMS], axes[RTX_MAX_DIMS];
    int rc = ox_const_ints(c, 1, pads, 2 * RTX_MAX_DIMS, &np, err);
    if (rc) return rc;
    if (ox_has_in(c, 3) && (rc = ox_const_ints(c, 3, axes, RTX_MAX_DIMS, &na, err))) return rc;
    if (na < 0)
        for (na = 0; na < r; na++) axes[na] = na;
    if (np != 2 * na)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Pad): %d pads for %d axes",
                           c->node->name, np, na);
    double value = 0;
    if (ox_has_in(c, 2) && (rc = ox_const_scalar(c, 2, &value, err))) return rc;
    int64_t dims[RTX_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    const char *v = x->name;
    for (int k = 0; k < na && v; k++) {
        int a;
        if ((rc = ox_axis(c, axes[k], r, &a, err))) return rc;
        int64_t b = pads[k], e = pads[na + k];
        if (b < 0 || e < 0) { /* cut first */
            int64_t s = b < 0 ? -b : 0, en = dims[a] - (e < 0 ? -e : 0), ax = a, st = 1;
            if (en < s) en = s;
            const char *cut = ox_tmp(c, "cut");
            int node = ox_node(c, "slice", &v, 1, cut, err);
            if (node < 0 || rtx_graph_set_attr_ints(c->g, node, "starts", &s, 1, err) ||
                rtx_graph_set_attr_ints(c->g, node, "ends", &en, 1, err) ||
                rtx_graph_set_attr_ints(c->g, node, "axes", &ax, 1, err) ||
                rtx_graph_set_attr_ints(c->g, node, "steps", &st, 1, err) ||
                ox_finish(c, node, err))
                return RTX_EGRAPH;
            v = cut;
            dims[a] = en - s;
        }
        const char *parts[3];
        int n = 0;
        int64_t pd[RTX_MAX_DIMS];
        memcpy(pd, dims, sizeof pd);
        if (b > 0) {
            pd[a] = b;
            parts[n++] = filled(c, x->dtype, r, pd, value, err);
        }
        parts[n++] = v;
        if (e > 0) {
            pd[a] = e;
            parts[n++] = filled(c, x->dtype, r, pd, value, err);
        }
        for (int i = 0; i < n; i++)
            if (!parts[i]) return RTX_EGRAPH;
        if (n == 1) continue;
        const char *cat = ox_tmp(c, "padded");
        int node = ox_node(c, "concat", parts, n, cat, err);
        if (node < 0 || rtx_graph_set_attr_int(c->g, node, "axis", a, err) ||
            ox_finish(c, node, err))
            return RTX_EGRAPH;
        v = cat;
        dims[a] += (b > 0 ? b : 0) + (e > 0 ? e : 0);
    }
    return ox_alias(c, 0, v, err);
}

/* Tile: x [d0, d1, ...] as [1, d0, 1, d1, ...], expanded to [r0, d0, r1, d1, ...], reshaped
 * to [r0 d0, r1 d1, ...] (rank up to half the rtx limit). */
int ox_lower_tile(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int64_t rep[RTX_MAX_DIMS];
    int n, rc;
    if ((rc = ox_const_ints(c, 1, rep, RTX_MAX_DIMS, &n, err))) return rc;
    if (n != x->ndim)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Tile): %d repeats for rank %d",
                           c->node->name, n, x->ndim);
    if (2 * n > RTX_MAX_DIMS) return ox_unsupported(c, err, "rank %d (at most %d)", n,
                                                    RTX_MAX_DIMS / 2);
    int64_t split[RTX_MAX_DIMS], wide[RTX_MAX_DIMS], out[RTX_MAX_DIMS];
    for (int d = 0; d < n; d++) {
        if (rep[d] < 0)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (Tile): repeat %lld", c->node->name,
                               (long long)rep[d]);
        split[2 * d] = 1;
        split[2 * d + 1] = x->dims[d];
        wide[2 * d] = rep[d];
        wide[2 * d + 1] = x->dims[d];
        out[d] = rep[d] * x->dims[d];
    }
    const char *s = ox_tmp(c, "split"), *w = ox_tmp(c, "wide");
    if ((rc = ox_reshape(c, x->name, 2 * n, split, s, err))) return rc;
    int node = ox_node(c, "expand", &s, 1, w, err);
    if (node < 0 || rtx_graph_set_attr_ints(c->g, node, "shape", wide, 2 * n, err) ||
        ox_finish(c, node, err))
        return RTX_EGRAPH;
    return ox_reshape(c, w, n, out, ox_out_name(c, 0), err);
}

/* IsNaN: x != x, as not(equal(x, x)). */
int ox_lower_isnan(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    const char *same = bin(c, "equal", x->name, x->name, NULL, err);
    return bin(c, "equal", same, ox_scalar(c, RTX_BOOL, 0, err), ox_out_name(c, 0), err)
               ? 0
               : RTX_EGRAPH;
}

/* GatherElements of constants (an exporter's index buffers, computed at instantiation):
 * out[i...] = data[i... with index[i...] along axis]. Data-dependent indices are refused. */
int ox_lower_gather_elements(struct ox *c, struct rtx_err *err) {
    struct rtx_value *d = ox_in(c, 0, err), *ix = d ? ox_in(c, 1, err) : NULL;
    if (!ix) return RTX_EGRAPH;
    if (!d->constant || !ix->constant)
        return ox_unsupported(c, err, "data or indices computed from the model's inputs (rtxd "
                              "computes GatherElements of constants only)");
    int axis, rc;
    if ((rc = ox_axis(c, ox_attr_int(c, "axis", 0), d->ndim, &axis, err))) return rc;
    if (ix->ndim != d->ndim)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherElements): indices of rank %d "
                           "for data of rank %d", c->node->name, ix->ndim, d->ndim);
    struct rtx_tensor *t = NULL;
    if ((rc = rtx_tensor_new(d->dtype, ix->ndim, ix->dims, &t, err))) return rc;
    int64_t n = rtx_tensor_numel(t), pos[RTX_MAX_DIMS] = {0};
    size_t esz = rtx_dtype_size(d->dtype);
    const uint8_t *src = rtx_tensor_data(d->constant);
    uint8_t *dst = rtx_tensor_data(t);
    for (int64_t i = 0; i < n && !rc; i++) {
        int64_t k = (int64_t)rtx_tensor_get(ix->constant, i), off = 0;
        if (k < 0) k += d->dims[axis];
        if (k < 0 || k >= d->dims[axis]) {
            rc = rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherElements): index %lld out of "
                             "range for dimension %lld", c->node->name,
                             (long long)rtx_tensor_get(ix->constant, i),
                             (long long)d->dims[axis]);
            break;
        }
        for (int a = 0; a < d->ndim; a++) {
            int64_t p = a == axis ? k : pos[a];
            if (a != axis && p >= d->dims[a]) {
                rc = rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherElements): indices wider "
                                 "than the data in dimension %d", c->node->name, a);
                break;
            }
            off = off * d->dims[a] + p;
        }
        if (!rc) memcpy(dst + (size_t)i * esz, src + (size_t)off * esz, esz);
        for (int a = ix->ndim - 1; a >= 0; a--) /* next index position, row-major */
            if (++pos[a] < ix->dims[a]) break;
            else pos[a] = 0;
    }
    if (!rc) rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}

/* GatherND of constants (masks and index buffers exporters build from shapes): for every
 * index tuple of `indices` (its last dimension, k long, after batch_dims shared leading
 * dimensions), the slice of data it names. Data-dependent inputs are refused. */
int ox_lower_gather_nd(struct ox *c, struct rtx_err *err) {
    struct rtx_value *d = ox_in(c, 0, err), *ix = d ? ox_in(c, 1, err) : NULL;
    if (!ix) return RTX_EGRAPH;
    if (!d->constant || !ix->constant)
        return ox_unsupported(c, err, "data or indices computed from the model's inputs (rtxd "
                              "computes GatherND of constants only)");
    int64_t b = ox_attr_int(c, "batch_dims", 0);
    int q = ix->ndim, r = d->ndim;
    int64_t k = q ? ix->dims[q - 1] : 0;
    if (q < 1 || b < 0 || b >= q || k < 1 || b + k > r)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherND): indices %d-D with last "
                           "dimension %lld, batch_dims %lld, for data of rank %d",
                           c->node->name, q, (long long)k, (long long)b, r);
    for (int a = 0; a < b; a++)
        if (ix->dims[a] != d->dims[a])
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherND): batch dimension %d "
                               "differs", c->node->name, a);
    int64_t odims[RTX_MAX_DIMS];
    int on = 0;
    for (int a = 0; a < q - 1; a++) odims[on++] = ix->dims[a];
    for (int a = (int)(b + k); a < r; a++) {
        if (on == RTX_MAX_DIMS) return ox_unsupported(c, err, "an output of rank over %d",
                                                      RTX_MAX_DIMS);
        odims[on++] = d->dims[a];
    }
    int64_t slice = rtx_shape_numel(r - (int)(b + k), d->dims + b + k);
    int64_t per_batch = rtx_shape_numel(r - (int)b, d->dims + b);
    int64_t tuples = rtx_shape_numel(q - 1, ix->dims), in_batch = 1;
    for (int a = (int)b; a < q - 1; a++) in_batch *= ix->dims[a];
    struct rtx_tensor *t = NULL;
    int rc = rtx_tensor_new(d->dtype, on, odims, &t, err);
    if (rc) return rc;
    size_t esz = rtx_dtype_size(d->dtype);
    const uint8_t *src = rtx_tensor_data(d->constant);
    uint8_t *dst = rtx_tensor_data(t);
    for (int64_t i = 0; i < tuples && !rc; i++) {
        int64_t off = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t dim = d->dims[b + j], v = (int64_t)rtx_tensor_get(ix->constant, i * k + j);
            if (v < 0) v += dim;
            if (v < 0 || v >= dim) {
                rc = rtx_err_set(err, RTX_EGRAPH, "node '%s' (GatherND): index %lld out of "
                                 "range for dimension %lld", c->node->name,
                                 (long long)rtx_tensor_get(ix->constant, i * k + j),
                                 (long long)dim);
                break;
            }
            off = off * dim + v;
        }
        if (rc) break;
        off = (i / in_batch) * per_batch + off * slice;
        memcpy(dst + (size_t)(i * slice) * esz, src + (size_t)off * esz, (size_t)slice * esz);
    }
    if (!rc) rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}

/* CumSum of a constant (position ids and masks exporters build from shapes): the running sum
 * along axis, exclusive and reverse as attributes say. Data-dependent inputs are refused. */
int ox_lower_cumsum(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    if (!x->constant)
        return ox_unsupported(c, err, "an input computed from the model's inputs (rtxd computes "
                              "CumSum of constants only)");
    double av;
    int axis, rc;
    if ((rc = ox_const_scalar(c, 1, &av, err))) return rc;
    if ((rc = ox_axis(c, (int64_t)av, x->ndim, &axis, err))) return rc;
    bool excl = ox_attr_int(c, "exclusive", 0) != 0, rev = ox_attr_int(c, "reverse", 0) != 0;
    struct rtx_tensor *t = NULL;
    if ((rc = rtx_tensor_new(x->dtype, x->ndim, x->dims, &t, err))) return rc;
    int64_t n = x->dims[axis], inner = rtx_shape_numel(x->ndim - axis - 1, x->dims + axis + 1);
    int64_t outer = rtx_shape_numel(axis, x->dims);
    bool ints = !rtx_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double sum = 0;
            int64_t isum = 0;
            for (int64_t s = 0; s < n; s++) {
                int64_t p = rev ? n - 1 - s : s, at = (o * n + p) * inner + in;
                double v = rtx_tensor_get(x->constant, at);
                if (excl) rtx_tensor_set(t, at, ints ? (double)isum : sum);
                if (ints) isum += (int64_t)v;
                else sum += v;
                if (!excl) rtx_tensor_set(t, at, ints ? (double)isum : sum);
            }
        }
    rc = ox_const(c, ox_out_name(c, 0), t, err);
    rtx_tensor_unref(t);
    return rc;
}
