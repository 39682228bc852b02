/*
 * fuse.c - decomposed patterns in ONNX graphs lowered to rtx's fused ops. Exporters write
 * layer norm, GELU and attention as chains of primitive ops; the node that ends such a chain
 * is lowered to one rtx op reading the chain's sources, and the chain's own nodes, lowered
 * before it, are left unused (the final graph drops them) unless something else reads them.
 *
 *   layer_norm   Div(Sub(x, ReduceMean(x)), Sqrt(Add(ReduceMean(Pow(Sub.., 2)), eps)))
 *                over the trailing axes, keepdims (the scale and bias Mul / Add after it
 *                stay elementwise ops)
 *   rms_norm     Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))) (or Div(1, ..)),
 *                and Div(x, Sqrt(..)), over the trailing axes, keepdims (Llama's RMSNorm;
 *                the weight's Mul after it stays)
 *   gelu         x * 0.5 * (1 + Erf(x / sqrt 2)) in any association and order (Div by sqrt 2
 *                or Mul by 1/sqrt 2), and the tanh form
 *                x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))))
 *   attention    MatMul(Softmax(S, last axis), V) with S = [Add(S0, mask) | Where(cond, S0,
 *                large negative) | S0], S0 = [Div(QK, c) | Mul(QK, c) | QK] and
 *                QK = MatMul(Q, Kt), Kt the transposed keys (a Transpose folded into the
 *                keys' own transpose); Q and Kt may each be scaled by a constant, and the
 *                probabilities may pass the NaN guard Where(IsNaN(P), 0, P)
 * Matching reads the ONNX graph for structure and the work graph for shapes and constants.
 */
#include <math.h>
#include <string.h>

#include "onnx/onnx-impl.h"

static bool is(const Onnx__NodeProto *n, const char *op) {
    return n && n->op_type && !strcmp(n->op_type, op);
}

static const char *in_of(const Onnx__NodeProto *n, size_t i) {
    return n && i < n->n_input && n->input[i] ? n->input[i] : "";
}

/* The producer of value name when it is op (and, with single, read only once). */
static const Onnx__NodeProto *prod(struct ox *c, const char *name, const char *op, bool single) {
    const Onnx__NodeProto *p = rtx__onnx_producer(c->m, name);
    if (!is(p, op)) return NULL;
    if (single && rtx__onnx_uses(c->m, name) != 1) return NULL;
    return p;
}

/* Whether value name is a one-element constant; its value in *v. */
static bool scalar(struct ox *c, const char *name, double *v) {
    const struct rtx_value *x = ox_value(c, name);
    if (!x || !x->constant || rtx_tensor_numel(x->constant) != 1) return false;
    *v = rtx_tensor_get(x->constant, 0);
    return true;
}

static bool near(double a, double b) {
    return fabs(a - b) <= 1e-3 * fabs(b);
}

/* The other input of a two-input node than name ("" when name is not an input). */
static const char *other(const Onnx__NodeProto *n, const char *name) {
    if (!strcmp(in_of(n, 0), name)) return in_of(n, 1);
    if (!strcmp(in_of(n, 1), name)) return in_of(n, 0);
    return "";
}

/* A Reduce node's axes as a count of trailing axes of rank r (0: not trailing or keepdims 0). */
static int trailing_axes(struct ox *c, const Onnx__NodeProto *n, int r) {
    int64_t axes[RTX_MAX_DIMS];
    int k = 0;
    bool by_input = c->m->opset >= 18;
    if (by_input) {
        const struct rtx_value *a = ox_value(c, in_of(n, 1));
        if (!a || !a->constant || rtx_tensor_numel(a->constant) > RTX_MAX_DIMS) return 0;
        k = (int)rtx_tensor_numel(a->constant);
        for (int i = 0; i < k; i++) axes[i] = (int64_t)rtx_tensor_get(a->constant, i);
    } else {
        for (size_t i = 0; i < n->n_attribute; i++)
            if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, "axes") &&
                n->attribute[i]->n_ints <= RTX_MAX_DIMS) {
                k = (int)n->attribute[i]->n_ints;
                memcpy(axes, n->attribute[i]->ints, sizeof axes[0] * (size_t)k);
            }
    }
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, "keepdims") &&
            n->attribute[i]->i == 0)
            return 0;
    if (k < 1 || k > r) return 0;
    bool seen[RTX_MAX_DIMS] = {0};
    for (int i = 0; i < k; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < r - k || a >= r || seen[a]) return 0;
        seen[a] = true;
    }
    return k;
}

/* ---- layer norm, at its Div ---- */
static int fuse_layernorm(struct ox *c, struct rtx_err *err) {
    const Onnx__NodeProto *div = c->node;
    const Onnx__NodeProto *sub = prod(c, in_of(div, 0), "Sub", false);
    const Onnx__NodeProto *sq = prod(c, in_of(div, 1), "Sqrt", true);
    const Onnx__NodeProto *mu = sub ? prod(c, in_of(sub, 1), "ReduceMean", false) : NULL;
    if (!sq || !mu || strcmp(in_of(mu, 0), in_of(sub, 0))) return 0;
    const char *x = in_of(sub, 0);
    const Onnx__NodeProto *add = prod(c, in_of(sq, 0), "Add", true);
    if (!add) return 0;
    double eps;
    const char *vname = in_of(add, 0);
    if (!scalar(c, in_of(add, 1), &eps)) {
        vname = in_of(add, 1);
        if (!scalar(c, in_of(add, 0), &eps)) return 0;
    }
    const Onnx__NodeProto *var = prod(c, vname, "ReduceMean", true);
    const Onnx__NodeProto *sqr = var ? rtx__onnx_producer(c->m, in_of(var, 0)) : NULL;
    double two;
    bool squared = (is(sqr, "Pow") && !strcmp(in_of(sqr, 0), sub->output[0]) &&
                    scalar(c, in_of(sqr, 1), &two) && two == 2) ||
                   (is(sqr, "Mul") && !strcmp(in_of(sqr, 0), sub->output[0]) &&
                    !strcmp(in_of(sqr, 1), sub->output[0]));
    const struct rtx_value *xv = ox_value(c, x);
    if (!squared || !xv || !rtx_dtype_is_float(xv->dtype) || eps < 0) return 0;
    int k = trailing_axes(c, mu, xv->ndim);
    if (!k || trailing_axes(c, var, xv->ndim) != k) return 0;
    int node = ox_node(c, "layer_norm", &x, 1, ox_out_name(c, 0), err);
    if (node < 0) return node;
    int rc = rtx_graph_set_attr_int(c->g, node, "axis", xv->ndim - k, err);
    if (!rc) rc = rtx_graph_set_attr_float(c->g, node, "epsilon", eps, err);
    if (!rc) rc = ox_finish(c, node, err);
    return rc ? rc : 1;
}

/* ---- RMS norm, at its Mul (x * 1/sqrt) or Div (x / sqrt) ---- */

/* Whether s is Sqrt(Add(ReduceMean(x^2), eps)) over trailing axes of x; k and eps set. */
static bool rms_root(struct ox *c, const char *s, const char *x, int rank, int *k, double *eps) {
    const Onnx__NodeProto *sq = prod(c, s, "Sqrt", true);
    const Onnx__NodeProto *add = sq ? prod(c, in_of(sq, 0), "Add", true) : NULL;
    if (!add) return false;
    const char *mean = in_of(add, 0);
    if (!scalar(c, in_of(add, 1), eps)) {
        mean = in_of(add, 1);
        if (!scalar(c, in_of(add, 0), eps)) return false;
    }
    const Onnx__NodeProto *rm = prod(c, mean, "ReduceMean", true);
    const Onnx__NodeProto *sqr = rm ? rtx__onnx_producer(c->m, in_of(rm, 0)) : NULL;
    double two;
    bool squared = (is(sqr, "Pow") && !strcmp(in_of(sqr, 0), x) && scalar(c, in_of(sqr, 1), &two) &&
                    two == 2) ||
                   (is(sqr, "Mul") && !strcmp(in_of(sqr, 0), x) && !strcmp(in_of(sqr, 1), x));
    if (!squared || *eps < 0) return false;
    *k = trailing_axes(c, rm, rank);
    return *k > 0;
}

static int fuse_rmsnorm(struct ox *c, struct rtx_err *err) {
    const Onnx__NodeProto *n = c->node;
    for (int i = 0; i < 2; i++) {
        const char *x = in_of(n, (size_t)i), *r = in_of(n, (size_t)(1 - i)), *root = NULL;
        if (is(n, "Div")) {
            if (i == 1) break;
            root = r;                                   /* x / sqrt(..) */
        } else {
            const Onnx__NodeProto *rc = prod(c, r, "Reciprocal", true);
            const Onnx__NodeProto *dv = rc ? NULL : prod(c, r, "Div", true);
            double one;
            if (rc) root = in_of(rc, 0);
            else if (dv && scalar(c, in_of(dv, 0), &one) && one == 1) root = in_of(dv, 1);
            else continue;
        }
        const struct rtx_value *xv = ox_value(c, x);
        int k;
        double eps;
        if (!xv || !rtx_dtype_is_float(xv->dtype) || !rms_root(c, root, x, xv->ndim, &k, &eps))
            continue;
        int rank = xv->ndim;
        int node = ox_node(c, "rms_norm", &x, 1, ox_out_name(c, 0), err);
        if (node < 0) return node;
        int rc = rtx_graph_set_attr_int(c->g, node, "axis", rank - k, err);
        if (!rc) rc = rtx_graph_set_attr_float(c->g, node, "epsilon", eps, err);
        if (!rc) rc = ox_finish(c, node, err);
        return rc ? rc : 1;
    }
    return 0;
}

/* ---- GELU, at its last Mul ---- */

/* The factors of a product: the inputs of a Mul, each expanded once more when it is a Mul
 * read only here. At most 4. */
static int factors(struct ox *c, const Onnx__NodeProto *mul, const char **f) {
    int n = 0;
    for (int i = 0; i < 2; i++) {
        const Onnx__NodeProto *inner = prod(c, in_of(mul, (size_t)i), "Mul", true);
        if (inner) {
            f[n++] = in_of(inner, 0);
            f[n++] = in_of(inner, 1);
        } else {
            f[n++] = in_of(mul, (size_t)i);
        }
    }
    return n;
}

/* Whether value name is x * k (either order) or, for div_k, x / (1/k). */
static bool scaled(struct ox *c, const char *name, const char *x, double k) {
    double v;
    const Onnx__NodeProto *m = prod(c, name, "Mul", false);
    const char *o = m ? other(m, x) : "";
    if (*o && scalar(c, o, &v) && near(v, k)) return true;
    const Onnx__NodeProto *d = prod(c, name, "Div", false);
    return d && !strcmp(in_of(d, 0), x) && scalar(c, in_of(d, 1), &v) && near(1 / v, k);
}

/* Whether value name is x^3 (Pow(x, 3) or x*x*x). */
static bool cubed(struct ox *c, const char *name, const char *x) {
    double v;
    const Onnx__NodeProto *p = prod(c, name, "Pow", false);
    if (p) return !strcmp(in_of(p, 0), x) && scalar(c, in_of(p, 1), &v) && v == 3;
    const Onnx__NodeProto *m = prod(c, name, "Mul", false);
    if (!m) return false;
    const Onnx__NodeProto *sq = prod(c, other(m, x), "Mul", false);
    return sq && !strcmp(in_of(sq, 0), x) && !strcmp(in_of(sq, 1), x);
}

/* Whether t is 1 + Erf(x / sqrt 2) (tanh false) or 1 + Tanh(...) of x; the source x in *x. */
static bool gelu_term(struct ox *c, const char *t, const char **x, bool *tanh_form) {
    const Onnx__NodeProto *add = prod(c, t, "Add", false);
    double one;
    if (!add) return false;
    const char *e = in_of(add, 0);
    if (!scalar(c, in_of(add, 1), &one)) {
        e = in_of(add, 1);
        if (!scalar(c, in_of(add, 0), &one)) return false;
    }
    if (one != 1) return false;
    const Onnx__NodeProto *erf = prod(c, e, "Erf", false);
    if (erf) {
        const char *arg = in_of(erf, 0);
        const Onnx__NodeProto *p = rtx__onnx_producer(c->m, arg);
        if (!is(p, "Mul") && !is(p, "Div")) return false;
        for (int i = 0; i < 2; i++) {
            const char *cand = in_of(p, (size_t)i);
            if (scaled(c, arg, cand, M_SQRT1_2)) {
                *x = cand;
                *tanh_form = false;
                return true;
            }
        }
        return false;
    }
    const Onnx__NodeProto *th = prod(c, e, "Tanh", false);
    if (!th) return false;
    const Onnx__NodeProto *outer = prod(c, in_of(th, 0), "Mul", false);
    if (!outer) return false;
    for (int i = 0; i < 2; i++) {
        double k;
        const char *inner = in_of(outer, (size_t)i);
        if (!scalar(c, in_of(outer, (size_t)(1 - i)), &k) || !near(k, sqrt(2 / M_PI))) continue;
        const Onnx__NodeProto *sum = prod(c, inner, "Add", false);
        for (int j = 0; sum && j < 2; j++) {
            const char *cand = in_of(sum, (size_t)j), *rest = in_of(sum, (size_t)(1 - j));
            const Onnx__NodeProto *m = prod(c, rest, "Mul", false);
            for (int q = 0; m && q < 2; q++) {
                double a;
                if (scalar(c, in_of(m, (size_t)q), &a) && near(a, 0.044715) &&
                    cubed(c, in_of(m, (size_t)(1 - q)), cand)) {
                    *x = cand;
                    *tanh_form = true;
                    return true;
                }
            }
        }
    }
    return false;
}

static int fuse_gelu(struct ox *c, struct rtx_err *err) {
    const char *f[4];
    int n = factors(c, c->node, f);
    if (n != 3) return 0;
    for (int t = 0; t < 3; t++) {
        const char *x = NULL;
        bool tanh_form = false;
        if (!gelu_term(c, f[t], &x, &tanh_form)) continue;
        int seen_x = 0, seen_half = 0;
        for (int i = 0; i < 3; i++) {
            double v;
            if (i == t) continue;
            if (!strcmp(f[i], x)) seen_x++;
            else if (scalar(c, f[i], &v) && v == 0.5) seen_half++;
        }
        const struct rtx_value *xv = ox_value(c, x);
        if (seen_x != 1 || seen_half != 1 || !xv || !rtx_dtype_is_float(xv->dtype)) return 0;
        int node = ox_node(c, "gelu", &x, 1, ox_out_name(c, 0), err);
        if (node < 0) return node;
        int rc = rtx_graph_set_attr_string(c->g, node, "approximate", tanh_form ? "tanh" : "none",
                                           err);
        if (!rc) rc = ox_finish(c, node, err);
        return rc ? rc : 1;
    }
    return 0;
}

/* ---- attention, at its second MatMul ---- */

/* The keys as [..., Lk, D] from kt [..., D, Lk]: a Transpose producing kt is folded into one
 * transpose of its input. Returns the value name or NULL. */
static const char *keys(struct ox *c, const char *kt, int r, struct rtx_err *err) {
    int64_t perm[RTX_MAX_DIMS];
    const char *src = kt;
    for (int d = 0; d < r; d++) perm[d] = d;
    const Onnx__NodeProto *t = prod(c, kt, "Transpose", true);
    if (t) {
        bool given = false;
        for (size_t i = 0; i < t->n_attribute; i++)
            if (t->attribute[i]->name && !strcmp(t->attribute[i]->name, "perm") &&
                (int)t->attribute[i]->n_ints == r) {
                memcpy(perm, t->attribute[i]->ints, sizeof perm[0] * (size_t)r);
                given = true;
            }
        if (!given)
            for (int d = 0; d < r; d++) perm[d] = r - 1 - d;
        src = in_of(t, 0);
    }
    int64_t tmp = perm[r - 1];
    perm[r - 1] = perm[r - 2];
    perm[r - 2] = tmp;
    bool identity = true;
    for (int d = 0; d < r; d++) identity &= perm[d] == d;
    if (identity) return src;
    const char *out = ox_tmp(c, "keys");
    int node = ox_node(c, "transpose", &src, 1, out, err);
    if (node < 0 || rtx_graph_set_attr_ints(c->g, node, "perm", perm, r, err) ||
        ox_finish(c, node, err))
        return NULL;
    return out;
}

/* The Softmax that produces the probabilities p of an attention's second product: directly,
 * or through the NaN guard Where(IsNaN(p), 0, p) that sets fully masked rows to zero (what
 * rtx's attention gives such rows). */
static const Onnx__NodeProto *attention_softmax(struct ox *c, const char *p) {
    const Onnx__NodeProto *sm = prod(c, p, "Softmax", true);
    if (sm) return sm;
    const Onnx__NodeProto *w = prod(c, p, "Where", true);
    const Onnx__NodeProto *isn = w ? prod(c, in_of(w, 0), "IsNaN", true) : NULL;
    double z;
    const char *probs = in_of(w, 2);
    if (!isn || strcmp(in_of(isn, 0), probs) || !scalar(c, in_of(w, 1), &z) || z != 0 ||
        rtx__onnx_uses(c->m, probs) != 2)
        return NULL;
    return prod(c, probs, "Softmax", false);
}

static int fuse_attention(struct ox *c, struct rtx_err *err) {
    const Onnx__NodeProto *sm = attention_softmax(c, in_of(c->node, 0));
    if (!sm) return 0;
    const char *s = in_of(sm, 0), *mask = NULL;
    const struct rtx_value *sv = ox_value(c, s);
    if (!sv) return 0;
    int64_t axis = -1;
    for (size_t i = 0; i < sm->n_attribute; i++)
        if (sm->attribute[i]->name && !strcmp(sm->attribute[i]->name, "axis"))
            axis = sm->attribute[i]->i;
    if (axis != -1 && axis != sv->ndim - 1) return 0;
    const char *s0 = s;
    double v;
    const Onnx__NodeProto *p = rtx__onnx_producer(c->m, s);
    if (is(p, "Add") && rtx__onnx_uses(c->m, s) == 1) {
        for (int i = 0; i < 2 && !mask; i++) {
            const Onnx__NodeProto *q = rtx__onnx_producer(c->m, in_of(p, (size_t)i));
            if (is(q, "MatMul") || is(q, "Div") || is(q, "Mul")) {
                s0 = in_of(p, (size_t)i);
                mask = in_of(p, (size_t)(1 - i));
            }
        }
        if (!mask) return 0;
    } else if (is(p, "Where") && rtx__onnx_uses(c->m, s) == 1 && scalar(c, in_of(p, 2), &v) &&
               v <= -1e4) {
        s0 = in_of(p, 1);
        mask = in_of(p, 0);
    }
    double scale = 1;
    const char *qk = s0;
    const Onnx__NodeProto *sc = rtx__onnx_producer(c->m, s0);
    if ((is(sc, "Div") || is(sc, "Mul")) && rtx__onnx_uses(c->m, s0) == 1) {
        if (!scalar(c, in_of(sc, 1), &v) || v == 0) return 0;
        scale = is(sc, "Div") ? 1 / v : v;
        qk = in_of(sc, 0);
    }
    const Onnx__NodeProto *mm = prod(c, qk, "MatMul", true);
    if (!mm) return 0;
    /* a scale applied to the queries and the keys before their product (Hugging Face's
     * BERT multiplies each by the fourth root of 1/d) folds into the attention's scale */
    const char *qn = in_of(mm, 0), *ktn = in_of(mm, 1);
    const char **sides[2] = {&qn, &ktn};
    for (int i = 0; i < 2; i++) {
        const Onnx__NodeProto *ms = prod(c, *sides[i], "Mul", true);
        for (int j = 0; ms && j < 2; j++)
            if (scalar(c, in_of(ms, (size_t)j), &v)) {
                scale *= v;
                *sides[i] = in_of(ms, (size_t)(1 - j));
                break;
            }
    }
    const struct rtx_value *q = ox_value(c, qn), *kt = ox_value(c, ktn),
                           *vv = ox_value(c, in_of(c->node, 1));
    if (!q || !kt || !vv || q->ndim < 2 || kt->ndim != q->ndim || vv->ndim != q->ndim ||
        !rtx_dtype_is_float(q->dtype) || kt->dtype != q->dtype || vv->dtype != q->dtype)
        return 0;
    for (int d = 0; d < q->ndim - 2; d++)
        if (kt->dims[d] != q->dims[d] || vv->dims[d] != q->dims[d]) return 0;
    if (mask) {
        const struct rtx_value *mv = ox_value(c, mask);
        if (!mv || (mv->dtype != RTX_BOOL && mv->dtype != q->dtype)) return 0;
        if (is(p, "Add") && mv->dtype == RTX_BOOL) return 0;
    }
    const char *k = keys(c, kt->name, q->ndim, err);
    if (!k) return RTX_EGRAPH;
    const char *ins[4] = {q->name, k, vv->name, mask};
    int node = ox_node(c, "attention", ins, mask ? 4 : 3, ox_out_name(c, 0), err);
    if (node < 0) return node;
    int rc = rtx_graph_set_attr_float(c->g, node, "scale", scale, err);
    if (!rc) rc = ox_finish(c, node, err);
    return rc ? rc : 1;
}

int rtx__onnx_fuse(struct ox *c, struct rtx_err *err) {
    int rc = 0;
    if (is(c->node, "Div") && (rc = fuse_layernorm(c, err)) == 0) rc = fuse_rmsnorm(c, err);
    if (is(c->node, "Mul") && (rc = fuse_gelu(c, err)) == 0) rc = fuse_rmsnorm(c, err);
    if (rc) return rc;
    if (is(c->node, "MatMul")) return fuse_attention(c, err);
    return 0;
}
