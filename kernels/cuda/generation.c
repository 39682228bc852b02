/*
 * generation.c - rope and paged_attention on the CUDA backend (docs/ops.md), for f32, f16
 * and bf16; the kernels are generation.cu's.
 *
 * DESIGN
 * The shapes are read and checked by the CPU's own code (kernels/gen-geometry.c). rope is
 * one launch. paged_attention checks its metadata on the device first, without waiting for
 * the verdict: the check kernel leaves the smallest fault key in a flag word, the write,
 * attention and combine kernels read it first and do nothing when it is set (so a bad entry
 * never reaches the caches or an address), and the node defers the check to the backend's
 * next synchronize (kernels/cuda/checks.c, as gather's), which fails with the CPU's message
 * for the node. A step of 16 layers no longer waits for the stream 16 times (it did, to read
 * each verdict back), so the host queues the next layers' kernels while the GPU runs. The
 * write kernel fills the cache slots and the attention kernel (with its combine step when
 * the keys are split into partitions) computes the output. The attention kernel's shared memory
 * holds the G query heads of one KV head and a tile of keys and values; the tile shrinks (64 keys
 * down to 8) until that fits in the default 48 KiB, and past it the launch asks for the device's
 * opt-in limit. Partitions: when rows x KV heads give fewer than two blocks per SM, the keys of
 * the longest context the block tables allow are split so that there are (at least PART_MIN_KEYS
 * keys per partition, at most MAX_PARTS partitions). Before the per-row kernel,
 * paged-prefill.cu's tensor-core kernel takes the prompt chunks (and, in wide decode batches,
 * the decode rows) when it can (tensor_core_rows, decision 145); the per-row kernel then
 * leaves those rows alone.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/generation-kernels.h"
#include "runtime/backend-impl.h"

#define DEFAULT_SMEM (48 * 1024) /* bytes a kernel may use without opting in */
#define MIN_TILE 8               /* keys per tile, at least */
#define PART_MIN_KEYS 64         /* keys per partition, at least (one tile) */
#define MAX_PARTS 64             /* partitions per row, at most */

enum { PA_Q, PA_K, PA_V, PA_KC, PA_VC, PA_SLOTS, PA_TABLES, PA_QSTART, PA_CTX, PA_N };

static bool is_float(enum rtx_dtype dt) {
    return dt == RTX_F32 || dt == RTX_F16 || dt == RTX_BF16;
}

/* ------------------------------------------------------------------------------------------
 * rope
 * ---------------------------------------------------------------------------------------- */

static int run_rope(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    if (a->n_in != 3) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "needs 3 inputs");
    struct rtx_cuda_rope p = {.dt = (int32_t)a->in[0]->dtype,
                              .x = rtx_tensor_data(a->in[0]),
                              .pos = rtx_tensor_data(a->in[1]),
                              .inv_freq = rtx_tensor_data(a->in[2]),
                              .y = rtx_tensor_data(a->out[0])};
    char why[160];
    int rc = rtx__rope_geometry(a->node, a->in[0], a->in[1], a->in[2], a->out[0], &p.g, why,
                                sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    rc = RTX_CUDA_CHECK(err, rtx__cuda_rope_launch(&p, cu->stream));
    return rc ? rtx__cuda_node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * paged_attention
 * ---------------------------------------------------------------------------------------- */

/* The metadata check, deferred (kernels/cuda/checks.c): a flag word set to all ones, the
 * check kernel lowering it to the smallest fault key; p->fault points at it, and the write,
 * attention and combine kernels return at once when it is set, so a bad entry never reaches
 * the caches or an address. *c is the check to defer once the kernels are queued (its label
 * the node's, its geometry a copy). */
static int arm_metadata_check(struct rtx_cuda *cu, const struct rtx_node_args *a,
                              struct rtx_cuda_paged *p, struct rtx__cuda_check *c,
                              struct rtx_err *err) {
    struct rtx_err label;
    rtx__backend_node_err(&label, a, RTX_EINVAL, "%s", "");
    *c = (struct rtx__cuda_check){.label = rtx_strdup(label.msg),
                                  .paged = rtx_malloc(sizeof *c->paged)};
    if (c->label == NULL || c->paged == NULL) {
        rtx_free(c->label);
        rtx_free(c->paged);
        return rtx__backend_node_err(err, a, RTX_ENOMEM, "out of memory");
    }
    *c->paged = p->g;
    void *flag = NULL;
    int rc = rtx__cuda_scratch(cu, 2 * sizeof *c->flag, &flag, err);
    if (rc == 0) {
        p->fault = c->flag = flag;
        rc = RTX_CUDA_CHECK(err, cudaMemsetAsync(flag, 0xff, 2 * sizeof *c->flag, cu->stream));
    }
    if (rc == 0) rc = RTX_CUDA_CHECK(err, rtx__cuda_paged_check_launch(p, cu->stream));
    if (rc == 0) return 0;
    if (flag) rtx__cuda_scratch_release(cu, flag);
    rtx_free(c->label);
    rtx_free(c->paged);
    return rtx__cuda_node_fail(a, rc, err);
}

/* The tile (shared memory under DEFAULT_SMEM where it can be) and the partitions. */
static int plan_launch(struct rtx_cuda *cu, const struct rtx_node_args *a,
                       struct rtx_cuda_paged *p, size_t *smem, struct rtx_err *err) {
    const struct rtx__paged_geom *g = &p->g;
    int esize = (int)rtx_dtype_size((enum rtx_dtype)p->dt);
    p->tile = RTX_CUDA_PAGED_TILE;
    while (p->tile > MIN_TILE && rtx__cuda_paged_smem(g, esize, p->tile) > DEFAULT_SMEM)
        p->tile /= 2;
    *smem = rtx__cuda_paged_smem(g, esize, p->tile);
    if (*smem > DEFAULT_SMEM) {
        int optin = 0;
        int rc = RTX_CUDA_CHECK(
            err,
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cu->device));
        if (rc) return rtx__cuda_node_fail(a, rc, err);
        if (*smem > (size_t)optin)
            return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED,
                                         "%lld query heads per KV head of size %lld need %zu "
                                         "bytes of shared memory; the device has %d",
                                         (long long)g->G, (long long)g->D, *smem, optin);
    }
    int64_t blocks = g->T * g->Hkv, max_keys = g->B * g->BS, want = 2 * (int64_t)cu->sm_count;
    p->parts = 1;
    if (blocks < want && max_keys >= 2 * PART_MIN_KEYS) {
        int64_t parts = (want + blocks - 1) / blocks, by_keys = max_keys / PART_MIN_KEYS;
        parts = parts < by_keys ? parts : by_keys;
        p->parts = (int32_t)(parts < MAX_PARTS ? parts : MAX_PARTS);
    }
    int64_t per = (max_keys + p->parts - 1) / p->parts;
    p->part_keys = (per + p->tile - 1) / p->tile * p->tile;
    if (p->part_keys < 1) p->part_keys = p->tile;
    uintptr_t bits = (uintptr_t)p->kc | (uintptr_t)p->vc | (uintptr_t)(g->D * esize);
    p->vec16 = bits % 16 == 0;
    return 0;
}

/* p->tc_rows: which sequences paged-prefill.cu's tensor-core kernel takes (decision 145).
 * RTX_PAGED_ROUTE=rows: none (the per-row kernel takes every row); chunks: those of two or
 * more rows; all: every sequence; auto (the default): the chunks, and the decode rows too
 * when the batch's sequences times KV heads fill the device twice over (the per-row kernel
 * splits the keys of a small batch into partitions, the tensor-core kernel does not). */
static int tensor_core_rows(const struct rtx_cuda *cu, const struct rtx_node_args *a,
                            struct rtx_cuda_paged *p, struct rtx_err *err) {
    const char *route = getenv("RTX_PAGED_ROUTE");
    p->tc_rows = 0;
    if (route && *route && strcmp(route, "auto") && strcmp(route, "rows") &&
        strcmp(route, "chunks") && strcmp(route, "all"))
        return rtx__backend_node_err(err, a, RTX_EINVAL,
                                     "RTX_PAGED_ROUTE '%s': expected auto, rows, chunks or all",
                                     route);
    if (!rtx__cuda_paged_prefill_supported(p, cu->cc_major * 10 + cu->cc_minor) ||
        (route && strcmp(route, "rows") == 0))
        return 0;
    bool wide = p->g.S * p->g.Hkv >= 2 * (int64_t)cu->sm_count;
    bool all = route && *route && strcmp(route, "auto") ? strcmp(route, "all") == 0 : wide;
    p->tc_rows = all ? 1 : 2;
    return 0;
}

static int run_paged_attention(struct rtx_cuda *cu, const struct rtx_node_args *a,
                               struct rtx_err *err) {
    if (a->n_in != PA_N) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "needs 9 inputs");
    const struct rtx_tensor *const *in = (const struct rtx_tensor *const *)a->in;
    struct rtx_cuda_paged p = {.dt = (int32_t)in[PA_Q]->dtype,
                               .q = rtx_tensor_data(in[PA_Q]),
                               .k = rtx_tensor_data(in[PA_K]),
                               .v = rtx_tensor_data(in[PA_V]),
                               .kc = rtx_tensor_data(in[PA_KC]),
                               .vc = rtx_tensor_data(in[PA_VC]),
                               .slots = rtx_tensor_data(in[PA_SLOTS]),
                               .tables = rtx_tensor_data(in[PA_TABLES]),
                               .qs = rtx_tensor_data(in[PA_QSTART]),
                               .ctx = rtx_tensor_data(in[PA_CTX]),
                               .y = rtx_tensor_data(a->out[0])};
    char why[256];
    int rc = rtx__paged_attention_geometry(a->node, in, a->out[0], &p.g, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    if (p.g.T > INT_MAX || p.g.Hkv > 65535 || p.g.H > 65535)
        return rtx__backend_node_err(err, a, RTX_ELIMIT,
                                     "%lld rows of %lld heads: over the "
                                     "grid's limits",
                                     (long long)p.g.T, (long long)p.g.H);
    struct rtx__cuda_check check;
    if ((rc = arm_metadata_check(cu, a, &p, &check, err))) return rc;
    bool named = false; /* the error names the node already (plan_launch's) */
    rc = RTX_CUDA_CHECK(err, rtx__cuda_paged_write_launch(&p, cu->stream));
    if (rc == 0 && p.g.T * p.g.H * p.g.D > 0) {
        size_t smem;
        void *scratch = NULL;
        rc = plan_launch(cu, a, &p, &smem, err);
        named = rc != 0;
        if (rc == 0 && p.parts > 1) {
            size_t rows = (size_t)(p.g.T * p.g.H * p.parts);
            rc = rtx__cuda_scratch(cu, rows * (size_t)(p.g.D + 2) * sizeof(float), &scratch, err);
            p.part_acc = scratch;
            p.part_ml = scratch ? p.part_acc + rows * (size_t)p.g.D : NULL;
        }
        if (rc == 0) {
            rc = tensor_core_rows(cu, a, &p, err);
            named = rc != 0;
        }
        void *tc_scratch = NULL;
        if (rc == 0 && p.tc_rows)
            p.tc_parts = rtx__cuda_paged_prefill_parts(&p, cu->sm_count);
        if (rc == 0 && p.tc_parts > 1) {
            size_t rows = (size_t)(p.g.T * p.g.H * p.tc_parts);
            rc = rtx__cuda_scratch(cu, rows * (size_t)(p.g.D + 2) * sizeof(float), &tc_scratch,
                                   err);
            p.tc_acc = tc_scratch;
            p.tc_ml = tc_scratch ? p.tc_acc + rows * (size_t)p.g.D : NULL;
        }
        if (rc == 0 && p.tc_rows)
            rc = RTX_CUDA_CHECK(err, rtx__cuda_paged_prefill_launch(&p, cu->stream));
        rtx__cuda_scratch_release(cu, tc_scratch);
        if (rc == 0)
            rc = RTX_CUDA_CHECK(err, rtx__cuda_paged_attention_launch(&p, smem, cu->stream));
        rtx__cuda_scratch_release(cu, scratch);
    }
    if (rc) {
        rtx__cuda_scratch_release(cu, check.flag);
        rtx_free(check.label);
        rtx_free(check.paged);
        return named ? rc : rtx__cuda_node_fail(a, rc, err);
    }
    rc = rtx__cuda_check_defer(cu, &check, err);
    return rc ? rtx__cuda_node_fail(a, rc, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * Dispatch
 * ---------------------------------------------------------------------------------------- */

int rtx__cuda_generation(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    if (a->n_out < 1 || !a->out[0])
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing output tensor");
    for (int i = 0; i < a->n_in; i++)
        if (!a->in[i]) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing input");
    switch (a->node->op) {
    case RTX_OP_ROPE: return run_rope(cu, a, err);
    case RTX_OP_PAGED_ATTENTION: return run_paged_attention(cu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a generation op");
}

/* The dtype input i must have, given input 0's (-1: any float, -2: i32 or i64). */
static int wanted_dtype(enum rtx_op op, int i, enum rtx_dtype dt0) {
    if (op == RTX_OP_ROPE) return i == 0 ? -1 : i == 1 ? -2 : RTX_F32;
    return i == 0 ? -1 : i < PA_SLOTS ? (int)dt0 : RTX_I32;
}

bool rtx__cuda_generation_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    if (n->op != RTX_OP_ROPE && n->op != RTX_OP_PAGED_ATTENTION) return false;
    if (g == NULL || n->n_inputs < 1) return true;
    enum rtx_dtype dt0 = RTX_F32;
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0 || v >= g->n_values) continue;
        const struct rtx_value *val = &g->values[v];
        if (val->producer >= 0 && val->ndim < 0) { /* inferred at planning: not known yet */
            if (i == 0) return true;
            continue;
        }
        if (i == 0) dt0 = val->dtype;
        int want = wanted_dtype(n->op, i, dt0);
        bool ok = want == -1   ? is_float(val->dtype)
                  : want == -2 ? val->dtype == RTX_I32 || val->dtype == RTX_I64
                               : (int)val->dtype == want;
        if (!ok) return false;
    }
    return true;
}
