/*
 * block-graph.c - the bf16 transformer block graph shared by the GPU benchmark and tests
 * (block-graph.h).
 */
#include <math.h>
#include <stdio.h>

#include "tests/gpu/block-graph.h"

struct gb {
    struct rtx_graph *g;
    uint64_t rng;
    int rc;
    struct rtx_err *err;
};

static float uniform(struct gb *b) { /* [-1, 1), xorshift */
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return (float)((double)(b->rng >> 11) * 0x1.0p-52 - 1.0);
}

static int gb_node(struct gb *b, const char *op, const char *name, const char *const *ins,
                   int n, const char *out) {
    if (b->rc) return -1;
    int rc = rtx_graph_add_node(b->g, op, name, ins, n, &out, 1, b->err);
    if (rc < 0) b->rc = rc;
    return rc;
}

/* An initializer of uniform bf16 values center + scale * [-1, 1). */
static void gb_weight(struct gb *b, const char *name, int ndim, const int64_t *dims,
                      float center, float scale) {
    if (b->rc) return;
    struct rtx_tensor *t = NULL;
    b->rc = rtx_tensor_new(RTX_BF16, ndim, dims, &t, b->err);
    if (b->rc) return;
    uint16_t *p = rtx_tensor_data(t);
    for (int64_t i = 0, n = rtx_tensor_numel(t); i < n; i++)
        p[i] = rtx_f32_to_bf16(center + scale * uniform(b));
    int rc = rtx_graph_add_initializer(b->g, name, t, b->err);
    if (rc < 0) b->rc = rc;
    rtx_tensor_unref(t);
}

static void gb_ints(struct gb *b, int node, const char *name, const int64_t *v, int n) {
    if (b->rc == 0) b->rc = rtx_graph_set_attr_ints(b->g, node, name, v, n, b->err);
}

#define IN(...)                                                                                   \
    (const char *const[]){__VA_ARGS__},                                                           \
        (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))

/* <name>_heads = transpose(reshape(src @ w<name> + b<name>, [0, 0, heads, width / heads]),
 * [0, 2, 1, 3]). */
static void projection(struct gb *b, const char *src, const char *name, int64_t width,
                       int64_t heads) {
    char w[16], bias[16], mm[16], sum[16], split[16], hd[16];
    snprintf(w, sizeof w, "w%s", name);
    snprintf(bias, sizeof bias, "b%s", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(sum, sizeof sum, "%s", name);
    snprintf(split, sizeof split, "%s_split", name);
    snprintf(hd, sizeof hd, "%s_heads", name);
    float s = 1.0f / sqrtf((float)width);
    gb_weight(b, w, 2, (const int64_t[]){width, width}, 0, s);
    gb_weight(b, bias, 1, &width, 0, s);
    gb_node(b, "matmul", mm, IN(src, w), mm);
    gb_node(b, "add", sum, IN(mm, bias), sum);
    int n = gb_node(b, "reshape", split, IN(sum), split);
    gb_ints(b, n, "shape", (const int64_t[]){0, 0, heads, width / heads}, 4);
    n = gb_node(b, "transpose", hd, IN(split), hd);
    gb_ints(b, n, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
}

int block_graph_new(int64_t batch, int64_t seq, int64_t width, int64_t heads, uint64_t seed,
                    struct rtx_graph **out, struct rtx_err *err) {
    struct gb b = {.rng = seed ? seed : 0x9e3779b97f4a7c15ull, .err = err};
    int64_t ff = 4 * width;
    float s = 1.0f / sqrtf((float)width), sf = 1.0f / sqrtf((float)ff);
    *out = NULL;
    if (heads < 1 || width % heads)
        return rtx_err_set(err, RTX_EINVAL, "width %lld is not a multiple of %lld heads",
                           (long long)width, (long long)heads);
    b.rc = rtx_graph_new("block", &b.g, err);
    if (b.rc == 0) {
        int rc = rtx_graph_add_input(b.g, "x", RTX_BF16, 3, (const int64_t[]){batch, seq, width},
                                     err);
        if (rc < 0) b.rc = rc;
    }
    gb_weight(&b, "ln1_scale", 1, &width, 1, 0.1f);
    gb_weight(&b, "ln1_bias", 1, &width, 0, 0.1f);
    gb_node(&b, "layer_norm", "ln1", IN("x", "ln1_scale", "ln1_bias"), "h");
    projection(&b, "h", "q", width, heads);
    projection(&b, "h", "k", width, heads);
    projection(&b, "h", "v", width, heads);
    int n = gb_node(&b, "attention", "attention", IN("q_heads", "k_heads", "v_heads"), "att");
    if (b.rc == 0) b.rc = rtx_graph_set_attr_int(b.g, n, "causal", 1, err);
    n = gb_node(&b, "transpose", "att_t", IN("att"), "att_t");
    gb_ints(&b, n, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
    n = gb_node(&b, "reshape", "att_merge", IN("att_t"), "att_m");
    gb_ints(&b, n, "shape", (const int64_t[]){0, 0, width}, 3);
    gb_weight(&b, "wo", 2, (const int64_t[]){width, width}, 0, s);
    gb_weight(&b, "bo", 1, &width, 0, s);
    gb_node(&b, "matmul", "o_mm", IN("att_m", "wo"), "o_mm");
    gb_node(&b, "add", "o", IN("o_mm", "bo"), "o");
    gb_node(&b, "add", "res1", IN("x", "o"), "res1");
    gb_weight(&b, "ln2_scale", 1, &width, 1, 0.1f);
    gb_weight(&b, "ln2_bias", 1, &width, 0, 0.1f);
    gb_node(&b, "layer_norm", "ln2", IN("res1", "ln2_scale", "ln2_bias"), "h2");
    gb_weight(&b, "w_up", 2, (const int64_t[]){width, ff}, 0, s);
    gb_weight(&b, "b_up", 1, &ff, 0, s);
    gb_weight(&b, "w_down", 2, (const int64_t[]){ff, width}, 0, sf);
    gb_weight(&b, "b_down", 1, &width, 0, sf);
    gb_node(&b, "matmul", "up_mm", IN("h2", "w_up"), "up_mm");
    gb_node(&b, "add", "up", IN("up_mm", "b_up"), "up");
    n = gb_node(&b, "gelu", "gelu", IN("up"), "act");
    if (b.rc == 0) b.rc = rtx_graph_set_attr_string(b.g, n, "approximate", "tanh", err);
    gb_node(&b, "matmul", "down_mm", IN("act", "w_down"), "down_mm");
    gb_node(&b, "add", "down", IN("down_mm", "b_down"), "down");
    gb_node(&b, "add", "y", IN("res1", "down"), "y");
    if (b.rc == 0) {
        int rc = rtx_graph_add_output(b.g, "y", err);
        if (rc < 0) b.rc = rc;
    }
    if (b.rc) {
        rtx_graph_free(b.g);
        return b.rc;
    }
    *out = b.g;
    return 0;
}
