// Top-p's nucleus as kylin::Sampler keeps it: from a whole row (keep_nucleus), or from the row's best
// alone where they hold the cut (keep_nucleus_of_ranked: a backend's top-k and two row sums). A
// histogram of the scaled logits finds the bucket where the cut falls, so only that bucket is ranked.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/kernels/draw.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

inline constexpr int kNucleusBuckets = 1024;  // histogram resolution over the scaled logits

// Each token's bucket: the scaled-logit range from the max (bucket 0) down to the lowest finite
// logit, at most kMinScaledLogit deep, in kNucleusBuckets even steps; NaN, inf and weightless
// tokens land in the last bucket. Buckets never rise as the logit falls.
struct NucleusGrid {
  float max_logit, inv_temperature, scale;
  NucleusGrid(float max, float min_finite, float inv_t) : max_logit(max), inv_temperature(inv_t) {
    const float range = std::min(-scaled_logit(min_finite, max, inv_t), -kMinScaledLogit);
    scale = range > 0.0f ? static_cast<float>(kNucleusBuckets) / range : 0.0f;
  }
  int bucket(float logit) const {
    constexpr auto kLast = static_cast<float>(kNucleusBuckets - 1);
    const float b = -scaled_logit(logit, max_logit, inv_temperature) * scale;
    return static_cast<int>(b < kLast ? b : kLast);
  }
};

// The lowest finite logit of a row whose max is finite (max_logit when none is lower), in lanes
// of 16 the compiler vectorises.
inline float lowest_finite(std::span<const float> row, float max_logit) {
  constexpr std::size_t kLanes = 16;
  std::array<float, kLanes> lowest;  // [kLanes] lane-wise minimum finite logit
  lowest.fill(max_logit);
  for (std::size_t base = 0; base < row.size(); base += kLanes)
    for (std::size_t j = 0; j < std::min(kLanes, row.size() - base); ++j) {
      const float l = row[base + j];
      lowest[j] = std::isfinite(l) && l < lowest[j] ? l : lowest[j];
    }
  return *std::min_element(lowest.begin(), lowest.end());
}

// Where the cut falls: the first bucket whose mass takes the mass before it to top_p * total.
struct NucleusCut {
  int bucket;     // the boundary bucket, ranked token by token
  double before;  // mass of the buckets before it
  double target;  // top_p * total mass
};
inline NucleusCut nucleus_cut(std::span<const double, kNucleusBuckets> mass, double total, float top_p) {
  NucleusCut c{0, 0.0, static_cast<double>(top_p) * total};
  while (c.bucket < kNucleusBuckets - 1 && c.before + mass[static_cast<std::size_t>(c.bucket)] < c.target)
    c.before += mass[static_cast<std::size_t>(c.bucket++)];
  return c;
}

// Buffers of keep_nucleus, sized on first use so that later draws allocate nothing.
struct NucleusScratch {
  std::vector<float> weights;                     // [n] every token's weight
  std::vector<std::uint16_t> bucket;              // [n] every token's bucket
  std::vector<int> boundary;                      // [<= n] ids in the boundary bucket
  std::array<double, kNucleusBuckets> mass{};     // [kNucleusBuckets] each bucket's weight, summed in id order
  std::vector<RankedLogit> ranked;                // [<= k] keep_nucleus_of_ranked's tokens of one bucket
};

// Top-p, then min-p over a row whose max is finite, into ids and weights (replaced): the tokens of
// the buckets before the cut's in id order, then the boundary bucket's in rank order while the mass
// ranked before them is below target; tokens under d.min_weight are counted but not kept.
inline void keep_nucleus(std::span<const float> row, float max_logit, const RowDraw& d, NucleusScratch& s, std::vector<int>& ids, std::vector<float>& weights) {
  const std::size_t n = row.size();
  const NucleusGrid grid(max_logit, lowest_finite(row, max_logit), d.inv_temperature);
  s.weights.resize(n);
  s.bucket.resize(n);
  for (std::size_t i = 0; i < n; ++i) s.weights[i] = scaled_weight(row[i], max_logit, d.inv_temperature);
  for (std::size_t i = 0; i < n; ++i) s.bucket[i] = static_cast<std::uint16_t>(grid.bucket(row[i]));
  s.mass.fill(0.0);
  for (std::size_t i = 0; i < n; ++i) s.mass[s.bucket[i]] += s.weights[i];
  double total = 0.0;
  for (double m : s.mass) total += m;
  const NucleusCut cut = nucleus_cut(s.mass, total, d.top_p);
  ids.clear();
  weights.clear();
  s.boundary.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (s.bucket[i] < cut.bucket) {
      if (s.weights[i] >= d.min_weight) {
        ids.push_back(static_cast<int>(i));
        weights.push_back(s.weights[i]);
      }
    } else if (s.bucket[i] == cut.bucket) {
      s.boundary.push_back(static_cast<int>(i));
    }
  }
  std::sort(s.boundary.begin(), s.boundary.end(), [&](int x, int y) { return ranks_before(row[x], x, row[y], y); });
  double before = cut.before;
  for (int id : s.boundary) {
    if (before >= cut.target) break;
    before += s.weights[id];
    if (s.weights[id] >= d.min_weight) {
      ids.push_back(id);
      weights.push_back(s.weights[id]);
    }
  }
}

// keep_nucleus's ids and weights from the row's best alone. ranked: kernels::top_k of the row
// (best first, empty slots cut off, front() finite); complete: ranked holds every token of the row
// but NaNs; total and min_finite: the row's mass (keep_nucleus's, or a sum in another order) and
// lowest finite logit. False where the cut may fall past ranked: then ids and weights mean nothing.
inline bool keep_nucleus_of_ranked(std::span<const RankedLogit> ranked, bool complete, double total, float min_finite, const RowDraw& d,
                                   NucleusScratch& s, std::vector<int>& ids, std::vector<float>& weights) {
  const float max_logit = ranked.front().logit;
  const NucleusGrid grid(max_logit, min_finite, d.inv_temperature);
  const int partial = complete ? kNucleusBuckets : grid.bucket(ranked.back().logit);  // tokens past ranked fall in it or after
  auto weight = [&](const RankedLogit& r) { return scaled_weight(r.logit, max_logit, d.inv_temperature); };
  // each bucket's mass in id order, as keep_nucleus sums it; ranked holds a bucket's tokens together
  s.mass.fill(0.0);
  for (std::size_t j = 0; j < ranked.size();) {
    const int b = grid.bucket(ranked[j].logit);
    std::size_t end = j + 1;
    while (end < ranked.size() && grid.bucket(ranked[end].logit) == b) ++end;
    s.ranked.assign(ranked.begin() + static_cast<std::ptrdiff_t>(j), ranked.begin() + static_cast<std::ptrdiff_t>(end));
    std::sort(s.ranked.begin(), s.ranked.end(), [](const RankedLogit& x, const RankedLogit& y) { return x.id < y.id; });
    for (const RankedLogit& r : s.ranked) s.mass[static_cast<std::size_t>(b)] += weight(r);
    j = end;
  }
  const NucleusCut cut = nucleus_cut(s.mass, total, d.top_p);
  if (cut.bucket > partial) return false;  // the partial bucket's whole mass might have held the cut
  // the buckets before the cut's, in id order, then the boundary bucket in rank order
  s.ranked.clear();
  for (const RankedLogit& r : ranked)
    if (grid.bucket(r.logit) < cut.bucket && weight(r) >= d.min_weight) s.ranked.push_back(r);
  std::sort(s.ranked.begin(), s.ranked.end(), [](const RankedLogit& x, const RankedLogit& y) { return x.id < y.id; });
  ids.clear();
  weights.clear();
  for (const RankedLogit& r : s.ranked) {
    ids.push_back(r.id);
    weights.push_back(weight(r));
  }
  double before = cut.before;
  for (const RankedLogit& r : ranked) {
    if (grid.bucket(r.logit) != cut.bucket) continue;
    if (before >= cut.target) return true;
    before += weight(r);
    if (weight(r) >= d.min_weight) {
      ids.push_back(r.id);
      weights.push_back(weight(r));
    }
  }
  return before >= cut.target || cut.bucket < partial;  // ran out of ranked tokens inside a partial bucket
}

}  // namespace kylin::kernels
