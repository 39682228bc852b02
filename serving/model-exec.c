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

/* One run of the plan kept for `key` on the instance's backend, or of a new one on a miss
 * (kept after a successful run, freed after a failed one). A plan that cannot be made fails
 * as before, without a run. */
static int run_once(struct instance *in, const uint8_t *key, struct rtx_tensor *const *ins,
                    struct rtx_tensor **outs, const volatile int *cancel, bool *ran,
                    struct rtx_err *err) {
    struct rtx_model *m = in->m;
    const struct rtx_graph *g = m->graph;
    struct rtx_device_plan *dp = rtx_device_plan_take(in->dev, in->be, key);
    struct rtx_plan *p = dp ? rtx_device_plan_get(dp) : NULL;
    int rc;
    if (!p && (rc = rtx_plan_new(g, (const struct rtx_tensor *const *)ins, g->n_inputs,
                                 &m->limits, &p, err)))
        return rc;
    *ran = true;
    struct rtx_exec_stats st = {0};
    rc = rtx_plan_execute(p, in->be, ins, g->n_inputs, outs, g->n_outputs, cancel, &st, err);
    if (dp)
        rtx_device_plan_return(in->dev, dp, rc == 0);
    else if (rc == 0) /* the plan points into m->graph, which outlives the backend: no release */
        rtx_device_plan_keep(in->dev, in->be, key, p, rtx_device_plan_bytes(p), NULL, NULL);
    else
        rtx_plan_free(p);
    return rc;
}

/* Runs the plan for `ins` (graph order) into outs (graph order, n_outputs slots). */
int rtx__instance_execute(struct instance *in, struct rtx_tensor *const *ins,
                          struct rtx_tensor **outs, const volatile int *cancel,
                          struct rtx_err *err) {
    struct rtx_model *m = in->m;
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN];
    int rc = rtx_device_plan_key(m->digest, sizeof m->digest,
                                 (const struct rtx_tensor *const *)ins, m->graph->n_inputs,
                                 &m->limits, key, err);
    if (rc) return rc;
    bool ran = false;
    rc = run_once(in, key, ins, outs, cancel, &ran, err);
    /* past the version's share: the plans the device keeps hold memory (ours among them);
     * drop them and try once more, as the pools retry after returning their cache */
    if (rc == RTX_ENOMEM && rtx_device_plans_clear(in->dev) > 0) {
        for (int j = 0; j < m->graph->n_outputs; j++) {
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
    const struct rtx_graph *g = m->graph;
    struct rtx_tensor *ins[RTX_MODEL_MAX_IO] = {0};
    struct rtx_tensor **outs = rtx_calloc((size_t)g->n_outputs + 1, sizeof *outs);
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
    int64_t t1 = rtx_mono_ns();
    rtx_device_load_add(in->dev, 1); /* placement reads the batches in flight per executor */
    if (rc == 0) rc = rtx__instance_execute(in, ins, outs, nb == 1 ? batch[0]->cancel : NULL, &err);
    rtx_device_load_add(in->dev, -1);
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
    for (int i = 0; outs && i < g->n_outputs; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
}
