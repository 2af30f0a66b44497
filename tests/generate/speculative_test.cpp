// Speculative decoding (generate/speculative.hpp): greedy output identical to decoding without it
// on every test checkpoint, with a draft model, the target as its own draft, and prompt lookup;
// stop strings, max_tokens, streaming, constraints and the caches behave as without it; drafts of
// another tokenizer are refused by name; prompt lookup and the acceptance rule on their own.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/sanitizer.hpp"
#include "common/temp_model.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/generate/speculative.hpp"

namespace speculative_test {

using kylin::test::TempModel;
using kylin::test::TestTokenizer;

// Engines over temp directories, loaded once per (checkpoint, tokenizer).
kylin::Engine& engine(const std::string& checkpoint, TestTokenizer tokenizer) {
  struct Loaded {
    std::unique_ptr<TempModel> dir;
    std::unique_ptr<kylin::Engine> engine;
  };
  static std::map<std::pair<std::string, TestTokenizer>, Loaded> loaded;
  Loaded& l = loaded[{checkpoint, tokenizer}];
  if (!l.engine) {
    l.dir = std::make_unique<TempModel>(checkpoint, tokenizer);
    l.engine = kylin::Engine::load(l.dir->dir(), {.threads = 2, .max_pass_rows = 64, .context_length = 256});
  }
  return *l.engine;
}

// A target and a draft of another random model with the same tokenizer.
struct Pair {
  const char* target;
  const char* draft;
  TestTokenizer tokenizer;
};

const Pair pairs[] = {{"tiny-qwen3-untied", "tiny-qwen3-yarn", TestTokenizer::bytes},
                      {"small-qwen3", "small-qwen2-f32", TestTokenizer::bytes_im_end},
                      {"small-qwen2-f32", "small-qwen3", TestTokenizer::bytes_im_end},
                      {"odd-qwen3-f16-sharded", "odd-qwen3-moe-f32-sharded", TestTokenizer::bytes_im_end},
                      {"odd-qwen3-moe-f32-sharded", "odd-qwen3-f16-sharded", TestTokenizer::bytes_im_end},
                      {"tiny-qwen3-moe", "tiny-qwen3-yarn", TestTokenizer::bytes_im_end},
                      {"tiny-qwen3-yarn", "tiny-qwen3-moe", TestTokenizer::bytes_im_end},
                      {"e2e-qwen3-fullvocab", "e2e-qwen3-chat", TestTokenizer::qwen3},
                      {"e2e-qwen3-chat", "e2e-qwen3-fullvocab", TestTokenizer::qwen3},
                      // hybrid targets (rejections roll the Gated DeltaNet state back) and drafts (theirs too)
                      {"tiny-qwen35", "tiny-qwen3-yarn", TestTokenizer::bytes_im_end},
                      {"tiny-qwen3-yarn", "tiny-qwen35", TestTokenizer::bytes_im_end},
                      {"tiny-qwen35-moe", "tiny-qwen3-next", TestTokenizer::bytes_im_end},
                      {"tiny-qwen3-next", "tiny-qwen35-moe", TestTokenizer::bytes_im_end}};

// 12 random tokens of the tokenizer's bytes, twice: prompt lookup finds n-grams from the start.
std::vector<int> repeating_prompt(std::mt19937& rng) {
  std::uniform_int_distribution<int> byte('a', 'z');
  std::vector<int> p(12);
  for (int& t : p) t = byte(rng);
  p.insert(p.end(), p.begin(), p.end());
  return p;
}

kylin::GenerateOptions greedy(std::int64_t n) {
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = n;
  return o;
}

kylin::SpeculativeOptions draft(kylin::Engine& e, int k) { return {.draft = &e, .max_draft = k, .p_min = 0.0f, .lookup = 0}; }
kylin::SpeculativeOptions lookup(int n, int k) { return {.draft = nullptr, .max_draft = k, .p_min = 0.0f, .lookup = n}; }

struct Run {
  kylin::Generation g;
  std::vector<int> cache;  // the target cache's tokens afterwards
};

Run generate(kylin::Engine& target, std::span<const int> prompt, kylin::GenerateOptions o) {
  kylin::Session session(target);
  Run r{session.generate(prompt, o), {}};
  r.cache.assign(session.cache().tokens().begin(), session.cache().tokens().end());
  return r;
}

void check_same(const Run& plain, const Run& spec) {
  CHECK(spec.g.tokens == plain.g.tokens);
  CHECK(spec.g.content == plain.g.content);
  CHECK(to_string(spec.g.stop_reason) == to_string(plain.g.stop_reason));
  CHECK(spec.cache == plain.cache);
}

TEST_CASE("greedy output with speculation is the greedy output without it, token for token, every test checkpoint: another random draft, the target as draft, prompt lookup, both") {
  std::mt19937 rng(41);
  for (const Pair& p : pairs) {
    CAPTURE(std::string(p.target));
    kylin::Engine& target = engine(p.target, p.tokenizer);
    kylin::Engine& other = engine(p.draft, p.tokenizer);
    for (bool penalties : {false, true}) {  // penalties move the argmax: the draft must apply them too
      CAPTURE(penalties);
      const std::vector<int> prompt = repeating_prompt(rng);
      kylin::GenerateOptions o = greedy(40);
      if (penalties) o.sampling.repetition_penalty = 1.3f, o.sampling.frequency_penalty = 0.4f;
      const Run plain = generate(target, prompt, o);
      REQUIRE(!plain.g.tokens.empty());
      const bool eos = plain.g.stop_reason == kylin::StopReason::eos;  // its pass gave no token
      CHECK(plain.g.stats.decode_passes == plain.g.stats.generated_tokens - 1 + (eos ? 1 : 0));
      for (int k : {1, 4}) {
        CAPTURE(k);
        o.speculative = draft(other, k);
        const Run by_other = generate(target, prompt, o);
        check_same(plain, by_other);
        CHECK(by_other.g.stats.draft_tokens > 0);
        o.speculative = draft(target, k);
        const Run by_itself = generate(target, prompt, o);
        check_same(plain, by_itself);
        // its own drafts are its own argmax: all accepted, k + 1 tokens per pass where room allows
        CHECK(by_itself.g.stats.draft_accepted == by_itself.g.stats.draft_tokens);
        if (plain.g.tokens.size() > 2u * static_cast<unsigned>(k + 1))
          CHECK(by_itself.g.stats.decode_passes < plain.g.stats.decode_passes);
        o.speculative = lookup(3, k);
        const Run by_lookup = generate(target, prompt, o);
        check_same(plain, by_lookup);
        if (!penalties) CHECK(by_lookup.g.stats.draft_tokens > 0);  // penalised, these outputs never repeat an n-gram
        o.speculative = draft(other, k);
        o.speculative.lookup = 2;
        check_same(plain, generate(target, prompt, o));
      }
    }
  }
}

TEST_CASE("a seeded sampled speculative generation is reproducible: in a fresh session, and in one whose caches hold the prompt already") {
  kylin::Engine& target = engine("small-qwen3", TestTokenizer::bytes_im_end);
  kylin::Engine& other = engine("small-qwen2-f32", TestTokenizer::bytes_im_end);
  std::mt19937 rng(11);
  const std::vector<int> prompt = repeating_prompt(rng);
  for (const kylin::SpeculativeOptions& spec : {draft(target, 4), draft(other, 3), lookup(2, 4)}) {
    kylin::GenerateOptions o;
    o.sampling.temperature = 0.7f;
    o.sampling.top_k = 8;
    o.sampling.seed = 99;
    o.max_new_tokens = 30;
    o.speculative = spec;
    kylin::Session a(target), b(target);
    const kylin::Generation first = a.generate(prompt, o);
    CHECK(b.generate(prompt, o).tokens == first.tokens);
    const kylin::Generation again = a.generate(prompt, o);  // prompt reused from both caches
    CHECK(again.stats.cached_tokens > 0);
    CHECK(again.tokens == first.tokens);
    CHECK(again.stats.draft_tokens == first.stats.draft_tokens);
  }
}

TEST_CASE("a draft's p_min stops its proposals: above every probability nothing is drafted and the output stays the same") {
  kylin::Engine& target = engine("small-qwen3", TestTokenizer::bytes_im_end);
  std::mt19937 rng(7);
  const std::vector<int> prompt = repeating_prompt(rng);
  kylin::GenerateOptions o = greedy(24);
  const Run plain = generate(target, prompt, o);
  o.speculative = draft(target, 4);
  o.speculative.p_min = 1.0f;  // a random model's top token is far below 1
  const Run spec = generate(target, prompt, o);
  check_same(plain, spec);
  CHECK(spec.g.stats.draft_tokens == 0);
  o.speculative.p_min = 0.0f;
  CHECK(generate(target, prompt, o).g.stats.draft_tokens > 0);
}

TEST_CASE("a draft whose tokenizer differs is refused, naming the draft and what differs: size, a token, a special flag") {
  kylin::Engine& target = engine("small-qwen3", TestTokenizer::bytes_im_end);
  auto refusal = [&](kylin::Engine& d) -> std::string {
    try {
      kylin::check_draft(target, d);
    } catch (const kylin::Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  const std::string size = refusal(engine("small-qwen2-f32", TestTokenizer::bytes));
  CHECK(size.find("[kylin.config]") != std::string::npos);
  CHECK(size.find("256 token ids, the target's 257") != std::string::npos);
  const std::string special = refusal(engine("small-qwen2-f32", TestTokenizer::bytes_im_text));
  CHECK(special.find("'<|im_end|>' (id 256) is special only in the target's") != std::string::npos);
  const std::string qwen3 = refusal(engine("e2e-qwen3-fullvocab", TestTokenizer::qwen3));
  CHECK(qwen3.find("token ids") != std::string::npos);
  CHECK(refusal(engine("small-qwen2-f32", TestTokenizer::bytes_im_end)) == "(accepted)");
  // a Session refuses it the same way, before anything runs
  kylin::Session session(target);
  kylin::GenerateOptions o = greedy(4);
  o.speculative = draft(engine("small-qwen2-f32", TestTokenizer::bytes_im_text), 4);
  const std::vector<int> prompt = {'a', 'b'};
  CHECK_THROWS_AS(session.generate(prompt, o), kylin::Error);
  CHECK(session.cache().size() == 0);
}

TEST_CASE("speculative options out of range are request errors naming the field") {
  kylin::Engine& target = engine("small-qwen3", TestTokenizer::bytes_im_end);
  kylin::Session session(target);
  const std::vector<int> prompt = {'a', 'b'};
  for (auto [field, spec] : {std::pair{"speculative.max_draft", kylin::SpeculativeOptions{.draft = &target, .max_draft = 65, .p_min = 0, .lookup = 0}},
                             std::pair{"speculative.p_min", kylin::SpeculativeOptions{.draft = &target, .max_draft = 4, .p_min = 1.5f, .lookup = 0}},
                             std::pair{"speculative.lookup", kylin::SpeculativeOptions{.draft = nullptr, .max_draft = 4, .p_min = 0, .lookup = -1}}}) {
    kylin::GenerateOptions o = greedy(4);
    o.speculative = spec;
    try {
      session.generate(prompt, o);
      FAIL("accepted " << field);
    } catch (const kylin::Error& e) {
      CHECK(e.context() == field);
    }
  }
}

// The chat model with its template: pieces, stop strings, limits.
struct Streamed {
  kylin::Generation g;
  std::vector<std::pair<std::string, kylin::Channel>> pieces;
  std::vector<int> on_token;
  int logit_rows = 0;
};

Streamed chat(const kylin::SpeculativeOptions& spec, kylin::GenerateOptions o, const std::string& text = "Tell me a story.") {
  kylin::Engine& e = engine("e2e-qwen3-chat", TestTokenizer::qwen3);
  Streamed s;
  o.speculative = spec;
  o.on_piece = [&](const kylin::Piece& p) {
    s.pieces.emplace_back(std::string(p.text), p.channel);
    return true;
  };
  o.on_token = [&](int id) { s.on_token.push_back(id); };
  o.on_logits = [&](std::span<float>) { ++s.logit_rows; };
  kylin::Session session(e);
  kylin::json::Value messages = kylin::json::Array{kylin::json::Object{{"role", "user"}, {"content", text}}};
  s.g = session.chat(messages, {.enable_thinking = false, .tools = {}, .extra_kwargs = {}}, o);
  return s;
}

void check_same_stream(const Streamed& plain, const Streamed& spec) {
  CHECK(spec.g.tokens == plain.g.tokens);
  CHECK(spec.g.content == plain.g.content);
  CHECK(spec.g.reasoning == plain.g.reasoning);
  CHECK(to_string(spec.g.stop_reason) == to_string(plain.g.stop_reason));
  CHECK(spec.pieces == plain.pieces);
  CHECK(spec.on_token == plain.on_token);
  CHECK(spec.logit_rows == plain.logit_rows);
}

TEST_CASE("streaming, on_token, on_logits, max_tokens and stop strings see exactly what they see without speculation") {
  kylin::Engine& chat_engine = engine("e2e-qwen3-chat", TestTokenizer::qwen3);
  kylin::Engine& other = engine("e2e-qwen3-fullvocab", TestTokenizer::qwen3);
  const std::vector<kylin::SpeculativeOptions> specs = {draft(chat_engine, 4), draft(other, 3), lookup(3, 5)};
  const Streamed plain = chat({}, greedy(60));
  REQUIRE(plain.g.tokens.size() > 20);
  for (const auto& spec : specs) check_same_stream(plain, chat(spec, greedy(60)));
  // max_tokens at, just before and just after a pass's k + 1 tokens
  for (std::int64_t n : {1, 2, 4, 5, 6, 11}) {
    CAPTURE(n);
    const Streamed p = chat({}, greedy(n));
    CHECK(p.g.tokens.size() == static_cast<std::size_t>(n));
    for (const auto& spec : specs) check_same_stream(p, chat(spec, greedy(n)));
  }
  // a stop string from the middle of the plain answer: it ends there with or without drafts
  REQUIRE(plain.g.content.size() >= 6);
  kylin::GenerateOptions stop = greedy(60);
  stop.stop = {plain.g.content.substr(plain.g.content.size() / 2, 3)};
  const Streamed p = chat({}, stop);
  CHECK(to_string(p.g.stop_reason) == "stop_string");
  for (const auto& spec : specs) check_same_stream(p, chat(spec, stop));
}

TEST_CASE("a full context ends the generation where it ends without speculation, and the caches hold what they would") {
  kylin::Engine& target = engine("small-qwen3", TestTokenizer::bytes_im_end);
  std::mt19937 rng(3);
  const std::vector<int> prompt = repeating_prompt(rng);
  for (std::int64_t ctx : {26, 30, 33}) {
    CAPTURE(ctx);
    kylin::GenerateOptions o = greedy(100);
    o.ignore_eos = true;
    kylin::Session a(target, ctx), b(target, ctx);
    const kylin::Generation plain = a.generate(prompt, o);
    CHECK(to_string(plain.stop_reason) == "context_full");
    o.speculative = draft(target, 4);
    const kylin::Generation spec = b.generate(prompt, o);
    CHECK(spec.tokens == plain.tokens);
    CHECK(to_string(spec.stop_reason) == "context_full");
    CHECK(std::vector<int>(a.cache().tokens().begin(), a.cache().tokens().end()) ==
          std::vector<int>(b.cache().tokens().begin(), b.cache().tokens().end()));
    // the draft's cache is rolled back to what the context holds
    REQUIRE(b.draft_cache() != nullptr);
    const kylin::TokenContext context{prompt, spec.tokens};
    CHECK(context.common_prefix(b.draft_cache()->tokens()) == static_cast<std::size_t>(b.draft_cache()->size()));
  }
}

TEST_CASE("a JSON-schema constraint masks the drafts too: the target drafting for itself has every draft accepted, output as without") {
  kylin::Engine& e = engine("e2e-qwen3-chat", TestTokenizer::qwen3);
  const auto schema = kylin::json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "n"]})");
  auto trie = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(e.tokenizer(), e.eos_ids(), static_cast<std::size_t>(e.model().vocab_size())));
  auto run = [&](const kylin::SpeculativeOptions& spec) {
    kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(schema), trie);
    kylin::GenerateOptions o = greedy(80);
    o.constraint = &c;
    return chat(spec, o, "Give me JSON.");
  };
  const Streamed plain = run({});
  REQUIRE(!plain.g.tokens.empty());
  const Streamed itself = run(draft(e, 4));
  check_same_stream(plain, itself);
  CHECK(itself.g.stats.draft_tokens > 0);
  CHECK(itself.g.stats.draft_accepted == itself.g.stats.draft_tokens);  // an unmasked draft would propose what the mask forbids
  check_same_stream(plain, run(draft(engine("e2e-qwen3-fullvocab", TestTokenizer::qwen3), 4)));
  check_same_stream(plain, run(lookup(2, 4)));
}

TEST_CASE("prompt lookup: the continuation of the most recent occurrence of the longest matching n-gram, bounded") {
  auto look = [](std::vector<int> prompt, std::vector<int> generated, int n, std::size_t max) {
    std::vector<int> out;
    kylin::lookup_continuation({prompt, generated}, n, max, out);
    return out;
  };
  // "1 2 3" occurs earlier, followed by 4 5; "2 3" also after 9 (more recent) followed by 7
  CHECK(look({1, 2, 3, 4, 5, 9, 2, 3, 7, 8}, {1, 2, 3}, 3, 4) == std::vector<int>{4, 5, 9, 2});
  CHECK(look({1, 2, 3, 4, 5, 9, 2, 3, 7, 8}, {1, 2, 3}, 2, 4) == std::vector<int>{7, 8, 1, 2});
  CHECK(look({1, 2, 3, 4, 5}, {1, 2, 3}, 3, 2) == std::vector<int>{4, 5});
  CHECK(look({5, 6}, {7}, 3, 4).empty());                          // no earlier 7
  CHECK(look({1, 2}, {1}, 3, 4) == std::vector<int>{2, 1});        // the continuation may run into the suffix
  CHECK(look({1, 2, 1, 2}, {}, 1, 0).empty());                     // max 0
}

TEST_CASE("prompt lookup under a constraint stops at the first draft the grammar forbids") {
  kylin::Engine& e = engine("e2e-qwen3-chat", TestTokenizer::qwen3);
  auto trie = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(e.tokenizer(), e.eos_ids(), static_cast<std::size_t>(e.model().vocab_size())));
  kylin::constrain::Constraint c(kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type": "integer"})")), trie);
  const auto ids = e.tokenizer().encode("1a 1a");  // digits are single tokens: lookup proposes " ", "1", "a"
  kylin::Speculator spec(lookup(2, 8), e, nullptr, nullptr, e.default_sampling());
  spec.begin({ids, {}}, {.max_drafts = 8, .prefilling = false, .chunk = 64}, nullptr);
  REQUIRE(!spec.drafts().empty());
  const std::vector<int> free(spec.drafts().begin(), spec.drafts().end());
  spec.begin({ids, {}}, {.max_drafts = 8, .prefilling = false, .chunk = 64}, &c);
  const std::vector<int> constrained(spec.drafts().begin(), spec.drafts().end());
  CHECK(constrained.size() < free.size());
  for (int id : constrained) {
    CHECK(c.allows(id));
    c.accept(id);
  }
  CHECK(!c.allows(free[constrained.size()]));
}

}  // namespace speculative_test
