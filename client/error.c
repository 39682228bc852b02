/*
 * error.c - librtx error codes: the message and name tables built from RTX_CLIENT_ERRNO_MAP,
 * the mapping from gRPC status codes, and filling struct rtx_client_err.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "client/client-impl.h"

static const struct {
    const char *name;
    const char *msg;
} errno_table[] = {
#define RTX_CLIENT_ERRNO_ROW(name, msg) {#name, msg},
    RTX_CLIENT_ERRNO_MAP(RTX_CLIENT_ERRNO_ROW)
#undef RTX_CLIENT_ERRNO_ROW
};

static_assert(sizeof errno_table / sizeof errno_table[0] ==
                  (size_t)(RTX_CLIENT__ERRNO_END - RTX_CLIENT__ERRNO_FIRST - 1),
              "one table row per error code");

/* Index of a code in errno_table, or -1. */
static int errno_index(int code) {
    if (code <= RTX_CLIENT__ERRNO_FIRST || code >= RTX_CLIENT__ERRNO_END) return -1;
    return code - RTX_CLIENT__ERRNO_FIRST - 1;
}

const char *rtx_client_strerror(int code) {
    if (code == 0) return "ok";
    int i = errno_index(code);
    return i < 0 ? "unknown error" : errno_table[i].msg;
}

const char *rtx_client_errname(int code) {
    if (code == 0) return "OK";
    int i = errno_index(code);
    return i < 0 ? "?" : errno_table[i].name;
}

int rtx__client_code_from_grpc(grpc_status_code status) {
    switch (status) {
    case GRPC_STATUS_OK: return 0;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE: return RTX_CLIENT_EINVAL;
    case GRPC_STATUS_NOT_FOUND: return RTX_CLIENT_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS: return RTX_CLIENT_EEXIST;
    case GRPC_STATUS_UNAVAILABLE: return RTX_CLIENT_EUNAVAILABLE;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return RTX_CLIENT_ETIMEDOUT;
    case GRPC_STATUS_CANCELLED: return RTX_CLIENT_ECANCELLED;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return RTX_CLIENT_ERESOURCE;
    case GRPC_STATUS_FAILED_PRECONDITION: return RTX_CLIENT_EPRECONDITION;
    case GRPC_STATUS_ABORTED: return RTX_CLIENT_EABORTED;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED: return RTX_CLIENT_EPERM;
    case GRPC_STATUS_UNIMPLEMENTED: return RTX_CLIENT_EUNIMPLEMENTED;
    case GRPC_STATUS_INTERNAL:
    case GRPC_STATUS_UNKNOWN:
    case GRPC_STATUS_DATA_LOSS:
    default: return RTX_CLIENT_EINTERNAL;
    }
}

int rtx__client_err(struct rtx_client_err *err, int code, int grpc_status, const char *fmt,
                    ...) {
    if (!err) return code;
    err->code = code;
    err->grpc_status = grpc_status;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0) err->msg[0] = '\0';
    if (err->msg[0] == '\0') snprintf(err->msg, sizeof err->msg, "%s", rtx_client_strerror(code));
    return code;
}

void rtx__client_err_clear(struct rtx_client_err *err) {
    if (!err) return;
    err->code = 0;
    err->grpc_status = 0;
    err->msg[0] = '\0';
}
