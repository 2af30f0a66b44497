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

// Activation rows as the GEMM reads them: the Q8_0 rows, and each block's vpdpbusd accumulator
// start (prepare_gemm_rows) for the weight formats the call has.
struct Q8GemmRows {
  Q8Rows rows;
  const std::int32_t* q8_start = nullptr;  // [n, cols / 32] Q8_0 weights' starts, or null
  const std::int32_t* q4_start = nullptr;  // [n, cols / 32] Q4_0 weights' starts, or null
};

// The GEMM's registers: one vector holds one output lane of `rows` consecutive weight rows, so
// vpdpbusd takes 4 bytes of an activation row broadcast against 4 bytes of each of those rows.
#if defined(KYLIN_VNNI_512)
struct QGemmVec {
  static constexpr std::int64_t rows = 16;
  static constexpr int panels = 2;  // a tile: 2 panels x 4 token rows
  static constexpr int tokens = 4;
  using I = __m512i;
  using F = __m512;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static I splat(std::int32_t v) { return _mm512_set1_epi32(v); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
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
  static constexpr int panels = 1;  // a tile: 1 panel x 4 token rows
  static constexpr int tokens = 4;
  using I = __m256i;
  using F = __m256;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static I splat(std::int32_t v) { return _mm256_set1_epi32(v); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
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

// Fills q8_start and q4_start (either may be null) for rows [0, n) of x. A block's products
// accumulate from exact_float_start (int8.hpp) less what the panel's unsigned weights add: Q8_0
// enters vpdpbusd as w + 128, Q4_0 as its stored v + 8, so 128 or 8 times the block's sum of x.
inline void prepare_gemm_rows(const Q8Rows& x, std::int64_t n, std::int32_t* q8_start, std::int32_t* q4_start) {
  const std::int64_t nb = x.cols / q8_block;
  const __m256i ones = _mm256_set1_epi8(1);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b) {
      const __m256i s4 = dot4(ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + t * x.cols + b * q8_block)));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
      const std::int32_t sum = _mm_cvtsi128_si32(s);
      if (q8_start) q8_start[t * nb + b] = exact_float_start - 128 * sum;
      if (q4_start) q4_start[t * nb + b] = exact_float_start - 8 * sum;
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
      KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < 8; ++i)
        tile[i] = i0 + i < valid ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + (r0 + i0 + i) * nb + b0)))
                                 : _mm256_setzero_ps();
      transpose8(tile);
      KYLIN_CPU_UNROLL for (int j = 0; j < 8; ++j) _mm256_storeu_ps(scale + (b0 + j) * QV::rows + i0, tile[j]);
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
      KYLIN_CPU_UNROLL for (int l = 0; l < 8; ++l)
        _mm256_storeu_ps(reinterpret_cast<float*>(values + ((b * 8 + l) * QV::rows + i0) * 4), tile[l]);
    }
  return {buf, values};
}

// The 4 float accumulators of TOK token rows x P panels' rows, as quant_lanes_ref: block b's
// exact integer dot product (8 vpdpbusd from its start, then the float trick of int8.hpp) times
// scale_w * scale_x by fma into lane b % 4, in block order. One pass over the blocks per lane
// (b = L, L + 4, ...), so a tile holds one float accumulator per output: registers left for
// P x TOK outputs, each activation broadcast feeding P panels and each weight load TOK rows.
template <bool Q4, int P, int TOK>
void qgemm_lanes(const QPanel* p, std::int64_t nb, const Q8GemmRows& x, std::int64_t t0, QV::F (&out)[P][TOK][4]) {
  const std::int8_t* xq[TOK];
  const std::int32_t* start[TOK];
  const float* scale[TOK];
  KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) {
    xq[t] = x.rows.q + (t0 + t) * x.rows.cols;
    start[t] = (Q4 ? x.q4_start : x.q8_start) + (t0 + t) * nb;
    scale[t] = x.rows.scale + (t0 + t) * nb;
  }
  const QV::F start_value = QV::splat(exact_float_start_value);
  KYLIN_CPU_UNROLL for (int lane = 0; lane < 4; ++lane) {
    QV::F acc[P][TOK];  // a local array: writing through `out` at every step made the compiler store each one
    KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
      KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) acc[i][t] = QV::zero();
    for (std::int64_t b = lane; b < nb; b += 4) {
      QV::I s[P][TOK];
      KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t)
        KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) s[i][t] = QV::splat(start[t][b]);
      KYLIN_CPU_UNROLL for (int l = 0; l < 8; ++l) {
        QV::I uv[P];
        KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) uv[i] = QV::load(p[i].values + (b * 8 + l) * QV::rows * 4);
        KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) {
          const QV::I xv = QV::splat(load4(xq[t] + b * q8_block + 4 * l));
          KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) s[i][t] = dot4_add(s[i][t], uv[i], xv);
        }
      }
      KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) {
        const QV::F dw = QV::load(p[i].scale + b * QV::rows);
        KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) acc[i][t] = QV::fma(QV::as_float(s[i][t]) - start_value, dw * QV::splat(scale[t][b]), acc[i][t]);
      }
    }
    KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
      KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) out[i][t][lane] = acc[i][t];
  }
}

// y[t0 + t, r0 + i * QV::rows + j] for TOK token rows and P panels (`valid` rows of the last): the
// 4 accumulators reduced in quant_lanes_ref's order, the bias added.
template <bool Q4, int P, int TOK>
void qgemm_tile(const QPanel* p, std::int64_t nb, const Q8GemmRows& x, std::int64_t t0, const float* bias, float* y, std::int64_t ldy,
                std::int64_t valid) {
  QV::F acc[P][TOK][4];
  qgemm_lanes<Q4, P, TOK>(p, nb, x, t0, acc);
  KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) {
    const std::int64_t rows = i + 1 < P ? QV::rows : valid;
    alignas(64) float b_rows[QV::rows] = {}, out[QV::rows];
    if (bias) std::copy_n(bias + i * QV::rows, rows, b_rows);
    KYLIN_CPU_UNROLL for (int t = 0; t < TOK; ++t) {
      const QV::F v = hsum4_order(acc[i][t]) + QV::load(b_rows);
      float* yt = y + (t0 + t) * ldy + i * QV::rows;
      if (rows == QV::rows) {
        QV::store(yt, v);
      } else {
        QV::store(out, v);
        std::copy_n(out, rows, yt);
      }
    }
  }
}

// Token rows a group of packed panels runs over at a time: their activations (int8 values and
// the blocks' starts) stay in L2 beside the panels, where a whole 512-row chunk's were read from
// further out for every panel.
inline constexpr std::int64_t qgemm_token_block = 32;

// Weight panels [p0, p1) of w (QV::rows rows each) over the T token rows of x into y[T, w.rows]:
// as many panels as buf (buf_floats) holds packed at once, then run over the tokens
// qgemm_token_block rows at a time, QV::panels panels together.
template <QuantView W>
void qgemm_panels(const W& w, const Q8GemmRows& x, std::int64_t T, const float* bias, float* y, std::int64_t p0, std::int64_t p1, float* buf,
                  std::int64_t buf_floats) {
  constexpr bool q4 = std::same_as<W, Q4View>;
  constexpr std::int64_t max_group = 64;
  const std::int64_t panel_floats = qpanel_floats(w.cols), fit = std::clamp<std::int64_t>(buf_floats / panel_floats, 1, max_group);
  const std::int64_t group = fit >= QV::panels ? fit / QV::panels * QV::panels : fit;  // whole tiles of panels
  QPanel packed[max_group];
  auto tiles = [&]<int P>(std::int64_t pi, std::int64_t t0, std::int64_t t1, const QPanel* panels) {
    const std::int64_t r0 = pi * QV::rows, valid = std::min(QV::rows, w.rows - r0 - (P - 1) * QV::rows);
    const float* b = bias ? bias + r0 : nullptr;
    std::int64_t t = t0;
    for (; t + QV::tokens <= t1; t += QV::tokens) qgemm_tile<q4, P, QV::tokens>(panels, w.blocks(), x, t, b, y + r0, w.rows, valid);
    for (; t < t1; ++t) qgemm_tile<q4, P, 1>(panels, w.blocks(), x, t, b, y + r0, w.rows, valid);
  };
  for (std::int64_t g0 = p0; g0 < p1; g0 += group) {
    const std::int64_t g1 = std::min(p1, g0 + group);
    for (std::int64_t pi = g0; pi < g1; ++pi) packed[pi - g0] = qgemm_pack(w, pi * QV::rows, buf + (pi - g0) * panel_floats);
    for (std::int64_t t0 = 0; t0 < T; t0 += qgemm_token_block) {
      const std::int64_t t1 = std::min(T, t0 + qgemm_token_block);
      std::int64_t pi = g0;
      for (; pi + QV::panels <= g1; pi += QV::panels) tiles.template operator()<QV::panels>(pi, t0, t1, packed + (pi - g0));
      for (; pi < g1; ++pi) tiles.template operator()<1>(pi, t0, t1, packed + (pi - g0));
    }
  }
}

}  // namespace kylin::kernels::detail

#endif
