// Unsupported constructs, bad syntax and runaway templates fail with a kylin::Error (category
// chat_template) that names the construct and the template line, instead of hanging or crashing.
#include <doctest/doctest.h>

#include <string>

#include "template_errors.hpp"
#include "kylin/chat/template.hpp"

namespace {

using kylin::test::error_of;

}  // namespace

TEST_CASE("unsupported tags, filters and tests are rejected at load time with their name and line") {
  CHECK(error_of("a\nb\n{% include 'other.jinja' %}") ==
        "[kylin.template] chat template line 3: unsupported tag 'include': a chat template cannot load other templates");
  CHECK(error_of("{{ x }}\n{{ x | wordwrap(3) }}") == "[kylin.template] chat template line 2: unsupported filter 'wordwrap'");
  CHECK(error_of("{{ x|urlize }}") == "[kylin.template] chat template line 1: unsupported filter 'urlize'");
  CHECK(error_of("{% filter wordwrap %}x{% endfilter %}").find("unsupported filter 'wordwrap'") != std::string::npos);
  CHECK(error_of("\n\n\n{% if x is prime %}{% endif %}") == "[kylin.template] chat template line 4: unsupported test 'prime'");
  CHECK(error_of("{% extends 'base' %}").find("unsupported tag 'extends'") != std::string::npos);
  CHECK(error_of("{% import 'm' as m %}").find("unsupported tag 'import'") != std::string::npos);
  // transformers loads only the loopcontrols extension: no {% do %}
  CHECK(error_of("\n{% do x %}") == "[kylin.template] chat template line 2: unsupported tag 'do'");
  CHECK(error_of("{% autoescape true %}{{ '<' }}{% endautoescape %}").find("unsupported construct: autoescape true") !=
        std::string::npos);
  CHECK(error_of("{% call 5 %}{% endcall %}").find("expected a call after 'call'") != std::string::npos);
}

TEST_CASE("the sandbox's refusals are named: mutating methods and dunder attributes") {
  CHECK(error_of("{% set xs = [1] %}\n{{ xs.append(2) }}") ==
        "[kylin.template] chat template line 2: access to attribute 'append' of 'list' object is unsafe.");
  CHECK(error_of("{{ {'a': 1}.update({'b': 2}) }}").find("access to attribute 'update' of 'dict' object is unsafe.") !=
        std::string::npos);
  CHECK(error_of("{{ ''.__class__.__mro__ }}").find("access to attribute '__class__' of 'str' object is unsafe.") !=
        std::string::npos);
  // looking one up is not an error (it is an undefined value), as in Jinja
  CHECK(kylin::jinja::Template("{{ [1].append is defined }}|{{ [1].append }}|").render({}) == "False||");
}

TEST_CASE("recursive loops and caller() are bounded and refuse misuse") {
  CHECK(error_of("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}").find("recursive loop calls nested deeper than 64") !=
        std::string::npos);
  CHECK(error_of("{% for x in [1] %}{{ loop([2]) }}{% endfor %}")
            .find("The loop must have the 'recursive' marker to be called recursively.") != std::string::npos);
  CHECK(error_of("{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}")
            .find("macro 'm' takes no keyword argument 'caller'") != std::string::npos);
  CHECK(error_of("{% macro m() %}{{ caller(1) }}{% endmacro %}{% call m() %}y{% endcall %}")
            .find("macro 'caller' takes not more than 0 argument(s)") != std::string::npos);
  CHECK(error_of("{{ lipsum() }}").find("lipsum() (random lorem ipsum) is not supported") != std::string::npos);
}

TEST_CASE("syntax errors name the line where they are found") {
  CHECK(error_of("ok\n{% if x %}\nno end") == "[kylin.template] chat template line 3: missing '{% endif %}'");
  CHECK(error_of("{{ 'unterminated }}").find("line 1: unterminated string literal") != std::string::npos);
  CHECK(error_of("\n{{ (1 + }}").find("line 2:") != std::string::npos);
  CHECK(error_of("{% endfor %}").find("unsupported tag 'endfor'") != std::string::npos);
  CHECK(error_of("{{ x }").find("line 1: unexpected '}'") != std::string::npos);
  CHECK(error_of("{{ x ").find("unclosed '{{' tag") != std::string::npos);
}

TEST_CASE("out-of-range numeric literals are errors (ints) or inf (floats), never an uncaught exception") {
  CHECK(error_of("{{ x.99999999999999999999 }}").find("integer literal out of range") != std::string::npos);
  CHECK(error_of("{{ 99999999999999999999 }}").find("integer literal out of range") != std::string::npos);
  CHECK(kylin::jinja::Template("{{ 1e999 }} {{ -1e999 }}").render({}) == "inf -inf");
  // Python Jinja2 prints a list holding an Undefined as "[Undefined]".
  CHECK(kylin::jinja::Template("{{ [[1]]|map(attribute='99999999999999999999')|list }}").render({}) == "[Undefined]");
}

TEST_CASE("runtime errors name the line of the failing expression") {
  CHECK(error_of("line1\n{% set y = 1 %}\n{{ undefined_fn(1) }}") ==
        "[kylin.template] chat template line 3: 'undefined_fn' is undefined");
  CHECK(error_of("{% for m in [1] %}\n\n{{ m.content.strip() }}{% endfor %}") ==
        "[kylin.template] chat template line 3: 'int object' has no attribute 'content'");
  CHECK(error_of("{% set ns = 1 %}\n{% set ns.x = 2 %}").find("line 2: cannot assign attribute 'x'") != std::string::npos);
}

TEST_CASE("raise_exception(msg) becomes a kylin::Error whose message is msg") {
  try {
    kylin::jinja::Template("{% if true %}\n{{ raise_exception('System role not supported') }}{% endif %}").render({});
    FAIL("expected an error");
  } catch (const kylin::Error& e) {
    CHECK(std::string(e.what()) == "[kylin.template] chat template line 2: System role not supported");
    CHECK(e.context() == "chat template line 2");
  }
}

TEST_CASE("loop iterations are bounded: huge or nested loops fail instead of hanging") {
  CHECK(error_of("{% for i in range(10**9) %}{% endfor %}").find("loop iterations") != std::string::npos);
  CHECK(error_of("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x{% endfor %}"
                 "{% endfor %}{% endfor %}")
            .find("loop iterations") != std::string::npos);
  kylin::jinja::Limits small;
  small.max_iterations = 10;
  CHECK(error_of("{% for i in range(5) %}{% endfor %}", small).empty());
  CHECK(error_of("{% for i in range(5) %}{% endfor %}{% for i in range(6) %}{% endfor %}", small).find("10 loop") !=
        std::string::npos);
}

TEST_CASE("macro recursion depth is bounded") {
  CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nested deeper than 64") !=
        std::string::npos);
}

TEST_CASE("deeply nested source is rejected by the parser instead of overflowing the stack") {
  CHECK(error_of("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").find("nesting deeper") !=
        std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  CHECK(error_of(ifs).find("nesting deeper") != std::string::npos);
  CHECK(error_of("{{ " + std::string(100000, '-') + "1 }}").find("nesting deeper") != std::string::npos);
  CHECK(error_of("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}").find("nesting deeper") !=
        std::string::npos);
}

TEST_CASE("output and string sizes are bounded") {
  CHECK(error_of("{{ 'x' * 1000000000 }}").find("too large") != std::string::npos);
  CHECK(error_of("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}").find("output exceeds") !=
        std::string::npos);
  CHECK(error_of("{{ 2 ** 70 }}").find("integer overflow") != std::string::npos);
}
