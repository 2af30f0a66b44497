// Opt-in prefill GEMM for BF16 weights on activations rounded to BF16 (PrefillActivations::bf16):
// `vdpbf16ps` multiplies two BF16 pairs per f32 lane, twice the products of an FMA. Not exact
// like the f32 path (docs/PERFORMANCE.md); oracle: gemm_bf16_ref, the instruction's arithmetic.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/gemm.hpp"
#include "kylin/kernels/matmul_pass.hpp"
#include "kylin/kernels/matmul_scratch.hpp"
#include "kylin/kernels/panel.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// `vcvtneps2bf16`: round to nearest even; a zero or denormal becomes a zero of its sign, a NaN a
// quiet NaN, an infinity stays one (Intel SDM, convert_fp32_to_bfloat16).
inline bf16_t round_to_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7f800000u) == 0) return {static_cast<std::uint16_t>((u >> 16) & 0x8000u)};
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  return {static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// One of `vdpbf16ps`'s two steps: acc + a * b in one rounding (a product of two BF16 values is
// exact in f32), denormal inputs read as zero and a denormal result flushed to zero. The
// instruction adds the odd pair, then the even one (Intel SDM; the same bits on Zen 5, tested).
inline float bf16_dot_step(float acc, float a, float b) {
  const auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.f, v) : v; };
  return flush(std::fma(flush(a), flush(b), flush(acc)));
}

// y[t, r] = x[t, :] · w[r, :] + bias[r] as the kernel computes it: x rounded by round_to_bf16,
// pairs (2i, 2i + 1) from column 0 (an odd K's last pair padded with zeros), each pair's odd step
// then its even one, from 0. w: BF16, either layout.
inline void gemm_bf16_ref(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T) {
  assert(w.dtype == DType::bf16 && "the BF16 GEMM takes BF16 weights");
  const std::int64_t K = w.cols;
  const PanelRef<bf16_t> panels{static_cast<const bf16_t*>(w.data), w.rows, w.cols};
  const auto weight = [&](std::int64_t r, std::int64_t k) {
    if (k >= K) return 0.f;
    return to_float(w.layout == Layout::panels ? panels.at(r, k) : static_cast<const bf16_t*>(w.data)[r * K + k]);
  };
  const auto act = [&](std::int64_t t, std::int64_t k) { return k < K ? to_float(round_to_bf16(x[t * K + k])) : 0.f; };
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      float acc = 0.f;
      for (std::int64_t k = 0; k < K; k += 2) {
        acc = bf16_dot_step(acc, act(t, k + 1), weight(r, k + 1));
        acc = bf16_dot_step(acc, act(t, k), weight(r, k));
      }
      y[t * w.rows + r] = acc + (bias ? bias[r] : 0.f);
    }
}

}  // namespace kylin::kernels

#if defined(__AVX512BW__) && !defined(KYLIN_NO_SIMD)
#include <immintrin.h>
#define KYLIN_BF16_DOT 1
// Compiled into the AVX-512 kernel sets for CPUs that have AVX512_BF16 beside them (Zen 4 and
// later, Cooper Lake, Sapphire Rapids and later), and taken only where the CPU says it has it.
#define KYLIN_BF16_TARGET [[gnu::target("avx512bf16")]]

namespace kylin::kernels::detail {

// Pairs of BF16 values, one per u32 (the even column in the low half): the GEMM's operands.
// a[K2][gemm_mr]: rows p*gemm_mr.. of x[T, K] rounded; rows past T are zero.
KYLIN_BF16_TARGET inline void bf16_pack_x(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, std::uint32_t* a) {
  static_assert(gemm_mr == 12, "a panel is tiles of 8 rows and one of 4");
  const std::int64_t t0 = p * gemm_mr, K2 = (K + 1) / 2, K16 = K / 16 * 16;
  for (std::int64_t i0 = 0; i0 < gemm_mr; i0 += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, gemm_mr - i0);  // rows of this tile in the panel
    for (std::int64_t k = 0; k < K16; k += 16) {
      __m256 r[8];  // 8 rows of 8 pairs, as bits
      KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < 8; ++i) {
        const bool valid = i < n && t0 + i0 + i < T;
        r[i] = valid ? _mm256_castsi256_ps((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + (t0 + i0 + i) * K + k))) : _mm256_setzero_ps();
      }
      transpose8(r);
      KYLIN_CPU_UNROLL for (std::int64_t c = 0; c < 8; ++c) {
        float* dst = reinterpret_cast<float*>(a + (k / 2 + c) * gemm_mr + i0);
        if (n == 8) _mm256_storeu_ps(dst, r[c]);
        else _mm_storeu_ps(dst, _mm256_castps256_ps128(r[c]));  // the last 4 rows of a 12-row panel
      }
    }
    for (std::int64_t i = i0; i < i0 + n; ++i)
      for (std::int64_t k2 = K16 / 2; k2 < K2; ++k2) {
        const auto value = [&](std::int64_t k) -> std::uint32_t { return t0 + i < T && k < K ? round_to_bf16(x[(t0 + i) * K + k]).bits : 0; };
        a[k2 * gemm_mr + i] = value(2 * k2) | value(2 * k2 + 1) << 16;
      }
  }
}

// b[K2][gemm_nr]: rows n0.. of panel-major weights (two panels, zero past the last), column pairs.
KYLIN_BF16_TARGET inline void bf16_pack_w(const PanelRef<bf16_t>& w, std::int64_t n0, std::int64_t, std::int64_t K, std::uint32_t* b) {
  static_assert(gemm_nr == 2 * panel_width, "a GEMM tile is two weight panels");
  alignas(64) static constexpr std::uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                               8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(interleave);
  for (std::int64_t h = 0; h < 2; ++h) {
    const std::int64_t p = n0 / panel_width + h;
    const bf16_t* src = p < panel_count(w.rows) ? w.panel(p) : nullptr;
    for (std::int64_t k = 0; k < K; k += 2) {  // columns k and k + 1: 32 adjacent values
      const __mmask32 valid = k + 1 < K ? ~__mmask32{0} : __mmask32{0xffff};
      const __m512i v = src ? _mm512_maskz_loadu_epi16(valid, src + k * panel_width) : _mm512_setzero_si512();
      _mm512_storeu_si512(b + k / 2 * gemm_nr + h * panel_width, _mm512_permutexvar_epi16(idx, v));
    }
  }
}

// The same from row-major weights: each row's pair is already adjacent; 8 x 8 pairs transposed.
KYLIN_BF16_TARGET inline void bf16_pack_w(const bf16_t* w, std::int64_t n0, std::int64_t nv, std::int64_t K, std::uint32_t* b) {
  const std::int64_t K2 = (K + 1) / 2, fast = K % 2 == 0 && nv == gemm_nr ? K2 / 8 * 8 : 0;
  for (std::int64_t k2 = 0; k2 < fast; k2 += 8)
    for (std::int64_t j = 0; j < gemm_nr; j += 8) {
      __m256 r[8];
      KYLIN_CPU_UNROLL for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(w + (n0 + j + i) * K + 2 * k2));
      transpose8(r);
      KYLIN_CPU_UNROLL for (int c = 0; c < 8; ++c) _mm256_storeu_ps(reinterpret_cast<float*>(b + (k2 + c) * gemm_nr + j), r[c]);
    }
  for (std::int64_t k2 = fast; k2 < K2; ++k2)
    for (std::int64_t j = 0; j < gemm_nr; ++j) {
      const bf16_t* row = w + (n0 + j) * K;
      const std::uint32_t lo = j < nv ? row[2 * k2].bits : 0, hi = j < nv && 2 * k2 + 1 < K ? row[2 * k2 + 1].bits : 0;
      b[k2 * gemm_nr + j] = lo | hi << 16;
    }
}

// y[mv, nv] (row stride ldy) = a-panel · b-panel + bias, for the valid part of one tile.
KYLIN_BF16_TARGET inline void bf16_tile(const std::uint32_t* a, const std::uint32_t* b, std::int64_t K2, const float* bias, float* y,
                                        std::int64_t ldy, std::int64_t mv, std::int64_t nv) {
  __m512 acc[gemm_mr][2];
  KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < gemm_mr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (std::int64_t k2 = 0; k2 < K2; ++k2) {
    const auto b0 = (__m512bh)_mm512_loadu_si512(b + k2 * gemm_nr), b1 = (__m512bh)_mm512_loadu_si512(b + k2 * gemm_nr + 16);
    const std::uint32_t* ak = a + k2 * gemm_mr;
    KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < gemm_mr; ++i) {
      const auto ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(ak[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
  const bool whole = nv == gemm_nr;
  const __m512 bias0 = bias && whole ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias && whole ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
  alignas(64) float row[gemm_nr];
  KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < gemm_mr; ++i) {
    if (i >= mv) break;
    if (whole) {
      _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(acc[i][0], bias0));
      _mm512_storeu_ps(y + i * ldy + 16, _mm512_add_ps(acc[i][1], bias1));
    } else {
      _mm512_store_ps(row, acc[i][0]);
      _mm512_store_ps(row + 16, acc[i][1]);
      for (std::int64_t j = 0; j < nv; ++j) y[i * ldy + j] = row[j] + (bias ? bias[j] : 0.f);
    }
  }
}

// Output panels [p0, p1) of y[T, rows]: each weight panel packed once, then every token panel;
// the next panel's bytes asked for a slice per token panel, as gemm_panels does.
template <class W>  // PanelRef<bf16_t> or const bf16_t*
KYLIN_BF16_TARGET void bf16_gemm_panels(const std::uint32_t* packed_x, const W& w, const float* bias, float* y, std::int64_t T,
                                        std::int64_t rows, std::int64_t K, std::int64_t p0, std::int64_t p1, std::uint32_t* packed_w) {
  const std::int64_t token_panels = gemm_token_panels(T), K2 = (K + 1) / 2;
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t n0 = p * gemm_nr, nv = std::min(gemm_nr, rows - n0);
    const ByteRange next = n0 + gemm_nr < rows ? gemm_panel_bytes(w, n0 + gemm_nr, std::min(gemm_nr, rows - n0 - gemm_nr), K) : ByteRange{nullptr, 0};
    const std::int64_t slice = (next.bytes / token_panels + cache_line_bytes - 1) / cache_line_bytes * cache_line_bytes;
    bf16_pack_w(w, n0, nv, K, packed_w);
    for (std::int64_t tp = 0; tp < token_panels; ++tp) {
      if (next.at) prefetch_lines(next.at, tp * slice, std::min(slice, next.bytes - tp * slice));
      bf16_tile(packed_x + tp * K2 * gemm_mr, packed_w, K2, bias ? bias + n0 : nullptr, y + tp * gemm_mr * rows + n0, rows,
                std::min(gemm_mr, T - tp * gemm_mr), nv);
    }
  }
}

// Output panels [p0, p1) of one product over its rows packed at x, in either weight layout.
KYLIN_BF16_TARGET inline void bf16_product_panels(const std::uint32_t* x, const MatmulOut& o, std::int64_t T, std::int64_t p0,
                                                  std::int64_t p1, std::uint32_t* packed_w) {
  const MatRef& w = o.w;
  const auto* data = static_cast<const bf16_t*>(w.data);
  if (w.layout == Layout::panels) bf16_gemm_panels(x, PanelRef<bf16_t>{data, w.rows, w.cols}, o.bias, o.y, T, w.rows, w.cols, p0, p1, packed_w);
  else bf16_gemm_panels(x, data, o.bias, o.y, T, w.rows, w.cols, p0, p1, packed_w);
}

// gemm_fused's twin for BF16 weights: x[T, K] rounded and packed once, then the outputs' weight
// panels in contiguous shares. packed_x and packed_w: the f32 GEMM's buffers (pairs take half).
KYLIN_BF16_TARGET inline void gemm_bf16_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t T, ThreadPool& pool,
                                              float* packed_x, std::vector<float*>& packed_w) {
  const std::int64_t K = outs[0].w.cols, K2 = (K + 1) / 2;
  auto* const ax = reinterpret_cast<std::uint32_t*>(packed_x);
  parallel_chunks(pool, gemm_token_panels(T), 1, [&](int, std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) bf16_pack_x(x, T, K, p, ax + p * K2 * gemm_mr);
  });
  const auto panels = [](const MatmulOut& o) { return (o.w.rows + gemm_nr - 1) / gemm_nr; };
  std::int64_t total = 0;
  for (const auto& o : outs) total += panels(o);
  parallel_shares(pool, total, 1, [&](int t, std::int64_t p0, std::int64_t p1) {
    auto* const pw = reinterpret_cast<std::uint32_t*>(packed_w[static_cast<std::size_t>(t)]);
    for_units(outs, p0, p1, panels, [&](const MatmulOut& o, std::int64_t b, std::int64_t e) { bf16_product_panels(ax, o, T, b, e, pw); });
  });
}

// matmul_each under PrefillActivations::bf16 (an MoE layer's expert products): those of gemm_mr
// rows or more through the BF16 GEMM in one pass, each input rounded and packed once (an expert's
// gate and up share theirs); the others through the exact decode kernel first.
KYLIN_BF16_TARGET inline void gemm_bf16_each(std::span<const DotProduct> products, ThreadPool& pool, MatmulScratch& scratch) {
  auto &few = scratch.few_rows, &many = scratch.many_rows;
  few.clear();
  many.clear();
  for (const DotProduct& p : products) (p.n >= gemm_mr ? many : few).push_back(p);
  if (!few.empty()) dot_each(few, pool, scratch);
  if (many.empty()) return;
  auto* const ax = reinterpret_cast<std::uint32_t*>(scratch.packed_x.get());
  std::int64_t at = 0, rows = 0;  // u32s of packed pairs so far, rows packed
  for (std::size_t i = 0; i < many.size(); ++i) {
    if (shares_input(many, i)) {
      scratch.bf16_at[i] = scratch.bf16_at[i - 1];
      continue;
    }
    scratch.bf16_at[i] = at;
    at += gemm_token_panels(many[i].n) * gemm_mr * ((many[i].out.w.cols + 1) / 2);
    rows += many[i].n;
  }
  assert(at <= gemm_token_panels(scratch.max_rows) * gemm_mr * scratch.max_cols && "packed BF16 rows fit the scratch");
  prepare_each(many.size(), rows, pool, [&](std::size_t i) {
    if (shares_input(many, i)) return;
    const DotProduct& p = many[i];
    const std::int64_t K = p.out.w.cols, K2 = (K + 1) / 2;
    for (std::int64_t tp = 0; tp < gemm_token_panels(p.n); ++tp) bf16_pack_x(p.x, p.n, K, tp, ax + scratch.bf16_at[i] + tp * K2 * gemm_mr);
  });
  const auto panels = [](const DotProduct& p) { return (p.out.w.rows + gemm_nr - 1) / gemm_nr; };
  std::int64_t total = 0;
  for (const DotProduct& p : many) total += panels(p);
  parallel_shares(pool, total, 1, [&](int t, std::int64_t u0, std::int64_t u1) {
    auto* const pw = reinterpret_cast<std::uint32_t*>(scratch.packed_w_ptrs[static_cast<std::size_t>(t)]);
    for_units(std::span<const DotProduct>(many), u0, u1, panels, [&](const DotProduct& p, std::int64_t b, std::int64_t e) {
      bf16_product_panels(ax + scratch.bf16_at[static_cast<std::size_t>(&p - many.data())], p.out, p.n, b, e, pw);
    });
  });
}

// `chains` independent vdpbf16ps chains of one vector each, `steps` steps: fma_chains
// (probes.hpp) for the instruction the BF16 GEMM's tile runs.
template <int chains>
KYLIN_BF16_TARGET float bf16_dot_chains(std::int64_t steps, float seed) {
  __m512 acc[chains];
  KYLIN_CPU_UNROLL for (int i = 0; i < chains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const auto a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // 1.0, ~1e-7
  for (std::int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 32
    for (int i = 0; i < chains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  KYLIN_CPU_UNROLL for (int i = 1; i < chains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lane[16];  // not _mm512_reduce_add_ps: it trips GCC 12's -Wuninitialized (bug 105593)
  _mm512_store_ps(lane, sum);
  float total = 0.f;
  for (float x : lane) total += x;
  return total;
}

}  // namespace kylin::kernels::detail
#endif

namespace kylin::kernels {

// Whether this kernel set and this CPU run the BF16 GEMM.
inline bool bf16_gemm_supported() {
#if defined(KYLIN_BF16_DOT)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace kylin::kernels
