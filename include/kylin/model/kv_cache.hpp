// KVCache: keys and values of every layer for up to `capacity` positions, allocated once, in
// f32 (exact) or f16 (half the bytes decode reads at long context). It also remembers the token
// ids it holds, so a new prompt can reuse the longest shared prefix (truncate, feed the rest).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/io/config.hpp"
#include "kylin/kernels/attention.hpp"

namespace kylin {

// Element type of the cached keys and values.
enum class KVDType { f32, f16 };

inline constexpr std::size_t kv_dtype_size(KVDType d) { return d == KVDType::f32 ? 4 : 2; }
inline constexpr DType kv_storage_dtype(KVDType d) { return d == KVDType::f32 ? DType::f32 : DType::f16; }
inline const char* kv_dtype_name(KVDType d) { return d == KVDType::f32 ? "f32" : "f16"; }
inline KVDType parse_kv_dtype(std::string_view name) {
  if (name == "f32") return KVDType::f32;
  if (name == "f16") return KVDType::f16;
  throw Error(ErrorCategory::config, "kv dtype", "'" + std::string(name) + "' is not one of f32, f16");
}

class KVCache {
 public:
  KVCache(const ModelConfig& c, std::int64_t capacity, KVDType dtype = KVDType::f32)
      : n_layers_(c.num_hidden_layers), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity),
        dtype_(dtype) {
    if (capacity <= 0) throw Error(ErrorCategory::config, "context length", "must be positive, got " + std::to_string(capacity));
    // Not value-initialised: pages are committed as positions are written, so an 8k-context
    // cache costs memory only for what is used. 64-byte aligned so every head row is.
    data_.reset(static_cast<std::byte*>(::operator new[](bytes(), std::align_val_t{64})));
    tokens_.reserve(static_cast<std::size_t>(capacity));
  }

  std::int64_t capacity() const { return capacity_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t remaining() const { return capacity_ - size(); }
  std::span<const int> tokens() const { return tokens_; }
  KVDType dtype() const { return dtype_; }
  std::size_t bytes() const { return static_cast<std::size_t>(layer_elems() * 2 * n_layers_) * kv_dtype_size(dtype_); }
  static std::size_t bytes_per_token(const ModelConfig& c, KVDType dtype = KVDType::f32) {
    return static_cast<std::size_t>(2 * c.num_hidden_layers * c.kv_dim()) * kv_dtype_size(dtype);
  }
  std::size_t bytes_per_token() const { return static_cast<std::size_t>(2 * n_layers_ * n_kv_heads_ * head_dim_) * kv_dtype_size(dtype_); }

  // [n_kv_heads][capacity][head_dim] for one layer, in dtype().
  kernels::KVRef keys(std::int64_t layer) { return view(2 * layer); }
  kernels::KVRef values(std::int64_t layer) { return view(2 * layer + 1); }
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
  std::int64_t layer_elems() const { return n_kv_heads_ * capacity_ * head_dim_; }
  kernels::KVRef view(std::int64_t slot) {
    return {kv_storage_dtype(dtype_), data_.get() + static_cast<std::size_t>(slot * layer_elems()) * kv_dtype_size(dtype_)};
  }
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };

  std::int64_t n_layers_, n_kv_heads_, head_dim_, capacity_;
  KVDType dtype_;
  std::unique_ptr<std::byte[], AlignedDelete> data_;  // [layers][k|v][n_kv_heads][capacity][head_dim]
  std::vector<int> tokens_;
};

}  // namespace kylin
