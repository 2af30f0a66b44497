// Hostile templates (model files are input too): doubling tricks fail on the render's memory
// budget with a named error while the process stays far below the gigabytes they would
// reach; long renders fail on the deadline; numeric extremes are errors, never UB.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <string>

#include "template_errors.hpp"
#include "kylin/chat/chat_template.hpp"

namespace {

using kylin::test::error_of;

using kylin::jinja::Limits;

std::string render(const std::string& source) { return kylin::jinja::Template(source).render({}); }

// Peak resident memory of this process so far, in MiB (monotonic).
long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

Limits small_budget() {
  Limits l;
  l.max_memory_bytes = std::size_t{16} << 20;
  l.max_time = std::chrono::minutes{10};  // so that the memory budget, not the clock, is what stops them
  return l;
}

bool names_memory_budget(const std::string& error) {
  return error.find("exceeded its memory budget of 16777216 bytes") != std::string::npos;
}

}  // namespace

TEST_CASE("doubling attacks fail on the memory budget, and the process stays far below their size") {
  const long before = peak_rss_mib();
  // Each would reach 2-4 GB (2^40 bytes for tojson) if nothing stopped it.
  const std::string shared_dict =
      "{% set ns = namespace(d={'k': 'vvvvvvvvvvvvvvvv'}) %}{% for i in range(40) %}"
      "{% set ns.d = {'a': ns.d, 'b': ns.d} %}{% endfor %}";
  CHECK(names_memory_budget(error_of(shared_dict + "{{ ns.d | tojson }}", small_budget())));
  CHECK(names_memory_budget(error_of(shared_dict + "{{ ns.d }}", small_budget())));          // repr
  CHECK(names_memory_budget(error_of(shared_dict + "{{ ns.d | string | length }}", small_budget())));
  CHECK(names_memory_budget(error_of(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
      "{% set ns.s = [ns.s, ns.s] | join('') %}{% endfor %}",
      small_budget())));
  CHECK(names_memory_budget(error_of(
      "{% set ns = namespace(l=['xxxxxxxxxxxxxxxx']) %}{% for i in range(40) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
      small_budget())));
  CHECK(names_memory_budget(error_of(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      small_budget())));
  CHECK(names_memory_budget(error_of(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
      "{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}",
      small_budget())));
  // Iterating a big string makes one Value per character: charged before it is built.
  CHECK(names_memory_budget(error_of("{% set s = 'x' * 8000000 %}{% for c in s %}{% endfor %}", small_budget())));
  const long grown = peak_rss_mib() - before;
  MESSAGE("peak RSS grew by " << grown << " MiB");
  CHECK(grown < 512);
}

TEST_CASE("the default limits stop a doubling attack too") {
  // The 256 MiB budget, or the 10 s CPU-time limit first on a slow (sanitizer) build.
  const std::string error = error_of(
      "{% set ns = namespace(d={'k': 'vvvvvvvvvvvvvvvv'}) %}{% for i in range(40) %}"
      "{% set ns.d = {'a': ns.d, 'b': ns.d} %}{% endfor %}{{ ns.d | tojson }}");
  CHECK((error.find("memory budget of 268435456 bytes") != std::string::npos ||
         error.find("time limit of 10000 ms") != std::string::npos));
}

TEST_CASE("a render past its CPU-time limit fails by name") {
  Limits l;
  l.max_time = std::chrono::milliseconds{0};  // the first clock reading is already late
  CHECK(error_of("{% for i in range(100000) %}{{ i }}{% endfor %}", l) ==
        "[kylin.template] chat template line 1: template rendering exceeded its time limit of 0 ms of CPU time");
  // Comparing a 40-level shared dict with a copy of itself visits 2^40 leaves, no allocation.
  l.max_time = std::chrono::milliseconds{200};
  CHECK(error_of("{% set ns = namespace(a=1, b=1) %}{% for i in range(40) %}"
                 "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
                 l)
            .find("exceeded its time limit of 200 ms") != std::string::npos);
  // A normal render is far inside the default limits.
  CHECK(render("{% for i in range(1000) %}{{ i % 10 }}{% endfor %}").size() == 1000);
}

TEST_CASE("the int filter, range() and slices handle 64-bit extremes: a value or a named error") {
  CHECK(error_of("{{ '99999999999999999999999' | int }}").find("int() of '99999999999999999999999' is out of the 64-bit range") !=
        std::string::npos);
  CHECK(error_of("{{ 1e300 | int }}").find("int() of 1e+300 is out of the 64-bit range") != std::string::npos);
  CHECK(error_of("{{ '1e19' | int }}").find("out of the 64-bit range") != std::string::npos);
  CHECK(render("{{ '9223372036854775807' | int }} {{ -9223372036854775808.0 | int }} {{ 'inf' | int }}") ==
        "9223372036854775807 -9223372036854775808 0");
  CHECK(render("{{ '12' | int(base=99) }} {{ 'ff' | int(base=16) }}") == "12 255");  // a bad base falls back, as Jinja
  CHECK(error_of("{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}").find("range() of more than 2^63 items") !=
        std::string::npos);
  CHECK(error_of("{{ range(9223372036854775807) | length }}").find("exceeded 1000000 loop iterations") != std::string::npos);
  CHECK(render("{{ range(9223372036854775800, 9223372036854775807, 5) | list }}") ==
        "[9223372036854775800, 9223372036854775805]");
  CHECK(render("{{ range(1, 9223372036854775807, 9223372036854775807) | list }}") == "[1]");
  CHECK(render("{{ range(-5, -9223372036854775807 - 1, -9223372036854775807) | list }}") == "[-5]");
  CHECK(render("{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][2::-9223372036854775807] }}") == "b [3]");
  CHECK(render("{{ 'abc'[-9223372036854775807 - 1:9223372036854775807] }} {{ 'abc'[-9223372036854775807 - 1] is defined }}") ==
        "abc False");
}

TEST_CASE("arithmetic siblings: abs, power, repetition and tojson widths stay bounded") {
  CHECK(error_of("{{ (-9223372036854775807 - 1) | abs }}").find("integer overflow") != std::string::npos);
  CHECK(error_of("{{ -(-9223372036854775807 - 1) }}").find("integer overflow") != std::string::npos);
  CHECK(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow") != std::string::npos);
  CHECK(error_of("{{ 3 ** 41 }}").find("integer overflow") != std::string::npos);
  CHECK(render("{{ 1 ** 1000000000000000000 }} {{ (-1) ** 1000000000000000001 }} {{ 0 ** 1000000000000000000 }}") ==
        "1 -1 0");  // by squaring, not 10^18 multiplications
  CHECK(render("{{ 2 ** 62 }}") == "4611686018427387904");
  CHECK(render("[{{ '' * 1000000000000000000 }}] {{ [] * 1000000000000000000 }}") == "[] []");
  CHECK(error_of("{{ 'a' * 1000000000000000000 }}").find("repetition result too large") != std::string::npos);
  CHECK(error_of("{{ ['a'] * 1000000000000000000 }}").find("repetition result too large") != std::string::npos);
  CHECK(error_of("{{ 'a' * 1e18 }}").find("unsupported operand type(s) for *: 'str' and 'float'") != std::string::npos);
  CHECK(error_of("{{ {'a': 1} | tojson(indent=1000000000000000000) }}").find("tojson() indent 1000000000000000000 is wider than 1024") !=
        std::string::npos);
  CHECK(render("{{ 'abc' | length }} {{ 'x' * 3 }}") == "3 xxx");
}

TEST_CASE("odd and even take any number as Jinja's value % 2 does: a float is a value, never an uncaught exception") {
  // Python Jinja2 3.1 renders these exactly so; a float once escaped as std::bad_variant_access.
  CHECK(render("{{ [1, 2, 3/4, 3.0, 4.0, -3, true] | select('odd') | list }} {{ [1, 2, 3/4, 3.0, 4.0, -3, true] | select('even') | list }}") ==
        "[1, 3.0, -3, True] [2, 4.0]");
  CHECK(render("{{ 2.5 is odd }} {{ 2.5 is even }} {{ -2.0 is even }}") == "False False True");
  CHECK(error_of("{{ none is odd }}").find("unsupported operand type(s) for %: 'NoneType' and 'int'") != std::string::npos);
}

TEST_CASE("values cannot nest deep enough to overflow the stack, nor form cycles") {
  CHECK(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}")
            .find("nested deeper than 2048 levels") != std::string::npos);
  CHECK(error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}")
            .find("cannot assign a namespace() object into namespace attribute 'self'") != std::string::npos);
  CHECK(error_of("{% set ns = namespace() %}{% set ns.l = [1, {'n': ns}] %}").find("cannot assign a namespace()") !=
        std::string::npos);
  CHECK(render("{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}"
               "{{ (ns.l | string | length) }}") == "202");
}

TEST_CASE("formatting, padding and batching builtins stay inside the limits") {
  CHECK(error_of("{{ '{:999999999999}'.format(1) }}").find("format width or precision too large") != std::string::npos);
  CHECK(error_of("{{ '%*d' % (999999999999, 1) }}").find("format width or precision too large") != std::string::npos);
  CHECK(error_of("{{ 'x'|indent(999999999999) }}").find("format width or precision too large") != std::string::npos);
  CHECK(error_of("{{ 'x'.center(999999999999) }}").find("format width or precision too large") != std::string::npos);
  CHECK(names_memory_budget(error_of("{{ [1]|batch(100000000, 0)|list }}", small_budget())));
  CHECK(names_memory_budget(error_of("{{ [1]|slice(200000)|list }}", small_budget())));
  CHECK(error_of("{{ [1]|slice(4000000000)|list }}").find("slice() count too large") != std::string::npos);
  CHECK(names_memory_budget(error_of("{{ ('\\t' * 100000)|string|attr('expandtabs')(1000) }}", small_budget())));
  CHECK(names_memory_budget(error_of("{{ '{:50000000}'.format('x') }}", small_budget())));
  // recursion through caller() and recursive loops is bounded like macro recursion
  CHECK(error_of("{% macro m() %}{% call m() %}{{ caller() }}{% endcall %}{% endmacro %}{{ m() }}")
            .find("macro calls nested deeper than 64") != std::string::npos);
}

TEST_CASE("no builtin can close a reference cycle through a namespace") {
  // a bound method keeps its object, which holds the namespace it would be stored into
  CHECK(error_of("{% set ns = namespace() %}{% set d = {'n': [ns]} %}{% set ns.m = d.get %}")
            .find("cannot assign a namespace() object into namespace attribute 'm'") != std::string::npos);
  CHECK(error_of("{% set ns = namespace() %}{% set c = cycler(ns) %}{% set ns.n = c.next %}")
            .find("cannot assign a namespace() object into namespace attribute 'n'") != std::string::npos);
  CHECK(error_of("{% for x in [1] %}{{ loop.changed(loop) }}{% endfor %}")
            .find("loop.changed() of a namespace or loop object is not supported") != std::string::npos);
  // what carries no namespace may be stored
  CHECK(render("{% set ns = namespace() %}{% set c = cycler(1, 2) %}{% set ns.n = c.next %}{{ ns.n() }}{{ ns.n() }}") == "12");
}
