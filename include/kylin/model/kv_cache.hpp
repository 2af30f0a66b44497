// KVCache: keys and values of every layer for up to `capacity` positions, allocated once by the
// backend, in f32 (exact) or f16 (half the bytes decode reads at long context). It also remembers
// the token ids it holds, so a new prompt can reuse the longest shared prefix.
#pragma once

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/io/config.hpp"
#include "kylin/kernels/kv_store.hpp"
#include "kylin/backends/backend.hpp"

namespace kylin {

// The KV element types a cache can be created with: f32 (exact) and f16.
inline DType parse_kv_dtype(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  throw Error(ErrorCategory::config, "kv dtype", "'" + std::string(name) + "' is not one of f32, f16");
}

// Keys and values of every layer for up to `capacity` positions, in memory allocated by the
// model's backend (Model::new_cache), plus the token ids it holds.
class KVCache {
 public:
  // Bytes a cache of this shape needs; refuses a dtype the cache cannot hold or a bad capacity.
  static std::size_t bytes_needed(const ModelConfig& c, std::int64_t capacity, DType dtype) {
    if (capacity <= 0) throw Error(ErrorCategory::config, "context length", "must be positive, got " + std::to_string(capacity));
    if (dtype != DType::f32 && dtype != DType::f16)
      throw Error(ErrorCategory::config, "kv dtype", std::string(dtype_name(dtype)) + " is not a KV cache type (f32, f16 are)");
    return static_cast<std::size_t>(capacity) * bytes_per_token(c, dtype);
  }

  // storage: at least bytes_needed(c, capacity, dtype) bytes, 64-byte aligned, from the backend.
  KVCache(const ModelConfig& c, std::int64_t capacity, DType dtype, Memory storage)
      : n_layers_(c.num_hidden_layers), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity),
        dtype_(dtype), data_(std::move(storage)) {
    if (data_.bytes() < bytes_needed(c, capacity, dtype))
      throw Error(ErrorCategory::runtime, "kv cache", "storage of " + std::to_string(data_.bytes()) + " bytes is too small");
    tokens_.reserve(static_cast<std::size_t>(capacity));
  }

  std::int64_t capacity() const { return capacity_; }
  std::int64_t n_layers() const { return n_layers_; }
  std::int64_t n_kv_heads() const { return n_kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t remaining() const { return capacity_ - size(); }
  std::span<const int> tokens() const { return tokens_; }
  DType dtype() const { return dtype_; }
  std::size_t bytes() const { return static_cast<std::size_t>(layer_elems() * 2 * n_layers_) * dtype_size(dtype_); }
  static std::size_t bytes_per_token(const ModelConfig& c, DType dtype = DType::f32) {
    return static_cast<std::size_t>(2 * c.num_hidden_layers * c.kv_dim()) * dtype_size(dtype);
  }
  std::size_t bytes_per_token() const { return static_cast<std::size_t>(2 * n_layers_ * n_kv_heads_ * head_dim_) * dtype_size(dtype_); }
  // Whether this cache has the layer and head shape of models with config c.
  bool fits(const ModelConfig& c) const {
    return n_layers_ == c.num_hidden_layers && n_kv_heads_ == c.num_key_value_heads && head_dim_ == c.head_dim;
  }

  // [n_kv_heads][capacity][head_dim] for one layer, in dtype().
  kernels::KVRef keys(std::int64_t layer) { return view(2 * layer); }
  kernels::KVRef values(std::int64_t layer) { return view(2 * layer + 1); }
  std::int64_t head_stride() const { return capacity_ * head_dim_; }
  kernels::KVLayout layout() const { return {n_kv_heads_, head_dim_, head_stride()}; }

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

  // Bytes of positions [0, n) of one kv head of a layer's keys (kv = 0) or values (kv = 1):
  // [n][head_dim] in dtype(). Saving and restoring a prefix (generate/kv_file.hpp) and copying one
  // between caches go through these, on the host for a cache in device memory too.
  std::size_t head_bytes(std::int64_t n) const { return static_cast<std::size_t>(n * head_dim_) * dtype_size(dtype_); }
  void read_rows(std::int64_t layer, int kv, std::int64_t head, std::int64_t n, std::span<std::byte> out) const {
    check_rows(layer, kv, head, n, out.size());
    data_.read(head_offset(layer, kv, head), out.first(head_bytes(n)));
  }
  void write_rows(std::int64_t layer, int kv, std::int64_t head, std::int64_t n, std::span<const std::byte> in) {
    check_rows(layer, kv, head, n, in.size());
    data_.write(head_offset(layer, kv, head), in.first(head_bytes(n)));
  }
  // Holds the first n positions of `from`, a cache of the same shape and dtype, copied (a sibling
  // generation on the same prompt starts from them), through the host when either lives in device
  // memory.
  void copy_prefix(const KVCache& from, std::int64_t n) {
    if (n < 0 || n > from.size() || n > capacity_ || from.dtype_ != dtype_ || from.n_layers_ != n_layers_ ||
        from.n_kv_heads_ != n_kv_heads_ || from.head_dim_ != head_dim_)
      throw Error(ErrorCategory::runtime, "kv cache", "cannot copy " + std::to_string(n) + " positions from a cache of another shape");
    const bool host = data_.placement() == Placement::host && from.data_.placement() == Placement::host;
    std::vector<std::byte> staging(host ? 0 : head_bytes(n));
    for (std::int64_t layer = 0; layer < n_layers_; ++layer)
      for (int kv = 0; kv < 2; ++kv)
        for (std::int64_t head = 0; head < n_kv_heads_; ++head) {
          if (host) {
            std::memcpy(data_.as<std::byte>(head_offset(layer, kv, head)), from.data_.as<std::byte>(from.head_offset(layer, kv, head)),
                        head_bytes(n));
            continue;
          }
          from.read_rows(layer, kv, head, n, staging);
          write_rows(layer, kv, head, n, staging);
        }
    tokens_.assign(from.tokens_.begin(), from.tokens_.begin() + n);
  }
  // After the rows of positions [0, tokens.size()) were written by a restore: the cache holds `tokens`.
  void restore(std::span<const int> tokens) {
    if (static_cast<std::int64_t>(tokens.size()) > capacity_)
      throw Error(ErrorCategory::runtime, "kv cache", "cannot restore " + std::to_string(tokens.size()) + " tokens into " +
                                                          std::to_string(capacity_) + " positions");
    tokens_.assign(tokens.begin(), tokens.end());
  }

 private:
  std::int64_t layer_elems() const { return n_kv_heads_ * capacity_ * head_dim_; }
  void check_rows(std::int64_t layer, int kv, std::int64_t head, std::int64_t n, std::size_t bytes) const {
    if (layer < 0 || layer >= n_layers_ || kv < 0 || kv > 1 || head < 0 || head >= n_kv_heads_ || n < 0 || n > capacity_ ||
        bytes < head_bytes(n))
      throw Error(ErrorCategory::runtime, "kv cache",
                  "no rows [0, " + std::to_string(n) + ") of layer " + std::to_string(layer) + " head " + std::to_string(head) +
                      " in a buffer of " + std::to_string(bytes) + " bytes");
  }
  std::size_t head_offset(std::int64_t layer, int kv, std::int64_t head) const {
    return static_cast<std::size_t>((2 * layer + kv) * layer_elems() + head * head_stride()) * dtype_size(dtype_);
  }
  kernels::KVRef view(std::int64_t slot) {
    return {dtype_, data_.as<std::byte>(static_cast<std::size_t>(slot * layer_elems()) * dtype_size(dtype_))};
  }

  std::int64_t n_layers_, n_kv_heads_, head_dim_, capacity_;
  DType dtype_;
  Memory data_;             // [layers][k|v][n_kv_heads][capacity][head_dim]
  std::vector<int> tokens_;
};

}  // namespace kylin
