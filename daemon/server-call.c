/*
 * server-call.c - a gRPC call's common steps (state, references, request ids, the batches'
 * operations, logging), unary calls, and the arrival of calls: posting requests for the
 * method table, handing each call to its kind, and the completion-queue threads' dispatch.
 * The design of the call state machines is described in server.c.
 */
#include <assert.h>
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/log.h"
#include "daemon/server-impl.h"

/* ------------------------------------------------------------------------------------------
 * Calls
 * ---------------------------------------------------------------------------------------- */

static bool deadline_passed(gpr_timespec deadline) {
    gpr_clock_type clock =
        deadline.clock_type == GPR_TIMESPAN ? GPR_CLOCK_MONOTONIC : deadline.clock_type;
    return gpr_time_cmp(deadline, gpr_now(clock)) <= 0;
}

static double elapsed_ms(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

static struct call *call_new(struct rtx_server *s, int method, int cq) {
    struct call *c = rtx_calloc(1, sizeof *c);
    if (!c) return NULL;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        rtx_free(c);
        return NULL;
    }
    c->srv = s;
    c->cq = cq;
    c->method = method;
    c->t_request = (struct tag){TAG_REQUEST, c};
    c->t_done = (struct tag){TAG_UNARY_DONE, c};
    c->t_close = (struct tag){TAG_STREAM_CLOSE, c};
    c->t_write = (struct tag){TAG_STREAM_WRITE, c};
    c->t_status = (struct tag){TAG_STREAM_STATUS, c};
    c->t_read = (struct tag){TAG_READ, c};
    c->st.call = c;
    c->as.call = c;
    c->bd.call = c;
    grpc_metadata_array_init(&c->md);
    if (method == UNKNOWN_METHOD) grpc_call_details_init(&c->details);
    return c;
}

static const char *call_path(const struct call *c) {
    return c->method == UNKNOWN_METHOD ? c->path : rtx__server_methods[c->method].path;
}

bool rtx__server_call_has(const struct call *c, unsigned flag) {
    return c->method != UNKNOWN_METHOD && (rtx__server_methods[c->method].flags & flag);
}

/* Calls whose end call_free logs: those with a stream of replies. */
static bool call_is_stream(const struct call *c) {
    return rtx__server_call_has(c, METHOD_SERVER_STREAMING | METHOD_BIDI_STREAMING);
}

/* Logs the end of a call: failures at info, successes at debug. */
static void call_log(struct call *c, const char *outcome) {
    enum rtx_log_level level = c->status == GRPC_STATUS_OK ? RTX_LOG_DEBUG : RTX_LOG_INFO;
    if (!rtx_log_enabled(level)) return;
    char ms[32];
    snprintf(ms, sizeof ms, "%.3f", elapsed_ms(&c->t_start));
    rtx_log_set_request_id(c->request_id);
    if (c->status == GRPC_STATUS_OK)
        rtx_log(level, "rpc", "method", call_path(c), "status", outcome, "ms", ms, NULL);
    else
        rtx_log(level, "rpc", "method", call_path(c), "status", outcome, "ms", ms, "error",
                c->status_msg, NULL);
    rtx_log_set_request_id(NULL);
}

void rtx__server_drop_queue_locked(struct call *c) {
    while (c->head) {
        struct msg *m = c->head;
        c->head = m->next;
        grpc_byte_buffer_destroy(m->bb);
        rtx_free(m);
    }
    c->tail = NULL;
}

void rtx__server_call_free(struct call *c) {
    struct rtx_server *s = c->srv;
    if (c->listed) {
        pthread_mutex_lock(&s->mu);
        if (c->prev)
            c->prev->next = c->next;
        else
            s->streams = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&s->mu);
    }
    if (c->call && call_is_stream(c)) {
        if (c->status_started && !c->cancelled)
            call_log(c, rtx_server_status_name(c->status));
        else {
            bool expired = deadline_passed(c->deadline);
            c->status = expired ? GRPC_STATUS_DEADLINE_EXCEEDED : GRPC_STATUS_CANCELLED;
            snprintf(c->status_msg, sizeof c->status_msg, "%s",
                     expired ? "the deadline passed" : "the client went away");
            call_log(c, rtx_server_status_name(c->status));
        }
    }
    rtx__server_drop_queue_locked(c);
    if (c->writing) grpc_byte_buffer_destroy(c->writing);
    if (c->reply) grpc_byte_buffer_destroy(c->reply);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    if (c->recv) grpc_byte_buffer_destroy(c->recv);
    if (c->details_set) grpc_slice_unref(c->status_details);
    if (c->out_md_set) grpc_slice_unref(c->out_md.value);
    if (c->pushback_set) grpc_slice_unref(c->pushback_md.value);
    grpc_metadata_array_destroy(&c->md);
    if (c->method == UNKNOWN_METHOD) grpc_call_details_destroy(&c->details);
    if (c->call) grpc_call_unref(c->call);
    bool counted = c->counted;
    pthread_mutex_destroy(&c->mu);
    rtx_free(c);
    if (counted) {
        pthread_mutex_lock(&s->mu);
        if (--s->live_calls == 0) pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
    }
}

void rtx__server_call_unref(struct call *c) {
    pthread_mutex_lock(&c->mu);
    int n = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (n == 0) rtx__server_call_free(c);
}

/* Posts one request for `method` on queue `cq`; UNKNOWN_METHOD requests a call to any method
 * outside the table (answered UNIMPLEMENTED: unrequested, such a call would wait forever). */
int rtx__server_post_request(struct rtx_server *s, int method, int cq, struct rtx_err *err) {
    struct call *c = call_new(s, method, cq);
    if (!c) return rtx_err_set(err, RTX_ENOMEM, "out of memory for a call");
    grpc_completion_queue *q = s->cqs[cq].cq;
    grpc_call_error e;
    if (method == UNKNOWN_METHOD)
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, q, q,
                                     &c->t_request);
    else
        e = grpc_server_request_registered_call(
            s->server, s->registered[method], &c->call, &c->deadline, &c->md,
            (rtx__server_methods[method].flags & METHOD_BIDI_STREAMING) ? NULL : &c->payload, q, q,
            &c->t_request);
    if (e != GRPC_CALL_OK) {
        rtx__server_call_free(c);
        return rtx_err_set(err, RTX_EINTERNAL, "requesting a call for %s: %s",
                           method == UNKNOWN_METHOD ? "unknown methods"
                                                    : rtx__server_methods[method].path,
                           grpc_call_error_to_string(e));
    }
    return 0;
}

/* The client's x-request-id when usable, else a new one; prepares the echo. */
static void call_take_request_id(struct call *c) {
    c->request_id[0] = '\0';
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        if (grpc_slice_str_cmp(m->key, REQUEST_ID_KEY) != 0) continue;
        size_t len = GRPC_SLICE_LENGTH(m->value);
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
        if (rtx_server_request_id_valid(v, len)) {
            memcpy(c->request_id, v, len);
            c->request_id[len] = '\0';
        }
        break;
    }
    if (!c->request_id[0]) rtx_server_request_id_new(c->request_id);
    c->out_md.key = grpc_slice_from_static_string(REQUEST_ID_KEY);
    c->out_md.value = grpc_slice_from_copied_string(c->request_id);
    c->out_md_set = true;
}

static void op_initial_metadata(struct call *c, grpc_op *op) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = &c->out_md;
}

void rtx__server_op_status(struct call *c, grpc_op *op) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op->data.send_status_from_server.status = c->status;
    if (c->status_msg[0]) {
        if (c->details_set) grpc_slice_unref(c->status_details);
        c->status_details = grpc_slice_from_copied_string(c->status_msg);
        c->details_set = true;
        op->data.send_status_from_server.status_details = &c->status_details;
    }
    /* admission's retry hint as gRPC's standard pushback, which clients with a retry policy
     * wait out before retrying (the hint stays in the message for people) */
    int64_t ms = c->status == GRPC_STATUS_RESOURCE_EXHAUSTED
                     ? rtx_err_retry_after_ms(c->status_msg, strlen(c->status_msg))
                     : -1;
    if (ms >= 0) {
        char v[24];
        snprintf(v, sizeof v, "%" PRId64, ms);
        if (c->pushback_set) grpc_slice_unref(c->pushback_md.value);
        c->pushback_md.key = grpc_slice_from_static_string("grpc-retry-pushback-ms");
        c->pushback_md.value = grpc_slice_from_copied_string(v);
        c->pushback_set = true;
        op->data.send_status_from_server.trailing_metadata_count = 1;
        op->data.send_status_from_server.trailing_metadata = &c->pushback_md;
    }
}

/* Fills op with SEND_INITIAL_METADATA unless c's initial metadata already went out (marking
 * it sent). Returns the number of ops filled: 0 or 1. */
size_t rtx__server_op_initial_metadata_once(struct call *c, grpc_op *op) {
    if (c->md_sent) return 0;
    op_initial_metadata(c, op);
    c->md_sent = true;
    return 1;
}

/* Fills op with SEND_MESSAGE of bb (still owned by the caller until the batch completes). */
void rtx__server_op_send_message(grpc_op *op, grpc_byte_buffer *bb) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_MESSAGE;
    op->data.send_message.send_message = bb;
}

/* Fills op with RECV_CLOSE_ON_SERVER, reporting into c->cancelled. */
void rtx__server_op_recv_close(struct call *c, grpc_op *op) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op->data.recv_close_on_server.cancelled = &c->cancelled;
}

/* Logs that a batch of call c could not start: what says which ("cannot answer a call"). */
void rtx__server_log_batch_error(const struct call *c, const char *what, grpc_call_error e) {
    rtx_log(RTX_LOG_ERROR, what, "method", call_path(c), "error", grpc_call_error_to_string(e),
            NULL);
}

/* Records rep's status on c and fills ops (room for 3) with a one-reply batch: the initial
 * metadata, the message when rep is OK (rep->data is taken into c->reply; otherwise freed)
 * and the status. rep->data is NULL after. Returns the number of ops filled. */
size_t rtx__server_reply_ops(struct call *c, struct rtx_server_reply *rep, grpc_op *ops) {
    c->status = rep->code;
    snprintf(c->status_msg, sizeof c->status_msg, "%s", rep->code ? rep->msg : "");
    size_t n = 0;
    op_initial_metadata(c, &ops[n++]);
    if (rep->code == GRPC_STATUS_OK) {
        c->reply = rtx__server_byte_buffer_take(rep->data, rep->len);
        rtx__server_op_send_message(&ops[n++], c->reply);
    } else {
        rtx_free(rep->data);
    }
    rep->data = NULL;
    rtx__server_op_status(c, &ops[n++]);
    return n;
}

/* Whether call c's request may go to its handler: false, with rep set to the error, when the
 * request message is missing or the call's deadline has already passed. */
bool rtx__server_request_usable(const struct call *c, const uint8_t *req,
                                struct rtx_server_reply *rep) {
    if (!req) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "missing request message");
        return false;
    }
    if (deadline_passed(c->deadline)) {
        rtx_server_reply_status(rep, GRPC_STATUS_DEADLINE_EXCEEDED,
                                "the deadline passed before the request was handled");
        return false;
    }
    return true;
}

/* --- unary ------------------------------------------------------------------------------- */

static void unary_reply(struct call *c, struct rtx_server_reply *rep) {
    grpc_op ops[4];
    size_t n = rtx__server_reply_ops(c, rep, ops);
    rtx__server_op_recv_close(c, &ops[n++]);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL);
    if (e != GRPC_CALL_OK) {
        rtx__server_log_batch_error(c, "cannot answer a call", e);
        rtx__server_call_free(c);
    }
}

static void unary_run(struct call *c, const uint8_t *req, size_t len) {
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (rtx__server_request_usable(c, req, &rep)) {
        rtx_log_set_request_id(c->request_id);
        rtx__server_methods[c->method].unary(c->srv->daemon, req, len, &rep);
        rtx_log_set_request_id(NULL);
    }
    unary_reply(c, &rep);
}
/* --- arrival ----------------------------------------------------------------------------- */

static void call_arrived(struct call *c, bool ok) {
    struct rtx_server *s = c->srv;
    if (!ok) { /* the server is shutting down */
        rtx__server_call_free(c);
        return;
    }
    if (!atomic_load(&s->stopping)) {
        struct rtx_err err;
        if (rtx__server_post_request(s, c->method, c->cq, &err) != 0)
            rtx_log(RTX_LOG_ERROR, "cannot request more calls", "error", err.msg, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &c->t_start);
    call_take_request_id(c);
    if (c->method == UNKNOWN_METHOD) {
        snprintf(c->path, sizeof c->path, "%.*s", (int)GRPC_SLICE_LENGTH(c->details.method),
                 (const char *)GRPC_SLICE_START_PTR(c->details.method));
        struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
        rtx_server_reply_status(&rep, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", c->path);
        unary_reply(c, &rep);
        return;
    }

    const uint8_t *req = NULL;
    size_t len = 0;
    grpc_slice sl = grpc_empty_slice();
    grpc_byte_buffer_reader reader;
    if (c->payload && grpc_byte_buffer_reader_init(&reader, c->payload)) {
        sl = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        grpc_byte_buffer_destroy(c->payload); /* sl holds the bytes now */
        c->payload = NULL;
        req = GRPC_SLICE_START_PTR(sl);
        len = GRPC_SLICE_LENGTH(sl);
        static const uint8_t empty;
        if (!req) req = &empty; /* an empty message */
    }
    if (rtx__server_call_has(c, METHOD_BIDI_STREAMING))
        rtx__server_bidi_run(c);
    else if (rtx__server_call_has(c, METHOD_SERVER_STREAMING))
        rtx__server_stream_run(c, req, len);
    else if (rtx__server_call_has(c, METHOD_ASYNC))
        rtx__server_async_run(c, req, len);
    else
        unary_run(c, req, len);
    grpc_slice_unref(sl);
}

void rtx__server_dispatch(struct rtx_server *s, struct tag *t, bool ok) {
    struct call *c = t->call;
    switch (t->kind) {
    case TAG_REQUEST: call_arrived(c, ok); break;
    case TAG_UNARY_DONE:
        if (rtx__server_call_has(c, METHOD_ASYNC)) {
            call_log(c, ok ? rtx_server_status_name(c->status) : "CANCELLED");
            rtx__server_call_unref(c);
            break;
        }
        call_log(c, c->cancelled ? "CANCELLED" : rtx_server_status_name(c->status));
        rtx__server_call_free(c);
        break;
    case TAG_STREAM_CLOSE:
        if (rtx__server_call_has(c, METHOD_ASYNC | METHOD_BIDI_STREAMING))
            rtx__server_watched_on_close(c);
        else
            rtx__server_stream_on_close(c);
        break;
    case TAG_READ: rtx__server_bidi_on_read(c, ok); break;
    case TAG_STREAM_WRITE: rtx__server_stream_on_write(c, ok); break;
    case TAG_STREAM_STATUS: rtx__server_call_unref(c); break;
    case TAG_SHUTDOWN:
        pthread_mutex_lock(&s->mu);
        s->notified = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        break;
    }
}

void *rtx__server_cq_main(void *arg) {
    struct rtx_server *s = ((struct cq_arg *)arg)->srv;
    grpc_completion_queue *cq = s->cqs[((struct cq_arg *)arg)->index].cq;
    rtx_thread_name("rtx-cq-%d", ((struct cq_arg *)arg)->index);
    rtx_free(arg);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) rtx__server_dispatch(s, ev.tag, ev.success != 0);
    }
    return NULL;
}
