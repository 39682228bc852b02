/*
 * test-chat-template.c - chat templates (formats/chat-template*.c): renderings with known
 * output, the refusal of malformed templates (RTX_EFORMAT) and of Jinja rtxd does not
 * implement (RTX_EUNSUPPORTED) by line and construct, raise_exception, the limits that stop a
 * hostile template (output, memory, steps, recursion, nesting), bad arguments, allocation
 * failures, and renders from several threads. Byte-for-byte parity with jinja2 on the
 * published templates is tests/interop/test_chat_template.py.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"

static const struct rtx_chat_message conv[] = {
    {"system", "Be brief."}, {"user", "Hi {{ there }}"}, {"assistant", "Hello."}, {"user", "Bye"}};

/* Parses src and renders it over conv; returns the code, *out the text on success. */
static int render(const char *src, int n, bool agp, char **out, struct rtx_err *err) {
    struct rtx_chat_template *t = NULL;
    int rc = rtx_chat_template_new(src, strlen(src), "tpl", &t, err);
    if (rc) return rc;
    size_t len;
    rc = rtx_chat_template_render(t, conv, n, agp, "<s>", "</s>", out, &len, err);
    if (!rc) ck_assert_uint_eq(len, strlen(*out));
    rtx_chat_template_free(t);
    return rc;
}

static void assert_renders(const char *src, bool agp, const char *want) {
    char *out = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(render(src, 4, agp, &out, &err) == 0, "%s: %s", src, err.msg);
    ck_assert_msg(!strcmp(out, want), "%s: got '%s', want '%s'", src, out, want);
    rtx_free(out);
}

static void assert_fails(const char *src, int code, const char *want) {
    char *out = NULL;
    struct rtx_err err = {0};
    int rc = render(src, 4, false, &out, &err);
    ck_assert_msg(rc == code, "%s: code %d, want %d (%s)", src, rc, code, err.msg);
    ck_assert_msg(strstr(err.msg, want), "%s: message '%s' lacks '%s'", src, err.msg, want);
    ck_assert_ptr_null(out);
}

static const char chatml[] =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

START_TEST(chat_template_renders) {
    assert_renders(chatml, true,
                   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi {{ there }}"
                   "<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye"
                   "<|im_end|>\n<|im_start|>assistant\n");
    /* trim_blocks, lstrip_blocks, "-" and the trailing newline of the source */
    assert_renders("{% for m in messages %}\n  {% if loop.first %}\n{{ bos_token }}\n  {% endif %}"
                   "\n{{- m.role[0] -}}\n{% endfor %}\n",
                   false, "<s>\nsuau");
    /* scoping: a loop's sets stay in the iteration; namespace carries across */
    assert_renders("{% set a = 0 %}{% set ns = namespace(n=0) %}{% for m in messages %}"
                   "{% set a = a + 1 %}{% set ns.n = ns.n + a %}{% endfor %}{{ a }} {{ ns.n }}",
                   false, "0 4");
    assert_renders("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content')"
                   " | join(' / ') }} {{ (messages | length) // 3 }} {{ messages[1:3] | length }}"
                   " {{ {'k': [1, none, 'é']} | tojson }} {{ [1, 'x'] }} {{ 7 / 2 }}",
                   false, "Hi {{ there }} / Bye 1 2 {\"k\": [1, null, \"é\"]} [1, 'x'] 3.5");
    assert_renders("{% macro m(x, y='?') %}({{ x }}{{ y }}){% endmacro %}{{ m(1) }}{{ m(2, y=3) }}"
                   "{% for i in range(9) %}{% if i is odd %}{% continue %}{% endif %}"
                   "{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
                   false, "(1?)(23)024");
    assert_renders(
        "{{ undefined_var }}|{{ undefined_var | default('d') }}|{{ none }}|{{ eos_token }}", false,
        "|d|None|</s>");
}
END_TEST

START_TEST(chat_template_refuses_malformed) {
    assert_fails("line one\n{% if x %}\n{% endfor %}", RTX_EFORMAT,
                 "tpl: line 3: unexpected 'endfor'");
    assert_fails("\n\n{% for x in y %}", RTX_EFORMAT,
                 "line 3: unexpected end of template, expected 'endfor'");
    assert_fails("{{ 1 + }}", RTX_EFORMAT, "line 1: unexpected end of print statement");
    assert_fails("{{ (1 ]}}", RTX_EFORMAT, "unexpected ']', expected ')'");
    assert_fails("\n{# open", RTX_EFORMAT, "line 2: missing end of comment tag");
    assert_fails("{{ 'open }}", RTX_EFORMAT, "unterminated string");
    assert_fails("{% continue %}", RTX_EFORMAT, "'continue' outside of a loop");
    assert_fails("{% frobnicate %}", RTX_EFORMAT, "unexpected 'frobnicate'");
    assert_fails("{{ x is }}", RTX_EFORMAT, "expected a test name");
    assert_fails("{{ '\\x4' }}", RTX_EFORMAT, "truncated \\x escape");
    assert_fails("{% set x = 1 %", RTX_EFORMAT, "unexpected end of template");
}
END_TEST

START_TEST(chat_template_refuses_unsupported) {
    assert_fails("a\n{% include 'x' %}", RTX_EUNSUPPORTED,
                 "tpl: line 2: {% include %} is not supported");
    assert_fails("{% extends 'base' %}", RTX_EUNSUPPORTED, "{% extends %} is not supported");
    assert_fails("{% call m() %}{% endcall %}", RTX_EUNSUPPORTED, "{% call %} is not supported");
    assert_fails("{{ x | wordwrap }}", RTX_EUNSUPPORTED,
                 "line 1: filter 'wordwrap' is not supported");
    assert_fails("{{ x is prime }}", RTX_EUNSUPPORTED, "test 'prime' is not supported");
    assert_fails("{{ 'a'.format(1) }}", RTX_EUNSUPPORTED, "method 'format' is not supported");
    assert_fails("\n\n{{ cycler(1) }}", RTX_EUNSUPPORTED,
                 "line 3: function 'cycler' is not supported");
    assert_fails("{% raw %}{{ x }}{% endraw %}", RTX_EUNSUPPORTED, "{% raw %} is not supported");
    assert_fails("{% for x in y recursive %}{% endfor %}", RTX_EUNSUPPORTED, "recursive loops");
    assert_fails("{{ f(*args) }}", RTX_EUNSUPPORTED, "*args and **kwargs");
    assert_fails("{{ '\\N{BULLET}' }}", RTX_EUNSUPPORTED, "\\N{...} escapes");
    assert_fails("{{ 99999999999999999999 }}", RTX_EUNSUPPORTED, "too large");
}
END_TEST

START_TEST(chat_template_runtime_errors) {
    assert_fails("{% if messages[0].role == 'system' %}\n{{ raise_exception('No system "
                 "messages, please') }}{% endif %}",
                 RTX_EINVAL, "tpl: line 2: raise_exception: No system messages, please");
    assert_fails("{{ x.y }}", RTX_EINVAL, "'x' is undefined");
    assert_fails("{{ 1 + 'a' }}", RTX_EINVAL,
                 "unsupported operand type(s) for +: 'int' and 'str'");
    assert_fails("{{ 1 // 0 }}", RTX_EINVAL, "division by zero");
    assert_fails("{{ [1] < 'a' }}", RTX_EINVAL, "'<' not supported");
    assert_fails("{{ messages | selectattr('role') | length }}", RTX_EINVAL, "has no len()");
    assert_fails("{% set x = 1 %}{% set x.y = 2 %}", RTX_EINVAL, "non-namespace");
    assert_fails("{{ 2 ** 70 }}", RTX_ELIMIT, "integer overflow");
}
END_TEST

/* A hostile template stops at a bound instead of hanging or exhausting memory. */
START_TEST(chat_template_limits) {
    assert_fails("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", RTX_ELIMIT,
                 "the rendered text passed 16 MiB");
    assert_fails("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 RTX_ELIMIT, "MiB");
    assert_fails("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}"
                 "{% endfor %}",
                 RTX_ELIMIT, "evaluation steps");
    assert_fails("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", RTX_ELIMIT,
                 "macro calls nested deeper than");
    assert_fails("{{ range(1000000) }}", RTX_ELIMIT, "range too big");
    char deep[2000];
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 300; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 300; i++)
        deep[k++] = ')';
    strcpy(deep + k, " }}");
    assert_fails(deep, RTX_ELIMIT, "nested deeper than");
}
END_TEST

START_TEST(chat_template_bad_arguments) {
    struct rtx_chat_template *t = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_chat_template_new(NULL, 3, "tpl", &t, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_chat_template_new("x", 1, "tpl", NULL, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_chat_template_new("a\xff", 2, "tpl", &t, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "not valid UTF-8 at byte 1"), "%s", err.msg);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(rtx_chat_template_new(chatml, strlen(chatml), NULL, &t, &err), 0);
    char *out = NULL;
    size_t len;
    ck_assert_int_eq(rtx_chat_template_render(t, NULL, 1, false, NULL, NULL, &out, &len, &err),
                     RTX_EINVAL);
    ck_assert_int_eq(rtx_chat_template_render(t, conv, -1, false, NULL, NULL, &out, &len, &err),
                     RTX_EINVAL);
    const struct rtx_chat_message bad[] = {{"user", "ok"}, {"user", "\xc3"}},
                                  null[] = {{NULL, "x"}};
    ck_assert_int_eq(rtx_chat_template_render(t, bad, 2, false, NULL, NULL, &out, &len, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "messages[1].content: not valid UTF-8"), "%s", err.msg);
    ck_assert_int_eq(rtx_chat_template_render(t, null, 1, false, NULL, NULL, &out, &len, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "messages[0].role is NULL"), "%s", err.msg);
    ck_assert_ptr_null(out);
    /* no messages, empty template */
    ck_assert_int_eq(rtx_chat_template_render(t, NULL, 0, true, NULL, NULL, &out, &len, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>assistant\n");
    rtx_free(out);
    rtx_chat_template_free(t);
    ck_assert_int_eq(rtx_chat_template_new("", 0, NULL, &t, &err), 0);
    ck_assert_int_eq(rtx_chat_template_render(t, conv, 4, false, NULL, NULL, &out, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    rtx_free(out);
    rtx_chat_template_free(t);
    rtx_chat_template_free(NULL);
}
END_TEST

/* Every allocation failure while parsing and rendering is RTX_ENOMEM and leaks nothing (the
 * ASan build checks the leaks). */
START_TEST(chat_template_out_of_memory) {
    static const char src[] =
        "{% macro m(x) %}[{{ x | upper }}]{% endmacro %}{% set ns = namespace(n=0) %}"
        "{% for msg in messages %}{% set ns.n = ns.n + 1 %}{{ m(msg.role) }}{{ msg | tojson }}"
        "{{ msg.content.split() | join(',') }}{% endfor %}{{ ns.n }}";
    int rc = -1;
    for (long n = 1; n < 2000 && rc != 0; n++) {
        struct rtx_chat_template *t = NULL;
        struct rtx_err err = {0};
        char *out = NULL;
        size_t len;
        rtx_alloc_fail_after(n);
        rc = rtx_chat_template_new(src, strlen(src), "tpl", &t, &err);
        if (!rc) rc = rtx_chat_template_render(t, conv, 4, true, "<s>", NULL, &out, &len, &err);
        rtx_alloc_fail_after(0);
        if (rc) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
        rtx_free(out);
        rtx_chat_template_free(t);
    }
    ck_assert_int_eq(rc, 0);
}
END_TEST

struct render_job {
    const struct rtx_chat_template *t;
    const char *want;
    int bad;
};

static void *render_many(void *arg) {
    struct render_job *j = arg;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        size_t len;
        if (rtx_chat_template_render(j->t, conv, 4, true, "<s>", "</s>", &out, &len, NULL) ||
            strcmp(out, j->want))
            j->bad++;
        rtx_free(out);
    }
    return NULL;
}

/* One template, four threads rendering at once: each gets the single-threaded text. */
START_TEST(chat_template_renders_from_several_threads) {
    struct rtx_chat_template *t;
    ck_assert_int_eq(rtx_chat_template_new(chatml, strlen(chatml), NULL, &t, NULL), 0);
    char *want;
    size_t len;
    ck_assert_int_eq(rtx_chat_template_render(t, conv, 4, true, "<s>", "</s>", &want, &len, NULL),
                     0);
    pthread_t th[4];
    struct render_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct render_job){t, want, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, render_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].bad, 0);
    }
    rtx_free(want);
    rtx_chat_template_free(t);
}
END_TEST

Suite *rtx_chat_template_suite(void) {
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, chat_template_renders);
    tcase_add_test(tc, chat_template_refuses_malformed);
    tcase_add_test(tc, chat_template_refuses_unsupported);
    tcase_add_test(tc, chat_template_runtime_errors);
    tcase_add_test(tc, chat_template_limits);
    tcase_add_test(tc, chat_template_bad_arguments);
    tcase_add_test(tc, chat_template_out_of_memory);
    tcase_add_test(tc, chat_template_renders_from_several_threads);
    suite_add_tcase(s, tc);
    return s;
}
