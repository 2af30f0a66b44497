// Grammars on byte strings: JSON-schema and GBNF compilation accept exactly the texts they
// should (prefixes viable, sentences complete), handle UTF-8 byte by byte, and refuse
// unsupported or hostile input with a kylin::Error naming the keyword or rule.
#include <doctest/doctest.h>

#include <cctype>
#include <string>

#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/parser.hpp"

namespace grammar_test {

using kylin::constrain::match_bytes;

kylin::constrain::Grammar schema(const char* text) { return kylin::constrain::json_schema_grammar(kylin::json::parse(text)); }

bool complete(const kylin::constrain::Grammar& g, std::string_view s) { return match_bytes(g, s).complete; }
bool viable(const kylin::constrain::Grammar& g, std::string_view s) { return match_bytes(g, s).viable; }

// The error message of compiling `text`, or "" when it compiles.
std::string schema_error(const std::string& text, kylin::constrain::GrammarLimits limits = {}) {
  try {
    kylin::constrain::json_schema_grammar(kylin::json::parse(text), limits);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::request);
    return e.what();
  }
  return "";
}

TEST_CASE("an object schema accepts its compact objects, required properties present, in schema order") {
  const auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
                          "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  CHECK(complete(g, R"({"b":"x"})"));
  CHECK(complete(g, R"({"a":-12,"b":"","c":true})"));
  CHECK(complete(g, R"({"b":"q\"\\\u00e9","c":false})"));
  CHECK(complete(g, R"({"a":0,"b":"x"})"));
  CHECK_FALSE(viable(g, R"({"a":01)"));
  CHECK_FALSE(viable(g, R"({"a":1})"));          // b is required
  CHECK_FALSE(viable(g, R"({})"));
  CHECK_FALSE(viable(g, R"({"b":"x","d")"));     // no other properties
  CHECK_FALSE(viable(g, R"({ "b":"x"})"));       // no free whitespace
  CHECK_FALSE(viable(g, R"({"b":"x",})"));
  CHECK_FALSE(viable(g, "{\"b\":\"\n"));         // raw control characters are not JSON
  CHECK_FALSE(viable(g, R"({"b":"\ud800)"));     // lone surrogate escapes are refused
  CHECK(viable(g, R"({"a":12)"));
  CHECK_FALSE(complete(g, R"({"a":12)"));
}

TEST_CASE("numbers, arrays with item counts, enums, const, anyOf and nullable types") {
  const auto num = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "12e3", "1.25E-7", "3", "123456789012345", "1.5e+99"}) CHECK(complete(num, ok));
  for (const char* big : {"1234567890123456", "1e100", "1.1234567890123456"}) CHECK_FALSE(complete(num, big));  // beyond double/int64 parsers
  for (const char* bad : {"01", "1.", ".5", "+1", "1e", "--1"}) CHECK_FALSE(complete(num, bad));
  const auto arr = schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  CHECK(complete(arr, "[1]"));
  CHECK(complete(arr, "[1,2,3]"));
  CHECK_FALSE(complete(arr, "[]"));
  CHECK_FALSE(viable(arr, "[1,2,3,"));
  const auto any_len = schema(R"({"type":"array","items":{"type":"null"}})");
  CHECK(complete(any_len, "[]"));
  CHECK(complete(any_len, "[null,null,null,null,null]"));
  const auto e = schema(R"({"enum":["red","green","greenish",1,null,{"k":[true]}]})");
  for (const char* ok : {R"("red")", R"("green")", R"("greenish")", "1", "null", R"({"k":[true]})"}) CHECK(complete(e, ok));
  CHECK_FALSE(viable(e, R"("blue")"));
  CHECK(viable(e, R"("green)"));
  const auto c = schema(R"({"const":"yes"})");
  CHECK(complete(c, R"("yes")"));
  CHECK_FALSE(viable(c, R"("no)"));
  const auto any = schema(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"array","items":{"type":"boolean"}}]})");
  CHECK(complete(any, R"("ab")"));
  CHECK_FALSE(viable(any, R"("abc)"));
  CHECK(complete(any, "[true,false]"));
  const auto nullable = schema(R"({"type":["string","null"],"minLength":1})");
  CHECK(complete(nullable, "null"));
  CHECK(complete(nullable, R"("x")"));
  CHECK_FALSE(complete(nullable, R"("")"));
}

TEST_CASE("string lengths count characters, and a character's UTF-8 bytes may arrive one at a time") {
  const auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK(complete(g, "\"\xc3\xa9\xe2\x82\xac\""));           // é€: 2 characters, 5 bytes
  CHECK(complete(g, "\"ab\xf0\x9f\x98\x80\""));              // ab😀: 3 characters
  CHECK_FALSE(viable(g, "\"abc\xc3\xa9"));                    // a 4th character
  CHECK_FALSE(complete(g, "\"\xc3\xa9\""));                   // 1 character
  CHECK(viable(g, "\"a\xe2\x82"));                            // inside a character: a prefix
  CHECK_FALSE(viable(g, "\"a\xe2\x41"));                      // broken continuation
  CHECK_FALSE(viable(g, "\"a\xc0\xaf"));                      // overlong encoding
  CHECK_FALSE(viable(g, "\"a\xed\xa0\x80"));                  // UTF-8 surrogate
  CHECK_FALSE(viable(g, "\"a\xf4\x90"));                      // above U+10FFFF
}

TEST_CASE("$ref and $defs, recursive ones included, resolve within the schema") {
  const auto g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/node"})");
  CHECK(complete(g, R"({"v":1})"));
  CHECK(complete(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  CHECK_FALSE(viable(g, R"({"v":1,"kids":[{"v":2},{"v":3},)"));
  const auto root_ref = schema(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]},"maxItems":2})");
  CHECK(complete(root_ref, "[1,[2,[[]]]]"));
}

TEST_CASE("unsupported keywords, bad values and hostile schemas are errors naming what is wrong") {
  CHECK(schema_error(R"x({"type":"string","pattern":"a(?=b)"})x").find("#/pattern") != std::string::npos);
  CHECK(schema_error(R"({"type":"string","format":"hostname"})").find("#/format") != std::string::npos);
  CHECK(schema_error(R"({"type":"object","patternProperties":{}})").find("\"patternProperties\"") != std::string::npos);
  CHECK(schema_error(R"({"oneOf":[{"type":"null"}]})").find("\"oneOf\"") != std::string::npos);
  CHECK(schema_error(R"({"properties":{"a":{"allOf":[]}}})").find("#/properties/a/allOf") != std::string::npos);
  CHECK(schema_error(R"({"type":"object","additionalProperties":{"type":"string"}})").find("additionalProperties") != std::string::npos);
  CHECK(schema_error(R"({"type":"object","minLength":1})").find("does not apply") != std::string::npos);
  CHECK(schema_error(R"({"type":"object","properties":{},"required":["x"]})").find("required") != std::string::npos);
  CHECK(schema_error(R"({"$ref":"http://example.com/s.json"})").find("within the schema") != std::string::npos);
  CHECK(schema_error(R"({"$ref":"#/$defs/missing"})").find("resolves to nothing") != std::string::npos);
  CHECK(schema_error(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("left-recursive") != std::string::npos);
  CHECK(schema_error(R"({"type":"string","maxLength":100000})").find("limit") != std::string::npos);
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  CHECK(schema_error(deep).find("nested deeper") != std::string::npos);
  std::string huge = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) {
    if (i) huge += ',';
    huge += std::to_string(i);
  }
  CHECK(schema_error(huge + "]}").find("more than") != std::string::npos);
  CHECK(schema_error(R"({"type":"array","items":{"type":"integer"},"maxItems":3000,"minItems":2000})",
                     {.max_elements = 5000}).find("elements") != std::string::npos);
  CHECK(schema_error(R"({"type":"string","minLength":1})").empty());
}

// Whether a strict JSON parser (simdjson, behind kylin::json::parse) takes the text.
bool parses(const std::string& text) {
  try {
    kylin::json::parse(text);
    return true;
  } catch (const kylin::Error&) {
    return false;
  }
}

TEST_CASE("every byte 0x00-0xFF: inside a string exactly what RFC 8259 leaves unescaped, after a backslash exactly the escapes, elsewhere only what parses") {
  // The oracle is twofold: RFC 8259 section 7 (unescaped = %x20-21 / %x23-5B / %x5D-10FFFF, here
  // as one byte: ASCII only, since a lone byte >= 0x80 is not UTF-8) and the strict parser.
  const auto any = kylin::constrain::json_value_grammar();
  const auto string_schema = schema(R"({"type":"string"})");
  for (int b = 0; b < 256; ++b) {
    CAPTURE(b);
    const std::string byte(1, static_cast<char>(b));
    const bool unescaped = b >= 0x20 && b < 0x80 && b != '"' && b != '\\';
    for (const std::string& text : {"\"a" + byte + "z\"", "[\"" + byte + "\"]", "{\"k" + byte + "\":1}"}) {
      CAPTURE(text);
      const bool accepted = complete(text[0] == '"' ? string_schema : any, text);
      CHECK(accepted == unescaped);
      CHECK(parses(text) == unescaped);
    }
    // after a backslash: the two-character escapes, and \u with four hex digits
    const bool escape = std::string_view("\"\\/bfnrt").find(static_cast<char>(b)) != std::string_view::npos;
    const std::string escaped = "\"\\" + byte + "\"";
    CHECK(complete(string_schema, escaped) == escape);
    CHECK(parses(escaped) == escape);
    const std::string hex = "\"\\u00" + byte + "A\"";
    CHECK(complete(string_schema, hex) == (std::isxdigit(b) != 0));
    CHECK(parses(hex) == (std::isxdigit(b) != 0));
    // between values the compact grammar takes no byte a strict parser refuses (and no whitespace)
    for (const std::string& text : {"[1" + byte + "]", "[1," + byte + "2]", "{\"k\":" + byte + "1}", "[true" + byte + "]"}) {
      CAPTURE(text);
      if (complete(any, text)) CHECK(parses(text));
      if (b <= 0x20) CHECK_FALSE(viable(any, text.substr(0, text.find(byte) + 1)));
    }
  }
}

TEST_CASE("free-form JSON: any object (response_format json_object) and any value, nested") {
  const auto object = kylin::constrain::json_object_grammar();
  CHECK(complete(object, R"({"a":[1,{"b":null}],"c":"x","d":{"e":[[],{}]}})"));
  CHECK(complete(object, "{}"));
  CHECK_FALSE(viable(object, "[1]"));
  CHECK_FALSE(viable(object, R"({"a"})"));
  CHECK_FALSE(viable(object, R"({"a":1,})"));
  const auto value = kylin::constrain::json_value_grammar();
  for (const char* ok : {"1", "-2.5e3", "\"s\"", "true", "null", "[1,[2,[3]]]", R"({"k":false})"}) CHECK(complete(value, ok));
  CHECK_FALSE(viable(value, "nul1"));
  // Schemas without constraints on a level are free-form there too.
  CHECK(complete(schema(R"({"type":"array","items":{}})"), R"([1,"a",{"x":[null]}])"));
  CHECK(complete(schema("true"), R"({"x":1})"));
}

TEST_CASE("an ambiguous grammar keeps a bounded number of parses: long inputs cost linear time") {
  const auto g = kylin::constrain::parse_gbnf(R"(root ::= ("a" | "a" | "aa" | x)* "b"
    x ::= "a" x | "a")");
  CHECK(complete(g, std::string(20000, 'a') + "b"));
  CHECK_FALSE(viable(g, std::string(100, 'a') + "c"));
  // 2^60 ways to derive nothing before "a" (found by fuzz_constrain): each node expands once per byte.
  const auto nullable = kylin::constrain::parse_gbnf(R"(root ::= ( | ){60} "a" ( | ){0,60})");
  CHECK(complete(nullable, "a"));
  CHECK_FALSE(viable(nullable, "b"));
}

TEST_CASE("GBNF: literals, classes, groups, repetition and UTF-8 classes") {
  const auto g = kylin::constrain::parse_gbnf(R"(
    # a tiny language
    root ::= greeting ("," ws name){1,2} "!"?
    greeting ::= "hi" | "hello"
    ws ::= [ \t]*
    name ::= [A-Z] [a-z]+ | "\u00e9mile"
  )");
  CHECK(complete(g, "hi,Bob"));
  CHECK(complete(g, "hello, Ann,\t\u00e9mile!"));
  CHECK_FALSE(viable(g, "hey"));
  CHECK_FALSE(viable(g, "hi,bob"));
  CHECK_FALSE(viable(g, "hi,A,B,C"));
  const auto greek = kylin::constrain::parse_gbnf("root ::= [\xce\xb1-\xcf\x89]+ [^a-z\\n]");
  CHECK(complete(greek, "\xce\xb2\xce\xb3Z"));
  CHECK(complete(greek, "\xce\xb2\xe2\x82\xac"));  // β€: the negated class takes non-ASCII
  CHECK(viable(greek, "\xce"));
  CHECK_FALSE(viable(greek, "a"));
  CHECK_FALSE(complete(greek, "\xce\xb2z"));
  const auto dot = kylin::constrain::parse_gbnf("root ::= \"<\" . \">\"");
  CHECK(complete(dot, "<\xf0\x9f\x98\x80>"));
  CHECK_FALSE(viable(dot, "<ab"));
}

TEST_CASE("GBNF errors name the line or the rule") {
  auto error_of = [](const char* text) -> std::string {
    try {
      kylin::constrain::parse_gbnf(text);
    } catch (const kylin::Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of("root ::= item\n").find("item") != std::string::npos);
  CHECK(error_of("start ::= \"a\"").find("root") != std::string::npos);
  CHECK(error_of("root ::= \"a\"\n\nroot ::= [b").find("line 3") != std::string::npos);
  CHECK(error_of("root ::= root \"a\" | \"b\"").find("left-recursive") != std::string::npos);
  CHECK(error_of("root ::= \"a\"{5000}").find("limit") != std::string::npos);
  CHECK(error_of("root ::= \"\\q\"").find("unknown escape") != std::string::npos);
  CHECK(error_of((std::string("root ::= ") + std::string(100, '(') + "\"a\"" + std::string(100, ')')).c_str()).find("nested deeper") != std::string::npos);
  CHECK(error_of("root ::= \"a\" | \"b\"").empty());
}

TEST_CASE("GBNF: a repetition count above the limit names the limit; a repeated item that can be empty is named as such (issue 39)") {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      kylin::constrain::parse_gbnf(text);
    } catch (const kylin::Error& e) {
      return e.what();
    }
    return "";
  };
  for (const char* count : {"{1000000000}", "{99999999999999999999999}", "{2,1000000000}", "{1000000000,}"}) {
    CAPTURE(count);
    const std::string e = error_of(std::string("root ::= \"a\"") + count);
    CHECK(e.find("limit of 4096") != std::string::npos);
    CHECK(e.find("line 1") != std::string::npos);
  }
  for (const char* text : {"root ::= (\"a\"*)*", "root ::= (\"a\"?)+", "root ::= (\"a\" | \"\")*", "root ::= x*\nx ::= \"b\"*"}) {
    CAPTURE(text);
    const std::string e = error_of(text);
    CHECK(e.find("can match the empty string") != std::string::npos);
    CHECK(e.find("left-recursive") == std::string::npos);
  }
  CHECK(error_of("root ::= (\"a\"+)*").empty());
  CHECK(error_of("root ::= root \"a\" | \"b\"").find("left-recursive") != std::string::npos);  // real left recursion
}

// `root ::= ` and `depth` groups of `item` repeated {0,count} inside each other.
std::string nested(int depth, int count, const std::string& item = "\"a\"") {
  std::string g = item;
  for (int k = 0; k < depth; ++k) g = "(" + g + "){0," + std::to_string(count) + "}";
  return "root ::= " + g;
}

std::string gbnf_error(const std::string& text) {
  try {
    kylin::constrain::parse_gbnf(text);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::request);
    return e.what();
  }
  return "";
}

TEST_CASE("GBNF: nested repetitions of items that can match nothing multiply; past max_expansion they are refused when compiled (issue 75)") {
  using kylin::constrain::detail::expansion_size;
  using kylin::constrain::detail::nullable_rules;
  kylin::constrain::GrammarLimits unlimited;
  unlimited.max_expansion = std::size_t{1} << 40;
  // The bound is what the parser pushes expanding the start (here exactly), whatever the shape.
  kylin::constrain::ParserLimits no_budget;
  no_budget.max_step_nodes = std::size_t{1} << 40;
  for (const std::string& text : {nested(2, 1000), nested(3, 100), nested(14, 2), nested(4, 15, "[^x]"),
                                  std::string("root ::= (\"a\"{1,1000}){1,1000}"), std::string("root ::= (line \"\\n\"){0,1000}\nline ::= [^\\n]{0,200}"),
                                  std::string("root ::= x{0,50}\nx ::= y{0,50} \"b\"?\ny ::= z{0,50}\nz ::= \"a\"?")}) {
    CAPTURE(text);
    const auto g = kylin::constrain::parse_gbnf(text, unlimited);
    kylin::constrain::StackArena arena(g, no_budget);
    std::vector<int> start;  // [<= max_stacks]
    arena.start(start);
    CHECK(expansion_size(g, nullable_rules(g), std::size_t{1} << 40) == arena.size());
  }
  // The issue's grammar (2.3 s to construct its Constraint) and the same class spelled otherwise:
  // named rules, optional items, many shallow levels. Refused by the compile, naming the limit.
  for (const std::string& text : {nested(3, 1000), nested(3, 1000, "\"a\"?"), nested(20, 2), nested(5, 16),
                                  std::string("root ::= x{0,100}\nx ::= y{0,100}\ny ::= z{0,100}\nz ::= \"a\"?"),
                                  std::string("root ::= (\"a\"* \"b\"?){0,300} (\"c\"? (\"d\"?){0,300}){0,300}")}) {
    CAPTURE(text);
    const std::string e = gbnf_error(text);
    CHECK(e.find("nested repetitions multiply") != std::string::npos);
    CHECK(e.find("65536") != std::string::npos);
  }
  // Within it: nested counts whose items read a byte first cost a handful of nodes, and the
  // shallow nests of real grammars stay far below.
  for (const std::string& text : {std::string("root ::= (\"a\"{1,1000}){1,1000}"), nested(2, 1000), nested(3, 40),
                                  std::string("root ::= (line \"\\n\"){0,1000}\nline ::= [^\\n]{0,200}")}) {
    CAPTURE(text);
    CHECK(gbnf_error(text).empty());
  }
}

TEST_CASE("a step expands at most max_step_nodes nodes: 256 ambiguous parses each entering a large nest keep the first ones (issue 75)") {
  // Within max_expansion one parse at a time, but all 256 alternatives enter the nest after "a"
  // (5.8 s for the step without the budget).
  std::string text = "root ::= ";
  for (int i = 0; i < 256; ++i) text += std::string(i ? " | " : "") + "\"a\" n \"z\"";
  text += "\n" + nested(3, 100, "\"b\"").replace(0, 4, "n");
  const auto g = kylin::constrain::parse_gbnf(text);
  const kylin::constrain::ParserLimits limits;
  kylin::constrain::StackArena arena(g, limits);
  std::vector<int> start, after;  // [<= max_stacks]
  arena.start(start);
  const std::size_t before = arena.size();
  arena.step(start, 'a', after);
  CHECK(arena.size() - before <= 2 * limits.max_step_nodes);  // an expanded reference also pushes its continuation
  CHECK_FALSE(after.empty());
  CHECK(complete(g, "az"));
  CHECK(complete(g, "abbbz"));
  CHECK_FALSE(viable(g, "ac"));
}

TEST_CASE("a schema's size is checked before compiling: too many values, or paths too long, are refused naming the limit (issue 39)") {
  const kylin::constrain::GrammarLimits limits{.max_schema_nodes = 1000};
  std::string wide = R"({"anyOf":[)";
  for (int i = 0; i < 600; ++i) wide += std::string(i ? "," : "") + R"({"type":"integer"})";
  const std::string e = schema_error(wide + "]}", limits);  // 1 + 1 + 600 * 2 values
  CHECK(e.find("1202 JSON values") != std::string::npos);
  CHECK(e.find("at most 1000") != std::string::npos);
  // the check happens on the JSON: a schema that would fail to compile is refused for its size first
  const kylin::json::Value parsed = kylin::json::parse(wide + "]}");
  kylin::constrain::SchemaCost cost;
  kylin::constrain::add_schema_cost(parsed, cost);
  CHECK(cost.nodes == 1202);
  CHECK_THROWS_WITH_AS(kylin::constrain::check_schema_cost(cost, limits), doctest::Contains("at most 1000"), kylin::Error);
  // a long property name under many nested values: the paths (rule names) would hold it once per value
  std::string nested = R"({"type":"object","properties":{")" + std::string(100000, 'k') + R"(":{"type":"object","properties":{)";
  for (int i = 0; i < 200; ++i) nested += std::string(i ? "," : "") + "\"p" + std::to_string(i) + R"(":{"type":"integer"})";
  nested += "}}}}";
  CHECK(schema_error(nested, {.max_schema_path_bytes = 1 << 20}).find("bytes of paths") != std::string::npos);
  // the counted repetitions a schema asks for are summed before compiling
  std::string counts = R"({"anyOf":[)";
  for (int i = 0; i < 40; ++i) counts += std::string(i ? "," : "") + R"({"type":"string","maxLength":4000})";
  CHECK(schema_error(counts + "]}", {.max_elements = 100000}).find("repetitions") != std::string::npos);
}

TEST_CASE("rule names stay short however long the schema's property names are") {
  const std::string key(50000, 'k');
  const auto g = schema((R"({"type":"object","properties":{")" + key + R"(":{"type":"string","maxLength":50}},"required":[")" + key + "\"]}").c_str());
  std::size_t longest = 0;
  for (const auto& n : g.names) longest = std::max(longest, n.size());
  CHECK(longest <= 256);
  CHECK(complete(g, "{\"" + key + "\":\"v\"}"));
}

}  // namespace grammar_test
