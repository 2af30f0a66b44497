// Tokenizer encode throughput (bytes/s) on English prose, on uncached random words and Chinese,
// and on the worst single pre-tokens: 1 MB of 'a' (one 1 MB word through BPE) and 1 MB of digits.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "kylin/tokenizer/tokenizer.hpp"

namespace {

const kylin::Tokenizer& qwen3() {
  static const kylin::Tokenizer tokenizer = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return tokenizer;
}

// About 1 MB of varied English prose (a public-domain passage, with changing numbers so the
// text is not one repeated cache line of words).
std::string english_prose() {
  const std::string passage =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
      "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
      "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
      "direct the other way - in short, the period was so far like the present period, that some of its "
      "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
      "of comparison only. There were a king with a large jaw and a queen with a plain face, on the throne of "
      "England; there were a king with a large jaw and a queen with a fair face, on the throne of France.\n\n";
  std::string text;
  for (int i = 0; text.size() < (1 << 20); ++i) text += "Chapter " + std::to_string(i) + ". " + passage;
  return text;
}

void encode_bench(benchmark::State& state, const std::string& text) {
  const auto& tokenizer = qwen3();
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tokenizer.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeEnglishProse(benchmark::State& state) { encode_bench(state, english_prose()); }
void BM_Encode1MbOfA(benchmark::State& state) { encode_bench(state, std::string(1 << 20, 'a')); }
void BM_Encode1MbOfDigits(benchmark::State& state) {
  std::string digits(1 << 20, '0');
  for (std::size_t i = 0; i < digits.size(); ++i) digits[i] = static_cast<char>('0' + (i * 7 + i / 10) % 10);
  encode_bench(state, digits);
}
// Random lowercase "words": nearly every pre-token is new, so this measures BPE without the cache.
void BM_EncodeRandomWords(benchmark::State& state) {
  std::string text;
  std::uint64_t x = 88172645463325252ull;
  while (text.size() < (1 << 20)) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const std::size_t length = 3 + x % 9;
    text += ' ';
    for (std::size_t k = 0; k < length; ++k) text += static_cast<char>('a' + (x >> (5 * k + 8)) % 26);
  }
  encode_bench(state, text);
}
void BM_EncodeChinese(benchmark::State& state) {
  const std::string passage =
      "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。"
      "该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。";
  std::string text;
  while (text.size() < (1 << 20)) text += passage;
  encode_bench(state, text);
}
void BM_DecodeEnglishProse(benchmark::State& state) {
  const std::string text = english_prose();
  const auto ids = qwen3().encode(text);
  for (auto _ : state) benchmark::DoNotOptimize(qwen3().decode(ids));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

}  // namespace

BENCHMARK(BM_EncodeEnglishProse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode1MbOfA)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode1MbOfDigits)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeRandomWords)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeChinese)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeEnglishProse)->Unit(benchmark::kMillisecond);
