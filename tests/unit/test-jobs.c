/*
 * test-jobs.c - the job manager (daemon/jobs-*.c) over a real store in a temporary directory:
 * admission and its errors (with nothing journaled), results compared with a direct run,
 * failing runs, idempotency, cancellation, deadlines, watchers and unwatch, recovery by restart
 * policy, drain, the queue bound, lane order, concurrent submitters, an out-of-memory
 * loop over admission, and the throughput of tiny jobs (printed). The "scheduler" case covers
 * the SLA scheduler inside the job manager: admission refusals (not journaled), lane
 * selection, expiry on a simulated clock, cancellation and EDF order, learned costs kept in
 * the store, new lane settings (SIGHUP) for queued work and for every device's scheduler or
 * none. The "devices" case runs the
 * job manager over fake CUDA devices (a backend over host memory that is not a host backend,
 * with faults triggered by node names): placement by the device field, validation of the
 * field, the CPU fallback of "auto" jobs, sticky and ordinary device errors, the queued jobs a
 * lost device strands, recovery of jobs for a device that is gone, pool statistics. The "plans"
 * case covers plan reuse and warm-up: a repeated graph runs its worker's kept plan (counted,
 * reported per job, in /metrics and in Jobs.Get), other shapes, limits-equal graphs with the
 * same name and other content, and a disabled cache miss; eviction by count (least recently
 * used first) and by bytes; on a fake GPU that captures graphs, the third job of a graph
 * replays with the first job's results; a lost device and an out-of-memory failure drop the
 * kept plans; GPU workers warm up before their first job.
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
#include "daemon/metrics.h"
#include "daemon/server.h"
#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
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
    ck_assert_int_eq(st.devices[0].plan_cache_misses, 1);
    ck_assert_int_eq(st.devices[0].plan_cache_plans, 0);
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
    struct rtx_tensor *x = small_x();
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
    struct rtx_tensor *x = small_x();
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
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], ids[3][RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, &(struct req_opts){.restart_policy = RTX_RESTART_FAIL}, busy);
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
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN], c[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
    submit_ok(j, g, x, NULL, a);
    submit_ok(j, g, x, NULL, b);
    bool dedup;
    struct rtx_err err = {0};
    ck_assert_int_eq(submit_x(j, g, x, NULL, c, &dedup, &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "queue full"), "%s", err.msg);
    ck_assert_int_eq(count_jobs(f.store), 3);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, b, 0, 10000), RTX_JOB_SUCCEEDED);
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(lanes_served_by_priority_and_weight) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy); /* batch */
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
    /* after batch, the scheduler serves realtime (the highest lane, weight 8), interactive
     * (2), then batch (1); batch in arrival order (no deadlines: arrival + target) */
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
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
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
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
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
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
}
END_TEST

/* Throughput of a tiny graph through submit -> succeeded with one worker (printed). */
START_TEST(throughput_one_worker) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
}
END_TEST

/* Every allocation of an admission, failed in turn: RTX_ENOMEM, nothing journaled, no leak. */
START_TEST(submit_out_of_memory_loop) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
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
    finish(&f, j, g, x);
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
    o = jobs_opts(&f, 1);
    o.plan_cache = -1;
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    o.plan_cache = RTX_JOBS_PLAN_CACHE_MAX + 1;
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "plan_cache"), "%s", err.msg);
    ck_assert_ptr_null(j);
    rtx_jobs_stop(NULL);
    fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * The SLA scheduler in the job manager (simulated clock where time matters)
 * ---------------------------------------------------------------------------------------- */

static int64_t sim_ns = 1000000000; /* atomic: the schedulers' clock in these tests */

static int64_t sim_clock(void) {
    return __atomic_load_n(&sim_ns, __ATOMIC_SEQ_CST);
}

static void sim_advance_ms(int64_t ms) {
    __atomic_add_fetch(&sim_ns, ms * 1000000, __ATOMIC_SEQ_CST);
}

/* The default lanes with an unknown graph costing cost_ms. */
static struct rtx_sched_config sched_cfg(int64_t cost_ms) {
    struct rtx_sched_config c;
    rtx_sched_config_init(&c);
    c.default_cost_ns = cost_ms * 1000000;
    return c;
}

/* Lane `lane` of the CPU's scheduler. */
static struct rtx_sched_lane_stats cpu_lane(struct rtx_jobs *j, const char *lane) {
    struct rtx_jobs_lanes *l = malloc(sizeof *l);
    ck_assert_ptr_nonnull(l);
    rtx_jobs_get_lanes(j, l);
    ck_assert_int_ge(l->n_devices, 1);
    ck_assert_str_eq(l->devices[0].device, "cpu");
    struct rtx_sched_lane_stats out = {0};
    bool found = false;
    for (int i = 0; i < l->devices[0].stats.n_lanes; i++) {
        if (strcmp(l->devices[0].stats.lanes[i].config.name, lane) == 0) {
            out = l->devices[0].stats.lanes[i];
            found = true;
        }
    }
    free(l);
    ck_assert_msg(found, "no lane %s", lane);
    return out;
}

/* A refused job is refused at once with RTX_EOVERLOAD, the reason and a retry hint, and is
 * not journaled: an unmeetable deadline, then a full lane. */
START_TEST(admission_refuses_and_journals_nothing) {
    rtx__jobs_clock_hook = sim_clock;
    struct fx f;
    fx_open(&f);
    struct rtx_sched_config sc = sched_cfg(100);
    sc.lanes[2].max_queued = 2; /* batch */
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.sched = &sc;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN], a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);

    /* the running job is estimated at 100 ms, so is this one: 200 ms > a 50 ms deadline */
    bool dedup = false;
    struct rtx_err err = {0};
    struct req_opts rt = {.lane = "realtime", .deadline_ms = wall_ms() + 50};
    ck_assert_int_eq(submit_x(j, g, x, &rt, id, &dedup, &err), RTX_EOVERLOAD);
    ck_assert_msg(strstr(err.msg, "overloaded on cpu (deadline)"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "retry after "), "%s", err.msg);
    ck_assert_int_eq(count_jobs(f.store), 1);
    struct rtx_sched_lane_stats ls = cpu_lane(j, "realtime");
    ck_assert_int_eq(ls.counters[RTX_SCHED_CTR_REJECTED_DEADLINE], 1);
    ck_assert_int_eq(ls.counters[RTX_SCHED_CTR_ADMITTED], 0);
    /* a deadline it can meet is admitted */
    rt.deadline_ms = wall_ms() + 60000;
    submit_ok(j, g, x, &rt, id);

    /* batch holds 2 queued jobs: the third is refused as lane_full */
    submit_ok(j, g, x, NULL, a);
    submit_ok(j, g, x, NULL, b);
    ck_assert_int_eq(submit_x(j, g, x, NULL, id, &dedup, &err), RTX_EOVERLOAD);
    ck_assert_msg(strstr(err.msg, "(lane_full)"), "%s", err.msg);
    ck_assert_int_eq(count_jobs(f.store), 4);
    ls = cpu_lane(j, "batch");
    ck_assert_int_eq(ls.queued, 2);
    ck_assert_int_eq(ls.running, 1);
    ck_assert_int_eq(ls.counters[RTX_SCHED_CTR_REJECTED_FULL], 1);

    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, b, 0, 10000), RTX_JOB_SUCCEEDED);
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
    rtx__jobs_clock_hook = NULL;
}
END_TEST

/* A job's lane is its request's, else the default; lanes come from the options' names with
 * the scheduler's settings (a lane only named gets a new lane's settings). */
START_TEST(lane_is_selected_from_request_or_default) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_sched_config sc = sched_cfg(10);
    sc.lanes[0].weight = 20; /* realtime */
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.lanes = (const char *const[]){"realtime", "bulk"};
    o.n_lanes = 2;
    o.default_lane = "bulk";
    o.sched = &sc;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN], c[RTX_JOB_ID_LEN];
    submit_ok(j, g, x, &(struct req_opts){.lane = "realtime"}, a);
    submit_ok(j, g, x, NULL, b);
    submit_ok(j, g, x, &(struct req_opts){.lane = "bulk"}, c);
    const char *ids[] = {a, b, c}, *want[] = {"realtime", "bulk", "bulk"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(wait_state(f.store, ids[i], 0, 10000), RTX_JOB_SUCCEEDED);
        struct rtx_job_info info = get_job(f.store, ids[i]);
        ck_assert_str_eq(info.lane, want[i]);
        rtx_job_info_clear(&info);
    }
    settle(j);
    struct rtx_jobs_lanes *l = malloc(sizeof *l);
    ck_assert_ptr_nonnull(l);
    rtx_jobs_get_lanes(j, l);
    ck_assert_str_eq(l->default_lane, "bulk");
    ck_assert_int_eq(l->n_devices, 1);
    ck_assert_int_eq(l->devices[0].workers, 1);
    const struct rtx_sched_stats *st = &l->devices[0].stats;
    ck_assert_int_eq(st->n_lanes, 2);
    ck_assert_str_eq(st->lanes[0].config.name, "realtime");
    ck_assert_int_eq(st->lanes[0].config.weight, 20);
    ck_assert_str_eq(st->lanes[1].config.name, "bulk");
    ck_assert_int_eq(st->lanes[1].config.weight, 1); /* a new lane's settings */
    ck_assert_int_eq(st->lanes[0].counters[RTX_SCHED_CTR_ADMITTED], 1);
    ck_assert_int_eq(st->lanes[0].counters[RTX_SCHED_CTR_COMPLETED], 1);
    ck_assert_int_eq(st->lanes[1].counters[RTX_SCHED_CTR_ADMITTED], 2);
    ck_assert_int_eq(st->lanes[1].counters[RTX_SCHED_CTR_COMPLETED], 2);
    ck_assert_int_eq(st->lanes[1].wait_samples, 2);
    ck_assert_int_eq(st->cost_keys, 1); /* one graph with one input shape */
    free(l);
    /* a lane the options do not list is refused */
    bool dedup;
    struct rtx_err err = {0};
    ck_assert_int_eq(submit_x(j, g, x, &(struct req_opts){.lane = "interactive"}, a, &dedup,
                              &err),
                     RTX_EINVAL);
    ck_assert_str_eq(err.msg, "unknown lane 'interactive' (lanes: realtime, bulk)");
    finish(&f, j, g, x);
}
END_TEST

/* A queued job whose deadline passes (on the simulated clock) is journaled expired by the
 * housekeeper while the worker is still busy, without ever starting. */
START_TEST(expiry_on_simulated_clock) {
    rtx__jobs_clock_hook = sim_clock;
    struct fx f;
    fx_open(&f);
    struct rtx_sched_config sc = sched_cfg(100);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.sched = &sc;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN], ok[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
    submit_ok(j, g, x, &(struct req_opts){.lane = "realtime", .deadline_ms = wall_ms() + 10000},
              id);
    submit_ok(j, g, x, &(struct req_opts){.lane = "realtime"}, ok);
    usleep(100 * 1000); /* several housekeeping rounds: nothing expires yet */
    struct rtx_job_info info = get_job(f.store, id);
    ck_assert_int_eq(info.state, RTX_JOB_QUEUED);
    rtx_job_info_clear(&info);
    sim_advance_ms(11000);
    ck_assert_int_eq(wait_state(f.store, id, 0, 5000), RTX_JOB_EXPIRED);
    info = get_job(f.store, busy);
    ck_assert_int_eq(info.state, RTX_JOB_RUNNING); /* the worker never got to it */
    rtx_job_info_clear(&info);
    info = get_job(f.store, id);
    ck_assert_str_eq(info.reason, "deadline passed before the job started");
    ck_assert_int_eq(info.started_ms, 0);
    rtx_job_info_clear(&info);
    struct rtx_sched_lane_stats ls = cpu_lane(j, "realtime");
    ck_assert_int_eq(ls.counters[RTX_SCHED_CTR_EXPIRED], 1);
    ck_assert_int_eq(ls.queued, 1);

    struct rtx_err err = {0};
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    ck_assert_int_eq(wait_state(f.store, ok, 0, 10000), RTX_JOB_SUCCEEDED);
    settle(j);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.expired, 1);
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
    rtx__jobs_clock_hook = NULL;
}
END_TEST

/* Cancel takes a queued job out of its scheduler (counted cancelled there, the lane's depth
 * drops) and the jobs behind it still run in EDF order: the earlier deadline first. */
START_TEST(cancel_goes_through_the_scheduler) {
    struct fx f;
    fx_open(&f);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x();
    struct rtx_tensor *x = small_x();
    char busy[RTX_JOB_ID_LEN], late[RTX_JOB_ID_LEN], gone[RTX_JOB_ID_LEN], soon[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
    int64_t now = wall_ms();
    submit_ok(j, g, x, &(struct req_opts){.deadline_ms = now + 600000}, late);
    submit_ok(j, g, x, &(struct req_opts){.deadline_ms = now + 400000}, gone);
    submit_ok(j, g, x, &(struct req_opts){.deadline_ms = now + 300000}, soon);
    struct rtx_sched_lane_stats ls = cpu_lane(j, "batch");
    ck_assert_int_eq(ls.queued, 3);
    struct rtx_err err = {0};
    struct rtx_job_info info = {0};
    ck_assert_msg(rtx_jobs_cancel(j, gone, &info, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(info.state, RTX_JOB_CANCELLED);
    rtx_job_info_clear(&info);
    ls = cpu_lane(j, "batch");
    ck_assert_int_eq(ls.queued, 2);
    ck_assert_int_eq(ls.counters[RTX_SCHED_CTR_CANCELLED], 1);

    struct rec r[2];
    const char *ids[2] = {late, soon};
    for (int i = 0; i < 2; i++) {
        rec_init(&r[i]);
        uint64_t w;
        ck_assert(rtx_jobs_watch(j, ids[i], rec_cb, &r[i], &w, &err) == 0);
    }
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    for (int i = 0; i < 2; i++)
        rec_wait_last(&r[i], 10000);
    ck_assert_int_eq(r[0].states[1], RTX_JOB_RUNNING);
    ck_assert_int_eq(r[1].states[1], RTX_JOB_RUNNING);
    ck_assert_int_lt(r[1].seq[1], r[0].seq[1]); /* earliest deadline first */
    for (int i = 0; i < 2; i++)
        pthread_mutex_destroy(&r[i].mu);
    info = get_job(f.store, gone);
    ck_assert_int_eq(info.started_ms, 0);
    rtx_job_info_clear(&info);
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

/* Learned run times are saved in the store at stop and loaded at the next start. */
START_TEST(learned_costs_persist) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    for (int i = 0; i < 3; i++) {
        submit_ok(j, g, x, NULL, id);
        ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_SUCCEEDED);
    }
    settle(j);
    rtx_jobs_stop(j);
    struct rtx_store_cost *rows = NULL;
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_cost_list(f.store, &rows, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(rows[0].device, "cpu");
    ck_assert(rows[0].key != 0);
    ck_assert_int_eq(rows[0].samples, 3);
    ck_assert_int_gt(rows[0].ema_ns, 0);
    struct rtx_store_cost saved = rows[0];
    rtx_free(rows);
    /* bad rows are refused whole */
    struct rtx_store_cost bad = saved;
    bad.ema_ns = 0;
    ck_assert_int_eq(rtx_store_cost_put(f.store, &bad, 1, 0, &err), RTX_EINVAL);

    j = start(&o);
    struct rtx_jobs_lanes *l = malloc(sizeof *l);
    ck_assert_ptr_nonnull(l);
    rtx_jobs_get_lanes(j, l);
    ck_assert_int_eq(l->devices[0].stats.cost_keys, 1);
    free(l);
    finish(&f, j, g, x);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Devices: the job manager over fake CUDA devices
 * ---------------------------------------------------------------------------------------- */

/* The rejection of a submission on `device`: its code, message in err. */
static int refused_on(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
                      const char *device, struct rtx_err *err) {
    struct req_opts ro = {.device = device};
    char id[RTX_JOB_ID_LEN];
    bool dedup = false;
    int rc = submit_x(j, g, x, &ro, id, &dedup, err);
    ck_assert_msg(rc < 0, "device '%s' was accepted", device);
    return rc;
}
START_TEST(gpu_jobs_are_placed_by_device) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 1, &o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();

    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.n_devices, 3);
    ck_assert_str_eq(st.devices[0].name, "cpu");
    ck_assert_str_eq(st.devices[2].name, "cuda:1");
    ck_assert_int_eq(st.devices[2].cuda_index, 1);
    ck_assert_int_eq(st.devices[1].workers, 1);
    ck_assert(st.devices[1].healthy && st.devices[2].healthy);

    const char *asked[] = {NULL, "auto", "cpu", "cuda", "cuda:1", "cuda:0"};
    const char *want_req[] = {"auto", "auto", "cpu", "cuda", "cuda:1", "cuda:0"};
    char sha[65] = "";
    for (int i = 0; i < 6; i++) {
        struct rtx_job_info info = run_on(j, &f, g, x, asked[i]);
        ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s: %s", want_req[i], info.reason);
        ck_assert_str_eq(info.requested_device, want_req[i]);
        if (i < 2 || i == 3)
            ck_assert_msg(strncmp(info.device, "cuda:", 5) == 0, "%s ran on %s", want_req[i],
                          info.device);
        else
            ck_assert_str_eq(info.device, i == 2 ? "cpu" : want_req[i]);
        /* every device computes the same bytes (the fake GPU runs the CPU kernels) */
        ck_assert_int_eq(info.n_outputs, 1);
        if (!sha[0]) memcpy(sha, info.outputs[0].sha256, sizeof sha);
        ck_assert_str_eq(info.outputs[0].sha256, sha);
        rtx_job_info_clear(&info);
    }
    settle(j);
    ck_assert_int_eq(dev_stats(j, 0).jobs_started, 1);
    ck_assert_int_eq(dev_stats(j, 1).jobs_started + dev_stats(j, 2).jobs_started, 5);
    ck_assert_int_ge(dev_stats(j, 2).jobs_started, 1);

    /* default_device = cpu: a job that names none runs on the CPU */
    rtx_jobs_stop(j);
    o.default_device = "cpu";
    j = start(&o);
    struct rtx_job_info info = run_on(j, &f, g, x, NULL);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "cpu");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(device_field_is_validated) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1); /* no GPU, as on CI */
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    struct rtx_err err = {0};

    ck_assert_int_eq(refused_on(j, g, x, "cuda:7", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "device 'cuda:7' does not exist: this host has no CUDA device "
                              "(none was listed at start)");
    ck_assert_int_eq(refused_on(j, g, x, "cuda", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "no CUDA device"), "%s", err.msg);
    ck_assert_int_eq(refused_on(j, g, x, "gpu", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "unknown device 'gpu' (devices: auto, cpu, cuda, cuda:N)");
    ck_assert_int_eq(refused_on(j, g, x, "cuda:", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "must be followed by a device index"), "%s", err.msg);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:-1", &err), RTX_EINVAL);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:99999999", &err), RTX_EINVAL);
    ck_assert_int_eq(refused_on(j, g, x, "CPU", &err), RTX_EINVAL);
    ck_assert_int_eq(count_jobs(f.store), 0); /* nothing journaled */

    /* auto without a GPU runs on the CPU */
    struct rtx_job_info info = run_on(j, &f, g, x, "auto");
    ck_assert_int_eq(info.state, RTX_JOB_SUCCEEDED);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "auto");
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);

    /* a bad default device is refused at start; one GPU listed: cuda:1 does not exist */
    struct rtx_jobs *j2 = NULL;
    o.default_device = "tpu";
    ck_assert_int_eq(rtx_jobs_start(&o, &j2, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "default device"), "%s", err.msg);
    struct gpu_list gl;
    gpu_list_init(&gl, 1);
    o = gpu_opts(&f, &gl, 1);
    j = start(&o);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:1", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg,
                     "device 'cuda:1' does not exist: this host lists 1 CUDA device, cuda:0");
    rtx_jobs_stop(j);

    /* a GPU with no workers: jobs asking for it are unavailable, auto ones use the CPU */
    o = gpu_opts(&f, &gl, 0);
    j = start(&o);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:0", &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "runs no jobs"), "%s", err.msg);
    info = run_on(j, &f, g, x, NULL);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(unsupported_node_goes_to_cpu_or_is_refused) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    fake_refuse_op = RTX_OP_RELU;

    struct rtx_job_info info = run_on(j, &f, g, x, "auto");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "auto");
    rtx_job_info_clear(&info);
    struct rtx_err err = {0};
    ck_assert_int_eq(refused_on(j, g, x, "cuda", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "node 2 'act' (relu) cannot run on cuda:0: its backend has no "
                              "kernel for it with these dtypes; submit the job with device cpu "
                              "or auto");
    ck_assert_int_eq(refused_on(j, g, x, "cuda:0", &err), RTX_EINVAL);

    /* a recovered "auto" job is checked by the GPU worker and goes back for the CPU */
    rtx_jobs_stop(j);
    fake_refuse_op = -1;
    struct rtx_jobs_options drained = jobs_opts(&f, 1);
    j = start(&drained);
    rtx_jobs_drain(j, NULL, NULL);
    rtx_jobs_stop(j);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    struct rtx_job_info row = {
        .state = RTX_JOB_QUEUED, .reason = (char *)"", .lane = (char *)"batch",
        .graph_name = (char *)"small", .idempotency_key = (char *)"",
        .restart_policy = RTX_RESTART_RERUN, .requested_device = (char *)"auto",
    };
    snprintf(row.id, sizeof row.id, "jrecovered-auto");
    ck_assert_msg(rtx_store_job_insert(f.store, &row, req, len, NULL, &err) == 0, "%s", err.msg);
    free(req);
    fake_refuse_op = RTX_OP_RELU;
    j = start(&o);
    wait_state(f.store, row.id, 0, 20000);
    info = get_job(f.store, row.id);
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);
    fake_refuse_op = -1;

    finish(&f, j, g, x);
}
END_TEST

START_TEST(sticky_error_marks_device_unhealthy) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *sticky = named_graph("sticky_relu");
    struct rtx_tensor *x = small_x();
    struct rtx_err err = {0};

    struct rtx_job_info info = run_on(j, &f, sticky, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_msg(strstr(info.reason, "cudaErrorIllegalAddress") &&
                      strstr(info.reason, "[cuda:0 is now unhealthy and takes no more jobs]"),
                  "%s", info.reason);
    rtx_job_info_clear(&info);
    /* unhealthy before the failure was journaled: no wait needed */
    struct rtx_jobs_device d0 = dev_stats(j, 1);
    ck_assert(!d0.healthy);
    ck_assert_msg(strstr(d0.detail, "unusable after an earlier device error"), "%s", d0.detail);
    ck_assert(dev_stats(j, 2).healthy);

    ck_assert_int_eq(refused_on(j, ok, x, "cuda:0", &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "device cuda:0 is unhealthy: cuda:0 is unusable"), "%s",
                  err.msg);
    for (int i = 0; i < 3; i++) { /* auto and cuda go to the healthy GPU */
        info = run_on(j, &f, ok, x, i == 0 ? "cuda" : "auto");
        ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
        ck_assert_str_eq(info.device, "cuda:1");
        rtx_job_info_clear(&info);
    }

    /* the second GPU goes too: auto jobs run on the CPU, cuda is unavailable */
    info = run_on(j, &f, sticky, x, "auto");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.device, "cuda:1");
    rtx_job_info_clear(&info);
    ck_assert(!dev_stats(j, 2).healthy);
    info = run_on(j, &f, ok, x, "auto");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);
    ck_assert_int_eq(refused_on(j, ok, x, "cuda", &err), RTX_EUNAVAILABLE);
    ck_assert_str_eq(err.msg, "device 'cuda': no usable CUDA device (cuda:0 is unhealthy, "
                              "cuda:1 is unhealthy)");
    ck_assert(dev_stats(j, 0).healthy);

    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(ordinary_device_error_fails_the_job_only) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *oom = named_graph("oom_relu");
    struct rtx_tensor *x = small_x();

    struct rtx_job_info info = run_on(j, &f, oom, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "node 'oom_relu': out of device memory (fake)");
    rtx_job_info_clear(&info);
    ck_assert(dev_stats(j, 1).healthy);
    info = run_on(j, &f, ok, x, "cuda:0");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);

    rtx_graph_free(ok);
    rtx_graph_free(oom);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(lost_device_fails_stranded_jobs) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *slow = long_graph(40), *ok = named_graph("act");
    struct rtx_graph *sticky = named_graph("sticky_relu");
    struct rtx_tensor *big = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 4);
    struct rtx_tensor *x = small_x();

    /* the GPU's one worker is busy while the rest queue behind it */
    char slow_id[RTX_JOB_ID_LEN], sticky_id[RTX_JOB_ID_LEN], ids[3][RTX_JOB_ID_LEN];
    submit_running(j, &f, slow, big, &(struct req_opts){.device = "cuda:0"}, slow_id);
    submit_ok(j, sticky, x, &(struct req_opts){.device = "cuda:0"}, sticky_id);
    submit_ok(j, ok, x, &(struct req_opts){.device = "cuda:0"}, ids[0]);
    submit_ok(j, ok, x, &(struct req_opts){.device = "cuda"}, ids[1]);
    submit_ok(j, ok, x, &(struct req_opts){.device = "auto"}, ids[2]);
    ck_assert_int_eq(wait_state(f.store, slow_id, 0, 60000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(wait_state(f.store, sticky_id, 0, 20000), RTX_JOB_FAILED);
    for (int i = 0; i < 3; i++) {
        wait_state(f.store, ids[i], 0, 20000);
        struct rtx_job_info info = get_job(f.store, ids[i]);
        if (i < 2) {
            ck_assert_int_eq(info.state, RTX_JOB_FAILED);
            ck_assert_msg(strncmp(info.reason, "cannot be placed: ", 18) == 0, "%s", info.reason);
            ck_assert_str_eq(info.device, "");
        } else {
            ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
            ck_assert_str_eq(info.device, "cpu");
        }
        rtx_job_info_clear(&info);
    }
    settle(j);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.failed, 3);
    ck_assert_int_eq(st.succeeded, 2);

    rtx_tensor_unref(big);
    rtx_graph_free(slow);
    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(recovery_fails_jobs_for_missing_devices) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    const char *devices[] = {"cuda:1", "cuda:0", "", "cuda:x"};
    const char *ids[] = {"jr-cuda1", "jr-cuda0", "jr-old", "jr-bad"};
    struct rtx_err err = {0};
    for (int i = 0; i < 4; i++) {
        struct rtx_job_info row = {
            .state = RTX_JOB_QUEUED, .reason = (char *)"", .lane = (char *)"batch",
            .graph_name = (char *)"small", .idempotency_key = (char *)"",
            .restart_policy = RTX_RESTART_RERUN, .requested_device = (char *)devices[i],
        };
        snprintf(row.id, sizeof row.id, "%s", ids[i]);
        ck_assert_msg(rtx_store_job_insert(f.store, &row, req, len, NULL, &err) == 0, "%s",
                      err.msg);
    }
    free(req);
    struct gpu_list gl;
    gpu_list_init(&gl, 1);
    struct rtx_jobs_options o = gpu_opts(&f, &gl, 1);
    struct rtx_jobs *j = start(&o);
    for (int i = 0; i < 4; i++) wait_state(f.store, ids[i], 0, 20000);
    struct rtx_job_info info = get_job(f.store, "jr-cuda1");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "cannot be placed: device 'cuda:1' does not exist: this host "
                                  "lists 1 CUDA device, cuda:0");
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-bad");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-cuda0");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-old"); /* journaled before placement existed: auto */
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(pools_sum_the_workers_pools) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    fake_fail_device = 1;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 2, &o);
    fake_fail_device = -1;
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();

    /* cuda:1's backend could not be made: unhealthy, no workers, no pool rows */
    struct rtx_jobs_device d1 = dev_stats(j, 2);
    ck_assert(!d1.healthy);
    ck_assert_int_eq(d1.workers, 0);
    ck_assert_msg(strstr(d1.detail, "cannot create its backend: cuda:1: "
                                    "cudaErrorDevicesUnavailable"), "%s", d1.detail);
    ck_assert_int_eq(dev_stats(j, 1).workers, 2);

    struct rtx_job_info info = run_on(j, &f, g, x, "cuda:0");
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);
    info = run_on(j, &f, g, x, "cpu");
    rtx_job_info_clear(&info);
    settle(j);

    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(rows[0].device, "cuda:0");
    ck_assert_str_eq(rows[0].kind, "cuda");
    ck_assert_int_eq(rows[0].pools, 2);
    ck_assert_uint_eq(rows[0].total.bytes_reserved, (size_t)2 << 20);
    ck_assert_uint_eq(rows[0].cap_bytes, (size_t)8 << 20);
    ck_assert_uint_ge(rows[0].total.n_allocs, 1); /* the job's buffers */
    ck_assert(rows[0].total.fragmentation > 0.74 && rows[0].total.fragmentation < 0.76);
    ck_assert(rows[0].healthy);
    ck_assert_str_eq(rows[1].device, "cuda:0/pinned");
    ck_assert_str_eq(rows[1].kind, "pinned");
    ck_assert_str_eq(rows[2].device, "cpu");
    ck_assert_int_eq(rows[2].pools, 0);
    ck_assert_uint_gt(rows[2].total.bytes_allocated_peak, 0);
    ck_assert_int_eq(rtx_jobs_get_pools(j, rows, 2, &n, &err), RTX_ELIMIT);
    ck_assert_int_eq(rtx_jobs_get_pools(j, NULL, 2, &n, &err), RTX_EINVAL);

    finish(&f, j, g, x);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Plans: reuse across jobs, eviction, replay on a capturing fake GPU, warm-up
 * ---------------------------------------------------------------------------------------- */

/* Submits g with input x on `device` (NULL: the default), waits for its success and for the
 * worker to be done with it; returns the job's run (id filled). */
static struct rtx_jobs_run run_ok(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                                  struct rtx_tensor *x, const char *device,
                                  char id[RTX_JOB_ID_LEN]) {
    struct req_opts ro = {.device = device};
    submit_ok(j, g, x, &ro, id);
    if (wait_state(f->store, id, 0, 20000) != RTX_JOB_SUCCEEDED) {
        struct rtx_job_info info = get_job(f->store, id);
        ck_abort_msg("job %s: %s: %s", id, rtx_job_state_name(info.state), info.reason);
    }
    settle(j); /* the worker has put the plan back */
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, id, &run), 0);
    return run;
}

/* The hex digest of a succeeded job's first output. */
static void output_sha(struct fx *f, const char *id, char sha[65]) {
    struct rtx_job_info info = get_job(f->store, id);
    ck_assert_int_ge(info.n_outputs, 1);
    memcpy(sha, info.outputs[0].sha256, 65);
    rtx_job_info_clear(&info);
}

/* small_graph()'s input with `rows` rows (a fixed random f32[rows, 3]). */
static struct rtx_tensor *rows_x(int rows) {
    return tu_tensor_random(RTX_F32, 2, (const int64_t[]){rows, 3}, -1, 1, 20 + (unsigned)rows);
}

/* Jobs.Get through its handler (daemon/handlers-jobs.c) on j and f's store: the reply's Job
 * (free with rtx__v1__job__free_unpacked(m, NULL)). */
static Rtx__V1__Job *get_via_handler(struct rtx_jobs *j, struct fx *f, const char *id) {
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    d.store = f->store;
    d.jobs = j;
    Rtx__V1__GetJobRequest req = RTX__V1__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)id;
    uint8_t buf[128];
    ck_assert_uint_le(rtx__v1__get_job_request__get_packed_size(&req), sizeof buf);
    size_t len = rtx__v1__get_job_request__pack(&req, buf);
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    rtx__daemon_jobs_get(&d, buf, len, &rep);
    ck_assert_msg(rep.code == GRPC_STATUS_OK, "%s", rep.msg);
    Rtx__V1__Job *m = rtx__v1__job__unpack(NULL, rep.len, rep.data);
    ck_assert_ptr_nonnull(m);
    rtx_free(rep.data);
    rtx__daemon_close(&d);
    return m;
}

/* /metrics of a daemon whose job manager is j (rtx_free the text). */
static char *metrics_of(struct rtx_jobs *j, struct fx *f) {
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    d.store = f->store;
    d.jobs = j;
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(rtx_metrics_render(&d, &text, &len, &err) == 0, "%s", err.msg);
    rtx__daemon_close(&d);
    return text;
}

START_TEST(same_graph_reuses_its_plan) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN];
    struct rtx_jobs_run r1 = run_ok(j, &f, g, x, NULL, a);
    struct rtx_jobs_run r2 = run_ok(j, &f, g, x, NULL, b);
    ck_assert(!r1.plan_reused);
    ck_assert(r2.plan_reused);
    ck_assert_int_eq(r1.mode, RTX_EXEC_PLAIN); /* the CPU never captures */
    ck_assert_int_eq(r2.mode, RTX_EXEC_PLAIN);
    ck_assert_int_eq(r2.nodes_run, 3);
    ck_assert_str_eq(r2.device, "cpu");
    char sa[65], sb[65];
    output_sha(&f, a, sa);
    output_sha(&f, b, sb);
    ck_assert_str_eq(sa, sb);

    struct rtx_jobs_device d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_misses, 1);
    ck_assert_int_eq(d.plan_cache_hits, 1);
    ck_assert_int_eq(d.plan_cache_evictions, 0);
    ck_assert_int_eq(d.plan_cache_plans, 1);
    /* initializers 48 + 16, input 24, output 32 bytes, and the arena */
    ck_assert_uint_ge(d.plan_cache_bytes, 120);
    ck_assert_int_eq(d.workers_warm, 0); /* the CPU has no warm-up */

    /* only jobs that succeeded here have a run */
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, "jnosuch", &run), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_jobs_get_run(j, "", &run), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_jobs_get_run(j, NULL, &run), RTX_ENOTFOUND);

    /* Jobs.Get reports the run */
    Rtx__V1__Job *m = get_via_handler(j, &f, a);
    ck_assert_str_eq(m->exec_mode, "plain");
    ck_assert(!m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);
    m = get_via_handler(j, &f, b);
    ck_assert_str_eq(m->exec_mode, "plain");
    ck_assert(m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);

    /* and /metrics the counters */
    char *text = metrics_of(j, &f);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE rtxd_job_plan_cache_hits_total counter\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtxd_job_plan_cache_hits_total{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtxd_job_plan_cache_misses_total{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "\nrtxd_job_plan_cache_evictions_total{device=\"cpu\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtxd_job_plan_cache_plans{device=\"cpu\"} 1\n"));
    rtx_free(text);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(other_shapes_and_contents_miss) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph(), *same_name = small_graph_seeded(99);
    struct rtx_tensor *x2 = rows_x(2), *x5 = rows_x(5);
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN], c[RTX_JOB_ID_LEN], e[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, x2, NULL, a).plan_reused);
    ck_assert(!run_ok(j, &f, g, x5, NULL, b).plan_reused);       /* another shape */
    ck_assert(run_ok(j, &f, g, x2, NULL, c).plan_reused);        /* the first again */
    ck_assert(!run_ok(j, &f, same_name, x2, NULL, e).plan_reused); /* "small", other weights */
    char sa[65], sc[65], se[65];
    output_sha(&f, a, sa);
    output_sha(&f, c, sc);
    output_sha(&f, e, se);
    ck_assert_str_eq(sa, sc);
    ck_assert_str_ne(sa, se); /* computed with its own weights, not the kept plan's */
    struct rtx_job_info info = get_job(f.store, e);
    ck_assert_str_eq(info.graph_name, "small");
    rtx_job_info_clear(&info);
    struct rtx_jobs_device d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_misses, 3);
    ck_assert_int_eq(d.plan_cache_hits, 1);
    ck_assert_int_eq(d.plan_cache_plans, 3);
    rtx_tensor_unref(x5);
    rtx_graph_free(same_name);
    finish(&f, j, g, x2);
}
END_TEST

START_TEST(cache_evicts_least_recently_used) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.plan_cache = 2;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *xa = rows_x(1), *xb = rows_x(2), *xc = rows_x(3);
    char id[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, xa, NULL, id).plan_reused); /* A */
    ck_assert(!run_ok(j, &f, g, xb, NULL, id).plan_reused); /* B */
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);  /* A, now the most recent */
    ck_assert(!run_ok(j, &f, g, xc, NULL, id).plan_reused); /* C drops B */
    struct rtx_jobs_device d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_evictions, 1);
    ck_assert_int_eq(d.plan_cache_plans, 2);
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);  /* A stayed */
    ck_assert(!run_ok(j, &f, g, xb, NULL, id).plan_reused); /* B was dropped; drops C */
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);
    d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_hits, 3);
    ck_assert_int_eq(d.plan_cache_misses, 4);
    ck_assert_int_eq(d.plan_cache_evictions, 2);
    ck_assert_int_eq(d.plan_cache_plans, 2);
    rtx_tensor_unref(xb);
    rtx_tensor_unref(xc);
    finish(&f, j, g, xa);
}
END_TEST

START_TEST(cache_evicts_by_bytes) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x1 = rows_x(1), *x8 = rows_x(8), *x64 = rows_x(64);
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, g, x8, NULL, id);
    size_t bytes8 = dev_stats(j, 0).plan_cache_bytes; /* what the 8-row plan may hold */
    rtx_jobs_stop(j);

    o.plan_cache_bytes = bytes8; /* room for the 8-row plan alone */
    j = start(&o);
    ck_assert(!run_ok(j, &f, g, x8, NULL, id).plan_reused);
    ck_assert_uint_eq(dev_stats(j, 0).plan_cache_bytes, bytes8);
    ck_assert(!run_ok(j, &f, g, x64, NULL, id).plan_reused); /* larger than the bound: not kept */
    struct rtx_jobs_device d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_plans, 1);
    ck_assert_int_eq(d.plan_cache_evictions, 0);
    ck_assert(!run_ok(j, &f, g, x64, NULL, id).plan_reused);
    ck_assert(run_ok(j, &f, g, x8, NULL, id).plan_reused);
    ck_assert(!run_ok(j, &f, g, x1, NULL, id).plan_reused); /* fits alone: drops the 8-row plan */
    d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_plans, 1);
    ck_assert_int_eq(d.plan_cache_evictions, 1);
    ck_assert_uint_lt(d.plan_cache_bytes, bytes8);
    ck_assert(!run_ok(j, &f, g, x8, NULL, id).plan_reused);
    rtx_tensor_unref(x1);
    rtx_tensor_unref(x64);
    finish(&f, j, g, x8);
}
END_TEST

START_TEST(cache_off_plans_every_job) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.plan_cache = 0;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, x, NULL, a).plan_reused);
    ck_assert(!run_ok(j, &f, g, x, NULL, b).plan_reused);
    char sa[65], sb[65];
    output_sha(&f, a, sa);
    output_sha(&f, b, sb);
    ck_assert_str_eq(sa, sb);
    struct rtx_jobs_device d = dev_stats(j, 0);
    ck_assert_int_eq(d.plan_cache_hits, 0);
    ck_assert_int_eq(d.plan_cache_misses, 0);
    ck_assert_int_eq(d.plan_cache_plans, 0);
    ck_assert_uint_eq(d.plan_cache_bytes, 0);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(repeated_gpu_job_replays) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    fake_capture = true;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    fake_capture = false;
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x(), *x2 = rows_x(2);
    char cpu[RTX_JOB_ID_LEN], ids[4][RTX_JOB_ID_LEN];
    run_ok(j, &f, g, x, "cpu", cpu);
    const enum rtx_exec_mode want[3] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED, RTX_EXEC_REPLAYED};
    char want_sha[65], sha[65];
    output_sha(&f, cpu, want_sha);
    struct rec r;
    rec_init(&r);
    for (int i = 0; i < 3; i++) {
        struct rtx_jobs_run run = run_ok(j, &f, g, x, "cuda:0", ids[i]);
        ck_assert_msg(run.mode == want[i], "job %d ran %s", i, rtx_exec_mode_name(run.mode));
        ck_assert(run.plan_reused == (i > 0));
        ck_assert_str_eq(run.device, "cuda:0");
        output_sha(&f, ids[i], sha);
        ck_assert_str_eq(sha, want_sha); /* the replayed graph computes what the CPU did */
    }
    /* the warm-up launched one graph, the second and third jobs one each */
    ck_assert_ptr_nonnull(fake_made[0]);
    ck_assert_int_eq(__atomic_load_n(&fake_made[0]->launches, __ATOMIC_SEQ_CST), 3);

    /* other values of the same shape: replayed on the new inputs */
    ck_assert_int_eq(run_ok(j, &f, g, x2, "cuda:0", ids[3]).mode, RTX_EXEC_REPLAYED);
    run_ok(j, &f, g, x2, "cpu", cpu);
    output_sha(&f, cpu, want_sha);
    output_sha(&f, ids[3], sha);
    ck_assert_str_eq(sha, want_sha);

    /* a watcher hears how the job ran, and so does Jobs.Get */
    uint64_t w;
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_watch(j, ids[2], rec_cb, &r, &w, &err) == 0);
    rec_wait_last(&r, 10000);
    ck_assert_int_eq(r.n, 1);
    ck_assert(r.have_run[0]);
    ck_assert_int_eq(r.runs[0].mode, RTX_EXEC_REPLAYED);
    ck_assert(r.runs[0].plan_reused);
    Rtx__V1__Job *m = get_via_handler(j, &f, ids[2]);
    ck_assert_str_eq(m->exec_mode, "replayed");
    ck_assert(m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);
    struct rtx_jobs_device d = dev_stats(j, 1);
    ck_assert_int_eq(d.plan_cache_hits, 3);
    ck_assert_int_eq(d.plan_cache_misses, 1);
    rtx_tensor_unref(x2);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(watch_of_a_new_job_gets_its_run) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(200), *g = small_graph();
    struct rtx_tensor *xl = long_x(), *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy); /* keeps the worker until the watch is set */
    submit_ok(j, g, x, NULL, id);
    struct rec r;
    rec_init(&r);
    uint64_t w;
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_watch(j, id, rec_cb, &r, &w, &err) == 0);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    rec_wait_last(&r, 10000);
    ck_assert_int_eq(r.n, 3); /* queued, running, succeeded */
    ck_assert(!r.have_run[0] && !r.have_run[1]);
    ck_assert_int_eq(r.states[2], RTX_JOB_SUCCEEDED);
    ck_assert(r.have_run[2]);
    ck_assert_int_eq(r.runs[2].mode, RTX_EXEC_PLAIN);
    ck_assert_str_eq(r.runs[2].device, "cpu");
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

/* The run records keep the latest RTX_JOBS_RUNS_KEPT runs: older ones are forgotten, every
 * later one is still found (the ring's slots are reused and unlinked from their buckets). */
START_TEST(run_records_keep_the_latest) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    enum { N = RTX_JOBS_RUNS_KEPT + 3, BATCH = 500 };
    char (*ids)[RTX_JOB_ID_LEN] = calloc(N, sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++) {
        bool dedup;
        struct rtx_err err = {0};
        ck_assert_msg(rtx_jobs_submit(j, req, len, ids[i], &dedup, &err) == 0, "%s", err.msg);
        if (i % BATCH == BATCH - 1 || i == N - 1) settle(j);
    }
    struct rtx_jobs_run run;
    for (int i = 0; i < N; i++) {
        int rc = rtx_jobs_get_run(j, ids[i], &run);
        ck_assert_msg(rc == (i < 3 ? RTX_ENOTFOUND : 0), "job %d of %d: %d", i, N, rc);
    }
    ck_assert(run.plan_reused);
    ck_assert_int_eq(dev_stats(j, 0).plan_cache_hits, N - 1);
    free(ids);
    free(req);
    finish(&f, j, g, x);
}
END_TEST

/* A job whose outputs cannot be journaled (its journal row left "running" under it) failed
 * after all: its run is forgotten again, and its plan is kept anyway (the run itself was fine). */
START_TEST(run_is_forgotten_when_outputs_are_not_journaled) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(40);
    struct rtx_tensor *xl = long_x();
    char id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, id);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_set_state(f.store, id, RTX_JOB_FAILED, "moved by the test",
                                          wall_ms(), &err) == 0, "%s", err.msg);
    settle(j);
    struct rtx_job_info info = get_job(f.store, id);
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, id, &run), RTX_ENOTFOUND);
    ck_assert_int_eq(dev_stats(j, 0).plan_cache_plans, 1);
    rtx_tensor_unref(xl);
    finish(&f, j, lg, NULL);
}
END_TEST

/* Waits until device slot `slot` keeps `plans` plans. */
static struct rtx_jobs_device wait_plans(struct rtx_jobs *j, int slot, int plans) {
    for (int waited = 0;; waited++) {
        struct rtx_jobs_device d = dev_stats(j, slot);
        if (d.plan_cache_plans == plans) return d;
        ck_assert_msg(waited < 10000, "slot %d keeps %d plans, not %d", slot,
                      d.plan_cache_plans, plans);
        usleep(1000);
    }
}

START_TEST(lost_device_drops_its_plans) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *sticky = named_graph("sticky_relu");
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, ok, x, "cuda:0", id);
    ck_assert_int_eq(dev_stats(j, 1).plan_cache_plans, 1);
    struct rtx_job_info info = run_on(j, &f, sticky, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    ck_assert(!dev_stats(j, 1).healthy);
    struct rtx_jobs_device d = wait_plans(j, 1, 0);
    ck_assert_int_eq(d.plan_cache_evictions, 1);
    ck_assert_uint_eq(d.plan_cache_bytes, 0);
    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(out_of_memory_drops_kept_plans) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *oom = named_graph("oom_relu");
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, ok, x, "cuda:0", id);
    ck_assert_int_eq(dev_stats(j, 1).plan_cache_plans, 1);
    struct rtx_job_info info = run_on(j, &f, oom, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "node 'oom_relu': out of device memory (fake)");
    rtx_job_info_clear(&info);
    settle(j);
    struct rtx_jobs_device d = dev_stats(j, 1);
    ck_assert(d.healthy);
    ck_assert_int_eq(d.plan_cache_plans, 0); /* dropped before the job ran again */
    ck_assert_int_eq(d.plan_cache_evictions, 1);
    ck_assert(!run_ok(j, &f, ok, x, "cuda:0", id).plan_reused);
    rtx_graph_free(ok);
    rtx_graph_free(oom);
    finish(&f, j, NULL, x);
}
END_TEST

/* The device pool allocations of cuda:0 (the fake counts the buffers its backends made). */
static uint64_t cuda0_allocs(struct rtx_jobs *j) {
    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_str_eq(rows[0].device, "cuda:0");
    return rows[0].total.n_allocs;
}

START_TEST(gpu_workers_warm_up_before_jobs) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 2, &o);
    for (int slot = 1; slot <= 2; slot++) {
        struct rtx_jobs_device d = wait_warm(j, slot);
        ck_assert_int_eq(d.workers_warm, 2);
        ck_assert(d.warmup_ms > 0);
        ck_assert_int_eq(d.jobs_started, 0);
    }
    ck_assert_int_eq(dev_stats(j, 0).workers_warm, 0);
    ck_assert_uint_ge(cuda0_allocs(j), 2); /* the warm-up ran on both workers' backends */
    rtx_jobs_stop(j);

    /* a backend that cannot run the warm-up graph is not warmed up, and still takes jobs */
    fake_refuse_op = RTX_OP_TANH;
    j = start(&o);
    wait_warm(j, 1);
    ck_assert_uint_eq(cuda0_allocs(j), 0);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    ck_assert_str_eq(run_ok(j, &f, g, x, "cuda:0", id).device, "cuda:0");
    fake_refuse_op = -1;
    finish(&f, j, g, x);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Lane settings changed by SIGHUP (rtx_jobs_reconfigure)
 * ---------------------------------------------------------------------------------------- */

/* Queued jobs stay when a lane's bound drops below their number, new ones are refused until
 * the lane drains, and the stats show the new settings; another lane set is refused. */
START_TEST(reconfigure_changes_lanes_of_queued_work) {
    struct fx f;
    fx_open(&f);
    struct rtx_sched_config sc = sched_cfg(10);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    o.sched = &sc;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(1000), *g = small_graph();
    struct rtx_tensor *xl = long_x(), *x = small_x();
    char busy[RTX_JOB_ID_LEN], ids[3][RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy);
    for (int i = 0; i < 3; i++)
        submit_ok(j, g, x, NULL, ids[i]); /* batch */
    struct rtx_sched_config next = sc;
    next.lanes[0].target_ns = 20 * 1000 * 1000;
    next.lanes[2].weight = 5;
    next.lanes[2].max_queued = 2;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_reconfigure(j, &next, &err) == 0, "%s", err.msg);
    struct rtx_sched_lane_stats rt = cpu_lane(j, "realtime"), ba = cpu_lane(j, "batch");
    ck_assert_int_eq(rt.config.target_ns, 20 * 1000 * 1000);
    ck_assert_int_eq(ba.config.weight, 5);
    ck_assert_int_eq(ba.config.max_queued, 2);
    ck_assert_int_eq(ba.queued, 3);
    bool dedup = false;
    ck_assert_int_eq(submit_x(j, g, x, NULL, id, &dedup, &err), RTX_EOVERLOAD);
    ck_assert_msg(strstr(err.msg, "(lane_full)") && strstr(err.msg, "bound 2"), "%s", err.msg);

    /* names or order differ: refused, nothing changes */
    struct rtx_sched_config other = next;
    other.lanes[2].weight = 9;
    snprintf(other.lanes[1].name, sizeof other.lanes[1].name, "bulk");
    ck_assert_int_eq(rtx_jobs_reconfigure(j, &other, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "jobs: the scheduler of cpu") && strstr(err.msg, "lanes"), "%s",
                  err.msg);
    ck_assert_int_eq(cpu_lane(j, "batch").config.weight, 5);
    ck_assert_int_eq(rtx_jobs_reconfigure(NULL, &next, &err), RTX_EINVAL);

    /* the queued jobs run; then the lane admits again */
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(wait_state(f.store, ids[i], 0, 10000), RTX_JOB_SUCCEEDED);
    submit_ok(j, g, x, NULL, id);
    ck_assert_int_eq(wait_state(f.store, id, 0, 10000), RTX_JOB_SUCCEEDED);
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

/* Every device's scheduler takes the new settings with its own executors, or none does. */
START_TEST(reconfigure_reaches_every_device_or_none) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 2, &o);
    wait_warm(j, 1);
    wait_warm(j, 2);
    struct rtx_sched_config next;
    rtx_sched_config_init(&next);
    next.lanes[0].target_ns = 20 * 1000 * 1000;
    next.lanes[0].weight = 3;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_reconfigure(j, &next, &err) == 0, "%s", err.msg);
    struct rtx_jobs_lanes *l = malloc(sizeof *l);
    ck_assert_ptr_nonnull(l);
    rtx_jobs_get_lanes(j, l);
    ck_assert_int_eq(l->n_devices, 3);
    for (int d = 0; d < l->n_devices; d++) {
        const struct rtx_sched_stats *st = &l->devices[d].stats;
        ck_assert_int_eq(st->lanes[0].config.target_ns, 20 * 1000 * 1000);
        ck_assert_int_eq(st->lanes[0].config.weight, 3);
        ck_assert_int_eq(st->executors, l->devices[d].workers); /* kept: 1, 2, 2 */
    }
    ck_assert_int_eq(l->devices[1].workers, 2);

    /* a raised bound allocates: out of memory at any step leaves every scheduler as it was */
    next.lanes[2].max_queued = 50000;
    int rc = RTX_ENOMEM;
    long n;
    for (n = 1; rc == RTX_ENOMEM; n++) {
        ck_assert_int_lt(n, 100);
        rtx_alloc_fail_after(n);
        rc = rtx_jobs_reconfigure(j, &next, &err);
        rtx_alloc_fail_after(0);
        rtx_jobs_get_lanes(j, l);
        for (int d = 0; d < l->n_devices; d++)
            ck_assert_int_eq(l->devices[d].stats.lanes[2].config.max_queued,
                             rc == 0 ? 50000 : 20000);
        if (rc) ck_assert_msg(strstr(err.msg, "out of memory"), "%s", err.msg);
    }
    /* storage a failed attempt grew is kept, so each attempt gets further: the later failures
     * came after the CPU's scheduler had changed, and undid it (checked above) */
    ck_assert_int_ge(n, 4);
    free(l);
    finish(&f, j, NULL, NULL);
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
    tcase_add_test(tc, lanes_served_by_priority_and_weight);
    tcase_add_test(tc, concurrent_submitters);
    tcase_add_test(tc, submit_returns_id_of_job_finished_before_it_returns);
    tcase_add_test(tc, throughput_one_worker);
    tcase_add_test(tc, submit_out_of_memory_loop);
    tcase_add_test(tc, start_rejects_bad_options);
    suite_add_tcase(s, tc);
    TCase *sc = tcase_create("scheduler");
    tcase_set_timeout(sc, 120);
    tcase_add_test(sc, admission_refuses_and_journals_nothing);
    tcase_add_test(sc, lane_is_selected_from_request_or_default);
    tcase_add_test(sc, expiry_on_simulated_clock);
    tcase_add_test(sc, cancel_goes_through_the_scheduler);
    tcase_add_test(sc, learned_costs_persist);
    tcase_add_test(sc, reconfigure_changes_lanes_of_queued_work);
    tcase_add_test(sc, reconfigure_reaches_every_device_or_none);
    suite_add_tcase(s, sc);
    TCase *dc = tcase_create("devices");
    tcase_set_timeout(dc, 120);
    tcase_add_test(dc, gpu_jobs_are_placed_by_device);
    tcase_add_test(dc, device_field_is_validated);
    tcase_add_test(dc, unsupported_node_goes_to_cpu_or_is_refused);
    tcase_add_test(dc, sticky_error_marks_device_unhealthy);
    tcase_add_test(dc, ordinary_device_error_fails_the_job_only);
    tcase_add_test(dc, lost_device_fails_stranded_jobs);
    tcase_add_test(dc, recovery_fails_jobs_for_missing_devices);
    tcase_add_test(dc, pools_sum_the_workers_pools);
    suite_add_tcase(s, dc);
    TCase *pc = tcase_create("plans");
    tcase_set_timeout(pc, 120);
    tcase_add_test(pc, same_graph_reuses_its_plan);
    tcase_add_test(pc, other_shapes_and_contents_miss);
    tcase_add_test(pc, cache_evicts_least_recently_used);
    tcase_add_test(pc, cache_evicts_by_bytes);
    tcase_add_test(pc, cache_off_plans_every_job);
    tcase_add_test(pc, repeated_gpu_job_replays);
    tcase_add_test(pc, watch_of_a_new_job_gets_its_run);
    tcase_add_test(pc, run_records_keep_the_latest);
    tcase_add_test(pc, run_is_forgotten_when_outputs_are_not_journaled);
    tcase_add_test(pc, lost_device_drops_its_plans);
    tcase_add_test(pc, out_of_memory_drops_kept_plans);
    tcase_add_test(pc, gpu_workers_warm_up_before_jobs);
    suite_add_tcase(s, pc);
    return s;
}
