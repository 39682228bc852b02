/*
 * model-load.c - loading and stopping a model version: the graph, memory-mapped weights bound
 * to the graph, checks against config.json, its content digest, its device consumers and
 * instances (a backend each) on the device set's devices, its SLA scheduler with the learned
 * cost it had, a warm-up run per instance, the workers; and new lane settings for a loaded
 * version.
 *
 * DESIGN
 * Weights: the graph file declares every weight as a graph input that config.json does not
 * list; at load each such input is bound, by name, to the tensor of model.safetensors with
 * that name (dtype and shape must match the declaration, -1 matching any size), and becomes an
 * initializer over the mapped bytes. The graph file carries no weight bytes; plans and
 * backends see ordinary initializers (docs/decisions.md).
 *
 * Devices (decision 114): the instances' devices come from instance_group as before; the
 * version registers one consumer per device it uses, with config.json's memory_reserve_bytes
 * or the default of reservation(), before any backend is made, so a reservation that does not
 * fit fails the load with the device layer's message and nothing else was allocated there.
 * The digest (SHA-256 of the graph file and the weights) is computed once here: plans are
 * kept in the devices' caches under keys made from it (model-exec.c).
 *
 * The version's learned cost is kept across reloads (and, through the device set's book of
 * learned costs, across restarts: serving.c reads and writes it). New lane settings after a SIGHUP reach the live scheduler
 * under mu (rtx__model_reconfigure), derived by the same rules as at load (queue bounds
 * capped at max_queue) but keeping the executors and running bound the version was loaded
 * with.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "generation/generation.h"
#include "runtime/backend.h"
#include "serving/model-impl.h"

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Turns graph input v (position pos among g->inputs) into an initializer over t. */
static int bind_weight(struct rtx_graph *g, int pos, struct rtx_tensor *t, const char *wpath,
                       struct rtx_err *err) {
    struct rtx_value *v = &g->values[g->inputs[pos]];
    char want[96], got[96];
    bool ok = v->dtype == t->dtype && v->ndim == t->ndim;
    for (int d = 0; ok && d < v->ndim; d++)
        ok = v->dims[d] < 0 || v->dims[d] == t->dims[d];
    if (!ok)
        return rtx_err_set(err, RTX_EGRAPH, "%s: tensor '%s' is %s, the graph declares %s", wpath,
                           v->name, rtx_shape_str(t->dtype, t->ndim, t->dims, got, sizeof got),
                           rtx_shape_str(v->dtype, v->ndim, v->dims, want, sizeof want));
    v->is_input = false;
    v->constant = t;
    for (int d = 0; d < t->ndim; d++)
        v->dims[d] = t->dims[d];
    memmove(&g->inputs[pos], &g->inputs[pos + 1], sizeof g->inputs[0] * (size_t)(g->n_inputs -
                                                                              pos - 1));
    g->n_inputs--;
    return 0;
}

/* Binds the graph's weight inputs, maps config inputs and outputs onto the graph, checks
 * dtypes and shapes. */
static int bind_graph(struct rtx_model *m, const char *gpath, const char *wpath,
                      struct rtx_err *err) {
    struct rtx_graph *g = m->graph;
    const struct rtx_model_info *info = &m->cfg.info;
    int rc, off = info->max_batch_size > 0 ? 1 : 0;
    for (int pos = 0; pos < g->n_inputs;) {
        const struct rtx_value *v = &g->values[g->inputs[pos]];
        int i = 0;
        while (i < info->n_inputs && strcmp(info->inputs[i].name, v->name) != 0)
            i++;
        if (i < info->n_inputs) {
            pos++;
            continue;
        }
        int w = m->weights ? rtx_safetensors_find(m->weights, v->name) : -1;
        if (w < 0)
            return rtx_err_set(err, RTX_EGRAPH,
                               "%s: graph input '%s' is neither an input of config.json nor a "
                               "tensor of %s",
                               gpath, v->name, wpath);
        struct rtx_tensor *t;
        if ((rc = rtx_safetensors_tensor(m->weights, w, &t, err))) return rc;
        if ((rc = bind_weight(g, pos, t, wpath, err))) {
            rtx_tensor_unref(t);
            return rc;
        }
    }
    for (int i = 0; i < info->n_inputs; i++) {
        const struct rtx_model_io *io = &info->inputs[i];
        int pos = 0;
        while (pos < g->n_inputs && strcmp(g->values[g->inputs[pos]].name, io->name) != 0)
            pos++;
        if (pos == g->n_inputs)
            return rtx_err_set(err, RTX_EGRAPH, "config.json input '%s' is not an input of %s",
                               io->name, gpath);
        m->graph_in[i] = pos;
        const struct rtx_value *v = &g->values[g->inputs[pos]];
        char gs[96];
        if (v->dtype != io->dtype)
            return rtx_err_set(err, RTX_EGRAPH,
                               "input '%s': config.json says %s, the graph declares %s",
                               io->name, rtx__config_dtype_name(io->dtype),
                               rtx_shape_str(v->dtype, v->ndim, v->dims, gs, sizeof gs));
        if (v->ndim != io->ndim + off)
            return rtx_err_set(err, RTX_EGRAPH,
                               "input '%s': config.json gives %d dimensions%s, the graph "
                               "declares %s",
                               io->name, io->ndim, off ? " and the batch" : "",
                               rtx_shape_str(v->dtype, v->ndim, v->dims, gs, sizeof gs));
        if (off && v->dims[0] != -1)
            return rtx_err_set(err, RTX_EGRAPH,
                               "input '%s': the graph's dimension 0 must be -1 (the batch) "
                               "when max_batch_size > 0, it is %lld",
                               io->name, (long long)v->dims[0]);
        for (int d = 0; d < io->ndim; d++) {
            int64_t gd = v->dims[d + off];
            if (gd >= 0 && gd != io->dims[d])
                return rtx_err_set(err, RTX_EGRAPH,
                                   "input '%s': config.json dims[%d] is %lld, the graph "
                                   "declares %lld",
                                   io->name, d, (long long)io->dims[d], (long long)gd);
        }
    }
    for (int j = 0; j < info->n_outputs; j++) {
        int pos = 0;
        while (pos < g->n_outputs &&
               strcmp(g->values[g->outputs[pos]].name, info->outputs[j].name) != 0)
            pos++;
        if (pos == g->n_outputs)
            return rtx_err_set(err, RTX_EGRAPH, "config.json output '%s' is not an output of %s",
                               info->outputs[j].name, gpath);
        m->graph_out[j] = pos;
        m->out_names[j] = info->outputs[j].name;
    }
    if ((rc = rtx_graph_validate(g, &m->limits, err))) return rtx_err_prefix(err, "%s", gpath);
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant)
            m->const_bytes += (int64_t)rtx_tensor_nbytes(g->values[v].constant);
    m->host_bytes = m->const_bytes;
    m->n_graph_in = g->n_inputs;
    m->n_graph_out = g->n_outputs;
    return 0;
}

/* The working margin of a default reservation, bytes (docs/serving.md). */
#define RESERVE_MARGIN_BYTES ((size_t)64 << 20)

/* The reservation of the version on d, which holds k of its instances: config.json's
 * memory_reserve_bytes, else the default: on a GPU one copy of every initializer per
 * instance (the plans of all its batch shapes share it: runtime/const-cache.c), on the CPU
 * none (plans read the mapped weights in place), plus a working margin of 64 MiB capped at a
 * quarter of what d's budget has unreserved now, so that a default never fails for want of
 * margin, only when the weights' copies do not fit. */
static size_t reservation(const struct rtx_model *m, struct rtx_device *d, int k) {
    if (m->cfg.memory_reserve_bytes >= 0) return (size_t)m->cfg.memory_reserve_bytes;
    size_t weights = rtx_device_kind(d) == RTX_DEVICE_CUDA
                         ? (size_t)m->const_bytes * (size_t)k
                         : 0;
    struct rtx_device_info di;
    rtx_device_info(d, &di);
    size_t unreserved = di.budget_bytes > di.reserved_bytes ? di.budget_bytes - di.reserved_bytes
                                                            : 0;
    size_t margin = RESERVE_MARGIN_BYTES < unreserved / 4 ? RESERVE_MARGIN_BYTES
                                                          : unreserved / 4;
    return weights + margin;
}

/* The slots of the instances config.json asks for on the devices of the set (slot 0: the
 * CPU, 1 + N: CUDA device N): GPU groups on the healthy GPUs they name, or every healthy GPU;
 * CPU groups, and GPU groups when no GPU is healthy, on the CPU. Returns how many, or an
 * error. */
static int place_instances(const struct rtx_model *m, const struct rtx__model_load_opts *o,
                           int slots[256], struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    int healthy[RTX_DEVICES_MAX], n_gpu = 0; /* healthy CUDA devices, by index */
    for (int slot = 1; slot < rtx_devices_count(o->devices); slot++) {
        struct rtx_device *d = rtx_devices_get(o->devices, slot);
        if (rtx_device_healthy(d)) healthy[n_gpu++] = rtx_device_cuda_index(d);
    }
    int n = 0;
    for (int gi = 0; gi < c->n_groups; gi++) {
        const struct rtx__instance_group *g = &c->groups[gi];
        bool gpu = g->kind == RTX__KIND_GPU || (g->kind == RTX__KIND_AUTO && n_gpu > 0);
        if (gpu && n_gpu == 0) {
            rtx__serving_log(o->log, RTX_SERVING_LOG_INFO,
                             "no healthy GPU: KIND_GPU instances run on the CPU", "model",
                             c->info.name, NULL);
            gpu = false;
        }
        for (int k = 0; gpu && k < g->n_gpus; k++) {
            struct rtx_device *d = rtx_devices_cuda(o->devices, g->gpus[k]);
            if (!d || !rtx_device_healthy(d))
                return rtx_err_set(err, RTX_EINVAL,
                                   "config.json: instance_group[%d].gpus names device %d, which "
                                   "is not a healthy GPU of this host",
                                   gi, g->gpus[k]);
        }
        int nd = !gpu ? 1 : g->n_gpus ? g->n_gpus : n_gpu;
        for (int d = 0; d < nd; d++)
            for (int k = 0; k < g->count; k++) {
                if (n == 256)
                    return rtx_err_set(err, RTX_ELIMIT, "config.json: more than %d instances",
                                       n);
                slots[n++] = !gpu ? 0 : 1 + (g->n_gpus ? g->gpus[d] : healthy[d]);
            }
    }
    return n;
}

/* A queue policy as the public model info reports it. */
static struct rtx_model_queue_policy queue_policy_info(const struct rtx__queue_policy *p) {
    return (struct rtx_model_queue_policy){
        .set = p->set, .delay = p->on_timeout == RTX_SCHED_TIMEOUT_DELAY,
        .default_timeout_us = p->timeout_us, .allow_timeout_override = p->allow_override,
        .max_queue_size = p->max_queue};
}

/* The instances config.json asks for: one consumer "model NAME:VERSION" per device they are
 * on, with its reservation (reservation()), then a backend per instance from the device
 * layer, charged to that consumer. */
static int make_instances(struct rtx_model *m, const struct rtx__model_load_opts *o,
                          struct rtx_err *err) {
    int slots[256], per_slot[RTX_DEVICES_MAX] = {0};
    int n = place_instances(m, o, slots, err);
    if (n < 0) return n;
    for (int i = 0; i < n; i++)
        per_slot[slots[i]]++;
    char name[RTX_DEVICE_CONSUMER_NAME_LEN];
    snprintf(name, sizeof name, "model %s:%lld", m->cfg.info.name,
             (long long)m->cfg.info.version);
    for (int slot = 0; slot < RTX_DEVICES_MAX; slot++) {
        if (!per_slot[slot]) continue;
        struct rtx_device *d = rtx_devices_get(o->devices, slot);
        int rc = rtx_device_consumer_new(d, name, reservation(m, d, per_slot[slot]),
                                         &m->consumers[slot], err);
        if (rc) return rc; /* RTX_ELIMIT: the device layer's message says what did not fit */
        rtx_device_consumer_set_cpu_threads(m->consumers[slot], o->cpu_threads);
    }
    m->inst = rtx_calloc((size_t)n, sizeof *m->inst);
    if (!m->inst) return rtx_err_set(err, RTX_ENOMEM, "out of memory creating instances");
    int batch_slots = m->cfg.info.max_batch_size > 1 ? m->cfg.info.max_batch_size : 1;
    bool any_gpu = false;
    for (int i = 0; i < n; i++) {
        struct instance *in = &m->inst[i];
        in->m = m;
        in->dev = rtx_devices_get(o->devices, slots[i]);
        in->consumer = m->consumers[slots[i]];
        any_gpu |= slots[i] > 0;
        m->n_inst = i + 1;
        in->batch = rtx_calloc((size_t)batch_slots, sizeof *in->batch);
        if (!in->batch) return rtx_err_set(err, RTX_ENOMEM, "out of memory creating instances");
        int rc = rtx_device_backend_new(in->consumer, &in->be, err);
        if (rc) return rtx_err_prefix(err, "instance %d (%s)", i, rtx_device_name(in->dev));
    }
    m->cfg.info.instances = n;
    snprintf(m->cfg.info.instance_kind, sizeof m->cfg.info.instance_kind, "%s",
             any_gpu ? "KIND_GPU" : "KIND_CPU");
    /* what the KServe gRPC ModelConfig reports beside the HTTP config */
    struct rtx_model_info *info = &m->cfg.info;
    snprintf(info->backend, sizeof info->backend, "%s", m->cfg.backend);
    if (m->cfg.backend[0])
        snprintf(info->default_model_filename, sizeof info->default_model_filename, "%s",
                 m->cfg.model_filename[0] ? m->cfg.model_filename : "model.onnx");
    info->priority_levels = m->cfg.priority_levels;
    info->default_priority_level = m->cfg.default_priority_level;
    for (int i = 0; i < info->n_inputs + info->n_outputs; i++) {
        bool in = i < info->n_inputs;
        struct rtx_model_io *io = in ? &info->inputs[i] : &info->outputs[i - info->n_inputs];
        const struct rtx__reshape *rs =
            in ? &m->cfg.in_reshape[i] : &m->cfg.out_reshape[i - info->n_inputs];
        io->has_reshape = rs->set;
        io->reshape_ndim = rs->set ? rs->ndim : 0;
        memcpy(io->reshape, rs->dims, sizeof io->reshape);
    }
    info->default_queue_policy = queue_policy_info(&m->cfg.default_policy);
    int np = m->cfg.n_level_policies < RTX_MODEL_MAX_QUEUE_POLICIES ? m->cfg.n_level_policies
                                                                    : RTX_MODEL_MAX_QUEUE_POLICIES;
    info->n_priority_queue_policies = np;
    for (int i = 0; i < np; i++) {
        info->priority_queue_levels[i] = m->cfg.level_policies[i].level;
        info->priority_queue_policies[i] = queue_policy_info(&m->cfg.level_policies[i].policy);
    }
    return 0;
}

/* The version's content digest: SHA-256 over the graph file and the weights file (each
 * after its length). Plans are kept in the devices' caches under keys made from it
 * (rtx_device_plan_key), so it is computed once here and never per request. */
static int model_digest(struct rtx_model *m, const char *gpath, const char *wpath,
                        struct rtx_err *err) {
    const char *paths[2] = {gpath, wpath};
    return rtx__sha256_files(paths, m->weights ? 2 : 1, m->digest, err);
}

/* The version's scheduler config from the server's lanes and knobs (NULL: the defaults): one
 * executor per instance, room to run what its batches hold, each lane's queue bound capped
 * at max_queue. */
static struct rtx_sched_config version_sched_config(const struct rtx_model *m,
                                                    const struct rtx_sched_config *server) {
    struct rtx_sched_config sc;
    if (server)
        sc = *server;
    else
        rtx_sched_config_init(&sc);
    sc.executors = m->n_inst > 0 ? m->n_inst : 1;
    int64_t per_batch = m->cfg.info.max_batch_size > 0 ? m->cfg.info.max_batch_size : 1;
    int64_t want_running = sc.executors * per_batch * 2; /* batches forming and held */
    if (sc.max_running < want_running) sc.max_running = want_running;
    if (sc.max_running > 10000000) sc.max_running = 10000000;
    for (int i = 0; i < sc.n_lanes; i++) {
        const struct rtx__queue_policy *q = &m->lane_policy[i];
        if (sc.lanes[i].max_queued > m->max_queue) sc.lanes[i].max_queued = m->max_queue;
        if (!q->set) continue;
        sc.lanes[i].on_timeout = q->on_timeout;
        if (q->max_queue > 0 && sc.lanes[i].max_queued > q->max_queue)
            sc.lanes[i].max_queued = q->max_queue;
    }
    return sc;
}

static bool same_policy(const struct rtx__queue_policy *a, const struct rtx__queue_policy *b) {
    return a->set == b->set && a->on_timeout == b->on_timeout && a->timeout_us == b->timeout_us &&
           a->allow_override == b->allow_override && a->max_queue == b->max_queue;
}

/* dynamic_batching's queue policies on the server's n lanes: priority level k is lane
 * min(k, n); the default policy is every lane's that no level's policy lands on, and its
 * max_queue_size bounds the version's whole queue. Two levels of different policies on one
 * lane: RTX_EINVAL naming them. */
static int resolve_policies(struct rtx_model *m, int n_lanes, struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    int64_t from[RTX_SCHED_MAX_LANES] = {0};
    for (int l = 0; l < n_lanes; l++)
        m->lane_policy[l] = c->default_policy;
    if (c->default_policy.max_queue > 0 && c->default_policy.max_queue < m->max_queue)
        m->max_queue = c->default_policy.max_queue;
    for (int i = 0; i < c->n_level_policies; i++) {
        int64_t k = c->level_policies[i].level;
        int l = (int)(k < n_lanes ? k : n_lanes) - 1;
        const struct rtx__queue_policy *q = &c->level_policies[i].policy;
        if (from[l] && !same_policy(&m->lane_policy[l], q))
            return rtx_err_set(err, RTX_EINVAL,
                               "model '%s': dynamic_batching.priority_queue_policy: levels %lld "
                               "and %lld fall on one lane (%d of the server's %d) with "
                               "different policies",
                               c->info.name, (long long)from[l], (long long)k, l + 1, n_lanes);
        m->lane_policy[l] = *q;
        from[l] = k;
    }
    return 0;
}

int rtx__model_reconfigure(struct rtx_model *m, const struct rtx_sched_config *server,
                           struct rtx_err *err) {
    pthread_mutex_lock(&m->mu);
    struct rtx_sched_config sc = version_sched_config(m, server);
    const struct rtx_sched_config *cur = rtx_sched_config(m->sched);
    sc.executors = cur->executors; /* fixed at load, as its instances are */
    sc.max_running = cur->max_running;
    int rc = rtx_sched_reconfigure(m->sched, &sc, rtx_mono_ns(), err);
    pthread_mutex_unlock(&m->mu);
    if (rc)
        rtx_err_prefix(err, "model '%s' version %lld", m->cfg.info.name,
                       (long long)m->cfg.info.version);
    return rc;
}

/* The version's scheduler (version_sched_config), its default lane and the learned cost it
 * had when it last stopped. */
static int make_scheduler(struct rtx_model *m, const struct rtx__model_load_opts *o,
                          struct rtx_err *err) {
    struct rtx_sched_config dflt;
    if (!o->sched) rtx_sched_config_init(&dflt);
    int rc = resolve_policies(m, o->sched ? o->sched->n_lanes : dflt.n_lanes, err);
    if (rc) return rc;
    struct rtx_sched_config sc = version_sched_config(m, o->sched);
    rc = rtx_sched_new(&sc, rtx_mono_ns(), &m->sched, err);
    if (rc) {
        rtx_err_prefix(err, "model '%s' version %lld", m->cfg.info.name,
                       (long long)m->cfg.info.version);
        return rc;
    }
    m->default_lane = o->default_lane >= 0 && o->default_lane < sc.n_lanes ? o->default_lane
                                                                         : sc.n_lanes - 1;
    if (m->cfg.info.default_lane[0]) {
        int lane = rtx_sched_lane_find(m->sched, m->cfg.info.default_lane);
        if (lane < 0)
            return rtx_err_set(err, RTX_EINVAL,
                               "model '%s': parameters.lane '%s' is not a lane of the server",
                               m->cfg.info.name, m->cfg.info.default_lane);
        m->default_lane = lane;
    } else if (m->cfg.default_priority_level > 0) { /* dynamic_batching's default level */
        m->default_lane = rtx_sched_lane_for_priority(m->sched, m->cfg.default_priority_level,
                                                      m->default_lane);
    }
    m->cost_key = rtx__model_cost_key(m->cfg.info.name, m->cfg.info.version);
    int64_t ema = 0, samples = 0;
    if (m->stats) {
        pthread_mutex_lock(&m->stats->mu);
        ema = m->stats->cost_ema_ns;
        samples = m->stats->cost_samples;
        pthread_mutex_unlock(&m->stats->mu);
    }
    if (ema > 0 && (rc = rtx_sched_cost_load(m->sched, m->cost_key, ema, samples, err)))
        return rc;
    return 0;
}

static void gen_log(void *ctx, int level, const char *msg) {
    struct rtx_model *m = ctx;
    static const enum rtx_serving_log_level levels[] = {
        RTX_SERVING_LOG_DEBUG, RTX_SERVING_LOG_INFO, RTX_SERVING_LOG_WARN, RTX_SERVING_LOG_ERROR};
    rtx__serving_log(m->log, levels[level < 0 ? 0 : level > 3 ? 3 : level], msg, "model",
                     m->cfg.info.name, NULL);
}

/* A generative version: the checkpoint in its directory and one engine on the device its
 * instance group picks (the first slot place_instances gives). */
static int load_generator(struct rtx_model *m, const struct rtx__model_load_opts *o,
                          struct rtx_err *err) {
    int slots[256];
    int n = place_instances(m, o, slots, err);
    if (n < 0) return n;
    if (n > 1)
        rtx__serving_log(o->log, RTX_SERVING_LOG_INFO,
                         "a generative model runs one engine per version; instance_group asks "
                         "for more: using the first device",
                         "model", m->cfg.info.name, NULL);
    int slot = n > 0 ? slots[0] : 0;
    struct rtx_gen_model *gm;
    const char *tpl = m->cfg.gen.chat_template[0] ? m->cfg.gen.chat_template : NULL;
    int rc = rtx_gen_model_load(o->dir, tpl, &gm, err);
    if (rc) return rc;
    char name[RTX_DEVICE_CONSUMER_NAME_LEN];
    snprintf(name, sizeof name, "model %s:%lld", m->cfg.info.name, (long long)m->cfg.info.version);
    struct rtx_gen_engine_options eo;
    rtx_gen_engine_options_init(&eo);
    eo.devices = o->devices;
    eo.device = slot;
    eo.consumer = name;
    eo.memory_reserve_bytes = m->cfg.memory_reserve_bytes > 0 ? m->cfg.memory_reserve_bytes : 0;
    eo.kv_cache_bytes = m->cfg.gen.kv_cache_bytes;
    eo.kv_cache_fraction = m->cfg.gen.kv_cache_fraction;
    eo.block_size = m->cfg.gen.block_size;
    eo.max_batch_tokens = m->cfg.gen.max_batch_tokens;
    eo.max_seqs = m->cfg.gen.max_seqs;
    eo.graph_max_tokens = m->cfg.gen.graph_max_tokens < 0    ? 0
                          : m->cfg.gen.graph_max_tokens == 0 ? -1
                                                             : m->cfg.gen.graph_max_tokens;
    eo.prefix_caching = m->cfg.gen.prefix_caching;
    eo.cpu_threads = o->cpu_threads;
    struct rtx_sched_config sc = version_sched_config(m, o->sched);
    eo.lanes = &sc;
    eo.default_lane = m->cfg.info.default_lane[0]                 ? m->cfg.info.default_lane
                      : o->default_lane >= 0 && o->default_lane < sc.n_lanes ? sc.lanes[o->default_lane].name
                                                                              : NULL;
    eo.log = gen_log;
    eo.log_ctx = m;
    rc = rtx_gen_engine_start(gm, &eo, &m->gen, err);
    rtx_gen_model_unref(gm);
    if (rc) return rtx_err_prefix(err, "model '%s'", m->cfg.info.name);
    m->gen_dev = rtx_devices_get(o->devices, slot);
    snprintf(m->cfg.info.instance_kind, sizeof m->cfg.info.instance_kind, "%s",
             slot > 0 ? "KIND_GPU" : "KIND_CPU");
    m->cfg.info.instances = 1;
    return 0;
}

/* The version's config as GET .../config shows it (after an ONNX model completed it). */
static int dump_config(struct rtx_model *m, struct rtx_err *err) {
    if (!(m->config_json = rtx__model_config_dump(&m->cfg)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory loading '%s'", m->cfg.info.name);
    return 0;
}

int rtx__model_load(const struct rtx__model_load_opts *o, struct rtx_model **out,
                    struct rtx_err *err) {
    *out = NULL;
    char gpath[4200], wpath[4200];
    snprintf(gpath, sizeof gpath, "%s/model.rtxg", o->dir);
    snprintf(wpath, sizeof wpath, "%s/model.safetensors", o->dir);
    struct rtx_model *m = rtx_calloc(1, sizeof *m);
    if (!m) return rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", o->dir);
    atomic_init(&m->refs, 1);
    m->cfg = *o->cfg;
    m->cfg.info.version = o->version;
    m->limits = o->limits ? *o->limits : rtx_limits_default();
    m->max_queue = o->max_queue > 0 ? o->max_queue : INT64_MAX;
    m->stats = o->stats;
    m->log = o->log;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    if (m->cfg.info.decoupled) { /* platform rtx_generate */
        if ((rc = dump_config(m, err)) || (rc = make_scheduler(m, o, err)) ||
            (rc = load_generator(m, o, err)))
            goto fail;
        *out = m;
        return 0;
    }
    if (rtx__model_config_onnx(&m->cfg)) {
        if ((rc = rtx__onnx_version_load(m, o->dir, err))) goto fail;
    } else {
        if (!file_exists(gpath)) {
            rc = rtx_err_set(err, RTX_EIO, "%s: %s", gpath, strerror(errno));
            goto fail;
        }
        if ((rc = rtx_graph_load_file(gpath, &m->limits, &m->graph, err))) goto fail;
        if (file_exists(wpath) && (rc = rtx_safetensors_open(wpath, &m->weights, err)))
            goto fail;
        if ((rc = bind_graph(m, gpath, wpath, err))) goto fail;
        if ((rc = model_digest(m, gpath, wpath, err))) goto fail;
        if (m->weights) {
            int64_t graph_consts = m->const_bytes;
            for (int i = 0; i < m->weights->n; i++)
                graph_consts -= (int64_t)(m->weights->entries[i].end -
                                          m->weights->entries[i].begin);
            m->host_bytes = (int64_t)m->weights->map_bytes + (graph_consts > 0 ? graph_consts : 0);
        }
    }
    if ((rc = dump_config(m, err))) goto fail;
    if ((rc = make_instances(m, o, err))) goto fail;
    if ((rc = make_scheduler(m, o, err))) goto fail;
    if ((rc = rtx__model_warm_up(m, err))) goto fail;
    for (int i = 0; i < m->n_inst; i++) {
        if (pthread_create(&m->inst[i].thread, NULL, rtx__model_worker, &m->inst[i]) != 0) {
            rc = rtx_err_set(err, RTX_ENOMEM, "cannot start a worker thread");
            rtx__model_stop(m, true);
            goto fail;
        }
        m->inst[i].started = true;
    }
    *out = m;
    return 0;
fail:
    rtx__model_free(m);
    return rc;
}

void rtx__model_stop(struct rtx_model *m, bool fail_queued) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (m->stopped) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    m->stopping = true;
    m->fail_queued = fail_queued;
    m->stopped = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    rtx_gen_engine_halt(m->gen); /* freed with the last reference (rtx__model_free) */
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].started) {
            pthread_join(m->inst[i].thread, NULL);
            m->inst[i].started = false;
        }
    /* no worker left: the instances' backends (and with them their plans in the devices'
     * caches) and the consumers go now, the graph and the weights with the last reference */
    rtx__model_free_instances(m);
    /* the learned cost survives a reload of this version */
    int64_t ema = 0, samples = 0;
    uint64_t key;
    bool have = rtx__model_cost(m, &key, &ema, &samples) == 0;
    if (have && m->stats) {
        pthread_mutex_lock(&m->stats->mu);
        m->stats->cost_ema_ns = ema;
        m->stats->cost_samples = samples;
        pthread_mutex_unlock(&m->stats->mu);
    }
}
