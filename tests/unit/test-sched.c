/*
 * test-sched.c - the SLA scheduler (scheduler/sched.h) on a simulated clock: lane config
 * parsing and checks, EDF order inside a lane, weighted shares across lanes (8:2:1 within 5%
 * over 10k dispatches), work conservation and no banked credit, admission decisions (lane
 * full, deadline unmeetable, accepted, with retry hints), expiry (dispatch, sweep, delaying
 * lanes), cancellation (queued, delayed, running, stale handles), brownout entry and exit
 * with hysteresis, learned costs and their persistence hooks, preemption, wait percentiles,
 * out-of-memory behaviour (creation fails cleanly; the hot path never allocates), and live
 * reconfiguration (new shares, bounds, targets, timeout actions and knobs; refusals).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/sched.h"

#define US 1000LL
#define MS (1000 * US)
#define SEC (1000 * MS)
#define T0 (100 * SEC) /* the simulated clock's start */

/* A scheduler with the default lanes and the given executors; fails the test on error. */
static struct rtx_sched *make(const struct rtx_sched_config *cfg) {
    struct rtx_sched *s = NULL;
    struct rtx_err err = {0};
    int rc = rtx_sched_new(cfg, T0, &s, &err);
    ck_assert_msg(rc == 0, "rtx_sched_new: %s", err.msg);
    return s;
}

static struct rtx_sched_config defaults(void) {
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    return cfg;
}

static uint64_t enq(struct rtx_sched *s, int lane, int64_t deadline, int64_t cost, intptr_t tag,
                    int64_t now) {
    struct rtx_sched_request r = {
        .data = (void *)tag, .lane = lane, .deadline_ns = deadline, .cost_ns = cost};
    uint64_t h = 0;
    struct rtx_sched_reject rej = {0};
    int rc = rtx_sched_enqueue(s, &r, now, &h, &rej);
    ck_assert_msg(rc == 0, "enqueue refused: %s", rej.msg);
    ck_assert_uint_ne(h, 0);
    return h;
}

/* Dispatches one item that must be RUN; returns its tag. */
static intptr_t run_one(struct rtx_sched *s, int64_t now, struct rtx_sched_item *out) {
    struct rtx_sched_item it;
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_RUN);
    if (out) *out = it;
    return (intptr_t)it.data;
}

/* Ticks s every 10 ms, at now + from_ms, now + from_ms + 10 ms, ... up to now + to_ms. */
static void tick_span(struct rtx_sched *s, int64_t now, int from_ms, int to_ms) {
    for (int t = from_ms; t <= to_ms; t += 10)
        rtx_sched_tick(s, now + t * MS);
}

/* Dispatches n items at now and finishes each as OK after cost_ns of running. */
static void run_n(struct rtx_sched *s, int64_t now, int n, int64_t cost_ns) {
    struct rtx_sched_item it;
    for (int i = 0; i < n; i++) {
        run_one(s, now, &it);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, cost_ns, now);
    }
}

/* ------------------------------------------------------------------------------------------
 * Config
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_config_defaults_are_valid) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_sched_config_check(&cfg, &err), 0);
    ck_assert_int_eq(cfg.n_lanes, 3);
    ck_assert_str_eq(cfg.lanes[0].name, "realtime");
    ck_assert_str_eq(cfg.lanes[1].name, "interactive");
    ck_assert_str_eq(cfg.lanes[2].name, "batch");
    ck_assert(cfg.lanes[0].target_ns < cfg.lanes[1].target_ns);
    ck_assert(cfg.lanes[1].target_ns < cfg.lanes[2].target_ns);
    ck_assert_int_eq(cfg.lanes[0].weight, 8);
    ck_assert_int_eq(cfg.lanes[1].weight, 2);
    ck_assert_int_eq(cfg.lanes[2].weight, 1);
    ck_assert(cfg.lanes[2].preemptible);
    ck_assert(cfg.brownout_exit_pressure < cfg.brownout_enter_pressure);
}
END_TEST

START_TEST(sched_config_parses_lane_sections) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_err err = {0};
    const char *ini = "[server]\n"
                      "listen = 127.0.0.1:9001\n"
                      "[lane.realtime]\n"
                      "target_p99_us = 20000\n"
                      "weight = 16\n"
                      "[lane.bulk]\n"
                      "max_queued = 7\n"
                      "on_timeout = delay\n"
                      "preemptible = yes\n"
                      "[scheduler]\n"
                      "executors = 3\n"
                      "brownout_window_ms = 250\n"
                      "cost_ema_alpha = 0.5\n";
    int rc = rtx_sched_config_parse(&cfg, ini, "rtxd.ini", &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(cfg.n_lanes, 4);
    ck_assert_int_eq(cfg.lanes[0].target_ns, 20 * MS);
    ck_assert_int_eq(cfg.lanes[0].weight, 16);
    ck_assert_str_eq(cfg.lanes[3].name, "bulk");
    ck_assert_int_eq(cfg.lanes[3].max_queued, 7);
    ck_assert_int_eq(cfg.lanes[3].on_timeout, RTX_SCHED_TIMEOUT_DELAY);
    ck_assert(cfg.lanes[3].preemptible);
    ck_assert_int_eq(cfg.lanes[3].weight, 1);
    ck_assert_int_eq(cfg.executors, 3);
    ck_assert_int_eq(cfg.brownout_window_ns, 250 * MS);
    ck_assert(cfg.cost_ema_alpha == 0.5);
    ck_assert_int_eq(rtx_sched_config_check(&cfg, &err), 0);
}
END_TEST

START_TEST(sched_config_errors_name_line_and_setting) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_sched_config_parse(&cfg, "[lane.batch]\nweight = 0\n", "f.ini", &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "f.ini:2") && strstr(err.msg, "weight") &&
                      strstr(err.msg, "out of range"),
                  "%s", err.msg);
    ck_assert_int_eq(cfg.lanes[2].weight, 1); /* unchanged */
    ck_assert_int_eq(rtx_sched_config_parse(&cfg, "[lane.batch]\nspeed = 3\n", "f.ini", &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "unknown lane setting"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_config_parse(&cfg, "[lane.Bad!]\nweight = 3\n", "f.ini", &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "outside [a-z0-9_-]"), "%s", err.msg);
    ck_assert_int_eq(
        rtx_sched_config_parse(&cfg, "[lane.batch]\non_timeout = later\n", "f.ini", &err),
        RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "reject or delay"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_config_parse(&cfg, "[scheduler]\nexecutors = x\n", "f", &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "not an integer"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_config_parse(&cfg, "no section line\n", "f.ini", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "f.ini:1"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_config_set(&cfg, "server", "listen", "x", &err), RTX_ENOTFOUND);
    /* a 17th lane */
    for (int i = 0; i < RTX_SCHED_MAX_LANES - 3; i++) {
        char sec[32];
        snprintf(sec, sizeof sec, "lane.l%d", i);
        ck_assert_int_eq(rtx_sched_config_set(&cfg, sec, "weight", "2", &err), 0);
    }
    ck_assert_int_eq(rtx_sched_config_set(&cfg, "lane.one-more", "weight", "2", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "more than 16 lanes"), "%s", err.msg);
}
END_TEST

START_TEST(sched_config_check_rejects_inconsistent_settings) {
    struct rtx_err err = {0};
    struct rtx_sched_config cfg = defaults();
    cfg.brownout_exit_pressure = cfg.brownout_enter_pressure;
    ck_assert_int_eq(rtx_sched_config_check(&cfg, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "hysteresis"), "%s", err.msg);
    cfg = defaults();
    cfg.executors = 8;
    cfg.max_running = 4;
    ck_assert_int_eq(rtx_sched_config_check(&cfg, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "max_running"), "%s", err.msg);
    cfg = defaults();
    strcpy(cfg.lanes[1].name, "realtime");
    ck_assert_int_eq(rtx_sched_config_check(&cfg, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "defined twice"), "%s", err.msg);
    cfg = defaults();
    cfg.n_lanes = 0;
    struct rtx_sched *s = (struct rtx_sched *)&cfg; /* must be cleared on failure */
    ck_assert_int_eq(rtx_sched_new(&cfg, T0, &s, &err), RTX_EINVAL);
    ck_assert_ptr_null(s);
}
END_TEST

START_TEST(sched_config_select_lanes_keeps_order_and_settings) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_sched_config_select_lanes(&cfg, "batch, realtime,gold", &err), 0);
    ck_assert_int_eq(cfg.n_lanes, 3);
    ck_assert_str_eq(cfg.lanes[0].name, "batch");
    ck_assert_int_eq(cfg.lanes[0].weight, 1);
    ck_assert_str_eq(cfg.lanes[1].name, "realtime");
    ck_assert_int_eq(cfg.lanes[1].weight, 8);
    ck_assert_str_eq(cfg.lanes[2].name, "gold");
    ck_assert_int_eq(cfg.lanes[2].target_ns, 1 * SEC);
    ck_assert_int_eq(rtx_sched_config_select_lanes(&cfg, "a,b,a", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "listed twice"), "%s", err.msg);
    ck_assert_int_eq(cfg.n_lanes, 3);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Dispatch order
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_edf_order_within_lane) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    int64_t now = T0;
    /* deadlines in a scrambled order; ties keep arrival order */
    static const int64_t offs[] = {900, 100, 500, 300, 700, 200, 800, 400, 600, 300};
    for (int i = 0; i < 10; i++)
        enq(s, 2, now + offs[i] * SEC, 1 * MS, i, now);
    int64_t last = 0;
    intptr_t prev_tag = -1;
    for (int i = 0; i < 10; i++) {
        struct rtx_sched_item it;
        intptr_t tag = run_one(s, now, &it);
        ck_assert_int_ge(it.deadline_ns, last);
        if (it.deadline_ns == last) ck_assert_int_gt(tag, prev_tag);
        last = it.deadline_ns;
        prev_tag = tag;
        ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, now), 0);
    }
    struct rtx_sched_item it;
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_NONE);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_item_without_deadline_sorts_at_arrival_plus_target) {
    struct rtx_sched_config cfg = defaults(); /* batch target 60 s */
    struct rtx_sched *s = make(&cfg);
    enq(s, 2, 0, 1 * MS, 1, T0);             /* key T0 + 60 s */
    enq(s, 2, T0 + 90 * SEC, 1 * MS, 2, T0); /* after it */
    enq(s, 2, T0 + 30 * SEC, 1 * MS, 3, T0); /* before it */
    ck_assert_int_eq(run_one(s, T0, NULL), 3);
    ck_assert_int_eq(run_one(s, T0, NULL), 1);
    ck_assert_int_eq(run_one(s, T0, NULL), 2);
    rtx_sched_free(s);
}
END_TEST

/* Keeps every lane in `lanes` backlogged, dispatches n items of equal cost and counts them. */
static void dispatch_backlogged(struct rtx_sched *s, uint32_t lanes, int n, int64_t cost,
                                int64_t counts[RTX_SCHED_MAX_LANES]) {
    int64_t now = T0;
    memset(counts, 0, sizeof(int64_t) * RTX_SCHED_MAX_LANES);
    for (int l = 0; l < RTX_SCHED_MAX_LANES; l++)
        if (lanes & (1u << l))
            for (int k = 0; k < 4; k++)
                enq(s, l, 0, cost, l, now);
    for (int i = 0; i < n; i++) {
        struct rtx_sched_item it;
        int lane = (int)run_one(s, now, &it);
        counts[lane]++;
        ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, cost, now), 0);
        enq(s, lane, 0, cost, lane, now);
    }
}

START_TEST(sched_weighted_shares_8_2_1_within_5_percent) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    int64_t counts[RTX_SCHED_MAX_LANES];
    const int n = 10000;
    dispatch_backlogged(s, 0x7, n, 1 * MS, counts);
    static const double w[3] = {8, 2, 1};
    for (int l = 0; l < 3; l++) {
        double want = n * w[l] / 11.0;
        ck_assert_msg(counts[l] >= want * 0.95 && counts[l] <= want * 1.05,
                      "lane %d: %lld dispatches, want %.0f +- 5%%", l, (long long)counts[l], want);
    }
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_shares_follow_cost_not_count) {
    /* equal weights, lane 1's items cost 3x: it gets a third of the dispatches of lane 0 */
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[0].weight = cfg.lanes[1].weight = 1;
    struct rtx_sched *s = make(&cfg);
    int64_t now = T0, counts[2] = {0, 0};
    for (int k = 0; k < 4; k++) {
        enq(s, 0, 0, 1 * MS, 0, now);
        enq(s, 1, 0, 3 * MS, 1, now);
    }
    for (int i = 0; i < 4000; i++) {
        struct rtx_sched_item it;
        int lane = (int)run_one(s, now, &it);
        counts[lane]++;
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, it.cost_ns, now);
        enq(s, lane, 0, lane ? 3 * MS : 1 * MS, lane, now);
    }
    ck_assert_msg(counts[0] >= 2900 && counts[0] <= 3100, "lane 0: %lld of 4000",
                  (long long)counts[0]);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_work_conserving_idle_lane_share_goes_to_others) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    int64_t counts[RTX_SCHED_MAX_LANES];
    const int n = 9000;
    dispatch_backlogged(s, 0x5, n, 1 * MS, counts); /* realtime and batch only */
    ck_assert_int_eq(counts[1], 0);
    ck_assert_int_eq(counts[0] + counts[2], n); /* every dispatch found work */
    double want0 = n * 8.0 / 9.0;
    ck_assert_msg(counts[0] >= want0 * 0.95 && counts[0] <= want0 * 1.05, "realtime: %lld",
                  (long long)counts[0]);
    /* interactive joins after idling through 9000 dispatches: it gets its share from now on,
     * no burst from credit banked while idle */
    int64_t now = T0;
    for (int k = 0; k < 4; k++)
        enq(s, 1, 0, 1 * MS, 1, now);
    int64_t got[3] = {0, 0, 0};
    for (int i = 0; i < 110; i++) {
        struct rtx_sched_item it;
        int lane = (int)run_one(s, now, &it);
        got[lane]++;
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, now);
        enq(s, lane, 0, 1 * MS, lane, now);
    }
    ck_assert_msg(got[1] >= 18 && got[1] <= 22, "interactive got %lld of 110 (want ~20)",
                  (long long)got[1]);
    rtx_sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Admission
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_admission_lane_full) {
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[1].max_queued = 3;
    struct rtx_sched *s = make(&cfg);
    for (int i = 0; i < 3; i++)
        enq(s, 1, 0, 1 * MS, i, T0);
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS};
    struct rtx_sched_reject rej = {0};
    uint64_t h = 77;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, &h, &rej), RTX_EUNAVAILABLE);
    ck_assert_uint_eq(h, 77); /* untouched */
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_LANE_FULL);
    ck_assert_int_ge(rej.retry_after_ns, 1);
    ck_assert_msg(strstr(rej.msg, "interactive") && strstr(rej.msg, "full"), "%s", rej.msg);
    ck_assert_str_eq(rtx_sched_reject_name(rej.reason), "lane_full");
    /* other lanes are not affected; a dispatch frees a place */
    enq(s, 0, 0, 1 * MS, 9, T0);
    ck_assert_int_eq(run_one(s, T0, NULL), 9);
    run_one(s, T0, NULL);
    enq(s, 1, 0, 1 * MS, 4, T0);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_REJECTED_FULL], 1);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_ADMITTED], 4);
    ck_assert_int_eq(rtx_sched_enqueue(s, &(struct rtx_sched_request){.lane = 3}, T0, NULL, NULL),
                     RTX_EINVAL);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_admission_deadline_unmeetable_and_accepted) {
    struct rtx_sched_config cfg = defaults(); /* one executor */
    struct rtx_sched *s = make(&cfg);
    for (int i = 0; i < 3; i++)
        enq(s, 0, T0 + 1 * SEC, 10 * MS, i, T0);
    /* 30 ms queued ahead + 10 ms of its own: completes at T0 + 40 ms */
    struct rtx_sched_request r = {.lane = 0, .deadline_ns = T0 + 35 * MS, .cost_ns = 10 * MS};
    struct rtx_sched_reject rej = {0};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_DEADLINE);
    ck_assert_int_eq(rej.est_completion_ns, T0 + 40 * MS);
    ck_assert_int_eq(rej.retry_after_ns, 5 * MS);
    ck_assert_msg(strstr(rej.msg, "deadline cannot be met"), "%s", rej.msg);
    r.deadline_ns = T0 + 40 * MS;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), 0);
    /* 100 ms of batch work counts only by its share of what realtime gets through the new
     * item: (40 + 10) / 8 = 6.25 ms */
    enq(s, 2, 0, 100 * MS, 100, T0);
    r.deadline_ns = T0 + 56 * MS;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.est_completion_ns, T0 + 56250 * US);
    r.deadline_ns = T0 + 56250 * US;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), 0);
    /* running work counts too: dispatch one 10 ms item, 4 ms later 6 ms of it remain; 40 ms
     * of realtime and 50 / 8 ms of batch are ahead */
    struct rtx_sched_item it;
    run_one(s, T0, &it);
    ck_assert_int_eq(it.deadline_ns, T0 + 40 * MS); /* EDF: the tightest deadline first */
    r.deadline_ns = T0 + 4 * MS + 6 * MS + 40 * MS + 50 * MS / 8 + 10 * MS - 1;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0 + 4 * MS, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.est_completion_ns, r.deadline_ns + 1);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0 + 4 * MS, &st);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_REJECTED_DEADLINE], 3);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_ADMITTED], 5);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_admission_counts_executors_and_other_lanes_arrivals) {
    struct rtx_sched_config cfg = defaults();
    cfg.executors = 4;
    cfg.brownout_window_ns = 80 * MS; /* rates are evaluated every 10 ms */
    struct rtx_sched *s = make(&cfg);
    /* 40 ms of realtime queued on 4 executors: 10 ms of delay */
    for (int i = 0; i < 4; i++)
        enq(s, 0, 0, 10 * MS, i, T0);
    struct rtx_sched_request r = {.lane = 0, .deadline_ns = T0 + 19 * MS, .cost_ns = 10 * MS};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), RTX_EUNAVAILABLE);
    r.deadline_ns = T0 + 20 * MS;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), 0);
    /* realtime arriving steadily at 2 executors' worth: batch sees half the capacity */
    struct rtx_sched_config c2 = defaults();
    c2.executors = 4;
    c2.brownout_window_ns = 80 * MS;
    struct rtx_sched *s2 = make(&c2);
    int64_t now = T0;
    for (int step = 0; step < 400; step++) { /* 400 ms: 2 ms of realtime work per ms */
        now += 1 * MS;
        struct rtx_sched_item it;
        enq(s2, 0, 0, 2 * MS, 1, now);
        ck_assert_int_eq(rtx_sched_dispatch(s2, now, &it), RTX_SCHED_RUN);
        rtx_sched_finish(s2, it.handle, RTX_SCHED_OK, 2 * MS, now);
    }
    /* 400 ms of batch work: with 2 executors left, about 200 ms of delay, not 100 ms */
    for (int i = 0; i < 4; i++)
        enq(s2, 2, 0, 100 * MS, 2, now);
    struct rtx_sched_request b = {.lane = 2, .deadline_ns = now + 205 * MS, .cost_ns = 10 * MS};
    struct rtx_sched_reject rej = {0};
    ck_assert_int_eq(rtx_sched_enqueue(s2, &b, now, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_msg(rej.est_completion_ns > now + 195 * MS && rej.est_completion_ns < now + 215 * MS,
                  "estimate %.1f ms", (double)(rej.est_completion_ns - now) / 1e6);
    b.deadline_ns = now + 220 * MS;
    ck_assert_int_eq(rtx_sched_enqueue(s2, &b, now, NULL, &rej), 0);
    rtx_sched_free(s);
    rtx_sched_free(s2);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Expiry and cancellation
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_dispatch_returns_expired_items_first) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    enq(s, 0, T0 + 10 * MS, 1 * MS, 1, T0);
    enq(s, 0, T0 + 20 * MS, 1 * MS, 2, T0);
    enq(s, 0, T0 + 900 * MS, 1 * MS, 3, T0);
    struct rtx_sched_item it;
    int64_t now = T0 + 30 * MS;
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_EXPIRED);
    ck_assert_int_eq((intptr_t)it.data, 1);
    ck_assert_int_eq(it.wait_ns, 30 * MS);
    ck_assert_int_eq(rtx_sched_cancel(s, it.handle, now, NULL, NULL), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_EXPIRED);
    ck_assert_int_eq((intptr_t)it.data, 2);
    ck_assert_int_eq(run_one(s, now, NULL), 3);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_EXPIRED], 2);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_DISPATCHED], 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_expire_sweeps_every_lane_and_behind_undated_items) {
    struct rtx_sched_config cfg = defaults(); /* realtime target 50 ms */
    struct rtx_sched *s = make(&cfg);
    /* undated items keyed at T0 + 50 ms sit above dated ones keyed later in the heap */
    for (int i = 0; i < 20; i++)
        enq(s, 0, 0, 1 * MS, 100 + i, T0);
    for (int i = 0; i < 30; i++)
        enq(s, 0, T0 + 60 * MS + i * MS, 1 * MS, i, T0);
    for (int i = 0; i < 5; i++)
        enq(s, 1, T0 + 70 * MS, 1 * MS, 200 + i, T0);
    enq(s, 1, T0 + 10 * SEC, 1 * MS, 300, T0);
    int64_t now = T0 + 75 * MS; /* realtime items 0..15 and the 5 interactive ones are late */
    struct rtx_sched_item out[8];
    int total = 0, n;
    bool seen[512] = {false};
    while ((n = rtx_sched_expire(s, now, out, 8)) > 0) {
        for (int i = 0; i < n; i++) {
            intptr_t tag = (intptr_t)out[i].data;
            ck_assert(!seen[tag]);
            seen[tag] = true;
            ck_assert(out[i].deadline_ns <= now);
        }
        total += n;
    }
    ck_assert_int_eq(total, 16 + 5);
    for (int i = 0; i < 16; i++)
        ck_assert(seen[i]);
    ck_assert(!seen[16] && !seen[100] && !seen[300]);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.lanes[0].queued, 20 + 14);
    ck_assert_int_eq(st.lanes[1].queued, 1);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_EXPIRED], 16);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_EXPIRED], 5);
    /* nothing left to expire; the rest dispatches in key order */
    ck_assert_int_eq(rtx_sched_expire(s, now, out, 8), 0);
    for (int i = 0; i < 35; i++) {
        struct rtx_sched_item it;
        ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_RUN);
    }
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_delay_lane_runs_late_items_behind_everything) {
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[2].on_timeout = RTX_SCHED_TIMEOUT_DELAY;
    struct rtx_sched *s = make(&cfg);
    /* a delaying lane admits an unmeetable deadline */
    struct rtx_sched_request r = {
        .data = (void *)1, .lane = 2, .deadline_ns = T0 + 1, .cost_ns = 50 * MS};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), 0);
    enq(s, 2, T0 + 5 * MS, 1 * MS, 2, T0);
    enq(s, 2, T0 + 10 * SEC, 1 * MS, 3, T0);
    int64_t now = T0 + 20 * MS;
    struct rtx_sched_item out[4];
    ck_assert_int_eq(rtx_sched_expire(s, now, out, 4), 0); /* #1, #2 moved, not dropped */
    enq(s, 0, 0, 1 * MS, 4, now);
    ck_assert_int_eq(run_one(s, now, NULL), 4);
    struct rtx_sched_item it;
    ck_assert_int_eq(run_one(s, now, &it), 3);
    ck_assert(!it.late);
    ck_assert_int_eq(run_one(s, now, &it), 1);
    ck_assert(it.late);
    ck_assert_int_eq(run_one(s, now, &it), 2);
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_NONE);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.lanes[2].counters[RTX_SCHED_CTR_DELAYED], 2);
    ck_assert_int_eq(st.lanes[2].counters[RTX_SCHED_CTR_EXPIRED], 0);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_cancel_queued_delayed_and_running) {
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[2].on_timeout = RTX_SCHED_TIMEOUT_DELAY;
    struct rtx_sched *s = make(&cfg);
    uint64_t h[6];
    for (int i = 0; i < 6; i++)
        h[i] = enq(s, 1, T0 + (10 + i) * SEC, 1 * MS, i, T0);
    void *data = NULL;
    bool running = true;
    ck_assert_int_eq(rtx_sched_cancel(s, h[3], T0, &data, &running), 0);
    ck_assert_int_eq((intptr_t)data, 3);
    ck_assert(!running);
    ck_assert_int_eq(rtx_sched_cancel(s, h[3], T0, &data, &running), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_sched_cancel(s, h[0], T0, NULL, NULL), 0); /* the heap's top */
    ck_assert_int_eq(rtx_sched_cancel(s, 0, T0, NULL, NULL), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_sched_cancel(s, ~0ULL, T0, NULL, NULL), RTX_ENOTFOUND);
    /* the rest dispatch in order, without the cancelled ones */
    struct rtx_sched_item it;
    ck_assert_int_eq(run_one(s, T0, &it), 1);
    /* a running item: marked, counted cancelled by finish */
    ck_assert_int_eq(rtx_sched_cancel(s, it.handle, T0, &data, &running), 0);
    ck_assert(running);
    ck_assert_int_eq(rtx_sched_requeue(s, it.handle, 1 * MS, T0), RTX_ECANCELED);
    ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_CANCELLED, 0, T0), 0);
    ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1, T0), RTX_ENOTFOUND);
    ck_assert_int_eq(run_one(s, T0, NULL), 2);
    ck_assert_int_eq(run_one(s, T0, NULL), 4);
    ck_assert_int_eq(run_one(s, T0, NULL), 5);
    /* a delayed item */
    uint64_t d = enq(s, 2, T0 + 1 * MS, 1 * MS, 9, T0);
    struct rtx_sched_item out[1];
    ck_assert_int_eq(rtx_sched_expire(s, T0 + 2 * MS, out, 1), 0);
    ck_assert_int_eq(rtx_sched_cancel(s, d, T0 + 2 * MS, &data, &running), 0);
    ck_assert_int_eq((intptr_t)data, 9);
    ck_assert_int_eq(rtx_sched_dispatch(s, T0 + 2 * MS, &it), RTX_SCHED_NONE);
    /* a stale handle never reaches the slot's next occupant */
    uint64_t again = enq(s, 1, 0, 1 * MS, 10, T0);
    ck_assert_uint_ne(again, d);
    ck_assert_int_eq(rtx_sched_cancel(s, d, T0, NULL, NULL), RTX_ENOTFOUND);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0 + 2 * MS, &st);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_CANCELLED], 3);
    ck_assert_int_eq(st.lanes[2].counters[RTX_SCHED_CTR_CANCELLED], 1);
    ck_assert_int_eq(st.lanes[1].queued, 1);
    ck_assert_int_eq(st.lanes[1].running, 3);
    rtx_sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Brownout
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_brownout_enters_sheds_lowest_and_exits_with_hysteresis) {
    struct rtx_sched_config cfg = defaults();
    cfg.n_lanes = 2; /* realtime, interactive (target 500 ms) */
    cfg.brownout_window_ns = 100 * MS;
    cfg.brownout_exit_window_ns = 400 * MS;
    struct rtx_sched *s = make(&cfg);
    int64_t now = T0;
    /* 1 s of interactive work without deadlines: pressure 2 */
    for (int i = 0; i < 100; i++)
        enq(s, 1, 0, 10 * MS, i, now);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.brownout_level, 0);
    ck_assert(st.lanes[1].pressure > 1.9 && st.lanes[1].pressure < 2.1);
    /* overload must last a window: not yet after 50 ms */
    tick_span(s, now, 0, 50);
    rtx_sched_get_stats(s, now + 50 * MS, &st);
    ck_assert_int_eq(st.brownout_level, 0);
    tick_span(s, now, 60, 120);
    now += 120 * MS;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    ck_assert_int_eq(st.brownout_entries, 1);
    ck_assert(st.lanes[1].shed && !st.lanes[0].shed);
    ck_assert(rtx_sched_batch_delay_factor(s) == 0.5);
    /* the lowest lane is refused; the first lane never is, and is never shed */
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS};
    struct rtx_sched_reject rej = {0};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, now, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_SHED);
    ck_assert_int_ge(rej.retry_after_ns, 1);
    enq(s, 0, 0, 1 * MS, 999, now);
    tick_span(s, now, 0, 990);
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    /* drain to pressure 0.6: between exit (0.5) and enter (1.0), brownout holds */
    struct rtx_sched_item it;
    ck_assert_int_eq(run_one(s, now, &it), 999);
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, now);
    run_n(s, now, 70, 10 * MS);
    tick_span(s, now, 0, 2000);
    now += 2000 * MS;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_msg(st.lanes[1].pressure > 0.5 && st.lanes[1].pressure < 1.0, "pressure %g",
                  st.lanes[1].pressure);
    ck_assert_int_eq(st.brownout_level, 1);
    ck_assert_int_eq(st.brownout_exits, 0);
    /* below the exit pressure: calm must last the exit window */
    run_n(s, now, 20, 10 * MS);
    tick_span(s, now, 0, 300);
    rtx_sched_get_stats(s, now + 300 * MS, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    tick_span(s, now, 310, 500);
    now += 500 * MS;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.brownout_level, 0);
    ck_assert_int_eq(st.brownout_exits, 1);
    ck_assert(rtx_sched_batch_delay_factor(s) == 1.0);
    enq(s, 1, 0, 1 * MS, 1000, now);
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_SHED], 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_brownout_sheds_one_lane_per_window) {
    struct rtx_sched_config cfg = defaults();
    cfg.brownout_window_ns = 100 * MS;
    struct rtx_sched *s = make(&cfg);
    /* realtime alone over its target: interactive goes first, then batch; realtime stays */
    for (int i = 0; i < 20; i++)
        enq(s, 0, 0, 10 * MS, i, T0);
    int64_t t = 0;
    struct rtx_sched_stats st;
    for (; t <= 110; t += 10)
        rtx_sched_tick(s, T0 + t * MS);
    rtx_sched_get_stats(s, T0 + t * MS, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    ck_assert(st.lanes[2].shed && !st.lanes[1].shed);
    for (; t <= 230; t += 10)
        rtx_sched_tick(s, T0 + t * MS);
    rtx_sched_get_stats(s, T0 + t * MS, &st);
    ck_assert_int_eq(st.brownout_level, 2);
    for (; t <= 1000; t += 10)
        rtx_sched_tick(s, T0 + t * MS);
    rtx_sched_get_stats(s, T0 + t * MS, &st);
    ck_assert_int_eq(st.brownout_level, 2);
    ck_assert_int_eq(st.brownout_entries, 1);
    ck_assert(rtx_sched_batch_delay_factor(s) == 0.25);
    rtx_sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Learned costs
 * ---------------------------------------------------------------------------------------- */

static int save_cb(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples) {
    int64_t *acc = ctx;
    acc[0]++;
    acc[1] += ema_ns;
    acc[2] += samples;
    ck_assert_uint_ne(key, 0);
    return acc[0] == 99 ? 42 : 0;
}

START_TEST(sched_cost_ema_learns_from_completions) {
    struct rtx_sched_config cfg = defaults();
    cfg.cost_keys = 2;
    cfg.default_cost_ns = 7 * MS;
    struct rtx_sched *s = make(&cfg);
    uint64_t key = rtx_sched_cost_key("model-a");
    ck_assert_uint_eq(key, rtx_sched_cost_key("model-a"));
    ck_assert_uint_ne(key, rtx_sched_cost_key("model-b"));
    struct rtx_sched_request r = {.lane = 0, .cost_key = key};
    struct rtx_sched_item it;
    /* unknown key: the default */
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), 0);
    run_one(s, T0, &it);
    ck_assert_int_eq(it.cost_ns, 7 * MS);
    ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 0, T0), RTX_EINVAL);
    ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 100 * MS, T0), 0);
    int64_t ema = 0, n = 0;
    ck_assert_int_eq(rtx_sched_cost_get(s, key, &ema, &n), 0);
    ck_assert_int_eq(ema, 100 * MS);
    ck_assert_int_eq(n, 1);
    /* second sample: 100 + 0.2 * (200 - 100) = 120 ms; the next item is estimated so */
    rtx_sched_enqueue(s, &r, T0, NULL, NULL);
    run_one(s, T0, &it);
    ck_assert_int_eq(it.cost_ns, 100 * MS);
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 200 * MS, T0);
    rtx_sched_enqueue(s, &r, T0, NULL, NULL);
    run_one(s, T0, &it);
    ck_assert_int_eq(it.cost_ns, 120 * MS);
    /* failures and cancellations teach nothing */
    rtx_sched_finish(s, it.handle, RTX_SCHED_FAILED, 1 * MS, T0);
    ck_assert_int_eq(rtx_sched_cost_get(s, key, &ema, &n), 0);
    ck_assert_int_eq(ema, 120 * MS);
    ck_assert_int_eq(n, 2);
    /* an explicit estimate wins over the key */
    r.cost_ns = 3 * MS;
    rtx_sched_enqueue(s, &r, T0, NULL, NULL);
    run_one(s, T0, &it);
    ck_assert_int_eq(it.cost_ns, 3 * MS);
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 120 * MS, T0);
    /* the table holds cost_keys keys; more are counted as dropped */
    for (int k = 0; k < 3; k++) {
        char id[16];
        snprintf(id, sizeof id, "g%d", k);
        struct rtx_sched_request q = {.lane = 0, .cost_key = rtx_sched_cost_key(id)};
        rtx_sched_enqueue(s, &q, T0, NULL, NULL);
        run_one(s, T0, &it);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 5 * MS, T0);
    }
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.cost_keys, 2);
    ck_assert_int_eq(st.cost_keys_dropped, 2);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_COMPLETED], 6);
    ck_assert_int_eq(st.lanes[0].counters[RTX_SCHED_CTR_FAILED], 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_cost_table_save_and_load) {
    struct rtx_sched_config cfg = defaults();
    cfg.cost_keys = 100;
    struct rtx_sched *a = make(&cfg), *b = make(&cfg);
    struct rtx_err err = {0};
    for (int k = 1; k <= 100; k++)
        ck_assert_int_eq(rtx_sched_cost_load(a, (uint64_t)k * 7919, k * MS, k, &err), 0);
    ck_assert_int_eq(rtx_sched_cost_load(a, 5, 1 * MS, 1, &err), RTX_ELIMIT);
    ck_assert_msg(strstr(err.msg, "100 keys"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_cost_load(a, 0, 1 * MS, 1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_sched_cost_load(a, 7919, 0, 1, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_sched_cost_load(a, 7919, 2 * MS, 3, &err), 0); /* replaces */
    int64_t acc[3] = {0, 0, 0};
    ck_assert_int_eq(rtx_sched_cost_save(a, save_cb, acc), 42); /* stopped at the 99th */
    ck_assert_int_eq(acc[0], 99);
    /* a copy into b */
    int64_t sum_a = 0;
    for (int k = 1; k <= 100; k++) {
        int64_t ema = 0, n = 0;
        ck_assert_int_eq(rtx_sched_cost_get(a, (uint64_t)k * 7919, &ema, &n), 0);
        sum_a += ema;
        ck_assert_int_eq(rtx_sched_cost_load(b, (uint64_t)k * 7919, ema, n, &err), 0);
    }
    int64_t acc_b[3] = {0, 0, 0};
    ck_assert_int_eq(rtx_sched_cost_save(b, save_cb, acc_b), 42);
    ck_assert_int_eq(sum_a, 5050 * MS - 1 * MS + 2 * MS); /* key 7919 replaced: 1 -> 2 ms */
    int64_t ema = 0;
    ck_assert_int_eq(rtx_sched_cost_get(b, 7919, &ema, NULL), 0);
    ck_assert_int_eq(ema, 2 * MS);
    ck_assert_int_eq(rtx_sched_cost_get(b, 1, &ema, NULL), RTX_ENOTFOUND);
    rtx_sched_free(a);
    rtx_sched_free(b);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Preemption, statistics, memory
 * ---------------------------------------------------------------------------------------- */

START_TEST(sched_preempt_wanted_and_requeue) {
    struct rtx_sched_config cfg = defaults(); /* one executor; batch preemptible */
    struct rtx_sched *s = make(&cfg);
    enq(s, 2, 0, 100 * MS, 1, T0);
    struct rtx_sched_item it;
    run_one(s, T0, &it);
    ck_assert(!rtx_sched_preempt_wanted(s, it.handle)); /* nothing higher waits */
    enq(s, 2, 0, 100 * MS, 2, T0);
    ck_assert(!rtx_sched_preempt_wanted(s, it.handle)); /* same lane */
    enq(s, 0, 0, 1 * MS, 3, T0);
    ck_assert(rtx_sched_preempt_wanted(s, it.handle));
    ck_assert_int_eq(rtx_sched_requeue(s, it.handle, 40 * MS, T0 + 60 * MS), 0);
    ck_assert(!rtx_sched_preempt_wanted(s, it.handle));
    ck_assert_int_eq(rtx_sched_requeue(s, it.handle, 40 * MS, T0), RTX_ENOTFOUND);
    ck_assert_int_eq(run_one(s, T0 + 60 * MS, NULL), 3);
    struct rtx_sched_item again;
    ck_assert_int_eq(run_one(s, T0 + 60 * MS, &again), 1); /* kept its place: arrived first */
    ck_assert_int_eq(again.cost_ns, 40 * MS);
    ck_assert_int_eq(again.wait_ns, 60 * MS);
    /* realtime is not preemptible */
    struct rtx_sched_item rt;
    enq(s, 0, 0, 1 * MS, 4, T0);
    rtx_sched_finish(s, again.handle, RTX_SCHED_OK, 40 * MS, T0);
    run_one(s, T0, &rt);
    ck_assert(!rtx_sched_preempt_wanted(s, rt.handle));
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.lanes[2].counters[RTX_SCHED_CTR_PREEMPTED], 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_max_running_bounds_dispatch_and_slots) {
    struct rtx_sched_config cfg = defaults();
    for (int l = 0; l < 3; l++)
        cfg.lanes[l].max_queued = 1;
    cfg.max_running = 1; /* 4 item slots */
    struct rtx_sched *s = make(&cfg);
    struct rtx_sched_item a1, it;
    enq(s, 0, 0, 10 * MS, 1, T0);
    run_one(s, T0, &a1);
    enq(s, 0, 0, 10 * MS, 2, T0);
    enq(s, 1, 0, 10 * MS, 3, T0);
    enq(s, 2, 0, 10 * MS, 4, T0);
    ck_assert_int_eq(rtx_sched_dispatch(s, T0, &it), RTX_SCHED_NONE); /* one running */
    /* a requeue lets a lane hold more than its bound; the slots can then run out */
    ck_assert_int_eq(rtx_sched_requeue(s, a1.handle, 5 * MS, T0), 0);
    ck_assert_int_eq(run_one(s, T0, &it), 3); /* interactive: its pass is the lowest */
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS};
    struct rtx_sched_reject rej = {0};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_FULL);
    ck_assert_msg(strstr(rej.msg, "running"), "%s", rej.msg);
    ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0), 0);
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), 0);
    int ran = 0;
    while (rtx_sched_dispatch(s, T0, &it) == RTX_SCHED_RUN) {
        ran++;
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0);
    }
    ck_assert_int_eq(ran, 4);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_stats_wait_percentiles) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    /* 1000 items waiting 1..1000 ms */
    int64_t t = T0;
    for (int i = 1; i <= 1000; i++) {
        t += 2 * SEC;
        enq(s, 1, 0, 1 * MS, i, t);
        struct rtx_sched_item it;
        run_one(s, t + i * MS, &it);
        ck_assert_int_eq(it.wait_ns, i * MS);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, t + i * MS);
    }
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, t + 2 * SEC, &st);
    const struct rtx_sched_lane_stats *l = &st.lanes[1];
    ck_assert_int_eq(l->wait_samples, 1000);
    ck_assert_int_eq(l->wait_max_ns, 1000 * MS);
    /* bucket upper bounds: at most 12.5% above the true value, never below */
    ck_assert(l->wait_p50_ns >= 500 * MS && l->wait_p50_ns <= 563 * MS);
    ck_assert(l->wait_p90_ns >= 900 * MS && l->wait_p90_ns <= 1000 * MS);
    ck_assert(l->wait_p99_ns >= 990 * MS && l->wait_p99_ns <= 1000 * MS);
    ck_assert_int_eq(st.lanes[0].wait_samples, 0);
    ck_assert_int_eq(st.lanes[0].wait_p99_ns, 0);
    ck_assert_str_eq(rtx_sched_counter_name(RTX_SCHED_CTR_REJECTED_DEADLINE), "rejected_deadline");
    ck_assert_str_eq(rtx_sched_timeout_name(RTX_SCHED_TIMEOUT_DELAY), "delay");
    ck_assert_str_eq(rtx_sched_counter_name(RTX_SCHED_CTR_COUNT), "?");
    ck_assert_int_eq(rtx_sched_lane_find(s, "batch"), 2);
    ck_assert_int_eq(rtx_sched_lane_find(s, "nope"), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 0, 2), 2);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 1, 2), 0);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 2, 2), 1);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 3, 0), 2);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 1000, 0), 2);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, -1, 0), RTX_EINVAL);
    ck_assert_int_eq(rtx_sched_lane_for_priority(s, 1, 3), RTX_EINVAL);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_oom_loop_and_allocation_free_hot_path) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = NULL;
    struct rtx_err err = {0};
    int rc = RTX_ENOMEM;
    long n;
    for (n = 1; n < 100 && rc != 0; n++) {
        rtx_alloc_fail_after(n);
        s = (struct rtx_sched *)&err;
        rc = rtx_sched_new(&cfg, T0, &s, &err);
        rtx_alloc_fail_after(0);
        if (rc) {
            ck_assert_int_eq(rc, RTX_ENOMEM);
            ck_assert_ptr_null(s);
            ck_assert_msg(strstr(err.msg, "out of memory"), "%s", err.msg);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 2); /* it allocates, so some attempt failed */
    /* every later allocation fails: the scheduler keeps working */
    rtx_alloc_fail_after(1);
    for (int i = 0; i < 100; i++)
        enq(s, i % 3, i % 2 ? T0 + 10 * SEC : 0, 1 * MS, i, T0);
    struct rtx_sched_item it, out[4];
    uint64_t victim = enq(s, 1, 0, 1 * MS, 7, T0);
    ck_assert_int_eq(rtx_sched_cancel(s, victim, T0, NULL, NULL), 0);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(rtx_sched_dispatch(s, T0 + i * MS, &it), RTX_SCHED_RUN);
        ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0 + i * MS), 0);
    }
    rtx_sched_expire(s, T0 + 100 * SEC, out, 4);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0 + 100 * SEC, &st);
    rtx_alloc_fail_after(0);
    rtx_sched_free(s);
    rtx_sched_free(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Reconfiguration (SIGHUP)
 * ---------------------------------------------------------------------------------------- */

static void reconfigure(struct rtx_sched *s, const struct rtx_sched_config *cfg, int64_t now) {
    struct rtx_err err = {0};
    int rc = rtx_sched_reconfigure(s, cfg, now, &err);
    ck_assert_msg(rc == 0, "rtx_sched_reconfigure: %s", err.msg);
}

START_TEST(sched_reconfigure_weights_change_shares_1_1_to_4_1) {
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[0].weight = cfg.lanes[1].weight = 1;
    struct rtx_sched *s = make(&cfg);
    int64_t counts[RTX_SCHED_MAX_LANES];
    const int n = 10000;
    dispatch_backlogged(s, 0x3, n, 1 * MS, counts);
    ck_assert_msg(counts[0] >= n / 2 * 0.95 && counts[0] <= n / 2 * 1.05, "1:1 gave %lld:%lld",
                  (long long)counts[0], (long long)counts[1]);
    cfg.lanes[0].weight = 4;
    reconfigure(s, &cfg, T0);
    ck_assert_int_eq(rtx_sched_config(s)->lanes[0].weight, 4);
    dispatch_backlogged(s, 0x3, n, 1 * MS, counts);
    double want0 = n * 4.0 / 5.0, want1 = n * 1.0 / 5.0;
    ck_assert_msg(counts[0] >= want0 * 0.95 && counts[0] <= want0 * 1.05 &&
                      counts[1] >= want1 * 0.95 && counts[1] <= want1 * 1.05,
                  "4:1 gave %lld:%lld", (long long)counts[0], (long long)counts[1]);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.lanes[0].config.weight, 4);
    ck_assert_int_eq(st.lanes[1].config.weight, 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_rescales_a_lanes_lead_so_it_does_not_starve) {
    /* interactive (weight 1) is charged one 1 s item; at weight 1 it would then wait for
     * 1000 realtime items of 1 ms. Raised to weight 1000, it waits as if it had been charged at
     * weight 1000: about one realtime item. */
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[0].weight = cfg.lanes[1].weight = 1;
    struct rtx_sched *s = make(&cfg);
    struct rtx_sched_item it;
    for (int k = 0; k < 4; k++)
        enq(s, 0, 0, 1 * MS, 0, T0);
    enq(s, 1, 0, 1 * SEC, 1, T0);
    ck_assert_int_eq(run_one(s, T0, &it), 0);
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0);
    ck_assert_int_eq(run_one(s, T0, &it), 1);
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * SEC, T0);
    enq(s, 1, 0, 1 * MS, 2, T0);
    cfg.lanes[1].weight = 1000;
    reconfigure(s, &cfg, T0);
    int before = 0;
    for (;; before++) {
        ck_assert_int_lt(before, 5);
        intptr_t tag = run_one(s, T0, &it);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0);
        if (tag == 2) break;
        enq(s, 0, 0, 1 * MS, 0, T0);
    }
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_lower_max_queued_keeps_queued_items) {
    struct rtx_sched_config cfg = defaults();
    cfg.lanes[1].max_queued = 10;
    struct rtx_sched *s = make(&cfg);
    for (int i = 0; i < 8; i++)
        enq(s, 1, 0, 1 * MS, i, T0);
    cfg.lanes[1].max_queued = 3;
    reconfigure(s, &cfg, T0);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.lanes[1].queued, 8);
    ck_assert_int_eq(st.lanes[1].config.max_queued, 3);
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS, .data = (void *)100};
    struct rtx_sched_reject rej = {0};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_LANE_FULL);
    ck_assert_msg(strstr(rej.msg, "bound 3"), "%s", rej.msg);
    /* the queued items run in order; new ones are refused until fewer than 3 are queued */
    struct rtx_sched_item it;
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(run_one(s, T0, &it), i);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0);
        int left = 8 - 1 - i;
        int rc = rtx_sched_enqueue(s, &r, T0, NULL, &rej);
        if (left >= 3) {
            ck_assert_int_eq(rc, RTX_EUNAVAILABLE);
        } else {
            ck_assert_int_eq(rc, 0);
            break;
        }
    }
    rtx_sched_get_stats(s, T0, &st);
    ck_assert_int_eq(st.lanes[1].queued, 3);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_COMPLETED], 6);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_REJECTED_FULL], 1 + 5);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_raised_max_queued_grows_storage_or_fails_cleanly) {
    struct rtx_sched_config cfg = defaults();
    for (int l = 0; l < 3; l++)
        cfg.lanes[l].max_queued = 2;
    cfg.max_running = 1; /* 7 item slots */
    struct rtx_sched *s = make(&cfg);
    uint64_t first = enq(s, 1, 0, 1 * MS, 1000, T0);
    enq(s, 1, 0, 1 * MS, 1001, T0);
    cfg.lanes[1].max_queued = 200;
    /* out of memory: refused, and the scheduler runs on with the old bound */
    struct rtx_err err = {0};
    rtx_alloc_fail_after(1);
    int rc = rtx_sched_reconfigure(s, &cfg, T0, &err);
    rtx_alloc_fail_after(0);
    ck_assert_int_eq(rc, RTX_ENOMEM);
    ck_assert_msg(strstr(err.msg, "out of memory"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_config(s)->lanes[1].max_queued, 2);
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), RTX_EUNAVAILABLE);
    /* the fault on the second allocation (the item slots, after the heap grew) too */
    rtx_alloc_fail_after(2);
    rc = rtx_sched_reconfigure(s, &cfg, T0, &err);
    rtx_alloc_fail_after(0);
    ck_assert_int_eq(rc, RTX_ENOMEM);
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), RTX_EUNAVAILABLE);
    reconfigure(s, &cfg, T0);
    for (int i = 2; i < 200; i++)
        enq(s, 1, 0, 1 * MS, 1000 + i, T0);
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0, NULL, NULL), RTX_EUNAVAILABLE);
    enq(s, 0, 0, 1 * MS, 1, T0); /* other lanes keep their slots */
    enq(s, 2, 0, 1 * MS, 2, T0);
    /* handles from before the growth stay valid */
    void *data = NULL;
    ck_assert_int_eq(rtx_sched_cancel(s, first, T0, &data, NULL), 0);
    ck_assert_ptr_eq(data, (void *)1000);
    struct rtx_sched_item it;
    int ran = 0;
    while (rtx_sched_dispatch(s, T0, &it) == RTX_SCHED_RUN) {
        ran++;
        ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0), 0);
    }
    ck_assert_int_eq(ran, 199 + 2);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_target_changes_admission_and_order) {
    struct rtx_sched_config cfg = defaults();
    cfg.n_lanes = 2; /* realtime, interactive (target 500 ms) */
    cfg.brownout_window_ns = 100 * MS;
    cfg.brownout_exit_window_ns = 400 * MS;
    struct rtx_sched *s = make(&cfg);
    int64_t now = T0;
    /* 300 ms of interactive work: pressure 0.6 against 500 ms, no brownout */
    for (int i = 0; i < 30; i++)
        enq(s, 1, 0, 10 * MS, i, now);
    tick_span(s, now, 0, 120);
    now += 120 * MS;
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.brownout_level, 0);
    struct rtx_sched_request r = {.lane = 1, .cost_ns = 1 * MS, .data = (void *)100};
    struct rtx_sched_reject rej = {0};
    uint64_t h;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, now, &h, &rej), 0);
    ck_assert_int_eq(rtx_sched_cancel(s, h, now, NULL, NULL), 0);
    /* a 100 ms target: pressure 3, the lane is shed after a window and refuses the same item */
    cfg.lanes[1].target_ns = 100 * MS;
    reconfigure(s, &cfg, now);
    rtx_sched_get_stats(s, now, &st);
    ck_assert_int_eq(st.lanes[1].config.target_ns, 100 * MS);
    ck_assert_msg(st.lanes[1].pressure > 2.9 && st.lanes[1].pressure < 3.1, "pressure %g",
                  st.lanes[1].pressure);
    tick_span(s, now, 0, 120);
    now += 120 * MS;
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, now, NULL, &rej), RTX_EUNAVAILABLE);
    ck_assert_int_eq(rej.reason, RTX_SCHED_REJECT_SHED);
    rtx_sched_free(s);

    /* EDF order: a queued undated item keeps its place (arrival + the old target); one that
     * arrives after the change sorts at its arrival + the new target */
    cfg = defaults();
    s = make(&cfg);
    enq(s, 1, 0, 1 * MS, 1, T0); /* key T0 + 500 ms */
    cfg.lanes[1].target_ns = 10 * MS;
    reconfigure(s, &cfg, T0);
    enq(s, 1, T0 + 100 * MS, 1 * MS, 2, T0); /* key T0 + 100 ms */
    enq(s, 1, 0, 1 * MS, 3, T0 + 1 * MS);    /* key T0 + 11 ms */
    ck_assert_int_eq(run_one(s, T0 + 1 * MS, NULL), 3);
    ck_assert_int_eq(run_one(s, T0 + 1 * MS, NULL), 2);
    ck_assert_int_eq(run_one(s, T0 + 1 * MS, NULL), 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_timeout_preemption_and_knobs_apply_at_once) {
    struct rtx_sched_config cfg = defaults();
    cfg.n_lanes = 2;
    cfg.brownout_window_ns = 100 * MS;
    struct rtx_sched *s = make(&cfg);
    /* reject -> delay: an item whose deadline passes is run late instead of expiring */
    enq(s, 1, T0 + 10 * MS, 1 * MS, 1, T0);
    cfg.lanes[1].on_timeout = RTX_SCHED_TIMEOUT_DELAY;
    cfg.lanes[1].preemptible = true;
    cfg.default_cost_ns = 3 * MS;
    cfg.brownout_delay_factor = 0.25;
    reconfigure(s, &cfg, T0);
    struct rtx_sched_item it;
    ck_assert_int_eq(rtx_sched_dispatch(s, T0 + 20 * MS, &it), RTX_SCHED_RUN);
    ck_assert(it.late);
    /* preemptible now: a running interactive item yields to queued realtime work */
    enq(s, 0, 0, 1 * MS, 2, T0 + 20 * MS);
    ck_assert(rtx_sched_preempt_wanted(s, it.handle));
    rtx_sched_finish(s, it.handle, RTX_SCHED_OK, 1 * MS, T0 + 20 * MS);
    /* the default cost of an item with no estimate */
    struct rtx_sched_request r = {.lane = 1, .cost_key = 42};
    ck_assert_int_eq(rtx_sched_enqueue(s, &r, T0 + 20 * MS, NULL, NULL), 0);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, T0 + 20 * MS, &st);
    ck_assert_int_eq(st.lanes[1].queued_work_ns, 3 * MS);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_EXPIRED], 0);
    ck_assert_int_eq(st.lanes[1].counters[RTX_SCHED_CTR_DELAYED], 1);
    /* in brownout, a new delay factor applies at once; the level is kept */
    for (int i = 0; i < 100; i++)
        enq(s, 1, 0, 10 * MS, 10 + i, T0 + 20 * MS);
    tick_span(s, T0 + 20 * MS, 0, 240);
    rtx_sched_get_stats(s, T0 + 260 * MS, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    ck_assert(rtx_sched_batch_delay_factor(s) == 0.25);
    cfg.brownout_delay_factor = 0.5;
    reconfigure(s, &cfg, T0 + 260 * MS);
    ck_assert(rtx_sched_batch_delay_factor(s) == 0.5);
    rtx_sched_get_stats(s, T0 + 260 * MS, &st);
    ck_assert_int_eq(st.brownout_level, 1);
    rtx_sched_free(s);
}
END_TEST

START_TEST(sched_reconfigure_refuses_other_lanes_and_fixed_settings) {
    struct rtx_sched_config cfg = defaults();
    struct rtx_sched *s = make(&cfg);
    enq(s, 1, 0, 1 * MS, 1, T0);
    struct rtx_sched_config before = *rtx_sched_config(s);
    struct rtx_err err = {0};
    struct rtx_sched_config c = defaults();
    /* reordered */
    struct rtx_sched_lane_config tmp = c.lanes[0];
    c.lanes[0] = c.lanes[1];
    c.lanes[1] = tmp;
    c.lanes[1].weight = 3;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "interactive,realtime,batch") &&
                      strstr(err.msg, "realtime,interactive,batch"),
                  "%s", err.msg);
    /* a lane more, a lane less, renamed */
    c = defaults();
    ck_assert_int_eq(rtx_sched_config_set(&c, "lane.bulk", "weight", "1", &err), 0);
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    c = defaults();
    c.n_lanes = 2;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    c = defaults();
    snprintf(c.lanes[2].name, sizeof c.lanes[2].name, "bulk");
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "lanes"), "%s", err.msg);
    /* settings fixed at creation */
    c = defaults();
    c.executors = 2;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "executors"), "%s", err.msg);
    c = defaults();
    c.max_running = 5;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    c = defaults();
    c.cost_keys = 7;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    /* a bad value */
    c = defaults();
    c.lanes[0].weight = 0;
    ck_assert_int_eq(rtx_sched_reconfigure(s, &c, T0, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "weight"), "%s", err.msg);
    ck_assert_int_eq(rtx_sched_reconfigure(NULL, &c, T0, &err), RTX_EINVAL);
    /* nothing changed, and it works as before */
    ck_assert_mem_eq(rtx_sched_config(s), &before, sizeof before);
    ck_assert_int_eq(run_one(s, T0, NULL), 1);
    rtx_sched_free(s);
}
END_TEST

Suite *rtx_sched_suite(void) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("sched");
    tcase_add_test(tc, sched_config_defaults_are_valid);
    tcase_add_test(tc, sched_config_parses_lane_sections);
    tcase_add_test(tc, sched_config_errors_name_line_and_setting);
    tcase_add_test(tc, sched_config_check_rejects_inconsistent_settings);
    tcase_add_test(tc, sched_config_select_lanes_keeps_order_and_settings);
    tcase_add_test(tc, sched_edf_order_within_lane);
    tcase_add_test(tc, sched_item_without_deadline_sorts_at_arrival_plus_target);
    tcase_add_test(tc, sched_weighted_shares_8_2_1_within_5_percent);
    tcase_add_test(tc, sched_shares_follow_cost_not_count);
    tcase_add_test(tc, sched_work_conserving_idle_lane_share_goes_to_others);
    tcase_add_test(tc, sched_admission_lane_full);
    tcase_add_test(tc, sched_admission_deadline_unmeetable_and_accepted);
    tcase_add_test(tc, sched_admission_counts_executors_and_other_lanes_arrivals);
    tcase_add_test(tc, sched_dispatch_returns_expired_items_first);
    tcase_add_test(tc, sched_expire_sweeps_every_lane_and_behind_undated_items);
    tcase_add_test(tc, sched_delay_lane_runs_late_items_behind_everything);
    tcase_add_test(tc, sched_cancel_queued_delayed_and_running);
    tcase_add_test(tc, sched_brownout_enters_sheds_lowest_and_exits_with_hysteresis);
    tcase_add_test(tc, sched_brownout_sheds_one_lane_per_window);
    tcase_add_test(tc, sched_cost_ema_learns_from_completions);
    tcase_add_test(tc, sched_cost_table_save_and_load);
    tcase_add_test(tc, sched_preempt_wanted_and_requeue);
    tcase_add_test(tc, sched_max_running_bounds_dispatch_and_slots);
    tcase_add_test(tc, sched_stats_wait_percentiles);
    tcase_add_test(tc, sched_oom_loop_and_allocation_free_hot_path);
    tcase_add_test(tc, sched_reconfigure_weights_change_shares_1_1_to_4_1);
    tcase_add_test(tc, sched_reconfigure_rescales_a_lanes_lead_so_it_does_not_starve);
    tcase_add_test(tc, sched_reconfigure_lower_max_queued_keeps_queued_items);
    tcase_add_test(tc, sched_reconfigure_raised_max_queued_grows_storage_or_fails_cleanly);
    tcase_add_test(tc, sched_reconfigure_target_changes_admission_and_order);
    tcase_add_test(tc, sched_reconfigure_timeout_preemption_and_knobs_apply_at_once);
    tcase_add_test(tc, sched_reconfigure_refuses_other_lanes_and_fixed_settings);
    suite_add_tcase(s, tc);
    return s;
}
