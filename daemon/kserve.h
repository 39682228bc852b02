/*
 * kserve.h - what the two KServe v2 front ends (the gRPC service in handlers-infer*.c and the
 * HTTP codec in http-infer.c) share beyond the serving core: BYTES tensors in their binary
 * form (kserve-bytes.c) and requests to generative models (kserve-gen.c), which take and
 * answer BYTES tensors after the convention of Triton's vLLM backend. Only daemon/ and the
 * unit tests include it.
 *
 * DESIGN
 * A BYTES tensor travels in binary (raw_input_contents, the HTTP binary-data extension, a
 * shared-memory region) as Triton serializes it: each element a 4-byte little-endian length
 * followed by that many bytes, elements in row-major order, nothing after the last. The
 * front ends turn every other form (gRPC bytes_contents, JSON arrays of strings) into the
 * same element lists, so the checks live in one place.
 *
 * A generative model (rtx_model_generator not NULL) takes text_input (BYTES [1]) and the
 * optional stream (BOOL [1]), sampling_parameters (BYTES [1], a JSON object) and
 * exclude_input_in_output (BOOL [1]), and answers text_output (BYTES [n], one element per
 * choice). kserve-gen.c turns such a request into one of the model's engine (prompt encoded
 * with the model's tokenizer, sampling fields from the request's parameters overridden by
 * sampling_parameters) and its engine events into outputs: one per event when streaming,
 * else one with every choice's whole text at the end. The front end says how to deliver an
 * output and the end; the engine's callbacks run on its thread, so they only pack and queue.
 */
#ifndef RTX_DAEMON_KSERVE_H
#define RTX_DAEMON_KSERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "generation/generation.h"
#include "runtime/runtime.h"
#include "serving/serving.h"

/* ------------------------------------------------------------------------------------------
 * BYTES tensors (kserve-bytes.c)
 * ---------------------------------------------------------------------------------------- */

/* One element of a BYTES tensor: len bytes at data (not NUL-terminated). */
struct rtx_kserve_str {
    const char *data;
    size_t len; /* bytes */
};

/* Splits the binary form of a BYTES tensor of `count` elements (buf, len bytes) into out
 * (count entries pointing into buf). RTX_EINVAL naming `name` (the input) for a length that
 * runs past the end, fewer or more elements than count, or an element longer than 4 GiB. */
int rtx__kserve_bytes_split(const void *buf, size_t len, int64_t count, const char *name,
                            struct rtx_kserve_str *out, struct rtx_err *err);
/* Bytes of the binary form of n elements. */
size_t rtx__kserve_bytes_size(const struct rtx_kserve_str *s, int64_t n);
/* Writes the binary form of n elements to dst (rtx__kserve_bytes_size(s, n) bytes). */
void rtx__kserve_bytes_write(const struct rtx_kserve_str *s, int64_t n, void *dst);

/* The KServe datatype of a model input or output: "BYTES" for a BYTES one, else the name
 * of its dtype. */
const char *rtx__kserve_io_datatype(const struct rtx_model_io *io);

/* ------------------------------------------------------------------------------------------
 * Generative models (kserve-gen.c)
 * ---------------------------------------------------------------------------------------- */

/* One answer of a generation request: text_output's elements (one per choice). */
struct rtx_kserve_gen_output {
    int n;                             /* choices */
    const struct rtx_kserve_str *text; /* n elements; "" for a choice with nothing new */
    bool final;                        /* nothing follows; the request succeeded */
    /* on the final answer only (else NULL / zero): */
    const char *finish_reason; /* each choice's "stop" or "length", comma-separated */
    const struct rtx_gen_usage *usage;
};

/* Delivers an answer (the engine's thread; must not block). */
typedef void (*rtx_kserve_gen_output_fn)(void *ctx, const struct rtx_kserve_gen_output *out);
/* The end of a request, exactly once after its outputs: status 0 (the final output was
 * given) or the engine's error (err names it). The engine's thread. */
typedef void (*rtx_kserve_gen_end_fn)(void *ctx, int status, const struct rtx_err *err);

/* What a KServe request to a generative model carries, decoded by the front end. */
struct rtx_kserve_gen_args {
    struct rtx_model *model; /* the caller's reference: the request takes it over
                                when it starts (kept until on_end has run) */
    const char *text;        /* text_input's element (required) */
    size_t text_len;         /* bytes */
    int stream;              /* input stream: -1 absent, 0, 1 */
    int exclude_input;       /* input exclude_input_in_output: -1 absent, 0, 1 */
    const char *sampling;    /* sampling_parameters' element (JSON); NULL: absent */
    size_t sampling_len;     /* bytes */
    json_t *params;          /* the request's parameters (an object), or NULL */
    bool unary;              /* the call answers once (ModelInfer, HTTP infer) */
    const char *lane;        /* SLA lane; NULL: the engine's default */
    int64_t deadline_ns;     /* CLOCK_MONOTONIC; 0: none */
    rtx_kserve_gen_output_fn on_output;
    rtx_kserve_gen_end_fn on_end;
    void *ctx;
};

struct rtx_kserve_gen;

/* Checks the request (text_input present, sampling fields of the right types and known
 * names, no logprobs, which text_output cannot carry, stream not asked of a unary call),
 * encodes the prompt and submits it to the model's
 * engine, which checks the values and the prompt's length. RTX_EINVAL naming the input or
 * field, RTX_EUNSUPPORTED for a model that is not generative, or the engine's refusal
 * (RTX_EINVAL, RTX_EOVERLOAD, ...); on error no callback runs and the caller keeps its model
 * reference. On 0 the request owns that reference and *out holds one reference to the
 * request for the caller (the callbacks may already be running): rtx__kserve_gen_cancel it
 * when the client goes away, release it with rtx__kserve_gen_unref at any time. */
int rtx__kserve_gen_start(const struct rtx_kserve_gen_args *a, struct rtx_kserve_gen **out,
                          struct rtx_err *err);
/* Cancels the generation (on_end follows with RTX_ECANCELED unless it already ran). Any
 * thread, any number of times. */
void rtx__kserve_gen_cancel(struct rtx_kserve_gen *g);
void rtx__kserve_gen_unref(struct rtx_kserve_gen *g); /* NULL: no-op */

/* Applies the sampling fields of a JSON object to p. strict: an unknown key is RTX_EINVAL
 * (sampling_parameters), else it is skipped (a request's parameters carry other things too).
 * Numbers may come as decimal strings and booleans as "true"/"false" (Triton's vLLM clients
 * send them so). Stop strings point into obj. RTX_EINVAL names `what` and the field. */
int rtx__kserve_gen_params_apply(json_t *obj, bool strict, const char *what,
                                 struct rtx_gen_params *p, struct rtx_err *err);

#endif /* RTX_DAEMON_KSERVE_H */
