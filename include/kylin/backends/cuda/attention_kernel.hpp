// Causal grouped-query attention of a batch of sequences against their f32/f16 KV caches on the
// GPU, with kernels::attention's semantics: one block per (query row, KV head, group of up to 8 of
// its query heads, share of the keys), an online softmax over tiles of 64 keys, each K/V row read
// once for the group. SplitAttentionKernel (opt-in, for few rows: decode) splits each row's keys over
// blocks (flash-decoding): each share's softmax state goes to a scratch buffer and
// AttentionCombineKernel weighs the shares together.
#pragma once

#include "kylin/backends/cuda/device_math.hpp"

namespace kylin::cuda {

// One sequence of a batched attention call, in device memory: its queries are rows [row0, row0 +
// n_tokens) of q and out, row row0 + i sits at position pos0 + i and sees keys [0, pos0 + i].
struct DeviceAttentionSeq {
  const void* k;  // [n_kv_heads][capacity][head_dim]
  const void* v;  // [n_kv_heads][capacity][head_dim]
  std::int64_t kv_stride, row0, n_tokens, pos0;  // kv_stride = capacity * head_dim
  bool operator==(const DeviceAttentionSeq&) const = default;
};

namespace detail {
inline constexpr unsigned attn_threads = 128;  // 4 warps
inline constexpr int attn_tile = 64;           // keys per tile: two per lane in the softmax step
inline constexpr int attn_heads = 8;           // query heads per block: accumulators in registers
inline constexpr int attn_max_dim = 256;
inline constexpr int attn_key_lanes = 8;       // lanes sharing one key's dot product
// K and V elements each thread loads before it uses the first: without them in flight together,
// each tile cost a memory latency per key (H200: ~0.5 us a key a layer in decode).
inline constexpr int attn_loads = 8;
inline constexpr int attn_dim_threads = attn_max_dim / static_cast<int>(attn_threads);  // V columns per thread
// Blocks a launch should have to fill a GPU (132 SMs on an H100/H200): fewer (rows x KV heads x head
// blocks) and each row's keys are split into up to attn_max_splits shares.
inline constexpr std::int64_t attn_target_blocks = 256;
inline constexpr std::int64_t attn_max_splits = 16;
// Floats of the shares' scratch at most (splits x rows x heads <= attn_target_blocks x attn_heads).
inline constexpr std::int64_t attn_partial_floats = attn_target_blocks * attn_heads * (attn_max_dim + 2);

// The sequence that query row `row` belongs to, or null (a row of no sequence).
KYLIN_HD inline const DeviceAttentionSeq* row_sequence(const DeviceAttentionSeq* seqs, std::int64_t n_seqs, std::int64_t row) {
  for (std::int64_t s = 0; s < n_seqs; ++s)
    if (row >= seqs[s].row0 && row < seqs[s].row0 + seqs[s].n_tokens) return &seqs[s];
  return nullptr;
}
}  // namespace detail

// Split: each row's keys in `splits` shares (grid z), each share's state to `partial`; the two
// forms are separate kernels, so that the unsplit one (prefill) is compiled for itself.
template <bool Split>
struct AttentionKernelOf {
  const float* q;  // [n_rows, n_heads * head_dim]
  float* out;      // [n_rows, n_heads * head_dim]
  const DeviceAttentionSeq* seqs;  // [n_seqs]
  std::int64_t n_seqs, n_rows, n_heads, n_kv_heads, head_dim;  // head_dim <= 256
  float scale;                                                 // head_dim^-0.5
  DType kv_dtype;                                              // f32 or f16 (bf16 also)
  unsigned splits = 1;       // Split: shares of each row's keys (splits_for)
  float* partial = nullptr;  // Split: [n_rows, n_heads, splits, head_dim + 2] each share's sums, max, sum

  bool operator==(const AttentionKernelOf&) const = default;

  std::int64_t groups() const { return n_heads / n_kv_heads; }
  std::int64_t head_blocks() const { return (groups() + detail::attn_heads - 1) / detail::attn_heads; }
  std::int64_t block_heads() const { return groups() < detail::attn_heads ? groups() : detail::attn_heads; }
  // Key shares per row so that the launch has about attn_target_blocks blocks; the same for every
  // decode step of a batch, so that a step's graph replays as the context grows.
  unsigned splits_for() const {
    const std::int64_t blocks = (n_rows < 1 ? 1 : n_rows) * n_kv_heads * head_blocks();
    const std::int64_t s = detail::attn_target_blocks / blocks;
    return static_cast<unsigned>(s < 2 ? 1 : s > detail::attn_max_splits ? detail::attn_max_splits : s);
  }

  // Grid (query row, KV head x head block, key share); shared memory: queries [heads, head_dim],
  // probabilities [heads, tile], running max [2, heads], sum and correction [heads].
  LaunchShape shape() const {
    const std::int64_t g = block_heads();
    return {{static_cast<unsigned>(n_rows < 1 ? 1 : n_rows), static_cast<unsigned>(n_kv_heads * head_blocks()), Split ? splits : 1u},
            {detail::attn_threads},
            static_cast<std::size_t>(g * (head_dim + detail::attn_tile + 4)) * sizeof(float)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    if (head_dim > detail::attn_max_dim) return run<void>(t);  // NaN: the accumulators hold 256 columns
    switch (kv_dtype) {
      case DType::f32: return run<float>(t);
      case DType::f16: return run<f16_t>(t);
      case DType::bf16: return run<bf16_t>(t);
      default: return run<void>(t);
    }
  }

  // The block's work: query row, its sequence, the heads [h0, h0 + ng) of KV head kvh, keys [j0, j1).
  struct Item {
    const DeviceAttentionSeq* seq;
    std::int64_t row, j0, j1, kvh, h0;
    int ng;
  };

  template <class Thread>
  KYLIN_HD bool find_item(Thread& t, Item& it) const {
    const std::int64_t G = n_heads / n_kv_heads, hb = (G + detail::attn_heads - 1) / detail::attn_heads;
    it.row = t.block_idx().x;
    it.kvh = t.block_idx().y / hb;
    const std::int64_t g0 = (t.block_idx().y % hb) * detail::attn_heads;
    it.h0 = it.kvh * G + g0;
    it.ng = static_cast<int>(G - g0 < detail::attn_heads ? G - g0 : detail::attn_heads);
    it.seq = detail::row_sequence(seqs, n_seqs, it.row);
    if (!it.seq) return false;
    const std::int64_t n_keys = it.seq->pos0 + (it.row - it.seq->row0) + 1, tile = detail::attn_tile;
    it.j0 = 0;
    it.j1 = n_keys;
    if constexpr (Split) {
      const std::int64_t share = (n_keys + splits - 1) / splits, per = (share + tile - 1) / tile * tile;  // whole tiles
      it.j0 = t.block_idx().z * per;
      it.j1 = it.j0 + per < n_keys ? it.j0 + per : n_keys;
    }
    return true;
  }

  template <class T, class Thread>
  KYLIN_HD void run(Thread& t) const {
    Item it{};
    if (!find_item(t, it)) return;  // a row of no sequence: the whole block leaves, out untouched
    const std::int64_t D = head_dim;
    const int ng = it.ng;
    float* q_s = t.template shared<float>();  // [ng, D]
    float* p_s = q_s + ng * D;                // [ng, tile] scores, then probabilities
    float* m_s = p_s + ng * detail::attn_tile;  // [2, ng] running max: tile i reads half i % 2, writes the other
    float* l_s = m_s + 2 * ng;                  // [ng] running sum
    float* c_s = l_s + ng;                      // [ng] this tile's rescale of the accumulators
    const unsigned tid = t.thread_idx().x;
    const float* qr = q + (it.row * n_heads + it.h0) * D;
    for (std::int64_t i = tid; i < ng * D; i += detail::attn_threads) q_s[i] = qr[i];
    if (tid < static_cast<unsigned>(ng)) {
      m_s[tid] = -INFINITY;
      l_s[tid] = 0.f;
    }
    float acc[detail::attn_heads][detail::attn_dim_threads] = {};
    t.sync();
    if constexpr (!std::is_void_v<T>) {
      const T* k = static_cast<const T*>(it.seq->k) + it.kvh * it.seq->kv_stride;
      const T* v = static_cast<const T*>(it.seq->v) + it.kvh * it.seq->kv_stride;
      for (std::int64_t j0 = it.j0, tile = 0; j0 < it.j1; j0 += detail::attn_tile, ++tile) {
        const int nk = static_cast<int>(it.j1 - j0 < detail::attn_tile ? it.j1 - j0 : detail::attn_tile);
        scores(t, k + j0 * D, nk, ng, q_s, p_s);
        t.sync();
        softmax_step(t, nk, ng, p_s, {.max_in = m_s + (tile % 2) * ng, .max_out = m_s + (1 - tile % 2) * ng, .sum = l_s, .corr = c_s});
        t.sync();
        accumulate(v + j0 * D, nk, ng, p_s, c_s, tid, acc);
        t.sync();  // p_s is rewritten by the next tile
      }
    }
    if constexpr (Split) return store_share(t, it, acc, m_s + (((it.j1 - it.j0 + detail::attn_tile - 1) / detail::attn_tile) % 2) * ng, l_s);
    float* o = out + (it.row * n_heads + it.h0) * D;
    for (int c = 0; c < detail::attn_dim_threads; ++c) {
      const std::int64_t d = tid + c * detail::attn_threads;
      if (d >= D) break;
      for (int g = 0; g < detail::attn_heads && g < ng; ++g)
        o[g * D + d] = std::is_void_v<T> ? detail::poison() : acc[g][c] / l_s[g];
    }
  }

  // This block's share of keys for its heads: the unnormalised sums, then the running max and sum
  // (an empty share: 0s, -inf and 0, which the combination weighs by e^-inf = 0).
  template <class Thread>
  KYLIN_HD void store_share(Thread& t, const Item& it, const float (&acc)[detail::attn_heads][detail::attn_dim_threads], const float* m,
                            const float* l) const {
    const std::int64_t D = head_dim, stride = D + 2;
    const unsigned tid = t.thread_idx().x;
    KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g) {  // a constant bound keeps acc[] in registers
      if (g >= it.ng) break;
      float* p = partial + ((it.row * n_heads + it.h0 + g) * splits + t.block_idx().z) * stride;
      KYLIN_UNROLL for (int c = 0; c < detail::attn_dim_threads; ++c) {
        const std::int64_t d = tid + c * detail::attn_threads;
        if (d < D) p[d] = acc[g][c];
      }
      if (tid == 0) {
        p[D] = m[g];
        p[D + 1] = l[g];
      }
    }
  }

  // p_s[g, j] = scale * q_g · k_j: 8 lanes per key (4 keys per warp step) striding along head_dim,
  // so a key's dot product takes 3 shuffles per head, not a whole warp's 5.
  template <class T, class Thread>
  KYLIN_HD void scores(Thread& t, const T* k, int nk, int ng, const float* q_s, float* p_s) const {
    constexpr int lanes = detail::attn_key_lanes, keys_per_warp = static_cast<int>(warp_size) / lanes;
    constexpr int step = keys_per_warp * static_cast<int>(detail::attn_threads / warp_size);
    const int lane = static_cast<int>(t.thread_idx().x % warp_size), warp = static_cast<int>(t.thread_idx().x / warp_size);
    const int sub = lane % lanes;
    for (int j0 = warp * keys_per_warp; j0 < nk; j0 += step) {
      const int j = j0 + lane / lanes;
      const bool live = j < nk;  // dead lanes still shuffle, with zeros
      float part[detail::attn_heads] = {};
      constexpr int U = detail::attn_loads;
      std::int64_t d = sub;
      for (; live && d + (U - 1) * lanes < head_dim; d += U * lanes) {  // the same sums in the same order, U loads at a time
        float kd[U];
        KYLIN_UNROLL for (int u = 0; u < U; ++u) kd[u] = detail::to_f32(k[j * head_dim + d + u * lanes]);
        KYLIN_UNROLL for (int u = 0; u < U; ++u) KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g)
          if (g < ng) part[g] += q_s[g * head_dim + d + u * lanes] * kd[u];
      }
      for (; live && d < head_dim; d += lanes) {
        const float kd = detail::to_f32(k[j * head_dim + d]);
        KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g)
          if (g < ng) part[g] += q_s[g * head_dim + d] * kd;
      }
      KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g) {  // a constant bound keeps part[] in registers
        if (g >= ng) break;
        float s = part[g];
        for (int m = 1; m < lanes; m <<= 1) s += t.shfl_xor(s, m);
        if (live && sub == 0) p_s[g * detail::attn_tile + j] = s * scale;
      }
    }
  }

  // The online softmax's per-head state in shared memory. The running max is read by every lane and
  // written by one, so it alternates between two arrays: no write lands where this tile reads.
  struct SoftmaxState {
    const float* max_in;  // [ng]
    float* max_out;       // [ng]
    float* sum;           // [ng]
    float* corr;          // [ng] e^(old max - new max), for the accumulators
  };

  // Per head (a warp each): the tile's max, p = e^(s - new max), and the running sum rescaled.
  template <class Thread>
  KYLIN_HD void softmax_step(Thread& t, int nk, int ng, float* p_s, const SoftmaxState& st) const {
    const int lane = static_cast<int>(t.thread_idx().x % warp_size), warp = static_cast<int>(t.thread_idx().x / warp_size);
    for (int g = warp; g < ng; g += detail::attn_threads / warp_size) {
      float* p = p_s + g * detail::attn_tile;
      const int j1 = lane + static_cast<int>(warp_size);
      const float s0 = lane < nk ? p[lane] : -INFINITY, s1 = j1 < nk ? p[j1] : -INFINITY;
      const float m_old = st.max_in[g], m_new = fmaxf(m_old, detail::warp_max(t, fmaxf(s0, s1)));
      const float e0 = lane < nk ? expf(s0 - m_new) : 0.f, e1 = j1 < nk ? expf(s1 - m_new) : 0.f;
      if (lane < nk) p[lane] = e0;
      if (j1 < nk) p[j1] = e1;
      const float sum = detail::warp_sum(t, e0 + e1);
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // 0 on the first tile: e^-inf
        st.max_out[g] = m_new;
        st.sum[g] = st.sum[g] * corr + sum;
        st.corr[g] = corr;
      }
    }
  }

  // acc[g][c] = acc * corr_g + sum_j p[g, j] * v_j[d]: threads along head_dim, each V value widened once.
  template <class T>
  KYLIN_HD void accumulate(const T* v, int nk, int ng, const float* p_s, const float* c_s, unsigned tid,
                           float (&acc)[detail::attn_heads][detail::attn_dim_threads]) const {
    KYLIN_UNROLL for (int c = 0; c < detail::attn_dim_threads; ++c) {
      const std::int64_t d = tid + c * detail::attn_threads;
      if (d >= head_dim) break;
      KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g)
        if (g < ng) acc[g][c] *= c_s[g];
      constexpr int U = detail::attn_loads;
      int j = 0;
      for (; j + U <= nk; j += U) {  // the same sums in the same order, U rows of V loaded at a time
        float vj[U];
        KYLIN_UNROLL for (int u = 0; u < U; ++u) vj[u] = detail::to_f32(v[(j + u) * head_dim + d]);
        KYLIN_UNROLL for (int u = 0; u < U; ++u) KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g)
          if (g < ng) acc[g][c] += p_s[g * detail::attn_tile + j + u] * vj[u];
      }
      for (; j < nk; ++j) {
        const float vj = detail::to_f32(v[j * head_dim + d]);
        KYLIN_UNROLL for (int g = 0; g < detail::attn_heads; ++g)
          if (g < ng) acc[g][c] += p_s[g * detail::attn_tile + j] * vj;
      }
    }
  }
};

using AttentionKernel = AttentionKernelOf<false>;
using SplitAttentionKernel = AttentionKernelOf<true>;

// out[row, h, :] = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z over the key shares z of an
// SplitAttentionKernel (M: the largest m_z): a block per (row, head), a thread per column.
struct AttentionCombineKernel {
  const float* partial;            // [n_rows, n_heads, splits, head_dim + 2]
  float* out;                      // [n_rows, n_heads * head_dim]
  const DeviceAttentionSeq* seqs;  // [n_seqs]: rows of no sequence are left untouched
  std::int64_t n_seqs, n_rows, n_heads, head_dim;
  unsigned splits;

  bool operator==(const AttentionCombineKernel&) const = default;
  LaunchShape shape() const {
    return {{static_cast<unsigned>(n_rows < 1 ? 1 : n_rows), static_cast<unsigned>(n_heads < 1 ? 1 : n_heads)}, {detail::attn_threads}, 0};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t row = t.block_idx().x, h = t.block_idx().y, D = head_dim, stride = D + 2;
    if (h >= n_heads || !detail::row_sequence(seqs, n_seqs, row)) return;
    const float* p = partial + (row * n_heads + h) * splits * stride;
    float M = -INFINITY;
    for (unsigned z = 0; z < splits; ++z) M = fmaxf(M, p[z * stride + D]);
    float l = 0.f;
    for (unsigned z = 0; z < splits; ++z) l += expf(p[z * stride + D] - M) * p[z * stride + D + 1];
    for (std::int64_t d = t.thread_idx().x; d < D; d += t.block_dim().x) {
      float s = 0.f;
      for (unsigned z = 0; z < splits; ++z) s += expf(p[z * stride + D] - M) * p[z * stride + d];
      out[(row * n_heads + h) * D + d] = s / l;
    }
  }
};

}  // namespace kylin::cuda
