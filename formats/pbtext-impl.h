/*
 * pbtext-impl.h - what the protobuf text parser's files share (formats/pbtext.c: messages,
 * formats/pbtext-lex.c: tokens and scalar values), included by nothing else.
 */
#ifndef RTX_FORMATS_PBTEXT_IMPL_H
#define RTX_FORMATS_PBTEXT_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "formats/formats.h"

enum tok_kind { PB_EOF, PB_IDENT, PB_NUMBER, PB_STRING, PB_PUNCT };

struct tok {
    enum tok_kind kind;
    const char *p; /* its text (a string with its quotes) */
    size_t len;
    int line, col;
};

struct parser {
    const char *text, *end, *cur; /* cur: where the lexer reads next */
    int line;
    const char *line_start;
    struct tok tok; /* the current token */
    const char *what;
    struct rtx_err *err;
    int depth;
    size_t alloc_bytes; /* what the message took so far, bytes */
    char path[320];     /* the field being read: "input[1].dims" */
    size_t path_len;
};

/* Sets err to "WHAT:LINE:COL: PATH: message" at token t; returns code. */
int rtx__pbtext_fail(struct parser *p, const struct tok *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The token's text as a C string in buf; false when it needs cap bytes or more. */
bool rtx__pbtext_text(const struct tok *t, char *buf, size_t cap);
/* The token as messages show it (quoted, at most 40 bytes), in buf. */
const char *rtx__pbtext_show(const struct tok *t, char *buf, size_t cap);
/* Reads the next token into p->tok; RTX_EFORMAT for a byte no token starts with or a string
 * without its closing quote. */
int rtx__pbtext_next(struct parser *p);
/* Consumes the punctuation c, or fails naming what is there instead. */
int rtx__pbtext_expect(struct parser *p, char c);
static inline bool pbtext_is_punct(const struct tok *t, char c) {
    return t->kind == PB_PUNCT && t->p[0] == c;
}
/* Bytes an element of the field takes in its message or array. */
size_t rtx__pbtext_elem_size(const ProtobufCFieldDescriptor *f);
/* rtx_malloc within the message's budget (RTX_PBTEXT_MAX_ALLOC): NULL with *rc set (RTX_ELIMIT
 * at t, or RTX_ENOMEM). */
void *rtx__pbtext_alloc(struct parser *p, const struct tok *t, size_t bytes, int *rc);
/* Reads one scalar value of field f (string and bytes values into rtx_malloc'ed memory) from
 * the current token on, into dst. */
int rtx__pbtext_scalar(struct parser *p, const ProtobufCFieldDescriptor *f, void *dst);

#endif /* RTX_FORMATS_PBTEXT_IMPL_H */
