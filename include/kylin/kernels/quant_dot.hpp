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
// would otherwise recompute from them: |q| per value (the unsigned operand against Q8_0 weights)
// and 8 * sum(q) per block (Q4_0 values are stored as v + 8: what the +8 adds to a block's dot).
struct Q8Operand {
  Q8Rows rows;
  const std::uint8_t* abs = nullptr;  // [n, cols]
  const std::int32_t* sum8 = nullptr; // [n, cols / 32]
};

// Fills abs and sum8 for rows [0, n) of x.
inline void prepare_operand(const Q8Rows& x, std::int64_t n, std::uint8_t* abs, std::int32_t* sum8) {
  const std::int64_t nb = x.cols / q8_block;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < nb; ++b) {
      for (std::int64_t i = t * x.cols + b * q8_block; i < t * x.cols + (b + 1) * q8_block; ++i)
        abs[i] = static_cast<std::uint8_t>(std::abs(x.q[i]));
      sum8[t * nb + b] = 8 * block_qsum(x, t, b);
    }
}

#if defined(KYLIN_INT8_SIMD)

// (v0 + v2) + (v1 + v3), hsum4_order (quant.hpp).
inline float hsum(__m128 v) {
  const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// acc (lane l: blocks b + l and b + 4 + l) + the 8 block sums s times their scale products d,
// lanes 0-3 first.
inline __m128 add_group(__m256i s, __m256 d, __m128 acc) {
  const __m256 f = _mm256_cvtepi32_ps(s);
  acc = _mm_fmadd_ps(_mm256_castps256_ps128(f), _mm256_castps256_ps128(d), acc);
  return _mm_fmadd_ps(_mm256_extractf128_ps(f, 1), _mm256_extractf128_ps(d, 1), acc);
}

inline const __m256i* at(const void* p) { return static_cast<const __m256i*>(p); }

// How far ahead in a weight row (or the rows after it) the kernel asks for the values it will
// need: a quantized block takes several cycles of arithmetic per 16-32 bytes, too slow a stream
// for the hardware prefetcher to run far enough ahead on its own, so every line is requested.
// With AVX-512, 8 KB ahead (~1-2 DRAM latencies at its rate): on a Zen 5 VM its decode matvecs
// streaming from DRAM ran 1.2-1.5x faster than at 2 KB (one thread 1.6x) and 12-32 KB no faster
// (docs/log/2026-11-27-29-zen5-rounds.md, "Quantized decode: how far ahead"); the AVX2 kernels,
// slower per byte, keep 2 KB, measured on a Zen 3 VM (docs/log/2026-11-header-comments.md).
#if defined(KYLIN_INT8_512)
inline constexpr std::int64_t quant_prefetch_bytes = 8192;
#else
inline constexpr std::int64_t quant_prefetch_bytes = 2048;
#endif

// p[t] = the 8 lane sums of block b of weight row r times activation row t0 + t (lane j: values
// 4j..4j+3), exact int32 by dot4 (int8.hpp) of unsigned and signed bytes. Q8_0: |x| times w
// carrying x's sign is x * w. Q4_0: the stored values v + 8 in [0, 15] times x directly (the
// 8 * sum(x) this adds is taken off per block).
template <int NB>
inline void block_products(const Q8View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m256i (&p)[NB]) {
  const __m256i wv = _mm256_loadu_si256(at(w.q + r * w.cols + b * q8_block));
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
    const std::int64_t k = (t0 + t) * x.rows.cols + b * q8_block;
    p[t] = dot4(_mm256_loadu_si256(at(x.abs + k)), _mm256_sign_epi8(wv, _mm256_loadu_si256(at(x.rows.q + k))));
  }
}
template <int NB>
inline void block_products(const Q4View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m256i (&p)[NB]) {
  const Q4Block k = q4_block(w, r, b);
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i nibbles = k.shift >= 0 ? _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(at(k.bytes)), _mm_cvtsi32_si128(k.shift)), low) : [&] {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.bytes));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
  }();
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) p[t] = dot4(nibbles, _mm256_loadu_si256(at(x.rows.q + (t0 + t) * x.rows.cols + b * q8_block)));
}

// a = [v0..v3 low-half sums | v0..v3 high-half sums] (vphaddd twice), c the same of v4..v7:
// lane j of the result = the sum of v[j]'s 8 lanes.
inline __m256i join_halves(__m256i a, __m256i c) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

// Q4_0: the block sums less the +8's share (lanes [0, count) of the 8 from block b).
template <QuantView W>
inline __m256i exact_sums(__m256i s, const Q8Operand& x, std::int64_t t, std::int64_t b, int count) {
  if constexpr (std::same_as<W, Q8View>) return s;
  const auto* o = reinterpret_cast<const int*>(x.sum8 + t * (x.rows.cols / q8_block) + b);
  const __m256i off = count == 8 ? _mm256_loadu_si256(at(o)) : _mm256_maskload_epi32(o, _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  return _mm256_sub_epi32(s, off);
}

// s[t] lane j = the exact integer dot product of block b + j of weight row r and activation row
// t0 + t, for j < count (8 at most; 0 past it).
template <int NB, QuantView W>
inline void group_sums(const W& w, std::int64_t r, const Q8Operand& x, std::int64_t t0, std::int64_t b, int count, __m256i (&s)[NB]) {
  __m256i h[NB][4];
  KYLIN_CPU_UNROLL for (int j = 0; j < 8; j += 2) {
    __m256i p0[NB], p1[NB];
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) p0[t] = p1[t] = _mm256_setzero_si256();
    if (j < count) block_products<NB>(w, r, b + j, x, t0, p0);
    if (j + 1 < count) block_products<NB>(w, r, b + j + 1, x, t0, p1);
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) h[t][j / 2] = _mm256_hadd_epi32(p0[t], p1[t]);
  }
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t)
    s[t] = exact_sums<W>(join_halves(_mm256_hadd_epi32(h[t][0], h[t][1]), _mm256_hadd_epi32(h[t][2], h[t][3])), x, t0 + t, b, count);
}

// Asks for weight lines quant_prefetch_bytes ahead in address order: the R rows of a tile are one
// span of memory, and the tile's g-th group of 8 blocks asks for the g-th R groups' worth of that
// span (shifted ahead), so over a run of tiles every line is asked for once, in one stream.
// Asked for row by row (R streams a row apart), a Zen 5 VM in its slow memory state streamed
// two-row Q4_0 tiles at ~37 GB/s against ~47 (docs/log/2026-11-27-29-zen5-rounds.md, "Quantized
// decode: prefetches in address order"). Always inlined: simd.hpp, prefetch.
template <int R, QuantView W>
[[gnu::always_inline]] inline void prefetch_group(const W& w, std::int64_t r0, std::int64_t b) {
  constexpr std::int64_t tile_group_bytes = R * 8 * row_value_bytes<W>(q8_block);
  const auto* rows = reinterpret_cast<const char*>(w.q) + r0 * row_value_bytes<W>(w.cols);
  prefetch_lines(rows + b / 8 * tile_group_bytes, quant_prefetch_bytes, tile_group_bytes);
}

// The scale products of blocks b..b+7 for each output of an R x NB tile (lane l: block b + l),
// and the tile's weight rows asked for quant_prefetch_bytes ahead.
template <int R, int NB, QuantView W>
[[gnu::always_inline]] inline void group_scales(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m256 (&d)[R][NB]) {
  const std::int64_t nb = w.blocks();
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + (r0 + i) * nb + b)));
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) d[i][t] = _mm256_mul_ps(dw, _mm256_loadu_ps(x.rows.scale + (t0 + t) * nb + b));
  }
  prefetch_group<R>(w, r0, b);
}

#if defined(KYLIN_INT8_512)
// p[t] = the lane sums of blocks b and b + 1 (b even) of weight row r times activation row t0 + t:
// lanes 0-7 block b's, 8-15 block b + 1's, so one dot4 does what two do in 256 bits. Q8_0: as
// block_products, with w negated where x < 0 by a mask (AVX-512 has no vpsignb; where x = 0 the
// product is 0 either way). Q4_0: the pair's 32 bytes, low nibbles then high.
template <int NB>
inline void pair_products(const Q8View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m512i (&p)[NB]) {
  const __m512i wv = _mm512_loadu_si512(w.q + r * w.cols + b * q8_block);
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
    const std::int64_t k = (t0 + t) * x.rows.cols + b * q8_block;
    const __m512i xq = _mm512_loadu_si512(x.rows.q + k);
    p[t] = dot4(_mm512_loadu_si512(x.abs + k), _mm512_mask_sub_epi8(wv, _mm512_movepi8_mask(xq), _mm512_setzero_si512(), wv));
  }
}
template <int NB>
inline void pair_products(const Q4View& w, std::int64_t r, std::int64_t b, const Q8Operand& x, std::int64_t t0, __m512i (&p)[NB]) {
  const __m256i v = _mm256_loadu_si256(at(w.q + r * (w.cols / 2) + b / 2 * q8_block));
  const __m512i nibbles = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), _mm512_set1_epi8(0x0F));
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) p[t] = dot4(nibbles, _mm512_loadu_si512(x.rows.q + (t0 + t) * x.rows.cols + b * q8_block));
}

// 4 pairs' lane sums (v[k]: blocks 2k and 2k + 1) folded by pairs of 64-bit halves, then of 32-bit
// lanes, into each 128-bit quarter's 4 lanes: block 2j's sum is lane j + lane j + 4, block 2j + 1's
// lane 8 + j + lane 12 + j.
inline __m512i pair_quarters(const __m512i (&v)[4]) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi64(v[0], v[1]), _mm512_unpackhi_epi64(v[0], v[1]));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(v[2], v[3]), _mm512_unpackhi_epi64(v[2], v[3]));
  const __m512 af = _mm512_castsi512_ps(a), cf = _mm512_castsi512_ps(c);
  return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(af, cf, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(af, cf, 0xDD)));
}

// The 8 block sums of 4 pairs, lane j = block j: pair_quarters, the quarters of one block added,
// and the lanes put in block order.
inline __m256i sum_pairs(const __m512i (&v)[4]) {
  const __m512i e = pair_quarters(v);
  const __m512i f = _mm512_add_epi32(e, _mm512_shuffle_i32x4(e, e, 0xB1));
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0), f));
}

// group_sums of a whole group of 8 blocks, pair by pair.
template <int NB, QuantView W>
[[gnu::always_inline]] inline void whole_group_sums(const W& w, std::int64_t r, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m256i (&s)[NB]) {
  __m512i p[NB][4];
  KYLIN_CPU_UNROLL for (int k = 0; k < 4; ++k) {
    __m512i pk[NB];
    pair_products<NB>(w, r, b + 2 * k, x, t0, pk);
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) p[t][k] = pk[t];
  }
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) s[t] = exact_sums<W>(sum_pairs(p[t]), x, t0 + t, b, 8);
}

// Q4_0, weight rows r0 and r0 + 1, NB tokens from t0: one group of 8 blocks, each output's sums,
// scale products and accumulator lanes as quant_tile's (so the same bits), with the reductions
// after the dot products, the +8 offsets, conversions and FMAs done for both rows at once (one
// token 1.1x the two row passes' rate from L2, 4-8 sequences 1.13-1.16x the tokens a second on a
// Zen 5 VM: docs/log/2026-11-27-29-zen5-rounds.md, "Batched decode with quantized weights").
// acc[t] quarters: [row r0's 4 lanes, -, row r0 + 1's, -].
template <int NB>
[[gnu::always_inline]] inline void q4_two_rows_group(const Q4View& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m512 (&acc)[NB]) {
  const std::int64_t nb = w.blocks();
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  __m512i nibbles[2][4];  // row i, pair k (blocks b + 2k, b + 2k + 1): the 32 bytes' low then high nibbles
  KYLIN_CPU_UNROLL for (int i = 0; i < 2; ++i)
    KYLIN_CPU_UNROLL for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(at(w.q + (r0 + i) * (w.cols / 2) + (b / 2 + k) * q8_block)));
      nibbles[i][k] = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), _mm512_set1_epi8(0x0F));
    }
  const __m256i h = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + (r0 + 1) * nb + b)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scale + r0 * nb + b)));
  const __m512 dw = _mm512_cvtph_ps(h);  // quarters [row 0 blocks 0-3, 4-7, row 1 0-3, 4-7]
  const __m512i even_odd = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 0, 2, 4, 6, 1, 3, 5, 7);
  KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
    const std::int8_t* xq = x.rows.q + (t0 + t) * x.rows.cols + b * q8_block;
    __m512i e[2];  // each row's pair_quarters
    KYLIN_CPU_UNROLL for (int i = 0; i < 2; ++i) {
      __m512i p[4];
      KYLIN_CPU_UNROLL for (int k = 0; k < 4; ++k) p[k] = dot4(nibbles[i][k], _mm512_loadu_si512(xq + 2 * k * q8_block));
      e[i] = pair_quarters(p);
    }
    // quarters [row 0 even blocks, row 0 odd, row 1 even, row 1 odd], less the +8's share
    __m512i g = _mm512_add_epi32(_mm512_shuffle_i32x4(e[0], e[1], 0x88), _mm512_shuffle_i32x4(e[0], e[1], 0xDD));
    const __m256i off = _mm256_loadu_si256(at(x.sum8 + (t0 + t) * nb + b));
    g = _mm512_sub_epi32(g, _mm512_permutexvar_epi32(even_odd, _mm512_castsi256_si512(off)));
    const __m512 f = _mm512_cvtepi32_ps(g), fs = _mm512_maskz_shuffle_f32x4(0xFFFF, f, f, 0xB1);
    const __m512 d = _mm512_mul_ps(dw, _mm512_broadcast_f32x8(_mm256_loadu_ps(x.rows.scale + (t0 + t) * nb + b)));
    acc[t] = _mm512_fmadd_ps(_mm512_unpacklo_ps(f, fs), d, acc[t]);  // lane l: block l, then block l + 4
    acc[t] = _mm512_fmadd_ps(_mm512_unpackhi_ps(f, fs), _mm512_maskz_shuffle_f32x4(0xFFFF, d, d, 0xB1), acc[t]);
  }
}
#else
template <int NB, QuantView W>
[[gnu::always_inline]] inline void whole_group_sums(const W& w, std::int64_t r, const Q8Operand& x, std::int64_t t0, std::int64_t b, __m256i (&s)[NB]) {
  group_sums<NB>(w, r, x, t0, b, 8, s);
}
#endif

// y[t, r0 + i] for NB token rows and R weight rows, as quant_lanes_ref (quant.hpp): 8 blocks at a
// time, each block's exact integer dot product as a float lane times its scale product into 4
// accumulator lanes (block b to lane b % 4), then one horizontal sum and the bias. Each output is
// computed the same way whatever R and NB are, so a row's result never depends on the batch.
template <int R, int NB, QuantView W>
void quant_tile(const W& w, std::int64_t r0, const Q8Operand& x, std::int64_t t0, const float* bias, float* y, std::int64_t ldy) {
  const std::int64_t nb = w.blocks();
  __m128 acc[R][NB];
  __m256 d[R][NB];
  __m256i s[NB];
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i)
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc[i][t] = _mm_setzero_ps();
  std::int64_t b = 0;
#if defined(KYLIN_INT8_512)
  if constexpr (R == 2 && std::same_as<W, Q4View>) {
    __m512 acc2[NB];
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc2[t] = _mm512_setzero_ps();
    for (; b + 8 <= nb; b += 8) {
      prefetch_group<2>(w, r0, b);
      q4_two_rows_group<NB>(w, r0, x, t0, b, acc2);
    }
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
      acc[0][t] = _mm512_maskz_extractf32x4_ps(0xF, acc2[t], 0);
      acc[1][t] = _mm512_maskz_extractf32x4_ps(0xF, acc2[t], 2);
    }
  }
#endif
  for (; b + 8 <= nb; b += 8) {
    group_scales<R, NB>(w, r0, x, t0, b, d);
    KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i) {
      whole_group_sums<NB>(w, r0 + i, x, t0, b, s);
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc[i][t] = add_group(s[t], d[i][t], acc[i][t]);
    }
  }
  if (b < nb) {  // the last nb % 8 blocks, lanes past them 0 * 0
    const int count = static_cast<int>(nb - b);
    KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i) {
      group_sums<NB>(w, r0 + i, x, t0, b, count, s);
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
        alignas(32) float dl[8] = {};
        for (int j = 0; j < count; ++j) dl[j] = block_scale(w, r0 + i, b + j) * x.rows.scale[(t0 + t) * nb + b + j];
        acc[i][t] = add_group(s[t], _mm256_load_ps(dl), acc[i][t]);
      }
    }
  }
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i)
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) y[(t0 + t) * ldy + r0 + i] = hsum(acc[i][t]) + (bias ? bias[r0 + i] : 0.f);
}
#endif

inline constexpr int quant_tile_rows = 2;
// Tokens a tile takes together: each weight group's bytes are unpacked once for all of them. With
// AVX-512, Q4_0 takes 4 (its two-row group holds both rows' nibbles in registers: 4-12 sequences
// 1.07-1.12x the tokens a second of 2 on a Zen 5 VM; docs/log/2026-11-27-29-zen5-rounds.md,
// "Batched decode with quantized weights"); Q8_0 stays at 2 (4 measured 0.94-1.02x), as does AVX2
// (not measured at 4).
template <QuantView W>
inline constexpr int quant_tile_tokens =
#if defined(KYLIN_INT8_512)
    std::same_as<W, Q4View> ? 4 : 2;
#else
    2;
#endif


// y[t, r] = x[t] · w[r] + bias[r] for token rows [0, n) and weight rows [r0, r1).
template <QuantView W>
void quant_rows(const W& w, std::int64_t r0, std::int64_t r1, const Q8Operand& x, std::int64_t n, const float* bias, float* y,
                std::int64_t ldy) {
#if defined(KYLIN_INT8_SIMD)
  auto tokens = [&]<int R>(std::int64_t r) {
    std::int64_t t = 0;
    constexpr int NB = quant_tile_tokens<W>;
    for (; t + NB <= n; t += NB) quant_tile<R, NB>(w, r, x, t, bias, y, ldy);
    if constexpr (NB > 2)
      for (; t + 2 <= n; t += 2) quant_tile<R, 2>(w, r, x, t, bias, y, ldy);
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
