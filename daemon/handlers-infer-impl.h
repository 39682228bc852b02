/*
 * handlers-infer-impl.h - what the files of inference.GRPCInferenceService share: the reply
 * arena and the request helpers defined in handlers-infer.c. handlers-infer.c holds those
 * helpers, health, metadata, model configuration and statistics; handlers-infer-repo.c the
 * model repository, shared memory, trace and log settings; handlers-infer-run.c ModelInfer and
 * ModelStreamInfer. Only those files include it.
 */
#ifndef RTX_DAEMON_HANDLERS_INFER_IMPL_H
#define RTX_DAEMON_HANDLERS_INFER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/server.h"
#include "inference/grpc_service.pb-c.h"

/* Allocations that live until a reply is packed. */
struct arena {
    void **ptrs;
    size_t n, cap;
    bool failed;
};

/* n zeroed bytes recorded in the arena; NULL (failed set) when out of memory. */
void *rtx__infer_arena_alloc(struct arena *a, size_t n);
/* A printf string (at most 63 characters) recorded in the arena; "" when out of memory. */
char *rtx__infer_arena_printf(struct arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees everything recorded in the arena. */
void rtx__infer_arena_free(struct arena *a);
/* Packs msg into rep (arena freed by the caller); INTERNAL when the arena ran out. */
void rtx__infer_pack(struct rtx_daemon *d, struct arena *a, const ProtobufCMessage *msg,
                     struct rtx_server_reply *rep);
/* The serving core, or UNAVAILABLE in rep when rtxd serves no models. */
struct rtx_serving *rtx__infer_serving(struct rtx_daemon *d, struct rtx_server_reply *rep);
/* A model version string: "" is 0 (the server's choice). */
int rtx__infer_parse_version(const char *s, int64_t *out, struct rtx_err *err);
/* The request message, or NULL with INVALID_ARGUMENT "malformed inference.X" in rep. Free
 * with protobuf_c_message_free_unpacked (or the type's own free_unpacked). */
void *rtx__infer_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *req, size_t len,
                        struct rtx_server_reply *rep);

/* --- request parameters and ModelInfer / ModelStreamInfer (handlers-infer-run.c) --- */

/* Parameter `key` of a message's parameters map (every message's entries share one layout),
 * or NULL when absent. */
const Inference__InferParameter *rtx__infer_param_find(size_t n, void *entries,
                                                       const char *key);
#define RTX__INFER_PARAM(msg, key)                                                              \
    rtx__infer_param_find((msg)->n_parameters, (void *)(msg)->parameters, key)
/* An integer parameter (int64 or uint64); RTX_EINVAL naming `what` for another type. */
int rtx__infer_param_int(const Inference__InferParameter *p, const char *what, int64_t *out,
                         struct rtx_err *err);
/* A bool parameter; RTX_EINVAL naming `what` for another type. */
int rtx__infer_param_bool(const Inference__InferParameter *p, const char *what, bool *out,
                          struct rtx_err *err);

/* The next unused raw_input_contents entry (*raw_next counts them) for input `name`, or
 * NULL with RTX_EINVAL "no data" when none is left. */
const ProtobufCBinaryData *rtx__infer_raw_input(const Inference__ModelInferRequest *rq,
                                                size_t *raw_next, const char *name,
                                                struct rtx_err *err);

/* A shared-memory reference in a tensor's parameters. */
struct shm_param {
    const char *region;
    int64_t offset, byte_size; /* bytes */
};
/* The shared-memory parameters of input or output (kind) `name`: found (1, *out set),
 * absent (0) or an error (RTX_EINVAL naming the tensor). */
int rtx__infer_shm_param(size_t n, void *entries, const char *kind, const char *name,
                         struct shm_param *out, struct rtx_err *err);

/* Answers one request of a stream with an error, its last answer: error_message
 * "request 'ID': msg" and an infer_response naming the model and the request's id, so a
 * client can match it to its request, with the parameter grpc_status (the status a unary
 * call would have ended with); decoupled adds triton_final_response = true. */
void rtx__infer_stream_error(struct rtx_server_bidi *st, const char *model, const char *version,
                             const char *id, const struct rtx_err *err, bool decoupled);

/* --- generative models (handlers-infer-gen.c) --- */

/* What ModelInfer and ModelStreamInfer decoded of a request's parameters. */
struct rtx_infer_opts {
    const char *lane;    /* NULL: the default */
    int priority;        /* 0: none */
    int64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
};

/* Starts request rq to generative model m (rtx_model_generator not NULL) on a unary call
 * (call) or a stream (st): decodes text_input and the optional inputs, submits the
 * generation and arranges its answers: on a stream one ModelStreamInferResponse per output
 * (the last flagged triton_final_response), on a unary call one response with the whole
 * text. On 0 the request has taken over the model reference and the answers will come (the
 * call's or the message's last one when the generation ends); on error nothing was started,
 * the caller keeps its reference and answers with err. rq is only read during the call. */
int rtx__infer_gen_start(struct rtx_daemon *d, const Inference__ModelInferRequest *rq,
                         struct rtx_model *m, const struct rtx_infer_opts *o,
                         struct rtx_server_async *call, struct rtx_server_bidi *st,
                         struct rtx_err *err);

#endif /* RTX_DAEMON_HANDLERS_INFER_IMPL_H */
