// The CUDA backend's kernels, one portable source for the GPU and the host emulator (portable.hpp),
// each matching its CPU counterpart in kylin::kernels (bit for bit where the arithmetic is the same).
// Attention, the matvec, top-k and draws have headers of their own, included here: this is the one to include.
#pragma once

#include "kylin/backends/cuda/attention_kernel.hpp"
#include "kylin/backends/cuda/device_math.hpp"
#include "kylin/backends/cuda/draw_kernel.hpp"
#include "kylin/backends/cuda/matvec_kernel.hpp"
#include "kylin/backends/cuda/top_k_kernel.hpp"

namespace kylin::cuda {

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w, as kernels::rms_norm: the sum of squares
// in double (detail::inv_rms), a block per row: a decode step norms one row, and a single warp
// streaming a 1024-wide row measured 4x slower on an H200 (docs/CUDA.md). A matvec that follows
// may take the norm in instead (MatvecNorm), applied to its sums.
struct RmsNormKernel {
  const float* x;   // [rows, dim]
  const void* w;    // [dim] bf16/f16/f32
  DType w_dtype;
  float* out;       // [rows, dim], may be x
  std::int64_t rows, dim;
  double eps;

  bool operator==(const RmsNormKernel&) const = default;
  LaunchShape shape() const { return detail::row_shape(rows, detail::norm_slots * sizeof(double)); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const unsigned tid = t.thread_idx().x, threads = t.block_dim().x;
    for (std::int64_t r = t.block_idx().x; r < rows; r += t.grid_dim().x) {
      const float* xr = x + r * dim;
      const float inv = detail::inv_rms(t, xr, dim, eps);
      for (std::int64_t i = tid; i < dim; i += threads) out[r * dim + i] = xr[i] * inv * detail::norm_weight(w, w_dtype, i);
    }
  }
};

// What precedes attention, in one launch: Qwen3's per-head RMSNorm of q and k (when q_norm is
// given), RoPE on both, and the new keys and values stored into each sequence's cache; as
// kernels::rms_norm, kernels::rope and kernels::store_kv_ref in that order. A warp per head row (q
// heads, then k heads, then v heads of each token); each lane rotates whole pairs (i, i + D/2), so
// no lane reads what another wrote.
struct AttentionInputsKernel {
  float* q;        // [rows, n_heads, head_dim], normed and rotated in place
  float* k;        // [rows, n_kv_heads, head_dim], normed, rotated in place and stored
  const float* v;  // [rows, n_kv_heads, head_dim], stored
  std::int64_t rows, n_heads, n_kv_heads, head_dim;
  const void* q_norm;  // [head_dim] or null (no norms)
  const void* k_norm;  // [head_dim]
  DType norm_dtype;
  double eps;
  const float* cos;  // [rows, head_dim / 2]
  const float* sin;  // [rows, head_dim / 2]
  const DeviceAttentionSeq* seqs;  // [n_seqs]: each row's cache and position
  std::int64_t n_seqs;
  DType kv_dtype;  // f32/f16/bf16

  bool operator==(const AttentionInputsKernel&) const = default;
  static constexpr unsigned warps = 4;
  KYLIN_HD std::int64_t items() const { return rows * (n_heads + 2 * n_kv_heads); }
  LaunchShape shape() const {
    const std::int64_t blocks = (items() + warps - 1) / warps;
    return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks)}, {warps * warp_size}, 0};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const unsigned lane = t.thread_idx().x % warp_size;
    const std::int64_t per_row = n_heads + 2 * n_kv_heads, stride = static_cast<std::int64_t>(t.grid_dim().x) * warps;
    for (std::int64_t item = static_cast<std::int64_t>(t.block_idx().x) * warps + t.thread_idx().x / warp_size; item < items();
         item += stride) {  // the same for the whole warp
      const std::int64_t r = item / per_row, j = item % per_row;
      if (j < n_heads) {
        norm_rope(t, q + (r * n_heads + j) * head_dim, q_norm, r, lane, nullptr, 0, 0);
        continue;
      }
      const std::int64_t h = (j - n_heads) % n_kv_heads;
      std::int64_t pos = 0;
      const DeviceAttentionSeq* s = seq_of(r, pos);
      if (!s) continue;  // a row of no sequence: nothing to store (rows are never left unrotated for one)
      if (j < n_heads + n_kv_heads) norm_rope(t, k + (r * n_kv_heads + h) * head_dim, k_norm, r, lane, s->k, h * s->kv_stride + pos * head_dim, 1);
      else
        for (std::int64_t i = lane; i < head_dim; i += warp_size) store(s->v, h * s->kv_stride + pos * head_dim + i, v[(r * n_kv_heads + h) * head_dim + i]);
    }
  }

  // The sequence row r belongs to, and r's position in it.
  KYLIN_HD const DeviceAttentionSeq* seq_of(std::int64_t r, std::int64_t& pos) const {
    for (std::int64_t i = 0; i < n_seqs; ++i)
      if (r >= seqs[i].row0 && r < seqs[i].row0 + seqs[i].n_tokens) {
        pos = seqs[i].pos0 + (r - seqs[i].row0);
        return &seqs[i];
      }
    return nullptr;
  }

  // One head row x: normed (when norm is given, the sum of squares in double as RmsNormKernel),
  // rotated in place, and (store) written into cache at element `at` on.
  template <class Thread>
  KYLIN_HD void norm_rope(Thread& t, float* x, const void* norm, std::int64_t r, unsigned lane, const void* cache, std::int64_t at,
                          int store_it) const {
    const std::int64_t D = head_dim, half = D / 2;
    float inv = 1.f;
    if (q_norm) {  // the same for q and k rows: both normed or neither
      double ss = 0.0;
      for (std::int64_t i = lane; i < D; i += warp_size) ss += static_cast<double>(x[i]) * x[i];
      ss = detail::warp_sum(t, ss);
      inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + eps));
    }
    for (std::int64_t i = lane; i < half; i += warp_size) {
      float a = x[i], b = x[i + half];
      if (q_norm) {
        a = a * inv * detail::norm_weight(norm, norm_dtype, i);
        b = b * inv * detail::norm_weight(norm, norm_dtype, i + half);
      }
      const float c = cos[r * half + i], s = sin[r * half + i];
      const float ra = a * c - b * s, rb = b * c + a * s;
      x[i] = ra;
      x[i + half] = rb;
      if (store_it) {
        store(const_cast<void*>(cache), at + i, ra);
        store(const_cast<void*>(cache), at + i + half, rb);
      }
    }
  }

  // As kernels::store_kv_ref (f16/bf16: nearest-even).
  KYLIN_HD void store(const void* cache, std::int64_t e, float value) const {
    switch (kv_dtype) {
      case DType::f32: static_cast<float*>(const_cast<void*>(cache))[e] = value; break;
      case DType::f16: static_cast<std::uint16_t*>(const_cast<void*>(cache))[e] = detail::f32_to_f16(value); break;
      case DType::bf16: static_cast<std::uint16_t*>(const_cast<void*>(cache))[e] = detail::f32_to_bf16(value); break;
      default: break;  // no element size to write with: the cache is left untouched
    }
  }
};

// gate = gate / (1 + e^-gate) * up, as kernels::silu_mul_ref.
struct SiluMulKernel {
  float* gate;      // [n]
  const float* up;  // [n]
  std::int64_t n;

  bool operator==(const SiluMulKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n; i += detail::global_stride(t))
      gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  }
};

struct AddKernel {
  float* acc;      // [n]
  const float* x;  // [n]
  std::int64_t n;

  bool operator==(const AddKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n; i += detail::global_stride(t)) acc[i] += x[i];
  }
};

struct FillKernel {
  float* out;  // [n]
  std::int64_t n;
  float value;

  bool operator==(const FillKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n; i += detail::global_stride(t)) out[i] = value;
  }
};

// out[i, :] = x[rows[i], :], one block per selected row.
struct GatherRowsKernel {
  const float* x;            // [*, width]
  const std::int64_t* rows;  // [n_rows]
  std::int64_t n_rows, width;
  float* out;  // [n_rows, width]

  bool operator==(const GatherRowsKernel&) const = default;
  LaunchShape shape() const { return detail::row_shape(n_rows); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = t.block_idx().x; i < n_rows; i += t.grid_dim().x) {
      const float* src = x + rows[i] * width;
      for (std::int64_t j = t.thread_idx().x; j < width; j += t.block_dim().x) out[i * width + j] = src[j];
    }
  }
};

// acc[rows[i], :] += weights[i] * y[i, :]; the rows of one call are distinct, so blocks never race.
struct AddRowsScaledKernel {
  float* acc;                // [*, width]
  const float* y;            // [n_rows, width]
  const std::int64_t* rows;  // [n_rows]
  const float* weights;      // [n_rows]
  std::int64_t n_rows, width;

  bool operator==(const AddRowsScaledKernel&) const = default;
  LaunchShape shape() const { return detail::row_shape(n_rows); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = t.block_idx().x; i < n_rows; i += t.grid_dim().x) {
      float* a = acc + rows[i] * width;
      const float w = weights[i];
      for (std::int64_t j = t.thread_idx().x; j < width; j += t.block_dim().x) a[j] += w * y[i * width + j];
    }
  }
};

namespace detail {

// Element e of a row-major weight [rows, cols], widened (Q8_0: int8 * its block's f16 scale, exact).
KYLIN_HD inline float weight_element(const void* w, DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t e) {
  switch (dtype) {
    case DType::bf16: return to_f32(static_cast<const bf16_t*>(w)[e]);
    case DType::f16: return to_f32(static_cast<const f16_t*>(w)[e]);
    case DType::f32: return static_cast<const float*>(w)[e];
    case DType::q8_0: {
      const auto* q = static_cast<const std::int8_t*>(w);
      const auto* scale = reinterpret_cast<const std::uint16_t*>(q + rows * cols);
      return q[e] * f16_to_f32(scale[e / 32]);  // cols is a multiple of 32: block e / 32 of the flat table
    }
    case DType::q4_0: {
      const auto* q = static_cast<const std::uint8_t*>(w);
      const auto* scale = reinterpret_cast<const std::uint16_t*>(q + rows * (cols / 2));
      const std::int64_t r = e / cols, c = e % cols;
      return static_cast<float>(q4_value(q + r * (cols / 2), cols / 32, c / 32, static_cast<int>(c % 32))) * f16_to_f32(scale[e / 32]);
    }
    default: return poison();
  }
}

}  // namespace detail

// out = row `id` of an embedding table, widened (Q8_0: int8 * its block's f16 scale, exact).
struct EmbedKernel {
  const void* table;  // [rows, cols] bf16/f16/f32, or Q8_0: int8 [rows, cols] then f16 scales [rows, cols / 32]
  DType dtype;
  std::int64_t rows, cols;
  const int* ids;  // [n] in device memory: a decode step's graph replays with the next tokens
  std::int64_t n;
  float* out;      // [n, cols]

  bool operator==(const EmbedKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n * cols); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n * cols; i += detail::global_stride(t))
      out[i] = detail::weight_element(table, dtype, rows, cols, ids[i / cols] * cols + i % cols);
  }

};

// out[i, :] = row r0 + i of a weight, widened to f32 as EmbedKernel widens (exact): prefill rows
// on F16/Q8_0/Q4_0 weights take the f32 GEMM over such rows, a chunk of them at a time.
struct WidenRowsKernel {
  const void* w;  // [rows, cols] in its stored dtype (EmbedKernel's table)
  DType dtype;
  std::int64_t rows, cols, r0, n;
  float* out;     // [n, cols]

  bool operator==(const WidenRowsKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n * cols); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n * cols; i += detail::global_stride(t))
      out[i] = detail::weight_element(w, dtype, rows, cols, r0 * cols + i);
  }
};

// ids[r] = kernels::argmax(x[r, 0 .. width)): the lowest id among the highest logits, NaN never,
// -1 when none is above -inf; a block a row. Each thread walks ids tid, tid + T, ... upwards with
// `unroll` loads in flight (a row is ~600 KB of L2 reads for one block), then the block keeps the
// higher logit, the lower id on a tie: an order-free rule, so the CPU's pick whatever the tree.
struct ArgmaxKernel {
  const float* x;  // [rows, stride]
  std::int64_t rows, width, stride;
  int* ids;  // [rows]

  bool operator==(const ArgmaxKernel&) const = default;
  static constexpr unsigned max_block_threads = 1024, min_blocks_per_sm = 1;
  static constexpr int unroll = 8;
  LaunchShape shape() const {
    const LaunchShape r = detail::row_shape(rows);
    return {r.grid, {max_block_threads}, max_block_threads * (sizeof(float) + sizeof(int))};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const unsigned tid = t.thread_idx().x, T = t.block_dim().x;
    float* best = t.template shared<float>();                 // [T]
    int* at = reinterpret_cast<int*>(best + T);               // [T]
    for (std::int64_t r = t.block_idx().x; r < rows; r += t.grid_dim().x) {
      const float* xr = x + r * stride;
      float b = -INFINITY;
      int a = -1;
      for (std::int64_t i0 = tid; i0 < width; i0 += static_cast<std::int64_t>(T) * unroll) {
        float v[unroll];
        KYLIN_UNROLL for (int u = 0; u < unroll; ++u) {
          const std::int64_t i = i0 + static_cast<std::int64_t>(u) * T;
          v[u] = i < width ? xr[i] : -INFINITY;
        }
        KYLIN_UNROLL for (int u = 0; u < unroll; ++u) if (v[u] > b) {
          b = v[u];
          a = static_cast<int>(i0 + static_cast<std::int64_t>(u) * T);
        }
      }
      best[tid] = b;
      at[tid] = a;
      t.sync();
      for (unsigned h = T / 2; h > 0; h >>= 1) {
        if (tid < h && at[tid + h] >= 0 && (at[tid] < 0 || best[tid + h] > best[tid] || (best[tid + h] == best[tid] && at[tid + h] < at[tid]))) {
          best[tid] = best[tid + h];
          at[tid] = at[tid + h];
        }
        t.sync();
      }
      if (tid == 0) ids[r] = at[0];
      t.sync();  // at[0] is read before the next row overwrites it
    }
  }
};

// hi = bf16(x) and lo = bf16(x - hi), both nearest-even: two BF16 GEMMs over hi and lo keep ~16 bits of x.
struct SplitBf16Kernel {
  const float* x;  // [n]
  std::int64_t n;
  std::uint16_t* hi;  // [n] bf16
  std::uint16_t* lo;  // [n] bf16

  bool operator==(const SplitBf16Kernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < n; i += detail::global_stride(t)) {
      const std::uint16_t h = detail::f32_to_bf16(x[i]);
      hi[i] = h;
      lo[i] = detail::f32_to_bf16(x[i] - detail::bf16_to_f32(h));
    }
  }
};

// y[r, c] += bias[c] after a GEMM: blocks tile the columns (x) and stride over rows (y).
struct AddBiasKernel {
  float* y;           // [rows, cols]
  const float* bias;  // [cols]
  std::int64_t rows, cols;

  bool operator==(const AddBiasKernel&) const = default;
  LaunchShape shape() const {
    const LaunchShape c = detail::elementwise_shape(cols), r = detail::row_shape(rows);
    return {{c.grid.x, r.grid.x}, {detail::block_threads}, 0};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t r = t.block_idx().y; r < rows; r += t.grid_dim().y)
      for (std::int64_t c = detail::global_index(t); c < cols; c += detail::global_stride(t)) y[r * cols + c] += bias[c];
  }
};

}  // namespace kylin::cuda
