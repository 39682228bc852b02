/*
 * models.c - librtx calls of inference.GRPCInferenceService (the KServe v2 protocol) that
 * operate served models: RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload, and
 * ModelReady + ModelMetadata + ModelConfig + ModelStatistics combined into one description.
 *
 * DESIGN
 * As in admin.c, each result is boxed with the decoded responses its strings point into
 * (client-impl.h); a model description keeps all four responses in its box.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client-impl.h"

static int oom(struct rtx_client_err *err) {
    return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
}

#define BOX_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ------------------------------------------------------------------------------------------
 * Repository
 * ---------------------------------------------------------------------------------------- */

struct model_list_box {
    Inference__RepositoryIndexResponse *pb;
    struct rtx_client_model *models;
    struct rtx_client_model_list list;
};

void rtx_client_model_list_free(struct rtx_client_model_list *list) {
    if (!list) return;
    struct model_list_box *b = BOX_OF(list, struct model_list_box, list);
    if (b->pb) inference__repository_index_response__free_unpacked(b->pb, NULL);
    free(b->models);
    free(b);
}

int rtx_client_list_models(struct rtx_client *c, bool ready_only,
                           struct rtx_client_model_list **out, struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Inference__RepositoryIndexRequest req = INFERENCE__REPOSITORY_INDEX_REQUEST__INIT;
    req.ready = ready_only;
    ProtobufCMessage *resp = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_REPOSITORY_INDEX, &req.base, &resp, err);
    if (rc < 0) return rc;
    Inference__RepositoryIndexResponse *pb = (Inference__RepositoryIndexResponse *)resp;
    struct model_list_box *b = calloc(1, sizeof *b);
    if (b) b->models = calloc(pb->n_models ? pb->n_models : 1, sizeof *b->models);
    if (!b || !b->models) {
        free(b);
        inference__repository_index_response__free_unpacked(pb, NULL);
        return oom(err);
    }
    b->pb = pb;
    for (size_t i = 0; i < pb->n_models; i++) {
        const Inference__RepositoryIndexResponse__ModelIndex *m = pb->models[i];
        b->models[i].name = rtx__client_str(m->name);
        b->models[i].version = m->version && m->version[0] ? strtoll(m->version, NULL, 10) : 0;
        b->models[i].state = rtx__client_str(m->state);
        b->models[i].reason = rtx__client_str(m->reason);
    }
    b->list.n_models = (int)pb->n_models;
    b->list.models = b->models;
    *out = &b->list;
    return 0;
}

int rtx_client_load_model(struct rtx_client *c, const char *name, const char *config_json,
                          struct rtx_client_err *err) {
    if (!name || !*name) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no model name");
    Inference__RepositoryModelLoadRequest req = INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__INIT;
    req.model_name = (char *)name;
    Inference__ModelRepositoryParameter cfg = INFERENCE__MODEL_REPOSITORY_PARAMETER__INIT;
    Inference__RepositoryModelLoadRequest__ParametersEntry entry =
        INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__PARAMETERS_ENTRY__INIT;
    Inference__RepositoryModelLoadRequest__ParametersEntry *entries[1] = {&entry};
    if (config_json) {
        cfg.parameter_choice_case =
            INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
        cfg.string_param = (char *)config_json;
        entry.key = (char *)"config";
        entry.value = &cfg;
        req.n_parameters = 1;
        req.parameters = entries;
    }
    ProtobufCMessage *resp = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_MODEL_LOAD, &req.base, &resp, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int rtx_client_unload_model(struct rtx_client *c, const char *name, struct rtx_client_err *err) {
    if (!name || !*name) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no model name");
    Inference__RepositoryModelUnloadRequest req = INFERENCE__REPOSITORY_MODEL_UNLOAD_REQUEST__INIT;
    req.model_name = (char *)name;
    ProtobufCMessage *resp = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_MODEL_UNLOAD, &req.base, &resp, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * One model
 * ---------------------------------------------------------------------------------------- */

struct model_box {
    Inference__ModelReadyResponse *ready;
    Inference__ModelMetadataResponse *meta;
    Inference__ModelConfigResponse *config;
    Inference__ModelStatisticsResponse *stats;
    struct rtx_client_model_tensor *tensors; /* inputs, then outputs */
    struct rtx_client_model_info info;
};

void rtx_client_model_info_free(struct rtx_client_model_info *info) {
    if (!info) return;
    struct model_box *b = BOX_OF(info, struct model_box, info);
    if (b->ready) inference__model_ready_response__free_unpacked(b->ready, NULL);
    if (b->meta) inference__model_metadata_response__free_unpacked(b->meta, NULL);
    if (b->config) inference__model_config_response__free_unpacked(b->config, NULL);
    if (b->stats) inference__model_statistics_response__free_unpacked(b->stats, NULL);
    free(b->tensors);
    free(b);
}

static void tensors_fill(struct rtx_client_model_tensor *dst,
                         Inference__ModelMetadataResponse__TensorMetadata *const *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dst[i].name = rtx__client_str(src[i]->name);
        dst[i].datatype = rtx__client_str(src[i]->datatype);
        dst[i].ndim = (int)src[i]->n_shape;
        dst[i].dims = src[i]->shape;
    }
}

static int64_t u2i(uint64_t v) {
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

static void stats_fill(struct rtx_client_model_info *info,
                       const Inference__ModelStatisticsResponse *st, int64_t version) {
    for (size_t i = 0; i < st->n_model_stats; i++) {
        const Inference__ModelStatistics *m = st->model_stats[i];
        if (!m->version || strtoll(m->version, NULL, 10) != version) continue;
        info->last_inference_ms = u2i(m->last_inference);
        info->inference_count = u2i(m->inference_count);
        info->execution_count = u2i(m->execution_count);
        const Inference__InferStatistics *is = m->inference_stats;
        if (!is) return;
        if (is->success) {
            info->success_count = u2i(is->success->count);
            info->success_ns = u2i(is->success->ns);
        }
        if (is->fail) info->fail_count = u2i(is->fail->count);
        if (is->queue) info->queue_ns = u2i(is->queue->ns);
        if (is->compute_infer) info->compute_infer_ns = u2i(is->compute_infer->ns);
        return;
    }
}

int rtx_client_get_model(struct rtx_client *c, const char *name, int64_t version,
                         struct rtx_client_model_info **out, struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    if (!name || !*name) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no model name");
    if (version < 0) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "negative model version");
    char vs[32] = "";
    if (version > 0) snprintf(vs, sizeof vs, "%lld", (long long)version);
    struct model_box *b = calloc(1, sizeof *b);
    if (!b) return oom(err);

    Inference__ModelMetadataRequest mreq = INFERENCE__MODEL_METADATA_REQUEST__INIT;
    mreq.name = (char *)name;
    mreq.version = vs;
    ProtobufCMessage *resp = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_MODEL_METADATA, &mreq.base, &resp, err);
    b->meta = (Inference__ModelMetadataResponse *)resp;
    /* the version described: the one the metadata names */
    if (rc == 0 && b->meta->n_versions > 0) snprintf(vs, sizeof vs, "%s", b->meta->versions[0]);
    Inference__ModelConfigRequest creq = INFERENCE__MODEL_CONFIG_REQUEST__INIT;
    Inference__ModelReadyRequest rreq = INFERENCE__MODEL_READY_REQUEST__INIT;
    Inference__ModelStatisticsRequest sreq = INFERENCE__MODEL_STATISTICS_REQUEST__INIT;
    creq.name = rreq.name = sreq.name = (char *)name;
    creq.version = rreq.version = sreq.version = vs;
    const struct {
        enum rtx__client_method m;
        ProtobufCMessage *req;
    } calls[] = {{RTX__CLIENT_M_MODEL_CONFIG, &creq.base},
                 {RTX__CLIENT_M_MODEL_READY, &rreq.base},
                 {RTX__CLIENT_M_MODEL_STATISTICS, &sreq.base}};
    ProtobufCMessage *resps[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < 3 && rc == 0; i++)
        rc = rtx__client_unary(c, calls[i].m, calls[i].req, &resps[i], err);
    b->config = (Inference__ModelConfigResponse *)resps[0];
    b->ready = (Inference__ModelReadyResponse *)resps[1];
    b->stats = (Inference__ModelStatisticsResponse *)resps[2];
    if (rc == 0 && !b->config->config)
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1, "ModelConfig: no config in the reply");
    size_t ni = rc == 0 ? b->meta->n_inputs : 0, no = rc == 0 ? b->meta->n_outputs : 0;
    if (rc == 0 && !(b->tensors = calloc(ni + no ? ni + no : 1, sizeof *b->tensors)))
        rc = oom(err);
    if (rc < 0) {
        rtx_client_model_info_free(&b->info);
        return rc;
    }
    struct rtx_client_model_info *info = &b->info;
    const Inference__ModelConfig *cfg = b->config->config;
    info->name = rtx__client_str(b->meta->name);
    info->version = strtoll(vs, NULL, 10);
    info->platform = rtx__client_str(b->meta->platform);
    info->ready = b->ready->ready;
    info->max_batch_size = cfg->max_batch_size;
    tensors_fill(b->tensors, b->meta->inputs, ni);
    tensors_fill(b->tensors + ni, b->meta->outputs, no);
    info->n_inputs = (int)ni;
    info->inputs = b->tensors;
    info->n_outputs = (int)no;
    info->outputs = b->tensors + ni;
    if (cfg->scheduling_choice_case ==
            INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING &&
        cfg->dynamic_batching) {
        info->dynamic_batching = true;
        info->n_preferred_batch_sizes = (int)cfg->dynamic_batching->n_preferred_batch_size;
        info->preferred_batch_sizes = cfg->dynamic_batching->preferred_batch_size;
        info->max_queue_delay_us = u2i(cfg->dynamic_batching->max_queue_delay_microseconds);
    }
    info->instance_kind = "";
    for (size_t i = 0; i < cfg->n_instance_group; i++) {
        info->instances += cfg->instance_group[i]->count;
        info->instance_kind =
            cfg->instance_group[i]->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU
                ? "KIND_GPU"
                : "KIND_CPU";
    }
    stats_fill(info, b->stats, info->version);
    rtx__client_err_clear(err);
    *out = info;
    return 0;
}
