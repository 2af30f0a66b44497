// LazyDfa: the parser's stack sets numbered as DFA states, with a dense 256-entry transition row
// per state filled in on first use. A vocabulary walk then costs one array read per trie node
// once the states it meets have been seen; the number of states is capped.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kylin/constrain/parser.hpp"

namespace kylin::constrain {

class LazyDfa {
 public:
  static constexpr int kNone = -1;      // no stack survives: the byte is rejected
  static constexpr int kOverflow = -3;  // the state cap was reached: reset() and go on slowly

  LazyDfa(const Grammar& g, ParserLimits parser, std::size_t max_states)
      : arena_(g, parser), max_states_(max_states) {
    reset_to({});
  }

  // Drops every state; the stacks `keep` (saved by save()) become state 0. Empty: the start state.
  int reset_to(const std::vector<int>& keep) {
    ++epoch_;
    arena_.clear();
    states_.clear();
    ids_.clear();
    next_.clear();
    std::vector<int> s;  // [<= max_stacks] the state's stack tops
    if (keep.empty()) arena_.start(s);
    else arena_.restore(keep, s);
    return intern(s);
  }
  int start() {
    std::vector<int> s;  // [<= max_stacks]
    arena_.start(s);
    const int id = intern(s);
    return id == kOverflow ? reset_to({}) : id;
  }
  void save(int state, std::vector<int>& out) const { arena_.save(states_[static_cast<std::size_t>(state)], out); }
  bool full() const { return arena_.full(); }
  // Counts reset_to() calls: state ids from an older epoch mean nothing.
  std::size_t epoch() const { return epoch_; }

  int step(int state, unsigned char b) {
    const std::size_t at = static_cast<std::size_t>(state) * 256 + b;
    if (next_[at] != kUnknown) return next_[at];
    arena_.step(states_[static_cast<std::size_t>(state)], b, scratch_);
    const int to = scratch_.empty() ? kNone : intern(scratch_);
    if (to != kOverflow) next_[at] = to;
    return to;
  }
  bool accepts(int state) const { return StackArena::accepts(states_[static_cast<std::size_t>(state)]); }
  // Complete with nothing after: only the empty stack is left.
  bool closed(int state) const { return accepts(state) && states_[static_cast<std::size_t>(state)].size() == 1; }
  std::size_t size() const { return states_.size(); }
  StackArena& arena() { return arena_; }
  const std::vector<int>& stacks(int state) const { return states_[static_cast<std::size_t>(state)]; }

 private:
  static constexpr int kUnknown = -2;

  struct Hash {
    std::size_t operator()(const std::vector<int>& s) const noexcept {
      std::uint64_t h = 1469598103934665603ULL;
      for (int v : s) h = (h ^ static_cast<std::uint32_t>(v)) * 1099511628211ULL;
      return static_cast<std::size_t>(h);
    }
  };

  int intern(const std::vector<int>& s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    if (states_.size() >= max_states_) return kOverflow;
    const int id = static_cast<int>(states_.size());
    states_.push_back(s);
    ids_.emplace(s, id);
    next_.resize(states_.size() * 256, kUnknown);
    return id;
  }

  StackArena arena_;
  std::size_t max_states_;
  std::vector<std::vector<int>> states_;                  // [n_states] sorted stack tops
  std::unordered_map<std::vector<int>, int, Hash> ids_;  // stack tops -> state
  std::vector<int> next_;                                 // [n_states * 256] transitions, kUnknown until used
  std::vector<int> scratch_;                              // [<= max_stacks]
  std::size_t epoch_ = 0;
};

}  // namespace kylin::constrain
