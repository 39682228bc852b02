/*
 * test-config.c - rtxd's settings: defaults, the file / environment / flag layers and their
 * origins, value parsing (sizes, bounds, enums, lanes), one test per error class with the
 * source it names, --print-config round trips, usage, the [device] settings and their old
 * names, and out-of-memory behaviour. Reload is test-config-reload.c's; the fixture and
 * helpers are in test-config-util.h.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/log.h"
#include "tests/unit/test-config-util.h"

/* Loads with one flag expected to fail with RTX_EINVAL; asserts the message contains `want`. */
static void assert_flag_rejected(const char *flag, const char *want) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, flag, NULL), &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", flag, err.msg,
                  want);
    rtx_config_free(&cfg);
}

/* Loads ini_path holding `text`; expects RTX_EINVAL with exactly "PATH:`want`". */
static void assert_file_rejected(const char *text, const char *want) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    char full[512];
    write_file(ini_path, text);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), RTX_EINVAL);
    snprintf(full, sizeof full, "%s:%s", ini_path, want);
    ck_assert_str_eq(err.msg, full);
    rtx_config_free(&cfg);
}

/* ------------------------------------------------------------------------------------------
 * Layers and origins
 * ---------------------------------------------------------------------------------------- */

START_TEST(config_defaults_without_sources) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    ck_assert_str_eq(cfg.listen, "127.0.0.1:8001");
    ck_assert_int_eq(cfg.cq_threads, 2);
    ck_assert_int_eq(cfg.max_message_bytes, 64 << 20);
    ck_assert_str_eq(cfg.store_path, "./var/rtxd.db");
    ck_assert_int_eq(cfg.retention_max_age_s, 7 * 86400);
    ck_assert_int_eq(cfg.retention_max_bytes, 1LL << 30);
    ck_assert_int_eq(cfg.workers, 1);
    ck_assert_int_ge(cfg.cpu_threads, 1);
    ck_assert_int_eq(cfg.cpu_threads, sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_str_eq(cfg.lanes, "realtime,interactive,batch");
    ck_assert_str_eq(cfg.default_lane, "batch");
    ck_assert_str_eq(cfg.restart_policy, "rerun");
    ck_assert_int_eq(cfg.max_graph_nodes, 100000);
    ck_assert_int_eq(cfg.max_tensor_bytes, 1LL << 30);
    ck_assert_int_eq(cfg.max_queued, 100000);
    ck_assert_int_eq(cfg.drain_grace_ms, 30000);
    ck_assert_str_eq(cfg.log_format, "text");
    ck_assert_str_eq(cfg.log_level, "info");
    ck_assert_ptr_null(cfg.config_path);
    ck_assert_int_eq(a.argc, 1);
    ck_assert_ptr_null(a.argv[1]);

    struct rtx_setting_view *v;
    int n;
    ck_assert_int_eq(rtx_config_list(&cfg, &v, &n), 0);
    /* the table, then [scheduler] (10 knobs) and the three default lanes (5 keys each) */
    ck_assert_int_eq(n, RTX_CONFIG_N_SETTINGS + 10 + 3 * 5);
    ck_assert_str_eq(v[0].name, "server.listen");
    ck_assert_str_eq(v[0].value, "127.0.0.1:8001");
    ck_assert_str_eq(v[RTX_CONFIG_N_SETTINGS].name, "scheduler.executors");
    bool saw_target = false;
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(v[i].origin, "default");
        ck_assert(strlen(v[i].description) > 0);
        if (strcmp(v[i].name, "lane.realtime.target_p99_us") == 0) {
            ck_assert_str_eq(v[i].value, "50000");
            ck_assert(v[i].is_mutable); /* SIGHUP changes lanes' settings */
            saw_target = true;
        }
        /* ... and the scheduler's knobs but those fixed when a scheduler is made */
        bool fixed = strcmp(v[i].name, "scheduler.executors") == 0 ||
                     strcmp(v[i].name, "scheduler.max_running") == 0 ||
                     strcmp(v[i].name, "scheduler.cost_keys") == 0;
        if (i >= RTX_CONFIG_N_SETTINGS) ck_assert_msg(v[i].is_mutable == !fixed, "%s", v[i].name);
    }
    ck_assert(saw_target);
    rtx_free(v);
    rtx_config_free(&cfg);
    rtx_config_free(&cfg); /* a freed config is zeroed: freeing again is harmless */
}
END_TEST

START_TEST(config_file_overrides_default) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "; rtxd\n# comment\n[server]\nlisten = 0.0.0.0:9001\n\n"
                         "[jobs]\nworkers=3\nlanes = fast, slow\ndefault_lane = slow\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    ck_assert_str_eq(cfg.listen, "0.0.0.0:9001");
    ck_assert_int_eq(cfg.workers, 3);
    ck_assert_str_eq(cfg.lanes, "fast,slow");
    ck_assert_str_eq(cfg.config_path, ini_path);
    assert_origin(&cfg, "server.listen", "file");
    assert_origin(&cfg, "jobs.workers", "file");
    assert_origin(&cfg, "server.cq_threads", "default");
    /* --config and its path are consumed */
    ck_assert_int_eq(a.argc, 1);
    ck_assert_ptr_null(a.argv[1]);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_env_overrides_file) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[server]\ncq_threads = 3\n[drain]\ngrace_ms = 10\n");
    setenv("RTXD_CONFIG", ini_path, 1); /* the file named by the environment */
    setenv("RTXD_SERVER_CQ_THREADS", "4", 1);
    setenv("RTXD_STORE_PATH", "/data/x.db", 1);
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    ck_assert_int_eq(cfg.cq_threads, 4);
    ck_assert_int_eq(cfg.drain_grace_ms, 10);
    ck_assert_str_eq(cfg.store_path, "/data/x.db");
    ck_assert_str_eq(cfg.config_path, ini_path);
    assert_origin(&cfg, "server.cq_threads", "env");
    assert_origin(&cfg, "store.path", "env");
    assert_origin(&cfg, "drain.grace_ms", "file");
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_flag_overrides_env) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[jobs]\nworkers = 2\nmax_queued = 5\n");
    setenv("RTXD_JOBS_WORKERS", "3", 1);
    setenv("RTXD_LOG_LEVEL", "warn", 1);
    args_of(&a, "--help", "--jobs.workers=4", "--config", ini_path, "--log.level", "error",
            "--version", "positional", "--print-config", "--", "--jobs.workers=9", NULL);
    ck_assert_int_eq(load(&cfg, &a, &err), 0);
    ck_assert_int_eq(cfg.workers, 4);
    ck_assert_str_eq(cfg.log_level, "error");
    ck_assert_int_eq(cfg.max_queued, 5);
    assert_origin(&cfg, "jobs.workers", "flag");
    assert_origin(&cfg, "log.level", "flag");
    assert_origin(&cfg, "jobs.max_queued", "file");
    /* everything that is neither a setting nor --config stays, in order; "--" ends the
     * settings */
    const char *left[] = {"rtxd",           "--help", "--version",       "positional",
                          "--print-config", "--",     "--jobs.workers=9"};
    ck_assert_int_eq(a.argc, (int)(sizeof left / sizeof left[0]));
    for (int i = 0; i < a.argc; i++)
        ck_assert_str_eq(a.argv[i], left[i]);
    ck_assert_ptr_null(a.argv[a.argc]);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_cpu_threads_zero_resolves_per_worker) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.workers=256", NULL), &err), 0);
    ck_assert_int_eq(cfg.cpu_threads, cpus / 256 >= 1 ? cpus / 256 : 1);
    assert_origin(&cfg, "jobs.cpu_threads", "default");
    rtx_config_free(&cfg);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.cpu_threads=3", NULL), &err), 0);
    ck_assert_int_eq(cfg.cpu_threads, 3);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_load_applies_log_settings) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert(!rtx_log_enabled(RTX_LOG_WARN)); /* the fixture set "error" */
    ck_assert_int_eq(load(&cfg, args_of(&a, "--log.level=debug", NULL), &err), 0);
    ck_assert(rtx_log_enabled(RTX_LOG_DEBUG));
    rtx_config_free(&cfg);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Values
 * ---------------------------------------------------------------------------------------- */

START_TEST(config_size_suffixes) {
    static const struct {
        const char *text;
        int64_t bytes;
    } cases[] = {
        {"0", 0},        {"4096", 4096},    {"64k", 64 << 10}, {"64K", 64 << 10},
        {"2m", 2 << 20}, {"3G", 3LL << 30}, {"1t", 1LL << 40}, {"+5k", 5 << 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct args a;
        struct rtx_config cfg;
        struct rtx_err err;
        char flag[64];
        snprintf(flag, sizeof flag, "--store.retention_max_bytes=%s", cases[i].text);
        ck_assert_int_eq(load(&cfg, args_of(&a, flag, NULL), &err), 0);
        ck_assert_int_eq(cfg.retention_max_bytes, cases[i].bytes);
        rtx_config_free(&cfg);
    }
    setenv("RTXD_SERVER_MAX_MESSAGE_BYTES", "16m", 1);
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    ck_assert_int_eq(cfg.max_message_bytes, 16 << 20);
    rtx_config_free(&cfg);

    assert_flag_rejected("--store.retention_max_bytes=2x",
                         "store.retention_max_bytes: \"2x\" is not a size");
    assert_flag_rejected("--store.retention_max_bytes=2mb", "is not a size");
    assert_flag_rejected("--store.retention_max_bytes=k", "is not a size");
    assert_flag_rejected("--store.retention_max_bytes=", "is not a size");
    assert_flag_rejected("--store.retention_max_bytes=99999999t", "\"99999999t\" is too large");
    assert_flag_rejected("--store.retention_max_bytes=99999999999999999999", "is not a size");
    /* sizes only for byte settings */
    assert_flag_rejected("--jobs.max_queued=5k", "jobs.max_queued: \"5k\" is not an integer");
}
END_TEST

START_TEST(config_bounds) {
    assert_flag_rejected("--server.cq_threads=0",
                         "flag --server.cq_threads: server.cq_threads: 0 is out of range "
                         "[1, 64]");
    assert_flag_rejected("--server.cq_threads=65", "65 is out of range [1, 64]");
    assert_flag_rejected("--server.max_message_bytes=1k", "1024 is out of range [4096, ");
    assert_flag_rejected("--server.max_message_bytes=2g", "is out of range");
    assert_flag_rejected("--store.retention_max_age_s=-1", "-1 is out of range [0, ");
    assert_flag_rejected("--jobs.workers=257", "jobs.workers: 257 is out of range [1, 256]");
    assert_flag_rejected("--jobs.workers= 2", "\" 2\" is not an integer");
    assert_flag_rejected("--jobs.workers=2.5", "\"2.5\" is not an integer");
    assert_flag_rejected("--drain.grace_ms=3600001", "out of range [0, 3600000]");

    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg,
                          args_of(&a, "--server.cq_threads=64", "--drain.grace_ms=0",
                                  "--store.retention_max_age_s=0", NULL),
                          &err),
                     0);
    ck_assert_int_eq(cfg.cq_threads, 64);
    ck_assert_int_eq(cfg.drain_grace_ms, 0);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_enums) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg,
                          args_of(&a, "--jobs.restart_policy=fail", "--log.format=json",
                                  "--log.level=warn", NULL),
                          &err),
                     0);
    ck_assert_str_eq(cfg.restart_policy, "fail");
    ck_assert_str_eq(cfg.log_format, "json");
    rtx_config_free(&cfg);
    assert_flag_rejected("--log.level=loud",
                         "log.level: \"loud\" is not one of debug, info, warn, error");
    assert_flag_rejected("--log.format=JSON", "log.format: \"JSON\" is not one of text, json");
    assert_flag_rejected("--jobs.restart_policy=", "\"\" is not one of rerun, fail");
}
END_TEST

START_TEST(config_strings) {
    assert_flag_rejected("--server.listen=", "server.listen: length 0 is out of range [1, 255]");
    assert_flag_rejected("--store.path=a\nb", "store.path: control character in");
    assert_flag_rejected("--store.path= x", "begins or ends with a blank");
    assert_flag_rejected("--store.path=x ;y", "blank followed by ';'");
    char long_path[5000];
    memset(long_path, 'p', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    memcpy(long_path, "--store.path=", 13);
    assert_flag_rejected(long_path, "store.path: length 4986 is out of range [1, 4095]");

    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, "--store.path=/a b/c;d#e.db", NULL), &err), 0);
    ck_assert_str_eq(cfg.store_path, "/a b/c;d#e.db");
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_lane_checks) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(
        load(&cfg, args_of(&a, "--jobs.lanes= a , b-2,c_3", "--jobs.default_lane", "c_3", NULL),
             &err),
        0);
    ck_assert_str_eq(cfg.lanes, "a,b-2,c_3");
    ck_assert_str_eq(cfg.default_lane, "c_3");
    rtx_config_free(&cfg);

    assert_flag_rejected("--jobs.lanes=", "jobs.lanes: empty lane name");
    assert_flag_rejected("--jobs.lanes=a,,batch", "jobs.lanes: empty lane name");
    assert_flag_rejected("--jobs.lanes=batch,", "jobs.lanes: empty lane name");
    assert_flag_rejected("--jobs.lanes=Batch",
                         "jobs.lanes: lane name \"Batch\" has characters outside [a-z0-9_-]");
    assert_flag_rejected("--jobs.lanes=a b,batch", "lane name \"a b\" has characters outside");
    assert_flag_rejected("--jobs.lanes=batch,x,batch", "lane \"batch\" is listed twice");
    assert_flag_rejected("--jobs.lanes=batch,l1,l2,l3,l4,l5,l6,l7,l8,l9,l10,l11,l12,l13,l14,"
                         "l15,l16",
                         "jobs.lanes: more than 16 lanes");
    assert_flag_rejected("--jobs.lanes=batch,abcdefghijklmnopqrstuvwxyz0123456",
                         "is longer than 32");
    assert_flag_rejected("--jobs.default_lane=Fast", "jobs.default_lane: lane name \"Fast\"");
    assert_flag_rejected("--jobs.default_lane=fast",
                         "jobs.default_lane (flag): \"fast\" is not one of jobs.lanes "
                         "(default): realtime,interactive,batch");
    /* the lanes the default lane is checked against are the final ones */
    assert_flag_rejected("--jobs.lanes=x,y", "\"batch\" is not one of jobs.lanes (flag): x,y");
    /* a prefix of a lane is not a lane */
    assert_flag_rejected("--jobs.default_lane=real", "\"real\" is not one of jobs.lanes");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.lanes=batch", NULL), &err), 0);
    rtx_config_free(&cfg);
}
END_TEST

/* [lane.NAME] and [scheduler] sections go to the scheduler's parser; jobs.lanes left at its
 * default lists every lane, set explicitly it selects and orders them. */
START_TEST(config_lane_sections) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    write_file(ini_path, "[lane.realtime]\ntarget_p99_us = 20000\nweight = 16\n"
                         "[lane.bulk]\nmax_queued = 50\non_timeout = delay\n"
                         "[scheduler]\ndefault_cost_us = 5000\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    ck_assert_str_eq(cfg.lanes, "realtime,interactive,batch,bulk");
    ck_assert_int_eq(cfg.sched.n_lanes, 4);
    ck_assert_int_eq(cfg.sched.lanes[0].target_ns, 20000000);
    ck_assert_int_eq(cfg.sched.lanes[0].weight, 16);
    ck_assert_str_eq(cfg.sched.lanes[3].name, "bulk");
    ck_assert_int_eq(cfg.sched.lanes[3].max_queued, 50);
    ck_assert_int_eq(cfg.sched.lanes[3].on_timeout, RTX_SCHED_TIMEOUT_DELAY);
    ck_assert_int_eq(cfg.sched.default_cost_ns, 5000000);
    /* Admin.Config and --print-config list them: changed values with origin "file" */
    struct rtx_setting_view *v;
    int n, found = 0;
    ck_assert_int_eq(rtx_config_list(&cfg, &v, &n), 0);
    static const char *const want_list[][3] = {
        {"lane.realtime.weight", "16", "file"},  {"lane.realtime.target_p99_us", "20000", "file"},
        {"lane.bulk.on_timeout", "delay", "file"}, {"lane.bulk.weight", "1", "default"},
        {"scheduler.default_cost_us", "5000", "file"}, {"scheduler.cost_ema_alpha", "0.2", "default"},
    };
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof want_list / sizeof want_list[0]; k++)
            if (strcmp(v[i].name, want_list[k][0]) == 0) {
                ck_assert_str_eq(v[i].value, want_list[k][1]);
                ck_assert_str_eq(v[i].origin, want_list[k][2]);
                found++;
            }
    ck_assert_int_eq(found, 6);
    rtx_free(v);
    char *text = print_config(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "\n[lane.bulk]\n"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: file, mutable\non_timeout = delay\n"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: default, immutable\nexecutors = 1\n"));
    free(text);
    rtx_config_free(&cfg);

    /* an explicit jobs.lanes orders them and keeps their settings */
    ck_assert_int_eq(load(&cfg,
                          args_of(&a, "--config", ini_path, "--jobs.lanes=bulk,realtime",
                                  "--jobs.default_lane=bulk", NULL),
                          &err),
                     0);
    ck_assert_int_eq(cfg.sched.n_lanes, 2);
    ck_assert_str_eq(cfg.sched.lanes[0].name, "bulk");
    ck_assert_int_eq(cfg.sched.lanes[0].max_queued, 50);
    ck_assert_int_eq(cfg.sched.lanes[1].weight, 16);
    rtx_config_free(&cfg);
    /* ... and must list every lane a section adds */
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, "--jobs.lanes=realtime,batch",
                                        NULL),
                          &err),
                     RTX_EINVAL);
    ck_assert_str_eq(err.msg, "[lane.bulk] defines a lane that jobs.lanes (flag: "
                              "realtime,batch) does not list");
    rtx_config_free(&cfg);

    /* errors name the file, the line, the section, the key and the value */
    char want[sizeof ini_path + 16];
    write_file(ini_path, "[jobs]\nworkers = 1\n[lane.batch]\nweight = 0\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), RTX_EINVAL);
    snprintf(want, sizeof want, "%s:4: ", ini_path);
    ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0 && strstr(err.msg, "weight") &&
                      strstr(err.msg, "[lane.batch]"),
                  "%s", err.msg);
    rtx_config_free(&cfg);
    write_file(ini_path, "[scheduler]\nbrownout_exit_pressure = 2.0\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "lanes and [scheduler]") && strstr(err.msg, "pressure"), "%s",
                  err.msg);
    rtx_config_free(&cfg);
    write_file(ini_path, "[lane.Fast]\nweight = 2\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), RTX_EINVAL);
    rtx_config_free(&cfg);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Errors, each naming its source
 * ---------------------------------------------------------------------------------------- */

START_TEST(config_missing_file_names_path) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    char path[300];
    snprintf(path, sizeof path, "%s/none.ini", tmp_dir);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", path, NULL), &err), -ENOENT);
    char want[400];
    snprintf(want, sizeof want, "config file %s: %s", path, strerror(ENOENT));
    ck_assert_str_eq(err.msg, want);
    /* a failed load leaves argv and cfg alone / zeroed */
    ck_assert_int_eq(a.argc, 3);
    ck_assert_ptr_null(cfg.listen);
    rtx_config_free(&cfg);

    setenv("RTXD_CONFIG", path, 1);
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), -ENOENT);
    ck_assert_str_eq(err.msg, want);
    /* --config wins over RTXD_CONFIG */
    write_file(ini_path, "[jobs]\nworkers = 5\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config=", NULL), &err), -ENOENT);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), 0);
    ck_assert_int_eq(cfg.workers, 5);
    rtx_config_free(&cfg);
    /* an empty RTXD_CONFIG means no file */
    setenv("RTXD_CONFIG", "", 1);
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    ck_assert_ptr_null(cfg.config_path);
    rtx_config_free(&cfg);
    assert_flag_rejected("--config", "--config needs a value");
}
END_TEST

START_TEST(config_file_errors_name_file_and_line) {
    assert_file_rejected("[server]\nlisten = x:1\n\n[server]\nlisen = 1\n",
                         "5: unknown setting \"server.lisen\"");
    assert_file_rejected("[jobs]\nworkers = abc\n", "2: jobs.workers: \"abc\" is not an integer");
    assert_file_rejected("[jobs]\nworkers = 0\n", "2: jobs.workers: 0 is out of range [1, 256]");
    assert_file_rejected("[log]\nlevel = loud\n",
                         "2: log.level: \"loud\" is not one of debug, info, warn, error");
    assert_file_rejected("[store]\nretention_max_bytes = 1q\n",
                         "2: store.retention_max_bytes: \"1q\" is not a size (an integer, "
                         "optionally followed by k, m, g or t)");
    assert_file_rejected("workers = 2\n", "1: unknown setting \"workers\" (outside a [section])");
    assert_file_rejected("[nosuch]\nkey = 1\n", "2: unknown setting \"nosuch.key\"");
    assert_file_rejected("[server\nlisten = x\n",
                         "1: syntax error (expected [section] or key = value)");
    assert_file_rejected("[server]\nlisten\n",
                         "2: syntax error (expected [section] or key = value)");
    /* the first error wins, whether it is syntax or a value */
    assert_file_rejected("[jobs]\nworkers\nworkers = x\n",
                         "2: syntax error (expected [section] or key = value)");
    assert_file_rejected("[jobs]\nworkers = x\nworkers\n",
                         "2: jobs.workers: \"x\" is not an integer");
    assert_file_rejected("[jobs]\nworkers = 2\nworkers = 3\n",
                         "3: jobs.workers set again (first at line 2; an indented line "
                         "continues the value above it)");
    assert_file_rejected("[jobs]\nworkers = 2\n  max_queued = 3\n",
                         "3: jobs.workers set again (first at line 2; an indented line "
                         "continues the value above it)");

    char text[1024] = "[store]\npath = ";
    size_t n = strlen(text);
    memset(text + n, 'p', 600);
    strcpy(text + n + 600, "\n");
    write_file(ini_path, text);
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, NULL), &err), RTX_EINVAL);
    char want[300];
    snprintf(want, sizeof want, "%s:2: line longer than ", ini_path);
    ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
}
END_TEST

START_TEST(config_env_errors_name_variable_and_setting) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    setenv("RTXD_JOBS_WORKERS", "many", 1);
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "environment RTXD_JOBS_WORKERS: jobs.workers: \"many\" is not "
                              "an integer");
    unsetenv("RTXD_JOBS_WORKERS");
    setenv("RTXD_LOG_FORMAT", "", 1);
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "environment RTXD_LOG_FORMAT: log.format: \"\" is not one of "
                              "text, json");
}
END_TEST

START_TEST(config_flag_errors_name_flag) {
    assert_flag_rejected("--server.lisen=1", "unknown setting --server.lisen");
    assert_flag_rejected("--server.lisen", "unknown setting --server.lisen");
    assert_flag_rejected("--jobs.workers", "--jobs.workers needs a value");
    assert_flag_rejected("--x.y.z=1", "unknown setting --x.y.z");

    /* a value may not be taken from the next flag */
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.workers", "--help", NULL), &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "--jobs.workers needs a value");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.workers=x", NULL), &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "flag --jobs.workers: jobs.workers: \"x\" is not an integer");
    /* flags without a dot are the caller's, single-dash ones too */
    ck_assert_int_eq(load(&cfg, args_of(&a, "--foo", "-x.y", "--bar=1", NULL), &err), 0);
    ck_assert_int_eq(a.argc, 4);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_error_with_null_err_returns_code) {
    struct args a;
    struct rtx_config cfg;
    ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.workers=x", NULL), NULL), RTX_EINVAL);
    ck_assert_int_eq(rtx_config_load(&cfg, NULL, a.argv, NULL), RTX_EINVAL);
    int zero = 0;
    ck_assert_int_eq(rtx_config_load(&cfg, &zero, a.argv, NULL), RTX_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Printing, listing, usage
 * ---------------------------------------------------------------------------------------- */

START_TEST(config_print_load_round_trip) {
    struct args a;
    struct rtx_config cfg, back;
    struct rtx_err err;
    setenv("RTXD_STORE_PATH", "/var/lib/rtx d/j;obs#1.db", 1);
    ck_assert_int_eq(
        load(&cfg,
             args_of(&a, "--server.listen=[::1]:7001", "--jobs.lanes=a, b",
                     "--jobs.default_lane=b", "--log.format=json", "--server.max_message_bytes=3m",
                     "--jobs.restart_policy=fail", NULL),
             &err),
        0);
    rtx_log_configure("text", "error");
    char *text = print_config(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "[server]\n# gRPC listen address"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: flag, immutable\nlisten = [::1]:7001\n"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: flag, mutable\nformat = json\n"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: env, immutable\npath = /var/lib/rtx d/"));
    ck_assert_ptr_nonnull(strstr(text, "# origin: default, mutable\ngrace_ms = 30000\n"));
    write_file(ini_path, text);
    free(text);
    unsetenv("RTXD_STORE_PATH");

    ck_assert_int_eq(load(&back, args_of(&a, "--config", ini_path, NULL), &err), 0);
    rtx_log_configure("text", "error");
    struct rtx_setting_view *v1, *v2;
    int n1, n2;
    ck_assert_int_eq(rtx_config_list(&cfg, &v1, &n1), 0);
    ck_assert_int_eq(rtx_config_list(&back, &v2, &n2), 0);
    ck_assert_int_eq(n1, n2);
    for (int i = 0; i < n1; i++) {
        ck_assert_str_eq(v1[i].name, v2[i].name);
        ck_assert_str_eq(v1[i].value, v2[i].value);
        /* lane and scheduler settings say "default" for built-in values wherever they came
         * from; the table's origins are tracked */
        if (i < RTX_CONFIG_N_SETTINGS)
            ck_assert_str_eq(v2[i].origin, "file");
        else
            ck_assert_str_eq(v2[i].origin, v1[i].origin);
        ck_assert(v1[i].is_mutable == v2[i].is_mutable);
    }
    ck_assert_int_eq(back.max_message_bytes, 3 << 20);
    ck_assert_str_eq(back.store_path, "/var/lib/rtx d/j;obs#1.db");
    /* the lanes jobs.lanes selected read back the same, from their printed sections */
    ck_assert_int_eq(back.sched.n_lanes, 2);
    ck_assert_str_eq(back.sched.lanes[0].name, "a");
    ck_assert_str_eq(back.sched.lanes[1].name, "b");
    rtx_free(v1);
    rtx_free(v2);
    rtx_config_free(&back);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_usage_lists_every_setting) {
    struct args a;
    struct rtx_config cfg;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    struct rtx_setting_view *v;
    int n;
    ck_assert_int_eq(rtx_config_list(&cfg, &v, &n), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rtx_config_usage(f);
    fclose(f);
    for (int i = 0; i < RTX_CONFIG_N_SETTINGS; i++) { /* lanes and [scheduler]: file only */
        char flag[96];
        snprintf(flag, sizeof flag, "  --%s=", v[i].name);
        ck_assert_msg(strstr(buf, flag) != NULL, "usage lacks %s", v[i].name);
        ck_assert_ptr_nonnull(strstr(buf, v[i].description));
    }
    ck_assert_ptr_nonnull(strstr(buf, "--log.level=debug|info|warn|error  (reload)\n"));
    ck_assert_ptr_nonnull(strstr(buf, "default 1g, at least 0\n"));
    ck_assert_ptr_nonnull(strstr(buf, "default 2, 1..64\n"));
    free(buf);
    rtx_free(v);
    rtx_config_free(&cfg);
}
END_TEST

START_TEST(config_load_out_of_memory_fails_cleanly) {
    write_file(ini_path, "[server]\nlisten = 1.2.3.4:5\n[jobs]\nlanes = a,b\n"
                         "default_lane = a\n");
    setenv("RTXD_STORE_PATH", "/x.db", 1);
    int rc = RTX_ENOMEM;
    long n;
    for (n = 1; rc == RTX_ENOMEM; n++) {
        ck_assert_int_lt(n, 1000);
        struct args a;
        struct rtx_config cfg;
        struct rtx_err err;
        args_of(&a, "--config", ini_path, "--log.level=warn", "--help", NULL);
        rtx_alloc_fail_after(n);
        rc = load(&cfg, &a, &err);
        rtx_alloc_fail_after(0);
        if (rc == RTX_ENOMEM) {
            ck_assert_ptr_nonnull(strstr(err.msg, "out of memory"));
            ck_assert_int_eq(a.argc, 5); /* argv untouched */
            ck_assert_ptr_null(cfg.listen);
        } else {
            ck_assert_int_eq(rc, 0);
            ck_assert_str_eq(cfg.listen, "1.2.3.4:5");
            ck_assert_int_eq(a.argc, 2);
        }
        rtx_config_free(&cfg);
    }
    ck_assert_int_gt(n, 10); /* it did fail for a while */
}
END_TEST

static void *load_in_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 50; i++) {
        struct args a;
        struct rtx_config cfg;
        struct rtx_err err;
        ck_assert_int_eq(load(&cfg, args_of(&a, "--jobs.workers=2", NULL), &err), 0);
        rtx_config_free(&cfg);
    }
    return NULL;
}

START_TEST(config_loads_are_independent) {
    /* two configs side by side, and loads in two threads: no shared state in the module */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, load_in_thread, NULL), 0);
    load_in_thread(NULL);
    pthread_join(t, NULL);
    struct args a1, a2;
    struct rtx_config c1, c2;
    struct rtx_err err;
    ck_assert_int_eq(load(&c1, args_of(&a1, "--jobs.workers=2", NULL), &err), 0);
    ck_assert_int_eq(load(&c2, args_of(&a2, "--jobs.workers=3", NULL), &err), 0);
    ck_assert_int_eq(c1.workers, 2);
    ck_assert_int_eq(c2.workers, 3);
    rtx_config_free(&c1);
    rtx_config_free(&c2);
}
END_TEST

/* The [device] settings: fractions parsed and bounded, the old jobs.* names accepted (a
 * renamed one sets the new setting, a retired one is ignored) from the file and flags. */
START_TEST(config_device_settings_and_old_names) {
    struct rtx_config cfg;
    struct args a;
    struct rtx_err err;
    ck_assert_int_eq(load(&cfg, args_of(&a, NULL), &err), 0);
    ck_assert(cfg.memory_fraction == 0.9 && cfg.jobs_reserve == 0.25);
    ck_assert_int_eq(cfg.plan_cache, 64);
    ck_assert_str_eq(view_of(&cfg, "device.jobs_reserve").value, "0.25");
    rtx_config_free(&cfg);

    write_file(ini_path, "[jobs]\nplan_cache = 3\ngpu_pool_cap_bytes = 1m\n"
                         "plan_cache_bytes = 2k\n[device]\njobs_reserve = 0.5\n");
    ck_assert_int_eq(load(&cfg, args_of(&a, "--config", ini_path, "--jobs.plan_cache=5",
                                        "--device.memory_fraction=0.75", NULL),
                          &err),
                     0);
    ck_assert_int_eq(cfg.plan_cache, 5); /* the flag, by its old name, wins over the file */
    ck_assert_int_eq(cfg.plan_cache_bytes, 2048);
    ck_assert(cfg.jobs_reserve == 0.5 && cfg.memory_fraction == 0.75);
    ck_assert_str_eq(view_of(&cfg, "device.plan_cache").origin, "flag");
    rtx_config_free(&cfg);

    ck_assert_int_eq(load(&cfg, args_of(&a, "--device.jobs_reserve=1.5", NULL), &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "out of range"), "%s", err.msg);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--device.memory_fraction=lots", NULL), &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "not a decimal number"), "%s", err.msg);
    ck_assert_int_eq(load(&cfg, args_of(&a, "--device.memory_fraction=0", NULL), &err),
                     RTX_EINVAL);
}
END_TEST

Suite *rtx_config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, config_defaults_without_sources);
    tcase_add_test(tc, config_device_settings_and_old_names);
    tcase_add_test(tc, config_file_overrides_default);
    tcase_add_test(tc, config_env_overrides_file);
    tcase_add_test(tc, config_flag_overrides_env);
    tcase_add_test(tc, config_cpu_threads_zero_resolves_per_worker);
    tcase_add_test(tc, config_load_applies_log_settings);
    tcase_add_test(tc, config_size_suffixes);
    tcase_add_test(tc, config_bounds);
    tcase_add_test(tc, config_enums);
    tcase_add_test(tc, config_strings);
    tcase_add_test(tc, config_lane_checks);
    tcase_add_test(tc, config_lane_sections);
    tcase_add_test(tc, config_missing_file_names_path);
    tcase_add_test(tc, config_file_errors_name_file_and_line);
    tcase_add_test(tc, config_env_errors_name_variable_and_setting);
    tcase_add_test(tc, config_flag_errors_name_flag);
    tcase_add_test(tc, config_error_with_null_err_returns_code);
    tcase_add_test(tc, config_print_load_round_trip);
    tcase_add_test(tc, config_usage_lists_every_setting);
    tcase_add_test(tc, config_load_out_of_memory_fails_cleanly);
    tcase_add_test(tc, config_loads_are_independent);
    suite_add_tcase(s, tc);
    return s;
}
