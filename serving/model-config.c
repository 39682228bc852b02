/*
 * model-config.c - config.json, a model's configuration in Triton's JSON model-config form
 * (the same JSON that GET /v2/models/{m}/config answers on Triton), and its KServe/Triton
 * datatype names.
 *
 * DESIGN
 * Parsing walks the jansson tree field by field with small typed getters that know the path
 * of the field they read ("input[1].dims[0]"), so every error names the file, the field and
 * what was expected. Unknown fields are ignored (Triton has many rtxd does not use); a known
 * field of the wrong type is an error. Integers may also be given as decimal strings, since
 * protobuf's JSON mapping writes 64-bit integers that way. The dump goes the other way from
 * the parsed struct, so what GET .../config shows is what rtxd actually uses (defaults
 * filled in), not the file's text.
 */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serving/serving-impl.h"

/* ------------------------------------------------------------------------------------------
 * Datatypes
 * ---------------------------------------------------------------------------------------- */

static const char *const kserve_names[RTX_DTYPE_COUNT] = {
    [RTX_F32] = "FP32",  [RTX_F16] = "FP16", [RTX_BF16] = "BF16", [RTX_I8] = "INT8",
    [RTX_I32] = "INT32", [RTX_I64] = "INT64", [RTX_U8] = "UINT8", [RTX_BOOL] = "BOOL",
};

/* KServe datatypes without an rtxd dtype. */
static const char *const kserve_unsupported[] = {"FP64", "BYTES", "INT16", "UINT16", "UINT32",
                                                 "UINT64", NULL};

const char *rtx_kserve_dtype_name(enum rtx_dtype dt) {
    return (unsigned)dt < RTX_DTYPE_COUNT ? kserve_names[dt] : "?";
}

int rtx_kserve_dtype_from_name(const char *name, enum rtx_dtype *out, struct rtx_err *err) {
    for (int i = 0; i < RTX_DTYPE_COUNT; i++)
        if (name && strcmp(kserve_names[i], name) == 0) {
            *out = (enum rtx_dtype)i;
            return 0;
        }
    for (int i = 0; name && kserve_unsupported[i]; i++)
        if (strcmp(kserve_unsupported[i], name) == 0)
            return rtx_err_set(err, RTX_EUNSUPPORTED, "datatype %s is not supported by rtxd",
                               name);
    return rtx_err_set(err, RTX_EINVAL, "unknown datatype \"%.64s\"", name ? name : "");
}

const char *rtx__config_dtype_name(enum rtx_dtype dt) {
    static const char *const names[RTX_DTYPE_COUNT] = {
        [RTX_F32] = "TYPE_FP32",   [RTX_F16] = "TYPE_FP16", [RTX_BF16] = "TYPE_BF16",
        [RTX_I8] = "TYPE_INT8",    [RTX_I32] = "TYPE_INT32", [RTX_I64] = "TYPE_INT64",
        [RTX_U8] = "TYPE_UINT8",   [RTX_BOOL] = "TYPE_BOOL",
    };
    return (unsigned)dt < RTX_DTYPE_COUNT ? names[dt] : "TYPE_INVALID";
}

int rtx__config_dtype_from_name(const char *name, enum rtx_dtype *out, struct rtx_err *err) {
    for (int i = 0; i < RTX_DTYPE_COUNT; i++)
        if (strcmp(rtx__config_dtype_name((enum rtx_dtype)i), name) == 0) {
            *out = (enum rtx_dtype)i;
            return 0;
        }
    static const char *const unsupported[] = {"TYPE_FP64", "TYPE_STRING", "TYPE_INT16",
                                              "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (strcmp(unsupported[i], name) == 0)
            return rtx_err_set(err, RTX_EUNSUPPORTED, "data_type %s is not supported by rtxd",
                               name);
    return rtx_err_set(err, RTX_EFORMAT, "unknown data_type \"%.64s\"", name);
}

/* ------------------------------------------------------------------------------------------
 * Typed getters; each error names the file and the field
 * ---------------------------------------------------------------------------------------- */

struct ctx {
    const char *what;
    struct rtx_err *err;
};

static int type_error(struct ctx *c, const char *field, const char *expected) {
    return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: expected %s", c->what, field, expected);
}

/* An integer (or a decimal string, as protobuf's JSON writes int64) in [lo, hi]. */
static int get_int(struct ctx *c, json_t *v, const char *field, int64_t lo, int64_t hi,
                   int64_t *out) {
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long y = strtoll(s, &end, 10);
        if (!*s || *end || errno || isspace((unsigned char)*s))
            return type_error(c, field, "an integer");
        x = y;
    } else {
        return type_error(c, field, "an integer");
    }
    if (x < lo || x > hi)
        return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %lld is out of range [%lld, %lld]",
                           c->what, field, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

/* Copies a string field into out (cap bytes); absent leaves out as it is. */
static int get_string(struct ctx *c, json_t *obj, const char *key, const char *field, char *out,
                      size_t cap, bool required) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: missing", c->what, field);
        return 0;
    }
    if (!json_is_string(v)) return type_error(c, field, "a string");
    const char *s = json_string_value(v);
    if (strlen(s) >= cap)
        return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: longer than %zu bytes", c->what, field,
                           cap - 1);
    snprintf(out, cap, "%s", s);
    return 0;
}

static int get_bool(struct ctx *c, json_t *obj, const char *key, const char *field, bool *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return type_error(c, field, "true or false");
    *out = json_is_true(v);
    return 0;
}

static int get_object(struct ctx *c, json_t *obj, const char *key, const char *field,
                      json_t **out) {
    *out = json_object_get(obj, key);
    if (*out && !json_is_object(*out)) return type_error(c, field, "an object");
    return 0;
}

static int get_array(struct ctx *c, json_t *obj, const char *key, const char *field,
                     json_t **out) {
    *out = json_object_get(obj, key);
    if (*out && !json_is_array(*out)) return type_error(c, field, "an array");
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Sections
 * ---------------------------------------------------------------------------------------- */

int rtx__config_reshape_check(const struct rtx__model_config *cfg, const char *what,
                              const char *field, const struct rtx_model_io *io,
                              const struct rtx__reshape *rs, struct rtx_err *err) {
    if (!rtx__model_config_onnx(cfg))
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s: only ONNX models (platform "
                                                  "\"onnxruntime_onnx\") take a reshape",
                           what, field);
    bool same = rs->ndim == io->ndim &&
                memcmp(rs->dims, io->dims, sizeof io->dims[0] * (size_t)io->ndim) == 0;
    bool fixed = true;
    for (int d = 0; d < io->ndim; d++)
        fixed &= io->dims[d] > 0;
    for (int d = 0; d < rs->ndim; d++)
        fixed &= rs->dims[d] > 0;
    if (same || (fixed && rtx_shape_numel(rs->ndim, rs->dims) ==
                              rtx_shape_numel(io->ndim, io->dims)))
        return 0;
    return rtx_err_set(err, fixed ? RTX_EFORMAT : RTX_EUNSUPPORTED, "%s: %s: %s", what, field,
                       fixed ? "a different number of elements than dims"
                             : "a reshape of -1 dimensions that differs from dims is not "
                               "supported (reshapes of fixed sizes are)");
}

/* An input's or output's "reshape": {"shape": [...]} (Triton's ModelTensorReshape). */
static int parse_reshape(struct ctx *c, json_t *o, const char *sect, size_t i,
                         const struct rtx__model_config *cfg, const struct rtx_model_io *io,
                         struct rtx__reshape *rs) {
    char f[96];
    json_t *r, *shape;
    int rc;
    snprintf(f, sizeof f, "%s[%zu].reshape", sect, i);
    if ((rc = get_object(c, o, "reshape", f, &r)) || !r) return rc;
    snprintf(f, sizeof f, "%s[%zu].reshape.shape", sect, i);
    if ((rc = get_array(c, r, "shape", f, &shape))) return rc;
    size_t n = shape ? json_array_size(shape) : 0;
    if (n > RTX_MAX_DIMS - 1)
        return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %zu dimensions (at most %d)", c->what,
                           f, n, RTX_MAX_DIMS - 1);
    for (size_t d = 0; d < n; d++) {
        if ((rc = get_int(c, json_array_get(shape, d), f, -1, INT32_MAX, &rs->dims[d])))
            return rc;
        if (rs->dims[d] == 0)
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: 0 (use a size or -1)", c->what, f);
    }
    rs->ndim = (int)n;
    rs->set = true;
    return rtx__config_reshape_check(cfg, c->what, f, io, rs, c->err);
}

static int parse_io(struct ctx *c, json_t *arr, const char *sect, bool is_input,
                    const struct rtx__model_config *cfg, struct rtx_model_io *ios,
                    struct rtx__reshape *rs, int *n) {
    char f[96];
    if (!arr) return 0;
    if (json_array_size(arr) > RTX_MODEL_MAX_IO)
        return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %zu entries (at most %d)", c->what, sect,
                           json_array_size(arr), RTX_MODEL_MAX_IO);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        struct rtx_model_io *io = &ios[i];
        memset(io, 0, sizeof *io);
        snprintf(f, sizeof f, "%s[%zu]", sect, i);
        if (!json_is_object(o)) return type_error(c, f, "an object");
        int rc;
        snprintf(f, sizeof f, "%s[%zu].name", sect, i);
        if ((rc = get_string(c, o, "name", f, io->name, sizeof io->name, true))) return rc;
        if (!io->name[0])
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: empty", c->what, f);
        for (size_t k = 0; k < i; k++)
            if (strcmp(ios[k].name, io->name) == 0)
                return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s '%s' is listed twice", c->what,
                                   sect, io->name);
        char dt[32] = "";
        snprintf(f, sizeof f, "%s[%zu].data_type", sect, i);
        if ((rc = get_string(c, o, "data_type", f, dt, sizeof dt, true))) return rc;
        if ((rc = rtx__config_dtype_from_name(dt, &io->dtype, c->err)))
            return rtx_err_prefix(c->err, "%s: %s '%s'", c->what, sect, io->name);
        json_t *dims;
        snprintf(f, sizeof f, "%s[%zu].dims", sect, i);
        if ((rc = get_array(c, o, "dims", f, &dims))) return rc;
        if (!dims) return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: missing", c->what, f);
        if (json_array_size(dims) > RTX_MAX_DIMS - 1)
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %zu dimensions (at most %d)",
                               c->what, f, json_array_size(dims), RTX_MAX_DIMS - 1);
        io->ndim = (int)json_array_size(dims);
        for (int d = 0; d < io->ndim; d++) {
            snprintf(f, sizeof f, "%s[%zu].dims[%d]", sect, i, d);
            if ((rc = get_int(c, json_array_get(dims, (size_t)d), f, -1, INT32_MAX,
                              &io->dims[d])))
                return rc;
            if (io->dims[d] == 0)
                return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: 0 (use a size or -1)", c->what,
                                   f);
        }
        if (is_input) {
            snprintf(f, sizeof f, "%s[%zu].optional", sect, i);
            if ((rc = get_bool(c, o, "optional", f, &io->optional))) return rc;
        }
        if ((rc = parse_reshape(c, o, sect, i, cfg, io, &rs[i]))) return rc;
    }
    *n = (int)json_array_size(arr);
    return 0;
}

static int parse_batching(struct ctx *c, json_t *db, struct rtx_model_info *info) {
    int rc;
    if (!db) return 0;
    info->dynamic_batching = true;
    json_t *pref;
    if ((rc = get_array(c, db, "preferred_batch_size", "dynamic_batching.preferred_batch_size",
                        &pref)))
        return rc;
    if (pref && json_array_size(pref) > RTX_MODEL_MAX_PREFERRED)
        return rtx_err_set(c->err, RTX_EFORMAT,
                           "%s: dynamic_batching.preferred_batch_size: %zu sizes (at most %d)",
                           c->what, json_array_size(pref), RTX_MODEL_MAX_PREFERRED);
    for (size_t i = 0; pref && i < json_array_size(pref); i++) {
        char f[64];
        int64_t v;
        snprintf(f, sizeof f, "dynamic_batching.preferred_batch_size[%zu]", i);
        int64_t hi = info->max_batch_size > 0 ? info->max_batch_size : INT32_MAX;
        if ((rc = get_int(c, json_array_get(pref, i), f, 1, hi, &v))) return rc;
        for (int k = 0; k < info->n_preferred; k++)
            if (info->preferred_batch_sizes[k] == v)
                return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %lld is listed twice", c->what,
                                   f, (long long)v);
        info->preferred_batch_sizes[info->n_preferred++] = (int)v;
    }
    /* sorted ascending: the batcher looks sizes up */
    for (int i = 1; i < info->n_preferred; i++)
        for (int k = i; k > 0 && info->preferred_batch_sizes[k - 1] >
                                     info->preferred_batch_sizes[k]; k--) {
            int t = info->preferred_batch_sizes[k];
            info->preferred_batch_sizes[k] = info->preferred_batch_sizes[k - 1];
            info->preferred_batch_sizes[k - 1] = t;
        }
    json_t *d = json_object_get(db, "max_queue_delay_microseconds");
    if (d && (rc = get_int(c, d, "dynamic_batching.max_queue_delay_microseconds", 0,
                           (int64_t)3600 * 1000000, &info->max_queue_delay_us)))
        return rc;
    return 0;
}

static int parse_groups(struct ctx *c, json_t *arr, struct rtx__model_config *cfg) {
    int rc;
    if (!arr || json_array_size(arr) == 0) {
        cfg->n_groups = 1;
        cfg->groups[0] = (struct rtx__instance_group){.count = 1, .kind = RTX__KIND_AUTO};
        return 0;
    }
    if (json_array_size(arr) > RTX__MAX_GROUPS)
        return rtx_err_set(c->err, RTX_EFORMAT, "%s: instance_group: %zu groups (at most %d)",
                           c->what, json_array_size(arr), RTX__MAX_GROUPS);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        struct rtx__instance_group *g = &cfg->groups[i];
        char f[64];
        snprintf(f, sizeof f, "instance_group[%zu]", i);
        if (!json_is_object(o)) return type_error(c, f, "an object");
        g->count = 1;
        json_t *cnt = json_object_get(o, "count");
        int64_t v;
        snprintf(f, sizeof f, "instance_group[%zu].count", i);
        if (cnt) {
            if ((rc = get_int(c, cnt, f, 1, 64, &v))) return rc;
            g->count = (int)v;
        }
        char kind[32] = "KIND_AUTO";
        snprintf(f, sizeof f, "instance_group[%zu].kind", i);
        if ((rc = get_string(c, o, "kind", f, kind, sizeof kind, false))) return rc;
        if (strcmp(kind, "KIND_CPU") == 0)
            g->kind = RTX__KIND_CPU;
        else if (strcmp(kind, "KIND_GPU") == 0)
            g->kind = RTX__KIND_GPU;
        else if (strcmp(kind, "KIND_AUTO") == 0)
            g->kind = RTX__KIND_AUTO;
        else
            return rtx_err_set(c->err, RTX_EFORMAT,
                               "%s: %s: \"%s\" is not KIND_CPU, KIND_GPU or KIND_AUTO", c->what,
                               f, kind);
        json_t *gpus;
        snprintf(f, sizeof f, "instance_group[%zu].gpus", i);
        if ((rc = get_array(c, o, "gpus", f, &gpus))) return rc;
        if (gpus && json_array_size(gpus) > RTX__MAX_GROUP_GPUS)
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: more than %d devices", c->what, f,
                               RTX__MAX_GROUP_GPUS);
        for (size_t k = 0; gpus && k < json_array_size(gpus); k++) {
            snprintf(f, sizeof f, "instance_group[%zu].gpus[%zu]", i, k);
            if ((rc = get_int(c, json_array_get(gpus, k), f, 0, 1023, &v))) return rc;
            g->gpus[g->n_gpus++] = (int)v;
        }
        if (g->n_gpus && g->kind == RTX__KIND_CPU)
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: instance_group[%zu]: gpus with KIND_CPU",
                               c->what, i);
    }
    cfg->n_groups = (int)json_array_size(arr);
    return 0;
}

static int parse_policy(struct ctx *c, json_t *vp, struct rtx__model_config *cfg) {
    int rc;
    cfg->policy = RTX__POLICY_LATEST;
    cfg->latest_n = 1;
    if (!vp) return 0;
    json_t *latest, *all, *spec;
    if ((rc = get_object(c, vp, "latest", "version_policy.latest", &latest)) ||
        (rc = get_object(c, vp, "all", "version_policy.all", &all)) ||
        (rc = get_object(c, vp, "specific", "version_policy.specific", &spec)))
        return rc;
    if (!!latest + !!all + !!spec != 1)
        return rtx_err_set(c->err, RTX_EFORMAT,
                           "%s: version_policy: exactly one of latest, all, specific", c->what);
    if (latest) {
        json_t *n = json_object_get(latest, "num_versions");
        int64_t v = 1;
        if (n && (rc = get_int(c, n, "version_policy.latest.num_versions", 1, RTX__MAX_VERSIONS,
                               &v)))
            return rc;
        cfg->latest_n = (int)v;
    } else if (all) {
        cfg->policy = RTX__POLICY_ALL;
    } else {
        cfg->policy = RTX__POLICY_SPECIFIC;
        json_t *vs;
        if ((rc = get_array(c, spec, "versions", "version_policy.specific.versions", &vs)))
            return rc;
        if (!vs || json_array_size(vs) == 0)
            return rtx_err_set(c->err, RTX_EFORMAT,
                               "%s: version_policy.specific.versions: missing or empty", c->what);
        if (json_array_size(vs) > RTX__MAX_VERSIONS)
            return rtx_err_set(c->err, RTX_EFORMAT,
                               "%s: version_policy.specific.versions: more than %d", c->what,
                               RTX__MAX_VERSIONS);
        for (size_t i = 0; i < json_array_size(vs); i++) {
            char f[64];
            snprintf(f, sizeof f, "version_policy.specific.versions[%zu]", i);
            if ((rc = get_int(c, json_array_get(vs, i), f, 1, INT64_MAX,
                              &cfg->versions[cfg->n_versions++])))
                return rc;
        }
    }
    return 0;
}

static int parse_parameters(struct ctx *c, json_t *params, struct rtx_model_info *info) {
    int rc;
    if (!params) return 0;
    json_t *lane;
    if ((rc = get_object(c, params, "lane", "parameters.lane", &lane))) return rc;
    if (!lane) return 0;
    return get_string(c, lane, "string_value", "parameters.lane.string_value",
                      info->default_lane, sizeof info->default_lane, true);
}

/* The fixed inputs and outputs of a generative model (Triton's vLLM backend convention). */
static void generate_io(struct rtx_model_info *info) {
    static const struct {
        const char *name;
        bool bytes, optional;
    } ins[] = {{"text_input", true, false},
               {"stream", false, true},
               {"sampling_parameters", true, true},
               {"exclude_input_in_output", false, true}};
    info->n_inputs = 4;
    for (int i = 0; i < 4; i++) {
        struct rtx_model_io *io = &info->inputs[i];
        memset(io, 0, sizeof *io);
        snprintf(io->name, sizeof io->name, "%s", ins[i].name);
        io->dtype = ins[i].bytes ? RTX_U8 : RTX_BOOL;
        io->bytes = ins[i].bytes;
        io->optional = ins[i].optional;
        io->ndim = 1;
        io->dims[0] = 1;
    }
    info->n_outputs = 1;
    struct rtx_model_io *o = &info->outputs[0];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "text_output");
    o->dtype = RTX_U8;
    o->bytes = true;
    o->ndim = 1;
    o->dims[0] = -1;
    info->decoupled = true;
}

/* platform "rtx_generate": no declared io, batching or batch dimension (the engine batches
 * per step); the "generation" object's settings. */
static int parse_generate(struct ctx *c, json_t *root, json_t *ins, json_t *outs, json_t *db,
                          struct rtx__model_config *out) {
    struct rtx_model_info *info = &out->info;
    if (ins || outs || db || info->max_batch_size != 0)
        return rtx_err_set(c->err, RTX_EFORMAT,
                           "%s: %s: a generative model (platform \"rtx_generate\") declares no "
                           "input, output, max_batch_size or dynamic_batching (its inputs are "
                           "fixed and its engine batches every step)",
                           c->what,
                           ins ? "input" : outs ? "output" : db ? "dynamic_batching" : "max_batch_size");
    generate_io(info);
    out->gen.prefix_caching = true;
    out->gen.graph_max_tokens = -1;
    json_t *g = NULL, *v;
    int rc = get_object(c, root, "generation", "generation", &g);
    if (rc || !g) return rc;
    const char *key;
    json_object_foreach(g, key, v) {
        int64_t n;
        char f[96];
        snprintf(f, sizeof f, "generation.%.64s", key);
        if (strcmp(key, "kv_cache_bytes") == 0) {
            if ((rc = get_int(c, v, f, 0, INT64_C(1) << 50, &out->gen.kv_cache_bytes))) return rc;
        } else if (strcmp(key, "kv_cache_fraction") == 0) {
            if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
                return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: expected a number in (0, 1]",
                                   c->what, f);
            out->gen.kv_cache_fraction = json_number_value(v);
        } else if (strcmp(key, "block_size") == 0) {
            if ((rc = get_int(c, v, f, 1, 256, &n))) return rc;
            out->gen.block_size = (int)n;
        } else if (strcmp(key, "max_batch_tokens") == 0) {
            if ((rc = get_int(c, v, f, 1, 1 << 20, &n))) return rc;
            out->gen.max_batch_tokens = (int)n;
        } else if (strcmp(key, "max_seqs") == 0) {
            if ((rc = get_int(c, v, f, 1, 65536, &n))) return rc;
            out->gen.max_seqs = (int)n;
        } else if (strcmp(key, "cuda_graph_max_tokens") == 0) {
            if ((rc = get_int(c, v, f, 0, 1 << 20, &n))) return rc;
            out->gen.graph_max_tokens = (int)n;
        } else if (strcmp(key, "prefix_caching") == 0) {
            if (!json_is_boolean(v)) return type_error(c, f, "true or false");
            out->gen.prefix_caching = json_is_true(v);
        } else if (strcmp(key, "chat_template") == 0) {
            if (!json_is_string(v)) return type_error(c, f, "a string");
            if (json_string_length(v) >= sizeof out->gen.chat_template)
                return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: longer than %zu bytes", c->what,
                                   f, sizeof out->gen.chat_template - 1);
            snprintf(out->gen.chat_template, sizeof out->gen.chat_template, "%s",
                     json_string_value(v));
        } else {
            return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: unknown setting", c->what, f);
        }
    }
    return 0;
}

int rtx__model_config_parse(const char *json, size_t len, const char *dir_name, const char *what,
                            struct rtx__model_config *out, struct rtx_err *err) {
    memset(out, 0, sizeof *out);
    out->memory_reserve_bytes = -1;
    struct ctx c = {.what = what, .err = err};
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return rtx_err_set(err, RTX_EFORMAT, "%s: line %d column %d: %s", what, je.line,
                           je.column, je.text);
    struct rtx_model_info *info = &out->info;
    int rc = 0;
    json_t *v, *db = NULL, *ig = NULL, *vp = NULL, *params = NULL, *ins = NULL, *outs = NULL;
    if (!json_is_object(root)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: expected a JSON object", what);
        goto out;
    }
    snprintf(info->name, sizeof info->name, "%s", dir_name);
    if ((rc = get_string(&c, root, "name", "name", info->name, sizeof info->name, false)))
        goto out;
    if (strcmp(info->name, dir_name) != 0) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: name \"%s\" differs from the directory \"%s\"",
                         what, info->name, dir_name);
        goto out;
    }
    snprintf(info->platform, sizeof info->platform, "rtx_graph");
    if ((rc = get_string(&c, root, "platform", "platform", info->platform,
                         sizeof info->platform, false)) ||
        (rc = get_string(&c, root, "backend", "backend", out->backend, sizeof out->backend,
                         false)) ||
        (rc = get_string(&c, root, "default_model_filename", "default_model_filename",
                         out->model_filename, sizeof out->model_filename, false)))
        goto out;
    if (strcmp(out->backend, "onnxruntime") == 0 && !json_object_get(root, "platform"))
        snprintf(info->platform, sizeof info->platform, "onnxruntime_onnx");
    bool generate = strcmp(info->platform, "rtx_generate") == 0;
    bool onnx = rtx__model_config_onnx(out);
    if ((!generate && !onnx && strcmp(info->platform, "rtx_graph") != 0) ||
        (out->backend[0] && !(onnx && strcmp(out->backend, "onnxruntime") == 0))) {
        rc = rtx_err_set(err, RTX_EUNSUPPORTED,
                         "%s: platform \"%s\" / backend \"%s\" is not supported (rtxd serves "
                         "\"rtx_graph\", \"rtx_generate\" and \"onnxruntime_onnx\" or backend "
                         "\"onnxruntime\")",
                         what, info->platform, out->backend);
        goto out;
    }
    if (onnx) snprintf(out->backend, sizeof out->backend, "onnxruntime");
    if (out->model_filename[0] &&
        (!onnx || strchr(out->model_filename, '/') || strcmp(out->model_filename, ".") == 0 ||
         strcmp(out->model_filename, "..") == 0)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: default_model_filename: \"%s\" is not the file "
                                           "name of an ONNX model",
                         what, out->model_filename);
        goto out;
    }
    if ((v = json_object_get(root, "max_batch_size"))) {
        int64_t mb;
        if ((rc = get_int(&c, v, "max_batch_size", 0, 1 << 20, &mb))) goto out;
        info->max_batch_size = (int)mb;
    }
    /* rtxd's own field: the reservation per device (docs/serving.md); at most 1 PiB */
    if ((v = json_object_get(root, "memory_reserve_bytes")) &&
        (rc = get_int(&c, v, "memory_reserve_bytes", 0, INT64_C(1) << 50,
                      &out->memory_reserve_bytes)))
        goto out;
    if ((rc = get_array(&c, root, "input", "input", &ins)) ||
        (rc = get_array(&c, root, "output", "output", &outs)) ||
        (rc = get_object(&c, root, "dynamic_batching", "dynamic_batching", &db)) ||
        (rc = get_array(&c, root, "instance_group", "instance_group", &ig)) ||
        (rc = get_object(&c, root, "version_policy", "version_policy", &vp)) ||
        (rc = get_object(&c, root, "parameters", "parameters", &params)))
        goto out;
    if (generate) {
        if ((rc = parse_generate(&c, root, ins, outs, db, out))) goto out;
    } else if ((rc = parse_io(&c, ins, "input", true, out, info->inputs, out->in_reshape,
                              &info->n_inputs)) ||
               (rc = parse_io(&c, outs, "output", false, out, info->outputs, out->out_reshape,
                              &info->n_outputs))) {
        goto out;
    }
    out->auto_inputs = onnx && info->n_inputs == 0;
    out->auto_outputs = onnx && info->n_outputs == 0;
    out->batch_autofill = out->auto_inputs && out->auto_outputs && info->max_batch_size == 0;
    if (!onnx && (info->n_inputs == 0 || info->n_outputs == 0)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: %s: missing or empty", what,
                         info->n_inputs == 0 ? "input" : "output");
        goto out;
    }
    if (db && info->max_batch_size == 0 && !out->batch_autofill) {
        rc = rtx_err_set(err, RTX_EFORMAT,
                         "%s: dynamic_batching needs max_batch_size > 0 (a batch dimension)",
                         what);
        goto out;
    }
    if ((rc = parse_batching(&c, db, info)) || (rc = parse_groups(&c, ig, out)) ||
        (rc = parse_policy(&c, vp, out)) || (rc = parse_parameters(&c, params, info)))
        goto out;
    info->instances = 0;
    bool gpu = false;
    for (int i = 0; i < out->n_groups; i++) {
        info->instances += out->groups[i].count;
        gpu |= out->groups[i].kind == RTX__KIND_GPU;
    }
    snprintf(info->instance_kind, sizeof info->instance_kind, "%s", gpu ? "KIND_GPU" : "KIND_CPU");
out:
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Dump
 * ---------------------------------------------------------------------------------------- */

static json_t *dims_json(int ndim, const int64_t *dims) {
    json_t *a = json_array();
    for (int d = 0; a && d < ndim; d++)
        json_array_append_new(a, json_integer(dims[d]));
    return a;
}

static json_t *io_json(const struct rtx_model_io *io, const struct rtx__reshape *rs,
                       bool is_input) {
    json_t *o = json_object(), *dims = json_array();
    if (!o || !dims) {
        json_decref(o);
        json_decref(dims);
        return NULL;
    }
    for (int d = 0; d < io->ndim; d++)
        json_array_append_new(dims, json_integer(io->dims[d]));
    json_object_set_new(o, "name", json_string(io->name));
    json_object_set_new(o, "data_type",
                        json_string(io->bytes ? "TYPE_STRING" : rtx__config_dtype_name(io->dtype)));
    json_object_set_new(o, "dims", dims);
    if (is_input) json_object_set_new(o, "optional", json_boolean(io->optional));
    if (rs->set) json_object_set_new(o, "reshape", json_pack("{s:o}", "shape",
                                                             dims_json(rs->ndim, rs->dims)));
    return o;
}

static json_t *policy_json(const struct rtx__queue_policy *q) {
    return json_pack("{s:s,s:I,s:b,s:I}", "timeout_action",
                     q->on_timeout == RTX_SCHED_TIMEOUT_DELAY ? "DELAY" : "REJECT",
                     "default_timeout_microseconds", (json_int_t)q->timeout_us,
                     "allow_timeout_override", q->allow_override, "max_queue_size",
                     (json_int_t)q->max_queue);
}

char *rtx__model_config_dump(const struct rtx__model_config *c) {
    const struct rtx_model_info *info = &c->info;
    json_t *root = json_object();
    json_t *ins = json_array(), *outs = json_array(), *groups = json_array();
    json_t *vp = json_object(), *params = json_object();
    char *text = NULL;
    if (!root || !ins || !outs || !groups || !vp || !params) goto out;
    json_object_set_new(root, "name", json_string(info->name));
    json_object_set_new(root, "platform", json_string(info->platform));
    json_object_set_new(root, "backend", json_string(c->backend));
    if (rtx__model_config_onnx(c))
        json_object_set_new(root, "default_model_filename",
                            json_string(c->model_filename[0] ? c->model_filename : "model.onnx"));
    if (c->policy == RTX__POLICY_LATEST) {
        json_t *l = json_object();
        json_object_set_new(l, "num_versions", json_integer(c->latest_n));
        json_object_set_new(vp, "latest", l);
    } else if (c->policy == RTX__POLICY_ALL) {
        json_object_set_new(vp, "all", json_object());
    } else {
        json_t *s = json_object(), *vs = json_array();
        for (int i = 0; i < c->n_versions; i++)
            json_array_append_new(vs, json_integer(c->versions[i]));
        json_object_set_new(s, "versions", vs);
        json_object_set_new(vp, "specific", s);
    }
    json_object_set(root, "version_policy", vp);
    json_object_set_new(root, "max_batch_size", json_integer(info->max_batch_size));
    if (info->decoupled)
        json_object_set_new(root, "model_transaction_policy",
                            json_pack("{s:b}", "decoupled", 1));
    if (c->memory_reserve_bytes >= 0)
        json_object_set_new(root, "memory_reserve_bytes", json_integer(c->memory_reserve_bytes));
    for (int i = 0; i < info->n_inputs; i++)
        json_array_append_new(ins, io_json(&info->inputs[i], &c->in_reshape[i], true));
    for (int i = 0; i < info->n_outputs; i++)
        json_array_append_new(outs, io_json(&info->outputs[i], &c->out_reshape[i], false));
    json_object_set(root, "input", ins);
    json_object_set(root, "output", outs);
    if (info->dynamic_batching) {
        json_t *db = json_object(), *pref = json_array();
        for (int i = 0; i < info->n_preferred; i++)
            json_array_append_new(pref, json_integer(info->preferred_batch_sizes[i]));
        json_object_set_new(db, "preferred_batch_size", pref);
        json_object_set_new(db, "max_queue_delay_microseconds",
                            json_integer(info->max_queue_delay_us));
        if (c->priority_levels > 0) {
            json_object_set_new(db, "priority_levels", json_integer(c->priority_levels));
            json_object_set_new(db, "default_priority_level",
                                json_integer(c->default_priority_level));
        }
        if (c->default_policy.set)
            json_object_set_new(db, "default_queue_policy", policy_json(&c->default_policy));
        if (c->n_level_policies) {
            json_t *pq = json_object();
            for (int i = 0; pq && i < c->n_level_policies; i++) {
                char key[24];
                snprintf(key, sizeof key, "%lld", (long long)c->level_policies[i].level);
                json_object_set_new(pq, key, policy_json(&c->level_policies[i].policy));
            }
            json_object_set_new(db, "priority_queue_policy", pq);
        }
        json_object_set_new(root, "dynamic_batching", db);
    }
    for (int i = 0; i < c->n_groups; i++) {
        const struct rtx__instance_group *g = &c->groups[i];
        json_t *o = json_object(), *gpus = json_array();
        char name[160];
        snprintf(name, sizeof name, "%s_%d", info->name, i);
        json_object_set_new(o, "name", json_string(name));
        json_object_set_new(o, "kind", json_string(g->kind == RTX__KIND_GPU   ? "KIND_GPU"
                                                   : g->kind == RTX__KIND_CPU ? "KIND_CPU"
                                                                              : "KIND_AUTO"));
        json_object_set_new(o, "count", json_integer(g->count));
        for (int k = 0; k < g->n_gpus; k++)
            json_array_append_new(gpus, json_integer(g->gpus[k]));
        json_object_set_new(o, "gpus", gpus);
        json_array_append_new(groups, o);
    }
    json_object_set(root, "instance_group", groups);
    if (info->default_lane[0]) {
        json_t *lane = json_object();
        json_object_set_new(lane, "string_value", json_string(info->default_lane));
        json_object_set_new(params, "lane", lane);
    }
    json_object_set(root, "parameters", params);
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s) {
        text = rtx_strdup(s);
        free(s);
    }
out:
    json_decref(root);
    json_decref(ins);
    json_decref(outs);
    json_decref(groups);
    json_decref(vp);
    json_decref(params);
    return text;
}
