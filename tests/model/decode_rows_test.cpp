// SequenceInput::decode_rows, what speculative decoding verifies drafts with: several tokens of one
// sequence in one pass whose rows equal feeding them one decode step at a time, bit for bit; and
// rewinding the cache past them (KVCache::truncate) leaves it as if they had never been fed.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/sanitizer.hpp"
#include "kylin/model/model.hpp"

namespace decode_rows_test {

const std::string data = KYLIN_TEST_DATA;
const char* const models[] = {"tiny-qwen3-untied",   "small-qwen3",     "odd-qwen3-f16-sharded", "small-qwen2-f32",
                              "e2e-qwen3-fullvocab", "tiny-qwen3-yarn", "tiny-qwen3-moe",        "odd-qwen3-moe-f32-sharded"};

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

struct Variant {
  kylin::WeightFormat weights;
  kylin::WeightLayout layout;
  kylin::DType kv;
  std::int64_t max_pass_rows;  // 3: a verification of more rows is cut across passes
};

const Variant variants[] = {{kylin::WeightFormat::stored, kylin::WeightLayout::packed, kylin::DType::f32, 64},
                            {kylin::WeightFormat::stored, kylin::WeightLayout::stored, kylin::DType::f32, 64},
                            {kylin::WeightFormat::q8, kylin::WeightLayout::packed, kylin::DType::f16, 64},
                            {kylin::WeightFormat::q4, kylin::WeightLayout::packed, kylin::DType::f32, 3}};


TEST_CASE("decode rows: k tokens in one pass give the logits of k one-token steps bit for bit, every checkpoint, weight format, layout and KV type") {
  std::mt19937 rng(41);
  for (const char* name : models)
    for (const Variant& v : variants) {
      CAPTURE(name);
      CAPTURE(kylin::weight_format_name(v.weights));
      CAPTURE(kylin::weight_layout_name(v.layout));
      CAPTURE(v.max_pass_rows);
      kylin::Model model = kylin::Model::load(
          data + "/models/" + name, {.threads = 2, .max_pass_rows = v.max_pass_rows, .kv_dtype = v.kv, .weights = v.weights, .weight_layout = v.layout});
      const auto V = static_cast<std::size_t>(model.vocab_size());
      std::uniform_int_distribution<int> id(0, static_cast<int>(V) - 1);
      for (int round = 0; round < kylin::test::repetitions(2, 1); ++round) {
        std::vector<int> prefix(static_cast<std::size_t>(5 + 7 * round)), rows(static_cast<std::size_t>(1 + 4 * (round + 1)));
        for (int& t : prefix) t = id(rng);
        for (int& t : rows) t = id(rng);
        auto stepped = model.new_cache(64), verified = model.new_cache(64);
        model.forward(prefix, stepped, std::span<float>{});
        model.forward(prefix, verified, std::span<float>{});
        std::vector<float> one(V), all(rows.size() * V);
        std::vector<std::vector<float>> steps;
        for (int t : rows) {
          model.forward(std::span<const int>(&t, 1), stepped, one);
          steps.push_back(one);
        }
        const kylin::SequenceInput in{rows, verified, {.logits = all, .positions = kylin::Positions::all}, true};
        model.forward(std::span<const kylin::SequenceInput>(&in, 1));
        for (std::size_t r = 0; r < rows.size(); ++r) {
          CAPTURE(r);
          CHECK(same_bits(std::span<const float>(all).subspan(r * V, V), steps[r]));
        }
        CHECK(verified.size() == stepped.size());
      }
    }
}

TEST_CASE("decode rows beside other sequences (decoding and prefilling) keep their bits; without the flag a chunk is prefill rows") {
  // row-major weights: there the prefill GEMM sums in another order than the decode kernel
  kylin::Model model = kylin::Model::load(data + "/models/small-qwen3", {.threads = 2, .max_pass_rows = 8, .weight_layout = kylin::WeightLayout::stored});
  const auto V = static_cast<std::size_t>(model.vocab_size());
  const std::vector<int> rows = {11, 22, 33, 44, 55}, other = {7}, prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  auto alone = model.new_cache(32), a = model.new_cache(32), b = model.new_cache(32), c = model.new_cache(32);
  std::vector<std::vector<float>> steps;
  std::vector<float> one(V);
  for (int t : rows) {
    model.forward(std::span<const int>(&t, 1), alone, one);
    steps.push_back(one);
  }
  std::vector<float> all(rows.size() * V), lb(V), lc(V);
  const kylin::SequenceInput batch[] = {{prompt, c, {.logits = lc}}, {rows, a, {.logits = all, .positions = kylin::Positions::all}, true},
                                        {other, b, {.logits = lb}}};
  model.forward(batch);
  for (std::size_t r = 0; r < rows.size(); ++r) CHECK(same_bits(std::span<const float>(all).subspan(r * V, V), steps[r]));
  // The same tokens as a plain chunk run through the GEMM: equal to f32 rounding, not to the bit
  // (were they, the flag would be pointless and this test could not tell the two apart).
  auto chunk = model.new_cache(32);
  model.forward(rows, chunk, all, kylin::Positions::all);
  bool any_differs = false;
  for (std::size_t r = 0; r < rows.size(); ++r) any_differs |= !same_bits(std::span<const float>(all).subspan(r * V, V), steps[r]);
  CHECK(any_differs);
}

TEST_CASE("rejected drafts rolled back with truncate leave no trace: later logits equal those of a cache that never saw them, bit for bit") {
  for (const char* name : {"small-qwen3", "odd-qwen3-moe-f32-sharded", "small-qwen2-f32"}) {
    CAPTURE(name);
    kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    const std::vector<int> prefix = {3, 1, 4, 1, 5, 9, 2, 6}, drafts = {5, 3, 5, 8, 9}, truth = {7, 9, 3};
    auto clean = model.new_cache(32), spec = model.new_cache(32);
    model.forward(prefix, clean, std::span<float>{});
    model.forward(prefix, spec, std::span<float>{});
    std::vector<float> rows((drafts.size() + 1) * V);
    std::vector<int> feed = {truth[0]};
    feed.insert(feed.end(), drafts.begin(), drafts.end());
    const kylin::SequenceInput in{feed, spec, {.logits = rows, .positions = kylin::Positions::all}, true};
    model.forward(std::span<const kylin::SequenceInput>(&in, 1));
    spec.truncate(static_cast<std::int64_t>(prefix.size()) + 1);  // only truth[0] accepted
    CHECK(spec.size() == static_cast<std::int64_t>(prefix.size()) + 1);
    std::vector<float> a(V), b(V);
    model.forward(std::span<const int>(&truth[0], 1), clean, a);
    for (std::size_t i = 1; i < truth.size(); ++i) {
      model.forward(std::span<const int>(&truth[i], 1), clean, a);
      model.forward(std::span<const int>(&truth[i], 1), spec, b);
      CAPTURE(i);
      CHECK(same_bits(a, b));
    }
    CHECK(std::vector<int>(spec.tokens().begin(), spec.tokens().end()) == std::vector<int>(clean.tokens().begin(), clean.tokens().end()));
  }
}

}  // namespace decode_rows_test
