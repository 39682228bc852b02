/*
 * jobs-decode.c - decoding a SubmitRequest into a runnable job: the protobuf-c allocator, the
 * graph and its inputs bound by name, the plan made for validation, and the job's cost key and
 * plan key (DESIGN in jobs-impl.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <protobuf-c/protobuf-c.h>

#include "daemon/jobs-impl.h"
#include "onnx/onnx.h"

/* ------------------------------------------------------------------------------------------
 * protobuf-c allocator over rtx_malloc (a NULL from unpack is ENOMEM, not malformed bytes,
 * when an allocation failed)
 * ---------------------------------------------------------------------------------------- */

struct pb_state {
    bool failed;
};

static void *pb_alloc(void *data, size_t size) {
    struct pb_state *st = data;
    void *p = rtx_malloc(size ? size : 1);
    if (!p) st->failed = true;
    return p;
}

static void pb_free(void *data, void *p) {
    rtx_free(p);
}

int rtx__jobs_unpack_request(const void *data, size_t len, Rtx__V1__SubmitRequest **out,
                             struct rtx_err *err) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    *out = rtx__v1__submit_request__unpack(&alloc, len, data);
    if (*out) return 0;
    if (st.failed) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding SubmitRequest");
    return rtx_err_set(err, RTX_EFORMAT, "malformed SubmitRequest (%zu bytes)", len);
}

void rtx__jobs_free_request(Rtx__V1__SubmitRequest *m) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    rtx__v1__submit_request__free_unpacked(m, &alloc);
}

/* ------------------------------------------------------------------------------------------
 * Decoding a request into a runnable job
 * ---------------------------------------------------------------------------------------- */

void rtx__jobs_prepared_free(struct prepared *p) {
    if (!p) return;
    rtx_plan_free(p->plan);
    for (int i = 0; i < p->n_inputs; i++)
        rtx_tensor_unref(p->inputs[i]);
    rtx_free(p->inputs);
    rtx_graph_free(p->graph);
    rtx_free(p);
}

/* An input tensor message as a new tensor, checked against the limits; *total accumulates
 * input bytes against lim->max_total_bytes. */
static int input_from_msg(const Rtx__V1__Tensor *m, const struct rtx_limits *lim, int64_t *total,
                          struct rtx_tensor **out, struct rtx_err *err) {
    char what[RTX_JOB_ID_LEN + 200];
    snprintf(what, sizeof what, "input '%.180s'", m->name);
    return rtx_tensor_from_wire(m, what, lim, total, out, err);
}

/* Binds the request's input tensors to the graph's inputs by name: unknown names, names given
 * twice and missing inputs are RTX_EINVAL naming them. */
static int bind_inputs(const struct rtx_graph *g, const Rtx__V1__SubmitRequest *m,
                       const struct rtx_limits *lim, struct rtx_tensor **inputs,
                       struct rtx_err *err) {
    int *slot = rtx_calloc(m->n_inputs + 1, sizeof *slot);
    if (!slot) return rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
    int rc = 0;
    for (size_t k = 0; k < m->n_inputs; k++) {
        const char *name = m->inputs[k]->name;
        int v = rtx_graph_find_value(g, name), pos = -1;
        for (int i = 0; v >= 0 && i < g->n_inputs; i++)
            if (g->inputs[i] == v) pos = i;
        if (pos < 0) {
            char known[160] = "";
            for (int i = 0; i < g->n_inputs; i++)
                list_append(known, sizeof known, g->values[g->inputs[i]].name);
            rc = rtx_err_set(err, RTX_EINVAL, "unknown input '%s' (graph inputs: %s)", name,
                             g->n_inputs ? known : "none");
            goto out;
        }
        for (size_t q = 0; q < k; q++) {
            if (slot[q] == pos) {
                rc = rtx_err_set(err, RTX_EINVAL, "input '%s' is given more than once", name);
                goto out;
            }
        }
        slot[k] = pos;
    }
    char missing[200] = "";
    int n_missing = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        bool given = false;
        for (size_t k = 0; k < m->n_inputs && !given; k++)
            given = slot[k] == i;
        if (!given) {
            list_append(missing, sizeof missing, g->values[g->inputs[i]].name);
            n_missing++;
        }
    }
    if (n_missing) {
        rc =
            rtx_err_set(err, RTX_EINVAL, "missing input%s: %s", n_missing > 1 ? "s" : "", missing);
        goto out;
    }
    int64_t total = 0;
    for (size_t k = 0; k < m->n_inputs; k++)
        if ((rc = input_from_msg(m->inputs[k], lim, &total, &inputs[slot[k]], err)) < 0) break;
out:
    rtx_free(slot);
    return rc;
}

/* FNV-1a over len bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The cost key of a job: its graph's wire bytes and its inputs' dtypes and shapes (what
 * decides its run time on a device), never 0. */
static uint64_t cost_key_of(const uint8_t *gbytes, size_t glen, const struct prepared *p) {
    uint64_t h = fnv1a(1469598103934665603ull, gbytes, glen);
    for (int i = 0; i < p->n_inputs; i++) {
        const struct rtx_tensor *t = p->inputs[i];
        int32_t head[2] = {(int32_t)t->dtype, t->ndim};
        h = fnv1a(h, head, sizeof head);
        h = fnv1a(h, t->dims, (size_t)t->ndim * sizeof t->dims[0]);
    }
    return h ? h : 1;
}

/* An ONNX request: the model loaded from the request's bytes (no external data), its inputs
 * bound through a graph that declares them, then the model instantiated for their shapes
 * into p->graph. */
static int prepare_onnx(const Rtx__V1__SubmitRequest *m, const struct rtx_limits *lim,
                        struct prepared *p, struct rtx_err *err) {
    struct rtx_onnx_model *om = NULL;
    int rc = rtx_onnx_load_buffer(m->onnx_model.data, m->onnx_model.len, NULL, "onnx_model",
                                  lim, &om, err);
    /* a model rtxd cannot run is the request's problem: INVALID_ARGUMENT */
    if (rc < 0) {
        if (rc != RTX_ENOMEM && err) err->code = RTX_EINVAL;
        return rc == RTX_ENOMEM ? rc : RTX_EINVAL;
    }
    struct rtx_graph *sig = NULL;
    if ((rc = rtx_graph_new(rtx_onnx_graph_name(om), &sig, err)) < 0) goto out;
    for (int i = 0; i < rtx_onnx_n_inputs(om) && rc >= 0; i++) {
        const struct rtx_onnx_io *io = rtx_onnx_input(om, i);
        rc = rtx_graph_add_input(sig, io->name, io->dtype, io->ndim, io->dims, err);
    }
    if (rc < 0) goto out;
    p->n_inputs = sig->n_inputs;
    if (!(p->inputs = rtx_calloc((size_t)p->n_inputs + 1, sizeof *p->inputs))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
        goto out;
    }
    if ((rc = bind_inputs(sig, m, lim, p->inputs, err)) < 0) goto out;
    rc = rtx_onnx_instantiate(om, (const struct rtx_tensor *const *)p->inputs, p->n_inputs, lim,
                              &p->graph, err);
    if (rc < 0) {
        rtx_err_prefix(err, "onnx_model");
        if (rc != RTX_ENOMEM) {
            rc = RTX_EINVAL;
            if (err) err->code = rc;
        }
    }
out:
    rtx_graph_free(sig);
    rtx_onnx_free(om);
    return rc;
}

/* Decodes the graph of a request (through runtime's wire decoder, or the ONNX importer for
 * onnx_model), binds its inputs and plans it: every graph, input and limit problem shows
 * here, naming the node or input. */
int rtx__jobs_prepare(const Rtx__V1__SubmitRequest *m, const struct rtx_limits *lim,
                      struct prepared **out, struct rtx_err *err) {
    *out = NULL;
    bool onnx = m->onnx_model.len > 0;
    if (!m->graph && !onnx)
        return rtx_err_set(err, RTX_EINVAL, "SubmitRequest has no graph and no onnx_model");
    if (m->graph && onnx)
        return rtx_err_set(err, RTX_EINVAL, "SubmitRequest has both a graph and an onnx_model "
                           "(give one)");
    struct prepared *p = rtx_calloc(1, sizeof *p);
    if (!p) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
    /* the job's content for its keys: the graph's wire bytes, or the ONNX model's */
    size_t glen = onnx ? m->onnx_model.len : rtx__v1__graph__get_packed_size(m->graph);
    uint8_t *gbytes = onnx ? NULL : rtx_malloc(glen ? glen : 1);
    const uint8_t *content = onnx ? m->onnx_model.data : gbytes;
    int rc;
    if (onnx) {
        if ((rc = prepare_onnx(m, lim, p, err)) < 0) goto fail;
    } else {
        if (!gbytes) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
            goto fail;
        }
        rtx__v1__graph__pack(m->graph, gbytes);
        rc = rtx_graph_decode(gbytes, glen, lim, &p->graph, err);
        if (rc < 0) goto fail;
        p->inputs = rtx_calloc((size_t)p->graph->n_inputs + 1, sizeof *p->inputs);
        if (!p->inputs) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
            goto fail;
        }
        p->n_inputs = p->graph->n_inputs;
        if ((rc = bind_inputs(p->graph, m, lim, p->inputs, err)) < 0) goto fail;
    }
    rc = rtx_plan_new(p->graph, (const struct rtx_tensor *const *)p->inputs, p->n_inputs, lim,
                      &p->plan, err);
    if (rc < 0) goto fail;
    p->cost_key = cost_key_of(content, glen, p);
    rc = rtx_device_plan_key(content, glen, (const struct rtx_tensor *const *)p->inputs,
                             p->n_inputs, lim, p->plan_key, err);
    if (rc < 0) goto fail;
    rtx_free(gbytes);
    *out = p;
    return 0;
fail:
    rtx_free(gbytes);
    rtx__jobs_prepared_free(p);
    return rc;
}

/* The journaled request of a job, decoded and planned (for recovered jobs and jobs whose
 * decoded form was not cached). */
int rtx__jobs_load_prepared(struct rtx_jobs *j, const char *id, struct prepared **out,
                            struct rtx_err *err) {
    void *bytes = NULL;
    size_t len = 0;
    int rc = rtx_store_job_request(j->store, id, &bytes, &len, err);
    if (rc < 0) return rtx_err_prefix(err, "loading the request");
    Rtx__V1__SubmitRequest *m = NULL;
    rc = rtx__jobs_unpack_request(bytes, len, &m, err);
    rtx_free(bytes);
    if (rc < 0) return rc;
    rc = rtx__jobs_prepare(m, &j->limits, out, err);
    rtx__jobs_free_request(m);
    return rc;
}
