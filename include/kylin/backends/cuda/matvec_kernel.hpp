// MatvecKernel: the decode rows' y = x · W^T (and every row for F16/Q8_0/Q4_0 weights) for up to
// three weights sharing x (q/k/v, gate/up) in one launch; each warp streams a few output features
// with many 16-byte loads in flight, so the weights are read once, at the memory's pace. Outputs
// narrower than their rows are long (o_proj, down_proj) split each row's columns over the block's
// warps, so that enough warps stream at once.
#pragma once

#include "kylin/backends/cuda/device_math.hpp"

namespace kylin::cuda {

namespace detail {
inline constexpr unsigned matvec_warps = 4;  // warps per block
inline constexpr int matvec_features = 2;    // output features per warp: their loads overlap
inline constexpr int matvec_unroll = 4;      // 16-byte chunks per feature and lane loaded before any is used
// Rows of x carried through one pass over a weight row: the row is read from memory once per group.
inline constexpr int matvec_rows = 8;
inline constexpr int matvec_max_outs = 3;
static_assert(matvec_warps * warp_size >= matvec_features * matvec_rows * matvec_warps, "a summing thread per output of the block");
}  // namespace detail

// How a matvec's sums land on y, fixed at compile time so that each variant is its own kernel,
// compiled (registers, unrolling) for its own store only: y = sum; y += sum (a residual added where
// it is made); or SwiGLU: outs[0] gate and outs[1] up of the same shape, a warp takes feature o of
// both and stores outs[0].y[r, o] = silu(gate) * up (kernels::silu_mul's formula), outs[1].y untouched.
enum class Store : std::uint8_t { assign, add, swiglu };

// One weight of a MatvecKernel: W [rows, in_features] in the kernel's dtype, y [n, rows].
struct MatvecOut {
  const void* w;      // bf16/f16/f32 [rows, in]; Q8_0: int8 [rows, in] then f16 scales [rows, in / 32];
                      // Q4_0: packed 4-bit [rows, in / 2] (kernels/quant.hpp's layout) then f16 scales [rows, in / 32]
  const float* bias;  // [rows] or null
  float* y;           // [n, rows]
  std::int64_t rows;
  bool operator==(const MatvecOut&) const = default;
};

// An RMSNorm taken into a matvec (CudaBackend holds a decode step's norm back for the product that
// reads it). The norm is applied after the sums: W · (x * inv * w) = inv * (W · (x * w)), so every
// block stages x * w in shared memory (one pass over x, no reduction before the first weight load)
// and scales its sums by inv = 1 / sqrt(mean(x^2) + eps) once they are made; block 0 also writes
// x * inv * w to out, where the norm would have put it. Not the unfused path's bits (the products
// round before the scale): within 1e-6 relative of them for BF16/F16 weights.
struct MatvecNorm {
  const float* x = nullptr;  // [n, in_features] before the norm
  const void* w = nullptr;   // [in_features] bf16/f16/f32
  DType w_dtype = DType::f32;
  double eps = 0;
  float* out = nullptr;  // [n, in_features], not x: other blocks still read x while block 0 writes
  bool operator==(const MatvecNorm&) const = default;
};

// y_i[r, o] (+)= x[r, :] · W_i[o, :] (+ bias_i[o]) for r < n and every output i, f32 accumulation. The
// outputs' features are numbered one after another; warp g of the grid takes features
// g * matvec_features ... Q8_0 and Q4_0 are kernels::matmul_ref's quantized product: x is
// quantized per block of 32 exactly as quantize_rows_q8 does (in registers), so each block pair is
// the same exact integer dot product, scaled and summed in float.
// Normed: x is norm(norm.x), made in shared memory (MatvecNorm); its own kernel, so that the plain
// one keeps its registers (the normed loop reads x through a generic pointer).
template <Store Kind, bool Normed = false>
struct MatvecKernelOf {
  const float* x;  // [n, in_features]
  std::int64_t n;
  DType w_dtype;  // of every output's weight
  std::int64_t in_features;
  MatvecOut outs[detail::matvec_max_outs];
  int n_outs;
  unsigned k_split = 1;  // warps sharing a feature's columns: 1, or matvec_warps (split_for)
  MatvecNorm norm{};     // Normed only
  static_assert(Kind != Store::swiglu || detail::matvec_features == 2, "a SwiGLU warp takes one feature of gate and one of up");

  bool operator==(const MatvecKernelOf&) const = default;
  // The same launch with the norm m taken in.
  MatvecKernelOf<Kind, true> normed(const MatvecNorm& m) const {
    static_assert(detail::matvec_max_outs == 3);
    return {.x = x, .n = n, .w_dtype = w_dtype, .in_features = in_features, .outs = {outs[0], outs[1], outs[2]}, .n_outs = n_outs, .k_split = k_split, .norm = m};
  }
  // 4 blocks (16 warps) per SM, so that registers stay at 128: at 130 an SM holds 3, and decode
  // measured 8 % slower on an H200 (docs/log/2026-11-26-cuda-third-gpu-round.md).
  static constexpr unsigned max_block_threads = detail::matvec_warps * warp_size, min_blocks_per_sm = 4;
  // Rows split over the block's warps when they are longer than the launch has features (o_proj,
  // down_proj); short rows unsplit, where 1024 columns would leave each warp one 16-byte load per
  // lane. The matvec benchmark's sweep of both on an H200 is in docs/CUDA.md.
  static unsigned split_for(std::int64_t features, std::int64_t in_features) {
    return in_features > features ? detail::matvec_warps : 1;
  }

  std::int64_t features() const {
    std::int64_t total = 0;
    for (int i = 0; i < n_outs; ++i) total += outs[i].rows;
    return total;
  }
  // Shared memory: every lane's partial sums [warps, features, rows, 33] (padded: the sums read no
  // bank twice). Two barriers per group of rows instead of 5 shuffles per sum: the emulator that
  // tests the kernel pays per rendezvous, the GPU hardly notices.
  // With a norm, then: x * w [n, in_features] f32, each thread's sum of squares [n, threads] f64,
  // and each row's inv [n] f32.
  static constexpr unsigned pitch = warp_size + 1;
  static constexpr std::size_t partial_bytes = detail::matvec_warps * detail::matvec_features * detail::matvec_rows * pitch * sizeof(float);
  static_assert(partial_bytes >= detail::norm_slots * sizeof(double) && partial_bytes % 16 == 0, "inv_rms's sums fit; the rows stay 16-byte aligned");
  static_assert(detail::norm_slots % (detail::matvec_warps * warp_size) == 0, "the block's threads divide the norm's slots");
  LaunchShape shape() const {
    const std::int64_t per_block = detail::matvec_warps / k_split * detail::matvec_features;
    const std::int64_t blocks = (features() + per_block - 1) / per_block;
    const std::size_t rows_bytes = Normed ? norm_bytes(n, in_features) : 0;
    return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks)}, {detail::matvec_warps * warp_size}, partial_bytes + rows_bytes};
  }

  static std::size_t norm_bytes(std::int64_t n, std::int64_t in) {
    const auto rows = static_cast<std::size_t>(n);
    return (rows * static_cast<std::size_t>(in) * sizeof(float) + 7) / 8 * 8 + rows * max_block_threads * sizeof(double) + rows * sizeof(float);
  }

  // Output feature g as (output, row): where its weight row, scales and results are.
  struct Feature {
    int out = -1;  // -1: past the last feature
    std::int64_t row = 0;
  };
  KYLIN_HD Feature feature(std::int64_t g) const {
    for (int i = 0; i < n_outs; ++i) {
      if (g < outs[i].rows) return {i, g};
      g -= outs[i].rows;
    }
    return {};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    constexpr int F = detail::matvec_features, R = detail::matvec_rows;
    const unsigned tid = t.thread_idx().x, lane = tid % warp_size, warp = tid / warp_size;
    const unsigned S = k_split, groups = detail::matvec_warps / S, group = warp / S, part = warp % S;  // part: which columns
    const std::int64_t b0 = static_cast<std::int64_t>(t.block_idx().x) * groups;  // the block's first group
    Feature fs[F];
    KYLIN_UNROLL for (int f = 0; f < F; ++f) fs[f] = feature_of_group(b0 + group, f);
    const bool live = fs[0].out >= 0;  // the same for the whole warp: its shuffles stay convergent
    const float* xs = x;  // [n, in_features]
    if constexpr (Normed) xs = weighted_rows(t);
    float* partial = t.template shared<float>();  // [warps, F, R, pitch]
    for (std::int64_t r0 = 0; r0 < n; r0 += R) {
      const int nr = n - r0 < R ? static_cast<int>(n - r0) : R;
      float acc[F][R] = {};
      if (live) switch (w_dtype) {
          case DType::bf16: dot_rows<bf16_t>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::f16: dot_rows<f16_t>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::f32: dot_rows<float>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::q8_0:
            KYLIN_UNROLL for (int f = 0; f < F; ++f) if (fs[f].out >= 0) quant_dot_rows<false>(t, xs, fs[f], r0, nr, lane, part, acc[f]);
            break;
          case DType::q4_0:
            KYLIN_UNROLL for (int f = 0; f < F; ++f) if (fs[f].out >= 0) quant_dot_rows<true>(t, xs, fs[f], r0, nr, lane, part, acc[f]);
            break;
          default:
            KYLIN_UNROLL for (int f = 0; f < F; ++f) KYLIN_UNROLL for (int r = 0; r < R; ++r) acc[f][r] = detail::poison();
        }
      KYLIN_UNROLL for (int f = 0; f < F; ++f) KYLIN_UNROLL for (int r = 0; r < R; ++r) partial[((warp * F + f) * R + r) * pitch + lane] = acc[f][r];
      if constexpr (Normed) if (r0 == 0) scales(t);  // the weights are read: now the norm's reduction
      t.sync();
      // Thread (group, f, r) adds its group's warps' lanes, part by part in order, and writes the output.
      const unsigned g = tid / (F * R), f = tid / R % F, r = tid % R;
      if (g < groups && static_cast<int>(r) < nr) {
        const Feature fe = feature_of_group(b0 + g, f);
        const float inv = Normed ? inv_of(t)[r0 + r] : 1.f;
        if constexpr (Kind == Store::swiglu) {
          if (fe.out == 0) write_swiglu(fe.row, r0 + r, inv * sum_of(partial, g, 0, r), inv * sum_of(partial, g, 1, r));  // thread f = 0 sums both
        } else if (fe.out >= 0) {
          float s = 0.f;
          for (unsigned p = 0; p < S; ++p)
            for (unsigned l = 0; l < warp_size; ++l) s += partial[(((g * S + p) * F + f) * R + r) * pitch + l];
          write(fe, r0 + r, Normed ? inv * s : s);
        }
      }
      t.sync();  // partial is rewritten by the next group of rows
    }
  }

  // norm.x * w into shared memory after the partial sums, each thread's sums of squares of the
  // elements it read after those; one barrier.
  template <class Thread>
  KYLIN_HD const float* weighted_rows(Thread& t) const {
    float* rows = t.template shared<float>() + partial_bytes / sizeof(float);  // [n, in_features]
    const unsigned tid = t.thread_idx().x, threads = t.block_dim().x;
    for (std::int64_t r = 0; r < n; ++r) {
      const float* xr = norm.x + r * in_features;
      double ss = 0.0;
      for (std::int64_t i = tid; i < in_features; i += threads) {
        const float v = xr[i];
        rows[r * in_features + i] = v * detail::norm_weight(norm.w, norm.w_dtype, i);
        ss += static_cast<double>(v) * v;
      }
      squares_of(t)[r * threads + tid] = ss;
    }
    t.sync();
    return rows;
  }
  template <class Thread>
  KYLIN_HD double* squares_of(Thread& t) const {  // [n, threads]
    const std::size_t at = (partial_bytes + static_cast<std::size_t>(n * in_features) * sizeof(float) + 7) / 8 * 8;
    return reinterpret_cast<double*>(reinterpret_cast<unsigned char*>(t.template shared<float>()) + at);
  }
  template <class Thread>
  KYLIN_HD float* inv_of(Thread& t) const {  // [n]
    return reinterpret_cast<float*>(squares_of(t) + n * static_cast<std::int64_t>(t.block_dim().x));
  }
  // Each row's inv from the threads' sums (thread r adds row r's, in thread order), visible after
  // the caller's barrier; block 0 then writes the normed rows to norm.out.
  template <class Thread>
  KYLIN_HD void scales(Thread& t) const {
    const unsigned tid = t.thread_idx().x, threads = t.block_dim().x;
    if (tid < n) {
      double ss = 0.0;
      for (unsigned j = 0; j < threads; ++j) ss += squares_of(t)[tid * threads + j];
      inv_of(t)[tid] = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(in_features) + norm.eps));
    }
    if (t.block_idx().x != 0) return;
    t.sync();
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = tid; i < in_features; i += threads)
        norm.out[r * in_features + i] = norm.x[r * in_features + i] * inv_of(t)[r] * detail::norm_weight(norm.w, norm.w_dtype, i);
  }

  // Group g's sum of feature f, row r: its warps' lanes, part by part in order.
  KYLIN_HD float sum_of(const float* partial, unsigned g, unsigned f, unsigned r) const {
    constexpr int F = detail::matvec_features, R = detail::matvec_rows;
    float s = 0.f;
    for (unsigned p = 0; p < k_split; ++p)
      for (unsigned l = 0; l < warp_size; ++l) s += partial[(((g * k_split + p) * F + f) * R + r) * pitch + l];
    return s;
  }
  KYLIN_HD void write_swiglu(std::int64_t o, std::int64_t row, float gate, float up) const {
    if (outs[0].bias) gate += outs[0].bias[o];
    if (outs[1].bias) up += outs[1].bias[o];
    outs[0].y[row * outs[0].rows + o] = gate / (1.0f + expf(-gate)) * up;
  }

  // Feature f of warp group g: features g * F + f in order; SwiGLU: row g of gate (f = 0) and of up (f = 1).
  KYLIN_HD Feature feature_of_group(std::int64_t g, int f) const {
    if constexpr (Kind == Store::swiglu) {
      if (g >= outs[0].rows || f > 1) return {};
      return {f, g};
    } else {
      return feature(g * detail::matvec_features + f);
    }
  }

  KYLIN_HD void write(const Feature& fe, std::int64_t row, float s) const {
    const MatvecOut& o = outs[fe.out];
    if constexpr (Kind == Store::add) o.y[row * o.rows + fe.row] += s + (o.bias ? o.bias[fe.row] : 0.f);
    else o.y[row * o.rows + fe.row] = s + (o.bias ? o.bias[fe.row] : 0.f);
  }

  // acc[f][r] = this lane's share of x[r0 + r] · W[feature f]: 16-byte loads (8 BF16/F16 or 4 F32
  // weights) at columns lane * V, (lane + 32) * V, ... of this warp's part of the chunks of 32 * V
  // columns, matvec_unroll of them per feature issued before the first is used, where rows and x
  // are 16-byte aligned; one element per lane per step otherwise (odd widths).
  template <class T>
  KYLIN_HD void dot_rows(const float* xs, const Feature (&fs)[detail::matvec_features], std::int64_t r0, int nr, unsigned lane, unsigned part,
                         float (&acc)[detail::matvec_features][detail::matvec_rows]) const {
    constexpr int F = detail::matvec_features, U = detail::matvec_unroll, R = detail::matvec_rows;
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    const std::int64_t K = in_features, step = static_cast<std::int64_t>(warp_size) * V * k_split;  // between one warp's chunks
    const float* xr = (Normed ? xs : x) + r0 * K;  // x itself when plain: a kernel parameter, no register held
    const T* wr[F] = {};
    bool vec = K % V == 0 && detail::aligned16(xr);
    KYLIN_UNROLL for (int f = 0; f < F; ++f) {
      if (fs[f].out < 0) continue;
      wr[f] = static_cast<const T*>(outs[fs[f].out].w) + fs[f].row * K;
      vec = vec && detail::aligned16(wr[f]);
    }
    if (vec) {
      for (std::int64_t k0 = (part * warp_size + lane) * V; k0 < K; k0 += step * U) {
        float wk[F][U][V];
        KYLIN_UNROLL for (int f = 0; f < F; ++f) KYLIN_UNROLL for (int u = 0; u < U; ++u) {
          if (wr[f] && k0 + u * step < K) detail::load16(wr[f] + k0 + u * step, wk[f][u]);
          else KYLIN_UNROLL for (int i = 0; i < V; ++i) wk[f][u][i] = 0.f;
        }
        KYLIN_UNROLL for (int r = 0; r < R; ++r) {
          if (r >= nr) break;
          KYLIN_UNROLL
          for (int u = 0; u < U; ++u) {
            const std::int64_t k = k0 + u * step;
            if (k >= K) break;
            KYLIN_UNROLL for (int i = 0; i < V; i += 4) {
              float xv[4];
              detail::load16(xr + r * K + k + i, xv);
              KYLIN_UNROLL for (int f = 0; f < F; ++f)
                acc[f][r] += xv[0] * wk[f][u][i] + xv[1] * wk[f][u][i + 1] + xv[2] * wk[f][u][i + 2] + xv[3] * wk[f][u][i + 3];
            }
          }
        }
      }
      return;
    }
    for (std::int64_t k = part * warp_size + lane; k < K; k += static_cast<std::int64_t>(warp_size) * k_split)
      KYLIN_UNROLL for (int f = 0; f < F; ++f) {
        if (!wr[f]) continue;
        const float wk = detail::to_f32(wr[f][k]);
        KYLIN_UNROLL for (int r = 0; r < R; ++r)
          if (r < nr) acc[f][r] += xr[r * K + k] * wk;
      }
  }

  // Q8_0/Q4_0: 8 lanes per block of 32 (4 values each), 4 blocks per warp step, the weights and
  // scales of matvec_unroll steps loaded before the first is used (one step's at a time left a
  // memory latency per 128 bytes). The 8 lanes of a block find its max |x| and integer dot product
  // by shuffles; their first lane accumulates it, step by step in order.
  template <bool Q4, class Thread>
  KYLIN_HD void quant_dot_rows(Thread& t, const float* xs, Feature fe, std::int64_t r0, int nr, unsigned lane, unsigned part,
                               float (&acc)[detail::matvec_rows]) const {
    constexpr int U = detail::matvec_unroll;
    const MatvecOut& out = outs[fe.out];
    const std::int64_t K = in_features, nb = K / 32, row_bytes = Q4 ? K / 2 : K, o = fe.row, step = 4 * static_cast<std::int64_t>(k_split);
    const auto* q = static_cast<const std::uint8_t*>(out.w);
    const auto* scale = reinterpret_cast<const std::uint16_t*>(q + out.rows * row_bytes) + o * nb;
    const unsigned sub = lane % 8;
    for (std::int64_t s0 = 4 * part; s0 < nb; s0 += step * U) {
      int wq[U][4] = {};
      float dw[U] = {};
      KYLIN_UNROLL for (int u = 0; u < U; ++u) {
        const std::int64_t b = s0 + u * step + lane / 8, k = b * 32 + sub * 4;
        if (b >= nb) continue;  // lanes past the last block carry zeros through the shuffles
        dw[u] = detail::f16_to_f32(scale[b]);
        KYLIN_UNROLL for (int i = 0; i < 4; ++i)
          wq[u][i] = Q4 ? q4_value(q + o * row_bytes, nb, b, sub * 4 + i) : static_cast<std::int8_t>(q[o * K + k + i]);
      }
      KYLIN_UNROLL for (int u = 0; u < U; ++u) {
        if (s0 + u * step >= nb) break;  // the same for the whole warp
        const std::int64_t b = s0 + u * step + lane / 8, k = b * 32 + sub * 4;
        const bool live = b < nb;
        for (int r = 0; r < nr; ++r) {
          float xv[4] = {0.f, 0.f, 0.f, 0.f}, amax = 0.f;
          if (live)
            for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(xv[i] = (Normed ? xs : x)[(r0 + r) * K + k + i]));
          for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, t.shfl_xor(amax, m));
          const float d = amax / 127.f, inv = d > 0.f ? 1.f / d : 0.f;  // as quantize_block_q8
          int s = 0;
          for (int i = 0; i < 4; ++i) s += static_cast<int>(fminf(fmaxf(rintf(xv[i] * inv), -127.f), 127.f)) * wq[u][i];
          float fs = static_cast<float>(s);  // |sum| <= 32 * 127^2 < 2^24: exact in float, in any order
          for (int m = 1; m < 8; m <<= 1) fs += t.shfl_xor(fs, m);
          if (sub == 0) acc[r] = fmaf(dw[u] * d, fs, acc[r]);
        }
      }
    }
  }

  // Value j of block b of a Q4_0 row of nb blocks (kernels::block_values' layout).
  KYLIN_HD static int q4_value(const std::uint8_t* row, std::int64_t nb, std::int64_t b, int j) {
    const int byte = (b | 1) < nb ? row[(b / 2) * 32 + j] >> ((b % 2) * 4) : row[b * 16 + j % 16] >> (j < 16 ? 0 : 4);
    return (byte & 0x0F) - 8;
  }
};

using MatvecKernel = MatvecKernelOf<Store::assign>;
using MatvecAddKernel = MatvecKernelOf<Store::add>;
using SwiGLUMatvecKernel = MatvecKernelOf<Store::swiglu>;

}  // namespace kylin::cuda
