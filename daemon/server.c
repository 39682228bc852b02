/*
 * server.c - rtxd's gRPC server on the gRPC C core API: completion-queue threads, the method
 * table of rtx.v1.Jobs, rtx.v1.Admin and inference.GRPCInferenceService, the call state
 * machines, request ids, deadlines and an orderly shutdown. Handlers live in handlers-jobs.c,
 * handlers-admin.c and handlers-infer.c.
 *
 * DESIGN
 * Each of the cq_threads threads owns one completion queue and loops on
 * grpc_completion_queue_next. For every method of the static table and every queue, a few
 * grpc_server_request_registered_call are outstanding; each one that completes is replaced
 * at once, so arrivals never wait for a handler. Every method is registered with
 * GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, so the request message (each method takes
 * exactly one) arrives with the call and no RECV_MESSAGE batch is needed. A couple of
 * grpc_server_request_call per queue catch methods outside the table, which get UNIMPLEMENTED
 * (an unrequested call would otherwise wait until its deadline).
 *
 * A call is a small state machine; its completion tags (struct tag) are embedded in it and
 * name the step that finished. A call is bound to the queue it was requested on, so all its
 * completions run on one thread.
 * - Unary: the handler runs on the queue's thread (it may block briefly, e.g. on the journal
 *   commit), then one batch SEND_INITIAL_METADATA + SEND_MESSAGE + SEND_STATUS +
 *   RECV_CLOSE_ON_SERVER answers; its completion frees the call.
 * - Server streaming (Jobs.Wait): RECV_CLOSE_ON_SERVER is posted first, so the close tag
 *   reports a client that goes away (or a deadline that passes). The handler registers a
 *   source (a job watch) whose callback runs on other threads and only queues serialized
 *   messages under the call's mutex, starting a SEND_MESSAGE batch when none is in flight
 *   (gRPC allows one outstanding write). After the last message the status batch goes out.
 *   When the client goes away, the close tag stops the source (rtx_jobs_unwatch), after which
 *   no callback runs. The call is reference counted: one reference for the close batch, one
 *   for the source until it is done or stopped, one per batch in flight; the last one frees
 *   it and unrefs the grpc_call.
 * - Async unary (ModelInfer): RECV_CLOSE_ON_SERVER is posted first, then the handler runs and
 *   returns; rtx_server_async_finish, from any thread (an inference worker), starts the reply
 *   batch. The close completion sets the call's cancel flag when the call ended before its
 *   answer (client cancel, deadline, shutdown), which the inference core polls. References:
 *   the close batch, the handler until finish, the reply batch.
 * - Bidirectional streaming (ModelStreamInfer, registered without an initial payload): the
 *   close batch, then one RECV_MESSAGE at a time; each message goes to the handler and counts
 *   as pending until its rtx_server_bidi_reply, which queues the reply on the same write
 *   queue as server streaming (completion order). When the client half-closes and nothing is
 *   pending, the stream ends with OK. References: the close batch, the read in flight, one
 *   per pending reply, one per write or status batch. Such streams are on the server's list
 *   of live streams, so shutdown ends them like Wait streams.
 * The request id is the client's x-request-id when it is usable, else a random one; it is set
 * as the thread's log request id around the handler and echoed in the initial metadata.
 *
 * Shutdown follows grpc's rules: shutdown_and_notify, end every live stream with UNAVAILABLE
 * (so Wait clients learn the server is going rather than waiting for a grace period), wait for
 * the notification up to the grace, cancel_all_calls past it, destroy the server, then shut
 * each queue down and let its thread drain it to GRPC_QUEUE_SHUTDOWN.
 */
#include "daemon/server.h"

#include <assert.h>
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"

/* ------------------------------------------------------------------------------------------
 * The method table
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

/* One row per rpc of proto/rtx/v1/jobs.proto, admin.proto and
 * proto/inference/grpc_service.proto: its path, its call kind, the requests kept outstanding
 * per completion queue, and the handler of that kind. Adding an rpc is one row here and its
 * handler's prototype in server.h. */
#define INFER "/inference.GRPCInferenceService/"

static const struct method methods[] = {
    {.path = "/rtx.v1.Jobs/Submit", .flags = METHOD_UNARY, .requests = 4,
     .unary = rtx__daemon_jobs_submit},
    {.path = "/rtx.v1.Jobs/Get", .flags = METHOD_UNARY, .requests = 4,
     .unary = rtx__daemon_jobs_get},
    {.path = "/rtx.v1.Jobs/Wait", .flags = METHOD_SERVER_STREAMING, .requests = 4,
     .stream = rtx__daemon_jobs_wait},
    {.path = "/rtx.v1.Jobs/Cancel", .flags = METHOD_UNARY, .requests = 2,
     .unary = rtx__daemon_jobs_cancel},
    {.path = "/rtx.v1.Jobs/List", .flags = METHOD_UNARY, .requests = 2,
     .unary = rtx__daemon_jobs_list},
    {.path = "/rtx.v1.Jobs/GetOutputs", .flags = METHOD_UNARY, .requests = 2,
     .unary = rtx__daemon_jobs_get_outputs},
    {.path = "/rtx.v1.Admin/Status", .flags = METHOD_UNARY, .requests = 2,
     .unary = rtx__daemon_admin_status},
    {.path = "/rtx.v1.Admin/Devices", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__daemon_admin_devices},
    {.path = "/rtx.v1.Admin/Health", .flags = METHOD_UNARY, .requests = 2,
     .unary = rtx__daemon_admin_health},
    {.path = "/rtx.v1.Admin/Config", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__daemon_admin_config},
    {.path = "/rtx.v1.Admin/Pools", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__daemon_admin_pools},
    {.path = "/rtx.v1.Admin/Lanes", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__daemon_admin_lanes},
    {.path = "/rtx.v1.Admin/Drain", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__daemon_admin_drain},
    {.path = INFER "ModelInfer", .flags = METHOD_ASYNC, .requests = 8,
     .async = rtx__infer_model_infer},
    {.path = INFER "ModelStreamInfer", .flags = METHOD_BIDI_STREAMING, .requests = 2,
     .bidi = rtx__infer_model_stream_infer},
    {.path = INFER "ServerLive", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_server_live},
    {.path = INFER "ServerReady", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_server_ready},
    {.path = INFER "ModelReady", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_model_ready},
    {.path = INFER "ServerMetadata", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_server_metadata},
    {.path = INFER "ModelMetadata", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_model_metadata},
    {.path = INFER "ModelConfig", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_model_config},
    {.path = INFER "ModelStatistics", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_model_statistics},
    {.path = INFER "RepositoryIndex", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_repository_index},
    {.path = INFER "RepositoryModelLoad", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_repository_model_load},
    {.path = INFER "RepositoryModelUnload", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_repository_model_unload},
    {.path = INFER "SystemSharedMemoryStatus", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_system_shm_status},
    {.path = INFER "SystemSharedMemoryRegister", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_system_shm_register},
    {.path = INFER "SystemSharedMemoryUnregister", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_system_shm_unregister},
    {.path = INFER "CudaSharedMemoryStatus", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_cuda_shm_status},
    {.path = INFER "CudaSharedMemoryRegister", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_cuda_shm_register},
    {.path = INFER "CudaSharedMemoryUnregister", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_cuda_shm_unregister},
    {.path = INFER "TraceSetting", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_trace_setting},
    {.path = INFER "LogSettings", .flags = METHOD_UNARY, .requests = 1,
     .unary = rtx__infer_log_settings},
};
#undef INFER
#define N_METHODS ((int)(sizeof methods / sizeof methods[0]))
static_assert(sizeof methods / sizeof methods[0] == 33,
              "one entry per rpc of proto/rtx/v1/jobs.proto, admin.proto and "
              "proto/inference/grpc_service.proto");

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
    char status_msg[256];
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

/* ------------------------------------------------------------------------------------------
 * Status codes, request ids
 * ---------------------------------------------------------------------------------------- */

grpc_status_code rtx_server_status_from_err(int code) {
    switch (code) {
    case RTX_OK: return GRPC_STATUS_OK;
    case RTX_EINVAL:
    case RTX_EGRAPH:
    case RTX_EFORMAT: return GRPC_STATUS_INVALID_ARGUMENT;
    case RTX_ENOTFOUND: return GRPC_STATUS_NOT_FOUND;
    case RTX_ELIMIT:
    case RTX_EOVERLOAD: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case RTX_EUNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case RTX_ECANCELED: return GRPC_STATUS_CANCELLED;
    case RTX_EEXPIRED: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case RTX_EUNSUPPORTED: return GRPC_STATUS_UNIMPLEMENTED;
    default: return GRPC_STATUS_INTERNAL; /* EIO, ENOMEM, EINTERNAL, EGPU, -errno */
    }
}

static const char *const status_names[] = {
    [GRPC_STATUS_OK] = "OK",
    [GRPC_STATUS_CANCELLED] = "CANCELLED",
    [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
    [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
    [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [GRPC_STATUS_ABORTED] = "ABORTED",
    [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [GRPC_STATUS_INTERNAL] = "INTERNAL",
    [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
    [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
    [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

const char *rtx_server_status_name(grpc_status_code code) {
    if ((unsigned)code >= sizeof status_names / sizeof status_names[0] || !status_names[code])
        return "UNKNOWN";
    return status_names[code];
}

/* splitmix64: the fallback when getrandom(2) is unavailable. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void rtx_server_request_id_new(char id[RTX_SERVER_REQUEST_ID_LEN]) {
    static atomic_uint_fast64_t counter;
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, GRND_NONBLOCK) != (ssize_t)sizeof raw) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t seed = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^
                        ((uint64_t)getpid() << 48) ^ atomic_fetch_add(&counter, 1);
        uint64_t a = mix64(seed), b = mix64(a);
        memcpy(raw, &a, 8);
        memcpy(raw + 8, &b, 8);
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        id[2 * i] = hex[raw[i] >> 4];
        id[2 * i + 1] = hex[raw[i] & 15];
    }
    id[2 * sizeof raw] = '\0';
}

bool rtx_server_request_id_valid(const char *s, size_t len) {
    if (len == 0 || len > RTX_SERVER_REQUEST_ID_MAX) return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~') return false;
    return true;
}

/* ------------------------------------------------------------------------------------------
 * Replies
 * ---------------------------------------------------------------------------------------- */

void rtx_server_reply_status(struct rtx_server_reply *rep, grpc_status_code code, const char *fmt,
                             ...) {
    rtx_free(rep->data);
    rep->data = NULL;
    rep->len = 0;
    rep->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->msg, sizeof rep->msg, fmt, ap);
    va_end(ap);
}

void rtx_server_reply_err(struct rtx_server_reply *rep, const struct rtx_err *err) {
    grpc_status_code code = rtx_server_status_from_err(err->code);
    if (code == GRPC_STATUS_OK) code = GRPC_STATUS_INTERNAL; /* an error without a code */
    rtx_server_reply_status(rep, code, "%s", err->msg[0] ? err->msg : rtx_strerror(err->code));
}

void rtx_server_reply_pack(struct rtx_server_reply *rep, const ProtobufCMessage *msg,
                           int64_t max_bytes) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (max_bytes > 0 && len > (uint64_t)max_bytes) {
        rtx_server_reply_status(rep, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                "reply of %zu bytes exceeds server.max_message_bytes (%lld)", len,
                                (long long)max_bytes);
        return;
    }
    void *data = rtx_malloc(len ? len : 1);
    if (!data) {
        rtx_server_reply_status(rep, GRPC_STATUS_INTERNAL,
                                "out of memory packing a %zu-byte reply", len);
        return;
    }
    protobuf_c_message_pack(msg, data);
    rtx_free(rep->data);
    rep->code = GRPC_STATUS_OK;
    rep->msg[0] = '\0';
    rep->data = data;
    rep->len = len;
}

/* A byte buffer over rtx_malloc'ed data (taken; freed by grpc with rtx_free). */
static grpc_byte_buffer *byte_buffer_take(void *data, size_t len) {
    grpc_slice sl;
    if (len == 0) {
        rtx_free(data);
        sl = grpc_empty_slice();
    } else {
        sl = grpc_slice_new(data, len, rtx_free);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

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
    return c->method == UNKNOWN_METHOD ? c->path : methods[c->method].path;
}

static bool call_has(const struct call *c, unsigned flag) {
    return c->method != UNKNOWN_METHOD && (methods[c->method].flags & flag);
}

/* Calls whose end call_free logs: those with a stream of replies. */
static bool call_is_stream(const struct call *c) {
    return call_has(c, METHOD_SERVER_STREAMING | METHOD_BIDI_STREAMING);
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

static void drop_queue_locked(struct call *c) {
    while (c->head) {
        struct msg *m = c->head;
        c->head = m->next;
        grpc_byte_buffer_destroy(m->bb);
        rtx_free(m);
    }
    c->tail = NULL;
}

static void call_free(struct call *c) {
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
    drop_queue_locked(c);
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

static void call_unref(struct call *c) {
    pthread_mutex_lock(&c->mu);
    int n = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (n == 0) call_free(c);
}

/* Posts one request for `method` on queue `cq`; UNKNOWN_METHOD requests a call to any method
 * outside the table (answered UNIMPLEMENTED: unrequested, such a call would wait forever). */
static int post_request(struct rtx_server *s, int method, int cq, struct rtx_err *err) {
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
            (methods[method].flags & METHOD_BIDI_STREAMING) ? NULL : &c->payload, q, q,
            &c->t_request);
    if (e != GRPC_CALL_OK) {
        call_free(c);
        return rtx_err_set(err, RTX_EINTERNAL, "requesting a call for %s: %s",
                           method == UNKNOWN_METHOD ? "unknown methods" : methods[method].path,
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

static void op_status(struct call *c, grpc_op *op) {
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
static size_t op_initial_metadata_once(struct call *c, grpc_op *op) {
    if (c->md_sent) return 0;
    op_initial_metadata(c, op);
    c->md_sent = true;
    return 1;
}

/* Fills op with SEND_MESSAGE of bb (still owned by the caller until the batch completes). */
static void op_send_message(grpc_op *op, grpc_byte_buffer *bb) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_MESSAGE;
    op->data.send_message.send_message = bb;
}

/* Fills op with RECV_CLOSE_ON_SERVER, reporting into c->cancelled. */
static void op_recv_close(struct call *c, grpc_op *op) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op->data.recv_close_on_server.cancelled = &c->cancelled;
}

/* Logs that a batch of call c could not start: what says which ("cannot answer a call"). */
static void log_batch_error(const struct call *c, const char *what, grpc_call_error e) {
    rtx_log(RTX_LOG_ERROR, what, "method", call_path(c), "error", grpc_call_error_to_string(e),
            NULL);
}

/* Records rep's status on c and fills ops (room for 3) with a one-reply batch: the initial
 * metadata, the message when rep is OK (rep->data is taken into c->reply; otherwise freed)
 * and the status. rep->data is NULL after. Returns the number of ops filled. */
static size_t reply_ops(struct call *c, struct rtx_server_reply *rep, grpc_op *ops) {
    c->status = rep->code;
    snprintf(c->status_msg, sizeof c->status_msg, "%s", rep->code ? rep->msg : "");
    size_t n = 0;
    op_initial_metadata(c, &ops[n++]);
    if (rep->code == GRPC_STATUS_OK) {
        c->reply = byte_buffer_take(rep->data, rep->len);
        op_send_message(&ops[n++], c->reply);
    } else {
        rtx_free(rep->data);
    }
    rep->data = NULL;
    op_status(c, &ops[n++]);
    return n;
}

/* Whether call c's request may go to its handler: false, with rep set to the error, when the
 * request message is missing or the call's deadline has already passed. */
static bool request_usable(const struct call *c, const uint8_t *req,
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
    size_t n = reply_ops(c, rep, ops);
    op_recv_close(c, &ops[n++]);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL);
    if (e != GRPC_CALL_OK) {
        log_batch_error(c, "cannot answer a call", e);
        call_free(c);
    }
}

static void unary_run(struct call *c, const uint8_t *req, size_t len) {
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (request_usable(c, req, &rep)) {
        rtx_log_set_request_id(c->request_id);
        methods[c->method].unary(c->srv->daemon, req, len, &rep);
        rtx_log_set_request_id(NULL);
    }
    unary_reply(c, &rep);
}

/* --- streaming --------------------------------------------------------------------------- */

static void stream_start_status_locked(struct call *c) {
    grpc_op ops[2];
    size_t n = op_initial_metadata_once(c, ops);
    op_status(c, &ops[n++]);
    c->status_started = true;
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_status, NULL);
    if (e != GRPC_CALL_OK) {
        log_batch_error(c, "cannot end a stream", e);
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
    size_t n = op_initial_metadata_once(c, ops);
    op_send_message(&ops[n++], c->writing);
    c->write_in_flight = true;
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_write, NULL);
    if (e != GRPC_CALL_OK) {
        log_batch_error(c, "cannot write to a stream", e);
        grpc_byte_buffer_destroy(c->writing);
        c->writing = NULL;
        c->write_in_flight = false;
        c->refs--;
        c->closed = true;
        drop_queue_locked(c);
        grpc_call_cancel(c->call, NULL);
    }
}

/* Starts the next write, or the status once the queue is empty. Caller holds c->mu and a
 * reference other than the one a started batch takes. */
static void stream_pump_locked(struct call *c) {
    if (c->write_in_flight || c->status_started) return;
    if (c->closed) {
        drop_queue_locked(c);
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
    op_recv_close(c, &op);
    c->refs++;
    grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL);
    if (e != GRPC_CALL_OK) {
        c->refs--;
        log_batch_error(c, what, e);
        return false;
    }
    return true;
}

/* Ends the stream with a status (dropping queued messages) unless it already ends. */
static void stream_end_locked(struct call *c, grpc_status_code code, const char *msg) {
    if (c->closed || c->want_status) return;
    c->want_status = true;
    c->status = code;
    snprintf(c->status_msg, sizeof c->status_msg, "%s", msg ? msg : "");
    drop_queue_locked(c);
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
        stream_end_locked(c, GRPC_STATUS_INTERNAL, oom_msg);
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
    grpc_byte_buffer *bb = m ? byte_buffer_take(data, len) : NULL;
    if (!m) rtx_free(data);
    pthread_mutex_lock(&c->mu);
    if (stream_queue_locked(c, m, bb, "out of memory queueing a message")) {
        if (last) stream_want_ok_locked(c);
        stream_pump_locked(c);
    }
    bool free_now = last && stream_source_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (free_now) call_free(c);
}

void rtx_server_stream_end(struct rtx_server_stream *st, grpc_status_code code, const char *msg,
                           bool last) {
    struct call *c = st->call;
    pthread_mutex_lock(&c->mu);
    stream_end_locked(c, code, msg);
    bool free_now = last && stream_source_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (free_now) call_free(c);
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

static void stream_run(struct call *c, const uint8_t *req, size_t len) {
    c->refs = 0;
    if (!post_close(c, "cannot start a stream")) { /* the close batch's reference */
        call_free(c);
        return;
    }
    c->refs++; /* the source, until it ends or is stopped */

    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (stream_list(c)) {
        rtx_server_reply_status(&rep, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
    } else if (request_usable(c, req, &rep)) {
        rtx_log_set_request_id(c->request_id);
        methods[c->method].stream(c->srv->daemon, req, len, &c->st, &rep);
        rtx_log_set_request_id(NULL);
    }
    rtx_free(rep.data);
    pthread_mutex_lock(&c->mu);
    if (rep.code != GRPC_STATUS_OK) {
        stream_end_locked(c, rep.code, rep.msg);
        stream_source_done_locked(c); /* the close reference remains */
    } else {
        assert(c->stop || c->source_done); /* a live source must be stoppable */
    }
    pthread_mutex_unlock(&c->mu);
}

/* Completion of RECV_CLOSE_ON_SERVER: the call is over; stop the source if it still runs. */
static void stream_on_close(struct call *c) {
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    drop_queue_locked(c);
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
    call_unref(c);
}

static void stream_on_write(struct call *c, bool ok) {
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer_destroy(c->writing);
    c->writing = NULL;
    c->write_in_flight = false;
    if (!ok) {
        c->closed = true;
        drop_queue_locked(c);
    }
    stream_pump_locked(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
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
static void async_run(struct call *c, const uint8_t *req, size_t len) {
    call_count(c);
    c->deadline_ns = deadline_to_ns(c->deadline);
    c->refs = 0;
    if (!post_close(c, "cannot watch a call")) {
        call_free(c);
        return;
    }
    c->refs++; /* the handler's, until finish */
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (!request_usable(c, req, &rep)) {
        rtx_server_async_finish(&c->as, &rep);
    } else {
        rtx_log_set_request_id(c->request_id);
        methods[c->method].async(c->srv->daemon, req, len, &c->as);
        rtx_log_set_request_id(NULL);
    }
}

void rtx_server_async_finish(struct rtx_server_async *a, struct rtx_server_reply *rep) {
    struct call *c = a->call;
    pthread_mutex_lock(&c->mu);
    assert(!c->finished);
    c->finished = true;
    grpc_op ops[3];
    size_t n = reply_ops(c, rep, ops);
    c->refs++; /* the reply batch */
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL);
    if (e != GRPC_CALL_OK) {
        log_batch_error(c, "cannot answer a call", e);
        c->refs--;
        grpc_call_cancel(c->call, NULL);
    }
    int left = --c->refs; /* the handler's */
    pthread_mutex_unlock(&c->mu);
    if (left == 0) call_free(c);
}

const volatile int *rtx_server_async_cancel_flag(const struct rtx_server_async *a) {
    return &a->call->cancel_flag;
}

int64_t rtx_server_async_deadline_ns(const struct rtx_server_async *a) {
    return a->call->deadline_ns;
}

/* Completion of RECV_CLOSE_ON_SERVER of an async or bidi call. */
static void watched_on_close(struct call *c) {
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    /* over before its answer went out: cancelled by the client, the deadline or shutdown */
    bool answered = call_has(c, METHOD_ASYNC) ? c->finished : c->status_started;
    if (c->cancelled || !answered) c->cancel_flag = 1;
    drop_queue_locked(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
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
        log_batch_error(c, "cannot read from a stream", e);
        c->refs--;
        c->read_done = true;
        stream_end_locked(c, GRPC_STATUS_INTERNAL, "cannot read the next message");
    }
}

static void bidi_run(struct call *c) {
    call_count(c);
    c->deadline_ns = deadline_to_ns(c->deadline);
    c->refs = 1; /* held while setting up */
    if (!post_close(c, "cannot watch a call")) {
        call_free(c);
        return;
    }
    bool stopping = stream_list(c);
    pthread_mutex_lock(&c->mu);
    if (stopping)
        stream_end_locked(c, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
    else
        bidi_read_locked(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
}

static void bidi_on_read(struct call *c, bool ok) {
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
        methods[c->method].bidi(c->srv->daemon, req ? req : &empty, GRPC_SLICE_LENGTH(sl),
                                &c->bd);
        rtx_log_set_request_id(NULL);
        grpc_slice_unref(sl);
        pthread_mutex_lock(&c->mu);
        bidi_read_locked(c);
        pthread_mutex_unlock(&c->mu);
    }
    if (bb) grpc_byte_buffer_destroy(bb);
    call_unref(c); /* the read's */
}

void rtx_server_bidi_reply(struct rtx_server_bidi *st, void *data, size_t len) {
    struct call *c = st->call;
    struct msg *m = data ? rtx_malloc(sizeof *m) : NULL;
    grpc_byte_buffer *bb = m ? byte_buffer_take(data, len) : NULL;
    if (data && !m) rtx_free(data);
    pthread_mutex_lock(&c->mu);
    assert(c->pending > 0);
    c->pending--;
    if (stream_queue_locked(c, m, bb, "out of memory queueing a reply")) stream_pump_locked(c);
    bidi_maybe_end_locked(c);
    int left = --c->refs; /* the reply's */
    pthread_mutex_unlock(&c->mu);
    if (left == 0) call_free(c);
}

const volatile int *rtx_server_bidi_cancel_flag(const struct rtx_server_bidi *st) {
    return &st->call->cancel_flag;
}

int64_t rtx_server_bidi_deadline_ns(const struct rtx_server_bidi *st) {
    return st->call->deadline_ns;
}

/* --- arrival ----------------------------------------------------------------------------- */

static void call_arrived(struct call *c, bool ok) {
    struct rtx_server *s = c->srv;
    if (!ok) { /* the server is shutting down */
        call_free(c);
        return;
    }
    if (!atomic_load(&s->stopping)) {
        struct rtx_err err;
        if (post_request(s, c->method, c->cq, &err) != 0)
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
    if (call_has(c, METHOD_BIDI_STREAMING))
        bidi_run(c);
    else if (call_has(c, METHOD_SERVER_STREAMING))
        stream_run(c, req, len);
    else if (call_has(c, METHOD_ASYNC))
        async_run(c, req, len);
    else
        unary_run(c, req, len);
    grpc_slice_unref(sl);
}

static void dispatch(struct rtx_server *s, struct tag *t, bool ok) {
    struct call *c = t->call;
    switch (t->kind) {
    case TAG_REQUEST: call_arrived(c, ok); break;
    case TAG_UNARY_DONE:
        if (call_has(c, METHOD_ASYNC)) {
            call_log(c, ok ? rtx_server_status_name(c->status) : "CANCELLED");
            call_unref(c);
            break;
        }
        call_log(c, c->cancelled ? "CANCELLED" : rtx_server_status_name(c->status));
        call_free(c);
        break;
    case TAG_STREAM_CLOSE:
        if (call_has(c, METHOD_ASYNC | METHOD_BIDI_STREAMING))
            watched_on_close(c);
        else
            stream_on_close(c);
        break;
    case TAG_READ: bidi_on_read(c, ok); break;
    case TAG_STREAM_WRITE: stream_on_write(c, ok); break;
    case TAG_STREAM_STATUS: call_unref(c); break;
    case TAG_SHUTDOWN:
        pthread_mutex_lock(&s->mu);
        s->notified = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        break;
    }
}

struct cq_arg {
    struct rtx_server *srv;
    int index;
};

static void *cq_main(void *arg) {
    struct rtx_server *s = ((struct cq_arg *)arg)->srv;
    grpc_completion_queue *cq = s->cqs[((struct cq_arg *)arg)->index].cq;
    rtx_free(arg);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success != 0);
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Start and shutdown
 * ---------------------------------------------------------------------------------------- */

/* gRPC's own log lines join the daemon's. */
static void grpc_log_to_rtx(gpr_log_func_args *a) {
    enum rtx_log_level level = a->severity == GPR_LOG_SEVERITY_ERROR  ? RTX_LOG_ERROR
                               : a->severity == GPR_LOG_SEVERITY_INFO ? RTX_LOG_INFO
                                                                      : RTX_LOG_DEBUG;
    if (!rtx_log_enabled(level)) return;
    char where[256];
    snprintf(where, sizeof where, "%s:%d", a->file ? a->file : "?", a->line);
    rtx_log(level, "grpc", "detail", a->message ? a->message : "", "at", where, NULL);
}

/* Drains and destroys every queue (their threads, if running, exit at GRPC_QUEUE_SHUTDOWN). */
static void queues_destroy(struct rtx_server *s) {
    for (int i = 0; i < s->n_cqs; i++)
        if (s->cqs[i].cq) grpc_completion_queue_shutdown(s->cqs[i].cq);
    for (int i = 0; i < s->n_cqs; i++) {
        if (!s->cqs[i].cq) continue;
        if (s->cqs[i].running) {
            pthread_join(s->cqs[i].thread, NULL);
        } else {
            for (;;) {
                grpc_event ev = grpc_completion_queue_next(
                    s->cqs[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
                if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
                if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success != 0);
            }
        }
        grpc_completion_queue_destroy(s->cqs[i].cq);
        s->cqs[i].cq = NULL;
    }
}

static void server_free_parts(struct rtx_server *s) {
    if (s->cqs) queues_destroy(s);
    rtx_free(s->cqs);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    rtx_free(s);
    grpc_shutdown();
}

int rtx_server_start(const struct rtx_server_options *opt, struct rtx_server **out,
                     int *bound_port, struct rtx_err *err) {
    if (!opt || !out || !opt->listen || !opt->listen[0] || opt->cq_threads < 1 ||
        opt->max_message_bytes < 1)
        return rtx_err_set(err, RTX_EINVAL, "server: invalid options");
    *out = NULL;
    struct rtx_server *s = rtx_calloc(1, sizeof *s);
    if (!s) return rtx_err_set(err, RTX_ENOMEM, "out of memory for the server");
    s->cqs = rtx_calloc((size_t)opt->cq_threads, sizeof *s->cqs);
    if (!s->cqs) {
        rtx_free(s);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory for the server");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    s->n_cqs = opt->cq_threads;
    s->max_message_bytes = opt->max_message_bytes;
    s->daemon = opt->daemon;
    s->t_shutdown = (struct tag){TAG_SHUTDOWN, NULL};

    gpr_set_log_function(grpc_log_to_rtx);
    grpc_init();

    int limit = opt->max_message_bytes > INT_MAX ? INT_MAX : (int)opt->max_message_bytes;
    grpc_arg args[3] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = limit},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = limit},
        /* without this a second rtxd could bind the same port and share its calls */
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0},
    };
    grpc_channel_args chargs = {.num_args = 3, .args = args};
    s->server = grpc_server_create(&chargs, NULL);
    for (int i = 0; i < s->n_cqs; i++) {
        s->cqs[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->cqs[i].cq, NULL);
    }
    for (int m = 0; m < N_METHODS; m++)
        s->registered[m] = grpc_server_register_method(
            s->server, methods[m].path, NULL,
            (methods[m].flags & METHOD_BIDI_STREAMING)
                ? GRPC_SRM_PAYLOAD_NONE
                : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);

    /* the threads poll before the server starts; a failure up to the port leaves no listener,
     * so the server can be destroyed without a shutdown */
    int rc = 0;
    for (int i = 0; i < s->n_cqs && rc == 0; i++) {
        struct cq_arg *a = rtx_malloc(sizeof *a);
        if (!a) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory for a server thread");
            break;
        }
        *a = (struct cq_arg){s, i};
        int e = pthread_create(&s->cqs[i].thread, NULL, cq_main, a);
        if (e != 0) {
            rtx_free(a);
            rc = rtx_err_set(err, -e, "cannot start a server thread: %s", strerror(e));
            break;
        }
        s->cqs[i].running = true;
    }
    int port = 0;
    if (rc == 0) {
        grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
        port = grpc_server_add_http2_port(s->server, opt->listen, creds);
        grpc_server_credentials_release(creds);
        if (port == 0)
            rc = rtx_err_set(err, RTX_EUNAVAILABLE,
                             "server.listen: cannot listen on %s (address in use or not a valid "
                             "host:port)",
                             opt->listen);
    }
    if (rc != 0) {
        grpc_server_destroy(s->server);
        s->server = NULL;
        server_free_parts(s);
        return rc;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < s->n_cqs && rc == 0; i++) {
        for (int m = 0; m < N_METHODS && rc == 0; m++)
            for (int k = 0; k < methods[m].requests && rc == 0; k++)
                rc = post_request(s, m, i, err);
        for (int k = 0; k < UNKNOWN_REQUESTS && rc == 0; k++)
            rc = post_request(s, UNKNOWN_METHOD, i, err);
    }
    if (rc != 0) {
        rtx_server_free(s);
        return rc;
    }
    if (bound_port) *bound_port = port;
    *out = s;
    return 0;
}

/* Ends every live stream with UNAVAILABLE; new ones see shutdown_begun in stream_run. */
static void end_streams(struct rtx_server *s) {
    pthread_mutex_lock(&s->mu);
    for (struct call *c = s->streams; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        stream_end_locked(c, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Waits for the shutdown notification up to ms (< 0: no limit). Returns whether it came. */
static bool wait_notified(struct rtx_server *s, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (ms >= 0) {
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&s->mu);
    while (!s->notified) {
        if (ms < 0) {
            pthread_cond_wait(&s->cond, &s->mu);
        } else if (pthread_cond_timedwait(&s->cond, &s->mu, &until) == ETIMEDOUT) {
            break;
        }
    }
    bool done = s->notified;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void rtx_server_shutdown(struct rtx_server *s, int grace_ms) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (s->shutdown_begun) {
        while (!s->shutdown_done)
            pthread_cond_wait(&s->cond, &s->mu);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->shutdown_begun = true;
    atomic_store(&s->stopping, true);
    pthread_mutex_unlock(&s->mu);

    grpc_server_shutdown_and_notify(s->server, s->cqs[0].cq, &s->t_shutdown);
    end_streams(s);
    if (!wait_notified(s, grace_ms < 0 ? 0 : grace_ms)) {
        rtx_log(RTX_LOG_WARN, "server shutdown: cancelling the calls still in flight", NULL);
        grpc_server_cancel_all_calls(s->server);
        wait_notified(s, -1);
    }
    /* gRPC's notification does not wait for calls the application still holds: async and
     * bidi calls whose answers are still to come from the inference core (cancelled calls
     * have their cancel flag set, so the core drops them when it can). Their batches must
     * complete on the queues, which still run. */
    pthread_mutex_lock(&s->mu);
    if (s->live_calls > 0)
        rtx_logf(RTX_LOG_INFO, "server shutdown: waiting for %d calls to be answered",
                 s->live_calls);
    while (s->live_calls > 0)
        pthread_cond_wait(&s->cond, &s->mu);
    pthread_mutex_unlock(&s->mu);
    grpc_server_destroy(s->server);
    s->server = NULL;
    queues_destroy(s);

    pthread_mutex_lock(&s->mu);
    s->shutdown_done = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

void rtx_server_free(struct rtx_server *s) {
    if (!s) return;
    rtx_server_shutdown(s, 0);
    server_free_parts(s);
}
