// `kylin-gpu-check --matvec-bench` (scripts/gpu-check.sh): the decode matvec's bytes per second on
// the GPU against the card's device-to-device copy bandwidth measured in the same run, one JSON
// line per figure. The weights are random bytes in several copies that together exceed the L2
// cache, used in turn, so every launch reads its weights from device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "kylin/backends/cuda/device_runtime.hpp"
#include "kylin/backends/cuda/kernels.hpp"

namespace matvec_bench {

using kylin::cuda::detail::check;

struct Shape {
  const char* what;
  std::int64_t rows, cols;
  kylin::DType dtype;
};

inline std::size_t weight_bytes(const Shape& s) {
  const auto n = static_cast<std::size_t>(s.rows * s.cols);
  switch (s.dtype) {
    case kylin::DType::q8_0: return n + n / 32 * 2;
    case kylin::DType::q4_0: return n / 2 + n / 32 * 2;
    default: return n * kylin::dtype_size(s.dtype);
  }
}

inline void* random_device(std::size_t bytes, unsigned seed) {
  std::vector<std::uint16_t> host(bytes / 2 + 1);
  std::mt19937 rng(seed);
  // Finite BF16/F16 values (exponent bits never all ones) and valid F16 scales.
  for (auto& h : host) h = static_cast<std::uint16_t>(rng() & 0x3BFF);
  void* d = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

// Milliseconds per call of `body` (called `reps` times between two events, after 3 warm-ups).
template <class F>
double time_ms(cudaStream_t stream, int reps, F body) {
  for (int i = 0; i < 3; ++i) body(i);
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventRecord(a, stream), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) body(i);
  check(cudaEventRecord(b, stream), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  check(cudaGetLastError(), "a launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

inline int run() {
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    // Copy bandwidth: 1 GiB device to device, bytes read plus bytes written.
    const std::size_t copy_bytes = std::size_t{1} << 30;
    void *src = random_device(copy_bytes, 1), *dst = nullptr;
    check(cudaMalloc(&dst, copy_bytes), "cudaMalloc");
    const double copy_ms = time_ms(stream, 10, [&](int) { check(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream), "copy"); });
    const double copy_bw = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e-3);
    cudaFree(src);
    cudaFree(dst);
    std::printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d, \"copy_bytes_per_s\": %.4g}\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize,
                copy_bw);

    const Shape shapes[] = {
        {"0.6B q/k/v+o (1024 -> 2048)", 2048, 1024, kylin::DType::bf16}, {"0.6B gate (1024 -> 3072)", 3072, 1024, kylin::DType::bf16},
        {"0.6B down (3072 -> 1024)", 1024, 3072, kylin::DType::bf16},    {"0.6B lm_head (1024 -> 151936)", 151936, 1024, kylin::DType::bf16},
        {"8B q (4096 -> 4096)", 4096, 4096, kylin::DType::bf16},         {"8B gate (4096 -> 12288)", 12288, 4096, kylin::DType::bf16},
        {"8B down (12288 -> 4096)", 4096, 12288, kylin::DType::bf16},    {"8B lm_head (4096 -> 151936)", 151936, 4096, kylin::DType::bf16},
        {"8B gate q8_0", 12288, 4096, kylin::DType::q8_0},               {"8B gate q4_0", 12288, 4096, kylin::DType::q4_0},
        {"8B gate f16", 12288, 4096, kylin::DType::f16},
    };
    for (const Shape& s : shapes) {
      const std::size_t bytes = weight_bytes(s);
      const int copies = static_cast<int>(std::max<std::size_t>(2, (std::size_t{4} * static_cast<std::size_t>(prop.l2CacheSize)) / bytes + 1));
      std::vector<void*> w;
      for (int c = 0; c < copies; ++c) w.push_back(random_device(bytes, 10u + static_cast<unsigned>(c)));
      // x: random finite floats (each pair of the 16-bit values above has a small exponent)
      float *x = static_cast<float*>(random_device(static_cast<std::size_t>(s.cols) * 4 * 8, 7)), *y = nullptr;
      check(cudaMalloc(reinterpret_cast<void**>(&y), static_cast<std::size_t>(s.rows) * 4 * 8), "cudaMalloc");
      // Each row count at both column splits; "chosen" marks the one the backend launches (split_for).
      const unsigned chosen = kylin::cuda::MatvecKernel::split_for(s.rows, s.cols);
      for (std::int64_t n : {1, 4})
        for (unsigned split : {1u, kylin::cuda::detail::matvec_warps}) {
          const double ms = time_ms(stream, 50, [&](int i) {
            const kylin::cuda::MatvecKernel k{.x = x, .n = n, .w_dtype = s.dtype, .in_features = s.cols,
                                               .outs = {{.w = w[static_cast<std::size_t>(i % copies)], .bias = nullptr, .y = y, .rows = s.rows}}, .n_outs = 1,
                                               .k_split = split};
            const kylin::cuda::LaunchShape sh = k.shape();
            void* args[] = {const_cast<kylin::cuda::MatvecKernel*>(&k)};
            check(cudaLaunchKernel(kylin::cuda::kernel_entry<kylin::cuda::MatvecKernel>(), dim3(sh.grid.x), dim3(sh.block.x), args, sh.shared_bytes, stream),
                  "cudaLaunchKernel");
          });
          const double bw = static_cast<double>(bytes) / (ms * 1e-3);
          std::printf("{\"matvec\": \"%s\", \"dtype\": \"%s\", \"rows_of_x\": %lld, \"k_split\": %u, \"chosen\": %s, \"weight_bytes\": %zu, "
                      "\"us\": %.2f, \"bytes_per_s\": %.4g, \"of_copy_bandwidth\": %.3f}\n",
                      s.what, std::string(kylin::dtype_name(s.dtype)).c_str(), static_cast<long long>(n), split, split == chosen ? "true" : "false", bytes,
                      ms * 1e3, bw, bw / copy_bw);
        }
      for (void* p : w) cudaFree(p);
      cudaFree(x);
      cudaFree(y);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-gpu-check --matvec-bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace matvec_bench
