// Kernel-test helpers: deterministic random tensors in every storage dtype, a relative error
// measure scaled by the output's magnitude, and naive double-precision oracles written here, not
// the kernels' own *_ref functions (those are the code under test in a KYLIN_NO_SIMD build).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/kernels/matmul.hpp"

namespace kylin::test {

// A weight matrix [rows, cols] stored in `dtype`, values ~ N(0, scale), row-major and in panels.
struct Weights {
  DType dtype;
  std::int64_t rows, cols;
  std::vector<std::uint16_t> half;  // BF16 / F16 storage
  std::vector<float> full;          // F32 storage
  std::vector<std::uint16_t> half_panels;  // the same in panels (kernels::pack_panels)
  std::vector<float> full_panels;
  kernels::MatRef ref(kernels::Layout layout = kernels::Layout::rows) const {
    const bool p = layout == kernels::Layout::panels;
    const void* data = dtype == DType::f32 ? static_cast<const void*>((p ? full_panels : full).data())
                                           : static_cast<const void*>((p ? half_panels : half).data());
    return {dtype, data, rows, cols, layout};
  }
};

inline Weights random_weights(DType dtype, std::int64_t rows, std::int64_t cols, unsigned seed, float scale = 0.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  Weights w{dtype, rows, cols, {}, {}, {}, {}};
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const float v = dist(rng);
    if (dtype == DType::bf16) w.half.push_back(f32_to_bf16(v));
    else if (dtype == DType::f16) w.half.push_back(f32_to_f16(v));
    else w.full.push_back(v);
  }
  const auto n = static_cast<std::size_t>(kernels::panel_elements(rows, cols));
  if (dtype == DType::f32) {
    w.full_panels.resize(n);
    kernels::pack_panels(w.full.data(), rows, cols, w.full_panels.data());
  } else {
    w.half_panels.resize(n);
    kernels::pack_panels(w.half.data(), rows, cols, w.half_panels.data());
  }
  return w;
}

inline constexpr kernels::Layout both_layouts[] = {kernels::Layout::rows, kernels::Layout::panels};

inline std::vector<float> random_floats(std::int64_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// max_i |a_i - b_i| / (max_i |b_i| + tiny): error relative to the output's scale. A NaN anywhere
// makes the result NaN, which fails every `<` bar (std::max would skip it).
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, mag = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return d;
    err = std::max(err, d);
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return err / mag;
}

// Element i (row-major) of a weight matrix, widened by the core conversions (exhaustively tested
// in tests/core), never by a kernel.
inline double weight_value(const Weights& w, std::int64_t i) {
  const auto k = static_cast<std::size_t>(i);
  if (w.dtype == DType::bf16) return bf16_to_f32(w.half[k]);
  if (w.dtype == DType::f16) return f16_to_f32(w.half[k]);
  return w.full[k];
}

// y[T, w.rows] = x[T, w.cols] · W^T + bias, summed in double.
inline std::vector<float> matmul_oracle(const float* x, const Weights& w, const float* bias, std::int64_t T) {
  std::vector<float> y(static_cast<std::size_t>(T * w.rows));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double acc = bias ? bias[r] : 0.0;
      for (std::int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(x[t * w.cols + c]) * weight_value(w, r * w.cols + c);
      y[static_cast<std::size_t>(t * w.rows + r)] = static_cast<float>(acc);
    }
  return y;
}

// A value as a KV cache of `dtype` holds it.
inline double kv_value(float x, DType dtype) { return dtype == DType::f16 ? f16_to_f32(f32_to_f16(x)) : x; }

// Causal grouped-query attention in double, from the K/V rows before they were stored:
// keys/vals [pos0 + T, n_kv * D] (position-major, as store_kv takes them), q/out [T, H * D];
// query head h reads KV head h / (H / n_kv) at positions 0 ..= pos0 + t.
struct AttentionProblem {
  std::int64_t T, pos0, n_heads, n_kv, head_dim;
  double scale;
};
// full: every query sees all T keys instead (a ViT's attention; pos0 is not read).
inline std::vector<float> attention_oracle(const float* q, const float* keys, const float* vals, DType kv_dtype,
                                           const AttentionProblem& a, bool full = false) {
  const std::int64_t D = a.head_dim, group = a.n_heads / a.n_kv;
  std::vector<float> out(static_cast<std::size_t>(a.T * a.n_heads * D));
  for (std::int64_t t = 0; t < a.T; ++t)
    for (std::int64_t h = 0; h < a.n_heads; ++h) {
      const std::int64_t kvh = h / group, n_keys = full ? a.T : a.pos0 + t + 1;
      std::vector<double> w(static_cast<std::size_t>(n_keys));
      for (std::int64_t j = 0; j < n_keys; ++j) {
        double dot = 0;
        for (std::int64_t i = 0; i < D; ++i)
          dot += static_cast<double>(q[(t * a.n_heads + h) * D + i]) * kv_value(keys[(j * a.n_kv + kvh) * D + i], kv_dtype);
        w[static_cast<std::size_t>(j)] = dot * a.scale;
      }
      const double mx = *std::max_element(w.begin(), w.end());
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (std::int64_t i = 0; i < D; ++i) {
        double acc = 0;
        for (std::int64_t j = 0; j < n_keys; ++j)
          acc += w[static_cast<std::size_t>(j)] * kv_value(vals[(j * a.n_kv + kvh) * D + i], kv_dtype);
        out[static_cast<std::size_t>((t * a.n_heads + h) * D + i)] = static_cast<float>(acc / sum);
      }
    }
  return out;
}

// The greedy id of a row by its definition: the first id holding the highest value above -inf
// (NaN never), -1 when there is none.
inline int argmax_oracle(const std::vector<float>& row, std::size_t width) {
  int best = -1;
  for (std::size_t i = 0; i < width; ++i)
    if (row[i] > -INFINITY && (best < 0 || row[i] > row[static_cast<std::size_t>(best)])) best = static_cast<int>(i);
  return best;
}

// Logit rows that tell argmax implementations apart: ties between ids far apart (other SIMD lanes,
// other threads of a block), NaN and +-inf, rows with no usable logit, the maximum first and last,
// lengths around 16, and random rows up to a Qwen3 vocabulary.
inline std::vector<std::vector<float>> argmax_rows_cases() {
  constexpr float inf = INFINITY, nan = NAN;
  std::vector<std::vector<float>> rows = {
      {}, {nan}, {-inf}, {3.f}, {-inf, -inf, -inf}, {nan, nan, 1.f, nan}, {nan, -inf, -2.f},
      {inf, 1.f, inf}, {1.f, nan, inf, nan, inf}, {-0.f, 0.f}, {0.f, -0.f},
  };
  for (std::size_t n : {15, 16, 17, 33, 1000, 4096 + 7, 151936}) {
    rows.push_back(random_floats(static_cast<std::int64_t>(n), static_cast<unsigned>(n), 3.f));
    auto tied = rows.back();  // the maximum at the last id and at an id in another lane / thread
    const float top = *std::max_element(tied.begin(), tied.end()) + 1.f;
    tied[n - 1] = top;
    tied[(n - 1) / 3] = top;
    if (n > 1024 + 5) tied[5 + 1024] = top, tied[5] = top;  // ids a block's stride apart
    rows.push_back(tied);
    auto first = rows[rows.size() - 2];
    first[0] = top;
    rows.push_back(first);
  }
  return rows;
}

// kernels::top_k by its definition: every non-NaN id of row[0, width), stably sorted by logit
// (higher first, so equal logits keep the lower id first), the first k, then empty slots.
inline std::vector<kernels::RankedLogit> top_k_oracle(const std::vector<float>& row, std::size_t width, std::size_t k) {
  std::vector<int> ids;
  for (std::size_t i = 0; i < width; ++i)
    if (!std::isnan(row[i])) ids.push_back(static_cast<int>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)]; });
  std::vector<kernels::RankedLogit> out(k);
  for (std::size_t j = 0; j < k && j < ids.size(); ++j) out[j] = {row[static_cast<std::size_t>(ids[j])], ids[j]};
  return out;
}

// argmax_rows_cases and rows of many ties: a few distinct values (+-0 among them) over a long row,
// so that equal logits meet in every lane, thread and slice; mostly -inf; ties with NaN between.
inline std::vector<std::vector<float>> top_k_rows_cases() {
  std::vector<std::vector<float>> rows = argmax_rows_cases();
  for (std::size_t n : {40, 2048 + 3, 9000, 151936}) {
    std::vector<float> few(n), inf_heavy(n, -INFINITY), nan_ties(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t h = (i * 2654435761u) % 7;
      few[i] = h == 0 ? -0.f : h == 1 ? 0.f : static_cast<float>(h % 3);
      nan_ties[i] = i % 3 == 0 ? NAN : static_cast<float>((i * 40503u) % 5);
    }
    for (std::size_t i = n / 7; i < n; i += n / 5) inf_heavy[i] = static_cast<float>(i % 2);
    rows.push_back(few);
    rows.push_back(inf_heavy);
    rows.push_back(nan_ties);
  }
  return rows;
}

}  // namespace kylin::test
