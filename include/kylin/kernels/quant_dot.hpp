// The matmul over block-quantized weights (Q8_0, Q4_0: kernels/quant.hpp) for decode rows: each
// weight block against the activation row's Q8_0 block as an exact integer dot product, scaled.
// Oracle: quant_dot_ref (quant.hpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kylin/kernels/int8.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels::detail {

// Activation rows as the decode kernels read them: the Q8_0 rows, and what every weight row
// would otherwise recompute from them: |q| per value (vpmaddubsw's unsigned operand against Q8_0
// weights) and 8 * scale * sum(q) per block (Q4_0 values are stored as v + 8, and this is the +8).
struct Q8Operand {
  Q8Rows rows;
  const std::uint8_t* abs = nullptr;  // [n, cols]
  const float* sum8 = nullptr;        // [n, cols / 32]
};

// Fills abs and sum8 for rows [0, n) of x.
inline void prepare_operand(const Q8Rows& x, std::int64_t n, std::uint8_t* abs, float* sum8) {
  const std::int64_t nb = x.cols / q8_block;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b) {
      for (std::int64_t i = t * x.cols + b * q8_block; i < t * x.cols + (b + 1) * q8_block; ++i)
        abs[i] = static_cast<std::uint8_t>(std::abs(x.q[i]));
      sum8[t * nb + b] = block_sum8(x, t, b);
    }
}

#if defined(KYLIN_INT8_SIMD)

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline const __m256i* at(const void* p) { return static_cast<const __m256i*>(p); }

// How far ahead in a weight row (or the rows after it) the kernel asks for the values it will
// need: a quantized block takes several cycles of arithmetic per 16-32 bytes, too slow a stream
// for the hardware prefetcher to run far enough ahead on its own: requesting every line measured
// faster, and distances of 1-4 KB alike (docs/log/2026-11-header-comments.md).
inline constexpr std::int64_t quant_prefetch_bytes = 2048;

// p[t] = the 8 lane sums of block b of weight row r times activation row t0 + t (lane j: values
// 4j..4j+3), exact integers as floats, by lane_sums (int8.hpp) of unsigned and signed bytes. Q8_0: |x| times w carrying
// x's sign is x * w. Q4_0: the stored values v + 8 in [0, 15] times x directly; the 8 * sum(x)
// this adds is taken off per output.
template <int NB>
inline void block_products(const Q8View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m256 (&p)[NB]) {
  const __m256i wv = _mm256_loadu_si256(at(w.q + r * w.cols + b * q8_block));
  for (int t = 0; t < NB; ++t) {
    const std::int64_t k = (t0 + t) * x.rows.cols + b * q8_block;
    p[t] = lane_sums(_mm256_loadu_si256(at(x.abs + k)), _mm256_sign_epi8(wv, _mm256_loadu_si256(at(x.rows.q + k))));
  }
}
template <int NB>
inline void q4_products(__m256i nibbles, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m256 (&p)[NB]) {
  for (int t = 0; t < NB; ++t) p[t] = lane_sums(nibbles, _mm256_loadu_si256(at(x.rows.q + (t0 + t) * x.rows.cols + b * q8_block)));
}
template <int NB>
inline void block_products(const Q4View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m256 (&p)[NB]) {
  const Q4Block k = q4_block(w, r, b);
  const __m256i low = _mm256_set1_epi8(0x0F);
  if (k.shift >= 0)
    return q4_products(_mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(at(k.bytes)), _mm_cvtsi32_si128(k.shift)), low), x, t0, b, p);
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.bytes));
  q4_products(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low), x, t0, b, p);
}

// The scale products of blocks b..b+7 for each output of an R x NB tile (lane l: block b + l),
// Q4_0's offset lanes added to, and the tile's weight rows asked for quant_prefetch_bytes ahead.
template <int R, int NB, QuantView W>
inline void group_scales(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m256 (&d)[R][NB],
                         __m256 (&offset)[R][NB]) {
  const std::int64_t nb = w.blocks();
  for (int i = 0; i < R; ++i) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + (r0 + i) * nb + b)));
    for (int t = 0; t < NB; ++t) {
      d[i][t] = _mm256_mul_ps(dw, _mm256_loadu_ps(x.rows.scale + (t0 + t) * nb + b));
      if constexpr (std::same_as<W, Q4View>) offset[i][t] = _mm256_fmadd_ps(dw, _mm256_loadu_ps(x.sum8 + (t0 + t) * nb + b), offset[i][t]);
    }
  }
  constexpr std::int64_t group_bytes = 8 * row_value_bytes<W>(q8_block);
  for (int i = 0; i < R; ++i) {
    const char* next = reinterpret_cast<const char*>(w.q) + (r0 + i) * row_value_bytes<W>(w.cols) + b / 8 * group_bytes;
    for (std::int64_t line = 0; line < group_bytes; line += 64) _mm_prefetch(next + quant_prefetch_bytes + line, _MM_HINT_T0);
  }
}

#if defined(KYLIN_INT8_512)
// Block pairs in 512-bit vectors: lanes 0-7 hold block b's 8 lanes, 8-15 block b + 1's, so one
// dot4, one conversion and one FMA do what two of each do in 256 bits, lane for lane the same.
using PairAcc = __m512;

// p[t] = the lane sums of blocks b and b + 1 (b even) of weight row r times activation row t0 + t.
// Q8_0: as block_products, with w negated where x < 0 by a mask (AVX-512 has no vpsignb; where
// x = 0 the product is 0 either way). Q4_0: the pair's 32 bytes, low nibbles then high.
template <int NB>
inline void pair_products(const Q8View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m512 (&p)[NB]) {
  const __m512i wv = _mm512_loadu_si512(w.q + r * w.cols + b * q8_block);
  for (int t = 0; t < NB; ++t) {
    const std::int64_t k = (t0 + t) * x.rows.cols + b * q8_block;
    const __m512i xq = _mm512_loadu_si512(x.rows.q + k);
    p[t] = lane_sums(_mm512_loadu_si512(x.abs + k), _mm512_mask_sub_epi8(wv, _mm512_movepi8_mask(xq), _mm512_setzero_si512(), wv));
  }
}
template <int NB>
inline void pair_products(const Q4View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m512 (&p)[NB]) {
  const __m256i v = _mm256_loadu_si256(at(w.q + r * (w.cols / 2) + b / 2 * q8_block));
  const __m512i nibbles = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), _mm512_set1_epi8(0x0F));
  for (int t = 0; t < NB; ++t) p[t] = lane_sums(nibbles, _mm512_loadu_si512(x.rows.q + (t0 + t) * x.rows.cols + b * q8_block));
}

// acc[i][t] += the products of blocks b..b+7, pair by pair; d from group_scales.
template <int R, int NB, QuantView W>
inline void group_products(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, std::int64_t b, const __m256 (&d)[R][NB],
                           PairAcc (&acc)[R][NB]) {
  const __m512i pair_lanes = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);  // [0 x 8, 1 x 8]
  for (int j = 0; j < 8; j += 2) {
    const __m512i scale_at = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(j));
    for (int i = 0; i < R; ++i) {
      __m512 p[NB];
      pair_products<NB>(w, r0 + i, b + j, x, t0, p);
      for (int t = 0; t < NB; ++t)
        acc[i][t] = _mm512_fmadd_ps(p[t], _mm512_permutexvar_ps(scale_at, _mm512_castps256_ps512(d[i][t])), acc[i][t]);
    }
  }
}

// The even and the odd blocks' accumulators of a pair (halves split by a vector shuffle: the
// extract intrinsics trip GCC 12's -Wuninitialized, GCC bug 105593).
inline __m256 even_half(PairAcc v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline __m256 odd_half(PairAcc v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
#else
struct PairAcc {
  __m256 half[2];  // the even and the odd blocks' lanes
};

// Blocks b and b + 1 (b even, both in the row): for Q4_0 one load of their shared 32 bytes.
template <int NB, QuantView W>
inline void pair_products(const W& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m256 (&p)[2][NB]) {
  if constexpr (std::same_as<W, Q4View>) {
    const __m256i v = _mm256_loadu_si256(at(w.q + r * (w.cols / 2) + b / 2 * q8_block)), low = _mm256_set1_epi8(0x0F);
    q4_products(_mm256_and_si256(v, low), x, t0, b, p[0]);
    q4_products(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), x, t0, b + 1, p[1]);
  } else {
    block_products<NB>(w, r, b, x, t0, p[0]);
    block_products<NB>(w, r, b + 1, x, t0, p[1]);
  }
}

template <int R, int NB, QuantView W>
inline void group_products(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, std::int64_t b, const __m256 (&d)[R][NB],
                           PairAcc (&acc)[R][NB]) {
  for (int j = 0; j < 8; j += 2)
    for (int i = 0; i < R; ++i) {
      __m256 pp[2][NB];
      pair_products<NB>(w, r0 + i, b + j, x, t0, pp);
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < NB; ++t)
          acc[i][t].half[h] = _mm256_fmadd_ps(pp[h][t], _mm256_permutevar8x32_ps(d[i][t], _mm256_set1_epi32(j + h)), acc[i][t].half[h]);
    }
}

inline __m256 even_half(const PairAcc& v) { return v.half[0]; }
inline __m256 odd_half(const PairAcc& v) { return v.half[1]; }
#endif

// y[t, r0 + i] for NB token rows and R weight rows. Per output, two sets of 8 float lanes take
// the even and the odd blocks' (scale_w * scale_x) * (integer lane sums), in block order, so one
// row alone is not held up by the latency of a single accumulator chain; the scale products are
// made 8 blocks at a time. Then their sum, one horizontal sum, Q4_0's offset and the bias: the
// sums quant_lanes_ref (quant.hpp) spells out. Each output is computed the same way whatever R
// and NB are, so a row's result never depends on the batch.
template <int R, int NB, QuantView W>
void quant_tile(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, const float* bias, float* y, std::int64_t ldy) {
  constexpr bool q4 = std::same_as<W, Q4View>;
  const std::int64_t nb = w.blocks();
  PairAcc pairs[R][NB];
  __m256 acc[2][R][NB], offset[R][NB], d[R][NB];
  float offset_tail[R][NB];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) {
      pairs[i][t] = PairAcc{};
      offset[i][t] = _mm256_setzero_ps(), offset_tail[i][t] = 0.f;
    }
  std::int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    group_scales<R, NB>(w, r0, x, t0, b, d, offset);
    group_products<R, NB>(w, r0, x, t0, b, d, pairs);
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) acc[0][i][t] = even_half(pairs[i][t]), acc[1][i][t] = odd_half(pairs[i][t]);
  __m256 p[NB];
  for (; b < nb; ++b)  // the last nb % 8 blocks one at a time
    for (int i = 0; i < R; ++i) {
      const float dw = _cvtsh_ss(w.scale[(r0 + i) * nb + b]);
      block_products<NB>(w, r0 + i, b, x, t0, p);
      for (int t = 0; t < NB; ++t) {
        const __m256 dwx = _mm256_set1_ps(dw * x.rows.scale[(t0 + t) * nb + b]);
        acc[b & 1][i][t] = _mm256_fmadd_ps(p[t], dwx, acc[b & 1][i][t]);
        if constexpr (q4) offset_tail[i][t] = std::fma(dw, x.sum8[(t0 + t) * nb + b], offset_tail[i][t]);
      }
    }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) {
      float v = hsum(_mm256_add_ps(acc[0][i][t], acc[1][i][t]));
      if constexpr (q4) v -= hsum(offset[i][t]) + offset_tail[i][t];
      y[(t0 + t) * ldy + r0 + i] = v + (bias ? bias[r0 + i] : 0.f);
    }
}
#endif

#if defined(KYLIN_INT8_SIMD)
// max |x| over a block of 32.
inline float block_amax(const float* xb) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb));
  for (int i = 1; i < 4; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * i)));
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
  for (int i = 0; i < 4; ++i) {
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
    for (int i = 0; i < 4; ++i)
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

inline constexpr int quant_tile_rows = 2;
inline constexpr int quant_tile_tokens = 2;


// y[t, r] = x[t] · w[r] + bias[r] for token rows [0, n) and weight rows [r0, r1).
template <QuantView W>
void quant_rows(const W& w, std::int64_t r0, std::int64_t r1, const Q8Operand& x, std::int64_t n, const float* bias, float* y,
                std::int64_t ldy) {
#if defined(KYLIN_INT8_SIMD)
  auto tokens = [&]<int R>(std::int64_t r) {
    std::int64_t t = 0;
    for (; t + quant_tile_tokens <= n; t += quant_tile_tokens) quant_tile<R, quant_tile_tokens>(w, r, x, t, bias, y, ldy);
    for (; t < n; ++t) quant_tile<R, 1>(w, r, x, t, bias, y, ldy);
  };
  // Q4_0 takes two weight rows at a time even for one token (the scale and loop work is shared);
  // a single Q8_0 row at a time streams its twice as many bytes better, as for BF16 (timings:
  // docs/log/2026-11-header-comments.md).
  std::int64_t r = r0;
  if (n > 1 || std::same_as<W, Q4View>)
    for (; r + quant_tile_rows <= r1; r += quant_tile_rows) tokens.template operator()<quant_tile_rows>(r);
  for (; r < r1; ++r) tokens.template operator()<1>(r);
#else  // without AVX2 and F16C: the same sums in scalar code
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t t = 0; t < n; ++t) y[t * ldy + r] = quant_lanes_ref(w, r, x.rows, t, bias);
#endif
}

}  // namespace kylin::kernels::detail
