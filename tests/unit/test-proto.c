/*
 * test-proto.c - the graph wire format (runtime/graph-proto.c): lossless round trips,
 * malformed input, graph errors seen while decoding, limits, files and allocation failures.
 * Hand-made malformed messages are built with the protobuf-c structs of build/gen.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rtx/v1/graph.pb-c.h"
#include "runtime/runtime.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

/* Asserts that a builder call succeeded (err must be in scope). */
#define CHECK(call)                                                                               \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        ck_assert_msg(rc_ >= 0, "%s: %d %s", #call, rc_, err.msg);                                \
    } while (0)

/* A graph that uses every attribute type, every initializer dtype (with rank 0 and empty
 * tensors among them), inputs with -1 dims and rank 0, an omitted optional input, a tensor
 * attribute and an output that is a graph input. It need not be valid: encode does not
 * validate. */
static struct rtx_graph *make_rich_graph(void) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    CHECK(rtx_graph_new("rich graph \xc3\xa9", &g, &err));
    CHECK(rtx_graph_add_input(g, "x", RTX_F32, 3, (const int64_t[]){-1, 4, -1}, &err));
    CHECK(rtx_graph_add_input(g, "ids", RTX_I64, 2, (const int64_t[]){2, -1}, &err));
    CHECK(rtx_graph_add_input(g, "scalar", RTX_F16, 0, NULL, &err));
    for (int dt = 0; dt < RTX_DTYPE_COUNT; dt++) {
        char name[32];
        snprintf(name, sizeof name, "w_%s", rtx_dtype_name(dt));
        struct rtx_tensor *t =
            tu_tensor_random(dt, 2, (const int64_t[]){3, 5}, -3, 3, (unsigned)dt + 1);
        CHECK(rtx_graph_add_initializer(g, name, t, &err));
        rtx_tensor_unref(t);
    }
    struct rtx_tensor *t0 = tu_tensor(RTX_I32, 0, NULL, (const double[]){-7});
    CHECK(rtx_graph_add_initializer(g, "rank0", t0, &err));
    rtx_tensor_unref(t0);
    struct rtx_tensor *te = tu_tensor(RTX_F32, 3, (const int64_t[]){2, 0, 3}, NULL);
    CHECK(rtx_graph_add_initializer(g, "empty", te, &err));
    rtx_tensor_unref(te);

    int n = rtx_graph_add_node(g, "layer_norm", "ln", (const char *[]){"x", "", "w_f32"}, 3,
                               (const char *[]){"ln_out"}, 1, &err);
    ck_assert_int_ge(n, 0);
    CHECK(rtx_graph_set_attr_int(g, n, "axis", -1, &err));
    CHECK(rtx_graph_set_attr_float(g, n, "epsilon", 1e-5, &err));
    n = rtx_graph_add_node(g, "constant", "", NULL, 0, (const char *[]){"c"}, 1, &err);
    ck_assert_int_ge(n, 0);
    struct rtx_tensor *tv = tu_tensor_random(RTX_BF16, 1, (const int64_t[]){4}, -1, 1, 9);
    CHECK(rtx_graph_set_attr_tensor(g, n, "value", tv, &err));
    rtx_tensor_unref(tv);
    CHECK(rtx_graph_set_attr_string(g, n, "note", "str \"q\"", &err));
    CHECK(rtx_graph_set_attr_ints(g, n, "ints", (const int64_t[]){0, -1, INT64_MAX, INT64_MIN}, 4,
                                  &err));
    CHECK(
        rtx_graph_set_attr_floats(g, n, "floats", (const double[]){0.5, -1e300, 1e-300}, 3, &err));
    CHECK(rtx_graph_set_attr_ints(g, n, "no_ints", NULL, 0, &err));
    CHECK(rtx_graph_set_attr_floats(g, n, "no_floats", NULL, 0, &err));
    CHECK(rtx_graph_set_attr_string(g, n, "empty_str", "", &err));
    n = rtx_graph_add_node(g, "gemm", "fc", (const char *[]){"ln_out", "w_f32", ""}, 3,
                           (const char *[]){"fc_out"}, 1, &err);
    ck_assert_int_ge(n, 0);
    CHECK(rtx_graph_set_attr_float(g, n, "alpha", 0.1, &err));
    CHECK(rtx_graph_set_attr_int(g, n, "trans_b", 1, &err));
    CHECK(rtx_graph_add_output(g, "fc_out", &err));
    CHECK(rtx_graph_add_output(g, "c", &err));
    CHECK(rtx_graph_add_output(g, "ids", &err));
    return g;
}

static void assert_tensors_equal(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int i = 0; i < a->ndim; i++)
        ck_assert_int_eq(a->dims[i], b->dims[i]);
    ck_assert_uint_eq(rtx_tensor_nbytes(a), rtx_tensor_nbytes(b));
    if (rtx_tensor_nbytes(a))
        ck_assert_mem_eq(rtx_tensor_data(a), rtx_tensor_data(b), rtx_tensor_nbytes(a));
}

/* Same values (by name), nodes, attributes, inputs and outputs. */
static void assert_graphs_equal(const struct rtx_graph *a, const struct rtx_graph *b) {
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->n_values, b->n_values);
    ck_assert_int_eq(a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_values; i++) {
        const struct rtx_value *va = &a->values[i];
        int j = rtx_graph_find_value(b, va->name);
        ck_assert_msg(j >= 0, "value %s missing", va->name);
        const struct rtx_value *vb = &b->values[j];
        ck_assert_int_eq(va->is_input, vb->is_input);
        ck_assert_int_eq(va->producer, vb->producer);
        ck_assert_int_eq(va->constant != NULL, vb->constant != NULL);
        if (va->constant) assert_tensors_equal(va->constant, vb->constant);
        if (va->is_input || va->constant) {
            ck_assert_int_eq(va->dtype, vb->dtype);
            ck_assert_int_eq(va->ndim, vb->ndim);
            for (int d = 0; d < va->ndim; d++)
                ck_assert_int_eq(va->dims[d], vb->dims[d]);
        }
    }
    ck_assert_int_eq(a->n_inputs, b->n_inputs);
    for (int i = 0; i < a->n_inputs; i++)
        ck_assert_str_eq(a->values[a->inputs[i]].name, b->values[b->inputs[i]].name);
    ck_assert_int_eq(a->n_outputs, b->n_outputs);
    for (int i = 0; i < a->n_outputs; i++)
        ck_assert_str_eq(a->values[a->outputs[i]].name, b->values[b->outputs[i]].name);
    for (int i = 0; i < a->n_nodes; i++) {
        const struct rtx_node *na = &a->nodes[i], *nb = &b->nodes[i];
        ck_assert_int_eq(na->op, nb->op);
        ck_assert_str_eq(na->name, nb->name);
        ck_assert_int_eq(na->n_inputs, nb->n_inputs);
        for (int k = 0; k < na->n_inputs; k++) {
            if (na->inputs[k] < 0) {
                ck_assert_int_lt(nb->inputs[k], 0);
                continue;
            }
            ck_assert_str_eq(a->values[na->inputs[k]].name, b->values[nb->inputs[k]].name);
        }
        ck_assert_int_eq(na->n_outputs, nb->n_outputs);
        for (int k = 0; k < na->n_outputs; k++)
            ck_assert_str_eq(a->values[na->outputs[k]].name, b->values[nb->outputs[k]].name);
        ck_assert_int_eq(na->n_attrs, nb->n_attrs);
        for (int k = 0; k < na->n_attrs; k++) {
            const struct rtx_attr *x = &na->attrs[k], *y = &nb->attrs[k];
            ck_assert_str_eq(x->name, y->name);
            ck_assert_int_eq(x->type, y->type);
            switch (x->type) {
            case RTX_ATTR_INT: ck_assert_int_eq(x->i, y->i); break;
            case RTX_ATTR_FLOAT: ck_assert_mem_eq(&x->f, &y->f, sizeof x->f); break;
            case RTX_ATTR_STRING: ck_assert_str_eq(x->s, y->s); break;
            case RTX_ATTR_INTS:
                ck_assert_int_eq(x->n, y->n);
                if (x->n) ck_assert_mem_eq(x->ints, y->ints, sizeof *x->ints * (size_t)x->n);
                break;
            case RTX_ATTR_FLOATS:
                ck_assert_int_eq(x->n, y->n);
                if (x->n) ck_assert_mem_eq(x->floats, y->floats, sizeof *x->floats * (size_t)x->n);
                break;
            case RTX_ATTR_TENSOR: assert_tensors_equal(x->t, y->t); break;
            default: ck_abort_msg("bad attribute type");
            }
        }
    }
}

/* Encodes with every field set as the arguments say. */
static void *pack_graph(const Rtx__V1__Graph *m, size_t *len) {
    *len = rtx__v1__graph__get_packed_size(m);
    void *buf = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(buf);
    rtx__v1__graph__pack(m, buf);
    return buf;
}

/* Decodes, expecting failure with `code` and every needle (NULL-terminated) in the message. */
static void expect_decode_error(const void *buf, size_t len, const struct rtx_limits *lim,
                                int code, const char *const *needles) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_decode(buf, len, lim, &g, &err);
    ck_assert_msg(rc == code, "rc %d (%s), want %d; message: %s", rc, rtx_strerror(rc), code,
                  err.msg);
    ck_assert_ptr_null(g);
    for (int i = 0; needles && needles[i]; i++)
        ck_assert_msg(strstr(err.msg, needles[i]), "'%s' not in '%s'", needles[i], err.msg);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* One-node message: input x f32[2], node "relu" x -> y, output y, plus what a test adds. */
struct msg {
    Rtx__V1__Graph g;
    Rtx__V1__ValueInfo in, out;
    Rtx__V1__ValueInfo *ins[1], *outs[1];
    Rtx__V1__Node node;
    Rtx__V1__Node *nodes[1];
    char *node_in[1], *node_out[1];
    int64_t in_dims[1];
    Rtx__V1__Tensor init;
    Rtx__V1__Tensor *inits[1];
    Rtx__V1__Attribute attr;
    Rtx__V1__Attribute *attrs[1];
};

static void msg_init(struct msg *m) {
    memset(m, 0, sizeof *m);
    rtx__v1__graph__init(&m->g);
    rtx__v1__value_info__init(&m->in);
    rtx__v1__value_info__init(&m->out);
    rtx__v1__node__init(&m->node);
    rtx__v1__tensor__init(&m->init);
    rtx__v1__attribute__init(&m->attr);
    m->g.name = "g";
    m->g.ir_version = 1;
    m->in.name = "x";
    m->in.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    m->in.has_shape = 1;
    m->in_dims[0] = 2;
    m->in.n_dims = 1;
    m->in.dims = m->in_dims;
    m->ins[0] = &m->in;
    m->g.n_inputs = 1;
    m->g.inputs = m->ins;
    m->out.name = "y";
    m->outs[0] = &m->out;
    m->g.n_outputs = 1;
    m->g.outputs = m->outs;
    m->node.name = "act";
    m->node.op = "relu";
    m->node_in[0] = "x";
    m->node_out[0] = "y";
    m->node.n_inputs = 1;
    m->node.inputs = m->node_in;
    m->node.n_outputs = 1;
    m->node.outputs = m->node_out;
    m->nodes[0] = &m->node;
    m->g.n_nodes = 1;
    m->g.nodes = m->nodes;
    m->inits[0] = &m->init;
    m->attrs[0] = &m->attr;
}

/* Adds the initializer m->init (the test fills it). */
static void msg_use_init(struct msg *m) {
    m->g.n_initializers = 1;
    m->g.initializers = m->inits;
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

START_TEST(proto_round_trip_simple) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    ck_assert_int_eq(rtx_graph_new("simple", &g, &err), 0);
    int64_t dims[2] = {-1, 4};
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, dims, &err), 0);
    const char *in[] = {"x"};
    const char *out[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "relu", "r", in, 1, out, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);

    void *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    ck_assert_int_eq(rtx_graph_encode(g, &buf, &len, &err), 0);
    struct rtx_graph *g2 = NULL;
    struct rtx_limits lim = rtx_limits_default();
    ck_assert_msg(rtx_graph_decode(buf, len, &lim, &g2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rtx_graph_encode(g2, &buf2, &len2, &err), 0);
    ck_assert_uint_eq(len, len2);
    ck_assert_mem_eq(buf, buf2, len);
    assert_graphs_equal(g, g2);
    rtx_free(buf);
    rtx_free(buf2);
    rtx_graph_free(g);
    rtx_graph_free(g2);
}
END_TEST

START_TEST(proto_round_trip_every_attr_and_dtype) {
    struct rtx_err err = {0};
    struct rtx_graph *g = make_rich_graph();
    void *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    ck_assert_msg(rtx_graph_encode(g, &buf, &len, &err) == 0, "%s", err.msg);
    struct rtx_graph *g2 = NULL;
    ck_assert_msg(rtx_graph_decode(buf, len, NULL, &g2, &err) == 0, "%s", err.msg);
    assert_graphs_equal(g, g2);
    ck_assert_msg(rtx_graph_encode(g2, &buf2, &len2, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(len, len2);
    ck_assert_mem_eq(buf, buf2, len);

    /* The wire message itself: ir_version 1, the omitted input as "", outputs with names
     * and, where the value is known (a graph input), dtype and shape. */
    Rtx__V1__Graph *m = rtx__v1__graph__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(m->ir_version, 1);
    ck_assert_uint_eq(m->n_nodes, 3);
    ck_assert_str_eq(m->nodes[0]->inputs[1], "");
    ck_assert_str_eq(m->nodes[2]->inputs[2], "");
    ck_assert_uint_eq(m->n_outputs, 3);
    ck_assert_str_eq(m->outputs[0]->name, "fc_out");
    ck_assert(!m->outputs[0]->has_shape);
    ck_assert_str_eq(m->outputs[2]->name, "ids");
    ck_assert(m->outputs[2]->has_shape);
    ck_assert_int_eq(m->outputs[2]->dtype, RTX__V1__DATA_TYPE__DATA_TYPE_I64);
    ck_assert_uint_eq(m->outputs[2]->n_dims, 2);
    ck_assert_int_eq(m->outputs[2]->dims[1], -1);
    ck_assert_uint_eq(m->n_initializers, RTX_DTYPE_COUNT + 2);
    ck_assert(m->inputs[2]->has_shape);
    ck_assert_uint_eq(m->inputs[2]->n_dims, 0);
    rtx__v1__graph__free_unpacked(m, NULL);

    rtx_free(buf);
    rtx_free(buf2);
    rtx_graph_free(g);
    rtx_graph_free(g2);
}
END_TEST

/* A non-contiguous initializer is written in row-major order. */
START_TEST(proto_encodes_non_contiguous_initializer) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    CHECK(rtx_graph_new("t", &g, &err));
    struct rtx_tensor *t =
        tu_tensor(RTX_F32, 2, (const int64_t[]){2, 3}, (const double[]){0, 1, 2, 3, 4, 5});
    struct rtx_tensor *tt = NULL;
    CHECK(rtx_tensor_permute(t, (const int[]){1, 0}, &tt, &err));
    CHECK(rtx_graph_add_initializer(g, "w", tt, &err));
    void *buf = NULL;
    size_t len = 0;
    ck_assert_msg(rtx_graph_encode(g, &buf, &len, &err) == 0, "%s", err.msg);
    struct rtx_graph *g2 = NULL;
    ck_assert_msg(rtx_graph_decode(buf, len, NULL, &g2, &err) == 0, "%s", err.msg);
    const struct rtx_tensor *w = g2->values[rtx_graph_find_value(g2, "w")].constant;
    tu_assert_shape(w, RTX_F32, 2, (const int64_t[]){3, 2});
    tu_assert_close(w, (const double[]){0, 3, 1, 4, 2, 5}, 0, 0);
    rtx_free(buf);
    rtx_tensor_unref(t);
    rtx_tensor_unref(tt);
    rtx_graph_free(g);
    rtx_graph_free(g2);
}
END_TEST

START_TEST(proto_rejects_truncated_and_garbage) {
    struct rtx_err err = {0};
    struct rtx_graph *g = make_rich_graph();
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(rtx_graph_encode(g, &buf, &len, &err), 0);
    rtx_graph_free(g);
    /* the last field is ir_version (tag and value): cutting its value is malformed */
    expect_decode_error(buf, len - 1, NULL, RTX_EFORMAT, NEEDLES("malformed"));
    /* every prefix decodes or fails cleanly (no crash, no leak); most are malformed */
    int malformed = 0;
    for (size_t n = 0; n < len; n++) {
        struct rtx_graph *h = NULL;
        int rc = rtx_graph_decode(buf, n, NULL, &h, &err);
        ck_assert_msg(rc == 0 || rc == RTX_EFORMAT || rc == RTX_EGRAPH, "n %zu: %d %s", n, rc,
                      err.msg);
        malformed += rc == RTX_EFORMAT;
        rtx_graph_free(h);
    }
    ck_assert_int_gt(malformed, (int)(len / 2));
    rtx_free(buf);

    static const uint8_t ff[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    expect_decode_error(ff, sizeof ff, NULL, RTX_EFORMAT, NEEDLES("malformed"));
    /* a length-delimited field (name) claiming more bytes than there are */
    static const uint8_t long_name[] = {0x0a, 0x40, 'a', 'b'};
    expect_decode_error(long_name, sizeof long_name, NULL, RTX_EFORMAT, NULL);
    /* random bytes: a fixed stream known to be malformed ... */
    uint8_t rnd[256];
    uint64_t s = 0x0123456789abcdefull;
    for (size_t i = 0; i < sizeof rnd; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        rnd[i] = (uint8_t)(s >> 24);
    }
    expect_decode_error(rnd, sizeof rnd, NULL, RTX_EFORMAT, NULL);
    /* ... and many more that must only fail cleanly */
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = (size_t)(s % sizeof rnd);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            rnd[i] = (uint8_t)s;
        }
        struct rtx_graph *h = NULL;
        int rc = rtx_graph_decode(rnd, n, NULL, &h, &err);
        ck_assert(rc == 0 || rc == RTX_EFORMAT || rc == RTX_EGRAPH || rc == RTX_EUNSUPPORTED ||
                  rc == RTX_ELIMIT);
        ck_assert((rc == 0) == (h != NULL));
        rtx_graph_free(h);
    }
    /* an empty message is an empty graph */
    struct rtx_graph *h = NULL;
    ck_assert_int_eq(rtx_graph_decode(NULL, 0, NULL, &h, &err), 0);
    ck_assert_int_eq(h->n_nodes, 0);
    rtx_graph_free(h);
}
END_TEST

START_TEST(proto_rejects_bad_tensors) {
    struct msg m;
    float data[6] = {0};
    int64_t dims[2] = {2, 3};
    size_t len;
    void *buf;

    /* data one element short */
    msg_init(&m);
    msg_use_init(&m);
    m.init.name = "weights";
    m.init.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    m.init.n_dims = 2;
    m.init.dims = dims;
    m.init.data.data = (uint8_t *)data;
    m.init.data.len = 20;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH,
                        NEEDLES("initializer weights", "20 bytes", "24"));
    free(buf);

    /* bad dtype enums: unspecified and out of range */
    m.init.data.len = 24;
    m.init.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_UNSPECIFIED;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("weights", "dtype 0"));
    free(buf);
    m.init.dtype = (Rtx__V1__DataType)42;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("weights", "dtype 42"));
    free(buf);

    /* negative dimension */
    m.init.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    int64_t neg[2] = {-2, -3};
    m.init.dims = neg;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("weights", "negative"));
    free(buf);

    /* rank above RTX_MAX_DIMS */
    int64_t ones[RTX_MAX_DIMS + 1];
    for (int i = 0; i <= RTX_MAX_DIMS; i++)
        ones[i] = 1;
    m.init.dims = ones;
    m.init.n_dims = RTX_MAX_DIMS + 1;
    m.init.data.len = 4;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("weights", "rank 9"));
    free(buf);

    /* a tensor attribute with the wrong size names node and attribute */
    msg_init(&m);
    m.node.n_attrs = 1;
    m.node.attrs = m.attrs;
    m.attr.name = "value";
    m.attr.value_case = RTX__V1__ATTRIBUTE__VALUE_T;
    m.attr.t = &m.init;
    m.init.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_I64;
    m.init.n_dims = 2;
    m.init.dims = dims;
    m.init.data.data = (uint8_t *)data;
    m.init.data.len = 24;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH,
                        NEEDLES("node 0 'act'", "attribute value", "48"));
    free(buf);
}
END_TEST

START_TEST(proto_rejects_bad_nodes_and_inputs) {
    struct msg m;
    size_t len;
    void *buf;

    msg_init(&m);
    m.node.op = "frobnicate";
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("node 0", "act", "frobnicate"));
    free(buf);

    /* an attribute without a value */
    msg_init(&m);
    m.node.n_attrs = 1;
    m.node.attrs = m.attrs;
    m.attr.name = "alpha";
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("node 0 'act'", "alpha"));
    free(buf);

    /* an input without a shape */
    msg_init(&m);
    m.in.has_shape = 0;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("input x: shape required"));
    free(buf);

    /* an input with a bad dtype or dimension */
    msg_init(&m);
    m.in.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_UNSPECIFIED;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("input x", "dtype"));
    free(buf);
    msg_init(&m);
    m.in_dims[0] = -5;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EGRAPH, NEEDLES("input x", "-5"));
    free(buf);

    /* a newer ir_version */
    msg_init(&m);
    m.g.ir_version = 2;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_EUNSUPPORTED, NEEDLES("ir_version 2"));
    free(buf);

    /* and the untouched message decodes (ir_version 0, as a client that never set it) */
    msg_init(&m);
    m.g.ir_version = 0;
    buf = pack_graph(&m.g, &len);
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_graph_decode(buf, len, NULL, &g, &err) == 0, "%s", err.msg);
    struct rtx_limits lim = rtx_limits_default();
    ck_assert_msg(rtx_graph_validate(g, &lim, &err) == 0, "%s", err.msg);
    rtx_graph_free(g);
    free(buf);
}
END_TEST

START_TEST(proto_enforces_limits) {
    struct msg m;
    float data[6] = {0};
    int64_t dims[2] = {2, 3};
    size_t len;
    void *buf;
    struct rtx_limits lim = rtx_limits_default();

    msg_init(&m);
    msg_use_init(&m);
    m.init.name = "w";
    m.init.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    m.init.n_dims = 2;
    m.init.dims = dims;
    m.init.data.data = (uint8_t *)data;
    m.init.data.len = sizeof data;
    buf = pack_graph(&m.g, &len);

    lim.max_elements = 5;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("initializer w", "5 elements"));
    lim = rtx_limits_default();
    lim.max_tensor_bytes = 20;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("initializer w", "24 bytes"));
    lim = rtx_limits_default();
    lim.max_total_bytes = 23;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("total"));
    lim = rtx_limits_default();
    lim.max_nodes = 0;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("nodes"));
    lim = rtx_limits_default();
    lim.max_values = 2;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("values"));
    lim = rtx_limits_default();
    lim.max_dims = 1;
    expect_decode_error(buf, len, &lim, RTX_ELIMIT, NEEDLES("rank 2"));
    free(buf);

    /* dims whose product overflows int64 */
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    m.init.dims = huge;
    m.init.n_dims = 3;
    buf = pack_graph(&m.g, &len);
    expect_decode_error(buf, len, NULL, RTX_ELIMIT, NEEDLES("initializer w"));
    free(buf);
}
END_TEST

START_TEST(proto_file_round_trip_and_errors) {
    struct rtx_err err = {0};
    struct rtx_graph *g = make_rich_graph();
    char path[] = "/tmp/rtx-proto-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(rtx_graph_save_file(g, path, &err) == 0, "%s", err.msg);
    struct rtx_graph *g2 = NULL;
    ck_assert_msg(rtx_graph_load_file(path, NULL, &g2, &err) == 0, "%s", err.msg);
    assert_graphs_equal(g, g2);
    rtx_graph_free(g2);

    /* a corrupt file names the path */
    FILE *f = fopen(path, "wb");
    fputs("\xff\xff\xff garbage", f);
    fclose(f);
    ck_assert_int_eq(rtx_graph_load_file(path, NULL, &g2, &err), RTX_EFORMAT);
    ck_assert_ptr_null(g2);
    ck_assert_msg(strstr(err.msg, path), "%s", err.msg);
    unlink(path);

    int rc = rtx_graph_load_file("/nonexistent/g.rtxg", NULL, &g2, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err.msg, "/nonexistent/g.rtxg"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "No such file"), "%s", err.msg);
    rc = rtx_graph_load_file("/tmp", NULL, &g2, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err.msg, "/tmp"), "%s", err.msg);
    rc = rtx_graph_save_file(g, "/nonexistent/g.rtxg", &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err.msg, "/nonexistent/g.rtxg"), "%s", err.msg);
    rtx_graph_free(g);
}
END_TEST

/* Every allocation failure in decode and encode gives RTX_ENOMEM and leaks nothing (run
 * under ASan with CK_FORK=no to see leaks). */
START_TEST(proto_out_of_memory) {
    struct rtx_err err = {0};
    struct rtx_graph *g = make_rich_graph();
    void *ref = NULL;
    size_t ref_len = 0;
    ck_assert_int_eq(rtx_graph_encode(g, &ref, &ref_len, &err), 0);

    int rc = -1;
    long n;
    for (n = 1; rc != 0; n++) {
        void *buf = NULL;
        size_t len = 0;
        rtx_alloc_fail_after(n);
        rc = rtx_graph_encode(g, &buf, &len, &err);
        rtx_alloc_fail_after(0);
        if (rc != 0) {
            ck_assert_msg(rc == RTX_ENOMEM, "encode n %ld: %d %s", n, rc, err.msg);
            ck_assert_ptr_null(buf);
        } else {
            ck_assert_uint_eq(len, ref_len);
            ck_assert_mem_eq(buf, ref, len);
            rtx_free(buf);
        }
    }
    ck_assert_int_gt(n, 3);

    rc = -1;
    for (n = 1; rc != 0; n++) {
        struct rtx_graph *h = NULL;
        rtx_alloc_fail_after(n);
        rc = rtx_graph_decode(ref, ref_len, NULL, &h, &err);
        rtx_alloc_fail_after(0);
        if (rc != 0) {
            ck_assert_msg(rc == RTX_ENOMEM, "decode n %ld: %d %s", n, rc, err.msg);
            ck_assert_ptr_null(h);
        } else {
            assert_graphs_equal(g, h);
            rtx_graph_free(h);
        }
    }
    ck_assert_int_gt(n, 10);
    rtx_free(ref);
    rtx_graph_free(g);
}
END_TEST

Suite *rtx_proto_suite(void) {
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, proto_round_trip_simple);
    tcase_add_test(tc, proto_round_trip_every_attr_and_dtype);
    tcase_add_test(tc, proto_encodes_non_contiguous_initializer);
    tcase_add_test(tc, proto_rejects_truncated_and_garbage);
    tcase_add_test(tc, proto_rejects_bad_tensors);
    tcase_add_test(tc, proto_rejects_bad_nodes_and_inputs);
    tcase_add_test(tc, proto_enforces_limits);
    tcase_add_test(tc, proto_file_round_trip_and_errors);
    tcase_add_test(tc, proto_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
