/*
 * f32-scratch.c - f16/bf16 <-> f32 conversion scratch for the kernels that compute in f32
 * through OpenBLAS (matmul, gemm, attention, conv2d).
 */
#include "kernels/cpu/cpu-impl.h"

#define CONVERT_GRAIN (1 << 15) /* elements per conversion task */

struct convert_job {
    const void *src;
    void *dst;
    enum rtx_dtype dt; /* the dtype that is not f32 */
};

static void widen_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct convert_job *j = ctx;
    float *dst = j->dst;
    for (int64_t i = begin; i < end; i++) dst[i] = rtx__load_f32(j->src, j->dt, i);
}

static void narrow_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct convert_job *j = ctx;
    const float *src = j->src;
    for (int64_t i = begin; i < end; i++) rtx__store_f32(j->dst, j->dt, i, src[i]);
}

/* The data of a float tensor as f32: the tensor's own memory when it is f32, else a widened
 * copy in *owned (rtx_free it). NULL when out of memory. */
const float *rtx__cpu_as_f32(struct rtx_cpu *cpu, const struct rtx_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == RTX_F32) return rtx_tensor_data(t);
    int64_t n = rtx_tensor_numel(t);
    float *f = rtx_malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    if (f == NULL) return NULL;
    struct convert_job j = {.src = rtx_tensor_data(t), .dst = f, .dt = t->dtype};
    rtx__cpu_parallel_for(cpu, n, CONVERT_GRAIN, widen_chunk, &j);
    *owned = f;
    return f;
}

/* Where a kernel writes its f32 result: the output itself when f32, else a scratch in *owned
 * that rtx__cpu_finish_f32 rounds into the output. */
float *rtx__cpu_out_f32(struct rtx_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == RTX_F32) return rtx_tensor_data(t);
    int64_t n = rtx_tensor_numel(t);
    *owned = rtx_malloc((size_t)(n > 0 ? n : 1) * sizeof **owned);
    return *owned;
}

void rtx__cpu_finish_f32(struct rtx_cpu *cpu, struct rtx_tensor *t, const float *scratch) {
    if (scratch == NULL) return;
    struct convert_job j = {.src = scratch, .dst = rtx_tensor_data(t), .dt = t->dtype};
    rtx__cpu_parallel_for(cpu, rtx_tensor_numel(t), CONVERT_GRAIN, narrow_chunk, &j);
}
