// XML tool-call grammars on byte strings: exactly the blocks the Qwen3.5 chat template writes, for
// the offered tools only, the schema's parameters in its order (required ones always, unknown
// ones never), text values raw without what would end them early, other values compact JSON
// under their schema; what a schema asks that raw text cannot hold is an error naming it.
// (That every sentence parses back to a valid call is tests/server/tool_calls_xml_grammar_test.cpp.)
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kylin/constrain/parser.hpp"
#include "kylin/constrain/tool_call_xml_grammar.hpp"

namespace tool_call_xml_grammar_test {

namespace kc = kylin::constrain;
using kylin::json::Value;

bool complete(const kc::Grammar& g, std::string_view s) { return kc::match_bytes(g, s).complete; }
bool viable(const kc::Grammar& g, std::string_view s) { return kc::match_bytes(g, s).viable; }

kc::XmlToolGrammar compiled(const std::string& name, const std::string& schema) {
  const Value s = kylin::json::parse(schema);
  return kc::xml_tool_grammar(name, &s);
}

kc::Grammar grammar_of(std::vector<kc::XmlToolGrammar> tools, kc::ToolCallCount count = {}) { return kc::xml_tool_calls_grammar(tools, count); }

const char* weather = R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})";

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) out += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return out + "</function>\n</tool_call>";
}

TEST_CASE("an XML call grammar accepts the template's calls of offered tools, parameters in the schema's order, required ones present") {
  const auto g = grammar_of({compiled("get_weather", weather), compiled("now", R"({"type": "object", "properties": {}})")});
  CHECK(complete(g, call("get_weather", {{"city", "Paris"}})));
  CHECK(complete(g, call("get_weather", {{"city", "New York\nor Boston"}, {"days", "3"}, {"unit", "celsius"}})));
  CHECK(complete(g, call("get_weather", {{"city", "北京"}, {"unit", "fahrenheit"}})));
  CHECK(complete(g, call("get_weather", {{"city", ""}})));
  CHECK(complete(g, call("now", {})));
  CHECK(complete(g, call("now", {}) + "\n" + call("get_weather", {{"city", "x"}})));  // several, "\n" apart
  CHECK_FALSE(viable(g, call("get_weather", {{"days", "3"}})));                         // city is required
  CHECK_FALSE(viable(g, call("get_weather", {{"days", "3"}, {"city", "x"}})));          // schema order
  CHECK_FALSE(viable(g, call("get_weather", {{"city", "x"}, {"hourly", "1"}})));        // not a property
  CHECK_FALSE(viable(g, call("get_weather", {{"city", "x"}, {"city", "y"}})));          // once each
  CHECK_FALSE(viable(g, call("get_weather", {{"city", "x"}, {"days", "0"}})));          // minimum 1
  CHECK_FALSE(viable(g, call("get_weather", {{"city", "x"}, {"days", "three"}})));
  CHECK_FALSE(viable(g, call("get_weather", {{"city", "x"}, {"unit", "kelvin"}})));
  CHECK_FALSE(viable(g, call("now", {{"tz", "UTC"}})));
  CHECK_FALSE(viable(g, call("get_time", {})));                                        // not offered
  CHECK_FALSE(viable(g, "Sure. " + call("now", {})));                                  // calls only
  CHECK_FALSE(complete(g, ""));
  CHECK_FALSE(complete(g, "<tool_call>\n<function=now>\n</function>\n"));              // not closed
  CHECK(viable(g, "<tool_call>\n<function=get_"));
}

TEST_CASE("a text value is raw UTF-8 text with no line break controls but tab, LF, CR, and nothing that would end it early") {
  const auto g = grammar_of({compiled("w", R"({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]})")});
  for (const char* ok : {"a</param>b", "x <parameter=y> inline", "if a < b:\n\treturn '\"'\r\n", "a </function> not after a line break",
                         "\n\nblank lines\n\n", "é 🎉 \xe2\x80\x8b"})
    CHECK(complete(g, call("w", {{"s", ok}})));
  for (const char* bad : {"a</parameter>b", "a\n<parameter=x>", "<parameter=x>", "a\n</function>", "</function>", "a\n</tool_call>",
                          "\x01", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xb8"})
    CHECK_FALSE(complete(g, call("w", {{"s", bad}})));
}

TEST_CASE("non-text values are compact JSON under their schema; nullable ones may be null; anyOf writes its first typed member") {
  const auto g = grammar_of({compiled("f", R"({"type": "object", "properties": {
      "o": {"type": "object", "properties": {"k": {"type": "array", "items": {"type": "integer"}}}, "required": ["k"]},
      "n": {"anyOf": [{"type": "number", "maximum": 10}, {"type": "null"}]},
      "b": {"type": "boolean"},
      "t": {"type": ["string", "null"], "enum": ["a", "b"]}}})")});
  CHECK(complete(g, call("f", {{"o", R"({"k":[1,2]})"}, {"n", "2.5"}, {"b", "true"}, {"t", "a"}})));
  CHECK(complete(g, call("f", {{"o", R"({"k":[]})"}, {"n", "null"}, {"t", "null"}})));
  CHECK(complete(g, call("f", {{"b", "false"}})));
  CHECK_FALSE(viable(g, call("f", {{"o", R"({"k": [1]})"}})));  // compact
  CHECK_FALSE(viable(g, call("f", {{"o", R"({"k":["x"]})"}})));
  CHECK_FALSE(viable(g, call("f", {{"n", "11"}})));
  CHECK_FALSE(viable(g, call("f", {{"b", "True"}})));
  CHECK_FALSE(viable(g, call("f", {{"t", "c"}})));
}

TEST_CASE("a tool without properties takes any parameters with text values; additionalProperties false, none") {
  const auto any = grammar_of({compiled("f", R"({"type": "object"})")});
  CHECK(complete(any, call("f", {})));
  CHECK(complete(any, call("f", {{"x", "1"}, {"y z", "two\nlines"}, {"x", "again"}})));
  CHECK_FALSE(viable(any, call("f", {{"a>b", "1"}})));
  CHECK_FALSE(viable(any, call("f", {{"", "1"}})));
  kc::XmlToolGrammar null_schema = kc::xml_tool_grammar("g", nullptr);
  CHECK(null_schema.any_parameters);
  const auto closed = grammar_of({compiled("f", R"({"type": "object", "additionalProperties": false})")});
  CHECK(complete(closed, call("f", {})));
  CHECK_FALSE(viable(closed, call("f", {{"x", "1"}})));
}

TEST_CASE("the call count bounds the number of calls") {
  const auto one = grammar_of({compiled("now", "{}")}, {.min = 1, .max = 1});
  CHECK(complete(one, call("now", {})));
  CHECK_FALSE(viable(one, call("now", {}) + "\n"));
  const auto two = grammar_of({compiled("now", "{}")}, {.min = 2, .max = 2});
  CHECK_FALSE(complete(two, call("now", {})));
  CHECK(complete(two, call("now", {}) + "\n" + call("now", {})));
  CHECK_THROWS_AS(kc::xml_tool_calls_grammar({}), kylin::Error);
  CHECK_THROWS_AS(grammar_of({compiled("now", "{}")}, {.min = 0}), kylin::Error);
}

TEST_CASE("$defs of the parameters schema serve the JSON values of its properties") {
  const auto g = grammar_of({compiled("f", R"({"$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
      "type": "object", "properties": {"p": {"type": "object", "properties": {"q": {"$ref": "#/$defs/P"}}, "required": ["q"]}}, "required": ["p"]})")});
  CHECK(complete(g, call("f", {{"p", R"({"q":{"x":1}})"}})));
  CHECK_FALSE(viable(g, call("f", {{"p", R"({"q":{"x":"1"}})"}})));
}

TEST_CASE("a text value's minLength and maxLength count UTF-8 characters, with the markers still kept out") {
  const auto g = grammar_of({compiled("f", R"({"properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}}, "required": ["s"]})")});
  CHECK(complete(g, call("f", {{"s", "ab"}})));
  CHECK(complete(g, call("f", {{"s", "北京市区"}})));  // four characters, twelve bytes
  CHECK_FALSE(viable(g, call("f", {{"s", "a"}})));
  CHECK_FALSE(viable(g, call("f", {{"s", "abcde"}})));
  CHECK_FALSE(viable(g, call("f", {{"s", "北京市区县"}})));
  const auto at_least = grammar_of({compiled("f", R"({"properties": {"s": {"type": "string", "minLength": 3}}, "required": ["s"]})")});
  CHECK(complete(at_least, call("f", {{"s", std::string(300, 'x')}})));
  CHECK_FALSE(viable(at_least, call("f", {{"s", "xy"}})));
  const auto listed = grammar_of({compiled("f", R"({"properties": {"s": {"enum": ["a", "abc", "abcdef"], "maxLength": 3}}, "required": ["s"]})")});
  CHECK(complete(listed, call("f", {{"s", "abc"}})));
  CHECK_FALSE(viable(listed, call("f", {{"s", "abcdef"}})));
}

// The error text of compiling `schema` for a tool named `name`, or "" when it compiles.
std::string error_of(const std::string& schema, const std::string& name = "f") {
  try {
    compiled(name, schema);
  } catch (const kylin::Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("what raw text or the XML form cannot hold is an error naming the keyword or the name") {
  CHECK(error_of(R"({"properties": {"s": {"type": "string", "pattern": "^a$"}}})").find("#/properties/s/pattern") != std::string::npos);
  CHECK(error_of(R"({"properties": {"s": {"type": "string", "maxLength": 129}}})").find("#/properties/s/maxLength") != std::string::npos);
  CHECK(error_of(R"({"properties": {"s": {"type": "string", "minLength": 3, "maxLength": 2}}})").find("#/properties/s/minLength") != std::string::npos);
  CHECK(error_of(R"({"properties": {"s": {"$ref": "#/$defs/S"}}, "$defs": {"S": {"type": "object"}}})").find("$ref") != std::string::npos);
  CHECK(error_of(R"({"properties": {"s": {"enum": ["</parameter>"]}}})").find("enum") != std::string::npos);
  CHECK(error_of(R"({"properties": {"a>b": {"type": "string"}}})").find("a>b") != std::string::npos);
  CHECK(error_of(R"({"properties": {}, "minProperties": 1})").find("#/minProperties") != std::string::npos);
  CHECK(error_of(R"({"type": "array"})").find("#/type") != std::string::npos);
  CHECK(error_of(R"({"properties": {"n": {"type": "integer", "bogus": 1}}})").find("bogus") != std::string::npos);
  CHECK(error_of(R"({"properties": {"n": {"anyOf": [{"$ref": "#/$defs/N"}]}}})").find("anyOf") != std::string::npos);
  CHECK(error_of(R"({"properties": {}, "required": ["x"]})").find("#/required") != std::string::npos);
  CHECK(error_of("{}", "get weather").find("function name") != std::string::npos);
  CHECK(error_of("{}", "").find("function name") != std::string::npos);
  CHECK(error_of(weather).empty());
}

TEST_CASE("xml_value_type reads the schema as vLLM does") {
  auto type = [](const char* s) {
    const Value v = kylin::json::parse(s);
    return kc::xml_value_type(&v);
  };
  CHECK(type(R"({"type": " Integer "})").kind == kc::XmlValueKind::integer);
  CHECK(type(R"({"type": "varchar"})").kind == kc::XmlValueKind::text);
  CHECK(type(R"({"type": "float64"})").kind == kc::XmlValueKind::number);
  CHECK(type(R"({"type": "list[str]"})").kind == kc::XmlValueKind::json);
  CHECK(type(R"({"type": "null"})").nullable);
  CHECK(type(R"({"anyOf": [{"type": "null"}, {"type": "boolean"}]})").kind == kc::XmlValueKind::boolean);
  CHECK(type(R"({"anyOf": [{"type": "null"}, {"type": "boolean"}]})").nullable);
  CHECK(type(R"({"anyOf": [{"$ref": "#/x"}]})").kind == kc::XmlValueKind::text);  // no typed member: text
  CHECK(type(R"({"type": ["null", "array"]})").kind == kc::XmlValueKind::json);
  CHECK(type(R"({"type": "tuple"})").kind == kc::XmlValueKind::literal);
  CHECK(type(R"({"enum": [1, 2]})").kind == kc::XmlValueKind::text);
  CHECK(kc::xml_value_type(nullptr).kind == kc::XmlValueKind::text);
}

}  // namespace tool_call_xml_grammar_test
