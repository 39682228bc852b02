/*
 * backend.h - the device backend interface (after ggml-backend): a table of function pointers
 * per device kind. The executor (runtime/) allocates, runs nodes and synchronizes only through
 * these wrappers, so it never branches on the device type. kernels/cpu/ is the reference
 * implementation of every op; later backends are checked against it.
 * This is the kernels module's one public header: the CPU backend, and CUDA device discovery
 * (kernels/cuda/), which the CUDA backend builds on.
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

struct rtx_cpu_options {
    int n_threads;               /* worker threads for heavy ops; 0: one per online CPU */
};

/* The CPU backend. */
int rtx_backend_cpu_new(const struct rtx_cpu_options *opt, struct rtx_backend **out,
                        struct rtx_err *err);

struct rtx_cuda_options {
    int device;                  /* CUDA device index */
    size_t memory_cap_bytes;     /* device pool cap, 0: no cap beyond the device */
    bool allow_tf32;             /* f32 GEMM may use TF32 tensor cores */
    bool disable_graphs;         /* no CUDA graph capture: plans launch kernel by kernel */
};

/* The CUDA backend on one device (kernels/cuda/backend-cuda.c). RTX_EGPU with the CUDA error
 * when the device cannot be used. */
int rtx_backend_cuda_new(const struct rtx_cuda_options *opt, struct rtx_backend **out,
                         struct rtx_err *err);

struct rtx_mem_pool_stats; /* runtime/mem-pool.h */

/* Statistics of a CUDA backend's two caching pools: device memory (*device) and pinned host
 * staging memory (*pinned); either pointer may be NULL. Thread-safe: it may run while another
 * thread computes on the backend (each pool takes its own lock). RTX_EINVAL when be is not a
 * CUDA backend. */
int rtx_backend_cuda_pool_stats(struct rtx_backend *be, struct rtx_mem_pool_stats *device,
                                struct rtx_mem_pool_stats *pinned, struct rtx_err *err);

/* The route the last attention node run on this CUDA backend took: "cudnn", "flash" (rtxd's
 * fused kernel) or "unfused" (cuBLASLt and softmax kernels); "" before the first attention
 * node or when be is not a CUDA backend. A recorded (captured) node counts as taken. For
 * benchmarks and tests that must name what ran rather than what RTX_ATTN_ROUTE asked. */
const char *rtx_backend_cuda_attention_route(struct rtx_backend *be);

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

/* ------------------------------------------------------------------------------------------
 * CUDA devices (kernels/cuda/device.c)
 *
 * Discovery through the CUDA runtime, before any backend exists: what the host has, what each
 * device is, and whether it can run a kernel. A host without a GPU or without a working driver
 * is not an error: the list is empty and says why, and the caller runs on the CPU backend.
 * Failing CUDA calls give RTX_EGPU with a message naming the call, the function, the file and
 * the line; nothing here aborts. The calls select devices on the calling thread and restore
 * the thread's current device before returning.
 * ---------------------------------------------------------------------------------------- */

#define RTX_CUDA_NAME_LEN 256 /* bytes, with the NUL (cudaDeviceProp.name's size) */

/* One CUDA device as the runtime describes it. */
struct rtx_cuda_device {
    int index;                    /* CUDA device ordinal (after CUDA_VISIBLE_DEVICES) */
    char name[RTX_CUDA_NAME_LEN]; /* "NVIDIA H200" */
    char pci_bus_id[32];          /* "0000:1b:00.0" */
    int sm_count;                 /* streaming multiprocessors */
    int cc_major, cc_minor;       /* compute capability, 9.0 on Hopper */
    size_t memory_bytes;          /* total global memory, bytes */
    size_t memory_free_bytes;     /* free when last queried, bytes */
    bool healthy;                 /* properties read and, if run, the self-test passed */
    char detail[256];             /* why not healthy; "" when healthy */
};

/* The devices of this host. n == 0 with `absent` set when the host has no usable CUDA device:
 * no driver, no device, a driver too old for the runtime, or a driver that does not answer;
 * driver_fault tells the last two (a driver is installed but failed) from the first two. */
struct rtx_cuda_devices {
    int n;                        /* devices listed */
    struct rtx_cuda_device *devs; /* n entries, rtx_calloc'ed; NULL when n == 0 */
    char absent[256];             /* n == 0: why ("no NVIDIA driver is installed") */
    bool driver_fault;            /* n == 0 because an installed driver failed */
};

/* Fills *l (caller-allocated) with every CUDA device: properties and free memory, and, when
 * selftest is set, the result of rtx_cuda_device_selftest. A device whose query or self-test
 * fails is listed unhealthy with the message in its detail. Returns 0 (also when no device is
 * usable: see struct rtx_cuda_devices), or RTX_ENOMEM. Free with rtx_cuda_devices_close, also
 * after a failure. */
int rtx_cuda_devices_init(struct rtx_cuda_devices *l, bool selftest, struct rtx_err *err);
void rtx_cuda_devices_close(struct rtx_cuda_devices *l);

/* Number of CUDA devices, 0 when none is usable (then `why`, if not NULL, gets the reason as
 * in struct rtx_cuda_devices.absent, and *driver_fault, if not NULL, whether a driver failed).
 * Never fails. */
int rtx_cuda_device_count(char *why, size_t why_size, bool *driver_fault);

/* Properties and free memory of device `index` (out->healthy set, detail ""). An index that
 * is not a device, or a device that does not answer, gives RTX_EGPU. */
int rtx_cuda_device_query(int index, struct rtx_cuda_device *out, struct rtx_err *err);

/* Runs work on device `index`: allocates a buffer, launches a kernel that writes a pattern
 * into it, copies it back and checks every element. 0 when the device computed the pattern;
 * RTX_EGPU with the failing call or the first wrong element otherwise. */
int rtx_cuda_device_selftest(int index, struct rtx_err *err);

/* The cuDNN the CUDA backend's attention uses (libcudnn.so.9, loaded at run time on the first
 * call; docs/gpu.md "Fused attention"): its version as major * 10000 + minor * 100 + patch,
 * or 0 with the reason in why (may be NULL) when it cannot be loaded, in which case attention
 * runs on rtxd's own kernels. */
long rtx_cuda_cudnn_version(char *why, size_t why_size);

#ifdef __cplusplus
}
#endif
#endif /* RTX_BACKEND_H */
