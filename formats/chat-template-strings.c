/*
 * chat-template-strings.c - the chat template's string work with Python's semantics: case
 * mapping (with the full mappings Python uses where one character becomes several, and
 * lower()'s final sigma), strip, replace and split; the string and dict methods templates call
 * (str.strip, .startswith, .split, dict.get, .items, ...), and the global functions of
 * transformers' environment (raise_exception, strftime_now) and of jinja2's (namespace, range,
 * dict). chat-template-filters.c has the filters and tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "formats/chat-template-impl.h"

static const char *const func_names[FN_COUNT] = {"raise_exception", "namespace", "strftime_now",
                                                 "range", "dict"};

int rtx__ct_func_id(const char *name) {
    for (int i = 0; i < FN_COUNT; i++)
        if (!strcmp(func_names[i], name)) return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * String helpers
 * ---------------------------------------------------------------------------------------- */

/* Python's full case mappings where they are not one character to one (Unicode's
 * SpecialCasing.txt, unconditional part): lower, upper, title. */
static const struct special_case {
    uint32_t cp;
    const char *lower, *upper, *title;
} special_cases[] = {
    {0x00DF, NULL, "SS", "Ss"},
    {0x0130, "i\xcc\x87", NULL, NULL},
    {0x0149, NULL, "\xca\xbcN", "\xca\xbcN"},
    {0x01F0, NULL, "J\xcc\x8c", "J\xcc\x8c"},
    {0x0390, NULL, "\xce\x99\xcc\x88\xcc\x81", "\xce\x99\xcc\x88\xcc\x81"},
    {0x03B0, NULL, "\xce\xa5\xcc\x88\xcc\x81", "\xce\xa5\xcc\x88\xcc\x81"},
    {0x0587, NULL, "\xd4\xb5\xd5\x92", "\xd4\xb5\xd6\x82"},
    {0x1E96, NULL, "H\xcc\xb1", "H\xcc\xb1"},
    {0x1E97, NULL, "T\xcc\x88", "T\xcc\x88"},
    {0x1E98, NULL, "W\xcc\x8a", "W\xcc\x8a"},
    {0x1E99, NULL, "Y\xcc\x8a", "Y\xcc\x8a"},
    {0x1E9A, NULL, "A\xca\xbe", "A\xca\xbe"},
    {0xFB00, NULL, "FF", "Ff"},
    {0xFB01, NULL, "FI", "Fi"},
    {0xFB02, NULL, "FL", "Fl"},
    {0xFB03, NULL, "FFI", "Ffi"},
    {0xFB04, NULL, "FFL", "Ffl"},
    {0xFB05, NULL, "ST", "St"},
    {0xFB06, NULL, "ST", "St"},
};

static bool is_cased(uint32_t cp) {
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT;
}

/* One character case-mapped (how: 'L' lower, 'U' upper, 'T' title) into out; its length. */
static size_t case_char(uint32_t cp, int how, char *out) {
    for (size_t i = 0; i < sizeof special_cases / sizeof *special_cases; i++) {
        const struct special_case *sc = &special_cases[i];
        const char *m = how == 'L' ? sc->lower : how == 'U' ? sc->upper : sc->title;
        if (sc->cp == cp && m) {
            memcpy(out, m, strlen(m));
            return strlen(m);
        }
    }
    utf8proc_int32_t x = (utf8proc_int32_t)cp;
    x = how == 'L' ? utf8proc_tolower(x) : how == 'U' ? utf8proc_toupper(x) : utf8proc_totitle(x);
    return rtx__ct_utf8_put(out, (uint32_t)x);
}

/* Python's upper ('U'), lower ('L'), title ('T': str.title), capitalize ('C'), and jinja2's
 * title filter ('J': each run after "-", whitespace, "(", "{", "[" or "<" starts upper-case,
 * the rest lower-case), with the full mappings above and lower()'s final sigma. */
int rtx__ct_map_case(struct ct_ctx *c, const struct ct_str *s, int mode, struct ct_val *out) {
    char *buf = rtx__ct_alloc(&c->arena, 3 * s->len + 1);
    if (!buf) return rtx__ct_oom(c);
    size_t o = 0;
    bool prev_cased = false, start = true;
    for (size_t i = 0, l; i < s->len; i += l) {
        uint32_t cp = rtx__ct_utf8_next(s->p + i, &l);
        int how = mode == 'U' || mode == 'L' ? mode
                  : mode == 'T'              ? (prev_cased ? 'L' : 'T')
                  : mode == 'C'              ? (i ? 'L' : 'T')
                                             : (start ? 'U' : 'L');
        if (mode == 'J') {
            bool sep = rtx__ct_is_space(cp) || (cp < 0x80 && strchr("-({[<", (int)cp));
            if (sep) how = 0;
            start = sep;
        }
        size_t nl;
        if (how == 'L' && cp == 0x3A3 && prev_cased &&
            !(i + l < s->len && is_cased(rtx__ct_utf8_next(s->p + i + l, &nl)))) {
            memcpy(buf + o, "\xcf\x82", 2); /* final sigma */
            o += 2;
        } else if (how) {
            o += case_char(cp, how, buf + o);
        } else {
            memcpy(buf + o, s->p + i, l);
            o += l;
        }
        prev_cased = is_cased(cp);
    }
    return rtx__ct_str(c, buf, o, out) ? 0 : RTX_ENOMEM;
}

static bool in_chars(uint32_t cp, const struct ct_str *chars) {
    if (!chars) return rtx__ct_is_space(cp);
    for (size_t i = 0, l; i < chars->len; i += l)
        if (rtx__ct_utf8_next(chars->p + i, &l) == cp) return true;
    return false;
}

/* str.strip / lstrip / rstrip (which: 'b', 'l', 'r') of whitespace or of chars. */
int rtx__ct_strip(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *chars, int which,
                  struct ct_val *out) {
    size_t a = 0, z = s->len, l;
    while (which != 'r' && a < z && in_chars(rtx__ct_utf8_next(s->p + a, &l), chars))
        a += l;
    while (which != 'l' && z > a) {
        size_t k = z - 1;
        while (k > a && ((uint8_t)s->p[k] & 0xC0) == 0x80)
            k--;
        if (!in_chars(rtx__ct_utf8_next(s->p + k, &l), chars)) break;
        z = k;
    }
    return rtx__ct_str(c, s->p + a, z - a, out) ? 0 : RTX_ENOMEM;
}

int rtx__ct_replace(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *old,
                    const struct ct_str *new, int64_t count, struct ct_val *out) {
    struct ct_buf b = {0};
    int rc = rtx__ct_buf_put(&b, "", 0, 0);
    size_t i = 0;
    for (int64_t k = 0; !rc && i <= s->len && (count < 0 || k < count);) {
        if (!old->len) { /* Python inserts new before every character and at the end */
            rc = rtx__ct_buf_put(&b, new->p, new->len, CT_MAX_MEMORY);
            k++;
            if (i == s->len) {
                i++;
                break;
            }
            size_t l;
            rtx__ct_utf8_next(s->p + i, &l);
            if (!rc) rc = rtx__ct_buf_put(&b, s->p + i, l, CT_MAX_MEMORY);
            i += l;
            continue;
        }
        const char *hit = NULL;
        for (size_t j = i; !hit && j + old->len <= s->len; j++)
            if (!memcmp(s->p + j, old->p, old->len)) hit = s->p + j;
        if (!hit) break;
        rc = rtx__ct_buf_put(&b, s->p + i, (size_t)(hit - s->p) - i, CT_MAX_MEMORY);
        if (!rc) rc = rtx__ct_buf_put(&b, new->p, new->len, CT_MAX_MEMORY);
        i = (size_t)(hit - s->p) + old->len;
        k++;
    }
    if (!rc && i < s->len) rc = rtx__ct_buf_put(&b, s->p + i, s->len - i, CT_MAX_MEMORY);
    if (!rc && !rtx__ct_str(c, b.p, b.len, out))
        rc = RTX_ENOMEM;
    else if (rc)
        rc = rc == RTX_ELIMIT ? rtx__ct_oom(c) : rtx__ct_fail(c, rc, "out of memory");
    rtx_free(b.p);
    return rc;
}

/* str.split(sep=None, maxsplit=-1). */
int rtx__ct_split(struct ct_ctx *c, const struct ct_str *s, const struct ct_str *sep,
                  int64_t maxsplit, struct ct_val *out) {
    struct ct_list *l = rtx__ct_list_new(c, 0);
    if (!l) return RTX_ENOMEM;
    size_t cap = 0, i = 0;
    for (;;) {
        size_t a = i, z, next, k;
        if (!sep) {
            while (a < s->len && rtx__ct_is_space(rtx__ct_utf8_next(s->p + a, &k)))
                a += k;
            if (a == s->len) break;
            z = a;
            if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
                z = s->len; /* the rest, as it is */
            } else {
                while (z < s->len && !rtx__ct_is_space(rtx__ct_utf8_next(s->p + z, &k)))
                    z += k;
            }
            next = z;
        } else {
            const char *hit = NULL;
            if (maxsplit < 0 || (int64_t)l->n < maxsplit)
                for (size_t j = a; !hit && j + sep->len <= s->len; j++)
                    if (!memcmp(s->p + j, sep->p, sep->len)) hit = s->p + j;
            z = hit ? (size_t)(hit - s->p) : s->len;
            next = hit ? z + sep->len : s->len + 1;
        }
        if (l->n == cap) {
            cap = cap ? 2 * cap : 8;
            struct ct_val *v = rtx__ct_alloc(&c->arena, cap * sizeof *v);
            if (!v) return rtx__ct_oom(c);
            if (l->n) memcpy(v, l->v, l->n * sizeof *v);
            l->v = v;
        }
        if (!rtx__ct_str(c, s->p + a, z - a, &l->v[l->n++])) return RTX_ENOMEM;
        if (next > s->len) break;
        i = next;
    }
    *out = (struct ct_val){.t = CT_LIST, .l = l};
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Methods and global functions
 * ---------------------------------------------------------------------------------------- */

static int dict_view(struct ct_ctx *c, const struct ct_dict *d, int which, struct ct_val *out) {
    struct ct_list *l = rtx__ct_list_new(c, d->n);
    if (!l) return RTX_ENOMEM;
    for (size_t i = 0; i < d->n; i++) {
        if (which == 'k') {
            l->v[i] = d->k[i];
        } else if (which == 'v') {
            l->v[i] = d->v[i];
        } else {
            struct ct_list *pair = rtx__ct_list_new(c, 2);
            if (!pair) return RTX_ENOMEM;
            pair->tuple = true;
            pair->v[0] = d->k[i], pair->v[1] = d->v[i];
            l->v[i] = (struct ct_val){.t = CT_LIST, .l = pair};
        }
    }
    *out = (struct ct_val){.t = CT_LIST, .l = l};
    return 0;
}

/* startswith / endswith with a string or a tuple of strings. */
static int affix(struct ct_ctx *c, const struct ct_str *s, const struct ct_val *x, bool start,
                 struct ct_val *out) {
    const struct ct_val *cands = x;
    size_t n = 1;
    if (x && x->t == CT_LIST && x->l->tuple) cands = x->l->v, n = x->l->n;
    for (size_t i = 0; i < n; i++) {
        int rc = rtx__ct_need_str(c, start ? "startswith" : "endswith", &cands[i]);
        if (rc) return rc;
        const struct ct_str *p = cands[i].s;
        if (p->len <= s->len && !memcmp(s->p + (start ? 0 : s->len - p->len), p->p, p->len)) {
            *out = ct_bool(true);
            return 0;
        }
    }
    *out = ct_bool(false);
    return 0;
}

int rtx__ct_method(struct ct_ctx *c, struct ct_val v, const char *name, const struct ct_val *args,
                   int n, const char *const *kwn, const struct ct_val *kw, int n_kw,
                   struct ct_val *out) {
    const struct ct_args a = {args, n, kwn, kw, n_kw};
    if (v.t == CT_UNDEF)
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined (calling its method '%s')",
                            v.name ? v.name : "value", name);
    if (v.t == CT_DICT) {
        if (!strcmp(name, "get")) {
            const struct ct_val *k = rtx__ct_arg(&a, 0, NULL), *def = rtx__ct_arg(&a, 1, NULL);
            if (!k) return rtx__ct_fail(c, RTX_EINVAL, "get: needs a key");
            struct ct_val *x = rtx__ct_dict_find(v.d, *k);
            *out = x ? *x : def ? *def : ct_none();
            return 0;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
            return dict_view(c, v.d, name[0] == 'i' ? 'i' : name[0], out);
    } else if (v.t == CT_STR) {
        const struct ct_val *x = rtx__ct_arg(&a, 0, NULL);
        int rc = 0;
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            if (x && x->t != CT_NONE && (rc = rtx__ct_need_str(c, name, x))) return rc;
            return rtx__ct_strip(c, v.s, x && x->t == CT_STR ? x->s : NULL,
                                 name[0] == 's' ? 'b' : name[0], out);
        }
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
            return affix(c, v.s, x, name[0] == 's', out);
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
            !strcmp(name, "capitalize"))
            return rtx__ct_map_case(c, v.s,
                                    name[0] == 'u'   ? 'U'
                                    : name[0] == 'l' ? 'L'
                                    : name[0] == 't' ? 'T'
                                                     : 'C',
                                    out);
        if (!strcmp(name, "split")) {
            const struct ct_val *sep = rtx__ct_arg(&a, 0, "sep"),
                                *max = rtx__ct_arg(&a, 1, "maxsplit");
            if (sep && sep->t != CT_NONE &&
                ((rc = rtx__ct_need_str(c, "split", sep)) || !sep->s->len))
                return rc ? rc : rtx__ct_fail(c, RTX_EINVAL, "split: empty separator");
            if (max && !rtx__ct_is_int(*max)) return rtx__ct_type_error(c, "split", *max);
            return rtx__ct_split(c, v.s, sep && sep->t == CT_STR ? sep->s : NULL,
                                 max ? (rtx__ct_int_of(*max)) : -1, out);
        }
        if (!strcmp(name, "replace")) {
            const struct ct_val *new = rtx__ct_arg(&a, 1, NULL), *cnt = rtx__ct_arg(&a, 2, NULL);
            if ((rc = rtx__ct_need_str(c, "replace", x)) ||
                (rc = rtx__ct_need_str(c, "replace", new)))
                return rc;
            if (cnt && !rtx__ct_is_int(*cnt)) return rtx__ct_type_error(c, "replace", *cnt);
            return rtx__ct_replace(c, v.s, x->s, new->s, cnt ? (rtx__ct_int_of(*cnt)) : -1, out);
        }
    }
    return rtx__ct_fail(c, RTX_EINVAL, "'%s' object has no attribute '%s'", rtx__ct_type_name(v),
                        name);
}

int rtx__ct_call_func(struct ct_ctx *c, int fn, const struct ct_val *args, int n,
                      const char *const *kwn, const struct ct_val *kw, int n_kw,
                      struct ct_val *out) {
    const struct ct_args a = {args, n, kwn, kw, n_kw};
    int rc = 0;
    switch (fn) {
    case FN_RAISE: {
        struct ct_val msg = ct_undef(NULL);
        if (n && (rc = rtx__ct_stringify(c, args[0], &msg))) return rc;
        return rtx__ct_fail(c, RTX_EINVAL, "raise_exception: %s", n ? msg.s->p : "");
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        struct ct_dict *d = rtx__ct_dict_new(c);
        if (!d) return RTX_ENOMEM;
        if (n > 1 || (n == 1 && args[0].t != CT_DICT))
            return rtx__ct_fail(c, RTX_EINVAL, "%s: expected keyword arguments", func_names[fn]);
        for (size_t i = 0; n == 1 && !rc && i < args[0].d->n; i++)
            rc = rtx__ct_dict_set(c, d, args[0].d->k[i], args[0].d->v[i]);
        for (int i = 0; !rc && i < n_kw; i++) {
            struct ct_val k;
            if (!rtx__ct_str(c, kwn[i], strlen(kwn[i]), &k)) return RTX_ENOMEM;
            rc = rtx__ct_dict_set(c, d, k, kw[i]);
        }
        *out = (struct ct_val){.t = fn == FN_DICT ? CT_DICT : CT_NS, .d = d};
        return rc;
    }
    case FN_STRFTIME: {
        const struct ct_val *f = rtx__ct_arg(&a, 0, NULL);
        if ((rc = rtx__ct_need_str(c, "strftime_now", f))) return rc;
        time_t now = time(NULL);
        struct tm tm;
        char buf[512];
        localtime_r(&now, &tm);
        size_t len = strftime(buf, sizeof buf, f->s->p, &tm);
        if (!len && f->s->len) return rtx__ct_fail(c, RTX_EINVAL, "strftime_now: bad format");
        return rtx__ct_str(c, buf, len, out) ? 0 : RTX_ENOMEM;
    }
    case FN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (n < 1 || n > 3 || n_kw)
            return rtx__ct_fail(c, RTX_EINVAL, "range: expected 1 to 3 integers");
        for (int i = 0; i < n; i++) {
            if (!rtx__ct_is_int(args[i])) return rtx__ct_type_error(c, "range", args[i]);
            v[n == 1 ? 1 : i] = rtx__ct_int_of(args[i]);
        }
        if (!v[2]) return rtx__ct_fail(c, RTX_EINVAL, "range() arg 3 must not be zero");
        int64_t count = v[2] > 0 ? (v[1] > v[0] ? (v[1] - v[0] + v[2] - 1) / v[2] : 0)
                                 : (v[0] > v[1] ? (v[0] - v[1] - v[2] - 1) / -v[2] : 0);
        if (count > CT_MAX_RANGE)
            return rtx__ct_fail(c, RTX_ELIMIT, "range too big (more than %d items)", CT_MAX_RANGE);
        struct ct_list *l = rtx__ct_list_new(c, (size_t)count);
        if (!l) return RTX_ENOMEM;
        for (int64_t i = 0; i < count; i++)
            l->v[i] = ct_int(v[0] + i * v[2]);
        *out = (struct ct_val){.t = CT_LIST, .l = l};
        return 0;
    }
    default: return rtx__ct_fail(c, RTX_EINVAL, "unknown function");
    }
}
