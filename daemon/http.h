/*
 * http.h - rtxd's HTTP server: the KServe v2 REST protocol (health, server and model metadata,
 * model config and statistics, inference with JSON tensors and the binary tensor data
 * extension, the model repository and the system shared-memory extension) and Prometheus'
 * /metrics, served by libh2o on a libuv loop (rtxd's main loop). Only daemon/ and the unit tests
 * include it.
 *
 * DESIGN
 * The server's handles live on one libuv loop: the caller's (rtxd's main loop), or one of its
 * own on a thread it starts; only that loop's thread touches them. h2o keeps per-thread
 * caches of recycled memory that it never releases, so rtxd runs it on the main thread,
 * which lives to the end of the process (a thread of its own drains what it can reach of
 * them before it ends). Cheap endpoints answer on the loop. Inference does not block it:
 * the request is decoded on the loop (rtx__http_infer_parse), handed to the serving core,
 * and the core's completion, on a worker thread, renders the answer
 * (rtx__http_infer_render) and queues it for the loop with uv_async_send; the loop drains the
 * queue fully (sends coalesce) and writes each answer whose client is still there. Model
 * loads and unloads, which block, run on libuv's thread pool and come back the same way. A
 * client that goes away before its answer sets the request's cancel flag.
 *
 * The codec (rtx__http_infer_*) is separate from the server so that it can be unit tested
 * without sockets: it turns a request body (JSON, or JSON followed by binary tensors when an
 * Inference-Header-Content-Length is given) into tensors, and a result into a body in the
 * same two forms, reading inputs from and writing outputs into registered shared-memory
 * regions when the request names them.
 */
#ifndef RTX_DAEMON_HTTP_H
#define RTX_DAEMON_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/kserve.h"
#include "daemon/shm.h"
#include "serving/serving.h"
#include "runtime/runtime.h"

struct rtx_daemon; /* daemon/daemon.h */
struct uv_loop_s;  /* uv.h */

/* ------------------------------------------------------------------------------------------
 * The server
 * ---------------------------------------------------------------------------------------- */

struct rtx_http;

struct rtx_http_options {
    const char *listen;     /* "host:port" or "[v6]:port"; port 0 picks a free one */
    int64_t max_body_bytes; /* larger request bodies are answered 413, bytes */
    struct rtx_daemon *daemon; /* serving (may be NULL: no models), shm, jobs, gpus, draining */
    struct uv_loop_s *loop;    /* the loop to serve on (its thread runs it and calls
                                  rtx_http_start); NULL: a loop on a thread of the server's */
};

/* Binds opt->listen (an error names the address when it cannot be parsed or bound), sets up
 * the handles on the loop (and starts the server's thread when opt->loop is NULL) and
 * returns. *bound_port (may be NULL) gets the port bound. */
int rtx_http_start(const struct rtx_http_options *opt, struct rtx_http **out, int *bound_port,
                   struct rtx_err *err);
/* Stops accepting connections, asks HTTP/2 clients to go away, waits up to grace_ms for the
 * requests in flight (then sets their cancel flags and waits for their completions, which
 * the serving core guarantees), closes every connection and every handle of the server (and
 * stops its thread). Blocking, and it needs the loop running: never call it from the loop's
 * thread. Idempotent. */
void rtx_http_shutdown(struct rtx_http *h, int grace_ms);
/* Shuts down (grace 0) if needed and frees everything; with a caller's loop, the server must
 * have been shut down (the loop no longer runs it). NULL: no-op. */
void rtx_http_free(struct rtx_http *h);

/* The HTTP status for an RTX_E* code (Triton's mapping: bad requests 400, unknown model or
 * region 404, unavailable, expired or canceled 503, everything else 500). */
int rtx__http_status_from_err(int code);

/* ------------------------------------------------------------------------------------------
 * The KServe v2 inference codec
 * ---------------------------------------------------------------------------------------- */

/* How one requested output is answered. */
struct rtx_http_output {
    char *name;
    int binary;          /* -1: as the request's binary_data_output says; 0 JSON; 1 binary */
    char *shm_region;    /* NULL: in the body; else written into this region */
    uint64_t shm_offset, shm_byte_size; /* bytes */
    void *shm_addr;      /* the mapped window (shm_byte_size bytes) */
    struct rtx_shm_ref *shm_ref;
};

/* A BYTES input: its shape and elements, pointing into buf (owned; the elements in their
 * binary form). */
struct rtx_http_bytes {
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    int64_t n;
    struct rtx_kserve_str *s; /* n elements; NULL for an input that is not BYTES */
    char *buf;
};

/* A decoded inference request. Everything is owned by it (rtx__http_infer_free). */
struct rtx_http_infer {
    char *id;                      /* the request's "id"; NULL when absent */
    int n_inputs;
    struct rtx_infer_input *inputs; /* names and tensors owned here; tensor NULL for BYTES */
    struct rtx_http_bytes *bytes;   /* n_inputs entries: bytes[i].s set for a BYTES input */
    int n_outputs;                 /* requested outputs; 0 = all of the model's */
    struct rtx_http_output *outputs;
    const char **output_names;     /* n_outputs names, for struct rtx_infer_request */
    bool binary_output;            /* request parameter binary_data_output */
    int priority;                  /* parameter "priority"; 0 = default */
    char *lane;                    /* parameter "lane" (an SLA lane); NULL = default */
    int64_t timeout_us;            /* parameter "timeout", microseconds; 0 = none */
    json_t *params;                /* the request's "parameters" object (a reference), or NULL */
};

/* Decodes a request body. header_len < 0: the whole body is JSON and no input may use
 * binary_data_size; else the first header_len bytes are JSON and the rest holds the binary
 * inputs in the order they are listed. Inputs come from JSON "data" (nested or flat, in
 * row-major order), the binary part, or a shared-memory region of shm (NULL: refused).
 * BYTES inputs come as JSON strings or, in binary, as 4-byte little-endian lengths each
 * followed by its element (into q->bytes; their element count is checked against "shape").
 * Each input's element count and byte size are checked against its "shape" and "datatype";
 * the model's own checks (names, datatypes, dims) are the serving core's. RTX_EFORMAT for
 * malformed JSON (with line and column), RTX_EINVAL for a request that is well-formed JSON
 * but not a valid inference request (also for an unknown shared-memory region or a window
 * past its end), RTX_EUNSUPPORTED for a datatype or parameter rtxd does not support,
 * RTX_ENOMEM; every message names the input or output and the problem. */
int rtx__http_infer_parse(const char *body, size_t len, int64_t header_len, struct rtx_shm *shm,
                          struct rtx_http_infer **out, struct rtx_err *err);
void rtx__http_infer_free(struct rtx_http_infer *q); /* NULL: no-op */

/* An answer: a body (rtx_malloc'ed) and, when binary outputs follow the JSON, the JSON's
 * length (the Inference-Header-Content-Length); -1 when the body is JSON only. */
struct rtx_http_body {
    char *data;
    size_t len;          /* bytes */
    int64_t header_len;  /* bytes, or -1 */
};

/* Renders a successful result: {"model_name", "model_version", "id", "outputs": [...]}, each
 * output as JSON "data", as binary data after the JSON (parameters.binary_data_size), or
 * written into its shared-memory region (parameters.shared_memory_region and _byte_size).
 * RTX_EINVAL when an output does not fit its region (the message names both), RTX_ENOMEM. */
int rtx__http_infer_render(const struct rtx_http_infer *q, const struct rtx_infer_result *res,
                           struct rtx_http_body *out, struct rtx_err *err);

/* BYTES inputs (http-infer-bytes.c): b's elements from a copy of the binary form (data, len
 * bytes), or from a JSON "data" array of strings; RTX_EINVAL naming input `name` for a bad
 * length prefix, a count other than numel or a non-string. rtx__http_bytes_free(NULL) and of
 * an unset b are no-ops. */
int rtx__http_bytes_take(struct rtx_http_bytes *b, const void *data, size_t len, int64_t numel,
                         const char *name, struct rtx_err *err);
int rtx__http_bytes_json(struct rtx_http_bytes *b, json_t *data, int64_t numel, const char *name,
                         struct rtx_err *err);
void rtx__http_bytes_free(struct rtx_http_bytes *b);

/* Renders the final output of a generation (text_output, BYTES [n]) for request q as
 * rtx__http_infer_render does (JSON strings, or binary after the JSON when asked for), with
 * finish_reason and token counts in the response's "parameters". RTX_EINVAL for text that
 * JSON cannot hold (not UTF-8: ask for binary data), RTX_ENOMEM. */
int rtx__http_infer_render_text(const struct rtx_http_infer *q, const struct rtx_model_info *model,
                         const struct rtx_kserve_gen_output *o, struct rtx_http_body *out,
                         struct rtx_err *err);

/* {"error": msg} as an rtx_malloc'ed body; NULL when out of memory. */
char *rtx__http_error_json(const char *msg, size_t *len);

#endif /* RTX_DAEMON_HTTP_H */
