// Rotary position embedding frequencies, including YaRN context extension. Follows
// transformers v4.51 `_compute_default_rope_parameters` / `_compute_yarn_parameters`: `factor`
// is taken from rope_scaling as given (later releases derive it from max_position_embeddings /
// original_max_position_embeddings when the latter is present; kylin does not).
// Computed in double so the angles match a float64 reference.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <numbers>
#include <vector>

#include "kylin/io/config.hpp"

namespace kylin {

// A token's three M-RoPE position rows (temporal, height, width): (s, s, s) for text at position s.
using MRopePosition = std::array<std::int64_t, 3>;

class RotaryEmbedding {
 public:
  // Over the first rotary_dim dims of each head (partial RoPE; all of head_dim for the Qwen3 generation):
  // inv_freq_i = theta^(-2i / rotary_dim).
  explicit RotaryEmbedding(const ModelConfig& c)
      : head_dim_(c.head_dim), rotary_dim_(c.rotary_dim > 0 ? c.rotary_dim : c.head_dim), mrope_(c.mrope) {
    const std::int64_t half = rotary_dim_ / 2;
    const double dim = static_cast<double>(rotary_dim_), base = c.rope_theta;
    inv_freq_.resize(static_cast<std::size_t>(half));
    for (std::int64_t i = 0; i < half; ++i) inv_freq_[static_cast<std::size_t>(i)] = 1.0 / std::pow(base, 2.0 * i / dim);
    if (c.rope_scaling) apply_yarn(*c.rope_scaling, c);
  }

  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t rotary_dim() const { return rotary_dim_; }
  double attention_factor() const { return attention_factor_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }

  // cos/sin: [n_tokens, rotary_dim/2] for positions pos0 .. pos0+n_tokens-1, times the attention factor.
  void tables(std::int64_t pos0, std::int64_t n_tokens, float* cos, float* sin) const {
    const std::size_t half = inv_freq_.size();
    for (std::int64_t t = 0; t < n_tokens; ++t)
      for (std::size_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos0 + t) * inv_freq_[i];
        cos[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::cos(angle) * attention_factor_);
        sin[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::sin(angle) * attention_factor_);
      }
  }
  // The same for explicit M-RoPE positions (image tokens, and the text after them): frequency i turns by the
  // position row mrope.row_of(i) of its token (transformers apply_interleaved_mrope). Text rows, whose three
  // positions are equal, get what tables() gives them.
  void tables(std::span<const MRopePosition> positions, float* cos, float* sin) const {
    const std::size_t half = inv_freq_.size();
    for (std::size_t t = 0; t < positions.size(); ++t)
      for (std::size_t i = 0; i < half; ++i) {
        const auto row = static_cast<std::size_t>(mrope_.enabled() ? mrope_.row_of(static_cast<std::int64_t>(i)) : 0);
        const double angle = static_cast<double>(positions[t][row]) * inv_freq_[i];
        cos[t * half + i] = static_cast<float>(std::cos(angle) * attention_factor_);
        sin[t * half + i] = static_cast<float>(std::sin(angle) * attention_factor_);
      }
  }

 private:
  void apply_yarn(const RopeScaling& y, const ModelConfig& c) {
    const double dim = static_cast<double>(c.head_dim), base = c.rope_theta;
    const double original = y.original_max_position_embeddings > 0 ? static_cast<double>(y.original_max_position_embeddings)
                                                                   : static_cast<double>(c.max_position_embeddings);
    attention_factor_ = y.attention_factor ? *y.attention_factor : (y.factor <= 1.0 ? 1.0 : 0.1 * std::log(y.factor) + 1.0);
    // Dimension index at which a frequency completes `rotations` turns over the original context.
    auto correction_dim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
    if (y.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double extrapolated = inv_freq_[i], interpolated = inv_freq_[i] / y.factor;
      inv_freq_[i] = interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
    }
  }

  std::int64_t head_dim_, rotary_dim_;
  MRopeConfig mrope_;
  std::vector<double> inv_freq_;  // [rotary_dim/2]
  double attention_factor_ = 1.0;
};

}  // namespace kylin
