// BF16/F16 <-> F32 conversions against an independent double-precision reference: widening is
// exact for all 65536 bit patterns, narrowing rounds to nearest even.
#include "kylin/core/dtype.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace {

// Reference decoders written from the IEEE formulas, not from bit tricks.
double ref_f16_value(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  double v;
  if (exp == 0x1F) v = mant ? std::nan("") : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, -24);
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

double ref_bf16_value(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xFF, mant = h & 0x7F;
  double v;
  if (exp == 0xFF) v = mant ? std::nan("") : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, -133);
  else v = std::ldexp(128 + mant, exp - 134);
  return sign ? -v : v;
}

// Round-to-nearest-even narrowing in double arithmetic: `mant_bits` stored mantissa bits,
// `min_exp` the exponent of the smallest normal, `max_exp` of the largest finite.
std::uint16_t ref_narrow(float f, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const std::uint16_t sign = std::signbit(f) ? std::uint16_t(1u << 15) : 0;
  const std::uint16_t inf = static_cast<std::uint16_t>(sign | (((1u << exp_bits) - 1) << mant_bits));
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return inf;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;             // a = m' * 2^e, m' in [1, 2)
  if (a == 0) return sign;
  const int min_exp = 1 - bias;
  const int q_exp = std::max(e, min_exp) - mant_bits;  // exponent of one unit in the last place
  double units = std::nearbyint(std::ldexp(a, -q_exp));  // FE_TONEAREST: ties to even
  int biased = std::max(e, min_exp) + bias;
  if (e < min_exp) biased = 0;  // subnormal: units already count 2^(min_exp - mant_bits)
  std::uint32_t bits;
  if (biased == 0) {
    bits = static_cast<std::uint32_t>(units);  // may round up to the smallest normal: still correct
  } else {
    if (units >= std::ldexp(1.0, mant_bits + 1)) {  // rounded up to the next binade
      units /= 2;
      ++biased;
    }
    if (biased >= (1 << exp_bits) - 1) return inf;
    bits = (static_cast<std::uint32_t>(biased) << mant_bits) | (static_cast<std::uint32_t>(units) & ((1u << mant_bits) - 1));
  }
  return static_cast<std::uint16_t>(sign | bits);
}

bool is_f16_nan(std::uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
bool is_bf16_nan(std::uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F); }

// Every 4099th float bit pattern (a prime stride, so every exponent and many mantissas), plus
// the float halfway between each pair of adjacent 16-bit values, which is where rounding is decided.
template <class Fn>
void for_sample_floats(Fn&& fn) {
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) fn(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
}

}  // namespace

TEST_CASE("f16_to_f32 is exact for all 65536 F16 bit patterns") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float got = kylin::f16_to_f32(static_cast<std::uint16_t>(h));
    const double want = ref_f16_value(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      FAIL_CHECK("f16 " << h << ": got " << got << " want " << want);
    }
  }
}

TEST_CASE("bf16_to_f32 is exact for all 65536 BF16 bit patterns") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float got = kylin::bf16_to_f32(static_cast<std::uint16_t>(h));
    const double want = ref_bf16_value(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      FAIL_CHECK("bf16 " << h << ": got " << got << " want " << want);
    }
  }
}

TEST_CASE("narrowing a widened value gives back the same bits for all 65536 patterns (NaN stays NaN)") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    if (is_f16_nan(b)) {
      CHECK(is_f16_nan(kylin::f32_to_f16(kylin::f16_to_f32(b))));
    } else if (kylin::f32_to_f16(kylin::f16_to_f32(b)) != b) {
      FAIL_CHECK("f16 round trip broke " << h);
    }
    if (is_bf16_nan(b)) {
      CHECK(is_bf16_nan(kylin::f32_to_bf16(kylin::bf16_to_f32(b))));
    } else if (kylin::f32_to_bf16(kylin::bf16_to_f32(b)) != b) {
      FAIL_CHECK("bf16 round trip broke " << h);
    }
  }
}

TEST_CASE("f32_to_f16 rounds to nearest even like the reference, at every halfway point and on a float sweep") {
  int failures = 0;
  auto check = [&](float f) {
    if (std::isnan(f)) {
      if (!is_f16_nan(kylin::f32_to_f16(f))) ++failures;
      return;
    }
    const auto got = kylin::f32_to_f16(f), want = ref_narrow(f, 10, 5);
    if (got != want && failures++ < 10) FAIL_CHECK("f32 " << std::bit_cast<std::uint32_t>(f) << " -> " << got << " want " << want);
  };
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {  // halfway between h and h+1, and its neighbours
    const double mid = (ref_f16_value(static_cast<std::uint16_t>(h)) + ref_f16_value(static_cast<std::uint16_t>(h + 1))) / 2;
    const float m = static_cast<float>(mid);  // exact: a half-ulp of f16 fits in float
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) {
      check(f);
      check(-f);
    }
  }
  for_sample_floats(check);
  CHECK(failures == 0);
  CHECK(kylin::f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(kylin::f32_to_f16(65520.0f) == 0x7C00);  // the halfway point to 65536 rounds to even: inf
  CHECK(kylin::f32_to_f16(-1e9f) == 0xFC00);
}

TEST_CASE("f32_to_bf16 rounds to nearest even like the reference, at every halfway point and on a float sweep") {
  int failures = 0;
  auto check = [&](float f) {
    if (std::isnan(f)) {
      if (!is_bf16_nan(kylin::f32_to_bf16(f))) ++failures;
      return;
    }
    const auto got = kylin::f32_to_bf16(f), want = ref_narrow(f, 7, 8);
    if (got != want && failures++ < 10) FAIL_CHECK("f32 " << std::bit_cast<std::uint32_t>(f) << " -> " << got << " want " << want);
  };
  for (std::uint32_t h = 0; h < 0x7F80; ++h) {
    const std::uint32_t mid_bits = (h << 16) | 0x8000u;  // exactly halfway to h+1
    for (std::uint32_t bits : {mid_bits, mid_bits - 1, mid_bits + 1}) {
      check(std::bit_cast<float>(bits));
      check(std::bit_cast<float>(bits | 0x80000000u));
    }
  }
  for_sample_floats(check);
  CHECK(failures == 0);
}

TEST_CASE("the dtype table names and sizes match the safetensors spelling; Q8_0 is not a file dtype") {
  CHECK(kylin::parse_dtype("BF16") == kylin::DType::bf16);
  CHECK(kylin::parse_dtype("F8_E5M2") == kylin::DType::f8_e5m2);
  CHECK_FALSE(kylin::parse_dtype("bf16").has_value());  // case matters
  for (const auto& e : kylin::dtype_table) {
    CHECK(kylin::info(e.dtype).name == e.name);
    if (e.size > 0) CHECK(kylin::parse_dtype(e.name) == e.dtype);
  }
  // kylin's own block format (weights quantized at load) is never read from a file's header
  CHECK_FALSE(kylin::parse_dtype("Q8_0").has_value());
  CHECK_FALSE(kylin::info(kylin::DType::q8_0).runnable);
  CHECK(kylin::dtype_size(kylin::DType::f64) == 8);
  CHECK(kylin::info(kylin::DType::f16).runnable);
  CHECK_FALSE(kylin::info(kylin::DType::i8).runnable);
}
