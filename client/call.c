/*
 * call.c - librtx connections and calls: creating the gRPC channel, request ids, and the
 * two call shapes rtx.v1 uses (unary, and server streaming for Jobs.Wait).
 *
 * DESIGN
 * One grpc_channel per client; it is thread-safe and multiplexes calls over one HTTP/2
 * connection. Every call makes its own completion queue of the pluck kind and blocks on it
 * with grpc_completion_queue_pluck, so any number of threads can call at once and librtx runs
 * no thread of its own. A unary call is one batch (send metadata, message and half-close;
 * receive metadata, message and status). A streaming call sends in one batch, then receives
 * one message per batch until the stream ends, then receives the status in a batch of its
 * own. Method paths are registered once per channel (grpc_channel_register_call) from the
 * table in client-impl.h. Deadlines use the monotonic clock.
 *
 * Request ids live in thread-local storage: an id set with rtx_client_set_request_id applies
 * to the next call of the same thread on the same client, which is what a client shared by
 * many threads needs.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "client/client-impl.h"

static const struct method_info {
    const char *path;
    const ProtobufCMessageDescriptor *request;
    const ProtobufCMessageDescriptor *response;
    bool streaming;
} methods[RTX__CLIENT_M_COUNT] = {
#define RTX__CLIENT_METHOD_ROW(name, path, req, resp, stream)                                    \
    [RTX__CLIENT_M_##name] = {path, &rtx__v1__##req##__descriptor,                               \
                              &rtx__v1__##resp##__descriptor, stream},
    RTX__CLIENT_METHOD_MAP(RTX__CLIENT_METHOD_ROW)
#undef RTX__CLIENT_METHOD_ROW
#define RTX__CLIENT_INFER_METHOD_ROW(name, path, req, resp, stream)                              \
    [RTX__CLIENT_M_##name] = {path, &inference__##req##__descriptor,                             \
                              &inference__##resp##__descriptor, stream},
    RTX__CLIENT_INFER_METHOD_MAP(RTX__CLIENT_INFER_METHOD_ROW)
#undef RTX__CLIENT_INFER_METHOD_ROW
};

/* ------------------------------------------------------------------------------------------
 * Request ids
 * ---------------------------------------------------------------------------------------- */

static _Thread_local struct {
    const struct rtx_client *next_for;      /* client the pending id applies to */
    char next[RTX_CLIENT_REQUEST_ID_MAX];   /* "" when none is pending */
    const struct rtx_client *last_for;      /* client of the thread's last call */
    char last[RTX_CLIENT_REQUEST_ID_MAX];
} tls_rid;

static atomic_uint_fast64_t rid_counter;

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The request id of a call about to start on c: the pending one or a generated one. */
static const char *take_request_id(const struct rtx_client *c) {
    if (tls_rid.next_for == c && tls_rid.next[0]) {
        memcpy(tls_rid.last, tls_rid.next, sizeof tls_rid.last);
        tls_rid.next[0] = '\0';
        tls_rid.next_for = NULL;
    } else {
        uint64_t n = atomic_fetch_add(&rid_counter, 1);
        snprintf(tls_rid.last, sizeof tls_rid.last, "rtxc-%016llx",
                 (unsigned long long)mix64(c->request_id_seed ^ mix64(n)));
    }
    tls_rid.last_for = c;
    return tls_rid.last;
}

int rtx_client_set_request_id(struct rtx_client *c, const char *id, struct rtx_client_err *err) {
    if (!c) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no client");
    if (!id || !*id) {
        if (tls_rid.next_for == c) {
            tls_rid.next[0] = '\0';
            tls_rid.next_for = NULL;
        }
        rtx__client_err_clear(err);
        return 0;
    }
    size_t n = strlen(id);
    if (n >= RTX_CLIENT_REQUEST_ID_MAX)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                               "request id of %zu characters (at most %d)", n,
                               RTX_CLIENT_REQUEST_ID_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)id[i];
        if (ch < 0x20 || ch > 0x7e)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                                   "request id: character %zu is not printable ASCII", i);
    }
    memcpy(tls_rid.next, id, n + 1);
    tls_rid.next_for = c;
    rtx__client_err_clear(err);
    return 0;
}

const char *rtx_client_last_request_id(const struct rtx_client *c) {
    return c && tls_rid.last_for == c ? tls_rid.last : "";
}

/* ------------------------------------------------------------------------------------------
 * Connections
 * ---------------------------------------------------------------------------------------- */

int rtx_client_connect(const char *address, int timeout_ms, struct rtx_client **out,
                       struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    if (!address || !*address)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "empty server address");
    if (timeout_ms < 0)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "negative timeout %d ms", timeout_ms);
    struct rtx_client *c = calloc(1, sizeof *c);
    if (!c || !(c->address = strdup(address))) {
        free(c);
        return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    }
    c->timeout_ms = timeout_ms ? timeout_ms : RTX_CLIENT_DEFAULT_TIMEOUT_MS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->request_id_seed = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                         mix64((uint64_t)getpid() << 20 ^ (uint64_t)(uintptr_t)c);

    grpc_init();
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = -1},
        {.type = GRPC_ARG_STRING,
         .key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING,
         .value.string = (char *)"librtx/1"},
    };
    grpc_channel_args channel_args = {.num_args = sizeof args / sizeof args[0], .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->channel = grpc_channel_create(address, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    if (!c->channel) {
        grpc_shutdown();
        free(c->address);
        free(c);
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "cannot create a channel to '%s'",
                               address);
    }
    for (int m = 0; m < RTX__CLIENT_M_COUNT; m++)
        c->registered[m] = grpc_channel_register_call(c->channel, methods[m].path, NULL, NULL);
    *out = c;
    rtx__client_err_clear(err);
    return 0;
}

void rtx_client_close(struct rtx_client *c) {
    if (!c) return;
    grpc_channel_destroy(c->channel);
    if (tls_rid.next_for == c) tls_rid.next_for = NULL;
    if (tls_rid.last_for == c) tls_rid.last_for = NULL;
    free(c->address);
    free(c);
    grpc_shutdown_blocking();
}

const char *rtx_client_address(const struct rtx_client *c) {
    return c ? c->address : "";
}

int rtx_client_timeout_ms(const struct rtx_client *c) {
    return c ? c->timeout_ms : 0;
}

/* ------------------------------------------------------------------------------------------
 * Calls
 * ---------------------------------------------------------------------------------------- */

/* Everything one call owns; call_cleanup releases it whatever state the call reached. */
struct call {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata md;                   /* x-request-id */
    grpc_byte_buffer *send;
    grpc_byte_buffer *recv;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
    bool cancelled; /* the caller's cancel flag cancelled the call */
};

/* Tags of the batches of one call (each call has its own queue, so they need not be unique
 * beyond the call). */
enum { TAG_START = 1, TAG_MESSAGE, TAG_STATUS };

static void *tag(int t) {
    return (void *)(uintptr_t)t;
}

static void call_cleanup(struct call *k) {
    if (k->send) grpc_byte_buffer_destroy(k->send);
    if (k->recv) grpc_byte_buffer_destroy(k->recv);
    grpc_metadata_array_destroy(&k->initial_md);
    grpc_metadata_array_destroy(&k->trailing_md);
    grpc_slice_unref(k->details);
    grpc_slice_unref(k->md.value);
    gpr_free((void *)k->error_string);
    if (k->call) grpc_call_unref(k->call);
    if (k->cq) {
        grpc_completion_queue_shutdown(k->cq);
        grpc_event ev;
        do {
            ev = grpc_completion_queue_pluck(k->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME),
                                             NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(k->cq);
    }
}

/* Packs req, creates the queue and the call with its deadline (timeout_ms < 0: none) and
 * the request-id metadata. On failure everything made so far is left in k for call_cleanup. */
static int call_setup(struct rtx_client *c, enum rtx__client_method m,
                      const ProtobufCMessage *req, int64_t timeout_ms, struct call *k,
                      struct rtx_client_err *err) {
    memset(k, 0, sizeof *k);
    k->details = grpc_empty_slice();
    k->md.value = grpc_empty_slice();
    k->status = GRPC_STATUS_UNKNOWN;
    grpc_metadata_array_init(&k->initial_md);
    grpc_metadata_array_init(&k->trailing_md);
    if (!c) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no client");
    if (req->descriptor != methods[m].request)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: wrong request type %s",
                               methods[m].path, req->descriptor->name);

    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    protobuf_c_message_pack(req, buf);
    grpc_slice slice = grpc_slice_new(buf, len, free); /* takes buf without copying */
    k->send = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);

    k->cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    if (timeout_ms >= 0)
        deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    k->call = grpc_channel_create_registered_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                                  k->cq, c->registered[m], deadline, NULL);
    if (!k->cq || !k->call)
        return rtx__client_err(err, RTX_CLIENT_EINTERNAL, -1, "%s: cannot create the call",
                               methods[m].path);
    k->md.key = grpc_slice_from_static_string("x-request-id");
    k->md.value = grpc_slice_from_copied_string(take_request_id(c));
    return 0;
}

/* Starts a batch and waits for it; returns the event's success flag, or -1 (err set) when
 * the batch could not be started. cancel (may be NULL): looked at every 50 ms while waiting;
 * once it is nonzero the call is cancelled (the batch then completes) and k->cancelled set. */
static int run_batch(struct call *k, const grpc_op *ops, size_t n, int t, const char *path,
                     const volatile int *cancel, struct rtx_client_err *err) {
    grpc_call_error ce = grpc_call_start_batch(k->call, ops, n, tag(t), NULL);
    if (ce != GRPC_CALL_OK) {
        rtx__client_err(err, RTX_CLIENT_EINTERNAL, -1, "%s: gRPC refused a batch (error %d)",
                        path, (int)ce);
        return -1;
    }
    for (;;) {
        if (cancel && *cancel && !k->cancelled) {
            k->cancelled = true;
            grpc_call_cancel(k->call, NULL);
        }
        gpr_timespec until = gpr_inf_future(GPR_CLOCK_REALTIME);
        if (cancel && !k->cancelled)
            until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(50, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_pluck(k->cq, tag(t), until, NULL);
        if (ev.type == GRPC_OP_COMPLETE) return ev.success;
        if (ev.type != GRPC_QUEUE_TIMEOUT) return 0;
    }
}

/* The error of a finished call from its status (0 when OK). */
static int status_error(const struct call *k, const char *path, struct rtx_client_err *err) {
    if (k->status == GRPC_STATUS_OK) return 0;
    int code = rtx__client_code_from_grpc(k->status);
    size_t n = GRPC_SLICE_LENGTH(k->details);
    if (n == 0)
        return rtx__client_err(err, code, (int)k->status, "%s: %s", path,
                               rtx_client_strerror(code));
    return rtx__client_err(err, code, (int)k->status, "%.*s", (int)n,
                           (const char *)GRPC_SLICE_START_PTR(k->details));
}

/* Decodes a received message of type desc; *out freed by the caller. */
static int decode(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **out, struct rtx_client_err *err) {
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return rtx__client_err(err, RTX_CLIENT_EPROTO, -1, "cannot read the %s response",
                               desc->name);
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    *out = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    size_t len = GRPC_SLICE_LENGTH(s);
    grpc_slice_unref(s);
    if (!*out)
        return rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                               "cannot decode the %s response (%zu bytes): malformed, or out "
                               "of memory", desc->name, len);
    return 0;
}

int rtx__client_unary(struct rtx_client *c, enum rtx__client_method m,
                      const ProtobufCMessage *req, ProtobufCMessage **resp,
                      struct rtx_client_err *err) {
    *resp = NULL;
    struct call k;
    int rc = call_setup(c, m, req, c ? c->timeout_ms : 0, &k, err);
    if (rc < 0) {
        call_cleanup(&k);
        return rc;
    }
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &k.md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = k.send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k.initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &k.recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &k.trailing_md;
    ops[5].data.recv_status_on_client.status = &k.status;
    ops[5].data.recv_status_on_client.status_details = &k.details;
    ops[5].data.recv_status_on_client.error_string = &k.error_string;
    int ok = run_batch(&k, ops, 6, TAG_START, methods[m].path, NULL, err);
    if (ok < 0) {
        rc = err ? err->code : RTX_CLIENT_EINTERNAL;
    } else if ((rc = status_error(&k, methods[m].path, err)) < 0) {
        /* the server's (or gRPC's) error */
    } else if (!ok) {
        rc = rtx__client_err(err, RTX_CLIENT_EINTERNAL, -1, "%s: the call failed",
                             methods[m].path);
    } else if (!k.recv) {
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1, "%s: no response message",
                             methods[m].path);
    } else if ((rc = decode(k.recv, methods[m].response, resp, err)) == 0) {
        rtx__client_err_clear(err);
    }
    call_cleanup(&k);
    return rc;
}

int rtx__client_stream(struct rtx_client *c, enum rtx__client_method m,
                       const ProtobufCMessage *req, int64_t timeout_ms, rtx__client_stream_cb cb,
                       void *ctx, const volatile int *cancel, struct rtx_client_err *err) {
    struct call k;
    int rc = call_setup(c, m, req, timeout_ms, &k, err);
    if (rc < 0) {
        call_cleanup(&k);
        return rc;
    }
    const char *path = methods[m].path;
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &k.md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = k.send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k.initial_md;
    int ok = run_batch(&k, ops, 4, TAG_START, path, cancel, err);
    if (ok < 0) {
        grpc_call_cancel(k.call, NULL);
        call_cleanup(&k);
        return err ? err->code : RTX_CLIENT_EINTERNAL;
    }
    /* Receive until the stream ends (a failed batch ends it as well: the status says why). */
    int cb_rc = 0;
    while (ok) {
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &k.recv;
        ok = run_batch(&k, ops, 1, TAG_MESSAGE, path, cancel, err);
        if (ok < 0) {
            cb_rc = err ? err->code : RTX_CLIENT_EINTERNAL;
            break;
        }
        if (!ok || !k.recv) break;
        ProtobufCMessage *msg = NULL;
        cb_rc = decode(k.recv, methods[m].response, &msg, err);
        grpc_byte_buffer_destroy(k.recv);
        k.recv = NULL;
        if (cb_rc == 0) cb_rc = cb(ctx, msg, err);
        if (cb_rc < 0) break;
    }
    if (cb_rc < 0) grpc_call_cancel(k.call, NULL);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &k.trailing_md;
    ops[0].data.recv_status_on_client.status = &k.status;
    ops[0].data.recv_status_on_client.status_details = &k.details;
    ops[0].data.recv_status_on_client.error_string = &k.error_string;
    struct rtx_client_err status_err;
    ok = run_batch(&k, ops, 1, TAG_STATUS, path, NULL, &status_err);
    if (cb_rc < 0) {
        rc = cb_rc; /* err already describes it; the status only says "cancelled" */
    } else if (k.cancelled) {
        rc = rtx__client_err(err, RTX_CLIENT_ECANCELLED, -1, "%s: cancelled", path);
    } else if (ok < 0) {
        rc = rtx__client_err(err, status_err.code, -1, "%s", status_err.msg);
    } else if ((rc = status_error(&k, path, err)) == 0) {
        rtx__client_err_clear(err);
    }
    call_cleanup(&k);
    return rc;
}
