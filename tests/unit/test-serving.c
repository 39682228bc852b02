/*
 * test-serving.c - the inference core (serving/serving.h) over model repositories written
 * into temporary directories: start in each control mode, load / unload / reload (a failed
 * reload keeps the old version), version policies, poll mode, load errors naming the file,
 * request checks, dynamic batching (merge, split, preferred sizes, queue delay, max batch,
 * identical outputs with batching on and off), queue bound, deadlines, cancel, stop,
 * statistics, memory released on unload, an out-of-memory loop over a load, SLA lanes (and
 * new lane settings reaching loaded versions), and learned costs kept in a store across
 * restarts and unloads.
 *
 * The test model "scale" and the fixtures are in test-serving-util.h.
 */
#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serving/serving-impl.h"
#include "store/store.h"
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

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

START_TEST(serving_rejects_bad_requests_before_queuing) {
    struct serving_fx f;
    fx_model(&f, "scale", 4, NULL, RTX_MODEL_CONTROL_NONE);
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0);
    struct rtx_tensor *a2 = make_input(2, 0, false), *b2 = make_input(2, 0, true);
    struct rtx_tensor *b3 = make_input(3, 0, true), *a5 = make_input(5, 0, false);
    struct rtx_tensor *b5 = make_input(5, 0, true), *i32, *flat;
    ck_assert(rtx_tensor_new(RTX_I32, 2, (const int64_t[]){2, 4}, &i32, &err) == 0);
    ck_assert(rtx_tensor_new(RTX_F32, 1, (const int64_t[]){4}, &flat, &err) == 0);
    struct rtx_tensor *a2x3;
    ck_assert(rtx_tensor_new(RTX_F32, 2, (const int64_t[]){2, 3}, &a2x3, &err) == 0);
    const char *y = "y", *q = "q", *yy[] = {"y", "y"};
    const struct {
        struct rtx_infer_input in[3];
        int n_in;
        const char *const *outs;
        int n_out;
        int code;
        const char *msg;
    } cases[] = {
        {{{"a", a2}}, 1, NULL, 0, RTX_EINVAL, "missing input 'b'"},
        {{{"a", a2}, {"b", b2}, {"c", b2}}, 3, NULL, 0, RTX_EINVAL, "unknown input 'c'"},
        {{{"a", a2}, {"a", a2}}, 2, NULL, 0, RTX_EINVAL, "input 'a' is given twice"},
        {{{"a", i32}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "datatype INT32"},
        {{{"a", a2x3}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "input 'a': shape f32[2,3]"},
        {{{"a", flat}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "input 'a': shape"},
        {{{"a", a2}, {"b", b3}}, 2, NULL, 0, RTX_EINVAL, "batch size 3 differs"},
        {{{"a", a5}, {"b", b5}}, 2, NULL, 0, RTX_ELIMIT, "max_batch_size 4"},
        {{{"a", a2}, {"b", b2}}, 2, &q, 1, RTX_EINVAL, "unknown output 'q'"},
        {{{"a", a2}, {"b", b2}}, 2, yy, 2, RTX_EINVAL, "requested twice"},
    };
    struct call c;
    call_init(&c);
    int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++) {
        struct rtx_infer_request req = {
            .model = m, .n_inputs = cases[i].n_in, .inputs = cases[i].in,
            .n_outputs = cases[i].n_out, .outputs = cases[i].outs, .done = on_done, .ctx = &c,
        };
        int rc = rtx_serving_infer(f.s, &req, &err);
        ck_assert_msg(rc == cases[i].code, "case %d: rc %d (%s)", i, rc, err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].msg), "case %d: '%s' lacks '%s'", i, err.msg,
                      cases[i].msg);
    }
    /* a requested output comes alone */
    struct rtx_infer_input ok[2] = {{"a", a2}, {"b", b2}};
    struct rtx_infer_request req = {.model = m, .n_inputs = 2, .inputs = ok, .n_outputs = 1,
                                    .outputs = &y, .done = on_done, .ctx = &c};
    ck_assert(rtx_serving_infer(f.s, &req, &err) == 0);
    call_wait(&c);
    ck_assert_int_eq(c.done, 1); /* the rejected ones never called back */
    ck_assert_int_eq(c.n_outputs, 1);
    ck_assert_str_eq(c.out0, "y");
    struct rtx_model_stats st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_REJECTED], n_cases);
    ck_assert_int_eq(st.success.count, 1);
    rtx_tensor_unref(a2);
    rtx_tensor_unref(b2);
    rtx_tensor_unref(b3);
    rtx_tensor_unref(a5);
    rtx_tensor_unref(b5);
    rtx_tensor_unref(i32);
    rtx_tensor_unref(flat);
    rtx_tensor_unref(a2x3);
    rtx_model_unref(m);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

#define N_BATCH 6

START_TEST(batching_merges_splits_and_matches_unbatched) {
    struct serving_fx f;
    fx_repo(&f);
    /* a long delay: the batch closes at the preferred size 8, not on time */
    write_model(f.repo, "batched", 16,
                ", \"dynamic_batching\": {\"preferred_batch_size\": [8],"
                " \"max_queue_delay_microseconds\": 5000000}");
    write_model(f.repo, "plain", 16, NULL);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    struct call on[N_BATCH], off[N_BATCH];
    struct rtx_err err = {0};
    const int rows[N_BATCH] = {1, 2, 1, 1, 2, 1}; /* 8 rows in all */
    int64_t t0 = rtx_mono_ns();
    for (int i = 0; i < N_BATCH; i++) {
        call_init(&on[i]);
        call_init(&off[i]);
        ck_assert(submit(f.s, "batched", rows[i], (float)i, &on[i], 0, NULL, &err) == 0);
        ck_assert(submit(f.s, "plain", rows[i], (float)i, &off[i], 0, NULL, &err) == 0);
    }
    for (int i = 0; i < N_BATCH; i++) {
        call_wait(&on[i]);
        call_wait(&off[i]);
        ck_assert_msg(on[i].code == 0 && off[i].code == 0, "%s %s", on[i].msg, off[i].msg);
        ck_assert_int_eq(on[i].batch_size, 8);
        ck_assert_int_eq(off[i].batch_size, rows[i]);
        ck_assert(memcmp(on[i].y, off[i].y, sizeof(float) * 4 * (size_t)rows[i]) == 0);
        ck_assert(memcmp(on[i].z, off[i].z, sizeof(float) * 4 * (size_t)rows[i]) == 0);
        check_scale(&on[i], rows[i], (float)i, 1.0f);
    }
    ck_assert_int_lt(rtx_mono_ns() - t0, 2000000000LL); /* did not wait for the delay */
    struct rtx_model_stats st = get_stats(f.s, "batched");
    ck_assert_int_eq(st.execution_count, 1);
    ck_assert_int_eq(st.inference_count, 8);
    ck_assert_int_eq(st.success.count, N_BATCH);
    ck_assert_int_eq(st.n_batch_stats, 1);
    ck_assert_int_eq(st.batch_stats[0].batch_size, 8);
    ck_assert_int_eq(st.batch_stats[0].compute_infer.count, 1);
    st = get_stats(f.s, "plain");
    ck_assert_int_eq(st.execution_count, N_BATCH);
    for (int i = 0; i < N_BATCH; i++) {
        call_close(&on[i]);
        call_close(&off[i]);
    }
    fx_stop(&f);
}
END_TEST

/* REPO/NAME/1: p = softmax(relu(x @ w1 + b1) @ w2 + b2), x f32 [batch, 64], weights from a
 * fixed seed in model.safetensors (the shape of the example mlp). */
static void write_mlp(const char *repo, const char *name, const char *extra) {
    char dir[1024], text[2048];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    mkdir(dir, 0777);
    snprintf(text, sizeof text,
             "{\"max_batch_size\": 64, \"input\": [{\"name\": \"x\", \"data_type\": "
             "\"TYPE_FP32\", \"dims\": [64]}], \"output\": [{\"name\": \"p\", "
             "\"data_type\": \"TYPE_FP32\", \"dims\": [10]}]%s}",
             extra ? extra : "");
    snprintf(dir, sizeof dir, "%s/%s/config.json", repo, name);
    write_text(dir, text);
    snprintf(dir, sizeof dir, "%s/%s/1", repo, name);
    mkdir(dir, 0777);
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("mlp", &g, &err) == 0);
    const char *names[4] = {"w1", "b1", "w2", "b2"};
    const int64_t shapes[4][2] = {{64, 128}, {128, 0}, {128, 10}, {10, 0}};
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 64}, &err) >= 0);
    char h[512];
    int hn = 0;
    uint64_t off = 0, total = 0;
    for (int i = 0; i < 4; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        ck_assert(rtx_graph_add_input(g, names[i], RTX_F32, nd, shapes[i], &err) >= 0);
        uint64_t bytes = 4 * (uint64_t)shapes[i][0] * (uint64_t)(nd == 2 ? shapes[i][1] : 1);
        hn += snprintf(h + hn, sizeof h - (size_t)hn,
                       "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld%s%s],"
                       "\"data_offsets\":[%llu,%llu]}",
                       i ? "," : "{", names[i], (long long)shapes[i][0], nd == 2 ? "," : "",
                       nd == 2 ? (i == 0 ? "128" : "10") : "", (unsigned long long)off,
                       (unsigned long long)(off + bytes));
        off += bytes;
    }
    total = off;
    h[hn++] = '}';
    while ((8 + hn) % 8) h[hn++] = ' ';
    size_t len = 8 + (size_t)hn + total;
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(buf + 8, h, (size_t)hn);
    struct rtx_rng rng;
    rtx_rng_seed(&rng, 7);
    float *w = (float *)(buf + 8 + hn);
    for (uint64_t i = 0; i < total / 4; i++)
        w[i] = (float)((double)(rtx_rng_next(&rng) >> 11) * 0x1.0p-53 - 0.5) * 0.25f;
    snprintf(dir, sizeof dir, "%s/%s/1/model.safetensors", repo, name);
    write_file(dir, buf, len);
    free(buf);
    const char *fc1[] = {"x", "w1", "b1"}, *r[] = {"h"}, *fc2[] = {"hr", "w2", "b2"};
    const char *sm[] = {"logits"}, *o1 = "h", *o2 = "hr", *o3 = "logits", *o4 = "p";
    ck_assert(rtx_graph_add_node(g, "gemm", "fc1", fc1, 3, &o1, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "relu", r, 1, &o2, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "gemm", "fc2", fc2, 3, &o3, 1, &err) >= 0);
    int n = rtx_graph_add_node(g, "softmax", "softmax", sm, 1, &o4, 1, &err);
    ck_assert(n >= 0);
    ck_assert(rtx_graph_set_attr_int(g, n, "axis", -1, &err) == 0);
    ck_assert(rtx_graph_add_output(g, "p", &err) == 0);
    snprintf(dir, sizeof dir, "%s/%s/1/model.rtxg", repo, name);
    ck_assert_msg(rtx_graph_save_file(g, dir, &err) == 0, "%s", err.msg);
    rtx_graph_free(g);
}

struct mlp_call {
    struct call c;
    float p[64 * 10];
};

static void on_mlp(void *ctx, const struct rtx_infer_result *res) {
    struct mlp_call *mc = ctx;
    if (res->code == 0)
        for (int64_t i = 0; i < rtx_tensor_numel(res->outputs[0]) && i < 64 * 10; i++)
            mc->p[i] = (float)rtx_tensor_get(res->outputs[0], i);
    on_done(&mc->c, res);
}

/* rows x 64 inputs: row r of request `seed` holds sin(seed * 64 + r * 7 + k). */
static void submit_mlp(struct rtx_serving *s, const char *name, int rows, int seed,
                       struct mlp_call *mc) {
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_model_get(s, name, 0, &m, &err) == 0, "%s", err.msg);
    struct rtx_tensor *x;
    ck_assert(rtx_tensor_new(RTX_F32, 2, (const int64_t[]){rows, 64}, &x, &err) == 0);
    float *p = rtx_tensor_data(x);
    for (int i = 0; i < rows * 64; i++)
        p[i] = sinf((float)(seed * 64 + (i / 64) * 7 + i % 64));
    struct rtx_infer_input in = {"x", x};
    struct rtx_infer_request req = {.model = m, .n_inputs = 1, .inputs = &in, .done = on_mlp,
                                    .ctx = mc};
    ck_assert_msg(rtx_serving_infer(s, &req, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(x);
    rtx_model_unref(m);
}

START_TEST(batching_matches_unbatched_for_gemm) {
    struct serving_fx f;
    fx_repo(&f);
    write_mlp(f.repo, "mlp", ", \"dynamic_batching\": {\"preferred_batch_size\": [16, 32],"
                             " \"max_queue_delay_microseconds\": 200000}");
    write_mlp(f.repo, "mlp_nobatch", NULL);
    /* threaded GEMM must not change a row's result either */
    serving_fx_devices(&f, &(struct rtx_devices_options){.cpu_threads = 2, .plan_cache = 16});
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    fx_start_opts(&f, &o);
    enum { N = 12 };
    const int rows[N] = {1, 3, 2, 1, 5, 4, 1, 2, 3, 1, 2, 7}; /* 32 in all */
    struct mlp_call *on = calloc(N, sizeof *on), *off = calloc(N, sizeof *off);
    ck_assert(on && off);
    for (int i = 0; i < N; i++) {
        call_init(&on[i].c);
        call_init(&off[i].c);
        submit_mlp(f.s, "mlp", rows[i], i, &on[i]);
        submit_mlp(f.s, "mlp_nobatch", rows[i], i, &off[i]);
    }
    int batched = 0;
    for (int i = 0; i < N; i++) {
        call_wait(&on[i].c);
        call_wait(&off[i].c);
        ck_assert_msg(on[i].c.code == 0 && off[i].c.code == 0, "%s", on[i].c.msg);
        batched += on[i].c.batch_size > rows[i];
        ck_assert_msg(memcmp(on[i].p, off[i].p, sizeof(float) * 10 * (size_t)rows[i]) == 0,
                      "request %d: batched outputs differ from unbatched ones", i);
        call_close(&on[i].c);
        call_close(&off[i].c);
    }
    ck_assert_int_gt(batched, 0);
    free(on);
    free(off);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_waits_at_most_the_queue_delay) {
    struct serving_fx f;
    fx_model(&f, "delay", 8, ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": 60000}",
             RTX_MODEL_CONTROL_NONE);
    struct call c;
    call_init(&c);
    struct rtx_err err = {0};
    int64_t t0 = rtx_mono_ns();
    ck_assert(submit(f.s, "delay", 1, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c);
    int64_t waited = rtx_mono_ns() - t0;
    check_scale(&c, 1, 1.0f, 1.0f);
    ck_assert_int_eq(c.batch_size, 1);
    ck_assert_int_ge(c.queue_ns, 55000000);
    ck_assert_int_lt(waited, 1000000000);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_respects_max_batch_size_and_shapes) {
    struct serving_fx f;
    fx_model(&f, "max4", 4, ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": 100000}",
             RTX_MODEL_CONTROL_NONE);
    /* hold the worker so that everything queues, then let it go */
    struct call gate;
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "max4", 4, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate);
    struct call c[5];
    int rows[5] = {3, 2, 1, 1, 3};
    for (int i = 0; i < 5; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "max4", rows[i], (float)i, &c[i], 0, NULL, &err) == 0);
    }
    call_open_gate(&gate);
    for (int i = 0; i < 5; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], rows[i], (float)i, 1.0f);
        ck_assert_int_le(c[i].batch_size, 4);
    }
    /* FIFO with a full stop: [3], then 2+1+1 = 4, then [3] after the delay */
    ck_assert_int_eq(c[0].batch_size, 3);
    ck_assert_int_eq(c[1].batch_size, 4);
    ck_assert_int_eq(c[3].batch_size, 4);
    struct rtx_model_stats st = get_stats(f.s, "max4");
    ck_assert_int_eq(st.inference_count, 14);
    call_close(&gate);
    for (int i = 0; i < 5; i++)
        call_close(&c[i]);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_sends_the_largest_preferred_batch) {
    struct serving_fx f;
    fx_model(&f, "pref", 8,
             ", \"dynamic_batching\": {\"preferred_batch_size\": [2, 4],"
             " \"max_queue_delay_microseconds\": 50000}",
             RTX_MODEL_CONTROL_NONE);
    struct call gate, c[5];
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "pref", 2, 0.0f, &gate, 0, NULL, &err) == 0); /* preferred: at once */
    call_wait_entered(&gate);
    for (int i = 0; i < 5; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "pref", 1, (float)i, &c[i], 0, NULL, &err) == 0);
    }
    call_open_gate(&gate);
    for (int i = 0; i < 5; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        ck_assert_int_eq(c[i].batch_size, i < 4 ? 4 : 1); /* 4 now, the fifth after the delay */
    }
    ck_assert_int_ge(c[4].queue_ns, 45000000);
    call_close(&gate);
    for (int i = 0; i < 5; i++)
        call_close(&c[i]);
    fx_stop(&f);
}
END_TEST

START_TEST(queue_bound_deadline_and_cancel) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.max_queue = 3;
    fx_start_opts(&f, &o);
    struct call gate, exp, can, ok, full;
    call_init(&gate);
    call_init(&exp);
    call_init(&can);
    call_init(&ok);
    call_init(&full);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "scale", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate); /* the only worker is busy now */
    volatile int cancel = 0;
    ck_assert(submit(f.s, "scale", 1, 1.0f, &exp, rtx_mono_ns() + 1000000, NULL, &err) == 0);
    ck_assert(submit(f.s, "scale", 1, 2.0f, &can, 0, &cancel, &err) == 0);
    ck_assert(submit(f.s, "scale", 1, 3.0f, &ok, rtx_mono_ns() + 60000000000LL, NULL, &err) == 0);
    ck_assert_int_eq(submit(f.s, "scale", 1, 4.0f, &full, 0, NULL, &err), RTX_EUNAVAILABLE);
    ck_assert(strstr(err.msg, "queue full"));
    struct rtx_model_stats st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.pending, 3); /* queued; the gated one is being answered */
    cancel = 1;
    sleep_ms(5); /* past the first deadline */
    call_open_gate(&gate);
    call_wait(&exp);
    call_wait(&can);
    call_wait(&ok);
    ck_assert_int_eq(exp.code, RTX_EEXPIRED);
    ck_assert(strstr(exp.msg, "deadline"));
    ck_assert_int_eq(can.code, RTX_ECANCELED);
    check_scale(&ok, 1, 3.0f, 1.0f);
    ck_assert_int_eq(full.done, 0);
    st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_EXPIRED], 1);
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_CANCELED], 1);
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_REJECTED], 1);
    ck_assert_int_eq(st.fail.count, 3);
    ck_assert_int_eq(st.success.count, 2);
    ck_assert_int_eq(st.pending, 0);
    call_close(&gate);
    call_close(&exp);
    call_close(&can);
    call_close(&ok);
    call_close(&full);
    fx_stop(&f);
}
END_TEST

START_TEST(instances_serve_in_parallel) {
    struct serving_fx f;
    fx_model(&f, "two", 8, ", \"instance_group\": [{\"count\": 2, \"kind\": \"KIND_CPU\"}]",
             RTX_MODEL_CONTROL_NONE);
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_model_get(f.s, "two", 0, &m, &err) == 0);
    ck_assert_int_eq(rtx_model_info(m)->instances, 2);
    rtx_model_unref(m);
    struct call gate, c;
    call_init(&gate);
    call_init(&c);
    gate.gate = true;
    ck_assert(submit(f.s, "two", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate); /* one instance is held */
    ck_assert(submit(f.s, "two", 2, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c); /* the other one answers meanwhile */
    check_scale(&c, 2, 1.0f, 1.0f);
    call_open_gate(&gate);
    call_wait(&gate);
    call_close(&gate);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

struct stopper {
    struct rtx_serving *s;
};

static void *stop_main(void *arg) {
    struct stopper *st = arg;
    rtx_serving_stop(st->s);
    return NULL;
}

START_TEST(stop_answers_every_request_once) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_NONE);
    struct call gate, c[6];
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "scale", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate);
    for (int i = 0; i < 6; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "scale", 1, (float)i, &c[i], 0, NULL, &err) == 0);
    }
    struct stopper sp = {f.s};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, stop_main, &sp), 0);
    sleep_ms(20); /* the stop is waiting for the running batch */
    call_open_gate(&gate);
    pthread_join(th, NULL);
    f.s = NULL;
    ck_assert_int_eq(gate.done, 1);
    ck_assert_int_eq(gate.code, 0);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(c[i].done, 1);
        ck_assert_int_eq(c[i].code, RTX_EUNAVAILABLE);
        ck_assert(strstr(c[i].msg, "shutting down"));
        call_close(&c[i]);
    }
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

START_TEST(load_survives_out_of_memory) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_EXPLICIT);
    struct rtx_err err = {0};
    int rc = -1;
    long n;
    for (n = 1; n < 5000 && rc != 0; n++) {
        rtx_alloc_fail_after(n);
        rc = rtx_serving_load(f.s, "scale", NULL, &err);
        rtx_alloc_fail_after(0);
        ck_assert_msg(rc == 0 || rc == RTX_ENOMEM, "n=%ld: rc %d (%s)", n, rc, err.msg);
        if (rc == 0) break;
        ck_assert(!rtx_serving_model_ready(f.s, "scale", 0));
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 5);
    struct call c;
    call_init(&c);
    ck_assert(submit(f.s, "scale", 2, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c);
    check_scale(&c, 2, 1.0f, 1.0f);
    call_close(&c);
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
    tcase_add_test(tc, serving_rejects_bad_requests_before_queuing);
    tcase_add_test(tc, batching_merges_splits_and_matches_unbatched);
    tcase_add_test(tc, batching_matches_unbatched_for_gemm);
    tcase_add_test(tc, batching_waits_at_most_the_queue_delay);
    tcase_add_test(tc, batching_respects_max_batch_size_and_shapes);
    tcase_add_test(tc, batching_sends_the_largest_preferred_batch);
    tcase_add_test(tc, queue_bound_deadline_and_cancel);
    tcase_add_test(tc, instances_serve_in_parallel);
    tcase_add_test(tc, stop_answers_every_request_once);
    tcase_add_test(tc, load_survives_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}

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

/* submit() with a KServe priority, a lane name and a callback of one's own. */
static int submit_lane(struct rtx_serving *s, const char *name, int rows, float seed,
                       rtx_infer_done_fn done, void *ctx, int64_t deadline_ns, int priority,
                       const char *lane, struct rtx_err *err) {
    struct rtx_infer_request req = {
        .id = "lane", .deadline_ns = deadline_ns, .priority = priority, .lane = lane,
        .done = done, .ctx = ctx,
    };
    return submit_req(s, name, rows, seed, &req, err);
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

/* Holds the only worker of `name` in the callback of a request of `rows` rows and KServe
 * priority `priority`. */
static void hold_worker(struct rtx_serving *s, const char *name, int rows, int priority,
                        struct call *gate) {
    struct rtx_err err = {0};
    call_init(gate);
    gate->gate = true;
    ck_assert_msg(submit_lane(s, name, rows, 0.0f, on_done, gate, 0, priority, NULL, &err) == 0,
                  "%s", err.msg);
    call_wait_entered(gate);
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

/* ------------------------------------------------------------------------------------------
 * Learned costs kept in the store (suite serving_costs): a version's moving average of
 * per-request run times survives a restart and an unload, in rows of their own device name
 * ---------------------------------------------------------------------------------------- */

/* A store in REPO/.store (hidden: the repository does not list it as a model). */
static struct rtx_store *costs_store(const struct serving_fx *f) {
    char path[256];
    snprintf(path, sizeof path, "%s/.store/rtxd.db", f->repo);
    struct rtx_store_options so = {.path = path, .sync_normal = true};
    struct rtx_store *st;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &st, &err) == 0, "%s", err.msg);
    return st;
}

/* Runs n one-row requests of "scale", one after the other. */
static void costs_run(struct rtx_serving *s, int n) {
    for (int i = 0; i < n; i++) {
        struct call c;
        struct rtx_err err = {0};
        call_init(&c);
        ck_assert_msg(submit(s, "scale", 1, (float)i, &c, 0, NULL, &err) == 0, "%s", err.msg);
        call_wait(&c);
        check_scale(&c, 1, (float)i, 1.0f);
        call_close(&c);
    }
}

/* The learned cost of the newest version of "scale": rtx__model_cost's code. */
static int costs_of_scale(struct rtx_serving *s, int64_t *ema_ns, int64_t *samples) {
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_model_get(s, "scale", 0, &m, &err) == 0, "%s", err.msg);
    uint64_t key;
    int rc = rtx__model_cost(m, &key, ema_ns, samples);
    ck_assert(key == rtx__model_cost_key("scale", 1));
    rtx_model_unref(m);
    return rc;
}

/* The store's row for (device, key): true and *row, or false. */
static bool costs_row(struct rtx_store *st, const char *device, uint64_t key,
                      struct rtx_store_cost *row) {
    struct rtx_store_cost *rows;
    int n;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_cost_list(st, &rows, &n, &err) == 0, "%s", err.msg);
    bool found = false;
    for (int i = 0; i < n && !found; i++)
        if (rows[i].key == key && strcmp(rows[i].device, device) == 0) {
            *row = rows[i];
            found = true;
        }
    rtx_free(rows);
    return found;
}

/* Requests run, serving stops (saving the cost), serving starts again on the same store and
 * the version's scheduler starts from the saved average, which its admission estimates use;
 * a job manager's row with the same key (device "cpu") is neither read nor overwritten. */
START_TEST(costs_survive_a_restart) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_store *st = costs_store(&f);
    uint64_t key = rtx__model_cost_key("scale", 1);
    struct rtx_err err = {0};
    const struct rtx_store_cost job_row = {.device = "cpu", .key = key, .ema_ns = 777777777,
                                           .samples = 5};
    ck_assert_msg(rtx_store_cost_put(st, &job_row, 1, 1, &err) == 0, "%s", err.msg);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.store = st;
    fx_start_opts(&f, &o);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND); /* not the job's */
    costs_run(f.s, 6);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_int_eq(samples, 6);
    ck_assert_int_gt(ema, 0);
    rtx_serving_stop(f.s);
    f.s = NULL;

    struct rtx_store_cost row;
    ck_assert(costs_row(st, RTX__COST_DEVICE, key, &row));
    ck_assert_int_eq(row.ema_ns, ema);
    ck_assert_int_eq(row.samples, samples);
    ck_assert(costs_row(st, "cpu", key, &row));
    ck_assert_int_eq(row.ema_ns, 777777777);

    fx_start_opts(&f, &o);
    int64_t ema2 = 0, samples2 = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(ema2, ema);
    ck_assert_int_eq(samples2, samples);
    /* admission estimates a queued request at the learned cost: hold the only worker in a
     * callback (its run is learned first), then queue one request */
    struct call gate, c;
    hold_worker(f.s, "scale", 1, 0, &gate);
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(samples2, samples + 1);
    call_init(&c);
    ck_assert_msg(submit(f.s, "scale", 1, 3.0f, &c, 0, NULL, &err) == 0, "%s", err.msg);
    struct rtx_sched_stats *ls = rtx_malloc(sizeof *ls);
    ck_assert_ptr_nonnull(ls);
    struct rtx_model *m;
    ck_assert_msg(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0, "%s", err.msg);
    rtx__model_lanes(m, rtx_mono_ns(), ls);
    rtx_model_unref(m);
    int64_t queued_work = 0;
    for (int l = 0; l < ls->n_lanes; l++)
        queued_work += ls->lanes[l].queued_work_ns;
    ck_assert_int_eq(queued_work, ema2);
    rtx_free(ls);
    call_open_gate(&gate);
    call_wait(&gate);
    call_wait(&c);
    check_scale(&c, 1, 3.0f, 1.0f);
    call_close(&c);
    call_close(&gate);
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    rtx_serving_stop(f.s);
    f.s = NULL;
    ck_assert(costs_row(st, RTX__COST_DEVICE, key, &row));
    ck_assert_int_eq(row.ema_ns, ema2);
    ck_assert_int_eq(row.samples, samples + 2);
    rtx_store_close(st);
    fx_stop(&f);
}
END_TEST

/* An explicit unload saves the cost; a load after it (same process) continues from it. */
START_TEST(costs_are_saved_at_unload) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_store *st = costs_store(&f);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    o.store = st;
    fx_start_opts(&f, &o);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    costs_run(f.s, 3);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_msg(rtx_serving_unload(f.s, "scale", &err) == 0, "%s", err.msg);
    struct rtx_store_cost row;
    ck_assert(costs_row(st, RTX__COST_DEVICE, rtx__model_cost_key("scale", 1), &row));
    ck_assert_int_eq(row.ema_ns, ema);
    ck_assert_int_eq(row.samples, 3);
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    int64_t ema2 = 0, samples2 = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(ema2, ema);
    ck_assert_int_eq(samples2, 3);
    fx_stop(&f);
    rtx_store_close(st);
}
END_TEST

/* Without a store the cost is learned and serves, and a new server starts from nothing. */
START_TEST(costs_without_a_store_are_not_kept) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_NONE);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND);
    costs_run(f.s, 2);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_int_eq(samples, 2);
    rtx_serving_stop(f.s);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND);
    costs_run(f.s, 1);
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_costs_suite(void) {
    Suite *s = suite_create("serving_costs");
    TCase *tc = tcase_create("serving_costs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, costs_survive_a_restart);
    tcase_add_test(tc, costs_are_saved_at_unload);
    tcase_add_test(tc, costs_without_a_store_are_not_kept);
    suite_add_tcase(s, tc);
    return s;
}
