// SampleableIds: the logit rows a Sampler may return. A model's lm_head often has more rows than
// its tokenizer has tokens (Qwen3: 151,936 rows, 151,669 tokens), and a tokenizer may leave ids
// unassigned; such ids decode to nothing, so no sampling mode (greedy included) may pick them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin {

class SampleableIds {
 public:
  // Every id of any row: a checkpoint without tokenizer files, whose ids are its tokens.
  SampleableIds() = default;

  // Ids [0, end) except `holes`; throws when that leaves none.
  SampleableIds(std::size_t end, std::vector<int> holes) : end_(end), holes_(std::move(holes)) {
    std::sort(holes_.begin(), holes_.end());
    holes_.erase(std::unique(holes_.begin(), holes_.end()), holes_.end());
    holes_.erase(std::remove_if(holes_.begin(), holes_.end(),
                                [&](int h) { return h < 0 || static_cast<std::size_t>(h) >= end_; }),
                 holes_.end());
    if (holes_.size() >= end_)
      throw Error(ErrorCategory::tokenizer, "sampleable ids",
                  "no id below " + std::to_string(end_) + " is a token: nothing could be sampled");
    while (first_ < holes_.size() && holes_[first_] == static_cast<int>(first_)) ++first_;
  }

  // The ids [0, n) for which `is_token(id)` holds, e.g. those a tokenizer can decode.
  template <class IsToken>
  static SampleableIds scan(std::size_t n, IsToken is_token) {
    std::size_t end = 0;
    for (std::size_t id = n; id > 0 && end == 0; --id)
      if (is_token(static_cast<int>(id - 1))) end = id;
    std::vector<int> holes;
    for (std::size_t id = 0; id < end; ++id)
      if (!is_token(static_cast<int>(id))) holes.push_back(static_cast<int>(id));
    return SampleableIds(end, std::move(holes));
  }

  // One past the highest sampleable id; rows are cut there (size_t max: no cut).
  std::size_t end() const noexcept { return end_; }
  // Unsampleable ids below end(), ascending.
  std::span<const int> holes() const noexcept { return holes_; }
  // The lowest sampleable id: what a row with no usable logit gives.
  int first() const noexcept { return static_cast<int>(first_); }
  bool contains(int id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < end_ && !std::binary_search(holes_.begin(), holes_.end(), id);
  }

 private:
  std::size_t end_ = std::numeric_limits<std::size_t>::max();
  std::vector<int> holes_;  // [n_holes] ascending, each < end_
  std::size_t first_ = 0;
};

}  // namespace kylin
