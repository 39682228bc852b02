/*
 * server.c - rtxd's gRPC server on the gRPC C core API: the method table of rtx.v1.Jobs,
 * rtx.v1.Admin and inference.GRPCInferenceService, status codes, request ids, replies, start
 * and an orderly shutdown. The call state machines are in server-call.c (common steps, unary
 * calls, arrival and the completion-queue threads) and server-stream.c (server streaming,
 * async unary and bidirectional calls, deadlines); their shared structs in server-impl.h.
 * Handlers live in handlers-jobs.c, handlers-admin.c and handlers-infer*.c.
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
#include "daemon/server-impl.h"

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


/* One row per rpc of proto/rtx/v1/jobs.proto, admin.proto and
 * proto/inference/grpc_service.proto: its path, its call kind, the requests kept outstanding
 * per completion queue, and the handler of that kind. Adding an rpc is one row here and its
 * handler's prototype in server.h. */
#define INFER "/inference.GRPCInferenceService/"

const struct method rtx__server_methods[] = {
    {.path = "/rtx.v1.Jobs/Submit",
     .flags = METHOD_UNARY,
     .requests = 4,
     .unary = rtx__daemon_jobs_submit},
    {.path = "/rtx.v1.Jobs/Get",
     .flags = METHOD_UNARY,
     .requests = 4,
     .unary = rtx__daemon_jobs_get},
    {.path = "/rtx.v1.Jobs/Wait",
     .flags = METHOD_SERVER_STREAMING,
     .requests = 4,
     .stream = rtx__daemon_jobs_wait},
    {.path = "/rtx.v1.Jobs/Cancel",
     .flags = METHOD_UNARY,
     .requests = 2,
     .unary = rtx__daemon_jobs_cancel},
    {.path = "/rtx.v1.Jobs/List",
     .flags = METHOD_UNARY,
     .requests = 2,
     .unary = rtx__daemon_jobs_list},
    {.path = "/rtx.v1.Jobs/GetOutputs",
     .flags = METHOD_UNARY,
     .requests = 2,
     .unary = rtx__daemon_jobs_get_outputs},
    {.path = "/rtx.v1.Admin/Status",
     .flags = METHOD_UNARY,
     .requests = 2,
     .unary = rtx__daemon_admin_status},
    {.path = "/rtx.v1.Admin/Devices",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_devices},
    {.path = "/rtx.v1.Admin/Health",
     .flags = METHOD_UNARY,
     .requests = 2,
     .unary = rtx__daemon_admin_health},
    {.path = "/rtx.v1.Admin/Config",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_config},
    {.path = "/rtx.v1.Admin/Pools",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_pools},
    {.path = "/rtx.v1.Admin/Lanes",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_lanes},
    {.path = "/rtx.v1.Admin/Generation",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_generation},
    {.path = "/rtx.v1.Admin/Drain",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__daemon_admin_drain},
    {.path = INFER "ModelInfer",
     .flags = METHOD_ASYNC,
     .requests = 8,
     .async = rtx__infer_model_infer},
    {.path = INFER "ModelStreamInfer",
     .flags = METHOD_BIDI_STREAMING,
     .requests = 2,
     .bidi = rtx__infer_model_stream_infer},
    {.path = INFER "ServerLive",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_server_live},
    {.path = INFER "ServerReady",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_server_ready},
    {.path = INFER "ModelReady",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_model_ready},
    {.path = INFER "ServerMetadata",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_server_metadata},
    {.path = INFER "ModelMetadata",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_model_metadata},
    {.path = INFER "ModelConfig",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_model_config},
    {.path = INFER "ModelStatistics",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_model_statistics},
    {.path = INFER "RepositoryIndex",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_repository_index},
    {.path = INFER "RepositoryModelLoad",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_repository_model_load},
    {.path = INFER "RepositoryModelUnload",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_repository_model_unload},
    {.path = INFER "SystemSharedMemoryStatus",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_system_shm_status},
    {.path = INFER "SystemSharedMemoryRegister",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_system_shm_register},
    {.path = INFER "SystemSharedMemoryUnregister",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_system_shm_unregister},
    {.path = INFER "CudaSharedMemoryStatus",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_cuda_shm_status},
    {.path = INFER "CudaSharedMemoryRegister",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_cuda_shm_register},
    {.path = INFER "CudaSharedMemoryUnregister",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_cuda_shm_unregister},
    {.path = INFER "TraceSetting",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_trace_setting},
    {.path = INFER "LogSettings",
     .flags = METHOD_UNARY,
     .requests = 1,
     .unary = rtx__infer_log_settings},
};
#undef INFER
static_assert(sizeof rtx__server_methods / sizeof rtx__server_methods[0] == N_METHODS,
              "one entry per rpc of proto/rtx/v1/jobs.proto, admin.proto and "
              "proto/inference/grpc_service.proto");

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
    case RTX_ENOMEM: /* a device budget share refused the memory (device/device.h) */
    case RTX_EOVERLOAD: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case RTX_EUNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case RTX_ECANCELED: return GRPC_STATUS_CANCELLED;
    case RTX_EEXPIRED: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case RTX_EUNSUPPORTED: return GRPC_STATUS_UNIMPLEMENTED;
    default: return GRPC_STATUS_INTERNAL; /* EIO, EINTERNAL, EGPU, -errno */
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
grpc_byte_buffer *rtx__server_byte_buffer_take(void *data, size_t len) {
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
                if (ev.type == GRPC_OP_COMPLETE) rtx__server_dispatch(s, ev.tag, ev.success != 0);
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
        s->registered[m] =
            grpc_server_register_method(s->server, rtx__server_methods[m].path, NULL,
                                        (rtx__server_methods[m].flags & METHOD_BIDI_STREAMING)
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
        int e = pthread_create(&s->cqs[i].thread, NULL, rtx__server_cq_main, a);
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
            for (int k = 0; k < rtx__server_methods[m].requests && rc == 0; k++)
                rc = rtx__server_post_request(s, m, i, err);
        for (int k = 0; k < UNKNOWN_REQUESTS && rc == 0; k++)
            rc = rtx__server_post_request(s, UNKNOWN_METHOD, i, err);
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
        rtx__server_stream_end_locked(c, GRPC_STATUS_UNAVAILABLE, "rtxd is shutting down");
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
