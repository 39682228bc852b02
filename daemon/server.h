/*
 * server.h - internal header of rtxd's RPC layer: the gRPC C core server (server*.c), the
 * rtx.v1.Jobs and rtx.v1.Admin handlers (handlers-jobs.c, handlers-admin.c), the
 * inference.GRPCInferenceService handlers (handlers-infer*.c). The daemon state they share with
 * main.c and the HTTP server is in daemon/daemon.h, which this header includes. Only daemon/
 * and the unit tests include it.
 *
 * DESIGN
 * server*.c own everything gRPC: completion-queue threads, the static method table, call
 * state machines, request ids, deadlines and shutdown. Handlers never see a grpc_call: a unary
 * handler gets the request bytes and fills a struct rtx_server_reply (a status, a message and,
 * on success, a serialized reply); the streaming handler (Jobs.Wait) gets a stream it feeds
 * with rtx_server_stream_send from any thread; an async handler (ModelInfer) returns at once
 * and answers later, from any thread, with rtx_server_async_finish; a bidi handler
 * (ModelStreamInfer) is called per stream message and answers each with
 * rtx_server_bidi_reply, from any thread. Error codes become gRPC status codes in one
 * function, rtx_server_status_from_err.
 */
#ifndef RTX_DAEMON_SERVER_H
#define RTX_DAEMON_SERVER_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* ------------------------------------------------------------------------------------------
 * The server
 * ---------------------------------------------------------------------------------------- */

struct rtx_server;

struct rtx_server_options {
    const char *listen;        /* "host:port"; port 0 picks a free one */
    int cq_threads;            /* completion-queue threads, >= 1 */
    int64_t max_message_bytes; /* receive and send limit per message, bytes */
    struct rtx_daemon *daemon; /* handed to every handler */
};

/* grpc_init, creates the server with its CQ threads, binds opt->listen (an error names the
 * address when it cannot be bound), starts it and posts the first requests. *bound_port (may be
 * NULL) gets the port bound. */
int rtx_server_start(const struct rtx_server_options *opt, struct rtx_server **out,
                     int *bound_port, struct rtx_err *err);
/* Stops accepting calls, ends every Jobs.Wait and ModelStreamInfer stream with UNAVAILABLE,
 * waits up to grace_ms for calls in flight, then cancels what is left (setting the cancel
 * flags of async and bidi calls); returns when every call is finished, including async and
 * bidi calls whose answers were still to come (so whatever answers them, the inference core,
 * must still run), and the completion queues are drained. Blocking; call it from a thread that
 * handlers do not need. Idempotent. */
void rtx_server_shutdown(struct rtx_server *s, int grace_ms);
/* Shuts down (grace 0) if needed, frees everything and calls grpc_shutdown. NULL: no-op. */
void rtx_server_free(struct rtx_server *s);

/* The gRPC status for an RTX_E* code (0 -> OK; -errno and unknown codes -> INTERNAL). */
grpc_status_code rtx_server_status_from_err(int code);
/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for a value out of range). */
const char *rtx_server_status_name(grpc_status_code code);

#define RTX_SERVER_REQUEST_ID_LEN 33  /* 32 hex digits and the NUL */
#define RTX_SERVER_REQUEST_ID_MAX 128 /* longest x-request-id taken from a client, bytes */
/* A new random request id: 32 lower-case hex digits. */
void rtx_server_request_id_new(char id[RTX_SERVER_REQUEST_ID_LEN]);
/* Whether a client's x-request-id can be used (and echoed) as it is: 1..128 bytes of
 * printable ASCII without spaces. */
bool rtx_server_request_id_valid(const char *s, size_t len);

/* ------------------------------------------------------------------------------------------
 * Handler interface
 * ---------------------------------------------------------------------------------------- */

/* A handler's answer. code starts as GRPC_STATUS_OK with data NULL; on OK, data (rtx_malloc'ed;
 * the server takes it) and len hold the serialized reply. */
struct rtx_server_reply {
    grpc_status_code code;
    char msg[1024]; /* status details; "" for OK */
    void *data;
    size_t len; /* bytes */
};

/* Sets an error status with a printf message (frees data if set). */
void rtx_server_reply_status(struct rtx_server_reply *rep, grpc_status_code code, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));
/* Sets the status mapped from err->code with err->msg as details. */
void rtx_server_reply_err(struct rtx_server_reply *rep, const struct rtx_err *err);
/* Serializes msg (a ProtobufCMessage) into rep->data; INTERNAL on allocation failure,
 * RESOURCE_EXHAUSTED when it exceeds max_bytes (0: no check). */
void rtx_server_reply_pack(struct rtx_server_reply *rep, const ProtobufCMessage *msg,
                           int64_t max_bytes);

typedef void (*rtx_server_unary_fn)(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                    struct rtx_server_reply *rep);

/* A server-streaming call as its handler sees it. */
struct rtx_server_stream;

/* The streaming handler decodes the request and either sets an error in rep (the stream then
 * ends with it and the handler must not have registered a source) or leaves rep OK with a
 * source registered that will call rtx_server_stream_send / _end until `last`. */
typedef void (*rtx_server_stream_fn)(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                     struct rtx_server_stream *st, struct rtx_server_reply *rep);

/* Queues one message (data rtx_malloc'ed, taken by the stream) from any thread; the stream
 * writes one message at a time. `last` = the source is done: after the queued messages the
 * stream ends with OK. Never blocks. Messages after the client went away are dropped. */
void rtx_server_stream_send(struct rtx_server_stream *st, void *data, size_t len, bool last);
/* Ends the stream with an error status instead (queued messages are dropped); `last` as above. */
void rtx_server_stream_end(struct rtx_server_stream *st, grpc_status_code code, const char *msg,
                           bool last);
/* Registers how to stop the source when the client goes away or the server shuts down:
 * stop(ctx, handle) must guarantee that no send runs or will run once it returns. Call it
 * from the handler, after registering the source. */
void rtx_server_stream_set_stop(struct rtx_server_stream *st, void (*stop)(void *, uint64_t),
                                void *ctx, uint64_t handle);

/* An asynchronous unary call as its handler sees it: the handler returns at once and the
 * answer comes later from any thread (ModelInfer: a completion of the inference core), so no
 * completion-queue thread waits while the request runs. */
struct rtx_server_async;

/* Decodes the request (valid only during the call) and arranges for exactly one
 * rtx_server_async_finish, from any thread, possibly before it returns. */
typedef void (*rtx_server_async_fn)(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                    struct rtx_server_async *call);
/* Answers the call with rep (its data is taken). Exactly once per call; after it the call
 * must not be touched. */
void rtx_server_async_finish(struct rtx_server_async *call, struct rtx_server_reply *rep);
/* Set to nonzero (and never back) when the client cancels the call, its deadline passes or
 * the server cancels it at shutdown; valid until finish. */
const volatile int *rtx_server_async_cancel_flag(const struct rtx_server_async *call);
/* The call's deadline on CLOCK_MONOTONIC, nanoseconds; 0 when it has none. */
int64_t rtx_server_async_deadline_ns(const struct rtx_server_async *call);

/* A bidirectional stream (ModelStreamInfer) as its handler sees it: the handler is called
 * for each request message, in arrival order, on a completion-queue thread, and must arrange
 * for exactly one rtx_server_bidi_reply per message, from any thread. Replies are written
 * in the order they are given (completion order). After the client half-closes and every
 * message has its reply, the stream ends with OK; a client that goes away or the server
 * shutting down drops the replies still to come (their calls are still required). */
struct rtx_server_bidi;

typedef void (*rtx_server_bidi_fn)(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                   struct rtx_server_bidi *st);
/* The reply to one message: data (rtx_malloc'ed, taken) and len. data NULL ends the stream
 * with INTERNAL "out of memory" (for a handler that could not build a reply). */
void rtx_server_bidi_reply(struct rtx_server_bidi *st, void *data, size_t len);
/* A reply to the message being answered that is not its last (a decoupled model's answers:
 * many per request): queued like a reply, but the message still waits for its
 * rtx_server_bidi_reply. Any thread; data as for rtx_server_bidi_reply. */
void rtx_server_bidi_send(struct rtx_server_bidi *st, void *data, size_t len);
/* As for async calls: set once the stream is over for the client; valid until the last reply
 * was given. */
const volatile int *rtx_server_bidi_cancel_flag(const struct rtx_server_bidi *st);
int64_t rtx_server_bidi_deadline_ns(const struct rtx_server_bidi *st);

/* A watch on an async or bidi call: fn(ctx) runs once, on a completion-queue thread, when the
 * call is over for the client before its answer (the client cancels or goes away, the
 * deadline passes, the server shuts down), unless it was removed first. The cancel flag
 * tells the same to code that polls; a watch is for work that must be stopped (a
 * generation). The struct is the caller's and must stay valid until fn ran or the watch was
 * removed; fn must not block. */
struct rtx_server_watch {
    void (*fn)(void *ctx);
    void *ctx;
    struct rtx_server_watch *prev, *next; /* the server's */
};
/* Adds w. Returns false, without adding it, when the call is already over (then the caller
 * acts as fn would). Valid while the call's answer is still to come. */
bool rtx_server_async_watch(struct rtx_server_async *call, struct rtx_server_watch *w);
bool rtx_server_bidi_watch(struct rtx_server_bidi *st, struct rtx_server_watch *w);
/* Removes w: true when it was removed (fn will never run), false when fn ran or is about to
 * (it was taken before). Never blocks. Call it before the call's last answer. */
bool rtx_server_async_unwatch(struct rtx_server_async *call, struct rtx_server_watch *w);
bool rtx_server_bidi_unwatch(struct rtx_server_bidi *st, struct rtx_server_watch *w);

/* The handlers (handlers-jobs.c, handlers-admin.c), one per method of the .proto files. */
void rtx__daemon_jobs_submit(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep);
void rtx__daemon_jobs_get(struct rtx_daemon *d, const uint8_t *req, size_t len,
                          struct rtx_server_reply *rep);
void rtx__daemon_jobs_wait(struct rtx_daemon *d, const uint8_t *req, size_t len,
                           struct rtx_server_stream *st, struct rtx_server_reply *rep);
void rtx__daemon_jobs_cancel(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep);
void rtx__daemon_jobs_list(struct rtx_daemon *d, const uint8_t *req, size_t len,
                           struct rtx_server_reply *rep);
void rtx__daemon_jobs_get_outputs(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep);
void rtx__daemon_admin_status(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep);
void rtx__daemon_admin_devices(struct rtx_daemon *d, const uint8_t *req, size_t len,
                               struct rtx_server_reply *rep);
void rtx__daemon_admin_health(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep);
void rtx__daemon_admin_config(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep);
void rtx__daemon_admin_drain(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep);
void rtx__daemon_admin_pools(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep);
void rtx__daemon_admin_lanes(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep);
void rtx__daemon_admin_generation(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep);

/* inference.GRPCInferenceService (handlers-infer*.c): the KServe v2 / Triton gRPC service. */
#define RTX_INFER_UNARY(X)                                                                      \
    X(ServerLive, server_live)                                                                  \
    X(ServerReady, server_ready)                                                                \
    X(ModelReady, model_ready)                                                                  \
    X(ServerMetadata, server_metadata)                                                          \
    X(ModelMetadata, model_metadata)                                                            \
    X(ModelConfig, model_config)                                                                \
    X(ModelStatistics, model_statistics)                                                        \
    X(RepositoryIndex, repository_index)                                                        \
    X(RepositoryModelLoad, repository_model_load)                                               \
    X(RepositoryModelUnload, repository_model_unload)                                           \
    X(SystemSharedMemoryStatus, system_shm_status)                                              \
    X(SystemSharedMemoryRegister, system_shm_register)                                          \
    X(SystemSharedMemoryUnregister, system_shm_unregister)                                      \
    X(CudaSharedMemoryStatus, cuda_shm_status)                                                  \
    X(CudaSharedMemoryRegister, cuda_shm_register)                                              \
    X(CudaSharedMemoryUnregister, cuda_shm_unregister)                                          \
    X(TraceSetting, trace_setting)                                                              \
    X(LogSettings, log_settings)
#define RTX_INFER_DECLARE(method, fn)                                                           \
    void rtx__infer_##fn(struct rtx_daemon *d, const uint8_t *req, size_t len,                  \
                         struct rtx_server_reply *rep);
RTX_INFER_UNARY(RTX_INFER_DECLARE)
#undef RTX_INFER_DECLARE
void rtx__infer_model_infer(struct rtx_daemon *d, const uint8_t *req, size_t len,
                            struct rtx_server_async *call);
void rtx__infer_model_stream_infer(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                   struct rtx_server_bidi *st);

#endif /* RTX_DAEMON_SERVER_H */
