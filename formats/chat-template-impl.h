/*
 * chat-template-impl.h - what the chat template's files share (formats/chat-template*.c): the
 * values, the arena they live in, the lexer's tokens, the syntax tree, and the functions each
 * file provides to the others. Only those files include it.
 */
#ifndef RTX_FORMATS_CHAT_TEMPLATE_IMPL_H
#define RTX_FORMATS_CHAT_TEMPLATE_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"

#define CT_MAX_DEPTH 200                  /* nesting of syntax, and of evaluation (macro calls) */
#define CT_MAX_OUTPUT ((size_t)16 << 20)  /* bytes a render may produce */
#define CT_MAX_MEMORY ((size_t)256 << 20) /* bytes of values a render may allocate */
#define CT_MAX_STEPS 20000000L            /* statements and expressions a render may evaluate */
#define CT_MAX_RANGE 100000               /* elements of range(), as jinja2's sandbox */

/* ------------------------------------------------------------------------------------------
 * Arena: every value of a render (and every node of a template) comes from one, freed whole
 * ---------------------------------------------------------------------------------------- */

struct ct_chunk;

struct ct_arena {
    struct ct_chunk *head;
    size_t used, limit; /* bytes; limit 0: none */
    bool over;          /* an allocation went past the limit (not out of memory) */
};

void *rtx__ct_alloc(struct ct_arena *a, size_t n); /* zeroed; NULL: out of memory or limit */
void rtx__ct_arena_free(struct ct_arena *a);

/* ------------------------------------------------------------------------------------------
 * Values (Python's, as jinja2 sees them)
 * ---------------------------------------------------------------------------------------- */

enum ct_type {
    CT_UNDEF, /* jinja2's Undefined: prints as nothing, is false, fails on attribute access */
    CT_NONE,
    CT_BOOL,
    CT_INT,
    CT_FLOAT,
    CT_STR,
    CT_LIST, /* also tuples and generators (flags) */
    CT_DICT,
    CT_NS, /* namespace(): a dict whose attributes may be set */
    CT_MACRO,
    CT_FUNC, /* a built-in global function */
};

struct ct_str {
    size_t len; /* bytes; p is NUL-terminated */
    char p[];
};

struct ct_list {
    size_t n;
    bool tuple, gen; /* a tuple (repr with parentheses); a generator (selectattr, map) */
    struct ct_val *v;
};

struct ct_dict {
    size_t n, cap;
    struct ct_val *k, *v; /* insertion order, as Python's */
};

struct ct_val {
    uint8_t t; /* enum ct_type */
    union {
        bool b;
        int64_t i;
        double f;
        struct ct_str *s;
        struct ct_list *l;
        struct ct_dict *d;
        const struct ct_node *m; /* CT_MACRO */
        int fn;                  /* CT_FUNC: enum ct_func */
        const char *name;        /* CT_UNDEF: what was looked up, or NULL */
    };
};

enum ct_func { FN_RAISE, FN_NAMESPACE, FN_STRFTIME, FN_RANGE, FN_DICT, FN_COUNT };

static inline struct ct_val ct_undef(const char *name) {
    return (struct ct_val){.t = CT_UNDEF, .name = name};
}
static inline struct ct_val ct_none(void) {
    return (struct ct_val){.t = CT_NONE};
}
static inline struct ct_val ct_bool(bool b) {
    return (struct ct_val){.t = CT_BOOL, .b = b};
}
static inline struct ct_val ct_int(int64_t i) {
    return (struct ct_val){.t = CT_INT, .i = i};
}
static inline struct ct_val ct_float(double f) {
    return (struct ct_val){.t = CT_FLOAT, .f = f};
}

/* ------------------------------------------------------------------------------------------
 * The render context (chat-template.c) and errors
 * ---------------------------------------------------------------------------------------- */

struct ct_buf {
    char *p;
    size_t len, cap; /* bytes */
};

struct ct_frame;

struct ct_ctx {
    struct ct_arena arena;
    struct ct_buf out;
    const char *what;
    struct rtx_err *err;
    long steps;
    int depth;
    int line;              /* of the node being evaluated, for messages */
    struct ct_frame *root; /* the template's variables */
};

/* Sets err: "<what>: line N: <message>"; returns code. */
int rtx__ct_errv(struct rtx_err *err, int code, const char *what, int line, const char *fmt,
                 va_list ap);
/* Sets ctx->err: "<what>: line N: <message>" (the line of the node being evaluated); returns
 * code. */
int rtx__ct_fail(struct ct_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* RTX_ENOMEM or RTX_ELIMIT after a failed arena allocation, with the message set. */
int rtx__ct_oom(struct ct_ctx *c);

/* Appends to a growable buffer (rtx_malloc'ed); limit 0: none. RTX_ENOMEM, RTX_ELIMIT. */
int rtx__ct_buf_put(struct ct_buf *b, const char *s, size_t n, size_t limit);

/* ------------------------------------------------------------------------------------------
 * Values (chat-template-value.c)
 * ---------------------------------------------------------------------------------------- */

/* A string value of n bytes copied from s; false when the arena refuses (ctx error set). */
bool rtx__ct_str(struct ct_ctx *c, const char *s, size_t n, struct ct_val *out);
struct ct_list *rtx__ct_list_new(struct ct_ctx *c, size_t n); /* n slots, NULL on failure */
struct ct_dict *rtx__ct_dict_new(struct ct_ctx *c);
/* Sets key to v in d (replacing an equal key). RTX_ENOMEM / RTX_ELIMIT with ctx error set. */
int rtx__ct_dict_set(struct ct_ctx *c, struct ct_dict *d, struct ct_val k, struct ct_val v);
/* The value of the string key (n bytes) in d, or NULL. */
struct ct_val *rtx__ct_dict_get(const struct ct_dict *d, const char *key, size_t n);
struct ct_val *rtx__ct_dict_find(const struct ct_dict *d, struct ct_val key);

bool rtx__ct_truthy(struct ct_val v);
bool rtx__ct_equal(struct ct_val a, struct ct_val b);
/* a < b as Python compares them: *lt set; RTX_EINVAL (ctx error) when they do not compare. */
int rtx__ct_less(struct ct_ctx *c, struct ct_val a, struct ct_val b, bool *lt);
const char *rtx__ct_type_name(struct ct_val v); /* Python's: 'str', 'int', 'dict', ... */

/* str(v) and repr(v) appended to b (the arena's limit applies to b); tojson is Python's
 * json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys). */
int rtx__ct_to_str(struct ct_ctx *c, struct ct_val v, struct ct_buf *b);
int rtx__ct_repr(struct ct_ctx *c, struct ct_val v, struct ct_buf *b);
struct ct_json_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: none; else the string repeated per level */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
};
int rtx__ct_to_json(struct ct_ctx *c, struct ct_val v, const struct ct_json_opts *o,
                    struct ct_buf *b, int depth);
/* str(v) as a string value. */
int rtx__ct_stringify(struct ct_ctx *c, struct ct_val v, struct ct_val *out);

/* UTF-8: the code point at s (valid UTF-8) and its length. */
uint32_t rtx__ct_utf8_next(const char *s, size_t *len);
size_t rtx__ct_utf8_put(char *out, uint32_t cp);
size_t rtx__ct_utf8_count(const char *s, size_t n); /* code points */
bool rtx__ct_is_space(uint32_t cp);                 /* Python's str.isspace */

/* ------------------------------------------------------------------------------------------
 * Syntax tree (chat-template-parse.c builds it, chat-template.c runs it)
 * ---------------------------------------------------------------------------------------- */

enum ct_kind {
    /* statements */
    K_BODY,      /* v[n] */
    K_TEXT,      /* lit */
    K_OUT,       /* a */
    K_IF,        /* a cond, b then, c else (NULL or a K_BODY or a K_IF for elif) */
    K_FOR,       /* names[n_names] targets, a iterable, b filter (NULL), c body, d else */
    K_SET,       /* names[0] (and names[1]: attribute of a namespace) or names[]: tuple; a value */
    K_SET_BLOCK, /* names[0] = the rendering of c */
    K_MACRO,     /* name; names[] parameters, v[] their defaults (NULL: none); c body */
    K_BREAK,
    K_CONTINUE,
    K_BLOCK, /* c: a block rendered as is ({% generation %}) */
    /* expressions */
    K_LIT,    /* lit */
    K_NAME,   /* name */
    K_ATTR,   /* a.name */
    K_ITEM,   /* a[b] */
    K_SLICE,  /* a[v[0]:v[1]:v[2]] (each may be NULL) */
    K_CALL,   /* a(v..., kwn=kw...) */
    K_FILTER, /* op: the filter; a | name(v..., kw...) */
    K_TEST,   /* op: the test; a is name(v...) */
    K_BIN,    /* op: '+', '-', '*', '/', 'F' (//), '%', 'P' (**), '~' */
    K_NEG,
    K_POS,
    K_NOT,
    K_AND,
    K_OR,
    K_CMP,   /* a, then ops[i] v[i]...: chained comparisons */
    K_COND,  /* b if a else c */
    K_LIST,  /* v[n] */
    K_TUPLE, /* v[n] */
    K_DICT,  /* v[2n]: key, value, ... */
};

struct ct_node {
    uint8_t kind;
    int op;
    int line;
    struct ct_node *a, *b, *c, *d;
    struct ct_node **v; /* positional children, n of them */
    int n;
    struct ct_node **kw; /* keyword arguments' values, n_kw of them, named kwn[] */
    const char **kwn;
    int n_kw;
    const char *name;   /* NUL-terminated */
    const char **names; /* n_names */
    int n_names;
    void **ops; /* K_CMP: the operators as intptr_t, n of them: '=' '!' '<' 'l' (<=) '>' 'g'
                   (>=) 'i' (in) 'n' (not in) */
    struct ct_val lit;
};

struct rtx_chat_template {
    struct ct_arena arena; /* the nodes and their strings */
    struct ct_node *body;
    char *what;
};

/* ------------------------------------------------------------------------------------------
 * Lexer (chat-template-lex.c)
 * ---------------------------------------------------------------------------------------- */

enum ct_tok_type {
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING, /* value: decoded, in str */
    T_INT,
    T_FLOAT,
    T_OP, /* op: the operator's characters, e.g. "==", "(", "//" */
    T_EOF,
};

struct ct_tok {
    int type;
    int line;
    const char *p; /* T_DATA, T_NAME: the text; T_STRING: the decoded value */
    size_t len;    /* bytes */
    char op[3];
    int64_t i;
    double f;
};

/* Tokenizes a template as jinja2 does with trim_blocks and lstrip_blocks (and without
 * keep_trailing_newline): data, tag delimiters, and the tokens inside tags. Text lives in
 * arena a. RTX_EFORMAT naming the line for a lexical error; RTX_EUNSUPPORTED for {% raw %}. */
int rtx__ct_lex(struct ct_arena *a, const char *src, size_t len, const char *what,
                struct ct_tok **toks, size_t *n, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Parser (chat-template-parse.c) and built-ins (chat-template-filters.c)
 * ---------------------------------------------------------------------------------------- */

int rtx__ct_parse(struct rtx_chat_template *t, const struct ct_tok *toks, size_t n,
                  struct rtx_err *err);

/* The id of a filter, test, method or global function by name, or -1. */
int rtx__ct_filter_id(const char *name);
int rtx__ct_test_id(const char *name);
bool rtx__ct_is_method(const char *name);
int rtx__ct_func_id(const char *name);

/* Applies filter id to v with arguments (already evaluated). */
int rtx__ct_filter(struct ct_ctx *c, int id, struct ct_val v, const struct ct_val *args, int n,
                   const char *const *kwn, const struct ct_val *kw, int n_kw, struct ct_val *out);
/* Applies test id to v; *res its result. */
int rtx__ct_test(struct ct_ctx *c, int id, struct ct_val v, const struct ct_val *args, int n,
                 bool *res);
/* Calls the method name of v. */
int rtx__ct_method(struct ct_ctx *c, struct ct_val v, const char *name, const struct ct_val *args,
                   int n, const char *const *kwn, const struct ct_val *kw, int n_kw,
                   struct ct_val *out);
/* Calls a built-in global function. */
int rtx__ct_call_func(struct ct_ctx *c, int fn, const struct ct_val *args, int n,
                      const char *const *kwn, const struct ct_val *kw, int n_kw,
                      struct ct_val *out);
/* Attribute access (a.name: dict key, namespace attribute) and subscript (a[k]) as jinja2's
 * sandbox does them: Undefined when missing, an error on Undefined itself. */
int rtx__ct_getattr(struct ct_ctx *c, struct ct_val a, const char *name, struct ct_val *out);
int rtx__ct_getitem(struct ct_ctx *c, struct ct_val a, struct ct_val k, struct ct_val *out);
/* Iterates v as jinja2's for does: a list's elements, a dict's keys, a string's characters,
 * nothing for Undefined; an error for other types. */
int rtx__ct_iter(struct ct_ctx *c, struct ct_val v, struct ct_list **out);

/* Arguments of a filter, method or function: positional, then keyword. */
struct ct_args {
    const struct ct_val *v;
    int n;
    const char *const *kwn;
    const struct ct_val *kw;
    int n_kw;
};

/* The argument at position pos (-1: none) or named name (NULL: none), or NULL. */
static inline const struct ct_val *rtx__ct_arg(const struct ct_args *a, int pos,
                                               const char *name) {
    for (int i = 0; name && i < a->n_kw; i++)
        if (!strcmp(a->kwn[i], name)) return &a->kw[i];
    return pos >= 0 && pos < a->n ? &a->v[pos] : NULL;
}

static inline int rtx__ct_type_error(struct ct_ctx *c, const char *what, struct ct_val v) {
    return rtx__ct_fail(c, RTX_EINVAL, "%s: unsupported type '%s'", what, rtx__ct_type_name(v));
}

static inline int rtx__ct_need_str(struct ct_ctx *c, const char *what, const struct ct_val *v) {
    return v && v->t == CT_STR ? 0 : rtx__ct_type_error(c, what, v ? *v : ct_none());
}

/* An int or a bool (Python's bool is an int), and its value. */
static inline bool rtx__ct_is_int(struct ct_val v) {
    return v.t == CT_INT || v.t == CT_BOOL;
}
static inline int64_t rtx__ct_int_of(struct ct_val v) {
    return v.t == CT_INT ? v.i : v.t == CT_BOOL ? v.b : 0;
}

/* chat-template-strings.c: Python's upper ('U'), lower ('L'), str.title ('T'), capitalize
 * ('C') and jinja2's title filter ('J'); strip ('b' both ends, 'l', 'r') of whitespace or of
 * the characters of chars; replace (count < 0: all); split (sep NULL: whitespace runs). */
int rtx__ct_map_case(struct ct_ctx *c, const struct ct_str *s, int mode, struct ct_val *out);
int rtx__ct_strip(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *chars, int which,
                  struct ct_val *out);
int rtx__ct_replace(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *old,
                    const struct ct_str *new_, int64_t count, struct ct_val *out);
int rtx__ct_split(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *sep,
                  int64_t maxsplit, struct ct_val *out);

/* UTF-8 validation, shared with the tokenizer (formats/tokenizer.c): the code point at s and
 * its length, negative for an invalid or cut sequence. */
int32_t rtx__tok_utf8_next(const uint8_t *s, size_t n, size_t *len);

#endif /* RTX_FORMATS_CHAT_TEMPLATE_IMPL_H */
