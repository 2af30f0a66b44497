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
#include <unordered_map>
#include <vector>

#include "kylin/constrain/parser.hpp"
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
};

struct ConstraintStats {
  std::int64_t walks = 0;      // masks computed by walking the trie
  std::int64_t cache_hits = 0;
};

class Constraint {
 public:
  Constraint(Grammar grammar, std::shared_ptr<const TokenTrie> trie, ConstraintOptions options = {})
      : grammar_(std::move(grammar)), trie_(std::move(trie)), options_(options), arena_(grammar_, options.parser) {
    levels_.resize(trie_->max_depth + 1);
    begin(false);
  }
  Constraint(const Constraint&) = delete;
  Constraint& operator=(const Constraint&) = delete;

  // A new generation; reasoning_open: the prompt ends inside <think>.
  void begin(bool reasoning_open) {
    phase_ = reasoning_open ? Phase::reasoning
             : options_.thinking == ThinkingPolicy::allow && trie_->think_open >= 0 ? Phase::may_think
                                                                                     : Phase::answer;
    arena_.start(state_);
    failed_ = false;
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
      for (std::size_t i = w * 64; i < end; ++i)
        if (!((word >> (i - w * 64)) & 1u)) logits[i] = ninf;
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
    for (char c : trie_->token(id)) {
      arena_.step(state_, static_cast<unsigned char>(c), scratch_);
      std::swap(state_, scratch_);
    }
    if (state_.empty()) failed_ = true;
    if (arena_.full()) rebuild_arena();
  }

  // The output so far is a sentence of the grammar (EOS is allowed).
  bool complete() const { return phase_ == Phase::answer && StackArena::accepts(state_); }
  // Complete and nothing may follow: generation should end here.
  bool finished() const { return complete() && state_.size() == 1; }
  // A token outside the mask was accepted (only when the caller ignored mask()).
  bool failed() const { return failed_; }
  bool in_reasoning() const { return phase_ == Phase::reasoning; }
  const ConstraintStats& stats() const { return stats_; }
  const Grammar& grammar() const { return grammar_; }

 private:
  enum class Phase { may_think, reasoning, answer };

  bool is_eos(int id) const { return std::find(trie_->eos.begin(), trie_->eos.end(), id) != trie_->eos.end(); }

  struct StateHash {
    std::size_t operator()(const std::vector<int>& s) const noexcept {
      std::uint64_t h = 1469598103934665603ULL;
      for (int v : s) h = (h ^ static_cast<std::uint32_t>(v)) * 1099511628211ULL;
      return static_cast<std::size_t>(h);
    }
  };

  const std::vector<std::uint64_t>& current_mask() {
    auto it = cache_.find(state_);
    if (it != cache_.end()) {
      ++stats_.cache_hits;
      return it->second;
    }
    if (cache_.size() >= options_.max_cached_masks) cache_.clear();
    std::vector<std::uint64_t> bits((trie_->vocab + 63) / 64, 0);  // [ceil(vocab / 64)]
    walk(bits);
    ++stats_.walks;
    return cache_.emplace(state_, std::move(bits)).first->second;
  }

  // Preorder walk of the trie carrying one parser state per depth; a rejected byte skips its subtree.
  void walk(std::vector<std::uint64_t>& bits) {
    auto allow = [&](int id) { bits[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (id % 64); };
    levels_[0] = state_;
    const auto& nodes = trie_->nodes;
    for (std::size_t i = 0; i < nodes.size();) {
      const TokenTrie::Node& node = nodes[i];
      std::vector<int>& here = levels_[node.depth];
      arena_.step(levels_[node.depth - 1u], node.byte, here);
      if (here.empty()) {
        i = static_cast<std::size_t>(node.skip);
        continue;
      }
      for (std::int32_t k = node.ids_begin; k < node.ids_end; ++k) allow(trie_->ids[static_cast<std::size_t>(k)]);
      ++i;
    }
    if (StackArena::accepts(state_))
      for (int id : trie_->eos)
        if (id >= 0 && static_cast<std::size_t>(id) < trie_->vocab) allow(id);
  }

  void rebuild_arena() {
    arena_.save(state_, saved_);
    arena_.clear();
    arena_.restore(saved_, state_);
    cache_.clear();
  }

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  ConstraintOptions options_;
  StackArena arena_;
  Phase phase_ = Phase::answer;
  bool failed_ = false;
  std::vector<int> state_, scratch_, saved_;  // [<= max_stacks] parser states
  std::vector<std::vector<int>> levels_;      // [max token bytes + 1] walk states by depth
  std::unordered_map<std::vector<int>, std::vector<std::uint64_t>, StateHash> cache_;  // state -> [vocab/64] mask
  ConstraintStats stats_;
};

}  // namespace kylin::constrain
