/*
 * plan.c - planning and execution of a graph.
 *
 * DESIGN
 * rtx_plan_new binds concrete input shapes, orders the nodes, drops nodes that no graph
 * output depends on, infers every value, and assigns each intermediate (a node output that is
 * not a graph output) a 64-byte aligned offset in one arena. Offsets come from a linear scan
 * in execution order with a best-fit free list: a node's outputs are placed before its inputs'
 * last uses are released, so an output never aliases an input of the same node. Graph outputs
 * get buffers of their own, handed to the caller. rtx_plan_execute allocates the arena from
 * the backend once, views every intermediate into it and runs the nodes in order. Before
 * each node it asks the backend how many of the next nodes it runs as one fused group
 * (rtx_backend_fused_span, given every value's reader count in p->uses); a backend without
 * fusion answers 1.
 *
 * Graph replay (backends with graph capture, i.e. CUDA graphs). A captured graph replays
 * fixed kernels on fixed addresses, so for such a backend the plan keeps one tensor per value
 * (rp_vals): fixed input buffers that each run copies the caller's inputs into, views into a
 * kept arena, fixed buffers for node-produced outputs, and the uploaded initializers. Run 1
 * goes node by node on them (so lazily built state such as cuBLASLt's algorithm choice and
 * pool segments exist before capture), run 2 captures the same node loop and launches the
 * graph, later runs only launch it. The executor only calls the backend's capture slots; it
 * knows nothing of CUDA. A failed capture is discarded (nothing recorded has run), the run
 * repeats node by node, and the plan stays node by node from then on with the reason kept in
 * rp_note. Cancellation is read before the launch: a graph is one launch and cannot stop
 * between ops, which costs at most one graph's run time (well under a millisecond for the
 * transformer block) against the per-op launch overhead it saves.
 */
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "runtime/runtime-impl.h"

#define ARENA_ALIGN 64

struct rtx_plan {
    const struct rtx_graph *g;
    int n_order;
    int *order;                 /* live nodes in execution order */
    struct rtx__shape *shapes;  /* per value */
    int64_t *offset;            /* per value: arena offset, -1 when not in the arena */
    bool *is_output;            /* per value */
    int *uses;                  /* per value: live nodes reading it, +1 for a graph output */
    size_t arena_bytes;
    size_t unplanned_bytes;
    int max_inputs;
    /* Device copies of the initializers for a backend that is not host memory, made on the
     * first execution with that backend and reused by the next ones. */
    struct rtx_backend *const_be;
    struct rtx_tensor **dev_consts; /* per value; NULL for non-constants */
    /* Replay state for a backend that captures graphs (DESIGN): rp_be owns it. */
    struct rtx_backend *rp_be;
    struct rtx_tensor **rp_vals;    /* per value: its fixed tensor; NULL for dead values */
    struct rtx_buffer *rp_arena;
    struct rtx_backend_graph *rp_graph;
    int rp_runs;                    /* node-by-node runs on the fixed tensors */
    size_t rp_peak;                 /* bytes: arena, inputs and outputs held */
    bool rp_off;                    /* a capture failed: node by node for good */
    char rp_note[384];              /* why rp_off */
};

static size_t shape_bytes(const struct rtx__shape *s) {
    return (size_t)rtx_shape_numel(s->ndim, s->dims) * rtx_dtype_size(s->dtype);
}

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

/* ---- best-fit free list over [0, end) ---- */

struct gap {
    size_t off, len;
};

struct freelist {
    struct gap *gaps;           /* sorted by offset, non-adjacent */
    int n, cap;
    size_t end;                 /* arena high-water mark */
};

static int fl_alloc(struct freelist *fl, size_t len, size_t *off) {
    int best = -1;
    for (int i = 0; i < fl->n; i++)
        if (fl->gaps[i].len >= len && (best < 0 || fl->gaps[i].len < fl->gaps[best].len))
            best = i;
    if (best >= 0) {
        *off = fl->gaps[best].off;
        fl->gaps[best].off += len;
        fl->gaps[best].len -= len;
        if (fl->gaps[best].len == 0) {
            memmove(&fl->gaps[best], &fl->gaps[best + 1],
                    sizeof *fl->gaps * (size_t)(fl->n - best - 1));
            fl->n--;
        }
        return 0;
    }
    /* grow the arena, reusing a gap that touches its end */
    if (fl->n > 0 && fl->gaps[fl->n - 1].off + fl->gaps[fl->n - 1].len == fl->end) {
        *off = fl->gaps[fl->n - 1].off;
        fl->n--;
    } else {
        *off = fl->end;
    }
    fl->end = *off + len;
    return 0;
}

static int fl_free(struct freelist *fl, size_t off, size_t len) {
    if (len == 0) return 0;
    int i = 0;
    while (i < fl->n && fl->gaps[i].off < off) i++;
    bool merge_prev = i > 0 && fl->gaps[i - 1].off + fl->gaps[i - 1].len == off;
    bool merge_next = i < fl->n && off + len == fl->gaps[i].off;
    if (merge_prev && merge_next) {
        fl->gaps[i - 1].len += len + fl->gaps[i].len;
        memmove(&fl->gaps[i], &fl->gaps[i + 1], sizeof *fl->gaps * (size_t)(fl->n - i - 1));
        fl->n--;
    } else if (merge_prev) {
        fl->gaps[i - 1].len += len;
    } else if (merge_next) {
        fl->gaps[i].off = off;
        fl->gaps[i].len += len;
    } else {
        if (fl->n == fl->cap) {
            int ncap = fl->cap ? fl->cap * 2 : 16;
            struct gap *ng = rtx_realloc(fl->gaps, sizeof *ng * (size_t)ncap);
            if (!ng) return RTX_ENOMEM;
            fl->gaps = ng;
            fl->cap = ncap;
        }
        memmove(&fl->gaps[i + 1], &fl->gaps[i], sizeof *fl->gaps * (size_t)(fl->n - i));
        fl->gaps[i] = (struct gap){off, len};
        fl->n++;
    }
    return 0;
}

/* ---- planning ---- */

/* Keeps only the nodes some graph output depends on, preserving order. */
static int prune_dead(const struct rtx_graph *g, int *order, int n, struct rtx_err *err) {
    bool *live = rtx_calloc((size_t)g->n_nodes + 1, sizeof *live);
    bool *needed = rtx_calloc((size_t)g->n_values + 1, sizeof *needed);
    if (!live || !needed) {
        rtx_free(live);
        rtx_free(needed);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
    }
    for (int i = 0; i < g->n_outputs; i++) needed[g->outputs[i]] = true;
    for (int k = n - 1; k >= 0; k--) {
        const struct rtx_node *nd = &g->nodes[order[k]];
        for (int o = 0; o < nd->n_outputs && !live[order[k]]; o++)
            if (needed[nd->outputs[o]]) live[order[k]] = true;
        if (!live[order[k]]) continue;
        for (int i = 0; i < nd->n_inputs; i++)
            if (nd->inputs[i] >= 0) needed[nd->inputs[i]] = true;
    }
    int m = 0;
    for (int k = 0; k < n; k++)
        if (live[order[k]]) order[m++] = order[k];
    rtx_free(live);
    rtx_free(needed);
    return m;
}

static int assign_offsets(struct rtx_plan *p, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    int *last = rtx_malloc(sizeof *last * (size_t)(g->n_values + 1));
    struct freelist fl = {0};
    int rc = 0;
    if (!last) return rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
    for (int v = 0; v < g->n_values; v++) last[v] = -1;
    for (int k = 0; k < p->n_order; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int i = 0; i < n->n_inputs; i++)
            if (n->inputs[i] >= 0) last[n->inputs[i]] = k;
    }
    for (int k = 0; k < p->n_order && !rc; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (p->is_output[v]) continue;
            size_t len = align_up(shape_bytes(&p->shapes[v]));
            size_t off;
            fl_alloc(&fl, len, &off);
            p->offset[v] = (int64_t)off;
            p->unplanned_bytes += len;
            if (last[v] < 0) last[v] = k; /* unused output: free right after the node */
        }
        /* release values whose last use is this node (inputs, and unused outputs) */
        for (int i = 0; i < n->n_inputs + n->n_outputs && !rc; i++) {
            int v = i < n->n_inputs ? n->inputs[i] : n->outputs[i - n->n_inputs];
            if (v < 0 || p->offset[v] < 0 || last[v] != k) continue;
            bool dup = false; /* the same value may appear twice among the inputs */
            for (int j = 0; j < i && !dup; j++)
                dup = (j < n->n_inputs ? n->inputs[j] : n->outputs[j - n->n_inputs]) == v;
            if (dup) continue;
            if (fl_free(&fl, (size_t)p->offset[v], align_up(shape_bytes(&p->shapes[v]))))
                rc = rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
        }
    }
    p->arena_bytes = fl.end;
    rtx_free(fl.gaps);
    rtx_free(last);
    return rc;
}

int rtx_plan_new(const struct rtx_graph *g, const struct rtx_tensor *const *inputs,
                 int n_inputs, const struct rtx_limits *lim, struct rtx_plan **out,
                 struct rtx_err *err) {
    struct rtx_limits dl = rtx_limits_default();
    if (!lim) lim = &dl;
    *out = NULL;
    if (n_inputs != g->n_inputs)
        return rtx_err_set(err, RTX_EINVAL, "graph has %d inputs, %d given", g->n_inputs,
                           n_inputs);
    int rc = rtx__validate_structure(g, lim, err);
    if (rc) return rc;
    struct rtx_plan *p = rtx_calloc(1, sizeof *p);
    struct rtx__shape *ins = rtx_calloc((size_t)n_inputs + 1, sizeof *ins);
    if (!p || !ins) goto oom;
    p->g = g;
    p->order = rtx_malloc(sizeof *p->order * (size_t)(g->n_nodes + 1));
    p->shapes = rtx_calloc((size_t)g->n_values + 1, sizeof *p->shapes);
    p->offset = rtx_malloc(sizeof *p->offset * (size_t)(g->n_values + 1));
    p->is_output = rtx_calloc((size_t)g->n_values + 1, sizeof *p->is_output);
    if (!p->order || !p->shapes || !p->offset || !p->is_output) goto oom;
    for (int v = 0; v < g->n_values; v++) p->offset[v] = -1;
    for (int i = 0; i < g->n_outputs; i++) p->is_output[g->outputs[i]] = true;
    /* bind inputs: dtype and rank must match; declared dims must match unless -1 */
    for (int i = 0; i < n_inputs; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        const struct rtx_tensor *t = inputs[i];
        char sd[96], sg[96];
        if (!t) {
            rc = rtx_err_set(err, RTX_EINVAL, "input '%s' is missing", v->name);
            goto fail;
        }
        bool ok = t->dtype == v->dtype && t->ndim == v->ndim;
        for (int d = 0; ok && d < v->ndim; d++) ok = v->dims[d] < 0 || v->dims[d] == t->dims[d];
        if (!ok) {
            rc = rtx_err_set(err, RTX_EINVAL, "input '%s': expected %s, got %s", v->name,
                             rtx_shape_str(v->dtype, v->ndim, v->dims, sd, sizeof sd),
                             rtx_shape_str(t->dtype, t->ndim, t->dims, sg, sizeof sg));
            goto fail;
        }
        ins[i].dtype = t->dtype;
        ins[i].ndim = t->ndim;
        memcpy(ins[i].dims, t->dims, sizeof t->dims);
    }
    if ((rc = rtx__topo_order(g, p->order, err))) goto fail;
    if ((rc = rtx__infer_graph(g, p->order, ins, lim, p->shapes, err))) goto fail;
    p->n_order = prune_dead(g, p->order, g->n_nodes, err);
    if (p->n_order < 0) {
        rc = p->n_order;
        goto fail;
    }
    p->uses = rtx_calloc((size_t)g->n_values + 1, sizeof *p->uses);
    if (!p->uses) goto oom;
    for (int i = 0; i < g->n_outputs; i++) p->uses[g->outputs[i]]++;
    for (int k = 0; k < p->n_order; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        if (n->n_inputs > p->max_inputs) p->max_inputs = n->n_inputs;
        for (int i = 0; i < n->n_inputs; i++)
            if (n->inputs[i] >= 0) p->uses[n->inputs[i]]++;
    }
    if ((rc = assign_offsets(p, err))) goto fail;
    size_t total = p->arena_bytes;
    for (int i = 0; i < g->n_outputs; i++) total += shape_bytes(&p->shapes[g->outputs[i]]);
    if ((int64_t)total > lim->max_total_bytes) {
        rc = rtx_err_set(err, RTX_ELIMIT, "plan needs %zu bytes (arena and outputs), limit %lld",
                         total, (long long)lim->max_total_bytes);
        goto fail;
    }
    rtx_free(ins);
    *out = p;
    return 0;
oom:
    rc = rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
fail:
    rtx_free(ins);
    rtx_plan_free(p);
    return rc;
}

static void drop_device_constants(struct rtx_plan *p) {
    if (p->dev_consts)
        for (int v = 0; v < p->g->n_values; v++) rtx_tensor_unref(p->dev_consts[v]);
    rtx_free(p->dev_consts);
    p->dev_consts = NULL;
    p->const_be = NULL;
}

/* The initializers on a device backend: uploaded once per plan and backend. */
static int device_constants(struct rtx_plan *p, struct rtx_backend *be, struct rtx_err *err) {
    if (p->const_be == be && p->dev_consts) return 0;
    drop_device_constants(p);
    p->dev_consts = rtx_calloc((size_t)p->g->n_values + 1, sizeof *p->dev_consts);
    if (!p->dev_consts) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
    for (int v = 0; v < p->g->n_values; v++) {
        const struct rtx_value *val = &p->g->values[v];
        if (!val->constant) continue;
        int rc = rtx_backend_upload(be, val->constant, &p->dev_consts[v], err);
        if (rc) {
            rtx_err_prefix(err, "initializer '%s'", val->name);
            drop_device_constants(p);
            return rc;
        }
    }
    p->const_be = be;
    return 0;
}

/* Frees the replay state: the graph, the fixed tensors and the arena. */
static void drop_replay(struct rtx_plan *p) {
    rtx_backend_graph_free(p->rp_be, p->rp_graph);
    p->rp_graph = NULL;
    if (p->rp_vals)
        for (int v = 0; v < p->g->n_values; v++) rtx_tensor_unref(p->rp_vals[v]);
    rtx_free(p->rp_vals);
    p->rp_vals = NULL;
    rtx_buffer_unref(p->rp_arena);
    p->rp_arena = NULL;
    p->rp_be = NULL;
    p->rp_runs = 0;
    p->rp_peak = 0;
}

void rtx_plan_free(struct rtx_plan *p) {
    if (!p) return;
    if (p->g) drop_replay(p);
    if (p->g) drop_device_constants(p);
    rtx_free(p->order);
    rtx_free(p->shapes);
    rtx_free(p->offset);
    rtx_free(p->is_output);
    rtx_free(p->uses);
    rtx_free(p);
}

size_t rtx_plan_arena_bytes(const struct rtx_plan *p) { return p->arena_bytes; }
size_t rtx_plan_unplanned_bytes(const struct rtx_plan *p) { return p->unplanned_bytes; }

int rtx_plan_value_shape(const struct rtx_plan *p, int value, enum rtx_dtype *dt, int *ndim,
                         int64_t *dims) {
    if (value < 0 || value >= p->g->n_values) return RTX_EINVAL;
    const struct rtx__shape *s = &p->shapes[value];
    if (dt) *dt = s->dtype;
    if (ndim) *ndim = s->ndim;
    if (dims) memcpy(dims, s->dims, sizeof(int64_t) * (size_t)s->ndim);
    return 0;
}

/* ---- execution ---- */

const char *rtx_plan_capture_note(const struct rtx_plan *p) { return p->rp_note; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A fresh device tensor of the value's planned shape (for graph outputs). */
static int new_device_tensor(struct rtx_backend *be, const struct rtx__shape *s,
                             struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_buffer *buf;
    int rc = rtx_backend_buffer_new(be, shape_bytes(s), &buf, err);
    if (rc) return rc;
    rc = rtx_tensor_from_buffer(buf, 0, s->dtype, s->ndim, s->dims, out, err);
    rtx_buffer_unref(buf);
    return rc;
}

/* Inputs must have the planned dtype and shape (and, on the device, be contiguous). */
static int check_inputs(const struct rtx_plan *p, struct rtx_tensor *const *inputs,
                        bool on_device, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        const struct rtx__shape *s = &p->shapes[g->inputs[i]];
        const struct rtx_tensor *t = inputs[i];
        char sp[96];
        if (!t || t->dtype != s->dtype || t->ndim != s->ndim ||
            memcmp(t->dims, s->dims, sizeof(int64_t) * (size_t)s->ndim) != 0)
            return rtx_err_set(err, RTX_EINVAL, "input '%s' does not match the planned %s",
                               v->name,
                               rtx_shape_str(s->dtype, s->ndim, s->dims, sp, sizeof sp));
        if (on_device && !rtx_tensor_is_contiguous(t))
            return rtx_err_set(err, RTX_EINVAL, "device input '%s' is not contiguous",
                               v->name);
    }
    return 0;
}

/* Runs the live nodes in order on vals (inputs and constants set), in groups the backend
 * fuses (rtx_backend_fused_span) or one by one. With fixed, vals holds every node output
 * already; otherwise outputs are views into arena or new device tensors (graph outputs),
 * counted into *peak. in holds RTX_BACKEND_FUSE_MAX * p->max_inputs pointers. */
static int run_nodes(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor **vals,
                     bool fixed, struct rtx_buffer *arena, struct rtx_tensor **in,
                     const volatile int *cancel, int *nodes_run, size_t *peak,
                     struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    struct rtx_tensor *outs[RTX_BACKEND_FUSE_MAX][1];
    struct rtx_node_args args[RTX_BACKEND_FUSE_MAX];
    char label[96];
    int rc;
    for (int k = 0; k < p->n_order;) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return rtx_err_set(err, RTX_ECANCELED, "canceled before %s",
                               rtx__node_label(g, p->order[k], label, sizeof label));
        int span = rtx_backend_fused_span(be, g, p->order + k, p->n_order - k, p->uses);
        for (int j = 0; j < span; j++) {
            int ni = p->order[k + j];
            const struct rtx_node *n = &g->nodes[ni];
            struct rtx_tensor **nin = in + (size_t)j * (size_t)p->max_inputs;
            if (!rtx_backend_supports_node(be, g, n))
                return rtx_err_set(err, RTX_EUNSUPPORTED, "%s (%s): backend %s cannot run it",
                                   rtx__node_label(g, ni, label, sizeof label),
                                   rtx_op_name(n->op), rtx_backend_name(be));
            for (int i = 0; i < n->n_inputs; i++)
                nin[i] = n->inputs[i] >= 0 ? vals[n->inputs[i]] : NULL;
            if (n->n_outputs > (int)(sizeof outs[0] / sizeof outs[0][0]))
                return rtx_err_set(err, RTX_EINTERNAL, "%s: too many outputs",
                                   rtx__node_label(g, ni, label, sizeof label));
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                const struct rtx__shape *s = &p->shapes[v];
                if (fixed) {
                    rc = vals[v] ? 0
                                 : rtx_err_set(err, RTX_EINTERNAL, "value %d has no tensor", v);
                } else if (p->offset[v] >= 0) {
                    rc = rtx_tensor_from_buffer(arena, (size_t)p->offset[v], s->dtype, s->ndim,
                                                s->dims, &vals[v], err);
                } else {
                    rc = new_device_tensor(be, s, &vals[v], err);
                    *peak += shape_bytes(s);
                }
                if (rc) return rc;
                outs[j][o] = vals[v];
            }
            args[j] = (struct rtx_node_args){
                .graph = g, .node = n, .n_in = n->n_inputs, .in = nin,
                .n_out = n->n_outputs, .out = outs[j],
            };
        }
        rc = span > 1 ? rtx_backend_run_fused(be, args, span, err)
                      : rtx_backend_run_node(be, &args[0], err);
        if (rc) return rc;
        *nodes_run += span;
        k += span;
        /* arena views of dead values can go now; the memory itself stays in the arena */
    }
    return 0;
}

/* The constant of value v as the backend sees it. */
static struct rtx_tensor *constant_of(const struct rtx_plan *p, struct rtx_backend *be, int v) {
    return p->dev_consts && p->const_be == be ? p->dev_consts[v] : p->g->values[v].constant;
}

/* Node by node into buffers made for this run. */
static int exec_plain(struct rtx_plan *p, struct rtx_backend *be,
                      struct rtx_tensor *const *inputs, bool on_device,
                      struct rtx_tensor **outputs, const volatile int *cancel, int *nodes_run,
                      size_t *peak, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    struct rtx_tensor **vals = rtx_calloc((size_t)g->n_values + 1, sizeof *vals);
    struct rtx_tensor **in = rtx_calloc(RTX_BACKEND_FUSE_MAX * (size_t)p->max_inputs + 1,
                                        sizeof *in);
    struct rtx_buffer *arena = NULL;
    int rc = 0;
    *peak = p->arena_bytes;
    if (!vals || !in) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
        goto out;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_tensor *t = inputs[i];
        if (on_device) {
            vals[g->inputs[i]] = rtx_tensor_ref((struct rtx_tensor *)t);
            continue;
        }
        struct rtx_tensor *hc;
        if ((rc = rtx_tensor_contiguous(t, &hc, err))) goto out;
        if (hc != t || !rtx_backend_is_host(be)) *peak += rtx_tensor_nbytes(t);
        rc = rtx_backend_upload(be, hc, &vals[g->inputs[i]], err);
        rtx_tensor_unref(hc);
        if (rc) {
            rtx_err_prefix(err, "input '%s'", g->values[g->inputs[i]].name);
            goto out;
        }
    }
    if (!rtx_backend_is_host(be) && (rc = device_constants(p, be, err))) goto out;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) vals[v] = rtx_tensor_ref(constant_of(p, be, v));
    if (p->arena_bytes && (rc = rtx_backend_buffer_new(be, p->arena_bytes, &arena, err)))
        goto out;
    if ((rc = run_nodes(p, be, vals, false, arena, in, cancel, nodes_run, peak, err))) goto out;
    if ((rc = rtx_backend_synchronize(be, err))) goto out;
    for (int i = 0; i < g->n_outputs && rc == 0; i++) {
        struct rtx_tensor *t = vals[g->outputs[i]];
        if (on_device)
            outputs[i] = rtx_tensor_ref(t);
        else
            rc = rtx_backend_download(be, t, &outputs[i], err);
    }
out:
    if (vals)
        for (int v = 0; v < g->n_values; v++) rtx_tensor_unref(vals[v]);
    rtx_buffer_unref(arena);
    rtx_free(vals);
    rtx_free(in);
    return rc;
}

/* The fixed tensors of every live value on be (DESIGN). */
static int replay_prepare(struct rtx_plan *p, struct rtx_backend *be, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    int rc = 0;
    p->rp_vals = rtx_calloc((size_t)g->n_values + 1, sizeof *p->rp_vals);
    if (!p->rp_vals) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
    p->rp_be = be;
    p->rp_peak = p->arena_bytes;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) p->rp_vals[v] = rtx_tensor_ref(constant_of(p, be, v));
    for (int i = 0; i < g->n_inputs && rc == 0; i++) {
        int v = g->inputs[i];
        if (p->rp_vals[v]) continue; /* the same value listed twice */
        rc = new_device_tensor(be, &p->shapes[v], &p->rp_vals[v], err);
        p->rp_peak += shape_bytes(&p->shapes[v]);
    }
    if (rc == 0 && p->arena_bytes)
        rc = rtx_backend_buffer_new(be, p->arena_bytes, &p->rp_arena, err);
    for (int k = 0; k < p->n_order && rc == 0; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int o = 0; o < n->n_outputs && rc == 0; o++) {
            int v = n->outputs[o];
            const struct rtx__shape *s = &p->shapes[v];
            if (p->offset[v] >= 0) {
                rc = rtx_tensor_from_buffer(p->rp_arena, (size_t)p->offset[v], s->dtype,
                                            s->ndim, s->dims, &p->rp_vals[v], err);
            } else {
                rc = new_device_tensor(be, s, &p->rp_vals[v], err);
                p->rp_peak += shape_bytes(s);
            }
        }
    }
    if (rc) drop_replay(p);
    return rc;
}

/* Captures the node loop and keeps the graph in p->rp_graph. A failure other than a cancel
 * turns replay off for the plan and returns nonzero with the reason in p->rp_note only. */
static int capture(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor **in,
                   const volatile int *cancel, struct rtx_err *err) {
    struct rtx_err ce = {0};
    size_t peak = 0;
    int nodes = 0;
    int rc = rtx_backend_capture_begin(be, &ce);
    if (rc == 0) {
        int nrc = run_nodes(p, be, p->rp_vals, true, NULL, in, cancel, &nodes, &peak, &ce);
        struct rtx_err end_err = {0};
        rc = rtx_backend_capture_end(be, nrc == 0, &p->rp_graph, &end_err);
        if (nrc == RTX_ECANCELED) {
            if (err) *err = ce;
            return nrc;
        }
        if (nrc == 0 && rc) ce = end_err;
        if (nrc) rc = nrc;
    }
    if (rc) {
        snprintf(p->rp_note, sizeof p->rp_note,
                 "graph capture on %s failed, running node by node: %s", rtx_backend_name(be),
                 ce.msg[0] ? ce.msg : rtx_strerror(rc));
        p->rp_off = true;
    }
    return rc;
}

/* Node by node on the fixed tensors, then a captured graph (DESIGN). */
static int exec_replay(struct rtx_plan *p, struct rtx_backend *be,
                       struct rtx_tensor *const *inputs, bool on_device,
                       struct rtx_tensor **outputs, const volatile int *cancel, int *nodes_run,
                       size_t *peak, enum rtx_exec_mode *mode, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    int rc = 0;
    if (p->rp_be != be) drop_replay(p);
    if (!rtx_backend_is_host(be) && (rc = device_constants(p, be, err))) return rc;
    if (!p->rp_vals && (rc = replay_prepare(p, be, err))) return rc;
    *peak = p->rp_peak;
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_tensor *t = inputs[i];
        struct rtx_tensor *hc = NULL;
        if (!on_device) {
            if ((rc = rtx_tensor_contiguous(t, &hc, err))) return rc;
            t = hc;
        }
        rc = rtx_backend_copy_into(be, t, p->rp_vals[g->inputs[i]], err);
        rtx_tensor_unref(hc);
        if (rc) {
            rtx_err_prefix(err, "input '%s'", g->values[g->inputs[i]].name);
            return rc;
        }
    }
    struct rtx_tensor **in = rtx_calloc(RTX_BACKEND_FUSE_MAX * (size_t)p->max_inputs + 1,
                                        sizeof *in);
    if (!in) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
    if (!p->rp_graph && p->rp_runs > 0 && !p->rp_off) {
        rc = capture(p, be, in, cancel, err);
        if (rc == 0) *mode = RTX_EXEC_CAPTURED;
        else if (rc != RTX_ECANCELED) rc = 0; /* runs node by node below */
    }
    if (rc == 0 && p->rp_graph) {
        if (*mode != RTX_EXEC_CAPTURED) *mode = RTX_EXEC_REPLAYED;
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            rc = rtx_err_set(err, RTX_ECANCELED, "canceled before the graph launch");
        else if ((rc = rtx_backend_graph_launch(be, p->rp_graph, err)) == 0)
            *nodes_run = p->n_order;
    } else if (rc == 0) {
        *mode = RTX_EXEC_FIXED;
        size_t unused = 0;
        rc = run_nodes(p, be, p->rp_vals, true, NULL, in, cancel, nodes_run, &unused, err);
        if (rc == 0) p->rp_runs++;
    }
    rtx_free(in);
    if (rc == 0) rc = rtx_backend_synchronize(be, err);
    for (int i = 0; i < g->n_outputs && rc == 0; i++) {
        struct rtx_tensor *t = p->rp_vals[g->outputs[i]];
        if (on_device)
            outputs[i] = rtx_tensor_ref(t);
        else
            rc = rtx_backend_download(be, t, &outputs[i], err);
    }
    return rc;
}

static int execute(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor *const *inputs,
                   int n_inputs, bool on_device, struct rtx_tensor **outputs, int n_outputs,
                   const volatile int *cancel, struct rtx_exec_stats *stats,
                   struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    double t0 = now_ms();
    size_t peak = 0;
    int rc, nodes_run = 0;
    enum rtx_exec_mode mode = RTX_EXEC_PLAIN;
    for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    if (n_inputs != g->n_inputs || n_outputs != g->n_outputs)
        rc = rtx_err_set(err, RTX_EINVAL, "plan takes %d inputs and %d outputs, got %d and %d",
                         g->n_inputs, g->n_outputs, n_inputs, n_outputs);
    else
        rc = check_inputs(p, inputs, on_device, err);
    if (rc == 0 && rtx_backend_can_capture(be) && !p->rp_off) {
        rc = exec_replay(p, be, inputs, on_device, outputs, cancel, &nodes_run, &peak, &mode,
                         err);
    } else if (rc == 0) {
        if (p->rp_vals) drop_replay(p); /* replay is off, or another backend runs the plan */
        rc = exec_plain(p, be, inputs, on_device, outputs, cancel, &nodes_run, &peak, err);
    }
    if (rc)
        for (int i = 0; i < n_outputs; i++) {
            rtx_tensor_unref(outputs[i]);
            outputs[i] = NULL;
        }
    if (stats) {
        stats->wall_ms = now_ms() - t0;
        stats->peak_bytes = peak;
        stats->nodes_run = nodes_run;
        stats->mode = mode;
    }
    return rc;
}

int rtx_plan_execute(struct rtx_plan *p, struct rtx_backend *be,
                     struct rtx_tensor *const *inputs, int n_inputs, struct rtx_tensor **outputs,
                     int n_outputs, const volatile int *cancel, struct rtx_exec_stats *stats,
                     struct rtx_err *err) {
    return execute(p, be, inputs, n_inputs, false, outputs, n_outputs, cancel, stats, err);
}

int rtx_plan_execute_device(struct rtx_plan *p, struct rtx_backend *be,
                            struct rtx_tensor *const *inputs, int n_inputs,
                            struct rtx_tensor **outputs, int n_outputs,
                            const volatile int *cancel, struct rtx_exec_stats *stats,
                            struct rtx_err *err) {
    return execute(p, be, inputs, n_inputs, true, outputs, n_outputs, cancel, stats, err);
}
