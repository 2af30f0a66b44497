// Device-side helpers of the CUDA kernels: exact bf16/f16 conversions (bit for bit those of
// core/dtype.hpp, which are host code), launch shapes and block reductions, for GPU and emulator alike.
#pragma once


#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kylin/backends/cuda/portable.hpp"
#include "kylin/core/dtype.hpp"  // DType and the bf16_t/f16_t storage tags only: its functions are host code

#if defined(__CUDA_ARCH__)
#define KYLIN_UNROLL _Pragma("unroll")
#define KYLIN_UNROLL4 _Pragma("unroll 4")
#else
#define KYLIN_UNROLL
#define KYLIN_UNROLL4
#endif

namespace kylin::cuda {


namespace detail {

KYLIN_HD inline std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KYLIN_HD inline float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The conversions of core/dtype.hpp, line for line, so device results are bit-identical to the CPU's.
KYLIN_HD inline float bf16_to_f32(std::uint16_t h) { return float_of(static_cast<std::uint32_t>(h) << 16); }

KYLIN_HD inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

KYLIN_HD inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
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
  return float_of(bits);
}

KYLIN_HD inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // subnormal or zero: exact in float after scaling by 2^24
    const float scaled = float_of(abs) * 16777216.0f;
    const auto units = static_cast<std::uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(units);
    const std::uint32_t r = units + ((rem > 0.5f || (rem == 0.5f && (units & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  const std::uint32_t r = abs + 0xFFFu + ((abs >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

KYLIN_HD inline float to_f32(float x) { return x; }
KYLIN_HD inline float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }
KYLIN_HD inline float to_f32(f16_t x) { return f16_to_f32(x.bits); }

KYLIN_HD inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The 16 bytes at p (16-byte aligned: one 128-bit load on the GPU) widened to f32. The emulator
// refuses a misaligned p, as the GPU would fault on it.
template <class T, int V = 16 / static_cast<int>(sizeof(T))>
KYLIN_HD inline void load16(const T* p, float (&out)[V]) {
  static_assert(V * sizeof(T) == 16, "load16 reads 16 bytes");
  T v[V];
#if defined(__CUDA_ARCH__)
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  memcpy(v, &raw, 16);
#else
  if (!aligned16(p)) throw std::logic_error("load16: address not 16-byte aligned");
  std::memcpy(v, p, 16);
#endif
  KYLIN_UNROLL for (int i = 0; i < V; ++i) out[i] = to_f32(v[i]);
}

// 16 bytes at p as four ints (p 16-byte aligned; the emulation refuses a misaligned p, as load16).
KYLIN_HD inline void load16_ints(const void* p, int (&out)[4]) {
#if defined(__CUDA_ARCH__)
  const int4 v = *reinterpret_cast<const int4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
#else
  if (!aligned16(p)) throw std::logic_error("load16_ints: address not 16-byte aligned");
  std::memcpy(out, p, 16);
#endif
}

// c + the dot product of the four signed bytes of a with those of b (CUDA's __dp4a).
KYLIN_HD inline int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) c += static_cast<std::int8_t>(static_cast<std::uint32_t>(a) >> (8 * i)) * static_cast<std::int8_t>(static_cast<std::uint32_t>(b) >> (8 * i));
  return c;
#endif
}

// What a kernel writes for a dtype it has no path for (the backend refuses those before launching).
KYLIN_HD inline float poison() { return NAN; }

template <class Thread>
KYLIN_HD float warp_sum(Thread& t, float v) {
  for (int m = static_cast<int>(warp_size) / 2; m > 0; m >>= 1) v += t.shfl_xor(v, m);
  return v;
}

// A double through a shuffle that moves 32-bit floats: its two halves, bit for bit.
template <class Thread>
KYLIN_HD double shfl_xor_double(Thread& t, double v, int mask) {
  std::uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  const std::uint64_t hi = bits_of(t.shfl_xor(float_of(static_cast<std::uint32_t>(bits >> 32)), mask));
  const std::uint64_t lo = bits_of(t.shfl_xor(float_of(static_cast<std::uint32_t>(bits)), mask));
  bits = hi << 32 | lo;
  memcpy(&v, &bits, sizeof v);
  return v;
}

template <class Thread>
KYLIN_HD double warp_sum(Thread& t, double v) {
  for (int m = static_cast<int>(warp_size) / 2; m > 0; m >>= 1) v += shfl_xor_double(t, v, m);
  return v;
}

template <class Thread>
KYLIN_HD float warp_max(Thread& t, float v) {
  for (int m = static_cast<int>(warp_size) / 2; m > 0; m >>= 1) v = fmaxf(v, t.shfl_xor(v, m));
  return v;
}

inline constexpr unsigned block_threads = 256;

// Element-wise kernels: a grid-stride loop over n, so any n fits a grid capped well under CUDA's limit.
inline LaunchShape elementwise_shape(std::int64_t n) {
  const std::int64_t blocks = (n + block_threads - 1) / block_threads;
  return {{static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks)}, {block_threads}, 0};
}

// One block per row (grid-stride over rows), threads striding across the row.
inline LaunchShape row_shape(std::int64_t rows, std::size_t shared_bytes = 0) {
  return {{static_cast<unsigned>(rows < 1 ? 1 : rows > 65535 ? 65535 : rows)}, {block_threads}, shared_bytes};
}

// The sum of squares of an RMSNorm row is split into norm_slots double partial sums, slot s taking
// x[s], x[s + norm_slots], ..., then added in a fixed tree: the same bits for every block of
// threads dividing norm_slots (RmsNormKernel's 256, a matvec's 128).
inline constexpr unsigned norm_slots = 256;

// 1 / sqrt(mean(xr^2) + eps) in float, as kernels::rms_norm computes it (the sum in double), for
// every thread of the block. Uses norm_slots doubles at the start of shared memory, free on return.
template <class Thread>
KYLIN_HD float inv_rms(Thread& t, const float* xr, std::int64_t dim, double eps) {
  double* partial = t.template shared<double>();  // [norm_slots]
  const unsigned tid = t.thread_idx().x, threads = t.block_dim().x;
  for (unsigned s = tid; s < norm_slots; s += threads) {
    double ss = 0.0;
    for (std::int64_t i = s; i < dim; i += norm_slots) ss += static_cast<double>(xr[i]) * xr[i];
    partial[s] = ss;
  }
  t.sync();
  for (unsigned h = norm_slots / 2; h > 0; h >>= 1) {
    for (unsigned s = tid; s < h; s += threads) partial[s] += partial[s + h];
    t.sync();
  }
  const float inv = static_cast<float>(1.0 / sqrt(partial[0] / static_cast<double>(dim) + eps));
  t.sync();  // every thread has read partial[0] before the shared memory is reused
  return inv;
}

// Element i of an RMSNorm weight as f32; NaN for a dtype without a path.
KYLIN_HD inline float norm_weight(const void* w, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::bf16: return to_f32(static_cast<const bf16_t*>(w)[i]);
    case DType::f16: return to_f32(static_cast<const f16_t*>(w)[i]);
    case DType::f32: return static_cast<const float*>(w)[i];
    default: return poison();
  }
}

template <class Thread>
KYLIN_HD std::int64_t global_index(Thread& t) {
  return static_cast<std::int64_t>(t.block_idx().x) * t.block_dim().x + t.thread_idx().x;
}

template <class Thread>
KYLIN_HD std::int64_t global_stride(Thread& t) {
  return static_cast<std::int64_t>(t.grid_dim().x) * t.block_dim().x;
}

}  // namespace detail

}  // namespace kylin::cuda
