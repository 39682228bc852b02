/*
 * chat-template-value.c - the chat template's values: the arena they are allocated from,
 * strings, lists and dicts, and the Python semantics jinja2 gives them (truth, equality,
 * ordering, str(), repr(), json.dumps()), so that what a template prints is byte for byte
 * what jinja2 prints.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "formats/chat-template-impl.h"

/* ------------------------------------------------------------------------------------------
 * Arena and buffers
 * ---------------------------------------------------------------------------------------- */

struct ct_chunk {
    struct ct_chunk *next;
    size_t size, used; /* bytes of data */
    _Alignas(16) unsigned char data[];
};

void *rtx__ct_alloc(struct ct_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    struct ct_chunk *h = a->head;
    if (!h || h->size - h->used < n) {
        size_t size = n > 65536 - sizeof *h ? n : 65536 - sizeof *h;
        if (a->limit && a->used + size > a->limit) {
            a->over = true;
            return NULL;
        }
        struct ct_chunk *c = rtx_malloc(sizeof *c + size);
        if (!c) return NULL;
        c->size = size, c->used = 0;
        if (h && h->size - h->used > size - n) { /* keep filling the current chunk */
            c->next = h->next;
            h->next = c;
            h = c;
        } else {
            c->next = h;
            a->head = h = c;
        }
        a->used += size;
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

void rtx__ct_arena_free(struct ct_arena *a) {
    for (struct ct_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        rtx_free(c);
    }
    a->head = NULL, a->used = 0;
}

int rtx__ct_buf_put(struct ct_buf *b, const char *s, size_t n, size_t limit) {
    if (limit && b->len + n > limit) return RTX_ELIMIT;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = rtx_realloc(b->p, cap);
        if (!p) return RTX_ENOMEM;
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int rtx__ct_errv(struct rtx_err *err, int code, const char *what, int line, const char *fmt,
                 va_list ap) {
    char msg[220];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return rtx_err_set(err, code, "%s: line %d: %s", what, line, msg);
}

int rtx__ct_oom(struct ct_ctx *c) {
    if (c->arena.over)
        return rtx__ct_fail(c, RTX_ELIMIT, "the render allocated more than %zu MiB",
                            CT_MAX_MEMORY >> 20);
    return rtx__ct_fail(c, RTX_ENOMEM, "out of memory");
}

/* Appends to a scratch buffer whose size the arena's limit bounds. */
static int put(struct ct_ctx *c, struct ct_buf *b, const char *s, size_t n) {
    int rc = rtx__ct_buf_put(b, s, n, CT_MAX_MEMORY);
    if (rc == RTX_ELIMIT)
        return rtx__ct_fail(c, RTX_ELIMIT, "a value grew past %zu MiB", CT_MAX_MEMORY >> 20);
    return rc ? rtx__ct_fail(c, rc, "out of memory") : 0;
}

/* ------------------------------------------------------------------------------------------
 * UTF-8 and Python's whitespace
 * ---------------------------------------------------------------------------------------- */

uint32_t rtx__ct_utf8_next(const char *s, size_t *len) {
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80) return *len = 1, u[0];
    if (u[0] < 0xE0) return *len = 2, (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (u[0] < 0xF0)
        return *len = 3,
               (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return *len = 4, (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
                         (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

size_t rtx__ct_utf8_put(char *out, uint32_t cp) {
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

size_t rtx__ct_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((uint8_t)s[i] & 0xC0) != 0x80;
    return k;
}

bool rtx__ct_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ------------------------------------------------------------------------------------------
 * Strings, lists, dicts
 * ---------------------------------------------------------------------------------------- */

bool rtx__ct_str(struct ct_ctx *c, const char *s, size_t n, struct ct_val *out) {
    struct ct_str *v = rtx__ct_alloc(&c->arena, sizeof *v + n + 1);
    if (!v) return rtx__ct_oom(c), false;
    v->len = n;
    if (n) memcpy(v->p, s, n);
    v->p[n] = 0;
    *out = (struct ct_val){.t = CT_STR, .s = v};
    return true;
}

struct ct_list *rtx__ct_list_new(struct ct_ctx *c, size_t n) {
    struct ct_list *l = rtx__ct_alloc(&c->arena, sizeof *l);
    if (l && n && !(l->v = rtx__ct_alloc(&c->arena, n * sizeof *l->v))) l = NULL;
    if (!l) return rtx__ct_oom(c), NULL;
    l->n = n;
    return l;
}

struct ct_dict *rtx__ct_dict_new(struct ct_ctx *c) {
    struct ct_dict *d = rtx__ct_alloc(&c->arena, sizeof *d);
    if (!d) rtx__ct_oom(c);
    return d;
}

struct ct_val *rtx__ct_dict_find(const struct ct_dict *d, struct ct_val key) {
    for (size_t i = 0; i < d->n; i++)
        if (rtx__ct_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

struct ct_val *rtx__ct_dict_get(const struct ct_dict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == CT_STR && d->k[i].s->len == n && !memcmp(d->k[i].s->p, key, n))
            return &d->v[i];
    return NULL;
}

int rtx__ct_dict_set(struct ct_ctx *c, struct ct_dict *d, struct ct_val k, struct ct_val v) {
    struct ct_val *old = rtx__ct_dict_find(d, k);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        struct ct_val *nk = rtx__ct_alloc(&c->arena, cap * sizeof *nk),
                      *nv = rtx__ct_alloc(&c->arena, cap * sizeof *nv);
        if (!nk || !nv) return rtx__ct_oom(c);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = k, d->v[d->n++] = v;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Truth, equality, order
 * ---------------------------------------------------------------------------------------- */

bool rtx__ct_truthy(struct ct_val v) {
    switch (v.t) {
    case CT_UNDEF:
    case CT_NONE: return false;
    case CT_BOOL: return v.b;
    case CT_INT: return v.i != 0;
    case CT_FLOAT: return v.f != 0;
    case CT_STR: return v.s->len != 0;
    case CT_LIST: return v.l->gen || v.l->n; /* a generator object is always true */
    case CT_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_num(struct ct_val v) {
    return v.t == CT_BOOL || v.t == CT_INT || v.t == CT_FLOAT;
}

static double num(struct ct_val v) {
    return v.t == CT_FLOAT ? v.f : v.t == CT_INT ? (double)v.i : v.b;
}

bool rtx__ct_equal(struct ct_val a, struct ct_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != CT_FLOAT && b.t != CT_FLOAT) return rtx__ct_int_of(a) == rtx__ct_int_of(b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case CT_UNDEF:
    case CT_NONE: return true;
    case CT_STR: return a.s->len == b.s->len && !memcmp(a.s->p, b.s->p, a.s->len);
    case CT_LIST:
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n || a.l->gen || b.l->gen)
            return a.l == b.l;
        for (size_t i = 0; i < a.l->n; i++)
            if (!rtx__ct_equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case CT_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            struct ct_val *o = rtx__ct_dict_find(b.d, a.d->k[i]);
            if (!o || !rtx__ct_equal(a.d->v[i], *o)) return false;
        }
        return true;
    case CT_NS: return a.d == b.d;
    case CT_MACRO: return a.m == b.m;
    case CT_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

const char *rtx__ct_type_name(struct ct_val v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool",    "int",
                                        "float",     "str",      "list",    "dict",
                                        "Namespace", "Macro",    "function"};
    if (v.t == CT_LIST && v.l->tuple) return "tuple";
    if (v.t == CT_LIST && v.l->gen) return "generator";
    return names[v.t];
}

int rtx__ct_less(struct ct_ctx *c, struct ct_val a, struct ct_val b, bool *lt) {
    if (is_num(a) && is_num(b)) {
        if (a.t != CT_FLOAT && b.t != CT_FLOAT)
            *lt = rtx__ct_int_of(a) < rtx__ct_int_of(b);
        else
            *lt = num(a) < num(b);
        return 0;
    }
    if (a.t == CT_STR && b.t == CT_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int d = memcmp(a.s->p, b.s->p, n); /* UTF-8 byte order is code point order */
        *lt = d < 0 || (d == 0 && a.s->len < b.s->len);
        return 0;
    }
    if (a.t == CT_LIST && b.t == CT_LIST && !a.l->gen && !b.l->gen && a.l->tuple == b.l->tuple) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (rtx__ct_equal(a.l->v[i], b.l->v[i])) continue;
            return rtx__ct_less(c, a.l->v[i], b.l->v[i], lt);
        }
        *lt = a.l->n < b.l->n;
        return 0;
    }
    return rtx__ct_fail(c, RTX_EINVAL, "'<' not supported between instances of '%s' and '%s'",
                        rtx__ct_type_name(a), rtx__ct_type_name(b));
}

/* ------------------------------------------------------------------------------------------
 * str(), repr(), json.dumps()
 * ---------------------------------------------------------------------------------------- */

/* Python's repr of a float: the shortest digits that read back to it, in fixed notation for
 * exponents from -4 to 15 and scientific otherwise. */
static void float_repr(double f, char out[40]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    char dig[24];
    size_t nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    p += neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') dig[nd++] = *p;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int decpt = atoi(p + 1) + 1;
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt > 16 || decpt < -3) {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
        return;
    }
    if (decpt <= 0) {
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        memcpy(o, dig, nd);
        o += nd;
    } else if ((size_t)decpt >= nd) {
        memcpy(o, dig, nd);
        o += nd;
        for (size_t i = nd; i < (size_t)decpt; i++)
            *o++ = '0';
        *o++ = '.', *o++ = '0';
    } else {
        memcpy(o, dig, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, dig + decpt, nd - (size_t)decpt);
        o += nd - (size_t)decpt;
    }
    *o = 0;
}

/* Python's str.isprintable for one code point. */
static bool printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F) return false;
    if (cp < 0x7F) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static int str_repr(struct ct_ctx *c, const struct ct_str *s, struct ct_buf *b) {
    char q = memchr(s->p, '\'', s->len) && !memchr(s->p, '"', s->len) ? '"' : '\'';
    int rc = put(c, b, &q, 1);
    for (size_t i = 0, l; !rc && i < s->len; i += l) {
        uint32_t cp = rtx__ct_utf8_next(s->p + i, &l);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') {
            e[0] = '\\', e[1] = (char)cp;
            rc = put(c, b, e, 2);
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            e[0] = '\\', e[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
            rc = put(c, b, e, 2);
        } else if (!printable(cp)) {
            int n = snprintf(e, sizeof e,
                             cp < 0x100     ? "\\x%02x"
                             : cp < 0x10000 ? "\\u%04x"
                                            : "\\U%08x",
                             cp);
            rc = put(c, b, e, (size_t)n);
        } else {
            rc = put(c, b, s->p + i, l);
        }
    }
    return rc ? rc : put(c, b, &q, 1);
}

int rtx__ct_repr(struct ct_ctx *c, struct ct_val v, struct ct_buf *b) {
    int rc = 0;
    switch (v.t) {
    case CT_STR: return str_repr(c, v.s, b);
    case CT_UNDEF: return put(c, b, "Undefined", 9);
    case CT_LIST:
        if (v.l->gen) return rtx__ct_fail(c, RTX_EINVAL, "cannot print a generator object");
        rc = put(c, b, v.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; !rc && i < v.l->n; i++) {
            if (i) rc = put(c, b, ", ", 2);
            if (!rc) rc = rtx__ct_repr(c, v.l->v[i], b);
        }
        if (!rc && v.l->tuple && v.l->n == 1) rc = put(c, b, ",", 1);
        return rc ? rc : put(c, b, v.l->tuple ? ")" : "]", 1);
    case CT_DICT:
    case CT_NS:
        if (v.t == CT_NS) rc = put(c, b, "<Namespace ", 11);
        if (!rc) rc = put(c, b, "{", 1);
        for (size_t i = 0; !rc && i < v.d->n; i++) {
            if (i) rc = put(c, b, ", ", 2);
            if (!rc) rc = rtx__ct_repr(c, v.d->k[i], b);
            if (!rc) rc = put(c, b, ": ", 2);
            if (!rc) rc = rtx__ct_repr(c, v.d->v[i], b);
        }
        if (!rc) rc = put(c, b, "}", 1);
        return rc || v.t != CT_NS ? rc : put(c, b, ">", 1);
    default: return rtx__ct_to_str(c, v, b);
    }
}

int rtx__ct_to_str(struct ct_ctx *c, struct ct_val v, struct ct_buf *b) {
    char tmp[40];
    switch (v.t) {
    case CT_UNDEF: return 0;
    case CT_NONE: return put(c, b, "None", 4);
    case CT_BOOL: return v.b ? put(c, b, "True", 4) : put(c, b, "False", 5);
    case CT_INT: return put(c, b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)v.i));
    case CT_FLOAT: float_repr(v.f, tmp); return put(c, b, tmp, strlen(tmp));
    case CT_STR: return put(c, b, v.s->p, v.s->len);
    case CT_LIST:
    case CT_DICT:
    case CT_NS: return rtx__ct_repr(c, v, b);
    default: return rtx__ct_fail(c, RTX_EINVAL, "cannot print a %s", rtx__ct_type_name(v));
    }
}

int rtx__ct_stringify(struct ct_ctx *c, struct ct_val v, struct ct_val *out) {
    if (v.t == CT_STR) {
        *out = v;
        return 0;
    }
    struct ct_buf b = {0};
    int rc = rtx__ct_to_str(c, v, &b);
    if (!rc && !rtx__ct_str(c, b.p ? b.p : "", b.len, out)) rc = RTX_ENOMEM;
    rtx_free(b.p);
    return rc;
}

static int json_str(struct ct_ctx *c, const char *s, size_t n, bool ascii, struct ct_buf *b) {
    int rc = put(c, b, "\"", 1);
    for (size_t i = 0, l; !rc && i < n; i += l) {
        uint32_t cp = rtx__ct_utf8_next(s + i, &l);
        char e[16];
        const char *simple = cp == '"'    ? "\\\""
                             : cp == '\\' ? "\\\\"
                             : cp == '\n' ? "\\n"
                             : cp == '\r' ? "\\r"
                             : cp == '\t' ? "\\t"
                             : cp == '\b' ? "\\b"
                             : cp == '\f' ? "\\f"
                                          : NULL;
        if (simple) {
            rc = put(c, b, simple, 2);
        } else if (cp < 0x20 || (ascii && cp > 0x7E)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 | (v >> 10), 0xDC00 | (v & 0x3FF));
                rc = put(c, b, e, 12);
            } else {
                rc = put(c, b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", cp));
            }
        } else {
            rc = put(c, b, s + i, l);
        }
    }
    return rc ? rc : put(c, b, "\"", 1);
}

static int json_newline(struct ct_ctx *c, const struct ct_json_opts *o, struct ct_buf *b,
                        int depth) {
    int rc = put(c, b, "\n", 1);
    for (int i = 0; !rc && i < depth; i++)
        rc = put(c, b, o->indent, o->indent_len);
    return rc;
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as
 * their JSON text. */
static int json_key(struct ct_ctx *c, struct ct_val k, const struct ct_json_opts *o,
                    struct ct_buf *b) {
    if (k.t == CT_STR) return json_str(c, k.s->p, k.s->len, o->ensure_ascii, b);
    struct ct_buf t = {0};
    int rc = k.t == CT_NONE || k.t == CT_BOOL || k.t == CT_INT || k.t == CT_FLOAT
                 ? rtx__ct_to_json(c, k, o, &t, 0)
                 : rtx__ct_fail(c, RTX_EINVAL,
                                "keys must be str, int, float, bool or None, "
                                "not %s",
                                rtx__ct_type_name(k));
    if (!rc) rc = json_str(c, t.p, t.len, o->ensure_ascii, b);
    rtx_free(t.p);
    return rc;
}

int rtx__ct_to_json(struct ct_ctx *c, struct ct_val v, const struct ct_json_opts *o,
                    struct ct_buf *b, int depth) {
    if (depth > CT_MAX_DEPTH)
        return rtx__ct_fail(c, RTX_ELIMIT, "tojson: nested deeper than %d", CT_MAX_DEPTH);
    char tmp[40];
    int rc = 0;
    switch (v.t) {
    case CT_NONE: return put(c, b, "null", 4);
    case CT_BOOL: return v.b ? put(c, b, "true", 4) : put(c, b, "false", 5);
    case CT_INT: return rtx__ct_to_str(c, v, b);
    case CT_FLOAT:
        if (isnan(v.f)) return put(c, b, "NaN", 3);
        if (isinf(v.f)) return v.f < 0 ? put(c, b, "-Infinity", 9) : put(c, b, "Infinity", 8);
        float_repr(v.f, tmp);
        return put(c, b, tmp, strlen(tmp));
    case CT_STR: return json_str(c, v.s->p, v.s->len, o->ensure_ascii, b);
    case CT_LIST:
        if (v.l->gen) break;
        if (!v.l->n) return put(c, b, "[]", 2);
        rc = put(c, b, "[", 1);
        for (size_t i = 0; !rc && i < v.l->n; i++) {
            if (i) rc = put(c, b, o->item_sep, o->item_sep_len);
            if (!rc && o->indent) rc = json_newline(c, o, b, depth + 1);
            if (!rc) rc = rtx__ct_to_json(c, v.l->v[i], o, b, depth + 1);
        }
        if (!rc && o->indent) rc = json_newline(c, o, b, depth);
        return rc ? rc : put(c, b, "]", 1);
    case CT_DICT: {
        if (!v.d->n) return put(c, b, "{}", 2);
        size_t *order = rtx__ct_alloc(&c->arena, v.d->n * sizeof *order);
        if (!order) return rtx__ct_oom(c);
        for (size_t i = 0; i < v.d->n; i++)
            order[i] = i;
        for (size_t i = 1; o->sort_keys && i < v.d->n; i++) { /* insertion sort, stable */
            size_t x = order[i], j = i;
            for (bool lt = false; j > 0; j--) {
                if ((rc = rtx__ct_less(c, v.d->k[x], v.d->k[order[j - 1]], &lt))) return rc;
                if (!lt) break;
                order[j] = order[j - 1];
            }
            order[j] = x;
        }
        rc = put(c, b, "{", 1);
        for (size_t i = 0; !rc && i < v.d->n; i++) {
            if (i) rc = put(c, b, o->item_sep, o->item_sep_len);
            if (!rc && o->indent) rc = json_newline(c, o, b, depth + 1);
            if (!rc) rc = json_key(c, v.d->k[order[i]], o, b);
            if (!rc) rc = put(c, b, o->key_sep, o->key_sep_len);
            if (!rc) rc = rtx__ct_to_json(c, v.d->v[order[i]], o, b, depth + 1);
        }
        if (!rc && o->indent) rc = json_newline(c, o, b, depth);
        return rc ? rc : put(c, b, "}", 1);
    }
    default: break;
    }
    return rtx__ct_fail(c, RTX_EINVAL, "tojson: Object of type %s is not JSON serializable",
                        rtx__ct_type_name(v));
}
