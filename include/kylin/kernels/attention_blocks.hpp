// The row-at-a-time pieces of tiled attention: scores of a few query rows against a tile of
// keys (a transposing reduction per `lanes` scores), the tile's max and exponentials, and the
// value sums; attention.hpp runs them over tiles with an online softmax.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// Keys per tile of the online softmax: a tile of f16 V rows at head_dim 128 (16 KB) stays in L1.
inline constexpr std::int64_t attention_tile = 64;

namespace detail {

// x[i] = exp(x[i] - m), returns the sum: lane l of one vector sums i = l, l + lanes, ..., then
// xsimd::hadd. A last partial vector reads -inf past n, whose exp adds +0 to its lanes, so the
// sum is the bits of the same keys in a longer row whose later scores are -inf (the wide pass
// masks a tile's keys that a row does not see that way: attention_wide.hpp).
inline float exp_shift_sum(float* x, std::int64_t n, float m) {
  float sum = 0.f;
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    constexpr auto L = static_cast<std::int64_t>(lanes);
    fbatch acc(0.f);
    const fbatch mv(m);
    for (; i + L <= n; i += L) {
      const fbatch e = xsimd::exp(fbatch::load_unaligned(x + i) - mv);
      e.store_unaligned(x + i);
      acc += e;
    }
    if (i < n) {
      alignas(64) float tail[lanes];
      std::fill_n(tail, L, -std::numeric_limits<float>::infinity());
      std::copy(x + i, x + n, tail);
      const fbatch e = xsimd::exp(fbatch::load_aligned(tail) - mv);
      e.store_aligned(tail);
      std::copy_n(tail, n - i, x + i);
      acc += e;
      i = n;
    }
    sum = xsimd::hadd(acc);
  }
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
  return sum;
}

// max(x[0..n)), vectorised: a scalar max chain costs ~3 cycles per key and head.
inline float max_of(const float* x, std::int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    fbatch mv(m);
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes) mv = xsimd::max(mv, fbatch::load_unaligned(x + i));
    alignas(64) float tmp[lanes];
    mv.store_aligned(tmp);
    m = *std::max_element(tmp, tmp + lanes);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// How far ahead of its reads attention prefetches K and V rows: the matvec's distance.
inline constexpr std::int64_t attention_prefetch_bytes = 4096;

// Query rows scored together in one pass over keys (score_pairs): each (row, key) pair of a pass
// is one accumulator, `lanes` pairs a pass, so that one transposing reduction (hadd_rows) sums
// them all. 4 rows x 4 keys (AVX-512) load 8 vectors per 16 FMAs; more rows take turns over the
// same keys, then in L1.
template <int NG>
inline constexpr int score_rows = static_cast<int>(std::bit_floor(static_cast<unsigned>(std::min<int>(NG, lanes >= 16 ? 4 : 2))));

// sc[g][j0 + i] = scale * q_g · k_{j0+i} for SB query rows and the KG = lanes / SB keys from j0,
// of which the first nv are stored (the others repeat key j0 + nv - 1, so that nothing past the
// tile is read). Pair (g, i) is accumulator g * KG + i: lane partial sums over D, then hadd_rows,
// whose sum of a row is the same bits in any slot, so a score does not depend on the pass's shape.
template <int SB, class T>
[[gnu::always_inline]] inline void score_pairs(const float* const* q, const T* k, float* sc, std::int64_t j0, std::int64_t nv,
                                                std::int64_t D, float scale) {
  constexpr int KG = static_cast<int>(lanes) / SB;
  const T* key[KG];
  KYLIN_CPU_UNROLL for (int i = 0; i < KG; ++i) key[i] = k + (j0 + std::min<std::int64_t>(i, nv - 1)) * D;
  fbatch acc[lanes];
  // zeroed one by one, not by a loop, which GCC turns into a memset of the array in memory
  [&]<std::size_t... I>(std::index_sequence<I...>) { ((acc[I] = fbatch(0.f)), ...); }(std::make_index_sequence<lanes>{});
  for (std::int64_t c = 0; c < D; c += lanes) {
    fbatch kv[KG];
    KYLIN_CPU_UNROLL for (int i = 0; i < KG; ++i) {
      kv[i] = load_as_float(key[i] + c);
      if constexpr (KG + static_cast<int>(lanes) < (lanes >= 16 ? 32 : 16)) keep_in_register(kv[i]);  // when they fit
    }
    KYLIN_CPU_UNROLL for (int g = 0; g < SB; ++g) {
      fbatch qg = fbatch::load_unaligned(q[g] + c);
      keep_in_register(qg);  // GCC otherwise reloads it for each key as an FMA operand
      KYLIN_CPU_UNROLL for (int i = 0; i < KG; ++i) acc[g * KG + i] = fma(qg, kv[i], acc[g * KG + i]);
    }
  }
  alignas(64) float s[lanes];
  (hadd_rows(acc) * fbatch(scale)).store_aligned(s);
  KYLIN_CPU_UNROLL for (int g = 0; g < SB; ++g) {
    if (nv == KG) std::memcpy(sc + g * attention_tile + j0, s + g * KG, KG * sizeof(float));  // a fixed size: no call
    else std::copy_n(s + g * KG, nv, sc + g * attention_tile + j0);
  }
}

// The scores of R query rows for keys [j, min(j + lanes, nk)): passes of score_rows<R> rows.
template <int R, class T>
void score_row_passes(const float* const* q, const T* k, float* sc, std::int64_t j, std::int64_t nk, std::int64_t D, float scale) {
  constexpr int SB = score_rows<R>;
  constexpr std::int64_t L = static_cast<std::int64_t>(lanes), KG = L / SB;
  for (std::int64_t i = j; i < std::min(j + L, nk); i += KG) score_pairs<SB>(q, k, sc, i, std::min(KG, nk - i), D, scale);
  if constexpr (R > SB) score_row_passes<R - SB>(q + SB, k, sc + SB * attention_tile, j, nk, D, scale);
}

// Whether a pass over K/V rows asks for the rows a fixed distance ahead (prefetch_lines), so both
// streams stay in flight as the matvec's do. Only where the rows come from memory: asked for again
// where they are in cache, the prefetches were ~1/2 of attend_rows' own samples in a pp512 profile.
enum class KVReads { from_memory, from_cache };

// sc[g][j] = scale * q_g · k_j for NG query rows and nk keys (D a multiple of lanes), `lanes`
// keys at a time.
template <int NG, class T>
void block_scores(const float* const* q, const T* k, const T* v, float* sc, std::int64_t nk, std::int64_t D, float scale,
                  KVReads reads) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t step_bytes = reads == KVReads::from_memory ? L * D * static_cast<std::int64_t>(sizeof(T)) : 0;
  for (std::int64_t j = 0; j < nk; j += L) {
    prefetch_lines(k + j * D, attention_prefetch_bytes, step_bytes);
    prefetch_lines(v + j * D, attention_prefetch_bytes, step_bytes);
    score_row_passes<NG>(q, k, sc, j, nk, D, scale);
  }
}

// Lane-chunks of a V row accumulated together per query row: NG * CB independent FMA chains,
// 16 with AVX-512's 32 registers and 8 with AVX2's 16 (enough to keep two FMA pipes busy through
// a 4-cycle latency; one chain per row made the value pass latency-bound at ~1/4 of the FMA
// throughput), each row's weight broadcast once per key for its CB chunks.
template <int NG>
inline constexpr int value_chunks = std::max(1, static_cast<int>(std::bit_floor(static_cast<unsigned>((lanes >= 16 ? 16 : 8) / NG))));

// Where the score of query row g and key j sits in a scores buffer: g * row + j * key. The
// row-at-a-time kernels write [rows, tile]; attention_wide.hpp's [tile, lanes].
struct ScoreLayout {
  std::int64_t row, key;
};
inline constexpr ScoreLayout scores_by_row{attention_tile, 1};

// acc[g][c0, c0 + CB*lanes) = acc * corr[g] + sum_j p[g][j] * v_j over that column block.
template <int NG, int CB, ScoreLayout SL, class T>
void block_values_cols(float* acc, const float* corr, const float* p, const T* v, std::int64_t nk, std::int64_t D,
                       std::int64_t c0) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  fbatch a[NG][CB];
  KYLIN_CPU_UNROLL for (int g = 0; g < NG; ++g)
    KYLIN_CPU_UNROLL for (int b = 0; b < CB; ++b) a[g][b] = fbatch::load_unaligned(acc + g * D + c0 + b * L) * fbatch(corr[g]);
  for (std::int64_t j = 0; j < nk; ++j) {
    const T* vj = v + j * D + c0;
    fbatch vv[CB];
    KYLIN_CPU_UNROLL for (int b = 0; b < CB; ++b) vv[b] = load_as_float(vj + b * L);
    KYLIN_CPU_UNROLL for (int g = 0; g < NG; ++g) {
      fbatch pg(p[g * SL.row + j * SL.key]);
      if constexpr (CB > 1) keep_in_register(pg);
      KYLIN_CPU_UNROLL for (int b = 0; b < CB; ++b) a[g][b] = fma(pg, vv[b], a[g][b]);
    }
  }
  KYLIN_CPU_UNROLL for (int g = 0; g < NG; ++g)
    KYLIN_CPU_UNROLL for (int b = 0; b < CB; ++b) a[g][b].store_unaligned(acc + g * D + c0 + b * L);
}

// acc[g][:] = acc[g][:] * corr[g] + sum_j p[g][j] * v_j for NG query rows, in column blocks of CB
// lane-chunks, then narrower blocks for what is left of D. Each element's sum runs over the keys
// in order whatever the block, so the bits do not depend on CB.
template <int NG, ScoreLayout SL = scores_by_row, class T, int CB = value_chunks<NG>>
void block_values(float* acc, const float* corr, const float* p, const T* v, std::int64_t nk, std::int64_t D, std::int64_t c = 0) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  for (; c + CB * L <= D; c += CB * L) block_values_cols<NG, CB, SL>(acc, corr, p, v, nk, D, c);
  if constexpr (CB > 1) block_values<NG, SL, T, CB / 2>(acc, corr, p, v, nk, D, c);
}

// The online softmax of query rows: acc [rows, head_dim] (unnormalized outputs), running max and
// sum [rows]; a row's state is row g of each.
struct SoftmaxState {
  float* acc;
  float* mx;
  float* sum;
  std::int64_t D;
  SoftmaxState at(std::int64_t g) const { return {acc + g * D, mx + g, sum + g, D}; }
};

}  // namespace detail

}  // namespace kylin::kernels
