// CudaBackend's picks from logit rows in device memory: greedy ids, top-k and draws (temperature,
// top-p, min-p) made on the device, so that what crosses to the host is ints and top-k pairs. A row
// itself crosses only where k is past max_top_k or a top-p cut falls past the device's top-k.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/backends/cuda/kernels.hpp"
#include "kylin/kernels/draw_row.hpp"
#include "kylin/kernels/nucleus.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin::cuda {

// R: the device runtime (backend.hpp's Runtime concept), passed to each call.
template <class R>
class RowPicks {
 public:
  static constexpr std::int64_t max_top_k = 256;  // the device top-k's k; top-p ranks this many a row

  RowPicks(R& runtime, std::int64_t rows)
      : rows_(rows),
        greedy_(runtime.allocate(static_cast<std::size_t>(rows) * sizeof(int))),
        draws_(runtime.allocate(static_cast<std::size_t>(rows) * sizeof(kernels::RowDraw))),
        drawn_(runtime.allocate(static_cast<std::size_t>(rows) * sizeof(int))) {}

  // host[i] = kernels::argmax of row i: one int a row comes back.
  void argmax_rows(R& rt, const LogitRows& r, std::span<int> host) {
    const auto n = static_cast<std::int64_t>(host.size());
    assert(n <= rows_);
    if (n == 0) return;
    rt.launch(ArgmaxKernel{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .ids = greedy_.as<int>()});
    rt.to_host(host.data(), greedy_.as<int>(), host.size_bytes());
  }

  // host[i * k, + k) = kernels::top_k of row i: k pairs a row come back (past max_top_k, the rows).
  void top_k_rows(R& rt, const LogitRows& r, std::span<kernels::RankedLogit> host, std::int64_t k) {
    const auto n = static_cast<std::int64_t>(host.size()) / k;
    if (n == 0) return;
    if (k > max_top_k) return top_k_on_host(rt, r, host, k);
    launch_top_k(rt, r, n, k);
    rt.to_host(host.data(), top_.data(), host.size_bytes());
  }

  // host[i] = a draw from row i as kernels::draw_row(draws[i]) makes it. Without top-p: the argmax,
  // slice sums and one pick on the device, one int a row back. With it: the row's top-k and slice
  // sums come back, and the host keeps the nucleus from them (keep_nucleus_of_ranked).
  void draw_rows(R& rt, const LogitRows& r, std::span<const kernels::RowDraw> draws, std::span<int> host) {
    const auto n = static_cast<std::int64_t>(host.size());
    assert(n <= rows_ && draws.size() == host.size());
    if (n == 0) return;
    auto by_top_p = [](const kernels::RowDraw& d) { return d.top_p < 1.0f; };
    rt.to_device(draws_.data(), draws.data(), draws.size_bytes());
    rt.launch(ArgmaxKernel{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .ids = greedy_.as<int>()});
    if (!std::all_of(draws.begin(), draws.end(), by_top_p)) {
      DrawSliceKernel slices{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .top = greedy_.as<int>(),
                             .draws = draws_.as<kernels::RowDraw>(), .sums = grow<double>(rt, sums_, n * slice_count(r))};
      rt.launch(slices);
      rt.launch(DrawPickKernel{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .top = greedy_.as<int>(),
                               .draws = draws_.as<kernels::RowDraw>(), .sums = slices.sums, .ids = drawn_.as<int>()});
      rt.to_host(host.data(), drawn_.data(), host.size_bytes());
    }
    if (std::any_of(draws.begin(), draws.end(), by_top_p)) nucleus_draws(rt, r, draws, host);
  }

 private:
  static std::int64_t slice_count(const LogitRows& r) { return (r.width + detail::draw_slice - 1) / detail::draw_slice; }

  // m as a T array of at least count, reallocated when smaller: its last use has finished, as
  // every use ends in a copy to the host, which waits for it.
  template <class T>
  static T* grow(R& rt, Memory& m, std::int64_t count) {
    const auto bytes = static_cast<std::size_t>(count) * sizeof(T);
    if (m.bytes() < bytes) m = rt.allocate(bytes);
    return m.as<T>();
  }

  // top_[i * k, + k) = kernels::top_k of row i, for rows [0, n).
  void launch_top_k(R& rt, const LogitRows& r, std::int64_t n, std::int64_t k) {
    TopKSliceKernel slices{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .k = k, .keys = nullptr};
    const std::int64_t candidates = slices.slices() * k;
    slices.keys = grow<std::uint64_t>(rt, top_keys_, n * candidates);
    rt.launch(slices);
    rt.launch(TopKMergeKernel{.keys = slices.keys, .rows = n, .candidates = candidates, .k = k,
                              .top = grow<kernels::RankedLogit>(rt, top_, n * k)});
  }

  // The top-p rows of draw_rows: each row's top-k, mass and lowest finite logit to the host, which
  // keeps the nucleus and draws from it; a row whose cut falls past its top-k comes over whole.
  void nucleus_draws(R& rt, const LogitRows& r, std::span<const kernels::RowDraw> draws, std::span<int> host) {
    const auto n = static_cast<std::int64_t>(host.size());
    const std::int64_t k = std::min(max_top_k, r.width), slices = slice_count(r);
    rt.launch(DrawSliceKernel{.x = r.data, .rows = n, .width = r.width, .stride = r.stride, .top = greedy_.as<int>(),
                                 .draws = draws_.as<kernels::RowDraw>(), .sums = grow<double>(rt, sums_, n * slices),
                                 .lows = grow<float>(rt, lows_, n * slices)});
    launch_top_k(rt, r, n, k);
    host_top_.resize(static_cast<std::size_t>(n * k));
    host_sums_.resize(static_cast<std::size_t>(n * slices));
    host_lows_.resize(static_cast<std::size_t>(n * slices));
    rt.to_host(host_top_.data(), top_.data(), host_top_.size() * sizeof(kernels::RankedLogit));
    rt.to_host(host_sums_.data(), sums_.data(), host_sums_.size() * sizeof(double));
    rt.to_host(host_lows_.data(), lows_.data(), host_lows_.size() * sizeof(float));
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (!(draws[i].top_p < 1.0f)) continue;
      const auto at = [&](const auto& v, std::int64_t m) { return std::span(v).subspan(i * static_cast<std::size_t>(m), static_cast<std::size_t>(m)); };
      host[i] = nucleus_draw(at(host_top_, k), at(host_sums_, slices), at(host_lows_, slices), draws[i], r.width);
      if (host[i] == need_row) host[i] = draw_on_host(rt, r, static_cast<std::int64_t>(i), draws[i]);
    }
  }

  static constexpr int need_row = -2;
  // kernels::draw_row's token from the row's top (kernels::top_k, k = top.size()), slice masses and
  // lows (NucleusSliceKernel's); need_row where the cut may fall past top.
  int nucleus_draw(std::span<const kernels::RankedLogit> top, std::span<const double> sums, std::span<const float> lows,
                   const kernels::RowDraw& d, std::int64_t width) {
    std::size_t filled = 0;
    while (filled < top.size() && top[filled].id >= 0) ++filled;
    if (filled == 0 || !(top[0].logit > -INFINITY)) return -1;  // no logit above -inf: the caller's fallback
    if (top[0].logit == INFINITY) return top[0].id;
    double total = 0.0;
    for (const double s : sums) total += s;
    const float low = *std::min_element(lows.begin(), lows.end());
    const bool complete = filled < top.size() || static_cast<std::int64_t>(top.size()) >= width;
    if (!kernels::keep_nucleus_of_ranked(top.first(filled), complete, total, low, d, scratch_.nucleus, scratch_.ids, scratch_.weights))
      return need_row;
    return kernels::weighted_pick(scratch_.ids, scratch_.weights, kernels::weight_sum(scratch_.weights, 0, scratch_.weights.size()), d.u);
  }

  // Row i to the host, then kernels::draw_row.
  int draw_on_host(R& rt, const LogitRows& r, std::int64_t i, const kernels::RowDraw& d) {
    host_row_.resize(static_cast<std::size_t>(r.width));
    rt.to_host(host_row_.data(), r.data + i * r.stride, host_row_.size() * sizeof(float));
    return kernels::draw_row(host_row_, d, scratch_);
  }

  // top_k_rows past max_top_k: each row to the host, then kernels::top_k.
  void top_k_on_host(R& rt, const LogitRows& r, std::span<kernels::RankedLogit> host, std::int64_t k) {
    host_row_.resize(static_cast<std::size_t>(r.width));
    for (std::size_t i = 0; i * static_cast<std::size_t>(k) < host.size(); ++i) {
      rt.to_host(host_row_.data(), r.data + static_cast<std::int64_t>(i) * r.stride, host_row_.size() * sizeof(float));
      kernels::top_k(host_row_, host.subspan(i * static_cast<std::size_t>(k), static_cast<std::size_t>(k)));
    }
  }

  std::int64_t rows_;
  Memory greedy_;    // [rows] int each row's argmax (argmax_rows; each row's max for draw_rows)
  Memory draws_;     // [rows] kernels::RowDraw of the drawn rows
  Memory drawn_;     // [rows] int their drawn ids
  Memory sums_;      // [rows, slices] double slice masses of the drawn rows, grown on use
  Memory lows_;      // [rows, slices] float their lowest finite logits (top-p), grown on use
  Memory top_keys_;  // [rows, slices, k] uint64 rank keys of each slice's top-k, grown on use
  Memory top_;       // [rows, k] kernels::RankedLogit, the rows' top-k, grown on use
  std::vector<kernels::RankedLogit> host_top_;  // [rows, k] top-p rows' top-k
  std::vector<double> host_sums_;               // [rows, slices]
  std::vector<float> host_lows_;                // [rows, slices]
  std::vector<float> host_row_;                 // [vocab] a row ranked or drawn on the host
  kernels::DrawScratch scratch_;                // the host's nucleus and draw
};

}  // namespace kylin::cuda
