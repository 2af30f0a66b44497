// Element-wise kernels and SIMD loads against oracles written here: silu_mul over sizes with tails
// and RMSNorm/RoPE against double-precision formulas, BF16/F16 widening and the F16 store against
// the core conversions, hadd_rows against exact sums and itself in every slot, sum_slots against
// hadd_rows and xsimd::hadd, argmax and top-k against sorting.
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

TEST_CASE("gelu_tanh and its reference match PyTorch's tanh-approximate GELU formula in double, tails and large |x| included") {
  for (std::int64_t n : {1, 7, 16, 33, 4304 + 3}) {
    CAPTURE(n);
    auto x = test::random_floats(n, 3, 6.f);
    if (n > 2) x[0] = -30.f, x[1] = 30.f, x[2] = 0.f;
    auto fast = x, ref = x;
    kernels::gelu_tanh(fast.data(), n);
    kernels::gelu_tanh_ref(ref.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x[i], expected = v * 0.5 * (1.0 + std::tanh(std::sqrt(2.0 / 3.141592653589793) * (v + 0.044715 * v * v * v)));
      CHECK(ref[i] == doctest::Approx(expected).epsilon(1e-7));
      // u in float, then a vector exp: e^-2u is off by |2u| times u's rounding (~1.5 ulp) plus the exp's few ulps
      // (4.1e-7 relative seen on NEON at |2u| = 3.5); the double oracle itself cancels in 1 + tanh for very
      // negative x (~1e-16 absolute)
      const double two_u = 2 * 0.7978845608028654 * std::abs(v + 0.044715 * v * v * v);
      CHECK(std::abs(fast[i] - expected) <= (two_u + 4) * 3e-7 * std::abs(expected) + 1e-12);
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

// Ties between neighbouring halves (and the floats either side of each), both signs, then a
// stride through every float, infinities and NaNs included: store_as against f32_to_f16.
TEST_CASE("store_as rounds a vector to F16 exactly like f32_to_f16: ties, subnormals, overflow, a sweep of all floats") {
  std::vector<float> xs;
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {
    const float a = f16_to_f32(static_cast<std::uint16_t>(h)), b = f16_to_f32(static_cast<std::uint16_t>(h + 1));
    const float mid = a + (b - a) / 2;  // exact: a half has 11 significant bits
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4099) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  xs.resize((xs.size() + kernels::lanes - 1) / kernels::lanes * kernels::lanes, 0.f);
  std::vector<kernels::f16_t> out(xs.size());
  for (std::size_t i = 0; i < xs.size(); i += kernels::lanes) kernels::store_as(out.data() + i, kernels::fbatch::load_unaligned(xs.data() + i));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::uint16_t want = f32_to_f16(xs[i]), got = out[i].bits;
    // any NaN stays a NaN (the hardware keeps payload bits that f32_to_f16 drops)
    const bool ok = xs[i] == xs[i] ? got == want : (got & 0x7C00u) == 0x7C00u && (got & 0x3FFu) != 0;
    if (!ok && wrong++ == 0) {
      CAPTURE(std::bit_cast<std::uint32_t>(xs[i]));
      CHECK(got == want);
    }
  }
  CHECK(wrong == 0);
}

// Values whose float sum depends on the order (a large element in each lane pair cancels only in
// some orders): hadd_rows must give a row the same bits in every slot, beside any other rows and
// beside zeros (attention scores a key the same whichever keys and query rows share its pass),
// within rounding of the exact sum.
TEST_CASE("hadd_rows sums each row within rounding, with the same bits in every slot whatever the other rows hold") {
  constexpr std::size_t L = kernels::lanes;
  const auto v = test::random_floats(static_cast<std::int64_t>(L * L * 20), 31, 1.f);
  for (std::size_t r = 0; r < 20; ++r) {
    kernels::fbatch rows[L];
    double exact[L];
    for (std::size_t b = 0; b < L; ++b) {
      alignas(64) float e[L];
      exact[b] = 0;
      for (std::size_t i = 0; i < L; ++i) {
        e[i] = v[(r * L + b) * L + i] * (i % 2 == b % 2 ? 1e7f : 1.f);
        exact[b] += e[i];
      }
      rows[b] = kernels::fbatch::load_aligned(e);
    }
    alignas(64) float all[L];
    kernels::hadd_rows(rows).store_aligned(all);
    for (std::size_t b = 0; b < L; ++b) {
      CAPTURE(r);
      CAPTURE(b);
      REQUIRE(std::abs(all[b] - exact[b]) <= 1e-6 * 1e7 * L);
      for (std::size_t slot = 0; slot < L; ++slot) {  // row b alone in `slot`, then among rotated rows
        kernels::fbatch alone[L], rotated[L];
        for (std::size_t i = 0; i < L; ++i) {
          alone[i] = kernels::fbatch(0.f);
          rotated[i] = rows[(i + L + b - slot) % L];
        }
        alone[slot] = rows[b];
        alignas(64) float a[L], t[L];
        kernels::hadd_rows(alone).store_aligned(a);
        kernels::hadd_rows(rotated).store_aligned(t);
        CAPTURE(slot);
        REQUIRE(std::bit_cast<std::uint32_t>(a[slot]) == std::bit_cast<std::uint32_t>(all[b]));
        REQUIRE(std::bit_cast<std::uint32_t>(t[slot]) == std::bit_cast<std::uint32_t>(all[b]));
      }
    }
  }
}

// sum_slots is hadd_rows on its side: the sum of row b laid down lane b of `lanes` vectors must be
// the bits hadd_rows and xsimd::hadd (exp_shift_sum's sum) give that row laid across one vector,
// with values whose sum depends on the order (attention's wide pass relies on it).
TEST_CASE("sum_slots gives lane b the bits hadd_rows and xsimd::hadd give row b") {
  if constexpr (!kernels::has_sum_slots) {
    MESSAGE("no sum_slots on this kernel set (hadd_rows is xsimd's here): nothing to compare");
    return;
  } else {
    constexpr std::size_t L = kernels::lanes;
    const auto v = test::random_floats(static_cast<std::int64_t>(L * L * 20), 37, 1.f);
    for (std::size_t r = 0; r < 20; ++r) {
      alignas(64) float e[L][L], down[L][L];  // e[b]: row b; down[i]: lane i of every row
      kernels::fbatch rows[L], slots[L];
      for (std::size_t b = 0; b < L; ++b)
        for (std::size_t i = 0; i < L; ++i) down[i][b] = e[b][i] = v[(r * L + b) * L + i] * (i % 3 == b % 3 ? 1e7f : 1.f);
      for (std::size_t i = 0; i < L; ++i) {
        rows[i] = kernels::fbatch::load_aligned(e[i]);
        slots[i] = kernels::fbatch::load_aligned(down[i]);
      }
      alignas(64) float across[L], sums[L];
      kernels::hadd_rows(rows).store_aligned(across);
      kernels::sum_slots(slots).store_aligned(sums);
      for (std::size_t b = 0; b < L; ++b) {
        CAPTURE(r);
        CAPTURE(b);
        REQUIRE(std::bit_cast<std::uint32_t>(sums[b]) == std::bit_cast<std::uint32_t>(across[b]));
        REQUIRE(std::bit_cast<std::uint32_t>(sums[b]) == std::bit_cast<std::uint32_t>(xsimd::hadd(rows[b])));
      }
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


TEST_CASE("top_k gives the k best logits best first (lower id on a tie, NaN never), empty slots past a short row, for every cut and k") {
  std::vector<kernels::RankedLogit> got;
  for (const auto& row : test::top_k_rows_cases()) {
    for (std::size_t width : {row.size(), row.size() / 2, row.size() > 0 ? row.size() - 1 : 0}) {
      const auto ranked = test::top_k_oracle(row, width, width + 3);  // every k's answer is a prefix of it
      const auto filled = static_cast<std::size_t>(std::count_if(ranked.begin(), ranked.end(), [](const auto& e) { return e.id >= 0; }));
      for (std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{16}, std::size_t{17}, std::size_t{40}, width, width + 3}) {
        if (k == 0 || k > ranked.size()) continue;
        CAPTURE(row.size());
        CAPTURE(width);
        CAPTURE(k);
        got.assign(k, {7.f, 7});
        CHECK(kernels::top_k(std::span<const float>(row).first(width), got) == std::min(k, filled));
        CHECK(std::equal(got.begin(), got.end(), ranked.begin()));
      }
    }
  }
}
