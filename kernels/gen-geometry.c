/*
 * gen-geometry.c - the shapes of rope and paged_attention nodes as every backend reads them,
 * and paged_attention's metadata check on the host with the one wording of its faults
 * (kernels/gen-geometry.h).
 */
#include <math.h>
#include <stdio.h>

#include "kernels/gen-geometry.h"

static bool is_float(enum rtx_dtype dt) {
    return dt == RTX_F32 || dt == RTX_F16 || dt == RTX_BF16;
}

/* t has rank nd and, where want[d] >= 0, dimension d == want[d]. */
static bool shape_is(const struct rtx_tensor *t, int nd, const int64_t *want) {
    if (t->ndim != nd) return false;
    for (int d = 0; d < nd; d++)
        if (want[d] >= 0 && t->dims[d] != want[d]) return false;
    return true;
}

/* x (rope's x, paged_attention's q) is a float [T, H, D] and y has its dtype and shape:
 * dims[0..2] get T, H, D; otherwise RTX_EINVAL with `what` in why. */
static int read_thd(const struct rtx_tensor *x, const struct rtx_tensor *y, int64_t *dims,
                    const char *what, char *why, size_t why_len) {
    if (!is_float(x->dtype) || x->ndim != 3 || y->dtype != x->dtype || !shape_is(y, 3, x->dims)) {
        snprintf(why, why_len, "%s", what);
        return RTX_EINVAL;
    }
    for (int d = 0; d < 3; d++)
        dims[d] = x->dims[d];
    return 0;
}

int rtx__rope_geometry(const struct rtx_node *node, const struct rtx_tensor *x,
                       const struct rtx_tensor *pos, const struct rtx_tensor *inv_freq,
                       const struct rtx_tensor *y, struct rtx__rope_geom *g, char *why,
                       size_t why_len) {
    int64_t thd[3];
    *g = (struct rtx__rope_geom){0};
    if (read_thd(x, y, thd, "x must be a float [T, H, D] and the output like it", why, why_len))
        return RTX_EINVAL;
    g->T = thd[0];
    g->H = thd[1];
    g->D = thd[2];
    if ((pos->dtype != RTX_I32 && pos->dtype != RTX_I64) || !shape_is(pos, 1, &g->T)) {
        snprintf(why, why_len, "positions must be i32 or i64 [%lld]", (long long)g->T);
        return RTX_EINVAL;
    }
    g->pos64 = pos->dtype == RTX_I64;
    if (inv_freq->dtype != RTX_F32 || inv_freq->ndim != 1 || 2 * inv_freq->dims[0] > g->D) {
        snprintf(why, why_len, "inv_freq must be f32 [R / 2] with R <= %lld", (long long)g->D);
        return RTX_EINVAL;
    }
    g->half = inv_freq->dims[0];
    int64_t il = rtx_node_attr_int(node, "interleaved", 0);
    if (il != 0 && il != 1) {
        snprintf(why, why_len, "attribute 'interleaved' must be 0 or 1, not %lld", (long long)il);
        return RTX_EINVAL;
    }
    g->interleaved = (int32_t)il;
    return 0;
}

enum { PA_Q, PA_K, PA_V, PA_KC, PA_VC, PA_SLOTS, PA_TABLES, PA_QSTART, PA_CTX, PA_N };

int rtx__paged_attention_geometry(const struct rtx_node *node, const struct rtx_tensor *const *in,
                                  const struct rtx_tensor *y, struct rtx__paged_geom *g, char *why,
                                  size_t why_len) {
    static const char *const names[PA_N] = {
        "q",           "k",           "v", "k_cache", "v_cache", "slot_mapping", "block_tables",
        "query_start", "context_lens"};
    *g = (struct rtx__paged_geom){0};
    for (int i = 0; i < PA_N; i++) {
        if (in[i] == NULL) {
            snprintf(why, why_len, "input %s is missing", names[i]);
            return RTX_EINVAL;
        }
    }
    const struct rtx_tensor *q = in[PA_Q], *k = in[PA_K];
    enum rtx_dtype dt = q->dtype;
    static const char shapes[] = "q must be a float [T, H, D], k [T, Hkv, D], the output like q";
    int64_t thd[3];
    if (read_thd(q, y, thd, shapes, why, why_len) || k->ndim != 3) {
        snprintf(why, why_len, "%s", shapes);
        return RTX_EINVAL;
    }
    g->T = thd[0];
    g->H = thd[1];
    g->D = thd[2];
    g->Hkv = k->dims[1];
    if (g->Hkv < 1 || g->H % g->Hkv != 0) {
        snprintf(why, why_len, "q has %lld heads, not a multiple of the %lld KV heads",
                 (long long)g->H, (long long)g->Hkv);
        return RTX_EINVAL;
    }
    g->G = g->H / g->Hkv;
    const int64_t kv_dims[3] = {g->T, g->Hkv, g->D};
    const int64_t cache_dims[4] = {-1, -1, g->Hkv, g->D};
    bool ok = shape_is(k, 3, kv_dims) && shape_is(in[PA_V], 3, kv_dims) &&
              shape_is(in[PA_KC], 4, cache_dims) && in[PA_KC]->dims[1] >= 1 &&
              shape_is(in[PA_VC], 4, in[PA_KC]->dims);
    for (int i = PA_K; i <= PA_VC; i++)
        ok = ok && in[i]->dtype == dt;
    if (!ok) {
        snprintf(why, why_len,
                 "k, v [%lld, %lld, %lld] and the caches [NB, BS >= 1, %lld, %lld] "
                 "must match q (%s)",
                 (long long)g->T, (long long)g->Hkv, (long long)g->D, (long long)g->Hkv,
                 (long long)g->D, rtx_dtype_name(dt));
        return RTX_EINVAL;
    }
    g->NB = in[PA_KC]->dims[0];
    g->BS = in[PA_KC]->dims[1];
    const struct rtx_tensor *tables = in[PA_TABLES];
    g->S = in[PA_CTX]->dims[0];
    g->B = tables->ndim == 2 ? tables->dims[1] : -1;
    const int64_t s1 = g->S + 1, tb_dims[2] = {g->S, -1};
    for (int i = PA_SLOTS; i < PA_N; i++)
        ok = ok && in[i]->dtype == RTX_I32;
    if (!ok || !shape_is(in[PA_SLOTS], 1, &g->T) || !shape_is(tables, 2, tb_dims) ||
        !shape_is(in[PA_QSTART], 1, &s1) || in[PA_CTX]->ndim != 1) {
        snprintf(why, why_len,
                 "slot_mapping i32 [%lld], block_tables i32 [S, B], query_start "
                 "i32 [S + 1], context_lens i32 [S] do not fit",
                 (long long)g->T);
        return RTX_EINVAL;
    }
    if (g->T > RTX__PAGED_MAX_INDEX || s1 > RTX__PAGED_MAX_INDEX ||
        (g->B > 0 && g->S > RTX__PAGED_MAX_INDEX / g->B)) {
        snprintf(why, why_len, "%lld rows, %lld sequences of %lld blocks: over %lld",
                 (long long)g->T, (long long)g->S, (long long)g->B,
                 (long long)RTX__PAGED_MAX_INDEX);
        return RTX_ELIMIT;
    }
    g->scale =
        (float)rtx_node_attr_float(node, "scale", g->D > 0 ? 1.0 / sqrt((double)g->D) : 1.0);
    return 0;
}

uint64_t rtx__paged_check(const struct rtx__paged_geom *g, const int32_t *slots,
                          const int32_t *tables, const int32_t *qs, const int32_t *ctx) {
    for (int64_t s = 0; s <= g->S; s++)
        if (rtx__paged_query_start_bad(qs, s, g->T))
            return rtx__paged_fault_key(RTX__PAGED_QUERY_START, s, qs[s]);
    for (int64_t s = 0; s < g->S; s++)
        if (rtx__paged_context_bad(qs, ctx, s, g->B, g->BS))
            return rtx__paged_fault_key(RTX__PAGED_CONTEXT, s, ctx[s]);
    for (int64_t s = 0; s < g->S; s++)
        for (int64_t b = 0; b < g->B && rtx__paged_block_used(ctx, s, b, g->BS); b++)
            if (rtx__paged_block_bad(tables[s * g->B + b], g->NB))
                return rtx__paged_fault_key(RTX__PAGED_BLOCK, s * g->B + b, tables[s * g->B + b]);
    for (int64_t t = 0; t < g->T; t++)
        if (rtx__paged_slot_bad(slots[t], g->NB, g->BS))
            return rtx__paged_fault_key(RTX__PAGED_SLOT, t, slots[t]);
    return RTX__PAGED_NO_FAULT;
}

void rtx__paged_fault_why(const struct rtx__paged_geom *g, uint64_t key, char *why,
                          size_t why_len) {
    int kind = (int)(key >> 59);
    long long index = (long long)((key >> 32) & (uint64_t)RTX__PAGED_MAX_INDEX);
    int32_t value = (int32_t)(uint32_t)key;
    switch (kind) {
    case RTX__PAGED_QUERY_START:
        snprintf(why, why_len,
                 "query_start[%lld] = %d: query_start must rise from 0 or more to at most "
                 "%lld (q's rows), never falling",
                 index, value, (long long)g->T);
        break;
    case RTX__PAGED_CONTEXT:
        if (value > g->B * g->BS)
            snprintf(why, why_len,
                     "sequence %lld: context_lens[%lld] = %d exceeds the %lld keys its block "
                     "table covers (%lld blocks of %lld)",
                     index, index, value, (long long)(g->B * g->BS), (long long)g->B,
                     (long long)g->BS);
        else
            snprintf(why, why_len,
                     "sequence %lld: context_lens[%lld] = %d is less than its new tokens "
                     "(query_start[%lld] - query_start[%lld])",
                     index, index, value, index + 1, index);
        break;
    case RTX__PAGED_BLOCK: {
        long long s = g->B > 0 ? index / g->B : 0, b = g->B > 0 ? index % g->B : 0;
        snprintf(why, why_len,
                 "sequence %lld: block_tables[%lld][%lld] = %d is not a block of the cache "
                 "(it has %lld)",
                 s, s, b, value, (long long)g->NB);
        break;
    }
    case RTX__PAGED_SLOT:
        snprintf(why, why_len,
                 "row %lld: slot_mapping[%lld] = %d is not a slot of the cache (it has %lld: "
                 "%lld blocks of %lld)",
                 index, index, value, (long long)(g->NB * g->BS), (long long)g->NB,
                 (long long)g->BS);
        break;
    default: snprintf(why, why_len, "no fault"); break;
    }
}
