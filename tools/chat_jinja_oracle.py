"""Python Jinja2 in transformers' chat-template environment: the oracle for kylin's interpreter.

Mirrors transformers' `_compile_jinja_template`: ImmutableSandboxedEnvironment with
trim_blocks + lstrip_blocks + loopcontrols + its AssistantTracker (`{% generation %}`), its
`tojson` (json.dumps, ensure_ascii=False, key order kept) and `raise_exception`. Requires the
`jinja2` package (3.x; the stored cases were made with 3.1.6 and markupsafe 3.0.3).

  python3 tools/chat_jinja_oracle.py unit  > tests/data/reference/chat-jinja-unit.jsonl
  python3 tools/chat_jinja_oracle.py hub   > tests/data/reference/chat-hub-templates.jsonl
      (tests/data/templates/hub/*.jinja over a set of conversations, as apply_chat_template renders them)
  python3 tools/chat_jinja_oracle.py rerender tests/data/qwen35-tokenizer/chat_template_qwen35_llamacpp_4b.jinja \
      tests/data/reference/qwen35-chat-template.jsonl > tests/data/reference/chat-qwen35-llamacpp-4b.jsonl
      (the Qwen3.5 reference conversations through llama.cpp's copy of the 4B template)
  python3 tools/chat_jinja_oracle.py check tests/data/reference/chat-template-extra.jsonl
      (re-renders @huggingface/jinja's cases with Python Jinja2 and reports any difference)
"""
import json
import pathlib
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, without the assistant-mask bookkeeping: a call block."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env, source, variables):
    try:
        return {"expected": env.from_string(source).render(**variables)}
    except Exception as e:  # noqa: BLE001 - every failure is an expected error case
        return {"error": type(e).__name__ + ": " + str(e)}


# (template, variables). Variables are JSON, as kylin receives them.
UNIT = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("x {{ 1 }} \n  {{- 2 -}}  \n y", {}),
    ("  {# comment #}\nz", {}),
    ("a {# c #} b\n{#- c -#}\n c", {}),
    ("{% if true +%}\nkeep{%+ if true %}X{% endif %}\n{% endif %}", {}),
    ("line\n    {%- for x in [1,2] %}\n    {{ x }}\n    {%- endfor %}\nend\n", {}),
    ("{% raw %}{{ not parsed }}{% endraw %}!", {}),
    ("t\r\nu\n", {}),
    ("{{ 'a' }}   {% if true %}x{% endif %}", {}),
    # literals, arithmetic, Python number formatting
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("{{ 7 / 2 }} {{ 6 / 2 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-7 }} {{ 0.0001 }}", {}),
    ("{{ -x }} {{ +x }} {{ x * 1.0 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }}", {"x": 5}),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("{{ none }} {{ true }} {{ false }} {{ None }} {{ True }}", {}),
    ("{{ [1, 'a', none, true, 1.5, [2]] }} {{ {'k': 'v', 'n': none} }} {{ (1,) }} {{ (1, 2) }} {{ () }}", {}),
    ("{{ \"it's\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\tnl\\n'] }}", {}),
    ("{{ 'a' 'b' }} {{ 'x\\u00e9\\x41\\n' }}", {}),
    # and/or/not return operands, in, conditional expressions
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not 0 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 2] }}", {}),
    ("{{ 'k' in d }} {{ 'v' in d }} {{ 'yes' if d else 'no' }} [{{ 'yes' if not d }}]", {"d": {"k": "v"}}),
    ("{{ x ~ 1 ~ none ~ undefined_name }}", {"x": "s"}),
    # subscripts, slices, attributes, undefined
    ("{{ m[0] }} {{ m[-1] }} {{ m[1:] }} {{ m[::-1] }} {{ m[:-1] }} {{ m[::2] }} {{ m[5] }}|", {"m": [1, 2, 3, 4]}),
    ("{{ s[0] }}{{ s[-1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s|length }}", {"s": "héllo✓"}),
    ("{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ d.b.c }} {{ d['b']['c'] }}", {"d": {"a": 1, "b": {"c": 2}}}),
    ("{{ undefined_name }}|{{ undefined_name is defined }}|{{ d.x is defined }}|{{ d.x is undefined }}", {"d": {}}),
    ("{{ undefined_name.attr }}", {}),
    ("{{ d.missing.attr }}", {"d": {}}),
    ("{% for x in undefined_name %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("{{ undefined_name + 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ none + 'a' }}", {}),
    ("{{ 'x' in none }}", {}),
    # tests
    ("{{ x is string }} {{ x is mapping }} {{ x is iterable }} {{ x is sequence }} {{ x is number }} {{ x is none }}", {"x": "s"}),
    ("{{ x is string }} {{ x is mapping }} {{ x is iterable }} {{ x is sequence }} {{ x is number }}", {"x": {"a": 1}}),
    ("{{ x is number }} {{ x is integer }} {{ x is float }} {{ x is boolean }} {{ x is true }} {{ x is false }}", {"x": True}),
    ("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ x is none }} {{ x is not none }}", {"x": None}),
    ("{{ 1 is eq 1 }} {{ 'a' is equalto 'b' }} {{ 2 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ f is callable }}", {"f": 1}),
    ("{{ range is callable }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 2 }}", {}),
    # filters
    ("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ [1, 2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }}", {}),
    ("{{ 5|string ~ 1 }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }}", {}),
    ("{{ 'ab'|list }} {{ {'a': 1, 'b': 2}|list }} {{ [1, 2, 3]|join(', ') }} {{ ['a', none]|join }} {{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}", {}),
    ("{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('n') }}", {}),
    ("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ []|first }}|", {}),
    ("{{ 'hELLo wORLD'|lower }} {{ 'hello'|upper }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }}", {}),
    ("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ '<b>'|safe }}", {}),
    ("{{ users|selectattr('active')|map(attribute='name')|join(',') }} {{ users|rejectattr('active')|map(attribute='name')|list }}",
     {"users": [{"name": "a", "active": True}, {"name": "b", "active": False}, {"name": "c", "active": True}]}),
    ("{{ users|selectattr('role', 'equalto', 'tool')|list|length }} {{ users|map(attribute='role')|unique_missing_ok|list }}",
     {"users": [{"role": "tool"}, {"role": "user"}]}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ ['a', 'B']|map('upper')|list }}", {}),
    ("{{ 'a-b-a'|replace('a', 'x') }} {{ 'a-b-a'|replace('a', 'x', 1) }} {{ -3|abs }} {{ (-3)|abs }}", {}),
    ("{{ x|tojson }}", {"x": {"b": [1, 2.5, None, True, "é\"\n\u001f"], "a": {}, "c": []}}),
    ("{{ x|tojson(indent=2) }}", {"x": {"b": [1, {"z": 0}], "a": {}, "c": []}}),
    ("{{ x|tojson(separators=(',', ':')) }} {{ x|tojson(sort_keys=true) }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("{{ 1.0|tojson }} {{ 1e-7|tojson }} {{ 1e22|tojson }} {{ 123456789.125|tojson }} {{ x|tojson }}", {"x": [1.0, 0.5, 100.0]}),
    ("{{ undefined_name|tojson }}", {}),
    # str methods
    ("{{ s.startswith('ab') }} {{ s.endswith(('x', 'ef')) }} {{ s.upper() }} {{ 'A b'.lower() }} {{ 'hello wORLD x1y'.title() }}", {"s": "abcdef"}),
    ("{{ ' a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a  b c'.split(none, 1) }}", {}),
    ("[{{ '\\n x \\n'.strip() }}] [{{ '\\n x \\n'.strip('\\n') }}] [{{ 'xxa'.lstrip('x') }}] [{{ 'axx'.rstrip('x') }}] [{{ '\\u3000x\\xa0'.strip() }}]", {}),
    ("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.replace('', '.') }}", {}),
    ("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     {"s": "<think>\nplan\n</think>\n\nanswer"}),
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }}", {"d": {"a": 1, "b": 2}}),
    ("{{ 'abc'.nosuchmethod }}|", {}),
    # loops, loop variable, filtering, else, break/continue, scoping
    ("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("{% for x in [] %}x{% else %}none{% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}", {}),
    ("{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 7, 2) %}{{ i }}{% endfor %} {{ range(5, 0, -2)|list }}", {}),
    ("{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
    # set forms, macros, tuples
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 'x') %}{{ t }} {% set s %}captured {{ a }}{% endset %}[{{ s }}]", {}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}", {}),
    ("{% set top = 'T' %}{% macro m() %}{{ top }}{{ inner_only }}{% endmacro %}{% for inner_only in [1] %}{{ m() }}{% endfor %}", {}),
    ("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", {}),
    ("{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ {'a': {'b': [1, {'c': 'deep'}]}}['a'].b[1].c }}", {}),
    # raise_exception and hostile input
    ("{% if x %}{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}ok", {"x": True}),
    ("{{ 1 // 0 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ [1, 2][1:0:0] }}", {}),
    # Qwen-style chat fragments
    ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}{%- endfor %}",
     {"messages": [{"role": "user", "content": "  hi  "}]}),
    ("{%- if tool_call.arguments is string %}{{ tool_call.arguments }}{% else %}{{ tool_call.arguments | tojson }}{% endif %}",
     {"tool_call": {"arguments": {"x": 1.0, "y": "z"}}}),
]


# jinja2's builtin filters, tests and tags beyond the ones above (an external suite found the first
# three groups missing: select/map over none, unique, {% filter %}).
PEOPLE = [{"n": "b", "g": "x", "age": 30}, {"n": "a", "g": "X", "age": 25}, {"n": "c", "age": 30}]
UNIT += [
    # select/reject/map over none and falsy values are empty (jinja2's `if value:`)
    ("{{ none|selectattr('type', 'equalto', 'x')|list }} {{ none|select|list }} {{ none|map(attribute='a')|list }} {{ none|reject('none')|list }} {{ none|rejectattr('a')|list }} {{ undefined_name|selectattr('a')|list }} {{ 0|map('string')|list }} {{ ''|select|list }}", {}),
    ("{{ tools|selectattr('type', 'equalto', 'code_interpreter')|list|length > 0 }}", {"tools": None}),
    ("{{ 5|select|list }}", {}),
    ("{{ xs|selectattr('a', 'gt', 1)|map(attribute='a')|list }} {{ xs|map(attribute='b', default='-')|list }} {{ xs|map(attribute='a.x')|list }}", {"xs": [{"a": 1}, {"a": 2}, {"a": 3}]}),
    # unique
    ("{{ ['foo', 'bar', 'foobar', 'FooBar']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ p|unique(attribute='age')|map(attribute='n')|list }} {{ [1, 1.0, true, 2, none, none]|unique|list }} {{ [(1, 2), (1, 2)]|unique|list }}", {"p": PEOPLE}),
    ("{{ [[1], [1]]|unique|list }}", {}),
    # {% filter %} blocks, filtered {% set %} blocks
    ("{% filter upper %}a{{ x }}b{% endfilter %}|{% filter replace('a', 'b')|trim %}  aXa  {% endfilter %}|{% filter upper %}{% filter replace('x', 'y') %}x{% endfilter %}z{% endfilter %}", {"x": "q"}),
    ("{% filter trim %}{% set inner = 1 %} v {% endfilter %}{{ inner is defined }} {% set s | trim | upper %}  hi {{ x }} {% endset %}[{{ s }}]", {"x": "there"}),
    ("{% for m in ['a', 'b'] %}{% filter upper %}{{ m }}{{ loop.index }}{% endfilter %}{% endfor %}", {}),
    # sort, dictsort, min, max, sum
    ("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }} {{ 'cba'|sort|join }} {{ {'b': 1, 'a': 2}|sort }}", {}),
    ("{{ p|sort(attribute='n')|map(attribute='n')|join }} {{ p|sort(attribute='age,n')|map(attribute='n')|join }} {{ p|sort(attribute='age', reverse=true)|map(attribute='n')|join }}", {"p": PEOPLE}),
    ("{{ [1, 'a']|sort }}", {}),
    ("{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(false, 'value') }} {{ d|dictsort(reverse=true) }}", {"d": {"b": 3, "A": 1, "a": 2}}),
    ("{{ d|dictsort(by='nope') }}", {"d": {"a": 1}}),
    ("{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ ['b', 'A']|min(case_sensitive=true) }} {{ p|max(attribute='age') }} {{ p|min(attribute='n') }} [{{ []|max }}]", {"p": PEOPLE}),
    ("{{ [1, 2.5, true]|sum }} {{ p|sum(attribute='age') }} {{ [[1], [2]]|sum(start=[]) }} {{ []|sum }} {{ [1]|sum(start=10) }}", {"p": PEOPLE}),
    ("{{ ['a', 'b']|sum }}", {}),
    # groupby
    ("{% for g in p|groupby('age') %}{{ g.grouper }}:{{ g.list|map(attribute='n')|join }};{% endfor %} {% for key, items in p|groupby('g', default='?') %}{{ key }}={{ items|length }};{% endfor %} {{ p|groupby('g', default='?', case_sensitive=true)|map(attribute='grouper')|list }}", {"p": PEOPLE}),
    ("{{ [{'k': 'b'}, {'k': 'a'}]|groupby('k') }} {{ ([{'k': 1}]|groupby('k'))[0][0] }}", {}),
    ("{{ p|groupby('g') }}", {"p": PEOPLE}),
    # batch, slice, first, last, random, attr, reverse, length
    ("{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 0)|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4, 5]|slice(3, 'x')|list }} {{ []|batch(3)|list }}", {}),
    ("{{ {'b': 1, 'a': 2}|first }} {{ 'xyz'|last }} {{ [7]|random }} [{{ []|random }}] {{ (d|attr('keys'))()|list }} [{{ d|attr('a') }}] {{ d|attr('a') is defined }}", {"d": {"a": 1}}),
    # text filters
    ("[{{ 'abc'|center(9) }}] [{{ 'ab'|center(7) }}] [{{ 'abcd'|center(2) }}] [{{ 5|center(3) }}]", {}),
    ("[{{ 'a\nb\n\nc'|indent }}] [{{ 'a\nb'|indent(2, true) }}] [{{ 'a\n\nb'|indent('> ', blank=true) }}] [{{ 'a\r\nb\x0bc'|indent(1) }}] [{{ ''|indent(first=true) }}]", {}),
    ("{{ 5|indent }}", {}),
    ("[{{ 'foo bar baz qux'|truncate(9) }}] [{{ 'foo bar baz qux'|truncate(9, true) }}] [{{ 'foo bar baz qux'|truncate(11) }}] [{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}] [{{ 'héllo wörld'|truncate(6, true, '…', 0) }}]", {}),
    ("{{ 'abcdef'|truncate(2) }}", {}),
    ("{{ 'one two  three'|wordcount }} {{ 'héllo wörld_x 1-2'|wordcount }} {{ ''|wordcount }} {{ 42|wordcount }}", {}),
    ("{{ 42.55|round }} {{ 42.55|round(1, 'floor') }} {{ 42.55|round(1, 'ceil') }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1234.5|round(-2) }} {{ 5|round }} {{ 15|round(-1) }} {{ 25|round(-1) }} {{ 5|round(method='ceil') }} {{ -2.5|round }} {{ 0.5|round }} {{ 1.25|round(1) }}", {}),
    ("{{ 1|round(method='nearest') }}", {}),
    ("{{ 100|filesizeformat }} {{ 1|filesizeformat }} {{ 1000|filesizeformat }} {{ 1500000|filesizeformat }} {{ 1500000|filesizeformat(true) }} {{ '2048'|filesizeformat(binary=true) }} {{ 1e30|filesizeformat }}", {}),
    ("{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe|e }} {{ '<b>'|forceescape }} {{ ('<b>'|safe) + '<i>' }} {{ '<i>' + ('<b>'|safe) }} {{ ['a'|safe] }} {{ ('<'|safe) ~ '<' }} {{ 'x'|safe is escaped }} {{ 'x' is escaped }} {{ (('<'|safe) * 2) + '>' }} {{ 5|e }} {{ ('<'|safe)|string + '&' }}", {}),
    ("{{ ('a<'|safe).upper() + '>' }} {{ ('x'|safe)[0] + '<' }} {{ ('<'|safe|trim) + '<' }} {{ ('<'|safe|replace('<', '[')) + '<' }} {{ ['<', '>']|join('|'|safe) }} {{ ('a b'|safe).split()|first + '&' }}", {}),
    ("{{ \"Use the function '\"|safe + t['name'] + \"' to '\"|safe + t['description'] + \"'\\n\"|safe + t|tojson }}", {"t": {"name": "get_weather", "description": "Get the city's <weather> & more"}}),
    ("{{ '<p>Hello  <b>world</b></p>\n<!-- c --> &amp; &lt;x&gt; &#65;&#x42; &nbsp;!'|striptags }}", {}),
    ("{{ 'a b/c&d=é'|urlencode }} {{ {'a': 'x y', 'b': 1}|urlencode }} {{ [('k', 'v&'), ('z', 'ü')]|urlencode }} {{ 42|urlencode }}", {}),
    ("<ul{{ {'class': 'my list', 'missing': none, 'id': 'x<\"'}|xmlattr }}> <a{{ {'k': 1}|xmlattr(false) }}> <b{{ {}|xmlattr }}>", {}),
    ("{{ {'bad key': 1}|xmlattr }}", {}),
    ("{{ {'b': 1, 'a': [1, 2]}|pprint }} {{ 'x'|pprint }} {{ none|pprint }} {{ (1,)|pprint }} {{ {'b': none, 'a': {'d': 1, 'c': 2}}|pprint }}", {}),
    ("{{ 'a1a'|replace(1, 2) }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'Hello World'|title }} {{ 'x'|string|length }} {{ none|string }} {{ 2.0|string }} {{ true|string }}", {}),
    # printf-style % and |format
    ("{{ '%s-%d-%05.2f-%x-%o-%r-%%' % ('a', 42, 3.14159, 255, 8, 'q') }} {{ '%(a)s=%(b)d'|format(a='x', b=2) }} {{ '%s'|format([1, 2]) }} {{ '%s and %s'|format('x', none) }} {{ 'x' % [1] }}", {}),
    ("{{ '%-5s|%5s|%+d|% d|%#x|%#o|%e|%g|%G|%c|%c|%i|%.3s|%5.1f|%-6d|%*d|%05d|%d' % ('ab', 'cd', 3, 4, 255, 8, 12345.678, 0.00001, 1e20, 65, 'z', 7, 'abcdef', 2.25, -3, 4, 7, -42, 3.9) }}", {}),
    ("{{ '%d' % 'x' }}", {}),
    ("{{ '%s %s' % ('a',) }}", {}),
    ("{{ 'x' % 5 }}", {}),
    ("{{ '%(a)s' % {'b': 1} }}", {}),
    ("{{ '%x' % 1.5 }}", {}),
    ("{{ '%s'|format('a', b=1) }}", {}),
    # str.format
    ("{{ '{} {}'.format('a', 1) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}:{n:>5}'.format(name='k', n=3) }} {{ '{0[a]} {0.a} {1[1]}'.format({'a': 1}, [5, 6]) }} {{ '{!r} {!s} {{}}'.format('q', 'q') }}", {}),
    ("{{ '{:>8.3f}|{:<6}|{:^6}|{:+d}|{: d}|{:,.2f}|{:_}|{:o}|{:#x}|{:X}|{:c}|{:*^7}|{:08.3f}|{:#b}'.format(3.14159, 'ab', 'ab', 5, 5, 1234567.891, 1000000, 8, 255, 255, 65, 'mid', -3.5, 5) }}", {}),
    ("{{ '{:.3}|{:.1e}|{:g}|{:.0%}|{}|{!r:>6}|{:5}|{:<5}|{:05}|{:05}|{}|{}|{:>5}|{:{w}}|'.format(10.0, 12345.0, 0.00001, 0.255, 1.5, 'a', 42, 42, 42, 'ab', none, true, true, 'x', w=3) }}", {}),
    ("{{ '{} {}'.format('a') }}", {}),
    ("{{ '{0} {}'.format('a', 'b') }}", {}),
    ("{{ '{:d}'.format('a') }}", {}),
    ("{{ '{x}'.format(y=1) }}", {}),
    # str, list and dict methods
    ("{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(none, 1) }} {{ 'a b c'.rsplit() }} {{ 'l1\nl2\r\nl3\n'.splitlines() }} {{ 'l1\nl2'.splitlines(true) }} {{ 'x=1'.partition('=') }} {{ 'a.b.c'.rpartition('.') }} {{ 'abc'.partition('z') }}", {}),
    ("{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'abc'.removeprefix('z') }} [{{ 'ab'.ljust(4, '*') }}] [{{ 'ab'.rjust(4) }}] [{{ 'ab'.center(5, '-') }}] {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'aBc'.swapcase() }} {{ 'ABC'.casefold() }} [{{ 'a\tbc\td'.expandtabs(4) }}]", {}),
    ("{{ 'abcabc'.rfind('c') }} {{ 'abcabc'.index('c', 3) }} {{ 'abc'.find('c', -1) }} {{ 'abcabc'.rindex('b') }} {{ 'héé'.find('é', 2) }} {{ 'aaaa'.count('aa') }} {{ 'abc'.count('') }} {{ 'abcabc'.find('b', 2, 4) }}", {}),
    ("{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ ' \t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'Hello World'.istitle() }} {{ ''.isdigit() }} {{ 'é'.isalpha() }} {{ '1.5'.isnumeric() }} {{ 'abc'.isascii() }} {{ '12'.isdecimal() }} {{ 'a1'.isupper() }}", {}),
    ("{{ 'abc'.index('z') }}", {}),
    ("{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ (1, 2).index(1) }} {{ d.copy() }} {{ [3].copy() }} {{ '{a}-{b}'.format_map(d) }}", {"d": {"a": 1, "b": 2}}),
    ("{{ [1, 2].index(5) }}", {}),
    ("{{ xs.append(3) }}", {"xs": [1]}),
    ("{{ d.update({'b': 1}) }}", {"d": {}}),
    ("{{ d.pop('a') }}", {"d": {"a": 1}}),
    ("[{{ xs.append }}] {{ xs.append is defined }} {{ xs.__class__ is defined }} {{ d.items is defined }} {{ d.update is defined }}", {"xs": [1], "d": {"update": 1}}),
    # tests
    ("{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }} {{ x is sameas x }} {{ [1] is sameas [1] }} {{ none is sameas none }} {{ true is sameas true }} {{ 'x' is lower }} {{ '1' is lower }} {{ 5 is upper }} {{ 'A1' is upper }}", {"x": [1]}),
    ("{{ loop is undefined }} {% for i in [1] %}{{ loop is callable }}{% endfor %} {{ namespace() is callable }} {{ joiner() is callable }} {{ 3.0 is odd }} {{ 10 is divisibleby(5.0) }}", {}),
    # tags: call, macro varargs/kwargs, with, block, autoescape, recursive loops, loop.changed
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(item, i) each(['a', 'b']) %}[{{ i }}:{{ item }}]{% endcall %}", {}),
    ("{% macro m() %}{{ caller() }}{% endmacro %}{% for v in [1, 2] %}{% call m() %}v={{ v }};{% endcall %}{% endfor %}", {}),
    ("{% macro m(x) %}{{ x }}{% if caller is defined %}+{{ caller() }}{% endif %}{% endmacro %}{{ m(1) }} {% call m(2) %}c{% endcall %}", {}),
    ("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 3, 4, 5, x=6) }} {{ m(b=7, a=8) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", {}),
    ("{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(*[1, 2]) }} {{ m(**{'a': 3, 'b': 4}) }} {{ '{}-{}'.format(*['x', 'y']) }} {{ dict(**{'k': 1}) }}", {}),
    ("{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}{{ b is defined }}{{ c is defined }} {% with %}{% set d = 1 %}{% endwith %}{{ d is defined }}", {}),
    ("{% set x = 'X' %}{% block content %}[{{ x }}]{% set y = 1 %}{% endblock %}{{ y is defined }}{% block other scoped %}!{% endblock other %}", {}),
    ("{% autoescape false %}{{ '<' }}{% endautoescape %}{% generation %}{% set z = 1 %}gen{% endgeneration %}{{ z is defined }}", {}),
    ("{% for item in tree recursive %}{{ item.n }}{% if item.c %}({{ loop(item.c) }}){% endif %}{{ loop.depth }}{{ loop.depth0 }};{% endfor %}",
     {"tree": [{"n": "a", "c": [{"n": "b", "c": [{"n": "c"}]}, {"n": "d"}]}, {"n": "e"}]}),
    ("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %} {% for a, b in [(1, 2), (1, 2), (1, 3)] %}{{ loop.changed(a, b) }}{% endfor %}", {}),
    ("{% set c = cycler('a', 'b') %}{{ c.current }}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.reset() }}{{ c.current }} {% set j = joiner('|') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %} {% set j2 = joiner() %}{{ j2() }}{{ j2() }}", {}),
    ("{{ dict([('a', 1)], b=2) }} {{ dict({'x': 1}) }} {{ dict() }} {{ dict(a=1) == {'a': 1} }}", {}),
    ("{{ dict([('a', 1, 2)]) }}", {}),
    # transformers' tojson takes ensure_ascii first; an undefined subscript key gives an undefined value
    ("{{ d|tojson(2) }} {{ d|tojson(false, 2) }} {{ d|tojson(ensure_ascii=true, indent=1) }} {{ ['a', none]|tojson(separators=[',', ':']) }} {{ d|tojson(sort_keys=true) }}", {"d": {"b": "é😀", "a": [1]}}),
    ("{{ {'a': 1}[undefined_name] is defined }} {{ 'ab'[undefined_name] is defined }} {{ [1][undefined_name] is defined }}", {}),
    ("{{ ('<%s>'|safe) % '&' }} {{ ('<%s>'|safe) % ('&'|safe) }} {{ ('<{}>'|safe).format('&') }} {{ ('%d%%'|safe) % 5 }} {{ ('%r'|safe) % 'a<' }} {{ (('<%s>'|safe) % 'x') + '<' }}", {}),
    ("{% set ns = namespace(x='') %}{% for i in [1, 2] %}{% set ns.x %}{{ ns.x }}<{{ i }}>{% endset %}{% endfor %}{{ ns.x }} {% set ns.y | upper %}b{% endset %}{{ ns.y }}", {}),
    # Llama 3.x, Mistral and functionary idioms
    ("{%- set date_string = date_string | default('26 Jul 2024') %}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- endif %}[{{ system_message }}]{{ messages|length }} {{ date_string }}",
     {"messages": [{"role": "system", "content": " sys "}, {"role": "user", "content": "u"}]}),
    ("{%- for m in messages | rejectattr('role', 'equalto', 'tool') | selectattr('tool_calls', 'undefined') %}{{ m.role }};{% endfor %}{%- set ns = namespace(found=false) %}{%- for m in messages %}{%- if m.tool_calls is defined and m.tool_calls|length == 1 %}{%- set ns.found = true %}{%- endif %}{%- endfor %}{{ ns.found }}",
     {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"id": "abcdefghi"}]}, {"role": "tool", "content": "r"}]}),
    ("{%- for tool in tools %}{{ tool.function.parameters.properties|map('tojson')|join(' | ') }}{{ tool.function.name|upper }}{{ (tool.function.parameters.required | default([])) | length }}{% endfor %}",
     {"tools": [{"function": {"name": "f", "parameters": {"properties": {"b": {"type": "string"}}, "required": ["b"]}}}]}),
]


def unit_cases():
    env = make_env()
    for source, variables in UNIT:
        line = {"template": source, "vars": variables}
        line.update(render(env, source, variables))
        print(json.dumps(line, ensure_ascii=False))


# Conversations for the hub templates (tests/data/templates/hub), as transformers users pass them:
# tool-call arguments as dicts (one case as the JSON string OpenAI clients send).
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the city's current weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "description": "How many days", "default": 1, "minimum": 1},
        "unit": {"type": "string", "description": "Unit", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "sites": {"type": "array", "description": "Sites", "items": {"type": "string"}},
        "filters": {"type": "object", "description": "Filters", "properties": {"lang": {"type": "string"}}}},
        "required": ["query"]}}}


def tool_turns(arguments, content=""):
    call = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21}"}]


HUB_CONVERSATIONS = [
    ("plain", [{"role": "user", "content": "Hello!"}], None, True),
    ("system_multi_turn", [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello."},
                           {"role": "user", "content": "Tell me a <b>\"joke\"</b> & 'more'"}], None, True),
    ("no_generation_prompt", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}], None, False),
    ("roles_not_alternating", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None, True),
    ("tools", [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "Weather in Paris?"}], [WEATHER, SEARCH], True),
    ("tool_call_history", tool_turns({"city": "Paris", "days": 2}), [WEATHER], True),
    ("tool_call_null_content", tool_turns({"city": "Paris"}, None), [WEATHER], True),
    ("tool_call_string_arguments", tool_turns('{"city": "Paris", "days": 2}'), [WEATHER], True),
]
HUB_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
HUB_KWARGS = {"date_string": "26 Jul 2024"}
# firefunction-v2 takes its function specs as a JSON string and the date as kwargs of their own.
HUB_TEMPLATE_KWARGS = {"fireworks-ai-llama-3-firefunction-v2.jinja": {
    "functions": json.dumps([WEATHER["function"], SEARCH["function"]], indent=2), "datetime": "2024-07-26"}}


def hub_cases():
    env = make_env()
    for path in sorted((ROOT / "tests/data/templates/hub").glob("*.jinja")):
        source = path.read_text()
        kwargs = dict(HUB_KWARGS, **HUB_TEMPLATE_KWARGS.get(path.name, {}))
        for name, messages, tools, generation_prompt in HUB_CONVERSATIONS:
            variables = dict(messages=messages, tools=tools, documents=None, add_generation_prompt=generation_prompt,
                             **HUB_SPECIAL, **kwargs)
            line = {"template": path.name, "name": name, "messages": messages, "add_generation_prompt": generation_prompt,
                    "kwargs": kwargs, "special_tokens": HUB_SPECIAL}
            if tools is not None:
                line["tools"] = tools
            line.update(render(env, source, variables))
            print(json.dumps(line, ensure_ascii=False))


def rerender(template, path):
    """The cases of a reference file (messages, kwargs, add_generation_prompt) rendered with another template."""
    env = make_env()
    source = (ROOT / template).read_text()
    for text in pathlib.Path(path).read_text().splitlines():
        case = json.loads(text)
        kwargs = dict(case.get("kwargs", {}))
        tools = kwargs.pop("tools", case.get("tools"))
        variables = dict(messages=case["messages"], tools=tools, documents=None,
                         add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)
        line = {k: v for k, v in case.items() if not k.startswith("expected")}
        line["template"] = pathlib.Path(template).name
        got = render(env, source, variables)
        line.update({"expected": got["expected"]} if "expected" in got else {"expected_error": got["error"].split(": ", 1)[1]})
        print(json.dumps(line, ensure_ascii=False))


def check(path):
    """Re-render @huggingface/jinja's cases in transformers' Python environment."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    cfg = json.loads((root / "tests/data/qwen3-tokenizer/tokenizer_config.json").read_text())
    sources = {"qwen3": cfg["chat_template"], "qwen2.5": (root / "tests/data/templates/qwen2.5.jinja").read_text()}
    env = make_env()
    bad = 0
    for n, text in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        case = json.loads(text)
        kwargs = dict(case.get("kwargs", {}))
        tools = kwargs.pop("tools", case.get("tools"))
        # transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special, **kwargs)
        variables = dict(messages=case["messages"], tools=tools, documents=None,
                         add_generation_prompt=case.get("add_generation_prompt", False), eos_token="<|im_end|>", **kwargs)
        got = render(env, sources[case.get("template", "qwen3")], variables)
        if got.get("expected") != case["expected"]:
            bad += 1
            print(f"line {n}: Python Jinja2 differs: {got}", file=sys.stderr)
    print(f"{bad} of {n} cases differ from Python Jinja2", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "unit":
        unit_cases()
    elif len(sys.argv) >= 2 and sys.argv[1] == "hub":
        hub_cases()
    elif len(sys.argv) == 4 and sys.argv[1] == "rerender":
        rerender(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        sys.exit(__doc__)
