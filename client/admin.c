/*
 * admin.c - librtx calls of the rtx.v1.Admin service: Status, Devices, Health, Config, Pools,
 * Lanes, Generation and Drain. Each result is boxed with the decoded response its strings point
 * into (client-impl.h).
 */
#include <stdlib.h>
#include <string.h>

#include "client/client-impl.h"

static int oom(struct rtx_client_err *err) {
    return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
}

/* The pointer to a box from the pointer to its public member. */
#define BOX_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static void device_fill(struct rtx_client_device *dst, const Rtx__V1__Device *src) {
    dst->index = src->index;
    dst->kind = rtx__client_str(src->kind);
    dst->name = rtx__client_str(src->name);
    dst->threads = src->threads;
    dst->sm_count = src->sm_count;
    dst->memory_bytes = src->memory_bytes;
    dst->compute_capability = rtx__client_str(src->compute_capability);
    dst->healthy = src->healthy;
    dst->detail = rtx__client_str(src->detail);
    dst->workers = src->workers;
    dst->budget_bytes = src->budget_bytes;
    dst->reserved_bytes = src->reserved_bytes;
    dst->used_bytes = src->used_bytes;
    dst->plan_cache_hits = src->plan_cache_hits;
    dst->plan_cache_misses = src->plan_cache_misses;
    dst->plan_cache_evictions = src->plan_cache_evictions;
    dst->plans_kept = src->plans_kept;
    dst->backends = src->backends;
}

/* An array of n devices filled from src, their consumers after them in the same block (one
 * free), or NULL when out of memory. */
static struct rtx_client_device *devices_new(Rtx__V1__Device *const *src, size_t n) {
    size_t nc = 0;
    for (size_t i = 0; i < n; i++)
        nc += src[i]->n_consumers;
    struct rtx_client_device *d =
        calloc(1, (n ? n : 1) * sizeof *d + nc * sizeof(struct rtx_client_device_consumer));
    if (!d) return NULL;
    struct rtx_client_device_consumer *c = (void *)&d[n ? n : 1];
    for (size_t i = 0; i < n; i++) {
        device_fill(&d[i], src[i]);
        d[i].consumers = c;
        d[i].n_consumers = (int)src[i]->n_consumers;
        for (size_t k = 0; k < src[i]->n_consumers; k++, c++) {
            const Rtx__V1__DeviceConsumer *m = src[i]->consumers[k];
            c->name = rtx__client_str(m->name);
            c->reserved_bytes = m->reserved_bytes;
            c->used_bytes = m->used_bytes;
            c->peak_bytes = m->peak_bytes;
            c->refusals = m->refusals;
        }
    }
    return d;
}

/* ------------------------------------------------------------------------------------------
 * Status
 * ---------------------------------------------------------------------------------------- */

struct status_box {
    Rtx__V1__StatusResponse *pb;
    struct rtx_client_device *devices;
    struct rtx_client_lane_depth *lanes;
    struct rtx_client_status st;
};

static void status_box_free(struct status_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__status_response__free_unpacked(b->pb, NULL);
    free(b->devices);
    free(b->lanes);
    free(b);
}

void rtx_client_status_free(struct rtx_client_status *st) {
    if (st) status_box_free(BOX_OF(st, struct status_box, st));
}

int rtx_client_get_status(struct rtx_client *c, struct rtx_client_status **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__StatusRequest req = RTX__V1__STATUS_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_STATUS, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct status_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    Rtx__V1__StatusResponse *pb = b->pb = (Rtx__V1__StatusResponse *)msg;
    b->devices = devices_new(pb->devices, pb->n_devices);
    b->lanes = calloc(pb->n_lanes ? pb->n_lanes : 1, sizeof *b->lanes);
    if (!b->devices || !b->lanes) {
        status_box_free(b);
        return oom(err);
    }
    for (size_t i = 0; i < pb->n_lanes; i++) {
        b->lanes[i].lane = rtx__client_str(pb->lanes[i]->lane);
        b->lanes[i].queued = pb->lanes[i]->queued;
        b->lanes[i].running = pb->lanes[i]->running;
    }
    struct rtx_client_status *st = &b->st;
    st->version = rtx__client_str(pb->version);
    st->build_id = rtx__client_str(pb->build_id);
    st->uptime_ms = pb->uptime_ms;
    st->n_devices = (int)pb->n_devices;
    st->devices = b->devices;
    st->n_lanes = (int)pb->n_lanes;
    st->lanes = b->lanes;
    st->store.path = "";
    st->store.last_error = "";
    if (pb->store) {
        st->store.ok = pb->store->ok;
        st->store.path = rtx__client_str(pb->store->path);
        st->store.db_bytes = pb->store->db_bytes;
        st->store.jobs = pb->store->jobs;
        st->store.blob_bytes = pb->store->blob_bytes;
        st->store.last_error = rtx__client_str(pb->store->last_error);
    }
    st->draining = pb->draining;
    st->jobs_succeeded = pb->jobs_succeeded;
    st->jobs_failed = pb->jobs_failed;
    *out = st;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------------------------- */

struct devices_box {
    Rtx__V1__DevicesResponse *pb;
    struct rtx_client_device *devices;
    struct rtx_client_device_list list;
};

static void devices_box_free(struct devices_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__devices_response__free_unpacked(b->pb, NULL);
    free(b->devices);
    free(b);
}

void rtx_client_device_list_free(struct rtx_client_device_list *list) {
    if (list) devices_box_free(BOX_OF(list, struct devices_box, list));
}

int rtx_client_list_devices(struct rtx_client *c, struct rtx_client_device_list **out,
                            struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__DevicesRequest req = RTX__V1__DEVICES_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_DEVICES, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct devices_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    b->pb = (Rtx__V1__DevicesResponse *)msg;
    if (!(b->devices = devices_new(b->pb->devices, b->pb->n_devices))) {
        devices_box_free(b);
        return oom(err);
    }
    b->list.n_devices = (int)b->pb->n_devices;
    b->list.devices = b->devices;
    *out = &b->list;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Health
 * ---------------------------------------------------------------------------------------- */

struct health_box {
    Rtx__V1__HealthResponse *pb;
    struct rtx_client_health health;
};

void rtx_client_health_free(struct rtx_client_health *h) {
    if (!h) return;
    struct health_box *b = BOX_OF(h, struct health_box, health);
    rtx__v1__health_response__free_unpacked(b->pb, NULL);
    free(b);
}

int rtx_client_get_health(struct rtx_client *c, struct rtx_client_health **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__HealthRequest req = RTX__V1__HEALTH_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_HEALTH, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct health_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    b->pb = (Rtx__V1__HealthResponse *)msg;
    b->health.status = (enum rtx_client_serving_status)b->pb->status;
    b->health.detail = rtx__client_str(b->pb->detail);
    *out = &b->health;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Config
 * ---------------------------------------------------------------------------------------- */

struct config_box {
    Rtx__V1__ConfigResponse *pb;
    struct rtx_client_setting *settings;
    struct rtx_client_config cfg;
};

static void config_box_free(struct config_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__config_response__free_unpacked(b->pb, NULL);
    free(b->settings);
    free(b);
}

void rtx_client_config_free(struct rtx_client_config *cfg) {
    if (cfg) config_box_free(BOX_OF(cfg, struct config_box, cfg));
}

int rtx_client_get_config(struct rtx_client *c, struct rtx_client_config **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__ConfigRequest req = RTX__V1__CONFIG_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_CONFIG, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct config_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    Rtx__V1__ConfigResponse *pb = b->pb = (Rtx__V1__ConfigResponse *)msg;
    b->settings = calloc(pb->n_settings ? pb->n_settings : 1, sizeof *b->settings);
    if (!b->settings) {
        config_box_free(b);
        return oom(err);
    }
    for (size_t i = 0; i < pb->n_settings; i++) {
        const Rtx__V1__Setting *s = pb->settings[i];
        b->settings[i].name = rtx__client_str(s->name);
        b->settings[i].value = rtx__client_str(s->value);
        b->settings[i].origin = rtx__client_str(s->origin);
        b->settings[i].is_mutable = s->mutable_;
        b->settings[i].description = rtx__client_str(s->description);
    }
    b->cfg.n_settings = (int)pb->n_settings;
    b->cfg.settings = b->settings;
    *out = &b->cfg;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Pools
 * ---------------------------------------------------------------------------------------- */

struct pools_box {
    Rtx__V1__PoolsResponse *pb;
    struct rtx_client_pool *pools;
    struct rtx_client_pool_list list;
};

static void pools_box_free(struct pools_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__pools_response__free_unpacked(b->pb, NULL);
    free(b->pools);
    free(b);
}

void rtx_client_pool_list_free(struct rtx_client_pool_list *list) {
    if (list) pools_box_free(BOX_OF(list, struct pools_box, list));
}

int rtx_client_list_pools(struct rtx_client *c, struct rtx_client_pool_list **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__PoolsRequest req = RTX__V1__POOLS_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_POOLS, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct pools_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    Rtx__V1__PoolsResponse *pb = b->pb = (Rtx__V1__PoolsResponse *)msg;
    b->pools = calloc(pb->n_pools ? pb->n_pools : 1, sizeof *b->pools);
    if (!b->pools) {
        pools_box_free(b);
        return oom(err);
    }
    for (size_t i = 0; i < pb->n_pools; i++) {
        const Rtx__V1__PoolStats *s = pb->pools[i];
        struct rtx_client_pool *p = &b->pools[i];
        p->device = rtx__client_str(s->device);
        p->kind = rtx__client_str(s->kind);
        p->pools = s->pools;
        p->allocated_bytes = s->allocated_bytes;
        p->reserved_bytes = s->reserved_bytes;
        p->active_bytes = s->active_bytes;
        p->allocated_peak_bytes = s->allocated_peak_bytes;
        p->reserved_peak_bytes = s->reserved_peak_bytes;
        p->fragmentation = s->fragmentation;
        p->alloc_retries = s->alloc_retries;
        p->ooms = s->ooms;
        p->cap_bytes = s->cap_bytes;
        p->free_bytes = s->free_bytes;
        p->allocs = s->allocs;
        p->cache_hits = s->cache_hits;
        p->segments = s->segments;
        p->healthy = s->healthy;
        p->detail = rtx__client_str(s->detail);
    }
    b->list.n_pools = (int)pb->n_pools;
    b->list.pools = b->pools;
    *out = &b->list;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Lanes
 * ---------------------------------------------------------------------------------------- */

struct lanes_box {
    Rtx__V1__LanesResponse *pb;
    struct rtx_client_lane *lanes;
    struct rtx_client_lane_scheduler *scheds;
    struct rtx_client_lane_list list;
};

static void lanes_box_free(struct lanes_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__lanes_response__free_unpacked(b->pb, NULL);
    free(b->lanes);
    free(b->scheds);
    free(b);
}

void rtx_client_lane_list_free(struct rtx_client_lane_list *list) {
    if (list) lanes_box_free(BOX_OF(list, struct lanes_box, list));
}

int rtx_client_list_lanes(struct rtx_client *c, struct rtx_client_lane_list **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__LanesRequest req = RTX__V1__LANES_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_LANES, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct lanes_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    Rtx__V1__LanesResponse *pb = b->pb = (Rtx__V1__LanesResponse *)msg;
    b->lanes = calloc(pb->n_lanes ? pb->n_lanes : 1, sizeof *b->lanes);
    b->scheds = calloc(pb->n_schedulers ? pb->n_schedulers : 1, sizeof *b->scheds);
    if (!b->lanes || !b->scheds) {
        lanes_box_free(b);
        return oom(err);
    }
    for (size_t i = 0; i < pb->n_schedulers; i++) {
        const Rtx__V1__LaneScheduler *s = pb->schedulers[i];
        struct rtx_client_lane_scheduler *o = &b->scheds[i];
        o->device = rtx__client_str(s->device);
        o->kind = rtx__client_str(s->kind);
        o->executors = s->executors;
        o->healthy = s->healthy;
        o->running = s->running;
        o->brownout_level = s->brownout_level;
        o->brownout_entries = s->brownout_entries;
        o->brownout_exits = s->brownout_exits;
        o->batch_delay_factor = s->batch_delay_factor;
        o->cost_keys = s->cost_keys;
    }
    for (size_t i = 0; i < pb->n_lanes; i++) {
        const Rtx__V1__LaneStats *s = pb->lanes[i];
        struct rtx_client_lane *o = &b->lanes[i];
        o->device = rtx__client_str(s->device);
        o->lane = rtx__client_str(s->lane);
        o->priority = s->priority;
        o->target_p99_us = s->target_p99_us;
        o->weight = s->weight;
        o->max_queued = s->max_queued;
        o->on_timeout = rtx__client_str(s->on_timeout);
        o->preemptible = s->preemptible;
        o->queued = s->queued;
        o->delayed = s->delayed;
        o->running = s->running;
        o->queued_work_us = s->queued_work_us;
        o->est_delay_us = s->est_delay_us;
        o->pressure = s->pressure;
        o->shed = s->shed;
        o->wait_samples = s->wait_samples;
        o->wait_p50_us = s->wait_p50_us;
        o->wait_p90_us = s->wait_p90_us;
        o->wait_p99_us = s->wait_p99_us;
        o->wait_max_us = s->wait_max_us;
        o->admitted = s->admitted;
        o->rejected_full = s->rejected_full;
        o->rejected_deadline = s->rejected_deadline;
        o->rejected_shed = s->rejected_shed;
        o->expired = s->expired;
        o->dispatched = s->dispatched;
        o->completed = s->completed;
        o->failed = s->failed;
        o->cancelled = s->cancelled;
        o->preempted = s->preempted;
    }
    b->list.default_lane = rtx__client_str(pb->default_lane);
    b->list.n_schedulers = (int)pb->n_schedulers;
    b->list.schedulers = b->scheds;
    b->list.n_lanes = (int)pb->n_lanes;
    b->list.lanes = b->lanes;
    *out = &b->list;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Generation
 * ---------------------------------------------------------------------------------------- */

struct generation_box {
    Rtx__V1__GenerationResponse *pb;
    struct rtx_client_gen_model *models;
    struct rtx_client_gen_lane *lanes; /* every model's, one after the other */
    struct rtx_client_generation gen;
};

static void generation_box_free(struct generation_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__generation_response__free_unpacked(b->pb, NULL);
    free(b->models);
    free(b->lanes);
    free(b);
}

void rtx_client_generation_free(struct rtx_client_generation *g) {
    if (g) generation_box_free(BOX_OF(g, struct generation_box, gen));
}

static void latency_fill(struct rtx_client_gen_latency *dst, const Rtx__V1__LatencySummary *src) {
    memset(dst, 0, sizeof *dst);
    if (!src) return;
    dst->count = src->count;
    dst->sum_s = src->sum_s;
    dst->mean_s = src->mean_s;
    dst->p50_s = src->p50_s;
    dst->p99_s = src->p99_s;
}

static void gen_model_fill(struct rtx_client_gen_model *o, const Rtx__V1__GenerationModel *s,
                           struct rtx_client_gen_lane *lanes) {
    o->name = rtx__client_str(s->name);
    o->version = s->version;
    o->device = rtx__client_str(s->device);
    o->arch = rtx__client_str(s->arch);
    o->context_length = s->context_length;
    for (size_t l = 0; l < s->n_lanes; l++) {
        lanes[l].lane = rtx__client_str(s->lanes[l]->lane);
        lanes[l].running = s->lanes[l]->running;
        lanes[l].waiting = s->lanes[l]->waiting;
        lanes[l].preempted = s->lanes[l]->preempted;
        lanes[l].refused = s->lanes[l]->refused;
    }
    o->n_lanes = (int)s->n_lanes;
    o->lanes = lanes;
    o->kv_blocks_total = s->kv_blocks_total;
    o->kv_blocks_used = s->kv_blocks_used;
    o->kv_blocks_cached = s->kv_blocks_cached;
    o->block_size = s->block_size;
    o->kv_cache_bytes = s->kv_cache_bytes;
    o->weight_bytes = s->weight_bytes;
    o->prefix_queries = s->prefix_queries;
    o->prefix_hits = s->prefix_hits;
    o->prefix_hit_rate = s->prefix_hit_rate;
    o->kv_evictions = s->kv_evictions;
    o->prompt_tokens = s->prompt_tokens;
    o->generation_tokens = s->generation_tokens;
    o->requests_finished = s->requests_finished;
    o->requests_canceled = s->requests_canceled;
    o->requests_failed = s->requests_failed;
    o->steps = s->steps;
    latency_fill(&o->ttft, s->ttft);
    latency_fill(&o->itl, s->itl);
    latency_fill(&o->tpot, s->tpot);
    latency_fill(&o->e2e, s->e2e);
}

int rtx_client_generation(struct rtx_client *c, const char *model,
                          struct rtx_client_generation **out, struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    Rtx__V1__GenerationRequest req = RTX__V1__GENERATION_REQUEST__INIT;
    req.model = (char *)(model ? model : "");
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_GENERATION, &req.base, &msg, err);
    if (rc < 0) return rc;
    struct generation_box *b = calloc(1, sizeof *b);
    if (!b) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    Rtx__V1__GenerationResponse *pb = b->pb = (Rtx__V1__GenerationResponse *)msg;
    size_t nl = 0;
    for (size_t i = 0; i < pb->n_models; i++)
        nl += pb->models[i]->n_lanes;
    b->models = calloc(pb->n_models ? pb->n_models : 1, sizeof *b->models);
    b->lanes = calloc(nl ? nl : 1, sizeof *b->lanes);
    if (!b->models || !b->lanes) {
        generation_box_free(b);
        return oom(err);
    }
    for (size_t i = 0, l = 0; i < pb->n_models; l += pb->models[i]->n_lanes, i++)
        gen_model_fill(&b->models[i], pb->models[i], &b->lanes[l]);
    b->gen.n_models = (int)pb->n_models;
    b->gen.models = b->models;
    *out = &b->gen;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Drain
 * ---------------------------------------------------------------------------------------- */

int rtx_client_drain(struct rtx_client *c, int grace_ms, struct rtx_client_drain_result *out,
                     struct rtx_client_err *err) {
    if (out) memset(out, 0, sizeof *out);
    if (grace_ms < 0)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "negative grace period %d ms",
                               grace_ms);
    Rtx__V1__DrainRequest req = RTX__V1__DRAIN_REQUEST__INIT;
    req.grace_ms = grace_ms;
    ProtobufCMessage *msg = NULL;
    int rc = rtx__client_unary(c, RTX__CLIENT_M_DRAIN, &req.base, &msg, err);
    if (rc < 0) return rc;
    const Rtx__V1__DrainResponse *resp = (const Rtx__V1__DrainResponse *)msg;
    if (out) {
        out->running = resp->running;
        out->queued = resp->queued;
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
