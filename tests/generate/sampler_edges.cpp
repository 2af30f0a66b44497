// Sampler edge cases: degenerate filters equal greedy or no filter, ties, -inf and NaN
// logits, penalties, seeds that reproduce (and differ) exactly, and sampling from a row's top-k alone.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include "common/random_logits.hpp"
#include "kylin/generate/sampler.hpp"

namespace {

using kylin::SamplingParams;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_logits(std::size_t n, unsigned seed, float scale = 2.0f) { return kylin::test::normal_logits(n, seed, scale); }

SamplingParams seeded(std::uint64_t seed = 1) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

std::vector<int> draws(kylin::Sampler& s, std::vector<float> logits, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(s.sample(logits));
  return out;
}

// Kept ids and weights as (id -> probability) in a dense vector.
std::vector<double> kept(kylin::Sampler& s, std::vector<float> logits) {
  const kylin::SamplingCandidates c = s.candidates(logits);
  std::vector<double> probs(logits.size(), 0.0);
  for (std::size_t j = 0; j < c.ids.size(); ++j) probs[c.ids[j]] = c.weights[j] / c.total;
  return probs;
}

int argmax(const std::vector<float>& logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

}  // namespace

TEST_CASE("edge: top_k 1, temperature 0 and greedy all return the argmax") {
  for (unsigned trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = random_logits(1000 + trial, trial);
    SamplingParams top1 = seeded(trial), cold = seeded(trial), greedy = seeded(trial);
    top1.top_k = 1;
    cold.temperature = 0.0f;
    greedy.greedy = true;
    greedy.temperature = 5.0f;  // greedy wins over every other field
    greedy.top_p = 0.5f;
    for (const SamplingParams& p : {top1, cold, greedy}) {
      kylin::Sampler s(logits.size(), p);
      std::vector<float> row = logits;
      CHECK(s.candidates(row).ids.size() == 1);
      for (int token : draws(s, logits, 5)) CHECK(token == argmax(logits));
    }
  }
}

TEST_CASE("edge: top_p 1, min_p 0 and top_k beyond the vocab keep every token") {
  const std::vector<float> logits = random_logits(3000, 7);
  SamplingParams plain = seeded(), big_k = seeded(), explicit_off = seeded();
  big_k.top_k = 1000000;
  explicit_off.top_p = 1.0f;
  explicit_off.min_p = 0.0f;
  explicit_off.top_k = 0;
  kylin::Sampler a(logits.size(), plain), b(logits.size(), big_k), c(logits.size(), explicit_off);
  const std::vector<double> pa = kept(a, logits);
  for (double p : pa) CHECK(p > 0.0);
  CHECK(kept(b, logits) == pa);
  CHECK(kept(c, logits) == pa);
  CHECK(draws(a, logits, 50) == draws(b, logits, 50));
}

TEST_CASE("edge: all-equal logits are uniform; ties at a filter boundary go to the lowest ids") {
  const std::vector<float> logits(10, 0.5f);
  SamplingParams p = seeded();
  kylin::Sampler plain(10, p);
  for (double q : kept(plain, logits)) CHECK(q == doctest::Approx(0.1));
  p.top_k = 3;
  kylin::Sampler top3(10, p);
  const std::vector<double> k3 = kept(top3, logits);
  CHECK(k3[0] == doctest::Approx(1.0 / 3));
  CHECK(k3[2] == doctest::Approx(1.0 / 3));
  CHECK(k3[3] == 0.0);
  p.top_k = 0;
  p.top_p = 0.5f;  // 5 tokens carry exactly half: the sixth's prior mass reaches top_p
  kylin::Sampler half(10, p);
  const std::vector<double> h = kept(half, logits);
  CHECK(h[4] == doctest::Approx(0.2));
  CHECK(h[5] == 0.0);
  p.greedy = true;
  kylin::Sampler g(10, p);
  CHECK(draws(g, logits, 3) == std::vector<int>{0, 0, 0});
}

TEST_CASE("edge: -inf and NaN logits are never drawn; +inf wins; a row with nothing above -inf gives id 0") {
  std::vector<float> logits = random_logits(200, 3);
  std::set<int> banned;
  for (std::size_t i = 0; i < logits.size(); i += 4) {
    logits[i] = i % 8 == 0 ? -kInf : kNaN;
    banned.insert(static_cast<int>(i));
  }
  for (int top_k : {0, 30}) {
    for (float top_p : {1.0f, 0.9f}) {
      SamplingParams p = seeded();
      p.top_k = top_k;
      p.top_p = top_p;
      kylin::Sampler s(logits.size(), p);
      for (int token : draws(s, logits, 2000)) REQUIRE(banned.count(token) == 0);
    }
  }
  std::vector<float> one_finite(50, -kInf);
  one_finite[17] = -3.0f;
  kylin::Sampler s(50, seeded());
  for (int token : draws(s, one_finite, 20)) CHECK(token == 17);
  CHECK(draws(s, std::vector<float>(50, -kInf), 3) == std::vector<int>{0, 0, 0});
  std::vector<float> nan_then_inf(4, kNaN);
  nan_then_inf[2] = -kInf;
  CHECK(draws(s, nan_then_inf, 1) == std::vector<int>{0});  // the lowest sampleable id, NaN or not
  std::vector<float> with_pos_inf = random_logits(8, 1);
  with_pos_inf[5] = kInf;
  with_pos_inf[6] = kInf;
  CHECK(draws(s, with_pos_inf, 5) == std::vector<int>{5, 5, 5, 5, 5});
}

TEST_CASE("edge: penalties rewrite only context tokens, in place, and leave no state behind") {
  SamplingParams p = seeded();
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.greedy = true;
  kylin::Sampler s(6, p);
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.25f, 1.5f};
  const std::vector<int> prompt = {0, 1, 0};
  const std::vector<int> generated = {3, 3, 1};
  CHECK(s.sample(logits, prompt, generated) == 5);  // token 0 fell from 2.0 to 1.0
  CHECK(logits == std::vector<float>{1.0f, -4.75f, 1.0f, -0.75f, 0.25f, 1.5f});
  // The next call with no context sees no leftover counts.
  std::vector<float> fresh = {2.0f, -2.0f, 1.0f, 0.5f, 0.25f, 1.5f};
  CHECK(s.sample(fresh) == 0);
  CHECK(fresh[0] == 2.0f);
}

TEST_CASE("edge: a repetition penalty turns a repeated greedy token into another") {
  SamplingParams p = seeded();
  p.greedy = true;
  p.repetition_penalty = 1.1f;
  kylin::Sampler s(2, p);
  std::vector<float> logits = {3.0f, 2.9f};
  const std::vector<int> context = {0};
  CHECK(s.sample(logits, context) == 1);  // 3 / 1.1 < 2.9
  std::vector<float> negative = {-1.0f, -1.05f};
  CHECK(s.sample(negative, context) == 1);  // -1 * 1.1 < -1.05
}

TEST_CASE("edge: a frequency penalty over a long context lowers each token by its count") {
  SamplingParams p = seeded();
  p.frequency_penalty = 1.0f;
  kylin::Sampler s(100, p);
  std::vector<float> logits(100, 0.0f);
  std::vector<int> generated;
  for (int i = 0; i < 4096; ++i) generated.push_back(i % 7);  // tokens 0..6, ~585 times each
  s.candidates(logits, {}, generated);
  for (int t = 0; t < 7; ++t) CHECK(logits[t] == -static_cast<float>(4096 / 7 + (t < 4096 % 7 ? 1 : 0)));
  for (int t = 7; t < 100; ++t) CHECK(logits[t] == 0.0f);
}

TEST_CASE("edge: the same seed repeats the same tokens, a different seed gives others, reseed restarts") {
  const std::vector<float> logits = random_logits(5000, 11, 1.0f);
  SamplingParams p = seeded(42);
  p.top_k = 200;
  p.temperature = 1.5f;
  kylin::Sampler a(logits.size(), p), b(logits.size(), p);
  const std::vector<int> first = draws(a, logits, 200);
  CHECK(first == draws(b, logits, 200));
  p.seed = 43;
  kylin::Sampler c(logits.size(), p);
  CHECK(first != draws(c, logits, 200));
  a.reseed(42);
  CHECK(first == draws(a, logits, 200));
  CHECK(std::set<int>(first.begin(), first.end()).size() > 50);  // it really samples
}

TEST_CASE("edge: seed 2024 over 10 equal logits gives the sequence an independent Python xoshiro256** gives") {
  // floor(10 * u) for u = (xoshiro256**(splitmix64 seeding 2024) >> 11) * 2^-53, computed in Python.
  kylin::Sampler s(10, seeded(2024));
  const std::vector<int> expected = {0, 7, 0, 1, 7, 2, 3, 2, 5, 0, 7, 9, 8, 3, 7, 1, 0, 6, 8, 4};
  CHECK(draws(s, std::vector<float>(10, 0.0f), 20) == expected);
}

TEST_CASE("edge: logit rows shorter than the sampler's vocab are sampled within their length") {
  SamplingParams p = seeded();
  p.top_p = 0.9f;
  kylin::Sampler s(1000, p);
  const std::vector<float> logits = random_logits(37, 5);
  for (int token : draws(s, logits, 500)) CHECK(token < 37);
}

TEST_CASE("edge: where only the top_k matter, candidates_from_top on kernels::top_k of the cut row equals candidates of the row, draw for draw") {
  const std::size_t n = 3000, end = 2900;  // rows past `end` are ids no tokenizer decodes
  std::vector<std::vector<float>> rows = {random_logits(n, 1), random_logits(n, 2, 0.01f), std::vector<float>(n, 1.0f),
                                          std::vector<float>(n, -kInf)};
  rows.push_back(rows[0]);
  for (std::size_t i = 0; i < n; i += 3) rows.back()[i] = kNaN;
  rows.back()[end + 5] = kInf;  // past the cut: never picked
  rows.push_back(rows[0]);
  rows.back()[17] = kInf;
  rows.back()[1700] = kInf;
  for (int top_k : {2, 5, 20, 40}) {
    for (float top_p : {1.0f, 0.95f, 0.5f}) {
      for (float min_p : {0.0f, 0.05f}) {
        for (float temperature : {0.6f, 1.5f}) {
          SamplingParams p = seeded(static_cast<std::uint64_t>(top_k) * 7 + 3);
          p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.temperature = temperature;
          kylin::Sampler by_row(n, p, kylin::SampleableIds(end, {})), by_top(n, p, kylin::SampleableIds(end, {}));
          REQUIRE(by_top.needs_only_top_k(n));
          std::vector<kylin::kernels::RankedLogit> top(static_cast<std::size_t>(top_k));
          for (std::size_t r = 0; r < rows.size(); ++r) {
            CAPTURE(top_k);
            CAPTURE(top_p);
            CAPTURE(min_p);
            CAPTURE(r);
            auto row = rows[r];
            kylin::kernels::top_k(std::span<const float>(row).first(end), top);
            for (int draw = 0; draw < 8; ++draw) {
              const kylin::SamplingCandidates a = by_row.candidates(row);
              const std::vector<int> a_ids(a.ids.begin(), a.ids.end());
              const std::vector<float> a_weights(a.weights.begin(), a.weights.end());
              const double a_total = a.total;
              const int a_id = by_row.draw(a);
              const kylin::SamplingCandidates b = by_top.candidates_from_top(top, n);
              CHECK(std::vector<int>(b.ids.begin(), b.ids.end()) == a_ids);
              CHECK(std::vector<float>(b.weights.begin(), b.weights.end()) == a_weights);
              CHECK(b.total == a_total);
              CHECK(by_top.draw(b) == a_id);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("edge: the row itself is needed for greedy, penalties, holes, no top-k, or a top-k reaching the cut") {
  const std::size_t n = 100;
  auto needs = [&](SamplingParams p, kylin::SampleableIds ids = {}) { return kylin::Sampler(n, p, std::move(ids)).needs_only_top_k(n); };
  SamplingParams p = seeded();
  p.top_k = 20;
  CHECK(needs(p));
  CHECK(needs(p, kylin::SampleableIds(21, {})));
  CHECK_FALSE(needs(p, kylin::SampleableIds(20, {})));
  CHECK_FALSE(needs(p, kylin::SampleableIds(90, {3})));
  SamplingParams q = p;
  q.greedy = true;
  CHECK_FALSE(needs(q));
  q = p;
  q.top_k = 0;
  CHECK_FALSE(needs(q));
  q = p;
  q.repetition_penalty = 1.1f;
  CHECK_FALSE(needs(q));
  q = p;
  q.temperature = 0.0f;
  CHECK_FALSE(needs(q));
}
