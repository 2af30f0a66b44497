// The FP8 widening kernel and its scalar reference against an oracle written here: every e4m3 code
// decoded with ldexp, times the block scale in float, rounded to BF16 by choosing the nearer of
// the two neighbouring BF16 values in double (ties to the even one).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kylin/kernels/fp8.hpp"

using namespace kylin;

namespace kernels_fp8_test {

// The BF16 rounding of p as float bits, or nothing for NaN (checked as NaN only).
std::uint32_t bf16_oracle(float p) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(p);
  if (std::isinf(p)) return u;
  const std::uint32_t down = u & 0xFFFF0000u, up = down + 0x10000u;  // |down| <= |p| <= |up|
  auto value = [](std::uint32_t bits) {  // an overflow to infinity rounds as if to 2^128
    const float f = std::bit_cast<float>(bits);
    return std::isinf(f) ? std::copysign(std::ldexp(1.0, 128), f) : static_cast<double>(f);
  };
  const double dd = std::abs(static_cast<double>(p) - value(down)), du = std::abs(value(up) - static_cast<double>(p));
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 0x10000u) ? up : down;  // a tie: the even BF16 mantissa
}

float e4m3_oracle(unsigned v) {
  const unsigned exp = (v >> 3) & 0xF, mant = v & 7;
  const double mag = exp == 0 ? std::ldexp(mant, -9) : std::ldexp(8 + mant, static_cast<int>(exp) - 10);
  return static_cast<float>((v & 0x80) ? -mag : mag);
}

}  // namespace kernels_fp8_test

TEST_CASE("widen_fp8 and widen_fp8_ref give the BF16 rounding of every e4m3 code times the scale, lengths with tails") {
  using namespace kernels_fp8_test;
  std::vector<std::uint8_t> q(256 * 3 + 7);  // every code, thrice, then a tail
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::uint8_t>(i * 7 % 256);
  for (float s : {1.f, -3.25f, 1.7e-3f, 0.3333333f, 1e-30f, 1e-42f, 3e38f, 0.f, -0.f}) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{15}, std::int64_t{128}, static_cast<std::int64_t>(q.size())}) {
      CAPTURE(s);
      CAPTURE(n);
      std::vector<float> got(static_cast<std::size_t>(n)), ref(static_cast<std::size_t>(n));
      kernels::widen_fp8(q.data(), s, n, got.data());
      kernels::widen_fp8_ref(q.data(), s, n, ref.data());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const unsigned v = q[i];
        CAPTURE(v);
        const std::uint32_t g = std::bit_cast<std::uint32_t>(got[i]), r = std::bit_cast<std::uint32_t>(ref[i]);
        CHECK(g == r);  // bit for bit, NaNs included
        const float p = e4m3_oracle(v) * s;
        if ((v & 0x7F) == 0x7F || std::isnan(p)) CHECK(std::isnan(got[i]));
        else CHECK(g == bf16_oracle(p));
      }
    }
  }
}
