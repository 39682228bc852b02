/*
 * arch-config.c - a Hugging Face checkpoint's config.json read into struct rtx_gen_arch, and
 * the rotary inverse frequencies with the rope scaling applied.
 *
 * DESIGN
 * The architecture comes from architectures[0] when the file has it (the class transformers
 * instantiates), else from model_type. Each kind reads its own field names (GPT-2's n_embd,
 * n_head, ... and Llama's hidden_size, num_attention_heads, ...) with transformers' defaults
 * for the optional ones, then one check covers every kind: positive sizes within bounds, heads
 * dividing the hidden size (when head_dim is not given), query heads a multiple of KV heads, an
 * even head size for the rotary pairs. Options that change the math and that the step graph
 * does not implement are refused by name rather than ignored (GPT-2's scale_attn_weights false
 * or scale_attn_by_inverse_layer_idx, rope types other than default, llama3 and linear).
 * A sliding window only caps the context: with every sequence shorter than the window, full
 * attention is the same computation.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "generation/arch-impl.h"

#define MAX_SIZE (1 << 24) /* bound on every size field */

static const struct {
    const char *arch, *model_type;
    enum rtx_gen_arch_kind kind;
} kinds[] = {
    {"GPT2LMHeadModel", "gpt2", RTX_GEN_ARCH_GPT2},
    {"LlamaForCausalLM", "llama", RTX_GEN_ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", RTX_GEN_ARCH_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", RTX_GEN_ARCH_QWEN2},
};

/* Activations per kind: what transformers' ACT2FN accepts and the graph implements. */
static const char *const gpt2_acts[] = {
    "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "relu", NULL};
static const char *const llama_acts[] = {"silu", "swish", NULL};

/* ------------------------------------------------------------------------------------------
 * Field readers: each returns 0 or RTX_EFORMAT naming the file and the field
 * ---------------------------------------------------------------------------------------- */

struct reader {
    json_t *obj;
    const char *what; /* the file */
    const char *path; /* "" or "rope_scaling." for nested objects */
    struct rtx_err *err;
};

/* An integer field in [lo, hi]; dflt when absent or null and dflt >= lo, else an error. */
static int get_int(const struct reader *r, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                   int *out) {
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (dflt < lo)
            return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s is missing", r->what, r->path, key);
        *out = (int)dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s must be an integer", r->what, r->path,
                           key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s is %lld, expected %lld..%lld", r->what,
                           r->path, key, (long long)x, (long long)lo, (long long)hi);
    *out = (int)x;
    return 0;
}

/* A number field > 0 (or >= 0 with allow_zero); dflt when absent and dflt >= 0, else an
 * error. */
static int get_num(const struct reader *r, const char *key, double dflt, bool allow_zero,
                   double *out) {
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0)
            return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s is missing", r->what, r->path, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s must be a number", r->what, r->path,
                           key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || (x == 0 && !allow_zero))
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s is %g, expected a number > 0", r->what,
                           r->path, key, x);
    *out = x;
    return 0;
}

static int get_bool(const struct reader *r, const char *key, bool dflt, bool *out) {
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s must be true or false", r->what, r->path,
                           key);
    *out = json_is_true(v);
    return 0;
}

/* A string field into out (size n); dflt when absent or null. */
static int get_str(const struct reader *r, const char *key, const char *dflt, char *out,
                   size_t n) {
    json_t *v = json_object_get(r->obj, key);
    const char *s = dflt;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return rtx_err_set(r->err, RTX_EFORMAT, "%s: %s%s must be a string", r->what, r->path,
                               key);
        s = json_string_value(v);
    }
    if (strlen(s) >= n)
        return rtx_err_set(r->err, RTX_EUNSUPPORTED, "%s: %s%s '%.40s' is not supported", r->what,
                           r->path, key, s);
    snprintf(out, n, "%s", s);
    return 0;
}

/* A token id field: an integer, a list of integers (eos_token_id), or null. Appends to ids
 * (at most max, duplicates dropped). */
static int get_ids(const struct reader *r, const char *key, int32_t *ids, int *n, int max) {
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) return 0;
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < count; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return rtx_err_set(r->err, RTX_EFORMAT,
                               "%s: %s must be a token id or a list of token ids", r->what, key);
        int32_t id = (int32_t)json_integer_value(x);
        bool seen = false;
        for (int j = 0; j < *n; j++)
            seen |= ids[j] == id;
        if (seen) continue;
        if (*n >= max)
            return rtx_err_set(r->err, RTX_EUNSUPPORTED, "%s: %s lists more than %d ids", r->what,
                               key, max);
        ids[(*n)++] = id;
    }
    return 0;
}

static int one_of(const struct reader *r, const char *key, const char *val,
                  const char *const *allowed) {
    for (int i = 0; allowed[i]; i++)
        if (!strcmp(val, allowed[i])) return 0;
    return rtx_err_set(r->err, RTX_EUNSUPPORTED, "%s: %s%s '%s' is not supported", r->what,
                       r->path, key, val);
}

/* ------------------------------------------------------------------------------------------
 * Per kind
 * ---------------------------------------------------------------------------------------- */

static int parse_gpt2(const struct reader *r, struct rtx_gen_arch *a) {
    int rc, inner;
    bool b;
    if ((rc = get_int(r, "n_layer", 1, MAX_SIZE, -1, &a->n_layers)) ||
        (rc = get_int(r, "n_embd", 1, MAX_SIZE, -1, &a->hidden)) ||
        (rc = get_int(r, "n_head", 1, MAX_SIZE, -1, &a->n_heads)) ||
        (rc = get_int(r, "vocab_size", 1, MAX_SIZE, -1, &a->vocab)) ||
        (rc = get_int(r, "n_positions", 1, MAX_SIZE, -1, &a->max_positions)) ||
        (rc = get_int(r, "n_inner", 0, MAX_SIZE, 0, &inner)) ||
        (rc = get_num(r, "layer_norm_epsilon", 1e-5, false, &a->norm_eps)) ||
        (rc =
             get_str(r, "activation_function", "gelu_new", a->hidden_act, sizeof a->hidden_act)) ||
        (rc = one_of(r, "activation_function", a->hidden_act, gpt2_acts)) ||
        (rc = get_bool(r, "tie_word_embeddings", true, &a->tie_embeddings)))
        return rc;
    a->intermediate = inner ? inner : 4 * a->hidden;
    a->n_kv_heads = a->n_heads;
    if (a->hidden % a->n_heads)
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: n_head (%d) does not divide n_embd (%d)",
                           r->what, a->n_heads, a->hidden);
    a->head_dim = a->hidden / a->n_heads;
    a->qkv_bias = a->mlp_bias = true;
    if ((rc = get_bool(r, "scale_attn_weights", true, &b))) return rc;
    if (!b)
        return rtx_err_set(r->err, RTX_EUNSUPPORTED,
                           "%s: scale_attn_weights false is not supported", r->what);
    if ((rc = get_bool(r, "scale_attn_by_inverse_layer_idx", false, &b))) return rc;
    if (b)
        return rtx_err_set(r->err, RTX_EUNSUPPORTED,
                           "%s: scale_attn_by_inverse_layer_idx true is not supported", r->what);
    if ((rc = get_bool(r, "add_cross_attention", false, &b))) return rc;
    if (b)
        return rtx_err_set(r->err, RTX_EUNSUPPORTED,
                           "%s: add_cross_attention true is not supported", r->what);
    return 0;
}

/* rope_scaling (or transformers 5's rope_parameters, which also carries rope_theta). */
static int parse_rope(const struct reader *top, json_t *obj, const char *name,
                      struct rtx_gen_arch *a) {
    char path[32];
    snprintf(path, sizeof path, "%s.", name);
    struct reader r = {obj, top->what, path, top->err};
    if (!json_is_object(obj))
        return rtx_err_set(top->err, RTX_EFORMAT, "%s: %s must be an object or null", top->what,
                           name);
    int rc;
    const char *key = json_object_get(obj, "rope_type") ? "rope_type" : "type";
    if ((rc = get_str(&r, key, "default", a->rope_type, sizeof a->rope_type))) return rc;
    if (json_object_get(obj, "rope_theta") &&
        (rc = get_num(&r, "rope_theta", -1, false, &a->rope_theta)))
        return rc;
    if (!strcmp(a->rope_type, "default")) return 0;
    if (!strcmp(a->rope_type, "linear")) return get_num(&r, "factor", -1, false, &a->rope_factor);
    if (!strcmp(a->rope_type, "llama3")) {
        if ((rc = get_num(&r, "factor", -1, false, &a->rope_factor)) ||
            (rc = get_num(&r, "low_freq_factor", -1, false, &a->rope_low_freq)) ||
            (rc = get_num(&r, "high_freq_factor", -1, false, &a->rope_high_freq)) ||
            (rc = get_int(&r, "original_max_position_embeddings", 1, MAX_SIZE, a->max_positions,
                          &a->rope_original_max)))
            return rc;
        if (a->rope_high_freq <= a->rope_low_freq)
            return rtx_err_set(top->err, RTX_EFORMAT,
                               "%s: %s.high_freq_factor (%g) must exceed low_freq_factor (%g)",
                               top->what, name, a->rope_high_freq, a->rope_low_freq);
        return 0;
    }
    return rtx_err_set(top->err, RTX_EUNSUPPORTED,
                       "%s: %s.%s '%s' is not supported (default, linear, llama3)", top->what,
                       name, key, a->rope_type);
}

static int parse_llama(const struct reader *r, struct rtx_gen_arch *a) {
    int rc, window = 0;
    bool use_window = a->kind != RTX_GEN_ARCH_QWEN2; /* Mistral's window is always on */
    if ((rc = get_int(r, "num_hidden_layers", 1, MAX_SIZE, -1, &a->n_layers)) ||
        (rc = get_int(r, "hidden_size", 1, MAX_SIZE, -1, &a->hidden)) ||
        (rc = get_int(r, "num_attention_heads", 1, MAX_SIZE, -1, &a->n_heads)) ||
        (rc = get_int(r, "num_key_value_heads", 1, MAX_SIZE, a->n_heads, &a->n_kv_heads)) ||
        (rc = get_int(r, "intermediate_size", 1, MAX_SIZE, -1, &a->intermediate)) ||
        (rc = get_int(r, "vocab_size", 1, MAX_SIZE, -1, &a->vocab)) ||
        (rc = get_int(r, "max_position_embeddings", 1, MAX_SIZE, 2048, &a->max_positions)) ||
        (rc = get_num(r, "rms_norm_eps", 1e-6, false, &a->norm_eps)) ||
        (rc = get_num(r, "rope_theta", 10000.0, false, &a->rope_theta)) ||
        (rc = get_str(r, "hidden_act", "silu", a->hidden_act, sizeof a->hidden_act)) ||
        (rc = one_of(r, "hidden_act", a->hidden_act, llama_acts)) ||
        (rc = get_bool(r, "tie_word_embeddings", false, &a->tie_embeddings)) ||
        (rc = get_bool(r, "attention_bias", false, &a->qkv_bias)) ||
        (rc = get_bool(r, "mlp_bias", false, &a->mlp_bias)) ||
        (rc = get_int(r, "sliding_window", 0, MAX_SIZE, 0, &window)) ||
        (a->kind == RTX_GEN_ARCH_QWEN2 &&
         (rc = get_bool(r, "use_sliding_window", false, &use_window))))
        return rc;
    if (a->kind == RTX_GEN_ARCH_QWEN2) a->qkv_bias = true, a->mlp_bias = false;
    if (a->n_heads % a->n_kv_heads)
        return rtx_err_set(r->err, RTX_EFORMAT,
                           "%s: num_key_value_heads (%d) does not divide num_attention_heads (%d)",
                           r->what, a->n_kv_heads, a->n_heads);
    if (!json_object_get(r->obj, "head_dim") ||
        json_is_null(json_object_get(r->obj, "head_dim"))) {
        if (a->hidden % a->n_heads)
            return rtx_err_set(r->err, RTX_EFORMAT,
                               "%s: num_attention_heads (%d) does not divide hidden_size (%d)",
                               r->what, a->n_heads, a->hidden);
        a->head_dim = a->hidden / a->n_heads;
    } else if ((rc = get_int(r, "head_dim", 1, MAX_SIZE, -1, &a->head_dim))) {
        return rc;
    }
    if (a->head_dim % 2)
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: the head size %d is odd (rotary pairs)",
                           r->what, a->head_dim);
    snprintf(a->rope_type, sizeof a->rope_type, "default");
    json_t *rs = json_object_get(r->obj, "rope_scaling");
    if (rs && !json_is_null(rs) && (rc = parse_rope(r, rs, "rope_scaling", a))) return rc;
    json_t *rp = json_object_get(r->obj, "rope_parameters");
    if (rp && !json_is_null(rp) && (rc = parse_rope(r, rp, "rope_parameters", a))) return rc;
    if (use_window && window > 0 && window < a->max_positions) a->max_positions = window;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------------------------- */

static int parse_kind(const struct reader *r, struct rtx_gen_arch *a) {
    json_t *archs = json_object_get(r->obj, "architectures");
    json_t *mt = json_object_get(r->obj, "model_type");
    const char *name = NULL, *field = NULL;
    if (json_is_array(archs) && json_array_size(archs) > 0) {
        json_t *x = json_array_get(archs, 0);
        if (!json_is_string(x))
            return rtx_err_set(r->err, RTX_EFORMAT, "%s: architectures[0] must be a string",
                               r->what);
        name = json_string_value(x), field = "architectures[0]";
    } else if (archs && !json_is_null(archs) && !json_is_array(archs)) {
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: architectures must be a list", r->what);
    } else if (json_is_string(mt)) {
        name = json_string_value(mt), field = "model_type";
    } else {
        return rtx_err_set(r->err, RTX_EFORMAT, "%s: neither architectures nor model_type is set",
                           r->what);
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(name, field[0] == 'a' ? kinds[i].arch : kinds[i].model_type)) {
            a->kind = kinds[i].kind;
            return 0;
        }
    return rtx_err_set(r->err, RTX_EUNSUPPORTED,
                       "%s: %s '%.60s' is not supported (GPT2LMHeadModel, LlamaForCausalLM, "
                       "MistralForCausalLM, Qwen2ForCausalLM)",
                       r->what, field, name);
}

static int parse_dtype(const struct reader *r, struct rtx_gen_arch *a) {
    static const struct {
        const char *name;
        enum rtx_dtype dt;
    } names[] = {{"float32", RTX_F32},
                 {"float16", RTX_F16},
                 {"bfloat16", RTX_BF16},
                 {"float", RTX_F32},
                 {"half", RTX_F16}};
    const char *key = json_object_get(r->obj, "torch_dtype") ? "torch_dtype" : "dtype";
    char s[16];
    int rc = get_str(r, key, "", s, sizeof s);
    if (rc) return rc;
    a->dtype = RTX_DTYPE_COUNT; /* not said: the weights' own */
    if (!s[0]) return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            a->dtype = names[i].dt;
            return 0;
        }
    return rtx_err_set(r->err, RTX_EUNSUPPORTED, "%s: %s '%s' is not supported", r->what, key, s);
}

int rtx__gen_arch_parse(const char *json, size_t len, const char *what, struct rtx_gen_arch *a,
                        struct rtx_err *err) {
    memset(a, 0, sizeof *a);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return rtx_err_set(err, RTX_EFORMAT, "%s: line %d: %s", what, je.line, je.text);
    struct reader r = {root, what, "", err};
    int rc = 0;
    if (!json_is_object(root)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: expected a JSON object", what);
        goto out;
    }
    a->bos_id = -1;
    if ((rc = parse_kind(&r, a)) || (rc = parse_dtype(&r, a))) goto out;
    rc = a->kind == RTX_GEN_ARCH_GPT2 ? parse_gpt2(&r, a) : parse_llama(&r, a);
    if (rc) goto out;
    int bos[1], n_bos = 0;
    if ((rc = get_ids(&r, "bos_token_id", bos, &n_bos, 1)) ||
        (rc = get_ids(&r, "eos_token_id", a->eos_ids, &a->n_eos, RTX_GEN_MAX_EOS)))
        goto out;
    if (n_bos) a->bos_id = bos[0];
    int64_t qdim = (int64_t)a->n_heads * a->head_dim;
    if (qdim > MAX_SIZE)
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: %d heads of %d are too large", what, a->n_heads,
                         a->head_dim);
out:
    json_decref(root);
    return rc;
}

void rtx__gen_arch_inv_freq(const struct rtx_gen_arch *a, float *out) {
    int dim = a->head_dim, half = dim / 2;
    for (int i = 0; i < half; i++) {
        double inv = 1.0 / pow(a->rope_theta, (double)(2 * i) / dim);
        if (!strcmp(a->rope_type, "linear")) {
            inv /= a->rope_factor;
        } else if (!strcmp(a->rope_type, "llama3")) {
            /* transformers' _compute_llama3_parameters */
            double old = a->rope_original_max, factor = a->rope_factor;
            double low_wavelen = old / a->rope_low_freq, high_wavelen = old / a->rope_high_freq;
            double wavelen = 2 * M_PI / inv;
            if (wavelen > low_wavelen) {
                inv /= factor;
            } else if (wavelen >= high_wavelen) {
                double smooth =
                    (old / wavelen - a->rope_low_freq) / (a->rope_high_freq - a->rope_low_freq);
                inv = (1 - smooth) * inv / factor + smooth * inv;
            }
        }
        out[i] = (float)inv;
    }
}
