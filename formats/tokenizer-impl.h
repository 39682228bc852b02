/*
 * tokenizer-impl.h - what formats/tokenizer.c (encoding, decoding) and formats/tokenizer-load.c
 * (reading tokenizer.json) share: the tokenizer's layout and a few small helpers. Only those
 * two files include it.
 */
#ifndef RTX_FORMATS_TOKENIZER_IMPL_H
#define RTX_FORMATS_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <string.h>

#include "formats/formats.h"

#define MAX_STEPS 8      /* pre-tokenizer steps after flattening Sequence */
#define MAX_ID (1 << 24) /* largest id accepted */

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

#endif /* RTX_FORMATS_TOKENIZER_IMPL_H */
