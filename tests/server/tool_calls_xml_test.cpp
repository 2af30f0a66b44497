// Qwen3.5/Qwen3-Coder XML tool calls: the 12 reference cases of tests/data/reference/
// qwen35-tool-calls.jsonl parse to their expected content and calls (arguments compared as parsed
// JSON, types included); values are typed by the schema as TOOL_CALLS.md says; the format is
// read from the template text; and a streamed answer, fed in any pieces, sends each call's name
// when <function=NAME> is complete and each argument when its </parameter> is, joining into the
// whole answer's arguments without call text in the content.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kylin/server/tool_call_stream.hpp"

namespace tool_calls_xml_test {

using kylin::json::Value;
using namespace kylin::server;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The chat_template of a tokenizer_config.json (Qwen3's keep it there).
std::string config_template(const std::string& dir) {
  return kylin::json::parse(read(dir + "/tokenizer_config.json")).find("chat_template")->as_string();
}

std::vector<Value> reference_cases() {
  std::vector<Value> out;
  std::ifstream in(std::string(KYLIN_TEST_DATA) + "/reference/qwen35-tool-calls.jsonl");
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(kylin::json::parse(line));
  return out;
}

// Two JSON texts hold the same value, number types included (10 is not 10.0), keys in order.
std::string canonical(const std::string& json_text) { return kylin::json::dump(kylin::json::parse(json_text)); }

// What a chat answer shows: null content when there are calls and nothing else.
Value content_of(const ParsedToolCalls& p) {
  return !p.calls.empty() && p.content.empty() ? Value() : Value(p.content);
}

ToolCallDialect xml(const Value& tools) { return {ToolCallFormat::xml, tools}; }

TEST_CASE("the 12 reference cases parse to their expected content and calls") {
  const auto cases = reference_cases();
  CHECK(cases.size() == 12);
  for (const Value& c : cases) {
    CAPTURE(c.find("name")->as_string());
    const ParsedToolCalls p = parse_xml_tool_calls(c.find("model_output")->as_string(), *c.find("tools"));
    const Value& expected = *c.find("expected");
    CHECK(kylin::json::dump(content_of(p)) == kylin::json::dump(*expected.find("content")));
    const auto& calls = expected.find("tool_calls")->as_array();
    REQUIRE(p.calls.size() == calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Value& fn = *calls[i].find("function");
      CHECK(p.calls[i].name == fn.find("name")->as_string());
      CHECK(canonical(p.calls[i].arguments) == canonical(fn.find("arguments")->as_string()));
    }
  }
}

// A tool whose parameters have the given properties JSON.
Value tool(const std::string& name, const std::string& properties) {
  return kylin::json::parse(R"([{"type": "function", "function": {"name": ")" + name +
                            R"(", "parameters": {"type": "object", "properties": )" + properties + "}}}]");
}

std::string one_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) out += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return out + "</function>\n</tool_call>";
}

// The arguments of the one call `value` makes for parameter p under `schema`.
std::string typed(const std::string& schema, const std::string& value) {
  const ParsedToolCalls r = parse_xml_tool_calls(one_call("f", {{"p", value}}), tool("f", R"({"p": )" + schema + "}"));
  REQUIRE(r.calls.size() == 1);
  return kylin::json::dump(*kylin::json::parse(r.calls[0].arguments).find("p"));
}

TEST_CASE("values are typed by the schema: strings stay text, numbers, booleans, objects and arrays are read, else the text") {
  CHECK(typed(R"({"type": "string"})", "12345") == R"("12345")");
  CHECK(typed(R"({"type": "string"})", "null") == R"("null")");        // a string type keeps "null" (vLLM main)
  CHECK(typed(R"({"type": "integer"})", " 0_42 ") == "42");             // Python's int()
  CHECK(typed(R"({"type": "integer"})", "4.5") == R"("4.5")");          // not an integer: the text
  CHECK(typed(R"({"type": "integer"})", "None") == "null");             // the Qwen3.5 template writes None
  CHECK(typed(R"({"type": "number"})", "5.0") == "5");                  // integral floats become integers
  CHECK(typed(R"({"type": "number"})", "1e3") == "1000");
  CHECK(typed(R"({"type": "number"})", "-0.25") == "-0.25");
  CHECK(typed(R"({"type": "number"})", "inf") == R"("inf")");           // no JSON number
  CHECK(typed(R"({"type": "boolean"})", "True") == "true");
  CHECK(typed(R"({"type": "boolean"})", "yes") == "false");             // anything but true is false
  CHECK(typed(R"({"type": "object"})", R"({"a": [1, 2.5, "x"]})") == R"({"a":[1,2.5,"x"]})");
  CHECK(typed(R"({"type": "object"})", "{'a': True, 'b': None, 3: (1,)}") == R"({"a":true,"b":null,"3":[1]})");  // Python literals
  CHECK(typed(R"({"type": "object"})", R"("{'k': 'v'}")") == R"({"k":"v"})");   // a JSON-encoded Python repr, decoded twice
  CHECK(typed(R"({"type": "array"})", "[1, 2") == R"("[1, 2")");       // neither JSON nor Python: the text
  CHECK(typed(R"({"type": "dict"})", R"({"a": 1})") == R"({"a":1})");   // vLLM's type names: dict*, list*, int*, float*
  CHECK(typed(R"({"type": "int64"})", "7") == "7");
  CHECK(typed(R"({"anyOf": [{"type": "null"}, {"type": "integer"}]})", "null") == "null");
  CHECK(typed(R"({"anyOf": [{"type": "null"}, {"type": "integer"}]})", "8") == "8");
  CHECK(typed(R"({"anyOf": [{"type": "string"}, {"type": "null"}]})", "None") == "null");  // nullable: null even for text
  CHECK(typed(R"({"type": ["integer", "null"]})", "9") == "9");        // a type array reads as that anyOf
  CHECK(typed(R"({"type": "tuple"})", "(1, 'a')") == R"([1,"a"])");    // other types: ast.literal_eval
  CHECK(typed(R"({"type": "tuple"})", "true") == R"("true")");          // (JSON's true is no Python literal)
  CHECK(typed(R"({"description": "untyped"})", "5") == R"("5")");
}

TEST_CASE("Python's int, float and literal_eval subset") {
  using namespace kylin::server::detail;
  CHECK(python_int("-007") == "-7");
  CHECK(python_int("1__0") == std::nullopt);
  CHECK(python_int("12345678901234567890123") == "12345678901234567890123");  // any size, exactly
  CHECK(python_float(".5") == "0.5");
  CHECK(python_float("1_0.2_5e1_0") == "102500000000");
  CHECK(python_float("nan") == std::nullopt);
  CHECK(python_float("1e999") == std::nullopt);
  CHECK(python_float("1e300")->size() == 301);
  CHECK(kylin::json::dump(*python_literal("['a' 'b', \"c\\n\", u'\\u00e9', r'\\d', 0x1F, -3.5e1, ()]")) ==
        R"(["ab","c\n","é","\\d",31,-35.0,[]])");
  CHECK(kylin::json::dump(*python_literal("'''x\ny'''")) == R"("x\ny")");
  CHECK_FALSE(python_literal("{1, 2}"));  // a set
  CHECK_FALSE(python_literal("1j"));
  CHECK_FALSE(python_literal("007"));
  CHECK_FALSE(python_literal("[1, 2"));
  CHECK_FALSE(python_literal("x"));
  CHECK_FALSE(python_literal(std::string(200, '[') + std::string(200, ']')));  // nested past the depth bound
}

TEST_CASE("calls with text between them are all kept; a repeated parameter takes its last value in its first place") {
  const Value tools = tool("f", R"({"a": {"type": "integer"}, "b": {"type": "string"}})");
  const std::string text = "Two calls.\n\n" + one_call("f", {{"a", "1"}}) + "\nand some text\n" + one_call("f", {{"a", "2"}}) + "\n" +
                           one_call("f", {{"a", "3"}, {"b", "x"}, {"a", "4"}});
  const ParsedToolCalls p = parse_xml_tool_calls(text, tools);
  REQUIRE(p.calls.size() == 3);
  CHECK(p.content == "Two calls.");
  CHECK(p.calls[1].arguments == R"({"a": 2})");
  CHECK(p.calls[2].arguments == R"({"a": 4, "b": "x"})");
}

TEST_CASE("an object value may hold </parameter> inside its JSON strings; a text value ends at the first one") {
  const Value tools = tool("f", R"({"o": {"type": "object"}, "s": {"type": "string"}})");
  const ParsedToolCalls p = parse_xml_tool_calls(one_call("f", {{"o", R"({"html": "</parameter>\n</function>"})"}, {"s", "ok"}}), tools);
  REQUIRE(p.calls.size() == 1);
  CHECK(canonical(p.calls[0].arguments) == canonical(R"({"o": {"html": "</parameter>\n</function>"}, "s": "ok"})"));
  // an object value whose string never closes falls back to the plain rule
  const ParsedToolCalls open = parse_xml_tool_calls(one_call("f", {{"o", R"({"a": "x)"}, {"s", "ok"}}), tools);
  REQUIRE(open.calls.size() == 1);
  CHECK(canonical(open.calls[0].arguments) == canonical(R"({"o": "{\"a\": \"x", "s": "ok"})"));
}

TEST_CASE("malformed XML: bad names give no call, a block without a function is text, a cut call is never content") {
  const Value none = Value(kylin::json::Array{});
  CHECK(parse_xml_tool_calls("<tool_call>\n<function=bad name>\n</function>\n</tool_call>", none).calls.empty());
  const std::string hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const ParsedToolCalls h = parse_xml_tool_calls(hermes, none);
  CHECK(h.calls.empty());
  CHECK(h.content == hermes);
  const ParsedToolCalls cut = parse_xml_tool_calls("Checking.\n<tool_call>\n<function=get_wea", none);
  CHECK(cut.calls.empty());
  CHECK(cut.unfinished);
  CHECK(cut.content == "Checking.");
  const ParsedToolCalls bare = parse_xml_tool_calls("<function=f>\n<parameter=x>\n1\n</parameter>\n</function>", none);
  REQUIRE(bare.calls.size() == 1);  // no <tool_call> at all: the function is the block
  CHECK(bare.calls[0].arguments == R"({"x": "1"})");
  const ParsedToolCalls stray = parse_xml_tool_calls("<tool_call>\n<function=f>\nnoise <parameter=x>\n1\n</tool_call>", none);
  REQUIRE(stray.calls.size() == 1);  // stray text skipped, the value closed by </tool_call>
  CHECK(stray.calls[0].arguments == R"({"x": "1"})");
}

TEST_CASE("the format is the template's: <function= and <parameter= make it XML (Qwen3.5, 3.6, Qwen3-Coder), else Hermes JSON") {
  const std::string data = KYLIN_TEST_DATA;
  for (const char* f : {"chat_template.jinja", "chat_template_qwen36.jinja", "chat_template_qwen35_llamacpp_4b.jinja"})
    CHECK(tool_call_format(read(data + "/qwen35-tokenizer/" + f)) == ToolCallFormat::xml);
  CHECK(tool_call_format(config_template(data + "/qwen3-tokenizer")) == ToolCallFormat::json);
  CHECK(tool_call_format(config_template(data + "/models/e2e-qwen35-fullvocab")) == ToolCallFormat::xml);
  CHECK(tool_call_format(read(data + "/templates/qwen2.5.jinja")) == ToolCallFormat::json);
  // Qwen3-Coder's template renders calls with the same tags
  CHECK(tool_call_format("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}") ==
        ToolCallFormat::xml);
  CHECK(tool_call_format("") == ToolCallFormat::json);
}

// Everything a stream sends, with the byte count fed when each delta came.
struct Streamed {
  std::string content;
  std::vector<std::pair<std::size_t, ToolCallDelta>> deltas;
  std::vector<std::string> names, arguments;  // per call, joined
};

Streamed stream(const std::string& text, const ToolCallDialect& d, const std::vector<std::size_t>& cuts, std::size_t max_calls = any_number_of_calls) {
  ToolCallStream s(d, max_calls);
  Streamed out;
  auto add = [&](const ToolCallStep& step, std::size_t at) {
    out.content += step.content;
    for (const ToolCallDelta& delta : step.deltas) {
      out.deltas.push_back({at, delta});
      if (delta.start) out.names.push_back(delta.name), out.arguments.emplace_back();
      REQUIRE(delta.index < out.arguments.size());
      out.arguments[delta.index] += delta.arguments;
    }
  };
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    add(s.push(std::string_view(text).substr(at, cut - at)), cut);
    at = cut;
  }
  add(s.push(std::string_view(text).substr(at)), text.size());
  add(s.finish(), text.size() + 1);
  return out;
}

std::vector<std::size_t> every_byte(const std::string& text) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  return cuts;
}

TEST_CASE("streamed in any pieces, the reference cases send the whole answer's calls, and no call text as content") {
  std::mt19937 rng(35);
  for (const Value& c : reference_cases()) {
    const std::string text = c.find("model_output")->as_string();
    CAPTURE(c.find("name")->as_string());
    const ParsedToolCalls whole = parse_xml_tool_calls(text, *c.find("tools"));
    for (int round = 0; round < 4; ++round) {
      std::vector<std::size_t> cuts = round == 0 ? every_byte(text) : std::vector<std::size_t>{};
      for (std::size_t at = 0; round > 0 && (at += 1 + rng() % 9) < text.size();) cuts.push_back(at);
      const Streamed s = stream(text, xml(*c.find("tools")), cuts);
      REQUIRE(s.names.size() == whole.calls.size());
      for (std::size_t i = 0; i < s.names.size(); ++i) {
        CHECK(s.names[i] == whole.calls[i].name);
        CHECK(s.arguments[i] == whole.calls[i].arguments);  // the same bytes
      }
      if (whole.calls.empty()) CHECK(s.content == text);
      else CHECK(std::string(kylin::server::detail::trim_space(s.content)) == whole.content);
      for (const char* tag : {"<tool_call>", "<function=", "<parameter=", "</"}) CHECK(s.content.find(tag) == std::string::npos);
    }
  }
}

TEST_CASE("any text, however broken, streams into exactly the whole parse's calls and content") {
  std::mt19937 rng(36);
  const std::vector<std::string> bits = {"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
                                         "\n", ">", "<", "\"", "{", "}", "None", " "};
  for (const Value& c : reference_cases()) {
    const std::string original = c.find("model_output")->as_string();
    for (int round = 0; round < 40; ++round) {
      std::string text = original;
      auto boundary = [&](std::size_t i) {  // answers are whole UTF-8 characters: edit between them
        while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
        return i;
      };
      for (int edit = 1 + static_cast<int>(rng() % 4); edit > 0 && !text.empty(); --edit) {
        const std::size_t at = boundary(rng() % text.size());
        if (rng() % 2) text.erase(at, boundary(std::min(text.size(), at + 1 + rng() % 12)) - at);
        else text.insert(at, bits[rng() % bits.size()]);
      }
      CAPTURE(text);
      const ParsedToolCalls whole = parse_xml_tool_calls(text, *c.find("tools"));
      std::vector<std::size_t> cuts;
      for (std::size_t at = 0; (at += 1 + rng() % 5) < text.size();) cuts.push_back(at);
      const Streamed s = stream(text, xml(*c.find("tools")), cuts);
      REQUIRE(s.names.size() == whole.calls.size());
      for (std::size_t i = 0; i < s.names.size(); ++i) {
        CHECK(s.names[i] == whole.calls[i].name);
        CHECK(canonical(s.arguments[i]) == canonical(whole.calls[i].arguments));  // (a repeated parameter streams twice)
      }
      CHECK(std::string(kylin::server::detail::trim_space(s.content)) == std::string(kylin::server::detail::trim_space(whole.content)));
    }
  }
}

TEST_CASE("fed byte by byte, a call's name comes with the '>' of <function=NAME>, each argument with its </parameter>") {
  const Value tools = tool("get_weather", R"({"city": {"type": "string"}, "days": {"type": "integer"}})");
  const std::string text = "Let me look.\n\n" + one_call("get_weather", {{"city", "Paris"}, {"days", "3"}}) + "\n" + one_call("get_weather", {});
  const Streamed s = stream(text, xml(tools), every_byte(text));
  std::vector<std::pair<std::size_t, std::string>> got;  // (bytes fed, what came)
  for (const auto& [at, d] : s.deltas) got.push_back({at, d.start ? "name " + d.name : d.arguments});
  auto end_of = [&](const std::string& needle, std::size_t from = 0) { return text.find(needle, from) + needle.size(); };
  const std::size_t second = text.find("<tool_call>", 20);
  const std::vector<std::pair<std::size_t, std::string>> want = {
      {end_of("<function=get_weather>"), "name get_weather"},
      {end_of("Paris\n</parameter>"), R"({"city": "Paris")"},
      {end_of("3\n</parameter>"), R"(, "days": 3)"},
      {end_of("</function>"), "}"},
      {end_of("<function=get_weather>", second), "name get_weather"},
      {end_of("</function>", second), "{}"}};
  CHECK(got == want);
  CHECK(s.content == "Let me look.\n\n");
}

TEST_CASE("a stream keeps at most max_calls calls, passes a partial tag at the end as text, and keeps Hermes calls for the end") {
  const Value tools = tool("f", R"({"a": {"type": "integer"}})");
  const std::string two = one_call("f", {{"a", "1"}}) + "\n" + one_call("f", {{"a", "2"}});
  CHECK(stream(two, xml(tools), every_byte(two), 1).names.size() == 1);
  CHECK(stream("a <tool", xml(tools), {}).content == "a <tool");
  CHECK(stream("x <funct", xml(tools), {4}).content == "x <funct");
  // a Qwen3 (Hermes) template: calls whole, at the end
  const std::string hermes = "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const Streamed h = stream(hermes, {}, every_byte(hermes));
  REQUIRE(h.deltas.size() == 1);
  CHECK(h.deltas[0].first == hermes.size() + 1);  // from finish()
  CHECK(h.deltas[0].second.start);
  CHECK(h.deltas[0].second.end);
  CHECK(h.arguments[0] == R"({"a":1})");
  CHECK(h.content == "Hi ");
  // an XML answer cut inside its call's name: no call, and the cut text is not content
  const std::string cut = "Checking.\n<tool_call>\n<function=get_";
  const Streamed c = stream(cut, xml(tools), every_byte(cut));
  CHECK(c.names.empty());
  CHECK(c.content == "Checking.\n");
}

}  // namespace tool_calls_xml_test
