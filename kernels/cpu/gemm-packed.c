/*
 * gemm-packed.c - products whose right operand is a constant of the graph (a weight), for the
 * AVX2 build only (kernels/cpu/cpu-impl.h, ISA variants; ops-linalg.c calls it from that
 * build, the generic build keeps OpenBLAS).
 *
 * DESIGN
 * OpenBLAS copies both operands into its panel layouts on every call. For a weight that copy is
 * the same every time, and at the shapes of served models (tens of rows, hundreds of columns)
 * it cost a sixth of the product. Here the weight is packed once into column panels of NR
 * columns, [N / NR][K][NR] with zeros past N, made from any float dtype (f16/bf16 weights are
 * widened once, not per call), and kept with the backend's entry for the constant
 * (runtime/const-cache.c, rtx__const_derived) while plans use it, in a buffer of the backend
 * (charged to its memory account like the device copies of constants). Every product with a float
 * constant as its right operand takes this path in this build (a constant the backend's cache
 * does not hold is packed for the one call), so a plan's results do not depend on which
 * backend ran it or on what else is cached.
 * The kernel holds MR rows x NR columns of the result in registers (6 x 16 in 12 of the 16 ymm
 * registers; built again with RTX_GEMM_WIDE for CPUs with AVX-512F, 8 x 32 in 16 of the 32
 * zmm registers, RTX_CPU_ISA=avx512; the pack's panel width follows the object): for each k it
 * loads NR packed weights (2 vectors) and multiplies them by each row's a[r][k] broadcast, read
 * straight from the row-major left operand. Tasks are blocks of at most RB rows x PB panels,
 * of equal size (even_split), claimed one at a time over the pool; inside one, k goes in blocks
 * of KC so a panel's block (KC x NR floats, 16 KiB) stays in L1 while the rows' blocks come
 * from L2. On the last k block a fused group's epilogue is applied as each register tile is
 * stored (tile_out: bias, residual and relu on the sums; decision 151), and another activation
 * runs over each panel's column of the task while it is in L1. The build uses FMA
 * (-ffp-contract=fast for this file): results differ from OpenBLAS's in the last bits, as any
 * two summation orders do.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"

#ifdef RTX_GEMM_WIDE /* the AVX-512 object: 8 rows x 32 columns in 16 of the 32 zmm registers */
#define MR 8
#define VW 16
#define BCAST _mm512_set1_ps
#define VMAX _mm512_max_ps
#define GP(name) rtx__cpu_gemm_wide_##name
#else
#define MR 6 /* rows per kernel call */
#define VW 8 /* floats per vector */
#define BCAST _mm256_set1_ps
#define VMAX _mm256_max_ps
#define GP(name) rtx__cpu_gemm_narrow_##name
#endif
#define NR (2 * VW)                    /* columns per panel */
#define KC 256                         /* k per block */
#define RB (16 * MR)                   /* rows per task, at most */
#define PB (64 / NR)                   /* panels per task, at most: 64 columns */
#define INLINE_MACS ((int64_t)1 << 16) /* products this small run on the caller */
#define PACK_KIND_B 0x504b4200u        /* rtx__const_derived kind: B packed, | NR, | tb */

typedef float v8 __attribute__((vector_size(VW * 4)));
typedef float v8u __attribute__((vector_size(VW * 4), aligned(4), may_alias));

struct rtx__cpu_packed_b {
    int64_t K, N, panels, nr;
    size_t bytes;
    float *data;             /* [panels][K][nr], 64-byte aligned */
    struct rtx_buffer *buf;  /* data's buffer when kept (charged to the backend's account);
                              * NULL: data is scratch of one call */
};

/* This object's entry points; the narrow object's rtx__cpu_packed_b_of and
 * rtx__cpu_gemm_packed dispatch between the two. */
int GP(pack_of)(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool tb, int64_t K, int64_t N,
                const struct rtx__cpu_packed_b **out, struct rtx__cpu_packed_b **owned);
void GP(product)(struct rtx_cpu *cpu, int64_t M, float alpha, const float *a, int64_t lda,
                 const struct rtx__cpu_packed_b *b, const float *bias, float beta, bool accumulate,
                 float *y, int64_t ldy, const struct rtx__cpu_epilogue *e);

/* ---- packing ---- */

struct pack_req {
    bool tb; /* B is stored [N, K] */
    int64_t K, N;
    struct rtx_backend *be; /* a kept pack: its memory a buffer of be (charged to be's memory
                             * account, as the device copies of constants are); NULL: scratch */
};

static void free_pack(void *p) {
    struct rtx__cpu_packed_b *pb = p;
    if (pb && pb->buf)
        rtx_buffer_unref(pb->buf);
    else if (pb)
        rtx_free_aligned(pb->data);
    rtx_free(pb);
}

static void *make_pack(void *ctx, const struct rtx_tensor *t) {
    const struct pack_req *q = ctx;
    struct rtx__cpu_packed_b *pb = rtx_calloc(1, sizeof *pb);
    if (pb == NULL) return NULL;
    pb->K = q->K;
    pb->N = q->N;
    pb->panels = (q->N + NR - 1) / NR;
    pb->nr = NR;
    pb->bytes = (size_t)(pb->panels * q->K * NR) * sizeof(float);
    if (q->be && rtx_backend_buffer_new(q->be, pb->bytes, &pb->buf, NULL) == 0)
        pb->data = pb->buf->data;
    else if (!q->be)
        pb->data = rtx_malloc_aligned(pb->bytes);
    if (pb->data == NULL) { /* out of memory, or past the account's share */
        rtx_free(pb);
        return NULL;
    }
    const void *src = rtx_tensor_data(t);
    enum rtx_dtype dt = t->dtype;
    for (int64_t p = 0; p < pb->panels; p++)
        for (int64_t k = 0; k < q->K; k++) {
            float *dst = pb->data + (p * q->K + k) * NR;
            for (int64_t j = 0; j < NR; j++) {
                int64_t n = p * NR + j;
                dst[j] = n >= q->N ? 0.0f
                         : q->tb   ? rtx__load_f32(src, dt, n * q->K + k)
                                   : rtx__load_f32(src, dt, k * q->N + n);
            }
        }
    return pb;
}

int GP(pack_of)(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool tb, int64_t K, int64_t N,
                const struct rtx__cpu_packed_b **out, struct rtx__cpu_packed_b **owned) {
    *out = NULL;
    *owned = NULL;
    struct rtx_backend *be = rtx__cpu_backend(cpu);
    int v = a->node->n_inputs > 1 ? a->node->inputs[1] : -1;
    const struct rtx_tensor *B = a->in[1];
    if (v < 0 || a->graph->values[v].constant == NULL || !rtx_tensor_is_contiguous(B) ||
        rtx_tensor_numel(B) != K * N || K == 0 || N == 0)
        return 0;
    if (B->dtype != RTX_F32 && B->dtype != RTX_F16 && B->dtype != RTX_BF16) return 0;
    struct pack_req q = {.tb = tb, .K = K, .N = N, .be = be};
    size_t bytes = (size_t)((N + NR - 1) / NR * K * NR) * sizeof(float);
    uint32_t kind = PACK_KIND_B | (uint32_t)NR << 1 | (tb ? 1u : 0u);
    struct rtx__cpu_packed_b *pb =
        be ? rtx__const_derived(be, B, kind, bytes, make_pack, &q, free_pack) : NULL;
    if (pb && pb->K == K && pb->N == N) {
        *out = pb;
        return 0;
    }
    /* not in this backend's cache (a plan run by a backend that lends these kernels), or read
     * at another shape: packed for this call, so a product with a constant always takes the
     * same path (and gives the same bits) */
    q.be = NULL;
    if ((*owned = make_pack(&q, B)) == NULL) return RTX_ENOMEM;
    *out = *owned;
    return 0;
}

/* ---- the kernel ---- */

/* What a kernel call does with its block once the products are summed (tile_out). */
struct kernel_out {
    float alpha, beta;
    const float *bias; /* [n], added times beta; NULL: none */
    bool acc_y;        /* add to y instead of overwriting it */
    float *y;
    int64_t ldy, n;
    /* the fused group's epilogue, on the last k block only (as rtx__cpu_epilogue_apply: the
     * bias, then the residual, then relu; another activation runs after the store) */
    const float *ebias; /* [n]; NULL: none */
    const float *res;   /* the tile's residual, rows res_ld apart; NULL: none */
    int64_t res_ld;
    bool relu;
};

/* The tile's sums acc (row r's two vectors at 2r) out to y: alpha, the bias, y's own values,
 * then the epilogue's terms. Not inlined into the kernel: its code after the k loop, inlined,
 * made GCC keep values across the loop and spill accumulators in the 16-register build (a
 * store and a reload per k: half the FMA rate); the sums go through the stack instead, once a
 * tile. */
static __attribute__((noinline)) void tile_out(int m, const v8 *acc, const struct kernel_out *o) {
    float alpha = o->alpha, beta = o->beta;
    const float *bias = o->bias;
    v8 al = (v8)BCAST(alpha), be = (v8)BCAST(beta);
    for (int r = 0; r < m; r++) {
        float *yr = o->y + r * o->ldy;
        v8 o0 = acc[2 * r], o1 = acc[2 * r + 1];
        if (alpha != 1.0f) {
            o0 *= al;
            o1 *= al;
        }
        if (o->n == NR) {
            if (bias) {
                o0 += be * *(const v8u *)bias;
                o1 += be * *(const v8u *)(bias + VW);
            }
            if (o->acc_y) {
                o0 += *(const v8u *)yr;
                o1 += *(const v8u *)(yr + VW);
            }
            if (o->ebias) {
                o0 += *(const v8u *)o->ebias;
                o1 += *(const v8u *)(o->ebias + VW);
            }
            if (o->res) {
                o0 += *(const v8u *)(o->res + r * o->res_ld);
                o1 += *(const v8u *)(o->res + r * o->res_ld + VW);
            }
            if (o->relu) { /* max(0, v) gives v when v is NaN or -0, as 0 > v ? 0 : v */
                o0 = (v8)VMAX((v8){0}, o0);
                o1 = (v8)VMAX((v8){0}, o1);
            }
            *(v8u *)yr = o0;
            *(v8u *)(yr + VW) = o1;
        } else {
            float t[NR];
            memcpy(t, &o0, sizeof o0);
            memcpy(t + VW, &o1, sizeof o1);
            for (int64_t j = 0; j < o->n; j++) {
                float v = bias ? t[j] + beta * bias[j] : t[j];
                v = o->acc_y ? yr[j] + v : v;
                if (o->ebias) v += o->ebias[j];
                if (o->res) v += o->res[r * o->res_ld + j];
                yr[j] = o->relu && 0.0f > v ? 0.0f : v;
            }
        }
    }
}

/* y[m rows][n <= NR cols] (+)= alpha * a[m][kc] . bp[kc][NR]; m is a constant after
 * inlining. */
static inline __attribute__((always_inline)) void kernel(int m, int64_t kc, const float *a,
                                                         int64_t lda, const float *bp,
                                                         const struct kernel_out *o) {
    v8 c0[MR], c1[MR];
    const float *ar[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        c0[r] = c1[r] = (v8){0};
        ar[r] = a + (r < m ? r : 0) * lda;
    }
    for (int64_t k = 0; k < kc; k++) {
        v8 b0 = *(const v8 *)(bp + k * NR), b1 = *(const v8 *)(bp + k * NR + VW);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            if (r >= m) break;
            v8 av = (v8)BCAST(ar[r][k]);
            c0[r] += av * b0;
            c1[r] += av * b1;
        }
    }
    /* the k loop's end: nothing below may be hoisted above it into a register */
    __asm__ volatile("" ::: "memory");
    if (o->n == NR && o->alpha == 1.0f && !o->bias && !o->ebias && !o->res && !o->relu) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) { /* the plain product, stored straight */
            if (r >= m) break;
            float *yr = o->y + r * o->ldy;
            if (o->acc_y) {
                c0[r] += *(const v8u *)yr;
                c1[r] += *(const v8u *)(yr + VW);
            }
            *(v8u *)yr = c0[r];
            *(v8u *)(yr + VW) = c1[r];
        }
        return;
    }
    v8 acc[2 * MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        acc[2 * r] = c0[r];
        acc[2 * r + 1] = c1[r];
    }
    tile_out(m, acc, o);
}

static void kernel_m(int m, int64_t kc, const float *a, int64_t lda, const float *bp,
                     const struct kernel_out *o) {
    switch (m) { /* one specialization per row count */
#if MR == 8
    case 8: kernel(8, kc, a, lda, bp, o); break;
    case 7: kernel(7, kc, a, lda, bp, o); break;
#endif
    case 6: kernel(6, kc, a, lda, bp, o); break;
    case 5: kernel(5, kc, a, lda, bp, o); break;
    case 4: kernel(4, kc, a, lda, bp, o); break;
    case 3: kernel(3, kc, a, lda, bp, o); break;
    case 2: kernel(2, kc, a, lda, bp, o); break;
    default: kernel(1, kc, a, lda, bp, o); break;
    }
}

/* ---- the product ---- */

struct packed_job {
    int64_t M;
    float alpha;
    const float *a;
    int64_t lda;
    const struct rtx__cpu_packed_b *b;
    const float *bias; /* [N], added times beta; NULL: none */
    float beta;
    bool accumulate;
    float *y;
    int64_t ldy;
    const struct rtx__cpu_epilogue *e; /* NULL: none */
    struct rtx__cpu_epilogue act;      /* e's activation when the kernel does not apply it */
    int64_t row_groups;           /* ceil(M / MR) */
    int64_t row_tasks, col_tasks; /* tasks split the row groups and the panels evenly */
};

/* The start of part i of n parts of `total` items that differ by at most one (the first
 * total % n parts one larger), so that a pool's threads get equal work: blocks of RB rows and
 * PB panels with a short last one left a thread waiting on the other (512 rows: five of 96
 * and one of 32). */
static inline int64_t even_split(int64_t total, int64_t n, int64_t i) {
    int64_t q = total / n, r = total % n;
    return i * q + (i < r ? i : r);
}

static void packed_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct packed_job *j = ctx;
    const struct rtx__cpu_packed_b *b = j->b;
    for (int64_t t = begin; t < end; t++) {
        int64_t rt = t / j->col_tasks, ct = t % j->col_tasks;
        int64_t r0 = even_split(j->row_groups, j->row_tasks, rt) * MR;
        int64_t rows = even_split(j->row_groups, j->row_tasks, rt + 1) * MR;
        rows = (rows < j->M ? rows : j->M) - r0;
        int64_t p0 = even_split(b->panels, j->col_tasks, ct);
        int64_t p1 = even_split(b->panels, j->col_tasks, ct + 1);
        for (int64_t k0 = 0; k0 < b->K; k0 += KC) {
            int64_t kc = b->K - k0 < KC ? b->K - k0 : KC;
            bool acc_y = j->accumulate || k0 > 0;
            for (int64_t p = p0; p < p1; p++) {
                int64_t n = b->N - p * NR < NR ? b->N - p * NR : NR;
                const float *bp = b->data + (p * b->K + k0) * NR;
                const struct rtx__cpu_epilogue *e = k0 + kc == b->K ? j->e : NULL;
                for (int64_t r = 0; r < rows; r += MR) {
                    int64_t m = rows - r < MR ? rows - r : MR;
                    struct kernel_out o = {
                        .alpha = j->alpha,
                        .beta = j->beta,
                        .bias = j->bias && k0 == 0 ? j->bias + p * NR : NULL,
                        .acc_y = acc_y,
                        .y = j->y + (r0 + r) * j->ldy + p * NR,
                        .ldy = j->ldy,
                        .n = n};
                    if (e) { /* the last k block: the result is final in the registers */
                        o.ebias = e->bias ? e->bias + p * NR : NULL;
                        o.res = e->res ? e->res + (r0 + r) * e->res_ld + p * NR : NULL;
                        o.res_ld = e->res_ld;
                        o.relu = e->act == RTX_OP_RELU;
                    }
                    kernel_m((int)m, kc, j->a + (r0 + r) * j->lda + k0, j->lda, bp, &o);
                }
                if (e && j->act.act != RTX_OP_COUNT) /* the panel's column, mostly in L1 */
                    rtx__cpu_epilogue_apply(&j->act, j->y + r0 * j->ldy + p * NR, j->ldy, r0,
                                            p * NR, rows, n);
            }
        }
    }
}

void GP(product)(struct rtx_cpu *cpu, int64_t M, float alpha, const float *a, int64_t lda,
                 const struct rtx__cpu_packed_b *b, const float *bias, float beta, bool accumulate,
                 float *y, int64_t ldy, const struct rtx__cpu_epilogue *e) {
    struct packed_job j = {.M = M,
                           .alpha = alpha,
                           .a = a,
                           .lda = lda,
                           .b = b,
                           .bias = bias,
                           .beta = beta,
                           .accumulate = accumulate,
                           .y = y,
                           .ldy = ldy,
                           .e = e,
                           .act = {.act = RTX_OP_COUNT}};
    if (e && e->act != RTX_OP_RELU && e->act != RTX_OP_COUNT)
        j.act = (struct rtx__cpu_epilogue){.act = e->act, .gelu_tanh = e->gelu_tanh};
    j.row_groups = (M + MR - 1) / MR;
    j.row_tasks = (M + RB - 1) / RB;
    j.col_tasks = (b->panels + PB - 1) / PB;
    int64_t tasks = j.row_tasks * j.col_tasks;
    if (M * b->N * b->K <= INLINE_MACS)
        packed_chunk(&j, 0, tasks);
    else
        rtx__cpu_parallel_each(cpu, tasks, packed_chunk, &j);
}

#ifndef RTX_GEMM_WIDE
/* The AVX-512 object's entry points (gemm-packed.c built with RTX_GEMM_WIDE). */
int rtx__cpu_gemm_wide_pack_of(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool tb,
                               int64_t K, int64_t N, const struct rtx__cpu_packed_b **out,
                               struct rtx__cpu_packed_b **owned);
void rtx__cpu_gemm_wide_product(struct rtx_cpu *cpu, int64_t M, float alpha, const float *a,
                                int64_t lda, const struct rtx__cpu_packed_b *b, const float *bias,
                                float beta, bool accumulate, float *y, int64_t ldy,
                                const struct rtx__cpu_epilogue *e);

int rtx__cpu_packed_b_of(struct rtx_cpu *cpu, const struct rtx_node_args *a, bool tb, int64_t K,
                         int64_t N, const struct rtx__cpu_packed_b **out,
                         struct rtx__cpu_packed_b **owned) {
    return rtx__cpu_wide(cpu) ? rtx__cpu_gemm_wide_pack_of(cpu, a, tb, K, N, out, owned)
                              : GP(pack_of)(cpu, a, tb, K, N, out, owned);
}

void rtx__cpu_packed_b_free(struct rtx__cpu_packed_b *b) {
    free_pack(b);
}

void rtx__cpu_gemm_packed(struct rtx_cpu *cpu, int64_t M, float alpha, const float *a, int64_t lda,
                          const struct rtx__cpu_packed_b *b, const float *bias, float beta,
                          bool accumulate, float *y, int64_t ldy,
                          const struct rtx__cpu_epilogue *e) {
    if (b->nr == NR)
        GP(product)(cpu, M, alpha, a, lda, b, bias, beta, accumulate, y, ldy, e);
    else
        rtx__cpu_gemm_wide_product(cpu, M, alpha, a, lda, b, bias, beta, accumulate, y, ldy, e);
}
#endif
