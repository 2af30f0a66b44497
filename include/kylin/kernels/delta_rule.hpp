// The gated delta rule of Gated DeltaNet (Yang et al. 2024, arXiv:2412.06464) for one value head: the
// recurrent step of decode and the chunked form of prefill (transformers' torch_recurrent_gated_delta_rule and
// torch_chunk_gated_delta_rule, models/qwen3_5/modeling_qwen3_5.py), in f32 with the decays in double. Each has
// a scalar reference beside it (what KYLIN_NO_SIMD runs); the tests compare both with a float64 oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// Tokens of one chunk of the chunked form; chunks start at multiples of it (absolute positions), so a
// sequence's numbers do not depend on how passes cut its prompt.
inline constexpr std::int64_t delta_chunk = 64;

namespace delta_detail {

// acc[0, n) += s * x[0, n)
inline void axpy(float* acc, const float* x, float s, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    const fbatch vs(s);
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes)
      fma(vs, fbatch::load_unaligned(x + i), fbatch::load_unaligned(acc + i)).store_unaligned(acc + i);
  }
  for (; i < n; ++i) acc[i] = std::fma(s, x[i], acc[i]);
}

// sum a[i] b[i]: lane-wise partial sums (scalar: eight), added in a fixed tree.
inline float dot(const float* a, const float* b, std::int64_t n) {
  if constexpr (simd_enabled) {
    fbatch acc(0.0f);
    std::int64_t i = 0;
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += lanes) acc = fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), acc);
    alignas(64) float part[lanes];
    acc.store_aligned(part);
    for (std::size_t w = lanes / 2; w > 0; w /= 2)
      for (std::size_t j = 0; j < w; ++j) part[j] += part[j + w];
    float s = part[0];
    for (; i < n; ++i) s = std::fma(a[i], b[i], s);
    return s;
  } else {
    float part[8] = {};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) part[j] = std::fma(a[i + j], b[i + j], part[j]);
    for (; i < n; ++i) part[0] = std::fma(a[i], b[i], part[0]);
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  }
}

// x[0, n) *= s
inline void scale(float* x, float s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace delta_detail

// One value head's inputs for a run of tokens: rows t of q/k/v (strides in floats), the decay g and beta.
struct DeltaHeadRows {
  const float* q;  // [n, stride] row t at q + t * stride: dk values, l2-normalised and scaled by dk^-0.5
  const float* k;  // [n, stride] dk values, l2-normalised
  const float* v;  // [n, stride] dv values
  std::int64_t stride;
  const float* g;     // [n, g_stride] g_t = -exp(A_log) softplus(a_t + dt_bias) (<= 0)
  const float* beta;  // [n, g_stride] beta_t = sigmoid(b_t)
  std::int64_t g_stride;
  float* out;  // [n, out_stride] dv outputs o_t = S_t^T q_t
  std::int64_t out_stride;
  std::int64_t dk, dv;
};

// One token: S = exp(g) S; u = beta (v - S^T k); S = S + k u^T; o = S^T q (torch_recurrent_gated_delta_rule).
// S_in and S_out are [dk, dv] and may be the same buffer (null S_in: zeros). Two passes over S: the first
// reads exp(g) S for S^T k, the second writes S and sums S^T q.
inline void delta_step_ref(const float* S_in, float* S_out, const float* q, const float* k, const float* v, float g, float beta,
                           float* o, std::int64_t dk, std::int64_t dv, float* scratch /* [dv] */) {
  const float decay = static_cast<float>(std::exp(static_cast<double>(g)));
  float* u = scratch;
  for (std::int64_t j = 0; j < dv; ++j) u[j] = 0.0f;
  if (S_in)
    for (std::int64_t i = 0; i < dk; ++i)
      for (std::int64_t j = 0; j < dv; ++j) u[j] = std::fma(decay * S_in[i * dv + j], k[i], u[j]);
  for (std::int64_t j = 0; j < dv; ++j) u[j] = (v[j] - u[j]) * beta, o[j] = 0.0f;
  for (std::int64_t i = 0; i < dk; ++i)
    for (std::int64_t j = 0; j < dv; ++j) {
      const float s = std::fma(k[i], u[j], S_in ? decay * S_in[i * dv + j] : 0.0f);
      S_out[i * dv + j] = s;
      o[j] = std::fma(s, q[i], o[j]);
    }
}

inline void delta_step(const float* S_in, float* S_out, const float* q, const float* k, const float* v, float g, float beta, float* o,
                       std::int64_t dk, std::int64_t dv, float* scratch /* [dv] */) {
  if constexpr (!simd_enabled) {
    delta_step_ref(S_in, S_out, q, k, v, g, beta, o, dk, dv, scratch);
  } else {
    const auto L = static_cast<std::int64_t>(lanes);
    if (dv % L != 0) return delta_step_ref(S_in, S_out, q, k, v, g, beta, o, dk, dv, scratch);
    const float decay = static_cast<float>(std::exp(static_cast<double>(g)));
    const fbatch vdecay(decay), zero(0.0f);
    float* u = scratch;
    for (std::int64_t j = 0; j < dv; j += L) {
      fbatch acc = zero;
      if (S_in)
        for (std::int64_t i = 0; i < dk; ++i) acc = fma(vdecay * fbatch::load_unaligned(S_in + i * dv + j), fbatch(k[i]), acc);
      ((fbatch::load_unaligned(v + j) - acc) * fbatch(beta)).store_unaligned(u + j);
    }
    for (std::int64_t j = 0; j < dv; j += L) {
      const fbatch uj = fbatch::load_unaligned(u + j);
      fbatch acc = zero;
      for (std::int64_t i = 0; i < dk; ++i) {
        const fbatch s = fma(fbatch(k[i]), uj, S_in ? vdecay * fbatch::load_unaligned(S_in + i * dv + j) : zero);
        s.store_unaligned(S_out + i * dv + j);
        acc = fma(s, fbatch(q[i]), acc);
      }
      acc.store_unaligned(o + j);
    }
  }
}

namespace delta_detail {

// C[mr, NB vectors] (+)= A[mr, k] B[k, NB vectors] with C in registers: A broadcast, each B row loaded once.
template <int MR, int NB, bool accumulate>
inline void gemm_tile(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc, std::int64_t k) {
  const auto L = static_cast<std::int64_t>(lanes);
  fbatch acc[MR][NB];
  KYLIN_CPU_UNROLL for (int r = 0; r < MR; ++r)
    KYLIN_CPU_UNROLL for (int q = 0; q < NB; ++q) acc[r][q] = accumulate ? fbatch::load_unaligned(C + r * ldc + q * L) : fbatch(0.0f);
  for (std::int64_t p = 0; p < k; ++p) {
    fbatch b[NB];
    KYLIN_CPU_UNROLL for (int q = 0; q < NB; ++q) b[q] = fbatch::load_unaligned(B + p * ldb + q * L);
    KYLIN_CPU_UNROLL for (int r = 0; r < MR; ++r) {
      const fbatch a(A[r * lda + p]);
      KYLIN_CPU_UNROLL for (int q = 0; q < NB; ++q) acc[r][q] = fma(a, b[q], acc[r][q]);
    }
  }
  KYLIN_CPU_UNROLL for (int r = 0; r < MR; ++r)
    KYLIN_CPU_UNROLL for (int q = 0; q < NB; ++q) acc[r][q].store_unaligned(C + r * ldc + q * L);
}

// Rows [i0, m) of C over the column block [j0, j0 + NB vectors): MR rows a tile, the rest one by one.
template <int NB, bool accumulate>
inline void gemm_columns(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc, std::int64_t m,
                         std::int64_t k, std::int64_t j0) {
  constexpr int MR = 4;
  std::int64_t i = 0;
  for (; i + MR <= m; i += MR) gemm_tile<MR, NB, accumulate>(A + i * lda, lda, B + j0, ldb, C + i * ldc + j0, ldc, k);
  for (; i < m; ++i) gemm_tile<1, NB, accumulate>(A + i * lda, lda, B + j0, ldb, C + i * ldc + j0, ldc, k);
}

// C[m, n] = (accumulate ? C : 0) + A[m, k] B[k, n], row-major with row strides lda, ldb, ldc; each output one
// FMA chain over k in order (the scalar path the same chain), so its bits do not depend on the tiling.
template <bool accumulate>
inline void gemm(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc, std::int64_t m,
                 std::int64_t n, std::int64_t k) {
  std::int64_t j = 0;
  if constexpr (simd_enabled) {
    const auto L = static_cast<std::int64_t>(lanes);
    constexpr int NB = lanes >= 16 ? 4 : 2;
    for (; j + NB * L <= n; j += NB * L) gemm_columns<NB, accumulate>(A, lda, B, ldb, C, ldc, m, k, j);
    for (; j + L <= n; j += L) gemm_columns<1, accumulate>(A, lda, B, ldb, C, ldc, m, k, j);
  }
  for (; j < n; ++j)
    for (std::int64_t i = 0; i < m; ++i) {
      float c = accumulate ? C[i * ldc + j] : 0.0f;
      for (std::int64_t p = 0; p < k; ++p) c = std::fma(A[i * lda + p], B[p * ldb + j], c);
      C[i * ldc + j] = c;
    }
}

// exp(x[i]) in double for i < n, rounded to float: a vector of doubles at a time where the build has them.
inline void exp_to_float(const double* x, float* out, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    using dbatch = xsimd::batch<double>;
    constexpr auto DL = static_cast<std::int64_t>(dbatch::size);
    alignas(64) double e[DL];
    for (; i + DL <= n; i += DL) {
      xsimd::exp(dbatch::load_unaligned(x + i)).store_aligned(e);
      for (std::int64_t j = 0; j < DL; ++j) out[i + j] = static_cast<float>(e[j]);
    }
  }
  for (; i < n; ++i) out[i] = static_cast<float>(std::exp(x[i]));
}

}  // namespace delta_detail

// Scratch of one thread for delta_chunk_rows (floats).
inline std::int64_t delta_chunk_scratch(std::int64_t dk, std::int64_t dv) {
  const std::int64_t L = delta_chunk;
  return 4 * L * L + L * (4 * dk + 3 * dv) + 8 * L;
}

// One chunk of n <= delta_chunk tokens of rows r (from `first`), the state S [dk, dv] updated in place
// (transformers' torch_chunk_gated_delta_rule for one chunk; the chunk's cumulative decays in double):
//   cum_i = g_0 + .. + g_i, D_ij = exp(cum_i - cum_j) (j <= i), A_ij = beta_i (k_i . k_j) D_ij (j < i)
//   T = (I + A)^-1 (unit lower triangular, by forward substitution), X = T (beta v), Y = T (beta exp(cum) k)
//   v'_i = X_i - S^T Y_i;  o_i = S^T (exp(cum_i) q_i) + sum_{j <= i} (q_i . k_j) D_ij v'_j
//   S = exp(cum_last) S + sum_i exp(cum_last - cum_i) k_i v'_i^T
// Every product is delta_detail::gemm over the chunk's rows, copied contiguous first.
inline void delta_chunk_rows(float* S, const DeltaHeadRows& r, std::int64_t first, std::int64_t n, float* scratch) {
  using delta_detail::gemm;
  const std::int64_t dk = r.dk, dv = r.dv, L = delta_chunk;
  float* D = scratch;         // [L, L] D_ij; then P_ij = (q_i . k_j) D_ij
  float* A = D + L * L;       // [L, L] k_i . k_j, then A_ij
  float* T = A + L * L;       // [L, L] (I + A)^-1
  float* P = T + L * L;       // [L, L] q_i . k_j
  float* kT = P + L * L;      // [dk, L] k transposed; then exp(cum_last - cum_i) k_i
  float* Q = kT + dk * L;     // [L, dk] q, then exp(cum_i) q_i
  float* K = Q + L * dk;      // [L, dk] k
  float* Kb = K + L * dk;     // [L, dk] beta exp(cum) k, then -Y
  float* X = Kb + L * dk;     // [L, dv] beta v, then X, then v'
  float* Vb = X + L * dv;     // [L, dv] beta v
  float* o = Vb + L * dv;     // [L, dv]
  float* eq = o + L * dv;     // [L] exp(cum_i)
  float* ek = eq + L;         // [L] exp(cum_last - cum_i)
  double* cum = reinterpret_cast<double*>(ek + L);  // [L]
  double* diff = cum + L;                           // [L]
  double c = 0.0;
  for (std::int64_t i = 0; i < n; ++i) c += static_cast<double>(r.g[(first + i) * r.g_stride]), cum[i] = c;
  delta_detail::exp_to_float(cum, eq, n);
  for (std::int64_t i = 0; i < n; ++i) diff[i] = cum[n - 1] - cum[i];
  delta_detail::exp_to_float(diff, ek, n);
  for (std::int64_t i = 0; i < n; ++i) {  // D's row i: exp(cum_i - cum_j), j <= i
    for (std::int64_t j = 0; j <= i; ++j) diff[j] = cum[i] - cum[j];
    delta_detail::exp_to_float(diff, D + i * L, i + 1);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const float beta = r.beta[(first + i) * r.g_stride], be = beta * eq[i];
    const float* q = r.q + (first + i) * r.stride;
    const float* k = r.k + (first + i) * r.stride;
    const float* v = r.v + (first + i) * r.stride;
    std::copy_n(q, dk, Q + i * dk);
    std::copy_n(k, dk, K + i * dk);
    for (std::int64_t d = 0; d < dk; ++d) Kb[i * dk + d] = be * k[d];
    for (std::int64_t d = 0; d < dv; ++d) Vb[i * dv + d] = beta * v[d];
  }
  constexpr std::int64_t tile = 8;  // k transposed in 8 x 8 blocks: a block's reads and writes stay in a few lines
  for (std::int64_t i0 = 0; i0 < n; i0 += tile)
    for (std::int64_t d0 = 0; d0 < dk; d0 += tile)
      for (std::int64_t d = d0; d < std::min(dk, d0 + tile); ++d)
        for (std::int64_t i = i0; i < std::min(n, i0 + tile); ++i) kT[d * L + i] = K[i * dk + d];
  // A_ij = beta_i (k_i . k_j) D_ij below the diagonal, T = (I + A)^-1 row by row: T_i = e_i - sum_{j<i} A_ij T_j
  gemm<false>(K, dk, kT, L, A, L, n, n, dk);
  for (std::int64_t i = 0; i < n; ++i) {
    const float beta = r.beta[(first + i) * r.g_stride];
    float* a = A + i * L;  // -A_ij, j < i
    for (std::int64_t j = 0; j < i; ++j) a[j] = -(beta * a[j] * D[i * L + j]);
    float* t = T + i * L;
    gemm<false>(a, L, T, L, t, L, 1, L, i);  // (rows j < i of T are zero past column j)
    t[i] = 1.0f;
  }
  // X = T (beta v), -Y = -T (beta exp(cum) k), then v' = X - Y S (S read before its update)
  gemm<false>(T, L, Vb, dv, X, dv, n, dv, n);
  gemm<false>(T, L, Kb, dk, K, dk, n, dk, n);  // K := Y (k is in kT from here on)
  for (std::int64_t i = 0; i < n * dk; ++i) K[i] = -K[i];
  gemm<true>(K, dk, S, dv, X, dv, n, dv, dk);
  // o = (exp(cum) q) S + (q k^T . D) v'
  gemm<false>(Q, dk, kT, L, P, L, n, n, dk);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t d = 0; d < dk; ++d) Q[i * dk + d] *= eq[i];
    for (std::int64_t j = 0; j < L; ++j) P[i * L + j] = j <= i ? P[i * L + j] * D[i * L + j] : 0.0f;
  }
  gemm<false>(Q, dk, S, dv, o, dv, n, dv, dk);
  gemm<true>(P, L, X, dv, o, dv, n, dv, n);
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(o + i * dv, dv, r.out + (first + i) * r.out_stride);
  // S = exp(cum_last) S + (exp(cum_last - cum) k)^T v'
  const float chunk_decay = eq[n - 1];
  for (std::int64_t d = 0; d < dk; ++d)
    for (std::int64_t i = 0; i < n; ++i) kT[d * L + i] *= ek[i];
  delta_detail::scale(S, chunk_decay, dk * dv);
  gemm<true>(kT, L, X, dv, S, dv, dk, dv, n);
}

}  // namespace kylin::kernels
