/*
 * ops-attention.c - ONNX's Attention (opset 23: what torch.onnx.export writes for
 * scaled_dot_product_attention at opset 23) lowered to rtx's attention op (docs/onnx.md).
 *
 * DESIGN
 * Q, K and V come 4-D ([batch, heads, sequence, head size]) or 3-D ([batch, sequence, heads x
 * head size], the heads given by q_num_heads / kv_num_heads): 3-D ones are reshaped and
 * transposed to 4-D, and the output back. past_key / past_value are concatenated before K and
 * V along the sequence, and present_key / present_value are those concatenations. Grouped
 * queries (q_num_heads a multiple of kv_num_heads) repeat each K and V head for its group
 * (reshape, expand, reshape), since rtx's attention takes equal leading dims. The mask (bool:
 * true attends; or float: added to the scores) goes to rtx's attention as it is, cast to Q's
 * type when it is another float type. is_causal: query i attends to keys j <= i + P, P the
 * past's length, as onnxruntime computes it; without a past that is rtx's top-left causal
 * attribute, with one a constant bool mask [Sq, P + Skv] joined with the given mask.
 * softcap and the qk_matmul_output output are refused by name; softmax_precision needs
 * nothing (rtx's softmax runs in f32 at least).
 */
#include <math.h>
#include <string.h>

#include "onnx/onnx-impl.h"

enum { IN_Q, IN_K, IN_V, IN_MASK, IN_PAST_K, IN_PAST_V };

/* x with dims 1 and 2 swapped (4-D) into a fresh value; NULL on error. */
static const char *swap_12(struct ox *c, const char *x, struct rtx_err *err) {
    static const int64_t perm[4] = {0, 2, 1, 3};
    const char *t = ox_tmp(c, "attn_t");
    int k = ox_node(c, "transpose", &x, 1, t, err);
    if (k < 0 || rtx_graph_set_attr_ints(c->g, k, "perm", perm, 4, err) || ox_finish(c, k, err))
        return NULL;
    return t;
}

/* x [B, S, H*D] -> [B, H, S, D] */
static const char *to_heads(struct ox *c, const struct rtx_value *x, int64_t heads,
                            struct rtx_err *err) {
    int64_t d[4] = {x->dims[0], x->dims[1], heads, x->dims[2] / heads};
    const char *r = ox_tmp(c, "heads");
    return ox_reshape(c, x->name, 4, d, r, err) ? NULL : swap_12(c, r, err);
}

/* One of Q, K, V as [B, H, S, D]: 4-D as given, 3-D split into heads (attribute attr). */
static const char *operand(struct ox *c, int i, const char *attr, int64_t *heads,
                           struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, i, err);
    if (!x) return NULL;
    if (!rtx_dtype_is_float(x->dtype)) {
        ox_unsupported(c, err, "input %d is %s (float types only)", i,
                       rtx_dtype_name(x->dtype));
        return NULL;
    }
    if (x->ndim == 4) {
        *heads = x->dims[1];
        return x->name;
    }
    if (x->ndim != 3) {
        rtx_err_set(err, RTX_EGRAPH, "node '%s' (Attention): input %d has rank %d (3 or 4)",
                    c->node->name ? c->node->name : "", i, x->ndim);
        return NULL;
    }
    *heads = ox_attr_int(c, attr, 0);
    if (*heads <= 0 || x->dims[2] % *heads != 0) {
        rtx_err_set(err, RTX_EGRAPH,
                    "node '%s' (Attention): a 3-D input %d needs %s dividing its last "
                    "dimension %lld (got %lld)",
                    c->node->name ? c->node->name : "", i, attr, (long long)x->dims[2],
                    (long long)*heads);
        return NULL;
    }
    return to_heads(c, x, *heads, err);
}

/* past (input pi, 4-D) and cur along the sequence; cur alone when there is no past. */
static const char *with_past(struct ox *c, int pi, const char *cur, struct rtx_err *err) {
    if (!ox_has_in(c, pi)) return cur;
    struct rtx_value *p = ox_in(c, pi, err);
    if (!p) return NULL;
    if (p->ndim != 4) {
        ox_unsupported(c, err, "input %d (past) has rank %d, not 4", pi, p->ndim);
        return NULL;
    }
    const char *ins[2] = {p->name, cur}, *out = ox_tmp(c, "present");
    int k = ox_node(c, "concat", ins, 2, out, err);
    if (k < 0 || rtx_graph_set_attr_int(c->g, k, "axis", 2, err) || ox_finish(c, k, err))
        return NULL;
    return out;
}

/* x [B, Hkv, S, D] with each head repeated g times: [B, Hkv * g, S, D]. */
static const char *repeat_heads(struct ox *c, const char *x, int64_t g, struct rtx_err *err) {
    const struct rtx_value *v = ox_value(c, x);
    if (!v) return NULL;
    int64_t b = v->dims[0], h = v->dims[1], s = v->dims[2], d = v->dims[3];
    int64_t d5[5] = {b, h, 1, s, d}, e5[5] = {b, h, g, s, d}, d4[4] = {b, h * g, s, d};
    const char *r = ox_tmp(c, "kv5"), *e = ox_tmp(c, "kv_rep"), *o = ox_tmp(c, "kv_groups");
    if (ox_reshape(c, x, 5, d5, r, err)) return NULL;
    int k = ox_node(c, "expand", &r, 1, e, err);
    if (k < 0 || rtx_graph_set_attr_ints(c->g, k, "shape", e5, 5, err) || ox_finish(c, k, err))
        return NULL;
    return ox_reshape(c, e, 4, d4, o, err) ? NULL : o;
}

/* The mask for rtx's attention: the given one (cast to dt when another float type), joined
 * with the causal mask tril(P) when a past shifts the causal diagonal. NULL with *none set
 * when there is no mask at all. */
static const char *mask_of(struct ox *c, enum rtx_dtype dt, int64_t sq, int64_t skv, int64_t past,
                           bool causal, bool *none, struct rtx_err *err) {
    *none = false;
    const char *m = NULL;
    enum rtx_dtype mdt = RTX_BOOL;
    if (ox_has_in(c, IN_MASK)) {
        struct rtx_value *mv = ox_in(c, IN_MASK, err);
        if (!mv) return NULL;
        m = mv->name;
        mdt = mv->dtype;
        if (mdt != RTX_BOOL && !rtx_dtype_is_float(mdt)) {
            ox_unsupported(c, err, "attn_mask is %s (bool or float)", rtx_dtype_name(mdt));
            return NULL;
        }
        if (rtx_dtype_is_float(mdt) && mdt != dt) {
            const char *cast = ox_tmp(c, "mask_cast");
            int k = ox_node(c, "cast", &m, 1, cast, err);
            if (k < 0 || rtx_graph_set_attr_string(c->g, k, "to", rtx_dtype_name(dt), err) ||
                ox_finish(c, k, err))
                return NULL;
            m = cast;
            mdt = dt;
        }
    }
    if (!causal || past == 0) {
        *none = m == NULL;
        return m;
    }
    int64_t dims[2] = {sq, skv};
    struct rtx_tensor *t = NULL;
    if (rtx_tensor_new(RTX_BOOL, 2, dims, &t, err)) return NULL;
    uint8_t *b = rtx_tensor_data(t);
    for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < skv; j++) b[i * skv + j] = j <= i + past;
    const char *cm = ox_tmp(c, "causal");
    int rc = ox_const(c, cm, t, err);
    rtx_tensor_unref(t);
    if (rc) return NULL;
    if (!m) return cm;
    /* bool: both must allow; float: the given values where causal allows, -inf elsewhere */
    const char *ins[3] = {cm, m, NULL}, *out = ox_tmp(c, "mask");
    if (mdt == RTX_BOOL) {
        ins[2] = ox_scalar(c, RTX_BOOL, 0, err);
    } else {
        ins[2] = ox_scalar(c, dt, -INFINITY, err);
    }
    if (!ins[2] || ox_emit(c, "where", ins, 3, out, err)) return NULL;
    return out;
}

int ox_lower_attention(struct ox *c, struct rtx_err *err) {
    if (ox_attr_float(c, "softcap", 0) != 0) return ox_unsupported(c, err, "softcap");
    if (ox_attr_int(c, "qk_matmul_output_mode", 0) != 0 || *ox_out_name(c, 3))
        return ox_unsupported(c, err, "the qk_matmul_output output");
    if (ox_has_in(c, IN_PAST_K) != ox_has_in(c, IN_PAST_V))
        return ox_unsupported(c, err, "past_key without past_value (or the reverse)");
    struct rtx_value *q0 = ox_in(c, IN_Q, err);
    if (!q0) return RTX_EGRAPH;
    bool q3 = q0->ndim == 3;
    int64_t bq = q0->dims[0], hq = 0, hk = 0, hv = 0;
    enum rtx_dtype dt = q0->dtype;
    const char *q = operand(c, IN_Q, "q_num_heads", &hq, err);
    const char *k = q ? operand(c, IN_K, "kv_num_heads", &hk, err) : NULL;
    const char *v = k ? operand(c, IN_V, "kv_num_heads", &hv, err) : NULL;
    if (!v) return err && err->code ? err->code : RTX_EGRAPH;
    const struct rtx_value *kv = ox_value(c, k), *vv = ox_value(c, v), *qv = ox_value(c, q);
    if (!kv || !vv || !qv) return RTX_EGRAPH;
    int64_t sq = qv->dims[2], dq = qv->dims[3];
    if (kv->dtype != dt || vv->dtype != dt || kv->dims[0] != bq || vv->dims[0] != bq ||
        hk != hv || kv->dims[3] != dq || vv->dims[2] != kv->dims[2] || hk <= 0 || hq % hk)
        return rtx_err_set(err, RTX_EGRAPH,
                           "node '%s' (Attention): Q %s [%lld, %lld heads, %lld, %lld], K %s "
                           "with %lld heads of %lld, V %s with %lld heads: types, batch, head "
                           "size or head counts (Q's a multiple of K's) disagree",
                           c->node->name ? c->node->name : "", rtx_dtype_name(dt),
                           (long long)bq, (long long)hq, (long long)sq, (long long)dq,
                           rtx_dtype_name(kv->dtype), (long long)hk, (long long)kv->dims[3],
                           rtx_dtype_name(vv->dtype), (long long)hv);
    int64_t past = 0;
    if (ox_has_in(c, IN_PAST_K)) {
        struct rtx_value *pk = ox_in(c, IN_PAST_K, err);
        if (!pk) return RTX_EGRAPH;
        past = pk->ndim == 4 ? pk->dims[2] : 0;
    }
    const char *kp = with_past(c, IN_PAST_K, k, err);
    const char *vp = kp ? with_past(c, IN_PAST_V, v, err) : NULL;
    if (!vp) return err && err->code ? err->code : RTX_EGRAPH;
    int rc = 0;
    if (*ox_out_name(c, 1) && (rc = ox_alias(c, 1, kp, err))) return rc;
    if (*ox_out_name(c, 2) && (rc = ox_alias(c, 2, vp, err))) return rc;
    const char *ka = kp, *va = vp;
    if (hq != hk) {
        ka = repeat_heads(c, kp, hq / hk, err);
        va = ka ? repeat_heads(c, vp, hq / hk, err) : NULL;
        if (!va) return err && err->code ? err->code : RTX_EGRAPH;
    }
    const struct rtx_value *kt = ox_value(c, kp);
    if (!kt) return RTX_EGRAPH;
    int64_t skv = kt->dims[2];
    bool causal = ox_attr_int(c, "is_causal", 0) != 0, none;
    const char *mask = mask_of(c, dt, sq, skv, past, causal, &none, err);
    if (!mask && !none) return err && err->code ? err->code : RTX_EGRAPH;
    const char *ins[4] = {q, ka, va, mask};
    const char *y = q3 ? ox_tmp(c, "attn") : ox_out_name(c, 0);
    int node = ox_node(c, "attention", ins, mask ? 4 : 3, y, err);
    if (node < 0) return node;
    rc = rtx_graph_set_attr_float(c->g, node, "scale",
                                  ox_attr_float(c, "scale", 1.0 / sqrt((double)dq)), err);
    if (!rc && causal && past == 0) rc = rtx_graph_set_attr_int(c->g, node, "causal", 1, err);
    if (rc || (rc = ox_finish(c, node, err))) return rc;
    if (!q3) return 0;
    /* [B, H, Sq, Dv] -> [B, Sq, H, Dv] -> [B, Sq, H * Dv] */
    const struct rtx_value *yv = ox_value(c, y);
    if (!yv) return RTX_EGRAPH;
    int64_t dv = yv->dims[3];
    const char *t = swap_12(c, y, err);
    if (!t) return err && err->code ? err->code : RTX_EGRAPH;
    int64_t d3[3] = {bq, sq, hq * dv};
    return ox_reshape(c, t, 3, d3, ox_out_name(c, 0), err);
}
