// The SIMD vocabulary of the kernels: xsimd float batches of the compile-time best arch, and
// loads that widen BF16/F16 weights to float in registers. Intrinsics live here, in int8.hpp,
// quant_dot.hpp and quant_gemm.hpp (int8) and gemm.hpp (the panel packer); KYLIN_NO_SIMD routes
// every kernel to its scalar reference.
//
// What stays intrinsics here, because xsimd 8.1 (Debian 12) cannot say it as one instruction:
// - BF16 load on AVX2/AVX-512: xsimd's widening load (batch<uint32_t> from uint16_t) is a copy
//   through a stack buffer on x86 (vpmovzxwd on halves, stored and reloaded); the intrinsics are
//   one vpmovzxwd. On NEON the same xsimd code is ldr d + uxtl + shl, so every other target
//   (arm64, SSE-only x86, whatever xsimd adds) takes the xsimd code.
// - F16 load and store: xsimd 8.1 has no half type or conversion; vcvtph2ps/vcvtps2ph (F16C,
//   AVX-512) and fcvtl/fcvtn (arm64, baseline there) are intrinsics; other targets go element
//   by element through the scalar conversions.
// - Byte load on AVX2/AVX-512 (the FP8 weights): one vpmovzxbd, as for BF16.
#pragma once

// GCC 12 reports its own AVX-512 intrinsics' deliberately undefined operands as used
// uninitialized wherever an xsimd function (exp) is emitted out of line: GCC bug 105593. The
// state of this pragma at the intrinsics' lines, first included here, is what GCC consults.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xsimd/xsimd.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "kylin/core/dtype.hpp"

// Which int8 kernels the build has, chosen at compile time from the -m flags (-march=native):
// KYLIN_INT8_SIMD   AVX2 + F16C: the 256-bit decode kernel
// KYLIN_INT8_512    AVX-512 BW/VL as well: the decode kernel takes block pairs in 512-bit vectors
// KYLIN_VNNI_256    vpdpbusd on 256-bit vectors: AVX512_VNNI + VL (EVEX), or AVX-VNNI (VEX, the
//                   AVX2-only Intel cores since Alder Lake)
// KYLIN_VNNI_512    vpdpbusd on 512-bit vectors (AVX512_VNNI)
#if defined(__AVX2__) && defined(__F16C__) && !defined(KYLIN_NO_SIMD)
#define KYLIN_INT8_SIMD 1
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KYLIN_INT8_512 1
#endif
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define KYLIN_VNNI_256 1
#endif
#if defined(KYLIN_INT8_512) && defined(__AVX512VNNI__)
#define KYLIN_VNNI_512 1
#endif
#endif

// Written before a loop over a register array (a tile's rows or tokens, a block's lane-chunks):
// unrolled whatever the optimisation level. The kernels need every such loop unrolled so that the
// arrays live in registers; -O3 does that on its own, but at -O2 (CMake's RelWithDebInfo, a
// header-only user's own flags) GCC 12 left many loops rolled and their arrays on the stack: the
// Q4_0 GEMM ran at 0.26x and batched BF16 decode at 0.29x their -O3 speed (docs/PERFORMANCE.md,
// "The kernels at -O2"). Clang reads the same pragma. (The CUDA kernels have their own, device_math.hpp.)
#define KYLIN_CPU_UNROLL _Pragma("GCC unroll 16")

namespace kylin::kernels {

using fbatch = xsimd::batch<float>;
inline constexpr std::size_t lanes = fbatch::size;

#if defined(KYLIN_NO_SIMD)
inline constexpr bool simd_enabled = false;
#else
inline constexpr bool simd_enabled = true;
#endif

// Whether the build's int8 kernels have vpdpbusd (int8.hpp); then prefill rows over Q8_0/Q4_0
// weights take the int8 GEMM (quant_gemm.hpp), whose sums round differently from the f32 GEMM's.
#if defined(KYLIN_VNNI_256)
inline constexpr bool int8_vnni = true;
#else
inline constexpr bool int8_vnni = false;
#endif

// Name of the instruction set the SIMD kernels were compiled for (reported by bench/inspect, and
// part of a saved KV file's identity): xsimd's, with "+vnni" where the int8 kernels have VNNI.
inline const char* simd_arch_name() {
  if constexpr (!simd_enabled) return "scalar";
  static const std::string name = std::string(xsimd::default_arch::name()) + (int8_vnni ? "+vnni" : "");
  return name.c_str();
}

// Asks for the cache line `bytes_ahead` bytes past p ahead of its use. A prefetch never faults, so
// an address past the end of a buffer is harmless; it is formed as an integer, not as a pointer
// past the end.
// Always inlined, as every prefetching helper must be: GCC counts a function whose only effect is
// __builtin_prefetch as `const`, so where it is not inlined (-O2) the call is dropped as dead.
[[gnu::always_inline]] inline void prefetch(const void* p, std::int64_t bytes_ahead = 0) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(bytes_ahead)), 0, 3);
}

inline constexpr std::int64_t cache_line_bytes = 64;

// Prefetches every cache line of [p + bytes_ahead, p + bytes_ahead + bytes). Streaming loops
// prefetch each line they will read: one prefetch per 128-byte step, leaving every other line to
// the hardware prefetcher, made the decode matvec 5-10 % slower on one core.
[[gnu::always_inline]] inline void prefetch_lines(const void* p, std::int64_t bytes_ahead, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += cache_line_bytes) prefetch(p, bytes_ahead + b);
}

// Pins v to a register: without it GCC folds a vector that feeds several FMAs into each FMA as a
// memory operand, and the batched dot kernel becomes bound by load ports
// (docs/log/2026-11-header-comments.md).
inline void keep_in_register([[maybe_unused]] fbatch& v) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__AVX2__) || defined(__AVX512F__))
  asm("" : "+x"(v.data));
#endif
}

// a * b + c rounded once, on every kernel set: the FMA chains the references spell std::fma.
// xsimd 8.1 (Debian 12) has no AVX-512 fma; its generic one is `x * y + z`, which g++ contracts
// into one vfmadd (-ffp-contract=fast) and clang does not, so under clang every AVX-512 kernel
// rounded twice and lost bit equality with its reference (issue #38). Without FMA hardware
// (SSE-only builds), each lane goes through std::fma: exact, and slow, as the scalar path.
inline fbatch fma(const fbatch& a, const fbatch& b, const fbatch& c) {
#if defined(__AVX512F__)
  return fbatch(_mm512_fmadd_ps(a, b, c));
#elif defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return xsimd::fma(a, b, c);
#else
  alignas(64) float av[lanes], bv[lanes], cv[lanes];
  a.store_aligned(av);
  b.store_aligned(bv);
  c.store_aligned(cv);
  for (std::size_t i = 0; i < lanes; ++i) cv[i] = std::fma(av[i], bv[i], cv[i]);
  return fbatch::load_aligned(cv);
#endif
}

// Loads `lanes` consecutive weights of element type T as floats.
// The AVX-512 conversions use the zero-masked intrinsics with an all-ones mask: the same
// instructions, while the plain ones' undefined pass-through operand trips GCC 12's
// -Wuninitialized once inlined into some callers (GCC bug 105593).
template <class T>
inline fbatch load_as_float(const T* p);

template <>
inline fbatch load_as_float<float>(const float* p) {
  return fbatch::load_unaligned(p);
}

using kylin::bf16_t;
using kylin::f16_t;
using kylin::to_float;

#if defined(__AVX512F__)
inline constexpr __mmask16 all_lanes = 0xFFFF;
#endif

template <>
inline fbatch load_as_float<bf16_t>(const bf16_t* p) {
#if defined(__AVX512F__)
  static_assert(lanes == 16, "AVX-512 float batch has 16 lanes");
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return fbatch(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(all_lanes, _mm512_maskz_cvtepu16_epi32(all_lanes, h), 16)));
#elif defined(__AVX2__)
  static_assert(lanes == 8, "AVX2 float batch has 8 lanes");
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return fbatch(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
#else
  // bf16_to_f32 on every lane: zero-extend each 16-bit lane to 32, move it to the top half. The
  // bits become floats by std::bit_cast of the registers: xsimd 8.1's NEON bitwise_cast picks its
  // vreinterpret from a table of function pointers that GCC 12 leaves as two calls per load.
  using ubatch = xsimd::batch<std::uint32_t>;
  const ubatch bits = ubatch::load_unaligned(reinterpret_cast<const std::uint16_t*>(p)) << 16;
  return fbatch(std::bit_cast<fbatch::register_type>(static_cast<ubatch::register_type>(bits)));
#endif
}

template <>
inline fbatch load_as_float<f16_t>(const f16_t* p) {
#if defined(__AVX512F__)
  return fbatch(_mm512_maskz_cvtph_ps(all_lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(__AVX2__) && defined(__F16C__)
  return fbatch(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__aarch64__)
  static_assert(lanes == 4, "NEON float batch has 4 lanes");
  return fbatch(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)))));
#else
  alignas(64) float tmp[lanes];
  for (std::size_t i = 0; i < lanes; ++i) tmp[i] = to_float(p[i]);
  return fbatch::load_aligned(tmp);
#endif
}

// Loads `lanes` consecutive bytes, each zero-extended to an int lane (vpmovzxbd on x86; xsimd
// 8.1 has no widening integer load that is not a copy through memory there).
inline xsimd::batch<std::int32_t> load_bytes_as_ints(const std::uint8_t* p) {
  using ibatch = xsimd::batch<std::int32_t>;
#if defined(__AVX512F__)
  return ibatch(_mm512_maskz_cvtepu8_epi32(all_lanes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return ibatch(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  alignas(64) std::int32_t tmp[ibatch::size];
  for (std::size_t i = 0; i < ibatch::size; ++i) tmp[i] = p[i];
  return ibatch::load_aligned(tmp);
#endif
}

// Lane i of the result = horizontal sum of rows[i], for `lanes` rows at once: a transposing tree
// of shuffles and adds (~3 instructions a sum where one horizontal sum takes ~8). Every row goes
// through the same tree in any slot, so its sum is the same bits whatever the other rows hold
// (tests/kernels/ops_test.cpp); attention relies on it to score keys the same in any grouping.
// x86 has its own tree (xsimd 8.1's AVX-512 haddp returns the sums in the wrong lanes); other
// targets use xsimd::haddp.
inline fbatch hadd_rows(const fbatch* rows) {
#if defined(__AVX512F__)
  // four rounds on row pairs: 256-bit halves (lane i + i+8), 128-bit blocks (+ i+4), then lanes
  // 0+1 and 2+3 twice. Lane 4k+e of the last round holds slot k+4e, so slot k+4e takes row 4k+e.
  // Masked shuffles: the unmasked ones trip GCC 12's -Wuninitialized (bug 105593, as above).
  const auto row = [&](int slot) { return rows[4 * (slot % 4) + slot / 4].data; };
  const auto halves = [](__m512 a, __m512 b) {  // [a's lanes i + i+8, b's], i < 8
    return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all_lanes, a, b, 0x44), _mm512_maskz_shuffle_f32x4(all_lanes, a, b, 0xEE));
  };
  const auto blocks = [](__m512 a, __m512 b) {  // 128-bit blocks 0+1 of a, 2+3 of a, 0+1 of b, 2+3 of b
    return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all_lanes, a, b, 0x88), _mm512_maskz_shuffle_f32x4(all_lanes, a, b, 0xDD));
  };
  const auto pairs = [](__m512 a, __m512 b) {  // in each 128-bit block: a's lanes 0+1, 2+3, then b's
    return _mm512_add_ps(_mm512_maskz_shuffle_ps(all_lanes, a, b, 0x88), _mm512_maskz_shuffle_ps(all_lanes, a, b, 0xDD));
  };
  __m512 h[8], b[4];
  KYLIN_CPU_UNROLL for (int p = 0; p < 8; ++p) h[p] = halves(row(2 * p), row(2 * p + 1));
  KYLIN_CPU_UNROLL for (int p = 0; p < 4; ++p) b[p] = blocks(h[2 * p], h[2 * p + 1]);
  return pairs(pairs(b[0], b[1]), pairs(b[2], b[3]));
#elif defined(__AVX2__)
  // three rounds: 128-bit halves (lane i + i+4), then lanes 0+1 and 2+3 twice. Lane 4b+e of the
  // last round holds slot b+2e, so slot b+2e takes row 4b+e.
  const auto row = [&](int slot) { return rows[4 * (slot % 2) + slot / 2].data; };
  const auto halves = [](__m256 a, __m256 b) {  // [a's lanes i + i+4, b's], i < 4
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  };
  const auto pairs = [](__m256 a, __m256 b) {  // in each 128-bit half: a's lanes 0+1, 2+3, then b's
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
  };
  __m256 h[4];
  KYLIN_CPU_UNROLL for (int p = 0; p < 4; ++p) h[p] = halves(row(2 * p), row(2 * p + 1));
  return pairs(pairs(h[0], h[1]), pairs(h[2], h[3]));
#else
  return xsimd::haddp(rows);
#endif
}

// fn(std::integral_constant<int, n>{}) for 1 <= n <= Max (nothing otherwise): a run-time count
// of rows or tokens as a kernel's template argument, one instantiation per value.
template <int Max, class Fn>
[[gnu::always_inline]] inline void with_count(std::int64_t n, Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((n == I + 1 ? fn(std::integral_constant<int, I + 1>{}) : void()), ...);
  }(std::make_integer_sequence<int, Max>{});
}

// hadd_rows on its side: lane r of sum_slots(s) = the sum of s[0..lanes) in lane r, added in the
// tree hadd_rows and xsimd::hadd use for one row's lanes (slot i + slot i + n/2 while more than
// four are left, then (0 + 1) + (2 + 3)). A sum laid down the slots of `lanes` vectors is then the
// same bits as that sum laid across one vector (tests/kernels/ops_test.cpp). x86 only
// (has_sum_slots): elsewhere hadd_rows is xsimd::haddp, whose tree is not spelled out here.
#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(KYLIN_NO_SIMD)
inline constexpr bool has_sum_slots = true;
#else
inline constexpr bool has_sum_slots = false;
#endif

inline fbatch sum_slots(const fbatch* s) {
  fbatch x[lanes];
  KYLIN_CPU_UNROLL for (std::size_t i = 0; i < lanes; ++i) x[i] = s[i];
  KYLIN_CPU_UNROLL for (std::size_t n = lanes; n > 4; n /= 2)
    KYLIN_CPU_UNROLL for (std::size_t i = 0; i < n / 2; ++i) x[i] = x[i] + x[i + n / 2];
  return (x[0] + x[1]) + (x[2] + x[3]);
}

// Stores `lanes` floats as F16, rounded to nearest-even (what f32_to_f16 does one at a time).
inline void store_as(f16_t* p, fbatch x) {
#if defined(__AVX512F__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtps_ph(all_lanes, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__AVX2__) && defined(__F16C__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__aarch64__)
  // fcvtn rounds as FPCR says: nearest-even unless a program changed the rounding mode
  vst1_u16(reinterpret_cast<std::uint16_t*>(p), vreinterpret_u16_f16(vcvt_f16_f32(x)));
#else
  alignas(64) float tmp[lanes];
  x.store_aligned(tmp);
  for (std::size_t i = 0; i < lanes; ++i) p[i] = f16_t{f32_to_f16(tmp[i])};
#endif
}

}  // namespace kylin::kernels
