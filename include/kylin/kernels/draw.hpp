// A sampler's token weights (exp of the temperature-scaled logit) and its inverse-CDF draw, shared
// by kylin::Sampler and the backends' draw_rows (kernels/draw_row.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// Below this scaled logit the weight exp(s) is taken as 0; float exp is subnormal past -87.3.
inline constexpr float kMinScaledLogit = -87.0f;

// exp(s) for s in [kMinScaledLogit, 0], within 2 ulp of std::exp (tests check), in branch-free
// arithmetic the compiler vectorises: s = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of
// ln2), Cephes' expf polynomial for e^r, and 2^n built in the exponent bits.
inline float exp_nonpositive(float s) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (s * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (s - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const auto bits = static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23;  // 2^n, n >= -126
  return er * std::bit_cast<float>(bits);
}

// Unnormalised probability of a token: exp(s) for s = (logit - max) / T, so max_logit weighs
// exactly 1. NaN logits and those far below the max weigh 0. Split in two so the fast path can
// bucket by s and still compute bit-identical weights.
inline float scaled_logit(float logit, float max_logit, float inv_temperature) {
  return (logit - max_logit) * inv_temperature;
}
inline float weight_of_scaled(float s) {
  const bool live = s >= kMinScaledLogit;  // false for NaN
  const float w = exp_nonpositive(live ? s : kMinScaledLogit);
  return live ? w : 0.0f;
}
inline float scaled_weight(float logit, float max_logit, float inv_temperature) {
  return weight_of_scaled(scaled_logit(logit, max_logit, inv_temperature));
}

// Sum of w[begin, end) in double, four independent partial sums so the adds overlap.
inline double weight_sum(std::span<const float> w, std::size_t begin, std::size_t end) {
  std::array<double, 4> part{};
  std::size_t i = begin;
  for (; i + 4 <= end; i += 4)
    for (std::size_t j = 0; j < 4; ++j) part[j] += w[i + j];
  for (; i < end; ++i) part[0] += w[i];
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Inverse-CDF draw over ids in their order, probability weights[j] / total: whole blocks of 16
// weights at a time, then token by token inside the block where the running mass passes
// u * total. -1 when ids is empty.
inline int weighted_pick(std::span<const int> ids, std::span<const float> weights, double total, double u) {
  constexpr std::size_t kBlock = 16;
  const double target = u * total;
  const std::size_t n = ids.size();
  if (n == 0) return -1;
  double cumulative = 0.0;
  for (std::size_t base = 0; base < n; base += kBlock) {
    const std::size_t end = std::min(base + kBlock, n);
    const double block = weight_sum(weights, base, end);
    if (cumulative + block > target) {
      double inside = cumulative;
      for (std::size_t j = base; j < end; ++j) {
        inside += weights[j];
        if (inside > target) return ids[j];
      }
    }
    cumulative += block;
  }
  return ids.back();  // rounding left the running mass just short of u * total
}

// The tokens of row whose weight (max_logit weighing 1) is at least d.min_weight, in id order, and
// their weights, in place of ids' and weights' contents. The weights first, in a loop the compiler
// vectorises (the exp is most of a draw's time), then the kept ones moved down.
inline void keep_weighted(std::span<const float> row, float max_logit, const RowDraw& d, std::vector<int>& ids, std::vector<float>& weights) {
  const std::size_t n = row.size();
  weights.resize(n);
  for (std::size_t i = 0; i < n; ++i) weights[i] = scaled_weight(row[i], max_logit, d.inv_temperature);
  ids.clear();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (weights[i] >= d.min_weight) {
      ids.push_back(static_cast<int>(i));
      weights[kept++] = weights[i];
    }
  weights.resize(kept);
}

}  // namespace kylin::kernels
