/*
 * model-exec.c - running a model version's batches: the plan for a batch's shapes from the
 * device's plan cache, its execution on the instance's backend, the device's health after a
 * failed run, and the answers (each request's rows of the outputs) with the statistics they
 * record.
 *
 * DESIGN
 * A batch of one request runs on the request's own tensors; a larger one concatenates each
 * input along dimension 0 and each request gets a view of its rows of every output (no
 * copy). Rows are computed independently by every op a batched model may use along
 * dimension 0, so batching on and off give the same outputs.
 *
 * An ONNX version (model-onnx.c) has no graph of its own: a miss instantiates the model for
 * the batch's shapes and plans that graph, and the cache frees the graph with the plan.
 * Config reshapes are views: inputs take the model's shapes before the run, outputs the
 * config's after it.
 * Plans live in the device's plan cache (device/device.h), keyed by the version's content
 * digest, the inputs' dtypes and shapes and the limits (rtx_device_plan_key: SHA-256 over
 * about a hundred bytes per batch, ~1 us), and by the instance's backend: taken out while
 * they run (only the instance's thread runs them), kept after a successful run, dropped after
 * a failed one. A batch that fails with RTX_ENOMEM (the version's share of the device is
 * used up) is tried once more after the device's kept plans were dropped (they hold memory:
 * initializer copies, arenas), then fails its requests with RTX_ENOMEM; the instance takes
 * the next batch. Any other failed run asks the device layer to check the device
 * (rtx_device_check): a sticky error marks it unhealthy for every consumer, the message says
 * so, and the batcher stops giving the instance batches.
 */
#include <string.h>

#include "runtime/backend.h"
#include "serving/model-impl.h"

static struct rtx_batch_stat *batch_stat(struct rtx_model_stats *st, int size) {
    int i = 0;
    while (i < st->n_batch_stats && st->batch_stats[i].batch_size < size)
        i++;
    if (i < st->n_batch_stats && st->batch_stats[i].batch_size == size)
        return &st->batch_stats[i];
    if (st->n_batch_stats == RTX_MODEL_MAX_BATCH_STATS) return NULL; /* table full: not kept */
    memmove(&st->batch_stats[i + 1], &st->batch_stats[i],
            sizeof st->batch_stats[0] * (size_t)(st->n_batch_stats - i));
    st->n_batch_stats++;
    memset(&st->batch_stats[i], 0, sizeof st->batch_stats[i]);
    st->batch_stats[i].batch_size = size;
    return &st->batch_stats[i];
}

static void release_graph(void *owner) {
    rtx_graph_free(owner);
}

/* One run of the plan kept for `key` on the instance's backend, or of a new one on a miss
 * (kept after a successful run, freed after a failed one). A plan that cannot be made fails
 * as before, without a run. An ONNX version's plan on a miss is made from a graph
 * instantiated for these inputs' shapes, which the plan points into: the cache frees it with
 * the plan. */
static int run_once(struct instance *in, const uint8_t *key, struct rtx_tensor *const *ins,
                    struct rtx_tensor **outs, const volatile int *cancel, bool *ran,
                    struct rtx_err *err) {
    struct rtx_model *m = in->m;
    struct rtx_device_plan *dp = rtx_device_plan_take(in->dev, in->be, key);
    struct rtx_plan *p = dp ? rtx_device_plan_get(dp) : NULL;
    struct rtx_graph *made = NULL;
    int rc;
    if (!p) {
        const struct rtx_graph *g = m->graph;
        if (m->onnx &&
            (rc = rtx_onnx_instantiate(m->onnx, (const struct rtx_tensor *const *)ins,
                                       m->n_graph_in, &m->limits, &made, err)))
            return rc;
        if (made) g = made;
        if ((rc = rtx_plan_new(g, (const struct rtx_tensor *const *)ins, m->n_graph_in,
                               &m->limits, &p, err))) {
            rtx_graph_free(made);
            return rc;
        }
    }
    *ran = true;
    struct rtx_exec_stats st = {0};
    rc = rtx_plan_execute(p, in->be, ins, m->n_graph_in, outs, m->n_graph_out, cancel, &st, err);
    if (dp) {
        rtx_device_plan_return(in->dev, dp, rc == 0);
    } else if (rc == 0) { /* m->graph outlives the backend: no release; made goes with p */
        rtx_device_plan_keep(in->dev, in->be, key, p, rtx_device_plan_bytes(p),
                             made ? release_graph : NULL, made);
    } else {
        rtx_plan_free(p);
        rtx_graph_free(made);
    }
    return rc;
}

/* A view of t (contiguous) with its first `keep` dimensions and then dims[0..nd). */
static int reshaped(struct rtx_tensor **t, int keep, int nd, const int64_t *dims,
                    struct rtx_err *err) {
    int64_t shape[RTX_MAX_DIMS], strides[RTX_MAX_DIMS];
    memcpy(shape, (*t)->dims, sizeof shape[0] * (size_t)keep);
    memcpy(shape + keep, dims, sizeof dims[0] * (size_t)nd);
    int n = keep + nd;
    int64_t s = 1;
    for (int d = n - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
    if (rtx_shape_numel(n, shape) != rtx_tensor_numel(*t))
        return rtx_err_set(err, RTX_EINTERNAL, "reshape of %lld elements to %lld",
                           (long long)rtx_tensor_numel(*t), (long long)rtx_shape_numel(n, shape));
    struct rtx_tensor *v;
    int rc = 0;
    if (!rtx_tensor_is_contiguous(*t)) {
        if ((rc = rtx_tensor_contiguous(*t, &v, err))) return rc;
        rtx_tensor_unref(*t);
        *t = v;
    }
    rc = rtx_tensor_view(*t, n, shape, strides, (*t)->offset, &v, err);
    if (rc) return rc;
    rtx_tensor_unref(*t);
    *t = v;
    return 0;
}

int rtx__model_reshape_inputs(const struct rtx_model *m, struct rtx_tensor **ins,
                              struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    int off = c->info.max_batch_size > 0 ? 1 : 0, rc;
    for (int i = 0; i < c->info.n_inputs; i++)
        if (c->in_reshape[i].set &&
            (rc = reshaped(&ins[m->graph_in[i]], off, c->in_reshape[i].ndim,
                           c->in_reshape[i].dims, err)))
            return rc;
    return 0;
}

int rtx__model_reshape_outputs(const struct rtx_model *m, struct rtx_tensor **outs,
                               struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    int off = c->info.max_batch_size > 0 ? 1 : 0, rc;
    for (int j = 0; j < c->info.n_outputs; j++) {
        struct rtx_tensor **t = &outs[m->graph_out[j]];
        if (!c->out_reshape[j].set || !*t || (*t)->ndim < off) continue;
        if ((rc = reshaped(t, off, c->info.outputs[j].ndim, c->info.outputs[j].dims, err)))
            return rtx_err_prefix(err, "output '%s'", c->info.outputs[j].name);
    }
    return 0;
}

/* Runs the plan for `ins` (graph order) into outs (graph order, n_outputs slots). */
int rtx__instance_execute(struct instance *in, struct rtx_tensor *const *ins,
                          struct rtx_tensor **outs, const volatile int *cancel,
                          struct rtx_err *err) {
    struct rtx_model *m = in->m;
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN];
    int rc = rtx_device_plan_key(m->digest, sizeof m->digest,
                                 (const struct rtx_tensor *const *)ins, m->n_graph_in,
                                 &m->limits, key, err);
    if (rc) return rc;
    bool ran = false;
    rc = run_once(in, key, ins, outs, cancel, &ran, err);
    /* past the version's share: the plans the device keeps hold memory (ours among them);
     * drop them and try once more, as the pools retry after returning their cache */
    if (rc == RTX_ENOMEM && rtx_device_plans_clear(in->dev) > 0) {
        for (int j = 0; j < m->n_graph_out; j++) {
            rtx_tensor_unref(outs[j]);
            outs[j] = NULL;
        }
        rc = run_once(in, key, ins, outs, cancel, &ran, err);
    }
    if (rc && ran && rc != RTX_ENOMEM && rc != RTX_ECANCELED)
        rtx_device_check(in->dev, in->be, err ? err->msg : NULL, err ? sizeof err->msg : 0);
    return rc;
}

/* Runs batch[0..nb) (total rows) and answers every request. */
void rtx__instance_run_batch(struct instance *in, struct request **batch, int nb, int total) {
    struct rtx_model *m = in->m;
    const struct rtx_model_info *info = &m->cfg.info;
    struct rtx_tensor *ins[RTX_MODEL_MAX_IO] = {0};
    struct rtx_tensor **outs = rtx_calloc((size_t)m->n_graph_out + 1, sizeof *outs);
    struct rtx_err err = {0};
    int rc = 0;
    int64_t t0 = rtx_mono_ns();
    if (!outs) rc = rtx_err_set(&err, RTX_ENOMEM, "out of memory running a batch");
    for (int i = 0; i < info->n_inputs && rc == 0; i++) {
        int gi = m->graph_in[i];
        if (nb == 1) {
            ins[gi] = rtx_tensor_ref(batch[0]->in[i]);
            continue;
        }
        const struct rtx_tensor *first = batch[0]->in[i];
        int64_t dims[RTX_MAX_DIMS];
        memcpy(dims, first->dims, sizeof dims);
        dims[0] = total;
        if ((rc = rtx_tensor_new(first->dtype, first->ndim, dims, &ins[gi], &err))) break;
        uint8_t *dst = rtx_tensor_data(ins[gi]);
        for (int k = 0; k < nb; k++) {
            size_t bytes = rtx_tensor_nbytes(batch[k]->in[i]);
            memcpy(dst, rtx_tensor_data(batch[k]->in[i]), bytes);
            dst += bytes;
        }
    }
    if (rc == 0) rc = rtx__model_reshape_inputs(m, ins, &err);
    int64_t t1 = rtx_mono_ns();
    rtx_device_load_add(in->dev, 1); /* placement reads the batches in flight per executor */
    if (rc == 0) rc = rtx__instance_execute(in, ins, outs, nb == 1 ? batch[0]->cancel : NULL, &err);
    rtx_device_load_add(in->dev, -1);
    if (rc == 0) rc = rtx__model_reshape_outputs(m, outs, &err);
    int64_t t2 = rtx_mono_ns();
    for (int j = 0; j < info->n_outputs && rc == 0 && info->max_batch_size > 0; j++) {
        const struct rtx_tensor *t = outs[m->graph_out[j]];
        if (t->ndim < 1 || t->dims[0] != total)
            rc = rtx_err_set(&err, RTX_EINTERNAL,
                             "output '%s' has %lld rows for a batch of %d",
                             info->outputs[j].name, t->ndim ? (long long)t->dims[0] : 0LL, total);
    }
    /* split: each request's rows of each output it asked for (views, no copy) */
    struct rtx_tensor *(*views)[RTX_MODEL_MAX_IO] = NULL;
    if (rc == 0 && !(views = rtx_calloc((size_t)nb, sizeof *views)))
        rc = rtx_err_set(&err, RTX_ENOMEM, "out of memory splitting a batch");
    int64_t row0 = 0;
    for (int k = 0; k < nb && rc == 0; k++) {
        const struct request *r = batch[k];
        for (int j = 0; j < r->n_out && rc == 0; j++) {
            struct rtx_tensor *t = outs[m->graph_out[r->out_idx[j]]];
            if (info->max_batch_size == 0 || nb == 1) {
                views[k][j] = rtx_tensor_ref(t);
                continue;
            }
            int64_t dims[RTX_MAX_DIMS];
            memcpy(dims, t->dims, sizeof dims);
            dims[0] = r->batch;
            int64_t row_bytes = (int64_t)rtx_dtype_size(t->dtype) * t->strides[0];
            rc = rtx_tensor_view(t, t->ndim, dims, t->strides, t->offset + row0 * row_bytes,
                                 &views[k][j], &err);
        }
        row0 += r->batch;
    }
    int64_t t3 = rtx_mono_ns();
    if (rc == 0) { /* counted before the callbacks, so an answered client sees its figures */
        pthread_mutex_lock(&m->stats->mu);
        struct rtx_model_stats *st = &m->stats->st;
        st->execution_count++;
        struct rtx_batch_stat *bs = batch_stat(st, total);
        if (bs) {
            rtx__dur_add(&bs->compute_input, t1 - t0);
            rtx__dur_add(&bs->compute_infer, t2 - t1);
            rtx__dur_add(&bs->compute_output, t3 - t2);
        }
        for (int k = 0; k < nb; k++) {
            rtx__dur_add(&st->success, t3 - batch[k]->t_enqueue);
            rtx__dur_add(&st->queue, t0 - batch[k]->t_enqueue);
            rtx__dur_add(&st->compute_input, t1 - t0);
            rtx__dur_add(&st->compute_infer, t2 - t1);
            rtx__dur_add(&st->compute_output, t3 - t2);
            st->inference_count += batch[k]->batch;
        }
        st->last_inference_ms = rtx__unix_ms();
        pthread_mutex_unlock(&m->stats->mu);
    }
    const char *names[RTX_MODEL_MAX_IO];
    for (int k = 0; k < nb; k++) {
        struct request *r = batch[k];
        pthread_mutex_lock(&m->mu); /* answered from here on: no longer pending */
        m->n_running--;
        if (rc == 0 && r->handle) { /* learns this request's share of the batch's run time */
            int64_t share = (t3 - t0) * r->batch / (total > 0 ? total : 1);
            rtx_sched_finish(m->sched, r->handle, RTX_SCHED_OK, share > 0 ? share : 1, t3);
            r->handle = 0;
            m->cost_dirty = true;
            pthread_cond_broadcast(&m->cv); /* a running slot is free */
        }
        pthread_mutex_unlock(&m->mu);
        if (rc) {
            rtx__request_fail(r, rc, err.msg);
        } else {
            for (int j = 0; j < r->n_out; j++)
                names[j] = info->outputs[r->out_idx[j]].name;
            struct rtx_infer_result res = {
                .code = 0,
                .id = r->id,
                .model = info,
                .n_outputs = r->n_out,
                .output_names = names,
                .outputs = views[k],
                .queue_ns = t0 - r->t_enqueue,
                .compute_input_ns = t1 - t0,
                .compute_infer_ns = t2 - t1,
                .compute_output_ns = t3 - t2,
                .batch_size = total,
            };
            r->done(r->ctx, &res);
            rtx__request_free(r);
        }
        for (int j = 0; views && j < RTX_MODEL_MAX_IO; j++)
            rtx_tensor_unref(views[k][j]);
    }
    rtx_free(views);
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(ins[i]);
    for (int i = 0; outs && i < m->n_graph_out; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
}

/* ------------------------------------------------------------------------------------------
 * Warm-up
 * ---------------------------------------------------------------------------------------- */

/* Zero inputs of `batch` rows in graph order, in the model's shapes. */
static int zero_inputs(const struct rtx_model *m, int batch, struct rtx_tensor **ins,
                       struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    int rc = 0;
    for (int i = 0; i < info->n_inputs && rc == 0; i++)
        rc = rtx__zero_input(info, &info->inputs[i], batch, &ins[m->graph_in[i]], err);
    return rc ? rc : rtx__model_reshape_inputs(m, ins, err);
}

/* With max_batch_size > 1: whether every output carries a batch of 2 in dimension 0, from a
 * plan of the graph (or of the ONNX model's graph for those shapes). */
static int check_batch_of_two(struct rtx_model *m, struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    struct rtx_tensor *two[RTX_MODEL_MAX_IO] = {0};
    struct rtx_graph *made = NULL;
    struct rtx_plan *p = NULL;
    int rc = zero_inputs(m, 2, two, err);
    if (rc == 0 && m->onnx)
        rc = rtx_onnx_instantiate(m->onnx, (const struct rtx_tensor *const *)two, m->n_graph_in,
                                  &m->limits, &made, err);
    const struct rtx_graph *g = made ? made : m->graph;
    if (rc == 0)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)two, m->n_graph_in, &m->limits,
                          &p, err);
    for (int j = 0; j < info->n_outputs && rc == 0; j++) {
        enum rtx_dtype dt;
        int nd;
        int64_t dims[RTX_MAX_DIMS];
        rtx_plan_value_shape(p, g->outputs[m->graph_out[j]], &dt, &nd, dims);
        if (nd < 1 || dims[0] != 2)
            rc = rtx_err_set(err, RTX_EGRAPH,
                             "output '%s' does not carry the batch in dimension 0 "
                             "(max_batch_size %d)",
                             info->outputs[j].name, info->max_batch_size);
    }
    rtx_plan_free(p);
    rtx_graph_free(made);
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(two[i]);
    return rc;
}

int rtx__model_warm_up(struct rtx_model *m, struct rtx_err *err) {
    const struct rtx_model_info *info = &m->cfg.info;
    struct rtx_tensor *ins[RTX_MODEL_MAX_IO] = {0};
    struct rtx_tensor **outs = rtx_calloc((size_t)m->n_graph_out + 1, sizeof *outs);
    int rc = outs ? zero_inputs(m, 1, ins, err)
                  : rtx_err_set(err, RTX_ENOMEM, "out of memory warming up");
    int off = info->max_batch_size > 0 ? 1 : 0;
    for (int k = 0; k < m->n_inst && rc == 0; k++) {
        rc = rtx__instance_execute(&m->inst[k], ins, outs, NULL, err);
        if (rc) {
            rtx_err_prefix(err, "warm-up on instance %d (%s)", k, rtx_backend_name(m->inst[k].be));
            break;
        }
        if (k == 0) rc = rtx__model_reshape_outputs(m, outs, err);
        for (int j = 0; j < info->n_outputs && k == 0 && rc == 0; j++) {
            const struct rtx_model_io *io = &info->outputs[j];
            const struct rtx_tensor *t = outs[m->graph_out[j]];
            bool ok = t->dtype == io->dtype && t->ndim == io->ndim + off;
            for (int d = 0; ok && d < io->ndim; d++)
                ok = io->dims[d] < 0 || io->dims[d] == t->dims[d + off];
            char got[96];
            if (!ok)
                rc = rtx_err_set(err, RTX_EGRAPH,
                                 "output '%s': the model computes %s for a batch of 1, "
                                 "the config says %s with dims of rank %d",
                                 io->name, rtx_shape_str(t->dtype, t->ndim, t->dims, got,
                                                         sizeof got),
                                 rtx__config_dtype_name(io->dtype), io->ndim);
        }
        for (int j = 0; j < m->n_graph_out; j++) {
            rtx_tensor_unref(outs[j]);
            outs[j] = NULL;
        }
    }
    if (rc == 0 && info->max_batch_size > 1) rc = check_batch_of_two(m, err);
    for (int i = 0; i < RTX_MODEL_MAX_IO; i++)
        rtx_tensor_unref(ins[i]);
    rtx_free(outs);
    return rc;
}
