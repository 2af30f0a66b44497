// The Q8_0/Q4_0 inner products of MatvecKernel: x quantized per block of 32 exactly as
// kernels::quantize_rows_q8 does, each block pair's exact integer dot product scaled and summed in
// float (kernels::matmul_ref's quantized product). Two ways: x staged once per thread block in
// shared memory, or quantized by the warps in registers (where x cannot be staged).
#pragma once

#include "kylin/backends/cuda/device_math.hpp"

namespace kylin::cuda::detail {

// Which columns a lane reads: lane of its warp, and part of the k_split warps sharing a feature.
struct LaneSlice {
  unsigned lane, part, parts;
};

// One output feature's quantized weight row: int8 values (Q8_0) or packed nibbles (Q4_0), and its
// f16 scales, one per block of 32.
struct QuantRow {
  const std::uint8_t* q;
  const std::uint16_t* scale;
};

// x quantized per block of 32 the way quantize_block_q8 does it: d = max|x| / 127, q = round(x / d).
KYLIN_HD inline float q8_scale(float amax) { return amax / 127.f; }
KYLIN_HD inline int q8_value(float v, float inv) { return static_cast<int>(fminf(fmaxf(rintf(v * inv), -127.f), 127.f)); }

// Value j of block b of a Q4_0 row of nb blocks (kernels::block_values' layout).
KYLIN_HD inline int q4_value(const std::uint8_t* row, std::int64_t nb, std::int64_t b, int j) {
  const int byte = (b | 1) < nb ? row[(b / 2) * 32 + j] >> ((b % 2) * 4) : row[b * 16 + j % 16] >> (j < 16 ? 0 : 4);
  return (byte & 0x0F) - 8;
}

// Rows [0, nr) of x [nr, K] (16-byte aligned) into q [nr, K] int8 and d [nr, K / 32] f32 in shared
// memory: a thread per block of 32; the block's threads meet at a barrier after.
template <class Thread>
KYLIN_HD void stage_q8(Thread& t, const float* x, std::int64_t K, int nr, std::int8_t* q, float* d) {
  const std::int64_t nb = K / 32;
  for (std::int64_t j = t.thread_idx().x; j < nr * nb; j += t.block_dim().x) {
    const std::int64_t r = j / nb, b = j % nb;
    float v[32], amax = 0.f;
    KYLIN_UNROLL for (int i = 0; i < 32; i += 4) {
      float four[4];
      load16(x + r * K + b * 32 + i, four);
      KYLIN_UNROLL for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fabsf(v[i + k] = four[k]));
    }
    const float dd = q8_scale(amax), inv = dd > 0.f ? 1.f / dd : 0.f;
    KYLIN_UNROLL for (int i = 0; i < 32; i += 4) {
      std::uint32_t packed = 0;
      KYLIN_UNROLL for (int k = 0; k < 4; ++k)
        packed |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(static_cast<std::int8_t>(q8_value(v[i + k], inv)))) << (8 * k);
      std::memcpy(q + r * K + b * 32 + i, &packed, 4);
    }
    d[r * nb + b] = dd;
  }
  t.sync();
}

// acc[f][r] += W_f · x[r] for F Q8_0 rows (null: none) against x staged by stage_q8 (xq [nr, K],
// xd [nr, K / 32]): a lane takes whole blocks of 32 (32 weight bytes in two 16-byte loads, U blocks
// per feature loaded before the first is used) and their integer dot products (dp4a).
template <int F, int R, int U>
KYLIN_HD void staged_q8_dot(const QuantRow (&w)[F], const std::int8_t* xq, const float* xd, std::int64_t K, int nr, LaneSlice at,
                            float (&acc)[F][R]) {
  const std::int64_t nb = K / 32, step = static_cast<std::int64_t>(warp_size) * at.parts;
  for (std::int64_t b0 = at.part * warp_size + at.lane; b0 < nb; b0 += step * U) {
    int wv[F][U][2][4];  // a block's 32 weights as 8 ints
    float dw[F][U];
    KYLIN_UNROLL for (int f = 0; f < F; ++f) KYLIN_UNROLL for (int u = 0; u < U; ++u) {
      const std::int64_t b = b0 + u * step;
      dw[f][u] = 0.f;
      KYLIN_UNROLL for (int h = 0; h < 2; ++h) KYLIN_UNROLL for (int i = 0; i < 4; ++i) wv[f][u][h][i] = 0;
      if (!w[f].q || b >= nb) continue;
      KYLIN_UNROLL for (int h = 0; h < 2; ++h) load16_ints(w[f].q + b * 32 + h * 16, wv[f][u][h]);
      dw[f][u] = f16_to_f32(w[f].scale[b]);
    }
    KYLIN_UNROLL for (int u = 0; u < U && b0 + u * step < nb; ++u) {
      const std::int64_t b = b0 + u * step;
      KYLIN_UNROLL for (int r = 0; r < R; ++r) {
        if (r >= nr) break;
        int xv[2][4];
        KYLIN_UNROLL for (int h = 0; h < 2; ++h) load16_ints(xq + r * K + b * 32 + h * 16, xv[h]);
        const float dx = xd[r * nb + b];
        KYLIN_UNROLL for (int f = 0; f < F; ++f) {
          int s = 0;
          KYLIN_UNROLL for (int h = 0; h < 2; ++h) KYLIN_UNROLL for (int i = 0; i < 4; ++i) s = dp4a(wv[f][u][h][i], xv[h][i], s);
          acc[f][r] = fmaf(dw[f][u] * dx, static_cast<float>(s), acc[f][r]);  // |s| <= 32 * 127^2: exact in float
        }
      }
    }
  }
}

// The integer dot product of a block of 32 nibbles (values n - 8; ints `lo`/`hi` hold 4 bytes each,
// `shift` picks each byte's low or high nibble) with x's block of 32 int8 values.
KYLIN_HD inline int q4_block_dot(const int (&w)[2][4], int shift, const int (&x)[2][4]) {
  int s = 0, sum_x = 0;
  KYLIN_UNROLL for (int h = 0; h < 2; ++h) KYLIN_UNROLL for (int i = 0; i < 4; ++i) {
    s = dp4a((w[h][i] >> shift) & 0x0F0F0F0F, x[h][i], s);
    sum_x = dp4a(0x01010101, x[h][i], sum_x);
  }
  return s - 8 * sum_x;
}

// acc[f][r] += W_f · x[r] for F Q4_0 rows (null: none) against x staged by stage_q8: a lane takes a
// pair of blocks (64 nibbles in 32 bytes: byte j holds value j of the even block low, of the odd
// block high; kernels/quant.hpp's layout) or the last, unpaired block (16 bytes: byte j holds
// values j and j + 16), U of them per feature loaded before the first is used.
template <int F, int R, int U>
KYLIN_HD void staged_q4_dot(const QuantRow (&w)[F], const std::int8_t* xq, const float* xd, std::int64_t K, int nr, LaneSlice at,
                            float (&acc)[F][R]) {
  const std::int64_t nb = K / 32, pairs = (nb + 1) / 2, step = static_cast<std::int64_t>(warp_size) * at.parts;
  for (std::int64_t p0 = at.part * warp_size + at.lane; p0 < pairs; p0 += step * U) {
    int wv[F][U][2][4];  // a pair's 32 bytes as 8 ints (an unpaired block: the first 4)
    float dw[F][U][2];
    KYLIN_UNROLL for (int f = 0; f < F; ++f) KYLIN_UNROLL for (int u = 0; u < U; ++u) {
      const std::int64_t p = p0 + u * step, b = 2 * p;
      dw[f][u][0] = dw[f][u][1] = 0.f;
      KYLIN_UNROLL for (int h = 0; h < 2; ++h) KYLIN_UNROLL for (int i = 0; i < 4; ++i) wv[f][u][h][i] = 0;
      if (!w[f].q || p >= pairs) continue;
      if (b + 1 < nb) {
        KYLIN_UNROLL for (int h = 0; h < 2; ++h) load16_ints(w[f].q + p * 32 + h * 16, wv[f][u][h]);
        dw[f][u][1] = f16_to_f32(w[f].scale[b + 1]);
      } else {
        load16_ints(w[f].q + b * 16, wv[f][u][0]);
      }
      dw[f][u][0] = f16_to_f32(w[f].scale[b]);
    }
    KYLIN_UNROLL for (int u = 0; u < U; ++u) {
      const std::int64_t p = p0 + u * step, b = 2 * p;
      if (p >= pairs) break;
      const bool paired = b + 1 < nb;
      KYLIN_UNROLL for (int r = 0; r < R; ++r) {
        if (r >= nr) break;
        int xa[2][4], xb[2][4] = {};  // blocks b and b + 1 of x
        KYLIN_UNROLL for (int h = 0; h < 2; ++h) load16_ints(xq + r * K + b * 32 + h * 16, xa[h]);
        if (paired) KYLIN_UNROLL for (int h = 0; h < 2; ++h) load16_ints(xq + r * K + (b + 1) * 32 + h * 16, xb[h]);
        const float da = xd[r * nb + b], db = paired ? xd[r * nb + b + 1] : 0.f;
        KYLIN_UNROLL for (int f = 0; f < F; ++f) {
          if (paired) {
            acc[f][r] = fmaf(dw[f][u][0] * da, static_cast<float>(q4_block_dot(wv[f][u], 0, xa)), acc[f][r]);
            acc[f][r] = fmaf(dw[f][u][1] * db, static_cast<float>(q4_block_dot(wv[f][u], 4, xb)), acc[f][r]);
          } else {  // bytes 0-15: values j (low nibble) and j + 16 (high)
            const int lohi[2][4] = {{wv[f][u][0][0], wv[f][u][0][1], wv[f][u][0][2], wv[f][u][0][3]},
                                    {wv[f][u][0][0] >> 4, wv[f][u][0][1] >> 4, wv[f][u][0][2] >> 4, wv[f][u][0][3] >> 4}};
            acc[f][r] = fmaf(dw[f][u][0] * da, static_cast<float>(q4_block_dot(lohi, 0, xa)), acc[f][r]);
          }
        }
      }
    }
  }
}

// acc[r] += W · x[r] for one Q8_0 or Q4_0 row against x [nr, K] in f32: 8 lanes per block of 32 (4
// values each), 4 blocks per warp step, the weights and scales of U steps loaded before the first
// is used (one step's at a time left a memory latency per 128 bytes). The 8 lanes of a block find
// its max |x| and integer dot product by shuffles; their first lane accumulates it, in order.
template <bool Q4, int R, int U, class Thread>
KYLIN_HD void quant_dot(Thread& t, QuantRow w, const float* x, std::int64_t K, int nr, LaneSlice at, float (&acc)[R]) {
  const std::int64_t nb = K / 32, step = 4 * static_cast<std::int64_t>(at.parts);
  const unsigned sub = at.lane % 8;
  for (std::int64_t s0 = 4 * at.part; s0 < nb; s0 += step * U) {
    int wq[U][4] = {};
    float dw[U] = {};
    KYLIN_UNROLL for (int u = 0; u < U; ++u) {
      const std::int64_t b = s0 + u * step + at.lane / 8, k = b * 32 + sub * 4;
      if (b >= nb) continue;  // lanes past the last block carry zeros through the shuffles
      dw[u] = f16_to_f32(w.scale[b]);
      KYLIN_UNROLL for (int i = 0; i < 4; ++i) wq[u][i] = Q4 ? q4_value(w.q, nb, b, sub * 4 + i) : static_cast<std::int8_t>(w.q[k + i]);
    }
    KYLIN_UNROLL for (int u = 0; u < U; ++u) {
      if (s0 + u * step >= nb) break;  // the same for the whole warp
      const std::int64_t b = s0 + u * step + at.lane / 8, k = b * 32 + sub * 4;
      const bool live = b < nb;
      for (int r = 0; r < nr; ++r) {
        float xv[4] = {0.f, 0.f, 0.f, 0.f}, amax = 0.f;
        if (live)
          for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(xv[i] = x[r * K + k + i]));
        for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, t.shfl_xor(amax, m));
        const float d = q8_scale(amax), inv = d > 0.f ? 1.f / d : 0.f;
        int s = 0;
        for (int i = 0; i < 4; ++i) s += q8_value(xv[i], inv) * wq[u][i];
        float fs = static_cast<float>(s);  // |sum| <= 32 * 127^2 < 2^24: exact in float, in any order
        for (int m = 1; m < 8; m <<= 1) fs += t.shfl_xor(fs, m);
        if (sub == 0) acc[r] = fmaf(dw[u] * d, fs, acc[r]);
      }
    }
  }
}

}  // namespace kylin::cuda::detail
