// The order in which the quantized kernels sum (quant_lanes_ref, quant.hpp): the reference against
// the double oracle of the quantized values (quant_helpers.hpp), and every output of the decode
// kernel (each SIMD kernel set) and of the int8 GEMM (builds with VNNI, quant_gemm.hpp) equal to
// it bit for bit, so that a token gets the same numbers prefilled or decoded.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "quant_helpers.hpp"

#include <cstring>

using namespace kylin;

namespace quant_gemm_test {

using test::QWeights;

// Weights with a row of equal values (every value quantizes to +-127, or Q4_0's -8) beside
// random ones.
template <kernels::QuantView W>
QWeights<W> weights(std::int64_t rows, std::int64_t cols, unsigned seed) {
  auto w = test::random_floats(rows * cols, seed, 0.5f);
  std::fill_n(w.begin(), cols, 1.f);
  return test::quantize<W>(w, rows, cols);
}

// Activation rows with what the kernels treat apart: zero values (Q8_0 weights take x's sign), a
// zero block, and a block of equal negative values (every value -127: the largest lane sums).
std::vector<float> activations(std::int64_t T, std::int64_t cols, unsigned seed) {
  auto x = test::random_floats(T * cols, seed);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] = 0.f;
  std::fill_n(x.begin(), 32, -2.f);
  if (cols >= 64) std::fill_n(x.begin() + 32, 32, 0.f);
  return x;
}

template <kernels::QuantView W>
std::vector<float> lanes_ref(const std::vector<float>& x, const QWeights<W>& w, const float* bias, std::int64_t T) {
  std::vector<std::int8_t> q(static_cast<std::size_t>(T * w.cols));
  std::vector<float> s(static_cast<std::size_t>(T * w.cols / 32));
  const kernels::Q8Rows xq{q.data(), s.data(), w.cols};
  kernels::quantize_rows_q8(x.data(), T, w.cols, xq);
  std::vector<float> y(static_cast<std::size_t>(T * w.rows));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) y[static_cast<std::size_t>(t * w.rows + r)] = kernels::quant_lanes_ref(w.view(), r, xq, t, bias);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// rows x cols: 1, 2, 8, 9, 11 and 33 blocks (whole groups of 8 and tails; Q4_0's unpaired last
// block), weight rows that fill the GEMM's 8- or 16-row panels and ones that leave part of one.
constexpr std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 32}, {17, 64}, {33, 256}, {40, 288}, {16, 352}, {70, 1056}};

TEST_CASE_TEMPLATE("quant_lanes_ref, the kernels' order of sums, is within float rounding of the double oracle of the quantized values", W,
                   kernels::Q8View, kernels::Q4View) {
  for (const auto& [rows, cols] : shapes) {
    const std::int64_t T = 3;
    const auto w = weights<W>(rows, cols, static_cast<unsigned>(rows + cols));
    const auto x = activations(T, cols, 5);
    const auto bias = test::random_floats(rows, 9);
    CHECK(test::max_rel_error(lanes_ref(x, w, bias.data(), T), test::quant_oracle(x.data(), w, bias.data(), T)) <= 1e-5);
  }
}

TEST_CASE_TEMPLATE("every quantized output is quant_lanes_ref's bit for bit: decode rows in every tile, prefill rows too where the int8 GEMM runs (VNNI)",
                   W, kernels::Q8View, kernels::Q4View) {
  MESSAGE("kernel set: ", std::string(kernels::simd_arch_name()) +
                              (!kernels::simd_enabled ? "" : kernels::int8_vnni ? " (prefill rows: int8 GEMM)" : " (prefill rows: f32 GEMM)"));
  for (const auto& [rows, cols] : shapes)
    for (std::int64_t T : {1, 2, 3, 13, 16, 18, 24, 26})  // with VNNI, 16 rows or more take the int8 GEMM (Q4_0 with AVX-512: 24)
      for (int threads : {1, 2}) {
        const std::int64_t n = rows, k = cols;  // named: clang 14 cannot capture structured bindings
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(T);
        CAPTURE(threads);
        const auto w = weights<W>(n, k, static_cast<unsigned>(n * k));
        const auto x = activations(T, k, static_cast<unsigned>(T));
        const auto bias = test::random_floats(n, 9);
        const float* b = threads == 2 ? bias.data() : nullptr;
        const auto ref = lanes_ref(x, w, b, T);
        ThreadPool pool(threads);
        kernels::MatmulScratch scratch(pool.size(), k, T);
        for (std::int64_t dot : {T, std::int64_t{0}, T / 2}) {
          CAPTURE(dot);
          std::vector<float> y(ref.size(), -1.f);
          kernels::matmul(x.data(), w.ref(), b, y.data(), {T, dot}, pool, scratch);
          const bool exact = dot == T ? kernels::simd_enabled : kernels::int8_vnni;  // else the f32 GEMM or the double matmul_ref
          if (exact) CHECK(same_bits(y, ref));
          CHECK(test::max_rel_error(y, ref) <= 1e-5);
        }
      }
}

// An MoE pass's experts (matmul_each): products with inputs of their own, a pair sharing one
// (gate and up), rows few (the decode kernel) and many (with VNNI the int8 GEMM inside the same
// pass), weight rows that leave a partial panel: every output quant_lanes_ref's bits.
TEST_CASE_TEMPLATE("matmul_each: every product's outputs are quant_lanes_ref's bit for bit, few rows or many (the int8 GEMM with VNNI)", W,
                   kernels::Q8View, kernels::Q4View) {
  struct Part {
    std::int64_t rows, cols, n;
    bool shares;  // reads the previous product's input
  };
  const Part parts[] = {{70, 1056, 13, false}, {40, 1056, 13, true}, {33, 256, 2, false}, {48, 288, 18, false}, {17, 64, 1, false}};
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    std::vector<QWeights<W>> w;
    std::vector<std::vector<float>> x, y, ref, bias;
    std::int64_t rows = 0, cols = 0;
    for (const Part& p : parts) {
      w.push_back(weights<W>(p.rows, p.cols, static_cast<unsigned>(p.rows * p.cols)));
      x.push_back(p.shares ? x.back() : activations(p.n, p.cols, static_cast<unsigned>(p.n + p.rows)));
      bias.push_back(test::random_floats(p.rows, 9));
      y.emplace_back(static_cast<std::size_t>(p.n * p.rows), -1.f);
      rows += p.n, cols = std::max(cols, p.cols);
    }
    std::vector<kernels::DotProduct> products;
    for (std::size_t i = 0; i < std::size(parts); ++i) {
      const float* b = i % 2 ? bias[i].data() : nullptr;
      products.push_back({i > 0 && parts[i].shares ? products.back().x : x[i].data(), parts[i].n, {w[i].ref(), b, y[i].data()}});
      ref.push_back(lanes_ref(x[i], w[i], b, parts[i].n));
    }
    ThreadPool pool(threads);
    kernels::MatmulScratch scratch(pool.size(), cols, rows, products.size());
    kernels::matmul_each(products, pool, scratch);
    for (std::size_t i = 0; i < std::size(parts); ++i) {
      CAPTURE(i);
      if (kernels::simd_enabled) CHECK(same_bits(y[i], ref[i]));
      CHECK(test::max_rel_error(y[i], ref[i]) <= 1e-5);
    }
  }
}

}  // namespace quant_gemm_test
