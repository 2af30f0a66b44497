// The machine's limits that `kylin bench` states its speeds as fractions of, measured with the
// kernels' own loads and FMAs in the kernel set this translation unit is compiled for: streaming
// read bandwidth (the decode roofline), the f32 FMA peak (what prefill is judged against) and,
// where the BF16 GEMM runs, the vdpbf16ps peak (what prefill on BF16 activations is judged against).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

namespace probe_detail {
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best of 20 short passes (so a busy machine still shows a quiet one) of chains(steps, seed)
// on every thread, in GFLOP/s: flops_per_step FLOPs a step.
template <class Chains>
double best_chain_gflops(int threads, double flops_per_step, Chains chains) {
  constexpr std::int64_t steps = std::int64_t{1} << 21;  // ~4 ms a pass at 100 GFLOP/s a thread
  ThreadPool pool(threads);
  std::vector<float> sink(static_cast<std::size_t>(pool.size()) * 16);
  double best = 0;
  for (int pass = 0; pass < 20; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int t, int) { sink[static_cast<std::size_t>(t) * 16] += chains(steps, static_cast<float>(pass)); });
    best = std::max(best, flops_per_step * static_cast<double>(steps) * pool.size() / seconds_since(t0) / 1e9);
  }
  if (sink[0] == 42.f) std::printf(" ");  // keeps the sums observable
  return best;
}
}  // namespace probe_detail

// Sums [begin, end) of a buffer read as f32 (64-byte loads) or as BF16 widened to f32 (32-byte
// loads, the decode kernel's access), with 4 independent accumulators; with prefetch_bytes > 0
// it also prefetches every cache line that far ahead, as the decode matvec does.
template <class T>
inline float stream_sum(const T* p, std::size_t begin, std::size_t end, std::int64_t prefetch_bytes) {
  fbatch a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  for (std::size_t i = begin; i + 4 * lanes <= end; i += 4 * lanes) {
    if (prefetch_bytes > 0) prefetch_lines(p + i, prefetch_bytes, static_cast<std::int64_t>(4 * lanes * sizeof(T)));
    a0 += load_as_float(p + i);
    a1 += load_as_float(p + i + lanes);
    a2 += load_as_float(p + i + 2 * lanes);
    a3 += load_as_float(p + i + 3 * lanes);
  }
  return xsimd::hadd((a0 + a1) + (a2 + a3));
}

// Multi-threaded streaming read of a buffer far larger than the last-level cache, in GB/s: the
// best of 4 passes of each of the four read loops above (f32 / BF16, with / without the decode
// kernel's software prefetch), so the roofline is the fastest read this machine showed, not a
// weaker loop's than the kernel it judges.
inline double measure_read_bandwidth(int threads, std::size_t bytes = std::size_t{1} << 29) {
  const std::size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> buf(new float[n]);
  ThreadPool pool(threads);
  pool.parallel_for(static_cast<std::int64_t>(n), 1 << 16, [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t i = a; i < b; ++i) buf[static_cast<std::size_t>(i)] = static_cast<float>(i & 7);
  });
  std::vector<float> sink(static_cast<std::size_t>(pool.size()) * 16);
  double best = 0;
  for (int pass = 0; pass < 16; ++pass) {
    const std::int64_t ahead = pass % 4 < 2 ? 0 : detail::matvec_prefetch_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int t, int nt) {
      const std::size_t a = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
      const std::size_t b = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
      sink[static_cast<std::size_t>(t) * 16] +=
          pass % 2 ? stream_sum(buf.get(), a, b, ahead)
                   : stream_sum(reinterpret_cast<const bf16_t*>(buf.get()), 2 * a, 2 * b, ahead);
    });
    best = std::max(best, static_cast<double>(bytes) / probe_detail::seconds_since(t0) / 1e9);
  }
  if (sink[0] == 42.f) std::printf(" ");  // keeps the reads observable
  return best;
}

// `chains` independent multiply-add chains of one vector each, `steps` steps: the FMA units'
// throughput when there are more chains than an FMA's latency times the units per core.
template <int chains>
inline float fma_chains(std::int64_t steps, float seed) {
  fbatch acc[chains];
  for (int i = 0; i < chains; ++i) acc[i] = fbatch(seed + static_cast<float>(i));
  const fbatch m(0.999999f), c(1e-7f);
  for (std::int64_t s = 0; s < steps; ++s) {
    // unrolled so the chains live in registers: rolled, GCC 12 kept them on the stack and the
    // probe read ~55 GMAC/s a core on a Zen 5 whose FMA units do ~100 (docs/log/2026-11-24-25-fma-probe.md)
#pragma GCC unroll 32
    for (int i = 0; i < chains; ++i) acc[i] = fma(acc[i], m, c);
  }
  fbatch sum = acc[0];
  for (int i = 1; i < chains; ++i) sum += acc[i];
  return xsimd::hadd(sum);
}

// The f32 FMA peak of `threads` threads in GFLOP/s (2 per lane per FMA): the best of 20 short
// passes (so a busy machine still shows a quiet one) of fma_chains on every thread, 12 chains on
// AVX2's 16 registers, 24 where there are 32. Prefill is judged against it as decode against the
// read bandwidth.
inline double measure_fma_gflops(int threads) {
  constexpr int chains = lanes >= 16 ? 24 : 12;
  return probe_detail::best_chain_gflops(threads, 2.0 * lanes * chains, [](std::int64_t steps, float seed) { return fma_chains<chains>(steps, seed); });
}

// The BF16 dot-product peak of `threads` threads in GFLOP/s (vdpbf16ps: 2 products a lane, 4
// FLOPs), measured as measure_fma_gflops is; 0 where the BF16 GEMM does not run
// (bf16_gemm_supported). `kylin bench --prefill-activations bf16` judges prefill against it.
inline double measure_bf16_dot_gflops(int threads) {
#if defined(KYLIN_BF16_DOT)
  if (bf16_gemm_supported())
    return probe_detail::best_chain_gflops(threads, 4.0 * 16 * 24, [](std::int64_t steps, float seed) { return detail::bf16_dot_chains<24>(steps, seed); });
#endif
  (void)threads;
  return 0;
}

}  // namespace kylin::kernels
