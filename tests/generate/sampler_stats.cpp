// Draws follow the distribution they claim: chi-squared goodness of fit of 200k sampled tokens
// against the reference probabilities, for plain temperature sampling and each filter.
#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "common/random_logits.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/generate/sampler_reference.hpp"

namespace {

using kylin::SamplingParams;

constexpr int kDraws = 200000;

struct ChiSquared {
  double statistic = 0.0;
  int dof = 0;
  // Wilson-Hilferty approximation of the upper quantile at z = 4.75 (p ~ 1e-6): a correct
  // sampler with a fixed seed sits near dof; a wrong distribution over 200k draws lands far above.
  double critical() const {
    const double k = dof, z = 4.75, a = 2.0 / (9.0 * k);
    return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
  }
};

// Pearson's statistic; tokens expected fewer than 5 times are pooled into one bin.
// A draw of a token with expected probability 0 fails the test outright.
ChiSquared chi_squared(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  ChiSquared out;
  double pooled_expected = 0.0, pooled_observed = 0.0;
  int bins = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      INFO("token " << i << " has probability 0");
      REQUIRE(counts[i] == 0);
      continue;
    }
    const double expected = probs[i] * draws;
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += counts[i];
      continue;
    }
    out.statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0.0) {
    out.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  out.dof = bins - 1;
  return out;
}

// Counts of kDraws full sample() calls on the same row (penalty-free, so the row is unchanged).
std::vector<int> draw_counts(std::span<float> logits, const SamplingParams& p) {
  kylin::Sampler sampler(logits.size(), p);
  std::vector<int> counts(logits.size(), 0);
  for (int d = 0; d < kDraws; ++d) ++counts[sampler.sample(logits)];
  return counts;
}

std::vector<float> fixed_logits(std::size_t n, float scale, unsigned seed) { return kylin::test::normal_logits(n, seed, scale); }

SamplingParams params(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 20240607;
  return p;
}

void check_fit(std::vector<float> logits, const SamplingParams& p) {
  const std::vector<double> probs = kylin::detail::reference_sample_distribution(logits, {}, {}, p);
  const ChiSquared chi = chi_squared(draw_counts(logits, p), probs, kDraws);
  INFO("chi2 " << chi.statistic << " dof " << chi.dof << " critical " << chi.critical());
  REQUIRE(chi.dof >= 1);
  CHECK(chi.statistic < chi.critical());
}

}  // namespace

TEST_CASE("chi-squared: plain temperature sampling draws the softmax distribution") {
  check_fit(fixed_logits(64, 1.5f, 1), params(1.0f, 0, 1.0f, 0.0f));
  check_fit(fixed_logits(64, 1.5f, 2), params(0.6f, 0, 1.0f, 0.0f));
}

TEST_CASE("chi-squared: top-k, top-p and min-p draws follow the filtered distribution") {
  check_fit(fixed_logits(64, 1.5f, 3), params(0.8f, 10, 1.0f, 0.0f));
  check_fit(fixed_logits(512, 2.0f, 4), params(1.0f, 0, 0.8f, 0.0f));   // top-p histogram path
  check_fit(fixed_logits(512, 2.0f, 5), params(1.2f, 0, 1.0f, 0.05f));  // min-p alone
  check_fit(fixed_logits(512, 2.0f, 6), params(0.6f, 20, 0.95f, 0.0f));  // Qwen3 defaults
  check_fit(fixed_logits(512, 2.0f, 7), params(0.9f, 50, 0.9f, 0.1f));   // all three
}

TEST_CASE("chi-squared: draws over a 151,936-token row follow the reference (candidates once, many draws)") {
  // A full-vocab sample() per draw would take minutes; the candidates are checked against the
  // reference exactly elsewhere, so here the draw over them is what is tested.
  std::vector<float> logits = fixed_logits(151936, 3.0f, 8);
  for (const SamplingParams& p : {params(0.6f, 20, 0.95f, 0.0f), params(1.0f, 0, 0.9f, 0.0f)}) {
    const std::vector<double> probs = kylin::detail::reference_sample_distribution(logits, {}, {}, p);
    kylin::Sampler sampler(logits.size(), p);
    const kylin::SamplingCandidates c = sampler.candidates(logits);
    std::vector<int> counts(logits.size(), 0);
    for (int d = 0; d < kDraws; ++d) ++counts[sampler.draw(c)];
    const ChiSquared chi = chi_squared(counts, probs, kDraws);
    INFO("top_k " << p.top_k << " chi2 " << chi.statistic << " dof " << chi.dof << " critical " << chi.critical());
    REQUIRE(chi.dof >= 1);
    CHECK(chi.statistic < chi.critical());
  }
}

TEST_CASE("chi-squared: the test rejects a wrong distribution (negative control)") {
  std::vector<float> logits = fixed_logits(64, 1.5f, 1);
  const std::vector<int> counts = draw_counts(logits, params(1.0f, 0, 1.0f, 0.0f));
  // Expected probabilities for temperature 1.1 instead of the 1.0 actually sampled.
  const ChiSquared wrong_temperature =
      chi_squared(counts, kylin::detail::reference_sample_distribution(logits, {}, {}, params(1.1f, 0, 1.0f, 0.0f)), kDraws);
  INFO("chi2 " << wrong_temperature.statistic << " critical " << wrong_temperature.critical());
  CHECK(wrong_temperature.statistic > 5.0 * wrong_temperature.critical());
  // The right probabilities with the likeliest token's mass swapped with that of the token
  // closest to half of it.
  std::vector<double> swapped = kylin::detail::reference_sample_distribution(logits, {}, {}, params(1.0f, 0, 1.0f, 0.0f));
  const std::size_t a = static_cast<std::size_t>(kylin::detail::argmax_lowest_id(logits));
  std::size_t b = a == 0 ? 1 : 0;
  for (std::size_t i = 0; i < swapped.size(); ++i)
    if (i != a && std::abs(swapped[i] - swapped[a] / 2) < std::abs(swapped[b] - swapped[a] / 2)) b = i;
  std::swap(swapped[a], swapped[b]);
  const ChiSquared wrong_order = chi_squared(counts, swapped, kDraws);
  CHECK(wrong_order.statistic > 5.0 * wrong_order.critical());
}
