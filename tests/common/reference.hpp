// Float64 reference logits of tests/data/reference/<model>.json (an independent implementation
// of HF modeling_qwen3/qwen2) and the comparisons the model tests make against them.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/model/kv_cache.hpp"

namespace kylin::test {

inline const std::string data = KYLIN_TEST_DATA;  // tests/data

struct Case {
  std::vector<int> tokens;
  bool all_positions;                       // "all": a row per position; else the last, or these:
  std::vector<std::size_t> positions;       // listed positions ([0, 48, 1000, ...] of a long prompt)
  std::vector<std::vector<double>> logits;  // [rows][vocab]
  std::vector<int> greedy;                  // 12 ids
};

inline std::vector<Case> load_cases(const std::string& model) {
  const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + model + ".json"));
  std::vector<Case> cases;
  for (const auto& c : ref.find("cases")->as_array()) {
    Case k;
    for (const auto& t : c.find("tokens")->as_array()) k.tokens.push_back(static_cast<int>(t.as_int()));
    const auto& positions = *c.find("positions");
    k.all_positions = positions.is_string() && positions.as_string() == "all";
    if (positions.is_array())
      for (const auto& p : positions.as_array()) k.positions.push_back(static_cast<std::size_t>(p.as_int()));
    for (const auto& row : c.find("logits")->as_array()) {
      auto& r = k.logits.emplace_back();
      for (const auto& x : row.as_array()) r.push_back(x.as_double());
    }
    for (const auto& g : c.find("greedy")->as_array()) k.greedy.push_back(static_cast<int>(g.as_int()));
    cases.push_back(std::move(k));
  }
  return cases;
}

// The larger of two errors, NaN if either is: std::max(worst, NaN) returns worst, so a row of NaN
// logits would pass a bar on the worst row.
inline double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b); }

// ||ours - ref|| / ||ref|| of two float rows of the same length.
inline double relative_l2(std::span<const float> ours, std::span<const float> ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (double(ours[i]) - ref[i]) * (double(ours[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

inline double relative_l2(const float* ours, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = ours[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

inline int argmax(const float* x, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int>(best);
}

template <class M>
std::vector<int> greedy(M& model, kylin::KVCache& cache, std::vector<float> logits, int n) {
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const int next = argmax(logits.data() + logits.size() - V, V);
    out.push_back(next);
    if (i + 1 < n) logits = model.logits_last(std::vector<int>{next}, cache);
  }
  return out;
}

}  // namespace kylin::test
