/*
 * attention-cudnn.h - the attention route through cuDNN's fused flash-attention engine
 * (attention-cudnn.c), called by kernels/cuda/linalg.c's run_attention. Only linalg.c and
 * backend-cuda.c (teardown) include it.
 *
 * DESIGN
 * cuDNN is optional at run time: libcudnn.so.9 is loaded with dlopen on first use, so rtxd
 * neither links against it nor needs it installed. Without the library (or without its
 * headers at build time) rtx__cudnn_sdpa answers RTX_EUNSUPPORTED with the reason and the
 * caller takes the hand-written kernel. The problem is one struct of plain fields: 4-D
 * [b, h, s, d] views with element strides (the last stride 1), so q, k, v and out may be
 * laid out [b, s, h, d] as well as [b, h, s, d].
 */
#ifndef RTX_KERNELS_CUDA_ATTENTION_CUDNN_H
#define RTX_KERNELS_CUDA_ATTENTION_CUDNN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/cuda-impl.h"

struct rtx_cuda_sdpa {
    enum rtx_dtype dt;            /* RTX_F16 or RTX_BF16, for q, k, v and out */
    int64_t b, h;                 /* batch and heads */
    int64_t lq, lk;               /* query and key lengths */
    int64_t d, dv;                /* head dims of q / k and of v / out */
    int64_t q_str[4], k_str[4], v_str[4], o_str[4]; /* elements, per [b, h, s, d] */
    bool causal;                  /* key j > query i masked (top-left aligned) */
    float scale;                  /* applied to q k^T before the mask */
    const void *q, *k, *v;        /* device */
    void *out;                    /* device */
};

/* True when the problem has a shape cuDNN's flash engine takes: f16 / bf16, head dims
 * multiples of 8 up to 256 (128 before compute capability 9.0), lengths >= 1, every last
 * stride 1, every pointer and stride 16-byte aligned, cc >= 8.0. Pure: no cuDNN call. */
bool rtx__cudnn_sdpa_supported(const struct rtx_cuda_sdpa *p, int cc);

/* Queues out = softmax(scale q k^T [causal]) v on cu->stream through cuDNN; the execution
 * plan is built on the first call for each shape, stride set and dtype and kept with the
 * backend. 0; RTX_EUNSUPPORTED when cuDNN cannot run it here (library missing, too old, or
 * no engine for the graph: the reason in err, and the caller may take another route);
 * RTX_EGPU / RTX_ENOMEM when queuing failed. Messages are not prefixed with a node. */
int rtx__cudnn_sdpa(struct rtx_cuda *cu, const struct rtx_cuda_sdpa *p, struct rtx_err *err);

/* The loaded cuDNN's version (e.g. 91400), or 0 with the reason in why when it cannot be
 * loaded. Loads the library on the first call. */
long rtx__cudnn_version(char *why, size_t why_len);

/* Frees the backend's cuDNN handle and cached plans (cu->cudnn); NULL-safe. */
void rtx__cudnn_free(struct rtx_cuda *cu);

#endif /* RTX_KERNELS_CUDA_ATTENTION_CUDNN_H */
