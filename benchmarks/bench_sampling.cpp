// Sampler throughput over one Qwen-sized logit row (151,936 tokens): greedy, Qwen3's defaults,
// top-p without top-k (the histogram path), and penalties over a 4k-token context.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kylin/generate/sampler.hpp"

namespace {

constexpr std::size_t kVocab = 151936;  // Qwen2/Qwen3 lm_head rows

// Normal(0, 3) logits: a broad distribution, so top-p keeps many tokens (a hard case).
const std::vector<float>& random_logits() {
  static const std::vector<float> logits = [] {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> row(kVocab);
    for (float& l : row) l = normal(gen);
    return row;
  }();
  return logits;
}

void run(benchmark::State& state, const kylin::SamplingParams& params) {
  kylin::Sampler sampler(kVocab, params);
  std::vector<float> logits = random_logits();  // [vocab]; penalty-free params leave it unchanged
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits));
  state.SetItemsProcessed(state.iterations());
}

void BM_Greedy(benchmark::State& state) {
  kylin::SamplingParams p;
  p.greedy = true;
  run(state, p);
}

void BM_Qwen3Defaults(benchmark::State& state) {  // temperature 0.6, top_k 20, top_p 0.95
  kylin::SamplingParams p;
  p.temperature = 0.6f;
  p.top_k = 20;
  p.top_p = 0.95f;
  p.seed = 1;
  run(state, p);
}

void BM_TopPOnly(benchmark::State& state) {
  kylin::SamplingParams p;
  p.top_p = 0.9f;
  p.seed = 1;
  run(state, p);
}

void BM_Temperature(benchmark::State& state) {  // no filter: every token is a candidate
  kylin::SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 1;
  run(state, p);
}

// Penalties rewrite the row in place, so each iteration restores it first; BM_RowCopy times
// that copy alone.
void BM_PenaltiesContext4k(benchmark::State& state) {
  kylin::SamplingParams p;
  p.temperature = 0.6f;
  p.top_k = 20;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.05f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  p.seed = 1;
  kylin::Sampler sampler(kVocab, p);
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> token(0, static_cast<int>(kVocab) - 1);
  std::vector<int> prompt(3072), generated(1024);  // 4k context
  for (int& t : prompt) t = token(gen);
  for (std::size_t i = 0; i < generated.size(); ++i) generated[i] = i % 2 ? prompt[i] : token(gen);
  const std::vector<float>& original = random_logits();
  std::vector<float> logits(kVocab);
  for (auto _ : state) {
    logits.assign(original.begin(), original.end());
    benchmark::DoNotOptimize(sampler.sample(logits, prompt, generated));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RowCopy(benchmark::State& state) {
  const std::vector<float>& original = random_logits();
  std::vector<float> logits(kVocab);
  for (auto _ : state) {
    logits.assign(original.begin(), original.end());
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_Greedy);
BENCHMARK(BM_Qwen3Defaults);
BENCHMARK(BM_TopPOnly);
BENCHMARK(BM_Temperature);
BENCHMARK(BM_PenaltiesContext4k);
BENCHMARK(BM_RowCopy);
