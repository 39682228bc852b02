/*
 * arch-graph.c - the step graph of a decoder (arch-impl.h DESIGN has its inputs and output):
 * one iteration of GPT-2, Llama or Qwen2 over a ragged batch of tokens, reading and writing the
 * paged KV cache.
 *
 * DESIGN
 * The graph follows transformers' modeling code op for op on [T, hidden] rows (every sequence's
 * tokens of the step stacked; only paged_attention knows where one sequence ends). Projections
 * are matmuls against the weights in the checkpoint's layout (Llama's [out, in] with trans_b,
 * GPT-2's Conv1D [in, out] without), heads are reshapes to [T, heads, head_dim], rotary
 * embedding is the rope op on q and k with the inverse frequencies as the graph's one
 * initializer, and paged_attention writes the step's keys and values into the layer's pool
 * before it attends. The last token of each sequence is gathered before the final norm and the
 * lm_head (both act on rows, so the result is the same and the vocabulary-sized product is
 * made for S rows, not T). Logits are cast to f32 when the graph computes in bf16 or f16.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "generation/arch-impl.h"

#define NAME 48

/* A graph under construction: after the first error every call is a no-op. */
struct gb {
    struct rtx_graph *g;
    struct rtx_err *err;
    int rc;
    int tmp; /* intermediate values made so far */
};

/* Adds op(in...) with output `name`; returns the node or -1. */
static int node_named(struct gb *b, const char *op, const char *name, int n_in,
                      const char *const *in) {
    if (b->rc) return -1;
    const char *outs[1] = {name};
    int nd = rtx_graph_add_node(b->g, op, "", in, n_in, outs, 1, b->err);
    if (nd < 0) b->rc = nd;
    return nd;
}

/* Adds op(in...) with a new output name, written to out (which may be one of the inputs);
 * returns the node or -1. */
static int node(struct gb *b, const char *op, char out[NAME], int n_in, const char *const *in) {
    char name[NAME];
    snprintf(name, NAME, "%s.%d", op, b->tmp++);
    int nd = node_named(b, op, name, n_in, in);
    memcpy(out, name, NAME);
    return nd;
}

static void attr_int(struct gb *b, int nd, const char *name, int64_t v) {
    if (!b->rc && nd >= 0) b->rc = rtx_graph_set_attr_int(b->g, nd, name, v, b->err);
}

static void attr_float(struct gb *b, int nd, const char *name, double v) {
    if (!b->rc && nd >= 0) b->rc = rtx_graph_set_attr_float(b->g, nd, name, v, b->err);
}

static void attr_str(struct gb *b, int nd, const char *name, const char *v) {
    if (!b->rc && nd >= 0) b->rc = rtx_graph_set_attr_string(b->g, nd, name, v, b->err);
}

static void unary(struct gb *b, const char *op, const char *x, char out[NAME]) {
    node(b, op, out, 1, (const char *[]){x});
}

static void binary(struct gb *b, const char *op, const char *x, const char *y, char out[NAME]) {
    node(b, op, out, 2, (const char *[]){x, y});
}

static void reshape(struct gb *b, const char *x, int64_t d0, int64_t d1, int64_t d2,
                    char out[NAME]) {
    int nd = node(b, "reshape", out, 1, (const char *[]){x});
    int64_t shape[3] = {d0, d1, d2};
    if (!b->rc && nd >= 0)
        b->rc = rtx_graph_set_attr_ints(b->g, nd, "shape", shape, d2 ? 3 : 2, b->err);
}

/* x @ w (or w^T) + bias; bias NULL or a name that may not exist (no bias then). */
static void linear(struct gb *b, const char *x, const char *w, const char *bias, bool trans_b,
                   char out[NAME]) {
    int nd = node(b, "matmul", out, 2, (const char *[]){x, w});
    if (trans_b) attr_int(b, nd, "trans_b", 1);
    if (bias && rtx_graph_find_value(b->g, bias) >= 0) {
        char mm[NAME];
        snprintf(mm, NAME, "%s", out);
        binary(b, "add", mm, bias, out);
    }
}

static void norm(struct gb *b, const struct rtx_gen_arch *a, const char *x, const char *w,
                 char out[NAME]) {
    char bias[NAME + 8];
    snprintf(bias, sizeof bias, "%s_bias", w);
    int nd = a->kind == RTX_GEN_ARCH_GPT2
                 ? node(b, "layer_norm", out, 3, (const char *[]){x, w, bias})
                 : node(b, "rms_norm", out, 2, (const char *[]){x, w});
    attr_int(b, nd, "axis", -1);
    attr_float(b, nd, "epsilon", a->norm_eps);
}

/* The name of layer l's weight. */
static const char *lw(char buf[NAME], int l, const char *what) {
    snprintf(buf, NAME, "layers.%d.%s", l, what);
    return buf;
}

static void attention(struct gb *b, const struct rtx_gen_arch *a, int l, const char *x,
                      char out[NAME]) {
    char w[NAME], bias[NAME], q[NAME], k[NAME], v[NAME], t[NAME], kc[NAME], vc[NAME];
    bool tb = a->kind != RTX_GEN_ARCH_GPT2;
    const char *const proj[3][2] = {{"wq", "bq"}, {"wk", "bk"}, {"wv", "bv"}};
    char *dst[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        int heads = i == 0 ? a->n_heads : a->n_kv_heads;
        linear(b, x, lw(w, l, proj[i][0]), lw(bias, l, proj[i][1]), tb, t);
        reshape(b, t, -1, heads, a->head_dim, dst[i]);
        if (a->kind == RTX_GEN_ARCH_GPT2 || i == 2) continue;
        snprintf(t, NAME, "%s", dst[i]);
        int nd = node(b, "rope", dst[i], 3, (const char *[]){t, "positions", "inv_freq"});
        attr_int(b, nd, "interleaved", 0);
    }
    snprintf(kc, NAME, "k_cache.%d", l);
    snprintf(vc, NAME, "v_cache.%d", l);
    int nd = node(b, "paged_attention", t, 9,
                  (const char *[]){q, k, v, kc, vc, "slot_mapping", "block_tables", "query_start",
                                   "context_lens"});
    attr_float(b, nd, "scale", 1.0 / sqrt((double)a->head_dim));
    reshape(b, t, -1, (int64_t)a->n_heads * a->head_dim, 0, q);
    linear(b, q, lw(w, l, "wo"), lw(bias, l, "bo"), tb, out);
}

static void mlp(struct gb *b, const struct rtx_gen_arch *a, int l, const char *x, char out[NAME]) {
    char w[NAME], bias[NAME], up[NAME], act[NAME], gate[NAME];
    bool tb = a->kind != RTX_GEN_ARCH_GPT2;
    linear(b, x, lw(w, l, "w_up"), lw(bias, l, "b_up"), tb, up);
    if (a->kind == RTX_GEN_ARCH_GPT2) {
        if (!strcmp(a->hidden_act, "relu")) {
            unary(b, "relu", up, act);
        } else {
            int nd = node(b, "gelu", act, 1, (const char *[]){up});
            if (strcmp(a->hidden_act, "gelu")) attr_str(b, nd, "approximate", "tanh");
        }
    } else {
        char s[NAME];
        linear(b, x, lw(w, l, "w_gate"), lw(bias, l, "b_gate"), tb, gate);
        unary(b, "silu", gate, s);
        binary(b, "mul", s, up, act);
    }
    linear(b, act, lw(w, l, "w_down"), lw(bias, l, "b_down"), tb, out);
}

static int add_inputs(struct gb *b, const struct rtx_gen_arch *a, const struct rtx_gen_weights *w,
                      enum rtx_dtype dtype, int n_blocks, int block_size) {
    static const char *const step[] = {"ids",          "positions",   "slot_mapping",
                                       "block_tables", "query_start", "context_lens",
                                       "last_index"};
    for (int i = 0; i < 7; i++) {
        int64_t dims[2] = {-1, -1};
        int rc = rtx_graph_add_input(b->g, step[i], RTX_I32, i == 3 ? 2 : 1, dims, b->err);
        if (rc < 0) return rc;
    }
    int64_t pool[4] = {n_blocks, block_size, a->n_kv_heads, a->head_dim};
    for (int l = 0; l < a->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            char name[NAME];
            snprintf(name, NAME, "%s_cache.%d", kv ? "v" : "k", l);
            int rc = rtx_graph_add_input(b->g, name, dtype, 4, pool, b->err);
            if (rc < 0) return rc;
        }
    for (int i = 0; i < w->n; i++) {
        if (w->t[i]->dtype != dtype)
            return rtx_err_set(b->err, RTX_EINVAL, "step graph: weight '%s' is %s, expected %s",
                               w->names[i], rtx_dtype_name(w->t[i]->dtype), rtx_dtype_name(dtype));
        int rc =
            rtx_graph_add_input(b->g, w->names[i], dtype, w->t[i]->ndim, w->t[i]->dims, b->err);
        if (rc < 0) return rc;
    }
    if (a->kind == RTX_GEN_ARCH_GPT2) return 0;
    struct rtx_tensor *inv;
    int rc = rtx_tensor_new(RTX_F32, 1, (const int64_t[]){a->head_dim / 2}, &inv, b->err);
    if (rc) return rc;
    rtx__gen_arch_inv_freq(a, rtx_tensor_data(inv));
    rc = rtx_graph_add_initializer(b->g, "inv_freq", inv, b->err);
    rtx_tensor_unref(inv);
    return rc < 0 ? rc : 0;
}

int rtx__gen_graph_build(const struct rtx_gen_arch *a, const struct rtx_gen_weights *w,
                         enum rtx_dtype dtype, int n_blocks, int block_size,
                         struct rtx_graph **out, struct rtx_err *err) {
    *out = NULL;
    if (!rtx_dtype_is_float(dtype) || n_blocks < 1 || block_size < 1)
        return rtx_err_set(err, RTX_EINVAL,
                           "step graph: dtype %s, %d blocks of %d tokens: expected a float dtype "
                           "and at least one block of one token",
                           rtx_dtype_name(dtype), n_blocks, block_size);
    struct gb b = {.err = err};
    int rc = rtx_graph_new("decoder_step", &b.g, err);
    if (rc) return rc;
    if ((rc = add_inputs(&b, a, w, dtype, n_blocks, block_size))) goto fail;

    char x[NAME], h[NAME], y[NAME], t[NAME];
    if (a->kind == RTX_GEN_ARCH_GPT2) {
        node(&b, "gather", t, 2, (const char *[]){"embed", "ids"});
        node(&b, "gather", y, 2, (const char *[]){"pos_embed", "positions"});
        binary(&b, "add", t, y, x);
    } else {
        node(&b, "gather", x, 2, (const char *[]){"embed", "ids"});
    }
    for (int l = 0; l < a->n_layers; l++) {
        char wn[NAME];
        norm(&b, a, x, lw(wn, l, "attn_norm"), h);
        attention(&b, a, l, h, y);
        binary(&b, "add", x, y, t);
        norm(&b, a, t, lw(wn, l, "mlp_norm"), h);
        mlp(&b, a, l, h, y);
        binary(&b, "add", t, y, x);
    }
    node(&b, "gather", t, 2, (const char *[]){x, "last_index"});
    norm(&b, a, t, "norm", h);
    const char *lm = a->tie_embeddings ? "embed" : "lm_head";
    bool f32 = dtype == RTX_F32;
    attr_int(&b,
             node_named(&b, "matmul", f32 ? "logits" : "logits_raw", 2, (const char *[]){h, lm}),
             "trans_b", 1);
    if (!f32)
        attr_str(&b, node_named(&b, "cast", "logits", 1, (const char *[]){"logits_raw"}), "to",
                 "f32");
    attr_int(&b, node_named(&b, "argmax", "greedy", 1, (const char *[]){"logits"}), "axis", -1);
    if ((rc = b.rc) || (rc = rtx_graph_add_output(b.g, "logits", err)) ||
        (rc = rtx_graph_add_output(b.g, "greedy", err)) ||
        (rc = rtx_graph_validate(b.g, NULL, err)))
        goto fail;
    *out = b.g;
    return 0;
fail:
    rtx_graph_free(b.g);
    return rc;
}
