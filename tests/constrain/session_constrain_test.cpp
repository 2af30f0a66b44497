// Session + Constraint on a random-weight Qwen3 with the real tokenizer and full vocabulary
// (tests/data/models/e2e-qwen3-chat), where unconstrained output is garbage: every answer sampled
// at temperature 1 under a corpus of schemas ends by EOS, parses, and passes a validator written
// apart from the grammar compiler (tests/common/json_schema_check.hpp).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/json_schema_check.hpp"
#include "common/sanitizer.hpp"
#include "kylin/constrain/constraint.hpp"
#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/generate/session.hpp"

namespace session_constrain_test {

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat",
                                      {.threads = 2, .max_pass_rows = 512, .context_length = 4096});
  return *e;
}

std::shared_ptr<const kylin::constrain::TokenTrie> trie() {
  static const auto t = std::make_shared<const kylin::constrain::TokenTrie>(kylin::constrain::TokenTrie::build(
      engine().tokenizer(), engine().eos_ids(), static_cast<std::size_t>(engine().model().vocab_size())));
  return t;
}

kylin::json::Value ask(const std::string& text) {
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", "user");
  m.set("content", text);
  return kylin::json::Array{m};
}

kylin::ChatOptions thinking(bool on) {
  kylin::ChatOptions c;
  c.enable_thinking = on;
  return c;
}

kylin::GenerateOptions sampled(std::uint64_t seed, kylin::constrain::Constraint* c) {
  kylin::GenerateOptions o;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  o.sampling.seed = seed;
  o.max_new_tokens = 3000;
  o.constraint = c;
  return o;
}

const std::vector<const char*> corpus = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer"},
        "admin":{"type":"boolean"}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"array","items":{"enum":["red","green","blue",7,null]},"minItems":2,"maxItems":5})",
    R"({"type":"object","properties":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
        "required":["x","y"]},"label":{"anyOf":[{"type":"string","minLength":1,"maxLength":8},{"type":"null"}]}},
        "required":["point","label"]})",
    R"({"$defs":{"leaf":{"type":"object","properties":{"id":{"type":"integer"},"kind":{"const":"leaf"}},"required":["id","kind"]}},
        "type":"object","properties":{"items":{"type":"array","items":{"$ref":"#/$defs/leaf"},"maxItems":3},
        "status":{"enum":["ok","error"]}},"required":["items","status"],"additionalProperties":false})",
    R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":["string","boolean"],"maxLength":4},"maxItems":4}]})",
    R"({"type":"object","properties":{"text":{"type":"string"},"n":{"type":"null"}},"required":["text","n"]})",
};

TEST_CASE("every answer sampled under a schema parses and validates, across schemas and seeds") {
  kylin::Session session(engine());
  int index = 0;
  for (const char* text : corpus) {
    const kylin::json::Value schema = kylin::json::parse(text);
    // One constraint per schema: fresh for the first seed, reused (DFA and masks warm) after.
    kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(schema), trie());
    for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(kylin::test::repetitions(4, 1)); ++seed) {
      CAPTURE(index);
      CAPTURE(seed);
      const kylin::Generation g = session.chat(ask("Give me JSON."), thinking(false), sampled(seed, &c));
      CAPTURE(g.content);
      CHECK(g.stop_reason == kylin::StopReason::eos);
      CHECK_FALSE(c.failed());
      kylin::json::Value parsed;
      REQUIRE_NOTHROW(parsed = kylin::json::parse(g.content));
      CHECK(test_schema::check(parsed, schema, schema) == "");
    }
    ++index;
  }
}

TEST_CASE("sampled strings go through every JSON escape (quote, backslash, slash, b f n r t, u+4 hex), and every answer parses and validates") {
  // The random model is steered: +12 to the backslash outside an escape, +12 to each escape letter
  // after one, so the strings are mostly escapes and each branch of the grammar's json-char rule
  // is drawn. Every seed runs, under the sanitizers too (short answers).
  kylin::Session session(engine());
  const kylin::json::Value schema =
      kylin::json::parse(R"({"type":"array","items":{"type":"string","maxLength":12},"minItems":1,"maxItems":8})");
  kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(schema), trie());
  const std::string escapes = "\"\\/bfnrtu";
  const int backslash = *engine().tokenizer().token_to_id("\\");
  std::vector<int> letters;
  for (char e : escapes) letters.push_back(*engine().tokenizer().token_to_id(std::string(1, e)));
  std::string seen;  // the escape letters drawn so far
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    kylin::GenerateOptions o = sampled(seed, &c);
    o.max_new_tokens = 400;
    bool escaping = false;  // the last token opened an escape
    o.on_token = [&](int id) { escaping = !escaping && id == backslash; };
    o.on_logits = [&](std::span<float> row) {
      if (!escaping) row[static_cast<std::size_t>(backslash)] += 12.f;
      else
        for (int id : letters) row[static_cast<std::size_t>(id)] += 12.f;
    };
    const kylin::Generation g = session.chat(ask("Strings."), thinking(false), o);
    CAPTURE(g.content);
    CHECK(g.stop_reason == kylin::StopReason::eos);
    kylin::json::Value parsed;
    REQUIRE_NOTHROW(parsed = kylin::json::parse(g.content));
    CHECK(test_schema::check(parsed, schema, schema) == "");
    for (std::size_t i = 0; i + 1 < g.content.size(); ++i)
      if (g.content[i] == '\\') {
        if (seen.find(g.content[i + 1]) == std::string::npos) seen += g.content[i + 1];
        ++i;
      }
  }
  MESSAGE("escapes drawn: ", seen);
  CAPTURE(seen);
  for (char e : escapes) CHECK(seen.find(e) != std::string::npos);
}

TEST_CASE("a recursive schema under sampling stays bounded: the answer ends, and validates when complete") {
  kylin::Session session(engine());
  const kylin::json::Value schema = kylin::json::parse(R"({"$defs":{"t":{"type":"array","items":{"anyOf":[{"type":"integer"},
      {"$ref":"#/$defs/t"}]},"maxItems":3}},"$ref":"#/$defs/t"})");
  kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(schema), trie());
  for (std::uint64_t seed : {7u, 8u}) {
    kylin::GenerateOptions o = sampled(seed, &c);
    o.max_new_tokens = 400;
    const kylin::Generation g = session.chat(ask("Nest."), thinking(false), o);
    CAPTURE(g.content);
    CHECK_FALSE(c.failed());
    CHECK((g.stop_reason == kylin::StopReason::eos || g.stop_reason == kylin::StopReason::max_tokens));
    if (g.stop_reason == kylin::StopReason::eos) CHECK(test_schema::check(kylin::json::parse(g.content), schema, schema) == "");
  }
}

TEST_CASE("the same model without the constraint writes no valid JSON: the test above can fail") {
  kylin::Session session(engine());
  const kylin::json::Value schema = kylin::json::parse(corpus[0]);
  int valid = 0;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    kylin::GenerateOptions o = sampled(seed, nullptr);
    o.max_new_tokens = 64;
    const kylin::Generation g = session.chat(ask("Give me JSON."), thinking(false), o);
    try {
      valid += test_schema::check(kylin::json::parse(g.content), schema, schema).empty();
    } catch (const kylin::Error&) {
    }
  }
  CHECK(valid == 0);
}

TEST_CASE("greedy decoding under a GBNF grammar writes one of its sentences and ends") {
  kylin::Session session(engine());
  auto grammar = kylin::constrain::parse_gbnf(R"(root ::= "answer: " ("yes" | "no") "." )");
  kylin::constrain::Constraint c(std::move(grammar), trie());
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = 50;
  o.constraint = &c;
  const kylin::Generation g = session.chat(ask("Well?"), thinking(false), o);
  CHECK((g.content == "answer: yes." || g.content == "answer: no."));
  CHECK(g.stop_reason == kylin::StopReason::eos);
}

TEST_CASE("with thinking, the <think> block is free text and the answer after it follows the schema") {
  kylin::Session session(engine());
  const kylin::json::Value schema = kylin::json::parse(corpus[1]);
  const int open = *engine().tokenizer().token_to_id("<think>"), close = *engine().tokenizer().token_to_id("</think>");
  kylin::constrain::ConstraintOptions allow;
  allow.thinking = kylin::constrain::ThinkingPolicy::allow;
  for (std::uint64_t seed : {4u, 5u}) {
    kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(schema), trie(), allow);
    kylin::GenerateOptions o = sampled(seed, &c);
    // Steer the random model: open a block, ramble 20 tokens, close it. Free text in the block
    // needs no mask; had the grammar applied there, "<think>" itself would have been -inf.
    int step = 0;
    o.on_logits = [&](std::span<float> row) {
      if (step == 0) row[static_cast<std::size_t>(open)] = 1e4f;
      if (step == 21) row[static_cast<std::size_t>(close)] = 1e4f;
      ++step;
    };
    const kylin::Generation g = session.chat(ask("Think, then JSON."), thinking(true), o);
    CAPTURE(g.reasoning);
    CAPTURE(g.content);
    CHECK(g.tokens.front() == open);
    CHECK_FALSE(g.reasoning.empty());
    CHECK(g.stop_reason == kylin::StopReason::eos);
    kylin::json::Value parsed;
    REQUIRE_NOTHROW(parsed = kylin::json::parse(g.content));
    CHECK(test_schema::check(parsed, schema, schema) == "");
  }
}

}  // namespace session_constrain_test
