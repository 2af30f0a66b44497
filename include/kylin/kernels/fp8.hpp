// FP8 weights (float8_e4m3fn) times their block's scale, rounded once to BF16 and returned as
// floats: what quantizing an FP8 checkpoint at load and its BF16 widening read (model/fp8.hpp).
// A scalar reference and a SIMD kernel that gives the same bits.
#pragma once

#include <bit>
#include <cstdint>

#include "kylin/core/dtype.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// out[i] = bf16(e4m3(q[i]) * scale) for i in [0, n), as floats (exact: BF16 widens exactly).
inline void widen_fp8_ref(const std::uint8_t* q, float scale, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(f8_e4m3_to_f32(q[i]) * scale));
}

namespace detail {

using ibatch = xsimd::batch<std::int32_t>;
static_assert(ibatch::size == lanes, "int and float batches of one arch have as many lanes");

inline fbatch as_floats(const ibatch& v) { return fbatch(std::bit_cast<fbatch::register_type>(static_cast<ibatch::register_type>(v))); }
inline ibatch as_ints(const fbatch& v) { return ibatch(std::bit_cast<ibatch::register_type>(static_cast<fbatch::register_type>(v))); }

// The e4m3 value of each code, as f8_e4m3_to_f32 gives it: a normal value's exponent and mantissa
// moved into float position (bias 7 -> 127), a subnormal m * 2^-9 converted (exact), the sign
// or-ed in, and S.1111.111 the quiet NaN 0x7FC00000 whatever its sign.
inline ibatch e4m3_bits(const ibatch& v) {
  const ibatch em = v & ibatch(0x7F);
  const ibatch normal = (em << 20) + ibatch(120 << 23);
  const ibatch subnormal = as_ints(xsimd::to_float(em) * fbatch(0x1p-9f));
  const ibatch mag = xsimd::select((em >> 3) == ibatch(0), subnormal, normal);
  return xsimd::select(em == ibatch(0x7F), ibatch(0x7FC00000), mag | ((v & ibatch(0x80)) << 24));
}

// f32_to_bf16's round-to-nearest-even on each lane, left in the top half: NaN keeps its payload
// with the quiet bit set.
inline ibatch round_to_bf16(const ibatch& u) {
  const ibatch top = ibatch(static_cast<std::int32_t>(0xFFFF0000u));
  const ibatch rounded = (u + ibatch(0x7FFF) + ((u >> 16) & ibatch(1))) & top;
  const ibatch nan = (u & top) | ibatch(0x00400000);
  return xsimd::select((u & ibatch(0x7FFFFFFF)) > ibatch(0x7F800000), nan, rounded);
}

}  // namespace detail

// The same as widen_fp8_ref, `lanes` codes at a time (the table loop it replaces ran one code at
// a time: about two thirds of an FP8 checkpoint's quantize-at-load time).
inline void widen_fp8(const std::uint8_t* q, float scale, std::int64_t n, float* out) {
  std::int64_t i = 0;
  if constexpr (simd_enabled) {
    const fbatch s(scale);
    for (; i + static_cast<std::int64_t>(lanes) <= n; i += static_cast<std::int64_t>(lanes)) {
      const fbatch x = detail::as_floats(detail::e4m3_bits(load_bytes_as_ints(q + i)));
      detail::as_floats(detail::round_to_bf16(detail::as_ints(x * s))).store_unaligned(out + i);
    }
  }
  widen_fp8_ref(q + i, scale, n - i, out + i);
}

}  // namespace kylin::kernels
