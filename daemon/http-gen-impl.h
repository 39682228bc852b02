/*
 * http-gen-impl.h - internals of rtxd's HTTP front ends of text generation (docs/generation.md,
 * "HTTP APIs"), shared by their files and the unit tests:
 *   http-gen-parse.c   request bodies of OpenAI's /v1/completions and /v1/chat/completions and
 *                      of Triton's generate extension into a struct rtx_http_gen_req;
 *   http-gen-render.c  the answers in each API's shapes: stream chunks (Server-Sent Events),
 *                      whole answers, errors;
 *   http-stream.c      a generation in flight: the engine's callbacks, the queue of rendered
 *                      chunks to the loop, the streamed (h2o generator, flow control) or whole
 *                      answer, cancellation and shutdown;
 *   http-openai.c      the endpoints of both APIs and what they share with the model (prompt
 *                      encoding, the chat template, /v1/models).
 * The parser and the renderer are pure functions of their inputs (the renderer reads the
 * model's tokenizer for the token strings of logprobs): test-http-gen.c tests them without
 * sockets.
 */
#ifndef RTX_DAEMON_HTTP_GEN_IMPL_H
#define RTX_DAEMON_HTTP_GEN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "generation/generation.h"
#include "runtime/runtime.h"

struct rtx_tokenizer;

/* ------------------------------------------------------------------------------------------
 * Requests (http-gen-parse.c)
 * ---------------------------------------------------------------------------------------- */

enum rtx_http_gen_api {
    RTX_HTTP_GEN_COMPLETIONS, /* POST /v1/completions */
    RTX_HTTP_GEN_CHAT,        /* POST /v1/chat/completions */
    RTX_HTTP_GEN_TRITON,      /* POST /v2/models/{m}/generate and /generate_stream */
    RTX_HTTP_GEN_API_COUNT
};

/* One prompt: text to encode, or token ids as given. */
struct rtx_http_gen_prompt {
    char *text;   /* NULL when given as ids (the echo's text is decoded then) */
    size_t len;   /* bytes */
    int32_t *ids; /* given, or encoded from text before submitting */
    int n_ids;
};

/* Sampling fields the request set itself; the others take the model's defaults
 * (rtx__http_gen_apply_defaults). */
enum {
    RTX_HTTP_GEN_SET_TEMPERATURE = 1u << 0,
    RTX_HTTP_GEN_SET_TOP_P = 1u << 1,
    RTX_HTTP_GEN_SET_TOP_K = 1u << 2,
    RTX_HTTP_GEN_SET_MIN_P = 1u << 3,
    RTX_HTTP_GEN_SET_REPETITION = 1u << 4,
    RTX_HTTP_GEN_SET_PRESENCE = 1u << 5,
    RTX_HTTP_GEN_SET_FREQUENCY = 1u << 6,
};

/* A decoded request; everything is owned by it (rtx__http_gen_req_free). */
struct rtx_http_gen_req {
    enum rtx_http_gen_api api;
    char *model;   /* OpenAI's "model"; NULL for Triton (the path) */
    int n_prompts; /* 1 for chat and Triton */
    struct rtx_http_gen_prompt *prompts;
    int n_msgs;                        /* chat */
    struct rtx_gen_chat_message *msgs; /* role and content owned */
    bool add_generation_prompt;        /* chat: default true */
    struct rtx_gen_params params;      /* stop strings point into stop[], ids into stop_ids */
    char *stop[RTX_GEN_MAX_STOP];
    int32_t *stop_ids;
    unsigned set;       /* RTX_HTTP_GEN_SET_* */
    bool sse;           /* the answer is an event stream (text/event-stream) */
    bool stream;        /* chunks token by token (an event stream only; Triton's
                           generate_stream with "stream": false sends one) */
    bool include_usage; /* stream_options.include_usage */
    bool echo;          /* completions: the prompt before the text; Triton:
                           !exclude_input_in_output */
    bool chat_logprobs; /* chat: "logprobs": true (params.logprobs: top) */
    char *lane;         /* body "lane"; NULL: the header's or the default */
};

/* Decodes a request body of api. Unknown OpenAI fields are ignored (as OpenAI's servers do);
 * unknown Triton fields are refused (Triton maps them to model inputs the model lacks).
 * RTX_EFORMAT for malformed JSON (the message names line, column and byte position),
 * RTX_EINVAL for a field of the wrong type or out of range, RTX_EUNSUPPORTED for a feature
 * rtxd does not implement (suffix, tools, response_format json, best_of != n, ...),
 * RTX_ENOMEM. On error, param (param_cap bytes, may be NULL) gets the offending field's name
 * ("" when none). */
int rtx__http_gen_parse(enum rtx_http_gen_api api, const char *body, size_t len,
                        struct rtx_http_gen_req **out, char *param, size_t param_cap,
                        struct rtx_err *err);
void rtx__http_gen_req_free(struct rtx_http_gen_req *q); /* NULL: no-op */
/* Gives the sampling fields the request left unset the values of defaults (the model's,
 * rtx_gen_model_default_params). */
void rtx__http_gen_apply_defaults(struct rtx_http_gen_req *q, const struct rtx_gen_params *dflt);

/* ------------------------------------------------------------------------------------------
 * Answers (http-gen-render.c)
 * ---------------------------------------------------------------------------------------- */

/* A growable byte buffer (rtx_malloc'ed). */
struct rtx_http_buf {
    char *data;
    size_t len, cap; /* bytes */
};
int rtx__http_buf_append(struct rtx_http_buf *b, const void *p, size_t n);
void rtx__http_buf_free(struct rtx_http_buf *b);

/* One choice's state while it is generated. */
struct rtx_http_gen_choice {
    struct rtx_http_buf text; /* whole answers: the text so far */
    int n_tokens, cap_tokens; /* whole answers with logprobs: every token so far */
    int32_t *tokens;
    float *logprobs;
    struct rtx_gen_logprob *top; /* n_tokens * n_top */
    int n_top;
    enum rtx_gen_finish finish;
    bool started;        /* streams: its first chunk was rendered */
    int64_t text_offset; /* completions' logprobs: characters before the next
                            token (the echoed prompt included) */
};

/* What the answers of one request say and the state of its choices. */
struct rtx_http_gen_view {
    const struct rtx_http_gen_req *q;
    const struct rtx_tokenizer *tok; /* token strings of logprobs */
    char id[48];                     /* "cmpl-...", "chatcmpl-..." */
    int64_t created;                 /* unix seconds */
    char model[128];                 /* the name answered ("model", "model_name") */
    char version[24];                /* Triton's "model_version" */
    int n_choices;                   /* n_prompts * params.n */
    struct rtx_http_gen_choice *choices;
};

/* Sets up v for q (its id from 16 random bytes, created now) with n_choices choices. */
int rtx__http_gen_view_init(struct rtx_http_gen_view *v, const struct rtx_http_gen_req *q,
                            const struct rtx_tokenizer *tok, const char *model, int64_t version,
                            struct rtx_err *err);
void rtx__http_gen_view_free(struct rtx_http_gen_view *v);

/* Takes one event of prompt prompt_idx's choices: a stream appends its chunk(s) to out
 * ("data: {...}\n\n"; nothing for an event without text, tokens or finish); a whole answer
 * keeps the text (and the logprobs) for rtx__http_gen_render_end. RTX_ENOMEM, RTX_EINVAL
 * for a token the tokenizer does not know. */
int rtx__http_gen_render_event(struct rtx_http_gen_view *v, int prompt_idx,
                               const struct rtx_gen_event *ev, struct rtx_http_buf *out,
                               struct rtx_err *err);
/* The end of a successful request: a stream's usage chunk (stream_options.include_usage)
 * and "data: [DONE]\n\n" (OpenAI; Triton's streams end without a marker); a whole answer's
 * JSON body. usage sums the engine requests' usage. */
int rtx__http_gen_render_end(struct rtx_http_gen_view *v, const struct rtx_gen_usage *usage,
                             struct rtx_http_buf *out, struct rtx_err *err);
/* An error body in api's shape: OpenAI's {"error": {"message", "type", "param", "code"}}
 * (type from the status: invalid_request_error, rate_limit_exceeded, server_error, ...),
 * Triton's {"error": "..."}. param NULL or "": null. NULL when out of memory. */
char *rtx__http_gen_error_body(enum rtx_http_gen_api api, int status, const char *msg,
                               const char *param, size_t *len);
/* The SSE form of an error in the middle of a stream: "data: <body>\n\n", then
 * "data: [DONE]\n\n" for OpenAI. */
int rtx__http_gen_error_event(enum rtx_http_gen_api api, int status, const char *msg,
                              struct rtx_http_buf *out);

#endif /* RTX_DAEMON_HTTP_GEN_IMPL_H */
