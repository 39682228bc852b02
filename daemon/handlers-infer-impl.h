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

#endif /* RTX_DAEMON_HANDLERS_INFER_IMPL_H */
