// A Gated DeltaNet layer's work between its input and output projections (transformers' Qwen3_5GatedDeltaNet
// .forward): the causal depthwise conv over time with SiLU, the l2-normalised q and k, the decay g and beta, the
// gated delta rule (kernels/delta_rule.hpp: recurrent for decode rows, chunked for the others) and the gated
// RMSNorm; plus the two small element-wise kernels the hybrid layers share (sigmoid gating, column gathers).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/delta_rule.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// x[i] = x[i] * f(x[i]) for f = sigmoid (silu) or x[i] * sigmoid(gate[i]): every element through the same vector
// exp, the tail too (a padded batch), so an element's result does not depend on where it sits.
template <class Op>
inline void sigmoid_elementwise(float* x, const float* gate, std::int64_t n, Op op) {
  if constexpr (!simd_enabled) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = op(x[i], gate ? gate[i] : x[i], 1.0f / (1.0f + std::exp(-(gate ? gate[i] : x[i]))));
  } else {
    const fbatch one(1.0f);
    auto step = [&](fbatch v, fbatch g) { return op(v, g, one / (one + xsimd::exp(-g))); };
    std::int64_t i = 0;
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes) {
      const fbatch v = fbatch::load_unaligned(x + i);
      step(v, gate ? fbatch::load_unaligned(gate + i) : v).store_unaligned(x + i);
    }
    if (i == n) return;
    alignas(64) float v[lanes] = {}, g[lanes] = {};
    std::copy(x + i, x + n, v);
    std::copy((gate ? gate : x) + i, (gate ? gate : x) + n, g);
    step(fbatch::load_aligned(v), fbatch::load_aligned(g)).store_aligned(v);
    std::copy(v, v + (n - i), x + i);
  }
}
// x = silu(x) = x * sigmoid(x)
inline void silu_inplace(float* x, std::int64_t n) {
  sigmoid_elementwise(x, nullptr, n, [](auto v, auto, auto s) { return v * s; });
}
// x *= sigmoid(gate): gated attention's output gate
inline void sigmoid_mul(float* x, const float* gate, std::int64_t n) {
  sigmoid_elementwise(x, gate, n, [](auto v, auto, auto s) { return v * s; });
}

// out[r, :] = the runs of in[r, :], one after another (gated attention's query/gate split, Qwen3-Next's qkvz order).
inline void gather_columns(const float* in, std::int64_t in_width, std::span<const ColumnRun> runs, float* out, std::int64_t out_width,
                           std::int64_t rows) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* o = out + r * out_width;
    for (const ColumnRun& c : runs) o = std::copy_n(in + r * in_width + c.from, c.n, o);
  }
}

// Per-thread scratch of gated_delta_net, sized for `max_rows` rows of a pass.
struct DeltaNetScratch {
  std::vector<std::vector<float>> per_thread;  // [threads][delta chunk + step + conv state]
  std::vector<float> g, beta;                  // [max_rows, nv]
  DeltaNetScratch() = default;
  DeltaNetScratch(int threads, std::int64_t max_rows, const DeltaNetLayer& shape)
      : per_thread(static_cast<std::size_t>(threads), std::vector<float>(static_cast<std::size_t>(thread_floats(shape)))),
        g(static_cast<std::size_t>(max_rows * shape.nv)), beta(g.size()) {}
  static std::int64_t thread_floats(const DeltaNetLayer& s) { return delta_chunk_scratch(s.dk, s.dv) + s.dv + s.conv_state_floats() + 64; }
};

namespace linear_detail {

// The conv's virtual input of a sequence: K-1 rows of its state, then its n new rows.
struct ConvInput {
  const float* prev;  // [K-1, C] (a copy: the state buffers may be rewritten first)
  const float* x;     // [n, C]
  std::int64_t K, C;
  const float* at(std::int64_t v) const { return v < K - 1 ? prev + v * C : x + (v - (K - 1)) * C; }
};

// The conv states after the sequence's rows (each row's for decode rows, else the last), then the conv with
// SiLU in place over its rows, from the last row back, so each row still reads its own unconvolved inputs.
inline void conv_rows(const DeltaNetSeq& s, const DeltaNetRows& rows, const DeltaNetLayer& L, float* prev, ThreadPool& pool) {
  const std::int64_t C = L.conv_dim(), K = L.conv_kernel, n = s.n_tokens, state = (K - 1) * C;
  if (s.state_in) std::copy_n(s.state_in, state, prev);
  else std::fill_n(prev, state, 0.0f);
  const ConvInput in{prev, rows.qkv + s.row0 * C, K, C};
  // the state after row `last`: virtual rows last+1 .. last+K-1
  auto conv_state = [&](std::int64_t last, float* out) {
    for (std::int64_t m = 0; m < K - 1; ++m) std::copy_n(in.at(last + 1 + m), C, out + m * C);
  };
  for (std::size_t j = 0; j < s.state_out.size(); ++j) conv_state(s.decode_rows ? static_cast<std::int64_t>(j) : n - 1, s.state_out[j]);
  for (std::size_t j = 0; j < s.keep_out.size(); ++j) conv_state(s.keep_rows[j] - 1, s.keep_out[j]);
  constexpr std::int64_t block = 256;  // channels convolved at a time (the chunks may be longer: one thread takes all)
  parallel_chunks(pool, C, block, [&](int, std::int64_t b0, std::int64_t b1) {
    alignas(64) float acc[block];
    for (std::int64_t c0 = b0; c0 < b1; c0 += block) {
      const std::int64_t c1 = std::min(b1, c0 + block);
      for (std::int64_t t = n - 1; t >= 0; --t) {
        float* y = rows.qkv + (s.row0 + t) * C;
        const float* x0 = in.at(t);
        for (std::int64_t c = c0; c < c1; ++c) acc[c - c0] = L.conv[c] * x0[c];
        for (std::int64_t j = 1; j < K; ++j) {
          const float* w = L.conv + j * C;
          const float* xin = in.at(t + j);
          for (std::int64_t c = c0; c < c1; ++c) acc[c - c0] = std::fma(w[c], xin[c], acc[c - c0]);
        }
        std::copy_n(acc, c1 - c0, y + c0);
        silu_inplace(y + c0, c1 - c0);
      }
    }
  });
}

// q = l2norm(q) * dk^-0.5 and k = l2norm(k) per key head (l2norm(x) = x / sqrt(sum x^2 + 1e-6), FLA's and
// transformers'); g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) per value head.
inline void head_inputs(const DeltaNetRows& rows, const DeltaNetLayer& L, float* g, float* beta, ThreadPool& pool) {
  const std::int64_t C = L.conv_dim(), nk = L.nk, dk = L.dk, nv = L.nv;
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  pool.parallel_for(rows.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t h = 0; h < 2 * nk; ++h) {
        float* x = rows.qkv + r * C + h * dk;
        const float inv = static_cast<float>(1.0 / std::sqrt(sum_of_squares(x, dk) + 1e-6));
        for (std::int64_t d = 0; d < dk; ++d) x[d] *= inv;
        if (h < nk)
          for (std::int64_t d = 0; d < dk; ++d) x[d] *= q_scale;
      }
      for (std::int64_t h = 0; h < nv; ++h) {
        const double a = static_cast<double>(rows.a[r * nv + h]) + static_cast<double>(L.dt_bias[h]);
        const double softplus = a > 20.0 ? a : std::log1p(std::exp(a));  // torch's softplus (threshold 20)
        g[r * nv + h] = static_cast<float>(static_cast<double>(L.neg_exp_a[h]) * softplus);
        beta[r * nv + h] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(rows.b[r * nv + h]))));
      }
    }
  });
}

// One value head of one sequence: its rows through the recurrent steps or the chunks, its state updated.
inline void delta_head(const DeltaNetSeq& s, std::int64_t h, const DeltaNetRows& rows, const DeltaNetLayer& L, const float* g,
                       const float* beta, float* scratch) {
  const std::int64_t C = L.conv_dim(), dk = L.dk, dv = L.dv, nv = L.nv, kh = h / (nv / L.nk);
  const std::int64_t at = L.conv_state_floats() + h * dk * dv;  // S of head h in a state buffer
  const float* base = rows.qkv + s.row0 * C;
  const DeltaHeadRows r{base + kh * dk, base + L.nk * dk + kh * dk, base + 2 * L.nk * dk + h * dv, C,
                        g + s.row0 * nv + h, beta + s.row0 * nv + h, nv, rows.out + s.row0 * nv * dv + h * dv, nv * dv, dk, dv};
  if (s.decode_rows) {
    for (std::int64_t t = 0; t < s.n_tokens; ++t) {
      const float* in = t == 0 ? (s.state_in ? s.state_in + at : nullptr) : s.state_out[static_cast<std::size_t>(t - 1)] + at;
      delta_step(in, s.state_out[static_cast<std::size_t>(t)] + at, r.q + t * C, r.k + t * C, r.v + t * C, r.g[t * nv], r.beta[t * nv],
                 r.out + t * r.out_stride, dk, dv, scratch);
    }
    return;
  }
  float* S = s.state_out[0] + at;
  if (!s.state_in) std::fill_n(S, dk * dv, 0.0f);
  else if (s.state_in + at != S) std::copy_n(s.state_in + at, dk * dv, S);
  std::size_t keep = 0;  // the next kept state
  for (std::int64_t t = 0; t < s.n_tokens;) {
    const std::int64_t end = std::min(s.n_tokens, ((s.pos0 + t) / delta_chunk + 1) * delta_chunk - s.pos0);
    // a state kept inside this chunk: the chunk's first rows up to it from the chunk's starting state, on the side
    // (its rows' outputs are the same bits as the whole chunk's, which overwrites them next)
    for (; keep < s.keep_rows.size() && s.keep_rows[keep] <= end; ++keep) {
      float* K = s.keep_out[keep] + at;
      std::copy_n(S, dk * dv, K);
      if (s.keep_rows[keep] > t) delta_chunk_rows(K, r, t, s.keep_rows[keep] - t, scratch);
    }
    delta_chunk_rows(S, r, t, end - t, scratch);
    t = end;
  }
}

// out = rmsnorm(o) * w * silu(z) per value head (Qwen3_5RMSNormGated: a plain weight, the norm before the gate).
inline void gated_norm(const DeltaNetRows& rows, const DeltaNetLayer& L, ThreadPool& pool, DeltaNetScratch& scratch) {
  const std::int64_t nv = L.nv, dv = L.dv;
  parallel_chunks(pool, rows.rows, 8, [&](int t, std::int64_t r0, std::int64_t r1) {
    float* gate = scratch.per_thread[static_cast<std::size_t>(t)].data();  // [dv]
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t h = 0; h < nv; ++h) {
        float* o = rows.out + r * nv * dv + h * dv;
        std::copy_n(rows.z + r * nv * dv + h * dv, dv, gate);
        silu_inplace(gate, dv);
        const float inv = static_cast<float>(1.0 / std::sqrt(sum_of_squares(o, dv) / static_cast<double>(dv) + L.eps));
        for (std::int64_t d = 0; d < dv; ++d) o[d] = o[d] * inv * L.norm[d] * gate[d];
      }
  });
}

}  // namespace linear_detail

// rows.out = the Gated DeltaNet core of every sequence's rows, each reading and writing its own states.
inline void gated_delta_net(const DeltaNetRows& rows, const DeltaNetLayer& L, std::span<const DeltaNetSeq> seqs, ThreadPool& pool,
                            DeltaNetScratch& scratch) {
  for (const DeltaNetSeq& s : seqs) linear_detail::conv_rows(s, rows, L, scratch.per_thread[0].data() + delta_chunk_scratch(L.dk, L.dv) + L.dv, pool);
  linear_detail::head_inputs(rows, L, scratch.g.data(), scratch.beta.data(), pool);
  const std::int64_t items = static_cast<std::int64_t>(seqs.size()) * L.nv;
  parallel_chunks(pool, items, 1, [&](int t, std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      linear_detail::delta_head(seqs[static_cast<std::size_t>(i / L.nv)], i % L.nv, rows, L, scratch.g.data(), scratch.beta.data(),
                                scratch.per_thread[static_cast<std::size_t>(t)].data());
  });
  linear_detail::gated_norm(rows, L, pool, scratch);
}

}  // namespace kylin::kernels
