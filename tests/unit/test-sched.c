/*
 * test-sched.c - the SLA scheduler (scheduler/sched.h) on a simulated clock: EDF order inside
 * a lane, weighted shares across lanes (8:2:1 within 5% over 10k dispatches), work
 * conservation and no banked credit, admission decisions (lane full, deadline unmeetable,
 * accepted, with retry hints), expiry (dispatch, sweep, delaying lanes), cancellation
 * (queued, delayed, running, stale handles), brownout entry and exit with hysteresis, learned
 * costs and their persistence hooks, preemption, wait percentiles, and out-of-memory
 * behaviour (creation fails cleanly; the hot path never allocates). Its configuration is
 * test-sched-config.c's; the helpers are in test-sched-util.h.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/sched.h"
#include "tests/unit/test-sched-util.h"

/* Dispatches n items at now and finishes each as OK after cost_ns of running. */
static void run_n(struct rtx_sched *s, int64_t now, int n, int64_t cost_ns) {
    struct rtx_sched_item it;
    for (int i = 0; i < n; i++) {
        run_one(s, now, &it);
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, cost_ns, now);
    }
}

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

Suite *rtx_sched_suite(void) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("sched");
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
    suite_add_tcase(s, tc);
    return s;
}
