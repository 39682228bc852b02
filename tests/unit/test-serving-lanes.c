/*
 * test-serving-lanes.c - SLA lanes of inference requests in the serving core: lane choice
 * (name, priority, model, default), a model naming an unknown lane, admission of a full
 * lane, dispatch in deadline and lane order, cancel and expiry, brownout shortening the
 * batching delay, and new lane settings reaching loaded versions and a version that loads.
 *
 * The test model "scale" and the fixtures are in test-serving-util.h.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serving/serving-impl.h"
#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * SLA lanes of inference requests (suite serving_lanes): lane choice, admission, dispatch
 * order, brownout
 * ---------------------------------------------------------------------------------------- */

/* A call that also records the order in which callbacks ran. */
struct seq_call {
    struct call c;
    int order;
};
static atomic_int seq_next;

static void on_done_seq(void *ctx, const struct rtx_infer_result *res) {
    struct seq_call *sc = ctx;
    sc->order = atomic_fetch_add(&seq_next, 1);
    on_done(&sc->c, res);
}

static int64_t lane_counter(struct rtx_serving *s, const char *lane, enum rtx_sched_counter c) {
    struct rtx_sched_stats *st = rtx_malloc(sizeof *st);
    ck_assert_ptr_nonnull(st);
    rtx_serving_lanes(s, st);
    int64_t v = -1;
    for (int i = 0; i < st->n_lanes; i++)
        if (strcmp(st->lanes[i].config.name, lane) == 0) v = st->lanes[i].counters[c];
    rtx_free(st);
    ck_assert_msg(v >= 0, "no lane %s", lane);
    return v;
}

/* The lane: by name, else the priority (1 = realtime, beyond the last lane = the last), else
 * the model's parameters.lane, else the server's default; bad ones are refused. */
START_TEST(lanes_follow_name_priority_model_and_default) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    write_model(f.repo, "rt", 8, ", \"parameters\": {\"lane\": {\"string_value\": \"realtime\"}}");
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.default_lane = "interactive";
    fx_start_opts(&f, &o);
    struct call gate, c[6];
    hold_worker(f.s, "scale", 1, 1, &gate);
    ck_assert_int_eq(lane_counter(f.s, "realtime", RTX_SCHED_CTR_ADMITTED), 1);
    struct rtx_err err = {0};
    const struct {
        const char *model, *lane;
        int priority;
    } reqs[6] = {{"scale", NULL, 2}, {"scale", NULL, 99}, {"scale", "batch", 1},
                 {"scale", NULL, 0}, {"rt", NULL, 0},    {"rt", NULL, 3}};
    for (int i = 0; i < 6; i++) {
        call_init(&c[i]);
        ck_assert_msg(submit_lane(f.s, reqs[i].model, 1, (float)i, on_done, &c[i], 0,
                                  reqs[i].priority, reqs[i].lane, &err) == 0, "%s", err.msg);
    }
    /* realtime: the gate and "rt" by its config; interactive: priority 2 and the server's
     * default; batch: priority 99, the lane by name (over priority 1) and "rt" priority 3 */
    ck_assert_int_eq(lane_counter(f.s, "realtime", RTX_SCHED_CTR_ADMITTED), 2);
    ck_assert_int_eq(lane_counter(f.s, "interactive", RTX_SCHED_CTR_ADMITTED), 2);
    ck_assert_int_eq(lane_counter(f.s, "batch", RTX_SCHED_CTR_ADMITTED), 3);
    struct call bad;
    call_init(&bad);
    ck_assert_int_eq(submit_lane(f.s, "scale", 1, 0.0f, on_done, &bad, 0, 0, "nope", &err),
                     RTX_EINVAL);
    ck_assert(strstr(err.msg, "unknown lane 'nope'"));
    ck_assert_int_eq(submit_lane(f.s, "scale", 1, 0.0f, on_done, &bad, 0, -2, NULL, &err),
                     RTX_EINVAL);
    ck_assert(strstr(err.msg, "priority -2"));
    call_open_gate(&gate);
    call_wait(&gate);
    for (int i = 0; i < 6; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        call_close(&c[i]);
    }
    ck_assert_int_eq(bad.done, 0);
    ck_assert_int_eq(lane_counter(f.s, "batch", RTX_SCHED_CTR_COMPLETED), 3);
    call_close(&bad);
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

/* A model whose config names a lane the server lacks does not load, and says why. */
START_TEST(lanes_unknown_model_lane_fails_the_load) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "odd", 8, ", \"parameters\": {\"lane\": {\"string_value\": \"gold\"}}");
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    char reason[256] = "";
    ck_assert_int_eq(index_state(f.s, "odd", reason), RTX_MODEL_UNAVAILABLE);
    ck_assert_msg(strstr(reason, "parameters.lane 'gold'"), "%s", reason);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.default_lane = "gold";
    struct rtx_serving *s = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_serving_start(&o, &s, &err), RTX_EINVAL);
    ck_assert(strstr(err.msg, "default lane 'gold'"));
    fx_stop(&f);
}
END_TEST

/* A full lane refuses at once with RTX_EOVERLOAD, the reason and a retry hint; other lanes
 * still admit; the refusal is counted and the callback never runs. */
START_TEST(lanes_full_lane_refuses_with_overload) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_sched_config sc;
    rtx_sched_config_init(&sc);
    sc.lanes[0].max_queued = 2; /* realtime */
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.sched = &sc;
    fx_start_opts(&f, &o);
    struct call gate, c[3], refused;
    hold_worker(f.s, "scale", 1, 1, &gate);
    struct rtx_err err = {0};
    for (int i = 0; i < 2; i++) {
        call_init(&c[i]);
        ck_assert(submit_lane(f.s, "scale", 1, (float)i, on_done, &c[i], 0, 1, NULL, &err) == 0);
    }
    call_init(&refused);
    ck_assert_int_eq(submit_lane(f.s, "scale", 1, 5.0f, on_done, &refused, 0, 1, NULL, &err),
                     RTX_EOVERLOAD);
    ck_assert_msg(strstr(err.msg, "lane_full") && strstr(err.msg, "retry after "), "%s",
                  err.msg);
    call_init(&c[2]);
    ck_assert(submit_lane(f.s, "scale", 1, 2.0f, on_done, &c[2], 0, 3, NULL, &err) == 0);
    ck_assert_int_eq(lane_counter(f.s, "realtime", RTX_SCHED_CTR_REJECTED_FULL), 1);
    ck_assert_int_eq(get_stats(f.s, "scale").failures[RTX_INFER_FAIL_REJECTED], 1);
    call_open_gate(&gate);
    call_wait(&gate);
    for (int i = 0; i < 3; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        call_close(&c[i]);
    }
    ck_assert_int_eq(refused.done, 0);
    call_close(&refused);
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

/* With the worker held by a batch request, requests queue; released, they run in the
 * scheduler's order: earliest deadline first inside realtime (C before B, though B came
 * first), and realtime ahead of the batch requests that arrived earlier (batch has used its
 * share): C, B, A1, A2, A3. */
START_TEST(lanes_dispatch_in_deadline_and_lane_order) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL); /* no dynamic batching: one request per run */
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    struct call gate; /* batch's share is charged with the gate's cost (10 ms, not yet
                       * learned); realtime's items cost what the gate's run taught */
    hold_worker(f.s, "scale", 1, 3, &gate);
    struct seq_call a[3], b, c;
    struct rtx_err err = {0};
    atomic_store(&seq_next, 0);
    int64_t now = rtx_mono_ns();
    for (int i = 0; i < 3; i++) {
        call_init(&a[i].c);
        ck_assert(submit_lane(f.s, "scale", 1, (float)i, on_done_seq, &a[i], 0, 3, NULL,
                              &err) == 0);
    }
    call_init(&b.c);
    call_init(&c.c);
    ck_assert(submit_lane(f.s, "scale", 1, 3.0f, on_done_seq, &b, now + 20000000000LL, 1, NULL,
                          &err) == 0);
    ck_assert(submit_lane(f.s, "scale", 1, 4.0f, on_done_seq, &c, now + 10000000000LL, 1, NULL,
                          &err) == 0);
    call_open_gate(&gate);
    call_wait(&gate);
    for (int i = 0; i < 3; i++)
        call_wait(&a[i].c);
    call_wait(&b.c);
    call_wait(&c.c);
    check_scale(&b.c, 1, 3.0f, 1.0f);
    check_scale(&c.c, 1, 4.0f, 1.0f);
    ck_assert_int_eq(c.order, 0);
    ck_assert_int_eq(b.order, 1);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(a[i].order, 2 + i);
    for (int i = 0; i < 3; i++)
        call_close(&a[i].c);
    call_close(&b.c);
    call_close(&c.c);
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

/* Cancel removes a queued request from the scheduler (counted cancelled) without running it;
 * a request whose deadline passes in the queue is answered RTX_EEXPIRED (counted expired). */
START_TEST(lanes_cancel_and_expiry_leave_the_queue) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    struct call gate, can, exp; /* the gate's run taught the cost: 2 ms is within reach */
    hold_worker(f.s, "scale", 1, 1, &gate);
    call_init(&can);
    call_init(&exp);
    volatile int cancel = 0;
    struct rtx_err err = {0};
    struct rtx_model *m;
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0);
    struct rtx_tensor *a = make_input(1, 1.0f, false), *b = make_input(1, 1.0f, true);
    struct rtx_infer_input ins[2] = {{"a", a}, {"b", b}};
    struct rtx_infer_request req = {
        .model = m, .n_inputs = 2, .inputs = ins, .priority = 3, .cancel = &cancel,
        .done = on_done, .ctx = &can,
    };
    ck_assert(rtx_serving_infer(f.s, &req, &err) == 0);
    req.cancel = NULL;
    req.ctx = &exp;
    req.priority = 2;
    req.deadline_ns = rtx_mono_ns() + 2000000; /* 2 ms */
    ck_assert_msg(rtx_serving_infer(f.s, &req, &err) == 0, "%s", err.msg);
    struct call late;
    call_init(&late);
    req.ctx = &late;
    req.deadline_ns = rtx_mono_ns() - 1; /* passed already: expired, not an overload */
    ck_assert_int_eq(rtx_serving_infer(f.s, &req, &err), RTX_EEXPIRED);
    ck_assert(strstr(err.msg, "before the request could be queued"));
    ck_assert_int_eq(get_stats(f.s, "scale").failures[RTX_INFER_FAIL_EXPIRED], 1);
    call_close(&late);
    rtx_tensor_unref(a);
    rtx_tensor_unref(b);
    rtx_model_unref(m);
    cancel = 1;
    sleep_ms(5);
    call_open_gate(&gate);
    call_wait(&gate);
    call_wait(&can);
    call_wait(&exp);
    ck_assert_int_eq(can.code, RTX_ECANCELED);
    ck_assert_int_eq(exp.code, RTX_EEXPIRED);
    ck_assert_int_eq(lane_counter(f.s, "batch", RTX_SCHED_CTR_CANCELLED), 1);
    ck_assert_int_eq(lane_counter(f.s, "batch", RTX_SCHED_CTR_COMPLETED), 0);
    ck_assert_int_eq(lane_counter(f.s, "interactive", RTX_SCHED_CTR_EXPIRED), 1);
    ck_assert_int_eq(lane_counter(f.s, "interactive", RTX_SCHED_CTR_COMPLETED), 0);
    call_close(&gate);
    call_close(&can);
    call_close(&exp);
    fx_stop(&f);
}
END_TEST

/* In brownout the batcher's queue delay is multiplied by the scheduler's delay factor: with
 * a 5 s delay and a factor of 0.01, a lone request waits about 50 ms, not 5 s. The
 * scheduler is forced into brownout by a tiny entry pressure and a 1 ms window. */
START_TEST(lanes_brownout_shortens_the_batching_delay) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8,
                ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": 5000000}");
    struct rtx_sched_config sc;
    rtx_sched_config_init(&sc);
    sc.brownout_window_ns = 1000000;
    sc.brownout_exit_window_ns = 3600LL * 1000000000LL;
    sc.brownout_enter_pressure = 1e-6;
    sc.brownout_exit_pressure = 1e-7;
    sc.brownout_delay_factor = 0.01;
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.sched = &sc;
    fx_start_opts(&f, &o);
    struct call gate, c[2];
    hold_worker(f.s, "scale", 8, 1, &gate); /* a full batch runs at once */
    struct rtx_err err = {0};
    for (int i = 0; i < 2; i++) {
        call_init(&c[i]);
        ck_assert(submit_lane(f.s, "scale", 1, (float)i, on_done, &c[i], 0, 1, NULL, &err) == 0);
    }
    struct rtx_sched_stats *st = rtx_malloc(sizeof *st);
    ck_assert_ptr_nonnull(st);
    for (int i = 0; i < 200; i++) {
        rtx_serving_lanes(f.s, st);
        if (st->brownout_level > 0) break;
        sleep_ms(1);
    }
    ck_assert_int_ge(st->brownout_level, 1);
    ck_assert(st->batch_delay_factor <= 0.01 + 1e-12);
    ck_assert(st->lanes[st->n_lanes - 1].shed);
    rtx_free(st);
    /* the shed lane refuses at once */
    struct call shed;
    call_init(&shed);
    ck_assert_int_eq(submit_lane(f.s, "scale", 1, 9.0f, on_done, &shed, 0, 3, NULL, &err),
                     RTX_EOVERLOAD);
    ck_assert(strstr(err.msg, "shed"));
    int64_t t0 = rtx_mono_ns();
    call_open_gate(&gate);
    call_wait(&gate);
    for (int i = 0; i < 2; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        ck_assert_int_eq(c[i].batch_size, 2);
        call_close(&c[i]);
    }
    ck_assert_int_lt(rtx_mono_ns() - t0, 2000000000LL); /* not the 5 s of the full delay */
    call_close(&shed);
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

/* The live scheduler of `name`'s version (its lanes' settings and counters). */
static void version_lanes(struct rtx_serving *s, const char *name, struct rtx_sched_stats *st) {
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_model_get(s, name, 0, &m, &err) == 0, "%s", err.msg);
    rtx__model_lanes(m, rtx_mono_ns(), st);
    rtx_model_unref(m);
}

/* New lane settings (SIGHUP) reach the loaded version's scheduler by the rules of its load
 * (queue bounds capped at models.max_queue) without touching its queued requests, and a
 * version loaded afterwards starts with them; another lane set is refused. */
START_TEST(lanes_reconfigure_reaches_loaded_versions) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    const char *startup[] = {"*"};
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    o.max_queue = 100;
    o.n_startup_models = 1;
    o.startup_models = startup;
    fx_start_opts(&f, &o);
    struct call gate, c[3], refused;
    hold_worker(f.s, "scale", 1, 1, &gate);
    struct rtx_err err = {0};
    for (int i = 0; i < 3; i++) {
        call_init(&c[i]);
        ck_assert(submit_lane(f.s, "scale", 1, (float)i, on_done, &c[i], 0, 1, NULL, &err) == 0);
    }
    struct rtx_sched_config next;
    rtx_sched_config_init(&next);
    next.lanes[0].target_ns = 20 * 1000 * 1000;
    next.lanes[0].max_queued = 2; /* below the 3 queued */
    next.lanes[1].weight = 7;
    next.lanes[2].max_queued = 500000; /* capped at max_queue */
    ck_assert_msg(rtx_serving_reconfigure(f.s, &next, &err) == 0, "%s", err.msg);
    struct rtx_sched_stats *st = rtx_malloc(sizeof *st);
    ck_assert_ptr_nonnull(st);
    version_lanes(f.s, "scale", st);
    ck_assert_int_eq(st->lanes[0].config.target_ns, 20 * 1000 * 1000);
    ck_assert_int_eq(st->lanes[0].config.max_queued, 2);
    ck_assert_int_eq(st->lanes[0].queued, 3);
    ck_assert_int_eq(st->lanes[1].config.weight, 7);
    ck_assert_int_eq(st->lanes[1].config.max_queued, 100);
    ck_assert_int_eq(st->lanes[2].config.max_queued, 100);
    ck_assert_int_eq(st->executors, 1);
    call_init(&refused);
    ck_assert_int_eq(submit_lane(f.s, "scale", 1, 5.0f, on_done, &refused, 0, 1, NULL, &err),
                     RTX_EOVERLOAD);
    ck_assert_msg(strstr(err.msg, "lane_full") && strstr(err.msg, "bound 2"), "%s", err.msg);

    /* another lane set: refused, the version keeps its settings */
    struct rtx_sched_config other = next;
    other.n_lanes = 2;
    other.lanes[1].weight = 9;
    ck_assert_int_eq(rtx_serving_reconfigure(f.s, &other, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "lanes"), "%s", err.msg);
    version_lanes(f.s, "scale", st);
    ck_assert_int_eq(st->lanes[1].config.weight, 7);
    ck_assert_int_eq(rtx_serving_reconfigure(NULL, &next, &err), RTX_EINVAL);

    /* the queued requests run */
    call_open_gate(&gate);
    call_wait(&gate);
    for (int i = 0; i < 3; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        call_close(&c[i]);
    }
    ck_assert_int_eq(refused.done, 0);

    /* a version loaded now starts with the new settings */
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    version_lanes(f.s, "scale", st);
    ck_assert_int_eq(st->lanes[0].counters[RTX_SCHED_CTR_ADMITTED], 0); /* a new scheduler */
    ck_assert_int_eq(st->lanes[0].config.target_ns, 20 * 1000 * 1000);
    ck_assert_int_eq(st->lanes[0].config.max_queued, 2);
    ck_assert_int_eq(st->lanes[1].config.weight, 7);
    ck_assert_int_eq(st->lanes[2].config.max_queued, 100);
    rtx_free(st);
    call_close(&refused);
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

struct load_call {
    struct rtx_serving *s;
    int rc;
    struct rtx_err err;
};

static void *load_main(void *arg) {
    struct load_call *l = arg;
    l->rc = rtx_serving_load(l->s, "scale", NULL, &l->err);
    return NULL;
}

/* Settings that change while a version loads reach it before it serves: the load copied the
 * old ones when it began (its config.json is a FIFO it blocks on, so the change lands after
 * the copy and before the version is swapped in). */
START_TEST(lanes_reconfigure_during_a_load_reaches_the_new_version) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    char path[1024], text[4096];
    snprintf(path, sizeof path, "%s/scale/config.json", f.repo);
    FILE *cf = fopen(path, "rb");
    ck_assert_ptr_nonnull(cf);
    size_t len = fread(text, 1, sizeof text, cf);
    fclose(cf);
    ck_assert(len > 0 && len < sizeof text);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    fx_start_opts(&f, &o);
    struct load_call lc = {.s = f.s};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, load_main, &lc), 0);
    int fd = open(path, O_WRONLY); /* returns once the load opened the FIFO */
    ck_assert_int_ge(fd, 0);
    struct rtx_sched_config next;
    rtx_sched_config_init(&next);
    next.lanes[0].target_ns = 20 * 1000 * 1000;
    next.lanes[0].max_queued = 2;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_reconfigure(f.s, &next, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    pthread_join(t, NULL);
    ck_assert_msg(lc.rc == 0, "%s", lc.err.msg);
    struct rtx_sched_stats *st = rtx_malloc(sizeof *st);
    ck_assert_ptr_nonnull(st);
    version_lanes(f.s, "scale", st);
    ck_assert_int_eq(st->lanes[0].config.target_ns, 20 * 1000 * 1000);
    ck_assert_int_eq(st->lanes[0].config.max_queued, 2);
    rtx_free(st);
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_lanes_suite(void) {
    Suite *s = suite_create("serving_lanes");
    TCase *tc = tcase_create("serving_lanes");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, lanes_follow_name_priority_model_and_default);
    tcase_add_test(tc, lanes_unknown_model_lane_fails_the_load);
    tcase_add_test(tc, lanes_full_lane_refuses_with_overload);
    tcase_add_test(tc, lanes_dispatch_in_deadline_and_lane_order);
    tcase_add_test(tc, lanes_cancel_and_expiry_leave_the_queue);
    tcase_add_test(tc, lanes_brownout_shortens_the_batching_delay);
    tcase_add_test(tc, lanes_reconfigure_reaches_loaded_versions);
    tcase_add_test(tc, lanes_reconfigure_during_a_load_reaches_the_new_version);
    suite_add_tcase(s, tc);
    return s;
}
