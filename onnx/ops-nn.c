/*
 * ops-nn.c - lowering ONNX's convolutional-network ops: Conv (1-D as 2-D with a height of 1;
 * auto_pad resolved to explicit pads), MaxPool / AveragePool, the global pools (reductions
 * over the spatial axes) and BatchNormalization at inference, which becomes x * a + b with a
 * and b per channel (folded to constants when the statistics are initializers).
 */
#include <string.h>

#include "onnx/onnx-impl.h"

static const char *arg_of(const struct ox *c) {
    return rtx__onnx_op(c->node->op_type)->arg;
}

/* Window geometry of a Conv or pool over s spatial dims (1 or 2), as rtx's 2-D attributes. */
struct window {
    int64_t kernel[2], strides[2], dilations[2], pads[4]; /* pads: top, left, bottom, right */
};

static int ints_attr(struct ox *c, const char *name, int s, int64_t dflt, int64_t *out,
                     struct rtx_err *err) {
    const int64_t *v;
    int n = ox_attr_ints(c, name, &v);
    for (int i = 0; i < s; i++) out[i] = dflt;
    if (n < 0) return 0;
    if (n != s)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): %s has %d values for %d spatial "
                           "dimensions", c->node->name, c->node->op_type, name, n, s);
    for (int i = 0; i < s; i++) out[i] = v[i];
    return 0;
}

/* Reads kernel_shape (or the weight's), strides, dilations, pads and auto_pad for input
 * spatial sizes in[s], into 2-D form (a 1-D window gets height 1). */
static int read_window(struct ox *c, int s, const int64_t *in, const int64_t *kernel,
                       struct window *w, struct rtx_err *err) {
    int64_t k[2], st[2], dl[2], pd[4] = {0, 0, 0, 0};
    int rc;
    if (kernel) memcpy(k, kernel, sizeof k[0] * (size_t)s);
    else if ((rc = ints_attr(c, "kernel_shape", s, -1, k, err))) return rc;
    for (int i = 0; i < s; i++)
        if (k[i] < 1)
            return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): no kernel_shape",
                               c->node->name, c->node->op_type);
    if ((rc = ints_attr(c, "strides", s, 1, st, err))) return rc;
    if ((rc = ints_attr(c, "dilations", s, 1, dl, err))) return rc;
    const int64_t *pv;
    int np = ox_attr_ints(c, "pads", &pv);
    if (np >= 0 && np != 2 * s)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): pads has %d values", c->node->name,
                           c->node->op_type, np);
    for (int i = 0; i < np; i++) pd[i] = pv[i];
    char buf[32];
    const char *ap = ox_attr_str(c, "auto_pad", "NOTSET", buf, sizeof buf);
    if (!strcmp(ap, "VALID")) {
        memset(pd, 0, sizeof pd);
    } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        for (int i = 0; i < s; i++) {
            int64_t out = (in[i] + st[i] - 1) / st[i];
            int64_t total = (out - 1) * st[i] + (k[i] - 1) * dl[i] + 1 - in[i];
            if (total < 0) total = 0;
            int64_t small = total / 2, big = total - small;
            pd[i] = !strcmp(ap, "SAME_UPPER") ? small : big;
            pd[i + s] = total - pd[i];
        }
    } else if (strcmp(ap, "NOTSET")) {
        return ox_unsupported(c, err, "auto_pad '%s'", ap);
    }
    /* to 2-D: index 0 is height */
    int o = 2 - s;
    w->kernel[0] = w->strides[0] = w->dilations[0] = 1;
    w->pads[0] = w->pads[2] = 0;
    for (int i = 0; i < s; i++) {
        w->kernel[o + i] = k[i];
        w->strides[o + i] = st[i];
        w->dilations[o + i] = dl[i];
        w->pads[o + i] = pd[i];
        w->pads[2 + o + i] = pd[s + i];
    }
    return 0;
}

/* x [N, C, L] as [N, C, 1, L] (1-D ops run as 2-D). */
static const char *as_2d(struct ox *c, struct rtx_value *x, struct rtx_err *err) {
    if (x->ndim == 4) return x->name;
    int64_t d[4] = {x->dims[0], x->dims[1], 1, x->dims[2]};
    const char *t = ox_tmp(c, "2d");
    return ox_reshape(c, x->name, 4, d, t, err) ? NULL : t;
}

/* The 2-D node's output into the ONNX output (dropping the height of 1 of a 1-D op). */
static const char *out_2d(struct ox *c, int s) {
    return s == 2 ? ox_out_name(c, 0) : ox_tmp(c, "y2d");
}

static int back_to_1d(struct ox *c, int s, const char *y2, struct rtx_err *err) {
    if (s == 2) return 0;
    struct rtx_value *v = ox_value(c, y2);
    int64_t d[3] = {v->dims[0], v->dims[1], v->dims[3]};
    return ox_reshape(c, y2, 3, d, ox_out_name(c, 0), err);
}

static int spatial(struct ox *c, const struct rtx_value *x, struct rtx_err *err) {
    if (x->ndim == 4 || x->ndim == 3) return x->ndim - 2;
    return ox_unsupported(c, err, "input of rank %d (1-D and 2-D windows are supported)",
                          x->ndim);
}

/* Conv node `conv` with weight w and bias b (NULL: none) into value out; the attributes are
 * conv's (the current node is switched to it while it is lowered). */
int ox_conv(struct ox *c, const Onnx__NodeProto *conv, const char *w_name, const char *b_name,
            const char *out, struct rtx_err *err) {
    const Onnx__NodeProto *cur = c->node;
    c->node = conv;
    struct rtx_value *x = ox_in(c, 0, err), *w = x ? ox_value(c, w_name) : NULL;
    int rc = x && w ? 0 : RTX_EGRAPH;
    int s = rc ? rc : spatial(c, x, err);
    if (s < 0) rc = s;
    if (!rc && w->ndim != x->ndim)
        rc = rtx_err_set(err, RTX_EGRAPH, "node '%s' (Conv): weight of rank %d for input of "
                         "rank %d", conv->name, w->ndim, x->ndim);
    struct window win;
    if (!rc) rc = read_window(c, s, x->dims + 2, w->dims + 2, &win, err);
    const char *ins[3] = {NULL, NULL, b_name};
    if (!rc) {
        ins[0] = as_2d(c, x, err);
        ins[1] = ins[0] ? as_2d(c, w, err) : NULL;
        if (!ins[1]) rc = RTX_EGRAPH;
    }
    const char *y = NULL;
    int k = -1;
    if (!rc) {
        /* the 2-D result goes to out directly unless a 1-D output needs a reshape after */
        y = s == 2 ? out : ox_tmp(c, "y2d");
        k = ox_node(c, "conv2d", ins, b_name ? 3 : 2, y, err);
        rc = k < 0 ? k : 0;
    }
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "strides", win.strides, 2, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "pads", win.pads, 4, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "dilations", win.dilations, 2, err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "groups", ox_attr_int(c, "group", 1), err);
    if (!rc) rc = ox_finish(c, k, err);
    if (!rc && s == 1) {
        struct rtx_value *v = ox_value(c, y);
        int64_t d[3] = {v->dims[0], v->dims[1], v->dims[3]};
        rc = ox_reshape(c, y, 3, d, out, err);
    }
    c->node = cur;
    return rc;
}

int ox_lower_conv(struct ox *c, struct rtx_err *err) {
    if (!ox_has_in(c, 1)) return ox_in(c, 1, err) ? 0 : RTX_EGRAPH;
    return ox_conv(c, c->node, ox_in_name(c, 1), ox_has_in(c, 2) ? ox_in_name(c, 2) : NULL,
                   ox_out_name(c, 0), err);
}

int ox_lower_pool(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    int s = spatial(c, x, err);
    if (s < 0) return s;
    bool is_max = !strcmp(arg_of(c), "max_pool2d");
    if (is_max && ox_attr_int(c, "storage_order", 0))
        return ox_unsupported(c, err, "storage_order 1");
    struct window win;
    int rc = read_window(c, s, x->dims + 2, NULL, &win, err);
    if (rc) return rc;
    if (!is_max && (win.dilations[0] != 1 || win.dilations[1] != 1))
        return ox_unsupported(c, err, "dilations other than 1");
    const char *in = as_2d(c, x, err);
    if (!in) return RTX_EGRAPH;
    const char *y = out_2d(c, s);
    int k = ox_node(c, arg_of(c), &in, 1, y, err);
    if (k < 0) return k;
    rc = rtx_graph_set_attr_ints(c->g, k, "kernel_shape", win.kernel, 2, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "strides", win.strides, 2, err);
    if (!rc) rc = rtx_graph_set_attr_ints(c->g, k, "pads", win.pads, 4, err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "ceil_mode", ox_attr_int(c, "ceil_mode", 0),
                                         err);
    if (!rc && is_max)
        rc = rtx_graph_set_attr_ints(c->g, k, "dilations", win.dilations, 2, err);
    if (!rc && !is_max)
        rc = rtx_graph_set_attr_int(c->g, k, "count_include_pad",
                                    ox_attr_int(c, "count_include_pad", 0), err);
    if (!rc) rc = ox_finish(c, k, err);
    return rc ? rc : back_to_1d(c, s, y, err);
}

int ox_lower_global_pool(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    if (x->ndim < 3) return ox_unsupported(c, err, "input of rank %d", x->ndim);
    int64_t axes[RTX_MAX_DIMS];
    int n = 0;
    for (int d = 2; d < x->ndim; d++) axes[n++] = d;
    const char *in = x->name;
    int k = ox_node(c, arg_of(c), &in, 1, ox_out_name(c, 0), err);
    if (k < 0) return k;
    int rc = rtx_graph_set_attr_ints(c->g, k, "axes", axes, n, err);
    if (!rc) rc = rtx_graph_set_attr_int(c->g, k, "keepdims", 1, err);
    return rc ? rc : ox_finish(c, k, err);
}

/* A per-channel parameter p [C] of a BatchNormalization in x's dtype. */
static const char *per_channel(struct ox *c, int i, const struct rtx_value *x,
                               struct rtx_err *err) {
    struct rtx_value *p = ox_in(c, i, err);
    if (!p) return NULL;
    if (p->ndim != 1 || p->dims[0] != x->dims[1]) {
        rtx_err_set(err, RTX_EGRAPH, "node '%s' (BatchNormalization): input %d has shape of "
                    "rank %d, [%lld] expected", c->node->name, i, p->ndim,
                    (long long)x->dims[1]);
        return NULL;
    }
    if (p->dtype == x->dtype) return p->name;
    const char *cast = ox_tmp(c, "bn"), *src = p->name;
    int k = ox_node(c, "cast", &src, 1, cast, err);
    if (k < 0 || rtx_graph_set_attr_string(c->g, k, "to", rtx_dtype_name(x->dtype), err) ||
        ox_finish(c, k, err))
        return NULL;
    return cast;
}

static const char *binop(struct ox *c, const char *op, const char *a, const char *b,
                         const char *out, struct rtx_err *err) {
    const char *ins[2] = {a, b};
    if (!a || !b) return NULL;
    if (!out) out = ox_tmp(c, op);
    return ox_emit(c, op, ins, 2, out, err) ? NULL : out;
}

/* v [C] as [C, 1, ...] of rank r (broadcasting along the channel axis). */
static const char *channel_column(struct ox *c, const char *v, int64_t C, int r,
                                  struct rtx_err *err) {
    int64_t d[RTX_MAX_DIMS];
    d[0] = C;
    for (int j = 1; j < r; j++) d[j] = 1;
    const char *t = ox_tmp(c, "col");
    return v && !ox_reshape(c, v, r, d, t, err) ? t : NULL;
}

/* The Conv that produces x when x is read only by this BatchNormalization and the conv's
 * weight (and bias) are constants: its output channels can absorb the normalisation. */
static const Onnx__NodeProto *foldable_conv(struct ox *c, const struct rtx_value *x) {
    const Onnx__NodeProto *conv = rtx__onnx_producer(c->m, x->name);
    if (!conv || !conv->op_type || strcmp(conv->op_type, "Conv") || conv->n_input < 2 ||
        rtx__onnx_uses(c->m, x->name) != 1)
        return NULL;
    const struct rtx_value *w = ox_value(c, conv->input[1]);
    const struct rtx_value *b = conv->n_input > 2 && conv->input[2] && *conv->input[2]
                                    ? ox_value(c, conv->input[2]) : NULL;
    if (!w || !w->constant || w->dtype != x->dtype || w->dims[0] != x->dims[1]) return NULL;
    if (b && (!b->constant || b->dtype != x->dtype)) return NULL;
    return conv;
}

/* BatchNormalization at inference: a = scale / sqrt(var + eps), shift = bias - mean * a
 * (per channel, folded when the statistics are constants); after a Conv that only it reads,
 * the conv's weight becomes w * a and its bias b * a + shift (one conv2d); otherwise
 * y = x * a + shift. */
int ox_lower_batchnorm(struct ox *c, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, 0, err);
    if (!x) return RTX_EGRAPH;
    if (ox_attr_int(c, "training_mode", 0))
        return ox_unsupported(c, err, "training_mode 1 (inference only)");
    if (x->ndim < 2) return ox_unsupported(c, err, "input of rank %d", x->ndim);
    const char *scale = per_channel(c, 1, x, err), *bias = scale ? per_channel(c, 2, x, err)
                                                                 : NULL;
    const char *mean = bias ? per_channel(c, 3, x, err) : NULL;
    const char *var = mean ? per_channel(c, 4, x, err) : NULL;
    if (!var) return RTX_EGRAPH;
    const char *eps = ox_scalar(c, x->dtype, ox_attr_float(c, "epsilon", 1e-5), err);
    const char *ve = binop(c, "add", var, eps, NULL, err);
    const char *sd = ve ? ox_tmp(c, "sqrt") : NULL;
    if (!sd || ox_emit(c, "sqrt", &ve, 1, sd, err)) return RTX_EGRAPH;
    const char *a = binop(c, "div", scale, sd, NULL, err);
    const char *shift = binop(c, "sub", bias, binop(c, "mul", mean, a, NULL, err), NULL, err);
    if (!shift) return RTX_EGRAPH;
    int64_t C = x->dims[1];
    const Onnx__NodeProto *conv = foldable_conv(c, x);
    if (conv) {
        const struct rtx_value *w = ox_value(c, conv->input[1]);
        const char *w2 = binop(c, "mul", w->name, channel_column(c, a, C, w->ndim, err), NULL,
                               err);
        const char *b2 = shift;
        if (conv->n_input > 2 && conv->input[2] && *conv->input[2])
            b2 = binop(c, "add", binop(c, "mul", conv->input[2], a, NULL, err), shift, NULL,
                       err);
        if (!w2 || !b2) return RTX_EGRAPH;
        return ox_conv(c, conv, w2, b2, ox_out_name(c, 0), err);
    }
    const char *xa = binop(c, "mul", x->name, channel_column(c, a, C, x->ndim - 1, err), NULL,
                           err);
    return binop(c, "add", xa, channel_column(c, shift, C, x->ndim - 1, err), ox_out_name(c, 0),
                 err)
               ? 0
               : RTX_EGRAPH;
}
