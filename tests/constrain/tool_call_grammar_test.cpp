// Tool-call grammars on byte strings: exactly the blocks Qwen3's chat template writes, for the
// offered tools only, arguments valid under each tool's own schema, within the call count; the
// union of two grammars accepts a sentence of either; an included grammar keeps its meaning.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/parser.hpp"
#include "kylin/constrain/tool_call_grammar.hpp"

namespace tool_call_grammar_test {

namespace kc = kylin::constrain;

bool complete(const kc::Grammar& g, std::string_view s) { return kc::match_bytes(g, s).complete; }
bool viable(const kc::Grammar& g, std::string_view s) { return kc::match_bytes(g, s).viable; }

std::vector<kc::ToolGrammar> weather_and_time() {
  std::vector<kc::ToolGrammar> tools;
  tools.push_back({"get_weather", kc::json_schema_grammar(kylin::json::parse(
                                      R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},
                                          "required":["city"],"additionalProperties":false})"))});
  tools.push_back({"now", kc::json_object_grammar()});
  return tools;
}

std::string call(const std::string& name, const std::string& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

TEST_CASE("a tool-call grammar accepts the template's blocks for offered tools with valid arguments only") {
  const auto g = kc::tool_calls_grammar(weather_and_time());
  CHECK(complete(g, call("get_weather", R"({"city":"Paris"})")));
  CHECK(complete(g, call("get_weather", R"({"city":"Oslo","unit":"c"})")));
  CHECK(complete(g, call("now", "{}")));
  CHECK(complete(g, call("now", R"({"tz":[1,{"a":null}]})")));
  CHECK(complete(g, call("now", "{}") + "\n" + call("get_weather", R"({"city":"x"})")));  // several, "\n" apart
  CHECK_FALSE(viable(g, call("get_time", "{}")));                                         // not offered
  CHECK_FALSE(viable(g, call("get_weather", R"({"unit":"c"})")));                         // city is required
  CHECK_FALSE(viable(g, call("get_weather", R"({"city":"x","unit":"k"})")));              // not in the enum
  CHECK_FALSE(viable(g, call("now", "[]")));
  CHECK_FALSE(viable(g, "Sure! " + call("now", "{}")));                                  // calls only
  CHECK_FALSE(complete(g, ""));                                                           // at least one
  CHECK(viable(g, "<tool_call>\n{\"name\": \"get_"));
  CHECK_FALSE(complete(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}"));        // not closed
}

TEST_CASE("the call count bounds the number of blocks; bad counts and no tools are errors") {
  const auto one = kc::tool_calls_grammar(weather_and_time(), {.min = 1, .max = 1});
  CHECK(complete(one, call("now", "{}")));
  CHECK_FALSE(viable(one, call("now", "{}") + "\n"));
  const auto two = kc::tool_calls_grammar(weather_and_time(), {.min = 2, .max = 3});
  CHECK_FALSE(complete(two, call("now", "{}")));
  CHECK(complete(two, call("now", "{}") + "\n" + call("now", "{}")));
  CHECK(complete(two, call("now", "{}") + "\n" + call("now", "{}") + "\n" + call("now", "{}")));
  CHECK_FALSE(viable(two, call("now", "{}") + "\n" + call("now", "{}") + "\n" + call("now", "{}") + "\n"));
  CHECK_THROWS_AS(kc::tool_calls_grammar({}), kylin::Error);
  CHECK_THROWS_AS(kc::tool_calls_grammar(weather_and_time(), {.min = 0}), kylin::Error);
  CHECK_THROWS_AS(kc::tool_calls_grammar(weather_and_time(), {.min = 3, .max = 2}), kylin::Error);
}

TEST_CASE("a tool name is written as a JSON string: quotes and backslashes are escaped") {
  std::vector<kc::ToolGrammar> odd;
  odd.push_back({"say \"hi\"", kc::json_object_grammar()});
  const auto g = kc::tool_calls_grammar(odd);
  CHECK(complete(g, "<tool_call>\n{\"name\": \"say \\\"hi\\\"\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(viable(g, "<tool_call>\n{\"name\": \"say \"hi"));
}

TEST_CASE("either(a, b) accepts a sentence of a or of b and nothing else; recursive grammars keep their meaning") {
  const auto calls = kc::tool_calls_grammar(weather_and_time());
  const auto answer = kc::json_schema_grammar(kylin::json::parse(
      R"({"$defs":{"t":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["k"]}},
          "$ref":"#/$defs/t"})"));
  const auto g = kc::either(calls, answer);
  CHECK(complete(g, call("now", "{}")));
  CHECK(complete(g, R"({"k":[{"k":[]},{"k":[{"k":[]}]}]})"));
  CHECK_FALSE(viable(g, R"({"k":[{"j":1}]})"));
  CHECK_FALSE(viable(g, R"({"k":[]})" + call("now", "{}")));
  CHECK_FALSE(viable(g, "hello"));
}

}  // namespace tool_call_grammar_test
