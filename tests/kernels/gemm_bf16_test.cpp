// The opt-in BF16 prefill GEMM (kernels/gemm_bf16.hpp): its rounding and dot-product steps against
// an independent rounding oracle and, where the CPU has AVX512_BF16, against the instructions
// themselves; the kernel's products bit for bit against gemm_bf16_ref, and that reference within
// f32 rounding of a double product of the rounded operands.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/gemm_bf16.hpp"
#include "kylin/kernels/matmul.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace kylin;

namespace gemm_bf16_test {

// The BF16 value nearest x by distances in double, ties to the even significand: for finite
// normal x whose neighbours are finite.
std::uint16_t nearest_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  const double d_down = std::abs(static_cast<double>(std::bit_cast<float>(down)) - x);
  const double d_up = std::abs(static_cast<double>(std::bit_cast<float>(up)) - x);
  if (d_down != d_up) return static_cast<std::uint16_t>((d_down < d_up ? down : up) >> 16);
  return static_cast<std::uint16_t>(((down >> 16) & 1u) ? up >> 16 : down >> 16);
}

std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.f, -0.f, 1.f, -1.f, 1e-40f, -1e-40f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), inf, -inf, std::nanf(""),
          std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x7f7f8000u)};
}

}  // namespace gemm_bf16_test

TEST_CASE("round_to_bf16 rounds to nearest even (independent oracle); zeros and denormals to signed zero, NaN stays NaN") {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    const auto e = std::bit_cast<std::uint32_t>(x) & 0x7f800000u;
    if (e == 0 || e >= 0x7f000000u) continue;  // normal values with finite neighbours
    CAPTURE(x);
    REQUIRE(kernels::round_to_bf16(x).bits == gemm_bf16_test::nearest_bf16(x));
  }
  CHECK(kernels::round_to_bf16(std::bit_cast<float>(0x3f808000u)).bits == 0x3f80);  // a tie: to even
  CHECK(kernels::round_to_bf16(std::bit_cast<float>(0x3f818000u)).bits == 0x3f82);
  CHECK(kernels::round_to_bf16(1e-40f).bits == 0x0000);
  CHECK(kernels::round_to_bf16(-1e-40f).bits == 0x8000);
  CHECK(kernels::round_to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(kernels::round_to_bf16(std::bit_cast<float>(0x7f7fffffu)).bits == 0x7f80);  // past the largest BF16: infinity
  CHECK(std::isnan(to_float(kernels::round_to_bf16(std::nanf("")))));
}

TEST_CASE("bf16_dot_step is one rounding of acc + a * b, with denormal inputs and results flushed to zero") {
  CHECK(kernels::bf16_dot_step(1.f, 3.f, 0.5f) == 2.5f);
  CHECK(kernels::bf16_dot_step(1e-40f, 0.f, 0.f) == 0.f);                  // a denormal accumulator reads as zero
  CHECK(kernels::bf16_dot_step(0.f, 1e-20f, 1e-20f) == 0.f);               // a denormal result is flushed
  CHECK(std::signbit(kernels::bf16_dot_step(0.f, -1e-20f, 1e-20f)));      // to a zero of its sign
  const float a = std::bit_cast<float>(0x3f810000u), b = std::bit_cast<float>(0x3f830000u);  // 8-bit significands: exact product
  CHECK(kernels::bf16_dot_step(1.f, a, b) == static_cast<float>(1.0 + static_cast<double>(a) * b));
}

#if defined(KYLIN_BF16_DOT)
namespace gemm_bf16_test {

KYLIN_BF16_TARGET void hardware_round(const float* x, std::uint16_t* out) {
  const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(x));
  std::memcpy(out, &r, 32);
}

KYLIN_BF16_TARGET void hardware_dot(const float* acc, const std::uint16_t* a, const std::uint16_t* b, float* out) {
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a), (__m512bh)_mm512_loadu_si512(b)));
}

}  // namespace gemm_bf16_test

TEST_CASE("where the CPU has AVX512_BF16: round_to_bf16 and bf16_dot_step give the instructions' bits") {
  if (!kernels::bf16_gemm_supported()) {
    MESSAGE("not run: this CPU has no AVX512_BF16");
    return;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto values = gemm_bf16_test::special_floats();
  for (int i = 0; i < 4096; ++i) values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (std::size_t i = 0; i + 16 <= values.size(); i += 16) {
    std::uint16_t got[16];
    gemm_bf16_test::hardware_round(values.data() + i, got);
    for (std::size_t j = 0; j < 16; ++j) {
      CAPTURE(values[i + j]);
      CHECK(got[j] == kernels::round_to_bf16(values[i + j]).bits);
    }
  }
  const auto scaled = [&](int spread) { return nd(rng) * std::ldexp(1.f, static_cast<int>(rng() % (2 * spread)) - spread); };
  for (int it = 0; it < 20000; ++it) {
    std::uint16_t a[32], b[32];
    float acc[16], got[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = kernels::round_to_bf16(it % 40 == 0 ? std::ldexp(nd(rng), -130) : scaled(20)).bits;  // some denormal inputs
      b[i] = kernels::round_to_bf16(scaled(20)).bits;
    }
    for (float& c : acc) c = it % 50 == 0 ? std::ldexp(nd(rng), -135) : scaled(20);
    gemm_bf16_test::hardware_dot(acc, a, b, got);
    for (int j = 0; j < 16; ++j) {
      const float odd = kernels::bf16_dot_step(acc[j], to_float(bf16_t{a[2 * j + 1]}), to_float(bf16_t{b[2 * j + 1]}));
      REQUIRE(std::bit_cast<std::uint32_t>(got[j]) == std::bit_cast<std::uint32_t>(kernels::bf16_dot_step(odd, to_float(bf16_t{a[2 * j]}), to_float(bf16_t{b[2 * j]}))));
    }
  }
}
#endif

TEST_CASE("the BF16 prefill GEMM equals gemm_bf16_ref bit for bit: both layouts, partial tiles, odd columns, bias") {
  if (!kernels::bf16_gemm_supported()) {
    MESSAGE("not run: this kernel set or CPU has no BF16 GEMM");
    return;
  }
  for (std::int64_t cols : {64, 67, 160})
    for (std::int64_t rows : {45, 96})
      for (std::int64_t T : {12, 20, 101, 130})  // from one token panel on (over panels too)
        for (kernels::Layout layout : test::both_layouts)
          for (bool with_bias : {false, true}) {
            CAPTURE(cols);
            CAPTURE(rows);
            CAPTURE(T);
            CAPTURE(with_bias);
            const auto w = test::random_weights(DType::bf16, rows, cols, static_cast<unsigned>(cols + rows));
            const auto x = test::random_floats(T * cols, static_cast<unsigned>(T));
            const auto bias = test::random_floats(rows, 3);
            std::vector<float> got(static_cast<std::size_t>(T * rows)), want(got.size());
            ThreadPool pool(2);
            kernels::MatmulScratch scratch(pool.size(), cols, T);
            const float* b = with_bias ? bias.data() : nullptr;
            kernels::matmul(x.data(), w.ref(layout), b, got.data(), kernels::chunk_plan(T), pool, scratch, kernels::PrefillActivations::bf16);
            kernels::gemm_bf16_ref(x.data(), w.ref(layout), b, want.data(), T);
            REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          }
}

TEST_CASE("under bf16, fewer GEMM rows than a token panel, decode rows and non-BF16 weights keep the exact kernels' bits") {
  if (!kernels::bf16_gemm_supported()) {
    MESSAGE("not run: this kernel set or CPU has no BF16 GEMM");
    return;
  }
  const std::int64_t cols = 96, rows = 40;
  for (DType dtype : {DType::bf16, DType::f16})
    for (kernels::RowPlan plan : {kernels::RowPlan{7, 0}, kernels::RowPlan{1, 1}, kernels::RowPlan{30, 30}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(plan.rows);
      const auto w = test::random_weights(dtype, rows, cols, 9);
      const auto x = test::random_floats(plan.rows * cols, 10);
      std::vector<float> got(static_cast<std::size_t>(plan.rows * rows)), want(got.size());
      ThreadPool pool(2);
      kernels::MatmulScratch scratch(pool.size(), cols, plan.rows);
      kernels::matmul(x.data(), w.ref(kernels::Layout::panels), nullptr, got.data(), plan, pool, scratch, kernels::PrefillActivations::bf16);
      kernels::matmul(x.data(), w.ref(kernels::Layout::panels), nullptr, want.data(), plan, pool, scratch);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("matmul_each under bf16: products of a token panel's rows or more equal gemm_bf16_ref, the others the exact kernel, bit for bit") {
  if (!kernels::bf16_gemm_supported()) {
    MESSAGE("not run: this kernel set or CPU has no BF16 GEMM");
    return;
  }
  const std::int64_t cols = 64;
  const std::int64_t counts[] = {5, 12, 30, 1};  // rows of each expert; gate and up share an input
  for (kernels::Layout layout : test::both_layouts) {
    std::vector<test::Weights> weights;
    std::vector<std::vector<float>> inputs, outs;
    for (std::size_t e = 0; e < std::size(counts); ++e) {
      inputs.push_back(test::random_floats(counts[e] * cols, static_cast<unsigned>(20 + e)));
      for (int g = 0; g < 2; ++g) {
        weights.push_back(test::random_weights(DType::bf16, 45, cols, static_cast<unsigned>(40 + 2 * e + g)));
        outs.emplace_back(static_cast<std::size_t>(counts[e] * 45));
      }
    }
    std::vector<kernels::DotProduct> products;
    for (std::size_t i = 0; i < weights.size(); ++i)
      products.push_back({inputs[i / 2].data(), counts[i / 2], {weights[i].ref(layout), nullptr, outs[i].data()}});
    ThreadPool pool(2);
    kernels::MatmulScratch scratch(pool.size(), cols, 48, products.size());
    kernels::matmul_each(products, pool, scratch, kernels::PrefillActivations::bf16);
    for (std::size_t i = 0; i < products.size(); ++i) {
      const std::int64_t n = counts[i / 2];
      CAPTURE(n);
      std::vector<float> want(outs[i].size());
      if (n >= kernels::detail::gemm_mr) {
        kernels::gemm_bf16_ref(inputs[i / 2].data(), weights[i].ref(layout), nullptr, want.data(), n);
      } else {
        const kernels::DotProduct one{inputs[i / 2].data(), n, {weights[i].ref(layout), nullptr, want.data()}};
        kernels::matmul_each(std::span(&one, 1), pool, scratch);
      }
      CHECK(std::memcmp(outs[i].data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("gemm_bf16_ref is the product of the BF16-rounded activations to f32 rounding, ~1e-2 from the exact one") {
  const std::int64_t T = 7, rows = 40, cols = 1024;
  const auto w = test::random_weights(DType::bf16, rows, cols, 5);
  const auto x = test::random_floats(T * cols, 6);
  std::vector<float> rounded(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) rounded[i] = to_float(kernels::round_to_bf16(x[i]));
  std::vector<float> got(static_cast<std::size_t>(T * rows));
  kernels::gemm_bf16_ref(x.data(), w.ref(), nullptr, got.data(), T);
  CHECK(test::max_rel_error(got, test::matmul_oracle(rounded.data(), w, nullptr, T)) < 1e-5);
  const double off = test::max_rel_error(got, test::matmul_oracle(x.data(), w, nullptr, T));
  CHECK(off > 1e-4);  // the rounding took effect
  CHECK(off < 2e-2);
}
