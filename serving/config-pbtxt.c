/*
 * config-pbtxt.c - config.pbtxt, Triton's ModelConfig in protobuf text format, read into
 * serving's model config: the text parsed by its descriptors (formats/pbtext.c), every field it
 * sets looked up in a table that says what rtxd does with it, then the mapped fields checked
 * and copied.
 *
 * DESIGN
 * A field is never dropped silently. The table below lists every field of ModelConfig by its
 * path (list indices left out): MAPPED fields are read by the mapping that follows; IGNORED
 * ones change nothing that rtxd could honour differently (a layout hint, warm-up samples,
 * metric tags) and are logged, each with its reason, when the model loads; REFUSED ones
 * would change what the model computes or how requests are scheduled in ways rtxd does not
 * implement (sequence batching, ensembles, ragged batches, repository agents), and all of
 * them are named in one load error. A path the table lacks (a field of a newer schema) is
 * refused. Proto3 cannot tell a scalar set to its zero value from one not set, so `passive:
 * false` is neither mapped nor named: it is Triton's default anyway. docs/serving.md shows the
 * table.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/model_config.pb-c.h"
#include "serving/serving-impl.h"

/* ------------------------------------------------------------------------------------------
 * What rtxd does with each field
 * ---------------------------------------------------------------------------------------- */

enum disposition {
    MAPPED,     /* read below; its sub-fields are looked up too */
    MAPPED_ALL, /* read below with everything inside it */
    IGNORED,    /* logged at load, with the reason */
    REFUSED,    /* the load fails naming it */
};

static const struct field_rule {
    const char *path;
    enum disposition d;
    const char *why; /* IGNORED, REFUSED: what it is and why */
} rules[] = {
    {"name", MAPPED, NULL},
    {"platform", MAPPED, NULL},
    {"backend", MAPPED, NULL},
    {"version_policy", MAPPED_ALL, NULL},
    {"max_batch_size", MAPPED, NULL},
    {"input", MAPPED, NULL},
    {"input.name", MAPPED, NULL},
    {"input.data_type", MAPPED, NULL},
    {"input.format", IGNORED, "an image layout hint; rtxd passes tensors as they come"},
    {"input.dims", MAPPED, NULL},
    {"input.reshape", MAPPED_ALL, NULL},
    {"input.is_shape_tensor", REFUSED, "shape tensors (TensorRT)"},
    {"input.allow_ragged_batch", REFUSED, "ragged batching"},
    {"input.optional", MAPPED, NULL},
    {"output", MAPPED, NULL},
    {"output.name", MAPPED, NULL},
    {"output.data_type", MAPPED, NULL},
    {"output.dims", MAPPED, NULL},
    {"output.reshape", MAPPED_ALL, NULL},
    {"output.label_filename", IGNORED,
     "classification labels; rtxd has no classification "
     "extension and does not read the file"},
    {"output.is_shape_tensor", REFUSED, "shape tensors (TensorRT)"},
    {"batch_input", REFUSED, "batch inputs (ragged batching)"},
    {"batch_output", REFUSED, "batch outputs (ragged batching)"},
    {"optimization", IGNORED,
     "framework optimisation settings; rtxd plans and fuses every "
     "graph itself"},
    {"dynamic_batching", MAPPED, NULL},
    {"dynamic_batching.preferred_batch_size", MAPPED, NULL},
    {"dynamic_batching.max_queue_delay_microseconds", MAPPED, NULL},
    {"dynamic_batching.preserve_ordering", IGNORED,
     "every request gets its own answer when "
     "its batch ends"},
    {"dynamic_batching.priority_levels", MAPPED, NULL},
    {"dynamic_batching.default_priority_level", MAPPED, NULL},
    {"dynamic_batching.default_queue_policy", MAPPED_ALL, NULL},
    {"dynamic_batching.priority_queue_policy", MAPPED_ALL, NULL},
    {"sequence_batching", REFUSED, "sequence batching (stateful models)"},
    {"ensemble_scheduling", REFUSED, "ensembles"},
    {"instance_group", MAPPED, NULL},
    {"instance_group.name", IGNORED, "rtxd names the groups MODEL_N"},
    {"instance_group.kind", MAPPED, NULL},
    {"instance_group.count", MAPPED, NULL},
    {"instance_group.rate_limiter", IGNORED,
     "rtxd has no rate limiter (Triton's is off unless "
     "started with one)"},
    {"instance_group.gpus", MAPPED, NULL},
    {"instance_group.secondary_devices", REFUSED, "secondary devices (NVDLA)"},
    {"instance_group.profile", IGNORED, "TensorRT optimization profiles"},
    {"instance_group.passive", REFUSED, "passive instances"},
    {"instance_group.host_policy", IGNORED, "host policies"},
    {"default_model_filename", MAPPED, NULL},
    {"cc_model_filenames", REFUSED, "model files per compute capability"},
    {"metric_tags", IGNORED, "rtxd's metrics carry no per-model tags"},
    {"parameters", MAPPED_ALL, NULL},
    {"model_warmup", IGNORED, "rtxd warms every instance up with zeros"},
    {"model_operations", REFUSED, "custom operation libraries"},
    {"model_transaction_policy", MAPPED, NULL},
    {"model_transaction_policy.decoupled", REFUSED,
     "decoupled models (generative models use "
     "config.json's platform rtx_generate)"},
    {"model_repository_agents", REFUSED, "repository agents"},
    {"response_cache", IGNORED, "rtxd has no response cache: every request runs"},
};

struct walk {
    const char *what, *model;
    rtx_serving_log_fn log;
    bool log_ignored; /* second pass: log the ignored fields */
    int n_refused;
    char refused[640]; /* "path (why), ..." */
};

static const struct field_rule *rule_of(const char *path) {
    char pattern[256];
    size_t n = 0;
    for (const char *p = path; *p && n + 1 < sizeof pattern; p++) {
        if (*p == '[') {
            while (*p && *p != ']')
                p++;
            if (!*p) break;
            continue;
        }
        pattern[n++] = *p;
    }
    pattern[n] = '\0';
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].path, pattern) == 0) return &rules[i];
    return NULL;
}

static int on_field(void *ctx, const char *path, const ProtobufCMessage *m,
                    const ProtobufCFieldDescriptor *f) {
    struct walk *w = ctx;
    const struct field_rule *r = rule_of(path);
    if (r && r->d == MAPPED) return 0;
    if (r && r->d == MAPPED_ALL) return 1;
    if (r && r->d == IGNORED) {
        if (w->log_ignored)
            rtx__serving_log(w->log, RTX_SERVING_LOG_WARN, "config setting ignored", "model",
                             w->model, "file", w->what, "field", path, "reason", r->why, NULL);
        return 1;
    }
    if (!w->log_ignored) {
        size_t len = strlen(w->refused);
        snprintf(w->refused + len, sizeof w->refused - len, "%s%s (%s)", w->n_refused ? ", " : "",
                 path, r ? r->why : "a field rtxd does not know");
    }
    w->n_refused++;
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * Mapping
 * ---------------------------------------------------------------------------------------- */

struct ctx {
    const char *what;
    struct rtx_err *err;
    rtx_serving_log_fn log;
    const char *model;
};

static int bad(struct ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct ctx *c, const char *field, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rtx_err_set(c->err, RTX_EFORMAT, "%s: %s: %s", c->what, field, msg);
}

static int dims_of(struct ctx *c, const char *field, const int64_t *v, size_t n, bool reshape,
                   int *ndim, int64_t *dims) {
    if (n > RTX_MAX_DIMS - 1)
        return bad(c, field, "%zu dimensions (at most %d)", n, RTX_MAX_DIMS - 1);
    if (n == 0 && !reshape)
        return bad(c, field,
                   "empty (a tensor has at least one dimension; a model tensor of "
                   "none is dims: [1] with reshape: { shape: [] })");
    for (size_t d = 0; d < n; d++)
        if (v[d] < -1 || v[d] == 0 || v[d] > INT32_MAX)
            return bad(c, field, "dimension %zu is %lld (a size, or -1 for any)", d,
                       (long long)v[d]);
    *ndim = (int)n;
    if (n) memcpy(dims, v, n * sizeof *v);
    return 0;
}

/* The reshape of a tensor: the same dims, or fixed dims of the same element count. */
static int reshape_of(struct ctx *c, const char *field, const Inference__ModelTensorReshape *r,
                      const struct rtx__model_config *cfg, const struct rtx_model_io *io,
                      struct rtx__reshape *out) {
    if (!r) return 0;
    int rc = dims_of(c, field, r->shape, r->n_shape, true, &out->ndim, out->dims);
    out->set = true;
    return rc ? rc : rtx__config_reshape_check(cfg, c->what, field, io, out, c->err);
}

static int map_io(struct ctx *c, Inference__ModelInput *const *ins,
                  Inference__ModelOutput *const *outs, size_t n, bool is_input,
                  struct rtx__model_config *cfg) {
    const char *sect = is_input ? "input" : "output";
    struct rtx_model_io *ios = is_input ? cfg->info.inputs : cfg->info.outputs;
    struct rtx__reshape *rs = is_input ? cfg->in_reshape : cfg->out_reshape;
    char f[96];
    if (n > RTX_MODEL_MAX_IO) return bad(c, sect, "%zu entries (at most %d)", n, RTX_MODEL_MAX_IO);
    for (size_t i = 0; i < n; i++) {
        const char *name = is_input ? ins[i]->name : outs[i]->name;
        int dt = is_input ? (int)ins[i]->data_type : (int)outs[i]->data_type;
        struct rtx_model_io *io = &ios[i];
        int rc;
        snprintf(f, sizeof f, "%s[%zu].name", sect, i);
        if (!name[0]) return bad(c, f, "missing");
        if (strlen(name) >= sizeof io->name)
            return bad(c, f, "longer than %zu bytes", sizeof io->name - 1);
        snprintf(io->name, sizeof io->name, "%s", name);
        for (size_t k = 0; k < i; k++)
            if (strcmp(ios[k].name, name) == 0) return bad(c, sect, "'%s' is listed twice", name);
        snprintf(f, sizeof f, "%s[%zu].data_type", sect, i);
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(&inference__data_type__descriptor, dt);
        if (dt == INFERENCE__DATA_TYPE__TYPE_INVALID || !ev) return bad(c, f, "missing");
        if ((rc = rtx__config_dtype_from_name(ev->name, &io->dtype, c->err)))
            return rtx_err_prefix(c->err, "%s: %s '%s'", c->what, sect, name);
        snprintf(f, sizeof f, "%s[%zu].dims", sect, i);
        if ((rc = is_input
                      ? dims_of(c, f, ins[i]->dims, ins[i]->n_dims, false, &io->ndim, io->dims)
                      : dims_of(c, f, outs[i]->dims, outs[i]->n_dims, false, &io->ndim, io->dims)))
            return rc;
        snprintf(f, sizeof f, "%s[%zu].reshape.shape", sect, i);
        if ((rc =
                 reshape_of(c, f, is_input ? ins[i]->reshape : outs[i]->reshape, cfg, io, &rs[i])))
            return rc;
        io->optional = is_input && ins[i]->optional;
    }
    if (is_input)
        cfg->info.n_inputs = (int)n;
    else
        cfg->info.n_outputs = (int)n;
    return 0;
}

static int map_queue_policy(struct ctx *c, const char *field, const Inference__ModelQueuePolicy *q,
                            struct rtx__queue_policy *out) {
    out->set = true;
    out->on_timeout = q->timeout_action == INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY
                          ? RTX_SCHED_TIMEOUT_DELAY
                          : RTX_SCHED_TIMEOUT_REJECT;
    if (q->default_timeout_microseconds > (uint64_t)24 * 3600 * 1000000)
        return bad(c, field, "default_timeout_microseconds %llu is more than a day",
                   (unsigned long long)q->default_timeout_microseconds);
    out->timeout_us = (int64_t)q->default_timeout_microseconds;
    out->allow_override = q->allow_timeout_override;
    out->max_queue = q->max_queue_size;
    return 0;
}

static int map_batching(struct ctx *c, const Inference__ModelDynamicBatching *db,
                        struct rtx__model_config *cfg) {
    struct rtx_model_info *info = &cfg->info;
    char f[96];
    int rc;
    info->dynamic_batching = true;
    if (db->n_preferred_batch_size > RTX_MODEL_MAX_PREFERRED)
        return bad(c, "dynamic_batching.preferred_batch_size", "%zu sizes (at most %d)",
                   db->n_preferred_batch_size, RTX_MODEL_MAX_PREFERRED);
    for (size_t i = 0; i < db->n_preferred_batch_size; i++) {
        int v = db->preferred_batch_size[i];
        snprintf(f, sizeof f, "dynamic_batching.preferred_batch_size[%zu]", i);
        if (v < 1 || (info->max_batch_size > 0 && v > info->max_batch_size))
            return bad(c, f, "%d is not in [1, max_batch_size %d]", v, info->max_batch_size);
        for (int k = 0; k < info->n_preferred; k++)
            if (info->preferred_batch_sizes[k] == v) return bad(c, f, "%d is listed twice", v);
        int k = info->n_preferred++;
        for (; k > 0 && info->preferred_batch_sizes[k - 1] > v; k--) /* kept ascending */
            info->preferred_batch_sizes[k] = info->preferred_batch_sizes[k - 1];
        info->preferred_batch_sizes[k] = v;
    }
    if (db->max_queue_delay_microseconds > (uint64_t)3600 * 1000000)
        return bad(c, "dynamic_batching.max_queue_delay_microseconds", "more than an hour");
    info->max_queue_delay_us = (int64_t)db->max_queue_delay_microseconds;
    if (db->priority_levels > RTX_SCHED_MAX_LANES * 1000)
        return bad(c, "dynamic_batching.priority_levels", "%llu levels",
                   (unsigned long long)db->priority_levels);
    cfg->priority_levels = (int64_t)db->priority_levels;
    if (db->default_priority_level > db->priority_levels)
        return bad(c, "dynamic_batching.default_priority_level",
                   "%llu is not in [1, priority_levels %llu]",
                   (unsigned long long)db->default_priority_level,
                   (unsigned long long)db->priority_levels);
    cfg->default_priority_level = (int64_t)db->default_priority_level;
    if (db->default_queue_policy &&
        (rc = map_queue_policy(c, "dynamic_batching.default_queue_policy",
                               db->default_queue_policy, &cfg->default_policy)))
        return rc;
    if (db->n_priority_queue_policy > RTX__MAX_LEVEL_POLICIES)
        return bad(c, "dynamic_batching.priority_queue_policy", "%zu levels (at most %d)",
                   db->n_priority_queue_policy, RTX__MAX_LEVEL_POLICIES);
    for (size_t i = 0; i < db->n_priority_queue_policy; i++) {
        const Inference__ModelDynamicBatching__PriorityQueuePolicyEntry *e =
            db->priority_queue_policy[i];
        snprintf(f, sizeof f, "dynamic_batching.priority_queue_policy[%llu]",
                 (unsigned long long)e->key);
        if (e->key < 1 || e->key > db->priority_levels)
            return bad(c, f, "level %llu is not in [1, priority_levels %llu]",
                       (unsigned long long)e->key, (unsigned long long)db->priority_levels);
        cfg->level_policies[i].level = (int64_t)e->key;
        static const Inference__ModelQueuePolicy none = INFERENCE__MODEL_QUEUE_POLICY__INIT;
        if ((rc = map_queue_policy(c, f, e->value ? e->value : &none,
                                   &cfg->level_policies[i].policy)))
            return rc;
        cfg->n_level_policies++;
    }
    return 0;
}

static int map_groups(struct ctx *c, const Inference__ModelConfig *mc,
                      struct rtx__model_config *cfg) {
    char f[96];
    if (mc->n_instance_group == 0) {
        cfg->n_groups = 1;
        cfg->groups[0] = (struct rtx__instance_group){.count = 1, .kind = RTX__KIND_AUTO};
        return 0;
    }
    if (mc->n_instance_group > RTX__MAX_GROUPS)
        return bad(c, "instance_group", "%zu groups (at most %d)", mc->n_instance_group,
                   RTX__MAX_GROUPS);
    for (size_t i = 0; i < mc->n_instance_group; i++) {
        const Inference__ModelInstanceGroup *g = mc->instance_group[i];
        struct rtx__instance_group *o = &cfg->groups[i];
        snprintf(f, sizeof f, "instance_group[%zu].kind", i);
        switch (g->kind) {
        case INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU: o->kind = RTX__KIND_CPU; break;
        case INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU: o->kind = RTX__KIND_GPU; break;
        case INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO: o->kind = RTX__KIND_AUTO; break;
        default:
            return rtx_err_set(c->err, RTX_EUNSUPPORTED,
                               "%s: %s: KIND_MODEL (placement left to the backend) is not "
                               "supported: use KIND_CPU, KIND_GPU or KIND_AUTO",
                               c->what, f);
        }
        snprintf(f, sizeof f, "instance_group[%zu].count", i);
        if (g->count < 0 || g->count > 64) return bad(c, f, "%d is not in [1, 64]", g->count);
        /* Triton's defaults: 2 for a CPU group of an ONNX Runtime model, else 1 */
        o->count = g->count                                                  ? g->count
                   : o->kind == RTX__KIND_CPU && rtx__model_config_onnx(cfg) ? 2
                                                                             : 1;
        snprintf(f, sizeof f, "instance_group[%zu].gpus", i);
        if (g->n_gpus > RTX__MAX_GROUP_GPUS)
            return bad(c, f, "more than %d devices", RTX__MAX_GROUP_GPUS);
        if (g->n_gpus && o->kind == RTX__KIND_CPU) return bad(c, f, "given with KIND_CPU");
        for (size_t k = 0; k < g->n_gpus; k++) {
            if (g->gpus[k] < 0 || g->gpus[k] > 1023)
                return bad(c, f, "device %d is not in [0, 1023]", g->gpus[k]);
            o->gpus[o->n_gpus++] = g->gpus[k];
        }
    }
    cfg->n_groups = (int)mc->n_instance_group;
    return 0;
}

static int map_policy(struct ctx *c, const Inference__ModelVersionPolicy *vp,
                      struct rtx__model_config *cfg) {
    cfg->policy = RTX__POLICY_LATEST;
    cfg->latest_n = 1;
    if (!vp) return 0;
    switch (vp->policy_choice_case) {
    case INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST:
        if (vp->latest->num_versions > RTX__MAX_VERSIONS)
            return bad(c, "version_policy.latest.num_versions", "%u (at most %d)",
                       vp->latest->num_versions, RTX__MAX_VERSIONS);
        cfg->latest_n = vp->latest->num_versions ? (int)vp->latest->num_versions : 1;
        return 0;
    case INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL:
        cfg->policy = RTX__POLICY_ALL;
        return 0;
    case INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC: {
        const Inference__ModelVersionPolicy__Specific *s = vp->specific;
        cfg->policy = RTX__POLICY_SPECIFIC;
        if (s->n_versions == 0 || s->n_versions > RTX__MAX_VERSIONS)
            return bad(c, "version_policy.specific.versions", "%zu versions (1 to %d)",
                       s->n_versions, RTX__MAX_VERSIONS);
        for (size_t i = 0; i < s->n_versions; i++) {
            if (s->versions[i] < 1)
                return bad(c, "version_policy.specific.versions", "version %lld",
                           (long long)s->versions[i]);
            cfg->versions[cfg->n_versions++] = s->versions[i];
        }
        return 0;
    }
    default: return 0; /* version_policy {}: the default */
    }
}

static int map_parameters(struct ctx *c, const Inference__ModelConfig *mc,
                          struct rtx__model_config *cfg) {
    for (size_t i = 0; i < mc->n_parameters; i++) {
        const char *key = mc->parameters[i]->key;
        const char *v = mc->parameters[i]->value ? mc->parameters[i]->value->string_value : "";
        char f[200];
        snprintf(f, sizeof f, "parameters[\"%.64s\"].string_value", key);
        if (strcmp(key, "lane") == 0) {
            if (!v[0] || strlen(v) >= sizeof cfg->info.default_lane)
                return bad(c, f, "a lane name of 1 to %zu bytes",
                           sizeof cfg->info.default_lane - 1);
            snprintf(cfg->info.default_lane, sizeof cfg->info.default_lane, "%s", v);
        } else if (strcmp(key, "memory_reserve_bytes") == 0) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (!v[0] || *end || n < 0 || n > (1LL << 50))
                return bad(c, f, "\"%.40s\" is not a byte count in [0, 2^50]", v);
            cfg->memory_reserve_bytes = n;
        } else {
            char field[120];
            snprintf(field, sizeof field, "parameters[\"%.64s\"]", key);
            rtx__serving_log(c->log, RTX_SERVING_LOG_WARN, "config setting ignored", "model",
                             c->model, "file", c->what, "field", field, "reason",
                             "a backend parameter rtxd does not read", NULL);
        }
    }
    return 0;
}

/* platform and backend: ONNX Runtime (either names it; absent: ONNX, as Triton finds the
 * backend from model.onnx), or rtxd's graph. */
static int map_platform(struct ctx *c, const Inference__ModelConfig *mc,
                        struct rtx__model_config *cfg) {
    bool onnx_p = strcmp(mc->platform, "onnxruntime_onnx") == 0;
    bool onnx_b = strcmp(mc->backend, "onnxruntime") == 0;
    if ((onnx_p || !mc->platform[0]) && (onnx_b || !mc->backend[0])) {
        snprintf(cfg->info.platform, sizeof cfg->info.platform, "onnxruntime_onnx");
        snprintf(cfg->backend, sizeof cfg->backend, "onnxruntime");
        return 0;
    }
    if (strcmp(mc->platform, "rtx_graph") == 0 && !mc->backend[0]) {
        snprintf(cfg->info.platform, sizeof cfg->info.platform, "rtx_graph");
        return 0;
    }
    return rtx_err_set(c->err, RTX_EUNSUPPORTED,
                       "%s: platform \"%.64s\" / backend \"%.64s\" is not supported (rtxd serves "
                       "platform \"onnxruntime_onnx\" or backend \"onnxruntime\", and "
                       "\"rtx_graph\"; \"rtx_generate\" needs config.json)",
                       c->what, mc->platform, mc->backend);
}

static int map_config(struct ctx *c, const Inference__ModelConfig *mc, const char *dir_name,
                      struct rtx__model_config *cfg) {
    struct rtx_model_info *info = &cfg->info;
    int rc;
    if (mc->name[0] && strcmp(mc->name, dir_name) != 0)
        return rtx_err_set(c->err, RTX_EFORMAT,
                           "%s: name \"%.128s\" differs from the "
                           "directory \"%s\"",
                           c->what, mc->name, dir_name);
    snprintf(info->name, sizeof info->name, "%s", dir_name);
    if ((rc = map_platform(c, mc, cfg))) return rc;
    bool onnx = rtx__model_config_onnx(cfg);
    if (mc->max_batch_size < 0 || mc->max_batch_size > (1 << 20))
        return bad(c, "max_batch_size", "%d is not in [0, 2^20]", mc->max_batch_size);
    info->max_batch_size = mc->max_batch_size;
    if ((rc = map_io(c, mc->input, NULL, mc->n_input, true, cfg)) ||
        (rc = map_io(c, NULL, mc->output, mc->n_output, false, cfg)))
        return rc;
    cfg->auto_inputs = onnx && mc->n_input == 0;
    cfg->auto_outputs = onnx && mc->n_output == 0;
    cfg->batch_autofill =
        onnx && cfg->auto_inputs && cfg->auto_outputs && info->max_batch_size == 0;
    if (!onnx && (mc->n_input == 0 || mc->n_output == 0))
        return bad(c, mc->n_input == 0 ? "input" : "output", "missing or empty");
    if (mc->default_model_filename[0]) {
        const char *fn = mc->default_model_filename;
        if (!onnx) return bad(c, "default_model_filename", "only ONNX models have one");
        if (strchr(fn, '/') || strcmp(fn, ".") == 0 || strcmp(fn, "..") == 0 ||
            strlen(fn) >= sizeof cfg->model_filename)
            return bad(c, "default_model_filename", "\"%.64s\" is not a file name", fn);
        snprintf(cfg->model_filename, sizeof cfg->model_filename, "%s", fn);
    }
    if (mc->dynamic_batching) {
        if (info->max_batch_size == 0 && !cfg->batch_autofill)
            return bad(c, "dynamic_batching", "needs max_batch_size > 0 (a batch dimension)");
        if ((rc = map_batching(c, mc->dynamic_batching, cfg))) return rc;
    }
    if ((rc = map_groups(c, mc, cfg)) || (rc = map_policy(c, mc->version_policy, cfg)) ||
        (rc = map_parameters(c, mc, cfg)))
        return rc;
    bool gpu = false;
    for (int i = 0; i < cfg->n_groups; i++) {
        info->instances += cfg->groups[i].count;
        gpu |= cfg->groups[i].kind == RTX__KIND_GPU;
    }
    snprintf(info->instance_kind, sizeof info->instance_kind, "%s", gpu ? "KIND_GPU" : "KIND_CPU");
    return 0;
}

int rtx__model_config_pbtxt(const char *text, size_t len, const char *dir_name, const char *what,
                            rtx_serving_log_fn log, struct rtx__model_config *out,
                            struct rtx_err *err) {
    memset(out, 0, sizeof *out);
    out->memory_reserve_bytes = -1;
    ProtobufCMessage *msg = NULL;
    int rc = rtx_pbtext_parse(&inference__model_config__descriptor, text, len, what, &msg, err);
    if (rc) return rc;
    struct walk w = {.what = what, .model = dir_name, .log = log};
    rtx_pbtext_visit(msg, on_field, &w);
    if (w.n_refused) {
        rc = rtx_err_set(err, RTX_EUNSUPPORTED, "%s: not supported by rtxd: %s", what, w.refused);
    } else {
        struct ctx c = {.what = what, .err = err, .log = log, .model = dir_name};
        rc = map_config(&c, (const Inference__ModelConfig *)msg, dir_name, out);
    }
    if (rc == 0) {
        w.log_ignored = true;
        rtx_pbtext_visit(msg, on_field, &w);
    }
    rtx_pbtext_free(msg);
    return rc;
}
