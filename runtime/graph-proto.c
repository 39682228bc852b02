/*
 * graph-proto.c - the graph wire format: rtx.v1.Graph (proto/rtx/v1/graph.proto) to and from
 * struct rtx_graph, through the protobuf-c code generated into build/gen.
 *
 * DESIGN
 * Decoding unpacks the message with an allocator that goes through rtx_malloc/rtx_free (so
 * out-of-memory tests reach protobuf-c's allocations too and a failed allocation reads as
 * RTX_ENOMEM rather than as malformed bytes), checks what the builder cannot see (dtype enums,
 * ranks, dims, tensor data sizes, limits) and then builds the graph only through the public
 * builder API, in the order inputs, initializers, nodes (with their attributes), outputs.
 * Encoding is the inverse: it fills protobuf-c message structs that point into the graph's
 * own strings and tensor data (nothing is copied but non-contiguous tensors), packs them into
 * one rtx_malloc'd buffer and frees the scaffolding. Decoding what encode wrote and encoding
 * again gives the same bytes: the value order encode writes (inputs, initializers, node
 * outputs) is exactly the order decode creates values in.
 * Tensor bytes are stored as the host's bytes: rtxd runs on little-endian hosts only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "rtx/v1/graph.pb-c.h"
#include "runtime/runtime-impl.h"

#define IR_VERSION 1u

/* rtx dtype <-> wire enum. */
static const Rtx__V1__DataType dtype_to_wire[RTX_DTYPE_COUNT] = {
    [RTX_F32] = RTX__V1__DATA_TYPE__DATA_TYPE_F32,
    [RTX_F16] = RTX__V1__DATA_TYPE__DATA_TYPE_F16,
    [RTX_BF16] = RTX__V1__DATA_TYPE__DATA_TYPE_BF16,
    [RTX_I8] = RTX__V1__DATA_TYPE__DATA_TYPE_I8,
    [RTX_I32] = RTX__V1__DATA_TYPE__DATA_TYPE_I32,
    [RTX_I64] = RTX__V1__DATA_TYPE__DATA_TYPE_I64,
    [RTX_U8] = RTX__V1__DATA_TYPE__DATA_TYPE_U8,
    [RTX_BOOL] = RTX__V1__DATA_TYPE__DATA_TYPE_BOOL,
};

int rtx_dtype_to_wire(enum rtx_dtype dt) {
    return (unsigned)dt < RTX_DTYPE_COUNT ? (int)dtype_to_wire[dt]
                                          : RTX__V1__DATA_TYPE__DATA_TYPE_UNSPECIFIED;
}

int rtx_dtype_from_wire(int wire, enum rtx_dtype *out) {
    for (int i = 0; i < RTX_DTYPE_COUNT; i++) {
        if ((int)dtype_to_wire[i] == wire) {
            *out = (enum rtx_dtype)i;
            return 0;
        }
    }
    return RTX_EINVAL;
}

/* ------------------------------------------------------------------------------------------
 * protobuf-c allocator over rtx_malloc
 * ---------------------------------------------------------------------------------------- */

struct pb_alloc_state {
    bool failed; /* an allocation failed: a NULL from unpack means ENOMEM, not bad bytes */
};

static void *pb_alloc(void *data, size_t size) {
    struct pb_alloc_state *st = data;
    void *p = rtx_malloc(size ? size : 1);
    if (!p) st->failed = true;
    return p;
}

static void pb_free(void *data, void *p) {
    rtx_free(p);
}

/* ------------------------------------------------------------------------------------------
 * Decoding
 * ---------------------------------------------------------------------------------------- */

int rtx_tensor_from_wire(const Rtx__V1__Tensor *m, const char *what,
                         const struct rtx_limits *lim, int64_t *total_bytes,
                         struct rtx_tensor **out, struct rtx_err *err) {
    enum rtx_dtype dt;
    if (rtx_dtype_from_wire((int)m->dtype, &dt) != 0)
        return rtx_err_set(err, RTX_EINVAL, "%s: invalid dtype %d", what, (int)m->dtype);
    if (m->n_dims > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "%s: rank %zu exceeds the maximum %d", what, m->n_dims,
                           RTX_MAX_DIMS);
    if ((int64_t)m->n_dims > lim->max_dims)
        return rtx_err_set(err, RTX_ELIMIT, "%s: rank %zu exceeds the limit %d", what, m->n_dims,
                           lim->max_dims);
    bool zero = false;
    for (size_t i = 0; i < m->n_dims; i++) {
        if (m->dims[i] < 0)
            return rtx_err_set(err, RTX_EINVAL, "%s: dimension %zu is negative (%lld)", what, i,
                               (long long)m->dims[i]);
        if (m->dims[i] == 0) zero = true;
    }
    /* numel stays <= max_elements until `over`, so the products cannot overflow. */
    int64_t numel = zero ? 0 : 1;
    bool over = false;
    for (size_t i = 0; i < m->n_dims && !zero && !over; i++) {
        if (numel > lim->max_elements / m->dims[i])
            over = true;
        else
            numel *= m->dims[i];
    }
    int ndim = (int)m->n_dims;
    char shape[128];
    rtx_shape_str(dt, ndim, m->dims, shape, sizeof shape);
    if (over || numel > lim->max_elements)
        return rtx_err_set(err, RTX_ELIMIT, "%s: %s exceeds the limit of %lld elements", what,
                           shape, (long long)lim->max_elements);
    int64_t bytes = numel * (int64_t)rtx_dtype_size(dt);
    if (bytes > lim->max_tensor_bytes)
        return rtx_err_set(err, RTX_ELIMIT, "%s: %s is %lld bytes, over the limit of %lld", what,
                           shape, (long long)bytes, (long long)lim->max_tensor_bytes);
    if (bytes > lim->max_total_bytes - *total_bytes)
        return rtx_err_set(err, RTX_ELIMIT, "%s: constants exceed the total limit of %lld bytes",
                           what, (long long)lim->max_total_bytes);
    if ((uint64_t)m->data.len != (uint64_t)bytes)
        return rtx_err_set(err, RTX_EINVAL, "%s: data has %zu bytes, %s needs %lld bytes", what,
                           m->data.len, shape, (long long)bytes);
    struct rtx_tensor *t = NULL;
    int rc = rtx_tensor_new(dt, ndim, m->dims, &t, err);
    if (rc < 0) return rtx_err_prefix(err, "%s", what);
    if (bytes > 0) memcpy(rtx_tensor_data(t), m->data.data, (size_t)bytes);
    *total_bytes += bytes;
    *out = t;
    return 0;
}

/* rtx_tensor_from_wire for the graph's own tensors: a malformed one makes the graph invalid
 * (RTX_EGRAPH, as rtx_graph_decode promises). */
static int tensor_from_wire(const Rtx__V1__Tensor *m, const char *what,
                            const struct rtx_limits *lim, int64_t *total_bytes,
                            struct rtx_tensor **out, struct rtx_err *err) {
    int rc = rtx_tensor_from_wire(m, what, lim, total_bytes, out, err);
    if (rc != RTX_EINVAL) return rc;
    if (err) err->code = RTX_EGRAPH;
    return RTX_EGRAPH;
}

static int input_from_wire(struct rtx_graph *g, const Rtx__V1__ValueInfo *m,
                           const struct rtx_limits *lim, struct rtx_err *err) {
    enum rtx_dtype dt;
    if (rtx_dtype_from_wire((int)m->dtype, &dt) != 0)
        return rtx_err_set(err, RTX_EGRAPH, "input %s: invalid dtype %d", m->name, (int)m->dtype);
    if (!m->has_shape) return rtx_err_set(err, RTX_EGRAPH, "input %s: shape required", m->name);
    if (m->n_dims > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EGRAPH, "input %s: rank %zu exceeds the maximum %d", m->name,
                           m->n_dims, RTX_MAX_DIMS);
    if ((int64_t)m->n_dims > lim->max_dims)
        return rtx_err_set(err, RTX_ELIMIT, "input %s: rank %zu exceeds the limit %d", m->name,
                           m->n_dims, lim->max_dims);
    for (size_t i = 0; i < m->n_dims; i++) {
        if (m->dims[i] < -1)
            return rtx_err_set(err, RTX_EGRAPH, "input %s: invalid dimension %zu (%lld)", m->name,
                               i, (long long)m->dims[i]);
        if (m->dims[i] > lim->max_elements)
            return rtx_err_set(err, RTX_ELIMIT,
                               "input %s: dimension %zu (%lld) exceeds the limit of %lld "
                               "elements",
                               m->name, i, (long long)m->dims[i], (long long)lim->max_elements);
    }
    int rc = rtx_graph_add_input(g, m->name, dt, (int)m->n_dims, m->dims, err);
    return rc < 0 ? rc : 0;
}

static int attr_from_wire(struct rtx_graph *g, int node, const Rtx__V1__Attribute *a,
                          const struct rtx_limits *lim, int64_t *total_bytes,
                          struct rtx_err *err) {
    switch (a->value_case) {
    case RTX__V1__ATTRIBUTE__VALUE_I: return rtx_graph_set_attr_int(g, node, a->name, a->i, err);
    case RTX__V1__ATTRIBUTE__VALUE_F: return rtx_graph_set_attr_float(g, node, a->name, a->f, err);
    case RTX__V1__ATTRIBUTE__VALUE_S:
        return rtx_graph_set_attr_string(g, node, a->name, a->s, err);
    case RTX__V1__ATTRIBUTE__VALUE_INTS:
        if (a->ints->n_values > INT_MAX)
            return rtx_err_set(err, RTX_ELIMIT, "attribute %s: too many values", a->name);
        return rtx_graph_set_attr_ints(g, node, a->name, a->ints->values, (int)a->ints->n_values,
                                       err);
    case RTX__V1__ATTRIBUTE__VALUE_FLOATS:
        if (a->floats->n_values > INT_MAX)
            return rtx_err_set(err, RTX_ELIMIT, "attribute %s: too many values", a->name);
        return rtx_graph_set_attr_floats(g, node, a->name, a->floats->values,
                                         (int)a->floats->n_values, err);
    case RTX__V1__ATTRIBUTE__VALUE_T: {
        char what[96];
        snprintf(what, sizeof what, "attribute %s", a->name);
        struct rtx_tensor *t = NULL;
        int rc = tensor_from_wire(a->t, what, lim, total_bytes, &t, err);
        if (rc < 0) return rc;
        rc = rtx_graph_set_attr_tensor(g, node, a->name, t, err);
        rtx_tensor_unref(t);
        return rc;
    }
    default: return rtx_err_set(err, RTX_EGRAPH, "attribute %s has no value", a->name);
    }
}

/* Adds one node with its attributes. Errors name the node: the builder's own messages carry
 * its label, the checks here add it. */
static int node_from_wire(struct rtx_graph *g, const Rtx__V1__Node *m,
                          const struct rtx_limits *lim, int64_t *total_bytes,
                          struct rtx_err *err) {
    char label[96];
    if (m->n_inputs > INT_MAX || m->n_outputs > INT_MAX)
        return rtx_err_set(err, RTX_ELIMIT, "node %d '%s': too many inputs or outputs", g->n_nodes,
                           m->name);
    int idx =
        rtx_graph_add_node(g, m->op, m->name, (const char *const *)m->inputs, (int)m->n_inputs,
                           (const char *const *)m->outputs, (int)m->n_outputs, err);
    if (idx < 0) return idx;
    for (size_t i = 0; i < m->n_attrs; i++) {
        struct rtx_err e = {0};
        int rc = attr_from_wire(g, idx, m->attrs[i], lim, total_bytes, &e);
        if (rc < 0) {
            /* The builder's attribute messages start with the label already. */
            rtx__node_label(g, idx, label, sizeof label);
            size_t n = strlen(label);
            *err = e;
            if (strncmp(e.msg, label, n) != 0 || e.msg[n] != ':') rtx_err_prefix(err, "%s", label);
            return rc;
        }
    }
    return 0;
}

/* Builds the graph of an unpacked message. */
static int graph_from_wire(const Rtx__V1__Graph *m, const struct rtx_limits *lim,
                           struct rtx_graph **out, struct rtx_err *err) {
    if (m->ir_version > IR_VERSION)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "ir_version %u is newer than supported (%u)",
                           m->ir_version, IR_VERSION);
    if ((int64_t)m->n_nodes > lim->max_nodes)
        return rtx_err_set(err, RTX_ELIMIT, "%zu nodes exceed the limit of %lld", m->n_nodes,
                           (long long)lim->max_nodes);
    /* Every input, initializer and node output is a value (unproduced names come on top and
     * are checked after building). */
    uint64_t n_values = (uint64_t)m->n_inputs + m->n_initializers;
    for (size_t i = 0; i < m->n_nodes; i++)
        n_values += m->nodes[i]->n_outputs;
    if (n_values > (uint64_t)lim->max_values)
        return rtx_err_set(err, RTX_ELIMIT, "%llu values exceed the limit of %lld",
                           (unsigned long long)n_values, (long long)lim->max_values);

    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new(m->name, &g, err);
    if (rc < 0) return rc;
    int64_t total_bytes = 0;
    for (size_t i = 0; i < m->n_inputs && rc == 0; i++)
        rc = input_from_wire(g, m->inputs[i], lim, err);
    for (size_t i = 0; i < m->n_initializers && rc == 0; i++) {
        const Rtx__V1__Tensor *tm = m->initializers[i];
        char what[96];
        snprintf(what, sizeof what, "initializer %s", tm->name);
        struct rtx_tensor *t = NULL;
        rc = tensor_from_wire(tm, what, lim, &total_bytes, &t, err);
        if (rc < 0) break;
        rc = rtx_graph_add_initializer(g, tm->name, t, err);
        rtx_tensor_unref(t);
        if (rc < 0) break;
        rc = 0;
    }
    for (size_t i = 0; i < m->n_nodes && rc == 0; i++) {
        rc = node_from_wire(g, m->nodes[i], lim, &total_bytes, err);
    }
    if (rc == 0 && (int64_t)g->n_values > lim->max_values)
        rc = rtx_err_set(err, RTX_ELIMIT, "%d values exceed the limit of %lld", g->n_values,
                         (long long)lim->max_values);
    for (size_t i = 0; i < m->n_outputs && rc == 0; i++) {
        rc = rtx_graph_add_output(g, m->outputs[i]->name, err);
        if (rc < 0) rtx_err_prefix(err, "output %s", m->outputs[i]->name);
    }
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int rtx_graph_decode(const void *data, size_t len, const struct rtx_limits *lim,
                     struct rtx_graph **out, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!out || (!data && len > 0))
        return rtx_err_set(err, RTX_EINVAL, "graph decode: invalid argument");
    *out = NULL;
    struct rtx_limits dflt = rtx_limits_default();
    if (!lim) lim = &dflt;

    struct pb_alloc_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    Rtx__V1__Graph *m = rtx__v1__graph__unpack(&alloc, len, data);
    if (!m) {
        if (st.failed) return rtx_err_set(err, RTX_ENOMEM, "graph decode: out of memory");
        return rtx_err_set(err, RTX_EFORMAT, "graph decode: malformed rtx.v1.Graph (%zu bytes)",
                           len);
    }
    int rc = graph_from_wire(m, lim, out, err);
    rtx__v1__graph__free_unpacked(m, &alloc);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Encoding
 * ---------------------------------------------------------------------------------------- */

/* The scaffolding of one encode: every allocation and every temporary tensor reference, so
 * one call frees it all on success and on failure. */
struct enc {
    void **ptrs;
    size_t n_ptrs, cap_ptrs;
    void **refs; /* struct rtx_tensor * */
    size_t n_refs, cap_refs;
};

static int enc_track(void ***arr, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 32;
        void **a = rtx_realloc(*arr, ncap * sizeof *a);
        if (!a) return RTX_ENOMEM;
        *arr = a;
        *cap = ncap;
    }
    (*arr)[(*n)++] = p;
    return 0;
}

/* Zeroed memory owned by the encode; NULL on failure. */
static void *enc_alloc(struct enc *e, size_t n, size_t size) {
    void *p = rtx_calloc(n ? n : 1, size);
    if (!p) return NULL;
    if (enc_track(&e->ptrs, &e->n_ptrs, &e->cap_ptrs, p) < 0) {
        rtx_free(p);
        return NULL;
    }
    return p;
}

static void enc_free(struct enc *e) {
    for (size_t i = 0; i < e->n_ptrs; i++)
        rtx_free(e->ptrs[i]);
    for (size_t i = 0; i < e->n_refs; i++)
        rtx_tensor_unref(e->refs[i]);
    rtx_free(e->ptrs);
    rtx_free(e->refs);
}

static int enc_tensor(struct enc *e, const struct rtx_tensor *t, const char *name,
                      Rtx__V1__Tensor **out, struct rtx_err *err) {
    if ((unsigned)t->dtype >= RTX_DTYPE_COUNT || t->ndim < 0 || t->ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "tensor %s: invalid dtype or rank", name);
    Rtx__V1__Tensor *m = enc_alloc(e, 1, sizeof *m);
    if (!m) return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
    rtx__v1__tensor__init(m);
    m->name = (char *)name;
    m->dtype = dtype_to_wire[t->dtype];
    m->n_dims = (size_t)t->ndim;
    m->dims = (int64_t *)t->dims;
    const struct rtx_tensor *c = t;
    if (!rtx_tensor_is_contiguous(t)) {
        struct rtx_tensor *copy = NULL;
        int rc = rtx_tensor_contiguous(t, &copy, err);
        if (rc < 0) return rc;
        if (enc_track(&e->refs, &e->n_refs, &e->cap_refs, copy) < 0) {
            rtx_tensor_unref(copy);
            return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
        }
        c = copy;
    }
    m->data.len = rtx_tensor_nbytes(c);
    m->data.data = m->data.len ? rtx_tensor_data(c) : NULL;
    *out = m;
    return 0;
}

static int enc_value_info(struct enc *e, const struct rtx_value *v, Rtx__V1__ValueInfo **out,
                          struct rtx_err *err) {
    Rtx__V1__ValueInfo *m = enc_alloc(e, 1, sizeof *m);
    if (!m) return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
    rtx__v1__value_info__init(m);
    m->name = v->name;
    if (v->ndim >= 0 && v->ndim <= RTX_MAX_DIMS && (unsigned)v->dtype < RTX_DTYPE_COUNT) {
        m->dtype = dtype_to_wire[v->dtype];
        m->has_shape = true;
        m->n_dims = (size_t)v->ndim;
        m->dims = (int64_t *)v->dims;
    }
    *out = m;
    return 0;
}

static int enc_attr(struct enc *e, const struct rtx_attr *a, Rtx__V1__Attribute **out,
                    struct rtx_err *err) {
    Rtx__V1__Attribute *m = enc_alloc(e, 1, sizeof *m);
    if (!m) return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
    rtx__v1__attribute__init(m);
    m->name = a->name;
    switch (a->type) {
    case RTX_ATTR_INT:
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_I;
        m->i = a->i;
        break;
    case RTX_ATTR_FLOAT:
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_F;
        m->f = a->f;
        break;
    case RTX_ATTR_STRING:
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_S;
        m->s = a->s ? a->s : (char *)"";
        break;
    case RTX_ATTR_INTS: {
        Rtx__V1__Attribute__Ints *v = enc_alloc(e, 1, sizeof *v);
        if (!v) return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
        rtx__v1__attribute__ints__init(v);
        v->n_values = a->n > 0 ? (size_t)a->n : 0;
        v->values = a->ints;
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_INTS;
        m->ints = v;
        break;
    }
    case RTX_ATTR_FLOATS: {
        Rtx__V1__Attribute__Floats *v = enc_alloc(e, 1, sizeof *v);
        if (!v) return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
        rtx__v1__attribute__floats__init(v);
        v->n_values = a->n > 0 ? (size_t)a->n : 0;
        v->values = a->floats;
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_FLOATS;
        m->floats = v;
        break;
    }
    case RTX_ATTR_TENSOR: {
        if (!a->t) return rtx_err_set(err, RTX_EINVAL, "attribute %s: no tensor", a->name);
        int rc = enc_tensor(e, a->t, "", &m->t, err);
        if (rc < 0) return rtx_err_prefix(err, "attribute %s", a->name);
        m->value_case = RTX__V1__ATTRIBUTE__VALUE_T;
        break;
    }
    default:
        return rtx_err_set(err, RTX_EINVAL, "attribute %s: invalid type %d", a->name,
                           (int)a->type);
    }
    *out = m;
    return 0;
}

static int enc_node(struct enc *e, const struct rtx_graph *g, const struct rtx_node *n,
                    Rtx__V1__Node **out, struct rtx_err *err) {
    Rtx__V1__Node *m = enc_alloc(e, 1, sizeof *m);
    char **ins = enc_alloc(e, (size_t)n->n_inputs, sizeof *ins);
    char **outs = enc_alloc(e, (size_t)n->n_outputs, sizeof *outs);
    Rtx__V1__Attribute **attrs = enc_alloc(e, (size_t)n->n_attrs, sizeof *attrs);
    if (!m || !ins || !outs || !attrs)
        return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
    rtx__v1__node__init(m);
    m->name = n->name ? n->name : (char *)"";
    m->op = (char *)rtx_op_name(n->op);
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v >= g->n_values) return rtx_err_set(err, RTX_EINVAL, "input %d: bad index", i);
        ins[i] = v < 0 ? (char *)"" : g->values[v].name;
    }
    for (int i = 0; i < n->n_outputs; i++) {
        int v = n->outputs[i];
        if (v < 0 || v >= g->n_values)
            return rtx_err_set(err, RTX_EINVAL, "output %d: bad index", i);
        outs[i] = g->values[v].name;
    }
    for (int i = 0; i < n->n_attrs; i++) {
        int rc = enc_attr(e, &n->attrs[i], &attrs[i], err);
        if (rc < 0) return rc;
    }
    m->n_inputs = (size_t)n->n_inputs;
    m->inputs = ins;
    m->n_outputs = (size_t)n->n_outputs;
    m->outputs = outs;
    m->n_attrs = (size_t)n->n_attrs;
    m->attrs = attrs;
    *out = m;
    return 0;
}

static int enc_graph(struct enc *e, const struct rtx_graph *g, Rtx__V1__Graph *m,
                     struct rtx_err *err) {
    size_t n_init = 0;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].constant) n_init++;
    m->name = g->name ? g->name : (char *)"";
    m->ir_version = IR_VERSION;
    m->inputs = enc_alloc(e, (size_t)g->n_inputs, sizeof *m->inputs);
    m->outputs = enc_alloc(e, (size_t)g->n_outputs, sizeof *m->outputs);
    m->nodes = enc_alloc(e, (size_t)g->n_nodes, sizeof *m->nodes);
    m->initializers = enc_alloc(e, n_init, sizeof *m->initializers);
    if (!m->inputs || !m->outputs || !m->nodes || !m->initializers)
        return rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory");
    int rc = 0;
    for (int i = 0; i < g->n_inputs && rc == 0; i++) {
        int v = g->inputs[i];
        if (v < 0 || v >= g->n_values)
            return rtx_err_set(err, RTX_EINVAL, "graph encode: bad input index %d", v);
        rc = enc_value_info(e, &g->values[v], &m->inputs[i], err);
    }
    m->n_inputs = (size_t)g->n_inputs;
    for (int i = 0; i < g->n_values && rc == 0; i++) {
        const struct rtx_value *v = &g->values[i];
        if (!v->constant) continue;
        rc = enc_tensor(e, v->constant, v->name, &m->initializers[m->n_initializers++], err);
        if (rc < 0) rtx_err_prefix(err, "initializer %s", v->name);
    }
    for (int i = 0; i < g->n_nodes && rc == 0; i++) {
        rc = enc_node(e, g, &g->nodes[i], &m->nodes[i], err);
        if (rc < 0) {
            char label[96];
            rtx_err_prefix(err, "%s", rtx__node_label(g, i, label, sizeof label));
        }
    }
    m->n_nodes = (size_t)g->n_nodes;
    for (int i = 0; i < g->n_outputs && rc == 0; i++) {
        int v = g->outputs[i];
        if (v < 0 || v >= g->n_values)
            return rtx_err_set(err, RTX_EINVAL, "graph encode: bad output index %d", v);
        rc = enc_value_info(e, &g->values[v], &m->outputs[i], err);
    }
    m->n_outputs = (size_t)g->n_outputs;
    return rc;
}

int rtx_graph_encode(const struct rtx_graph *g, void **out, size_t *len, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!g || !out || !len) return rtx_err_set(err, RTX_EINVAL, "graph encode: invalid argument");
    *out = NULL;
    *len = 0;
    struct enc e = {0};
    Rtx__V1__Graph m = RTX__V1__GRAPH__INIT;
    int rc = enc_graph(&e, g, &m, err);
    if (rc == 0) {
        size_t n = rtx__v1__graph__get_packed_size(&m);
        uint8_t *buf = rtx_malloc(n ? n : 1);
        if (!buf) {
            rc = rtx_err_set(err, RTX_ENOMEM, "graph encode: out of memory (%zu bytes)", n);
        } else {
            size_t packed = rtx__v1__graph__pack(&m, buf);
            if (packed != n) {
                rtx_free(buf);
                rc = rtx_err_set(err, RTX_EINTERNAL, "graph encode: packed %zu of %zu bytes",
                                 packed, n);
            } else {
                *out = buf;
                *len = n;
            }
        }
    }
    enc_free(&e);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------------------------- */

/* Reads a whole regular file into an rtx_malloc'd buffer. max_bytes bounds the size. */
static int read_file(const char *path, int64_t max_bytes, void **out, size_t *len,
                     struct rtx_err *err) {
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        return rtx_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return rtx_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return rtx_err_set(err, RTX_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size > max_bytes || (uint64_t)sb.st_size > SIZE_MAX - 1) {
        close(fd);
        return rtx_err_set(err, RTX_ELIMIT, "%s: file of %lld bytes is too large", path,
                           (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    uint8_t *buf = rtx_malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            rtx_free(buf);
            close(fd);
            return rtx_err_set(err, -e, "%s: read: %s", path, strerror(e));
        }
        if (r == 0) break; /* the file shrank while reading */
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = got;
    return 0;
}

int rtx_graph_load_file(const char *path, const struct rtx_limits *lim, struct rtx_graph **out,
                        struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!path || !out) return rtx_err_set(err, RTX_EINVAL, "graph load: invalid argument");
    *out = NULL;
    struct rtx_limits dflt = rtx_limits_default();
    if (!lim) lim = &dflt;
    /* A graph file is mostly its constants; allow generous room for the structure. */
    int64_t max_bytes = lim->max_total_bytes;
    max_bytes =
        max_bytes > INT64_MAX - (INT64_C(1) << 30) ? INT64_MAX : max_bytes + (INT64_C(1) << 30);
    void *data = NULL;
    size_t len = 0;
    int rc = read_file(path, max_bytes, &data, &len, err);
    if (rc < 0) return rc;
    rc = rtx_graph_decode(data, len, lim, out, err);
    rtx_free(data);
    if (rc < 0) rtx_err_prefix(err, "%s", path);
    return rc;
}

int rtx_graph_save_file(const struct rtx_graph *g, const char *path, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!g || !path) return rtx_err_set(err, RTX_EINVAL, "graph save: invalid argument");
    void *data = NULL;
    size_t len = 0;
    int rc = rtx_graph_encode(g, &data, &len, err);
    if (rc < 0) return rc;
    int fd;
    do
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        rtx_free(data);
        return rtx_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, (const uint8_t *)data + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            rc = -errno;
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 && rc == 0) rc = -errno;
    rtx_free(data);
    if (rc < 0) {
        unlink(path);
        return rtx_err_set(err, rc, "%s: write: %s", path, strerror(-rc));
    }
    return 0;
}
