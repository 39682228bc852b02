/*
 * serving.h - the inference core: the model repository (directory per model, sub-directory per
 * version, config.json per model), loaded model versions with their instances, the dynamic
 * batcher and per-model statistics. The front ends (the KServe v2 gRPC service in
 * daemon/handlers-infer.c, the HTTP server in daemon/http.c) turn wire requests into a
 * struct rtx_infer_request and get their answer through its completion callback; they never
 * see plans, backends or batches.
 *
 * DESIGN
 * A model version, once loaded, is immutable and reference counted: a request holds a
 * reference from rtx_serving_infer until its callback returned, so unload and reload never
 * pull a graph from under a running batch (the old version is freed when its last request
 * ends). Each model version has a queue and one worker thread per instance; a worker takes
 * the oldest request and, with dynamic batching on, waits up to max_queue_delay_us for more
 * requests whose non-batch shapes match, stopping early at a preferred batch size or the max
 * batch size; it concatenates the inputs along dimension 0, runs the plan (kept in the
 * device's plan cache, device/device.h, keyed by the model's content digest and the batch's
 * shapes) and splits the outputs back. Batching on and off give identical outputs.
 * Instances run through the device layer: a version's instances on a device share one
 * consumer "model NAME:VERSION" with a memory reservation there; a batch beyond the version's
 * share fails with RTX_ENOMEM and the instance serves the next one; an instance whose device
 * turned unhealthy takes no more batches, and a version none of whose instances is on a
 * healthy device refuses requests with RTX_EUNAVAILABLE and is not ready.
 * Requests are checked against the model's inputs (names, datatypes, shapes, batch size)
 * before they are queued, so a bad request fails in rtx_serving_infer with a message naming
 * the input, and never reaches a worker.
 */
#ifndef RTX_SERVING_H
#define RTX_SERVING_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"

struct rtx_devices;      /* device/device.h */
struct rtx_sched_config; /* scheduler/sched.h */
struct rtx_sched_stats;
struct rtx_mem_pool_stats;

/* ------------------------------------------------------------------------------------------
 * The core
 * ---------------------------------------------------------------------------------------- */

enum rtx_model_control {
    RTX_MODEL_CONTROL_NONE,     /* load every model at start; the repository API refuses */
    RTX_MODEL_CONTROL_EXPLICIT, /* load startup_models at start; load/unload through the API */
    RTX_MODEL_CONTROL_POLL,     /* as NONE, and rescan the repository every poll_ms */
    RTX_MODEL_CONTROL_COUNT
};
/* "none", "explicit", "poll"; and back (0 or RTX_EINVAL). */
const char *rtx_model_control_name(enum rtx_model_control c);
int rtx_model_control_from_name(const char *name, enum rtx_model_control *out);

/* Where the module reports events (a model loaded, a load failed, learned costs not saved):
 * a level, a message and fields as key, value, ..., NULL. The daemon passes its logger. */
enum rtx_serving_log_level {
    RTX_SERVING_LOG_DEBUG,
    RTX_SERVING_LOG_INFO,
    RTX_SERVING_LOG_WARN,
    RTX_SERVING_LOG_ERROR
};
typedef void (*rtx_serving_log_fn)(enum rtx_serving_log_level level, const char *msg,
                                   const char *const *fields);

struct rtx_serving_options {
    const char *repository;               /* model repository directory; "" = serve no models */
    enum rtx_model_control control;
    int poll_ms;                          /* POLL: rescan period, milliseconds */
    int n_startup_models;                 /* EXPLICIT: models loaded at start ("*" = all) */
    const char *const *startup_models;
    struct rtx_limits limits;             /* graph and tensor limits */
    /* The daemon's device set (required; it must outlive the server): instances go to its
     * devices (its GPUs, else the CPU, whose backends get the set's cpu_threads), each loaded
     * version registers one consumer per device it has instances on, and plans are kept in
     * the devices' plan caches. Learned per-request costs go to the set's book (place
     * "infer", key rtx_sched_cost_key("name:version")): a version's first load reads its
     * cost there; changed costs are put and the book saved every 10 s, at unload and at
     * rtx_serving_stop. They outlive a restart when the book was opened on the store
     * (rtx_devices_costs_open), and are not kept when it was never opened. */
    struct rtx_devices *devices;
    int cpu_threads;                      /* threads of each CPU instance's backend (setting
                                             models.cpu_threads); 0: the device set's */
    int64_t max_queue;                    /* pending requests per model; beyond: RTX_EUNAVAILABLE */
    /* SLA lanes of inference requests: every model version gets a scheduler with these lanes
     * and knobs (executors = its instance count; each lane's queue bound capped at max_queue).
     * NULL: rtx_sched_config_init's. Copied; rtx_serving_reconfigure changes them. */
    const struct rtx_sched_config *sched;
    const char *default_lane;             /* lane of a request that names none and whose model
                                           * names none; NULL or "": the last lane */
    rtx_serving_log_fn log;               /* NULL: events are not reported */
};

struct rtx_serving;

/* Scans the repository and loads the models that `control` says; a model that fails to load
 * is listed UNAVAILABLE with its reason and does not stop the others. Fails only for a bad
 * option (RTX_EINVAL), a repository that is not a readable directory (RTX_EIO naming it) or
 * memory. */
int rtx_serving_start(const struct rtx_serving_options *opt, struct rtx_serving **out,
                      struct rtx_err *err);
/* Fails queued requests with RTX_EUNAVAILABLE ("server shutting down"), waits for running
 * batches, stops the workers and the poller and frees everything. NULL: no-op. Every callback
 * has been called once when it returns. */
void rtx_serving_stop(struct rtx_serving *s);
/* New lane settings and scheduler knobs after SIGHUP (the server's lanes in the same order;
 * cost_keys unchanged): every READY version's scheduler takes them by the rules of its load
 * (queue bounds capped at max_queue, its own executors), and versions loaded from now on
 * start with them; a load in progress gives its versions the new settings before they serve.
 * All or nothing: RTX_EINVAL for a bad config or another lane set, RTX_ENOMEM for a raised
 * bound, and then every version keeps what it had. Queued requests stay. Never waits for a
 * load. */
int rtx_serving_reconfigure(struct rtx_serving *s, const struct rtx_sched_config *sched,
                            struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Repository
 * ---------------------------------------------------------------------------------------- */

enum rtx_model_state {
    RTX_MODEL_UNKNOWN,     /* in the repository, never loaded */
    RTX_MODEL_LOADING,
    RTX_MODEL_READY,
    RTX_MODEL_UNLOADING,
    RTX_MODEL_UNAVAILABLE, /* unloaded, or failed to load (reason says which) */
    RTX_MODEL_STATE_COUNT
};
/* "UNKNOWN", "LOADING", "READY", "UNLOADING", "UNAVAILABLE" (Triton's spellings). */
const char *rtx_model_state_name(enum rtx_model_state st);

struct rtx_model_index_entry {
    char name[128];
    int64_t version;         /* 0 when the model has no loaded or failed version */
    enum rtx_model_state state;
    char reason[1024];        /* why UNAVAILABLE; "" otherwise */
};

/* Every model in the repository directory and every model loaded (ready_only: READY ones),
 * sorted by name. *entries is rtx_malloc'ed (rtx_free it). */
int rtx_serving_index(struct rtx_serving *s, bool ready_only,
                      struct rtx_model_index_entry **entries, int *n, struct rtx_err *err);

/* Loads (or reloads) a model from the repository and returns when it is READY or failed:
 * config, graph, weights, a plan and a warm-up run per instance. A failed reload keeps the
 * version that was serving (the error says why the new one failed). config_json, when not
 * NULL, replaces the model's config.json (Triton's "config" load parameter). RTX_ENOTFOUND for
 * a model not in the repository, RTX_EUNSUPPORTED in control mode NONE or POLL, and the load
 * error (RTX_EFORMAT, RTX_EGRAPH, RTX_EIO, ...) naming the file and the problem. */
int rtx_serving_load(struct rtx_serving *s, const char *name, const char *config_json,
                     struct rtx_err *err);
/* Unloads a model: new requests fail at once, queued and running ones finish, then its
 * memory (plans, weights, device buffers) is freed. RTX_ENOTFOUND for an unknown model,
 * RTX_EUNSUPPORTED in control mode NONE or POLL. */
int rtx_serving_unload(struct rtx_serving *s, const char *name, struct rtx_err *err);

/* Whether the model (version 0 or <0: the newest loaded version) is READY and has an instance
 * on a healthy device. */
bool rtx_serving_model_ready(struct rtx_serving *s, const char *name, int64_t version);
/* Whether the server is ready: started, not stopping, every model loaded at start READY with
 * an instance on a healthy device. */
bool rtx_serving_ready(struct rtx_serving *s);

/* ------------------------------------------------------------------------------------------
 * Models
 * ---------------------------------------------------------------------------------------- */

struct rtx_model; /* one loaded version of a model; reference counted */

/* A reference to a READY model version (version 0 or <0: the newest READY one). RTX_ENOTFOUND
 * for a model or version the server does not know, RTX_EUNAVAILABLE for one not READY (the
 * message says its state and reason). Release with rtx_model_unref. */
int rtx_serving_model_get(struct rtx_serving *s, const char *name, int64_t version,
                          struct rtx_model **out, struct rtx_err *err);
void rtx_model_unref(struct rtx_model *m); /* NULL: no-op */

#define RTX_MODEL_MAX_IO 64
#define RTX_MODEL_MAX_PREFERRED 16

/* A model input or output as config.json declares it. dims exclude the batch dimension when
 * max_batch_size > 0; -1 is a dimension of any size. */
struct rtx_model_io {
    char name[128];
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    bool optional; /* inputs only: the request may leave it out */
    bool bytes;    /* a KServe BYTES tensor (length-prefixed strings): dtype is unused; only
                      generative models declare them */
    bool has_reshape; /* Triton's reshape: the shape the model itself has (batch excluded) */
    int reshape_ndim;
    int64_t reshape[RTX_MAX_DIMS];
};

/* A queue policy of Triton's dynamic batcher (ModelQueuePolicy), as the config gives it. */
struct rtx_model_queue_policy {
    bool set;
    bool delay;                  /* timeout_action DELAY; else REJECT */
    int64_t default_timeout_us;  /* 0: none */
    bool allow_timeout_override;
    int64_t max_queue_size;      /* 0: no bound of its own */
};
#define RTX_MODEL_MAX_QUEUE_POLICIES 16

struct rtx_model_info {
    char name[128];
    int64_t version;
    char platform[32];         /* "rtx_graph" or "rtx_generate" */
    bool decoupled;            /* generative: a request gets many responses (Triton's
                                  model_transaction_policy.decoupled) */
    int max_batch_size;        /* 0: the model has no batch dimension, no dynamic batching */
    int n_inputs, n_outputs;
    struct rtx_model_io inputs[RTX_MODEL_MAX_IO], outputs[RTX_MODEL_MAX_IO];
    bool dynamic_batching;
    int n_preferred;
    int preferred_batch_sizes[RTX_MODEL_MAX_PREFERRED];
    int64_t max_queue_delay_us; /* microseconds */
    char default_lane[32];      /* "" when the config names none */
    int instances;              /* instance groups' total count */
    char instance_kind[16];     /* "KIND_CPU" or "KIND_GPU" (Triton's spellings) */
    char backend[32];           /* "onnxruntime" for an ONNX model, else "" */
    char default_model_filename[256]; /* an ONNX model's file ("model.onnx" by default) */
    int64_t priority_levels;    /* dynamic_batching's; 0: none */
    int64_t default_priority_level;
    struct rtx_model_queue_policy default_queue_policy;
    int n_priority_queue_policies; /* priority_queue_policy: level -> policy */
    int64_t priority_queue_levels[RTX_MODEL_MAX_QUEUE_POLICIES];
    struct rtx_model_queue_policy priority_queue_policies[RTX_MODEL_MAX_QUEUE_POLICIES];
};
/* The model's description; valid as long as the reference is held. */
const struct rtx_model_info *rtx_model_info(const struct rtx_model *m);
/* The generation engine of a generative model version (config.json platform
 * "rtx_generate": a Hugging Face checkpoint in the version directory, docs/generation.md), or
 * NULL for a graph model. Valid while the reference is held: front ends hold the model
 * reference from rtx_serving_model_get until the request's on_done has run. */
struct rtx_gen_engine *rtx_model_generator(const struct rtx_model *m);
/* The model's config in Triton's JSON form (as GET /v2/models/{m}/config answers), as an
 * rtx_malloc'ed NUL-terminated string; NULL when out of memory. */
char *rtx_model_config_json(const struct rtx_model *m);

/* KServe v2 datatype names ("FP32", "FP16", "BF16", "INT8", "INT32", "INT64", "UINT8",
 * "BOOL") for rtxd's dtypes, and back: RTX_EUNSUPPORTED for a KServe datatype rtxd has no
 * dtype for ("FP64", "BYTES", ... named in the message), RTX_EINVAL for one KServe lacks. */
const char *rtx_kserve_dtype_name(enum rtx_dtype dt);
int rtx_kserve_dtype_from_name(const char *name, enum rtx_dtype *out, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Inference
 * ---------------------------------------------------------------------------------------- */

struct rtx_infer_input {
    const char *name;
    struct rtx_tensor *tensor; /* host, contiguous; includes the batch dimension when the
                                  model's max_batch_size > 0; the core takes a reference */
};

struct rtx_infer_result;

/* Called exactly once per accepted request, from a worker thread (or from rtx_serving_stop);
 * it must not block for long. res and its tensors are valid until the callback returns;
 * take references (rtx_tensor_ref) to keep outputs longer. */
typedef void (*rtx_infer_done_fn)(void *ctx, const struct rtx_infer_result *res);

struct rtx_infer_request {
    struct rtx_model *model;     /* the caller's reference; rtx_serving_infer takes its own */
    const char *id;              /* client's request id, echoed; may be NULL */
    int n_inputs;
    const struct rtx_infer_input *inputs;
    int n_outputs;               /* requested outputs by name; 0 = all of the model's */
    const char *const *outputs;
    int64_t deadline_ns;         /* CLOCK_MONOTONIC; 0 = none. Expired before it runs:
                                    RTX_EEXPIRED */
    int priority;                /* KServe "priority" parameter; 0 = the lane's default */
    const char *lane;            /* SLA lane; NULL = the model's default */
    const volatile int *cancel;  /* nonzero: the client went away; may be NULL */
    rtx_infer_done_fn done;
    void *ctx;
};

struct rtx_infer_result {
    int code;               /* 0, or an RTX_E* code with msg */
    char msg[1024];
    const char *id;         /* the request's id */
    const struct rtx_model_info *model;
    int n_outputs;
    const char *const *output_names;
    struct rtx_tensor *const *outputs; /* host, contiguous, batch dimension included */
    /* timings, nanoseconds (Triton's statistics: queue, compute input/infer/output) */
    int64_t queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns;
    int batch_size;         /* size of the batch this request ran in */
};

/* Checks the request against the model (every required input present, no unknown or
 * repeated input, datatype, rank and each dimension, batch size within max_batch_size, same
 * batch size across inputs, requested outputs exist) and queues it. An error is returned at
 * once, naming the input and the problem (RTX_EINVAL; RTX_ELIMIT for a batch above the max;
 * RTX_EUNAVAILABLE when the model's queue is full or it is unloading) and the callback is not
 * called. On 0 the callback will be called exactly once. The core copies nothing from req
 * but the pointers it needs: inputs' tensors are referenced, strings are copied.
 * Lanes: the request's lane, else its priority (rtx_sched_lane_for_priority), else the model's
 * parameters.lane, else the server's default lane; an unknown lane or a negative priority is
 * RTX_EINVAL. Admission control may refuse it with RTX_EOVERLOAD (the lane is full, the
 * deadline cannot be met, the lane is shed by brownout), the message naming the reason and
 * ending "retry after N ms" (front ends: RESOURCE_EXHAUSTED, HTTP 429 + Retry-After). A
 * deadline that passed before the request could be queued is RTX_EEXPIRED (counted EXPIRED). */
int rtx_serving_infer(struct rtx_serving *s, const struct rtx_infer_request *req,
                      struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Statistics (Triton's ModelStatistics and the /metrics figures)
 * ---------------------------------------------------------------------------------------- */

struct rtx_stat_duration {
    int64_t count;
    int64_t ns; /* total, nanoseconds */
};

struct rtx_batch_stat {
    int batch_size;
    struct rtx_stat_duration compute_input, compute_infer, compute_output;
};

/* Why a request failed (/metrics' reason label). */
enum rtx_infer_failure {
    RTX_INFER_FAIL_REJECTED, /* refused before queuing: bad input, queue full */
    RTX_INFER_FAIL_CANCELED,
    RTX_INFER_FAIL_EXPIRED,
    RTX_INFER_FAIL_BACKEND,  /* the execution failed */
    RTX_INFER_FAIL_OTHER,
    RTX_INFER_FAIL_COUNT
};
const char *rtx_infer_failure_name(enum rtx_infer_failure r); /* "REJECTED", ... */

#define RTX_MODEL_MAX_BATCH_STATS 64

struct rtx_model_stats {
    char name[128];
    int64_t version;
    int64_t last_inference_ms;  /* unix ms of the last request answered; 0 = none */
    int64_t inference_count;    /* requests answered successfully (batch elements) */
    int64_t execution_count;    /* batches run */
    struct rtx_stat_duration success, fail, queue, compute_input, compute_infer, compute_output;
    int64_t failures[RTX_INFER_FAIL_COUNT];
    int64_t pending;            /* queued or running now */
    int n_batch_stats;          /* one per batch size seen, sorted by size */
    struct rtx_batch_stat batch_stats[RTX_MODEL_MAX_BATCH_STATS];
};

/* Statistics of every model version loaded now or since start (name NULL or ""), or of one
 * model (version 0 or <0: every version of it). *out is rtx_malloc'ed (rtx_free it).
 * RTX_ENOTFOUND for a named model the server does not know. */
int rtx_serving_stats(struct rtx_serving *s, const char *name, int64_t version,
                      struct rtx_model_stats **out, int *n, struct rtx_err *err);

/* The inference lanes, summed over every model version's scheduler: the lanes' settings (as
 * configured, queue bound not capped), queued / delayed / running now and the counters since
 * start (versions unloaded since keep counting), brownout_level the highest of any version and
 * batch_delay_factor the smallest. Per-request wait percentiles are not summed (0). */
void rtx_serving_lanes(struct rtx_serving *s, struct rtx_sched_stats *out);

/* Memory the loaded models hold: weights and plans on the host, and device memory per GPU
 * (from their pools), bytes; for tests of unload and for /metrics. */
struct rtx_serving_memory {
    int64_t host_bytes;
    int n_devices;
    int64_t device_bytes[16];
};
void rtx_serving_memory(struct rtx_serving *s, struct rtx_serving_memory *out);

#endif /* RTX_SERVING_H */
