// cuda::RowPicks on the emulated device: top-p draws from the device's top-k and row sums are
// kernels::draw_row's tokens, and a row crosses to the host only where the cut falls past the top-k.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "common/cuda_emulator/host_runtime.hpp"
#include "common/random_logits.hpp"
#include "kylin/backends/cuda/row_picks.hpp"
#include "kylin/kernels/draw_row.hpp"

namespace cuda_row_picks_test {

using namespace kylin;

// Rows of width 5000 (three draw slices): peaked (the nucleus within the top 256), flat (past it),
// tied, and edge rows.
std::vector<std::vector<float>> rows() {
  std::vector<std::vector<float>> out{test::normal_logits(5000, 1, 6.0f), test::normal_logits(5000, 2, 0.3f), std::vector<float>(5000, 0.5f)};
  std::vector<float> edges = test::normal_logits(5000, 3, 4.0f);
  for (std::size_t i = 0; i < edges.size(); i += 9) edges[i] = NAN;
  for (std::size_t i = 4; i < edges.size(); i += 17) edges[i] = -INFINITY;
  out.push_back(edges);
  std::vector<float> inf = test::normal_logits(5000, 4, 1.0f);
  inf[4321] = INFINITY;
  out.push_back(inf);
  out.emplace_back(5000, -INFINITY);
  out.emplace_back(5000, NAN);
  return out;
}

TEST_CASE("RowPicks::draw_rows with top-p draws kernels::draw_row's token, from the top-k where the cut falls inside it, else from the row") {
  cuda::HostRuntime rt;
  const std::vector<double> us{0.0, 0.1, 0.5, 0.77, 0.95, 0.999};
  const std::int64_t width = 4990, stride = 5000;  // cut: ids past 4990 may not be drawn
  cuda::RowPicks<cuda::HostRuntime> picks(rt, static_cast<std::int64_t>(us.size()) * 2);
  kernels::DrawScratch scratch;
  std::size_t checked = 0, same = 0, by_top = 0, by_row = 0;
  for (const std::vector<float>& row : rows())
    for (const float top_p : {0.3f, 0.9f})
      for (const float inv_t : {1.0f, 0.5f})
        for (const float min_weight : {std::numeric_limits<float>::denorm_min(), 0.05f}) {
          CAPTURE(top_p);
          CAPTURE(inv_t);
          CAPTURE(min_weight);
          std::vector<float> x;  // [2 us, stride]: each u twice, with top-p and without (one call, mixed)
          std::vector<kernels::RowDraw> draws;
          for (const double u : us)
            for (const float p : {top_p, 1.0f}) {
              x.insert(x.end(), row.begin(), row.end());
              std::fill(x.end() - (stride - width), x.end(), INFINITY);
              draws.push_back({.inv_temperature = inv_t, .min_weight = min_weight, .u = u, .top_p = p});
            }
          Memory device = rt.allocate(x.size() * sizeof(float));
          rt.to_device(device.data(), x.data(), x.size() * sizeof(float));
          std::vector<int> ids(draws.size(), -7);
          const std::size_t before = rt.to_host_bytes();
          picks.draw_rows(rt, {device.as<float>(), width, stride}, draws, ids);
          // the drawn ids, then each row's top 256, slice masses and lows; then any row whose cut falls past its top 256
          const std::size_t picked = draws.size() * (sizeof(int) + 256 * sizeof(kernels::RankedLogit) + 3 * (sizeof(double) + sizeof(float)));
          const std::size_t crossed = rt.to_host_bytes() - before - picked;
          CHECK(crossed % (static_cast<std::size_t>(width) * sizeof(float)) == 0);
          (crossed > 0 ? by_row : by_top) += 1;
          for (std::size_t r = 0; r < draws.size(); ++r) {
            CAPTURE(draws[r].u);
            CAPTURE(draws[r].top_p);
            const int want = kernels::draw_row(std::span<const float>(row).first(static_cast<std::size_t>(width)), draws[r], scratch);
            same += ids[r] == want;
            ++checked;
            if (draws[r].u < 0.999) CHECK(ids[r] == want);  // sums in another order differ only within ~1e-16 of a boundary
          }
        }
  MESSAGE(same, " of ", checked, " draws are kernels::draw_row's token; calls from the top-k ", by_top, ", with rows ", by_row);
  CHECK(by_top > 0);
  CHECK(by_row > 0);
}

}  // namespace cuda_row_picks_test
