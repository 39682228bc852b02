/*
 * test-kserve.c - the KServe pieces both front ends share (daemon/kserve.h) and the HTTP
 * codec's BYTES tensors (daemon/http.h): the binary form of BYTES tensors (round trip, empty
 * elements, every malformed buffer), the sampling fields of sampling_parameters and request
 * parameters (types, decimal strings, unknown keys, stop lists), BYTES inputs in JSON and
 * binary bodies with their errors, and a generation's answer rendered as JSON and binary.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/http.h"
#include "daemon/kserve.h"

/* "\x03\0\0\0abc" style buffers: n strings in their binary form. */
static size_t pack(const char *const *s, int n, char *out) {
    struct rtx_kserve_str el[8];
    for (int i = 0; i < n; i++)
        el[i] = (struct rtx_kserve_str){s[i], strlen(s[i])};
    rtx__kserve_bytes_write(el, n, out);
    return rtx__kserve_bytes_size(el, n);
}

START_TEST(kserve_bytes_round_trip) {
    const char *const in[] = {"hello", "", "h\xc3\xa9llo \xf0\x9f\x98\x80", "x"};
    char buf[128];
    size_t len = pack(in, 4, buf);
    ck_assert_uint_eq(len, 4 * 4 + 5 + 0 + 11 + 1);
    /* the length prefix is little-endian, as Triton's serialize_byte_tensor writes it */
    ck_assert_int_eq((unsigned char)buf[0], 5);
    ck_assert_int_eq(buf[1] | buf[2] | buf[3], 0);
    struct rtx_kserve_str out[4];
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, len, 4, "x", out, &err), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(out[i].len, strlen(in[i]));
        ck_assert(memcmp(out[i].data, in[i], out[i].len) == 0);
    }
    /* a 300-byte element needs two bytes of its prefix */
    char big[300 + 4], text[301];
    memset(text, 'a', 300);
    text[300] = '\0';
    const char *const one[] = {text};
    ck_assert_uint_eq(pack(one, 1, big), sizeof big);
    ck_assert_int_eq((unsigned char)big[0], 300 & 0xff);
    ck_assert_int_eq((unsigned char)big[1], 300 >> 8);
    ck_assert_int_eq(rtx__kserve_bytes_split(big, sizeof big, 1, "x", out, &err), 0);
    ck_assert_uint_eq(out[0].len, 300);
    /* no elements: an empty buffer */
    ck_assert_int_eq(rtx__kserve_bytes_split("", 0, 0, "x", out, &err), 0);
}
END_TEST

START_TEST(kserve_bytes_malformed) {
    const char *const in[] = {"abc", "de"};
    char buf[32];
    size_t len = pack(in, 2, buf);
    struct rtx_kserve_str out[4];
    struct rtx_err err = {0};
    /* a length prefix cut short */
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, 9, 2, "t", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "input 't'") && strstr(err.msg, "length prefix runs past"), "%s",
                  err.msg);
    /* an element that claims more than is left */
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, len - 1, 2, "t", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "claims 2 bytes, but only 1 remain"), "%s", err.msg);
    char huge[8] = {(char)0xff, (char)0xff, (char)0xff, (char)0x7f, 'a', 'b', 'c', 'd'};
    ck_assert_int_eq(rtx__kserve_bytes_split(huge, sizeof huge, 1, "t", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "claims 2147483647 bytes"), "%s", err.msg);
    /* fewer and more elements than the shape holds */
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, len, 3, "t", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "2 BYTES elements, but its shape holds 3"), "%s", err.msg);
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, len, 1, "t", out, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "more than the 1 BYTES elements"), "%s", err.msg);
    ck_assert_int_eq(rtx__kserve_bytes_split(buf, 0, 1, "t", out, &err), RTX_EINVAL);
}
END_TEST

static json_t *parse_json(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    return j;
}

START_TEST(kserve_sampling_fields) {
    struct rtx_gen_params p;
    memset(&p, 0, sizeof p);
    p.n = 1;
    struct rtx_err err = {0};
    json_t *j = parse_json("{\"max_tokens\":12,\"temperature\":0.5,\"top_p\":\"0.9\","
                           "\"top_k\":\"40\",\"min_p\":0,\"seed\":18446744073,\"n\":2,"
                           "\"stop\":[\"\\n\\n\",\"END\"],\"ignore_eos\":\"true\","
                           "\"min_tokens\":3.0,\"repetition_penalty\":1.1,"
                           "\"presence_penalty\":-0.5,\"frequency_penalty\":\"0.25\","
                           "\"logprobs\":2,\"skip_special_tokens\":false}");
    ck_assert_msg(rtx__kserve_gen_params_apply(j, true, "sp", &p, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.max_tokens, 12);
    ck_assert(p.temperature == 0.5);
    ck_assert(fabs(p.top_p - 0.9) < 1e-12);
    ck_assert_int_eq(p.top_k, 40);
    ck_assert(p.has_seed);
    ck_assert(p.seed == 18446744073ull);
    ck_assert_int_eq(p.n, 2);
    ck_assert_int_eq(p.n_stop, 2);
    ck_assert_str_eq(p.stop[0], "\n\n");
    ck_assert_str_eq(p.stop[1], "END");
    ck_assert(p.ignore_eos);
    ck_assert_int_eq(p.min_tokens, 3);
    ck_assert(fabs(p.repetition_penalty - 1.1) < 1e-12);
    ck_assert(p.presence_penalty == -0.5);
    ck_assert(p.frequency_penalty == 0.25);
    ck_assert_int_eq(p.logprobs, 2);
    ck_assert(!p.skip_special);
    json_decref(j);

    /* one stop string; a later object overrides an earlier one (inputs over parameters) */
    j = parse_json("{\"stop\":\"###\",\"temperature\":0}");
    ck_assert_int_eq(rtx__kserve_gen_params_apply(j, true, "sp", &p, &err), 0);
    ck_assert_int_eq(p.n_stop, 1);
    ck_assert_str_eq(p.stop[0], "###");
    ck_assert(p.temperature == 0);
    json_decref(j);

    /* request parameters carry other keys, which are skipped; sampling_parameters may not */
    j = parse_json("{\"priority\":1,\"binary_data_output\":true,\"max_tokens\":5}");
    ck_assert_int_eq(rtx__kserve_gen_params_apply(j, false, "request parameters", &p, &err), 0);
    ck_assert_int_eq(p.max_tokens, 5);
    ck_assert_int_eq(
        rtx__kserve_gen_params_apply(j, true, "input 'sampling_parameters'", &p, &err),
        RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "unknown field 'priority'"), "%s", err.msg);
    json_decref(j);
    ck_assert_int_eq(rtx__kserve_gen_params_apply(NULL, true, "sp", &p, &err), 0);
}
END_TEST

START_TEST(kserve_sampling_bad_fields) {
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"temperature\":\"hot\"}", "temperature must be a number"},
        {"{\"temperature\":true}", "temperature must be a number"},
        {"{\"max_tokens\":1.5}", "max_tokens must be an integer"},
        {"{\"max_tokens\":\"12abc\"}", "max_tokens must be an integer"},
        {"{\"max_tokens\":4294967296}", "max_tokens must be an integer"},
        {"{\"top_k\":[1]}", "top_k must be an integer"},
        {"{\"seed\":-1}", "seed must be a non-negative integer"},
        {"{\"ignore_eos\":\"yes\"}", "ignore_eos must be true or false"},
        {"{\"stop\":5}", "stop must be a string or a list of strings"},
        {"{\"stop\":[\"a\",7]}", "stop[1] must be a non-empty string"},
        {"{\"stop\":[\"\"]}", "stop[0] must be a non-empty string"},
        {"{\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
         "stop has 9 strings; at most 8"},
        {"{\"temperature\":\"nan\"}", "temperature must be a number"},
        {"[1,2]", "must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rtx_gen_params p;
        memset(&p, 0, sizeof p);
        struct rtx_err err = {0};
        json_t *j = parse_json(cases[i].json);
        ck_assert_int_eq(rtx__kserve_gen_params_apply(j, true, "sp", &p, &err), RTX_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strncmp(err.msg, "sp", 2) == 0, "%s: %s",
                      cases[i].json, err.msg);
        json_decref(j);
    }
}
END_TEST

START_TEST(kserve_http_bytes_inputs) {
    /* JSON strings, nested as the shape says */
    const char *body =
        "{\"inputs\":[{\"name\":\"text_input\",\"shape\":[1,2],\"datatype\":\"BYTES\","
        "\"data\":[[\"caf\\u00e9\",\"\"]]},{\"name\":\"stream\",\"shape\":[1],"
        "\"datatype\":\"BOOL\",\"data\":[true]}],\"parameters\":{\"max_tokens\":4}}";
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx__http_infer_parse(body, strlen(body), -1, NULL, &q, &err) == 0, "%s",
                  err.msg);
    ck_assert_ptr_null(q->inputs[0].tensor);
    ck_assert_int_eq(q->bytes[0].n, 2);
    ck_assert_int_eq(q->bytes[0].ndim, 2);
    ck_assert_uint_eq(q->bytes[0].s[0].len, 5);
    ck_assert(memcmp(q->bytes[0].s[0].data, "caf\xc3\xa9", 5) == 0);
    ck_assert_uint_eq(q->bytes[0].s[1].len, 0);
    ck_assert_ptr_null(q->bytes[1].s);
    ck_assert_ptr_nonnull(q->inputs[1].tensor);
    ck_assert_int_eq(json_integer_value(json_object_get(q->params, "max_tokens")), 4);
    rtx__http_infer_free(q);

    /* the binary-data extension: the length-prefixed form after the JSON */
    const char *const el[] = {"ab", "xyz"};
    char bin[64];
    size_t blen = pack(el, 2, bin);
    char req[512];
    int hlen = snprintf(req, sizeof req,
                        "{\"inputs\":[{\"name\":\"t\",\"shape\":[2],\"datatype\":\"BYTES\","
                        "\"parameters\":{\"binary_data_size\":%zu}}]}",
                        blen);
    memcpy(req + hlen, bin, blen);
    ck_assert_msg(rtx__http_infer_parse(req, (size_t)hlen + blen, hlen, NULL, &q, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(q->bytes[0].n, 2);
    ck_assert(memcmp(q->bytes[0].s[1].data, "xyz", 3) == 0);
    rtx__http_infer_free(q);

    /* a length prefix past the binary part, a count other than the shape's, a non-string */
    hlen = snprintf(req, sizeof req,
                    "{\"inputs\":[{\"name\":\"t\",\"shape\":[2],\"datatype\":\"BYTES\","
                    "\"parameters\":{\"binary_data_size\":%zu}}]}",
                    blen - 1);
    memcpy(req + hlen, bin, blen - 1);
    ck_assert_int_eq(rtx__http_infer_parse(req, (size_t)hlen + blen - 1, hlen, NULL, &q, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "input 't'") && strstr(err.msg, "claims 3 bytes"), "%s",
                  err.msg);
    static const struct {
        const char *body, *want;
    } bad[] = {
        {"{\"inputs\":[{\"name\":\"t\",\"shape\":[3],\"datatype\":\"BYTES\",\"data\":[\"a\","
         "\"b\"]}]}",
         "\"data\" has 2 elements, but its shape holds 3"},
        {"{\"inputs\":[{\"name\":\"t\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[7]}]}",
         "data element 0 is not a string"},
        {"{\"inputs\":[{\"name\":\"t\",\"shape\":[1],\"datatype\":\"BYTES\","
         "\"parameters\":{\"binary_data_size\":8}}]}",
         "runs past the end of the body"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(
            rtx__http_infer_parse(bad[i].body, strlen(bad[i].body), -1, NULL, &q, &err),
            RTX_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].want), "%s: %s", bad[i].body, err.msg);
    }
    /* four bytes per element at least: a large shape over a short buffer is refused early */
    hlen = snprintf(req, sizeof req,
                    "{\"inputs\":[{\"name\":\"t\",\"shape\":[1000000000],\"datatype\":\"BYTES\","
                    "\"parameters\":{\"binary_data_size\":%zu}}]}",
                    blen);
    memcpy(req + hlen, bin, blen);
    ck_assert_int_eq(rtx__http_infer_parse(req, (size_t)hlen + blen, hlen, NULL, &q, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "cannot hold the 1000000000 BYTES elements"), "%s", err.msg);
}
END_TEST

START_TEST(kserve_http_render_text) {
    struct rtx_model_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "tiny");
    info.version = 3;
    struct rtx_kserve_str text[2] = {{"Once \"upon\"", 11}, {"\xe2\x82\xac", 3}};
    struct rtx_gen_usage usage = {.prompt_tokens = 4, .completion_tokens = 9, .cached_tokens = 2};
    struct rtx_kserve_gen_output o = {
        .n = 2, .text = text, .final = true, .finish_reason = "stop,length", .usage = &usage};
    const char *body = "{\"id\":\"r7\",\"inputs\":[{\"name\":\"text_input\",\"shape\":[1],"
                       "\"datatype\":\"BYTES\",\"data\":[\"x\"]}]}";
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__http_infer_parse(body, strlen(body), -1, NULL, &q, &err), 0);
    struct rtx_http_body b;
    ck_assert_msg(rtx__http_infer_render_text(q, &info, &o, &b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.header_len, -1);
    json_t *j = parse_json(b.data);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_name")), "tiny");
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_version")), "3");
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")), "r7");
    json_t *out = json_array_get(json_object_get(j, "outputs"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(out, "datatype")), "BYTES");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(out, "shape"), 0)), 2);
    json_t *data = json_object_get(out, "data");
    ck_assert_str_eq(json_string_value(json_array_get(data, 0)), "Once \"upon\"");
    ck_assert_str_eq(json_string_value(json_array_get(data, 1)), "\xe2\x82\xac");
    json_t *params = json_object_get(j, "parameters");
    ck_assert_str_eq(json_string_value(json_object_get(params, "finish_reason")), "stop,length");
    ck_assert_int_eq(json_integer_value(json_object_get(params, "completion_tokens")), 9);
    json_decref(j);
    rtx_free(b.data);

    /* binary: the JSON says the size, the length-prefixed elements follow */
    q->binary_output = true;
    ck_assert_int_eq(rtx__http_infer_render_text(q, &info, &o, &b, &err), 0);
    ck_assert_int_ge(b.header_len, 0);
    size_t blen = b.len - (size_t)b.header_len;
    ck_assert_uint_eq(blen, 4 + 11 + 4 + 3);
    struct rtx_kserve_str back[2];
    ck_assert_int_eq(rtx__kserve_bytes_split(b.data + b.header_len, blen, 2, "o", back, &err), 0);
    ck_assert(back[0].len == 11 && memcmp(back[0].data, "Once \"upon\"", 11) == 0);
    j = json_loadb(b.data, (size_t)b.header_len, 0, NULL);
    ck_assert_int_eq(
        json_integer_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "parameters"),
            "binary_data_size")),
        (json_int_t)blen);
    json_decref(j);
    rtx_free(b.data);

    /* text JSON cannot hold */
    q->binary_output = false;
    text[1] = (struct rtx_kserve_str){"\xff\xfe", 2};
    ck_assert_int_eq(rtx__http_infer_render_text(q, &info, &o, &b, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
    rtx__http_infer_free(q);
}
END_TEST

Suite *rtx_kserve_suite(void) {
    Suite *s = suite_create("kserve");
    TCase *t = tcase_create("core");
    tcase_add_test(t, kserve_bytes_round_trip);
    tcase_add_test(t, kserve_bytes_malformed);
    tcase_add_test(t, kserve_sampling_fields);
    tcase_add_test(t, kserve_sampling_bad_fields);
    tcase_add_test(t, kserve_http_bytes_inputs);
    tcase_add_test(t, kserve_http_render_text);
    suite_add_tcase(s, t);
    return s;
}
