/*
 * make-examples.c - writes the example graphs OUTDIR/mlp.rtxg and
 * OUTDIR/transformer_block.rtxg (see examples/README.md), built with the graph builder API
 * and weights from a fixed-seed xorshift generator, so every build writes the same bytes;
 * and the example model repository OUTDIR/models (simple, mlp, mlp_nobatch,
 * transformer_block, mlp_wide, mlp_wide_nobatch; docs/serving.md), where the same graphs keep
 * their weights in model.safetensors beside a model.rtxg that declares them as inputs.
 *
 * Usage: make-examples OUTDIR [SRCDIR]
 *
 * The generative example models/tiny-chat (a random-weight Llama checkpoint) takes its
 * tokenizer and configs from SRCDIR/tiny-chat (default "examples", the repository's folder).
 *
 * DESIGN
 * Building goes through a small "sticky error" builder: each helper does nothing once a step
 * has failed, so the graph descriptions below read as straight-line code and the one error
 * (the first) is reported at the end, after everything is freed.
 * The Python interop tests re-implement both graphs in NumPy from the weights stored in the
 * files; the README documents the exact structure, so change both together.
 * Models that share a graph (mlp and mlp_nobatch; mlp_wide and mlp_wide_nobatch) store their
 * weights once: the second model's model.safetensors is a hard link to the first one's (a
 * copy where the file system refuses links), so mlp_wide's 32 MiB do not count twice. Every
 * weight file is written under a temporary name and renamed into place, so rebuilding never
 * rewrites a file that a running rtxd has mapped.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- the model repository ---- */

static void make_dir(struct builder *b, const char *path) {
    if (b->rc) return;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path, strerror(errno));
}

static void write_text(struct builder *b, const char *path, const char *text) {
    if (b->rc) return;
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path,
                                                     strerror(errno));
    if (f && fclose(f) != 0 && !b->rc)
        b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path, strerror(errno));
}

/* Writes the f32 tensors as a safetensors file: an 8-byte little-endian header length, the
 * JSON header (padded with spaces to a multiple of 8 bytes, so every tensor is aligned), the
 * tensors back to back in the order given. */
static void write_safetensors(struct builder *b, const char *path, char *const *names,
                              struct rtx_tensor *const *ts, int n) {
    if (b->rc) return;
    size_t cap = 256 + (size_t)n * 256, len = 0;
    char *h = malloc(cap);
    if (!h) {
        b->rc = rtx_err_set(&b->err, RTX_ENOMEM, "out of memory");
        return;
    }
    uint64_t off = 0;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"rtx\"}");
    for (int i = 0; i < n; i++) {
        uint64_t bytes = rtx_tensor_nbytes(ts[i]);
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                                names[i]);
        for (int d = 0; d < ts[i]->ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)ts[i]->dims[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while ((len + 8) % 8) h[len++] = ' ';
    uint8_t hl[8];
    for (int i = 0; i < 8; i++) hl[i] = (uint8_t)((uint64_t)len >> (8 * i));
    char tmp[4096 + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(hl, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
    for (int i = 0; ok && i < n; i++)
        ok = fwrite(rtx_tensor_data(ts[i]), 1, rtx_tensor_nbytes(ts[i]), f) ==
             rtx_tensor_nbytes(ts[i]);
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path, strerror(errno));
        if (f) unlink(tmp);
    }
    free(h);
}

/* Makes path the same file as first (a hard link; a copy written from the tensors where the
 * file system refuses links), replacing whatever path was. */
static void share_safetensors(struct builder *b, const char *first, const char *path,
                              char *const *names, struct rtx_tensor *const *ts, int n) {
    if (b->rc) return;
    if (unlink(path) != 0 && errno != ENOENT) {
        b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path, strerror(errno));
        return;
    }
    if (link(first, path) != 0) write_safetensors(b, path, names, ts, n);
}

/* Moves every initializer of the graph out into model.safetensors: the value becomes a graph
 * input of the same dtype and shape (rtxd binds it back by name when it loads the model), so
 * model.rtxg carries no weight bytes. Writes REPO/NAME/1/{model.rtxg,model.safetensors} for
 * every name in models[] (the models after the first share the first one's weight file) and
 * REPO/NAME/config.json from configs[]. */
static void publish(struct builder *b, const char *repo, const char *const *models,
                    const char *const *configs, int n_models) {
    if (b->rc) return;
    struct rtx_graph *g = b->g;
    int n = 0;
    char **names = calloc((size_t)g->n_values + 1, sizeof *names);
    struct rtx_tensor **ts = calloc((size_t)g->n_values + 1, sizeof *ts);
    int *ins = rtx_realloc(g->inputs, sizeof *ins * (size_t)(g->n_inputs + g->n_values));
    if (!names || !ts || !ins) {
        b->rc = rtx_err_set(&b->err, RTX_ENOMEM, "out of memory");
        goto out;
    }
    g->inputs = ins;
    for (int v = 0; v < g->n_values; v++) {
        struct rtx_value *val = &g->values[v];
        if (!val->constant) continue;
        names[n] = val->name;
        ts[n++] = val->constant;
        val->constant = NULL;
        val->is_input = true;
        g->inputs[g->n_inputs++] = v;
    }
    char path[4096], first[4096];
    for (int i = 0; i < n_models && !b->rc; i++) {
        snprintf(path, sizeof path, "%s/%s", repo, models[i]);
        make_dir(b, path);
        snprintf(path, sizeof path, "%s/%s/config.json", repo, models[i]);
        write_text(b, path, configs[i]);
        snprintf(path, sizeof path, "%s/%s/1", repo, models[i]);
        make_dir(b, path);
        snprintf(path, sizeof path, "%s/%s/1/model.safetensors", repo, models[i]);
        if (n > 0 && i == 0) {
            write_safetensors(b, path, names, ts, n);
            snprintf(first, sizeof first, "%s", path);
        } else if (n > 0) {
            share_safetensors(b, first, path, names, ts, n);
        }
        snprintf(path, sizeof path, "%s/%s/1/model.rtxg", repo, models[i]);
        if (!b->rc) b->rc = rtx_graph_save_file(g, path, &b->err);
    }
out:
    for (int i = 0; ts && i < n; i++)
        rtx_tensor_unref(ts[i]);
    free(names);
    free(ts);
}

/* Validates (structure only: the batch dimension is -1), saves to DIR/FILE, then, when
 * repo is not NULL, publishes the graph into the model repository; frees the graph and
 * returns 0 or 1. */
static int finish_models(struct builder *b, const char *dir, const char *file, const char *repo,
                         const char *const *models, const char *const *configs, int n_models) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "");
    struct rtx_limits lim = rtx_limits_default();
    if (b->rc == 0) b->rc = rtx_graph_validate(b->g, &lim, &b->err);
    if (b->rc == 0 && file) b->rc = rtx_graph_save_file(b->g, path, &b->err);
    if (repo) publish(b, repo, models, configs, n_models);
    rtx_graph_free(b->g);
    b->g = NULL;
    if (b->rc) {
        fprintf(stderr, "make-examples: %s: %s\n", file ? path : repo, b->err.msg);
        return 1;
    }
    return 0;
}

#define IN(...)                                                                                   \
    (const char *const[]){__VA_ARGS__},                                                           \
        (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))

/* The example repository's config.json files (docs/serving.md). */
static const char simple_config[] =
    "{\n"
    "  \"name\": \"simple\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 8,\n"
    "  \"input\": [\n"
    "    {\"name\": \"INPUT0\", \"data_type\": \"TYPE_INT32\", \"dims\": [16]},\n"
    "    {\"name\": \"INPUT1\", \"data_type\": \"TYPE_INT32\", \"dims\": [16]}\n"
    "  ],\n"
    "  \"output\": [\n"
    "    {\"name\": \"OUTPUT0\", \"data_type\": \"TYPE_INT32\", \"dims\": [16]},\n"
    "    {\"name\": \"OUTPUT1\", \"data_type\": \"TYPE_INT32\", \"dims\": [16]}\n"
    "  ],\n"
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_CPU\"}]\n"
    "}\n";

#define MLP_IO                                                                                    \
    "  \"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [64]}],\n"           \
    "  \"output\": [{\"name\": \"probs\", \"data_type\": \"TYPE_FP32\", "                         \
    "\"dims\": [10]}],\n"

static const char mlp_config[] =
    "{\n"
    "  \"name\": \"mlp\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 64,\n" MLP_IO
    "  \"dynamic_batching\": {\n"
    "    \"preferred_batch_size\": [16, 32],\n"
    "    \"max_queue_delay_microseconds\": 500\n"
    "  },\n"
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_GPU\"}]\n"
    "}\n";

static const char mlp_nobatch_config[] =
    "{\n"
    "  \"name\": \"mlp_nobatch\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 64,\n" MLP_IO
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_GPU\"}]\n"
    "}\n";

#define MLP_WIDE_IO                                                                               \
    "  \"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [1024]}],\n"         \
    "  \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [1024]}],\n"

/* The wide MLP's batch of 1 takes about 2 ms on a 2-core CPU (its 32 MiB of weights are read
 * once per batch), so a queue delay of 1 ms adds at most half a batch-1 run to a lone
 * request while giving concurrent clients time to join a batch. */
static const char mlp_wide_config[] =
    "{\n"
    "  \"name\": \"mlp_wide\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 64,\n" MLP_WIDE_IO
    "  \"dynamic_batching\": {\n"
    "    \"preferred_batch_size\": [16, 32],\n"
    "    \"max_queue_delay_microseconds\": 1000\n"
    "  },\n"
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_GPU\"}]\n"
    "}\n";

static const char mlp_wide_nobatch_config[] =
    "{\n"
    "  \"name\": \"mlp_wide_nobatch\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 64,\n" MLP_WIDE_IO
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_GPU\"}]\n"
    "}\n";

static const char transformer_block_config[] =
    "{\n"
    "  \"name\": \"transformer_block\",\n"
    "  \"platform\": \"rtx_graph\",\n"
    "  \"max_batch_size\": 8,\n"
    "  \"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [128, 256]}],\n"
    "  \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [128, 256]}],\n"
    "  \"instance_group\": [{\"count\": 1, \"kind\": \"KIND_GPU\"}]\n"
    "}\n";

/* simple (Triton's classic example): OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
 * int32 [batch, 16]; no weights. */
static int make_simple(const char *repo) {
    struct builder b;
    begin(&b, "simple", 1);
    if (!b.rc) {
        for (int i = 0; i < 2 && !b.rc; i++) {
            int rc = rtx_graph_add_input(b.g, i ? "INPUT1" : "INPUT0", RTX_I32, 2,
                                         (const int64_t[]){-1, 16}, &b.err);
            if (rc < 0) b.rc = rc;
        }
    }
    node(&b, "add", "sum", IN("INPUT0", "INPUT1"), "OUTPUT0");
    node(&b, "sub", "difference", IN("INPUT0", "INPUT1"), "OUTPUT1");
    output(&b, "OUTPUT0");
    output(&b, "OUTPUT1");
    return finish_models(&b, repo, NULL, repo, (const char *const[]){"simple"},
                         (const char *const[]){simple_config}, 1);
}

/* mlp: probs = softmax(relu(x @ w1 + b1) @ w2 + b2). */
static int make_mlp(const char *dir, const char *repo) {
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
    return finish_models(&b, dir, "mlp.rtxg", repo, (const char *const[]){"mlp", "mlp_nobatch"},
                         (const char *const[]){mlp_config, mlp_nobatch_config}, 2);
}

enum { WIDE_IO = 1024, WIDE_HIDDEN = 4096 };

/* mlp_wide: y = gelu_tanh(x @ w1 + b1) @ w2 + b2 with x [B, 1024], w1 [1024, 4096],
 * w2 [4096, 1024]: 32 MiB of f32 weights, a memory-bound GEMV per row at batch 1 and a
 * compute-bound GEMM at batch 32, the case dynamic batching pays for (docs/benchmarks.md).
 * Only in the repository (no standalone .rtxg, to keep the build's files small). */
static int make_mlp_wide(const char *repo) {
    struct builder b;
    begin(&b, "mlp_wide", 0x2545f4914f6cdd1dull);
    input(&b, "x", 2, (const int64_t[]){-1, WIDE_IO});
    linear(&b, "w1", "b1", WIDE_IO, WIDE_HIDDEN);
    linear(&b, "w2", "b2", WIDE_HIDDEN, WIDE_IO);
    node(&b, "gemm", "fc1", IN("x", "w1", "b1"), "fc1_out");
    int n = node(&b, "gelu", "gelu", IN("fc1_out"), "act");
    attr_string(&b, n, "approximate", "tanh");
    node(&b, "gemm", "fc2", IN("act", "w2", "b2"), "y");
    output(&b, "y");
    return finish_models(&b, repo, NULL, repo,
                         (const char *const[]){"mlp_wide", "mlp_wide_nobatch"},
                         (const char *const[]){mlp_wide_config, mlp_wide_nobatch_config}, 2);
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
static int make_transformer_block(const char *dir, const char *repo) {
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
    return finish_models(&b, dir, "transformer_block.rtxg", repo,
                         (const char *const[]){"transformer_block"},
                         (const char *const[]){transformer_block_config}, 1);
}

/* ------------------------------------------------------------------------------------------
 * tiny-chat: a generative model (docs/generation.md) small enough for any CPU
 * ---------------------------------------------------------------------------------------- */

static const char tiny_chat_config[] =
    "{\n"
    "  \"name\": \"tiny-chat\",\n"
    "  \"platform\": \"rtx_generate\",\n"
    "  \"generation\": {\"kv_cache_bytes\": 8388608, \"max_seqs\": 32}\n"
    "}\n";

/* The Hugging Face config.json of the checkpoint: Llama, 2 layers, width 64, 4 query heads
 * and 2 KV heads of 16, SwiGLU 128, its own LM head, the tokenizer's 512 ids. */
static const char tiny_chat_hf_config[] =
    "{\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"model_type\": \"llama\",\n"
    "  \"hidden_size\": 64,\n"
    "  \"intermediate_size\": 128,\n"
    "  \"num_hidden_layers\": 2,\n"
    "  \"num_attention_heads\": 4,\n"
    "  \"num_key_value_heads\": 2,\n"
    "  \"max_position_embeddings\": 512,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_theta\": 10000.0,\n"
    "  \"vocab_size\": 512,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"torch_dtype\": \"float32\",\n"
    "  \"bos_token_id\": null,\n"
    "  \"eos_token_id\": 2\n"
    "}\n";

/* Copies SRC/NAME to DST/NAME. */
static void copy_file(struct builder *b, const char *src, const char *dst, const char *name) {
    if (b->rc) return;
    char path[4096];
    snprintf(path, sizeof path, "%.3000s/%.200s", src, name);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)len + 1)) && fread(text, 1, (size_t)len, f) == (size_t)len) {
        text[len] = 0;
        snprintf(path, sizeof path, "%.3000s/%.200s", dst, name);
        write_text(b, path, text);
    } else {
        b->rc = rtx_err_set(&b->err, RTX_EIO, "%s: %s", path, f ? "read failed" : strerror(errno));
    }
    free(text);
    if (f) fclose(f);
}

static int make_tiny_chat(const char *repo, const char *src) {
    struct builder b;
    begin(&b, "tiny-chat", 0x7157c4a7ULL);
    const int64_t width = 64, ffn = 128, vocab = 512, kv = 32;
    weight(&b, "model.embed_tokens.weight", 2, (int64_t[]){vocab, width}, 0, 0.5);
    for (int l = 0; l < 2; l++) {
        char n[128];
#define W(suffix, center, scale, ...)                                                             \
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                       \
    weight(&b, n, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                      \
           (int64_t[]){__VA_ARGS__}, center, scale)
        W("input_layernorm.weight", 1, 0.1, width);
        W("self_attn.q_proj.weight", 0, 0.125, width, width);
        W("self_attn.k_proj.weight", 0, 0.125, kv, width);
        W("self_attn.v_proj.weight", 0, 0.125, kv, width);
        W("self_attn.o_proj.weight", 0, 0.125, width, width);
        W("post_attention_layernorm.weight", 1, 0.1, width);
        W("mlp.gate_proj.weight", 0, 0.125, ffn, width);
        W("mlp.up_proj.weight", 0, 0.125, ffn, width);
        W("mlp.down_proj.weight", 0, 0.09, width, ffn);
#undef W
    }
    weight(&b, "model.norm.weight", 1, (int64_t[]){width}, 1, 0.1);
    weight(&b, "lm_head.weight", 2, (int64_t[]){vocab, width}, 0, 1.0);
    char dir[4200], path[4400];
    snprintf(dir, sizeof dir, "%.4000s/tiny-chat", repo);
    make_dir(&b, dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(&b, path, tiny_chat_config);
    snprintf(dir, sizeof dir, "%.4000s/tiny-chat/1", repo);
    make_dir(&b, dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(&b, path, tiny_chat_hf_config);
    if (!b.rc) {
        int n = 0;
        char *names[32];
        struct rtx_tensor *ts[32];
        for (int v = 0; v < b.g->n_values && n < 32; v++)
            if (b.g->values[v].constant) {
                names[n] = b.g->values[v].name;
                ts[n++] = b.g->values[v].constant;
            }
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_safetensors(&b, path, names, ts, n);
    }
    char from[4096];
    snprintf(from, sizeof from, "%.4000s/tiny-chat", src);
    copy_file(&b, from, dir, "tokenizer.json");
    copy_file(&b, from, dir, "tokenizer_config.json");
    copy_file(&b, from, dir, "generation_config.json");
    rtx_graph_free(b.g);
    if (b.rc) {
        fprintf(stderr, "make-examples: %s/tiny-chat: %s\n", repo, b.err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || argv[1][0] == '\0' || argv[1][0] == '-') {
        fprintf(stderr, "usage: make-examples OUTDIR [SRCDIR]\n");
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "make-examples: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char repo[4096];
    snprintf(repo, sizeof repo, "%s/models", dir);
    if (mkdir(repo, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "make-examples: %s: %s\n", repo, strerror(errno));
        return 1;
    }
    int rc = make_mlp(dir, repo);
    rc |= make_transformer_block(dir, repo);
    rc |= make_simple(repo);
    rc |= make_mlp_wide(repo);
    rc |= make_tiny_chat(repo, argc > 2 ? argv[2] : "examples");
    return rc;
}
