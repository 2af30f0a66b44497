// kernels::keep_nucleus_of_ranked (top-p from a row's best alone, as a backend's top-k gives them)
// against kernels::keep_nucleus of the whole row (itself checked through kylin::Sampler against the
// sampler reference in tests/generate).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "../common/random_logits.hpp"  // the kernel-set builds put only tests/kernels/ on the path
#include "kylin/kernels/nucleus.hpp"
#include "kylin/kernels/ops.hpp"

namespace nucleus_test {

using namespace kylin;

// The row's mass as keep_nucleus sums it: each bucket in id order, then the buckets in order.
double bucketed_total(std::span<const float> row, float max_logit, float inv_t) {
  const kernels::NucleusGrid grid(max_logit, kernels::lowest_finite(row, max_logit), inv_t);
  std::array<double, kernels::kNucleusBuckets> mass{};
  for (const float l : row) mass[static_cast<std::size_t>(grid.bucket(l))] += kernels::scaled_weight(l, max_logit, inv_t);
  double total = 0.0;
  for (const double m : mass) total += m;
  return total;
}

std::vector<std::vector<float>> rows() {
  std::vector<std::vector<float>> out;
  for (const float scale : {0.3f, 2.0f, 6.0f}) out.push_back(test::normal_logits(3000, 7, scale));
  out.push_back(test::normal_logits(151'936, 3, 4.0f));  // a Qwen3 row
  out.emplace_back(500, 1.25f);                           // one logit: a single bucket, ranked by id
  std::vector<float> steps(700);                          // ties in every bucket
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = 0.05f * static_cast<float>((i * 37) % 61);
  out.push_back(steps);
  std::vector<float> edges = test::normal_logits(400, 9, 3.0f);  // NaN, -inf and far logits weigh 0
  for (std::size_t i = 0; i < edges.size(); i += 7) edges[i] = NAN;
  for (std::size_t i = 3; i < edges.size(); i += 11) edges[i] = -INFINITY;
  for (std::size_t i = 5; i < edges.size(); i += 13) edges[i] = -500.0f;
  out.push_back(edges);
  return out;
}

TEST_CASE("keep_nucleus_of_ranked from a row's top-k keeps keep_nucleus's tokens and weights wherever it reports the cut inside them") {
  std::size_t fits = 0, misses = 0;
  kernels::NucleusScratch full_scratch, ranked_scratch;
  std::vector<int> want_ids, got_ids;
  std::vector<float> want_weights, got_weights;
  for (const std::vector<float>& row : rows()) {
    const int top = kernels::argmax(row);
    REQUIRE(top >= 0);
    const float max_logit = row[static_cast<std::size_t>(top)];
    for (const std::size_t k : {std::size_t{1}, std::size_t{16}, std::size_t{256}, row.size()}) {
      std::vector<kernels::RankedLogit> ranked(k);
      const std::size_t filled = kernels::top_k(row, ranked);
      ranked.resize(filled);
      const bool complete = filled < k || k >= row.size();
      for (const float inv_t : {0.5f, 1.0f, 2.5f})
        for (const float top_p : {0.05f, 0.5f, 0.9f, 0.999f})
          for (const float min_weight : {std::numeric_limits<float>::denorm_min(), 0.05f}) {
            CAPTURE(row.size());
            CAPTURE(k);
            CAPTURE(inv_t);
            CAPTURE(top_p);
            CAPTURE(min_weight);
            const kernels::RowDraw d{.inv_temperature = inv_t, .min_weight = min_weight, .top_p = top_p};
            kernels::keep_nucleus(row, max_logit, d, full_scratch, want_ids, want_weights);
            const bool fit = kernels::keep_nucleus_of_ranked(ranked, complete, bucketed_total(row, max_logit, inv_t),
                                                             kernels::lowest_finite(row, max_logit), d, ranked_scratch, got_ids, got_weights);
            if (complete) CHECK(fit);  // every token at hand: the cut is always inside
            if (!fit) {
              ++misses;
              continue;
            }
            ++fits;
            CHECK(got_ids == want_ids);
            CHECK(got_weights == want_weights);
          }
    }
  }
  MESSAGE(fits, " cuts inside the ranked tokens, ", misses, " past them");
  CHECK(fits > 0);
  CHECK(misses > 0);  // flat rows and high top-p need more than k tokens
}

TEST_CASE("keep_nucleus keeps the best tokens holding top_p of the mass: a prefix in rank order, short of the target without its last token") {
  const std::vector<float> row = test::normal_logits(2000, 11, 2.0f);
  const float max_logit = row[static_cast<std::size_t>(kernels::argmax(row))];
  kernels::NucleusScratch s;
  std::vector<int> ids;
  std::vector<float> weights;
  for (const float top_p : {0.01f, 0.3f, 0.8f, 0.97f}) {
    CAPTURE(top_p);
    kernels::keep_nucleus(row, max_logit, {.min_weight = std::numeric_limits<float>::denorm_min(), .top_p = top_p}, s, ids, weights);
    // the oracle: rank every token, sum in long double
    std::vector<kernels::RankedLogit> ranked(row.size());
    kernels::top_k(row, ranked);
    long double total = 0, before = 0;
    for (const float l : row) total += kernels::scaled_weight(l, max_logit, 1.0f);
    std::size_t kept = 0;
    while (kept < ranked.size() && before < top_p * total) before += kernels::scaled_weight(ranked[kept++].logit, max_logit, 1.0f);
    REQUIRE(ids.size() == kept);
    std::vector<int> want;
    for (std::size_t j = 0; j < kept; ++j) want.push_back(ranked[j].id);
    std::vector<int> got = ids;
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    CHECK(got == want);
    for (std::size_t j = 0; j < ids.size(); ++j) CHECK(weights[j] == kernels::scaled_weight(row[static_cast<std::size_t>(ids[j])], max_logit, 1.0f));
  }
}

}  // namespace nucleus_test
