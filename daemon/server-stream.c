/*
 * server-stream.c - the gRPC call kinds whose answers come from other threads: server
 * streaming (Jobs.Wait), asynchronous unary calls (ModelInfer) with their deadlines and
 * cancellation, and bidirectional streams (ModelStreamInfer). The design of the call state
 * machines is described in server.c.
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

/* --- streaming --------------------------------------------------------------------------- */

static void stream_start_status_locked(struct call *c) {
    grpc_op ops[2];
    size_t n = rtx__server_op_initial_metadata_once(c, ops);
    rtx__server_op_status(c, &ops[n++]);
    c->status_started = true;
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_status, NULL);
    if (e != GRPC_CALL_OK) {
        rtx__server_log_batch_error(c, "cannot end a stream", e);
        c->refs--; /* the close reference is still held */
        grpc_call_cancel(c->call, NULL);
    }
}

static void stream_start_write_locked(struct call *c) {
    struct msg *m = c->head;
    c->head = m->next;
    if (!c->head) c->tail = NULL;
    c->writing = m->bb;
    rtx_free(m);
    grpc_op ops[2];
    size_t n = rtx__server_op_initial_metadata_once(c, ops);
    rtx__server_op_send_message(&ops[n++], c->writing);
    c->write_in_flight = true;
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_write, NULL);
    if (e != GRPC_CALL_OK) {
        rtx__server_log_batch_error(c, "cannot write to a stream", e);
        grpc_byte_buffer_destroy(c->writing);
        c->writing = NULL;
        c->write_in_flight = false;
        c->refs--;
        c->closed = true;
        rtx__server_drop_queue_locked(c);
        grpc_call_cancel(c->call, NULL);
    }
}

/* Starts the next write, or the status once the queue is empty. Caller holds c->mu and a
 * reference other than the one a started batch takes. */
static void stream_pump_locked(struct call *c) {
    if (c->write_in_flight || c->status_started) return;
    if (c->closed) {
        rtx__server_drop_queue_locked(c);
        return;
    }
    if (c->head)
        stream_start_write_locked(c);
    else if (c->want_status)
        stream_start_status_locked(c);
}

/* Posts RECV_CLOSE_ON_SERVER, whose completion reports a client that goes away (used by
 * streaming, async and bidi calls). Takes a reference. Returns false, logging what (which
 * step failed), when the batch cannot start. */
static bool post_close(struct call *c, const char *what) {
    grpc_op op;
    rtx__server_op_recv_close(c, &op);
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL);
    if (e != GRPC_CALL_OK) {
        c->refs--;
        rtx__server_log_batch_error(c, what, e);
        return false;
    }
    return true;
}

/* Ends the stream with a status (dropping queued messages) unless it already ends. */
void rtx__server_stream_end_locked(struct call *c, grpc_status_code code, const char *msg) {
    if (c->closed || c->want_status) return;
    c->want_status = true;
    c->status = code;
    snprintf(c->status_msg, sizeof c->status_msg, "%s", msg ? msg : "");
    rtx__server_drop_queue_locked(c);
    stream_pump_locked(c);
}

/* Asks for the status OK once the write queue drains (the caller pumps). Caller holds c->mu. */
static void stream_want_ok_locked(struct call *c) {
    c->want_status = true;
    c->status = GRPC_STATUS_OK;
    c->status_msg[0] = '\0';
}

/* Appends message m, holding bb, to c's write queue unless the stream already ends (then both
 * are dropped); m NULL (out of memory) ends the stream with INTERNAL oom_msg. Caller holds
 * c->mu. Returns whether m was queued, after which the caller pumps. */
static bool stream_queue_locked(struct call *c, struct msg *m, grpc_byte_buffer *bb,
                                const char *oom_msg) {
    if (c->closed || c->want_status || c->status_started) {
        if (bb) grpc_byte_buffer_destroy(bb);
        rtx_free(m);
        return false;
    }
    if (!m) {
        rtx__server_stream_end_locked(c, GRPC_STATUS_INTERNAL, oom_msg);
        return false;
    }
    m->bb = bb;
    m->next = NULL;
    if (c->tail)
        c->tail->next = m;
    else
        c->head = m;
    c->tail = m;
    return true;
}

/* Puts stream call c on the server's list of live streams, which shutdown ends. Returns
 * whether shutdown had already begun. */
static bool stream_list(struct call *c) {
    struct rtx_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    bool stopping = s->shutdown_begun;
    c->next = s->streams;
    if (s->streams) s->streams->prev = c;
    s->streams = c;
    c->listed = true;
    pthread_mutex_unlock(&s->mu);
    return stopping;
}

/* The source's last call: drops its reference. Returns whether the call must be freed. */
static bool stream_source_done_locked(struct call *c) {
    if (c->source_done) return false;
    c->source_done = true;
    return --c->refs == 0;
}

void rtx_server_stream_send(struct rtx_server_stream *st, void *data, size_t len, bool last) {
    struct call *c = st->call;
    struct msg *m = rtx_malloc(sizeof *m);
    grpc_byte_buffer *bb = m ? rtx__server_byte_buffer_take(data, len) : NULL;
    if (!m) rtx_free(data);
    pthread_mutex_lock(&c->mu);
    if (stream_queue_locked(c, m, bb, "out of memory queueing a message")) {
        if (last) stream_want_ok_locked(c);
        stream_pump_locked(c);
    }
    bool free_now = last && stream_source_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (free_now) rtx__server_call_free(c);
}

void rtx_server_stream_end(struct rtx_server_stream *st, grpc_status_code code, const char *msg,
                           bool last) {
    struct call *c = st->call;
    pthread_mutex_lock(&c->mu);
    rtx__server_stream_end_locked(c, code, msg);
    bool free_now = last && stream_source_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (free_now) rtx__server_call_free(c);
}

void rtx_server_stream_set_stop(struct rtx_server_stream *st, void (*stop)(void *, uint64_t),
                                void *ctx, uint64_t handle) {
    struct call *c = st->call;
    pthread_mutex_lock(&c->mu);
    c->stop = stop;
    c->stop_ctx = ctx;
    c->stop_handle = handle;
    pthread_mutex_unlock(&c->mu);
}

void rtx__server_stream_run(struct call *c, const uint8_t *req, size_t len) {
    c->refs = 0;
    if (!post_close(c, "cannot start a stream")) { /* the close batch's reference */
        rtx__server_call_free(c);
        return;
    }
    c->refs++; /* the source, until it ends or is stopped */

    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (stream_list(c)) {
        rtx_server_reply_status(&rep, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
    } else if (rtx__server_request_usable(c, req, &rep)) {
        rtx_log_set_request_id(c->request_id);
        rtx__server_methods[c->method].stream(c->srv->daemon, req, len, &c->st, &rep);
        rtx_log_set_request_id(NULL);
    }
    rtx_free(rep.data);
    pthread_mutex_lock(&c->mu);
    if (rep.code != GRPC_STATUS_OK) {
        rtx__server_stream_end_locked(c, rep.code, rep.msg);
        stream_source_done_locked(c); /* the close reference remains */
    } else {
        assert(c->stop || c->source_done); /* a live source must be stoppable */
    }
    pthread_mutex_unlock(&c->mu);
}

/* Completion of RECV_CLOSE_ON_SERVER: the call is over; stop the source if it still runs. */
void rtx__server_stream_on_close(struct call *c) {
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    rtx__server_drop_queue_locked(c);
    bool stop = !c->source_done && c->stop;
    pthread_mutex_unlock(&c->mu);
    if (stop) c->stop(c->stop_ctx, c->stop_handle);
    pthread_mutex_lock(&c->mu);
    if (stop && !c->source_done) {
        /* stopped: no send runs any more, so its reference can go */
        c->source_done = true;
        c->refs--;
    }
    pthread_mutex_unlock(&c->mu);
    rtx__server_call_unref(c);
}

void rtx__server_stream_on_write(struct call *c, bool ok) {
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer_destroy(c->writing);
    c->writing = NULL;
    c->write_in_flight = false;
    if (!ok) {
        c->closed = true;
        rtx__server_drop_queue_locked(c);
    }
    stream_pump_locked(c);
    pthread_mutex_unlock(&c->mu);
    rtx__server_call_unref(c);
}

/* --- deadlines and cancellation of async and bidi calls ---------------------------------- */

/* The call's deadline as CLOCK_MONOTONIC nanoseconds (0: none). gRPC's clocks need not share
 * CLOCK_MONOTONIC's origin, so the time left is measured on the deadline's own clock. */
static int64_t deadline_to_ns(gpr_timespec deadline) {
    gpr_clock_type clock =
        deadline.clock_type == GPR_TIMESPAN ? GPR_CLOCK_MONOTONIC : deadline.clock_type;
    gpr_timespec inf = gpr_inf_future(clock);
    if (gpr_time_cmp(deadline, inf) >= 0) return 0;
    gpr_timespec left = gpr_time_sub(deadline, gpr_now(clock));
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    int64_t left_ns = left.tv_sec > INT64_MAX / 2000000000
                          ? INT64_MAX / 2
                          : left.tv_sec * 1000000000 + left.tv_nsec;
    if (left_ns < 1) left_ns = 1; /* already passed: still a deadline, not "none" */
    return now_ns + left_ns;
}

/* --- asynchronous unary calls ------------------------------------------------------------ */

/* Counts a call whose answer comes from another thread (see rtx_server_shutdown). */
static void call_count(struct call *c) {
    pthread_mutex_lock(&c->srv->mu);
    c->srv->live_calls++;
    pthread_mutex_unlock(&c->srv->mu);
    c->counted = true;
}

/* References: the close batch, the handler until finish, the reply batch. */
void rtx__server_async_run(struct call *c, const uint8_t *req, size_t len) {
    call_count(c);
    c->deadline_ns = deadline_to_ns(c->deadline);
    c->refs = 0;
    if (!post_close(c, "cannot watch a call")) {
        rtx__server_call_free(c);
        return;
    }
    c->refs++; /* the handler's, until finish */
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (!rtx__server_request_usable(c, req, &rep)) {
        rtx_server_async_finish(&c->as, &rep);
    } else {
        rtx_log_set_request_id(c->request_id);
        rtx__server_methods[c->method].async(c->srv->daemon, req, len, &c->as);
        rtx_log_set_request_id(NULL);
    }
}

void rtx_server_async_finish(struct rtx_server_async *a, struct rtx_server_reply *rep) {
    struct call *c = a->call;
    pthread_mutex_lock(&c->mu);
    assert(!c->finished);
    c->finished = true;
    grpc_op ops[3];
    size_t n = rtx__server_reply_ops(c, rep, ops);
    c->refs++; /* the reply batch */
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL);
    if (e != GRPC_CALL_OK) {
        rtx__server_log_batch_error(c, "cannot answer a call", e);
        c->refs--;
        grpc_call_cancel(c->call, NULL);
    }
    int left = --c->refs; /* the handler's */
    pthread_mutex_unlock(&c->mu);
    if (left == 0) rtx__server_call_free(c);
}

const volatile int *rtx_server_async_cancel_flag(const struct rtx_server_async *a) {
    return &a->call->cancel_flag;
}

int64_t rtx_server_async_deadline_ns(const struct rtx_server_async *a) {
    return a->call->deadline_ns;
}

/* A watch taken off its call's list points back at itself. */
#define WATCH_TAKEN(w) ((w)->prev == (w))

/* Completion of RECV_CLOSE_ON_SERVER of an async or bidi call. */
void rtx__server_watched_on_close(struct call *c) {
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    /* over before its answer went out: cancelled by the client, the deadline or shutdown
     * (which ends a stream whose messages still wait for their replies) */
    bool answered =
        rtx__server_call_has(c, METHOD_ASYNC) ? c->finished : c->status_started && !c->pending;
    struct rtx_server_watch *w = NULL;
    if (c->cancelled || !answered) {
        c->cancel_flag = 1;
        w = c->watches; /* taken whole: their functions run below, outside the lock */
        c->watches = NULL;
        for (struct rtx_server_watch *k = w; k; k = k->next)
            k->prev = k;
    }
    rtx__server_drop_queue_locked(c);
    pthread_mutex_unlock(&c->mu);
    while (w) {
        struct rtx_server_watch *next = w->next; /* w may be gone once fn returns */
        w->fn(w->ctx);
        w = next;
    }
    rtx__server_call_unref(c);
}

static bool watch_add(struct call *c, struct rtx_server_watch *w) {
    pthread_mutex_lock(&c->mu);
    bool over = c->closed || c->cancel_flag;
    if (over) {
        w->prev = w; /* never listed: a remove finds it taken */
        w->next = NULL;
    } else {
        w->prev = NULL;
        w->next = c->watches;
        if (c->watches) c->watches->prev = w;
        c->watches = w;
    }
    pthread_mutex_unlock(&c->mu);
    return !over;
}

static bool watch_remove(struct call *c, struct rtx_server_watch *w) {
    pthread_mutex_lock(&c->mu);
    bool listed = !WATCH_TAKEN(w);
    if (listed) {
        if (w->prev)
            w->prev->next = w->next;
        else
            c->watches = w->next;
        if (w->next) w->next->prev = w->prev;
        w->prev = w; /* a second remove finds it taken */
        w->next = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return listed;
}

bool rtx_server_async_watch(struct rtx_server_async *a, struct rtx_server_watch *w) {
    return watch_add(a->call, w);
}

bool rtx_server_bidi_watch(struct rtx_server_bidi *st, struct rtx_server_watch *w) {
    return watch_add(st->call, w);
}

bool rtx_server_async_unwatch(struct rtx_server_async *a, struct rtx_server_watch *w) {
    return watch_remove(a->call, w);
}

bool rtx_server_bidi_unwatch(struct rtx_server_bidi *st, struct rtx_server_watch *w) {
    return watch_remove(st->call, w);
}

/* --- bidirectional streams --------------------------------------------------------------- */

/* Ends the stream with OK once the client half-closed and every message has its reply. */
static void bidi_maybe_end_locked(struct call *c) {
    if (c->read_done && c->pending == 0 && !c->want_status && !c->closed) {
        stream_want_ok_locked(c);
        stream_pump_locked(c);
    }
}

/* Posts the next RECV_MESSAGE (caller holds c->mu); takes a reference. */
static void bidi_read_locked(struct call *c) {
    if (c->closed || c->want_status) {
        c->read_done = true;
        return;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv;
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->t_read, NULL);
    if (e != GRPC_CALL_OK) {
        rtx__server_log_batch_error(c, "cannot read from a stream", e);
        c->refs--;
        c->read_done = true;
        rtx__server_stream_end_locked(c, GRPC_STATUS_INTERNAL, "cannot read the next message");
    }
}

void rtx__server_bidi_run(struct call *c) {
    call_count(c);
    c->deadline_ns = deadline_to_ns(c->deadline);
    c->refs = 1; /* held while setting up */
    if (!post_close(c, "cannot watch a call")) {
        rtx__server_call_free(c);
        return;
    }
    bool stopping = stream_list(c);
    pthread_mutex_lock(&c->mu);
    if (stopping)
        rtx__server_stream_end_locked(c, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
    else
        bidi_read_locked(c);
    pthread_mutex_unlock(&c->mu);
    rtx__server_call_unref(c);
}

void rtx__server_bidi_on_read(struct call *c, bool ok) {
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer *bb = c->recv;
    c->recv = NULL;
    bool take = ok && bb && !c->closed && !c->want_status;
    if (!take) {
        c->read_done = true;
        bidi_maybe_end_locked(c);
    } else {
        c->pending++;
        c->refs++; /* the reply to come */
    }
    pthread_mutex_unlock(&c->mu);

    if (take) {
        grpc_byte_buffer_reader reader;
        grpc_slice sl = grpc_empty_slice();
        if (grpc_byte_buffer_reader_init(&reader, bb)) {
            sl = grpc_byte_buffer_reader_readall(&reader);
            grpc_byte_buffer_reader_destroy(&reader);
        }
        static const uint8_t empty;
        const uint8_t *req = GRPC_SLICE_START_PTR(sl);
        rtx_log_set_request_id(c->request_id);
        rtx__server_methods[c->method].bidi(c->srv->daemon, req ? req : &empty,
                                            GRPC_SLICE_LENGTH(sl), &c->bd);
        rtx_log_set_request_id(NULL);
        grpc_slice_unref(sl);
        pthread_mutex_lock(&c->mu);
        bidi_read_locked(c);
        pthread_mutex_unlock(&c->mu);
    }
    if (bb) grpc_byte_buffer_destroy(bb);
    rtx__server_call_unref(c); /* the read's */
}

/* Queues a reply to the message being answered; last: its last one (no longer pending). */
static void bidi_queue(struct rtx_server_bidi *st, void *data, size_t len, bool last) {
    struct call *c = st->call;
    struct msg *m = data ? rtx_malloc(sizeof *m) : NULL;
    grpc_byte_buffer *bb = m ? rtx__server_byte_buffer_take(data, len) : NULL;
    if (data && !m) rtx_free(data);
    pthread_mutex_lock(&c->mu);
    assert(c->pending > 0);
    if (last) c->pending--;
    if (stream_queue_locked(c, m, bb, "out of memory queueing a reply")) stream_pump_locked(c);
    if (!last) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    bidi_maybe_end_locked(c);
    int left = --c->refs; /* the reply's */
    pthread_mutex_unlock(&c->mu);
    if (left == 0) rtx__server_call_free(c);
}

void rtx_server_bidi_reply(struct rtx_server_bidi *st, void *data, size_t len) {
    bidi_queue(st, data, len, true);
}

void rtx_server_bidi_send(struct rtx_server_bidi *st, void *data, size_t len) {
    bidi_queue(st, data, len, false);
}

const volatile int *rtx_server_bidi_cancel_flag(const struct rtx_server_bidi *st) {
    return &st->call->cancel_flag;
}

int64_t rtx_server_bidi_deadline_ns(const struct rtx_server_bidi *st) {
    return st->call->deadline_ns;
}
