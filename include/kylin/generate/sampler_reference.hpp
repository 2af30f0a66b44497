// The sampler's per-token math (penalty, temperature weight, token order) and the scalar
// reference pipeline: a full sort and full probability vector, the oracle for Sampler's fast path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "kylin/generate/sampler_params.hpp"
#include "kylin/generate/sampler_vocab.hpp"
#include "kylin/kernels/draw.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin::detail {

// The token weights (kernels/draw.hpp), shared with the backends' draws.
using kernels::exp_nonpositive;
using kernels::kMinScaledLogit;
using kernels::scaled_logit;
using kernels::scaled_weight;
using kernels::weight_of_scaled;

// One token's penalised logit. in_context: the token occurs in prompt or output (HF
// repetition penalty); generated_count: its occurrences in the output (OpenAI penalties).
inline float penalized_logit(float logit, bool in_context, std::uint32_t generated_count,
                             const SamplingParams& p) {
  if (in_context) logit = logit > 0.0f ? logit / p.repetition_penalty : logit * p.repetition_penalty;
  if (generated_count > 0)
    logit -= p.presence_penalty + p.frequency_penalty * static_cast<float>(generated_count);
  return logit;
}

// The one token order every filter uses: higher logit first, lower id on ties. NaN sorts last.
using kernels::ranks_before;

// Argmax under ranks_before: the lowest id among the highest logits; 0 when all are NaN.
inline int argmax_lowest_id(std::span<const float> logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i)
    if (ranks_before(logits[i], i, logits[best], best)) best = i;
  return best;
}

// Reference penalties: dense counts over the vocab, the obvious way; ids outside the row are
// no candidates and are ignored.
inline std::vector<float> reference_penalize(std::span<const float> logits, std::span<const int> prompt,
                                             std::span<const int> generated, const SamplingParams& p) {
  std::vector<float> out(logits.begin(), logits.end());
  if (!p.has_penalties()) return out;
  std::vector<bool> in_context(logits.size(), false);
  std::vector<std::uint32_t> count(logits.size(), 0);
  auto in_row = [&](int t) { return t >= 0 && static_cast<std::size_t>(t) < out.size(); };
  for (int t : prompt)
    if (in_row(t)) in_context[t] = true;
  for (int t : generated) {
    if (!in_row(t)) continue;
    in_context[t] = true;
    ++count[t];
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (in_context[i]) out[i] = penalized_logit(out[i], in_context[i], count[i], p);
  return out;
}

// The final probability of every token: penalties -> temperature -> top-k -> top-p -> min-p ->
// softmax, each filter over the full sorted vocab, where ids not in `sampleable` have logit
// -inf. Greedy gives a one-hot vector; so does a +inf logit (at the lowest such id) and a row
// with no logit above -inf (at sampleable.first()).
inline std::vector<double> reference_sample_distribution(std::span<const float> raw_logits,
                                                         std::span<const int> prompt,
                                                         std::span<const int> generated,
                                                         const SamplingParams& p,
                                                         const SampleableIds& sampleable = {}) {
  std::vector<float> logits = reference_penalize(raw_logits, prompt, generated, p);
  const std::size_t n = logits.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!sampleable.contains(static_cast<int>(i))) logits[i] = -std::numeric_limits<float>::infinity();
  std::vector<double> probs(n, 0.0);
  int top = argmax_lowest_id(logits);
  if (!(logits[top] > -std::numeric_limits<float>::infinity())) top = sampleable.first();
  if (p.is_greedy() || !std::isfinite(logits[top])) {
    probs[top] = 1.0;
    return probs;
  }
  std::vector<int> order(n);  // [n] token ids, best first
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return ranks_before(logits[a], a, logits[b], b); });
  const float inv_t = 1.0f / p.temperature;
  std::vector<float> w(n);  // [n] weight of order[r]
  for (std::size_t r = 0; r < n; ++r) w[r] = scaled_weight(logits[order[r]], logits[top], inv_t);

  std::size_t kept = p.top_k > 0 ? std::min(static_cast<std::size_t>(p.top_k), n) : n;  // a prefix
  if (p.top_p < 1.0f) {  // keep r while the mass ranked before it is below top_p
    const double target = static_cast<double>(p.top_p) * std::accumulate(w.begin(), w.begin() + kept, 0.0);
    double before = 0.0;
    std::size_t r = 0;
    while (r < kept && before < target) before += w[r++];
    kept = r;
  }
  if (p.min_p > 0.0f)  // the top token weighs 1, so p >= min_p * p_max reads w >= min_p
    while (kept > 1 && w[kept - 1] < p.min_p) --kept;
  const double total = std::accumulate(w.begin(), w.begin() + kept, 0.0);
  for (std::size_t r = 0; r < kept; ++r) probs[order[r]] = w[r] / total;
  return probs;
}

}  // namespace kylin::detail
