/*
 * backend.h - the device backend interface (after ggml-backend): a table of function pointers
 * per device kind. The executor (runtime/plan.c) allocates, runs nodes and synchronizes only
 * through these wrappers, so it never branches on the device type. The interface belongs to the
 * runtime; kernels/ implements it (runtime/backend-impl.h): kernels/cpu/ is the reference
 * implementation of every op, later backends are checked against it. Each concrete backend
 * declares its constructor in its own header: kernels/cpu/backend-cpu.h and
 * kernels/cuda/backend-cuda.h (the CUDA backend and CUDA device discovery).
 */
#ifndef RTX_BACKEND_H
#define RTX_BACKEND_H

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_backend;
struct rtx_backend_graph; /* a captured graph of a backend (rtx_backend_capture_end) */

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
/* Waits for queued work (a no-op on backends that run synchronously). A device backend may
 * report here a node's error found on the device after the node was queued (the CUDA gather's
 * index range): RTX_EINVAL with the node's message, the device still healthy. */
int rtx_backend_synchronize(struct rtx_backend *be, struct rtx_err *err);
/* Whether the backend computes on host memory (then upload/download are references). */
bool rtx_backend_is_host(struct rtx_backend *be);
/* A device copy of a contiguous host tensor (a new reference to `host` on host backends). */
int rtx_backend_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx_tensor **dev, struct rtx_err *err);
/* A host copy of a device tensor, after the work that writes it has finished (a new reference
 * on host backends). */
int rtx_backend_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                         struct rtx_tensor **host, struct rtx_err *err);
/* Copies src (a contiguous host tensor, or a tensor in the backend's memory) into dst (a
 * contiguous tensor in the backend's memory with the same byte size), ordered before later
 * work of the backend; src, when on the host, may be changed as soon as the call returns.
 * RTX_EINVAL when the sizes differ or a tensor is not contiguous. */
int rtx_backend_copy_into(struct rtx_backend *be, const struct rtx_tensor *src,
                          struct rtx_tensor *dst, struct rtx_err *err);

/* Most nodes one fused group may hold. */
#define RTX_BACKEND_FUSE_MAX 4

/* How many of the nodes order[0] .. order[n - 1] (a run of the executor's order) the backend
 * runs as one fused group, from 1 (no fusion: always on backends without it) to
 * min(n, RTX_BACKEND_FUSE_MAX). uses[v] is the number of live nodes reading value v plus one
 * when v is a graph output; values produced and read only inside a group may stay unwritten,
 * so a backend only fuses across values with one reader. */
int rtx_backend_fused_span(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                           int n, const int *uses);
/* Runs a group of n nodes that rtx_backend_fused_span accepted; args in order. */
int rtx_backend_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                          struct rtx_err *err);

/* Graph capture (CUDA graphs on the CUDA backend; other backends have none). Between
 * rtx_backend_capture_begin and rtx_backend_capture_end the backend records the work of
 * rtx_backend_run_node instead of running it; the recorded graph is replayed with
 * rtx_backend_graph_launch on the same memory, so every tensor the recorded nodes touch must
 * keep its address (and its contents where the nodes read them) for the graph's lifetime.
 * One capture per backend at a time, on the thread that began it. */
/* Whether the backend can capture graphs (false for NULL). */
bool rtx_backend_can_capture(struct rtx_backend *be);
/* Starts recording. RTX_EUNSUPPORTED on a backend without capture; RTX_EGPU, RTX_EINVAL
 * (a capture is already open) otherwise. */
int rtx_backend_capture_begin(struct rtx_backend *be, struct rtx_err *err);
/* Ends the recording: with keep, *graph gets the replayable graph; without (after a failed
 * node), the recording is discarded and *graph is NULL. Nothing recorded has run. Fails
 * (RTX_EGPU naming the cause, *graph NULL) when some recorded call could not be captured, e.g.
 * a kernel that waits for the device inside run_node. */
int rtx_backend_capture_end(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                            struct rtx_err *err);
/* Queues one replay of graph (ordered like run_node; rtx_backend_synchronize waits for it). */
int rtx_backend_graph_launch(struct rtx_backend *be, struct rtx_backend_graph *graph,
                             struct rtx_err *err);
/* Frees a graph from rtx_backend_capture_end of the same backend; NULL is a no-op. */
void rtx_backend_graph_free(struct rtx_backend *be, struct rtx_backend_graph *graph);

#ifdef __cplusplus
}
#endif
#endif /* RTX_BACKEND_H */
