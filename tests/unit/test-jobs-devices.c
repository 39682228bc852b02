/*
 * test-jobs-devices.c - the job manager over fake CUDA devices (test-jobs-util.c: a backend
 * over host memory that is not a host backend, with faults triggered by node names):
 * placement by the device field, validation of the field, the CPU fallback of "auto" jobs,
 * sticky and ordinary device errors, the queued jobs a lost device strands, recovery of jobs
 * for a device that is gone, pool statistics.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-util.h"

/* The rejection of a submission on `device`: its code, message in err. */
static int refused_on(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
                      const char *device, struct rtx_err *err) {
    struct req_opts ro = {.device = device};
    char id[RTX_JOB_ID_LEN];
    bool dedup = false;
    int rc = submit_x(j, g, x, &ro, id, &dedup, err);
    ck_assert_msg(rc < 0, "device '%s' was accepted", device);
    return rc;
}

START_TEST(gpu_jobs_are_placed_by_device) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 1, &o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();

    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.n_devices, 3);
    ck_assert_str_eq(st.devices[0].name, "cpu");
    ck_assert_str_eq(st.devices[2].name, "cuda:1");
    ck_assert_int_eq(st.devices[2].cuda_index, 1);
    ck_assert_int_eq(st.devices[1].workers, 1);
    ck_assert(st.devices[1].healthy && st.devices[2].healthy);

    const char *asked[] = {NULL, "auto", "cpu", "cuda", "cuda:1", "cuda:0"};
    const char *want_req[] = {"auto", "auto", "cpu", "cuda", "cuda:1", "cuda:0"};
    char sha[65] = "";
    for (int i = 0; i < 6; i++) {
        struct rtx_job_info info = run_on(j, &f, g, x, asked[i]);
        ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s: %s", want_req[i], info.reason);
        ck_assert_str_eq(info.requested_device, want_req[i]);
        if (i < 2 || i == 3)
            ck_assert_msg(strncmp(info.device, "cuda:", 5) == 0, "%s ran on %s", want_req[i],
                          info.device);
        else
            ck_assert_str_eq(info.device, i == 2 ? "cpu" : want_req[i]);
        /* every device computes the same bytes (the fake GPU runs the CPU kernels) */
        ck_assert_int_eq(info.n_outputs, 1);
        if (!sha[0]) memcpy(sha, info.outputs[0].sha256, sizeof sha);
        ck_assert_str_eq(info.outputs[0].sha256, sha);
        rtx_job_info_clear(&info);
    }
    settle(j);
    ck_assert_int_eq(dev_stats(j, 0).jobs_started, 1);
    ck_assert_int_eq(dev_stats(j, 1).jobs_started + dev_stats(j, 2).jobs_started, 5);
    ck_assert_int_ge(dev_stats(j, 2).jobs_started, 1);

    /* default_device = cpu: a job that names none runs on the CPU */
    rtx_jobs_stop(j);
    o.default_device = "cpu";
    j = start(&o);
    struct rtx_job_info info = run_on(j, &f, g, x, NULL);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "cpu");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(device_field_is_validated) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1); /* no GPU, as on CI */
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    struct rtx_err err = {0};

    ck_assert_int_eq(refused_on(j, g, x, "cuda:7", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "device 'cuda:7' does not exist: this host has no CUDA device "
                              "(none was listed at start)");
    ck_assert_int_eq(refused_on(j, g, x, "cuda", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "no CUDA device"), "%s", err.msg);
    ck_assert_int_eq(refused_on(j, g, x, "gpu", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "unknown device 'gpu' (devices: auto, cpu, cuda, cuda:N)");
    ck_assert_int_eq(refused_on(j, g, x, "cuda:", &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "must be followed by a device index"), "%s", err.msg);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:-1", &err), RTX_EINVAL);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:99999999", &err), RTX_EINVAL);
    ck_assert_int_eq(refused_on(j, g, x, "CPU", &err), RTX_EINVAL);
    ck_assert_int_eq(count_jobs(f.store), 0); /* nothing journaled */

    /* auto without a GPU runs on the CPU */
    struct rtx_job_info info = run_on(j, &f, g, x, "auto");
    ck_assert_int_eq(info.state, RTX_JOB_SUCCEEDED);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "auto");
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);

    /* a bad default device is refused at start; one GPU listed: cuda:1 does not exist */
    struct rtx_jobs *j2 = NULL;
    o.default_device = "tpu";
    ck_assert_int_eq(rtx_jobs_start(&o, &j2, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "default device"), "%s", err.msg);
    struct gpu_list gl;
    gpu_list_init(&gl, 1);
    o = gpu_opts(&f, &gl, 1);
    j = start(&o);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:1", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg,
                     "device 'cuda:1' does not exist: this host lists 1 CUDA device, cuda:0");
    rtx_jobs_stop(j);

    /* a GPU with no workers: jobs asking for it are unavailable, auto ones use the CPU */
    o = gpu_opts(&f, &gl, 0);
    j = start(&o);
    ck_assert_int_eq(refused_on(j, g, x, "cuda:0", &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "runs no jobs"), "%s", err.msg);
    info = run_on(j, &f, g, x, NULL);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(unsupported_node_goes_to_cpu_or_is_refused) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    fake_refuse_op = RTX_OP_RELU;

    struct rtx_job_info info = run_on(j, &f, g, x, "auto");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    ck_assert_str_eq(info.requested_device, "auto");
    rtx_job_info_clear(&info);
    struct rtx_err err = {0};
    ck_assert_int_eq(refused_on(j, g, x, "cuda", &err), RTX_EINVAL);
    ck_assert_str_eq(err.msg, "node 2 'act' (relu) cannot run on cuda:0: its backend has no "
                              "kernel for it with these dtypes; submit the job with device cpu "
                              "or auto");
    ck_assert_int_eq(refused_on(j, g, x, "cuda:0", &err), RTX_EINVAL);

    /* a recovered "auto" job is checked by the GPU worker and goes back for the CPU */
    rtx_jobs_stop(j);
    fake_refuse_op = -1;
    struct rtx_jobs_options drained = jobs_opts(&f, 1);
    j = start(&drained);
    rtx_jobs_drain(j, NULL, NULL);
    rtx_jobs_stop(j);
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    struct rtx_job_info row = {
        .state = RTX_JOB_QUEUED, .reason = (char *)"", .lane = (char *)"batch",
        .graph_name = (char *)"small", .idempotency_key = (char *)"",
        .restart_policy = RTX_RESTART_RERUN, .requested_device = (char *)"auto",
    };
    snprintf(row.id, sizeof row.id, "jrecovered-auto");
    ck_assert_msg(rtx_store_job_insert(f.store, &row, req, len, NULL, &err) == 0, "%s", err.msg);
    free(req);
    fake_refuse_op = RTX_OP_RELU;
    j = start(&o);
    wait_state(f.store, row.id, 0, 20000);
    info = get_job(f.store, row.id);
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);
    fake_refuse_op = -1;

    finish(&f, j, g, x);
}
END_TEST

START_TEST(sticky_error_marks_device_unhealthy) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *sticky = named_graph("sticky_relu");
    struct rtx_tensor *x = small_x();
    struct rtx_err err = {0};

    struct rtx_job_info info = run_on(j, &f, sticky, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_msg(strstr(info.reason, "cudaErrorIllegalAddress") &&
                      strstr(info.reason, "[cuda:0 is now unhealthy and takes no more work]"),
                  "%s", info.reason);
    ck_assert_str_eq(info.failure_code, "UNAVAILABLE");
    rtx_job_info_clear(&info);
    /* unhealthy before the failure was journaled: no wait needed */
    struct rtx_jobs_device d0 = dev_stats(j, 1);
    ck_assert(!d0.healthy);
    ck_assert_msg(strstr(d0.detail, "unusable after an earlier device error"), "%s", d0.detail);
    ck_assert(dev_stats(j, 2).healthy);

    ck_assert_int_eq(refused_on(j, ok, x, "cuda:0", &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "device cuda:0 is unhealthy: cuda:0 is unusable"), "%s",
                  err.msg);
    for (int i = 0; i < 3; i++) { /* auto and cuda go to the healthy GPU */
        info = run_on(j, &f, ok, x, i == 0 ? "cuda" : "auto");
        ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
        ck_assert_str_eq(info.device, "cuda:1");
        rtx_job_info_clear(&info);
    }

    /* the second GPU goes too: auto jobs run on the CPU, cuda is unavailable */
    info = run_on(j, &f, sticky, x, "auto");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.device, "cuda:1");
    rtx_job_info_clear(&info);
    ck_assert(!dev_stats(j, 2).healthy);
    info = run_on(j, &f, ok, x, "auto");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cpu");
    rtx_job_info_clear(&info);
    ck_assert_int_eq(refused_on(j, ok, x, "cuda", &err), RTX_EUNAVAILABLE);
    ck_assert_str_eq(err.msg, "device 'cuda': no usable CUDA device (cuda:0 is unhealthy, "
                              "cuda:1 is unhealthy)");
    ck_assert(dev_stats(j, 0).healthy);

    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(ordinary_device_error_fails_the_job_only) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *oom = named_graph("oom_relu");
    struct rtx_tensor *x = small_x();

    struct rtx_job_info info = run_on(j, &f, oom, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "node 'oom_relu': out of device memory (fake)");
    rtx_job_info_clear(&info);
    ck_assert(dev_stats(j, 1).healthy);
    info = run_on(j, &f, ok, x, "cuda:0");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);

    rtx_graph_free(ok);
    rtx_graph_free(oom);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(lost_device_fails_stranded_jobs) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *slow = long_graph(40), *ok = named_graph("act");
    struct rtx_graph *sticky = named_graph("sticky_relu");
    struct rtx_tensor *big = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 4);
    struct rtx_tensor *x = small_x();

    /* the GPU's one worker is busy while the rest queue behind it */
    char slow_id[RTX_JOB_ID_LEN], sticky_id[RTX_JOB_ID_LEN], ids[3][RTX_JOB_ID_LEN];
    submit_running(j, &f, slow, big, &(struct req_opts){.device = "cuda:0"}, slow_id);
    submit_ok(j, sticky, x, &(struct req_opts){.device = "cuda:0"}, sticky_id);
    submit_ok(j, ok, x, &(struct req_opts){.device = "cuda:0"}, ids[0]);
    submit_ok(j, ok, x, &(struct req_opts){.device = "cuda"}, ids[1]);
    submit_ok(j, ok, x, &(struct req_opts){.device = "auto"}, ids[2]);
    ck_assert_int_eq(wait_state(f.store, slow_id, 0, 60000), RTX_JOB_SUCCEEDED);
    ck_assert_int_eq(wait_state(f.store, sticky_id, 0, 20000), RTX_JOB_FAILED);
    for (int i = 0; i < 3; i++) {
        wait_state(f.store, ids[i], 0, 20000);
        struct rtx_job_info info = get_job(f.store, ids[i]);
        if (i < 2) {
            ck_assert_int_eq(info.state, RTX_JOB_FAILED);
            ck_assert_msg(strncmp(info.reason, "cannot be placed: ", 18) == 0, "%s", info.reason);
            ck_assert_str_eq(info.device, "");
        } else {
            ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
            ck_assert_str_eq(info.device, "cpu");
        }
        rtx_job_info_clear(&info);
    }
    settle(j);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_eq(st.failed, 3);
    ck_assert_int_eq(st.succeeded, 2);

    rtx_tensor_unref(big);
    rtx_graph_free(slow);
    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(recovery_fails_jobs_for_missing_devices) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    const char *devices[] = {"cuda:1", "cuda:0", "", "cuda:x"};
    const char *ids[] = {"jr-cuda1", "jr-cuda0", "jr-old", "jr-bad"};
    struct rtx_err err = {0};
    for (int i = 0; i < 4; i++) {
        struct rtx_job_info row = {
            .state = RTX_JOB_QUEUED, .reason = (char *)"", .lane = (char *)"batch",
            .graph_name = (char *)"small", .idempotency_key = (char *)"",
            .restart_policy = RTX_RESTART_RERUN, .requested_device = (char *)devices[i],
        };
        snprintf(row.id, sizeof row.id, "%s", ids[i]);
        ck_assert_msg(rtx_store_job_insert(f.store, &row, req, len, NULL, &err) == 0, "%s",
                      err.msg);
    }
    free(req);
    struct gpu_list gl;
    gpu_list_init(&gl, 1);
    struct rtx_jobs_options o = gpu_opts(&f, &gl, 1);
    struct rtx_jobs *j = start(&o);
    for (int i = 0; i < 4; i++) wait_state(f.store, ids[i], 0, 20000);
    struct rtx_job_info info = get_job(f.store, "jr-cuda1");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "cannot be placed: device 'cuda:1' does not exist: this host "
                                  "lists 1 CUDA device, cuda:0");
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-bad");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-cuda0");
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);
    info = get_job(f.store, "jr-old"); /* journaled before placement existed: auto */
    ck_assert_msg(info.state == RTX_JOB_SUCCEEDED, "%s", info.reason);
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);

    finish(&f, j, g, x);
}
END_TEST

START_TEST(pools_sum_the_workers_pools) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    fake_fail_device = 1;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 2, &o);
    fake_fail_device = -1;
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();

    /* cuda:1's backend could not be made: unhealthy, no workers, no pool rows */
    struct rtx_jobs_device d1 = dev_stats(j, 2);
    ck_assert(!d1.healthy);
    ck_assert_int_eq(d1.workers, 0);
    ck_assert_msg(strstr(d1.detail, "cuda:1: cudaErrorDevicesUnavailable"), "%s", d1.detail);
    ck_assert_int_eq(dev_stats(j, 1).workers, 2);

    struct rtx_job_info info = run_on(j, &f, g, x, "cuda:0");
    ck_assert_str_eq(info.device, "cuda:0");
    rtx_job_info_clear(&info);
    info = run_on(j, &f, g, x, "cpu");
    rtx_job_info_clear(&info);
    settle(j);

    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(rows[0].device, "cuda:0");
    ck_assert_str_eq(rows[0].kind, "cuda");
    ck_assert_int_eq(rows[0].pools, 2);
    ck_assert_uint_eq(rows[0].total.bytes_reserved, (size_t)2 << 20);
    ck_assert_uint_eq(rows[0].cap_bytes, (size_t)8 << 20);
    ck_assert_uint_ge(rows[0].total.n_allocs, 1); /* the job's buffers */
    ck_assert(rows[0].total.fragmentation > 0.74 && rows[0].total.fragmentation < 0.76);
    ck_assert(rows[0].healthy);
    ck_assert_str_eq(rows[1].device, "cuda:0/pinned");
    ck_assert_str_eq(rows[1].kind, "pinned");
    ck_assert_str_eq(rows[2].device, "cpu");
    ck_assert_int_eq(rows[2].pools, 0);
    ck_assert_uint_gt(rows[2].total.bytes_allocated_peak, 0);
    ck_assert_int_eq(rtx_jobs_get_pools(j, rows, 2, &n, &err), RTX_ELIMIT);
    ck_assert_int_eq(rtx_jobs_get_pools(j, NULL, 2, &n, &err), RTX_EINVAL);

    finish(&f, j, g, x);
}
END_TEST

/* A job that needs more memory than the jobs share of its device (device.jobs_reserve of the
 * budget, the rest reserved by another consumer) fails with RESOURCE_EXHAUSTED and a reason
 * naming the share; the device stays usable and counts the refusal. */
START_TEST(job_past_the_jobs_share_is_resource_exhausted) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_devices_options d = devices_opts();
    d.cpu_memory_bytes = (size_t)8 << 20; /* the CPU's budget: 8 MiB, 2 MiB of it for jobs */
    d.memory_fraction = 1;
    fx_devices(&f, &d);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_device *cpu = rtx_devices_get(f.devices, 0);
    struct rtx_device_info info0 = dev_info(&f, 0);
    ck_assert_uint_eq(info0.budget_bytes, (size_t)8 << 20);
    ck_assert_uint_eq(info0.reserved_bytes, (size_t)2 << 20);
    struct rtx_device_consumer *other = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_device_consumer_new(cpu, "model other:1",
                                          info0.budget_bytes - info0.reserved_bytes, &other,
                                          &err) == 0,
                  "%s", err.msg);

    struct rtx_graph *g = NULL; /* y = relu(x), x f32[1024, 1024]: 4 MiB out */
    ck_assert(rtx_graph_new("big", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 1024}, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "act", (const char *[]){"x"}, 1,
                                 (const char *[]){"y"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, (const int64_t[]){1024, 1024}, -1, 1, 3);
    struct rtx_job_info info = run_on(j, &f, g, x, "cpu");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.failure_code, "RESOURCE_EXHAUSTED");
    ck_assert_msg(strstr(info.reason, "jobs share of cpu") &&
                      strstr(info.reason, "device.jobs_reserve"),
                  "%s", info.reason);
    rtx_job_info_clear(&info);
    settle(j);
    struct rtx_jobs_device jd = dev_stats(j, 0);
    ck_assert(jd.healthy);
    ck_assert_uint_ge(jd.refusals, 1);
    ck_assert_uint_eq(jd.reserved_bytes, (size_t)2 << 20);

    /* a job within the share still runs */
    struct rtx_graph *sg = small_graph();
    struct rtx_tensor *sx = small_x();
    info = run_on(j, &f, sg, sx, "cpu");
    ck_assert_int_eq(info.state, RTX_JOB_SUCCEEDED);
    ck_assert_str_eq(info.failure_code, "");
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);
    rtx_device_consumer_free(other);
    rtx_tensor_unref(sx);
    rtx_graph_free(sg);
    finish(&f, NULL, g, x);
}
END_TEST

Suite *rtx_jobs_devices_suite(void) {
    Suite *s = suite_create("jobs_devices");
    TCase *dc = tcase_create("devices");
    tcase_set_timeout(dc, 120);
    tcase_add_test(dc, gpu_jobs_are_placed_by_device);
    tcase_add_test(dc, device_field_is_validated);
    tcase_add_test(dc, unsupported_node_goes_to_cpu_or_is_refused);
    tcase_add_test(dc, sticky_error_marks_device_unhealthy);
    tcase_add_test(dc, ordinary_device_error_fails_the_job_only);
    tcase_add_test(dc, lost_device_fails_stranded_jobs);
    tcase_add_test(dc, recovery_fails_jobs_for_missing_devices);
    tcase_add_test(dc, pools_sum_the_workers_pools);
    tcase_add_test(dc, job_past_the_jobs_share_is_resource_exhausted);
    suite_add_tcase(s, dc);
    return s;
}
