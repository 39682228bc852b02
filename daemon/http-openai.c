/*
 * http-openai.c - the endpoints of text generation on rtxd's HTTP server: OpenAI's
 * POST /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /v1/models/{id},
 * and Triton's generate extension, POST /v2/models/{m}[/versions/{v}]/generate and
 * /generate_stream (docs/generation.md, "HTTP APIs").
 *
 * DESIGN
 * Each request is decoded on the loop (http-gen-parse.c), its model looked up (a READY
 * version whose config.json says "platform": "rtx_generate"), the model's generation
 * defaults given to the sampling fields it left unset, its prompts encoded (a chat's messages
 * through the model's chat template first) and checked against the context, then handed to
 * http-stream.c, which submits it and answers. The prompt's length is checked here, not only
 * by the engine, so that the error names the request's own field and numbers, as OpenAI's
 * servers do. A model is named by "model" (OpenAI; its newest READY version) or by the path
 * (Triton); the SLA lane by the body's "lane", else the x-rtx-lane header, else the model's.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/http-gen-impl.h"
#include "daemon/http-impl.h"
#include "formats/formats.h"

/* ------------------------------------------------------------------------------------------
 * Models and prompts
 * ---------------------------------------------------------------------------------------- */

/* A reference to the generative model `name`, or an answer in api's shape and NULL. */
static struct rtx_model *gen_model(struct rtx_http *h, h2o_req_t *req, int api, const char *name,
                                   int64_t version) {
    struct rtx_err err = {0};
    struct rtx_model *m = NULL;
    if (!h->d->serving) {
        char msg[320];
        snprintf(msg, sizeof msg,
                 "the model '%.200s' does not exist: no model repository is configured "
                 "(models.repository)",
                 name);
        rtx__http_gen_respond_error(req, api, 404, msg, "model");
        return NULL;
    }
    if (rtx_serving_model_get(h->d->serving, name, version, &m, &err) != 0) {
        rtx__http_gen_respond_error(req, api, rtx__http_status_from_err(err.code), err.msg,
                                    "model");
        return NULL;
    }
    if (!rtx_model_generator(m)) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "the model '%.128s' is not a generative model (platform '%s'): generation needs "
                 "\"platform\": \"rtx_generate\"; use /v2/models/%.128s/infer",
                 name, rtx_model_info(m)->platform, name);
        rtx_model_unref(m);
        /* Triton answers a request its model cannot take with 400 */
        rtx__http_gen_respond_error(req, api, api == RTX_HTTP_GEN_TRITON ? 400 : 404, msg,
                                    "model");
        return NULL;
    }
    return m;
}

/* Encodes q's prompts (a chat's through the template) and checks them against the context.
 * param gets the field an error is about. */
static int prepare_prompts(struct rtx_http_gen_req *q, const struct rtx_gen_model *gm,
                           const char **param, struct rtx_err *err) {
    *param = q->api == RTX_HTTP_GEN_CHAT     ? "messages"
             : q->api == RTX_HTTP_GEN_TRITON ? "text_input"
                                             : "prompt";
    int rc;
    if (q->api == RTX_HTTP_GEN_CHAT) {
        if (!rtx_gen_model_has_chat_template(gm))
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "the model '%s' has no chat template (tokenizer_config.json's "
                               "chat_template, or one named in its config.json): use "
                               "/v1/completions",
                               q->model);
        char *text = NULL;
        rc = rtx_gen_model_render_chat(gm, q->msgs, q->n_msgs, q->add_generation_prompt, &text,
                                       err);
        if (rc) return rtx_err_prefix(err, "the chat template");
        q->prompts[0].text = text;
        q->prompts[0].len = strlen(text);
    }
    int ctx = rtx_gen_model_context_length(gm);
    for (int i = 0; i < q->n_prompts; i++) {
        struct rtx_http_gen_prompt *p = &q->prompts[i];
        if (!p->ids) {
            rc = rtx_gen_model_encode_prompt(gm, p->text, p->len, &p->ids, &p->n_ids, err);
            if (rc) return rc;
        } else if (q->echo && !p->text) {
            size_t len = 0;
            rc = rtx_tokenizer_decode(rtx_gen_model_tokenizer(gm), p->ids, (size_t)p->n_ids, false,
                                      &p->text, &len, err);
            if (rc) return rc;
            p->len = len;
        }
        const char *which = q->n_prompts > 1 ? "a prompt" : "the prompt";
        if (p->n_ids >= ctx)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s has %d tokens; the model's context is %d tokens (prompt and "
                               "output together)",
                               which, p->n_ids, ctx);
        if (q->params.max_tokens > 0 && p->n_ids + q->params.max_tokens > ctx) {
            *param = "max_tokens";
            return rtx_err_set(err, RTX_EINVAL,
                               "%s has %d tokens and max_tokens is %d: %d tokens, past the "
                               "model's context of %d tokens",
                               which, p->n_ids, q->params.max_tokens,
                               p->n_ids + q->params.max_tokens, ctx);
        }
    }
    return 0;
}

/* The x-rtx-lane header's value in req's pool, or NULL. */
static const char *lane_header(h2o_req_t *req) {
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-rtx-lane"), -1);
    if (i < 0) return NULL;
    const h2o_iovec_t *v = &req->headers.entries[i].value;
    return h2o_strdup(&req->pool, v->base, v->len).base;
}

/* Decodes, resolves, prepares and starts one generation request. */
static void post_gen(struct rtx_http *h, h2o_req_t *req, enum rtx_http_gen_api api,
                     const char *name, int64_t version, bool sse) {
    struct rtx_err err = {0};
    char param[64];
    struct rtx_http_gen_req *q = NULL;
    if (rtx__http_gen_parse(api, req->entity.base, req->entity.base ? req->entity.len : 0, &q,
                            param, sizeof param, &err) != 0) {
        rtx__http_gen_respond_error(req, api, rtx__http_status_from_err(err.code), err.msg, param);
        return;
    }
    if (api == RTX_HTTP_GEN_TRITON) {
        q->sse = sse;
        q->stream = sse && q->stream;
    }
    struct rtx_model *m = gen_model(h, req, api, name ? name : q->model, version);
    if (!m) {
        rtx__http_gen_req_free(q);
        return;
    }
    const struct rtx_gen_model *gm = rtx_gen_engine_model(rtx_model_generator(m));
    struct rtx_gen_params dflt;
    rtx_gen_model_default_params(gm, &dflt);
    rtx__http_gen_apply_defaults(q, &dflt);
    const char *bad = NULL;
    if (prepare_prompts(q, gm, &bad, &err) != 0) {
        rtx__http_gen_respond_error(req, api, rtx__http_status_from_err(err.code), err.msg, bad);
        rtx__http_gen_req_free(q);
        rtx_model_unref(m);
        return;
    }
    rtx__http_gen_start(h, req, m, q, lane_header(req));
}

void rtx__http_post_generate(struct rtx_http *h, h2o_req_t *req, const char *name, int64_t version,
                             bool stream) {
    post_gen(h, req, RTX_HTTP_GEN_TRITON, name, version, stream);
}

/* ------------------------------------------------------------------------------------------
 * /v1/models
 * ---------------------------------------------------------------------------------------- */

static json_t *model_json(struct rtx_http *h, const char *name) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", name, "object", "model", "created",
                     (json_int_t)(h->d->started_ms / 1000), "owned_by", "rtxd");
}

static void get_models(struct rtx_http *h, h2o_req_t *req) {
    json_t *data = json_array();
    struct rtx_model_index_entry *idx = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (h->d->serving && rtx_serving_index(h->d->serving, true, &idx, &n, &err) != 0) {
        json_decref(data);
        rtx__http_gen_respond_error(req, RTX_HTTP_GEN_COMPLETIONS,
                                    rtx__http_status_from_err(err.code), err.msg, NULL);
        return;
    }
    for (int i = 0; data && i < n; i++) {
        struct rtx_model *m = NULL;
        if (rtx_serving_model_get(h->d->serving, idx[i].name, 0, &m, NULL) != 0) continue;
        bool gen = rtx_model_generator(m) != NULL;
        rtx_model_unref(m);
        if (gen && json_array_append_new(data, model_json(h, idx[i].name)) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    rtx_free(idx);
    rtx__http_respond_json(req, 200,
                           data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL);
}

static void get_model(struct rtx_http *h, h2o_req_t *req, const char *name) {
    struct rtx_model *m = gen_model(h, req, RTX_HTTP_GEN_COMPLETIONS, name, 0);
    if (!m) return;
    rtx_model_unref(m);
    rtx__http_respond_json(req, 200, model_json(h, name));
}

void rtx__http_route_openai(struct rtx_http *h, h2o_req_t *req, int n, const char *const *seg) {
    if (n == 1 && strcmp(seg[0], "completions") == 0) {
        if (rtx__http_method_is(req, "POST"))
            post_gen(h, req, RTX_HTTP_GEN_COMPLETIONS, NULL, 0, false);
    } else if (n == 2 && strcmp(seg[0], "chat") == 0 && strcmp(seg[1], "completions") == 0) {
        if (rtx__http_method_is(req, "POST")) post_gen(h, req, RTX_HTTP_GEN_CHAT, NULL, 0, false);
    } else if (n == 1 && strcmp(seg[0], "models") == 0) {
        if (rtx__http_method_is(req, "GET")) get_models(h, req);
    } else if (n == 2 && strcmp(seg[0], "models") == 0) {
        if (rtx__http_method_is(req, "GET")) get_model(h, req, seg[1]);
    } else {
        char msg[300];
        snprintf(msg, sizeof msg, "no such endpoint: %.*s %.*s", (int)req->method.len,
                 req->method.base,
                 (int)req->path_normalized.len > 200 ? 200 : (int)req->path_normalized.len,
                 req->path_normalized.base);
        rtx__http_gen_respond_error(req, RTX_HTTP_GEN_COMPLETIONS, 404, msg, NULL);
    }
}
