/*
 * arch-weights.c - a checkpoint's weights (model.safetensors, or model.safetensors.index.json
 * and its shards) as the step graph reads them: Hugging Face names mapped to the graph's, every
 * tensor checked for its shape, converted to the compute dtype.
 *
 * DESIGN
 * One table per architecture lists the graph's weights in input order with the Hugging Face
 * name each comes from and the shape it must have; the loader walks it once. A tensor already
 * in the compute dtype stays a view of the mapped file (no copy); another dtype is converted
 * into a new tensor. GPT-2's fused attention projection (c_attn, Conv1D [in, 3 * out]) is
 * split into q, k and v: its weight by columns (copies), its bias by ranges (views). Layouts
 * are the checkpoint's: Llama's nn.Linear weights stay [out, in] (the graph multiplies with
 * trans_b), GPT-2's Conv1D weights [in, out]. Names are looked up with the architecture's
 * prefix ("model.", "transformer.") and without it, since both spellings are in circulation.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/formats.h"
#include "generation/arch-impl.h"

#define MAX_SHARDS 4096

/* Which part of the source tensor a weight is: all of it, or one third of its last axis
 * (GPT-2's c_attn). */
enum part { WHOLE, THIRD_0, THIRD_1, THIRD_2 };

struct spec {
    char name[48]; /* the graph's */
    char hf[96];   /* the checkpoint's, without the prefix */
    int ndim;
    int64_t dims[2];
    enum part part;
};

struct specs {
    int n, cap;
    struct spec *s;
};

static int add(struct specs *ss, const char *hf, enum part part, int ndim, int64_t d0, int64_t d1,
               const char *fmt, int layer) {
    if (ss->n == ss->cap) {
        int cap = ss->cap ? 2 * ss->cap : 64;
        struct spec *s = rtx_realloc(ss->s, (size_t)cap * sizeof *s);
        if (!s) return RTX_ENOMEM;
        ss->s = s, ss->cap = cap;
    }
    struct spec *s = &ss->s[ss->n++];
    snprintf(s->name, sizeof s->name, fmt, layer);
    snprintf(s->hf, sizeof s->hf, hf, layer);
    s->ndim = ndim, s->dims[0] = d0, s->dims[1] = d1, s->part = part;
    return 0;
}

static int gpt2_specs(const struct rtx_gen_arch *a, struct specs *ss) {
    int64_t h = a->hidden, in = a->intermediate;
    int rc = add(ss, "wte.weight", WHOLE, 2, a->vocab, h, "embed", 0);
    rc = rc ? rc : add(ss, "wpe.weight", WHOLE, 2, a->max_positions, h, "pos_embed", 0);
    for (int l = 0; l < a->n_layers && !rc; l++) {
        static const char *const qkv[3] = {"q", "k", "v"};
        rc = add(ss, "h.%d.ln_1.weight", WHOLE, 1, h, 0, "layers.%d.attn_norm", l);
        rc = rc ? rc : add(ss, "h.%d.ln_1.bias", WHOLE, 1, h, 0, "layers.%d.attn_norm_bias", l);
        for (int i = 0; i < 3 && !rc; i++) {
            char wn[32], bn[32];
            snprintf(wn, sizeof wn, "layers.%%d.w%s", qkv[i]);
            snprintf(bn, sizeof bn, "layers.%%d.b%s", qkv[i]);
            rc = add(ss, "h.%d.attn.c_attn.weight", THIRD_0 + i, 2, h, h, wn, l);
            rc = rc ? rc : add(ss, "h.%d.attn.c_attn.bias", THIRD_0 + i, 1, h, 0, bn, l);
        }
        rc = rc ? rc : add(ss, "h.%d.attn.c_proj.weight", WHOLE, 2, h, h, "layers.%d.wo", l);
        rc = rc ? rc : add(ss, "h.%d.attn.c_proj.bias", WHOLE, 1, h, 0, "layers.%d.bo", l);
        rc = rc ? rc : add(ss, "h.%d.ln_2.weight", WHOLE, 1, h, 0, "layers.%d.mlp_norm", l);
        rc = rc ? rc : add(ss, "h.%d.ln_2.bias", WHOLE, 1, h, 0, "layers.%d.mlp_norm_bias", l);
        rc = rc ? rc : add(ss, "h.%d.mlp.c_fc.weight", WHOLE, 2, h, in, "layers.%d.w_up", l);
        rc = rc ? rc : add(ss, "h.%d.mlp.c_fc.bias", WHOLE, 1, in, 0, "layers.%d.b_up", l);
        rc = rc ? rc : add(ss, "h.%d.mlp.c_proj.weight", WHOLE, 2, in, h, "layers.%d.w_down", l);
        rc = rc ? rc : add(ss, "h.%d.mlp.c_proj.bias", WHOLE, 1, h, 0, "layers.%d.b_down", l);
    }
    rc = rc ? rc : add(ss, "ln_f.weight", WHOLE, 1, h, 0, "norm", 0);
    rc = rc ? rc : add(ss, "ln_f.bias", WHOLE, 1, h, 0, "norm_bias", 0);
    return rc;
}

/* A Llama layer's weights: the checkpoint's name after "layers.N.", the graph's after
 * "layers.N.", the dimensions (symbolic) and when the weight exists. */
enum dim { D_NONE, D_HIDDEN, D_Q, D_KV, D_FF };
enum when { ALWAYS, QKV_BIAS, O_BIAS, MLP_BIAS };

static const struct {
    const char *hf, *name;
    enum dim d0, d1;
    enum when when;
} llama_layer[] = {
    {"input_layernorm.weight", "attn_norm", D_HIDDEN, D_NONE, ALWAYS},
    {"self_attn.q_proj.weight", "wq", D_Q, D_HIDDEN, ALWAYS},
    {"self_attn.q_proj.bias", "bq", D_Q, D_NONE, QKV_BIAS},
    {"self_attn.k_proj.weight", "wk", D_KV, D_HIDDEN, ALWAYS},
    {"self_attn.k_proj.bias", "bk", D_KV, D_NONE, QKV_BIAS},
    {"self_attn.v_proj.weight", "wv", D_KV, D_HIDDEN, ALWAYS},
    {"self_attn.v_proj.bias", "bv", D_KV, D_NONE, QKV_BIAS},
    {"self_attn.o_proj.weight", "wo", D_HIDDEN, D_Q, ALWAYS},
    {"self_attn.o_proj.bias", "bo", D_HIDDEN, D_NONE, O_BIAS},
    {"post_attention_layernorm.weight", "mlp_norm", D_HIDDEN, D_NONE, ALWAYS},
    {"mlp.gate_proj.weight", "w_gate", D_FF, D_HIDDEN, ALWAYS},
    {"mlp.gate_proj.bias", "b_gate", D_FF, D_NONE, MLP_BIAS},
    {"mlp.up_proj.weight", "w_up", D_FF, D_HIDDEN, ALWAYS},
    {"mlp.up_proj.bias", "b_up", D_FF, D_NONE, MLP_BIAS},
    {"mlp.down_proj.weight", "w_down", D_HIDDEN, D_FF, ALWAYS},
    {"mlp.down_proj.bias", "b_down", D_HIDDEN, D_NONE, MLP_BIAS},
};

static int llama_specs(const struct rtx_gen_arch *a, struct specs *ss) {
    const int64_t dims[] = {[D_NONE] = 0,
                            [D_HIDDEN] = a->hidden,
                            [D_Q] = (int64_t)a->n_heads * a->head_dim,
                            [D_KV] = (int64_t)a->n_kv_heads * a->head_dim,
                            [D_FF] = a->intermediate};
    const bool has[] = {[ALWAYS] = true,
                        [QKV_BIAS] = a->qkv_bias,
                        /* Llama's attention_bias covers o_proj too; Qwen2's bias does not */
                        [O_BIAS] = a->kind == RTX_GEN_ARCH_LLAMA && a->qkv_bias,
                        [MLP_BIAS] = a->mlp_bias};
    int rc = add(ss, "embed_tokens.weight", WHOLE, 2, a->vocab, a->hidden, "embed", 0);
    for (int l = 0; l < a->n_layers && !rc; l++)
        for (size_t i = 0; i < sizeof llama_layer / sizeof llama_layer[0] && !rc; i++) {
            if (!has[llama_layer[i].when]) continue;
            char hf[96], name[48];
            snprintf(hf, sizeof hf, "layers.%%d.%s", llama_layer[i].hf);
            snprintf(name, sizeof name, "layers.%%d.%s", llama_layer[i].name);
            int ndim = llama_layer[i].d1 == D_NONE ? 1 : 2;
            rc = add(ss, hf, WHOLE, ndim, dims[llama_layer[i].d0], dims[llama_layer[i].d1], name,
                     l);
        }
    return rc ? rc : add(ss, "norm.weight", WHOLE, 1, a->hidden, 0, "norm", 0);
}

/* ------------------------------------------------------------------------------------------
 * The checkpoint's files
 * ---------------------------------------------------------------------------------------- */

struct files {
    const char *dir;
    struct rtx_safetensors *single; /* model.safetensors */
    json_t *weight_map;             /* the index's, when sharded */
    int n;
    struct rtx_safetensors *shards[MAX_SHARDS];
};

static void files_close(struct files *f) {
    rtx_safetensors_unref(f->single);
    for (int i = 0; i < f->n; i++)
        rtx_safetensors_unref(f->shards[i]);
    json_decref(f->weight_map);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int files_open(struct files *f, const char *dir, struct rtx_err *err) {
    char path[4096];
    f->dir = dir;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (exists(path)) return rtx_safetensors_open(path, &f->single, err);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!exists(path))
        return rtx_err_set(err, RTX_EIO,
                           "%s: neither model.safetensors nor model.safetensors.index.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return rtx_err_set(err, RTX_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return rtx_err_set(err, RTX_EFORMAT, "%s: weight_map must be an object", path);
    }
    f->weight_map = json_incref(map);
    json_decref(root);
    return 0;
}

/* The shard file named by the index (opened once). */
static int shard(struct files *f, const char *file, struct rtx_safetensors **out,
                 struct rtx_err *err) {
    char path[4096];
    if (!file[0] || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, ".."))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s/model.safetensors.index.json: shard '%.100s' is not a file name "
                           "in the checkpoint directory",
                           f->dir, file);
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->shards[i]->path, path)) {
            *out = f->shards[i];
            return 0;
        }
    if (f->n == MAX_SHARDS)
        return rtx_err_set(err, RTX_ELIMIT, "%s/model.safetensors.index.json: over %d shards",
                           f->dir, MAX_SHARDS);
    int rc = rtx_safetensors_open(path, &f->shards[f->n], err);
    if (rc) return rc;
    *out = f->shards[f->n++];
    return 0;
}

/* Finds a tensor under prefix+name or name: *st and *idx, or *st NULL when absent. *where
 * names the file that should hold it (for messages). */
static int find(struct files *f, const char *prefix, const char *name, struct rtx_safetensors **st,
                int *idx, char *full, size_t full_len, struct rtx_err *err) {
    *st = NULL;
    for (int k = 0; k < 2; k++) {
        snprintf(full, full_len, "%s%s", k == 0 ? prefix : "", name);
        if (f->single) {
            if ((*idx = rtx_safetensors_find(f->single, full)) >= 0) {
                *st = f->single;
                return 0;
            }
            continue;
        }
        json_t *file = json_object_get(f->weight_map, full);
        if (!file) continue;
        if (!json_is_string(file))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s/model.safetensors.index.json: weight_map['%s'] must be a "
                               "file name",
                               f->dir, full);
        int rc = shard(f, json_string_value(file), st, err);
        if (rc) return rc;
        if ((*idx = rtx_safetensors_find(*st, full)) < 0)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: tensor '%s' is missing (model.safetensors.index.json lists "
                               "it there)",
                               (*st)->path, full);
        return 0;
    }
    snprintf(full, full_len, "%s%s", prefix, name);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Conversion
 * ---------------------------------------------------------------------------------------- */

static float load_f(const void *p, enum rtx_dtype dt, int64_t i) {
    if (dt == RTX_F32) return ((const float *)p)[i];
    if (dt == RTX_F16) return rtx_f16_to_f32(((const uint16_t *)p)[i]);
    return rtx_bf16_to_f32(((const uint16_t *)p)[i]);
}

static void store_f(void *p, enum rtx_dtype dt, int64_t i, float v) {
    if (dt == RTX_F32)
        ((float *)p)[i] = v;
    else if (dt == RTX_F16)
        ((uint16_t *)p)[i] = rtx_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = rtx_f32_to_bf16(v);
}

/* Columns [c0, c0 + cols) of src (contiguous, viewed as [rows, total]) as a new tensor of
 * dtype dt and shape dims; a reference to src when that is all of it in its dtype. */
static int take(struct rtx_tensor *src, int64_t rows, int64_t total, int64_t c0, int64_t cols,
                enum rtx_dtype dt, int ndim, const int64_t *dims, struct rtx_tensor **out,
                struct rtx_err *err) {
    if (src->dtype == dt && cols == total) {
        *out = rtx_tensor_ref(src);
        return 0;
    }
    int rc = rtx_tensor_new(dt, ndim, dims, out, err);
    if (rc) return rc;
    const uint8_t *s = rtx_tensor_data(src);
    uint8_t *d = rtx_tensor_data(*out);
    size_t es = rtx_dtype_size(src->dtype);
    for (int64_t r = 0; r < rows; r++) {
        if (src->dtype == dt) {
            memcpy(d + (size_t)(r * cols) * es, s + (size_t)(r * total + c0) * es,
                   (size_t)cols * es);
            continue;
        }
        for (int64_t c = 0; c < cols; c++)
            store_f(d, dt, r * cols + c, load_f(s, src->dtype, r * total + c0 + c));
    }
    return 0;
}

int rtx__gen_weights_convert(const struct rtx_gen_weights *src, enum rtx_dtype dtype,
                             struct rtx_gen_weights *w, struct rtx_err *err) {
    memset(w, 0, sizeof *w);
    w->names = rtx_calloc((size_t)src->n + 1, sizeof *w->names);
    w->t = rtx_calloc((size_t)src->n + 1, sizeof *w->t);
    if (!w->names || !w->t) goto nomem;
    w->n = src->n; /* entries not yet made are NULL */
    for (int i = 0; i < src->n; i++) {
        struct rtx_tensor *t = src->t[i];
        int64_t n = rtx_tensor_numel(t);
        if (!(w->names[i] = rtx_strdup(src->names[i]))) goto nomem;
        int rc = take(t, 1, n, 0, n, dtype, t->ndim, t->dims, &w->t[i], err);
        if (rc) {
            rtx__gen_weights_clear(w);
            return rc;
        }
        w->bytes += (int64_t)rtx_tensor_nbytes(w->t[i]);
    }
    return 0;
nomem:
    rtx__gen_weights_clear(w);
    return rtx_err_set(err, RTX_ENOMEM, "out of memory converting the weights");
}

void rtx__gen_weights_clear(struct rtx_gen_weights *w) {
    for (int i = 0; w->names && i < w->n; i++)
        rtx_free(w->names[i]);
    for (int i = 0; w->t && i < w->n; i++)
        rtx_tensor_unref(w->t[i]);
    rtx_free(w->names);
    rtx_free(w->t);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

/* Checks one source tensor against its spec and takes its part. */
static int load_one(struct files *f, const char *prefix, const struct spec *s,
                    enum rtx_dtype *dtype, struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_safetensors *st;
    int idx, rc;
    char full[160];
    if ((rc = find(f, prefix, s->hf, &st, &idx, full, sizeof full, err))) return rc;
    if (!st)
        return rtx_err_set(err, RTX_EFORMAT, "%s/%s: tensor '%s' is missing", f->dir,
                           f->single ? "model.safetensors" : "model.safetensors.index.json", full);
    const struct rtx_safetensors_entry *e = &st->entries[idx];
    int64_t want[2] = {s->dims[0], s->dims[1]};
    if (s->part != WHOLE) want[s->ndim - 1] *= 3;
    bool ok = e->ndim == s->ndim;
    for (int i = 0; ok && i < s->ndim; i++)
        ok = e->dims[i] == want[i];
    if (!ok) {
        char got[96], exp[96];
        rtx_shape_str(e->dtype, e->ndim, e->dims, got, sizeof got);
        rtx_shape_str(e->dtype, s->ndim, want, exp, sizeof exp);
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s' has shape %s, expected %s", st->path,
                           full, got, exp);
    }
    if (!rtx_dtype_is_float(e->dtype))
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s' is %s, expected a float dtype",
                           st->path, full, rtx_dtype_name(e->dtype));
    if (*dtype == RTX_DTYPE_COUNT) *dtype = e->dtype;
    struct rtx_tensor *t;
    if ((rc = rtx_safetensors_tensor(st, idx, &t, err))) return rc;
    int64_t rows = s->ndim == 2 ? e->dims[0] : 1, total = e->dims[e->ndim - 1];
    int64_t cols = s->dims[s->ndim - 1], c0 = s->part == WHOLE ? 0 : (s->part - THIRD_0) * cols;
    if (s->part != WHOLE && s->ndim == 1 && t->dtype == *dtype) {
        /* a bias third is contiguous: a view */
        rc = rtx_tensor_view(t, 1, s->dims, (const int64_t[]){1},
                             t->offset + c0 * (int64_t)rtx_dtype_size(t->dtype), out, err);
    } else {
        rc = take(t, rows, total, c0, cols, *dtype, s->ndim, s->dims, out, err);
    }
    rtx_tensor_unref(t);
    if (rc) return rtx_err_prefix(err, "%s: tensor '%s'", st->path, full);
    return 0;
}

int rtx__gen_weights_load(const char *dir, const struct rtx_gen_arch *a, enum rtx_dtype dtype,
                          struct rtx_gen_weights *w, struct rtx_err *err) {
    memset(w, 0, sizeof *w);
    if (dtype != RTX_DTYPE_COUNT && !rtx_dtype_is_float(dtype))
        return rtx_err_set(err, RTX_EINVAL, "weights: compute dtype %s is not a float dtype",
                           rtx_dtype_name(dtype));
    struct specs ss = {0};
    bool gpt2 = a->kind == RTX_GEN_ARCH_GPT2;
    int rc = gpt2 ? gpt2_specs(a, &ss) : llama_specs(a, &ss);
    if (!rc && !a->tie_embeddings)
        rc = add(&ss, "lm_head.weight", WHOLE, 2, a->vocab, a->hidden, "lm_head", 0);
    if (rc) {
        rtx_free(ss.s);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory listing the weights");
    }
    struct files f = {0};
    if ((rc = files_open(&f, dir, err))) goto out;
    w->names = rtx_calloc((size_t)ss.n, sizeof *w->names);
    w->t = rtx_calloc((size_t)ss.n, sizeof *w->t);
    if (!w->names || !w->t) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading the weights");
        goto out;
    }
    w->n = ss.n; /* entries not yet made are NULL */
    for (int i = 0; i < ss.n; i++) {
        /* lm_head is outside the model's prefix */
        const char *prefix = !strcmp(ss.s[i].name, "lm_head") ? ""
                             : gpt2                           ? "transformer."
                                                              : "model.";
        if (!(w->names[i] = rtx_strdup(ss.s[i].name))) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading the weights");
            goto out;
        }
        if ((rc = load_one(&f, prefix, &ss.s[i], &dtype, &w->t[i], err))) goto out;
        w->bytes += (int64_t)rtx_tensor_nbytes(w->t[i]);
    }
out:
    files_close(&f);
    rtx_free(ss.s);
    if (rc) rtx__gen_weights_clear(w);
    return rc;
}
