/*
 * onnx-impl.h - what the files of onnx/ share and nothing else sees: the loaded model
 * (model.c), the instantiation context with its emit / fold helpers (import.c), the table of
 * lowerings (ops.c) and the lowering functions of each op family (ops-*.c).
 */
#ifndef RTX_ONNX_IMPL_H
#define RTX_ONNX_IMPL_H

#include <pthread.h>

#include "onnx/onnx.h"
#include "onnx/onnx.pb-c.h"

/* A value a node writes: its producer and how many node inputs and graph outputs read it. */
struct rtx__onnx_def {
    const char *name;
    const Onnx__NodeProto *node;
    int uses;
};

/* A kept fold: the rtx node `ordinal` lowered from ONNX node `node`, computed from inputs
 * with this signature (a weight by identity, a scalar by value). */
#define RTX__ONNX_FOLD_MAX_IN 4
struct rtx__onnx_fold {
    const Onnx__NodeProto *node;
    int ordinal;
    int n_in;
    const struct rtx_tensor *weights[RTX__ONNX_FOLD_MAX_IN]; /* NULL for a scalar */
    double scalars[RTX__ONNX_FOLD_MAX_IN];
    int op;                        /* the rtx op and its result's dtype and shape */
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    struct rtx_tensor *out;        /* one reference owned */
};
/* Drops every kept fold (at free). */
void rtx__onnx_folds_free(struct rtx_onnx_model *m);

struct rtx_onnx_model {
    Onnx__ModelProto *proto;       /* parsed; initializers' data moved out into `inits` */
    char *what;                    /* names the model in messages */
    char *producer;
    int opset;
    int n_inputs, n_outputs;
    struct rtx_onnx_io *inputs, *outputs;
    int n_inits;
    char **init_names;             /* sorted by name (bsearch), with their tensors */
    struct rtx_tensor **inits;
    int64_t weight_bytes;
    int n_nodes;
    const Onnx__NodeProto **order; /* the nodes in a topological order */
    int n_defs;
    struct rtx__onnx_def *defs;    /* node outputs by name (sorted): producer, consumers */
    struct rtx_limits lim;
    /* results of folds that read only weights (and scalars), shared by every instantiation
     * instead of computed and held once per input shape (import.c) */
    pthread_mutex_t fold_mu;
    int n_folds, cap_folds;
    struct rtx__onnx_fold *folds;
};

/* The node that writes value name (NULL for inputs, initializers, unknown names) and the
 * number of readers of name (0 when unknown). */
const Onnx__NodeProto *rtx__onnx_producer(const struct rtx_onnx_model *m, const char *name);
int rtx__onnx_uses(const struct rtx_onnx_model *m, const char *name);
/* The initializer called name, or NULL. */
struct rtx_tensor *rtx__onnx_init(const struct rtx_onnx_model *m, const char *name);
/* rtx dtype of an ONNX TensorProto.DataType; RTX_EUNSUPPORTED naming the ONNX type. */
int rtx__onnx_dtype(int onnx_type, enum rtx_dtype *out, struct rtx_err *err);
/* The ONNX type's name ("FLOAT", "DOUBLE", ...), "type N" for unknown values. */
const char *rtx__onnx_type_name(int onnx_type);
/* A tensor of a TensorProto's data (inline raw_data or typed fields; external data read from
 * base_dir, NULL refusing it). what names it in messages. */
int rtx__onnx_tensor(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                     const struct rtx_limits *lim, struct rtx_tensor **out, struct rtx_err *err);

/* ---- instantiation (import.c) ---- */

struct ox {
    const struct rtx_onnx_model *m;
    struct rtx_graph *g;            /* the work graph: every value and node as lowered */
    const struct rtx_limits *lim;
    struct rtx_backend *cpu;        /* folds constant nodes; made on first use */
    const Onnx__NodeProto *node;    /* the node being lowered */
    int node_index;                 /* its position in the topological order */
    int ordinal;                    /* rtx nodes folded so far for the current node */
    int fresh;                      /* counter of generated value names */
    char **names;                   /* generated names (freed with the context) */
    int n_names, cap_names;
    /* copies of work-graph values handed to lowerings: the graph's value array moves when
     * nodes add values, a copy (its name and constant stay put) does not */
    struct rtx_value snap[128];
    int snap_next;
    char bad_attr[160];             /* an attribute of the wrong type read while lowering */
};

/* The work graph's value named name (NULL when none): a copy, valid while the current node
 * is lowered (the next 127 lookups do not reuse its slot); read-only. */
struct rtx_value *ox_value(struct ox *c, const char *name);
/* The value of input i of the current node: NULL (and RTX_EGRAPH) when absent and required. */
struct rtx_value *ox_in(struct ox *c, int i, struct rtx_err *err);
/* Whether the current node has input i (present and not ""). */
bool ox_has_in(const struct ox *c, int i);
/* The name of the current node's input i / output i. */
const char *ox_in_name(const struct ox *c, int i);
const char *ox_out_name(const struct ox *c, int i);
/* A fresh value name derived from the current node's first output. Valid while c lives. */
const char *ox_tmp(struct ox *c, const char *what);
/* Adds an rtx node (op name) reading ins and writing out; returns its index (attributes are
 * set on it with rtx_graph_set_attr_*; then ox_finish). */
int ox_node(struct ox *c, const char *op, const char *const *ins, int n_in, const char *out,
            struct rtx_err *err);
/* Infers the node's output shape and, when every input is a constant, computes it on the CPU
 * now (the output becomes a constant). */
int ox_finish(struct ox *c, int node, struct rtx_err *err);
/* ox_node + ox_finish for nodes without attributes. */
int ox_emit(struct ox *c, const char *op, const char *const *ins, int n_in, const char *out,
            struct rtx_err *err);
/* A constant value called name (takes a reference to t). */
int ox_const(struct ox *c, const char *name, struct rtx_tensor *t, struct rtx_err *err);
/* A fresh scalar (rank 0) constant of dtype dt holding v; returns its name (NULL on error). */
const char *ox_scalar(struct ox *c, enum rtx_dtype dt, double v, struct rtx_err *err);
/* A fresh 1-D i64 constant; returns its name (NULL on error). */
const char *ox_ints_const(struct ox *c, const int64_t *v, int n, struct rtx_err *err);
/* Reads a constant integer tensor (i32 or i64, at most max elements) into v; its element
 * count in *n. A value computed from data gives RTX_EUNSUPPORTED naming the input. */
int ox_const_ints(struct ox *c, int i, int64_t *v, int max, int *n, struct rtx_err *err);
/* Reads a constant scalar (one element, any dtype) of input i as double. */
int ox_const_scalar(struct ox *c, int i, double *v, struct rtx_err *err);
/* Output i of the current node is the same tensor as value `src` (an alias: Identity,
 * Dropout, a reshape to the same shape). */
int ox_alias(struct ox *c, int out, const char *src, struct rtx_err *err);
/* Reshape of value src to dims (all known) into out. */
int ox_reshape(struct ox *c, const char *src, int ndim, const int64_t *dims, const char *out,
               struct rtx_err *err);

/* ONNX attributes of the current node. */
const Onnx__AttributeProto *ox_attr(const struct ox *c, const char *name);
int64_t ox_attr_int(const struct ox *c, const char *name, int64_t dflt);
double ox_attr_float(const struct ox *c, const char *name, double dflt);
/* The string attribute (NUL-terminated copy in buf), or dflt. */
const char *ox_attr_str(const struct ox *c, const char *name, const char *dflt, char *buf,
                        size_t cap);
/* The ints attribute: count (or -1 when absent) and *v pointing at them. */
int ox_attr_ints(const struct ox *c, const char *name, const int64_t **v);
/* RTX_EUNSUPPORTED naming the current node and what it cannot do. */
int ox_unsupported(struct ox *c, struct rtx_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Normalises a possibly negative axis for rank r; RTX_EGRAPH when out of range. */
int ox_axis(struct ox *c, int64_t axis, int r, int *out, struct rtx_err *err);

/* ---- the op table (ops.c) ---- */

typedef int (*ox_lower_fn)(struct ox *c, struct rtx_err *err);
struct ox_op {
    const char *name;              /* ONNX op_type */
    ox_lower_fn lower;
    const char *arg;               /* for shared lowerings: the rtx op or a variant */
};
/* The table entry of an ONNX op type, or NULL. */
const struct ox_op *rtx__onnx_op(const char *op_type);

/* Lowerings, by family. */
int ox_lower_unary(struct ox *c, struct rtx_err *err);      /* arg: rtx op */
int ox_lower_binary(struct ox *c, struct rtx_err *err);     /* arg: rtx op */
int ox_lower_compare(struct ox *c, struct rtx_err *err);    /* arg: "<=", ">=" */
int ox_lower_logic(struct ox *c, struct rtx_err *err);      /* arg: "not", "and", "or" */
int ox_lower_identity(struct ox *c, struct rtx_err *err);
int ox_lower_reciprocal(struct ox *c, struct rtx_err *err);
int ox_lower_gelu(struct ox *c, struct rtx_err *err);
int ox_lower_cast(struct ox *c, struct rtx_err *err);
int ox_lower_where(struct ox *c, struct rtx_err *err);
int ox_lower_softmax(struct ox *c, struct rtx_err *err);    /* arg: rtx op */
int ox_lower_matmul(struct ox *c, struct rtx_err *err);
int ox_lower_gemm(struct ox *c, struct rtx_err *err);
int ox_lower_reduce(struct ox *c, struct rtx_err *err);     /* arg: rtx op */
int ox_lower_argmax(struct ox *c, struct rtx_err *err);
int ox_lower_layernorm(struct ox *c, struct rtx_err *err);  /* arg: rtx op */
/* shapes and data movement (ops-shape.c) */
int ox_lower_reshape(struct ox *c, struct rtx_err *err);
int ox_lower_flatten(struct ox *c, struct rtx_err *err);
int ox_lower_squeeze(struct ox *c, struct rtx_err *err);    /* arg: "squeeze"/"unsqueeze" */
int ox_lower_transpose(struct ox *c, struct rtx_err *err);
int ox_lower_concat(struct ox *c, struct rtx_err *err);
int ox_lower_slice(struct ox *c, struct rtx_err *err);
int ox_lower_split(struct ox *c, struct rtx_err *err);
int ox_lower_gather(struct ox *c, struct rtx_err *err);
int ox_lower_shape(struct ox *c, struct rtx_err *err);
int ox_lower_size(struct ox *c, struct rtx_err *err);
int ox_lower_constant(struct ox *c, struct rtx_err *err);
int ox_lower_constant_of_shape(struct ox *c, struct rtx_err *err);
int ox_lower_range(struct ox *c, struct rtx_err *err);
int ox_lower_expand(struct ox *c, struct rtx_err *err);
int ox_lower_trilu(struct ox *c, struct rtx_err *err);
/* convolutional networks (ops-nn.c) */
int ox_lower_conv(struct ox *c, struct rtx_err *err);
/* ONNX Conv node `conv` (its attributes and input 0) with weight w and bias b (NULL: none)
 * into value out: the Conv + BatchNormalization fusion lowers a conv with folded weights. */
int ox_conv(struct ox *c, const Onnx__NodeProto *conv, const char *w, const char *b,
            const char *out, struct rtx_err *err);
int ox_lower_batchnorm(struct ox *c, struct rtx_err *err);
int ox_lower_pool(struct ox *c, struct rtx_err *err);       /* arg: rtx op */
int ox_lower_global_pool(struct ox *c, struct rtx_err *err); /* arg: rtx reduce op */

/* compositions (ops-extra.c) */
int ox_lower_clip(struct ox *c, struct rtx_err *err);
int ox_lower_variadic(struct ox *c, struct rtx_err *err);   /* arg: max, min, sum, mean */
int ox_lower_leaky_relu(struct ox *c, struct rtx_err *err);
int ox_lower_hard_sigmoid(struct ox *c, struct rtx_err *err); /* arg: sigmoid, swish */
int ox_lower_pad(struct ox *c, struct rtx_err *err);
int ox_lower_tile(struct ox *c, struct rtx_err *err);
int ox_lower_isnan(struct ox *c, struct rtx_err *err);
int ox_lower_gather_elements(struct ox *c, struct rtx_err *err);
int ox_lower_gather_nd(struct ox *c, struct rtx_err *err);
int ox_lower_cumsum(struct ox *c, struct rtx_err *err);

/* Attention, opset 23 (ops-attention.c) */
int ox_lower_attention(struct ox *c, struct rtx_err *err);

/* Decomposed patterns ending at the current node (fuse.c): lowers the whole pattern to one
 * fused op and returns 1, or returns 0 when the node ends no pattern. */
int rtx__onnx_fuse(struct ox *c, struct rtx_err *err);

#endif /* RTX_ONNX_IMPL_H */
