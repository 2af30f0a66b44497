// The keys every query of a prefill block sees, attended for `lanes` query rows at once: vectors
// over the rows (their queries transposed) against each key's elements broadcast, so scores, their
// max and their exponentials' sums take no horizontal reductions. Each step keeps the bits of the
// row-at-a-time kernels (attention_blocks.hpp), so a row's output does not depend on the path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "kylin/kernels/attention_blocks.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels::detail {

// Whether this kernel set has the wide pass: sum_slots must repeat hadd_rows' tree.
inline constexpr bool attention_wide = has_sum_slots && simd_enabled && lanes >= 8;

// Keys a step of wide_scores for a pair of row vectors (a single one takes twice as many): 2 x 8
// accumulators of 32 AVX-512 registers; 2 x 4 of AVX2's 16.
inline constexpr int wide_keys = lanes >= 16 ? 8 : 4;

// The wide pass's buffers for `rows` query rows: queries transposed [row vectors][D][lanes], one
// tile's scores for two row vectors [2][tile][lanes], the tile's keys widened to f32 [tile][D].
inline std::int64_t wide_floats(std::int64_t rows, std::int64_t D) {
  const auto L = static_cast<std::int64_t>(lanes);
  return (rows + L - 1) / L * L * D + 2 * attention_tile * L + attention_tile * D;
}

// qt[d * lanes + r] = q[r][d] for the m <= lanes rows, 0 for the lanes past them.
inline void transpose_queries(const float* const* q, std::int64_t m, std::int64_t D, float* qt) {
  const auto L = static_cast<std::int64_t>(lanes);
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t r = 0; r < L; ++r) qt[d * L + r] = r < m ? q[r][d] : 0.f;
}

// s[w][j][r] = scale * q_r · k_j for the rows of RV row vectors (qt + w * D * lanes) and KB keys
// a step (nk a multiple of KB), each the bits of score_pairs: lane slot l of q · k is the FMA chain
// over d = l, l + lanes, ... (here one vector over rows, for one slot of one key), and the slots
// are added in hadd_rows' tree: quarter m = (s_m + s_m+8) + (s_m+4 + s_m+12) with 16 lanes,
// s_m + s_m+4 with 8, then (q0 + q1) + (q2 + q3). One slot at a time, so that RV * KB
// accumulators share each load: 2 row vectors x 8 keys take 10 loads per 16 FMAs; a broadcast key
// element per FMA (1 x 4 keys x 4 slots) kept this pass at the transposing reductions' speed on
// Zen 5 (docs/log/2026-11-27-29-zen5-rounds.md, "Prefill attention, 16 query rows a vector").
template <int RV, int KB>
void wide_scores(const float* qt, const float* k, float* s, std::int64_t nk, std::int64_t D, float scale) {
  static_assert(RV > 0 && (lanes == 16 || lanes == 8), "the slot tree below is AVX-512's and AVX2's");
  constexpr int L = lanes, leaves = L / 4;  // slots a quarter adds
  constexpr int leaf[4] = {0, leaves == 4 ? 2 : 1, 1, 3};  // a quarter's slots m + 4 * leaf[i] in the order they are added
  const std::int64_t qstep = D * L, sstep = nk * L;
  for (std::int64_t j = 0; j < nk; j += KB) {
    const float* key = k + j * D;
    fbatch pair[RV][KB], other[RV][KB], half[RV][KB], third[RV][KB];  // partial sums of the tree
    KYLIN_CPU_UNROLL for (int m = 0; m < 4; ++m)
      KYLIN_CPU_UNROLL for (int i = 0; i < leaves; ++i) {
        fbatch a[RV][KB];
        KYLIN_CPU_UNROLL for (int w = 0; w < RV; ++w)
          KYLIN_CPU_UNROLL for (int b = 0; b < KB; ++b) a[w][b] = fbatch(0.f);
        for (std::int64_t c = m + 4 * leaf[i]; c < D; c += L) {
          fbatch qv[RV];
          KYLIN_CPU_UNROLL for (int w = 0; w < RV; ++w) {
            qv[w] = fbatch::load_unaligned(qt + w * qstep + c * L);
            keep_in_register(qv[w]);
          }
          KYLIN_CPU_UNROLL for (int b = 0; b < KB; ++b) {
            fbatch kb(key[b * D + c]);
            keep_in_register(kb);
            KYLIN_CPU_UNROLL for (int w = 0; w < RV; ++w) a[w][b] = fma(qv[w], kb, a[w][b]);
          }
        }
        KYLIN_CPU_UNROLL for (int w = 0; w < RV; ++w)
          KYLIN_CPU_UNROLL for (int b = 0; b < KB; ++b) {
            if (i == 0) pair[w][b] = a[w][b];
            else if (i == 1 && leaves == 4) pair[w][b] = pair[w][b] + a[w][b];
            else if (i == 2) other[w][b] = a[w][b];
            else {
              const fbatch q = leaves == 4 ? pair[w][b] + (other[w][b] + a[w][b]) : pair[w][b] + a[w][b];
              if (m == 0) half[w][b] = q;
              else if (m == 1) half[w][b] = half[w][b] + q;
              else if (m == 2) third[w][b] = q;
              else ((half[w][b] + (third[w][b] + q)) * fbatch(scale)).store_unaligned(s + w * sstep + (j + b) * L);
            }
          }
      }
  }
}

// The online softmax's step over one tile for the rows of a wide pass: s [nk][lanes] becomes
// exp(s - new max); mx, sum [lanes] are updated; corr [lanes] = exp(old max - new max). The bits
// of attend_rows' step (max_of, exp_shift_sum: lane i sums keys i, i + lanes, ..., then
// hadd_rows' tree; one fma) for nk a multiple of lanes.
inline void wide_softmax(float* s, std::int64_t nk, float* mx, float* sum, float* corr) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  fbatch tile_max = fbatch::load_unaligned(s);
  for (std::int64_t j = 1; j < nk; ++j) tile_max = xsimd::max(tile_max, fbatch::load_unaligned(s + j * L));
  const fbatch m_new = xsimd::max(fbatch::load_aligned(mx), tile_max);
  alignas(64) float m_new_v[lanes];
  m_new.store_aligned(m_new_v);
  for (std::int64_t r = 0; r < L; ++r) corr[r] = std::exp(mx[r] - m_new_v[r]);  // exp(-inf) = 0 on the first tile
  fbatch part[lanes];
  KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < L; ++i) part[i] = fbatch(0.f);
  for (std::int64_t c = 0; c < nk; c += L)
    KYLIN_CPU_UNROLL for (std::int64_t i = 0; i < L; ++i) {
      const fbatch e = xsimd::exp(fbatch::load_unaligned(s + (c + i) * L) - m_new);
      e.store_unaligned(s + (c + i) * L);
      part[i] = part[i] + e;
    }
  fma(fbatch::load_aligned(sum), fbatch::load_aligned(corr), sum_slots(part)).store_aligned(sum);
  m_new.store_aligned(mx);
}

// acc[r][:] = acc[r][:] * corr[r] + sum_j p[j][r] * v_j for rows r < m of a wide pass, in blocks
// of up to 8 rows (block_values, reading the scores down their column).
template <class T>
void wide_values(float* acc, const float* corr, const float* p, const T* v, std::int64_t m, std::int64_t nk, std::int64_t D) {
  constexpr ScoreLayout by_key{1, static_cast<std::int64_t>(lanes)};
  for (std::int64_t r0 = 0; r0 < m; r0 += 8)
    with_count<8>(std::min<std::int64_t>(8, m - r0), [&](auto ng) { block_values<ng, by_key>(acc + r0 * D, corr + r0, p + r0, v, nk, D); });
}

// The online softmax's step and value sums for rows [0, m) of a SoftmaxState (m <= lanes), their
// scores s [nk][lanes] (nk a multiple of lanes) against the tile's values v [nv][D]: the keys past
// nv are -inf in every row.
template <class T>
void wide_update(const SoftmaxState& st, std::int64_t m, float* s, const T* v, std::int64_t nk, std::int64_t nv) {
  alignas(64) float mx[lanes], sum[lanes], corr[lanes];
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(lanes); ++r) {
    mx[r] = r < m ? st.mx[r] : 0.f;  // rows past m: zero queries, any finite state
    sum[r] = r < m ? st.sum[r] : 0.f;
  }
  wide_softmax(s, nk, mx, sum, corr);
  wide_values(st.acc, corr, s, v, m, nv, st.D);
  std::copy_n(mx, m, st.mx);
  std::copy_n(sum, m, st.sum);
}

// s[j][r] = -inf for the keys j in [0, nk) of a tile from key j0 that row r (of `lanes` from r0)
// does not see: j0 + j >= sees(r0 + r). A row that sees none of them keeps its state's bits
// (its max and sum stay, exp(0) = 1 scales its sums, the zero weights add +0), and one that sees
// some gets the bits of the row-at-a-time pass over only those (exp_shift_sum's -inf tail). The
// unseen keys are the block's own later tokens: a V row of theirs that overflowed to inf would
// make the zero weight's product NaN here, where decode never reads that row.
template <class Sees>
void mask_unseen(float* s, std::int64_t nk, std::int64_t j0, std::int64_t r0, Sees sees) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  alignas(64) float limit[lanes];  // keys of the tile each row sees, as floats (exact below 2^24)
  for (std::int64_t r = 0; r < L; ++r) limit[r] = static_cast<float>(std::clamp<std::int64_t>(sees(r0 + r) - j0, 0, nk));
  const fbatch lim = fbatch::load_aligned(limit), unseen(-std::numeric_limits<float>::infinity());
  for (std::int64_t j = 0; j < nk; ++j) {
    const fbatch sj = fbatch::load_unaligned(s + j * L);
    xsimd::select(fbatch(static_cast<float>(j)) >= lim, unseen, sj).store_unaligned(s + j * L);
  }
}

// Keys [0, nk) of the `rows` query rows of a block (row r's query at q_of(r); it sees keys
// [0, sees(r))), tile by tile from key 0, `lanes` rows at a time: the tiles every row sees whole
// as they are; the last tiles, with the block's own keys, widened to f32 into kf, zero past nk up
// to a multiple of lanes, with each row's unseen keys masked. f16 keys are widened a tile at a
// time into kf, shared by all the rows.
template <class T, class QueryOf, class Sees>
void wide_tiles(QueryOf q_of, Sees sees, std::int64_t rows, const T* k, const T* v, std::int64_t nk, const SoftmaxState& st,
                float scale, float* buf) {
  const std::int64_t D = st.D, L = static_cast<std::int64_t>(lanes), vectors = (rows + L - 1) / L;
  float* qt = buf;                       // [vectors][D][lanes]
  float* s = qt + vectors * D * L;       // [2][tile][lanes]
  float* kf = s + 2 * attention_tile * L;  // [tile][D]
  for (std::int64_t w = 0; w < vectors; ++w) {
    const float* q[lanes];
    const std::int64_t m = std::min(L, rows - w * L);
    for (std::int64_t r = 0; r < m; ++r) q[r] = q_of(w * L + r);
    transpose_queries(q, m, D, qt + w * D * L);
  }
  const std::int64_t seen_by_all = sees(0);  // row 0 is the block's first token
  for (std::int64_t j = 0; j < nk; j += attention_tile) {
    const std::int64_t nv = std::min(attention_tile, nk - j), ns = (nv + L - 1) / L * L;  // keys stored, scored
    const bool whole = j + attention_tile <= seen_by_all;
    const float* kt = kf;  // [ns][D] f32
    if constexpr (std::is_same_v<T, float>)
      if (ns == nv) kt = k + j * D;
    if (kt == kf) {
      for (std::int64_t i = 0; i < nv * D; i += L) load_as_float(k + j * D + i).store_unaligned(kf + i);
      std::fill(kf + nv * D, kf + ns * D, 0.f);
    }
    for (std::int64_t w = 0; w < vectors; w += 2) {  // pairs of row vectors share each key element
      if (w + 1 < vectors) wide_scores<2, wide_keys>(qt + w * D * L, kt, s, ns, D, scale);
      else wide_scores<1, 2 * wide_keys>(qt + w * D * L, kt, s, ns, D, scale);
      for (std::int64_t u = w; u < std::min(w + 2, vectors); ++u) {
        float* su = s + (u - w) * ns * L;
        if (!whole) mask_unseen(su, ns, j, u * L, sees);
        wide_update(st.at(u * L), std::min(L, rows - u * L), su, v + j * D, ns, nv);
      }
    }
  }
}

}  // namespace kylin::kernels::detail
