/*
 * tokenizer-load.c - reading a Hugging Face tokenizer.json (formats/tokenizer.c has the design):
 * the model's vocabulary and merges, the pre-tokenizer steps (their patterns compiled with
 * PCRE2), the added tokens, and the checks that refuse what is not implemented, naming the
 * JSON path (the normalizer, decoder and post-processor are read in tokenizer-steps.c); the
 * lookups of tokens and ids.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "formats/tokenizer-impl.h"

/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

static int load_merges(struct rtx_tokenizer *tok, json_t *merges, const char *what,
                       struct rtx_err *err) {
    size_t n = json_array_size(merges), size = 16;
    while (size < 2 * n)
        size *= 2;
    tok->merges = rtx_malloc(size * sizeof *tok->merges);
    if (!tok->merges) return RTX_ENOMEM;
    tok->merges_mask = size - 1;
    for (size_t i = 0; i < size; i++)
        tok->merges[i].key = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return rtx_err_set(err, RTX_EFORMAT,
                                   "%s: model.merges[%zu]: expected \"LEFT RIGHT\"", what, i);
            la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)),
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)),
            lb = json_string_length(json_array_get(m, 1));
        } else {
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: model.merges[%zu]: expected a string or a pair of strings",
                               what, i);
        }
        int32_t ia = vocab_id(tok, a, la), ib = vocab_id(tok, b, lb);
        if (ia < 0 || ib < 0)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: model.merges[%zu]: token '%.*s' is not in the vocab", what, i,
                               (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
        char joined[512];
        if (la + lb > sizeof joined)
            return rtx_err_set(err, RTX_EFORMAT, "%s: model.merges[%zu]: tokens too long", what,
                               i);
        memcpy(joined, a, la);
        memcpy(joined + la, b, lb);
        int32_t id = vocab_id(tok, joined, la + lb);
        if (id < 0)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: model.merges[%zu]: merged token '%.*s' is not in the vocab",
                               what, i, (int)(la + lb), joined);
        uint64_t key = (uint64_t)ia << 32 | (uint32_t)ib;
        struct merge *slot = &tok->merges[merge_slot(tok, key)];
        if (slot->key == UINT64_MAX) /* a repeated pair keeps its first (lowest) rank */
            *slot = (struct merge){key, (int32_t)i, id};
    }
    return 0;
}

static int load_vocab(struct rtx_tokenizer *tok, json_t *model, const char *what,
                      struct rtx_err *err) {
    tok->vocab = json_object_get(model, "vocab");
    if (!json_is_object(tok->vocab))
        return rtx_err_set(err, RTX_EFORMAT, "%s: model.vocab missing or not an object", what);
    const char *key;
    json_t *v;
    json_object_foreach(tok->vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_ID)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: model.vocab['%.64s']: expected an id in [0, %d)", what, key,
                               MAX_ID);
        if ((size_t)json_integer_value(v) + 1 > tok->n_ids)
            tok->n_ids = (size_t)json_integer_value(v) + 1;
    }
    return 0;
}

/* Checks the model object (BPE, options rtxd implements). */
static int check_model(struct rtx_tokenizer *tok, json_t *model, const char *what,
                       struct rtx_err *err) {
    if (!json_is_object(model))
        return rtx_err_set(err, RTX_EFORMAT, "%s: model missing or not an object", what);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) return rtx_err_set(err, RTX_EFORMAT, "%s: model.type missing", what);
    if (strcmp(type, "BPE"))
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: model.type '%.32s' is not supported", what,
                           type);
    json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && json_number_value(d) != 0)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: model.dropout is not supported", what);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(model, affixes[i]));
        if (s && *s)
            return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: model.%s is not supported", what,
                               affixes[i]);
    }
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    tok->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    tok->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    return 0;
}

static int compile_re(struct pre_step *st, const char *pat, size_t len, uint32_t opts,
                      const char *what, const char *path, struct rtx_err *err) {
    int code;
    PCRE2_SIZE off;
    st->re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | opts, &code, &off, NULL);
    if (!st->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(code, msg, sizeof msg);
        return rtx_err_set(err, RTX_EFORMAT, "%s: %s: at offset %zu: %s", what, path, (size_t)off,
                           (const char *)msg);
    }
    pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter otherwise */
    return 0;
}

/* One pre-tokenizer object at JSON path `path` (Sequence is flattened into tok->steps). */
static int load_pre(struct rtx_tokenizer *tok, json_t *pre, const char *path, const char *what,
                    struct rtx_err *err) {
    if (!json_is_object(pre))
        return rtx_err_set(err, RTX_EFORMAT, "%s: %s: expected an object", what, path);
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type) return rtx_err_set(err, RTX_EFORMAT, "%s: %s.type missing", what, path);
    char sub[200];
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pre, "pretokenizers");
        if (!json_is_array(list))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.pretokenizers missing", what, path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
            int rc = load_pre(tok, json_array_get(list, i), sub, what, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (tok->n_steps == MAX_STEPS)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s: more than %d pre-tokenizers", what,
                           path, MAX_STEPS);
    if (tok->byte_level) /* its mapping to characters happens in the BPE step */
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: %s: a pre-tokenizer after ByteLevel is not supported", what, path);
    struct pre_step *st = &tok->steps[tok->n_steps];
    if (!strcmp(type, "Metaspace")) {
        st->type = PRE_METASPACE;
        json_t *split = json_object_get(pre, "split");
        st->split = !split || json_is_true(split);
        if (!rtx__tok_one_char(json_object_get(pre, "replacement"), st->rep, &st->rep_len))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.replacement: expected one character",
                               what, path);
        int rc = rtx__tok_load_scheme(pre, path, what, &st->scheme, err);
        if (!rc) tok->n_steps++;
        return rc;
    }
    if (!strcmp(type, "ByteLevel")) {
        st->type = PRE_BYTE_LEVEL;
        tok->byte_level = true; /* BPE over byte-level characters, not the text's own */
        json_t *aps = json_object_get(pre, "add_prefix_space"),
               *ur = json_object_get(pre, "use_regex");
        st->add_prefix_space = aps ? json_is_true(aps) : true;
        tok->n_steps++;
        if (ur && !json_is_true(ur)) return 0;
        snprintf(sub, sizeof sub, "%s (GPT-2's pattern)", path);
        return compile_re(st, gpt2_pattern, sizeof gpt2_pattern - 1, 0, what, sub, err);
    }
    if (!strcmp(type, "Split")) {
        const char *beh = json_string_value(json_object_get(pre, "behavior"));
        if (!beh || strcmp(beh, "Isolated"))
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "%s: %s.behavior '%.32s' is not supported (only Isolated)", what,
                               path, beh ? beh : "(missing)");
        if (json_is_true(json_object_get(pre, "invert")))
            return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s.invert true is not supported", what,
                               path);
        json_t *pat = json_object_get(pre, "pattern"), *re = json_object_get(pat, "Regex"),
               *lit = json_object_get(pat, "String");
        json_t *p = json_is_string(re) ? re : lit;
        if (!json_is_string(p))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: %s.pattern: expected {\"Regex\": ...} or {\"String\": ...}",
                               what, path);
        snprintf(sub, sizeof sub, "%s.pattern.%s", path, p == re ? "Regex" : "String");
        st->type = PRE_SPLIT;
        tok->n_steps++;
        return compile_re(st, json_string_value(p), json_string_length(p),
                          p == re ? 0 : PCRE2_LITERAL, what, sub, err);
    }
    return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s.type '%.32s' is not supported", what, path,
                       type);
}

/* What an added token is searched as: a normalized token's content goes through the normalizer
 * first, as Hugging Face builds its matcher; single_word needs the word-character class (Rust
 * regex's \w). */
static int added_pattern(struct rtx_tokenizer *tok, struct added *ad, size_t i, const char *what,
                         struct rtx_err *err) {
    if (ad->single_word && !tok->word_re) {
        static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
        int code;
        PCRE2_SIZE off;
        tok->word_re = pcre2_compile((PCRE2_SPTR)word, sizeof word - 1, PCRE2_UTF | PCRE2_UCP,
                                     &code, &off, NULL);
        if (!tok->word_re) return RTX_ENOMEM; /* the pattern itself is fixed and valid */
    }
    if (!ad->normalized || !tok->n_norms) return 0;
    struct buf b = {0};
    int rc = rtx__tok_normalize(tok, ad->content, ad->len, &b, err);
    if (rc) {
        rtx_free(b.p);
        return rc == RTX_ENOMEM ? rc : rtx_err_prefix(err, "%s: added_tokens[%zu]", what, i);
    }
    if (!b.len) {
        rtx_free(b.p);
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: added_tokens[%zu]: the normalizer makes its content empty", what,
                           i);
    }
    ad->norm = b.p;
    ad->pat = b.p;
    ad->pat_len = b.len;
    return 0;
}

static int load_added(struct rtx_tokenizer *tok, json_t *list, const char *what,
                      struct rtx_err *err) {
    if (list && !json_is_array(list))
        return rtx_err_set(err, RTX_EFORMAT, "%s: added_tokens: expected an array", what);
    size_t n = json_array_size(list);
    tok->added_map = json_object();
    tok->added = rtx_calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added_map || !tok->added) return RTX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(list, i), *id = json_object_get(a, "id"),
               *c = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= MAX_ID || !json_is_string(c) || !json_string_length(c))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: added_tokens[%zu]: expected an id and a non-empty content",
                               what, i);
        struct added *ad = &tok->added[tok->n_added++];
        ad->id = (int32_t)json_integer_value(id);
        ad->content = ad->pat = json_string_value(c);
        ad->len = ad->pat_len = json_string_length(c);
        ad->special = json_is_true(json_object_get(a, "special"));
        ad->single_word = json_is_true(json_object_get(a, "single_word"));
        ad->lstrip = json_is_true(json_object_get(a, "lstrip"));
        ad->rstrip = json_is_true(json_object_get(a, "rstrip"));
        json_t *norm = json_object_get(a, "normalized");
        ad->normalized = norm ? json_is_true(norm) : !ad->special;
        if ((size_t)ad->id + 1 > tok->n_ids) tok->n_ids = (size_t)ad->id + 1;
        if (json_object_setn_new(tok->added_map, ad->content, ad->len, json_integer(ad->id)))
            return RTX_ENOMEM;
        int rc = added_pattern(tok, ad, i, what, err);
        if (rc) return rc;
    }
    return 0;
}

static int added_cmp(const void *pa, const void *pb) {
    const struct added *a = pa, *b = pb;
    uint8_t ca = (uint8_t)a->pat[0], cb = (uint8_t)b->pat[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    return a->pat_len > b->pat_len ? -1 : a->pat_len < b->pat_len;
}

/* The id tables, once vocab and added tokens are known. An added token whose id the vocabulary
 * gives to another token is refused: Hugging Face would quietly give it another id. */
static int build_ids(struct rtx_tokenizer *tok, const char *what, struct rtx_err *err) {
    tok->id_tok = rtx_calloc(tok->n_ids ? tok->n_ids : 1, sizeof *tok->id_tok);
    tok->id_flags = rtx_calloc(tok->n_ids ? tok->n_ids : 1, 1);
    if (!tok->id_tok || !tok->id_flags) return RTX_ENOMEM;
    const char *key;
    json_t *v;
    json_object_foreach(tok->vocab, key, v) {
        size_t id = (size_t)json_integer_value(v);
        if (!tok->id_tok[id]) tok->id_tok[id] = key;
    }
    for (size_t i = 0; i < tok->n_added; i++) {
        struct added *ad = &tok->added[i];
        const char *v_tok = tok->id_tok[ad->id];
        if (v_tok && !(tok->id_flags[ad->id] & ID_ADDED) && strcmp(v_tok, ad->content))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: added_tokens[%zu]: id %d is the vocabulary's token '%.64s', "
                               "not '%.64s'",
                               what, i, (int)ad->id, v_tok, ad->content);
        tok->id_tok[ad->id] = ad->pat; /* decoded in its normalized form, as Hugging Face */
        tok->id_flags[ad->id] = ID_ADDED | (ad->special ? ID_SPECIAL : 0);
    }
    qsort(tok->added, tok->n_added, sizeof *tok->added, added_cmp);
    size_t j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < tok->n_added && (uint8_t)tok->added[j].pat[0] < b)
            j++;
        tok->added_first[b] = b == 256 ? tok->n_added : j;
    }
    for (int b = 0; b < 256; b++) {
        char c[2];
        tok->byte_id[b] = vocab_id(tok, c, utf8_put(c, rtx__tok_byte_char[b]));
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        tok->fallback_id[b] = vocab_id(tok, hex, 6);
    }
    return 0;
}

/* The parts of the file that only need checking: truncation, padding. */
static int check_rest(json_t *root, const char *what, struct rtx_err *err) {
    static const char *const off[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(root, off[i]);
        if (v && !json_is_null(v))
            return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s is not supported (set it to null)",
                               what, off[i]);
    }
    return 0;
}

int rtx_tokenizer_parse(const char *json, size_t len, const char *what, struct rtx_tokenizer **out,
                        struct rtx_err *err) {
    if (!json || !out) return rtx_err_set(err, RTX_EINVAL, "rtx_tokenizer_parse: NULL argument");
    what = what ? what : "tokenizer.json";
    rtx__tok_byte_table_init();
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return rtx_err_set(err, RTX_EFORMAT, "%s: line %d column %d: %s", what, jerr.line,
                           jerr.column, jerr.text);
    struct rtx_tokenizer *tok = rtx_calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(root);
        return RTX_ENOMEM;
    }
    tok->root = root;
    tok->unk = -1;
    int rc;
    json_t *model = json_object_get(root, "model"), *pre = json_object_get(root, "pre_tokenizer");
    if (!json_is_object(root)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: expected a JSON object", what);
    } else if (!(rc = check_model(tok, model, what, err)) &&
               !(rc = load_vocab(tok, model, what, err)) &&
               !(rc = rtx__tok_load_normalizer(tok, root, what, err)) &&
               !(rc = load_added(tok, json_object_get(root, "added_tokens"), what, err)) &&
               !(rc = build_ids(tok, what, err)) && !(rc = check_rest(root, what, err)) &&
               !(rc = rtx__tok_load_decoder(tok, root, what, err)) &&
               !(rc = rtx__tok_load_post(tok, root, what, err))) {
        json_t *merges = json_object_get(model, "merges");
        if (!json_is_array(merges))
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: model.merges missing or not an array", what);
        else
            rc = load_merges(tok, merges, what, err);
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        if (!rc && unk && (tok->unk = vocab_id(tok, unk, strlen(unk))) < 0)
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: model.unk_token '%.64s' is not in the vocab",
                             what, unk);
        if (!rc && pre && !json_is_null(pre)) rc = load_pre(tok, pre, "pre_tokenizer", what, err);
    }
    if (rc == RTX_ENOMEM) rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", what);
    if (rc) {
        rtx_tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return 0;
}

int rtx_tokenizer_load(const char *path, struct rtx_tokenizer **out, struct rtx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
    struct buf b = {0};
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = buf_put(&b, chunk, n);
    if (!rc && ferror(f)) rc = rtx_err_set(err, RTX_EIO, "%s: read error", path);
    fclose(f);
    if (rc == RTX_ENOMEM) rtx_err_set(err, rc, "%s: out of memory", path);
    if (!rc) {
        const char *base = strrchr(path, '/');
        rc = rtx_tokenizer_parse(b.p ? b.p : "", b.len, base ? base + 1 : path, out, err);
    }
    rtx_free(b.p);
    return rc;
}

void rtx_tokenizer_free(struct rtx_tokenizer *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_steps; i++)
        pcre2_code_free(tok->steps[i].re);
    for (size_t i = 0; i < tok->n_added; i++)
        rtx_free(tok->added[i].norm);
    pcre2_code_free(tok->word_re);
    json_decref(tok->added_map);
    json_decref(tok->root);
    rtx_free(tok->id_tok);
    rtx_free(tok->id_flags);
    rtx_free(tok->merges);
    rtx_free(tok->added);
    rtx_free(tok);
}

/* ------------------------------------------------------------------------------------------
 * Lookups
 * ---------------------------------------------------------------------------------------- */

size_t rtx_tokenizer_vocab_size(const struct rtx_tokenizer *tok) {
    return tok->n_ids;
}

int32_t rtx_tokenizer_token_id(const struct rtx_tokenizer *tok, const char *token) {
    json_t *v = json_object_get(tok->added_map, token);
    if (v) return (int32_t)json_integer_value(v);
    return vocab_id(tok, token, strlen(token));
}

const char *rtx_tokenizer_id_token(const struct rtx_tokenizer *tok, int32_t id) {
    return id >= 0 && (size_t)id < tok->n_ids ? tok->id_tok[id] : NULL;
}

bool rtx_tokenizer_is_special(const struct rtx_tokenizer *tok, int32_t id) {
    return id >= 0 && (size_t)id < tok->n_ids && (tok->id_flags[id] & ID_SPECIAL);
}
