/*
 * model.c - loading an ONNX model: the ModelProto parsed with protobuf-c, the opset checked,
 * every node's op looked up in the importer's table (all unsupported ops listed in one
 * error), the nodes put in a topological order (an undefined input or a cycle named), the
 * graph inputs and outputs described, and the initializers turned into host tensors.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx-impl.h"

/* Bytes of an .onnx file read whole (protobuf needs the message in memory). */
#define ONNX_MAX_FILE_BYTES ((int64_t)16 << 30)

static const struct {
    int onnx;
    const char *name;
    int rtx; /* -1: not an rtx dtype */
} onnx_types[] = {
    {1, "FLOAT", RTX_F32},     {2, "UINT8", RTX_U8},     {3, "INT8", RTX_I8},
    {4, "UINT16", -1},         {5, "INT16", -1},         {6, "INT32", RTX_I32},
    {7, "INT64", RTX_I64},     {8, "STRING", -1},        {9, "BOOL", RTX_BOOL},
    {10, "FLOAT16", RTX_F16},  {11, "DOUBLE", -1},       {12, "UINT32", -1},
    {13, "UINT64", -1},        {14, "COMPLEX64", -1},    {15, "COMPLEX128", -1},
    {16, "BFLOAT16", RTX_BF16}, {17, "FLOAT8E4M3FN", -1}, {18, "FLOAT8E4M3FNUZ", -1},
    {19, "FLOAT8E5M2", -1},    {20, "FLOAT8E5M2FNUZ", -1}, {21, "UINT4", -1},
    {22, "INT4", -1},          {23, "FLOAT4E2M1", -1},
};

const char *rtx__onnx_type_name(int onnx_type) {
    for (size_t i = 0; i < sizeof onnx_types / sizeof onnx_types[0]; i++)
        if (onnx_types[i].onnx == onnx_type) return onnx_types[i].name;
    return onnx_type == 0 ? "UNDEFINED" : "an unknown type";
}

int rtx__onnx_dtype(int onnx_type, enum rtx_dtype *out, struct rtx_err *err) {
    for (size_t i = 0; i < sizeof onnx_types / sizeof onnx_types[0]; i++)
        if (onnx_types[i].onnx == onnx_type) {
            if (onnx_types[i].rtx < 0) break;
            *out = (enum rtx_dtype)onnx_types[i].rtx;
            return 0;
        }
    return rtx_err_set(err, RTX_EUNSUPPORTED,
                       "element type %s (%d) is not supported (float, float16, bfloat16, int8, "
                       "uint8, int32, int64, bool are)",
                       rtx__onnx_type_name(onnx_type), onnx_type);
}

/* ---------------------------------------------------------------------------------------- */
/* Tensor data */

/* Reads external data: location (relative, inside base_dir), offset, length. */
static int read_external(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                         void *dst, size_t bytes, struct rtx_err *err) {
    if (!base_dir)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: external data is not accepted here (only an .onnx file read "
                           "from a directory may refer to data files)", what);
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value) continue;
        char *end = NULL;
        if (!strcmp(e->key, "location")) {
            loc = e->value;
        } else if (!strcmp(e->key, "offset") || !strcmp(e->key, "length")) {
            errno = 0;
            long long v = strtoll(e->value, &end, 10);
            if (errno || !*e->value || *end || v < 0)
                return rtx_err_set(err, RTX_EFORMAT, "%s: external data %s '%s' is not a "
                                   "non-negative integer", what, e->key, e->value);
            if (!strcmp(e->key, "offset")) offset = v;
            else length = v;
        }
    }
    if (!loc || !*loc)
        return rtx_err_set(err, RTX_EFORMAT, "%s: external data without a location", what);
    if (loc[0] == '/' || !strncmp(loc, "../", 3) || strstr(loc, "/../") ||
        !strcmp(loc, "..") || (strlen(loc) >= 3 && !strcmp(loc + strlen(loc) - 3, "/..")))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: external data location '%s' is outside the model's directory",
                           what, loc);
    if (length >= 0 && (size_t)length != bytes)
        return rtx_err_set(err, RTX_EFORMAT, "%s: external data length %lld, the tensor "
                           "needs %zu bytes", what, (long long)length, bytes);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", base_dir, loc) >= (int)sizeof path)
        return rtx_err_set(err, RTX_EFORMAT, "%s: external data path too long", what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rtx_err_set(err, RTX_EIO, "%s: external data file %s: %s", what, path,
                           strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || offset > st.st_size ||
        (int64_t)bytes > st.st_size - offset) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: external data file %s holds %lld bytes, the "
                         "tensor needs %zu at offset %lld", what, path,
                         (long long)st.st_size, bytes, (long long)offset);
    } else {
        size_t got = 0;
        while (got < bytes) {
            ssize_t r = pread(fd, (char *)dst + got, bytes - got, (off_t)(offset + got));
            if (r <= 0) {
                rc = rtx_err_set(err, RTX_EIO, "%s: reading %s: %s", what, path,
                                 r < 0 ? strerror(errno) : "short file");
                break;
            }
            got += (size_t)r;
        }
    }
    close(fd);
    return rc;
}

/* Copies typed-field data (float_data, int32_data, int64_data) into dst of dtype dt. */
static int copy_typed(const Onnx__TensorProto *t, enum rtx_dtype dt, int64_t n, void *dst,
                      const char *what, struct rtx_err *err) {
    size_t have = 0;
    switch (dt) {
    case RTX_F32: have = t->n_float_data; break;
    case RTX_I64: have = t->n_int64_data; break;
    default: have = t->n_int32_data; break; /* f16, bf16 (bits), i8, u8, i32, bool */
    }
    if ((int64_t)have != n)
        return rtx_err_set(err, RTX_EFORMAT, "%s: %zu data elements for %lld in its shape",
                           what, have, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case RTX_F32: ((float *)dst)[i] = t->float_data[i]; break;
        case RTX_I64: ((int64_t *)dst)[i] = t->int64_data[i]; break;
        case RTX_I32: ((int32_t *)dst)[i] = t->int32_data[i]; break;
        case RTX_F16:
        case RTX_BF16: ((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i]; break;
        case RTX_I8: ((int8_t *)dst)[i] = (int8_t)t->int32_data[i]; break;
        case RTX_U8: ((uint8_t *)dst)[i] = (uint8_t)t->int32_data[i]; break;
        case RTX_BOOL: ((uint8_t *)dst)[i] = t->int32_data[i] != 0; break;
        default: break;
        }
    }
    return 0;
}

int rtx__onnx_tensor(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                     const struct rtx_limits *lim, struct rtx_tensor **out, struct rtx_err *err) {
    *out = NULL;
    enum rtx_dtype dt;
    int rc = rtx__onnx_dtype(t->has_data_type ? t->data_type : 0, &dt, err);
    if (rc) return rtx_err_prefix(err, "%s", what);
    if (t->segment)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: segmented tensors are not supported",
                           what);
    if ((int)t->n_dims > RTX_MAX_DIMS || (lim && (int)t->n_dims > lim->max_dims))
        return rtx_err_set(err, RTX_ELIMIT, "%s: %zu dimensions (at most %d)", what, t->n_dims,
                           RTX_MAX_DIMS);
    int64_t dims[RTX_MAX_DIMS], n = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        dims[d] = t->dims[d];
        if (dims[d] < 0)
            return rtx_err_set(err, RTX_EFORMAT, "%s: dimension %zu is %lld", what, d,
                               (long long)dims[d]);
        if (dims[d] && n > (lim ? lim->max_elements : INT64_MAX) / dims[d])
            return rtx_err_set(err, RTX_ELIMIT, "%s: too many elements", what);
        n *= dims[d];
    }
    size_t bytes = (size_t)n * rtx_dtype_size(dt);
    if (lim && (n > lim->max_elements || (int64_t)bytes > lim->max_tensor_bytes))
        return rtx_err_set(err, RTX_ELIMIT, "%s: %lld elements, %zu bytes exceed the limits",
                           what, (long long)n, bytes);
    struct rtx_tensor *x = NULL;
    if ((rc = rtx_tensor_new(dt, (int)t->n_dims, dims, &x, err))) return rc;
    void *dst = rtx_tensor_data(x);
    bool external = t->has_data_location &&
                    t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (external) {
        rc = read_external(t, base_dir, what, dst, bytes, err);
    } else if (t->has_raw_data) {
        if (t->raw_data.len != bytes)
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: raw_data holds %zu bytes, %s%s needs %zu",
                             what, t->raw_data.len, rtx_dtype_name(dt), "", bytes);
        else if (bytes)
            memcpy(dst, t->raw_data.data, bytes);
        if (!rc && dt == RTX_BOOL)
            for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = ((uint8_t *)dst)[i] != 0;
    } else {
        rc = copy_typed(t, dt, n, dst, what, err);
    }
    if (rc) {
        rtx_tensor_unref(x);
        return rc;
    }
    *out = x;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Graph I/O */

static int describe_io(const Onnx__ValueInfoProto *vi, const char *kind, const char *what,
                       struct rtx_onnx_io *io, struct rtx_err *err) {
    io->name = vi->name ? vi->name : "";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: graph %s '%s' is not a tensor (sequence, "
                           "map and optional values are not supported)", what, kind, io->name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int rc = rtx__onnx_dtype(tt->has_elem_type ? tt->elem_type : 0, &io->dtype, err);
    if (rc) return rtx_err_prefix(err, "%s: graph %s '%s'", what, kind, io->name);
    io->ndim = -1;
    if (!tt->shape) return 0;
    if (tt->shape->n_dim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_ELIMIT, "%s: graph %s '%s' has %zu dimensions (at most %d)",
                           what, kind, io->name, tt->shape->n_dim, RTX_MAX_DIMS);
    io->ndim = (int)tt->shape->n_dim;
    for (int d = 0; d < io->ndim; d++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
        io->dims[d] = -1;
        io->dim_params[d] = "";
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dm->dim_value < 0)
                return rtx_err_set(err, RTX_EFORMAT, "%s: graph %s '%s' dimension %d is %lld",
                                   what, kind, io->name, d, (long long)dm->dim_value);
            io->dims[d] = dm->dim_value;
        } else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
            io->dim_params[d] = dm->dim_param ? dm->dim_param : "";
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Names: a sorted table of the values defined so far, for the topological sort */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct rtx_tensor *rtx__onnx_init(const struct rtx_onnx_model *m, const char *name) {
    if (!m->n_inits) return NULL;
    char *const *hit = bsearch(&name, m->init_names, (size_t)m->n_inits, sizeof *m->init_names,
                               cmp_str);
    return hit ? m->inits[hit - m->init_names] : NULL;
}

/* Orders the nodes so that every input is defined before use (Kahn's algorithm over value
 * names; the model's own order among ready nodes). Names an input that nothing defines, or
 * a node on a cycle. */
static int sort_nodes(struct rtx_onnx_model *m, const Onnx__GraphProto *g, struct rtx_err *err) {
    size_t nn = g->n_node;
    m->order = rtx_calloc(nn + 1, sizeof *m->order);
    /* every name that is defined: inputs, initializers, node outputs (sorted, with owner) */
    size_t cap = g->n_input + g->n_initializer + 1;
    for (size_t i = 0; i < nn; i++) cap += g->node[i]->n_output;
    const char **defined = rtx_calloc(cap, sizeof *defined);
    bool *done = rtx_calloc(nn + 1, 1);
    int rc = 0;
    if (!m->order || !defined || !done) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory ordering %s", m->what);
        goto out;
    }
    /* available: names defined so far (kept sorted; insertion is O(n), fine for graphs of
     * tens of thousands of nodes) */
    size_t n_def = 0;
    for (size_t i = 0; i < g->n_input; i++) defined[n_def++] = g->input[i]->name;
    for (size_t i = 0; i < g->n_initializer; i++) defined[n_def++] = g->initializer[i]->name;
    for (size_t i = 0; i < n_def; i++)
        if (!defined[i]) defined[i] = "";
    qsort(defined, n_def, sizeof *defined, cmp_str);
    size_t placed = 0;
    while (placed < nn) {
        size_t before = placed;
        for (size_t i = 0; i < nn; i++) {
            if (done[i]) continue;
            const Onnx__NodeProto *n = g->node[i];
            bool ready = true;
            for (size_t k = 0; k < n->n_input && ready; k++) {
                const char *in = n->input[k];
                if (!in || !*in) continue;
                ready = bsearch(&in, defined, n_def, sizeof *defined, cmp_str) != NULL;
            }
            if (!ready) continue;
            done[i] = true;
            m->order[placed++] = n;
            for (size_t o = 0; o < n->n_output; o++) {
                const char *name = n->output[o];
                if (!name || !*name) continue;
                size_t lo = 0, hi = n_def;
                while (lo < hi) {
                    size_t mid = (lo + hi) / 2;
                    if (strcmp(defined[mid], name) < 0) lo = mid + 1;
                    else hi = mid;
                }
                if (lo < n_def && !strcmp(defined[lo], name)) {
                    rc = rtx_err_set(err, RTX_EFORMAT, "%s: value '%s' is defined twice (node "
                                     "'%s' writes it again)", m->what, name,
                                     n->name ? n->name : "");
                    goto out;
                }
                memmove(&defined[lo + 1], &defined[lo], (n_def - lo) * sizeof *defined);
                defined[lo] = name;
                n_def++;
            }
        }
        if (placed == before) break;
    }
    if (placed < nn) {
        /* name the first blocked node and an input of it that is missing */
        for (size_t i = 0; i < nn; i++) {
            if (done[i]) continue;
            const Onnx__NodeProto *n = g->node[i];
            for (size_t k = 0; k < n->n_input; k++) {
                const char *in = n->input[k];
                if (!in || !*in || bsearch(&in, defined, n_def, sizeof *defined, cmp_str))
                    continue;
                bool produced = false;
                for (size_t j = 0; j < nn && !produced; j++)
                    for (size_t o = 0; o < g->node[j]->n_output; o++)
                        if (g->node[j]->output[o] && !strcmp(g->node[j]->output[o], in))
                            produced = true;
                rc = rtx_err_set(err, RTX_EFORMAT,
                                 produced ? "%s: node '%s' (%s) is on a cycle: its input '%s' "
                                            "depends on its own output"
                                          : "%s: node '%s' (%s) reads '%s', which no node, "
                                            "graph input or initializer defines",
                                 m->what, n->name ? n->name : "", n->op_type ? n->op_type : "",
                                 in);
                goto out;
            }
        }
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: the nodes cannot be ordered", m->what);
        goto out;
    }
    for (size_t i = 0; i < g->n_output; i++) {
        const char *name = g->output[i]->name ? g->output[i]->name : "";
        if (!bsearch(&name, defined, n_def, sizeof *defined, cmp_str)) {
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: graph output '%s' is not defined by any "
                             "node, input or initializer", m->what, name);
            goto out;
        }
    }
    m->n_nodes = (int)nn;
out:
    rtx_free(defined);
    rtx_free(done);
    return rc;
}

/* Every node's op in the table: one error listing all that are not. */
static int check_ops(const struct rtx_onnx_model *m, const Onnx__GraphProto *g,
                     struct rtx_err *err) {
    char list[1024] = "";
    size_t len = 0;
    int bad = 0;
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        const char *dom = n->domain ? n->domain : "";
        const char *op = n->op_type ? n->op_type : "";
        bool ok = (!*dom || !strcmp(dom, "ai.onnx")) && rtx__onnx_op(op);
        if (ok) continue;
        bad++;
        if (len < sizeof list - 1)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s%s%s (node '%s', opset %d)",
                                    bad > 1 ? ", " : "", *dom ? dom : "", *dom ? "." : "", op,
                                    n->name ? n->name : "", m->opset);
    }
    if (!bad) return 0;
    if (len >= sizeof list - 1) strcpy(list + sizeof list - 5, "...");
    return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %d node%s with ops rtxd does not support: %s",
                       m->what, bad, bad == 1 ? "" : "s", list);
}

static int cmp_def(const void *a, const void *b) {
    return strcmp(((const struct rtx__onnx_def *)a)->name, ((const struct rtx__onnx_def *)b)->name);
}

static struct rtx__onnx_def *find_def(const struct rtx_onnx_model *m, const char *name) {
    struct rtx__onnx_def key = {.name = name};
    return m->n_defs ? bsearch(&key, m->defs, (size_t)m->n_defs, sizeof key, cmp_def) : NULL;
}

const Onnx__NodeProto *rtx__onnx_producer(const struct rtx_onnx_model *m, const char *name) {
    const struct rtx__onnx_def *d = find_def(m, name);
    return d ? d->node : NULL;
}

int rtx__onnx_uses(const struct rtx_onnx_model *m, const char *name) {
    const struct rtx__onnx_def *d = find_def(m, name);
    return d ? d->uses : 0;
}

/* The table of node outputs with their producers and reader counts (for pattern matching). */
static int index_defs(struct rtx_onnx_model *m, const Onnx__GraphProto *g, struct rtx_err *err) {
    size_t cap = 1;
    for (size_t i = 0; i < g->n_node; i++) cap += g->node[i]->n_output;
    m->defs = rtx_calloc(cap, sizeof *m->defs);
    if (!m->defs) return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", m->what);
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t o = 0; o < g->node[i]->n_output; o++)
            if (g->node[i]->output[o] && *g->node[i]->output[o])
                m->defs[m->n_defs++] =
                    (struct rtx__onnx_def){.name = g->node[i]->output[o], .node = g->node[i]};
    qsort(m->defs, (size_t)m->n_defs, sizeof *m->defs, cmp_def);
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_input; k++) {
            struct rtx__onnx_def *d = g->node[i]->input[k] ? find_def(m, g->node[i]->input[k])
                                                           : NULL;
            if (d) d->uses++;
        }
    for (size_t i = 0; i < g->n_output; i++) {
        struct rtx__onnx_def *d = g->output[i]->name ? find_def(m, g->output[i]->name) : NULL;
        if (d) d->uses++;
    }
    return 0;
}

static int read_opset(struct rtx_onnx_model *m, struct rtx_err *err) {
    const Onnx__ModelProto *mp = m->proto;
    m->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        const char *dom = o->domain ? o->domain : "";
        if ((!*dom || !strcmp(dom, "ai.onnx")) && o->has_version) m->opset = (int)o->version;
    }
    if (m->opset < 0)
        return rtx_err_set(err, RTX_EFORMAT, "%s: no ai.onnx opset import", m->what);
    if (m->opset < RTX_ONNX_OPSET_MIN || m->opset > RTX_ONNX_OPSET_MAX)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: opset %d is not supported (rtxd reads "
                           "ai.onnx opsets %d to %d; convert the model with "
                           "onnx.version_converter)", m->what, m->opset, RTX_ONNX_OPSET_MIN,
                           RTX_ONNX_OPSET_MAX);
    return 0;
}

static int load_inits(struct rtx_onnx_model *m, const Onnx__GraphProto *g, const char *base_dir,
                      struct rtx_err *err) {
    size_t n = g->n_initializer;
    m->init_names = rtx_calloc(n + 1, sizeof *m->init_names);
    m->inits = rtx_calloc(n + 1, sizeof *m->inits);
    if (!m->init_names || !m->inits)
        return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", m->what);
    if (g->n_sparse_initializer)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: sparse initializers are not supported",
                           m->what);
    /* sort indices by name so names and tensors stay paired */
    struct pair { char *name; Onnx__TensorProto *t; } *p = rtx_calloc(n + 1, sizeof *p);
    if (!p) return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", m->what);
    for (size_t i = 0; i < n; i++) {
        p[i].name = g->initializer[i]->name ? g->initializer[i]->name : (char *)"";
        p[i].t = g->initializer[i];
    }
    qsort(p, n, sizeof *p, cmp_str); /* by the leading name */
    int rc = 0;
    int64_t total = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (i && !strcmp(p[i].name, p[i - 1].name)) {
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: initializer '%s' is given twice", m->what,
                             p[i].name);
            break;
        }
        char what[512];
        snprintf(what, sizeof what, "%s: initializer '%s'", m->what, p[i].name);
        m->init_names[i] = p[i].name;
        rc = rtx__onnx_tensor(p[i].t, base_dir, what, &m->lim, &m->inits[i], err);
        if (rc) break;
        m->n_inits = (int)i + 1;
        total += (int64_t)rtx_tensor_nbytes(m->inits[i]);
        if (total > m->lim.max_total_bytes)
            rc = rtx_err_set(err, RTX_ELIMIT, "%s: initializers exceed %lld bytes", m->what,
                             (long long)m->lim.max_total_bytes);
        /* the copy in the tensor is the one kept */
        if (p[i].t->has_raw_data && p[i].t->raw_data.data) {
            free(p[i].t->raw_data.data);
            p[i].t->raw_data.data = NULL;
            p[i].t->raw_data.len = 0;
            p[i].t->has_raw_data = 0;
        }
    }
    m->weight_bytes = total;
    rtx_free(p);
    return rc;
}

static int load_io(struct rtx_onnx_model *m, const Onnx__GraphProto *g, struct rtx_err *err) {
    m->inputs = rtx_calloc(g->n_input + 1, sizeof *m->inputs);
    m->outputs = rtx_calloc(g->n_output + 1, sizeof *m->outputs);
    if (!m->inputs || !m->outputs)
        return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", m->what);
    int rc = 0;
    for (size_t i = 0; i < g->n_input && !rc; i++) {
        /* inputs that are also initializers (IR version 3 and older) are constants here */
        if (rtx__onnx_init(m, g->input[i]->name ? g->input[i]->name : "")) continue;
        rc = describe_io(g->input[i], "input", m->what, &m->inputs[m->n_inputs], err);
        if (!rc && m->inputs[m->n_inputs].ndim < 0)
            rc = rtx_err_set(err, RTX_EUNSUPPORTED, "%s: graph input '%s' has no shape (its "
                             "rank must be given)", m->what, m->inputs[m->n_inputs].name);
        m->n_inputs++;
    }
    for (size_t i = 0; i < g->n_output && !rc; i++)
        rc = describe_io(g->output[i], "output", m->what, &m->outputs[m->n_outputs++], err);
    return rc;
}

int rtx_onnx_load_buffer(const void *data, size_t len, const char *base_dir, const char *what,
                         const struct rtx_limits *lim, struct rtx_onnx_model **out,
                         struct rtx_err *err) {
    *out = NULL;
    if (!what) what = "the ONNX model";
    struct rtx_onnx_model *m = rtx_calloc(1, sizeof *m);
    if (!m) return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", what);
    m->lim = lim ? *lim : rtx_limits_default();
    pthread_mutex_init(&m->fold_mu, NULL);
    m->what = strdup(what);
    int rc = 0;
    if (!m->what) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", what);
        goto fail;
    }
    m->proto = onnx__model_proto__unpack(NULL, len, data);
    if (!m->proto) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: not an ONNX model (the protobuf does not parse "
                         "as onnx.ModelProto: truncated or not an .onnx file)", what);
        goto fail;
    }
    const Onnx__GraphProto *g = m->proto->graph;
    if (!g) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: the model has no graph", what);
        goto fail;
    }
    if (m->proto->n_functions) {
        rc = rtx_err_set(err, RTX_EUNSUPPORTED, "%s: model-local functions are not supported",
                         what);
        goto fail;
    }
    if ((int64_t)g->n_node > m->lim.max_nodes) {
        rc = rtx_err_set(err, RTX_ELIMIT, "%s: %zu nodes (at most %lld)", what, g->n_node,
                         (long long)m->lim.max_nodes);
        goto fail;
    }
    m->producer = m->proto->producer_name
                      ? strdup(m->proto->producer_name) : strdup("");
    if (!m->producer) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", what);
        goto fail;
    }
    if (m->proto->producer_version && *m->proto->producer_version) {
        char *p = NULL;
        if (asprintf(&p, "%s %s", m->producer, m->proto->producer_version) > 0) {
            free(m->producer);
            m->producer = p;
        }
    }
    if ((rc = read_opset(m, err))) goto fail;
    if ((rc = check_ops(m, g, err))) goto fail;
    if ((rc = sort_nodes(m, g, err))) goto fail;
    if ((rc = index_defs(m, g, err))) goto fail;
    if ((rc = load_inits(m, g, base_dir, err))) goto fail;
    if ((rc = load_io(m, g, err))) goto fail;
    *out = m;
    return 0;
fail:
    rtx_onnx_free(m);
    return rc;
}

int rtx_onnx_load_file(const char *path, const struct rtx_limits *lim,
                       struct rtx_onnx_model **out, struct rtx_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return rtx_err_set(err, RTX_EIO, "%s: not a regular file", path);
    }
    if (st.st_size > ONNX_MAX_FILE_BYTES) {
        close(fd);
        return rtx_err_set(err, RTX_ELIMIT, "%s: %lld bytes (at most %lld)", path,
                           (long long)st.st_size, (long long)ONNX_MAX_FILE_BYTES);
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = rtx_malloc(len ? len : 1);
    if (!buf) {
        close(fd);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got < len) {
        rtx_free(buf);
        return rtx_err_set(err, RTX_EIO, "%s: short read", path);
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    int rc = rtx_onnx_load_buffer(buf, len, dir, path, lim, out, err);
    rtx_free(buf);
    return rc;
}

void rtx_onnx_free(struct rtx_onnx_model *m) {
    if (!m) return;
    rtx__onnx_folds_free(m);
    pthread_mutex_destroy(&m->fold_mu);
    for (int i = 0; i < m->n_inits; i++) rtx_tensor_unref(m->inits[i]);
    rtx_free(m->inits);
    rtx_free(m->init_names);
    rtx_free(m->inputs);
    rtx_free(m->outputs);
    rtx_free(m->order);
    rtx_free(m->defs);
    if (m->proto) onnx__model_proto__free_unpacked(m->proto, NULL);
    free(m->what);
    free(m->producer);
    rtx_free(m);
}

int rtx_onnx_n_inputs(const struct rtx_onnx_model *m) { return m->n_inputs; }
int rtx_onnx_n_outputs(const struct rtx_onnx_model *m) { return m->n_outputs; }
const struct rtx_onnx_io *rtx_onnx_input(const struct rtx_onnx_model *m, int i) {
    return i >= 0 && i < m->n_inputs ? &m->inputs[i] : NULL;
}
const struct rtx_onnx_io *rtx_onnx_output(const struct rtx_onnx_model *m, int i) {
    return i >= 0 && i < m->n_outputs ? &m->outputs[i] : NULL;
}
const char *rtx_onnx_graph_name(const struct rtx_onnx_model *m) {
    return m->proto->graph->name ? m->proto->graph->name : "";
}
int rtx_onnx_opset(const struct rtx_onnx_model *m) { return m->opset; }
const char *rtx_onnx_producer(const struct rtx_onnx_model *m) { return m->producer; }
int64_t rtx_onnx_weight_bytes(const struct rtx_onnx_model *m) { return m->weight_bytes; }
