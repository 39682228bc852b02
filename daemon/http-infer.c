/*
 * http-infer.c - the KServe v2 REST inference codec (daemon/http.h): request bodies in JSON
 * or JSON plus binary tensor data (Inference-Header-Content-Length) to tensors, and results
 * back to bodies in the same forms, with the system shared-memory parameters.
 *
 * DESIGN
 * Decoding copies every input out of the body into a tensor of its own (the body belongs to
 * the HTTP request, which may be freed when its client goes away while the core still holds
 * the inputs). Inputs named in a shared-memory region are wrapped where they lie when the
 * address is aligned (the tensor holds the region's reference and releases it with the last
 * view), else copied. Output regions are mapped while decoding, so an unknown region or a
 * window past its end fails the request before it is queued; the result is written into them
 * when it is rendered, on the worker thread that completed the request. JSON numbers become
 * the input's datatype with a range check for integers; FP32/FP16/BF16 outputs are written
 * with 9 significant digits (enough to read every FP32 value back exactly), and a non-finite
 * value, which JSON cannot hold, as null.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http.h"

#define MAX_DATA_DEPTH 16 /* nesting of "data" arrays accepted */
#define SHM_ALIGN 64      /* bytes: shm inputs at this alignment are used in place */

int rtx__http_status_from_err(int code) {
    switch (code) {
    case 0: return 200;
    case RTX_EINVAL:
    case RTX_EFORMAT:
    case RTX_ELIMIT:
    case RTX_EUNSUPPORTED:
    case RTX_EGRAPH: return 400;
    case RTX_ENOTFOUND: return 404;
    case RTX_EOVERLOAD: return 429; /* admission control: Retry-After from "retry after N ms" */
    case RTX_ENOMEM: return 429;    /* a device budget share refused the memory: retry later */
    case RTX_EUNAVAILABLE:
    case RTX_EEXPIRED:
    case RTX_ECANCELED: return 503;
    default: return 500;
    }
}

/* ------------------------------------------------------------------------------------------
 * Errors as JSON
 * ---------------------------------------------------------------------------------------- */

char *rtx__http_error_json(const char *msg, size_t *len) {
    size_t n = strlen(msg);
    char *out = rtx_malloc(n * 6 + 16);
    if (!out) return NULL;
    size_t k = 0;
    memcpy(out, "{\"error\":\"", 10);
    k = 10;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)msg[i];
        if (ch == '"' || ch == '\\') {
            out[k++] = '\\';
            out[k++] = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) { /* also non-ASCII: the message stays ASCII */
            k += (size_t)sprintf(out + k, "\\u%04x", ch);
        } else {
            out[k++] = (char)ch;
        }
    }
    memcpy(out + k, "\"}", 3);
    k += 2;
    if (len) *len = k;
    return out;
}

/* ------------------------------------------------------------------------------------------
 * Decoding
 * ---------------------------------------------------------------------------------------- */

void rtx__http_infer_free(struct rtx_http_infer *q) {
    if (!q) return;
    for (int i = 0; i < q->n_inputs; i++) {
        rtx_free((char *)q->inputs[i].name);
        rtx_tensor_unref(q->inputs[i].tensor);
    }
    rtx_free(q->inputs);
    for (int i = 0; q->bytes && i < q->n_inputs; i++)
        rtx__http_bytes_free(&q->bytes[i]);
    rtx_free(q->bytes);
    for (int i = 0; i < q->n_outputs; i++) {
        rtx_free(q->outputs[i].name);
        rtx_free(q->outputs[i].shm_region);
        rtx_shm_ref_release(q->outputs[i].shm_ref);
    }
    rtx_free(q->outputs);
    rtx_free(q->output_names);
    rtx_free(q->id);
    rtx_free(q->lane);
    json_decref(q->params);
    rtx_free(q);
}

/* An optional integer parameter: 0 when absent (*have false), RTX_EINVAL when not an
 * integer or negative. */
static int param_uint(json_t *params, const char *key, const char *what, uint64_t *out,
                      bool *have, struct rtx_err *err) {
    *out = 0;
    if (have) *have = false;
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return rtx_err_set(err, RTX_EINVAL, "%s: parameter %s must be a non-negative integer",
                           what, key);
    *out = (uint64_t)json_integer_value(v);
    if (have) *have = true;
    return 0;
}

/* An optional string parameter (NULL when absent). */
static int param_str(json_t *params, const char *key, const char *what, const char **out,
                     struct rtx_err *err) {
    *out = NULL;
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v) return 0;
    if (!json_is_string(v))
        return rtx_err_set(err, RTX_EINVAL, "%s: parameter %s must be a string", what, key);
    *out = json_string_value(v);
    return 0;
}

/* An optional boolean parameter: -1 when absent. */
static int param_bool(json_t *params, const char *key, const char *what, int *out,
                      struct rtx_err *err) {
    *out = -1;
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v) return 0;
    if (!json_is_boolean(v))
        return rtx_err_set(err, RTX_EINVAL, "%s: parameter %s must be true or false", what, key);
    *out = json_is_true(v) ? 1 : 0;
    return 0;
}

static int get_params(json_t *obj, const char *what, json_t **out, struct rtx_err *err) {
    *out = json_object_get(obj, "parameters");
    if (*out && !json_is_object(*out))
        return rtx_err_set(err, RTX_EINVAL, "%s: \"parameters\" must be an object", what);
    return 0;
}

/* Counts the scalars of a (nested) "data" array. */
static int data_count(json_t *v, int depth, int64_t *n, const char *name, struct rtx_err *err) {
    if (!json_is_array(v)) {
        (*n)++;
        return 0;
    }
    if (depth > MAX_DATA_DEPTH)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': \"data\" nested deeper than %d", name,
                           MAX_DATA_DEPTH);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        int rc = data_count(e, depth + 1, n, name, err);
        if (rc) return rc;
    }
    return 0;
}

/* Stores one JSON scalar as element *i of dst. */
static int data_put(json_t *v, enum rtx_dtype dt, void *dst, int64_t i, const char *name,
                    struct rtx_err *err) {
    static const struct {
        int64_t lo, hi;
    } range[RTX_DTYPE_COUNT] = {
        [RTX_I8] = {INT8_MIN, INT8_MAX},
        [RTX_I32] = {INT32_MIN, INT32_MAX},
        [RTX_I64] = {INT64_MIN, INT64_MAX},
        [RTX_U8] = {0, UINT8_MAX},
    };
    switch (dt) {
    case RTX_F32:
    case RTX_F16:
    case RTX_BF16: {
        if (!json_is_number(v))
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': data element %" PRId64 " is not a number", name, i);
        float f = (float)json_number_value(v);
        if (dt == RTX_F32)
            ((float *)dst)[i] = f;
        else if (dt == RTX_F16)
            ((uint16_t *)dst)[i] = rtx_f32_to_f16(f);
        else
            ((uint16_t *)dst)[i] = rtx_f32_to_bf16(f);
        return 0;
    }
    case RTX_BOOL:
        if (!json_is_boolean(v))
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': data element %" PRId64 " is not true or false", name,
                               i);
        ((uint8_t *)dst)[i] = json_is_true(v) ? 1 : 0;
        return 0;
    case RTX_I8:
    case RTX_I32:
    case RTX_I64:
    case RTX_U8: {
        if (!json_is_integer(v))
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': data element %" PRId64 " is not an integer", name,
                               i);
        json_int_t x = json_integer_value(v);
        if (x < range[dt].lo || x > range[dt].hi)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': data element %" PRId64 " (%lld) is out of range for "
                               "%s",
                               name, i, (long long)x, rtx_kserve_dtype_name(dt));
        if (dt == RTX_I8)
            ((int8_t *)dst)[i] = (int8_t)x;
        else if (dt == RTX_I32)
            ((int32_t *)dst)[i] = (int32_t)x;
        else if (dt == RTX_I64)
            ((int64_t *)dst)[i] = (int64_t)x;
        else
            ((uint8_t *)dst)[i] = (uint8_t)x;
        return 0;
    }
    default:
        return rtx_err_set(err, RTX_EUNSUPPORTED, "input '%s': datatype %s has no JSON form",
                           name, rtx_kserve_dtype_name(dt));
    }
}

static int data_fill(json_t *v, enum rtx_dtype dt, void *dst, int64_t *i, const char *name,
                     struct rtx_err *err) {
    if (!json_is_array(v)) return data_put(v, dt, dst, (*i)++, name, err);
    size_t k;
    json_t *e;
    json_array_foreach(v, k, e) {
        int rc = data_fill(e, dt, dst, i, name, err);
        if (rc) return rc;
    }
    return 0;
}

/* A region the request names but the registry lacks is a bad request (400, as in Triton),
 * not an unknown route. */
static int shm_error(struct rtx_err *err, const char *what) {
    if (err->code == RTX_ENOTFOUND) err->code = RTX_EINVAL;
    return rtx_err_prefix(err, "%s", what);
}

static void shm_release(void *ctx, void *data) {
    (void)data;
    rtx_shm_ref_release(ctx);
}

/* "[2,3]" */
static const char *dims_str(int ndim, const int64_t *dims, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", dims[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* Decodes inputs[idx] (a BYTES one into *bout); *bin_at is the next unread byte of the
 * binary part. */
static int parse_input(json_t *in, int idx, const char *bin, size_t bin_len, size_t *bin_at,
                       bool have_binary, struct rtx_shm *shm, struct rtx_infer_input *out,
                       struct rtx_http_bytes *bout, struct rtx_err *err) {
    char what[160];
    if (!json_is_object(in))
        return rtx_err_set(err, RTX_EINVAL, "inputs[%d] must be an object", idx);
    json_t *jname = json_object_get(in, "name");
    if (!json_is_string(jname) || json_string_length(jname) == 0)
        return rtx_err_set(err, RTX_EINVAL, "inputs[%d]: \"name\" must be a non-empty string",
                           idx);
    const char *name = json_string_value(jname);
    snprintf(what, sizeof what, "input '%s'", name);
    out->name = rtx_strdup(name);
    if (!out->name) return rtx_err_set(err, RTX_ENOMEM, "out of memory");

    json_t *jdt = json_object_get(in, "datatype");
    if (!json_is_string(jdt))
        return rtx_err_set(err, RTX_EINVAL, "%s: \"datatype\" must be a string", what);
    enum rtx_dtype dt = RTX_U8; /* BYTES: elements counted as bytes until they are split */
    bool is_bytes = strcmp(json_string_value(jdt), "BYTES") == 0;
    int rc = is_bytes ? 0 : rtx_kserve_dtype_from_name(json_string_value(jdt), &dt, err);
    if (rc) return rtx_err_prefix(err, "%s", what);

    json_t *jshape = json_object_get(in, "shape");
    if (!json_is_array(jshape))
        return rtx_err_set(err, RTX_EINVAL, "%s: \"shape\" must be an array of integers", what);
    int ndim = (int)json_array_size(jshape);
    if (ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "%s: shape has %d dimensions; at most %d", what, ndim,
                           RTX_MAX_DIMS);
    int64_t dims[RTX_MAX_DIMS];
    int64_t numel = 1;
    uint64_t bytes = 0;
    bool overflow = false;
    for (int d = 0; d < ndim; d++) {
        json_t *e = json_array_get(jshape, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: shape[%d] must be a non-negative integer", what, d);
        dims[d] = json_integer_value(e);
        overflow |= __builtin_mul_overflow(numel, dims[d], &numel);
    }
    overflow |= __builtin_mul_overflow((uint64_t)numel, (uint64_t)rtx_dtype_size(dt), &bytes);
    if (overflow || bytes > (uint64_t)INT64_MAX / 2)
        return rtx_err_set(err, RTX_EINVAL, "%s: shape is too large", what);

    json_t *params;
    if ((rc = get_params(in, what, &params, err))) return rc;
    uint64_t bin_size = 0, shm_off = 0, shm_size = 0;
    bool has_bin = false, has_shm_size = false;
    const char *region = NULL;
    if ((rc = param_uint(params, "binary_data_size", what, &bin_size, &has_bin, err)) ||
        (rc = param_str(params, "shared_memory_region", what, &region, err)) ||
        (rc = param_uint(params, "shared_memory_offset", what, &shm_off, NULL, err)) ||
        (rc = param_uint(params, "shared_memory_byte_size", what, &shm_size, &has_shm_size,
                         err)))
        return rc;
    json_t *data = json_object_get(in, "data");
    int sources = (data != NULL) + has_bin + (region != NULL);
    if (sources == 0)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s has no data: give \"data\", parameters.binary_data_size or "
                           "parameters.shared_memory_region",
                           what);
    if (sources > 1)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s: give only one of \"data\", binary_data_size and "
                           "shared_memory_region",
                           what);
    char shape_s[160];
    dims_str(ndim, dims, shape_s, sizeof shape_s);
    if (region && !shm)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: shared memory is not available on this server", what);
    if (region && !has_shm_size)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s: parameters.shared_memory_byte_size is required with "
                           "shared_memory_region",
                           what);
    if (is_bytes) {
        bout->ndim = ndim;
        memcpy(bout->dims, dims, sizeof dims[0] * (size_t)ndim);
        if (data) return rtx__http_bytes_json(bout, data, numel, name, err);
        if (region) {
            void *addr = NULL;
            struct rtx_shm_ref *ref = NULL;
            if (rtx_shm_map(shm, region, shm_off, shm_size, &addr, &ref, err) != 0)
                return shm_error(err, what);
            rc = rtx__http_bytes_take(bout, addr, (size_t)shm_size, numel, name, err);
            rtx_shm_ref_release(ref);
            return rc;
        }
        if (!have_binary || bin_size > bin_len - *bin_at)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: binary_data_size %" PRIu64 " runs past the end of the body "
                               "(%zu bytes of binary data left)",
                               what, bin_size, have_binary ? bin_len - *bin_at : 0);
        rc = rtx__http_bytes_take(bout, bin + *bin_at, (size_t)bin_size, numel, name, err);
        *bin_at += (size_t)bin_size;
        return rc;
    }

    if (region) {
        if (shm_size != bytes)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: shared_memory_byte_size is %" PRIu64 " bytes, but shape %s "
                               "of %s needs %" PRIu64,
                               what, shm_size, shape_s, json_string_value(jdt), bytes);
        void *addr = NULL;
        struct rtx_shm_ref *ref = NULL;
        rc = rtx_shm_map(shm, region, shm_off, shm_size, &addr, &ref, err);
        if (rc) return shm_error(err, what);
        if (((uintptr_t)addr % SHM_ALIGN) == 0 && bytes > 0) {
            rc = rtx_tensor_wrap(dt, ndim, dims, addr, (size_t)bytes, shm_release, ref,
                                 &out->tensor, err);
            if (rc) rtx_shm_ref_release(ref);
            return rc;
        }
        rc = rtx_tensor_new(dt, ndim, dims, &out->tensor, err);
        if (rc == 0 && bytes) memcpy(rtx_tensor_data(out->tensor), addr, (size_t)bytes);
        rtx_shm_ref_release(ref);
        return rc;
    }
    if (has_bin) {
        if (!have_binary)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: binary_data_size given, but the request has no "
                               "Inference-Header-Content-Length header",
                               what);
        if (bin_size != bytes)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: binary_data_size is %" PRIu64 " bytes, but shape %s of %s "
                               "needs %" PRIu64,
                               what, bin_size, shape_s, json_string_value(jdt), bytes);
        if (bin_size > bin_len - *bin_at)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s: binary_data_size %" PRIu64 " runs past the end of the body "
                               "(%zu bytes of binary data left)",
                               what, bin_size, bin_len - *bin_at);
        rc = rtx_tensor_new(dt, ndim, dims, &out->tensor, err);
        if (rc) return rc;
        if (bytes) memcpy(rtx_tensor_data(out->tensor), bin + *bin_at, (size_t)bytes);
        *bin_at += (size_t)bytes;
        return 0;
    }
    int64_t count = 0;
    if ((rc = data_count(data, 0, &count, name, err))) return rc;
    if (count != numel)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s: \"data\" has %" PRId64 " elements, but shape %s has %" PRId64,
                           what, count, shape_s, numel);
    rc = rtx_tensor_new(dt, ndim, dims, &out->tensor, err);
    if (rc) return rc;
    int64_t at = 0;
    return data_fill(data, dt, rtx_tensor_data(out->tensor), &at, name, err);
}

static int parse_output(json_t *o, int idx, struct rtx_shm *shm, struct rtx_http_output *out,
                        struct rtx_err *err) {
    char what[160];
    if (!json_is_object(o))
        return rtx_err_set(err, RTX_EINVAL, "outputs[%d] must be an object", idx);
    json_t *jname = json_object_get(o, "name");
    if (!json_is_string(jname) || json_string_length(jname) == 0)
        return rtx_err_set(err, RTX_EINVAL, "outputs[%d]: \"name\" must be a non-empty string",
                           idx);
    snprintf(what, sizeof what, "output '%s'", json_string_value(jname));
    out->binary = -1;
    out->name = rtx_strdup(json_string_value(jname));
    if (!out->name) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    json_t *params;
    int rc;
    if ((rc = get_params(o, what, &params, err))) return rc;
    uint64_t classes = 0;
    bool has_size = false;
    const char *region = NULL;
    if ((rc = param_bool(params, "binary_data", what, &out->binary, err)) ||
        (rc = param_uint(params, "classification", what, &classes, NULL, err)) ||
        (rc = param_str(params, "shared_memory_region", what, &region, err)) ||
        (rc = param_uint(params, "shared_memory_offset", what, &out->shm_offset, NULL, err)) ||
        (rc = param_uint(params, "shared_memory_byte_size", what, &out->shm_byte_size,
                         &has_size, err)))
        return rc;
    if (classes > 0)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: the classification extension is not supported by rtxd", what);
    if (!region) return 0;
    if (!shm)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: shared memory is not available on this server", what);
    if (!has_size || out->shm_byte_size == 0)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s: parameters.shared_memory_byte_size (> 0) is required with "
                           "shared_memory_region",
                           what);
    out->shm_region = rtx_strdup(region);
    if (!out->shm_region) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    rc = rtx_shm_map(shm, region, out->shm_offset, out->shm_byte_size, &out->shm_addr,
                     &out->shm_ref, err);
    if (rc) return shm_error(err, what);
    return 0;
}

static int parse_root(json_t *root, const char *bin, size_t bin_len, bool have_binary,
                      struct rtx_shm *shm, struct rtx_http_infer *q, struct rtx_err *err) {
    if (!json_is_object(root))
        return rtx_err_set(err, RTX_EINVAL, "the inference request must be a JSON object");
    json_t *jid = json_object_get(root, "id");
    if (jid) {
        if (!json_is_string(jid))
            return rtx_err_set(err, RTX_EINVAL, "\"id\" must be a string");
        q->id = rtx_strdup(json_string_value(jid));
        if (!q->id) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    json_t *params;
    int rc;
    if ((rc = get_params(root, "request", &params, err))) return rc;
    q->params = json_incref(params);
    int bin_out = -1;
    uint64_t prio = 0, timeout = 0;
    if ((rc = param_bool(params, "binary_data_output", "request", &bin_out, err)) ||
        (rc = param_uint(params, "priority", "request", &prio, NULL, err)) ||
        (rc = param_uint(params, "timeout", "request", &timeout, NULL, err)))
        return rc;
    if (prio > INT32_MAX)
        return rtx_err_set(err, RTX_EINVAL, "request: parameter priority is too large");
    if (timeout > (uint64_t)INT64_MAX / 1000)
        return rtx_err_set(err, RTX_EINVAL, "request: parameter timeout is too large");
    q->binary_output = bin_out == 1;
    q->priority = (int)prio;
    json_t *lane = params ? json_object_get(params, "lane") : NULL;
    if (lane) {
        if (!json_is_string(lane) || !json_string_value(lane)[0])
            return rtx_err_set(err, RTX_EINVAL,
                               "request: parameter lane must be a lane's name (a string)");
        if (!(q->lane = rtx_strdup(json_string_value(lane))))
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    q->timeout_us = (int64_t)timeout;

    json_t *inputs = json_object_get(root, "inputs");
    if (!json_is_array(inputs) || json_array_size(inputs) == 0)
        return rtx_err_set(err, RTX_EINVAL, "\"inputs\" must be a non-empty array");
    size_t n_in = json_array_size(inputs);
    if (n_in > RTX_MODEL_MAX_IO)
        return rtx_err_set(err, RTX_EINVAL, "%zu inputs; a model has at most %d", n_in,
                           RTX_MODEL_MAX_IO);
    q->inputs = rtx_calloc(n_in, sizeof *q->inputs);
    q->bytes = rtx_calloc(n_in, sizeof *q->bytes);
    if (!q->inputs || !q->bytes) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    size_t bin_at = 0;
    for (size_t i = 0; i < n_in; i++) {
        q->n_inputs = (int)i + 1;
        rc = parse_input(json_array_get(inputs, i), (int)i, bin, bin_len, &bin_at, have_binary,
                         shm, &q->inputs[i], &q->bytes[i], err);
        if (rc) return rc;
    }
    if (bin_at != bin_len)
        return rtx_err_set(err, RTX_EINVAL,
                           "%zu bytes of binary data after the JSON header are not claimed by "
                           "any input's binary_data_size",
                           bin_len - bin_at);

    json_t *outputs = json_object_get(root, "outputs");
    if (!outputs) return 0;
    if (!json_is_array(outputs))
        return rtx_err_set(err, RTX_EINVAL, "\"outputs\" must be an array");
    size_t n_out = json_array_size(outputs);
    if (n_out == 0) return 0;
    if (n_out > RTX_MODEL_MAX_IO)
        return rtx_err_set(err, RTX_EINVAL, "%zu outputs requested; a model has at most %d",
                           n_out, RTX_MODEL_MAX_IO);
    q->outputs = rtx_calloc(n_out, sizeof *q->outputs);
    q->output_names = rtx_calloc(n_out, sizeof *q->output_names);
    if (!q->outputs || !q->output_names) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_out; i++) {
        q->n_outputs = (int)i + 1;
        rc = parse_output(json_array_get(outputs, i), (int)i, shm, &q->outputs[i], err);
        if (rc) return rc;
        for (size_t k = 0; k < i; k++)
            if (strcmp(q->outputs[k].name, q->outputs[i].name) == 0)
                return rtx_err_set(err, RTX_EINVAL, "output '%s' is requested twice",
                                   q->outputs[i].name);
        q->output_names[i] = q->outputs[i].name;
    }
    return 0;
}

int rtx__http_infer_parse(const char *body, size_t len, int64_t header_len, struct rtx_shm *shm,
                          struct rtx_http_infer **out, struct rtx_err *err) {
    *out = NULL;
    bool have_binary = header_len >= 0;
    size_t json_len = have_binary ? (size_t)header_len : len;
    if (have_binary && (uint64_t)header_len > len)
        return rtx_err_set(err, RTX_EINVAL,
                           "Inference-Header-Content-Length %" PRId64 " is larger than the "
                           "body (%zu bytes)",
                           header_len, len);
    if (json_len == 0)
        return rtx_err_set(err, RTX_EINVAL, "the inference request has no JSON body");
    json_error_t jerr;
    json_t *root = json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return rtx_err_set(err, RTX_EFORMAT,
                           "malformed JSON in the inference request: %s (line %d, column %d)",
                           jerr.text, jerr.line, jerr.column);
    struct rtx_http_infer *q = rtx_calloc(1, sizeof *q);
    if (!q) {
        json_decref(root);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    int rc = parse_root(root, body + json_len, len - json_len, have_binary, shm, q, err);
    json_decref(root);
    if (rc) {
        rtx__http_infer_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------------------------- */

static json_t *data_json(const struct rtx_tensor *t) {
    json_t *arr = json_array();
    if (!arr) return NULL;
    int64_t n = rtx_tensor_numel(t);
    const void *p = rtx_tensor_data(t);
    for (int64_t i = 0; i < n; i++) {
        json_t *v = NULL;
        double f = 0;
        bool is_float = true;
        switch (t->dtype) {
        case RTX_F32: f = ((const float *)p)[i]; break;
        case RTX_F16: f = rtx_f16_to_f32(((const uint16_t *)p)[i]); break;
        case RTX_BF16: f = rtx_bf16_to_f32(((const uint16_t *)p)[i]); break;
        default: is_float = false; break;
        }
        if (is_float) {
            v = isfinite(f) ? json_real(f) : json_null();
        } else {
            switch (t->dtype) {
            case RTX_I8: v = json_integer(((const int8_t *)p)[i]); break;
            case RTX_I32: v = json_integer(((const int32_t *)p)[i]); break;
            case RTX_I64: v = json_integer(((const int64_t *)p)[i]); break;
            case RTX_U8: v = json_integer(((const uint8_t *)p)[i]); break;
            case RTX_BOOL: v = json_boolean(((const uint8_t *)p)[i] != 0); break;
            default: break;
            }
        }
        if (!v || json_array_append_new(arr, v) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static const struct rtx_http_output *find_output(const struct rtx_http_infer *q,
                                                 const char *name) {
    for (int i = 0; i < q->n_outputs; i++)
        if (strcmp(q->outputs[i].name, name) == 0) return &q->outputs[i];
    return NULL;
}

/* Fills the "outputs" array; *bin_total gets the bytes of the binary outputs. */
static int render_outputs(const struct rtx_http_infer *q, const struct rtx_infer_result *res,
                          json_t *arr, bool *binary, size_t *bin_total, struct rtx_err *err) {
    for (int i = 0; i < res->n_outputs; i++) {
        const struct rtx_tensor *t = res->outputs[i];
        const char *name = res->output_names[i];
        const struct rtx_http_output *opt = find_output(q, name);
        size_t bytes = rtx_tensor_nbytes(t);
        json_t *o = json_object();
        json_t *shape = json_array();
        if (!o || !shape || json_array_append_new(arr, o) != 0) {
            json_decref(o);
            json_decref(shape);
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        }
        for (int d = 0; d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer(t->dims[d])) != 0) {
                json_decref(shape);
                return rtx_err_set(err, RTX_ENOMEM, "out of memory");
            }
        if (json_object_set_new(o, "name", json_string(name)) ||
            json_object_set_new(o, "datatype", json_string(rtx_kserve_dtype_name(t->dtype))) ||
            json_object_set_new(o, "shape", shape))
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
        if (opt && opt->shm_region) {
            if (bytes > opt->shm_byte_size)
                return rtx_err_set(err, RTX_EINVAL,
                                   "output '%s': %zu bytes do not fit shared-memory region '%s' "
                                   "(shared_memory_byte_size %" PRIu64 ")",
                                   name, bytes, opt->shm_region, opt->shm_byte_size);
            /* name, datatype and shape only, as Triton answers: its C++ client reads
             * binary_data_size from any output that has parameters */
            if (bytes) memcpy(opt->shm_addr, rtx_tensor_data(t), bytes);
            continue;
        }
        bool bin = opt && opt->binary >= 0 ? opt->binary == 1 : q->binary_output;
        binary[i] = bin;
        if (bin) {
            json_t *p = json_object();
            if (!p || json_object_set_new(o, "parameters", p) ||
                json_object_set_new(p, "binary_data_size", json_integer((int64_t)bytes)))
                return rtx_err_set(err, RTX_ENOMEM, "out of memory");
            *bin_total += bytes;
            continue;
        }
        json_t *data = data_json(t);
        if (!data || json_object_set_new(o, "data", data))
            return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    return 0;
}

int rtx__http_infer_render(const struct rtx_http_infer *q, const struct rtx_infer_result *res,
                           struct rtx_http_body *out, struct rtx_err *err) {
    memset(out, 0, sizeof *out);
    out->header_len = -1;
    bool binary[RTX_MODEL_MAX_IO] = {0};
    if (res->n_outputs > RTX_MODEL_MAX_IO)
        return rtx_err_set(err, RTX_EINTERNAL, "%d outputs; at most %d", res->n_outputs,
                           RTX_MODEL_MAX_IO);
    char version[32];
    snprintf(version, sizeof version, "%" PRId64, res->model ? res->model->version : 0);
    json_t *root = json_object();
    json_t *arr = json_array();
    const char *id = res->id ? res->id : q->id;
    if (!root || !arr ||
        json_object_set_new(root, "model_name", json_string(res->model ? res->model->name : "")) ||
        json_object_set_new(root, "model_version", json_string(version)) ||
        (id && json_object_set_new(root, "id", json_string(id))) ||
        json_object_set_new(root, "outputs", arr)) {
        json_decref(root);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    }
    size_t bin_total = 0;
    int rc = render_outputs(q, res, arr, binary, &bin_total, err);
    char *head = rc ? NULL : json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc) return rc;
    if (!head) return rtx_err_set(err, RTX_ENOMEM, "out of memory (the answer's JSON)");
    size_t hlen = strlen(head);
    out->data = rtx_malloc(hlen + bin_total + 1);
    if (!out->data) {
        free(head);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory (a %zu-byte answer)",
                           hlen + bin_total);
    }
    memcpy(out->data, head, hlen);
    free(head);
    size_t at = hlen;
    for (int i = 0; i < res->n_outputs; i++) {
        if (!binary[i]) continue;
        size_t bytes = rtx_tensor_nbytes(res->outputs[i]);
        if (bytes) memcpy(out->data + at, rtx_tensor_data(res->outputs[i]), bytes);
        at += bytes;
    }
    out->data[at] = '\0';
    out->len = at;
    out->header_len = -1;
    for (int i = 0; i < res->n_outputs; i++)
        if (binary[i]) out->header_len = (int64_t)hlen;
    return 0;
}
