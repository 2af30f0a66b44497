"""Python Jinja2 in transformers' chat-template environment: the oracle for kylin's interpreter.

Mirrors transformers' `_compile_jinja_template`: ImmutableSandboxedEnvironment with
trim_blocks + lstrip_blocks + loopcontrols, its `tojson` (json.dumps, ensure_ascii=False, key order
kept) and `raise_exception`. Requires the `jinja2` package (3.x).

  python3 tools/chat_jinja_oracle.py unit  > tests/data/reference/chat-jinja-unit.jsonl
  python3 tools/chat_jinja_oracle.py check tests/data/reference/chat-template-extra.jsonl
      (re-renders @huggingface/jinja's cases with Python Jinja2 and reports any difference)
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
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


def unit_cases():
    env = make_env()
    for source, variables in UNIT:
        line = {"template": source, "vars": variables}
        line.update(render(env, source, variables))
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
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        sys.exit(__doc__)
