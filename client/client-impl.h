/*
 * client-impl.h - librtx internals shared by the client/ sources (never installed, never
 * included by users): the client struct, the RPC method table, the call helpers, error
 * helpers and the conversions between protocol messages and the public structs.
 *
 * DESIGN
 * Results handed to the caller keep the decoded protocol message they were made from inside
 * a "box" placed in front of the public struct, and their strings point into that message:
 * nothing is copied twice and one *_free releases the box, the message and a few arrays.
 */
#ifndef RTX_CLIENT_IMPL_H
#define RTX_CLIENT_IMPL_H

#include <stdarg.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "client/rtx.h"
#include "rtx/v1/admin.pb-c.h"
#include "rtx/v1/graph.pb-c.h"
#include "rtx/v1/jobs.pb-c.h"
#include "inference/grpc_service.pb-c.h"

/* The RPC methods librtx calls: {enum name, path, request type, response type, streaming}. */
#define RTX__CLIENT_METHOD_MAP(X)                                                               \
    X(SUBMIT, "/rtx.v1.Jobs/Submit", submit_request, submit_response, false)                   \
    X(GET_JOB, "/rtx.v1.Jobs/Get", get_job_request, job, false)                                 \
    X(WAIT_JOB, "/rtx.v1.Jobs/Wait", wait_job_request, job, true)                               \
    X(CANCEL_JOB, "/rtx.v1.Jobs/Cancel", cancel_job_request, job, false)                        \
    X(LIST_JOBS, "/rtx.v1.Jobs/List", list_jobs_request, list_jobs_response, false)             \
    X(GET_OUTPUTS, "/rtx.v1.Jobs/GetOutputs", get_outputs_request, get_outputs_response, false) \
    X(STATUS, "/rtx.v1.Admin/Status", status_request, status_response, false)                   \
    X(DEVICES, "/rtx.v1.Admin/Devices", devices_request, devices_response, false)               \
    X(HEALTH, "/rtx.v1.Admin/Health", health_request, health_response, false)                   \
    X(CONFIG, "/rtx.v1.Admin/Config", config_request, config_response, false)                   \
    X(POOLS, "/rtx.v1.Admin/Pools", pools_request, pools_response, false)                       \
    X(LANES, "/rtx.v1.Admin/Lanes", lanes_request, lanes_response, false)                       \
    X(GENERATION, "/rtx.v1.Admin/Generation", generation_request, generation_response,         \
      false)                                                                                    \
    X(DRAIN, "/rtx.v1.Admin/Drain", drain_request, drain_response, false)

/* The inference.GRPCInferenceService methods librtx calls (models.c), same columns. */
#define RTX__CLIENT_INFER_PATH(m) "/inference.GRPCInferenceService/" #m
#define RTX__CLIENT_INFER_METHOD_MAP(X)                                                         \
    X(REPOSITORY_INDEX, RTX__CLIENT_INFER_PATH(RepositoryIndex), repository_index_request,      \
      repository_index_response, false)                                                         \
    X(MODEL_LOAD, RTX__CLIENT_INFER_PATH(RepositoryModelLoad), repository_model_load_request,   \
      repository_model_load_response, false)                                                    \
    X(MODEL_UNLOAD, RTX__CLIENT_INFER_PATH(RepositoryModelUnload),                              \
      repository_model_unload_request, repository_model_unload_response, false)                 \
    X(MODEL_READY, RTX__CLIENT_INFER_PATH(ModelReady), model_ready_request,                     \
      model_ready_response, false)                                                              \
    X(MODEL_METADATA, RTX__CLIENT_INFER_PATH(ModelMetadata), model_metadata_request,            \
      model_metadata_response, false)                                                           \
    X(MODEL_CONFIG, RTX__CLIENT_INFER_PATH(ModelConfig), model_config_request,                  \
      model_config_response, false)                                                             \
    X(MODEL_STATISTICS, RTX__CLIENT_INFER_PATH(ModelStatistics), model_statistics_request,      \
      model_statistics_response, false)                                                         \
    X(MODEL_STREAM_INFER, RTX__CLIENT_INFER_PATH(ModelStreamInfer), model_infer_request,       \
      model_stream_infer_response, true)

enum rtx__client_method {
#define RTX__CLIENT_METHOD_ENUM(name, path, req, resp, stream) RTX__CLIENT_M_##name,
    RTX__CLIENT_METHOD_MAP(RTX__CLIENT_METHOD_ENUM)
    RTX__CLIENT_INFER_METHOD_MAP(RTX__CLIENT_METHOD_ENUM)
#undef RTX__CLIENT_METHOD_ENUM
    RTX__CLIENT_M_COUNT
};

struct rtx_client {
    grpc_channel *channel;
    char *address;
    int timeout_ms;                             /* per unary call, milliseconds */
    void *registered[RTX__CLIENT_M_COUNT];      /* grpc_channel_register_call handles */
    uint64_t request_id_seed;                   /* mixed into generated request ids */
};

/* ---- errors (error.c) ---- */

/* Fills err (when not NULL) with code, grpc_status and a printf-formatted message; returns
 * code, so `return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "...")` reads naturally. */
int rtx__client_err(struct rtx_client_err *err, int code, int grpc_status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Marks err (when not NULL) as a success. */
void rtx__client_err_clear(struct rtx_client_err *err);
/* The RTX_CLIENT_E* code of a gRPC status (0 for OK). */
int rtx__client_code_from_grpc(grpc_status_code status);

/* ---- calls (call.c) ---- */

/* A unary call: sends req and decodes the response into *resp (free with
 * protobuf_c_message_free_unpacked(*resp, NULL)). Returns 0 or an error code with err set. */
int rtx__client_unary(struct rtx_client *c, enum rtx__client_method m,
                      const ProtobufCMessage *req, ProtobufCMessage **resp,
                      struct rtx_client_err *err);

/* Receives each streamed message; takes ownership of msg. Returns 0 to go on, or an error code
 * (err set) to cancel the call. */
typedef int (*rtx__client_stream_cb)(void *ctx, ProtobufCMessage *msg,
                                     struct rtx_client_err *err);

/* A server-streaming call (or a bidirectional one given its only request) with a deadline
 * of timeout_ms (< 0: none); calls cb for every message until the server ends the stream.
 * cancel (may be NULL) is looked at every 50 ms while waiting: nonzero cancels the call,
 * which returns RTX_CLIENT_ECANCELLED. Returns 0 when the stream ended with status OK,
 * otherwise an error code with err set. */
int rtx__client_stream(struct rtx_client *c, enum rtx__client_method m,
                       const ProtobufCMessage *req, int64_t timeout_ms, rtx__client_stream_cb cb,
                       void *ctx, const volatile int *cancel, struct rtx_client_err *err);

/* ---- conversions (tensor.c, jobs.c) ---- */

/* Checks a caller's tensor (dtype, shape, data size); `what` names it in the message. */
int rtx__client_tensor_check(const struct rtx_client_tensor *t, const char *what,
                             struct rtx_client_err *err);
/* Fills a protocol tensor that borrows t's name, dims and data (nothing is copied; dims
 * points into t). */
void rtx__client_tensor_borrow(const struct rtx_client_tensor *t, Rtx__V1__Tensor *pb);
/* A new protocol tensor owning copies of t's name, dims and data (for graphs), or NULL. */
Rtx__V1__Tensor *rtx__client_tensor_copy(const struct rtx_client_tensor *t);
/* The protocol graph of a client graph (borrowed). */
const Rtx__V1__Graph *rtx__client_graph_pb(const struct rtx_client_graph *g);

/* Fills *dst from a decoded job whose strings dst then points into; labels and outputs are
 * written to the arrays given, which must hold src->n_labels and src->n_outputs elements.
 * Returns 0 or RTX_CLIENT_EPROTO (err set) when the job cannot be represented. */
int rtx__client_job_fill(struct rtx_client_job *dst, const Rtx__V1__Job *src,
                         struct rtx_client_label *labels, struct rtx_client_output_info *outputs,
                         struct rtx_client_err *err);

/* A C string that is never NULL (protocol strings are "" when unset, but be safe). */
static inline const char *rtx__client_str(const char *s) {
    return s ? s : "";
}

#endif /* RTX_CLIENT_IMPL_H */
