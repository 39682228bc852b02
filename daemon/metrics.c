/*
 * metrics.c - the Prometheus exposition of rtxd (daemon/metrics.h).
 *
 * DESIGN
 * One pass per metric family over a snapshot taken at the start of the scrape (every model
 * version's statistics, the job manager's counters, the models' memory), so each family's
 * HELP and TYPE lines are written once, followed by all its samples, as the text format
 * requires. Triton's names are used where Triton has the figure (nv_inference_*,
 * nv_gpu_memory_total_bytes, nv_cpu_memory_total_bytes); rtxd's own figures are rtxd_*.
 *
 * The SLA lanes: one row per (lane, kind), kind "jobs" summing the job manager's device
 * schedulers and "inference" summing every model version's scheduler (rtx_serving_lanes);
 * each scheduler counter is an outcome of rtxd_lane_requests_total (admitted, rejected_full,
 * rejected_deadline and shed are the refusals by reason).
 *
 * The device layer (device/device.h) has one sample per device slot for its health, budget
 * and plan cache (rtx_device_*{device}) and one per (device, consumer) for the budget shares;
 * they replace the job workers' plan-cache families (rtxd_job_plan_cache_*), since the plan
 * cache is the device's, shared by jobs and models. Their names carry no rtxd_ prefix, as
 * the issue that introduced them named them.
 */
#include "daemon/metrics.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon/daemon.h"
#include "generation/generation.h"

struct sbuf {
    char *data;
    size_t len, cap;
    bool oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = rtx_realloc(b->data, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
}

const char *rtx_metrics_escape(const char *s, char *buf, size_t cap) {
    size_t k = 0;
    if (cap == 0) return buf;
    for (; s && *s && k + 2 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            buf[k++] = '\\';
            buf[k++] = *s;
        } else if (*s == '\n') {
            buf[k++] = '\\';
            buf[k++] = 'n';
        } else {
            buf[k++] = *s;
        }
    }
    buf[k] = '\0';
    return buf;
}

static void family(struct sbuf *b, const char *name, const char *type, const char *help) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ------------------------------------------------------------------------------------------
 * Inference (Triton's families)
 * ---------------------------------------------------------------------------------------- */

enum model_figure {
    FIG_SUCCESS,
    FIG_INFERENCES,
    FIG_EXECUTIONS,
    FIG_REQUEST_US,
    FIG_QUEUE_US,
    FIG_INPUT_US,
    FIG_INFER_US,
    FIG_OUTPUT_US,
    FIG_PENDING,
    FIG_COUNT
};

static const struct {
    const char *name, *type, *help;
} model_families[FIG_COUNT] = {
    [FIG_SUCCESS] = {"nv_inference_request_success", "counter",
                     "Number of successful inference requests, all batch sizes"},
    [FIG_INFERENCES] = {"nv_inference_count", "counter",
                        "Number of inferences performed (a batch of n counts n)"},
    [FIG_EXECUTIONS] = {"nv_inference_exec_count", "counter",
                        "Number of model executions performed (batches run)"},
    [FIG_REQUEST_US] = {"nv_inference_request_duration_us", "counter",
                        "Cumulative inference request duration in microseconds"},
    [FIG_QUEUE_US] = {"nv_inference_queue_duration_us", "counter",
                      "Cumulative inference queuing duration in microseconds"},
    [FIG_INPUT_US] = {"nv_inference_compute_input_duration_us", "counter",
                      "Cumulative compute input duration in microseconds"},
    [FIG_INFER_US] = {"nv_inference_compute_infer_duration_us", "counter",
                      "Cumulative compute inference duration in microseconds"},
    [FIG_OUTPUT_US] = {"nv_inference_compute_output_duration_us", "counter",
                       "Cumulative inference compute output duration in microseconds"},
    [FIG_PENDING] = {"nv_inference_pending_request_count", "gauge",
                     "Instantaneous number of pending requests awaiting execution"},
};

static int64_t figure(const struct rtx_model_stats *s, enum model_figure f) {
    switch (f) {
    case FIG_SUCCESS: return s->success.count;
    case FIG_INFERENCES: return s->inference_count;
    case FIG_EXECUTIONS: return s->execution_count;
    case FIG_REQUEST_US: return (s->success.ns + s->fail.ns) / 1000;
    case FIG_QUEUE_US: return s->queue.ns / 1000;
    case FIG_INPUT_US: return s->compute_input.ns / 1000;
    case FIG_INFER_US: return s->compute_infer.ns / 1000;
    case FIG_OUTPUT_US: return s->compute_output.ns / 1000;
    case FIG_PENDING: return s->pending;
    default: return 0;
    }
}

/* model="m",version="v" */
static const char *model_labels(const struct rtx_model_stats *s, char *buf, size_t cap) {
    char name[300];
    snprintf(buf, cap, "model=\"%s\",version=\"%" PRId64 "\"",
             rtx_metrics_escape(s->name, name, sizeof name), s->version);
    return buf;
}

static void render_models(struct sbuf *b, const struct rtx_model_stats *st, int n) {
    char labels[400];
    for (int f = 0; f < FIG_COUNT; f++) {
        family(b, model_families[f].name, model_families[f].type, model_families[f].help);
        for (int i = 0; i < n; i++)
            sb_printf(b, "%s{%s} %" PRId64 "\n", model_families[f].name,
                      model_labels(&st[i], labels, sizeof labels), figure(&st[i], f));
    }
    family(b, "nv_inference_request_failure", "counter",
           "Number of failed inference requests, all batch sizes, by reason");
    for (int i = 0; i < n; i++)
        for (int r = 0; r < RTX_INFER_FAIL_COUNT; r++)
            sb_printf(b, "nv_inference_request_failure{%s,reason=\"%s\"} %" PRId64 "\n",
                      model_labels(&st[i], labels, sizeof labels),
                      rtx_infer_failure_name((enum rtx_infer_failure)r), st[i].failures[r]);

    family(b, "rtxd_inference_batch_executions_total", "counter",
           "Batches run, by batch size (requests merged by the dynamic batcher)");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < st[i].n_batch_stats; k++)
            sb_printf(b, "rtxd_inference_batch_executions_total{%s,batch_size=\"%d\"} %" PRId64
                         "\n",
                      model_labels(&st[i], labels, sizeof labels),
                      st[i].batch_stats[k].batch_size,
                      st[i].batch_stats[k].compute_infer.count);

    /* the same as a histogram over powers of two, for quantiles of the batch size */
    static const int bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    const int n_bounds = (int)(sizeof bounds / sizeof bounds[0]);
    family(b, "rtxd_inference_batch_size", "histogram", "Size of the batches run");
    for (int i = 0; i < n; i++) {
        model_labels(&st[i], labels, sizeof labels);
        int64_t total = 0, sum = 0;
        for (int k = 0; k < st[i].n_batch_stats; k++) {
            total += st[i].batch_stats[k].compute_infer.count;
            sum += st[i].batch_stats[k].compute_infer.count * st[i].batch_stats[k].batch_size;
        }
        for (int j = 0; j < n_bounds; j++) {
            int64_t le = 0;
            for (int k = 0; k < st[i].n_batch_stats; k++)
                if (st[i].batch_stats[k].batch_size <= bounds[j])
                    le += st[i].batch_stats[k].compute_infer.count;
            sb_printf(b, "rtxd_inference_batch_size_bucket{%s,le=\"%d\"} %" PRId64 "\n", labels,
                      bounds[j], le);
        }
        sb_printf(b, "rtxd_inference_batch_size_bucket{%s,le=\"+Inf\"} %" PRId64 "\n", labels,
                  total);
        sb_printf(b, "rtxd_inference_batch_size_sum{%s} %" PRId64 "\n", labels, sum);
        sb_printf(b, "rtxd_inference_batch_size_count{%s} %" PRId64 "\n", labels, total);
    }

    family(b, "nv_inference_last_inference_timestamp_ms", "gauge",
           "Unix time of the last request answered, milliseconds (0: none)");
    for (int i = 0; i < n; i++)
        sb_printf(b, "nv_inference_last_inference_timestamp_ms{%s} %" PRId64 "\n",
                  model_labels(&st[i], labels, sizeof labels), st[i].last_inference_ms);
}

static void render_model_states(struct sbuf *b, struct rtx_serving *s) {
    struct rtx_model_index_entry *idx = NULL;
    int n = 0;
    if (rtx_serving_index(s, false, &idx, &n, NULL) != 0) return;
    family(b, "rtxd_models", "gauge", "Models of the repository, by state");
    for (int st = 0; st < RTX_MODEL_STATE_COUNT; st++) {
        int count = 0;
        for (int i = 0; i < n; i++)
            count += idx[i].state == (enum rtx_model_state)st;
        sb_printf(b, "rtxd_models{state=\"%s\"} %d\n",
                  rtx_model_state_name((enum rtx_model_state)st), count);
    }
    rtx_free(idx);
}

static void render_memory(struct sbuf *b, struct rtx_daemon *d) {
    family(b, "nv_cpu_memory_total_bytes", "gauge", "Physical memory of the host, bytes");
    sb_printf(b, "nv_cpu_memory_total_bytes %" PRId64 "\n", d->memory_bytes);
    family(b, "nv_gpu_memory_total_bytes", "gauge", "Memory of each CUDA device, bytes");
    char name[300];
    for (int i = 0; i < d->gpus.n; i++)
        sb_printf(b, "nv_gpu_memory_total_bytes{gpu=\"%d\",name=\"%s\"} %zu\n",
                  d->gpus.devs[i].index,
                  rtx_metrics_escape(d->gpus.devs[i].name, name, sizeof name),
                  d->gpus.devs[i].memory_bytes);
    if (!d->serving) return;
    struct rtx_serving_memory mem = {0};
    rtx_serving_memory(d->serving, &mem);
    family(b, "rtxd_model_memory_bytes", "gauge",
           "Memory held by the loaded models (weights, plans, device buffers), bytes");
    sb_printf(b, "rtxd_model_memory_bytes{device=\"cpu\"} %" PRId64 "\n", mem.host_bytes);
    for (int i = 0; i < mem.n_devices && i < 16; i++)
        sb_printf(b, "rtxd_model_memory_bytes{device=\"cuda:%d\"} %" PRId64 "\n", i,
                  mem.device_bytes[i]);
}

/* The device layer: health, budget, consumers' shares and plan cache of every device. */
static void render_devices(struct sbuf *b, struct rtx_devices *set) {
    enum { F_HEALTHY, F_BUDGET, F_HITS, F_MISSES, F_EVICTIONS, F_PLANS, F_COUNT };
    static const struct {
        const char *name, *type, *help;
    } fams[F_COUNT] = {
        [F_HEALTHY] = {"rtx_device_healthy", "gauge",
                       "1 while the device takes work; 0 after a sticky error"},
        [F_BUDGET] = {"rtx_device_memory_budget_bytes", "gauge",
                      "Memory budget of the device (memory x device.memory_fraction, capped)"},
        [F_HITS] = {"rtx_device_plan_cache_hits_total", "counter",
                    "Runs on a plan the device's cache kept (jobs and models)"},
        [F_MISSES] = {"rtx_device_plan_cache_misses_total", "counter",
                      "Runs whose plan the device's cache did not keep"},
        [F_EVICTIONS] = {"rtx_device_plan_cache_evictions_total", "counter",
                         "Kept plans dropped: for room, after an out-of-memory failure, or "
                         "with a lost device or backend"},
        [F_PLANS] = {"rtx_device_plans", "gauge", "Plans the device's cache keeps now"},
    };
    int n = rtx_devices_count(set);
    char dev[80], con[300];
    for (int f = 0; f < F_COUNT; f++) {
        family(b, fams[f].name, fams[f].type, fams[f].help);
        for (int i = 0; i < n; i++) {
            struct rtx_device_info info;
            rtx_device_info(rtx_devices_get(set, i), &info);
            uint64_t v = f == F_HEALTHY     ? (uint64_t)info.healthy
                         : f == F_BUDGET    ? (uint64_t)info.budget_bytes
                         : f == F_HITS      ? info.plan_hits
                         : f == F_MISSES    ? info.plan_misses
                         : f == F_EVICTIONS ? info.plan_evictions
                                            : (uint64_t)info.plans;
            sb_printf(b, "%s{device=\"%s\"} %" PRIu64 "\n", fams[f].name,
                      rtx_metrics_escape(info.name, dev, sizeof dev), v);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } shares[] = {
        {"rtx_device_memory_used_bytes", "gauge", "Memory a consumer is charged on a device"},
        {"rtx_device_memory_reserved_bytes", "gauge",
         "Memory of a device's budget reserved for a consumer"},
        {"rtx_device_memory_refusals_total", "counter",
         "Charges refused to a consumer for want of share (RESOURCE_EXHAUSTED)"},
    };
    for (size_t f = 0; f < sizeof shares / sizeof shares[0]; f++) {
        family(b, shares[f].name, shares[f].type, shares[f].help);
        for (int i = 0; i < n; i++) {
            struct rtx_device *d = rtx_devices_get(set, i);
            struct rtx_device_consumer_info ci[32];
            int nc = rtx_device_consumers(d, ci, 32);
            rtx_metrics_escape(rtx_device_name(d), dev, sizeof dev);
            for (int c = 0; c < nc && c < 32; c++) {
                uint64_t v = f == 0   ? (uint64_t)ci[c].used_bytes
                             : f == 1 ? (uint64_t)ci[c].reserved_bytes
                                      : ci[c].refusals;
                sb_printf(b, "%s{device=\"%s\",consumer=\"%s\"} %" PRIu64 "\n",
                          shares[f].name, dev, rtx_metrics_escape(ci[c].name, con, sizeof con),
                          v);
            }
        }
    }
}

static void render_jobs(struct sbuf *b, struct rtx_jobs *jobs) {
    struct rtx_jobs_stats st;
    memset(&st, 0, sizeof st);
    rtx_jobs_get_stats(jobs, &st);
    char lane[100];
    family(b, "rtxd_jobs", "gauge", "Jobs queued or running now, by lane");
    for (int i = 0; i < st.n_lanes && i < 16; i++) {
        rtx_metrics_escape(st.lanes[i].lane, lane, sizeof lane);
        sb_printf(b, "rtxd_jobs{lane=\"%s\",state=\"queued\"} %d\n", lane, st.lanes[i].queued);
        sb_printf(b, "rtxd_jobs{lane=\"%s\",state=\"running\"} %d\n", lane,
                  st.lanes[i].running);
    }
    family(b, "rtxd_jobs_finished_total", "counter", "Jobs finished since start, by state");
    sb_printf(b, "rtxd_jobs_finished_total{state=\"succeeded\"} %" PRId64 "\n", st.succeeded);
    sb_printf(b, "rtxd_jobs_finished_total{state=\"failed\"} %" PRId64 "\n", st.failed);
    sb_printf(b, "rtxd_jobs_finished_total{state=\"cancelled\"} %" PRId64 "\n", st.cancelled);
    sb_printf(b, "rtxd_jobs_finished_total{state=\"expired\"} %" PRId64 "\n", st.expired);
    family(b, "rtxd_draining", "gauge", "1 while the daemon drains (SIGTERM or Admin.Drain)");
    sb_printf(b, "rtxd_draining %d\n", st.draining ? 1 : 0);
}

/* Sums a device scheduler's lanes into acc (lanes matched by index: every device of the job
 * manager has the same lanes). */
static void lanes_add(struct rtx_sched_stats *acc, const struct rtx_sched_stats *st) {
    if (acc->n_lanes == 0) {
        acc->n_lanes = st->n_lanes;
        for (int l = 0; l < st->n_lanes; l++)
            acc->lanes[l].config = st->lanes[l].config;
    }
    if (st->brownout_level > acc->brownout_level) acc->brownout_level = st->brownout_level;
    for (int l = 0; l < st->n_lanes && l < acc->n_lanes; l++) {
        acc->lanes[l].queued += st->lanes[l].queued;
        acc->lanes[l].delayed += st->lanes[l].delayed;
        for (int c = 0; c < RTX_SCHED_CTR_COUNT; c++)
            acc->lanes[l].counters[c] += st->lanes[l].counters[c];
    }
}

/* rtxd_lane_requests_total, rtxd_lane_queue_depth and rtxd_brownout for the job manager's
 * and the inference core's lanes (either may be absent). */
static void render_lanes(struct sbuf *b, struct rtx_daemon *d) {
    struct rtx_sched_stats *st = rtx_calloc(2, sizeof *st); /* [0] jobs, [1] inference */
    struct rtx_jobs_lanes *jl = d->jobs ? rtx_calloc(1, sizeof *jl) : NULL;
    if (!st || (d->jobs && !jl)) {
        rtx_free(st);
        rtx_free(jl);
        b->oom = true;
        return;
    }
    static const char *const kinds[2] = {"jobs", "inference"};
    bool have[2] = {d->jobs != NULL, d->serving != NULL};
    if (jl) {
        rtx_jobs_get_lanes(d->jobs, jl);
        for (int i = 0; i < jl->n_devices; i++)
            lanes_add(&st[0], &jl->devices[i].stats);
    }
    if (d->serving) rtx_serving_lanes(d->serving, &st[1]);
    char lane[100];
    family(b, "rtxd_lane_requests_total", "counter",
           "Requests of each SLA lane since start, by kind (jobs, inference) and outcome");
    for (int k = 0; k < 2; k++)
        for (int l = 0; have[k] && l < st[k].n_lanes; l++) {
            rtx_metrics_escape(st[k].lanes[l].config.name, lane, sizeof lane);
            for (int c = 0; c < RTX_SCHED_CTR_COUNT; c++)
                sb_printf(b,
                          "rtxd_lane_requests_total{lane=\"%s\",kind=\"%s\",outcome=\"%s\"} "
                          "%" PRId64 "\n",
                          lane, kinds[k], rtx_sched_counter_name((enum rtx_sched_counter)c),
                          st[k].lanes[l].counters[c]);
        }
    family(b, "rtxd_lane_queue_depth", "gauge", "Requests waiting in each SLA lane now");
    for (int k = 0; k < 2; k++)
        for (int l = 0; have[k] && l < st[k].n_lanes; l++)
            sb_printf(b, "rtxd_lane_queue_depth{lane=\"%s\",kind=\"%s\"} %" PRId64 "\n",
                      rtx_metrics_escape(st[k].lanes[l].config.name, lane, sizeof lane),
                      kinds[k], st[k].lanes[l].queued + st[k].lanes[l].delayed);
    family(b, "rtxd_brownout", "gauge",
           "Lanes shed by brownout now (0: not in brownout; the highest of any scheduler)");
    for (int k = 0; k < 2; k++)
        if (have[k]) sb_printf(b, "rtxd_brownout{kind=\"%s\"} %d\n", kinds[k],
                               st[k].brownout_level);
    rtx_free(jl);
    rtx_free(st);
}

/* The job workers' caching memory pools, one row per device pool (Admin.Pools' figures). */
static void render_pools(struct sbuf *b, struct rtx_jobs *jobs) {
    struct rtx_jobs_pool_row *rows = rtx_calloc(RTX_JOBS_MAX_POOL_ROWS, sizeof *rows);
    int n = 0;
    if (!rows) {
        b->oom = true;
        return;
    }
    if (rtx_jobs_get_pools(jobs, rows, RTX_JOBS_MAX_POOL_ROWS, &n, NULL) < 0) n = 0;
    static const struct {
        const char *name, *type, *help;
    } fams[] = {
        {"rtxd_memory_pool_allocated_bytes", "gauge", "Bytes held by callers (rounded blocks)"},
        {"rtxd_memory_pool_reserved_bytes", "gauge", "Bytes of segments obtained from the device"},
        {"rtxd_memory_pool_active_bytes", "gauge",
         "Bytes allocated or released but held back for stream events"},
        {"rtxd_memory_pool_allocated_peak_bytes", "gauge", "Peak of allocated bytes since start"},
        {"rtxd_memory_pool_reserved_peak_bytes", "gauge", "Peak of reserved bytes since start"},
        {"rtxd_memory_pool_cap_bytes", "gauge", "Most a pool may reserve; 0 = no cap"},
        {"rtxd_memory_pool_fragmentation", "gauge",
         "1 - largest free block / free bytes; 0 when none is free"},
        {"rtxd_memory_pool_allocs_total", "counter", "Successful allocations"},
        {"rtxd_memory_pool_cache_hits_total", "counter",
         "Allocations served without a new segment"},
        {"rtxd_memory_pool_ooms_total", "counter", "Allocations failed for lack of memory"},
    };
    char dev[80];
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        family(b, fams[f].name, fams[f].type, fams[f].help);
        for (int i = 0; i < n; i++) {
            const struct rtx_jobs_pool_row *r = &rows[i];
            const struct rtx_mem_pool_kind_stats *t = &r->total;
            double v = 0;
            switch (f) {
            case 0: v = (double)t->bytes_allocated; break;
            case 1: v = (double)t->bytes_reserved; break;
            case 2: v = (double)t->bytes_active; break;
            case 3: v = (double)t->bytes_allocated_peak; break;
            case 4: v = (double)t->bytes_reserved_peak; break;
            case 5: v = (double)r->cap_bytes; break;
            case 6: v = t->fragmentation; break;
            case 7: v = (double)t->n_allocs; break;
            case 8: v = (double)t->n_cache_hits; break;
            default: v = (double)t->n_ooms; break;
            }
            sb_printf(b, "%s{device=\"%s\",kind=\"%s\"} %.17g\n", fams[f].name,
                      rtx_metrics_escape(r->device, dev, sizeof dev), r->kind ? r->kind : "",
                      v);
        }
    }
    rtx_free(rows);
}

/* ------------------------------------------------------------------------------------------
 * Generation (generation/generation.h): one engine per ready generative model version
 * ---------------------------------------------------------------------------------------- */

struct gen_row {
    char model[160];
    struct rtx_gen_stats st;
};

static int gen_rows(struct rtx_serving *s, struct gen_row **out) {
    struct rtx_model_index_entry *idx = NULL;
    int n = 0, k = 0;
    *out = NULL;
    if (rtx_serving_index(s, true, &idx, &n, NULL) != 0) return 0;
    struct gen_row *rows = n ? rtx_calloc((size_t)n, sizeof *rows) : NULL;
    for (int i = 0; rows && i < n; i++) {
        struct rtx_model *m;
        if (rtx_serving_model_get(s, idx[i].name, idx[i].version, &m, NULL) != 0) continue;
        struct rtx_gen_engine *e = rtx_model_generator(m);
        if (e) {
            rtx_metrics_escape(idx[i].name, rows[k].model, sizeof rows[k].model);
            rtx_gen_engine_stats(e, &rows[k].st);
            k++;
        }
        rtx_model_unref(m);
    }
    rtx_free(idx);
    *out = rows;
    return k;
}

static void render_gen_hist(struct sbuf *b, const struct gen_row *rows, int n, const char *name,
                            const char *help, size_t off) {
    family(b, name, "histogram", help);
    for (int i = 0; i < n; i++) {
        const struct rtx_gen_hist *h = (const void *)((const char *)&rows[i].st + off);
        uint64_t cum = 0;
        for (int k = 0; k < RTX_GEN_HIST_BUCKETS; k++) {
            cum += h->counts[k];
            if (k < RTX_GEN_HIST_BUCKETS - 1)
                sb_printf(b, "%s_bucket{model=\"%s\",le=\"%g\"} %" PRIu64 "\n", name,
                          rows[i].model, rtx_gen_hist_bounds[k], cum);
            else
                sb_printf(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name,
                          rows[i].model, cum);
        }
        sb_printf(b, "%s_sum{model=\"%s\"} %.9g\n%s_count{model=\"%s\"} %" PRIu64 "\n", name,
                  rows[i].model, h->sum_s, name, rows[i].model, h->n);
    }
}

static void render_generation(struct sbuf *b, struct rtx_serving *s) {
    struct gen_row *rows;
    int n = gen_rows(s, &rows);
    if (n == 0) {
        rtx_free(rows);
        return;
    }
    render_gen_hist(b, rows, n, "rtx_gen_time_to_first_token_seconds",
                    "Time from a request's arrival to its first token",
                    offsetof(struct rtx_gen_stats, ttft));
    render_gen_hist(b, rows, n, "rtx_gen_inter_token_latency_seconds",
                    "Time between two tokens of one sequence", offsetof(struct rtx_gen_stats, itl));
    render_gen_hist(b, rows, n, "rtx_gen_time_per_output_token_seconds",
                    "A finished sequence's time per output token after the first",
                    offsetof(struct rtx_gen_stats, tpot));
    render_gen_hist(b, rows, n, "rtx_gen_request_latency_seconds",
                    "Time from arrival to the end of a finished request",
                    offsetof(struct rtx_gen_stats, e2e));
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } counters[] = {
        {"rtx_gen_prompt_tokens_total", "counter", "Prompt tokens computed (not from the prefix cache)",
         offsetof(struct rtx_gen_stats, prompt_tokens_total)},
        {"rtx_gen_generation_tokens_total", "counter", "Tokens generated",
         offsetof(struct rtx_gen_stats, generation_tokens_total)},
        {"rtx_gen_steps_total", "counter", "Engine steps run",
         offsetof(struct rtx_gen_stats, steps_total)},
        {"rtx_gen_prefix_cache_queries_total", "counter", "Full KV blocks looked up in the prefix cache",
         offsetof(struct rtx_gen_stats, prefix_queries_blocks)},
        {"rtx_gen_prefix_cache_hits_total", "counter", "Full KV blocks found in the prefix cache",
         offsetof(struct rtx_gen_stats, prefix_hit_blocks)},
        {"rtx_gen_kv_evictions_total", "counter", "Cached KV blocks reused for other tokens",
         offsetof(struct rtx_gen_stats, kv_evictions)},
    };
    for (size_t f = 0; f < sizeof counters / sizeof *counters; f++) {
        family(b, counters[f].name, counters[f].type, counters[f].help);
        for (int i = 0; i < n; i++)
            sb_printf(b, "%s{model=\"%s\"} %" PRIu64 "\n", counters[f].name, rows[i].model,
                      *(const uint64_t *)((const char *)&rows[i].st + counters[f].off));
    }
    family(b, "rtx_gen_requests_total", "counter", "Generate requests ended, by outcome");
    for (int i = 0; i < n; i++)
        sb_printf(b,
                  "rtx_gen_requests_total{model=\"%s\",outcome=\"finished\"} %" PRIu64 "\n"
                  "rtx_gen_requests_total{model=\"%s\",outcome=\"canceled\"} %" PRIu64 "\n"
                  "rtx_gen_requests_total{model=\"%s\",outcome=\"failed\"} %" PRIu64 "\n",
                  rows[i].model, rows[i].st.requests_finished, rows[i].model,
                  rows[i].st.requests_canceled, rows[i].model, rows[i].st.requests_failed);
    family(b, "rtx_gen_kv_blocks", "gauge",
           "KV cache blocks by state (used: held by sequences; cached: reusable prefix blocks)");
    for (int i = 0; i < n; i++) {
        const struct rtx_gen_stats *st = &rows[i].st;
        sb_printf(b,
                  "rtx_gen_kv_blocks{model=\"%s\",state=\"used\"} %" PRId64 "\n"
                  "rtx_gen_kv_blocks{model=\"%s\",state=\"cached\"} %" PRId64 "\n"
                  "rtx_gen_kv_blocks{model=\"%s\",state=\"free\"} %" PRId64 "\n",
                  rows[i].model, st->kv_blocks_used, rows[i].model, st->kv_blocks_cached,
                  rows[i].model, st->kv_blocks_total - st->kv_blocks_used - st->kv_blocks_cached);
    }
    family(b, "rtx_gen_kv_cache_usage_ratio", "gauge", "Share of KV blocks held by sequences");
    for (int i = 0; i < n; i++) {
        const struct rtx_gen_stats *st = &rows[i].st;
        sb_printf(b, "rtx_gen_kv_cache_usage_ratio{model=\"%s\"} %.6g\n", rows[i].model,
                  st->kv_blocks_total ? (double)st->kv_blocks_used / (double)st->kv_blocks_total
                                      : 0.0);
    }
    family(b, "rtx_gen_prefix_cache_hit_ratio", "gauge",
           "Full blocks found / looked up in the prefix cache since start");
    for (int i = 0; i < n; i++) {
        const struct rtx_gen_stats *st = &rows[i].st;
        sb_printf(b, "rtx_gen_prefix_cache_hit_ratio{model=\"%s\"} %.6g\n", rows[i].model,
                  st->prefix_queries_blocks
                      ? (double)st->prefix_hit_blocks / (double)st->prefix_queries_blocks
                      : 0.0);
    }
    static const struct {
        const char *name, *type, *help;
    } lane_fams[] = {
        {"rtx_gen_sequences", "gauge", "Sequences per lane and state"},
        {"rtx_gen_preemptions_total", "counter", "Sequences preempted, per lane"},
        {"rtx_gen_refused_total", "counter", "Requests refused by admission control, per lane"},
    };
    for (int f = 0; f < 3; f++) {
        family(b, lane_fams[f].name, lane_fams[f].type, lane_fams[f].help);
        for (int i = 0; i < n; i++)
            for (int l = 0; l < rows[i].st.n_lanes; l++) {
                const struct rtx_gen_lane_stats *ls = &rows[i].st.lanes[l];
                char lane[96];
                rtx_metrics_escape(ls->name, lane, sizeof lane);
                if (f == 0)
                    sb_printf(b,
                              "rtx_gen_sequences{model=\"%s\",lane=\"%s\",state=\"running\"} %d\n"
                              "rtx_gen_sequences{model=\"%s\",lane=\"%s\",state=\"waiting\"} %d\n",
                              rows[i].model, lane, ls->running, rows[i].model, lane, ls->waiting);
                else
                    sb_printf(b, "%s{model=\"%s\",lane=\"%s\"} %" PRIu64 "\n", lane_fams[f].name,
                              rows[i].model, lane,
                              f == 1 ? ls->preempted_total : ls->refused_total);
            }
    }
    rtx_free(rows);
}

int rtx_metrics_render(struct rtx_daemon *d, char **out, size_t *len, struct rtx_err *err) {
    *out = NULL;
    *len = 0;
    struct sbuf b = {0};
    family(&b, "rtxd_build_info", "gauge", "rtxd's version and build (always 1)");
    sb_printf(&b, "rtxd_build_info{version=\"%s\",build=\"%s\"} 1\n", RTX_VERSION,
              RTX_BUILD_ID);
    family(&b, "rtxd_start_time_seconds", "gauge", "Unix time rtxd started, seconds");
    sb_printf(&b, "rtxd_start_time_seconds %.3f\n", (double)d->started_ms / 1000.0);

    if (d->serving) {
        struct rtx_model_stats *st = NULL;
        int n = 0;
        if (rtx_serving_stats(d->serving, NULL, 0, &st, &n, NULL) == 0) {
            render_models(&b, st, n);
            rtx_free(st);
        }
        render_model_states(&b, d->serving);
        render_generation(&b, d->serving);
    }
    render_memory(&b, d);
    if (d->devices) render_devices(&b, d->devices);
    if (d->jobs) {
        render_jobs(&b, d->jobs);
        render_pools(&b, d->jobs);
    }
    if (d->jobs || d->serving) render_lanes(&b, d);
    if (d->shm) {
        struct rtx_shm_status *regions = NULL;
        int n = 0;
        if (rtx_shm_list(d->shm, NULL, &regions, &n, NULL) == 0) {
            family(&b, "rtxd_shm_regions", "gauge",
                   "System shared-memory regions registered by clients");
            sb_printf(&b, "rtxd_shm_regions %d\n", n);
            rtx_free(regions);
        }
    }
    if (b.oom || !b.data) {
        rtx_free(b.data);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory rendering /metrics");
    }
    *out = b.data;
    *len = b.len;
    return 0;
}
