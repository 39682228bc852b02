/*
 * test-device-shared.c - the job manager and serving on one device set (device/device.h), as
 * the daemon runs them: a sticky fault found under one consumer makes the device unhealthy for
 * the other; a job past the jobs share fails RESOURCE_EXHAUSTED while the served model keeps
 * answering, and a request past the model's share fails while jobs keep running; a repeated
 * graph replays from the device's one plan cache whether it came as a job or as a batch.
 * The job side comes from test-jobs-util.h (its fake GPUs: "sticky" nodes, fake_fault_next),
 * the serving side from test-serving-util.h (the "scale" model).
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "tests/unit/test-util.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-serving-util.h"

/* Serving over the job fixture's device set: a repository in a temporary directory holding
 * `name` (max_batch, extra as write_model), every model loaded at start. */
static void serve_on(struct serving_fx *sf, struct fx *jf, const char *name, int max_batch,
                     const char *extra) {
    fx_repo(sf);
    rtx_devices_free(sf->devices); /* the fixture's own set: the jobs' is used instead */
    sf->devices = jf->devices;
    write_model(sf->repo, name, max_batch, extra);
    fx_start(sf, RTX_MODEL_CONTROL_NONE);
}

/* Stops serving (before the job side frees the shared set) and removes its repository. */
static void serve_stop(struct serving_fx *sf) {
    rtx_serving_stop(sf->s);
    sf->s = NULL;
    sf->devices = NULL; /* the job fixture frees it */
    rm_tree(sf->repo);
}

/* One request of `rows` rows to `name`; returns its code (0: answered), its message in msg. */
static int infer(struct serving_fx *sf, const char *name, int rows, char msg[256]) {
    struct call c;
    call_init(&c);
    struct rtx_err err = {0};
    int rc = submit(sf->s, name, rows, 1.0f, &c, 0, NULL, &err);
    if (rc == 0) {
        call_wait(&c);
        rc = c.code;
        snprintf(msg, 256, "%.255s", c.msg);
        if (rc == 0) check_scale(&c, rows, 1.0f, 1.0f);
    } else {
        snprintf(msg, 256, "%.*s", (int)(256) - 1, err.msg);
    }
    call_close(&c);
    return rc;
}

static const char GPU_MODEL[] = ", \"instance_group\": [{\"kind\": \"KIND_GPU\", \"count\": 1}]";

/* A job manager with one worker on one fake GPU (and one on the CPU) and the model "gpu"
 * with one instance there, both on jf's device set; the model has answered once. */
static struct rtx_jobs *start_on_one_gpu(struct fx *jf, struct serving_fx *sf) {
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(jf, &gl, 1, 1, &o);
    serve_on(sf, jf, "gpu", 8, GPU_MODEL);
    char msg[256];
    ck_assert_msg(infer(sf, "gpu", 2, msg) == 0, "%s", msg);
    return j;
}

/* A fault found by a served model's batch on cuda:0 makes cuda:0 unhealthy for jobs: a job
 * asking for it is refused UNAVAILABLE naming the fault, an "auto" job runs on the CPU. */
START_TEST(fault_under_serving_reaches_jobs) {
    struct fx jf;
    struct serving_fx sf;
    struct rtx_jobs *j = start_on_one_gpu(&jf, &sf);
    char msg[256];
    struct rtx_device *gpu = rtx_devices_cuda(jf.devices, 0);
    ck_assert(rtx_device_healthy(gpu));

    __atomic_store_n(&fake_fault_next, 1, __ATOMIC_SEQ_CST);
    ck_assert_int_ne(infer(&sf, "gpu", 2, msg), 0);
    ck_assert(!rtx_device_healthy(gpu));

    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    bool dedup = false;
    struct rtx_err err = {0};
    struct req_opts ro = {.device = "cuda:0"};
    ck_assert_int_eq(submit_x(j, g, x, &ro, id, &dedup, &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "unhealthy") && strstr(err.msg, "fake"), "%s", err.msg);
    ro.device = "auto";
    submit_ok(j, g, x, &ro, id);
    ck_assert_int_eq(wait_state(jf.store, id, 0, 10000), RTX_JOB_SUCCEEDED);
    struct rtx_job_info info = get_job(jf.store, id);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);
    /* and the model, whose only instance is there, refuses */
    ck_assert_int_eq(infer(&sf, "gpu", 2, msg), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(msg, "unhealthy"), "%s", msg);

    serve_stop(&sf);
    finish(&jf, j, g, x);
}
END_TEST

/* The other way round: a job's sticky fault on cuda:0 makes the served model on cuda:0 refuse
 * with UNAVAILABLE and report not ready. */
START_TEST(fault_under_jobs_reaches_serving) {
    struct fx jf;
    struct serving_fx sf;
    struct rtx_jobs *j = start_on_one_gpu(&jf, &sf);
    char msg[256];
    ck_assert(rtx_serving_model_ready(sf.s, "gpu", -1));

    struct rtx_graph *g = named_graph("sticky_relu");
    struct rtx_tensor *x = small_x();
    struct rtx_job_info info = run_on(j, &jf, g, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_msg(strstr(info.reason, "unhealthy"), "%s", info.reason);
    rtx_job_info_clear(&info);
    ck_assert(!rtx_device_healthy(rtx_devices_cuda(jf.devices, 0)));

    ck_assert_int_eq(infer(&sf, "gpu", 3, msg), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(msg, "cuda:0") && strstr(msg, "unhealthy"), "%s", msg);
    ck_assert(!rtx_serving_model_ready(sf.s, "gpu", -1));

    serve_stop(&sf);
    finish(&jf, j, g, x);
}
END_TEST

/* y = relu(x) over x f32[-1, 1024]: 4 KiB of output per row. */
static struct rtx_graph *relu_graph(void) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("wide_relu", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 1024}, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "act", (const char *[]){"x"}, 1,
                                 (const char *[]){"y"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    return g;
}

/* One budget on the CPU: 16 MiB, 4 MiB reserved for jobs (device.jobs_reserve 0.25), the
 * other 12 MiB by the served model (memory_reserve_bytes), nothing left to borrow. A job
 * that needs 8 MiB fails RESOURCE_EXHAUSTED while the model answers; a request that needs far
 * more than 12 MiB fails with the model's share named while jobs keep running. */
START_TEST(one_budget_two_consumers) {
    struct fx jf;
    fx_open_sync(&jf, true);
    struct rtx_devices_options d = devices_opts();
    d.cpu_memory_bytes = (size_t)16 << 20;
    d.memory_fraction = 1;
    fx_devices(&jf, &d);
    struct rtx_jobs_options o = jobs_opts(&jf, 1);
    struct rtx_jobs *j = start(&o);
    struct serving_fx sf;
    char extra[96];
    snprintf(extra, sizeof extra, ", \"memory_reserve_bytes\": %zu", (size_t)12 << 20);
    serve_on(&sf, &jf, "scale", 1 << 20, extra);
    struct rtx_device_info di;
    rtx_device_info(rtx_devices_get(jf.devices, 0), &di);
    ck_assert_uint_eq(di.reserved_bytes, di.budget_bytes); /* jobs 4 MiB + the model 12 MiB */

    struct rtx_graph *g = relu_graph();
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){2048, 1024}, -1, 1, 5);
    struct rtx_job_info info = run_on(j, &jf, g, x, "cpu");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.failure_code, "RESOURCE_EXHAUSTED");
    ck_assert_msg(strstr(info.reason, "jobs"), "%s", info.reason);
    rtx_job_info_clear(&info);
    char msg[256];
    ck_assert_msg(infer(&sf, "scale", 4, msg) == 0, "%s", msg); /* the model still answers */

    /* 1M rows: y and z alone are 32 MiB, past the model's 12 MiB */
    ck_assert_int_eq(infer(&sf, "scale", 1 << 20, msg), RTX_ENOMEM);
    ck_assert_msg(strstr(msg, "model scale:1"), "%s", msg);
    struct rtx_graph *sg = small_graph();
    struct rtx_tensor *sx = small_x();
    info = run_on(j, &jf, sg, sx, "cpu"); /* jobs still run */
    ck_assert_int_eq(info.state, RTX_JOB_SUCCEEDED);
    rtx_job_info_clear(&info);
    ck_assert_msg(infer(&sf, "scale", 4, msg) == 0, "%s", msg); /* and so does the model */

    struct rtx_device_consumer_info ci[4];
    int nc = rtx_device_consumers(rtx_devices_get(jf.devices, 0), ci, 4);
    ck_assert_int_eq(nc, 2);
    for (int i = 0; i < nc; i++)
        ck_assert_msg(ci[i].refusals >= 1, "%s was never refused", ci[i].name);

    serve_stop(&sf);
    rtx_graph_free(sg);
    rtx_tensor_unref(sx);
    finish(&jf, j, g, x);
}
END_TEST

/* The device's one plan cache holds the plans of both consumers: a repeated job and a
 * repeated batch of one shape each hit it, and its counters show both. */
START_TEST(one_plan_cache_for_jobs_and_batches) {
    struct fx jf;
    fx_open_sync(&jf, true);
    struct rtx_jobs_options o = jobs_opts(&jf, 1);
    struct rtx_jobs *j = start(&o);
    struct serving_fx sf;
    serve_on(&sf, &jf, "scale", 8, NULL);
    struct rtx_device *cpu = rtx_devices_get(jf.devices, 0);
    struct rtx_device_info before;
    rtx_device_info(cpu, &before);

    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    for (int k = 0; k < 2; k++) {
        struct rtx_job_info info = run_on(j, &jf, g, x, "cpu");
        ck_assert_int_eq(info.state, RTX_JOB_SUCCEEDED);
        rtx_job_info_clear(&info);
    }
    settle(j);
    struct rtx_device_info after_jobs;
    rtx_device_info(cpu, &after_jobs);
    ck_assert_uint_eq(after_jobs.plan_hits, before.plan_hits + 1);
    ck_assert_uint_eq(after_jobs.plan_misses, before.plan_misses + 1);

    char msg[256];
    for (int k = 0; k < 2; k++) /* 5 rows: a shape the load's warm-up did not plan */
        ck_assert_msg(infer(&sf, "scale", 5, msg) == 0, "%s", msg);
    struct rtx_device_info after;
    rtx_device_info(cpu, &after);
    ck_assert_uint_eq(after.plan_hits, after_jobs.plan_hits + 1);
    ck_assert_uint_eq(after.plan_misses, after_jobs.plan_misses + 1);
    ck_assert_int_ge(after.plans, before.plans + 2); /* the job's plan and the batch's */

    serve_stop(&sf);
    finish(&jf, j, g, x);
}
END_TEST

Suite *rtx_device_shared_suite(void) {
    Suite *s = suite_create("device_shared");
    TCase *tc = tcase_create("device_shared");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fault_under_serving_reaches_jobs);
    tcase_add_test(tc, fault_under_jobs_reaches_serving);
    tcase_add_test(tc, one_budget_two_consumers);
    tcase_add_test(tc, one_plan_cache_for_jobs_and_batches);
    suite_add_tcase(s, tc);
    return s;
}
