/*
 * make-examples.c - writes the example graphs OUTDIR/mlp.rtxg and
 * OUTDIR/transformer_block.rtxg (see examples/README.md), built with the graph builder API
 * and weights from a fixed-seed xorshift generator, so every build writes the same bytes.
 *
 * Usage: make-examples OUTDIR
 *
 * DESIGN
 * Building goes through a small "sticky error" builder: each helper does nothing once a step
 * has failed, so the graph descriptions below read as straight-line code and the one error
 * (the first) is reported at the end, after everything is freed.
 * The Python interop tests re-implement both graphs in NumPy from the weights stored in the
 * files; the README documents the exact structure, so change both together.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/runtime.h"

struct builder {
    struct rtx_graph *g;
    uint64_t rng; /* xorshift64 state, never 0 */
    int rc;       /* first error, 0 while all is well */
    struct rtx_err err;
};

static double rng_uniform(struct builder *b) { /* [-1, 1) */
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return (double)(b->rng >> 11) * 0x1.0p-52 - 1.0;
}

static void begin(struct builder *b, const char *name, uint64_t seed) {
    memset(b, 0, sizeof *b);
    b->rng = seed ? seed : 1;
    b->rc = rtx_graph_new(name, &b->g, &b->err);
}

static void input(struct builder *b, const char *name, int ndim, const int64_t *dims) {
    if (b->rc) return;
    int rc = rtx_graph_add_input(b->g, name, RTX_F32, ndim, dims, &b->err);
    if (rc < 0) b->rc = rc;
}

/* An f32 initializer with elements center + scale * uniform[-1, 1). */
static void weight(struct builder *b, const char *name, int ndim, const int64_t *dims,
                   double center, double scale) {
    if (b->rc) return;
    struct rtx_tensor *t = NULL;
    int rc = rtx_tensor_new(RTX_F32, ndim, dims, &t, &b->err);
    if (rc == 0) {
        float *p = rtx_tensor_data(t);
        int64_t n = rtx_tensor_numel(t);
        for (int64_t i = 0; i < n; i++)
            p[i] = (float)(center + scale * rng_uniform(b));
        rc = rtx_graph_add_initializer(b->g, name, t, &b->err);
        rtx_tensor_unref(t);
    }
    if (rc < 0) b->rc = rc;
}

/* A linear layer's weight [fan_in, fan_out] and bias [fan_out], both scaled 1/sqrt(fan_in). */
static void linear(struct builder *b, const char *w, const char *bias, int64_t fan_in,
                   int64_t fan_out) {
    double scale = 1.0 / sqrt((double)fan_in);
    weight(b, w, 2, (const int64_t[]){fan_in, fan_out}, 0.0, scale);
    weight(b, bias, 1, (const int64_t[]){fan_out}, 0.0, scale);
}

/* A node with one output; returns its index, or -1 after an error. */
static int node(struct builder *b, const char *op, const char *name, const char *const *ins,
                int n_ins, const char *out) {
    if (b->rc) return -1;
    int rc = rtx_graph_add_node(b->g, op, name, ins, n_ins, &out, 1, &b->err);
    if (rc < 0) b->rc = rc;
    return rc;
}

static void attr_int(struct builder *b, int n, const char *name, int64_t v) {
    if (b->rc) return;
    b->rc = rtx_graph_set_attr_int(b->g, n, name, v, &b->err);
}

static void attr_float(struct builder *b, int n, const char *name, double v) {
    if (b->rc) return;
    b->rc = rtx_graph_set_attr_float(b->g, n, name, v, &b->err);
}

static void attr_string(struct builder *b, int n, const char *name, const char *v) {
    if (b->rc) return;
    b->rc = rtx_graph_set_attr_string(b->g, n, name, v, &b->err);
}

static void attr_ints(struct builder *b, int n, const char *name, const int64_t *v, int len) {
    if (b->rc) return;
    b->rc = rtx_graph_set_attr_ints(b->g, n, name, v, len, &b->err);
}

static void output(struct builder *b, const char *name) {
    if (b->rc) return;
    b->rc = rtx_graph_add_output(b->g, name, &b->err);
}

/* Validates (structure only: the batch dimension is -1), saves and frees; returns 0 or 1. */
static int finish(struct builder *b, const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct rtx_limits lim = rtx_limits_default();
    if (b->rc == 0) b->rc = rtx_graph_validate(b->g, &lim, &b->err);
    if (b->rc == 0) b->rc = rtx_graph_save_file(b->g, path, &b->err);
    rtx_graph_free(b->g);
    b->g = NULL;
    if (b->rc) {
        fprintf(stderr, "make-examples: %s: %s\n", path, b->err.msg);
        return 1;
    }
    return 0;
}

#define IN(...)                                                                                   \
    (const char *const[]){__VA_ARGS__},                                                           \
        (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))

/* mlp: probs = softmax(relu(x @ w1 + b1) @ w2 + b2). */
static int make_mlp(const char *dir) {
    struct builder b;
    begin(&b, "mlp", 0x9e3779b97f4a7c15ull);
    input(&b, "x", 2, (const int64_t[]){-1, 64});
    linear(&b, "w1", "b1", 64, 128);
    linear(&b, "w2", "b2", 128, 10);
    node(&b, "gemm", "fc1", IN("x", "w1", "b1"), "fc1_out");
    node(&b, "relu", "relu1", IN("fc1_out"), "relu1_out");
    node(&b, "gemm", "fc2", IN("relu1_out", "w2", "b2"), "logits");
    int sm = node(&b, "softmax", "softmax", IN("logits"), "probs");
    attr_int(&b, sm, "axis", -1);
    output(&b, "probs");
    return finish(&b, dir, "mlp.rtxg");
}

enum { SEQ = 128, MODEL = 256, HEADS = 4, HEAD_DIM = 64, FF = 1024 };

/* One projection: <name> = <src> @ w<name> + b<name>, split into heads:
 * <name>_heads = transpose(reshape(<name>, [0, 0, HEADS, HEAD_DIM]), [0, 2, 1, 3]). */
static void project_heads(struct builder *b, const char *name) {
    char w[32], bias[32], proj[32], mm[32], add[32], split[32], heads[32];
    snprintf(w, sizeof w, "w%s", name);
    snprintf(bias, sizeof bias, "b%s", name);
    snprintf(proj, sizeof proj, "%s_proj", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(add, sizeof add, "%s_bias", name);
    snprintf(split, sizeof split, "%s_split", name);
    snprintf(heads, sizeof heads, "%s_heads", name);
    node(b, "matmul", proj, IN("ln1_out", w), mm);
    node(b, "add", add, IN(mm, bias), name);
    int r = node(b, "reshape", split, IN(name), split);
    attr_ints(b, r, "shape", (const int64_t[]){0, 0, HEADS, HEAD_DIM}, 4);
    int t = node(b, "transpose", heads, IN(split), heads);
    attr_ints(b, t, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
}

/* transformer_block: a pre-LayerNorm block (see README.md for the exact formula). */
static int make_transformer_block(const char *dir) {
    struct builder b;
    begin(&b, "transformer_block", 0xd1b54a32d192ed03ull);
    input(&b, "x", 3, (const int64_t[]){-1, SEQ, MODEL});
    double s = 1.0 / sqrt((double)MODEL);
    weight(&b, "ln1_scale", 1, (const int64_t[]){MODEL}, 1.0, 0.1);
    weight(&b, "ln1_bias", 1, (const int64_t[]){MODEL}, 0.0, 0.1);
    weight(&b, "wq", 2, (const int64_t[]){MODEL, MODEL}, 0.0, s);
    weight(&b, "bq", 1, (const int64_t[]){MODEL}, 0.0, s);
    weight(&b, "wk", 2, (const int64_t[]){MODEL, MODEL}, 0.0, s);
    weight(&b, "bk", 1, (const int64_t[]){MODEL}, 0.0, s);
    weight(&b, "wv", 2, (const int64_t[]){MODEL, MODEL}, 0.0, s);
    weight(&b, "bv", 1, (const int64_t[]){MODEL}, 0.0, s);
    linear(&b, "wo", "bo", MODEL, MODEL);
    weight(&b, "ln2_scale", 1, (const int64_t[]){MODEL}, 1.0, 0.1);
    weight(&b, "ln2_bias", 1, (const int64_t[]){MODEL}, 0.0, 0.1);
    linear(&b, "w_up", "b_up", MODEL, FF);
    linear(&b, "w_down", "b_down", FF, MODEL);

    int n = node(&b, "layer_norm", "ln1", IN("x", "ln1_scale", "ln1_bias"), "ln1_out");
    attr_int(&b, n, "axis", -1);
    attr_float(&b, n, "epsilon", 1e-5);
    project_heads(&b, "q");
    project_heads(&b, "k");
    project_heads(&b, "v");
    n = node(&b, "attention", "attention", IN("q_heads", "k_heads", "v_heads"), "attn");
    attr_int(&b, n, "causal", 1);
    n = node(&b, "transpose", "attn_transpose", IN("attn"), "attn_t");
    attr_ints(&b, n, "perm", (const int64_t[]){0, 2, 1, 3}, 4);
    n = node(&b, "reshape", "attn_merge", IN("attn_t"), "attn_merged");
    attr_ints(&b, n, "shape", (const int64_t[]){0, 0, MODEL}, 3);
    node(&b, "matmul", "o_proj", IN("attn_merged", "wo"), "o_mm");
    node(&b, "add", "o_bias", IN("o_mm", "bo"), "o");
    node(&b, "add", "residual1", IN("x", "o"), "res1");

    n = node(&b, "layer_norm", "ln2", IN("res1", "ln2_scale", "ln2_bias"), "ln2_out");
    attr_int(&b, n, "axis", -1);
    attr_float(&b, n, "epsilon", 1e-5);
    node(&b, "matmul", "up_proj", IN("ln2_out", "w_up"), "up_mm");
    node(&b, "add", "up_bias", IN("up_mm", "b_up"), "up");
    n = node(&b, "gelu", "gelu", IN("up"), "act");
    attr_string(&b, n, "approximate", "tanh");
    node(&b, "matmul", "down_proj", IN("act", "w_down"), "down_mm");
    node(&b, "add", "down_bias", IN("down_mm", "b_down"), "down");
    node(&b, "add", "residual2", IN("res1", "down"), "y");
    output(&b, "y");
    return finish(&b, dir, "transformer_block.rtxg");
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '\0' || argv[1][0] == '-') {
        fprintf(stderr, "usage: make-examples OUTDIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "make-examples: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = make_mlp(dir);
    rc |= make_transformer_block(dir);
    return rc;
}
