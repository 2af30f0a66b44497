// The CUDA backend's kernels, one portable source for the GPU and the host emulator (portable.hpp),
// each matching its CPU counterpart in kylin::kernels (bit for bit where the arithmetic is the same).
// Attention and the matvec have headers of their own, included here: this is the one to include.
#pragma once

#include "kylin/backends/cuda/attention_kernel.hpp"
#include "kylin/backends/cuda/device_math.hpp"
#include "kylin/backends/cuda/matvec_kernel.hpp"

namespace kylin::cuda {

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w, as kernels::rms_norm: the sum of squares
// in double. A warp per row (4 rows a block), reduced by shuffles: no shared memory, no barrier,
// so the q/k head norms (rows of 64-256) and a decode step's hidden norms cost a launch each.
struct RmsNormKernel {
  const float* x;   // [rows, dim]
  const void* w;    // [dim] bf16/f16/f32
  DType w_dtype;
  float* out;       // [rows, dim], may be x
  std::int64_t rows, dim;
  double eps;

  bool operator==(const RmsNormKernel&) const = default;
  static constexpr unsigned warps = 4;
  LaunchShape shape() const {
    const std::int64_t blocks = (rows + warps - 1) / warps;
    return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks)}, {warps * warp_size}, 0};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    switch (w_dtype) {
      case DType::bf16: return run<bf16_t>(t);
      case DType::f16: return run<f16_t>(t);
      case DType::f32: return run<float>(t);
      default: return run<void>(t);
    }
  }

  template <class T, class Thread>
  KYLIN_HD void run(Thread& t) const {
    const unsigned lane = t.thread_idx().x % warp_size, warp = t.thread_idx().x / warp_size;
    for (std::int64_t r = static_cast<std::int64_t>(t.block_idx().x) * warps + warp; r < rows;
         r += static_cast<std::int64_t>(t.grid_dim().x) * warps) {  // the same trip count for every lane
      const float* xr = x + r * dim;
      double ss = 0.0;
      for (std::int64_t i = lane; i < dim; i += warp_size) ss += static_cast<double>(xr[i]) * xr[i];
      ss = detail::warp_sum(t, ss);
      const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
      for (std::int64_t i = lane; i < dim; i += warp_size) {
        if constexpr (std::is_void_v<T>) out[r * dim + i] = detail::poison();
        else out[r * dim + i] = xr[i] * inv * detail::to_f32(static_cast<const T*>(w)[i]);
      }
    }
  }
};

// Rotary embedding in the rotate_half layout, as kernels::rope: one thread per pair (i, i + half).
struct RopeKernel {
  float* x;  // [n_tokens, n_heads, head_dim], rotated in place
  std::int64_t n_tokens, n_heads, head_dim;
  const float* cos;  // [n_tokens, head_dim / 2]
  const float* sin;  // [n_tokens, head_dim / 2]

  bool operator==(const RopeKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n_tokens * n_heads * (head_dim / 2)); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t half = head_dim / 2, n = n_tokens * n_heads * half;
    for (std::int64_t p = detail::global_index(t); p < n; p += detail::global_stride(t)) {
      const std::int64_t i = p % half, th = p / half, tok = th / n_heads;
      float* v = x + th * head_dim;
      const float a = v[i], b = v[i + half], c = cos[tok * half + i], s = sin[tok * half + i];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
};

// New K or V rows into a cache slab at positions pos0.., as kernels::store_kv_ref (f16: nearest-even).
struct StoreKVKernel {
  void* cache;  // [n_kv_heads][capacity][head_dim] f32/f16 (bf16 also)
  DType dtype;
  std::int64_t n_kv_heads, head_dim, head_stride;  // head_stride = capacity * head_dim
  const float* rows;                               // [n_tokens, n_kv_heads, head_dim]
  std::int64_t n_tokens;
  const std::int64_t* pos0;  // [1] in device memory: a decode step's graph replays with the next position

  bool operator==(const StoreKVKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(n_tokens * n_kv_heads * head_dim); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t n = n_tokens * n_kv_heads * head_dim;
    for (std::int64_t e = detail::global_index(t); e < n; e += detail::global_stride(t)) {
      const std::int64_t i = e % head_dim, th = e / head_dim, h = th % n_kv_heads, tok = th / n_kv_heads;
      const std::int64_t dst = h * head_stride + (*pos0 + tok) * head_dim + i;
      const float v = rows[e];
      switch (dtype) {
        case DType::f32: static_cast<float*>(cache)[dst] = v; break;
        case DType::f16: static_cast<std::uint16_t*>(cache)[dst] = detail::f32_to_f16(v); break;
        case DType::bf16: static_cast<std::uint16_t*>(cache)[dst] = detail::f32_to_bf16(v); break;
        default: break;  // no element size to write with: the cache is left untouched
      }
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

// out = row `id` of an embedding table, widened (Q8_0: int8 * its block's f16 scale, exact).
struct EmbedKernel {
  const void* table;  // [rows, cols] bf16/f16/f32, or Q8_0: int8 [rows, cols] then f16 scales [rows, cols / 32]
  DType dtype;
  std::int64_t rows, cols;
  const std::int64_t* id;  // [1] in device memory, as StoreKVKernel::pos0
  float* out;              // [cols]

  bool operator==(const EmbedKernel&) const = default;
  LaunchShape shape() const { return detail::elementwise_shape(cols); }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    for (std::int64_t i = detail::global_index(t); i < cols; i += detail::global_stride(t)) out[i] = at(*id * cols + i);
  }

  KYLIN_HD float at(std::int64_t e) const {
    switch (dtype) {
      case DType::bf16: return detail::to_f32(static_cast<const bf16_t*>(table)[e]);
      case DType::f16: return detail::to_f32(static_cast<const f16_t*>(table)[e]);
      case DType::f32: return static_cast<const float*>(table)[e];
      case DType::q8_0: {
        const auto* q = static_cast<const std::int8_t*>(table);
        const auto* scale = reinterpret_cast<const std::uint16_t*>(q + rows * cols);
        return q[e] * detail::f16_to_f32(scale[e / 32]);  // cols is a multiple of 32: block e / 32 of the flat table
      }
      case DType::q4_0: {
        const auto* q = static_cast<const std::uint8_t*>(table);
        const auto* scale = reinterpret_cast<const std::uint16_t*>(q + rows * (cols / 2));
        const std::int64_t r = e / cols, c = e % cols;
        return static_cast<float>(MatvecKernel::q4_value(q + r * (cols / 2), cols / 32, c / 32, static_cast<int>(c % 32))) *
               detail::f16_to_f32(scale[e / 32]);
      }
      default: return detail::poison();
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
