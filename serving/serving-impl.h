/*
 * serving-impl.h - internals of the serving module, shared by its files and included by
 * nothing outside serving/ (and the module's unit tests): config.json parsing and the model
 * config's JSON form (model-config.c), loaded model versions with their instances, queue and
 * batcher (model*.c, whose own structs are in model-impl.h), and the repository that holds
 * them (serving.c). Weights files are read through formats/formats.h.
 *
 * DESIGN
 * A model version (struct rtx_model) owns its graph (weights bound as initializers over the
 * memory-mapped safetensors file) with its content digest, its instances (a backend made by
 * the device layer and a worker thread each), one device consumer per device it has
 * instances on, its request queue and a pointer to its statistics record. Its plans live in
 * the devices' plan caches (device/device.h), keyed by the digest and the batch's shapes.
 * The statistics record belongs to the repository (struct rtx_serving), keyed by (name,
 * version), so the figures of a version survive its unload and continue across a reload of
 * the same version.
 * The repository holds one "registry" reference per loaded version; unloading stops the
 * version's workers (queued requests run first), joins them, frees the instances, and drops
 * that reference; the graph and weights go with the last reference.
 *
 * Each version owns an SLA scheduler (scheduler/sched.h) that orders and admits its requests:
 * lanes, deadlines, learned costs and brownout per version, since a version's instances are
 * the executors its requests compete for (docs/decisions.md). A version's learned cost is
 * read from the device set's book of learned costs at the version's first load and put back
 * into it, and the book saved to the store, when it changed (every COST_SAVE_MS from the
 * repository's housekeeping thread, at unload and at stop), in rows of place
 * RTX__COST_DEVICE.
 */
#ifndef RTX_SERVING_SERVING_IMPL_H
#define RTX_SERVING_SERVING_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "formats/formats.h"
#include "device/device.h"
#include "serving/serving.h"
#include "scheduler/sched.h"

/* ------------------------------------------------------------------------------------------
 * config.json (model-config.c)
 * ---------------------------------------------------------------------------------------- */

#define RTX__MAX_VERSIONS 64 /* versions of one model listed or loaded at once */
#define RTX__MAX_GROUPS 16   /* instance groups of one model */
#define RTX__MAX_GROUP_GPUS 16

enum rtx__version_policy { RTX__POLICY_LATEST, RTX__POLICY_ALL, RTX__POLICY_SPECIFIC };

enum rtx__instance_kind { RTX__KIND_AUTO, RTX__KIND_CPU, RTX__KIND_GPU };

/* A queue policy of Triton's dynamic batcher (ModelQueuePolicy), for the lane its priority
 * level maps to. */
struct rtx__queue_policy {
    bool set;
    enum rtx_sched_timeout on_timeout; /* timeout_action: REJECT or DELAY */
    int64_t timeout_us;                /* default_timeout_microseconds; 0: none */
    bool allow_override;               /* a request's own timeout may be shorter */
    int64_t max_queue;                 /* max_queue_size; 0: the lane's bound */
};

#define RTX__MAX_LEVEL_POLICIES 16 /* priority_queue_policy entries of one model */

/* The shape the model itself has for an input or output whose config dims say otherwise
 * (Triton's reshape); the batch dimension excluded, as in dims. */
struct rtx__reshape {
    bool set;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
};

struct rtx__instance_group {
    int count;                     /* instances per device (GPU) or in all (CPU) */
    enum rtx__instance_kind kind;
    int n_gpus;                    /* 0: every GPU */
    int gpus[RTX__MAX_GROUP_GPUS]; /* CUDA device indices */
};

/* A parsed config.json. info.version is 0 and info.instances / instance_kind are filled from
 * the groups as written (the loader corrects them for the devices found). */
struct rtx__model_config {
    struct rtx_model_info info;
    enum rtx__version_policy policy;
    int latest_n;                  /* LATEST: how many of the newest versions */
    int n_versions;                /* SPECIFIC */
    int64_t versions[RTX__MAX_VERSIONS];
    int n_groups;
    struct rtx__instance_group groups[RTX__MAX_GROUPS];
    int64_t memory_reserve_bytes;  /* per device the version has instances on, bytes; -1: not
                                      set (the loader's default, docs/serving.md) */
    /* platform "onnxruntime_onnx" (backend "onnxruntime"): Triton's ONNX models */
    char backend[32];            /* "onnxruntime" for an ONNX model, else "" */
    char model_filename[256];    /* default_model_filename: the model's file (or directory
                                    holding model.onnx) in a version directory; "": model.onnx */
    bool auto_inputs, auto_outputs; /* none listed: the ONNX model gives them (auto-complete) */
    bool batch_autofill;         /* max_batch_size 0 and no io listed: 4 when the model batches */
    struct rtx__reshape in_reshape[RTX_MODEL_MAX_IO], out_reshape[RTX_MODEL_MAX_IO];
    /* dynamic_batching's priorities and queue policies, mapped onto the server's lanes:
     * priority level k is lane min(k, lanes) (docs/serving.md) */
    int64_t priority_levels;     /* 0: no levels (a request's priority picks its lane) */
    int64_t default_priority_level; /* 0: none */
    struct rtx__queue_policy default_policy;
    int n_level_policies;
    struct {
        int64_t level;
        struct rtx__queue_policy policy;
    } level_policies[RTX__MAX_LEVEL_POLICIES];
    /* platform "rtx_generate": the "generation" object (docs/generation.md); 0 / "": the
     * engine's defaults */
    struct {
        int64_t kv_cache_bytes;
        double kv_cache_fraction;
        int block_size, max_batch_tokens, max_seqs;
        int graph_max_tokens;    /* -1: unset (the engine's default); 0: never */
        bool prefix_caching;
        char chat_template[8192];
    } gen;
};

/* Parses config.json text (Triton's JSON model config; see docs/serving.md) for the model
 * whose directory is `dir_name`. Unknown fields are ignored; a field of the wrong type, a
 * missing required field or a bad value gives RTX_EFORMAT naming `what` (the file) and the
 * field ("input[1].dims[0]: expected an integer"); a datatype rtxd lacks RTX_EUNSUPPORTED. */
int rtx__model_config_parse(const char *json, size_t len, const char *dir_name, const char *what,
                            struct rtx__model_config *out, struct rtx_err *err);
/* Parses config.pbtxt text (Triton's ModelConfig in protobuf text format, formats/pbtext.c)
 * for the model whose directory is dir_name. Syntax errors are RTX_EFORMAT "WHAT:LINE:COL:
 * path: problem"; every field the text sets is mapped, or named: fields rtxd refuses
 * (sequence batching, ensembles, ...) all in one RTX_EUNSUPPORTED, fields without effect here
 * (optimization, model_warmup, ...) each in a warning through log (docs/serving.md has the
 * table). A bad value is RTX_EFORMAT naming the field. */
int rtx__model_config_pbtxt(const char *text, size_t len, const char *dir_name, const char *what,
                            rtx_serving_log_fn log, struct rtx__model_config *out,
                            struct rtx_err *err);
/* The config of a model directory without config.pbtxt or config.json whose versions hold
 * model.onnx: an ONNX model whose inputs, outputs and batch size come from the model
 * (Triton's auto-complete). */
void rtx__model_config_auto(const char *dir_name, struct rtx__model_config *out);
/* Reads a model's config: config_json when not NULL (a load request's override), else
 * MDIR/config.pbtxt or MDIR/config.json (both present: RTX_EFORMAT), else the auto-completed
 * config when a version directory holds model.onnx, else RTX_EIO naming config.pbtxt. */
int rtx__model_config_read(const char *mdir, const char *name, const char *config_json,
                           rtx_serving_log_fn log, struct rtx__model_config *out,
                           struct rtx_err *err);
/* Whether the config is an ONNX model's (platform onnxruntime_onnx). */
bool rtx__model_config_onnx(const struct rtx__model_config *c);
/* Whether a reshape fits its tensor's dims: the same dims, or fixed sizes of the same element
 * count (RTX_EFORMAT otherwise; RTX_EUNSUPPORTED for -1 sizes that differ from dims, and for
 * any reshape of a model that is not ONNX). */
int rtx__config_reshape_check(const struct rtx__model_config *cfg, const char *what,
                              const char *field, const struct rtx_model_io *io,
                              const struct rtx__reshape *rs, struct rtx_err *err);
/* The config in Triton's JSON form (GET /v2/models/{m}/config); rtx_malloc'ed, NULL on OOM. */
char *rtx__model_config_dump(const struct rtx__model_config *c);
/* "TYPE_FP32" ... for a dtype, and back (RTX_EUNSUPPORTED naming a Triton type rtxd lacks,
 * RTX_EFORMAT for a name that is no Triton type). */
const char *rtx__config_dtype_name(enum rtx_dtype dt);
int rtx__config_dtype_from_name(const char *name, enum rtx_dtype *out, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Statistics records (serving.c)
 * ---------------------------------------------------------------------------------------- */

struct rtx__stats_rec {
    pthread_mutex_t mu;
    struct rtx_model_stats st;     /* pending is kept by the model, filled on copy */
    bool used;                     /* a version with these figures became READY (under the
                                    * repository's lock); records of failed loads stay hidden */
    int64_t cost_ema_ns;           /* the learned per-request cost when a version stopped, ns
                                    * (0: none), or the book's at its first load; the next
                                    * load of the version starts from it */
    int64_t cost_samples;
    struct rtx__stats_rec *next;
};

/* ------------------------------------------------------------------------------------------
 * Model versions (model.c)
 * ---------------------------------------------------------------------------------------- */

struct rtx__model_load_opts {
    const char *dir;               /* the version directory: DIR/model.rtxg, model.safetensors */
    const struct rtx__model_config *cfg;
    int64_t version;
    const struct rtx_limits *limits;
    struct rtx_devices *devices;   /* the server's; outlives the model */
    int cpu_threads;               /* CPU instances' backend threads; 0: the device set's */
    int64_t max_queue;
    struct rtx__stats_rec *stats;  /* owned by the repository; outlives the model */
    const struct rtx_sched_config *sched; /* lanes and knobs (executors, bounds adjusted) */
    int default_lane;              /* lane index when neither request nor config names one */
    rtx_serving_log_fn log;        /* the repository's (rtx_serving_options.log), may be NULL */
};

/* Reports an event through fn (NULL: nowhere); fields: key, value, ..., NULL (at most 8
 * pairs) (serving/serving-log.c). */
void rtx__serving_log(rtx_serving_log_fn fn, enum rtx_serving_log_level level, const char *msg,
                      ...) __attribute__((sentinel));

/* Loads one version: graph, weights (bound to the graph's weight inputs), checks against the
 * config, its content digest, a device consumer per device with its reservation (RTX_ELIMIT
 * with the device layer's message when it does not fit), instances with their backends, a
 * warm-up run per instance, and starts the workers.
 * *out holds one reference (the repository's). Errors name the file and the problem. */
int rtx__model_load(const struct rtx__model_load_opts *o, struct rtx_model **out,
                    struct rtx_err *err);
/* Stops a version: new requests are refused; with `fail_queued` queued requests fail with
 * RTX_EUNAVAILABLE ("server shutting down"), otherwise they run first; waits for running
 * batches, joins the workers and frees the instances' backends (which drops their kept
 * plans) and then the device consumers. Idempotent. Callable
 * only by the holder of the repository's reference, never from a callback. */
void rtx__model_stop(struct rtx_model *m, bool fail_queued);
struct rtx_model *rtx__model_ref(struct rtx_model *m);
/* Adds the bytes the version holds: on the host its mapped weights and the graph file's
 * initializers; per device (index < n_devices) what its instances' CUDA pools reserve. */
void rtx__model_memory(struct rtx_model *m, int64_t *host_bytes, int n_devices,
                       int64_t *device_bytes);
/* The place of inference costs in the device set's book (store.h's sched_costs device
 * column): job costs are kept per execution device ("cpu", "cuda:N"), so rows of this name
 * never meet the job manager's and the two key spaces cannot collide. */
#define RTX__COST_DEVICE "infer"
/* The cost key of a model version: rtx_sched_cost_key("name:version"). */
uint64_t rtx__model_cost_key(const char *name, int64_t version);
/* The version's learned per-request cost (its key, the moving average in ns and the number
 * of run times averaged): 0, or RTX_ENOTFOUND while it has learned none. Valid after
 * rtx__model_stop too (until the last reference goes). */
int rtx__model_cost(struct rtx_model *m, uint64_t *key, int64_t *ema_ns, int64_t *samples);
/* Whether a run time was learned since the last call; clears the mark (call it before
 * rtx__model_cost, so a run time learned in between marks the version again). */
bool rtx__model_cost_changed(struct rtx_model *m);
/* A snapshot of the version's scheduler (lanes, counters, brownout) at now_ns. */
void rtx__model_lanes(struct rtx_model *m, int64_t now_ns, struct rtx_sched_stats *st);
/* Gives the version's scheduler the server's new lanes and knobs (server: the same lanes in
 * the same order as at load; a SIGHUP's reload), by the rules of its load: each lane's queue
 * bound capped at the repository's max_queue; its executors and max_running stay those it was
 * loaded with. Under the version's mutex (rtx_sched_reconfigure). RTX_EINVAL for another lane
 * set or a changed cost_keys, RTX_ENOMEM for a raised bound, both naming the version; the
 * scheduler is unchanged then. Queued and running requests stay. */
int rtx__model_reconfigure(struct rtx_model *m, const struct rtx_sched_config *server,
                           struct rtx_err *err);
/* Requests queued or running now. */
int64_t rtx__model_pending(struct rtx_model *m);
/* Whether the version still accepts requests. */
bool rtx__model_serving(struct rtx_model *m);
/* Whether an instance of the version is on a healthy device (0: yes), else RTX_EUNAVAILABLE
 * with "model 'X': every instance's device is unhealthy (cuda:0: ...)" in why (len bytes;
 * may be NULL). */
int rtx__model_healthy(struct rtx_model *m, char *why, size_t len);
/* Wakes the version's workers (a device became unhealthy). */
void rtx__model_wake(struct rtx_model *m);
const struct rtx__model_config *rtx__model_config(const struct rtx_model *m);
/* Counts a request refused before queuing (bad input, queue full) in the statistics. */
void rtx__stats_reject(struct rtx__stats_rec *r);

/* The wall clock, unix milliseconds (the monotonic one is rtx_mono_ns). */
int64_t rtx__unix_ms(void);

#endif /* RTX_SERVING_SERVING_IMPL_H */
