// Prompt cache (issue 20): loading a stored KV prefix against prefilling it. A prefix of
// KYLIN_BENCH_PREFIX tokens (default 2000) on the checkpoint in KYLIN_BENCH_MODEL (default the
// small test model; docs/PERFORMANCE.md uses a full-size random Qwen3-0.6B from
// `kylin make-test-model`), f32 and f16 KV: prefill, save (write + rename), the copy a store costs
// the request's thread, load from the page cache, and load after the file's pages were dropped
// (posix_fadvise DONTNEED: read from the disk).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "kylin/generate/prompt_cache.hpp"

namespace {

namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

struct Setup {
  kylin::Model model;
  kylin::KVFileMeta meta;
  std::vector<int> tokens;  // [prefix]
  fs::path file;
};

// One model per KV dtype (0: f32, 1: f16), loaded once; its prefix prefilled once and saved.
Setup& setup(int dtype) {
  static std::unique_ptr<Setup> s[2];
  if (!s[dtype]) {
    const fs::path dir = env_or("KYLIN_BENCH_MODEL", std::string(KYLIN_TEST_DATA) + "/models/small-qwen3");
    const auto n = static_cast<std::size_t>(std::stoll(env_or("KYLIN_BENCH_PREFIX", "2000")));
    auto model = kylin::Model::load(dir, {.threads = 0, .max_pass_rows = 512, .kv_dtype = dtype ? kylin::DType::f16 : kylin::DType::f32});
    const auto& c = model.config();
    kylin::KVFileMeta meta{kylin::model_identity(dir), model.kv_dtype(), c.num_hidden_layers, c.num_key_value_heads, c.head_dim};
    std::mt19937 rng(1);
    std::vector<int> tokens(n);
    for (auto& t : tokens) t = static_cast<int>(rng() % static_cast<unsigned>(std::min<std::int64_t>(c.vocab_size, 150000)));
    const fs::path file = fs::temp_directory_path() / ("kylin-bench-prompt-cache-" + std::to_string(dtype) + ".kvc");
    s[dtype] = std::make_unique<Setup>(Setup{std::move(model), meta, tokens, file});
    auto cache = s[dtype]->model.new_cache(static_cast<std::int64_t>(n) + 16);
    std::vector<float> logits(static_cast<std::size_t>(s[dtype]->model.vocab_size()));
    s[dtype]->model.forward(tokens, cache, logits);
    kylin::write_kv_file(file, meta, cache, cache.size());
  }
  return *s[dtype];
}

void BM_prefill(benchmark::State& state) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  auto cache = s.model.new_cache(static_cast<std::int64_t>(s.tokens.size()) + 16);
  std::vector<float> logits(static_cast<std::size_t>(s.model.vocab_size()));
  for (auto _ : state) {
    cache.reset();
    s.model.forward(s.tokens, cache, logits);
  }
  state.counters["tokens"] = static_cast<double>(s.tokens.size());
}

void BM_save(benchmark::State& state) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  auto cache = s.model.new_cache(static_cast<std::int64_t>(s.tokens.size()) + 16);
  kylin::KVFileReader(s.file, s.meta).load_into(cache);
  std::size_t bytes = 0;
  for (auto _ : state) bytes = kylin::write_kv_file(s.file, s.meta, cache, cache.size());
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

// What the request's thread pays for storing: PromptCache::store copies the rows out of the KV
// cache and queues them; the writer thread's write is waited for outside the timing.
void BM_store_copy(benchmark::State& state) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  auto cache = s.model.new_cache(static_cast<std::int64_t>(s.tokens.size()) + 16);
  kylin::KVFileReader(s.file, s.meta).load_into(cache);
  const fs::path dir = fs::temp_directory_path() / "kylin-bench-prompt-cache-dir";
  kylin::PromptCache pc(s.meta, {.dir = dir, .max_bytes = std::uint64_t{4} << 30, .min_tokens = 16, .warn = {}});
  for (auto _ : state) {
    if (!pc.store(cache, cache.size())) state.SkipWithError("not stored");
    state.PauseTiming();
    pc.flush();
    fs::remove(pc.entry_path(cache.tokens()));
    state.ResumeTiming();
  }
  fs::remove_all(dir);
}

// cold: the file's pages are dropped from the page cache before each load (after an fsync).
void load(benchmark::State& state, bool cold) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  auto cache = s.model.new_cache(static_cast<std::int64_t>(s.tokens.size()) + 16);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      const int fd = ::open(s.file.c_str(), O_RDONLY);
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
      state.ResumeTiming();
    }
    kylin::KVFileReader file(s.file, s.meta);
    file.load_into(cache);
  }
  state.counters["MB"] = static_cast<double>(fs::file_size(s.file)) / 1e6;
}
void BM_load_page_cache(benchmark::State& state) { load(state, false); }
void BM_load_cold(benchmark::State& state) { load(state, true); }

}  // namespace

BENCHMARK(BM_prefill)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_save)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_store_copy)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_load_page_cache)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_load_cold)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);
