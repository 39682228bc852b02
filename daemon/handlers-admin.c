/*
 * handlers-admin.c - the rtx.v1.Admin methods (Status, Devices, Health, Config, Pools, Lanes,
 * Generation, Drain). The daemon state they read (start time, the CPU device description) and the
 * drain entry point shared by Admin.Drain and SIGTERM are in daemon.c.
 *
 * DESIGN
 * Admin.Drain begins the drain through rtx__daemon_drain_begin (daemon.c); what follows it
 * (waiting for running jobs, stopping the server, exiting) belongs to main.c's loop, which
 * Admin.Drain reaches through d->on_drain, implemented by main.c with uv_async_send.
 * Status and Devices list the CPU, then the CUDA devices main.c found at start (d->gpus,
 * read-only while serving) with the job manager's worker count and, from the device layer
 * (d->devices), their health (a device that hit a sticky error in a job, a batch or a warm-up
 * is unhealthy with the error as detail), budget, consumers and plan cache.
 * Pools lists the memory pools of the devices jobs run on (rtx_jobs_get_pools). Lanes lists
 * each device scheduler's lanes (rtx_jobs_get_lanes), times in microseconds. Generation lists
 * the engines of the ready generative models as /metrics does (rtx_serving_index, then
 * rtx_model_generator and rtx_gen_engine_stats of each), with the latency histograms
 * summarized by rtx_gen_hist_quantile; an engine's device is the slot holding its consumer
 * "model NAME:VERSION" (serving/serving.h).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"
#include "generation/generation.h"
#include "rtx/v1/admin.pb-c.h"

/* ------------------------------------------------------------------------------------------
 * Devices, lanes, store
 * ---------------------------------------------------------------------------------------- */

/* The CPU device; threads = workers x CPU threads per worker. */
static void cpu_device(struct rtx_daemon *d, const struct rtx_jobs_stats *st, Rtx__V1__Device *m) {
    rtx__v1__device__init(m);
    m->index = 0;
    m->kind = "cpu";
    m->name = d->cpu_name;
    m->threads = st->workers * st->cpu_threads;
    m->memory_bytes = d->memory_bytes;
    m->healthy = true;
    m->workers = st->workers;
}

#define CONSUMERS_MAX 32 /* consumers listed per device */

/* A device list to reply with: the CPU, then every CUDA device. */
struct device_list {
    size_t n;
    Rtx__V1__Device *rows;
    Rtx__V1__Device **ptrs;
    char (*cc)[16]; /* compute capabilities, "9.0" */
    char (*detail)[256];
    struct rtx_device_consumer_info (*ci)[CONSUMERS_MAX];
    Rtx__V1__DeviceConsumer (*cm)[CONSUMERS_MAX];
    Rtx__V1__DeviceConsumer *(*cp)[CONSUMERS_MAX];
};

/* Row i as the device layer has it: health, budget, plan cache and consumers. */
static void device_layer_row(struct device_list *l, size_t i, struct rtx_device *dev) {
    Rtx__V1__Device *m = &l->rows[i];
    struct rtx_device_info info;
    rtx_device_info(dev, &info);
    snprintf(l->detail[i], sizeof l->detail[i], "%s", info.detail);
    m->healthy = info.healthy;
    m->detail = l->detail[i];
    m->budget_bytes = (int64_t)info.budget_bytes;
    m->reserved_bytes = (int64_t)info.reserved_bytes;
    m->used_bytes = (int64_t)info.used_bytes;
    m->plan_cache_hits = (int64_t)info.plan_hits;
    m->plan_cache_misses = (int64_t)info.plan_misses;
    m->plan_cache_evictions = (int64_t)info.plan_evictions;
    m->plans_kept = info.plans;
    m->backends = info.backends;
    int n = rtx_device_consumers(dev, l->ci[i], CONSUMERS_MAX);
    if (n > CONSUMERS_MAX) n = CONSUMERS_MAX;
    for (int c = 0; c < n; c++) {
        Rtx__V1__DeviceConsumer *cm = &l->cm[i][c];
        const struct rtx_device_consumer_info *ci = &l->ci[i][c];
        rtx__v1__device_consumer__init(cm);
        cm->name = (char *)ci->name;
        cm->reserved_bytes = (int64_t)ci->reserved_bytes;
        cm->used_bytes = (int64_t)ci->used_bytes;
        cm->peak_bytes = (int64_t)ci->peak_bytes;
        cm->refusals = (int64_t)ci->refusals;
        l->cp[i][c] = cm;
    }
    m->n_consumers = (size_t)n;
    m->consumers = l->cp[i];
}

/* Fills l (rtx_calloc'ed arrays, freed by device_list_free); false when out of memory. */
static bool device_list_make(struct rtx_daemon *d, const struct rtx_jobs_stats *st,
                             struct device_list *l) {
    size_t n = 1 + (size_t)(d->gpus.n > 0 ? d->gpus.n : 0);
    l->n = n;
    l->rows = rtx_calloc(n, sizeof *l->rows);
    l->ptrs = rtx_calloc(n, sizeof *l->ptrs);
    l->cc = rtx_calloc(n, sizeof *l->cc);
    l->detail = rtx_calloc(n, sizeof *l->detail);
    l->ci = rtx_calloc(n, sizeof *l->ci);
    l->cm = rtx_calloc(n, sizeof *l->cm);
    l->cp = rtx_calloc(n, sizeof *l->cp);
    if (!l->rows || !l->ptrs || !l->cc || !l->detail || !l->ci || !l->cm || !l->cp) return false;
    cpu_device(d, st, &l->rows[0]);
    l->ptrs[0] = &l->rows[0];
    for (size_t i = 1; i < n; i++) {
        const struct rtx_cuda_device *g = &d->gpus.devs[i - 1];
        Rtx__V1__Device *m = &l->rows[i];
        rtx__v1__device__init(m);
        snprintf(l->cc[i], sizeof l->cc[i], "%d.%d", g->cc_major, g->cc_minor);
        m->index = g->index;
        m->kind = "cuda";
        m->name = (char *)g->name;
        m->sm_count = g->sm_count;
        m->memory_bytes = (int64_t)g->memory_bytes;
        m->compute_capability = l->cc[i];
        m->healthy = g->healthy;
        m->detail = (char *)g->detail;
        /* the job manager's view: its slot i is CUDA device i - 1 (the first 16 devices) */
        if ((int)i < st->n_devices && st->devices[i].cuda_index == g->index)
            m->workers = st->devices[i].workers;
        l->ptrs[i] = m;
    }
    /* the device layer's slots are the same: 0 the CPU, 1 + N CUDA device N */
    for (size_t i = 0; d->devices && i < n; i++) {
        struct rtx_device *dev = rtx_devices_get(d->devices, (int)i);
        if (dev) device_layer_row(l, i, dev);
    }
    return true;
}

static void device_list_free(struct device_list *l) {
    rtx_free(l->cp);
    rtx_free(l->cm);
    rtx_free(l->ci);
    rtx_free(l->detail);
    rtx_free(l->cc);
    rtx_free(l->ptrs);
    rtx_free(l->rows);
}

/* Store health from rtx_store_stats; a failing call reads as "not ok" with its message. */
static void store_health(struct rtx_daemon *d, struct rtx_store_stats *ss, struct rtx_err *err,
                         Rtx__V1__StoreHealth *m, char *path, size_t path_size) {
    rtx__v1__store_health__init(m);
    memset(ss, 0, sizeof *ss);
    if (rtx_store_stats(d->store, ss, err) != 0) {
        ss->ok = false;
        snprintf(ss->last_error, sizeof ss->last_error, "%.*s", (int)(sizeof ss->last_error) - 1, err->msg);
    }
    pthread_rwlock_rdlock(&d->cfg_lock);
    snprintf(path, path_size, "%s", d->cfg && d->cfg->store_path ? d->cfg->store_path : "");
    pthread_rwlock_unlock(&d->cfg_lock);
    m->ok = ss->ok;
    m->path = path;
    m->db_bytes = ss->db_bytes;
    m->jobs = ss->jobs;
    m->blob_bytes = ss->blob_bytes;
    m->last_error = ss->last_error;
}

/* Unpacks a request message, answering INVALID_ARGUMENT and returning NULL when malformed;
 * free it with protobuf_c_message_free_unpacked. */
static void *unpack_request(const ProtobufCMessageDescriptor *desc, const uint8_t *req, size_t len,
                            struct rtx_server_reply *rep) {
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, req);
    if (!m) rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s", desc->name);
    return m;
}

/* Unpacks an empty request message, answering INVALID_ARGUMENT when malformed. */
static bool check_empty_request(const ProtobufCMessageDescriptor *desc, const uint8_t *req,
                                size_t len, struct rtx_server_reply *rep) {
    ProtobufCMessage *m = unpack_request(desc, req, len, rep);
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    return m != NULL;
}

/* ------------------------------------------------------------------------------------------
 * Handlers
 * ---------------------------------------------------------------------------------------- */

void rtx__daemon_admin_status(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__status_request__descriptor, req, len, rep)) return;
    struct rtx_jobs_stats st = {0};
    rtx_jobs_get_stats(d->jobs, &st);

    struct device_list devs = {0};
    if (!device_list_make(d, &st, &devs)) {
        device_list_free(&devs);
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory listing devices");
        return;
    }

    int nl = st.n_lanes < 0 ? 0 : st.n_lanes > 16 ? 16 : st.n_lanes;
    Rtx__V1__LaneDepth lanes[16], *lanep[16];
    for (int i = 0; i < nl; i++) {
        rtx__v1__lane_depth__init(&lanes[i]);
        lanes[i].lane = (char *)(st.lanes[i].lane ? st.lanes[i].lane : "");
        lanes[i].queued = st.lanes[i].queued;
        lanes[i].running = st.lanes[i].running;
        lanep[i] = &lanes[i];
    }

    struct rtx_store_stats ss;
    struct rtx_err err = {0};
    Rtx__V1__StoreHealth store;
    char path[1024];
    store_health(d, &ss, &err, &store, path, sizeof path);

    Rtx__V1__StatusResponse m = RTX__V1__STATUS_RESPONSE__INIT;
    m.version = RTX_VERSION;
    m.build_id = RTX_BUILD_ID;
    m.uptime_ms = rtx__daemon_uptime_ms(d);
    m.n_devices = devs.n;
    m.devices = devs.ptrs;
    m.n_lanes = (size_t)nl;
    m.lanes = lanep;
    m.store = &store;
    m.draining = atomic_load(&d->draining);
    m.jobs_succeeded = st.succeeded;
    m.jobs_failed = st.failed;
    rtx_server_reply_pack(rep, &m.base, 0);
    device_list_free(&devs);
}

void rtx__daemon_admin_devices(struct rtx_daemon *d, const uint8_t *req, size_t len,
                               struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__devices_request__descriptor, req, len, rep)) return;
    struct rtx_jobs_stats st = {0};
    rtx_jobs_get_stats(d->jobs, &st);
    struct device_list devs = {0};
    if (device_list_make(d, &st, &devs)) {
        Rtx__V1__DevicesResponse m = RTX__V1__DEVICES_RESPONSE__INIT;
        m.n_devices = devs.n;
        m.devices = devs.ptrs;
        rtx_server_reply_pack(rep, &m.base, 0);
    } else {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory listing devices");
    }
    device_list_free(&devs);
}

void rtx__daemon_admin_health(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__health_request__descriptor, req, len, rep)) return;
    Rtx__V1__HealthResponse m = RTX__V1__HEALTH_RESPONSE__INIT;
    char detail[300] = "";
    if (atomic_load(&d->draining)) {
        m.status = RTX__V1__HEALTH_RESPONSE__SERVING_STATUS__NOT_SERVING;
        snprintf(detail, sizeof detail, "draining");
    } else {
        struct rtx_store_stats ss = {0};
        struct rtx_err err = {0};
        if (rtx_store_stats(d->store, &ss, &err) != 0) {
            m.status = RTX__V1__HEALTH_RESPONSE__SERVING_STATUS__NOT_SERVING;
            snprintf(detail, sizeof detail, "store: %.*s", (int)(sizeof detail - 8), err.msg);
        } else if (!ss.ok) {
            m.status = RTX__V1__HEALTH_RESPONSE__SERVING_STATUS__NOT_SERVING;
            snprintf(detail, sizeof detail, "store: %s", ss.last_error);
        } else {
            m.status = RTX__V1__HEALTH_RESPONSE__SERVING_STATUS__SERVING;
        }
    }
    m.detail = detail;
    rtx_server_reply_pack(rep, &m.base, 0);
}

void rtx__daemon_admin_config(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__config_request__descriptor, req, len, rep)) return;
    struct rtx_setting_view *views = NULL;
    int n = 0;
    pthread_rwlock_rdlock(&d->cfg_lock);
    int rc = rtx_config_list(d->cfg, &views, &n);
    pthread_rwlock_unlock(&d->cfg_lock);
    if (rc != 0) {
        rtx_server_reply_status(rep, rtx_server_status_from_err(rc), "listing settings: %s",
                                rtx_strerror(rc));
        return;
    }
    size_t cnt = n > 0 ? (size_t)n : 0;
    Rtx__V1__Setting *s = rtx_calloc(cnt ? cnt : 1, sizeof *s);
    Rtx__V1__Setting **sp = rtx_calloc(cnt ? cnt : 1, sizeof *sp);
    if (!s || !sp) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory listing settings");
    } else {
        for (size_t i = 0; i < cnt; i++) {
            rtx__v1__setting__init(&s[i]);
            s[i].name = views[i].name;
            s[i].value = views[i].value;
            s[i].origin = (char *)(views[i].origin ? views[i].origin : "");
            s[i].mutable_ = views[i].is_mutable;
            s[i].description = (char *)(views[i].description ? views[i].description : "");
            sp[i] = &s[i];
        }
        Rtx__V1__ConfigResponse m = RTX__V1__CONFIG_RESPONSE__INIT;
        m.n_settings = cnt;
        m.settings = sp;
        rtx_server_reply_pack(rep, &m.base, 0);
    }
    rtx_free(sp);
    rtx_free(s);
    rtx_free(views);
}

void rtx__daemon_admin_pools(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__pools_request__descriptor, req, len, rep)) return;
    struct rtx_jobs_pool_row *rows = rtx_calloc(RTX_JOBS_MAX_POOL_ROWS, sizeof *rows);
    Rtx__V1__PoolStats *ms = rtx_calloc(RTX_JOBS_MAX_POOL_ROWS, sizeof *ms);
    Rtx__V1__PoolStats **mp = rtx_calloc(RTX_JOBS_MAX_POOL_ROWS, sizeof *mp);
    struct rtx_err err = {0};
    int n = 0;
    if (!rows || !ms || !mp) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory listing pools");
    } else if (rtx_jobs_get_pools(d->jobs, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err) < 0) {
        rtx_server_reply_err(rep, &err);
    } else {
        for (int i = 0; i < n; i++) {
            const struct rtx_jobs_pool_row *r = &rows[i];
            Rtx__V1__PoolStats *m = &ms[i];
            rtx__v1__pool_stats__init(m);
            m->device = (char *)r->device;
            m->kind = (char *)r->kind;
            m->pools = r->pools;
            m->allocated_bytes = (int64_t)r->total.bytes_allocated;
            m->reserved_bytes = (int64_t)r->total.bytes_reserved;
            m->active_bytes = (int64_t)r->total.bytes_active;
            m->allocated_peak_bytes = (int64_t)r->total.bytes_allocated_peak;
            m->reserved_peak_bytes = (int64_t)r->total.bytes_reserved_peak;
            m->fragmentation = r->total.fragmentation;
            m->alloc_retries = (int64_t)r->total.n_retries;
            m->ooms = (int64_t)r->total.n_ooms;
            m->cap_bytes = (int64_t)r->cap_bytes;
            m->free_bytes = (int64_t)r->total.bytes_free;
            m->allocs = (int64_t)r->total.n_allocs;
            m->cache_hits = (int64_t)r->total.n_cache_hits;
            m->segments = (int64_t)r->total.n_segments;
            m->healthy = r->healthy;
            m->detail = (char *)r->detail;
            mp[i] = m;
        }
        Rtx__V1__PoolsResponse m = RTX__V1__POOLS_RESPONSE__INIT;
        m.n_pools = (size_t)n;
        m.pools = mp;
        rtx_server_reply_pack(rep, &m.base, 0);
    }
    rtx_free(mp);
    rtx_free(ms);
    rtx_free(rows);
}

/* ns to whole µs, rounded up (a nonzero wait never shows as 0). */
static int64_t us_of(int64_t ns) {
    return ns > 0 ? (ns + 999) / 1000 : 0;
}

static void lane_to_msg(const char *device, int priority, const struct rtx_sched_lane_stats *l,
                        Rtx__V1__LaneStats *m) {
    rtx__v1__lane_stats__init(m);
    m->device = (char *)device;
    m->lane = (char *)l->config.name;
    m->priority = priority;
    m->target_p99_us = us_of(l->config.target_ns);
    m->weight = l->config.weight;
    m->max_queued = l->config.max_queued;
    m->on_timeout = (char *)rtx_sched_timeout_name(l->config.on_timeout);
    m->preemptible = l->config.preemptible;
    m->queued = l->queued;
    m->delayed = l->delayed;
    m->running = l->running;
    m->queued_work_us = us_of(l->queued_work_ns);
    m->est_delay_us = us_of(l->est_delay_ns);
    m->pressure = l->pressure;
    m->shed = l->shed;
    m->wait_samples = l->wait_samples;
    m->wait_p50_us = us_of(l->wait_p50_ns);
    m->wait_p90_us = us_of(l->wait_p90_ns);
    m->wait_p99_us = us_of(l->wait_p99_ns);
    m->wait_max_us = us_of(l->wait_max_ns);
    const int64_t *c = l->counters;
    m->admitted = c[RTX_SCHED_CTR_ADMITTED];
    m->rejected_full = c[RTX_SCHED_CTR_REJECTED_FULL];
    m->rejected_deadline = c[RTX_SCHED_CTR_REJECTED_DEADLINE];
    m->rejected_shed = c[RTX_SCHED_CTR_SHED];
    m->expired = c[RTX_SCHED_CTR_EXPIRED];
    m->dispatched = c[RTX_SCHED_CTR_DISPATCHED];
    m->completed = c[RTX_SCHED_CTR_COMPLETED];
    m->failed = c[RTX_SCHED_CTR_FAILED];
    m->cancelled = c[RTX_SCHED_CTR_CANCELLED];
    m->preempted = c[RTX_SCHED_CTR_PREEMPTED];
}

static void sched_to_msg(const char *device, const char *kind, int executors, bool healthy,
                         const struct rtx_sched_stats *st, Rtx__V1__LaneScheduler *m) {
    rtx__v1__lane_scheduler__init(m);
    m->device = (char *)device;
    m->kind = (char *)kind;
    m->executors = executors;
    m->healthy = healthy;
    m->running = st->running;
    m->brownout_level = st->brownout_level;
    m->brownout_entries = st->brownout_entries;
    m->brownout_exits = st->brownout_exits;
    m->batch_delay_factor = st->batch_delay_factor;
    m->cost_keys = st->cost_keys;
}

void rtx__daemon_admin_lanes(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    if (!check_empty_request(&rtx__v1__lanes_request__descriptor, req, len, rep)) return;
    /* one scheduler per job device, plus the inference row when serving runs */
    enum { MAX_SCHEDS = 2 + RTX_JOBS_MAX_GPUS, MAX_ROWS = MAX_SCHEDS * RTX_SCHED_MAX_LANES };
    struct rtx_jobs_lanes *st = rtx_malloc(sizeof *st);
    struct rtx_sched_stats *inf = rtx_malloc(sizeof *inf);
    Rtx__V1__LaneStats *ls = rtx_calloc(MAX_ROWS, sizeof *ls);
    Rtx__V1__LaneStats **lp = rtx_calloc(MAX_ROWS, sizeof *lp);
    Rtx__V1__LaneScheduler *ss = rtx_calloc(MAX_SCHEDS, sizeof *ss);
    Rtx__V1__LaneScheduler **sp = rtx_calloc(MAX_SCHEDS, sizeof *sp);
    if (!st || !inf || !ls || !lp || !ss || !sp) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory listing lanes");
    } else {
        rtx_jobs_get_lanes(d->jobs, st);
        size_t n = 0;
        for (int i = 0; i < st->n_devices; i++) {
            const struct rtx_jobs_lane_device *dv = &st->devices[i];
            sched_to_msg(dv->device, "jobs", dv->workers, dv->healthy, &dv->stats, &ss[i]);
            sp[i] = &ss[i];
            for (int l = 0; l < dv->stats.n_lanes && n < MAX_ROWS; l++) {
                lane_to_msg(dv->device, l, &dv->stats.lanes[l], &ls[n]);
                lp[n] = &ls[n];
                n++;
            }
        }
        int n_sched = st->n_devices;
        if (d->serving) {
            rtx_serving_lanes(d->serving, inf);
            sched_to_msg("inference", "inference", inf->executors, true, inf, &ss[n_sched]);
            sp[n_sched] = &ss[n_sched];
            n_sched++;
            for (int l = 0; l < inf->n_lanes && n < MAX_ROWS; l++) {
                lane_to_msg("inference", l, &inf->lanes[l], &ls[n]);
                lp[n] = &ls[n];
                n++;
            }
        }
        Rtx__V1__LanesResponse m = RTX__V1__LANES_RESPONSE__INIT;
        m.default_lane = st->default_lane;
        m.n_schedulers = (size_t)n_sched;
        m.schedulers = sp;
        m.n_lanes = n;
        m.lanes = lp;
        rtx_server_reply_pack(rep, &m.base, 0);
    }
    rtx_free(sp);
    rtx_free(ss);
    rtx_free(lp);
    rtx_free(ls);
    rtx_free(inf);
    rtx_free(st);
}

/* ------------------------------------------------------------------------------------------
 * Generation
 * ---------------------------------------------------------------------------------------- */

#define GEN_LANES                                                                                 \
    ((int)(sizeof((struct rtx_gen_stats *)0)->lanes / sizeof(struct rtx_gen_lane_stats)))

/* One generative model version of the reply, with what its message points into. */
struct gen_row {
    char name[128];
    char device[RTX_DEVICE_NAME_LEN];
    char arch[16];
    struct rtx_gen_stats st;
    Rtx__V1__GenerationModel m;
    Rtx__V1__GenerationLane lanes[GEN_LANES], *lanep[GEN_LANES];
    Rtx__V1__LatencySummary lat[4];
};

/* The name of the device slot that holds consumer "model NAME:VERSION" (the engine's, as
 * serving registers it), or "" when none does. */
static void gen_device(struct rtx_daemon *d, const char *name, int64_t version, char *out,
                       size_t len) {
    char consumer[RTX_DEVICE_CONSUMER_NAME_LEN + 160];
    snprintf(consumer, sizeof consumer, "model %s:%lld", name, (long long)version);
    consumer[RTX_DEVICE_CONSUMER_NAME_LEN - 1] = '\0'; /* as long as the device keeps names */
    snprintf(out, len, "%s", "");
    int cap = 0;
    struct rtx_device_consumer_info *ci = NULL;
    for (int slot = 0; d->devices && slot < rtx_devices_count(d->devices) && !out[0]; slot++) {
        struct rtx_device *dev = rtx_devices_get(d->devices, slot);
        int n = dev ? rtx_device_consumers(dev, ci, cap) : 0;
        if (n > cap) {
            struct rtx_device_consumer_info *more = rtx_malloc((size_t)(n + 8) * sizeof *more);
            if (!more) break; /* the row shows no device */
            rtx_free(ci);
            ci = more;
            cap = n + 8;
            n = rtx_device_consumers(dev, ci, cap);
        }
        for (int i = 0; i < n && i < cap; i++)
            if (strcmp(ci[i].name, consumer) == 0) snprintf(out, len, "%s", rtx_device_name(dev));
    }
    rtx_free(ci);
}

static void latency_to_msg(const struct rtx_gen_hist *h, Rtx__V1__LatencySummary *m) {
    rtx__v1__latency_summary__init(m);
    m->count = (int64_t)h->n;
    m->sum_s = h->sum_s;
    m->mean_s = h->n ? h->sum_s / (double)h->n : 0.0;
    m->p50_s = rtx_gen_hist_quantile(h, 0.5);
    m->p99_s = rtx_gen_hist_quantile(h, 0.99);
}

/* Fills r from model version m's engine e. */
static void gen_row_fill(struct rtx_daemon *d, struct rtx_model *m, struct rtx_gen_engine *e,
                         struct gen_row *r) {
    const struct rtx_model_info *info = rtx_model_info(m);
    struct rtx_gen_model *gm = rtx_gen_engine_model(e);
    const struct rtx_gen_stats *st = &r->st;
    snprintf(r->name, sizeof r->name, "%s", info->name);
    snprintf(r->arch, sizeof r->arch, "%s", rtx_gen_model_arch_name(gm));
    gen_device(d, info->name, info->version, r->device, sizeof r->device);
    rtx_gen_engine_stats(e, &r->st);
    Rtx__V1__GenerationModel *g = &r->m;
    rtx__v1__generation_model__init(g);
    g->name = r->name;
    g->version = info->version;
    g->device = r->device;
    g->arch = r->arch;
    g->context_length = rtx_gen_model_context_length(gm);
    int nl = st->n_lanes < 0 ? 0 : st->n_lanes > GEN_LANES ? GEN_LANES : st->n_lanes;
    for (int l = 0; l < nl; l++) {
        Rtx__V1__GenerationLane *lm = &r->lanes[l];
        rtx__v1__generation_lane__init(lm);
        lm->lane = (char *)st->lanes[l].name;
        lm->running = st->lanes[l].running;
        lm->waiting = st->lanes[l].waiting;
        lm->preempted = (int64_t)st->lanes[l].preempted_total;
        lm->refused = (int64_t)st->lanes[l].refused_total;
        r->lanep[l] = lm;
    }
    g->n_lanes = (size_t)nl;
    g->lanes = r->lanep;
    g->kv_blocks_total = st->kv_blocks_total;
    g->kv_blocks_used = st->kv_blocks_used;
    g->kv_blocks_cached = st->kv_blocks_cached;
    g->block_size = st->block_size;
    g->kv_cache_bytes = st->kv_cache_bytes;
    g->weight_bytes = st->weight_bytes;
    g->prefix_queries = (int64_t)st->prefix_queries_blocks;
    g->prefix_hits = (int64_t)st->prefix_hit_blocks;
    g->prefix_hit_rate = st->prefix_queries_blocks
                             ? (double)st->prefix_hit_blocks / (double)st->prefix_queries_blocks
                             : 0.0;
    g->kv_evictions = (int64_t)st->kv_evictions;
    g->prompt_tokens = (int64_t)st->prompt_tokens_total;
    g->generation_tokens = (int64_t)st->generation_tokens_total;
    g->requests_finished = (int64_t)st->requests_finished;
    g->requests_canceled = (int64_t)st->requests_canceled;
    g->requests_failed = (int64_t)st->requests_failed;
    g->steps = (int64_t)st->steps_total;
    const struct rtx_gen_hist *hs[4] = {&st->ttft, &st->itl, &st->tpot, &st->e2e};
    for (int k = 0; k < 4; k++)
        latency_to_msg(hs[k], &r->lat[k]);
    g->ttft = &r->lat[0];
    g->itl = &r->lat[1];
    g->tpot = &r->lat[2];
    g->e2e = &r->lat[3];
}

/* The rows of the reply: model `name` alone (it must be a ready generative model: else a
 * status is replied and -1 returned), or every ready generative model. *out is rtx_calloc'ed
 * (NULL when there are none); returns the row count. */
static int gen_rows_make(struct rtx_daemon *d, const char *name, struct gen_row **out,
                         struct rtx_server_reply *rep) {
    *out = NULL;
    struct rtx_err err = {0};
    if (*name) {
        if (!d->serving) {
            rtx_server_reply_status(rep, GRPC_STATUS_NOT_FOUND,
                                    "unknown model '%.128s': rtxd serves no model repository",
                                    name);
            return -1;
        }
        struct rtx_model *m;
        if (rtx_serving_model_get(d->serving, name, 0, &m, &err) != 0) {
            rtx_server_reply_err(rep, &err);
            return -1;
        }
        struct rtx_gen_engine *e = rtx_model_generator(m);
        struct gen_row *r = e ? rtx_calloc(1, sizeof *r) : NULL;
        if (!e)
            rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                    "model '%.128s' is not a generative model (platform %s)", name,
                                    rtx_model_info(m)->platform);
        else if (!r)
            rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory");
        else
            gen_row_fill(d, m, e, r);
        rtx_model_unref(m);
        *out = r;
        return r ? 1 : -1;
    }
    struct rtx_model_index_entry *idx = NULL;
    int n = 0, k = 0;
    if (!d->serving) return 0;
    if (rtx_serving_index(d->serving, true, &idx, &n, &err) != 0) {
        rtx_server_reply_err(rep, &err);
        return -1;
    }
    struct gen_row *rows = n > 0 ? rtx_calloc((size_t)n, sizeof *rows) : NULL;
    if (n > 0 && !rows) {
        rtx_free(idx);
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct rtx_model *m;
        /* a version unloaded since the index was taken is left out */
        if (rtx_serving_model_get(d->serving, idx[i].name, idx[i].version, &m, NULL) != 0)
            continue;
        struct rtx_gen_engine *e = rtx_model_generator(m);
        if (e) gen_row_fill(d, m, e, &rows[k++]);
        rtx_model_unref(m);
    }
    rtx_free(idx);
    *out = rows;
    return k;
}

void rtx__daemon_admin_generation(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep) {
    Rtx__V1__GenerationRequest *r =
        unpack_request(&rtx__v1__generation_request__descriptor, req, len, rep);
    if (!r) return;
    struct gen_row *rows = NULL;
    int n = gen_rows_make(d, r->model, &rows, rep);
    rtx__v1__generation_request__free_unpacked(r, NULL);
    if (n < 0) return;
    Rtx__V1__GenerationModel **mp = rtx_calloc(n > 0 ? (size_t)n : 1, sizeof *mp);
    if (!mp) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        for (int i = 0; i < n; i++)
            mp[i] = &rows[i].m;
        Rtx__V1__GenerationResponse m = RTX__V1__GENERATION_RESPONSE__INIT;
        m.n_models = (size_t)n;
        m.models = mp;
        rtx_server_reply_pack(rep, &m.base, 0);
    }
    rtx_free(mp);
    rtx_free(rows);
}

void rtx__daemon_admin_drain(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    Rtx__V1__DrainRequest *r = unpack_request(&rtx__v1__drain_request__descriptor, req, len, rep);
    if (!r) return;
    int grace = r->grace_ms;
    rtx__v1__drain_request__free_unpacked(r, NULL);
    if (grace < 0) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "grace_ms must be >= 0 (0 = the setting drain.grace_ms)");
        return;
    }
    if (grace == 0) {
        pthread_rwlock_rdlock(&d->cfg_lock);
        grace = d->cfg ? d->cfg->drain_grace_ms : 0;
        pthread_rwlock_unlock(&d->cfg_lock);
    }
    int running = 0, queued = 0, used = 0;
    if (rtx__daemon_drain_begin(d, grace, &running, &queued, &used)) {
        char rs[16], qs[16], gs[16];
        snprintf(rs, sizeof rs, "%d", running);
        snprintf(qs, sizeof qs, "%d", queued);
        snprintf(gs, sizeof gs, "%d", used);
        rtx_log(RTX_LOG_INFO, "draining", "by", "Admin.Drain", "running", rs, "queued", qs,
                "grace_ms", gs, NULL);
    }
    Rtx__V1__DrainResponse m = RTX__V1__DRAIN_RESPONSE__INIT;
    m.running = running;
    m.queued = queued;
    rtx_server_reply_pack(rep, &m.base, 0);
    if (d->on_drain) d->on_drain(d);
}
