/*
 * backend-impl.h - the backend vtable, for implementers of runtime/backend.h: the backends under
 * kernels/ and the wrappers in runtime/backend.c (and the unit tests' fake backends). Everyone
 * else goes through runtime/backend.h.
 */
#ifndef RTX_BACKEND_IMPL_H
#define RTX_BACKEND_IMPL_H

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_backend_i {
    /* Short device name ("cpu"). */
    const char *(*name)(struct rtx_backend *be);
    /* Frees the backend and everything it owns. */
    void (*free)(struct rtx_backend *be);
    /* Whether run_node can run this node. */
    bool (*supports_node)(struct rtx_backend *be, const struct rtx_graph *g,
                          const struct rtx_node *node);
    /* Allocates a device buffer holding `bytes` bytes. */
    int (*buffer_new)(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                      struct rtx_err *err);
    /* Runs one node on its inputs into its preallocated outputs. */
    int (*run_node)(struct rtx_backend *be, const struct rtx_node_args *args,
                    struct rtx_err *err);
    /* Optional: waits for queued work; fails with a node's deferred error (backend.h). */
    int (*synchronize)(struct rtx_backend *be, struct rtx_err *err);
    /* Optional (NULL on host backends): copies a contiguous host tensor to a new device
     * tensor, ordered before later run_node calls. */
    int (*upload)(struct rtx_backend *be, const struct rtx_tensor *host, struct rtx_tensor **dev,
                  struct rtx_err *err);
    /* Optional (NULL on host backends): copies a device tensor to a new host tensor, waiting
     * for the work queued before it. */
    int (*download)(struct rtx_backend *be, const struct rtx_tensor *dev,
                    struct rtx_tensor **host, struct rtx_err *err);
    /* Optional (NULL: memcpy, for host backends): copies src, a contiguous host tensor or a
     * tensor in this backend's memory, into dst, a contiguous tensor in this backend's memory
     * of the same byte size, ordered before later run_node calls; a host src may be reused
     * as soon as the call returns. */
    int (*copy_into)(struct rtx_backend *be, const struct rtx_tensor *src,
                     struct rtx_tensor *dst, struct rtx_err *err);
    /* Optional (NULL: no fusion): how many nodes, order[0] .. order[n - 1] at most, the
     * backend runs as one group with run_fused; 1 for none. uses[v] counts the live nodes
     * reading value v, plus one when v is a graph output: a value a group produces and only
     * the group reads may be left unwritten. */
    int (*fused_span)(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                      int n, const int *uses);
    /* Runs a group fused_span accepted: the args of its n nodes, in order. */
    int (*run_fused)(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                     struct rtx_err *err);
    /* Optional, all four or none: graph capture (CUDA graphs). capture_begin: until
     * capture_end, run_node records the work it would queue instead of running it. */
    int (*capture_begin)(struct rtx_backend *be, struct rtx_err *err);
    /* Ends a capture. keep: turns what was recorded into a replayable *graph; !keep (a node
     * failed): discards it. Either way nothing recorded has run. Fails, keeping nothing, when
     * the device could not record some call. */
    int (*capture_end)(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                       struct rtx_err *err);
    /* Queues one run of a captured graph: the recorded work on the recorded memory. */
    int (*graph_launch)(struct rtx_backend *be, struct rtx_backend_graph *graph,
                        struct rtx_err *err);
    /* Frees a graph and the scratch memory its work uses (after queued launches). */
    void (*graph_free)(struct rtx_backend *be, struct rtx_backend_graph *graph);
};

struct rtx__const_cache;
struct rtx_backend {
    const struct rtx_backend_i *iface;
    void *ctx;
    /* device copies of plans' constants, shared by the plans on this backend (runtime/
     * const-cache.c); NULL until first used; dropped by rtx_backend_free */
    struct rtx__const_cache *consts;
};

/* A backend's own form of constant t (a weight packed for its kernels; runtime/const-cache.c):
 * t must be the tensor a plan bound for a graph constant on be (its entry in be's constants
 * cache, kept while plans use it). The form of this kind made earlier, else make(ctx, t)'s
 * result (called once, under the cache's lock), kept with the entry and passed to drop when
 * the last plan using t is freed (bytes: its size, counted by rtx__const_derived_bytes). NULL
 * when t is no such constant or make fails. */
void *rtx__const_derived(struct rtx_backend *be, const struct rtx_tensor *t, uint32_t kind,
                         size_t bytes, void *(*make)(void *ctx, const struct rtx_tensor *t),
                         void *ctx, void (*drop)(void *data));
/* Bytes held by be's derived forms now (tests). */
size_t rtx__const_derived_bytes(struct rtx_backend *be);

/* Error helper for kernels: sets err to fmt's message prefixed with "node N 'name' (op): " (as
 * the validator names nodes) and returns code; with err NULL only returns code. */
int rtx__backend_node_err(struct rtx_err *err, const struct rtx_node_args *a, int code,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif /* RTX_BACKEND_IMPL_H */
