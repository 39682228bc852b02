/*
 * runtime-impl.h - symbols shared between runtime/ files only.
 */
#ifndef RTX_RUNTIME_IMPL_H
#define RTX_RUNTIME_IMPL_H

#include "runtime/runtime.h"

/* "node 3 'fc1'" (or "node 3" for an unnamed node) into buf. */
const char *rtx__node_label(const struct rtx_graph *g, int node, char *buf, size_t len);

/* Shapes as inference sees them. */
struct rtx__shape {
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
};

/* Per-op table entry (runtime/ops.c). */
struct rtx__op_info {
    const char *name;
    int min_inputs, max_inputs;   /* max -1: unbounded */
    int n_outputs;
    const char *attrs;            /* allowed attributes "name:T,..." (T = i f s I F t) */
    const char *required;         /* required attribute names, comma-separated, or "" */
    /* Infers output dtypes/shapes from input shapes (NULL for an omitted optional input).
     * Reports problems with rtx_err_set (the caller adds the node label). */
    int (*infer)(const struct rtx_node *n, const struct rtx__shape *const *in, int n_in,
                 struct rtx__shape *out, struct rtx_err *err);
    /* Bit i set: the op writes input i in place (paged_attention's KV caches). Such an input
     * must be a graph input, and a plan with such a node runs node by node on the caller's
     * tensors (runtime/plan.c). 0 for every op that only writes its outputs. */
    unsigned writes_inputs;
};
const struct rtx__op_info *rtx__op_info(enum rtx_op op);

/* Inference of rope and paged_attention (runtime/ops-generation.c), for the op table. */
int rtx__infer_rope(const struct rtx_node *n, const struct rtx__shape *const *in, int n_in,
                    struct rtx__shape *out, struct rtx_err *err);
int rtx__infer_paged_attention(const struct rtx_node *n, const struct rtx__shape *const *in,
                               int n_in, struct rtx__shape *out, struct rtx_err *err);

/* RTX_PLAN_PROFILE (runtime/plan-profile.c): NULL unless the variable is set; add one node
 * group's synchronized time (nodes[span], in the plan's order); count a run; print the table
 * to stderr and free. */
struct rtx__plan_profile;
struct rtx__plan_profile *rtx__plan_profile_new(void);
void rtx__plan_profile_add(struct rtx__plan_profile *pp, const struct rtx_graph *g,
                           const int *nodes, int span, int64_t ns);
void rtx__plan_profile_run(struct rtx__plan_profile *pp);
void rtx__plan_profile_free(struct rtx__plan_profile *pp, const struct rtx_graph *g);

/* Checks a node's attributes against its op's table entry (names, types, required). */
int rtx__check_attrs(const struct rtx_node *n, struct rtx_err *err);

/* Topological order of g's nodes into order[n_nodes]: of the nodes whose producers are all
 * placed, the smallest node index first (the author's order where the data flow allows).
 * RTX_EGRAPH naming a node on a cycle. */
int rtx__topo_order(const struct rtx_graph *g, int *order, struct rtx_err *err);

/* Structural validation shared by rtx_graph_validate and rtx_plan_new. */
int rtx__validate_structure(const struct rtx_graph *g, const struct rtx_limits *lim,
                            struct rtx_err *err);

/* Runs inference over the nodes in `order` given graph-input shapes; fills shapes[n_values].
 * Checks per-tensor limits. */
int rtx__infer_graph(const struct rtx_graph *g, const int *order,
                     const struct rtx__shape *input_shapes, const struct rtx_limits *lim,
                     struct rtx__shape *shapes, struct rtx_err *err);

/* Device copies of constant host tensors shared by the plans of one backend (const-cache.c,
 * DESIGN): the copy of host on be, uploaded by the first use and kept while used; *dev gets a
 * new reference, *cache the cache to release it in. RTX_ENOMEM or the upload's error. */
struct rtx__const_cache;
int rtx__const_acquire(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx__const_cache **cache, struct rtx_tensor **dev,
                       struct rtx_err *err);
/* Ends one use of host's copy (the caller unrefs its own reference to the copy); the last use
 * drops the copy. Valid after the backend is freed; NULL cache or host: a no-op. */
void rtx__const_release(struct rtx__const_cache *cache, const struct rtx_tensor *host);
/* At backend free: the backend's reference to its cache. */
void rtx__const_cache_close(struct rtx_backend *be);
/* The copies be's cache holds now (tests). */
int rtx__const_cache_entries(struct rtx_backend *be);

#endif /* RTX_RUNTIME_IMPL_H */
