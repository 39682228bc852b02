/*
 * tokenizer-steps.c - reading the normalizer, decoder and post-processor of a tokenizer.json
 * (formats/tokenizer-load.c reads the rest): each Sequence flattened into the tokenizer's step
 * arrays, each type and option that rtxd does not implement refused by its JSON path.
 */
#include <stdio.h>

#include "formats/tokenizer-impl.h"

bool rtx__tok_one_char(json_t *s, char out[5], size_t *len) {
    const char *p = json_string_value(s);
    size_t n = json_string_length(s), l;
    if (!p || !n || n > 4 || rtx__tok_utf8_next((const uint8_t *)p, n, &l) < 0 || l != n)
        return false;
    memcpy(out, p, n);
    out[n] = 0;
    *len = n;
    return true;
}

/* A Replace's {"pattern": {"String": P}, "content": C} into *pat / *content. */
static int load_replace(json_t *o, const char *path, const char *what, const char **pat,
                        size_t *pat_len, const char **content, size_t *content_len,
                        struct rtx_err *err) {
    json_t *pt = json_object_get(o, "pattern"), *s = json_object_get(pt, "String"),
           *c = json_object_get(o, "content");
    if (json_object_get(pt, "Regex"))
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: %s.pattern.Regex is not supported (only String)", what, path);
    if (!json_is_string(s) || !json_string_length(s) || !json_is_string(c))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: %s: expected a non-empty pattern.String and a content string",
                           what, path);
    *pat = json_string_value(s), *pat_len = json_string_length(s);
    *content = json_string_value(c), *content_len = json_string_length(c);
    return 0;
}

/* One step object at `path` of kind `kind` ("normalizer", "decoder"): its type, or NULL with
 * the error set. */
static const char *step_type(json_t *o, const char *path, const char *what, struct rtx_err *err) {
    const char *t = json_string_value(json_object_get(o, "type"));
    if (!json_is_object(o))
        rtx_err_set(err, RTX_EFORMAT, "%s: %s: expected an object", what, path);
    else if (!t)
        rtx_err_set(err, RTX_EFORMAT, "%s: %s.type missing", what, path);
    return json_is_object(o) ? t : NULL;
}

static int too_many(const char *path, const char *what, struct rtx_err *err) {
    return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s: more than %d steps", what, path, MAX_STEPS);
}

/* ------------------------------------------------------------------------------------------
 * Normalizer: NFC, Prepend, Replace (String), Sequence of those
 * ---------------------------------------------------------------------------------------- */

static int load_norm(struct rtx_tokenizer *tok, json_t *o, const char *path, const char *what,
                     struct rtx_err *err) {
    const char *type = step_type(o, path, what, err);
    if (!type) return RTX_EFORMAT;
    char sub[200];
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(o, "normalizers");
        if (!json_is_array(list))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.normalizers missing", what, path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i);
            int rc = load_norm(tok, json_array_get(list, i), sub, what, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (tok->n_norms == MAX_STEPS) return too_many(path, what, err);
    struct norm_step *st = &tok->norms[tok->n_norms];
    if (!strcmp(type, "NFC")) {
        st->type = NORM_NFC;
    } else if (!strcmp(type, "Prepend")) {
        json_t *p = json_object_get(o, "prepend");
        if (!json_is_string(p))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.prepend: expected a string", what, path);
        st->type = NORM_PREPEND;
        st->content = json_string_value(p), st->content_len = json_string_length(p);
    } else if (!strcmp(type, "Replace")) {
        st->type = NORM_REPLACE;
        int rc = load_replace(o, path, what, &st->pat, &st->pat_len, &st->content,
                              &st->content_len, err);
        if (rc) return rc;
    } else {
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: %s.type '%.32s' is not supported (only NFC, Prepend, Replace, "
                           "Sequence)",
                           what, path, type);
    }
    tok->n_norms++;
    return 0;
}

int rtx__tok_load_normalizer(struct rtx_tokenizer *tok, json_t *root, const char *what,
                             struct rtx_err *err) {
    json_t *norm = json_object_get(root, "normalizer");
    return norm && !json_is_null(norm) ? load_norm(tok, norm, "normalizer", what, err) : 0;
}

/* ------------------------------------------------------------------------------------------
 * Decoder: ByteLevel, Replace (String), ByteFallback, Fuse, Strip, Metaspace, Sequence
 * ---------------------------------------------------------------------------------------- */

int rtx__tok_load_scheme(json_t *o, const char *path, const char *what, enum prepend_scheme *out,
                         struct rtx_err *err) {
    json_t *ps = json_object_get(o, "prepend_scheme"),
           *aps = json_object_get(o, "add_prefix_space");
    const char *s = json_string_value(ps);
    *out = PREPEND_ALWAYS;
    if (s && !strcmp(s, "always"))
        *out = PREPEND_ALWAYS;
    else if (s && !strcmp(s, "first"))
        *out = PREPEND_FIRST;
    else if (s && !strcmp(s, "never"))
        *out = PREPEND_NEVER;
    else if (ps)
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: %s.prepend_scheme: expected \"always\", \"first\" or \"never\"",
                           what, path);
    else if (aps && !json_is_true(aps))
        *out = PREPEND_NEVER;
    return 0;
}

static int load_dec(struct rtx_tokenizer *tok, json_t *o, const char *path, bool *fused,
                    const char *what, struct rtx_err *err) {
    const char *type = step_type(o, path, what, err);
    if (!type) return RTX_EFORMAT;
    char sub[200];
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(o, "decoders");
        if (!json_is_array(list))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.decoders missing", what, path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", path, i);
            int rc = load_dec(tok, json_array_get(list, i), sub, fused, what, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (tok->n_decs == MAX_STEPS) return too_many(path, what, err);
    struct dec_step *d = &tok->decs[tok->n_decs];
    d->fused_in = *fused;
    bool needs_tokens = false;
    if (!strcmp(type, "ByteLevel")) {
        d->type = DEC_BYTE_LEVEL, needs_tokens = true, *fused = true;
    } else if (!strcmp(type, "ByteFallback")) {
        d->type = DEC_BYTE_FALLBACK, needs_tokens = true;
    } else if (!strcmp(type, "Fuse")) {
        d->type = DEC_FUSE, *fused = true;
    } else if (!strcmp(type, "Replace")) {
        d->type = DEC_REPLACE, needs_tokens = true;
        int rc =
            load_replace(o, path, what, &d->pat, &d->pat_len, &d->content, &d->content_len, err);
        if (rc) return rc;
    } else if (!strcmp(type, "Strip")) {
        json_t *c = json_object_get(o, "content"), *a = json_object_get(o, "start"),
               *z = json_object_get(o, "stop");
        if (!rtx__tok_one_char(c, d->ch, &d->ch_len) || !json_is_integer(a) ||
            !json_is_integer(z) || json_integer_value(a) < 0 || json_integer_value(z) < 0)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: %s: expected a one-character content and counts start, stop",
                               what, path);
        d->type = DEC_STRIP;
        d->start = (size_t)json_integer_value(a), d->stop = (size_t)json_integer_value(z);
    } else if (!strcmp(type, "Metaspace")) {
        enum prepend_scheme scheme;
        if (!rtx__tok_one_char(json_object_get(o, "replacement"), d->ch, &d->ch_len))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.replacement: expected one character",
                               what, path);
        int rc = rtx__tok_load_scheme(o, path, what, &scheme, err);
        if (rc) return rc;
        d->type = DEC_METASPACE, d->drop_first = scheme != PREPEND_NEVER;
    } else {
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s.type '%.32s' is not supported", what,
                           path, type);
    }
    if (needs_tokens && d->fused_in)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: %s: %s after Fuse or ByteLevel is not supported", what, path,
                           type);
    tok->n_decs++;
    return 0;
}

int rtx__tok_load_decoder(struct rtx_tokenizer *tok, json_t *root, const char *what,
                          struct rtx_err *err) {
    json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec))
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: decoder: null is not supported", what);
    bool fused = false;
    return load_dec(tok, dec, "decoder", &fused, what, err);
}

/* ------------------------------------------------------------------------------------------
 * Post-processor: the ids TemplateProcessing puts around a single sequence
 * ---------------------------------------------------------------------------------------- */

static int load_template(struct rtx_tokenizer *tok, json_t *o, const char *path, const char *what,
                         struct rtx_err *err) {
    json_t *single = json_object_get(o, "single"),
           *specials = json_object_get(o, "special_tokens");
    if (!json_is_array(single) || (specials && !json_is_object(specials)))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: %s: expected a single array and a special_tokens object", what,
                           path);
    int n_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *piece = json_array_get(single, i), *sp = json_object_get(piece, "SpecialToken"),
               *seq = json_object_get(piece, "Sequence");
        const char *id = json_string_value(json_object_get(sp ? sp : seq, "id"));
        if (!id)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: %s.single[%zu]: expected a SpecialToken or a Sequence", what,
                               path, i);
        if (seq) {
            if (strcmp(id, "A") || n_seq++)
                return rtx_err_set(err, RTX_EUNSUPPORTED,
                                   "%s: %s.single[%zu]: only one Sequence A is supported", what,
                                   path, i);
            continue;
        }
        json_t *ids = json_object_get(json_object_get(specials, id), "ids");
        if (!json_is_array(ids))
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: %s.single[%zu]: special token '%.64s' has no ids", what, path,
                               i, id);
        for (size_t j = 0; j < json_array_size(ids); j++) {
            json_t *v = json_array_get(ids, j);
            int *n = n_seq ? &tok->n_suffix : &tok->n_prefix;
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                (size_t)json_integer_value(v) >= tok->n_ids)
                return rtx_err_set(err, RTX_EFORMAT,
                                   "%s: %s.special_tokens['%.64s'].ids[%zu]: not a token id", what,
                                   path, id, j);
            if (*n == MAX_SPECIAL)
                return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s: more than %d special ids", what,
                                   path, MAX_SPECIAL);
            (n_seq ? tok->suffix : tok->prefix)[(*n)++] = (int32_t)json_integer_value(v);
        }
    }
    if (!n_seq) return rtx_err_set(err, RTX_EFORMAT, "%s: %s.single: no Sequence A", what, path);
    return 0;
}

static int load_post_step(struct rtx_tokenizer *tok, json_t *o, const char *path, int *n_tpl,
                          const char *what, struct rtx_err *err) {
    const char *type = step_type(o, path, what, err);
    if (!type) return RTX_EFORMAT;
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) {
        if ((*n_tpl)++)
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "%s: %s: more than one TemplateProcessing is not supported", what,
                               path);
        return load_template(tok, o, path, what, err);
    }
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(o, "processors");
        if (!json_is_array(list))
            return rtx_err_set(err, RTX_EFORMAT, "%s: %s.processors missing", what, path);
        char sub[200];
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.processors[%zu]", path, i);
            int rc = load_post_step(tok, json_array_get(list, i), sub, n_tpl, what, err);
            if (rc) return rc;
        }
        return 0;
    }
    return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s.type '%.32s' is not supported", what, path,
                       type);
}

int rtx__tok_load_post(struct rtx_tokenizer *tok, json_t *root, const char *what,
                       struct rtx_err *err) {
    json_t *post = json_object_get(root, "post_processor");
    int n_tpl = 0;
    return post && !json_is_null(post)
               ? load_post_step(tok, post, "post_processor", &n_tpl, what, err)
               : 0;
}
