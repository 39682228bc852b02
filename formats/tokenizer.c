/*
 * tokenizer.c - Hugging Face tokenizer.json tokenizers: byte-level BPE (GPT-2, Llama 3, Qwen2);
 * encoding and decoding here, reading the file in tokenizer-load.c.
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "formats/tokenizer-impl.h"

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
        if (cp < 0 || cp >= 324 || rtx__tok_char_byte[cp] < 0) {
            b->len = start; /* not byte-level: the token's own text, as Hugging Face does */
            return buf_put(b, t, n);
        }
        uint8_t byte = (uint8_t)rtx__tok_char_byte[cp];
        int rc = buf_put(b, &byte, 1);
        if (rc) return rc;
        i += l;
    }
    return 0;
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
            int rc = buf_put(mapped, c, utf8_put(c, rtx__tok_byte_char[(uint8_t)s[i]]));
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
