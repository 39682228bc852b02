/*
 * test-config-reload.c - reloading rtxd's settings (SIGHUP): mutable settings applied,
 * immutable ones kept and reported, flag values kept, atomic on error and out of memory;
 * lane settings and [scheduler] knobs applied, a changed lane set refused, a bad lane value
 * failing the whole reload. The fixture and helpers are in test-config-util.h.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/log.h"
#include "tests/unit/test-config-util.h"

/* ------------------------------------------------------------------------------------------
 * Reload
 * ---------------------------------------------------------------------------------------- */

/* Captures stderr into a temporary file while fn runs; returns the text (free() it). */
static char *stderr_of(void (*fn)(void *), void *arg) {
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(tmp), STDERR_FILENO);
    fn(arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    off_t len = lseek(fileno(tmp), 0, SEEK_END);
    ck_assert_int_ge(len, 0);
    char *buf = calloc(1, (size_t)len + 1);
    ck_assert_int_eq(pread(fileno(tmp), buf, (size_t)len, 0), len);
    fclose(tmp);
    return buf;
}

struct reload_call {
    struct rtx_config *cfg;
    int rc, changed;
    struct rtx_err err;
};

static void do_reload(void *arg) {
    struct reload_call *r = arg;
    r->rc = rtx_config_reload(r->cfg, &r->changed, &r->err);
}

START_TEST(config_reload_applies_mutable_skips_immutable) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[server]\nlisten = 127.0.0.1:1\n[drain]\ngrace_ms = 100\n"
                         "[store]\nretention_max_bytes = 1m\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);

    write_file(ini_path, "[server]\nlisten = 127.0.0.1:2\n[drain]\ngrace_ms = 200\n"
                         "[jobs]\nrestart_policy = fail\n[log]\nlevel = warn\n");
    setenv("RTXD_STORE_RETENTION_MAX_AGE_S", "60", 1);
    struct reload_call r = {.cfg = &cfg};
    char *out = stderr_of(do_reload, &r);
    ck_assert_int_eq(r.rc, 0);
    /* drain, restart policy, log level and age changed; bytes went back to its default */
    ck_assert_int_eq(r.changed, 5);
    ck_assert_int_eq(cfg.drain_grace_ms, 200);
    ck_assert_str_eq(cfg.restart_policy, "fail");
    ck_assert_str_eq(cfg.log_level, "warn");
    ck_assert_int_eq(cfg.retention_max_age_s, 60);
    ck_assert_int_eq(cfg.retention_max_bytes, 1LL << 30);
    assert_origin(&cfg, "drain.grace_ms", "reload");
    assert_origin(&cfg, "store.retention_max_age_s", "reload");
    assert_origin(&cfg, "store.retention_max_bytes", "reload");
    /* the log level hook ran */
    ck_assert(!rtx_log_enabled(RTX_LOG_INFO));
    ck_assert(rtx_log_enabled(RTX_LOG_WARN));
    /* immutable: kept, with its origin, and reported */
    ck_assert_str_eq(cfg.listen, "127.0.0.1:1");
    assert_origin(&cfg, "server.listen", "file");
    ck_assert_msg(strstr(out, " warn setting server.listen changes only at restart "
                              "current=127.0.0.1:1 configured=127.0.0.1:2\n") != NULL,
                  "%s", out);
    /* each applied change is logged (at the level in force while the reload ran) */
    ck_assert_msg(strstr(out, " info setting changed setting=drain.grace_ms from=100 to=200\n") !=
                      NULL,
                  "%s", out);
    ck_assert_ptr_nonnull(strstr(out, " info setting changed setting=log.level from=info "
                                      "to=warn\n"));
    free(out);

    /* nothing changed: nothing applied, the immutable difference reported again */
    rtx_log_configure("text", "info");
    r = (struct reload_call){.cfg = &cfg};
    out = stderr_of(do_reload, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.changed, 0);
    ck_assert_ptr_nonnull(strstr(out, "setting server.listen changes only at restart"));
    free(out);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_reload_keeps_flag_values) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[drain]\ngrace_ms = 100\n");
    ck_assert_int_eq(
        load(&cfg,
             args_of(&a, "--config", ini_path, "--drain.grace_ms=5", "--log.format", "text", NULL),
             &err),
        0);
    write_file(ini_path, "[drain]\ngrace_ms = 200\n[log]\nformat = json\nlevel = error\n");
    setenv("RTXD_DRAIN_GRACE_MS", "300", 1);
    struct reload_call r = {.cfg = &cfg};
    char *out = stderr_of(do_reload, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.changed, 1); /* log.level only: the others came from flags */
    ck_assert_ptr_nonnull(strstr(out, "setting changed setting=log.level from=info to=error"));
    free(out);
    ck_assert_str_eq(cfg.log_level, "error");
    assert_origin(&cfg, "log.level", "reload");
    ck_assert_int_eq(cfg.drain_grace_ms, 5);
    ck_assert_str_eq(cfg.log_format, "text");
    assert_origin(&cfg, "drain.grace_ms", "flag");
    assert_origin(&cfg, "log.format", "flag");
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_reload_is_atomic_on_error) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[drain]\ngrace_ms = 100\n[log]\nlevel = warn\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    char *before = print_config(&cfg);

    /* a good mutable change before a bad value: neither applies */
    write_file(ini_path, "[drain]\ngrace_ms = 200\n[jobs]\nworkers = lots\n");
    int changed = -1;
    ck_assert_int_eq(rtx_config_reload(&cfg, &changed, &err), RTX_EINVAL);
    char want[400];
    snprintf(want, sizeof want, "%s:4: jobs.workers: \"lots\" is not an integer", ini_path);
    ck_assert_str_eq(err.msg, want);
    ck_assert_int_eq(changed, 0);
    char *after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);

    /* an invalid combination of immutable settings fails the reload too */
    write_file(ini_path, "[drain]\ngrace_ms = 200\n[jobs]\ndefault_lane = nosuch\n");
    ck_assert_int_eq(rtx_config_reload(&cfg, &changed, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "jobs.default_lane (file): \"nosuch\""));
    after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);

    /* a vanished file */
    unlink(ini_path);
    ck_assert_int_eq(rtx_config_reload(&cfg, &changed, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, ini_path));
    after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);
    ck_assert_int_eq(cfg.drain_grace_ms, 100);

    /* the environment is checked as well */
    write_file(ini_path, "[drain]\ngrace_ms = 100\n[log]\nlevel = warn\n");
    setenv("RTXD_LOG_LEVEL", "chatty", 1);
    ck_assert_int_eq(rtx_config_reload(&cfg, NULL, &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "environment RTXD_LOG_LEVEL: log.level: \"chatty\" is not one "
                              "of debug, info, warn, error");
    after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);
    free(before);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_reload_out_of_memory_leaves_config) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[drain]\ngrace_ms = 100\n[log]\nlevel = error\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    char *before = print_config(&cfg);
    write_file(ini_path, "[drain]\ngrace_ms = 200\n[log]\nformat = json\nlevel = error\n"
                         "[lane.batch]\nweight = 3\n");
    int rc = RTX_ENOMEM;
    for (long n = 1; rc == RTX_ENOMEM; n++) {
        ck_assert_int_lt(n, 1000);
        rtx_alloc_fail_after(n);
        rc = rtx_config_reload(&cfg, NULL, &err);
        rtx_alloc_fail_after(0);
        if (rc == RTX_ENOMEM) {
            char *now = print_config(&cfg);
            ck_assert_str_eq(now, before);
            free(now);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(cfg.drain_grace_ms, 200);
    ck_assert_str_eq(cfg.log_format, "json");
    ck_assert_int_eq(cfg.sched.lanes[2].weight, 3);
    free(before);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_reload_applies_lane_settings) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[lane.realtime]\ntarget_p99_us = 20000\n[lane.batch]\nweight = 2\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    write_file(ini_path, "[lane.realtime]\ntarget_p99_us = 10000\n"
                         "[lane.interactive]\nmax_queued = 7\non_timeout = delay\n"
                         "[lane.batch]\nweight = 2\npreemptible = false\n"
                         "[scheduler]\ncost_ema_alpha = 0.5\nbrownout_window_ms = 250\n"
                         "executors = 4\n");
    rtx_log_configure("text", "info");
    struct reload_call r = {.cfg = &cfg};
    char *out = stderr_of(do_reload, &r);
    ck_assert_msg(r.rc == 0, "%s", r.err.msg);
    ck_assert_int_eq(r.changed, 6);
    const struct rtx_sched_config *sc = &cfg.sched;
    ck_assert_int_eq(sc->n_lanes, 3);
    ck_assert_int_eq(sc->lanes[0].target_ns, 10 * 1000 * 1000);
    ck_assert_int_eq(sc->lanes[1].max_queued, 7);
    ck_assert_int_eq(sc->lanes[1].on_timeout, RTX_SCHED_TIMEOUT_DELAY);
    ck_assert_int_eq(sc->lanes[2].weight, 2);
    ck_assert(!sc->lanes[2].preemptible);
    ck_assert(sc->cost_ema_alpha == 0.5);
    ck_assert_int_eq(sc->brownout_window_ns, 250LL * 1000 * 1000);
    ck_assert_int_eq(sc->executors, 1); /* fixed: kept, and reported */
    assert_origin(&cfg, "lane.realtime.target_p99_us", "reload");
    assert_origin(&cfg, "lane.interactive.max_queued", "reload");
    assert_origin(&cfg, "lane.interactive.on_timeout", "reload");
    assert_origin(&cfg, "lane.batch.preemptible", "reload");
    assert_origin(&cfg, "scheduler.cost_ema_alpha", "reload");
    assert_origin(&cfg, "scheduler.brownout_window_ms", "reload");
    assert_origin(&cfg, "lane.batch.weight", "file"); /* unchanged */
    assert_origin(&cfg, "lane.realtime.weight", "default");
    assert_origin(&cfg, "scheduler.executors", "default");
    ck_assert_str_eq(view_of(&cfg, "lane.realtime.target_p99_us").value, "10000");
    ck_assert_msg(strstr(out,
                         " info lanes reconfigured changed=\"scheduler.cost_ema_alpha=0.2->0.5 "
                         "scheduler.brownout_window_ms=1000->250 "
                         "lane.realtime.target_p99_us=20000->10000 "
                         "lane.interactive.max_queued=5000->7 "
                         "lane.interactive.on_timeout=reject->delay "
                         "lane.batch.preemptible=true->false\"\n") != NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, " warn setting scheduler.executors changes only at restart "
                              "current=1 configured=4\n") != NULL,
                  "%s", out);
    ck_assert_ptr_null(strstr(out, "set of lanes"));
    free(out);
    char *text = print_config(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "# origin: reload, mutable\ntarget_p99_us = 10000\n"));
    free(text);

    /* the same file again: nothing changes, the origins stay "reload" */
    r = (struct reload_call){.cfg = &cfg};
    out = stderr_of(do_reload, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.changed, 0);
    ck_assert_ptr_null(strstr(out, "lanes reconfigured"));
    free(out);
    assert_origin(&cfg, "lane.realtime.target_p99_us", "reload");
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_reload_refuses_changed_lane_set_applies_the_rest) {
    static const char *const files[] = {
        /* a lane added */
        "[drain]\ngrace_ms = 200\n[scheduler]\ncost_ema_alpha = 0.5\n"
        "[lane.realtime]\ntarget_p99_us = 10000\n[lane.bulk]\nweight = 1\n",
        /* reordered */
        "[drain]\ngrace_ms = 200\n[scheduler]\ncost_ema_alpha = 0.5\n"
        "[lane.realtime]\ntarget_p99_us = 10000\n[jobs]\nlanes = batch,interactive,realtime\n",
        /* one removed */
        "[drain]\ngrace_ms = 200\n[scheduler]\ncost_ema_alpha = 0.5\n"
        "[lane.realtime]\ntarget_p99_us = 10000\n[jobs]\nlanes = realtime,batch\n",
    };
    static const char *const configured[] = {
        "configured=realtime,interactive,batch,bulk\n",
        "configured=batch,interactive,realtime\n",
        "configured=realtime,batch\n",
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct args a;
        struct rtx_config cfg;
        struct rtx_err err;
        write_file(ini_path, "[drain]\ngrace_ms = 100\n");
        ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
        struct rtx_sched_config before = cfg.sched;
        write_file(ini_path, files[f]);
        rtx_log_configure("text", "info");
        struct reload_call r = {.cfg = &cfg};
        char *out = stderr_of(do_reload, &r);
        ck_assert_msg(r.rc == 0, "%s", r.err.msg);
        /* no lane setting taken; the knob and the table's setting are */
        ck_assert_int_eq(cfg.sched.n_lanes, 3);
        ck_assert_int_eq(cfg.sched.lanes[0].target_ns, before.lanes[0].target_ns);
        ck_assert_mem_eq(cfg.sched.lanes, before.lanes, sizeof before.lanes);
        ck_assert_str_eq(cfg.lanes, "realtime,interactive,batch");
        ck_assert(cfg.sched.cost_ema_alpha == 0.5);
        ck_assert_int_eq(cfg.drain_grace_ms, 200);
        ck_assert_int_eq(r.changed, 2);
        assert_origin(&cfg, "lane.realtime.target_p99_us", "default");
        assert_origin(&cfg, "scheduler.cost_ema_alpha", "reload");
        ck_assert_msg(strstr(out, " warn the set of lanes changes only at restart; lane "
                                  "settings not applied current=realtime,interactive,batch ") &&
                          strstr(out, configured[f]),
                      "%s", out);
        ck_assert_msg(strstr(out, " info lanes reconfigured "
                                  "changed=\"scheduler.cost_ema_alpha=0.2->0.5\"\n"),
                      "%s", out);
        free(out);
        rtx_config_free(&cfg);
    }
}
END_TEST

START_TEST(config_reload_bad_lane_value_fails_whole_reload) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[drain]\ngrace_ms = 100\n[lane.batch]\nweight = 2\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    char *before = print_config(&cfg);
    /* good changes before and after a bad lane value: nothing applies */
    write_file(ini_path, "[drain]\ngrace_ms = 200\n[lane.realtime]\ntarget_p99_us = 10000\n"
                         "[lane.batch]\nweight = 0\n[log]\nlevel = debug\n");
    int changed = -1;
    ck_assert_int_eq(rtx_config_reload(&cfg, &changed, &err), RTX_EINVAL);
    char want[sizeof ini_path + 16];
    snprintf(want, sizeof want, "%s:6: ", ini_path);
    ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0 &&
                      strstr(err.msg, "[lane.batch] weight"),
                  "%s", err.msg);
    ck_assert_int_eq(changed, 0);
    char *after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);
    /* values that are each fine but not together */
    write_file(ini_path, "[lane.realtime]\ntarget_p99_us = 10000\n"
                         "[scheduler]\nbrownout_exit_pressure = 2.0\n");
    ck_assert_int_eq(rtx_config_reload(&cfg, &changed, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "pressure"), "%s", err.msg);
    after = print_config(&cfg);
    ck_assert_str_eq(after, before);
    free(after);
    ck_assert_int_eq(cfg.sched.lanes[0].target_ns, 50 * 1000 * 1000);
    free(before);
    rtx_config_free(&cfg);
}
END_TEST

Suite *rtx_config_reload_suite(void) {
    Suite *s = suite_create("config_reload");
    TCase *tc = tcase_create("reload");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, config_reload_applies_mutable_skips_immutable);
    tcase_add_test(tc, config_reload_keeps_flag_values);
    tcase_add_test(tc, config_reload_is_atomic_on_error);
    tcase_add_test(tc, config_reload_out_of_memory_leaves_config);
    tcase_add_test(tc, config_reload_applies_lane_settings);
    tcase_add_test(tc, config_reload_refuses_changed_lane_set_applies_the_rest);
    tcase_add_test(tc, config_reload_bad_lane_value_fails_whole_reload);
    suite_add_tcase(s, tc);
    return s;
}
