// FP8 weights of the Qwen3-*-FP8 releases (float8_e4m3fn, one scale per block): read as their
// BF16 widening (w * scale in f32, rounded once to BF16), row by row when quantizing at load, or
// widened whole for the BF16 kernels. kylin has no FP8 kernels (docs/QUANTIZATION.md).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/kernels/fp8.hpp"
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
    std::array<float, 256> chunk;  // [<= 256] a block's floats, at most 256 at a time
    each_block(r, [&](std::int64_t c0, std::int64_t n, float s) {
      for (std::int64_t c = c0; c < c0 + n; c += 256) {
        const std::int64_t m = std::min<std::int64_t>(256, c0 + n - c);
        kernels::widen_fp8(q + r * cols + c, s, m, chunk.data());
        for (std::int64_t i = 0; i < m; ++i) out[c + i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(chunk[static_cast<std::size_t>(i)]) >> 16);
      }
    });
  }
  // The same as floats (exact: BF16 widens exactly).
  void row(std::int64_t r, float* out) const {
    each_block(r, [&](std::int64_t c0, std::int64_t n, float s) { kernels::widen_fp8(q + r * cols + c0, s, n, out + c0); });
  }

 private:
  // fn(first column, columns, scale) for each scale block of row r.
  template <class Fn>
  void each_block(std::int64_t r, Fn fn) const {
    const std::int64_t scale_cols = (cols + block_cols - 1) / block_cols;
    for (std::int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const std::int64_t at = (r / block_rows) * scale_cols + c0 / block_cols;
      float s = 0;
      if (scale_dtype == DType::f32) std::memcpy(&s, scale + at * 4, 4);
      else s = bf16_to_f32(static_cast<std::uint16_t>(static_cast<unsigned>(scale[at * 2]) | static_cast<unsigned>(scale[at * 2 + 1]) << 8));
      fn(c0, std::min(cols, c0 + block_cols) - c0, s);
    }
  }
};

// A model's FP8 weights: where each is, and the BF16 widenings made of those not quantized.
class Fp8Weights {
 public:
  void add(const Fp8Source& s) { sources_.emplace(s.q, s); }
  bool empty() const { return sources_.empty(); }

  // The source of the F8_E4M3 matrix whose data is at `data`, or null.
  const Fp8Source* find(const void* data) const {
    const auto it = sources_.find(data);
    return it == sources_.end() ? nullptr : &it->second;
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
  std::unordered_map<const void*, Fp8Source> sources_;  // by data (the 48-layer 30B-A3B shape has ~18k)
  std::vector<std::pair<const void*, std::vector<std::uint16_t>>> widened_;  // FP8 data -> [rows, cols] BF16
};

}  // namespace kylin
