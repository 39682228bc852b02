/*
 * backend-cuda.h - the CUDA backend (kernels/cuda/backend-cuda.c): its options, constructor and
 * the queries only it answers (pool statistics, the attention route), and CUDA device discovery
 * (kernels/cuda/device.c), which the backend builds on and which callers use before any backend
 * exists. Everything else about a backend goes through runtime/backend.h.
 */
#ifndef RTX_BACKEND_CUDA_H
#define RTX_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/backend.h"
#include "runtime/mem-pool.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_cuda_options {
    int device;                  /* CUDA device index */
    size_t memory_cap_bytes;     /* device pool cap, 0: no cap beyond the device */
    bool allow_tf32;             /* f32 GEMM may use TF32 tensor cores */
    bool disable_graphs;         /* no CUDA graph capture: plans launch kernel by kernel */
    /* Charged for each segment of the device pool (not the pinned host pool); NULL: none.
     * Must outlive the backend. */
    struct rtx_mem_account *account;
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
#endif /* RTX_BACKEND_CUDA_H */
