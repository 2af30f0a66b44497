// MatvecKernel: the decode rows' y = x · W^T (and every row for F16/Q8_0/Q4_0 weights), a warp
// per output feature so the weights are read once for all rows of the call.
#pragma once

#include "kylin/backends/cuda/device_math.hpp"

namespace kylin::cuda {

namespace detail {
inline constexpr unsigned matvec_warps = 8;  // output features per block, a warp each
// Rows of x carried through one pass over a weight row: the row is read from memory once per group.
inline constexpr int matvec_rows = 8;
static_assert(matvec_rows <= static_cast<int>(warp_size), "one summing thread per (row, warp) of the block");
}  // namespace detail

// y[r, o] = x[r, :] · W[o, :] (+ bias[o]) for r < n, one warp per output feature, lanes striding
// along the row; f32 accumulation. Q8_0 and Q4_0 are kernels::matmul_ref's quantized product: x
// is quantized per block of 32 exactly as quantize_rows_q8 does (in registers), so each block pair
// is the same exact integer dot product, scaled and summed in float.
struct MatvecKernel {
  const float* x;  // [n, in_features]
  std::int64_t n;
  const void* w;  // [out_features, in_features] bf16/f16/f32; Q8_0: int8 [out, in] then f16 scales [out, in / 32];
                  // Q4_0: packed 4-bit [out, in / 2] (kernels/quant.hpp's layout) then f16 scales [out, in / 32]
  DType w_dtype;
  std::int64_t out_features, in_features;
  const float* bias;  // [out_features] or null
  float* y;           // [n, out_features]

  // Shared memory: every lane's partial sums [warps, rows, 33] (padded: the column sums read no bank twice).
  LaunchShape shape() const {
    const std::int64_t blocks = (out_features + detail::matvec_warps - 1) / detail::matvec_warps;
    return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks)},
            {detail::matvec_warps * warp_size},
            detail::matvec_warps * detail::matvec_rows * (warp_size + 1) * sizeof(float)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    constexpr int R = detail::matvec_rows;
    constexpr unsigned W = detail::matvec_warps, pitch = warp_size + 1;
    const unsigned tid = t.thread_idx().x, lane = tid % warp_size, warp = tid / warp_size;
    const std::int64_t o0 = static_cast<std::int64_t>(t.block_idx().x) * W, o = o0 + warp;
    float* part = t.template shared<float>();
    for (std::int64_t r0 = 0; r0 < n; r0 += R) {
      const int nr = n - r0 < R ? static_cast<int>(n - r0) : R;
      float acc[R] = {};
      if (o < out_features) {  // the same for the whole warp, so its shuffles stay convergent
        switch (w_dtype) {
          case DType::bf16: dot_rows<bf16_t>(o, r0, nr, lane, acc); break;
          case DType::f16: dot_rows<f16_t>(o, r0, nr, lane, acc); break;
          case DType::f32: dot_rows<float>(o, r0, nr, lane, acc); break;
          case DType::q8_0: quant_dot_rows<false>(t, o, r0, nr, lane, acc); break;
          case DType::q4_0: quant_dot_rows<true>(t, o, r0, nr, lane, acc); break;
          default:
            for (float& a : acc) a = detail::poison();
        }
      }
      KYLIN_UNROLL for (int r = 0; r < R; ++r) part[(warp * R + r) * pitch + lane] = acc[r];
      t.sync();
      // Thread (r, w) sums warp w's 32 lanes for row r: one pass through shared memory instead of
      // 5 shuffles per row, and consecutive threads write consecutive outputs.
      const unsigned r = tid / W, w = tid % W;
      if (r < static_cast<unsigned>(nr) && o0 + w < out_features) {
        float s = 0.f;
        for (unsigned l = 0; l < warp_size; ++l) s += part[(w * R + r) * pitch + l];
        y[(r0 + r) * out_features + o0 + w] = s + (bias ? bias[o0 + w] : 0.f);
      }
      t.sync();  // part is rewritten by the next group of rows
    }
  }

  // acc[r] = this lane's share of x[r0 + r] · W[o]: 16-byte loads (8 BF16/F16 or 4 F32 weights) at
  // columns lane * V, (lane + 32) * V, ... where rows and x are 16-byte aligned; one element per
  // lane per step otherwise (odd widths).
  template <class T>
  KYLIN_HD void dot_rows(std::int64_t o, std::int64_t r0, int nr, unsigned lane, float (&acc)[detail::matvec_rows]) const {
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    const T* wr = static_cast<const T*>(w) + o * in_features;
    const float* xr = x + r0 * in_features;
    for (float& a : acc) a = 0.f;
    if (in_features % V == 0 && detail::aligned16(wr) && detail::aligned16(xr)) {
      KYLIN_UNROLL4 for (std::int64_t k = lane * V; k < in_features; k += warp_size * V) {
        float wk[V];
        detail::load16(wr + k, wk);
        KYLIN_UNROLL for (int r = 0; r < detail::matvec_rows; ++r) {
          if (r < nr) {
            KYLIN_UNROLL for (int i = 0; i < V; i += 4) {
              float xv[4];
              detail::load16(xr + r * in_features + k + i, xv);
              acc[r] += xv[0] * wk[i] + xv[1] * wk[i + 1] + xv[2] * wk[i + 2] + xv[3] * wk[i + 3];
            }
          }
        }
      }
      return;
    }
    for (std::int64_t k = lane; k < in_features; k += warp_size) {
      const float wk = detail::to_f32(wr[k]);
      KYLIN_UNROLL for (int r = 0; r < detail::matvec_rows; ++r)
        if (r < nr) acc[r] += xr[r * in_features + k] * wk;
    }
  }

  // Q8_0/Q4_0: 8 lanes per block of 32 (4 values each), 4 blocks per warp step. The 8 lanes of a
  // block find its max |x| and integer dot product by shuffles; their first lane accumulates it.
  template <bool Q4, class Thread>
  KYLIN_HD void quant_dot_rows(Thread& t, std::int64_t o, std::int64_t r0, int nr, unsigned lane,
                               float (&acc)[detail::matvec_rows]) const {
    const std::int64_t K = in_features, nb = K / 32, row_bytes = Q4 ? K / 2 : K;
    const auto* q = static_cast<const std::uint8_t*>(w);
    const auto* scale = reinterpret_cast<const std::uint16_t*>(q + out_features * row_bytes) + o * nb;
    const unsigned sub = lane % 8;
    for (float& a : acc) a = 0.f;
    for (std::int64_t b0 = 0; b0 < nb; b0 += 4) {
      const std::int64_t b = b0 + lane / 8, k = b * 32 + sub * 4;
      const bool live = b < nb;  // lanes past the last block carry zeros through the shuffles
      int wq[4] = {0, 0, 0, 0};
      const float dw = live ? detail::f16_to_f32(scale[b]) : 0.f;
      if (live)
        for (int i = 0; i < 4; ++i) wq[i] = Q4 ? q4_value(q + o * row_bytes, nb, b, sub * 4 + i) : static_cast<std::int8_t>(q[o * K + k + i]);
      for (int r = 0; r < nr; ++r) {
        float xv[4] = {0.f, 0.f, 0.f, 0.f}, amax = 0.f;
        if (live)
          for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(xv[i] = x[(r0 + r) * K + k + i]));
        for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, t.shfl_xor(amax, m));
        const float d = amax / 127.f, inv = d > 0.f ? 1.f / d : 0.f;  // as quantize_block_q8
        int s = 0;
        for (int i = 0; i < 4; ++i) s += static_cast<int>(fminf(fmaxf(rintf(xv[i] * inv), -127.f), 127.f)) * wq[i];
        float fs = static_cast<float>(s);  // |sum| <= 32 * 127^2 < 2^24: exact in float, in any order
        for (int m = 1; m < 8; m <<= 1) fs += t.shfl_xor(fs, m);
        if (sub == 0) acc[r] = fmaf(dw * d, fs, acc[r]);
      }
    }
  }

  // Value j of block b of a Q4_0 row of nb blocks (kernels::block_values' layout).
  KYLIN_HD static int q4_value(const std::uint8_t* row, std::int64_t nb, std::int64_t b, int j) {
    const int byte = (b | 1) < nb ? row[(b / 2) * 32 + j] >> ((b % 2) * 4) : row[b * 16 + j % 16] >> (j < 16 ? 0 : 4);
    return (byte & 0x0F) - 8;
  }
};

}  // namespace kylin::cuda
