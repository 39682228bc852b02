/*
 * bench-jobs.c - what a job round trip through rtxd costs next to a bare gRPC echo.
 *
 * Usage: rtx-bench-jobs [--echo ADDR] [--rtxd ADDR] [--seconds S] [--warmup S] [--windows N]
 *                       [--concurrency N,N...] [--bytes N] [--report]
 *
 * For each concurrency (default 1 and 16) it measures
 *   echo: the unary "/bench.Echo/Echo" call of bench/echo-server.c with a small message
 *         (--bytes, default 64) - the cost of the gRPC stack alone;
 *   job:  rtxd's job round trip - Jobs.Submit of a one-node graph (add of two [4] f32 inputs),
 *         Jobs.Wait until the job is terminal, Jobs.GetOutputs (the outputs are checked);
 * and prints calls or jobs per second, p50 and p99 latency, the device and execution mode the
 * jobs ran with (from Jobs.Wait), and judges the ratio of rtxd's p50 to the echo p50 at the
 * same concurrency: target 2x or less. Exit status: 0 when every ratio meets the target (or
 * --report, or RTX_BENCH_REPORT=1 in the environment: report without judging); 1 when one
 * misses or a phase fails to run (errors, nothing measured, a server unreachable; also with
 * --report); 2 for bad arguments.
 *
 * DESIGN
 * One client thread drives one completion queue and one channel per server; N "slots" each
 * keep one call chain in flight (the next call starts from the completion of the last), so
 * the client adds little CPU next to the servers on a small machine. Every slot has at most
 * one batch outstanding; a job is a small state machine (submit, wait's first batch, further
 * stream reads, wait's status, outputs). Both workloads are measured the same way, in
 * windows: each window warms up for --warmup seconds (default 0.25), then counts the
 * operations that start and finish inside the next --seconds (default 1); afterwards no new
 * ones start and those in flight are drained. For each concurrency the windows alternate the
 * workloads (--windows per workload, default 5; echo job, job echo, echo job, ...), so drift
 * in the machine's load falls on both, and the figures are medians over the windows with the
 * spread (min .. max); the judged ratio is that of the medians, printed with the range of
 * the per-window pairs' ratios. Every call has a 10 s deadline, so a stuck server ends a
 * phase with errors instead of hanging the benchmark. Messages are protobuf-c
 * (build/gen/rtx/v1) over raw gRPC core, independent of the client library.
 */
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench-util.h"
#include "rtx/v1/jobs.pb-c.h"

#define MAX_SLOTS 256
#define MAX_PHASES 8     /* concurrencies */
#define MAX_WINDOWS 51   /* windows per workload and concurrency */
#define TARGET_RATIO 2.0 /* job p50 / echo p50, at most */
#define CALL_DEADLINE_S 10
#define DRAIN_LIMIT_S 15 /* longest wait for in-flight calls after a phase */

enum workload { WORK_ECHO, WORK_JOB };
static const char *const workload_names[] = {"echo", "job"};

enum slot_state {
    ST_IDLE,
    ST_ECHO,        /* echo call in flight */
    ST_SUBMIT,      /* Jobs.Submit in flight */
    ST_WAIT_OPEN,   /* Jobs.Wait: request sent, first message awaited */
    ST_WAIT_READ,   /* Jobs.Wait: next message awaited */
    ST_WAIT_STATUS, /* Jobs.Wait: stream ended, status awaited */
    ST_OUTPUTS,     /* Jobs.GetOutputs in flight */
};

struct stats {
    double *lat_us; /* latencies of operations inside the window, µs */
    size_t n, cap;
    long errors;
    char first_error[256];
};

struct bench;

struct slot {
    struct bench *b;
    enum slot_state state;
    double t_start; /* s, monotonic: start of the operation (echo / job) */
    grpc_call *call;
    grpc_byte_buffer *send;
    grpc_byte_buffer *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    double t_step;     /* s, monotonic: start of the current job step */
    double step_us[3]; /* this job's Submit, Wait, GetOutputs times */
    char job_id[128];
    int job_state; /* last Jobs.Wait state seen */
    char job_reason[128];
    char job_device[32];    /* last Jobs.Wait message's device: where the job ran */
    char job_exec_mode[16]; /* ... and how (plain, fixed, captured, replayed) */
};

struct bench {
    grpc_completion_queue *cq;
    grpc_channel *channel;
    enum workload work;
    double record_from, record_until; /* s, monotonic */
    struct stats st;
    struct stats steps[3]; /* job steps of the recorded jobs: Submit, Wait, GetOutputs */
    struct slot slots[MAX_SLOTS];
    int active; /* slots with a batch in flight */
    /* prebuilt requests */
    grpc_slice echo_payload;
    grpc_slice submit_payload;
    float expected[4]; /* the job's output */
    /* the route the recorded jobs took: device and exec_mode of the first; mixed when a later
     * one differed */
    char route_device[32], route_exec_mode[16];
    bool route_mixed;
};

static void stats_error(struct stats *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void stats_error(struct stats *st, const char *fmt, ...) {
    if (st->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->first_error, sizeof st->first_error, fmt, ap);
        va_end(ap);
    }
}

static void stats_add(struct stats *st, double us) {
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 4096;
        st->lat_us = realloc(st->lat_us, st->cap * sizeof *st->lat_us);
        if (!st->lat_us) {
            fprintf(stderr, "rtx-bench-jobs: out of memory\n");
            exit(1);
        }
    }
    st->lat_us[st->n++] = us;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stats_sort(struct stats *st) {
    if (st->n > 0) qsort(st->lat_us, st->n, sizeof *st->lat_us, cmp_double);
}

static double percentile(const struct stats *st, double p) {
    if (st->n == 0) return NAN;
    size_t i = (size_t)ceil(p / 100.0 * (double)st->n);
    if (i > 0) i--;
    if (i >= st->n) i = st->n - 1;
    return st->lat_us[i];
}

/* ------------------------------------------------------------------------------------------
 * Calls
 * ---------------------------------------------------------------------------------------- */

static void call_release(struct slot *s) {
    if (s->send) grpc_byte_buffer_destroy(s->send);
    if (s->recv) grpc_byte_buffer_destroy(s->recv);
    s->send = s->recv = NULL;
    grpc_metadata_array_destroy(&s->initial_md);
    grpc_metadata_array_destroy(&s->trailing_md);
    grpc_slice_unref(s->details);
    s->details = grpc_empty_slice();
    if (s->call) grpc_call_unref(s->call);
    s->call = NULL;
}

/* Creates the call for `method` and starts its first batch: the request, and either the whole
 * unary exchange or (streaming) the initial metadata and the first message. */
static int call_start(struct slot *s, const char *method, grpc_slice payload, bool streaming) {
    struct bench *b = s->b;
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                         gpr_time_from_seconds(CALL_DEADLINE_S, GPR_TIMESPAN));
    grpc_slice m = grpc_slice_from_static_string(method);
    s->call = grpc_channel_create_call(b->channel, NULL, GRPC_PROPAGATE_DEFAULTS, b->cq, m, NULL,
                                       deadline, NULL);
    grpc_metadata_array_init(&s->initial_md);
    grpc_metadata_array_init(&s->trailing_md);
    s->details = grpc_empty_slice();
    s->send = grpc_raw_byte_buffer_create(&payload, 1); /* takes its own reference */
    s->recv = NULL;

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = s->send;
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->recv;
    if (!streaming) {
        ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[n].data.recv_status_on_client.trailing_metadata = &s->trailing_md;
        ops[n].data.recv_status_on_client.status = &s->status;
        ops[n++].data.recv_status_on_client.status_details = &s->details;
    }
    if (grpc_call_start_batch(s->call, ops, n, s, NULL) != GRPC_CALL_OK) return -1;
    b->active++;
    return 0;
}

/* Streaming: the next message, or (last = true) the final status. */
static int call_next(struct slot *s, bool last) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    if (last) {
        op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        op.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
        op.data.recv_status_on_client.status = &s->status;
        op.data.recv_status_on_client.status_details = &s->details;
    } else {
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &s->recv;
    }
    if (grpc_call_start_batch(s->call, &op, 1, s, NULL) != GRPC_CALL_OK) return -1;
    s->b->active++;
    return 0;
}

/* The received message as one contiguous slice (unref it). */
static grpc_slice take_message(struct slot *s) {
    grpc_byte_buffer_reader r;
    grpc_slice out = grpc_empty_slice();
    if (s->recv && grpc_byte_buffer_reader_init(&r, s->recv)) {
        out = grpc_byte_buffer_reader_readall(&r);
        grpc_byte_buffer_reader_destroy(&r);
    }
    if (s->recv) grpc_byte_buffer_destroy(s->recv);
    s->recv = NULL;
    return out;
}

static bool status_ok(struct slot *s, const char *what) {
    if (s->status == GRPC_STATUS_OK) return true;
    char *d = grpc_slice_to_c_string(s->details);
    stats_error(&s->b->st, "%s: status %d: %s", what, (int)s->status, d);
    gpr_free(d);
    return false;
}

/* ------------------------------------------------------------------------------------------
 * Operations
 * ---------------------------------------------------------------------------------------- */

static void slot_start(struct slot *s);

/* The operation that began at s->t_start ended (ok or not); record it and start the next. */
static void op_done(struct slot *s, bool ok) {
    struct bench *b = s->b;
    double t = bench_now_s();
    call_release(s);
    s->state = ST_IDLE;
    if (ok && s->t_start >= b->record_from && t <= b->record_until) {
        stats_add(&b->st, (t - s->t_start) * 1e6);
        if (b->work == WORK_JOB) {
            for (int i = 0; i < 3; i++)
                stats_add(&b->steps[i], s->step_us[i]);
            if (!b->route_device[0]) {
                snprintf(b->route_device, sizeof b->route_device, "%s", s->job_device);
                snprintf(b->route_exec_mode, sizeof b->route_exec_mode, "%s", s->job_exec_mode);
            } else if (strcmp(b->route_device, s->job_device) != 0 ||
                       strcmp(b->route_exec_mode, s->job_exec_mode) != 0) {
                b->route_mixed = true;
            }
        }
    }
    if (t < b->record_until) slot_start(s);
}

static int start_wait(struct slot *s) {
    Rtx__V1__WaitJobRequest req = RTX__V1__WAIT_JOB_REQUEST__INIT;
    req.job_id = s->job_id;
    uint8_t buf[256];
    size_t len = rtx__v1__wait_job_request__pack(&req, buf);
    grpc_slice payload = grpc_slice_from_copied_buffer((const char *)buf, len);
    s->state = ST_WAIT_OPEN;
    s->job_state = 0;
    int rc = call_start(s, "/rtx.v1.Jobs/Wait", payload, true);
    grpc_slice_unref(payload);
    return rc;
}

static int start_outputs(struct slot *s) {
    Rtx__V1__GetOutputsRequest req = RTX__V1__GET_OUTPUTS_REQUEST__INIT;
    req.job_id = s->job_id;
    uint8_t buf[256];
    size_t len = rtx__v1__get_outputs_request__pack(&req, buf);
    grpc_slice payload = grpc_slice_from_copied_buffer((const char *)buf, len);
    s->state = ST_OUTPUTS;
    int rc = call_start(s, "/rtx.v1.Jobs/GetOutputs", payload, false);
    grpc_slice_unref(payload);
    return rc;
}

static void slot_start(struct slot *s) {
    struct bench *b = s->b;
    s->t_start = s->t_step = bench_now_s();
    int rc;
    if (b->work == WORK_ECHO) {
        s->state = ST_ECHO;
        rc = call_start(s, "/bench.Echo/Echo", b->echo_payload, false);
    } else {
        s->state = ST_SUBMIT;
        rc = call_start(s, "/rtx.v1.Jobs/Submit", b->submit_payload, false);
    }
    if (rc != 0) {
        stats_error(&b->st, "cannot start a call");
        call_release(s);
        s->state = ST_IDLE;
    }
}

static bool check_outputs(struct slot *s, grpc_slice msg) {
    Rtx__V1__GetOutputsResponse *r = rtx__v1__get_outputs_response__unpack(
        NULL, GRPC_SLICE_LENGTH(msg), GRPC_SLICE_START_PTR(msg));
    bool ok = r && r->n_outputs == 1 &&
              r->outputs[0]->dtype == RTX__V1__DATA_TYPE__DATA_TYPE_F32 &&
              r->outputs[0]->data.len == sizeof s->b->expected &&
              memcmp(r->outputs[0]->data.data, s->b->expected, sizeof s->b->expected) == 0;
    if (!ok) stats_error(&s->b->st, "GetOutputs: unexpected outputs for job %s", s->job_id);
    if (r) rtx__v1__get_outputs_response__free_unpacked(r, NULL);
    return ok;
}

/* Job step `i` of slot s ended now. */
static void step_done(struct slot *s, int i) {
    double t = bench_now_s();
    s->step_us[i] = (t - s->t_step) * 1e6;
    s->t_step = t;
}

/* A batch of slot s completed. */
static void on_complete(struct slot *s, bool success) {
    struct bench *b = s->b;
    b->active--;
    switch (s->state) {
    case ST_ECHO: {
        bool ok = success && status_ok(s, "Echo");
        if (ok && !s->recv) {
            stats_error(&b->st, "Echo: no reply");
            ok = false;
        }
        op_done(s, ok);
        return;
    }
    case ST_SUBMIT: {
        if (!success || !status_ok(s, "Submit")) break;
        grpc_slice msg = take_message(s);
        Rtx__V1__SubmitResponse *r = rtx__v1__submit_response__unpack(NULL, GRPC_SLICE_LENGTH(msg),
                                                                      GRPC_SLICE_START_PTR(msg));
        grpc_slice_unref(msg);
        if (!r || !r->job_id[0]) {
            stats_error(&b->st, "Submit: malformed response");
            if (r) rtx__v1__submit_response__free_unpacked(r, NULL);
            break;
        }
        snprintf(s->job_id, sizeof s->job_id, "%s", r->job_id);
        rtx__v1__submit_response__free_unpacked(r, NULL);
        step_done(s, 0);
        call_release(s);
        if (start_wait(s) == 0) return;
        stats_error(&b->st, "Wait: cannot start the call");
        break;
    }
    case ST_WAIT_OPEN:
    case ST_WAIT_READ: {
        if (!success) {
            stats_error(&b->st, "Wait: stream failed");
            break;
        }
        if (!s->recv) { /* the stream ended */
            s->state = ST_WAIT_STATUS;
            if (call_next(s, true) == 0) return;
            stats_error(&b->st, "Wait: cannot read the status");
            break;
        }
        grpc_slice msg = take_message(s);
        Rtx__V1__Job *job =
            rtx__v1__job__unpack(NULL, GRPC_SLICE_LENGTH(msg), GRPC_SLICE_START_PTR(msg));
        grpc_slice_unref(msg);
        if (!job) {
            stats_error(&b->st, "Wait: malformed Job");
            break;
        }
        s->job_state = job->state;
        snprintf(s->job_reason, sizeof s->job_reason, "%s", job->reason);
        snprintf(s->job_device, sizeof s->job_device, "%s", job->device);
        snprintf(s->job_exec_mode, sizeof s->job_exec_mode, "%s", job->exec_mode);
        rtx__v1__job__free_unpacked(job, NULL);
        s->state = ST_WAIT_READ;
        if (call_next(s, false) == 0) return;
        stats_error(&b->st, "Wait: cannot read");
        break;
    }
    case ST_WAIT_STATUS:
        if (!success || !status_ok(s, "Wait")) break;
        if (s->job_state != RTX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
            stats_error(&b->st, "job %s ended in state %d: %s", s->job_id, s->job_state,
                        s->job_reason);
            break;
        }
        step_done(s, 1);
        call_release(s);
        if (start_outputs(s) == 0) return;
        stats_error(&b->st, "GetOutputs: cannot start the call");
        break;
    case ST_OUTPUTS: {
        if (!success || !status_ok(s, "GetOutputs")) break;
        grpc_slice msg = take_message(s);
        bool ok = check_outputs(s, msg);
        grpc_slice_unref(msg);
        step_done(s, 2);
        op_done(s, ok);
        return;
    }
    case ST_IDLE: stats_error(&b->st, "completion for an idle slot"); return;
    }
    op_done(s, false);
}

/* ------------------------------------------------------------------------------------------
 * Phases
 * ---------------------------------------------------------------------------------------- */

struct result {
    enum workload work;
    int concurrency;
    size_t ok;
    long errors;
    double per_s, p50_us, p99_us;
    double step_p50_us[3]; /* WORK_JOB: Submit, Wait, GetOutputs */
    char first_error[256];
};

static grpc_slice make_submit_payload(float expected[4]) {
    static const float a[4] = {1.0f, 2.0f, 3.0f, 4.0f}, bv[4] = {0.5f, -2.0f, 10.0f, 0.25f};
    for (int i = 0; i < 4; i++)
        expected[i] = a[i] + bv[i];
    int64_t dims[1] = {4};
    Rtx__V1__ValueInfo in_a = RTX__V1__VALUE_INFO__INIT, in_b = RTX__V1__VALUE_INFO__INIT,
                       out_c = RTX__V1__VALUE_INFO__INIT;
    Rtx__V1__ValueInfo *vi[3] = {&in_a, &in_b, &out_c};
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        vi[i]->name = (char *)names[i];
        vi[i]->dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
        vi[i]->n_dims = 1;
        vi[i]->dims = dims;
        vi[i]->has_shape = 1;
    }
    Rtx__V1__ValueInfo *inputs[2] = {&in_a, &in_b}, *outputs[1] = {&out_c};
    char *node_in[2] = {"a", "b"}, *node_out[1] = {"c"};
    Rtx__V1__Node node = RTX__V1__NODE__INIT;
    node.name = "add0";
    node.op = "add";
    node.n_inputs = 2;
    node.inputs = node_in;
    node.n_outputs = 1;
    node.outputs = node_out;
    Rtx__V1__Node *nodes[1] = {&node};
    Rtx__V1__Graph graph = RTX__V1__GRAPH__INIT;
    graph.name = "bench_add";
    graph.n_inputs = 2;
    graph.inputs = inputs;
    graph.n_outputs = 1;
    graph.outputs = outputs;
    graph.n_nodes = 1;
    graph.nodes = nodes;
    graph.ir_version = 1;
    Rtx__V1__Tensor ta = RTX__V1__TENSOR__INIT, tb = RTX__V1__TENSOR__INIT;
    ta.name = "a";
    tb.name = "b";
    ta.dtype = tb.dtype = RTX__V1__DATA_TYPE__DATA_TYPE_F32;
    ta.n_dims = tb.n_dims = 1;
    ta.dims = tb.dims = dims;
    ta.data = (ProtobufCBinaryData){sizeof a, (uint8_t *)a};
    tb.data = (ProtobufCBinaryData){sizeof bv, (uint8_t *)bv};
    Rtx__V1__Tensor *tensors[2] = {&ta, &tb};
    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    req.graph = &graph;
    req.n_inputs = 2;
    req.inputs = tensors;
    size_t len = rtx__v1__submit_request__get_packed_size(&req);
    grpc_slice out = grpc_slice_malloc(len);
    rtx__v1__submit_request__pack(&req, GRPC_SLICE_START_PTR(out));
    return out;
}

static int run_phase(struct bench *b, enum workload work, int concurrency, double warmup,
                     double seconds, struct result *res) {
    b->work = work;
    memset(&b->st, 0, sizeof b->st);
    memset(b->steps, 0, sizeof b->steps);
    double t0 = bench_now_s();
    b->record_from = t0 + warmup;
    b->record_until = b->record_from + seconds;
    for (int i = 0; i < concurrency; i++) {
        b->slots[i] = (struct slot){.b = b, .state = ST_IDLE, .details = grpc_empty_slice()};
        slot_start(&b->slots[i]);
    }
    double give_up = b->record_until + DRAIN_LIMIT_S;
    bool cancelled = false;
    while (b->active > 0) {
        gpr_timespec until =
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(b->cq, until, NULL);
        if (ev.type == GRPC_OP_COMPLETE) on_complete(ev.tag, ev.success != 0);
        if (!cancelled && bench_now_s() > give_up) {
            /* a server that stopped answering: cancel, the completions still arrive */
            for (int i = 0; i < concurrency; i++)
                if (b->slots[i].call) grpc_call_cancel(b->slots[i].call, NULL);
            cancelled = true;
            stats_error(&b->st, "calls still in flight %d s after the phase", DRAIN_LIMIT_S);
        }
    }
    stats_sort(&b->st);
    *res = (struct result){.work = work,
                           .concurrency = concurrency,
                           .ok = b->st.n,
                           .errors = b->st.errors,
                           .per_s = (double)b->st.n / seconds,
                           .p50_us = percentile(&b->st, 50),
                           .p99_us = percentile(&b->st, 99)};
    snprintf(res->first_error, sizeof res->first_error, "%s", b->st.first_error);
    free(b->st.lat_us);
    b->st.lat_us = NULL;
    for (int i = 0; i < 3; i++) {
        stats_sort(&b->steps[i]);
        res->step_p50_us[i] = percentile(&b->steps[i], 50);
        free(b->steps[i].lat_us);
        b->steps[i].lat_us = NULL;
    }
    return res->ok > 0 && res->errors == 0 ? 0 : -1;
}

static grpc_channel *open_channel(const char *target) {
    grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                    .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                    .value.integer = 64 << 20};
    grpc_channel_args args = {.num_args = 1, .args = &arg};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    return ch;
}

/* Waits up to 5 s for the channel to connect; false if it does not. */
static bool channel_ready(grpc_channel *ch, grpc_completion_queue *cq) {
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(5, GPR_TIMESPAN));
    for (;;) {
        grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch, 1);
        if (st == GRPC_CHANNEL_READY) return true;
        if (gpr_time_cmp(gpr_now(GPR_CLOCK_REALTIME), deadline) >= 0) return false;
        static int tag;
        grpc_channel_watch_connectivity_state(ch, st, deadline, cq, &tag);
        grpc_event ev =
            grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) return false;
    }
}

static void usage(FILE *out) {
    fprintf(out, "Usage: rtx-bench-jobs [--echo ADDR] [--rtxd ADDR] [--seconds S] [--warmup S] "
                 "[--windows N]\n"
                 "                      [--concurrency N,N...] [--bytes N] [--report]\n");
}

/* Median, min and max of v[0..n), NaNs skipped (bench_summarize); v is sorted. */
static void summary(double *v, int n, double *med, double *lo, double *hi) {
    struct bench_summary s = bench_summarize(v, n);
    *med = s.median;
    *lo = s.lo;
    *hi = s.hi;
}

static void print_num(double x, const char *fmt) {
    if (isnan(x))
        printf(" %9s |", "-");
    else
        printf(fmt, x);
}

int main(int argc, char **argv) {
    const char *targets[2] = {NULL, NULL}; /* indexed by enum workload */
    double seconds = 1.0, warmup = 0.25;
    int windows = 5;
    int conc[MAX_PHASES] = {1, 16}, n_conc = 2;
    long bytes = 64;
    bool report = bench_report_only(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--report") == 0) {
            report = true;
            continue;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (strcmp(argv[i], "--echo") == 0) {
            targets[WORK_ECHO] = v;
        } else if (strcmp(argv[i], "--rtxd") == 0) {
            targets[WORK_JOB] = v;
        } else if (strcmp(argv[i], "--seconds") == 0) {
            seconds = atof(v);
        } else if (strcmp(argv[i], "--warmup") == 0) {
            warmup = atof(v);
        } else if (strcmp(argv[i], "--windows") == 0) {
            windows = atoi(v);
        } else if (strcmp(argv[i], "--bytes") == 0) {
            bytes = atol(v);
        } else if (strcmp(argv[i], "--concurrency") == 0) {
            n_conc = 0;
            for (char *p = argv[i + 1]; *p && n_conc < MAX_PHASES;) {
                char *end;
                long c = strtol(p, &end, 10);
                if (end == p || c < 1 || c > MAX_SLOTS) {
                    fprintf(stderr, "rtx-bench-jobs: bad --concurrency %s\n", v);
                    return 2;
                }
                conc[n_conc++] = (int)c;
                p = *end == ',' ? end + 1 : end;
            }
        } else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if ((!targets[0] && !targets[1]) || seconds <= 0 || warmup < 0 || bytes < 0 ||
        bytes > (1 << 20) || n_conc == 0 || windows < 1 || windows > MAX_WINDOWS) {
        usage(stderr);
        return 2;
    }

    grpc_init();
    static struct bench benches[2];
    static struct result results[2][MAX_PHASES][MAX_WINDOWS];
    bool ready[2] = {false, false};
    int status = 0;
    char *echo_buf = malloc((size_t)bytes + 1);
    memset(echo_buf, 'x', (size_t)bytes);
    for (int w = 0; w < 2; w++) {
        struct bench *b = &benches[w];
        if (!targets[w]) continue;
        b->cq = grpc_completion_queue_create_for_next(NULL);
        b->channel = open_channel(targets[w]);
        b->echo_payload = grpc_slice_from_copied_buffer(echo_buf, (size_t)bytes);
        b->submit_payload = make_submit_payload(b->expected);
        grpc_completion_queue *pcq = grpc_completion_queue_create_for_pluck(NULL);
        ready[w] = channel_ready(b->channel, pcq);
        grpc_completion_queue_shutdown(pcq);
        grpc_completion_queue_destroy(pcq);
        if (!ready[w]) {
            fprintf(stderr, "rtx-bench-jobs: cannot connect to %s\n", targets[w]);
            status = 1;
        }
    }
    free(echo_buf);

    /* For each concurrency, `windows` windows per workload, alternating the workloads and,
     * from one window to the next, which of them goes first (echo job, job echo, ...). */
    for (int k = 0; k < n_conc; k++) {
        for (int x = 0; x < windows; x++) {
            for (int j = 0; j < 2; j++) {
                int w = (x + j) % 2 ? WORK_JOB : WORK_ECHO;
                if (!ready[w]) continue;
                if (run_phase(&benches[w], (enum workload)w, conc[k], warmup, seconds,
                              &results[w][k][x]) != 0)
                    status = 1;
            }
        }
    }

    printf("\nrtx-bench-jobs: %d windows of %.2f s per workload and concurrency, each after "
           "%.2f s of warm-up, the workloads alternating; medians over the windows, spread "
           "min .. max\n",
           windows, seconds, warmup);
    if (ready[WORK_ECHO])
        printf("  echo: unary /bench.Echo/Echo of %ld bytes to %s (bench/echo-server.c, bare "
               "gRPC core)\n",
               bytes, targets[WORK_ECHO]);
    if (ready[WORK_JOB])
        printf("  job:  rtxd at %s: Jobs.Submit (add of two [4] f32) + Jobs.Wait + "
               "Jobs.GetOutputs; ran on device \"%s\", exec_mode \"%s\"%s\n",
               targets[WORK_JOB], benches[WORK_JOB].route_device,
               benches[WORK_JOB].route_exec_mode,
               benches[WORK_JOB].route_mixed ? " (not every job: the route varied)" : "");
    printf("\n| workload | concurrency |    per s |   p50 µs | p50 min .. max µs |   p99 µs | "
           "errors |\n");
    printf("| -------- | ----------- | -------- | -------- | ----------------- | -------- | "
           "------ |\n");
    double p50_med[2][MAX_PHASES];
    for (int w = 0; w < 2; w++) {
        for (int k = 0; k < n_conc; k++) {
            p50_med[w][k] = NAN;
            if (!ready[w]) continue;
            double per_s[MAX_WINDOWS], p50[MAX_WINDOWS], p99[MAX_WINDOWS];
            long errors = 0;
            for (int x = 0; x < windows; x++) {
                const struct result *r = &results[w][k][x];
                per_s[x] = r->per_s;
                p50[x] = r->p50_us;
                p99[x] = r->p99_us;
                errors += r->errors;
            }
            double pm, plo, phi, med, lo, hi, qm, qlo, qhi;
            summary(per_s, windows, &pm, &plo, &phi);
            summary(p50, windows, &med, &lo, &hi);
            summary(p99, windows, &qm, &qlo, &qhi);
            p50_med[w][k] = med;
            char spread[40];
            if (isnan(med))
                snprintf(spread, sizeof spread, "-");
            else
                snprintf(spread, sizeof spread, "%.0f .. %.0f", lo, hi);
            printf("| %-8s | %11d |", workload_names[w], conc[k]);
            print_num(pm, " %8.0f |");
            print_num(med, " %8.0f |");
            printf(" %17s |", spread);
            print_num(qm, " %8.0f |");
            printf(" %6ld |\n", errors);
        }
    }
    if (ready[WORK_JOB]) {
        printf("\njob steps, medians over the windows:\n\n");
        printf("| concurrency | Submit p50 µs | Wait p50 µs | GetOutputs p50 µs |\n");
        printf("| ----------- | ------------- | ----------- | ----------------- |\n");
        for (int k = 0; k < n_conc; k++) {
            double st[3], lo, hi, v[MAX_WINDOWS];
            for (int i = 0; i < 3; i++) {
                for (int x = 0; x < windows; x++)
                    v[x] = results[WORK_JOB][k][x].step_p50_us[i];
                summary(v, windows, &st[i], &lo, &hi);
            }
            printf("| %11d | %13.0f | %11.0f | %17.0f |\n", conc[k], st[0], st[1], st[2]);
        }
    }
    for (int w = 0; w < 2; w++)
        for (int k = 0; ready[w] && k < n_conc; k++)
            for (int x = 0; x < windows; x++)
                if (results[w][k][x].errors) {
                    printf("\n%s at %d, window %d: %ld errors; first: %s\n", workload_names[w],
                           conc[k], x + 1, results[w][k][x].errors, results[w][k][x].first_error);
                    break;
                }

    printf("\n");
    bool all_met = true;
    if (ready[WORK_ECHO] && ready[WORK_JOB]) {
        for (int k = 0; k < n_conc; k++) {
            double ratio = p50_med[WORK_JOB][k] / p50_med[WORK_ECHO][k], r[MAX_WINDOWS], med, lo,
                   hi;
            for (int x = 0; x < windows; x++)
                r[x] = results[WORK_JOB][k][x].p50_us / results[WORK_ECHO][k][x].p50_us;
            summary(r, windows, &med, &lo, &hi);
            bool met = ratio <= TARGET_RATIO; /* false for NaN: a side that did not run */
            all_met = all_met && met;
            printf("verdict: job p50 / echo p50 at concurrency %d: %.2fx (medians; per-window "
                   "pairs %.2f .. %.2f), target <= %.0fx: %s\n",
                   conc[k], ratio, lo, hi, TARGET_RATIO,
                   report ? (met ? "met (report only, not judged)"
                                 : "MISSED (report only, not judged)")
                          : (met ? "met" : "MISSED"));
        }
    } else {
        printf("verdict: job p50 / echo p50: not judged (only one of --echo and --rtxd given or "
               "reachable)\n");
    }
    if (status) printf("rtx-bench-jobs: a phase FAILED to run (errors above)\n");

    for (int w = 0; w < 2; w++) {
        struct bench *b = &benches[w];
        if (!b->cq) continue;
        grpc_slice_unref(b->echo_payload);
        grpc_slice_unref(b->submit_payload);
        grpc_channel_destroy(b->channel);
        grpc_completion_queue_shutdown(b->cq);
        while (grpc_completion_queue_next(b->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(b->cq);
    }
    grpc_shutdown();
    if (status) return 1;
    return report || all_met ? 0 : 1;
}
