/*
 * backend-impl.h - the backend vtable; included only by kernels/ files.
 */
#ifndef RTX_BACKEND_IMPL_H
#define RTX_BACKEND_IMPL_H

#include "kernels/backend.h"

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
    /* Optional: waits for queued work. */
    int (*synchronize)(struct rtx_backend *be, struct rtx_err *err);
    /* Optional (NULL on host backends): copies a contiguous host tensor to a new device
     * tensor, ordered before later run_node calls. */
    int (*upload)(struct rtx_backend *be, const struct rtx_tensor *host, struct rtx_tensor **dev,
                  struct rtx_err *err);
    /* Optional (NULL on host backends): copies a device tensor to a new host tensor, waiting
     * for the work queued before it. */
    int (*download)(struct rtx_backend *be, const struct rtx_tensor *dev,
                    struct rtx_tensor **host, struct rtx_err *err);
};

struct rtx_backend {
    const struct rtx_backend_i *iface;
    void *ctx;
};

#endif /* RTX_BACKEND_IMPL_H */
