// Batched forward: several sequences, each with its own cache, depth and chunk, in shared passes.
// Each test states the property; the oracles are the single-sequence path and the float64 references.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/greedy_outputs.hpp"
#include "common/reference.hpp"
#include "common/sanitizer.hpp"
#include "kylin/model/model.hpp"

namespace {

const std::string data = KYLIN_TEST_DATA;
const char* const models[] = {"tiny-qwen3-untied",   "small-qwen3",     "odd-qwen3-f16-sharded", "small-qwen2-f32",
                              "e2e-qwen3-fullvocab", "tiny-qwen3-yarn", "tiny-qwen3-moe",        "odd-qwen3-moe-f32-sharded"};

using kylin::test::relative_l2;

int argmax(std::span<const float> x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int>(best);
}

struct Sequence {
  std::vector<int> prefix;  // fed alone before the batch
  std::vector<int> chunk;   // fed in the batch
  kylin::Positions positions;
};

std::vector<Sequence> random_batch(std::mt19937& rng, std::int64_t vocab) {
  std::uniform_int_distribution<int> id(0, static_cast<int>(vocab) - 1), n_seq(2, 6), depth(0, 40), len(2, 40), coin(0, 1);
  std::vector<Sequence> batch(static_cast<std::size_t>(n_seq(rng)));
  for (auto& s : batch) {
    s.prefix.resize(static_cast<std::size_t>(depth(rng)));
    s.chunk.resize(static_cast<std::size_t>(coin(rng) ? 1 : len(rng)));  // decoding or prefilling
    for (int& t : s.prefix) t = id(rng);
    for (int& t : s.chunk) t = id(rng);
    s.positions = coin(rng) ? kylin::Positions::all : kylin::Positions::last;
  }
  return batch;
}

}  // namespace

TEST_CASE("each sequence of a random mixed batch gets the logits and hidden states it gets alone (<= 1e-6 rel. L2), every checkpoint, stored, q8 and q4 weights") {
  std::mt19937 rng(2026);
  for (const char* name : models)
    for (std::int64_t max_pass_rows : {7, 64})  // 7: sequences are cut across several passes
      for (kylin::WeightFormat weights : {kylin::WeightFormat::stored, kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
        CAPTURE(name);
        CAPTURE(max_pass_rows);
        CAPTURE(kylin::weight_format_name(weights));
        kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2, .max_pass_rows = max_pass_rows, .weights = weights});
        const auto V = static_cast<std::size_t>(model.vocab_size()), H = static_cast<std::size_t>(model.hidden_size());
        for (int round = 0; round < kylin::test::repetitions(3, 1); ++round) {
          const auto batch = random_batch(rng, model.vocab_size());
          std::vector<kylin::KVCache> caches;
          std::vector<std::vector<float>> logits, hidden;
          for (const auto& s : batch) {
            caches.push_back(model.new_cache(96));
            if (!s.prefix.empty()) model.forward(s.prefix, caches.back(), std::span<float>{});
            const std::size_t rows = s.positions == kylin::Positions::all ? s.chunk.size() : 1;
            logits.emplace_back(rows * V);
            hidden.emplace_back(rows * H);
          }
          std::vector<kylin::SequenceInput> inputs;
          for (std::size_t i = 0; i < batch.size(); ++i)
            inputs.push_back({batch[i].chunk, caches[i], {logits[i], hidden[i], batch[i].positions}});
          model.forward(inputs);
          for (std::size_t i = 0; i < batch.size(); ++i) {
            CAPTURE(i);
            auto alone = model.new_cache(96);
            std::vector<int> all = batch[i].prefix;
            all.insert(all.end(), batch[i].chunk.begin(), batch[i].chunk.end());
            if (!batch[i].prefix.empty()) model.forward(batch[i].prefix, alone, std::span<float>{});
            std::vector<float> l(logits[i].size()), h(hidden[i].size());
            model.forward(batch[i].chunk, alone, {l, h, batch[i].positions});
            CHECK(relative_l2(logits[i], l) <= 1e-6);
            CHECK(relative_l2(hidden[i], h) <= 1e-6);
            CHECK(caches[i].size() == static_cast<std::int64_t>(all.size()));
            CHECK(caches[i].common_prefix(all) == static_cast<std::int64_t>(all.size()));
          }
        }
      }
}

TEST_CASE("the reference prompts prefilled together, then decoded greedily together, give the float64 references' greedy ids") {
  for (const char* name : models) {
    CAPTURE(name);
    const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + name + ".json"));
    std::vector<std::vector<int>> prompts, expected;
    for (const auto& c : ref.find("cases")->as_array()) {
      auto& p = prompts.emplace_back();
      for (const auto& t : c.find("tokens")->as_array()) p.push_back(static_cast<int>(t.as_int()));
      auto& g = expected.emplace_back();
      for (const auto& t : c.find("greedy")->as_array()) g.push_back(static_cast<int>(t.as_int()));
    }
    kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2, .max_pass_rows = 16});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    std::vector<kylin::KVCache> caches;
    std::vector<std::vector<float>> logits(prompts.size(), std::vector<float>(V));
    std::vector<std::vector<int>> got(prompts.size()), feed = prompts;
    for (std::size_t i = 0; i < prompts.size(); ++i) caches.push_back(model.new_cache(256));
    for (std::size_t step = 0; step < expected.front().size(); ++step) {
      std::vector<kylin::SequenceInput> inputs;
      for (std::size_t i = 0; i < prompts.size(); ++i) inputs.push_back({feed[i], caches[i], {.logits = logits[i]}});
      model.forward(inputs);
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        got[i].push_back(argmax(logits[i]));
        feed[i] = {got[i].back()};
      }
    }
    CHECK(got == expected);
  }
}

TEST_CASE("a bad sequence anywhere in a batch is refused before anything runs: no cache changes") {
  kylin::Model model = kylin::Model::load(data + "/models/tiny-qwen3-untied", {.threads = 1});
  kylin::Model other = kylin::Model::load(data + "/models/small-qwen3", {.threads = 1});
  auto a = model.new_cache(16), b = model.new_cache(16), foreign = other.new_cache(16);
  std::vector<float> la(static_cast<std::size_t>(model.vocab_size())), short_buffer(3);
  const std::vector<int> t{1, 2, 3};
  using In = kylin::SequenceInput;
  CHECK_THROWS_WITH_AS(model.forward(std::span<const In>{}), doctest::Contains("no sequences"), kylin::Error);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.logits = la}}, {t, a, {}}}),
                       doctest::Contains("sequence 1: shares its cache with sequence 0"), kylin::Error);
  if (model.config().num_hidden_layers != other.config().num_hidden_layers || model.config().head_dim != other.config().head_dim)
    CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {}}, {t, foreign, {}}}),
                         doctest::Contains("sequence 1: the cache has another layer or head shape"), kylin::Error);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {}}, {t, b, {.logits = short_buffer}}}),
                       doctest::Contains("sequence 1: logits output buffer holds 3 floats"), kylin::Error);
  std::vector<int> one_id(1);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {}}, {t, b, {.positions = kylin::Positions::all, .greedy = one_id}}}),
                       doctest::Contains("sequence 1: greedy output buffer holds 1 ids, needs 3"), kylin::Error);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.greedy = one_id, .pick_end = model.vocab_size() + 1}}}),
                       doctest::Contains("pick_end"), kylin::Error);
  std::vector<kylin::kernels::RankedLogit> top(4);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {}}, {t, b, {.positions = kylin::Positions::all, .top = top, .top_k = 2}}}),
                       doctest::Contains("sequence 1: top-k output buffer holds 4 entries, needs 6"), kylin::Error);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.top = top, .top_k = 0}}}), doctest::Contains("0 is outside [1, "), kylin::Error);
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.top = top, .top_k = model.vocab_size() + 1}}}), doctest::Contains("top_k"), kylin::Error);
  int drawn = -1;
  const kylin::kernels::RowDraw fine{.inv_temperature = 1.0f, .min_weight = 1e-45f, .u = 0.5};
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.drawn = std::span<int>(&drawn, 1)}}}), doctest::Contains("draw output buffers hold 1 ids and 0 draws"),
                       kylin::Error);
  for (const kylin::kernels::RowDraw bad : {kylin::kernels::RowDraw{.inv_temperature = 0.0f, .min_weight = 1e-45f}, kylin::kernels::RowDraw{.min_weight = 0.0f},
                                            kylin::kernels::RowDraw{.min_weight = 1e-45f, .u = 1.0}, kylin::kernels::RowDraw{.min_weight = 1e-45f, .top_p = 0.0f},
                                            kylin::kernels::RowDraw{.min_weight = 1e-45f, .top_p = NAN}}) {
    CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {.drawn = std::span<int>(&drawn, 1), .draws = std::span<const kylin::kernels::RowDraw>(&bad, 1)}}}),
                         doctest::Contains("a draw needs inv_temperature finite"), kylin::Error);
  }
  auto c = model.new_cache(16);
  model.forward(std::vector<In>{{t, c, {.drawn = std::span<int>(&drawn, 1), .draws = std::span<const kylin::kernels::RowDraw>(&fine, 1)}}});
  CHECK((drawn >= 0 && drawn < model.vocab_size()));  // the same draw passes
  CHECK_THROWS_WITH_AS(model.forward(std::vector<In>{{t, a, {}}, {std::vector<int>{1, 99999}, b, {}}}),
                       doctest::Contains("sequence 1: token id 99999 is outside"), kylin::Error);
  CHECK(a.size() == 0);
  CHECK(b.size() == 0);
}

TEST_CASE("greedy ids handed back by a forward are kernels::argmax of its logits (batch, every position, a cut row), and decoding on ids alone gives the references' greedy tokens") {
  for (const char* name : {"small-qwen3", "tiny-qwen3-moe", "e2e-qwen3-fullvocab"}) {
    CAPTURE(name);
    kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2});
    const kylin::test::Case c = kylin::test::longest_case(name);
    kylin::test::check_greedy_outputs(model, c.tokens);
    auto cache = model.new_cache(128);
    CHECK(kylin::test::greedy_ids(model, cache, c.tokens, static_cast<int>(c.greedy.size())) == c.greedy);
  }
}

TEST_CASE("top-k handed back by a forward is kernels::top_k of its logits (batch, every position, a cut row, k past the device's)") {
  for (const char* name : {"small-qwen3", "tiny-qwen3-moe", "e2e-qwen3-fullvocab"}) {
    CAPTURE(name);
    kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2});
    kylin::test::check_top_outputs(model, kylin::test::longest_case(name).tokens);
  }
}

TEST_CASE("draws handed back by a forward are kernels::draw_row of its logits (batch, every position, a cut row, min-p)") {
  for (const char* name : {"small-qwen3", "tiny-qwen3-moe", "e2e-qwen3-fullvocab"}) {
    CAPTURE(name);
    kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2});
    kylin::test::check_drawn_outputs(model, kylin::test::longest_case(name).tokens);
  }
}

TEST_CASE("hidden states are the LM head's input: logits = lm_head · hidden for the last row") {
  kylin::Model model = kylin::Model::load(data + "/models/small-qwen3", {.threads = 1});
  auto cache = model.new_cache(32);
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size())), hidden(static_cast<std::size_t>(model.hidden_size()));
  model.forward(std::vector<int>{5, 6, 7, 8}, cache, {.logits = logits, .hidden = hidden});
  const auto* lm = model.checkpoint().find(model.checkpoint().find("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight");
  REQUIRE(lm != nullptr);
  std::vector<float> expect(logits.size());
  kylin::kernels::matmul_ref(hidden.data(), {lm->dtype, lm->data, model.vocab_size(), model.hidden_size()}, nullptr, expect.data(), 1);
  CHECK(relative_l2(logits, expect) < 1e-5);
}
