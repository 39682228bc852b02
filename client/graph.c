/*
 * graph.c - librtx graph builder: an rtx.v1.Graph message grown in place by the builder
 * functions, loaded from and saved to .rtxg files, and read back by the accessors.
 *
 * DESIGN
 * The graph is kept as the protobuf-c message itself, allocated piece by piece with malloc,
 * so the message that protobuf-c decodes from a file and the one the builder makes are the
 * same kind of object: both extend the same way and both are released by
 * rtx__v1__graph__free_unpacked. Repeated fields of the graph grow by doubling (capacities
 * kept beside the message); per-node arrays are small and grow by one.
 * Every builder function checks its arguments and allocates everything it needs before it
 * touches the graph, so a failed call leaves the graph as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client-impl.h"

struct rtx_client_graph {
    Rtx__V1__Graph *pb;
    size_t cap_inputs;                  /* allocated elements of pb->inputs */
    size_t cap_outputs;
    size_t cap_nodes;
    size_t cap_initializers;
};

const Rtx__V1__Graph *rtx__client_graph_pb(const struct rtx_client_graph *g) {
    return g->pb;
}

/* Makes room for one more element in a repeated field of n elements; false when out of
 * memory (the array is then unchanged). */
static bool reserve(void **arr, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return true;
    size_t want = *cap ? *cap * 2 : 8;
    if (want > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, want * elem);
    if (!p) return false;
    *arr = p;
    *cap = want;
    return true;
}

static int oom(struct rtx_client_err *err) {
    return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
}

static bool empty(const char *s) {
    return !s || !*s;
}

/* Whether `name` is already a graph input or initializer. */
static bool declared(const Rtx__V1__Graph *pb, const char *name) {
    for (size_t i = 0; i < pb->n_inputs; i++)
        if (strcmp(pb->inputs[i]->name, name) == 0) return true;
    for (size_t i = 0; i < pb->n_initializers; i++)
        if (strcmp(pb->initializers[i]->name, name) == 0) return true;
    return false;
}

static struct rtx_client_graph *graph_wrap(Rtx__V1__Graph *pb) {
    struct rtx_client_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->pb = pb;
    g->cap_inputs = pb->n_inputs;
    g->cap_outputs = pb->n_outputs;
    g->cap_nodes = pb->n_nodes;
    g->cap_initializers = pb->n_initializers;
    return g;
}

int rtx_client_graph_new(const char *name, struct rtx_client_graph **out,
                         struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__Graph *pb = malloc(sizeof *pb);
    if (!pb) return oom(err);
    rtx__v1__graph__init(pb);
    pb->ir_version = 1;
    if (!empty(name) && !(pb->name = strdup(name))) {
        free(pb);
        return oom(err);
    }
    struct rtx_client_graph *g = graph_wrap(pb);
    if (!g) {
        rtx__v1__graph__free_unpacked(pb, NULL);
        return oom(err);
    }
    *out = g;
    rtx__client_err_clear(err);
    return 0;
}

void rtx_client_graph_free(struct rtx_client_graph *g) {
    if (!g) return;
    rtx__v1__graph__free_unpacked(g->pb, NULL);
    free(g);
}

/* ------------------------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------------------------- */

int rtx_client_graph_decode(const void *data, size_t len, struct rtx_client_graph **out,
                            struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    if (!data && len) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no data");
    Rtx__V1__Graph *pb = rtx__v1__graph__unpack(NULL, len, data);
    if (!pb)
        return rtx__client_err(err, RTX_CLIENT_EFORMAT, -1,
                               "not a serialized rtx.v1.Graph (%zu bytes)", len);
    struct rtx_client_graph *g = graph_wrap(pb);
    if (!g) {
        rtx__v1__graph__free_unpacked(pb, NULL);
        return oom(err);
    }
    *out = g;
    rtx__client_err_clear(err);
    return 0;
}

/* Reads a whole file into *data (malloc'ed) and *len. */
static int read_file(const char *path, void **data, size_t *len, struct rtx_client_err *err) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: %s", path, strerror(errno));
    size_t cap = 0, n = 0;
    char *buf = NULL;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            size_t want = cap ? cap * 2 : 65536;
            char *p = want > cap ? realloc(buf, want) : NULL;
            if (!p) {
                rc = oom(err);
                break;
            }
            buf = p;
            cap = want;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *data = buf;
    *len = n;
    return 0;
}

int rtx_client_graph_load(const char *path, struct rtx_client_graph **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    if (empty(path)) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph file name");
    void *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len, err);
    if (rc < 0) return rc;
    rc = rtx_client_graph_decode(data, len, out, err);
    free(data);
    if (rc == RTX_CLIENT_EFORMAT)
        rtx__client_err(err, rc, -1, "%s: not a graph file (no serialized rtx.v1.Graph)", path);
    return rc;
}

int rtx_client_graph_encode(const struct rtx_client_graph *g, void **data, size_t *len,
                            struct rtx_client_err *err) {
    if (!g || !data || !len) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    *data = NULL;
    *len = 0;
    size_t n = rtx__v1__graph__get_packed_size(g->pb);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return oom(err);
    rtx__v1__graph__pack(g->pb, buf);
    *data = buf;
    *len = n;
    rtx__client_err_clear(err);
    return 0;
}

int rtx_client_graph_save(const struct rtx_client_graph *g, const char *path,
                          struct rtx_client_err *err) {
    if (!g || empty(path))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph or no file name");
    void *data = NULL;
    size_t len = 0;
    int rc = rtx_client_graph_encode(g, &data, &len, err);
    if (rc < 0) return rc;
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(data);
        return oom(err);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: %s", tmp, strerror(errno));
    } else {
        const char *p = data;
        size_t left = len;
        while (left > 0 && rc == 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0)
                rc = rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: %s", tmp, strerror(errno));
            else {
                p += w;
                left -= (size_t)w;
            }
        }
        if (close(fd) != 0 && rc == 0)
            rc = rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: %s", tmp, strerror(errno));
        if (rc == 0 && rename(tmp, path) != 0)
            rc = rtx__client_err(err, RTX_CLIENT_EIO, -1, "%s: %s", path, strerror(errno));
        if (rc < 0) unlink(tmp);
    }
    free(tmp);
    free(data);
    if (rc == 0) rtx__client_err_clear(err);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Building
 * ---------------------------------------------------------------------------------------- */

/* A new ValueInfo named `name`; ndim < 0: no shape. NULL when out of memory. */
static Rtx__V1__ValueInfo *value_info_new(const char *name, enum rtx_client_dtype dt, int ndim,
                                          const int64_t *dims) {
    Rtx__V1__ValueInfo *vi = malloc(sizeof *vi);
    if (!vi) return NULL;
    rtx__v1__value_info__init(vi);
    vi->dtype = (Rtx__V1__DataType)dt;
    vi->name = strdup(name);
    if (ndim > 0) vi->dims = malloc(sizeof *vi->dims * (size_t)ndim);
    if (!vi->name || (ndim > 0 && !vi->dims)) {
        rtx__v1__value_info__free_unpacked(vi, NULL);
        return NULL;
    }
    if (ndim >= 0) {
        vi->has_shape = true;
        vi->n_dims = (size_t)ndim;
        for (int i = 0; i < ndim; i++)
            vi->dims[i] = dims[i];
    }
    return vi;
}

int rtx_client_graph_add_input(struct rtx_client_graph *g, const char *name,
                               enum rtx_client_dtype dt, int ndim, const int64_t *dims,
                               struct rtx_client_err *err) {
    if (!g) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    if (empty(name)) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "input without a name");
    if (dt <= RTX_CLIENT_DTYPE_UNSPECIFIED || dt >= RTX_CLIENT_DTYPE_COUNT)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "input %s: invalid dtype %d", name,
                               (int)dt);
    if (ndim < -1 || ndim > RTX_CLIENT_MAX_DIMS || (ndim > 0 && !dims))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "input %s: rank %d (-1..%d)", name,
                               ndim, RTX_CLIENT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i] < -1)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                                   "input %s: dimension %d is %lld (-1 or more)", name, i,
                                   (long long)dims[i]);
    if (declared(g->pb, name))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                               "input %s: the name is already an input or initializer", name);
    if (g->pb->n_inputs >= INT_MAX)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "too many inputs");
    Rtx__V1__ValueInfo *vi = value_info_new(name, dt, ndim, dims);
    if (!vi || !reserve((void **)&g->pb->inputs, g->pb->n_inputs, &g->cap_inputs, sizeof vi)) {
        if (vi) rtx__v1__value_info__free_unpacked(vi, NULL);
        return oom(err);
    }
    g->pb->inputs[g->pb->n_inputs++] = vi;
    rtx__client_err_clear(err);
    return (int)g->pb->n_inputs - 1;
}

int rtx_client_graph_add_initializer(struct rtx_client_graph *g,
                                     const struct rtx_client_tensor *t,
                                     struct rtx_client_err *err) {
    if (!g) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    if (!t || empty(t->name))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "initializer without a name");
    char what[128];
    snprintf(what, sizeof what, "initializer %s", t->name);
    int rc = rtx__client_tensor_check(t, what, err);
    if (rc < 0) return rc;
    if (declared(g->pb, t->name))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                               "initializer %s: the name is already an input or initializer",
                               t->name);
    if (g->pb->n_initializers >= INT_MAX)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "too many initializers");
    Rtx__V1__Tensor *pb = rtx__client_tensor_copy(t);
    if (!pb || !reserve((void **)&g->pb->initializers, g->pb->n_initializers,
                        &g->cap_initializers, sizeof pb)) {
        if (pb) rtx__v1__tensor__free_unpacked(pb, NULL);
        return oom(err);
    }
    g->pb->initializers[g->pb->n_initializers++] = pb;
    rtx__client_err_clear(err);
    return (int)g->pb->n_initializers - 1;
}

/* An array of n malloc'ed copies of names (NULL entries become ""), or NULL. */
static char **copy_names(const char *const *names, int n) {
    char **out = calloc((size_t)n, sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        if (!(out[i] = strdup(names[i] ? names[i] : ""))) {
            for (int k = 0; k < i; k++)
                free(out[k]);
            free(out);
            return NULL;
        }
    }
    return out;
}

int rtx_client_graph_add_node(struct rtx_client_graph *g, const char *op, const char *name,
                              const char *const *inputs, int n_inputs,
                              const char *const *outputs, int n_outputs,
                              struct rtx_client_err *err) {
    if (!g) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    if (empty(op)) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node without an op");
    const char *label = empty(name) ? op : name;
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node %s: bad input list", label);
    if (n_outputs < 1 || !outputs)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node %s: no outputs", label);
    for (int i = 0; i < n_outputs; i++)
        if (empty(outputs[i]))
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node %s: output %d has no name",
                                   label, i);
    if (g->pb->n_nodes >= INT_MAX)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "too many nodes");

    Rtx__V1__Node *node = malloc(sizeof *node);
    if (!node) return oom(err);
    rtx__v1__node__init(node);
    node->op = strdup(op);
    if (!empty(name)) node->name = strdup(name);
    if (n_inputs > 0) node->inputs = copy_names(inputs, n_inputs);
    node->outputs = copy_names(outputs, n_outputs);
    node->n_inputs = node->inputs ? (size_t)n_inputs : 0;
    node->n_outputs = node->outputs ? (size_t)n_outputs : 0;
    if (!node->op || !node->name || (n_inputs > 0 && !node->inputs) || !node->outputs) {
        rtx__v1__node__free_unpacked(node, NULL);
        return oom(err);
    }
    if (!reserve((void **)&g->pb->nodes, g->pb->n_nodes, &g->cap_nodes, sizeof node)) {
        rtx__v1__node__free_unpacked(node, NULL);
        return oom(err);
    }
    g->pb->nodes[g->pb->n_nodes++] = node;
    rtx__client_err_clear(err);
    return (int)g->pb->n_nodes - 1;
}

/* Checks that attribute `name` may be set on node `node`; returns the node or NULL (err
 * set). */
static Rtx__V1__Node *attr_node(struct rtx_client_graph *g, int node, const char *name,
                                struct rtx_client_err *err) {
    if (!g) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
        return NULL;
    }
    if (node < 0 || (size_t)node >= g->pb->n_nodes) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no node %d (the graph has %zu)", node,
                        g->pb->n_nodes);
        return NULL;
    }
    Rtx__V1__Node *n = g->pb->nodes[node];
    if (empty(name)) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node %d: attribute without a name", node);
        return NULL;
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        if (strcmp(n->attrs[i]->name, name) == 0) {
            rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "node %d: attribute %s is already set",
                            node, name);
            return NULL;
        }
    }
    return n;
}

/* A new attribute named `name` with no value yet, or NULL. */
static Rtx__V1__Attribute *attr_new(const char *name) {
    Rtx__V1__Attribute *a = malloc(sizeof *a);
    if (!a) return NULL;
    rtx__v1__attribute__init(a);
    if (!(a->name = strdup(name))) {
        free(a);
        return NULL;
    }
    return a;
}

/* Appends a (complete) attribute to node n; frees it on failure. */
static int attr_append(Rtx__V1__Node *n, Rtx__V1__Attribute *a, struct rtx_client_err *err) {
    Rtx__V1__Attribute **p = realloc(n->attrs, sizeof *p * (n->n_attrs + 1));
    if (!p) {
        rtx__v1__attribute__free_unpacked(a, NULL);
        return oom(err);
    }
    n->attrs = p;
    n->attrs[n->n_attrs++] = a;
    rtx__client_err_clear(err);
    return 0;
}

int rtx_client_graph_set_attr_int(struct rtx_client_graph *g, int node, const char *name,
                                  int64_t v, struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    Rtx__V1__Attribute *a = attr_new(name);
    if (!a) return oom(err);
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_I;
    a->i = v;
    return attr_append(n, a, err);
}

int rtx_client_graph_set_attr_float(struct rtx_client_graph *g, int node, const char *name,
                                    double v, struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    Rtx__V1__Attribute *a = attr_new(name);
    if (!a) return oom(err);
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_F;
    a->f = v;
    return attr_append(n, a, err);
}

int rtx_client_graph_set_attr_string(struct rtx_client_graph *g, int node, const char *name,
                                     const char *v, struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    if (!v) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "attribute %s: no string", name);
    Rtx__V1__Attribute *a = attr_new(name);
    char *s = strdup(v);
    if (!a || !s) {
        if (a) rtx__v1__attribute__free_unpacked(a, NULL);
        free(s);
        return oom(err);
    }
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_S;
    a->s = s;
    return attr_append(n, a, err);
}

int rtx_client_graph_set_attr_ints(struct rtx_client_graph *g, int node, const char *name,
                                   const int64_t *v, int count, struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    if (count < 0 || (count > 0 && !v))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "attribute %s: bad list", name);
    Rtx__V1__Attribute *a = attr_new(name);
    Rtx__V1__Attribute__Ints *ints = malloc(sizeof *ints);
    int64_t *vals = malloc(sizeof *vals * (size_t)(count ? count : 1));
    if (!a || !ints || !vals) {
        if (a) rtx__v1__attribute__free_unpacked(a, NULL);
        free(ints);
        free(vals);
        return oom(err);
    }
    rtx__v1__attribute__ints__init(ints);
    if (count > 0) memcpy(vals, v, sizeof *vals * (size_t)count);
    ints->values = vals;
    ints->n_values = (size_t)count;
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_INTS;
    a->ints = ints;
    return attr_append(n, a, err);
}

int rtx_client_graph_set_attr_floats(struct rtx_client_graph *g, int node, const char *name,
                                     const double *v, int count, struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    if (count < 0 || (count > 0 && !v))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "attribute %s: bad list", name);
    Rtx__V1__Attribute *a = attr_new(name);
    Rtx__V1__Attribute__Floats *floats = malloc(sizeof *floats);
    double *vals = malloc(sizeof *vals * (size_t)(count ? count : 1));
    if (!a || !floats || !vals) {
        if (a) rtx__v1__attribute__free_unpacked(a, NULL);
        free(floats);
        free(vals);
        return oom(err);
    }
    rtx__v1__attribute__floats__init(floats);
    if (count > 0) memcpy(vals, v, sizeof *vals * (size_t)count);
    floats->values = vals;
    floats->n_values = (size_t)count;
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_FLOATS;
    a->floats = floats;
    return attr_append(n, a, err);
}

int rtx_client_graph_set_attr_tensor(struct rtx_client_graph *g, int node, const char *name,
                                     const struct rtx_client_tensor *t,
                                     struct rtx_client_err *err) {
    Rtx__V1__Node *n = attr_node(g, node, name, err);
    if (!n) return RTX_CLIENT_EINVAL;
    char what[128];
    snprintf(what, sizeof what, "attribute %s", name);
    int rc = rtx__client_tensor_check(t, what, err);
    if (rc < 0) return rc;
    Rtx__V1__Attribute *a = attr_new(name);
    Rtx__V1__Tensor *pb = a ? rtx__client_tensor_copy(t) : NULL;
    if (!pb) {
        if (a) rtx__v1__attribute__free_unpacked(a, NULL);
        return oom(err);
    }
    a->value_case = RTX__V1__ATTRIBUTE__VALUE_T;
    a->t = pb;
    return attr_append(n, a, err);
}

int rtx_client_graph_add_output(struct rtx_client_graph *g, const char *name,
                                struct rtx_client_err *err) {
    if (!g) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    if (empty(name)) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "output without a name");
    for (size_t i = 0; i < g->pb->n_outputs; i++)
        if (strcmp(g->pb->outputs[i]->name, name) == 0)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "output %s: already an output",
                                   name);
    if (g->pb->n_outputs >= INT_MAX)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "too many outputs");
    Rtx__V1__ValueInfo *vi = value_info_new(name, RTX_CLIENT_DTYPE_UNSPECIFIED, -1, NULL);
    if (!vi || !reserve((void **)&g->pb->outputs, g->pb->n_outputs, &g->cap_outputs, sizeof vi)) {
        if (vi) rtx__v1__value_info__free_unpacked(vi, NULL);
        return oom(err);
    }
    g->pb->outputs[g->pb->n_outputs++] = vi;
    rtx__client_err_clear(err);
    return (int)g->pb->n_outputs - 1;
}

/* ------------------------------------------------------------------------------------------
 * Accessors
 * ---------------------------------------------------------------------------------------- */

static int count(size_t n) {
    return n > INT_MAX ? INT_MAX : (int)n;
}

const char *rtx_client_graph_name(const struct rtx_client_graph *g) {
    return g ? rtx__client_str(g->pb->name) : "";
}

int rtx_client_graph_n_inputs(const struct rtx_client_graph *g) {
    return g ? count(g->pb->n_inputs) : 0;
}

int rtx_client_graph_n_outputs(const struct rtx_client_graph *g) {
    return g ? count(g->pb->n_outputs) : 0;
}

int rtx_client_graph_n_nodes(const struct rtx_client_graph *g) {
    return g ? count(g->pb->n_nodes) : 0;
}

int rtx_client_graph_n_initializers(const struct rtx_client_graph *g) {
    return g ? count(g->pb->n_initializers) : 0;
}

int rtx_client_graph_input(const struct rtx_client_graph *g, int i,
                           struct rtx_client_value_info *out, struct rtx_client_err *err) {
    if (!g || !out || i < 0 || (size_t)i >= g->pb->n_inputs)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no input %d", i);
    const Rtx__V1__ValueInfo *vi = g->pb->inputs[i];
    const char *name = rtx__client_str(vi->name);
    int dt = (int)vi->dtype;
    if (dt <= RTX_CLIENT_DTYPE_UNSPECIFIED || dt >= RTX_CLIENT_DTYPE_COUNT)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "input %s: unknown dtype %d", name,
                               dt);
    if (vi->n_dims > RTX_CLIENT_MAX_DIMS)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "input %s: %zu dimensions (at most %d)",
                               name, vi->n_dims, RTX_CLIENT_MAX_DIMS);
    memset(out, 0, sizeof *out);
    out->name = name;
    out->dtype = (enum rtx_client_dtype)dt;
    out->ndim = vi->has_shape || vi->n_dims > 0 ? (int)vi->n_dims : -1;
    for (size_t d = 0; d < vi->n_dims; d++)
        out->dims[d] = vi->dims[d];
    rtx__client_err_clear(err);
    return 0;
}

const char *rtx_client_graph_output(const struct rtx_client_graph *g, int i) {
    if (!g || i < 0 || (size_t)i >= g->pb->n_outputs) return NULL;
    return rtx__client_str(g->pb->outputs[i]->name);
}
