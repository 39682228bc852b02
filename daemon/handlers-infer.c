/*
 * handlers-infer.c - inference.GRPCInferenceService, the KServe v2 gRPC service as Triton
 * Inference Server speaks it: the helpers its handlers share (handlers-infer-impl.h), health,
 * server and model metadata, model configuration and statistics. The model repository, shared
 * memory, trace and log settings are in handlers-infer-repo.c; ModelInfer and ModelStreamInfer
 * in handlers-infer-run.c. The inference core (serving/serving.h) does the work; these files
 * translate between its structs and Triton's messages (proto/inference/grpc_service.proto),
 * and server.c owns everything gRPC.
 *
 * DESIGN
 * Errors follow Triton: an unknown model or version is NOT_FOUND, a model that is not ready
 * UNAVAILABLE, anything wrong with a request INVALID_ARGUMENT with a message naming the input
 * or parameter and the problem; a full queue is UNAVAILABLE.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/handlers-infer-impl.h"
#include "daemon/kserve.h"
#include "daemon/log.h"

#define SERVER_NAME "rtxd"

/* The KServe v2 / Triton protocol extensions rtxd implements (ServerMetadata). */
static const char *const extensions[] = {
    "model_repository",   "model_configuration", "system_shared_memory",
    "binary_tensor_data", "parameters",          "statistics",
};

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

/* n zeroed bytes recorded in the arena; NULL (failed set) when out of memory. */
void *rtx__infer_arena_alloc(struct arena *a, size_t n) {
    if (a->failed) return NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        void **p = rtx_realloc(a->ptrs, cap * sizeof *p);
        if (!p) {
            a->failed = true;
            return NULL;
        }
        a->ptrs = p;
        a->cap = cap;
    }
    void *mem = rtx_calloc(1, n ? n : 1);
    if (!mem) {
        a->failed = true;
        return NULL;
    }
    a->ptrs[a->n++] = mem;
    return mem;
}

char *rtx__infer_arena_printf(struct arena *a, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *s = rtx__infer_arena_alloc(a, strlen(buf) + 1);
    if (s) memcpy(s, buf, strlen(buf) + 1);
    return s ? s : (char *)"";
}

void rtx__infer_arena_free(struct arena *a) {
    for (size_t i = 0; i < a->n; i++)
        rtx_free(a->ptrs[i]);
    rtx_free(a->ptrs);
    *a = (struct arena){0};
}

/* Packs msg into rep (arena freed by the caller); INTERNAL when the arena ran out. */
void rtx__infer_pack(struct rtx_daemon *d, struct arena *a, const ProtobufCMessage *msg,
                     struct rtx_server_reply *rep) {
    if (a->failed)
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory building the reply");
    else
        rtx_server_reply_pack(rep, msg, rtx__daemon_max_reply_bytes(d));
}

/* The serving core, or UNAVAILABLE when rtxd serves no models. */
struct rtx_serving *rtx__infer_serving(struct rtx_daemon *d, struct rtx_server_reply *rep) {
    if (!d->serving)
        rtx_server_reply_status(rep, GRPC_STATUS_UNAVAILABLE,
                                "rtxd serves no models: no model repository is configured "
                                "(set models.repository)");
    return d->serving;
}

/* A model version string: "" is 0 (the server's choice). */
int rtx__infer_parse_version(const char *s, int64_t *out, struct rtx_err *err) {
    *out = 0;
    if (!s || !s[0]) return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 1)
        return rtx_err_set(err, RTX_EINVAL, "model version '%s' is not a positive integer", s);
    *out = v;
    return 0;
}

/* A reference to a ready model version; an error reply otherwise. */
static struct rtx_model *model_get(struct rtx_daemon *d, const char *name, const char *version,
                                   struct rtx_server_reply *rep) {
    struct rtx_serving *s = rtx__infer_serving(d, rep);
    if (!s) return NULL;
    struct rtx_err err = {0};
    int64_t v;
    struct rtx_model *m = NULL;
    if (!name || !name[0])
        rtx_err_set(&err, RTX_EINVAL, "the model name is empty");
    else if (rtx__infer_parse_version(version, &v, &err) == 0)
        rtx_serving_model_get(s, name, v, &m, &err);
    if (!m) rtx_server_reply_err(rep, &err);
    return m;
}

/* The request message, or NULL with INVALID_ARGUMENT "malformed inference.X" in rep. Free
 * with protobuf_c_message_free_unpacked (or the type's own free_unpacked). */
void *rtx__infer_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *req, size_t len,
                        struct rtx_server_reply *rep) {
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, req);
    if (!m)
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s.%s",
                                desc->package_name, desc->name);
    return m;
}

/* ------------------------------------------------------------------------------------------
 * Health and metadata
 * ---------------------------------------------------------------------------------------- */

void rtx__infer_server_live(struct rtx_daemon *d, const uint8_t *req, size_t len,
                            struct rtx_server_reply *rep) {
    Inference__ServerLiveRequest *in =
        rtx__infer_unpack(&inference__server_live_request__descriptor, req, len, rep);
    if (!in) return;
    inference__server_live_request__free_unpacked(in, NULL);
    Inference__ServerLiveResponse out = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    out.live = true;
    rtx_server_reply_pack(rep, &out.base, 0);
}

void rtx__infer_server_ready(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    Inference__ServerReadyRequest *in =
        rtx__infer_unpack(&inference__server_ready_request__descriptor, req, len, rep);
    if (!in) return;
    inference__server_ready_request__free_unpacked(in, NULL);
    Inference__ServerReadyResponse out = INFERENCE__SERVER_READY_RESPONSE__INIT;
    out.ready = !atomic_load(&d->draining) && (!d->serving || rtx_serving_ready(d->serving));
    rtx_server_reply_pack(rep, &out.base, 0);
}

void rtx__infer_model_ready(struct rtx_daemon *d, const uint8_t *req, size_t len,
                            struct rtx_server_reply *rep) {
    Inference__ModelReadyRequest *in =
        rtx__infer_unpack(&inference__model_ready_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_err err = {0};
    int64_t v = 0;
    if (!in->name[0]) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "the model name is empty");
    } else if (rtx__infer_parse_version(in->version, &v, &err) != 0) {
        rtx_server_reply_err(rep, &err);
    } else {
        Inference__ModelReadyResponse out = INFERENCE__MODEL_READY_RESPONSE__INIT;
        out.ready = d->serving && rtx_serving_model_ready(d->serving, in->name, v);
        rtx_server_reply_pack(rep, &out.base, 0);
    }
    inference__model_ready_request__free_unpacked(in, NULL);
}

void rtx__infer_server_metadata(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                struct rtx_server_reply *rep) {
    Inference__ServerMetadataRequest *in =
        rtx__infer_unpack(&inference__server_metadata_request__descriptor, req, len, rep);
    if (!in) return;
    inference__server_metadata_request__free_unpacked(in, NULL);
    Inference__ServerMetadataResponse out = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    out.name = (char *)SERVER_NAME;
    out.version = (char *)RTX_VERSION;
    out.n_extensions = sizeof extensions / sizeof extensions[0];
    out.extensions = (char **)extensions;
    rtx_server_reply_pack(rep, &out.base, 0);
}

static Inference__ModelMetadataResponse__TensorMetadata **
tensor_metadata(struct arena *a, const struct rtx_model_info *info, bool inputs) {
    int n = inputs ? info->n_inputs : info->n_outputs;
    const struct rtx_model_io *io = inputs ? info->inputs : info->outputs;
    Inference__ModelMetadataResponse__TensorMetadata **p =
        rtx__infer_arena_alloc(a, (size_t)n * sizeof *p);
    for (int i = 0; p && i < n; i++) {
        Inference__ModelMetadataResponse__TensorMetadata *t = rtx__infer_arena_alloc(a, sizeof *t);
        int64_t *shape = rtx__infer_arena_alloc(a, (RTX_MAX_DIMS + 1) * sizeof *shape);
        if (!t || !shape) return p;
        inference__model_metadata_response__tensor_metadata__init(t);
        t->name = (char *)io[i].name;
        t->datatype = (char *)rtx__kserve_io_datatype(&io[i]);
        size_t k = 0;
        if (info->max_batch_size > 0) shape[k++] = -1;
        for (int j = 0; j < io[i].ndim; j++)
            shape[k++] = io[i].dims[j];
        t->n_shape = k;
        t->shape = shape;
        p[i] = t;
    }
    return p;
}

void rtx__infer_model_metadata(struct rtx_daemon *d, const uint8_t *req, size_t len,
                               struct rtx_server_reply *rep) {
    Inference__ModelMetadataRequest *in =
        rtx__infer_unpack(&inference__model_metadata_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_model *m = model_get(d, in->name, in->version, rep);
    inference__model_metadata_request__free_unpacked(in, NULL);
    if (!m) return;
    const struct rtx_model_info *info = rtx_model_info(m);
    struct arena a = {0};
    Inference__ModelMetadataResponse out = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    out.name = (char *)info->name;
    char *version = rtx__infer_arena_printf(&a, "%" PRId64, info->version);
    out.n_versions = 1;
    out.versions = &version;
    out.platform = (char *)info->platform;
    out.n_inputs = (size_t)info->n_inputs;
    out.inputs = tensor_metadata(&a, info, true);
    out.n_outputs = (size_t)info->n_outputs;
    out.outputs = tensor_metadata(&a, info, false);
    rtx__infer_pack(d, &a, &out.base, rep);
    rtx__infer_arena_free(&a);
    rtx_model_unref(m);
}
/* ------------------------------------------------------------------------------------------
 * Model configuration and statistics
 * ---------------------------------------------------------------------------------------- */

static Inference__DataType config_dtype(const struct rtx_model_io *io) {
    if (io->bytes) return INFERENCE__DATA_TYPE__TYPE_STRING;
    switch (io->dtype) {
    case RTX_F32: return INFERENCE__DATA_TYPE__TYPE_FP32;
    case RTX_F16: return INFERENCE__DATA_TYPE__TYPE_FP16;
    case RTX_BF16: return INFERENCE__DATA_TYPE__TYPE_BF16;
    case RTX_I8: return INFERENCE__DATA_TYPE__TYPE_INT8;
    case RTX_I32: return INFERENCE__DATA_TYPE__TYPE_INT32;
    case RTX_I64: return INFERENCE__DATA_TYPE__TYPE_INT64;
    case RTX_U8: return INFERENCE__DATA_TYPE__TYPE_UINT8;
    case RTX_BOOL: return INFERENCE__DATA_TYPE__TYPE_BOOL;
    default: return INFERENCE__DATA_TYPE__TYPE_INVALID;
    }
}

/* Triton's ModelTensorReshape of io, or NULL when it has none. */
static Inference__ModelTensorReshape *config_reshape(struct arena *a,
                                                     const struct rtx_model_io *io) {
    if (!io->has_reshape) return NULL;
    Inference__ModelTensorReshape *r = rtx__infer_arena_alloc(a, sizeof *r);
    if (!r) return NULL;
    inference__model_tensor_reshape__init(r);
    r->n_shape = (size_t)io->reshape_ndim;
    r->shape = (int64_t *)io->reshape;
    return r;
}

/* Triton's ModelQueuePolicy of q, or NULL when the config sets none. */
static Inference__ModelQueuePolicy *config_queue_policy(struct arena *a,
                                                       const struct rtx_model_queue_policy *q) {
    if (!q->set) return NULL;
    Inference__ModelQueuePolicy *p = rtx__infer_arena_alloc(a, sizeof *p);
    if (!p) return NULL;
    inference__model_queue_policy__init(p);
    p->timeout_action = q->delay ? INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY
                                 : INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__REJECT;
    p->default_timeout_microseconds = (uint64_t)q->default_timeout_us;
    p->allow_timeout_override = q->allow_timeout_override;
    p->max_queue_size = (uint32_t)q->max_queue_size;
    return p;
}

void rtx__infer_model_config(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    Inference__ModelConfigRequest *in =
        rtx__infer_unpack(&inference__model_config_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_model *m = model_get(d, in->name, in->version, rep);
    inference__model_config_request__free_unpacked(in, NULL);
    if (!m) return;
    const struct rtx_model_info *info = rtx_model_info(m);
    struct arena a = {0};
    Inference__ModelConfig cfg = INFERENCE__MODEL_CONFIG__INIT;
    cfg.name = (char *)info->name;
    cfg.platform = (char *)info->platform;
    /* Triton names the backend beside the platform of an ONNX model, and its file */
    if (info->backend[0]) cfg.backend = (char *)info->backend;
    if (info->default_model_filename[0])
        cfg.default_model_filename = (char *)info->default_model_filename;
    cfg.max_batch_size = info->max_batch_size;

    Inference__ModelInput **ins = rtx__infer_arena_alloc(&a, (size_t)info->n_inputs * sizeof *ins);
    for (int i = 0; ins && i < info->n_inputs; i++) {
        Inference__ModelInput *x = rtx__infer_arena_alloc(&a, sizeof *x);
        if (!x) break;
        inference__model_input__init(x);
        x->name = (char *)info->inputs[i].name;
        x->data_type = config_dtype(&info->inputs[i]);
        x->n_dims = (size_t)info->inputs[i].ndim;
        x->dims = (int64_t *)info->inputs[i].dims;
        x->reshape = config_reshape(&a, &info->inputs[i]);
        x->optional = info->inputs[i].optional;
        ins[i] = x;
    }
    cfg.n_input = (size_t)info->n_inputs;
    cfg.input = ins;
    Inference__ModelOutput **outs =
        rtx__infer_arena_alloc(&a, (size_t)info->n_outputs * sizeof *outs);
    for (int i = 0; outs && i < info->n_outputs; i++) {
        Inference__ModelOutput *x = rtx__infer_arena_alloc(&a, sizeof *x);
        if (!x) break;
        inference__model_output__init(x);
        x->name = (char *)info->outputs[i].name;
        x->data_type = config_dtype(&info->outputs[i]);
        x->n_dims = (size_t)info->outputs[i].ndim;
        x->dims = (int64_t *)info->outputs[i].dims;
        x->reshape = config_reshape(&a, &info->outputs[i]);
        outs[i] = x;
    }
    cfg.n_output = (size_t)info->n_outputs;
    cfg.output = outs;

    Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
    if (info->dynamic_batching) {
        db.n_preferred_batch_size = (size_t)info->n_preferred;
        db.preferred_batch_size = (int32_t *)info->preferred_batch_sizes;
        db.max_queue_delay_microseconds = (uint64_t)info->max_queue_delay_us;
        db.priority_levels = (uint64_t)info->priority_levels;
        db.default_priority_level = (uint64_t)info->default_priority_level;
        db.default_queue_policy = config_queue_policy(&a, &info->default_queue_policy);
        int n = info->n_priority_queue_policies;
        Inference__ModelDynamicBatching__PriorityQueuePolicyEntry **pq =
            n > 0 ? rtx__infer_arena_alloc(&a, (size_t)n * sizeof *pq) : NULL;
        for (int i = 0; pq && i < n; i++) {
            pq[i] = rtx__infer_arena_alloc(&a, sizeof *pq[i]);
            if (!pq[i]) break;
            inference__model_dynamic_batching__priority_queue_policy_entry__init(pq[i]);
            pq[i]->key = (uint64_t)info->priority_queue_levels[i];
            pq[i]->value = config_queue_policy(&a, &info->priority_queue_policies[i]);
        }
        db.n_priority_queue_policy = pq ? (size_t)n : 0;
        db.priority_queue_policy = pq;
        cfg.scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
        cfg.dynamic_batching = &db;
    }
    Inference__ModelTransactionPolicy policy = INFERENCE__MODEL_TRANSACTION_POLICY__INIT;
    if (info->decoupled) {
        policy.decoupled = true;
        cfg.model_transaction_policy = &policy;
    }
    Inference__ModelInstanceGroup group = INFERENCE__MODEL_INSTANCE_GROUP__INIT;
    Inference__ModelInstanceGroup *groups[1] = {&group};
    group.name = rtx__infer_arena_printf(&a, "%s_0", info->name);
    group.count = info->instances;
    group.kind = strcmp(info->instance_kind, "KIND_GPU") == 0
                     ? INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU
                     : INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
    cfg.n_instance_group = 1;
    cfg.instance_group = groups;

    Inference__ModelParameter lane = INFERENCE__MODEL_PARAMETER__INIT;
    Inference__ModelConfig__ParametersEntry lane_entry =
        INFERENCE__MODEL_CONFIG__PARAMETERS_ENTRY__INIT;
    Inference__ModelConfig__ParametersEntry *params[1] = {&lane_entry};
    if (info->default_lane[0]) {
        lane.string_value = (char *)info->default_lane;
        lane_entry.key = (char *)"lane";
        lane_entry.value = &lane;
        cfg.n_parameters = 1;
        cfg.parameters = params;
    }
    Inference__ModelConfigResponse out = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    out.config = &cfg;
    rtx__infer_pack(d, &a, &out.base, rep);
    rtx__infer_arena_free(&a);
    rtx_model_unref(m);
}

static Inference__StatisticDuration *duration(struct arena *a, const struct rtx_stat_duration *s) {
    Inference__StatisticDuration *p = rtx__infer_arena_alloc(a, sizeof *p);
    if (!p) return NULL;
    inference__statistic_duration__init(p);
    p->count = s->count > 0 ? (uint64_t)s->count : 0;
    p->ns = s->ns > 0 ? (uint64_t)s->ns : 0;
    return p;
}

static Inference__ModelStatistics *model_stats(struct arena *a, const struct rtx_model_stats *s) {
    Inference__ModelStatistics *p = rtx__infer_arena_alloc(a, sizeof *p);
    Inference__InferStatistics *is = rtx__infer_arena_alloc(a, sizeof *is);
    if (!p || !is) return NULL;
    inference__model_statistics__init(p);
    inference__infer_statistics__init(is);
    p->name = (char *)s->name;
    p->version = rtx__infer_arena_printf(a, "%" PRId64, s->version);
    p->last_inference = s->last_inference_ms > 0 ? (uint64_t)s->last_inference_ms : 0;
    p->inference_count = s->inference_count > 0 ? (uint64_t)s->inference_count : 0;
    p->execution_count = s->execution_count > 0 ? (uint64_t)s->execution_count : 0;
    static const struct rtx_stat_duration zero;
    is->success = duration(a, &s->success);
    is->fail = duration(a, &s->fail);
    is->queue = duration(a, &s->queue);
    is->compute_input = duration(a, &s->compute_input);
    is->compute_infer = duration(a, &s->compute_infer);
    is->compute_output = duration(a, &s->compute_output);
    is->cache_hit = duration(a, &zero);
    is->cache_miss = duration(a, &zero);
    p->inference_stats = is;
    int nb = s->n_batch_stats;
    Inference__InferBatchStatistics **bs = rtx__infer_arena_alloc(a, (size_t)nb * sizeof *bs);
    for (int i = 0; bs && i < nb; i++) {
        Inference__InferBatchStatistics *b = rtx__infer_arena_alloc(a, sizeof *b);
        if (!b) return p;
        inference__infer_batch_statistics__init(b);
        b->batch_size = (uint64_t)s->batch_stats[i].batch_size;
        b->compute_input = duration(a, &s->batch_stats[i].compute_input);
        b->compute_infer = duration(a, &s->batch_stats[i].compute_infer);
        b->compute_output = duration(a, &s->batch_stats[i].compute_output);
        bs[i] = b;
    }
    p->n_batch_stats = bs ? (size_t)nb : 0;
    p->batch_stats = bs;
    return p;
}

void rtx__infer_model_statistics(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                 struct rtx_server_reply *rep) {
    Inference__ModelStatisticsRequest *in =
        rtx__infer_unpack(&inference__model_statistics_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_serving *s = rtx__infer_serving(d, rep);
    struct rtx_err err = {0};
    int64_t v = 0;
    struct rtx_model_stats *st = NULL;
    int n = 0;
    if (s && rtx__infer_parse_version(in->version, &v, &err) == 0 &&
        rtx_serving_stats(s, in->name, v, &st, &n, &err) == 0) {
        struct arena a = {0};
        Inference__ModelStatistics **ms = rtx__infer_arena_alloc(&a, (size_t)n * sizeof *ms);
        for (int i = 0; ms && i < n; i++)
            ms[i] = model_stats(&a, &st[i]);
        Inference__ModelStatisticsResponse out = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
        out.n_model_stats = (size_t)n;
        out.model_stats = ms;
        rtx__infer_pack(d, &a, &out.base, rep);
        rtx__infer_arena_free(&a);
        rtx_free(st);
    } else if (s) {
        rtx_server_reply_err(rep, &err);
    }
    inference__model_statistics_request__free_unpacked(in, NULL);
}
