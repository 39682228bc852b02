/*
 * chat-template-filters.c - the chat template's filters and tests with jinja2's semantics, and
 * attribute / item access and iteration as jinja2's sandbox does them (methods, string work and
 * global functions are in chat-template-strings.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "formats/chat-template-impl.h"

enum {
    F_TRIM,
    F_LENGTH,
    F_COUNT,
    F_TOJSON,
    F_UPPER,
    F_LOWER,
    F_CAPITALIZE,
    F_TITLE,
    F_DEFAULT,
    F_D,
    F_FIRST,
    F_LAST,
    F_JOIN,
    F_REPLACE,
    F_STRING,
    F_INT,
    F_FLOAT,
    F_LIST,
    F_ITEMS,
    F_SELECTATTR,
    F_REJECTATTR,
    F_SELECT,
    F_REJECT,
    F_MAP,
    F_SAFE,
    F_REVERSE,
    F_ABS,
    F_COUNT_
};
static const char *const filter_names[F_COUNT_] = {
    "trim",   "length",  "count", "tojson", "upper",   "lower",      "capitalize",
    "title",  "default", "d",     "first",  "last",    "join",       "replace",
    "string", "int",     "float", "list",   "items",   "selectattr", "rejectattr",
    "select", "reject",  "map",   "safe",   "reverse", "abs"};

enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_STRING_,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_NUMBER,
    T_INTEGER,
    T_FLOAT_,
    T_BOOLEAN,
    T_TRUE,
    T_FALSE,
    T_EQUALTO,
    T_EQ,
    T_NE,
    T_SAMEAS,
    T_IN,
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_LOWER,
    T_UPPER,
    T_GT,
    T_GE,
    T_LT,
    T_LE,
    T_GREATERTHAN,
    T_LESSTHAN,
    T_CALLABLE,
    T_COUNT_
};
static const char *const test_names[T_COUNT_] = {
    "defined",  "undefined", "none",        "string",      "mapping",  "iterable",
    "sequence", "number",    "integer",     "float",       "boolean",  "true",
    "false",    "equalto",   "eq",          "ne",          "sameas",   "in",
    "odd",      "even",      "divisibleby", "lower",       "upper",    "gt",
    "ge",       "lt",        "le",          "greaterthan", "lessthan", "callable"};

static const char *const method_names[] = {
    "strip", "lstrip",     "rstrip",  "startswith", "endswith", "split", "upper",  "lower",
    "title", "capitalize", "replace", "get",        "items",    "keys",  "values", NULL};

static int find(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n && names[i]; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

int rtx__ct_filter_id(const char *name) {
    return find(filter_names, F_COUNT_, name);
}
int rtx__ct_test_id(const char *name) {
    return find(test_names, T_COUNT_, name);
}
bool rtx__ct_is_method(const char *name) {
    return find(method_names, 100, name) >= 0;
}

/* ------------------------------------------------------------------------------------------
 * Access and iteration
 * ---------------------------------------------------------------------------------------- */

int rtx__ct_getattr(struct ct_ctx *c, struct ct_val a, const char *name, struct ct_val *out) {
    if (a.t == CT_UNDEF)
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined (reading its attribute '%s')",
                            a.name ? a.name : "value", name);
    struct ct_val *v =
        a.t == CT_DICT || a.t == CT_NS ? rtx__ct_dict_get(a.d, name, strlen(name)) : NULL;
    *out = v ? *v : ct_undef(name);
    return 0;
}

/* The byte offset of code point k of s (k <= its count). */
static size_t cp_offset(const struct ct_str *s, int64_t k) {
    size_t i = 0;
    for (int64_t j = 0; j < k && i < s->len; j++)
        i += ((uint8_t)s->p[i] < 0x80)   ? 1
             : ((uint8_t)s->p[i] < 0xE0) ? 2
             : ((uint8_t)s->p[i] < 0xF0) ? 3
                                         : 4;
    return i;
}

int rtx__ct_getitem(struct ct_ctx *c, struct ct_val a, struct ct_val k, struct ct_val *out) {
    if (a.t == CT_UNDEF)
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined (reading an item)",
                            a.name ? a.name : "value");
    *out = ct_undef(NULL);
    if (a.t == CT_DICT || a.t == CT_NS) {
        struct ct_val *v = rtx__ct_dict_find(a.d, k);
        if (v) *out = *v;
        return 0;
    }
    if (k.t != CT_INT && k.t != CT_BOOL) return 0;
    int64_t i = rtx__ct_int_of(k);
    if (a.t == CT_LIST && !a.l->gen) {
        if (i < 0) i += (int64_t)a.l->n;
        if (i >= 0 && i < (int64_t)a.l->n) *out = a.l->v[i];
    } else if (a.t == CT_STR) {
        int64_t n = (int64_t)rtx__ct_utf8_count(a.s->p, a.s->len);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            size_t off = cp_offset(a.s, i), l;
            rtx__ct_utf8_next(a.s->p + off, &l);
            return rtx__ct_str(c, a.s->p + off, l, out) ? 0 : RTX_ENOMEM;
        }
    }
    return 0;
}

int rtx__ct_iter(struct ct_ctx *c, struct ct_val v, struct ct_list **out) {
    static struct ct_list empty;
    if (v.t == CT_UNDEF) {
        *out = &empty;
        return 0;
    }
    if (v.t == CT_LIST) {
        *out = v.l;
        return 0;
    }
    if (v.t == CT_DICT) {
        struct ct_list *l = rtx__ct_list_new(c, v.d->n);
        if (!l) return RTX_ENOMEM;
        memcpy(l->v, v.d->k, v.d->n * sizeof *l->v);
        *out = l;
        return 0;
    }
    if (v.t == CT_STR) {
        struct ct_list *l = rtx__ct_list_new(c, rtx__ct_utf8_count(v.s->p, v.s->len));
        if (!l) return RTX_ENOMEM;
        for (size_t i = 0, k = 0, n; i < v.s->len; i += n, k++) {
            rtx__ct_utf8_next(v.s->p + i, &n);
            if (!rtx__ct_str(c, v.s->p + i, n, &l->v[k])) return RTX_ENOMEM;
        }
        *out = l;
        return 0;
    }
    return rtx__ct_fail(c, RTX_EINVAL, "'%s' object is not iterable", rtx__ct_type_name(v));
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

int rtx__ct_test(struct ct_ctx *c, int id, struct ct_val v, const struct ct_val *args, int n,
                 bool *res) {
    const struct ct_val *a = n > 0 ? &args[0] : NULL;
    bool lt;
    int rc = 0;
    if (id >= T_EQUALTO && id != T_ODD && id != T_EVEN && id != T_LOWER && id != T_UPPER &&
        id != T_CALLABLE && !a)
        return rtx__ct_fail(c, RTX_EINVAL, "test '%s' needs an argument", test_names[id]);
    switch (id) {
    case T_DEFINED: *res = v.t != CT_UNDEF; break;
    case T_UNDEFINED: *res = v.t == CT_UNDEF; break;
    case T_NONE: *res = v.t == CT_NONE; break;
    case T_STRING_: *res = v.t == CT_STR; break;
    case T_MAPPING: *res = v.t == CT_DICT; break;
    case T_ITERABLE:
        *res = v.t == CT_STR || v.t == CT_LIST || v.t == CT_DICT || v.t == CT_UNDEF;
        break;
    case T_SEQUENCE:
        *res = v.t == CT_STR || (v.t == CT_LIST && !v.l->gen) || v.t == CT_DICT || v.t == CT_UNDEF;
        break;
    case T_NUMBER: *res = v.t == CT_INT || v.t == CT_FLOAT || v.t == CT_BOOL; break;
    case T_INTEGER: *res = v.t == CT_INT; break;
    case T_FLOAT_: *res = v.t == CT_FLOAT; break;
    case T_BOOLEAN: *res = v.t == CT_BOOL; break;
    case T_TRUE: *res = v.t == CT_BOOL && v.b; break;
    case T_FALSE: *res = v.t == CT_BOOL && !v.b; break;
    case T_EQUALTO:
    case T_EQ: *res = rtx__ct_equal(v, *a); break;
    case T_NE: *res = !rtx__ct_equal(v, *a); break;
    case T_SAMEAS:
        *res =
            v.t == a->t && (v.t == CT_NONE || v.t == CT_UNDEF || (v.t == CT_BOOL && v.b == a->b) ||
                            ((v.t == CT_LIST || v.t == CT_DICT || v.t == CT_NS) && v.l == a->l));
        break;
    case T_IN: {
        struct ct_list *l;
        if (a->t == CT_STR && v.t == CT_STR) {
            *res = !v.s->len;
            for (size_t i = 0; !*res && i + v.s->len <= a->s->len; i++)
                *res = !memcmp(a->s->p + i, v.s->p, v.s->len);
        } else if (a->t == CT_DICT) {
            *res = rtx__ct_dict_find(a->d, v) != NULL;
        } else if (!(rc = rtx__ct_iter(c, *a, &l))) {
            *res = false;
            for (size_t i = 0; !*res && i < l->n; i++)
                *res = rtx__ct_equal(v, l->v[i]);
        }
        break;
    }
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY:
        if (!rtx__ct_is_int(v) || (id == T_DIVISIBLEBY && !rtx__ct_is_int(*a)))
            return rtx__ct_type_error(c, test_names[id], v);
        {
            int64_t x = rtx__ct_int_of(v), d = id == T_DIVISIBLEBY ? (rtx__ct_int_of(*a)) : 2;
            if (!d) return rtx__ct_fail(c, RTX_EINVAL, "integer modulo by zero");
            *res = id == T_ODD ? x % 2 != 0 : x % d == 0;
        }
        break;
    case T_LOWER:
    case T_UPPER: {
        struct ct_val s, m;
        if ((rc = rtx__ct_stringify(c, v, &s)) ||
            (rc = rtx__ct_map_case(c, s.s, id == T_LOWER ? 'L' : 'U', &m)))
            return rc;
        *res = rtx__ct_equal(s, m);
        break;
    }
    case T_GT:
    case T_GREATERTHAN: rc = rtx__ct_less(c, *a, v, res); break;
    case T_LT:
    case T_LESSTHAN: rc = rtx__ct_less(c, v, *a, res); break;
    case T_GE: rc = rtx__ct_less(c, v, *a, &lt), *res = !lt; break;
    case T_LE: rc = rtx__ct_less(c, *a, v, &lt), *res = !lt; break;
    case T_CALLABLE: *res = v.t == CT_MACRO || v.t == CT_FUNC; break;
    default: return rtx__ct_fail(c, RTX_EINVAL, "unknown test");
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Filters
 * ---------------------------------------------------------------------------------------- */

/* Python's int(s) for a string: whitespace around, a sign, digits with single underscores. */
static bool parse_int(const struct ct_str *s, int64_t *out) {
    size_t a = 0, z = s->len;
    while (a < z && rtx__ct_is_space((uint8_t)s->p[a]))
        a++;
    while (z > a && rtx__ct_is_space((uint8_t)s->p[z - 1]))
        z--;
    char buf[32];
    size_t o = 0;
    if (a < z && (s->p[a] == '+' || s->p[a] == '-')) buf[o++] = s->p[a++];
    if (a == z) return false;
    for (size_t i = a; i < z; i++) {
        char ch = s->p[i];
        if (ch == '_' && i > a && i + 1 < z && s->p[i - 1] != '_' && s->p[i + 1] != '_') continue;
        if (ch < '0' || ch > '9' || o >= sizeof buf - 1) return false;
        buf[o++] = ch;
    }
    buf[o] = 0;
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    *out = v;
    return !errno;
}

/* Python's float(s) for a string (strtod accepts what it accepts, and a little more). */
static bool parse_float(const struct ct_str *s, double *out) {
    char *end;
    const char *p = s->p;
    while (*p && rtx__ct_is_space((uint8_t)*p))
        p++;
    if (!*p || memchr(p, '_', strlen(p)) || (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))
        return false;
    *out = strtod(p, &end);
    while (*end && rtx__ct_is_space((uint8_t)*end))
        end++;
    return end != p && !*end;
}

static int to_int(struct ct_ctx *c, struct ct_val v, const struct ct_val *def,
                  struct ct_val *out) {
    double f;
    *out = def ? *def : ct_int(0);
    if (v.t == CT_INT || v.t == CT_BOOL) {
        *out = ct_int(rtx__ct_int_of(v));
    } else if (v.t == CT_FLOAT ||
               (v.t == CT_STR && !parse_int(v.s, &out->i) && parse_float(v.s, &f))) {
        f = v.t == CT_FLOAT ? v.f : f;
        if (!isfinite(f) || fabs(f) >= 9.2e18)
            return rtx__ct_fail(c, RTX_EINVAL, "cannot convert float %g to integer", f);
        *out = ct_int((int64_t)f);
    } else if (v.t == CT_STR && parse_int(v.s, &out->i)) {
        out->t = CT_INT;
    }
    return 0;
}

/* select / reject / selectattr / rejectattr: the items whose (attribute's) test holds. */
static int select_items(struct ct_ctx *c, struct ct_val seq, const struct ct_args *a, bool attr,
                        bool keep, struct ct_val *out) {
    struct ct_list *in, *res;
    int rc = rtx__ct_iter(c, seq, &in);
    if (rc || !(res = rtx__ct_list_new(c, in->n))) return rc ? rc : RTX_ENOMEM;
    const struct ct_val *an = attr ? rtx__ct_arg(a, 0, NULL) : NULL,
                        *tn = rtx__ct_arg(a, attr ? 1 : 0, NULL);
    if ((attr && (rc = rtx__ct_need_str(c, "selectattr", an))) ||
        (tn && (rc = rtx__ct_need_str(c, "select", tn))))
        return rc;
    int test = tn ? rtx__ct_test_id(tn->s->p) : -1;
    if (tn && test < 0)
        return rtx__ct_fail(c, RTX_EUNSUPPORTED, "test '%s' is not supported", tn->s->p);
    res->n = 0, res->gen = true;
    int skip = (attr ? 2 : 1);
    for (size_t i = 0; i < in->n; i++) {
        struct ct_val x = in->v[i];
        bool r;
        if (attr && (rc = rtx__ct_getattr(c, x, an->s->p, &x))) return rc;
        if (test < 0)
            r = rtx__ct_truthy(x);
        else if ((rc = rtx__ct_test(c, test, x, a->v + skip, a->n > skip ? a->n - skip : 0, &r)))
            return rc;
        if (r == keep) res->v[res->n++] = in->v[i];
    }
    *out = (struct ct_val){.t = CT_LIST, .l = res};
    return 0;
}

static int map_items(struct ct_ctx *c, struct ct_val seq, const struct ct_args *a,
                     struct ct_val *out) {
    struct ct_list *in, *res;
    int rc = rtx__ct_iter(c, seq, &in);
    if (rc || !(res = rtx__ct_list_new(c, in->n))) return rc ? rc : RTX_ENOMEM;
    res->gen = true;
    const struct ct_val *attr = rtx__ct_arg(a, -1, "attribute"),
                        *def = rtx__ct_arg(a, -1, "default"), *fname = rtx__ct_arg(a, 0, NULL);
    int f = fname && fname->t == CT_STR ? rtx__ct_filter_id(fname->s->p) : -1;
    if (!attr && f < 0)
        return rtx__ct_fail(c, RTX_EUNSUPPORTED, "map: needs attribute= or a supported filter");
    for (size_t i = 0; i < in->n && !rc; i++) {
        if (attr) {
            if ((rc = rtx__ct_need_str(c, "map", attr)) ||
                (rc = rtx__ct_getattr(c, in->v[i], attr->s->p, &res->v[i])))
                return rc;
            if (def && res->v[i].t == CT_UNDEF) res->v[i] = *def;
        } else {
            rc = rtx__ct_filter(c, f, in->v[i], a->v + 1, a->n - 1, a->kwn, a->kw, a->n_kw,
                                &res->v[i]);
        }
    }
    *out = (struct ct_val){.t = CT_LIST, .l = res};
    return rc;
}

static int tojson(struct ct_ctx *c, struct ct_val v, const struct ct_args *a, struct ct_val *out) {
    struct ct_json_opts o = {
        .item_sep = ", ", .key_sep = ": ", .item_sep_len = 2, .key_sep_len = 2};
    const struct ct_val *ind = rtx__ct_arg(a, 1, "indent"),
                        *ea = rtx__ct_arg(a, 0, "ensure_ascii"),
                        *sep = rtx__ct_arg(a, 2, "separators"),
                        *sk = rtx__ct_arg(a, 3, "sort_keys");
    char spaces[64];
    o.ensure_ascii = ea && rtx__ct_truthy(*ea);
    o.sort_keys = sk && rtx__ct_truthy(*sk);
    if (ind && ind->t == CT_INT) {
        if (ind->i < 0 || ind->i > 32) return rtx__ct_fail(c, RTX_EINVAL, "tojson: bad indent");
        memset(spaces, ' ', (size_t)ind->i);
        o.indent = spaces, o.indent_len = (size_t)ind->i;
    } else if (ind && ind->t == CT_STR) {
        o.indent = ind->s->p, o.indent_len = ind->s->len;
    } else if (ind && ind->t != CT_NONE) {
        return rtx__ct_type_error(c, "tojson indent", *ind);
    }
    if (o.indent) o.item_sep = ",", o.item_sep_len = 1;
    if (sep && sep->t == CT_LIST && sep->l->n == 2 && sep->l->v[0].t == CT_STR &&
        sep->l->v[1].t == CT_STR) {
        o.item_sep = sep->l->v[0].s->p, o.item_sep_len = sep->l->v[0].s->len;
        o.key_sep = sep->l->v[1].s->p, o.key_sep_len = sep->l->v[1].s->len;
    } else if (sep && sep->t != CT_NONE) {
        return rtx__ct_type_error(c, "tojson separators", *sep);
    }
    struct ct_buf b = {0};
    int rc = rtx__ct_to_json(c, v, &o, &b, 0);
    if (!rc && !rtx__ct_str(c, b.p ? b.p : "", b.len, out)) rc = RTX_ENOMEM;
    rtx_free(b.p);
    return rc;
}

static int join(struct ct_ctx *c, struct ct_val v, const struct ct_args *a, struct ct_val *out) {
    struct ct_list *l;
    const struct ct_val *d = rtx__ct_arg(a, 0, "d"), *attr = rtx__ct_arg(a, 1, "attribute");
    int rc = rtx__ct_iter(c, v, &l);
    if (!rc && d && (rc = rtx__ct_need_str(c, "join", d))) return rc;
    struct ct_buf b = {0};
    for (size_t i = 0; !rc && i < l->n; i++) {
        struct ct_val x = l->v[i];
        if (i && d)
            rc = rtx__ct_buf_put(&b, d->s->p, d->s->len, CT_MAX_MEMORY) ? rtx__ct_oom(c) : 0;
        if (!rc && attr && attr->t == CT_STR) rc = rtx__ct_getattr(c, x, attr->s->p, &x);
        if (!rc) rc = rtx__ct_to_str(c, x, &b);
    }
    if (!rc && !rtx__ct_str(c, b.p ? b.p : "", b.len, out)) rc = RTX_ENOMEM;
    rtx_free(b.p);
    return rc;
}

static int reverse(struct ct_ctx *c, struct ct_val v, struct ct_val *out) {
    if (v.t == CT_STR) {
        char *buf = rtx__ct_alloc(&c->arena, v.s->len + 1);
        if (!buf) return rtx__ct_oom(c);
        for (size_t i = 0, l; i < v.s->len; i += l) {
            rtx__ct_utf8_next(v.s->p + i, &l);
            memcpy(buf + v.s->len - i - l, v.s->p + i, l);
        }
        return rtx__ct_str(c, buf, v.s->len, out) ? 0 : RTX_ENOMEM;
    }
    struct ct_list *in, *res;
    int rc = rtx__ct_iter(c, v, &in);
    if (rc || !(res = rtx__ct_list_new(c, in->n))) return rc ? rc : RTX_ENOMEM;
    for (size_t i = 0; i < in->n; i++)
        res->v[i] = in->v[in->n - 1 - i];
    res->gen = v.t == CT_LIST; /* reversed(list) is an iterator */
    *out = (struct ct_val){.t = CT_LIST, .l = res};
    return 0;
}

int rtx__ct_filter(struct ct_ctx *c, int id, struct ct_val v, const struct ct_val *args, int n,
                   const char *const *kwn, const struct ct_val *kw, int n_kw, struct ct_val *out) {
    const struct ct_args a = {args, n, kwn, kw, n_kw};
    struct ct_val s;
    struct ct_list *l;
    int rc = 0;
    switch (id) {
    case F_TRIM: {
        const struct ct_val *chars = rtx__ct_arg(&a, 0, "chars");
        if (chars && chars->t != CT_NONE && (rc = rtx__ct_need_str(c, "trim", chars))) return rc;
        if ((rc = rtx__ct_stringify(c, v, &s))) return rc;
        return rtx__ct_strip(c, s.s, chars && chars->t == CT_STR ? chars->s : NULL, 'b', out);
    }
    case F_LENGTH:
    case F_COUNT:
        if (v.t == CT_STR)
            *out = ct_int((int64_t)rtx__ct_utf8_count(v.s->p, v.s->len));
        else if (v.t == CT_LIST && !v.l->gen)
            *out = ct_int((int64_t)v.l->n);
        else if (v.t == CT_DICT || v.t == CT_NS)
            *out = ct_int((int64_t)v.d->n);
        else if (v.t == CT_UNDEF)
            *out = ct_int(0);
        else
            return rtx__ct_fail(c, RTX_EINVAL, "object of type '%s' has no len()",
                                rtx__ct_type_name(v));
        return 0;
    case F_TOJSON: return tojson(c, v, &a, out);
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
        if ((rc = rtx__ct_stringify(c, v, &s))) return rc;
        return rtx__ct_map_case(c, s.s, id == F_UPPER ? 'U' : id == F_LOWER ? 'L' : 'C', out);
    case F_TITLE:
        if ((rc = rtx__ct_stringify(c, v, &s))) return rc;
        return rtx__ct_map_case(c, s.s, 'J', out);
    case F_DEFAULT:
    case F_D: {
        const struct ct_val *def = rtx__ct_arg(&a, 0, "default_value"),
                            *b = rtx__ct_arg(&a, 1, "boolean");
        bool use = v.t == CT_UNDEF || (b && rtx__ct_truthy(*b) && !rtx__ct_truthy(v));
        if (!use)
            *out = v;
        else if (def)
            *out = *def;
        else
            return rtx__ct_str(c, "", 0, out) ? 0 : RTX_ENOMEM;
        return 0;
    }
    case F_FIRST:
    case F_LAST:
        if ((rc = rtx__ct_iter(c, v, &l))) return rc;
        *out = l->n ? l->v[id == F_FIRST ? 0 : l->n - 1] : ct_undef(NULL);
        return 0;
    case F_JOIN: return join(c, v, &a, out);
    case F_REPLACE: {
        const struct ct_val *old = rtx__ct_arg(&a, 0, "old"), *new = rtx__ct_arg(&a, 1, "new"),
                            *cnt = rtx__ct_arg(&a, 2, "count");
        struct ct_val so, sn;
        if (!old || !new) return rtx__ct_fail(c, RTX_EINVAL, "replace: needs old and new");
        if ((rc = rtx__ct_stringify(c, v, &s)) || (rc = rtx__ct_stringify(c, *old, &so)) ||
            (rc = rtx__ct_stringify(c, *new, &sn)))
            return rc;
        if (cnt && cnt->t != CT_NONE && !rtx__ct_is_int(*cnt))
            return rtx__ct_type_error(c, "replace", *cnt);
        return rtx__ct_replace(c, s.s, so.s, sn.s,
                               cnt && rtx__ct_is_int(*cnt) ? (rtx__ct_int_of(*cnt)) : -1, out);
    }
    case F_STRING: return rtx__ct_stringify(c, v, out);
    case F_INT: return to_int(c, v, rtx__ct_arg(&a, 0, "default"), out);
    case F_FLOAT: {
        const struct ct_val *def = rtx__ct_arg(&a, 0, "default");
        double f;
        if (v.t == CT_INT || v.t == CT_BOOL || v.t == CT_FLOAT)
            *out = ct_float(v.t == CT_FLOAT ? v.f : v.t == CT_INT ? (double)v.i : v.b);
        else if (v.t == CT_STR && parse_float(v.s, &f))
            *out = ct_float(f);
        else
            *out = def ? *def : ct_float(0);
        return 0;
    }
    case F_LIST:
    case F_ITEMS:
        if (id == F_ITEMS && v.t != CT_DICT && v.t != CT_UNDEF)
            return rtx__ct_type_error(c, "items", v);
        if (id == F_ITEMS && v.t == CT_DICT)
            return rtx__ct_method(c, v, "items", NULL, 0, NULL, NULL, 0, out);
        if ((rc = rtx__ct_iter(c, v, &l))) return rc;
        {
            struct ct_list *r = rtx__ct_list_new(c, l->n);
            if (!r) return RTX_ENOMEM;
            if (l->n) memcpy(r->v, l->v, l->n * sizeof *r->v);
            *out = (struct ct_val){.t = CT_LIST, .l = r};
        }
        return 0;
    case F_SELECTATTR:
    case F_REJECTATTR:
    case F_SELECT:
    case F_REJECT:
        return select_items(c, v, &a, id == F_SELECTATTR || id == F_REJECTATTR,
                            id == F_SELECTATTR || id == F_SELECT, out);
    case F_MAP: return map_items(c, v, &a, out);
    case F_SAFE: *out = v; return 0;
    case F_REVERSE: return reverse(c, v, out);
    case F_ABS:
        if (v.t == CT_INT || v.t == CT_BOOL)
            *out = ct_int(llabs(rtx__ct_int_of(v)));
        else if (v.t == CT_FLOAT)
            *out = ct_float(fabs(v.f));
        else
            return rtx__ct_type_error(c, "abs", v);
        return 0;
    default: return rtx__ct_fail(c, RTX_EINVAL, "unknown filter");
    }
}
