// Prefill kernel: a register-tiled GEMM over packed f32 panels, for chunks of many token rows
// (kernels/matmul.hpp decides which rows take it). Oracle: matmul_ref (matmul.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <utility>

#include "kylin/kernels/panel.hpp"
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

// a[K][gemm_mr] = rows p*gemm_mr.. of x[T, K], transposed; rows past T are zero. Scalar
// reference of gemm_pack_x.
inline void gemm_pack_x_ref(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) {
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
    if (t >= T) {
      for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = 0.f;
      continue;
    }
    for (std::int64_t b = 0; b < nb; ++b) {
      const float d = x.scale[t * nb + b];
      const std::int8_t* q = x.q + t * K + b * q8_block;
      for (std::int64_t j = 0; j < q8_block; ++j) a[(b * q8_block + j) * gemm_mr + i] = q[j] * d;
    }
  }
}

// b[K][gemm_nr] = rows n0..n0+nv of W[.., K] widened and transposed; missing rows are zero.
// Scalar reference of gemm_pack_w.
template <class T>
void gemm_pack_w_ref(const T* w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
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
void gemm_pack_w_ref(const W& w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
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

#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)
// The packers move 8 x 8 tiles through registers: 8 rows of 8 columns in, 8 columns of 8 rows out.
// One element at a time, their strided stores were a large share of a prefill (a perf profile:
// docs/PERFORMANCE.md, "Prefill: weight panels packed through registers").
inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // s0 = [a0 b0 c0 d0 | a4 b4 c4 d4], s4 = the same of rows e..h, and so on
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

inline __m256 load8_as_float(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8_as_float(const bf16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#if defined(__F16C__)
inline __m256 load8_as_float(const f16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
inline __m256 load8_as_float(const std::int8_t* p, float d) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(d));
}

// Stores the transposed tile at b[k..k+8][j..j+8].
inline void store_tile8(__m256 (&r)[8], float* b, std::int64_t k, std::int64_t j) {
  transpose8(r);
  KYLIN_CPU_UNROLL for (int i = 0; i < 8; ++i) _mm256_store_ps(b + (k + i) * gemm_nr + j, r[i]);
}

// gemm_pack_x_ref's result through 8 x 8 tiles: 8 rows of 8 columns in, each column's 8 (or the
// panel's last 4 or 6) rows out. One element at a time it cost ~7 % of a K = 3072 product.
inline void gemm_pack_x(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) {
  static_assert(gemm_mr == 12 || gemm_mr == 6, "a panel is tiles of 8 rows and one of 4, or one of 6");
  const std::int64_t t0 = p * gemm_mr, K8 = K / 8 * 8;
  for (std::int64_t i0 = 0; i0 < gemm_mr; i0 += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, gemm_mr - i0);  // rows of this tile in the panel
    for (std::int64_t k = 0; k < K8; k += 8) {
      __m256 r[8];
      KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < 8; ++i) r[i] = i < n && t0 + i0 + i < T ? _mm256_loadu_ps(x + (t0 + i0 + i) * K + k) : _mm256_setzero_ps();
      transpose8(r);
      KYLIN_CPU_UNROLL for (std::int64_t c = 0; c < 8; ++c) {
        float* dst = a + (k + c) * gemm_mr + i0;
        if (n == 8) {
          _mm256_storeu_ps(dst, r[c]);
        } else {  // the last 4 rows of a 12-row panel, or a 6-row panel's
          _mm_storeu_ps(dst, _mm256_castps256_ps128(r[c]));
          if (n == 6) _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(r[c], 1));
        }
      }
    }
    for (std::int64_t i = i0; i < i0 + n; ++i)
      for (std::int64_t k = K8; k < K; ++k) a[k * gemm_mr + i] = t0 + i < T ? x[(t0 + i) * K + k] : 0.f;
  }
}

// The quantized packer reads gemm_nr weight rows side by side, and does more work per byte than
// the BF16 one: with each row's line asked for this far ahead it packs Q8_0 weights from DRAM
// faster (BF16 is no faster with it; docs/PERFORMANCE.md, "Prefill: weight panels packed through
// registers").
inline constexpr std::int64_t gemm_pack_prefetch_bytes = 1024;

template <class T>
concept Packable8 = requires(const T* p) { load8_as_float(p); };
#endif

#if !defined(__AVX2__) || defined(KYLIN_NO_SIMD)
inline void gemm_pack_x(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) { gemm_pack_x_ref(x, T, K, p, a); }
#endif

// gemm_pack_w_ref's result, 8 x 8 tiles at a time where the build has AVX2; a partial panel (the
// last of a matrix) and columns past the last multiple of 8 take the reference.
template <class T>
void gemm_pack_w(const T* w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)
  if constexpr (Packable8<T>) {
    if (nv == gemm_nr) {
      const std::int64_t K8 = K / 8 * 8;
      for (std::int64_t k = 0; k < K8; k += 8)
        for (std::int64_t j = 0; j < gemm_nr; j += 8) {
          __m256 r[8];
          KYLIN_CPU_UNROLL for (int i = 0; i < 8; ++i) r[i] = load8_as_float(w + (n0 + j + i) * K + k);
          store_tile8(r, b, k, j);
        }
      for (std::int64_t j = 0; j < gemm_nr; ++j)
        for (std::int64_t k = K8; k < K; ++k) b[k * gemm_nr + j] = to_float(w[(n0 + j) * K + k]);
      return;
    }
  }
#endif
  gemm_pack_w_ref(w, n0, nv, K, b);
}

template <QuantView W>
void gemm_pack_w(const W& w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)
  if (nv == gemm_nr) {
    std::int8_t v[8][q8_block];  // Q4_0: one block of 8 rows, as values
    const std::int8_t* src[8];
    float d[8];
    for (std::int64_t blk = 0; blk < w.blocks(); ++blk)
      for (std::int64_t j = 0; j < gemm_nr; j += 8) {
        KYLIN_CPU_UNROLL for (int i = 0; i < 8; ++i) {
          constexpr std::int64_t block_bytes = row_value_bytes<W>(q8_block);
          prefetch(reinterpret_cast<const char*>(w.q) + (n0 + j + i) * row_value_bytes<W>(K) + blk * block_bytes, gemm_pack_prefetch_bytes);
          if constexpr (std::same_as<W, Q8View>) {
            src[i] = w.q + (n0 + j + i) * K + blk * q8_block;
          } else {
            block_values(w, n0 + j + i, blk, v[i]);
            src[i] = v[i];
          }
          d[i] = block_scale(w, n0 + j + i, blk);
        }
        for (std::int64_t c = 0; c < q8_block; c += 8) {
          __m256 r[8];
          KYLIN_CPU_UNROLL for (int i = 0; i < 8; ++i) r[i] = load8_as_float(src[i] + c, d[i]);
          store_tile8(r, b, blk * q8_block + c, j);
        }
      }
    return;
  }
#endif
  gemm_pack_w_ref(w, n0, nv, K, b);
}

// The same from panel-major weights: the gemm_nr rows from n0 are whole panels (AVX2: one,
// AVX-512: two) or part of one (narrower vectors), zero past the last row, so packing is widening,
// a vector at a time (GCC made the plain loop half scalar).
template <class T>
void gemm_pack_w(const PanelRef<T>& w, std::int64_t n0, std::int64_t, std::int64_t K, float* b) {
  constexpr std::int64_t span = std::min(gemm_nr, panel_width);  // rows taken from one panel
  static_assert(gemm_nr % span == 0 && panel_width % span == 0, "GEMM weight panels tile the weight panels");
  for (std::int64_t j0 = 0; j0 < gemm_nr; j0 += span) {
    const std::int64_t p = (n0 + j0) / panel_width, at = (n0 + j0) % panel_width;
    const T* src = p < panel_count(w.rows) ? w.panel(p) + at : nullptr;
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t i = 0; i < span; i += lanes)
        (src ? load_as_float(src + k * panel_width + i) : fbatch(0.f)).store_aligned(b + k * gemm_nr + j0 + i);
  }
}

// The weight operand of gemm_tile: the tile's gemm_nr rows at column k as two lane-wide halves.
// Packed: widened by gemm_pack_w into b[K][gemm_nr] floats.
struct PackedB {
  const float* b;
  fbatch half(std::int64_t k, int h) const { return fbatch::load_aligned(b + k * gemm_nr + h * static_cast<std::int64_t>(lanes)); }
};

// Stored: read from the weight panels as they are and widened in registers (bf16 -> f32 is a
// shift; the same floats as PackedB's), each half at[h] + k * panel_width. With AVX2/AVX-512 this
// costs the tile nothing measurable (FMA-bound; the widening runs on other ports) and saves the
// widening pass, ~2 % of a BF16 pp512, and half the panel's L2 footprint.
template <class T>
struct StoredB {
  const T* at[2];
  fbatch half(std::int64_t k, int h) const { return load_as_float(at[h] + k * panel_width); }
};

// Whether gemm_panels reads weight panels of T as stored: where load_as_float is a few
// instructions (AVX2/AVX-512; f16 with F16C). Elsewhere each tile would redo, per token panel,
// the widening the packer does once per weight panel.
template <class T>
inline constexpr bool gemm_reads_stored = [] {
#if defined(__AVX2__) && !defined(KYLIN_NO_SIMD)
#if defined(__F16C__)
  if (std::same_as<T, f16_t>) return true;
#endif
  return std::same_as<T, bf16_t> || std::same_as<T, float>;
#else
  return false;
#endif
}();

// The stored operand for the gemm_nr rows from n0 of panel-major weights, where gemm_reads_stored.
template <class T>
  requires gemm_reads_stored<T>
StoredB<T> stored_operand(const PanelRef<T>& w, std::int64_t n0) {
  const auto half = [&](std::int64_t r) { return w.panel(r / panel_width) + r % panel_width; };
  return {{half(n0), half(n0 + static_cast<std::int64_t>(lanes))}};
}

// y[mv, nv] (row stride ldy) = a-panel · b-panel + bias, for the valid part of one tile.
template <class B>
void gemm_tile(const float* a, const B& b, std::int64_t K, const float* bias, float* y, std::int64_t ldy, std::int64_t mv,
               std::int64_t nv) {
  fbatch acc[gemm_mr][2];
  for (auto& row : acc) row[0] = row[1] = fbatch(0.f);
  for (std::int64_t k = 0; k < K; ++k) {
    const fbatch b0 = b.half(k, 0), b1 = b.half(k, 1);
    const float* ak = a + k * gemm_mr;
    KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < gemm_mr; ++i) {
      const fbatch ai(ak[i]);
      acc[i][0] = fma(ai, b0, acc[i][0]);
      acc[i][1] = fma(ai, b1, acc[i][1]);
    }
  }
  // Out by fixed indices (an accumulator indexed by a runtime row would put them all on the stack):
  // a whole tile's rows as vectors, a partial tile's through a row buffer.
  const bool whole = nv == gemm_nr;
  const fbatch bias0 = bias && whole ? fbatch::load_unaligned(bias) : fbatch(0.f);
  const fbatch bias1 = bias && whole ? fbatch::load_unaligned(bias + lanes) : fbatch(0.f);
  alignas(64) float row[gemm_nr];
  KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < gemm_mr; ++i) {
    if (i >= mv) break;
    if (whole) {
      (acc[i][0] + bias0).store_unaligned(y + i * ldy);
      (acc[i][1] + bias1).store_unaligned(y + i * ldy + lanes);
    } else {
      acc[i][0].store_aligned(row);
      acc[i][1].store_aligned(row + lanes);
      for (std::int64_t j = 0; j < nv; ++j) y[i * ldy + j] = row[j] + (bias ? bias[j] : 0.f);
    }
  }
}

// The bytes gemm_pack_w reads for the gemm_nr rows from n0 (their values: one range in every layout).
struct ByteRange {
  const char* at;
  std::int64_t bytes;
};
template <class T>
ByteRange gemm_panel_bytes(const T* w, std::int64_t n0, std::int64_t nv, std::int64_t K) {
  return {reinterpret_cast<const char*>(w + n0 * K), nv * K * static_cast<std::int64_t>(sizeof(T))};
}
template <class T>
ByteRange gemm_panel_bytes(const PanelRef<T>& w, std::int64_t n0, std::int64_t, std::int64_t K) {
  const std::int64_t p = n0 / panel_width, n = std::min(panel_count(w.rows) - p, (gemm_nr + panel_width - 1) / panel_width);
  return {reinterpret_cast<const char*>(w.panel(p)), n * panel_width * K * static_cast<std::int64_t>(sizeof(T))};
}
template <QuantView W>
ByteRange gemm_panel_bytes(const W& w, std::int64_t n0, std::int64_t nv, std::int64_t K) {
  return {reinterpret_cast<const char*>(w.q) + n0 * row_value_bytes<W>(K), nv * row_value_bytes<W>(K)};
}

// Output panels [p0, p1) of y[T, w.rows]: read each weight panel as stored where stored_operand
// has it, else widen it once, and run it over every token panel. The weights of the panel after
// each (this thread's next where threads walk contiguous shares of panels, as gemm_fused's do)
// are asked for a slice per token panel, so they arrive while this one computes: packing had
// waited on DRAM for them.
template <class W>  // const T* for T in bf16_t, f16_t, float; a PanelRef<T>; or a QuantView
void gemm_panels(const float* packed_x, W w, const float* bias, float* y, std::int64_t T_, std::int64_t rows,
                 std::int64_t K, std::int64_t p0, std::int64_t p1, float* packed_w) {
  const std::int64_t token_panels = gemm_token_panels(T_);
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t n0 = p * gemm_nr, nv = std::min(gemm_nr, rows - n0);
    const ByteRange next = n0 + gemm_nr < rows ? gemm_panel_bytes(w, n0 + gemm_nr, std::min(gemm_nr, rows - n0 - gemm_nr), K) : ByteRange{nullptr, 0};
    const std::int64_t slice = (next.bytes / token_panels + cache_line_bytes - 1) / cache_line_bytes * cache_line_bytes;
    const auto over_tokens = [&](const auto& b) {
      for (std::int64_t tp = 0; tp < token_panels; ++tp) {
        if (next.at) prefetch_lines(next.at, tp * slice, std::min(slice, next.bytes - tp * slice));
        const std::int64_t mv = std::min(gemm_mr, T_ - tp * gemm_mr);
        gemm_tile(packed_x + tp * K * gemm_mr, b, K, bias ? bias + n0 : nullptr, y + tp * gemm_mr * rows + n0, rows, mv, nv);
      }
    };
    if constexpr (requires { stored_operand(w, n0); }) {
      if (n0 + gemm_nr <= panel_count(w.rows) * panel_width) {  // both halves inside the stored panels
        over_tokens(stored_operand(w, n0));
        continue;
      }
    }
    gemm_pack_w(w, n0, nv, K, packed_w);
    over_tokens(PackedB{packed_w});
  }
}

}  // namespace kylin::kernels::detail
