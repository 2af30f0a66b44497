// Block-quantized weights, made from the checkpoint at load: Q8_0 (32 int8 values and one f16
// scale per block) and Q4_0 (32 4-bit values and one f16 scale). Activation rows are quantized to
// Q8_0 blocks at run time, so every block pair is an exact integer dot product. The scalar
// references here are the oracle of the kernels in quant_dot.hpp.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kylin/core/dtype.hpp"

namespace kylin::kernels {

inline constexpr std::int64_t q8_block = 32;  // values per block, both formats

// A [rows, cols] Q8_0 matrix in one buffer: the int8 values [rows, cols] row by row, then the f16
// scales [rows, cols / 32]; weight (r, c) = q[r, c] * scale[r, c / 32]. 34 bytes per 32 weights.
struct Q8View {
  static constexpr DType dtype = DType::q8_0;
  const std::int8_t* q = nullptr;        // [rows, cols]
  const std::uint16_t* scale = nullptr;  // [rows, cols / q8_block] f16
  std::int64_t rows = 0, cols = 0;
  std::int64_t blocks() const { return cols / q8_block; }
};

// A [rows, cols] Q4_0 matrix in one buffer: the packed values [rows, cols / 2] row by row, then
// the f16 scales [rows, cols / 32]; weight = v * scale, each v in [-8, 7] stored as v + 8 in 4
// bits. 18 bytes per 32 weights. Blocks 2k and 2k + 1 share 32 bytes: byte i holds value i of
// block 2k in its low and of block 2k + 1 in its high nibble (one load, a mask and a shift give
// both blocks). A last, unpaired block has 16 bytes: byte j holds its value j low, j + 16 high.
struct Q4View {
  static constexpr DType dtype = DType::q4_0;
  const std::uint8_t* q = nullptr;       // [rows, cols / 2]
  const std::uint16_t* scale = nullptr;  // [rows, cols / q8_block] f16
  std::int64_t rows = 0, cols = 0;
  std::int64_t blocks() const { return cols / q8_block; }
};

template <class W>
concept QuantView = std::same_as<W, Q8View> || std::same_as<W, Q4View>;

inline bool is_quantized(DType d) { return d == DType::q8_0 || d == DType::q4_0; }

// Bytes of the value part of a row, and of the whole matrix.
template <QuantView W>
constexpr std::int64_t row_value_bytes(std::int64_t cols) {
  return std::same_as<W, Q8View> ? cols : cols / 2;
}
template <QuantView W>
std::size_t quant_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows * row_value_bytes<W>(cols) + rows * (cols / q8_block) * 2);
}
inline std::size_t q8_bytes(std::int64_t rows, std::int64_t cols) { return quant_bytes<Q8View>(rows, cols); }
inline std::size_t q4_bytes(std::int64_t rows, std::int64_t cols) { return quant_bytes<Q4View>(rows, cols); }
inline std::size_t quant_bytes(DType d, std::int64_t rows, std::int64_t cols) {
  return d == DType::q4_0 ? q4_bytes(rows, cols) : q8_bytes(rows, cols);
}

template <QuantView W>
W quant_view(const void* data, std::int64_t rows, std::int64_t cols) {
  using V = std::remove_const_t<std::remove_pointer_t<decltype(W::q)>>;
  const auto* q = static_cast<const V*>(data);
  return {q, reinterpret_cast<const std::uint16_t*>(q + rows * row_value_bytes<W>(cols)), rows, cols};
}
inline Q8View q8_view(const void* data, std::int64_t rows, std::int64_t cols) { return quant_view<Q8View>(data, rows, cols); }
inline Q4View q4_view(const void* data, std::int64_t rows, std::int64_t cols) { return quant_view<Q4View>(data, rows, cols); }

// fn(view) for a Q8_0 or Q4_0 matrix at `data` (is_quantized(dtype) must hold).
template <class Fn>
decltype(auto) visit_quant(DType dtype, const void* data, std::int64_t rows, std::int64_t cols, Fn&& fn) {
  assert(is_quantized(dtype) && "visit_quant: a quantized dtype");
  if (dtype == DType::q4_0) return fn(q4_view(data, rows, cols));
  return fn(q8_view(data, rows, cols));
}

// Block b of row r as signed values, and its scale.
inline void block_values(const Q8View& w, std::int64_t r, std::int64_t b, std::int8_t (&out)[q8_block]) {
  std::memcpy(out, w.q + r * w.cols + b * q8_block, q8_block);
}
// Where block b's values are in row r of a Q4_0 matrix: the 32 bytes of its pair and the shift
// of its nibbles, or (shift < 0) the 16 bytes of an unpaired last block.
struct Q4Block {
  const std::uint8_t* bytes;
  int shift;
};
inline Q4Block q4_block(const Q4View& w, std::int64_t r, std::int64_t b) {
  const std::uint8_t* row = w.q + r * (w.cols / 2);
  if ((b | 1) < w.blocks()) return {row + (b / 2) * q8_block, static_cast<int>(b % 2) * 4};
  return {row + b * (q8_block / 2), -1};
}
inline void block_values(const Q4View& w, std::int64_t r, std::int64_t b, std::int8_t (&out)[q8_block]) {
  const Q4Block k = q4_block(w, r, b);
  for (std::int64_t i = 0; i < q8_block; ++i) {
    const int byte = k.shift >= 0 ? k.bytes[i] >> k.shift : k.bytes[i % 16] >> (i < 16 ? 0 : 4);
    out[i] = static_cast<std::int8_t>((byte & 0x0F) - 8);
  }
}
template <QuantView W>
float block_scale(const W& w, std::int64_t r, std::int64_t b) {
  return f16_to_f32(w.scale[r * w.blocks() + b]);
}

// out[cols] = row r's values, q * scale (exact in float).
template <QuantView W>
void dequantize_row(const W& w, std::int64_t r, float* out) {
  std::int8_t v[q8_block];
  for (std::int64_t b = 0; b < w.blocks(); ++b) {
    block_values(w, r, b, v);
    const float d = block_scale(w, r, b);
    for (std::int64_t i = 0; i < q8_block; ++i) out[b * q8_block + i] = v[i] * d;
  }
}

// Activation rows quantized at run time: int8 [rows, cols] and float scales [rows, cols / 32]
// (not rounded to f16: they never leave memory).
struct Q8Rows {
  std::int8_t* q = nullptr;
  float* scale = nullptr;
  std::int64_t cols = 0;
};

// One block: scale = max|x| / 127, q = round(x / scale). The scale is what `round_scale` makes of
// it (f16 for weights), and q is computed against that rounded scale, so q * scale is the value.
template <class RoundScale>
inline float quantize_block_q8(const float* x, std::int8_t* q, RoundScale round_scale) {
  float amax = 0.f;
  for (std::int64_t i = 0; i < q8_block; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = round_scale(amax / 127.f);
  const float inv = d > 0.f ? 1.f / d : 0.f;
  for (std::int64_t i = 0; i < q8_block; ++i)
    q[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.f, 127.f));
  return d;
}

// Weight row r of a Q8_0 matrix from a float row; `out` is the matrix buffer (q8_bytes long).
inline void quantize_weight_row_q8(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  auto* q = static_cast<std::int8_t*>(out);
  auto* scale = reinterpret_cast<std::uint16_t*>(q + rows * cols);
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint16_t h = 0;
    quantize_block_q8(x + b * q8_block, q + r * cols + b * q8_block, [&](float d) {
      h = f32_to_f16(d);
      return f16_to_f32(h);
    });
    scale[r * nb + b] = h;
  }
}

// Weight row r of a Q4_0 matrix from a float row; `out` is the matrix buffer (q4_bytes long).
// Per block, the value of largest magnitude m maps to -8 (scale = m / -8, rounded to f16), which
// spends all 16 levels on the block's range; the others round to nearest in [-8, 7].
inline void quantize_weight_row_q4(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  auto* q = static_cast<std::uint8_t*>(out);
  auto* scale = reinterpret_cast<std::uint16_t*>(q + rows * (cols / 2));
  const Q4View w{q, scale, rows, cols};
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * q8_block;
    float m = 0.f;
    for (std::int64_t i = 0; i < q8_block; ++i)
      if (std::fabs(xb[i]) > std::fabs(m)) m = xb[i];
    const std::uint16_t h = f32_to_f16(m / -8.f);
    const float d = f16_to_f32(h), inv = d != 0.f ? 1.f / d : 0.f;
    std::uint8_t level[q8_block];
    for (std::int64_t i = 0; i < q8_block; ++i) level[i] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(xb[i] * inv), -8.f, 7.f) + 8.f);
    const Q4Block k = q4_block(w, r, b);
    std::uint8_t* bytes = q + (k.bytes - w.q);
    if (k.shift == 0)  // the pair's first block: the second one fills the high nibbles next
      for (std::int64_t i = 0; i < q8_block; ++i) bytes[i] = level[i];
    else if (k.shift == 4)
      for (std::int64_t i = 0; i < q8_block; ++i) bytes[i] = static_cast<std::uint8_t>((bytes[i] & 0x0F) | (level[i] << 4));
    else
      for (std::int64_t j = 0; j < q8_block / 2; ++j) bytes[j] = static_cast<std::uint8_t>(level[j] | (level[j + 16] << 4));
    scale[r * nb + b] = h;
  }
}

// Weight row r of a matrix of view type W from a float row.
template <QuantView W>
void quantize_weight_row(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  if constexpr (std::same_as<W, Q8View>) quantize_weight_row_q8(x, out, rows, cols, r);
  else quantize_weight_row_q4(x, out, rows, cols, r);
}

// Activation rows [0, n) of x [n, cols] into `out`.
inline void quantize_rows_q8(const float* x, std::int64_t n, std::int64_t cols, const Q8Rows& out) {
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b)
      out.scale[t * nb + b] =
          quantize_block_q8(x + t * cols + b * q8_block, out.q + t * cols + b * q8_block, [](float d) { return d; });
}

// The exact integer dot product of block b of weight row r and activation row t.
template <QuantView W>
std::int32_t block_dot(const W& w, std::int64_t r, const Q8Rows& x, std::int64_t t, std::int64_t b) {
  std::int8_t v[q8_block];
  block_values(w, r, b, v);
  std::int32_t s = 0;
  for (std::int64_t i = 0; i < q8_block; ++i) s += std::int32_t{v[i]} * std::int32_t{x.q[t * x.cols + b * q8_block + i]};
  return s;
}

// The sum of the values of block b of activation row t: under Q4_0 weights, stored as v + 8,
// 8 times it is what the +8 adds to the block's integer dot product.
inline std::int32_t block_qsum(const Q8Rows& x, std::int64_t t, std::int64_t b) {
  const std::int8_t* q = x.q + t * x.cols + b * q8_block;
  std::int32_t s = 0;
  for (std::int64_t i = 0; i < q8_block; ++i) s += q[i];
  return s;
}

// hsum4(v) = (v0 + v2) + (v1 + v3): the order in which the SIMD kernels sum 4 float lanes
// (halves, then the last two).
template <class T>
T hsum4_order(const T (&v)[4]) {
  return (v[0] + v[2]) + (v[1] + v[3]);
}

// The generation of quant_lanes_ref's order: part of a saved KV state's identity under q8/q4
// weights (kv_file.hpp), so that a state computed with another order is not taken for this one's.
// 2: one fma per block into 4 lanes (1: one per 4 values into 8 lanes of 2 accumulators).
inline constexpr std::int32_t quant_order_version = 2;

// Output (t, r) exactly as the SIMD kernels compute it (decode rows, and the int8 GEMM's prefill
// rows): per block b, the exact integer dot product of the block (block_dot), converted to float
// and added by one fma times the float product scale_w * scale_x into lane b % 4 of 4 float
// accumulators; then hsum4 of the 4, then the bias (or + 0.f). Integer sums are exact in any
// order, so each kernel groups a block's products as its registers suit; only the float steps are
// fixed: 4 accumulators leave the GEMM registers for 4 token rows, and the decode kernel's
// 8 block sums in a vector go in as two halves. It rounds differently from quant_dot_ref, which
// is the oracle of both.
template <QuantView W>
float quant_lanes_ref(const W& w, std::int64_t r, const Q8Rows& x, std::int64_t t, const float* bias) {
  const std::int64_t nb = w.blocks();
  float acc[4] = {};
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = block_scale(w, r, b) * x.scale[t * nb + b];
    acc[b % 4] = std::fma(static_cast<float>(block_dot(w, r, x, t, b)), d, acc[b % 4]);
  }
  return hsum4_order(acc) + (bias ? bias[r] : 0.f);
}

// Scalar reference of one output: sum over blocks of scale_w * scale_x * (exact integer dot), in
// double. The kernels sum the same products in float, in a fixed order per output.
template <QuantView W>
double quant_dot_ref(const W& w, std::int64_t r, const Q8Rows& x, std::int64_t t) {
  double acc = 0.0;
  for (std::int64_t b = 0; b < w.blocks(); ++b)
    acc += static_cast<double>(block_scale(w, r, b)) * x.scale[t * w.blocks() + b] * block_dot(w, r, x, t, b);
  return acc;
}

}  // namespace kylin::kernels
