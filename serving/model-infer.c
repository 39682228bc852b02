/*
 * model-infer.c - rtx_serving_infer, the inference entry point: checks a request against the
 * version's inputs, builds the queued request (zero tensors for optional inputs left out),
 * picks its lane and admits it to the version's SLA scheduler or refuses it at once.
 *
 * DESIGN
 * The lane is the request's lane, else its KServe priority, else the model's default lane,
 * else the server's. The scheduler admits the request there or it is refused at once with
 * RTX_EOVERLOAD and a retry hint (lane full, deadline unmeetable, lane shed by brownout); a
 * request whose deadline has passed already is RTX_EEXPIRED. Admitted requests wait for the
 * batcher (model-batcher.c).
 */
#include <stdio.h>
#include <string.h>

#include "serving/model-impl.h"

static int check_input(const struct rtx_model_info *info, const struct rtx_model_io *io,
                       const struct rtx_tensor *t, int *batch, struct rtx_err *err) {
    char got[96], want[96];
    int off = info->max_batch_size > 0 ? 1 : 0;
    if (t->dtype != io->dtype)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': datatype %s, the model expects %s",
                           io->name, rtx_kserve_dtype_name(t->dtype),
                           rtx_kserve_dtype_name(io->dtype));
    bool ok = t->ndim == io->ndim + off;
    for (int d = 0; ok && d < io->ndim; d++)
        ok = io->dims[d] < 0 || io->dims[d] == t->dims[d + off];
    if (!ok) {
        int64_t wd[RTX_MAX_DIMS];
        if (off) wd[0] = -1;
        memcpy(wd + off, io->dims, sizeof io->dims[0] * (size_t)io->ndim);
        return rtx_err_set(err, RTX_EINVAL, "input '%s': shape %s, the model expects %s%s",
                           io->name, rtx_shape_str(t->dtype, t->ndim, t->dims, got, sizeof got),
                           rtx_shape_str(io->dtype, io->ndim + off, wd, want, sizeof want),
                           off ? " (-1 first: the batch)" : "");
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] == 0 && !(off && d == 0))
            return rtx_err_set(err, RTX_EINVAL, "input '%s': dimension %d is 0", io->name, d);
    int b = off ? (int)(t->dims[0] < INT32_MAX ? t->dims[0] : INT32_MAX) : 1;
    if (off && b < 1)
        return rtx_err_set(err, RTX_EINVAL, "input '%s': batch size 0", io->name);
    if (off && b > info->max_batch_size)
        return rtx_err_set(err, RTX_ELIMIT, "input '%s': batch size %d exceeds the model's "
                           "max_batch_size %d", io->name, b, info->max_batch_size);
    if (*batch && *batch != b)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': batch size %d differs from the other inputs' %d",
                           io->name, b, *batch);
    *batch = b;
    return 0;
}

/* A zero tensor for an optional input the request left out (-1 dimensions are 1). */
int rtx__zero_input(const struct rtx_model_info *info, const struct rtx_model_io *io, int batch,
                    struct rtx_tensor **out, struct rtx_err *err) {
    int64_t dims[RTX_MAX_DIMS];
    int off = info->max_batch_size > 0 ? 1 : 0;
    if (off) dims[0] = batch;
    for (int d = 0; d < io->ndim; d++)
        dims[d + off] = io->dims[d] < 0 ? 1 : io->dims[d];
    return rtx_tensor_new(io->dtype, io->ndim + off, dims, out, err);
}

static int build_request(struct rtx_model *m, const struct rtx_infer_request *req,
                         struct request *r, struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    int batch = 0, rc;
    if (req->n_inputs < 0 || (req->n_inputs > 0 && !req->inputs))
        return rtx_err_set(err, RTX_EINVAL, "bad input list");
    for (int k = 0; k < req->n_inputs; k++) {
        const struct rtx_infer_input *x = &req->inputs[k];
        if (!x->name || !x->tensor)
            return rtx_err_set(err, RTX_EINVAL, "input %d has no name or no tensor", k);
        int i = 0;
        while (i < info->n_inputs && strcmp(info->inputs[i].name, x->name) != 0)
            i++;
        if (i == info->n_inputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown input '%.128s' for model '%s'",
                               x->name, info->name);
        if (r->in[i])
            return rtx_err_set(err, RTX_EINVAL, "input '%s' is given twice", x->name);
        if ((rc = check_input(info, &info->inputs[i], x->tensor, &batch, err))) return rc;
        if ((rc = rtx_tensor_contiguous(x->tensor, &r->in[i], err))) return rc;
    }
    for (int i = 0; i < info->n_inputs; i++) {
        if (r->in[i]) continue;
        if (!info->inputs[i].optional)
            return rtx_err_set(err, RTX_EINVAL, "missing input '%s'", info->inputs[i].name);
    }
    r->batch = batch ? batch : 1;
    for (int i = 0; i < info->n_inputs; i++)
        if (!r->in[i] && (rc = rtx__zero_input(info, &info->inputs[i], r->batch, &r->in[i], err)))
            return rc;
    if (req->n_outputs < 0 || (req->n_outputs > 0 && !req->outputs))
        return rtx_err_set(err, RTX_EINVAL, "bad output list");
    if (req->n_outputs == 0) {
        r->n_out = info->n_outputs;
        for (int j = 0; j < info->n_outputs; j++)
            r->out_idx[j] = j;
    }
    for (int k = 0; k < req->n_outputs; k++) {
        const char *name = req->outputs[k] ? req->outputs[k] : "";
        int j = 0;
        while (j < info->n_outputs && strcmp(info->outputs[j].name, name) != 0)
            j++;
        if (j == info->n_outputs)
            return rtx_err_set(err, RTX_EINVAL, "unknown output '%.128s' for model '%s'", name,
                               info->name);
        for (int q = 0; q < r->n_out; q++)
            if (r->out_idx[q] == j)
                return rtx_err_set(err, RTX_EINVAL, "output '%s' is requested twice", name);
        r->out_idx[r->n_out++] = j;
    }
    if (req->id && !(r->id = rtx_strdup(req->id)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory queuing a request");
    return 0;
}

/* The request's lane: its lane by name, else its priority (1 = the first lane), else the
 * version's default lane. RTX_EINVAL naming an unknown lane or a negative priority. Under
 * m->mu. */
static int pick_lane(struct rtx_model *m, const struct rtx_infer_request *req,
                     struct rtx_err *err) {
    if (req->lane && req->lane[0]) {
        int lane = rtx_sched_lane_find(m->sched, req->lane);
        if (lane < 0)
            return rtx_err_set(err, RTX_EINVAL, "unknown lane '%.64s' for model '%s'",
                               req->lane, m->cfg.info.name);
        return lane;
    }
    /* with dynamic_batching.priority_levels, a priority beyond them is the default level */
    bool beyond = m->cfg.priority_levels > 0 && req->priority > m->cfg.priority_levels;
    if (req->priority != 0 && !beyond) {
        int lane = rtx_sched_lane_for_priority(m->sched, req->priority, m->default_lane);
        if (lane < 0)
            return rtx_err_set(err, RTX_EINVAL, "priority %d is negative", req->priority);
        return lane;
    }
    return m->default_lane;
}

/* The deadline of a request in a lane: the lane's queue policy's default timeout
 * (dynamic_batching's default_timeout_microseconds) replaces the request's own, which may only
 * shorten it and only when the policy allows overrides (Triton's rule). */
static int64_t lane_deadline(const struct rtx_model *m, int lane, int64_t own, int64_t now) {
    const struct rtx__queue_policy *q = &m->lane_policy[lane];
    if (!q->set || q->timeout_us <= 0) return own;
    int64_t d = now + q->timeout_us * 1000;
    return q->allow_override && own > 0 && own < d ? own : d;
}

int rtx_serving_infer(struct rtx_serving *s, const struct rtx_infer_request *req,
                      struct rtx_err *err) {
    if (!s || !req || !req->model || !req->done)
        return rtx_err_set(err, RTX_EINVAL, "infer: no server, request, model or callback");
    struct rtx_model *m = req->model;
    if (m->gen) {
        rtx__stats_reject(m->stats);
        return rtx_err_set(err, RTX_EINVAL,
                           "model '%s' is a generative model: send text_input through "
                           "ModelStreamInfer, generate, generate_stream or /v1/completions",
                           m->cfg.info.name);
    }
    struct request *r = rtx_calloc(1, sizeof *r);
    if (!r) {
        rtx__stats_reject(m->stats);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory queuing a request");
    }
    int rc = build_request(m, req, r, err);
    if (rc) {
        rtx__request_free(r);
        rtx__stats_reject(m->stats);
        return rc;
    }
    r->m = rtx__model_ref(m);
    r->deadline_ns = req->deadline_ns;
    r->cancel = req->cancel;
    r->done = req->done;
    r->ctx = req->ctx;
    r->t_enqueue = rtx_mono_ns();
    char why[256];
    pthread_mutex_lock(&m->mu);
    int lane = -1;
    if (m->stopping) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE, "model '%s' version %lld is unloading",
                         m->cfg.info.name, (long long)m->cfg.info.version);
    } else if (rtx__model_healthy(m, why, sizeof why)) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE, "%s", why);
    } else if (m->n_queued >= m->max_queue) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE,
                         "model '%s': queue full (%lld requests waiting)", m->cfg.info.name,
                         (long long)m->n_queued);
    } else if (req->deadline_ns > 0 && req->deadline_ns <= r->t_enqueue) {
        /* passed already: no retry would help, so this is an expiry, not an overload */
        rc = rtx_err_set(err, RTX_EEXPIRED, "deadline expired %.3f ms before the request "
                         "could be queued", (double)(r->t_enqueue - req->deadline_ns) / 1e6);
    } else if ((lane = pick_lane(m, req, err)) >= 0) {
        r->deadline_ns = lane_deadline(m, lane, req->deadline_ns, r->t_enqueue);
        struct rtx_sched_request sr = {
            .data = r, .lane = lane, .deadline_ns = r->deadline_ns, .cost_key = m->cost_key,
        };
        struct rtx_sched_reject rej;
        int e = rtx_sched_enqueue(m->sched, &sr, r->t_enqueue, &r->handle, &rej);
        if (e == RTX_EUNAVAILABLE) {
            int64_t ms = (rej.retry_after_ns + 999999) / 1000000;
            rc = rtx_err_set(err, RTX_EOVERLOAD,
                             "model '%s' version %lld overloaded (%s): %s; retry after %lld ms",
                             m->cfg.info.name, (long long)m->cfg.info.version,
                             rtx_sched_reject_name(rej.reason), rej.msg,
                             (long long)(ms > 0 ? ms : 1));
        } else if (e) {
            rc = rtx_err_set(err, e, "model '%s': the scheduler refused lane %d",
                             m->cfg.info.name, lane);
        } else {
            rtx__queue_link(m, r);
            m->n_queued++;
            pthread_cond_broadcast(&m->cv);
        }
    } else {
        rc = lane;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc == RTX_EEXPIRED) {
        rtx__stats_fail(m->stats, RTX_INFER_FAIL_EXPIRED, 0);
        rtx__request_free(r);
    } else if (rc) {
        rtx__stats_reject(m->stats);
        rtx__request_free(r);
    }
    return rc;
}
