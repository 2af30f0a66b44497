// Element-wise and per-row kernels of the forward pass: RMSNorm, rotary embedding, SwiGLU
// gating, residual add, embedding lookup, the row gather/scatter of expert routing, and the
// greedy token and the top-k of a logit row. All in f32 on activations; weights in stored dtype.
// These are short loops the compiler vectorizes; each is its own scalar reference.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// Reads element i of a row-major weight in its stored dtype.
inline float weight_at(const MatRef& w, std::int64_t i) {
  assert(w.layout == Layout::rows && "weight_at reads row-major weights");
  return visit_dtype(w.dtype, [&]<class T>(std::type_identity<T>) { return to_float(static_cast<const T*>(w.data)[i]); });
}

// x[0]^2 + ... + x[n-1]^2 in double (each square exact), as eight sums over i mod 8 added in a
// fixed tree: the same double on every kernel set, and eight add chains where one chain of n
// dependent adds made RMSNorm ~2 % of a prefill.
inline double sum_of_squares(const float* x, std::int64_t n) {
  double s[8] = {};
  const std::int64_t whole = n / 8 * 8;
  for (std::int64_t i = 0; i < whole; i += 8)
    KYLIN_CPU_UNROLL for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(x[i + j]) * x[i + j];
  KYLIN_CPU_UNROLL for (int j = 0; j < 8; ++j)
    if (whole + j < n) s[j] += static_cast<double>(x[whole + j]) * x[whole + j];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w for `n_rows` rows of width w.cols
// (the weight's length is the row width, so the two cannot be swapped). The mean is accumulated
// in double: it is cheap here and keeps long rows exact.
inline void rms_norm(const float* x, const MatRef& w, float* out, std::int64_t n_rows, double eps) {
  const std::int64_t dim = w.cols;
  visit_dtype(w.dtype, [&]<class T>(std::type_identity<T>) {
    const T* wd = static_cast<const T*>(w.data);
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * dim;
      const float inv = static_cast<float>(1.0 / std::sqrt(sum_of_squares(xr, dim) / static_cast<double>(dim) + eps));
      float* o = out + r * dim;
      for (std::int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv * to_float(wd[i]);
    }
  });
}

// Rotary embedding, rotate_half layout: pairs (i, i + r/2) of the first r = tables.rotary_dim dims (0: all of
// head_dim) rotate by angle pos * inv_freq[i]; the other dims pass through (partial RoPE). x rotated in place.
inline void rope(float* x, const HeadRows& shape, const RopeTables& tables) {
  const std::int64_t n_tokens = shape.n_tokens, n_heads = shape.n_heads, head_dim = shape.head_dim;
  const std::int64_t half = (tables.rotary_dim > 0 ? tables.rotary_dim : head_dim) / 2;
  const float *cos = tables.cos, *sin = tables.sin;
  for (std::int64_t t = 0; t < n_tokens; ++t)
    for (std::int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      const float* c = cos + t * half;
      const float* s = sin + t * half;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
}

// gate[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + e^-z).
inline void silu_mul_ref(float* gate, const float* up, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// Every element goes through the same vector exp, the tail too (through a padded batch), so an
// element's result does not depend on where it sits: a row of a batch equals the row alone.
inline void silu_mul(float* gate, const float* up, std::int64_t n) {
  if constexpr (!simd_enabled) {
    silu_mul_ref(gate, up, n);
  } else {
    const fbatch one(1.0f);
    auto step = [&](fbatch g, fbatch u) { return g / (one + xsimd::exp(-g)) * u; };
    std::int64_t i = 0;
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes)
      step(fbatch::load_unaligned(gate + i), fbatch::load_unaligned(up + i)).store_unaligned(gate + i);
    if (i == n) return;
    alignas(64) float g[lanes] = {}, u[lanes] = {};
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    step(fbatch::load_aligned(g), fbatch::load_aligned(u)).store_aligned(g);
    std::copy(g, g + (n - i), gate + i);
  }
}

// GELU, PyTorch's tanh approximation (gelu(x, approximate="tanh"), HF's gelu_pytorch_tanh), in place:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in double.
inline void gelu_tanh_ref(float* x, std::int64_t n) {
  const double k = 0.7978845608028654;  // sqrt(2 / pi)
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
  }
}

// The same as x * sigmoid(2u) = x / (1 + e^(-2u)) for u = sqrt(2/pi) (x + 0.044715 x^3) (tanh u = 2 sigmoid(2u) - 1),
// in float vectors: no cancellation in 1 + tanh for negative x. Tail through a padded batch, as silu_mul.
inline void gelu_tanh(float* x, std::int64_t n) {
  if constexpr (!simd_enabled) {
    gelu_tanh_ref(x, n);
  } else {
    const fbatch one(1.0f), k2(-2.0f * 0.7978845608028654f), c(0.044715f);
    auto step = [&](fbatch v) { return v / (one + xsimd::exp(k2 * xsimd::fma(c * v * v, v, v))); };
    std::int64_t i = 0;
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes) step(fbatch::load_unaligned(x + i)).store_unaligned(x + i);
    if (i == n) return;
    alignas(64) float t[lanes] = {};
    std::copy(x + i, x + n, t);
    step(fbatch::load_aligned(t)).store_aligned(t);
    std::copy(t, t + (n - i), x + i);
  }
}

inline void add_inplace(float* acc, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

// out[i, :] = x[sel.rows[i], :] for rows of width `width`.
inline void gather_rows(const float* x, const RowSelection& sel, float* out, std::int64_t width) {
  for (std::size_t i = 0; i < sel.rows.size(); ++i) std::copy_n(x + sel.rows[i] * width, width, out + static_cast<std::int64_t>(i) * width);
}

// acc[sel.rows[i], :] += sel.weights[i] * y[i, :]: an expert's outputs, weighted, into their rows.
inline void add_rows_scaled(float* acc, const float* y, const RowSelection& sel, std::int64_t width) {
  for (std::size_t i = 0; i < sel.rows.size(); ++i) {
    float* a = acc + sel.rows[i] * width;
    const float* yi = y + static_cast<std::int64_t>(i) * width;
    const float w = sel.weights[i];
    for (std::int64_t j = 0; j < width; ++j) a[j] += w * yi[j];
  }
}

// out[dim] = row `id` of an embedding table [vocab, dim], widened to f32 (Q8_0/Q4_0: q * scale).
// A table packed in panels (tied to the LM head) is read 16 elements apart.
inline void embed_row(const MatRef& table, std::int64_t id, float* out) {
  if (is_quantized(table.dtype))
    return visit_quant(table.dtype, table.data, table.rows, table.cols, [&](const auto& w) { dequantize_row(w, id, out); });
  if (table.layout == Layout::panels)
    return visit_panels(table, [&](const auto& w) {
      for (std::int64_t i = 0; i < table.cols; ++i) out[i] = to_float(w.at(id, i));
    });
  visit_dtype(table.dtype, [&]<class T>(std::type_identity<T>) {
    const T* row = static_cast<const T*>(table.data) + id * table.cols;
    for (std::int64_t i = 0; i < table.cols; ++i) out[i] = to_float(row[i]);
  });
}

// The greedy token of a logit row: the lowest id among the highest logits (+inf beats every finite
// one, NaN never wins); -1 when none is above -inf. kLanes independent running maxima that the
// compiler turns into vector compares and blends; the sampler's greedy pick and every backend's
// argmax_rows are this function.
inline int argmax(std::span<const float> row) {
  constexpr std::size_t kLanes = 16;
  std::array<float, kLanes> best;  // [kLanes] max of row[i] with i % kLanes == lane
  std::array<int, kLanes> at{};    // [kLanes] its first id
  best.fill(-std::numeric_limits<float>::infinity());
  const std::size_t n = row.size();
  for (std::size_t base = 0; base < n; base += kLanes) {
    const std::size_t lanes = std::min(kLanes, n - base);
    for (std::size_t j = 0; j < lanes; ++j) {
      const float l = row[base + j];
      const bool higher = l > best[j];
      best[j] = higher ? l : best[j];
      at[j] = higher ? static_cast<int>(base + j) : at[j];
    }
  }
  int winner = -1;
  for (std::size_t j = 0; j < kLanes; ++j)
    if (best[j] > -std::numeric_limits<float>::infinity() &&
        (winner < 0 || best[j] > row[static_cast<std::size_t>(winner)] || (best[j] == row[static_cast<std::size_t>(winner)] && at[j] < winner)))
      winner = at[j];
  return winner;
}

// The one token order of every pick from a logit row: the higher logit first, the lower id on a
// tie (-0 ties +0), NaN after everything.
inline bool ranks_before(float logit_a, int id_a, float logit_b, int id_b) {
  if (logit_a != logit_b) {
    if (std::isnan(logit_b)) return !std::isnan(logit_a);
    return logit_a > logit_b;
  }
  return id_a < id_b;
}

// out[0, k): the k = out.size() best logits of row under ranks_before, best first, NaN never;
// returns how many there are (fewer than k when the row has fewer non-NaN logits; the slots past
// them are empty). A k-entry heap whose root is the worst kept; once it is full, a block of kLanes
// logits costs one vector compare against the root unless one of them beats it. Scanning ids
// upwards means a tie with the root never displaces it. The sampler's top-k and every backend's
// top_k_rows are this function.
inline std::size_t top_k(std::span<const float> row, std::span<RankedLogit> out) {
  constexpr std::size_t kLanes = 16;
  const std::size_t k = out.size(), n = row.size();
  auto worse = [](const RankedLogit& a, const RankedLogit& b) { return ranks_before(a.logit, a.id, b.logit, b.id); };
  std::size_t size = 0, i = 0;
  for (; i < n && size < k; ++i) {
    if (std::isnan(row[i])) continue;
    out[size++] = {row[i], static_cast<int>(i)};
    std::push_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(size), worse);
  }
  if (size == k && k > 0) {
    float threshold = out[0].logit;
    auto offer = [&](std::size_t id) {
      if (!(row[id] > threshold)) return;
      std::pop_heap(out.begin(), out.end(), worse);
      out[k - 1] = {row[id], static_cast<int>(id)};
      std::push_heap(out.begin(), out.end(), worse);
      threshold = out[0].logit;
    };
    for (; i + kLanes <= n; i += kLanes) {
      bool any = false;
      for (std::size_t j = 0; j < kLanes; ++j) any |= row[i + j] > threshold;
      if (any)
        for (std::size_t j = 0; j < kLanes; ++j) offer(i + j);
    }
    for (; i < n; ++i) offer(i);
  }
  std::sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(size), worse);  // a total order: reproducible
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(size), out.end(), RankedLogit{});
  return size;
}

}  // namespace kylin::kernels
