// The CUDA kernels (backends/cuda/kernels.hpp) run by the host grid emulator against the CPU kernels
// of kylin::kernels, at the shapes of the test checkpoints (head_dim 16..128 incl. 40/48, hidden
// 32..256 incl. 96/192, GQA groups 1..12): bit-identical where the arithmetic is the same, <= 1e-5
// relative L2 for the reductions (RMSNorm, matvec, attention).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/cuda_emulator/emulate.hpp"
#include "common/draw_oracle.hpp"
#include "kernels/helpers.hpp"
#include "kylin/backends/cuda/kernels.hpp"
#include "kylin/generate/sampler_reference.hpp"
#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/draw_row.hpp"
#include "kylin/kernels/ops.hpp"

namespace cuda_kernels_test {

using namespace kylin;
using cuda::emulate::launch;

template <class K>
void run(const K& k) {
  launch(k, k.shape());
}

// Index of the first element whose bits differ, -1 when all match.
std::int64_t first_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return static_cast<std::int64_t>(i);
  return -1;
}

// ||a - b|| / ||b||.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-300;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> zeros(std::int64_t n) { return std::vector<float>(static_cast<std::size_t>(n), 0.f); }

// A Q8_0 or Q4_0 matrix [rows, cols] quantized from random floats as kylin quantizes weights at load.
std::vector<std::uint8_t> quant_matrix(DType dt, std::int64_t rows, std::int64_t cols, unsigned seed) {
  const auto f = test::random_floats(rows * cols, seed, 0.5f);
  std::vector<std::uint8_t> buf(dt == DType::q4_0 ? kernels::q4_bytes(rows, cols) : kernels::q8_bytes(rows, cols));
  for (std::int64_t r = 0; r < rows; ++r)
    if (dt == DType::q4_0) kernels::quantize_weight_row_q4(f.data() + r * cols, buf.data(), rows, cols, r);
    else kernels::quantize_weight_row_q8(f.data() + r * cols, buf.data(), rows, cols, r);
  return buf;
}

// The weights of a case: random BF16/F16/F32 ones, or quantized ones (q holds their bytes).
struct CaseWeights {
  test::Weights w;
  std::vector<std::uint8_t> q;
  kernels::MatRef ref;
};
CaseWeights case_weights(DType dt, std::int64_t rows, std::int64_t cols, unsigned seed) {
  CaseWeights c;
  if (kernels::is_quantized(dt)) {
    c.q = quant_matrix(dt, rows, cols, seed);
    c.ref = kernels::MatRef{dt, c.q.data(), rows, cols};
  } else {
    c.w = test::random_weights(dt, rows, cols, seed);
    c.ref = c.w.ref();
  }
  return c;
}

// Values around f16's and bf16's edges: subnormals, halfway cases, overflow, infinities, NaN.
std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.f, -0.f, 1e-5f, -3e-8f, 2.98023224e-8f, 5.96046448e-8f, 8.94069672e-8f, 6.1035156e-5f, 65504.f, 65519.f, 65520.f,
          -1e30f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1.00048828125f, 1.001953125f, 3.0e-39f};
}

TEST_CASE("detail:: conversions are bit-identical to core/dtype.hpp: every f16/bf16 widened, a 2^-13 sample of floats narrowed") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    REQUIRE(std::bit_cast<std::uint32_t>(cuda::detail::f16_to_f32(b)) == std::bit_cast<std::uint32_t>(f16_to_f32(b)));
    REQUIRE(std::bit_cast<std::uint32_t>(cuda::detail::bf16_to_f32(b)) == std::bit_cast<std::uint32_t>(bf16_to_f32(b)));
  }
  for (std::uint64_t u = 0; u < (1ull << 32); u += (1u << 13) + 1) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    REQUIRE(cuda::detail::f32_to_f16(f) == f32_to_f16(f));
    REQUIRE(cuda::detail::f32_to_bf16(f) == f32_to_bf16(f));
  }
}

TEST_CASE("RmsNormKernel matches kernels::rms_norm within 1e-5 rel. L2 for BF16/F16/F32 weights at the checkpoints' norm widths, in place too") {
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t dim : {16, 32, 40, 48, 64, 96, 128, 192, 256, 1031}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(dim);
      const std::int64_t rows = 3;
      const auto w = test::random_weights(dt, 1, dim, 3, 1.f);
      const auto x = test::random_floats(rows * dim, 4, 3.f);
      auto expected = zeros(rows * dim), got = zeros(rows * dim);
      kernels::rms_norm(x.data(), w.ref(), expected.data(), rows, 1e-6);
      run(cuda::RmsNormKernel{.x = x.data(), .w = w.ref().data, .w_dtype = dt, .out = got.data(), .rows = rows, .dim = dim, .eps = 1e-6});
      CHECK(rel_l2(got, expected) <= 1e-5);
      auto inplace = x;
      run(cuda::RmsNormKernel{.x = inplace.data(), .w = w.ref().data, .w_dtype = dt, .out = inplace.data(), .rows = rows, .dim = dim, .eps = 1e-6});
      CHECK(rel_l2(inplace, expected) <= 1e-5);
    }
}

// Widened elements of a cache slab.
std::vector<float> widen(const std::vector<std::uint8_t>& cache, DType dt) {
  const std::size_t n = cache.size() / dtype_size(dt);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = kernels::kv_at({dt, const_cast<std::uint8_t*>(cache.data())}, static_cast<std::int64_t>(i));
  return out;
}

TEST_CASE("AttentionInputsKernel equals kernels::rms_norm, rope and store_kv_ref in that order: two sequences, GQA, F32/F16/BF16 caches, with and without q/k norms") {
  for (DType kv : {DType::f32, DType::f16, DType::bf16})
    for (std::int64_t D : {16, 40, 48, 64, 128})
      for (bool norms : {false, true}) {
        CAPTURE(dtype_name(kv));
        CAPTURE(D);
        CAPTURE(norms);
        const std::int64_t T = 7, H = 6, KV = 2, cap = 16, half = D / 2;
        const std::int64_t row0[2] = {0, 3}, n[2] = {3, 4}, pos0[2] = {5, 0};  // rows [0, 3) at 5.., rows [3, 7) at 0..
        const auto q0 = test::random_floats(T * H * D, 5, 2.f), k0 = test::random_floats(T * KV * D, 6, 2.f);
        auto v = test::random_floats(T * KV * D, 8, 3.f);
        const auto edges = edge_values();
        std::copy(edges.begin(), edges.end(), v.begin() + 3);
        const auto cos = test::random_floats(T * half, 9), sin = test::random_floats(T * half, 10);
        const auto wq = test::random_weights(DType::bf16, 1, D, 11, 1.f), wk = test::random_weights(DType::bf16, 1, D, 12, 1.f);
        const std::size_t bytes = static_cast<std::size_t>(KV * cap * D) * dtype_size(kv);
        std::vector<std::vector<std::uint8_t>> want_k(2, std::vector<std::uint8_t>(bytes, 0xAB)), want_v = want_k, got_k = want_k, got_v = want_k;
        // The CPU's steps.
        auto q = q0, k = k0;
        if (norms) {
          kernels::rms_norm(q.data(), wq.ref(), q.data(), T * H, 1e-6);
          kernels::rms_norm(k.data(), wk.ref(), k.data(), T * KV, 1e-6);
        }
        kernels::rope(q.data(), {T, H, D}, {cos.data(), sin.data()});
        kernels::rope(k.data(), {T, KV, D}, {cos.data(), sin.data()});
        for (int s = 0; s < 2; ++s) {
          kernels::store_kv_ref({kv, want_k[s].data()}, {KV, D, cap * D}, {k.data() + row0[s] * KV * D, n[s], pos0[s]});
          kernels::store_kv_ref({kv, want_v[s].data()}, {KV, D, cap * D}, {v.data() + row0[s] * KV * D, n[s], pos0[s]});
        }
        // The kernel's one launch.
        auto gq = q0, gk = k0;
        cuda::DeviceAttentionSeq seqs[2];
        for (int s = 0; s < 2; ++s)
          seqs[s] = {.k = got_k[s].data(), .v = got_v[s].data(), .kv_stride = cap * D, .row0 = row0[s], .n_tokens = n[s], .pos0 = pos0[s]};
        run(cuda::AttentionInputsKernel{.q = gq.data(), .k = gk.data(), .v = v.data(), .rows = T, .n_heads = H, .n_kv_heads = KV, .head_dim = D,
                                        .q_norm = norms ? wq.ref().data : nullptr, .k_norm = norms ? wk.ref().data : nullptr,
                                        .norm_dtype = DType::bf16, .eps = 1e-6, .cos = cos.data(), .sin = sin.data(), .seqs = seqs, .n_seqs = 2,
                                        .kv_dtype = kv});
        for (int s = 0; s < 2; ++s) CHECK(got_v[s] == want_v[s]);  // values: stored bytes, bit for bit
        if (!norms) {  // RoPE and the stores are the same arithmetic: bit for bit
          CHECK(first_mismatch(gq, q) == -1);
          CHECK(first_mismatch(gk, k) == -1);
          for (int s = 0; s < 2; ++s) CHECK(got_k[s] == want_k[s]);
        } else {  // the sums of squares add in another order
          CHECK(rel_l2(gq, q) <= 1e-6);
          CHECK(rel_l2(gk, k) <= 1e-6);
          for (int s = 0; s < 2; ++s) CHECK(rel_l2(widen(got_k[s], kv), widen(want_k[s], kv)) <= (kv == DType::f32 ? 1e-6 : 1e-3));
        }
      }
}

TEST_CASE("SiluMul, Add and Fill kernels are bit-identical to silu_mul_ref, add_inplace and a fill, at sizes with ragged tails") {
  for (std::int64_t n : {1, 7, 520, 4097}) {
    CAPTURE(n);
    const auto gate = test::random_floats(n, 9, 4.f), up = test::random_floats(n, 10);
    auto expected = gate, got = gate;
    kernels::silu_mul_ref(expected.data(), up.data(), n);
    run(cuda::SiluMulKernel{.gate = got.data(), .up = up.data(), .n = n});
    CHECK(first_mismatch(got, expected) == -1);
    expected = gate, got = gate;
    kernels::add_inplace(expected.data(), up.data(), n);
    run(cuda::AddKernel{.acc = got.data(), .x = up.data(), .n = n});
    CHECK(first_mismatch(got, expected) == -1);
    run(cuda::FillKernel{.out = got.data(), .n = n, .value = -2.5f});
    CHECK(first_mismatch(got, std::vector<float>(gate.size(), -2.5f)) == -1);
  }
}

TEST_CASE("GatherRows and AddRowsScaled kernels are bit-identical to kernels::gather_rows and add_rows_scaled (rows out of order)") {
  for (std::int64_t width : {96, 520}) {
    CAPTURE(width);
    const auto x = test::random_floats(10 * width, 11), y = test::random_floats(4 * width, 12);
    const std::vector<std::int64_t> rows{7, 2, 9, 0};
    const std::vector<float> weights{0.25f, -1.5f, 0.7f, 0.1f};
    auto expected = zeros(4 * width), got = zeros(4 * width);
    kernels::gather_rows(x.data(), {rows, {}}, expected.data(), width);
    run(cuda::GatherRowsKernel{.x = x.data(), .rows = rows.data(), .n_rows = 4, .width = width, .out = got.data()});
    CHECK(first_mismatch(got, expected) == -1);
    expected = x, got = x;
    kernels::add_rows_scaled(expected.data(), y.data(), {rows, weights}, width);
    run(cuda::AddRowsScaledKernel{.acc = got.data(), .y = y.data(), .rows = rows.data(), .weights = weights.data(), .n_rows = 4, .width = width});
    CHECK(first_mismatch(got, expected) == -1);
  }
}

TEST_CASE("EmbedKernel is bit-identical to kernels::embed_row for BF16/F16/F32/Q8_0/Q4_0 tables, several rows a launch, full 151936-row vocab included") {
  struct Table {
    DType dt;
    std::int64_t rows, cols;
  };
  for (const Table& tb : {Table{DType::bf16, 1531, 96}, Table{DType::f16, 1531, 192}, Table{DType::f32, 4096, 256},
                          Table{DType::q8_0, 1531, 96}, Table{DType::q8_0, 2048, 128}, Table{DType::q4_0, 1531, 96},
                          Table{DType::q4_0, 2048, 128}, Table{DType::bf16, 151936, 32}}) {
    CAPTURE(dtype_name(tb.dt));
    CAPTURE(tb.rows);
    const CaseWeights cw = case_weights(tb.dt, tb.rows, tb.cols, 13);
    const kernels::MatRef table = cw.ref;
    // Three rows in one launch, the last row of the table among them.
    const int ids[] = {7, 0, static_cast<int>(tb.rows - 1)};
    auto expected = zeros(3 * tb.cols), got = zeros(3 * tb.cols);
    for (int i = 0; i < 3; ++i) kernels::embed_row(table, ids[i], expected.data() + i * tb.cols);
    run(cuda::EmbedKernel{.table = table.data, .dtype = tb.dt, .rows = tb.rows, .cols = tb.cols, .ids = ids, .n = 3, .out = got.data()});
    CHECK(first_mismatch(got, expected) == -1);
  }
}

TEST_CASE("WidenRowsKernel writes rows [r0, r0 + n) of an F16/Q8_0/Q4_0/BF16 weight as kernels::embed_row widens them, bit for bit") {
  for (DType dt : {DType::f16, DType::q8_0, DType::q4_0, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const std::int64_t rows = 67, cols = 96, r0 = 60, n = 7;  // the last rows of the weight
    const CaseWeights cw = case_weights(dt, rows, cols, 17);
    auto expected = zeros(n * cols), got = zeros(n * cols);
    for (std::int64_t i = 0; i < n; ++i) kernels::embed_row(cw.ref, static_cast<int>(r0 + i), expected.data() + i * cols);
    run(cuda::WidenRowsKernel{.w = cw.ref.data, .dtype = dt, .rows = rows, .cols = cols, .r0 = r0, .n = n, .out = got.data()});
    CHECK(first_mismatch(got, expected) == -1);
  }
}

// One matvec case: W [out, in] in dt, n rows of x (starting x_shift floats into its buffer, so
// x_shift = 1 leaves them off 16-byte alignment), with or without bias.
double matvec_error(DType dt, std::int64_t out, std::int64_t in, std::int64_t n, bool with_bias, std::int64_t x_shift = 0, unsigned split = 1) {
  const CaseWeights cw = case_weights(dt, out, in, 14);
  const kernels::MatRef m = cw.ref;
  const auto x_buf = test::random_floats(n * in + x_shift, 15), bias_v = test::random_floats(out, 16);
  const float* x = x_buf.data() + x_shift;
  const float* bias = with_bias ? bias_v.data() : nullptr;
  auto expected = zeros(n * out), got = zeros(n * out);
  kernels::matmul_ref(x, m, bias, expected.data(), n);
  run(cuda::MatvecKernel{.x = x, .n = n, .w_dtype = dt, .in_features = in, .outs = {{.w = m.data, .bias = bias, .y = got.data(), .rows = out}}, .n_outs = 1,
                         .k_split = split});
  return rel_l2(got, expected);
}

TEST_CASE("MatvecKernel with three outputs (q/k/v of different widths, one with bias) equals each output alone, and writes every element") {
  const std::int64_t in = 192, n = 3;
  const std::int64_t rows[3] = {136, 40, 41};  // the outputs' features split across warps and blocks
  for (DType dt : {DType::bf16, DType::f32, DType::q8_0, DType::q4_0}) {
    CAPTURE(dtype_name(dt));
    std::vector<CaseWeights> ws;
    for (int i = 0; i < 3; ++i) ws.push_back(case_weights(dt, rows[i], in, static_cast<unsigned>(30 + i)));
    const auto x = test::random_floats(n * in, 33), bias = test::random_floats(rows[1], 34);
    cuda::MatvecKernel all{.x = x.data(), .n = n, .w_dtype = dt, .in_features = in, .outs = {}, .n_outs = 3};
    std::vector<std::vector<float>> together, alone;
    for (int i = 0; i < 3; ++i) {
      together.push_back(std::vector<float>(static_cast<std::size_t>(n * rows[i]), std::nanf("")));
      alone.push_back(zeros(n * rows[i]));
    }
    for (int i = 0; i < 3; ++i) {
      const cuda::MatvecOut o{.w = ws[static_cast<std::size_t>(i)].ref.data, .bias = i == 1 ? bias.data() : nullptr, .y = nullptr, .rows = rows[i]};
      all.outs[i] = o;
      all.outs[i].y = together[static_cast<std::size_t>(i)].data();
      cuda::MatvecKernel one{.x = x.data(), .n = n, .w_dtype = dt, .in_features = in, .outs = {o}, .n_outs = 1};
      one.outs[0].y = alone[static_cast<std::size_t>(i)].data();
      run(one);
    }
    run(all);
    for (int i = 0; i < 3; ++i) CHECK(first_mismatch(together[static_cast<std::size_t>(i)], alone[static_cast<std::size_t>(i)]) == -1);
    // Split over the warps: each output within 1e-6 of the unsplit sums (the parts add in another order).
    all.k_split = cuda::detail::matvec_warps;
    run(all);
    for (int i = 0; i < 3; ++i) CHECK(rel_l2(together[static_cast<std::size_t>(i)], alone[static_cast<std::size_t>(i)]) <= 1e-6);
  }
}

TEST_CASE("MatvecAddKernel adds each sum (and bias) to what y held: y0 + (MatvecKernel's result), bit for bit") {
  const std::int64_t in = 192, out = 136, n = 3;
  for (DType dt : {DType::bf16, DType::q8_0}) {
    CAPTURE(dtype_name(dt));
    const CaseWeights cw = case_weights(dt, out, in, 40);
    const auto x = test::random_floats(n * in, 41), bias = test::random_floats(out, 42), y0 = test::random_floats(n * out, 43);
    for (unsigned split : {1u, cuda::detail::matvec_warps}) {
      auto assigned = zeros(n * out);
      std::vector<float> added = y0;
      const cuda::MatvecKernel k{.x = x.data(), .n = n, .w_dtype = dt, .in_features = in,
                                 .outs = {{.w = cw.ref.data, .bias = bias.data(), .y = assigned.data(), .rows = out}}, .n_outs = 1, .k_split = split};
      run(k);
      run(cuda::MatvecAddKernel{.x = k.x, .n = n, .w_dtype = dt, .in_features = in,
                                .outs = {{.w = cw.ref.data, .bias = bias.data(), .y = added.data(), .rows = out}}, .n_outs = 1, .k_split = split});
      std::vector<float> want(y0.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = y0[i] + assigned[i];
      CHECK(first_mismatch(added, want) == -1);
    }
  }
}

TEST_CASE("SwiGLUMatvecKernel equals the gate and up matvecs then SiluMulKernel, bit for bit, and leaves up's y alone") {
  const std::int64_t in = 192, out = 136, n = 3;
  for (DType dt : {DType::bf16, DType::f16, DType::q8_0, DType::q4_0}) {
    CAPTURE(dtype_name(dt));
    const CaseWeights gate = case_weights(dt, out, in, 44), up = case_weights(dt, out, in, 45);
    const auto x = test::random_floats(n * in, 46);
    for (unsigned split : {1u, cuda::detail::matvec_warps}) {
      CAPTURE(split);
      auto g = zeros(n * out), u = zeros(n * out), fused = zeros(n * out);
      std::vector<float> untouched(static_cast<std::size_t>(n * out), 7.0f);
      run(cuda::MatvecKernel{.x = x.data(), .n = n, .w_dtype = dt, .in_features = in,
                             .outs = {{.w = gate.ref.data, .bias = nullptr, .y = g.data(), .rows = out}, {.w = up.ref.data, .bias = nullptr, .y = u.data(), .rows = out}},
                             .n_outs = 2, .k_split = split});
      run(cuda::SiluMulKernel{.gate = g.data(), .up = u.data(), .n = n * out});
      run(cuda::SwiGLUMatvecKernel{.x = x.data(), .n = n, .w_dtype = dt, .in_features = in,
                                   .outs = {{.w = gate.ref.data, .bias = nullptr, .y = fused.data(), .rows = out},
                                            {.w = up.ref.data, .bias = nullptr, .y = untouched.data(), .rows = out}},
                                   .n_outs = 2, .k_split = split});
      CHECK(first_mismatch(fused, g) == -1);
      CHECK(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == 7.0f; }));
    }
  }
}

// k run twice on y (k.outs[0].y, reset to y0 each time): on x made by RmsNormKernel first, then with
// the norm taken in (MatvecNorm, applied to the sums). The products round before the scale, so the
// bits differ: measured <= 4e-7 relative L2 for BF16/F16 weights, <= 1e-7 for Q8_0/Q4_0 (whose bar
// allows for a value on a rounding boundary quantizing apart in x * w and x * inv * w); the normed
// rows came out identical (the same double sum of squares).
template <class Kernel>
void check_norm_taken_in(Kernel k, std::vector<float>& y, const std::vector<float>& y0, const std::vector<float>& raw, const test::Weights& nw) {
  const std::int64_t n = k.n, in = k.in_features;
  auto normed = zeros(n * in), normed_in = std::vector<float>(static_cast<std::size_t>(n * in), std::nanf(""));
  run(cuda::RmsNormKernel{.x = raw.data(), .w = nw.ref().data, .w_dtype = nw.ref().dtype, .out = normed.data(), .rows = n, .dim = in, .eps = 1e-6});
  std::ranges::copy(y0, y.begin());
  k.x = normed.data();
  run(k);
  const std::vector<float> want = y;
  std::ranges::copy(y0, y.begin());
  k.x = normed_in.data();
  run(k.normed({.x = raw.data(), .w = nw.ref().data, .w_dtype = nw.ref().dtype, .eps = 1e-6, .out = normed_in.data()}));
  const double bar = kernels::is_quantized(k.w_dtype) ? 1e-3 : 1e-6;
  MESSAGE("relative L2 " << rel_l2(y, want) << ", normed rows " << rel_l2(normed_in, normed));
  CHECK(rel_l2(y, want) <= bar);
  CHECK(rel_l2(normed_in, normed) <= 1e-6);  // block 0 wrote the rows the norm would have
}

TEST_CASE("A matvec with the RMSNorm taken in (MatvecNorm) agrees with RmsNormKernel then the matvec: assign/add/SwiGLU stores, BF16/F16/Q8_0/Q4_0, 1 and 3 rows") {
  const std::int64_t out = 200;
  for (DType dt : {DType::bf16, DType::f16, DType::q8_0, DType::q4_0})
    for (std::int64_t in : {192, 544})  // 544: more columns than the norm's 256 slots, and rows split over warps
      for (std::int64_t n : {1, 3})
        for (DType norm_dt : {DType::bf16, DType::f32}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(in);
          CAPTURE(n);
          CAPTURE(dtype_name(norm_dt));
          const CaseWeights a = case_weights(dt, out, in, 50), b = case_weights(dt, out, in, 51);
          const auto nw = test::random_weights(norm_dt, 1, in, 52, 1.f);
          const auto raw = test::random_floats(n * in, 53, 3.f), y0 = test::random_floats(n * out, 54), none = zeros(n * out);
          std::vector<float> y = none, up = none;
          const cuda::MatvecOut first{.w = a.ref.data, .bias = nullptr, .y = y.data(), .rows = out}, second{.w = b.ref.data, .bias = nullptr, .y = up.data(), .rows = out};
          const unsigned split2 = cuda::MatvecKernel::split_for(2 * out, in), split1 = cuda::MatvecKernel::split_for(out, in);
          check_norm_taken_in(cuda::MatvecKernel{.x = nullptr, .n = n, .w_dtype = dt, .in_features = in, .outs = {first, second}, .n_outs = 2, .k_split = split2},
                              y, none, raw, nw);
          check_norm_taken_in(cuda::MatvecAddKernel{.x = nullptr, .n = n, .w_dtype = dt, .in_features = in, .outs = {first}, .n_outs = 1, .k_split = split1},
                              y, y0, raw, nw);
          check_norm_taken_in(cuda::SwiGLUMatvecKernel{.x = nullptr, .n = n, .w_dtype = dt, .in_features = in, .outs = {first, second}, .n_outs = 2, .k_split = split2},
                              y, none, raw, nw);
        }
}

TEST_CASE("MatvecKernel matches kernels::matmul_ref within 1e-5 rel. L2 for BF16/F16/F32 weights, odd widths, 1..13 rows, bias or not") {
  struct Shape {
    std::int64_t out, in, n;
  };
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const Shape& s : {Shape{192, 96, 1}, Shape{96, 240, 3}, Shape{40, 40, 13}, Shape{520, 192, 1}, Shape{192, 520, 5},
                           Shape{56, 96, 9}, Shape{1531, 32, 1}, Shape{288, 192, 2}}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(s.out);
      CAPTURE(s.in);
      CAPTURE(s.n);
      CHECK(matvec_error(dt, s.out, s.in, s.n, s.n % 2 == 1) <= 1e-5);
      CHECK(matvec_error(dt, s.out, s.in, s.n, s.n % 2 == 1, 0, cuda::detail::matvec_warps) <= 1e-5);  // rows split over the warps
    }
}

TEST_CASE("MatvecKernel reads 16 bytes at a time only where rows are 16-byte aligned: widths not a multiple of 8 or 4 and misaligned x give the same results") {
  struct Shape {
    std::int64_t out, in, n;
  };
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const Shape& s : {Shape{72, 36, 3}, Shape{33, 27, 2}, Shape{64, 96, 1}, Shape{64, 96, 4}})
      for (std::int64_t shift : {0, 1}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(s.in);
        CAPTURE(s.n);
        CAPTURE(shift);
        CHECK(matvec_error(dt, s.out, s.in, s.n, true, shift) <= 1e-5);
        CHECK(matvec_error(dt, s.out, s.in, s.n, true, shift, cuda::detail::matvec_warps) <= 1e-5);
      }
}

TEST_CASE("load16 widens 16 bytes to f32 (BF16, F16, F32) and refuses a misaligned address, on which the GPU would fault") {
  alignas(16) std::uint16_t h[16];
  for (int i = 0; i < 16; ++i) h[i] = kylin::f32_to_bf16(static_cast<float>(i) - 3.5f);
  float out[8];
  cuda::detail::load16(reinterpret_cast<const bf16_t*>(h), out);
  for (int i = 0; i < 8; ++i) CHECK(out[i] == static_cast<float>(i) - 3.5f);
  alignas(16) float f[5] = {1.f, 2.f, 3.f, 4.f, 5.f};
  float four[4];
  cuda::detail::load16(f, four);
  CHECK(four[3] == 4.f);
  CHECK_THROWS_AS(cuda::detail::load16(f + 1, four), std::logic_error);
  CHECK_THROWS_AS(cuda::detail::load16(reinterpret_cast<const bf16_t*>(h + 1), out), std::logic_error);
}

TEST_CASE("MatvecKernel on Q8_0/Q4_0 weights matches matmul_ref's quantized product within 1e-5 (x quantized per block as on the CPU)") {
  struct Shape {
    std::int64_t out, in, n;
  };
  // Q8_0/Q4_0 stage x's rows in shared memory, 8 at a time, fewer where rows are long: 12288 columns
  // (the 8B shape's down_proj) take 2 a group, so 5 rows are 3 groups
  CHECK(cuda::MatvecKernel{.x = nullptr, .n = 5, .w_dtype = DType::q8_0, .in_features = 12288, .outs = {}, .n_outs = 0}.staged_rows() == 2);
  CHECK(cuda::MatvecKernel{.x = nullptr, .n = 5, .w_dtype = DType::q4_0, .in_features = 12288, .outs = {}, .n_outs = 0}.staged_rows() == 2);
  for (DType dt : {DType::q8_0, DType::q4_0})
    for (const Shape& s : {Shape{192, 96, 1}, Shape{136, 192, 3}, Shape{64, 256, 9}, Shape{1531, 32, 1}, Shape{96, 160, 8}, Shape{40, 12288, 5}}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(s.out);
      CAPTURE(s.in);
      CAPTURE(s.n);
      CHECK(matvec_error(dt, s.out, s.in, s.n, s.n % 2 == 0) <= 1e-5);
      CHECK(matvec_error(dt, s.out, s.in, s.n, s.n % 2 == 0, 0, cuda::detail::matvec_warps) <= 1e-5);
    }
}

TEST_CASE("SplitBf16Kernel gives hi = bf16(x) and lo = bf16(x - hi), nearest-even, bit for bit") {
  auto x = test::random_floats(1000, 17, 10.f);
  const auto edges = edge_values();
  std::copy(edges.begin(), edges.end(), x.begin());
  std::vector<std::uint16_t> hi(x.size()), lo(x.size());
  run(cuda::SplitBf16Kernel{.x = x.data(), .n = static_cast<std::int64_t>(x.size()), .hi = hi.data(), .lo = lo.data()});
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    REQUIRE(hi[i] == f32_to_bf16(x[i]));
    REQUIRE(lo[i] == f32_to_bf16(x[i] - bf16_to_f32(hi[i])));
  }
}

TEST_CASE("AddBiasKernel adds bias[c] to every row, bit for bit, also when the grid is smaller than the rows") {
  const std::int64_t rows = 5, cols = 520;
  const auto y0 = test::random_floats(rows * cols, 18), bias = test::random_floats(cols, 19);
  auto expected = y0, got = y0, strided = y0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) expected[static_cast<std::size_t>(r * cols + c)] += bias[static_cast<std::size_t>(c)];
  const cuda::AddBiasKernel k{.y = got.data(), .bias = bias.data(), .rows = rows, .cols = cols};
  run(k);
  CHECK(first_mismatch(got, expected) == -1);
  cuda::AddBiasKernel k2 = k;
  k2.y = strided.data();
  launch(k2, {{1, 2}, {64}, 0});  // grid-stride in both directions
  CHECK(first_mismatch(strided, expected) == -1);
}

// One sequence of an attention batch: its rows of q/out, cached positions before them, its own cache.
struct Seq {
  std::int64_t row0, n_tokens, pos0;
  std::vector<std::uint8_t> k, v;
  std::int64_t stride = 0;
};

struct AttnCase {
  std::int64_t n_heads, n_kv, D;
  DType kv;
};

// Rows: two decodes (151 and 38 keys), a prefill chunk from position 0, a chunk across the 64-key
// tile edge, a decode of 129 keys, a 2-token chunk at 300 keys: 12 rows, each sequence its own capacity.
double attention_error(const AttnCase& c, unsigned splits = 1) {
  std::vector<Seq> seqs;
  for (auto [row0, n, pos0] : {std::array<std::int64_t, 3>{0, 1, 150}, {1, 1, 37}, {2, 4, 0}, {6, 3, 62}, {9, 1, 128}, {10, 2, 299}})
    seqs.push_back({row0, n, pos0, {}, {}});
  const std::int64_t H = c.n_heads, D = c.D, n_rows = 12;
  const std::size_t elem = c.kv == DType::f32 ? 4 : 2;
  const auto q = test::random_floats(n_rows * H * D, 20, 2.f);
  auto expected = zeros(n_rows * H * D), got = zeros(n_rows * H * D);
  std::vector<cuda::DeviceAttentionSeq> dev;
  unsigned seed = 21;
  for (Seq& s : seqs) {
    const std::int64_t ctx = s.pos0 + s.n_tokens, cap = ctx + 3;
    s.stride = cap * D;
    s.k.assign(static_cast<std::size_t>(c.n_kv * s.stride) * elem, 0);
    s.v.assign(s.k.size(), 0);
    const auto keys = test::random_floats(ctx * c.n_kv * D, seed++, 2.f), vals = test::random_floats(ctx * c.n_kv * D, seed++);
    kernels::store_kv_ref({c.kv, s.k.data()}, {c.n_kv, D, s.stride}, {keys.data(), ctx, 0});
    kernels::store_kv_ref({c.kv, s.v.data()}, {c.n_kv, D, s.stride}, {vals.data(), ctx, 0});
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    kernels::attention_ref(q.data() + s.row0 * H * D, {c.kv, s.k.data()}, {c.kv, s.v.data()}, expected.data() + s.row0 * H * D,
                           {s.n_tokens, s.pos0, H, c.n_kv, D, s.stride, scale});
    dev.push_back({.k = s.k.data(), .v = s.v.data(), .kv_stride = s.stride, .row0 = s.row0, .n_tokens = s.n_tokens, .pos0 = s.pos0});
  }
  std::vector<float> partial(static_cast<std::size_t>(n_rows * H * splits * (D + 2)), std::nanf(""));
  const cuda::AttentionKernel k{.q = q.data(), .out = got.data(), .seqs = dev.data(), .n_seqs = static_cast<std::int64_t>(dev.size()),
                                .n_rows = n_rows, .n_heads = H, .n_kv_heads = c.n_kv, .head_dim = D,
                                .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), .kv_dtype = c.kv};
  if (splits == 1) {
    run(k);
    return rel_l2(got, expected);
  }
  run(cuda::SplitAttentionKernel{.q = k.q, .out = k.out, .seqs = k.seqs, .n_seqs = k.n_seqs, .n_rows = n_rows, .n_heads = H, .n_kv_heads = c.n_kv,
                                 .head_dim = D, .scale = k.scale, .kv_dtype = c.kv, .splits = splits, .partial = partial.data()});
  run(cuda::AttentionCombineKernel{.partial = partial.data(), .out = got.data(), .seqs = dev.data(), .n_seqs = k.n_seqs,
                                   .n_rows = n_rows, .n_heads = H, .head_dim = D, .splits = splits});
  return rel_l2(got, expected);
}

TEST_CASE("AttentionKernel matches kernels::attention_ref within 1e-5 rel. L2: decode and prefill rows mixed, contexts past the key tile, GQA 1..12, F32/F16 KV") {
  for (const AttnCase& c : {AttnCase{6, 2, 40, DType::f32}, AttnCase{6, 3, 48, DType::f16}, AttnCase{8, 2, 64, DType::f16},
                            AttnCase{4, 2, 128, DType::f32}, AttnCase{12, 1, 32, DType::f16}, AttnCase{2, 2, 16, DType::f32}}) {
    CAPTURE(c.n_heads);
    CAPTURE(c.n_kv);
    CAPTURE(c.D);
    CAPTURE(dtype_name(c.kv));
    CHECK(attention_error(c) <= 1e-5);
  }
}

TEST_CASE("SplitAttentionKernel (keys split into shares), then AttentionCombineKernel, matches kernels::attention_ref within 1e-5 rel. L2 (shares of whole tiles, empty ones too)") {
  for (const auto& case_splits : {std::pair{AttnCase{6, 2, 40, DType::f32}, 2u}, std::pair{AttnCase{8, 2, 64, DType::f16}, 5u},
                                  std::pair{AttnCase{4, 2, 128, DType::f32}, 16u}}) {
    const AttnCase& c = case_splits.first;  // no structured bindings: clang 14 cannot capture them in CAPTURE's lambda
    const unsigned splits = case_splits.second;
    CAPTURE(c.n_heads);
    CAPTURE(c.D);
    CAPTURE(splits);
    CHECK(attention_error(c, splits) <= 1e-5);
  }
  // The backend's choice: a decode row of a 0.6B shape splits 16 ways, a 512-row prefill not at all.
  cuda::AttentionKernel k{.q = nullptr, .out = nullptr, .seqs = nullptr, .n_seqs = 1, .n_rows = 1, .n_heads = 16, .n_kv_heads = 8,
                          .head_dim = 128, .scale = 1, .kv_dtype = DType::f32};
  CHECK(k.splits_for() == 16);
  k.n_rows = 8;
  CHECK(k.splits_for() == 4);
  k.n_rows = 512;
  CHECK(k.splits_for() == 1);
}

TEST_CASE("kernels write NaN, never a guess, for a dtype they have no path for") {
  const std::int64_t dim = 64;
  const auto x = test::random_floats(2 * dim, 22);
  const std::vector<std::uint8_t> raw(4096, 1);
  auto out = zeros(2 * dim);
  run(cuda::RmsNormKernel{.x = x.data(), .w = raw.data(), .w_dtype = DType::i8, .out = out.data(), .rows = 2, .dim = dim, .eps = 1e-6});
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
  out = zeros(2 * 8);
  run(cuda::MatvecKernel{.x = x.data(), .n = 2, .w_dtype = DType::u8, .in_features = dim, .outs = {{.w = raw.data(), .bias = nullptr, .y = out.data(), .rows = 8}},
                         .n_outs = 1});
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
  out = zeros(dim);
  const int one = 1;
  run(cuda::EmbedKernel{.table = raw.data(), .dtype = DType::f64, .rows = 4, .cols = dim, .ids = &one, .n = 1, .out = out.data()});
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
  const cuda::DeviceAttentionSeq seq{.k = raw.data(), .v = raw.data(), .kv_stride = 4 * 32, .row0 = 0, .n_tokens = 2, .pos0 = 1};
  out = zeros(2 * 2 * 32);
  run(cuda::AttentionKernel{.q = x.data(), .out = out.data(), .seqs = &seq, .n_seqs = 1, .n_rows = 2, .n_heads = 2, .n_kv_heads = 1,
                            .head_dim = 32, .scale = 0.2f, .kv_dtype = DType::i32});
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
}

TEST_CASE("launch shapes respect CUDA's limits at full model sizes and are valid (>= 1 block) for empty work") {
  auto ok = [](const cuda::LaunchShape& s) {
    const unsigned threads = s.block.x * s.block.y * s.block.z;
    return s.grid.x >= 1 && s.grid.y >= 1 && s.grid.y <= 65535 && s.grid.z >= 1 && s.grid.z <= 65535 && threads % 32 == 0 &&
           threads <= 1024 && s.shared_bytes <= 48 * 1024;
  };
  const std::int64_t big = 40'000'000'000;
  CHECK(ok(cuda::SiluMulKernel{.gate = nullptr, .up = nullptr, .n = big}.shape()));
  CHECK(ok(cuda::FillKernel{.out = nullptr, .n = 0, .value = 0}.shape()));
  CHECK(ok(cuda::RmsNormKernel{.x = nullptr, .w = nullptr, .w_dtype = DType::bf16, .out = nullptr, .rows = 1'000'000, .dim = 8192, .eps = 1e-6}.shape()));
  CHECK(ok(cuda::AddBiasKernel{.y = nullptr, .bias = nullptr, .rows = 1'000'000, .cols = 151936}.shape()));
  CHECK(ok(cuda::GatherRowsKernel{.x = nullptr, .rows = nullptr, .n_rows = 0, .width = 64, .out = nullptr}.shape()));
  CHECK(ok(cuda::AttentionInputsKernel{.q = nullptr, .k = nullptr, .v = nullptr, .rows = 100'000, .n_heads = 64, .n_kv_heads = 8, .head_dim = 256,
                                       .q_norm = nullptr, .k_norm = nullptr, .norm_dtype = DType::bf16, .eps = 1e-6, .cos = nullptr,
                                       .sin = nullptr, .seqs = nullptr, .n_seqs = 0, .kv_dtype = DType::f16}.shape()));
  CHECK(ok(cuda::MatvecKernel{.x = nullptr, .n = 512, .w_dtype = DType::q8_0, .in_features = 5120,
                              .outs = {{.w = nullptr, .bias = nullptr, .y = nullptr, .rows = 151936}}, .n_outs = 1}.shape()));
  for (std::int64_t kv : {1, 4, 8}) {
    cuda::SplitAttentionKernel k{.q = nullptr, .out = nullptr, .seqs = nullptr, .n_seqs = 0, .n_rows = 100'000, .n_heads = 64, .n_kv_heads = kv,
                                 .head_dim = 256, .scale = 1, .kv_dtype = DType::f16};
    CHECK(ok(k.shape()));
    k.n_rows = 1;
    k.splits = k.splits_for();
    CHECK(ok(k.shape()));
    CHECK(k.splits * k.n_rows * k.n_heads * (k.head_dim + 2) <= cuda::detail::attn_partial_floats);
  }
  CHECK(ok(cuda::AttentionCombineKernel{.partial = nullptr, .out = nullptr, .seqs = nullptr, .n_seqs = 0, .n_rows = 100'000, .n_heads = 64,
                                        .head_dim = 256, .splits = 16}.shape()));
  // a norm taken into a matvec only where the backend's bound keeps the launch within 48 KiB (8
  // rows of the 0.6B shape's 1024 did not fit, and failed to launch on an H100)
  for (std::int64_t rows : {1, 2, 4, 8})
    for (std::int64_t width : {128, 1024, 2560, 4096, 8192}) {
      const cuda::MatvecKernel k{.x = nullptr, .n = rows, .w_dtype = DType::bf16, .in_features = width,
                                 .outs = {{.w = nullptr, .bias = nullptr, .y = nullptr, .rows = 4096}}, .n_outs = 1};
      if (cuda::MatvecKernel::norm_bytes(rows, width) <= cuda::MatvecKernel::max_norm_bytes) CHECK(ok(k.normed({}).shape()));
    }
  CHECK(cuda::MatvecKernel::norm_bytes(8, 1024) > cuda::MatvecKernel::max_norm_bytes);
}

TEST_CASE("grid-stride kernels are correct under a grid smaller than their work (more rows and elements than threads)") {
  const std::int64_t rows = 5, dim = 700;
  const auto x = test::random_floats(rows * dim, 23);
  const auto w = test::random_weights(DType::f32, 1, dim, 24);
  auto expected = zeros(rows * dim), got = zeros(rows * dim);
  kernels::rms_norm(x.data(), w.ref(), expected.data(), rows, 1e-6);
  const cuda::RmsNormKernel norm{.x = x.data(), .w = w.ref().data, .w_dtype = DType::f32, .out = got.data(), .rows = rows, .dim = dim, .eps = 1e-6};
  launch(norm, {{2}, {norm.shape().block}, norm.shape().shared_bytes});
  CHECK(rel_l2(got, expected) <= 1e-5);
  auto a = x, b = x;
  kernels::add_inplace(a.data(), expected.data(), rows * dim);
  launch(cuda::AddKernel{.acc = b.data(), .x = expected.data(), .n = rows * dim}, {{3}, {64}, 0});
  CHECK(first_mismatch(b, a) == -1);
  const std::vector<std::int64_t> sel{4, 1, 3};
  auto ge = zeros(3 * dim), gg = zeros(3 * dim);
  kernels::gather_rows(x.data(), {sel, {}}, ge.data(), dim);
  launch(cuda::GatherRowsKernel{.x = x.data(), .rows = sel.data(), .n_rows = 3, .width = dim, .out = gg.data()}, {{2}, {32}, 0});
  CHECK(first_mismatch(gg, ge) == -1);
}

TEST_CASE("ArgmaxKernel gives kernels::argmax's id for every row, cut or whole, one launch for rows of a wider stride") {
  const auto cases = test::argmax_rows_cases();
  for (const auto& row : cases) {
    for (std::size_t width : {row.size(), row.size() / 2}) {
      CAPTURE(row.size());
      CAPTURE(width);
      int id = -7;
      run(cuda::ArgmaxKernel{.x = row.data(), .rows = 1, .width = static_cast<std::int64_t>(width),
                             .stride = static_cast<std::int64_t>(row.size()), .ids = &id});
      CHECK(id == kernels::argmax(std::span<const float>(row).first(width)));
    }
  }
  // every short case in one launch: row r holds the case, -inf up to the cut, then +inf the cut must hide
  const std::int64_t stride = 40, width = stride - 3;
  std::vector<float> cut;  // [rows, stride]
  std::vector<int> expected;
  for (const auto& row : cases) {
    if (static_cast<std::int64_t>(row.size()) > width) continue;
    cut.insert(cut.end(), row.begin(), row.end());
    cut.resize(cut.size() + static_cast<std::size_t>(width) - row.size(), -INFINITY);
    cut.resize(cut.size() + static_cast<std::size_t>(stride - width), INFINITY);
    expected.push_back(kernels::argmax(row));
  }
  std::vector<int> got(expected.size(), -7);
  run(cuda::ArgmaxKernel{.x = cut.data(), .rows = static_cast<std::int64_t>(expected.size()), .width = width, .stride = stride, .ids = got.data()});
  CHECK(got == expected);
}

}  // namespace cuda_kernels_test


namespace cuda_kernels_test {

// Both top-k kernels in a row, as CudaBackend::top_k_rows launches them: [rows, k] best first.
std::vector<kernels::RankedLogit> device_top_k(const std::vector<float>& x, std::int64_t rows, std::int64_t width, std::int64_t stride, std::int64_t k) {
  cuda::TopKSliceKernel slices{.x = x.data(), .rows = rows, .width = width, .stride = stride, .k = k, .keys = nullptr};
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(rows * slices.slices() * k), 0xdeadbeefu);  // [rows, slices, k]
  slices.keys = keys.data();
  run(slices);
  std::vector<kernels::RankedLogit> top(static_cast<std::size_t>(rows * k), {7.f, 7});  // [rows, k]
  run(cuda::TopKMergeKernel{.keys = keys.data(), .rows = rows, .candidates = slices.slices() * k, .k = k, .top = top.data()});
  return top;
}

TEST_CASE("TopKSliceKernel then TopKMergeKernel give kernels::top_k of every row, cut or whole, ties, NaN and +-inf included") {
  for (const auto& row : test::top_k_rows_cases()) {
    if (row.empty()) continue;
    const bool long_row = row.size() > 10000;  // the emulator runs a slice's threads one by one: one cut, one k
    for (std::size_t width : {row.size(), row.size() / 2}) {
      if (width == 0 || (long_row && width != row.size())) continue;
      for (std::int64_t k : {1, 3, 20, 64, 300}) {
        if (long_row && k != 20) continue;
        CAPTURE(row.size());
        CAPTURE(width);
        CAPTURE(k);
        std::vector<kernels::RankedLogit> expected(static_cast<std::size_t>(k));
        kernels::top_k(std::span<const float>(row).first(width), expected);
        CHECK(device_top_k(row, 1, static_cast<std::int64_t>(width), static_cast<std::int64_t>(row.size()), k) == expected);
      }
    }
  }
  // the short cases in one launch: row r holds the case, -inf up to the cut, then +inf the cut must hide
  const std::int64_t stride = 40, width = stride - 3, k = 5;
  std::vector<float> cut;  // [rows, stride]
  std::vector<kernels::RankedLogit> expected;  // [rows, k]
  for (const auto& row : test::top_k_rows_cases()) {
    if (static_cast<std::int64_t>(row.size()) > width) continue;
    cut.insert(cut.end(), row.begin(), row.end());
    cut.resize(cut.size() + static_cast<std::size_t>(width) - row.size(), -INFINITY);
    cut.resize(cut.size() + static_cast<std::size_t>(stride - width), INFINITY);
    expected.resize(expected.size() + static_cast<std::size_t>(k));
    kernels::top_k(std::span<const float>(cut).last(static_cast<std::size_t>(stride)).first(static_cast<std::size_t>(width)),
                   std::span<kernels::RankedLogit>(expected).last(static_cast<std::size_t>(k)));
  }
  const auto rows = static_cast<std::int64_t>(expected.size()) / k;
  CHECK(device_top_k(cut, rows, width, stride, k) == expected);
}

}  // namespace cuda_kernels_test

namespace cuda_kernels_test {

// The three draw kernels in a row, as CudaBackend::draw_rows launches them: row r of x ([rows,
// stride]) drawn under draws[r].
std::vector<int> device_draws(const std::vector<float>& x, std::int64_t width, std::int64_t stride, const std::vector<kernels::RowDraw>& draws) {
  const auto rows = static_cast<std::int64_t>(draws.size());
  std::vector<int> top(draws.size(), -7), ids(draws.size(), -7);
  run(cuda::ArgmaxKernel{.x = x.data(), .rows = rows, .width = width, .stride = stride, .ids = top.data()});
  cuda::DrawSliceKernel slices{.x = x.data(), .rows = rows, .width = width, .stride = stride, .top = top.data(), .draws = draws.data(), .sums = nullptr};
  std::vector<double> sums(static_cast<std::size_t>(rows * slices.slices()), -1.0);  // [rows, slices]
  slices.sums = sums.data();
  run(slices);
  run(cuda::DrawPickKernel{.x = x.data(), .rows = rows, .width = width, .stride = stride, .top = top.data(), .draws = draws.data(),
                           .sums = sums.data(), .ids = ids.data()});
  return ids;
}

TEST_CASE("DrawSliceKernel then DrawPickKernel draw each row's token by the inverse CDF, as kernels::draw_row does (one slice or many, cut, edge rows)") {
  std::vector<std::vector<float>> cases = test::top_k_rows_cases();
  for (const std::size_t n : {1, 7, 2048, 2049, 5000}) {
    std::mt19937 gen(static_cast<unsigned>(n));  // test data only
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> row(n);
    for (float& l : row) l = normal(gen);
    cases.push_back(row);
  }
  const std::vector<double> us{0.0, 1e-12, 0.1, 0.25, 0.5, 0.618, 0.75, 0.9, 0.999, 1.0 - 0x1p-53};
  std::size_t draws_checked = 0, same_as_host = 0;
  for (const auto& row : cases) {
    if (row.empty() || row.size() > 10000) continue;
    for (const std::size_t width : {row.size(), (row.size() + 1) / 2}) {
      for (const float inv_t : {1.0f, 0.4f, 3.0f})
        for (const float min_weight : {std::numeric_limits<float>::denorm_min(), 0.05f, 0.9f}) {
          CAPTURE(row.size());
          CAPTURE(width);
          CAPTURE(inv_t);
          CAPTURE(min_weight);
          const auto stride = static_cast<std::int64_t>(row.size()) + 3;
          std::vector<float> x;        // [rows, stride]: the row, +inf past the cut, one row a u
          std::vector<kernels::RowDraw> draws;
          for (const double u : us) {
            x.insert(x.end(), row.begin(), row.end());
            x.resize(x.size() + 3, INFINITY);
            std::fill(x.end() - stride + static_cast<std::ptrdiff_t>(width), x.end(), INFINITY);
            draws.push_back({.inv_temperature = inv_t, .min_weight = min_weight, .u = u});
          }
          const std::vector<int> ids = device_draws(x, static_cast<std::int64_t>(width), stride, draws);
          kernels::DrawScratch scratch;
          for (std::size_t r = 0; r < draws.size(); ++r) {
            CAPTURE(draws[r].u);
            const auto cut = std::span<const float>(row).first(width);
            CHECK(test::inverse_cdf_pick(cut, draws[r], ids[r]));
            if (draws[r].u > 0.999) continue;  // u * total within rounding of the total: any of the last tokens weighing < ~1e-16 of it
            same_as_host += ids[r] == kernels::draw_row(cut, draws[r], scratch);
            ++draws_checked;
          }
        }
    }
  }
  MESSAGE(same_as_host, " of ", draws_checked, " draws are kernels::draw_row's token");
  CHECK(same_as_host == draws_checked);  // sums in another order differ only where u * total lies within ~1e-16 of a boundary
}

}  // namespace cuda_kernels_test

namespace cuda_kernels_test {

TEST_CASE("the draw kernels give the sampler reference's distribution: N stratified u put N p_i draws (+-2) on every token") {
  // reference_sample_distribution with temperature and min-p alone is what a draw over the whole row samples from
  std::vector<float> row(40);  // ties, one NaN and one -inf among them
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = 0.15f * static_cast<float>((i * 37) % 23);
  row[5] = NAN;
  row[9] = -INFINITY;
  for (const float min_p : {0.0f, 0.3f}) {
    CAPTURE(min_p);
    SamplingParams p;
    p.temperature = 0.8f;
    p.min_p = min_p;
    const std::vector<double> want = kylin::detail::reference_sample_distribution(row, {}, {}, p);
    constexpr int N = 1000;
    const auto stride = static_cast<std::int64_t>(row.size());
    std::vector<float> x;  // [N, stride]
    std::vector<kernels::RowDraw> draws;
    for (int j = 0; j < N; ++j) {
      x.insert(x.end(), row.begin(), row.end());
      draws.push_back({.inv_temperature = 1.0f / p.temperature, .min_weight = std::max(min_p, std::numeric_limits<float>::denorm_min()), .u = (j + 0.5) / N});
    }
    std::vector<int> count(row.size(), 0);
    for (int id : device_draws(x, stride, stride, draws)) ++count[static_cast<std::size_t>(id)];
    for (std::size_t i = 0; i < row.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(count[i] - N * want[i]) <= 2.0);
    }
  }
}

}  // namespace cuda_kernels_test

namespace cuda_kernels_test {

TEST_CASE("DrawSliceKernel with lows gives each slice's whole mass (min-p left out) and its lowest finite logit; 0 and +inf on rows with nothing to draw") {
  std::vector<std::vector<float>> cases = test::top_k_rows_cases();
  for (const std::size_t n : {7, 2048, 5000}) {
    std::mt19937 gen(static_cast<unsigned>(n));  // test data only
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> row(n);
    for (float& l : row) l = normal(gen);
    if (n == 5000) row[4100] = NAN, row[2] = -INFINITY, row[3000] = -300.0f;
    cases.push_back(row);
  }
  for (const auto& row : cases) {
    if (row.empty() || row.size() > 10000) continue;
    CAPTURE(row.size());
    for (const float inv_t : {1.0f, 0.4f}) {
      CAPTURE(inv_t);
      const auto width = static_cast<std::int64_t>(row.size());
      std::vector<float> x = row;  // [1, width]
      const kernels::RowDraw d{.inv_temperature = inv_t, .min_weight = 0.5f, .top_p = 0.9f};  // min-p must not count
      std::vector<int> top{kernels::argmax(row)};
      cuda::DrawSliceKernel k{.x = x.data(), .rows = 1, .width = width, .stride = width, .top = top.data(), .draws = &d, .sums = nullptr, .lows = nullptr};
      std::vector<double> sums(static_cast<std::size_t>(k.slices()), -1.0);
      std::vector<float> lows(static_cast<std::size_t>(k.slices()), -1.0f);
      k.sums = sums.data();
      k.lows = lows.data();
      run(k);
      const bool live = top[0] >= 0 && std::isfinite(row[static_cast<std::size_t>(top[0])]);
      for (std::int64_t s = 0; s < k.slices(); ++s) {
        CAPTURE(s);
        long double mass = 0;
        float low = INFINITY;
        for (std::int64_t i = s * 2048; i < std::min(width, (s + 1) * 2048); ++i) {
          const float l = row[static_cast<std::size_t>(i)];
          if (live) mass += kernels::scaled_weight(l, row[static_cast<std::size_t>(top[0])], inv_t);
          if (live && std::isfinite(l)) low = std::min(low, l);
        }
        // each weight within a few ulp of the host's (a compiler may contract the device path's products into FMAs)
        CHECK(std::abs(static_cast<long double>(sums[static_cast<std::size_t>(s)]) - mass) <= 1e-6L * std::max(mass, 1.0L));
        CHECK(lows[static_cast<std::size_t>(s)] == low);
      }
    }
  }
}

}  // namespace cuda_kernels_test
