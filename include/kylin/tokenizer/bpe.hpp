// Byte-level BPE: the GPT-2 byte <-> character map, merge ranks keyed by a pair of ids, and the
// merge loop of HF tokenizers' BPE (a heap ordered by rank then position: O(n log n) per word),
// with a bounded word -> ids cache in front of it.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kylin/tokenizer/unicode.hpp"

namespace kylin::detail {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100 + n.
inline const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The inverse map; -1 for characters that are not the image of a byte.
inline int char_to_byte(char32_t c) {
  static const std::array<std::int16_t, 324> table = [] {
    std::array<std::int16_t, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char()[static_cast<std::size_t>(b)]] = static_cast<std::int16_t>(b);
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// The byte-level form of raw bytes: what the vocabulary's keys are spelled in.
inline std::string bytes_to_token_text(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_to_char()[b]);
  return out;
}

// Open-addressing map (a, b) -> rank, one 8-byte slot per merge ([a:22][b:22][rank:20]) so the
// table stays small enough for the cache (this lookup is the hot one); merged ids by rank aside.
class MergeTable {
 public:
  static constexpr int max_id = (1 << 22) - 2;  // all-ones keys mark empty slots
  static constexpr int max_rank = (1 << 20) - 1;
  static constexpr int none = -1;

  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap * 4 < n * 7) cap *= 2;  // load factor <= 0.57
    slots_.assign(cap, empty);
    mask_ = cap - 1;
    merged_.reserve(n);
  }
  // Ranks are given in order 0, 1, 2...; a duplicated pair keeps its first rank, as in HF.
  // Ids and ranks must be within max_id / max_rank (the loader checks).
  void insert(int a, int b, int id) {
    const auto rank = static_cast<std::uint64_t>(merged_.size());
    merged_.push_back(id);
    if ((size_ + 1) * 7 > slots_.size() * 4) grow();
    const std::uint64_t key = pack(a, b);
    for (std::size_t i = hash(key);; i = (i + 1) & mask_) {
      if ((slots_[i] >> 20) == key) return;
      if (slots_[i] == empty) {
        slots_[i] = (key << 20) | rank;
        ++size_;
        return;
      }
    }
  }
  // The rank of merging (a, b), or `none`.
  int rank(int a, int b) const {
    const std::uint64_t key = pack(a, b);
    for (std::size_t i = hash(key);; i = (i + 1) & mask_) {
      if ((slots_[i] >> 20) == key) return static_cast<int>(slots_[i] & max_rank);
      if (slots_[i] == empty) return none;
    }
  }
  int merged_id(int rank) const { return merged_[static_cast<std::size_t>(rank)]; }
  std::size_t size() const { return merged_.size(); }

 private:
  static constexpr std::uint64_t empty = ~std::uint64_t{0};
  static std::uint64_t pack(int a, int b) {
    return (static_cast<std::uint64_t>(a) << 22) | static_cast<std::uint64_t>(b);
  }
  std::size_t hash(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 24) & mask_;
  }
  void grow() {
    std::vector<std::uint64_t> old = std::move(slots_);
    std::size_t cap = old.empty() ? 16 : old.size() * 2;
    slots_.assign(cap, empty);
    mask_ = cap - 1;
    for (std::uint64_t slot : old)
      if (slot != empty)
        for (std::size_t i = hash(slot >> 20);; i = (i + 1) & mask_)
          if (slots_[i] == empty) {
            slots_[i] = slot;
            break;
          }
  }

  std::vector<std::uint64_t> slots_ = std::vector<std::uint64_t>(16, empty);
  std::size_t mask_ = 15;
  std::size_t size_ = 0;
  std::vector<int> merged_;  // [merges] id of the merged token, by rank
};

inline constexpr std::size_t bpe_small_word = 64;

// The same merges for words of at most bpe_small_word bytes, without allocating: scan for the
// lowest (rank, position) pair each round. This equals the heap loop below: a queued pair
// whose span is unchanged is the same pair, so HF's order is "lowest rank, then leftmost".
inline void bpe_merge_small_word(std::string_view bytes, const std::array<int, 256>& byte_ids,
                                 const MergeTable& merges, std::vector<int>& out) {
  constexpr int none = INT32_MAX;
  std::array<int, bpe_small_word> ids;    // [n] current symbols
  std::array<int, bpe_small_word> rank;  // [n - 1] rank of the pair (i, i + 1), `none` if no merge
  std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n; ++i) ids[i] = byte_ids[static_cast<unsigned char>(bytes[i])];
  auto score = [&](std::size_t i) {
    const int r = merges.rank(ids[i], ids[i + 1]);
    rank[i] = r == MergeTable::none ? none : r;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) score(i);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == none) break;
    ids[best] = merges.merged_id(rank[best]);
    for (std::size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];  // drop symbol best + 1
    for (std::size_t i = best + 1; i + 2 < n; ++i) rank[i] = rank[i + 1];
    --n;
    if (best > 0) score(best - 1);
    if (best + 1 < n) score(best);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
}

// Runs the BPE merges over one pre-token given as raw bytes; appends the ids to `out`.
// `byte_ids[b]` is the vocabulary id of the single-byte token of b.
inline void bpe_merge_word(std::string_view bytes, const std::array<int, 256>& byte_ids, const MergeTable& merges,
                           std::vector<int>& out) {
  struct Symbol {
    int id, prev, next;
  };
  struct Candidate {
    int rank, pos, id;
    bool operator<(const Candidate& o) const {  // std::priority_queue is a max-heap
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int n = static_cast<int>(bytes.size());
  std::vector<Symbol> sym(bytes.size());
  for (int i = 0; i < n; ++i) sym[i] = {byte_ids[static_cast<unsigned char>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> storage;
  storage.reserve(bytes.size());
  std::priority_queue<Candidate> heap(std::less<Candidate>{}, std::move(storage));
  auto push = [&](int pos) {
    const int next = sym[pos].next;
    if (next < 0) return;
    if (const int rank = merges.rank(sym[pos].id, sym[next].id); rank != MergeTable::none)
      heap.push({rank, pos, merges.merged_id(rank)});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or nothing to its right any more
    const int rank = merges.rank(left.id, sym[left.next].id);
    if (rank == MergeTable::none || merges.merged_id(rank) != top.id) continue;  // stale: the pair changed
    Symbol& right = sym[left.next];
    left.id = top.id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = sym[i].next) out.push_back(sym[i].id);
}

// A bounded, thread-safe cache of pre-token -> ids (cleared when full, like HF's BPE cache).
class WordCache {
 public:
  static constexpr std::size_t max_entries = 1 << 16;
  static constexpr std::size_t max_word_bytes = 64;

  WordCache() = default;
  WordCache(WordCache&& other) noexcept : map_(std::move(other.map_)) {}

  bool lookup(std::string_view word, std::vector<int>& out) const {
    std::lock_guard lock(mutex_);
    auto it = map_.find(word);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::string_view word, const int* ids, std::size_t n) const {
    std::lock_guard lock(mutex_);
    if (map_.size() >= max_entries) map_.clear();
    map_.emplace(std::string(word), std::vector<int>(ids, ids + n));
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::vector<int>, Hash, std::equal_to<>> map_;
};

}  // namespace kylin::detail
