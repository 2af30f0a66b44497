// Rows quantized to Q8_0/Q4_0 a block in registers: the activation rows of every quantized
// matmul (quantize_rows_q8_simd) and weight rows at load (quantize_weight_row_simd), each giving
// the bytes and scales of its scalar loop in quant.hpp bit for bit.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>

#include "kylin/kernels/int8.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels::detail {

#if defined(KYLIN_INT8_SIMD)
// max |x| over a block of 32.
inline float block_amax(const float* xb) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb));
  KYLIN_CPU_UNROLL for (int i = 1; i < 4; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}
// The block's 32 values as bytes, in order: round-half-to-even(x * inv) clamped to [lo, hi], plus
// add (the arithmetic of quant.hpp's scalar loops, so the same bytes).
inline __m256i block_levels(const float* xb, float inv, float lo, float hi, int add) {
  const __m256 scale = _mm256_set1_ps(inv), low = _mm256_set1_ps(lo), high = _mm256_set1_ps(hi);
  __m256i q[4];
  KYLIN_CPU_UNROLL for (int i = 0; i < 4; ++i) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[i] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, low), high)), _mm256_set1_epi32(add));
  }
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
}
#endif

// quantize_rows_q8's result bit for bit (the same max, scale and round-half-to-even), a block in
// registers: its scalar loop took ~1.5 % of a q8 prefill.
inline void quantize_rows_q8_simd(const float* x, std::int64_t n, std::int64_t cols, const Q8Rows& out) {
#if defined(KYLIN_INT8_SIMD)
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * cols + b * q8_block;
      const float d = block_amax(xb) / 127.f;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + t * cols + b * q8_block), block_levels(xb, d > 0.f ? 1.f / d : 0.f, -127.f, 127.f, 0));
      out.scale[t * nb + b] = d;
    }
#else
  quantize_rows_q8(x, n, cols, out);
#endif
}

// quantize_weight_row_q8 / _q4's bytes and scales bit for bit for finite rows, a block in
// registers: the scalar loops took ~3 and ~5 ns a weight, most of the time of quantizing a
// checkpoint at load (`--weights q8|q4`).
inline void quantize_weight_row_q8_simd(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
#if defined(KYLIN_INT8_SIMD)
  auto* q = static_cast<std::int8_t*>(out);
  auto* scale = reinterpret_cast<std::uint16_t*>(q + rows * cols);
  const std::int64_t nb = cols / q8_block;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * q8_block;
    const std::uint16_t h = f32_to_f16(block_amax(xb) / 127.f);
    const float d = f16_to_f32(h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * cols + b * q8_block), block_levels(xb, d > 0.f ? 1.f / d : 0.f, -127.f, 127.f, 0));
    scale[r * nb + b] = h;
  }
#else
  quantize_weight_row_q8(x, out, rows, cols, r);
#endif
}

inline void quantize_weight_row_q4_simd(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
#if defined(KYLIN_INT8_SIMD)
  auto* q = static_cast<std::uint8_t*>(out);
  auto* scale = reinterpret_cast<std::uint16_t*>(q + rows * (cols / 2));
  const Q4View w{q, scale, rows, cols};
  const std::int64_t nb = cols / q8_block;
  const __m256i high = _mm256_set1_epi8(static_cast<char>(0xF0));
  for (std::int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * q8_block;
    const float amax = block_amax(xb);
    unsigned at = 0;  // bit i: |x[i]| == amax
    KYLIN_CPU_UNROLL for (int i = 0; i < 4; ++i)
      at |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), _mm256_loadu_ps(xb + 8 * i)),
                                                                   _mm256_set1_ps(amax), _CMP_EQ_OQ)))
            << (8 * i);
    const float m = amax > 0.f ? xb[std::countr_zero(at)] : 0.f;  // the first value of largest magnitude, its sign kept
    const std::uint16_t h = f32_to_f16(m / -8.f);
    const float d = f16_to_f32(h);
    const __m256i level = block_levels(xb, d != 0.f ? 1.f / d : 0.f, -8.f, 7.f, 8);  // 0..15
    const Q4Block k = q4_block(w, r, b);
    auto* bytes = q + (k.bytes - w.q);
    if (k.shift == 0) {  // the pair's first block: the second one fills the high nibbles next
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes), level);
    } else if (k.shift == 4) {
      const __m256i low = _mm256_andnot_si256(high, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes), _mm256_or_si256(low, _mm256_and_si256(_mm256_slli_epi16(level, 4), high)));
    } else {  // an unpaired last block: values 16..31 in the high nibbles of 16 bytes
      const __m128i lo = _mm256_castsi256_si128(level), hi = _mm256_extracti128_si256(level, 1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes), _mm_or_si128(lo, _mm_and_si128(_mm_slli_epi16(hi, 4), _mm256_castsi256_si128(high))));
    }
    scale[r * nb + b] = h;
  }
#else
  quantize_weight_row_q4(x, out, rows, cols, r);
#endif
}

template <QuantView W>
void quantize_weight_row_simd(const float* x, void* out, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  if constexpr (std::same_as<W, Q8View>) quantize_weight_row_q8_simd(x, out, rows, cols, r);
  else quantize_weight_row_q4_simd(x, out, rows, cols, r);
}

}  // namespace kylin::kernels::detail
