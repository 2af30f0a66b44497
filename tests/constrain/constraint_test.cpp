// Constraint over the real Qwen3 vocabulary (151,936 rows): the trie walk's mask equals a
// token-by-token check of every id, tokens spanning several grammar symbols and ending inside a
// UTF-8 character are handled, EOS is allowed exactly when the value is complete, and the
// <think> block is free text before the grammar starts.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"

namespace constraint_test {

constexpr std::size_t kVocab = 151936;

const kylin::Tokenizer& tokenizer() {
  static const kylin::Tokenizer t = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return t;
}

std::shared_ptr<const kylin::constrain::TokenTrie> trie() {
  static const auto t = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(tokenizer(), {151645, 151643}, kVocab));
  return t;
}

int id_of(std::string_view bytes) {
  const auto ids = tokenizer().encode(bytes);
  REQUIRE(ids.size() == 1);
  return ids[0];
}

// The ids the constraint leaves finite after accepting `prefix` token by token.
std::vector<char> allowed_after(kylin::constrain::Constraint& c, const std::vector<int>& prefix) {
  c.begin(false);
  for (int id : prefix) c.accept(id);
  std::vector<float> logits(kVocab, 0.0f);  // [vocab]
  c.mask(logits);
  std::vector<char> ok(kVocab);  // [vocab]
  for (std::size_t i = 0; i < kVocab; ++i) ok[i] = std::isfinite(logits[i]);
  return ok;
}

// The oracle: every id checked on its own by feeding prefix + its bytes to a fresh parser.
std::vector<char> brute_force(const kylin::constrain::Grammar& g, std::string_view prefix) {
  std::vector<char> added(kVocab, 0);  // [vocab]
  for (const auto& a : tokenizer().added_tokens()) added[static_cast<std::size_t>(a.id)] = 1;
  kylin::constrain::StackArena arena(g, {});
  std::vector<int> start, a, b;
  arena.start(start);
  for (char ch : prefix) {
    arena.step(start, static_cast<unsigned char>(ch), a);
    std::swap(start, a);
  }
  std::vector<char> ok(kVocab, 0);  // [vocab]
  for (int id = 0; id < static_cast<int>(kVocab); ++id) {
    if (id >= tokenizer().vocab_size() || !tokenizer().id_to_token(id)) continue;
    if (id == 151645 || id == 151643) {
      ok[static_cast<std::size_t>(id)] = kylin::constrain::StackArena::accepts(start);
      continue;
    }
    const std::string& bytes = tokenizer().token_bytes(id);
    if (added[static_cast<std::size_t>(id)] || bytes.empty()) continue;
    a = start;
    for (char ch : bytes) {
      arena.step(a, static_cast<unsigned char>(ch), b);
      std::swap(a, b);
      if (a.empty()) break;
    }
    ok[static_cast<std::size_t>(id)] = !a.empty();
  }
  return ok;
}

const char* person_schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
  "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","\u00e9t\u00e9"]},"maxItems":3}},
  "required":["name","age"],"additionalProperties":false})";

TEST_CASE("the trie walk's mask equals checking every token of the vocabulary alone, at several states") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(person_schema));
  // The DFA walk, and the stack-set walk it falls back to when its state cap is reached.
  kylin::constrain::ConstraintOptions tiny_dfa;
  tiny_dfa.max_dfa_states = 3;
  for (const auto& options : {kylin::constrain::ConstraintOptions{}, tiny_dfa}) {
    CAPTURE(options.max_dfa_states);
    kylin::constrain::Constraint c(grammar, trie(), options);
    const std::vector<std::string> prefixes = {"", "{\"name\":\"", "{\"name\":\"ab\xc3", "{\"name\":\"x\",\"age\":12",
                                               "{\"name\":\"x\",\"age\":1,\"tags\":[\"", "{\"name\":\"x\",\"age\":1}"};
    for (const std::string& prefix : prefixes) {
      CAPTURE(prefix);
      // Feed the prefix as single-byte tokens: Qwen's byte-level vocabulary has one per byte.
      std::vector<int> ids;
      for (char ch : prefix) {
        std::vector<int> one;
        for (int id = 0; id < tokenizer().vocab_size() && one.empty(); ++id)
          if (tokenizer().id_to_token(id) && tokenizer().token_bytes(id) == std::string(1, ch)) one.push_back(id);
        REQUIRE(one.size() == 1);
        ids.push_back(one[0]);
      }
      const auto got = allowed_after(c, ids);
      const auto want = brute_force(grammar, prefix);
      std::size_t allowed = 0, differ = 0;
      for (std::size_t i = 0; i < kVocab; ++i) {
        allowed += got[i] != 0;
        differ += got[i] != want[i];
      }
      CHECK(differ == 0);
      CHECK(allowed > 0);
      CHECK_FALSE(c.failed());
    }
    CHECK((c.stats().slow_walks > 0) == (options.max_dfa_states == 3));
  }
}

TEST_CASE("tokens spanning several symbols and partial UTF-8 are allowed exactly when they fit") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(person_schema));
  kylin::constrain::Constraint c(grammar, trie());
  auto allows = [&](const std::vector<int>& prefix, std::string_view token) { return allowed_after(c, prefix)[static_cast<std::size_t>(id_of(token))] != 0; };
  CHECK(allows({}, "{\""));                              // two symbols in one token
  CHECK(allows({id_of("{\"")}, "name"));
  CHECK_FALSE(allows({id_of("{\"")}, "age"));              // name comes first and is required
  CHECK(allows({id_of("{\""), id_of("name")}, "\":\""));   // closes the key, colon, opens the value
  const std::vector<int> in_name = {id_of("{\""), id_of("name"), id_of("\":\"")};
  CHECK(allows(in_name, "hello"));
  CHECK(allows(in_name, "\","));                           // closes the string and goes on
  CHECK_FALSE(allows(in_name, "\"}"));                     // age is required
  // A token that ends in the middle of a character: é is C3 A9, and Qwen has a token for each byte.
  std::vector<int> c3;
  for (int id = 0; id < tokenizer().vocab_size(); ++id)
    if (tokenizer().id_to_token(id) && tokenizer().token_bytes(id) == "\xc3") c3.push_back(id);
  REQUIRE(c3.size() == 1);
  std::vector<int> mid = in_name;
  mid.push_back(c3[0]);
  const auto after = allowed_after(c, mid);
  CHECK(after[static_cast<std::size_t>(id_of("a"))] == 0);     // a character must finish first
  std::size_t finishing = 0;
  for (int id = 0; id < tokenizer().vocab_size(); ++id)
    if (after[static_cast<std::size_t>(id)]) {
      const std::string& b = tokenizer().token_bytes(id);
      CHECK((static_cast<unsigned char>(b[0]) & 0xC0) == 0x80);  // only continuation bytes go on
      finishing += b.size() == 1;
    }
  CHECK(finishing == 64);  // C3 takes any of 80..BF
}

TEST_CASE("EOS only once the value is complete; a closed value leaves nothing else") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  kylin::constrain::Constraint c(grammar, trie());
  auto eos_allowed = [&](const std::vector<int>& prefix) { return allowed_after(c, prefix)[151645] != 0; };
  CHECK_FALSE(eos_allowed({}));
  CHECK_FALSE(eos_allowed({id_of("[")}));
  CHECK_FALSE(c.complete());
  const auto closed = allowed_after(c, {id_of("["), id_of("1"), id_of("]")});
  CHECK(c.finished());
  std::size_t allowed = 0;
  for (char x : closed) allowed += x != 0;
  CHECK(allowed == 2);  // <|im_end|> and <|endoftext|>
  CHECK(closed[151643]);
  const auto number = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"integer"})"));
  kylin::constrain::Constraint n(number, trie());
  const auto after_digit = allowed_after(n, {id_of("4")});
  CHECK(n.complete());
  CHECK_FALSE(n.finished());
  CHECK(after_digit[151645]);
  CHECK(after_digit[static_cast<std::size_t>(id_of("2"))]);  // 42 is still an integer
}

TEST_CASE("thinking: <think> opens free text (only when allowed), the grammar starts after </think>") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"const":"ok"})"));
  const int open = *tokenizer().token_to_id("<think>"), close = *tokenizer().token_to_id("</think>");
  kylin::constrain::Constraint strict(grammar, trie());
  CHECK(allowed_after(strict, {})[static_cast<std::size_t>(open)] == 0);
  kylin::constrain::ConstraintOptions allow;
  allow.thinking = kylin::constrain::ThinkingPolicy::allow;
  kylin::constrain::Constraint thinking(grammar, trie(), allow);
  CHECK(allowed_after(thinking, {})[static_cast<std::size_t>(open)] != 0);
  CHECK(allowed_after(thinking, {})[static_cast<std::size_t>(id_of("\""))] != 0);
  const auto reasoning = allowed_after(thinking, {open, id_of("hello"), id_of("{")});
  std::size_t free = 0;
  for (char x : reasoning) free += x != 0;
  CHECK(free == kVocab);  // inside the block nothing is masked
  CHECK(thinking.in_reasoning());
  const auto answer = allowed_after(thinking, {open, id_of("hello"), close});
  CHECK(answer[static_cast<std::size_t>(id_of("\""))] != 0);
  CHECK(answer[static_cast<std::size_t>(id_of("hello"))] == 0);
  CHECK(answer[static_cast<std::size_t>(open)] == 0);
  // A prompt that ends inside <think> starts in the reasoning, whatever the policy.
  strict.begin(true);
  std::vector<float> row(kVocab, 0.0f);  // [vocab]
  strict.mask(row);
  CHECK(std::isfinite(row[static_cast<std::size_t>(id_of("hello"))]));
  strict.accept(close);
  strict.mask(row);
  CHECK_FALSE(std::isfinite(row[static_cast<std::size_t>(id_of("hello"))]));
}

TEST_CASE("masks are cached per parser state: a repeated state costs no walk") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"string"})"));
  kylin::constrain::Constraint c(grammar, trie());
  std::vector<float> row(kVocab, 0.0f);  // [vocab]
  c.mask(row);
  c.accept(id_of("\""));
  for (const char* piece : {"hello", " world", " again", " more"}) {
    c.mask(row);
    c.accept(id_of(piece));
  }
  CHECK(c.stats().walks == 3);  // the start, the string's first character, then one state for the rest
  CHECK(c.stats().cache_hits == 2);
}

TEST_CASE("warm() walks the start state's mask where it is called; the first decoding step finds it cached (issue 75)") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(person_schema));
  kylin::constrain::Constraint c(grammar, trie());
  c.warm();
  CHECK(c.stats().walks == 1);
  std::vector<float> row(kVocab, 0.0f);  // [vocab]
  c.begin(false);  // as a generation starts: the same start state, its mask kept
  c.mask(row);
  CHECK(c.stats().walks == 1);
  CHECK(c.stats().cache_hits == 1);
  CHECK(std::isfinite(row[static_cast<std::size_t>(id_of("{\""))]));
}

TEST_CASE("added tokens are never text unless the trie is built with them as text (<tool_call>)") {
  const int tool = *tokenizer().token_to_id("<tool_call>");
  auto grammar = kylin::constrain::parse_gbnf(R"(root ::= "<tool_call>" [a-z]+ "</tool_call>")");
  kylin::constrain::Constraint plain(grammar, trie());
  CHECK(allowed_after(plain, {})[static_cast<std::size_t>(tool)] == 0);
  CHECK(allowed_after(plain, {})[static_cast<std::size_t>(id_of("<"))] != 0);  // spelled byte by byte instead
  auto with_tools = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(tokenizer(), {151645}, kVocab, {tool, *tokenizer().token_to_id("</tool_call>")}));
  kylin::constrain::Constraint calls(grammar, with_tools);
  CHECK(allowed_after(calls, {})[static_cast<std::size_t>(tool)] != 0);
  const auto closing = allowed_after(calls, {tool, id_of("abc")});
  CHECK(closing[static_cast<std::size_t>(*tokenizer().token_to_id("</tool_call>"))] != 0);
  CHECK(closing[static_cast<std::size_t>(tool)] == 0);
}

TEST_CASE("mark and rewind: after tokens walked past the mark (and DFA renumberings) the mask and allows() are those at the mark") {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(person_schema));
  kylin::constrain::ConstraintOptions tiny_dfa;
  tiny_dfa.max_dfa_states = 3;  // every few bytes the DFA is renumbered: the mark's state id means nothing after
  for (const auto& options : {kylin::constrain::ConstraintOptions{}, tiny_dfa}) {
    CAPTURE(options.max_dfa_states);
    kylin::constrain::Constraint c(grammar, trie(), options), fresh(grammar, trie(), options);
    const auto before = tokenizer().encode("{\"name\":\"ab");
    const auto after = tokenizer().encode("cd\",\"age\":4}");
    const auto want = allowed_after(fresh, before);
    c.begin(false);
    for (int id : before) c.accept(id);
    c.mark();
    for (int id : after) {
      REQUIRE(c.allows(id));
      c.accept(id);
    }
    CHECK(c.complete());
    c.rewind();
    CHECK_FALSE(c.complete());  // inside the name string again
    CHECK(c.allows(id_of("\"")));
    std::vector<float> logits(kVocab, 0.0f);
    c.mask(logits);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < kVocab; ++i) differ += (std::isfinite(logits[i]) ? 1 : 0) != want[i];
    CHECK(differ == 0);
  }
}

}  // namespace constraint_test
