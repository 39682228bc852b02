/*
 * test-onnx.c - the ONNX importer (onnx/) on models built here with the protobuf-c structs:
 * instantiation at two batch sizes with a dynamic batch and a shape sub-graph (the answers
 * computed by hand), weights folded once and shared by both instantiations, instantiation
 * from several threads at once, and the refusals: malformed bytes, opsets out of range,
 * unsupported ops (all listed), cycles and undefined inputs, data that does not match its
 * shape, external data outside the model's directory, inputs that contradict the model.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/backend-cpu.h"
#include "onnx/onnx.h"
#include "onnx/onnx.pb-c.h"
#include "runtime/runtime.h"
#include "tests/unit/test-util.h"

/* ---- building models (everything static or in a per-test arena, freed by mb_free) ---- */

#define MB_MAX 32
struct mb {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1];
    Onnx__NodeProto nodes[MB_MAX], *node_ptrs[MB_MAX];
    Onnx__TensorProto inits[MB_MAX], *init_ptrs[MB_MAX];
    Onnx__ValueInfoProto ins[4], outs[4], *in_ptrs[4], *out_ptrs[4];
    Onnx__TypeProto types[8];
    Onnx__TypeProto__Tensor ttypes[8];
    Onnx__TensorShapeProto shapes[8];
    Onnx__TensorShapeProto__Dimension dims[8][4], *dim_ptrs[8][4];
    Onnx__AttributeProto attrs[MB_MAX], *attr_ptrs[MB_MAX];
    int n_types, n_attrs;
};

static void mb_init(struct mb *b, int opset) {
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->model);
    onnx__graph_proto__init(&b->graph);
    onnx__operator_set_id_proto__init(&b->opset);
    b->opset.domain = "";
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsets[0] = &b->opset;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.has_ir_version = 1;
    b->model.ir_version = 8;
    b->model.graph = &b->graph;
    b->graph.name = "test";
    b->graph.node = b->node_ptrs;
    b->graph.initializer = b->init_ptrs;
    b->graph.input = b->in_ptrs;
    b->graph.output = b->out_ptrs;
}

/* A float tensor value info; dims < 0 are symbolic ("N"). */
static void mb_io(struct mb *b, bool input, const char *name, int ndim, const int64_t *dims) {
    int t = b->n_types++;
    Onnx__ValueInfoProto *vi = input ? &b->ins[b->graph.n_input] : &b->outs[b->graph.n_output];
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(&b->types[t]);
    onnx__type_proto__tensor__init(&b->ttypes[t]);
    onnx__tensor_shape_proto__init(&b->shapes[t]);
    for (int d = 0; d < ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = &b->dims[t][d];
        onnx__tensor_shape_proto__dimension__init(dm);
        if (dims[d] >= 0) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = dims[d];
        } else {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = "N";
        }
        b->dim_ptrs[t][d] = dm;
    }
    b->shapes[t].n_dim = (size_t)ndim;
    b->shapes[t].dim = b->dim_ptrs[t];
    b->ttypes[t].has_elem_type = 1;
    b->ttypes[t].elem_type = 1; /* FLOAT */
    b->ttypes[t].shape = &b->shapes[t];
    b->types[t].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    b->types[t].tensor_type = &b->ttypes[t];
    vi->name = (char *)name;
    vi->type = &b->types[t];
    if (input) b->in_ptrs[b->graph.n_input++] = vi;
    else b->out_ptrs[b->graph.n_output++] = vi;
}

/* An initializer of float (type 1) or int64 (type 7) data given as doubles. */
static Onnx__TensorProto *mb_init_tensor(struct mb *b, const char *name, int type, int ndim,
                                         int64_t *dims, const double *v, int64_t n) {
    Onnx__TensorProto *t = &b->inits[b->graph.n_initializer];
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)ndim;
    t->dims = dims;
    size_t esz = type == 1 ? 4 : 8;
    uint8_t *raw = calloc((size_t)n + 1, esz);
    for (int64_t i = 0; i < n; i++) {
        if (type == 1) ((float *)raw)[i] = (float)v[i];
        else ((int64_t *)raw)[i] = (int64_t)v[i];
    }
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = (size_t)n * esz;
    b->init_ptrs[b->graph.n_initializer++] = t;
    return t;
}

static Onnx__NodeProto *mb_node(struct mb *b, const char *op, const char *name, char **in,
                                int n_in, char **out, int n_out) {
    Onnx__NodeProto *n = &b->nodes[b->graph.n_node];
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    n->input = in;
    n->n_input = (size_t)n_in;
    n->output = out;
    n->n_output = (size_t)n_out;
    b->node_ptrs[b->graph.n_node++] = n;
    return n;
}

static void mb_attr_ints(struct mb *b, Onnx__NodeProto *n, const char *name, int64_t *v, int k) {
    Onnx__AttributeProto *a = &b->attrs[b->n_attrs];
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->ints = v;
    a->n_ints = (size_t)k;
    b->attr_ptrs[b->n_attrs++] = a;
    n->attribute = &b->attr_ptrs[b->n_attrs - 1];
    n->n_attribute = 1;
}

static void mb_free(struct mb *b) {
    for (size_t i = 0; i < b->graph.n_initializer; i++) free(b->inits[i].raw_data.data);
}

static uint8_t *mb_pack(struct mb *b, size_t *len) {
    *len = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = malloc(*len + 1);
    onnx__model_proto__pack(&b->model, buf);
    return buf;
}

static int load(struct mb *b, struct rtx_onnx_model **m, struct rtx_err *err) {
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    int rc = rtx_onnx_load_buffer(buf, len, NULL, "test.onnx", NULL, m, err);
    free(buf);
    return rc;
}

/* ---- the model of most tests: y = Reshape(x, [batch, -1]) @ Transpose(W) + b, with batch
 * taken from Shape(x) (a shape sub-graph), x [N, 2, 3], W [4, 6] (so Transpose folds) ---- */

static char *s_x[] = {"x"}, *s_shape[] = {"shape"}, *s_g_in[] = {"shape", "zero"},
            *s_batch[] = {"batch"}, *s_cat_in[] = {"batch", "minus1"}, *s_target[] = {"target"},
            *s_r_in[] = {"x", "target"}, *s_x2[] = {"x2"}, *s_w[] = {"W"}, *s_wt[] = {"Wt"},
            *s_mm_in[] = {"x2", "Wt"}, *s_mm[] = {"mm"}, *s_add_in[] = {"mm", "bias"},
            *s_y[] = {"y"};
static int64_t d_w[] = {4, 6}, d_b[] = {4}, d_one[] = {1}, perm[] = {1, 0};
static double w_vals[24], b_vals[4] = {0.5, -1, 2, 0}, zero_v[] = {0}, minus1_v[] = {-1};

static void linear_model(struct mb *b, int opset) {
    mb_init(b, opset);
    int64_t xd[] = {-1, 2, 3}, yd[] = {-1, 4};
    mb_io(b, true, "x", 3, xd);
    mb_io(b, false, "y", 2, yd);
    for (int i = 0; i < 24; i++) w_vals[i] = (i % 7) - 3;
    mb_init_tensor(b, "W", 1, 2, d_w, w_vals, 24);
    mb_init_tensor(b, "bias", 1, 1, d_b, b_vals, 4);
    mb_init_tensor(b, "zero", 7, 1, d_one, zero_v, 1);
    mb_init_tensor(b, "minus1", 7, 1, d_one, minus1_v, 1);
    mb_node(b, "Shape", "shape", s_x, 1, s_shape, 1);
    mb_node(b, "Gather", "gather", s_g_in, 2, s_batch, 1);
    Onnx__NodeProto *cat = mb_node(b, "Concat", "concat", s_cat_in, 2, s_target, 1);
    static int64_t axis0 = 0;
    Onnx__AttributeProto *a = &b->attrs[b->n_attrs];
    onnx__attribute_proto__init(a);
    a->name = "axis";
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = axis0;
    b->attr_ptrs[b->n_attrs++] = a;
    cat->attribute = &b->attr_ptrs[b->n_attrs - 1];
    cat->n_attribute = 1;
    mb_node(b, "Reshape", "reshape", s_r_in, 2, s_x2, 1);
    Onnx__NodeProto *t = mb_node(b, "Transpose", "wt", s_w, 1, s_wt, 1);
    mb_attr_ints(b, t, "perm", perm, 2);
    mb_node(b, "MatMul", "mm", s_mm_in, 2, s_mm, 1);
    mb_node(b, "Add", "add", s_add_in, 2, s_y, 1);
}

/* Runs graph g on the CPU with input x; returns output 0. */
static struct rtx_tensor *run_graph(const struct rtx_graph *g, struct rtx_tensor *x) {
    struct rtx_err err = {0};
    struct rtx_plan *p = NULL;
    ck_assert_msg(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err) == 0,
                  "%s", err.msg);
    struct rtx_backend *be = NULL;
    struct rtx_cpu_options opt = {.n_threads = 1};
    ck_assert_int_eq(rtx_backend_cpu_new(&opt, &be, &err), 0);
    struct rtx_tensor *out = NULL;
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &out, 1, NULL, NULL, &err) == 0, "%s", err.msg);
    rtx_backend_free(be);
    rtx_plan_free(p);
    return out;
}

static void check_linear(struct rtx_tensor *x, struct rtx_tensor *y) {
    int64_t n = x->dims[0];
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->dims[0], n);
    ck_assert_int_eq(y->dims[1], 4);
    for (int64_t r = 0; r < n; r++)
        for (int j = 0; j < 4; j++) {
            double want = b_vals[j];
            for (int k = 0; k < 6; k++) want += rtx_tensor_get(x, r * 6 + k) * w_vals[j * 6 + k];
            ck_assert_double_eq_tol(rtx_tensor_get(y, r * 4 + j), want, 1e-4);
        }
}

/* The weight constant (the folded transpose) of a graph. */
static const struct rtx_tensor *folded_weight(const struct rtx_graph *g) {
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].constant && g->values[i].ndim == 2 && g->values[i].dims[0] == 6)
            return g->values[i].constant;
    return NULL;
}

START_TEST(instantiates_per_batch_and_shares_folded_weights) {
    struct mb b;
    linear_model(&b, 17);
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(load(&b, &m, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rtx_onnx_n_inputs(m), 1);
    ck_assert_int_eq(rtx_onnx_input(m, 0)->dims[0], -1);
    ck_assert_str_eq(rtx_onnx_input(m, 0)->dim_params[0], "N");
    ck_assert_int_eq(rtx_onnx_opset(m), 17);
    struct rtx_graph *g[2] = {0};
    for (int k = 0; k < 2; k++) {
        int64_t xd[] = {k ? 5 : 1, 2, 3};
        struct rtx_tensor *x = tu_tensor_random(RTX_F32, 3, xd, -1, 1, 3u + (unsigned)k);
        ck_assert_msg(rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)&x, 1, NULL, &g[k],
                                           &err) == 0,
                      "%s", err.msg);
        /* shape sub-graph folded: no shape ops, only reshape, matmul, add */
        ck_assert_int_eq(g[k]->n_nodes, 3);
        struct rtx_tensor *y = run_graph(g[k], x);
        check_linear(x, y);
        rtx_tensor_unref(y);
        rtx_tensor_unref(x);
    }
    /* the transposed weight is computed once and shared */
    ck_assert_ptr_nonnull(folded_weight(g[0]));
    ck_assert_ptr_eq(folded_weight(g[0])->buf, folded_weight(g[1])->buf);
    rtx_graph_free(g[0]);
    rtx_graph_free(g[1]);
    rtx_onnx_free(m);
    mb_free(&b);
}
END_TEST

START_TEST(large_weight_folds_are_shared) {
    /* y = x @ Transpose(W), W [64, 32] (8 KiB, opset 18): the transpose is computed once */
    struct mb b;
    mb_init(&b, 18);
    int64_t xd[] = {-1, 32}, yd[] = {-1, 64};
    static int64_t wd[] = {64, 32};
    static double wv[64 * 32];
    for (int i = 0; i < 64 * 32; i++) wv[i] = (i % 13) * 0.25 - 1;
    mb_io(&b, true, "x", 2, xd);
    mb_io(&b, false, "y", 2, yd);
    mb_init_tensor(&b, "W", 1, 2, wd, wv, 64 * 32);
    static char *mmi[] = {"x", "Wt"};
    Onnx__NodeProto *t = mb_node(&b, "Transpose", "wt", s_w, 1, s_wt, 1);
    mb_attr_ints(&b, t, "perm", perm, 2);
    mb_node(&b, "MatMul", "mm", mmi, 2, s_y, 1);
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(load(&b, &m, &err) == 0, "%s", err.msg);
    struct rtx_graph *g[2] = {0};
    for (int k = 0; k < 2; k++) {
        int64_t d[] = {k + 1, 32};
        struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -1, 1, 9);
        ck_assert_msg(rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)&x, 1, NULL, &g[k],
                                           &err) == 0,
                      "%s", err.msg);
        struct rtx_tensor *y = run_graph(g[k], x);
        for (int j = 0; j < 64; j++) {
            double want = 0;
            for (int i = 0; i < 32; i++) want += rtx_tensor_get(x, (int64_t)k * 32 + i) * wv[j * 32 + i];
            ck_assert_double_eq_tol(rtx_tensor_get(y, (int64_t)k * 64 + j), want, 1e-3);
        }
        rtx_tensor_unref(y);
        rtx_tensor_unref(x);
    }
    const struct rtx_tensor *w0 = NULL, *w1 = NULL;
    for (int i = 0; i < g[0]->n_values; i++)
        if (g[0]->values[i].constant) w0 = g[0]->values[i].constant;
    for (int i = 0; i < g[1]->n_values; i++)
        if (g[1]->values[i].constant) w1 = g[1]->values[i].constant;
    ck_assert_ptr_nonnull(w0);
    ck_assert_ptr_eq(w0->buf, w1->buf);
    rtx_graph_free(g[0]);
    rtx_graph_free(g[1]);
    rtx_onnx_free(m);
    mb_free(&b);
}
END_TEST

struct worker {
    const struct rtx_onnx_model *m;
    int batch;
    int ok;
};

static void *instantiate_many(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < 20; i++) {
        int64_t xd[] = {w->batch, 2, 3};
        struct rtx_tensor *x = NULL;
        struct rtx_graph *g = NULL;
        if (rtx_tensor_new(RTX_F32, 3, xd, &x, NULL)) return NULL;
        if (rtx_onnx_instantiate(w->m, (const struct rtx_tensor *const *)&x, 1, NULL, &g, NULL) ==
            0)
            w->ok++;
        rtx_graph_free(g);
        rtx_tensor_unref(x);
    }
    return NULL;
}

START_TEST(instantiates_from_several_threads) {
    struct mb b;
    linear_model(&b, 13);
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(load(&b, &m, &err) == 0, "%s", err.msg);
    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.m = m, .batch = 1 + i % 2};
        pthread_create(&t[i], NULL, instantiate_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(w[i].ok, 20);
    }
    rtx_onnx_free(m);
    mb_free(&b);
}
END_TEST

START_TEST(wrong_inputs_are_named) {
    struct mb b;
    linear_model(&b, 17);
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(load(&b, &m, &err) == 0, "%s", err.msg);
    struct rtx_graph *g = NULL;
    int64_t bad[] = {2, 3, 3};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 3, bad, NULL);
    ck_assert_int_eq(rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)&x, 1, NULL, &g,
                                          &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "input 'x' dimension 1 is 3, the model declares 2"), "%s",
                  err.msg);
    rtx_tensor_unref(x);
    x = tu_tensor(RTX_I32, 3, (int64_t[]){1, 2, 3}, NULL);
    ck_assert_int_eq(rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)&x, 1, NULL, &g,
                                          &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "is i32, the model declares f32"), "%s", err.msg);
    ck_assert_int_eq(rtx_onnx_instantiate(m, NULL, 0, NULL, &g, &err), RTX_EINVAL);
    ck_assert_ptr_null(g);
    rtx_tensor_unref(x);
    rtx_onnx_free(m);
    mb_free(&b);
}
END_TEST

static void expect_load_error(struct mb *b, int code, const char *needle) {
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(load(b, &m, &err), code);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, needle), "'%s' not in '%s'", needle, err.msg);
}

START_TEST(malformed_and_unsupported_models_are_refused) {
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
    ck_assert_int_eq(rtx_onnx_load_buffer(garbage, sizeof garbage, NULL, "g.onnx", NULL, &m, &err),
                     RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "g.onnx: not an ONNX model"), "%s", err.msg);
    /* truncated */
    struct mb b;
    linear_model(&b, 17);
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    ck_assert_int_eq(rtx_onnx_load_buffer(buf, len / 2, NULL, "t.onnx", NULL, &m, &err),
                     RTX_EFORMAT);
    free(buf);
    /* opsets */
    b.opset.version = 12;
    expect_load_error(&b, RTX_EUNSUPPORTED, "opset 12 is not supported (rtxd reads ai.onnx opsets 13 to 23");
    b.opset.version = 24;
    expect_load_error(&b, RTX_EUNSUPPORTED, "opset 24 is not supported");
    b.opset.version = 17;
    /* unsupported ops: all listed */
    b.nodes[0].op_type = "Loop";
    b.nodes[4].op_type = "Einsum";
    expect_load_error(&b, RTX_EUNSUPPORTED,
                      "2 nodes with ops rtxd does not support: Loop (node 'shape', opset 17), "
                      "Einsum (node 'wt', opset 17)");
    b.nodes[0].op_type = "Shape";
    b.nodes[4].op_type = "Transpose";
    /* an input nothing defines */
    static char *undefined[] = {"nowhere", "Wt"};
    b.nodes[5].input = undefined;
    expect_load_error(&b, RTX_EFORMAT, "node 'mm' (MatMul) reads 'nowhere', which no node");
    /* a cycle: mm reads y, which add (reading mm) writes */
    static char *cyc[] = {"y", "Wt"};
    b.nodes[5].input = cyc;
    expect_load_error(&b, RTX_EFORMAT, "is on a cycle");
    b.nodes[5].input = s_mm_in;
    /* data that does not match its shape */
    b.inits[1].raw_data.len = 12;
    expect_load_error(&b, RTX_EFORMAT, "initializer 'bias': raw_data holds 12 bytes");
    b.inits[1].raw_data.len = 16;
    /* an unsupported element type */
    b.inits[1].data_type = 11;
    expect_load_error(&b, RTX_EUNSUPPORTED, "element type DOUBLE (11) is not supported");
    b.inits[1].data_type = 1;
    /* huge dims */
    static int64_t huge[] = {1000000, 1000000, 1000};
    b.inits[1].dims = huge;
    b.inits[1].n_dims = 3;
    expect_load_error(&b, RTX_ELIMIT, "initializer 'bias'");
    b.inits[1].dims = d_b;
    b.inits[1].n_dims = 1;
    ck_assert_msg(load(&b, &m, &err) == 0, "%s", err.msg);
    rtx_onnx_free(m);
    mb_free(&b);
}
END_TEST

START_TEST(external_data_stays_inside_the_model_directory) {
    char dir[] = "/tmp/rtx-onnx-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512], data[512];
    snprintf(data, sizeof data, "%s/bias.bin", dir);
    FILE *f = fopen(data, "wb");
    float bias[4] = {0.5f, -1, 2, 0};
    fwrite(bias, sizeof bias, 1, f);
    fclose(f);
    struct mb b;
    linear_model(&b, 17);
    Onnx__TensorProto *t = &b.inits[1];
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->raw_data.len = 0;
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    Onnx__StringStringEntryProto loc, *locs[1] = {&loc};
    onnx__string_string_entry_proto__init(&loc);
    loc.key = "location";
    loc.value = "bias.bin";
    t->external_data = locs;
    t->n_external_data = 1;
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    f = fopen(path, "wb");
    fwrite(buf, len, 1, f);
    fclose(f);
    struct rtx_onnx_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_onnx_load_file(path, NULL, &m, &err) == 0, "%s", err.msg);
    int64_t xd[] = {2, 2, 3};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 3, xd, -1, 1, 5);
    struct rtx_graph *g = NULL;
    ck_assert_msg(rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)&x, 1, NULL, &g, &err) ==
                      0,
                  "%s", err.msg);
    struct rtx_tensor *y = run_graph(g, x);
    check_linear(x, y);
    rtx_tensor_unref(y);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_onnx_free(m);
    /* from bytes: refused */
    ck_assert_int_eq(rtx_onnx_load_buffer(buf, len, NULL, "job", NULL, &m, &err),
                     RTX_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "external data is not accepted"), "%s", err.msg);
    free(buf);
    /* outside the directory, and missing */
    const char *bad[] = {"../bias.bin", "/etc/passwd", "a/../../x", "missing.bin"};
    for (int i = 0; i < 4; i++) {
        loc.value = (char *)bad[i];
        buf = mb_pack(&b, &len);
        f = fopen(path, "wb");
        fwrite(buf, len, 1, f);
        fclose(f);
        free(buf);
        ck_assert_int_lt(rtx_onnx_load_file(path, NULL, &m, &err), 0);
        ck_assert_msg(strstr(err.msg, i < 3 ? "outside the model's directory" : "missing.bin"),
                      "%s", err.msg);
    }
    unlink(path);
    unlink(data);
    rmdir(dir);
    t->external_data = NULL;
    t->n_external_data = 0;
    mb_free(&b);
}
END_TEST

START_TEST(supported_ops_are_listed_in_order) {
    const char *const *names;
    int n = rtx_onnx_supported_ops(&names);
    ck_assert_int_ge(n, 55);
    for (int i = 1; i < n; i++) ck_assert_int_lt(strcmp(names[i - 1], names[i]), 0);
}
END_TEST

Suite *rtx_onnx_suite(void) {
    Suite *s = suite_create("onnx");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, instantiates_per_batch_and_shares_folded_weights);
    tcase_add_test(tc, large_weight_folds_are_shared);
    tcase_add_test(tc, instantiates_from_several_threads);
    tcase_add_test(tc, wrong_inputs_are_named);
    tcase_add_test(tc, malformed_and_unsupported_models_are_refused);
    tcase_add_test(tc, external_data_stays_inside_the_model_directory);
    tcase_add_test(tc, supported_ops_are_listed_in_order);
    suite_add_tcase(s, tc);
    return s;
}
