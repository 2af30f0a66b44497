// Quantized weights (Q8_0, Q4_0) against the float64 references: how far the logits move and how
// often the reference's top token survives, and the bars every backend's quantized path meets
// (tests/model/forward_test.cpp on the CPU, the emulated CUDA backend, kylin-gpu-check on a GPU).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/reference.hpp"
#include "kylin/model/model.hpp"

namespace kylin::test {

// Rows by prefill (GEMM rows) and, for the "all" cases, token by token (decode rows): relative L2
// per row, and the rows whose reference top token stays our first (top-1) or among our first five.
struct Agreement {
  std::vector<double> l2;  // per row
  int top1 = 0, top5 = 0;
  int rows() const { return static_cast<int>(l2.size()); }
  double worst() const {
    double w = 0;
    for (double x : l2) w = worse(w, x);
    return w;
  }
  double median() const {
    std::vector<double> v = l2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  void add(const float* row, std::size_t V, const std::vector<double>& ref) {
    l2.push_back(relative_l2(row, ref));
    const auto best = static_cast<std::size_t>(std::max_element(ref.begin(), ref.end()) - ref.begin());
    const auto above = std::count_if(row, row + V, [&](float x) { return !(x <= row[best]); });  // NaN counts as above
    top1 += above == 0;
    top5 += above < 5;
  }
  void merge(const Agreement& o) {
    l2.insert(l2.end(), o.l2.begin(), o.l2.end());
    top1 += o.top1;
    top5 += o.top5;
  }
};

// Every reference row of checkpoint `name` on `model` (loaded with quantized weights).
template <class M>
Agreement quantized_agreement(M& model, const std::string& name) {
  const auto V = static_cast<std::size_t>(model.vocab_size());
  Agreement a;
  for (const Case& c : load_cases(name)) {
    const auto n = static_cast<std::int64_t>(c.tokens.size()) + 16;
    auto cache = model.new_cache(std::max<std::int64_t>(256, n));
    if (!c.positions.empty()) {  // listed positions of a long prompt: every row, the listed ones compared
      std::vector<float> logits(c.tokens.size() * V);
      model.forward(c.tokens, cache, logits, kylin::Positions::all);
      for (std::size_t r = 0; r < c.logits.size(); ++r) a.add(logits.data() + c.positions[r] * V, V, c.logits[r]);
      continue;
    }
    std::vector<float> logits(c.logits.size() * V);
    model.forward(c.tokens, cache, logits, c.all_positions ? kylin::Positions::all : kylin::Positions::last);
    for (std::size_t r = 0; r < c.logits.size(); ++r) a.add(logits.data() + r * V, V, c.logits[r]);
    if (!c.all_positions) continue;
    auto step_cache = model.new_cache(std::max<std::int64_t>(256, n));
    std::vector<float> row(V);
    for (std::size_t t = 0; t < c.tokens.size(); ++t) {
      model.forward(std::span<const int>(&c.tokens[t], 1), step_cache, row);
      a.add(row.data(), V, c.logits[t]);
    }
  }
  return a;
}

// Bars on a weight format's agreement: per checkpoint (dense ones: median and worst row; MoE
// ones, where a flipped routing decision makes the worst row, the median), and over all rows the
// fractions whose reference top token stays our first / in our top 5.
struct AgreementBars {
  double dense_median, dense_worst, moe_median, top1, top5;
  // "" when checkpoint `name`'s agreement is within the per-checkpoint bars, else what is not.
  std::string check(std::string_view name, const Agreement& a) const {
    const bool moe = name.find("moe") != std::string_view::npos;
    if (!(a.median() <= (moe ? moe_median : dense_median))) return "median " + std::to_string(a.median());
    if (!moe && !(a.worst() <= dense_worst)) return "worst " + std::to_string(a.worst());
    return "";
  }
  // "" when the rows of all checkpoints together keep their top tokens often enough.
  std::string check_total(const Agreement& all) const {
    if (all.top1 < top1 * all.rows()) return "top-1 on " + std::to_string(all.top1) + " of " + std::to_string(all.rows());
    if (all.top5 < top5 * all.rows()) return "top-5 on " + std::to_string(all.top5) + " of " + std::to_string(all.rows());
    return "";
  }
};

// Q8_0, measured (2026-11-24, Zen 3, AVX2; rows by prefill and by decode): median rel. L2
// 0.012-0.032 and worst 0.018-0.056 on the dense checkpoints; on the MoE ones worst 0.14 and 0.57,
// median 0.023 and 0.072. Top-1 kept on 675 of 715 rows, top-5 on all. The bars are ~2x the
// measurements; a wrong scale, block or sign gives ~1 and loses the top tokens.
inline constexpr AgreementBars q8_bars{.dense_median = 0.06, .dense_worst = 0.12, .moe_median = 0.15, .top1 = 0.85, .top5 = 0.99};

// Q4_0, measured (2026-11-25, Zen 3, AVX2; same rows; MoE experts quantized too): median rel. L2
// 0.15-0.39 and worst 0.21-0.71 on the dense checkpoints, median 0.29 and 0.47 on the MoE ones:
// 10-15x Q8_0's, as 16 levels per block instead of 255 predict (these random-weight models pass
// every error on; the LM head kept at Q8_0 gave 0.11-0.34, docs/QUANTIZATION.md). Top-1 kept on
// 388 of 715 rows, top-5 on 601. The bars sit ~1.3x above the measurements (a wrong scale, block
// or nibble gives ~1 or more and loses the top tokens).
inline constexpr AgreementBars q4_bars{.dense_median = 0.5, .dense_worst = 0.9, .moe_median = 0.6, .top1 = 0.4, .top5 = 0.75};

}  // namespace kylin::test
