/*
 * plan.c - planning and execution of a graph.
 *
 * DESIGN
 * rtx_plan_new binds concrete input shapes, orders the nodes (rtx__topo_order: the smallest
 * ready node index first, so the author's order wherever the data flow allows), drops nodes
 * that no graph output depends on, infers every value, and assigns each intermediate (a node
 * output that is not a graph output) a 64-byte aligned offset in one arena. Offsets come from
 * a linear scan in execution order with a best-fit free list: a node's outputs are placed
 * before its inputs' last uses are released, so an output never aliases an input of the same
 * node. Graph outputs get buffers of their own, handed to the caller. rtx_plan_execute
 * allocates the arena from the backend once, binds every node output to its tensor (a view
 * into the arena, a view of another value, or a graph output's buffer) and runs the nodes in
 * order.
 *
 * Views. A reshape only reinterprets bytes, and every value the executor holds is contiguous
 * (arena views, graph inputs made contiguous or required to be, uploaded or contiguous
 * initializers, output buffers), so a reshape whose output is not a graph output is a view:
 * its output is a tensor over its input's bytes (alias_of names the value that holds them;
 * a view of a view names the first one's source), it takes no arena bytes, and the node is
 * not run on any backend, node by node or in a captured graph (exec is the order without
 * them; rtx_exec_stats.nodes_run counts only nodes that ran). The viewed storage stays live
 * until the last reader of any view of it is done: the offset scan counts a read of a view as
 * a read of its storage. Views are read-only: no kernel writes its inputs (every op writes
 * only its output tensors), and the arena never places an output over live storage, so bytes
 * that a view shows cannot change while the view still has readers. A reshape whose output is
 * a graph output still runs and copies, since that buffer goes to the caller; so does one of
 * an initializer the caller gave as a strided view.
 *
 * Fusion. Before the first run on a backend the executor asks it, once, which nodes it runs
 * as one group (rtx_backend_fused_span over the nodes that run, given every value's reader
 * count in p->uses; a backend without fusion answers 1) and keeps the answer with a layout of
 * its own (schedule). A fused group reads the inputs of all its nodes while it writes, so in
 * that layout storage a group reads but does not produce stays live until the group's last
 * node: otherwise the output of the group's second node could take the bytes of an input
 * whose last reader is its first node (the block's v = h @ wv + bv did). Values a group
 * produces itself follow the plain rule. rtx_plan_arena_bytes reports the layout without
 * groups; a run's peak_bytes counts the arena it used.
 *
 * Graph replay (backends with graph capture, i.e. CUDA graphs). A captured graph replays
 * fixed kernels on fixed addresses, so for such a backend the plan keeps one tensor per value
 * (rp_vals): fixed input buffers that each run copies the caller's inputs into, views into a
 * kept arena, fixed buffers for node-produced outputs, the uploaded initializers, and views
 * over the fixed bytes of their source, so a recorded kernel that reads a view reads the
 * source's memory. Run 1 goes node by node on them (so lazily built state such as cuBLASLt's
 * algorithm choice and pool segments exist before capture), run 2 captures the same node loop
 * and launches the graph, later runs only launch it. The executor only calls the backend's
 * capture slots; it knows nothing of CUDA. A failed capture is discarded (nothing recorded has
 * run), the run repeats node by node, and the plan stays node by node from then on with the
 * reason kept in rp_note. Cancellation is read before the launch: a graph is one launch and
 * cannot stop between ops, which costs at most one graph's run time (well under a millisecond
 * for the transformer block) against the per-op launch overhead it saves.
 *
 * Deferred errors. A device backend may find a node's error only when the run synchronizes
 * (the CUDA gather's index range, read at the end so that it can be captured): every run ends
 * with rtx_backend_synchronize before its outputs are read, and a failed run synchronizes too,
 * ignoring the result, so that what the backend kept of it cannot fail the next run.
 *
 * In-place writes. An op marked in the op table as writing some of its inputs
 * (rtx__op_info.writes_inputs: paged_attention's KV caches) updates the caller's tensors;
 * validation has made sure those inputs are graph inputs. A node that writes inputs is never
 * pruned as dead (its writes are its purpose), and a plan holding one (p->written not NULL)
 * uses the replay state only on rtx_plan_execute_device with every written input bound (next
 * paragraph); otherwise every execution goes node by node on buffers of its own, with the
 * caller's input tensors bound as they are. On a host backend and on
 * rtx_plan_execute_device that is the caller's memory itself, so a written input must be
 * contiguous there (rtx_plan_execute copies other inputs to contiguous ones, which would
 * leave the writes in the copy). rtx_plan_execute on a device backend uploads the inputs and,
 * after the run, copies each written one back into the caller's host tensor. Views over a
 * written input read its bytes at the time the reading node runs, in the plan's order.
 *
 * Bound inputs (rtx_plan_bind_device_inputs). On rtx_plan_execute_device the fixed state may
 * hold the caller's tensors for some inputs instead of fixed copies (rp_bind): weights and KV
 * caches are large and stay put, so a replayed graph reads them, and writes the caches, where
 * the caller keeps them; the plan holds a reference, so recorded addresses never dangle. Each
 * run compares the bound inputs' addresses with the held ones: a moved one drops the replay
 * state (graph included), and the run starts over as run 1. Host executions ignore bindings
 * (a plan prepared with them is dropped first).
 */
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/runtime-impl.h"

#define ARENA_ALIGN 64

struct rtx_plan {
    const struct rtx_graph *g;
    int n_order;
    int *order;                 /* live nodes in execution order, views included */
    int n_exec;
    int *exec;                  /* the nodes that run: order without the views (DESIGN) */
    int *alias_of;              /* per value: the value whose storage a view shares, else -1 */
    struct rtx__shape *shapes;  /* per value */
    int64_t *offset;            /* per value: arena offset, -1 when not in the arena */
    bool *is_output;            /* per value */
    bool *written;              /* per value: a live node writes it in place; NULL: none does */
    int *uses;                  /* per value: live nodes reading it, +1 for a graph output */
    size_t arena_bytes;         /* with every node run by itself */
    size_t unplanned_bytes;
    int max_inputs;
    /* The schedule on the backend that ran the plan last (DESIGN: fusion). */
    struct rtx_backend *sched_be;
    int *span;                  /* per exec position: nodes of the group it starts, 0 inside */
    int64_t *sched_offset;      /* per value: arena offsets that keep each group's inputs */
    size_t sched_arena_bytes;
    /* The initializers as the backend that ran the plan last holds them (runtime/
     * const-cache.c): device copies shared by the plans of one backend, made on the first
     * execution with it; on a host backend the constants themselves, entered in its cache so
     * that it may keep its own forms of them (packed weights) while plans use them. */
    struct rtx_backend *const_be;
    struct rtx__const_cache *const_cache; /* where dev_consts came from (shared copies) */
    struct rtx_tensor **dev_consts; /* per value; NULL for non-constants */
    /* Replay state for a backend that captures graphs (DESIGN): rp_be owns it. */
    struct rtx_backend *rp_be;
    struct rtx_tensor **rp_vals;    /* per value: its fixed tensor; NULL for dead values */
    struct rtx_buffer *rp_arena;
    struct rtx_backend_graph *rp_graph;
    int rp_runs;                    /* node-by-node runs on the fixed tensors */
    size_t rp_peak;                 /* bytes: arena, inputs and outputs held */
    bool rp_off;                    /* a capture failed: node by node for good */
    bool rp_bind;                   /* rp_vals holds the caller's bound inputs (DESIGN) */
    bool *bound;                    /* per graph input: bound by address on the device
                                     * (rtx_plan_bind_device_inputs); NULL: none is */
    char rp_note[384];              /* why rp_off */
    struct rtx__plan_profile *profile; /* RTX_PLAN_PROFILE: never replays (plan-profile.c) */
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

/* Whether the node writes some of its inputs in place (the op table's writes_inputs). */
static bool writes_inputs(const struct rtx_node *n) {
    return rtx__op_info(n->op)->writes_inputs != 0;
}

/* Keeps only the nodes some graph output depends on, and those that write inputs in place,
 * preserving order. */
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
        live[order[k]] = writes_inputs(nd);
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

/* p->written (DESIGN: in-place writes): the values live nodes write in place; stays NULL
 * when no live node writes any. */
static int mark_written(struct rtx_plan *p, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    for (int k = 0; k < p->n_order; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        unsigned mask = rtx__op_info(n->op)->writes_inputs;
        for (int i = 0; i < n->n_inputs && mask; i++) {
            if (!(mask & (1u << i)) || n->inputs[i] < 0) continue;
            if (!p->written && !(p->written = rtx_calloc((size_t)g->n_values + 1,
                                                         sizeof *p->written)))
                return rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
            p->written[n->inputs[i]] = true;
        }
    }
    return 0;
}

/* Whether a node only reinterprets its input's bytes, so that its output can share the
 * input's storage. Reshape is the one such op (docs/ops.md has no squeeze, unsqueeze or
 * flatten: importers write them as reshape); transpose, expand and slice move bytes. */
static bool reinterprets_input(const struct rtx_node *n) {
    return n->op == RTX_OP_RESHAPE && n->n_inputs == 1 && n->n_outputs == 1;
}

/* Whether node n, a reshape, can be a view: its output is not a graph output (those are
 * buffers of their own, handed to the caller) and its input's storage is contiguous (every
 * value the executor holds is, except an initializer the caller gave as a strided view). */
static bool can_be_view(const struct rtx_plan *p, const struct rtx_node *n) {
    int src = n->inputs[0], out = n->outputs[0];
    if (src < 0 || p->is_output[out]) return false;
    const struct rtx_tensor *c = p->g->values[src].constant;
    return (!c || rtx_tensor_is_contiguous(c)) && p->shapes[src].dtype == p->shapes[out].dtype &&
           shape_bytes(&p->shapes[src]) == shape_bytes(&p->shapes[out]);
}

/* Marks the views (DESIGN) in p->alias_of, each naming the value that holds the bytes (a
 * view of a view names the first one's source), and lists the nodes that run in p->exec. */
static void mark_views(struct rtx_plan *p) {
    const struct rtx_graph *g = p->g;
    for (int v = 0; v < g->n_values; v++) p->alias_of[v] = -1;
    p->n_exec = 0;
    for (int k = 0; k < p->n_order; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        if (reinterprets_input(n) && can_be_view(p, n)) {
            int src = n->inputs[0];
            p->alias_of[n->outputs[0]] = p->alias_of[src] >= 0 ? p->alias_of[src] : src;
        } else {
            p->exec[p->n_exec++] = p->order[k];
        }
    }
}

/* The value whose storage v uses: the value a view shares, else v itself (-1 stays -1). */
static int storage_of(const struct rtx_plan *p, int v) {
    return v >= 0 && p->alias_of[v] >= 0 ? p->alias_of[v] : v;
}

/* Whether value v is a node output that takes arena bytes. */
static bool in_arena(const struct rtx_plan *p, int v) {
    return p->g->values[v].producer >= 0 && !p->is_output[v] && p->alias_of[v] < 0;
}

/* Arena offsets by a linear scan over the order (DESIGN) into offset[] (-1 outside the arena)
 * and *arena_bytes. Storage is freed after the last node that reads it, directly or through a
 * view; with groups (start[k] and end[k]: the first and last order position of the fused
 * group holding position k; NULL: none), storage that a group reads but does not produce is
 * freed after the group's last node instead. Views take no bytes of their own. */
static int assign_offsets(const struct rtx_plan *p, const int *start, const int *end,
                          int64_t *offset, size_t *arena_bytes, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    size_t nv = (size_t)g->n_values;
    int *scratch = rtx_malloc(sizeof *scratch * (3 * nv + (size_t)p->n_order + 1));
    struct freelist fl = {0};
    int rc = 0;
    if (!scratch) return rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
    int *made = scratch;            /* per value: position of the node that produces it */
    int *last = made + nv;          /* per value: position of its last reader */
    int *next = last + nv;          /* per value: the next value freed at the same position */
    int *freed = next + nv;         /* per position: the first value freed after it, or -1 */
    for (size_t v = 0; v < nv; v++) {
        last[v] = -1;
        offset[v] = -1;
    }
    for (int k = 0; k < p->n_order; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int i = 0; i < n->n_inputs; i++)
            if (n->inputs[i] >= 0) last[storage_of(p, n->inputs[i])] = k;
        for (int o = 0; o < n->n_outputs; o++) {
            made[n->outputs[o]] = k;
            if (last[n->outputs[o]] < 0) last[n->outputs[o]] = k; /* unused: freed after it */
        }
        freed[k] = -1;
    }
    for (int v = (int)nv - 1; v >= 0; v--) {
        if (!in_arena(p, v) || last[v] < 0) continue;
        int at = last[v];
        if (start && made[v] < start[at]) at = end[at];
        next[v] = freed[at];
        freed[at] = v;
    }
    for (int k = 0; k < p->n_order && !rc; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (!in_arena(p, v)) continue;
            size_t off;
            fl_alloc(&fl, align_up(shape_bytes(&p->shapes[v])), &off);
            offset[v] = (int64_t)off;
        }
        /* outputs are placed before anything is freed: never over an input of the node */
        for (int v = freed[k]; v >= 0 && !rc; v = next[v])
            if (fl_free(&fl, (size_t)offset[v], align_up(shape_bytes(&p->shapes[v]))))
                rc = rtx_err_set(err, RTX_ENOMEM, "out of memory planning");
    }
    *arena_bytes = fl.end;
    rtx_free(fl.gaps);
    rtx_free(scratch);
    return rc;
}

/* The layout with every node run by itself: what rtx_plan_arena_bytes reports. */
static int assign_plain_offsets(struct rtx_plan *p, struct rtx_err *err) {
    int rc = assign_offsets(p, NULL, NULL, p->offset, &p->arena_bytes, err);
    for (int v = 0; v < p->g->n_values && rc == 0; v++)
        if (in_arena(p, v) && p->offset[v] >= 0)
            p->unplanned_bytes += align_up(shape_bytes(&p->shapes[v]));
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
    p->profile = rtx__plan_profile_new();
    p->order = rtx_malloc(sizeof *p->order * (size_t)(g->n_nodes + 1));
    p->exec = rtx_malloc(sizeof *p->exec * (size_t)(g->n_nodes + 1));
    p->span = rtx_malloc(sizeof *p->span * (size_t)(g->n_nodes + 1));
    p->shapes = rtx_calloc((size_t)g->n_values + 1, sizeof *p->shapes);
    p->offset = rtx_malloc(sizeof *p->offset * (size_t)(g->n_values + 1));
    p->sched_offset = rtx_malloc(sizeof *p->sched_offset * (size_t)(g->n_values + 1));
    p->alias_of = rtx_malloc(sizeof *p->alias_of * (size_t)(g->n_values + 1));
    p->is_output = rtx_calloc((size_t)g->n_values + 1, sizeof *p->is_output);
    if (!p->order || !p->exec || !p->span || !p->shapes || !p->offset || !p->sched_offset ||
        !p->alias_of || !p->is_output)
        goto oom;
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
    if ((rc = mark_written(p, err))) goto fail;
    mark_views(p);
    if ((rc = assign_plain_offsets(p, err))) goto fail;
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
        for (int v = 0; v < p->g->n_values; v++) {
            if (!p->dev_consts[v]) continue;
            rtx_tensor_unref(p->dev_consts[v]);
            rtx__const_release(p->const_cache, p->g->values[v].constant);
        }
    rtx_free(p->dev_consts);
    p->dev_consts = NULL;
    p->const_be = NULL;
    p->const_cache = NULL;
}

/* The initializers on the backend: its shared copies (runtime/const-cache.c), so plans of the
 * same weights at other shapes upload them once (on a host backend: the constants, entered in
 * its cache). */
static int device_constants(struct rtx_plan *p, struct rtx_backend *be, struct rtx_err *err) {
    if (p->const_be == be && p->dev_consts) return 0;
    drop_device_constants(p);
    p->dev_consts = rtx_calloc((size_t)p->g->n_values + 1, sizeof *p->dev_consts);
    if (!p->dev_consts) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
    for (int v = 0; v < p->g->n_values; v++) {
        const struct rtx_value *val = &p->g->values[v];
        if (!val->constant) continue;
        int rc = rtx__const_acquire(be, val->constant, &p->const_cache, &p->dev_consts[v], err);
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
    p->rp_bind = false;
}

int rtx_plan_bind_device_inputs(struct rtx_plan *p, int first, int n, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    if (first < 0 || n < 0 || first > g->n_inputs - n)
        return rtx_err_set(err, RTX_EINVAL, "inputs %d..%d: the graph has %d", first,
                           first + n - 1, g->n_inputs);
    for (int i = first; i < first + n; i++) { /* one value, one way in: bound on every index */
        int v = g->inputs[i];
        for (int j = 0; j < g->n_inputs; j++)
            if (g->inputs[j] == v && (j < first || j >= first + n) && !(p->bound && p->bound[j]))
                return rtx_err_set(err, RTX_EINVAL,
                                   "input '%s' is also graph input %d, which is not bound",
                                   g->values[v].name, j);
    }
    if (!p->bound && !(p->bound = rtx_calloc((size_t)g->n_inputs + 1, sizeof *p->bound)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
    for (int i = first; i < first + n; i++) p->bound[i] = true;
    if (p->rp_vals) drop_replay(p); /* the fixed buffers were made without these bindings */
    return 0;
}

/* Whether graph input i is bound by address in an execution with these inputs. */
static bool input_bound(const struct rtx_plan *p, int i, bool on_device) {
    return on_device && p->bound && p->bound[i];
}

/* Whether an execution may use the replay state (DESIGN: graph replay, in-place writes). */
static bool may_replay(const struct rtx_plan *p, struct rtx_backend *be, bool on_device) {
    if (!rtx_backend_can_capture(be) || p->rp_off || p->profile) return false;
    for (int i = 0; p->written && i < p->g->n_inputs; i++)
        if (p->written[p->g->inputs[i]] && !input_bound(p, i, on_device)) return false;
    return true;
}

void rtx_plan_free(struct rtx_plan *p) {
    if (!p) return;
    if (p->g) drop_replay(p);
    if (p->g) drop_device_constants(p);
    if (p->g) rtx__plan_profile_free(p->profile, p->g);
    rtx_free(p->order);
    rtx_free(p->exec);
    rtx_free(p->span);
    rtx_free(p->sched_offset);
    rtx_free(p->alias_of);
    rtx_free(p->shapes);
    rtx_free(p->offset);
    rtx_free(p->is_output);
    rtx_free(p->written);
    rtx_free(p->bound);
    rtx_free(p->uses);
    rtx_free(p);
}

size_t rtx_plan_arena_bytes(const struct rtx_plan *p) { return p->arena_bytes; }
size_t rtx_plan_unplanned_bytes(const struct rtx_plan *p) { return p->unplanned_bytes; }

size_t rtx_plan_held_bytes(const struct rtx_plan *p) {
    const struct rtx_graph *g = p->g;
    size_t bytes = p->arena_bytes;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) bytes += rtx_tensor_nbytes(g->values[v].constant);
    for (int i = 0; i < g->n_inputs; i++) bytes += shape_bytes(&p->shapes[g->inputs[i]]);
    for (int i = 0; i < g->n_outputs; i++) bytes += shape_bytes(&p->shapes[g->outputs[i]]);
    return bytes;
}

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

static double now_ms(void) { return (double)rtx_mono_ns() / 1e6; }

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
        if (p->written && p->written[g->inputs[i]] && !rtx_tensor_is_contiguous(t))
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s' is written in place by the graph, so it must be "
                               "contiguous", v->name);
    }
    return 0;
}

/* start[k] and end[k] for the groups in p->span: the first and last order position of the
 * group holding position k; k itself outside groups (a view between two nodes of a group
 * belongs to it). */
static void group_bounds(const struct rtx_plan *p, int *start, int *end) {
    int first = -1; /* order position of the first node of the group being walked */
    for (int k = 0, e = 0; k < p->n_order; k++) {
        bool runs = e < p->n_exec && p->exec[e] == p->order[k];
        bool inside = e > 0 && e < p->n_exec && p->span[e] == 0; /* the group goes on at k */
        if (runs && !inside) first = k;
        start[k] = runs || inside ? first : k;
        if (runs) e++;
    }
    int last = -1;
    for (int k = p->n_order - 1, e = p->n_exec - 1; k >= 0; k--) {
        bool runs = e >= 0 && p->exec[e] == p->order[k];
        bool inside = e + 1 < p->n_exec && p->span[e + 1] == 0; /* the group goes on after k */
        if (runs && !inside) last = k;
        end[k] = runs || inside ? last : k;
        if (runs) e--;
    }
}

/* The schedule of p on be (DESIGN: fusion): the groups be fuses, asked once, and arena offsets
 * that keep the inputs of each group until the group's last node. Kept until another backend
 * runs the plan. */
static int schedule(struct rtx_plan *p, struct rtx_backend *be, struct rtx_err *err) {
    if (p->sched_be == be) return 0;
    p->sched_be = NULL;
    bool fused = false;
    for (int e = 0; e < p->n_exec;) {
        int span = rtx_backend_fused_span(be, p->g, p->exec + e, p->n_exec - e, p->uses);
        p->span[e] = span;
        for (int j = 1; j < span; j++) p->span[e + j] = 0;
        fused = fused || span > 1;
        e += span;
    }
    if (!fused) {
        memcpy(p->sched_offset, p->offset, sizeof *p->offset * (size_t)p->g->n_values);
        p->sched_arena_bytes = p->arena_bytes;
    } else {
        int *start = rtx_malloc(sizeof *start * (2 * (size_t)p->n_order + 1));
        if (!start) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
        group_bounds(p, start, start + p->n_order);
        int rc = assign_offsets(p, start, start + p->n_order, p->sched_offset,
                                &p->sched_arena_bytes, err);
        rtx_free(start);
        if (rc) return rc;
    }
    p->sched_be = be;
    return 0;
}

/* A tensor of shape s over the bytes of src, which is contiguous (a view, DESIGN). */
static int view_tensor(const struct rtx_tensor *src, const struct rtx__shape *s,
                       struct rtx_tensor **out, struct rtx_err *err) {
    if (!src || !rtx_tensor_is_contiguous(src) || src->dtype != s->dtype ||
        rtx_tensor_nbytes(src) != shape_bytes(s))
        return rtx_err_set(err, RTX_EINTERNAL, "a view needs a contiguous value of its bytes");
    return rtx_tensor_from_buffer(src->buf, (size_t)src->offset, s->dtype, s->ndim, s->dims,
                                  out, err);
}

/* The tensor of every node output on be, in order (DESIGN): a view shares its source's bytes,
 * an intermediate is a view into arena at its offset in the schedule, a graph output gets a
 * new buffer (counted into *peak). vals holds the inputs and the constants already. */
static int bind_outputs(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor **vals,
                        struct rtx_buffer *arena, size_t *peak, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    int rc = 0;
    for (int k = 0; k < p->n_order && rc == 0; k++) {
        const struct rtx_node *n = &g->nodes[p->order[k]];
        for (int o = 0; o < n->n_outputs && rc == 0; o++) {
            int v = n->outputs[o];
            const struct rtx__shape *s = &p->shapes[v];
            if (p->alias_of[v] >= 0) {
                rc = view_tensor(vals[p->alias_of[v]], s, &vals[v], err);
            } else if (p->sched_offset[v] >= 0 && arena) {
                rc = rtx_tensor_from_buffer(arena, (size_t)p->sched_offset[v], s->dtype,
                                            s->ndim, s->dims, &vals[v], err);
            } else { /* a graph output, or an empty intermediate when the arena is empty */
                rc = new_device_tensor(be, s, &vals[v], err);
                *peak += shape_bytes(s);
            }
        }
    }
    return rc;
}

/* Runs p->exec on vals (every value bound: bind_outputs) in the groups of the schedule
 * (schedule). in holds RTX_BACKEND_FUSE_MAX * p->max_inputs pointers. *nodes_run counts the
 * nodes run; views are not run. */
static int run_nodes(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor **vals,
                     struct rtx_tensor **in, const volatile int *cancel, int *nodes_run,
                     struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    struct rtx_tensor *outs[RTX_BACKEND_FUSE_MAX][1];
    struct rtx_node_args args[RTX_BACKEND_FUSE_MAX];
    char label[96];
    int rc;
    for (int k = 0; k < p->n_exec;) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return rtx_err_set(err, RTX_ECANCELED, "canceled before %s",
                               rtx__node_label(g, p->exec[k], label, sizeof label));
        int span = p->span[k];
        for (int j = 0; j < span; j++) {
            int ni = p->exec[k + j];
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
                outs[j][o] = vals[n->outputs[o]];
                if (!outs[j][o])
                    return rtx_err_set(err, RTX_EINTERNAL, "value %d has no tensor",
                                       n->outputs[o]);
            }
            args[j] = (struct rtx_node_args){
                .graph = g, .node = n, .n_in = n->n_inputs, .in = nin,
                .n_out = n->n_outputs, .out = outs[j],
            };
        }
        int64_t t0 = p->profile ? rtx_mono_ns() : 0;
        rc = span > 1 ? rtx_backend_run_fused(be, args, span, err)
                      : rtx_backend_run_node(be, &args[0], err);
        if (rc == 0 && p->profile && (rc = rtx_backend_synchronize(be, err)) == 0)
            rtx__plan_profile_add(p->profile, g, &p->exec[k], span, rtx_mono_ns() - t0);
        if (rc) return rc;
        *nodes_run += span;
        k += span;
    }
    return 0;
}

/* The constant of value v as the backend sees it. */
static struct rtx_tensor *constant_of(const struct rtx_plan *p, struct rtx_backend *be, int v) {
    return p->dev_consts && p->const_be == be ? p->dev_consts[v] : p->g->values[v].constant;
}

/* After rtx_plan_execute on a device backend: each input the graph writes in place, copied
 * back into the caller's host tensor (contiguous: check_inputs) (DESIGN: in-place writes). */
static int copy_back_written(const struct rtx_plan *p, struct rtx_backend *be,
                             struct rtx_tensor *const *inputs, struct rtx_tensor **vals,
                             struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    for (int i = 0; p->written && i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (!p->written[v]) continue;
        struct rtx_tensor *h;
        int rc = rtx_backend_download(be, vals[v], &h, err);
        if (rc) return rtx_err_prefix(err, "written input '%s'", g->values[v].name);
        memcpy(rtx_tensor_data(inputs[i]), rtx_tensor_data(h), rtx_tensor_nbytes(h));
        rtx_tensor_unref(h);
    }
    return 0;
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
    if (!vals || !in) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
        goto out;
    }
    if ((rc = schedule(p, be, err))) goto out;
    *peak = p->sched_arena_bytes;
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
    if ((rc = device_constants(p, be, err))) goto out;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) vals[v] = rtx_tensor_ref(constant_of(p, be, v));
    if (p->sched_arena_bytes &&
        (rc = rtx_backend_buffer_new(be, p->sched_arena_bytes, &arena, err)))
        goto out;
    if ((rc = bind_outputs(p, be, vals, arena, peak, err))) goto out;
    if ((rc = run_nodes(p, be, vals, in, cancel, nodes_run, err))) goto out;
    if ((rc = rtx_backend_synchronize(be, err))) goto out;
    if (!on_device && !rtx_backend_is_host(be) &&
        (rc = copy_back_written(p, be, inputs, vals, err)))
        goto out;
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
static int replay_prepare(struct rtx_plan *p, struct rtx_backend *be,
                          struct rtx_tensor *const *inputs, bool on_device, struct rtx_err *err) {
    const struct rtx_graph *g = p->g;
    int rc = 0;
    p->rp_vals = rtx_calloc((size_t)g->n_values + 1, sizeof *p->rp_vals);
    if (!p->rp_vals) return rtx_err_set(err, RTX_ENOMEM, "out of memory executing");
    p->rp_be = be;
    p->rp_bind = on_device && p->bound;
    p->rp_peak = p->sched_arena_bytes;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) p->rp_vals[v] = rtx_tensor_ref(constant_of(p, be, v));
    for (int i = 0; i < g->n_inputs && rc == 0; i++) {
        int v = g->inputs[i];
        if (p->rp_vals[v]) continue; /* the same value listed twice */
        if (input_bound(p, i, on_device)) {
            p->rp_vals[v] = rtx_tensor_ref(inputs[i]);
            continue;
        }
        rc = new_device_tensor(be, &p->shapes[v], &p->rp_vals[v], err);
        p->rp_peak += shape_bytes(&p->shapes[v]);
    }
    if (rc == 0 && p->sched_arena_bytes)
        rc = rtx_backend_buffer_new(be, p->sched_arena_bytes, &p->rp_arena, err);
    if (rc == 0) rc = bind_outputs(p, be, p->rp_vals, p->rp_arena, &p->rp_peak, err);
    if (rc) drop_replay(p);
    return rc;
}

/* Captures the node loop and keeps the graph in p->rp_graph. A failure other than a cancel
 * turns replay off for the plan and returns nonzero with the reason in p->rp_note only. */
static int capture(struct rtx_plan *p, struct rtx_backend *be, struct rtx_tensor **in,
                   const volatile int *cancel, struct rtx_err *err) {
    struct rtx_err ce = {0};
    int nodes = 0;
    int rc = rtx_backend_capture_begin(be, &ce);
    if (rc == 0) {
        int nrc = run_nodes(p, be, p->rp_vals, in, cancel, &nodes, &ce);
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
                 "graph capture on %s failed, running node by node: %.300s",
                 rtx_backend_name(be), ce.msg[0] ? ce.msg : rtx_strerror(rc));
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
    if (p->rp_be != be || p->rp_bind != (on_device && p->bound)) drop_replay(p);
    for (int i = 0; p->rp_vals && i < g->n_inputs; i++) /* a bound input moved: capture again */
        if (input_bound(p, i, on_device) &&
            rtx_tensor_data(p->rp_vals[g->inputs[i]]) != rtx_tensor_data(inputs[i]))
            drop_replay(p);
    if ((rc = schedule(p, be, err))) return rc;
    if ((rc = device_constants(p, be, err))) return rc;
    if (!p->rp_vals && (rc = replay_prepare(p, be, inputs, on_device, err))) return rc;
    *peak = p->rp_peak;
    for (int i = 0; i < g->n_inputs; i++) {
        const struct rtx_tensor *t = inputs[i];
        struct rtx_tensor *hc = NULL;
        if (input_bound(p, i, on_device)) continue;
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
            *nodes_run = p->n_exec;
    } else if (rc == 0) {
        *mode = RTX_EXEC_FIXED;
        rc = run_nodes(p, be, p->rp_vals, in, cancel, nodes_run, err);
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
    if (p->profile) rtx__plan_profile_run(p->profile);
    if (rc == 0 && may_replay(p, be, on_device)) {
        rc = exec_replay(p, be, inputs, on_device, outputs, cancel, &nodes_run, &peak, &mode,
                         err);
    } else if (rc == 0) {
        if (p->rp_vals) drop_replay(p); /* replay is off, or another backend runs the plan */
        rc = exec_plain(p, be, inputs, on_device, outputs, cancel, &nodes_run, &peak, err);
    }
    if (rc) {
        /* work queued before the failure may have left deferred checks on the backend (a CUDA
         * gather's index range): they belong to this run, not to the next one's synchronize */
        if (be && !rtx_backend_is_host(be)) (void)rtx_backend_synchronize(be, NULL);
        for (int i = 0; i < n_outputs; i++) {
            rtx_tensor_unref(outputs[i]);
            outputs[i] = NULL;
        }
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

const char *rtx_exec_mode_name(enum rtx_exec_mode mode) {
    switch (mode) {
    case RTX_EXEC_PLAIN: return "plain";
    case RTX_EXEC_FIXED: return "fixed";
    case RTX_EXEC_CAPTURED: return "captured";
    case RTX_EXEC_REPLAYED: return "replayed";
    }
    return "?";
}
