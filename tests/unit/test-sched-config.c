/*
 * test-sched-config.c - the SLA scheduler's configuration (scheduler/sched.h): lane config
 * parsing and checks, errors naming the line and setting, lane selection, and live
 * reconfiguration on a simulated clock (new shares, bounds, targets, timeout actions and
 * knobs; refusals). The helpers are in test-sched-util.h.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/sched.h"
#include "tests/unit/test-sched-util.h"

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

Suite *rtx_sched_config_suite(void) {
    Suite *s = suite_create("sched_config");
    TCase *tc = tcase_create("sched_config");
    tcase_add_test(tc, sched_config_defaults_are_valid);
    tcase_add_test(tc, sched_config_parses_lane_sections);
    tcase_add_test(tc, sched_config_errors_name_line_and_setting);
    tcase_add_test(tc, sched_config_check_rejects_inconsistent_settings);
    tcase_add_test(tc, sched_config_select_lanes_keeps_order_and_settings);
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
