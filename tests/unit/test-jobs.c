/*
 * test-jobs.c - the job manager (daemon/jobs-*.c) over a real store in a temporary directory:
 * admission and its errors (with nothing journaled), results compared with a direct run,
 * failing runs, idempotency, cancellation, deadlines, watchers and unwatch. The job manager's
 * other suites: test-jobs-queue.c (restarts, drain, bounds, load), test-jobs-sched.c (the SLA
 * scheduler), test-jobs-devices.c (fake CUDA devices), test-jobs-plans.c (plan reuse);
 * test-jobs-util.h holds what they share.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "kernels/cpu/backend-cpu.h"
#include "rtx/v1/jobs.pb-c.h"
#include "runtime/backend-impl.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

START_TEST(submit_runs_job_to_success) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);

    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
}
END_TEST


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
    struct rtx_tensor *x = small_x();
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

    finish(&f, j, g, x);
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
    /* a failed job has no run, and its plan is not kept */
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, id, &run), RTX_ENOTFOUND);
    ck_assert_int_eq(dev_info(&f, 0).plan_misses, 1);
    ck_assert_int_eq(dev_info(&f, 0).plans, 0);
    rtx_tensor_unref(ids);
    finish(&f, j, g, NULL);
}
END_TEST

START_TEST(submit_is_idempotent) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
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

    finish(&f, j, g, x);
}
END_TEST

START_TEST(cancel_queued_job) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
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

    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(cancel_running_job) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000);
    struct rtx_tensor *xl = long_x();
    char id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, id);
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
    finish(&f, j, NULL, NULL);
}
END_TEST

START_TEST(deadline_expires_before_start) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN], ok[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
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

    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(watch_delivers_states_in_order) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
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
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
}
END_TEST

/* A callback that ends its own watch at the first running state. */
struct self_unwatch {
    struct rtx_jobs *j;
    uint64_t handle; /* atomic */
    int calls;       /* atomic */
};

static void self_unwatch_cb(void *ctx, const struct rtx_job_info *job,
                            const struct rtx_jobs_run *run, bool last) {
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
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
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
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
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
    suite_add_tcase(s, tc);
    return s;
}
