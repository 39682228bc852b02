/*
 * http-gen-parse.c - request bodies of the generation front ends (daemon/http-gen-impl.h):
 * OpenAI's /v1/completions and /v1/chat/completions (with vLLM's sampling extras) and Triton's
 * generate extension, into a struct rtx_http_gen_req.
 *
 * DESIGN
 * The sampling fields the APIs share are one table ({name, kind, range, offset into struct
 * rtx_gen_params}), read the same way from an OpenAI body, a Triton body or its "parameters",
 * and Triton's "sampling_parameters" JSON string; the ranges are the engine's
 * (generation/generation.h), checked here so that an error names the request's own field.
 * OpenAI's servers ignore fields they do not know (clients send extras), so do we; a JSON
 * null is an absent field. Triton maps a generate body's fields to model inputs and fails on
 * one the model lacks, so an unknown Triton field is refused.
 */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "daemon/http-gen-impl.h"

#define MAX_PROMPTS 256   /* prompts of one completions request */
#define MAX_STOP_IDS 256  /* stop_token_ids */
#define MAX_MESSAGES 4096 /* chat messages */
#define MAX_LOGPROBS_COMPLETIONS 5

struct pctx {
    struct rtx_err *err;
    char *param;
    size_t cap;
};

__attribute__((format(printf, 4, 5))) static int bad(struct pctx *c, int code, const char *param,
                                                     const char *fmt, ...) {
    if (c->param && c->cap) snprintf(c->param, c->cap, "%s", param ? param : "");
    char msg[sizeof c->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rtx_err_set(c->err, code, "%s", msg);
}

static int oom(struct pctx *c) {
    return bad(c, RTX_ENOMEM, NULL, "out of memory");
}

/* A field, NULL when absent or null. */
static json_t *field(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static int get_bool(struct pctx *c, json_t *obj, const char *key, bool *out) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(c, RTX_EINVAL, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int get_int(struct pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, bool *have) {
    json_t *v = field(obj, key);
    if (have) *have = false;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad(c, RTX_EINVAL, key, "'%s' must be an integer from %" PRId64 " to %" PRId64, key,
                   lo, hi);
    *out = json_integer_value(v);
    if (have) *have = true;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * The sampling fields every API shares
 * ---------------------------------------------------------------------------------------- */

enum kind { K_NUM, K_INT, K_BOOL };

struct sfield {
    const char *name;
    enum kind kind;
    double lo, hi;
    bool lo_open;      /* lo itself is out of range */
    size_t off;        /* in struct rtx_gen_params */
    unsigned set;      /* RTX_HTTP_GEN_SET_* */
    const char *range; /* the message's words */
};

#define P(f) offsetof(struct rtx_gen_params, f)
static const struct sfield sfields[] = {
    {"temperature", K_NUM, 0, 100, false, P(temperature), RTX_HTTP_GEN_SET_TEMPERATURE,
     "a number from 0 to 100"},
    {"top_p", K_NUM, 0, 1, true, P(top_p), RTX_HTTP_GEN_SET_TOP_P,
     "a number greater than 0 and at most 1"},
    {"top_k", K_INT, -1, INT_MAX, false, P(top_k), RTX_HTTP_GEN_SET_TOP_K,
     "-1 or 0 (off) or a positive integer"},
    {"min_p", K_NUM, 0, 1, false, P(min_p), RTX_HTTP_GEN_SET_MIN_P, "a number from 0 to 1"},
    {"repetition_penalty", K_NUM, 0, 10, true, P(repetition_penalty), RTX_HTTP_GEN_SET_REPETITION,
     "a number greater than 0 and at most 10"},
    {"presence_penalty", K_NUM, -2, 2, false, P(presence_penalty), RTX_HTTP_GEN_SET_PRESENCE,
     "a number from -2 to 2"},
    {"frequency_penalty", K_NUM, -2, 2, false, P(frequency_penalty), RTX_HTTP_GEN_SET_FREQUENCY,
     "a number from -2 to 2"},
    {"min_tokens", K_INT, 0, INT_MAX, false, P(min_tokens), 0, "an integer >= 0"},
    {"ignore_eos", K_BOOL, 0, 0, false, P(ignore_eos), 0, "true or false"},
    {"skip_special_tokens", K_BOOL, 0, 0, false, P(skip_special), 0, "true or false"},
};
#undef P

static const struct sfield *sfield_find(const char *key) {
    for (size_t i = 0; i < sizeof sfields / sizeof sfields[0]; i++)
        if (strcmp(sfields[i].name, key) == 0) return &sfields[i];
    return NULL;
}

/* Reads v (not null) as field f into q. */
static int sfield_read(struct pctx *c, const struct sfield *f, json_t *v,
                       struct rtx_http_gen_req *q) {
    char *dst = (char *)&q->params + f->off;
    switch (f->kind) {
    case K_NUM: {
        double x = json_is_number(v) ? json_number_value(v) : f->lo - 1;
        if (!json_is_number(v) || x < f->lo || x > f->hi || (f->lo_open && x == f->lo))
            return bad(c, RTX_EINVAL, f->name, "'%s' must be %s", f->name, f->range);
        *(double *)dst = x;
        break;
    }
    case K_INT:
        if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)f->lo ||
            json_integer_value(v) > (json_int_t)f->hi)
            return bad(c, RTX_EINVAL, f->name, "'%s' must be %s", f->name, f->range);
        *(int *)dst = (int)json_integer_value(v);
        break;
    case K_BOOL:
        if (!json_is_boolean(v))
            return bad(c, RTX_EINVAL, f->name, "'%s' must be true or false", f->name);
        *(bool *)dst = json_is_true(v);
        break;
    }
    q->set |= f->set;
    return 0;
}

static int read_sfields(struct pctx *c, json_t *obj, struct rtx_http_gen_req *q) {
    for (size_t i = 0; i < sizeof sfields / sizeof sfields[0]; i++) {
        json_t *v = field(obj, sfields[i].name);
        int rc = v ? sfield_read(c, &sfields[i], v, q) : 0;
        if (rc) return rc;
    }
    return 0;
}

/* "stop": a string or a list of strings. */
static int read_stop(struct pctx *c, json_t *v, struct rtx_http_gen_req *q) {
    for (int i = 0; i < q->params.n_stop; i++) {
        rtx_free(q->stop[i]);
        q->stop[i] = NULL;
    }
    q->params.n_stop = 0;
    if (!v) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!one && !json_is_array(v))
        return bad(c, RTX_EINVAL, "stop", "'stop' must be a string or a list of strings");
    if (n > RTX_GEN_MAX_STOP)
        return bad(c, RTX_EINVAL, "stop", "'stop' has %zu strings; at most %d", n,
                   RTX_GEN_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return bad(c, RTX_EINVAL, "stop", "'stop'[%zu] must be a non-empty string", i);
        if (!(q->stop[i] = rtx_strdup(json_string_value(s)))) return oom(c);
        q->params.stop[i] = q->stop[i];
        q->params.n_stop = (int)i + 1;
    }
    return 0;
}

static int read_stop_ids(struct pctx *c, json_t *v, struct rtx_http_gen_req *q) {
    rtx_free(q->stop_ids);
    q->stop_ids = NULL;
    q->params.stop_ids = NULL;
    q->params.n_stop_ids = 0;
    if (!v) return 0;
    if (!json_is_array(v) || json_array_size(v) > MAX_STOP_IDS)
        return bad(c, RTX_EINVAL, "stop_token_ids",
                   "'stop_token_ids' must be a list of at most %d token ids", MAX_STOP_IDS);
    size_t n = json_array_size(v);
    if (n == 0) return 0;
    if (!(q->stop_ids = rtx_calloc(n, sizeof *q->stop_ids))) return oom(c);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return bad(c, RTX_EINVAL, "stop_token_ids",
                       "'stop_token_ids'[%zu] must be a token id (an integer >= 0)", i);
        q->stop_ids[i] = (int32_t)json_integer_value(e);
    }
    q->params.stop_ids = q->stop_ids;
    q->params.n_stop_ids = (int)n;
    return 0;
}

static int read_seed(struct pctx *c, json_t *obj, struct rtx_http_gen_req *q) {
    int64_t seed = 0;
    bool have = false;
    int rc = get_int(c, obj, "seed", INT64_MIN, INT64_MAX, &seed, &have);
    if (rc == 0 && have) {
        q->params.has_seed = true;
        q->params.seed = (uint64_t)seed;
    }
    return rc;
}

static int read_lane(struct pctx *c, json_t *obj, struct rtx_http_gen_req *q) {
    json_t *v = field(obj, "lane");
    if (!v) return 0;
    if (!json_is_string(v) || json_string_length(v) == 0)
        return bad(c, RTX_EINVAL, "lane", "'lane' must be the name of an SLA lane (a string)");
    rtx_free(q->lane);
    if (!(q->lane = rtx_strdup(json_string_value(v)))) return oom(c);
    return 0;
}

static int read_max_tokens(struct pctx *c, json_t *obj, const char *key,
                           struct rtx_http_gen_req *q) {
    int64_t x = 0;
    bool have = false;
    int rc = get_int(c, obj, key, 1, INT_MAX, &x, &have);
    if (rc == 0 && have) q->params.max_tokens = (int)x;
    return rc;
}

/* min_tokens past max_tokens can never hold. */
static int check_min_max(struct pctx *c, const struct rtx_http_gen_req *q) {
    if (q->params.max_tokens > 0 && q->params.min_tokens > q->params.max_tokens)
        return bad(c, RTX_EINVAL, "min_tokens",
                   "'min_tokens' (%d) must not exceed the maximum number of tokens (%d)",
                   q->params.min_tokens, q->params.max_tokens);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * OpenAI
 * ---------------------------------------------------------------------------------------- */

/* A list of token ids into p; what names it in messages ("prompt[2]"). */
static int read_ids(struct pctx *c, json_t *arr, const char *what, struct rtx_http_gen_prompt *p) {
    size_t n = json_array_size(arr);
    if (n == 0) return bad(c, RTX_EINVAL, "prompt", "%s is an empty list of token ids", what);
    if (n > INT_MAX / 2) return bad(c, RTX_EINVAL, "prompt", "%s is too long", what);
    if (!(p->ids = rtx_malloc(n * sizeof *p->ids))) return oom(c);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return bad(c, RTX_EINVAL, "prompt", "%s[%zu] must be a token id (an integer >= 0)",
                       what, i);
        p->ids[i] = (int32_t)json_integer_value(e);
    }
    p->n_ids = (int)n;
    return 0;
}

static int set_text(struct pctx *c, json_t *s, struct rtx_http_gen_prompt *p) {
    p->len = json_string_length(s);
    if (!(p->text = rtx_malloc(p->len + 1))) return oom(c);
    memcpy(p->text, json_string_value(s), p->len + 1);
    return 0;
}

/* "prompt": a string, a list of strings, a list of token ids or a list of such lists. */
static int read_prompt(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    static const char shapes[] = "'prompt' must be a string, a list of strings, a list of token "
                                 "ids or a list of lists of token ids";
    json_t *v = field(root, "prompt");
    if (!v) return bad(c, RTX_EINVAL, "prompt", "'prompt' is required");
    size_t n = 1;
    bool ids_one = false;
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) return bad(c, RTX_EINVAL, "prompt", "'prompt' is empty");
        json_t *first = json_array_get(v, 0);
        ids_one = json_is_integer(first);
        n = ids_one ? 1 : json_array_size(v);
        if (!ids_one && !json_is_string(first) && !json_is_array(first))
            return bad(c, RTX_EINVAL, "prompt", "%s", shapes);
    } else if (!json_is_string(v)) {
        return bad(c, RTX_EINVAL, "prompt", "%s", shapes);
    }
    if (n > MAX_PROMPTS)
        return bad(c, RTX_EINVAL, "prompt", "%zu prompts; at most %d in one request", n,
                   MAX_PROMPTS);
    if (!(q->prompts = rtx_calloc(n, sizeof *q->prompts))) return oom(c);
    q->n_prompts = (int)n;
    if (json_is_string(v)) return set_text(c, v, &q->prompts[0]);
    if (ids_one) return read_ids(c, v, "'prompt'", &q->prompts[0]);
    bool strings = json_is_string(json_array_get(v, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        char what[32];
        snprintf(what, sizeof what, "'prompt'[%zu]", i);
        int rc;
        if (strings && json_is_string(e))
            rc = set_text(c, e, &q->prompts[i]);
        else if (!strings && json_is_array(e))
            rc = read_ids(c, e, what, &q->prompts[i]);
        else
            rc = bad(c, RTX_EINVAL, "prompt", "%s: every element must be of one kind", shapes);
        if (rc) return rc;
    }
    return 0;
}

/* A message's content: a string, null, or a list of parts of type "text" (joined by "\n", as
 * vLLM does). *out is rtx_malloc'ed. */
static int read_content(struct pctx *c, json_t *v, size_t mi, char **out) {
    if (!v) return (*out = rtx_strdup("")) ? 0 : oom(c);
    if (json_is_string(v)) return (*out = rtx_strdup(json_string_value(v))) ? 0 : oom(c);
    if (!json_is_array(v))
        return bad(c, RTX_EINVAL, "messages",
                   "'messages'[%zu].content must be a string or a list of content parts", mi);
    struct rtx_http_buf b = {0};
    size_t np;
    json_t *part;
    json_array_foreach(v, np, part) {
        json_t *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            rtx__http_buf_free(&b);
            return bad(c, RTX_EINVAL, "messages",
                       "'messages'[%zu].content[%zu] must be an object with a \"type\"", mi, np);
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            rtx__http_buf_free(&b);
            return bad(c, RTX_EUNSUPPORTED, "messages",
                       "'messages'[%zu].content[%zu]: content parts of type '%.40s' are not "
                       "supported (only \"text\")",
                       mi, np, json_string_value(type));
        }
        if (!json_is_string(text)) {
            rtx__http_buf_free(&b);
            return bad(c, RTX_EINVAL, "messages",
                       "'messages'[%zu].content[%zu].text must be a string", mi, np);
        }
        if ((np > 0 && rtx__http_buf_append(&b, "\n", 1)) ||
            rtx__http_buf_append(&b, json_string_value(text), json_string_length(text))) {
            rtx__http_buf_free(&b);
            return oom(c);
        }
    }
    if (rtx__http_buf_append(&b, "", 1)) { /* the NUL */
        rtx__http_buf_free(&b);
        return oom(c);
    }
    *out = b.data;
    return 0;
}

static int read_messages(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    json_t *v = field(root, "messages");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(c, RTX_EINVAL, "messages", "'messages' must be a non-empty list of messages");
    size_t n = json_array_size(v);
    if (n > MAX_MESSAGES)
        return bad(c, RTX_EINVAL, "messages", "%zu messages; at most %d", n, MAX_MESSAGES);
    if (!(q->msgs = rtx_calloc(n, sizeof *q->msgs))) return oom(c);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        if (!json_is_string(role) || json_string_length(role) == 0)
            return bad(c, RTX_EINVAL, "messages",
                       "'messages'[%zu] must be an object with a \"role\" string", i);
        json_t *calls = field(m, "tool_calls");
        if (calls && (!json_is_array(calls) || json_array_size(calls) > 0))
            return bad(c, RTX_EUNSUPPORTED, "messages",
                       "'messages'[%zu].tool_calls: tool calls are not supported", i);
        q->n_msgs = (int)i + 1;
        char *content = NULL;
        int rc = read_content(c, field(m, "content"), i, &content);
        if (rc) return rc;
        q->msgs[i].content = content;
        if (!(q->msgs[i].role = rtx_strdup(json_string_value(role)))) return oom(c);
    }
    return 0;
}

/* response_format, tools and tool_choice: refused unless nothing is asked of them. */
static int read_chat_refusals(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    json_t *rf = field(root, "response_format");
    if (rf) {
        json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(type))
            return bad(c, RTX_EINVAL, "response_format",
                       "'response_format' must be an object with a \"type\"");
        if (strcmp(json_string_value(type), "text") != 0)
            return bad(c, RTX_EUNSUPPORTED, "response_format",
                       "'response_format' of type '%.40s' is not supported (structured output "
                       "is not implemented; only \"text\")",
                       json_string_value(type));
    }
    json_t *tools = field(root, "tools");
    if (tools && (!json_is_array(tools) || json_array_size(tools) > 0))
        return bad(c, RTX_EUNSUPPORTED, "tools", "'tools': tool calling is not supported");
    json_t *tc = field(root, "tool_choice");
    if (tc && !(json_is_string(tc) && (strcmp(json_string_value(tc), "none") == 0 ||
                                       strcmp(json_string_value(tc), "auto") == 0)))
        return bad(c, RTX_EUNSUPPORTED, "tool_choice",
                   "'tool_choice': tool calling is not supported (only \"none\" or \"auto\" "
                   "without tools)");
    if (field(root, "functions") || field(root, "function_call"))
        return bad(c, RTX_EUNSUPPORTED, field(root, "functions") ? "functions" : "function_call",
                   "function calling is not supported");
    if (field(root, "chat_template"))
        return bad(c, RTX_EUNSUPPORTED, "chat_template",
                   "'chat_template' in a request is not supported: the model's template is used "
                   "(a model's config.json may name another)");
    bool cont = false;
    int rc = get_bool(c, root, "continue_final_message", &cont);
    if (rc == 0 && cont)
        rc = bad(c, RTX_EUNSUPPORTED, "continue_final_message",
                 "'continue_final_message' is not supported");
    if (rc == 0) rc = get_bool(c, root, "add_generation_prompt", &q->add_generation_prompt);
    return rc;
}

static int read_logprobs(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    int64_t x = 0;
    bool have = false;
    int rc;
    if (q->api == RTX_HTTP_GEN_COMPLETIONS) {
        rc = get_int(c, root, "logprobs", 0, MAX_LOGPROBS_COMPLETIONS, &x, &have);
        if (rc == 0 && have) q->params.logprobs = (int)x;
        return rc;
    }
    if ((rc = get_bool(c, root, "logprobs", &q->chat_logprobs))) return rc;
    if ((rc = get_int(c, root, "top_logprobs", 0, RTX_GEN_MAX_LOGPROBS, &x, &have))) return rc;
    if (have && !q->chat_logprobs)
        return bad(c, RTX_EINVAL, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
    if (q->chat_logprobs) q->params.logprobs = have ? (int)x : 0;
    return 0;
}

static int read_stream(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    int rc = get_bool(c, root, "stream", &q->stream);
    if (rc) return rc;
    q->sse = q->stream;
    json_t *so = field(root, "stream_options");
    if (!so) return 0;
    if (!q->stream)
        return bad(c, RTX_EINVAL, "stream_options",
                   "'stream_options' is only allowed with 'stream': true");
    if (!json_is_object(so))
        return bad(c, RTX_EINVAL, "stream_options", "'stream_options' must be an object");
    rc = get_bool(c, so, "include_usage", &q->include_usage);
    if (rc && c->param && c->cap) snprintf(c->param, c->cap, "stream_options.include_usage");
    return rc;
}

static int parse_openai(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    json_t *model = field(root, "model");
    if (!json_is_string(model) || json_string_length(model) == 0)
        return bad(c, RTX_EINVAL, "model", "'model' must name a model (a non-empty string)");
    if (!(q->model = rtx_strdup(json_string_value(model)))) return oom(c);
    bool chat = q->api == RTX_HTTP_GEN_CHAT;
    int rc = chat ? read_messages(c, root, q) : read_prompt(c, root, q);
    if (rc) return rc;
    if (chat) {
        q->n_prompts = 1;
        if (!(q->prompts = rtx_calloc(1, sizeof *q->prompts))) return oom(c);
        q->params.max_tokens = 0; /* up to the context, as OpenAI's chat */
        if ((rc = read_chat_refusals(c, root, q)) ||
            (rc = read_max_tokens(c, root, "max_tokens", q)) ||
            (rc = read_max_tokens(c, root, "max_completion_tokens", q)))
            return rc;
    } else {
        q->params.max_tokens = 16; /* OpenAI's default for completions */
        if ((rc = read_max_tokens(c, root, "max_tokens", q)) ||
            (rc = get_bool(c, root, "echo", &q->echo)))
            return rc;
        if (field(root, "suffix"))
            return bad(c, RTX_EUNSUPPORTED, "suffix", "'suffix' (insertion) is not supported");
    }
    int64_t n = 1;
    if ((rc = get_int(c, root, "n", 1, RTX_GEN_MAX_N, &n, NULL))) return rc;
    q->params.n = (int)n;
    if (!chat) {
        int64_t best_of = 0;
        bool have = false;
        if ((rc = get_int(c, root, "best_of", 1, INT_MAX, &best_of, &have))) return rc;
        if (have && best_of != n)
            return bad(c, RTX_EUNSUPPORTED, "best_of",
                       "'best_of' (%" PRId64 ") different from 'n' (%" PRId64 ") is not "
                       "supported",
                       best_of, n);
    }
    json_t *bias = field(root, "logit_bias");
    if (bias && (!json_is_object(bias) || json_object_size(bias) > 0))
        return bad(c, RTX_EUNSUPPORTED, "logit_bias", "'logit_bias' is not supported");
    bool stop_in_output = false;
    if ((rc = get_bool(c, root, "include_stop_str_in_output", &stop_in_output))) return rc;
    if (stop_in_output)
        return bad(c, RTX_EUNSUPPORTED, "include_stop_str_in_output",
                   "'include_stop_str_in_output' is not supported");
    if ((rc = read_stream(c, root, q)) || (rc = read_sfields(c, root, q)) ||
        (rc = read_stop(c, field(root, "stop"), q)) ||
        (rc = read_stop_ids(c, field(root, "stop_token_ids"), q)) ||
        (rc = read_seed(c, root, q)) || (rc = read_lane(c, root, q)) ||
        (rc = read_logprobs(c, root, q)) || (rc = check_min_max(c, q)))
        return rc;
    if (q->echo && q->params.logprobs >= 0)
        return bad(c, RTX_EUNSUPPORTED, "echo",
                   "'echo' with 'logprobs' is not supported: it needs the prompt's logprobs, "
                   "which rtxd does not compute");
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Triton's generate extension
 * ---------------------------------------------------------------------------------------- */

/* One field of a generate body, its "parameters" or its "sampling_parameters". */
static int triton_field(struct pctx *c, const char *key, json_t *v, bool nested,
                        struct rtx_http_gen_req *q) {
    const struct sfield *f = sfield_find(key);
    if (f) return sfield_read(c, f, v, q);
    json_t *one = json_pack("{s:O}", key, v);
    if (!one) return oom(c);
    int rc = 0;
    int64_t n = 1;
    if (strcmp(key, "max_tokens") == 0)
        rc = read_max_tokens(c, one, key, q);
    else if (strcmp(key, "seed") == 0)
        rc = read_seed(c, one, q);
    else if (strcmp(key, "stop") == 0)
        rc = read_stop(c, v, q);
    else if (strcmp(key, "stop_token_ids") == 0)
        rc = read_stop_ids(c, v, q);
    else if (strcmp(key, "lane") == 0 && !nested)
        rc = read_lane(c, one, q);
    else if (strcmp(key, "n") == 0)
        rc = get_int(c, one, key, 1, 1, &n, NULL);
    else if (strcmp(key, "stream") == 0 && !nested)
        rc = get_bool(c, one, key, &q->stream);
    else if (strcmp(key, "exclude_input_in_output") == 0 && !nested) {
        bool ex = false;
        rc = get_bool(c, one, key, &ex);
        q->echo = !ex;
    } else
        rc = bad(c, RTX_EINVAL, key,
                 "unexpected %s'%.64s': the generate extension takes \"text_input\" and the "
                 "parameters max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
                 "stop_token_ids, presence_penalty, frequency_penalty, repetition_penalty, "
                 "min_tokens, ignore_eos, skip_special_tokens, stream, exclude_input_in_output, "
                 "sampling_parameters, lane",
                 nested ? "sampling parameter " : "field ", key);
    json_decref(one);
    return rc;
}

/* "sampling_parameters": a JSON object in a string (the vLLM backend's input). */
static int triton_sampling(struct pctx *c, json_t *v, struct rtx_http_gen_req *q) {
    if (!json_is_string(v))
        return bad(c, RTX_EINVAL, "sampling_parameters",
                   "'sampling_parameters' must be a string holding a JSON object");
    json_error_t je;
    json_t *sp = json_loadb(json_string_value(v), json_string_length(v), 0, &je);
    if (!json_is_object(sp)) {
        json_decref(sp);
        return bad(c, RTX_EINVAL, "sampling_parameters",
                   "'sampling_parameters' is not a JSON object%s%s", sp ? "" : ": ",
                   sp ? "" : je.text);
    }
    const char *key;
    json_t *e;
    int rc = 0;
    json_object_foreach(sp, key, e) {
        if (json_is_null(e)) continue;
        if ((rc = triton_field(c, key, e, true, q))) break;
    }
    json_decref(sp);
    return rc;
}

static int triton_fields(struct pctx *c, json_t *obj, bool top, struct rtx_http_gen_req *q) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (top && (strcmp(key, "text_input") == 0 || strcmp(key, "parameters") == 0 ||
                    strcmp(key, "id") == 0))
            continue;
        if (json_is_null(v)) continue;
        int rc = strcmp(key, "sampling_parameters") == 0 ? triton_sampling(c, v, q)
                                                         : triton_field(c, key, v, false, q);
        if (rc) return rc;
    }
    return 0;
}

static int parse_triton(struct pctx *c, json_t *root, struct rtx_http_gen_req *q) {
    json_t *text = json_object_get(root, "text_input");
    if (!json_is_string(text))
        return bad(c, RTX_EINVAL, "text_input", "'text_input' must be a string (the prompt)");
    if (!(q->prompts = rtx_calloc(1, sizeof *q->prompts))) return oom(c);
    q->n_prompts = 1;
    int rc = set_text(c, text, &q->prompts[0]);
    if (rc) return rc;
    q->params.max_tokens = 16; /* vLLM's default */
    q->stream = true;
    q->echo = true; /* exclude_input_in_output false */
    json_t *params = json_object_get(root, "parameters");
    if (params && !json_is_object(params))
        return bad(c, RTX_EINVAL, "parameters", "'parameters' must be an object");
    if ((rc = triton_fields(c, root, true, q))) return rc;
    if (params && (rc = triton_fields(c, params, false, q))) return rc;
    return check_min_max(c, q);
}

/* ------------------------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------------------------- */

void rtx__http_gen_req_free(struct rtx_http_gen_req *q) {
    if (!q) return;
    rtx_free(q->model);
    for (int i = 0; i < q->n_prompts; i++) {
        rtx_free(q->prompts[i].text);
        rtx_free(q->prompts[i].ids);
    }
    rtx_free(q->prompts);
    for (int i = 0; i < q->n_msgs; i++) {
        rtx_free((char *)q->msgs[i].role);
        rtx_free((char *)q->msgs[i].content);
    }
    rtx_free(q->msgs);
    for (int i = 0; i < RTX_GEN_MAX_STOP; i++)
        rtx_free(q->stop[i]);
    rtx_free(q->stop_ids);
    rtx_free(q->lane);
    rtx_free(q);
}

int rtx__http_gen_parse(enum rtx_http_gen_api api, const char *body, size_t len,
                        struct rtx_http_gen_req **out, char *param, size_t param_cap,
                        struct rtx_err *err) {
    struct pctx c = {.err = err, .param = param, .cap = param_cap};
    *out = NULL;
    if (param && param_cap) param[0] = '\0';
    if (!body || len == 0) return bad(&c, RTX_EINVAL, NULL, "the request has no JSON body");
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root)
        return bad(&c, RTX_EFORMAT, NULL,
                   "malformed JSON in the request body: %s (line %d, column %d, byte %d)", je.text,
                   je.line, je.column, je.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return bad(&c, RTX_EINVAL, NULL, "the request body must be a JSON object");
    }
    struct rtx_http_gen_req *q = rtx_calloc(1, sizeof *q);
    if (!q) {
        json_decref(root);
        return oom(&c);
    }
    q->api = api;
    rtx_gen_params_init(&q->params);
    q->add_generation_prompt = true;
    int rc = api == RTX_HTTP_GEN_TRITON ? parse_triton(&c, root, q) : parse_openai(&c, root, q);
    json_decref(root);
    if (rc) {
        rtx__http_gen_req_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

void rtx__http_gen_apply_defaults(struct rtx_http_gen_req *q, const struct rtx_gen_params *d) {
    struct rtx_gen_params *p = &q->params;
    if (!(q->set & RTX_HTTP_GEN_SET_TEMPERATURE)) p->temperature = d->temperature;
    if (!(q->set & RTX_HTTP_GEN_SET_TOP_P)) p->top_p = d->top_p;
    if (!(q->set & RTX_HTTP_GEN_SET_TOP_K)) p->top_k = d->top_k;
    if (!(q->set & RTX_HTTP_GEN_SET_MIN_P)) p->min_p = d->min_p;
    if (!(q->set & RTX_HTTP_GEN_SET_REPETITION)) p->repetition_penalty = d->repetition_penalty;
    if (!(q->set & RTX_HTTP_GEN_SET_PRESENCE)) p->presence_penalty = d->presence_penalty;
    if (!(q->set & RTX_HTTP_GEN_SET_FREQUENCY)) p->frequency_penalty = d->frequency_penalty;
}
