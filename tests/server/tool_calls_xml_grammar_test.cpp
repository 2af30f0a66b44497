// Every sentence an XML tool-call grammar accepts parses back to calls valid under their tools'
// schemas: random sentences drawn from grammars over text, numeric, boolean, enum, nullable,
// object and array parameters (and a tool without a schema) are parsed by kylin-server's parser,
// whole and streamed, and checked by the test schema validator (tests/common/json_schema_check.hpp),
// which shares no code with either.
#include <doctest/doctest.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/json_schema_check.hpp"
#include "kylin/constrain/dfa.hpp"
#include "kylin/constrain/parser.hpp"
#include "kylin/server/tool_call_stream.hpp"

namespace tool_calls_xml_grammar_test {

namespace kc = kylin::constrain;
using kylin::json::Value;

const char* tools_json = R"([
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
     "query": {"type": "string"},
     "limit": {"type": "integer", "minimum": -5, "maximum": 500},
     "threshold": {"type": "number"},
     "exact": {"type": "boolean"},
     "mode": {"type": "string", "enum": ["fast", "deep search", "null"]},
     "ttl": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
     "note": {"type": ["string", "null"]},
     "filters": {"type": "object", "properties": {"lang": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
                 "required": ["lang"]},
     "sites": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
     "required": ["query", "limit"], "additionalProperties": false}, "strict": true}},
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
     "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}},
  {"type": "function", "function": {"name": "anything"}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])";

// The bytes of a shortest way from `state` to a complete sentence, or nullopt (breadth-first).
std::optional<std::string> shortest_completion(kc::LazyDfa& dfa, int state) {
  std::map<int, std::pair<int, unsigned char>> from{{state, {-1, 0}}};
  std::deque<int> todo{state};
  while (!todo.empty() && from.size() < 50000) {
    const int s = todo.front();
    todo.pop_front();
    if (dfa.accepts(s)) {
      std::string path;
      for (int at = s; from[at].first >= 0; at = from[at].first) path.insert(path.begin(), static_cast<char>(from[at].second));
      return path;
    }
    for (unsigned b = 0; b < 256; ++b)
      if (const int to = dfa.step(s, static_cast<unsigned char>(b)); to >= 0 && from.emplace(to, std::make_pair(s, static_cast<unsigned char>(b))).second)
        todo.push_back(to);
  }
  return std::nullopt;
}

// One sentence: bytes drawn among the allowed ones, often among those XML markers and JSON are
// made of, and now and then as much of a marker as the grammar allows (so values end, and text
// values come close to </parameter> and friends); past 1500 bytes the shortest completion.
std::string sample(kc::LazyDfa& dfa, std::mt19937_64& rng) {
  static const std::string tempting = "<>/=\n\"{}[],:\\nptfu0123456789.-eE ";
  static const std::vector<std::string> markers = {"\n</parameter>\n", "</parameter>", "\n<parameter=", "\n</function>", "</function>\n",
                                                   "\n</tool_call>", "<parameter=", "</tool_call>\n<tool_call>\n", "None", "null", "\"}"};
  std::string out;
  int state = dfa.start();
  for (;;) {
    if (dfa.accepts(state) && rng() % 3 == 0) return out;
    if (out.size() > 1500) {
      const auto rest = shortest_completion(dfa, state);
      REQUIRE(rest.has_value());
      return out + *rest;
    }
    if (rng() % 10 == 0) {
      for (char c : markers[rng() % markers.size()]) {
        const int to = dfa.step(state, static_cast<unsigned char>(c));
        if (to < 0) break;
        out += c;
        state = to;
      }
      continue;
    }
    std::vector<unsigned char> allowed, liked;
    bool overflow = false;
    for (unsigned b = 0; b < 256; ++b) {
      const int to = dfa.step(state, static_cast<unsigned char>(b));
      overflow |= to == kc::LazyDfa::kOverflow;
      if (to < 0) continue;
      allowed.push_back(static_cast<unsigned char>(b));
      if (tempting.find(static_cast<char>(b)) != std::string::npos) liked.push_back(static_cast<unsigned char>(b));
    }
    REQUIRE_FALSE(overflow);
    if (allowed.empty()) return out;
    const auto& pick = !liked.empty() && rng() % 3 != 0 ? liked : allowed;
    const unsigned char b = pick[rng() % pick.size()];
    out += static_cast<char>(b);
    state = dfa.step(state, b);
  }
}

const Value* parameters_of(const Value& tools, const std::string& name) {
  for (const Value& t : tools.as_array())
    if (t.find("function")->find("name")->as_string() == name) return t.find("function")->find("parameters");
  return nullptr;
}

TEST_CASE("sentences of an XML tool-call grammar parse back, whole and streamed, to calls valid under their schemas") {
  const Value tools = kylin::json::parse(tools_json);
  std::vector<kc::XmlToolGrammar> compiled;
  for (const Value& t : tools.as_array()) {
    const Value& fn = *t.find("function");
    compiled.push_back(kc::xml_tool_grammar(fn.find("name")->as_string(), fn.find("parameters")));
  }
  const kylin::server::ToolCallDialect dialect{kylin::server::ToolCallFormat::xml, tools};
  std::mt19937_64 rng(3535);
  std::map<std::string, int> seen;  // calls per tool
  for (std::size_t which = 0; which <= compiled.size(); ++which) {  // each tool alone, then all together
    std::vector<kc::XmlToolGrammar> offered = which < compiled.size() ? std::vector{compiled[which]} : compiled;
    const kc::Grammar g = kc::xml_tool_calls_grammar(offered, {.min = 1, .max = 3});
    kc::LazyDfa dfa(g, {}, std::size_t{1} << 16);
    for (int i = 0; i < 30; ++i) {
      const std::string s = sample(dfa, rng);
      CAPTURE(s);
      if (std::getenv("KYLIN_SHOW_SAMPLES")) MESSAGE(s);
      REQUIRE(kc::match_bytes(g, s).complete);
      const kylin::server::ParsedToolCalls p = kylin::server::parse_tool_calls(s, dialect);
      CHECK(p.content.empty());
      REQUIRE(p.calls.size() >= 1);
      REQUIRE(p.calls.size() <= 3);
      kylin::server::ToolCallStream stream(dialect);
      for (std::size_t at = 0, n = 0; at < s.size(); at += n) {
        n = 1 + rng() % 7;
        CHECK(stream.push(s.substr(at, n)).content.empty());
      }
      CHECK(stream.finish().content.empty());
      CHECK(stream.calls() == p.calls.size());
      for (std::size_t c = 0; c < p.calls.size(); ++c) {
        const Value* schema = parameters_of(tools, p.calls[c].name);
        const Value args = kylin::json::parse(p.calls[c].arguments);
        REQUIRE(args.is_object());
        const Value any = kylin::json::Object{};
        CHECK(test_schema::check(args, schema ? *schema : any, schema ? *schema : any) == "");
        CHECK(stream.call(c).arguments == p.calls[c].arguments);
        ++seen[p.calls[c].name];
      }
    }
  }
  for (const char* name : {"search", "write_file", "anything", "now"}) CHECK(seen[name] > 10);
}

}  // namespace tool_calls_xml_grammar_test
