// Prefill kernel: a register-tiled GEMM over packed f32 panels, for chunks of many token rows
// (kernels/matmul.hpp decides which rows take it). Oracle: matmul_ref (matmul.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels::detail {

// Prefill GEMM: a register-tiled micro-kernel computes a [gemm_mr tokens, gemm_nr outputs] tile
// of y from packed f32 panels: x as [K][gemm_mr] (packed once per call, shared by threads) and
// W as [K][gemm_nr] (widened from BF16/F16 once per panel, reused by every token panel).
// 2 x gemm_mr accumulators + 2 weight vectors + 1 broadcast fit the register file.
inline constexpr std::int64_t gemm_nr = 2 * static_cast<std::int64_t>(lanes);
inline constexpr std::int64_t gemm_mr = lanes >= 16 ? 12 : 6;

inline std::int64_t gemm_token_panels(std::int64_t T) { return (T + gemm_mr - 1) / gemm_mr; }

// a[K][gemm_mr] = rows p*gemm_mr.. of x[T, K], transposed; rows past T are zero.
inline void gemm_pack_x(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) {
  for (std::int64_t i = 0; i < gemm_mr; ++i) {
    const std::int64_t t = p * gemm_mr + i;
    if (t < T)
      for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = x[t * K + k];
    else
      for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = 0.f;
  }
}

// The same from activation rows quantized to Q8_0 blocks: each value q * scale, exact in float,
// so a GEMM row over Q8_0 weights sums the products the decode kernel sums (to f32 rounding).
inline void gemm_pack_x(const Q8Rows& x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) {
  const std::int64_t nb = K / q8_block;
  for (std::int64_t i = 0; i < gemm_mr; ++i) {
    const std::int64_t t = p * gemm_mr + i;
    for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = t < T ? x.q[t * K + k] * x.scale[t * nb + k / q8_block] : 0.f;
  }
}

// b[K][gemm_nr] = rows n0..n0+nv of W[.., K] widened and transposed; missing rows are zero.
template <class T>
void gemm_pack_w(const T* w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
  for (std::int64_t j = 0; j < gemm_nr; ++j) {
    if (j < nv) {
      const T* wr = w + (n0 + j) * K;
      for (std::int64_t k = 0; k < K; ++k) b[k * gemm_nr + j] = to_float(wr[k]);
    } else {
      for (std::int64_t k = 0; k < K; ++k) b[k * gemm_nr + j] = 0.f;
    }
  }
}

// The same for Q8_0/Q4_0 weights: each value q * scale, exact in float.
template <QuantView W>
void gemm_pack_w(const W& w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
  std::int8_t v[q8_block];
  for (std::int64_t j = 0; j < gemm_nr; ++j) {
    if (j < nv) {
      for (std::int64_t blk = 0; blk < w.blocks(); ++blk) {
        block_values(w, n0 + j, blk, v);
        const float d = block_scale(w, n0 + j, blk);
        for (std::int64_t i = 0; i < q8_block; ++i) b[(blk * q8_block + i) * gemm_nr + j] = v[i] * d;
      }
    } else {
      for (std::int64_t k = 0; k < K; ++k) b[k * gemm_nr + j] = 0.f;
    }
  }
}

// y[mv, nv] (row stride ldy) = a-panel · b-panel + bias, for the valid part of one tile.
inline void gemm_tile(const float* a, const float* b, std::int64_t K, const float* bias, float* y, std::int64_t ldy,
                      std::int64_t mv, std::int64_t nv) {
  fbatch acc[gemm_mr][2];
  for (auto& row : acc) row[0] = row[1] = fbatch(0.f);
  for (std::int64_t k = 0; k < K; ++k) {
    const fbatch b0 = fbatch::load_aligned(b + k * gemm_nr), b1 = fbatch::load_aligned(b + k * gemm_nr + lanes);
    const float* ak = a + k * gemm_mr;
#pragma GCC unroll 16
    for (std::int64_t i = 0; i < gemm_mr; ++i) {
      const fbatch ai(ak[i]);
      acc[i][0] = xsimd::fma(ai, b0, acc[i][0]);
      acc[i][1] = xsimd::fma(ai, b1, acc[i][1]);
    }
  }
  alignas(64) float row[gemm_nr];
  for (std::int64_t i = 0; i < mv; ++i) {
    acc[i][0].store_aligned(row);
    acc[i][1].store_aligned(row + lanes);
    float* yi = y + i * ldy;
    for (std::int64_t j = 0; j < nv; ++j) yi[j] = row[j] + (bias ? bias[j] : 0.f);
  }
}

// Output panels [p0, p1) of y[T, w.rows]: widen each weight panel once, run it over every token panel.
template <class W>  // const T* for T in bf16_t, f16_t, float; or a QuantView
void gemm_panels(const float* packed_x, W w, const float* bias, float* y, std::int64_t T_, std::int64_t rows,
                 std::int64_t K, std::int64_t p0, std::int64_t p1, float* packed_w) {
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t n0 = p * gemm_nr, nv = std::min(gemm_nr, rows - n0);
    gemm_pack_w(w, n0, nv, K, packed_w);
    for (std::int64_t tp = 0; tp < gemm_token_panels(T_); ++tp) {
      const std::int64_t mv = std::min(gemm_mr, T_ - tp * gemm_mr);
      gemm_tile(packed_x + tp * K * gemm_mr, packed_w, K, bias ? bias + n0 : nullptr, y + tp * gemm_mr * rows + n0, rows, mv, nv);
    }
  }
}

}  // namespace kylin::kernels::detail
