// Element types of checkpoint tensors, exact scalar conversions of BF16/F16 to float, and the one
// dtype dispatch (visit_dtype). Only BF16, F16 and F32 are runnable; the others are parsed so a
// file can be inspected and an unsupported tensor reported by name.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "kylin/core/error.hpp"

namespace kylin {

enum class DType : std::uint8_t { bf16, f16, f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, boolean, f8_e4m3, f8_e5m2, q8_0, q4_0 };

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // as safetensors spells it
  std::size_t size;       // bytes per element (0: kylin's own block format, never in a file's header)
  bool runnable;          // the forward pass has kernels for it
};

inline constexpr DTypeInfo dtype_table[] = {
    {DType::bf16, "BF16", 2, true},   {DType::f16, "F16", 2, true},        {DType::f32, "F32", 4, true},
    {DType::f64, "F64", 8, false},    {DType::i8, "I8", 1, false},         {DType::u8, "U8", 1, false},
    {DType::i16, "I16", 2, false},    {DType::u16, "U16", 2, false},       {DType::i32, "I32", 4, false},
    {DType::u32, "U32", 4, false},    {DType::i64, "I64", 8, false},       {DType::u64, "U64", 8, false},
    {DType::boolean, "BOOL", 1, false}, {DType::f8_e4m3, "F8_E4M3", 1, false}, {DType::f8_e5m2, "F8_E5M2", 1, false},
    {DType::q8_0, "Q8_0", 0, false},  // weights quantized at load (kernels/quant.hpp)
    {DType::q4_0, "Q4_0", 0, false},
};

constexpr const DTypeInfo& info(DType d) { return dtype_table[static_cast<std::size_t>(d)]; }
constexpr std::size_t dtype_size(DType d) { return info(d).size; }
constexpr std::string_view dtype_name(DType d) { return info(d).name; }

constexpr std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : dtype_table)
    if (entry.name == name && entry.size > 0) return entry.dtype;
  return std::nullopt;
}

// BF16 is the top half of an IEEE float, so widening is a shift and is exact.
inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// Round-to-nearest-even, as torch does when casting float to bfloat16; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// float8_e4m3fn -> float, exact: 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinities,
// S.1111.111 is NaN, exponent 0 is subnormal (m/8 * 2^-6).
inline float f8_e4m3_to_f32(std::uint8_t v) {
  const int exp = (v >> 3) & 0xF, mant = v & 0x7;
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  if (exp == 0xF && mant == 0x7) return std::bit_cast<float>(0x7FC00000u);
  const float mag = exp == 0 ? static_cast<float>(mant) * 0x1p-9f
                             : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return sign * mag;
}

// IEEE half -> float, exact for every input (subnormals, inf, NaN included).
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// float -> IEEE half with round-to-nearest-even; overflow gives inf.
inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // result is subnormal or zero
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // * 2^24: subnormal units
    const auto units = static_cast<std::uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(units);
    std::uint32_t r = units + ((rem > 0.5f || (rem == 0.5f && (units & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = abs + 0xFFFu + ((abs >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

// Storage tags: BF16 and F16 are both 16 bits, so the kernels tell them apart by type.
struct bf16_t {
  std::uint16_t bits;
};
struct f16_t {
  std::uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2, "16-bit storage types must be exactly 2 bytes");

inline float to_float(float x) { return x; }
inline float to_float(bf16_t x) { return bf16_to_f32(x.bits); }
inline float to_float(f16_t x) { return f16_to_f32(x.bits); }

// The one dispatch from a runtime DType to its storage type: calls fn(std::type_identity<T>{})
// with T = bf16_t, f16_t or float. Any other dtype is an error naming it (binding and cache
// creation refuse such dtypes first, so the kernels never see one).
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: return fn(std::type_identity<bf16_t>{});
    case DType::f16: return fn(std::type_identity<f16_t>{});
    case DType::f32: return fn(std::type_identity<float>{});
    default: break;
  }
  throw Error(ErrorCategory::model, "dtype", std::string(dtype_name(dtype)) + " has no kernels (BF16, F16, F32 have)");
}

}  // namespace kylin
