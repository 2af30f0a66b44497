// Random texts drawn from JSON-schema grammars over schemas using every keyword of issue 40:
// each is a complete sentence of its grammar and parses as JSON. With KYLIN_SCHEMA_SAMPLES=FILE
// they are also written there (one {"schema", "samples"} JSON line per schema) for ajv and
// ajv-formats to validate (ctest constrain_ajv: tests/constrain/ajv_check.sh).
#include <doctest/doctest.h>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kylin/constrain/dfa.hpp"
#include "kylin/constrain/json_schema.hpp"

namespace schema_samples_test {

// Schemas in the shapes Pydantic v2 and zod-to-json-schema emit, covering every new keyword.
const std::vector<const char*> corpus = {
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"email":{"type":"string","format":"email"},
        "age":{"type":"integer","minimum":0,"maximum":150},"score":{"type":"number","exclusiveMinimum":0,"maximum":1}},
        "required":["id","email","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},
        "at":{"type":"string","format":"time"},"host":{"type":"string","format":"ipv4"},"link":{"type":"string","format":"uri"}},
        "required":["when","day","at","host","link"]})",
    R"({"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},
        "tag":{"type":"string","pattern":"ab?c","maxLength":12},"note":{"type":"string","pattern":"^[^\"\\\\]*[\"\\\\\\n][a-zé]{0,3}$"}},
        "required":["sku","tag","note"]})",
    R"({"type":"object","properties":{"qty":{"type":"integer","multipleOf":5,"exclusiveMinimum":-50,"exclusiveMaximum":1000},
        "delta":{"type":"integer","maximum":-3},"big":{"type":"integer","minimum":123456789012,"multipleOf":7},
        "temp":{"type":"number","minimum":-40.5,"maximum":60}},"required":["qty","delta","big","temp"]})",
    R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":3},"c":{"type":"boolean"},
        "d":{"type":"null"}},"minProperties":2,"maxProperties":3})",
    R"({"type":"object","minProperties":1,"maxProperties":2})",
    R"({"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"integer","minimum":1,"maximum":12}],
        "items":false,"minItems":1})",
    R"({"type":"array","prefixItems":[{"const":"point"}],"items":{"type":"number","minimum":-1,"maximum":1},"minItems":2,"maxItems":4})",
    R"({"type":"array","items":{"type":"string","enum":["read","write","admin","owner"]},"uniqueItems":true,"minItems":1})",
    R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"string","format":"ipv4"},
        {"type":"integer","exclusiveMinimum":0,"maximum":65535}],"additionalItems":{"type":"boolean"},"minItems":2,"maxItems":3})",
    R"({"type":"array","items":{"enum":[1,2,3,true,null]},"uniqueItems":true,"maxItems":3})",
    R"({"anyOf":[{"type":"string","format":"email"},{"type":"string","pattern":"^\\+?[0-9]{7,12}$"},{"type":"null"}]})",
    R"({"type":"object","properties":{"url":{"type":"string","format":"uri","minLength":1,"maxLength":2083},
        "mail":{"type":"string","format":"email","maxLength":254},"code":{"type":"string","pattern":"^[a-z0-9_-]+$","minLength":3,"maxLength":8},
        "stamp":{"type":"string","format":"date-time","maxLength":25}},"required":["url","mail","code","stamp"]})",
    R"({"$defs":{"Node":{"type":"object","properties":{"v":{"type":"integer","multipleOf":3,"minimum":0,"maximum":99},
        "kids":{"type":"array","items":{"$ref":"#/$defs/Node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/Node"})",
};

// The bytes of a shortest way from `state` to a complete text (breadth-first over the grammar's
// states, at most `budget` of them), or nullopt.
std::optional<std::string> shortest_completion(kylin::constrain::LazyDfa& dfa, int state, std::size_t budget) {
  std::map<int, std::pair<int, unsigned char>> from{{state, {-1, 0}}};  // state -> (previous, byte)
  std::deque<int> todo{state};
  while (!todo.empty() && from.size() < budget) {
    const int s = todo.front();
    todo.pop_front();
    if (dfa.accepts(s)) {
      std::string path;
      for (int at = s; from[at].first >= 0; at = from[at].first) path.insert(path.begin(), static_cast<char>(from[at].second));
      return path;
    }
    for (unsigned b = 0; b < 256; ++b) {
      const int to = dfa.step(s, static_cast<unsigned char>(b));
      if (to >= 0 && from.emplace(to, std::make_pair(s, static_cast<unsigned char>(b))).second) todo.push_back(to);
    }
  }
  return std::nullopt;
}

// One text: uniform over the allowed bytes, closing bytes (" ] }) favoured, a complete text
// stopping with probability 1/4; past 150 bytes, the shortest completion.
std::string sample(kylin::constrain::LazyDfa& dfa, std::mt19937_64& rng) {
  std::string out;
  int state = dfa.start();
  for (;;) {
    if (dfa.accepts(state) && rng() % 4 == 0) return out;
    if (out.size() > 150) {
      const auto rest = shortest_completion(dfa, state, 20000);
      REQUIRE(rest.has_value());
      return out + *rest;
    }
    std::vector<unsigned char> allowed, closers;
    for (unsigned b = 0; b < 256; ++b) {
      const int to = dfa.step(state, static_cast<unsigned char>(b));
      REQUIRE(to != kylin::constrain::LazyDfa::kOverflow);
      if (to < 0) continue;
      allowed.push_back(static_cast<unsigned char>(b));
      if (b == '"' || b == ']' || b == '}') closers.push_back(static_cast<unsigned char>(b));
    }
    if (allowed.empty()) return out;  // a complete text with no continuation
    const auto& pick = !closers.empty() && rng() % 8 == 0 ? closers : allowed;
    const unsigned char b = pick[rng() % pick.size()];
    out += static_cast<char>(b);
    state = dfa.step(state, b);
  }
}

TEST_CASE("texts sampled from grammars of every issue-40 keyword are complete sentences and parse as JSON") {
  const char* dump_to = std::getenv("KYLIN_SCHEMA_SAMPLES");
  std::ofstream dump;
  if (dump_to) dump.open(dump_to);
  std::mt19937_64 rng(40);
  for (const char* text : corpus) {
    CAPTURE(text);
    const kylin::json::Value schema = kylin::json::parse(text);
    const auto g = kylin::constrain::json_schema_grammar(schema);
    kylin::constrain::LazyDfa dfa(g, {}, std::size_t{1} << 16);
    kylin::json::Array samples;
    for (int i = 0; i < 40; ++i) {
      const std::string s = sample(dfa, rng);
      CAPTURE(s);
      REQUIRE(kylin::constrain::match_bytes(g, s).complete);
      CHECK_NOTHROW(kylin::json::parse(s));
      samples.push_back(kylin::json::Value(s));
    }
    if (dump_to) {
      kylin::json::Value line = kylin::json::Object{};
      line.set("schema", schema);
      line.set("samples", kylin::json::Value(std::move(samples)));
      dump << kylin::json::dump(line) << '\n';
    }
  }
  if (dump_to) CHECK(dump.good());
}

}  // namespace schema_samples_test
