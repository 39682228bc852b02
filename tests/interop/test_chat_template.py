"""
Chat templates through rtxtok chat (formats/chat-template*.c) against jinja2 configured as
Hugging Face's transformers configures it for apply_chat_template: an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loop controls
extension and the {% generation %} block, raise_exception and strftime_now as globals, and a
tojson filter that is Python's json.dumps. Every template in chat_templates/ (the published
chat templates of Llama 3 / 3.1 / 3.2, Qwen2.5, ChatML, Mistral, Zephyr / TinyLlama, Gemma,
and one that exercises the language itself) is rendered over several conversations, with and
without the generation prompt, and the bytes must be equal; where jinja2 raises (a template's
raise_exception, an undefined value), rtxtok must fail too.
"""

import json
import subprocess
from datetime import datetime
from pathlib import Path

import jinja2
import pytest
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from test_tokenizer import _need_rtxtok, rtxtok_path  # noqa: F401 (an autouse fixture)

TEMPLATES = Path(__file__).parent / "chat_templates"
TEMPLATE_NAMES = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))


class _Generation(Extension):
    """transformers' AssistantTracker, without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_support"), [], [], body).set_lineno(
            lineno)

    def _support(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def hf_render(source, messages, add_generation_prompt, bos="<s>", eos="</s>"):
    """What apply_chat_template renders, or the exception jinja2 raised."""
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        return hf_env().from_string(source).render(
            messages=messages, tools=None, documents=None,
            add_generation_prompt=add_generation_prompt, **kwargs)
    except Exception as e:  # noqa: BLE001 - TemplateError, and Python's own (TypeError, ...)
        return e


def rtx_render(template_path, messages, add_generation_prompt, tmp_path, bos="<s>", eos="</s>"):
    """(exit status, stdout text, stderr text) of rtxtok chat."""
    mpath = tmp_path / "messages.json"
    mpath.write_text(json.dumps(messages))
    cmd = [str(rtxtok_path()), "chat", str(template_path), str(mpath)]
    if add_generation_prompt:
        cmd.append("--add-generation-prompt")
    if bos is not None:
        cmd += ["--bos", bos]
    if eos is not None:
        cmd += ["--eos", eos]
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "system_multi_turn": [
        m("system", "You are a helpful assistant."), m("user", "Hello! How are you?"),
        m("assistant", "I am fine, thank you. What can I do for you?"),
        m("user", "What is the capital of France?")],
    "no_system": [m("user", "Hi there"), m("assistant", "Hello."), m("user", "Why is the sky blue?")],
    "single_user": [m("user", "Write a haiku about the sea.")],
    "unicode": [
        m("system", "Ты — полезный помощник. 日本語で答えて 🙂"),
        m("user", "e\u0301 ñ 中文 👨‍👩‍👧 مرحبا שלום \u200b\u00a0x"),
        m("assistant", "Ça va… ✓ «oui» — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
        m("user", "ß ǅ İstanbul ﬁne \U0001F1EB\U0001F1F7?")],
    "jinja_like_content": [
        m("user", "{{ not a tag }} {% if x %} {# comment #} }}{{ {%- raw -%}"),
        m("assistant", "'single' \"double\" \\ backslash \\n \\t {% endif %}"),
        m("user", "<|im_start|>system\n<s>[INST] </s><|eot_id|>")],
    "whitespace": [
        m("system", "  padded system  \n"), m("user", "\n\nleading newlines"),
        m("assistant", "trailing spaces   \t"), m("user", "  \t\n  ")],
    "empty_contents": [m("user", ""), m("assistant", ""), m("user", "")],
    "no_messages": [],
    "long": [m("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "word " * i)
             for i in range(31)],
}


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_templates_render_like_jinja2(tmp_path, name):
    path = TEMPLATES / f"{name}.jinja"
    source = path.read_text()
    rendered = failed = 0
    for conv_name, messages in CONVERSATIONS.items():
        for agp in (False, True):
            want = hf_render(source, messages, agp)
            rc, out, err = rtx_render(path, messages, agp, tmp_path)
            where = f"{name} over {conv_name} (add_generation_prompt={agp})"
            if isinstance(want, Exception):
                assert rc == 1, f"{where}: jinja2 raised {want!r}, rtxtok gave {out!r}"
                if not isinstance(want, jinja2.exceptions.UndefinedError):
                    assert str(want) in err, f"{where}: {err}"
                failed += 1
            else:
                assert rc == 0, f"{where}: {err}"
                assert out == want, f"{where}:\n--- jinja2\n{want!r}\n--- rtxd\n{out!r}"
                rendered += 1
    assert rendered >= 8, f"{name}: only {rendered} renders succeeded"


def test_special_tokens_undefined_or_set(tmp_path):
    """bos_token / eos_token given or not (undefined, as for a tokenizer without them)."""
    for name in ("llama3", "mistral-v0.1", "zephyr", "gemma"):
        path = TEMPLATES / f"{name}.jinja"
        msgs = CONVERSATIONS["no_system"]
        for bos, eos in ((None, None), ("<|begin_of_text|>", "<|eot_id|>"), ("", "")):
            want = hf_render(path.read_text(), msgs, True, bos=bos, eos=eos)
            rc, out, err = rtx_render(path, msgs, True, tmp_path, bos=bos, eos=eos)
            if isinstance(want, Exception):
                assert rc == 1, (name, bos, want)
            else:
                assert (rc, out) == (0, want), (name, bos, err)


def test_raise_exception_message(tmp_path):
    path = TEMPLATES / "mistral-v0.1.jinja"
    rc, out, err = rtx_render(path, CONVERSATIONS["system_multi_turn"], False, tmp_path)
    assert rc == 1 and out == ""
    assert "Conversation roles must alternate user/assistant/user/assistant/..." in err
    assert "line 1" in err


SNIPPETS = [
    # whitespace control and the trim / lstrip rules
    "a  {%- if true %} b {% endif -%}  c\n  {% if true %}\n    x\n  {% endif %}\n",
    "{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n",
    "  {{- 'x' -}}  \n  {{ 'y' }}  \n{#- c #}\n  {# c2 #}\nz\r\nw\r\n",
    "x {%+ if true %}y{% endif %}\n{%- if true +%}\nkeep{% endif %}",
    # scoping: sets in loops stay in the iteration, if does not scope, namespace carries
    "{% set a = 1 %}{% for x in [1,2,3] %}{% set a = a + x %}{{ a }}{% endfor %}{{ a }}",
    "{% if true %}{% set b = 5 %}{% endif %}{{ b }}{% for x in [1] %}{% set c = 1 %}{% endfor %}[{{ c }}]",
    "{% set ns = namespace(t=0) %}{% for x in range(5) %}{% set ns.t = ns.t + x %}{% endfor %}{{ ns.t }}",
    # literals, escapes, printing of values
    "{{ 'a\\tb\\n\\\\ \\'q\\' \\x41\\u00e9\\U0001F600 \\d' }}|{{ \"it's\" }}|{{ 'x' 'y' }}",
    "{{ [1, 2.0, 'a', none, true, [], {}, (1,), {'k': (1, 'v')}] }} {{ 1_000 }} {{ 1.5e3 }} {{ 0.5 if false else 1 }}",
    "{{ 'q\\'s' }} {{ ['q\\'s', 'd\"q', 'both\\'\"', '\\n\\x00\\x7f\\u200b'] }}",
    "{{ 2**61 * 2 - 1 }} {{ 7 / 7 }} {{ 3 // 2.0 }} {{ -3 % -2 }} {{ 5 % -3 }} {{ -1.5 // 1 }} {{ 1e300 * 1e10 }} {{ 123456789.123456789 }}",
    # operators and precedence
    "{{ (1 + 2 * 3) ~ 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 < 2 and 2 < 1 or 'z' }} {{ 'ab' < 'b' }} {{ [1, 2] < [1, 3] }}",
    "{{ -('3' | int) }} {{ 'x' ~ -1 | abs }} {{ [1, 2] | length + 1 }} {{ 'a' if 0 else 'b' if 1 else 'c' }}",
    # loops
    "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }};{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in none_thing %}x{% else %}undefined is empty{% endfor %}",
    "{% for x in [1,2,3,4] if x is odd %}{{ loop.index }}/{{ loop.length }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for x in [1,2] %}{% for y in [3,4] %}{{ loop.index }}{{ x }}{{ y }}{% if y == 3 %}{% continue %}{% endif %}!{% endfor %}{% endfor %}",
    # macros
    "{% macro f(a, b=a ~ '!', c=none) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f('x', c=3) }}{{ f() }}",
    "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}",
    # filters
    "{{ ['b', 'a'] | join }} {{ [1, 2] | join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}] | join('+', attribute='n') }} {{ 'abc' | first }}{{ 'abc' | last }}",
    "{{ 'Hello World' | replace('o', '0') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }} {{ 'x y'.replace('', '.') }}",
    "{{ {'a': 1, 'b': [1, {'c': None}]} | tojson(indent=2, sort_keys=True) }} {{ [1, 'é'] | tojson(ensure_ascii=True) }} {{ {'a': 1} | tojson(separators=(',', ':')) }}",
    "{{ {'x': 'a\\u2028b\\x01'} | tojson }} {{ 3.0 | tojson }} {{ 1e100 | tojson }} {{ [none, true] | tojson }}",
    "{{ 'tHiS iS it' | capitalize }} {{ 'hello world' | title }} {{ \"they're bill's\" | title }} {{ \"they're bill's\".title() }} {{ 'ǆemal' | title }}",
    "{{ [1, 2, 3] | first }}{{ [] | first }}{{ [1, 2, 3] | last }} {{ {'a': 1} | list }} {{ 'ab' | list }} {{ none | default('d') }} {{ 0 | default('d', true) }}",
    "{{ [{'a': 1}, {'a': 2}, {'b': 3}] | selectattr('a') | list }} {{ [{'a': 1}, {'b': 3}] | rejectattr('a', 'defined') | list }} {{ [1, 0, 2] | select | list }} {{ [1, 2, 3] | reject('odd') | list }}",
    "{{ ['a', 'B'] | map('upper') | list }} {{ [{'a': 1}, {}] | map(attribute='a', default='-') | list }} {{ [1, -2] | map('abs') | join }}",
    "{{ '1e3' | float }} {{ 'inf' | float }} {{ '12abc' | int }} {{ '0x1A' | int }} {{ '-7' | int }} {{ '1_000' | int }} {{ true | float }} {{ 4.7 | int }} {{ -4.7 | int }}",
    # tests
    "{{ none is none }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ 'x' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ x is undefined }}",
    "{{ 3 is gt 2 }}{{ 3 is lt 2 }}{{ 3 is le 3 }}{{ 'A' is upper }}{{ 4 is divisibleby(2) }}{{ 2 is in [1, 2] }}{{ 1 is eq 1.0 }}{{ 1 is ne 2 }}{{ true is true }}{{ 1 is true }}{{ false is false }}",
    # strings and dicts
    "{{ 'a,b,,c'.split(',') }} {{ 'a b  c '.split(none, 1) }} {{ '  a b '.split() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}",
    "{{ '--x--'.strip('-') }} {{ '  x '.lstrip() }}| {{ 'xy..'.rstrip('.') }} {{ 'ab'.upper() }}{{ 'AB'.lower() }} {{ 'a b'.title() }} {{ 'aB'.capitalize() }}",
    "{% set d = {'a': 1, 'b': 2} %}{{ d.get('a') }}{{ d.get('c', 3) }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{{ d['a'] }}{{ d.a }}{{ d.c }}|{{ 'a' in d }}",
    "{{ 'héllo'[1] }}{{ 'héllo'[-1] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ [1, 2, 3][5] }}|{{ [1, 2, 3][-1] }}{{ [1, 2, 3][1:] }}{{ (1, 2, 3)[:2] }}{{ [1,2,3,4,5][-2:0:-2] }}",
    # set block, generation, strftime_now, raise paths are elsewhere
    "{% set x %}a{{ 1 + 1 }}b{% endset %}{{ x }}{{ x | length }}{% generation %}g{% endgeneration %}",
    "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now is defined }} {{ raise_exception is defined }} {{ range(2, 9, 3) | list }}",
]


def render_both(tmp_path, src):
    """jinja2's rendering of src over no messages, and rtxtok chat's (rc, out, err)."""
    path = tmp_path / "snippet.jinja"
    path.write_text(src)
    return hf_render(src, [], False), rtx_render(path, [], False, tmp_path)


@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
def test_snippets_render_like_jinja2(tmp_path):
    """Small templates, one construct family each, rendered over no messages."""
    for i, src in enumerate(SNIPPETS):
        want, (rc, out, err) = render_both(tmp_path, src)
        assert not isinstance(want, Exception), f"snippet {i} {src!r}: jinja2 raised {want!r}"
        assert rc == 0, f"snippet {i} {src!r}: {err}"
        assert out == want, f"snippet {i} {src!r}:\n--- jinja2\n{want!r}\n--- rtxd\n{out!r}"


ERRORS = [
    "{{ -'3' | int }}",               # the filter applies to -'3'
    "{{ 1 + 2 * 3 ~ 4 }}",           # ~ binds tighter than +: 1 + '64'
    "{{ x.y }}",                      # attribute of an undefined value
    "{{ x['y'] }}",
    "{{ 1 + none }}",                 # unsupported operand types
    "{{ 1 / 0 }}",
    "{{ 'a' < 1 }}",
    "{{ [1, 2] | selectattr('a') | length }}",  # a generator has no len()
    "{{ raise_exception('custom failure') }}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "{{ (1).strip() }}",
    "{{ x + 1 }}",
]


def test_runtime_errors_like_jinja2(tmp_path):
    for src in ERRORS:
        want, (rc, out, err) = render_both(tmp_path, src)
        assert isinstance(want, Exception), f"{src!r}: jinja2 rendered {want!r}"
        assert rc == 1, f"{src!r}: rtxtok gave {rc} {out!r}"
        assert "line 1" in err, err
        assert "raise_exception" not in src or "raise_exception: custom failure" in err


def test_unsupported_and_malformed_templates_fail_to_load(tmp_path):
    cases = {
        "{% include 'x.jinja' %}": "line 1: {% include %} is not supported",
        "a\nb\n{{ x | wordwrap }}": "line 3: filter 'wordwrap' is not supported",
        "{% if x is prime %}{% endif %}": "test 'prime' is not supported",
        "{{ 'a'.format(1) }}": "method 'format' is not supported",
        "{{ lipsum() }}": "function 'lipsum' is not supported",
        "{% raw %}x{% endraw %}": "{% raw %} is not supported",
        "{% for x in y recursive %}{% endfor %}": "recursive loops are not supported",
        "\n\n{% if x %}": "line 3: unexpected end of template, expected 'endif'",
        "{% for x in y %}{% endif %}": "unexpected 'endif'",
        "{{ 1 + }}": "line 1: unexpected end of print statement",
        "{% break %}": "'break' outside of a loop",
        "{{ (1, 2 }}": "unexpected '}', expected ')'",
        "{# never closed": "missing end of comment tag",
        "{{ 'unterminated }}": "unterminated string",
        "{% set %}": "unexpected end of statement block, expected a name",
    }
    for src, msg in cases.items():
        path = tmp_path / "bad.jinja"
        path.write_text(src)
        rc, out, err = rtx_render(path, [], False, tmp_path)
        assert rc == 2, f"{src!r}: {rc} {out!r} {err}"
        assert msg in err, f"{src!r}: {err}"
