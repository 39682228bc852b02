/*
 * rtx.h - librtx, the C client of rtxd: connect to a daemon, build graphs, submit them as
 * jobs, wait for jobs, fetch their outputs, ask the daemon's admin service for its status,
 * devices, health and settings, list, load, unload and describe its served models, and
 * stream text from its generative models.
 *
 * DESIGN
 * librtx speaks the rtx.v1 protocol (proto/rtx/v1/{graph,jobs,admin}.proto) and, for models,
 * the KServe v2 inference protocol (proto/inference/) over gRPC, and depends only on gRPC
 * core and protobuf-c, never on rtxd's runtime. This header includes
 * nothing of either: the protocol messages stay inside the library.
 *
 * Threads. One struct rtx_client may be used by any number of threads at once. It holds one
 * gRPC channel (one HTTP/2 connection over which calls are multiplexed). Each call creates
 * its own completion queue and the calling thread blocks on it until the call ends, so
 * librtx starts no threads of its own and runs every callback on the thread that made the
 * call. Graphs, tensors and results are plain data: share them between threads only with
 * your own locking (reading them from several threads at once is fine).
 *
 * Errors. Every function that can fail returns an int: 0 on success, a negative
 * RTX_CLIENT_E* code on failure (other non-negative values are documented per function).
 * Details go into a caller-owned struct rtx_client_err, which every such function accepts
 * and which may be NULL. Failed calls never leave partial results behind: output pointers
 * are set to NULL (or left untouched where documented) and nothing needs freeing.
 *
 * Memory. Everything librtx returns through a pointer-to-pointer is allocated by librtx and
 * released with the matching *_free function; every *_free accepts NULL. Strings inside a
 * result belong to that result and live until it is freed.
 *
 * Deadlines. Each unary call gets the timeout given to rtx_client_connect; Wait streams get
 * their own timeout. A call that runs past its deadline fails with RTX_CLIENT_ETIMEDOUT.
 */
#ifndef RTX_CLIENT_H
#define RTX_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

/* The error codes and their fixed messages. Server errors arrive as gRPC status codes and
 * map onto these codes as follows:
 *   INVALID_ARGUMENT, OUT_OF_RANGE       -> RTX_CLIENT_EINVAL
 *   NOT_FOUND                            -> RTX_CLIENT_ENOTFOUND
 *   ALREADY_EXISTS                       -> RTX_CLIENT_EEXIST
 *   UNAVAILABLE                          -> RTX_CLIENT_EUNAVAILABLE (no server, draining)
 *   DEADLINE_EXCEEDED                    -> RTX_CLIENT_ETIMEDOUT
 *   CANCELLED                            -> RTX_CLIENT_ECANCELLED
 *   RESOURCE_EXHAUSTED                   -> RTX_CLIENT_ERESOURCE (queue full, too large)
 *   FAILED_PRECONDITION                  -> RTX_CLIENT_EPRECONDITION
 *   ABORTED                              -> RTX_CLIENT_EABORTED
 *   PERMISSION_DENIED, UNAUTHENTICATED   -> RTX_CLIENT_EPERM
 *   UNIMPLEMENTED                        -> RTX_CLIENT_EUNIMPLEMENTED
 *   INTERNAL, UNKNOWN, DATA_LOSS         -> RTX_CLIENT_EINTERNAL
 * RTX_CLIENT_EPROTO, RTX_CLIENT_EIO and RTX_CLIENT_EFORMAT never come from the server:
 * they report a response librtx cannot use, a file that cannot be read or written, and a
 * graph file that does not decode. RTX_CLIENT_EINVAL and RTX_CLIENT_ENOMEM also come from
 * librtx's own argument checks and allocations. */
#define RTX_CLIENT_ERRNO_MAP(X)                                                                 \
    X(EINVAL, "invalid argument")                                                               \
    X(ENOMEM, "out of memory")                                                                  \
    X(ENOTFOUND, "not found")                                                                   \
    X(EEXIST, "already exists")                                                                 \
    X(EUNAVAILABLE, "server unavailable")                                                       \
    X(ETIMEDOUT, "deadline exceeded")                                                           \
    X(ECANCELLED, "call cancelled")                                                             \
    X(ERESOURCE, "resource exhausted")                                                          \
    X(EPRECONDITION, "failed precondition")                                                     \
    X(EABORTED, "aborted")                                                                      \
    X(EPERM, "permission denied")                                                               \
    X(EUNIMPLEMENTED, "not implemented by the server")                                          \
    X(EINTERNAL, "internal error")                                                              \
    X(EPROTO, "protocol error")                                                                 \
    X(EIO, "i/o error")                                                                         \
    X(EFORMAT, "malformed data")

enum rtx_client_errno {
    RTX_CLIENT_OK = 0,
    RTX_CLIENT__ERRNO_FIRST = -2000,
#define RTX_CLIENT_ERRNO_ENUM(name, msg) RTX_CLIENT_##name,
    RTX_CLIENT_ERRNO_MAP(RTX_CLIENT_ERRNO_ENUM)
#undef RTX_CLIENT_ERRNO_ENUM
    RTX_CLIENT__ERRNO_END
};

/* What went wrong. `code` is the RTX_CLIENT_E* code the function returned (0 on success).
 * `grpc_status` is the gRPC status code the call ended with (0 on success), or -1 when the
 * failure happened inside librtx before or after the call (argument checks, allocation,
 * decoding a response, file I/O). `msg` is the server's message when the server gave one,
 * otherwise librtx's own description; it is always NUL-terminated and "" on success. */
struct rtx_client_err {
    int code;
    int grpc_status;
    char msg[1024];
};

/* The fixed message of a code ("not found", ...). Never NULL; unknown codes give
 * "unknown error" and 0 gives "ok". */
const char *rtx_client_strerror(int code);

/* The name of an RTX_CLIENT_E* code without its prefix ("ENOTFOUND"), "OK" for 0, or "?" when
 * unknown. */
const char *rtx_client_errname(int code);

/* ------------------------------------------------------------------------------------------
 * Data types and tensors
 * ---------------------------------------------------------------------------------------- */

/* Element types, with the values of rtx.v1.DataType: {name, short name, bytes/element}. */
#define RTX_CLIENT_DTYPE_MAP(X)                                                                 \
    X(F32, "f32", 4)                                                                            \
    X(F16, "f16", 2)                                                                            \
    X(BF16, "bf16", 2)                                                                          \
    X(I8, "i8", 1)                                                                              \
    X(I32, "i32", 4)                                                                            \
    X(I64, "i64", 8)                                                                            \
    X(U8, "u8", 1)                                                                              \
    X(BOOL, "bool", 1)

enum rtx_client_dtype {
    RTX_CLIENT_DTYPE_UNSPECIFIED = 0,
#define RTX_CLIENT_DTYPE_ENUM(name, str, size) RTX_CLIENT_DTYPE_##name,
    RTX_CLIENT_DTYPE_MAP(RTX_CLIENT_DTYPE_ENUM)
#undef RTX_CLIENT_DTYPE_ENUM
    RTX_CLIENT_DTYPE_COUNT
};

/* The short name of a dtype ("f32", ...), or "?" for UNSPECIFIED and values out of range. */
const char *rtx_client_dtype_name(enum rtx_client_dtype dt);
/* Bytes per element, or 0 for UNSPECIFIED and values out of range. */
size_t rtx_client_dtype_size(enum rtx_client_dtype dt);
/* Looks a dtype up by its short name; returns 0, or RTX_CLIENT_EINVAL for an unknown name. */
int rtx_client_dtype_from_name(const char *name, enum rtx_client_dtype *out);

/* The most dimensions a tensor or a declared value may have (rtxd's limit as well). */
#define RTX_CLIENT_MAX_DIMS 8

/* A dense tensor: row-major (C order), little-endian elements, as rtx.v1.Tensor. bool is one
 * byte per element (0 or 1), f16 IEEE binary16, bf16 the top half of an f32.
 *
 * You may fill one in yourself (on the stack, pointing at your own data) to pass it to
 * rtx_client_submit or rtx_client_graph_add_initializer, which only read it; then `owned` is
 * false and nothing is freed. Tensors that librtx allocates (rtx_client_tensor_new,
 * rtx_client_get_outputs) have `owned` true: their name and data were allocated by librtx and
 * are released with the tensor. */
struct rtx_client_tensor {
    const char *name;                   /* graph input / output name; "" or NULL when none */
    enum rtx_client_dtype dtype;
    int ndim;                           /* 0 (a scalar) .. RTX_CLIENT_MAX_DIMS */
    int64_t dims[RTX_CLIENT_MAX_DIMS];  /* elements per dimension, each >= 0 */
    void *data;                         /* `bytes` bytes; may be NULL when bytes is 0 */
    size_t bytes;                       /* bytes: the element count times the dtype size */
    bool owned;                         /* name and data belong to the tensor */
};

/* Allocates a tensor that owns a copy of `name` and `bytes` bytes of data. When `data` is not
 * NULL it must hold exactly numel(dims) * dtype size bytes, which are copied; when it is NULL
 * the data is zeroed. Returns 0 or RTX_CLIENT_EINVAL (bad dtype, ndim or dimension) or
 * RTX_CLIENT_ENOMEM. Free with rtx_client_tensor_free. */
int rtx_client_tensor_new(const char *name, enum rtx_client_dtype dt, int ndim,
                          const int64_t *dims, const void *data, struct rtx_client_tensor **out,
                          struct rtx_client_err *err);

/* Frees a tensor from rtx_client_tensor_new (its name and data too, as it owns them). Only
 * for tensors librtx allocated one by one; NULL is a no-op. */
void rtx_client_tensor_free(struct rtx_client_tensor *t);

/* Frees an array of n tensors from rtx_client_get_outputs together with what each owns.
 * NULL is a no-op. */
void rtx_client_tensors_free(struct rtx_client_tensor *ts, int n);

/* The number of elements of a shape (1 for ndim 0), or -1 when a dimension is negative or the
 * product overflows. */
int64_t rtx_client_shape_numel(int ndim, const int64_t *dims);

/* ------------------------------------------------------------------------------------------
 * Graphs
 * ---------------------------------------------------------------------------------------- */

/* A computation graph being built or loaded: an rtx.v1.Graph (see docs/ops.md for the ops and
 * their attributes). librtx checks only what it can see locally (names, dtypes, shapes, data
 * sizes, duplicate declarations); rtxd validates the rest when the graph is submitted and
 * rejects it with RTX_CLIENT_EINVAL naming the node. */
struct rtx_client_graph;

/* Creates an empty graph named `name` (NULL or "" for no name), IR version 1. Free with
 * rtx_client_graph_free. Returns 0 or RTX_CLIENT_ENOMEM. */
int rtx_client_graph_new(const char *name, struct rtx_client_graph **out,
                         struct rtx_client_err *err);

/* Frees a graph; NULL is a no-op. */
void rtx_client_graph_free(struct rtx_client_graph *g);

/* Reads an .rtxg file (a serialized rtx.v1.Graph). The loaded graph may be extended with the
 * builder functions below. Returns 0, RTX_CLIENT_EIO when the file cannot be read,
 * RTX_CLIENT_EFORMAT when it does not decode, or RTX_CLIENT_ENOMEM. */
int rtx_client_graph_load(const char *path, struct rtx_client_graph **out,
                          struct rtx_client_err *err);

/* Decodes a serialized rtx.v1.Graph held in memory; errors as rtx_client_graph_load. */
int rtx_client_graph_decode(const void *data, size_t len, struct rtx_client_graph **out,
                            struct rtx_client_err *err);

/* Writes the graph to `path` as a serialized rtx.v1.Graph (an .rtxg file), replacing the file
 * atomically (a temporary file is renamed over it). Returns 0, RTX_CLIENT_EIO or
 * RTX_CLIENT_ENOMEM. */
int rtx_client_graph_save(const struct rtx_client_graph *g, const char *path,
                          struct rtx_client_err *err);

/* Serializes the graph: *data receives a buffer of *len bytes allocated with malloc (release
 * it with free()). Returns 0 or RTX_CLIENT_ENOMEM. */
int rtx_client_graph_encode(const struct rtx_client_graph *g, void **data, size_t *len,
                            struct rtx_client_err *err);

/* Declares a graph input. `ndim` is its rank and `dims` its dimensions, where -1 marks a
 * dimension bound when the job runs (a batch size); ndim -1 declares an input of unknown
 * shape (dims is then ignored and may be NULL). The name must be new among the graph's inputs
 * and initializers. Returns the input's index (>= 0) or RTX_CLIENT_EINVAL / ENOMEM. */
int rtx_client_graph_add_input(struct rtx_client_graph *g, const char *name,
                               enum rtx_client_dtype dt, int ndim, const int64_t *dims,
                               struct rtx_client_err *err);

/* Adds a named constant (a weight): a copy of tensor t, named t->name, which must be new
 * among the graph's inputs and initializers. t's data size must match its dtype and shape.
 * Returns the initializer's index (>= 0) or RTX_CLIENT_EINVAL / ENOMEM. */
int rtx_client_graph_add_initializer(struct rtx_client_graph *g,
                                     const struct rtx_client_tensor *t,
                                     struct rtx_client_err *err);

/* Adds a node running `op` ("gemm", "relu", ...: docs/ops.md) named `name` (NULL or "" for
 * none) that reads the values named in inputs[0..n_inputs) and produces the values named in
 * outputs[0..n_outputs). An input name "" (or NULL) marks an omitted optional input. Values
 * may be used before the node producing them is added. Returns the node's index (>= 0), which
 * the attribute setters take, or RTX_CLIENT_EINVAL / ENOMEM. */
int rtx_client_graph_add_node(struct rtx_client_graph *g, const char *op, const char *name,
                              const char *const *inputs, int n_inputs,
                              const char *const *outputs, int n_outputs,
                              struct rtx_client_err *err);

/* Set attribute `name` of node `node` (an index from rtx_client_graph_add_node) to an
 * integer, a float, a string, a list of integers, a list of floats or a tensor (copied).
 * Booleans are integers 0 or 1. Each attribute may be set once per node. Return 0 or
 * RTX_CLIENT_EINVAL (bad node index, empty or repeated name) / ENOMEM. */
int rtx_client_graph_set_attr_int(struct rtx_client_graph *g, int node, const char *name,
                                  int64_t v, struct rtx_client_err *err);
int rtx_client_graph_set_attr_float(struct rtx_client_graph *g, int node, const char *name,
                                    double v, struct rtx_client_err *err);
int rtx_client_graph_set_attr_string(struct rtx_client_graph *g, int node, const char *name,
                                     const char *v, struct rtx_client_err *err);
int rtx_client_graph_set_attr_ints(struct rtx_client_graph *g, int node, const char *name,
                                   const int64_t *v, int n, struct rtx_client_err *err);
int rtx_client_graph_set_attr_floats(struct rtx_client_graph *g, int node, const char *name,
                                     const double *v, int n, struct rtx_client_err *err);
int rtx_client_graph_set_attr_tensor(struct rtx_client_graph *g, int node, const char *name,
                                     const struct rtx_client_tensor *t,
                                     struct rtx_client_err *err);

/* Marks the value called `name` as a graph output (outputs are returned in the order they
 * were added). Returns the output's index (>= 0) or RTX_CLIENT_EINVAL / ENOMEM. */
int rtx_client_graph_add_output(struct rtx_client_graph *g, const char *name,
                                struct rtx_client_err *err);

/* A declared graph input as rtx_client_graph_input reports it. */
struct rtx_client_value_info {
    const char *name;                   /* owned by the graph */
    enum rtx_client_dtype dtype;
    int ndim;                           /* -1 when the shape is not declared */
    int64_t dims[RTX_CLIENT_MAX_DIMS];  /* -1 for a dimension bound at run time */
};

/* The graph's name ("" when none); owned by the graph. */
const char *rtx_client_graph_name(const struct rtx_client_graph *g);
/* Counts of declared inputs, outputs, nodes and initializers. */
int rtx_client_graph_n_inputs(const struct rtx_client_graph *g);
int rtx_client_graph_n_outputs(const struct rtx_client_graph *g);
int rtx_client_graph_n_nodes(const struct rtx_client_graph *g);
int rtx_client_graph_n_initializers(const struct rtx_client_graph *g);
/* Describes input i (0 .. n_inputs-1). Returns 0, or RTX_CLIENT_EINVAL when i is out of range
 * or the input declares more than RTX_CLIENT_MAX_DIMS dimensions or an unknown dtype. */
int rtx_client_graph_input(const struct rtx_client_graph *g, int i,
                           struct rtx_client_value_info *out, struct rtx_client_err *err);
/* The name of output i, or NULL when i is out of range; owned by the graph. */
const char *rtx_client_graph_output(const struct rtx_client_graph *g, int i);

/* ------------------------------------------------------------------------------------------
 * Connections
 * ---------------------------------------------------------------------------------------- */

struct rtx_client;

/* The per-call timeout rtx_client_connect uses when given 0, in milliseconds. */
#define RTX_CLIENT_DEFAULT_TIMEOUT_MS 10000

/* Creates a client for the rtxd at `address` ("HOST:PORT", "dns:///host:port",
 * "unix:/path"; rtxd's default is "127.0.0.1:8001"). `timeout_ms` is the deadline of every
 * unary call made through it (0 means RTX_CLIENT_DEFAULT_TIMEOUT_MS). Connecting is lazy:
 * this function does no network I/O, and a call made while no server answers fails with
 * RTX_CLIENT_EUNAVAILABLE. The client accepts response messages of any size (rtxd enforces
 * its own limit on requests). Returns 0, RTX_CLIENT_EINVAL (empty address, negative timeout)
 * or RTX_CLIENT_ENOMEM. Release with rtx_client_close. */
int rtx_client_connect(const char *address, int timeout_ms, struct rtx_client **out,
                       struct rtx_client_err *err);

/* Closes the connection and frees the client. No call may be in progress on it (from any
 * thread) and none may start afterwards. Results obtained through it stay valid (free them
 * as usual). NULL is a no-op. */
void rtx_client_close(struct rtx_client *c);

/* The address and the per-call timeout (milliseconds) the client was created with. */
const char *rtx_client_address(const struct rtx_client *c);
int rtx_client_timeout_ms(const struct rtx_client *c);

/* Longest request id, including the terminating NUL. */
#define RTX_CLIENT_REQUEST_ID_MAX 128

/* Every call carries an x-request-id metadata entry that rtxd puts on each log line it
 * writes while serving the call. By default librtx generates a fresh id per call
 * ("rtxc-" and 16 hex digits). This sets the id of the next call that the calling thread
 * makes on c (and only that one: later calls get generated ids again); NULL or "" drops an
 * id set before. An id is 1..127 printable ASCII characters. Returns 0 or RTX_CLIENT_EINVAL. */
int rtx_client_set_request_id(struct rtx_client *c, const char *id, struct rtx_client_err *err);

/* The x-request-id of the last call the calling thread made on c, or "" when this thread has
 * made none on c since its last call on another client. The string is thread-local and
 * valid until this thread's next call. */
const char *rtx_client_last_request_id(const struct rtx_client *c);

/* ------------------------------------------------------------------------------------------
 * Jobs
 * ---------------------------------------------------------------------------------------- */

/* Job states, with the values of rtx.v1.JobState: {name, name string}. */
#define RTX_CLIENT_JOB_STATE_MAP(X)                                                             \
    X(UNSPECIFIED, "unspecified")                                                               \
    X(QUEUED, "queued")                                                                         \
    X(RUNNING, "running")                                                                       \
    X(SUCCEEDED, "succeeded")                                                                   \
    X(FAILED, "failed")                                                                         \
    X(CANCELLED, "cancelled")                                                                   \
    X(EXPIRED, "expired")

enum rtx_client_job_state {
#define RTX_CLIENT_JOB_STATE_ENUM(name, str) RTX_CLIENT_JOB_##name,
    RTX_CLIENT_JOB_STATE_MAP(RTX_CLIENT_JOB_STATE_ENUM)
#undef RTX_CLIENT_JOB_STATE_ENUM
    RTX_CLIENT_JOB_STATE_COUNT
};

/* "queued", ...; "?" when out of range. */
const char *rtx_client_job_state_name(enum rtx_client_job_state s);
/* Looks a state up by name; returns 0 or RTX_CLIENT_EINVAL. */
int rtx_client_job_state_from_name(const char *name, enum rtx_client_job_state *out);
/* Whether a state is final: succeeded, failed, cancelled or expired. */
bool rtx_client_job_state_is_terminal(enum rtx_client_job_state s);

/* What a daemon restart does with a job that was running, as rtx.v1.RestartPolicy. */
enum rtx_client_restart_policy {
    RTX_CLIENT_RESTART_DEFAULT = 0,     /* the daemon's setting jobs.restart_policy */
    RTX_CLIENT_RESTART_RERUN = 1,       /* queue it again */
    RTX_CLIENT_RESTART_FAIL = 2,        /* fail it with "interrupted by restart" */
    RTX_CLIENT_RESTART_COUNT
};
/* "default", "rerun", "fail"; "?" when out of range. */
const char *rtx_client_restart_policy_name(enum rtx_client_restart_policy p);
/* Looks a policy up by name; returns 0 or RTX_CLIENT_EINVAL. */
int rtx_client_restart_policy_from_name(const char *name, enum rtx_client_restart_policy *out);

/* A key/value label. In requests the strings are yours; in results they belong to the
 * result. */
struct rtx_client_label {
    const char *key;
    const char *value;
};

/* Options of rtx_client_submit; zero-initialize and set what you need. */
struct rtx_client_submit_options {
    const char *lane;                   /* NULL or "": the daemon's default lane */
    int64_t deadline_unix_ms;           /* 0: none; a job not started by then expires */
    const struct rtx_client_label *labels;
    int n_labels;
    const char *idempotency_key;        /* NULL or "": none */
    enum rtx_client_restart_policy restart_policy;
    const char *device;                 /* NULL or "": the daemon's setting jobs.device; "auto"
                                           (a healthy GPU, else the CPU), "cpu", "cuda" (any
                                           healthy GPU), "cuda:N" */
};

/* Longest job id, including the terminating NUL. */
#define RTX_CLIENT_JOB_ID_MAX 64

/* Submits graph g with its inputs (bound to graph inputs by tensor name) as a job. opt may be
 * NULL for the defaults. On success, rtxd has journaled the job durably: job_id receives its
 * id and *deduplicated (may be NULL) tells whether the idempotency key matched an existing
 * job, whose id is then returned instead. The request is serialized straight from the graph
 * and from your input buffers (no intermediate copy). Returns
 * 0; RTX_CLIENT_EINVAL for a graph or inputs rtxd rejects (the message names the problem) or
 * an unknown lane; RTX_CLIENT_EUNAVAILABLE when rtxd is draining or its queue is full; or any
 * other code of the table above. */
int rtx_client_submit(struct rtx_client *c, const struct rtx_client_graph *g,
                      const struct rtx_client_tensor *inputs, int n_inputs,
                      const struct rtx_client_submit_options *opt,
                      char job_id[RTX_CLIENT_JOB_ID_MAX], bool *deduplicated,
                      struct rtx_client_err *err);

/* As rtx_client_submit, for an ONNX model: model holds the bytes of an .onnx file (len bytes,
 * initializers inline; read during the call only). rtxd converts the model for the shapes of
 * the inputs (bound to the model's graph inputs by name) before it journals the job, so a
 * model it cannot run (an unsupported op, a malformed file; the message names them) gives
 * RTX_CLIENT_EINVAL here. The job is then an ordinary job (docs/onnx.md). */
int rtx_client_submit_onnx(struct rtx_client *c, const void *model, size_t len,
                           const struct rtx_client_tensor *inputs, int n_inputs,
                           const struct rtx_client_submit_options *opt,
                           char job_id[RTX_CLIENT_JOB_ID_MAX], bool *deduplicated,
                           struct rtx_client_err *err);

/* A job output as described in the job (without its data: see rtx_client_get_outputs). */
struct rtx_client_output_info {
    const char *name;
    enum rtx_client_dtype dtype;
    int ndim;
    int64_t dims[RTX_CLIENT_MAX_DIMS];
    int64_t bytes;                      /* bytes of data */
    const char *sha256;                 /* hex digest of the data */
};

/* A job, as rtx.v1.Job. Times are unix milliseconds, 0 when not (yet) set. */
struct rtx_client_job {
    const char *id;
    enum rtx_client_job_state state;
    const char *reason;                 /* why it failed, cancel/expiry note; "" when none */
    const char *lane;
    int n_labels;
    const struct rtx_client_label *labels;
    const char *graph_name;
    const char *idempotency_key;        /* "" when none */
    enum rtx_client_restart_policy restart_policy;
    int64_t created_unix_ms;
    int64_t started_unix_ms;
    int64_t finished_unix_ms;
    int64_t deadline_unix_ms;
    int attempts;                       /* runs started */
    double run_ms;                      /* milliseconds the last run took */
    int64_t peak_bytes;                 /* bytes */
    int n_outputs;                      /* set once succeeded */
    const struct rtx_client_output_info *outputs;
    bool outputs_available;             /* false once retention deleted them */
    const char *device;                 /* where it runs or ran: "cpu", "cuda:0"; "" before */
    const char *requested_device;       /* as submitted, the default applied: "auto", "cpu",
                                           "cuda", "cuda:N" ("" from an older daemon) */
    const char *exec_mode;              /* how its last run executed: "plain", "fixed",
                                           "captured" or "replayed" (a CUDA graph); "" when
                                           unknown (not run since the daemon started) */
    bool plan_reused;                   /* the last run used a plan kept from an earlier job */
    const char *failure_code;           /* of a failed job: the gRPC status name of its
                                           failure ("RESOURCE_EXHAUSTED", "UNAVAILABLE",
                                           "INTERNAL"); "" otherwise or from an older daemon */
};

/* Fetches job `job_id`. *out is freed with rtx_client_job_free. Returns 0,
 * RTX_CLIENT_ENOTFOUND for an unknown id, or another code. */
int rtx_client_get_job(struct rtx_client *c, const char *job_id, struct rtx_client_job **out,
                       struct rtx_client_err *err);

/* Frees a job from rtx_client_get_job, rtx_client_wait_job or rtx_client_cancel_job (not one
 * inside a struct rtx_client_job_list). NULL is a no-op. */
void rtx_client_job_free(struct rtx_client_job *job);

/* Called by rtx_client_wait_job with the job as it is when the wait starts and then at each
 * state change, on the waiting thread. `job` is valid only during the call. */
typedef void (*rtx_client_wait_cb)(void *ctx, const struct rtx_client_job *job);

/* A timeout_ms for rtx_client_wait_job that waits without a deadline. */
#define RTX_CLIENT_WAIT_FOREVER (-1)

/* Waits until job `job_id` reaches a terminal state (succeeded, failed, cancelled, expired)
 * through the server-streaming Wait call. `timeout_ms` bounds the whole wait: > 0 that many
 * milliseconds, 0 the client's per-call timeout, RTX_CLIENT_WAIT_FOREVER none. cb (may be
 * NULL) sees every state the stream reports. On success *out (may be NULL) receives the job
 * in its terminal state; free it with rtx_client_job_free. A job that ended failed,
 * cancelled or expired is a successful wait: look at (*out)->state. Returns 0,
 * RTX_CLIENT_ETIMEDOUT when the timeout passed first, RTX_CLIENT_ENOTFOUND for an unknown id,
 * or another code. */
int rtx_client_wait_job(struct rtx_client *c, const char *job_id, int64_t timeout_ms,
                        rtx_client_wait_cb cb, void *ctx, struct rtx_client_job **out,
                        struct rtx_client_err *err);

/* Cancels a job: a queued job is cancelled at once, a running one at its next op boundary
 * (wait for it to see the final state); a job already in a terminal state is left as it is.
 * *out (may be NULL) receives the job as it is after the call; free it with
 * rtx_client_job_free. Returns 0, RTX_CLIENT_ENOTFOUND for an unknown id, or another code. */
int rtx_client_cancel_job(struct rtx_client *c, const char *job_id, struct rtx_client_job **out,
                          struct rtx_client_err *err);

/* Which jobs rtx_client_list_jobs returns; zero-initialize and set what you need. */
struct rtx_client_list_filter {
    const enum rtx_client_job_state *states; /* any of these; none: every state */
    int n_states;
    const struct rtx_client_label *labels;   /* all of these must match */
    int n_labels;
    int64_t created_after_unix_ms;           /* 0: no bound */
    int64_t created_before_unix_ms;          /* 0: no bound */
    int page_size;                           /* 0: the server's default (100); at most 1000 */
};

/* One page of jobs, newest first. */
struct rtx_client_job_list {
    int n_jobs;
    struct rtx_client_job *jobs;
    const char *next_page_token;        /* pass it to get the next page; "" on the last page */
};

/* Lists jobs matching `filter` (NULL: all), starting at `page_token` (NULL or "" for the
 * first page). *out is freed with rtx_client_job_list_free. Returns 0, RTX_CLIENT_EINVAL for a
 * bad filter or page token, or another code. */
int rtx_client_list_jobs(struct rtx_client *c, const struct rtx_client_list_filter *filter,
                         const char *page_token, struct rtx_client_job_list **out,
                         struct rtx_client_err *err);

/* Frees a job list and the jobs in it; NULL is a no-op. */
void rtx_client_job_list_free(struct rtx_client_job_list *list);

/* Fetches the outputs of a succeeded job, in the graph's output order, as an array of *n
 * tensors that own their names and data. Free with rtx_client_tensors_free(*out, *n).
 * Returns 0, RTX_CLIENT_ENOTFOUND for an unknown id, or the server's error when the job has
 * no outputs (not succeeded, or deleted by retention), or another code. */
int rtx_client_get_outputs(struct rtx_client *c, const char *job_id,
                           struct rtx_client_tensor **out, int *n, struct rtx_client_err *err);

/* ------------------------------------------------------------------------------------------
 * Administration
 * ---------------------------------------------------------------------------------------- */

/* A compute device of the daemon, as rtx.v1.Device. */
/* One consumer's share of a device's memory budget ("jobs", "model NAME:VERSION"). */
struct rtx_client_device_consumer {
    const char *name;
    int64_t reserved_bytes;             /* bytes */
    int64_t used_bytes;                 /* bytes */
    int64_t peak_bytes;                 /* bytes */
    int64_t refusals;                   /* charges refused for want of share */
};

struct rtx_client_device {
    int index;
    const char *kind;                   /* "cpu", "cuda" */
    const char *name;
    int threads;                        /* CPU worker threads (cpu) */
    int sm_count;                       /* multiprocessors (cuda) */
    int64_t memory_bytes;               /* bytes */
    const char *compute_capability;     /* "9.0" (cuda); "" otherwise */
    bool healthy;                       /* cuda: false after a sticky device error */
    const char *detail;                 /* why not healthy; "" otherwise */
    int workers;                        /* job workers running on it */
    /* The device layer's figures (0 from an older daemon). */
    int64_t budget_bytes;               /* bytes: its memory budget */
    int64_t reserved_bytes;             /* bytes: the consumers' reservations */
    int64_t used_bytes;                 /* bytes: charged by every consumer now */
    int64_t plan_cache_hits, plan_cache_misses, plan_cache_evictions; /* since start */
    int plans_kept;                     /* plans its cache keeps now */
    int backends;                       /* backends made on it (its executors) */
    int n_consumers;
    const struct rtx_client_device_consumer *consumers;
};

/* Jobs in one scheduling lane. */
struct rtx_client_lane_depth {
    const char *lane;
    int queued;
    int running;
};

/* The daemon's job store. */
struct rtx_client_store_health {
    bool ok;
    const char *path;
    int64_t db_bytes;                   /* bytes */
    int64_t jobs;
    int64_t blob_bytes;                 /* bytes of stored outputs */
    const char *last_error;             /* "" when none */
};

/* The daemon's status, as rtx.v1.StatusResponse. */
struct rtx_client_status {
    const char *version;
    const char *build_id;
    int64_t uptime_ms;                  /* milliseconds */
    int n_devices;
    const struct rtx_client_device *devices;
    int n_lanes;
    const struct rtx_client_lane_depth *lanes;
    struct rtx_client_store_health store;
    bool draining;
    int64_t jobs_succeeded;             /* since the daemon started */
    int64_t jobs_failed;
};

/* Fetches the daemon's status; free *out with rtx_client_status_free. Returns 0 or an error
 * code. */
int rtx_client_get_status(struct rtx_client *c, struct rtx_client_status **out,
                          struct rtx_client_err *err);
void rtx_client_status_free(struct rtx_client_status *st); /* NULL is a no-op */

struct rtx_client_device_list {
    int n_devices;
    const struct rtx_client_device *devices;
};

/* Lists the daemon's devices; free *out with rtx_client_device_list_free. Returns 0 or an
 * error code. */
int rtx_client_list_devices(struct rtx_client *c, struct rtx_client_device_list **out,
                            struct rtx_client_err *err);
void rtx_client_device_list_free(struct rtx_client_device_list *list); /* NULL: no-op */

/* The memory pools of one device, as rtx.v1.PoolStats: the sums over the caching pools of the
 * device's job workers (see docs/daemon.md). */
struct rtx_client_pool {
    const char *device;                 /* "cuda:0", "cuda:0/pinned", "cpu" */
    const char *kind;                   /* "cuda", "pinned", "cpu" */
    int pools;                          /* caching pools summed; 0 for the CPU (none) */
    int64_t allocated_bytes;            /* bytes in blocks held by callers */
    int64_t reserved_bytes;             /* bytes obtained from the device */
    int64_t active_bytes;               /* allocated + held back for stream events */
    int64_t allocated_peak_bytes;       /* the CPU: the largest peak of a job run on it */
    int64_t reserved_peak_bytes;
    double fragmentation;               /* 1 - largest free block / free bytes */
    int64_t alloc_retries;              /* allocations retried after releasing the cache */
    int64_t ooms;                       /* allocations failed for lack of memory */
    int64_t cap_bytes;                  /* per pool; 0 = no cap */
    int64_t free_bytes;                 /* cached in free blocks */
    int64_t allocs;
    int64_t cache_hits;                 /* allocations served without a new segment */
    int64_t segments;
    bool healthy;
    const char *detail;                 /* why not healthy; for the CPU, what the row means */
};

struct rtx_client_pool_list {
    int n_pools;
    const struct rtx_client_pool *pools;
};

/* Lists the memory pools of the daemon's devices (each CUDA device jobs run on, its pinned
 * host pool, the CPU); free *out with rtx_client_pool_list_free. Returns 0 or an error code
 * (RTX_CLIENT_EUNIMPLEMENTED from a daemon without Admin.Pools). */
int rtx_client_list_pools(struct rtx_client *c, struct rtx_client_pool_list **out,
                          struct rtx_client_err *err);
void rtx_client_pool_list_free(struct rtx_client_pool_list *list); /* NULL: no-op */

/* One lane of one device's SLA scheduler, as rtx.v1.LaneStats (times in µs; see
 * docs/scheduler.md). */
struct rtx_client_lane {
    const char *device;                 /* the scheduler: "cpu", "cuda:0", "inference" */
    const char *lane;
    int priority;                       /* 0 = the highest lane */
    int64_t target_p99_us;              /* latency target (wait + run) */
    int weight;                         /* share across lanes */
    int64_t max_queued;                 /* queue bound */
    const char *on_timeout;             /* "reject" or "delay" */
    bool preemptible;
    int64_t queued, delayed, running;   /* depth now */
    int64_t queued_work_us;             /* estimated run time of the queued jobs */
    int64_t est_delay_us;               /* estimated queueing delay of a job arriving now */
    double pressure;                    /* est_delay / target */
    bool shed;                          /* refused by brownout now */
    int64_t wait_samples;               /* dispatched jobs the wait figures cover */
    int64_t wait_p50_us, wait_p90_us, wait_p99_us, wait_max_us; /* enqueue to dispatch */
    int64_t admitted, rejected_full, rejected_deadline, rejected_shed; /* since start */
    int64_t expired, dispatched, completed, failed, cancelled, preempted;
};

/* The scheduler of one device that runs jobs, or the inference lanes summed over every model
 * version (kind "inference", device "inference"), as rtx.v1.LaneScheduler. */
struct rtx_client_lane_scheduler {
    const char *device;
    const char *kind;                   /* "jobs", "inference" ("" from an older daemon) */
    int executors;                      /* its job workers */
    bool healthy;
    int64_t running;
    int brownout_level;                 /* lanes shed now; 0 = not in brownout */
    int64_t brownout_entries, brownout_exits;
    double batch_delay_factor;
    int64_t cost_keys;                  /* graphs whose run time it has learned */
};

struct rtx_client_lane_list {
    const char *default_lane;
    int n_schedulers;
    const struct rtx_client_lane_scheduler *schedulers;
    int n_lanes;                        /* per scheduler, in lane order */
    const struct rtx_client_lane *lanes;
};

/* Lists the SLA lanes of the daemon's device schedulers; free *out with
 * rtx_client_lane_list_free. Returns 0 or an error code (RTX_CLIENT_EUNIMPLEMENTED from a
 * daemon without Admin.Lanes). */
int rtx_client_list_lanes(struct rtx_client *c, struct rtx_client_lane_list **out,
                          struct rtx_client_err *err);
void rtx_client_lane_list_free(struct rtx_client_lane_list *list); /* NULL: no-op */

/* One SLA lane of a generation engine (rtx.v1.GenerationLane). */
struct rtx_client_gen_lane {
    const char *lane;
    int running, waiting;               /* sequences now */
    int64_t preempted, refused;         /* since the engine started */
};

/* A latency histogram of an engine summarized (rtx.v1.LatencySummary), seconds. p50_s and
 * p99_s are estimated from the histogram's buckets as Prometheus' histogram_quantile does;
 * every figure is 0 when count is 0. */
struct rtx_client_gen_latency {
    int64_t count;
    double sum_s, mean_s, p50_s, p99_s;
};

/* One ready generative model version and its engine (rtx.v1.GenerationModel); counters are
 * since the engine started. */
struct rtx_client_gen_model {
    const char *name;
    int64_t version;
    const char *device;                 /* "cpu", "cuda:0" */
    const char *arch;                   /* "gpt2", "llama", "qwen2" */
    int context_length;                 /* tokens a sequence may hold */
    int n_lanes;
    const struct rtx_client_gen_lane *lanes;
    int64_t kv_blocks_total, kv_blocks_used; /* used: held by sequences */
    int64_t kv_blocks_cached;           /* free but holding reusable prefix tokens */
    int block_size;                     /* tokens per block */
    int64_t kv_cache_bytes, weight_bytes; /* bytes on the device */
    int64_t prefix_queries, prefix_hits; /* full blocks looked up in / found in the cache */
    double prefix_hit_rate;             /* hits / queries; 0 when none */
    int64_t kv_evictions;
    int64_t prompt_tokens;              /* computed (not served from the prefix cache) */
    int64_t generation_tokens;
    int64_t requests_finished, requests_canceled, requests_failed;
    int64_t steps;
    struct rtx_client_gen_latency ttft; /* arrival to first token */
    struct rtx_client_gen_latency itl;  /* between two tokens of a sequence */
    struct rtx_client_gen_latency tpot; /* a finished sequence's time per output token */
    struct rtx_client_gen_latency e2e;  /* arrival to the end of a finished request */
};

struct rtx_client_generation {
    int n_models;
    const struct rtx_client_gen_model *models; /* by name */
};

/* The generation engines of the daemon's ready generative models, or of model `model` alone
 * (NULL or "": all); free *out with rtx_client_generation_free. Returns 0 or an error code:
 * RTX_CLIENT_ENOTFOUND for a model the daemon does not know, RTX_CLIENT_EINVAL for one that
 * is not generative, RTX_CLIENT_EUNAVAILABLE for one that is not ready,
 * RTX_CLIENT_EUNIMPLEMENTED from a daemon without Admin.Generation. */
int rtx_client_generation(struct rtx_client *c, const char *model,
                          struct rtx_client_generation **out, struct rtx_client_err *err);
void rtx_client_generation_free(struct rtx_client_generation *g); /* NULL: no-op */

enum rtx_client_serving_status {
    RTX_CLIENT_SERVING_UNSPECIFIED = 0,
    RTX_CLIENT_SERVING = 1,
    RTX_CLIENT_NOT_SERVING = 2,         /* draining, or the store is failing */
};

struct rtx_client_health {
    enum rtx_client_serving_status status;
    const char *detail;
};

/* Asks whether the daemon serves; free *out with rtx_client_health_free. A daemon that does
 * not serve still answers (status RTX_CLIENT_NOT_SERVING): the call itself succeeds. Returns 0
 * or an error code. */
int rtx_client_get_health(struct rtx_client *c, struct rtx_client_health **out,
                          struct rtx_client_err *err);
void rtx_client_health_free(struct rtx_client_health *h); /* NULL is a no-op */

/* One daemon setting, as rtx.v1.Setting. */
struct rtx_client_setting {
    const char *name;                   /* "server.listen", ... */
    const char *value;
    const char *origin;                 /* "default", "file", "env", "flag", "reload" */
    bool is_mutable;                    /* changes on SIGHUP */
    const char *description;
};

struct rtx_client_config {
    int n_settings;
    const struct rtx_client_setting *settings;
};

/* Fetches every daemon setting with its value and origin; free *out with
 * rtx_client_config_free. Returns 0 or an error code. */
int rtx_client_get_config(struct rtx_client *c, struct rtx_client_config **out,
                          struct rtx_client_err *err);
void rtx_client_config_free(struct rtx_client_config *cfg); /* NULL is a no-op */

/* What rtx_client_drain reports. */
struct rtx_client_drain_result {
    int running;                        /* jobs still running when the drain began */
    int queued;                         /* jobs kept in the journal for the next start */
};

/* Asks the daemon to drain: it stops accepting jobs, lets running jobs finish within
 * `grace_ms` milliseconds (0: its setting drain.grace_ms), keeps queued jobs for its next
 * start, and exits. *out (may be NULL, caller-owned) receives the counts. Returns 0 or an
 * error code. */
int rtx_client_drain(struct rtx_client *c, int grace_ms, struct rtx_client_drain_result *out,
                     struct rtx_client_err *err);

/* ------------------------------------------------------------------------------------------
 * Served models (inference.GRPCInferenceService, the KServe v2 protocol: RepositoryIndex,
 * RepositoryModelLoad/Unload, ModelReady, ModelMetadata, ModelConfig, ModelStatistics)
 * ---------------------------------------------------------------------------------------- */

/* One model of the daemon's repository. */
struct rtx_client_model {
    const char *name;
    int64_t version;   /* the loaded (or failed) version; 0 when none */
    const char *state; /* "UNKNOWN", "LOADING", "READY", "UNLOADING", "UNAVAILABLE" */
    const char *reason; /* why UNAVAILABLE; "" otherwise */
};

struct rtx_client_model_list {
    int n_models;
    const struct rtx_client_model *models; /* sorted by name */
};

/* Lists the models of the daemon's repository (ready_only: only READY ones); free *out with
 * rtx_client_model_list_free. Returns 0 or an error code (RTX_CLIENT_EUNAVAILABLE when the
 * daemon serves no model repository). */
int rtx_client_list_models(struct rtx_client *c, bool ready_only,
                           struct rtx_client_model_list **out, struct rtx_client_err *err);
void rtx_client_model_list_free(struct rtx_client_model_list *list); /* NULL is a no-op */

/* Loads (or reloads) model `name` from the repository and returns once it is ready or failed;
 * config_json (may be NULL) replaces its config.json. The daemon must run with
 * models.control=explicit (else RTX_CLIENT_EUNIMPLEMENTED). Returns 0 or an error code
 * (RTX_CLIENT_ENOTFOUND: no such model; RTX_CLIENT_EINVAL: the model failed to load, the
 * message says why). The timeout given to rtx_client_connect applies. */
int rtx_client_load_model(struct rtx_client *c, const char *name, const char *config_json,
                          struct rtx_client_err *err);
/* Unloads model `name` (requests in flight finish first). Returns 0 or an error code. */
int rtx_client_unload_model(struct rtx_client *c, const char *name,
                            struct rtx_client_err *err);

/* A model input or output: KServe datatype ("FP32", ...) and shape, -1 for any size
 * (including the batch dimension when the model batches). */
struct rtx_client_model_tensor {
    const char *name;
    const char *datatype;
    int ndim;
    const int64_t *dims;
};

/* A model version as the daemon describes it: metadata, configuration and statistics. */
struct rtx_client_model_info {
    const char *name;
    int64_t version;
    const char *platform;               /* "rtx_graph" */
    bool ready;
    int max_batch_size;                 /* 0: no batch dimension */
    int n_inputs, n_outputs;
    const struct rtx_client_model_tensor *inputs, *outputs;
    bool dynamic_batching;
    int n_preferred_batch_sizes;
    const int32_t *preferred_batch_sizes;
    int64_t max_queue_delay_us;         /* microseconds */
    int instances;
    const char *instance_kind;          /* "KIND_CPU", "KIND_GPU" */
    /* statistics since the version was loaded */
    int64_t last_inference_ms;          /* unix ms; 0: none yet */
    int64_t inference_count;            /* requests answered (batch elements) */
    int64_t execution_count;            /* batches run */
    int64_t success_count, fail_count;
    int64_t success_ns, queue_ns, compute_infer_ns; /* totals, nanoseconds */
};

/* Describes model `name` (version 0: the newest ready one); free *out with
 * rtx_client_model_info_free. Returns 0 or an error code (RTX_CLIENT_ENOTFOUND for a model
 * the daemon does not know, RTX_CLIENT_EUNAVAILABLE for one that is not ready). */
int rtx_client_get_model(struct rtx_client *c, const char *name, int64_t version,
                         struct rtx_client_model_info **out, struct rtx_client_err *err);
void rtx_client_model_info_free(struct rtx_client_model_info *info); /* NULL is a no-op */

/* ------------------------------------------------------------------------------------------
 * Text generation (a generative model, over the KServe stream inference.ModelStreamInfer)
 * ---------------------------------------------------------------------------------------- */

/* Sampling and stopping of rtx_client_generate. Zero-initialized options decode greedily
 * (temperature 0) with the model's other defaults; set temperature < 0 for the model's own
 * temperature. */
struct rtx_client_generate_options {
    int max_tokens;                     /* tokens to generate; 0: the model's default */
    double temperature;                 /* 0: greedy; < 0: the model's default; else <= 100 */
    double top_p;                       /* (0, 1]; 0: the model's default */
    int top_k;                          /* > 0; 0: the model's default; -1: off */
    bool has_seed;
    uint64_t seed;                      /* with has_seed: reproducible sampling */
    const char *const *stop;            /* n_stop strings that end the text (not included) */
    int n_stop;                         /* at most 8 */
    const char *lane;                   /* SLA lane; NULL or "": the daemon's default */
    int64_t timeout_ms;                 /* deadline of the whole call; 0: none */
    /* Set to nonzero (from any thread or a signal handler) to cancel: librtx looks at it every
     * 50 ms, cancels the stream (the daemon frees the sequence) and returns
     * RTX_CLIENT_ECANCELLED. NULL: not watched. */
    const volatile int *cancel;
};

/* Called with each piece of new text as the daemon streams it (UTF-8, whole characters;
 * not NUL-terminated), on the calling thread. Return 0 to go on, nonzero to cancel the
 * generation (rtx_client_generate then returns RTX_CLIENT_ECANCELLED). */
typedef int (*rtx_client_text_cb)(void *ctx, const char *text, size_t len);

/* What a generation produced. Caller-owned; rtx_client_generate fills it (also as far as it
 * got when it fails or is cancelled); release the text with rtx_client_generate_result_clear. */
struct rtx_client_generate_result {
    char *text;                         /* everything generated, NUL-terminated (malloc) */
    size_t len;                         /* bytes of text */
    char finish_reason[16];             /* "stop" (EOS or a stop string), "length"; "" when
                                           the generation did not finish */
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;                  /* prompt tokens served from the prefix cache */
    int chunks;                         /* responses with new text */
    char request_id[RTX_CLIENT_REQUEST_ID_MAX]; /* the call's x-request-id */
};
/* Frees res->text and zeroes res; NULL is a no-op. */
void rtx_client_generate_result_clear(struct rtx_client_generate_result *res);

/* Generates text from `prompt` with the generative model `model` (its newest ready version):
 * streams the new text to on_text (may be NULL) as it comes and fills *res (may be NULL).
 * opt may be NULL (greedy, the model's defaults). Returns 0 when the generation finished;
 * RTX_CLIENT_EINVAL for a bad option or a request the daemon refuses (the message names the
 * field: a temperature out of range, a prompt longer than the model's context, a model that
 * is not generative); RTX_CLIENT_ENOTFOUND for an unknown model; RTX_CLIENT_ERESOURCE when
 * the lane cannot take it now (retry later); RTX_CLIENT_ECANCELLED when on_text or
 * opt->cancel cancelled it; RTX_CLIENT_ETIMEDOUT past opt->timeout_ms; or another code. */
int rtx_client_generate(struct rtx_client *c, const char *model, const char *prompt,
                        const struct rtx_client_generate_options *opt, rtx_client_text_cb on_text,
                        void *ctx, struct rtx_client_generate_result *res,
                        struct rtx_client_err *err);

#ifdef __cplusplus
}
#endif
#endif /* RTX_CLIENT_H */
