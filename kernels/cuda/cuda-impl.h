/*
 * cuda-impl.h - internal header of kernels/cuda/: the one macro through which every CUDA call
 * is checked, and the extern "C" entry points of the .cu files. Only kernels/cuda/ includes it;
 * everyone else goes through runtime/backend.h and kernels/cuda/backend-cuda.h.
 *
 * DESIGN
 * RTX_CUDA_CHECK(err, stmt) plays the part of ggml's CUDA_CHECK_GEN, except that a daemon does
 * not abort: it evaluates to 0 when stmt returns cudaSuccess, else to RTX_EGPU with err filled
 * with the statement, the function, the file and line, and the error's name and text. It also
 * clears the thread's last-error state, so a failure reported once is not reported again by the
 * next check. The .cu files return cudaError_t from their entry points and check nothing
 * themselves, so every check lives in C on the caller's side.
 */
#ifndef RTX_KERNELS_CUDA_IMPL_H
#define RTX_KERNELS_CUDA_IMPL_H

#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks a CUDA runtime call; see the DESIGN note. */
#define RTX_CUDA_CHECK(err, stmt)                                                                 \
    rtx__cuda_check((stmt), #stmt, __func__, __FILE__, __LINE__, (err))

/* The function behind RTX_CUDA_CHECK: 0 for cudaSuccess, else RTX_EGPU with err filled. */
int rtx__cuda_check(cudaError_t e, const char *stmt, const char *func, const char *file, int line,
                    struct rtx_err *err);

/* probe.cu: queues on `stream` a kernel writing rtx__cuda_probe_value(seed, i) into buf[i] for
 * i < n; returns the launch's error (cudaSuccess when it was queued). */
cudaError_t rtx__cuda_probe_launch(uint32_t *buf, uint32_t n, uint32_t seed, cudaStream_t stream);

/* ------------------------------------------------------------------------------------------
 * The CUDA backend (kernels/cuda/backend-cuda.c): its context, shared by the op files.
 * ---------------------------------------------------------------------------------------- */

struct rtx_mem_pool;
struct rtx_node_args;
struct rtx_graph;
struct rtx_node;

/* A check read at the backend's next synchronize (checks.c, DESIGN): a gather's index range,
 * or (paged set) a paged_attention's metadata. Gather: the queued kernels leave in flag[0] the
 * first indices element out of range (all ones: none) and in flag[1] that index; a set flag
 * fails the synchronize with RTX_EINVAL: label, then "index I (indices element E) out of range
 * for axis A of size S". paged_attention: flag[0] is the smallest fault key
 * (kernels/gen-geometry.h; all ones: none), and the message the CPU's for it
 * (rtx__paged_fault_why on the node's geometry). */
struct rtx__paged_geom;
struct rtx__cuda_check {
    unsigned long long *flag;      /* device scratch (rtx__cuda_scratch), 2 words */
    char *label;                   /* rtx_malloc'd "node N 'name' (op): ", how
                                      rtx__backend_node_err starts the node's messages */
    int64_t axis, axis_dim;
    struct rtx__paged_geom *paged; /* rtx_malloc'd copy of the node's geometry; NULL: gather */
    const void *owner;             /* pending: the graph owning flag, label and paged; NULL: the
                                    * entry */
};

/* Checks in the order their nodes ran. */
struct rtx__cuda_checks {
    struct rtx__cuda_check *v;
    int n, cap;
};

struct rtx_cuda {
    int device;                    /* CUDA device index */
    cudaStream_t stream;           /* the compute stream: every kernel of a plan */
    cudaStream_t copy_stream;      /* staged host<->device copies, ordered by events */
    struct rtx_mem_pool *pool;     /* device memory (buffers and scratch) */
    struct rtx_mem_pool *pinned;   /* pinned host staging memory */
    void *blaslt;                  /* cublasLtHandle_t, created with the backend */
    void *blaslt_workspace;        /* device workspace for cuBLASLt */
    size_t blaslt_workspace_bytes; /* bytes */
    bool allow_tf32;               /* f32 GEMM may use TF32 tensor cores */
    int sm_count;
    int cc_major, cc_minor;
    struct rtx_backend_graph *capture; /* the graph being captured on stream, else NULL */
    void *cudnn;                   /* attention-cudnn.c's state, made on first use, else NULL */
    const char *attention_route;   /* the route the last attention node took; NULL before one */
    struct rtx__cuda_checks pending; /* deferred checks synchronize reads (checks.c) */
    unsigned long long *check_flags; /* pinned host memory they are read into */
};

/* Device scratch memory from the backend's pool, ordered on cu->stream; release with
 * rtx__cuda_scratch_release once the kernels using it are queued (stream order keeps it
 * alive until they ran). During a graph capture the release is deferred: the block stays
 * with the captured graph, whose replays use it, until the graph is freed. */
int rtx__cuda_scratch(struct rtx_cuda *cu, size_t bytes, void **ptr, struct rtx_err *err);
void rtx__cuda_scratch_release(struct rtx_cuda *cu, void *ptr);
/* Registers c once its kernels are queued and takes its flag and label, also on failure:
 * while cu->capture is set the check goes with the captured graph (every launch of it arms the
 * check again) and the flag with its held scratch, else it waits in cu->pending until
 * synchronize reads it (checks.c, DESIGN). 0, or RTX_ENOMEM (outside a capture; nothing is
 * pending then). backend-cuda.c. */
int rtx__cuda_check_defer(struct rtx_cuda *cu, const struct rtx__cuda_check *c,
                          struct rtx_err *err);
/* checks.c: the pinned flags array (open) and everything pending (close: dropped, freed). */
int rtx__cuda_checks_open(struct rtx_cuda *cu, struct rtx_err *err);
void rtx__cuda_checks_close(struct rtx_cuda *cu);
/* Room for `more` checks in l (0 or RTX_ENOMEM, l unchanged); push appends c (its flag and
 * label then belong to l's owner); free frees the labels and the array of a graph's list. */
int rtx__cuda_checks_reserve(struct rtx__cuda_checks *l, int more);
int rtx__cuda_checks_push(struct rtx__cuda_checks *l, const struct rtx__cuda_check *c);
void rtx__cuda_checks_free(struct rtx__cuda_checks *l);
/* A launch of the graph `owner` whose checks are l: copies into cu->pending, owned by it (room
 * reserved before the launch). forget takes owner's copies off cu->pending. */
void rtx__cuda_checks_arm(struct rtx_cuda *cu, const struct rtx__cuda_checks *l,
                          const void *owner);
void rtx__cuda_checks_forget(struct rtx_cuda *cu, const void *owner);
/* drop forgets every pending check, releasing the flags and labels of those no graph owns.
 * settle waits for cu->stream, reads the pending flags and drops them: 0; RTX_EINVAL with the
 * first failed check's message; RTX_EGPU (err filled by the CUDA call) when a copy or the
 * wait failed. */
void rtx__cuda_checks_drop(struct rtx_cuda *cu);
int rtx__cuda_checks_settle(struct rtx_cuda *cu, struct rtx_err *err);
/* One row-major product through cuBLASLt, the backend's only cuBLASLt path
 * (kernels/cuda/gemm-lt.c): for b < batch, d[b] [M, N] = alpha op(a[b]) op(b[b]) + beta c[b]
 * + bias, then GELU (tanh) when gelu is set, accumulated in f32 and rounded once to d's type.
 * Strides are elements between batch matrices (0: one matrix shared); c may be NULL (then
 * beta scales d's old contents: 0 ignores them, 1 adds to them) or a separate matrix shaped
 * like d; bias (N elements of type, broadcast over rows) may be NULL. align: the alignment in
 * bytes every pointer of every batch is known to have, for all four operands (0: each
 * operand's base pointer's own). Uses the backend's fixed workspace, so the call can be
 * captured into a CUDA graph; the algorithm is cached per shape. 0, or RTX_EGPU /
 * RTX_EUNSUPPORTED / RTX_ELIMIT with the cuBLASLt status in err (not prefixed with a node). */
struct rtx__cuda_lt {
    cudaDataType_t type;           /* a, b, bias; c and d too unless d_f32 */
    bool d_f32;                    /* c and d are f32 (attention's scores) */
    bool ta, tb;                   /* transposes */
    int64_t M, N, K;
    int64_t lda, ldb, ldd;         /* row-major leading dims, elements (c shares ldd) */
    int64_t batch, sa, sb, sc, sd; /* batch >= 1; strides, elements */
    float alpha, beta;
    const void *a, *b, *c, *bias;
    void *d;
    bool gelu;
    uint32_t align;                /* bytes; 0: from the pointers */
};
int rtx__cuda_lt_gemm(struct rtx_cuda *cu, const struct rtx__cuda_lt *g, struct rtx_err *err);
/* The largest power of two, at most 256, dividing bits (256 for 0): the alignment common to
 * every address and byte offset ORed into bits (gemm-lt.c). */
uint32_t rtx__cuda_lt_align(uintptr_t bits);
/* cuBLASLt's storage type of f32, f16 and bf16 into *t; RTX_EUNSUPPORTED (t untouched) for
 * every other dtype (gemm-lt.c). */
int rtx__cuda_data_type(enum rtx_dtype dt, cudaDataType_t *t);
/* For a call that failed with rc and filled err itself (rtx__cuda_lt_gemm, RTX_CUDA_CHECK):
 * prefixes err's message with the node as rtx__backend_node_err does; returns rc (gemm-lt.c). */
int rtx__cuda_node_fail(const struct rtx_node_args *a, int rc, struct rtx_err *err);


/* Op groups, one per file; each switches on a->node->op, and its supports function tells
 * whether it runs this node (op and input dtypes). */
int rtx__cuda_elementwise(struct rtx_cuda *cu, const struct rtx_node_args *a,
                          struct rtx_err *err);        /* add .. greater, cast, where */
bool rtx__cuda_elementwise_supports(const struct rtx_graph *g, const struct rtx_node *n);
int rtx__cuda_shape(struct rtx_cuda *cu, const struct rtx_node_args *a,
                    struct rtx_err *err);              /* transpose .. gather, constant */
bool rtx__cuda_shape_supports(const struct rtx_graph *g, const struct rtx_node *n);
int rtx__cuda_linalg(struct rtx_cuda *cu, const struct rtx_node_args *a,
                     struct rtx_err *err);             /* matmul, gemm, attention */
bool rtx__cuda_linalg_supports(const struct rtx_graph *g, const struct rtx_node *n);
int rtx__cuda_reduce(struct rtx_cuda *cu, const struct rtx_node_args *a,
                     struct rtx_err *err);             /* reduce_*, argmax, softmax, norms */
bool rtx__cuda_reduce_supports(const struct rtx_graph *g, const struct rtx_node *n);
/* Fused groups (fused.c): how many nodes from order[0] on run as one group (1: none); see
 * rtx_backend_fused_span. */
int rtx__cuda_fused_span(const struct rtx_graph *g, const int *order, int n, const int *uses);
/* Runs a group that rtx__cuda_fused_span accepted (args of its n nodes, in order); nodes
 * whose shapes do not fit the fused kernel go through run_node one by one. */
int rtx__cuda_run_fused(struct rtx_cuda *cu, const struct rtx_node_args *args, int n,
                        int (*run_node)(struct rtx_cuda *cu, const struct rtx_node_args *a,
                                        struct rtx_err *err),
                        struct rtx_err *err);
int rtx__cuda_conv(struct rtx_cuda *cu, const struct rtx_node_args *a,
                   struct rtx_err *err);               /* conv2d, max_pool2d, avg_pool2d */
bool rtx__cuda_conv_supports(const struct rtx_graph *g, const struct rtx_node *n);
int rtx__cuda_generation(struct rtx_cuda *cu, const struct rtx_node_args *a,
                         struct rtx_err *err);         /* rope, paged_attention */
bool rtx__cuda_generation_supports(const struct rtx_graph *g, const struct rtx_node *n);

/* Functions both the host and the device compile. */
#ifdef __CUDACC__
#define RTX_CUDA_HOST_DEVICE __host__ __device__
#else
#define RTX_CUDA_HOST_DEVICE
#endif

/* The probe's pattern: distinct per element and per seed, cheap on both sides. */
RTX_CUDA_HOST_DEVICE static inline uint32_t rtx__cuda_probe_value(uint32_t seed, uint32_t i) {
    return (seed ^ (i * 2654435761u)) + i;
}

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_IMPL_H */
