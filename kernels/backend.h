/*
 * backend.h - the device backend interface (after ggml-backend): a table of function pointers
 * per device kind. The executor (runtime/) allocates, runs nodes and synchronizes only through
 * these wrappers, so it never branches on the device type. kernels/cpu/ is the reference
 * implementation of every op; later backends are checked against it.
 */
#ifndef RTX_BACKEND_H
#define RTX_BACKEND_H

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_backend;

/* Inputs and outputs of one node as the executor hands them to a backend. Inputs are
 * contiguous and already hold data; an omitted optional input is NULL. Outputs are contiguous,
 * allocated by the executor with the inferred dtype and shape; the kernel fills them. */
struct rtx_node_args {
    const struct rtx_graph *graph;
    const struct rtx_node *node;
    int n_in;
    struct rtx_tensor *const *in;
    int n_out;
    struct rtx_tensor *const *out;
};

struct rtx_cpu_options {
    int n_threads;               /* worker threads for heavy ops; 0: one per online CPU */
};

/* The CPU backend. */
int rtx_backend_cpu_new(const struct rtx_cpu_options *opt, struct rtx_backend **out,
                        struct rtx_err *err);

const char *rtx_backend_name(struct rtx_backend *be);
void rtx_backend_free(struct rtx_backend *be); /* NULL is a no-op */
/* Whether the backend can run this node (its op with these input dtypes). */
bool rtx_backend_supports_node(struct rtx_backend *be, const struct rtx_graph *g,
                               const struct rtx_node *node);
/* Allocates a buffer of device memory for tensors; *out gets one reference. */
int rtx_backend_buffer_new(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                           struct rtx_err *err);
/* Runs one node. */
int rtx_backend_run_node(struct rtx_backend *be, const struct rtx_node_args *args,
                         struct rtx_err *err);
/* Waits for queued work (a no-op on backends that run synchronously). */
int rtx_backend_synchronize(struct rtx_backend *be, struct rtx_err *err);

#ifdef __cplusplus
}
#endif
#endif /* RTX_BACKEND_H */
