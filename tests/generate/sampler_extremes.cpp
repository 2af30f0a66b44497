// The sampler is total: for every parameter value validation accepts (0, subnormal, huge) and
// every logit row (+-inf, NaN, +-FLT_MAX, subnormal spreads), each call returns a sampleable id
// of the row that the reference gives a non-zero probability, greedy returns the argmax among
// sampleable ids, and ids that are no token (past SampleableIds::end() or holes) never come out.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kylin/generate/sampler.hpp"
#include "kylin/generate/sampler_reference.hpp"

namespace sampler_extremes {

using kylin::SampleableIds;
using kylin::SamplingParams;
using Limits = std::numeric_limits<float>;

constexpr float kInf = Limits::infinity();
constexpr float kNaN = Limits::quiet_NaN();
constexpr float kMax = Limits::max();
constexpr float kDenorm = Limits::denorm_min();
constexpr std::size_t kRow = 64;

// Hostile rows: each kind is a way a broken model, a bad checkpoint or a logit hook can go wrong.
std::vector<float> hostile_row(int kind, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(kRow);
  for (float& l : row) l = normal(gen);
  std::uniform_int_distribution<std::size_t> any(0, kRow - 1);
  switch (kind) {
    case 0: break;                                          // ordinary
    case 1: row.assign(kRow, -kInf); break;                 // nothing usable
    case 2: row.assign(kRow, kNaN); break;                  // nothing usable
    case 3: for (std::size_t i = 0; i < kRow; ++i) row[i] = i % 3 ? kNaN : -kInf; break;
    case 4: row[any(gen)] = kInf; break;                    // one +inf
    case 5: for (int i = 0; i < 5; ++i) row[any(gen)] = kInf; break;
    case 6: for (std::size_t i = 0; i < kRow; ++i) row[i] = i % 2 ? kMax : -kMax; break;
    case 7: for (std::size_t i = 0; i < kRow; ++i) row[i] = static_cast<float>(i % 7) * kDenorm; break;
    case 8: row.assign(kRow, 1e30f); break;                 // all tied, huge
    case 9: row.assign(kRow, -kInf); row[any(gen)] = -3.0f; break;
    default: {                                              // a mix of everything
      const float pool[] = {kInf, -kInf, kNaN, kMax, -kMax, kDenorm, 0.0f, 1e30f, -1e30f, 1.0f};
      std::uniform_int_distribution<std::size_t> pick(0, std::size(pool) - 1 + 4);  // some stay normal
      for (float& l : row)
        if (const std::size_t k = pick(gen); k < std::size(pool)) l = pool[k];
    }
  }
  return row;
}
constexpr int kRowKinds = 11;

std::vector<SampleableIds> sampleable_sets() {
  std::vector<int> only_32;
  for (int i = 0; i < 32; ++i) only_32.push_back(i);
  return {SampleableIds{},                                   // every id
          SampleableIds(48, {}),                             // a prefix (lm_head wider than the tokenizer)
          SampleableIds(48, {0, 1, 5, 17, 40}),              // a prefix with holes, the lowest ids among them
          SampleableIds(33, only_32)};                       // one token: 32
}

template <class T>
T pick(std::mt19937& gen, std::initializer_list<T> values) {
  std::uniform_int_distribution<std::size_t> i(0, values.size() - 1);
  return values.begin()[i(gen)];
}

SamplingParams extreme_params(float temperature, std::mt19937& gen) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = pick<int>(gen, {0, 0, 1, 2, 7, static_cast<int>(kRow) - 1, static_cast<int>(kRow), 1000,
                            std::numeric_limits<int>::max()});
  p.top_p = pick<float>(gen, {1.0f, 1.0f, kDenorm, 1e-30f, 0.5f, 0.95f, std::nextafter(1.0f, 0.0f)});
  p.min_p = pick<float>(gen, {0.0f, 0.0f, kDenorm, 1e-30f, 0.5f, 1.0f});
  p.repetition_penalty = pick<float>(gen, {1.0f, 1.0f, kDenorm, 1e-30f, 0.5f, 2.0f, 1e30f, kMax});
  p.presence_penalty = pick<float>(gen, {0.0f, 0.0f, -kMax, -1e30f, -1.0f, 1.0f, 1e30f, kMax});
  p.frequency_penalty = pick<float>(gen, {0.0f, 0.0f, -kMax, -1e30f, -1.0f, 1.0f, 1e30f, kMax});
  p.seed = pick<std::uint64_t>(gen, {0, 1, 42, std::numeric_limits<std::uint64_t>::max(), std::uint64_t{1} << 63});
  p.greedy = pick<bool>(gen, {false, false, false, true});
  return p;
}

// Context ids as a client could send them: in holes, past end(), past the row, negative.
std::vector<int> hostile_context(std::size_t count, std::mt19937& gen) {
  std::uniform_int_distribution<int> id(-3, static_cast<int>(kRow) + 10);
  std::vector<int> ids(count);
  for (int& t : ids) t = id(gen);
  return ids;
}

std::string describe(const SamplingParams& p) {
  return "T " + std::to_string(p.temperature) + " (" + std::to_string(p.temperature == 0 ? 0.0 : std::log10(p.temperature)) +
         ") top_k " + std::to_string(p.top_k) + " top_p " + std::to_string(p.top_p) + " min_p " +
         std::to_string(p.min_p) + " rep " + std::to_string(p.repetition_penalty) + " presence " +
         std::to_string(p.presence_penalty) + " frequency " + std::to_string(p.frequency_penalty) + " greedy " +
         std::to_string(p.greedy);
}


TEST_CASE("total: extreme params x hostile rows x sampleable sets give a sampleable id with reference probability > 0") {
  const float temperatures[] = {0.0f,  kDenorm, 1e-45f, 1e-40f, 2.9e-39f, 3e-39f, Limits::min(),
                                1e-20f, 0.6f,   1.0f,   1e20f,  kMax};
  std::mt19937 gen(2026);  // test data only
  int calls = 0;
  for (const SampleableIds& ids : sampleable_sets())
    for (int kind = 0; kind < kRowKinds; ++kind)
      for (float t : temperatures)
        for (int rep = 0; rep < 6; ++rep) {
          const SamplingParams p = extreme_params(t, gen);
          REQUIRE_NOTHROW(p.validate());  // every case is one that validation lets through
          const std::vector<float> row = hostile_row(kind, gen);
          const std::vector<int> prompt = hostile_context(12, gen), generated = hostile_context(6, gen);
          const std::vector<double> want = kylin::detail::reference_sample_distribution(row, prompt, generated, p, ids);
          kylin::Sampler sampler(kRow, p, ids);
          INFO("row kind " << kind << " end " << ids.end() << " holes " << ids.holes().size() << " " << describe(p));
          std::vector<float> logits = row;  // penalised and masked in place
          const kylin::SamplingCandidates c = sampler.candidates(logits, prompt, generated);
          REQUIRE(!c.ids.empty());
          REQUIRE(c.total > 0.0);
          REQUIRE(std::isfinite(c.total));
          double kept_mass = 0.0;
          for (std::size_t j = 0; j < c.ids.size(); ++j) {
            REQUIRE(ids.contains(c.ids[j]));
            REQUIRE(c.weights[j] > 0.0f);
            REQUIRE(want[static_cast<std::size_t>(c.ids[j])] > 0.0);  // the reference keeps it too
            kept_mass += want[static_cast<std::size_t>(c.ids[j])];
          }
          CHECK(kept_mass == doctest::Approx(1.0));  // ... and keeps nothing else
          for (int draw = 0; draw < 3; ++draw) {
            logits = row;
            const int id = sampler.sample(logits, prompt, generated);
            REQUIRE(id >= 0);
            REQUIRE(static_cast<std::size_t>(id) < kRow);
            REQUIRE(ids.contains(id));
            REQUIRE(want[static_cast<std::size_t>(id)] > 0.0);
            if (p.is_greedy()) REQUIRE(want[static_cast<std::size_t>(id)] == 1.0);
            ++calls;
          }
        }
  CHECK(calls == 4 * kRowKinds * 12 * 6 * 3);
}

TEST_CASE("total: every subnormal temperature samples exactly as greedy (1/T overflows), small normal ones still sample") {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(1000);
  for (float& l : row) l = normal(gen);
  SamplingParams greedy;
  greedy.greedy = true;
  kylin::Sampler reference(row.size(), greedy);
  std::vector<float> copy = row;
  const int argmax = reference.sample(copy);
  for (float t : {kDenorm, 1e-45f, 1e-44f, 1e-40f, 1e-39f, 2.9e-39f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 5;
    INFO("temperature " << t);
    CHECK(p.is_greedy());
    kylin::Sampler s(row.size(), p);
    for (int i = 0; i < 5; ++i) {
      copy = row;
      CHECK(s.sample(copy) == argmax);
    }
  }
  for (float t : {3e-39f, Limits::min(), 1e-30f}) {  // 1/T finite: sampled, and this cold it is the argmax
    SamplingParams p;
    p.temperature = t;
    p.seed = 5;
    INFO("temperature " << t);
    CHECK_FALSE(p.is_greedy());
    kylin::Sampler s(row.size(), p);
    copy = row;
    CHECK(s.sample(copy) == argmax);
  }
}

TEST_CASE("sampleable ids: greedy returns the argmax among tokens when the overall argmax is past end() or a hole") {
  std::vector<float> row(100, 0.0f);
  row[95] = kInf;   // past end: no token
  row[10] = 1e30f;  // a hole
  row[30] = 5.0f;
  row[31] = 4.99f;
  const SampleableIds ids(90, {10, 11});
  SamplingParams greedy, cold_top_k, cold_top_p, subnormal;
  greedy.greedy = true;
  cold_top_k.temperature = cold_top_p.temperature = 1e-30f;  // sampled, but only the argmax weighs > 0
  cold_top_k.top_k = 3;
  cold_top_p.top_p = 0.5f;
  subnormal.temperature = 1e-45f;
  for (SamplingParams p : {greedy, cold_top_k, cold_top_p, subnormal}) {
    p.seed = 1;
    kylin::Sampler s(row.size(), p, ids);
    std::vector<float> logits = row;
    CHECK(s.sample(logits) == 30);
    CHECK(logits[10] == -kInf);  // holes are masked in place, like penalties
    CHECK(logits[95] == kInf);   // past end() the row is not touched
  }
  SamplingParams sampled;
  sampled.seed = 3;
  sampled.temperature = 1e20f;  // nearly uniform over every token
  kylin::Sampler s(row.size(), sampled, ids);
  std::vector<int> seen(row.size(), 0);
  for (int i = 0; i < 3000; ++i) {
    std::vector<float> logits = row;
    logits[30] = logits[31] = 0.0f;
    logits[95] = 1e30f;  // no +inf: every finite logit is a candidate
    ++seen[static_cast<std::size_t>(s.sample(logits))];
  }
  for (int id : {10, 11}) CHECK(seen[static_cast<std::size_t>(id)] == 0);
  for (int id = 90; id < 100; ++id) CHECK(seen[static_cast<std::size_t>(id)] == 0);
  CHECK(seen[0] > 0);
  CHECK(seen[89] > 0);
}

TEST_CASE("sampleable ids: a row with no usable logit gives the lowest sampleable id on every path") {
  const SampleableIds ids(40, {0, 1, 2, 7});
  REQUIRE(ids.first() == 3);
  std::vector<std::vector<float>> rows = {std::vector<float>(50, -kInf), std::vector<float>(50, kNaN)};
  rows.push_back(rows[0]);
  rows.back()[45] = kInf;  // usable only past end()
  rows.back()[1] = 2.0f;   // and in a hole
  for (const auto& row : rows)
    for (int top_k : {0, 1, 5}) {
      for (float top_p : {1.0f, 0.5f}) {
        SamplingParams p;
        p.top_k = top_k;
        p.top_p = top_p;
        p.seed = 9;
        kylin::Sampler s(row.size(), p, ids);
        std::vector<float> logits = row;
        CHECK(s.sample(logits) == 3);
      }
    }
}

TEST_CASE("SampleableIds: scan finds the end and holes; a set with no token is refused by name") {
  const std::vector<bool> is_token = {false, true, true, false, true, false, false};
  const SampleableIds ids = SampleableIds::scan(is_token.size(), [&](int id) { return is_token[static_cast<std::size_t>(id)]; });
  CHECK(ids.end() == 5);
  CHECK(std::vector<int>(ids.holes().begin(), ids.holes().end()) == std::vector<int>{0, 3});
  CHECK(ids.first() == 1);
  for (int id = -1; id < 8; ++id) CHECK(ids.contains(id) == (id >= 0 && id < 7 && is_token[static_cast<std::size_t>(id)]));
  CHECK(SampleableIds{}.contains(1 << 30));
  CHECK_THROWS_WITH_AS(SampleableIds::scan(4, [](int) { return false; }), doctest::Contains("nothing could be sampled"),
                       kylin::Error);
  CHECK_THROWS_AS(SampleableIds(3, {0, 1, 2}), kylin::Error);
}

TEST_CASE("draw: candidates with no token (made by hand) give the fallback id instead of reading out of bounds") {
  SamplingParams p;
  p.seed = 1;
  kylin::Sampler s(8, p, SampleableIds(8, {0}));
  std::vector<float> row(8, 0.0f);
  s.candidates(row);  // sets the fallback for this row
  CHECK(s.draw(kylin::SamplingCandidates{}) == 1);
}

}  // namespace sampler_extremes
