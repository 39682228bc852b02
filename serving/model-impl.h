/*
 * model-impl.h - a loaded model version's internals, shared by the files of serving/ that
 * make it up and by nothing else: model.c (references, statistics, requests; the leaf),
 * model-exec.c (plans and running a batch), model-batcher.c (queue, held list, workers),
 * model-infer.c (rtx_serving_infer) and model-load.c (load, stop, reconfigure). The
 * repository (serving.c) sees a version only through serving-impl.h's rtx__model_* calls.
 * Files depend one way: load -> infer -> batcher -> exec -> model.c.
 */
#ifndef RTX_SERVING_MODEL_IMPL_H
#define RTX_SERVING_MODEL_IMPL_H

#include "onnx/onnx.h"
#include "serving/serving-impl.h"

struct request {
    struct request *next;          /* held list, batch lists, dead lists */
    struct request *qprev, *qnext; /* the model's list of requests queued in its scheduler */
    bool queued;                   /* on that list (queued in the scheduler) */
    uint64_t handle;               /* scheduler handle while queued or dispatched; 0: none */
    struct rtx_model *m;           /* one reference */
    char *id;                      /* NULL when the client gave none */
    int batch;                     /* rows along dimension 0 (1 without a batch dimension) */
    struct rtx_tensor *in[RTX_MODEL_MAX_IO]; /* per config input, one reference each */
    int n_out;
    int out_idx[RTX_MODEL_MAX_IO]; /* config output indices, in the requested order */
    int64_t deadline_ns;
    const volatile int *cancel;
    rtx_infer_done_fn done;
    void *ctx;
    int64_t t_enqueue;             /* monotonic ns */
};

struct instance {
    struct rtx_model *m;
    struct rtx_device *dev;        /* its device (the server's device set) */
    struct rtx_device_consumer *consumer; /* the version's consumer on dev (not owned) */
    struct rtx_backend *be;        /* made by the device layer; its plans are in dev's cache */
    pthread_t thread;
    bool started;
    bool sick;                     /* its device was seen unhealthy (its thread only) */
    struct request **batch;        /* room for max(1, max_batch_size) requests */
};

struct rtx_model {
    atomic_int refs;
    struct rtx__model_config cfg;  /* cfg.info is what rtx_model_info returns */
    char *config_json;
    struct rtx_graph *graph;       /* platform rtx_graph: the graph every batch runs */
    struct rtx_onnx_model *onnx;   /* platform onnxruntime_onnx: the model, instantiated for
                                      each batch's shapes (model-exec.c); graph is NULL */
    int n_graph_in, n_graph_out;   /* inputs and outputs of the graphs the batches run */
    struct rtx_safetensors *weights;
    uint8_t digest[RTX_DEVICE_PLAN_KEY_LEN]; /* SHA-256 of the graph file and the weights */
    int graph_in[RTX_MODEL_MAX_IO];  /* config input i -> position among graph inputs */
    int graph_out[RTX_MODEL_MAX_IO]; /* config output j -> position among graph outputs */
    const char *out_names[RTX_MODEL_MAX_IO];
    int64_t host_bytes;            /* weights mapped + initializers from the graph file */
    int64_t const_bytes;           /* every initializer (uploaded per plan on a device) */
    struct rtx_limits limits;
    int n_inst;
    struct instance *inst;
    /* one consumer per device slot the version has instances on (NULL elsewhere); freed
     * after every backend */
    struct rtx_device_consumer *consumers[RTX_DEVICES_MAX];
    struct rtx__stats_rec *stats;
    struct rtx_gen_engine *gen;    /* platform "rtx_generate": its engine (no instances) */
    struct rtx_device *gen_dev;    /* the engine's device */

    int default_lane;              /* lane index: the config's lane, else the server's */
    /* dynamic_batching's queue policies by lane (resolved at load; docs/serving.md) */
    struct rtx__queue_policy lane_policy[RTX_SCHED_MAX_LANES];
    rtx_serving_log_fn log;        /* the repository's, may be NULL */
    uint64_t cost_key;             /* rtx_sched_cost_key("name:version") */

    pthread_mutex_t mu;            /* guards everything below */
    pthread_cond_t cv;             /* queue changes, gathering ends, stop */
    struct rtx_sched *sched;       /* admission and order; every call under mu */
    struct request *head, *tail;   /* held: dispatched by the scheduler, not yet in a batch */
    struct request *qhead;         /* queued in the scheduler, in no particular order */
    int64_t n_queued, n_running;   /* requests: queued (scheduler + held), in running batches */
    int64_t last_sweep_ns;         /* when queued requests were last checked for cancel */
    int64_t max_queue;
    bool gathering;                /* a worker is forming a batch */
    bool stopping, fail_queued, stopped;
    bool cost_dirty;               /* a run time was learned since rtx__model_cost_changed */
};

/* model.c */
void rtx__model_free(struct rtx_model *m);
static inline void rtx__dur_add(struct rtx_stat_duration *d, int64_t ns) {
    d->count++;
    d->ns += ns;
}
void rtx__stats_fail(struct rtx__stats_rec *r, enum rtx_infer_failure why, int64_t ns);
void rtx__request_free(struct request *r);  /* NULL: no-op */
/* Answers a request with an error, counts it and frees it; a request the scheduler handed
 * out is finished there (cancelled or failed). Called without m->mu. */
void rtx__request_fail(struct request *r, int code, const char *msg);
/* Why a request cannot run any more (0 when it can): deadline or cancel flag. */
int rtx__request_dead(const struct request *r, int64_t now, char *msg, size_t cap);
/* Frees the instances' backends (dropping their kept plans), then the consumers. */
void rtx__model_free_instances(struct rtx_model *m);

/* model-onnx.c */
/* Loads an ONNX version from its directory: the model file, the config completed from the
 * model (inputs, outputs, batch size: Triton's auto-complete) and checked against it,
 * graph_in/graph_out, the digest. Errors name the file. */
int rtx__onnx_version_load(struct rtx_model *m, const char *dir, struct rtx_err *err);
/* SHA-256 over the files (each one's length, then its bytes), into out. */
int rtx__sha256_files(const char *const *paths, int n, uint8_t out[RTX_DEVICE_PLAN_KEY_LEN],
                      struct rtx_err *err);

/* model-exec.c */
/* Turns config-shaped inputs (graph order, n_graph_in) into the model's shapes where the
 * config has a reshape (views, no copy), and the model's outputs (n_graph_out) back into the
 * config's shapes. */
int rtx__model_reshape_inputs(const struct rtx_model *m, struct rtx_tensor **ins,
                              struct rtx_err *err);
int rtx__model_reshape_outputs(const struct rtx_model *m, struct rtx_tensor **outs,
                               struct rtx_err *err);
/* Runs the plan for `ins` (graph order) into outs (graph order, n_outputs slots). */
int rtx__instance_execute(struct instance *in, struct rtx_tensor *const *ins,
                          struct rtx_tensor **outs, const volatile int *cancel,
                          struct rtx_err *err);
/* One run per instance on zero inputs of batch 1; the first checks the outputs against the
 * config. A model with a batch dimension is also planned for a batch of 2, to check that
 * every output carries the batch. */
int rtx__model_warm_up(struct rtx_model *m, struct rtx_err *err);
/* Runs batch[0..nb) (total rows) and answers every request. */
void rtx__instance_run_batch(struct instance *in, struct request **batch, int nb, int total);

/* model-batcher.c */
/* Adds r to the list of requests queued in the scheduler. Under m->mu. */
void rtx__queue_link(struct rtx_model *m, struct request *r);
/* An instance's worker thread (arg: its struct instance). */
void *rtx__model_worker(void *arg);

/* model-infer.c */
/* A zero tensor for an optional input the request left out (-1 dimensions are 1). */
int rtx__zero_input(const struct rtx_model_info *info, const struct rtx_model_io *io, int batch,
                    struct rtx_tensor **out, struct rtx_err *err);

#endif /* RTX_SERVING_MODEL_IMPL_H */
