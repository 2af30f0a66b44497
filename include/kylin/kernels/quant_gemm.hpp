// Prefill rows over Q8_0/Q4_0 weights where the build has VNNI: an int8 GEMM (vpdpbusd) whose
// every output is the decode kernel's, bit for bit (quant_lanes_ref spells the order out), so a
// token's numbers are the same prefilled or decoded. Oracle: quant_dot_ref (quant.hpp).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>

#include "kylin/kernels/gemm.hpp"
#include "kylin/kernels/int8.hpp"
#include "kylin/kernels/quant.hpp"

#if defined(KYLIN_VNNI_256)

namespace kylin::kernels::detail {

// Activation rows as the GEMM reads them: the Q8_0 rows, and what each weight panel would
// otherwise recompute from them.
struct Q8GemmRows {
  Q8Rows rows;
  const std::int32_t* start4 = nullptr;  // [n, cols / 4] Q8_0: each 4 values' vpdpbusd accumulator start (prepare_gemm_rows)
  const float* sum8 = nullptr;          // [n, cols / 32] block_sum8 (Q4_0: the +8 of the stored values)
};

// The GEMM's registers: one vector holds one output lane of `rows` consecutive weight rows, so
// vpdpbusd takes 4 bytes of an activation row broadcast against 4 bytes of each of those rows.
#if defined(KYLIN_VNNI_512)
struct QGemmVec {
  static constexpr std::int64_t rows = 16;
  static constexpr int tokens = 2;  // token rows per tile: 2 x 8 lanes of accumulators of 32 registers (3 spilled, slower)
  using I = __m512i;
  using F = __m512;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static I splat(std::int32_t v) { return _mm512_set1_epi32(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F splat(float v) { return _mm512_set1_ps(v); }
  static F zero() { return _mm512_setzero_ps(); }
  static F as_float(I v) { return _mm512_castsi512_ps(v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#else
struct QGemmVec {
  static constexpr std::int64_t rows = 8;
  static constexpr int tokens = 1;  // 8 lanes of accumulators of 16 registers
  using I = __m256i;
  using F = __m256;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static I splat(std::int32_t v) { return _mm256_set1_epi32(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F splat(float v) { return _mm256_set1_ps(v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F as_float(I v) { return _mm256_castsi256_ps(v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#endif
using QV = QGemmVec;

inline std::int32_t load4(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Fills start4 (Q8_0 weights; may be null) and sum8 (Q4_0; may be null) for rows [0, n) of x.
// Q8_0's weights enter vpdpbusd as w + 128, so each 4 values' accumulator starts at
// exact_float_start (int8.hpp) less 128 * the 4 activations' sum.
inline void prepare_gemm_rows(const Q8Rows& x, std::int64_t n, std::int32_t* start4, float* sum8) {
  const std::int64_t nb = x.cols / q8_block;
  const __m256i c128 = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi8(1);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + t * x.cols + b * q8_block));
      if (start4)  // 128 * sum by vpdpbusd (0x80 unsigned is 128)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(start4 + (t * x.cols + b * q8_block) / 4),
                            _mm256_sub_epi32(_mm256_set1_epi32(exact_float_start), dot4(c128, q)));
      if (sum8) {  // the block's sum, exact in int32, then block_sum8's expression
        const __m256i s4 = dot4(ones, q);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        sum8[t * nb + b] = 8.f * x.scale[t * nb + b] * static_cast<float>(_mm_cvtsi128_si32(s));
      }
    }
}

// A weight panel: QV::rows weight rows from r0, for vpdpbusd's unsigned operand. Block b, lane l
// (values 4l..4l+3) of panel row i is at values[((b * 8 + l) * rows + i) * 4]: Q8_0 as w + 128,
// Q4_0 as the stored v + 8. Rows past the matrix are zero.
struct QPanel {
  const float* scale;           // [blocks][rows] the weight scales
  const std::uint8_t* values;   // [blocks][8][rows][4]
};

inline std::int64_t qpanel_floats(std::int64_t cols) { return cols / q8_block * QV::rows + cols * QV::rows / 4; }

// Row r's block b as the 32 unsigned bytes the panel holds.
inline __m256i unsigned_block(const Q8View& w, std::int64_t r, std::int64_t b) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q + r * w.cols + b * q8_block)),
                          _mm256_set1_epi8(static_cast<char>(0x80)));
}
inline __m256i unsigned_block(const Q4View& w, std::int64_t r, std::int64_t b) {
  const Q4Block k = q4_block(w, r, b);
  const __m256i low = _mm256_set1_epi8(0x0F);
  if (k.shift >= 0)
    return _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.bytes)), _mm_cvtsi32_si128(k.shift)), low);
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.bytes));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
}

// scale[b * QV::rows + i] = the f16 scale of block b of row r0 + i (0 past `valid` rows), 8 rows
// by 8 blocks at a time widened (vcvtph2ps) and transposed in registers: one scalar conversion
// per value took most of a panel's packing.
template <QuantView W>
void qgemm_pack_scales(const W& w, std::int64_t r0, std::int64_t valid, float* scale) {
  const std::int64_t nb = w.blocks(), nb8 = nb / 8 * 8;
  for (std::int64_t i0 = 0; i0 < QV::rows; i0 += 8) {
    for (std::int64_t b0 = 0; b0 < nb8; b0 += 8) {
      __m256 tile[8];
      for (std::int64_t i = 0; i < 8; ++i)
        tile[i] = i0 + i < valid ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + (r0 + i0 + i) * nb + b0)))
                                 : _mm256_setzero_ps();
      transpose8(tile);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(scale + (b0 + j) * QV::rows + i0, tile[j]);
    }
    for (std::int64_t b = nb8; b < nb; ++b)
      for (std::int64_t i = i0; i < i0 + 8; ++i) scale[b * QV::rows + i] = i < valid ? _cvtsh_ss(w.scale[(r0 + i) * nb + b]) : 0.f;
  }
}

// Packs the panel of rows [r0, r0 + QV::rows) of w into buf (qpanel_floats(w.cols) floats):
// 8 rows' blocks at a time as 8 x 8 tiles of 4-byte lanes, transposed in registers.
template <QuantView W>
QPanel qgemm_pack(const W& w, std::int64_t r0, float* buf) {
  const std::int64_t nb = w.blocks(), valid = std::min(QV::rows, w.rows - r0);
  auto* values = reinterpret_cast<std::uint8_t*>(buf + nb * QV::rows);
  qgemm_pack_scales(w, r0, valid, buf);
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t i0 = 0; i0 < QV::rows; i0 += 8) {
      __m256 tile[8];
      for (std::int64_t i = 0; i < 8; ++i) {
        if (i0 + i < valid) prefetch(w.q + (r0 + i0 + i) * row_value_bytes<W>(w.cols) + b * row_value_bytes<W>(q8_block), 1024);
        tile[i] = _mm256_castsi256_ps(i0 + i < valid ? unsigned_block(w, r0 + i0 + i, b) : _mm256_setzero_si256());
      }
      transpose8(tile);
      for (int l = 0; l < 8; ++l)
        _mm256_storeu_ps(reinterpret_cast<float*>(values + ((b * 8 + l) * QV::rows + i0) * 4), tile[l]);
    }
  return {buf, values};
}

// The 8 lanes of one output set (TOK token rows x QV::rows weight rows) over the blocks of one
// parity, in block order: out[t][l] = sum of float(lane sum) * (scale_w * scale_x) by fma, as
// quant_lanes_ref. The accumulators stay in registers (a local array: writing through `out`
// at every step made the compiler store each one).
template <bool Q4, int TOK>
void qgemm_parity(const QPanel& p, std::int64_t nb, const Q8GemmRows& x, std::int64_t t0, std::int64_t parity, QV::F (&out)[TOK][8]) {
  const std::int64_t K = x.rows.cols;
  const std::int8_t* xq[TOK];
  const std::int32_t* start4[TOK];
  const float* scale[TOK];
  QV::F acc[TOK][8];
  for (int t = 0; t < TOK; ++t) {
    xq[t] = x.rows.q + (t0 + t) * K;
    start4[t] = Q4 ? nullptr : x.start4 + (t0 + t) * (K / 4);
    scale[t] = x.rows.scale + (t0 + t) * nb;
    for (int l = 0; l < 8; ++l) acc[t][l] = QV::zero();
  }
  const QV::F start_value = QV::splat(exact_float_start_value);
  for (std::int64_t b = parity; b < nb; b += 2) {
    QV::F d[TOK];
    const QV::F dw = QV::load(p.scale + b * QV::rows);
    for (int t = 0; t < TOK; ++t) d[t] = dw * QV::splat(scale[t][b]);
    const std::uint8_t* u = p.values + b * 8 * QV::rows * 4;
    for (int l = 0; l < 8; ++l) {
      const QV::I uv = QV::load(u + l * QV::rows * 4);
      for (int t = 0; t < TOK; ++t) {
        const QV::I start = QV::splat(Q4 ? exact_float_start : start4[t][b * 8 + l]);
        const QV::F sum = QV::as_float(dot4_add(start, uv, QV::splat(load4(xq[t] + b * q8_block + 4 * l)))) - start_value;
        acc[t][l] = QV::fma(sum, d[t], acc[t][l]);
      }
    }
  }
  for (int t = 0; t < TOK; ++t)
    for (int l = 0; l < 8; ++l) out[t][l] = acc[t][l];
}

// y[t0 + t, r0 + i] for TOK token rows and the panel's `valid` rows: both parities' lanes summed
// and reduced in quant_lanes_ref's order, Q4_0's offset taken off, the bias added.
template <bool Q4, int TOK>
void qgemm_tile(const QPanel& p, std::int64_t nb, const Q8GemmRows& x, std::int64_t t0, const float* bias, float* y, std::int64_t ldy,
                std::int64_t valid) {
  QV::F even[TOK][8], odd[TOK][8];
  qgemm_parity<Q4, TOK>(p, nb, x, t0, 0, even);
  qgemm_parity<Q4, TOK>(p, nb, x, t0, 1, odd);
  alignas(64) float b_rows[QV::rows] = {}, out[QV::rows];
  if (bias) std::copy_n(bias, valid, b_rows);
  for (int t = 0; t < TOK; ++t) {
    QV::F lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = even[t][l] + odd[t][l];
    QV::F v = hsum8_order(lanes);
    if constexpr (Q4) {
      QV::F offset[8], tail = QV::zero();
      for (auto& o : offset) o = QV::zero();
      const float* sum8 = x.sum8 + (t0 + t) * nb;
      for (std::int64_t b = 0; b < nb / 8 * 8; ++b) offset[b % 8] = QV::fma(QV::load(p.scale + b * QV::rows), QV::splat(sum8[b]), offset[b % 8]);
      for (std::int64_t b = nb / 8 * 8; b < nb; ++b) tail = QV::fma(QV::load(p.scale + b * QV::rows), QV::splat(sum8[b]), tail);
      v = v - (hsum8_order(offset) + tail);
    }
    v = v + QV::load(b_rows);
    if (valid == QV::rows) {
      QV::store(y + (t0 + t) * ldy, v);
    } else {
      QV::store(out, v);
      std::copy_n(out, valid, y + (t0 + t) * ldy);
    }
  }
}

// Token rows a group of packed panels runs over at a time: their activations (int8 values and
// Q8_0's start4, 2 bytes per value) stay in L2 beside the panels, where a whole 512-row chunk's
// were read from further out for every panel.
inline constexpr std::int64_t qgemm_token_block = 32;

// Weight panels [p0, p1) of w (QV::rows rows each) over the T token rows of x into y[T, w.rows]:
// as many panels as buf (buf_floats) holds packed at once, then run over the tokens
// qgemm_token_block rows at a time.
template <QuantView W>
void qgemm_panels(const W& w, const Q8GemmRows& x, std::int64_t T, const float* bias, float* y, std::int64_t p0, std::int64_t p1, float* buf,
                  std::int64_t buf_floats) {
  constexpr bool q4 = std::same_as<W, Q4View>;
  constexpr std::int64_t max_group = 64;
  const std::int64_t panel_floats = qpanel_floats(w.cols), group = std::clamp<std::int64_t>(buf_floats / panel_floats, 1, max_group);
  QPanel packed[max_group];
  for (std::int64_t g0 = p0; g0 < p1; g0 += group) {
    const std::int64_t g1 = std::min(p1, g0 + group);
    for (std::int64_t pi = g0; pi < g1; ++pi) packed[pi - g0] = qgemm_pack(w, pi * QV::rows, buf + (pi - g0) * panel_floats);
    for (std::int64_t t0 = 0; t0 < T; t0 += qgemm_token_block) {
      const std::int64_t t1 = std::min(T, t0 + qgemm_token_block);
      for (std::int64_t pi = g0; pi < g1; ++pi) {
        const std::int64_t r0 = pi * QV::rows, valid = std::min(QV::rows, w.rows - r0);
        const float* b = bias ? bias + r0 : nullptr;
        std::int64_t t = t0;
        for (; t + QV::tokens <= t1; t += QV::tokens) qgemm_tile<q4, QV::tokens>(packed[pi - g0], w.blocks(), x, t, b, y + r0, w.rows, valid);
        for (; t < t1; ++t) qgemm_tile<q4, 1>(packed[pi - g0], w.blocks(), x, t, b, y + r0, w.rows, valid);
      }
    }
  }
}

}  // namespace kylin::kernels::detail

#endif
