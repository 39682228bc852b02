/*
 * generate.c - librtx's text generation: rtx_client_generate over the KServe stream
 * inference.ModelStreamInfer, the way Triton's clients talk to a decoupled (generative)
 * model.
 *
 * DESIGN
 * One request goes out with the client's half-close right after it: text_input (BYTES [1]),
 * stream (BOOL [1], true) and sampling_parameters (BYTES [1], a JSON object of the options
 * set), BYTES in their binary form (a 4-byte little-endian length, then the bytes). Every
 * response's text_output element is handed to the caller's callback and appended to the
 * result; the one flagged triton_final_response carries finish_reason and the token counts.
 * An error for the request arrives as the response's error_message, with the parameter
 * grpc_status saying which status it stands for. librtx has no JSON library: the few fields
 * are written by hand, the stop strings escaped.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client-impl.h"

void rtx_client_generate_result_clear(struct rtx_client_generate_result *res) {
    if (!res) return;
    free(res->text);
    memset(res, 0, sizeof *res);
}

/* ------------------------------------------------------------------------------------------
 * The request
 * ---------------------------------------------------------------------------------------- */

/* A growing string; `failed` once an allocation failed. */
struct str {
    char *p;
    size_t len, cap;
    bool failed;
};

static void str_add(struct str *s, const char *data, size_t n) {
    if (s->failed) return;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->failed = true;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->len, data, n);
    s->len += n;
    s->p[s->len] = '\0';
}

static void str_addf(struct str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void str_addf(struct str *s, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) str_add(s, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A JSON string literal of s. */
static void str_add_json(struct str *s, const char *v) {
    str_add(s, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            str_add(s, esc, 2);
        } else if (*p < 0x20) {
            str_addf(s, "\\u%04x", *p);
        } else {
            str_add(s, (const char *)p, 1);
        }
    }
    str_add(s, "\"", 1);
}

/* The sampling_parameters JSON of the options. */
static int sampling_json(const struct rtx_client_generate_options *o, struct str *s,
                         struct rtx_client_err *err) {
    str_add(s, "{", 1);
    const char *sep = "";
    if (o->max_tokens < 0)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "max_tokens %d is negative",
                               o->max_tokens);
    if (o->max_tokens > 0) {
        str_addf(s, "%s\"max_tokens\":%d", sep, o->max_tokens);
        sep = ",";
    }
    if (!isfinite(o->temperature) || !isfinite(o->top_p))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "temperature and top_p must be finite");
    if (o->temperature >= 0) {
        str_addf(s, "%s\"temperature\":%.17g", sep, o->temperature);
        sep = ",";
    }
    if (o->top_p < 0)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "top_p %g is negative", o->top_p);
    if (o->top_p > 0) {
        str_addf(s, "%s\"top_p\":%.17g", sep, o->top_p);
        sep = ",";
    }
    if (o->top_k != 0) {
        str_addf(s, "%s\"top_k\":%d", sep, o->top_k);
        sep = ",";
    }
    if (o->has_seed) {
        str_addf(s, "%s\"seed\":%" PRIu64, sep, o->seed);
        sep = ",";
    }
    if (o->n_stop < 0 || o->n_stop > 8 || (o->n_stop > 0 && !o->stop))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%d stop strings: 0 to 8", o->n_stop);
    if (o->n_stop > 0) {
        str_addf(s, "%s\"stop\":[", sep);
        for (int i = 0; i < o->n_stop; i++) {
            if (!o->stop[i] || !o->stop[i][0])
                return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "stop string %d is empty", i);
            if (i) str_add(s, ",", 1);
            str_add_json(s, o->stop[i]);
        }
        str_add(s, "]", 1);
    }
    str_add(s, "}", 1);
    if (s->failed) return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    return 0;
}

/* The binary form of one BYTES element: a 4-byte little-endian length, then the bytes. */
static uint8_t *bytes_element(const char *data, size_t len, size_t *out_len) {
    uint8_t *p = malloc(len + 4);
    if (!p) return NULL;
    p[0] = (uint8_t)len;
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 24);
    memcpy(p + 4, data, len);
    *out_len = len + 4;
    return p;
}

/* ------------------------------------------------------------------------------------------
 * The responses
 * ---------------------------------------------------------------------------------------- */

struct gen_state {
    rtx_client_text_cb on_text;
    void *ctx;
    struct rtx_client_generate_result *res;
    struct str text;
    bool final;
};

static const Inference__InferParameter *resp_param(const Inference__ModelInferResponse *r,
                                                   const char *key) {
    for (size_t i = 0; i < r->n_parameters; i++)
        if (r->parameters[i]->key && strcmp(r->parameters[i]->key, key) == 0)
            return r->parameters[i]->value;
    return NULL;
}

static int64_t param_int(const Inference__ModelInferResponse *r, const char *key) {
    const Inference__InferParameter *p = resp_param(r, key);
    return p && p->parameter_choice_case ==
                       INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM
               ? p->int64_param
               : 0;
}

/* The first element of text_output in r: from raw_output_contents or typed contents. */
static int text_of(const Inference__ModelInferResponse *r, const char **data, size_t *len,
                   struct rtx_client_err *err) {
    *data = NULL;
    *len = 0;
    for (size_t i = 0; i < r->n_outputs; i++) {
        const Inference__ModelInferResponse__InferOutputTensor *o = r->outputs[i];
        if (strcmp(rtx__client_str(o->name), "text_output") != 0) continue;
        if (o->contents && o->contents->n_bytes_contents > 0) {
            *data = (const char *)o->contents->bytes_contents[0].data;
            *len = o->contents->bytes_contents[0].len;
            return 0;
        }
        if (i >= r->n_raw_output_contents) break;
        const ProtobufCBinaryData *raw = &r->raw_output_contents[i];
        if (raw->len < 4) break;
        const uint8_t *p = raw->data;
        uint32_t n =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (n > raw->len - 4) break;
        *data = (const char *)p + 4;
        *len = n;
        return 0;
    }
    if (r->n_outputs == 0) return 0; /* an empty final response */
    return rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                           "a response without a readable text_output (BYTES) tensor");
}

static int on_message(void *ctx, ProtobufCMessage *msg, struct rtx_client_err *err) {
    struct gen_state *g = ctx;
    Inference__ModelStreamInferResponse *m = (Inference__ModelStreamInferResponse *)msg;
    const Inference__ModelInferResponse *r = m->infer_response;
    int rc = 0;
    if (m->error_message && m->error_message[0]) {
        int64_t st = r ? param_int(r, "grpc_status") : 0;
        int code = st > 0 ? rtx__client_code_from_grpc((grpc_status_code)st) : RTX_CLIENT_EINVAL;
        rc = rtx__client_err(err, code, st > 0 ? (int)st : -1, "%s", m->error_message);
    } else if (!r) {
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1, "a stream response without a response");
    } else {
        const char *data;
        size_t len;
        rc = text_of(r, &data, &len, err);
        if (rc == 0 && len > 0) {
            str_add(&g->text, data, len);
            if (g->text.failed) rc = rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
            if (g->res) g->res->chunks++;
            if (rc == 0 && g->on_text && g->on_text(g->ctx, data, len) != 0)
                rc = rtx__client_err(err, RTX_CLIENT_ECANCELLED, -1, "generation cancelled");
        }
        const Inference__InferParameter *f = resp_param(r, "triton_final_response");
        if (rc == 0 && f && f->bool_param) {
            g->final = true;
            if (g->res) {
                const Inference__InferParameter *fr = resp_param(r, "finish_reason");
                if (fr && fr->string_param)
                    snprintf(g->res->finish_reason, sizeof g->res->finish_reason, "%s",
                             fr->string_param);
                g->res->prompt_tokens = (int)param_int(r, "prompt_tokens");
                g->res->completion_tokens = (int)param_int(r, "completion_tokens");
                g->res->cached_tokens = (int)param_int(r, "cached_tokens");
            }
        }
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * The call
 * ---------------------------------------------------------------------------------------- */

int rtx_client_generate(struct rtx_client *c, const char *model, const char *prompt,
                        const struct rtx_client_generate_options *opt, rtx_client_text_cb on_text,
                        void *ctx, struct rtx_client_generate_result *res,
                        struct rtx_client_err *err) {
    if (res) memset(res, 0, sizeof *res);
    if (!c) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no client");
    if (!model || !model[0]) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no model name");
    if (!prompt) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no prompt");
    static const struct rtx_client_generate_options defaults;
    const struct rtx_client_generate_options *o = opt ? opt : &defaults;
    struct str sampling = {0};
    int rc = sampling_json(o, &sampling, err);
    if (rc) {
        free(sampling.p);
        return rc;
    }
    ProtobufCBinaryData raw[3] = {{0, NULL}, {0, NULL}, {0, NULL}};
    raw[0].data = bytes_element(prompt, strlen(prompt), &raw[0].len);
    raw[1].data = malloc(1);
    raw[2].data = bytes_element(sampling.p, sampling.len, &raw[2].len);
    free(sampling.p);
    if (!raw[0].data || !raw[1].data || !raw[2].data) {
        for (int i = 0; i < 3; i++)
            free(raw[i].data);
        return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    }
    raw[1].data[0] = 1;
    raw[1].len = 1;

    static const char *const names[3] = {"text_input", "stream", "sampling_parameters"};
    static const char *const types[3] = {"BYTES", "BOOL", "BYTES"};
    int64_t shape[1] = {1};
    Inference__ModelInferRequest__InferInputTensor in[3], *ins[3];
    for (int i = 0; i < 3; i++) {
        inference__model_infer_request__infer_input_tensor__init(&in[i]);
        in[i].name = (char *)names[i];
        in[i].datatype = (char *)types[i];
        in[i].n_shape = 1;
        in[i].shape = shape;
        ins[i] = &in[i];
    }
    Inference__InferParameter lane = INFERENCE__INFER_PARAMETER__INIT;
    Inference__ModelInferRequest__ParametersEntry lane_e =
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
    Inference__ModelInferRequest__ParametersEntry *params[1] = {&lane_e};
    Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
    req.model_name = (char *)model;
    req.n_inputs = 3;
    req.inputs = ins;
    req.n_raw_input_contents = 3;
    req.raw_input_contents = raw;
    if (o->lane && o->lane[0]) {
        lane.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
        lane.string_param = (char *)o->lane;
        lane_e.key = (char *)"lane";
        lane_e.value = &lane;
        req.n_parameters = 1;
        req.parameters = params;
    }
    struct gen_state g = {.on_text = on_text, .ctx = ctx, .res = res};
    rc =
        rtx__client_stream(c, RTX__CLIENT_M_MODEL_STREAM_INFER, &req.base,
                           o->timeout_ms > 0 ? o->timeout_ms : -1, on_message, &g, o->cancel, err);
    for (int i = 0; i < 3; i++)
        free(raw[i].data);
    if (rc == 0 && !g.final)
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                             "the stream ended before the final response");
    if (res) {
        res->text = g.text.p ? g.text.p : calloc(1, 1);
        res->len = g.text.len;
        snprintf(res->request_id, sizeof res->request_id, "%s", rtx_client_last_request_id(c));
        if (!res->text && rc == 0)
            rc = rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    } else {
        free(g.text.p);
    }
    return rc;
}
