// 8-bit weights (DType::q8_0): blocks of 32 int8 values with one f16 scale each, quantized from the
// checkpoint at load, and the matmul over them: activation rows are quantized the same way at run
// time and each block pair is an exact integer dot product. Oracle: q8_dot_ref (scalar).
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

inline constexpr std::int64_t q8_block = 32;

// A [rows, cols] Q8_0 matrix in one buffer: the int8 values [rows, cols] row by row, then the f16
// scales [rows, cols / 32]; weight (r, c) = q[r, c] * scale[r, c / 32]. 34 bytes per 32 weights.
struct Q8View {
  const std::int8_t* q = nullptr;      // [rows, cols]
  const std::uint16_t* scale = nullptr;  // [rows, cols / q8_block] f16
  std::int64_t rows = 0, cols = 0;
  std::int64_t blocks() const { return cols / q8_block; }
};

inline std::size_t q8_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows * cols + rows * (cols / q8_block) * 2);
}
inline Q8View q8_view(const void* data, std::int64_t rows, std::int64_t cols) {
  const auto* q = static_cast<const std::int8_t*>(data);
  return {q, reinterpret_cast<const std::uint16_t*>(q + rows * cols), rows, cols};
}

// out[cols] = row r's values, q * scale (exact in float), the scale widened once per block.
inline void dequantize_row_q8(const Q8View& w, std::int64_t r, float* out) {
  for (std::int64_t b = 0; b < w.blocks(); ++b) {
    const float d = f16_to_f32(w.scale[r * w.blocks() + b]);
    for (std::int64_t i = b * q8_block; i < (b + 1) * q8_block; ++i) out[i] = w.q[r * w.cols + i] * d;
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

// Activation rows [0, n) of x [n, cols] into `out`.
inline void quantize_rows_q8(const float* x, std::int64_t n, std::int64_t cols, const Q8Rows& out) {
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b)
      out.scale[t * nb + b] =
          quantize_block_q8(x + t * cols + b * q8_block, out.q + t * cols + b * q8_block, [](float d) { return d; });
}

// The exact integer dot product of block b of weight row r and activation row t.
inline std::int32_t q8_block_dot(const Q8View& w, std::int64_t r, const Q8Rows& x, std::int64_t t, std::int64_t b) {
  std::int32_t s = 0;
  for (std::int64_t i = 0; i < q8_block; ++i)
    s += std::int32_t{w.q[r * w.cols + b * q8_block + i]} * std::int32_t{x.q[t * x.cols + b * q8_block + i]};
  return s;
}

// Scalar reference of one output: sum over blocks of scale_w * scale_x * (exact integer dot), in
// double. The kernels below sum the same products in float, in a fixed order per output.
inline double q8_dot_ref(const Q8View& w, std::int64_t r, const Q8Rows& x, std::int64_t t) {
  const std::int64_t nb = w.blocks();
  double acc = 0.0;
  for (std::int64_t b = 0; b < nb; ++b)
    acc += static_cast<double>(f16_to_f32(w.scale[r * nb + b])) * x.scale[t * nb + b] * q8_block_dot(w, r, x, t, b);
  return acc;
}

namespace detail {

#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)

// A weight block's f16 scale as float, by the F16C instruction where there is one.
inline float q8_scale(std::uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// acc[i][t] += (scale_w * scale_x) * (integer lane sums of block b) for R weight rows and NB tokens.
template <int R, int NB>
inline void q8_block_step(const Q8View& w, std::int64_t r0, const Q8Rows& x, std::int64_t t0, std::int64_t b, __m256 (&acc)[R][NB]) {
  const std::int64_t nb = w.blocks();
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i xv[NB], xabs[NB];
  for (int t = 0; t < NB; ++t) {
    xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * x.cols + b * q8_block));
    xabs[t] = _mm256_sign_epi8(xv[t], xv[t]);
  }
  for (int i = 0; i < R; ++i) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q + (r0 + i) * w.cols + b * q8_block));
    const __m256 dw = _mm256_set1_ps(q8_scale(w.scale[(r0 + i) * nb + b]));
    for (int t = 0; t < NB; ++t) {
      const __m256i p16 = _mm256_maddubs_epi16(xabs[t], _mm256_sign_epi8(wv, xv[t]));
      const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
      acc[i][t] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[(t0 + t) * nb + b])), acc[i][t]);
    }
  }
}

// y[t, r0 + i] for NB token rows and R weight rows. Per output, two sets of 8 float lanes take
// the even and the odd blocks' (scale_w * scale_x) * (integer lane sums), in block order, so one
// row alone is not held up by the latency of a single accumulator chain; then their sum, one
// horizontal sum and the bias. Each output is computed the same way whatever R and NB are, so a
// row's result never depends on the batch. vpmaddubsw multiplies unsigned by signed bytes: |x|
// times w carrying x's sign is x * w, and two products of values in [-127, 127] cannot saturate
// its int16 sums.
template <int R, int NB>
void q8_tile(const Q8View& w, std::int64_t r0, const Q8Rows& x, std::int64_t t0, const float* bias, float* y,
             std::int64_t ldy) {
  const std::int64_t nb = w.blocks();
  __m256 even[R][NB], odd[R][NB];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) even[i][t] = odd[i][t] = _mm256_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    q8_block_step<R, NB>(w, r0, x, t0, b, even);
    q8_block_step<R, NB>(w, r0, x, t0, b + 1, odd);
  }
  if (b < nb) q8_block_step<R, NB>(w, r0, x, t0, b, even);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t)
      y[(t0 + t) * ldy + r0 + i] = hsum(_mm256_add_ps(even[i][t], odd[i][t])) + (bias ? bias[r0 + i] : 0.f);
}
#endif

inline constexpr int q8_tile_rows = 2;
inline constexpr int q8_tile_tokens = 2;

// Without AVX2: each output as the scalar sum of q8_dot_ref's products, in float, block order.
inline void q8_one(const Q8View& w, std::int64_t r, const Q8Rows& x, std::int64_t t, const float* bias, float* y,
                   std::int64_t ldy) {
  const std::int64_t nb = w.blocks();
  float acc = 0.f;
  for (std::int64_t b = 0; b < nb; ++b)
    acc = std::fma(f16_to_f32(w.scale[r * nb + b]) * x.scale[t * nb + b], static_cast<float>(q8_block_dot(w, r, x, t, b)), acc);
  y[t * ldy + r] = acc + (bias ? bias[r] : 0.f);
}

// y[t, r] = x[t] · w[r] + bias[r] for token rows [0, n) and weight rows [r0, r1).
inline void q8_rows(const Q8View& w, std::int64_t r0, std::int64_t r1, const Q8Rows& x, std::int64_t n,
                    const float* bias, float* y, std::int64_t ldy) {
#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)
  auto tokens = [&]<int R>(std::int64_t r) {
    std::int64_t t = 0;
    for (; t + q8_tile_tokens <= n; t += q8_tile_tokens) q8_tile<R, q8_tile_tokens>(w, r, x, t, bias, y, ldy);
    for (; t < n; ++t) q8_tile<R, 1>(w, r, x, t, bias, y, ldy);
  };
  std::int64_t r = r0;
  if (n > 1)  // a single token streams one weight row at a time, which the hardware prefetcher follows best
    for (; r + q8_tile_rows <= r1; r += q8_tile_rows) tokens.template operator()<q8_tile_rows>(r);
  for (; r < r1; ++r) tokens.template operator()<1>(r);
#else
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t t = 0; t < n; ++t) q8_one(w, r, x, t, bias, y, ldy);
#endif
}

}  // namespace detail
}  // namespace kylin::kernels
