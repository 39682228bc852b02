/*
 * model.c - one loaded model version: loading (graph, memory-mapped weights bound to the
 * graph, checks against config.json), its instances (a backend, a plan cache and a worker
 * thread each), the request queue, the dynamic batcher, and the statistics it records.
 *
 * DESIGN
 * Weights: the graph file declares every weight as a graph input that config.json does not
 * list; at load each such input is bound, by name, to the tensor of model.safetensors with
 * that name (dtype and shape must match the declaration, -1 matching any size), and becomes an
 * initializer over the mapped bytes. The graph file carries no weight bytes; plans and
 * backends see ordinary initializers (docs/decisions.md).
 *
 * Queue: each version has an SLA scheduler (scheduler/sched.h) with one executor per
 * instance. rtx_serving_infer picks the request's lane (its lane, else its KServe priority,
 * else the model's default lane, else the server's) and admits it there or refuses it at once
 * with RTX_EOVERLOAD and a retry hint (lane full, deadline unmeetable, lane shed by
 * brownout). Workers take requests in the scheduler's order (earliest deadline first in a
 * lane, weighted fair share across lanes). A request the scheduler handed out that cannot
 * join the batch being formed (other non-batch shapes, or it does not fit) waits on a short
 * "held" list that is served before the scheduler. Each request's share of its batch's run
 * time (rows / total rows) is reported as its run time, so the scheduler learns the cost of
 * a request of this version (key "name:version") as batched, and keeps it across reloads
 * (and, with a store, across restarts: serving.c reads and writes it).
 * Requests whose deadline passed are answered RTX_EEXPIRED without running; cancelled ones
 * leave the queue at the next sweep (every 10 ms while a worker looks for work).
 * New lane settings after a SIGHUP reach the live scheduler under mu
 * (rtx__model_reconfigure), derived by the same rules as at load (queue bounds capped at
 * max_queue) but keeping the executors and running bound the version was loaded with.
 *
 * Batching: at most one worker "gathers" at a time (the role of Triton's batch scheduler): it
 * takes the next request and, with dynamic batching on, adds requests whose non-batch
 * dimensions equal the first one's, in the scheduler's order, until the batch reaches
 * max_batch_size or a compatible request does not fit. When a prefix of the gathered requests
 * adds up to a preferred batch size, the longest such prefix runs at once and the rest go to
 * the front of the held list; otherwise it waits for arrivals until max_queue_delay_us (times
 * the scheduler's brownout delay factor) after the first request arrived, then runs what it
 * has. Requests whose deadline passed or whose cancel flag is up fail as they are met. The
 * gatherer then releases the role, so another idle instance can form the next batch while
 * this one runs.
 * A batch of one request runs on the request's own tensors; a larger one concatenates each
 * input along dimension 0 and each request gets a view of its rows of every output (no
 * copy). Rows are computed independently by every op a batched model may use along
 * dimension 0, so batching on and off give the same outputs.
 *
 * Plans are cached per instance, keyed by every input's shape, at most RTX__PLAN_CACHE of
 * them, least recently used evicted first; a plan is only ever run by its instance's thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "serving/serving-impl.h"
#include "runtime/mem-pool.h"

/* ------------------------------------------------------------------------------------------
 * Structures
 * ---------------------------------------------------------------------------------------- */

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

struct plan_slot {
    int64_t key[RTX_MODEL_MAX_IO * RTX_MAX_DIMS];
    int key_len;
    struct rtx_plan *plan;
    uint64_t used;                 /* LRU tick */
};

struct instance {
    struct rtx_model *m;
    int device;                    /* CUDA device, -1 for the CPU */
    struct rtx_backend *be;
    pthread_t thread;
    bool started;
    struct plan_slot cache[RTX__PLAN_CACHE];
    uint64_t tick;
    struct request **batch;        /* room for max(1, max_batch_size) requests */
};

struct rtx_model {
    atomic_int refs;
    struct rtx__model_config cfg;  /* cfg.info is what rtx_model_info returns */
    char *config_json;
    struct rtx_graph *graph;
    struct rtx__safetensors *weights;
    int graph_in[RTX_MODEL_MAX_IO];  /* config input i -> position among graph inputs */
    int graph_out[RTX_MODEL_MAX_IO]; /* config output j -> position among graph outputs */
    const char *out_names[RTX_MODEL_MAX_IO];
    int64_t host_bytes;            /* weights mapped + initializers from the graph file */
    int64_t const_bytes;           /* every initializer (uploaded per plan on a device) */
    struct rtx_limits limits;
    int n_inst;
    struct instance *inst;
    struct rtx__stats_rec *stats;

    int default_lane;              /* lane index: the config's lane, else the server's */
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

int64_t rtx__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

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

static void dur_add(struct rtx_stat_duration *d, int64_t ns) {
    d->count++;
    d->ns += ns;
}

void rtx__stats_reject(struct rtx__stats_rec *r) {
    pthread_mutex_lock(&r->mu);
    r->st.failures[RTX_INFER_FAIL_REJECTED]++;
    dur_add(&r->st.fail, 0);
    pthread_mutex_unlock(&r->mu);
}

static void stats_fail(struct rtx__stats_rec *r, enum rtx_infer_failure why, int64_t ns) {
    pthread_mutex_lock(&r->mu);
    r->st.failures[why]++;
    dur_add(&r->st.fail, ns);
    pthread_mutex_unlock(&r->mu);
}

static struct rtx_batch_stat *batch_stat(struct rtx_model_stats *st, int size) {
    int i = 0;
    while (i < st->n_batch_stats && st->batch_stats[i].batch_size < size)
        i++;
    if (i < st->n_batch_stats && st->batch_stats[i].batch_size == size)
        return &st->batch_stats[i];
    if (st->n_batch_stats == RTX_MODEL_MAX_BATCH_STATS) return NULL; /* table full: not kept */
    memmove(&st->batch_stats[i + 1], &st->batch_stats[i],
            sizeof st->batch_stats[0] * (size_t)(st->n_batch_stats - i));
    st->n_batch_stats++;
    memset(&st->batch_stats[i], 0, sizeof st->batch_stats[i]);
    st->batch_stats[i].batch_size = size;
    return &st->batch_stats[i];
}

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

static void request_free(struct request *r) {
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
static void request_fail(struct request *r, int code, const char *msg) {
    struct rtx_model *m = r->m;
    if (r->handle) {
        pthread_mutex_lock(&m->mu);
        rtx_sched_finish(m->sched, r->handle,
                         code == RTX_ECANCELED ? RTX_SCHED_CANCELLED : RTX_SCHED_FAILED, 0,
                         rtx__now_ns());
        r->handle = 0;
        pthread_cond_broadcast(&m->cv); /* a running slot is free */
        pthread_mutex_unlock(&m->mu);
    }
    struct rtx_infer_result res = {
        .code = code,
        .id = r->id,
        .model = &m->cfg.info,
        .queue_ns = rtx__now_ns() - r->t_enqueue,
    };
    snprintf(res.msg, sizeof res.msg, "%s", msg);
    stats_fail(m->stats, failure_of(code), res.queue_ns);
    r->done(r->ctx, &res);
    request_free(r);
}

/* Why a request cannot run any more (0 when it can): deadline or cancel flag. */
static int request_dead(const struct request *r, int64_t now, char *msg, size_t cap) {
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
 * Plans and execution
 * ---------------------------------------------------------------------------------------- */

static void instance_drop_plans(struct instance *in) {
    for (int i = 0; i < RTX__PLAN_CACHE; i++) {
        rtx_plan_free(in->cache[i].plan);
        in->cache[i].plan = NULL;
    }
}

/* The plan for these inputs (graph order), from the cache or new. */
static int get_plan(struct instance *in, struct rtx_tensor *const *ins, struct rtx_plan **out,
                    struct rtx_err *err) {
    struct rtx_model *m = in->m;
    const struct rtx_graph *g = m->graph;
    int64_t key[RTX_MODEL_MAX_IO * RTX_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        key[n++] = ins[i]->ndim;
        for (int d = 0; d < ins[i]->ndim; d++)
            key[n++] = ins[i]->dims[d];
    }
    in->tick++;
    int victim = 0;
    for (int i = 0; i < RTX__PLAN_CACHE; i++) {
        struct plan_slot *s = &in->cache[i];
        if (s->plan && s->key_len == n && memcmp(s->key, key, sizeof key[0] * (size_t)n) == 0) {
            s->used = in->tick;
            *out = s->plan;
            return 0;
        }
        if (!s->plan || (in->cache[victim].plan && s->used < in->cache[victim].used))
            victim = i;
    }
    struct rtx_plan *p = NULL;
    int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)ins, g->n_inputs, &m->limits, &p,
                          err);
    if (rc) return rc;
    struct plan_slot *s = &in->cache[victim];
    rtx_plan_free(s->plan);
    s->plan = p;
    memcpy(s->key, key, sizeof key[0] * (size_t)n);
    s->key_len = n;
    s->used = in->tick;
    *out = p;
    return 0;
}

/* Runs the plan for `ins` (graph order) into outs (graph order, n_outputs slots). */
static int execute(struct instance *in, struct rtx_tensor *const *ins, struct rtx_tensor **outs,
                   const volatile int *cancel, struct rtx_err *err) {
    struct rtx_plan *p;
    int rc = get_plan(in, ins, &p, err);
    if (rc) return rc;
    struct rtx_exec_stats st = {0};
    const struct rtx_graph *g = in->m->graph;
    return rtx_plan_execute(p, in->be, ins, g->n_inputs, outs, g->n_outputs, cancel, &st, err);
}

/* Runs batch[0..nb) (total rows) and answers every request. */
static void run_batch(struct instance *in, struct request **batch, int nb, int total) {
    struct rtx_model *m = in->m;
    const struct rtx_model_info *info = &m->cfg.info;
    const struct rtx_graph *g = m->graph;
    struct rtx_tensor *ins[RTX_MODEL_MAX_IO] = {0};
    struct rtx_tensor **outs = rtx_calloc((size_t)g->n_outputs + 1, sizeof *outs);
    struct rtx_err err = {0};
    int rc = 0;
    int64_t t0 = rtx__now_ns();
    if (!outs) rc = rtx_err_set(&err, RTX_ENOMEM, "out of memory running a batch");
    for (int i = 0; i < info->n_inputs && rc == 0; i++) {
        int gi = m->graph_in[i];
        if (nb == 1) {
            ins[gi] = rtx_tensor_ref(batch[0]->in[i]);
            continue;
        }
        const struct rtx_tensor *first = batch[0]->in[i];
        int64_t dims[RTX_MAX_DIMS];
        memcpy(dims, first->dims, sizeof dims);
        dims[0] = total;
        if ((rc = rtx_tensor_new(first->dtype, first->ndim, dims, &ins[gi], &err))) break;
        uint8_t *dst = rtx_tensor_data(ins[gi]);
        for (int k = 0; k < nb; k++) {
            size_t bytes = rtx_tensor_nbytes(batch[k]->in[i]);
            memcpy(dst, rtx_tensor_data(batch[k]->in[i]), bytes);
            dst += bytes;
        }
    }
    int64_t t1 = rtx__now_ns();
    if (rc == 0) rc = execute(in, ins, outs, nb == 1 ? batch[0]->cancel : NULL, &err);
    int64_t t2 = rtx__now_ns();
    for (int j = 0; j < info->n_outputs && rc == 0 && info->max_batch_size > 0; j++) {
        const struct rtx_tensor *t = outs[m->graph_out[j]];
        if (t->ndim < 1 || t->dims[0] != total)
            rc = rtx_err_set(&err, RTX_EINTERNAL,
                             "output '%s' has %lld rows for a batch of %d",
                             info->outputs[j].name, t->ndim ? (long long)t->dims[0] : 0LL, total);
    }
    /* split: each request's rows of each output it asked for (views, no copy) */
    struct rtx_tensor *(*views)[RTX_MODEL_MAX_IO] = NULL;
    if (rc == 0 && !(views = rtx_calloc((size_t)nb, sizeof *views)))
        rc = rtx_err_set(&err, RTX_ENOMEM, "out of memory splitting a batch");
    int64_t row0 = 0;
    for (int k = 0; k < nb && rc == 0; k++) {
        const struct request *r = batch[k];
        for (int j = 0; j < r->n_out && rc == 0; j++) {
            struct rtx_tensor *t = outs[m->graph_out[r->out_idx[j]]];
            if (info->max_batch_size == 0 || nb == 1) {
                views[k][j] = rtx_tensor_ref(t);
                continue;
            }
            int64_t dims[RTX_MAX_DIMS];
            memcpy(dims, t->dims, sizeof dims);
            dims[0] = r->batch;
            int64_t row_bytes = (int64_t)rtx_dtype_size(t->dtype) * t->strides[0];
            rc = rtx_tensor_view(t, t->ndim, dims, t->strides, t->offset + row0 * row_bytes,
                                 &views[k][j], &err);
        }
        row0 += r->batch;
    }
    int64_t t3 = rtx__now_ns();
    if (rc == 0) { /* counted before the callbacks, so an answered client sees its figures */
        pthread_mutex_lock(&m->stats->mu);
        struct rtx_model_stats *st = &m->stats->st;
        st->execution_count++;
        struct rtx_batch_stat *bs = batch_stat(st, total);
        if (bs) {
            dur_add(&bs->compute_input, t1 - t0);
            dur_add(&bs->compute_infer, t2 - t1);
            dur_add(&bs->compute_output, t3 - t2);
        }
        for (int k = 0; k < nb; k++) {
            dur_add(&st->success, t3 - batch[k]->t_enqueue);
            dur_add(&st->queue, t0 - batch[k]->t_enqueue);
            dur_add(&st->compute_input, t1 - t0);
            dur_add(&st->compute_infer, t2 - t1);
            dur_add(&st->compute_output, t3 - t2);
            st->inference_count += batch[k]->batch;
        }
        st->last_inference_ms = rtx__unix_ms();
        pthread_mutex_unlock(&m->stats->mu);
    }
    const char *names[RTX_MODEL_MAX_IO];
    for (int k = 0; k < nb; k++) {
        struct request *r = batch[k];
        pthread_mutex_lock(&m->mu); /* answered from here on: no longer pending */
        m->n_running--;
        if (rc == 0 && r->handle) { /* learns this request's share of the batch's run time */
            int64_t share = (t3 - t0) * r->batch / (total > 0 ? total : 1);
            rtx_sched_finish(m->sched, r->handle, RTX_SCHED_OK, share > 0 ? share : 1, t3);
            r->handle = 0;
            m->cost_dirty = true;
            pthread_cond_broadcast(&m->cv); /* a running slot is free */
        }
        pthread_mutex_unlock(&m->mu);
        if (rc) {
            request_fail(r, rc, err.msg);
        } else {
            for (int j = 0; j < r->n_out; j++)
                names[j] = info->outputs[r->out_idx[j]].name;
            struct rtx_infer_result res = {
                .code = 0,
                .id = r->id,
                .model = info,
                .n_outputs = r->n_out,
                .output_names = names,
                .outputs = views[k],
                .queue_ns = t0 - r->t_enqueue,
                .compute_input_ns = t1 - t0,
                .compute_infer_ns = t2 - t1,
                .compute_output_ns = t3 - t2,
                .batch_size = total,
            };
            r->done(r->ctx, &res);
            request_free(r);
        }
        for (int j = 0; views && j < RTX_MODEL_MAX_IO; j++)
            rtx_tensor_unref(views[k][j]);
    }
    rtx_free(views);
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(ins[i]);
    for (int i = 0; outs && i < g->n_outputs; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
}

/* ------------------------------------------------------------------------------------------
 * The batcher and the workers
 * ---------------------------------------------------------------------------------------- */

static bool compatible(const struct request *a, const struct request *b, int n_inputs) {
    for (int i = 0; i < n_inputs; i++) {
        const struct rtx_tensor *x = a->in[i], *y = b->in[i];
        if (x->ndim != y->ndim) return false;
        for (int d = 1; d < x->ndim; d++)
            if (x->dims[d] != y->dims[d]) return false;
    }
    return true;
}

static bool is_preferred(const struct rtx_model_info *info, int total) {
    for (int i = 0; i < info->n_preferred; i++)
        if (info->preferred_batch_sizes[i] == total) return true;
    return false;
}

/* Removes r (whose predecessor is prev, NULL for the head) from the held list. Under m->mu. */
static void unlink_request(struct rtx_model *m, struct request *prev, struct request *r) {
    if (prev)
        prev->next = r->next;
    else
        m->head = r->next;
    if (m->tail == r) m->tail = prev;
    r->next = NULL;
    m->n_queued--;
}

/* Appends r (dispatched by the scheduler, still counted in n_queued) to the held list. */
static void held_append(struct rtx_model *m, struct request *r) {
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
}

/* Adds r to / removes it from the list of requests queued in the scheduler. Under m->mu. */
static void q_link(struct rtx_model *m, struct request *r) {
    r->qprev = NULL;
    r->qnext = m->qhead;
    if (m->qhead) m->qhead->qprev = r;
    m->qhead = r;
    r->queued = true;
}

static void q_unlink(struct rtx_model *m, struct request *r) {
    if (r->qprev)
        r->qprev->qnext = r->qnext;
    else
        m->qhead = r->qnext;
    if (r->qnext) r->qnext->qprev = r->qprev;
    r->qprev = r->qnext = NULL;
    r->queued = false;
}

static void fail_list(struct request *dead, int code) {
    while (dead) {
        struct request *next = dead->next;
        char msg[256];
        int c = code ? code : request_dead(dead, rtx__now_ns(), msg, sizeof msg);
        if (code) snprintf(msg, sizeof msg, "server shutting down");
        if (!c) { /* only dead requests are listed: the flag was seen up */
            c = RTX_ECANCELED;
            snprintf(msg, sizeof msg, "request canceled before it ran");
        }
        request_fail(dead, c, msg);
        dead = next;
    }
}

/* The scheduler's next request, taken off the queued list with its handle (NULL when nothing
 * may be dispatched now). Requests whose deadline passed in the queue go to *dead (the
 * scheduler counted them expired). Under m->mu. */
static struct request *sched_next(struct rtx_model *m, int64_t now, struct request **dead) {
    struct rtx_sched_item it;
    for (;;) {
        enum rtx_sched_pick p = rtx_sched_dispatch(m->sched, now, &it);
        if (p == RTX_SCHED_NONE) return NULL;
        struct request *r = it.data;
        q_unlink(m, r);
        if (p == RTX_SCHED_EXPIRED) {
            r->handle = 0;
            m->n_queued--;
            r->next = *dead;
            *dead = r;
            continue;
        }
        r->handle = it.handle;
        return r;
    }
}

/* At most every 10 ms: queued requests whose client cancelled leave the scheduler, and those
 * whose deadline passed are expired; both go to *dead. Under m->mu. */
static void sweep(struct rtx_model *m, int64_t now, struct request **dead) {
    if (now - m->last_sweep_ns < 10 * 1000000LL) return;
    m->last_sweep_ns = now;
    for (struct request *r = m->qhead, *next; r; r = next) {
        next = r->qnext;
        if (!r->cancel || !__atomic_load_n(r->cancel, __ATOMIC_RELAXED)) continue;
        if (rtx_sched_cancel(m->sched, r->handle, now, NULL, NULL) != 0) continue;
        q_unlink(m, r);
        r->handle = 0;
        m->n_queued--;
        r->next = *dead;
        *dead = r;
    }
    struct rtx_sched_item items[32];
    int n;
    do {
        n = rtx_sched_expire(m->sched, now, items, 32);
        for (int i = 0; i < n; i++) {
            struct request *r = items[i].data;
            q_unlink(m, r);
            r->handle = 0;
            m->n_queued--;
            r->next = *dead;
            *dead = r;
        }
    } while (n == 32);
}

/* Takes every queued and held request (stop with fail_queued) into *dead; queued ones are
 * cancelled in the scheduler, held ones keep their handle (request_fail finishes them). */
static void take_all(struct rtx_model *m, int64_t now, struct request **dead) {
    while (m->qhead) {
        struct request *r = m->qhead;
        q_unlink(m, r);
        rtx_sched_cancel(m->sched, r->handle, now, NULL, NULL);
        r->handle = 0;
        r->next = *dead;
        *dead = r;
    }
    while (m->head) {
        struct request *r = m->head;
        m->head = r->next;
        r->next = *dead;
        *dead = r;
    }
    m->tail = NULL;
    m->n_queued = 0;
}

/* Adds compatible requests to the batch, from the held list and then in the scheduler's
 * order; dead ones go to *dead, incompatible ones wait on the held list. Under m->mu.
 * Returns true when the batch cannot grow (max reached or the next compatible one does not
 * fit). */
static bool gather(struct rtx_model *m, struct request **batch, int *nb, int *total,
                   struct request **dead) {
    const struct rtx_model_info *info = &m->cfg.info;
    struct request *prev = NULL, *r = m->head;
    int64_t now = rtx__now_ns();
    char msg[8];
    while (r && *total < info->max_batch_size) {
        struct request *next = r->next;
        if (request_dead(r, now, msg, sizeof msg)) {
            unlink_request(m, prev, r);
            r->next = *dead;
            *dead = r;
        } else if (compatible(batch[0], r, info->n_inputs)) {
            if (*total + r->batch > info->max_batch_size) return true;
            unlink_request(m, prev, r);
            batch[(*nb)++] = r;
            *total += r->batch;
        } else {
            prev = r;
        }
        r = next;
    }
    while (*total < info->max_batch_size && (r = sched_next(m, now, dead))) {
        if (request_dead(r, now, msg, sizeof msg)) {
            m->n_queued--;
            r->next = *dead;
            *dead = r;
        } else if (!compatible(batch[0], r, info->n_inputs)) {
            held_append(m, r);
        } else if (*total + r->batch > info->max_batch_size) {
            held_append(m, r);
            return true;
        } else {
            m->n_queued--;
            batch[(*nb)++] = r;
            *total += r->batch;
        }
    }
    return *total >= info->max_batch_size;
}

/* With preferred sizes: the longest prefix of the batch whose rows add up to a preferred
 * size; the requests after it go back to the front of the held list, in order, and the
 * prefix runs now (Triton sends the largest preferred batch it can form). Returns whether it
 * cut. Under m->mu. */
static bool cut_to_preferred(struct rtx_model *m, struct request **batch, int *nb, int *total) {
    const struct rtx_model_info *info = &m->cfg.info;
    int rows = 0, cut = 0, cut_rows = 0;
    for (int k = 0; k < *nb; k++) {
        rows += batch[k]->batch;
        if (is_preferred(info, rows)) {
            cut = k + 1;
            cut_rows = rows;
        }
    }
    if (cut == 0 || cut == *nb) return cut == *nb;
    for (int k = *nb - 1; k >= cut; k--) {
        batch[k]->next = m->head;
        m->head = batch[k];
        if (!m->tail) m->tail = batch[k];
        m->n_queued++;
    }
    *nb = cut;
    *total = cut_rows;
    return true;
}

static void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ns) {
    struct timespec ts = {.tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000};
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The next request to start a batch with: the held list's first, else the scheduler's next;
 * NULL when none may start now. Under m->mu. */
static struct request *first_request(struct rtx_model *m, int64_t now, struct request **dead) {
    if (m->head) {
        struct request *r = m->head;
        unlink_request(m, NULL, r);
        return r;
    }
    struct request *r = sched_next(m, now, dead);
    if (r) m->n_queued--;
    return r;
}

static void *worker_main(void *arg) {
    struct instance *in = arg;
    struct rtx_model *m = in->m;
    const struct rtx_model_info *info = &m->cfg.info;
    bool batching = info->dynamic_batching && info->max_batch_size > 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        struct request *dead = NULL;
        int64_t now = rtx__now_ns();
        if (m->stopping && m->fail_queued && m->n_queued > 0) {
            take_all(m, now, &dead);
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, RTX_EUNAVAILABLE);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        if (m->stopping && m->n_queued == 0) break; /* nothing left */
        struct request *r = NULL;
        if (!m->gathering) {
            sweep(m, now, &dead);
            r = first_request(m, now, &dead);
        }
        if (!r) {
            if (!dead) /* wait for work; wake for the next sweep while requests wait */
                cond_wait_until(&m->cv, &m->mu, now + 50 * 1000000LL);
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, 0);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        char msg[256];
        int code = request_dead(r, now, msg, sizeof msg);
        if (code) {
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, 0);
            request_fail(r, code, msg);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        int nb = 1, total = r->batch;
        in->batch[0] = r;
        if (batching) {
            m->gathering = true;
            double factor = rtx_sched_batch_delay_factor(m->sched); /* < 1 in brownout */
            int64_t until = r->t_enqueue + (int64_t)((double)info->max_queue_delay_us * 1000.0 *
                                                     factor);
            for (;;) {
                bool full = gather(m, in->batch, &nb, &total, &dead);
                if (full || m->stopping || cut_to_preferred(m, in->batch, &nb, &total)) break;
                if (rtx__now_ns() >= until) break;
                cond_wait_until(&m->cv, &m->mu, until);
            }
            m->gathering = false;
            pthread_cond_broadcast(&m->cv); /* another instance may gather now */
        }
        m->n_running += nb;
        pthread_mutex_unlock(&m->mu);
        fail_list(dead, 0);
        run_batch(in, in->batch, nb, total); /* takes the batch off n_running */
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Inference entry point
 * ---------------------------------------------------------------------------------------- */

static int check_input(const struct rtx_model_info *info, const struct rtx_model_io *io,
                       const struct rtx_tensor *t, int *batch, struct rtx_err *err) {
    char got[96], want[96];
    int off = info->max_batch_size > 0 ? 1 : 0;
    if (t->dtype != io->dtype)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %s, the model expects %s",
                           io->name, rtx_kserve_dtype_name(t->dtype),
                           rtx_kserve_dtype_name(io->dtype));
    bool ok = t->ndim == io->ndim + off;
    for (int d = 0; ok && d < io->ndim; d++)
        ok = io->dims[d] < 0 || io->dims[d] == t->dims[d + off];
    if (!ok) {
        int64_t wd[RTX_MAX_DIMS];
        if (off) wd[0] = -1;
        memcpy(wd + off, io->dims, sizeof io->dims[0] * (size_t)io->ndim);
        return rtx_err_set(err, RTX_EINVAL, "input '%s': shape %s, the model expects %s%s",
                           io->name, rtx_shape_str(t->dtype, t->ndim, t->dims, got, sizeof got),
                           rtx_shape_str(io->dtype, io->ndim + off, wd, want, sizeof want),
                           off ? " (-1 first: the batch)" : "");
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] == 0 && !(off && d == 0))
            return rtx_err_set(err, RTX_EINVAL, "input '%s': dimension %d is 0", io->name, d);
    int b = off ? (int)(t->dims[0] < INT32_MAX ? t->dims[0] : INT32_MAX) : 1;
    if (off && b < 1)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': batch size 0", io->name);
    if (off && b > info->max_batch_size)
        return rtx_err_set(err, RTX_ELIMIT, "input '%s': batch size %d exceeds the model's "
                           "max_batch_size %d", io->name, b, info->max_batch_size);
    if (*batch && *batch != b)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': batch size %d differs from the other inputs' %d",
                           io->name, b, *batch);
    *batch = b;
    return 0;
}

/* A zero tensor for an optional input the request left out (-1 dimensions are 1). */
static int zero_input(const struct rtx_model_info *info, const struct rtx_model_io *io, int batch,
                      struct rtx_tensor **out, struct rtx_err *err) {
    int64_t dims[RTX_MAX_DIMS];
    int off = info->max_batch_size > 0 ? 1 : 0;
    if (off) dims[0] = batch;
    for (int d = 0; d < io->ndim; d++)
        dims[d + off] = io->dims[d] < 0 ? 1 : io->dims[d];
    return rtx_tensor_new(io->dtype, io->ndim + off, dims, out, err);
}

static int build_request(struct rtx_model *m, const struct rtx_infer_request *req,
                         struct request *r, struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    int batch = 0, rc;
    if (req->n_inputs < 0 || (req->n_inputs > 0 && !req->inputs))
        return rtx_err_set(err, RTX_EINVAL, "bad input list");
    for (int k = 0; k < req->n_inputs; k++) {
        const struct rtx_infer_input *x = &req->inputs[k];
        if (!x->name || !x->tensor)
            return rtx_err_set(err, RTX_EINVAL, "input %d has no name or no tensor", k);
        int i = 0;
        while (i < info->n_inputs && strcmp(info->inputs[i].name, x->name) != 0)
            i++;
        if (i == info->n_inputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown input '%.128s' for model '%s'",
                               x->name, info->name);
        if (r->in[i])
            return rtx_err_set(err, RTX_EINVAL, "input '%s' is given twice", x->name);
        if ((rc = check_input(info, &info->inputs[i], x->tensor, &batch, err))) return rc;
        if ((rc = rtx_tensor_contiguous(x->tensor, &r->in[i], err))) return rc;
    }
    for (int i = 0; i < info->n_inputs; i++) {
        if (r->in[i]) continue;
        if (!info->inputs[i].optional)
            return rtx_err_set(err, RTX_EINVAL, "missing input '%s'", info->inputs[i].name);
    }
    r->batch = batch ? batch : 1;
    for (int i = 0; i < info->n_inputs; i++)
        if (!r->in[i] && (rc = zero_input(info, &info->inputs[i], r->batch, &r->in[i], err)))
            return rc;
    if (req->n_outputs < 0 || (req->n_outputs > 0 && !req->outputs))
        return rtx_err_set(err, RTX_EINVAL, "bad output list");
    if (req->n_outputs == 0) {
        r->n_out = info->n_outputs;
        for (int j = 0; j < info->n_outputs; j++)
            r->out_idx[j] = j;
    }
    for (int k = 0; k < req->n_outputs; k++) {
        const char *name = req->outputs[k] ? req->outputs[k] : "";
        int j = 0;
        while (j < info->n_outputs && strcmp(info->outputs[j].name, name) != 0)
            j++;
        if (j == info->n_outputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown output '%.128s' for model '%s'", name,
                               info->name);
        for (int q = 0; q < r->n_out; q++)
            if (r->out_idx[q] == j)
                return rtx_err_set(err, RTX_EINVAL, "output '%s' is requested twice", name);
        r->out_idx[r->n_out++] = j;
    }
    if (req->id && !(r->id = rtx_strdup(req->id)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory queuing a request");
    return 0;
}

/* The request's lane: its lane by name, else its priority (1 = the first lane), else the
 * version's default lane. RTX_EINVAL naming an unknown lane or a negative priority. Under
 * m->mu. */
static int pick_lane(struct rtx_model *m, const struct rtx_infer_request *req,
                     struct rtx_err *err) {
    if (req->lane && req->lane[0]) {
        int lane = rtx_sched_lane_find(m->sched, req->lane);
        if (lane < 0)
            return rtx_err_set(err, RTX_EINVAL, "unknown lane '%.64s' for model '%s'",
                               req->lane, m->cfg.info.name);
        return lane;
    }
    if (req->priority != 0) {
        int lane = rtx_sched_lane_for_priority(m->sched, req->priority, m->default_lane);
        if (lane < 0)
            return rtx_err_set(err, RTX_EINVAL, "priority %d is negative", req->priority);
        return lane;
    }
    return m->default_lane;
}

int rtx_serving_infer(struct rtx_serving *s, const struct rtx_infer_request *req,
                      struct rtx_err *err) {
    if (!s || !req || !req->model || !req->done)
        return rtx_err_set(err, RTX_EINVAL, "infer: no server, request, model or callback");
    struct rtx_model *m = req->model;
    struct request *r = rtx_calloc(1, sizeof *r);
    if (!r) {
        rtx__stats_reject(m->stats);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory queuing a request");
    }
    int rc = build_request(m, req, r, err);
    if (rc) {
        request_free(r);
        rtx__stats_reject(m->stats);
        return rc;
    }
    r->m = rtx__model_ref(m);
    r->deadline_ns = req->deadline_ns;
    r->cancel = req->cancel;
    r->done = req->done;
    r->ctx = req->ctx;
    r->t_enqueue = rtx__now_ns();
    pthread_mutex_lock(&m->mu);
    int lane = -1;
    if (m->stopping) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE, "model '%s' version %lld is unloading",
                         m->cfg.info.name, (long long)m->cfg.info.version);
    } else if (m->n_queued >= m->max_queue) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE,
                         "model '%s': queue full (%lld requests waiting)", m->cfg.info.name,
                         (long long)m->n_queued);
    } else if (req->deadline_ns > 0 && req->deadline_ns <= r->t_enqueue) {
        /* passed already: no retry would help, so this is an expiry, not an overload */
        rc = rtx_err_set(err, RTX_EEXPIRED, "deadline expired %.3f ms before the request "
                         "could be queued", (double)(r->t_enqueue - req->deadline_ns) / 1e6);
    } else if ((lane = pick_lane(m, req, err)) >= 0) {
        struct rtx_sched_request sr = {
            .data = r, .lane = lane, .deadline_ns = req->deadline_ns, .cost_key = m->cost_key,
        };
        struct rtx_sched_reject rej;
        int e = rtx_sched_enqueue(m->sched, &sr, r->t_enqueue, &r->handle, &rej);
        if (e == RTX_EUNAVAILABLE) {
            int64_t ms = (rej.retry_after_ns + 999999) / 1000000;
            rc = rtx_err_set(err, RTX_EOVERLOAD,
                             "model '%s' version %lld overloaded (%s): %s; retry after %lld ms",
                             m->cfg.info.name, (long long)m->cfg.info.version,
                             rtx_sched_reject_name(rej.reason), rej.msg,
                             (long long)(ms > 0 ? ms : 1));
        } else if (e) {
            rc = rtx_err_set(err, e, "model '%s': the scheduler refused lane %d",
                             m->cfg.info.name, lane);
        } else {
            q_link(m, r);
            m->n_queued++;
            pthread_cond_broadcast(&m->cv);
        }
    } else {
        rc = lane;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc == RTX_EEXPIRED) {
        stats_fail(m->stats, RTX_INFER_FAIL_EXPIRED, 0);
        request_free(r);
    } else if (rc) {
        rtx__stats_reject(m->stats);
        request_free(r);
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

static void model_free(struct rtx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_inst; i++) {
        instance_drop_plans(&m->inst[i]);
        rtx_backend_free(m->inst[i].be);
        rtx_free(m->inst[i].batch);
    }
    rtx_free(m->inst);
    rtx_sched_free(m->sched);
    rtx_graph_free(m->graph);
    rtx__st_unref(m->weights);
    rtx_free(m->config_json);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    rtx_free(m);
}

void rtx_model_unref(struct rtx_model *m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    model_free(m);
}

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
        int w = m->weights ? rtx__st_find(m->weights, v->name) : -1;
        if (w < 0)
            return rtx_err_set(err, RTX_EGRAPH,
                               "%s: graph input '%s' is neither an input of config.json nor a "
                               "tensor of %s",
                               gpath, v->name, wpath);
        struct rtx_tensor *t;
        if ((rc = rtx__st_tensor(m->weights, w, &t, err))) return rc;
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
    return 0;
}

/* The instances config.json asks for on the devices there are. */
static int make_instances(struct rtx_model *m, const struct rtx__model_load_opts *o,
                          struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    int healthy[64], n_gpu = 0; /* healthy CUDA devices, by index */
    for (int d = 0; o->gpus && d < o->gpus->n && n_gpu < 64; d++)
        if (o->gpus->devs[d].healthy) healthy[n_gpu++] = o->gpus->devs[d].index;
    int devices[256];
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
            bool found = false;
            for (int d = 0; d < n_gpu && !found; d++)
                found = healthy[d] == g->gpus[k];
            if (!found)
                return rtx_err_set(err, RTX_EINVAL,
                                   "config.json: instance_group[%d].gpus names device %d, which "
                                   "is not a healthy GPU of this host",
                                   gi, g->gpus[k]);
        }
        int nd = !gpu ? 1 : g->n_gpus ? g->n_gpus : n_gpu;
        for (int d = 0; d < nd; d++)
            for (int k = 0; k < g->count; k++) {
                if (n == (int)(sizeof devices / sizeof devices[0]))
                    return rtx_err_set(err, RTX_ELIMIT, "config.json: more than %d instances",
                                       n);
                devices[n++] = !gpu ? -1 : g->n_gpus ? g->gpus[d] : healthy[d];
            }
    }
    m->inst = rtx_calloc((size_t)n, sizeof *m->inst);
    if (!m->inst) return rtx_err_set(err, RTX_ENOMEM, "out of memory creating instances");
    int slots = m->cfg.info.max_batch_size > 1 ? m->cfg.info.max_batch_size : 1;
    bool any_gpu = false;
    for (int i = 0; i < n; i++) {
        struct instance *in = &m->inst[i];
        in->m = m;
        in->device = devices[i];
        m->n_inst = i + 1;
        in->batch = rtx_calloc((size_t)slots, sizeof *in->batch);
        if (!in->batch) return rtx_err_set(err, RTX_ENOMEM, "out of memory creating instances");
        int rc;
        if (in->device < 0) {
            struct rtx_cpu_options co = {.n_threads = o->cpu_threads};
            rc = rtx_backend_cpu_new(&co, &in->be, err);
        } else {
            struct rtx_cuda_options co = {.device = in->device};
            rc = rtx_backend_cuda_new(&co, &in->be, err);
            any_gpu = true;
        }
        if (rc) return rtx_err_prefix(err, "instance %d", i);
    }
    m->cfg.info.instances = n;
    snprintf(m->cfg.info.instance_kind, sizeof m->cfg.info.instance_kind, "%s",
             any_gpu ? "KIND_GPU" : "KIND_CPU");
    return 0;
}

/* One run per instance on zero inputs of batch 1; the first checks the outputs against
 * config.json. A model with a batch dimension is also planned for a batch of 2, to check
 * that every output carries the batch. */
static int warm_up(struct rtx_model *m, struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    const struct rtx_graph *g = m->graph;
    struct rtx_tensor *ins[RTX_MODEL_MAX_IO] = {0};
    struct rtx_tensor **outs = rtx_calloc((size_t)g->n_outputs + 1, sizeof *outs);
    int rc = outs ? 0 : rtx_err_set(err, RTX_ENOMEM, "out of memory warming up");
    int off = info->max_batch_size > 0 ? 1 : 0;
    for (int i = 0; i < info->n_inputs && rc == 0; i++)
        rc = zero_input(info, &info->inputs[i], 1, &ins[m->graph_in[i]], err);
    for (int k = 0; k < m->n_inst && rc == 0; k++) {
        rc = execute(&m->inst[k], ins, outs, NULL, err);
        if (rc) {
            rtx_err_prefix(err, "warm-up on instance %d (%s)", k, rtx_backend_name(m->inst[k].be));
            break;
        }
        for (int j = 0; j < info->n_outputs && k == 0 && rc == 0; j++) {
            const struct rtx_model_io *io = &info->outputs[j];
            const struct rtx_tensor *t = outs[m->graph_out[j]];
            bool ok = t->dtype == io->dtype && t->ndim == io->ndim + off;
            for (int d = 0; ok && d < io->ndim; d++)
                ok = io->dims[d] < 0 || io->dims[d] == t->dims[d + off];
            char got[96];
            if (!ok)
                rc = rtx_err_set(err, RTX_EGRAPH,
                                 "output '%s': the graph computes %s for a batch of 1, "
                                 "config.json says %s with dims of rank %d",
                                 io->name, rtx_shape_str(t->dtype, t->ndim, t->dims, got,
                                                         sizeof got),
                                 rtx__config_dtype_name(io->dtype), io->ndim);
        }
        for (int j = 0; j < g->n_outputs; j++) {
            rtx_tensor_unref(outs[j]);
            outs[j] = NULL;
        }
    }
    if (rc == 0 && info->max_batch_size > 1) {
        struct rtx_tensor *two[RTX_MODEL_MAX_IO] = {0};
        struct rtx_plan *p = NULL;
        for (int i = 0; i < info->n_inputs && rc == 0; i++)
            rc = zero_input(info, &info->inputs[i], 2, &two[m->graph_in[i]], err);
        if (rc == 0)
            rc = rtx_plan_new(g, (const struct rtx_tensor *const *)two, g->n_inputs, &m->limits,
                              &p, err);
        for (int j = 0; j < info->n_outputs && rc == 0; j++) {
            enum rtx_dtype dt;
            int nd;
            int64_t dims[RTX_MAX_DIMS];
            rtx_plan_value_shape(p, g->outputs[m->graph_out[j]], &dt, &nd, dims);
            if (nd < 1 || dims[0] != 2)
                rc = rtx_err_set(err, RTX_EGRAPH,
                                 "output '%s' does not carry the batch in dimension 0 "
                                 "(max_batch_size %d)",
                                 info->outputs[j].name, info->max_batch_size);
        }
        rtx_plan_free(p);
        for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
            rtx_tensor_unref(two[i]);
    }
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(ins[i]);
    rtx_free(outs);
    return rc;
}

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
    for (int i = 0; i < sc.n_lanes; i++)
        if (sc.lanes[i].max_queued > m->max_queue) sc.lanes[i].max_queued = m->max_queue;
    return sc;
}

int rtx__model_reconfigure(struct rtx_model *m, const struct rtx_sched_config *server,
                           struct rtx_err *err) {
    pthread_mutex_lock(&m->mu);
    struct rtx_sched_config sc = version_sched_config(m, server);
    const struct rtx_sched_config *cur = rtx_sched_config(m->sched);
    sc.executors = cur->executors; /* fixed at load, as its instances are */
    sc.max_running = cur->max_running;
    int rc = rtx_sched_reconfigure(m->sched, &sc, rtx__now_ns(), err);
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
    struct rtx_sched_config sc = version_sched_config(m, o->sched);
    int rc = rtx_sched_new(&sc, rtx__now_ns(), &m->sched, err);
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
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    if (!(m->config_json = rtx__model_config_dump(&m->cfg))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading %s", o->dir);
        goto fail;
    }
    if (!file_exists(gpath)) {
        rc = rtx_err_set(err, RTX_EIO, "%s: %s", gpath, strerror(errno));
        goto fail;
    }
    if ((rc = rtx_graph_load_file(gpath, &m->limits, &m->graph, err))) goto fail;
    if (file_exists(wpath) && (rc = rtx__st_open(wpath, &m->weights, err))) goto fail;
    if ((rc = bind_graph(m, gpath, wpath, err))) goto fail;
    if (m->weights) {
        int64_t graph_consts = m->const_bytes;
        for (int i = 0; i < m->weights->n; i++)
            graph_consts -= (int64_t)(m->weights->entries[i].end - m->weights->entries[i].begin);
        m->host_bytes = (int64_t)m->weights->map_bytes + (graph_consts > 0 ? graph_consts : 0);
    }
    if ((rc = make_instances(m, o, err))) goto fail;
    if ((rc = make_scheduler(m, o, err))) goto fail;
    if ((rc = warm_up(m, err))) goto fail;
    for (int i = 0; i < m->n_inst; i++) {
        if (pthread_create(&m->inst[i].thread, NULL, worker_main, &m->inst[i]) != 0) {
            rc = rtx_err_set(err, RTX_ENOMEM, "cannot start a worker thread");
            rtx__model_stop(m, true);
            goto fail;
        }
        m->inst[i].started = true;
    }
    *out = m;
    return 0;
fail:
    model_free(m);
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
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].started) {
            pthread_join(m->inst[i].thread, NULL);
            m->inst[i].started = false;
        }
    /* no worker left: the instances' plans and device memory go now, the graph and the
     * weights with the last reference */
    for (int i = 0; i < m->n_inst; i++) {
        instance_drop_plans(&m->inst[i]);
        rtx_backend_free(m->inst[i].be);
        m->inst[i].be = NULL;
    }
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
        if (in->device < 0 || in->device >= n_devices || !in->be) continue;
        struct rtx_mem_pool_stats ps;
        if (rtx_backend_cuda_pool_stats(in->be, &ps, NULL, NULL) == 0)
            device_bytes[in->device] += (int64_t)ps.total.bytes_reserved;
    }
}
