// The reference pipeline gives hand-computed distributions, and the fast Sampler keeps exactly
// the reference's tokens with the reference's probabilities over many random rows and params.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "common/sanitizer.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/generate/sampler_reference.hpp"

namespace sampler_reference {

using kylin::SamplingParams;

std::vector<double> reference(std::span<const float> logits, const SamplingParams& p,
                              std::span<const int> prompt = {}, std::span<const int> generated = {}) {
  return kylin::detail::reference_sample_distribution(logits, prompt, generated, p);
}

// The fast path's candidates as a dense probability vector (logits are copied: it penalises in place).
std::vector<double> fast(kylin::Sampler& sampler, std::vector<float> logits, std::span<const int> prompt = {},
                         std::span<const int> generated = {}) {
  const kylin::SamplingCandidates c = sampler.candidates(logits, prompt, generated);
  std::vector<double> probs(logits.size(), 0.0);
  for (std::size_t j = 0; j < c.ids.size(); ++j) {
    REQUIRE(c.weights[j] > 0.0f);
    REQUIRE(probs[c.ids[j]] == 0.0);  // no token listed twice
    probs[c.ids[j]] = c.weights[j] / c.total;
  }
  return probs;
}

void check_probs(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE((got[i] > 0.0) == (want[i] > 0.0));  // the same kept set
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-12 + 1e-9 * want[i]);
  }
}

constexpr float kInf = std::numeric_limits<float>::infinity();


TEST_CASE("exp_nonpositive: within 2 ulp of exp over [-87, 0]; exact 1 at 0; weights 0 past the floor") {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float s = -87.0f * static_cast<float>(i) / 2000000.0f;
    const double want = std::exp(static_cast<double>(s));
    worst = std::max(worst, std::abs(kylin::detail::exp_nonpositive(s) - want) / want);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 2.0 * 0x1.0p-23);  // 2 ulp at the top of a binade
  CHECK(kylin::detail::exp_nonpositive(0.0f) == 1.0f);
  CHECK(kylin::detail::weight_of_scaled(-0.0f) == 1.0f);
  CHECK(kylin::detail::weight_of_scaled(-87.5f) == 0.0f);
  CHECK(kylin::detail::weight_of_scaled(-kInf) == 0.0f);
  CHECK(kylin::detail::weight_of_scaled(std::numeric_limits<float>::quiet_NaN()) == 0.0f);
}

TEST_CASE("reference: temperature, top-k, top-p and min-p match hand-computed distributions") {
  // Weights exp(logit) = 4, 2, 1, 1: probabilities 1/2, 1/4, 1/8, 1/8.
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  auto probs = reference(logits, p);
  CHECK(probs[0] == doctest::Approx(0.5));
  CHECK(probs[1] == doctest::Approx(0.25));
  CHECK(probs[3] == doctest::Approx(0.125));
  p.top_k = 3;  // the tie 2/3 goes to the lower id: 4, 2, 1 of 7
  probs = reference(logits, p);
  CHECK(probs[0] == doctest::Approx(4.0 / 7));
  CHECK(probs[2] == doctest::Approx(1.0 / 7));
  CHECK(probs[3] == 0.0);
  p = {};
  p.top_p = 0.6f;  // mass before token 1 is 0.5 < 0.6: keep it; before token 2 is 0.75: drop
  probs = reference(logits, p);
  CHECK(probs[0] == doctest::Approx(2.0 / 3));
  CHECK(probs[1] == doctest::Approx(1.0 / 3));
  CHECK(probs[2] == 0.0);
  p.top_p = 0.4f;
  CHECK(reference(logits, p)[0] == 1.0);
  p = {};
  p.min_p = 0.3f;  // p / p_max = 1, 0.5, 0.25, 0.25
  probs = reference(logits, p);
  CHECK(probs[1] == doctest::Approx(1.0 / 3));
  CHECK(probs[2] == 0.0);
  p = {};
  p.temperature = 0.5f;  // weights squared: 16, 4, 1, 1
  probs = reference(logits, p);
  CHECK(probs[0] == doctest::Approx(16.0 / 22));
  CHECK(probs[2] == doctest::Approx(1.0 / 22));
}

TEST_CASE("reference: filters apply in order temperature -> top-k -> top-p -> min-p") {
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};  // weights 4, 2, 1, 1
  SamplingParams p;
  // top-p renormalises over the top-k survivors: masses 2/3, 1/3, so top_p 0.6 stops after
  // token 0. Over the whole row token 0 has only 1/2 and token 1 would stay.
  p.top_k = 2;
  p.top_p = 0.6f;
  CHECK(reference(logits, p)[0] == 1.0);
  // min-p after top-p: top_p 0.6 keeps 4, 2; min_p 0.3 keeps both (2/4 >= 0.3). Were min-p
  // first it would leave 4, 2 and top-p would then stop after token 0 (4/6 >= 0.6).
  p = {};
  p.top_p = 0.6f;
  p.min_p = 0.3f;
  CHECK(reference(logits, p)[1] == doctest::Approx(1.0 / 3));
  // Temperature before top-p: at T = 0.5 the masses are 16, 4, 1, 1 of 22, so top_p 0.7 keeps
  // token 0 alone (16/22 > 0.7), while at T = 1 it keeps two (before token 1: 0.5 < 0.7).
  p = {};
  p.top_p = 0.7f;
  CHECK(reference(logits, p)[1] == doctest::Approx(1.0 / 3));
  p.temperature = 0.5f;
  CHECK(reference(logits, p)[0] == 1.0);
}

TEST_CASE("reference: penalties follow HF repetition and OpenAI presence/frequency semantics") {
  const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.25f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int> prompt = {0, 1, 0};
  const std::vector<int> generated = {3, 3, 1};
  const std::vector<float> got = kylin::detail::reference_penalize(logits, prompt, generated, p);
  CHECK(got[0] == 1.0f);                          // in prompt, positive: halved
  CHECK(got[1] == -4.0f - 0.5f - 0.25f);          // negative: doubled, then one generation
  CHECK(got[2] == 1.0f);                          // absent
  CHECK(got[3] == 0.25f - 0.5f - 2 * 0.25f);      // generated twice
  CHECK(got[4] == 0.25f);
}

TEST_CASE("Sampler: keeps the reference's tokens with the reference's probabilities (random rows and params)") {
  std::mt19937 gen(1234);  // test data only; the sampler's own RNG is specified
  constexpr std::size_t kCapacity = 4096;
  kylin::Sampler sampler(kCapacity, SamplingParams{});
  const float temperatures[] = {0.25f, 0.7f, 1.0f, 1.8f};
  const int top_ks[] = {0, 1, 3, 40, 5000};
  const float top_ps[] = {1.0f, 0.95f, 0.6f, 0.05f};
  const float min_ps[] = {0.0f, 0.02f, 0.4f};
  int cases = 0;
  const int trials = kylin::test::repetitions(24, 8);  // 8 still cover every data pattern below
  for (int trial = 0; trial < trials; ++trial) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(2, kCapacity)(gen);
    const float scale = trial % 3 == 0 ? 1.0f : trial % 3 == 1 ? 4.0f : 15.0f;
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> logits(n);
    for (float& l : logits) l = normal(gen);
    if (trial % 4 == 1)  // ties: exercise the lowest-id rule at filter boundaries
      for (float& l : logits) l = std::round(l * 2.0f) / 2.0f;
    if (trial % 5 == 2)
      for (std::size_t i = 0; i < n; i += 3) logits[i] = -kInf;
    std::vector<int> prompt(30), generated(20);
    for (int& t : prompt) t = std::uniform_int_distribution<int>(0, static_cast<int>(n) - 1)(gen);
    for (int& t : generated) t = prompt[std::uniform_int_distribution<std::size_t>(0, 25)(gen)];
    for (float t : temperatures)
      for (int k : top_ks)
        for (float top_p : top_ps)
          for (float min_p : min_ps) {
            SamplingParams p;
            p.temperature = t;
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            if (cases % 3 == 1) {
              p.repetition_penalty = 1.3f;
              p.presence_penalty = 0.4f;
              p.frequency_penalty = 0.2f;
            }
            sampler.set_params(p);
            INFO("trial " << trial << " n " << n << " T " << t << " top_k " << k << " top_p " << top_p
                          << " min_p " << min_p << " penalties " << p.has_penalties());
            check_probs(fast(sampler, logits, prompt, generated), reference(logits, p, prompt, generated));
            ++cases;
          }
  }
  CHECK(cases == trials * 4 * 5 * 4 * 3);
}

TEST_CASE("Sampler: matches the reference over a full 151,936-token row with Qwen3-like params") {
  constexpr std::size_t kVocab = 151936;
  std::mt19937 gen(99);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(gen);
  kylin::Sampler sampler(kVocab, SamplingParams{});
  struct Case {
    float t;
    int k;
    float top_p, min_p;
  };
  for (const Case c : {Case{0.6f, 20, 0.95f, 0.0f}, Case{1.0f, 0, 0.9f, 0.0f}, Case{0.7f, 0, 0.8f, 0.05f},
                       Case{1.0f, 0, 1.0f, 0.1f}, Case{1.0f, 0, 1.0f, 0.0f}, Case{0.01f, 0, 0.5f, 0.0f}}) {
    SamplingParams p;
    p.temperature = c.t;
    p.top_k = c.k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    sampler.set_params(p);
    INFO("T " << c.t << " top_k " << c.k << " top_p " << c.top_p << " min_p " << c.min_p);
    check_probs(fast(sampler, logits), reference(logits, p));
  }
}

}  // namespace sampler_reference
