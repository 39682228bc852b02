/*
 * test-jobs-plans.c - plan reuse and warm-up in the job manager: a repeated graph runs its
 * worker's kept plan (counted, reported per job, in /metrics and in Jobs.Get), other shapes,
 * limits-equal graphs with the same name and other content, and a disabled cache miss;
 * eviction by count (least recently used first) and by bytes; on a fake GPU that captures
 * graphs, the third job of a graph replays with the first job's results; a lost device and an
 * out-of-memory failure drop the kept plans; GPU workers warm up before their first job.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "daemon/metrics.h"
#include "daemon/server.h"
#include "rtx/v1/jobs.pb-c.h"
#include "tests/unit/test-jobs-util.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Plans: reuse across jobs, eviction, replay on a capturing fake GPU, warm-up
 * ---------------------------------------------------------------------------------------- */

/* Submits g with input x on `device` (NULL: the default), waits for its success and for the
 * worker to be done with it; returns the job's run (id filled). */
static struct rtx_jobs_run run_ok(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                                  struct rtx_tensor *x, const char *device,
                                  char id[RTX_JOB_ID_LEN]) {
    struct req_opts ro = {.device = device};
    submit_ok(j, g, x, &ro, id);
    if (wait_state(f->store, id, 0, 20000) != RTX_JOB_SUCCEEDED) {
        struct rtx_job_info info = get_job(f->store, id);
        ck_abort_msg("job %s: %s: %s", id, rtx_job_state_name(info.state), info.reason);
    }
    settle(j); /* the worker has put the plan back */
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, id, &run), 0);
    return run;
}

/* The hex digest of a succeeded job's first output. */
static void output_sha(struct fx *f, const char *id, char sha[65]) {
    struct rtx_job_info info = get_job(f->store, id);
    ck_assert_int_ge(info.n_outputs, 1);
    memcpy(sha, info.outputs[0].sha256, 65);
    rtx_job_info_clear(&info);
}

/* small_graph()'s input with `rows` rows (a fixed random f32[rows, 3]). */
static struct rtx_tensor *rows_x(int rows) {
    return tu_tensor_random(RTX_F32, 2, (const int64_t[]){rows, 3}, -1, 1, 20 + (unsigned)rows);
}

/* Jobs.Get through its handler (daemon/handlers-jobs.c) on j and f's store: the reply's Job
 * (free with rtx__v1__job__free_unpacked(m, NULL)). */
static Rtx__V1__Job *get_via_handler(struct rtx_jobs *j, struct fx *f, const char *id) {
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    d.store = f->store;
    d.jobs = j;
    Rtx__V1__GetJobRequest req = RTX__V1__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)id;
    uint8_t buf[128];
    ck_assert_uint_le(rtx__v1__get_job_request__get_packed_size(&req), sizeof buf);
    size_t len = rtx__v1__get_job_request__pack(&req, buf);
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    rtx__daemon_jobs_get(&d, buf, len, &rep);
    ck_assert_msg(rep.code == GRPC_STATUS_OK, "%s", rep.msg);
    Rtx__V1__Job *m = rtx__v1__job__unpack(NULL, rep.len, rep.data);
    ck_assert_ptr_nonnull(m);
    rtx_free(rep.data);
    rtx__daemon_close(&d);
    return m;
}

/* /metrics of a daemon whose job manager is j (rtx_free the text). */
static char *metrics_of(struct rtx_jobs *j, struct fx *f) {
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    d.store = f->store;
    d.jobs = j;
    d.devices = f->devices;
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(rtx_metrics_render(&d, &text, &len, &err) == 0, "%s", err.msg);
    rtx__daemon_close(&d);
    return text;
}

START_TEST(same_graph_reuses_its_plan) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN];
    struct rtx_jobs_run r1 = run_ok(j, &f, g, x, NULL, a);
    struct rtx_jobs_run r2 = run_ok(j, &f, g, x, NULL, b);
    ck_assert(!r1.plan_reused);
    ck_assert(r2.plan_reused);
    ck_assert_int_eq(r1.mode, RTX_EXEC_PLAIN); /* the CPU never captures */
    ck_assert_int_eq(r2.mode, RTX_EXEC_PLAIN);
    ck_assert_int_eq(r2.nodes_run, 3);
    ck_assert_str_eq(r2.device, "cpu");
    char sa[65], sb[65];
    output_sha(&f, a, sa);
    output_sha(&f, b, sb);
    ck_assert_str_eq(sa, sb);

    struct rtx_device_info d = dev_info(&f, 0);
    ck_assert_int_eq(d.plan_misses, 1);
    ck_assert_int_eq(d.plan_hits, 1);
    ck_assert_int_eq(d.plan_evictions, 0);
    ck_assert_int_eq(d.plans, 1);
    /* initializers 48 + 16, input 24, output 32 bytes, and the arena */
    ck_assert_uint_ge(d.plan_bytes, 120);

    /* only jobs that succeeded here have a run */
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, "jnosuch", &run), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_jobs_get_run(j, "", &run), RTX_ENOTFOUND);
    ck_assert_int_eq(rtx_jobs_get_run(j, NULL, &run), RTX_ENOTFOUND);

    /* Jobs.Get reports the run */
    Rtx__V1__Job *m = get_via_handler(j, &f, a);
    ck_assert_str_eq(m->exec_mode, "plain");
    ck_assert(!m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);
    m = get_via_handler(j, &f, b);
    ck_assert_str_eq(m->exec_mode, "plain");
    ck_assert(m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);

    /* and /metrics the counters */
    char *text = metrics_of(j, &f);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE rtx_device_plan_cache_hits_total counter\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtx_device_plan_cache_hits_total{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "\nrtx_device_plan_cache_misses_total{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "\nrtx_device_plan_cache_evictions_total{device=\"cpu\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtx_device_plans{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtx_device_healthy{device=\"cpu\"} 1\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "\nrtx_device_memory_reserved_bytes{device=\"cpu\",consumer=\"jobs\"} "));
    ck_assert_ptr_nonnull(
        strstr(text, "\nrtx_device_memory_refusals_total{device=\"cpu\",consumer=\"jobs\"} 0\n"));
    rtx_free(text);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(other_shapes_and_contents_miss) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph(), *same_name = small_graph_seeded(99);
    struct rtx_tensor *x2 = rows_x(2), *x5 = rows_x(5);
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN], c[RTX_JOB_ID_LEN], e[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, x2, NULL, a).plan_reused);
    ck_assert(!run_ok(j, &f, g, x5, NULL, b).plan_reused);       /* another shape */
    ck_assert(run_ok(j, &f, g, x2, NULL, c).plan_reused);        /* the first again */
    ck_assert(!run_ok(j, &f, same_name, x2, NULL, e).plan_reused); /* "small", other weights */
    char sa[65], sc[65], se[65];
    output_sha(&f, a, sa);
    output_sha(&f, c, sc);
    output_sha(&f, e, se);
    ck_assert_str_eq(sa, sc);
    ck_assert_str_ne(sa, se); /* computed with its own weights, not the kept plan's */
    struct rtx_job_info info = get_job(f.store, e);
    ck_assert_str_eq(info.graph_name, "small");
    rtx_job_info_clear(&info);
    struct rtx_device_info d = dev_info(&f, 0);
    ck_assert_int_eq(d.plan_misses, 3);
    ck_assert_int_eq(d.plan_hits, 1);
    ck_assert_int_eq(d.plans, 3);
    rtx_tensor_unref(x5);
    rtx_graph_free(same_name);
    finish(&f, j, g, x2);
}
END_TEST

START_TEST(cache_evicts_least_recently_used) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    fx_plan_cache(&f, &o, 2, (size_t)1 << 30);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *xa = rows_x(1), *xb = rows_x(2), *xc = rows_x(3);
    char id[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, xa, NULL, id).plan_reused); /* A */
    ck_assert(!run_ok(j, &f, g, xb, NULL, id).plan_reused); /* B */
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);  /* A, now the most recent */
    ck_assert(!run_ok(j, &f, g, xc, NULL, id).plan_reused); /* C drops B */
    struct rtx_device_info d = dev_info(&f, 0);
    ck_assert_int_eq(d.plan_evictions, 1);
    ck_assert_int_eq(d.plans, 2);
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);  /* A stayed */
    ck_assert(!run_ok(j, &f, g, xb, NULL, id).plan_reused); /* B was dropped; drops C */
    ck_assert(run_ok(j, &f, g, xa, NULL, id).plan_reused);
    d = dev_info(&f, 0);
    ck_assert_int_eq(d.plan_hits, 3);
    ck_assert_int_eq(d.plan_misses, 4);
    ck_assert_int_eq(d.plan_evictions, 2);
    ck_assert_int_eq(d.plans, 2);
    rtx_tensor_unref(xb);
    rtx_tensor_unref(xc);
    finish(&f, j, g, xa);
}
END_TEST

START_TEST(cache_evicts_by_bytes) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x1 = rows_x(1), *x8 = rows_x(8), *x64 = rows_x(64);
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, g, x8, NULL, id);
    size_t bytes8 = dev_info(&f, 0).plan_bytes; /* what the 8-row plan may hold */
    rtx_jobs_stop(j);

    fx_plan_cache(&f, &o, 16, bytes8); /* room for the 8-row plan alone */
    j = start(&o);
    ck_assert(!run_ok(j, &f, g, x8, NULL, id).plan_reused);
    ck_assert_uint_eq(dev_info(&f, 0).plan_bytes, bytes8);
    ck_assert(!run_ok(j, &f, g, x64, NULL, id).plan_reused); /* larger than the bound: not kept */
    struct rtx_device_info d = dev_info(&f, 0);
    ck_assert_int_eq(d.plans, 1);
    ck_assert_int_eq(d.plan_evictions, 0);
    ck_assert(!run_ok(j, &f, g, x64, NULL, id).plan_reused);
    ck_assert(run_ok(j, &f, g, x8, NULL, id).plan_reused);
    ck_assert(!run_ok(j, &f, g, x1, NULL, id).plan_reused); /* fits alone: drops the 8-row plan */
    d = dev_info(&f, 0);
    ck_assert_int_eq(d.plans, 1);
    ck_assert_int_eq(d.plan_evictions, 1);
    ck_assert_uint_lt(d.plan_bytes, bytes8);
    ck_assert(!run_ok(j, &f, g, x8, NULL, id).plan_reused);
    rtx_tensor_unref(x1);
    rtx_tensor_unref(x64);
    finish(&f, j, g, x8);
}
END_TEST

START_TEST(cache_off_plans_every_job) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    fx_plan_cache(&f, &o, 0, (size_t)1 << 30);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char a[RTX_JOB_ID_LEN], b[RTX_JOB_ID_LEN];
    ck_assert(!run_ok(j, &f, g, x, NULL, a).plan_reused);
    ck_assert(!run_ok(j, &f, g, x, NULL, b).plan_reused);
    char sa[65], sb[65];
    output_sha(&f, a, sa);
    output_sha(&f, b, sb);
    ck_assert_str_eq(sa, sb);
    struct rtx_device_info d = dev_info(&f, 0);
    ck_assert_int_eq(d.plan_hits, 0);
    ck_assert_int_eq(d.plan_misses, 0);
    ck_assert_int_eq(d.plans, 0);
    ck_assert_uint_eq(d.plan_bytes, 0);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(repeated_gpu_job_replays) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    fake_capture = true;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    fake_capture = false;
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x(), *x2 = rows_x(2);
    char cpu[RTX_JOB_ID_LEN], ids[4][RTX_JOB_ID_LEN];
    run_ok(j, &f, g, x, "cpu", cpu);
    const enum rtx_exec_mode want[3] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED, RTX_EXEC_REPLAYED};
    char want_sha[65], sha[65];
    output_sha(&f, cpu, want_sha);
    struct rec r;
    rec_init(&r);
    for (int i = 0; i < 3; i++) {
        struct rtx_jobs_run run = run_ok(j, &f, g, x, "cuda:0", ids[i]);
        ck_assert_msg(run.mode == want[i], "job %d ran %s", i, rtx_exec_mode_name(run.mode));
        ck_assert(run.plan_reused == (i > 0));
        ck_assert_str_eq(run.device, "cuda:0");
        output_sha(&f, ids[i], sha);
        ck_assert_str_eq(sha, want_sha); /* the replayed graph computes what the CPU did */
    }
    /* the warm-up launched one graph, the second and third jobs one each */
    ck_assert_ptr_nonnull(fake_made[0]);
    ck_assert_int_eq(__atomic_load_n(&fake_made[0]->launches, __ATOMIC_SEQ_CST), 3);

    /* other values of the same shape: replayed on the new inputs */
    ck_assert_int_eq(run_ok(j, &f, g, x2, "cuda:0", ids[3]).mode, RTX_EXEC_REPLAYED);
    run_ok(j, &f, g, x2, "cpu", cpu);
    output_sha(&f, cpu, want_sha);
    output_sha(&f, ids[3], sha);
    ck_assert_str_eq(sha, want_sha);

    /* a watcher hears how the job ran, and so does Jobs.Get */
    uint64_t w;
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_watch(j, ids[2], rec_cb, &r, &w, &err) == 0);
    rec_wait_last(&r, 10000);
    ck_assert_int_eq(r.n, 1);
    ck_assert(r.have_run[0]);
    ck_assert_int_eq(r.runs[0].mode, RTX_EXEC_REPLAYED);
    ck_assert(r.runs[0].plan_reused);
    Rtx__V1__Job *m = get_via_handler(j, &f, ids[2]);
    ck_assert_str_eq(m->exec_mode, "replayed");
    ck_assert(m->plan_reused);
    rtx__v1__job__free_unpacked(m, NULL);
    struct rtx_device_info d = dev_info(&f, 1);
    ck_assert_int_eq(d.plan_hits, 3);
    ck_assert_int_eq(d.plan_misses, 1);
    rtx_tensor_unref(x2);
    finish(&f, j, g, x);
}
END_TEST

START_TEST(watch_of_a_new_job_gets_its_run) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(200), *g = small_graph();
    struct rtx_tensor *xl = long_x(), *x = small_x();
    char busy[RTX_JOB_ID_LEN], id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, busy); /* keeps the worker until the watch is set */
    submit_ok(j, g, x, NULL, id);
    struct rec r;
    rec_init(&r);
    uint64_t w;
    struct rtx_err err = {0};
    ck_assert(rtx_jobs_watch(j, id, rec_cb, &r, &w, &err) == 0);
    ck_assert(rtx_jobs_cancel(j, busy, NULL, &err) == 0);
    rec_wait_last(&r, 10000);
    ck_assert_int_eq(r.n, 3); /* queued, running, succeeded */
    ck_assert(!r.have_run[0] && !r.have_run[1]);
    ck_assert_int_eq(r.states[2], RTX_JOB_SUCCEEDED);
    ck_assert(r.have_run[2]);
    ck_assert_int_eq(r.runs[2].mode, RTX_EXEC_PLAIN);
    ck_assert_str_eq(r.runs[2].device, "cpu");
    rtx_tensor_unref(xl);
    rtx_graph_free(lg);
    finish(&f, j, g, x);
}
END_TEST

/* The run records keep the latest RTX_JOBS_RUNS_KEPT runs: older ones are forgotten, every
 * later one is still found (the ring's slots are reused and unlinked from their buckets). */
START_TEST(run_records_keep_the_latest) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, NULL, &len);
    enum { N = RTX_JOBS_RUNS_KEPT + 3, BATCH = 500 };
    char (*ids)[RTX_JOB_ID_LEN] = calloc(N, sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++) {
        bool dedup;
        struct rtx_err err = {0};
        ck_assert_msg(rtx_jobs_submit(j, req, len, ids[i], &dedup, &err) == 0, "%s", err.msg);
        if (i % BATCH == BATCH - 1 || i == N - 1) settle(j);
    }
    struct rtx_jobs_run run;
    for (int i = 0; i < N; i++) {
        int rc = rtx_jobs_get_run(j, ids[i], &run);
        ck_assert_msg(rc == (i < 3 ? RTX_ENOTFOUND : 0), "job %d of %d: %d", i, N, rc);
    }
    ck_assert(run.plan_reused);
    ck_assert_int_eq(dev_info(&f, 0).plan_hits, N - 1);
    free(ids);
    free(req);
    finish(&f, j, g, x);
}
END_TEST

/* A job whose outputs cannot be journaled (its journal row left "running" under it) failed
 * after all: its run is forgotten again, and its plan is kept anyway (the run itself was fine). */
START_TEST(run_is_forgotten_when_outputs_are_not_journaled) {
    struct fx f;
    fx_open_sync(&f, true);
    struct rtx_jobs_options o = jobs_opts(&f, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *lg = long_graph(40);
    struct rtx_tensor *xl = long_x();
    char id[RTX_JOB_ID_LEN];
    submit_running(j, &f, lg, xl, NULL, id);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_set_state(f.store, id, RTX_JOB_FAILED, "moved by the test",
                                          wall_ms(), &err) == 0, "%s", err.msg);
    settle(j);
    struct rtx_job_info info = get_job(f.store, id);
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    struct rtx_jobs_run run;
    ck_assert_int_eq(rtx_jobs_get_run(j, id, &run), RTX_ENOTFOUND);
    ck_assert_int_eq(dev_info(&f, 0).plans, 1);
    rtx_tensor_unref(xl);
    finish(&f, j, lg, NULL);
}
END_TEST

/* Waits until device slot `slot` keeps `plans` plans. */
static struct rtx_device_info wait_plans(struct fx *f, int slot, int plans) {
    for (int waited = 0;; waited++) {
        struct rtx_device_info d = dev_info(f, slot);
        if (d.plans == plans) return d;
        ck_assert_msg(waited < 10000, "slot %d keeps %d plans, not %d", slot, d.plans, plans);
        usleep(1000);
    }
}

START_TEST(lost_device_drops_its_plans) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *sticky = named_graph("sticky_relu");
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, ok, x, "cuda:0", id);
    ck_assert_int_eq(dev_info(&f, 1).plans, 1);
    struct rtx_job_info info = run_on(j, &f, sticky, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    rtx_job_info_clear(&info);
    ck_assert(!dev_stats(j, 1).healthy);
    struct rtx_device_info d = wait_plans(&f, 1, 0);
    ck_assert_int_eq(d.plan_evictions, 0); /* a clear is not an eviction (device layer) */
    ck_assert_uint_eq(d.plan_bytes, 0);
    rtx_graph_free(ok);
    rtx_graph_free(sticky);
    finish(&f, j, NULL, x);
}
END_TEST

START_TEST(out_of_memory_drops_kept_plans) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 1, 1, &o);
    struct rtx_graph *ok = named_graph("act"), *oom = named_graph("oom_relu");
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    run_ok(j, &f, ok, x, "cuda:0", id);
    ck_assert_int_eq(dev_info(&f, 1).plans, 1);
    struct rtx_job_info info = run_on(j, &f, oom, x, "cuda:0");
    ck_assert_int_eq(info.state, RTX_JOB_FAILED);
    ck_assert_str_eq(info.reason, "node 'oom_relu': out of device memory (fake)");
    rtx_job_info_clear(&info);
    settle(j);
    struct rtx_device_info d = dev_info(&f, 1);
    ck_assert(d.healthy);
    ck_assert_int_eq(d.plans, 0); /* dropped before the job ran again */
    ck_assert_int_eq(d.plan_evictions, 0); /* a clear is not an eviction (device layer) */
    ck_assert(!run_ok(j, &f, ok, x, "cuda:0", id).plan_reused);
    rtx_graph_free(ok);
    rtx_graph_free(oom);
    finish(&f, j, NULL, x);
}
END_TEST


/* The device pool allocations of cuda:0 (the fake counts the buffers its backends made). */
static uint64_t cuda0_allocs(struct rtx_jobs *j) {
    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_str_eq(rows[0].device, "cuda:0");
    return rows[0].total.n_allocs;
}

/* Warm-up is the device layer's (device/device.h): its counts and times are checked there;
 * here, that GPU workers' backends come warmed up and still take jobs when they cannot run
 * the warm-up graph. */
START_TEST(gpu_workers_warm_up_before_jobs) {
    struct fx f;
    struct gpu_list gl;
    struct rtx_jobs_options o;
    struct rtx_jobs *j = gpu_start(&f, &gl, 2, 2, &o);
    for (int slot = 1; slot <= 2; slot++)
        ck_assert_int_eq(dev_stats(j, slot).jobs_started, 0);
    ck_assert_uint_ge(cuda0_allocs(j), 2); /* the warm-up ran on both workers' backends */
    rtx_jobs_stop(j);

    /* a backend that cannot run the warm-up graph is not warmed up, and still takes jobs */
    fake_refuse_op = RTX_OP_TANH;
    o = gpu_opts(&f, &gl, 2);
    j = start(&o);
    ck_assert_uint_eq(cuda0_allocs(j), 0);
    struct rtx_graph *g = small_graph();
    struct rtx_tensor *x = small_x();
    char id[RTX_JOB_ID_LEN];
    ck_assert_str_eq(run_ok(j, &f, g, x, "cuda:0", id).device, "cuda:0");
    fake_refuse_op = -1;
    finish(&f, j, g, x);
}
END_TEST


Suite *rtx_jobs_plans_suite(void) {
    Suite *s = suite_create("jobs_plans");
    TCase *pc = tcase_create("plans");
    tcase_set_timeout(pc, 120);
    tcase_add_test(pc, same_graph_reuses_its_plan);
    tcase_add_test(pc, other_shapes_and_contents_miss);
    tcase_add_test(pc, cache_evicts_least_recently_used);
    tcase_add_test(pc, cache_evicts_by_bytes);
    tcase_add_test(pc, cache_off_plans_every_job);
    tcase_add_test(pc, repeated_gpu_job_replays);
    tcase_add_test(pc, watch_of_a_new_job_gets_its_run);
    tcase_add_test(pc, run_records_keep_the_latest);
    tcase_add_test(pc, run_is_forgotten_when_outputs_are_not_journaled);
    tcase_add_test(pc, lost_device_drops_its_plans);
    tcase_add_test(pc, out_of_memory_drops_kept_plans);
    tcase_add_test(pc, gpu_workers_warm_up_before_jobs);
    suite_add_tcase(s, pc);
    return s;
}
