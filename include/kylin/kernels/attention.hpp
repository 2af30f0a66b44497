// Causal grouped-query attention of T new queries against a KV cache, tiled over keys with an
// online softmax, so no T x T score matrix exists: memory is O(tile) per thread whatever the
// context. A scalar reference that materialises the scores is the test oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// Shapes of one attention call. Query t sits at position pos0 + t and sees keys [0, pos0 + t].
struct AttentionShape {
  std::int64_t n_tokens;    // T
  std::int64_t pos0;        // cached tokens before the first query
  std::int64_t n_heads;
  std::int64_t n_kv_heads;
  std::int64_t head_dim;
  std::int64_t kv_stride;   // floats between consecutive kv heads in the cache (= capacity * head_dim)
  float scale;              // head_dim^-0.5
  std::int64_t groups() const { return n_heads / n_kv_heads; }
};

// q, out: [T, n_heads * head_dim]; k, v: [n_kv_heads][capacity][head_dim].
inline void attention_ref(const float* q, const float* k, const float* v, float* out, const AttentionShape& s) {
  const std::int64_t D = s.head_dim;
  for (std::int64_t t = 0; t < s.n_tokens; ++t)
    for (std::int64_t h = 0; h < s.n_heads; ++h) {
      const std::int64_t kvh = h / s.groups(), n_keys = s.pos0 + t + 1;
      const float* qv = q + (t * s.n_heads + h) * D;
      std::vector<double> p(static_cast<std::size_t>(n_keys));
      double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (std::int64_t j = 0; j < n_keys; ++j) {
        double d = 0.0;
        for (std::int64_t i = 0; i < D; ++i) d += static_cast<double>(qv[i]) * k[kvh * s.kv_stride + j * D + i];
        p[static_cast<std::size_t>(j)] = d * s.scale;
        mx = std::max(mx, p[static_cast<std::size_t>(j)]);
      }
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (std::int64_t i = 0; i < D; ++i) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < n_keys; ++j) acc += p[static_cast<std::size_t>(j)] * v[kvh * s.kv_stride + j * D + i];
        out[(t * s.n_heads + h) * D + i] = static_cast<float>(acc / sum);
      }
    }
}

// Keys per tile of the online softmax.
inline constexpr std::int64_t attention_tile = 128;

// Per-thread buffers: scores [groups, tile], accumulators [groups, head_dim], running max/sum.
struct AttentionScratch {
  std::vector<std::vector<float>> per_thread;
  AttentionScratch() = default;
  AttentionScratch(int threads, std::int64_t max_groups, std::int64_t head_dim)
      : per_thread(static_cast<std::size_t>(threads),
                   std::vector<float>(static_cast<std::size_t>(max_groups * (attention_tile + head_dim + 2) + lanes))) {}
};

namespace detail {

inline float dot(const float* a, const float* b, std::int64_t n) {
  if constexpr (simd_enabled) {
    const std::int64_t vec_end = n / static_cast<std::int64_t>(lanes) * static_cast<std::int64_t>(lanes);
    fbatch acc(0.f);
    for (std::int64_t i = 0; i < vec_end; i += lanes)
      acc = xsimd::fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), acc);
    float r = xsimd::hadd(acc);
    for (std::int64_t i = vec_end; i < n; ++i) r += a[i] * b[i];
    return r;
  } else {
    float r = 0.f;
    for (std::int64_t i = 0; i < n; ++i) r += a[i] * b[i];
    return r;
  }
}

// x[i] = exp(x[i] - m), returns the sum.
inline float exp_shift_sum(float* x, std::int64_t n, float m) {
  float sum = 0.f;
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    fbatch acc(0.f);
    const fbatch mv(m);
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes) {
      const fbatch e = xsimd::exp(fbatch::load_unaligned(x + i) - mv);
      e.store_unaligned(x + i);
      acc += e;
    }
    sum = xsimd::hadd(acc);
  }
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
  return sum;
}

// acc[i] = acc[i] * c + sum_j p[j] * v[j, i]
inline void scale_accumulate(float* acc, float c, const float* p, const float* v, std::int64_t n_keys, std::int64_t D) {
  for (std::int64_t i = 0; i < D; ++i) acc[i] *= c;
  for (std::int64_t j = 0; j < n_keys; ++j) {
    const float pj = p[j];
    const float* vj = v + j * D;
    for (std::int64_t i = 0; i < D; ++i) acc[i] += pj * vj[i];
  }
}

// All query heads of one KV head for one query token: keys are read once for the whole group.
inline void attend_group(const float* q, const float* k, const float* v, float* out, std::int64_t n_keys,
                         const AttentionShape& s, float* buf) {
  const std::int64_t G = s.groups(), D = s.head_dim;
  float* scores = buf;                        // [G, tile]
  float* acc = scores + G * attention_tile;   // [G, D]
  float* mx = acc + G * D;                    // [G]
  float* sum = mx + G;                        // [G]
  std::fill(acc, acc + G * D, 0.f);
  std::fill(mx, mx + G, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + G, 0.f);
  for (std::int64_t j0 = 0; j0 < n_keys; j0 += attention_tile) {
    const std::int64_t nk = std::min(attention_tile, n_keys - j0);
    for (std::int64_t g = 0; g < G; ++g) {
      float* sc = scores + g * attention_tile;
      const float* qg = q + g * D;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < nk; ++j) {
        sc[j] = dot(qg, k + (j0 + j) * D, D) * s.scale;
        tile_max = std::max(tile_max, sc[j]);
      }
      const float m_new = std::max(mx[g], tile_max);
      const float correction = std::exp(mx[g] - m_new);  // exp(-inf) = 0 on the first tile
      const float tile_sum = exp_shift_sum(sc, nk, m_new);
      sum[g] = sum[g] * correction + tile_sum;
      mx[g] = m_new;
      scale_accumulate(acc + g * D, correction, sc, v + j0 * D, nk, D);
    }
  }
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t i = 0; i < D; ++i) out[g * D + i] = acc[g * D + i] / sum[g];
}

}  // namespace detail

// Same contract as attention_ref; work items are (query token, kv head) pairs dealt round-robin
// to threads, because under the causal mask later tokens cost more than earlier ones.
inline void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                      ThreadPool& pool, AttentionScratch& scratch) {
  const std::int64_t items = s.n_tokens * s.n_kv_heads, D = s.head_dim, G = s.groups();
  pool.run([&](int t, int nt) {
    float* buf = scratch.per_thread[static_cast<std::size_t>(t)].data();
    for (std::int64_t it = t; it < items; it += nt) {
      const std::int64_t tok = it / s.n_kv_heads, kvh = it % s.n_kv_heads;
      const std::int64_t head0 = kvh * G;
      detail::attend_group(q + (tok * s.n_heads + head0) * D, k + kvh * s.kv_stride, v + kvh * s.kv_stride,
                           out + (tok * s.n_heads + head0) * D, s.pos0 + tok + 1, s, buf);
    }
  });
}

}  // namespace kylin::kernels
