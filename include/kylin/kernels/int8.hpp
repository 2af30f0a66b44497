// The int8 arithmetic of the quantized kernels (quant_dot.hpp, quant_gemm.hpp): lane j of
// dot4(u, s) is u[4j] s[4j] + ... + u[4j+3] s[4j+3] for unsigned bytes u and signed bytes s.
// With VNNI that is one vpdpbusd; without, vpmaddubsw + vpmaddwd with ones.
#pragma once

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

namespace detail {

#if defined(KYLIN_INT8_SIMD)
// vpmaddubsw adds two products in int16 with saturation, which the kernels' operands never reach:
// Q8_0 |x| * (+-w) and Q4_0 (v + 8) * x stay within 2 * 127 * 127 < 32767. So both forms give the
// same integers.
inline __m256i dot4(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
#endif

#if defined(KYLIN_INT8_512)
inline __m512i dot4(__m512i u, __m512i s) {
#if defined(KYLIN_VNNI_512)
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
#endif
}
#endif

// acc + dot4(u, s), where the accumulated sums may exceed int16 (the int8 GEMM's Q8_0 rows).
#if defined(KYLIN_VNNI_256)
inline __m256i dot4_add(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
#endif
#if defined(KYLIN_VNNI_512)
inline __m512i dot4_add(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
#endif

// The bits of 1.5 * 2^23: an int32 accumulator started there and given a block's dot product s
// (|s| < 2^22, as every sum of 32 quantized products is: at most 32 * 127 * 127) reads as the
// float 1.5 * 2^23 + s exactly, so one subtraction makes float(s) exactly, as vcvtdq2ps would, but
// on either FMA port (vcvtdq2ps has one on Intel's AVX-512 cores).
inline constexpr std::int32_t exact_float_start = 0x4B400000;
inline constexpr float exact_float_start_value = 12582912.f;

}  // namespace detail
}  // namespace kylin::kernels
