// Speculative decoding with the checkpoint's own MTP head (SpeculativeOptions::mtp): the drafts of greedy
// speculative decoding are the float64 reference's, round by round; greedy output equals plain decoding on every
// MTP checkpoint for k = 1..4, with penalties, beside prompt lookup (partial and full acceptance on a repeating
// prompt), under a constraint, in a session reused for the next prompt; the head's cache then holds what a fresh
// teacher-forced pass gives; misuse is an error. (Sampled output: tests/generate/speculative_stats.cpp.)
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "common/sanitizer.hpp"
#include "common/temp_model.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/generate/session.hpp"

namespace mtp_speculative_test {

using kylin::test::TempModel;
using kylin::test::TestTokenizer;

constexpr const char* heads[] = {"tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3-next"};

// Engines with their MTP heads over temp directories (a byte tokenizer with a token for each of their 512 rows), loaded once each.
kylin::Engine& engine(const std::string& checkpoint) {
  struct Loaded {
    std::unique_ptr<TempModel> dir;
    std::unique_ptr<kylin::Engine> engine;
  };
  static std::map<std::string, Loaded> loaded;
  Loaded& l = loaded[checkpoint];
  if (!l.engine) {
    l.dir = std::make_unique<TempModel>(checkpoint, TestTokenizer::bytes_padded);
    l.engine = kylin::Engine::load(l.dir->dir(), {.threads = 2, .max_pass_rows = 64, .context_length = 512, .mtp = kylin::MtpHead::loaded});
  }
  return *l.engine;
}

kylin::GenerateOptions greedy(std::int64_t n) {
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = n;
  return o;
}
kylin::SpeculativeOptions mtp(int k, int lookup = 0) { return {.draft = nullptr, .mtp = true, .max_draft = k, .p_min = 0.75f, .lookup = lookup}; }

std::vector<int> ints(const kylin::json::Value& a) {
  std::vector<int> out;
  for (const auto& x : a.as_array()) out.push_back(static_cast<int>(x.as_int()));
  return out;
}

TEST_CASE("MTP drafts: greedy speculative decoding proposes the reference's draft tokens round by round and emits its greedy tokens") {
  for (const char* name : heads) {
    CAPTURE(std::string(name));
    kylin::Engine& e = engine(name);
    const auto ref = kylin::json::parse(kylin::io::read_text_file(kylin::test::data + "/reference/" + std::string(name) + "-mtp.json"));
    int checked = 0;
    for (const auto& c : ref.find("cases")->as_array()) {
      const auto* sp = c.find("speculative");
      if (!sp) continue;
      const std::vector<int> prompt = ints(*c.find("tokens"));
      CAPTURE(prompt.size());
      kylin::Session session(e);
      kylin::GenerateOptions o = greedy(static_cast<std::int64_t>(sp->find("tokens")->size()));
      o.speculative = mtp(static_cast<int>(sp->find("k")->as_int()));
      kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
      std::vector<std::vector<int>> rounds;  // the drafts of each verification pass
      while (!run.done()) {
        while (run.drafting()) {
          const kylin::SequenceInput in = run.draft_input();
          run.forward_drafts(std::span(&in, 1));
          run.advance_draft();
        }
        if (!run.drafts().empty()) rounds.emplace_back(run.drafts().begin(), run.drafts().end());
        const kylin::SequenceInput in = run.input();
        e.model().forward(std::span(&in, 1));
        run.advance();
      }
      const kylin::Generation g = run.finish();
      CHECK(g.tokens == ints(*sp->find("tokens")));
      const auto& want = sp->find("rounds")->as_array();
      REQUIRE(rounds.size() >= want.size() - 1);  // (the last round may be cut by max_new_tokens)
      for (std::size_t r = 0; r < std::min(rounds.size(), want.size()); ++r) {
        CAPTURE(r);
        const std::vector<int> drafts = ints(*want[r].find("draft_tokens"));
        const auto& margins = want[r].find("draft_margins")->as_array();
        // draft i is robust where the margins of drafts 0..i are all >= 0.03 (the README's rule)
        for (std::size_t i = 0; i < drafts.size() && i < rounds[r].size() && margins[i].as_double() >= 0.03; ++i, ++checked)
          CHECK(rounds[r][i] == drafts[i]);
      }
    }
    CHECK(checked >= 20);
  }
}

// The head's cache after a generation equals a fresh teacher-forced pass over the context: the next first pass
// (the pending hidden state's row) gives the same logits from both.
void check_head_state(kylin::Engine& e, const kylin::Session& session, std::span<const int> prompt, const std::vector<int>& generated) {
  const kylin::MtpContext* m = session.mtp();
  REQUIRE(m != nullptr);
  std::vector<int> ctx(prompt.begin(), prompt.end());
  ctx.insert(ctx.end(), generated.begin(), generated.end());
  const std::int64_t M = m->cache().size(), T = session.cache().size(), H = e.model().hidden_size();
  REQUIRE(M + m->pending_rows() == T);
  if (m->pending_rows() == 0 || static_cast<std::size_t>(M) + 1 >= ctx.size()) return;
  // fresh: the target over ctx[0, T), the head over (h_j, ctx[j + 1]) for j < M
  kylin::Model& model = const_cast<kylin::Engine&>(e).model();
  auto target = model.new_cache(512);
  std::vector<float> h(static_cast<std::size_t>(T * H)), logits(static_cast<std::size_t>(model.vocab_size()));
  model.forward(std::span(ctx).first(static_cast<std::size_t>(T)), target, {.logits = logits, .hidden = h, .hidden_positions = kylin::Positions::all});
  const std::span<const float> pending = m->pending().first(static_cast<std::size_t>(H));
  CHECK(kylin::test::relative_l2(pending, std::span<const float>(h).subspan(static_cast<std::size_t>(M * H), static_cast<std::size_t>(H))) < 1e-5);
  auto fresh = model.new_mtp_cache(512), kept = model.new_mtp_cache(512);
  if (M > 0) {
    const kylin::SequenceInput in{std::span(ctx).subspan(1, static_cast<std::size_t>(M)), fresh, {}, false, {}, std::span(h).first(static_cast<std::size_t>(M * H))};
    model.forward_mtp(std::span(&in, 1));
  }
  kept.copy_prefix(m->cache(), M);
  CHECK(std::vector<int>(kept.tokens().begin(), kept.tokens().end()) == std::vector<int>(ctx.begin() + 1, ctx.begin() + 1 + M));
  std::vector<float> a(logits.size()), b(logits.size());
  const std::vector<int> next{ctx[static_cast<std::size_t>(M) + 1]};
  const kylin::SequenceInput ia{next, fresh, {.logits = a}, false, {}, pending}, ib{next, kept, {.logits = b}, false, {}, pending};
  model.forward_mtp(std::span(&ia, 1));
  model.forward_mtp(std::span(&ib, 1));
  CHECK(kylin::test::relative_l2(b, a) < 1e-5);
}

TEST_CASE("MTP drafts: greedy output is plain greedy output on every MTP checkpoint, k = 1..4, with penalties, beside prompt lookup; the head's cache is a fresh pass's") {
  std::mt19937 rng(7);
  for (const char* name : heads) {
    CAPTURE(std::string(name));
    kylin::Engine& e = engine(name);
    for (bool penalties : {false, true}) {
      CAPTURE(penalties);
      std::uniform_int_distribution<int> byte('a', 'z');
      std::vector<int> prompt(12);
      for (int& t : prompt) t = byte(rng);
      prompt.insert(prompt.end(), prompt.begin(), prompt.end());  // lookup finds n-grams: partial acceptances
      kylin::GenerateOptions o = greedy(40);
      if (penalties) o.sampling.repetition_penalty = 1.3f, o.sampling.frequency_penalty = 0.4f;
      kylin::Session plain_session(e);
      const kylin::Generation plain = plain_session.generate(prompt, o);
      // k = 1..4, lookup beside the head at k = 3 (a sanitized build: the ends)
      const std::vector<std::pair<int, int>> modes =
          kylin::test::sanitized ? std::vector<std::pair<int, int>>{{1, 0}, {4, 3}} : std::vector<std::pair<int, int>>{{1, 0}, {2, 0}, {3, 3}, {4, 0}};
      for (const auto& [k_, lookup_] : modes) {
        {
          const int k = k_, lookup = lookup_;  // named copies: clang 14 cannot capture a structured binding
          CAPTURE(k);
          CAPTURE(lookup);
          o.speculative = mtp(k, lookup);
          kylin::Session session(e);
          const kylin::Generation g = session.generate(prompt, o);
          CHECK(g.tokens == plain.tokens);
          CHECK(to_string(g.stop_reason) == to_string(plain.stop_reason));
          CHECK(std::vector<int>(session.cache().tokens().begin(), session.cache().tokens().end()) ==
                std::vector<int>(plain_session.cache().tokens().begin(), plain_session.cache().tokens().end()));
          CHECK(g.stats.draft_tokens > 0);
          CHECK(g.stats.decode_passes <= plain.stats.decode_passes);
          check_head_state(e, session, prompt, g.tokens);
          // the next prompt shares this one's context: the head's cache is reused or cut, never wrong
          std::vector<int> next(prompt);
          next.insert(next.end(), g.tokens.begin(), g.tokens.begin() + static_cast<std::ptrdiff_t>(g.tokens.size() / 2));
          next.push_back('q');
          const kylin::Generation again = session.generate(next, o);
          kylin::Session fresh(e);
          kylin::GenerateOptions without = o;
          without.speculative = {};
          CHECK(again.tokens == fresh.generate(next, without).tokens);
          check_head_state(e, session, next, again.tokens);
        }
      }
    }
  }
}

TEST_CASE("MTP drafts over a draft vocabulary (mtp_vocab): greedy output is plain greedy output; the drafts are its ids") {
  TempModel dir("tiny-qwen35-moe", TestTokenizer::bytes_padded);
  auto e = kylin::Engine::load(dir.dir(), {.threads = 2, .context_length = 256, .mtp = kylin::MtpHead::loaded, .mtp_vocab = 128});
  const std::vector<int> prompt = e->tokenizer().encode("one two three one two");
  kylin::GenerateOptions o = greedy(40);
  kylin::Session plain_session(*e);
  const kylin::Generation plain = plain_session.generate(prompt, o);
  o.speculative = mtp(3);
  kylin::Session session(*e);
  kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
  std::int64_t drafts = 0;
  while (!run.done()) {
    while (run.drafting()) {
      const kylin::SequenceInput in = run.draft_input();
      run.forward_drafts(std::span(&in, 1));
      run.advance_draft();
    }
    for (int id : run.drafts()) {
      CHECK(id < 128);
      ++drafts;
    }
    const kylin::SequenceInput in = run.input();
    e->model().forward(std::span(&in, 1));
    run.advance();
  }
  CHECK(run.finish().tokens == plain.tokens);
  CHECK(drafts > 0);
}

TEST_CASE("MTP drafts: under a constraint, stop strings and max_tokens the output ends where it ends without speculation; forced drafts are accepted, fully and in part") {
  kylin::Engine& e = engine("tiny-qwen35");
  auto trie = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(e.tokenizer(), e.eos_ids(), static_cast<std::size_t>(e.model().vocab_size())));
  const std::vector<int> prompt = e.tokenizer().encode("a word: ");
  // the enum leaves one token at most positions (the masked draft is the target's choice there) and two where its
  // strings part: drafts accepted whole, and cut where the head picks the other branch
  const char* schemas[] = {R"({"type": "array", "items": {"type": "integer"}})", R"({"enum": ["aaaaaaaabbbbbbbb", "aaaabbbbaaaabbbb", "aaaabbbbbbbbaaaa", "aabbaabbaabbaabb", "abababababababab", "aaaaaaaaaaaaaaab"]})"};
  for (const char* schema : schemas) {
    std::int64_t drafted = 0, accepted = 0;
    for (int max_tokens : {1, 2, 7, 40}) {
      CAPTURE(schema);
      CAPTURE(max_tokens);
      kylin::GenerateOptions o = greedy(max_tokens);
      o.stop = {"]"};
      kylin::constrain::Constraint c1(kylin::constrain::json_schema_grammar(kylin::json::parse(schema)), trie);
      o.constraint = &c1;
      kylin::Session plain_session(e);
      const kylin::Generation plain = plain_session.generate(prompt, o);
      kylin::constrain::Constraint c2(kylin::constrain::json_schema_grammar(kylin::json::parse(schema)), trie);
      o.constraint = &c2;
      o.speculative = mtp(4);
      kylin::Session session(e);
      const kylin::Generation g = session.generate(prompt, o);
      CHECK(g.tokens == plain.tokens);
      CHECK(g.content == plain.content);
      CHECK(to_string(g.stop_reason) == to_string(plain.stop_reason));
      check_head_state(e, session, prompt, g.tokens);
      drafted += g.stats.draft_tokens, accepted += g.stats.draft_accepted;
    }
    INFO("drafted " << drafted << ", accepted " << accepted);  // measured: integers 76 / 0; the enum 23 / 17
    CHECK(drafted > 20);
    if (schema == schemas[1]) CHECK((accepted > drafted / 2 && accepted < drafted));
  }
}

TEST_CASE("MTP drafts: a model loaded without its head, or the head beside a draft model, is an error naming speculative.mtp") {
  TempModel dir("tiny-qwen35", TestTokenizer::bytes_padded);
  auto plain = kylin::Engine::load(dir.dir(), {.threads = 1, .context_length = 64});
  kylin::Session session(*plain);
  kylin::GenerateOptions o = greedy(4);
  o.speculative = mtp(2);
  const std::vector<int> prompt{'a', 'b'};
  CHECK_THROWS_WITH_AS(session.generate(prompt, o), doctest::Contains("speculative.mtp"), kylin::Error);
  o.speculative.draft = plain.get();
  CHECK_THROWS_WITH_AS(session.generate(prompt, o), doctest::Contains("speculative.mtp"), kylin::Error);
}

}  // namespace mtp_speculative_test
