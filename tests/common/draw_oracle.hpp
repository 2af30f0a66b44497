// The oracle for a draw over a whole logit row (kernels::draw_row, a backend's draw_rows): the
// inverse CDF in id order, summed one token at a time in long double.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

#include "kylin/kernels/draw.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin::test {

// Whether id is where the running mass of row in id order passes d.u * total, up to the rounding
// of sums in another order (1e-9 of the total) and weighing something; argmax where its logit is
// +inf, -1 where no logit is above -inf. The weights are kernels::scaled_weight's (tested against
// std::exp) at or above d.min_weight.
inline bool inverse_cdf_pick(std::span<const float> row, const kernels::RowDraw& d, int id) {
  const int top = kernels::argmax(row);
  if (top < 0 || std::isinf(row[static_cast<std::size_t>(top)])) return id == top;
  if (id < 0 || static_cast<std::size_t>(id) >= row.size()) return false;
  const float max = row[static_cast<std::size_t>(top)];
  auto weight = [&](std::size_t i) {
    const float w = kernels::scaled_weight(row[i], max, d.inv_temperature);
    return w >= d.min_weight ? w : 0.0f;
  };
  long double total = 0, before = 0;
  for (std::size_t i = 0; i < row.size(); ++i) total += weight(i);
  for (std::size_t i = 0; i < static_cast<std::size_t>(id); ++i) before += weight(i);
  const long double target = static_cast<long double>(d.u) * total, slack = 1e-9L * total;
  const float w = weight(static_cast<std::size_t>(id));
  return w > 0.0f && before <= target + slack && before + w >= target - slack;
}

}  // namespace kylin::test
