/*
 * server-impl.h - internals of rtxd's gRPC server shared by its files: the method table's
 * row, the call and server state, and the steps of a call that more than one file runs.
 * server.c holds the method table, status codes, request ids, replies, start and shutdown;
 * server-call.c a call's common steps, unary calls and arrival (the completion-queue
 * threads); server-stream.c server streaming, async unary and bidirectional calls. Only those
 * files include it.
 */
#ifndef RTX_DAEMON_SERVER_IMPL_H
#define RTX_DAEMON_SERVER_IMPL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "daemon/server.h"

/* ------------------------------------------------------------------------------------------
 * The method table (server.c)
 * ---------------------------------------------------------------------------------------- */

enum method_flags {
    METHOD_UNARY = 1u << 0,            /* one request, one reply */
    METHOD_SERVER_STREAMING = 1u << 1, /* one request, a stream of replies */
    METHOD_ASYNC = 1u << 2,            /* one request, one reply given later from any thread */
    METHOD_BIDI_STREAMING = 1u << 3,   /* a stream of requests, one reply each */
};

struct method {
    const char *path;            /* "/package.Service/Method" */
    unsigned flags;              /* its call kind: one of enum method_flags */
    int requests;                /* outstanding requests per completion queue */
    rtx_server_unary_fn unary;   /* METHOD_UNARY */
    rtx_server_stream_fn stream; /* METHOD_SERVER_STREAMING */
    rtx_server_async_fn async;   /* METHOD_ASYNC */
    rtx_server_bidi_fn bidi;     /* METHOD_BIDI_STREAMING */
};

#define N_METHODS 34 /* rows of rtx__server_methods */
extern const struct method rtx__server_methods[]; /* server.c checks its size */

#define REQUEST_ID_KEY "x-request-id"
#define UNKNOWN_METHOD (-1) /* call.method of a call to a method not in the table */
#define UNKNOWN_REQUESTS 2  /* outstanding grpc_server_request_call per queue */

/* ------------------------------------------------------------------------------------------
 * Server and call state
 * ---------------------------------------------------------------------------------------- */

enum tag_kind {
    TAG_REQUEST,       /* a requested call arrived (or the request failed) */
    TAG_UNARY_DONE,    /* the unary reply batch finished */
    TAG_STREAM_CLOSE,  /* RECV_CLOSE_ON_SERVER: the call is over */
    TAG_STREAM_WRITE,  /* one SEND_MESSAGE finished */
    TAG_STREAM_STATUS, /* SEND_STATUS_FROM_SERVER finished */
    TAG_SHUTDOWN,      /* grpc_server_shutdown_and_notify finished */
    TAG_READ,          /* RECV_MESSAGE of a bidirectional stream finished */
};

struct call;

struct tag {
    enum tag_kind kind;
    struct call *call; /* NULL for TAG_SHUTDOWN */
};

/* The faces of a call that the streaming, async and bidi handlers see. */
struct rtx_server_stream {
    struct call *call;
};
struct rtx_server_async {
    struct call *call;
};
struct rtx_server_bidi {
    struct call *call;
};

struct msg { /* a queued stream message */
    struct msg *next;
    grpc_byte_buffer *bb;
};

struct call {
    struct rtx_server *srv;
    int cq;     /* index of the queue it is bound to */
    int method; /* index into methods[], or UNKNOWN_METHOD */
    struct tag t_request, t_done, t_close, t_write, t_status, t_read;

    /* filled by grpc_server_request_registered_call */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* UNKNOWN_METHOD: the method's path */
    char path[128];            /* UNKNOWN_METHOD: its path as a string */

    char request_id[RTX_SERVER_REQUEST_ID_MAX + 1];
    grpc_metadata out_md; /* x-request-id, echoed in the initial metadata */
    bool out_md_set;
    grpc_metadata pushback_md; /* grpc-retry-pushback-ms, trailing, on RESOURCE_EXHAUSTED */
    bool pushback_set;
    grpc_byte_buffer *reply; /* unary reply in flight */
    grpc_status_code status; /* final status sent (or to send) */
    char status_msg[1024];
    grpc_slice status_details;
    bool details_set;
    int cancelled;           /* RECV_CLOSE_ON_SERVER output */
    struct timespec t_start; /* CLOCK_MONOTONIC when the call arrived */

    /* streaming, under mu */
    struct rtx_server_stream st;
    pthread_mutex_t mu;
    int refs;
    struct msg *head, *tail;
    grpc_byte_buffer *writing; /* message of the write in flight */
    bool md_sent;              /* initial metadata went out */
    bool write_in_flight;
    bool closed;      /* the call is over for the client */
    bool want_status; /* end with `status` once the queue is sent */
    bool status_started;
    bool source_done; /* the source ended or was stopped */
    void (*stop)(void *ctx, uint64_t handle);
    void *stop_ctx;
    uint64_t stop_handle;
    struct call *prev, *next; /* server's list of live streams (under srv->mu) */
    bool listed;

    /* async and bidi calls */
    struct rtx_server_async as;
    struct rtx_server_bidi bd;
    volatile int cancel_flag; /* set once the call is over for the client */
    int64_t deadline_ns;      /* CLOCK_MONOTONIC; 0: none */
    bool finished;            /* async: rtx_server_async_finish ran */
    grpc_byte_buffer *recv;   /* bidi: the message being read */
    int pending;              /* bidi: messages handed to the handler without a reply */
    bool read_done;           /* bidi: no more reads (half-close, error or ending) */
    bool counted;             /* async or bidi: counted in srv->live_calls */
    struct rtx_server_watch *watches; /* async and bidi: run when the call ends early */
};

struct cq_thread {
    grpc_completion_queue *cq;
    pthread_t thread;
    bool running;
};

struct rtx_server {
    grpc_server *server;
    int n_cqs;
    struct cq_thread *cqs;
    void *registered[N_METHODS];
    int64_t max_message_bytes;
    struct rtx_daemon *daemon;
    atomic_bool stopping; /* no more requests are posted once set */

    pthread_mutex_t mu;  /* guards what follows */
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool shutdown_begun, notified, shutdown_done;
    struct call *streams; /* live streaming calls */
    /* async and bidi calls that arrived and are not freed: their answers come from other
     * threads, so shutdown waits for them before it destroys the server and its queues */
    int live_calls;
    struct tag t_shutdown;
};

struct cq_arg {
    struct rtx_server *srv;
    int index;
};

/* ------------------------------------------------------------------------------------------
 * Steps shared between the files
 * ---------------------------------------------------------------------------------------- */

/* --- status codes, replies, start and shutdown (server.c) --- */

/* A byte buffer over rtx_malloc'ed data (taken; freed by grpc with rtx_free). */
grpc_byte_buffer *rtx__server_byte_buffer_take(void *data, size_t len);

/* --- calls and their arrival (server-call.c) --- */

void rtx__server_call_free(struct call *c);

bool rtx__server_call_has(const struct call *c, unsigned flag);

void rtx__server_call_unref(struct call *c);

void *rtx__server_cq_main(void *arg);

void rtx__server_dispatch(struct rtx_server *s, struct tag *t, bool ok);

void rtx__server_drop_queue_locked(struct call *c);

/* Logs that a batch of call c could not start: what says which ("cannot answer a call"). */
void rtx__server_log_batch_error(const struct call *c, const char *what, grpc_call_error e);

/* Fills op with SEND_INITIAL_METADATA unless c's initial metadata already went out (marking
 * it sent). Returns the number of ops filled: 0 or 1. */
size_t rtx__server_op_initial_metadata_once(struct call *c, grpc_op *op);

/* Fills op with RECV_CLOSE_ON_SERVER, reporting into c->cancelled. */
void rtx__server_op_recv_close(struct call *c, grpc_op *op);

/* Fills op with SEND_MESSAGE of bb (still owned by the caller until the batch completes). */
void rtx__server_op_send_message(grpc_op *op, grpc_byte_buffer *bb);

void rtx__server_op_status(struct call *c, grpc_op *op);

/* Posts one request for `method` on queue `cq`; UNKNOWN_METHOD requests a call to any method
 * outside the table (answered UNIMPLEMENTED: unrequested, such a call would wait forever). */
int rtx__server_post_request(struct rtx_server *s, int method, int cq, struct rtx_err *err);

/* Records rep's status on c and fills ops (room for 3) with a one-reply batch: the initial
 * metadata, the message when rep is OK (rep->data is taken into c->reply; otherwise freed)
 * and the status. rep->data is NULL after. Returns the number of ops filled. */
size_t rtx__server_reply_ops(struct call *c, struct rtx_server_reply *rep, grpc_op *ops);

/* Whether call c's request may go to its handler: false, with rep set to the error, when the
 * request message is missing or the call's deadline has already passed. */
bool rtx__server_request_usable(const struct call *c, const uint8_t *req,
                                struct rtx_server_reply *rep);

/* --- streams, async and bidi calls (server-stream.c) --- */

/* References: the close batch, the handler until finish, the reply batch. */
void rtx__server_async_run(struct call *c, const uint8_t *req, size_t len);

void rtx__server_bidi_on_read(struct call *c, bool ok);

void rtx__server_bidi_run(struct call *c);

/* Ends the stream with a status (dropping queued messages) unless it already ends. */
void rtx__server_stream_end_locked(struct call *c, grpc_status_code code, const char *msg);

/* Completion of RECV_CLOSE_ON_SERVER: the call is over; stop the source if it still runs. */
void rtx__server_stream_on_close(struct call *c);

void rtx__server_stream_on_write(struct call *c, bool ok);

void rtx__server_stream_run(struct call *c, const uint8_t *req, size_t len);

/* Completion of RECV_CLOSE_ON_SERVER of an async or bidi call. */
void rtx__server_watched_on_close(struct call *c);

#endif /* RTX_DAEMON_SERVER_IMPL_H */
