// FP8 weights of the Qwen3-*-FP8 releases (float8_e4m3fn, one scale per block): read as their
// BF16 widening (w * scale in f32, rounded once to BF16), row by row when quantizing at load, or
// widened whole for the BF16 kernels. kylin has no FP8 kernels (docs/QUANTIZATION.md).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/kernels/matmul.hpp"

namespace kylin {

// One F8_E4M3 weight in the mapped file and its block scales.
struct Fp8Source {
  const std::uint8_t* q = nullptr;  // [rows, cols] F8_E4M3
  const std::byte* scale = nullptr;  // [ceil(rows / block_rows), ceil(cols / block_cols)] F32 or BF16
  DType scale_dtype = DType::f32;
  std::int64_t rows = 0, cols = 0, block_rows = 128, block_cols = 128;

  // out[cols] = row r widened to BF16 (the f32 product, rounded once).
  void row_bf16(std::int64_t r, std::uint16_t* out) const {
    each(r, [&](std::int64_t c, std::uint16_t h) { out[c] = h; });
  }
  // The same as floats (exact: BF16 widens exactly).
  void row(std::int64_t r, float* out) const {
    each(r, [&](std::int64_t c, std::uint16_t h) { out[c] = bf16_to_f32(h); });
  }

 private:
  template <class Fn>
  void each(std::int64_t r, Fn fn) const {
    static const std::array<float, 256> f8 = [] {
      std::array<float, 256> t{};
      for (int v = 0; v < 256; ++v) t[static_cast<std::size_t>(v)] = f8_e4m3_to_f32(static_cast<std::uint8_t>(v));
      return t;
    }();
    const std::int64_t scale_cols = (cols + block_cols - 1) / block_cols;
    for (std::int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const std::int64_t at = (r / block_rows) * scale_cols + c0 / block_cols;
      float s = 0;
      if (scale_dtype == DType::f32) std::memcpy(&s, scale + at * 4, 4);
      else s = bf16_to_f32(static_cast<std::uint16_t>(static_cast<unsigned>(scale[at * 2]) | static_cast<unsigned>(scale[at * 2 + 1]) << 8));
      for (std::int64_t c = c0; c < std::min(cols, c0 + block_cols); ++c) fn(c, f32_to_bf16(f8[q[r * cols + c]] * s));
    }
  }
};

// A model's FP8 weights: where each is, and the BF16 widenings made of those not quantized.
class Fp8Weights {
 public:
  void add(const Fp8Source& s) { sources_.push_back(s); }
  bool empty() const { return sources_.empty(); }

  // The source of the F8_E4M3 matrix whose data is at `data`, or null.
  const Fp8Source* find(const void* data) const {
    for (const Fp8Source& s : sources_)
      if (s.q == data) return &s;
    return nullptr;
  }

  // Frees the widenings whose data is not in `used` (those packed since into another layout).
  template <class Set>
  void drop_widenings_except(const Set& used) {
    std::erase_if(widened_, [&](const auto& w) { return !used.contains(static_cast<const void*>(w.second.data())); });
  }

  // The BF16 widening of the F8_E4M3 matrix m, made on first request (a tied table is widened once).
  kernels::MatRef widen(const kernels::MatRef& m) {
    for (const auto& [from, bf16] : widened_)
      if (from == m.data) return {DType::bf16, bf16.data(), m.rows, m.cols};
    const Fp8Source* s = find(m.data);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(m.rows * m.cols));  // [rows, cols]
    for (std::int64_t r = 0; r < m.rows; ++r) s->row_bf16(r, out.data() + r * m.cols);
    widened_.emplace_back(m.data, std::move(out));
    return {DType::bf16, widened_.back().second.data(), m.rows, m.cols};
  }

 private:
  std::vector<Fp8Source> sources_;
  std::vector<std::pair<const void*, std::vector<std::uint16_t>>> widened_;  // FP8 data -> [rows, cols] BF16
};

}  // namespace kylin
