/*
 * handlers-infer-gen.c - ModelInfer and ModelStreamInfer on a generative model (a decoupled
 * model in Triton's terms): decoding text_input and the optional stream,
 * sampling_parameters and exclude_input_in_output inputs from any of their KServe forms,
 * starting the generation (kserve-gen.c) and turning its outputs into responses.
 *
 * DESIGN
 * On a stream every output is one ModelStreamInferResponse carrying text_output (BYTES [n],
 * in raw_output_contents with 4-byte length prefixes, as Triton sends it) and the parameter
 * triton_final_response: false, then true on the last, which also carries finish_reason,
 * prompt_tokens, completion_tokens and cached_tokens. A request that set the parameter
 * triton_enable_empty_final_response (tritonclient's enable_empty_final_response) gets every
 * output with false and then an empty response (no outputs) with true, as Triton answers
 * such clients. A failure is one error_message, flagged final as well. A unary call gets the
 * final output as its response.
 * The outputs are packed and queued on the engine's thread (the stream writes them in
 * order). A watch on the call cancels the generation when the client cancels or goes away,
 * the deadline passes or the server shuts down, so the sequence and its KV blocks are freed
 * by the engine's next step. The call context holds the generation's reference and is itself
 * held by the handler, the generation's end and the watch; the watch is removed before the
 * last answer, after which the call must not be touched.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "daemon/handlers-infer-impl.h"
#include "daemon/kserve.h"
#include "daemon/log.h"

/* ------------------------------------------------------------------------------------------
 * Inputs
 * ---------------------------------------------------------------------------------------- */

/* The decoded inputs; strings point into the request or a mapped region (refs). */
struct gen_inputs {
    struct rtx_kserve_str text, sampling;
    bool has_text, has_sampling;
    int stream, exclude; /* -1: absent */
    struct rtx_shm_ref *refs[RTX_MODEL_MAX_IO];
    int n_refs;
};

static void inputs_release(struct gen_inputs *in) {
    for (int i = 0; i < in->n_refs; i++)
        rtx_shm_ref_release(in->refs[i]);
}

/* The typed contents given for input x: BYTES in bytes_contents, BOOL in bool_contents,
 * nothing in any other field. Returns the element count or -1 (err set). */
static int64_t typed_elements(const Inference__ModelInferRequest__InferInputTensor *x, bool bytes,
                              struct rtx_err *err) {
    const Inference__InferTensorContents *tc = x->contents;
    size_t right = bytes ? tc->n_bytes_contents : tc->n_bool_contents;
    size_t all = tc->n_bool_contents + tc->n_int_contents + tc->n_int64_contents +
                 tc->n_uint_contents + tc->n_uint64_contents + tc->n_fp32_contents +
                 tc->n_fp64_contents + tc->n_bytes_contents;
    if (all != right) {
        rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %s expects its data in %s", x->name,
                    x->datatype, bytes ? "bytes_contents" : "bool_contents");
        return -1;
    }
    return (int64_t)right;
}

/* Decodes one input of the model (io) holding one element into in. raw_next: the next
 * unused raw_input_contents entry. */
static int decode_one(struct rtx_daemon *d, const Inference__ModelInferRequest *rq,
                      const Inference__ModelInferRequest__InferInputTensor *x,
                      const struct rtx_model_io *io, size_t *raw_next, struct gen_inputs *in,
                      struct rtx_err *err) {
    const char *name = x->name;
    const char *want = rtx__kserve_io_datatype(io);
    if (strcmp(x->datatype, want) != 0)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %.32s, the model expects %s",
                           name, x->datatype, want);
    int64_t numel = 1;
    for (size_t k = 0; k < x->n_shape; k++) {
        if (x->shape[k] < 0 || x->shape[k] > 1 << 20)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': dimension %zu (%" PRId64 ") is "
                               "out of range",
                               name, k, x->shape[k]);
        numel *= x->shape[k];
    }
    if (numel != 1 || x->n_shape > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': its shape holds %" PRId64 " elements; the model takes "
                           "one (shape [1])",
                           name, numel);
    struct shm_param sp;
    int has_shm = rtx__infer_shm_param(x->n_parameters, x->parameters, "input", name, &sp, err);
    if (has_shm < 0) return has_shm;
    const void *data = NULL;
    size_t len = 0;
    struct rtx_kserve_str el = {0};
    if (has_shm) {
        if (x->contents)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': contents given together with a shared-memory region",
                               name);
        if (!d->shm) return rtx_err_set(err, RTX_EUNAVAILABLE, "no shared-memory registry");
        void *addr = NULL;
        if (rtx_shm_map(d->shm, sp.region, (uint64_t)sp.offset, (uint64_t)sp.byte_size, &addr,
                        &in->refs[in->n_refs], err) != 0)
            return rtx_err_prefix(err, "input '%s'", name);
        in->n_refs++;
        data = addr;
        len = (size_t)sp.byte_size;
    } else if (x->contents) {
        int64_t n = typed_elements(x, io->bytes, err);
        if (n < 0) return err->code;
        if (n != 1)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': %" PRId64 " elements in %s, but its shape holds 1",
                               name, n, io->bytes ? "bytes_contents" : "bool_contents");
        if (io->bytes)
            el = (struct rtx_kserve_str){(const char *)x->contents->bytes_contents[0].data,
                                         x->contents->bytes_contents[0].len};
        else
            el = (struct rtx_kserve_str){x->contents->bool_contents[0] ? "\1" : "", 1};
    } else {
        const ProtobufCBinaryData *raw = rtx__infer_raw_input(rq, raw_next, name, err);
        if (!raw) return err->code;
        data = raw->data;
        len = raw->len;
    }
    if (data && io->bytes) {
        if (rtx__kserve_bytes_split(data, len, 1, name, &el, err) != 0) return err->code;
    } else if (data) {
        if (len != 1)
            return rtx_err_set(err, RTX_EINVAL, "input '%s': %zu bytes, but BOOL [1] takes 1",
                               name, len);
        el = (struct rtx_kserve_str){((const char *)data)[0] ? "\1" : "", 1};
    }
    if (strcmp(io->name, "text_input") == 0) {
        in->text = el;
        in->has_text = true;
    } else if (strcmp(io->name, "sampling_parameters") == 0) {
        in->sampling = el;
        in->has_sampling = true;
    } else if (strcmp(io->name, "stream") == 0) {
        in->stream = el.data[0] != 0;
    } else if (strcmp(io->name, "exclude_input_in_output") == 0) {
        in->exclude = el.data[0] != 0;
    } else {
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "input '%s' of a generative model is not one "
                           "rtxd reads",
                           name);
    }
    return 0;
}

static int decode_inputs(struct rtx_daemon *d, const Inference__ModelInferRequest *rq,
                         const struct rtx_model_info *info, struct gen_inputs *in,
                         struct rtx_err *err) {
    size_t raw_next = 0;
    bool seen[RTX_MODEL_MAX_IO] = {false};
    for (size_t i = 0; i < rq->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *x = rq->inputs[i];
        int k = 0;
        while (k < info->n_inputs && strcmp(info->inputs[k].name, x->name) != 0)
            k++;
        if (k == info->n_inputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown input '%.128s' for model '%s'", x->name,
                               info->name);
        if (seen[k]) return rtx_err_set(err, RTX_EINVAL, "input '%s' is given twice", x->name);
        seen[k] = true;
        int rc = decode_one(d, rq, x, &info->inputs[k], &raw_next, in, err);
        if (rc) return rc;
    }
    if (raw_next < rq->n_raw_input_contents)
        return rtx_err_set(err, RTX_EINVAL,
                           "%zu raw_input_contents given, but only %zu inputs take their data "
                           "from it",
                           rq->n_raw_input_contents, raw_next);
    for (size_t i = 0; i < rq->n_outputs; i++) {
        const char *name = rq->outputs[i]->name;
        int k = 0;
        while (k < info->n_outputs && strcmp(info->outputs[k].name, name) != 0)
            k++;
        if (k == info->n_outputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown output '%.128s' for model '%s'", name,
                               info->name);
        if (RTX__INFER_PARAM(rq->outputs[i], "shared_memory_region"))
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "output '%s': a generative model's outputs are not written to "
                               "shared memory",
                               name);
    }
    return 0;
}

/* The request's parameters as a JSON object (the sampling fields among them are applied by
 * kserve-gen.c), or NULL when out of memory. */
static json_t *params_json(const Inference__ModelInferRequest *rq) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < rq->n_parameters; i++) {
        const Inference__InferParameter *p = rq->parameters[i]->value;
        const char *key = rq->parameters[i]->key;
        if (!p || !key) continue;
        json_t *v = NULL;
        switch (p->parameter_choice_case) {
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
            v = json_boolean(p->bool_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
            v = json_integer(p->int64_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
            v = p->uint64_param <= INT64_MAX ? json_integer((json_int_t)p->uint64_param)
                                             : json_real((double)p->uint64_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
            v = json_real(p->double_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
            v = json_string(p->string_param ? p->string_param : "");
            break;
        default: continue;
        }
        if (!v || json_object_set_new(o, key, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* ------------------------------------------------------------------------------------------
 * Answers
 * ---------------------------------------------------------------------------------------- */

struct gen_call {
    atomic_int refs; /* the handler's, the generation end's, the watch's */
    struct rtx_daemon *d;
    struct rtx_server_async *call; /* exactly one of call and st */
    struct rtx_server_bidi *st;
    struct rtx_server_watch watch;
    _Atomic(struct rtx_kserve_gen *) g; /* set once started */
    atomic_bool gone;                   /* the watch fired */
    char model[128], version[24], id[256];
    bool empty_final; /* triton_enable_empty_final_response */
    bool answered;    /* the last answer went out */
};

static void call_unref(struct gen_call *gc) {
    if (atomic_fetch_sub(&gc->refs, 1) != 1) return;
    rtx__kserve_gen_unref(atomic_load(&gc->g));
    rtx_free(gc);
}

/* The client went away (a completion-queue thread). The watch is set before the generation
 * starts: whichever of this and the start comes second cancels it. */
static void on_gone(void *ctx) {
    struct gen_call *gc = ctx;
    atomic_store(&gc->gone, true);
    struct rtx_kserve_gen *g = atomic_load(&gc->g);
    if (g) rtx__kserve_gen_cancel(g);
    call_unref(gc); /* the watch's */
}

/* Removes the watch before the last answer (after it the call may be gone). */
static void unwatch(struct gen_call *gc) {
    bool removed = gc->call ? rtx_server_async_unwatch(gc->call, &gc->watch)
                            : rtx_server_bidi_unwatch(gc->st, &gc->watch);
    if (removed) call_unref(gc); /* the watch's: on_gone will not run */
}

typedef Inference__ModelInferResponse__ParametersEntry resp_param;

static void param_set(resp_param *e, Inference__InferParameter *v, const char *key) {
    inference__model_infer_response__parameters_entry__init(e);
    e->key = (char *)key;
    e->value = v;
}

/* Packs one response (o NULL: an empty one) and hands it to the call: a stream message
 * (last: the request's last answer) or the unary call's answer. */
static void answer(struct gen_call *gc, const struct rtx_kserve_gen_output *o, bool final,
                   bool last) {
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    r.model_name = gc->model;
    r.model_version = gc->version;
    r.id = gc->id;
    Inference__ModelInferResponse__InferOutputTensor out =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    Inference__ModelInferResponse__InferOutputTensor *outs[1] = {&out};
    int64_t shape[1] = {o ? o->n : 0};
    ProtobufCBinaryData raw = {0, NULL};
    struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
    if (o) {
        out.name = (char *)"text_output";
        out.datatype = (char *)"BYTES";
        out.n_shape = 1;
        out.shape = shape;
        raw.len = rtx__kserve_bytes_size(o->text, o->n);
        raw.data = rtx_malloc(raw.len ? raw.len : 1);
        if (!raw.data) {
            rtx_server_reply_status(&rep, GRPC_STATUS_INTERNAL, "out of memory packing a reply");
            goto send;
        }
        rtx__kserve_bytes_write(o->text, o->n, raw.data);
        r.n_outputs = 1;
        r.outputs = outs;
        r.n_raw_output_contents = 1;
        r.raw_output_contents = &raw;
    }
    Inference__InferParameter v[5];
    resp_param e[5];
    resp_param *entries[5];
    for (int i = 0; i < 5; i++) {
        inference__infer_parameter__init(&v[i]);
        entries[i] = &e[i];
    }
    size_t n = 0;
    if (gc->st) {
        v[n].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
        v[n].bool_param = final;
        param_set(&e[n], &v[n], "triton_final_response");
        n++;
    }
    if (o && o->finish_reason) {
        v[n].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
        v[n].string_param = (char *)o->finish_reason;
        param_set(&e[n], &v[n], "finish_reason");
        n++;
    }
    if (o && o->usage) {
        static const char *const keys[3] = {"prompt_tokens", "completion_tokens", "cached_tokens"};
        const int counts[3] = {o->usage->prompt_tokens, o->usage->completion_tokens,
                               o->usage->cached_tokens};
        for (int i = 0; i < 3; i++, n++) {
            v[n].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            v[n].int64_param = counts[i];
            param_set(&e[n], &v[n], keys[i]);
        }
    }
    r.n_parameters = n;
    r.parameters = entries;
    int64_t max_bytes = rtx__daemon_max_reply_bytes(gc->d);
    if (gc->call) {
        rtx_server_reply_pack(&rep, &r.base, max_bytes);
    } else {
        Inference__ModelStreamInferResponse m = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
        m.infer_response = &r;
        rtx_server_reply_pack(&rep, &m.base, max_bytes);
    }
send:
    rtx_free(raw.data);
    if (gc->call) {
        rtx_server_async_finish(gc->call, &rep);
    } else if (rep.code != GRPC_STATUS_OK) {
        /* too large, or out of memory: this request ends with the error */
        struct rtx_err err = {.code = RTX_ELIMIT};
        snprintf(err.msg, sizeof err.msg, "%s", rep.msg);
        rtx__kserve_gen_cancel(atomic_load(&gc->g));
        if (!gc->answered)
            rtx__infer_stream_error(gc->st, gc->model, gc->version, gc->id, &err, true);
        gc->answered = true;
    } else if (last) {
        rtx_server_bidi_reply(gc->st, rep.data, rep.len);
    } else {
        rtx_server_bidi_send(gc->st, rep.data, rep.len);
    }
}

/* An output of the generation (the engine's thread). */
static void on_output(void *ctx, const struct rtx_kserve_gen_output *o) {
    struct gen_call *gc = ctx;
    if (gc->answered) return;
    if (!o->final) {
        answer(gc, o, false, false);
        return;
    }
    unwatch(gc);
    if (gc->call || !gc->empty_final) {
        answer(gc, o, true, true);
    } else {
        answer(gc, o, false, false);
        answer(gc, NULL, true, true);
    }
    gc->answered = true;
}

/* The generation's end (the engine's thread). */
static void on_end(void *ctx, int status, const struct rtx_err *err) {
    struct gen_call *gc = ctx;
    if (status != 0 && !gc->answered) {
        unwatch(gc);
        struct rtx_err e = err ? *err : (struct rtx_err){.code = status};
        if (gc->call) {
            struct rtx_server_reply rep = {.code = GRPC_STATUS_OK};
            rtx_server_reply_err(&rep, &e);
            rtx_server_async_finish(gc->call, &rep);
        } else {
            rtx__infer_stream_error(gc->st, gc->model, gc->version, gc->id, &e, true);
        }
        gc->answered = true;
    }
    call_unref(gc); /* the end's */
}

/* ------------------------------------------------------------------------------------------
 * Start
 * ---------------------------------------------------------------------------------------- */

int rtx__infer_gen_start(struct rtx_daemon *d, const Inference__ModelInferRequest *rq,
                         struct rtx_model *m, const struct rtx_infer_opts *o,
                         struct rtx_server_async *call, struct rtx_server_bidi *st,
                         struct rtx_err *err) {
    const struct rtx_model_info *info = rtx_model_info(m);
    if (o->priority)
        return rtx_err_set(err, RTX_EINVAL,
                           "parameter 'priority': generative models take an SLA lane instead "
                           "(parameter 'lane')");
    bool empty_final = false;
    const Inference__InferParameter *p =
        RTX__INFER_PARAM(rq, "triton_enable_empty_final_response");
    if (p && rtx__infer_param_bool(p, "parameter 'triton_enable_empty_final_response'",
                                   &empty_final, err) != 0)
        return err->code;
    struct gen_inputs in = {.stream = -1, .exclude = -1};
    int rc = decode_inputs(d, rq, info, &in, err);
    json_t *params = rc ? NULL : params_json(rq);
    if (rc == 0 && !params) rc = rtx_err_set(err, RTX_ENOMEM, "out of memory");
    struct gen_call *gc = rc ? NULL : rtx_calloc(1, sizeof *gc);
    if (rc == 0 && !gc) rc = rtx_err_set(err, RTX_ENOMEM, "out of memory");
    if (rc) {
        json_decref(params);
        inputs_release(&in);
        return rc;
    }
    atomic_init(&gc->refs, 3); /* the handler's, the end's, the watch's */
    gc->d = d;
    gc->call = call;
    gc->st = st;
    gc->empty_final = empty_final;
    snprintf(gc->model, sizeof gc->model, "%s", info->name);
    snprintf(gc->version, sizeof gc->version, "%" PRId64, info->version);
    snprintf(gc->id, sizeof gc->id, "%s", rq->id);
    struct rtx_kserve_gen_args a = {
        .model = m,
        .text = in.has_text ? in.text.data : NULL,
        .text_len = in.text.len,
        .stream = in.stream,
        .exclude_input = in.exclude,
        .sampling = in.has_sampling ? in.sampling.data : NULL,
        .sampling_len = in.sampling.len,
        .params = params,
        .unary = call != NULL,
        .lane = o->lane,
        .deadline_ns = o->deadline_ns,
        .on_output = on_output,
        .on_end = on_end,
        .ctx = gc,
    };
    gc->watch.fn = on_gone;
    gc->watch.ctx = gc;
    bool watching =
        call ? rtx_server_async_watch(call, &gc->watch) : rtx_server_bidi_watch(st, &gc->watch);
    if (!watching) on_gone(gc); /* the call is over already */
    struct rtx_kserve_gen *g = NULL;
    rc = rtx__kserve_gen_start(&a, &g, err);
    json_decref(params);
    inputs_release(&in);
    if (rc) {
        if (watching) unwatch(gc);
        call_unref(gc); /* the end's: it will not run */
    } else {
        atomic_store(&gc->g, g);
        if (atomic_load(&gc->gone)) rtx__kserve_gen_cancel(g);
    }
    call_unref(gc); /* the handler's */
    return rc;
}
