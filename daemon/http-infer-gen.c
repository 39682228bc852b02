/*
 * http-infer-gen.c - POST /v2/models/{m}/infer on a generative model: text_input and the
 * optional stream, sampling_parameters and exclude_input_in_output inputs of a decoded
 * request (http-infer.c) become a generation (kserve-gen.c) whose whole text is the answer
 * (text_output, BYTES [n]). Streaming answers belong to the generate extension's endpoints.
 *
 * DESIGN
 * The answer is rendered on the engine's thread when the generation ends and queued for the
 * loop like any inference answer; a client that goes away cancels the generation through
 * rtx__http_pending_cancel, so its sequence is freed by the engine's next step.
 */
#include <string.h>

#include "daemon/http-impl.h"

/* The final output (the engine's thread). */
static void on_output(void *ctx, const struct rtx_kserve_gen_output *o) {
    struct pending *p = ctx;
    struct rtx_http_body b;
    struct rtx_err err = {0};
    if (rtx__http_infer_render_text(p->q, p->kgen_model, o, &b, &err) != 0) {
        rtx__http_pending_error(p, rtx__http_status_from_err(err.code), err.msg);
        return;
    }
    p->status = 200;
    p->body = b.data;
    p->len = b.len;
    p->header_len = b.header_len;
}

/* The end of the generation (the engine's thread). */
static void on_end(void *ctx, int status, const struct rtx_err *err) {
    struct pending *p = ctx;
    if (status != 0)
        rtx__http_pending_error(p, rtx__http_status_from_err(status),
                                err && err->msg[0] ? err->msg : rtx_strerror(status));
    rtx__http_pending_done(p);
}

/* The one element of input i, which must be of the model's io. */
static int element(const struct rtx_http_infer *q, int i, const struct rtx_model_io *io,
                   struct rtx_kserve_str *out, struct rtx_err *err) {
    const char *name = q->inputs[i].name;
    const struct rtx_tensor *t = q->inputs[i].tensor;
    const char *got = q->bytes[i].s ? "BYTES" : rtx_kserve_dtype_name(t->dtype);
    if (strcmp(got, rtx__kserve_io_datatype(io)) != 0)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %s, the model expects %s", name,
                           got, rtx__kserve_io_datatype(io));
    int64_t n = q->bytes[i].s ? q->bytes[i].n : rtx_tensor_numel(t);
    if (n != 1)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': its shape holds %lld elements; the model takes one "
                           "(shape [1])",
                           name, (long long)n);
    if (q->bytes[i].s)
        *out = q->bytes[i].s[0];
    else
        *out = (struct rtx_kserve_str){((const char *)rtx_tensor_data(t))[0] ? "\1" : "", 1};
    return 0;
}

static int decode(const struct rtx_http_infer *q, const struct rtx_model_info *info,
                  struct rtx_kserve_gen_args *a, struct rtx_err *err) {
    bool seen[RTX_MODEL_MAX_IO] = {false};
    for (int i = 0; i < q->n_inputs; i++) {
        int k = 0;
        while (k < info->n_inputs && strcmp(info->inputs[k].name, q->inputs[i].name) != 0)
            k++;
        if (k == info->n_inputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown input '%.128s' for model '%s'",
                               q->inputs[i].name, info->name);
        if (seen[k])
            return rtx_err_set(err, RTX_EINVAL, "input '%s' is given twice", q->inputs[i].name);
        seen[k] = true;
        struct rtx_kserve_str el = {0};
        int rc = element(q, i, &info->inputs[k], &el, err);
        if (rc) return rc;
        const char *name = info->inputs[k].name;
        if (strcmp(name, "text_input") == 0) {
            a->text = el.data;
            a->text_len = el.len;
        } else if (strcmp(name, "sampling_parameters") == 0) {
            a->sampling = el.data;
            a->sampling_len = el.len;
        } else if (strcmp(name, "stream") == 0) {
            a->stream = el.data[0] != 0;
        } else if (strcmp(name, "exclude_input_in_output") == 0) {
            a->exclude_input = el.data[0] != 0;
        } else {
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "input '%s' of a generative model is not one rtxd reads", name);
        }
    }
    for (int i = 0; i < q->n_outputs; i++) {
        int k = 0;
        while (k < info->n_outputs && strcmp(info->outputs[k].name, q->outputs[i].name) != 0)
            k++;
        if (k == info->n_outputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown output '%.128s' for model '%s'",
                               q->outputs[i].name, info->name);
        if (q->outputs[i].shm_region)
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "output '%s': a generative model's outputs are not written to "
                               "shared memory",
                               q->outputs[i].name);
    }
    if (q->priority)
        return rtx_err_set(err, RTX_EINVAL,
                           "parameter priority: generative models take an SLA lane instead "
                           "(parameter lane)");
    return 0;
}

int rtx__http_infer_gen(struct pending *p, struct rtx_model *m, int64_t deadline_ns,
                        struct rtx_err *err) {
    const struct rtx_model_info *info = rtx_model_info(m);
    struct rtx_kserve_gen_args a = {
        .model = m,
        .stream = -1,
        .exclude_input = -1,
        .params = p->q->params,
        .unary = true,
        .lane = p->q->lane,
        .deadline_ns = deadline_ns,
        .on_output = on_output,
        .on_end = on_end,
        .ctx = p,
    };
    int rc = decode(p->q, info, &a, err);
    if (rc) return rc;
    p->kgen_model = info;
    return rtx__kserve_gen_start(&a, &p->kgen, err);
}
