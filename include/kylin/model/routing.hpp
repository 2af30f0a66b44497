// ExpertRouting: Qwen3-MoE's router decision on the host. Each row's softmax over all experts,
// its top-k experts and their weights (renormalised when norm_topk_prob), then the rows grouped
// by expert so each expert runs once over its rows. Buffers are sized once; route() allocates nothing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/io/config.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin {

class ExpertRouting {
 public:
  ExpertRouting() = default;
  ExpertRouting(std::int64_t max_rows, const MoeConfig& c)
      : experts_(c.num_experts), k_(c.num_experts_per_tok), normalise_(c.norm_topk_prob),
        logits_(static_cast<std::size_t>(max_rows * c.num_experts)),
        probs_(static_cast<std::size_t>(c.num_experts)),
        top_(static_cast<std::size_t>(c.num_experts_per_tok)),
        chosen_(static_cast<std::size_t>(max_rows * c.num_experts_per_tok)),
        chosen_weight_(chosen_.size()),
        offsets_(static_cast<std::size_t>(c.num_experts + 1)),
        rows_(chosen_.size()),
        weights_(chosen_.size()) {}

  // Where the router logits of `rows` rows go on the host: [rows, num_experts].
  std::span<float> logits(std::int64_t rows) { return std::span(logits_).first(static_cast<std::size_t>(rows * experts_)); }

  // Routes the rows whose logits were written to logits(rows). Within each expert's group, rows
  // keep their pass order, so the pass's dot-product rows come first (Pass::decode_rows).
  void route(std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) choose(r);
    std::fill(offsets_.begin(), offsets_.end(), 0);
    for (std::int64_t i = 0; i < rows * k_; ++i) ++offsets_[static_cast<std::size_t>(chosen_[static_cast<std::size_t>(i)] + 1)];
    for (std::int64_t e = 0; e < experts_; ++e) offsets_[static_cast<std::size_t>(e + 1)] += offsets_[static_cast<std::size_t>(e)];
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < k_; ++j) {
        const auto i = static_cast<std::size_t>(r * k_ + j);
        auto& cursor = offsets_[static_cast<std::size_t>(chosen_[i])];
        rows_[static_cast<std::size_t>(cursor)] = r;
        weights_[static_cast<std::size_t>(cursor)] = chosen_weight_[i];
        ++cursor;
      }
    // each cursor now sits at the next expert's start: shift back to recover the starts
    for (std::int64_t e = experts_; e > 0; --e) offsets_[static_cast<std::size_t>(e)] = offsets_[static_cast<std::size_t>(e - 1)];
    offsets_[0] = 0;
  }

  // Expert e's rows and the weight each gives it, rows ascending.
  kernels::RowSelection group(std::int64_t e) const {
    const auto b = static_cast<std::size_t>(offsets_[static_cast<std::size_t>(e)]);
    const auto n = static_cast<std::size_t>(offsets_[static_cast<std::size_t>(e + 1)]) - b;
    return {std::span(rows_).subspan(b, n), std::span(weights_).subspan(b, n)};
  }
  std::int64_t experts() const { return experts_; }
  std::int64_t experts_per_row() const { return k_; }

 private:
  // Row r: softmax over the experts (in double), the k largest (ties to the lower index, as a stable
  // sort gives: torch.topk leaves their order unspecified; routing_test says more), their
  // probabilities divided by their sum when normalise_, as transformers' Qwen3MoeSparseMoeBlock.
  void choose(std::int64_t r) {
    const float* z = logits_.data() + r * experts_;
    const float zmax = *std::max_element(z, z + experts_);
    double sum = 0;
    for (std::int64_t e = 0; e < experts_; ++e) sum += probs_[static_cast<std::size_t>(e)] = std::exp(static_cast<double>(z[e]) - zmax);
    for (double& p : probs_) p /= sum;
    double picked = 0;
    for (std::int64_t j = 0; j < k_; ++j) {
      const auto best = static_cast<std::size_t>(std::max_element(probs_.begin(), probs_.end()) - probs_.begin());
      chosen_[static_cast<std::size_t>(r * k_ + j)] = static_cast<std::int64_t>(best);
      picked += top_[static_cast<std::size_t>(j)] = probs_[best];
      probs_[best] = -1.0;  // below every probability: not chosen again
    }
    for (std::int64_t j = 0; j < k_; ++j)
      chosen_weight_[static_cast<std::size_t>(r * k_ + j)] = static_cast<float>(top_[static_cast<std::size_t>(j)] / (normalise_ ? picked : 1.0));
  }

  std::int64_t experts_ = 0, k_ = 0;
  bool normalise_ = false;
  std::vector<float> logits_;              // [max_rows, num_experts]  router output, on the host
  std::vector<double> probs_;              // [num_experts]            one row's softmax
  std::vector<double> top_;                // [k]                      its k largest
  std::vector<std::int64_t> chosen_;       // [max_rows, k]            expert of each (row, slot)
  std::vector<float> chosen_weight_;       // [max_rows, k]            its routing weight
  std::vector<std::int64_t> offsets_;      // [num_experts + 1]        group starts
  std::vector<std::int64_t> rows_;         // [max_rows * k]           rows grouped by expert
  std::vector<float> weights_;             // [max_rows * k]           their weights
};

}  // namespace kylin
