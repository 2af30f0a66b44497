// kylin::Sampler: picks the next token from a logit row. Same filters and order as HF and
// llama.cpp (penalties -> temperature -> top-k -> top-p -> min-p -> softmax -> draw), but no full
// sort and no allocation per token; detail::reference_sample_distribution is its oracle.
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

namespace kylin {

// The tokens a draw chooses from; probability of ids[j] = weights[j] / total.
struct SamplingCandidates {
  std::span<const int> ids;        // [n_kept] in the order the draw walks them
  std::span<const float> weights;  // [n_kept] unnormalised, all > 0
  double total = 0.0;              // sum of weights, accumulated in that order
};

class Sampler {
 public:
  // vocab_size: the longest logit row this sampler will see. Throws on invalid params.
  Sampler(std::size_t vocab_size, const SamplingParams& params) : vocab_size_(vocab_size) {
    generated_count_.assign(vocab_size, 0);
    in_context_.assign(vocab_size, 0);
    touched_.reserve(vocab_size);
    ids_.reserve(vocab_size);
    kept_weights_.reserve(vocab_size);
    weights_.assign(vocab_size, 0.0f);
    bucket_.assign(vocab_size, 0);
    boundary_.reserve(vocab_size);
    set_params(params);
  }

  // Validates, sizes the top-k heap and reseeds (params.seed, or std::random_device).
  void set_params(const SamplingParams& params) {
    params.validate();
    params_ = params;
    heap_.reserve(std::min(static_cast<std::size_t>(params.top_k), vocab_size_));
    reseed(params.seed ? *params.seed : (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  }
  void reseed(std::uint64_t seed) { rng_ = Xoshiro256StarStar(seed); }
  const SamplingParams& params() const noexcept { return params_; }
  std::size_t vocab_size() const noexcept { return vocab_size_; }

  // logits: [n <= vocab_size], penalised in place. prompt and generated: token ids < n; the
  // repetition penalty covers both, presence/frequency penalties only `generated`.
  int sample(std::span<float> logits, std::span<const int> prompt = {}, std::span<const int> generated = {}) {
    return draw(candidates(logits, prompt, generated));
  }

  // Everything but the draw; the result views this sampler's scratch until the next call.
  SamplingCandidates candidates(std::span<float> logits, std::span<const int> prompt = {},
                                std::span<const int> generated = {}) {
    assert(!logits.empty() && logits.size() <= vocab_size_);
    ids_.clear();
    kept_weights_.clear();
    if (params_.has_penalties()) apply_penalties(logits, prompt, generated);
    const std::size_t n = logits.size();
    if (params_.is_greedy())
      keep_only(argmax(logits));
    else if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n)
      select_top_k(logits);
    else
      select_full(logits);
    double total = 0.0;
    for (float w : kept_weights_) total += w;
    return {ids_, kept_weights_, total};
  }

  // Inverse-CDF draw over the candidates in their order.
  int draw(const SamplingCandidates& c) {
    const double target = rng_.uniform() * c.total;
    double cumulative = 0.0;
    for (std::size_t j = 0; j < c.ids.size(); ++j) {
      cumulative += c.weights[j];
      if (cumulative > target) return c.ids[j];
    }
    return c.ids.back();  // u * total rounded up to total
  }

 private:
  static constexpr int kBuckets = 1024;  // top-p histogram resolution over the scaled logits

  // Sparse counts: only the context's distinct tokens are touched, then reset.
  void apply_penalties(std::span<float> logits, std::span<const int> prompt, std::span<const int> generated) {
    const auto n = static_cast<unsigned>(logits.size());
    auto touch = [&](int t) {
      if (in_context_[t]) return;
      in_context_[t] = 1;
      touched_.push_back(t);
    };
    for (int t : prompt) {
      assert(static_cast<unsigned>(t) < n);
      if (static_cast<unsigned>(t) < n) touch(t);
    }
    for (int t : generated) {
      assert(static_cast<unsigned>(t) < n);
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

  // Lowest id among the highest logits (NaN never wins); a vectorisable max, then a find.
  static int argmax(std::span<const float> logits) {
    float m = -std::numeric_limits<float>::infinity();
    for (float l : logits) m = l > m ? l : m;
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] == m) return static_cast<int>(i);
    return 0;  // every logit NaN
  }

  // Top-k by a k-entry heap whose root is the worst kept token: after warm-up nearly every
  // logit costs one compare. Scanning ids upward means a tie with the root never displaces it.
  void select_top_k(std::span<const float> logits) {
    const auto k = static_cast<std::size_t>(params_.top_k);
    auto worse = [&](int a, int b) { return detail::ranks_before(logits[a], a, logits[b], b); };
    heap_.clear();
    float threshold = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const float l = logits[i];
      if (heap_.size() < k) {
        if (std::isnan(l)) continue;
        heap_.push_back(static_cast<int>(i));
        std::push_heap(heap_.begin(), heap_.end(), worse);
        threshold = logits[heap_.front()];
      } else if (l > threshold) {
        std::pop_heap(heap_.begin(), heap_.end(), worse);
        heap_.back() = static_cast<int>(i);
        std::push_heap(heap_.begin(), heap_.end(), worse);
        threshold = logits[heap_.front()];
      }
    }
    std::sort(heap_.begin(), heap_.end(), worse);  // best first, a total order: reproducible
    if (heap_.empty() || !std::isfinite(logits[heap_.front()])) return keep_only(heap_.empty() ? 0 : heap_.front());
    filter_ranked(logits, heap_);
  }

  // top-p then min-p over tokens already ranked best first; both keep a prefix.
  void filter_ranked(std::span<const float> logits, std::span<const int> ranked) {
    const float max_logit = logits[ranked.front()];
    const float inv_t = 1.0f / params_.temperature;
    double mass = 0.0;
    for (int id : ranked) {
      const float w = detail::scaled_weight(logits[id], max_logit, inv_t);
      if (w == 0.0f) break;  // ranked: the rest weigh 0 too
      ids_.push_back(id);
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

  // No top-k: temperature, then top-p by a histogram over the whole row, then min-p.
  void select_full(std::span<const float> logits) {
    const int top = argmax(logits);
    const float max_logit = logits[top];
    if (!std::isfinite(max_logit)) return keep_only(top);
    const float inv_t = 1.0f / params_.temperature;
    const float min_w = std::max(params_.min_p, std::numeric_limits<float>::denorm_min());
    if (params_.top_p >= 1.0f) {
      for (std::size_t i = 0; i < logits.size(); ++i) {
        const float w = detail::scaled_weight(logits[i], max_logit, inv_t);
        if (w >= min_w) {
          ids_.push_back(static_cast<int>(i));
          kept_weights_.push_back(w);
        }
      }
      return;
    }
    const Boundary last = nucleus_boundary(logits, max_logit, inv_t);
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const auto id = static_cast<int>(i);
      const bool in_nucleus = bucket_[i] < last.bucket ||
                              (bucket_[i] == last.bucket && !detail::ranks_before(last.logit, last.id, logits[i], id));
      if (in_nucleus && weights_[i] >= min_w) {
        ids_.push_back(id);
        kept_weights_.push_back(weights_[i]);
      }
    }
  }

  struct Boundary {  // the last token top-p keeps: everything ranked at or before it stays
    int bucket;
    float logit;
    int id;
  };

  // Fills weights_ and bucket_ for the row and finds top-p's last kept token. Buckets split the
  // scaled-logit range evenly, so ranks only need sorting inside the one bucket where the mass
  // ranked before a token reaches top_p * total.
  Boundary nucleus_boundary(std::span<const float> logits, float max_logit, float inv_t) {
    float min_finite = max_logit;
    for (float l : logits) min_finite = l < min_finite && std::isfinite(l) ? l : min_finite;
    const float range = std::min(-detail::scaled_logit(min_finite, max_logit, inv_t), -detail::kMinScaledLogit);
    const float scale = range > 0.0f ? static_cast<float>(kBuckets) / range : 0.0f;
    bucket_mass_.fill(0.0);
    double total = 0.0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const float s = detail::scaled_logit(logits[i], max_logit, inv_t);
      const float w = detail::weight_of_scaled(s);
      const float b = -s * scale;  // NaN, inf and weightless tokens land in the last bucket
      const auto bucket = static_cast<std::uint16_t>(b < static_cast<float>(kBuckets) ? b : kBuckets - 1);
      weights_[i] = w;
      bucket_[i] = bucket;
      bucket_mass_[bucket] += w;
      total += w;
    }
    const double target = static_cast<double>(params_.top_p) * total;
    double before = 0.0;  // mass of the buckets ranked before `b`
    int b = 0;
    while (b < kBuckets - 1 && before + bucket_mass_[b] < target) before += bucket_mass_[b++];
    boundary_.clear();
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (bucket_[i] == b) boundary_.push_back(static_cast<int>(i));
    std::sort(boundary_.begin(), boundary_.end(),
              [&](int x, int y) { return detail::ranks_before(logits[x], x, logits[y], y); });
    int last = boundary_.front();
    for (int id : boundary_) {
      if (before >= target) break;
      before += weights_[id];
      last = id;
    }
    return {b, logits[last], last};
  }

  std::size_t vocab_size_;
  SamplingParams params_;
  Xoshiro256StarStar rng_{0};
  std::vector<std::uint32_t> generated_count_;  // [vocab] zero outside apply_penalties
  std::vector<std::uint8_t> in_context_;        // [vocab] zero outside apply_penalties
  std::vector<int> touched_;                    // [<= vocab] distinct context tokens
  std::vector<int> heap_;                       // [top_k] token ids
  std::vector<int> ids_;                        // [<= vocab] kept token ids
  std::vector<float> kept_weights_;             // [<= vocab] their weights
  std::vector<float> weights_;                  // [vocab] every token's weight (top-p path)
  std::vector<std::uint16_t> bucket_;           // [vocab] every token's top-p bucket
  std::vector<int> boundary_;                   // [<= vocab] ids in top-p's boundary bucket
  std::array<double, kBuckets> bucket_mass_{};  // [kBuckets]
};

}  // namespace kylin
