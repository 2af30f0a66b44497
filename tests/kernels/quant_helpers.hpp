// Quantized-weight test helpers: Q8_0/Q4_0 matrices made by the kernels' quantizer, their values
// read back from the documented layout (not by the library's block_values), and the double
// oracle of the quantized product.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kylin/kernels/matmul.hpp"

namespace kylin::test {

// A Q8_0 or Q4_0 matrix quantized from float weights by the kernels' quantizer.
template <kernels::QuantView W>
struct QWeights {
  std::int64_t rows, cols;
  std::vector<std::int8_t> buffer;
  kernels::MatRef ref() const { return {W::dtype, buffer.data(), rows, cols}; }
  W view() const { return kernels::quant_view<W>(buffer.data(), rows, cols); }
};
using Q8Weights = QWeights<kernels::Q8View>;
using Q4Weights = QWeights<kernels::Q4View>;

template <kernels::QuantView W = kernels::Q8View>
QWeights<W> quantize(const std::vector<float>& w, std::int64_t rows, std::int64_t cols) {
  QWeights<W> q{rows, cols, std::vector<std::int8_t>(kernels::quant_bytes<W>(rows, cols))};
  for (std::int64_t r = 0; r < rows; ++r) kernels::quantize_weight_row<W>(w.data() + r * cols, q.buffer.data(), rows, cols, r);
  return q;
}

// Value (r, c) of a quantized matrix as its documentation lays it out (quant.hpp), not by the
// library's block_values. Q8_0: int8 [rows, cols]. Q4_0: 4-bit v + 8 in [rows, cols / 2] bytes;
// blocks 2k, 2k + 1 share 32 bytes (byte i: value i of 2k low, of 2k + 1 high); an unpaired last
// block's byte j holds its value j low and j + 16 high.
inline int value_at(const Q8Weights& w, std::int64_t r, std::int64_t c) { return w.view().q[r * w.cols + c]; }
inline int value_at(const Q4Weights& w, std::int64_t r, std::int64_t c) {
  const auto* row = reinterpret_cast<const std::uint8_t*>(w.buffer.data()) + r * (w.cols / 2);
  const std::int64_t b = c / 32, i = c % 32, nb = w.cols / 32;
  int byte = 0;
  if (b + 1 < nb || b % 2 == 1) byte = row[(b / 2) * 32 + i] >> (b % 2 ? 4 : 0);
  else byte = row[b * 16 + i % 16] >> (i < 16 ? 0 : 4);
  return (byte & 0x0F) - 8;
}
template <kernels::QuantView W>
float scale_at(const QWeights<W>& w, std::int64_t r, std::int64_t b) {
  return f16_to_f32(w.view().scale[r * (w.cols / 32) + b]);
}

// The oracle: each block of 32 activations quantized here (scale = max|x| / 127, values rounded
// to nearest), then sum over blocks of scale_w * scale_x * sum(q_w * q_x), all in double.
template <kernels::QuantView W>
std::vector<float> quant_oracle(const float* x, const QWeights<W>& w, const float* bias, std::int64_t T) {
  std::vector<float> y(static_cast<std::size_t>(T * w.rows));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double acc = bias ? bias[r] : 0.0;
      for (std::int64_t b = 0; b < w.cols / 32; ++b) {
        const float* xb = x + t * w.cols + b * 32;
        float amax = 0.f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(xb[i]));
        const float dx = amax / 127.f;
        double s = 0;
        for (int i = 0; i < 32; ++i) {
          const double qx = dx > 0 ? std::nearbyint(xb[i] * (1.f / dx)) : 0.0;
          s += qx * value_at(w, r, b * 32 + i);
        }
        acc += static_cast<double>(scale_at(w, r, b)) * dx * s;
      }
      y[static_cast<std::size_t>(t * w.rows + r)] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace kylin::test
