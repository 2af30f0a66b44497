// MatvecKernel: the decode rows' y = x · W^T (and every row for F16/Q8_0/Q4_0 weights) for up to
// three weights sharing x (q/k/v, gate/up) in one launch; each warp streams a few output features
// with many 16-byte loads in flight, so the weights are read once, at the memory's pace. Outputs
// narrower than their rows are long (o_proj, down_proj) split each row's columns over the block's
// warps, so that enough warps stream at once.
#pragma once

#include "kylin/backends/cuda/device_math.hpp"
#include "kylin/backends/cuda/matvec_quant.hpp"

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
    const std::size_t rows_bytes = Normed ? norm_bytes(n, in_features) : static_cast<std::size_t>(staged_rows() * staged_row_bytes(in_features));
    return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks)}, {detail::matvec_warps * warp_size}, partial_bytes + rows_bytes};
  }
  // Q8_0/Q4_0 weights: each group of rows of x is quantized once per block into shared memory (int8
  // values [rows, in], then f32 scales [rows, in / 32]), as many rows at a time as fit beside the
  // partial sums (up to matvec_rows); 0 where not even one row fits, x is not 16-byte aligned, or
  // for the normed kernel: there the warps quantize x themselves (quant_dot_rows).
  KYLIN_HD static constexpr std::int64_t staged_row_bytes(std::int64_t in) { return in + in / 32 * 4; }
  KYLIN_HD std::int64_t staged_rows() const {
    if (Normed || (w_dtype != DType::q8_0 && w_dtype != DType::q4_0) || in_features % 32 != 0 || !detail::aligned16(x)) return 0;
    const std::int64_t fit = static_cast<std::int64_t>((launch_shared_bytes - partial_bytes) / static_cast<std::size_t>(staged_row_bytes(in_features)));
    return fit < detail::matvec_rows ? fit : detail::matvec_rows;
  }

  // What a norm may add within the shared memory a launch gets.
  static constexpr std::size_t max_norm_bytes = launch_shared_bytes - partial_bytes;
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
    const std::int64_t staged = staged_rows(), G = staged > 0 ? staged : R;  // rows per group
    for (std::int64_t r0 = 0; r0 < n; r0 += G) {
      const int nr = n - r0 < G ? static_cast<int>(n - r0) : static_cast<int>(G);
      if (staged > 0) detail::stage_q8(t, x + r0 * in_features, in_features, nr, staged_q(t), staged_d(t));
      float acc[F][R] = {};
      if (live) switch (w_dtype) {
          case DType::bf16: dot_rows<bf16_t>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::f16: dot_rows<f16_t>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::f32: dot_rows<float>(xs, fs, r0, nr, lane, part, acc); break;
          case DType::q8_0: quant_rows<false>(t, fs, xs, r0, nr, {lane, part, S}, staged > 0, acc); break;
          case DType::q4_0: quant_rows<true>(t, fs, xs, r0, nr, {lane, part, S}, staged > 0, acc); break;
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

  // Q8_0/Q4_0 (Q4) products of rows [r0, r0 + nr): on x staged by stage_q8, or quantized by the warps.
  template <bool Q4, class Thread>
  KYLIN_HD void quant_rows(Thread& t, const Feature (&fs)[detail::matvec_features], const float* xs, std::int64_t r0, int nr,
                           detail::LaneSlice at, bool staged, float (&acc)[detail::matvec_features][detail::matvec_rows]) const {
    constexpr int F = detail::matvec_features, R = detail::matvec_rows, U = detail::matvec_unroll;
    if (!staged) {
      KYLIN_UNROLL for (int f = 0; f < F; ++f) if (fs[f].out >= 0)
        detail::quant_dot<Q4, R, U>(t, quant_row(fs[f]), xs + r0 * in_features, in_features, nr, at, acc[f]);
      return;
    }
    detail::QuantRow w[F];
    KYLIN_UNROLL for (int f = 0; f < F; ++f) w[f] = fs[f].out >= 0 ? quant_row(fs[f]) : detail::QuantRow{nullptr, nullptr};
    if constexpr (Q4) detail::staged_q4_dot<F, R, U / 2>(w, staged_q(t), staged_d(t), in_features, nr, at, acc);
    else detail::staged_q8_dot<F, R, U / 2>(w, staged_q(t), staged_d(t), in_features, nr, at, acc);
  }

  // Feature f's quantized row.
  KYLIN_HD detail::QuantRow quant_row(const Feature& fe) const {
    const MatvecOut& o = outs[fe.out];
    const std::int64_t row_bytes = w_dtype == DType::q4_0 ? in_features / 2 : in_features;
    const auto* q = static_cast<const std::uint8_t*>(o.w);
    return {q + fe.row * row_bytes, reinterpret_cast<const std::uint16_t*>(q + o.rows * row_bytes) + fe.row * (in_features / 32)};
  }
  // Where stage_q8 puts x's group of rows: int8 values [G, in], then f32 scales [G, in / 32].
  template <class Thread>
  KYLIN_HD std::int8_t* staged_q(Thread& t) const {
    return reinterpret_cast<std::int8_t*>(t.template shared<float>() + partial_bytes / sizeof(float));
  }
  template <class Thread>
  KYLIN_HD float* staged_d(Thread& t) const {
    return reinterpret_cast<float*>(staged_q(t) + staged_rows() * in_features);
  }
};

using MatvecKernel = MatvecKernelOf<Store::assign>;
using MatvecAddKernel = MatvecKernelOf<Store::add>;
using SwiGLUMatvecKernel = MatvecKernelOf<Store::swiglu>;

}  // namespace kylin::cuda
