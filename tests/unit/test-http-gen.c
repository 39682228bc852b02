/*
 * test-http-gen.c - the generation front ends' request parser and answer renderer
 * (daemon/http-gen-impl.h), without sockets or a model: OpenAI completions and chat bodies
 * and Triton generate bodies into requests (every prompt shape, every field, every refusal
 * with the field it names), the model's defaults for unset fields only, and the answers in
 * each API's shapes: stream chunks with their SSE framing, usage and [DONE], whole answers
 * with echo and n > 1 over several prompts, logprobs (token strings, U+FFFD for a token
 * ending inside a character, bytes, text offsets), Triton's events and bodies, error bodies
 * and events, and out-of-memory failures. The tokenizer is built here: byte-level tokens of
 * the printable ASCII bytes, the space, the two bytes of "é" and one special token.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/http-gen-impl.h"
#include "formats/formats.h"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

static struct rtx_http_gen_req *parse_ok(enum rtx_http_gen_api api, const char *body) {
    struct rtx_http_gen_req *q = NULL;
    struct rtx_err err = {0};
    char param[64];
    int rc = rtx__http_gen_parse(api, body, strlen(body), &q, param, sizeof param, &err);
    ck_assert_msg(rc == 0, "%s: rc %d: %s", body, rc, err.msg);
    return q;
}

/* Asserts that body is refused with code, the message holding `words` and param `param`. */
static void parse_bad(enum rtx_http_gen_api api, const char *body, int code, const char *param,
                      const char *words) {
    struct rtx_http_gen_req *q = NULL;
    struct rtx_err err = {0};
    char got[64];
    int rc = rtx__http_gen_parse(api, body, strlen(body), &q, got, sizeof got, &err);
    ck_assert_msg(rc == code, "%s: rc %d, want %d (%s)", body, rc, code, err.msg);
    ck_assert_ptr_null(q);
    ck_assert_msg(strcmp(got, param) == 0, "%s: param '%s', want '%s'", body, got, param);
    ck_assert_msg(strstr(err.msg, words), "%s: '%s' lacks '%s'", body, err.msg, words);
}

/* ids 0..93: bytes '!'..'~'; 94 "Ġ" (space); 95 "Ã" and 96 "©" (the bytes of "é");
 * 97 "<|end|>", special. */
static struct rtx_tokenizer *tiny_tokenizer(void) {
    json_t *vocab = json_object();
    for (int b = '!'; b <= '~'; b++) {
        char t[2] = {(char)b, 0};
        json_object_set_new(vocab, t, json_integer(b - '!'));
    }
    json_object_set_new(vocab, "\xc4\xa0", json_integer(94));
    json_object_set_new(vocab, "\xc3\x83", json_integer(95));
    json_object_set_new(vocab, "\xc2\xa9", json_integer(96));
    json_t *doc = json_pack(
        "{s:s,s:n,s:[{s:i,s:s,s:b,s:b,s:b,s:b,s:b}],s:n,s:{s:s,s:b,s:b},s:{s:s},s:n,"
        "s:{s:s,s:n,s:o,s:[],s:b,s:b}}",
        "version", "1.0", "truncation", "added_tokens", "id", 97, "content", "<|end|>",
        "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1, "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder",
        "type", "ByteLevel", "post_processor", "model", "type", "BPE", "dropout", "vocab", vocab,
        "merges", "byte_fallback", 0, "ignore_merges", 0);
    ck_assert_ptr_nonnull(doc);
    char *s = json_dumps(doc, 0);
    json_decref(doc);
    struct rtx_tokenizer *tok = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_tokenizer_parse(s, strlen(s), "tokenizer.json", &tok, &err) == 0, "%s",
                  err.msg);
    free(s);
    return tok;
}

/* The token id of an ASCII character of the tiny tokenizer. */
static int32_t tid(char c) {
    return c == ' ' ? 94 : c - '!';
}

static struct rtx_gen_event event(int index, int n, const int32_t *ids, const float *lps,
                                  int n_top, const struct rtx_gen_logprob *top, const char *text,
                                  enum rtx_gen_finish f) {
    struct rtx_gen_event ev = {.index = index,
                               .n_tokens = n,
                               .tokens = ids,
                               .logprobs = lps,
                               .n_top = n_top,
                               .top = top,
                               .text = text,
                               .text_len = strlen(text),
                               .finish = f};
    return ev;
}

/* The JSON objects of the SSE chunks in b (each "data: {...}\n\n"); *done whether the last
 * was "data: [DONE]". Returns a JSON array. */
static json_t *sse_chunks(const struct rtx_http_buf *b, bool *done) {
    json_t *arr = json_array();
    *done = false;
    const char *p = b->data ? b->data : "";
    while (*p) {
        ck_assert_msg(strncmp(p, "data: ", 6) == 0, "not an SSE data line: %.60s", p);
        p += 6;
        const char *end = strstr(p, "\n\n");
        ck_assert_msg(end != NULL, "an SSE event without its blank line: %.60s", p);
        ck_assert_msg(!*done, "an event after [DONE]");
        if (end - p == 6 && strncmp(p, "[DONE]", 6) == 0) {
            *done = true;
        } else {
            json_error_t je;
            json_t *j = json_loadb(p, (size_t)(end - p), 0, &je);
            ck_assert_msg(j != NULL, "chunk is not JSON: %s: %.*s", je.text, (int)(end - p), p);
            json_array_append_new(arr, j);
        }
        p = end + 2;
    }
    return arr;
}

static const char *jget_str(json_t *o, const char *path) {
    json_t *v = json_object_get(o, path);
    ck_assert_msg(json_is_string(v), "'%s' is not a string", path);
    return json_string_value(v);
}

/* ------------------------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------------------------- */

START_TEST(gen_parse_completions_fields) {
    struct rtx_http_gen_req *q = parse_ok(
        RTX_HTTP_GEN_COMPLETIONS,
        "{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
        "\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\","
        "\"bc\"],\"seed\":-1,\"presence_penalty\":1.5,\"frequency_penalty\":-0.5,\"logprobs\":2,"
        "\"best_of\":3,\"user\":\"u\",\"top_k\":40,\"min_p\":0.05,\"repetition_penalty\":1.1,"
        "\"min_tokens\":2,\"ignore_eos\":true,\"skip_special_tokens\":false,"
        "\"stop_token_ids\":[5,6],\"lane\":\"batch\",\"unknown_extra\":{\"x\":1},"
        "\"suffix\":null,\"logit_bias\":{}}");
    ck_assert_str_eq(q->model, "m");
    ck_assert_int_eq(q->n_prompts, 1);
    ck_assert_str_eq(q->prompts[0].text, "hi");
    ck_assert_ptr_null(q->prompts[0].ids);
    const struct rtx_gen_params *p = &q->params;
    ck_assert_int_eq(p->max_tokens, 7);
    ck_assert(p->temperature == 0.5 && p->top_p == 0.9 && p->top_k == 40);
    ck_assert(p->min_p == 0.05 && p->repetition_penalty == 1.1);
    ck_assert(p->presence_penalty == 1.5 && p->frequency_penalty == -0.5);
    ck_assert_int_eq(p->n, 3);
    ck_assert(q->stream && q->sse && q->include_usage && !q->echo);
    ck_assert_int_eq(p->n_stop, 2);
    ck_assert_str_eq(p->stop[0], "a");
    ck_assert_str_eq(p->stop[1], "bc");
    ck_assert(p->has_seed && p->seed == UINT64_MAX);
    ck_assert_int_eq(p->logprobs, 2);
    ck_assert_int_eq(p->min_tokens, 2);
    ck_assert(p->ignore_eos && !p->skip_special);
    ck_assert_int_eq(p->n_stop_ids, 2);
    ck_assert_int_eq(p->stop_ids[1], 6);
    ck_assert_str_eq(q->lane, "batch");
    ck_assert_uint_eq(q->set, RTX_HTTP_GEN_SET_TEMPERATURE | RTX_HTTP_GEN_SET_TOP_P |
                                  RTX_HTTP_GEN_SET_TOP_K | RTX_HTTP_GEN_SET_MIN_P |
                                  RTX_HTTP_GEN_SET_REPETITION | RTX_HTTP_GEN_SET_PRESENCE |
                                  RTX_HTTP_GEN_SET_FREQUENCY);
    rtx__http_gen_req_free(q);

    /* defaults: OpenAI's max_tokens 16, the engine's sampling defaults, nothing set */
    q = parse_ok(RTX_HTTP_GEN_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":\"s\"}");
    struct rtx_gen_params d;
    rtx_gen_params_init(&d);
    ck_assert_int_eq(q->params.max_tokens, 16);
    ck_assert(q->params.temperature == d.temperature && q->params.top_p == d.top_p);
    ck_assert(q->params.n == 1 && q->params.logprobs == -1 && q->params.skip_special);
    ck_assert(!q->stream && !q->sse && !q->params.has_seed && q->set == 0);
    ck_assert_int_eq(q->params.n_stop, 1);
    ck_assert_str_eq(q->params.stop[0], "s");
    /* the model's defaults reach unset fields only */
    d.temperature = 0.25;
    d.top_k = 7;
    rtx__http_gen_apply_defaults(q, &d);
    ck_assert(q->params.temperature == 0.25 && q->params.top_k == 7);
    rtx__http_gen_req_free(q);
    q = parse_ok(RTX_HTTP_GEN_COMPLETIONS,
                 "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":0,\"top_k\":-1}");
    rtx__http_gen_apply_defaults(q, &d);
    ck_assert(q->params.temperature == 0 && q->params.top_k == -1);
    rtx__http_gen_req_free(q);
}
END_TEST

START_TEST(gen_parse_prompt_shapes) {
    struct rtx_http_gen_req *q =
        parse_ok(RTX_HTTP_GEN_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",\"\\u00e9b\"]}");
    ck_assert_int_eq(q->n_prompts, 2);
    ck_assert_str_eq(q->prompts[1].text, "\xc3\xa9"
                                         "b");
    ck_assert_uint_eq(q->prompts[1].len, 3);
    rtx__http_gen_req_free(q);
    q = parse_ok(RTX_HTTP_GEN_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2,3],\"echo\":true}");
    ck_assert_int_eq(q->n_prompts, 1);
    ck_assert_int_eq(q->prompts[0].n_ids, 3);
    ck_assert_int_eq(q->prompts[0].ids[2], 3);
    ck_assert_ptr_null(q->prompts[0].text);
    ck_assert(q->echo);
    rtx__http_gen_req_free(q);
    q = parse_ok(RTX_HTTP_GEN_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[4],[5,6]]}");
    ck_assert_int_eq(q->n_prompts, 2);
    ck_assert_int_eq(q->prompts[1].n_ids, 2);
    ck_assert_int_eq(q->prompts[1].ids[1], 6);
    rtx__http_gen_req_free(q);

    enum rtx_http_gen_api C = RTX_HTTP_GEN_COMPLETIONS;
    parse_bad(C, "{\"model\":\"m\"}", RTX_EINVAL, "prompt", "'prompt' is required");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[]}", RTX_EINVAL, "prompt", "'prompt' is empty");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":5}", RTX_EINVAL, "prompt", "a list of token ids");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[\"a\",[1]]}", RTX_EINVAL, "prompt",
              "every element must be of one kind");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[1,-2]}", RTX_EINVAL, "prompt",
              "'prompt'[1] must be a token id");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", RTX_EINVAL, "prompt",
              "'prompt'[1] must be a token id");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[[1],[]]}", RTX_EINVAL, "prompt",
              "'prompt'[1] is an empty list of token ids");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":[[1],[2,4294967296]]}", RTX_EINVAL, "prompt",
              "'prompt'[1][1] must be a token id");
}
END_TEST

/* Fields added to {"model": "m", "prompt": "x"} and how each body is refused. */
static const struct {
    const char *fields;
    int code;
    const char *param, *words;
} completion_refusals[] = {
    {"\"max_tokens\":0", RTX_EINVAL, "max_tokens", "'max_tokens' must be an integer from 1 to"},
    {"\"max_tokens\":\"5\"", RTX_EINVAL, "max_tokens", "'max_tokens'"},
    {"\"temperature\":-0.1", RTX_EINVAL, "temperature",
     "'temperature' must be a number from 0 to 100"},
    {"\"temperature\":\"hot\"", RTX_EINVAL, "temperature", "'temperature'"},
    {"\"top_p\":0", RTX_EINVAL, "top_p", "greater than 0"},
    {"\"top_p\":1.5", RTX_EINVAL, "top_p", "'top_p'"},
    {"\"top_k\":-2", RTX_EINVAL, "top_k", "'top_k'"},
    {"\"top_k\":1.5", RTX_EINVAL, "top_k", "'top_k'"},
    {"\"presence_penalty\":2.5", RTX_EINVAL, "presence_penalty", "from -2 to 2"},
    {"\"repetition_penalty\":0", RTX_EINVAL, "repetition_penalty", "greater than 0"},
    {"\"n\":17", RTX_EINVAL, "n", "'n' must be an integer from 1 to 16"},
    {"\"logprobs\":6", RTX_EINVAL, "logprobs", "from 0 to 5"},
    {"\"logprobs\":true", RTX_EINVAL, "logprobs", "'logprobs'"},
    {"\"stream\":1", RTX_EINVAL, "stream", "'stream' must be true or false"},
    {"\"stream_options\":{}", RTX_EINVAL, "stream_options", "only allowed with 'stream': true"},
    {"\"stream\":true,\"stream_options\":{\"include_usage\":3}", RTX_EINVAL,
     "stream_options.include_usage", "'include_usage'"},
    {"\"stop\":5", RTX_EINVAL, "stop", "a string or a list of strings"},
    {"\"stop\":[\"a\",\"\"]", RTX_EINVAL, "stop", "'stop'[1] must be a non-empty string"},
    {"\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]", RTX_EINVAL, "stop",
     "9 strings; at most 8"},
    {"\"stop_token_ids\":[1,-1]", RTX_EINVAL, "stop_token_ids", "'stop_token_ids'[1]"},
    {"\"seed\":1.5", RTX_EINVAL, "seed", "'seed'"},
    {"\"lane\":\"\"", RTX_EINVAL, "lane", "'lane'"},
    {"\"min_tokens\":20,\"max_tokens\":10", RTX_EINVAL, "min_tokens", "must not exceed"},
    {"\"suffix\":\"end\"", RTX_EUNSUPPORTED, "suffix", "'suffix'"},
    {"\"best_of\":2", RTX_EUNSUPPORTED, "best_of", "'best_of' (2) different from 'n' (1)"},
    {"\"logit_bias\":{\"5\":10}", RTX_EUNSUPPORTED, "logit_bias", "'logit_bias'"},
    {"\"echo\":true,\"logprobs\":1", RTX_EUNSUPPORTED, "echo", "prompt's logprobs"},
    {"\"include_stop_str_in_output\":true", RTX_EUNSUPPORTED, "include_stop_str_in_output",
     "not supported"},
};

START_TEST(gen_parse_completions_rejects) {
    enum rtx_http_gen_api C = RTX_HTTP_GEN_COMPLETIONS;
    parse_bad(C, "", RTX_EINVAL, "", "no JSON body");
    parse_bad(C, "{\"model\":\"m\",\n \"prompt\": tru}", RTX_EFORMAT, "", "(line 2, column");
    parse_bad(C, "{\"model\":\"m\",\"prompt\":\"x\"", RTX_EFORMAT, "", "byte 25");
    parse_bad(C, "[1]", RTX_EINVAL, "", "must be a JSON object");
    parse_bad(C, "{\"prompt\":\"x\"}", RTX_EINVAL, "model", "'model' must name a model");
    parse_bad(C, "{\"model\":7,\"prompt\":\"x\"}", RTX_EINVAL, "model", "'model'");
    for (size_t i = 0; i < sizeof completion_refusals / sizeof completion_refusals[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x\",%s}",
                 completion_refusals[i].fields);
        parse_bad(C, body, completion_refusals[i].code, completion_refusals[i].param,
                  completion_refusals[i].words);
    }
}
END_TEST

START_TEST(gen_parse_chat) {
    struct rtx_http_gen_req *q = parse_ok(
        RTX_HTTP_GEN_CHAT,
        "{\"model\":\"c\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}],\"name\":\"x\"},{\"role\":\"assistant\",\"content\":null}],"
        "\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":3,"
        "\"response_format\":{\"type\":\"text\"},\"tools\":[],\"tool_choice\":\"none\"}");
    ck_assert_int_eq(q->n_msgs, 3);
    ck_assert_str_eq(q->msgs[0].role, "system");
    ck_assert_str_eq(q->msgs[0].content, "be brief");
    ck_assert_str_eq(q->msgs[1].content, "a\nb");
    ck_assert_str_eq(q->msgs[2].content, "");
    ck_assert_int_eq(q->n_prompts, 1);
    ck_assert_ptr_null(q->prompts[0].text);
    ck_assert_int_eq(q->params.max_tokens, 9);
    ck_assert(q->chat_logprobs && q->params.logprobs == 3 && q->add_generation_prompt);
    rtx__http_gen_req_free(q);
    /* chat's max_tokens defaults to the context (0); logprobs alone: the sampled token only */
    q = parse_ok(RTX_HTTP_GEN_CHAT, "{\"model\":\"c\",\"messages\":[{\"role\":\"user\","
                                    "\"content\":\"hi\"}],\"logprobs\":true,"
                                    "\"add_generation_prompt\":false}");
    ck_assert_int_eq(q->params.max_tokens, 0);
    ck_assert_int_eq(q->params.logprobs, 0);
    ck_assert(!q->add_generation_prompt);
    rtx__http_gen_req_free(q);

    enum rtx_http_gen_api H = RTX_HTTP_GEN_CHAT;
    const char *m = "\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[512];
    parse_bad(H, "{\"model\":\"c\"}", RTX_EINVAL, "messages", "non-empty list of messages");
    parse_bad(H, "{\"model\":\"c\",\"messages\":[{\"content\":\"x\"}]}", RTX_EINVAL, "messages",
              "'messages'[0] must be an object with a \"role\"");
    parse_bad(H, "{\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", RTX_EINVAL,
              "messages", "'messages'[0].content must be a string");
    parse_bad(H,
              "{\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"image_url\",\"image_url\":{}}]}]}",
              RTX_EUNSUPPORTED, "messages", "type 'image_url' are not supported");
    parse_bad(H, "{\"model\":\"c\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{}]}]}",
              RTX_EUNSUPPORTED, "messages", "tool calls");
    snprintf(b, sizeof b, "{%s,\"top_logprobs\":2}", m);
    parse_bad(H, b, RTX_EINVAL, "top_logprobs", "requires 'logprobs': true");
    snprintf(b, sizeof b, "{%s,\"logprobs\":true,\"top_logprobs\":21}", m);
    parse_bad(H, b, RTX_EINVAL, "top_logprobs", "from 0 to 20");
    snprintf(b, sizeof b, "{%s,\"response_format\":{\"type\":\"json_object\"}}", m);
    parse_bad(H, b, RTX_EUNSUPPORTED, "response_format", "'json_object' is not supported");
    snprintf(b, sizeof b, "{%s,\"tools\":[{\"type\":\"function\"}]}", m);
    parse_bad(H, b, RTX_EUNSUPPORTED, "tools", "tool calling");
    snprintf(b, sizeof b, "{%s,\"tool_choice\":\"required\"}", m);
    parse_bad(H, b, RTX_EUNSUPPORTED, "tool_choice", "tool calling");
    snprintf(b, sizeof b, "{%s,\"max_completion_tokens\":-3}", m);
    parse_bad(H, b, RTX_EINVAL, "max_completion_tokens", "from 1 to");
    snprintf(b, sizeof b, "{%s,\"chat_template\":\"{{x}}\"}", m);
    parse_bad(H, b, RTX_EUNSUPPORTED, "chat_template", "model's template");
}
END_TEST

START_TEST(gen_parse_triton) {
    struct rtx_http_gen_req *q = parse_ok(
        RTX_HTTP_GEN_TRITON,
        "{\"text_input\":\"hello\",\"max_tokens\":5,\"temperature\":0,\"stop\":\"x\","
        "\"id\":\"7\",\"parameters\":{\"top_k\":3,\"seed\":11,\"stream\":false,"
        "\"exclude_input_in_output\":true,\"lane\":\"rt\"},\"sampling_parameters\":"
        "\"{\\\"top_p\\\":0.5,\\\"min_tokens\\\":2,\\\"n\\\":1,\\\"stop\\\":[\\\"y\\\"]}\"}");
    ck_assert_str_eq(q->prompts[0].text, "hello");
    ck_assert_ptr_null(q->model);
    ck_assert_int_eq(q->params.max_tokens, 5);
    ck_assert(q->params.temperature == 0 && q->params.top_k == 3 && q->params.top_p == 0.5);
    ck_assert(q->params.has_seed && q->params.seed == 11 && q->params.min_tokens == 2);
    ck_assert(!q->stream && !q->echo);
    ck_assert_str_eq(q->lane, "rt");
    ck_assert_int_eq(q->params.n_stop, 1);
    ck_assert_str_eq(q->params.stop[0], "y"); /* sampling_parameters come after "stop" */
    rtx__http_gen_req_free(q);
    q = parse_ok(RTX_HTTP_GEN_TRITON, "{\"text_input\":\"\"}");
    ck_assert(q->stream && q->echo && q->params.max_tokens == 16);
    rtx__http_gen_req_free(q);

    enum rtx_http_gen_api T = RTX_HTTP_GEN_TRITON;
    parse_bad(T, "{\"max_tokens\":3}", RTX_EINVAL, "text_input", "'text_input' must be a string");
    parse_bad(T, "{\"text_input\":\"a\",\"colour\":3}", RTX_EINVAL, "colour",
              "unexpected field 'colour'");
    parse_bad(T, "{\"text_input\":\"a\",\"parameters\":{\"max_tokens\":0}}", RTX_EINVAL,
              "max_tokens", "'max_tokens'");
    parse_bad(T, "{\"text_input\":\"a\",\"parameters\":[1]}", RTX_EINVAL, "parameters",
              "'parameters' must be an object");
    parse_bad(T, "{\"text_input\":\"a\",\"sampling_parameters\":{\"top_p\":1}}", RTX_EINVAL,
              "sampling_parameters", "a string holding a JSON object");
    parse_bad(T, "{\"text_input\":\"a\",\"sampling_parameters\":\"{oops\"}", RTX_EINVAL,
              "sampling_parameters", "is not a JSON object");
    parse_bad(T, "{\"text_input\":\"a\",\"sampling_parameters\":\"{\\\"beam\\\":2}\"}", RTX_EINVAL,
              "beam", "unexpected sampling parameter 'beam'");
    parse_bad(T, "{\"text_input\":\"a\",\"n\":2}", RTX_EINVAL, "n", "from 1 to 1");
    parse_bad(T, "{\"text_input\":\"a\",\"stream\":\"yes\"}", RTX_EINVAL, "stream",
              "true or false");
    parse_bad(T, "{\"text_input\":\"a\",\"temperature\":101}", RTX_EINVAL, "temperature",
              "from 0 to 100");
}
END_TEST

START_TEST(gen_parse_oom) {
    const char *body = "{\"model\":\"m\",\"prompt\":[[1,2],[3]],\"stop\":[\"a\",\"b\"],"
                       "\"stop_token_ids\":[4],\"lane\":\"x\"}";
    int ok = 0;
    for (long n = 1; n < 100 && !ok; n++) {
        struct rtx_http_gen_req *q = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        int rc =
            rtx__http_gen_parse(RTX_HTTP_GEN_COMPLETIONS, body, strlen(body), &q, NULL, 0, &err);
        rtx_alloc_fail_after(0);
        if (rc != 0) {
            ck_assert_msg(rc == RTX_ENOMEM, "n=%ld: rc %d (%s)", n, rc, err.msg);
            ck_assert_ptr_null(q);
            continue;
        }
        ck_assert_int_eq(q->n_prompts, 2);
        rtx__http_gen_req_free(q);
        ok = 1;
    }
    ck_assert(ok);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------------------------- */

struct fixture {
    struct rtx_tokenizer *tok;
    struct rtx_http_gen_req *q;
    struct rtx_http_gen_view v;
    struct rtx_http_buf out;
};

static void fx_open(struct fixture *f, enum rtx_http_gen_api api, const char *body) {
    memset(f, 0, sizeof *f);
    f->tok = tiny_tokenizer();
    f->q = parse_ok(api, body);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__http_gen_view_init(&f->v, f->q, f->tok, "m", 3, &err), 0);
}

static void fx_close(struct fixture *f) {
    rtx__http_gen_view_free(&f->v);
    rtx__http_gen_req_free(f->q);
    rtx__http_buf_free(&f->out);
    rtx_tokenizer_free(f->tok);
}

static void render(struct fixture *f, int prompt, struct rtx_gen_event ev) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx__http_gen_render_event(&f->v, prompt, &ev, &f->out, &err) == 0, "%s",
                  err.msg);
}

static void render_end(struct fixture *f, int prompt_tokens, int completion, int cached) {
    struct rtx_gen_usage u = {
        .prompt_tokens = prompt_tokens, .completion_tokens = completion, .cached_tokens = cached};
    struct rtx_err err = {0};
    ck_assert_msg(rtx__http_gen_render_end(&f->v, &u, &f->out, &err) == 0, "%s", err.msg);
}

START_TEST(gen_render_completion_stream) {
    struct fixture f;
    fx_open(&f, RTX_HTTP_GEN_COMPLETIONS,
            "{\"model\":\"m\",\"prompt\":\"p\",\"n\":2,\"stream\":true,\"logprobs\":1,"
            "\"stream_options\":{\"include_usage\":true}}");
    ck_assert_int_eq(strncmp(f.v.id, "cmpl-", 5), 0);
    ck_assert_uint_eq(strlen(f.v.id), 5 + 32);
    int32_t ids[2] = {tid('H'), tid('i')};
    float lps[2] = {-0.5f, -INFINITY};
    struct rtx_gen_logprob top[2] = {{tid('H'), -0.5f}, {tid('x'), -0.25f}};
    render(&f, 0, event(1, 2, ids, lps, 1, top, "Hi", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 0, NULL, NULL, 0, NULL, "", RTX_GEN_FINISH_NONE)); /* nothing */
    int32_t sp[1] = {tid(' ')};
    float lsp[1] = {-1};
    struct rtx_gen_logprob tsp[1] = {{97, -2}};
    render(&f, 0, event(1, 1, sp, lsp, 1, tsp, " ", RTX_GEN_FINISH_LENGTH));
    render_end(&f, 4, 3, 2);
    bool done = false;
    json_t *c = sse_chunks(&f.out, &done);
    ck_assert(done);
    ck_assert_uint_eq(json_array_size(c), 3);
    json_t *c0 = json_array_get(c, 0);
    ck_assert_str_eq(jget_str(c0, "id"), f.v.id);
    ck_assert_str_eq(jget_str(c0, "object"), "text_completion");
    ck_assert_str_eq(jget_str(c0, "model"), "m");
    ck_assert(json_is_null(json_object_get(c0, "usage")));
    json_t *ch = json_array_get(json_object_get(c0, "choices"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(ch, "index")), 1);
    ck_assert_str_eq(jget_str(ch, "text"), "Hi");
    ck_assert(json_is_null(json_object_get(ch, "finish_reason")));
    json_t *lp = json_object_get(ch, "logprobs");
    json_t *expect = json_loads("{\"tokens\":[\"H\",\"i\"],\"token_logprobs\":[-0.5,-9999.0],"
                                "\"top_logprobs\":[{\"H\":-0.5},{\"i\":-9999.0,\"x\":-0.25}],"
                                "\"text_offset\":[0,1]}",
                                0, NULL);
    ck_assert_msg(json_equal(lp, expect), "%s", json_dumps(lp, 0));
    json_decref(expect);
    ch = json_array_get(json_object_get(json_array_get(c, 1), "choices"), 0);
    ck_assert_str_eq(jget_str(ch, "finish_reason"), "length");
    lp = json_object_get(ch, "logprobs");
    expect = json_loads("{\"tokens\":[\" \"],\"token_logprobs\":[-1.0],"
                        "\"top_logprobs\":[{\" \":-1.0,\"<|end|>\":-2.0}],\"text_offset\":[2]}",
                        0, NULL);
    ck_assert_msg(json_equal(lp, expect), "%s", json_dumps(lp, 0));
    json_decref(expect);
    json_t *last = json_array_get(c, 2);
    ck_assert_uint_eq(json_array_size(json_object_get(last, "choices")), 0);
    expect = json_loads("{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":2}}",
                        0, NULL);
    ck_assert(json_equal(json_object_get(last, "usage"), expect));
    json_decref(expect);
    json_decref(c);
    fx_close(&f);
}
END_TEST

START_TEST(gen_render_chat_stream) {
    struct fixture f;
    fx_open(&f, RTX_HTTP_GEN_CHAT,
            "{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
            "\"stream\":true,\"logprobs\":true,\"top_logprobs\":1}");
    ck_assert_int_eq(strncmp(f.v.id, "chatcmpl-", 9), 0);
    int32_t ids[2] = {95, 96}; /* "é" split over two tokens */
    float lps[2] = {-0.125f, -0.25f};
    struct rtx_gen_logprob top[2] = {{tid('a'), -3}, {96, -0.25f}};
    render(&f, 0, event(0, 1, ids, lps, 1, top, "", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 1, ids + 1, lps + 1, 1, top + 1, "\xc3\xa9", RTX_GEN_FINISH_STOP));
    render_end(&f, 1, 2, 0);
    bool done = false;
    json_t *c = sse_chunks(&f.out, &done);
    ck_assert(done);
    ck_assert_uint_eq(json_array_size(c), 3); /* role, first token, content + finish */
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(jget_str(json_array_get(c, i), "object"), "chat.completion.chunk");
        ck_assert_ptr_null(json_object_get(json_array_get(c, i), "usage"));
    }
    json_t *ch = json_array_get(json_object_get(json_array_get(c, 0), "choices"), 0);
    json_t *expect = json_loads("{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                                "\"logprobs\":null,\"finish_reason\":null}",
                                0, NULL);
    ck_assert_msg(json_equal(ch, expect), "%s", json_dumps(ch, 0));
    json_decref(expect);
    ch = json_array_get(json_object_get(json_array_get(c, 1), "choices"), 0);
    ck_assert_uint_eq(json_object_size(json_object_get(ch, "delta")), 0);
    expect = json_loads("{\"content\":[{\"token\":\"\\ufffd\",\"logprob\":-0.125,"
                        "\"bytes\":[239,191,189],\"top_logprobs\":[{\"token\":\"a\","
                        "\"logprob\":-3.0,\"bytes\":[97]}]}]}",
                        0, NULL);
    ck_assert_msg(json_equal(json_object_get(ch, "logprobs"), expect), "%s",
                  json_dumps(json_object_get(ch, "logprobs"), 0));
    json_decref(expect);
    ch = json_array_get(json_object_get(json_array_get(c, 2), "choices"), 0);
    ck_assert_str_eq(jget_str(json_object_get(ch, "delta"), "content"), "\xc3\xa9");
    ck_assert_str_eq(jget_str(ch, "finish_reason"), "stop");
    json_decref(c);
    fx_close(&f);
}
END_TEST

START_TEST(gen_render_whole_answers) {
    /* two prompts, n 2, echo: index = prompt * n + i, text = prompt + output */
    struct fixture f;
    fx_open(&f, RTX_HTTP_GEN_COMPLETIONS,
            "{\"model\":\"m\",\"prompt\":[\"ab\",\"c\"],\"n\":2,\"echo\":true}");
    render(&f, 1, event(1, 0, NULL, NULL, 0, NULL, "X", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 0, NULL, NULL, 0, NULL, "Y", RTX_GEN_FINISH_STOP));
    render(&f, 1, event(1, 0, NULL, NULL, 0, NULL, "Z", RTX_GEN_FINISH_LENGTH));
    render(&f, 1, event(0, 0, NULL, NULL, 0, NULL, "", RTX_GEN_FINISH_STOP));
    render(&f, 0, event(1, 0, NULL, NULL, 0, NULL, "W", RTX_GEN_FINISH_LENGTH));
    ck_assert_uint_eq(f.out.len, 0);
    render_end(&f, 3, 5, 0);
    json_t *j = json_loads(f.out.data, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(jget_str(j, "object"), "text_completion");
    json_t *expect = json_loads(
        "[{\"index\":0,\"text\":\"abY\",\"logprobs\":null,\"finish_reason\":\"stop\"},"
        "{\"index\":1,\"text\":\"abW\",\"logprobs\":null,\"finish_reason\":\"length\"},"
        "{\"index\":2,\"text\":\"c\",\"logprobs\":null,\"finish_reason\":\"stop\"},"
        "{\"index\":3,\"text\":\"cXZ\",\"logprobs\":null,\"finish_reason\":\"length\"}]",
        0, NULL);
    ck_assert_msg(json_equal(json_object_get(j, "choices"), expect), "%s", f.out.data);
    json_decref(expect);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 8);
    json_decref(j);
    fx_close(&f);

    /* chat with logprobs over several events */
    fx_open(&f, RTX_HTTP_GEN_CHAT,
            "{\"model\":\"c\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
            "\"logprobs\":true}");
    int32_t ids[2] = {tid('o'), tid('k')};
    float lps[2] = {-1, -2};
    render(&f, 0, event(0, 1, ids, lps, 0, NULL, "o", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 1, ids + 1, lps + 1, 0, NULL, "k", RTX_GEN_FINISH_STOP));
    render_end(&f, 2, 2, 0);
    j = json_loads(f.out.data, 0, NULL);
    ck_assert_str_eq(jget_str(j, "object"), "chat.completion");
    expect =
        json_loads("[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},"
                   "\"logprobs\":{\"content\":[{\"token\":\"o\",\"logprob\":-1.0,\"bytes\":[111],"
                   "\"top_logprobs\":[]},{\"token\":\"k\",\"logprob\":-2.0,\"bytes\":[107],"
                   "\"top_logprobs\":[]}]},\"finish_reason\":\"stop\"}]",
                   0, NULL);
    ck_assert_msg(json_equal(json_object_get(j, "choices"), expect), "%s", f.out.data);
    json_decref(expect);
    json_decref(j);
    fx_close(&f);
}
END_TEST

START_TEST(gen_render_triton) {
    struct fixture f;
    fx_open(&f, RTX_HTTP_GEN_TRITON, "{\"text_input\":\"Q:\",\"max_tokens\":3}");
    f.q->sse = true; /* generate_stream */
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "a", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "b", RTX_GEN_FINISH_LENGTH));
    render_end(&f, 2, 2, 0);
    bool done = true;
    json_t *c = sse_chunks(&f.out, &done);
    ck_assert(!done); /* Triton's streams have no [DONE] */
    json_t *expect = json_loads("[{\"model_name\":\"m\",\"model_version\":\"3\","
                                "\"text_output\":\"Q:a\"},{\"model_name\":\"m\","
                                "\"model_version\":\"3\",\"text_output\":\"b\"}]",
                                0, NULL);
    ck_assert_msg(json_equal(c, expect), "%s", f.out.data);
    json_decref(expect);
    json_decref(c);
    fx_close(&f);

    /* generate: one body; exclude_input_in_output */
    fx_open(&f, RTX_HTTP_GEN_TRITON,
            "{\"text_input\":\"Q:\",\"parameters\":{\"exclude_input_in_output\":true}}");
    f.q->stream = false;
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "a", RTX_GEN_FINISH_NONE));
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "b", RTX_GEN_FINISH_STOP));
    render_end(&f, 2, 2, 0);
    ck_assert_str_eq(f.out.data,
                     "{\"model_name\":\"m\",\"model_version\":\"3\",\"text_output\":\"ab\"}");
    fx_close(&f);

    /* generate_stream with "stream": false: one event at the end, prompt included */
    fx_open(&f, RTX_HTTP_GEN_TRITON, "{\"text_input\":\"Q:\",\"stream\":false}");
    f.q->sse = true;
    render(&f, 0, event(0, 1, NULL, NULL, 0, NULL, "a", RTX_GEN_FINISH_STOP));
    ck_assert_uint_eq(f.out.len, 0);
    render_end(&f, 2, 1, 0);
    ck_assert_str_eq(f.out.data, "data: {\"model_name\":\"m\",\"model_version\":\"3\","
                                 "\"text_output\":\"Q:a\"}\n\n");
    fx_close(&f);
}
END_TEST

START_TEST(gen_render_errors) {
    size_t len = 0;
    char *b = rtx__http_gen_error_body(RTX_HTTP_GEN_COMPLETIONS, 400, "bad \"t\"", "top_p", &len);
    ck_assert_str_eq(b, "{\"error\":{\"message\":\"bad \\\"t\\\"\",\"type\":"
                        "\"invalid_request_error\",\"param\":\"top_p\",\"code\":null}}");
    ck_assert_uint_eq(len, strlen(b));
    rtx_free(b);
    b = rtx__http_gen_error_body(RTX_HTTP_GEN_CHAT, 404, "no model", "model", NULL);
    ck_assert_str_eq(b, "{\"error\":{\"message\":\"no model\",\"type\":\"invalid_request_error\","
                        "\"param\":\"model\",\"code\":\"model_not_found\"}}");
    rtx_free(b);
    b = rtx__http_gen_error_body(RTX_HTTP_GEN_CHAT, 429, "full; retry after 20 ms", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(b, "\"type\":\"rate_limit_exceeded\""));
    ck_assert_ptr_nonnull(strstr(b, "\"param\":null"));
    rtx_free(b);
    b = rtx__http_gen_error_body(RTX_HTTP_GEN_CHAT, 503, "stopping", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(b, "\"type\":\"service_unavailable\""));
    rtx_free(b);
    /* a message with bytes that are not UTF-8 stays valid JSON */
    b = rtx__http_gen_error_body(RTX_HTTP_GEN_TRITON, 400, "model '\xff\xfe'", NULL, NULL);
    ck_assert_str_eq(b, "{\"error\":\"model '?"
                        "?'\"}");
    rtx_free(b);
    struct rtx_http_buf out = {0};
    ck_assert_int_eq(rtx__http_gen_error_event(RTX_HTTP_GEN_CHAT, 503, "going away", &out), 0);
    ck_assert_str_eq(out.data, "data: {\"error\":{\"message\":\"going away\",\"type\":"
                               "\"service_unavailable\",\"param\":null,\"code\":null}}\n\n"
                               "data: [DONE]\n\n");
    out.len = 0;
    ck_assert_int_eq(rtx__http_gen_error_event(RTX_HTTP_GEN_TRITON, 503, "x", &out), 0);
    ck_assert_str_eq(out.data, "data: {\"error\":\"x\"}\n\n");
    rtx__http_buf_free(&out);
}
END_TEST

START_TEST(gen_render_failures) {
    /* a token the tokenizer does not know */
    struct fixture f;
    fx_open(&f, RTX_HTTP_GEN_COMPLETIONS,
            "{\"model\":\"m\",\"prompt\":\"p\",\"stream\":true,\"logprobs\":0}");
    int32_t id = 5000;
    float lp = -1;
    struct rtx_gen_event ev = event(0, 1, &id, &lp, 0, NULL, "?", RTX_GEN_FINISH_NONE);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__http_gen_render_event(&f.v, 0, &ev, &f.out, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "5000"));
    /* a choice the request does not have */
    ev = event(1, 0, NULL, NULL, 0, NULL, "x", RTX_GEN_FINISH_NONE);
    ck_assert_int_eq(rtx__http_gen_render_event(&f.v, 0, &ev, &f.out, &err), RTX_EINTERNAL);
    fx_close(&f);
    /* out of memory while keeping a whole answer's tokens */
    fx_open(&f, RTX_HTTP_GEN_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"p\",\"logprobs\":0}");
    id = tid('a');
    ev = event(0, 1, &id, &lp, 0, NULL, "a", RTX_GEN_FINISH_NONE);
    rtx_alloc_fail_after(1);
    int rc = rtx__http_gen_render_event(&f.v, 0, &ev, &f.out, &err);
    rtx_alloc_fail_after(0);
    ck_assert_int_eq(rc, RTX_ENOMEM);
    fx_close(&f);
}
END_TEST

Suite *rtx_http_gen_suite(void) {
    Suite *s = suite_create("http_gen");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, gen_parse_completions_fields);
    tcase_add_test(t, gen_parse_prompt_shapes);
    tcase_add_test(t, gen_parse_completions_rejects);
    tcase_add_test(t, gen_parse_chat);
    tcase_add_test(t, gen_parse_triton);
    tcase_add_test(t, gen_parse_oom);
    suite_add_tcase(s, t);
    t = tcase_create("render");
    tcase_add_test(t, gen_render_completion_stream);
    tcase_add_test(t, gen_render_chat_stream);
    tcase_add_test(t, gen_render_whole_answers);
    tcase_add_test(t, gen_render_triton);
    tcase_add_test(t, gen_render_errors);
    tcase_add_test(t, gen_render_failures);
    suite_add_tcase(s, t);
    return s;
}
