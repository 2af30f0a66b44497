// Micro-benchmarks of the forward pass's hot kernels at Qwen3-0.6B shapes (hidden 1024, 16/8
// heads x 128, intermediate 3072, vocab 151936). Matvecs report weight bytes/s (decode is
// bandwidth-bound), the GEMM FLOP/s, attention KV bytes/s; BF16, and Q8_0/Q4_0 weights.
// Arg(1)/Arg(2): threads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/linear_attention.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/ops.hpp"

namespace {

using namespace kylin;

std::vector<float> randn(std::int64_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<std::uint16_t> randn_bf16(std::int64_t n, unsigned seed) {
  std::vector<std::uint16_t> v;
  for (float x : randn(n, seed, 0.02f)) v.push_back(f32_to_bf16(x));
  return v;
}

// y[T, rows] = x[T, cols] · W^T with BF16 W; T = 1 is the decode matvec.
void run_matmul(benchmark::State& state, std::int64_t rows, std::int64_t cols, std::int64_t T) {
  const int threads = static_cast<int>(state.range(0));
  const auto w = randn_bf16(rows * cols, 1);
  const auto x = randn(T * cols, 2);
  std::vector<float> y(static_cast<std::size_t>(T * rows));
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  const kernels::MatRef m{DType::bf16, w.data(), rows, cols};
  for (auto _ : state) {
    kernels::matmul(x.data(), m, nullptr, y.data(), kernels::chunk_plan(T), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(rows * cols * 2), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * T), benchmark::Counter::kIsIterationInvariantRate);
}

// Batched decode: n token rows (one per sequence) through the decode kernel of the weights' layout
// (row-major: the dot-product kernel; panels: the panel kernel, what the CPU backend packs weights
// into), as a decode step of n sequences runs them. Successive iterations walk through copies of the
// matrix (>= 256 MB in all) so the weights come from DRAM, as in a real step. Args: {n, threads}.
void run_decode_batch(benchmark::State& state, std::int64_t rows, std::int64_t cols, kernels::Layout layout) {
  const std::int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::int64_t size = layout == kernels::Layout::panels ? kernels::panel_elements(rows, cols) : rows * cols;
  const std::int64_t copies = std::max<std::int64_t>(1, (std::int64_t{256} << 20) / (size * 2));
  const std::vector<std::uint16_t> one = randn_bf16(rows * cols, 1);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(copies * size));
  if (layout == kernels::Layout::panels) kernels::pack_panels(one.data(), rows, cols, w.data());
  else std::copy(one.begin(), one.end(), w.begin());
  for (std::int64_t c = 1; c < copies; ++c) std::copy(w.begin(), w.begin() + size, w.begin() + c * size);
  const auto x = randn(n * cols, 2);
  std::vector<float> y(static_cast<std::size_t>(n * rows));
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, n);
  std::int64_t c = 0;
  for (auto _ : state) {
    const kernels::MatRef m{DType::bf16, w.data() + c * size, rows, cols, layout};
    kernels::matmul(x.data(), m, nullptr, y.data(), kernels::RowPlan{n, n}, pool, scratch);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(rows * cols * n), benchmark::Counter::kIsIterationInvariantRate);
}
constexpr auto row_major = kernels::Layout::rows;
constexpr auto panels = kernels::Layout::panels;
void BM_decode_batch_bf16_1024_to_3072(benchmark::State& s) { run_decode_batch(s, 3072, 1024, row_major); }  // gate/up
void BM_decode_batch_bf16_3072_to_1024(benchmark::State& s) { run_decode_batch(s, 1024, 3072, row_major); }  // down_proj
void BM_decode_batch_bf16_1024_to_151936(benchmark::State& s) { run_decode_batch(s, 151936, 1024, row_major); }  // LM head
void BM_decode_panels_bf16_1024_to_3072(benchmark::State& s) { run_decode_batch(s, 3072, 1024, panels); }
void BM_decode_panels_bf16_3072_to_1024(benchmark::State& s) { run_decode_batch(s, 1024, 3072, panels); }
void BM_decode_panels_bf16_1024_to_151936(benchmark::State& s) { run_decode_batch(s, 151936, 1024, panels); }
BENCHMARK(BM_decode_batch_bf16_1024_to_3072)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime();
BENCHMARK(BM_decode_batch_bf16_3072_to_1024)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime();
BENCHMARK(BM_decode_batch_bf16_1024_to_151936)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_panels_bf16_1024_to_3072)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime();
BENCHMARK(BM_decode_panels_bf16_3072_to_1024)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime();
BENCHMARK(BM_decode_panels_bf16_1024_to_151936)->ArgsProduct({{1, 8, 16}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

// The same with the weights quantized to Q8_0 or Q4_0 (weight bytes/s counts the quantized bytes).
template <kernels::QuantView W>
void run_quant_matmul(benchmark::State& state, std::int64_t rows, std::int64_t cols, std::int64_t T) {
  const int threads = static_cast<int>(state.range(0));
  const auto wf = randn(rows * cols, 1, 0.02f);
  std::vector<std::int8_t> w(kernels::quant_bytes<W>(rows, cols));
  for (std::int64_t r = 0; r < rows; ++r) kernels::quantize_weight_row<W>(wf.data() + r * cols, w.data(), rows, cols, r);
  const auto x = randn(T * cols, 2);
  std::vector<float> y(static_cast<std::size_t>(T * rows));
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  const kernels::MatRef m{W::dtype, w.data(), rows, cols};
  for (auto _ : state) {
    kernels::matmul(x.data(), m, nullptr, y.data(), kernels::chunk_plan(T), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * T), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matvec_bf16_1024_to_2048(benchmark::State& s) { run_matmul(s, 2048, 1024, 1); }      // q_proj
void BM_matvec_bf16_1024_to_3072(benchmark::State& s) { run_matmul(s, 3072, 1024, 1); }      // gate/up
void BM_matvec_bf16_3072_to_1024(benchmark::State& s) { run_matmul(s, 1024, 3072, 1); }      // down_proj
void BM_matvec_bf16_1024_to_151936(benchmark::State& s) { run_matmul(s, 151936, 1024, 1); }  // LM head
void BM_gemm_bf16_512x1024_to_3072(benchmark::State& s) { run_matmul(s, 3072, 1024, 512); }  // prefill gate/up
void BM_gemm_bf16_512x3072_to_1024(benchmark::State& s) { run_matmul(s, 1024, 3072, 512); }  // prefill down_proj
BENCHMARK(BM_matvec_bf16_1024_to_2048)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_bf16_1024_to_3072)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_bf16_3072_to_1024)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_bf16_1024_to_151936)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_gemm_bf16_512x1024_to_3072)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_bf16_512x3072_to_1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_matvec_q8_1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q8View>(s, 3072, 1024, 1); }
void BM_matvec_q8_1024_to_151936(benchmark::State& s) { run_quant_matmul<kernels::Q8View>(s, 151936, 1024, 1); }
void BM_matvec_q4_1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 3072, 1024, 1); }
void BM_matvec_q4_3072_to_1024(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 1024, 3072, 1); }
void BM_matvec_q4_1024_to_151936(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 151936, 1024, 1); }
void BM_gemm_q4_512x1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 3072, 1024, 512); }
void BM_gemm_q8_512x1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q8View>(s, 3072, 1024, 512); }
void BM_gemm_q8_64x1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q8View>(s, 3072, 1024, 64); }  // a 64-token chunk
void BM_gemm_q8_64x3072_to_1024(benchmark::State& s) { run_quant_matmul<kernels::Q8View>(s, 1024, 3072, 64); }
void BM_gemm_q4_64x1024_to_3072(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 3072, 1024, 64); }
void BM_gemm_q4_64x3072_to_1024(benchmark::State& s) { run_quant_matmul<kernels::Q4View>(s, 1024, 3072, 64); }
BENCHMARK(BM_matvec_q8_1024_to_3072)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_q8_1024_to_151936)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_q4_1024_to_3072)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_q4_3072_to_1024)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_matvec_q4_1024_to_151936)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_gemm_q4_512x1024_to_3072)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_q8_512x1024_to_3072)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_q8_64x1024_to_3072)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_q8_64x3072_to_1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_q4_64x1024_to_3072)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_q4_64x3072_to_1024)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// One MoE decode step's expert gate/up pass at the Qwen3-30B-A3B shape (128 experts of 768 x 2048
// Q4_0, 8 chosen a token): 16 products through matmul_each, as SparseMoE runs them, each iteration
// choosing 8 other experts, so the weights come from DRAM. Arg(0) = 1: all 16 products in one
// contiguous 768 * 16 x 2048 matrix instead (the same bytes as one stream). Args: {contiguous, threads}.
void BM_moe_decode_q4_2048_to_768x16(benchmark::State& state) {
  using W = kernels::Q4View;
  constexpr std::int64_t experts = 128, chosen = 8, rows = 768, cols = 2048;
  const bool contiguous = state.range(0) != 0;
  const int threads = static_cast<int>(state.range(1));
  const std::size_t one = kernels::quant_bytes<W>(rows, cols);
  const auto wf = randn(rows * cols, 1, 0.02f);
  std::vector<std::int8_t> first(one);
  for (std::int64_t r = 0; r < rows; ++r) kernels::quantize_weight_row<W>(wf.data() + r * cols, first.data(), rows, cols, r);
  std::vector<std::int8_t> w(2 * experts * one);  // [expert][gate, up]
  for (std::int64_t m = 0; m < 2 * experts; ++m) std::copy(first.begin(), first.end(), w.begin() + m * static_cast<std::int64_t>(one));
  const auto x = randn(cols, 2);
  std::vector<float> y(static_cast<std::size_t>(2 * chosen * rows));
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, 1, 2 * chosen);
  std::mt19937 rng(3);
  std::int64_t step = 0;
  for (auto _ : state) {
    if (contiguous) {
      // 16 neighbouring matrices read as one (its scales then partly nibble bytes: the speed is the same)
      const std::int64_t at = step++ % (experts / chosen) * 2 * chosen * static_cast<std::int64_t>(one);
      const kernels::MatRef m{W::dtype, w.data() + at, 2 * chosen * rows, cols};
      kernels::matmul(x.data(), m, nullptr, y.data(), kernels::chunk_plan(1), pool, scratch);
    } else {
      kernels::DotProduct products[2 * chosen];
      for (std::int64_t e = 0; e < chosen; ++e) {
        const auto pick = static_cast<std::int64_t>(rng() % experts);  // repeats allowed: rare, as in a model
        for (std::int64_t g = 0; g < 2; ++g) {
          const kernels::MatRef m{W::dtype, w.data() + (2 * pick + g) * static_cast<std::int64_t>(one), rows, cols};
          products[2 * e + g] = {x.data(), 1, {m, nullptr, y.data() + (2 * e + g) * rows}};
        }
      }
      kernels::matmul_each(products, pool, scratch);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(2 * chosen * one), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_moe_decode_q4_2048_to_768x16)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime();

// Decode attention of one token against `ctx` cached positions: 16 query heads, 8 KV heads, 128 dims.
// Args: {ctx, threads}. Successive iterations walk through enough layers' caches (>= 512 MB in
// all) that the KV rows come from DRAM, as they do in a real decode step, not from the L3.
void run_attention(benchmark::State& state, DType kv_dtype) {
  const std::int64_t ctx = state.range(0), H = 16, KV = 8, D = 128, T = 1;
  const int threads = static_cast<int>(state.range(1));
  const std::int64_t stride = ctx * D;
  const auto rows = randn(ctx * KV * D, 3);
  const auto q = randn(T * H * D, 4);
  const std::size_t elem = kv_dtype == DType::f16 ? 2 : 4;
  const std::size_t layer_bytes = static_cast<std::size_t>(KV * stride) * elem;
  const std::size_t layers = std::max<std::size_t>(1, (std::size_t{512} << 20) / (2 * layer_bytes));
  std::vector<std::byte> kb(layers * layer_bytes), vb(kb.size());
  for (std::size_t l = 0; l < layers; ++l) {
    kernels::store_kv({kv_dtype, kb.data() + l * layer_bytes}, {KV, D, stride}, {rows.data(), ctx, 0});
    kernels::store_kv({kv_dtype, vb.data() + l * layer_bytes}, {KV, D, stride}, {rows.data(), ctx, 0});
  }
  const kernels::AttentionShape shape{T, ctx - 1, H, KV, D, stride, 1.f / std::sqrt(float(D))};
  ThreadPool pool(threads);
  kernels::AttentionScratch scratch(threads, H / KV, D);
  std::vector<float> out(q.size());
  std::size_t l = 0;
  for (auto _ : state) {
    const kernels::KVRef k{kv_dtype, kb.data() + l * layer_bytes}, v{kv_dtype, vb.data() + l * layer_bytes};
    kernels::attention(q.data(), k, v, out.data(), shape, pool, scratch);
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % layers;
  }
  state.counters["kv_bytes/s"] = benchmark::Counter(static_cast<double>(2 * layer_bytes), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_attention_decode_f32(benchmark::State& s) { run_attention(s, DType::f32); }
void BM_attention_decode_f16(benchmark::State& s) { run_attention(s, DType::f16); }
BENCHMARK(BM_attention_decode_f32)->ArgsProduct({{128, 1024, 4096}, {1, 2}})->UseRealTime();
BENCHMARK(BM_attention_decode_f16)->ArgsProduct({{128, 1024, 4096}, {1, 2}})->UseRealTime();

// Prefill attention of `T` new tokens from an empty cache (the causal T x T half), 16 query heads,
// 8 KV heads, 128 dims, f32 cache: FLOP/s counts QK^T and PV, 4 * heads * head_dim per (query, key)
// pair, as `kylin bench` does. Args: {T, threads}.
void BM_attention_prefill_f32(benchmark::State& state) {
  const std::int64_t T = state.range(0), H = 16, KV = 8, D = 128, stride = T * D;
  const int threads = static_cast<int>(state.range(1));
  const auto rows = randn(T * KV * D, 3);
  const auto q = randn(T * H * D, 4);
  std::vector<float> kb(static_cast<std::size_t>(KV * stride)), vb(kb.size()), out(q.size());
  const kernels::KVRef k{DType::f32, kb.data()}, v{DType::f32, vb.data()};
  kernels::store_kv(k, {KV, D, stride}, {rows.data(), T, 0});
  kernels::store_kv(v, {KV, D, stride}, {rows.data(), T, 0});
  const kernels::AttentionShape shape{T, 0, H, KV, D, stride, 1.f / std::sqrt(float(D))};
  ThreadPool pool(threads);
  kernels::AttentionScratch scratch(threads, H / KV, D);
  for (auto _ : state) {
    kernels::attention(q.data(), k, v, out.data(), shape, pool, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * static_cast<double>(H * D) * static_cast<double>(T) * static_cast<double>(T + 1) / 2.0;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_attention_prefill_f32)->ArgsProduct({{512, 2048}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_rms_norm_1024(benchmark::State& state) {
  const auto x = randn(1024, 5);
  const auto w = randn_bf16(1024, 6);
  std::vector<float> out(1024);
  for (auto _ : state) {
    kernels::rms_norm(x.data(), {DType::bf16, w.data(), 1, 1024}, out.data(), 1, 1e-6);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(1024 * 8, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_rms_norm_1024);

void BM_rope_16_heads(benchmark::State& state) {
  auto x = randn(16 * 128, 7);
  const auto c = randn(64, 8), s = randn(64, 9);
  for (auto _ : state) {
    kernels::rope(x.data(), {1, 16, 128}, {c.data(), s.data()});
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(16 * 128 * 8, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_rope_16_heads);

void BM_softmax_exp_4096(benchmark::State& state) {
  const auto src = randn(4096, 10);
  std::vector<float> x(src);
  std::int64_t n = 4096;
  benchmark::DoNotOptimize(n);  // a constant n trips GCC 12's -Waggressive-loop-optimizations on the tail loop
  for (auto _ : state) {
    x = src;
    benchmark::DoNotOptimize(kernels::detail::exp_shift_sum(x.data(), n, 3.f));
  }
  state.counters["elements/s"] = benchmark::Counter(4096, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_softmax_exp_4096);

void BM_silu_mul_3072(benchmark::State& state) {
  const auto g0 = randn(3072, 11), up = randn(3072, 12);
  std::vector<float> g(g0);
  for (auto _ : state) {
    g = g0;
    kernels::silu_mul(g.data(), up.data(), 3072);
    benchmark::DoNotOptimize(g.data());
  }
  state.counters["elements/s"] = benchmark::Counter(3072, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_silu_mul_3072);

// A Gated DeltaNet layer's core at Qwen3.5-0.8B's shape (16 key and 16 value heads of 128, conv kernel 4): T
// rows of one sequence from the zero state, chunked (T > 1) or one recurrent step (T = 1). FLOP/s counts the
// delta rule's minimum, 8 dk dv per value head and token, as `kylin bench` does. Args: {T, threads}.
void BM_delta_net(benchmark::State& state) {
  const std::int64_t T = state.range(0), nk = 16, nv = 16, dk = 128, dv = 128, K = 4, C = 2 * nk * dk + nv * dv;
  const int threads = static_cast<int>(state.range(1));
  const auto conv = randn(K * C, 1, 0.3f), qkv0 = randn(T * C, 2), z = randn(T * nv * dv, 3), b = randn(T * nv, 4), a = randn(T * nv, 5);
  const std::vector<float> neg_exp_a(static_cast<std::size_t>(nv), -4.f), dt_bias(static_cast<std::size_t>(nv), 1.f), norm(static_cast<std::size_t>(dv), 1.f);
  const kernels::DeltaNetLayer layer{.nk = nk, .nv = nv, .dk = dk, .dv = dv, .conv_kernel = K, .conv = conv.data(), .neg_exp_a = neg_exp_a.data(),
                                     .dt_bias = dt_bias.data(), .norm = norm.data(), .eps = 1e-6};
  std::vector<float> qkv(qkv0), out(static_cast<std::size_t>(T * nv * dv)), in_state(static_cast<std::size_t>(layer.state_floats()), 0.01f);
  std::vector<std::vector<float>> states(static_cast<std::size_t>(T == 1 ? 1 : 1), std::vector<float>(in_state.size()));
  std::vector<float*> outs{states[0].data()};
  ThreadPool pool(threads);
  kernels::DeltaNetScratch scratch(threads, T, layer);
  const kernels::DeltaNetSeq seq{0, T, 0, T == 1, in_state.data(), outs, {}, {}};
  for (auto _ : state) {
    qkv = qkv0;
    kernels::gated_delta_net({qkv.data(), z.data(), b.data(), a.data(), out.data(), T}, layer, std::span(&seq, 1), pool, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(8.0 * static_cast<double>(nv * dk * dv * T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_delta_net)->ArgsProduct({{1, 64, 512}, {1, 2}})->UseRealTime();

}  // namespace
