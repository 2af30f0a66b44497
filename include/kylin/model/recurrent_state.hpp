// RecurrentStates: the recurrent state of one sequence's Gated DeltaNet layers (each layer's last K-1 conv
// inputs and its delta-rule matrices), which, unlike keys and values, cannot be cut back to a prefix. So it is
// kept at a few positions: the live one, the last few steps (a rejected speculative draft or a draft model's
// rollback costs no recompute) and pinned snapshots (prefix reuse across requests). docs/PROMPT_CACHE.md,
// "Recurrent state", says how many and what they cost.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/core/error.hpp"

namespace kylin {

// How many states a sequence keeps besides the live one: the most recent steps, and pinned snapshots.
struct StateRetention {
  std::int64_t recent = 1;       // past steps kept (1: the previous one); a verification pass of n rows keeps n
  std::int64_t snapshots = 4;    // pinned positions kept for prefix reuse; the lowest goes first
  std::int64_t most_recent = 65;  // the most steps ever kept (a 64-draft verification pass)
};

// Every state is one buffer [layers][floats_per_layer] in backend memory, allocated on first use and reused:
// a step reads the live buffer and writes another, so keeping the previous step costs memory, not bandwidth.
// A state at position p holds what feeding the first p tokens of the cache left; the zero state at 0 needs no
// buffer. Positions above the cache's size are dropped by rewind(), so every kept state lies on its tokens.
class RecurrentStates {
 public:
  using Allocate = std::function<Memory(std::size_t bytes)>;

  RecurrentStates() = default;  // no linear layers: nothing to keep
  RecurrentStates(std::int64_t layers, std::int64_t floats_per_layer, Allocate allocate, StateRetention keep = {})
      : layers_(layers), floats_(floats_per_layer), allocate_(std::move(allocate)), keep_(keep) {}

  bool empty() const { return layers_ == 0; }
  std::int64_t layers() const { return layers_; }
  std::int64_t floats_per_layer() const { return floats_; }
  std::size_t bytes() const { return static_cast<std::size_t>(layers_ * floats_) * sizeof(float); }
  // Buffers allocated so far (each bytes() long).
  std::size_t buffers() const { return entries_.size(); }
  const StateRetention& retention() const { return keep_; }
  void set_retention(const StateRetention& keep) { keep_ = keep; }
  // Keep at least n past steps from now on (a draft model that may be rolled back n tokens).
  void keep_recent(std::int64_t n) { keep_.recent = std::clamp<std::int64_t>(n, keep_.recent, keep_.most_recent); }

  // Where a pass over n tokens from the live position reads and writes: `in` is the live state (null: the zero
  // state), out[j] the buffer of the state after row j (decode rows, one per row) or out[0] that after the
  // last token (a chunk); keep[i] that after the first keep_rows[i] tokens of a chunk (0 < keep_rows[i] < n).
  // Every position of keep_at in (live, live + n] is kept as a snapshot once commit() told the buffers their
  // positions (inside a chunk the pass computes that state on the side; decode rows and a chunk's end have it).
  struct Targets {
    const float* in = nullptr;
    std::span<float* const> out;
    std::span<float* const> keep;
    std::span<const std::int64_t> keep_rows;
  };
  Targets begin(std::int64_t live_position, std::int64_t n, bool decode_rows, std::span<const std::int64_t> keep_at = {}) {
    if (empty()) return {};
    live_ = find(live_position);
    targets_.clear();
    target_index_.clear();
    keep_rows_.clear();
    pins_.clear();
    for (std::int64_t p : keep_at) {
      if (p <= live_position || p > live_position + n) continue;
      pins_.push_back(p);
      if (!decode_rows && p < live_position + n) keep_rows_.push_back(p - live_position);
    }
    const std::int64_t n_out = decode_rows ? n : 1, kept = static_cast<std::int64_t>(keep_rows_.size());
    // The buffers this pass writes: free ones first, then the oldest unpinned past states, then new ones, as
    // many as it has rows but no more than the retention allows (at least one: the live state is never
    // overwritten), and one more per state kept inside a chunk.
    std::vector<std::size_t>& order = order_;
    order.clear();
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (static_cast<std::int64_t>(i) != live_ && !entries_[i].pinned) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return entries_[a].position < entries_[b].position; });
    const std::int64_t want = std::min(n_out, std::clamp<std::int64_t>(std::max(keep_.recent, n_out), 1, keep_.most_recent));
    while (static_cast<std::int64_t>(order.size()) < want + kept) {
      entries_.push_back({allocate_(bytes()), -1, false});
      order.insert(order.begin(), entries_.size() - 1);
    }
    for (std::int64_t j = 0; j < n_out + kept; ++j) {
      // with fewer buffers than rows they are reused in turn: row j reads row j-1's and never writes it
      const std::size_t e = order[static_cast<std::size_t>(j < n_out ? j % want : want + (j - n_out))];
      entries_[e].position = -1;
      target_index_.push_back(e);
      targets_.push_back(entries_[e].mem.template as<float>());
    }
    const float* in = live_ >= 0 ? entries_[static_cast<std::size_t>(live_)].mem.template as<float>() : nullptr;
    const std::span<float* const> all(targets_);
    return {in, all.first(static_cast<std::size_t>(n_out)), all.subspan(static_cast<std::size_t>(n_out)), keep_rows_};
  }
  // After the pass of begin(p, n, ...): the buffers hold the states at p + 1.. (decode rows) or p + n, and
  // at p + keep_rows[i]; the positions asked to be kept are pinned.
  void commit(std::int64_t live_position, std::int64_t n, bool decode_rows) {
    if (empty()) return;
    const std::size_t n_out = target_index_.size() - keep_rows_.size();
    for (std::size_t j = 0; j < target_index_.size(); ++j) {
      const std::int64_t p = j >= n_out ? live_position + keep_rows_[j - n_out]
                             : decode_rows ? live_position + static_cast<std::int64_t>(j) + 1 : live_position + n;
      for (Entry& e : entries_)  // one state per position: an older one there (a snapshot) gives way
        if (e.position == p) e.position = -1, e.pinned = false;
      entries_[target_index_[j]].position = p;
    }
    for (std::int64_t p : pins_)
      if (find(p) >= 0) pin(p);
    target_index_.clear();
    targets_.clear();
  }

  // The largest position <= n with a state (0, the zero state, always has one).
  std::int64_t restorable(std::int64_t n) const {
    std::int64_t best = 0;
    for (const Entry& e : entries_)
      if (e.position <= n && e.position > best) best = e.position;
    return best;
  }
  // Drops every state past n (the cache now holds fewer tokens).
  void rewind(std::int64_t n) {
    for (Entry& e : entries_)
      if (e.position > n) e.position = -1, e.pinned = false;
  }
  void reset() { rewind(-1); }
  // Keeps the state at `position` (which must exist) as a snapshot; the lowest snapshot goes past the limit.
  void pin(std::int64_t position) {
    if (empty() || position == 0) return;
    const std::int64_t i = find(position);
    if (i < 0) throw Error(ErrorCategory::runtime, "recurrent state", "no state at position " + std::to_string(position) + " to keep");
    entries_[static_cast<std::size_t>(i)].pinned = true;
    std::vector<std::size_t> pinned;
    for (std::size_t k = 0; k < entries_.size(); ++k)
      if (entries_[k].pinned) pinned.push_back(k);
    if (static_cast<std::int64_t>(pinned.size()) <= keep_.snapshots) return;
    const auto lowest = *std::min_element(pinned.begin(), pinned.end(), [&](std::size_t a, std::size_t b) { return entries_[a].position < entries_[b].position; });
    entries_[lowest].pinned = false;
  }
  // Positions of the pinned snapshots, ascending.
  std::vector<std::int64_t> snapshots() const {
    std::vector<std::int64_t> out;
    for (const Entry& e : entries_)
      if (e.pinned && e.position > 0) out.push_back(e.position);
    std::sort(out.begin(), out.end());
    return out;
  }

  // The state at `position` to or from host bytes (bytes() of them: files, copies between caches on any
  // backend). A write makes `position` a kept state (reusing a free buffer).
  void read(std::int64_t position, std::span<std::byte> out) const {
    check_bytes(out.size());
    const std::int64_t i = find(position);
    if (i < 0 && position != 0) throw Error(ErrorCategory::runtime, "recurrent state", "no state at position " + std::to_string(position));
    if (i < 0) return std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bytes()), std::byte{0});
    entries_[static_cast<std::size_t>(i)].mem.read(0, out.first(bytes()));
  }
  void write(std::int64_t position, std::span<const std::byte> in) {
    check_bytes(in.size());
    std::int64_t i = find(position);
    if (i < 0) {
      for (std::size_t k = 0; k < entries_.size() && i < 0; ++k)
        if (entries_[k].position < 0) i = static_cast<std::int64_t>(k);
      if (i < 0) {
        entries_.push_back({allocate_(bytes()), -1, false});
        i = static_cast<std::int64_t>(entries_.size()) - 1;
      }
    }
    Entry& e = entries_[static_cast<std::size_t>(i)];
    e.mem.write(0, in.first(bytes()));
    e.position = position;
  }
  // This holds `from`'s state at `position` (same geometry), through the host when either is device memory.
  void copy_from(const RecurrentStates& from, std::int64_t position) {
    if (from.layers_ != layers_ || from.floats_ != floats_)
      throw Error(ErrorCategory::runtime, "recurrent state", "cannot copy a state of another geometry");
    if (empty() || position == 0) return;
    std::vector<std::byte> staging(bytes());
    from.read(position, staging);
    write(position, staging);
  }

 private:
  struct Entry {
    Memory mem;                 // [layers][floats_per_layer] f32
    std::int64_t position = -1;  // -1: free
    bool pinned = false;
  };
  std::int64_t find(std::int64_t position) const {
    if (position <= 0) return -1;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].position == position) return static_cast<std::int64_t>(i);
    return -1;
  }
  void check_bytes(std::size_t n) const {
    if (n < bytes()) throw Error(ErrorCategory::runtime, "recurrent state", "buffer of " + std::to_string(n) + " bytes, needs " + std::to_string(bytes()));
  }

  std::int64_t layers_ = 0, floats_ = 0;
  Allocate allocate_;
  StateRetention keep_;
  std::vector<Entry> entries_;
  std::int64_t live_ = -1;                // entry of the live state during a pass (-1: the zero state)
  std::vector<float*> targets_;           // [n_out] the pass's output buffers
  std::vector<std::size_t> target_index_;  // [n_out] their entries
  std::vector<std::size_t> order_;         // begin()'s candidates, kept so that a decode step allocates nothing
  std::vector<std::int64_t> keep_rows_;    // [kept] the pass's states kept inside a chunk, in tokens after the live position
  std::vector<std::int64_t> pins_;         // positions the pass keeps as snapshots
};

}  // namespace kylin
