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

/* ------------------------------------------------------------------------------------------
 * Geometry shared by the backends (kernels/geometry.c). Both return 0, or RTX_EINVAL with the
 * reason in why for the caller's node error.
 * ---------------------------------------------------------------------------------------- */

/* The strided view of a contiguous input that a transpose, expand or slice node copies out:
 * dims, element strides (0 where expand repeats, negative for negative slice steps) and the
 * element offset of its first element. */
struct rtx__strided_view {
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    int64_t strides[RTX_MAX_DIMS]; /* elements */
    int64_t offset;                /* elements */
};
int rtx__transpose_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                        struct rtx__strided_view *v, char *why, size_t why_len);
int rtx__expand_view(int in_nd, const int64_t *in_dims, int out_nd, const int64_t *out_dims,
                     struct rtx__strided_view *v, char *why, size_t why_len);
int rtx__slice_view(const struct rtx_node *node, int nd, const int64_t *in_dims,
                    struct rtx__strided_view *v, char *why, size_t why_len);
/* Whether the executor's output tensor has the view's shape. */
bool rtx__view_matches(const struct rtx__strided_view *v, const struct rtx_tensor *out);

/* A (batched) matmul: op(a) is M x K, op(b) K x N, NumPy 1-D promotion applied; the output's
 * nbat batch dims broadcast a's and b's; a_stride/b_stride give, per batch dim, how many
 * matrices of a and b one step moves (0 where that operand broadcasts). */
struct rtx__matmul_geom {
    bool ta, tb;                   /* transposes in effect (operands of rank >= 2) */
    int64_t M, K, N;
    int nbat;
    int64_t batch_dims[RTX_MAX_DIMS];
    int64_t a_stride[RTX_MAX_DIMS], b_stride[RTX_MAX_DIMS]; /* matrices */
    int64_t nbatch;                /* product of batch_dims */
    int64_t a_mats, b_mats;        /* matrices held by a and by b */
};
int rtx__matmul_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                         const struct rtx_tensor *B, struct rtx__matmul_geom *g, char *why,
                         size_t why_len);

/* A gemm: op(a) M x K times op(b) K x N, with c (when given) broadcasting from cM x cN. */
struct rtx__gemm_geom {
    bool ta, tb;
    float alpha, beta;
    int64_t M, K, N;
    int64_t cM, cN;                /* 1 x 1 without c */
};
int rtx__gemm_geometry(const struct rtx_node *node, const struct rtx_tensor *A,
                       const struct rtx_tensor *B, const struct rtx_tensor *C,
                       const struct rtx_tensor *Y, struct rtx__gemm_geom *g, char *why,
                       size_t why_len);

#endif /* RTX_BACKEND_IMPL_H */
