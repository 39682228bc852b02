/*
 * jobs.c - the job manager: admission of Submit requests, worker threads, cancellation,
 * watchers, recovery at start and drain (the contract is daemon/jobs.h).
 *
 * DESIGN
 * One mutex (mu) guards the in-memory state: a FIFO per lane (a doubly linked list, so a
 * cancel unlinks a queued job in O(1)), an index of every job this process holds in memory
 * (being admitted, queued or running) keyed by id, the counters and the drain/stop flags.
 * Workers wait on work_cv and take the head of the next non-empty lane after the one served
 * last (round robin). The store is never called with mu held: every journal write is a
 * synchronous commit, and holding mu across it would stall every other submitter and worker.
 *
 * A job is "pending" in the index while its journal insert runs, so a cancel that races the
 * insert (a client that learnt the id from an idempotent repeat) is remembered and applied by
 * the submitter once the job is durable. A worker moves a job out of its lane under mu, then
 * journals it running, executes it with a per-job cancel flag that the executor reads between
 * ops, and journals the result. rtx_jobs_cancel sets that flag for a running job; drain past
 * its grace and stop set it too but mark the job "interrupted", and an interrupted job is left
 * as the journal says (running, or queued if it had not started), for recovery to handle at
 * the next start by the job's restart policy. Jobs run at most once per start; recovery is
 * the only place that re-queues a job that was running. A deadline is checked when a worker
 * takes the job (there is no timer): a job reached after its deadline is journaled expired.
 *
 * Decoded graphs, inputs and plans made for validation at admission are kept with the queued
 * job (up to CACHE_MAX_BYTES of request bytes in all) so a worker does not decode them again;
 * beyond that, and for recovered jobs, the worker decodes the journaled request.
 *
 * Watchers live in their own table (wmu, hashed by job id) so that publishing never holds mu.
 * A publisher reads the job back from the store (only when someone watches it) and calls each
 * watch's callback without wmu held, marking the watch "in callback"; rtx_jobs_unwatch marks
 * the watch removed and waits on wcv until its deliverer, which then frees it, clears that mark
 * (from inside the callback itself it only marks it, so it cannot wait for itself). Every
 * watch remembers the rank of the last state it got (queued < running < terminal) and never
 * gets an equal or lower one, so the snapshot that rtx_jobs_watch reads (after registering, so
 * no change can slip between) and a concurrent publication cannot arrive out of order or
 * twice.
 *
 * Admission limits: zero fields of rtx_jobs_options.limits take rtx_limits_default()'s value.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <protobuf-c/protobuf-c.h>

#include "daemon/jobs.h"

void (*rtx__jobs_after_enqueue_hook)(void);
#include "daemon/log.h"
#include "kernels/backend.h"
#include "rtx/v1/jobs.pb-c.h"

#define MAX_LANES                                                                                 \
    ((int)(sizeof(((struct rtx_jobs_stats *)0)->lanes) / sizeof(struct rtx_lane_depth)))
#define CACHE_MAX_BYTES ((size_t)256 << 20) /* request bytes of decoded jobs kept in memory */
#define WATCH_BUCKETS 256                   /* a watch handle's low 8 bits: its bucket */
#define INDEX_MIN_BUCKETS 1024

static const char REASON_CANCELLED[] = "cancelled by request";
static const char REASON_EXPIRED[] = "deadline passed before the job started";
static const char REASON_RESTART[] = "interrupted by a daemon restart";

/* ------------------------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------------------------- */

/* A decoded job ready to run: its graph, the inputs in graph-input order, and its plan. */
struct prepared {
    struct rtx_graph *graph;
    int n_inputs;
    struct rtx_tensor **inputs;
    struct rtx_plan *plan;
};

/* Where an in-memory job is: being journaled by its submitter, in a lane, being journaled as
 * cancelled by rtx_jobs_cancel, or with a worker. */
enum job_where { JOB_PENDING, JOB_QUEUED, JOB_CANCELLING, JOB_RUNNING };

struct job {
    char id[RTX_JOB_ID_LEN];
    int lane;                /* index into rtx_jobs.lanes */
    int64_t deadline_ms;     /* unix ms; 0 = none */
    enum job_where where;    /* under mu */
    struct prepared *prep;   /* NULL: decode the journaled request when it runs */
    size_t cached_bytes;     /* bytes charged to rtx_jobs.cache_bytes */
    volatile int cancel;     /* the executor's flag; set with __atomic_store_n */
    bool cancel_requested;   /* rtx_jobs_cancel asked (under mu) */
    bool interrupted;        /* drain past grace or stop (under mu) */
    struct job *prev, *next; /* lane FIFO */
    struct job *hnext;       /* index chain */
};

struct lane {
    char *name;
    struct job *head, *tail;
    int queued, running;
};

struct worker {
    struct rtx_jobs *j;
    pthread_t thread;
    bool started;
    struct rtx_backend *be;
    struct job *current; /* under mu */
};

struct watch {
    uint64_t handle;
    char job[RTX_JOB_ID_LEN];
    rtx_jobs_watch_cb cb;
    void *ctx;
    int rank;            /* rank of the last state delivered; 0 = none yet */
    bool in_cb;          /* a thread is running cb */
    pthread_t cb_thread; /* that thread */
    bool removed;        /* unwatched: no more deliveries; freed after the running one */
    struct watch *next;
};

struct rtx_jobs {
    struct rtx_store *store;
    struct rtx_limits limits;
    int64_t max_queued;
    int cpu_threads;
    int n_lanes;
    struct lane lanes[MAX_LANES];
    int default_lane;

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a job was queued, or stop */
    pthread_cond_t idle_cv; /* a worker finished a job */
    enum rtx_restart_policy default_policy;
    bool draining, stopping;
    int rr; /* next lane to serve */
    int n_pending, n_queued, n_running;
    size_t cache_bytes; /* bytes */
    struct job **index;
    size_t index_cap, index_n;
    int64_t succeeded, failed, cancelled, expired;
    int n_workers;
    struct worker *workers;

    pthread_mutex_t wmu;
    pthread_cond_t wcv; /* a callback returned */
    struct watch *watches[WATCH_BUCKETS];
    uint64_t watch_seq;
};

/* ------------------------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t hash_id(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int state_rank(enum rtx_job_state s) {
    if (rtx_job_state_is_terminal(s)) return 3;
    return s == RTX_JOB_RUNNING ? 2 : 1;
}

static void log_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state state,
                      const char *reason, double run_ms) {
    enum rtx_log_level level = state == RTX_JOB_FAILED ? RTX_LOG_WARN : RTX_LOG_INFO;
    const char *lname = j->lanes[lane].name, *sname = rtx_job_state_name(state);
    if (state == RTX_JOB_SUCCEEDED) {
        char ms[32];
        snprintf(ms, sizeof ms, "%.3f", run_ms);
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, "run_ms", ms, NULL);
    } else if (reason && reason[0]) {
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, "reason", reason,
                NULL);
    } else {
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, NULL);
    }
}

/* Appends ", name" (or "name" at the start) to buf, truncating silently. */
static void list_append(char *buf, size_t len, const char *name) {
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
}

/* ------------------------------------------------------------------------------------------
 * protobuf-c allocator over rtx_malloc (a NULL from unpack is ENOMEM, not malformed bytes,
 * when an allocation failed)
 * ---------------------------------------------------------------------------------------- */

struct pb_state {
    bool failed;
};

static void *pb_alloc(void *data, size_t size) {
    struct pb_state *st = data;
    void *p = rtx_malloc(size ? size : 1);
    if (!p) st->failed = true;
    return p;
}

static void pb_free(void *data, void *p) {
    rtx_free(p);
}

static int unpack_request(const void *data, size_t len, Rtx__V1__SubmitRequest **out,
                          struct rtx_err *err) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    *out = rtx__v1__submit_request__unpack(&alloc, len, data);
    if (*out) return 0;
    if (st.failed) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding SubmitRequest");
    return rtx_err_set(err, RTX_EFORMAT, "malformed SubmitRequest (%zu bytes)", len);
}

static void free_request(Rtx__V1__SubmitRequest *m) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    rtx__v1__submit_request__free_unpacked(m, &alloc);
}

/* ------------------------------------------------------------------------------------------
 * Decoding a request into a runnable job
 * ---------------------------------------------------------------------------------------- */

static void prepared_free(struct prepared *p) {
    if (!p) return;
    rtx_plan_free(p->plan);
    for (int i = 0; i < p->n_inputs; i++)
        rtx_tensor_unref(p->inputs[i]);
    rtx_free(p->inputs);
    rtx_graph_free(p->graph);
    rtx_free(p);
}

/* An input tensor message as a new tensor, checked against the limits; *total accumulates
 * input bytes against lim->max_total_bytes. */
static int input_from_msg(const Rtx__V1__Tensor *m, const struct rtx_limits *lim, int64_t *total,
                          struct rtx_tensor **out, struct rtx_err *err) {
    char what[RTX_JOB_ID_LEN + 200];
    snprintf(what, sizeof what, "input '%.180s'", m->name);
    return rtx_tensor_from_wire(m, what, lim, total, out, err);
}

/* Binds the request's input tensors to the graph's inputs by name: unknown names, names given
 * twice and missing inputs are RTX_EINVAL naming them. */
static int bind_inputs(const struct rtx_graph *g, const Rtx__V1__SubmitRequest *m,
                       const struct rtx_limits *lim, struct rtx_tensor **inputs,
                       struct rtx_err *err) {
    int *slot = rtx_calloc(m->n_inputs + 1, sizeof *slot);
    if (!slot) return rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
    int rc = 0;
    for (size_t k = 0; k < m->n_inputs; k++) {
        const char *name = m->inputs[k]->name;
        int v = rtx_graph_find_value(g, name), pos = -1;
        for (int i = 0; v >= 0 && i < g->n_inputs; i++)
            if (g->inputs[i] == v) pos = i;
        if (pos < 0) {
            char known[160] = "";
            for (int i = 0; i < g->n_inputs; i++)
                list_append(known, sizeof known, g->values[g->inputs[i]].name);
            rc = rtx_err_set(err, RTX_EINVAL, "unknown input '%s' (graph inputs: %s)", name,
                             g->n_inputs ? known : "none");
            goto out;
        }
        for (size_t q = 0; q < k; q++) {
            if (slot[q] == pos) {
                rc = rtx_err_set(err, RTX_EINVAL, "input '%s' is given more than once", name);
                goto out;
            }
        }
        slot[k] = pos;
    }
    char missing[200] = "";
    int n_missing = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        bool given = false;
        for (size_t k = 0; k < m->n_inputs && !given; k++)
            given = slot[k] == i;
        if (!given) {
            list_append(missing, sizeof missing, g->values[g->inputs[i]].name);
            n_missing++;
        }
    }
    if (n_missing) {
        rc =
            rtx_err_set(err, RTX_EINVAL, "missing input%s: %s", n_missing > 1 ? "s" : "", missing);
        goto out;
    }
    int64_t total = 0;
    for (size_t k = 0; k < m->n_inputs; k++)
        if ((rc = input_from_msg(m->inputs[k], lim, &total, &inputs[slot[k]], err)) < 0) break;
out:
    rtx_free(slot);
    return rc;
}

/* Decodes the graph of a request (through runtime's wire decoder), binds its inputs and plans
 * it: every graph, input and limit problem shows here, naming the node or input. */
static int prepare(const Rtx__V1__SubmitRequest *m, const struct rtx_limits *lim,
                   struct prepared **out, struct rtx_err *err) {
    *out = NULL;
    if (!m->graph) return rtx_err_set(err, RTX_EINVAL, "SubmitRequest has no graph");
    struct prepared *p = rtx_calloc(1, sizeof *p);
    if (!p) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
    size_t glen = rtx__v1__graph__get_packed_size(m->graph);
    uint8_t *gbytes = rtx_malloc(glen ? glen : 1);
    int rc;
    if (!gbytes) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
        goto fail;
    }
    rtx__v1__graph__pack(m->graph, gbytes);
    rc = rtx_graph_decode(gbytes, glen, lim, &p->graph, err);
    rtx_free(gbytes);
    if (rc < 0) goto fail;
    p->inputs = rtx_calloc((size_t)p->graph->n_inputs + 1, sizeof *p->inputs);
    if (!p->inputs) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
        goto fail;
    }
    p->n_inputs = p->graph->n_inputs;
    if ((rc = bind_inputs(p->graph, m, lim, p->inputs, err)) < 0) goto fail;
    rc = rtx_plan_new(p->graph, (const struct rtx_tensor *const *)p->inputs, p->n_inputs, lim,
                      &p->plan, err);
    if (rc < 0) goto fail;
    *out = p;
    return 0;
fail:
    prepared_free(p);
    return rc;
}

/* The journaled request of a job, decoded and planned (for recovered jobs and jobs whose
 * decoded form was not cached). */
static int load_prepared(struct rtx_jobs *j, const char *id, struct prepared **out,
                         struct rtx_err *err) {
    void *bytes = NULL;
    size_t len = 0;
    int rc = rtx_store_job_request(j->store, id, &bytes, &len, err);
    if (rc < 0) return rtx_err_prefix(err, "loading the request");
    Rtx__V1__SubmitRequest *m = NULL;
    rc = unpack_request(bytes, len, &m, err);
    rtx_free(bytes);
    if (rc < 0) return rc;
    rc = prepare(m, &j->limits, out, err);
    free_request(m);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * The job index and the lane queues (all under mu)
 * ---------------------------------------------------------------------------------------- */

static void index_grow(struct rtx_jobs *j) {
    size_t cap = j->index_cap * 2;
    struct job **b = rtx_calloc(cap, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    for (size_t i = 0; i < j->index_cap; i++) {
        for (struct job *x = j->index[i], *nx; x; x = nx) {
            nx = x->hnext;
            size_t h = hash_id(x->id) & (cap - 1);
            x->hnext = b[h];
            b[h] = x;
        }
    }
    rtx_free(j->index);
    j->index = b;
    j->index_cap = cap;
}

static void index_add(struct rtx_jobs *j, struct job *job) {
    if (j->index_n >= j->index_cap * 2) index_grow(j);
    size_t h = hash_id(job->id) & (j->index_cap - 1);
    job->hnext = j->index[h];
    j->index[h] = job;
    j->index_n++;
}

static struct job *index_find(struct rtx_jobs *j, const char *id) {
    for (struct job *x = j->index[hash_id(id) & (j->index_cap - 1)]; x; x = x->hnext)
        if (strcmp(x->id, id) == 0) return x;
    return NULL;
}

static void index_remove(struct rtx_jobs *j, struct job *job) {
    for (struct job **pp = &j->index[hash_id(job->id) & (j->index_cap - 1)]; *pp;
         pp = &(*pp)->hnext) {
        if (*pp == job) {
            *pp = job->hnext;
            j->index_n--;
            return;
        }
    }
}

/* Appends to the tail (at_head: to the head) of the job's lane. */
static void enqueue(struct rtx_jobs *j, struct job *job, bool at_head) {
    struct lane *l = &j->lanes[job->lane];
    job->where = JOB_QUEUED;
    if (at_head) {
        job->prev = NULL;
        job->next = l->head;
        if (l->head)
            l->head->prev = job;
        else
            l->tail = job;
        l->head = job;
    } else {
        job->next = NULL;
        job->prev = l->tail;
        if (l->tail)
            l->tail->next = job;
        else
            l->head = job;
        l->tail = job;
    }
    l->queued++;
    j->n_queued++;
    pthread_cond_signal(&j->work_cv);
}

static void unqueue(struct rtx_jobs *j, struct job *job) {
    struct lane *l = &j->lanes[job->lane];
    if (job->prev)
        job->prev->next = job->next;
    else
        l->head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        l->tail = job->prev;
    job->prev = job->next = NULL;
    l->queued--;
    j->n_queued--;
}

/* The head of the next non-empty lane after the last one served; NULL when none. */
static struct job *take_next(struct rtx_jobs *j) {
    for (int k = 0; k < j->n_lanes; k++) {
        int l = (j->rr + k) % j->n_lanes;
        struct job *job = j->lanes[l].head;
        if (job) {
            unqueue(j, job);
            j->rr = (l + 1) % j->n_lanes;
            return job;
        }
    }
    return NULL;
}

static void job_free(struct job *job) {
    if (!job) return;
    prepared_free(job->prep);
    rtx_free(job);
}

/* Sets the executor's flag of a running job (under mu). */
static void raise_cancel(struct job *job) {
    __atomic_store_n(&job->cancel, 1, __ATOMIC_SEQ_CST);
}

/* Interrupts every running job (under mu). Returns how many. */
static int interrupt_running(struct rtx_jobs *j) {
    int n = 0;
    for (int i = 0; i < j->n_workers; i++) {
        struct job *job = j->workers[i].current;
        if (job && !job->interrupted) {
            job->interrupted = true;
            raise_cancel(job);
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Watchers
 * ---------------------------------------------------------------------------------------- */

static size_t watch_bucket(const char *id) {
    return (size_t)(hash_id(id) % WATCH_BUCKETS);
}

static bool has_watchers(struct rtx_jobs *j, const char *id) {
    bool any = false;
    pthread_mutex_lock(&j->wmu);
    for (struct watch *w = j->watches[watch_bucket(id)]; w && !any; w = w->next)
        any = !w->removed && strcmp(w->job, id) == 0;
    pthread_mutex_unlock(&j->wmu);
    return any;
}

static void watch_unlink_free(struct rtx_jobs *j, struct watch *w) {
    for (struct watch **pp = &j->watches[w->handle % WATCH_BUCKETS]; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    rtx_free(w);
}

/* Delivers `info` to the watches of its job that have not yet seen a state of its rank (only
 * the watch `only` when it is not 0). A terminal state ends those watches. */
static void deliver(struct rtx_jobs *j, const struct rtx_job_info *info, uint64_t only) {
    int rank = state_rank(info->state);
    bool last = rank == 3;
    size_t b = watch_bucket(info->id);
    pthread_mutex_lock(&j->wmu);
    for (;;) {
        struct watch *w = j->watches[b];
        while (w && (w->removed || w->rank >= rank || strcmp(w->job, info->id) != 0 ||
                     (only && w->handle != only)))
            w = w->next;
        if (!w) break;
        if (w->in_cb) { /* another thread is delivering to it: keep the order */
            pthread_cond_wait(&j->wcv, &j->wmu);
            continue;
        }
        w->in_cb = true;
        w->cb_thread = pthread_self();
        w->rank = rank;
        pthread_mutex_unlock(&j->wmu);
        w->cb(w->ctx, info, last);
        pthread_mutex_lock(&j->wmu);
        w->in_cb = false;
        if (last || w->removed) watch_unlink_free(j, w);
        pthread_cond_broadcast(&j->wcv);
    }
    pthread_mutex_unlock(&j->wmu);
}

/* Publishes a job's journaled state to its watchers (journal first, then publish). */
static void publish(struct rtx_jobs *j, const char *id) {
    if (!has_watchers(j, id)) return;
    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    if (rtx_store_job_get(j->store, id, &info, &err) < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot read a job back for its watchers", "job", id, "error",
                err.msg, NULL);
        return;
    }
    deliver(j, &info, 0);
    rtx_job_info_clear(&info);
}

/* ------------------------------------------------------------------------------------------
 * State changes
 * ---------------------------------------------------------------------------------------- */

/* Journals a terminal state, counts it, logs it and publishes it. */
static int change_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state st,
                        const char *reason, struct rtx_err *err) {
    int rc = rtx_store_job_set_state(j->store, id, st, reason, now_ms(), err);
    if (rc < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", id, "state",
                rtx_job_state_name(st), "error", err->msg, NULL);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    if (st == RTX_JOB_FAILED) j->failed++;
    if (st == RTX_JOB_CANCELLED) j->cancelled++;
    if (st == RTX_JOB_EXPIRED) j->expired++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, id, lane, st, reason, 0);
    publish(j, id);
    return 0;
}

/* Journals CANCELLED for a job no worker or queue holds. A job that became terminal
 * meanwhile (a concurrent cancel) is left as it is. */
static int cancel_journaled(struct rtx_jobs *j, const char *id, int lane, struct rtx_err *err) {
    int rc =
        rtx_store_job_set_state(j->store, id, RTX_JOB_CANCELLED, REASON_CANCELLED, now_ms(), err);
    if (rc == RTX_EINVAL) {
        struct rtx_job_info info = {0};
        struct rtx_err gerr = {0};
        bool terminal = rtx_store_job_get(j->store, id, &info, &gerr) == 0 &&
                        rtx_job_state_is_terminal(info.state);
        rtx_job_info_clear(&info);
        if (terminal) return 0;
    }
    if (rc < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", id, "state", "cancelled",
                "error", err->msg, NULL);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    j->cancelled++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, id, lane, RTX_JOB_CANCELLED, REASON_CANCELLED, 0);
    publish(j, id);
    return 0;
}

/* Fails a job with a reason; a journal error is logged (the job then stays as the journal
 * has it, for recovery). */
static void fail_job(struct rtx_jobs *j, struct job *job, const char *reason) {
    struct rtx_err err = {0};
    change_state(j, job->id, job->lane, RTX_JOB_FAILED, reason, &err);
}

/* ------------------------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------------------------- */

/* Journals the outputs of a run (or fails the job when that is impossible). */
static void succeed_job(struct rtx_jobs *j, struct job *job, struct rtx_tensor **outs,
                        const struct rtx_exec_stats *st) {
    const struct rtx_graph *g = job->prep->graph;
    int n = g->n_outputs;
    const char **names = rtx_calloc((size_t)n + 1, sizeof *names);
    struct rtx_err err = {0};
    if (!names) {
        fail_job(j, job, "out of memory storing the outputs");
        return;
    }
    for (int i = 0; i < n; i++)
        names[i] = g->values[g->outputs[i]].name;
    int rc =
        rtx_store_job_succeed(j->store, job->id, now_ms(), st->wall_ms, (int64_t)st->peak_bytes, n,
                              names, (const struct rtx_tensor *const *)outs, &err);
    rtx_free(names);
    if (rc < 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "cannot store the outputs: %s", err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job's outputs", "job", job->id, "error", err.msg,
                NULL);
        fail_job(j, job, reason);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->succeeded++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, job->id, job->lane, RTX_JOB_SUCCEEDED, "", st->wall_ms);
    publish(j, job->id);
}

/* What a raised cancel flag means for this job: cancelled by request (journal it) or
 * interrupted (leave the journal as it is: running, or queued when it had not started). */
static void stop_job(struct rtx_jobs *j, struct job *job, bool started) {
    pthread_mutex_lock(&j->mu);
    bool requested = job->cancel_requested;
    pthread_mutex_unlock(&j->mu);
    if (requested) {
        struct rtx_err err = {0};
        change_state(j, job->id, job->lane, RTX_JOB_CANCELLED, REASON_CANCELLED, &err);
        return;
    }
    rtx_log(RTX_LOG_WARN, "job interrupted", "job", job->id, "lane", j->lanes[job->lane].name,
            "state", started ? "running" : "queued", NULL);
}

static void run_job(struct worker *w, struct job *job) {
    struct rtx_jobs *j = w->j;
    struct rtx_err err = {0};
    if (job->deadline_ms > 0 && now_ms() >= job->deadline_ms) {
        change_state(j, job->id, job->lane, RTX_JOB_EXPIRED, REASON_EXPIRED, &err);
        return;
    }
    if (__atomic_load_n(&job->cancel, __ATOMIC_SEQ_CST)) {
        stop_job(j, job, false);
        return;
    }
    int rc = rtx_store_job_set_state(j->store, job->id, RTX_JOB_RUNNING, "", now_ms(), &err);
    if (rc < 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "cannot journal the job as running: %s", err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", job->id, "state", "running",
                "error", err.msg, NULL);
        fail_job(j, job, reason);
        return;
    }
    log_state(j, job->id, job->lane, RTX_JOB_RUNNING, "", 0);
    publish(j, job->id);

    if (!job->prep && (rc = load_prepared(j, job->id, &job->prep, &err)) < 0) {
        fail_job(j, job, err.msg);
        return;
    }
    struct prepared *p = job->prep;
    int n_out = p->graph->n_outputs;
    struct rtx_tensor **outs = rtx_calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) {
        fail_job(j, job, "out of memory running the job");
        return;
    }
    struct rtx_exec_stats st = {0};
    rc = rtx_plan_execute(p->plan, w->be, p->inputs, p->n_inputs, outs, n_out, &job->cancel, &st,
                          &err);
    if (rc == 0)
        succeed_job(j, job, outs, &st);
    else if (rc == RTX_ECANCELED)
        stop_job(j, job, true);
    else
        fail_job(j, job, err.msg);
    for (int i = 0; i < n_out; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct rtx_jobs *j = w->j;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stopping && (j->draining || j->n_queued == 0))
            pthread_cond_wait(&j->work_cv, &j->mu);
        if (j->stopping) break;
        struct job *job = take_next(j);
        job->where = JOB_RUNNING;
        j->lanes[job->lane].running++;
        j->n_running++;
        w->current = job;
        pthread_mutex_unlock(&j->mu);

        run_job(w, job);

        pthread_mutex_lock(&j->mu);
        w->current = NULL;
        j->lanes[job->lane].running--;
        j->n_running--;
        j->cache_bytes -= job->cached_bytes;
        index_remove(j, job);
        pthread_cond_broadcast(&j->idle_cv);
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Start, recovery, stop
 * ---------------------------------------------------------------------------------------- */

static int check_options(const struct rtx_jobs_options *o, struct rtx_err *err) {
    if (!o->store) return rtx_err_set(err, RTX_EINVAL, "jobs: no store");
    if (o->workers < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: workers must be >= 1");
    if (o->cpu_threads < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: cpu_threads must be >= 1");
    if (o->max_queued < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: max_queued must be >= 1");
    if (o->default_restart_policy != RTX_RESTART_RERUN &&
        o->default_restart_policy != RTX_RESTART_FAIL)
        return rtx_err_set(err, RTX_EINVAL, "jobs: invalid default restart policy %d",
                           (int)o->default_restart_policy);
    if (o->n_lanes < 1 || o->n_lanes > MAX_LANES || !o->lanes)
        return rtx_err_set(err, RTX_EINVAL, "jobs: between 1 and %d lanes are needed, got %d",
                           MAX_LANES, o->n_lanes);
    for (int i = 0; i < o->n_lanes; i++) {
        if (!o->lanes[i] || !o->lanes[i][0])
            return rtx_err_set(err, RTX_EINVAL, "jobs: lane %d has no name", i);
        for (int k = 0; k < i; k++)
            if (strcmp(o->lanes[k], o->lanes[i]) == 0)
                return rtx_err_set(err, RTX_EINVAL, "jobs: lane '%s' is listed twice",
                                   o->lanes[i]);
    }
    bool found = false;
    for (int i = 0; i < o->n_lanes && o->default_lane; i++)
        found = found || strcmp(o->lanes[i], o->default_lane) == 0;
    if (!found)
        return rtx_err_set(err, RTX_EINVAL, "jobs: the default lane '%s' is not a lane",
                           o->default_lane ? o->default_lane : "");
    return 0;
}

static int find_lane(const struct rtx_jobs *j, const char *name) {
    for (int i = 0; i < j->n_lanes; i++)
        if (strcmp(j->lanes[i].name, name) == 0) return i;
    return -1;
}

/* Re-queues unfinished jobs from the journal: queued ones as they are, running ones by their
 * restart policy. Runs before the workers exist. */
static int recover(struct rtx_jobs *j, struct rtx_err *err) {
    struct rtx_job_info *jobs = NULL;
    int n = 0, n_queued = 0, n_rerun = 0, n_failed = 0;
    int rc = rtx_store_job_unfinished(j->store, &jobs, &n, err);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    for (int i = 0; i < n && rc == 0; i++) {
        struct rtx_job_info *info = &jobs[i];
        int lane = find_lane(j, info->lane ? info->lane : "");
        if (lane < 0) {
            rtx_log(RTX_LOG_WARN, "recovered job's lane is gone; using the default lane", "job",
                    info->id, "lane", info->lane ? info->lane : "", NULL);
            lane = j->default_lane;
        }
        if (info->state == RTX_JOB_RUNNING) {
            enum rtx_restart_policy pol = info->restart_policy;
            if (pol != RTX_RESTART_RERUN && pol != RTX_RESTART_FAIL) pol = j->default_policy;
            if (pol == RTX_RESTART_FAIL) {
                rc = rtx_store_job_set_state(j->store, info->id, RTX_JOB_FAILED, REASON_RESTART,
                                             now_ms(), err);
                if (rc == 0) {
                    j->failed++;
                    n_failed++;
                    log_state(j, info->id, lane, RTX_JOB_FAILED, REASON_RESTART, 0);
                }
                continue;
            }
            rc = rtx_store_job_set_state(j->store, info->id, RTX_JOB_QUEUED, "", now_ms(), err);
            if (rc < 0) break;
            n_rerun++;
        } else {
            n_queued++;
        }
        struct job *job = rtx_calloc(1, sizeof *job);
        if (!job) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory recovering jobs");
            break;
        }
        memcpy(job->id, info->id, sizeof job->id);
        job->id[RTX_JOB_ID_LEN - 1] = '\0';
        job->lane = lane;
        job->deadline_ms = info->deadline_ms;
        index_add(j, job);
        enqueue(j, job, false);
    }
    rtx_job_info_free_array(jobs, n);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    if (n > 0) {
        char q[24], r[24], f[24];
        snprintf(q, sizeof q, "%d", n_queued);
        snprintf(r, sizeof r, "%d", n_rerun);
        snprintf(f, sizeof f, "%d", n_failed);
        rtx_log(RTX_LOG_INFO, "recovered unfinished jobs", "queued", q, "rerun", r, "failed", f,
                NULL);
    }
    return 0;
}

/* Frees what start built; the workers must have been joined. */
static void destroy(struct rtx_jobs *j) {
    for (int l = 0; l < j->n_lanes; l++) {
        for (struct job *job = j->lanes[l].head, *nx; job; job = nx) {
            nx = job->next;
            job_free(job);
        }
        rtx_free(j->lanes[l].name);
    }
    for (size_t b = 0; b < WATCH_BUCKETS; b++) {
        for (struct watch *w = j->watches[b], *nx; w; w = nx) {
            nx = w->next;
            rtx_free(w);
        }
    }
    for (int i = 0; i < j->n_workers; i++)
        rtx_backend_free(j->workers[i].be);
    rtx_free(j->workers);
    rtx_free(j->index);
    pthread_cond_destroy(&j->work_cv);
    pthread_cond_destroy(&j->idle_cv);
    pthread_cond_destroy(&j->wcv);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->wmu);
    rtx_free(j);
}

/* Stops and joins the started workers (interrupting their jobs). */
static void join_workers(struct rtx_jobs *j) {
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    j->draining = true;
    interrupt_running(j);
    pthread_cond_broadcast(&j->work_cv);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].started) pthread_join(j->workers[i].thread, NULL);
}

static int init_sync(struct rtx_jobs *j) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->wmu, NULL);
    pthread_cond_init(&j->work_cv, NULL);
    pthread_cond_init(&j->idle_cv, &ca);
    pthread_cond_init(&j->wcv, NULL);
    pthread_condattr_destroy(&ca);
    return 0;
}

int rtx_jobs_start(const struct rtx_jobs_options *opt, struct rtx_jobs **out,
                   struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!opt || !out) return rtx_err_set(err, RTX_EINVAL, "jobs: invalid argument");
    *out = NULL;
    int rc = check_options(opt, err);
    if (rc < 0) return rc;
    struct rtx_jobs *j = rtx_calloc(1, sizeof *j);
    if (!j) return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    if (init_sync(j) < 0) {
        rtx_free(j);
        return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    }
    j->store = opt->store;
    struct rtx_limits dl = rtx_limits_default(), lim = opt->limits;
    if (lim.max_nodes <= 0) lim.max_nodes = dl.max_nodes;
    if (lim.max_values <= 0) lim.max_values = dl.max_values;
    if (lim.max_dims <= 0) lim.max_dims = dl.max_dims;
    if (lim.max_elements <= 0) lim.max_elements = dl.max_elements;
    if (lim.max_tensor_bytes <= 0) lim.max_tensor_bytes = dl.max_tensor_bytes;
    if (lim.max_total_bytes <= 0) lim.max_total_bytes = dl.max_total_bytes;
    j->limits = lim;
    j->max_queued = opt->max_queued;
    j->cpu_threads = opt->cpu_threads;
    j->default_policy = opt->default_restart_policy;
    j->n_lanes = opt->n_lanes;
    j->index_cap = INDEX_MIN_BUCKETS;
    j->index = rtx_calloc(j->index_cap, sizeof *j->index);
    j->workers = rtx_calloc((size_t)opt->workers, sizeof *j->workers);
    if (!j->index || !j->workers) goto oom;
    for (int i = 0; i < opt->n_lanes; i++) {
        if (!(j->lanes[i].name = rtx_strdup(opt->lanes[i]))) goto oom;
        if (strcmp(opt->lanes[i], opt->default_lane) == 0) j->default_lane = i;
    }
    j->n_workers = opt->workers;
    for (int i = 0; i < j->n_workers; i++) {
        j->workers[i].j = j;
        struct rtx_cpu_options co = {.n_threads = opt->cpu_threads};
        if ((rc = rtx_backend_cpu_new(&co, &j->workers[i].be, err)) < 0) {
            rtx_err_prefix(err, "jobs: worker %d backend", i);
            goto fail;
        }
    }
    if ((rc = recover(j, err)) < 0) goto fail;
    for (int i = 0; i < j->n_workers; i++) {
        if (pthread_create(&j->workers[i].thread, NULL, worker_main, &j->workers[i]) != 0) {
            rc = rtx_err_set(err, RTX_ENOMEM, "jobs: cannot start worker thread %d", i);
            join_workers(j);
            goto fail;
        }
        j->workers[i].started = true;
    }
    char nw[16], nt[16];
    snprintf(nw, sizeof nw, "%d", j->n_workers);
    snprintf(nt, sizeof nt, "%d", j->cpu_threads);
    rtx_log(RTX_LOG_INFO, "job workers started", "workers", nw, "cpu_threads", nt, NULL);
    *out = j;
    return 0;
oom:
    rc = rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
fail:
    destroy(j);
    return rc;
}

void rtx_jobs_stop(struct rtx_jobs *j) {
    if (!j) return;
    join_workers(j);
    char q[24];
    snprintf(q, sizeof q, "%d", j->n_queued);
    rtx_log(RTX_LOG_INFO, "job workers stopped", "queued", q, NULL);
    destroy(j);
}

/* ------------------------------------------------------------------------------------------
 * Submit
 * ---------------------------------------------------------------------------------------- */

/* Whether a new job may be admitted (under mu). */
static int admission_open(struct rtx_jobs *j, struct rtx_err *err) {
    if (j->draining) return rtx_err_set(err, RTX_EUNAVAILABLE, "draining: not accepting jobs");
    if ((int64_t)j->n_queued + j->n_pending >= j->max_queued)
        return rtx_err_set(err, RTX_EUNAVAILABLE, "queue full: %d jobs queued (limit %" PRId64 ")",
                           j->n_queued + j->n_pending, j->max_queued);
    return 0;
}

/* Checks the request's fields other than graph and inputs. */
static int check_fields(struct rtx_jobs *j, const Rtx__V1__SubmitRequest *m, int64_t now,
                        int *lane, enum rtx_restart_policy *policy, struct rtx_err *err) {
    if (m->lane[0] == '\0') {
        *lane = j->default_lane;
    } else if ((*lane = find_lane(j, m->lane)) < 0) {
        char known[200] = "";
        for (int i = 0; i < j->n_lanes; i++)
            list_append(known, sizeof known, j->lanes[i].name);
        return rtx_err_set(err, RTX_EINVAL, "unknown lane '%s' (lanes: %s)", m->lane, known);
    }
    switch (m->restart_policy) {
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_UNSPECIFIED:
        pthread_mutex_lock(&j->mu);
        *policy = j->default_policy;
        pthread_mutex_unlock(&j->mu);
        break;
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_RERUN: *policy = RTX_RESTART_RERUN; break;
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_FAIL: *policy = RTX_RESTART_FAIL; break;
    default:
        return rtx_err_set(err, RTX_EINVAL, "unknown restart policy %d", (int)m->restart_policy);
    }
    if (m->deadline_unix_ms < 0)
        return rtx_err_set(err, RTX_EINVAL, "deadline_unix_ms is negative (%" PRId64 ")",
                           m->deadline_unix_ms);
    if (m->deadline_unix_ms > 0 && m->deadline_unix_ms <= now)
        return rtx_err_set(err, RTX_EINVAL, "deadline already passed (%" PRId64 " ms ago)",
                           now - m->deadline_unix_ms);
    for (size_t i = 0; i < m->n_labels; i++) {
        if (m->labels[i]->key[0] == '\0')
            return rtx_err_set(err, RTX_EINVAL, "label %zu has an empty key", i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->labels[k]->key, m->labels[i]->key) == 0)
                return rtx_err_set(err, RTX_EINVAL, "label '%s' is given more than once",
                                   m->labels[i]->key);
    }
    return 0;
}

/* Journals a validated job (pending in the index). Returns 0 with existing_id set to the
 * first job's id on an idempotent repeat. */
static int journal_new(struct rtx_jobs *j, const struct job *job, const Rtx__V1__SubmitRequest *m,
                       const struct prepared *p, enum rtx_restart_policy policy, int64_t now,
                       const void *request, size_t len, char existing_id[RTX_JOB_ID_LEN],
                       struct rtx_err *err) {
    struct rtx_job_label *labels = rtx_calloc(m->n_labels + 1, sizeof *labels);
    if (!labels) return rtx_err_set(err, RTX_ENOMEM, "out of memory journaling the job");
    for (size_t i = 0; i < m->n_labels; i++) {
        labels[i].key = m->labels[i]->key;
        labels[i].value = m->labels[i]->value;
    }
    struct rtx_job_info info = {
        .state = RTX_JOB_QUEUED,
        .reason = (char *)"",
        .lane = j->lanes[job->lane].name,
        .graph_name = p->graph->name ? p->graph->name : (char *)"",
        .idempotency_key = m->idempotency_key,
        .restart_policy = policy,
        .n_labels = (int)m->n_labels,
        .labels = labels,
        .created_ms = now,
        .deadline_ms = m->deadline_unix_ms,
    };
    memcpy(info.id, job->id, sizeof info.id);
    int rc = rtx_store_job_insert(j->store, &info, request, len, existing_id, err);
    rtx_free(labels);
    return rc;
}

int rtx_jobs_submit(struct rtx_jobs *j, const void *request, size_t len,
                    char job_id[RTX_JOB_ID_LEN], bool *deduplicated, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || (!request && len > 0) || !job_id)
        return rtx_err_set(err, RTX_EINVAL, "submit: invalid argument");
    job_id[0] = '\0';
    if (deduplicated) *deduplicated = false;

    pthread_mutex_lock(&j->mu);
    int rc = admission_open(j, err); /* refuse early, before any decoding */
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) return rc;

    int64_t now = now_ms();
    Rtx__V1__SubmitRequest *m = NULL;
    struct prepared *p = NULL;
    struct job *job = NULL;
    int lane = 0;
    enum rtx_restart_policy policy = RTX_RESTART_RERUN;
    if ((rc = unpack_request(request, len, &m, err)) < 0) return rc;
    if ((rc = check_fields(j, m, now, &lane, &policy, err)) < 0) goto out;
    if ((rc = prepare(m, &j->limits, &p, err)) < 0) goto out;
    if (!(job = rtx_calloc(1, sizeof *job))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory queueing the job");
        goto out;
    }
    rtx_store_new_job_id(job->id);
    job->lane = lane;
    job->deadline_ms = m->deadline_unix_ms;
    job->where = JOB_PENDING;

    pthread_mutex_lock(&j->mu);
    if ((rc = admission_open(j, err)) == 0) {
        index_add(j, job);
        j->n_pending++;
    }
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) goto out;

    char existing[RTX_JOB_ID_LEN] = "";
    rc = journal_new(j, job, m, p, policy, now, request, len, existing, err);
    bool dup = rc == 0 && existing[0] != '\0';
    bool cancel = false;
    /* the id is copied before the job is queued: from then on a worker may run and free it */
    if (rc == 0 && !dup) memcpy(job_id, job->id, RTX_JOB_ID_LEN);
    pthread_mutex_lock(&j->mu);
    j->n_pending--;
    if (rc < 0 || dup) {
        index_remove(j, job);
    } else if (job->cancel_requested) {
        index_remove(j, job);
        cancel = true;
    } else {
        if (j->cache_bytes + len <= CACHE_MAX_BYTES) { /* keep the decoded job for the worker */
            job->prep = p;
            job->cached_bytes = len;
            j->cache_bytes += len;
            p = NULL;
        }
        enqueue(j, job, false);
    }
    pthread_mutex_unlock(&j->mu);
    if (rtx__jobs_after_enqueue_hook && rc == 0 && !dup && !cancel) rtx__jobs_after_enqueue_hook();
    if (rc < 0) goto out;
    if (dup) {
        memcpy(job_id, existing, RTX_JOB_ID_LEN);
        job_id[RTX_JOB_ID_LEN - 1] = '\0';
        if (deduplicated) *deduplicated = true;
        goto out;
    }
    log_state(j, job_id, lane, RTX_JOB_QUEUED, "", 0);
    if (cancel) {
        struct rtx_err cerr = {0};
        cancel_journaled(j, job_id, lane, &cerr);
    } else {
        job = NULL; /* owned by the queue now */
    }
out:
    job_free(job);
    prepared_free(p);
    free_request(m);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Cancel, watch
 * ---------------------------------------------------------------------------------------- */

int rtx_jobs_cancel(struct rtx_jobs *j, const char *id, struct rtx_job_info *out,
                    struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || !id) return rtx_err_set(err, RTX_EINVAL, "cancel: invalid argument");
    if (out) memset(out, 0, sizeof *out);
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    struct job *job = strlen(id) < RTX_JOB_ID_LEN ? index_find(j, id) : NULL;
    struct job *taken = NULL;
    if (job && job->where == JOB_QUEUED) {
        unqueue(j, job);
        job->where = JOB_CANCELLING;
        taken = job;
    } else if (job) { /* pending: its submitter cancels it; running: its worker does */
        job->cancel_requested = true;
        if (job->where == JOB_RUNNING) raise_cancel(job);
    }
    pthread_mutex_unlock(&j->mu);

    if (taken) {
        rc = cancel_journaled(j, taken->id, taken->lane, err);
        pthread_mutex_lock(&j->mu);
        if (rc < 0) { /* still queued in the journal: queued here too, at the lane's head */
            enqueue(j, taken, true);
        } else {
            index_remove(j, taken);
            j->cache_bytes -= taken->cached_bytes;
        }
        pthread_mutex_unlock(&j->mu);
        if (rc < 0) return rc;
        job_free(taken);
    } else if (!job) {
        /* Not in memory: terminal, unknown, or left running by an interrupted drain. */
        struct rtx_job_info info = {0};
        if ((rc = rtx_store_job_get(j->store, id, &info, err)) < 0) return rc;
        bool live = !rtx_job_state_is_terminal(info.state);
        int lane = find_lane(j, info.lane ? info.lane : "");
        rtx_job_info_clear(&info);
        if (live && (rc = cancel_journaled(j, id, lane < 0 ? j->default_lane : lane, err)) < 0)
            return rc;
    }
    if (out && (rc = rtx_store_job_get(j->store, id, out, err)) < 0) return rc;
    return 0;
}

int rtx_jobs_watch(struct rtx_jobs *j, const char *id, rtx_jobs_watch_cb cb, void *ctx,
                   uint64_t *watch, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || !id || !cb || !watch) return rtx_err_set(err, RTX_EINVAL, "watch: invalid argument");
    *watch = 0;
    if (strlen(id) >= RTX_JOB_ID_LEN) return rtx_err_set(err, RTX_ENOTFOUND, "no job '%.40s'", id);
    struct watch *w = rtx_calloc(1, sizeof *w);
    if (!w) return rtx_err_set(err, RTX_ENOMEM, "watch: out of memory");
    snprintf(w->job, sizeof w->job, "%s", id);
    w->cb = cb;
    w->ctx = ctx;
    size_t b = watch_bucket(id);
    pthread_mutex_lock(&j->wmu);
    w->handle = (++j->watch_seq) * WATCH_BUCKETS + b;
    w->next = j->watches[b];
    j->watches[b] = w;
    uint64_t handle = w->handle;
    pthread_mutex_unlock(&j->wmu);

    /* Registered first, read second: a change journaled after this read is published to
     * the watch, and one before it is in the snapshot. */
    struct rtx_job_info info = {0};
    int rc = rtx_store_job_get(j->store, id, &info, err);
    if (rc < 0) {
        rtx_jobs_unwatch(j, handle);
        return rc;
    }
    *watch = handle;
    deliver(j, &info, handle);
    rtx_job_info_clear(&info);
    return 0;
}

void rtx_jobs_unwatch(struct rtx_jobs *j, uint64_t watch) {
    if (!j || !watch) return;
    pthread_mutex_lock(&j->wmu);
    for (;;) {
        struct watch *w = j->watches[watch % WATCH_BUCKETS];
        while (w && w->handle != watch)
            w = w->next;
        if (!w) break;
        if (!w->in_cb) {
            watch_unlink_free(j, w);
            break;
        }
        w->removed = true; /* no new deliveries; its deliverer frees it after the callback */
        if (pthread_equal(w->cb_thread, pthread_self())) break; /* unwatch from the callback */
        pthread_cond_wait(&j->wcv, &j->wmu);
    }
    pthread_mutex_unlock(&j->wmu);
}

/* ------------------------------------------------------------------------------------------
 * Drain, settings, stats
 * ---------------------------------------------------------------------------------------- */

void rtx_jobs_drain(struct rtx_jobs *j, int *running, int *queued) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->draining = true;
    int r = j->n_running, q = j->n_queued + j->n_pending;
    pthread_mutex_unlock(&j->mu);
    if (running) *running = r;
    if (queued) *queued = q;
    char rs[24], qs[24];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(qs, sizeof qs, "%d", q);
    rtx_log(RTX_LOG_INFO, "draining jobs", "running", rs, "queued", qs, NULL);
}

/* Whether a worker still runs a job that was interrupted (under mu). */
static bool interrupted_running(struct rtx_jobs *j) {
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].current && j->workers[i].current->interrupted) return true;
    return false;
}

void rtx_jobs_wait_idle(struct rtx_jobs *j, int grace_ms) {
    if (!j) return;
    int64_t end = mono_ms() + (grace_ms > 0 ? grace_ms : 0);
    pthread_mutex_lock(&j->mu);
    while (j->n_running > 0) {
        int64_t left = end - mono_ms();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&j->idle_cv, &j->mu, &ts);
    }
    int n = j->n_running > 0 ? interrupt_running(j) : 0;
    if (n > 0) {
        char ns[24];
        snprintf(ns, sizeof ns, "%d", n);
        rtx_log(RTX_LOG_WARN, "drain grace over: interrupting running jobs", "jobs", ns, NULL);
    }
    while (interrupted_running(j))
        pthread_cond_wait(&j->idle_cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

void rtx_jobs_set_restart_policy(struct rtx_jobs *j, enum rtx_restart_policy p) {
    if (!j || (p != RTX_RESTART_RERUN && p != RTX_RESTART_FAIL)) return;
    pthread_mutex_lock(&j->mu);
    j->default_policy = p;
    pthread_mutex_unlock(&j->mu);
}

void rtx_jobs_get_stats(struct rtx_jobs *j, struct rtx_jobs_stats *st) {
    if (!j || !st) return;
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&j->mu);
    st->n_lanes = j->n_lanes;
    for (int i = 0; i < j->n_lanes; i++) {
        st->lanes[i].lane = j->lanes[i].name;
        st->lanes[i].queued = j->lanes[i].queued;
        st->lanes[i].running = j->lanes[i].running;
    }
    st->succeeded = j->succeeded;
    st->failed = j->failed;
    st->cancelled = j->cancelled;
    st->expired = j->expired;
    st->draining = j->draining;
    st->workers = j->n_workers;
    st->cpu_threads = j->cpu_threads;
    pthread_mutex_unlock(&j->mu);
}
