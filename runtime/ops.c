/*
 * ops.c - the op table: names, arity, allowed attributes and dtype/shape inference for every
 * op of docs/ops.md. Kernels trust what inference accepted, so every rule of that page that
 * can be checked before running is checked here.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "runtime/runtime-impl.h"

typedef struct rtx__shape shape_t;

static const char *const op_names[] = {
#define OP_NAME(name, str) str,
    RTX_OP_MAP(OP_NAME)
#undef OP_NAME
};
static_assert(sizeof op_names / sizeof op_names[0] == RTX_OP_COUNT, "op names");

const char *rtx_op_name(enum rtx_op op) {
    return (unsigned)op < RTX_OP_COUNT ? op_names[op] : "?";
}

int rtx_op_from_name(const char *name, enum rtx_op *out) {
    for (int i = 0; i < RTX_OP_COUNT; i++) {
        if (strcmp(name, op_names[i]) == 0) {
            *out = (enum rtx_op)i;
            return 0;
        }
    }
    return RTX_ENOTFOUND;
}

/* ---- helpers ---- */

static const char *shape_str(const shape_t *s, char *buf, size_t len) {
    return rtx_shape_str(s->dtype, s->ndim, s->dims, buf, len);
}

static void shape_copy(shape_t *dst, const shape_t *src) { *dst = *src; }

static int broadcast2(const shape_t *a, const shape_t *b, shape_t *out, struct rtx_err *err) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    out->ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            return rtx_err_set(err, RTX_EGRAPH, "shapes %s and %s do not broadcast",
                               shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
        }
        out->dims[i] = da == 1 ? db : da;
    }
    return 0;
}

static int norm_axis(int64_t axis, int ndim, int *out, struct rtx_err *err) {
    int64_t a = axis < 0 ? axis + ndim : axis;
    *out = 0;
    if (a < 0 || a >= ndim)
        return rtx_err_set(err, RTX_EGRAPH, "axis %lld out of range for rank %d",
                           (long long)axis, ndim);
    *out = (int)a;
    return 0;
}

static int same_dtype(const shape_t *a, const shape_t *b, const char *what,
                      struct rtx_err *err) {
    if (a->dtype != b->dtype)
        return rtx_err_set(err, RTX_EGRAPH, "dtype mismatch: %s is %s, expected %s", what,
                           rtx_dtype_name(b->dtype), rtx_dtype_name(a->dtype));
    return 0;
}

static int need_float(const shape_t *s, const char *what, struct rtx_err *err) {
    if (!rtx_dtype_is_float(s->dtype))
        return rtx_err_set(err, RTX_EGRAPH, "%s must be f32, f16 or bf16, not %s", what,
                           rtx_dtype_name(s->dtype));
    return 0;
}

static int need_not_bool(const shape_t *s, const char *what, struct rtx_err *err) {
    if (s->dtype == RTX_BOOL)
        return rtx_err_set(err, RTX_EGRAPH, "%s must not be bool", what);
    return 0;
}

static int need_flag(const struct rtx_node *n, const char *name, struct rtx_err *err) {
    int64_t v = rtx_node_attr_int(n, name, 0);
    if (v != 0 && v != 1)
        return rtx_err_set(err, RTX_EGRAPH, "attribute '%s' must be 0 or 1, not %lld", name,
                           (long long)v);
    return 0;
}

static int check_rank(int ndim, struct rtx_err *err) {
    if (ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EGRAPH, "result rank %d exceeds %d", ndim, RTX_MAX_DIMS);
    return 0;
}

/* ---- elementwise ---- */

static int infer_binary(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    int rc;
    if ((rc = need_not_bool(in[0], "input 0", err)) || (rc = same_dtype(in[0], in[1],
                                                                        "input 1", err)))
        return rc;
    out[0].dtype = in[0]->dtype;
    return broadcast2(in[0], in[1], &out[0], err);
}

static int infer_unary(const struct rtx_node *n, const shape_t *const *in, int n_in,
                       shape_t *out, struct rtx_err *err) {
    enum rtx_dtype dt = in[0]->dtype;
    int rc = 0;
    switch (n->op) {
    case RTX_OP_NEG:
    case RTX_OP_ABS: rc = need_not_bool(in[0], "input", err); break;
    case RTX_OP_RELU:
        if (!rtx_dtype_is_float(dt) && dt != RTX_I8 && dt != RTX_I32 && dt != RTX_I64)
            rc = rtx_err_set(err, RTX_EGRAPH, "input must be a float or signed integer, not %s",
                             rtx_dtype_name(dt));
        break;
    case RTX_OP_GELU: {
        const char *ap = rtx_node_attr_string(n, "approximate", "none");
        if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
            return rtx_err_set(err, RTX_EGRAPH,
                               "attribute 'approximate' must be \"none\" or \"tanh\", not \"%s\"",
                               ap);
        rc = need_float(in[0], "input", err);
        break;
    }
    default: rc = need_float(in[0], "input", err); break;
    }
    if (rc) return rc;
    shape_copy(&out[0], in[0]);
    return 0;
}

static int infer_cast(const struct rtx_node *n, const shape_t *const *in, int n_in,
                      shape_t *out, struct rtx_err *err) {
    const char *to = rtx_node_attr_string(n, "to", "");
    enum rtx_dtype dt;
    if (rtx_dtype_from_name(to, &dt))
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'to': unknown dtype \"%s\"", to);
    shape_copy(&out[0], in[0]);
    out[0].dtype = dt;
    return 0;
}

static int infer_where(const struct rtx_node *n, const shape_t *const *in, int n_in,
                       shape_t *out, struct rtx_err *err) {
    if (in[0]->dtype != RTX_BOOL)
        return rtx_err_set(err, RTX_EGRAPH, "condition must be bool, not %s",
                           rtx_dtype_name(in[0]->dtype));
    int rc = same_dtype(in[1], in[2], "input 2", err);
    if (rc) return rc;
    shape_t t = {.dtype = in[1]->dtype};
    if ((rc = broadcast2(in[0], in[1], &t, err)) || (rc = broadcast2(&t, in[2], &out[0], err)))
        return rc;
    out[0].dtype = in[1]->dtype;
    return 0;
}

static int infer_compare(const struct rtx_node *n, const shape_t *const *in, int n_in,
                         shape_t *out, struct rtx_err *err) {
    int rc = same_dtype(in[0], in[1], "input 1", err);
    if (rc) return rc;
    out[0].dtype = RTX_BOOL;
    return broadcast2(in[0], in[1], &out[0], err);
}

/* ---- linear algebra ---- */

static int infer_matmul(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    int rc;
    if ((rc = need_float(in[0], "a", err)) || (rc = same_dtype(in[0], in[1], "b", err)) ||
        (rc = need_flag(n, "trans_a", err)) || (rc = need_flag(n, "trans_b", err)))
        return rc;
    shape_t a = *in[0], b = *in[1];
    if (a.ndim < 1 || b.ndim < 1)
        return rtx_err_set(err, RTX_EGRAPH, "operands must have rank >= 1");
    if (a.ndim >= 2 && rtx_node_attr_int(n, "trans_a", 0)) {
        int64_t t = a.dims[a.ndim - 1];
        a.dims[a.ndim - 1] = a.dims[a.ndim - 2];
        a.dims[a.ndim - 2] = t;
    }
    if (b.ndim >= 2 && rtx_node_attr_int(n, "trans_b", 0)) {
        int64_t t = b.dims[b.ndim - 1];
        b.dims[b.ndim - 1] = b.dims[b.ndim - 2];
        b.dims[b.ndim - 2] = t;
    }
    bool a_vec = a.ndim == 1, b_vec = b.ndim == 1;
    if (a_vec) { a.ndim = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; }
    if (b_vec) { b.ndim = 2; b.dims[1] = 1; }
    int64_t m = a.dims[a.ndim - 2], k = a.dims[a.ndim - 1];
    int64_t k2 = b.dims[b.ndim - 2], nn = b.dims[b.ndim - 1];
    if (k != k2) {
        char sa[96], sb[96];
        return rtx_err_set(err, RTX_EGRAPH,
                           "inner dimensions differ: %s x %s (%lld vs %lld)",
                           shape_str(in[0], sa, sizeof sa), shape_str(in[1], sb, sizeof sb),
                           (long long)k, (long long)k2);
    }
    shape_t ba = a, bb = b, batch;
    ba.ndim -= 2;
    bb.ndim -= 2;
    if ((rc = broadcast2(&ba, &bb, &batch, err))) return rc;
    out[0] = batch;
    out[0].dtype = in[0]->dtype;
    if (!a_vec) out[0].dims[out[0].ndim++] = m;
    if (!b_vec) out[0].dims[out[0].ndim++] = nn;
    return 0;
}

static int infer_gemm(const struct rtx_node *n, const shape_t *const *in, int n_in,
                      shape_t *out, struct rtx_err *err) {
    int rc;
    if ((rc = need_float(in[0], "a", err)) || (rc = same_dtype(in[0], in[1], "b", err)) ||
        (rc = need_flag(n, "trans_a", err)) || (rc = need_flag(n, "trans_b", err)))
        return rc;
    if (in[0]->ndim != 2 || in[1]->ndim != 2)
        return rtx_err_set(err, RTX_EGRAPH, "a and b must be 2-D (got rank %d and %d)",
                           in[0]->ndim, in[1]->ndim);
    bool ta = rtx_node_attr_int(n, "trans_a", 0), tb = rtx_node_attr_int(n, "trans_b", 0);
    int64_t m = in[0]->dims[ta ? 1 : 0], k = in[0]->dims[ta ? 0 : 1];
    int64_t k2 = in[1]->dims[tb ? 1 : 0], nn = in[1]->dims[tb ? 0 : 1];
    if (k != k2)
        return rtx_err_set(err, RTX_EGRAPH, "inner dimensions differ (%lld vs %lld)",
                           (long long)k, (long long)k2);
    out[0].dtype = in[0]->dtype;
    out[0].ndim = 2;
    out[0].dims[0] = m;
    out[0].dims[1] = nn;
    if (n_in > 2 && in[2]) {
        if ((rc = same_dtype(in[0], in[2], "c", err))) return rc;
        shape_t t;
        if ((rc = broadcast2(&out[0], in[2], &t, err))) return rc;
        if (t.ndim != 2 || t.dims[0] != m || t.dims[1] != nn) {
            char sc[96];
            return rtx_err_set(err, RTX_EGRAPH, "c %s does not broadcast to [%lld,%lld]",
                               shape_str(in[2], sc, sizeof sc), (long long)m, (long long)nn);
        }
    }
    return 0;
}

static int infer_attention(const struct rtx_node *n, const shape_t *const *in, int n_in,
                           shape_t *out, struct rtx_err *err) {
    int rc;
    const shape_t *q = in[0], *k = in[1], *v = in[2];
    if ((rc = need_float(q, "q", err)) || (rc = same_dtype(q, k, "k", err)) ||
        (rc = same_dtype(q, v, "v", err)) || (rc = need_flag(n, "causal", err)))
        return rc;
    if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim)
        return rtx_err_set(err, RTX_EGRAPH, "q, k, v must have one rank >= 2 (got %d, %d, %d)",
                           q->ndim, k->ndim, v->ndim);
    int nd = q->ndim;
    for (int i = 0; i < nd - 2; i++)
        if (k->dims[i] != q->dims[i] || v->dims[i] != q->dims[i])
            return rtx_err_set(err, RTX_EGRAPH, "leading dimension %d differs among q, k, v", i);
    if (k->dims[nd - 1] != q->dims[nd - 1])
        return rtx_err_set(err, RTX_EGRAPH, "head size of k (%lld) differs from q (%lld)",
                           (long long)k->dims[nd - 1], (long long)q->dims[nd - 1]);
    if (v->dims[nd - 2] != k->dims[nd - 2])
        return rtx_err_set(err, RTX_EGRAPH, "v has %lld keys, k has %lld",
                           (long long)v->dims[nd - 2], (long long)k->dims[nd - 2]);
    const struct rtx_attr *sc = rtx_node_attr(n, "scale");
    if (sc && !isfinite(sc->f))
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'scale' must be finite");
    shape_copy(&out[0], q);
    out[0].dims[nd - 1] = v->dims[nd - 1];
    if (n_in > 3 && in[3]) {
        const shape_t *mask = in[3];
        if (mask->dtype != RTX_BOOL && mask->dtype != q->dtype)
            return rtx_err_set(err, RTX_EGRAPH, "mask must be bool or %s, not %s",
                               rtx_dtype_name(q->dtype), rtx_dtype_name(mask->dtype));
        shape_t scores = *q, t;
        scores.dims[nd - 1] = k->dims[nd - 2];
        if ((rc = broadcast2(&scores, mask, &t, err))) return rc;
        if (t.ndim != nd || memcmp(t.dims, scores.dims, sizeof(int64_t) * (size_t)nd) != 0) {
            char sm[96], ss[96];
            return rtx_err_set(err, RTX_EGRAPH, "mask %s does not broadcast to scores %s",
                               shape_str(mask, sm, sizeof sm), shape_str(&scores, ss, sizeof ss));
        }
    }
    return 0;
}

/* ---- shape ops ---- */

static int infer_transpose(const struct rtx_node *n, const shape_t *const *in, int n_in,
                           shape_t *out, struct rtx_err *err) {
    const int64_t *perm;
    int np = rtx_node_attr_ints(n, "perm", &perm);
    int nd = in[0]->ndim;
    out[0].dtype = in[0]->dtype;
    out[0].ndim = nd;
    if (np < 0) {
        for (int i = 0; i < nd; i++) out[0].dims[i] = in[0]->dims[nd - 1 - i];
        return 0;
    }
    if (np != nd)
        return rtx_err_set(err, RTX_EGRAPH, "perm has %d entries for rank %d", np, nd);
    unsigned seen = 0;
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || (seen & (1u << perm[i])))
            return rtx_err_set(err, RTX_EGRAPH, "perm is not a permutation of 0..%d", nd - 1);
        seen |= 1u << perm[i];
        out[0].dims[i] = in[0]->dims[perm[i]];
    }
    return 0;
}

static int infer_reshape(const struct rtx_node *n, const shape_t *const *in, int n_in,
                         shape_t *out, struct rtx_err *err) {
    const int64_t *shp;
    int ns = rtx_node_attr_ints(n, "shape", &shp);
    int rc = check_rank(ns, err);
    if (rc) return rc;
    out[0].dtype = in[0]->dtype;
    out[0].ndim = ns;
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < ns; i++) {
        int64_t d = shp[i];
        if (d == -1) {
            if (infer_at >= 0)
                return rtx_err_set(err, RTX_EGRAPH, "shape has more than one -1");
            infer_at = i;
            continue;
        }
        if (d == 0) {
            if (i >= in[0]->ndim)
                return rtx_err_set(err, RTX_EGRAPH, "shape[%d] = 0 but the input has rank %d",
                                   i, in[0]->ndim);
            d = in[0]->dims[i];
        } else if (d < 0) {
            return rtx_err_set(err, RTX_EGRAPH, "shape[%d] = %lld is invalid", i, (long long)d);
        }
        out[0].dims[i] = d;
        known *= d;
    }
    int64_t total = rtx_shape_numel(in[0]->ndim, in[0]->dims);
    if (infer_at >= 0) {
        if (known == 0 || total % known != 0)
            return rtx_err_set(err, RTX_EGRAPH, "cannot infer -1: %lld elements into %lld",
                               (long long)total, (long long)known);
        out[0].dims[infer_at] = total / known;
        known = total;
    }
    if (known != total) {
        char si[96], so[96];
        return rtx_err_set(err, RTX_EGRAPH, "cannot reshape %s (%lld elements) to %s",
                           shape_str(in[0], si, sizeof si), (long long)total,
                           shape_str(&out[0], so, sizeof so));
    }
    return 0;
}

static int infer_expand(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    const int64_t *shp;
    int ns = rtx_node_attr_ints(n, "shape", &shp);
    int rc = check_rank(ns, err);
    if (rc) return rc;
    shape_t target = {.dtype = in[0]->dtype, .ndim = ns};
    for (int i = 0; i < ns; i++) {
        if (shp[i] < 0)
            return rtx_err_set(err, RTX_EGRAPH, "shape[%d] = %lld is invalid", i,
                               (long long)shp[i]);
        target.dims[i] = shp[i];
    }
    out[0].dtype = in[0]->dtype;
    return broadcast2(in[0], &target, &out[0], err);
}

static int infer_concat(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    int axis, rc;
    if (in[0]->ndim == 0) return rtx_err_set(err, RTX_EGRAPH, "cannot concatenate scalars");
    if ((rc = norm_axis(rtx_node_attr_int(n, "axis", 0), in[0]->ndim, &axis, err))) return rc;
    shape_copy(&out[0], in[0]);
    for (int i = 1; i < n_in; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %d", i);
        if ((rc = same_dtype(in[0], in[i], what, err))) return rc;
        if (in[i]->ndim != in[0]->ndim)
            return rtx_err_set(err, RTX_EGRAPH, "input %d has rank %d, input 0 rank %d", i,
                               in[i]->ndim, in[0]->ndim);
        for (int d = 0; d < in[0]->ndim; d++) {
            if (d != axis && in[i]->dims[d] != in[0]->dims[d]) {
                char s0[96], si[96];
                return rtx_err_set(err, RTX_EGRAPH, "input %d %s differs from input 0 %s "
                                   "outside axis %d", i, shape_str(in[i], si, sizeof si),
                                   shape_str(in[0], s0, sizeof s0), axis);
            }
        }
        out[0].dims[axis] += in[i]->dims[axis];
    }
    return 0;
}

int64_t rtx_slice_range(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first) {
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
    if (start < 0) {
        start = start < -n ? lo : start + n;
        if (start < lo) start = lo;
    } else if (start > hi) {
        start = hi;
    }
    if (end < 0) {
        end = end < -n ? lo : end + n;
        if (end < lo) end = lo;
    } else if (end > hi) {
        end = hi;
    }
    *first = start;
    if (step > 0) return end > start ? 1 + (end - start - 1) / step : 0;
    int64_t back = step == INT64_MIN ? INT64_MAX : -step;
    return start > end ? 1 + (start - end - 1) / back : 0;
}

static int infer_slice(const struct rtx_node *n, const shape_t *const *in, int n_in,
                       shape_t *out, struct rtx_err *err) {
    const int64_t *starts, *ends, *axes = NULL, *steps = NULL;
    int ns = rtx_node_attr_ints(n, "starts", &starts);
    int ne = rtx_node_attr_ints(n, "ends", &ends);
    int na = rtx_node_attr_ints(n, "axes", &axes);
    int nst = rtx_node_attr_ints(n, "steps", &steps);
    if (ns != ne) return rtx_err_set(err, RTX_EGRAPH, "starts has %d entries, ends %d", ns, ne);
    if (na >= 0 && na != ns)
        return rtx_err_set(err, RTX_EGRAPH, "axes has %d entries, starts %d", na, ns);
    if (nst >= 0 && nst != ns)
        return rtx_err_set(err, RTX_EGRAPH, "steps has %d entries, starts %d", nst, ns);
    shape_copy(&out[0], in[0]);
    unsigned seen = 0;
    for (int i = 0; i < ns; i++) {
        int axis, rc;
        if ((rc = norm_axis(na >= 0 ? axes[i] : i, in[0]->ndim, &axis, err))) return rc;
        if (seen & (1u << axis))
            return rtx_err_set(err, RTX_EGRAPH, "axis %d is sliced twice", axis);
        seen |= 1u << axis;
        int64_t step = nst >= 0 ? steps[i] : 1;
        if (step == 0) return rtx_err_set(err, RTX_EGRAPH, "steps[%d] is 0", i);
        int64_t first;
        out[0].dims[axis] = rtx_slice_range(in[0]->dims[axis], starts[i], ends[i], step, &first);
    }
    return 0;
}

static int infer_gather(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    const shape_t *data = in[0], *idx = in[1];
    int axis, rc;
    if (idx->dtype != RTX_I32 && idx->dtype != RTX_I64)
        return rtx_err_set(err, RTX_EGRAPH, "indices must be i32 or i64, not %s",
                           rtx_dtype_name(idx->dtype));
    if (data->ndim < 1) return rtx_err_set(err, RTX_EGRAPH, "data must have rank >= 1");
    if ((rc = norm_axis(rtx_node_attr_int(n, "axis", 0), data->ndim, &axis, err))) return rc;
    if ((rc = check_rank(data->ndim - 1 + idx->ndim, err))) return rc;
    if (data->dims[axis] == 0 && rtx_shape_numel(idx->ndim, idx->dims) > 0)
        return rtx_err_set(err, RTX_EGRAPH, "gathering from an empty axis %d", axis);
    out[0].dtype = data->dtype;
    int k = 0;
    for (int i = 0; i < axis; i++) out[0].dims[k++] = data->dims[i];
    for (int i = 0; i < idx->ndim; i++) out[0].dims[k++] = idx->dims[i];
    for (int i = axis + 1; i < data->ndim; i++) out[0].dims[k++] = data->dims[i];
    out[0].ndim = k;
    return 0;
}

static int infer_constant(const struct rtx_node *n, const shape_t *const *in, int n_in,
                          shape_t *out, struct rtx_err *err) {
    const struct rtx_attr *a = rtx_node_attr(n, "value");
    if (!a || a->type != RTX_ATTR_TENSOR || !a->t)
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'value' (tensor) is required");
    out[0].dtype = a->t->dtype;
    out[0].ndim = a->t->ndim;
    for (int i = 0; i < a->t->ndim; i++) out[0].dims[i] = a->t->dims[i];
    return 0;
}

/* ---- reductions and normalizations ---- */

/* Reduced-axis mask from attribute `axes` (absent or empty: all). */
static int reduce_mask(const struct rtx_node *n, int ndim, unsigned *mask, struct rtx_err *err) {
    const int64_t *axes;
    int na = rtx_node_attr_ints(n, "axes", &axes);
    *mask = 0;
    if (na <= 0) {
        *mask = ndim ? (1u << ndim) - 1 : 0;
        return 0;
    }
    for (int i = 0; i < na; i++) {
        int a, rc;
        if ((rc = norm_axis(axes[i], ndim, &a, err))) return rc;
        if (*mask & (1u << a)) return rtx_err_set(err, RTX_EGRAPH, "axis %d listed twice", a);
        *mask |= 1u << a;
    }
    return 0;
}

static int infer_reduce(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    int rc;
    unsigned mask;
    if ((rc = need_flag(n, "keepdims", err))) return rc;
    if (n->op == RTX_OP_REDUCE_MEAN) rc = need_float(in[0], "input", err);
    else rc = need_not_bool(in[0], "input", err);
    if (rc || (rc = reduce_mask(n, in[0]->ndim, &mask, err))) return rc;
    bool keep = rtx_node_attr_int(n, "keepdims", 0);
    out[0].dtype = in[0]->dtype;
    out[0].ndim = 0;
    for (int i = 0; i < in[0]->ndim; i++) {
        if (mask & (1u << i)) {
            if (in[0]->dims[i] == 0 && (n->op == RTX_OP_REDUCE_MAX || n->op == RTX_OP_REDUCE_MIN))
                return rtx_err_set(err, RTX_EGRAPH, "%s over axis %d of size 0",
                                   rtx_op_name(n->op), i);
            if (keep) out[0].dims[out[0].ndim++] = 1;
        } else {
            out[0].dims[out[0].ndim++] = in[0]->dims[i];
        }
    }
    return 0;
}

static int infer_argmax(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    int axis, rc;
    if ((rc = need_not_bool(in[0], "input", err)) || (rc = need_flag(n, "keepdims", err)))
        return rc;
    if (in[0]->ndim == 0) return rtx_err_set(err, RTX_EGRAPH, "input must have rank >= 1");
    if ((rc = norm_axis(rtx_node_attr_int(n, "axis", -1), in[0]->ndim, &axis, err))) return rc;
    if (in[0]->dims[axis] == 0)
        return rtx_err_set(err, RTX_EGRAPH, "argmax over axis %d of size 0", axis);
    bool keep = rtx_node_attr_int(n, "keepdims", 0);
    out[0].dtype = RTX_I64;
    out[0].ndim = 0;
    for (int i = 0; i < in[0]->ndim; i++) {
        if (i != axis) out[0].dims[out[0].ndim++] = in[0]->dims[i];
        else if (keep) out[0].dims[out[0].ndim++] = 1;
    }
    return 0;
}

static int infer_softmax(const struct rtx_node *n, const shape_t *const *in, int n_in,
                         shape_t *out, struct rtx_err *err) {
    int axis, rc;
    if ((rc = need_float(in[0], "input", err))) return rc;
    if (in[0]->ndim == 0) return rtx_err_set(err, RTX_EGRAPH, "input must have rank >= 1");
    if ((rc = norm_axis(rtx_node_attr_int(n, "axis", -1), in[0]->ndim, &axis, err))) return rc;
    shape_copy(&out[0], in[0]);
    return 0;
}

static int infer_norm(const struct rtx_node *n, const shape_t *const *in, int n_in,
                      shape_t *out, struct rtx_err *err) {
    int axis, rc;
    const shape_t *x = in[0];
    if ((rc = need_float(x, "x", err))) return rc;
    if (x->ndim == 0) return rtx_err_set(err, RTX_EGRAPH, "x must have rank >= 1");
    if ((rc = norm_axis(rtx_node_attr_int(n, "axis", -1), x->ndim, &axis, err))) return rc;
    const struct rtx_attr *eps = rtx_node_attr(n, "epsilon");
    if (eps && !(eps->f >= 0 && isfinite(eps->f)))
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'epsilon' must be finite and >= 0");
    static const char *const names[] = {"x", "scale", "bias"};
    for (int i = 1; i < n_in; i++) {
        if (!in[i]) continue;
        if ((rc = same_dtype(x, in[i], names[i], err))) return rc;
        int nd = x->ndim - axis;
        if (in[i]->ndim != nd ||
            memcmp(in[i]->dims, x->dims + axis, sizeof(int64_t) * (size_t)nd) != 0) {
            char sp[96], sx[96];
            return rtx_err_set(err, RTX_EGRAPH, "%s %s must have x's trailing shape from axis "
                               "%d (x is %s)", names[i], shape_str(in[i], sp, sizeof sp), axis,
                               shape_str(x, sx, sizeof sx));
        }
    }
    shape_copy(&out[0], x);
    return 0;
}

/* ---- convolution and pooling ---- */

static int ints_attr(const struct rtx_node *n, const char *name, int want, int64_t dflt,
                     int64_t min, int64_t *out, struct rtx_err *err) {
    const int64_t *v;
    int k = rtx_node_attr_ints(n, name, &v);
    for (int i = 0; i < want; i++) out[i] = dflt;
    if (k < 0) return 0;
    if (k != want)
        return rtx_err_set(err, RTX_EGRAPH, "attribute '%s' needs %d values, has %d", name,
                           want, k);
    for (int i = 0; i < want; i++) {
        if (v[i] < min)
            return rtx_err_set(err, RTX_EGRAPH, "attribute '%s'[%d] = %lld is below %lld", name,
                               i, (long long)v[i], (long long)min);
        out[i] = v[i];
    }
    return 0;
}

/* Output positions along one axis, as PyTorch sizes convolution and pooling: floor division
 * of the span, a ceiling with ceil_mode, and no window that starts in the bottom padding. */
static int64_t window_count(int64_t size, int64_t pad_lo, int64_t pad_hi, int64_t k,
                            int64_t stride, int64_t dil, bool ceil_mode) {
    int64_t span = size + pad_lo + pad_hi - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    int64_t o = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
    if (ceil_mode && o > 0 && (o - 1) * stride >= size + pad_lo) o--;
    return o;
}

static int infer_conv2d(const struct rtx_node *n, const shape_t *const *in, int n_in,
                        shape_t *out, struct rtx_err *err) {
    const shape_t *x = in[0], *w = in[1];
    int rc;
    int64_t strides[2], pads[4], dil[2];
    if ((rc = need_float(x, "x", err)) || (rc = same_dtype(x, w, "w", err))) return rc;
    if (x->ndim != 4 || w->ndim != 4)
        return rtx_err_set(err, RTX_EGRAPH, "x and w must be 4-D (NCHW, OIHW), got rank %d and %d",
                           x->ndim, w->ndim);
    if ((rc = ints_attr(n, "strides", 2, 1, 1, strides, err)) ||
        (rc = ints_attr(n, "pads", 4, 0, 0, pads, err)) ||
        (rc = ints_attr(n, "dilations", 2, 1, 1, dil, err)))
        return rc;
    int64_t groups = rtx_node_attr_int(n, "groups", 1);
    if (groups < 1) return rtx_err_set(err, RTX_EGRAPH, "groups must be >= 1");
    if (x->dims[1] % groups || w->dims[0] % groups || w->dims[1] * groups != x->dims[1])
        return rtx_err_set(err, RTX_EGRAPH, "channels: x has %lld, w expects %lld x %lld groups, "
                           "%lld outputs", (long long)x->dims[1], (long long)w->dims[1],
                           (long long)groups, (long long)w->dims[0]);
    if (n_in > 2 && in[2]) {
        if ((rc = same_dtype(x, in[2], "b", err))) return rc;
        if (in[2]->ndim != 1 || in[2]->dims[0] != w->dims[0])
            return rtx_err_set(err, RTX_EGRAPH, "b must be [%lld]", (long long)w->dims[0]);
    }
    out[0].dtype = x->dtype;
    out[0].ndim = 4;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = w->dims[0];
    for (int i = 0; i < 2; i++) {
        if (w->dims[2 + i] < 1) return rtx_err_set(err, RTX_EGRAPH, "empty kernel");
        out[0].dims[2 + i] = window_count(x->dims[2 + i], pads[i], pads[2 + i], w->dims[2 + i],
                                          strides[i], dil[i], false);
        if (out[0].dims[2 + i] < 1)
            return rtx_err_set(err, RTX_EGRAPH, "kernel larger than the padded input");
    }
    return 0;
}

static int infer_pool(const struct rtx_node *n, const shape_t *const *in, int n_in,
                      shape_t *out, struct rtx_err *err) {
    const shape_t *x = in[0];
    int rc;
    int64_t kernel[2], strides[2], pads[4], dil[2];
    if ((rc = need_float(x, "x", err)) || (rc = need_flag(n, "ceil_mode", err)) ||
        (rc = need_flag(n, "count_include_pad", err)))
        return rc;
    if (x->ndim != 4) return rtx_err_set(err, RTX_EGRAPH, "x must be 4-D (NCHW), got rank %d",
                                         x->ndim);
    const int64_t *ks;
    if (rtx_node_attr_ints(n, "kernel_shape", &ks) != 2)
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'kernel_shape' needs 2 values");
    if ((rc = ints_attr(n, "kernel_shape", 2, 1, 1, kernel, err)) ||
        (rc = ints_attr(n, "strides", 2, 0, 1, strides, err)) ||
        (rc = ints_attr(n, "pads", 4, 0, 0, pads, err)) ||
        (rc = ints_attr(n, "dilations", 2, 1, 1, dil, err)))
        return rc;
    for (int i = 0; i < 2; i++) {
        if (strides[i] == 0) strides[i] = kernel[i];
        if (pads[i] * 2 > kernel[i] || pads[i + 2] * 2 > kernel[i])
            return rtx_err_set(err, RTX_EGRAPH, "pads must be at most half the kernel");
    }
    bool ceil_mode = rtx_node_attr_int(n, "ceil_mode", 0);
    out[0].dtype = x->dtype;
    out[0].ndim = 4;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = x->dims[1];
    for (int i = 0; i < 2; i++) {
        out[0].dims[2 + i] = window_count(x->dims[2 + i], pads[i], pads[2 + i], kernel[i],
                                          strides[i], dil[i], ceil_mode);
        if (out[0].dims[2 + i] < 1)
            return rtx_err_set(err, RTX_EGRAPH, "kernel larger than the padded input");
    }
    return 0;
}

/* ---- the table ---- */

#define BIN "", "", infer_binary
#define UN(attrs) attrs, "", infer_unary
static const struct rtx__op_info op_table[RTX_OP_COUNT] = {
    [RTX_OP_ADD] = {"add", 2, 2, 1, BIN},
    [RTX_OP_SUB] = {"sub", 2, 2, 1, BIN},
    [RTX_OP_MUL] = {"mul", 2, 2, 1, BIN},
    [RTX_OP_DIV] = {"div", 2, 2, 1, BIN},
    [RTX_OP_POW] = {"pow", 2, 2, 1, BIN},
    [RTX_OP_NEG] = {"neg", 1, 1, 1, UN("")},
    [RTX_OP_ABS] = {"abs", 1, 1, 1, UN("")},
    [RTX_OP_SQRT] = {"sqrt", 1, 1, 1, UN("")},
    [RTX_OP_RSQRT] = {"rsqrt", 1, 1, 1, UN("")},
    [RTX_OP_EXP] = {"exp", 1, 1, 1, UN("")},
    [RTX_OP_LOG] = {"log", 1, 1, 1, UN("")},
    [RTX_OP_TANH] = {"tanh", 1, 1, 1, UN("")},
    [RTX_OP_ERF] = {"erf", 1, 1, 1, UN("")},
    [RTX_OP_RELU] = {"relu", 1, 1, 1, UN("")},
    [RTX_OP_GELU] = {"gelu", 1, 1, 1, UN("approximate:s")},
    [RTX_OP_SILU] = {"silu", 1, 1, 1, UN("")},
    [RTX_OP_SIGMOID] = {"sigmoid", 1, 1, 1, UN("")},
    [RTX_OP_CAST] = {"cast", 1, 1, 1, "to:s", "to", infer_cast},
    [RTX_OP_WHERE] = {"where", 3, 3, 1, "", "", infer_where},
    [RTX_OP_EQUAL] = {"equal", 2, 2, 1, "", "", infer_compare},
    [RTX_OP_LESS] = {"less", 2, 2, 1, "", "", infer_compare},
    [RTX_OP_GREATER] = {"greater", 2, 2, 1, "", "", infer_compare},
    [RTX_OP_MATMUL] = {"matmul", 2, 2, 1, "trans_a:i,trans_b:i", "", infer_matmul},
    [RTX_OP_GEMM] = {"gemm", 2, 3, 1, "alpha:f,beta:f,trans_a:i,trans_b:i", "", infer_gemm},
    [RTX_OP_TRANSPOSE] = {"transpose", 1, 1, 1, "perm:I", "", infer_transpose},
    [RTX_OP_RESHAPE] = {"reshape", 1, 1, 1, "shape:I", "shape", infer_reshape},
    [RTX_OP_EXPAND] = {"expand", 1, 1, 1, "shape:I", "shape", infer_expand},
    [RTX_OP_CONCAT] = {"concat", 1, -1, 1, "axis:i", "axis", infer_concat},
    [RTX_OP_SLICE] = {"slice", 1, 1, 1, "starts:I,ends:I,axes:I,steps:I", "starts,ends",
                      infer_slice},
    [RTX_OP_GATHER] = {"gather", 2, 2, 1, "axis:i", "", infer_gather},
    [RTX_OP_REDUCE_SUM] = {"reduce_sum", 1, 1, 1, "axes:I,keepdims:i", "", infer_reduce},
    [RTX_OP_REDUCE_MEAN] = {"reduce_mean", 1, 1, 1, "axes:I,keepdims:i", "", infer_reduce},
    [RTX_OP_REDUCE_MAX] = {"reduce_max", 1, 1, 1, "axes:I,keepdims:i", "", infer_reduce},
    [RTX_OP_REDUCE_MIN] = {"reduce_min", 1, 1, 1, "axes:I,keepdims:i", "", infer_reduce},
    [RTX_OP_ARGMAX] = {"argmax", 1, 1, 1, "axis:i,keepdims:i", "", infer_argmax},
    [RTX_OP_SOFTMAX] = {"softmax", 1, 1, 1, "axis:i", "", infer_softmax},
    [RTX_OP_LOG_SOFTMAX] = {"log_softmax", 1, 1, 1, "axis:i", "", infer_softmax},
    [RTX_OP_LAYER_NORM] = {"layer_norm", 1, 3, 1, "axis:i,epsilon:f", "", infer_norm},
    [RTX_OP_RMS_NORM] = {"rms_norm", 1, 2, 1, "axis:i,epsilon:f", "", infer_norm},
    [RTX_OP_ATTENTION] = {"attention", 3, 4, 1, "causal:i,scale:f", "", infer_attention},
    [RTX_OP_CONSTANT] = {"constant", 0, 0, 1, "value:t", "value", infer_constant},
    [RTX_OP_CONV2D] = {"conv2d", 2, 3, 1, "strides:I,pads:I,dilations:I,groups:i", "",
                       infer_conv2d},
    [RTX_OP_MAX_POOL2D] = {"max_pool2d", 1, 1, 1,
                           "kernel_shape:I,strides:I,pads:I,dilations:I,ceil_mode:i",
                           "kernel_shape", infer_pool},
    [RTX_OP_AVG_POOL2D] = {"avg_pool2d", 1, 1, 1,
                           "kernel_shape:I,strides:I,pads:I,ceil_mode:i,count_include_pad:i",
                           "kernel_shape", infer_pool},
    [RTX_OP_ROPE] = {"rope", 3, 3, 1, "interleaved:i", "", rtx__infer_rope},
    /* writes k_cache and v_cache (inputs 3 and 4) in place */
    [RTX_OP_PAGED_ATTENTION] = {"paged_attention", 9, 9, 1, "scale:f", "",
                                rtx__infer_paged_attention, (1u << 3) | (1u << 4)},
};
#undef BIN
#undef UN

const struct rtx__op_info *rtx__op_info(enum rtx_op op) {
    return (unsigned)op < RTX_OP_COUNT ? &op_table[op] : NULL;
}

static const char attr_type_letters[RTX_ATTR_TYPE_COUNT] = {
    [RTX_ATTR_INT] = 'i', [RTX_ATTR_FLOAT] = 'f', [RTX_ATTR_STRING] = 's',
    [RTX_ATTR_INTS] = 'I', [RTX_ATTR_FLOATS] = 'F', [RTX_ATTR_TENSOR] = 't',
};
static const char *const attr_type_names[RTX_ATTR_TYPE_COUNT] = {
    [RTX_ATTR_INT] = "int", [RTX_ATTR_FLOAT] = "float", [RTX_ATTR_STRING] = "string",
    [RTX_ATTR_INTS] = "ints", [RTX_ATTR_FLOATS] = "floats", [RTX_ATTR_TENSOR] = "tensor",
};

/* Finds `name` in a "name:T,name:T" list; returns the type letter or 0. */
static char spec_lookup(const char *spec, const char *name) {
    size_t len = strlen(name);
    for (const char *p = spec; *p;) {
        const char *colon = strchr(p, ':');
        if (!colon) break;
        if ((size_t)(colon - p) == len && strncmp(p, name, len) == 0) return colon[1];
        p = strchr(colon, ',');
        if (!p) break;
        p++;
    }
    return 0;
}

static const char *letter_type_name(char c) {
    for (int i = 0; i < RTX_ATTR_TYPE_COUNT; i++)
        if (attr_type_letters[i] == c) return attr_type_names[i];
    return "?";
}

int rtx__check_attrs(const struct rtx_node *n, struct rtx_err *err) {
    const struct rtx__op_info *info = rtx__op_info(n->op);
    for (int i = 0; i < n->n_attrs; i++) {
        const struct rtx_attr *a = &n->attrs[i];
        char want = spec_lookup(info->attrs, a->name);
        if (!want)
            return rtx_err_set(err, RTX_EGRAPH, "op %s has no attribute '%s'", info->name,
                               a->name);
        if ((unsigned)a->type >= RTX_ATTR_TYPE_COUNT || attr_type_letters[a->type] != want)
            return rtx_err_set(err, RTX_EGRAPH, "attribute '%s' must be %s, not %s", a->name,
                               letter_type_name(want),
                               (unsigned)a->type < RTX_ATTR_TYPE_COUNT
                                   ? attr_type_names[a->type] : "?");
    }
    for (const char *p = info->required; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        if (!rtx_node_attr(n, name))
            return rtx_err_set(err, RTX_EGRAPH, "op %s requires attribute '%s'", info->name,
                               name);
        if (!end) break;
        p = end + 1;
    }
    return 0;
}
