// Constraint: a compiled grammar applied to generation. Each step masks the logit row so only
// tokens that keep the output a prefix of a sentence stay finite, and EOS only once it is a
// sentence; Session tells it every accepted token. Masks are cached per parser state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kylin/constrain/dfa.hpp"
#include "kylin/constrain/token_trie.hpp"

namespace kylin::constrain {

// none: the grammar applies from the first generated token (<think> is masked). allow: the
// answer may open with a <think>...</think> block of free text (Qwen3 thinking), the grammar
// applies after it. A prompt that already opened <think> always gets free reasoning first.
enum class ThinkingPolicy { none, allow };

struct ConstraintOptions {
  ThinkingPolicy thinking = ThinkingPolicy::none;
  ParserLimits parser;
  std::size_t max_cached_masks = 1024;  // masks are vocab / 8 bytes each (19 KB for Qwen3)
  std::size_t max_dfa_states = 8192;    // 1 KB of transitions each; past it the walk goes state by state
};

struct ConstraintStats {
  std::int64_t walks = 0;       // masks computed by walking the trie
  std::int64_t cache_hits = 0;
  std::int64_t slow_walks = 0;  // walks that met the DFA state cap and stepped stack sets instead
};

class Constraint {
 public:
  Constraint(Grammar grammar, std::shared_ptr<const TokenTrie> trie, ConstraintOptions options = {})
      : grammar_(std::move(grammar)),
        trie_(std::move(trie)),
        options_(options),
        dfa_(grammar_, options.parser, options.max_dfa_states) {
    levels_.resize(trie_->max_depth + 1);
    slow_levels_.resize(trie_->max_depth + 1);
    begin(false);
  }
  Constraint(const Constraint&) = delete;
  Constraint& operator=(const Constraint&) = delete;

  // A new generation; reasoning_open: the prompt ends inside <think>.
  void begin(bool reasoning_open) {
    phase_ = reasoning_open ? Phase::reasoning
             : options_.thinking == ThinkingPolicy::allow && trie_->think_open >= 0 ? Phase::may_think
                                                                                     : Phase::answer;
    const std::size_t epoch = dfa_.epoch();
    state_ = dfa_.start();
    if (dfa_.epoch() != epoch) {  // the DFA was renumbered: cached masks name old states
      mask_of_.clear();
      masks_.clear();
    }
    failed_ = false;
  }

  // Computes the start state's mask now, on the caller's thread (kylin-server: the request's, not
  // the inference thread that decodes every slot): that first walk builds most of the DFA's
  // states, so the first decoding step finds the mask cached.
  void warm() {
    if (state_ >= 0) (void)current_mask();
  }

  // Sets every forbidden entry of `logits` ([model vocab]) to -inf. No allocation once warm.
  void mask(std::span<float> logits) {
    if (phase_ == Phase::reasoning) return;
    const bool think = phase_ == Phase::may_think && static_cast<std::size_t>(trie_->think_open) < logits.size();
    const float think_logit = think ? logits[static_cast<std::size_t>(trie_->think_open)] : 0.0f;
    const std::vector<std::uint64_t>& bits = current_mask();  // [ceil(vocab / 64)]
    const float ninf = -std::numeric_limits<float>::infinity();
    const std::size_t n = std::min(logits.size(), trie_->vocab);
    for (std::size_t w = 0; w * 64 < n; ++w) {
      const std::uint64_t word = bits[w];
      if (word == ~std::uint64_t{0}) continue;
      const std::size_t end = std::min(n, w * 64 + 64);
      if (word == 0) {  // most words of a narrow mask: a plain fill the compiler vectorises
        std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64), logits.begin() + static_cast<std::ptrdiff_t>(end), ninf);
        continue;
      }
      float* row = logits.data() + w * 64;
      for (std::size_t j = 0; j < end - w * 64; ++j) row[j] = (word >> j) & 1u ? row[j] : ninf;  // branchless: a blend
    }
    for (std::size_t i = n; i < logits.size(); ++i) logits[i] = ninf;
    if (think) logits[static_cast<std::size_t>(trie_->think_open)] = think_logit;
  }

  // The token the sampler drew (EOS included or not: an EOS id changes nothing).
  void accept(int id) {
    if (phase_ == Phase::reasoning) {
      if (id == trie_->think_close) phase_ = Phase::answer;
      return;
    }
    if (phase_ == Phase::may_think) {
      phase_ = Phase::answer;
      if (id == trie_->think_open) {
        phase_ = Phase::reasoning;
        return;
      }
    }
    if (is_eos(id)) return;
    if (id < 0 || static_cast<std::size_t>(id) >= trie_->vocab || !trie_->is_text[static_cast<std::size_t>(id)]) {
      failed_ = true;
      return;
    }
    if (state_ < 0) return;
    if (dfa_.full()) reset_keeping_state();
    for (char c : trie_->token(id)) {
      int next = dfa_.step(state_, static_cast<unsigned char>(c));
      if (next == LazyDfa::kOverflow) {
        reset_keeping_state();
        next = dfa_.step(state_, static_cast<unsigned char>(c));
      }
      if (next < 0) {
        failed_ = true;
        state_ = LazyDfa::kNone;
        return;
      }
      state_ = next;
    }
  }

  // Speculative decoding walks draft tokens through the constraint, then comes back: mark() saves
  // where it is, rewind() returns there (by the saved stacks when the DFA was renumbered meanwhile).
  void mark() {
    mark_ = {phase_, failed_, state_, dfa_.epoch()};
    if (state_ >= 0) dfa_.save(state_, mark_stacks_);
  }
  void rewind() {
    phase_ = mark_.phase;
    failed_ = mark_.failed;
    if (mark_.state < 0 || mark_.epoch == dfa_.epoch()) {
      state_ = mark_.state;
      return;
    }
    state_ = dfa_.reset_to(mark_stacks_);
    masks_.clear();
    mask_of_.clear();
  }

  // Whether `id` may come next: mask() would leave its logit as it is.
  bool allows(int id) {
    if (phase_ == Phase::reasoning) return true;
    if (phase_ == Phase::may_think && id == trie_->think_open) return true;
    if (id < 0 || static_cast<std::size_t>(id) >= trie_->vocab) return false;
    return (current_mask()[static_cast<std::size_t>(id) / 64] >> (id % 64)) & 1u;
  }

  // The output so far is a sentence of the grammar (EOS is allowed).
  bool complete() const { return phase_ == Phase::answer && state_ >= 0 && dfa_.accepts(state_); }
  // Complete and nothing may follow: generation should end here.
  bool finished() const { return complete() && dfa_.closed(state_); }
  // A token outside the mask was accepted (only when the caller ignored mask()).
  bool failed() const { return failed_; }
  bool in_reasoning() const { return phase_ == Phase::reasoning; }
  const ConstraintStats& stats() const { return stats_; }
  const Grammar& grammar() const { return grammar_; }

 private:
  enum class Phase { may_think, reasoning, answer };
  struct Mark {
    Phase phase = Phase::answer;
    bool failed = false;
    int state = 0;
    std::size_t epoch = 0;
  };

  bool is_eos(int id) const { return std::find(trie_->eos.begin(), trie_->eos.end(), id) != trie_->eos.end(); }

  // The mask of the current state: cached per DFA state, else one trie walk.
  const std::vector<std::uint64_t>& current_mask() {
    if (state_ < 0) {  // only after a token outside the mask: nothing is allowed
      dead_.assign((trie_->vocab + 63) / 64, 0);
      return dead_;
    }
    if (static_cast<std::size_t>(state_) < mask_of_.size() && mask_of_[static_cast<std::size_t>(state_)] >= 0) {
      ++stats_.cache_hits;
      return masks_[static_cast<std::size_t>(mask_of_[static_cast<std::size_t>(state_)])];
    }
    if (masks_.size() >= options_.max_cached_masks) {
      masks_.clear();
      mask_of_.clear();
    }
    std::vector<std::uint64_t> bits((trie_->vocab + 63) / 64, 0);  // [ceil(vocab / 64)]
    if (dfa_.full()) reset_keeping_state();
    if (!walk(bits)) {
      ++stats_.slow_walks;
      reset_keeping_state();
      std::fill(bits.begin(), bits.end(), 0);
      slow_walk(bits);
    }
    ++stats_.walks;
    if (mask_of_.size() <= static_cast<std::size_t>(state_)) mask_of_.resize(static_cast<std::size_t>(state_) + 1, -1);
    mask_of_[static_cast<std::size_t>(state_)] = static_cast<int>(masks_.size());
    masks_.push_back(std::move(bits));
    return masks_.back();
  }

  void allow(std::vector<std::uint64_t>& bits, int id) const {
    bits[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (id % 64);
  }
  void allow_eos(std::vector<std::uint64_t>& bits) const {
    if (dfa_.accepts(state_))
      for (int id : trie_->eos)
        if (id >= 0 && static_cast<std::size_t>(id) < trie_->vocab) allow(bits, id);
  }

  // Preorder walk of the trie carrying one DFA state per depth; a rejected byte skips its
  // subtree. False when the DFA hit its state cap (the caller resets it and walks slowly).
  bool walk(std::vector<std::uint64_t>& bits) {
    levels_[0] = state_;
    const auto& nodes = trie_->nodes;
    for (std::size_t i = 0; i < nodes.size();) {
      const TokenTrie::Node& node = nodes[i];
      const int next = dfa_.step(levels_[node.depth - 1u], node.byte);
      if (next == LazyDfa::kOverflow) return false;
      if (next < 0) {
        i = static_cast<std::size_t>(node.skip);
        continue;
      }
      levels_[node.depth] = next;
      for (std::int32_t k = node.ids_begin; k < node.ids_end; ++k) allow(bits, trie_->ids[static_cast<std::size_t>(k)]);
      ++i;
    }
    allow_eos(bits);
    return true;
  }

  // The same walk over raw stack sets, for grammars with more states than the DFA keeps.
  void slow_walk(std::vector<std::uint64_t>& bits) {
    StackArena& arena = dfa_.arena();
    slow_levels_[0] = dfa_.stacks(state_);
    const auto& nodes = trie_->nodes;
    for (std::size_t i = 0; i < nodes.size();) {
      const TokenTrie::Node& node = nodes[i];
      std::vector<int>& here = slow_levels_[node.depth];
      arena.step(slow_levels_[node.depth - 1u], node.byte, here);
      if (here.empty()) {
        i = static_cast<std::size_t>(node.skip);
        continue;
      }
      for (std::int32_t k = node.ids_begin; k < node.ids_end; ++k) allow(bits, trie_->ids[static_cast<std::size_t>(k)]);
      ++i;
    }
    allow_eos(bits);
  }

  // Renumbers the DFA from the current state alone (cap reached or arena full); masks go too.
  void reset_keeping_state() {
    dfa_.save(state_, saved_);
    state_ = dfa_.reset_to(saved_);
    masks_.clear();
    mask_of_.clear();
  }

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  ConstraintOptions options_;
  LazyDfa dfa_;
  Phase phase_ = Phase::answer;
  bool failed_ = false;
  int state_ = 0;                               // DFA state, LazyDfa::kNone after a forbidden token
  std::vector<int> saved_;                      // [stack positions] state_ across a DFA reset
  Mark mark_;                                   // where rewind() returns to
  std::vector<int> mark_stacks_;                // [stack positions] mark_.state's stacks
  std::vector<int> levels_;                     // [max token bytes + 1] DFA state by walk depth
  std::vector<std::vector<int>> slow_levels_;   // [max token bytes + 1] stack sets by depth (slow walk)
  std::vector<int> mask_of_;                    // [n_dfa_states] index into masks_, -1 none
  std::vector<std::vector<std::uint64_t>> masks_;  // [n_masks][ceil(vocab / 64)] allowed-id bitsets
  std::vector<std::uint64_t> dead_;             // [ceil(vocab / 64)] all clear
  ConstraintStats stats_;
};

}  // namespace kylin::constrain
