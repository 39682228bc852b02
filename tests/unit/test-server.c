/*
 * test-server.c - the RPC layer: the error -> gRPC status table, request ids, handler input
 * checks, and the real server over loopback with a gRPC core client: malformed requests,
 * unknown methods, x-request-id echo, draining, a taken port, and one job run end to end
 * (Submit, the Wait stream, GetOutputs) against a real store and job manager.
 */
#include <check.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/server.h"
#include "rtx/v1/admin.pb-c.h"
#include "rtx/v1/jobs.pb-c.h"

/* ------------------------------------------------------------------------------------------
 * Status mapping and request ids
 * ---------------------------------------------------------------------------------------- */

START_TEST(status_maps_every_code) {
    static const struct {
        int code;
        grpc_status_code want;
    } cases[] = {
        {RTX_OK, GRPC_STATUS_OK},
        {RTX_EINVAL, GRPC_STATUS_INVALID_ARGUMENT},
        {RTX_EGRAPH, GRPC_STATUS_INVALID_ARGUMENT},
        {RTX_EFORMAT, GRPC_STATUS_INVALID_ARGUMENT},
        {RTX_ENOTFOUND, GRPC_STATUS_NOT_FOUND},
        {RTX_ELIMIT, GRPC_STATUS_RESOURCE_EXHAUSTED},
        {RTX_EUNAVAILABLE, GRPC_STATUS_UNAVAILABLE},
        {RTX_ECANCELED, GRPC_STATUS_CANCELLED},
        {RTX_EEXPIRED, GRPC_STATUS_DEADLINE_EXCEEDED},
        {RTX_EUNSUPPORTED, GRPC_STATUS_UNIMPLEMENTED},
        {RTX_EIO, GRPC_STATUS_INTERNAL},
        {RTX_ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED},
        {RTX_EINTERNAL, GRPC_STATUS_INTERNAL},
        {RTX_EGPU, GRPC_STATUS_INTERNAL},
        {-2 /* -ENOENT */, GRPC_STATUS_INTERNAL},
        {12345, GRPC_STATUS_INTERNAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(rtx_server_status_from_err(cases[i].code) == cases[i].want, "code %d (%s)",
                      cases[i].code, rtx_strerror(cases[i].code));
    /* every RTX_E* code maps to an error status */
    for (int c = RTX__ERRNO_FIRST + 1; c < RTX__ERRNO_END; c++)
        ck_assert_int_ne(rtx_server_status_from_err(c), GRPC_STATUS_OK);
    ck_assert_str_eq(rtx_server_status_name(GRPC_STATUS_FAILED_PRECONDITION),
                     "FAILED_PRECONDITION");
    ck_assert_str_eq(rtx_server_status_name((grpc_status_code)99), "UNKNOWN");
}
END_TEST

START_TEST(reply_err_uses_the_message) {
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    struct rtx_err err;
    rtx_err_set(&err, RTX_ELIMIT, "node 3 'mm' (matmul): too big");
    rtx_server_reply_err(&rep, &err);
    ck_assert_int_eq(rep.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(rep.msg, "node 3 'mm' (matmul): too big");
    ck_assert_ptr_null(rep.data);
}
END_TEST

static bool all_hex(const char *s) {
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
    return true;
}

static int cmp_ids(const void *a, const void *b) {
    return strcmp(a, b);
}

START_TEST(request_ids_are_random_hex) {
    enum { N = 2000 };
    char(*ids)[RTX_SERVER_REQUEST_ID_LEN] = calloc(N, sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++) {
        rtx_server_request_id_new(ids[i]);
        ck_assert_uint_eq(strlen(ids[i]), RTX_SERVER_REQUEST_ID_LEN - 1);
        ck_assert(all_hex(ids[i]));
        ck_assert(rtx_server_request_id_valid(ids[i], strlen(ids[i])));
    }
    qsort(ids, N, sizeof *ids, cmp_ids);
    for (int i = 1; i < N; i++)
        ck_assert_str_ne(ids[i - 1], ids[i]);
    free(ids);
}
END_TEST

START_TEST(request_id_from_client_is_checked) {
    ck_assert(rtx_server_request_id_valid("smoke-1", 7));
    ck_assert(rtx_server_request_id_valid("a/b:c=d_e.f~", 12));
    ck_assert(!rtx_server_request_id_valid("", 0));
    ck_assert(!rtx_server_request_id_valid("a b", 3));
    ck_assert(!rtx_server_request_id_valid("a\tb", 3));
    ck_assert(!rtx_server_request_id_valid("a\x01", 2));
    ck_assert(!rtx_server_request_id_valid("caf\xc3\xa9", 5));
    char big[RTX_SERVER_REQUEST_ID_MAX + 1];
    memset(big, 'x', sizeof big);
    ck_assert(rtx_server_request_id_valid(big, RTX_SERVER_REQUEST_ID_MAX));
    ck_assert(!rtx_server_request_id_valid(big, RTX_SERVER_REQUEST_ID_MAX + 1));
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Handlers called directly (no store or job manager: the checks come first)
 * ---------------------------------------------------------------------------------------- */

static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0x0f};

static void reply_clear(struct rtx_server_reply *rep) {
    rtx_free(rep->data);
    *rep = (struct rtx_server_reply){.code = GRPC_STATUS_OK};
}

START_TEST(handlers_reject_malformed_requests) {
    struct rtx_daemon d;
    ck_assert_int_eq(rtx__daemon_init(&d, NULL), 0);
    static const struct {
        rtx_server_unary_fn fn;
        const char *msg;
    } cases[] = {
        {rtx__daemon_jobs_get, "malformed rtx.v1.GetJobRequest"},
        {rtx__daemon_jobs_cancel, "malformed rtx.v1.CancelJobRequest"},
        {rtx__daemon_jobs_list, "malformed rtx.v1.ListJobsRequest"},
        {rtx__daemon_jobs_get_outputs, "malformed rtx.v1.GetOutputsRequest"},
        {rtx__daemon_admin_status, "malformed rtx.v1.StatusRequest"},
        {rtx__daemon_admin_devices, "malformed rtx.v1.DevicesRequest"},
        {rtx__daemon_admin_health, "malformed rtx.v1.HealthRequest"},
        {rtx__daemon_admin_config, "malformed rtx.v1.ConfigRequest"},
        {rtx__daemon_admin_drain, "malformed rtx.v1.DrainRequest"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
        cases[i].fn(&d, garbage, sizeof garbage, &rep);
        ck_assert_int_eq(rep.code, GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_str_eq(rep.msg, cases[i].msg);
        ck_assert_ptr_null(rep.data);
    }
    rtx__daemon_close(&d);
}
END_TEST

START_TEST(handlers_check_fields_first) {
    struct rtx_daemon d;
    ck_assert_int_eq(rtx__daemon_init(&d, NULL), 0);
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    uint8_t buf[64];

    /* an empty GetJobRequest: job_id is required */
    rtx__daemon_jobs_get(&d, buf, 0, &rep);
    ck_assert_int_eq(rep.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(rep.msg, "job_id is required");
    reply_clear(&rep);

    Rtx__V1__ListJobsRequest lr = RTX__V1__LIST_JOBS_REQUEST__INIT;
    lr.page_size = 1001;
    size_t n = rtx__v1__list_jobs_request__pack(&lr, buf);
    rtx__daemon_jobs_list(&d, buf, n, &rep);
    ck_assert_int_eq(rep.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(rep.msg, "page_size 1001"));
    reply_clear(&rep);

    lr.page_size = 0;
    Rtx__V1__JobState bad_state = (Rtx__V1__JobState)9;
    lr.n_states = 1;
    lr.states = &bad_state;
    n = rtx__v1__list_jobs_request__pack(&lr, buf);
    rtx__daemon_jobs_list(&d, buf, n, &rep);
    ck_assert_int_eq(rep.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(rep.msg, "invalid job state 9"));
    reply_clear(&rep);

    Rtx__V1__DrainRequest dr = RTX__V1__DRAIN_REQUEST__INIT;
    dr.grace_ms = -1;
    n = rtx__v1__drain_request__pack(&dr, buf);
    rtx__daemon_admin_drain(&d, buf, n, &rep);
    ck_assert_int_eq(rep.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert(!atomic_load(&d.draining));
    reply_clear(&rep);

    /* Submit refuses while draining without touching the job manager */
    atomic_store(&d.draining, true);
    rtx__daemon_jobs_submit(&d, buf, 0, &rep);
    ck_assert_int_eq(rep.code, GRPC_STATUS_UNAVAILABLE);
    ck_assert_str_eq(rep.msg, "draining");
    reply_clear(&rep);
    rtx__daemon_close(&d);
}
END_TEST

START_TEST(drain_begins_once) {
    struct rtx_daemon d;
    ck_assert_int_eq(rtx__daemon_init(&d, NULL), 0);
    int r = -1, q = -1, g = -1;
    ck_assert(rtx__daemon_drain_begin(&d, 1500, &r, &q, &g));
    ck_assert(atomic_load(&d.draining));
    ck_assert_int_eq(g, 1500);
    ck_assert(!rtx__daemon_drain_begin(&d, 99, &r, &q, &g));
    ck_assert_int_eq(g, 1500);
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(q, 0);
    rtx__daemon_close(&d);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * A gRPC core client
 * ---------------------------------------------------------------------------------------- */

#define MAX_MSGS 8

struct rpc {
    grpc_status_code code;
    char details[256];
    char request_id[RTX_SERVER_REQUEST_ID_MAX + 1]; /* echoed x-request-id */
    int n_msgs;
    uint8_t *msgs[MAX_MSGS]; /* received messages (free()) */
    size_t lens[MAX_MSGS];
};

static void rpc_clear(struct rpc *r) {
    for (int i = 0; i < r->n_msgs; i++)
        free(r->msgs[i]);
    memset(r, 0, sizeof *r);
}

static void run_batch(grpc_call *call, grpc_completion_queue *cq, grpc_op *ops, size_t n) {
    static int tag;
    ck_assert_int_eq(grpc_call_start_batch(call, ops, n, &tag, NULL), GRPC_CALL_OK);
    grpc_event ev =
        grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
}

/* Calls `method` with one request message and reads every reply message and the status. */
static void rpc_call(grpc_channel *ch, const char *method, const void *req, size_t len,
                     const char *request_id, struct rpc *out) {
    memset(out, 0, sizeof *out);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice path = grpc_slice_from_copied_string(method);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(30, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path, NULL,
                                               deadline, NULL);
    ck_assert_ptr_nonnull(call);

    grpc_metadata md;
    md.key = grpc_slice_from_static_string("x-request-id");
    md.value = grpc_slice_from_copied_string(request_id ? request_id : "");
    grpc_slice body = grpc_slice_from_copied_buffer(req, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&body, 1);
    grpc_metadata_array init_md, trailing;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trailing);

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = request_id ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    run_batch(call, cq, ops, 4);

    for (;;) {
        grpc_byte_buffer *msg = NULL;
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &msg;
        run_batch(call, cq, ops, 1);
        if (!msg) break;
        grpc_byte_buffer_reader rd;
        ck_assert(grpc_byte_buffer_reader_init(&rd, msg));
        grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        ck_assert_int_lt(out->n_msgs, MAX_MSGS);
        size_t n = GRPC_SLICE_LENGTH(s);
        out->msgs[out->n_msgs] = malloc(n ? n : 1);
        memcpy(out->msgs[out->n_msgs], GRPC_SLICE_START_PTR(s), n);
        out->lens[out->n_msgs++] = n;
        grpc_slice_unref(s);
        grpc_byte_buffer_destroy(msg);
    }

    grpc_slice details;
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[0].data.recv_status_on_client.status = &out->code;
    ops[0].data.recv_status_on_client.status_details = &details;
    run_batch(call, cq, ops, 1);
    snprintf(out->details, sizeof out->details, "%.*s", (int)GRPC_SLICE_LENGTH(details),
             (const char *)GRPC_SLICE_START_PTR(details));
    for (size_t i = 0; i < init_md.count; i++)
        if (grpc_slice_str_cmp(init_md.metadata[i].key, "x-request-id") == 0)
            snprintf(out->request_id, sizeof out->request_id, "%.*s",
                     (int)GRPC_SLICE_LENGTH(init_md.metadata[i].value),
                     (const char *)GRPC_SLICE_START_PTR(init_md.metadata[i].value));

    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trailing);
    grpc_byte_buffer_destroy(bb);
    grpc_slice_unref(body);
    grpc_slice_unref(md.value);
    grpc_slice_unref(path);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
}

struct fixture {
    struct rtx_daemon d;
    struct rtx_server *srv;
    grpc_channel *ch;
    int port;
};

static void fixture_start(struct fixture *f, struct rtx_store *store, struct rtx_jobs *jobs) {
    memset(f, 0, sizeof *f);
    ck_assert_int_eq(rtx__daemon_init(&f->d, NULL), 0);
    f->d.store = store;
    f->d.jobs = jobs;
    struct rtx_server_options opt = {
        .listen = "127.0.0.1:0",
        .cq_threads = 2,
        .max_message_bytes = 1 << 20,
        .daemon = &f->d,
    };
    struct rtx_err err = {0};
    ck_assert_msg(rtx_server_start(&opt, &f->srv, &f->port, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(f->port, 0);
    grpc_init();
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", f->port);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    f->ch = grpc_channel_create(target, creds, NULL);
    grpc_channel_credentials_release(creds);
}

static void fixture_stop(struct fixture *f) {
    grpc_channel_destroy(f->ch);
    grpc_shutdown();
    rtx_server_shutdown(f->srv, 2000);
    rtx_server_free(f->srv);
    rtx__daemon_close(&f->d);
}

START_TEST(server_answers_bad_calls) {
    struct fixture f;
    fixture_start(&f, NULL, NULL);
    struct rpc r;

    rpc_call(f.ch, "/rtx.v1.Jobs/Get", garbage, sizeof garbage, "test-req-1", &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(r.details, "malformed rtx.v1.GetJobRequest");
    ck_assert_str_eq(r.request_id, "test-req-1");
    ck_assert_int_eq(r.n_msgs, 0);
    rpc_clear(&r);

    /* no usable id from the client: the server makes one */
    rpc_call(f.ch, "/rtx.v1.Jobs/Get", garbage, sizeof garbage, "bad id", &r);
    ck_assert_uint_eq(strlen(r.request_id), RTX_SERVER_REQUEST_ID_LEN - 1);
    ck_assert(all_hex(r.request_id));
    rpc_clear(&r);

    rpc_call(f.ch, "/rtx.v1.Jobs/Wait", "", 0, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(r.details, "job_id is required");
    ck_assert_uint_eq(strlen(r.request_id), RTX_SERVER_REQUEST_ID_LEN - 1);
    rpc_clear(&r);

    rpc_call(f.ch, "/rtx.v1.Jobs/Nope", "", 0, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_UNIMPLEMENTED);
    ck_assert_str_eq(r.details, "unknown method /rtx.v1.Jobs/Nope");
    rpc_clear(&r);

    atomic_store(&f.d.draining, true);
    rpc_call(f.ch, "/rtx.v1.Jobs/Submit", "", 0, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_UNAVAILABLE);
    ck_assert_str_eq(r.details, "draining");
    rpc_clear(&r);

    /* above server.max_message_bytes */
    size_t big = (1 << 20) + 100;
    uint8_t *p = calloc(1, big);
    rpc_call(f.ch, "/rtx.v1.Jobs/Submit", p, big, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    rpc_clear(&r);
    free(p);
    fixture_stop(&f);
}
END_TEST

START_TEST(server_reports_a_taken_port) {
    struct fixture f;
    fixture_start(&f, NULL, NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", f.port);
    struct rtx_daemon d2;
    ck_assert_int_eq(rtx__daemon_init(&d2, NULL), 0);
    struct rtx_server_options opt = {
        .listen = addr,
        .cq_threads = 1,
        .max_message_bytes = 4096,
        .daemon = &d2,
    };
    struct rtx_server *s2 = NULL;
    struct rtx_err err = {0};
    ck_assert_int_ne(rtx_server_start(&opt, &s2, NULL, &err), 0);
    ck_assert_ptr_null(s2);
    ck_assert_ptr_nonnull(strstr(err.msg, addr));
    rtx__daemon_close(&d2);
    fixture_stop(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * One job end to end: store + job manager + server
 * ---------------------------------------------------------------------------------------- */

/* A packed SubmitRequest running relu on a 4-element f32 input. */
static uint8_t *submit_request(size_t *len) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    int64_t dims[1] = {4};
    const char *in[1] = {"x"}, *out[1] = {"y"};
    ck_assert_int_eq(rtx_graph_new("relu4", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 1, dims, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "relu", "r", in, 1, out, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    void *gbytes = NULL;
    size_t glen = 0;
    ck_assert_int_eq(rtx_graph_encode(g, &gbytes, &glen, &err), 0);
    rtx_graph_free(g);

    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    req.graph = rtx__v1__graph__unpack(NULL, glen, gbytes);
    ck_assert_ptr_nonnull(req.graph);
    rtx_free(gbytes);
    float x[4] = {-1.0f, 2.0f, -3.0f, 4.0f};
    Rtx__V1__Tensor t = RTX__V1__TENSOR__INIT, *tp = &t;
    t.name = "x";
    t.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    t.n_dims = 1;
    t.dims = dims;
    t.data.len = sizeof x;
    t.data.data = (uint8_t *)x;
    req.n_inputs = 1;
    req.inputs = &tp;
    *len = rtx__v1__submit_request__get_packed_size(&req);
    uint8_t *buf = malloc(*len);
    rtx__v1__submit_request__pack(&req, buf);
    rtx__v1__graph__free_unpacked(req.graph, NULL);
    return buf;
}

START_TEST(server_runs_a_job_end_to_end) {
    char dir[] = "/tmp/rtx-test-server-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/rtxd.db", dir);
    struct rtx_store_options so = {.path = path};
    struct rtx_store *store = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &store, &err) == 0, "%s", err.msg);
    const char *lanes[] = {"batch"};
    struct rtx_devices_options dopt = {.cpu_threads = 1};
    struct rtx_devices *devices = NULL;
    ck_assert_msg(rtx_devices_new(&dopt, &devices, &err) == 0, "%s", err.msg);
    struct rtx_jobs_options jo = {
        .devices = devices,
        .store = store,
        .workers = 1,
        .cpu_threads = 1,
        .limits = rtx_limits_default(),
        .max_queued = 100,
        .default_restart_policy = RTX_RESTART_RERUN,
        .n_lanes = 1,
        .lanes = lanes,
        .default_lane = "batch",
    };
    struct rtx_jobs *jobs = NULL;
    ck_assert_msg(rtx_jobs_start(&jo, &jobs, &err) == 0, "%s", err.msg);
    struct fixture f;
    fixture_start(&f, store, jobs);
    struct rpc r;

    size_t len = 0;
    uint8_t *req = submit_request(&len);
    rpc_call(f.ch, "/rtx.v1.Jobs/Submit", req, len, "e2e", &r);
    free(req);
    ck_assert_msg(r.code == GRPC_STATUS_OK, "%s", r.details);
    ck_assert_int_eq(r.n_msgs, 1);
    Rtx__V1__SubmitResponse *sr = rtx__v1__submit_response__unpack(NULL, r.lens[0], r.msgs[0]);
    ck_assert_ptr_nonnull(sr);
    char id[RTX_JOB_ID_LEN];
    snprintf(id, sizeof id, "%s", sr->job_id);
    rtx__v1__submit_response__free_unpacked(sr, NULL);
    rpc_clear(&r);

    /* Wait streams until the terminal state, then OK */
    uint8_t buf[64];
    Rtx__V1__WaitJobRequest wr = RTX__V1__WAIT_JOB_REQUEST__INIT;
    wr.job_id = id;
    len = rtx__v1__wait_job_request__pack(&wr, buf);
    rpc_call(f.ch, "/rtx.v1.Jobs/Wait", buf, len, NULL, &r);
    ck_assert_msg(r.code == GRPC_STATUS_OK, "%s", r.details);
    ck_assert_int_ge(r.n_msgs, 1);
    Rtx__V1__Job *job = rtx__v1__job__unpack(NULL, r.lens[r.n_msgs - 1], r.msgs[r.n_msgs - 1]);
    ck_assert_ptr_nonnull(job);
    ck_assert_int_eq(job->state, RTX__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    ck_assert_str_eq(job->id, id);
    ck_assert_int_eq(job->n_outputs, 1);
    ck_assert(job->outputs_available);
    rtx__v1__job__free_unpacked(job, NULL);
    rpc_clear(&r);

    Rtx__V1__GetOutputsRequest gr = RTX__V1__GET_OUTPUTS_REQUEST__INIT;
    gr.job_id = id;
    len = rtx__v1__get_outputs_request__pack(&gr, buf);
    rpc_call(f.ch, "/rtx.v1.Jobs/GetOutputs", buf, len, NULL, &r);
    ck_assert_msg(r.code == GRPC_STATUS_OK, "%s", r.details);
    Rtx__V1__GetOutputsResponse *go =
        rtx__v1__get_outputs_response__unpack(NULL, r.lens[0], r.msgs[0]);
    ck_assert_ptr_nonnull(go);
    ck_assert_int_eq(go->n_outputs, 1);
    ck_assert_str_eq(go->outputs[0]->name, "y");
    ck_assert_uint_eq(go->outputs[0]->data.len, 4 * sizeof(float));
    float y[4];
    memcpy(y, go->outputs[0]->data.data, sizeof y);
    ck_assert(y[0] == 0.0f && y[1] == 2.0f && y[2] == 0.0f && y[3] == 4.0f);
    rtx__v1__get_outputs_response__free_unpacked(go, NULL);
    rpc_clear(&r);

    /* Wait on a finished job: its state, then OK; an unknown job: NOT_FOUND */
    len = rtx__v1__wait_job_request__pack(&wr, buf);
    rpc_call(f.ch, "/rtx.v1.Jobs/Wait", buf, len, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_OK);
    ck_assert_int_eq(r.n_msgs, 1);
    rpc_clear(&r);
    wr.job_id = "j000000000000nosuchjob";
    len = rtx__v1__wait_job_request__pack(&wr, buf);
    rpc_call(f.ch, "/rtx.v1.Jobs/Wait", buf, len, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_NOT_FOUND);
    rpc_clear(&r);

    rpc_call(f.ch, "/rtx.v1.Admin/Health", "", 0, NULL, &r);
    ck_assert_int_eq(r.code, GRPC_STATUS_OK);
    Rtx__V1__HealthResponse *h = rtx__v1__health_response__unpack(NULL, r.lens[0], r.msgs[0]);
    ck_assert_int_eq(h->status, RTX__V1__HEALTH_RESPONSE__SERVING_STATUS__SERVING);
    rtx__v1__health_response__free_unpacked(h, NULL);
    rpc_clear(&r);

    fixture_stop(&f);
    rtx_jobs_stop(jobs);
    rtx_devices_free(devices);
    rtx_store_close(store);
    unlink(path);
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", path);
    unlink(wal);
    rmdir(dir);
}
END_TEST

Suite *rtx_server_suite(void) {
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, status_maps_every_code);
    tcase_add_test(tc, reply_err_uses_the_message);
    tcase_add_test(tc, request_ids_are_random_hex);
    tcase_add_test(tc, request_id_from_client_is_checked);
    tcase_add_test(tc, handlers_reject_malformed_requests);
    tcase_add_test(tc, handlers_check_fields_first);
    tcase_add_test(tc, drain_begins_once);
    tcase_add_test(tc, server_answers_bad_calls);
    tcase_add_test(tc, server_reports_a_taken_port);
    tcase_add_test(tc, server_runs_a_job_end_to_end);
    suite_add_tcase(s, tc);
    return s;
}
