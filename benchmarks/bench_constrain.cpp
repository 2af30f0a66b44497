// Constrained decoding's cost per token on the full Qwen3 vocabulary (151,936 rows): masking a
// row from a cached mask, a cold trie walk (a parser state seen for the first time), accepting a
// token; and greedy decode through Session with and without a constraint, on the model in
// $KYLIN_BENCH_MODEL (e.g. a Qwen3-0.6B-shaped checkpoint from `kylin make-test-model`) or the
// tiny test checkpoint.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/generate/session.hpp"

namespace {

const kylin::Tokenizer& bench_tokenizer() {
  static const kylin::Tokenizer t = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return t;
}

std::shared_ptr<const kylin::constrain::TokenTrie> bench_trie() {
  static const auto t = std::make_shared<const kylin::constrain::TokenTrie>(
      kylin::constrain::TokenTrie::build(bench_tokenizer(), {151645, 151643}, 151936));
  return t;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
  "tags":{"type":"array","items":{"enum":["a","b","c"]}}},"required":["name","age","tags"]})";

// The prefix of an answer leading into the state measured.
std::unique_ptr<kylin::constrain::Constraint> at(const std::string& prefix) {
  auto c = std::make_unique<kylin::constrain::Constraint>(kylin::constrain::json_schema_grammar(kylin::json::parse(kSchema)), bench_trie());
  for (int id : bench_tokenizer().encode(prefix)) c->accept(id);
  return c;
}

void BM_TrieBuild(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kylin::constrain::TokenTrie::build(bench_tokenizer(), {151645}, 151936));
}

// A mask already cached: the common case once a state has been seen.
void BM_MaskCached(benchmark::State& state, const std::string& prefix) {
  auto c = at(prefix);
  std::vector<float> row(151936, 0.5f);  // [vocab]
  c->mask(row);
  for (auto _ : state) {
    c->mask(row);
    benchmark::DoNotOptimize(row.data());
  }
}

// A state seen for the first time: the trie walk.
void BM_MaskCold(benchmark::State& state, const std::string& prefix) {
  std::vector<float> row(151936, 0.5f);  // [vocab]
  for (auto _ : state) {
    state.PauseTiming();
    auto c = at(prefix);
    state.ResumeTiming();
    c->mask(row);
    benchmark::DoNotOptimize(row.data());
  }
}

void BM_Accept(benchmark::State& state) {
  auto c = at("{\"name\":\"");
  const int id = bench_tokenizer().encode(" hello")[0];
  for (auto _ : state) c->accept(id);
}

// One whole answer replayed through mask + accept, as Session drives them: microseconds per token
// of constraint work alone, free of the model's timing noise. cold: a fresh constraint per answer
// (every state walked for the first time, as for a new request); warm: the same one reused.
void BM_Replay(benchmark::State& state, bool cold) {
  const auto grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"object","properties":{
    "title":{"type":"string","maxLength":40},"year":{"type":"integer"},"genre":{"enum":["drama","comedy","documentary"]},
    "cast":{"type":"array","items":{"type":"string","maxLength":24},"maxItems":3}},"required":["title","year","genre","cast"]})"));
  const std::vector<int> answer = bench_tokenizer().encode(
      R"({"title":"The Sea, the Sky and the Long Road Home","year":1994,"genre":"documentary","cast":["Ann Lee","Bo Chen","Carla Díaz"]})");
  auto warm = std::make_unique<kylin::constrain::Constraint>(grammar, bench_trie());
  std::vector<float> row(151936, 0.5f);  // [vocab]
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto c = cold ? std::make_unique<kylin::constrain::Constraint>(grammar, bench_trie()) : nullptr;
    kylin::constrain::Constraint& k = cold ? *c : *warm;
    k.begin(false);
    for (int id : answer) {
      k.mask(row);
      k.accept(id);
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!k.finished()) state.SkipWithError("the replayed answer does not complete the schema");
  }
  state.counters["us_per_token"] = 1e6 * seconds / static_cast<double>(state.iterations() * answer.size());
  state.counters["tokens"] = static_cast<double>(answer.size());
}

enum class DecodeMode { unconstrained, string_warm, object_cold };

// Greedy decode of up to 64 tokens, reporting ms per decoded token (the first token, which comes
// out of the prefill, not counted). string_warm: the answer is a JSON string (free text until the
// model closes it) and the constraint's DFA and masks stay warm across iterations, the steady
// state. object_cold: a fresh constraint per answer under an object schema (keys, enums, bounded
// strings, integers), so every state is walked for the first time, as for a new request.
void BM_Decode(benchmark::State& state, DecodeMode mode) {
  const char* env = std::getenv("KYLIN_BENCH_MODEL");
  static auto engine = kylin::Engine::load(env ? env : std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat",
                                           {.threads = 0, .max_pass_rows = 512, .context_length = 512});
  static auto trie = std::make_shared<const kylin::constrain::TokenTrie>(kylin::constrain::TokenTrie::build(
      engine->tokenizer(), engine->eos_ids(), static_cast<std::size_t>(engine->model().vocab_size())));
  const auto string_grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"string"})"));
  const auto object_grammar = kylin::constrain::json_schema_grammar(kylin::json::parse(R"({"type":"object","properties":{
    "title":{"type":"string","maxLength":24},"year":{"type":"integer"},"genre":{"enum":["drama","comedy","documentary"]},
    "cast":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":3}},"required":["title","year","genre","cast"]})"));
  kylin::Session session(*engine);
  kylin::constrain::Constraint warm(string_grammar, trie);
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = 64;
  o.ignore_eos = true;
  const std::vector<int> prompt = engine->tokenizer().encode("Write a long sentence about the sea:");
  double ms = 0, tokens = 0;
  for (auto _ : state) {
    std::unique_ptr<kylin::constrain::Constraint> cold;
    if (mode == DecodeMode::string_warm) o.constraint = &warm;
    if (mode == DecodeMode::object_cold) {
      cold = std::make_unique<kylin::constrain::Constraint>(object_grammar, trie);
      o.constraint = cold.get();
    }
    const kylin::Generation g = session.generate(prompt, o);
    ms += g.stats.decode_ms;
    tokens += static_cast<double>(g.stats.generated_tokens - 1);
  }
  state.counters["ms_per_token"] = tokens > 0 ? ms / tokens : 0;
  state.counters["tokens"] = tokens / static_cast<double>(state.iterations());
}

BENCHMARK(BM_TrieBuild)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaskCached, in_string, std::string("{\"name\":\"ab"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaskCached, object_start, std::string(""))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaskCold, in_string, std::string("{\"name\":\"ab"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaskCold, in_integer, std::string("{\"name\":\"ab\",\"age\":1"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaskCold, object_start, std::string(""))->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Accept)->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Replay, cold, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, warm, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, unconstrained, DecodeMode::unconstrained)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Decode, string_warm, DecodeMode::string_warm)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Decode, object_cold, DecodeMode::object_cold)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
