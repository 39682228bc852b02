/*
 * client-check.c - rtx-client-check, the C driver of librtx against a live rtxd:
 *
 *     rtx-client-check [--drain] [HOST:PORT]      (default 127.0.0.1:8001)
 *
 * It goes through librtx end to end: builds a gemm+relu graph with the builder and checks
 * the daemon's numbers against values worked out by hand; waits (with a callback, with a
 * timeout that passes); deduplicates by idempotency key; cancels a running and a queued job;
 * lets a job expire; lists with state, label and time filters and follows page tokens; checks
 * the error codes for unknown job ids, invalid graphs and inputs, an unknown lane and an
 * unreachable daemon; calls Status, Devices, Health and Config; and runs calls from several
 * threads over one client. --drain finally drains the daemon (which then exits).
 * --generate MODEL checks text generation with a generative model instead: streamed chunks,
 * the result and its usage, cancellation by callback and by flag, bad requests.
 *
 * Prints one line per check ("ok - ..." or "FAIL - ... (file:line)") and then
 * "N passed, M failed"; exits 0 when nothing failed, 1 otherwise, 2 on a usage error.
 *
 * DESIGN
 * Every job it submits carries the labels suite=client-check and run=<unique id>, so the
 * listing checks see only this run's jobs even on a daemon that others use. Checks that
 * depend on the daemon running one job at a time (a queued job behind a long one, an
 * expiring job) read jobs.workers from Config and are weaker otherwise; test_cli.py runs it
 * on a daemon with one worker and requires those checks in its output.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/rtx.h"

static int n_passed, n_failed;

static bool check_at(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records and prints one check; returns ok. */
static bool check_at(bool ok, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    if (!ok) printf(" (%s:%d)", file, line);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
    if (ok)
        n_passed++;
    else
        n_failed++;
    return ok;
}

#define CHECK(cond, ...) check_at((cond), __FILE__, __LINE__, __VA_ARGS__)

/* A librtx call that must succeed; the message carries the error when it does not. */
#define CHECK_OK(rc, err, what)                                                                 \
    CHECK((rc) == 0, "%s%s%s", what, (rc) == 0 ? "" : ": ", (rc) == 0 ? "" : (err).msg)

/* A librtx call that must fail with `code`. */
#define CHECK_CODE(rc, err, code, what)                                                         \
    CHECK((rc) == (code), "%s: %s (%s, gRPC status %d: %s)", what, rtx_client_errname(code),  \
          rtx_client_errname(rc), (err).grpc_status, (err).msg)

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* What every check shares. */
struct run {
    const char *address;
    struct rtx_client *c;
    char id[32];                        /* the label run=<id> of this run's jobs */
    int workers;                        /* the daemon's jobs.workers, 0 if unknown */
    char gemm_job[RTX_CLIENT_JOB_ID_MAX];
};

/* ------------------------------------------------------------------------------------------
 * Graphs
 * ---------------------------------------------------------------------------------------- */

/* The hand-checked graph: h = gemm(x, w, b, alpha 0.5, beta 1), y = relu(h); outputs y, h.
 *   x = [[1,2,3],[-1,0,4]], w = [[1,-1],[0,2],[1,1]], b = [0.5,-3]
 *   x.w = [[4,6],[3,5]];  h = 0.5 x.w + b = [[2.5,0],[2,-0.5]];  y = [[2.5,0],[2,0]]  */
static const float gemm_x[6] = {1, 2, 3, -1, 0, 4};
static const float gemm_h[4] = {2.5f, 0.0f, 2.0f, -0.5f};
static const float gemm_y[4] = {2.5f, 0.0f, 2.0f, 0.0f};

static struct rtx_client_graph *gemm_graph(void) {
    struct rtx_client_graph *g = NULL;
    struct rtx_client_err err;
    static const float w[6] = {1, -1, 0, 2, 1, 1};
    static const float b[2] = {0.5f, -3.0f};
    static const int64_t x_dims[2] = {-1, 3};
    const struct rtx_client_tensor wt = {.name = "w", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 2,
                                         .dims = {3, 2}, .data = (void *)w, .bytes = sizeof w};
    const struct rtx_client_tensor bt = {.name = "b", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 1,
                                         .dims = {2}, .data = (void *)b, .bytes = sizeof b};
    const char *fc_in[] = {"x", "w", "b"}, *fc_out[] = {"h"};
    const char *relu_in[] = {"h"}, *relu_out[] = {"y"};
    int ok = rtx_client_graph_new("client_check_gemm", &g, &err) == 0;
    ok = ok && rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, x_dims, &err) == 0;
    ok = ok && rtx_client_graph_add_initializer(g, &wt, &err) == 0;
    ok = ok && rtx_client_graph_add_initializer(g, &bt, &err) == 1;
    int fc = ok ? rtx_client_graph_add_node(g, "gemm", "fc", fc_in, 3, fc_out, 1, &err) : -1;
    ok = fc == 0;
    ok = ok && rtx_client_graph_set_attr_float(g, fc, "alpha", 0.5, &err) == 0;
    ok = ok && rtx_client_graph_set_attr_float(g, fc, "beta", 1.0, &err) == 0;
    ok = ok && rtx_client_graph_set_attr_int(g, fc, "trans_b", 0, &err) == 0;
    ok = ok && rtx_client_graph_add_node(g, "relu", "act", relu_in, 1, relu_out, 1, &err) == 1;
    ok = ok && rtx_client_graph_add_output(g, "y", &err) == 0;
    ok = ok && rtx_client_graph_add_output(g, "h", &err) == 1;
    if (!CHECK(ok, "build the gemm+relu graph with the builder%s%s", ok ? "" : ": ",
               ok ? "" : err.msg)) {
        rtx_client_graph_free(g);
        return NULL;
    }
    return g;
}

/* The gemm graph's input: x [2,3] (a view of static data). */
static struct rtx_client_tensor gemm_input(void) {
    struct rtx_client_tensor x = {.name = "x", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 2,
                                  .dims = {2, 3}, .data = (void *)gemm_x,
                                  .bytes = sizeof gemm_x};
    return x;
}

/* A job that runs for a while (as the Python suite's long graph): x [1,1024] expanded to a
 * 1024x1024 matrix and multiplied n times by W = ones/1024 (also expanded); y is the column
 * mean. Every product keeps the values, so it never overflows. */
static struct rtx_client_graph *long_graph(int n) {
    struct rtx_client_graph *g = NULL;
    struct rtx_client_err err;
    static float wrow[1024];
    for (int i = 0; i < 1024; i++)
        wrow[i] = 1.0f / 1024.0f;
    const struct rtx_client_tensor wt = {.name = "wrow", .dtype = RTX_CLIENT_DTYPE_F32,
                                         .ndim = 2, .dims = {1, 1024}, .data = wrow,
                                         .bytes = sizeof wrow};
    static const int64_t x_dims[2] = {1, 1024}, square[2] = {1024, 1024}, axes[1] = {0};
    int ok = rtx_client_graph_new("client_check_long", &g, &err) == 0;
    ok = ok && rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, x_dims, &err) == 0;
    ok = ok && rtx_client_graph_add_initializer(g, &wt, &err) == 0;
    const char *in_w[] = {"wrow"}, *out_w[] = {"W"}, *in_h[] = {"x"}, *out_h[] = {"h0"};
    int node = ok ? rtx_client_graph_add_node(g, "expand", "W", in_w, 1, out_w, 1, &err) : -1;
    ok = node >= 0 && rtx_client_graph_set_attr_ints(g, node, "shape", square, 2, &err) == 0;
    node = ok ? rtx_client_graph_add_node(g, "expand", "h0", in_h, 1, out_h, 1, &err) : -1;
    ok = node >= 0 && rtx_client_graph_set_attr_ints(g, node, "shape", square, 2, &err) == 0;
    for (int i = 0; ok && i < n; i++) {
        char a[16], b[16], name[16];
        snprintf(a, sizeof a, "h%d", i);
        snprintf(b, sizeof b, "h%d", i + 1);
        snprintf(name, sizeof name, "mm%d", i + 1);
        const char *in[] = {a, "W"}, *out[] = {b};
        ok = rtx_client_graph_add_node(g, "matmul", name, in, 2, out, 1, &err) >= 0;
    }
    char last[16];
    snprintf(last, sizeof last, "h%d", n);
    const char *in_y[] = {last}, *out_y[] = {"y"};
    node = ok ? rtx_client_graph_add_node(g, "reduce_mean", "colmean", in_y, 1, out_y, 1, &err)
              : -1;
    ok = node >= 0 && rtx_client_graph_set_attr_ints(g, node, "axes", axes, 1, &err) == 0;
    ok = ok && rtx_client_graph_add_output(g, "y", &err) == 0;
    if (!CHECK(ok, "build the long graph (%d matmuls)%s%s", n, ok ? "" : ": ",
               ok ? "" : err.msg)) {
        rtx_client_graph_free(g);
        return NULL;
    }
    return g;
}

static float long_x[1024];

static struct rtx_client_tensor long_input(void) {
    for (int i = 0; i < 1024; i++)
        long_x[i] = (float)((i % 17) - 8) / 8.0f;
    struct rtx_client_tensor x = {.name = "x", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 2,
                                  .dims = {1, 1024}, .data = long_x, .bytes = sizeof long_x};
    return x;
}

/* Submits g with labels suite, run and kind; returns 0 and the id or the error code. */
static int submit(struct run *r, const struct rtx_client_graph *g,
                  const struct rtx_client_tensor *in, int n_in, const char *kind,
                  int64_t deadline, char id[RTX_CLIENT_JOB_ID_MAX], struct rtx_client_err *err) {
    const struct rtx_client_label labels[] = {
        {"suite", "client-check"}, {"run", r->id}, {"kind", kind}};
    struct rtx_client_submit_options opt = {.labels = labels, .n_labels = 3,
                                            .deadline_unix_ms = deadline};
    return rtx_client_submit(r->c, g, in, n_in, &opt, id, NULL, err);
}

/* Polls a job until its state is `want` or terminal (up to timeout_ms); returns the state. */
static enum rtx_client_job_state poll_state(struct run *r, const char *id,
                                            enum rtx_client_job_state want, int timeout_ms) {
    enum rtx_client_job_state s = RTX_CLIENT_JOB_UNSPECIFIED;
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; sleep_ms(5)) {
        struct rtx_client_job *job = NULL;
        struct rtx_client_err err;
        if (rtx_client_get_job(r->c, id, &job, &err) < 0) break;
        s = job->state;
        rtx_client_job_free(job);
        if (s == want || rtx_client_job_state_is_terminal(s)) break;
    }
    return s;
}

/* ------------------------------------------------------------------------------------------
 * Checks
 * ---------------------------------------------------------------------------------------- */

static void check_local(void) {
    struct rtx_client_err err;
    CHECK(strcmp(rtx_client_strerror(RTX_CLIENT_ENOTFOUND), "not found") == 0 &&
              strcmp(rtx_client_errname(RTX_CLIENT_ETIMEDOUT), "ETIMEDOUT") == 0 &&
              strcmp(rtx_client_strerror(0), "ok") == 0 &&
              strcmp(rtx_client_strerror(12345), "unknown error") == 0,
          "error code names and messages");
    enum rtx_client_dtype dt = RTX_CLIENT_DTYPE_UNSPECIFIED;
    CHECK(rtx_client_dtype_from_name("bf16", &dt) == 0 && dt == RTX_CLIENT_DTYPE_BF16 &&
              rtx_client_dtype_size(RTX_CLIENT_DTYPE_I64) == 8 &&
              rtx_client_dtype_from_name("f64", &dt) == RTX_CLIENT_EINVAL,
          "dtype names and sizes");
    enum rtx_client_job_state st;
    CHECK(rtx_client_job_state_from_name("expired", &st) == 0 && st == RTX_CLIENT_JOB_EXPIRED &&
              rtx_client_job_state_is_terminal(st) &&
              !rtx_client_job_state_is_terminal(RTX_CLIENT_JOB_RUNNING),
          "job state names");

    struct rtx_client_graph *g = NULL;
    int rc = rtx_client_graph_new("local", &g, &err);
    CHECK_OK(rc, err, "graph_new");
    if (rc < 0) return;
    int64_t dims[2] = {-1, 4};
    rc = rtx_client_graph_add_input(g, "x", (enum rtx_client_dtype)99, 2, dims, &err);
    CHECK(rc == RTX_CLIENT_EINVAL && err.grpc_status == -1, "add_input rejects a bad dtype "
          "locally (%s)", err.msg);
    rc = rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, dims, &err);
    CHECK(rc == 0, "add_input x");
    rc = rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, dims, &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "add_input rejects a second x (%s)", err.msg);
    float data[3] = {1, 2, 3};
    struct rtx_client_tensor bad = {.name = "c", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 1,
                                    .dims = {4}, .data = data, .bytes = sizeof data};
    rc = rtx_client_graph_add_initializer(g, &bad, &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "add_initializer rejects data of the wrong size (%s)",
          err.msg);
    const char *in[] = {"x"}, *out[] = {"y"};
    rc = rtx_client_graph_add_node(g, "relu", "r", in, 1, out, 0, &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "add_node rejects a node without outputs");
    int node = rtx_client_graph_add_node(g, "relu", "r", in, 1, out, 1, &err);
    CHECK(node == 0, "add_node returns the node index");
    rc = rtx_client_graph_set_attr_int(g, 7, "k", 1, &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "set_attr rejects an unknown node (%s)", err.msg);
    rc = rtx_client_graph_set_attr_string(g, node, "mode", "fast", &err);
    CHECK(rc == 0, "set_attr_string");
    rc = rtx_client_graph_set_attr_string(g, node, "mode", "slow", &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "set_attr rejects an attribute set twice (%s)", err.msg);
    double fl[2] = {0.5, 1.5};
    CHECK(rtx_client_graph_set_attr_floats(g, node, "fl", fl, 2, &err) == 0, "set_attr_floats");
    struct rtx_client_tensor *t = NULL;
    int64_t tdims[1] = {3};
    rc = rtx_client_tensor_new("t", RTX_CLIENT_DTYPE_F32, 1, tdims, data, &t, &err);
    CHECK(rc == 0 && t->owned && t->bytes == 12 && ((float *)t->data)[2] == 3.0f,
          "tensor_new copies the data");
    CHECK(rc == 0 && rtx_client_graph_set_attr_tensor(g, node, "t", t, &err) == 0,
          "set_attr_tensor");
    rtx_client_tensor_free(t);
    int64_t neg[1] = {-2};
    rc = rtx_client_tensor_new("t", RTX_CLIENT_DTYPE_F32, 1, neg, NULL, &t, &err);
    CHECK(rc == RTX_CLIENT_EINVAL && !t, "tensor_new rejects a negative dimension");
    CHECK(rtx_client_graph_add_output(g, "y", &err) == 0, "add_output");

    char path[64];
    snprintf(path, sizeof path, "/tmp/rtx-client-check-%ld.rtxg", (long)getpid());
    rc = rtx_client_graph_save(g, path, &err);
    CHECK_OK(rc, err, "graph_save");
    struct rtx_client_graph *g2 = NULL;
    rc = rtx_client_graph_load(path, &g2, &err);
    CHECK_OK(rc, err, "graph_load of the saved file");
    unlink(path);
    struct rtx_client_value_info vi;
    bool same = rc == 0 && strcmp(rtx_client_graph_name(g2), "local") == 0 &&
                rtx_client_graph_n_inputs(g2) == 1 && rtx_client_graph_n_nodes(g2) == 1 &&
                rtx_client_graph_n_outputs(g2) == 1 &&
                strcmp(rtx_client_graph_output(g2, 0), "y") == 0 &&
                rtx_client_graph_input(g2, 0, &vi, &err) == 0 && vi.ndim == 2 &&
                vi.dims[0] == -1 && vi.dims[1] == 4 && vi.dtype == RTX_CLIENT_DTYPE_F32;
    CHECK(same, "a saved and loaded graph keeps its name, input, node and output");
    /* a loaded graph can still be extended */
    CHECK(rc == 0 && rtx_client_graph_add_output(g2, "x", &err) == 1,
          "a loaded graph can be extended");
    rtx_client_graph_free(g2);
    rtx_client_graph_free(g);
    rc = rtx_client_graph_load("/nonexistent/graph.rtxg", &g2, &err);
    CHECK(rc == RTX_CLIENT_EIO && !g2, "graph_load of a missing file: EIO (%s)", err.msg);
    static const char junk[] = "\xff\xff\xff\xff not a protobuf";
    rc = rtx_client_graph_decode(junk, sizeof junk, &g2, &err);
    CHECK(rc == RTX_CLIENT_EFORMAT && !g2, "graph_decode of junk: EFORMAT");
}

static void check_admin(struct run *r) {
    struct rtx_client_err err;
    struct rtx_client_status *st = NULL;
    int rc = rtx_client_get_status(r->c, &st, &err);
    CHECK_OK(rc, err, "Admin.Status");
    if (rc == 0) {
        CHECK(*st->version && st->uptime_ms > 0 && st->n_devices >= 1 && !st->draining &&
                  st->store.ok && st->n_lanes >= 1,
              "status: version %s, uptime %" PRId64 " ms, %d devices, %d lanes, store ok %d",
              st->version, st->uptime_ms, st->n_devices, st->n_lanes, st->store.ok);
        rtx_client_status_free(st);
    }
    struct rtx_client_device_list *devs = NULL;
    rc = rtx_client_list_devices(r->c, &devs, &err);
    CHECK_OK(rc, err, "Admin.Devices");
    if (rc == 0) {
        int cpu = -1;
        for (int i = 0; i < devs->n_devices; i++)
            if (strcmp(devs->devices[i].kind, "cpu") == 0) cpu = i;
        CHECK(cpu >= 0 && devs->devices[cpu].healthy && *devs->devices[cpu].name,
              "devices: a healthy cpu device among %d", devs->n_devices);
        rtx_client_device_list_free(devs);
    }
    struct rtx_client_health *h = NULL;
    rc = rtx_client_get_health(r->c, &h, &err);
    CHECK_OK(rc, err, "Admin.Health");
    if (rc == 0) {
        CHECK(h->status == RTX_CLIENT_SERVING, "health: SERVING (%d %s)", (int)h->status,
              h->detail);
        rtx_client_health_free(h);
    }
    struct rtx_client_config *cfg = NULL;
    rc = rtx_client_get_config(r->c, &cfg, &err);
    CHECK_OK(rc, err, "Admin.Config");
    if (rc == 0) {
        bool listen = false, complete = true;
        for (int i = 0; i < cfg->n_settings; i++) {
            const struct rtx_client_setting *s = &cfg->settings[i];
            if (!*s->name || !*s->origin) complete = false;
            if (strcmp(s->name, "server.listen") == 0 && *s->value) listen = true;
            if (strcmp(s->name, "jobs.workers") == 0) r->workers = atoi(s->value);
        }
        CHECK(listen && complete && cfg->n_settings > 1,
              "config: %d settings with names and origins, server.listen set", cfg->n_settings);
        rtx_client_config_free(cfg);
    }
}

/* The Wait callback's record of the states it saw. */
struct seen {
    int calls;
    enum rtx_client_job_state states[16];
    char id[RTX_CLIENT_JOB_ID_MAX];
};

static void seen_cb(void *ctx, const struct rtx_client_job *job) {
    struct seen *s = ctx;
    if (s->calls < 16) s->states[s->calls] = job->state;
    snprintf(s->id, sizeof s->id, "%s", job->id);
    s->calls++;
}

static bool floats_equal(const struct rtx_client_tensor *t, const float *want, int n) {
    if (t->dtype != RTX_CLIENT_DTYPE_F32 || t->bytes != sizeof(float) * (size_t)n) return false;
    const float *got = t->data;
    for (int i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f) return false;
    return true;
}

static void check_gemm(struct run *r) {
    struct rtx_client_err err;
    struct rtx_client_graph *g = gemm_graph();
    if (!g) return;
    struct rtx_client_tensor x = gemm_input();
    const struct rtx_client_label labels[] = {
        {"suite", "client-check"}, {"run", r->id}, {"kind", "gemm"}};
    char key[64];
    snprintf(key, sizeof key, "client-check-%s-gemm", r->id);
    struct rtx_client_submit_options opt = {.labels = labels,
                                            .n_labels = 3,
                                            .idempotency_key = key,
                                            .restart_policy = RTX_CLIENT_RESTART_RERUN};
    char id[RTX_CLIENT_JOB_ID_MAX];
    bool dedup = true;
    int rc = rtx_client_submit(r->c, g, &x, 1, &opt, id, &dedup, &err);
    CHECK_OK(rc, err, "Submit gemm+relu");
    if (rc < 0) {
        rtx_client_graph_free(g);
        return;
    }
    snprintf(r->gemm_job, sizeof r->gemm_job, "%s", id);
    CHECK(!dedup && strlen(id) > 0, "Submit: new job %s", id);

    struct seen seen = {0};
    struct rtx_client_job *job = NULL;
    rc = rtx_client_wait_job(r->c, id, 60000, seen_cb, &seen, &job, &err);
    CHECK_OK(rc, err, "Wait until the job ends");
    if (rc == 0) {
        CHECK(job->state == RTX_CLIENT_JOB_SUCCEEDED, "the job succeeded (%s: %s)",
              rtx_client_job_state_name(job->state), job->reason);
        CHECK(seen.calls >= 1 && seen.calls <= 16 && seen.states[seen.calls - 1] == job->state &&
                  strcmp(seen.id, id) == 0,
              "the Wait callback saw %d states, the last one final", seen.calls);
        bool labels_ok = false;
        for (int i = 0; i < job->n_labels; i++)
            if (strcmp(job->labels[i].key, "run") == 0 &&
                strcmp(job->labels[i].value, r->id) == 0)
                labels_ok = true;
        CHECK(strcmp(job->id, id) == 0 && strcmp(job->graph_name, "client_check_gemm") == 0 &&
                  labels_ok && *job->lane && strcmp(job->idempotency_key, key) == 0 &&
                  job->restart_policy == RTX_CLIENT_RESTART_RERUN && job->attempts == 1,
              "the job's id, graph name, labels, lane, key, policy and attempts");
        CHECK(job->created_unix_ms > 0 && job->started_unix_ms >= job->created_unix_ms &&
                  job->finished_unix_ms >= job->started_unix_ms && job->run_ms >= 0,
              "the job's times are ordered");
        bool outs = job->n_outputs == 2 && job->outputs_available &&
                    strcmp(job->outputs[0].name, "y") == 0 &&
                    strcmp(job->outputs[1].name, "h") == 0;
        for (int i = 0; outs && i < 2; i++)
            outs = job->outputs[i].dtype == RTX_CLIENT_DTYPE_F32 && job->outputs[i].ndim == 2 &&
                   job->outputs[i].dims[0] == 2 && job->outputs[i].dims[1] == 2 &&
                   job->outputs[i].bytes == 16 && strlen(job->outputs[i].sha256) == 64;
        CHECK(outs, "the job describes outputs y and h, f32 [2,2]");
        rtx_client_job_free(job);
    }

    struct rtx_client_tensor *ts = NULL;
    int n = 0;
    rc = rtx_client_get_outputs(r->c, id, &ts, &n, &err);
    CHECK_OK(rc, err, "GetOutputs");
    if (rc == 0) {
        bool shape = n == 2 && ts[0].owned && strcmp(ts[0].name, "y") == 0 &&
                     strcmp(ts[1].name, "h") == 0 && ts[0].ndim == 2 && ts[0].dims[0] == 2 &&
                     ts[0].dims[1] == 2;
        CHECK(shape, "GetOutputs returns y and h in order, [2,2]");
        CHECK(shape && floats_equal(&ts[0], gemm_y, 4) && floats_equal(&ts[1], gemm_h, 4),
              "relu(0.5 x.w + b) equals the hand computation [[2.5,0],[2,0]]");
        rtx_client_tensors_free(ts, n);
    }

    char id2[RTX_CLIENT_JOB_ID_MAX];
    rc = rtx_client_submit(r->c, g, &x, 1, &opt, id2, &dedup, &err);
    CHECK(rc == 0 && dedup && strcmp(id, id2) == 0,
          "a second Submit with the idempotency key returns the first job (deduplicated)");

    rc = rtx_client_cancel_job(r->c, id, &job, &err);
    CHECK(rc == 0 && job->state == RTX_CLIENT_JOB_SUCCEEDED,
          "Cancel of a succeeded job leaves it succeeded");
    if (rc == 0) rtx_client_job_free(job);

    char rid[64];
    snprintf(rid, sizeof rid, "client-check-%s", r->id);
    rc = rtx_client_set_request_id(r->c, rid, &err);
    int rc2 = rtx_client_get_job(r->c, id, &job, &err);
    CHECK(rc == 0 && rc2 == 0 && strcmp(rtx_client_last_request_id(r->c), rid) == 0,
          "a request id set by the caller is used for the next call");
    if (rc2 == 0) rtx_client_job_free(job);
    rc2 = rtx_client_get_job(r->c, id, &job, &err);
    CHECK(rc2 == 0 && strncmp(rtx_client_last_request_id(r->c), "rtxc-", 5) == 0,
          "later calls get generated request ids (%s)", rtx_client_last_request_id(r->c));
    if (rc2 == 0) rtx_client_job_free(job);
    rc = rtx_client_set_request_id(r->c, "bad\nid", &err);
    CHECK(rc == RTX_CLIENT_EINVAL, "set_request_id rejects a non-printable id");

    rc = rtx_client_wait_job(r->c, id, 0, NULL, NULL, &job, &err);
    CHECK(rc == 0 && job->state == RTX_CLIENT_JOB_SUCCEEDED,
          "Wait on a finished job returns at once");
    if (rc == 0) rtx_client_job_free(job);
    rtx_client_graph_free(g);
}

static void check_cancel(struct run *r) {
    struct rtx_client_err err;
    struct rtx_client_graph *lg = long_graph(60), *g = gemm_graph();
    if (!lg || !g) {
        rtx_client_graph_free(lg);
        rtx_client_graph_free(g);
        return;
    }
    struct rtx_client_tensor lx = long_input(), x = gemm_input();
    char a[RTX_CLIENT_JOB_ID_MAX], b[RTX_CLIENT_JOB_ID_MAX] = "", e[RTX_CLIENT_JOB_ID_MAX] = "";
    int rc = submit(r, lg, &lx, 1, "long", 0, a, &err);
    CHECK_OK(rc, err, "Submit a long job");
    if (rc < 0) goto out;
    enum rtx_client_job_state s = poll_state(r, a, RTX_CLIENT_JOB_RUNNING, 30000);
    CHECK(s == RTX_CLIENT_JOB_RUNNING, "the long job runs (%s)", rtx_client_job_state_name(s));

    struct rtx_client_job *job = NULL;
    int64_t t0 = now_ms();
    rc = rtx_client_wait_job(r->c, a, 50, NULL, NULL, &job, &err);
    int64_t waited = now_ms() - t0;
    CHECK(rc == RTX_CLIENT_ETIMEDOUT && err.grpc_status == 4 && !job && waited < 5000,
          "Wait with a 50 ms timeout on a running job: ETIMEDOUT after %" PRId64 " ms (%s)",
          waited, err.msg);

    bool one_worker = r->workers == 1;
    rc = submit(r, g, &x, 1, "queued", 0, b, &err);
    CHECK_OK(rc, err, "Submit a job behind the long one");
    int rc_e = submit(r, g, &x, 1, "expires", now_ms() + 150, e, &err);
    CHECK_OK(rc_e, err, "Submit a job with a deadline 150 ms away");
    if (rc == 0) {
        rc = rtx_client_cancel_job(r->c, b, &job, &err);
        CHECK_OK(rc, err, "Cancel the queued job");
        if (rc == 0 && one_worker)
            CHECK(job->state == RTX_CLIENT_JOB_CANCELLED,
                  "a queued job is cancelled at once (%s)",
                  rtx_client_job_state_name(job->state));
        rtx_client_job_free(job);
        job = NULL;
    }
    sleep_ms(400); /* past the deadline of e, with the long job still running */

    rc = rtx_client_cancel_job(r->c, a, &job, &err);
    CHECK(rc == 0 && (job->state == RTX_CLIENT_JOB_RUNNING ||
                      job->state == RTX_CLIENT_JOB_CANCELLED),
          "Cancel the running long job (%s)", rc == 0 ? rtx_client_job_state_name(job->state)
                                                      : err.msg);
    rtx_client_job_free(job);
    job = NULL;
    rc = rtx_client_wait_job(r->c, a, 60000, NULL, NULL, &job, &err);
    CHECK(rc == 0 && job->state == RTX_CLIENT_JOB_CANCELLED && job->finished_unix_ms > 0,
          "the long job ends cancelled (%s)",
          rc == 0 ? rtx_client_job_state_name(job->state) : err.msg);
    rtx_client_job_free(job);
    job = NULL;

    struct rtx_client_tensor *ts = NULL;
    int n = -1;
    rc = rtx_client_get_outputs(r->c, a, &ts, &n, &err);
    CHECK(rc < 0 && err.grpc_status > 0 && !ts && n == 0,
          "GetOutputs of a cancelled job is refused (%s, gRPC status %d: %s)",
          rtx_client_errname(rc), err.grpc_status, err.msg);

    if (*b) {
        rc = rtx_client_wait_job(r->c, b, 60000, NULL, NULL, &job, &err);
        CHECK(rc == 0 && (job->state == RTX_CLIENT_JOB_CANCELLED ||
                          (!one_worker && job->state == RTX_CLIENT_JOB_SUCCEEDED)),
              "the job cancelled while queued stays cancelled (%s)",
              rc == 0 ? rtx_client_job_state_name(job->state) : err.msg);
        rtx_client_job_free(job);
        job = NULL;
    }
    if (*e) {
        rc = rtx_client_wait_job(r->c, e, 60000, NULL, NULL, &job, &err);
        if (one_worker)
            CHECK(rc == 0 && job->state == RTX_CLIENT_JOB_EXPIRED,
                  "a job whose deadline passed while queued expires (%s)",
                  rc == 0 ? rtx_client_job_state_name(job->state) : err.msg);
        else
            CHECK(rc == 0 && rtx_client_job_state_is_terminal(job->state),
                  "the job with a deadline ends (%s; %d workers, so it may have run)",
                  rc == 0 ? rtx_client_job_state_name(job->state) : err.msg, r->workers);
        rtx_client_job_free(job);
    }
out:
    rtx_client_graph_free(lg);
    rtx_client_graph_free(g);
}

/* Whether id is among the jobs of a list. */
static bool listed(const struct rtx_client_job_list *l, const char *id) {
    for (int i = 0; l && i < l->n_jobs; i++)
        if (strcmp(l->jobs[i].id, id) == 0) return true;
    return false;
}

static void check_list(struct run *r) {
    struct rtx_client_err err;
    struct rtx_client_graph *g = gemm_graph();
    if (!g) return;
    struct rtx_client_tensor x = gemm_input();
    char ids[3][RTX_CLIENT_JOB_ID_MAX];
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        rc = submit(r, g, &x, 1, "page", 0, ids[i], &err);
        struct rtx_client_job *job = NULL;
        if (rc == 0) rc = rtx_client_wait_job(r->c, ids[i], 60000, NULL, NULL, &job, &err);
        rtx_client_job_free(job);
        sleep_ms(3); /* distinct creation times */
    }
    rtx_client_graph_free(g);
    CHECK_OK(rc, err, "Submit and wait for three jobs labelled kind=page");
    if (rc < 0) return;

    const struct rtx_client_label page_labels[] = {{"run", r->id}, {"kind", "page"}};
    struct rtx_client_list_filter f = {.labels = page_labels, .n_labels = 2, .page_size = 2};
    struct rtx_client_job_list *p1 = NULL, *p2 = NULL;
    rc = rtx_client_list_jobs(r->c, &f, NULL, &p1, &err);
    CHECK(rc == 0 && p1->n_jobs == 2 && *p1->next_page_token,
          "List with labels, page size 2: a full first page and a next page token%s%s",
          rc == 0 ? "" : ": ", rc == 0 ? "" : err.msg);
    if (rc == 0 && *p1->next_page_token) {
        rc = rtx_client_list_jobs(r->c, &f, p1->next_page_token, &p2, &err);
        CHECK(rc == 0 && p2->n_jobs == 1 && !*p2->next_page_token,
              "List: the second page holds the last job and no token%s%s",
              rc == 0 ? "" : ": ", rc == 0 ? "" : err.msg);
    }
    if (p1 && p2 && p1->n_jobs == 2 && p2->n_jobs == 1) {
        bool all = true;
        for (int i = 0; i < 3; i++)
            all = all && (listed(p1, ids[i]) || listed(p2, ids[i]));
        CHECK(all && strcmp(p1->jobs[0].id, ids[2]) == 0 && strcmp(p2->jobs[0].id, ids[0]) == 0,
              "the pages hold the three jobs, newest first");
        CHECK(p1->jobs[0].created_unix_ms >= p1->jobs[1].created_unix_ms &&
                  p1->jobs[1].created_unix_ms >= p2->jobs[0].created_unix_ms,
              "creation times do not increase down the pages");
    }
    rtx_client_job_list_free(p1);
    rtx_client_job_list_free(p2);

    const struct rtx_client_label run_label[] = {{"run", r->id}};
    const enum rtx_client_job_state succeeded[] = {RTX_CLIENT_JOB_SUCCEEDED};
    struct rtx_client_list_filter fs = {.labels = run_label, .n_labels = 1,
                                        .states = succeeded, .n_states = 1, .page_size = 1000};
    struct rtx_client_job_list *l = NULL;
    rc = rtx_client_list_jobs(r->c, &fs, "", &l, &err);
    CHECK_OK(rc, err, "List succeeded jobs of this run");
    if (rc == 0) {
        bool only = true;
        for (int i = 0; i < l->n_jobs; i++)
            only = only && l->jobs[i].state == RTX_CLIENT_JOB_SUCCEEDED;
        CHECK(only && listed(l, ids[0]) && listed(l, ids[1]) && listed(l, ids[2]) &&
                  (!*r->gemm_job || listed(l, r->gemm_job)),
              "the state filter returns only succeeded jobs, ours among them (%d)", l->n_jobs);
        rtx_client_job_list_free(l);
    }
    const enum rtx_client_job_state cancelled[] = {RTX_CLIENT_JOB_CANCELLED};
    fs.states = cancelled;
    rc = rtx_client_list_jobs(r->c, &fs, NULL, &l, &err);
    if (rc == 0) {
        bool only = l->n_jobs >= 1;
        for (int i = 0; i < l->n_jobs; i++)
            only = only && l->jobs[i].state == RTX_CLIENT_JOB_CANCELLED;
        CHECK(only, "the state filter returns the cancelled jobs of this run (%d)", l->n_jobs);
        rtx_client_job_list_free(l);
    } else {
        CHECK_OK(rc, err, "List cancelled jobs of this run");
    }
    struct rtx_client_list_filter ft = {.labels = run_label, .n_labels = 1,
                                        .created_after_unix_ms = now_ms() + 3600000};
    rc = rtx_client_list_jobs(r->c, &ft, NULL, &l, &err);
    CHECK(rc == 0 && l->n_jobs == 0 && !*l->next_page_token,
          "List created after an hour from now: empty");
    if (rc == 0) rtx_client_job_list_free(l);
    ft.created_after_unix_ms = 0;
    ft.created_before_unix_ms = 1;
    rc = rtx_client_list_jobs(r->c, &ft, NULL, &l, &err);
    CHECK(rc == 0 && l->n_jobs == 0, "List created before 1970-01-01T00:00:00.001Z: empty");
    if (rc == 0) rtx_client_job_list_free(l);
    rc = rtx_client_list_jobs(r->c, &f, "not-a-page-token", &l, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "List with a made-up page token");
    if (rc == 0) rtx_client_job_list_free(l);
    struct rtx_client_list_filter big = {.page_size = 5000};
    rc = rtx_client_list_jobs(r->c, &big, NULL, &l, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "List with a page size of 5000");
    if (rc == 0) rtx_client_job_list_free(l);
}

static void check_errors(struct run *r) {
    struct rtx_client_err err;
    static const char unknown[] = "j0000000000000fedcba9876543210";
    struct rtx_client_job *job = NULL;
    int rc = rtx_client_get_job(r->c, unknown, &job, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ENOTFOUND, "Get of an unknown job");
    CHECK(rc < 0 && err.grpc_status == 5 && *err.msg && !job,
          "the error carries gRPC status NOT_FOUND and the server's message");
    rc = rtx_client_wait_job(r->c, unknown, 10000, NULL, NULL, &job, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ENOTFOUND, "Wait on an unknown job");
    rc = rtx_client_cancel_job(r->c, unknown, &job, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ENOTFOUND, "Cancel of an unknown job");
    struct rtx_client_tensor *ts = NULL;
    int n = 0;
    rc = rtx_client_get_outputs(r->c, unknown, &ts, &n, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ENOTFOUND, "GetOutputs of an unknown job");
    rc = rtx_client_get_job(r->c, "", &job, &err);
    CHECK(rc == RTX_CLIENT_EINVAL && err.grpc_status == -1,
          "Get with an empty id fails in librtx (EINVAL, no call)");

    char id[RTX_CLIENT_JOB_ID_MAX];
    struct rtx_client_tensor x = gemm_input();
    int64_t dims[2] = {-1, 3};
    struct rtx_client_graph *g = NULL;
    rtx_client_graph_new("bad_op", &g, &err);
    const char *in[] = {"x"}, *out[] = {"y"};
    rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, dims, &err);
    rtx_client_graph_add_node(g, "no_such_op", "n0", in, 1, out, 1, &err);
    rtx_client_graph_add_output(g, "y", &err);
    rc = submit(r, g, &x, 1, "invalid", 0, id, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "Submit of a graph with an unknown op");
    CHECK(rc < 0 && err.grpc_status == 3 && strstr(err.msg, "no_such_op"),
          "the message names the op (%s)", err.msg);
    rtx_client_graph_free(g);

    rtx_client_graph_new("dangling", &g, &err);
    const char *in2[] = {"ghost"};
    rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, dims, &err);
    rtx_client_graph_add_node(g, "relu", "n0", in2, 1, out, 1, &err);
    rtx_client_graph_add_output(g, "y", &err);
    rc = submit(r, g, &x, 1, "invalid", 0, id, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "Submit of a graph reading a value nothing makes");
    rtx_client_graph_free(g);

    g = gemm_graph();
    if (g) {
        int32_t ints[6] = {1, 2, 3, 4, 5, 6};
        struct rtx_client_tensor xi = {.name = "x", .dtype = RTX_CLIENT_DTYPE_I32, .ndim = 2,
                                       .dims = {2, 3}, .data = ints, .bytes = sizeof ints};
        rc = submit(r, g, &xi, 1, "invalid", 0, id, &err);
        CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "Submit with an i32 input for an f32 one");
        rc = submit(r, g, NULL, 0, "invalid", 0, id, &err);
        CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "Submit without the graph's input");
        const struct rtx_client_submit_options opt = {.lane = "no-such-lane"};
        rc = rtx_client_submit(r->c, g, &x, 1, &opt, id, NULL, &err);
        CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "Submit to an unknown lane");
        struct rtx_client_tensor short_x = x;
        short_x.bytes -= 4;
        rc = submit(r, g, &short_x, 1, "invalid", 0, id, &err);
        CHECK(rc == RTX_CLIENT_EINVAL && err.grpc_status == -1,
              "Submit of a tensor whose data is short fails in librtx (%s)", err.msg);
        rtx_client_graph_free(g);
    }

    struct rtx_client *down = NULL;
    rc = rtx_client_connect("127.0.0.1:1", 5000, &down, &err);
    CHECK_OK(rc, err, "connect to a port nobody listens on (lazy: succeeds)");
    if (rc == 0) {
        struct rtx_client_status *st = NULL;
        rc = rtx_client_get_status(down, &st, &err);
        CHECK_CODE(rc, err, RTX_CLIENT_EUNAVAILABLE, "Status from an unreachable daemon");
        CHECK(rc < 0 && err.grpc_status == 14, "the error carries gRPC status UNAVAILABLE");
        rtx_client_close(down);
    }
    rc = rtx_client_connect("", 0, &down, &err);
    CHECK(rc == RTX_CLIENT_EINVAL && !down, "connect with an empty address: EINVAL");
}

/* Calls from several threads over one client. */
struct worker {
    struct run *r;
    int index;
    int failures;
    char msg[256];
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct rtx_client_err err;
    for (int i = 0; i < 25; i++) {
        char rid[64];
        snprintf(rid, sizeof rid, "client-check-thread-%d-%d", w->index, i);
        int rc = rtx_client_set_request_id(w->r->c, rid, &err);
        struct rtx_client_job *job = NULL;
        if (rc == 0 && *w->r->gemm_job) {
            rc = rtx_client_get_job(w->r->c, w->r->gemm_job, &job, &err);
            if (rc == 0 && strcmp(rtx_client_last_request_id(w->r->c), rid) != 0) {
                snprintf(err.msg, sizeof err.msg, "request id %s, expected %s",
                         rtx_client_last_request_id(w->r->c), rid);
                rc = -1;
            }
            rtx_client_job_free(job);
        }
        struct rtx_client_status *st = NULL;
        if (rc == 0) rc = rtx_client_get_status(w->r->c, &st, &err);
        rtx_client_status_free(st);
        struct rtx_client_list_filter f = {.page_size = 1};
        struct rtx_client_job_list *l = NULL;
        if (rc == 0) rc = rtx_client_list_jobs(w->r->c, &f, NULL, &l, &err);
        rtx_client_job_list_free(l);
        if (rc != 0) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "%.*s", (int)(sizeof w->msg) - 1, err.msg);
        }
    }
    return NULL;
}

static void check_threads(struct run *r) {
    enum { N = 4 };
    pthread_t th[N];
    struct worker w[N];
    int started = 0;
    for (int i = 0; i < N; i++) {
        w[i] = (struct worker){.r = r, .index = i};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) break;
        started++;
    }
    int failures = 0;
    const char *msg = "";
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
        if (w[i].failures) msg = w[i].msg;
    }
    CHECK(started == N && failures == 0,
          "%d threads x 25 rounds of Get, Status and List over one client, each with its own "
          "request ids (%d failed%s%s)", started, failures, *msg ? ": " : "", msg);
}

static void check_drain(struct run *r) {
    struct rtx_client_err err;
    struct rtx_client_drain_result d = {-1, -1};
    int rc = rtx_client_drain(r->c, 1000, &d, &err);
    CHECK(rc == 0 && d.running >= 0 && d.queued >= 0, "Drain (%d running, %d queued)%s%s",
          d.running, d.queued, rc ? ": " : "", rc ? err.msg : "");
}

/* ------------------------------------------------------------------------------------------
 * Text generation (--generate MODEL)
 * ---------------------------------------------------------------------------------------- */

struct chunks {
    char text[8192];
    size_t len;
    int n;
    int cancel_after; /* > 0: ask to cancel at this chunk */
};

static int collect(void *ctx, const char *text, size_t len) {
    struct chunks *k = ctx;
    if (k->len + len < sizeof k->text) {
        memcpy(k->text + k->len, text, len);
        k->len += len;
        k->text[k->len] = '\0';
    }
    k->n++;
    return k->cancel_after > 0 && k->n >= k->cancel_after;
}

/* Streams text from a generative model: the chunks add up to the result, greedy decoding
 * repeats, the usage and finish reason come, a callback and a flag cancel, and bad requests
 * get their codes. */
static void check_generate(struct run *r, const char *model) {
    struct rtx_client_err err;
    struct rtx_client_generate_options o = {.max_tokens = 20};
    struct chunks k = {.len = 0};
    struct rtx_client_generate_result a, b;
    int rc = rtx_client_generate(r->c, model, "The daemon", &o, collect, &k, &a, &err);
    if (CHECK_OK(rc, err, "generate streams text greedily")) {
        CHECK(a.len > 0 && a.len == strlen(a.text), "the result holds the text (%zu bytes)",
              a.len);
        CHECK(k.len == a.len && memcmp(k.text, a.text, a.len) == 0,
              "the streamed chunks add up to the text");
        CHECK(k.n == a.chunks && k.n >= 2, "one callback per chunk (%d chunks)", k.n);
        CHECK(strcmp(a.finish_reason, "length") == 0 || strcmp(a.finish_reason, "stop") == 0,
              "a finish reason is given (%s)", a.finish_reason);
        CHECK(a.completion_tokens >= 1 && a.completion_tokens <= 20 && a.prompt_tokens > 0,
              "the usage is given (%d prompt, %d completion tokens)", a.prompt_tokens,
              a.completion_tokens);
        CHECK(a.request_id[0] != '\0', "the request id is given");
        printf("# text (hex): "); /* for the caller to compare with another client's */
        for (size_t i = 0; i < a.len; i++)
            printf("%02x", (unsigned char)a.text[i]);
        printf("\n");
    }
    rc = rtx_client_generate(r->c, model, "The daemon", &o, NULL, NULL, &b, &err);
    if (CHECK_OK(rc, err, "generate without a callback"))
        CHECK(strcmp(a.text ? a.text : "", b.text) == 0, "greedy decoding repeats its text");
    rtx_client_generate_result_clear(&a);
    rtx_client_generate_result_clear(&b);

    o = (struct rtx_client_generate_options){.max_tokens = 400, .temperature = 1,
                                             .has_seed = true, .seed = 3};
    k = (struct chunks){.cancel_after = 2};
    rc = rtx_client_generate(r->c, model, "The daemon", &o, collect, &k, &a, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ECANCELLED, "a callback that returns nonzero cancels");
    CHECK(a.finish_reason[0] == '\0' && k.n == 2, "nothing comes after the cancel (%d chunks)",
          k.n);
    rtx_client_generate_result_clear(&a);

    volatile int flag = 1; /* raised before the call: looked at before every wait */
    o.cancel = &flag;
    rc = rtx_client_generate(r->c, model, "The daemon", &o, NULL, NULL, NULL, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ECANCELLED, "a raised cancel flag cancels");

    o = (struct rtx_client_generate_options){.temperature = 500};
    rc = rtx_client_generate(r->c, model, "The daemon", &o, NULL, NULL, NULL, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "a temperature out of range");
    CHECK(strstr(err.msg, "temperature") != NULL, "... named in the message: %s", err.msg);
    o = (struct rtx_client_generate_options){.stop = (const char *const[]){""}, .n_stop = 1};
    rc = rtx_client_generate(r->c, model, "The daemon", &o, NULL, NULL, NULL, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "an empty stop string");
    rc = rtx_client_generate(r->c, "no_such_model", "x", NULL, NULL, NULL, NULL, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_ENOTFOUND, "an unknown model");
    rc = rtx_client_generate(r->c, model, NULL, NULL, NULL, NULL, NULL, &err);
    CHECK_CODE(rc, err, RTX_CLIENT_EINVAL, "no prompt");
}

int main(int argc, char **argv) {
    struct run r = {.address = "127.0.0.1:8001"};
    bool drain = false;
    const char *gen_model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--drain") == 0) {
            drain = true;
        } else if (strcmp(argv[i], "--generate") == 0 && i + 1 < argc) {
            gen_model = argv[++i];
        } else if (argv[i][0] == '-') {
            bool help = strcmp(argv[i], "--help") == 0;
            fprintf(help ? stdout : stderr,
                    "usage: rtx-client-check [--drain] [HOST:PORT]\n"
                    "       rtx-client-check --generate MODEL [HOST:PORT]\n"
                    "Checks librtx end to end against a running rtxd (default "
                    "127.0.0.1:8001);\n--drain finally drains the daemon; --generate checks "
                    "text generation with\nMODEL only. Exit 0 when every check passed.\n");
            return help ? 0 : 2;
        } else {
            r.address = argv[i];
        }
    }
    if (gen_model) {
        struct rtx_client_err err;
        int rc = rtx_client_connect(r.address, 15000, &r.c, &err);
        if (CHECK_OK(rc, err, "connect")) {
            check_generate(&r, gen_model);
            rtx_client_close(r.c);
        }
        printf("%d passed, %d failed\n", n_passed, n_failed);
        return n_failed ? 1 : 0;
    }
    snprintf(r.id, sizeof r.id, "%lx-%lld", (long)getpid(), (long long)now_ms());
    printf("rtx-client-check: rtxd at %s, run %s\n", r.address, r.id);

    check_local();
    struct rtx_client_err err;
    int rc = rtx_client_connect(r.address, 15000, &r.c, &err);
    if (CHECK_OK(rc, err, "connect")) {
        check_admin(&r);
        check_gemm(&r);
        check_cancel(&r);
        check_list(&r);
        check_errors(&r);
        check_threads(&r);
        if (drain) check_drain(&r);
        rtx_client_close(r.c);
    }
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
