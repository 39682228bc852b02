/*
 * model.c - one loaded model version: its reference count and accessors, its statistics,
 * the life of a request (free, fail, dead), the learned cost, and the snapshots the
 * repository reads (lanes, pending requests, memory). The leaf of a version's files: the
 * others (model-exec.c, model-batcher.c, model-infer.c, model-load.c) call it, it calls none.
 *
 * DESIGN
 * A version (struct rtx_model, serving/model-impl.h) is loaded by model-load.c, takes
 * requests through model-infer.c, forms batches in model-batcher.c and runs them in
 * model-exec.c. It is reference counted: the repository holds one, every request one; the
 * graph, the weights and the scheduler go with the last (rtx_model_unref here).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "generation/generation.h"
#include "runtime/mem-pool.h"
#include "serving/model-impl.h"

int64_t rtx__unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const struct rtx_model_info *rtx_model_info(const struct rtx_model *m) {
    return &m->cfg.info;
}

const struct rtx__model_config *rtx__model_config(const struct rtx_model *m) {
    return &m->cfg;
}

char *rtx_model_config_json(const struct rtx_model *m) {
    return rtx_strdup(m->config_json);
}

struct rtx_model *rtx__model_ref(struct rtx_model *m) {
    atomic_fetch_add(&m->refs, 1);
    return m;
}

/* ------------------------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------------------------- */

void rtx__stats_reject(struct rtx__stats_rec *r) {
    pthread_mutex_lock(&r->mu);
    r->st.failures[RTX_INFER_FAIL_REJECTED]++;
    rtx__dur_add(&r->st.fail, 0);
    pthread_mutex_unlock(&r->mu);
}

void rtx__stats_fail(struct rtx__stats_rec *r, enum rtx_infer_failure why, int64_t ns) {
    pthread_mutex_lock(&r->mu);
    r->st.failures[why]++;
    rtx__dur_add(&r->st.fail, ns);
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

void rtx__request_free(struct request *r) {
    if (!r) return;
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(r->in[i]);
    rtx_free(r->id);
    if (r->m) rtx_model_unref(r->m);
    rtx_free(r);
}

static enum rtx_infer_failure failure_of(int code) {
    switch (code) {
    case RTX_ECANCELED: return RTX_INFER_FAIL_CANCELED;
    case RTX_EEXPIRED: return RTX_INFER_FAIL_EXPIRED;
    case RTX_EUNAVAILABLE: return RTX_INFER_FAIL_OTHER;
    default: return RTX_INFER_FAIL_BACKEND;
    }
}

/* Answers a request with an error, counts it and frees it; a request the scheduler handed
 * out is finished there (cancelled or failed). Called without m->mu. */
void rtx__request_fail(struct request *r, int code, const char *msg) {
    struct rtx_model *m = r->m;
    if (r->handle) {
        pthread_mutex_lock(&m->mu);
        rtx_sched_finish(m->sched, r->handle,
                         code == RTX_ECANCELED ? RTX_SCHED_CANCELLED : RTX_SCHED_FAILED, 0,
                         rtx_mono_ns());
        r->handle = 0;
        pthread_cond_broadcast(&m->cv); /* a running slot is free */
        pthread_mutex_unlock(&m->mu);
    }
    struct rtx_infer_result res = {
        .code = code,
        .id = r->id,
        .model = &m->cfg.info,
        .queue_ns = rtx_mono_ns() - r->t_enqueue,
    };
    snprintf(res.msg, sizeof res.msg, "%s", msg);
    rtx__stats_fail(m->stats, failure_of(code), res.queue_ns);
    r->done(r->ctx, &res);
    rtx__request_free(r);
}

/* Why a request cannot run any more (0 when it can): deadline or cancel flag. */
int rtx__request_dead(const struct request *r, int64_t now, char *msg, size_t cap) {
    if (r->cancel && __atomic_load_n(r->cancel, __ATOMIC_RELAXED)) {
        snprintf(msg, cap, "request canceled before it ran");
        return RTX_ECANCELED;
    }
    if (r->deadline_ns > 0 && now >= r->deadline_ns) {
        snprintf(msg, cap, "deadline expired after %.3f ms in the queue",
                 (double)(now - r->t_enqueue) / 1e6);
        return RTX_EEXPIRED;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Freeing
 * ---------------------------------------------------------------------------------------- */

/* The order matters: rtx_device_backend_free drops the plans the device's cache keeps for
 * the backend, and those plans point into m->graph, which goes only with the last reference
 * (rtx__model_free); a consumer is freed after every backend it made. */
void rtx__model_free_instances(struct rtx_model *m) {
    for (int i = 0; i < m->n_inst; i++) {
        rtx_device_backend_free(m->inst[i].consumer, m->inst[i].be);
        m->inst[i].be = NULL;
    }
    for (int slot = 0; slot < RTX_DEVICES_MAX; slot++) {
        rtx_device_consumer_free(m->consumers[slot]);
        m->consumers[slot] = NULL;
    }
}

struct rtx_gen_engine *rtx_model_generator(const struct rtx_model *m) { return m->gen; }

void rtx__model_free(struct rtx_model *m) {
    if (!m) return;
    rtx_gen_engine_stop(m->gen);
    rtx__model_free_instances(m);
    for (int i = 0; i < m->n_inst; i++)
        rtx_free(m->inst[i].batch);
    rtx_free(m->inst);
    rtx_sched_free(m->sched);
    rtx_graph_free(m->graph);
    rtx_onnx_free(m->onnx);
    rtx_safetensors_unref(m->weights);
    rtx_free(m->config_json);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    rtx_free(m);
}

void rtx_model_unref(struct rtx_model *m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    rtx__model_free(m);
}

/* ------------------------------------------------------------------------------------------
 * Learned cost and snapshots
 * ---------------------------------------------------------------------------------------- */

uint64_t rtx__model_cost_key(const char *name, int64_t version) {
    char id[160];
    snprintf(id, sizeof id, "%s:%lld", name, (long long)version);
    return rtx_sched_cost_key(id);
}

int rtx__model_cost(struct rtx_model *m, uint64_t *key, int64_t *ema_ns, int64_t *samples) {
    pthread_mutex_lock(&m->mu);
    int rc = m->sched ? rtx_sched_cost_get(m->sched, m->cost_key, ema_ns, samples)
                      : RTX_ENOTFOUND;
    pthread_mutex_unlock(&m->mu);
    *key = m->cost_key;
    return rc;
}

bool rtx__model_cost_changed(struct rtx_model *m) {
    pthread_mutex_lock(&m->mu);
    bool dirty = m->cost_dirty;
    m->cost_dirty = false;
    pthread_mutex_unlock(&m->mu);
    return dirty;
}
void rtx__model_lanes(struct rtx_model *m, int64_t now_ns, struct rtx_sched_stats *st) {
    pthread_mutex_lock(&m->mu);
    rtx_sched_get_stats(m->sched, now_ns, st);
    pthread_mutex_unlock(&m->mu);
}

bool rtx__model_serving(struct rtx_model *m) {
    pthread_mutex_lock(&m->mu);
    bool ok = !m->stopping;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

int rtx__model_healthy(struct rtx_model *m, char *why, size_t len) {
    struct rtx_device *sick = NULL;
    if (m->gen_dev && !rtx_device_healthy(m->gen_dev)) sick = m->gen_dev;
    for (int i = 0; i < m->n_inst; i++) {
        if (rtx_device_healthy(m->inst[i].dev)) return 0;
        sick = m->inst[i].dev;
    }
    if (!sick) return 0; /* no instance: nothing to run on, not a device's fault */
    if (m->gen_dev && sick != m->gen_dev) return 0;
    if (why && len) {
        char detail[256];
        rtx_device_detail(sick, detail, sizeof detail);
        snprintf(why, len, "model '%s': every instance's device is unhealthy (%s: %s)",
                 m->cfg.info.name, rtx_device_name(sick), detail);
    }
    return RTX_EUNAVAILABLE;
}

void rtx__model_wake(struct rtx_model *m) {
    pthread_mutex_lock(&m->mu);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

int64_t rtx__model_pending(struct rtx_model *m) {
    pthread_mutex_lock(&m->mu);
    int64_t n = m->n_queued + m->n_running;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void rtx__model_memory(struct rtx_model *m, int64_t *host_bytes, int n_devices,
                       int64_t *device_bytes) {
    pthread_mutex_lock(&m->mu);
    bool live = !m->stopped;
    pthread_mutex_unlock(&m->mu);
    *host_bytes += m->host_bytes;
    if (!live) return;
    /* a device instance's backend has its own pools: what they hold from the device (the
     * initializers' copies, plans' buffers, cached blocks) */
    for (int i = 0; i < m->n_inst; i++) {
        struct instance *in = &m->inst[i];
        int cuda = rtx_device_cuda_index(in->dev);
        if (cuda < 0 || cuda >= n_devices || !in->be) continue;
        struct rtx_mem_pool_stats ps;
        if (rtx_device_backend_pool_stats(in->dev, in->be, &ps, NULL, NULL) == 0)
            device_bytes[cuda] += (int64_t)ps.total.bytes_reserved;
    }
}
