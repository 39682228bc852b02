/*
 * test-serving.c - the inference core (serving/serving.h) over model repositories written
 * into temporary directories: start in each control mode, events through the log hook, load
 * / unload / reload (a failed reload keeps the old version, memory is released on unload),
 * version policies, poll mode, and load errors naming the file. Requests and batching are
 * test-serving-requests.c's, SLA lanes test-serving-lanes.c's, learned costs
 * test-serving-costs.c's.
 *
 * The test model "scale" and the fixtures are in test-serving-util.h.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serving/serving-impl.h"
#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * Start, load, unload, reload
 * ---------------------------------------------------------------------------------------- */

START_TEST(serving_loads_every_model_and_infers) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_NONE);
    ck_assert(rtx_serving_ready(f.s));
    ck_assert(rtx_serving_model_ready(f.s, "scale", 0));
    ck_assert(rtx_serving_model_ready(f.s, "scale", 1));
    ck_assert(!rtx_serving_model_ready(f.s, "scale", 2));
    ck_assert_int_eq(index_state(f.s, "scale", NULL), RTX_MODEL_READY);
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0);
    const struct rtx_model_info *info = rtx_model_info(m);
    ck_assert_int_eq(info->version, 1);
    ck_assert_int_eq(info->instances, 1);
    ck_assert_str_eq(info->instance_kind, "KIND_CPU");
    char *json = rtx_model_config_json(m);
    ck_assert(strstr(json, "\"name\":\"scale\""));
    rtx_free(json);
    rtx_model_unref(m);
    struct call c;
    call_init(&c);
    ck_assert_msg(submit(f.s, "scale", 3, 1.0f, &c, 0, NULL, &err) == 0, "%s", err.msg);
    call_wait(&c);
    check_scale(&c, 3, 1.0f, 1.0f);
    ck_assert_int_eq(c.n_outputs, 2);
    struct rtx_model_stats st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.version, 1);
    ck_assert_int_eq(st.inference_count, 3);
    ck_assert_int_eq(st.execution_count, 1);
    ck_assert_int_eq(st.success.count, 1);
    ck_assert_int_eq(st.n_batch_stats, 1);
    ck_assert_int_eq(st.batch_stats[0].batch_size, 3);
    ck_assert_int_gt(st.last_inference_ms, 0);
    /* no control: the repository API refuses */
    ck_assert_int_eq(rtx_serving_load(f.s, "scale", NULL, &err), RTX_EUNSUPPORTED);
    ck_assert_int_eq(rtx_serving_unload(f.s, "scale", &err), RTX_EUNSUPPORTED);
    ck_assert_int_eq(rtx_serving_model_get(f.s, "nope", 0, &m, &err), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_serving_stats(f.s, "nope", 0, &(struct rtx_model_stats *){0},
                                       &(int){0}, &err), RTX_ENOTFOUND);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

START_TEST(serving_start_errors) {
    struct rtx_serving *s;
    struct rtx_err err = {0};
    struct serving_fx f = {0};
    serving_fx_devices(&f, NULL);
    struct rtx_serving_options o = {.repository = "/nonexistent/repo", .devices = f.devices,
                                    .max_queue = 1};
    ck_assert_int_eq(rtx_serving_start(&o, &s, &err), RTX_EIO);
    ck_assert(strstr(err.msg, "/nonexistent/repo"));
    o.repository = "/tmp";
    o.devices = NULL; /* the device set is required */
    ck_assert_int_eq(rtx_serving_start(&o, &s, &err), RTX_EINVAL);
    o.devices = f.devices;
    o.control = RTX_MODEL_CONTROL_POLL;
    o.poll_ms = 0;
    ck_assert_int_eq(rtx_serving_start(&o, &s, &err), RTX_EINVAL);
    enum rtx_model_control c;
    ck_assert_int_eq(rtx_model_control_from_name("poll", &c), 0);
    ck_assert_int_eq(c, RTX_MODEL_CONTROL_POLL);
    ck_assert_int_eq(rtx_model_control_from_name("sometimes", &c), RTX_EINVAL);
    ck_assert_str_eq(rtx_model_state_name(RTX_MODEL_UNAVAILABLE), "UNAVAILABLE");
    ck_assert_str_eq(rtx_infer_failure_name(RTX_INFER_FAIL_EXPIRED), "EXPIRED");
    /* an empty repository name serves nothing */
    o.repository = "";
    o.control = RTX_MODEL_CONTROL_NONE;
    ck_assert(rtx_serving_start(&o, &s, &err) == 0);
    ck_assert(rtx_serving_ready(s));
    rtx_serving_stop(s);
    rtx_devices_free(f.devices);
}
END_TEST

/* Events the module reported through rtx_serving_options.log. */
static pthread_mutex_t events_mu = PTHREAD_MUTEX_INITIALIZER;
static char events[2048];

static void record_event(enum rtx_serving_log_level level, const char *msg,
                         const char *const *fields) {
    pthread_mutex_lock(&events_mu);
    size_t n = strlen(events);
    n += (size_t)snprintf(events + n, sizeof events - n, "%d %s", (int)level, msg);
    for (int i = 0; fields[i] && n < sizeof events; i += 2)
        n += (size_t)snprintf(events + n, sizeof events - n, " %s=%s", fields[i],
                              fields[i + 1] ? fields[i + 1] : "");
    if (n < sizeof events) snprintf(events + n, sizeof events - n, "\n");
    pthread_mutex_unlock(&events_mu);
}

START_TEST(serving_reports_events_through_its_log_hook) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    write_model(f.repo, "odd", 8, ", \"parameters\": {\"lane\": {\"string_value\": \"gold\"}}");
    events[0] = '\0';
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    o.log = record_event;
    fx_start_opts(&f, &o);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    ck_assert(rtx_serving_unload(f.s, "scale", &err) == 0);
    ck_assert_int_ne(rtx_serving_load(f.s, "odd", NULL, &err), 0); /* an unknown lane */
    pthread_mutex_lock(&events_mu);
    ck_assert_msg(strstr(events, "1 model loaded model=scale version=1 instances=1") != NULL,
                  "%s", events);
    ck_assert_msg(strstr(events, "1 model unloaded model=scale\n") != NULL, "%s", events);
    ck_assert_msg(strstr(events, "3 model load failed model=odd error=") != NULL, "%s", events);
    pthread_mutex_unlock(&events_mu);
    fx_stop(&f);
}
END_TEST

START_TEST(serving_explicit_load_unload_frees_memory) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    write_model(f.repo, "other", 8, NULL);
    const char *startup[] = {"other"};
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    o.n_startup_models = 1;
    o.startup_models = startup;
    fx_start_opts(&f, &o);
    ck_assert_int_eq(index_state(f.s, "scale", NULL), RTX_MODEL_UNKNOWN);
    ck_assert_int_eq(index_state(f.s, "other", NULL), RTX_MODEL_READY);
    struct rtx_serving_memory mem;
    rtx_serving_memory(f.s, &mem);
    int64_t one = mem.host_bytes;
    ck_assert_int_gt(one, 0);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(index_state(f.s, "scale", NULL), RTX_MODEL_READY);
    rtx_serving_memory(f.s, &mem);
    ck_assert_int_eq(mem.host_bytes, 2 * one);
    /* a reference held by a client keeps the version alive but not serving */
    struct rtx_model *held;
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &held, &err) == 0);
    ck_assert(rtx_serving_unload(f.s, "scale", &err) == 0);
    rtx_serving_memory(f.s, &mem);
    ck_assert_int_eq(mem.host_bytes, one);
    ck_assert_int_eq(index_state(f.s, "scale", NULL), RTX_MODEL_UNAVAILABLE);
    struct rtx_model *m;
    ck_assert_int_eq(rtx_serving_model_get(f.s, "scale", 0, &m, &err), RTX_EUNAVAILABLE);
    ck_assert(strstr(err.msg, "UNAVAILABLE"));
    struct call c;
    call_init(&c);
    struct rtx_tensor *a = make_input(1, 0, false), *b = make_input(1, 0, true);
    struct rtx_infer_input ins[2] = {{"a", a}, {"b", b}};
    struct rtx_infer_request req = {.model = held, .n_inputs = 2, .inputs = ins,
                                    .done = on_done, .ctx = &c};
    ck_assert_int_eq(rtx_serving_infer(f.s, &req, &err), RTX_EUNAVAILABLE);
    ck_assert(strstr(err.msg, "unloading"));
    rtx_tensor_unref(a);
    rtx_tensor_unref(b);
    rtx_model_unref(held);
    /* errors */
    ck_assert_int_eq(rtx_serving_load(f.s, "missing", NULL, &err), RTX_ENOTFOUND);
    ck_assert(strstr(err.msg, f.repo));
    ck_assert_int_eq(rtx_serving_load(f.s, "../etc", NULL, &err), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_serving_unload(f.s, "missing", &err), RTX_ENOTFOUND);
    /* load with a config given in the request */
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"max_batch_size\": 4, \"input\": [{\"name\": \"a\", \"data_type\": "
             "\"TYPE_FP32\", \"dims\": [4]}, {\"name\": \"b\", \"data_type\": \"TYPE_FP32\", "
             "\"dims\": [4]}], \"output\": [{\"name\": \"z\", \"data_type\": \"TYPE_FP32\", "
             "\"dims\": [4]}]}");
    ck_assert_msg(rtx_serving_load(f.s, "scale", cfg, &err) == 0, "%s", err.msg);
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0);
    ck_assert_int_eq(rtx_model_info(m)->max_batch_size, 4);
    ck_assert_int_eq(rtx_model_info(m)->n_outputs, 1);
    rtx_model_unref(m);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

START_TEST(serving_failed_reload_keeps_the_old_version) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_EXPLICIT);
    struct rtx_err err = {0};
    ck_assert(rtx_serving_load(f.s, "scale", NULL, &err) == 0);
    /* version 2 with broken weights: the reload fails, version 1 keeps serving */
    char dir[512];
    write_version(f.repo, "scale", 2, 2.0f);
    snprintf(dir, sizeof dir, "%s/scale/2/model.safetensors", f.repo);
    write_text(dir, "garbage!");
    ck_assert_int_eq(rtx_serving_load(f.s, "scale", NULL, &err), RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "model.safetensors") && strstr(err.msg, "keeps serving"), "%s",
                  err.msg);
    ck_assert_int_eq(index_state(f.s, "scale", NULL), RTX_MODEL_READY);
    struct rtx_model_stats *st;
    int n;
    ck_assert(rtx_serving_stats(f.s, "scale", 0, &st, &n, &err) == 0);
    ck_assert_int_eq(n, 1); /* the failed version 2 has no figures */
    ck_assert_int_eq(st[0].version, 1);
    rtx_free(st);
    struct call c;
    call_init(&c);
    ck_assert(submit(f.s, "scale", 1, 2.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c);
    check_scale(&c, 1, 2.0f, 1.0f);
    /* a broken config.json fails the same way */
    snprintf(dir, sizeof dir, "%s/scale/config.json", f.repo);
    write_text(dir, "{\"max_batch_size\": ");
    ck_assert_int_eq(rtx_serving_load(f.s, "scale", NULL, &err), RTX_EFORMAT);
    ck_assert(strstr(err.msg, "config.json"));
    ck_assert(rtx_serving_model_ready(f.s, "scale", 1));
    /* fixed: version 2 replaces version 1 */
    write_config(f.repo, "scale", 8, NULL);
    snprintf(dir, sizeof dir, "%s/scale/2", f.repo);
    write_weights(dir, 2.0f);
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    ck_assert(rtx_serving_model_ready(f.s, "scale", 2));
    ck_assert(!rtx_serving_model_ready(f.s, "scale", 1));
    struct call c2;
    call_init(&c2);
    ck_assert(submit(f.s, "scale", 2, 3.0f, &c2, 0, NULL, &err) == 0);
    call_wait(&c2);
    check_scale(&c2, 2, 3.0f, 2.0f);
    /* statistics per version; version 1's figures stay */
    ck_assert(rtx_serving_stats(f.s, "scale", 0, &st, &n, &err) == 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(st[0].version, 1);
    ck_assert_int_eq(st[0].inference_count, 1);
    ck_assert_int_eq(st[1].version, 2);
    ck_assert_int_eq(st[1].inference_count, 2);
    rtx_free(st);
    ck_assert(rtx_serving_stats(f.s, "scale", 2, &st, &n, &err) == 0);
    ck_assert_int_eq(n, 1);
    rtx_free(st);
    ck_assert_int_eq(rtx_serving_stats(f.s, "scale", 7, &st, &n, &err), RTX_ENOTFOUND);
    call_close(&c);
    call_close(&c2);
    fx_stop(&f);
}
END_TEST

START_TEST(serving_version_policies) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "latest2", 8, ", \"version_policy\": {\"latest\": {\"num_versions\": 2}}");
    write_version(f.repo, "latest2", 2, 2.0f);
    write_version(f.repo, "latest2", 3, 3.0f);
    write_model(f.repo, "pick", 8, ", \"version_policy\": {\"specific\": {\"versions\": [1]}}");
    write_version(f.repo, "pick", 2, 2.0f);
    write_model(f.repo, "all", 8, ", \"version_policy\": {\"all\": {}}");
    write_version(f.repo, "all", 5, 5.0f);
    write_model(f.repo, "ghost", 8, ", \"version_policy\": {\"specific\": {\"versions\": [9]}}");
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    ck_assert(!rtx_serving_model_ready(f.s, "latest2", 1));
    ck_assert(rtx_serving_model_ready(f.s, "latest2", 2));
    ck_assert(rtx_serving_model_ready(f.s, "latest2", 3));
    ck_assert(rtx_serving_model_ready(f.s, "pick", 1));
    ck_assert(!rtx_serving_model_ready(f.s, "pick", 2));
    ck_assert(rtx_serving_model_ready(f.s, "all", 1));
    ck_assert(rtx_serving_model_ready(f.s, "all", 5));
    char reason[256];
    ck_assert_int_eq(index_state(f.s, "ghost", reason), RTX_MODEL_UNAVAILABLE);
    ck_assert_msg(strstr(reason, "version 9"), "%s", reason);
    ck_assert(!rtx_serving_ready(f.s)); /* a model loaded at start failed */
    struct call c;
    call_init(&c);
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "latest2", 1, 1.0f, &c, 0, NULL, &err) == 0); /* newest: 3 */
    call_wait(&c);
    check_scale(&c, 1, 1.0f, 3.0f);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

START_TEST(serving_load_errors_name_the_file) {
    struct serving_fx f;
    fx_repo(&f);
    char dir[512];
    /* a graph input that is neither a config input nor a weight */
    write_model(f.repo, "noweight", 8, NULL);
    snprintf(dir, sizeof dir, "%s/noweight/1/model.safetensors", f.repo);
    unlink(dir);
    /* config input datatype differs from the graph */
    write_config(f.repo, "dtype", 8, NULL);
    write_version(f.repo, "dtype", 1, 1.0f);
    write_io_config(f.repo, "dtype", "TYPE_INT32", "y", 4);
    /* output not in the graph */
    write_model(f.repo, "noout", 8, NULL);
    write_io_config(f.repo, "noout", "TYPE_FP32", "q", 4);
    /* output dims differ from what the graph computes */
    write_model(f.repo, "outdims", 8, NULL);
    write_io_config(f.repo, "outdims", "TYPE_FP32", "y", 5);
    /* no batch dimension in the config, but the graph has one more dimension */
    write_model(f.repo, "rank", 0, NULL);
    /* no version directory, no graph file */
    write_config(f.repo, "empty", 8, NULL);
    write_config(f.repo, "nograph", 8, NULL);
    snprintf(dir, sizeof dir, "%s/nograph/1", f.repo);
    mkdir(dir, 0777);
    /* weight of the wrong shape */
    write_model(f.repo, "wshape", 8, NULL);
    snprintf(dir, sizeof dir, "%s/wshape/1/model.safetensors", f.repo);
    {
        const char h[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
        uint8_t buf[8 + sizeof h - 1 + 8] = {(uint8_t)(sizeof h - 1)};
        memcpy(buf + 8, h, sizeof h - 1);
        write_file(dir, buf, sizeof buf);
    }
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    const struct {
        const char *model, *msg;
    } want[] = {
        {"noweight", "'w' is neither an input of config.json nor a tensor"},
        {"dtype", "config.json says TYPE_INT32"},
        {"noout", "output 'q' is not an output of"},
        {"outdims", "output 'y'"},
        {"rank", "input 'a'"},
        {"empty", "no version directory"},
        {"nograph", "model.rtxg"},
        {"wshape", "tensor 'w' is f32[2], the graph declares f32[4]"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char reason[256];
        ck_assert_int_eq(index_state(f.s, want[i].model, reason), RTX_MODEL_UNAVAILABLE);
        ck_assert_msg(strstr(reason, want[i].msg), "%s: '%s' lacks '%s'", want[i].model, reason,
                      want[i].msg);
        struct rtx_model *m;
        struct rtx_err err = {0};
        ck_assert_int_eq(rtx_serving_model_get(f.s, want[i].model, 0, &m, &err),
                         RTX_EUNAVAILABLE);
    }
    fx_stop(&f);
}
END_TEST

START_TEST(serving_poll_mode_follows_the_directory) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_POLL);
    ck_assert(rtx_serving_model_ready(f.s, "scale", 1));
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_serving_load(f.s, "scale", NULL, &err), RTX_EUNSUPPORTED);
    /* a new model appears */
    write_model(f.repo, "later", 8, NULL);
    for (int i = 0; i < 200 && !rtx_serving_model_ready(f.s, "later", 1); i++)
        sleep_ms(10);
    ck_assert(rtx_serving_model_ready(f.s, "later", 1));
    /* a new version appears */
    write_version(f.repo, "scale", 2, 2.0f);
    for (int i = 0; i < 200 && !rtx_serving_model_ready(f.s, "scale", 2); i++)
        sleep_ms(10);
    ck_assert(rtx_serving_model_ready(f.s, "scale", 2));
    /* a model goes away */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/later", f.repo);
    rm_tree(dir);
    for (int i = 0; i < 200 && rtx_serving_model_ready(f.s, "later", 0); i++)
        sleep_ms(10);
    ck_assert(!rtx_serving_model_ready(f.s, "later", 0));
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_suite(void) {
    Suite *s = suite_create("serving");
    TCase *tc = tcase_create("serving");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, serving_loads_every_model_and_infers);
    tcase_add_test(tc, serving_start_errors);
    tcase_add_test(tc, serving_explicit_load_unload_frees_memory);
    tcase_add_test(tc, serving_reports_events_through_its_log_hook);
    tcase_add_test(tc, serving_failed_reload_keeps_the_old_version);
    tcase_add_test(tc, serving_version_policies);
    tcase_add_test(tc, serving_load_errors_name_the_file);
    tcase_add_test(tc, serving_poll_mode_follows_the_directory);
    suite_add_tcase(s, tc);
    return s;
}
