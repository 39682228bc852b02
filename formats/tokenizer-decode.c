/*
 * tokenizer-decode.c - decoding ids into text as Hugging Face's decode does, and the streaming
 * decoder (formats/tokenizer.c has the encoding side).
 *
 * DESIGN
 * Hugging Face decodes by mapping each id to its token string (added tokens: their content;
 * special ones dropped when skipping) and running the list through the decoder steps, each a
 * function from a list of strings to a list of strings, then joining. Here each step is an
 * online transducer instead: strings are pushed into step 0 one at a time, each step pushes
 * what it has settled into the next, and the last appends to the output; a flush drains the
 * steps in order. Decoding a whole list is feeding it and flushing, so the streamed text is
 * by construction the decoded text. What a step must hold back:
 * - ByteFallback turns a run of "<0xNN>" tokens into its text when the whole run is valid
 *   UTF-8 and into one U+FFFD per byte otherwise, so a valid run is held until a token that is
 *   not a byte ends it (an invalid run is known at once: its U+FFFDs go out then, and each
 *   further byte of the run is one more);
 * - ByteLevel maps each token's characters back to bytes and replaces invalid UTF-8 as Rust's
 *   from_utf8_lossy does, holding back an incomplete character at the end;
 * - Strip after Fuse (one growing text) strips at the very start and holds back a trailing run
 *   of the stripped character until something else follows it.
 * Fuse and ByteLevel join everything into one string, so the steps after them (their
 * `fused_in`) see one growing string: Metaspace then treats it all as the first token, Strip
 * as one text; ByteLevel, ByteFallback and Replace are refused there at load.
 */
#include <stdlib.h>
#include <string.h>

#include "formats/tokenizer-impl.h"

static const char fffd[] = "\xEF\xBF\xBD";

struct dec_state {
    struct buf held; /* ByteFallback: the run's bytes; ByteLevel: an incomplete character;
                        Strip (fused): held trailing characters */
    struct buf tmp;  /* scratch for what is pushed on */
    size_t n;        /* Metaspace: strings seen; Strip (fused): leading characters cut */
    bool flag;       /* ByteFallback: the run is invalid; Strip (fused): past the start */
};

struct rtx_tokenizer_stream {
    const struct rtx_tokenizer *tok;
    bool skip_special;
    struct dec_state st[MAX_STEPS];
    struct buf out;
};

/* Appends n bytes to b, each invalid subpart replaced by U+FFFD. With keep_tail an incomplete
 * last character is not appended; the count of bytes consumed goes to *used. */
static int buf_put_lossy(struct buf *b, const char *s, size_t n, bool keep_tail, size_t *used) {
    size_t i = 0;
    while (i < n) {
        size_t l;
        int32_t cp = rtx__tok_utf8_next((const uint8_t *)s + i, n - i, &l);
        if (cp == -2 && keep_tail) break;
        int rc = cp < 0 ? buf_put(b, fffd, 3) : buf_put(b, s + i, l);
        if (rc) return rc;
        i += l;
    }
    if (used) *used = i;
    return 0;
}

/* The byte of a "<0xNN>" token as the crate reads it (6 bytes, two hexadecimal digits that
 * Rust's u8::from_str_radix accepts, which allows a leading '+'), or -1. */
static int byte_token(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0 && !(i == 3 && c == '+')) return -1;
        v = d < 0 ? v : v * 16 + d;
    }
    return v;
}

static int push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n);

/* Replaces every occurrence of pat in p with content (possibly empty) into the step's scratch
 * and pushes the result on. */
static int replace_push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n,
                        const char *pat, size_t pat_len, const char *content, size_t content_len) {
    struct buf *t = &s->st[k].tmp;
    t->len = 0;
    int rc = buf_put(t, "", 0);
    for (size_t i = 0; !rc && i < n;) {
        if (pat_len <= n - i && !memcmp(p + i, pat, pat_len)) {
            rc = buf_put(t, content, content_len);
            i += pat_len;
        } else {
            rc = buf_put(t, p + i, 1);
            i++;
        }
    }
    return rc ? rc : push(s, k + 1, t->p, t->len);
}

/* Ends a ByteFallback run: its text when it is valid UTF-8, one U+FFFD per byte otherwise. */
static int run_end(struct rtx_tokenizer_stream *s, int k) {
    struct dec_state *st = &s->st[k];
    int rc = 0;
    size_t n = st->held.len;
    st->held.len = 0, st->flag = false;
    if (!n) return 0;
    bool valid = true;
    for (size_t i = 0, l; valid && i < n; i += l)
        valid = rtx__tok_utf8_next((const uint8_t *)st->held.p + i, n - i, &l) >= 0;
    if (valid) return push(s, k + 1, st->held.p, n);
    for (size_t i = 0; !rc && i < n; i++)
        rc = push(s, k + 1, fffd, 3);
    return rc;
}

static int byte_fallback_push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n) {
    struct dec_state *st = &s->st[k];
    int b = byte_token(p, n);
    if (b < 0) {
        int rc = run_end(s, k);
        return rc ? rc : push(s, k + 1, p, n);
    }
    if (st->flag) return push(s, k + 1, fffd, 3);
    uint8_t byte = (uint8_t)b;
    int rc = buf_put(&st->held, &byte, 1);
    if (rc) return rc;
    size_t i = 0, l;
    while (i < st->held.len &&
           rtx__tok_utf8_next((const uint8_t *)st->held.p + i, st->held.len - i, &l) != -1)
        i += l;
    if (i == st->held.len) return 0; /* valid so far: held until the run ends */
    size_t bytes = st->held.len;
    st->held.len = 0, st->flag = true;
    for (size_t j = 0; !rc && j < bytes; j++)
        rc = push(s, k + 1, fffd, 3);
    return rc;
}

/* ByteLevel: the token's characters back to bytes (its own bytes when one is not a byte-level
 * character), joined to the held bytes; complete characters go on. */
static int byte_level_push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n) {
    struct dec_state *st = &s->st[k];
    size_t start = st->held.len;
    int rc = 0;
    for (size_t i = 0; !rc && i < n;) {
        size_t l;
        int32_t cp = rtx__tok_utf8_next((const uint8_t *)p + i, n - i, &l);
        if (cp < 0 || cp >= 324 || rtx__tok_char_byte[cp] < 0) {
            st->held.len = start;
            rc = buf_put(&st->held, p, n);
            break;
        }
        uint8_t byte = (uint8_t)rtx__tok_char_byte[cp];
        rc = buf_put(&st->held, &byte, 1);
        i += l;
    }
    struct buf *t = &s->st[k].tmp;
    size_t used = 0;
    t->len = 0;
    if (!rc) rc = buf_put(t, "", 0);
    if (!rc) rc = buf_put_lossy(t, st->held.p, st->held.len, true, &used);
    if (rc) return rc;
    memmove(st->held.p, st->held.p + used, st->held.len - used);
    st->held.len -= used;
    return t->len ? push(s, k + 1, t->p, t->len) : 0;
}

static bool starts_with(const char *p, size_t n, const char *c, size_t cn) {
    return cn <= n && !memcmp(p, c, cn);
}

/* Strip on one whole string: at most start leading and stop trailing copies of ch, never
 * overlapping (where the crate would panic on an overlap, this keeps nothing). */
static int strip_push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n) {
    const struct dec_step *d = &s->tok->decs[k];
    size_t a = 0, z = n;
    for (size_t i = 0; i < d->start && starts_with(p + a, n - a, d->ch, d->ch_len); i++)
        a += d->ch_len;
    for (size_t i = 0;
         i < d->stop && z - a >= d->ch_len && !memcmp(p + z - d->ch_len, d->ch, d->ch_len); i++)
        z -= d->ch_len;
    return push(s, k + 1, p + a, z - a);
}

/* Strip on a growing text: the start is cut once; a trailing run of ch is held back (at most
 * stop characters of it) until the text goes on. */
static int strip_fused_push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n) {
    const struct dec_step *d = &s->tok->decs[k];
    struct dec_state *st = &s->st[k];
    while (!st->flag && n) {
        if (st->n < d->start && starts_with(p, n, d->ch, d->ch_len)) {
            p += d->ch_len, n -= d->ch_len, st->n++;
        } else {
            st->flag = true;
        }
    }
    if (!n) return 0;
    if (!d->stop) return push(s, k + 1, p, n);
    struct buf *t = &st->tmp;
    t->len = 0;
    int rc = buf_put(t, st->held.p ? st->held.p : "", st->held.len);
    if (!rc) rc = buf_put(t, p, n);
    if (rc) return rc;
    size_t z = t->len, h = 0;
    while (h < d->stop && z >= d->ch_len && !memcmp(t->p + z - d->ch_len, d->ch, d->ch_len))
        z -= d->ch_len, h++;
    st->held.len = 0;
    if ((rc = buf_put(&st->held, t->p + z, t->len - z))) return rc;
    return z ? push(s, k + 1, t->p, z) : 0;
}

/* Pushes the string p (n bytes) into decoder step k (past the last: the output). */
static int push(struct rtx_tokenizer_stream *s, int k, const char *p, size_t n) {
    if (k == s->tok->n_decs) return buf_put(&s->out, p, n);
    const struct dec_step *d = &s->tok->decs[k];
    switch (d->type) {
    case DEC_BYTE_LEVEL: return byte_level_push(s, k, p, n);
    case DEC_BYTE_FALLBACK: return byte_fallback_push(s, k, p, n);
    case DEC_REPLACE:
        return replace_push(s, k, p, n, d->pat, d->pat_len, d->content, d->content_len);
    case DEC_FUSE: return push(s, k + 1, p, n);
    case DEC_STRIP: return d->fused_in ? strip_fused_push(s, k, p, n) : strip_push(s, k, p, n);
    case DEC_METASPACE: {
        bool first = d->fused_in || s->st[k].n++ == 0;
        return replace_push(s, k, p, n, d->ch, d->ch_len, " ", first && d->drop_first ? 0 : 1);
    }
    }
    return 0;
}

/* Drains step k and the steps after it; each is ready for a new text afterwards. */
static int flush(struct rtx_tokenizer_stream *s, int k) {
    if (k == s->tok->n_decs) return 0;
    struct dec_state *st = &s->st[k];
    int rc = 0;
    switch (s->tok->decs[k].type) {
    case DEC_BYTE_FALLBACK: rc = run_end(s, k); break;
    case DEC_BYTE_LEVEL: {
        struct buf *t = &st->tmp;
        t->len = 0;
        rc = buf_put(t, "", 0);
        if (!rc) rc = buf_put_lossy(t, st->held.p, st->held.len, false, NULL);
        st->held.len = 0;
        if (!rc && t->len) rc = push(s, k + 1, t->p, t->len);
        break;
    }
    default:
        st->held.len = 0; /* Strip: the trailing characters are stripped */
        break;
    }
    st->n = 0, st->flag = false;
    return rc ? rc : flush(s, k + 1);
}

static int check_id(const struct rtx_tokenizer *tok, int32_t id, struct rtx_err *err) {
    if (id < 0 || (size_t)id >= tok->n_ids || !tok->id_tok[id])
        return rtx_err_set(err, RTX_EINVAL, "unknown token id %d (vocabulary size %zu)", (int)id,
                           tok->n_ids);
    return 0;
}

/* One id into the steps (a special token is dropped when skipping them). */
static int feed(struct rtx_tokenizer_stream *s, int32_t id) {
    const struct rtx_tokenizer *tok = s->tok;
    if (s->skip_special && (tok->id_flags[id] & ID_SPECIAL)) return 0;
    return push(s, 0, tok->id_tok[id], strlen(tok->id_tok[id]));
}

static void stream_clear(struct rtx_tokenizer_stream *s) {
    for (int k = 0; k < MAX_STEPS; k++) {
        rtx_free(s->st[k].held.p);
        rtx_free(s->st[k].tmp.p);
    }
}

int rtx_tokenizer_decode(const struct rtx_tokenizer *tok, const int32_t *ids, size_t n,
                         bool skip_special, char **text, size_t *len, struct rtx_err *err) {
    if (!tok || (!ids && n) || !text || !len)
        return rtx_err_set(err, RTX_EINVAL, "rtx_tokenizer_decode: NULL argument");
    for (size_t i = 0; i < n; i++) {
        int rc = check_id(tok, ids[i], err);
        if (rc) return rtx_err_prefix(err, "ids[%zu]", i);
    }
    struct rtx_tokenizer_stream s = {.tok = tok, .skip_special = skip_special};
    int rc = buf_put(&s.out, "", 0);
    for (size_t i = 0; !rc && i < n; i++)
        rc = feed(&s, ids[i]);
    if (!rc) rc = flush(&s, 0);
    stream_clear(&s);
    if (rc) {
        rtx_free(s.out.p);
        return rtx_err_set(err, rc, "decode: out of memory");
    }
    *text = s.out.p;
    *len = s.out.len;
    return 0;
}

struct rtx_tokenizer_stream *rtx_tokenizer_stream_new(const struct rtx_tokenizer *tok,
                                                      bool skip_special) {
    struct rtx_tokenizer_stream *s = rtx_calloc(1, sizeof *s);
    if (s) s->tok = tok, s->skip_special = skip_special;
    return s;
}

int rtx_tokenizer_stream_feed(struct rtx_tokenizer_stream *s, int32_t id, const char **text,
                              size_t *len, struct rtx_err *err) {
    int rc = check_id(s->tok, id, err);
    if (rc) return rc;
    s->out.len = 0;
    rc = buf_put(&s->out, "", 0);
    if (!rc) rc = feed(s, id);
    if (rc) return rtx_err_set(err, rc, "decode: out of memory");
    *text = s->out.p;
    *len = s->out.len;
    return 0;
}

int rtx_tokenizer_stream_flush(struct rtx_tokenizer_stream *s, const char **text, size_t *len,
                               struct rtx_err *err) {
    s->out.len = 0;
    int rc = buf_put(&s->out, "", 0);
    if (!rc) rc = flush(s, 0);
    if (rc) return rtx_err_set(err, rc, "decode: out of memory");
    *text = s->out.p;
    *len = s->out.len;
    return 0;
}

void rtx_tokenizer_stream_free(struct rtx_tokenizer_stream *s) {
    if (!s) return;
    stream_clear(s);
    rtx_free(s->out.p);
    rtx_free(s);
}
