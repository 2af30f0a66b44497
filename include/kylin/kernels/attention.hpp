// Causal grouped-query attention of T new queries against an f32 or f16 KV cache, tiled over
// keys with an online softmax, so no T x T score matrix exists. The query heads of a GQA group,
// and in a prefill several query tokens, share every K/V row read, widened once in registers.
// A scalar reference is the test oracle.
#pragma once

#include <algorithm>
#include <cassert>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/attention_blocks.hpp"
#include "kylin/kernels/attention_wide.hpp"
#include "kylin/kernels/kv_store.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/simd.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// Shapes of one attention call. Query t sits at position pos0 + t and sees keys [0, pos0 + t].
struct AttentionShape {
  std::int64_t n_tokens;    // T
  std::int64_t pos0;        // cached tokens before the first query
  std::int64_t n_heads;
  std::int64_t n_kv_heads;
  std::int64_t head_dim;
  std::int64_t kv_stride;   // elements between consecutive kv heads in the cache (= capacity * head_dim)
  float scale;              // head_dim^-0.5
  std::int64_t groups() const { return n_heads / n_kv_heads; }
};

// Element i of a cache slab, widened.
inline float kv_at(const KVRef& c, std::int64_t i) {
  return visit_dtype(c.dtype, [&]<class T>(std::type_identity<T>) { return to_float(c.as<const T>()[i]); });
}

// q, out: [T, n_heads * head_dim]; k, v: [n_kv_heads][capacity][head_dim]. Query t sees keys [0, keys_of(t)).
template <class KeysOf>
void attention_ref_over(const float* q, const KVRef& k, const KVRef& v, float* out, const AttentionShape& s, KeysOf keys_of) {
  const std::int64_t D = s.head_dim;
  for (std::int64_t t = 0; t < s.n_tokens; ++t)
    for (std::int64_t h = 0; h < s.n_heads; ++h) {
      const std::int64_t kvh = h / s.groups(), n_keys = keys_of(t);
      const float* qv = q + (t * s.n_heads + h) * D;
      std::vector<double> p(static_cast<std::size_t>(n_keys));
      double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (std::int64_t j = 0; j < n_keys; ++j) {
        double d = 0.0;
        for (std::int64_t i = 0; i < D; ++i) d += static_cast<double>(qv[i]) * kv_at(k, kvh * s.kv_stride + j * D + i);
        p[static_cast<std::size_t>(j)] = d * s.scale;
        mx = std::max(mx, p[static_cast<std::size_t>(j)]);
      }
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (std::int64_t i = 0; i < D; ++i) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < n_keys; ++j) acc += p[static_cast<std::size_t>(j)] * kv_at(v, kvh * s.kv_stride + j * D + i);
        out[(t * s.n_heads + h) * D + i] = static_cast<float>(acc / sum);
      }
    }
}

// Causal: query t sees keys [0, pos0 + t].
inline void attention_ref(const float* q, const KVRef& k, const KVRef& v, float* out, const AttentionShape& s) {
  attention_ref_over(q, k, v, out, s, [&](std::int64_t t) { return s.pos0 + t + 1; });
}

// Full (a ViT's, not causal): every query sees all n_tokens keys; pos0 is not read.
inline void full_attention_ref(const float* q, const KVRef& k, const KVRef& v, float* out, const AttentionShape& s) {
  attention_ref_over(q, k, v, out, s, [&](std::int64_t) { return s.n_tokens; });
}

// Query rows (a head of a query token) that read each K/V row together: the scores of 4 keys
// at a time and the value sums of all of them stay in registers.
inline constexpr std::int64_t attention_head_block = 8;

// Query rows of one sequence attended together in a prefill: several head blocks take turns on
// each tile of K/V rows, so the tile is read from memory once and from L1/L2 by the rest.
inline constexpr std::int64_t attention_block_rows = 32;

// Query tokens of one sequence attended together in a prefill, with all heads of a GQA group of
// `groups` heads: as many as fill attention_block_rows (0.6B's 2 heads: 16 tokens; 8B's 4: 8).
inline std::int64_t attention_block_tokens(std::int64_t groups) { return std::max<std::int64_t>(1, attention_block_rows / groups); }

// Per-thread buffers for the query rows of one work item (a block of tokens, one GQA group):
// scores [attention_head_block, tile], accumulators [rows, head_dim], running max and sum [rows],
// then the wide pass's (detail::wide_floats).
struct AttentionScratch {
  std::vector<std::vector<float>> per_thread;
  AttentionScratch() = default;
  AttentionScratch(int threads, std::int64_t max_groups, std::int64_t head_dim)
      : per_thread(static_cast<std::size_t>(threads),
                   std::vector<float>(static_cast<std::size_t>(floats(max_groups, head_dim)))) {}
  static std::int64_t floats(std::int64_t groups, std::int64_t head_dim) {
    const std::int64_t rows = attention_block_tokens(groups) * groups;
    return attention_head_block * attention_tile + rows * (head_dim + 2) + detail::wide_floats(rows, head_dim);
  }
};

namespace detail {

// NG query rows sharing one KV head over keys [j0, j1) in tiles of attention_tile from j0: a
// row's state after keys [0, j1) is the same bits whether its tiles ran in one call or in two
// split at a multiple of the tile, and whichever rows ran beside it.
template <int NG, class T>
void attend_rows(const float* const* q, const T* k, const T* v, std::int64_t j0, std::int64_t j1, const SoftmaxState& st,
                 float scale, float* scores, KVReads reads) {  // scores: [NG, tile]
  const std::int64_t D = st.D;
  float corr[NG];
  for (std::int64_t t0 = j0; t0 < j1; t0 += attention_tile) {
    const std::int64_t nk = std::min(attention_tile, j1 - t0);
    block_scores<NG>(q, k + t0 * D, v + t0 * D, scores, nk, D, scale, reads);
    KYLIN_CPU_UNROLL for (int g = 0; g < NG; ++g) {
      float* sc = scores + g * attention_tile;
      const float m_new = std::max(st.mx[g], max_of(sc, nk));
      corr[g] = std::exp(st.mx[g] - m_new);  // exp(-inf) = 0 on the first tile
      // one fma, spelled out: GCC contracts a * b + c at its discretion (-ffp-contract=fast), and
      // did so in some instantiations of this function and not in others, so a token's bits
      // depended on the rows beside it
      st.sum[g] = std::fma(st.sum[g], corr[g], exp_shift_sum(sc, nk, m_new));
      st.mx[g] = m_new;
    }
    block_values<NG>(st.acc, corr, scores, v + t0 * D, nk, D);
  }
}

// The query tokens [t0, t0 + n) of a sequence (t0 at position pos) with the G heads of one KV
// head. With the wide pass every key is read for all n * G rows a tile at a time, each row's
// unseen keys masked; without it, keys up to the last whole tile all of them see likewise (from
// memory by the first head block, from cache by the rest) and the rest by each token's G rows.
// q, out: the group's first head of token t0; ld: row stride.
// Row r is head r % G of token r / G; a row's output is the same bits whatever n is.
// keys > 0: full attention instead, every row seeing keys [0, keys) (pos not read).
template <class T>
void attend_tokens(const float* q, float* out, std::int64_t ld, std::int64_t n, std::int64_t pos, const T* k, const T* v,
                   const AttentionHeads& h, float* buf, std::int64_t keys = 0) {
  const std::int64_t G = h.groups(), D = h.head_dim, rows = n * G;
  float* scores = buf;                                          // [attention_head_block, tile]
  float* acc = scores + attention_head_block * attention_tile;  // [rows, D]
  const SoftmaxState state{acc, acc + rows * D, acc + rows * D + rows, D};  // mx, sum: [rows]
  std::fill(state.acc, state.acc + rows * D, 0.f);
  std::fill(state.mx, state.mx + rows, -std::numeric_limits<float>::infinity());
  std::fill(state.sum, state.sum + rows, 0.f);
  const auto q_of = [&](std::int64_t r) { return q + r / G * ld + r % G * D; };
  const float* qrow[attention_head_block];
  const auto run = [&](std::int64_t r0, std::int64_t m, std::int64_t j0, std::int64_t j1, KVReads reads) {  // rows [r0, r0 + m)
    for (std::int64_t g = 0; g < m; ++g) qrow[g] = q_of(r0 + g);
    with_count<attention_head_block>(m, [&](auto ng) { attend_rows<ng>(qrow, k, v, j0, j1, state.at(r0), h.scale, scores, reads); });
  };
  if constexpr (attention_wide) {
    if (keys > 0)  // full: every row sees every key
      wide_tiles(q_of, [&](std::int64_t) { return keys; }, rows, k, v, keys, state, h.scale, state.sum + rows);
    else if (n > 1)  // every key of the block, all rows `lanes` at a time (attention_wide.hpp)
      wide_tiles(q_of, [&](std::int64_t r) { return pos + r / G + 1; }, rows, k, v, pos + n, state, h.scale, state.sum + rows);
  } else if (keys > 0) {  // full: each tile of keys for every head block in turn
    for (std::int64_t j = 0; j < keys; j += attention_tile)
      for (std::int64_t r0 = 0; r0 < rows; r0 += attention_head_block)
        run(r0, std::min(attention_head_block, rows - r0), j, std::min(j + attention_tile, keys), r0 == 0 ? KVReads::from_memory : KVReads::from_cache);
  } else if (n > 1) {
    // The keys all n tokens see, a tile at a time: every head block on a tile before the next (the
    // first reads it from memory, the rest from cache).
    const std::int64_t shared = (pos + 1) / attention_tile * attention_tile;
    for (std::int64_t j = 0; j < shared; j += attention_tile)
      for (std::int64_t r0 = 0; r0 < rows; r0 += attention_head_block)
        run(r0, std::min(attention_head_block, rows - r0), j, j + attention_tile, r0 == 0 ? KVReads::from_memory : KVReads::from_cache);
    // Each token's own keys past those: the rows just stored and those the tokens before read.
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t g0 = 0; g0 < G; g0 += attention_head_block)
        run(t * G + g0, std::min(attention_head_block, G - g0), shared, pos + t + 1, KVReads::from_cache);
  }
  // A decode step: all of the token's keys, from memory (for the first head block).
  if (n == 1 && keys == 0)
    for (std::int64_t g0 = 0; g0 < G; g0 += attention_head_block)
      run(g0, std::min(attention_head_block, G - g0), 0, pos + 1, g0 == 0 ? KVReads::from_memory : KVReads::from_cache);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < D; ++i) out[r / G * ld + r % G * D + i] = state.acc[r * D + i] / state.sum[r];
}

// One work item: a block of query tokens of one sequence with the heads of one KV head.
struct AttentionItem {
  const AttentionSeq* seq;
  std::int64_t token;  // the block's first query token
  std::int64_t kv_head;
};

// Work item i as a sequence's (block of B tokens, kv head). A sequence's items go KV head by KV
// head, each head's blocks from the last (costliest under the causal mask) down: the threads then
// work through one head's K/V rows at a time, which stay in their L2 from block to block (items
// ordered by block, heads inner, read every head's rows per block, from L3 or DRAM).
inline AttentionItem find_item(std::span<const AttentionSeq> seqs, std::int64_t B, std::int64_t n_kv, std::int64_t i) {
  for (const auto& s : seqs) {
    const std::int64_t blocks = (s.n_tokens + B - 1) / B;
    if (i < blocks * n_kv) return {&s, (blocks - 1 - i % blocks) * B, i / blocks};
    i -= blocks * n_kv;
  }
  return {nullptr, 0, 0};
}

// full: each sequence's queries see all its n_tokens keys (full_attention).
template <class T>
void attention_typed(const float* q, float* out, std::span<const AttentionSeq> seqs, const AttentionHeads& h, ThreadPool& pool,
                     AttentionScratch& scratch, bool full = false) {
  const std::int64_t D = h.head_dim, G = h.groups(), B = attention_block_tokens(G), ld = h.n_heads * D;
  assert(static_cast<std::int64_t>(scratch.per_thread.front().size()) >= AttentionScratch::floats(G, D) &&
         "attention scratch made for these heads");
  std::int64_t items = 0;
  for (const auto& s : seqs) items += (s.n_tokens + B - 1) / B * h.n_kv_heads;
  // a sequence's items go KV head by KV head, each head's blocks from the last down (find_item)
  parallel_chunks(pool, items, 1, [&](int t, std::int64_t i0, std::int64_t i1) {
    float* buf = scratch.per_thread[static_cast<std::size_t>(t)].data();
    for (std::int64_t i = i0; i < i1; ++i) {
      const auto [s, tok, kvh] = find_item(seqs, B, h.n_kv_heads, i);
      const std::int64_t row = s->row0 + tok, head0 = kvh * G;
      attend_tokens(q + row * ld + head0 * D, out + row * ld + head0 * D, ld, std::min(B, s->n_tokens - tok), s->pos0 + tok,
                    s->k.as<const T>() + kvh * s->kv_stride, s->v.as<const T>() + kvh * s->kv_stride, h, buf, full ? s->n_tokens : 0);
    }
  });
}

}  // namespace detail

// Attention of every sequence of a batch against its own cache, in one parallel pass: work items
// are (sequence, block of query tokens, kv head) triples claimed one at a time by the threads,
// costliest first within each sequence's KV head. Every cache of one call has the same dtype.
inline void attention(const float* q, float* out, std::span<const AttentionSeq> seqs, const AttentionHeads& h, ThreadPool& pool,
                      AttentionScratch& scratch) {
  if (!simd_enabled || h.head_dim % static_cast<std::int64_t>(lanes) != 0) {
    for (const auto& s : seqs)
      attention_ref(q + s.row0 * h.n_heads * h.head_dim, s.k, s.v, out + s.row0 * h.n_heads * h.head_dim,
                    {s.n_tokens, s.pos0, h.n_heads, h.n_kv_heads, h.head_dim, s.kv_stride, h.scale});
    return;
  }
  visit_dtype(seqs.front().k.dtype,
              [&]<class T>(std::type_identity<T>) { detail::attention_typed<T>(q, out, seqs, h, pool, scratch); });
}

// Full attention of one sequence (a ViT's, not causal): its n_tokens queries each see all its n_tokens keys,
// through the same tiles and online softmax as the causal pass; k and v hold exactly those keys. Same contract
// as full_attention_ref (pos0 not read).
inline void full_attention(const float* q, float* out, const AttentionSeq& seq, const AttentionHeads& h, ThreadPool& pool,
                           AttentionScratch& scratch) {
  if (!simd_enabled || h.head_dim % static_cast<std::int64_t>(lanes) != 0) {
    full_attention_ref(q + seq.row0 * h.n_heads * h.head_dim, seq.k, seq.v, out + seq.row0 * h.n_heads * h.head_dim,
                       {seq.n_tokens, 0, h.n_heads, h.n_kv_heads, h.head_dim, seq.kv_stride, h.scale});
    return;
  }
  visit_dtype(seq.k.dtype, [&]<class T>(std::type_identity<T>) {
    detail::attention_typed<T>(q, out, std::span<const AttentionSeq>(&seq, 1), h, pool, scratch, true);
  });
}

// One sequence: same contract as attention_ref.
inline void attention(const float* q, const KVRef& k, const KVRef& v, float* out, const AttentionShape& s, ThreadPool& pool,
                      AttentionScratch& scratch) {
  const AttentionSeq one{k, v, s.kv_stride, 0, s.n_tokens, s.pos0};
  attention(q, out, std::span<const AttentionSeq>(&one, 1), {s.n_heads, s.n_kv_heads, s.head_dim, s.scale}, pool, scratch);
}

}  // namespace kylin::kernels
