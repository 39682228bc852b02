/*
 * tokenizer.c - Hugging Face tokenizer.json tokenizers: byte-level BPE (GPT-2, Llama 3, Qwen2)
 * and SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama); encoding here,
 * decoding in tokenizer-decode.c, reading the file in tokenizer-load.c and tokenizer-steps.c.
 *
 * DESIGN
 * Encoding follows the tokenizers crate step by step, because every id must match it:
 * 1. added tokens whose normalized flag is false are cut out of the raw text, leftmost-longest,
 *    with their single_word, lstrip and rstrip rules (find_matches in the crate);
 * 2. each stretch of text between them goes through the normalizer steps (NFC with utf8proc,
 *    Prepend, Replace), and the normalized added tokens (whose patterns went through the same
 *    normalizer at load) are cut out of the result the same way;
 * 3. each remaining segment goes through the pre-tokenizer steps in order (Split: the matches
 *    of a PCRE2 pattern and the gaps between them, "Isolated"; ByteLevel: an optional prefix
 *    space, GPT-2's pattern when use_regex; Metaspace: spaces become the replacement
 *    character, which is prepended and split before), pieces kept as spans of one byte arena
 *    per step; a piece remembers whether it starts the original text (Metaspace "first");
 * 4. each piece is BPE-merged: its characters (with a ByteLevel pre-tokenizer, the characters
 *    of GPT-2's bytes_to_unicode for its bytes) become vocabulary ids, a character missing from
 *    the vocabulary becomes its "<0xNN>" byte tokens (byte_fallback) or the unknown token
 *    (fused with its neighbours under fuse_unk); then the adjacent pair of lowest merge rank is
 *    merged (the leftmost of equal ranks) until no pair has a rank; with ignore_merges a piece
 *    found whole in the vocabulary is one token.
 * The vocabulary stays in the parsed JSON (jansson's object is the token -> id hash table);
 * merges are an open-addressing table keyed by the pair of ids.
 * What is not implemented is refused at load, naming the JSON path (docs/tokenizer.md).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "formats/tokenizer-impl.h"

/* ------------------------------------------------------------------------------------------
 * Bytes, UTF-8 and GPT-2's byte-level alphabet
 * ---------------------------------------------------------------------------------------- */

/* The ranges are Unicode's table of well-formed byte sequences. */
int32_t rtx__tok_utf8_next(const uint8_t *s, size_t n, size_t *len) {
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

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other bytes for
 * U+0100 onwards in byte order. rtx__tok_char_byte is the inverse (-1: not a byte-level
 * character). */
uint16_t rtx__tok_byte_char[256];
int16_t rtx__tok_char_byte[324];

static void byte_table_fill(void) {
    int next = 256;
    for (int c = 0; c < 324; c++)
        rtx__tok_char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int c = keep ? b : next++;
        rtx__tok_byte_char[b] = (uint16_t)c;
        rtx__tok_char_byte[c] = (int16_t)b;
    }
}

void rtx__tok_byte_table_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_table_fill);
}

/* Unicode's White_Space property (Rust's char::is_whitespace, regex's \s). */
static bool is_white_space(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Whether the one character at s (n bytes) is a word character (tok->word_re). */
static bool is_word_char(const struct rtx_tokenizer *tok, const char *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return false; /* out of memory: treated as not a word character */
    int m = pcre2_match(tok->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md,
                        NULL);
    pcre2_match_data_free(md);
    return m > 0;
}

/* The start of the character that ends at `end` (text valid UTF-8, end > 0). */
static size_t char_before(const char *text, size_t end) {
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)text[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* ------------------------------------------------------------------------------------------
 * Merges: (left id, right id) -> (rank, merged id)
 * ---------------------------------------------------------------------------------------- */

static const struct merge *merge_find(const struct rtx_tokenizer *tok, int32_t a, int32_t b) {
    if (!tok->merges) return NULL;
    const struct merge *m = &tok->merges[merge_slot(tok, (uint64_t)a << 32 | (uint32_t)b)];
    return m->key == UINT64_MAX ? NULL : m;
}

/* ------------------------------------------------------------------------------------------
 * Spans and ids
 * ---------------------------------------------------------------------------------------- */

struct span {
    size_t off, len; /* bytes */
    int32_t id;      /* an added token's id, or -1 for text */
    bool first;      /* text that starts the original input (Metaspace's "first") */
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
    s->v[s->n++] = (struct span){off, len, id, false};
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

/* ------------------------------------------------------------------------------------------
 * Added tokens
 * ---------------------------------------------------------------------------------------- */

/* The leftmost-longest added token of one pass at text[i..end), or NULL. */
static const struct added *added_at(const struct rtx_tokenizer *tok, const char *text, size_t i,
                                    size_t end, bool pass_norm, bool parse_special) {
    uint8_t c = (uint8_t)text[i];
    for (size_t j = tok->added_first[c]; j < tok->added_first[c + 1]; j++) {
        const struct added *a = &tok->added[j];
        if (a->normalized == pass_norm && (parse_special || !a->special) &&
            a->pat_len <= end - i && !memcmp(text + i, a->pat, a->pat_len))
            return a; /* sorted longest first */
    }
    return NULL;
}

/* Cuts the added tokens of one pass (normalized == pass_norm; special ones only when
 * parse_special) out of text[off, off + len) into out, as the crate's find_matches does: a
 * match is taken leftmost-longest; a single_word token not standing alone is dropped (its
 * bytes are not searched again); lstrip and rstrip take the whitespace around it into the
 * token. The first text span keeps `first`. */
static int split_added(const struct rtx_tokenizer *tok, const char *text, size_t off, size_t len,
                       bool first, bool pass_norm, bool parse_special, struct spans *out) {
    size_t from = off, end = off + len, i = off, n0 = out->n;
    int rc = 0;
    while (!rc && i < end) {
        const struct added *hit = added_at(tok, text, i, end, pass_norm, parse_special);
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->pat_len;
        i = stop;
        if (hit->single_word) {
            bool alone_l = start == off || !is_word_char(tok, text + char_before(text, start),
                                                         start - char_before(text, start));
            bool alone_r = stop == end || !is_word_char(tok, text + stop, utf8_len(text[stop]));
            if (!alone_l || !alone_r) continue;
        }
        if (hit->lstrip) {
            size_t s = start, l;
            while (s > off &&
                   is_white_space(rtx__tok_utf8_next((const uint8_t *)text + char_before(text, s),
                                                     s - char_before(text, s), &l)))
                s = char_before(text, s);
            start = s > from ? s : from;
        }
        if (hit->rstrip) {
            size_t l;
            while (stop < end && is_white_space(rtx__tok_utf8_next((const uint8_t *)text + stop,
                                                                   end - stop, &l)))
                stop += l;
        }
        if (from < start) rc = spans_add(out, from, start - from, -1);
        if (!rc) rc = spans_add(out, start, stop - start, hit->id);
        from = stop;
    }
    if (!rc && from < end) rc = spans_add(out, from, end - from, -1);
    if (!rc && first && out->n > n0 && out->v[n0].off == off) out->v[n0].first = true;
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Normalizers
 * ---------------------------------------------------------------------------------------- */

static int norm_apply(const struct norm_step *st, const struct buf *in, struct buf *out,
                      struct rtx_err *err) {
    int rc = 0;
    switch (st->type) {
    case NORM_NFC: {
        if (!in->len) return 0;
        utf8proc_uint8_t *norm = NULL; /* malloc'ed by utf8proc */
        utf8proc_ssize_t n =
            utf8proc_map((const utf8proc_uint8_t *)in->p, (utf8proc_ssize_t)in->len, &norm,
                         UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (n < 0)
            return n == UTF8PROC_ERROR_NOMEM
                       ? RTX_ENOMEM
                       : rtx_err_set(err, RTX_EINVAL, "NFC: %s", utf8proc_errmsg(n));
        rc = buf_put(out, norm, (size_t)n);
        free(norm);
        return rc;
    }
    case NORM_PREPEND:
        if (in->len) rc = buf_put(out, st->content, st->content_len);
        return rc ? rc : buf_put(out, in->p, in->len);
    case NORM_REPLACE:
        for (size_t i = 0; !rc && i < in->len;) {
            if (st->pat_len <= in->len - i && !memcmp(in->p + i, st->pat, st->pat_len)) {
                rc = buf_put(out, st->content, st->content_len);
                i += st->pat_len;
            } else {
                rc = buf_put(out, in->p + i, 1);
                i++;
            }
        }
        return rc;
    }
    return 0;
}

int rtx__tok_normalize(const struct rtx_tokenizer *tok, const char *s, size_t n, struct buf *out,
                       struct rtx_err *err) {
    struct buf tmp = {0};
    out->len = 0;
    int rc = buf_put(out, s, n);
    for (int i = 0; !rc && i < tok->n_norms; i++) {
        struct buf t = *out;
        *out = tmp;
        out->len = 0;
        rc = buf_put(out, "", 0);
        if (!rc) rc = norm_apply(&tok->norms[i], &t, out, err);
        tmp = t;
    }
    rtx_free(tmp.p);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Pre-tokenizers
 * ---------------------------------------------------------------------------------------- */

/* Metaspace over one piece (p, n) into out_text at base: spaces become the replacement, which
 * is prepended by the scheme, and the result is split before each replacement. */
static int metaspace_apply(const struct pre_step *st, const char *p, size_t n, bool first,
                           struct buf *out_text, struct spans *out) {
    size_t base = out_text->len;
    bool has = (n && p[0] == ' ') || (n >= st->rep_len && !memcmp(p, st->rep, st->rep_len));
    int rc = 0;
    if (!has && (st->scheme == PREPEND_ALWAYS || (st->scheme == PREPEND_FIRST && first)))
        rc = buf_put(out_text, st->rep, st->rep_len);
    for (size_t i = 0; !rc && i < n; i++)
        rc = p[i] == ' ' ? buf_put(out_text, st->rep, st->rep_len) : buf_put(out_text, p + i, 1);
    if (rc) return rc;
    size_t len = out_text->len - base;
    if (!st->split) return spans_add(out, base, len, -1);
    const char *s = out_text->p + base;
    size_t from = 0;
    for (size_t i = 1; !rc && i + st->rep_len <= len; i++) {
        if (memcmp(s + i, st->rep, st->rep_len)) continue;
        rc = spans_add(out, base + from, i - from, -1);
        from = i;
    }
    return rc ? rc : spans_add(out, base + from, len - from, -1);
}

/* A PCRE2 split (Isolated) of the piece at out_text[base, base + len) into out. */
static int regex_split(const pcre2_code *re, pcre2_match_data *md, const struct buf *out_text,
                       size_t base, size_t len, struct spans *out, struct rtx_err *err) {
    const char *s = out_text->p + base;
    size_t pos = 0, gap = 0;
    int rc = 0;
    while (pos <= len) {
        int m = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(m, msg, sizeof msg);
            return rtx_err_set(err, RTX_ELIMIT, "pre-tokenizer pattern: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* an empty match: no piece; step one character */
            if (ov[0] >= len) break;
            pos = ov[0] + utf8_len((uint8_t)s[ov[0]]);
            continue;
        }
        if ((rc = spans_add(out, base + gap, ov[0] - gap, -1)) ||
            (rc = spans_add(out, base + ov[0], ov[1] - ov[0], -1)))
            return rc;
        gap = pos = ov[1];
    }
    return spans_add(out, base + gap, len - gap, -1);
}

/* One pre-tokenizer step over the pieces of `in` (spans of in_text) into out/out_text. */
static int pre_step_apply(const struct pre_step *st, const struct buf *in_text,
                          const struct spans *in, struct buf *out_text, struct spans *out,
                          struct rtx_err *err) {
    pcre2_match_data *md = st->re ? pcre2_match_data_create_from_pattern(st->re, NULL) : NULL;
    if (st->re && !md) return RTX_ENOMEM;
    int rc = 0;
    for (size_t k = 0; !rc && k < in->n; k++) {
        size_t base = out_text->len, n0 = out->n;
        const char *p = in_text->p + in->v[k].off;
        if (st->type == PRE_METASPACE) {
            rc = metaspace_apply(st, p, in->v[k].len, in->v[k].first, out_text, out);
        } else {
            if (st->add_prefix_space && p[0] != ' ') rc = buf_put(out_text, " ", 1);
            if (!rc) rc = buf_put(out_text, p, in->v[k].len);
            if (!rc && !st->re)
                rc = spans_add(out, base, out_text->len - base, -1);
            else if (!rc)
                rc = regex_split(st->re, md, out_text, base, out_text->len - base, out, err);
        }
        if (!rc && in->v[k].first && out->n > n0) out->v[n0].first = true;
    }
    pcre2_match_data_free(md);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * BPE
 * ---------------------------------------------------------------------------------------- */

/* Scratch for BPE over one pre-token of up to n symbols: the symbols as a doubly linked list
 * over their position, and a min-heap of candidate merges ordered by (rank, position); an
 * entry is stale when its pair has changed since it was pushed. */
struct cand {
    int32_t rank, pos, left, right, id;
};

struct bpe_work {
    int32_t *sym, *prev, *next; /* n each; sym -1: merged away */
    struct cand *heap;          /* 3n: n - 1 pairs, then at most two per merge */
    size_t n_heap;
    int32_t m;   /* symbols */
    int32_t unk; /* a pending unknown token, -1: none */
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

static void sym_add(struct bpe_work *w, int32_t id) {
    int32_t i = w->m++;
    w->sym[i] = id, w->prev[i] = i - 1, w->next[i] = -1;
    if (i > 0) w->next[i - 1] = i;
}

/* One character c (n bytes) of a piece whose vocabulary id is id (-1: none) into symbols, as
 * the crate's merge_word does: a known character first adds a pending unknown token; an
 * unknown one becomes its byte tokens (byte_fallback, when all of them exist; the pending
 * unknown token stays pending), or the unknown token, fused with a pending one under fuse_unk. */
static void char_symbols(const struct rtx_tokenizer *tok, struct bpe_work *w, const char *c,
                         size_t n, int32_t id) {
    if (id >= 0) {
        if (w->unk >= 0) sym_add(w, w->unk);
        w->unk = -1;
        sym_add(w, id);
        return;
    }
    if (tok->byte_fallback) {
        size_t i = 0;
        while (i < n && tok->fallback_id[(uint8_t)c[i]] >= 0)
            i++;
        if (i == n) {
            for (i = 0; i < n; i++)
                sym_add(w, tok->fallback_id[(uint8_t)c[i]]);
            return;
        }
    }
    if (tok->unk < 0) return; /* dropped, as Hugging Face does */
    if (w->unk >= 0 && !tok->fuse_unk) sym_add(w, w->unk);
    w->unk = tok->unk;
}

/* BPE over one pre-token (bytes s, n) into ids: the pair of lowest rank merges first, the
 * leftmost of equal ranks, as Hugging Face's BPE does; O(n log n). */
static int bpe_piece(const struct rtx_tokenizer *tok, const char *s, size_t n, struct bpe_work *w,
                     struct buf *mapped, struct ids *ids) {
    const char *str = s;
    size_t len = n;
    if (tok->byte_level) {
        mapped->len = 0;
        for (size_t i = 0; i < n; i++) {
            char c[2];
            int rc = buf_put(mapped, c, utf8_put(c, rtx__tok_byte_char[(uint8_t)s[i]]));
            if (rc) return rc;
        }
        str = mapped->p, len = mapped->len;
    }
    if (tok->ignore_merges) {
        int32_t id = vocab_id(tok, str, len);
        if (id >= 0) return ids_add(ids, id);
    }
    w->m = 0, w->unk = -1;
    for (size_t i = 0, k = 0; i < len; k++) {
        size_t l = utf8_len((uint8_t)str[i]);
        int32_t id = tok->byte_level ? tok->byte_id[(uint8_t)s[k]] : vocab_id(tok, str + i, l);
        char_symbols(tok, w, str + i, l, id);
        i += l;
    }
    if (w->unk >= 0) sym_add(w, w->unk);
    int32_t m = w->m;
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

/* ------------------------------------------------------------------------------------------
 * Encoding
 * ---------------------------------------------------------------------------------------- */

/* Pre-tokenizes and merges the text span [off, off + len). */
static int encode_text(const struct rtx_tokenizer *tok, const char *text, size_t off, size_t len,
                       bool first, struct ids *ids, struct rtx_err *err) {
    struct buf t[2] = {{0}, {0}}, mapped = {0};
    struct spans sp[2] = {{0}, {0}};
    struct bpe_work w = {0};
    int rc = buf_put(&t[0], text + off, len);
    if (!rc) rc = spans_add(&sp[0], 0, len, -1);
    if (!rc) sp[0].v[0].first = first;
    int cur = 0;
    for (int s = 0; !rc && s < tok->n_steps; s++) {
        t[!cur].len = 0, sp[!cur].n = 0;
        rc = pre_step_apply(&tok->steps[s], &t[cur], &sp[cur], &t[!cur], &sp[!cur], err);
        cur = !cur;
    }
    size_t longest = 0;
    for (size_t k = 0; k < sp[cur].n; k++)
        longest = sp[cur].v[k].len > longest ? sp[cur].v[k].len : longest;
    longest = 2 * (longest ? longest : 1); /* a byte-level character may fall back to 2 bytes */
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

/* One stretch of text between the non-normalized added tokens: normalized, its normalized
 * added tokens cut out, the rest pre-tokenized and merged. */
static int encode_segment(const struct rtx_tokenizer *tok, const char *seg, size_t len, bool first,
                          bool parse_special, struct ids *ids, struct rtx_err *err) {
    struct buf norm = {0};
    struct spans c = {0};
    int rc = rtx__tok_normalize(tok, seg, len, &norm, err);
    if (!rc) rc = split_added(tok, norm.p, 0, norm.len, first, true, parse_special, &c);
    for (size_t k = 0; !rc && k < c.n; k++)
        rc = c.v[k].id >= 0
                 ? ids_add(ids, c.v[k].id)
                 : encode_text(tok, norm.p, c.v[k].off, c.v[k].len, c.v[k].first, ids, err);
    rtx_free(norm.p);
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
        if (rtx__tok_utf8_next((const uint8_t *)text + i, len - i, &l) < 0)
            return rtx_err_set(err, RTX_EINVAL, "text is not valid UTF-8 at byte %zu", i);
        i += l;
    }
    struct spans b = {0};
    struct ids ids = {0};
    int rc = split_added(tok, text, 0, len, true, false, parse_special, &b);
    for (size_t k = 0; !rc && k < b.n; k++)
        rc = b.v[k].id >= 0 ? ids_add(&ids, b.v[k].id)
                            : encode_segment(tok, text + b.v[k].off, b.v[k].len, b.v[k].first,
                                             parse_special, &ids, err);
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

int rtx_tokenizer_special_prefix(const struct rtx_tokenizer *tok, const int32_t **ids) {
    if (ids) *ids = tok->prefix;
    return tok->n_prefix;
}

int rtx_tokenizer_special_suffix(const struct rtx_tokenizer *tok, const int32_t **ids) {
    if (ids) *ids = tok->suffix;
    return tok->n_suffix;
}
