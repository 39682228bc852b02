/*
 * validate.c - graph validation before anything runs: arity, attributes, dangling inputs,
 * cycles (with the path named), limits, and the inference driver that walks nodes in
 * topological order through the op table.
 *
 * DESIGN
 * The topological order is Kahn's algorithm with a binary min-heap as its ready set: of the
 * nodes whose inputs are all produced, the one with the smallest node index goes next. So the
 * order is the one the graph's author wrote (ONNX's order too) wherever the data flow allows
 * it, and a node written right after its producer runs right after it. The executor needs
 * that: a backend fuses nodes only when they are adjacent in the order (the CUDA backend's
 * matmul -> bias add groups, kernels/cuda/fused.c), and a breadth-first order would run three
 * projections of one input as matmul, matmul, matmul, add, add, add. O((n + e) log n).
 */
#include <string.h>

#include "runtime/runtime-impl.h"

struct rtx_limits rtx_limits_default(void) {
    return (struct rtx_limits){
        .max_nodes = 100000,
        .max_values = 1000000,
        .max_dims = RTX_MAX_DIMS,
        .max_elements = (int64_t)1 << 31,
        .max_tensor_bytes = (int64_t)4 << 30,
        .max_total_bytes = (int64_t)16 << 30,
    };
}

static bool value_defined(const struct rtx_value *v) {
    return v->producer >= 0 || v->is_input || v->constant;
}

/* Checks numel/bytes of a shape against the limits. */
static int check_tensor_limits(const struct rtx_limits *lim, enum rtx_dtype dt, int ndim,
                               const int64_t *dims, const char *what, struct rtx_err *err) {
    if (ndim > lim->max_dims)
        return rtx_err_set(err, RTX_ELIMIT, "%s has rank %d, limit %d", what, ndim,
                           lim->max_dims);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) continue;
        if (__builtin_mul_overflow(n, dims[i], &n)) n = INT64_MAX;
    }
    if (n > lim->max_elements)
        return rtx_err_set(err, RTX_ELIMIT, "%s has %lld elements, limit %lld", what,
                           (long long)n, (long long)lim->max_elements);
    int64_t bytes = n * (int64_t)rtx_dtype_size(dt);
    if (bytes > lim->max_tensor_bytes)
        return rtx_err_set(err, RTX_ELIMIT, "%s has %lld bytes, limit %lld", what,
                           (long long)bytes, (long long)lim->max_tensor_bytes);
    return 0;
}

/* The inputs an op writes in place (rtx__op_info.writes_inputs) must be graph inputs, which
 * the caller owns and the executor hands to the kernel as they are, and two written inputs of
 * one node must be different values. */
static int check_written_inputs(const struct rtx_graph *g, const struct rtx_node *n,
                                const struct rtx__op_info *info, const char *label,
                                struct rtx_err *err) {
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        if (!(info->writes_inputs & (1u << k)) || v < 0) continue;
        const struct rtx_value *val = &g->values[v];
        if (!val->is_input || val->constant)
            return rtx_err_set(err, RTX_EGRAPH,
                               "%s (%s): input %d '%s' is written in place, so it must be a "
                               "graph input (a tensor the caller owns), not %s",
                               label, info->name, k, val->name,
                               val->constant ? "an initializer" : "a node's output");
        for (int j = 0; j < k; j++)
            if ((info->writes_inputs & (1u << j)) && n->inputs[j] == v)
                return rtx_err_set(err, RTX_EGRAPH,
                                   "%s (%s): inputs %d and %d are both '%s'; the op writes "
                                   "each of them",
                                   label, info->name, j, k, val->name);
    }
    return 0;
}

int rtx__validate_structure(const struct rtx_graph *g, const struct rtx_limits *lim,
                            struct rtx_err *err) {
    char label[96];
    if (g->n_nodes > lim->max_nodes)
        return rtx_err_set(err, RTX_ELIMIT, "graph has %d nodes, limit %lld", g->n_nodes,
                           (long long)lim->max_nodes);
    if (g->n_values > lim->max_values)
        return rtx_err_set(err, RTX_ELIMIT, "graph has %d values, limit %lld", g->n_values,
                           (long long)lim->max_values);
    if (g->n_outputs == 0) return rtx_err_set(err, RTX_EGRAPH, "graph has no outputs");
    int64_t const_bytes = 0;
    for (int i = 0; i < g->n_values; i++) {
        const struct rtx_value *v = &g->values[i];
        char what[160];
        if (v->is_input) {
            snprintf(what, sizeof what, "input '%s'", v->name);
            int rc = check_tensor_limits(lim, v->dtype, v->ndim, v->dims, what, err);
            if (rc) return rc;
        }
        if (!v->constant) continue;
        snprintf(what, sizeof what, "initializer '%s'", v->name);
        int rc = check_tensor_limits(lim, v->dtype, v->ndim, v->dims, what, err);
        if (rc) return rc;
        const_bytes += (int64_t)rtx_tensor_nbytes(v->constant);
    }
    if (const_bytes > lim->max_total_bytes)
        return rtx_err_set(err, RTX_ELIMIT, "initializers hold %lld bytes, limit %lld",
                           (long long)const_bytes, (long long)lim->max_total_bytes);
    for (int i = 0; i < g->n_nodes; i++) {
        const struct rtx_node *n = &g->nodes[i];
        const struct rtx__op_info *info = rtx__op_info(n->op);
        rtx__node_label(g, i, label, sizeof label);
        if (!info) return rtx_err_set(err, RTX_EGRAPH, "%s: unknown op %d", label, (int)n->op);
        if (n->n_inputs < info->min_inputs ||
            (info->max_inputs >= 0 && n->n_inputs > info->max_inputs)) {
            if (info->max_inputs < 0)
                return rtx_err_set(err, RTX_EGRAPH, "%s (%s): takes at least %d inputs, got %d",
                                   label, info->name, info->min_inputs, n->n_inputs);
            if (info->min_inputs == info->max_inputs)
                return rtx_err_set(err, RTX_EGRAPH, "%s (%s): takes %d inputs, got %d", label,
                                   info->name, info->min_inputs, n->n_inputs);
            return rtx_err_set(err, RTX_EGRAPH, "%s (%s): takes %d to %d inputs, got %d", label,
                               info->name, info->min_inputs, info->max_inputs, n->n_inputs);
        }
        if (n->n_outputs != info->n_outputs)
            return rtx_err_set(err, RTX_EGRAPH, "%s (%s): has %d outputs, the op produces %d",
                               label, info->name, n->n_outputs, info->n_outputs);
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            bool required = k < info->min_inputs || info->max_inputs < 0;
            if (v < 0) {
                if (required)
                    return rtx_err_set(err, RTX_EGRAPH, "%s (%s): input %d is required", label,
                                       info->name, k);
                continue;
            }
            if (!value_defined(&g->values[v]))
                return rtx_err_set(err, RTX_EGRAPH,
                                   "%s (%s): input %d '%s' is dangling: no node produces it and "
                                   "it is neither a graph input nor an initializer",
                                   label, info->name, k, g->values[v].name);
        }
        int rc = check_written_inputs(g, n, info, label, err);
        if (rc) return rc;
        rc = rtx__check_attrs(n, err);
        if (rc) {
            rtx_err_prefix(err, "%s (%s)", label, info->name);
            return rc;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        const struct rtx_value *v = &g->values[g->outputs[i]];
        if (!value_defined(v))
            return rtx_err_set(err, RTX_EGRAPH, "graph output '%s' is never produced", v->name);
    }
    return 0;
}

/* Describes the cycle that node `start` (unordered after Kahn) leads into. */
static int report_cycle(const struct rtx_graph *g, const int *indeg, int start,
                        struct rtx_err *err) {
    /* Walk to an unordered producer until a node repeats: that node is on a cycle. */
    int *step = rtx_calloc((size_t)g->n_nodes, sizeof *step);
    if (!step) return rtx_err_set(err, RTX_EGRAPH, "graph has a cycle");
    int cur = start, k = 1;
    while (!step[cur]) {
        step[cur] = k++;
        const struct rtx_node *n = &g->nodes[cur];
        int next = -1;
        for (int i = 0; i < n->n_inputs && next < 0; i++) {
            int v = n->inputs[i];
            if (v < 0) continue;
            int p = g->values[v].producer;
            if (p >= 0 && indeg[p] > 0) next = p;
        }
        if (next < 0) break; /* cannot happen for an unordered node */
        cur = next;
    }
    char path[200] = "", label[96];
    size_t len = 0;
    int on_cycle = cur;
    /* print the cycle in data-flow order by walking producers backwards and reversing */
    int cyc[16], nc = 0;
    int c = on_cycle;
    do {
        if (nc < 16) cyc[nc++] = c;
        const struct rtx_node *n = &g->nodes[c];
        int next = -1;
        for (int i = 0; i < n->n_inputs && next < 0; i++) {
            int v = n->inputs[i];
            if (v < 0) continue;
            int p = g->values[v].producer;
            if (p >= 0 && indeg[p] > 0 && step[p]) next = p;
        }
        c = next;
    } while (c >= 0 && c != on_cycle && nc < 16);
    /* cyc[] runs against the data flow; print along it, starting at the lowest index */
    int first = 0;
    for (int i = 1; i < nc; i++)
        if (cyc[i] < cyc[first]) first = i;
    for (int j = 0; j < nc && len < sizeof path; j++) {
        int i = ((first - j) % nc + nc) % nc;
        int w = snprintf(path + len, sizeof path - len, "%s -> ",
                         rtx__node_label(g, cyc[i], label, sizeof label));
        if (w > 0) len += (size_t)w;
    }
    rtx_free(step);
    return rtx_err_set(err, RTX_EGRAPH, "graph has a cycle: %s%s", path,
                       rtx__node_label(g, cyc[first], label, sizeof label));
}

/* Kahn's ready set: a binary min-heap of node indices (DESIGN). */
struct ready_heap {
    int *node; /* node[0] is the smallest; room for every node */
    int n;
};

static void heap_push(struct ready_heap *h, int node) {
    int i = h->n++;
    while (i > 0 && h->node[(i - 1) / 2] > node) {
        h->node[i] = h->node[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->node[i] = node;
}

/* Removes and returns the smallest index (h->n > 0). */
static int heap_pop(struct ready_heap *h) {
    int top = h->node[0], last = h->node[--h->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->node[c + 1] < h->node[c]) c++;
        if (h->node[c] >= last) break;
        h->node[i] = h->node[c];
        i = c;
    }
    h->node[i] = last;
    return top;
}

int rtx__topo_order(const struct rtx_graph *g, int *order, struct rtx_err *err) {
    int nn = g->n_nodes, nv = g->n_values;
    int *indeg = rtx_calloc((size_t)nn + 1, sizeof *indeg);
    int *cons_start = rtx_calloc((size_t)nv + 1, sizeof *cons_start);
    int total = 0;
    for (int i = 0; i < nn; i++) total += g->nodes[i].n_inputs;
    int *cons = rtx_malloc(sizeof *cons * (size_t)(total + 1));
    int rc = 0;
    if (!indeg || !cons_start || !cons) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory ordering the graph");
        goto out;
    }
    /* consumers of each value, CSR */
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0) cons_start[g->nodes[i].inputs[k] + 1]++;
    for (int v = 0; v < nv; v++) cons_start[v + 1] += cons_start[v];
    {
        int *fill = rtx_malloc(sizeof *fill * (size_t)(nv + 1));
        if (!fill) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory ordering the graph");
            goto out;
        }
        memcpy(fill, cons_start, sizeof *fill * (size_t)nv);
        for (int i = 0; i < nn; i++) {
            for (int k = 0; k < g->nodes[i].n_inputs; k++) {
                int v = g->nodes[i].inputs[k];
                if (v < 0) continue;
                cons[fill[v]++] = i;
                if (g->values[v].producer >= 0) indeg[i]++;
            }
        }
        rtx_free(fill);
    }
    struct ready_heap ready = {.node = rtx_malloc(sizeof *ready.node * (size_t)(nn + 1))};
    if (!ready.node) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory ordering the graph");
        goto out;
    }
    int tail = 0;
    for (int i = 0; i < nn; i++)
        if (indeg[i] == 0) heap_push(&ready, i);
    while (ready.n > 0) {
        int ni = heap_pop(&ready);
        const struct rtx_node *n = &g->nodes[ni];
        order[tail++] = ni;
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            for (int c = cons_start[v]; c < cons_start[v + 1]; c++)
                if (--indeg[cons[c]] == 0) heap_push(&ready, cons[c]);
        }
    }
    rtx_free(ready.node);
    if (tail < nn) {
        for (int i = 0; i < nn; i++) {
            if (indeg[i] > 0) {
                rc = report_cycle(g, indeg, i, err);
                break;
            }
        }
    }
out:
    rtx_free(indeg);
    rtx_free(cons_start);
    rtx_free(cons);
    return rc;
}

int rtx__infer_graph(const struct rtx_graph *g, const int *order,
                     const struct rtx__shape *input_shapes, const struct rtx_limits *lim,
                     struct rtx__shape *shapes, struct rtx_err *err) {
    for (int i = 0; i < g->n_values; i++) {
        const struct rtx_value *v = &g->values[i];
        shapes[i].dtype = v->dtype;
        shapes[i].ndim = v->ndim;
        memcpy(shapes[i].dims, v->dims, sizeof v->dims);
    }
    for (int i = 0; i < g->n_inputs; i++) shapes[g->inputs[i]] = input_shapes[i];
    int64_t max_in = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_inputs > max_in) max_in = g->nodes[i].n_inputs;
    const struct rtx__shape **in = rtx_malloc(sizeof *in * (size_t)(max_in + 1));
    if (!in) return rtx_err_set(err, RTX_ENOMEM, "out of memory inferring shapes");
    int rc = 0;
    for (int k = 0; k < g->n_nodes && !rc; k++) {
        int ni = order[k];
        const struct rtx_node *n = &g->nodes[ni];
        const struct rtx__op_info *info = rtx__op_info(n->op);
        struct rtx__shape out[1];
        memset(out, 0, sizeof out);
        for (int j = 0; j < n->n_inputs; j++) in[j] = n->inputs[j] >= 0 ? &shapes[n->inputs[j]]
                                                                         : NULL;
        char label[96];
        rc = info->infer(n, in, n->n_inputs, out, err);
        for (int o = 0; !rc && o < n->n_outputs; o++) {
            char what[160];
            snprintf(what, sizeof what, "output '%s'", g->values[n->outputs[o]].name);
            rc = check_tensor_limits(lim, out[o].dtype, out[o].ndim, out[o].dims, what, err);
            shapes[n->outputs[o]] = out[o];
        }
        if (rc) rtx_err_prefix(err, "%s (%s)", rtx__node_label(g, ni, label, sizeof label),
                               info->name);
    }
    rtx_free(in);
    return rc;
}

int rtx_graph_validate(const struct rtx_graph *g, const struct rtx_limits *lim,
                       struct rtx_err *err) {
    struct rtx_limits dl = rtx_limits_default();
    if (!lim) lim = &dl;
    int rc = rtx__validate_structure(g, lim, err);
    if (rc) return rc;
    int *order = rtx_malloc(sizeof *order * (size_t)(g->n_nodes + 1));
    if (!order) return rtx_err_set(err, RTX_ENOMEM, "out of memory validating");
    rc = rtx__topo_order(g, order, err);
    bool known = true;
    for (int i = 0; i < g->n_inputs && known; i++) {
        const struct rtx_value *v = &g->values[g->inputs[i]];
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d] < 0) known = false;
    }
    if (!rc && known) {
        struct rtx__shape *shapes = rtx_malloc(sizeof *shapes * (size_t)(g->n_values + 1));
        struct rtx__shape *ins = rtx_malloc(sizeof *ins * (size_t)(g->n_inputs + 1));
        if (!shapes || !ins) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory validating");
        } else {
            for (int i = 0; i < g->n_inputs; i++) {
                const struct rtx_value *v = &g->values[g->inputs[i]];
                ins[i].dtype = v->dtype;
                ins[i].ndim = v->ndim;
                memcpy(ins[i].dims, v->dims, sizeof v->dims);
            }
            rc = rtx__infer_graph(g, order, ins, lim, shapes, err);
        }
        rtx_free(shapes);
        rtx_free(ins);
    }
    rtx_free(order);
    return rc;
}

int rtx_graph_infer_node(struct rtx_graph *g, int node, const struct rtx_limits *lim,
                         struct rtx_err *err) {
    struct rtx_limits dl = rtx_limits_default();
    if (!lim) lim = &dl;
    if (!g || node < 0 || node >= g->n_nodes)
        return rtx_err_set(err, RTX_EINVAL, "rtx_graph_infer_node: no node %d", node);
    const struct rtx_node *n = &g->nodes[node];
    const struct rtx__op_info *info = rtx__op_info(n->op);
    char label[96];
    rtx__node_label(g, node, label, sizeof label);
    int rc = rtx__check_attrs(n, err);
    if (rc) return rtx_err_prefix(err, "%s (%s)", label, info->name);
    if (n->n_inputs < info->min_inputs || (info->max_inputs >= 0 && n->n_inputs > info->max_inputs))
        return rtx_err_set(err, RTX_EGRAPH, "%s (%s): %d inputs", label, info->name, n->n_inputs);
    struct rtx__shape *shapes = rtx_calloc((size_t)n->n_inputs + 1, sizeof *shapes);
    const struct rtx__shape **in = rtx_calloc((size_t)n->n_inputs + 1, sizeof *in);
    struct rtx__shape out[4];
    memset(out, 0, sizeof out);
    if (!shapes || !in || n->n_outputs > 4) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory inferring %s", label);
        goto done;
    }
    for (int j = 0; j < n->n_inputs; j++) {
        if (n->inputs[j] < 0) continue;
        const struct rtx_value *v = &g->values[n->inputs[j]];
        if (v->ndim < 0) {
            rc = rtx_err_set(err, RTX_EGRAPH, "%s (%s): input '%s' has no known shape", label,
                             info->name, v->name);
            goto done;
        }
        shapes[j].dtype = v->dtype;
        shapes[j].ndim = v->ndim;
        memcpy(shapes[j].dims, v->dims, sizeof v->dims);
        in[j] = &shapes[j];
    }
    rc = info->infer(n, in, n->n_inputs, out, err);
    for (int o = 0; !rc && o < n->n_outputs; o++) {
        struct rtx_value *v = &g->values[n->outputs[o]];
        char what[160];
        snprintf(what, sizeof what, "output '%s'", v->name);
        rc = check_tensor_limits(lim, out[o].dtype, out[o].ndim, out[o].dims, what, err);
        v->dtype = out[o].dtype;
        v->ndim = out[o].ndim;
        memcpy(v->dims, out[o].dims, sizeof v->dims);
    }
    if (rc) rtx_err_prefix(err, "%s (%s)", label, info->name);
done:
    rtx_free(shapes);
    rtx_free(in);
    return rc;
}
