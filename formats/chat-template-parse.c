/*
 * chat-template-parse.c - the chat template's parser: jinja2's grammar (its parser.py, rule by
 * rule, so that precedence and associativity are the same) over the lexer's tokens, into the
 * syntax tree chat-template.c runs. Filters, tests, methods and functions are resolved here:
 * a name the interpreter does not implement, and every statement it does not (include,
 * extends, call, ...), fail here with RTX_EUNSUPPORTED naming the line and the construct, so
 * that a template is never rendered wrong; malformed syntax is RTX_EFORMAT.
 */
#include <stdio.h>
#include <string.h>

#include "formats/chat-template-impl.h"

struct parser {
    struct rtx_chat_template *t;
    const struct ct_tok *tok;
    size_t i, n;
    struct rtx_err *err;
    int depth;
    int loops; /* for loops around the statement being parsed (break / continue need one) */
    const char **called; /* names called as functions, checked at the end */
    void **called_line;  /* intptr_t line of each */
    int n_called, cap_called;
    const char **macros;
    int n_macros, cap_macros;
};

static int fail(struct parser *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rtx__ct_errv(p->err, code, p->t->what, p->tok[p->i].line, fmt, ap);
    va_end(ap);
    return rc;
}

static const struct ct_tok *cur(const struct parser *p) {
    return &p->tok[p->i];
}

static bool is_op(const struct parser *p, const char *op) {
    return cur(p)->type == T_OP && !strcmp(cur(p)->op, op);
}

static bool is_name(const struct parser *p, const char *name) {
    const struct ct_tok *t = cur(p);
    return t->type == T_NAME && t->len == strlen(name) && !memcmp(t->p, name, t->len);
}

static bool is_name_at(const struct parser *p, size_t k, const char *name) {
    const struct ct_tok *t = &p->tok[p->i + k < p->n ? p->i + k : p->n - 1];
    return t->type == T_NAME && t->len == strlen(name) && !memcmp(t->p, name, t->len);
}

static const char *describe(const struct ct_tok *t, char buf[64]) {
    switch (t->type) {
    case T_NAME: snprintf(buf, 64, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->p); return buf;
    case T_OP: snprintf(buf, 64, "'%s'", t->op); return buf;
    case T_STRING: return "a string";
    case T_INT:
    case T_FLOAT: return "a number";
    case T_BLOCK_END: return "end of statement block";
    case T_VAR_END: return "end of print statement";
    case T_EOF: return "end of template";
    default: return "template data";
    }
}

static int unexpected(struct parser *p, const char *expected) {
    char buf[64];
    return fail(p, RTX_EFORMAT, "unexpected %s%s%s", describe(cur(p), buf),
                expected ? ", expected " : "", expected ? expected : "");
}

static int expect_op(struct parser *p, const char *op) {
    if (!is_op(p, op)) {
        char want[16];
        snprintf(want, sizeof want, "'%s'", op);
        return unexpected(p, want);
    }
    p->i++;
    return 0;
}

static struct ct_node *node(struct parser *p, int kind) {
    struct ct_node *n = rtx__ct_alloc(&p->t->arena, sizeof *n);
    if (n) n->kind = (uint8_t)kind, n->line = cur(p)->line;
    return n;
}

static char *name_dup(struct parser *p, const struct ct_tok *t) {
    char *s = rtx__ct_alloc(&p->t->arena, t->len + 1);
    if (s) memcpy(s, t->p, t->len);
    return s;
}

/* Appends x to a growable array in the template's arena. */
static int push(struct parser *p, void ***v, int *n, void *x) {
    if (!(*n & (*n - 1)) || !*n) { /* capacities 1, 2, 4, ...: grow at powers of two */
        void **nv = rtx__ct_alloc(&p->t->arena, (size_t)(*n ? 2 * *n : 1) * sizeof *nv);
        if (!nv) return RTX_ENOMEM;
        if (*n) memcpy(nv, *v, (size_t)*n * sizeof *nv);
        *v = nv;
    }
    (*v)[(*n)++] = x;
    return 0;
}

#define PUSH(p, arr, cnt, x) push(p, (void ***)&(arr), &(cnt), (void *)(x))

static int parse_expr(struct parser *p, bool condexpr, struct ct_node **out);
static int parse_tuple(struct parser *p, bool condexpr, bool parens, struct ct_node **out);
static int parse_unary(struct parser *p, bool with_filter, struct ct_node **out);
static int parse_primary(struct parser *p, struct ct_node **out);
static int parse_postfix(struct parser *p, struct ct_node **n);

/* ------------------------------------------------------------------------------------------
 * Expressions
 * ---------------------------------------------------------------------------------------- */

/* ( args ) after a callee, filter or test: positional, then name=value. */
static int parse_args(struct parser *p, struct ct_node *n) {
    int rc = expect_op(p, "(");
    while (!rc && !is_op(p, ")")) {
        if (n->n || n->n_kw) rc = expect_op(p, ",");
        if (rc || is_op(p, ")")) break;
        if (is_op(p, "*") || is_op(p, "**"))
            return fail(p, RTX_EUNSUPPORTED, "*args and **kwargs in calls are not supported");
        struct ct_node *v;
        if (cur(p)->type == T_NAME && p->tok[p->i + 1].type == T_OP &&
            !strcmp(p->tok[p->i + 1].op, "=")) {
            char *name = name_dup(p, cur(p));
            p->i += 2;
            if (!name) return RTX_ENOMEM;
            if (!(rc = parse_expr(p, true, &v)) && !(rc = PUSH(p, n->kwn, n->n_kw, name))) {
                n->n_kw--;
                rc = PUSH(p, n->kw, n->n_kw, v);
            }
        } else {
            if (n->n_kw) return fail(p, RTX_EFORMAT, "positional argument after keyword");
            if (!(rc = parse_expr(p, true, &v))) rc = PUSH(p, n->v, n->n, v);
        }
    }
    return rc ? rc : expect_op(p, ")");
}

static int note_call(struct parser *p, struct ct_node *callee) {
    if (callee->kind == K_ATTR) {
        if (!rtx__ct_is_method(callee->name))
            return fail(p, RTX_EUNSUPPORTED, "method '%s' is not supported", callee->name);
        return 0;
    }
    if (callee->kind != K_NAME) return 0; /* a runtime error if it is not callable */
    int rc = PUSH(p, p->called, p->n_called, callee->name);
    if (rc) return rc;
    p->n_called--;
    return push(p, &p->called_line, &p->n_called, (void *)(intptr_t)callee->line);
}

static int parse_call(struct parser *p, struct ct_node **n) {
    struct ct_node *c = node(p, K_CALL);
    if (!c) return RTX_ENOMEM;
    c->a = *n;
    int rc = note_call(p, *n);
    if (!rc) rc = parse_args(p, c);
    *n = c;
    return rc;
}

static int parse_subscript(struct parser *p, struct ct_node **n) {
    if (is_op(p, ".")) {
        p->i++;
        const struct ct_tok *t = cur(p);
        struct ct_node *x = node(p, t->type == T_INT ? K_ITEM : K_ATTR);
        if (!x) return RTX_ENOMEM;
        x->a = *n;
        if (t->type == T_NAME) {
            if (!(x->name = name_dup(p, t))) return RTX_ENOMEM;
        } else if (t->type == T_INT) {
            if (!(x->b = node(p, K_LIT))) return RTX_ENOMEM;
            x->b->lit = ct_int(t->i);
        } else {
            return unexpected(p, "a name after '.'");
        }
        p->i++;
        *n = x;
        return 0;
    }
    p->i++; /* '[' */
    struct ct_node *parts[3] = {NULL, NULL, NULL};
    int k = 0, rc = 0;
    bool slice = false;
    for (;;) {
        if (is_op(p, ":")) {
            slice = true;
            if (++k > 2) return unexpected(p, NULL);
            p->i++;
            continue;
        }
        if (is_op(p, "]")) break;
        if (parts[k]) return unexpected(p, "']'");
        if ((rc = parse_expr(p, true, &parts[k]))) return rc;
        if (is_op(p, ",")) return fail(p, RTX_EUNSUPPORTED, "tuple subscripts are not supported");
    }
    p->i++;
    struct ct_node *x = node(p, slice ? K_SLICE : K_ITEM);
    if (!x) return RTX_ENOMEM;
    x->a = *n;
    if (!slice && !parts[0]) return fail(p, RTX_EFORMAT, "empty subscript");
    if (slice) {
        for (int j = 0; j < 3 && !rc; j++)
            rc = PUSH(p, x->v, x->n, parts[j]);
    } else {
        x->b = parts[0];
    }
    *n = x;
    return rc;
}

static int parse_postfix(struct parser *p, struct ct_node **n) {
    for (int rc;;) {
        if (is_op(p, ".") || is_op(p, "["))
            rc = parse_subscript(p, n);
        else if (is_op(p, "("))
            rc = parse_call(p, n);
        else
            return 0;
        if (rc) return rc;
    }
}

static int parse_filter_or_test(struct parser *p, struct ct_node **n) {
    int rc = 0;
    while (!rc) {
        if (is_op(p, "|")) {
            p->i++;
            if (cur(p)->type != T_NAME) return unexpected(p, "a filter name");
            struct ct_node *f = node(p, K_FILTER);
            if (!f || !(f->name = name_dup(p, cur(p)))) return RTX_ENOMEM;
            p->i++;
            if ((f->op = rtx__ct_filter_id(f->name)) < 0)
                return fail(p, RTX_EUNSUPPORTED, "filter '%s' is not supported", f->name);
            f->a = *n;
            if (is_op(p, "(")) rc = parse_args(p, f);
            *n = f;
        } else if (is_name(p, "is")) {
            p->i++;
            bool neg = is_name(p, "not");
            p->i += neg;
            if (cur(p)->type != T_NAME) return unexpected(p, "a test name");
            struct ct_node *x = node(p, K_TEST);
            if (!x || !(x->name = name_dup(p, cur(p)))) return RTX_ENOMEM;
            p->i++;
            if ((x->op = rtx__ct_test_id(x->name)) < 0)
                return fail(p, RTX_EUNSUPPORTED, "test '%s' is not supported", x->name);
            x->a = *n;
            const struct ct_tok *a = cur(p);
            if (is_op(p, "(")) {
                rc = parse_args(p, x);
            } else if ((a->type == T_NAME || a->type == T_STRING || a->type == T_INT ||
                        a->type == T_FLOAT || is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is")) return fail(p, RTX_EFORMAT, "cannot chain tests with is");
                struct ct_node *arg;
                if (!(rc = parse_primary(p, &arg)) && !(rc = parse_postfix(p, &arg)))
                    rc = PUSH(p, x->v, x->n, arg);
            }
            *n = x;
            if (neg) {
                struct ct_node *no = node(p, K_NOT);
                if (!no) return RTX_ENOMEM;
                no->a = x;
                *n = no;
            }
        } else if (is_op(p, "(")) {
            rc = parse_call(p, n);
        } else {
            return 0;
        }
    }
    return rc;
}

static int parse_primary(struct parser *p, struct ct_node **out) {
    const struct ct_tok *t = cur(p);
    struct ct_node *n = NULL;
    int rc = 0;
    if (++p->depth > CT_MAX_DEPTH)
        return fail(p, RTX_ELIMIT, "expression nested deeper than %d", CT_MAX_DEPTH);
    if (t->type == T_NAME) {
        static const char *const consts[] = {"true", "false", "none", "True", "False", "None"};
        int k = 0;
        while (k < 6 && !(t->len == strlen(consts[k]) && !memcmp(t->p, consts[k], t->len)))
            k++;
        if (!(n = node(p, k < 6 ? K_LIT : K_NAME))) return RTX_ENOMEM;
        if (k < 6)
            n->lit = k % 3 == 2 ? ct_none() : ct_bool(k % 3 == 0);
        else if (!(n->name = name_dup(p, t)))
            return RTX_ENOMEM;
        p->i++;
    } else if (t->type == T_STRING) {
        size_t len = 0;
        for (size_t k = p->i; p->tok[k].type == T_STRING; k++)
            len += p->tok[k].len;
        struct ct_str *s = rtx__ct_alloc(&p->t->arena, sizeof *s + len + 1);
        if (!s || !(n = node(p, K_LIT))) return RTX_ENOMEM;
        for (; cur(p)->type == T_STRING; p->i++) { /* adjacent strings are joined */
            memcpy(s->p + s->len, cur(p)->p, cur(p)->len);
            s->len += cur(p)->len;
        }
        n->lit = (struct ct_val){.t = CT_STR, .s = s};
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        if (!(n = node(p, K_LIT))) return RTX_ENOMEM;
        n->lit = t->type == T_INT ? ct_int(t->i) : ct_float(t->f);
        p->i++;
    } else if (is_op(p, "(")) {
        p->i++;
        rc = parse_tuple(p, true, true, &n);
        if (!rc) rc = expect_op(p, ")");
    } else if (is_op(p, "[") || is_op(p, "{")) {
        bool dict = is_op(p, "{");
        if (!(n = node(p, dict ? K_DICT : K_LIST))) return RTX_ENOMEM;
        p->i++;
        while (!rc && !is_op(p, dict ? "}" : "]")) {
            if (n->n) rc = expect_op(p, ",");
            if (rc || is_op(p, dict ? "}" : "]")) break;
            struct ct_node *x;
            if (!(rc = parse_expr(p, true, &x))) rc = PUSH(p, n->v, n->n, x);
            if (!rc && dict && !(rc = expect_op(p, ":")) && !(rc = parse_expr(p, true, &x)))
                rc = PUSH(p, n->v, n->n, x);
        }
        if (!rc) p->i++;
    } else {
        rc = unexpected(p, NULL);
    }
    p->depth--;
    *out = n;
    return rc;
}

static int parse_unary(struct parser *p, bool with_filter, struct ct_node **out) {
    int rc;
    if (is_op(p, "-") || is_op(p, "+")) {
        struct ct_node *n = node(p, is_op(p, "-") ? K_NEG : K_POS);
        if (!n) return RTX_ENOMEM;
        p->i++;
        if (++p->depth > CT_MAX_DEPTH)
            return fail(p, RTX_ELIMIT, "expression nested deeper than %d", CT_MAX_DEPTH);
        rc = parse_unary(p, false, &n->a);
        p->depth--;
        *out = n;
    } else {
        rc = parse_primary(p, out);
    }
    if (!rc) rc = parse_postfix(p, out);
    if (!rc && with_filter) rc = parse_filter_or_test(p, out);
    return rc;
}

/* A left-associative binary level: operands from next(), operators from ops. */
static int binary(struct parser *p, const char *const *ops, int n_ops, int kind,
                  int (*next)(struct parser *, struct ct_node **), struct ct_node **out) {
    int rc = next(p, out);
    while (!rc) {
        int k = 0;
        while (k < n_ops && !is_op(p, ops[k]))
            k++;
        if (k == n_ops) break;
        struct ct_node *n = node(p, kind);
        if (!n) return RTX_ENOMEM;
        n->op = !strcmp(ops[k], "//") ? 'F' : !strcmp(ops[k], "**") ? 'P' : ops[k][0];
        n->a = *out;
        p->i++;
        rc = next(p, &n->b);
        *out = n;
    }
    return rc;
}

static int parse_unary_f(struct parser *p, struct ct_node **out) {
    return parse_unary(p, true, out);
}
static int parse_pow(struct parser *p, struct ct_node **out) {
    static const char *const ops[] = {"**"};
    return binary(p, ops, 1, K_BIN, parse_unary_f, out);
}
static int parse_math2(struct parser *p, struct ct_node **out) {
    static const char *const ops[] = {"*", "/", "//", "%"};
    return binary(p, ops, 4, K_BIN, parse_pow, out);
}
static int parse_concat(struct parser *p, struct ct_node **out) {
    static const char *const ops[] = {"~"};
    return binary(p, ops, 1, K_BIN, parse_math2, out);
}
static int parse_math1(struct parser *p, struct ct_node **out) {
    static const char *const ops[] = {"+", "-"};
    return binary(p, ops, 2, K_BIN, parse_concat, out);
}

static int parse_compare(struct parser *p, struct ct_node **out) {
    int rc = parse_math1(p, out);
    struct ct_node *cmp = NULL;
    while (!rc) {
        static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
        static const char codes[] = "=!<l>g";
        int op = 0;
        for (int k = 0; k < 6 && !op; k++)
            op = is_op(p, ops[k]) ? codes[k] : 0;
        if (!op && is_name(p, "in")) op = 'i';
        if (!op && is_name(p, "not") && is_name_at(p, 1, "in")) op = 'n', p->i++;
        if (!op) break;
        p->i++;
        if (!cmp) {
            if (!(cmp = node(p, K_CMP))) return RTX_ENOMEM;
            cmp->a = *out;
        }
        struct ct_node *rhs;
        if ((rc = parse_math1(p, &rhs)) || (rc = PUSH(p, cmp->v, cmp->n, rhs))) break;
        cmp->n--;
        rc = push(p, &cmp->ops, &cmp->n, (void *)(intptr_t)op);
    }
    if (cmp) *out = cmp;
    return rc;
}

static int parse_not(struct parser *p, struct ct_node **out) {
    if (is_name(p, "not")) {
        struct ct_node *n = node(p, K_NOT);
        if (!n) return RTX_ENOMEM;
        p->i++;
        if (++p->depth > CT_MAX_DEPTH)
            return fail(p, RTX_ELIMIT, "expression nested deeper than %d", CT_MAX_DEPTH);
        int rc = parse_not(p, &n->a);
        p->depth--;
        *out = n;
        return rc;
    }
    return parse_compare(p, out);
}

/* and / or: names, not operators. */
static int logic(struct parser *p, const char *word, int kind,
                 int (*next)(struct parser *, struct ct_node **), struct ct_node **out) {
    int rc = next(p, out);
    while (!rc && is_name(p, word)) {
        struct ct_node *n = node(p, kind);
        if (!n) return RTX_ENOMEM;
        p->i++;
        n->a = *out;
        rc = next(p, &n->b);
        *out = n;
    }
    return rc;
}

static int parse_and(struct parser *p, struct ct_node **out) {
    return logic(p, "and", K_AND, parse_not, out);
}
static int parse_or(struct parser *p, struct ct_node **out) {
    return logic(p, "or", K_OR, parse_and, out);
}

static int parse_expr(struct parser *p, bool condexpr, struct ct_node **out) {
    int rc = parse_or(p, out);
    while (!rc && condexpr && is_name(p, "if")) {
        struct ct_node *n = node(p, K_COND);
        if (!n) return RTX_ENOMEM;
        p->i++;
        n->b = *out;
        rc = parse_or(p, &n->a);
        if (!rc && is_name(p, "else")) {
            p->i++;
            rc = parse_expr(p, true, &n->c);
        }
        *out = n;
    }
    return rc;
}

/* An expression, or a tuple when commas separate several (parens: inside "(...)"). */
static int parse_tuple(struct parser *p, bool condexpr, bool parens, struct ct_node **out) {
    struct ct_node *t = NULL, *x;
    if (parens && is_op(p, ")")) {
        if (!(*out = node(p, K_TUPLE))) return RTX_ENOMEM;
        return 0;
    }
    int rc = parse_expr(p, condexpr, &x);
    while (!rc && is_op(p, ",")) {
        p->i++;
        if (!t) {
            if (!(t = node(p, K_TUPLE))) return RTX_ENOMEM;
            rc = PUSH(p, t->v, t->n, x);
        }
        if (rc ||
            (parens ? is_op(p, ")") : cur(p)->type == T_BLOCK_END || cur(p)->type == T_VAR_END))
            break;
        if (!(rc = parse_expr(p, condexpr, &x))) rc = PUSH(p, t->v, t->n, x);
    }
    *out = t ? t : x;
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Statements
 * ---------------------------------------------------------------------------------------- */

static int parse_body(struct parser *p, const char *const *ends, struct ct_node **out);

static int block_end(struct parser *p) {
    if (cur(p)->type != T_BLOCK_END) return unexpected(p, "end of statement block");
    p->i++;
    return 0;
}

/* Consumes "{% endX %}" (the body stopped at it). */
static int end_tag(struct parser *p) {
    p->i += 2;
    return block_end(p);
}

/* A target of for or set: a name, a tuple of names, or (set only) namespace.attribute. */
static int parse_target(struct parser *p, struct ct_node *n, bool attr) {
    bool parens = is_op(p, "(");
    p->i += parens;
    int rc = 0;
    do {
        if (n->n_names) p->i++; /* ',' */
        if (cur(p)->type != T_NAME) return unexpected(p, "a name");
        const char *name = name_dup(p, cur(p));
        if (!name || (rc = PUSH(p, n->names, n->n_names, name))) return RTX_ENOMEM;
        p->i++;
        if (attr && n->n_names == 1 && is_op(p, ".")) {
            p->i++;
            if (cur(p)->type != T_NAME) return unexpected(p, "an attribute name");
            if (!(name = name_dup(p, cur(p))) || PUSH(p, n->names, n->n_names, name))
                return RTX_ENOMEM;
            p->i++;
            n->op = '.';
            return 0;
        }
    } while (is_op(p, ","));
    return parens ? expect_op(p, ")") : 0;
}

static int parse_if(struct parser *p, struct ct_node **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct ct_node *n = node(p, K_IF);
    if (!n) return RTX_ENOMEM;
    *out = n;
    int rc = parse_tuple(p, false, false, &n->a);
    if (!rc) rc = block_end(p);
    if (!rc) rc = parse_body(p, ends, &n->b);
    if (rc) return rc;
    if (is_name_at(p, 1, "elif")) {
        p->i += 2;
        return parse_if(p, &n->c);
    }
    if (is_name_at(p, 1, "else")) {
        static const char *const end[] = {"endif", NULL};
        if ((rc = end_tag(p)) || (rc = parse_body(p, end, &n->c))) return rc;
    }
    return end_tag(p);
}

static int parse_for(struct parser *p, struct ct_node **out) {
    static const char *const ends[] = {"else", "endfor", NULL}, *const end[] = {"endfor", NULL};
    struct ct_node *n = node(p, K_FOR);
    if (!n) return RTX_ENOMEM;
    *out = n;
    int rc = parse_target(p, n, false);
    if (!rc && !is_name(p, "in")) rc = unexpected(p, "'in'");
    if (rc) return rc;
    p->i++;
    if ((rc = parse_tuple(p, false, false, &n->a))) return rc;
    if (is_name(p, "if")) {
        p->i++;
        if ((rc = parse_expr(p, true, &n->b))) return rc;
    }
    if (is_name(p, "recursive"))
        return fail(p, RTX_EUNSUPPORTED, "recursive loops are not supported");
    p->loops++;
    if ((rc = block_end(p)) || (rc = parse_body(p, ends, &n->c))) return rc;
    p->loops--;
    if (is_name_at(p, 1, "else") && ((rc = end_tag(p)) || (rc = parse_body(p, end, &n->d))))
        return rc;
    return end_tag(p);
}

static int parse_set(struct parser *p, struct ct_node **out) {
    struct ct_node *n = node(p, K_SET);
    if (!n) return RTX_ENOMEM;
    *out = n;
    int rc = parse_target(p, n, true);
    if (rc) return rc;
    if (is_op(p, "=")) {
        p->i++;
        if ((rc = parse_tuple(p, true, false, &n->a))) return rc;
        return block_end(p);
    }
    if (n->n_names != 1 || n->op == '.') return unexpected(p, "'='");
    if (is_op(p, "|")) return fail(p, RTX_EUNSUPPORTED, "filtered block set is not supported");
    static const char *const end[] = {"endset", NULL};
    n->kind = K_SET_BLOCK;
    if ((rc = block_end(p)) || (rc = parse_body(p, end, &n->c))) return rc;
    return end_tag(p);
}

static int parse_macro(struct parser *p, struct ct_node **out) {
    static const char *const end[] = {"endmacro", NULL};
    struct ct_node *n = node(p, K_MACRO);
    if (!n) return RTX_ENOMEM;
    *out = n;
    if (cur(p)->type != T_NAME) return unexpected(p, "a macro name");
    if (!(n->name = name_dup(p, cur(p))) || PUSH(p, p->macros, p->n_macros, n->name))
        return RTX_ENOMEM;
    p->i++;
    int rc = expect_op(p, "(");
    while (!rc && !is_op(p, ")")) {
        if (n->n_names && (rc = expect_op(p, ","))) break;
        if (cur(p)->type != T_NAME) return unexpected(p, "a parameter name");
        struct ct_node *def = NULL;
        const char *name = name_dup(p, cur(p));
        p->i++;
        if (!name) return RTX_ENOMEM;
        if (is_op(p, "=")) {
            p->i++;
            if ((rc = parse_expr(p, true, &def))) return rc;
        }
        if ((rc = PUSH(p, n->names, n->n_names, name)) || (rc = PUSH(p, n->v, n->n, def)))
            return rc;
    }
    if (!rc) rc = expect_op(p, ")");
    int loops = p->loops;
    p->loops = 0; /* a macro's body is a function of its own */
    if (!rc) rc = block_end(p);
    if (!rc) rc = parse_body(p, end, &n->c);
    p->loops = loops;
    return rc ? rc : end_tag(p);
}

/* One {% ... %} statement; p is at its name. */
static int parse_statement(struct parser *p, struct ct_node **out) {
    static const char *const unsupported[] = {
        "filter", "call",       "include", "import", "from",      "extends", "block",
        "with",   "autoescape", "do",      "trans",  "pluralize", "print",   NULL};
    if (cur(p)->type != T_NAME) return unexpected(p, "a statement name");
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(cur(p)->len < 31 ? cur(p)->len : 31), cur(p)->p);
    p->i++;
    if (++p->depth > CT_MAX_DEPTH)
        return fail(p, RTX_ELIMIT, "statements nested deeper than %d", CT_MAX_DEPTH);
    int rc;
    if (!strcmp(name, "if")) {
        rc = parse_if(p, out);
    } else if (!strcmp(name, "for")) {
        rc = parse_for(p, out);
    } else if (!strcmp(name, "set")) {
        rc = parse_set(p, out);
    } else if (!strcmp(name, "macro")) {
        rc = parse_macro(p, out);
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!p->loops) {
            p->i--;
            return fail(p, RTX_EFORMAT, "'%s' outside of a loop", name);
        }
        rc = (*out = node(p, name[0] == 'b' ? K_BREAK : K_CONTINUE)) ? block_end(p) : RTX_ENOMEM;
    } else if (!strcmp(name, "generation")) {
        static const char *const end[] = {"endgeneration", NULL};
        if (!(*out = node(p, K_BLOCK))) return RTX_ENOMEM;
        if (!(rc = block_end(p)) && !(rc = parse_body(p, end, &(*out)->c))) rc = end_tag(p);
    } else {
        p->i--;
        for (int k = 0; unsupported[k]; k++)
            if (!strcmp(name, unsupported[k]))
                return fail(p, RTX_EUNSUPPORTED, "{%% %s %%} is not supported", name);
        return fail(p, RTX_EFORMAT, "unexpected '%s'", name);
    }
    p->depth--;
    return rc;
}

/* Statements up to one of ends ({% end... %}, not consumed) or, with ends NULL, the end. */
static int parse_body(struct parser *p, const char *const *ends, struct ct_node **out) {
    struct ct_node *body = node(p, K_BODY);
    if (!body) return RTX_ENOMEM;
    *out = body;
    for (;;) {
        const struct ct_tok *t = cur(p);
        struct ct_node *s = NULL;
        int rc = 0;
        if (t->type == T_EOF) {
            if (!ends) return 0;
            int last = 0;
            while (ends[last + 1])
                last++;
            return fail(p, RTX_EFORMAT, "unexpected end of template, expected '%s'", ends[last]);
        }
        if (t->type == T_DATA) {
            if (!(s = node(p, K_TEXT))) return RTX_ENOMEM;
            s->lit.t = CT_STR;
            if (!(s->lit.s = rtx__ct_alloc(&p->t->arena, sizeof *s->lit.s + t->len + 1)))
                return RTX_ENOMEM;
            memcpy(s->lit.s->p, t->p, t->len);
            s->lit.s->len = t->len;
            p->i++;
        } else if (t->type == T_VAR_BEGIN) {
            if (!(s = node(p, K_OUT))) return RTX_ENOMEM;
            p->i++;
            if ((rc = parse_tuple(p, true, false, &s->a))) return rc;
            if (cur(p)->type != T_VAR_END) return unexpected(p, "end of print statement");
            p->i++;
        } else if (t->type == T_BLOCK_BEGIN) {
            for (int k = 0; ends && ends[k]; k++)
                if (is_name_at(p, 1, ends[k])) return 0;
            p->i++;
            if ((rc = parse_statement(p, &s))) return rc;
        } else {
            return unexpected(p, NULL);
        }
        if ((rc = PUSH(p, body->v, body->n, s))) return rc;
    }
}

int rtx__ct_parse(struct rtx_chat_template *t, const struct ct_tok *toks, size_t n,
                  struct rtx_err *err) {
    struct parser p = {.t = t, .tok = toks, .n = n, .err = err};
    int rc = parse_body(&p, NULL, &t->body);
    for (int k = 0; !rc && k < p.n_called; k++) {
        bool known = rtx__ct_func_id(p.called[k]) >= 0;
        for (int m = 0; !known && m < p.n_macros; m++)
            known = !strcmp(p.called[k], p.macros[m]);
        if (!known)
            rc = rtx_err_set(err, RTX_EUNSUPPORTED, "%s: line %d: function '%s' is not supported",
                             t->what, (int)(intptr_t)p.called_line[k], p.called[k]);
    }
    if (rc == RTX_ENOMEM) rtx_err_set(err, rc, "%s: out of memory", t->what);
    return rc;
}
