// The scheduler's speculative decoding (continuous batching): the drafts of every running slot are
// rows of one batched verification pass per step and the draft model's forwards are batched too;
// each job's answer is what Session gives it alone (greedy: what it gives without speculation);
// a job that opts out decodes plainly beside the others.
#include <doctest/doctest.h>

#include <future>
#include <latch>
#include <string>
#include <vector>

#include "common/temp_model.hpp"
#include "kylin/server/scheduler.hpp"

namespace speculative_scheduler_test {

const std::string model_dir = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";  // with its tokenizer

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(model_dir, {.threads = 2, .max_pass_rows = 64, .context_length = 512});
  return *e;
}

struct Done {
  std::promise<std::pair<kylin::Generation, std::optional<kylin::server::Failure>>> promise;
};

std::shared_ptr<kylin::server::Job> job(std::vector<int> prompt, kylin::GenerateOptions o, bool speculative,
                                        std::future<std::pair<kylin::Generation, std::optional<kylin::server::Failure>>>& result) {
  auto j = std::make_shared<kylin::server::Job>();
  j->prompt = std::move(prompt);
  j->options = std::move(o);
  j->speculative = speculative;
  auto done = std::make_shared<Done>();
  result = done->promise.get_future();
  j->on_done = [done](kylin::Generation&& g, std::optional<kylin::server::Failure> f) { done->promise.set_value({std::move(g), std::move(f)}); };
  return j;
}

kylin::GenerateOptions options(bool greedy, std::int64_t n, std::uint64_t seed) {
  kylin::GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  if (greedy) o.sampling.greedy = true;
  else o.sampling.temperature = 0.9f, o.sampling.top_k = 20, o.sampling.seed = seed;
  return o;
}

TEST_CASE("scheduler: every slot's drafts verified in shared passes; answers as alone (greedy: as without speculation); opting out decodes plainly") {
  kylin::Engine& e = engine();
  const kylin::SpeculativeOptions spec{.draft = &e, .max_draft = 4, .p_min = 0.0f, .lookup = 0};  // the target drafts for itself
  struct Case {
    std::string prompt;
    bool greedy, speculative;
    std::int64_t n;
  };
  const std::vector<Case> cases = {{"Once upon a time", true, true, 40},
                                   {"The list: 1, 2, 3", true, true, 40},
                                   {"Hello there, friend", true, true, 40},
                                   {"A B C", true, false, 6},
                                   {"Sampled, seeded", false, true, 10}};
  // alone, one Session each: without speculation (the greedy reference), and with it (the seeded reference)
  std::vector<std::vector<int>> prompts;
  std::vector<kylin::Generation> plain, alone;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    prompts.push_back(e.tokenizer().encode(c.prompt));
    kylin::Session s(e, 512), t(e, 512);
    plain.push_back(s.generate(prompts[i], options(c.greedy, c.n, 7 + i)));
    kylin::GenerateOptions o = options(c.greedy, c.n, 7 + i);
    if (c.speculative) o.speculative = spec;
    alone.push_back(t.generate(prompts[i], o));
  }
  kylin::server::Scheduler scheduler(e, {.slots = 5, .max_queued = 16, .context_length = 512, .prompt_cache = nullptr, .prefill_chunk = 8,
                                         .step_tokens = 512, .speculative = spec});
  // the inference thread waits inside a task until every job is queued, so they all start together
  std::latch queued(1);
  auto hold = std::make_shared<kylin::server::Job>();
  hold->engine_task = [&] { queued.wait(); };
  hold->on_done = [](kylin::Generation&&, std::optional<kylin::server::Failure>) {};
  REQUIRE(scheduler.submit(hold));
  std::vector<std::future<std::pair<kylin::Generation, std::optional<kylin::server::Failure>>>> results(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i)
    REQUIRE(scheduler.submit(job(prompts[i], options(cases[i].greedy, cases[i].n, 7 + i), cases[i].speculative, results[i])));
  queued.count_down();
  std::int64_t most_passes = 0, all_passes = 0;
  std::size_t longest_prompt = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const Case& c = cases[i];
    auto [g, failure] = results[i].get();
    REQUIRE_FALSE(failure.has_value());
    CHECK(g.tokens == alone[i].tokens);
    if (c.greedy) CHECK(g.tokens == plain[i].tokens);
    if (c.speculative) {
      CHECK(g.stats.draft_tokens > 0);
      if (c.greedy) CHECK(g.stats.decode_passes < c.n - 1);  // sampled, its drafts may all be rejected
    } else {
      CHECK(g.stats.draft_tokens == 0);
      CHECK(g.stats.decode_passes == c.n - 1);
    }
    if (c.greedy && c.speculative) CHECK(g.stats.draft_accepted == g.stats.draft_tokens);
    most_passes = std::max(most_passes, g.stats.decode_passes);
    all_passes += g.stats.decode_passes;
    longest_prompt = std::max(longest_prompt, prompts[i].size());
  }
  // Shared steps: the whole run took as many model passes as its longest job (after its prompt's
  // chunks of 8), far fewer than the jobs' passes one after another.
  const auto prefill_steps = static_cast<std::int64_t>((longest_prompt + 7) / 8);
  CHECK(static_cast<std::int64_t>(scheduler.passes()) <= most_passes + prefill_steps + 1);
  CHECK(most_passes + prefill_steps + 1 < all_passes);
  // and the draft model's rounds were shared as well: at most k a step (the first also catches up)
  CHECK(static_cast<std::int64_t>(scheduler.draft_passes()) <= static_cast<std::int64_t>(scheduler.passes()) * spec.max_draft);
}

TEST_CASE("scheduler: a draft of another tokenizer is refused when the scheduler is made, naming it") {
  kylin::Engine& e = engine();
  const kylin::test::TempModel bytes("small-qwen3", kylin::test::TestTokenizer::bytes);  // 256 byte tokens
  auto other = kylin::Engine::load(bytes.dir(), {.threads = 1});
  try {
    kylin::server::Scheduler scheduler(e, {.slots = 1, .max_queued = 1, .context_length = 64, .prompt_cache = nullptr, .prefill_chunk = 8,
                                           .step_tokens = 512, .speculative = {.draft = other.get(), .max_draft = 4, .p_min = 0, .lookup = 0}});
    FAIL("accepted");
  } catch (const kylin::Error& err) {
    CHECK(std::string(err.what()).find(bytes.dir().string()) != std::string::npos);
    CHECK(std::string(err.what()).find("256 token ids") != std::string::npos);
  }
}

}  // namespace speculative_scheduler_test
