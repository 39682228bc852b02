/*
 * http-infer-bytes.c - KServe BYTES tensors in the HTTP codec (daemon/http.h): BYTES inputs
 * from JSON strings or their binary form, and the final answer of a generation (text_output)
 * rendered as http-infer.c renders numeric results.
 *
 * DESIGN
 * Every BYTES input is kept in its binary form (4-byte little-endian length, then the bytes,
 * per element) in a buffer of its own, whatever form it came in, and split once by
 * rtx__kserve_bytes_split, so the length checks are the gRPC service's.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http.h"

void rtx__http_bytes_free(struct rtx_http_bytes *b) {
    if (!b) return;
    rtx_free(b->s);
    rtx_free(b->buf);
    b->s = NULL;
    b->buf = NULL;
    b->n = 0;
}

/* Splits b->buf (len bytes, taken) into numel elements. */
static int bytes_split(struct rtx_http_bytes *b, size_t len, int64_t numel, const char *name,
                       struct rtx_err *err) {
    b->n = numel;
    b->s = rtx_calloc(numel > 0 ? (size_t)numel : 1, sizeof *b->s);
    if (!b->s) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    return rtx__kserve_bytes_split(b->buf, len, numel, name, b->s, err);
}

int rtx__http_bytes_take(struct rtx_http_bytes *b, const void *data, size_t len, int64_t numel,
                         const char *name, struct rtx_err *err) {
    if (numel < 0 || (uint64_t)numel > len / 4)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': %zu bytes cannot hold the %" PRId64 " BYTES elements of "
                           "its shape (each takes a 4-byte length first)",
                           name, len, numel);
    b->buf = rtx_malloc(len ? len : 1);
    if (!b->buf) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    if (len) memcpy(b->buf, data, len);
    return bytes_split(b, len, numel, name, err);
}

/* Adds the strings of a (nested) "data" array to the binary form at *at (sizing when out is
 * NULL); *n counts them. */
static int json_strings(json_t *v, int depth, char *out, size_t *at, int64_t *n, const char *name,
                        struct rtx_err *err) {
    if (json_is_array(v)) {
        if (depth > 16)
            return rtx_err_set(err, RTX_EINVAL, "input '%s': \"data\" nested deeper than 16",
                               name);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            int rc = json_strings(e, depth + 1, out, at, n, name, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (!json_is_string(v))
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': data element %" PRId64 " is not a string (BYTES)", name,
                           *n);
    size_t len = json_string_length(v);
    if (len > UINT32_MAX)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': data element %" PRId64 " is too long",
                           name, *n);
    if (out) {
        struct rtx_kserve_str s = {json_string_value(v), len};
        rtx__kserve_bytes_write(&s, 1, out + *at);
    }
    *at += 4 + len;
    (*n)++;
    return 0;
}

int rtx__http_bytes_json(struct rtx_http_bytes *b, json_t *data, int64_t numel, const char *name,
                         struct rtx_err *err) {
    size_t len = 0;
    int64_t n = 0;
    int rc = json_strings(data, 0, NULL, &len, &n, name, err);
    if (rc) return rc;
    if (n != numel)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': \"data\" has %" PRId64 " elements, but its shape holds "
                           "%" PRId64,
                           name, n, numel);
    b->buf = rtx_malloc(len ? len : 1);
    if (!b->buf) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    len = 0;
    n = 0;
    json_strings(data, 0, b->buf, &len, &n, name, err);
    return bytes_split(b, len, numel, name, err);
}

/* ------------------------------------------------------------------------------------------
 * Rendering a generation's answer
 * ---------------------------------------------------------------------------------------- */

static int oom(struct rtx_err *err) {
    return rtx_err_set(err, RTX_ENOMEM, "out of memory rendering the answer");
}

/* Whether the output is asked for in binary. */
static bool binary_for(const struct rtx_http_infer *q, const char *name) {
    for (int i = 0; i < q->n_outputs; i++)
        if (strcmp(q->outputs[i].name, name) == 0 && q->outputs[i].binary >= 0)
            return q->outputs[i].binary == 1;
    return q->binary_output;
}

static int gen_json(const struct rtx_http_infer *q, const struct rtx_model_info *model,
                    const struct rtx_kserve_gen_output *o, bool binary, size_t bin_len,
                    json_t **out, struct rtx_err *err) {
    char version[32];
    snprintf(version, sizeof version, "%" PRId64, model->version);
    /* the *_set_new and *_append_new calls take their value even when they fail (or get
     * NULL), so each child is made right before it is attached */
    json_t *root = json_object();
    *out = root;
    json_t *outs, *params, *t;
    if (!root || json_object_set_new(root, "outputs", outs = json_array()) ||
        json_object_set_new(root, "parameters", params = json_object()) ||
        json_array_append_new(outs, t = json_object()) ||
        json_object_set_new(t, "shape", json_pack("[I]", (json_int_t)o->n)))
        return oom(err);
    if (json_object_set_new(root, "model_name", json_string(model->name)) ||
        json_object_set_new(root, "model_version", json_string(version)) ||
        (q->id && json_object_set_new(root, "id", json_string(q->id))) ||
        json_object_set_new(t, "name", json_string("text_output")) ||
        json_object_set_new(t, "datatype", json_string("BYTES")))
        return oom(err);
    if (o->finish_reason &&
        json_object_set_new(params, "finish_reason", json_string(o->finish_reason)))
        return oom(err);
    if (o->usage &&
        (json_object_set_new(params, "prompt_tokens", json_integer(o->usage->prompt_tokens)) ||
         json_object_set_new(params, "completion_tokens",
                             json_integer(o->usage->completion_tokens)) ||
         json_object_set_new(params, "cached_tokens", json_integer(o->usage->cached_tokens))))
        return oom(err);
    if (binary) {
        json_t *p = json_object();
        if (!p || json_object_set_new(t, "parameters", p) ||
            json_object_set_new(p, "binary_data_size", json_integer((json_int_t)bin_len)))
            return oom(err);
        return 0;
    }
    json_t *data = json_array();
    if (!data || json_object_set_new(t, "data", data)) return oom(err);
    for (int i = 0; i < o->n; i++) {
        json_t *s = json_stringn(o->text[i].data, o->text[i].len);
        if (!s)
            return rtx_err_set(err, RTX_EINVAL,
                               "text_output[%d] is not valid UTF-8, which JSON cannot hold: ask "
                               "for it as binary data",
                               i);
        if (json_array_append_new(data, s)) return oom(err);
    }
    return 0;
}

int rtx__http_infer_render_text(const struct rtx_http_infer *q, const struct rtx_model_info *model,
                                const struct rtx_kserve_gen_output *o, struct rtx_http_body *out,
                                struct rtx_err *err) {
    memset(out, 0, sizeof *out);
    out->header_len = -1;
    bool binary = binary_for(q, "text_output");
    size_t bin_len = binary ? rtx__kserve_bytes_size(o->text, o->n) : 0;
    json_t *root = NULL;
    int rc = gen_json(q, model, o, binary, bin_len, &root, err);
    char *head = rc ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (rc) return rc;
    if (!head) return oom(err);
    size_t hlen = strlen(head);
    out->data = rtx_malloc(hlen + bin_len + 1);
    if (!out->data) {
        free(head);
        return oom(err);
    }
    memcpy(out->data, head, hlen);
    free(head);
    if (binary) rtx__kserve_bytes_write(o->text, o->n, out->data + hlen);
    out->len = hlen + bin_len;
    out->data[out->len] = '\0';
    out->header_len = binary ? (int64_t)hlen : -1;
    return 0;
}
