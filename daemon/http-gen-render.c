/*
 * http-gen-render.c - the answers of the generation front ends (daemon/http-gen-impl.h) in
 * each API's shapes: OpenAI's text_completion and chat.completion objects and their stream
 * chunks (Server-Sent Events ending "data: [DONE]"), Triton's generate answers and
 * generate_stream events, and the errors of both.
 *
 * DESIGN
 * Rendering runs where the engine's events arrive (its thread), never on the loop: a stream's
 * event becomes its chunk at once; a whole answer keeps each choice's text (and tokens with
 * their logprobs when asked) until the end. Token strings of logprobs are each token decoded
 * alone (special tokens kept), as vLLM answers them: a token that ends inside a UTF-8
 * character reads U+FFFD, and "bytes" are the UTF-8 of that string. Completions' text_offset
 * counts characters (code points, as Python's str) of those strings from the start of the
 * text, the echoed prompt included. Logprobs are written as vLLM does, -9999 for -inf.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "daemon/http-gen-impl.h"
#include "formats/formats.h"

/* ------------------------------------------------------------------------------------------
 * Buffers and small helpers
 * ---------------------------------------------------------------------------------------- */

int rtx__http_buf_append(struct rtx_http_buf *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = rtx_realloc(b->data, cap);
        if (!d) return RTX_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

void rtx__http_buf_free(struct rtx_http_buf *b) {
    rtx_free(b->data);
    memset(b, 0, sizeof *b);
}

static int64_t code_points(const char *s, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* A JSON string of n bytes; bytes that are not UTF-8 become '?' (error messages may quote a
 * client's bytes). */
static json_t *jstr(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j || !s) return j;
    char *c = rtx_malloc(n + 1);
    if (!c) return NULL;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)s[i] < 0x80 && s[i] ? s[i] : '?';
    j = json_stringn(c, n);
    rtx_free(c);
    return j;
}

static json_t *jlogprob(float lp) {
    return json_real(isfinite(lp) ? (lp < -9999.0f ? -9999.0 : lp) : -9999.0);
}

/* Appends "data: <j>\n\n" (j taken). */
static int sse_append(struct rtx_http_buf *out, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s) return RTX_ENOMEM;
    int rc = rtx__http_buf_append(out, "data: ", 6);
    if (!rc) rc = rtx__http_buf_append(out, s, strlen(s));
    if (!rc) rc = rtx__http_buf_append(out, "\n\n", 2);
    free(s);
    return rc;
}

/* The token's text, decoded alone (rtx_malloc'ed). */
static int token_text(const struct rtx_http_gen_view *v, int32_t id, char **s, size_t *n,
                      struct rtx_err *err) {
    return rtx_tokenizer_decode(v->tok, &id, 1, false, s, n, err);
}

/* ------------------------------------------------------------------------------------------
 * The view
 * ---------------------------------------------------------------------------------------- */

int rtx__http_gen_view_init(struct rtx_http_gen_view *v, const struct rtx_http_gen_req *q,
                            const struct rtx_tokenizer *tok, const char *model, int64_t version,
                            struct rtx_err *err) {
    memset(v, 0, sizeof *v);
    v->q = q;
    v->tok = tok;
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* only before boot entropy */
        uint64_t t = (uint64_t)rtx_mono_ns() ^ (uint64_t)(uintptr_t)v;
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 131);
    }
    size_t k = (size_t)snprintf(v->id, sizeof v->id, "%s",
                                q->api == RTX_HTTP_GEN_CHAT ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof rnd; i++)
        k += (size_t)snprintf(v->id + k, sizeof v->id - k, "%02x", rnd[i]);
    v->created = (int64_t)time(NULL);
    snprintf(v->model, sizeof v->model, "%s", model);
    snprintf(v->version, sizeof v->version, "%" PRId64, version);
    v->n_choices = q->n_prompts * q->params.n;
    v->choices = rtx_calloc((size_t)v->n_choices, sizeof *v->choices);
    if (!v->choices) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (int i = 0; i < v->n_choices; i++) {
        const struct rtx_http_gen_prompt *p = &q->prompts[i / q->params.n];
        if (q->echo && p->text) v->choices[i].text_offset = code_points(p->text, p->len);
    }
    return 0;
}

void rtx__http_gen_view_free(struct rtx_http_gen_view *v) {
    for (int i = 0; v->choices && i < v->n_choices; i++) {
        struct rtx_http_gen_choice *c = &v->choices[i];
        rtx__http_buf_free(&c->text);
        rtx_free(c->tokens);
        rtx_free(c->logprobs);
        rtx_free(c->top);
    }
    rtx_free(v->choices);
    v->choices = NULL;
}

/* ------------------------------------------------------------------------------------------
 * Logprobs
 * ---------------------------------------------------------------------------------------- */

/* Completions: {tokens, token_logprobs, top_logprobs, text_offset} over n tokens; *offset
 * moves past them. */
static json_t *completion_logprobs(const struct rtx_http_gen_view *v, int n, const int32_t *ids,
                                   const float *lps, int n_top, const struct rtx_gen_logprob *top,
                                   int64_t *offset, struct rtx_err *err) {
    json_t *toks = json_array(), *tlp = json_array(), *tops = json_array(), *offs = json_array();
    json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", tlp,
                          "top_logprobs", tops, "text_offset", offs);
    if (!o) {
        rtx_err_set(err, RTX_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        char *s = NULL;
        size_t len = 0;
        if (token_text(v, ids[i], &s, &len, err) != 0) {
            json_decref(o);
            return NULL;
        }
        json_t *d = json_object();
        bool ok = d && json_array_append_new(toks, jstr(s, len)) == 0 &&
                  json_array_append_new(tlp, jlogprob(lps[i])) == 0 &&
                  json_array_append_new(offs, json_integer(*offset)) == 0 &&
                  json_object_set_new(d, s, jlogprob(lps[i])) == 0; /* the sampled one too */
        *offset += code_points(s, len);
        rtx_free(s);
        for (int k = 0; ok && k < n_top; k++) {
            const struct rtx_gen_logprob *a = &top[(size_t)i * n_top + k];
            if (token_text(v, a->token, &s, &len, err) != 0) {
                json_decref(d);
                json_decref(o);
                return NULL;
            }
            ok = json_object_set_new(d, s, jlogprob(a->logprob)) == 0;
            rtx_free(s);
        }
        if (!ok || json_array_append_new(tops, d) != 0) {
            json_decref(o);
            rtx_err_set(err, RTX_ENOMEM, "out of memory");
            return NULL;
        }
    }
    return o;
}

/* Chat: {"token", "logprob", "bytes"} of one token. */
static json_t *chat_token(const struct rtx_http_gen_view *v, int32_t id, float lp,
                          struct rtx_err *err) {
    char *s = NULL;
    size_t len = 0;
    if (token_text(v, id, &s, &len, err) != 0) return NULL;
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < len; i++)
        if (json_array_append_new(bytes, json_integer((unsigned char)s[i])) != 0) {
            json_decref(bytes);
            bytes = NULL;
        }
    json_t *o = bytes ? json_pack("{s:o,s:o,s:o}", "token", jstr(s, len), "logprob", jlogprob(lp),
                                  "bytes", bytes)
                      : NULL;
    rtx_free(s);
    if (!o) rtx_err_set(err, RTX_ENOMEM, "out of memory");
    return o;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}. */
static json_t *chat_logprobs(const struct rtx_http_gen_view *v, int n, const int32_t *ids,
                             const float *lps, int n_top, const struct rtx_gen_logprob *top,
                             struct rtx_err *err) {
    json_t *content = json_array();
    json_t *o = json_pack("{s:o}", "content", content);
    if (!o) {
        rtx_err_set(err, RTX_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        json_t *t = chat_token(v, ids[i], lps[i], err);
        json_t *alts = json_array();
        if (!t || !alts || json_object_set_new(t, "top_logprobs", alts) != 0 ||
            json_array_append_new(content, t) != 0) {
            if (alts && (!t || json_object_get(t, "top_logprobs") != alts)) json_decref(alts);
            json_decref(t);
            json_decref(o);
            if (t) rtx_err_set(err, RTX_ENOMEM, "out of memory");
            return NULL;
        }
        for (int k = 0; k < n_top; k++) {
            const struct rtx_gen_logprob *a = &top[(size_t)i * n_top + k];
            json_t *e = chat_token(v, a->token, a->logprob, err);
            if (!e || json_array_append_new(alts, e) != 0) {
                json_decref(o);
                return NULL;
            }
        }
    }
    return o;
}

/* The logprobs of n tokens in the API's shape, or json null when not asked. */
static json_t *logprobs_json(struct rtx_http_gen_view *v, struct rtx_http_gen_choice *c, int n,
                             const int32_t *ids, const float *lps, int n_top,
                             const struct rtx_gen_logprob *top, struct rtx_err *err) {
    if (v->q->params.logprobs < 0 || !lps) return json_null();
    if (v->q->api == RTX_HTTP_GEN_CHAT) return chat_logprobs(v, n, ids, lps, n_top, top, err);
    return completion_logprobs(v, n, ids, lps, n_top, top, &c->text_offset, err);
}

/* ------------------------------------------------------------------------------------------
 * Chunks
 * ---------------------------------------------------------------------------------------- */

static json_t *usage_json(const struct rtx_gen_usage *u) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", u->prompt_tokens,
                     "completion_tokens", u->completion_tokens, "total_tokens",
                     u->prompt_tokens + u->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", u->cached_tokens);
}

/* {"id", "object", "created", "model", "choices": [choice]} (+ "usage": null). */
static json_t *chunk_json(const struct rtx_http_gen_view *v, json_t *choice) {
    bool chat = v->q->api == RTX_HTTP_GEN_CHAT;
    json_t *choices = choice ? json_pack("[o]", choice) : json_array();
    json_t *j = json_pack("{s:s,s:s,s:I,s:o,s:o}", "id", v->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)v->created, "model", jstr(v->model, strlen(v->model)),
                          "choices", choices);
    if (j && v->q->include_usage && json_object_set_new(j, "usage", json_null()) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *finish_json(enum rtx_gen_finish f) {
    return f == RTX_GEN_FINISH_NONE ? json_null() : json_string(rtx_gen_finish_name(f));
}

static int triton_event(struct rtx_http_gen_view *v, const char *a, size_t na, const char *b,
                        size_t nb, struct rtx_http_buf *out) {
    struct rtx_http_buf t = {0};
    int rc = rtx__http_buf_append(&t, a, na);
    if (!rc) rc = rtx__http_buf_append(&t, b, nb);
    if (!rc)
        rc = sse_append(out, json_pack("{s:o,s:s,s:o}", "model_name",
                                       jstr(v->model, strlen(v->model)), "model_version",
                                       v->version, "text_output", jstr(t.data, t.len)));
    rtx__http_buf_free(&t);
    return rc;
}

/* A stream's chunk(s) for one event. */
static int stream_event(struct rtx_http_gen_view *v, int ci, const struct rtx_gen_event *ev,
                        struct rtx_http_buf *out, struct rtx_err *err) {
    struct rtx_http_gen_choice *c = &v->choices[ci];
    const struct rtx_http_gen_prompt *p = &v->q->prompts[ci / v->q->params.n];
    bool first = !c->started;
    bool echo = first && v->q->echo && p->text;
    if (ev->n_tokens == 0 && ev->text_len == 0 && ev->finish == RTX_GEN_FINISH_NONE && !echo)
        return 0;
    c->started = true;
    const char *pre = echo ? p->text : "";
    size_t npre = echo ? p->len : 0;
    if (v->q->api == RTX_HTTP_GEN_TRITON) {
        if (ev->text_len == 0 && !echo && !(first && ev->finish != RTX_GEN_FINISH_NONE)) return 0;
        return triton_event(v, pre, npre, ev->text, ev->text_len, out)
                   ? rtx_err_set(err, RTX_ENOMEM, "out of memory")
                   : 0;
    }
    int rc = 0;
    bool chat = v->q->api == RTX_HTTP_GEN_CHAT;
    if (chat && first) {
        json_t *ch = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", ci, "delta", "role",
                               "assistant", "content", "", "logprobs", "finish_reason");
        if ((rc = sse_append(out, chunk_json(v, ch))))
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        if (ev->n_tokens == 0 && ev->text_len == 0 && ev->finish == RTX_GEN_FINISH_NONE) return 0;
    }
    json_t *lp =
        logprobs_json(v, c, ev->n_tokens, ev->tokens, ev->logprobs, ev->n_top, ev->top, err);
    if (!lp) return err && err->code ? err->code : rtx_err_set(err, RTX_ENOMEM, "out of memory");
    json_t *ch;
    if (chat) {
        json_t *delta = json_object();
        if (delta && ev->text_len > 0)
            json_object_set_new(delta, "content", jstr(ev->text, ev->text_len));
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", ci, "delta", delta, "logprobs", lp,
                       "finish_reason", finish_json(ev->finish));
    } else {
        struct rtx_http_buf t = {0};
        if (rtx__http_buf_append(&t, pre, npre) ||
            rtx__http_buf_append(&t, ev->text ? ev->text : "", ev->text_len)) {
            rtx__http_buf_free(&t);
            json_decref(lp);
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        }
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", ci, "text", jstr(t.data, t.len), "logprobs",
                       lp, "finish_reason", finish_json(ev->finish));
        rtx__http_buf_free(&t);
    }
    if (sse_append(out, chunk_json(v, ch))) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    return 0;
}

/* A whole answer keeps the event. */
static int keep_event(struct rtx_http_gen_view *v, int ci, const struct rtx_gen_event *ev,
                      struct rtx_err *err) {
    struct rtx_http_gen_choice *c = &v->choices[ci];
    if (ev->finish != RTX_GEN_FINISH_NONE) c->finish = ev->finish;
    if (ev->text_len && rtx__http_buf_append(&c->text, ev->text, ev->text_len))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    if (!ev->logprobs || ev->n_tokens == 0) return 0;
    if (c->n_tokens + ev->n_tokens > c->cap_tokens) {
        int cap = c->cap_tokens ? c->cap_tokens : 16;
        while (cap < c->n_tokens + ev->n_tokens)
            cap *= 2;
        int32_t *t = rtx_realloc(c->tokens, (size_t)cap * sizeof *t);
        if (t) c->tokens = t;
        float *l = t ? rtx_realloc(c->logprobs, (size_t)cap * sizeof *l) : NULL;
        if (l) c->logprobs = l;
        struct rtx_gen_logprob *a =
            l && ev->n_top ? rtx_realloc(c->top, (size_t)cap * ev->n_top * sizeof *a) : NULL;
        if (a) c->top = a;
        if (!t || !l || (ev->n_top && !a)) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        c->cap_tokens = cap;
    }
    c->n_top = ev->n_top;
    memcpy(c->tokens + c->n_tokens, ev->tokens, (size_t)ev->n_tokens * sizeof *ev->tokens);
    memcpy(c->logprobs + c->n_tokens, ev->logprobs, (size_t)ev->n_tokens * sizeof *ev->logprobs);
    if (ev->n_top)
        memcpy(c->top + (size_t)c->n_tokens * ev->n_top, ev->top,
               (size_t)ev->n_tokens * ev->n_top * sizeof *ev->top);
    c->n_tokens += ev->n_tokens;
    return 0;
}

int rtx__http_gen_render_event(struct rtx_http_gen_view *v, int prompt_idx,
                               const struct rtx_gen_event *ev, struct rtx_http_buf *out,
                               struct rtx_err *err) {
    int ci = prompt_idx * v->q->params.n + ev->index;
    if (ci < 0 || ci >= v->n_choices || ev->index < 0 || ev->index >= v->q->params.n)
        return rtx_err_set(err, RTX_EINTERNAL,
                           "an event of choice %d of prompt %d; the request "
                           "has %d choices per prompt",
                           ev->index, prompt_idx, v->q->params.n);
    if (v->q->stream) return stream_event(v, ci, ev, out, err);
    return keep_event(v, ci, ev, err);
}

/* ------------------------------------------------------------------------------------------
 * Ends
 * ---------------------------------------------------------------------------------------- */

static json_t *whole_choice(struct rtx_http_gen_view *v, int ci, struct rtx_err *err) {
    struct rtx_http_gen_choice *c = &v->choices[ci];
    const struct rtx_http_gen_prompt *p = &v->q->prompts[ci / v->q->params.n];
    json_t *lp = logprobs_json(v, c, c->n_tokens, c->tokens, c->logprobs, c->n_top, c->top, err);
    if (!lp) return NULL;
    if (v->q->api == RTX_HTTP_GEN_CHAT)
        return json_pack("{s:i,s:{s:s,s:o},s:o,s:o}", "index", ci, "message", "role", "assistant",
                         "content", jstr(c->text.data ? c->text.data : "", c->text.len),
                         "logprobs", lp, "finish_reason", finish_json(c->finish));
    struct rtx_http_buf t = {0};
    if ((v->q->echo && p->text && rtx__http_buf_append(&t, p->text, p->len)) ||
        rtx__http_buf_append(&t, c->text.data ? c->text.data : "", c->text.len)) {
        rtx__http_buf_free(&t);
        json_decref(lp);
        return NULL;
    }
    json_t *o = json_pack("{s:i,s:o,s:o,s:o}", "index", ci, "text", jstr(t.data, t.len),
                          "logprobs", lp, "finish_reason", finish_json(c->finish));
    rtx__http_buf_free(&t);
    return o;
}

static int whole_answer(struct rtx_http_gen_view *v, const struct rtx_gen_usage *usage,
                        struct rtx_http_buf *out, struct rtx_err *err) {
    json_t *j;
    if (v->q->api == RTX_HTTP_GEN_TRITON) {
        const struct rtx_http_gen_prompt *p = &v->q->prompts[0];
        struct rtx_http_gen_choice *c = &v->choices[0];
        struct rtx_http_buf t = {0};
        if ((v->q->echo && rtx__http_buf_append(&t, p->text, p->len)) ||
            rtx__http_buf_append(&t, c->text.data ? c->text.data : "", c->text.len)) {
            rtx__http_buf_free(&t);
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        }
        if (v->q->sse) {
            int rc = triton_event(v, t.data, t.len, "", 0, out);
            rtx__http_buf_free(&t);
            return rc ? rtx_err_set(err, RTX_ENOMEM, "out of memory") : 0;
        }
        j = json_pack("{s:o,s:s,s:o}", "model_name", jstr(v->model, strlen(v->model)),
                      "model_version", v->version, "text_output", jstr(t.data, t.len));
        rtx__http_buf_free(&t);
    } else {
        json_t *choices = json_array();
        for (int i = 0; choices && i < v->n_choices; i++) {
            json_t *ch = whole_choice(v, i, err);
            if (!ch || json_array_append_new(choices, ch) != 0) {
                json_decref(choices);
                return err && err->code ? err->code
                                        : rtx_err_set(err, RTX_ENOMEM, "out of memory");
            }
        }
        bool chat = v->q->api == RTX_HTTP_GEN_CHAT;
        j = json_pack("{s:s,s:s,s:I,s:o,s:o,s:o}", "id", v->id, "object",
                      chat ? "chat.completion" : "text_completion", "created",
                      (json_int_t)v->created, "model", jstr(v->model, strlen(v->model)), "choices",
                      choices, "usage", usage_json(usage));
    }
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    int rc = s ? rtx__http_buf_append(out, s, strlen(s)) : RTX_ENOMEM;
    free(s);
    return rc ? rtx_err_set(err, RTX_ENOMEM, "out of memory") : 0;
}

int rtx__http_gen_render_end(struct rtx_http_gen_view *v, const struct rtx_gen_usage *usage,
                             struct rtx_http_buf *out, struct rtx_err *err) {
    if (!v->q->stream) return whole_answer(v, usage, out, err);
    if (v->q->api == RTX_HTTP_GEN_TRITON) return 0;
    if (v->q->include_usage) {
        json_t *j = chunk_json(v, NULL);
        if (!j || json_object_set_new(j, "usage", usage_json(usage)) != 0 || sse_append(out, j))
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    return rtx__http_buf_append(out, "data: [DONE]\n\n", 14)
               ? rtx_err_set(err, RTX_ENOMEM, "out of memory")
               : 0;
}

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

static json_t *error_json(enum rtx_http_gen_api api, int status, const char *msg,
                          const char *param) {
    json_t *m = jstr(msg, strlen(msg));
    if (api == RTX_HTTP_GEN_TRITON) return json_pack("{s:o}", "error", m);
    const char *type = status == 429   ? "rate_limit_exceeded"
                       : status >= 500 ? (status == 503 ? "service_unavailable" : "server_error")
                                       : "invalid_request_error";
    bool model = param && strcmp(param, "model") == 0;
    const char *code = status == 404 && model ? "model_not_found"
                       : status == 429        ? "rate_limit_exceeded"
                                              : NULL;
    json_t *p = param && param[0] ? json_string(param) : json_null();
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", m, "type", type, "param", p,
                     "code", code ? json_string(code) : json_null());
}

char *rtx__http_gen_error_body(enum rtx_http_gen_api api, int status, const char *msg,
                               const char *param, size_t *len) {
    json_t *j = error_json(api, status, msg, param);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *out = rtx_malloc(n + 1);
    if (out) memcpy(out, s, n + 1);
    free(s);
    if (out && len) *len = n;
    return out;
}

int rtx__http_gen_error_event(enum rtx_http_gen_api api, int status, const char *msg,
                              struct rtx_http_buf *out) {
    int rc = sse_append(out, error_json(api, status, msg, NULL));
    if (!rc && api != RTX_HTTP_GEN_TRITON) rc = rtx__http_buf_append(out, "data: [DONE]\n\n", 14);
    return rc;
}
