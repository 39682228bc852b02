/*
 * ops-generation.c - dtype and shape inference of the text-generation ops of docs/ops.md:
 * rope (rotary position embedding) and paged_attention (attention over a paged KV cache). The
 * op table in runtime/ops.c points at these.
 *
 * DESIGN
 * Both ops fix the rank of every input, so each input is checked against one row of a small
 * table (its name, rank and allowed dtypes) before the dimensions are compared with each
 * other; messages name the input as docs/ops.md does. What only the data can tell (positions,
 * slots, block ids, context lengths) is the kernels' check at run time.
 */
#include <math.h>

#include "runtime/runtime-impl.h"

typedef struct rtx__shape shape_t;

#define DT(x) (1u << RTX_##x)
#define DT_FLOAT (DT(F32) | DT(F16) | DT(BF16))

/* One input's rank and allowed dtypes. */
struct input_rule {
    const char *name;
    int ndim;
    unsigned dtypes; /* bit per enum rtx_dtype */
};

static int check_input(const shape_t *s, const struct input_rule *r, struct rtx_err *err) {
    if (!(r->dtypes & (1u << s->dtype))) {
        char allowed[64] = ""; /* "f32, f16 or bf16" */
        size_t len = 0;
        int left = __builtin_popcount(r->dtypes);
        for (int d = 0; d < RTX_DTYPE_COUNT; d++) {
            if (!(r->dtypes & (1u << d))) continue;
            left--;
            int w = snprintf(allowed + len, sizeof allowed - len, "%s%s",
                             rtx_dtype_name((enum rtx_dtype)d),
                             left > 1    ? ", "
                             : left == 1 ? " or "
                                         : "");
            if (w > 0 && (size_t)w < sizeof allowed - len) len += (size_t)w;
        }
        return rtx_err_set(err, RTX_EGRAPH, "%s must be %s, not %s", r->name, allowed,
                           rtx_dtype_name(s->dtype));
    }
    if (s->ndim != r->ndim)
        return rtx_err_set(err, RTX_EGRAPH, "%s must have rank %d, not %d", r->name, r->ndim,
                           s->ndim);
    return 0;
}

static int check_inputs(const shape_t *const *in, int n_in, const struct input_rule *rules,
                        struct rtx_err *err) {
    for (int i = 0; i < n_in; i++) {
        int rc = check_input(in[i], &rules[i], err);
        if (rc) return rc;
    }
    return 0;
}

/* in[i] has in[0]'s dtype (the inputs that share the data dtype). */
static int check_same_dtype(const shape_t *const *in, int i, const struct input_rule *rules,
                            struct rtx_err *err) {
    if (in[i]->dtype != in[0]->dtype)
        return rtx_err_set(err, RTX_EGRAPH, "%s is %s, %s is %s: they must be equal",
                           rules[i].name, rtx_dtype_name(in[i]->dtype), rules[0].name,
                           rtx_dtype_name(in[0]->dtype));
    return 0;
}

/* Dimension di of in[i] equals want (described as what). */
static int check_dim(const shape_t *const *in, int i, int di, int64_t want, const char *what,
                     const struct input_rule *rules, struct rtx_err *err) {
    if (in[i]->dims[di] != want)
        return rtx_err_set(err, RTX_EGRAPH, "%s dimension %d is %lld, must be %s (%lld)",
                           rules[i].name, di, (long long)in[i]->dims[di], what, (long long)want);
    return 0;
}

int rtx__infer_rope(const struct rtx_node *n, const shape_t *const *in, int n_in, shape_t *out,
                    struct rtx_err *err) {
    static const struct input_rule rules[3] = {
        {"x", 3, DT_FLOAT}, {"positions", 1, DT(I32) | DT(I64)}, {"inv_freq", 1, DT(F32)}};
    int rc = check_inputs(in, n_in, rules, err);
    if (rc) return rc;
    int64_t interleaved = rtx_node_attr_int(n, "interleaved", 0);
    if (interleaved != 0 && interleaved != 1)
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'interleaved' must be 0 or 1, not %lld",
                           (long long)interleaved);
    if ((rc = check_dim(in, 1, 0, in[0]->dims[0], "x's tokens", rules, err))) return rc;
    int64_t d = in[0]->dims[2], half = in[2]->dims[0];
    if (2 * half > d)
        return rtx_err_set(err, RTX_EGRAPH,
                           "inv_freq has %lld frequencies: %lld rotated dims exceed the head "
                           "size %lld",
                           (long long)half, (long long)(2 * half), (long long)d);
    out[0] = *in[0];
    return 0;
}

enum { PA_Q, PA_K, PA_V, PA_KC, PA_VC, PA_SLOTS, PA_TABLES, PA_QSTART, PA_CTX, PA_N };

int rtx__infer_paged_attention(const struct rtx_node *n, const shape_t *const *in, int n_in,
                               shape_t *out, struct rtx_err *err) {
    static const struct input_rule rules[PA_N] = {
        [PA_Q] = {"q", 3, DT_FLOAT},
        [PA_K] = {"k", 3, DT_FLOAT},
        [PA_V] = {"v", 3, DT_FLOAT},
        [PA_KC] = {"k_cache", 4, DT_FLOAT},
        [PA_VC] = {"v_cache", 4, DT_FLOAT},
        [PA_SLOTS] = {"slot_mapping", 1, DT(I32)},
        [PA_TABLES] = {"block_tables", 2, DT(I32)},
        [PA_QSTART] = {"query_start", 1, DT(I32)},
        [PA_CTX] = {"context_lens", 1, DT(I32)},
    };
    int rc = check_inputs(in, n_in, rules, err);
    for (int i = PA_K; i <= PA_VC && !rc; i++)
        rc = check_same_dtype(in, i, rules, err);
    if (rc) return rc;
    const shape_t *q = in[PA_Q], *k = in[PA_K];
    int64_t T = q->dims[0], H = q->dims[1], D = q->dims[2], Hkv = k->dims[1];
    int64_t S = in[PA_CTX]->dims[0];
    if (Hkv < 1 || H % Hkv != 0)
        return rtx_err_set(err, RTX_EGRAPH,
                           "q has %lld heads, not a multiple of the %lld KV heads of k",
                           (long long)H, (long long)Hkv);
    if ((rc = check_dim(in, PA_K, 0, T, "q's tokens", rules, err)) ||
        (rc = check_dim(in, PA_K, 2, D, "q's head size", rules, err)))
        return rc;
    for (int d = 0; d < 3 && !rc; d++)
        rc = check_dim(in, PA_V, d, k->dims[d], "as in k", rules, err);
    if (rc) return rc;
    for (int c = PA_KC; c <= PA_VC && !rc; c++) {
        if ((rc = check_dim(in, c, 2, Hkv, "k's KV heads", rules, err)) ||
            (rc = check_dim(in, c, 3, D, "q's head size", rules, err)))
            return rc;
        if (in[c]->dims[1] < 1)
            return rtx_err_set(err, RTX_EGRAPH, "%s has blocks of %lld tokens; at least 1",
                               rules[c].name, (long long)in[c]->dims[1]);
    }
    for (int d = 0; d < 2 && !rc; d++)
        rc = check_dim(in, PA_VC, d, in[PA_KC]->dims[d], "as in k_cache", rules, err);
    if (rc || (rc = check_dim(in, PA_SLOTS, 0, T, "q's tokens", rules, err)) ||
        (rc = check_dim(in, PA_TABLES, 0, S, "context_lens' sequences", rules, err)) ||
        (rc = check_dim(in, PA_QSTART, 0, S + 1, "context_lens' sequences + 1", rules, err)))
        return rc;
    const struct rtx_attr *sc = rtx_node_attr(n, "scale");
    if (sc && !isfinite(sc->f))
        return rtx_err_set(err, RTX_EGRAPH, "attribute 'scale' must be finite");
    out[0] = *q;
    return 0;
}
