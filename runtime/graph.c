/*
 * graph.c - the graph IR builder: values, nodes, attributes, inputs and outputs, with a
 * name -> value-index hash table so building a graph of n nodes costs O(n). Reading a node's
 * attributes is runtime/node-attr.c.
 */
#include <string.h>

#include "runtime/runtime-impl.h"

/* ---- name index: open addressing, linear probing, FNV-1a ---- */

struct name_index {
    size_t cap;   /* power of two */
    int *slots;   /* value index + 1; 0 = empty */
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int index_lookup(const struct rtx_graph *g, const char *name) {
    const struct name_index *ix = g->name_index;
    if (!ix) return -1;
    size_t mask = ix->cap - 1;
    for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        int v = ix->slots[i] - 1;
        if (v < 0) return -1;
        if (strcmp(g->values[v].name, name) == 0) return v;
    }
}

static void index_put(struct name_index *ix, const struct rtx_graph *g, int v) {
    size_t mask = ix->cap - 1;
    size_t i = name_hash(g->values[v].name) & mask;
    while (ix->slots[i]) i = (i + 1) & mask;
    ix->slots[i] = v + 1;
}

/* Makes room for one more value in the index (load factor <= 1/2). */
static int index_reserve(struct rtx_graph *g) {
    struct name_index *ix = g->name_index;
    if (ix && (size_t)(g->n_values + 1) * 2 <= ix->cap) return 0;
    size_t cap = ix ? ix->cap * 2 : 64;
    int *slots = rtx_calloc(cap, sizeof *slots);
    if (!slots) return RTX_ENOMEM;
    if (!ix) {
        ix = rtx_calloc(1, sizeof *ix);
        if (!ix) {
            rtx_free(slots);
            return RTX_ENOMEM;
        }
        g->name_index = ix;
    } else {
        rtx_free(ix->slots);
    }
    ix->cap = cap;
    ix->slots = slots;
    for (int v = 0; v < g->n_values; v++) index_put(ix, g, v);
    return 0;
}

int rtx_graph_find_value(const struct rtx_graph *g, const char *name) {
    return index_lookup(g, name);
}

/* ---- graph ---- */

const char *rtx__node_label(const struct rtx_graph *g, int node, char *buf, size_t len) {
    const char *name = (node >= 0 && node < g->n_nodes) ? g->nodes[node].name : "";
    if (name && name[0])
        snprintf(buf, len, "node %d '%s'", node, name);
    else
        snprintf(buf, len, "node %d", node);
    return buf;
}

int rtx_graph_new(const char *name, struct rtx_graph **out, struct rtx_err *err) {
    struct rtx_graph *g = rtx_calloc(1, sizeof *g);
    if (!g || !(g->name = rtx_strdup(name ? name : ""))) {
        rtx_free(g);
        *out = NULL;
        return rtx_err_set(err, RTX_ENOMEM, "out of memory creating a graph");
    }
    *out = g;
    return 0;
}

static void attr_clear(struct rtx_attr *a) {
    rtx_free(a->name);
    rtx_free(a->s);
    rtx_free(a->ints);
    rtx_free(a->floats);
    rtx_tensor_unref(a->t);
}

void rtx_graph_free(struct rtx_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) {
        struct rtx_node *n = &g->nodes[i];
        rtx_free(n->name);
        rtx_free(n->inputs);
        rtx_free(n->outputs);
        for (int a = 0; a < n->n_attrs; a++) attr_clear(&n->attrs[a]);
        rtx_free(n->attrs);
    }
    for (int i = 0; i < g->n_values; i++) {
        rtx_free(g->values[i].name);
        rtx_tensor_unref(g->values[i].constant);
    }
    struct name_index *ix = g->name_index;
    if (ix) rtx_free(ix->slots);
    rtx_free(ix);
    rtx_free(g->nodes);
    rtx_free(g->values);
    rtx_free(g->inputs);
    rtx_free(g->outputs);
    rtx_free(g->name);
    rtx_free(g);
}

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) ncap *= 2;
    void *p = rtx_realloc(*arr, (size_t)ncap * elem);
    if (!p) return RTX_ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Index of the value `name`, created (unproduced, no data) if absent; negative on error. */
static int value_get_or_add(struct rtx_graph *g, const char *name, struct rtx_err *err) {
    int v = index_lookup(g, name);
    if (v >= 0) return v;
    if (grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values) ||
        index_reserve(g))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory adding value '%s'", name);
    struct rtx_value *val = &g->values[g->n_values];
    memset(val, 0, sizeof *val);
    if (!(val->name = rtx_strdup(name)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory adding value '%s'", name);
    val->ndim = -1;
    val->producer = -1;
    v = g->n_values++;
    index_put(g->name_index, g, v);
    return v;
}

/* A value that nothing defines yet (only referenced by nodes) may become an input,
 * an initializer or a node output. */
static bool value_is_free(const struct rtx_value *v) {
    return v->producer < 0 && !v->is_input && !v->constant;
}

static const char *value_kind(const struct rtx_graph *g, const struct rtx_value *v, char *buf,
                              size_t len) {
    if (v->is_input) return "a graph input";
    if (v->constant) return "an initializer";
    if (v->producer >= 0) {
        char label[96];
        snprintf(buf, len, "the output of %s", rtx__node_label(g, v->producer, label,
                                                                   sizeof label));
        return buf;
    }
    return "undefined";
}

static int define_value(struct rtx_graph *g, const char *name, const char *what,
                        struct rtx_err *err) {
    if (!name || !name[0]) return rtx_err_set(err, RTX_EGRAPH, "%s with an empty name", what);
    int v = value_get_or_add(g, name, err);
    if (v < 0) return v;
    if (!value_is_free(&g->values[v])) {
        char buf[128];
        return rtx_err_set(err, RTX_EGRAPH, "%s '%s' is already defined as %s", what, name,
                           value_kind(g, &g->values[v], buf, sizeof buf));
    }
    return v;
}

int rtx_graph_add_input(struct rtx_graph *g, const char *name, enum rtx_dtype dt, int ndim,
                        const int64_t *dims, struct rtx_err *err) {
    if ((unsigned)dt >= RTX_DTYPE_COUNT)
        return rtx_err_set(err, RTX_EGRAPH, "input '%s': bad dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EGRAPH, "input '%s': rank %d outside 0..%d", name, ndim,
                           RTX_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i] < -1)
            return rtx_err_set(err, RTX_EGRAPH, "input '%s': dimension %d is %lld", name, i,
                               (long long)dims[i]);
    int *ins = rtx_realloc(g->inputs, sizeof *ins * (size_t)(g->n_inputs + 1));
    if (!ins) return rtx_err_set(err, RTX_ENOMEM, "out of memory adding input '%s'", name);
    g->inputs = ins;
    int v = define_value(g, name, "input", err);
    if (v < 0) return v;
    struct rtx_value *val = &g->values[v];
    val->is_input = true;
    val->dtype = dt;
    val->ndim = ndim;
    for (int i = 0; i < ndim; i++) val->dims[i] = dims[i];
    g->inputs[g->n_inputs++] = v;
    return v;
}

int rtx_graph_add_initializer(struct rtx_graph *g, const char *name, struct rtx_tensor *t,
                              struct rtx_err *err) {
    /* kernels read initializers as contiguous buffers: a strided view is copied once here */
    struct rtx_tensor *c = NULL;
    int rc = rtx_tensor_contiguous(t, &c, err);
    if (rc < 0) return rc;
    int v = define_value(g, name, "initializer", err);
    if (v < 0) {
        rtx_tensor_unref(c);
        return v;
    }
    struct rtx_value *val = &g->values[v];
    val->constant = c;
    val->dtype = t->dtype;
    val->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) val->dims[i] = t->dims[i];
    return v;
}

int rtx_graph_add_node(struct rtx_graph *g, const char *op, const char *node_name,
                       const char *const *inputs, int n_inputs, const char *const *outputs,
                       int n_outputs, struct rtx_err *err) {
    int idx = g->n_nodes;
    const char *nm = node_name ? node_name : "";
    char label[96];
    if (nm[0]) snprintf(label, sizeof label, "node %d '%s'", idx, nm);
    else snprintf(label, sizeof label, "node %d", idx);
    enum rtx_op opc;
    if (rtx_op_from_name(op, &opc))
        return rtx_err_set(err, RTX_EGRAPH, "%s: unknown op '%s'", label, op);
    if (n_inputs < 0 || n_outputs < 0)
        return rtx_err_set(err, RTX_EINVAL, "%s: negative input/output count", label);
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory adding %s", label);
    struct rtx_node *n = &g->nodes[idx];
    memset(n, 0, sizeof *n);
    n->op = opc;
    n->name = rtx_strdup(nm);
    n->inputs = rtx_malloc(sizeof(int) * (size_t)(n_inputs ? n_inputs : 1));
    n->outputs = rtx_malloc(sizeof(int) * (size_t)(n_outputs ? n_outputs : 1));
    int rc = 0;
    if (!n->name || !n->inputs || !n->outputs) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory adding %s", label);
        goto fail;
    }
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i] || !inputs[i][0]) {
            n->inputs[i] = -1;
            continue;
        }
        int v = value_get_or_add(g, inputs[i], err);
        if (v < 0) {
            rc = v;
            goto fail;
        }
        n->inputs[i] = v;
    }
    n->n_inputs = n_inputs;
    for (int i = 0; i < n_outputs; i++) {
        if (!outputs[i] || !outputs[i][0]) {
            rc = rtx_err_set(err, RTX_EGRAPH, "%s: output %d has an empty name", label, i);
            goto fail;
        }
        int v = value_get_or_add(g, outputs[i], err);
        if (v < 0) {
            rc = v;
            goto fail;
        }
        if (!value_is_free(&g->values[v])) {
            char buf[128];
            rc = rtx_err_set(err, RTX_EGRAPH, "%s: output '%s' is already %s", label,
                             outputs[i], value_kind(g, &g->values[v], buf, sizeof buf));
            goto fail;
        }
        for (int j = 0; j < i; j++) {
            if (n->outputs[j] == v) {
                rc = rtx_err_set(err, RTX_EGRAPH, "%s: output '%s' is listed twice", label,
                                 outputs[i]);
                goto fail;
            }
        }
        n->outputs[i] = v;
    }
    for (int i = 0; i < n_outputs; i++) g->values[n->outputs[i]].producer = idx;
    n->n_outputs = n_outputs;
    g->n_nodes++;
    return idx;
fail:
    /* values created for names stay (unproduced); the node itself is dropped */
    rtx_free(n->name);
    rtx_free(n->inputs);
    rtx_free(n->outputs);
    memset(n, 0, sizeof *n);
    return rc;
}

/* Appends an attribute to node `node`; *out points at it. */
static int attr_new(struct rtx_graph *g, int node, const char *name, enum rtx_attr_type type,
                    struct rtx_attr **out, struct rtx_err *err) {
    *out = NULL;
    if (node < 0 || node >= g->n_nodes) return rtx_err_set(err, RTX_EINVAL, "no node %d", node);
    struct rtx_node *n = &g->nodes[node];
    char label[96];
    if (!name || !name[0])
        return rtx_err_set(err, RTX_EGRAPH, "%s: attribute with an empty name",
                           rtx__node_label(g, node, label, sizeof label));
    if (rtx_node_attr(n, name))
        return rtx_err_set(err, RTX_EGRAPH, "%s: attribute '%s' is set twice",
                           rtx__node_label(g, node, label, sizeof label), name);
    struct rtx_attr *attrs = rtx_realloc(n->attrs, sizeof *attrs * (size_t)(n->n_attrs + 1));
    if (!attrs) goto oom;
    n->attrs = attrs;
    struct rtx_attr *a = &attrs[n->n_attrs];
    memset(a, 0, sizeof *a);
    if (!(a->name = rtx_strdup(name))) goto oom;
    a->type = type;
    n->n_attrs++;
    *out = a;
    return 0;
oom:
    return rtx_err_set(err, RTX_ENOMEM, "out of memory setting attribute '%s'", name);
}

int rtx_graph_set_attr_int(struct rtx_graph *g, int node, const char *name, int64_t v,
                           struct rtx_err *err) {
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_INT, &a, err);
    if (rc) return rc;
    a->i = v;
    return 0;
}

int rtx_graph_set_attr_float(struct rtx_graph *g, int node, const char *name, double v,
                             struct rtx_err *err) {
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_FLOAT, &a, err);
    if (rc) return rc;
    a->f = v;
    return 0;
}

/* Drops the attribute attr_new just appended (when filling it failed). */
static int attr_drop_last(struct rtx_graph *g, int node, struct rtx_err *err) {
    struct rtx_node *n = &g->nodes[node];
    attr_clear(&n->attrs[--n->n_attrs]);
    return rtx_err_set(err, RTX_ENOMEM, "out of memory setting an attribute");
}

int rtx_graph_set_attr_string(struct rtx_graph *g, int node, const char *name, const char *v,
                              struct rtx_err *err) {
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_STRING, &a, err);
    if (rc) return rc;
    if (!(a->s = rtx_strdup(v ? v : ""))) return attr_drop_last(g, node, err);
    return 0;
}

int rtx_graph_set_attr_ints(struct rtx_graph *g, int node, const char *name, const int64_t *v,
                            int n, struct rtx_err *err) {
    if (n < 0) return rtx_err_set(err, RTX_EINVAL, "negative attribute length");
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_INTS, &a, err);
    if (rc) return rc;
    if (!(a->ints = rtx_malloc(sizeof *a->ints * (size_t)(n ? n : 1))))
        return attr_drop_last(g, node, err);
    if (n) memcpy(a->ints, v, sizeof *a->ints * (size_t)n);
    a->n = n;
    return 0;
}

int rtx_graph_set_attr_floats(struct rtx_graph *g, int node, const char *name, const double *v,
                              int n, struct rtx_err *err) {
    if (n < 0) return rtx_err_set(err, RTX_EINVAL, "negative attribute length");
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_FLOATS, &a, err);
    if (rc) return rc;
    if (!(a->floats = rtx_malloc(sizeof *a->floats * (size_t)(n ? n : 1))))
        return attr_drop_last(g, node, err);
    if (n) memcpy(a->floats, v, sizeof *a->floats * (size_t)n);
    a->n = n;
    return 0;
}

int rtx_graph_set_attr_tensor(struct rtx_graph *g, int node, const char *name,
                              struct rtx_tensor *t, struct rtx_err *err) {
    if (!t) return rtx_err_set(err, RTX_EINVAL, "attribute '%s': no tensor", name);
    struct rtx_attr *a;
    int rc = attr_new(g, node, name, RTX_ATTR_TENSOR, &a, err);
    if (rc) return rc;
    a->t = rtx_tensor_ref(t);
    return 0;
}

int rtx_graph_add_output(struct rtx_graph *g, const char *name, struct rtx_err *err) {
    if (!name || !name[0]) return rtx_err_set(err, RTX_EGRAPH, "output with an empty name");
    int v = value_get_or_add(g, name, err);
    if (v < 0) return v;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v)
            return rtx_err_set(err, RTX_EGRAPH, "output '%s' is listed twice", name);
    int *outs = rtx_realloc(g->outputs, sizeof *outs * (size_t)(g->n_outputs + 1));
    if (!outs) return rtx_err_set(err, RTX_ENOMEM, "out of memory adding output '%s'", name);
    g->outputs = outs;
    g->outputs[g->n_outputs++] = v;
    return 0;
}
