// Would a preset that matches a checkpoint gain from a compile-time-shaped instantiation? The
// decode kernels' loops (BF16 matvec, RMSNorm, one-query GQA attention) run here twice from the
// same template code: sizes as std::integral_constant (what a descriptor could pin) and as
// runtime int64_t, at Qwen3-0.6B shapes, one thread; beside them kylin's own kernels, which take
// runtime sizes (the <kylin> rows). Run interleaved:
//   bench_descriptor_shapes --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
// Results and the decision: docs/ARCHITECTURE.md ("Descriptors identify, they do not instantiate").
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/simd.hpp"

namespace {

using namespace kylin;
using kernels::bf16_t;
using kernels::fbatch;

template <std::int64_t N>
using Const = std::integral_constant<std::int64_t, N>;

// Qwen3-0.6B: hidden 1024, intermediate 3072, 16 query / 8 kv heads of 128, 28 layers.
constexpr std::int64_t hidden = 1024, intermediate = 3072, n_heads = 16, n_kv_heads = 8, head_dim = 128, layers = 28;
constexpr std::int64_t context = 1024;  // cached positions the decode query attends to
constexpr auto L = static_cast<std::int64_t>(kernels::lanes);

std::vector<float> randn(std::int64_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<bf16_t> randn_bf16(std::int64_t n, unsigned seed) {
  std::vector<bf16_t> v;
  for (float x : randn(n, seed, 0.02f)) v.push_back(bf16_t{f32_to_bf16(x)});
  return v;
}

// kylin's decode matvec loop (kernels/dot.hpp dot_rows): one row at a time, four
// accumulators, prefetch 4 KiB ahead. Rows/Cols: std::int64_t or Const<N>.
template <class Rows, class Cols>
void matvec(const float* x, const bf16_t* w, float* y, Rows rows, Cols cols) {
  const std::int64_t end4 = cols / (4 * L) * (4 * L);
  for (std::int64_t r = 0; r < rows; ++r) {
    const bf16_t* wr = w + r * cols;
    fbatch a0(0.f), a1(0.f), a2(0.f), a3(0.f);
    for (std::int64_t c = 0; c < end4; c += 4 * L) {
      kernels::prefetch_lines(wr + c, 4096, 4 * L * 2);
      a0 = kernels::fma(fbatch::load_unaligned(x + c), kernels::load_as_float(wr + c), a0);
      a1 = kernels::fma(fbatch::load_unaligned(x + c + L), kernels::load_as_float(wr + c + L), a1);
      a2 = kernels::fma(fbatch::load_unaligned(x + c + 2 * L), kernels::load_as_float(wr + c + 2 * L), a2);
      a3 = kernels::fma(fbatch::load_unaligned(x + c + 3 * L), kernels::load_as_float(wr + c + 3 * L), a3);
    }
    y[r] = xsimd::hadd((a0 + a1) + (a2 + a3));
  }
}

// kylin's RMSNorm loop (kernels/ops.hpp): double sum of squares, then x * inv * w per row.
template <class Dim>
void rms_norm(const float* x, const bf16_t* w, float* out, std::int64_t n_rows, Dim dim, double eps) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    double ss = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    float* o = out + r * dim;
    for (std::int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv * bf16_to_f32(w[i].bits);
  }
}

// One decode query against `n_keys` cached f32 keys/values ([n_kv][n_keys][D]): per kv head, its
// query heads share each K/V row; keys in tiles of 32 with an online softmax, output kept in
// `acc` batches (registers when D is a constant and the loops unroll, memory otherwise).
constexpr std::int64_t max_groups = 2, max_head_batches = 256 / kernels::lanes, key_tile = 32;

template <class D>
void attention(const float* q, const float* k, const float* v, float* out, std::int64_t n_keys, D d, float scale) {
  const std::int64_t groups = n_heads / n_kv_heads, nb = d / L;
  for (std::int64_t kvh = 0; kvh < n_kv_heads; ++kvh) {
    const float* kh = k + kvh * n_keys * d;
    const float* vh = v + kvh * n_keys * d;
    fbatch acc[max_groups][max_head_batches];
    float m[max_groups], sum[max_groups], p[max_groups][key_tile];
    for (std::int64_t g = 0; g < groups; ++g) {
      m[g] = -std::numeric_limits<float>::infinity(), sum[g] = 0.f;
      for (std::int64_t b = 0; b < nb; ++b) acc[g][b] = fbatch(0.f);
    }
    for (std::int64_t j0 = 0; j0 < n_keys; j0 += key_tile) {
      const std::int64_t nj = std::min(key_tile, n_keys - j0);
      for (std::int64_t g = 0; g < groups; ++g) {
        const float* qh = q + (kvh * groups + g) * d;
        float tile_max = m[g];
        for (std::int64_t j = 0; j < nj; ++j) {
          fbatch s(0.f);
          for (std::int64_t b = 0; b < nb; ++b)
            s = kernels::fma(fbatch::load_unaligned(qh + b * L), fbatch::load_unaligned(kh + (j0 + j) * d + b * L), s);
          p[g][j] = xsimd::hadd(s) * scale;
          tile_max = std::max(tile_max, p[g][j]);
        }
        const float correction = std::exp(m[g] - tile_max);
        sum[g] *= correction;
        for (std::int64_t b = 0; b < nb; ++b) acc[g][b] *= fbatch(correction);
        for (std::int64_t j = 0; j < nj; ++j) sum[g] += (p[g][j] = std::exp(p[g][j] - tile_max));
        m[g] = tile_max;
      }
      for (std::int64_t j = 0; j < nj; ++j)
        for (std::int64_t g = 0; g < groups; ++g)
          for (std::int64_t b = 0; b < nb; ++b)
            acc[g][b] = kernels::fma(fbatch(p[g][j]), fbatch::load_unaligned(vh + (j0 + j) * d + b * L), acc[g][b]);
    }
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t b = 0; b < nb; ++b) (acc[g][b] / fbatch(sum[g])).store_unaligned(out + (kvh * groups + g) * d + b * L);
  }
}

// The size argument: a constant of the preset, or the same value known only at run time.
// benchmark::DoNotOptimize on the runtime copy keeps the compiler from propagating it.
template <bool compile_time, std::int64_t N>
auto size_arg() {
  if constexpr (compile_time) {
    return Const<N>{};
  } else {
    std::int64_t n = N;
    benchmark::DoNotOptimize(n);
    return n;
  }
}

// 28 layers of one projection: decode streams each from DRAM once per token (168 MB for gate/up,
// far beyond the L3), so this is the shape the bandwidth roofline governs.
template <bool compile_time, std::int64_t rows, std::int64_t cols>
void BM_matvec_28_layers(benchmark::State& state) {
  const auto w = randn_bf16(layers * rows * cols, 1);
  const auto x = randn(cols, 2);
  std::vector<float> y(static_cast<std::size_t>(rows));
  const auto R = size_arg<compile_time, rows>();
  const auto C = size_arg<compile_time, cols>();
  for (auto _ : state) {
    for (std::int64_t l = 0; l < layers; ++l) matvec(x.data(), w.data() + l * rows * cols, y.data(), R, C);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] =
      benchmark::Counter(static_cast<double>(layers * rows * cols * 2), benchmark::Counter::kIsIterationInvariantRate);
}

// One q_proj-sized matrix (4 MiB) read again and again from the L3: where codegen, not DRAM,
// would show first.
template <bool compile_time>
void BM_matvec_q_proj_cached(benchmark::State& state) {
  const auto w = randn_bf16(n_heads * head_dim * hidden, 1);  // [2048, 1024]
  const auto x = randn(hidden, 2);
  std::vector<float> y(static_cast<std::size_t>(n_heads * head_dim));
  const auto R = size_arg<compile_time, n_heads * head_dim>();
  const auto C = size_arg<compile_time, hidden>();
  for (auto _ : state) {
    matvec(x.data(), w.data(), y.data(), R, C);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] =
      benchmark::Counter(static_cast<double>(n_heads * head_dim * hidden * 2), benchmark::Counter::kIsIterationInvariantRate);
}

// A decode step's norms of one layer: input and post-attention norms over hidden, q_norm and
// k_norm over each head's head_dim.
template <bool compile_time>
void BM_rms_norm_layer(benchmark::State& state) {
  const auto x = randn(n_heads * head_dim, 3);
  const auto w_hidden = randn_bf16(hidden, 4), w_head = randn_bf16(head_dim, 5);
  std::vector<float> out(x.size());
  const auto H = size_arg<compile_time, hidden>();
  const auto D = size_arg<compile_time, head_dim>();
  for (auto _ : state) {
    rms_norm(x.data(), w_hidden.data(), out.data(), 1, H, 1e-6);
    rms_norm(x.data(), w_hidden.data(), out.data(), 1, H, 1e-6);
    rms_norm(x.data(), w_head.data(), out.data(), n_heads, D, 1e-6);
    rms_norm(x.data(), w_head.data(), out.data(), n_kv_heads, D, 1e-6);
    benchmark::DoNotOptimize(out.data());
  }
}

// One layer's decode attention at `context` cached positions (f32 cache: 8 MiB of K and V).
template <bool compile_time>
void BM_attention_decode(benchmark::State& state) {
  const auto q = randn(n_heads * head_dim, 6);
  const auto k = randn(n_kv_heads * context * head_dim, 7), v = randn(n_kv_heads * context * head_dim, 8);
  std::vector<float> out(q.size());
  const auto D = size_arg<compile_time, head_dim>();
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  for (auto _ : state) {
    attention(q.data(), k.data(), v.data(), out.data(), context, D, scale);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes/s"] =
      benchmark::Counter(static_cast<double>(2 * n_kv_heads * context * head_dim * 4), benchmark::Counter::kIsIterationInvariantRate);
}

// The same three workloads through kylin's kernels (runtime sizes, one thread).
template <std::int64_t rows, std::int64_t cols>
void BM_matvec_28_layers_kylin(benchmark::State& state) {
  const auto w = randn_bf16(layers * rows * cols, 1);
  const auto x = randn(cols, 2);
  std::vector<float> y(static_cast<std::size_t>(rows));
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(pool.size(), cols, 1);
  for (auto _ : state) {
    for (std::int64_t l = 0; l < layers; ++l)
      kernels::matmul(x.data(), {DType::bf16, w.data() + l * rows * cols, rows, cols}, nullptr, y.data(), kernels::chunk_plan(1),
                      pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] =
      benchmark::Counter(static_cast<double>(layers * rows * cols * 2), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matvec_q_proj_cached_kylin(benchmark::State& state) {
  const auto w = randn_bf16(n_heads * head_dim * hidden, 1);
  const auto x = randn(hidden, 2);
  std::vector<float> y(static_cast<std::size_t>(n_heads * head_dim));
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(pool.size(), hidden, 1);
  for (auto _ : state) {
    kernels::matmul(x.data(), {DType::bf16, w.data(), n_heads * head_dim, hidden}, nullptr, y.data(), kernels::chunk_plan(1),
                    pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] =
      benchmark::Counter(static_cast<double>(n_heads * head_dim * hidden * 2), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_rms_norm_layer_kylin(benchmark::State& state) {
  const auto x = randn(n_heads * head_dim, 3);
  const auto w_hidden = randn_bf16(hidden, 4), w_head = randn_bf16(head_dim, 5);
  std::vector<float> out(x.size());
  const kernels::MatRef wh{DType::bf16, w_hidden.data(), 1, hidden}, wd{DType::bf16, w_head.data(), 1, head_dim};
  for (auto _ : state) {
    kernels::rms_norm(x.data(), wh, out.data(), 1, 1e-6);
    kernels::rms_norm(x.data(), wh, out.data(), 1, 1e-6);
    kernels::rms_norm(x.data(), wd, out.data(), n_heads, 1e-6);
    kernels::rms_norm(x.data(), wd, out.data(), n_kv_heads, 1e-6);
    benchmark::DoNotOptimize(out.data());
  }
}

void BM_attention_decode_kylin(benchmark::State& state) {
  const auto q = randn(n_heads * head_dim, 6);
  auto k = randn(n_kv_heads * context * head_dim, 7), v = randn(n_kv_heads * context * head_dim, 8);
  std::vector<float> out(q.size());
  ThreadPool pool(1);
  kernels::AttentionScratch scratch(pool.size(), n_heads / n_kv_heads, head_dim);
  const kernels::AttentionShape shape{1, context - 1, n_heads, n_kv_heads, head_dim, context * head_dim,
                                      1.f / std::sqrt(static_cast<float>(head_dim))};
  for (auto _ : state) {
    kernels::attention(q.data(), {DType::f32, k.data()}, {DType::f32, v.data()}, out.data(), shape, pool, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes/s"] =
      benchmark::Counter(static_cast<double>(2 * n_kv_heads * context * head_dim * 4), benchmark::Counter::kIsIterationInvariantRate);
}

// Compile-time and runtime sizes must compute the same floats (same loop code, same order);
// a difference would mean the comparison measures different work.
bool same_results() {
  const auto w = randn_bf16(n_heads * head_dim * hidden, 1);
  const auto x = randn(n_heads * head_dim, 2), k = randn(n_kv_heads * 64 * head_dim, 3), v = randn(n_kv_heads * 64 * head_dim, 4);
  const auto wn = randn_bf16(hidden, 5);
  std::vector<float> a(x.size()), b(x.size());
  auto equal = [&] { return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0; };
  matvec(x.data(), w.data(), a.data(), Const<n_heads * head_dim>{}, Const<hidden>{});
  matvec(x.data(), w.data(), b.data(), n_heads * head_dim, hidden);
  bool ok = equal();
  rms_norm(x.data(), wn.data(), a.data(), 1, Const<hidden>{}, 1e-6);
  rms_norm(x.data(), wn.data(), b.data(), 1, hidden, 1e-6);
  ok = ok && equal();
  attention(x.data(), k.data(), v.data(), a.data(), 64, Const<head_dim>{}, 0.088f);
  attention(x.data(), k.data(), v.data(), b.data(), 64, head_dim, 0.088f);
  return ok && equal();
}

void BM_same_results_check(benchmark::State& state) {
  const bool ok = same_results();
  for (auto _ : state) benchmark::DoNotOptimize(ok);
  if (!ok) state.SkipWithError("compile-time and runtime sizes computed different results");
}

}  // namespace

BENCHMARK(BM_same_results_check)->Iterations(1);
BENCHMARK(BM_matvec_28_layers<true, intermediate, hidden>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_28_layers<false, intermediate, hidden>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_28_layers_kylin<intermediate, hidden>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_28_layers<true, hidden, intermediate>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_28_layers<false, hidden, intermediate>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_28_layers_kylin<hidden, intermediate>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matvec_q_proj_cached<true>)->UseRealTime();
BENCHMARK(BM_matvec_q_proj_cached<false>)->UseRealTime();
BENCHMARK(BM_matvec_q_proj_cached_kylin)->UseRealTime();
BENCHMARK(BM_rms_norm_layer<true>)->UseRealTime();
BENCHMARK(BM_rms_norm_layer<false>)->UseRealTime();
BENCHMARK(BM_rms_norm_layer_kylin)->UseRealTime();
BENCHMARK(BM_attention_decode<true>)->UseRealTime();
BENCHMARK(BM_attention_decode<false>)->UseRealTime();
BENCHMARK(BM_attention_decode_kylin)->UseRealTime();
