/*
 * test-jobs-sched.c - the SLA scheduler inside the job manager: admission refusals (not
 * journaled), lane selection, expiry on a simulated clock, cancellation and EDF order,
 * learned costs kept in the store, and new lane settings (SIGHUP) for queued work and for
 * every device's scheduler or none.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-util.h"

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


Suite *rtx_jobs_sched_suite(void) {
    Suite *s = suite_create("jobs_sched");
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
    return s;
}
