// Element-wise kernels and SIMD loads against oracles written here: silu_mul over sizes with tails
// and RMSNorm/RoPE against double-precision formulas, BF16/F16 widening against the core conversions.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/ops.hpp"

using namespace kylin;

TEST_CASE("silu_mul matches g / (1 + exp(-g)) * u in double for sizes with and without a vector tail") {
  for (std::int64_t n : {1, 7, 16, 33, 1000, 3072 + 5}) {
    CAPTURE(n);
    const auto gate = test::random_floats(n, 1, 4.f);
    const auto up = test::random_floats(n, 2);
    auto out = gate;
    kernels::silu_mul(out.data(), up.data(), n);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const double g = gate[i], expected = g / (1.0 + std::exp(-g)) * up[i];
      CHECK(out[i] == doctest::Approx(expected).epsilon(1e-6));
    }
  }
}

TEST_CASE("load_as_float widens BF16 and F16 vectors exactly like the scalar conversions") {
  std::vector<kernels::bf16_t> b(kernels::lanes);
  std::vector<kernels::f16_t> h(kernels::lanes);
  for (std::uint32_t base = 0; base < 65536; base += static_cast<std::uint32_t>(kernels::lanes)) {
    for (std::size_t i = 0; i < kernels::lanes; ++i) {
      b[i].bits = static_cast<std::uint16_t>(base + i);
      h[i].bits = static_cast<std::uint16_t>(base + i);
    }
    alignas(64) float wb[kernels::lanes], wh[kernels::lanes];
    kernels::load_as_float(b.data()).store_aligned(wb);
    kernels::load_as_float(h.data()).store_aligned(wh);
    for (std::size_t i = 0; i < kernels::lanes; ++i) {
      const float eb = bf16_to_f32(b[i].bits), eh = f16_to_f32(h[i].bits);
      if (eb == eb) REQUIRE(std::bit_cast<std::uint32_t>(wb[i]) == std::bit_cast<std::uint32_t>(eb));
      else REQUIRE(wb[i] != wb[i]);
      if (eh == eh) REQUIRE(std::bit_cast<std::uint32_t>(wh[i]) == std::bit_cast<std::uint32_t>(eh));
      else REQUIRE(wh[i] != wh[i]);
    }
  }
}

TEST_CASE("silu_mul gives each element the same bits wherever it sits (vector body or tail), so batch rows equal rows alone") {
  const auto gate = test::random_floats(100, 7, 4.f), up = test::random_floats(100, 8);
  std::vector<float> whole = gate;
  kernels::silu_mul(whole.data(), up.data(), 100);
  for (std::int64_t off : {1, 3, 5, 17}) {
    CAPTURE(off);
    std::vector<float> part(gate.begin() + off, gate.end());
    kernels::silu_mul(part.data(), up.data() + off, 100 - off);
    for (std::int64_t i = 0; i < 100 - off; ++i) REQUIRE(part[static_cast<std::size_t>(i)] == whole[static_cast<std::size_t>(i + off)]);
  }
}

TEST_CASE("rms_norm matches the double-precision formula for BF16 and F32 weights, several rows") {
  const std::int64_t rows = 3, dim = 37;
  for (DType dt : {DType::bf16, DType::f32}) {
    const auto w = test::random_weights(dt, 1, dim, 3, 1.f);
    const auto x = test::random_floats(rows * dim, 4, 5.f);
    std::vector<float> out(x.size());
    kernels::rms_norm(x.data(), w.ref(), out.data(), rows, 1e-6);
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (std::int64_t i = 0; i < dim; ++i)
        CHECK(out[r * dim + i] == doctest::Approx(x[r * dim + i] * inv * test::weight_value(w, i)).epsilon(1e-5));
    }
  }
}

TEST_CASE("rms_norm keeps eps inside the square root: rows whose mean square is near, below or far below eps") {
  // x / sqrt(mean(x^2) + eps), as transformers' Qwen3RMSNorm: at mean squares of 1e-8 to 1e-6
  // (eps 1e-6) eps decides the scale, so eps outside the root or a missing eps is off by 2x-1000x.
  const std::int64_t dim = 64;
  const auto w = test::random_weights(DType::bf16, 1, dim, 3, 1.f);
  for (float scale : {1e-3f, 1e-4f, 1e-5f, 0.f}) {
    CAPTURE(scale);
    const auto x = scale > 0 ? test::random_floats(dim, 7, scale) : std::vector<float>(dim, 0.f);
    std::vector<float> out(x.size());
    kernels::rms_norm(x.data(), w.ref(), out.data(), 1, 1e-6);
    double ss = 0;
    for (std::int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (std::int64_t i = 0; i < dim; ++i) {
      const double want = x[i] * inv * test::weight_value(w, i);
      CHECK(std::isfinite(out[i]));
      CHECK(std::abs(out[i] - want) <= 1e-5 * std::abs(want));
    }
  }
}

TEST_CASE("rope rotates each (i, i + d/2) pair by its angle, for every head and token") {
  const std::int64_t T = 2, H = 3, D = 8, half = D / 2;
  auto x = test::random_floats(T * H * D, 5);
  const auto orig = x;
  std::vector<float> c(T * half), s(T * half);
  for (std::int64_t i = 0; i < T * half; ++i) {
    c[i] = static_cast<float>(std::cos(0.3 * (i + 1)));
    s[i] = static_cast<float>(std::sin(0.3 * (i + 1)));
  }
  kernels::rope(x.data(), {T, H, D}, {c.data(), s.data()});
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < half; ++i) {
        const std::int64_t o = (t * H + h) * D;
        const double a = orig[o + i], b = orig[o + i + half], cc = c[t * half + i], ss = s[t * half + i];
        CHECK(x[o + i] == doctest::Approx(a * cc - b * ss).epsilon(1e-6));
        CHECK(x[o + i + half] == doctest::Approx(b * cc + a * ss).epsilon(1e-6));
      }
}

TEST_CASE("argmax picks the lowest id among the highest logits, never NaN, -1 without a logit above -inf, for every cut of a row") {
  for (const auto& row : test::argmax_rows_cases()) {
    for (std::size_t width : {row.size(), row.size() / 2, row.size() > 0 ? row.size() - 1 : 0}) {
      CAPTURE(row.size());
      CAPTURE(width);
      CHECK(kernels::argmax(std::span<const float>(row).first(width)) == test::argmax_oracle(row, width));
    }
  }
}

