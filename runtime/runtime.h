/*
 * runtime.h - rtxd's runtime core: errors, dtypes, tensors, the graph IR, validation,
 * the graph wire format, the memory planner and the executor, and NumPy .npy I/O.
 *
 * DESIGN
 * A graph is a list of values (named tensors: graph inputs, initializers, node outputs) and
 * a list of nodes (an op, input and output value indices, attributes). Nodes name their
 * inputs and outputs by value name when built; names resolve to indices at once, so a name
 * that is used but never produced stays visible as a "dangling" value until validation.
 * Validation (rtx_graph_validate) checks structure and, when every input shape is known,
 * runs dtype/shape inference. A plan (rtx_plan_new) binds concrete input shapes, orders the
 * nodes topologically, infers every value's dtype and shape and assigns intermediate
 * tensors to offsets in one arena by lifetime. rtx_plan_execute runs the plan on a backend
 * (runtime/backend.h); the executor never branches on the device type.
 */
#ifndef RTX_RUNTIME_H
#define RTX_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

/* Every failing function returns a negative code; details go into a caller-owned rtx_err. */
#define RTX_ERRNO_MAP(X)                                                                        \
    X(EINVAL, "invalid argument")                                                               \
    X(ENOMEM, "out of memory")                                                                  \
    X(ELIMIT, "limit exceeded")                                                                 \
    X(EIO, "i/o error")                                                                         \
    X(EFORMAT, "malformed data")                                                                \
    X(EUNSUPPORTED, "not supported")                                                            \
    X(ENOTFOUND, "not found")                                                                   \
    X(EGRAPH, "invalid graph")                                                                  \
    X(EGPU, "device error")                                                                     \
    X(ECANCELED, "canceled")                                                                    \
    X(EUNAVAILABLE, "unavailable")                                                              \
    X(EEXPIRED, "deadline expired")                                                             \
    X(EINTERNAL, "internal error")                                                              \
    X(EOVERLOAD, "overloaded") /* refused by admission control: retry later */

enum rtx_errno {
    RTX_OK = 0,
#define RTX_ERRNO_ENUM(name, msg) RTX_##name,
    RTX__ERRNO_FIRST = -1000,
    RTX_ERRNO_MAP(RTX_ERRNO_ENUM)
#undef RTX_ERRNO_ENUM
    RTX__ERRNO_END
};

/* Error detail: msg is always NUL-terminated. Functions take `struct rtx_err *err`, which may
 * be NULL when the caller only wants the code. */
struct rtx_err {
    int code;
    char msg[1024]; /* long enough to list every unsupported op of a model */
};

/* The fixed message of a code (also for -errno values). Never NULL. */
const char *rtx_strerror(int code);

/* Fills err (if not NULL) with code and a printf-formatted message; returns code. */
int rtx_err_set(struct rtx_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The retry hint of an RTX_EOVERLOAD message ("...; retry after N ms", as admission control
 * words it) in milliseconds, or -1 when msg (len bytes, need not be terminated) has none. The
 * servers turn it into HTTP's Retry-After and gRPC's grpc-retry-pushback-ms. */
int64_t rtx_err_retry_after_ms(const char *msg, size_t len);

/* Prepends "prefix: " to an error message already set (keeps the code). Returns err->code, or
 * RTX_EINVAL when err is NULL: callers that may pass NULL return their own code instead. */
int rtx_err_prefix(struct rtx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------------------------
 * Allocation (all runtime allocations go through these so tests can inject failures)
 * ---------------------------------------------------------------------------------------- */

void *rtx_malloc(size_t bytes);
void *rtx_calloc(size_t n, size_t bytes);
void *rtx_realloc(void *p, size_t bytes);
void rtx_free(void *p);
char *rtx_strdup(const char *s);
/* Aligned allocation (64 bytes) for tensor data; free with rtx_free_aligned. */
void *rtx_malloc_aligned(size_t bytes);
void rtx_free_aligned(void *p);

/* Process policy for programs that run graphs repeatedly (rtxd, rtxrun): the C library keeps
 * freed memory of up to 64 MiB blocks (and up to 512 MiB at the top of the heap) for reuse
 * instead of returning it to the kernel at once. Executions allocate and free the same
 * arenas, outputs and scratch run after run; without this every run of a graph of a few MiB
 * faulted its pages in again (a quarter of a small CNN's time on the CPU). Call once at
 * start, before threads. */
void rtx_host_memory_keep_freed(void);
/* Test hook: the n-th allocation from now (1-based) and every later one fail until reset with
 * n = 0. Counts only allocations made through the functions above. */
void rtx_alloc_fail_after(long n);

/* ------------------------------------------------------------------------------------------
 * Data types
 * ---------------------------------------------------------------------------------------- */

#define RTX_DTYPE_MAP(X)                                                                        \
    X(F32, "f32", 4)                                                                            \
    X(F16, "f16", 2)                                                                            \
    X(BF16, "bf16", 2)                                                                          \
    X(I8, "i8", 1)                                                                              \
    X(I32, "i32", 4)                                                                            \
    X(I64, "i64", 8)                                                                            \
    X(U8, "u8", 1)                                                                              \
    X(BOOL, "bool", 1)

enum rtx_dtype {
#define RTX_DTYPE_ENUM(name, str, size) RTX_##name,
    RTX_DTYPE_MAP(RTX_DTYPE_ENUM)
#undef RTX_DTYPE_ENUM
    RTX_DTYPE_COUNT
};

const char *rtx_dtype_name(enum rtx_dtype dt);        /* "f32", ...; "?" when out of range */
size_t rtx_dtype_size(enum rtx_dtype dt);             /* bytes per element */
int rtx_dtype_from_name(const char *name, enum rtx_dtype *out); /* 0 or RTX_EINVAL */
bool rtx_dtype_is_float(enum rtx_dtype dt);           /* f32, f16, bf16 */

/* IEEE half and bfloat16 conversions; float -> half/bf16 rounds to nearest even. */
float rtx_f16_to_f32(uint16_t h);
uint16_t rtx_f32_to_f16(float f);
static inline float rtx_bf16_to_f32(uint16_t b) {
    union { uint32_t u; float f; } v = { .u = (uint32_t)b << 16 };
    return v.f;
}
static inline uint16_t rtx_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v = { .f = f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* ------------------------------------------------------------------------------------------
 * Tensors
 * ---------------------------------------------------------------------------------------- */

#define RTX_MAX_DIMS 8

/* A reference-counted block of memory that tensors view. */
struct rtx_buffer {
    int refcount;               /* atomic */
    void *data;
    size_t bytes;               /* bytes */
    void (*release)(void *ctx, void *data); /* frees data; NULL: rtx_free_aligned */
    void *release_ctx;
};

struct rtx_tensor {
    int refcount;               /* atomic */
    enum rtx_dtype dtype;
    int ndim;                   /* 0 (scalar) .. RTX_MAX_DIMS */
    int64_t dims[RTX_MAX_DIMS];
    int64_t strides[RTX_MAX_DIMS]; /* elements */
    int64_t offset;             /* bytes from buf->data to element 0 */
    struct rtx_buffer *buf;
};

/* Number of elements of a shape; 1 for ndim 0. */
int64_t rtx_shape_numel(int ndim, const int64_t *dims);

/* New contiguous tensor with zeroed storage. Returns RTX_EINVAL on a bad shape or dtype,
 * RTX_ENOMEM on allocation failure. */
int rtx_tensor_new(enum rtx_dtype dt, int ndim, const int64_t *dims, struct rtx_tensor **out,
                   struct rtx_err *err);
/* New contiguous tensor over memory the caller owns (release called when the last view goes;
 * release may be NULL when the caller outlives the tensor). */
int rtx_tensor_wrap(enum rtx_dtype dt, int ndim, const int64_t *dims, void *data, size_t bytes,
                    void (*release)(void *ctx, void *data), void *release_ctx,
                    struct rtx_tensor **out, struct rtx_err *err);
/* Drops one reference to a buffer; the last one releases its memory. NULL is a no-op. */
void rtx_buffer_unref(struct rtx_buffer *b);
/* New contiguous tensor over `buf` (a device buffer from a backend) at byte `offset`; takes a
 * new reference to buf. RTX_EINVAL when the tensor would not fit in the buffer. */
int rtx_tensor_from_buffer(struct rtx_buffer *buf, size_t offset, enum rtx_dtype dt, int ndim,
                           const int64_t *dims, struct rtx_tensor **out, struct rtx_err *err);
/* A view sharing t's buffer with other dims/strides/offset (no bounds copy: checked against
 * the buffer size). */
int rtx_tensor_view(const struct rtx_tensor *t, int ndim, const int64_t *dims,
                    const int64_t *strides, int64_t offset, struct rtx_tensor **out,
                    struct rtx_err *err);
/* View with axes permuted: out dim i = t dim perm[i]. */
int rtx_tensor_permute(const struct rtx_tensor *t, const int *perm, struct rtx_tensor **out,
                       struct rtx_err *err);
/* A contiguous copy (or a new reference when t is already contiguous). */
int rtx_tensor_contiguous(const struct rtx_tensor *t, struct rtx_tensor **out,
                          struct rtx_err *err);
struct rtx_tensor *rtx_tensor_ref(struct rtx_tensor *t);
void rtx_tensor_unref(struct rtx_tensor *t); /* NULL is a no-op */
bool rtx_tensor_is_contiguous(const struct rtx_tensor *t);
int64_t rtx_tensor_numel(const struct rtx_tensor *t);
size_t rtx_tensor_nbytes(const struct rtx_tensor *t); /* numel * dtype size */
void *rtx_tensor_data(const struct rtx_tensor *t);     /* address of element 0 */
/* Writes "f32[2,3]" into buf. */
const char *rtx_shape_str(enum rtx_dtype dt, int ndim, const int64_t *dims, char *buf,
                          size_t len);

/* CLOCK_MONOTONIC in nanoseconds: the one clock the daemon, serving, jobs and the executor
 * measure durations and deadlines on (runtime/clock.c). */
int64_t rtx_mono_ns(void);
/* Names the calling thread for top -H, /proc/PID/task/TID/comm and debuggers ("rtx-cq-0",
 * "rtx-job-cuda:0"); the kernel keeps 15 bytes, so the rest is cut (runtime/thread-name.c). */
void rtx_thread_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A deterministic generator of test and benchmark data (xorshift64* seeded through
 * splitmix64, so every seed, 0 too, gives a good stream). */
struct rtx_rng {
    uint64_t s;
};
void rtx_rng_seed(struct rtx_rng *r, uint64_t seed);
uint64_t rtx_rng_next(struct rtx_rng *r);
/* A new tensor of random data: floats uniform in [-1, 1), integers uniform in [0, 10), bools
 * 0 or 1; dimensions of -1 become 1. rtxrun and rtxctl --random-inputs use it, so the same
 * seed gives the same inputs in both. */
int rtx_tensor_random(struct rtx_rng *r, enum rtx_dtype dt, int ndim, const int64_t *dims,
                      struct rtx_tensor **out, struct rtx_err *err);

/* Reads element i (logical row-major index, any strides) as double / writes it from double
 * (with the dtype's conversion; bool stores v != 0). For tests and slow paths. */
double rtx_tensor_get(const struct rtx_tensor *t, int64_t i);
void rtx_tensor_set(struct rtx_tensor *t, int64_t i, double v);

/* ------------------------------------------------------------------------------------------
 * Ops
 * ---------------------------------------------------------------------------------------- */

/* The op set. The semantics of every op (inputs, attributes, shape rules) are in
 * docs/ops.md; the table in runtime/ops.c holds arity, attributes and inference. */
#define RTX_OP_MAP(X)                                                                           \
    X(ADD, "add") X(SUB, "sub") X(MUL, "mul") X(DIV, "div") X(POW, "pow")                       \
    X(NEG, "neg") X(ABS, "abs") X(SQRT, "sqrt") X(RSQRT, "rsqrt") X(EXP, "exp") X(LOG, "log")   \
    X(TANH, "tanh") X(ERF, "erf") X(RELU, "relu") X(GELU, "gelu") X(SILU, "silu")               \
    X(SIGMOID, "sigmoid") X(CAST, "cast") X(WHERE, "where") X(EQUAL, "equal")                   \
    X(LESS, "less") X(GREATER, "greater") X(MATMUL, "matmul") X(GEMM, "gemm")                   \
    X(TRANSPOSE, "transpose") X(RESHAPE, "reshape") X(EXPAND, "expand") X(CONCAT, "concat")     \
    X(SLICE, "slice") X(GATHER, "gather") X(REDUCE_SUM, "reduce_sum")                           \
    X(REDUCE_MEAN, "reduce_mean") X(REDUCE_MAX, "reduce_max") X(REDUCE_MIN, "reduce_min")       \
    X(ARGMAX, "argmax") X(SOFTMAX, "softmax") X(LOG_SOFTMAX, "log_softmax")                     \
    X(LAYER_NORM, "layer_norm") X(RMS_NORM, "rms_norm") X(ATTENTION, "attention")               \
    X(CONSTANT, "constant") X(CONV2D, "conv2d") X(MAX_POOL2D, "max_pool2d")                     \
    X(AVG_POOL2D, "avg_pool2d") X(ROPE, "rope") X(PAGED_ATTENTION, "paged_attention")

enum rtx_op {
#define RTX_OP_ENUM(name, str) RTX_OP_##name,
    RTX_OP_MAP(RTX_OP_ENUM)
#undef RTX_OP_ENUM
    RTX_OP_COUNT
};

const char *rtx_op_name(enum rtx_op op);                  /* "?" when out of range */
/* Python's slice.indices() for one axis of size n: clamps start and end, sets *first to the
 * first index taken, and returns how many elements the slice has (step != 0). The slice op's
 * inference and every backend use this one definition. */
int64_t rtx_slice_range(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first);
int rtx_op_from_name(const char *name, enum rtx_op *out); /* 0 or RTX_ENOTFOUND */

/* ------------------------------------------------------------------------------------------
 * Graph IR
 * ---------------------------------------------------------------------------------------- */

enum rtx_attr_type {
    RTX_ATTR_INT,
    RTX_ATTR_FLOAT,
    RTX_ATTR_STRING,
    RTX_ATTR_INTS,
    RTX_ATTR_FLOATS,
    RTX_ATTR_TENSOR,
    RTX_ATTR_TYPE_COUNT
};

struct rtx_attr {
    char *name;
    enum rtx_attr_type type;
    int64_t i;            /* RTX_ATTR_INT */
    double f;             /* RTX_ATTR_FLOAT */
    char *s;              /* RTX_ATTR_STRING */
    int n;                /* element count of ints / floats */
    int64_t *ints;        /* RTX_ATTR_INTS */
    double *floats;       /* RTX_ATTR_FLOATS */
    struct rtx_tensor *t; /* RTX_ATTR_TENSOR (one reference owned) */
};

/* A named tensor of the graph. */
struct rtx_value {
    char *name;
    enum rtx_dtype dtype;         /* declared (inputs, initializers) or inferred */
    int ndim;                     /* -1 while unknown */
    int64_t dims[RTX_MAX_DIMS];   /* -1 for a dimension bound at run time (inputs only) */
    int producer;                 /* node index, -1 when none */
    bool is_input;                /* a graph input */
    struct rtx_tensor *constant;  /* initializer data (one reference owned), else NULL */
};

struct rtx_node {
    char *name;                   /* may be "" */
    enum rtx_op op;
    int n_inputs;
    int *inputs;                  /* value indices; -1 = an omitted optional input */
    int n_outputs;
    int *outputs;                 /* value indices */
    int n_attrs;
    struct rtx_attr *attrs;
};

struct rtx_graph {
    char *name;
    int n_values, cap_values;
    struct rtx_value *values;
    int n_nodes, cap_nodes;
    struct rtx_node *nodes;
    int n_inputs;
    int *inputs;                  /* value indices of graph inputs, in order */
    int n_outputs;
    int *outputs;                 /* value indices of graph outputs, in order */
    void *name_index;             /* internal: value name -> index hash table */
};

/* Building. Every function returns 0 or a negative code with err filled. */
int rtx_graph_new(const char *name, struct rtx_graph **out, struct rtx_err *err);
void rtx_graph_free(struct rtx_graph *g); /* NULL is a no-op */
/* Index of the value with this name, or -1. */
int rtx_graph_find_value(const struct rtx_graph *g, const char *name);
/* Declares a graph input; dims may hold -1 for dimensions bound at run time. Returns the
 * value index (>= 0) or a negative code. */
int rtx_graph_add_input(struct rtx_graph *g, const char *name, enum rtx_dtype dt, int ndim,
                        const int64_t *dims, struct rtx_err *err);
/* Adds a named constant tensor: takes a new reference to t, or a contiguous copy of it when t
 * is a strided view (kernels read constants as contiguous buffers). Returns the value index. */
int rtx_graph_add_initializer(struct rtx_graph *g, const char *name, struct rtx_tensor *t,
                              struct rtx_err *err);
/* Adds a node. Input names that do not exist yet are created as unproduced values (valid
 * only if a later node produces them); "" as an input name means an omitted optional input.
 * Returns the node index. */
int rtx_graph_add_node(struct rtx_graph *g, const char *op, const char *node_name,
                       const char *const *inputs, int n_inputs, const char *const *outputs,
                       int n_outputs, struct rtx_err *err);
/* Attributes on node `node` (index); the name must not already be set on it. */
int rtx_graph_set_attr_int(struct rtx_graph *g, int node, const char *name, int64_t v,
                           struct rtx_err *err);
int rtx_graph_set_attr_float(struct rtx_graph *g, int node, const char *name, double v,
                             struct rtx_err *err);
int rtx_graph_set_attr_string(struct rtx_graph *g, int node, const char *name, const char *v,
                              struct rtx_err *err);
int rtx_graph_set_attr_ints(struct rtx_graph *g, int node, const char *name, const int64_t *v,
                            int n, struct rtx_err *err);
int rtx_graph_set_attr_floats(struct rtx_graph *g, int node, const char *name, const double *v,
                              int n, struct rtx_err *err);
int rtx_graph_set_attr_tensor(struct rtx_graph *g, int node, const char *name,
                              struct rtx_tensor *t, struct rtx_err *err);
/* Marks a value (by name) as a graph output. */
int rtx_graph_add_output(struct rtx_graph *g, const char *name, struct rtx_err *err);

/* Attribute lookup on a node; the getters return the default when absent (and when the
 * attribute has another type: validation reports that case). */
const struct rtx_attr *rtx_node_attr(const struct rtx_node *n, const char *name);
int64_t rtx_node_attr_int(const struct rtx_node *n, const char *name, int64_t dflt);
double rtx_node_attr_float(const struct rtx_node *n, const char *name, double dflt);
const char *rtx_node_attr_string(const struct rtx_node *n, const char *name, const char *dflt);
/* Returns the element count and sets *v, or -1 when absent. */
int rtx_node_attr_ints(const struct rtx_node *n, const char *name, const int64_t **v);
int rtx_node_attr_floats(const struct rtx_node *n, const char *name, const double **v);

/* Limits enforced by decoding, validation and planning. Every function taking a
 * `const struct rtx_limits *` accepts NULL for rtx_limits_default(). */
struct rtx_limits {
    int64_t max_nodes;
    int64_t max_values;
    int max_dims;                /* <= RTX_MAX_DIMS */
    int64_t max_elements;        /* per tensor */
    int64_t max_tensor_bytes;    /* per tensor, bytes */
    int64_t max_total_bytes;     /* constants + planned arena + outputs, bytes */
};
/* Defaults: 100k nodes, 1M values, 8 dims, 2^31 elements, 4 GiB per tensor, 16 GiB total. */
struct rtx_limits rtx_limits_default(void);

/* Structural validation: known ops (resolved at build), arity, attribute names and types,
 * dangling inputs, duplicate producers, cycles, limits; then, when every graph input shape is
 * known, dtype/shape inference. Every error names the node (index and name) and the reason. */
int rtx_graph_validate(const struct rtx_graph *g, const struct rtx_limits *lim,
                       struct rtx_err *err);

/* Infers the dtype and shape of node `node`'s outputs from its inputs' values (which must
 * have known dtype and dims: inputs with a declared shape, initializers, or outputs of nodes
 * inferred before) and stores them in the output values. Checks the node's attributes and
 * the per-tensor limits; errors name the node. For builders that need every shape as they
 * go (the ONNX importer). */
int rtx_graph_infer_node(struct rtx_graph *g, int node, const struct rtx_limits *lim,
                         struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Wire format (proto/rtx/v1/graph.proto)
 * ---------------------------------------------------------------------------------------- */

/* Decodes a serialized rtx.v1.Graph. Malformed bytes give RTX_EFORMAT; graph problems that
 * can be seen while decoding (unknown op, bad dtype, tensor data size) give RTX_EGRAPH. The
 * result is not validated: call rtx_graph_validate. */
int rtx_graph_decode(const void *data, size_t len, const struct rtx_limits *lim,
                     struct rtx_graph **out, struct rtx_err *err);
/* Encodes g; *out is allocated with rtx_malloc (free with rtx_free). */
int rtx_graph_encode(const struct rtx_graph *g, void **out, size_t *len, struct rtx_err *err);
/* DataType of the wire format (rtx.v1.DataType value) for a dtype, and back; from_wire
 * returns RTX_EINVAL for UNSPECIFIED and unknown values. */
int rtx_dtype_to_wire(enum rtx_dtype dt);
int rtx_dtype_from_wire(int wire, enum rtx_dtype *out);
/* Checks a decoded rtx.v1.Tensor message (dtype, rank, dims, the limits, data size) and
 * returns a new tensor holding a copy of its data. `what` names the tensor in messages
 * ("input 'x'"). *total_bytes accumulates bytes against lim->max_total_bytes. Invalid
 * messages give RTX_EINVAL, limits RTX_ELIMIT. */
struct Rtx__V1__Tensor;
int rtx_tensor_from_wire(const struct Rtx__V1__Tensor *m, const char *what,
                         const struct rtx_limits *lim, int64_t *total_bytes,
                         struct rtx_tensor **out, struct rtx_err *err);
int rtx_graph_load_file(const char *path, const struct rtx_limits *lim, struct rtx_graph **out,
                        struct rtx_err *err);
int rtx_graph_save_file(const struct rtx_graph *g, const char *path, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Planning and execution
 * ---------------------------------------------------------------------------------------- */

struct rtx_backend; /* runtime/backend.h */
struct rtx_plan;

/* Validates g and binds concrete input shapes and dtypes (inputs[i] describes graph input i;
 * only dtype and shape are read), infers every value, orders the nodes and plans buffer
 * reuse. The plan keeps a pointer to g: g must outlive it and not change. */
int rtx_plan_new(const struct rtx_graph *g, const struct rtx_tensor *const *inputs,
                 int n_inputs, const struct rtx_limits *lim, struct rtx_plan **out,
                 struct rtx_err *err);
void rtx_plan_free(struct rtx_plan *p); /* NULL is a no-op */
/* Bytes of the intermediate arena (peak of simultaneously live intermediates). */
size_t rtx_plan_arena_bytes(const struct rtx_plan *p);
/* Sum of all intermediate tensor sizes, i.e. what the arena would be without reuse. */
size_t rtx_plan_unplanned_bytes(const struct rtx_plan *p);
/* Bytes a plan may hold on a device once it ran there: its graph's initializers, its arena,
 * its inputs and its outputs (what a plan cache bounds). */
size_t rtx_plan_held_bytes(const struct rtx_plan *p);
/* Inferred dtype and shape of a value. */
int rtx_plan_value_shape(const struct rtx_plan *p, int value, enum rtx_dtype *dt, int *ndim,
                         int64_t *dims);

/* How an execution ran its nodes. */
enum rtx_exec_mode {
    RTX_EXEC_PLAIN,    /* node by node into buffers allocated for this run */
    RTX_EXEC_FIXED,    /* node by node into the plan's fixed buffers (the run before a
                        * capture, or every run once a capture failed) */
    RTX_EXEC_CAPTURED, /* captured into a graph (CUDA graph), then the graph launched */
    RTX_EXEC_REPLAYED, /* the plan's captured graph launched again */
};
/* "plain", "fixed", "captured", "replayed"; "?" for other values. */
const char *rtx_exec_mode_name(enum rtx_exec_mode mode);

struct rtx_exec_stats {
    double wall_ms;              /* whole execution, milliseconds */
    size_t peak_bytes;           /* arena + outputs + converted inputs, bytes */
    int nodes_run;
    enum rtx_exec_mode mode;
};

/* Runs the plan on a backend. inputs (host tensors) must match the shapes the plan was made
 * for; on a device backend they are uploaded, the initializers are uploaded once per plan and
 * backend, and the outputs are downloaded. outputs receives n_outputs new host tensor
 * references (caller unrefs). A plan executes on one thread at a time. *cancel, when not NULL, is read
 * between ops: nonzero stops with RTX_ECANCELED.
 * Inputs that an op writes in place (paged_attention's k_cache and v_cache, docs/ops.md) must
 * be contiguous: on a host backend the kernels write the caller's tensors themselves, on a
 * device backend the updated tensors are copied back into them after the run. A plan with
 * such an op captures a graph only on rtx_plan_execute_device with every written input bound
 * (rtx_plan_bind_device_inputs); otherwise it runs node by node with the caller's tensors. */
int rtx_plan_execute(struct rtx_plan *p, struct rtx_backend *be,
                     struct rtx_tensor *const *inputs, int n_inputs, struct rtx_tensor **outputs,
                     int n_outputs, const volatile int *cancel, struct rtx_exec_stats *stats,
                     struct rtx_err *err);

/* Graph replay. On a backend that captures graphs (rtx_backend_can_capture: the CUDA backend)
 * a plan whose graph writes no input in place keeps fixed buffers for that backend: its
 * inputs (copied in on every run), its intermediates (one arena) and its node-produced
 * outputs. The first execution runs node by
 * node into them, the second captures the node sequence into a graph and launches it, every
 * later one only copies the inputs in and launches the graph (RTX_EXEC_REPLAYED). Results are
 * the same bits as node-by-node execution. Cancellation: *cancel is read before the launch;
 * a launched graph runs to its end. A capture that fails (an op that waits for the device
 * inside its kernel, for one) is discarded and the run, and every later run of the plan, goes
 * node by node; rtx_plan_capture_note then says why. A plan binds its input shapes, so a new
 * shape means a new plan and a new capture; running the plan on another backend drops the
 * fixed buffers and the graph of the previous one. */

/* As rtx_plan_execute, with inputs and outputs in the backend's memory: inputs are contiguous
 * tensors of the backend (rtx_backend_upload, or outputs of an earlier execution), and
 * outputs receives references to the output tensors without downloading them. On a backend
 * that captures graphs those tensors are the plan's fixed buffers: the next execution of the
 * plan on that backend overwrites them (take a copy to keep one). */
int rtx_plan_execute_device(struct rtx_plan *p, struct rtx_backend *be,
                            struct rtx_tensor *const *inputs, int n_inputs,
                            struct rtx_tensor **outputs, int n_outputs,
                            const volatile int *cancel, struct rtx_exec_stats *stats,
                            struct rtx_err *err);
/* Binds graph inputs [first, first + n) by address for rtx_plan_execute_device on a backend
 * that captures graphs: instead of copying them into fixed buffers each run, the plan's
 * fixed state and its captured graph use the caller's tensors themselves (weights, KV caches:
 * large tensors that stay where they are). Every execution should pass bound inputs at the
 * same addresses: one at another address drops the graph and the fixed state, and the plan
 * runs node by node once and captures again. A plan whose graph writes inputs in place
 * (paged_attention) replays only when each of them is bound; the graph writes the caller's
 * tensors. rtx_plan_execute (host inputs) ignores the binding. RTX_EINVAL for a range outside
 * the graph's inputs. */
int rtx_plan_bind_device_inputs(struct rtx_plan *p, int first, int n, struct rtx_err *err);
/* Why graph capture is off for this plan ("" while it is not): the failed capture's error. */
const char *rtx_plan_capture_note(const struct rtx_plan *p);

/* ------------------------------------------------------------------------------------------
 * NumPy .npy files (format 1.0-3.0, little-endian, C or Fortran order)
 * ---------------------------------------------------------------------------------------- */

/* Loads an .npy of dtype <f4, <f2, |i1, <i4, <i8, |u1 or |b1 (C or Fortran order: the tensor
 * is always contiguous). Other dtypes, float64 among them, give RTX_EUNSUPPORTED naming the
 * dtype. Saving a bf16 tensor writes <f4 (exact), since NumPy has no bfloat16. */
int rtx_npy_load(const char *path, struct rtx_tensor **out, struct rtx_err *err);
int rtx_npy_read(const void *data, size_t len, struct rtx_tensor **out, struct rtx_err *err);
int rtx_npy_save(const char *path, const struct rtx_tensor *t, struct rtx_err *err);
/* DIR/NAME.npy for a tensor named NAME: '/' and ':' in NAME become '_' (so do the names "."
 * and ".."), and when that path is among taken[0..n_taken) a suffix _2, _3, ... keeps the
 * files apart. The string comes from rtx_malloc (rtx_free it); NULL when out of memory. */
char *rtx_npy_output_path(const char *dir, const char *name, char *const *taken, int n_taken);
/* Creates directory `path` and its missing parents (mkdir -p). 0 or -errno. */
int rtx_make_dirs(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* RTX_RUNTIME_H */
