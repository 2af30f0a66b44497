// kernels::draw_row: kylin::Sampler's draw over a whole logit row (temperature, top-p, min-p; no
// top-k below the row, no penalty), so a backend picks the token where the logits are.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "kylin/kernels/draw.hpp"
#include "kylin/kernels/nucleus.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// A draw's buffers, sized on first use so that later draws allocate nothing.
struct DrawScratch {
  std::vector<int> ids;        // [<= n] the tokens the draw keeps
  std::vector<float> weights;  // [<= n] their weights
  NucleusScratch nucleus;      // top-p's histogram and boundary
};

// The token Sampler draws from the whole row with d's temperature, top-p, min-p and uniform
// number: argmax when its logit is +inf, -1 when no logit is above -inf (the caller's fallback).
inline int draw_row(std::span<const float> row, const RowDraw& d, DrawScratch& s) {
  const int top = argmax(row);
  if (top < 0 || std::isinf(row[static_cast<std::size_t>(top)])) return top;
  const float max_logit = row[static_cast<std::size_t>(top)];
  if (d.top_p < 1.0f)
    keep_nucleus(row, max_logit, d, s.nucleus, s.ids, s.weights);
  else
    keep_weighted(row, max_logit, d, s.ids, s.weights);
  return weighted_pick(s.ids, s.weights, weight_sum(s.weights, 0, s.weights.size()), d.u);
}

}  // namespace kylin::kernels
