/*
 * pbtext-lex.c - the protobuf text format's tokens and scalar values (formats/pbtext.c reads
 * the messages): identifiers, numbers, quoted strings and punctuation with their line and
 * column; integers (decimal, 0x hex, 0-led octal) checked against the range of their field's
 * type, floats (an f suffix, inf, nan), bools, enums by name or number, strings and bytes with
 * C escapes (octal, \x, \u, \U); and the message's allocation budget.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "formats/chat-template-impl.h" /* rtx__tok_utf8_next, rtx__ct_utf8_put */
#include "formats/pbtext-impl.h"

/* ------------------------------------------------------------------------------------------
 * Lexer
 * ---------------------------------------------------------------------------------------- */

int rtx__pbtext_fail(struct parser *p, const struct tok *t, int code, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a deep path keeps its last 80 bytes, so the message always fits */
    const char *path = p->path_len > 80 ? p->path + p->path_len - 77 : p->path;
    int plen = p->path_len > 80 ? 77 : (int)p->path_len;
    return rtx_err_set(p->err, code, "%s:%d:%d: %s%.*s%s%s", p->what, t->line, t->col,
                       p->path_len > 80 ? "..." : "", plen, path, plen ? ": " : "", msg);
}

bool rtx__pbtext_text(const struct tok *t, char *buf, size_t cap) {
    if (t->len >= cap) return false;
    memcpy(buf, t->p, t->len);
    buf[t->len] = '\0';
    return true;
}

/* The token as shown in messages: at most 40 bytes of it. */
const char *rtx__pbtext_show(const struct tok *t, char *buf, size_t cap) {
    if (t->kind == PB_EOF) return "the end of the text";
    snprintf(buf, cap, "'%.*s'%s", (int)(t->len > 40 ? 40 : t->len), t->p,
             t->len > 40 ? "..." : "");
    return buf;
}

static bool is_ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_ident_char(char c) {
    return is_ident_start(c) || is_digit(c);
}

/* A lexical error: its position alone (the field path would name the field before it). */
static int lex_fail(struct parser *p, const struct tok *t, const char *msg) {
    size_t keep = p->path_len;
    p->path_len = 0;
    int rc = rtx__pbtext_fail(p, t, RTX_EFORMAT, "%s", msg);
    p->path_len = keep;
    return rc;
}

/* Reads the next token into p->tok. */
int rtx__pbtext_next(struct parser *p) {
    const char *s = p->cur;
    for (;;) {
        while (s < p->end &&
               (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' || *s == '\f' || *s == '\v')) {
            if (*s == '\n') {
                p->line++;
                p->line_start = s + 1;
            }
            s++;
        }
        if (s < p->end && *s == '#') {
            while (s < p->end && *s != '\n')
                s++;
            continue;
        }
        break;
    }
    struct tok *t = &p->tok;
    t->p = s;
    t->line = p->line;
    t->col = (int)(s - p->line_start) + 1;
    if (s == p->end) {
        t->kind = PB_EOF;
        t->len = 0;
        p->cur = s;
        return 0;
    }
    const char *b = s;
    char c = *s;
    if (is_ident_start(c)) {
        while (s < p->end && is_ident_char(*s))
            s++;
        t->kind = PB_IDENT;
    } else if (is_digit(c) || c == '-' || c == '+' ||
               (c == '.' && s + 1 < p->end && is_digit(s[1]))) {
        /* as protobuf's tokenizer: a sign or digit, then letters, digits, '.', '+', '-' */
        s++;
        while (s < p->end && (is_ident_char(*s) || *s == '.' || *s == '+' || *s == '-'))
            s++;
        t->kind = PB_NUMBER;
    } else if (c == '"' || c == '\'') {
        s++;
        while (s < p->end && *s != c && *s != '\n') {
            if (*s == '\\' && s + 1 < p->end && s[1] != '\n') s++;
            s++;
        }
        t->len = (size_t)(s - b);
        t->kind = PB_STRING;
        if (s == p->end || *s != c) {
            p->cur = s;
            return lex_fail(p, t, "string without its closing quote");
        }
        s++;
    } else if (strchr("{}<>[]:,;", c)) {
        s++;
        t->kind = PB_PUNCT;
    } else {
        t->len = 1;
        char msg[40];
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            snprintf(msg, sizeof msg, "unexpected byte 0x%02x", (unsigned char)c);
        else
            snprintf(msg, sizeof msg, "unexpected character '%c'", c);
        return lex_fail(p, t, msg);
    }
    t->len = (size_t)(s - b);
    p->cur = s;
    return 0;
}

int rtx__pbtext_expect(struct parser *p, char c) {
    char b[64];
    if (!pbtext_is_punct(&p->tok, c))
        return rtx__pbtext_fail(p, &p->tok, RTX_EFORMAT, "expected '%c', found %s", c,
                                rtx__pbtext_show(&p->tok, b, sizeof b));
    return rtx__pbtext_next(p);
}

/* Bytes an element of the field takes in the message or its array. */
size_t rtx__pbtext_elem_size(const ProtobufCFieldDescriptor *f) {
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: return 8;
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM: return sizeof(int);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    }
    return 0;
}

void *rtx__pbtext_alloc(struct parser *p, const struct tok *t, size_t bytes, int *rc) {
    if (bytes > RTX_PBTEXT_MAX_ALLOC || p->alloc_bytes > RTX_PBTEXT_MAX_ALLOC - bytes) {
        *rc = rtx__pbtext_fail(p, t, RTX_ELIMIT, "the message needs more than %zu MiB",
                               (size_t)RTX_PBTEXT_MAX_ALLOC >> 20);
        return NULL;
    }
    void *q = rtx_malloc(bytes);
    if (!q) {
        *rc = rtx_err_set(p->err, RTX_ENOMEM, "%s: out of memory", p->what);
        return NULL;
    }
    p->alloc_bytes += bytes;
    return q;
}

/* ------------------------------------------------------------------------------------------
 * Scalar values
 * ---------------------------------------------------------------------------------------- */

/* An integer token: [+-] then 0x hex, 0 octal or decimal digits; *neg and *mag (the
 * magnitude). Anything else in the token makes it no integer. */
static bool parse_int(const struct tok *t, bool *neg, uint64_t *mag, bool *overflow) {
    const char *s = t->p, *e = t->p + t->len;
    *neg = false;
    *overflow = false;
    if (t->kind != PB_NUMBER) return false;
    if (*s == '-' || *s == '+') *neg = *s++ == '-';
    if (s == e) return false;
    unsigned base = 10;
    if (*s == '0' && s + 1 < e && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        if (s == e) return false;
    } else if (*s == '0' && s + 1 < e) {
        base = 8;
        s++;
    }
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = is_digit(*s)               ? (unsigned)(*s - '0')
                     : (*s >= 'a' && *s <= 'f') ? (unsigned)(*s - 'a' + 10)
                     : (*s >= 'A' && *s <= 'F') ? (unsigned)(*s - 'A' + 10)
                                                : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - d) / base) *overflow = true;
        v = v * base + d;
    }
    *mag = v;
    return true;
}

/* A decimal float: [+-] digits [. digits] [e [+-] digits] [f], or .digits...; or "inf",
 * "infinity", "nan" in any case, signed (*word set). */
static bool parse_float(const struct tok *t, double *out, bool *word) {
    char buf[128];
    if (t->len >= sizeof buf || (t->kind != PB_NUMBER && t->kind != PB_IDENT)) return false;
    memcpy(buf, t->p, t->len);
    buf[t->len] = '\0';
    const char *s = buf + (buf[0] == '-' || buf[0] == '+');
    *word = true;
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0) {
        *out = buf[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    if (strcasecmp(s, "nan") == 0) {
        *out = NAN;
        return true;
    }
    *word = false;
    if (t->kind != PB_NUMBER) return false;
    size_t n = strlen(buf);
    if (n > 1 && (buf[n - 1] == 'f' || buf[n - 1] == 'F')) buf[--n] = '\0';
    const char *q = s;
    bool digits = false;
    while (is_digit(*q))
        q++, digits = true;
    if (*q == '.')
        for (q++; is_digit(*q); q++)
            digits = true;
    if (!digits) return false;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!is_digit(*q)) return false;
        while (is_digit(*q))
            q++;
    }
    if (*q) return false;
    *out = strtod(buf, NULL); /* an overflow gives +-inf: the caller refuses it */
    return true;
}

static int hex_digit(char h) {
    return is_digit(h)              ? h - '0'
           : (h >= 'a' && h <= 'f') ? h - 'a' + 10
           : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                    : -1;
}

/* Decodes one escape (s points after the backslash, e ends the string) into buf at *n;
 * at is the token, col the escape's column. Output never exceeds the escape's own length. */
static int unescape(struct parser *p, struct tok at, const char **sp, const char *e, char *buf,
                    size_t *n) {
    const char *s = *sp;
    char c = *s++;
    switch (c) {
    case 'a': buf[(*n)++] = '\a'; break;
    case 'b': buf[(*n)++] = '\b'; break;
    case 'f': buf[(*n)++] = '\f'; break;
    case 'n': buf[(*n)++] = '\n'; break;
    case 'r': buf[(*n)++] = '\r'; break;
    case 't': buf[(*n)++] = '\t'; break;
    case 'v': buf[(*n)++] = '\v'; break;
    case '\\':
    case '\'':
    case '"':
    case '?': buf[(*n)++] = c; break;
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7': {
        unsigned v = (unsigned)(c - '0');
        for (int k = 0; k < 2 && s < e && *s >= '0' && *s <= '7'; k++)
            v = v * 8 + (unsigned)(*s++ - '0');
        if (v > 255) return rtx__pbtext_fail(p, &at, RTX_EFORMAT, "octal escape beyond \\377");
        buf[(*n)++] = (char)v;
        break;
    }
    case 'x':
    case 'u':
    case 'U': {
        int want = c == 'x' ? 2 : c == 'u' ? 4 : 8, got = 0;
        uint32_t v = 0;
        for (; got < want && s < e && hex_digit(*s) >= 0; got++, s++)
            v = v * 16 + (uint32_t)hex_digit(*s);
        if (got == 0 || (c != 'x' && got < want))
            return rtx__pbtext_fail(p, &at, RTX_EFORMAT,
                                    "\\%c escape needs %s%d hexadecimal digits", c,
                                    c == 'x' ? "1 or " : "", want);
        if (c == 'x') {
            buf[(*n)++] = (char)v;
        } else if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
            return rtx__pbtext_fail(p, &at, RTX_EFORMAT, "\\%c%0*X is no Unicode character", c,
                                    want, v);
        } else {
            *n += rtx__ct_utf8_put(buf + *n, v);
        }
        break;
    }
    default:
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            return rtx__pbtext_fail(p, &at, RTX_EFORMAT, "unknown escape (backslash, byte 0x%02x)",
                                    (unsigned char)c);
        return rtx__pbtext_fail(p, &at, RTX_EFORMAT, "unknown escape '\\%c'", c);
    }
    *sp = s;
    return 0;
}

/* Decodes the string tokens from the current one on (adjacent ones are concatenated, as
 * protobuf does) into an rtx_malloc'ed buffer with a NUL after *len bytes. A string field's
 * text must be UTF-8 without a NUL byte. */
static int parse_string(struct parser *p, bool is_string, char **out, size_t *len) {
    size_t cap = 0;
    struct parser q = *p; /* a look-ahead copy, for the room the strings need */
    while (q.tok.kind == PB_STRING) {
        cap += q.tok.len;
        if (rtx__pbtext_next(&q)) break; /* p meets the same error when it gets there */
    }
    struct tok first = p->tok;
    int rc = 0;
    char *buf = rtx__pbtext_alloc(p, &first, cap + 1, &rc);
    if (!buf) return rc;
    size_t n = 0;
    while (p->tok.kind == PB_STRING) {
        const char *s = p->tok.p + 1, *e = p->tok.p + p->tok.len - 1;
        while (s < e) {
            if (*s != '\\') {
                buf[n++] = *s++;
                continue;
            }
            struct tok at = p->tok;
            at.col += (int)(s - p->tok.p);
            s++;
            if ((rc = unescape(p, at, &s, e, buf, &n))) goto out;
        }
        if ((rc = rtx__pbtext_next(p))) goto out;
    }
    buf[n] = '\0';
    for (size_t i = 0; is_string && i < n;) {
        size_t l = 0;
        if (buf[i] == '\0' || rtx__tok_utf8_next((const uint8_t *)buf + i, n - i, &l) < 0) {
            rc = rtx__pbtext_fail(p, &first, RTX_EFORMAT,
                                  buf[i] ? "string is not valid UTF-8 (byte %zu)"
                                         : "string holds a NUL byte (byte %zu)",
                                  i);
            goto out;
        }
        i += l;
    }
    *out = buf;
    *len = n;
    return 0;
out:
    rtx_free(buf);
    return rc;
}

/* Reads one scalar of field f (the current token onwards) into dst. */
int rtx__pbtext_scalar(struct parser *p, const ProtobufCFieldDescriptor *f, void *dst) {
    struct tok t = p->tok;
    char b[64];
    bool neg, over;
    uint64_t mag = 0;
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES: {
        if (t.kind != PB_STRING)
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected a string, found %s",
                                    rtx__pbtext_show(&t, b, sizeof b));
        char *s = NULL;
        size_t len = 0;
        int rc = parse_string(p, f->type == PROTOBUF_C_TYPE_STRING, &s, &len);
        if (rc) return rc;
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            *(char **)dst = s;
        } else {
            ((ProtobufCBinaryData *)dst)->data = (uint8_t *)s;
            ((ProtobufCBinaryData *)dst)->len = len;
        }
        return 0;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        static const char *const words[] = {"false", "f", "False", "0", "true", "t", "True", "1"};
        for (int i = 0; i < 8 && t.kind != PB_STRING && t.kind != PB_PUNCT; i++)
            if (strlen(words[i]) == t.len && memcmp(words[i], t.p, t.len) == 0) {
                *(protobuf_c_boolean *)dst = i >= 4;
                return rtx__pbtext_next(p);
            }
        return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected true or false, found %s",
                                rtx__pbtext_show(&t, b, sizeof b));
    }
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
        double v;
        bool word;
        if (!parse_float(&t, &v, &word))
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected a number, found %s",
                                    rtx__pbtext_show(&t, b, sizeof b));
        if (!word && (isinf(v) || (f->type == PROTOBUF_C_TYPE_FLOAT && fabs(v) > FLT_MAX)))
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "%.*s is out of range for %s", (int)t.len,
                                    t.p, f->type == PROTOBUF_C_TYPE_FLOAT ? "float" : "double");
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)dst = (float)v;
        else
            *(double *)dst = v;
        return rtx__pbtext_next(p);
    }
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        const ProtobufCEnumValue *ev = NULL;
        if (t.kind == PB_IDENT) {
            char name[128];
            if (rtx__pbtext_text(&t, name, sizeof name))
                ev = protobuf_c_enum_descriptor_get_value_by_name(ed, name);
            if (!ev)
                return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "%s has no value named %s", ed->name,
                                        rtx__pbtext_show(&t, b, sizeof b));
        } else if (parse_int(&t, &neg, &mag, &over)) {
            if (!over && mag <= (uint64_t)INT32_MAX + neg)
                ev = protobuf_c_enum_descriptor_get_value(ed, neg ? (int)-(int64_t)mag : (int)mag);
            if (!ev)
                return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "%s has no value numbered %.*s",
                                        ed->name, (int)t.len, t.p);
        } else {
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected a value of %s, found %s",
                                    ed->name, rtx__pbtext_show(&t, b, sizeof b));
        }
        *(int *)dst = ev->value;
        return rtx__pbtext_next(p);
    }
    case PROTOBUF_C_TYPE_MESSAGE: break;
    default: {
        if (!parse_int(&t, &neg, &mag, &over))
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected an integer, found %s",
                                    rtx__pbtext_show(&t, b, sizeof b));
        bool is_signed = f->type == PROTOBUF_C_TYPE_INT32 || f->type == PROTOBUF_C_TYPE_SINT32 ||
                         f->type == PROTOBUF_C_TYPE_SFIXED32 || f->type == PROTOBUF_C_TYPE_INT64 ||
                         f->type == PROTOBUF_C_TYPE_SINT64 || f->type == PROTOBUF_C_TYPE_SFIXED64;
        bool wide = rtx__pbtext_elem_size(f) == 8;
        uint64_t max_pos = is_signed ? (wide ? (uint64_t)INT64_MAX : (uint64_t)INT32_MAX)
                                     : (wide ? UINT64_MAX : (uint64_t)UINT32_MAX);
        uint64_t max_neg = is_signed ? max_pos + 1 : 0;
        if (over || (neg ? mag > max_neg : mag > max_pos))
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "%.*s is out of range for %s%d",
                                    (int)t.len, t.p, is_signed ? "int" : "uint", wide ? 64 : 32);
        uint64_t u = neg ? (uint64_t)0 - mag : mag;
        if (wide)
            memcpy(dst, &u, 8);
        else {
            uint32_t w = (uint32_t)u;
            memcpy(dst, &w, 4);
        }
        return rtx__pbtext_next(p);
    }
    }
    return rtx__pbtext_fail(p, &t, RTX_EINTERNAL, "not a scalar");
}
