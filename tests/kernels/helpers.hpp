// Kernel-test helpers: deterministic random tensors in every storage dtype, and a relative error
// measure scaled by the magnitude of the terms (so near-zero outputs are judged fairly).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/kernels/matmul.hpp"

namespace kylin::test {

// A weight matrix [rows, cols] stored in `dtype`, values ~ N(0, scale).
struct Weights {
  DType dtype;
  std::int64_t rows, cols;
  std::vector<std::uint16_t> half;  // BF16 / F16 storage
  std::vector<float> full;          // F32 storage
  kernels::MatRef ref() const {
    return {dtype, dtype == DType::f32 ? static_cast<const void*>(full.data()) : static_cast<const void*>(half.data()), rows, cols};
  }
};

inline Weights random_weights(DType dtype, std::int64_t rows, std::int64_t cols, unsigned seed, float scale = 0.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  Weights w{dtype, rows, cols, {}, {}};
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const float v = dist(rng);
    if (dtype == DType::bf16) w.half.push_back(f32_to_bf16(v));
    else if (dtype == DType::f16) w.half.push_back(f32_to_f16(v));
    else w.full.push_back(v);
  }
  return w;
}

inline std::vector<float> random_floats(std::int64_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// max_i |a_i - b_i| / (max_i |b_i| + tiny): error relative to the output's scale.
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, mag = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return err / mag;
}

}  // namespace kylin::test
