/*
 * tokenizer-impl.h - what the tokenizer's files share: formats/tokenizer.c (encoding),
 * formats/tokenizer-decode.c (decoding, streaming), formats/tokenizer-load.c and
 * formats/tokenizer-steps.c (reading tokenizer.json): the tokenizer's layout and a few small
 * helpers. Only those files include it.
 */
#ifndef RTX_FORMATS_TOKENIZER_IMPL_H
#define RTX_FORMATS_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <string.h>

#include "formats/formats.h"

#define MAX_STEPS 8      /* normalizer, pre-tokenizer or decoder steps after flattening Sequence */
#define MAX_ID (1 << 24) /* largest id accepted */
#define MAX_SPECIAL 8    /* ids the post-processor may add before or after a sequence */

enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

enum pre_type { PRE_SPLIT, PRE_BYTE_LEVEL, PRE_METASPACE };

struct pre_step {
    enum pre_type type;
    pcre2_code *re;             /* Split; ByteLevel with use_regex (NULL: no split) */
    bool add_prefix_space;      /* ByteLevel */
    char rep[5];                /* Metaspace: the replacement character (UTF-8, NUL-terminated) */
    size_t rep_len;             /* bytes */
    enum prepend_scheme scheme; /* Metaspace */
    bool split;                 /* Metaspace: split before each replacement character */
};

enum norm_type { NORM_NFC, NORM_PREPEND, NORM_REPLACE };

struct norm_step {
    enum norm_type type;
    const char *pat, *content;   /* Replace: pattern -> content; Prepend: content (in the JSON) */
    size_t pat_len, content_len; /* bytes */
};

enum dec_type {
    DEC_BYTE_LEVEL,
    DEC_REPLACE,
    DEC_BYTE_FALLBACK,
    DEC_FUSE,
    DEC_STRIP,
    DEC_METASPACE
};

struct dec_step {
    enum dec_type type;
    bool fused_in;               /* a Fuse or ByteLevel before it: its input is one growing text */
    const char *pat, *content;   /* Replace (in the JSON) */
    size_t pat_len, content_len; /* bytes */
    char ch[5];                  /* Strip: the stripped character; Metaspace: the replacement */
    size_t ch_len;               /* bytes */
    size_t start, stop;          /* Strip: at most this many characters at the start, the end */
    bool drop_first;             /* Metaspace: prepend_scheme is not never */
};

struct added {
    int32_t id;
    const char *content; /* in the JSON */
    size_t len;          /* bytes */
    const char *pat;     /* what is searched: content, or for a normalized token its content
                            through the normalizer (then owned, in norm) */
    size_t pat_len;      /* bytes */
    char *norm;          /* rtx_malloc'ed, or NULL */
    bool special, normalized, lstrip, rstrip, single_word;
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
    int32_t byte_id[256];     /* the id of each byte's byte-level character, -1 if none */
    int32_t fallback_id[256]; /* byte_fallback: the id of "<0xNN>", -1 if none */
    int32_t unk;              /* -1: none */
    bool ignore_merges, byte_fallback, fuse_unk;
    bool byte_level; /* a ByteLevel pre-tokenizer: BPE over GPT-2's byte characters */
    struct merge *merges;
    size_t merges_mask;  /* table size - 1 */
    struct added *added; /* sorted by the first byte of pat, then length descending */
    size_t n_added;
    size_t added_first[257]; /* added[added_first[b] .. added_first[b + 1]] start with byte b */
    pcre2_code *word_re;     /* single_word: a word character (Rust regex's \w); else NULL */
    struct norm_step norms[MAX_STEPS];
    int n_norms;
    struct pre_step steps[MAX_STEPS];
    int n_steps;
    struct dec_step decs[MAX_STEPS];
    int n_decs;
    int32_t prefix[MAX_SPECIAL], suffix[MAX_SPECIAL]; /* the post-processor's ids */
    int n_prefix, n_suffix;
};

enum { ID_ADDED = 1, ID_SPECIAL = 2 };

struct buf {
    char *p;
    size_t len, cap; /* bytes */
};

static inline int buf_put(struct buf *b, const void *data, size_t n) {
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

/* UTF-8 of a character of the byte-level alphabet (below U+0800); returns its length. */
static inline size_t utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6); /* the byte-level alphabet stays below U+0800 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The length of the UTF-8 character whose first byte is c (1 for a stray byte). */
static inline size_t utf8_len(uint8_t c) {
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The slot of key in the merge table: its entry, or the empty slot where it would go. */
static inline size_t merge_slot(const struct rtx_tokenizer *tok, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & tok->merges_mask;
    while (tok->merges[h].key != key && tok->merges[h].key != UINT64_MAX)
        h = (h + 1) & tok->merges_mask;
    return h;
}

/* The vocabulary id of the token s (n bytes), or -1. */
static inline int32_t vocab_id(const struct rtx_tokenizer *tok, const char *s, size_t n) {
    json_t *v = json_object_getn(tok->vocab, s, n);
    return v ? (int32_t)json_integer_value(v) : -1;
}

/* GPT-2's bytes_to_unicode (tokenizer.c): the character of each byte, and the byte of each
 * character below 324 (-1: not in the alphabet); filled by rtx__tok_byte_table_init. */
extern uint16_t rtx__tok_byte_char[256];
extern int16_t rtx__tok_char_byte[324];
void rtx__tok_byte_table_init(void);

/* The code point at s (n > 0 bytes) and its length in *len; -1 for an invalid sequence (*len:
 * its maximal invalid subpart, at least 1), -2 for a valid prefix cut short by the end (*len =
 * n) (tokenizer.c). */
int32_t rtx__tok_utf8_next(const uint8_t *s, size_t n, size_t *len);

/* Runs s (n bytes) through the normalizer steps into out (out->len reset first); without steps
 * out receives s unchanged (tokenizer.c). RTX_ENOMEM, RTX_EINVAL (utf8proc refused it). */
int rtx__tok_normalize(const struct rtx_tokenizer *tok, const char *s, size_t n, struct buf *out,
                       struct rtx_err *err);

/* tokenizer-steps.c: the normalizer, the decoder and the post-processor of the file at root
 * (each may be absent or null where Hugging Face allows it); RTX_EFORMAT / RTX_EUNSUPPORTED
 * naming the JSON path. */
int rtx__tok_load_normalizer(struct rtx_tokenizer *tok, json_t *root, const char *what,
                             struct rtx_err *err);
int rtx__tok_load_decoder(struct rtx_tokenizer *tok, json_t *root, const char *what,
                          struct rtx_err *err);
int rtx__tok_load_post(struct rtx_tokenizer *tok, json_t *root, const char *what,
                       struct rtx_err *err);
/* A Metaspace's prepend scheme at path: prepend_scheme, or the older add_prefix_space (true:
 * always, false: never); always when neither is there. */
int rtx__tok_load_scheme(json_t *o, const char *path, const char *what, enum prepend_scheme *out,
                         struct rtx_err *err);
/* One character (a JSON string of exactly one UTF-8 character) into out[5]; false if not. */
bool rtx__tok_one_char(json_t *s, char out[5], size_t *len);

#endif /* RTX_FORMATS_TOKENIZER_IMPL_H */
