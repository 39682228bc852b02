/*
 * handlers-jobs.c - the rtx.v1.Jobs methods: decode the request with protobuf-c, call the job
 * manager (daemon/jobs.h) or the store (store/store.h), encode the reply. server.c calls these
 * through its method table and owns everything gRPC.
 *
 * DESIGN
 * Replies are built as protobuf-c structs whose strings and arrays point into the store's
 * rtx_job_info rows (nothing is copied); the few arrays of sub-messages a reply needs come
 * from a scratch list freed once the reply is packed. A request that does not unpack is
 * INVALID_ARGUMENT "malformed rtx.v1.<Request>", checked before anything else is touched.
 * Jobs.Wait registers a job watch whose callback (on the job manager's threads) only
 * serializes the job and queues it on the stream; rtx_jobs_unwatch is the stream's stop.
 * Job.exec_mode and Job.plan_reused are not in the journal: they come from the job manager's
 * record of the runs this process made (rtx_jobs_get_run; the watch callback gets it along).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/server.h"
#include "rtx/v1/jobs.pb-c.h"

#define LIST_PAGE_DEFAULT 100
#define LIST_PAGE_MAX 1000

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

/* Allocations that live until a reply is packed. */
struct scratch {
    void **ptrs;
    size_t n, cap;
};

/* n zeroed elements; NULL (and nothing recorded) for n == 0. Sets *failed on failure. */
static void *scratch_alloc(struct scratch *sc, size_t n, size_t size, bool *failed) {
    if (n == 0) return NULL;
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 16;
        void **p = rtx_realloc(sc->ptrs, cap * sizeof *p);
        if (!p) {
            *failed = true;
            return NULL;
        }
        sc->ptrs = p;
        sc->cap = cap;
    }
    void *mem = rtx_calloc(n, size);
    if (!mem) {
        *failed = true;
        return NULL;
    }
    sc->ptrs[sc->n++] = mem;
    return mem;
}

static void scratch_free(struct scratch *sc) {
    for (size_t i = 0; i < sc->n; i++)
        rtx_free(sc->ptrs[i]);
    rtx_free(sc->ptrs);
    *sc = (struct scratch){0};
}

static char *str(const char *s) {
    return (char *)(s ? s : "");
}

/* Fills m from a journal row and the job's run in this process (NULL when unknown); m
 * points into j and sc. Returns false on allocation failure. */
static bool job_to_msg(struct scratch *sc, const struct rtx_job_info *j,
                       const struct rtx_jobs_run *run, Rtx__V1__Job *m) {
    bool failed = false;
    rtx__v1__job__init(m);
    m->id = (char *)j->id;
    m->state = (Rtx__V1__JobState)j->state;
    m->reason = str(j->reason);
    m->lane = str(j->lane);
    m->graph_name = str(j->graph_name);
    m->idempotency_key = str(j->idempotency_key);
    m->restart_policy = (Rtx__V1__RestartPolicy)j->restart_policy;
    m->created_unix_ms = j->created_ms;
    m->started_unix_ms = j->started_ms;
    m->finished_unix_ms = j->finished_ms;
    m->deadline_unix_ms = j->deadline_ms;
    m->attempts = j->attempts;
    m->run_ms = j->run_ms;
    m->peak_bytes = j->peak_bytes;
    m->outputs_available = j->outputs_available;
    m->device = str(j->device);
    m->requested_device = str(j->requested_device);
    m->failure_code = str(j->failure_code);
    if (run) {
        m->exec_mode = (char *)rtx_exec_mode_name(run->mode);
        m->plan_reused = run->plan_reused;
    }

    size_t nl = j->n_labels > 0 ? (size_t)j->n_labels : 0;
    Rtx__V1__Label **lp = scratch_alloc(sc, nl, sizeof *lp, &failed);
    Rtx__V1__Label *ls = scratch_alloc(sc, nl, sizeof *ls, &failed);
    if (failed) return false;
    for (size_t i = 0; i < nl; i++) {
        rtx__v1__label__init(&ls[i]);
        ls[i].key = str(j->labels[i].key);
        ls[i].value = str(j->labels[i].value);
        lp[i] = &ls[i];
    }
    m->n_labels = nl;
    m->labels = lp;

    size_t no = j->n_outputs > 0 ? (size_t)j->n_outputs : 0;
    Rtx__V1__OutputInfo **op = scratch_alloc(sc, no, sizeof *op, &failed);
    Rtx__V1__OutputInfo *os = scratch_alloc(sc, no, sizeof *os, &failed);
    if (failed) return false;
    for (size_t i = 0; i < no; i++) {
        const struct rtx_job_output *o = &j->outputs[i];
        rtx__v1__output_info__init(&os[i]);
        os[i].name = str(o->name);
        os[i].dtype = (Rtx__V1__DataType)rtx_dtype_to_wire(o->dtype);
        os[i].n_dims = o->ndim > 0 ? (size_t)o->ndim : 0;
        os[i].dims = (int64_t *)o->dims;
        os[i].bytes = o->bytes;
        os[i].sha256 = (char *)o->sha256;
        op[i] = &os[i];
    }
    m->n_outputs = no;
    m->outputs = op;
    return true;
}

/* The run of a journaled job in this process: *run filled and true when the job manager has
 * one. */
static bool run_of(struct rtx_daemon *d, const struct rtx_job_info *job,
                   struct rtx_jobs_run *run) {
    return d->jobs && job->state == RTX_JOB_SUCCEEDED &&
           rtx_jobs_get_run(d->jobs, job->id, run) == 0;
}

/* Packs one job as the reply. */
static void reply_job(struct rtx_daemon *d, const struct rtx_job_info *job,
                      struct rtx_server_reply *rep) {
    struct scratch sc = {0};
    Rtx__V1__Job m;
    struct rtx_jobs_run run;
    if (job_to_msg(&sc, job, run_of(d, job, &run) ? &run : NULL, &m))
        rtx_server_reply_pack(rep, &m.base, rtx__daemon_max_reply_bytes(d));
    else
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory encoding job %s",
                                job->id);
    scratch_free(&sc);
}

/* A job id from a request: required. */
static bool check_job_id(const char *id, struct rtx_server_reply *rep) {
    if (!id || !id[0]) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "job_id is required");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------
 * Submit, Get, Cancel
 * ---------------------------------------------------------------------------------------- */

void rtx__daemon_jobs_submit(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    if (atomic_load(&d->draining)) {
        rtx_server_reply_status(rep, GRPC_STATUS_UNAVAILABLE, "draining");
        return;
    }
    char id[RTX_JOB_ID_LEN] = "";
    bool dedup = false;
    struct rtx_err err = {0};
    int rc = rtx_jobs_submit(d->jobs, req, len, id, &dedup, &err);
    if (rc == RTX_EFORMAT) {
        /* one wording for every undecodable request: "malformed rtx.v1.SubmitRequest ..." */
        static const char full[] = "malformed rtx.v1.SubmitRequest",
                          bare[] = "malformed SubmitRequest";
        if (strncmp(err.msg, full, sizeof full - 1) == 0)
            rtx_server_reply_err(rep, &err);
        else if (strncmp(err.msg, bare, sizeof bare - 1) == 0)
            rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "%s%s", full,
                                    err.msg + sizeof bare - 1);
        else
            rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "%s: %s", full, err.msg);
        return;
    }
    if (rc != 0) {
        rtx_server_reply_err(rep, &err);
        return;
    }
    Rtx__V1__SubmitResponse m = RTX__V1__SUBMIT_RESPONSE__INIT;
    m.job_id = id;
    m.deduplicated = dedup;
    rtx_server_reply_pack(rep, &m.base, 0);
}

void rtx__daemon_jobs_get(struct rtx_daemon *d, const uint8_t *req, size_t len,
                          struct rtx_server_reply *rep) {
    Rtx__V1__GetJobRequest *r = rtx__v1__get_job_request__unpack(NULL, len, req);
    if (!r) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "malformed rtx.v1.GetJobRequest");
        return;
    }
    if (check_job_id(r->job_id, rep)) {
        struct rtx_job_info job = {0};
        struct rtx_err err = {0};
        if (rtx_store_job_get(d->store, r->job_id, &job, &err) != 0)
            rtx_server_reply_err(rep, &err);
        else
            reply_job(d, &job, rep);
        rtx_job_info_clear(&job);
    }
    rtx__v1__get_job_request__free_unpacked(r, NULL);
}

void rtx__daemon_jobs_cancel(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    Rtx__V1__CancelJobRequest *r = rtx__v1__cancel_job_request__unpack(NULL, len, req);
    if (!r) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "malformed rtx.v1.CancelJobRequest");
        return;
    }
    if (check_job_id(r->job_id, rep)) {
        struct rtx_job_info job = {0};
        struct rtx_err err = {0};
        if (rtx_jobs_cancel(d->jobs, r->job_id, &job, &err) != 0)
            rtx_server_reply_err(rep, &err);
        else
            reply_job(d, &job, rep);
        rtx_job_info_clear(&job);
    }
    rtx__v1__cancel_job_request__free_unpacked(r, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Wait
 * ---------------------------------------------------------------------------------------- */

/* Watch callback (job manager threads): serialize and queue; never blocks. */
static void wait_on_job(void *ctx, const struct rtx_job_info *job, const struct rtx_jobs_run *run,
                        bool last) {
    struct rtx_server_stream *st = ctx;
    struct scratch sc = {0};
    Rtx__V1__Job m;
    void *data = NULL;
    size_t len = 0;
    if (job_to_msg(&sc, job, run, &m)) {
        len = rtx__v1__job__get_packed_size(&m);
        data = rtx_malloc(len ? len : 1);
        if (data) rtx__v1__job__pack(&m, data);
    }
    scratch_free(&sc);
    if (data)
        rtx_server_stream_send(st, data, len, last);
    else
        rtx_server_stream_end(st, GRPC_STATUS_INTERNAL, "out of memory encoding a job update",
                              last);
}

static void wait_stop(void *ctx, uint64_t watch) {
    rtx_jobs_unwatch(ctx, watch);
}

void rtx__daemon_jobs_wait(struct rtx_daemon *d, const uint8_t *req, size_t len,
                           struct rtx_server_stream *st, struct rtx_server_reply *rep) {
    Rtx__V1__WaitJobRequest *r = rtx__v1__wait_job_request__unpack(NULL, len, req);
    if (!r) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "malformed rtx.v1.WaitJobRequest");
        return;
    }
    if (check_job_id(r->job_id, rep)) {
        uint64_t watch = 0;
        struct rtx_err err = {0};
        if (rtx_jobs_watch(d->jobs, r->job_id, wait_on_job, st, &watch, &err) != 0)
            rtx_server_reply_err(rep, &err);
        else
            rtx_server_stream_set_stop(st, wait_stop, d->jobs, watch);
    }
    rtx__v1__wait_job_request__free_unpacked(r, NULL);
}

/* ------------------------------------------------------------------------------------------
 * List
 * ---------------------------------------------------------------------------------------- */

static void list_reply(struct rtx_daemon *d, const struct rtx_job_info *jobs, int n,
                       const char *next, struct rtx_server_reply *rep) {
    struct scratch sc = {0};
    bool failed = false;
    size_t cnt = n > 0 ? (size_t)n : 0;
    Rtx__V1__Job **jp = scratch_alloc(&sc, cnt, sizeof *jp, &failed);
    Rtx__V1__Job *js = scratch_alloc(&sc, cnt, sizeof *js, &failed);
    for (size_t i = 0; i < cnt && !failed; i++) {
        struct rtx_jobs_run run;
        failed = !job_to_msg(&sc, &jobs[i], run_of(d, &jobs[i], &run) ? &run : NULL, &js[i]);
        jp[i] = &js[i];
    }
    if (failed) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory encoding %d jobs", n);
    } else {
        Rtx__V1__ListJobsResponse m = RTX__V1__LIST_JOBS_RESPONSE__INIT;
        m.n_jobs = cnt;
        m.jobs = jp;
        m.next_page_token = (char *)next;
        rtx_server_reply_pack(rep, &m.base, rtx__daemon_max_reply_bytes(d));
    }
    scratch_free(&sc);
}

void rtx__daemon_jobs_list(struct rtx_daemon *d, const uint8_t *req, size_t len,
                           struct rtx_server_reply *rep) {
    Rtx__V1__ListJobsRequest *r = rtx__v1__list_jobs_request__unpack(NULL, len, req);
    if (!r) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "malformed rtx.v1.ListJobsRequest");
        return;
    }
    enum rtx_job_state *states = NULL;
    struct rtx_job_label *labels = NULL;
    struct rtx_job_info *jobs = NULL;
    int n = 0;
    if (r->page_size < 0 || r->page_size > LIST_PAGE_MAX) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "page_size %d is out of range (0 = %d, at most %d)", r->page_size,
                                LIST_PAGE_DEFAULT, LIST_PAGE_MAX);
        goto out;
    }
    if (r->n_states > 0 && !(states = rtx_calloc(r->n_states, sizeof *states))) goto oom;
    for (size_t i = 0; i < r->n_states; i++) {
        int s = (int)r->states[i];
        if (s < RTX_JOB_QUEUED || s > RTX_JOB_EXPIRED) {
            rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                    "states[%zu]: invalid job state %d", i, s);
            goto out;
        }
        states[i] = (enum rtx_job_state)s;
    }
    if (r->n_labels > 0 && !(labels = rtx_calloc(r->n_labels, sizeof *labels))) goto oom;
    for (size_t i = 0; i < r->n_labels; i++) {
        labels[i].key = str(r->labels[i]->key);
        labels[i].value = str(r->labels[i]->value);
    }
    struct rtx_job_filter f = {
        .n_states = (int)r->n_states,
        .states = states,
        .n_labels = (int)r->n_labels,
        .labels = labels,
        .created_after_ms = r->created_after_unix_ms,
        .created_before_ms = r->created_before_unix_ms,
        .limit = r->page_size ? r->page_size : LIST_PAGE_DEFAULT,
        .page_token = r->page_token,
    };
    char next[RTX_JOB_ID_LEN + 32] = "";
    struct rtx_err err = {0};
    if (rtx_store_job_list(d->store, &f, &jobs, &n, next, &err) != 0) {
        rtx_server_reply_err(rep, &err);
        jobs = NULL;
        n = 0;
        goto out;
    }
    list_reply(d, jobs, n, next, rep);
    goto out;
oom:
    rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory reading the request");
out:
    if (jobs) rtx_job_info_free_array(jobs, n);
    rtx_free(labels);
    rtx_free(states);
    rtx__v1__list_jobs_request__free_unpacked(r, NULL);
}

/* ------------------------------------------------------------------------------------------
 * GetOutputs
 * ---------------------------------------------------------------------------------------- */

static void outputs_reply(struct rtx_daemon *d, struct rtx_tensor **tensors, char **names, int n,
                          struct rtx_server_reply *rep) {
    struct scratch sc = {0};
    bool failed = false;
    size_t cnt = n > 0 ? (size_t)n : 0;
    Rtx__V1__Tensor **tp = scratch_alloc(&sc, cnt, sizeof *tp, &failed);
    Rtx__V1__Tensor *ts = scratch_alloc(&sc, cnt, sizeof *ts, &failed);
    for (size_t i = 0; i < cnt && !failed; i++) {
        const struct rtx_tensor *t = tensors[i];
        rtx__v1__tensor__init(&ts[i]);
        ts[i].name = str(names[i]);
        ts[i].dtype = (Rtx__V1__DataType)rtx_dtype_to_wire(t->dtype);
        ts[i].n_dims = t->ndim > 0 ? (size_t)t->ndim : 0;
        ts[i].dims = (int64_t *)t->dims;
        ts[i].data.len = rtx_tensor_nbytes(t);
        ts[i].data.data = rtx_tensor_data(t);
        tp[i] = &ts[i];
    }
    if (failed) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL, "out of memory encoding outputs");
    } else {
        Rtx__V1__GetOutputsResponse m = RTX__V1__GET_OUTPUTS_RESPONSE__INIT;
        m.n_outputs = cnt;
        m.outputs = tp;
        rtx_server_reply_pack(rep, &m.base, rtx__daemon_max_reply_bytes(d));
    }
    scratch_free(&sc);
}

void rtx__daemon_jobs_get_outputs(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep) {
    Rtx__V1__GetOutputsRequest *r = rtx__v1__get_outputs_request__unpack(NULL, len, req);
    if (!r) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "malformed rtx.v1.GetOutputsRequest");
        return;
    }
    if (!check_job_id(r->job_id, rep)) goto out;
    struct rtx_tensor **tensors = NULL;
    char **names = NULL;
    int n = 0;
    struct rtx_err err = {0};
    int rc = rtx_store_job_outputs(d->store, r->job_id, &tensors, &names, &n, &err);
    if (rc == RTX_EINVAL) {
        /* the store's "not succeeded": say so with the state the job is in */
        struct rtx_job_info job = {0};
        struct rtx_err gerr = {0};
        if (rtx_store_job_get(d->store, r->job_id, &job, &gerr) == 0 &&
            job.state != RTX_JOB_SUCCEEDED)
            rtx_server_reply_status(rep, GRPC_STATUS_FAILED_PRECONDITION,
                                    "job %s is %s: outputs exist only once it has succeeded",
                                    r->job_id, rtx_job_state_name(job.state));
        else
            rtx_server_reply_err(rep, &err);
        rtx_job_info_clear(&job);
    } else if (rc != 0) {
        rtx_server_reply_err(rep, &err);
    } else {
        outputs_reply(d, tensors, names, n, rep);
        for (int i = 0; i < n; i++) {
            rtx_tensor_unref(tensors[i]);
            rtx_free(names[i]);
        }
        rtx_free(tensors);
        rtx_free(names);
    }
out:
    rtx__v1__get_outputs_request__free_unpacked(r, NULL);
}
