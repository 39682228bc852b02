/*
 * model.c - a Hugging Face checkpoint directory loaded on the host (generation.h, "Models"):
 * config.json, the weights, tokenizer.json, tokenizer_config.json (special tokens, BOS, the
 * chat template's source) and generation_config.json (EOS ids, sampling defaults); prompts
 * encoded for generation; the accessors the engine reads (arch-impl.h).
 *
 * DESIGN
 * Everything is read and checked at load, so a bad checkpoint fails there with the file and
 * the field or tensor named, never later in an engine. The weights are loaded in the
 * checkpoint's own dtype, which keeps them views of the mapped files (a load costs page-table
 * entries, not memory); an engine asks for them in its compute dtype and gets the same views
 * or converted copies (rtx__gen_model_weights). The special tokens of the three files are
 * merged into one set: every EOS id any of them names ends a sequence, as vLLM does. The chat
 * template is kept as Jinja source; rendering it belongs to the template interpreter.
 * A model is immutable after loading and reference counted, so engines and requests share it.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/formats.h"
#include "generation/arch-impl.h"
#include "generation/generation.h"

#define MAX_CONFIG_BYTES (16 << 20) /* config.json */

/* The sampling defaults of generation_config.json: each applies only when the file set it. */
struct gen_defaults {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition;
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
};

struct rtx_gen_model {
    atomic_int refs;
    char *dir;
    struct rtx_gen_arch arch;
    struct rtx_gen_weights weights; /* in arch.dtype, views of the mapped files */
    struct rtx_tokenizer *tok;
    char *chat_template; /* Jinja source, NULL when none */
    struct rtx_chat_template *tpl; /* chat_template parsed at load */
    int32_t eos_text_id;           /* tokenizer_config.json's eos_token (the template's), -1 */
    bool add_bos;
    struct gen_defaults defaults;
};

static const char *const finish_names[] = {"", "stop", "length"};
_Static_assert(sizeof finish_names / sizeof finish_names[0] == RTX_GEN_FINISH_COUNT,
               "one name per finish reason");

const char *rtx_gen_finish_name(enum rtx_gen_finish f) {
    return (unsigned)f < RTX_GEN_FINISH_COUNT ? finish_names[f] : "";
}

/* ------------------------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------------------------- */

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* DIR/name into buf. */
static const char *path_of(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* A whole file (NUL-terminated) from rtx_malloc. */
static int read_text(const char *path, char **out, size_t *len, struct rtx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    int rc = 0;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = rtx_err_set(err, RTX_EIO, "%s: not a readable file", path);
    } else if (size > MAX_CONFIG_BYTES) {
        rc = rtx_err_set(err, RTX_ELIMIT, "%s: %ld bytes is too large", path, size);
    } else if (!(*out = rtx_malloc((size_t)size + 1))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", path);
    } else if ((*len = fread(*out, 1, (size_t)size, f)) != (size_t)size) {
        rc = rtx_err_set(err, RTX_EIO, "%s: short read", path);
        rtx_free(*out);
    } else {
        (*out)[size] = 0;
    }
    fclose(f);
    return rc;
}

/* An optional JSON object file: *root NULL when the file does not exist. */
static int read_json(const char *path, json_t **root, struct rtx_err *err) {
    *root = NULL;
    if (!exists(path)) return 0;
    json_error_t je;
    *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!*root) return rtx_err_set(err, RTX_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return rtx_err_set(err, RTX_EFORMAT, "%s: expected a JSON object", path);
    }
    return 0;
}

/* Adds an EOS id to the arch's set (duplicates dropped). */
static int add_eos(struct rtx_gen_arch *a, int32_t id, const char *what, struct rtx_err *err) {
    for (int i = 0; i < a->n_eos; i++)
        if (a->eos_ids[i] == id) return 0;
    if (a->n_eos == RTX_GEN_MAX_EOS)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: more than %d EOS ids in all", what,
                           RTX_GEN_MAX_EOS);
    a->eos_ids[a->n_eos++] = id;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * tokenizer_config.json
 * ---------------------------------------------------------------------------------------- */

/* A special token field: a string, an AddedToken object {"content": ...} or null; *id -1
 * when absent. A token the tokenizer does not know is an error. */
static int special_token(const struct rtx_gen_model *m, json_t *root, const char *key,
                         const char *what, int32_t *id, struct rtx_err *err) {
    *id = -1;
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: %s must be a string or an object with a string 'content'", what,
                           key);
    *id = rtx_tokenizer_token_id(m->tok, json_string_value(v));
    if (*id < 0)
        return rtx_err_set(err, RTX_EFORMAT, "%s: %s '%.60s' is not a token of tokenizer.json",
                           what, key, json_string_value(v));
    return 0;
}

/* chat_template: a string, or a list of {"name", "template"} of which "default" is used. */
static int template_of(json_t *v, const char *what, const char **out, struct rtx_err *err) {
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return rtx_err_set(err, RTX_EFORMAT, "%s: chat_template must be a string or a list", what);
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        json_t *name = json_object_get(t, "name"), *src = json_object_get(t, "template");
        if (!json_is_string(name) || !json_is_string(src))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: chat_template[%zu] must have a string name and template", what,
                               i);
        if (!strcmp(json_string_value(name), "default")) *out = json_string_value(src);
    }
    return 0;
}

static int load_tokenizer_config(struct rtx_gen_model *m, const char *override,
                                 struct rtx_err *err) {
    char path[4096];
    const char *what = path_of(path, sizeof path, m->dir, "tokenizer_config.json");
    json_t *root;
    int rc = read_json(path, &root, err);
    if (rc) return rc;
    int32_t bos = -1, eos = -1;
    const char *tpl = NULL;
    json_t *add = root ? json_object_get(root, "add_bos_token") : NULL;
    if (root && ((rc = special_token(m, root, "bos_token", what, &bos, err)) ||
                 (rc = special_token(m, root, "eos_token", what, &eos, err)) ||
                 (rc = template_of(json_object_get(root, "chat_template"), what, &tpl, err))))
        goto out;
    if (add && !json_is_boolean(add) && !json_is_null(add)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: add_bos_token must be true or false", what);
        goto out;
    }
    if (bos >= 0) m->arch.bos_id = bos;
    if (eos >= 0 && (rc = add_eos(&m->arch, eos, what, err))) goto out;
    m->eos_text_id = eos >= 0 ? eos : m->arch.n_eos > 0 ? m->arch.eos_ids[0] : -1;
    /* Without add_bos_token: Llama tokenizer classes add BOS; otherwise what the tokenizer's
     * post-processor prepends (Llama 3's TemplateProcessing puts BOS first; GPT-2's and
     * Qwen2's add nothing). */
    const int32_t *prefix;
    int n_prefix = rtx_tokenizer_special_prefix(m->tok, &prefix);
    json_t *cls = root ? json_object_get(root, "tokenizer_class") : NULL;
    bool llama_class = json_is_string(cls) && (strcmp(json_string_value(cls), "LlamaTokenizer") == 0 ||
                                               strcmp(json_string_value(cls), "LlamaTokenizerFast") == 0);
    if (add && json_is_boolean(add)) {
        m->add_bos = json_is_true(add);
    } else if (llama_class || (!json_is_string(cls) && m->arch.kind == RTX_GEN_ARCH_LLAMA &&
                               n_prefix == 0 && m->arch.bos_id >= 0)) {
        /* transformers' Llama tokenizers default add_bos_token to true and install a BOS
         * post-processor themselves; a Llama checkpoint without a tokenizer class follows
         * that convention */
        m->add_bos = true;
    } else {
        m->add_bos = n_prefix == 1;
        if (n_prefix == 1 && m->arch.bos_id < 0) m->arch.bos_id = prefix[0];
    }
    json_t *other = NULL;
    if (!override && !tpl) { /* newer checkpoints keep the template beside the config */
        char alt[4096];
        size_t len;
        char *src;
        if (exists(path_of(alt, sizeof alt, m->dir, "chat_template.jinja"))) {
            if ((rc = read_text(alt, &src, &len, err))) goto out;
            m->chat_template = src;
        } else if ((rc = read_json(path_of(alt, sizeof alt, m->dir, "chat_template.json"), &other,
                                   err)) ||
                   (other &&
                    (rc = template_of(json_object_get(other, "chat_template"), alt, &tpl, err)))) {
            goto out;
        }
    }
    const char *src = override ? override : tpl;
    if (src && !(m->chat_template = rtx_strdup(src))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory");
        goto out;
    }
    if (m->chat_template) { /* a template the interpreter cannot handle fails the load */
        char tname[4200];
        snprintf(tname, sizeof tname, "%s: chat template", override ? "config.json" : what);
        rc = rtx_chat_template_new(m->chat_template, strlen(m->chat_template), tname, &m->tpl,
                                   err);
    }
out:
    json_decref(other);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * generation_config.json
 * ---------------------------------------------------------------------------------------- */

/* A number field in [lo, hi] (lo excluded when open_lo); *has false when absent or null. */
static int gen_num(json_t *root, const char *key, double lo, bool open_lo, double hi,
                   const char *what, bool *has, double *out, struct rtx_err *err) {
    json_t *v = json_object_get(root, key);
    *has = v && !json_is_null(v);
    if (!*has) return 0;
    if (!json_is_number(v))
        return rtx_err_set(err, RTX_EFORMAT, "%s: %s must be a number", what, key);
    double x = json_number_value(v);
    if (!(x >= lo) || (open_lo && x == lo) || x > hi)
        return rtx_err_set(err, RTX_EFORMAT, "%s: %s is %g, expected a number in %c%g, %g]", what,
                           key, x, open_lo ? '(' : '[', lo, hi);
    *out = x;
    return 0;
}

static int load_generation_config(struct rtx_gen_model *m, struct rtx_err *err) {
    char path[4096];
    const char *what = path_of(path, sizeof path, m->dir, "generation_config.json");
    json_t *root;
    int rc = read_json(path, &root, err);
    if (rc || !root) return rc;
    struct rtx_gen_arch tmp = m->arch;
    int32_t bos = -1;
    json_t *eos = json_object_get(root, "eos_token_id"),
           *b = json_object_get(root, "bos_token_id");
    size_t n = json_is_array(eos) ? json_array_size(eos) : eos && !json_is_null(eos);
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *x = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= m->arch.vocab)
            rc = rtx_err_set(err, RTX_EFORMAT,
                             "%s: eos_token_id must be a token id or a list of them (< %d)", what,
                             m->arch.vocab);
        else
            rc = add_eos(&tmp, (int32_t)json_integer_value(x), what, err);
    }
    if (!rc && b && !json_is_null(b)) {
        if (!json_is_integer(b) || json_integer_value(b) < 0 ||
            json_integer_value(b) >= m->arch.vocab)
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: bos_token_id must be a token id", what);
        else
            bos = (int32_t)json_integer_value(b);
    }
    struct gen_defaults *d = &m->defaults;
    double top_k = 0;
    bool has_top_k = false;
    if (rc ||
        (rc = gen_num(root, "temperature", 0, false, 100, what, &d->has_temperature,
                      &d->temperature, err)) ||
        (rc = gen_num(root, "top_p", 0, true, 1, what, &d->has_top_p, &d->top_p, err)) ||
        (rc = gen_num(root, "min_p", 0, false, 1, what, &d->has_min_p, &d->min_p, err)) ||
        (rc = gen_num(root, "repetition_penalty", 0, true, 10, what, &d->has_repetition,
                      &d->repetition_penalty, err)) ||
        (rc = gen_num(root, "top_k", 0, false, m->arch.vocab, what, &has_top_k, &top_k, err)))
        goto out;
    if (has_top_k && top_k != (int)top_k) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: top_k must be an integer", what);
        goto out;
    }
    d->has_top_k = has_top_k, d->top_k = (int)top_k;
    json_t *sample = json_object_get(root, "do_sample");
    if (sample && !json_is_boolean(sample) && !json_is_null(sample)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: do_sample must be true or false", what);
        goto out;
    }
    if (json_is_false(sample)) /* greedy: the file's sampling values do not apply */
        d->has_temperature = true, d->temperature = 0;
    m->arch.n_eos = tmp.n_eos;
    memcpy(m->arch.eos_ids, tmp.eos_ids, sizeof tmp.eos_ids);
    if (m->arch.bos_id < 0) m->arch.bos_id = bos;
out:
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

int rtx_gen_model_load(const char *dir, const char *chat_template, struct rtx_gen_model **out,
                       struct rtx_err *err) {
    *out = NULL;
    struct rtx_gen_model *m = rtx_calloc(1, sizeof *m);
    if (!m || !(m->dir = rtx_strdup(dir))) {
        rtx_free(m);
        return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", dir);
    }
    atomic_init(&m->refs, 1);
    char path[4096], *text = NULL;
    size_t len = 0;
    int rc;
    if ((rc = read_text(path_of(path, sizeof path, dir, "config.json"), &text, &len, err)) ||
        (rc = rtx__gen_arch_parse(text, len, path, &m->arch, err)))
        goto fail;
    if ((rc = rtx_tokenizer_load(path_of(path, sizeof path, dir, "tokenizer.json"), &m->tok, err)))
        goto fail;
    size_t n_tok = rtx_tokenizer_vocab_size(m->tok);
    if (n_tok > (size_t)m->arch.vocab) {
        rc = rtx_err_set(err, RTX_EFORMAT,
                         "%s: %zu token ids, more than config.json's vocabulary of %d", path,
                         n_tok, m->arch.vocab);
        goto fail;
    }
    for (int i = 0; i < m->arch.n_eos; i++)
        if (m->arch.eos_ids[i] >= m->arch.vocab) {
            rc = rtx_err_set(err, RTX_EFORMAT,
                             "%s/config.json: eos_token_id %d is not below "
                             "vocab_size %d",
                             dir, m->arch.eos_ids[i], m->arch.vocab);
            goto fail;
        }
    if (m->arch.bos_id >= m->arch.vocab) m->arch.bos_id = -1;
    /* in the files' own dtype (the embedding's), whatever torch_dtype says: views, no copies */
    if ((rc = rtx__gen_weights_load(dir, &m->arch, RTX_DTYPE_COUNT, &m->weights, err))) goto fail;
    m->arch.dtype = m->weights.t[0]->dtype;
    if ((rc = load_tokenizer_config(m, chat_template, err)) ||
        (rc = load_generation_config(m, err)))
        goto fail;
    rtx_free(text);
    *out = m;
    return 0;
fail:
    rtx_free(text);
    rtx_gen_model_unref(m);
    return rc;
}

struct rtx_gen_model *rtx_gen_model_ref(struct rtx_gen_model *m) {
    atomic_fetch_add(&m->refs, 1);
    return m;
}

void rtx_gen_model_unref(struct rtx_gen_model *m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    rtx__gen_weights_clear(&m->weights);
    rtx_tokenizer_free(m->tok);
    rtx_chat_template_free(m->tpl);
    rtx_free(m->chat_template);
    rtx_free(m->dir);
    rtx_free(m);
}

/* ------------------------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------------------------- */

const struct rtx_tokenizer *rtx_gen_model_tokenizer(const struct rtx_gen_model *m) {
    return m->tok;
}

const char *rtx_gen_model_arch_name(const struct rtx_gen_model *m) {
    switch (m->arch.kind) {
    case RTX_GEN_ARCH_GPT2: return "gpt2";
    case RTX_GEN_ARCH_LLAMA: return "llama";
    case RTX_GEN_ARCH_QWEN2: return "qwen2";
    }
    return "?";
}

int rtx_gen_model_context_length(const struct rtx_gen_model *m) {
    return m->arch.max_positions;
}

enum rtx_dtype rtx__gen_model_compute_dtype(const struct rtx_gen_model *m, bool on_gpu) {
    if (!on_gpu) return RTX_F32;
    return m->arch.dtype == RTX_F16 ? RTX_F16 : RTX_BF16;
}

int64_t rtx_gen_model_weight_bytes(const struct rtx_gen_model *m, bool on_gpu) {
    int64_t n = 0;
    for (int i = 0; i < m->weights.n; i++)
        n += rtx_tensor_numel(m->weights.t[i]);
    return n * (int64_t)rtx_dtype_size(rtx__gen_model_compute_dtype(m, on_gpu));
}

bool rtx_gen_model_has_chat_template(const struct rtx_gen_model *m) {
    return m->chat_template != NULL;
}

const struct rtx_gen_arch *rtx__gen_model_arch(const struct rtx_gen_model *m) {
    return &m->arch;
}

const char *rtx__gen_model_dir(const struct rtx_gen_model *m) {
    return m->dir;
}

int rtx__gen_model_weights(const struct rtx_gen_model *m, enum rtx_dtype dtype,
                           struct rtx_gen_weights *w, struct rtx_err *err) {
    if (!rtx_dtype_is_float(dtype)) {
        memset(w, 0, sizeof *w);
        return rtx_err_set(err, RTX_EINVAL, "weights: %s is not a float dtype",
                           rtx_dtype_name(dtype));
    }
    return rtx__gen_weights_convert(&m->weights, dtype, w, err);
}

/* The content of a special token for the template (NULL when the model has none). */
static const char *token_text(const struct rtx_gen_model *m, int32_t id) {
    return id >= 0 ? rtx_tokenizer_id_token(m->tok, id) : NULL;
}

int rtx_gen_model_render_chat(const struct rtx_gen_model *m,
                              const struct rtx_gen_chat_message *msgs, int n_msgs,
                              bool add_generation_prompt, char **text, struct rtx_err *err) {
    *text = NULL;
    if (!m->tpl)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "the model has no chat template (tokenizer_config.json has none and "
                           "config.json's generation.chat_template is not set)");
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) return rtx_err_set(err, RTX_EINVAL, "bad messages");
    struct rtx_chat_message *cm = rtx_malloc((size_t)(n_msgs ? n_msgs : 1) * sizeof *cm);
    if (!cm) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (int i = 0; i < n_msgs; i++) {
        cm[i].role = msgs[i].role ? msgs[i].role : "";
        cm[i].content = msgs[i].content ? msgs[i].content : "";
    }
    size_t len;
    int rc = rtx_chat_template_render(m->tpl, cm, n_msgs, add_generation_prompt,
                                      token_text(m, m->arch.bos_id),
                                      token_text(m, m->eos_text_id), text, &len, err);
    rtx_free(cm);
    return rc;
}

int rtx_gen_model_encode_prompt(const struct rtx_gen_model *m, const char *text, size_t len,
                                int32_t **ids, int *n_ids, struct rtx_err *err) {
    *ids = NULL, *n_ids = 0;
    int32_t *tok;
    size_t n;
    int rc = rtx_tokenizer_encode(m->tok, text, len, true, &tok, &n, err);
    if (rc) return rc;
    bool bos = m->add_bos && m->arch.bos_id >= 0 && !(n > 0 && tok[0] == m->arch.bos_id);
    if (n + bos > INT32_MAX) {
        rtx_free(tok);
        return rtx_err_set(err, RTX_ELIMIT, "prompt of %zu tokens is too long", n);
    }
    int32_t *out = rtx_malloc((n + bos ? n + bos : 1) * sizeof *out);
    if (!out) {
        rtx_free(tok);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory encoding a prompt");
    }
    if (bos) out[0] = m->arch.bos_id;
    if (n) memcpy(out + bos, tok, n * sizeof *tok);
    rtx_free(tok);
    *ids = out, *n_ids = (int)(n + bos);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Parameters
 * ---------------------------------------------------------------------------------------- */

void rtx_gen_params_init(struct rtx_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->max_tokens = 16;
    p->temperature = 1.0;
    p->top_p = 1.0;
    p->repetition_penalty = 1.0;
    p->n = 1;
    p->logprobs = -1;
    p->skip_special = true;
}

void rtx_gen_model_default_params(const struct rtx_gen_model *m, struct rtx_gen_params *p) {
    rtx_gen_params_init(p);
    const struct gen_defaults *d = &m->defaults;
    if (d->has_temperature) p->temperature = d->temperature;
    if (d->has_top_p) p->top_p = d->top_p;
    if (d->has_top_k) p->top_k = d->top_k;
    if (d->has_min_p) p->min_p = d->min_p;
    if (d->has_repetition) p->repetition_penalty = d->repetition_penalty;
}
