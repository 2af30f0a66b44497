// ForwardOutputs::greedy checked on any backend's model: the ids a forward hands back equal
// kernels::argmax of the logits the same forward writes (rows of a batch, every position, a cut
// row), and greedy decoding on ids alone gives the float64 reference's tokens; ForwardOutputs::top
// the same way against kernels::top_k, and ForwardOutputs::drawn against kernels::draw_row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/reference.hpp"
#include "kylin/kernels/draw_row.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/model/model.hpp"

namespace kylin::test {

// The reference case of `name` with the longest prompt (at least 3 tokens: check_greedy_outputs
// cuts it), with its greedy continuation.
inline Case longest_case(const std::string& name) {
  std::vector<Case> cases = load_cases(name);
  Case c = *std::max_element(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.tokens.size() < b.tokens.size(); });
  REQUIRE(c.tokens.size() >= 3);
  REQUIRE(!c.greedy.empty());
  return c;
}

// `n` greedy tokens after `prompt`, each step handing back only its greedy id.
template <class M>
std::vector<int> greedy_ids(M& model, KVCache& cache, std::span<const int> prompt, int n) {
  std::vector<int> out;
  int next = -1;
  model.forward(prompt, cache, ForwardOutputs{.greedy = std::span<int>(&next, 1)});
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    if (i + 1 < n) model.forward(std::span<const int>(&out.back(), 1), cache, ForwardOutputs{.greedy = std::span<int>(&next, 1)});
  }
  return out;
}

// A batch of four sequences in one forward: every position with logits and ids, ids alone, the
// last position with ids and logits (these three ask the same: the backend picks their rows in one
// call, across a group of LM-head rows when the prompt is long), and the last position with ids cut
// at half the vocabulary; each id checked against its row's logits.
template <class M>
void check_greedy_outputs(M& model, std::span<const int> tokens) {
  const std::int64_t V = model.vocab_size(), T = static_cast<std::int64_t>(tokens.size());
  auto c0 = model.new_cache(64), c1 = model.new_cache(64), c2 = model.new_cache(64), c3 = model.new_cache(64);
  std::vector<float> all(static_cast<std::size_t>(T * V)), last(static_cast<std::size_t>(V)), last3(static_cast<std::size_t>(V));  // [T, V], [V], [V]
  std::vector<int> all_ids(static_cast<std::size_t>(T), -7), cut_id(1, -7), only_id(1, -7), id3(1, -7);
  const SequenceInput batch[] = {
      {tokens, c0, {.logits = all, .positions = Positions::all, .greedy = all_ids}},
      {tokens.last(2), c2, {.greedy = only_id}},
      {tokens.last(3), c3, {.logits = last3, .greedy = id3}},
      {tokens.first(tokens.size() - 1), c1, {.logits = last, .greedy = cut_id, .pick_end = V / 2}},
  };
  model.forward(batch);
  for (std::int64_t r = 0; r < T; ++r) {
    CAPTURE(r);
    CHECK(all_ids[static_cast<std::size_t>(r)] == kernels::argmax(std::span<const float>(all).subspan(static_cast<std::size_t>(r * V), static_cast<std::size_t>(V))));
  }
  CHECK(id3[0] == kernels::argmax(last3));
  CHECK(cut_id[0] == kernels::argmax(std::span<const float>(last).first(static_cast<std::size_t>(V / 2))));
  CHECK(cut_id[0] < V / 2);
  std::vector<float> alone(static_cast<std::size_t>(V));
  auto c4 = model.new_cache(64);
  model.forward(tokens.last(2), c4, alone);
  CHECK(only_id[0] == kernels::argmax(alone));
}

// ForwardOutputs::top the same way: every position's top 5, the last position's top 3 cut at half
// the vocabulary, and two sequences' top-k whose k (300, or the vocabulary) is past what a device
// backend ranks on the device; each checked against kernels::top_k of the same forward's logits.
template <class M>
void check_top_outputs(M& model, std::span<const int> tokens) {
  const std::int64_t V = model.vocab_size(), T = static_cast<std::int64_t>(tokens.size()), wide = std::min<std::int64_t>(V, 300);
  auto c0 = model.new_cache(64), c1 = model.new_cache(64), c2 = model.new_cache(64), c3 = model.new_cache(64);
  std::vector<float> all(static_cast<std::size_t>(T * V)), last(static_cast<std::size_t>(V)), last2(static_cast<std::size_t>(V)),
      last3(static_cast<std::size_t>(V));  // [T, V], [V], [V], [V]
  std::vector<kernels::RankedLogit> all_top(static_cast<std::size_t>(T * 5)), cut_top(3), only_top(static_cast<std::size_t>(wide)),
      top3(static_cast<std::size_t>(wide));
  const SequenceInput batch[] = {
      {tokens, c0, {.logits = all, .positions = Positions::all, .top = all_top, .top_k = 5}},
      {tokens.first(tokens.size() - 1), c1, {.logits = last, .pick_end = V / 2, .top = cut_top, .top_k = 3}},
      {tokens.last(2), c2, {.logits = last2, .top = only_top, .top_k = wide}},
      {tokens.last(3), c3, {.logits = last3, .top = top3, .top_k = wide}},  // asks as the one before: one call for both
  };
  model.forward(batch);
  auto top_of = [](std::span<const float> row, std::size_t k) {
    std::vector<kernels::RankedLogit> out(k);
    kernels::top_k(row, out);
    return out;
  };
  for (std::int64_t r = 0; r < T; ++r) {
    CAPTURE(r);
    const auto row = std::span<const float>(all).subspan(static_cast<std::size_t>(r * V), static_cast<std::size_t>(V));
    CHECK(std::ranges::equal(std::span<const kernels::RankedLogit>(all_top).subspan(static_cast<std::size_t>(r * 5), 5), top_of(row, 5)));
  }
  CHECK(cut_top == top_of(std::span<const float>(last).first(static_cast<std::size_t>(V / 2)), 3));
  CHECK(only_top == top_of(last2, static_cast<std::size_t>(wide)));
  CHECK(top3 == top_of(last3, static_cast<std::size_t>(wide)));
}

// Draws handed back by one batch: a sequence drawing at every position (every other one with top-p),
// one cut at pick_end with min-p, two asking the same (one call for both) at other temperatures, one
// with a low top-p; each checked against kernels::draw_row of the same forward's logits under the
// same draw.
template <class M>
void check_drawn_outputs(M& model, std::span<const int> tokens) {
  const std::int64_t V = model.vocab_size(), T = static_cast<std::int64_t>(tokens.size());
  auto c0 = model.new_cache(64), c1 = model.new_cache(64), c2 = model.new_cache(64), c3 = model.new_cache(64);
  std::vector<float> all(static_cast<std::size_t>(T * V)), last1(static_cast<std::size_t>(V)), last2(static_cast<std::size_t>(V)),
      last3(static_cast<std::size_t>(V));  // [T, V], [V], [V], [V]
  std::vector<kernels::RowDraw> draws;     // [T + 3]
  for (std::int64_t r = 0; r < T; ++r)
    draws.push_back({.inv_temperature = 1.0f, .min_weight = 1e-45f, .u = (static_cast<double>(r) + 0.5) / static_cast<double>(T), .top_p = r % 2 ? 0.8f : 1.0f});
  draws.push_back({.inv_temperature = 0.7f, .min_weight = 0.05f, .u = 0.9});
  draws.push_back({.inv_temperature = 2.0f, .min_weight = 1e-45f, .u = 0.3, .top_p = 0.05f});
  draws.push_back({.inv_temperature = 0.5f, .min_weight = 1e-45f, .u = 0.999});
  std::vector<int> drawn(draws.size(), -7);  // [T + 3]
  const auto each = [&](std::size_t at, std::size_t n) {
    return ForwardOutputs{.drawn = std::span<int>(drawn).subspan(at, n), .draws = std::span<const kernels::RowDraw>(draws).subspan(at, n)};
  };
  const std::size_t t = static_cast<std::size_t>(T);
  ForwardOutputs o0 = each(0, t), o1 = each(t, 1), o2 = each(t + 1, 1), o3 = each(t + 2, 1);
  o0.logits = all, o0.positions = Positions::all;
  o1.logits = last1, o1.pick_end = V / 2;
  o2.logits = last2;
  o3.logits = last3;
  const SequenceInput batch[] = {{tokens, c0, o0}, {tokens.first(tokens.size() - 1), c1, o1}, {tokens.last(2), c2, o2}, {tokens.last(3), c3, o3}};
  model.forward(batch);
  kernels::DrawScratch scratch;
  auto host_draw = [&](std::span<const float> row, std::size_t i) { return kernels::draw_row(row, draws[i], scratch); };
  for (std::size_t r = 0; r < t; ++r) {
    CAPTURE(r);
    CHECK(drawn[r] == host_draw(std::span<const float>(all).subspan(r * static_cast<std::size_t>(V), static_cast<std::size_t>(V)), r));
  }
  CHECK(drawn[t] == host_draw(std::span<const float>(last1).first(static_cast<std::size_t>(V / 2)), t));
  CHECK(drawn[t + 1] == host_draw(last2, t + 1));
  CHECK(drawn[t + 2] == host_draw(last3, t + 2));
}

}  // namespace kylin::test
