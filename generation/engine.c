/*
 * engine.c - the generation engine's life (generation/generation.h): options, start on a
 * device (consumer, weights, KV pool, step graph), the engine thread's loop, submit with its
 * checks and admission control, cancel, stop and statistics. The schedule of a step is in
 * engine-sched.c, running it and turning logits into text in engine-step.c.
 */
#include "generation/engine-impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "runtime/backend.h"

const double rtx_gen_hist_bounds[RTX_GEN_HIST_BUCKETS - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void rtx__gen_hist_add(struct rtx_gen_hist *h, double seconds) {
    int i = 0;
    while (i < RTX_GEN_HIST_BUCKETS - 1 && seconds > rtx_gen_hist_bounds[i]) i++;
    h->counts[i]++;
    h->sum_s += seconds;
    h->n++;
}

void rtx__gen_log(struct rtx_gen_engine *e, int level, const char *fmt, ...) {
    if (!e->opt.log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->opt.log(e->opt.log_ctx, level, msg);
}

void rtx_gen_engine_options_init(struct rtx_gen_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->prefix_caching = true;
}

struct rtx_gen_model *rtx_gen_engine_model(struct rtx_gen_engine *e) { return e->model; }

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

static void seq_release(struct gen_seq *s) {
    rtx_free(s->tokens);
    rtx_free(s->blocks);
    rtx_free(s->hashes);
    rtx_free(s->held);
    rtx_free(s->ev_top);
    rtx__sampler_seq_free(s->sampler);
    rtx_tokenizer_stream_free(s->detok);
}

void rtx__gen_req_unref(struct gen_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (int i = 0; i < r->n_seqs; i++) seq_release(&r->seqs[i]);
    rtx_free(r->seqs);
    rtx_free(r->stop_buf);
    rtx_free(r->stop_ids);
    rtx_free(r->prompt);
    rtx_free(r);
}

void rtx_gen_handle_unref(struct rtx_gen_handle *h) { rtx__gen_req_unref((struct gen_req *)h); }

void rtx_gen_cancel(struct rtx_gen_handle *h) {
    if (!h) return;
    struct gen_req *r = (struct gen_req *)h;
    atomic_store(&r->canceled, 1);
    struct rtx_gen_engine *e = r->engine;
    pthread_mutex_lock(&e->mu);
    atomic_store(&e->kick, 1);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Checks a request against the model; RTX_EINVAL naming the problem. */
static int check_request(const struct rtx_gen_engine *e, const struct rtx_gen_request *rq,
                         struct rtx_err *err) {
    const struct rtx_gen_params *p = &rq->params;
    int vocab = e->arch->vocab;
    if (!rq->prompt || rq->n_prompt < 1) return rtx_err_set(err, RTX_EINVAL, "the prompt is empty");
    for (int i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= vocab)
            return rtx_err_set(err, RTX_EINVAL,
                               "prompt token %d is id %" PRId32 ", outside the vocabulary [0, %d)",
                               i, rq->prompt[i], vocab);
    if (rq->n_prompt >= e->context)
        return rtx_err_set(err, RTX_EINVAL,
                           "the prompt has %d tokens; the model's context is %d tokens, which "
                           "leaves no room to generate",
                           rq->n_prompt, e->context);
    if (p->max_tokens < 0)
        return rtx_err_set(err, RTX_EINVAL, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (p->max_tokens > 0 && (int64_t)rq->n_prompt + p->max_tokens > e->context)
        return rtx_err_set(err, RTX_EINVAL,
                           "the prompt (%d tokens) plus max_tokens (%d) exceeds the model's "
                           "context of %d tokens",
                           rq->n_prompt, p->max_tokens, e->context);
    if (p->min_tokens < 0 || (p->max_tokens > 0 && p->min_tokens > p->max_tokens))
        return rtx_err_set(err, RTX_EINVAL, "min_tokens must be in [0, max_tokens], got %d",
                           p->min_tokens);
    if (p->n < 1 || p->n > RTX_GEN_MAX_N)
        return rtx_err_set(err, RTX_EINVAL, "n must be in [1, %d], got %d", RTX_GEN_MAX_N, p->n);
    if (p->n_stop < 0 || p->n_stop > RTX_GEN_MAX_STOP)
        return rtx_err_set(err, RTX_EINVAL, "at most %d stop strings, got %d", RTX_GEN_MAX_STOP,
                           p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0] || strlen(p->stop[i]) > 256)
            return rtx_err_set(err, RTX_EINVAL, "stop string %d must have 1 to 256 bytes", i);
    if (p->n_stop_ids < 0 || p->n_stop_ids > 64 || (p->n_stop_ids > 0 && !p->stop_ids))
        return rtx_err_set(err, RTX_EINVAL, "at most 64 stop token ids");
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
            return rtx_err_set(err, RTX_EINVAL, "stop token id %" PRId32 " is outside [0, %d)",
                               p->stop_ids[i], vocab);
    if (p->logprobs < -1 || p->logprobs > RTX_GEN_MAX_LOGPROBS)
        return rtx_err_set(err, RTX_EINVAL, "logprobs must be in [0, %d], got %d",
                           RTX_GEN_MAX_LOGPROBS, p->logprobs);
    return rtx__sampler_check(p, vocab, err);
}

static int find_lane(const struct rtx_gen_engine *e, const char *name) {
    if (!name || !name[0]) return e->default_lane;
    for (int i = 0; i < e->n_lanes; i++)
        if (strcmp(e->lanes[i].name, name) == 0) return i;
    return -1;
}

/* Admission (mutex held): the lane's queue bound, then whether a first token can come within
 * the deadline given the prompt tokens queued ahead of this one at the measured rate. */
static int admit(struct rtx_gen_engine *e, int lane, int n_prompt, int64_t now, int64_t deadline,
                 struct rtx_err *err) {
    struct gen_lane *l = &e->lanes[lane];
    int waiting = e->lane_waiting[lane] + e->inbox_count[lane];
    double base = e->admit_base_ns > 0 ? e->admit_base_ns : 1e6;
    if (waiting >= l->max_queued) {
        return rtx_err_set(err, RTX_EOVERLOAD,
                           "lane '%s' has %d requests waiting, its bound; retry after %" PRId64
                           " ms",
                           l->name, waiting, (int64_t)(base * 4) / 1000000 + 1);
    }
    if (l->on_timeout != RTX_SCHED_TIMEOUT_REJECT || e->admit_per_token_ns <= 0) return 0;
    /* prompt tokens that run before this one's last: its own and those waiting in its lane
     * and the lanes above it, in steps of at most max_batch_tokens (the step-time model) */
    int64_t ahead = n_prompt;
    for (int i = 0; i <= lane; i++) ahead += e->lane_queued_tokens[i] + e->inbox_tokens[i];
    int64_t steps = (ahead + e->max_batch_tokens - 1) / e->max_batch_tokens + 1;
    int64_t est = (int64_t)((double)steps * base + (double)ahead * e->admit_per_token_ns);
    if (now + est <= deadline) return 0;
    int64_t behind = (int64_t)((double)(ahead - n_prompt) * e->admit_per_token_ns);
    return rtx_err_set(err, RTX_EOVERLOAD,
                       "lane '%s' cannot give a first token within %" PRId64
                       " ms (estimated %" PRId64 " ms); retry after %" PRId64 " ms",
                       l->name, (deadline - now) / 1000000, est / 1000000,
                       behind / 1000000 + 1);
}

static struct gen_req *req_new(struct rtx_gen_engine *e, const struct rtx_gen_request *rq,
                               int lane, int64_t now) {
    struct gen_req *r = rtx_calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_init(&r->refs, 1);
    atomic_init(&r->canceled, 0);
    r->engine = e;
    r->lane = lane;
    r->arrival_ns = now;
    r->deadline_ns = rq->deadline_ns > 0 ? rq->deadline_ns : now + e->lanes[lane].target_ns;
    r->params = rq->params;
    r->on_event = rq->on_event;
    r->on_done = rq->on_done;
    r->ctx = rq->ctx;
    r->n_prompt = rq->n_prompt;
    r->prompt = rtx_malloc((size_t)rq->n_prompt * sizeof(int32_t));
    r->n_seqs = r->n_live = rq->params.n;
    r->seqs = rtx_calloc((size_t)r->n_seqs, sizeof *r->seqs);
    size_t stop_bytes = 0;
    for (int i = 0; i < rq->params.n_stop; i++) stop_bytes += strlen(rq->params.stop[i]) + 1;
    r->stop_buf = rtx_malloc(stop_bytes + 1);
    if (rq->params.n_stop_ids > 0)
        r->stop_ids = rtx_malloc((size_t)rq->params.n_stop_ids * sizeof(int32_t));
    if (!r->prompt || !r->seqs || !r->stop_buf || (rq->params.n_stop_ids > 0 && !r->stop_ids)) {
        r->n_seqs = 0;
        rtx__gen_req_unref(r);
        return NULL;
    }
    memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof(int32_t));
    char *at = r->stop_buf;
    for (int i = 0; i < rq->params.n_stop; i++) {
        size_t n = strlen(rq->params.stop[i]);
        memcpy(at, rq->params.stop[i], n + 1);
        r->params.stop[i] = at;
        at += n + 1;
        if ((int)n > r->max_stop_len) r->max_stop_len = (int)n;
    }
    if (rq->params.n_stop_ids > 0)
        memcpy(r->stop_ids, rq->params.stop_ids, (size_t)rq->params.n_stop_ids * sizeof(int32_t));
    r->params.stop_ids = r->stop_ids;
    r->usage.prompt_tokens = rq->n_prompt;
    for (int i = 0; i < r->n_seqs; i++) {
        struct gen_seq *s = &r->seqs[i];
        s->req = r;
        s->choice = i;
        s->state = i == 0 ? SEQ_WAITING : SEQ_FORK_WAIT;
    }
    return r;
}

int rtx_gen_submit(struct rtx_gen_engine *e, const struct rtx_gen_request *rq,
                   struct rtx_gen_handle **h, struct rtx_err *err) {
    if (h) *h = NULL;
    if (!e || !rq || !rq->on_done) return rtx_err_set(err, RTX_EINVAL, "bad generate request");
    int rc = check_request(e, rq, err);
    if (rc) return rc;
    int lane = find_lane(e, rq->lane);
    if (lane < 0)
        return rtx_err_set(err, RTX_ENOTFOUND, "unknown lane '%.64s'", rq->lane ? rq->lane : "");
    int64_t now = rtx_mono_ns();
    if (rq->deadline_ns > 0 && rq->deadline_ns <= now)
        return rtx_err_set(err, RTX_EEXPIRED, "the request's deadline passed before it was queued");
    struct gen_req *r = req_new(e, rq, lane, now);
    if (!r) return rtx_err_set(err, RTX_ENOMEM, "out of memory for a generate request");
    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->start_rc) {
        pthread_mutex_unlock(&e->mu);
        rtx__gen_req_unref(r);
        return rtx_err_set(err, RTX_EUNAVAILABLE, "the model's generation engine is stopping");
    }
    rc = admit(e, lane, rq->n_prompt, now, r->deadline_ns, err);
    if (rc) {
        e->stats.lanes[lane].refused_total++;
        pthread_mutex_unlock(&e->mu);
        rtx__gen_req_unref(r);
        return rc;
    }
    if (h) atomic_fetch_add(&r->refs, 1);
    if (e->inbox_tail) e->inbox_tail->inbox_next = r;
    else e->inbox = r;
    e->inbox_tail = r;
    e->inbox_tokens[lane] += (int64_t)rq->n_prompt * rq->params.n;
    e->inbox_count[lane]++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (h) *h = (struct rtx_gen_handle *)r;
    return 0;
}

void rtx_gen_engine_stats(struct rtx_gen_engine *e, struct rtx_gen_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}

/* ------------------------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------------------------- */

/* Bytes of one block: a K and a V row of every layer. */
static int64_t block_bytes(const struct rtx_gen_engine *e) {
    const struct rtx_gen_arch *a = e->arch;
    return 2 * (int64_t)a->n_layers * e->block_size * a->n_kv_heads * a->head_dim *
           (int64_t)rtx_dtype_size(e->dtype);
}

static int kv_pool_new(struct rtx_gen_engine *e, struct rtx_err *err) {
    const struct rtx_gen_arch *a = e->arch;
    int rc = rtx_backend_buffer_new(e->be, (size_t)e->kv_bytes, &e->kv_buf, err);
    if (rc) return rtx_err_prefix(err, "KV cache pool of %" PRId64 " bytes", e->kv_bytes);
    e->kv = rtx_calloc((size_t)a->n_layers * 2, sizeof *e->kv);
    if (!e->kv) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    int64_t dims[4] = {e->n_blocks, e->block_size, a->n_kv_heads, a->head_dim};
    size_t one = (size_t)(block_bytes(e) / (2 * a->n_layers)) * (size_t)e->n_blocks;
    for (int i = 0; i < 2 * a->n_layers; i++) {
        rc = rtx_tensor_from_buffer(e->kv_buf, one * (size_t)i, e->dtype, 4, dims, &e->kv[i], err);
        if (rc) return rc;
    }
    return 0;
}

static int upload_weights(struct rtx_gen_engine *e, struct rtx_err *err) {
    e->dev_weights = rtx_calloc((size_t)e->weights.n, sizeof *e->dev_weights);
    if (!e->dev_weights) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (int i = 0; i < e->weights.n; i++) {
        int rc = rtx_backend_upload(e->be, e->weights.t[i], &e->dev_weights[i], err);
        if (rc) return rtx_err_prefix(err, "uploading weight '%s'", e->weights.names[i]);
    }
    return rtx_backend_synchronize(e->be, err);
}

static void release_device(struct rtx_gen_engine *e) {
    rtx__gen_plans_free(e);
    if (e->kv)
        for (int i = 0; i < 2 * e->arch->n_layers; i++) rtx_tensor_unref(e->kv[i]);
    rtx_free(e->kv);
    e->kv = NULL;
    rtx_buffer_unref(e->kv_buf);
    e->kv_buf = NULL;
    if (e->dev_weights)
        for (int i = 0; i < e->weights.n; i++) rtx_tensor_unref(e->dev_weights[i]);
    rtx_free(e->dev_weights);
    e->dev_weights = NULL;
    if (e->be) rtx_device_backend_free(e->consumer, e->be);
    e->be = NULL;
}

/* The engine thread's set-up: the backend, the weights on it, the pool, the graph. */
static int thread_setup(struct rtx_gen_engine *e, struct rtx_err *err) {
    int rc = rtx_device_backend_new(e->consumer, &e->be, err);
    if (rc) return rc;
    if ((rc = upload_weights(e, err)) || (rc = kv_pool_new(e, err))) return rc;
    rc = rtx__gen_graph_build(e->arch, &e->weights, e->dtype, e->n_blocks, e->block_size,
                              &e->graph, err);
    if (rc) return rtx_err_prefix(err, "building the step graph");
    rc = rtx__kv_blocks_new(e->n_blocks, e->block_size, e->opt.prefix_caching, &e->blocks, err);
    if (rc) return rc;
    rtx__step_cost_init(&e->cost);
    e->replays = rtx_backend_can_capture(e->be) && e->graph_max_tokens > 0;
    e->scratch = rtx__sampler_scratch_new(e->arch->vocab);
    e->step_seqs = rtx_calloc((size_t)e->max_seqs, sizeof *e->step_seqs);
    if (!e->scratch || !e->step_seqs) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    return 0;
}

static bool has_work(struct rtx_gen_engine *e) {
    if (e->n_run > 0) return true;
    for (int i = 0; i < e->n_lanes; i++)
        if (e->lanes[i].waiting) return true;
    return e->n_reqs > 0;
}

static void step_failed(struct rtx_gen_engine *e, int rc, struct rtx_err *err) {
    char why[160] = "";
    if (rtx_device_check(e->dev, e->be, why, sizeof why)) {
        rtx__gen_log(e, 3, "generation on %s stopped: %s%s", rtx_device_name(e->dev), err->msg,
                     why);
        struct rtx_err fe;
        rtx_err_set(&fe, RTX_EUNAVAILABLE, "%s%s", err->msg, why);
        rtx__gen_fail_all(e, RTX_EUNAVAILABLE, &fe);
        rtx__kv_blocks_reset_cache(e->blocks);
        return;
    }
    rtx__gen_log(e, 2, "a generation step failed: %s", err->msg);
    for (int i = 0; i < e->n_step; i++) {
        struct gen_seq *s = e->step_seqs[i];
        if (s->state != SEQ_DONE) rtx__gen_seq_end(e, s, rc, err);
    }
}

static void *engine_thread(void *arg) {
    struct rtx_gen_engine *e = arg;
    rtx_thread_name("rtx-gen-%s", rtx_device_name(e->dev));
    struct rtx_err err = {0};
    int rc = thread_setup(e, &err);
    pthread_mutex_lock(&e->mu);
    e->start_rc = rc;
    e->start_err = err;
    e->started = true;
    pthread_cond_broadcast(&e->started_cv);
    pthread_mutex_unlock(&e->mu);
    while (rc == 0) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !e->inbox && !atomic_load(&e->kick) && !has_work(e))
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping;
        atomic_store(&e->kick, 0);
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        rtx__gen_take_inbox(e);
        int64_t now = rtx_mono_ns();
        if (!rtx__gen_sweep(e, now)) {
            rtx__gen_publish(e);
            continue;
        }
        int n = rtx__gen_schedule(e, now);
        if (n == 0) { /* nothing fits now (blocks held by sequences of other lanes) */
            rtx__gen_publish(e);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 2000000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            pthread_mutex_lock(&e->mu);
            if (!e->stopping && !e->inbox) pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        struct rtx_err serr = {0};
        int src = rtx__gen_step_run(e, n, &serr);
        if (src) step_failed(e, src, &serr);
        rtx__gen_publish(e);
    }
    struct rtx_err stop_err;
    rtx_err_set(&stop_err, RTX_EUNAVAILABLE, "the model's generation engine is stopping");
    if (rc == 0) {
        rtx__gen_take_inbox(e);
        rtx__gen_fail_all(e, RTX_EUNAVAILABLE, &stop_err);
    }
    release_device(e);
    return NULL;
}

/* The KV pool's size: the option, else a share of what the device can still give. */
static int size_pool(struct rtx_gen_engine *e, struct rtx_err *err) {
    int64_t per = block_bytes(e);
    int64_t want = e->opt.kv_cache_bytes;
    if (want <= 0) {
        struct rtx_device_info di;
        rtx_device_info(e->dev, &di);
        int64_t left = (int64_t)di.budget_bytes - (int64_t)di.reserved_bytes - e->weight_bytes;
        double f = e->opt.kv_cache_fraction > 0 ? e->opt.kv_cache_fraction
                   : di.kind == RTX_DEVICE_CPU  ? 0.1
                                                : 0.5;
        want = (int64_t)((double)(left > 0 ? left : 0) * f);
        if (di.kind == RTX_DEVICE_CPU && want > (INT64_C(256) << 20)) want = INT64_C(256) << 20;
    }
    int64_t min_blocks = (e->context + e->block_size - 1) / e->block_size + 1;
    e->n_blocks = (int)(want / per > INT32_MAX / 2 ? INT32_MAX / 2 : want / per);
    if (e->n_blocks < min_blocks) {
        if (e->opt.kv_cache_bytes > 0 || min_blocks * per > want * 4 + (INT64_C(64) << 20))
            return rtx_err_set(err, RTX_ENOMEM,
                               "%s: a KV cache of %" PRId64 " bytes holds %d blocks of %d "
                               "tokens; one context of %d tokens needs %" PRId64 " blocks (%" PRId64
                               " bytes)",
                               rtx_device_name(e->dev), want, e->n_blocks, e->block_size,
                               e->context, min_blocks, min_blocks * per);
        e->n_blocks = (int)min_blocks;
    }
    e->kv_bytes = (int64_t)e->n_blocks * per;
    return 0;
}

int rtx_gen_engine_start(struct rtx_gen_model *m, const struct rtx_gen_engine_options *opt,
                         struct rtx_gen_engine **out, struct rtx_err *err) {
    *out = NULL;
    if (!m || !opt || !opt->devices) return rtx_err_set(err, RTX_EINVAL, "bad engine options");
    struct rtx_device *dev = rtx_devices_get(opt->devices, opt->device);
    if (!dev) return rtx_err_set(err, RTX_EINVAL, "no device in slot %d", opt->device);
    struct rtx_gen_engine *e = rtx_calloc(1, sizeof *e);
    if (!e) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    e->model = rtx_gen_model_ref(m);
    e->arch = rtx__gen_model_arch(m);
    e->opt = *opt;
    e->dev = dev;
    snprintf(e->consumer_name, sizeof e->consumer_name, "%s",
             opt->consumer && opt->consumer[0] ? opt->consumer : "generation");
    e->opt.consumer = e->consumer_name;
    bool cpu = rtx_device_kind(dev) == RTX_DEVICE_CPU;
    e->dtype = cpu ? RTX_F32 : e->arch->dtype == RTX_F16 ? RTX_F16 : RTX_BF16;
    e->block_size = opt->block_size > 0 ? opt->block_size : 16;
    e->max_batch_tokens = opt->max_batch_tokens > 0 ? opt->max_batch_tokens : cpu ? 512 : 2048;
    e->max_seqs = opt->max_seqs > 0 ? opt->max_seqs : cpu ? 32 : 256;
    e->graph_max_tokens = opt->graph_max_tokens == 0 ? 512 : opt->graph_max_tokens;
    e->context = e->arch->max_positions;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->started_cv, NULL);
    atomic_init(&e->kick, 0);

    struct rtx_sched_config lanes;
    if (opt->lanes) lanes = *opt->lanes;
    else rtx_sched_config_init(&lanes);
    e->n_lanes = lanes.n_lanes;
    e->default_lane = lanes.n_lanes - 1;
    for (int i = 0; i < lanes.n_lanes; i++) {
        struct gen_lane *l = &e->lanes[i];
        snprintf(l->name, sizeof l->name, "%s", lanes.lanes[i].name);
        l->target_ns = lanes.lanes[i].target_ns;
        l->weight = lanes.lanes[i].weight > 0 ? lanes.lanes[i].weight : 1;
        l->max_queued = lanes.lanes[i].max_queued;
        l->on_timeout = lanes.lanes[i].on_timeout;
        _Static_assert(sizeof e->stats.lanes[i].name >= sizeof l->name, "lane names fit");
        memcpy(e->stats.lanes[i].name, l->name, sizeof l->name);
        if (opt->default_lane && strcmp(opt->default_lane, l->name) == 0) e->default_lane = i;
    }
    e->stats.n_lanes = e->n_lanes;
    e->stats.block_size = e->block_size;

    int rc = rtx__gen_model_weights(m, e->dtype, &e->weights, err);
    if (rc) goto fail;
    e->weight_bytes = e->weights.bytes;
    if ((rc = size_pool(e, err))) goto fail;
    int64_t reserve = opt->memory_reserve_bytes > 0 ? opt->memory_reserve_bytes
                                                    : e->weight_bytes + e->kv_bytes;
    rc = rtx_device_consumer_new(dev, e->consumer_name, (size_t)reserve, &e->consumer, err);
    if (rc) goto fail;
    if (cpu && opt->cpu_threads > 0) rtx_device_consumer_set_cpu_threads(e->consumer, opt->cpu_threads);
    e->stats.weight_bytes = e->weight_bytes;
    e->stats.kv_cache_bytes = e->kv_bytes;
    e->stats.kv_blocks_total = e->n_blocks;
    if (pthread_create(&e->thread, NULL, engine_thread, e) != 0) {
        rc = rtx_err_set(err, RTX_EINTERNAL, "cannot start the engine thread");
        goto fail;
    }
    pthread_mutex_lock(&e->mu);
    while (!e->started) pthread_cond_wait(&e->started_cv, &e->mu);
    rc = e->start_rc;
    pthread_mutex_unlock(&e->mu);
    if (rc) {
        if (err) *err = e->start_err;
        pthread_join(e->thread, NULL);
        goto fail;
    }
    rtx__gen_log(e, 1,
                 "generation engine on %s: %s, %s weights %" PRId64 " bytes, KV cache %d blocks "
                 "of %d tokens (%" PRId64 " bytes)",
                 rtx_device_name(dev), rtx_gen_model_arch_name(m), rtx_dtype_name(e->dtype),
                 e->weight_bytes, e->n_blocks, e->block_size, e->kv_bytes);
    *out = e;
    return 0;
fail:
    rtx__kv_blocks_free(e->blocks);
    rtx__sampler_scratch_free(e->scratch);
    rtx_free(e->step_seqs);
    rtx_graph_free(e->graph);
    rtx_free(e->reqs);
    rtx_free(e->run);
    rtx__gen_weights_clear(&e->weights);
    rtx_device_consumer_free(e->consumer);
    rtx_gen_model_unref(e->model);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->started_cv);
    rtx_free(e);
    return rc;
}

void rtx_gen_engine_halt(struct rtx_gen_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    bool first = !e->stopping;
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (!first) return;
    pthread_join(e->thread, NULL);
    rtx__kv_blocks_free(e->blocks);
    e->blocks = NULL;
    rtx__sampler_scratch_free(e->scratch);
    e->scratch = NULL;
    rtx_graph_free(e->graph);
    e->graph = NULL;
    rtx__gen_weights_clear(&e->weights);
    rtx_device_consumer_free(e->consumer);
    e->consumer = NULL;
}

void rtx_gen_engine_stop(struct rtx_gen_engine *e) {
    if (!e) return;
    rtx_gen_engine_halt(e);
    rtx_free(e->step_seqs);
    rtx_free(e->reqs);
    rtx_free(e->run);
    rtx_gen_model_unref(e->model);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->started_cv);
    rtx_free(e);
}
