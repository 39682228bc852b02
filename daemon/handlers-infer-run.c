/*
 * handlers-infer-run.c - ModelInfer and ModelStreamInfer of inference.GRPCInferenceService:
 * request parameters, decoding inputs and outputs, running the request on the inference core
 * and building the response. The helpers shared with the other handlers are in
 * handlers-infer.c (handlers-infer-impl.h).
 *
 * DESIGN
 * ModelInfer is an asynchronous call: the handler decodes and checks the request, builds a
 * struct rtx_infer_request and queues it with rtx_serving_infer, then returns; the core's
 * completion (on a worker thread) packs the response and finishes the call, so no
 * completion-queue thread waits while a batch runs. ModelStreamInfer shares all of that: one
 * request per stream message, its answer (a response or an error_message) written when its
 * completion runs.
 * Inputs are not copied when they need not be: raw_input_contents entries (which protobuf-c
 * has already copied into the unpacked message) and shared-memory regions are wrapped as
 * tensors (rtx_tensor_wrap) whose release drops a reference on the request's context, so the
 * unpacked message and the regions stay alive until the core and the completion are both
 * done with them, whatever order those happen in. Typed contents (InferTensorContents) and
 * inputs at addresses not aligned for their element type are copied. Outputs travel as
 * raw_output_contents pointing at the result tensors while the response is packed (one entry
 * per output, empty for outputs written to shared memory, as Triton does), or as typed
 * contents when the client asks for binary_data = false.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/handlers-infer-impl.h"
#include "daemon/log.h"

const Inference__InferParameter *rtx__infer_param_find(size_t n, void *entries,
                                                       const char *key) {
    Inference__ModelInferRequest__ParametersEntry **e = entries; /* one layout for all */
    for (size_t i = 0; i < n; i++)
        if (e[i]->key && strcmp(e[i]->key, key) == 0 && e[i]->value) return e[i]->value;
    return NULL;
}

int rtx__infer_param_int(const Inference__InferParameter *p, const char *what, int64_t *out,
                         struct rtx_err *err) {
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM: *out = p->int64_param; return 0;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        if (p->uint64_param > INT64_MAX) break;
        *out = (int64_t)p->uint64_param;
        return 0;
    default: break;
    }
    return rtx_err_set(err, RTX_EINVAL, "%s must be an integer parameter (int64_param)", what);
}

int rtx__infer_param_bool(const Inference__InferParameter *p, const char *what, bool *out,
                          struct rtx_err *err) {
    if (p->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
        return rtx_err_set(err, RTX_EINVAL, "%s must be a bool parameter (bool_param)", what);
    *out = p->bool_param;
    return 0;
}

int rtx__infer_shm_param(size_t n, void *entries, const char *kind, const char *name,
                         struct shm_param *out, struct rtx_err *err) {
    const Inference__InferParameter *r = rtx__infer_param_find(n, entries, "shared_memory_region");
    const Inference__InferParameter *sz = rtx__infer_param_find(n, entries, "shared_memory_byte_size");
    const Inference__InferParameter *off = rtx__infer_param_find(n, entries, "shared_memory_offset");
    *out = (struct shm_param){0};
    if (!r) {
        if (sz || off)
            return rtx_err_set(err, RTX_EINVAL,
                               "%s '%s': shared_memory_byte_size or shared_memory_offset given "
                               "without shared_memory_region",
                               kind, name);
        return 0;
    }
    if (r->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM ||
        !r->string_param || !r->string_param[0])
        return rtx_err_set(err, RTX_EINVAL,
                           "%s '%s': shared_memory_region must be a non-empty string", kind, name);
    out->region = r->string_param;
    if (!sz)
        return rtx_err_set(err, RTX_EINVAL,
                           "%s '%s': shared_memory_byte_size is required with "
                           "shared_memory_region",
                           kind, name);
    char what[200];
    snprintf(what, sizeof what, "%s '%s': shared_memory_byte_size", kind, name);
    if (rtx__infer_param_int(sz, what, &out->byte_size, err) != 0) return err->code;
    if (off) {
        snprintf(what, sizeof what, "%s '%s': shared_memory_offset", kind, name);
        if (rtx__infer_param_int(off, what, &out->offset, err) != 0) return err->code;
    }
    if (out->byte_size < 0 || out->offset < 0)
        return rtx_err_set(err, RTX_EINVAL, "%s '%s': negative shared-memory offset or size", kind,
                           name);
    return 1;
}

const ProtobufCBinaryData *rtx__infer_raw_input(const Inference__ModelInferRequest *rq,
                                                size_t *raw_next, const char *name,
                                                struct rtx_err *err) {
    size_t k = (*raw_next)++;
    if (k < rq->n_raw_input_contents) return &rq->raw_input_contents[k];
    rtx_err_set(err, RTX_EINVAL,
                "input '%s': no data: give it in raw_input_contents, in typed contents or in a "
                "shared-memory region",
                name);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Inference
 * ---------------------------------------------------------------------------------------- */

struct out_spec {
    bool typed;           /* binary_data = false: typed contents */
    struct shm_param shm; /* shm.region NULL: not in shared memory */
    void *addr;           /* the mapped region part */
    struct rtx_shm_ref *ref;
};

/* One inference request in flight, from decoding to its answer. */
struct infer_ctx {
    atomic_int refs; /* the completion, the handler, one per input tensor over memory we hold */
    struct rtx_daemon *d;
    Inference__ModelInferRequest *req;
    struct rtx_model *model;
    int n_in;
    struct rtx_infer_input in[RTX_MODEL_MAX_IO];
    struct rtx_shm_ref *in_refs[RTX_MODEL_MAX_IO]; /* regions wrapped by input tensors */
    int n_out;
    const char *out_names[RTX_MODEL_MAX_IO];
    struct out_spec out[RTX_MODEL_MAX_IO];
    bool typed_default; /* request parameter binary_data_output = false */
    bool generative;    /* handed to a generative model: infer_done will not run */
    /* the call: exactly one of these */
    struct rtx_server_async *call;
    struct rtx_server_bidi *stream;
};

static void ctx_unref(struct infer_ctx *c) {
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    for (int i = 0; i < c->n_in; i++)
        rtx_shm_ref_release(c->in_refs[i]);
    for (int i = 0; i < c->n_out; i++)
        rtx_shm_ref_release(c->out[i].ref);
    rtx_model_unref(c->model);
    if (c->req) inference__model_infer_request__free_unpacked(c->req, NULL);
    rtx_free(c);
}

/* A wrapped input's release: the memory belongs to the context. */
static void input_release(void *ctx, void *data) {
    ctx_unref(ctx);
}

/* The element type's typed field name, for messages. */
static const char *typed_field(enum rtx_dtype dt) {
    switch (dt) {
    case RTX_F32: return "fp32_contents";
    case RTX_I8:
    case RTX_I32: return "int_contents";
    case RTX_I64: return "int64_contents";
    case RTX_U8: return "uint_contents";
    case RTX_BOOL: return "bool_contents";
    default: return NULL; /* FP16, BF16: raw only */
    }
}

/* The number of typed elements given in any field, and whether the right one is used. */
static size_t typed_count(const Inference__InferTensorContents *tc, enum rtx_dtype dt,
                          bool *right) {
    size_t n_right = 0;
    switch (dt) {
    case RTX_F32: n_right = tc->n_fp32_contents; break;
    case RTX_I8:
    case RTX_I32: n_right = tc->n_int_contents; break;
    case RTX_I64: n_right = tc->n_int64_contents; break;
    case RTX_U8: n_right = tc->n_uint_contents; break;
    case RTX_BOOL: n_right = tc->n_bool_contents; break;
    default: break;
    }
    size_t all = tc->n_bool_contents + tc->n_int_contents + tc->n_int64_contents +
                 tc->n_uint_contents + tc->n_uint64_contents + tc->n_fp32_contents +
                 tc->n_fp64_contents + tc->n_bytes_contents;
    *right = all == n_right;
    return all;
}

/* Copies typed contents (count checked by the caller) into t. */
static int typed_fill(const Inference__InferTensorContents *tc, struct rtx_tensor *t,
                      const char *name, struct rtx_err *err) {
    void *p = rtx_tensor_data(t);
    int64_t n = rtx_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case RTX_F32: ((float *)p)[i] = tc->fp32_contents[i]; break;
        case RTX_I32: ((int32_t *)p)[i] = tc->int_contents[i]; break;
        case RTX_I64: ((int64_t *)p)[i] = tc->int64_contents[i]; break;
        case RTX_BOOL: ((uint8_t *)p)[i] = tc->bool_contents[i] ? 1 : 0; break;
        case RTX_I8:
            if (tc->int_contents[i] < INT8_MIN || tc->int_contents[i] > INT8_MAX)
                return rtx_err_set(err, RTX_EINVAL,
                                   "input '%s': int_contents[%" PRId64 "] = %d is out of range "
                                   "for INT8",
                                   name, i, tc->int_contents[i]);
            ((int8_t *)p)[i] = (int8_t)tc->int_contents[i];
            break;
        case RTX_U8:
            if (tc->uint_contents[i] > UINT8_MAX)
                return rtx_err_set(err, RTX_EINVAL,
                                   "input '%s': uint_contents[%" PRId64 "] = %u is out of range "
                                   "for UINT8",
                                   name, i, tc->uint_contents[i]);
            ((uint8_t *)p)[i] = (uint8_t)tc->uint_contents[i];
            break;
        default: return rtx_err_set(err, RTX_EINTERNAL, "typed contents for an unknown dtype");
        }
    }
    return 0;
}

/* A tensor over data that the context keeps alive (copied when misaligned). */
static int wrap_input(struct infer_ctx *c, enum rtx_dtype dt, int ndim, const int64_t *dims,
                      void *data, size_t bytes, struct rtx_tensor **out, struct rtx_err *err) {
    if ((uintptr_t)data % rtx_dtype_size(dt) != 0 || bytes == 0) {
        int rc = rtx_tensor_new(dt, ndim, dims, out, err);
        if (rc == 0 && bytes) memcpy(rtx_tensor_data(*out), data, bytes);
        return rc;
    }
    atomic_fetch_add(&c->refs, 1);
    int rc = rtx_tensor_wrap(dt, ndim, dims, data, bytes, input_release, c, out, err);
    if (rc != 0) atomic_fetch_sub(&c->refs, 1);
    return rc;
}

/* Decodes input i into c->in[i]. raw_next: the next unused raw_input_contents entry. */
static int decode_input(struct infer_ctx *c, int i, size_t *raw_next, struct rtx_err *err) {
    const Inference__ModelInferRequest *rq = c->req;
    const Inference__ModelInferRequest__InferInputTensor *x = rq->inputs[i];
    const char *name = x->name;
    if (!name[0]) return rtx_err_set(err, RTX_EINVAL, "input %d has no name", i);
    enum rtx_dtype dt;
    if (strcmp(x->datatype, "BYTES") == 0)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': datatype BYTES, but model '%s' is a graph model, whose "
                           "inputs are numeric tensors (BYTES inputs are for generative models)",
                           name, rtx_model_info(c->model)->name);
    if (rtx_kserve_dtype_from_name(x->datatype, &dt, err) != 0) {
        rtx_err_prefix(err, "input '%s'", name);
        return err->code = RTX_EINVAL; /* a bad request, whichever datatype it names */
    }
    if (x->n_shape > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': %zu dimensions, at most %d", name,
                           x->n_shape, RTX_MAX_DIMS);
    int64_t numel = 1;
    for (size_t k = 0; k < x->n_shape; k++) {
        if (x->shape[k] < 0)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': dimension %zu is negative (%" PRId64 ")", name, k,
                               x->shape[k]);
        if (x->shape[k] > 0 && numel > INT64_MAX / 16 / x->shape[k])
            return rtx_err_set(err, RTX_ELIMIT, "input '%s': shape too large", name);
        numel *= x->shape[k];
    }
    int ndim = (int)x->n_shape;
    size_t bytes = (size_t)numel * rtx_dtype_size(dt);
    char shape[96]; /* "f32[2, 3]" for messages: formatted only on a path that fails (SHAPE) */
#define SHAPE rtx_shape_str(dt, ndim, x->shape, shape, sizeof shape)

    struct shm_param sp;
    int has_shm = rtx__infer_shm_param(x->n_parameters, x->parameters, "input", name, &sp, err);
    if (has_shm < 0) return has_shm;
    bool typed = x->contents != NULL;
    struct rtx_tensor *t = NULL;
    if (has_shm) {
        if (typed)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': contents given together with a shared-memory region",
                               name);
        if ((uint64_t)sp.byte_size != bytes)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': shared_memory_byte_size is %" PRId64 " bytes, but %s "
                               "takes %zu",
                               name, sp.byte_size, SHAPE, bytes);
        if (!c->d->shm) return rtx_err_set(err, RTX_EUNAVAILABLE, "no shared-memory registry");
        void *addr = NULL;
        struct rtx_shm_ref *ref = NULL;
        if (rtx_shm_map(c->d->shm, sp.region, (uint64_t)sp.offset, bytes, &addr, &ref, err) != 0)
            return rtx_err_prefix(err, "input '%s'", name);
        c->in_refs[i] = ref;
        if (wrap_input(c, dt, ndim, x->shape, addr, bytes, &t, err) != 0) return err->code;
    } else if (typed) {
        bool right;
        size_t n = typed_count(x->contents, dt, &right);
        if (!typed_field(dt))
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': %s has no typed contents; send it in "
                               "raw_input_contents",
                               name, x->datatype);
        if (!right)
            return rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %s expects its data in %s",
                               name, x->datatype, typed_field(dt));
        if (n != (size_t)numel)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': %zu elements in %s, but %s has %" PRId64, name, n,
                               typed_field(dt), SHAPE, numel);
        if (rtx_tensor_new(dt, ndim, x->shape, &t, err) != 0) return err->code;
        if (typed_fill(x->contents, t, name, err) != 0) {
            rtx_tensor_unref(t);
            return err->code;
        }
    } else {
        const ProtobufCBinaryData *raw = rtx__infer_raw_input(rq, raw_next, name, err);
        if (!raw) return err->code;
        size_t k = *raw_next - 1;
        if (raw->len != bytes)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': raw_input_contents[%zu] holds %zu bytes, but %s "
                               "takes %zu",
                               name, k, raw->len, SHAPE, bytes);
        if (wrap_input(c, dt, ndim, x->shape, raw->data, bytes, &t, err) != 0) return err->code;
    }
    c->in[i].name = name;
    c->in[i].tensor = t;
    return 0;
}
#undef SHAPE

/* Decodes requested output i. */
static int decode_output(struct infer_ctx *c, int i, struct rtx_err *err) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = c->req->outputs[i];
    if (!o->name[0]) return rtx_err_set(err, RTX_EINVAL, "requested output %d has no name", i);
    c->out_names[i] = o->name;
    struct out_spec *sp = &c->out[i];
    sp->typed = c->typed_default;
    const Inference__InferParameter *bd = RTX__INFER_PARAM(o, "binary_data");
    if (bd) {
        bool binary = true;
        char what[200];
        snprintf(what, sizeof what, "output '%s': binary_data", o->name);
        if (rtx__infer_param_bool(bd, what, &binary, err) != 0) return err->code;
        sp->typed = !binary;
    }
    if (RTX__INFER_PARAM(o, "classification"))
        return rtx_err_set(err, RTX_EINVAL,
                           "output '%s': the classification extension is not supported by rtxd",
                           o->name);
    int has = rtx__infer_shm_param(o->n_parameters, o->parameters, "output", o->name, &sp->shm, err);
    if (has < 0) return has;
    if (has) {
        if (!c->d->shm) return rtx_err_set(err, RTX_EUNAVAILABLE, "no shared-memory registry");
        if (rtx_shm_map(c->d->shm, sp->shm.region, (uint64_t)sp->shm.offset,
                        (uint64_t)sp->shm.byte_size, &sp->addr, &sp->ref, err) != 0)
            return rtx_err_prefix(err, "output '%s'", o->name);
    }
    return 0;
}

/* Typed contents of an output tensor (when its dtype has them). */
static Inference__InferTensorContents *typed_contents(struct arena *a,
                                                      const struct rtx_tensor *t) {
    Inference__InferTensorContents *tc = rtx__infer_arena_alloc(a, sizeof *tc);
    if (!tc) return NULL;
    inference__infer_tensor_contents__init(tc);
    int64_t n = rtx_tensor_numel(t);
    const void *p = rtx_tensor_data(t);
    size_t un = (size_t)n;
    switch (t->dtype) {
    case RTX_F32:
        tc->fp32_contents = rtx__infer_arena_alloc(a, un * sizeof(float));
        if (!tc->fp32_contents) return NULL;
        if (un) memcpy(tc->fp32_contents, p, un * sizeof(float));
        tc->n_fp32_contents = un;
        break;
    case RTX_I32:
    case RTX_I8:
        tc->int_contents = rtx__infer_arena_alloc(a, un * sizeof(int32_t));
        if (!tc->int_contents) return NULL;
        for (size_t i = 0; i < un; i++)
            tc->int_contents[i] =
                t->dtype == RTX_I32 ? ((const int32_t *)p)[i] : ((const int8_t *)p)[i];
        tc->n_int_contents = un;
        break;
    case RTX_I64:
        tc->int64_contents = rtx__infer_arena_alloc(a, un * sizeof(int64_t));
        if (!tc->int64_contents) return NULL;
        if (un) memcpy(tc->int64_contents, p, un * sizeof(int64_t));
        tc->n_int64_contents = un;
        break;
    case RTX_U8:
        tc->uint_contents = rtx__infer_arena_alloc(a, un * sizeof(uint32_t));
        if (!tc->uint_contents) return NULL;
        for (size_t i = 0; i < un; i++)
            tc->uint_contents[i] = ((const uint8_t *)p)[i];
        tc->n_uint_contents = un;
        break;
    case RTX_BOOL:
        tc->bool_contents = rtx__infer_arena_alloc(a, un * sizeof(protobuf_c_boolean));
        if (!tc->bool_contents) return NULL;
        for (size_t i = 0; i < un; i++)
            tc->bool_contents[i] = ((const uint8_t *)p)[i] != 0;
        tc->n_bool_contents = un;
        break;
    default: return NULL;
    }
    return tc;
}

/* The spec of result output `name` (requested by name), or NULL when not requested. */
static const struct out_spec *out_spec_of(const struct infer_ctx *c, const char *name) {
    for (int i = 0; i < c->n_out; i++)
        if (strcmp(c->out_names[i], name) == 0) return &c->out[i];
    return NULL;
}

/* An output parameter entry (string or int64). */
static Inference__ModelInferResponse__InferOutputTensor__ParametersEntry *
out_param(struct arena *a, const char *key, const char *s, int64_t v) {
    Inference__ModelInferResponse__InferOutputTensor__ParametersEntry *e =
        rtx__infer_arena_alloc(a, sizeof *e);
    Inference__InferParameter *p = rtx__infer_arena_alloc(a, sizeof *p);
    if (!e || !p) return NULL;
    inference__model_infer_response__infer_output_tensor__parameters_entry__init(e);
    inference__infer_parameter__init(p);
    if (s) {
        p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
        p->string_param = (char *)s;
    } else {
        p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
        p->int64_param = v;
    }
    e->key = (char *)key;
    e->value = p;
    return e;
}

/* Builds the ModelInferResponse of a successful result into *out (pointing into res, c and
 * a). Returns 0 or an error (an output larger than its shared-memory region). */
static int build_response(struct infer_ctx *c, const struct rtx_infer_result *res, struct arena *a,
                          Inference__ModelInferResponse *out, struct rtx_err *err) {
    inference__model_infer_response__init(out);
    out->model_name = (char *)res->model->name;
    out->model_version = rtx__infer_arena_printf(a, "%" PRId64, res->model->version);
    out->id = (char *)(res->id ? res->id : c->req->id);
    size_t n = res->n_outputs > 0 ? (size_t)res->n_outputs : 0;
    Inference__ModelInferResponse__InferOutputTensor **os =
        rtx__infer_arena_alloc(a, n * sizeof *os);
    ProtobufCBinaryData *raw = rtx__infer_arena_alloc(a, n * sizeof *raw);
    if (!os || !raw) return rtx_err_set(err, RTX_ENOMEM, "out of memory building the reply");
    bool any_raw = false, any_shm = false;
    for (size_t i = 0; i < n; i++) {
        const struct rtx_tensor *t = res->outputs[i];
        const struct out_spec *sp = out_spec_of(c, res->output_names[i]);
        Inference__ModelInferResponse__InferOutputTensor *o = rtx__infer_arena_alloc(a, sizeof *o);
        if (!o) return rtx_err_set(err, RTX_ENOMEM, "out of memory building the reply");
        inference__model_infer_response__infer_output_tensor__init(o);
        o->name = (char *)res->output_names[i];
        o->datatype = (char *)rtx_kserve_dtype_name(t->dtype);
        o->n_shape = (size_t)t->ndim;
        o->shape = (int64_t *)t->dims;
        size_t bytes = rtx_tensor_nbytes(t);
        if (sp && sp->shm.region) {
            if (bytes > (uint64_t)sp->shm.byte_size)
                return rtx_err_set(err, RTX_EINVAL,
                                   "output '%s': shared_memory_byte_size is %" PRId64 " bytes, "
                                   "too small for the %zu bytes of the result",
                                   o->name, sp->shm.byte_size, bytes);
            if (bytes) memcpy(sp->addr, rtx_tensor_data(t), bytes);
            Inference__ModelInferResponse__InferOutputTensor__ParametersEntry **pe =
                rtx__infer_arena_alloc(a, 3 * sizeof *pe);
            if (!pe) return rtx_err_set(err, RTX_ENOMEM, "out of memory building the reply");
            pe[0] = out_param(a, "shared_memory_region", sp->shm.region, 0);
            pe[1] = out_param(a, "shared_memory_byte_size", NULL, (int64_t)bytes);
            pe[2] = out_param(a, "shared_memory_offset", NULL, sp->shm.offset);
            o->n_parameters = 3;
            o->parameters = pe;
            any_shm = true;
        } else if (sp && sp->typed && typed_field(t->dtype)) {
            o->contents = typed_contents(a, t);
        } else {
            raw[i].data = rtx_tensor_data(t);
            raw[i].len = bytes;
            any_raw = true;
        }
        os[i] = o;
    }
    if (a->failed) return rtx_err_set(err, RTX_ENOMEM, "out of memory building the reply");
    out->n_outputs = n;
    out->outputs = os;
    /* one entry per output (empty for shared memory) when any output travels raw or in shared
     * memory: Triton's C++ client (perf_analyzer's) reads entry i for output i */
    out->n_raw_output_contents = any_raw || any_shm ? n : 0;
    out->raw_output_contents = raw;
    return 0;
}

/* Answers the call or the stream message with an error. */
static void answer_error(struct infer_ctx *c, const struct rtx_err *err);

static void answer_stream(struct rtx_server_bidi *st, Inference__ModelInferResponse *resp,
                          const char *error, int64_t max_bytes) {
    Inference__ModelStreamInferResponse m = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    m.infer_response = resp;
    m.error_message = (char *)(error ? error : "");
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    rtx_server_reply_pack(&rep, &m.base, max_bytes);
    if (rep.code != GRPC_STATUS_OK && resp) {
        /* too large: answer this one message with the error instead */
        answer_stream(st, NULL, rep.msg, 0);
        return;
    }
    rtx_server_bidi_reply(st, rep.data, rep.len);
}

static void answer_error(struct infer_ctx *c, const struct rtx_err *err) {
    if (c->call) {
        struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
        rtx_server_reply_err(&rep, err);
        rtx_server_async_finish(c->call, &rep);
        return;
    }
    rtx__infer_stream_error(c->stream, c->req->model_name, c->req->model_version, c->req->id,
                            err, false);
}

void rtx__infer_stream_error(struct rtx_server_bidi *st, const char *model, const char *version,
                             const char *id, const struct rtx_err *err, bool decoupled) {
    const char *msg = err->msg[0] ? err->msg : rtx_strerror(err->code);
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    r.model_name = (char *)model;
    r.model_version = (char *)version;
    r.id = (char *)id;
    /* grpc_status: the status the error would have ended a unary call with */
    Inference__InferParameter v[2] = {INFERENCE__INFER_PARAMETER__INIT,
                                      INFERENCE__INFER_PARAMETER__INIT};
    Inference__ModelInferResponse__ParametersEntry e[2] = {
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT,
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT};
    Inference__ModelInferResponse__ParametersEntry *entries[2] = {&e[0], &e[1]};
    v[0].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    v[0].int64_param = rtx_server_status_from_err(err->code);
    e[0].key = (char *)"grpc_status";
    e[0].value = &v[0];
    v[1].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    v[1].bool_param = true;
    e[1].key = (char *)"triton_final_response";
    e[1].value = &v[1];
    r.n_parameters = decoupled ? 2 : 1;
    r.parameters = entries;
    char buf[sizeof err->msg + 160];
    if (id && id[0]) {
        snprintf(buf, sizeof buf, "request '%.128s': %s", id, msg);
        msg = buf;
    }
    answer_stream(st, &r, msg, 0);
}

/* The core's completion (a worker thread). */
static void infer_done(void *ctx, const struct rtx_infer_result *res) {
    struct infer_ctx *c = ctx;
    struct rtx_err err = {0};
    if (res->code != 0) {
        rtx_err_set(&err, res->code, "%s", res->msg[0] ? res->msg : rtx_strerror(res->code));
        answer_error(c, &err);
        ctx_unref(c);
        return;
    }
    struct arena a = {0};
    Inference__ModelInferResponse resp;
    int64_t max_bytes = rtx__daemon_max_reply_bytes(c->d);
    if (build_response(c, res, &a, &resp, &err) != 0) {
        answer_error(c, &err);
    } else if (c->call) {
        struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
        rtx_server_reply_pack(&rep, &resp.base, max_bytes);
        rtx_server_async_finish(c->call, &rep);
    } else {
        answer_stream(c->stream, &resp, NULL, max_bytes);
    }
    rtx__infer_arena_free(&a);
    ctx_unref(c);
}

/* Decodes the request, checks it and queues it (or starts it on a generative model, then
 * c->generative). Returns 0 (the completion will answer) or an error in err (nothing queued;
 * the caller answers). c->req is set. */
static int infer_start(struct infer_ctx *c, const volatile int *cancel, int64_t deadline_ns,
                       struct rtx_err *err) {
    Inference__ModelInferRequest *rq = c->req;
    struct rtx_daemon *d = c->d;
    if (!d->serving)
        return rtx_err_set(err, RTX_EUNAVAILABLE,
                           "rtxd serves no models: no model repository is configured (set "
                           "models.repository)");
    if (!rq->model_name[0]) return rtx_err_set(err, RTX_EINVAL, "the model name is empty");
    int64_t version;
    if (rtx__infer_parse_version(rq->model_version, &version, err) != 0) return err->code;
    if (rtx_serving_model_get(d->serving, rq->model_name, version, &c->model, err) != 0)
        return err->code;
    if (rq->n_inputs > RTX_MODEL_MAX_IO || rq->n_outputs > RTX_MODEL_MAX_IO)
        return rtx_err_set(err, RTX_EINVAL, "%zu inputs and %zu outputs: at most %d each",
                           rq->n_inputs, rq->n_outputs, RTX_MODEL_MAX_IO);

    int priority = 0;
    const Inference__InferParameter *p = RTX__INFER_PARAM(rq, "priority");
    if (p) {
        int64_t v = 0;
        if (rtx__infer_param_int(p, "parameter 'priority'", &v, err) != 0) return err->code;
        if (v < 0 || v > INT32_MAX)
            return rtx_err_set(err, RTX_EINVAL, "parameter 'priority' %" PRId64 " is out of range",
                               v);
        priority = (int)v;
    }
    const char *lane = NULL;
    p = RTX__INFER_PARAM(rq, "lane");
    if (p) {
        if (p->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM ||
            !p->string_param || !p->string_param[0])
            return rtx_err_set(err, RTX_EINVAL,
                               "parameter 'lane' must name a lane (a non-empty string_param)");
        lane = p->string_param;
    }
    p = RTX__INFER_PARAM(rq, "timeout");
    if (p) {
        int64_t us = 0;
        if (rtx__infer_param_int(p, "parameter 'timeout' (microseconds)", &us, err) != 0)
            return err->code;
        if (us < 0)
            return rtx_err_set(err, RTX_EINVAL, "parameter 'timeout' is negative (%" PRId64 ")",
                               us);
        if (us > 0 && us < INT64_MAX / 2000) {
            int64_t t = rtx_mono_ns() + us * 1000;
            if (deadline_ns == 0 || t < deadline_ns) deadline_ns = t;
        }
    }
    p = RTX__INFER_PARAM(rq, "binary_data_output");
    if (p) {
        bool binary = true;
        if (rtx__infer_param_bool(p, "parameter 'binary_data_output'", &binary, err) != 0)
            return err->code;
        c->typed_default = !binary;
    }
    if (rtx_model_generator(c->model)) {
        struct rtx_infer_opts o = {.lane = lane, .priority = priority, .deadline_ns = deadline_ns};
        int rc = rtx__infer_gen_start(d, rq, c->model, &o, c->call, c->stream, err);
        if (rc == 0) {
            c->model = NULL; /* taken over by the generation */
            c->generative = true;
        }
        return rc;
    }

    size_t raw_next = 0;
    c->n_in = (int)rq->n_inputs;
    for (int i = 0; i < c->n_in; i++)
        if (decode_input(c, i, &raw_next, err) != 0) return err->code;
    if (raw_next < rq->n_raw_input_contents)
        return rtx_err_set(err, RTX_EINVAL,
                           "%zu raw_input_contents given, but only %zu inputs take their data "
                           "from it",
                           rq->n_raw_input_contents, raw_next);
    c->n_out = (int)rq->n_outputs;
    for (int i = 0; i < c->n_out; i++)
        if (decode_output(c, i, err) != 0) return err->code;

    struct rtx_infer_request ir = {
        .model = c->model,
        .id = rq->id[0] ? rq->id : NULL,
        .n_inputs = c->n_in,
        .inputs = c->in,
        .n_outputs = c->n_out,
        .outputs = c->out_names,
        .deadline_ns = deadline_ns,
        .priority = priority,
        .lane = lane,
        .cancel = cancel,
        .done = infer_done,
        .ctx = c,
    };
    int rc = rtx_serving_infer(d->serving, &ir, err);
    /* a batch above max_batch_size is a bad request to Triton, not an exhausted resource */
    if (rc == RTX_ELIMIT) rc = err->code = RTX_EINVAL;
    return rc;
}

/* Drops what the handler holds after rtx_serving_infer took its own references. */
static void drop_inputs(struct infer_ctx *c) {
    for (int i = 0; i < c->n_in; i++) {
        rtx_tensor_unref(c->in[i].tensor);
        c->in[i].tensor = NULL;
    }
}

/* A new context for one request, or NULL when out of memory. refs = 2: the completion's and
 * the handler's (the completion may run, on a worker, before rtx_serving_infer returns). */
static struct infer_ctx *ctx_new(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                 struct rtx_err *err) {
    struct infer_ctx *c = rtx_calloc(1, sizeof *c);
    if (!c) {
        rtx_err_set(err, RTX_ENOMEM, "out of memory for an inference request");
        return NULL;
    }
    atomic_init(&c->refs, 2);
    c->d = d;
    c->req = inference__model_infer_request__unpack(NULL, len, req);
    if (!c->req) {
        rtx_free(c);
        rtx_err_set(err, RTX_EINVAL, "malformed inference.ModelInferRequest");
        return NULL;
    }
    return c;
}

void rtx__infer_model_infer(struct rtx_daemon *d, const uint8_t *req, size_t len,
                            struct rtx_server_async *call) {
    struct rtx_err err = {0};
    struct infer_ctx *c = ctx_new(d, req, len, &err);
    if (!c) {
        struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
        rtx_server_reply_err(&rep, &err);
        rtx_server_async_finish(call, &rep);
        return;
    }
    c->call = call;
    int rc = infer_start(c, rtx_server_async_cancel_flag(call), rtx_server_async_deadline_ns(call),
                         &err);
    drop_inputs(c);
    if (rc != 0) answer_error(c, &err);
    if (rc != 0 || c->generative) ctx_unref(c); /* the completion's: it will not run */
    ctx_unref(c);                               /* the handler's */
}

void rtx__infer_model_stream_infer(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                   struct rtx_server_bidi *st) {
    struct rtx_err err = {0};
    struct infer_ctx *c = ctx_new(d, req, len, &err);
    if (!c) {
        answer_stream(st, NULL, err.msg, 0);
        return;
    }
    c->stream = st;
    int rc =
        infer_start(c, rtx_server_bidi_cancel_flag(st), rtx_server_bidi_deadline_ns(st), &err);
    drop_inputs(c);
    if (rc != 0) answer_error(c, &err);
    if (rc != 0 || c->generative) ctx_unref(c); /* the completion's: it will not run */
    ctx_unref(c);                               /* the handler's */
}
