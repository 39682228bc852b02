/*
 * test-jobs.c - the job manager (daemon/jobs.c) over a real store in a temporary directory:
 * admission and its errors (with nothing journaled), results compared with a direct run,
 * failing runs, idempotency, cancellation, deadlines, watchers and unwatch, recovery by restart
 * policy, drain, the queue bound, lane round robin, concurrent submitters, an out-of-memory
 * loop over admission, and the throughput of tiny jobs (printed).
 */
#include <check.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "rtx/v1/jobs.pb-c.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

/* A store in a fresh temporary directory. */
struct fx {
    char dir[64];
    char path[96];
    struct rtx_store *store;
};

/* sync_normal: commits without fsync, so jobs finish fast enough to race their Submit. */
static void fx_open_sync(struct fx *f, bool sync_normal) {
    snprintf(f->dir, sizeof f->dir, "/tmp/rtx-jobs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/rtxd.db", f->dir);
    struct rtx_store_options so = {.path = f->path, .sync_normal = sync_normal};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &f->store, &err) == 0, "%s", err.msg);
}

static void fx_open(struct fx *f) {
    fx_open_sync(f, false);
}

static void fx_close(struct fx *f) {
    rtx_store_close(f->store);
    f->store = NULL;
    nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *const lanes3[] = {"realtime", "interactive", "batch"};

static struct rtx_jobs_options jobs_opts(struct fx *f, int workers) {
    return (struct rtx_jobs_options){
        .store = f->store,
        .workers = workers,
        .cpu_threads = 1,
        .limits = rtx_limits_default(),
        .max_queued = 1000,
        .default_restart_policy = RTX_RESTART_RERUN,
        .n_lanes = 3,
        .lanes = lanes3,
        .default_lane = "batch",
    };
}

static struct rtx_jobs *start(const struct rtx_jobs_options *o) {
    struct rtx_jobs *j = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_start(o, &j, &err) == 0, "%s", err.msg);
    return j;
}

/* y = relu(x @ w + b), x f32[2,3] (the input), w f32[3,4], b f32[4]. */
static struct rtx_graph *small_graph(void) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("small", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 3}, &err) >= 0);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 2, (const int64_t[]){3, 4}, -1, 1, 7);
    struct rtx_tensor *b = tu_tensor_random(RTX_F32, 1, (const int64_t[]){4}, -1, 1, 8);
    ck_assert(rtx_graph_add_initializer(g, "w", w, &err) >= 0);
    ck_assert(rtx_graph_add_initializer(g, "b", b, &err) >= 0);
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    ck_assert(rtx_graph_add_node(g, "matmul", "mm", (const char *[]){"x", "w"}, 2,
                                 (const char *[]){"xw"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "add", "bias", (const char *[]){"xw", "b"}, 2,
                                 (const char *[]){"z"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "act", (const char *[]){"z"}, 1, (const char *[]){"y"},
                                 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    return g;
}

/* What a SubmitRequest holds besides the graph. */
struct req_opts {
    const char *lane;
    int64_t deadline_ms;
    const char *idempotency_key;
    int restart_policy;
    int n_labels;
    const char *const *labels; /* key, value, key, value, ... */
};

/* Serializes a SubmitRequest for g with inputs named names[i]. *len receives its size; free
 * the result with free(). */
static void *make_request(const struct rtx_graph *g, int n_inputs, const char *const *names,
                          struct rtx_tensor *const *inputs, const struct req_opts *o,
                          size_t *len) {
    struct rtx_err err = {0};
    void *gbytes = NULL;
    size_t glen = 0;
    ck_assert_msg(rtx_graph_encode(g, &gbytes, &glen, &err) == 0, "%s", err.msg);
    Rtx__V1__Graph *gm = rtx__v1__graph__unpack(NULL, glen, gbytes);
    ck_assert_ptr_nonnull(gm);
    rtx_free(gbytes);

    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    req.graph = gm;
    Rtx__V1__Tensor tm[8];
    Rtx__V1__Tensor *tp[8];
    ck_assert_int_le(n_inputs, 8);
    for (int i = 0; i < n_inputs; i++) {
        rtx__v1__tensor__init(&tm[i]);
        tm[i].name = (char *)names[i];
        tm[i].dtype = (Rtx__V1__DataType)(inputs[i]->dtype + 1); /* wire = rtx dtype + 1 */
        tm[i].n_dims = (size_t)inputs[i]->ndim;
        tm[i].dims = inputs[i]->dims;
        tm[i].data.len = rtx_tensor_nbytes(inputs[i]);
        tm[i].data.data = rtx_tensor_data(inputs[i]);
        tp[i] = &tm[i];
    }
    req.n_inputs = (size_t)n_inputs;
    req.inputs = tp;
    Rtx__V1__Label lm[8];
    Rtx__V1__Label *lp[8];
    if (o) {
        if (o->lane) req.lane = (char *)o->lane;
        req.deadline_unix_ms = o->deadline_ms;
        if (o->idempotency_key) req.idempotency_key = (char *)o->idempotency_key;
        req.restart_policy = (Rtx__V1__RestartPolicy)o->restart_policy;
        ck_assert_int_le(o->n_labels, 8);
        for (int i = 0; i < o->n_labels; i++) {
            rtx__v1__label__init(&lm[i]);
            lm[i].key = (char *)o->labels[2 * i];
            lm[i].value = (char *)o->labels[2 * i + 1];
            lp[i] = &lm[i];
        }
        req.n_labels = (size_t)o->n_labels;
        req.labels = lp;
    }
    *len = rtx__v1__submit_request__get_packed_size(&req);
    void *out = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(out);
    rtx__v1__submit_request__pack(&req, out);
    rtx__v1__graph__free_unpacked(gm, NULL);
    return out;
}

/* Polls the store until the job reaches `state` (or any terminal state when state is 0);
 * fails the test after timeout_ms. Returns the state reached. */
static enum rtx_job_state wait_state(struct rtx_store *s, const char *id, int state,
                                     int timeout_ms) {
    for (int waited = 0;; waited++) {
        struct rtx_job_info info = {0};
        struct rtx_err err = {0};
        ck_assert_msg(rtx_store_job_get(s, id, &info, &err) == 0, "%s", err.msg);
        enum rtx_job_state st = info.state;
        rtx_job_info_clear(&info);
        if ((state == 0 && rtx_job_state_is_terminal(st)) || (int)st == state) return st;
        ck_assert_msg(waited < timeout_ms, "job %s still %s after %d ms", id,
                      rtx_job_state_name(st), timeout_ms);
        usleep(1000);
    }
}

/* x f32[512,512] -> n times (matmul with a 512x512 weight, tanh): seconds of work, to cancel. */
static struct rtx_graph *long_graph(int n) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("long", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){512, 512}, &err) >= 0);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -0.1, 0.1, 5);
    ck_assert(rtx_graph_add_initializer(g, "w", w, &err) >= 0);
    rtx_tensor_unref(w);
    char prev[16] = "x", mm[16], act[16];
    for (int i = 0; i < n; i++) {
        snprintf(mm, sizeof mm, "mm%d", i);
        snprintf(act, sizeof act, "act%d", i);
        ck_assert(rtx_graph_add_node(g, "matmul", mm, (const char *[]){prev, "w"}, 2,
                                     (const char *[]){mm}, 1, &err) >= 0);
        ck_assert(rtx_graph_add_node(g, "tanh", act, (const char *[]){mm}, 1,
                                     (const char *[]){act}, 1, &err) >= 0);
        memcpy(prev, act, sizeof prev);
    }
    ck_assert(rtx_graph_add_output(g, prev, &err) == 0);
    return g;
}

/* Submits g with input x; returns 0 or the error code (id and err filled). */
static int submit_x(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
                    const struct req_opts *o, char id[RTX_JOB_ID_LEN], bool *dedup,
                    struct rtx_err *err) {
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, o, &len);
    int rc = rtx_jobs_submit(j, req, len, id, dedup, err);
    free(req);
    return rc;
}

/* Submits g with input x and fails the test on error. */
static void submit_ok(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
                      const struct req_opts *o, char id[RTX_JOB_ID_LEN]) {
    struct rtx_err err = {0};
    bool dedup = false;
    ck_assert_msg(submit_x(j, g, x, o, id, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(!dedup);
}

static struct rtx_job_info get_job(struct rtx_store *s, const char *id) {
    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_get(s, id, &info, &err) == 0, "%s", err.msg);
    return info;
}

/* Jobs in the journal (up to 1000). */
static int count_jobs(struct rtx_store *s) {
    struct rtx_job_filter flt = {.limit = 1000};
    struct rtx_job_info *jobs = NULL;
    int n = 0;
    char next[RTX_JOB_ID_LEN + 32];
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_list(s, &flt, &jobs, &n, next, &err) == 0, "%s", err.msg);
    rtx_job_info_free_array(jobs, n);
    return n;
}

/* Waits until no job is queued or running, so that the counters (updated right after the
 * journal write a test polls for) are final. */
static void settle(struct rtx_jobs *j) {
    for (int waited = 0;; waited++) {
        struct rtx_jobs_stats st;
        rtx_jobs_get_stats(j, &st);
        int busy = 0;
        for (int i = 0; i < st.n_lanes; i++)
            busy += st.lanes[i].queued + st.lanes[i].running;
        if (busy == 0) return;
        ck_assert_msg(waited < 10000, "jobs still busy after 10 s");
        usleep(1000);
    }
}

/* What a watch saw. */
struct rec {
    pthread_mutex_t mu;
    int n;
    enum rtx_job_state states[16];
    bool last[16];
    int seq[16];  /* global order of running events (lane test) */
    int in_cb;    /* atomic: inside the callback */
    int calls;    /* atomic */
    int delay_us; /* sleep inside the callback */
};

static int g_seq; /* atomic */

static void rec_init(struct rec *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

static void rec_cb(void *ctx, const struct rtx_job_info *job, bool last) {
    struct rec *r = ctx;
    ck_assert_int_eq(__atomic_fetch_add(&r->in_cb, 1, __ATOMIC_SEQ_CST), 0);
    __atomic_fetch_add(&r->calls, 1, __ATOMIC_SEQ_CST);
    if (r->delay_us) usleep((useconds_t)r->delay_us);
    pthread_mutex_lock(&r->mu);
    if (r->n < 16) {
        r->states[r->n] = job->state;
        r->last[r->n] = last;
        r->seq[r->n] = __atomic_add_fetch(&g_seq, 1, __ATOMIC_SEQ_CST);
        r->n++;
    }
    pthread_mutex_unlock(&r->mu);
    __atomic_fetch_sub(&r->in_cb, 1, __ATOMIC_SEQ_CST);
}

/* Waits until the watch got its last callback. */
static void rec_wait_last(struct rec *r, int timeout_ms) {
    for (int waited = 0;; waited++) {
        pthread_mutex_lock(&r->mu);
        bool done = r->n > 0 && r->last[r->n - 1];
        pthread_mutex_unlock(&r->mu);
        if (done) return;
        ck_assert_msg(waited < timeout_ms, "watch did not end in %d ms", timeout_ms);
        usleep(1000);
    }
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

START_TEST(submit_runs_job_to_success) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);

    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    char id[RTX_JOB_ID_LEN];
    bool dedup = true;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_submit(j, req, len, id, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(!dedup);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_SUCCEEDED);

    /* the stored output equals a direct execution */
    struct rtx_plan *p = NULL;
    ck_assert(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err) == 0);
    struct rtx_backend *be = NULL;
    ck_assert(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &be, &err) == 0);
    struct rtx_tensor *want = NULL;
    ck_assert(rtx_plan_execute(p, be, &x, 1, &want, 1, NULL, NULL, &err) == 0);
    struct rtx_tensor **outs = NULL;
    char **names = NULL;
    int n = 0;
    ck_assert_msg(rtx_store_job_outputs(f.store, id, &outs, &names, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(names[0], "y");
    ck_assert_int_eq(outs[0]->ndim, 2);
    ck_assert_int_eq(outs[0]->dims[0], 2);
    ck_assert_int_eq(outs[0]->dims[1], 4);
    ck_assert_mem_eq(rtx_tensor_data(outs[0]), rtx_tensor_data(want), 8 * sizeof(float));

    struct rtx_job_info info = {0};
    ck_assert(rtx_store_job_get(f.store, id, &info, &err) == 0);
    ck_assert_str_eq(info.lane, "batch");
    ck_assert_str_eq(info.graph_name, "small");
    ck_assert_int_eq(info.attempts, 1);
    ck_assert_int_eq(info.restart_policy, RTX_RESTART_RERUN);
    ck_assert_int_gt(info.peak_bytes, 0);
    rtx_job_info_clear(&info);

    for (int i = 0; i < n; i++) {
        rtx_tensor_unref(outs[i]);
        rtx_free(names[i]);
    }
    rtx_free(outs);
    rtx_free(names);
    rtx_tensor_unref(want);
    rtx_backend_free(be);
    rtx_plan_free(p);
    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One rejected request: the code, a piece of the message, and nothing journaled. */
static void expect_reject(struct rtx_jobs *j, struct rtx_store *s, const void *req, size_t len,
                          int code, const char *msg_part) {
    char id[RTX_JOB_ID_LEN] = "x";
    bool dedup = true;
    struct rtx_err err = {0};
    int rc = rtx_jobs_submit(j, req, len, id, &dedup, &err);
    ck_assert_msg(rc == code, "want %s, got %d (%s)", rtx_strerror(code), rc, err.msg);
    ck_assert_int_eq(err.code, code);
    ck_assert_msg(strstr(err.msg, msg_part), "'%s' not in '%s'", msg_part, err.msg);
    ck_assert_str_eq(id, "");
    ck_assert(!dedup);
    ck_assert_int_eq(count_jobs(s), 0);
}

START_TEST(submit_rejects_bad_requests) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.limits.max_tensor_bytes = 64;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req;

    expect_reject(j, f.store, "\xff\xff\xff\xff", 4, RTX_EFORMAT, "malformed SubmitRequest");

    /* an empty request has no graph */
    expect_reject(j, f.store, "", 0, RTX_EINVAL, "no graph");

    /* a dangling input names the node */
    struct rtx_graph *bad = small_graph();
    struct rtx_err err = {0};
    ck_assert(rtx_graph_add_node(bad, "add", "bad", (const char *[]){"y", "ghost"}, 2,
                                 (const char *[]){"y2"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(bad, "y2", &err) == 0);
    req = make_request(bad, 1, (const char *[]){"x"}, &x, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EGRAPH, "'bad'");
    free(req);
    rtx_graph_free(bad);

    /* wrong input shape */
    struct rtx_tensor *x5 = tu_tensor(RTX_F32, 2, (const int64_t[]){2, 5}, NULL);
    req = make_request(g, 1, (const char *[]){"x"}, &x5, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "input 'x': expected f32[-1,3]");
    free(req);
    rtx_tensor_unref(x5);

    /* wrong dtype */
    struct rtx_tensor *xi = tu_tensor(RTX_I32, 2, (const int64_t[]){2, 3}, NULL);
    req = make_request(g, 1, (const char *[]){"x"}, &xi, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "input 'x'");
    free(req);
    rtx_tensor_unref(xi);

    /* unknown, duplicate and missing inputs */
    req = make_request(g, 1, (const char *[]){"z"}, &x, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "unknown input 'z' (graph inputs: x)");
    free(req);
    req =
        make_request(g, 2, (const char *[]){"x", "x"}, (struct rtx_tensor *[]){x, x}, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "'x' is given more than once");
    free(req);
    req = make_request(g, 0, NULL, NULL, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "missing input: x");
    free(req);

    /* over the tensor limit of 64 bytes */
    struct rtx_tensor *xl = tu_tensor(RTX_F32, 2, (const int64_t[]){10, 3}, NULL);
    req = make_request(g, 1, (const char *[]){"x"}, &xl, NULL, &len);
    expect_reject(j, f.store, req, len, RTX_ELIMIT, "input 'x'");
    free(req);
    rtx_tensor_unref(xl);

    /* unknown lane lists the lanes */
    req = make_request(g, 1, (const char *[]){"x"}, &x, &(struct req_opts){.lane = "gold"}, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL,
                  "unknown lane 'gold' (lanes: realtime, interactive, batch)");
    free(req);

    /* deadline in the past, unknown restart policy, repeated label */
    req = make_request(g, 1, (const char *[]){"x"}, &x,
                       &(struct req_opts){.deadline_ms = wall_ms() - 1000}, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "deadline already passed");
    free(req);
    req = make_request(g, 1, (const char *[]){"x"}, &x, &(struct req_opts){.restart_policy = 9},
                       &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "restart policy 9");
    free(req);
    req = make_request(
        g, 1, (const char *[]){"x"}, &x,
        &(struct req_opts){.n_labels = 2, .labels = (const char *[]){"a", "1", "a", "2"}}, &len);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "label 'a'");
    free(req);

    /* a tensor whose data does not match its shape */
    Rtx__V1__SubmitRequest *m;
    req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    m = rtx__v1__submit_request__unpack(NULL, len, req);
    ck_assert_ptr_nonnull(m);
    free(req);
    m->inputs[0]->data.len -= 4;
    len = rtx__v1__submit_request__get_packed_size(m);
    req = malloc(len);
    rtx__v1__submit_request__pack(m, req);
    m->inputs[0]->data.len += 4;
    rtx__v1__submit_request__free_unpacked(m, NULL);
    expect_reject(j, f.store, req, len, RTX_EINVAL, "data has 20 bytes");
    free(req);

    /* and a good one still goes through */
    char id[RTX_JOB_ID_LEN];
    submit_ok(j, g, x, NULL, id);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(count_jobs(f.store), 1);

    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

/* A run that fails (a gather index out of range is only seen while running): FAILED with the
 * executor's message as the reason. */
START_TEST(failing_run_is_journaled_failed) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("lookup", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_I64, 1, (const int64_t[]){2}, &err) >= 0);
    struct rtx_tensor *table = tu_tensor_random(RTX_F32, 2, (const int64_t[]){4, 3}, -1, 1, 2);
    ck_assert(rtx_graph_add_initializer(g, "table", table, &err) >= 0);
    rtx_tensor_unref(table);
    ck_assert(rtx_graph_add_node(g, "gather", "embed", (const char *[]){"table", "x"}, 2,
                                 (const char *[]){"e"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "e", &err) == 0);
    struct rtx_tensor *ids = tu_tensor(RTX_I64, 1, (const int64_t[]){2}, (const double[]){0, 9});
    char id[RTX_JOB_ID_LEN];
    submit_ok(j, g, ids, NULL, id);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_FAILED);
    struct rtx_job_info info = get_job(f.store, id);
    ck_assert_msg(strstr(info.reason, "'embed'") && strstr(info.reason, "out of range"), "%s",
                  info.reason);
    ck_assert_int_eq(info.attempts, 1);
    rtx_job_info_clear(&info);
    settle(j);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.failed, 1);
    rtx_tensor_unref(ids);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(submit_is_idempotent) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    struct req_opts ro = {.idempotency_key = "key-1",
                          .lane = "realtime",
                          .n_labels = 1,
                          .labels = (const char *[]){"team", "ml"}};
    char id1[RTX_JOB_ID_LEN], id2[RTX_JOB_ID_LEN];
    bool dedup = true;
    struct rtx_err err = {0};
    ck_assert_msg(submit_x(j, g, x, &ro, id1, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(!dedup);
    ck_assert_msg(submit_x(j, g, x, &ro, id2, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(dedup);
    ck_assert_str_eq(id1, id2);
    ck_assert_int_eq(wait_state(f.store, id1, 0, 10000), RTX_JOB_SUCCEEDED);
    /* again after it finished: still the first job, not run again */
    ck_assert_msg(submit_x(j, g, x, &ro, id2, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(dedup);
    ck_assert_str_eq(id1, id2);
    ck_assert_int_eq(count_jobs(f.store), 1);
    struct rtx_job_info info = get_job(f.store, id1);
    ck_assert_int_eq(info.attempts, 1);
    ck_assert_str_eq(info.idempotency_key, "key-1");
    ck_assert_str_eq(info.lane, "realtime");
    ck_assert_int_eq(info.n_labels, 1);
    ck_assert_str_eq(info.labels[0].key, "team");
    ck_assert_str_eq(info.labels[0].value, "ml");
    rtx_job_info_clear(&info);
    struct rtx_jobs_stats st;
    settle(j);
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.succeeded, 1);

    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(cancel_queued_job) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    submit_ok(j, g, x, NULL, id);

    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.n_lanes, 3);
    ck_assert_str_eq(st.lanes[2].lane, "batch");
    ck_assert_int_eq(st.lanes[2].queued, 1);
    ck_assert_int_eq(st.lanes[2].running, 1);

    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_cancel(j, id, &info, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(info.state, RTX_JOB_CANCELLED);
    ck_assert_str_eq(info.reason, "cancelled by request");
    ck_assert_int_eq(info.attempts, 0);
    rtx_job_info_clear(&info);
    /* cancelling a terminal job leaves it as it is */
    ck_assert(rtx_jobs_cancel(j, id, &info, &err) == 0);
    ck_assert_int_eq(info.state, RTX_JOB_CANCELLED);
    rtx_job_info_clear(&info);
    ck_assert_int_eq(rtx_jobs_cancel(j, "j000000000000nosuchjob", NULL, &err), RTX_ENOTFOUND);

    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, busy, 0, 10000), RTX_JOB_CANCELLED);
    settle(j);
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.cancelled, 2);
    ck_assert_int_eq(st.lanes[2].queued, 0);
    /* the cancelled job never ran */
    info = get_job(f.store, id);
    ck_assert_int_eq(info.state, RTX_JOB_CANCELLED);
    ck_assert_int_eq(info.started_ms, 0);
    rtx_job_info_clear(&info);

    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(cancel_running_job) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000);
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    char id[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, id);
    wait_state(f.store, id, RTX_JOB_RUNNING, 10000);
    int64_t t0 = wall_ms();
    struct rtx_err err = {0};
    struct rtx_job_info info = {0};
    ck_assert_msg(rtx_jobs_cancel(j, id, &info, &err) == 0, "%s", err.msg);
    ck_assert(info.state == RTX_JOB_RUNNING || info.state == RTX_JOB_CANCELLED);
    rtx_job_info_clear(&info);
    ck_assert_int_eq(wait_state(f.store, id, 0, 5000), RTX_JOB_CANCELLED);
    ck_assert_int_lt(wall_ms() - t0, 1000);
    info = get_job(f.store, id);
    ck_assert_str_eq(info.reason, "cancelled by request");
    ck_assert_int_eq(info.attempts, 1);
    ck_assert_int_eq(info.n_outputs, 0);
    rtx_job_info_clear(&info);

    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(deadline_expires_before_start) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN], ok[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    submit_ok(j, g, x, &(struct req_opts){.deadline_ms = wall_ms() + 100}, id);
    submit_ok(j, g, x, &(struct req_opts){.deadline_ms = wall_ms() + 600000}, ok);
    usleep(200 * 1000);
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_EXPIRED);
    ck_assert_int_eq(wait_state(f.store, ok, 0, 10000), RTX_JOB_SUCCEEDED);
    struct rtx_job_info info = get_job(f.store, id);
    ck_assert_str_eq(info.reason, "deadline passed before the job started");
    ck_assert_int_eq(info.attempts, 0);
    rtx_job_info_clear(&info);
    struct rtx_jobs_stats st;
    settle(j);
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.expired, 1);

    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(watch_delivers_states_in_order) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    submit_ok(j, g, x, NULL, id);

    struct rec r;
    rec_init(&r);
    uint64_t w = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_watch(j, id, rec_cb, &r, &w, &err) == 0, "%s", err.msg);
    ck_assert(w != 0);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    rec_wait_last(&r, 10000);
    ck_assert_int_eq(r.n, 3);
    ck_assert_int_eq(r.states[0], RTX_JOB_QUEUED);
    ck_assert_int_eq(r.states[1], RTX_JOB_RUNNING);
    ck_assert_int_eq(r.states[2], RTX_JOB_SUCCEEDED);
    ck_assert(!r.last[0] && !r.last[1] && r.last[2]);
    /* the watch ended by itself: unwatch is a no-op now */
    rtx_jobs_unwatch(j, w);

    /* a terminal job: one callback, last */
    struct rec r2;
    rec_init(&r2);
    ck_assert(rtx_jobs_watch(j, id, rec_cb, &r2, &w, &err) == 0);
    ck_assert_int_eq(r2.n, 1);
    ck_assert_int_eq(r2.states[0], RTX_JOB_SUCCEEDED);
    ck_assert(r2.last[0]);
    ck_assert_int_eq(rtx_jobs_watch(j, "jnosuch", rec_cb, &r2, &w, &err), RTX_ENOTFOUND);
    ck_assert_int_eq(r2.n, 1);

    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    pthread_mutex_destroy(&r.mu);
    pthread_mutex_destroy(&r2.mu);
    fx_close(&f);
}
END_TEST

START_TEST(unwatch_stops_callbacks) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 2);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    enum { N = 40 };
    char ids[N][RTX_JOB_ID_LEN];
    struct rtx_err err = {0};
    for (int i = 0; i < N; i++) {
        submit_ok(j, g, x, NULL, ids[i]);
        /* each watch is its own allocation, freed right after unwatch: a late callback would
         * be a use after free that ASan reports */
        struct rec *r = malloc(sizeof *r);
        rec_init(r);
        r->delay_us = 300;
        uint64_t w;
        ck_assert_msg(rtx_jobs_watch(j, ids[i], rec_cb, r, &w, &err) == 0, "%s", err.msg);
        usleep((useconds_t)(i % 5) * 200);
        rtx_jobs_unwatch(j, w);
        ck_assert_int_eq(__atomic_load_n(&r->in_cb, __ATOMIC_SEQ_CST), 0);
        int calls = __atomic_load_n(&r->calls, __ATOMIC_SEQ_CST);
        ck_assert_int_ge(calls, 1);
        ck_assert_int_le(calls, 3);
        pthread_mutex_destroy(&r->mu);
        free(r);
    }
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(wait_state(f.store, ids[i], 0, 10000), RTX_JOB_SUCCEEDED);
    rtx_jobs_unwatch(j, 12345); /* unknown handles are ignored */
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

/* A callback that ends its own watch at the first running state. */
struct self_unwatch {
    struct rtx_jobs *j;
    uint64_t handle; /* atomic */
    int calls;       /* atomic */
};

static void self_unwatch_cb(void *ctx, const struct rtx_job_info *job, bool last) {
    struct self_unwatch *su = ctx;
    __atomic_fetch_add(&su->calls, 1, __ATOMIC_SEQ_CST);
    uint64_t h = __atomic_load_n(&su->handle, __ATOMIC_SEQ_CST);
    if (job->state == RTX_JOB_RUNNING && h) rtx_jobs_unwatch(su->j, h);
}

START_TEST(unwatch_from_callback_does_not_deadlock) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    submit_ok(j, g, x, NULL, id);
    struct self_unwatch *su = calloc(1, sizeof *su);
    su->j = j;
    uint64_t w;
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_watch(j, id, self_unwatch_cb, su, &w, &err) == 0);
    __atomic_store_n(&su->handle, w, __ATOMIC_SEQ_CST);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_SUCCEEDED);
    settle(j);
    ck_assert_int_eq(__atomic_load_n(&su->calls, __ATOMIC_SEQ_CST), 2); /* queued, running */
    free(su);
    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

/* Journals a job directly through the store, as a previous daemon would have, in `state`. */
static void journal_job(struct rtx_store *s, const void *req, size_t len,
                        enum rtx_restart_policy pol, enum rtx_job_state state,
                        char id[RTX_JOB_ID_LEN]) {
    struct rtx_job_info info = {
        .state = RTX_JOB_QUEUED,
        .reason = "",
        .lane = "batch",
        .graph_name = "small",
        .idempotency_key = "",
        .restart_policy = pol,
        .created_ms = wall_ms(),
    };
    rtx_store_new_job_id(info.id);
    char existing[RTX_JOB_ID_LEN];
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_insert(s, &info, req, len, existing, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(existing, "");
    if (state == RTX_JOB_RUNNING)
        ck_assert_msg(rtx_store_job_set_state(s, info.id, RTX_JOB_RUNNING, "", wall_ms(), &err) ==
                          0,
                      "%s", err.msg);
    memcpy(id, info.id, RTX_JOB_ID_LEN);
}

START_TEST(recovery_applies_restart_policy) {
    struct fx f;
    fx_open(&f);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    char queued[RTX_JOB_ID_LEN], rerun[RTX_JOB_ID_LEN], failed[RTX_JOB_ID_LEN];
    journal_job(f.store, req, len, RTX_RESTART_RERUN, RTX_JOB_QUEUED, queued);
    usleep(2000);
    journal_job(f.store, req, len, RTX_RESTART_RERUN, RTX_JOB_RUNNING, rerun);
    journal_job(f.store, req, len, RTX_RESTART_FAIL, RTX_JOB_RUNNING, failed);

    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    ck_assert_int_eq(wait_state(f.store, queued, 0, 10000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(wait_state(f.store, rerun, 0, 10000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(wait_state(f.store, failed, 0, 10000), RTX_JOB_FAILED);
    struct rtx_job_info a = get_job(f.store, queued), b = get_job(f.store, rerun),
                        c = get_job(f.store, failed);
    ck_assert_int_eq(a.attempts, 1);
    ck_assert_int_eq(b.attempts, 2); /* the interrupted run and the re-run */
    ck_assert_int_eq(c.attempts, 1);
    ck_assert_str_eq(c.reason, "interrupted by a daemon restart");
    ck_assert_int_le(a.started_ms, b.started_ms); /* creation order */
    rtx_job_info_clear(&a);
    rtx_job_info_clear(&b);
    rtx_job_info_clear(&c);

    /* outputs of a recovered job come from the journaled request */
    struct rtx_tensor **outs = NULL;
    char **names = NULL;
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_outputs(f.store, rerun, &outs, &names, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(names[0], "y");
    rtx_tensor_unref(outs[0]);
    rtx_free(names[0]);
    rtx_free(outs);
    rtx_free(names);

    rtx_jobs_stop(j);
    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    fx_close(&f);
}
END_TEST

START_TEST(unspecified_policy_takes_current_default) {
    struct fx f;
    fx_open(&f);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    /* a job with the FAIL policy left running by a crash */
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.default_restart_policy = RTX_RESTART_FAIL;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    char id[RTX_JOB_ID_LEN];
    journal_job(f.store, req, len, RTX_RESTART_FAIL, RTX_JOB_RUNNING, id);
    struct rtx_jobs *j = start(&o);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_FAILED);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.failed, 1);
    rtx_jobs_stop(j);

    /* a job submitted without a policy takes the default at submit time */
    o.default_restart_policy = RTX_RESTART_RERUN;
    j = start(&o);
    rtx_jobs_set_restart_policy(j, RTX_RESTART_FAIL);
    char id2[RTX_JOB_ID_LEN];
    submit_ok(j, g, x, NULL, id2);
    ck_assert_int_eq(wait_state(f.store, id2, 0, 10000), RTX_JOB_SUCCEEDED);
    struct rtx_job_info info = get_job(f.store, id2);
    ck_assert_int_eq(info.restart_policy, RTX_RESTART_FAIL);
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);

    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    fx_close(&f);
}
END_TEST

START_TEST(drain_keeps_queued_jobs) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], ids[3][RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, &(struct req_opts){.restart_policy = RTX_RESTART_FAIL}, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    for (int i = 0; i < 3; i++)
        submit_ok(j, g, x, NULL, ids[i]);

    int running = -1, queued = -1;
    rtx_jobs_drain(j, &running, &queued);
    ck_assert_int_eq(running, 1);
    ck_assert_int_eq(queued, 3);
    char id[RTX_JOB_ID_LEN];
    bool dedup;
    struct rtx_err err = {0};
    ck_assert_int_eq(submit_x(j, g, x, NULL, id, &dedup, &err), RTX_EUNAVAILABLE);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert(st.draining);
    int64_t t0 = wall_ms();
    rtx_jobs_wait_idle(j, 100); /* the long job is interrupted */
    ck_assert_int_lt(wall_ms() - t0, 2000);
    rtx_jobs_stop(j);

    struct rtx_job_info info = get_job(f.store, busy);
    ck_assert_int_eq(info.state, RTX_JOB_RUNNING);
    rtx_job_info_clear(&info);
    for (int i = 0; i < 3; i++) {
        info = get_job(f.store, ids[i]);
        ck_assert_int_eq(info.state, RTX_JOB_QUEUED);
        rtx_job_info_clear(&info);
    }

    /* the next start runs the queued jobs and fails the interrupted one (its policy) */
    j = start(&o);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(wait_state(f.store, ids[i], 0, 10000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(wait_state(f.store, busy, 0, 10000), RTX_JOB_FAILED);
    info = get_job(f.store, busy);
    ck_assert_str_eq(info.reason, "interrupted by a daemon restart");
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);

    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    fx_close(&f);
}
END_TEST

START_TEST(queue_bound_refuses) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.max_queued = 2;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN], a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN], c[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy);
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    submit_ok(j, g, x, NULL, a);
    submit_ok(j, g, x, NULL, b);
    bool dedup;
    struct rtx_err err = {0};
    ck_assert_int_eq(submit_x(j, g, x, NULL, c, &dedup, &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "queue full"), "%s", err.msg);
    ck_assert_int_eq(count_jobs(f.store), 3);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, b, 0, 10000), RTX_JOB_SUCCEEDED);
    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(lanes_served_round_robin) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    char busy[RTX_JOB_ID_LEN];
    submit_ok(j, lg, xl, NULL, busy); /* batch */
    wait_state(f.store, busy, RTX_JOB_RUNNING, 10000);
    /* queued: batch b0 b1 b2, then realtime r0, interactive i0 */
    const char *lane_of[5] = {"batch", "batch", "batch", "realtime", "interactive"};
    char ids[5][RTX_JOB_ID_LEN];
    struct rec r[5];
    struct rtx_err err = {0};
    for (int i = 0; i < 5; i++) {
        submit_ok(j, g, x, &(struct req_opts){.lane = lane_of[i]}, ids[i]);
        rec_init(&r[i]);
        uint64_t w;
        ck_assert(rtx_jobs_watch(j, ids[i], rec_cb, &r[i], &w, &err) == 0);
    }
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    for (int i = 0; i < 5; i++)
        rec_wait_last(&r[i], 10000);
    /* after batch, the worker serves realtime, interactive, batch, then batch twice */
    int order[5];
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(r[i].states[1], RTX_JOB_RUNNING);
        order[i] = r[i].seq[1];
    }
    ck_assert_int_lt(order[3], order[4]); /* r0 before i0 */
    ck_assert_int_lt(order[4], order[0]); /* i0 before b0 */
    ck_assert_int_lt(order[0], order[1]);
    ck_assert_int_lt(order[1], order[2]);
    for (int i = 0; i < 5; i++)
        pthread_mutex_destroy(&r[i].mu);
    rtx_tensor_unref(x);
    rtx_tensor_unref(xl);
    rtx_graph_free(g);
    rtx_graph_free(lg);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

struct submitter {
    struct rtx_jobs *j;
    const struct rtx_graph *g;
    struct rtx_tensor *x;
    char ids[50][RTX_JOB_ID_LEN];
    int failures;
};

static void *submit_many(void *arg) {
    struct submitter *s = arg;
    size_t len;
    void *req = make_request(s->g, 1, (const char *[]){"x"}, &s->x, NULL, &len);
    for (int i = 0; i < 50; i++) {
        bool dedup;
        struct rtx_err err = {0};
        if (rtx_jobs_submit(s->j, req, len, s->ids[i], &dedup, &err) != 0 || dedup) s->failures++;
    }
    free(req);
    return NULL;
}

static void run_concurrent_submitters(bool sync_normal, int workers) {
    struct fx f;
    fx_open_sync(&f, sync_normal);
    struct rtx_jobs_options o = jobs_opts(&f, workers);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    enum { T = 8 };
    static struct submitter subs[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        subs[t] = (struct submitter){.j = j, .g = g, .x = x};
        ck_assert_int_eq(pthread_create(&th[t], NULL, submit_many, &subs[t]), 0);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++) {
        ck_assert_int_eq(subs[t].failures, 0);
        for (int i = 0; i < 50; i++)
            ck_assert_int_eq(wait_state(f.store, subs[t].ids[i], 0, 30000), RTX_JOB_SUCCEEDED);
    }
    ck_assert_int_eq(count_jobs(f.store), T * 50);
    struct rtx_jobs_stats st;
    settle(j);
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.succeeded, T * 50);
    ck_assert_int_eq(st.failed + st.cancelled + st.expired, 0);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}

START_TEST(concurrent_submitters) {
    run_concurrent_submitters(false, 2);
}
END_TEST

/* Lets the worker run (and free) the job just queued before Submit goes on. */
static void let_worker_finish(void) {
    usleep(30 * 1000);
}

/* Regression: Submit copied the new job's id after queuing it, when a fast worker could
 * already have run and freed the job (ids came back as freed memory under load). */
START_TEST(submit_returns_id_of_job_finished_before_it_returns) {
    rtx__jobs_after_enqueue_hook = let_worker_finish;
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    for (int i = 0; i < 5; i++) {
        char id[RTX_JOB_ID_LEN];
        bool dedup;
        struct rtx_err err = {0};
        ck_assert_msg(rtx_jobs_submit(j, req, len, id, &dedup, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(wait_state(f.store, id, 0, 30000), RTX_JOB_SUCCEEDED);
    }
    rtx__jobs_after_enqueue_hook = NULL;
    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

/* Throughput of a tiny graph through submit -> succeeded with one worker (printed). */
START_TEST(throughput_one_worker) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    enum { N = 200 };
    static char ids[N][RTX_JOB_ID_LEN];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        bool dedup;
        struct rtx_err err = {0};
        ck_assert_msg(rtx_jobs_submit(j, req, len, ids[i], &dedup, &err) == 0, "%s", err.msg);
    }
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(wait_state(f.store, ids[i], 0, 30000), RTX_JOB_SUCCEEDED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    fprintf(stderr, "jobs: %d tiny jobs submit->succeeded with 1 worker: %.0f jobs/s\n", N, N / s);
    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

/* Every allocation of an admission, failed in turn: RTX_ENOMEM, nothing journaled, no leak. */
START_TEST(submit_out_of_memory_loop) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
    size_t len;
    void *req = make_request(
        g, 1, (const char *[]){"x"}, &x,
        &(struct req_opts){.n_labels = 1, .labels = (const char *[]){"k", "v"}}, &len);
    char id[RTX_JOB_ID_LEN];
    int rc = -1, n;
    for (n = 1; n < 100000 && rc != 0; n++) {
        bool dedup;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        rc = rtx_jobs_submit(j, req, len, id, &dedup, &err);
        rtx_alloc_fail_after(0);
        if (rc != 0) {
            ck_assert_msg(rc == RTX_ENOMEM, "allocation %d: %d %s", n, rc, err.msg);
            ck_assert_int_eq(count_jobs(f.store), 0);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 10);
    /* the job may have met the last injected failure in the worker: any end is fine */
    wait_state(f.store, id, 0, 10000);
    ck_assert_int_eq(count_jobs(f.store), 1);
    free(req);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_jobs_stop(j);
    fx_close(&f);
}
END_TEST

START_TEST(start_rejects_bad_options) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs *j = NULL;
    struct rtx_err err = {0};
    struct rtx_jobs_options o = jobs_opts(&f, 0);
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    o = jobs_opts(&f, 1);
    o.default_lane = "gold";
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "gold"), "%s", err.msg);
    o = jobs_opts(&f, 1);
    o.lanes = (const char *const[]){"a", "a", "batch"};
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    o = jobs_opts(&f, 1);
    o.n_lanes = 17;
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    ck_assert_ptr_null(j);
    rtx_jobs_stop(NULL);
    fx_close(&f);
}
END_TEST

Suite *rtx_jobs_suite(void) {
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, submit_runs_job_to_success);
    tcase_add_test(tc, submit_rejects_bad_requests);
    tcase_add_test(tc, failing_run_is_journaled_failed);
    tcase_add_test(tc, submit_is_idempotent);
    tcase_add_test(tc, cancel_queued_job);
    tcase_add_test(tc, cancel_running_job);
    tcase_add_test(tc, deadline_expires_before_start);
    tcase_add_test(tc, watch_delivers_states_in_order);
    tcase_add_test(tc, unwatch_stops_callbacks);
    tcase_add_test(tc, unwatch_from_callback_does_not_deadlock);
    tcase_add_test(tc, recovery_applies_restart_policy);
    tcase_add_test(tc, unspecified_policy_takes_current_default);
    tcase_add_test(tc, drain_keeps_queued_jobs);
    tcase_add_test(tc, queue_bound_refuses);
    tcase_add_test(tc, lanes_served_round_robin);
    tcase_add_test(tc, concurrent_submitters);
    tcase_add_test(tc, submit_returns_id_of_job_finished_before_it_returns);
    tcase_add_test(tc, throughput_one_worker);
    tcase_add_test(tc, submit_out_of_memory_loop);
    tcase_add_test(tc, start_rejects_bad_options);
    suite_add_tcase(s, tc);
    return s;
}
