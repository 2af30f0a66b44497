// Sampler::row_draw with kernels::draw_row (what a backend's draw_rows does where the logits are)
// gives the token Sampler::sample gives from the row, seed for seed, on every row shape a draw sees.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/random_logits.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/kernels/draw_row.hpp"

namespace sampler_row_draw {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using kylin::test::normal_logits;

// `steps` tokens each way from the same seed: sample() of the row, and draw_row of the row under
// row_draw() followed by taking the draw's number, as GenerationRun does.
void check_same_tokens(const kylin::SamplingParams& p, const std::vector<float>& logits, int steps, kylin::SampleableIds ids = {}) {
  kylin::Sampler by_row(logits.size(), p, ids), by_draw(logits.size(), p, ids);
  REQUIRE(by_draw.draws_whole_row(logits.size()));
  const std::size_t cut = std::min(logits.size(), by_draw.sampleable().end());
  kylin::kernels::DrawScratch scratch;
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    std::vector<float> row = logits;
    const int want = by_row.sample(row);
    const kylin::kernels::RowDraw d = by_draw.row_draw();
    CHECK(by_draw.row_draw() == d);  // read, not taken: a second look sees the same number
    const int got = kylin::kernels::draw_row(std::span<const float>(logits).first(cut), d, scratch);
    by_draw.uniform();
    CHECK((got >= 0 ? got : by_draw.fallback(logits.size())) == want);
  }
}

TEST_CASE("a draw over the whole row under row_draw() is the token sample() draws, seed for seed (temperature, top-p, min-p, top-k past the row)") {
  for (const float t : {0.3f, 1.0f, 2.5f})
    for (const float min_p : {0.0f, 0.05f, 0.9f})
      for (const float top_p : {1.0f, 0.9f, 0.3f})
        for (const int top_k : {0, 50, 1000}) {
          CAPTURE(t);
          CAPTURE(min_p);
          CAPTURE(top_p);
          CAPTURE(top_k);
          kylin::SamplingParams p;
          p.temperature = t;
          p.min_p = min_p;
          p.top_p = top_p;
          p.top_k = top_k;  // 50 == the row's length: no cut
          p.seed = 17;
          check_same_tokens(p, normal_logits(50, 3, 3.0f), 200);
        }
  kylin::SamplingParams p;
  p.seed = 5;
  check_same_tokens(p, normal_logits(151'936, 9, 2.0f), 20);                         // a Qwen3 row
  check_same_tokens(p, normal_logits(1'000, 4, 2.0f), 100, kylin::SampleableIds(700, {})); // cut at the tokenizer
  p.top_p = 0.95f;
  check_same_tokens(p, normal_logits(151'936, 9, 2.0f), 20);
  check_same_tokens(p, normal_logits(1'000, 4, 2.0f), 100, kylin::SampleableIds(700, {}));
}

TEST_CASE("a draw over the whole row on edge rows: +inf wins, no logit above -inf gives the fallback, NaN and far logits weigh 0") {
  kylin::SamplingParams p;
  p.seed = 2;
  std::vector<float> row = normal_logits(40, 1, 1.0f);
  row[7] = kInf;
  row[30] = kInf;
  check_same_tokens(p, row, 10);
  kylin::kernels::DrawScratch w;
  CHECK(kylin::kernels::draw_row(row, {.min_weight = 1e-30f}, w) == 7);
  CHECK(kylin::kernels::draw_row(std::vector<float>(9, -kInf), {.min_weight = 1e-30f}, w) == -1);
  CHECK(kylin::kernels::draw_row(std::vector<float>(9, kNaN), {.min_weight = 1e-30f}, w) == -1);
  check_same_tokens(p, std::vector<float>(9, -kInf), 3);
  std::vector<float> mixed(64, kNaN);
  mixed[3] = 1.0f;
  mixed[60] = 1.0f;
  mixed[10] = -1000.0f;  // below the floor: weighs 0
  mixed[11] = -kInf;
  check_same_tokens(p, mixed, 50);
  p.top_p = 0.5f;  // the same rows through top-p's histogram
  check_same_tokens(p, row, 10);
  check_same_tokens(p, std::vector<float>(9, -kInf), 3);
  check_same_tokens(p, mixed, 50);
  p.top_p = 1.0f;
  for (int i = 0; i < 50; ++i) {
    const int id = kylin::kernels::draw_row(mixed, {.min_weight = std::numeric_limits<float>::denorm_min(), .u = i / 50.0}, w);
    CHECK((id == 3 || id == 60));
  }
}

TEST_CASE("draws_whole_row: temperature, top-p and min-p over the whole row; greedy, top-k below the row, penalties and holes need more") {
  auto draws = [](kylin::SamplingParams p, kylin::SampleableIds ids = {}) { return kylin::Sampler(100, p, ids).draws_whole_row(100); };
  kylin::SamplingParams p;
  CHECK(draws(p));
  p.min_p = 0.1f;
  CHECK(draws(p));
  p.top_k = 100;
  CHECK(draws(p));
  p.top_k = 99;
  CHECK_FALSE(draws(p));
  p.top_k = 0;
  p.top_p = 0.9f;
  CHECK(draws(p));
  p.repetition_penalty = 1.1f;
  CHECK_FALSE(draws(p));
  p.repetition_penalty = 1.0f;
  p.temperature = 0.0f;
  CHECK_FALSE(draws(p));
  p.temperature = 1.0f;
  CHECK_FALSE(draws(p, kylin::SampleableIds(100, {5})));
}

}  // namespace sampler_row_draw
