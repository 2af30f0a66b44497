// The MTP head's side of one session (speculative decoding with the checkpoint's own draft head): its
// one-layer cache, whose entry j is made of (h_j, x_{j+1}), and the target's hidden states h of the positions
// the head has not read yet. Kept in step with the target's cache, whatever cut that one back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kylin/generate/token_context.hpp"
#include "kylin/model/model.hpp"

namespace kylin {

class MtpContext {
 public:
  MtpContext(const Model& model, std::int64_t capacity)
      : cache_(model.new_mtp_cache(capacity)), hidden_size_(static_cast<std::size_t>(model.hidden_size())) {}

  // Entries [0, cache().size()) for positions j, each from the target's h_j and the token after it.
  KVCache& cache() { return cache_; }
  const KVCache& cache() const { return cache_; }
  // The target's hidden states [pending_rows(), hidden] of positions [cache().size(), target size).
  std::span<const float> pending() const { return hidden_; }
  std::int64_t pending_rows() const { return static_cast<std::int64_t>(hidden_.size() / hidden_size_); }
  std::int64_t target_size() const { return cache_.size() + pending_rows(); }

  // Where the target's forward of n rows at positions target_size.. writes their hidden states (target_size: the
  // target cache's size). Asking again before that forward gives the same rows.
  std::span<float> next_rows(std::int64_t target_size, std::int64_t n) {
    const std::int64_t have = target_size - cache_.size();
    if (have < 0 || have > pending_rows())
      throw Error(ErrorCategory::runtime, "mtp", "the target's cache holds " + std::to_string(target_size) + " positions, the MTP head has read " +
                                                     std::to_string(cache_.size()) + " and holds " + std::to_string(pending_rows()) + " more");
    hidden_.resize(static_cast<std::size_t>(have + n) * hidden_size_);
    return std::span<float>(hidden_).subspan(static_cast<std::size_t>(have) * hidden_size_);
  }
  // After the target's forward: the pending rows are those of its positions (target_size: its cache's size).
  void settle(std::int64_t target_size) { next_rows(target_size, 0); }

  // The first n pending rows were read into the head's cache (its forward appended their entries).
  void consumed(std::int64_t n) {
    hidden_.erase(hidden_.begin(), hidden_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(n) * hidden_size_));
  }

  // After the target's cache was cut back (a new prompt, rejected drafts, a loaded prefix): the head keeps the
  // entries whose token is still the context's, the hidden states the target still holds; where it lacks the
  // hidden states of positions the target kept, the target is cut back too (it recomputes them).
  void align(const TokenContext& ctx, KVCache& target) {
    const std::span<const int> fed = cache_.tokens();  // fed[j] = x_{j+1}
    std::int64_t keep = 0;
    const std::int64_t most = std::min(cache_.size(), target.size());
    while (keep < most && static_cast<std::size_t>(keep) + 1 < ctx.size() && fed[static_cast<std::size_t>(keep)] == ctx[static_cast<std::size_t>(keep) + 1]) ++keep;
    if (keep < cache_.size()) hidden_.clear();  // they followed entries now dropped
    cache_.truncate(keep);
    if (target.size() > target_size()) target.truncate(target_size());  // lands at or below
    if (target.size() < cache_.size()) {
      hidden_.clear();
      cache_.truncate(target.size());
    }
    hidden_.resize(static_cast<std::size_t>(target.size() - cache_.size()) * hidden_size_);
  }

  void reset() {
    cache_.reset();
    hidden_.clear();
  }

 private:
  KVCache cache_;
  std::size_t hidden_size_;
  std::vector<float> hidden_;  // [pending_rows, hidden]
};

}  // namespace kylin
