// Sampled speculative decoding keeps the target's distribution: the first three tokens of many
// seeded generations on a tiny model, drafted by the target itself, by another random model and by
// prompt lookup, and on a Qwen3.5 checkpoint by its MTP head, fit the exact joint distribution (computed from the target's logits with the
// reference sampler, every sampler option on) by a chi-squared test; the failing controls show
// the same test rejects what a wrong acceptance rule and a wrong temperature would give.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/sanitizer.hpp"
#include "common/temp_model.hpp"
#include "kylin/generate/sampler_reference.hpp"
#include "kylin/generate/session.hpp"

namespace speculative_stats {

using kylin::test::TempModel;
using kylin::test::TestTokenizer;

// Pearson's statistic over the bins of `expected` (probabilities); bins expected fewer than 5
// times are pooled. An observation in a bin of probability 0 makes it infinite.
struct ChiSquared {
  double statistic = 0.0;
  int dof = 0;
  // Wilson-Hilferty upper quantile at z = 4.75 (p ~ 1e-6), as tests/generate/sampler_stats.cpp.
  double critical() const {
    const double k = dof, z = 4.75, a = 2.0 / (9.0 * k);
    return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
  }
};

using Outcome = std::vector<int>;  // the first tokens of one generation

ChiSquared chi_squared(const std::map<Outcome, int>& counts, const std::map<Outcome, double>& expected, int draws) {
  ChiSquared out;
  double pooled_e = 0.0, pooled_o = 0.0;
  int bins = 0;
  for (const auto& [outcome, n] : counts)
    if (!expected.contains(outcome)) out.statistic = INFINITY;
  for (const auto& [outcome, p] : expected) {
    const double e = p * draws;
    const auto it = counts.find(outcome);
    const double o = it == counts.end() ? 0.0 : it->second;
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    out.statistic += (o - e) * (o - e) / e;
    ++bins;
  }
  if (pooled_e > 0.0) {
    out.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++bins;
  }
  out.dof = bins - 1;
  return out;
}

struct Setup {
  TempModel target_dir{"tiny-qwen3-yarn", TestTokenizer::bytes_im_end};
  TempModel other_dir{"tiny-qwen3-moe", TestTokenizer::bytes_im_end};
  std::unique_ptr<kylin::Engine> target = kylin::Engine::load(target_dir.dir(), {.threads = 1, .max_pass_rows = 512, .context_length = 512});
  std::unique_ptr<kylin::Engine> other = kylin::Engine::load(other_dir.dir(), {.threads = 1, .max_pass_rows = 512, .context_length = 512});
  // every byte once, so prompt lookup has a continuation for whatever comes first; then some text
  const std::vector<int> prompt = [] {
    std::vector<int> p;
    for (int b = 0; b < 256; ++b) p.push_back(b);
    for (char c : std::string("the cat sat")) p.push_back(c);
    return p;
  }();
};

// Every option of the sampler at once.
kylin::SamplingOverrides options(float temperature, std::uint64_t seed) {
  kylin::SamplingOverrides s;
  s.temperature = temperature;
  s.top_k = 5;
  s.top_p = 0.97f;
  s.min_p = 0.05f;
  s.repetition_penalty = 1.2f;
  s.presence_penalty = 0.2f;
  s.frequency_penalty = 0.3f;
  s.seed = seed;
  return s;
}

constexpr int kTokens = 3;  // the first from the prefill, then two drafted positions of one pass

// P(t1, t2, t3) exactly: the reference sampler's distribution over the target's logits of each
// context. `greedy_draft`: instead, t2 and t3 are the argmax a draft of the target proposes
// (what an acceptance rule that always kept the draft would emit).
std::map<Outcome, double> exact(kylin::Engine& e, const std::vector<int>& prompt, float temperature, bool greedy_draft = false) {
  kylin::Model& model = e.model();
  const kylin::SamplingParams params = kylin::apply_overrides(e.default_sampling(), options(temperature, 0));
  kylin::SamplingParams argmax = params;
  argmax.greedy = true;
  auto cache = model.new_cache(512);
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.forward(prompt, cache, logits);
  std::map<Outcome, double> out;
  // depth-first over the support, the cache truncated back after each branch (a hybrid's cache, which
  // cannot be, is copied at the branch instead)
  auto walk = [&](auto&& self, Outcome& so_far, double p) -> void {
    if (so_far.size() == kTokens) {
      out[so_far] += p;
      return;
    }
    const bool draft = greedy_draft && !so_far.empty();
    const std::vector<double> probs =
        kylin::detail::reference_sample_distribution(logits, prompt, so_far, draft ? argmax : params, e.sampleable_ids());
    const std::vector<float> row = logits;
    for (std::size_t id = 0; id < probs.size(); ++id) {
      if (probs[id] == 0.0) continue;
      so_far.push_back(static_cast<int>(id));
      const auto n = cache.size();
      std::optional<kylin::KVCache> kept;
      if (cache.has_states()) kept.emplace(model.new_cache(512)), kept->copy_prefix(cache, n);
      model.forward(std::span<const int>(&so_far.back(), 1), cache, logits);
      self(self, so_far, p * probs[id]);
      if (kept) cache.copy_prefix(*kept, n);
      else cache.truncate(n);
      logits = row;
      so_far.pop_back();
    }
  };
  Outcome start;
  walk(walk, start, 1.0);
  return out;
}

struct Sampled {
  std::map<Outcome, int> counts;
  std::int64_t drafted = 0, accepted = 0;
};

Sampled sample(kylin::Engine& target, const std::vector<int>& prompt, const kylin::SpeculativeOptions& spec, float temperature, int runs) {
  kylin::Session session(target);
  Sampled s;
  for (int r = 0; r < runs; ++r) {
    kylin::GenerateOptions o;
    o.sampling = options(temperature, 1000 + static_cast<std::uint64_t>(r));
    o.max_new_tokens = kTokens + 1;  // so the first pass after the prefill verifies two drafts
    o.ignore_eos = true;
    o.speculative = spec;
    const kylin::Generation g = session.generate(prompt, o);
    REQUIRE(g.tokens.size() == kTokens + 1);
    ++s.counts[Outcome(g.tokens.begin(), g.tokens.begin() + kTokens)];
    s.drafted += g.stats.draft_tokens;
    s.accepted += g.stats.draft_accepted;
  }
  return s;
}

TEST_CASE("chi-squared: sampled speculative decoding draws the target's joint distribution of its first tokens, whatever drafts") {
  Setup setup;
  const float temperature = 0.25f;  // this random model's logits are close together: sharpen them
  const auto expected = exact(*setup.target, setup.prompt, temperature);
  const int runs = kylin::test::repetitions(20000, 2000);
  const std::pair<const char*, kylin::SpeculativeOptions> modes[] = {
      {"no speculation", {}},
      {"the target drafts", {.draft = setup.target.get(), .max_draft = 2, .p_min = 0.0f, .lookup = 0}},
      {"another model drafts", {.draft = setup.other.get(), .max_draft = 2, .p_min = 0.0f, .lookup = 0}},
      {"prompt lookup", {.draft = nullptr, .max_draft = 2, .p_min = 0.0f, .lookup = 3}}};
  for (const auto& mode : modes) {
    const std::string name = mode.first;  // a named copy: clang 14 cannot capture a structured binding (CAPTURE)
    const kylin::SpeculativeOptions& spec = mode.second;
    CAPTURE(name);
    const Sampled s = sample(*setup.target, setup.prompt, spec, temperature, runs);
    const ChiSquared chi = chi_squared(s.counts, expected, runs);
    INFO("chi2 " << chi.statistic << " dof " << chi.dof << " critical " << chi.critical() << "; drafted " << s.drafted << ", accepted "
                 << s.accepted);
    REQUIRE(chi.dof >= 10);
    CHECK(chi.statistic < chi.critical());
    if (spec.enabled()) CHECK(s.drafted > runs);  // the speculative path ran: two drafts a run, or more
    if (spec.draft == setup.target.get()) {  // and both verdicts came often (the other drafts are rarely accepted)
      CHECK(s.accepted > s.drafted / 10);
      CHECK(s.accepted < s.drafted * 9 / 10);
    }
  }
}

TEST_CASE("chi-squared: drafted by a Qwen3.5 checkpoint's MTP head, sampled output draws the target's joint distribution") {
  TempModel dir("tiny-qwen35", TestTokenizer::bytes_padded);
  auto e = kylin::Engine::load(dir.dir(), {.threads = 1, .max_pass_rows = 512, .context_length = 512, .mtp = kylin::MtpHead::loaded});
  const std::vector<int> prompt = e->tokenizer().encode("the cat sat on the cat sat on the");
  const float temperature = 1.0f;  // top-k 5 of these random logits: ~100 outcomes of the first three tokens
  const auto expected = exact(*e, prompt, temperature);
  const int runs = kylin::test::repetitions(8000, 1000);
  {
    const Sampled s = sample(*e, prompt, {.draft = nullptr, .mtp = true, .max_draft = 2, .p_min = 0.0f, .lookup = 0}, temperature, runs);
    const ChiSquared chi = chi_squared(s.counts, expected, runs);
    INFO("chi2 " << chi.statistic << " dof " << chi.dof << " critical " << chi.critical() << "; drafted " << s.drafted << ", accepted "
                 << s.accepted);
    REQUIRE(chi.dof >= 10);
    CHECK(chi.statistic < chi.critical());
    // two drafts a run, or more; the random head's drafts fall outside the target's top 5 (all rejected: each
    // token the draw from p without its draft; the accepting path is the tests' above)
    CHECK(s.drafted >= 2 * runs);
    CHECK(s.accepted < s.drafted);
  }
}

TEST_CASE("chi-squared controls: the same counts fail against a wrong temperature; an always-accept rule's outcomes fail against the target's") {
  Setup setup;
  const float temperature = 0.25f;
  const int runs = kylin::test::repetitions(20000, 2000);
  const Sampled s =
      sample(*setup.target, setup.prompt, {.draft = setup.target.get(), .max_draft = 2, .p_min = 0.0f, .lookup = 0}, temperature, runs);
  const ChiSquared wrong_temperature = chi_squared(s.counts, exact(*setup.target, setup.prompt, 0.5f), runs);
  INFO("wrong temperature: chi2 " << wrong_temperature.statistic << " critical " << wrong_temperature.critical());
  CHECK(wrong_temperature.statistic > 1.5 * wrong_temperature.critical());
  // Keeping every draft: t1 as sampled, then the draft's argmax. Its outcomes are drawn by
  // picking t1 from this run's counts (the target's own first token), the rest by the argmax.
  const auto always = exact(*setup.target, setup.prompt, temperature, true);
  std::map<Outcome, int> always_counts;
  for (const auto& [outcome, n] : s.counts)
    for (const auto& [o, p] : always)
      if (o[0] == outcome[0] && p > 0.0) always_counts[o] += n;
  const ChiSquared accept_all = chi_squared(always_counts, exact(*setup.target, setup.prompt, temperature), runs);
  INFO("always accept: chi2 " << accept_all.statistic << " critical " << accept_all.critical());
  CHECK(accept_all.statistic > 1.5 * accept_all.critical());
}

}  // namespace speculative_stats
