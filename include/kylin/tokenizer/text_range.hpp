// TextRange: a byte range [begin, end) of a text. Chat prompts carry the ranges that came from
// message data, so the tokenizer can encode them as plain text (no added/special tokens there).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace kylin {

struct TextRange {
  std::size_t begin = 0;
  std::size_t end = 0;  // exclusive
  friend bool operator==(const TextRange&, const TextRange&) = default;
};

namespace detail {

// Appends [begin, end) to sorted, disjoint `ranges`, merging with the last range when they touch.
// Callers append in increasing order, so the list stays sorted without a sort.
inline void add_range(std::vector<TextRange>& ranges, std::size_t begin, std::size_t end) {
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().end >= begin) {
    ranges.back().end = std::max(ranges.back().end, end);
    return;
  }
  ranges.push_back({begin, end});
}

// Appends the parts of `src` inside [from, to), moved by `shift` (the new offset of `from`).
inline void add_ranges_within(std::vector<TextRange>& out, std::span<const TextRange> src, std::size_t from,
                              std::size_t to, std::size_t shift) {
  for (const TextRange& r : src) {
    const std::size_t b = std::max(r.begin, from), e = std::min(r.end, to);
    if (b < e) add_range(out, b - from + shift, e - from + shift);
  }
}

// Whether [begin, end) shares a byte with any of the sorted ranges.
inline bool overlaps(std::span<const TextRange> ranges, std::size_t begin, std::size_t end) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](std::size_t pos, const TextRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

}  // namespace detail
}  // namespace kylin
