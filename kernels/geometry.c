/*
 * geometry.c - index arithmetic that every backend needs in the same form: which view of the
 * input a slice node selects, how a batched matmul's operands map onto its output batches,
 * and the window of a conv2d or 2-D pool. One implementation, so the CPU reference and the
 * device backends cannot drift.
 *
 * DESIGN
 * A strided copy (transpose, expand, slice) goes through three steps here: rtx__shape_view
 * gives the node's view of its input, rtx__view_simplify drops size-1 dims and merges dims that
 * are one run in the source (what each backend's copy loop walks), and rtx__view_widen, for
 * device kernels, regroups a unit-stride innermost run into 16-, 8-, 4- or 2-byte units when
 * the sizes, strides and addresses allow it. They are pure arithmetic, so the unit tests check
 * them on the CPU even where the kernel that uses them runs only on a GPU.
 */
#include <math.h>
#include <string.h>

#include "kernels/geometry.h"

static void contiguous_strides(int nd, const int64_t *dims, int64_t *str) {
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        str[d] = s;
        s *= dims[d];
    }
}

int rtx__transpose_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                        struct rtx__strided_view *v, char *why, size_t why_len) {
    const int64_t *perm;
    int n = rtx_node_attr_ints(node, "perm", &perm);
    if (n >= 0 && n != nd) {
        snprintf(why, why_len, "perm has %d entries for rank %d", n, nd);
        return RTX_EINVAL;
    }
    int64_t xs[RTX_MAX_DIMS];
    contiguous_strides(nd, in_dims, xs);
    bool seen[RTX_MAX_DIMS] = {false};
    v->ndim = nd;
    v->offset = 0;
    for (int i = 0; i < nd; i++) {
        int64_t q = n >= 0 ? perm[i] : nd - 1 - i;
        if (q < 0) q += nd;
        if (q < 0 || q >= nd || seen[q]) {
            snprintf(why, why_len, "perm is not a permutation of 0..%d", nd - 1);
            return RTX_EINVAL;
        }
        seen[q] = true;
        v->dims[i] = in_dims[q];
        v->strides[i] = xs[q];
    }
    return 0;
}

int rtx__expand_view(int in_nd, const int64_t *in_dims, int out_nd, const int64_t *out_dims,
                     struct rtx__strided_view *v, char *why, size_t why_len) {
    if (in_nd > out_nd) {
        snprintf(why, why_len, "output rank below input rank");
        return RTX_EINVAL;
    }
    int64_t xs[RTX_MAX_DIMS];
    contiguous_strides(in_nd, in_dims, xs);
    v->ndim = out_nd;
    v->offset = 0;
    for (int d = 0; d < out_nd; d++) {
        int xd = d - (out_nd - in_nd);
        int64_t dx = xd >= 0 ? in_dims[xd] : 1;
        if (dx != out_dims[d] && dx != 1) {
            snprintf(why, why_len, "input dimension %d (%lld) does not broadcast to %lld", xd,
                     (long long)dx, (long long)out_dims[d]);
            return RTX_EINVAL;
        }
        v->dims[d] = out_dims[d];
        v->strides[d] = dx == 1 ? 0 : xs[xd];
    }
    return 0;
}

bool rtx__view_matches(const struct rtx__strided_view *v, const struct rtx_tensor *out) {
    if (out->ndim != v->ndim) return false;
    for (int d = 0; d < v->ndim; d++)
        if (out->dims[d] != v->dims[d]) return false;
    return true;
}

int rtx__slice_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                    struct rtx__strided_view *v, char *why, size_t why_len) {
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
    contiguous_strides(nd, in_dims, xs);
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

int rtx__gemm_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                       const struct rtx_tensor *B, const struct rtx_tensor *C,
                       const struct rtx_tensor *Y, struct rtx__gemm_geom *g, char *why,
                       size_t why_len) {
    memset(g, 0, sizeof *g);
    if (A->ndim != 2 || B->ndim != 2) {
        snprintf(why, why_len, "a and b must be 2-D");
        return RTX_EINVAL;
    }
    g->ta = rtx_node_attr_int(node, "trans_a", 0) != 0;
    g->tb = rtx_node_attr_int(node, "trans_b", 0) != 0;
    g->alpha = (float)rtx_node_attr_float(node, "alpha", 1.0);
    g->beta = (float)rtx_node_attr_float(node, "beta", 1.0);
    g->M = g->ta ? A->dims[1] : A->dims[0];
    g->K = g->ta ? A->dims[0] : A->dims[1];
    int64_t kb = g->tb ? B->dims[1] : B->dims[0];
    g->N = g->tb ? B->dims[0] : B->dims[1];
    if (g->K != kb) {
        snprintf(why, why_len, "inner dimensions %lld and %lld differ", (long long)g->K,
                 (long long)kb);
        return RTX_EINVAL;
    }
    if (Y->ndim != 2 || Y->dims[0] != g->M || Y->dims[1] != g->N) {
        snprintf(why, why_len, "output shape is not [%lld,%lld]", (long long)g->M,
                 (long long)g->N);
        return RTX_EINVAL;
    }
    g->cM = g->cN = 1;
    if (C) {
        if (C->ndim > 2) {
            snprintf(why, why_len, "c has rank %d > 2", C->ndim);
            return RTX_EINVAL;
        }
        g->cN = C->ndim >= 1 ? C->dims[C->ndim - 1] : 1;
        g->cM = C->ndim == 2 ? C->dims[0] : 1;
        if ((g->cM != 1 && g->cM != g->M) || (g->cN != 1 && g->cN != g->N)) {
            snprintf(why, why_len, "c does not broadcast to [%lld,%lld]", (long long)g->M,
                     (long long)g->N);
            return RTX_EINVAL;
        }
    }
    return 0;
}

/* Reads an optional attribute of `count` ints into v (dflt when absent); false when it is
 * present with another length. */
static bool attr_ints_n(const struct rtx_node *n, const char *name, int count,
                        const int64_t *dflt, int64_t *v) {
    const int64_t *p;
    int k = rtx_node_attr_ints(n, name, &p);
    for (int i = 0; i < count; i++) v[i] = k == count ? p[i] : dflt[i];
    return k < 0 || k == count;
}

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

int rtx__window_geometry(const struct rtx_node *node, const struct rtx_tensor *x,
                         const struct rtx_tensor *y, bool pool, bool dilated, bool ceil_mode,
                         struct rtx__window_geom *w, char *why, size_t why_len) {
    if (x->ndim != 4 || y->ndim != 4) {
        snprintf(why, why_len, "x and y must be 4-D (NCHW)");
        return RTX_EINVAL;
    }
    w->N = x->dims[0];
    w->C = x->dims[1];
    w->H = x->dims[2];
    w->W = x->dims[3];
    const int64_t s0[2] = {pool ? w->kh : 1, pool ? w->kw : 1}, p0[4] = {0}, d0[2] = {1, 1};
    int64_t s[2], p[4], d[2];
    if (!attr_ints_n(node, "strides", 2, s0, s) || !attr_ints_n(node, "pads", 4, p0, p) ||
        !attr_ints_n(node, "dilations", 2, d0, d)) {
        snprintf(why, why_len, "strides and dilations need 2 ints, pads 4");
        return RTX_EINVAL;
    }
    if (!dilated) memcpy(d, d0, sizeof d);
    w->sh = s[0];
    w->sw = s[1];
    w->pt = p[0];
    w->pl = p[1];
    w->pb = p[2];
    w->pr = p[3];
    w->dh = d[0];
    w->dw = d[1];
    if (w->kh < 1 || w->kw < 1 || w->dh < 1 || w->dw < 1 || w->sh < 1 || w->sw < 1 ||
        w->pt < 0 || w->pl < 0 || w->pb < 0 || w->pr < 0) {
        snprintf(why, why_len, "bad kernel, stride, pad or dilation");
        return RTX_EINVAL;
    }
    int64_t nh = w->H + w->pt + w->pb - w->dh * (w->kh - 1) - 1;
    int64_t nw = w->W + w->pl + w->pr - w->dw * (w->kw - 1) - 1;
    int64_t ho = floor_div(nh, w->sh) + 1, wo = floor_div(nw, w->sw) + 1;
    if (ceil_mode) {
        ho = floor_div(nh + w->sh - 1, w->sh) + 1;
        wo = floor_div(nw + w->sw - 1, w->sw) + 1;
        if ((ho - 1) * w->sh >= w->H + w->pt) ho--; /* the last window must start inside */
        if ((wo - 1) * w->sw >= w->W + w->pl) wo--;
    }
    w->Ho = y->dims[2];
    w->Wo = y->dims[3];
    if (ho != w->Ho || wo != w->Wo) {
        snprintf(why, why_len, "output is %lldx%lld, the window gives %lldx%lld",
                 (long long)w->Ho, (long long)w->Wo, (long long)ho, (long long)wo);
        return RTX_EINTERNAL;
    }
    if (y->dims[0] != w->N) {
        snprintf(why, why_len, "output has %lld images, x %lld", (long long)y->dims[0],
                 (long long)w->N);
        return RTX_EINTERNAL;
    }
    return 0;
}

int rtx__conv2d_geometry(const struct rtx_node *node, const struct rtx_tensor *X,
                         const struct rtx_tensor *Wt, const struct rtx_tensor *B,
                         const struct rtx_tensor *Y, struct rtx__conv2d_geom *g, char *why,
                         size_t why_len) {
    memset(g, 0, sizeof *g);
    g->G = rtx_node_attr_int(node, "groups", 1);
    if (Wt->ndim != 4) {
        snprintf(why, why_len, "w must be 4-D [O, C/groups, kH, kW]");
        return RTX_EINVAL;
    }
    struct rtx__window_geom *w = &g->w;
    w->kh = Wt->dims[2];
    w->kw = Wt->dims[3];
    int rc = rtx__window_geometry(node, X, Y, false, true, false, w, why, why_len);
    if (rc) return rc;
    g->O = Wt->dims[0];
    if (g->G < 1 || w->C % g->G || g->O % g->G || Wt->dims[1] != w->C / g->G ||
        Y->dims[1] != g->O) {
        snprintf(why, why_len, "channels (x %lld, w %lldx%lld) do not fit groups %lld",
                 (long long)w->C, (long long)g->O, (long long)Wt->dims[1], (long long)g->G);
        return RTX_EINVAL;
    }
    if (B && (B->ndim != 1 || B->dims[0] != g->O)) {
        snprintf(why, why_len, "b must be [%lld]", (long long)g->O);
        return RTX_EINVAL;
    }
    g->Cg = w->C / g->G;
    g->Og = g->O / g->G;
    g->K = g->Cg * w->kh * w->kw;
    g->P = w->Ho * w->Wo;
    g->direct = w->kh == 1 && w->kw == 1 && w->sh == 1 && w->sw == 1 && w->pt == 0 &&
                w->pl == 0 && w->pb == 0 && w->pr == 0;
    return 0;
}

int rtx__pool2d_geometry(const struct rtx_node *node, const struct rtx_tensor *X,
                         const struct rtx_tensor *Y, bool is_max, struct rtx__pool2d_geom *g,
                         char *why, size_t why_len) {
    memset(g, 0, sizeof *g);
    g->count_include_pad = rtx_node_attr_int(node, "count_include_pad", 0) != 0;
    const int64_t *ks;
    if (rtx_node_attr_ints(node, "kernel_shape", &ks) != 2) {
        snprintf(why, why_len, "kernel_shape needs 2 ints");
        return RTX_EINVAL;
    }
    g->w.kh = ks[0];
    g->w.kw = ks[1];
    g->ceil_mode = rtx_node_attr_int(node, "ceil_mode", 0) != 0;
    int rc = rtx__window_geometry(node, X, Y, true, is_max, g->ceil_mode, &g->w, why, why_len);
    if (rc) return rc;
    if (Y->dims[1] != g->w.C) {
        snprintf(why, why_len, "output channels differ from input");
        return RTX_EINTERNAL;
    }
    return 0;
}

int rtx__attention_geometry(const struct rtx_node *node, const struct rtx_tensor *Q,
                            const struct rtx_tensor *K, const struct rtx_tensor *V,
                            const struct rtx_tensor *M, const struct rtx_tensor *Y,
                            struct rtx__attention_geom *g, char *why, size_t why_len) {
    memset(g, 0, sizeof *g);
    int nd = Q->ndim;
    if (nd < 2 || K->ndim != nd || V->ndim != nd) {
        snprintf(why, why_len, "q, k, v need one rank >= 2");
        return RTX_EINVAL;
    }
    g->lead = nd - 2;
    g->BH = 1;
    for (int d = 0; d < g->lead; d++) {
        if (K->dims[d] != Q->dims[d] || V->dims[d] != Q->dims[d]) {
            snprintf(why, why_len, "leading dimension %d differs", d);
            return RTX_EINVAL;
        }
        g->lead_dims[d] = Q->dims[d];
        g->BH *= Q->dims[d];
    }
    g->Lq = Q->dims[nd - 2];
    g->D = Q->dims[nd - 1];
    g->Lk = K->dims[nd - 2];
    g->Dv = V->dims[nd - 1];
    if (K->dims[nd - 1] != g->D || V->dims[nd - 2] != g->Lk) {
        snprintf(why, why_len, "k or v does not match q's shape");
        return RTX_EINVAL;
    }
    if (rtx_tensor_numel(Y) != g->BH * g->Lq * g->Dv) {
        snprintf(why, why_len, "output has %lld elements, want %lld",
                 (long long)rtx_tensor_numel(Y), (long long)(g->BH * g->Lq * g->Dv));
        return RTX_EINTERNAL;
    }
    g->causal = rtx_node_attr_int(node, "causal", 0) != 0;
    g->scale = (float)rtx_node_attr_float(node, "scale",
                                          g->D > 0 ? 1.0 / sqrt((double)g->D) : 1.0);
    if (!M) return 0;
    if (M->ndim > nd) {
        snprintf(why, why_len, "mask has rank %d > %d", M->ndim, nd);
        return RTX_EINVAL;
    }
    int64_t full[RTX_MAX_DIMS], str[RTX_MAX_DIMS], step = 1;
    memcpy(full, Q->dims, (size_t)g->lead * sizeof *full);
    full[nd - 2] = g->Lq;
    full[nd - 1] = g->Lk;
    for (int d = nd - 1; d >= 0; d--) {
        int md = d - (nd - M->ndim);
        int64_t dm = md >= 0 ? M->dims[md] : 1;
        if (dm != 1 && dm != full[d]) {
            snprintf(why, why_len, "mask dimension %d (%lld) does not broadcast to %lld", md,
                     (long long)dm, (long long)full[d]);
            return RTX_EINVAL;
        }
        str[d] = dm == 1 ? 0 : step;
        step *= dm;
    }
    memcpy(g->mask_lead_str, str, (size_t)g->lead * sizeof *str);
    g->mask_str_q = str[nd - 2];
    g->mask_str_k = str[nd - 1];
    return 0;
}

int rtx__shape_view(const struct rtx_node *node, const struct rtx_tensor *x,
                    const struct rtx_tensor *y, struct rtx__strided_view *v, char *why,
                    size_t why_len) {
    int rc;
    switch (node->op) {
    case RTX_OP_TRANSPOSE:
        rc = rtx__transpose_view(node, x->ndim, x->dims, v, why, why_len);
        break;
    case RTX_OP_EXPAND:
        rc = rtx__expand_view(x->ndim, x->dims, y->ndim, y->dims, v, why, why_len);
        break;
    case RTX_OP_SLICE: rc = rtx__slice_view(node, x->ndim, x->dims, v, why, why_len); break;
    default:
        snprintf(why, why_len, "%s is not a view op", rtx_op_name(node->op));
        return RTX_EINTERNAL;
    }
    if (rc) return rc;
    if (!rtx__view_matches(v, y)) {
        snprintf(why, why_len, "output shape does not match the %s", rtx_op_name(node->op));
        return RTX_EINTERNAL;
    }
    return 0;
}

int64_t rtx__view_simplify(struct rtx__strided_view *v) {
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++) numel *= v->dims[d];
    if (numel == 0) return 0;
    int m = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d] == 1) continue;
        if (m > 0 && v->strides[m - 1] == v->strides[d] * v->dims[d]) {
            v->dims[m - 1] *= v->dims[d]; /* one run with its outer neighbour */
            v->strides[m - 1] = v->strides[d];
            continue;
        }
        v->dims[m] = v->dims[d];
        v->strides[m] = v->strides[d];
        m++;
    }
    v->ndim = m;
    return numel;
}

size_t rtx__view_widen(struct rtx__strided_view *v, size_t esize, uintptr_t src,
                       uintptr_t dst, size_t max_unit) {
    int nd = v->ndim;
    if (nd == 0 || v->strides[nd - 1] != 1) return esize;
    int64_t es = (int64_t)esize;
    for (int64_t unit = (int64_t)max_unit; unit > es; unit /= 2) {
        bool fits = (v->dims[nd - 1] * es) % unit == 0 && src % (uintptr_t)unit == 0 &&
                    dst % (uintptr_t)unit == 0;
        for (int d = 0; d < nd - 1 && fits; d++) fits = (v->strides[d] * es) % unit == 0;
        if (!fits) continue;
        v->dims[nd - 1] = v->dims[nd - 1] * es / unit;
        for (int d = 0; d < nd - 1; d++) v->strides[d] = v->strides[d] * es / unit;
        return (size_t)unit;
    }
    return esize;
}
