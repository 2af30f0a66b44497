// Qwen3.5 through the Engine and Session: the full-vocabulary checkpoint with the synthetic Qwen3.5 tokenizer
// and the official template against its float64 reference (text, ids, last-position logits, greedy), and the
// recurrent state through the generation paths: a second turn and a repeated prompt resume from snapshots, a
// copied prefix, Session::save/load, the prompt cache and a cancelled prefill give a fresh session's output.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "common/temp_model.hpp"
#include "kylin/generate/session.hpp"

namespace hybrid_session_test {

using kylin::test::TempDir;

const std::string data = KYLIN_TEST_DATA;

kylin::Engine& e2e() {
  static auto e = kylin::Engine::load(data + "/models/e2e-qwen35-fullvocab", {.threads = 2, .max_pass_rows = 64, .context_length = 1024});
  return *e;
}

kylin::GenerateOptions greedy(std::int64_t n) {
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = n;
  return o;
}

kylin::json::Value message(const std::string& role, const std::string& text) {
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", role);
  m.set("content", text);
  return m;
}

kylin::ChatOptions chat_options(const kylin::json::Value* kwargs) {
  kylin::ChatOptions o;
  if (kwargs == nullptr) return o;
  if (const auto* t = kwargs->find("enable_thinking")) o.enable_thinking = t->as_bool();
  if (const auto* tools = kwargs->find("tools")) o.tools = *tools;
  return o;
}

TEST_CASE("e2e-qwen35-fullvocab: the official template's text, the synthetic tokenizer's ids, last-position logits and greedy tokens match the reference") {
  const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/e2e-qwen35-fullvocab.json"));
  kylin::Engine& engine = e2e();
  for (const auto& c : ref.find("cases")->as_array()) {
    CAPTURE(c.find("name")->as_string());
    kylin::Session session(engine);
    const kylin::ChatOptions opts = chat_options(c.find("kwargs"));
    const std::string text = session.render_chat(*c.find("messages"), opts);
    CHECK(text == c.find("text")->as_string());
    std::vector<int> ids;
    for (const auto& i : c.find("ids")->as_array()) ids.push_back(static_cast<int>(i.as_int()));
    CHECK(session.tokenize_prompt(text) == ids);
    auto cache = engine.model().new_cache(1024);
    const std::vector<float> logits = engine.model().logits_last(ids, cache);
    // the 64 largest logits, the row's log-sum-exp and the probed rows (placeholders, padding)
    double num = 0, den = 0;
    const auto& top_ids = c.find("top64_ids")->as_array();
    const auto& top = c.find("top64_logits")->as_array();
    for (std::size_t i = 0; i < top.size(); ++i) {
      const double d = logits[static_cast<std::size_t>(top_ids[i].as_int())] - top[i].as_double();
      num += d * d, den += top[i].as_double() * top[i].as_double();
    }
    CHECK(std::sqrt(num / den) < 1e-5);
    double m = logits[0], sum = 0;
    for (float l : logits) m = std::max(m, static_cast<double>(l));
    for (float l : logits) sum += std::exp(l - m);
    CHECK(std::abs(m + std::log(sum) - c.find("logsumexp")->as_double()) < 1e-4);
    const auto& probe_ids = c.find("probe_ids")->as_array();
    const auto& probes = c.find("probe_logits")->as_array();
    for (std::size_t i = 0; i < probes.size(); ++i)
      CHECK(logits[static_cast<std::size_t>(probe_ids[i].as_int())] == doctest::Approx(probes[i].as_double()).epsilon(1e-4).scale(1.0));
    std::vector<int> expected;
    for (const auto& g : c.find("greedy")->as_array()) expected.push_back(static_cast<int>(g.as_int()));
    const kylin::Generation g = session.generate(ids, greedy(12));
    CHECK(g.tokens == expected);
    CHECK(g.content == c.find("greedy_text")->as_string());
  }
}

TEST_CASE("a second turn resumes from the snapshot before the last turn opener; a repeated prompt too; the output is a fresh session's") {
  kylin::Engine& engine = e2e();
  const kylin::ChatOptions no_think{.enable_thinking = false, .tools = {}, .extra_kwargs = {}};
  kylin::Session session(engine);
  kylin::json::Value messages = kylin::json::Array{message("system", "You are terse."), message("user", "Name three colours.")};
  const kylin::Generation first = session.chat(messages, no_think, greedy(10));
  CHECK(first.stats.cached_tokens == 0);
  const std::vector<int> first_prompt = session.tokenize_prompt(session.render_chat(messages, no_think));
  const int open = engine.turn_start_id();
  REQUIRE(open >= 0);
  const auto last_open = static_cast<std::int64_t>(std::find(first_prompt.rbegin(), first_prompt.rend(), open).base() - first_prompt.begin()) - 1;
  // the same prompt again: all but its last token come from the snapshot there
  const kylin::Generation again = session.chat(messages, no_think, greedy(10));
  CHECK(again.stats.cached_tokens == static_cast<std::int64_t>(first_prompt.size()) - 1);
  CHECK(again.tokens == first.tokens);
  messages.push_back(message("assistant", first.content));
  messages.push_back(message("user", "And two more?"));
  const kylin::Generation second = session.chat(messages, no_think, greedy(10));
  CHECK(second.stats.cached_tokens >= last_open);
  kylin::Session fresh(engine);
  const kylin::Generation expected = fresh.chat(messages, no_think, greedy(10));
  CHECK(expected.stats.cached_tokens == 0);
  CHECK(second.tokens == expected.tokens);
}

TEST_CASE("a copied prefix, a saved and loaded session and a prompt-cache entry resume where their states are, with a fresh session's output") {
  kylin::Engine& engine = e2e();
  TempDir dir;
  const kylin::ChatOptions think{};
  kylin::json::Value messages = kylin::json::Array{message("user", "Tell me about the sea, the sky and the mountains in one sentence.")};
  kylin::Session a(engine);
  const std::vector<int> prompt = a.tokenize_prompt(a.render_chat(messages, think));
  kylin::PromptCache store(engine, {.dir = dir.path() / "cache", .max_bytes = std::uint64_t{1} << 30, .min_tokens = 4, .warn = {}});
  kylin::GenerateOptions o = greedy(8);
  o.prompt_cache = &store;
  const kylin::Generation first = a.generate(prompt, o);
  store.flush();
  kylin::Session fresh(engine);
  const std::vector<int> expected = fresh.generate(prompt, greedy(8)).tokens;
  CHECK(first.tokens == expected);
  // a sibling copies a's prefix: it lands on a kept state and prefills the rest
  kylin::Session sibling(engine);
  sibling.copy_prefix(a, static_cast<std::int64_t>(prompt.size()));
  CHECK(sibling.cache().size() == static_cast<std::int64_t>(prompt.size()) - 1);  // the snapshot before the prompt's last token
  CHECK(sibling.generate(prompt, greedy(8)).tokens == expected);
  // save/load: the live state and the snapshots travel, so the same prompt resumes before its last turn
  const auto file = dir / "a.kvc";
  a.save(file);
  kylin::Session b(engine);
  CHECK(b.load(file) == a.cache().size());
  CHECK(b.cache().states().snapshots() == a.cache().states().snapshots());
  const kylin::Generation resumed = b.generate(prompt, greedy(8));
  CHECK(resumed.stats.cached_tokens == static_cast<std::int64_t>(prompt.size()) - 1);
  CHECK(resumed.tokens == expected);
  // the prompt cache: a new session loads the stored prefix (the snapshot before the prompt's last token)
  kylin::Session c(engine);
  o.store_prompt = false;
  const kylin::Generation loaded = c.generate(prompt, o);
  CHECK(loaded.stats.cached_tokens == static_cast<std::int64_t>(prompt.size()) - 1);
  CHECK(store.counters().hits == 1);
  CHECK(loaded.tokens == expected);
}

TEST_CASE("a generation cancelled mid-prefill leaves a cache the next one resumes from, with a fresh session's output") {
  kylin::test::TempModel model("tiny-qwen35", kylin::test::TestTokenizer::bytes_im_end);
  auto engine = kylin::Engine::load(model.dir(), {.threads = 2, .max_pass_rows = 512, .context_length = 512});
  std::vector<int> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back('a' + (i * 7) % 26);
  kylin::Session session(*engine);
  {
    kylin::GenerationRun run(session, prompt, greedy(8), kylin::Channel::answer, 64);
    for (int i = 0; i < 3; ++i) {  // three chunks of 64, then the client leaves
      const kylin::SequenceInput in = run.input();
      engine->model().forward(std::span(&in, 1));
      run.advance();
    }
    run.cancel();
    CHECK(run.finish().stop_reason == kylin::StopReason::cancelled);
  }
  CHECK(session.cache().size() == 192);
  const kylin::Generation next = session.generate(prompt, greedy(8));
  CHECK(next.stats.cached_tokens == 192);  // the live state of the last chunk fed
  kylin::Session fresh(*engine);
  CHECK(next.tokens == fresh.generate(prompt, greedy(8)).tokens);
}

}  // namespace hybrid_session_test
