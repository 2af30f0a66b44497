// KVCache: keys and values of every layer for up to `capacity` positions, allocated once.
// It also remembers the token ids it holds, so a new prompt can reuse the longest shared
// prefix (truncate to it, then feed only the rest).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/io/config.hpp"

namespace kylin {

class KVCache {
 public:
  KVCache(const ModelConfig& c, std::int64_t capacity)
      : n_layers_(c.num_hidden_layers), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity) {
    if (capacity <= 0) throw Error(ErrorCategory::config, "context length", "must be positive, got " + std::to_string(capacity));
    // Not value-initialised: pages are committed as positions are written, so an 8k-context
    // cache costs memory only for what is used.
    data_.reset(new float[static_cast<std::size_t>(layer_floats() * 2 * n_layers_)]);
    tokens_.reserve(static_cast<std::size_t>(capacity));
  }

  std::int64_t capacity() const { return capacity_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t remaining() const { return capacity_ - size(); }
  std::span<const int> tokens() const { return tokens_; }
  std::size_t bytes() const { return static_cast<std::size_t>(layer_floats() * 2 * n_layers_) * sizeof(float); }
  static std::size_t bytes_per_token(const ModelConfig& c) {
    return static_cast<std::size_t>(2 * c.num_hidden_layers * c.kv_dim()) * sizeof(float);
  }

  // [n_kv_heads][capacity][head_dim] for one layer.
  float* keys(std::int64_t layer) { return data_.get() + (2 * layer) * layer_floats(); }
  float* values(std::int64_t layer) { return data_.get() + (2 * layer + 1) * layer_floats(); }
  std::int64_t head_stride() const { return capacity_ * head_dim_; }

  void reset() { tokens_.clear(); }
  // Rewind to the first n tokens; later positions are overwritten by the next feed.
  void truncate(std::int64_t n) {
    if (n < 0 || n > size())
      throw Error(ErrorCategory::runtime, "kv cache", "cannot truncate " + std::to_string(size()) + " tokens to " + std::to_string(n));
    tokens_.resize(static_cast<std::size_t>(n));
  }
  // Length of the longest common prefix of the cached tokens and `prompt`.
  std::int64_t common_prefix(std::span<const int> prompt) const {
    const auto [a, b] = std::mismatch(tokens_.begin(), tokens_.end(), prompt.begin(), prompt.end());
    return static_cast<std::int64_t>(a - tokens_.begin());
  }

  void check_room(std::int64_t n_new) const {
    if (n_new > remaining())
      throw Error(ErrorCategory::runtime, "context",
                  "cannot add " + std::to_string(n_new) + " tokens to " + std::to_string(size()) +
                      ": the KV cache holds at most " + std::to_string(capacity_) + " tokens");
  }
  // Called by the model after writing keys/values of `ids` at positions size()...
  void commit(std::span<const int> ids) { tokens_.insert(tokens_.end(), ids.begin(), ids.end()); }

 private:
  std::int64_t layer_floats() const { return n_kv_heads_ * capacity_ * head_dim_; }

  std::int64_t n_layers_, n_kv_heads_, head_dim_, capacity_;
  std::unique_ptr<float[]> data_;  // [layers][k|v][n_kv_heads][capacity][head_dim]
  std::vector<int> tokens_;
};

}  // namespace kylin
