/*
 * test-jobs-queue.c - the job manager's queue across restarts and under load: recovery of
 * journaled jobs by restart policy (and the current default for jobs without one), drain,
 * the queue bound, lane order by priority and weight, concurrent submitters, a job that
 * finishes before its Submit returns, the throughput of tiny jobs (printed), an out-of-memory
 * loop over admission, and the options rtx_jobs_start refuses.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "rtx/v1/jobs.pb-c.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-util.h"

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
    /* the plan cache's bounds are the device set's now (rtx_devices_new checks them) */
    o = jobs_opts(&f, 1);
    o.devices = NULL;
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    o = jobs_opts(&f, 1);
    o.jobs_reserve = 1.5;
    ck_assert_int_eq(rtx_jobs_start(&o, &j, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "jobs_reserve"), "%s", err.msg);
    ck_assert_ptr_null(j);
    rtx_jobs_stop(NULL);
    fx_close(&f);
}
END_TEST

Suite *rtx_jobs_queue_suite(void) {
    Suite *s = suite_create("jobs_queue");
    TCase *tc = tcase_create("queue");
    tcase_set_timeout(tc, 120);
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
    return s;
}
