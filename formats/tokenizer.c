/*
 * tokenizer.c - Hugging Face tokenizer.json tokenizers: byte-level BPE (GPT-2, Llama 3, Qwen2).
 *
 * DESIGN
 * Encoding follows the tokenizers crate step by step, because every id must match it:
 * 1. added tokens are cut out of the text first, leftmost-longest (those with normalized false
 *    in a first pass over the whole text, the others in a second pass over what is left);
 * 2. each remaining segment goes through the pre-tokenizer steps in order (Split: the matches
 *    of a PCRE2 pattern and the gaps between them, "Isolated"; ByteLevel: an optional prefix
 *    space, GPT-2's pattern when use_regex), pieces kept as spans of one byte arena per step;
 * 3. each piece is BPE-merged: bytes become the ids of GPT-2's bytes_to_unicode characters,
 *    then the adjacent pair of lowest merge rank is merged (the leftmost of equal ranks) until
 *    no pair has a rank; with ignore_merges a piece found whole in the vocabulary is one token.
 * The vocabulary stays in the parsed JSON (jansson's object is the token -> id hash table);
 * merges are an open-addressing table keyed by the pair of ids. Decoding maps each byte-level
 * token back to bytes (added tokens are their content) and replaces invalid UTF-8 as Rust's
 * from_utf8_lossy does; the stream decoder holds back a valid but incomplete tail.
 * The NFC normalizer (Qwen2) is utf8proc's, applied to each segment between the non-normalized
 * added tokens, before the normalized ones are looked for, as Hugging Face orders it.
 * What is not implemented is refused at load, naming the JSON path (docs/tokenizer.md).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "formats/formats.h"

#define MAX_STEPS 8      /* pre-tokenizer steps after flattening Sequence */
#define MAX_ID (1 << 24) /* largest id accepted */

/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct pre_step {
    pcre2_code *re;        /* NULL: no split (ByteLevel with use_regex false) */
    bool add_prefix_space; /* ByteLevel only */
};

struct added {
    int32_t id;
    const char *content; /* in the JSON */
    size_t len;          /* bytes */
    bool special, normalized;
};

struct merge {
    uint64_t key; /* left id << 32 | right id; UINT64_MAX: empty slot */
    int32_t rank, id;
};

struct rtx_tokenizer {
    json_t *root;        /* the parsed file; vocab keys and added contents point into it */
    json_t *vocab;       /* token -> id */
    json_t *added_map;   /* added content -> id */
    const char **id_tok; /* n_ids: the token of each id, NULL for a hole */
    uint8_t *id_flags;   /* n_ids: ID_ADDED | ID_SPECIAL */
    size_t n_ids;
    int32_t byte_id[256]; /* the id of each byte's byte-level character, -1 if none */
    int32_t unk;          /* -1: none */
    bool ignore_merges;
    bool nfc; /* normalizer NFC (utf8proc) */
    struct merge *merges;
    size_t merges_mask;  /* table size - 1 */
    struct added *added; /* sorted by first byte, then length descending */
    size_t n_added;
    size_t added_first[257]; /* added[added_first[b] .. added_first[b + 1]] start with byte b */
    struct pre_step steps[MAX_STEPS];
    int n_steps;
};

enum { ID_ADDED = 1, ID_SPECIAL = 2 };

struct rtx_tokenizer_stream {
    const struct rtx_tokenizer *tok;
    bool skip_special;
    char pend[8]; /* held-back bytes of an incomplete character (at most 3) */
    size_t n_pend;
    char *out;
    size_t out_len, out_cap;
};

/* ------------------------------------------------------------------------------------------
 * Bytes, UTF-8 and GPT-2's byte-level alphabet
 * ---------------------------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap; /* bytes */
};

static int buf_put(struct buf *b, const void *data, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = rtx_realloc(b->p, cap);
        if (!p) return RTX_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

/* The code point at s (n > 0 bytes) and its length in *len; -1 for an invalid sequence (*len:
 * its maximal invalid subpart, at least 1), -2 for a valid prefix cut short by the end (*len =
 * n). The ranges are Unicode's table of well-formed byte sequences. */
static int32_t utf8_next(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    int32_t cp;
    if (c < 0x80) {
        *len = 1;
        return c;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, cp = c & 0x0F;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, cp = c & 0x07;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        *len = 1;
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) {
            *len = n;
            return -2;
        }
        uint8_t b = s[i];
        if (b < lo || b > hi) {
            *len = (size_t)i;
            return -1;
        }
        lo = 0x80, hi = 0xBF;
        cp = cp << 6 | (b & 0x3F);
    }
    *len = (size_t)need + 1;
    return cp;
}

/* Appends n bytes, each invalid subpart replaced by U+FFFD. With keep_tail an incomplete last
 * character is not appended; the count of bytes consumed goes to *used. */
static int buf_put_lossy(struct buf *b, const char *s, size_t n, bool keep_tail, size_t *used) {
    size_t i = 0;
    while (i < n) {
        size_t l;
        int32_t cp = utf8_next((const uint8_t *)s + i, n - i, &l);
        if (cp == -2 && keep_tail) break;
        int rc = cp < 0 ? buf_put(b, "\xEF\xBF\xBD", 3) : buf_put(b, s + i, l);
        if (rc) return rc;
        i += l;
    }
    if (used) *used = i;
    return 0;
}

static size_t utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6); /* the byte-level alphabet stays below U+0800 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other bytes for
 * U+0100 onwards in byte order. char_byte is the inverse (-1: not a byte-level character). */
static uint16_t byte_char[256];
static int16_t char_byte[324];

static void byte_table_init(void) {
    if (byte_char['!']) return; /* filled (the same values from any thread) */
    int next = 256;
    for (int c = 0; c < 324; c++)
        char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int c = keep ? b : next++;
        byte_char[b] = (uint16_t)c;
        char_byte[c] = (int16_t)b;
    }
}

/* The bytes of one id appended to b (a byte-level token's bytes; an added token's content, or
 * nothing when it is special and skip_special). */
static int token_bytes(const struct rtx_tokenizer *tok, int32_t id, bool skip_special,
                       struct buf *b) {
    const char *t = tok->id_tok[id];
    size_t n = strlen(t);
    if (tok->id_flags[id] & ID_ADDED) {
        if (skip_special && (tok->id_flags[id] & ID_SPECIAL)) return 0;
        return buf_put(b, t, n);
    }
    size_t start = b->len;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = utf8_next((const uint8_t *)t + i, n - i, &l);
        if (cp < 0 || cp >= 324 || char_byte[cp] < 0) {
            b->len = start; /* not byte-level: the token's own text, as Hugging Face does */
            return buf_put(b, t, n);
        }
        uint8_t byte = (uint8_t)char_byte[cp];
        int rc = buf_put(b, &byte, 1);
        if (rc) return rc;
        i += l;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Merges: (left id, right id) -> (rank, merged id)
 * ---------------------------------------------------------------------------------------- */

static size_t merge_slot(const struct rtx_tokenizer *tok, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & tok->merges_mask;
    while (tok->merges[h].key != key && tok->merges[h].key != UINT64_MAX)
        h = (h + 1) & tok->merges_mask;
    return h;
}

static const struct merge *merge_find(const struct rtx_tokenizer *tok, int32_t a, int32_t b) {
    if (!tok->merges) return NULL;
    const struct merge *m = &tok->merges[merge_slot(tok, (uint64_t)a << 32 | (uint32_t)b)];
    return m->key == UINT64_MAX ? NULL : m;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

static int32_t vocab_id(const struct rtx_tokenizer *tok, const char *s, size_t n) {
    json_t *v = json_object_getn(tok->vocab, s, n);
    return v ? (int32_t)json_integer_value(v) : -1;
}

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
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: model.byte_fallback true (SentencePiece-style BPE) is not "
                           "supported",
                           what);
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
    struct pre_step *st = &tok->steps[tok->n_steps];
    if (!strcmp(type, "ByteLevel")) {
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
        tok->n_steps++;
        return compile_re(st, json_string_value(p), json_string_length(p),
                          p == re ? 0 : PCRE2_LITERAL, what, sub, err);
    }
    return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: %s.type '%.32s' is not supported", what, path,
                       type);
}

/* The byte-level steps: exactly one ByteLevel, and it is the last step (its bytes-to-
 * characters mapping happens in the BPE step; a split after it would see mapped text). */
static int check_byte_level(const struct rtx_tokenizer *tok, json_t *pre, const char *what,
                            struct rtx_err *err) {
    int n_bl = 0;
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (type && !strcmp(type, "ByteLevel")) return 0;
    json_t *list = json_object_get(pre, "pretokenizers");
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *t = json_string_value(json_object_get(json_array_get(list, i), "type"));
        if (t && !strcmp(t, "ByteLevel")) {
            n_bl++;
            if (i + 1 != json_array_size(list))
                return rtx_err_set(err, RTX_EUNSUPPORTED,
                                   "%s: pre_tokenizer.pretokenizers[%zu]: ByteLevel must be the "
                                   "last pre-tokenizer",
                                   what, i);
        }
    }
    (void)tok;
    if (n_bl != 1)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: pre_tokenizer: no ByteLevel pre-tokenizer (only byte-level BPE "
                           "is supported)",
                           what);
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
        static const char *const flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (json_is_true(json_object_get(a, flags[f])))
                return rtx_err_set(err, RTX_EUNSUPPORTED,
                                   "%s: added_tokens[%zu].%s true is not supported", what, i,
                                   flags[f]);
        struct added *ad = &tok->added[tok->n_added++];
        ad->id = (int32_t)json_integer_value(id);
        ad->content = json_string_value(c);
        ad->len = json_string_length(c);
        ad->special = json_is_true(json_object_get(a, "special"));
        json_t *norm = json_object_get(a, "normalized");
        ad->normalized = norm ? json_is_true(norm) : !ad->special;
        if ((size_t)ad->id + 1 > tok->n_ids) tok->n_ids = (size_t)ad->id + 1;
        if (json_object_setn_new(tok->added_map, ad->content, ad->len, json_integer(ad->id)))
            return RTX_ENOMEM;
    }
    return 0;
}

static int added_cmp(const void *pa, const void *pb) {
    const struct added *a = pa, *b = pb;
    uint8_t ca = (uint8_t)a->content[0], cb = (uint8_t)b->content[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    return a->len > b->len ? -1 : a->len < b->len;
}

/* The id tables, once vocab and added tokens are known. */
static int build_ids(struct rtx_tokenizer *tok) {
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
        tok->id_tok[ad->id] = ad->content;
        tok->id_flags[ad->id] = ID_ADDED | (ad->special ? ID_SPECIAL : 0);
    }
    qsort(tok->added, tok->n_added, sizeof *tok->added, added_cmp);
    size_t j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < tok->n_added && (uint8_t)tok->added[j].content[0] < b)
            j++;
        tok->added_first[b] = b == 256 ? tok->n_added : j;
    }
    for (int b = 0; b < 256; b++) {
        char c[2];
        tok->byte_id[b] = vocab_id(tok, c, utf8_put(c, byte_char[b]));
    }
    return 0;
}

/* The normalizer (null or NFC) and the parts of the file that only need checking: decoder,
 * post-processor, truncation, padding. */
static int check_rest(struct rtx_tokenizer *tok, json_t *root, const char *what,
                      struct rtx_err *err) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        const char *t = json_string_value(json_object_get(norm, "type"));
        if (!t || strcmp(t, "NFC"))
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "%s: normalizer.type '%.32s' is not supported (only NFC)", what,
                               t ? t : "(missing)");
        tok->nfc = true;
    }
    json_t *dec = json_object_get(root, "decoder");
    const char *dt = json_string_value(json_object_get(dec, "type"));
    if (!dt || strcmp(dt, "ByteLevel"))
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "%s: decoder.type '%.32s' is not supported (only ByteLevel)", what,
                           dt ? dt : "(missing)");
    json_t *post = json_object_get(root, "post_processor");
    if (post && !json_is_null(post)) {
        const char *pt = json_string_value(json_object_get(post, "type"));
        static const char *const ok[] = {"ByteLevel", "TemplateProcessing", "Sequence"};
        bool known = false;
        for (int i = 0; pt && i < 3; i++)
            known |= !strcmp(pt, ok[i]);
        if (!known)
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "%s: post_processor.type '%.32s' is not supported", what,
                               pt ? pt : "(missing)");
    }
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
    byte_table_init();
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
               !(rc = load_added(tok, json_object_get(root, "added_tokens"), what, err)) &&
               !(rc = build_ids(tok)) && !(rc = check_rest(tok, root, what, err))) {
        json_t *merges = json_object_get(model, "merges");
        if (!json_is_array(merges))
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: model.merges missing or not an array", what);
        else
            rc = load_merges(tok, merges, what, err);
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        if (!rc && unk && (tok->unk = vocab_id(tok, unk, strlen(unk))) < 0)
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: model.unk_token '%.64s' is not in the vocab",
                             what, unk);
        if (!rc && pre && !json_is_null(pre) &&
            !(rc = load_pre(tok, pre, "pre_tokenizer", what, err)))
            rc = check_byte_level(tok, pre, what, err);
        if (!rc && (!pre || json_is_null(pre)))
            rc = rtx_err_set(err, RTX_EUNSUPPORTED,
                             "%s: pre_tokenizer: null is not supported (only byte-level BPE)",
                             what);
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

/* ------------------------------------------------------------------------------------------
 * Encoding
 * ---------------------------------------------------------------------------------------- */

struct span {
    size_t off, len; /* bytes */
    int32_t id;      /* an added token's id, or -1 for text */
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static int spans_add(struct spans *s, size_t off, size_t len, int32_t id) {
    if (!len) return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct span *v = rtx_realloc(s->v, cap * sizeof *v);
        if (!v) return RTX_ENOMEM;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = (struct span){off, len, id};
    return 0;
}

struct ids {
    int32_t *v;
    size_t n, cap;
};

static int ids_add(struct ids *s, int32_t id) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        int32_t *v = rtx_realloc(s->v, cap * sizeof *v);
        if (!v) return RTX_ENOMEM;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = id;
    return 0;
}

/* Cuts the added tokens of one pass (normalized == pass_norm; special ones only when
 * parse_special) out of the text spans of in, leftmost-longest, into out. */
static int split_added(const struct rtx_tokenizer *tok, const char *text, const struct spans *in,
                       bool pass_norm, bool parse_special, struct spans *out) {
    int rc = 0;
    for (size_t k = 0; !rc && k < in->n; k++) {
        struct span sp = in->v[k];
        if (sp.id >= 0) {
            rc = spans_add(out, sp.off, sp.len, sp.id);
            continue;
        }
        size_t start = sp.off, end = sp.off + sp.len, i = start;
        while (!rc && i < end) {
            uint8_t c = (uint8_t)text[i];
            const struct added *hit = NULL;
            for (size_t j = tok->added_first[c]; j < tok->added_first[c + 1]; j++) {
                const struct added *a = &tok->added[j];
                if (a->normalized == pass_norm && (parse_special || !a->special) &&
                    a->len <= end - i && !memcmp(text + i, a->content, a->len)) {
                    hit = a; /* sorted longest first */
                    break;
                }
            }
            if (!hit) {
                i++;
                continue;
            }
            rc = spans_add(out, start, i - start, -1);
            if (!rc) rc = spans_add(out, i, hit->len, hit->id);
            i += hit->len;
            start = i;
        }
        if (!rc) rc = spans_add(out, start, end - start, -1);
    }
    return rc;
}

/* One pre-tokenizer step over the pieces of `in` (spans of in_text) into out/out_text. */
static int pre_step_apply(const struct pre_step *st, const struct buf *in_text,
                          const struct spans *in, struct buf *out_text, struct spans *out,
                          struct rtx_err *err) {
    pcre2_match_data *md = st->re ? pcre2_match_data_create_from_pattern(st->re, NULL) : NULL;
    if (st->re && !md) return RTX_ENOMEM;
    int rc = 0;
    for (size_t k = 0; !rc && k < in->n; k++) {
        size_t base = out_text->len;
        const char *p = in_text->p + in->v[k].off;
        if (st->add_prefix_space && p[0] != ' ') rc = buf_put(out_text, " ", 1);
        if (!rc) rc = buf_put(out_text, p, in->v[k].len);
        if (rc) break;
        size_t len = out_text->len - base;
        if (!st->re) {
            rc = spans_add(out, base, len, -1);
            continue;
        }
        const char *s = out_text->p + base;
        size_t pos = 0, gap = 0;
        while (pos <= len) {
            int m = pcre2_match(st->re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (m == PCRE2_ERROR_NOMATCH) break;
            if (m < 0) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(m, msg, sizeof msg);
                rc = rtx_err_set(err, RTX_ELIMIT, "pre-tokenizer pattern: %s", (const char *)msg);
                break;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { /* an empty match: no piece; step one character */
                if (ov[0] >= len) break;
                size_t l;
                utf8_next((const uint8_t *)s + ov[0], len - ov[0], &l);
                pos = ov[0] + l;
                continue;
            }
            if ((rc = spans_add(out, base + gap, ov[0] - gap, -1)) ||
                (rc = spans_add(out, base + ov[0], ov[1] - ov[0], -1)))
                break;
            gap = pos = ov[1];
        }
        if (!rc) rc = spans_add(out, base + gap, len - gap, -1);
    }
    pcre2_match_data_free(md);
    return rc;
}

/* Scratch for BPE over one pre-token of up to n bytes: the symbols as a doubly linked list
 * over their first byte's position, and a min-heap of candidate merges ordered by (rank,
 * position); an entry is stale when its pair has changed since it was pushed. */
struct cand {
    int32_t rank, pos, left, right, id;
};

struct bpe_work {
    int32_t *sym, *prev, *next; /* n each; sym -1: merged away */
    struct cand *heap;          /* 3n: n - 1 pairs, then at most two per merge */
    size_t n_heap;
};

static bool cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct bpe_work *w, struct cand c) {
    size_t i = w->n_heap++;
    while (i > 0 && cand_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
}

static struct cand heap_pop(struct bpe_work *w) {
    struct cand top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->n_heap) break;
        if (c + 1 < w->n_heap && cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->n_heap) w->heap[i] = last;
    return top;
}

/* Pushes the merge of the symbols at a and b (b = next[a]) if there is one. */
static void push_pair(const struct rtx_tokenizer *tok, struct bpe_work *w, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return;
    const struct merge *m = merge_find(tok, w->sym[a], w->sym[b]);
    if (m) heap_push(w, (struct cand){m->rank, a, w->sym[a], w->sym[b], m->id});
}

/* BPE over one pre-token (bytes s, n) into ids: the pair of lowest rank merges first, the
 * leftmost of equal ranks, as Hugging Face's BPE does; O(n log n). */
static int bpe_piece(const struct rtx_tokenizer *tok, const char *s, size_t n, struct bpe_work *w,
                     struct buf *mapped, struct ids *ids) {
    if (tok->ignore_merges) {
        mapped->len = 0;
        for (size_t i = 0; i < n; i++) {
            char c[2];
            int rc = buf_put(mapped, c, utf8_put(c, byte_char[(uint8_t)s[i]]));
            if (rc) return rc;
        }
        int32_t id = vocab_id(tok, mapped->p, mapped->len);
        if (id >= 0) return ids_add(ids, id);
    }
    int32_t m = 0, last = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[(uint8_t)s[i]];
        if (id < 0) id = tok->unk; /* a byte missing from the vocabulary: unk, or dropped */
        if (id < 0) continue;
        w->sym[m] = id, w->prev[m] = last, w->next[m] = -1;
        if (last >= 0) w->next[last] = m;
        last = m++;
    }
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(tok, w, i, i + 1);
    while (w->n_heap) {
        struct cand c = heap_pop(w);
        int32_t b = w->next[c.pos];
        if (w->sym[c.pos] != c.left || b < 0 || w->sym[b] != c.right) continue; /* stale */
        w->sym[c.pos] = c.id;
        w->sym[b] = -1;
        w->next[c.pos] = w->next[b];
        if (w->next[b] >= 0) w->prev[w->next[b]] = c.pos;
        push_pair(tok, w, w->prev[c.pos], c.pos);
        push_pair(tok, w, c.pos, w->next[c.pos]);
    }
    for (int32_t i = 0; i < m; i++) {
        int rc = w->sym[i] >= 0 ? ids_add(ids, w->sym[i]) : 0;
        if (rc) return rc;
    }
    return 0;
}

/* Pre-tokenizes and merges the text span [off, off + len). */
static int encode_text(const struct rtx_tokenizer *tok, const char *text, size_t off, size_t len,
                       struct ids *ids, struct rtx_err *err) {
    struct buf t[2] = {{0}, {0}}, mapped = {0};
    struct spans sp[2] = {{0}, {0}};
    struct bpe_work w = {0};
    int rc = buf_put(&t[0], text + off, len);
    if (!rc) rc = spans_add(&sp[0], 0, len, -1);
    int cur = 0;
    for (int s = 0; !rc && s < tok->n_steps; s++) {
        t[!cur].len = 0, sp[!cur].n = 0;
        rc = pre_step_apply(&tok->steps[s], &t[cur], &sp[cur], &t[!cur], &sp[!cur], err);
        cur = !cur;
    }
    size_t longest = 0;
    for (size_t k = 0; k < sp[cur].n; k++)
        longest = sp[cur].v[k].len > longest ? sp[cur].v[k].len : longest;
    longest = longest ? longest : 1;
    if (!rc && (!(w.sym = rtx_malloc(3 * longest * sizeof *w.sym)) ||
                !(w.heap = rtx_malloc(3 * longest * sizeof *w.heap))))
        rc = RTX_ENOMEM;
    w.prev = w.sym + longest, w.next = w.sym + 2 * longest;
    for (size_t k = 0; !rc && k < sp[cur].n; k++)
        rc = bpe_piece(tok, t[cur].p + sp[cur].v[k].off, sp[cur].v[k].len, &w, &mapped, ids);
    rtx_free(w.sym);
    rtx_free(w.heap);
    rtx_free(mapped.p);
    for (int i = 0; i < 2; i++) {
        rtx_free(t[i].p);
        rtx_free(sp[i].v);
    }
    return rc;
}

/* One segment between the non-normalized added tokens, already normalized: its normalized
 * added tokens, then pre-tokenization and BPE of the rest. */
static int encode_segment(const struct rtx_tokenizer *tok, const char *seg, size_t len,
                          bool parse_special, struct ids *ids, struct rtx_err *err) {
    struct spans a = {0}, c = {0};
    int rc = spans_add(&a, 0, len, -1);
    if (!rc) rc = split_added(tok, seg, &a, true, parse_special, &c);
    for (size_t k = 0; !rc && k < c.n; k++)
        rc = c.v[k].id >= 0 ? ids_add(ids, c.v[k].id)
                            : encode_text(tok, seg, c.v[k].off, c.v[k].len, ids, err);
    rtx_free(a.v);
    rtx_free(c.v);
    return rc;
}

int rtx_tokenizer_encode(const struct rtx_tokenizer *tok, const char *text, size_t len,
                         bool parse_special, int32_t **ids_out, size_t *n_ids,
                         struct rtx_err *err) {
    if (!tok || (!text && len) || !ids_out || !n_ids)
        return rtx_err_set(err, RTX_EINVAL, "rtx_tokenizer_encode: NULL argument");
    for (size_t i = 0; i < len;) {
        size_t l;
        if (utf8_next((const uint8_t *)text + i, len - i, &l) < 0)
            return rtx_err_set(err, RTX_EINVAL, "text is not valid UTF-8 at byte %zu", i);
        i += l;
    }
    struct spans a = {0}, b = {0};
    struct ids ids = {0};
    int rc = spans_add(&a, 0, len, -1);
    if (!rc) rc = split_added(tok, text, &a, false, parse_special, &b);
    for (size_t k = 0; !rc && k < b.n; k++) {
        const char *seg = text + b.v[k].off;
        if (b.v[k].id >= 0) {
            rc = ids_add(&ids, b.v[k].id);
        } else if (!tok->nfc) {
            rc = encode_segment(tok, seg, b.v[k].len, parse_special, &ids, err);
        } else {
            utf8proc_uint8_t *norm = NULL; /* malloc'ed by utf8proc */
            utf8proc_ssize_t n =
                utf8proc_map((const utf8proc_uint8_t *)seg, (utf8proc_ssize_t)b.v[k].len, &norm,
                             UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (n < 0)
                rc = n == UTF8PROC_ERROR_NOMEM
                         ? RTX_ENOMEM
                         : rtx_err_set(err, RTX_EINVAL, "NFC: %s", utf8proc_errmsg(n));
            else
                rc = encode_segment(tok, (const char *)norm, (size_t)n, parse_special, &ids, err);
            free(norm);
        }
    }
    rtx_free(a.v);
    rtx_free(b.v);
    if (rc) {
        rtx_free(ids.v);
        if (rc == RTX_ENOMEM) rtx_err_set(err, rc, "encode: out of memory");
        return rc;
    }
    *ids_out = ids.n ? ids.v : NULL;
    if (!ids.n) rtx_free(ids.v);
    *n_ids = ids.n;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Decoding
 * ---------------------------------------------------------------------------------------- */

static int check_id(const struct rtx_tokenizer *tok, int32_t id, struct rtx_err *err) {
    if (id < 0 || (size_t)id >= tok->n_ids || !tok->id_tok[id])
        return rtx_err_set(err, RTX_EINVAL, "unknown token id %d (vocabulary size %zu)", (int)id,
                           tok->n_ids);
    return 0;
}

int rtx_tokenizer_decode(const struct rtx_tokenizer *tok, const int32_t *ids, size_t n,
                         bool skip_special, char **text, size_t *len, struct rtx_err *err) {
    if (!tok || (!ids && n) || !text || !len)
        return rtx_err_set(err, RTX_EINVAL, "rtx_tokenizer_decode: NULL argument");
    for (size_t i = 0; i < n; i++) {
        int rc = check_id(tok, ids[i], err);
        if (rc) return rtx_err_prefix(err, "ids[%zu]", i);
    }
    struct buf raw = {0}, out = {0};
    int rc = buf_put(&out, "", 0);
    for (size_t i = 0; !rc && i < n; i++)
        rc = token_bytes(tok, ids[i], skip_special, &raw);
    if (!rc) rc = buf_put_lossy(&out, raw.p, raw.len, false, NULL);
    rtx_free(raw.p);
    if (rc) {
        rtx_free(out.p);
        return rtx_err_set(err, rc, "decode: out of memory");
    }
    *text = out.p;
    *len = out.len;
    return 0;
}

struct rtx_tokenizer_stream *rtx_tokenizer_stream_new(const struct rtx_tokenizer *tok,
                                                      bool skip_special) {
    struct rtx_tokenizer_stream *s = rtx_calloc(1, sizeof *s);
    if (s) s->tok = tok, s->skip_special = skip_special;
    return s;
}

/* Turns the held bytes plus b into complete text in s->out; keeps an incomplete tail. */
static int stream_emit(struct rtx_tokenizer_stream *s, struct buf *b, bool final,
                       const char **text, size_t *len) {
    struct buf out = {s->out, 0, s->out_cap};
    size_t used = 0;
    int rc = buf_put(&out, "", 0);
    if (!rc) rc = buf_put_lossy(&out, b->p, b->len, !final, &used);
    s->out = out.p, s->out_cap = out.cap, s->out_len = out.len;
    if (rc) return rc;
    s->n_pend = b->len - used; /* at most 3: a valid prefix of one character */
    memcpy(s->pend, b->p + used, s->n_pend);
    *text = s->out;
    *len = s->out_len;
    return 0;
}

int rtx_tokenizer_stream_feed(struct rtx_tokenizer_stream *s, int32_t id, const char **text,
                              size_t *len, struct rtx_err *err) {
    int rc = check_id(s->tok, id, err);
    if (rc) return rc;
    struct buf b = {0};
    rc = buf_put(&b, s->pend, s->n_pend);
    if (!rc) rc = token_bytes(s->tok, id, s->skip_special, &b);
    if (!rc) rc = stream_emit(s, &b, false, text, len);
    rtx_free(b.p);
    return rc ? rtx_err_set(err, rc, "decode: out of memory") : 0;
}

int rtx_tokenizer_stream_flush(struct rtx_tokenizer_stream *s, const char **text, size_t *len,
                               struct rtx_err *err) {
    struct buf b = {0};
    int rc = buf_put(&b, s->pend, s->n_pend);
    if (!rc) rc = stream_emit(s, &b, true, text, len);
    rtx_free(b.p);
    return rc ? rtx_err_set(err, rc, "decode: out of memory") : 0;
}

void rtx_tokenizer_stream_free(struct rtx_tokenizer_stream *s) {
    if (!s) return;
    rtx_free(s->out);
    rtx_free(s);
}
