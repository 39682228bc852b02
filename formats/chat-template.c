/*
 * chat-template.c - chat templates (tokenizer_config.json's "chat_template"): rendering a
 * conversation into a prompt exactly as Hugging Face's apply_chat_template does with jinja2.
 *
 * DESIGN
 * A template is lexed (chat-template-lex.c) and parsed (chat-template-parse.c) once, into a
 * syntax tree that is immutable afterwards, so one template may be rendered from several
 * threads. A render walks the tree (this file) with jinja2's semantics: a for loop's body gets
 * a fresh scope each iteration (a set inside it is not seen by the next iteration nor after the
 * loop, which is why templates use namespace()), if does not open a scope, macros see their
 * arguments and the template's top level. Values live in an arena freed with the render; the
 * arena, the output and the number of evaluation steps are bounded, so a hostile template
 * fails with RTX_ELIMIT instead of exhausting memory or hanging. The environment is
 * transformers': trim_blocks and lstrip_blocks, the loop controls extension, the
 * {% generation %} block, raise_exception, strftime_now, and a tojson that is Python's
 * json.dumps (not jinja2's HTML-safe one); a render gets messages, add_generation_prompt,
 * bos_token and eos_token, and tools and documents set to none, as apply_chat_template passes
 * them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/chat-template-impl.h"

struct ct_frame {
    struct ct_frame *up;
    struct ct_dict vars;
};

enum { CT_BREAK = 1, CT_CONTINUE = 2 };

int rtx__ct_fail(struct ct_ctx *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rtx__ct_errv(c->err, code, c->what, c->line, fmt, ap);
    va_end(ap);
    return rc;
}

static int exec(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n);
static int eval(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n, struct ct_val *out);

static int emit(struct ct_ctx *c, const char *s, size_t len) {
    int rc = rtx__ct_buf_put(&c->out, s, len, CT_MAX_OUTPUT);
    if (rc == RTX_ELIMIT)
        return rtx__ct_fail(c, rc, "the rendered text passed %zu MiB", CT_MAX_OUTPUT >> 20);
    return rc ? rtx__ct_fail(c, rc, "out of memory") : 0;
}

static int set_var(struct ct_ctx *c, struct ct_frame *f, const char *name, struct ct_val v) {
    struct ct_val *old = rtx__ct_dict_get(&f->vars, name, strlen(name));
    if (old) {
        *old = v;
        return 0;
    }
    struct ct_val k;
    if (!rtx__ct_str(c, name, strlen(name), &k)) return RTX_ENOMEM;
    return rtx__ct_dict_set(c, &f->vars, k, v);
}

static struct ct_val lookup(const struct ct_frame *f, const char *name) {
    for (; f; f = f->up) {
        struct ct_val *v = rtx__ct_dict_get(&f->vars, name, strlen(name));
        if (v) return *v;
    }
    int fn = rtx__ct_func_id(name);
    return fn >= 0 ? (struct ct_val){.t = CT_FUNC, .fn = fn} : ct_undef(name);
}

/* ------------------------------------------------------------------------------------------
 * Operators
 * ---------------------------------------------------------------------------------------- */

static bool is_num(struct ct_val v) {
    return v.t == CT_INT || v.t == CT_FLOAT || v.t == CT_BOOL;
}
static double as_float(struct ct_val v) {
    return v.t == CT_FLOAT ? v.f : (double)rtx__ct_int_of(v);
}

static int overflow(struct ct_ctx *c) {
    return rtx__ct_fail(c, RTX_ELIMIT, "integer overflow (past 64 bits)");
}

/* s repeated k times (str * int, list * int). */
static int repeat(struct ct_ctx *c, struct ct_val s, int64_t k, struct ct_val *out) {
    if (k < 0) k = 0;
    if (s.t == CT_STR) {
        if (s.s->len && (uint64_t)k > CT_MAX_MEMORY / s.s->len) return rtx__ct_oom(c);
        char *buf = rtx__ct_alloc(&c->arena, s.s->len * (size_t)k + 1);
        if (!buf) return rtx__ct_oom(c);
        for (int64_t i = 0; i < k; i++)
            memcpy(buf + (size_t)i * s.s->len, s.s->p, s.s->len);
        return rtx__ct_str(c, buf, s.s->len * (size_t)k, out) ? 0 : RTX_ENOMEM;
    }
    if (s.l->n && (uint64_t)k > CT_MAX_MEMORY / 16 / s.l->n) return rtx__ct_oom(c);
    struct ct_list *l = rtx__ct_list_new(c, s.l->n * (size_t)k);
    if (!l) return RTX_ENOMEM;
    for (int64_t i = 0; i < k; i++)
        memcpy(l->v + (size_t)i * s.l->n, s.l->v, s.l->n * sizeof *l->v);
    l->tuple = s.l->tuple;
    *out = (struct ct_val){.t = CT_LIST, .l = l};
    return 0;
}

static int arith(struct ct_ctx *c, int op, struct ct_val a, struct ct_val b, struct ct_val *out) {
    if (a.t == CT_UNDEF || b.t == CT_UNDEF) {
        struct ct_val u = a.t == CT_UNDEF ? a : b;
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined", u.name ? u.name : "value");
    }
    if (op == '+' && a.t == CT_STR && b.t == CT_STR) {
        struct ct_buf buf = {0};
        int rc = rtx__ct_buf_put(&buf, a.s->p, a.s->len, CT_MAX_MEMORY);
        if (!rc) rc = rtx__ct_buf_put(&buf, b.s->p, b.s->len, CT_MAX_MEMORY);
        if (!rc && !rtx__ct_str(c, buf.p, buf.len, out))
            rc = RTX_ENOMEM;
        else if (rc)
            rc = rtx__ct_oom(c);
        rtx_free(buf.p);
        return rc;
    }
    if (op == '+' && a.t == CT_LIST && b.t == CT_LIST && !a.l->gen && !b.l->gen &&
        a.l->tuple == b.l->tuple) {
        struct ct_list *l = rtx__ct_list_new(c, a.l->n + b.l->n);
        if (!l) return RTX_ENOMEM;
        if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof *l->v);
        if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof *l->v);
        l->tuple = a.l->tuple;
        *out = (struct ct_val){.t = CT_LIST, .l = l};
        return 0;
    }
    if (op == '*' && (a.t == CT_STR || (a.t == CT_LIST && !a.l->gen)) &&
        (b.t == CT_INT || b.t == CT_BOOL))
        return repeat(c, a, rtx__ct_int_of(b), out);
    if (op == '*' && (b.t == CT_STR || (b.t == CT_LIST && !b.l->gen)) &&
        (a.t == CT_INT || a.t == CT_BOOL))
        return repeat(c, b, rtx__ct_int_of(a), out);
    if (!is_num(a) || !is_num(b)) {
        static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
        const char *ops = "+-*/F%P";
        return rtx__ct_fail(c, RTX_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'",
                            names[strchr(ops, op) - ops], rtx__ct_type_name(a),
                            rtx__ct_type_name(b));
    }
    bool ints = a.t != CT_FLOAT && b.t != CT_FLOAT;
    int64_t x = rtx__ct_int_of(a), y = rtx__ct_int_of(b), r;
    double p = as_float(a), q = as_float(b);
    if ((op == '/' || op == 'F' || op == '%') && (ints ? y == 0 : q == 0))
        return rtx__ct_fail(c, RTX_EINVAL, "division by zero");
    switch (op) {
    case '+':
        if (!ints) return *out = ct_float(p + q), 0;
        if (__builtin_add_overflow(x, y, &r)) return overflow(c);
        return *out = ct_int(r), 0;
    case '-':
        if (!ints) return *out = ct_float(p - q), 0;
        if (__builtin_sub_overflow(x, y, &r)) return overflow(c);
        return *out = ct_int(r), 0;
    case '*':
        if (!ints) return *out = ct_float(p * q), 0;
        if (__builtin_mul_overflow(x, y, &r)) return overflow(c);
        return *out = ct_int(r), 0;
    case '/': return *out = ct_float(p / q), 0;
    case 'F':
        if (!ints) return *out = ct_float(floor(p / q)), 0;
        if (x == INT64_MIN && y == -1) return overflow(c);
        r = x / y;
        if (x % y && ((x < 0) != (y < 0))) r--;
        return *out = ct_int(r), 0;
    case '%':
        if (!ints) {
            double m = fmod(p, q);
            if (m != 0 && ((m < 0) != (q < 0))) m += q;
            return *out = ct_float(m == 0 ? copysign(0, q) : m), 0;
        }
        if (y == -1) return *out = ct_int(0), 0;
        r = x % y;
        if (r && ((r < 0) != (y < 0))) r += y;
        return *out = ct_int(r), 0;
    default: /* 'P' */
        if (!ints || y < 0) {
            if (p == 0 && q < 0)
                return rtx__ct_fail(c, RTX_EINVAL, "0.0 cannot be raised to a negative power");
            return *out = ct_float(pow(p, q)), 0;
        }
        if (x == 0 || x == 1) return *out = ct_int(y == 0 ? 1 : x), 0;
        if (x == -1) return *out = ct_int(y % 2 ? -1 : 1), 0;
        r = 1;
        for (int64_t i = 0; i < y; i++) /* |x| >= 2: past 64 bits within 63 steps */
            if (__builtin_mul_overflow(r, x, &r)) return overflow(c);
        return *out = ct_int(r), 0;
    }
}

static int concat(struct ct_ctx *c, struct ct_val a, struct ct_val b, struct ct_val *out) {
    struct ct_buf buf = {0};
    int rc = rtx__ct_to_str(c, a, &buf);
    if (!rc) rc = rtx__ct_to_str(c, b, &buf);
    if (!rc && !rtx__ct_str(c, buf.p ? buf.p : "", buf.len, out)) rc = RTX_ENOMEM;
    rtx_free(buf.p);
    return rc;
}

static int contains(struct ct_ctx *c, struct ct_val x, struct ct_val seq, bool *res) {
    if (seq.t == CT_STR) {
        if (x.t != CT_STR)
            return rtx__ct_fail(c, RTX_EINVAL,
                                "'in <string>' requires string as left operand, "
                                "not %s",
                                rtx__ct_type_name(x));
        *res = !x.s->len;
        for (size_t i = 0; !*res && i + x.s->len <= seq.s->len; i++)
            *res = !memcmp(seq.s->p + i, x.s->p, x.s->len);
        return 0;
    }
    if (seq.t == CT_DICT || seq.t == CT_NS) {
        *res = rtx__ct_dict_find(seq.d, x) != NULL;
        return 0;
    }
    if (seq.t == CT_UNDEF || seq.t == CT_LIST) {
        *res = false;
        for (size_t i = 0; seq.t == CT_LIST && !*res && i < seq.l->n; i++)
            *res = rtx__ct_equal(x, seq.l->v[i]);
        return 0;
    }
    return rtx__ct_fail(c, RTX_EINVAL, "argument of type '%s' is not iterable",
                        rtx__ct_type_name(seq));
}

static int compare(struct ct_ctx *c, int op, struct ct_val a, struct ct_val b, bool *res) {
    bool lt;
    int rc = 0;
    switch (op) {
    case '=': *res = rtx__ct_equal(a, b); break;
    case '!': *res = !rtx__ct_equal(a, b); break;
    case '<': rc = rtx__ct_less(c, a, b, res); break;
    case '>': rc = rtx__ct_less(c, b, a, res); break;
    case 'l': rc = rtx__ct_less(c, b, a, &lt), *res = !lt; break;
    case 'g': rc = rtx__ct_less(c, a, b, &lt), *res = !lt; break;
    case 'i': rc = contains(c, a, b, res); break;
    default: rc = contains(c, a, b, &lt), *res = !lt; break; /* 'n': not in */
    }
    if (!rc && (a.t == CT_UNDEF || b.t == CT_UNDEF) && op != '=' && op != '!' && op != 'i' &&
        op != 'n')
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined",
                            a.t == CT_UNDEF && a.name ? a.name
                            : b.name                  ? b.name
                                                      : "value");
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Expressions
 * ---------------------------------------------------------------------------------------- */

/* Evaluates n's positional and keyword arguments into arena arrays. */
static int eval_args(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n,
                     struct ct_val **args, struct ct_val **kw) {
    *args = n->n ? rtx__ct_alloc(&c->arena, (size_t)n->n * sizeof **args) : NULL;
    *kw = n->n_kw ? rtx__ct_alloc(&c->arena, (size_t)n->n_kw * sizeof **kw) : NULL;
    if ((n->n && !*args) || (n->n_kw && !*kw)) return rtx__ct_oom(c);
    int rc = 0;
    for (int i = 0; !rc && i < n->n; i++)
        rc = eval(c, f, n->v[i], &(*args)[i]);
    for (int i = 0; !rc && i < n->n_kw; i++)
        rc = eval(c, f, n->kw[i], &(*kw)[i]);
    return rc;
}

/* Renders body into a string value (macro calls, block sets). */
static int capture(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *body,
                   struct ct_val *out) {
    struct ct_buf saved = c->out;
    c->out = (struct ct_buf){0};
    int rc = exec(c, f, body);
    if (!rc && !rtx__ct_str(c, c->out.p ? c->out.p : "", c->out.len, out)) rc = RTX_ENOMEM;
    rtx_free(c->out.p);
    c->out = saved;
    return rc;
}

static int call_macro(struct ct_ctx *c, const struct ct_node *m, const struct ct_val *args, int n,
                      const char *const *kwn, const struct ct_val *kw, int n_kw,
                      struct ct_val *out) {
    if (n > m->n_names)
        return rtx__ct_fail(c, RTX_EINVAL, "macro '%s' takes not more than %d argument(s)",
                            m->name, m->n_names);
    struct ct_frame *f = rtx__ct_alloc(&c->arena, sizeof *f);
    if (!f) return rtx__ct_oom(c);
    f->up = c->root;
    int rc = 0;
    for (int k = 0; !rc && k < n_kw; k++) {
        int p = 0;
        while (p < m->n_names && strcmp(m->names[p], kwn[k]))
            p++;
        if (p == m->n_names || p < n)
            return rtx__ct_fail(c, RTX_EINVAL, "macro '%s': unexpected keyword argument '%s'",
                                m->name, kwn[k]);
    }
    for (int p = 0; !rc && p < m->n_names; p++) {
        struct ct_val v = ct_undef(m->names[p]);
        bool given = p < n;
        if (given) v = args[p];
        for (int k = 0; !given && k < n_kw; k++)
            if (!strcmp(m->names[p], kwn[k])) v = kw[k], given = true;
        if (!given && m->v[p]) rc = eval(c, f, m->v[p], &v);
        if (!rc) rc = set_var(c, f, m->names[p], v);
    }
    if (++c->depth > CT_MAX_DEPTH)
        return rtx__ct_fail(c, RTX_ELIMIT, "macro calls nested deeper than %d", CT_MAX_DEPTH);
    if (!rc) rc = capture(c, f, m->c, out);
    c->depth--;
    return rc;
}

static int eval_call(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n,
                     struct ct_val *out) {
    struct ct_val callee, *args, *kw;
    const struct ct_node *fn = n->a;
    int rc = eval(c, f, fn->kind == K_ATTR ? fn->a : fn, &callee);
    if (!rc) rc = eval_args(c, f, n, &args, &kw);
    if (rc) return rc;
    c->line = n->line;
    if (fn->kind == K_ATTR)
        return rtx__ct_method(c, callee, fn->name, args, n->n, n->kwn, kw, n->n_kw, out);
    if (callee.t == CT_FUNC)
        return rtx__ct_call_func(c, callee.fn, args, n->n, n->kwn, kw, n->n_kw, out);
    if (callee.t == CT_MACRO) return call_macro(c, callee.m, args, n->n, n->kwn, kw, n->n_kw, out);
    if (callee.t == CT_UNDEF)
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined",
                            callee.name ? callee.name : "value");
    return rtx__ct_fail(c, RTX_EINVAL, "'%s' object is not callable", rtx__ct_type_name(callee));
}

static int eval_slice(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n,
                      struct ct_val *out) {
    struct ct_val a, b[3];
    int rc = eval(c, f, n->a, &a);
    for (int i = 0; !rc && i < 3; i++) {
        b[i] = ct_none();
        if (n->v[i]) rc = eval(c, f, n->v[i], &b[i]);
        if (!rc && b[i].t != CT_NONE && b[i].t != CT_INT && b[i].t != CT_BOOL)
            rc = rtx__ct_fail(c, RTX_EINVAL, "slice indices must be integers or None");
    }
    if (rc) return rc;
    if (a.t == CT_UNDEF)
        return rtx__ct_fail(c, RTX_EINVAL, "'%s' is undefined", a.name ? a.name : "value");
    bool str = a.t == CT_STR;
    if (!str && (a.t != CT_LIST || a.l->gen)) {
        *out = ct_undef(NULL);
        return 0;
    }
    struct ct_list *chars = NULL;
    if (str && (rc = rtx__ct_iter(c, a, &chars))) return rc;
    const struct ct_list *src = str ? chars : a.l;
    int64_t len = (int64_t)src->n, step = b[2].t == CT_NONE ? 1 : rtx__ct_int_of(b[2]);
    if (!step) return rtx__ct_fail(c, RTX_EINVAL, "slice step cannot be zero");
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1, idx[2];
    for (int i = 0; i < 2; i++) { /* Python's PySlice_AdjustIndices */
        if (b[i].t == CT_NONE) {
            idx[i] = step > 0 ? (i ? len : 0) : (i ? -1 : len - 1);
            continue;
        }
        int64_t v = rtx__ct_int_of(b[i]);
        if (v < 0) v += len;
        idx[i] = v < lo ? lo : v > hi ? hi : v;
    }
    struct ct_list *l = rtx__ct_list_new(c, 0);
    if (!l) return RTX_ENOMEM;
    int64_t count = step > 0 ? (idx[1] > idx[0] ? (idx[1] - idx[0] + step - 1) / step : 0)
                             : (idx[0] > idx[1] ? (idx[0] - idx[1] - step - 1) / -step : 0);
    if (count && !(l->v = rtx__ct_alloc(&c->arena, (size_t)count * sizeof *l->v)))
        return rtx__ct_oom(c);
    for (int64_t i = 0; i < count; i++)
        l->v[l->n++] = src->v[idx[0] + i * step];
    l->tuple = !str && a.l->tuple;
    if (!str) {
        *out = (struct ct_val){.t = CT_LIST, .l = l};
        return 0;
    }
    struct ct_buf buf = {0};
    for (size_t i = 0; !rc && i < l->n; i++)
        rc = rtx__ct_buf_put(&buf, l->v[i].s->p, l->v[i].s->len, 0);
    if (!rc && !rtx__ct_str(c, buf.p ? buf.p : "", buf.len, out))
        rc = RTX_ENOMEM;
    else if (rc)
        rc = rtx__ct_fail(c, rc, "out of memory");
    rtx_free(buf.p);
    return rc;
}

static bool hashable(struct ct_val v) {
    if (v.t == CT_LIST) {
        if (!v.l->tuple) return false;
        for (size_t i = 0; i < v.l->n; i++)
            if (!hashable(v.l->v[i])) return false;
        return true;
    }
    return v.t != CT_DICT && v.t != CT_NS;
}

static int eval(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n,
                struct ct_val *out) {
    if (++c->steps > CT_MAX_STEPS)
        return rtx__ct_fail(c, RTX_ELIMIT, "more than %ld evaluation steps", CT_MAX_STEPS);
    c->line = n->line;
    struct ct_val a, b;
    int rc = 0;
    bool r;
    switch (n->kind) {
    case K_LIT: *out = n->lit; return 0;
    case K_NAME: *out = lookup(f, n->name); return 0;
    case K_ATTR:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        c->line = n->line;
        return rtx__ct_getattr(c, a, n->name, out);
    case K_ITEM:
        if ((rc = eval(c, f, n->a, &a)) || (rc = eval(c, f, n->b, &b))) return rc;
        c->line = n->line;
        return rtx__ct_getitem(c, a, b, out);
    case K_SLICE: return eval_slice(c, f, n, out);
    case K_CALL: return eval_call(c, f, n, out);
    case K_FILTER:
    case K_TEST: {
        struct ct_val *args, *kw;
        if ((rc = eval(c, f, n->a, &a)) || (rc = eval_args(c, f, n, &args, &kw))) return rc;
        c->line = n->line;
        if (n->kind == K_FILTER)
            return rtx__ct_filter(c, n->op, a, args, n->n, n->kwn, kw, n->n_kw, out);
        if ((rc = rtx__ct_test(c, n->op, a, args, n->n, &r))) return rc;
        *out = ct_bool(r);
        return 0;
    }
    case K_BIN:
        if ((rc = eval(c, f, n->a, &a)) || (rc = eval(c, f, n->b, &b))) return rc;
        c->line = n->line;
        return n->op == '~' ? concat(c, a, b, out) : arith(c, n->op, a, b, out);
    case K_NEG:
    case K_POS:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        if (!is_num(a))
            return rtx__ct_fail(c, RTX_EINVAL, "bad operand type for unary %c: '%s'",
                                n->kind == K_NEG ? '-' : '+', rtx__ct_type_name(a));
        if (n->kind == K_POS)
            *out = a.t == CT_BOOL ? ct_int(a.b) : a;
        else if (a.t == CT_FLOAT)
            *out = ct_float(-a.f);
        else if (rtx__ct_int_of(a) == INT64_MIN)
            return overflow(c);
        else
            *out = ct_int(-rtx__ct_int_of(a));
        return 0;
    case K_NOT:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        *out = ct_bool(!rtx__ct_truthy(a));
        return 0;
    case K_AND:
    case K_OR:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        if (rtx__ct_truthy(a) == (n->kind == K_OR)) {
            *out = a;
            return 0;
        }
        return eval(c, f, n->b, out);
    case K_CMP:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        for (int i = 0; i < n->n; i++) {
            if ((rc = eval(c, f, n->v[i], &b))) return rc;
            c->line = n->line;
            if ((rc = compare(c, (int)(intptr_t)n->ops[i], a, b, &r))) return rc;
            if (!r) break;
            a = b;
        }
        *out = ct_bool(r);
        return 0;
    case K_COND:
        if ((rc = eval(c, f, n->a, &a))) return rc;
        if (rtx__ct_truthy(a)) return eval(c, f, n->b, out);
        if (n->c) return eval(c, f, n->c, out);
        *out = ct_undef(NULL);
        return 0;
    case K_LIST:
    case K_TUPLE: {
        struct ct_list *l = rtx__ct_list_new(c, (size_t)n->n);
        if (!l) return RTX_ENOMEM;
        l->tuple = n->kind == K_TUPLE;
        for (int i = 0; !rc && i < n->n; i++)
            rc = eval(c, f, n->v[i], &l->v[i]);
        *out = (struct ct_val){.t = CT_LIST, .l = l};
        return rc;
    }
    case K_DICT: {
        struct ct_dict *d = rtx__ct_dict_new(c);
        if (!d) return RTX_ENOMEM;
        for (int i = 0; !rc && i < n->n; i += 2) {
            if ((rc = eval(c, f, n->v[i], &a)) || (rc = eval(c, f, n->v[i + 1], &b))) break;
            if (!hashable(a))
                return rtx__ct_fail(c, RTX_EINVAL, "unhashable type: '%s'", rtx__ct_type_name(a));
            rc = rtx__ct_dict_set(c, d, a, b);
        }
        *out = (struct ct_val){.t = CT_DICT, .d = d};
        return rc;
    }
    default: return rtx__ct_fail(c, RTX_EINVAL, "not an expression");
    }
}

/* ------------------------------------------------------------------------------------------
 * Statements
 * ---------------------------------------------------------------------------------------- */

/* Binds the targets of a for or set (names, or keys: their names as string values) to v,
 * unpacking a sequence into several names. */
static int bind(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n,
                const struct ct_val *keys, struct ct_val v) {
    struct ct_list *l = NULL;
    int rc = 0;
    if (n->n_names > 1) {
        if ((rc = rtx__ct_iter(c, v, &l))) return rc;
        if (l->n != (size_t)n->n_names)
            return rtx__ct_fail(c, RTX_EINVAL, "%s values to unpack (expected %d, got %zu)",
                                l->n > (size_t)n->n_names ? "too many" : "not enough", n->n_names,
                                l->n);
    }
    for (int i = 0; !rc && i < n->n_names; i++) {
        struct ct_val x = l ? l->v[i] : v;
        rc = keys ? rtx__ct_dict_set(c, &f->vars, keys[i], x) : set_var(c, f, n->names[i], x);
    }
    return rc;
}

/* A for loop. As in jinja2, one loop object serves every iteration, and each iteration starts
 * from an empty scope of its own (here one frame, emptied, so that a long loop allocates
 * nothing per iteration). */
static int exec_for(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n) {
    static const char *const names[] = {"index", "index0", "revindex", "revindex0", "first",
                                        "last",  "length", "previtem", "nextitem",  "loop"};
    struct ct_val seq, k[10], *tk = rtx__ct_alloc(&c->arena, (size_t)n->n_names * sizeof *tk);
    struct ct_list *items;
    struct ct_frame *it = rtx__ct_alloc(&c->arena, sizeof *it);
    struct ct_dict *loop = rtx__ct_dict_new(c);
    if (!tk || !it || !loop) return rtx__ct_oom(c);
    it->up = f;
    int rc = eval(c, f, n->a, &seq);
    if (!rc) rc = rtx__ct_iter(c, seq, &items);
    for (int i = 0; !rc && i < 10; i++)
        rc = rtx__ct_str(c, names[i], strlen(names[i]), &k[i]) ? 0 : RTX_ENOMEM;
    for (int i = 0; !rc && i < n->n_names; i++)
        rc = rtx__ct_str(c, n->names[i], strlen(n->names[i]), &tk[i]) ? 0 : RTX_ENOMEM;
    for (int i = 0; !rc && i < 9; i++)
        rc = rtx__ct_dict_set(c, loop, k[i], ct_none());
    if (rc) return rc;
    if (n->b) { /* {% for x in y if cond %}: the items for which cond holds, counted alone */
        struct ct_list *kept = rtx__ct_list_new(c, items->n);
        if (!kept) return RTX_ENOMEM;
        kept->n = 0;
        for (size_t i = 0; !rc && i < items->n; i++) {
            struct ct_val cond;
            it->vars.n = 0;
            if (!(rc = bind(c, it, n, tk, items->v[i])) && !(rc = eval(c, it, n->b, &cond)) &&
                rtx__ct_truthy(cond))
                kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    size_t len = items->n;
    for (size_t i = 0; !rc && i < len; i++) {
        if (++c->steps > CT_MAX_STEPS)
            return rtx__ct_fail(c, RTX_ELIMIT, "more than %ld evaluation steps", CT_MAX_STEPS);
        struct ct_val v[9] = {ct_int((int64_t)i + 1),
                              ct_int((int64_t)i),
                              ct_int((int64_t)(len - i)),
                              ct_int((int64_t)(len - i - 1)),
                              ct_bool(i == 0),
                              ct_bool(i + 1 == len),
                              ct_int((int64_t)len),
                              i ? items->v[i - 1] : ct_undef("previtem"),
                              i + 1 < len ? items->v[i + 1] : ct_undef("nextitem")};
        memcpy(loop->v, v, sizeof v); /* the keys were set in this order */
        it->vars.n = 0;
        rc = rtx__ct_dict_set(c, &it->vars, k[9], (struct ct_val){.t = CT_DICT, .d = loop});
        if (!rc) rc = bind(c, it, n, tk, items->v[i]);
        if (!rc) rc = exec(c, it, n->c);
        if (rc == CT_CONTINUE) rc = 0;
        if (rc == CT_BREAK) return 0;
    }
    if (!rc && !len && n->d) rc = exec(c, f, n->d);
    return rc;
}

static int exec(struct ct_ctx *c, struct ct_frame *f, const struct ct_node *n) {
    if (++c->steps > CT_MAX_STEPS)
        return rtx__ct_fail(c, RTX_ELIMIT, "more than %ld evaluation steps", CT_MAX_STEPS);
    c->line = n->line;
    struct ct_val v;
    int rc = 0;
    switch (n->kind) {
    case K_BODY:
        for (int i = 0; !rc && i < n->n; i++)
            rc = exec(c, f, n->v[i]);
        return rc;
    case K_TEXT: return emit(c, n->lit.s->p, n->lit.s->len);
    case K_OUT: {
        if ((rc = eval(c, f, n->a, &v))) return rc;
        if (v.t == CT_STR) return emit(c, v.s->p, v.s->len);
        struct ct_buf b = {0};
        c->line = n->line;
        rc = rtx__ct_to_str(c, v, &b);
        if (!rc) rc = emit(c, b.p ? b.p : "", b.len);
        rtx_free(b.p);
        return rc;
    }
    case K_IF:
        if ((rc = eval(c, f, n->a, &v))) return rc;
        if (rtx__ct_truthy(v)) return exec(c, f, n->b);
        return n->c ? exec(c, f, n->c) : 0;
    case K_FOR: return exec_for(c, f, n);
    case K_SET:
        if ((rc = eval(c, f, n->a, &v))) return rc;
        if (n->op == '.') {
            struct ct_val ns = lookup(f, n->names[0]), k;
            c->line = n->line;
            if (ns.t != CT_NS)
                return rtx__ct_fail(c, RTX_EINVAL,
                                    "cannot assign attribute on non-namespace "
                                    "object '%s'",
                                    n->names[0]);
            if (!rtx__ct_str(c, n->names[1], strlen(n->names[1]), &k)) return RTX_ENOMEM;
            return rtx__ct_dict_set(c, ns.d, k, v);
        }
        return bind(c, f, n, NULL, v);
    case K_SET_BLOCK:
        if ((rc = capture(c, f, n->c, &v))) return rc;
        return set_var(c, f, n->names[0], v);
    case K_MACRO: return set_var(c, f, n->name, (struct ct_val){.t = CT_MACRO, .m = n});
    case K_BREAK: return CT_BREAK;
    case K_CONTINUE: return CT_CONTINUE;
    case K_BLOCK: return exec(c, f, n->c);
    default: return rtx__ct_fail(c, RTX_EINVAL, "not a statement");
    }
}

/* ------------------------------------------------------------------------------------------
 * API
 * ---------------------------------------------------------------------------------------- */

static bool valid_utf8(const char *s, size_t n, size_t *bad) {
    for (size_t i = 0, l; i < n; i += l)
        if (rtx__tok_utf8_next((const uint8_t *)s + i, n - i, &l) < 0) return *bad = i, false;
    return true;
}

int rtx_chat_template_new(const char *src, size_t len, const char *what,
                          struct rtx_chat_template **out, struct rtx_err *err) {
    if ((!src && len) || !out)
        return rtx_err_set(err, RTX_EINVAL, "rtx_chat_template_new: NULL argument");
    what = what ? what : "chat template";
    size_t bad;
    if (!valid_utf8(src, len, &bad))
        return rtx_err_set(err, RTX_EINVAL, "%s: not valid UTF-8 at byte %zu", what, bad);
    struct rtx_chat_template *t = rtx_calloc(1, sizeof *t);
    size_t wl = strlen(what);
    if (!t || !(t->what = rtx_malloc(wl + 1))) {
        rtx_free(t);
        return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", what);
    }
    memcpy(t->what, what, wl + 1);
    struct ct_tok *toks = NULL;
    size_t n = 0;
    int rc = rtx__ct_lex(&t->arena, src ? src : "", len, t->what, &toks, &n, err);
    if (!rc) rc = rtx__ct_parse(t, toks, n, err);
    rtx_free(toks);
    if (rc) {
        rtx_chat_template_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void rtx_chat_template_free(struct rtx_chat_template *t) {
    if (!t) return;
    rtx__ct_arena_free(&t->arena);
    rtx_free(t->what);
    rtx_free(t);
}

/* A render's variables: messages, add_generation_prompt, the special tokens given, and tools
 * and documents as none. */
static int bind_inputs(struct ct_ctx *c, const struct rtx_chat_message *msgs, int n, bool agp,
                       const char *bos, const char *eos) {
    struct ct_list *l = rtx__ct_list_new(c, (size_t)n);
    if (!l) return RTX_ENOMEM;
    int rc = 0;
    size_t bad;
    for (int i = 0; !rc && i < n; i++) {
        const char *fields[2] = {msgs[i].role, msgs[i].content}, *names[2] = {"role", "content"};
        struct ct_dict *d = rtx__ct_dict_new(c);
        if (!d) return RTX_ENOMEM;
        for (int k = 0; !rc && k < 2; k++) {
            struct ct_val key, v;
            if (!fields[k])
                return rtx_err_set(c->err, RTX_EINVAL, "messages[%d].%s is NULL", i, names[k]);
            if (!valid_utf8(fields[k], strlen(fields[k]), &bad))
                return rtx_err_set(c->err, RTX_EINVAL,
                                   "messages[%d].%s: not valid UTF-8 at "
                                   "byte %zu",
                                   i, names[k], bad);
            if (!rtx__ct_str(c, names[k], 4 + 3 * k, &key) ||
                !rtx__ct_str(c, fields[k], strlen(fields[k]), &v))
                return RTX_ENOMEM;
            rc = rtx__ct_dict_set(c, d, key, v);
        }
        l->v[i] = (struct ct_val){.t = CT_DICT, .d = d};
    }
    struct ct_val v;
    const char *tokens[2] = {bos, eos}, *tnames[2] = {"bos_token", "eos_token"};
    for (int k = 0; !rc && k < 2; k++) {
        if (!tokens[k]) continue;
        if (!valid_utf8(tokens[k], strlen(tokens[k]), &bad))
            return rtx_err_set(c->err, RTX_EINVAL, "%s: not valid UTF-8", tnames[k]);
        if (!rtx__ct_str(c, tokens[k], strlen(tokens[k]), &v)) return RTX_ENOMEM;
        rc = set_var(c, c->root, tnames[k], v);
    }
    if (!rc) rc = set_var(c, c->root, "messages", (struct ct_val){.t = CT_LIST, .l = l});
    if (!rc) rc = set_var(c, c->root, "add_generation_prompt", ct_bool(agp));
    if (!rc) rc = set_var(c, c->root, "tools", ct_none());
    if (!rc) rc = set_var(c, c->root, "documents", ct_none());
    return rc;
}

int rtx_chat_template_render(const struct rtx_chat_template *t,
                             const struct rtx_chat_message *msgs, int n,
                             bool add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **out, size_t *out_len,
                             struct rtx_err *err) {
    if (!t || (!msgs && n) || n < 0 || !out || !out_len)
        return rtx_err_set(err, RTX_EINVAL, "rtx_chat_template_render: bad argument");
    struct ct_ctx c = {.what = t->what, .err = err, .line = 1};
    c.arena.limit = CT_MAX_MEMORY;
    int rc = (c.root = rtx__ct_alloc(&c.arena, sizeof *c.root)) ? 0 : rtx__ct_oom(&c);
    if (!rc) rc = bind_inputs(&c, msgs, n, add_generation_prompt, bos_token, eos_token);
    if (!rc) rc = exec(&c, c.root, t->body);
    if (!rc && !c.out.p) rc = rtx__ct_buf_put(&c.out, "", 0, 0);
    if (rc == RTX_ENOMEM && c.arena.over) /* an allocation refused for the bound */
        rc = rtx__ct_oom(&c);
    else if (rc == RTX_ENOMEM)
        rtx_err_set(err, rc, "%s: out of memory", t->what);
    rtx__ct_arena_free(&c.arena);
    if (rc) {
        rtx_free(c.out.p);
        return rc;
    }
    *out = c.out.p;
    *out_len = c.out.len;
    return 0;
}
