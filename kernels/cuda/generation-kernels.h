/*
 * generation-kernels.h - the extern "C" launchers of generation.cu, the kernels of rope and
 * paged_attention on the CUDA backend (generation.c does the checks, the scratch and the
 * sync). Only kernels/cuda/generation.c includes it. Like every .cu entry point, a launcher
 * returns the launch's cudaError_t and checks nothing itself; the caller checks with
 * RTX_CUDA_CHECK. The structs are plain fields passed to the kernels by value (launch.h's
 * convention), the geometry the CPU reads too (kernels/gen-geometry.h).
 */
#ifndef RTX_KERNELS_CUDA_GENERATION_KERNELS_H
#define RTX_KERNELS_CUDA_GENERATION_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/gen-geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_cuda_rope {
    struct rtx__rope_geom g;
    int32_t dt;            /* enum rtx_dtype of x and y: f32, f16 or bf16 */
    const void *x, *pos;   /* device */
    const float *inv_freq; /* device, g.half entries */
    void *y;               /* device, like x */
};

/* Queues y = rope(x) (docs/ops.md). */
cudaError_t rtx__cuda_rope_launch(const struct rtx_cuda_rope *p, cudaStream_t stream);

/* Keys of one tile of the attention kernel, at most (it may take fewer: rtx__cuda_paged_smem). */
#define RTX_CUDA_PAGED_TILE 64

struct rtx_cuda_paged {
    struct rtx__paged_geom g;
    int32_t dt;            /* enum rtx_dtype of q, k, v, the caches and y */
    const void *q, *k, *v; /* device, contiguous */
    void *kc, *vc;         /* device caches, written by rtx__cuda_paged_write_launch */
    const int32_t *slots, *tables, *qs, *ctx;
    void *y;
    unsigned long long *fault; /* device word: the smallest fault key (gen-geometry.h);
                                * the caller sets it to all ones first; the write,
                                * attention and combine kernels do nothing once it is set */
    int32_t tile;              /* keys per shared-memory tile */
    int32_t vec16;             /* cache rows move in 16-byte units (D * esize % 16 == 0 and
                                * the caches 16-byte aligned) */
    int32_t parts;             /* key partitions per query row, >= 1 */
    int64_t part_keys;         /* keys per partition, a multiple of tile */
    float *part_acc;           /* parts > 1: [T, H, parts, D] unnormalized sums */
    float *part_ml;            /* parts > 1: [T, H, parts, 2] running max and sum */
    int32_t tc_rows;           /* > 0: sequences of this many rows or more are
                                * paged-prefill.cu's (the tensor cores), and the attention and
                                * combine kernels leave their rows alone; 0: none are */
    int32_t tc_parts;          /* paged-prefill.cu's key partitions per row, >= 1
                                * (rtx__cuda_paged_prefill_parts) */
    float *tc_acc;             /* tc_parts > 1: [T, H, tc_parts, D] unnormalized sums */
    float *tc_ml;              /* tc_parts > 1: [T, H, tc_parts, 2] max (natural log) and sum */
};

/* Lowers *p->fault to the smallest key of the metadata's faults (none: unchanged). */
cudaError_t rtx__cuda_paged_check_launch(const struct rtx_cuda_paged *p, cudaStream_t stream);
/* Copies k[t] and v[t] into the caches at slot_mapping[t] for every t with a slot (the
 * metadata checked: a slot outside the cache is skipped all the same). */
cudaError_t rtx__cuda_paged_write_launch(const struct rtx_cuda_paged *p, cudaStream_t stream);
/* Dynamic shared memory of the attention kernel for geometry g, element size esize and a
 * tile of `tile` keys, in bytes. */
size_t rtx__cuda_paged_smem(const struct rtx__paged_geom *g, int esize, int tile);
/* Queues the attention into y: one block per (row, KV head, partition), then, with parts > 1,
 * the combination of the partitions. smem: rtx__cuda_paged_smem of p's tile; past 48 KiB the
 * launcher raises the kernel's limit (the caller has checked the device's). */
cudaError_t rtx__cuda_paged_attention_launch(const struct rtx_cuda_paged *p, size_t smem,
                                             cudaStream_t stream);

/* paged-prefill.cu: whether its tensor-core kernel can serve p (f16 / bf16, D 64 or 128, at
 * most 64 query heads per KV head, 16-byte aligned q, caches and y, compute capability cc =
 * major * 10 + minor of 8.0 or newer); pure. */
bool rtx__cuda_paged_prefill_supported(const struct rtx_cuda_paged *p, int cc);
/* The key partitions per row for the tensor-core kernel on a device of sms multiprocessors:
 * 1 when its CTAs (tiles x KV heads) fill the device twice, else enough to (at most
 * PF_MAX_PARTS, at least one key tile each); pure. */
int rtx__cuda_paged_prefill_parts(const struct rtx_cuda_paged *p, int sms);
/* Queues the attention of the rows of the sequences with p->tc_rows rows or more into y (the
 * write kernel has filled the caches); with p->tc_parts > 1 into tc_acc and tc_ml, then their
 * combination into y. */
cudaError_t rtx__cuda_paged_prefill_launch(const struct rtx_cuda_paged *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* RTX_KERNELS_CUDA_GENERATION_KERNELS_H */
