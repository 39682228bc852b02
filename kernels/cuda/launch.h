/*
 * launch.h - launch parameters shared by the C halves (elementwise.c, shape.c) and the kernel
 * halves (elementwise.cu, shape.cu) of the CUDA op groups. Plain structs of fixed-width
 * integers that both compilers lay out alike; dtypes and ops travel as their enum values.
 *
 * DESIGN
 * The C side does everything that can fail or needs the runtime (attribute parsing, shape
 * checks, broadcast strides, dimension merging, error messages) and fills one of these
 * structs; the .cu side only launches and returns the launch's cudaError_t, which the C side
 * checks with RTX_CUDA_CHECK. The structs are passed to kernels by value (a few hundred
 * bytes, well under the parameter limit), so a launch needs no device allocation.
 */
#ifndef RTX_KERNELS_CUDA_LAUNCH_H
#define RTX_KERNELS_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RTX_CUDA_DIMS 8   /* RTX_MAX_DIMS */
#define RTX_CUDA_EW_IN 3  /* most inputs of an elementwise op (where) */

/* One elementwise op over a contiguous output of n elements. The output shape is given
 * after merging (size-1 dims dropped, neighbours every operand walks as one merged), with
 * each input's stride in elements per output dim (0 where it broadcasts). */
struct rtx_cuda_ew {
    int32_t op;                               /* enum rtx_op */
    int32_t n_in;
    int32_t in_dt[RTX_CUDA_EW_IN];            /* enum rtx_dtype per input */
    int32_t out_dt;                           /* enum rtx_dtype */
    int32_t gelu_tanh;                        /* gelu: approximate = "tanh" */
    int32_t ndim;                             /* merged rank, >= 1 */
    int64_t n;                                /* output elements, > 0 */
    int64_t dims[RTX_CUDA_DIMS];              /* merged output dims */
    int64_t st[RTX_CUDA_EW_IN][RTX_CUDA_DIMS]; /* elements per step of each dim, per input */
    const void *in[RTX_CUDA_EW_IN];
    void *out;
};

/* Queues the op on `stream`; returns the launch's error. */
cudaError_t rtx__cuda_ew_launch(const struct rtx_cuda_ew *p, cudaStream_t stream);

/* A strided gather into a contiguous destination: dst[i] = src[offset(i)], where offset
 * walks dims with per-dim source strides (units, negative for reversed slices, 0 for
 * broadcast dims). A unit is an element or, where the C side widened a unit-stride innermost
 * run, several elements moved as one: 1, 2, 4, 8 or 16 bytes, src and dst aligned to it.
 * tile >= 0 asks for the tiled transpose: dims[tile] and the last dim go through shared-memory
 * tiles, loads coalesced along dims[tile] (source stride 1 for speed; any stride is correct)
 * and stores along the last dim; units of at most 8 bytes. */
struct rtx_cuda_copy {
    int32_t ndim;                  /* >= 1 */
    int32_t esize;                 /* bytes per unit: 1, 2, 4, 8 or 16 */
    int32_t tile;                  /* dim tiled with the last one (< ndim - 1), or -1 */
    int64_t n;                     /* units, > 0 */
    int64_t dims[RTX_CUDA_DIMS];
    int64_t str[RTX_CUDA_DIMS];    /* source units per step of each dim */
    const void *src;               /* source unit of output unit 0 */
    void *dst;
};

cudaError_t rtx__cuda_copy_launch(const struct rtx_cuda_copy *p, cudaStream_t stream);

/* gather along one axis, in units of `unit` bytes (1, 2, 4 or 8; divides a row): out has
 * outer x n_idx rows of `inner` units, row (o, i) copied from data row o * axis_dim + idx[i]
 * (negative indices wrap once). An index outside [-axis_dim, axis_dim) writes zeros and
 * lowers bad[0] (all ones, set by the caller) to its position in idx; a second kernel then
 * copies the index found there into bad[1] (as an int64), so the check can be read after the
 * indices' memory was reused. */
struct rtx_cuda_gather {
    int32_t unit;                  /* bytes per copied unit */
    int32_t idx64;                 /* indices are i64 (else i32) */
    int64_t outer, n_idx, axis_dim, inner;
    const void *data;
    const void *idx;
    void *out;
    unsigned long long *bad;       /* device, 2 words: first bad position or all ones, index */
};

cudaError_t rtx__cuda_gather_launch(const struct rtx_cuda_gather *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_LAUNCH_H */
