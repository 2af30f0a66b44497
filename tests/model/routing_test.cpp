// ExpertRouting: the router decision of Qwen3-MoE against a direct computation, and the grouping
// the SparseMoE layer relies on (rows ascending within each expert, decode rows first).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kylin/model/routing.hpp"

namespace {

kylin::MoeConfig moe(std::int64_t experts, std::int64_t k, bool normalise) {
  return {.num_experts = experts, .num_experts_per_tok = k, .moe_intermediate_size = 8, .norm_topk_prob = normalise, .decoder_sparse_step = 1, .mlp_only_layers = {}};
}

}  // namespace

TEST_CASE("each row goes to its k most probable experts with softmax weights, divided by their sum only when norm_topk_prob") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f,   // row 0: experts 1, 3
                                     3.0f, 3.0f, 0.0f, -2.0f};  // row 1: a tie, broken to the lower index: 0, 1
  double z0 = 0;
  for (int e = 0; e < 4; ++e) z0 += std::exp(double(logits[e]));
  for (bool normalise : {false, true}) {
    CAPTURE(normalise);
    kylin::ExpertRouting r(2, moe(4, 2, normalise));
    std::copy(logits.begin(), logits.end(), r.logits(2).begin());
    r.route(2);
    const double p1 = std::exp(2.0) / z0, p3 = std::exp(1.0) / z0;
    const double w1 = normalise ? p1 / (p1 + p3) : p1, w3 = normalise ? p3 / (p1 + p3) : p3;
    CHECK(r.group(1).rows.size() == 2);  // rows 0 and 1
    CHECK(r.group(1).rows[0] == 0);
    CHECK(r.group(1).weights[0] == doctest::Approx(w1).epsilon(1e-7));
    CHECK(r.group(3).rows.size() == 1);
    CHECK(r.group(3).weights[0] == doctest::Approx(w3).epsilon(1e-7));
    CHECK(r.group(0).rows.size() == 1);
    CHECK(r.group(0).rows[0] == 1);
    CHECK(r.group(2).rows.empty());
    if (normalise) CHECK(r.group(0).weights[0] + r.group(1).weights[1] == doctest::Approx(1.0).epsilon(1e-7));
  }
}

TEST_CASE("a tie at the top-k cut goes to the lower expert index, however many experts tie") {
  // torch.topk leaves the order of ties unspecified (the note in its documentation), and its CPU
  // kernel (aten/src/ATen/native/TopKImpl.h: std::nth_element over (value, index) pairs compared by
  // value only) keeps either index depending on the row: with libstdc++, row 0 below gives experts
  // 1 and 3, row 1 experts 6 and 5. kylin keeps the lower index, as a stable sort would, so equal
  // router scores give the same experts on every backend and build.
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 1.0f, -1.0f, 0.0f, 0.2f, -0.5f,   // row 0: 1, then 2 over 3
                                     0.1f, 0.2f, 0.3f, 0.4f, 2.0f, 2.0f, 2.0f, 2.0f};   // row 1: 4 and 5 of four tied
  const std::vector<std::vector<std::int64_t>> want = {{1, 2}, {4, 5}};
  kylin::ExpertRouting r(2, moe(8, 2, true));
  std::copy(logits.begin(), logits.end(), r.logits(2).begin());
  r.route(2);
  for (std::int64_t row = 0; row < 2; ++row) {
    CAPTURE(row);
    std::vector<std::int64_t> got;
    for (std::int64_t e = 0; e < 8; ++e)
      for (auto x : r.group(e).rows)
        if (x == row) got.push_back(e);
    CHECK(got == want[static_cast<std::size_t>(row)]);
  }
  // a Qwen3-30B-A3B-sized router, 128 experts, top-8: six clear winners, then four tied for two places
  std::vector<float> wide(128);
  for (std::size_t e = 0; e < wide.size(); ++e) wide[e] = static_cast<float>(std::sin(0.37 * double(e)));
  for (int e : {9, 33, 64, 80, 101, 127}) wide[static_cast<std::size_t>(e)] = 6.0f;
  for (int e : {120, 7, 58, 12}) wide[static_cast<std::size_t>(e)] = 5.0f;
  kylin::ExpertRouting big(1, moe(128, 8, false));
  std::copy(wide.begin(), wide.end(), big.logits(1).begin());
  big.route(1);
  std::vector<std::int64_t> chosen;
  for (std::int64_t e = 0; e < 128; ++e)
    if (!big.group(e).rows.empty()) chosen.push_back(e);
  CHECK(chosen == std::vector<std::int64_t>{7, 9, 12, 33, 64, 80, 101, 127});
}

TEST_CASE("groups hold every (row, expert) pair once, rows ascending") {
  const std::int64_t rows = 37, experts = 6, k = 3;
  kylin::ExpertRouting r(rows, moe(experts, k, true));
  auto logits = r.logits(rows);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * double(i)) * 3.0);
  r.route(rows);
  std::vector<int> seen(static_cast<std::size_t>(rows), 0);
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto g = r.group(e);
    for (std::size_t i = 0; i < g.rows.size(); ++i) {
      ++seen[static_cast<std::size_t>(g.rows[i])];
      if (i > 0) CHECK(g.rows[i - 1] < g.rows[i]);
    }
  }
  for (int n : seen) CHECK(n == k);
}
