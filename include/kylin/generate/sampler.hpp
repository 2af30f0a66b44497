// kylin::Sampler: picks the next token from a logit row. Same filters and order as HF and
// llama.cpp (penalties -> temperature -> top-k -> top-p -> min-p -> softmax -> draw), but no full
// sort and no allocation per token; detail::reference_sample_distribution is its oracle.
// Total: every call returns a sampleable id of the row, whatever the logits (+-inf, NaN) and
// whatever finite parameters passed validation.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "kylin/generate/sampler_params.hpp"
#include "kylin/generate/sampler_reference.hpp"
#include "kylin/generate/sampler_rng.hpp"
#include "kylin/generate/sampler_vocab.hpp"
#include "kylin/kernels/draw.hpp"
#include "kylin/kernels/nucleus.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin {

// The tokens a draw chooses from; probability of ids[j] = weights[j] / total.
struct SamplingCandidates {
  std::span<const int> ids;        // [n_kept] in the order the draw walks them
  std::span<const float> weights;  // [n_kept] unnormalised, all > 0
  double total = 0.0;              // sum of weights
};

class Sampler {
 public:
  // vocab_size: the longest logit row this sampler will see; sampleable: the ids it may return
  // (rows are cut at sampleable.end(), holes weigh 0). Throws on invalid params.
  Sampler(std::size_t vocab_size, const SamplingParams& params, SampleableIds sampleable = {})
      : vocab_size_(vocab_size), sampleable_(std::move(sampleable)) {
    generated_count_.assign(vocab_size, 0);
    in_context_.assign(vocab_size, 0);
    touched_.reserve(vocab_size);
    ids_.reserve(vocab_size);
    kept_weights_.reserve(vocab_size);
    nucleus_.weights.reserve(vocab_size);
    nucleus_.bucket.reserve(vocab_size);
    nucleus_.boundary.reserve(vocab_size);
    set_params(params);
  }

  // Validates, sizes the top-k heap and reseeds (params.seed, or std::random_device).
  void set_params(const SamplingParams& params) {
    params.validate();
    params_ = params;
    ranked_.reserve(std::min(static_cast<std::size_t>(params.top_k), vocab_size_));
    reseed(params.seed ? *params.seed : (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  }
  void reseed(std::uint64_t seed) { rng_ = Xoshiro256StarStar(seed); }
  // The next number in [0, 1) of the stream draw() uses: speculative decoding's acceptance test
  // (generate/speculative.hpp) takes its randomness from the same seeded stream.
  double uniform() { return rng_.uniform(); }
  const SamplingParams& params() const noexcept { return params_; }
  std::size_t vocab_size() const noexcept { return vocab_size_; }
  const SampleableIds& sampleable() const noexcept { return sampleable_; }

  // logits: [n <= vocab_size], must reach past sampleable().first(); penalised in place, holes
  // set to -inf. prompt and generated: the context's token ids (those outside the cut row are
  // ignored); the repetition penalty covers both, presence/frequency penalties only `generated`.
  // +inf beats every finite logit (the lowest such id is returned); NaN and -inf weigh 0; a row
  // where no sampleable id has a logit above -inf gives sampleable().first().
  int sample(std::span<float> logits, std::span<const int> prompt = {}, std::span<const int> generated = {}) {
    return draw(candidates(logits, prompt, generated));
  }

  // Everything but the draw; the result views this sampler's scratch until the next call.
  SamplingCandidates candidates(std::span<float> row, std::span<const int> prompt = {},
                                std::span<const int> generated = {}) {
    assert(row.size() <= vocab_size_ && static_cast<std::size_t>(sampleable_.first()) < row.size());
    const std::span<float> logits = row.first(std::min(row.size(), sampleable_.end()));
    ids_.clear();
    kept_weights_.clear();
    fallback_ = fallback(logits.size());
    if (logits.empty()) {  // out of contract (an empty row holds no token); reads nothing
      keep_only(0);
      return {ids_, kept_weights_, 1.0};
    }
    if (params_.has_penalties()) apply_penalties(logits, prompt, generated);
    for (int h : sampleable_.holes()) {
      if (static_cast<std::size_t>(h) >= logits.size()) break;
      logits[h] = -std::numeric_limits<float>::infinity();
    }
    const std::size_t n = logits.size();
    if (params_.is_greedy())
      keep_only(argmax(logits));
    else if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n)
      select_top_k(logits);
    else
      select_full(logits);
    return {ids_, kept_weights_, block_sum(kept_weights_, 0, kept_weights_.size())};
  }

  // Whether candidates() of a row of n logits looks at nothing but the row's top_k best (cut at
  // sampleable().end(), as kernels::top_k ranks them): top-k in force, no penalty, no hole.
  // A backend can then pick those where the logits are (ForwardOutputs::top), and
  // candidates_from_top gives what candidates() of the whole row would.
  bool needs_only_top_k(std::size_t n) const {
    const std::size_t cut = std::min(n, sampleable_.end());
    return !params_.is_greedy() && !params_.has_penalties() && sampleable_.holes().empty() && params_.top_k > 0 &&
           static_cast<std::size_t>(params_.top_k) < cut;
  }
  // candidates() of a row of n logits from its top_k best alone (only where needs_only_top_k(n)):
  // top = kernels::top_k of the row cut at sampleable().end(), empty slots last.
  SamplingCandidates candidates_from_top(std::span<const kernels::RankedLogit> top, std::size_t n) {
    assert(needs_only_top_k(n) && top.size() == static_cast<std::size_t>(params_.top_k));
    ids_.clear();
    kept_weights_.clear();
    fallback_ = fallback(n);
    std::size_t filled = 0;
    while (filled < top.size() && top[filled].id >= 0) ++filled;
    choose_ranked(top.first(filled));
    return {ids_, kept_weights_, block_sum(kept_weights_, 0, kept_weights_.size())};
  }

  // Inverse-CDF draw over the candidates in their order (kernels::weighted_pick): whole blocks of
  // 16 weights at a time, then token by token inside the block where the running mass passes u * total.
  int draw(const SamplingCandidates& c) {
    const double u = rng_.uniform();
    const int id = kernels::weighted_pick(c.ids, c.weights, c.total, u);
    return id >= 0 ? id : fallback_;  // candidates() never returns none; a hand-made c might
  }

  // Whether candidates() of a row of n logits is a draw over the whole row as kernels::draw_row
  // makes it: temperature, top-p and min-p only (no top-k below the cut row), no penalty, no
  // hole. A backend can then draw where the logits are (ForwardOutputs::drawn) with row_draw().
  bool draws_whole_row(std::size_t n) const {
    const std::size_t cut = std::min(n, sampleable_.end());
    return !params_.is_greedy() && !params_.has_penalties() && sampleable_.holes().empty() &&
           (params_.top_k <= 0 || static_cast<std::size_t>(params_.top_k) >= cut);
  }
  // The next token's draw over the whole row. Its uniform number is the next of the stream draw()
  // uses, read but not taken: the caller takes it (uniform()) when it uses the drawn token, so
  // kernels::draw_row of the row gives the token sample() would (fallback() for -1), and a forward
  // whose draw is not used (an early chunk of a prompt) leaves the stream as it was.
  kernels::RowDraw row_draw() const {
    Xoshiro256StarStar next = rng_;
    return {.inv_temperature = 1.0f / params_.temperature, .min_weight = min_weight(), .u = next.uniform(), .top_p = params_.top_p};
  }
  // What a token id -1 from a pick made elsewhere stands for in a row of n: sampleable().first().
  int fallback(std::size_t n) const { return std::min(sampleable_.first(), static_cast<int>(n) - 1); }

 private:
  static double block_sum(std::span<const float> w, std::size_t begin, std::size_t end) { return kernels::weight_sum(w, begin, end); }
  // The least weight min-p keeps (every token weighing more than 0 without min-p).
  float min_weight() const { return std::max(params_.min_p, std::numeric_limits<float>::denorm_min()); }

  // Sparse counts: only the context's distinct tokens are touched, then reset.
  void apply_penalties(std::span<float> logits, std::span<const int> prompt, std::span<const int> generated) {
    const auto n = static_cast<unsigned>(logits.size());
    auto touch = [&](int t) {
      if (in_context_[t]) return;
      in_context_[t] = 1;
      touched_.push_back(t);
    };
    for (int t : prompt)
      if (static_cast<unsigned>(t) < n) touch(t);
    for (int t : generated) {
      if (static_cast<unsigned>(t) >= n) continue;
      touch(t);
      ++generated_count_[t];
    }
    for (int t : touched_) {
      logits[t] = detail::penalized_logit(logits[t], true, generated_count_[t], params_);
      in_context_[t] = 0;
      generated_count_[t] = 0;
    }
    touched_.clear();
  }

  void keep_only(int id) {
    ids_.push_back(id);
    kept_weights_.push_back(1.0f);
  }

  // Lowest id among the highest logits (NaN never wins), fallback_ when none is above -inf.
  int argmax(std::span<const float> logits) const {
    const int winner = kernels::argmax(logits);
    return winner >= 0 ? winner : fallback_;
  }

  // Top-k (kernels::top_k), then the filters over the tokens it ranked.
  void select_top_k(std::span<const float> logits) {
    ranked_.resize(static_cast<std::size_t>(params_.top_k));
    const std::size_t n = kernels::top_k(logits, ranked_);
    choose_ranked(std::span<const kernels::RankedLogit>(ranked_).first(n));
  }

  // The candidates among a row's top_k best, ranked best first (none NaN).
  void choose_ranked(std::span<const kernels::RankedLogit> ranked) {
    if (ranked.empty() || !(ranked.front().logit > -std::numeric_limits<float>::infinity()))
      return keep_only(fallback_);  // every logit -inf or NaN
    if (std::isinf(ranked.front().logit)) return keep_only(ranked.front().id);  // +inf wins outright
    filter_ranked(ranked);
  }

  // top-p then min-p over tokens already ranked best first; both keep a prefix.
  void filter_ranked(std::span<const kernels::RankedLogit> ranked) {
    const float max_logit = ranked.front().logit;
    const float inv_t = 1.0f / params_.temperature;
    double mass = 0.0;
    for (const kernels::RankedLogit& r : ranked) {
      const float w = detail::scaled_weight(r.logit, max_logit, inv_t);
      if (w == 0.0f) break;  // ranked: the rest weigh 0 too
      ids_.push_back(r.id);
      kept_weights_.push_back(w);
      mass += w;
    }
    std::size_t kept = ids_.size();
    if (params_.top_p < 1.0f) {
      const double target = static_cast<double>(params_.top_p) * mass;
      double before = 0.0;
      std::size_t r = 0;
      while (r < kept && before < target) before += kept_weights_[r++];
      kept = r;
    }
    if (params_.min_p > 0.0f)
      while (kept > 1 && kept_weights_[kept - 1] < params_.min_p) --kept;
    ids_.resize(kept);
    kept_weights_.resize(kept);
  }

  // No top-k: temperature, then top-p (kernels::keep_nucleus), then min-p.
  void select_full(std::span<const float> logits) {
    const int top = argmax(logits);
    const float max_logit = logits[top];
    if (!std::isfinite(max_logit)) return keep_only(top);
    const kernels::RowDraw d{.inv_temperature = 1.0f / params_.temperature, .min_weight = min_weight(), .top_p = params_.top_p};
    if (params_.top_p >= 1.0f) return kernels::keep_weighted(logits, max_logit, d, ids_, kept_weights_);
    kernels::keep_nucleus(logits, max_logit, d, nucleus_, ids_, kept_weights_);
  }

  std::size_t vocab_size_;
  SampleableIds sampleable_;
  int fallback_ = 0;  // sampleable_.first(), clamped into the current row
  SamplingParams params_;
  Xoshiro256StarStar rng_{0};
  std::vector<std::uint32_t> generated_count_;  // [vocab] zero outside apply_penalties
  std::vector<std::uint8_t> in_context_;        // [vocab] zero outside apply_penalties
  std::vector<int> touched_;                    // [<= vocab] distinct context tokens
  std::vector<kernels::RankedLogit> ranked_;    // [top_k] the row's best, best first
  std::vector<int> ids_;                        // [<= vocab] kept token ids
  std::vector<float> kept_weights_;             // [<= vocab] their weights
  kernels::NucleusScratch nucleus_;             // top-p's histogram over the row
};

}  // namespace kylin
