/*
 * http-endpoints.c - the endpoints of rtxd's KServe v2 HTTP/REST server and /metrics: server
 * and model metadata, readiness, configuration and statistics, inference, the model
 * repository, system shared memory; the JSON helpers they share; and the routing of a
 * request's normalized path to them (rtx__http_on_req, h2o's handler). The server itself
 * (answers, pending work, connections, shutdown) is in http.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/http-impl.h"
#include "daemon/log.h"
#include "daemon/metrics.h"

/* ------------------------------------------------------------------------------------------
 * JSON helpers
 * ---------------------------------------------------------------------------------------- */

static json_t *io_json(const struct rtx_model_io *io, int max_batch_size) {
    json_t *shape = json_array();
    if (max_batch_size > 0) json_array_append_new(shape, json_integer(-1));
    for (int d = 0; d < io->ndim; d++)
        json_array_append_new(shape, json_integer(io->dims[d]));
    return json_pack("{s:s,s:s,s:o}", "name", io->name, "datatype",
                     rtx__kserve_io_datatype(io), "shape", shape);
}

static json_t *duration_json(const struct rtx_stat_duration *d) {
    return json_pack("{s:I,s:I}", "count", (json_int_t)d->count, "ns", (json_int_t)d->ns);
}

static json_t *stats_json(const struct rtx_model_stats *st, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        const struct rtx_model_stats *s = &st[i];
        char version[32];
        snprintf(version, sizeof version, "%" PRId64, s->version);
        json_t *zero = json_pack("{s:i,s:i}", "count", 0, "ns", 0);
        json_t *inf = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "success",
                                duration_json(&s->success), "fail", duration_json(&s->fail),
                                "queue", duration_json(&s->queue), "compute_input",
                                duration_json(&s->compute_input), "compute_infer",
                                duration_json(&s->compute_infer), "compute_output",
                                duration_json(&s->compute_output), "cache_hit", zero,
                                "cache_miss", json_deep_copy(zero));
        json_t *batches = json_array();
        for (int k = 0; batches && k < s->n_batch_stats; k++) {
            const struct rtx_batch_stat *b = &s->batch_stats[k];
            json_array_append_new(
                batches, json_pack("{s:i,s:o,s:o,s:o}", "batch_size", b->batch_size,
                                   "compute_input", duration_json(&b->compute_input),
                                   "compute_infer", duration_json(&b->compute_infer),
                                   "compute_output", duration_json(&b->compute_output)));
        }
        json_t *m = json_pack("{s:s,s:s,s:I,s:I,s:I,s:o,s:o}", "name", s->name, "version",
                              version, "last_inference", (json_int_t)s->last_inference_ms,
                              "inference_count", (json_int_t)s->inference_count,
                              "execution_count", (json_int_t)s->execution_count,
                              "inference_stats", inf, "batch_stats", batches);
        if (!m || json_array_append_new(arr, m) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr ? json_pack("{s:o}", "model_stats", arr) : NULL;
}

/* Parses the optional JSON body of a POST; *root NULL for an empty body. false: answered. */
static bool body_json(h2o_req_t *req, json_t **root) {
    *root = NULL;
    if (!req->entity.base || req->entity.len == 0) return true;
    json_error_t jerr;
    *root = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    if (!*root) {
        rtx__http_respond_errf(req, 400,
                               "malformed JSON in the request body: %s (line %d, column %d)",
                               jerr.text, jerr.line, jerr.column);
        return false;
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        rtx__http_respond_error(req, 400, "the request body must be a JSON object");
        return false;
    }
    return true;
}
/* ------------------------------------------------------------------------------------------
 * Endpoints
 * ---------------------------------------------------------------------------------------- */

static bool server_ready(struct rtx_daemon *d) {
    if (atomic_load(&d->draining)) return false;
    return !d->serving || rtx_serving_ready(d->serving);
}

static void get_server_metadata(h2o_req_t *req) {
    json_t *ext = json_pack("[s,s,s,s,s,s]", "model_repository", "model_configuration",
                            "system_shared_memory", "binary_tensor_data", "statistics",
                            "schedule_policy");
    rtx__http_respond_json(
        req, 200,
        json_pack("{s:s,s:s,s:o}", "name", "rtxd", "version", RTX_VERSION, "extensions", ext));
}

/* A reference to model `name` version `version`, or an answer and NULL. */
static struct rtx_model *model_get(struct rtx_http *h, h2o_req_t *req, const char *name,
                                   int64_t version) {
    struct rtx_err err = {0};
    struct rtx_model *m = NULL;
    if (!h->d->serving) {
        rtx__http_respond_errf(req, 404,
                               "unknown model '%s': no model repository is configured "
                               "(models.repository)",
                               name);
        return NULL;
    }
    if (rtx_serving_model_get(h->d->serving, name, version, &m, &err) != 0) {
        rtx__http_respond_err(req, &err);
        return NULL;
    }
    return m;
}

static void get_model_metadata(struct rtx_http *h, h2o_req_t *req, const char *name,
                               int64_t version) {
    struct rtx_model *m = model_get(h, req, name, version);
    if (!m) return;
    const struct rtx_model_info *mi = rtx_model_info(m);
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, mi->version);
    json_t *in = json_array(), *out = json_array();
    for (int i = 0; i < mi->n_inputs; i++)
        json_array_append_new(in, io_json(&mi->inputs[i], mi->max_batch_size));
    for (int i = 0; i < mi->n_outputs; i++)
        json_array_append_new(out, io_json(&mi->outputs[i], mi->max_batch_size));
    json_t *j = json_pack("{s:s,s:[s],s:s,s:o,s:o}", "name", mi->name, "versions", v,
                          "platform", mi->platform, "inputs", in, "outputs", out);
    rtx_model_unref(m);
    rtx__http_respond_json(req, 200, j);
}

static void get_model_ready(struct rtx_http *h, h2o_req_t *req, const char *name,
                            int64_t version) {
    struct rtx_model *m = model_get(h, req, name, version);
    if (!m) return;
    rtx_model_unref(m);
    rtx__http_respond(req, 200, NULL, NULL, 0, -1);
}

static void get_model_config(struct rtx_http *h, h2o_req_t *req, const char *name,
                             int64_t version) {
    struct rtx_model *m = model_get(h, req, name, version);
    if (!m) return;
    char *cfg = rtx_model_config_json(m);
    rtx_model_unref(m);
    if (!cfg) {
        rtx__http_respond_error(req, 500, "out of memory");
        return;
    }
    rtx__http_respond(req, 200, "application/json", cfg, strlen(cfg), -1);
    rtx_free(cfg);
}

static void get_model_stats(struct rtx_http *h, h2o_req_t *req, const char *name,
                            int64_t version) {
    struct rtx_model_stats *st = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (!h->d->serving) {
        if (name) {
            rtx__http_respond_errf(req, 404,
                                   "unknown model '%s': no model repository is configured", name);
            return;
        }
        rtx__http_respond_json(req, 200, stats_json(NULL, 0));
        return;
    }
    if (rtx_serving_stats(h->d->serving, name, version, &st, &n, &err) != 0) {
        rtx__http_respond_err(req, &err);
        return;
    }
    json_t *j = stats_json(st, n);
    rtx_free(st);
    rtx__http_respond_json(req, 200, j);
}

static void post_infer(struct rtx_http *h, h2o_req_t *req, const char *name, int64_t version) {
    ssize_t ce = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_ENCODING, -1);
    if (ce >= 0 && !h2o_lcstris(req->headers.entries[ce].value.base,
                                req->headers.entries[ce].value.len, H2O_STRLIT("identity"))) {
        rtx__http_respond_errf(req, 400,
                               "Content-Encoding '%.*s' is not supported: send the body "
                               "uncompressed",
                               (int)req->headers.entries[ce].value.len,
                               req->headers.entries[ce].value.base);
        return;
    }
    int64_t header_len = -1;
    ssize_t hi = h2o_find_header_by_str(&req->headers,
                                        H2O_STRLIT("inference-header-content-length"), -1);
    if (hi >= 0) {
        const h2o_iovec_t *v = &req->headers.entries[hi].value;
        char buf[32];
        char *end = NULL;
        if (v->len == 0 || v->len >= sizeof buf) goto bad_header;
        memcpy(buf, v->base, v->len);
        buf[v->len] = '\0';
        long long x = strtoll(buf, &end, 10);
        if (*end != '\0' || x < 0) goto bad_header;
        header_len = x;
    }
    struct rtx_model *m = model_get(h, req, name, version);
    if (!m) return;
    struct rtx_err err = {0};
    struct rtx_http_infer *q = NULL;
    if (rtx__http_infer_parse(req->entity.base, req->entity.base ? req->entity.len : 0,
                              header_len, h->d->shm, &q, &err) != 0) {
        rtx_model_unref(m);
        rtx__http_respond_err(req, &err);
        return;
    }
    bool generative = rtx_model_generator(m) != NULL;
    for (int i = 0; !generative && i < q->n_inputs; i++)
        if (q->bytes[i].s) {
            rtx__http_respond_errf(req, 400,
                                   "input '%s': datatype BYTES, but model '%s' is a graph "
                                   "model, whose inputs are numeric tensors (BYTES inputs are "
                                   "for generative models)",
                                   q->inputs[i].name, rtx_model_info(m)->name);
            rtx_model_unref(m);
            rtx__http_infer_free(q);
            return;
        }
    struct pending *p = rtx__http_pending_new(h, req, PENDING_INFER);
    if (!p) {
        rtx_model_unref(m);
        rtx__http_infer_free(q);
        rtx__http_respond_error(req, 500, "out of memory");
        return;
    }
    p->q = q;
    p->conn = rtx__http_conn_of(h, req);
    if (p->conn && !uv_is_active((uv_handle_t *)&h->watch_timer))
        uv_timer_start(&h->watch_timer, rtx__http_on_watch, WATCH_MS, WATCH_MS);
    int64_t deadline_ns = q->timeout_us > 0 ? rtx_mono_ns() + q->timeout_us * 1000 : 0;
    if (generative) {
        if (rtx__http_infer_gen(p, m, deadline_ns, &err) != 0) {
            rtx_model_unref(m);
            rtx__http_pending_error(p, rtx__http_status_from_err(err.code),
                                    err.msg[0] ? err.msg : rtx_strerror(err.code));
            rtx__http_pending_finish(p);
        }
        return;
    }
    struct rtx_infer_request r = {
        .model = m,
        .id = q->id,
        .n_inputs = q->n_inputs,
        .inputs = q->inputs,
        .n_outputs = q->n_outputs,
        .outputs = q->output_names,
        .deadline_ns = deadline_ns,
        .priority = q->priority,
        .lane = q->lane,
        .cancel = &p->cancel,
        .done = rtx__http_on_infer_done,
        .ctx = p,
    };
    int rc = rtx_serving_infer(h->d->serving, &r, &err);
    rtx_model_unref(m);
    if (rc != 0) {
        /* the callback will not run: answer now */
        rtx__http_pending_error(p, rtx__http_status_from_err(rc),
                                err.msg[0] ? err.msg : rtx_strerror(rc));
        rtx__http_pending_finish(p);
    }
    return;
bad_header:
    rtx__http_respond_error(req, 400,
                            "Inference-Header-Content-Length must be a non-negative integer");
}

/* --- repository --- */

static void post_repository_index(struct rtx_http *h, h2o_req_t *req) {
    json_t *body;
    if (!body_json(req, &body)) return;
    json_t *ready = body ? json_object_get(body, "ready") : NULL;
    if (ready && !json_is_boolean(ready)) {
        json_decref(body);
        rtx__http_respond_error(req, 400, "\"ready\" must be true or false");
        return;
    }
    bool ready_only = ready && json_is_true(ready);
    json_decref(body);
    json_t *arr = json_array();
    if (!h->d->serving) {
        rtx__http_respond_json(req, 200, arr);
        return;
    }
    struct rtx_model_index_entry *idx = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (rtx_serving_index(h->d->serving, ready_only, &idx, &n, &err) != 0) {
        json_decref(arr);
        rtx__http_respond_err(req, &err);
        return;
    }
    for (int i = 0; i < n; i++) {
        json_t *e = json_pack("{s:s,s:s,s:s}", "name", idx[i].name, "state",
                              rtx_model_state_name(idx[i].state), "reason", idx[i].reason);
        if (e && idx[i].version > 0) {
            char v[32];
            snprintf(v, sizeof v, "%" PRId64, idx[i].version);
            json_object_set_new(e, "version", json_string(v));
        }
        json_array_append_new(arr, e);
    }
    rtx_free(idx);
    rtx__http_respond_json(req, 200, arr);
}

static void repo_work(uv_work_t *w) {
    struct pending *p = w->data;
    struct rtx_serving *s = p->h->d->serving;
    if (p->kind == PENDING_LOAD)
        p->rc = rtx_serving_load(s, p->model, p->config_json, &p->err);
    else
        p->rc = rtx_serving_unload(s, p->model, &p->err);
}

static void repo_after(uv_work_t *w, int status) {
    struct pending *p = w->data;
    struct rtx_http *h = p->h;
    if (status != 0)
        rtx__http_pending_error(p, 500, "the operation was canceled");
    else if (p->rc != 0)
        rtx__http_pending_error(p, rtx__http_status_from_err(p->rc),
                                p->err.msg[0] ? p->err.msg : rtx_strerror(p->rc));
    else
        p->status = 200;
    rtx__http_pending_finish(p);
    rtx__http_check_progress(h);
}

static void post_repository_model(struct rtx_http *h, h2o_req_t *req, const char *name,
                                  bool load) {
    if (!h->d->serving) {
        rtx__http_respond_errf(req, 400,
                               "cannot %s '%s': no model repository is configured "
                               "(models.repository)",
                               load ? "load" : "unload", name);
        return;
    }
    json_t *body;
    if (!body_json(req, &body)) return;
    const char *config = NULL;
    json_t *params = body ? json_object_get(body, "parameters") : NULL;
    if (params) {
        if (!json_is_object(params)) {
            json_decref(body);
            rtx__http_respond_error(req, 400, "\"parameters\" must be an object");
            return;
        }
        const char *key;
        json_t *v;
        json_object_foreach(params, key, v) {
            if (strncmp(key, "file:", 5) == 0) {
                rtx__http_respond_errf(req, 400,
                                       "load parameter '%s': model files in the request are "
                                       "not supported; put them in the repository",
                                       key);
                json_decref(body);
                return;
            }
            if (strcmp(key, "config") == 0) {
                if (!load || !json_is_string(v)) {
                    json_decref(body);
                    rtx__http_respond_error(req, 400,
                                            load ? "parameter \"config\" must be a string "
                                                   "holding the model's config JSON"
                                                 : "parameter \"config\" is for load only");
                    return;
                }
                config = json_string_value(v);
            }
        }
    }
    struct pending *p = rtx__http_pending_new(h, req, load ? PENDING_LOAD : PENDING_UNLOAD);
    if (p) {
        p->model = rtx_strdup(name);
        p->config_json = config ? rtx_strdup(config) : NULL;
    }
    json_decref(body);
    if (!p || !p->model || (config && !p->config_json)) {
        if (p) {
            p->status = 500;
            rtx__http_pending_finish(p); /* answers 500 with an empty body */
        } else {
            rtx__http_respond_error(req, 500, "out of memory");
        }
        return;
    }
    p->work.data = p;
    int rc = uv_queue_work(h->loop, &p->work, repo_work, repo_after);
    if (rc != 0) {
        rtx__http_pending_error(p, 500, uv_strerror(rc));
        rtx__http_pending_finish(p);
    }
}

/* --- shared memory --- */

static void get_shm_status(struct rtx_http *h, h2o_req_t *req, const char *region) {
    struct rtx_shm_status *st = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (rtx_shm_list(h->d->shm, region, &st, &n, &err) != 0) {
        rtx__http_respond_err(req, &err);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:I}", "name", st[i].name, "key",
                                             st[i].key, "offset", (json_int_t)st[i].offset,
                                             "byte_size", (json_int_t)st[i].byte_size));
    rtx_free(st);
    rtx__http_respond_json(req, 200, arr);
}

static void post_shm_register(struct rtx_http *h, h2o_req_t *req, const char *region) {
    json_t *body;
    if (!body_json(req, &body)) return;
    json_t *key = body ? json_object_get(body, "key") : NULL;
    json_t *off = body ? json_object_get(body, "offset") : NULL;
    json_t *size = body ? json_object_get(body, "byte_size") : NULL;
    if (!json_is_string(key) || (off && (!json_is_integer(off) || json_integer_value(off) < 0)) ||
        !json_is_integer(size) || json_integer_value(size) <= 0) {
        json_decref(body);
        rtx__http_respond_errf(req, 400,
                               "register '%s': the body must be {\"key\": string, \"offset\": "
                               "integer >= 0, \"byte_size\": integer > 0}",
                               region);
        return;
    }
    struct rtx_err err = {0};
    int rc = rtx_shm_register(h->d->shm, region, json_string_value(key),
                              off ? (uint64_t)json_integer_value(off) : 0,
                              (uint64_t)json_integer_value(size), &err);
    json_decref(body);
    if (rc != 0) {
        /* a key that cannot be opened or mapped is the client's mistake, as in Triton */
        rtx__http_respond_error(req, rc == RTX_EIO ? 400 : rtx__http_status_from_err(rc), err.msg);
        return;
    }
    rtx__http_respond(req, 200, NULL, NULL, 0, -1);
}

static void post_shm_unregister(struct rtx_http *h, h2o_req_t *req, const char *region) {
    struct rtx_err err = {0};
    if (rtx_shm_unregister(h->d->shm, region, &err) != 0) {
        rtx__http_respond_err(req, &err);
        return;
    }
    rtx__http_respond(req, 200, NULL, NULL, 0, -1);
}

static void get_metrics(struct rtx_http *h, h2o_req_t *req) {
    char *text = NULL;
    size_t len = 0;
    struct rtx_err err = {0};
    if (rtx_metrics_render(h->d, &text, &len, &err) != 0) {
        rtx__http_respond_err(req, &err);
        return;
    }
    rtx__http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, -1);
    rtx_free(text);
}
/* ------------------------------------------------------------------------------------------
 * Routing
 * ---------------------------------------------------------------------------------------- */

#define MAX_SEGMENTS 8 /* path segments routed */

struct route {
    int n;
    char seg[MAX_SEGMENTS][160];
};

/* Splits the normalized path into segments; false when too many or too long. */
static bool split_path(const h2o_iovec_t *path, struct route *r) {
    r->n = 0;
    size_t i = 0;
    while (i < path->len) {
        while (i < path->len && path->base[i] == '/')
            i++;
        if (i == path->len) break;
        size_t j = i;
        while (j < path->len && path->base[j] != '/')
            j++;
        if (r->n == MAX_SEGMENTS || j - i >= sizeof r->seg[0]) return false;
        memcpy(r->seg[r->n], path->base + i, j - i);
        r->seg[r->n][j - i] = '\0';
        r->n++;
        i = j;
    }
    return true;
}

static bool seg_is(const struct route *r, int i, const char *s) {
    return i < r->n && strcmp(r->seg[i], s) == 0;
}

bool rtx__http_method_is(h2o_req_t *req, const char *want) {
    size_t n = strlen(want);
    if (req->method.len == n && memcmp(req->method.base, want, n) == 0) return true;
    if (strcmp(want, "GET") == 0 && h2o_memis(req->method.base, req->method.len,
                                              H2O_STRLIT("HEAD")))
        return true;
    rtx__http_respond_errf(req, 405, "%.*s is not allowed on %.*s; use %s", (int)req->method.len,
                           req->method.base, (int)req->path_normalized.len,
                           req->path_normalized.base, want);
    return false;
}

static bool parse_version(h2o_req_t *req, const char *s, int64_t *out) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v <= 0) {
        rtx__http_respond_errf(req, 400, "model version '%s' is not a positive integer", s);
        return false;
    }
    *out = v;
    return true;
}

static void not_found(h2o_req_t *req) {
    rtx__http_respond_errf(req, 404, "no such endpoint: %.*s %.*s", (int)req->method.len,
                           req->method.base, (int)req->path_normalized.len,
                           req->path_normalized.base);
}

/* /v2/models/{m}[/versions/{v}][/action] */
static void route_model(struct rtx_http *h, h2o_req_t *req, const struct route *r) {
    const char *name = r->seg[2];
    int64_t version = 0;
    int at = 3;
    if (seg_is(r, 3, "versions")) {
        if (r->n < 5) return not_found(req);
        if (!parse_version(req, r->seg[4], &version)) return;
        at = 5;
    }
    if (r->n == at) {
        if (rtx__http_method_is(req, "GET")) get_model_metadata(h, req, name, version);
        return;
    }
    if (r->n != at + 1) return not_found(req);
    const char *action = r->seg[at];
    if (strcmp(action, "ready") == 0) {
        if (rtx__http_method_is(req, "GET")) get_model_ready(h, req, name, version);
    } else if (strcmp(action, "config") == 0) {
        if (rtx__http_method_is(req, "GET")) get_model_config(h, req, name, version);
    } else if (strcmp(action, "stats") == 0) {
        if (rtx__http_method_is(req, "GET")) get_model_stats(h, req, name, version);
    } else if (strcmp(action, "infer") == 0) {
        if (rtx__http_method_is(req, "POST")) post_infer(h, req, name, version);
    } else if (strcmp(action, "generate") == 0 || strcmp(action, "generate_stream") == 0) {
        if (rtx__http_method_is(req, "POST"))
            rtx__http_post_generate(h, req, name, version, strcmp(action, "generate") != 0);
    } else {
        not_found(req);
    }
}

static void route_shm(struct rtx_http *h, h2o_req_t *req, const struct route *r) {
    if (r->n == 3 && seg_is(r, 2, "status")) {
        if (rtx__http_method_is(req, "GET")) get_shm_status(h, req, NULL);
    } else if (r->n == 3 && seg_is(r, 2, "unregister")) {
        if (rtx__http_method_is(req, "POST")) post_shm_unregister(h, req, NULL);
    } else if (r->n == 5 && seg_is(r, 2, "region")) {
        const char *region = r->seg[3];
        if (seg_is(r, 4, "status")) {
            if (rtx__http_method_is(req, "GET")) get_shm_status(h, req, region);
        } else if (seg_is(r, 4, "register")) {
            if (rtx__http_method_is(req, "POST")) post_shm_register(h, req, region);
        } else if (seg_is(r, 4, "unregister")) {
            if (rtx__http_method_is(req, "POST")) post_shm_unregister(h, req, region);
        } else {
            not_found(req);
        }
    } else {
        not_found(req);
    }
}

int rtx__http_on_req(h2o_handler_t *self, h2o_req_t *req) {
    struct rtx_http *h = ((struct handler *)self)->h;
    struct route r;
    if (!split_path(&req->path_normalized, &r)) {
        not_found(req);
        return 0;
    }
    if (r.n == 1 && seg_is(&r, 0, "metrics")) {
        if (rtx__http_method_is(req, "GET")) get_metrics(h, req);
        return 0;
    }
    if (seg_is(&r, 0, "v1")) {
        const char *seg[MAX_SEGMENTS];
        for (int i = 1; i < r.n; i++)
            seg[i - 1] = r.seg[i];
        rtx__http_route_openai(h, req, r.n - 1, seg);
        return 0;
    }
    if (!seg_is(&r, 0, "v2")) {
        not_found(req);
        return 0;
    }
    if (r.n == 1) {
        if (rtx__http_method_is(req, "GET")) get_server_metadata(req);
    } else if (r.n == 3 && seg_is(&r, 1, "health") && seg_is(&r, 2, "live")) {
        if (rtx__http_method_is(req, "GET")) rtx__http_respond(req, 200, NULL, NULL, 0, -1);
    } else if (r.n == 3 && seg_is(&r, 1, "health") && seg_is(&r, 2, "ready")) {
        if (!rtx__http_method_is(req, "GET")) return 0;
        if (server_ready(h->d))
            rtx__http_respond(req, 200, NULL, NULL, 0, -1);
        else
            rtx__http_respond_error(req, 503,
                                    atomic_load(&h->d->draining)
                                        ? "rtxd is shutting down"
                                        : "rtxd is not ready: a model loaded at start is not "
                                          "READY (see POST /v2/repository/index)");
    } else if (r.n == 3 && seg_is(&r, 1, "models") && seg_is(&r, 2, "stats")) {
        if (rtx__http_method_is(req, "GET")) get_model_stats(h, req, NULL, 0);
    } else if (r.n >= 3 && seg_is(&r, 1, "models")) {
        route_model(h, req, &r);
    } else if (r.n == 3 && seg_is(&r, 1, "repository") && seg_is(&r, 2, "index")) {
        if (rtx__http_method_is(req, "POST")) post_repository_index(h, req);
    } else if (r.n == 5 && seg_is(&r, 1, "repository") && seg_is(&r, 2, "models") &&
               (seg_is(&r, 4, "load") || seg_is(&r, 4, "unload"))) {
        if (rtx__http_method_is(req, "POST")) post_repository_model(h, req, r.seg[3], seg_is(&r, 4, "load"));
    } else if (seg_is(&r, 1, "systemsharedmemory")) {
        route_shm(h, req, &r);
    } else if (seg_is(&r, 1, "cudasharedmemory")) {
        rtx__http_respond_error(req, 400,
                                "CUDA shared memory is not supported by rtxd; register a "
                                "system shared-memory region (/v2/systemsharedmemory) instead");
    } else {
        not_found(req);
    }
    return 0;
}
