/*
 * chat-template-lex.c - the chat template's lexer: a template's text into data and the tokens
 * of its tags, with the whitespace rules of jinja2 as Hugging Face's transformers configures
 * it (trim_blocks, lstrip_blocks, no keep_trailing_newline).
 *
 * DESIGN
 * This follows jinja2's lexer rule by rule, because every byte of whitespace it keeps or drops
 * shows in the prompt: newlines are normalized to "\n" and one trailing newline is dropped;
 * data runs to the earliest "{{", "{%" or "{#"; a "-" after the opening delimiter strips all
 * whitespace before it, a "+" keeps it, and otherwise (lstrip_blocks, not for "{{") spaces
 * and tabs between the start of a line and a block or comment tag go; a tag ends at "-%}" (all
 * whitespace after it stripped), "+%}", or "%}" (one newline after it dropped: trim_blocks),
 * likewise "#}" for comments and "}}" / "-}}" for expressions, but inside open brackets an
 * end delimiter is read as operators, as jinja2 balances brackets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/chat-template-impl.h"

struct lexer {
    struct ct_arena *a;
    const char *s; /* normalized source */
    size_t n, pos;
    int line;
    const char *what;
    struct rtx_err *err;
    struct ct_tok *toks;
    size_t n_toks, cap;
    char stack[CT_MAX_DEPTH]; /* open brackets' closers */
    int depth;
};

static int fail(struct lexer *lx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct lexer *lx, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rtx__ct_errv(lx->err, code, lx->what, lx->line, fmt, ap);
    va_end(ap);
    return rc;
}

static struct ct_tok *emit(struct lexer *lx, int type) {
    if (lx->n_toks == lx->cap) {
        size_t cap = lx->cap ? 2 * lx->cap : 256;
        struct ct_tok *t = rtx_realloc(lx->toks, cap * sizeof *t);
        if (!t) return NULL;
        lx->toks = t, lx->cap = cap;
    }
    struct ct_tok *t = &lx->toks[lx->n_toks++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = lx->line;
    return t;
}

static void count_lines(struct lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        lx->line += lx->s[i] == '\n';
}

/* The length of the whitespace character at s[i] (Python's \s), or 0. */
static size_t space_at(const struct lexer *lx, size_t i) {
    if (i >= lx->n) return 0;
    size_t l;
    uint32_t cp = rtx__ct_utf8_next(lx->s + i, &l);
    return rtx__ct_is_space(cp) ? l : 0;
}

/* Skips whitespace from pos, counting lines. */
static void skip_space(struct lexer *lx) {
    size_t l, start = lx->pos;
    while ((l = space_at(lx, lx->pos)))
        lx->pos += l;
    count_lines(lx, start, lx->pos);
}

static bool at(const struct lexer *lx, const char *lit) {
    size_t l = strlen(lit);
    return lx->pos + l <= lx->n && !memcmp(lx->s + lx->pos, lit, l);
}

/* Emits the data s[from, to) with the strip rules of the tag that follows it. */
static int emit_data(struct lexer *lx, size_t from, size_t to, char sign, bool is_var,
                     bool line_starting) {
    if (sign == '-') {
        while (to > from) {
            size_t c = to - 1;
            while (c > from && ((uint8_t)lx->s[c] & 0xC0) == 0x80)
                c--;
            if (!space_at(lx, c)) break;
            to = c;
        }
    } else if (sign != '+' && !is_var) {
        size_t l_pos = to;
        while (l_pos > from && lx->s[l_pos - 1] != '\n')
            l_pos--;
        bool only_space = l_pos < to;
        for (size_t i = l_pos, l; only_space && i < to; i += l)
            only_space = (l = space_at(lx, i)) != 0;
        if (only_space && (l_pos > from || line_starting)) to = l_pos;
    }
    if (to > from) {
        struct ct_tok *t = emit(lx, T_DATA);
        if (!t) return RTX_ENOMEM;
        t->p = lx->s + from, t->len = to - from;
    }
    return 0;
}

/* Decodes the string literal at pos (Python's unicode-escape, as jinja2 reads it). */
static int lex_string(struct lexer *lx) {
    char q = lx->s[lx->pos];
    size_t i = lx->pos + 1, start_line = (size_t)lx->line, end = i;
    while (end < lx->n && lx->s[end] != q)
        end += lx->s[end] == '\\' ? 2 : 1;
    char *out = rtx__ct_alloc(lx->a, end - lx->pos + 1); /* escapes never grow */
    if (!out) return RTX_ENOMEM;
    size_t o = 0;
    for (;;) {
        if (i >= lx->n) {
            lx->line = (int)start_line;
            return fail(lx, RTX_EFORMAT, "unterminated string");
        }
        char c = lx->s[i];
        if (c == q) break;
        if (c == '\n') lx->line++;
        if (c != '\\') {
            out[o++] = c, i++;
            continue;
        }
        char e = i + 1 < lx->n ? lx->s[i + 1] : 0;
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (e && simple) {
            static const char to[] = "\\'\"\a\b\f\n\r\t\v";
            out[o++] = to[simple - "\\'\"abfnrtv"], i += 2;
        } else if (e == '\n') {
            lx->line++, i += 2; /* a backslash-newline continues the line */
        } else if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            int k = 0;
            for (i++; k < 3 && i < lx->n && lx->s[i] >= '0' && lx->s[i] <= '7'; k++, i++)
                v = v * 8 + (uint32_t)(lx->s[i] - '0');
            o += rtx__ct_utf8_put(out + o, v);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                char h = i + 2 + (size_t)k < lx->n ? lx->s[i + 2 + k] : 0;
                int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (d < 0) return fail(lx, RTX_EFORMAT, "truncated \\%c escape in a string", e);
                v = v * 16 + (uint32_t)d;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return fail(lx, RTX_EFORMAT, "\\%c escape of an invalid code point", e);
            o += rtx__ct_utf8_put(out + o, v);
            i += 2 + (size_t)digits;
        } else if (e == 'N') {
            return fail(lx, RTX_EUNSUPPORTED, "\\N{...} escapes are not supported");
        } else {
            out[o++] = '\\', i++; /* an unknown escape stays as it is */
        }
    }
    out[o] = 0;
    struct ct_tok *t = emit(lx, T_STRING);
    if (!t) return RTX_ENOMEM;
    t->line = (int)start_line;
    t->p = out, t->len = o;
    lx->pos = i + 1;
    return 0;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Digits with single underscores between them from *i; false if none. */
static bool digits(const struct lexer *lx, size_t *i, char *out, size_t *o) {
    size_t j = *i;
    if (j >= lx->n || !is_digit(lx->s[j])) return false;
    while (j < lx->n) {
        if (is_digit(lx->s[j])) {
            out[(*o)++] = lx->s[j++];
        } else if (lx->s[j] == '_' && j + 1 < lx->n && is_digit(lx->s[j + 1])) {
            j++;
        } else {
            break;
        }
    }
    *i = j;
    return true;
}

static int lex_number(struct lexer *lx) {
    char buf[128];
    size_t i = lx->pos, o = 0;
    digits(lx, &i, buf, &o);
    bool is_float = false;
    bool after_dot = lx->pos > 0 && lx->s[lx->pos - 1] == '.';
    if (!after_dot && i + 1 < lx->n && lx->s[i] == '.' && is_digit(lx->s[i + 1])) {
        buf[o++] = '.', i++;
        digits(lx, &i, buf, &o);
        is_float = true;
    }
    if (!after_dot && i < lx->n && (lx->s[i] == 'e' || lx->s[i] == 'E')) {
        size_t j = i + 1, o2 = o + 1;
        char b2[128];
        memcpy(b2, buf, o);
        b2[o] = 'e';
        if (j < lx->n && (lx->s[j] == '+' || lx->s[j] == '-')) b2[o2++] = lx->s[j++];
        if (digits(lx, &j, b2, &o2)) {
            memcpy(buf, b2, o2);
            o = o2, i = j, is_float = true;
        }
    }
    if (o >= sizeof buf - 1) return fail(lx, RTX_EFORMAT, "number literal too long");
    buf[o] = 0;
    struct ct_tok *t = emit(lx, is_float ? T_FLOAT : T_INT);
    if (!t) return RTX_ENOMEM;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        unsigned long long v = strtoull(buf, NULL, 10);
        if (errno || v > INT64_MAX)
            return fail(lx, RTX_EUNSUPPORTED, "integer literal %s is too large", buf);
        t->i = (int64_t)v;
    }
    lx->pos = i;
    return 0;
}

/* The tokens inside a tag up to its end (block: "%}", variable: "}}"). */
static int lex_tag(struct lexer *lx, bool block, bool *line_starting) {
    for (;;) {
        if (lx->pos >= lx->n) return fail(lx, RTX_EFORMAT, "unexpected end of template");
        if (!lx->depth) {
            size_t before = lx->pos;
            bool end = false;
            if (block && at(lx, "+%}")) {
                lx->pos += 3, end = true;
            } else if (at(lx, block ? "-%}" : "-}}")) {
                lx->pos += 3, end = true;
                skip_space(lx);
            } else if (at(lx, block ? "%}" : "}}")) {
                lx->pos += 2, end = true;
                if (block && lx->pos < lx->n && lx->s[lx->pos] == '\n') lx->pos++, lx->line++;
            }
            if (end) {
                if (!emit(lx, block ? T_BLOCK_END : T_VAR_END)) return RTX_ENOMEM;
                *line_starting = lx->pos > before && lx->s[lx->pos - 1] == '\n';
                return 0;
            }
        }
        char c = lx->s[lx->pos];
        int rc = 0;
        if (space_at(lx, lx->pos)) {
            skip_space(lx);
        } else if (c == '\'' || c == '"') {
            rc = lex_string(lx);
        } else if (is_digit(c)) {
            rc = lex_number(lx);
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = lx->pos;
            while (j < lx->n &&
                   ((lx->s[j] >= 'a' && lx->s[j] <= 'z') || (lx->s[j] >= 'A' && lx->s[j] <= 'Z') ||
                    is_digit(lx->s[j]) || lx->s[j] == '_'))
                j++;
            struct ct_tok *t = emit(lx, T_NAME);
            if (!t) return RTX_ENOMEM;
            t->p = lx->s + lx->pos, t->len = j - lx->pos;
            lx->pos = j;
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
            size_t l = 0;
            for (int k = 0; k < 6 && !l; k++)
                l = at(lx, two[k]) ? 2 : 0;
            if (!l && strchr("+-*/%~<>=.,:|()[]{};", c)) l = 1;
            if (!l || !c) return fail(lx, RTX_EFORMAT, "unexpected character '%c' in a tag", c);
            if (l == 1 && strchr("([{", c)) {
                if (lx->depth == CT_MAX_DEPTH)
                    return fail(lx, RTX_ELIMIT, "brackets nested deeper than %d", CT_MAX_DEPTH);
                lx->stack[lx->depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (l == 1 && strchr(")]}", c)) {
                if (!lx->depth) return fail(lx, RTX_EFORMAT, "unexpected '%c'", c);
                if (lx->stack[lx->depth - 1] != c)
                    return fail(lx, RTX_EFORMAT, "unexpected '%c', expected '%c'", c,
                                lx->stack[lx->depth - 1]);
                lx->depth--;
            }
            struct ct_tok *t = emit(lx, T_OP);
            if (!t) return RTX_ENOMEM;
            memcpy(t->op, lx->s + lx->pos, l);
            lx->pos += l;
        }
        if (rc) return rc;
    }
}

/* A comment from pos (after "{#" and its sign) to its end. */
static int lex_comment(struct lexer *lx, bool *line_starting) {
    const char *end = NULL;
    for (size_t i = lx->pos; !end && i + 1 < lx->n; i++)
        if (lx->s[i] == '#' && lx->s[i + 1] == '}') end = lx->s + i;
    if (!end) return fail(lx, RTX_EFORMAT, "missing end of comment tag");
    size_t q = (size_t)(end - lx->s), before = lx->pos;
    char sign = q > lx->pos && (lx->s[q - 1] == '-' || lx->s[q - 1] == '+') ? lx->s[q - 1] : 0;
    count_lines(lx, lx->pos, q + 2);
    lx->pos = q + 2;
    if (sign == '-') {
        skip_space(lx);
    } else if (!sign && lx->pos < lx->n && lx->s[lx->pos] == '\n') {
        lx->pos++, lx->line++;
    }
    *line_starting = lx->pos > before && lx->s[lx->pos - 1] == '\n';
    return 0;
}

/* The source with "\r\n" and "\r" as "\n", one trailing newline dropped. */
static char *normalize(struct ct_arena *a, const char *src, size_t len, size_t *n) {
    char *s = rtx__ct_alloc(a, len + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o && s[o - 1] == '\n') o--;
    s[o] = 0;
    *n = o;
    return s;
}

int rtx__ct_lex(struct ct_arena *a, const char *src, size_t len, const char *what,
                struct ct_tok **toks, size_t *n, struct rtx_err *err) {
    struct lexer lx = {.a = a, .line = 1, .what = what, .err = err};
    int rc = 0;
    if (!(lx.s = normalize(a, src, len, &lx.n))) rc = RTX_ENOMEM;
    bool line_starting = true;
    while (!rc && lx.pos < lx.n) {
        const char *open = NULL;
        for (size_t i = lx.pos; !open && i + 1 < lx.n; i++)
            if (lx.s[i] == '{' && (lx.s[i + 1] == '{' || lx.s[i + 1] == '%' || lx.s[i + 1] == '#'))
                open = lx.s + i;
        size_t q = open ? (size_t)(open - lx.s) : lx.n;
        char kind = open ? open[1] : 0;
        char sign = open && q + 2 < lx.n && (open[2] == '-' || open[2] == '+') ? open[2] : 0;
        rc = emit_data(&lx, lx.pos, q, sign, kind == '{', line_starting);
        count_lines(&lx, lx.pos, q);
        lx.pos = q;
        if (rc || !open) break;
        lx.pos += 2 + (sign ? 1 : 0);
        if (kind == '#') {
            rc = lex_comment(&lx, &line_starting);
            continue;
        }
        if (kind == '%') {
            size_t p = lx.pos;
            while (p < lx.n && (lx.s[p] == ' ' || lx.s[p] == '\t' || lx.s[p] == '\n'))
                p++;
            if (p + 3 <= lx.n && !memcmp(lx.s + p, "raw", 3) &&
                (p + 3 == lx.n || !strchr("abcdefghijklmnopqrstuvwxyz_0123456789", lx.s[p + 3]))) {
                rc = fail(&lx, RTX_EUNSUPPORTED, "{%% raw %%} is not supported");
                break;
            }
        }
        if (!emit(&lx, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN)) rc = RTX_ENOMEM;
        if (!rc) rc = lex_tag(&lx, kind == '%', &line_starting);
    }
    if (!rc && !emit(&lx, T_EOF)) rc = RTX_ENOMEM;
    if (rc == RTX_ENOMEM) rtx_err_set(err, rc, "%s: out of memory", what);
    if (rc) {
        rtx_free(lx.toks);
        return rc;
    }
    *toks = lx.toks;
    *n = lx.n_toks;
    return 0;
}
