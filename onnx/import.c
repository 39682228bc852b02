/*
 * import.c - instantiating a loaded ONNX model for concrete input shapes.
 *
 * DESIGN
 * The model's nodes are lowered in topological order into a work graph (an rtx graph whose
 * values carry the ONNX names) whose every value has a known dtype and shape: the inputs are
 * declared with the shapes given, the initializers are constants, and each rtx node is
 * inferred as soon as it is added (rtx_graph_infer_node). A node whose inputs are all
 * constants is computed at once on a CPU backend (one node, one plan) and its output becomes
 * a constant: this folds shape sub-graphs (Shape -> Gather -> Concat -> Reshape), masks built
 * from constants and anything else that does not depend on the inputs. Lowerings that need a
 * value (Reshape's shape, Slice's starts) read those constants; when one is computed from
 * data the node is refused by name (RTX_EUNSUPPORTED).
 *
 * The final graph is rebuilt from the work graph backwards from the outputs: only the nodes
 * an output depends on and that were not folded, the constants they read as initializers
 * (shared with the model by reference: no weight is copied), and every model input in order.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "onnx/onnx-impl.h"

/* ---------------------------------------------------------------------------------------- */
/* Context helpers */

static const char *node_name(const struct ox *c) {
    return c->node && c->node->name ? c->node->name : "";
}

static const char *op_type(const struct ox *c) {
    return c->node && c->node->op_type ? c->node->op_type : "";
}

struct rtx_value *ox_value(struct ox *c, const char *name) {
    int i = rtx_graph_find_value(c->g, name);
    if (i < 0) return NULL;
    struct rtx_value *v = &c->snap[c->snap_next++ % (int)(sizeof c->snap / sizeof c->snap[0])];
    *v = c->g->values[i];
    return v;
}

bool ox_has_in(const struct ox *c, int i) {
    return i >= 0 && (size_t)i < c->node->n_input && c->node->input[i] && *c->node->input[i];
}

const char *ox_in_name(const struct ox *c, int i) {
    return ox_has_in(c, i) ? c->node->input[i] : "";
}

const char *ox_out_name(const struct ox *c, int i) {
    return i >= 0 && (size_t)i < c->node->n_output && c->node->output[i] ? c->node->output[i]
                                                                           : "";
}

struct rtx_value *ox_in(struct ox *c, int i, struct rtx_err *err) {
    if (!ox_has_in(c, i)) {
        rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): input %d is missing", node_name(c),
                    op_type(c), i);
        return NULL;
    }
    struct rtx_value *v = ox_value(c, c->node->input[i]);
    if (!v || v->ndim < 0)
        rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): input '%s' is not defined", node_name(c),
                    op_type(c), c->node->input[i]);
    return v && v->ndim >= 0 ? v : NULL;
}

int ox_unsupported(struct ox *c, struct rtx_err *err, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return rtx_err_set(err, RTX_EUNSUPPORTED, "node '%s' (%s, opset %d): %s", node_name(c),
                       op_type(c), c->m->opset, what);
}

int ox_axis(struct ox *c, int64_t axis, int r, int *out, struct rtx_err *err) {
    if (axis < -r || axis >= (r ? r : 1))
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): axis %lld is out of range for "
                           "rank %d", node_name(c), op_type(c), (long long)axis, r);
    *out = (int)(axis < 0 ? axis + r : axis);
    return 0;
}

const char *ox_tmp(struct ox *c, const char *what) {
    if (c->n_names == c->cap_names) {
        int cap = c->cap_names ? 2 * c->cap_names : 64;
        char **n = rtx_realloc(c->names, sizeof *n * (size_t)cap);
        if (!n) return NULL;
        c->names = n;
        c->cap_names = cap;
    }
    char buf[512];
    const char *base = ox_out_name(c, 0);
    do {
        snprintf(buf, sizeof buf, "%s::%s%d", *base ? base : "onnx", what, c->fresh++);
    } while (rtx_graph_find_value(c->g, buf) >= 0);
    char *s = rtx_strdup(buf);
    if (!s) return NULL;
    c->names[c->n_names++] = s;
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* ONNX attributes */

const Onnx__AttributeProto *ox_attr(const struct ox *c, const char *name) {
    for (size_t i = 0; i < c->node->n_attribute; i++) {
        const Onnx__AttributeProto *a = c->node->attribute[i];
        if (a->name && !strcmp(a->name, name)) return a;
    }
    return NULL;
}

static const char *attr_type_name(int t) {
    static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR",
                                        "GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
                                        "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
                                        "TYPE_PROTO", "TYPE_PROTOS"};
    return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "an unknown type";
}

/* The attribute called name when it has type `want` and carries its value; NULL when absent.
 * One of another type (or declared with the type but without the value) is recorded in the
 * context, and the node fails once lowered (as onnxruntime refuses it at load). */
static const Onnx__AttributeProto *typed_attr(const struct ox *c, const char *name, int want) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    if (!a) return NULL;
    bool has = want == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT      ? a->has_i
               : want == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT  ? a->has_f
               : want == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING ? a->has_s
                                                                      : true;
    int type = a->has_type ? (int)a->type : 0;
    if (type == want && has) return a;
    struct ox *mc = (struct ox *)c;
    if (!mc->bad_attr[0])
        snprintf(mc->bad_attr, sizeof mc->bad_attr, "attribute '%s' is %s%s, %s expected", name,
                 attr_type_name(type), type == want ? " without a value" : "",
                 attr_type_name(want));
    return NULL;
}

int64_t ox_attr_int(const struct ox *c, const char *name, int64_t dflt) {
    const Onnx__AttributeProto *a = typed_attr(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    return a ? a->i : dflt;
}

double ox_attr_float(const struct ox *c, const char *name, double dflt) {
    const Onnx__AttributeProto *a =
        typed_attr(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    return a ? a->f : dflt;
}

const char *ox_attr_str(const struct ox *c, const char *name, const char *dflt, char *buf,
                        size_t cap) {
    const Onnx__AttributeProto *a =
        typed_attr(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a) return dflt;
    size_t n = a->s.len < cap - 1 ? a->s.len : cap - 1;
    memcpy(buf, a->s.data, n);
    buf[n] = 0;
    return buf;
}

int ox_attr_ints(const struct ox *c, const char *name, const int64_t **v) {
    const Onnx__AttributeProto *a =
        typed_attr(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a) return -1;
    *v = a->ints;
    return (int)a->n_ints;
}

/* ---------------------------------------------------------------------------------------- */
/* Emitting and folding */

static int copy_attrs(struct rtx_graph *dst, int node, const struct rtx_node *n,
                      struct rtx_err *err) {
    int rc = 0;
    for (int a = 0; a < n->n_attrs && !rc; a++) {
        const struct rtx_attr *at = &n->attrs[a];
        switch (at->type) {
        case RTX_ATTR_INT: rc = rtx_graph_set_attr_int(dst, node, at->name, at->i, err); break;
        case RTX_ATTR_FLOAT: rc = rtx_graph_set_attr_float(dst, node, at->name, at->f, err); break;
        case RTX_ATTR_STRING:
            rc = rtx_graph_set_attr_string(dst, node, at->name, at->s, err);
            break;
        case RTX_ATTR_INTS:
            rc = rtx_graph_set_attr_ints(dst, node, at->name, at->ints, at->n, err);
            break;
        case RTX_ATTR_FLOATS:
            rc = rtx_graph_set_attr_floats(dst, node, at->name, at->floats, at->n, err);
            break;
        case RTX_ATTR_TENSOR:
            rc = rtx_graph_set_attr_tensor(dst, node, at->name, at->t, err);
            break;
        default: break;
        }
    }
    return rc;
}

/* Copies node n of src (inputs and outputs by name) into dst. */
static int copy_node(struct rtx_graph *dst, const struct rtx_graph *src, const struct rtx_node *n,
                     struct rtx_err *err) {
    const char *ins[64], *outs[4];
    if (n->n_inputs > 64 || n->n_outputs > 4)
        return rtx_err_set(err, RTX_ELIMIT, "node '%s': too many inputs", n->name);
    for (int j = 0; j < n->n_inputs; j++)
        ins[j] = n->inputs[j] < 0 ? "" : src->values[n->inputs[j]].name;
    for (int j = 0; j < n->n_outputs; j++) outs[j] = src->values[n->outputs[j]].name;
    int k = rtx_graph_add_node(dst, rtx_op_name(n->op), n->name, ins, n->n_inputs, outs,
                               n->n_outputs, err);
    if (k < 0) return k;
    return copy_attrs(dst, k, n, err);
}

/* Computes node ni of the work graph (every input a constant) on the CPU; its outputs
 * become constants. */
static int fold(struct ox *c, int ni, struct rtx_err *err) {
    struct rtx_graph *g = c->g;
    const struct rtx_node *n = &g->nodes[ni];
    struct rtx_graph *s = NULL;
    struct rtx_plan *p = NULL;
    struct rtx_tensor *outs[4] = {0};
    int rc = rtx_graph_new("fold", &s, err);
    if (rc) return rc;
    for (int j = 0; j < n->n_inputs && !rc; j++) {
        if (n->inputs[j] < 0) continue;
        const struct rtx_value *v = &g->values[n->inputs[j]];
        if (rtx_graph_find_value(s, v->name) >= 0) continue;
        rc = rtx_graph_add_initializer(s, v->name, v->constant, err);
        rc = rc < 0 ? rc : 0;
    }
    if (!rc) rc = copy_node(s, g, n, err);
    for (int j = 0; j < n->n_outputs && !rc; j++)
        rc = rtx_graph_add_output(s, g->values[n->outputs[j]].name, err);
    if (!rc && !c->cpu) {
        struct rtx_cpu_options opt = {.n_threads = 1};
        rc = rtx_backend_cpu_new(&opt, &c->cpu, err);
    }
    if (!rc) rc = rtx_plan_new(s, NULL, 0, c->lim, &p, err);
    if (!rc) rc = rtx_plan_execute(p, c->cpu, NULL, 0, outs, n->n_outputs, NULL, NULL, err);
    for (int j = 0; j < n->n_outputs; j++) {
        if (!rc) g->values[n->outputs[j]].constant = outs[j];
        else rtx_tensor_unref(outs[j]);
    }
    rtx_plan_free(p);
    rtx_graph_free(s);
    return rc;
}

/* ---- folds that read only weights: kept in the model ---- */

/* Whether t is the result of a kept fold (shared by every instantiation). Under fold_mu. */
static bool is_kept(const struct rtx_onnx_model *m, const struct rtx_tensor *t) {
    for (int i = 0; i < m->n_folds; i++)
        if (m->folds[i].out == t) return true;
    return false;
}

/* Fills f's signature from node ni's inputs; false when an input is neither a model weight,
 * a kept fold's result nor a scalar (the fold depends on the instantiation). */
static bool fold_signature(struct ox *c, int ni, struct rtx__onnx_fold *f) {
    const struct rtx_node *n = &c->g->nodes[ni];
    if (n->n_inputs > RTX__ONNX_FOLD_MAX_IN || n->n_outputs != 1) return false;
    const struct rtx_value *o = &c->g->values[n->outputs[0]];
    f->op = (int)n->op;
    f->dtype = o->dtype;
    f->ndim = o->ndim;
    memcpy(f->dims, o->dims, sizeof f->dims);
    f->n_in = n->n_inputs;
    for (int j = 0; j < n->n_inputs; j++) {
        f->weights[j] = NULL;
        f->scalars[j] = 0;
        if (n->inputs[j] < 0) continue;
        const struct rtx_value *v = &c->g->values[n->inputs[j]];
        struct rtx_onnx_model *m = (struct rtx_onnx_model *)c->m;
        pthread_mutex_lock(&m->fold_mu);
        bool kept = is_kept(m, v->constant);
        pthread_mutex_unlock(&m->fold_mu);
        if (kept || rtx__onnx_init(c->m, v->name) == v->constant) {
            f->weights[j] = v->constant;
        } else if (rtx_tensor_numel(v->constant) == 1 && v->ndim == 0) {
            f->scalars[j] = rtx_tensor_get(v->constant, 0);
        } else {
            return false;
        }
    }
    return true;
}

static bool same_fold(const struct rtx__onnx_fold *a, const struct rtx__onnx_fold *b) {
    if (a->node != b->node || a->ordinal != b->ordinal || a->n_in != b->n_in || a->op != b->op ||
        a->dtype != b->dtype || a->ndim != b->ndim ||
        memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->ndim))
        return false;
    for (int j = 0; j < a->n_in; j++)
        if (a->weights[j] != b->weights[j] || a->scalars[j] != b->scalars[j]) return false;
    return true;
}

/* The kept result for f's signature (a new reference), or NULL. */
static struct rtx_tensor *fold_lookup(struct ox *c, const struct rtx__onnx_fold *f) {
    struct rtx_onnx_model *m = (struct rtx_onnx_model *)c->m;
    struct rtx_tensor *t = NULL;
    pthread_mutex_lock(&m->fold_mu);
    for (int i = 0; i < m->n_folds && !t; i++)
        if (same_fold(&m->folds[i], f)) t = rtx_tensor_ref(m->folds[i].out);
    pthread_mutex_unlock(&m->fold_mu);
    return t;
}

/* Keeps a fold's result in the model (when room; a failure only costs the sharing). */
static void fold_keep(struct ox *c, struct rtx__onnx_fold *f, struct rtx_tensor *out) {
    struct rtx_onnx_model *m = (struct rtx_onnx_model *)c->m;
    pthread_mutex_lock(&m->fold_mu);
    bool have = false;
    for (int i = 0; i < m->n_folds && !have; i++) have = same_fold(&m->folds[i], f);
    if (!have && m->n_folds == m->cap_folds) {
        int cap = m->cap_folds ? 2 * m->cap_folds : 16;
        struct rtx__onnx_fold *n = rtx_realloc(m->folds, sizeof *n * (size_t)cap);
        if (n) {
            m->folds = n;
            m->cap_folds = cap;
        }
    }
    if (!have && m->n_folds < m->cap_folds) {
        f->out = rtx_tensor_ref(out);
        m->folds[m->n_folds++] = *f;
    }
    pthread_mutex_unlock(&m->fold_mu);
}

void rtx__onnx_folds_free(struct rtx_onnx_model *m) {
    for (int i = 0; i < m->n_folds; i++) rtx_tensor_unref(m->folds[i].out);
    rtx_free(m->folds);
    m->folds = NULL;
    m->n_folds = m->cap_folds = 0;
}

/* Folds node ni, through the model's kept folds when it reads only weights, kept results and
 * scalars (chains of such folds, like a BatchNormalization folded into a conv's weight, are
 * computed once per model). */
static int fold_shared(struct ox *c, int ni, struct rtx_err *err) {
    struct rtx__onnx_fold f = {.node = c->node, .ordinal = c->ordinal++};
    bool shareable = c->node && fold_signature(c, ni, &f);
    struct rtx_value *out = &c->g->values[c->g->nodes[ni].outputs[0]];
    if (shareable && (out->constant = fold_lookup(c, &f))) return 0;
    int rc = fold(c, ni, err);
    if (!rc && shareable) fold_keep(c, &f, out->constant);
    return rc;
}

int ox_node(struct ox *c, const char *op, const char *const *ins, int n_in, const char *out,
            struct rtx_err *err) {
    if (!out) return rtx_err_set(err, RTX_ENOMEM, "out of memory lowering '%s'", node_name(c));
    for (int j = 0; j < n_in; j++)
        if (!ins[j]) return rtx_err_set(err, RTX_ENOMEM, "out of memory lowering '%s'",
                                        node_name(c));
    const struct rtx_value *prev = ox_value(c, out);
    if (prev && prev->producer >= 0)
        return rtx_err_set(err, RTX_EFORMAT, "node '%s' (%s): value '%s' is written twice",
                           node_name(c), op_type(c), out);
    return rtx_graph_add_node(c->g, op, node_name(c), ins, n_in, &out, 1, err);
}

int ox_finish(struct ox *c, int node, struct rtx_err *err) {
    if (node < 0) return node;
    int rc = rtx_graph_infer_node(c->g, node, c->lim, err);
    if (rc) return rtx_err_prefix(err, "ONNX node '%s' (%s)", node_name(c), op_type(c));
    const struct rtx_node *n = &c->g->nodes[node];
    bool all_const = n->n_inputs > 0;
    for (int j = 0; j < n->n_inputs && all_const; j++)
        all_const = n->inputs[j] < 0 || c->g->values[n->inputs[j]].constant != NULL;
    if (!all_const) return 0;
    rc = fold_shared(c, node, err);
    return rc ? rtx_err_prefix(err, "computing ONNX node '%s' (%s) at load", node_name(c),
                               op_type(c))
              : 0;
}

int ox_emit(struct ox *c, const char *op, const char *const *ins, int n_in, const char *out,
            struct rtx_err *err) {
    return ox_finish(c, ox_node(c, op, ins, n_in, out, err), err);
}

int ox_const(struct ox *c, const char *name, struct rtx_tensor *t, struct rtx_err *err) {
    if (!name) return rtx_err_set(err, RTX_ENOMEM, "out of memory lowering '%s'", node_name(c));
    int rc = rtx_graph_add_initializer(c->g, name, t, err);
    return rc < 0 ? rtx_err_prefix(err, "node '%s' (%s)", node_name(c), op_type(c)) : 0;
}

const char *ox_scalar(struct ox *c, enum rtx_dtype dt, double v, struct rtx_err *err) {
    struct rtx_tensor *t = NULL;
    const char *name = ox_tmp(c, "k");
    if (!name || rtx_tensor_new(dt, 0, NULL, &t, err)) {
        if (!name) rtx_err_set(err, RTX_ENOMEM, "out of memory");
        return NULL;
    }
    rtx_tensor_set(t, 0, v);
    int rc = ox_const(c, name, t, err);
    rtx_tensor_unref(t);
    return rc ? NULL : name;
}

const char *ox_ints_const(struct ox *c, const int64_t *v, int n, struct rtx_err *err) {
    struct rtx_tensor *t = NULL;
    int64_t d = n;
    const char *name = ox_tmp(c, "ints");
    if (!name || rtx_tensor_new(RTX_I64, 1, &d, &t, err)) {
        if (!name) rtx_err_set(err, RTX_ENOMEM, "out of memory");
        return NULL;
    }
    if (n) memcpy(rtx_tensor_data(t), v, sizeof *v * (size_t)n);
    int rc = ox_const(c, name, t, err);
    rtx_tensor_unref(t);
    return rc ? NULL : name;
}

int ox_const_ints(struct ox *c, int i, int64_t *v, int max, int *n, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, i, err);
    if (!x) return RTX_EGRAPH;
    if (!x->constant)
        return ox_unsupported(c, err, "input '%s' is computed from the model's inputs; rtxd "
                              "needs it constant once the input shapes are known", x->name);
    if (x->dtype != RTX_I64 && x->dtype != RTX_I32)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): input '%s' is %s, not an integer "
                           "tensor", node_name(c), op_type(c), x->name, rtx_dtype_name(x->dtype));
    int64_t k = rtx_tensor_numel(x->constant);
    if (k > max || x->ndim > 1)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): input '%s' has %lld elements "
                           "(at most %d in one dimension)", node_name(c), op_type(c), x->name,
                           (long long)k, max);
    for (int64_t j = 0; j < k; j++) v[j] = (int64_t)rtx_tensor_get(x->constant, j);
    if (x->dtype == RTX_I64) /* exact beyond 2^53 */
        memcpy(v, rtx_tensor_data(x->constant), sizeof *v * (size_t)k);
    *n = (int)k;
    return 0;
}

int ox_const_scalar(struct ox *c, int i, double *v, struct rtx_err *err) {
    struct rtx_value *x = ox_in(c, i, err);
    if (!x) return RTX_EGRAPH;
    if (!x->constant)
        return ox_unsupported(c, err, "input '%s' is computed from the model's inputs; rtxd "
                              "needs it constant once the input shapes are known", x->name);
    if (rtx_tensor_numel(x->constant) != 1)
        return rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): input '%s' must hold one value",
                           node_name(c), op_type(c), x->name);
    *v = rtx_tensor_get(x->constant, 0);
    return 0;
}

int ox_reshape(struct ox *c, const char *src, int ndim, const int64_t *dims, const char *out,
               struct rtx_err *err) {
    int k = ox_node(c, "reshape", &src, 1, out, err);
    if (k < 0) return k;
    int rc = rtx_graph_set_attr_ints(c->g, k, "shape", dims, ndim, err);
    return rc ? rc : ox_finish(c, k, err);
}

int ox_alias(struct ox *c, int out, const char *src, struct rtx_err *err) {
    struct rtx_value *v = ox_value(c, src);
    if (!v) return rtx_err_set(err, RTX_EGRAPH, "node '%s': no value '%s'", node_name(c), src);
    int64_t dims[RTX_MAX_DIMS];
    memcpy(dims, v->dims, sizeof dims);
    return ox_reshape(c, src, v->ndim, dims, ox_out_name(c, out), err);
}

/* ---------------------------------------------------------------------------------------- */
/* Instantiation */

static int bind_inputs(struct ox *c, const struct rtx_tensor *const *inputs, int n,
                       struct rtx_err *err) {
    const struct rtx_onnx_model *m = c->m;
    if (n != m->n_inputs)
        return rtx_err_set(err, RTX_EINVAL, "%s takes %d inputs, %d given", m->what,
                           m->n_inputs, n);
    for (int i = 0; i < n; i++) {
        const struct rtx_onnx_io *io = &m->inputs[i];
        const struct rtx_tensor *t = inputs[i];
        if (!t) return rtx_err_set(err, RTX_EINVAL, "input '%s' is missing", io->name);
        if (t->dtype != io->dtype)
            return rtx_err_set(err, RTX_EINVAL, "input '%s' is %s, the model declares %s",
                               io->name, rtx_dtype_name(t->dtype), rtx_dtype_name(io->dtype));
        if (t->ndim != io->ndim)
            return rtx_err_set(err, RTX_EINVAL, "input '%s' has rank %d, the model declares %d",
                               io->name, t->ndim, io->ndim);
        for (int d = 0; d < t->ndim; d++)
            if (io->dims[d] >= 0 && io->dims[d] != t->dims[d])
                return rtx_err_set(err, RTX_EINVAL, "input '%s' dimension %d is %lld, the model "
                                   "declares %lld", io->name, d, (long long)t->dims[d],
                                   (long long)io->dims[d]);
        int rc = rtx_graph_add_input(c->g, io->name, t->dtype, t->ndim, t->dims, err);
        if (rc < 0) return rc;
    }
    return 0;
}

static int add_initializers(struct ox *c, struct rtx_err *err) {
    for (int i = 0; i < c->m->n_inits; i++) {
        if (rtx_graph_find_value(c->g, c->m->init_names[i]) >= 0) continue; /* an input */
        int rc = rtx_graph_add_initializer(c->g, c->m->init_names[i], c->m->inits[i], err);
        if (rc < 0) return rc;
    }
    return 0;
}

static int lower_nodes(struct ox *c, struct rtx_err *err) {
    for (int i = 0; i < c->m->n_nodes; i++) {
        c->node = c->m->order[i];
        c->node_index = i;
        c->ordinal = 0;
        const struct ox_op *op = rtx__onnx_op(c->node->op_type ? c->node->op_type : "");
        c->bad_attr[0] = 0;
        int rc = rtx__onnx_fuse(c, err);
        if (rc == 0) rc = op->lower(c, err);
        else if (rc > 0) rc = 0;
        if (!rc && c->bad_attr[0])
            rc = rtx_err_set(err, RTX_EGRAPH, "node '%s' (%s): %s", c->node->name ? c->node->name
                                                                                : "",
                             c->node->op_type, c->bad_attr);
        if (rc) return rc;
        for (size_t o = 0; o < c->node->n_output; o++) {
            const char *name = ox_out_name(c, (int)o);
            if (!*name) continue;
            struct rtx_value *v = ox_value(c, name);
            if (!v || v->ndim < 0)
                return ox_unsupported(c, err, "output '%s' is not produced (rtxd computes only "
                                      "some of this op's optional outputs)", name);
        }
    }
    c->node = NULL;
    return 0;
}

/* The final graph: the model inputs, the constants and nodes the outputs need. */
static int rebuild(struct ox *c, struct rtx_graph **out, struct rtx_err *err) {
    const struct rtx_graph *g = c->g;
    const struct rtx_onnx_model *m = c->m;
    bool *live = rtx_calloc((size_t)g->n_values + 1, 1);
    bool *need = rtx_calloc((size_t)g->n_nodes + 1, 1);
    struct rtx_graph *f = NULL;
    int rc = 0;
    if (!live || !need) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory instantiating %s", m->what);
        goto out;
    }
    for (int i = 0; i < m->n_outputs; i++) {
        int v = rtx_graph_find_value(g, m->outputs[i].name);
        if (v < 0 || g->values[v].ndim < 0) {
            rc = rtx_err_set(err, RTX_EGRAPH, "%s: graph output '%s' is not computed",
                             m->what, m->outputs[i].name);
            goto out;
        }
        if (g->values[v].is_input) {
            rc = rtx_err_set(err, RTX_EUNSUPPORTED, "%s: graph output '%s' is a graph input",
                             m->what, m->outputs[i].name);
            goto out;
        }
        live[v] = true;
    }
    for (int k = g->n_nodes - 1; k >= 0; k--) {
        const struct rtx_node *n = &g->nodes[k];
        bool any = false, folded = true;
        for (int j = 0; j < n->n_outputs; j++) {
            any |= live[n->outputs[j]];
            folded &= g->values[n->outputs[j]].constant != NULL;
        }
        if (!any || folded) continue;
        need[k] = true;
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] >= 0) live[n->inputs[j]] = true;
    }
    const char *gname = rtx_onnx_graph_name(m);
    if ((rc = rtx_graph_new(*gname ? gname : "onnx", &f, err))) goto out;
    for (int i = 0; i < g->n_inputs && !rc; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        rc = rtx_graph_add_input(f, v->name, v->dtype, v->ndim, v->dims, err);
        rc = rc < 0 ? rc : 0;
    }
    /* constants: an output that is one gets a reshape that produces it */
    for (int i = 0; i < g->n_values && !rc; i++) {
        const struct rtx_value *v = &g->values[i];
        if (!live[i] || !v->constant) continue;
        bool is_out = false;
        for (int o = 0; o < m->n_outputs; o++) is_out |= !strcmp(m->outputs[o].name, v->name);
        if (!is_out) {
            rc = rtx_graph_add_initializer(f, v->name, v->constant, err);
            rc = rc < 0 ? rc : 0;
            continue;
        }
        char kname[512];
        snprintf(kname, sizeof kname, "%s::value", v->name);
        const char *src = kname;
        rc = rtx_graph_add_initializer(f, kname, v->constant, err);
        int k = rc < 0 ? rc : rtx_graph_add_node(f, "reshape", v->name, &src, 1,
                                                 (const char *const *)&v->name, 1, err);
        rc = k < 0 ? k : rtx_graph_set_attr_ints(f, k, "shape", v->dims, v->ndim, err);
    }
    for (int k = 0; k < g->n_nodes && !rc; k++)
        if (need[k]) rc = copy_node(f, g, &g->nodes[k], err);
    for (int i = 0; i < m->n_outputs && !rc; i++)
        rc = rtx_graph_add_output(f, m->outputs[i].name, err);
    if (!rc) rc = rtx_graph_validate(f, c->lim, err);
out:
    rtx_free(live);
    rtx_free(need);
    if (rc) rtx_graph_free(f);
    else *out = f;
    return rc;
}

int rtx_onnx_instantiate(const struct rtx_onnx_model *m, const struct rtx_tensor *const *inputs,
                         int n, const struct rtx_limits *lim, struct rtx_graph **out,
                         struct rtx_err *err) {
    *out = NULL;
    struct ox c = {.m = m, .lim = lim ? lim : &m->lim};
    int rc = rtx_graph_new("onnx-work", &c.g, err);
    if (!rc) rc = bind_inputs(&c, inputs, n, err);
    if (!rc) rc = add_initializers(&c, err);
    if (!rc) rc = lower_nodes(&c, err);
    if (!rc) rc = rebuild(&c, out, err);
    if (rc && c.node)
        rtx_err_prefix(err, "%s", m->what);
    rtx_graph_free(c.g);
    rtx_backend_free(c.cpu);
    for (int i = 0; i < c.n_names; i++) rtx_free(c.names[i]);
    rtx_free(c.names);
    return rc;
}
