// KVCache: a sequence's cache: keys and values of every attention layer for up to `capacity` positions,
// allocated once by the backend, in f32 (exact) or f16 (half the bytes decode reads at long context), and for
// hybrid models the recurrent state of the Gated DeltaNet layers (model/recurrent_state.hpp). It also remembers
// the token ids it holds, so a new prompt can reuse the longest shared prefix it can restore, and the RoPE
// position each next token takes (image tokens, held as keys of their image's content, move it: M-RoPE).
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
#include "kylin/model/recurrent_state.hpp"

namespace kylin {

// The KV element types a cache can be created with: f32 (exact) and f16.
inline DType parse_kv_dtype(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  throw Error(ErrorCategory::config, "kv dtype", "'" + std::string(name) + "' is not one of f32, f16");
}

// Keys and values of every attention layer for up to `capacity` positions, in memory allocated by the
// model's backend (Model::new_cache), the recurrent states of the linear layers, and the token ids it holds.
// A cache of a hybrid model can be cut back only to a position it holds a state of: truncate(n) lands on
// the largest such position <= n (size() tells where), and the caller feeds the tokens after it again.
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
  // states: the recurrent states of c's linear layers (empty for an attention-only model).
  KVCache(const ModelConfig& c, std::int64_t capacity, DType dtype, Memory storage, RecurrentStates states = {})
      : n_layers_(c.attention_layers()), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity),
        dtype_(dtype), data_(std::move(storage)), states_(std::move(states)) {
    if (states_.layers() != c.linear_layers() || (c.linear && states_.floats_per_layer() != c.linear->state_floats()))
      throw Error(ErrorCategory::runtime, "kv cache", "recurrent states of another geometry than the model's linear layers");
    if (data_.bytes() < bytes_needed(c, capacity, dtype))
      throw Error(ErrorCategory::runtime, "kv cache", "storage of " + std::to_string(data_.bytes()) + " bytes is too small");
    tokens_.reserve(static_cast<std::size_t>(capacity));
    next_positions_.reserve(static_cast<std::size_t>(capacity));
  }

  std::int64_t capacity() const { return capacity_; }
  std::int64_t n_layers() const { return n_layers_; }
  std::int64_t n_kv_heads() const { return n_kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t remaining() const { return capacity_ - size(); }
  std::span<const int> tokens() const { return tokens_; }
  // The RoPE position of the token after the first n (n itself for text; M-RoPE images move it, vision/tower.hpp),
  // and after all of them.
  std::int64_t position_after(std::int64_t n) const { return n <= 0 ? 0 : next_positions_[static_cast<std::size_t>(n - 1)]; }
  std::int64_t next_position() const { return position_after(size()); }
  // How many tokens come before the first image token (a negative id: image_token_key), size() when none: what a
  // KV file can hold, since it does not keep image positions.
  std::int64_t text_prefix() const { return std::ranges::find_if(tokens_, [](int id) { return id < 0; }) - tokens_.begin(); }
  DType dtype() const { return dtype_; }
  std::size_t bytes() const { return static_cast<std::size_t>(layer_elems() * 2 * n_layers_) * dtype_size(dtype_); }
  static std::size_t bytes_per_token(const ModelConfig& c, DType dtype = DType::f32) {
    return static_cast<std::size_t>(2 * c.attention_layers() * c.kv_dim()) * dtype_size(dtype);
  }
  // Bytes of one recurrent state (all linear layers; 0 for an attention-only model).
  static std::size_t state_bytes(const ModelConfig& c) {
    return c.linear ? static_cast<std::size_t>(c.linear_layers() * c.linear->state_floats()) * sizeof(float) : 0;
  }
  std::size_t bytes_per_token() const { return static_cast<std::size_t>(2 * n_layers_ * n_kv_heads_ * head_dim_) * dtype_size(dtype_); }
  // Whether this cache has the layer and head shape of models with config c.
  bool fits(const ModelConfig& c) const {
    return n_layers_ == c.attention_layers() && n_kv_heads_ == c.num_key_value_heads && head_dim_ == c.head_dim &&
           states_.layers() == c.linear_layers() && (!c.linear || states_.floats_per_layer() == c.linear->state_floats());
  }
  // The recurrent states (empty for an attention-only model).
  const RecurrentStates& states() const { return states_; }
  RecurrentStates& states() { return states_; }
  bool has_states() const { return !states_.empty(); }

  // [n_kv_heads][capacity][head_dim] for one layer, in dtype().
  kernels::KVRef keys(std::int64_t layer) { return view(2 * layer); }
  kernels::KVRef values(std::int64_t layer) { return view(2 * layer + 1); }
  std::int64_t head_stride() const { return capacity_ * head_dim_; }
  kernels::KVLayout layout() const { return {n_kv_heads_, head_dim_, head_stride()}; }

  void reset() {
    tokens_.clear();
    next_positions_.clear();
    states_.reset();
  }
  // Rewind to the first n tokens, or, with recurrent states, to the largest position <= n holding one
  // (restorable(n)); later positions are overwritten by the next feed. size() says where it landed.
  void truncate(std::int64_t n) {
    if (n < 0 || n > size())
      throw Error(ErrorCategory::runtime, "kv cache", "cannot truncate " + std::to_string(size()) + " tokens to " + std::to_string(n));
    const std::int64_t at = restorable(n);
    tokens_.resize(static_cast<std::size_t>(at));
    next_positions_.resize(static_cast<std::size_t>(at));
    states_.rewind(at);
  }
  // The largest position <= n (<= size()) this cache can be cut back to: n itself without recurrent states.
  std::int64_t restorable(std::int64_t n) const {
    n = std::min(n, size());
    return states_.empty() || n == size() ? n : states_.restorable(n);
  }
  // Length of the longest common prefix of the cached tokens and `prompt`.
  std::int64_t common_prefix(std::span<const int> prompt) const {
    const auto [a, b] = std::mismatch(tokens_.begin(), tokens_.end(), prompt.begin(), prompt.end());
    return static_cast<std::int64_t>(a - tokens_.begin());
  }
  // How much of `prompt` this cache can serve: its shared prefix, cut back to a restorable position.
  std::int64_t reusable_prefix(std::span<const int> prompt) const { return restorable(common_prefix(prompt)); }
  // Keeps the current state as a snapshot for later prefix reuse (no copy; nothing without recurrent states).
  void keep_state() { states_.pin(size()); }

  void check_room(std::int64_t n_new) const {
    if (n_new > remaining())
      throw Error(ErrorCategory::runtime, "context",
                  "cannot add " + std::to_string(n_new) + " tokens to " + std::to_string(size()) +
                      ": the KV cache holds at most " + std::to_string(capacity_) + " tokens");
  }
  // Where a pass over n tokens at size().. reads and writes its recurrent states (RecurrentStates::begin):
  // one output per row for decode rows, else one, and the positions of keep_at it covers kept as snapshots.
  RecurrentStates::Targets begin_states(std::int64_t n, bool decode_rows, std::span<const std::int64_t> keep_at = {}) {
    return states_.begin(size(), n, decode_rows, keep_at);
  }
  // Called by the model after writing keys/values (and states) of `ids` at positions size()..; next_after[i]: the
  // position of the token after ids[i] when images moved it (empty: text, each one past the last).
  void commit(std::span<const int> ids, bool decode_rows = false, std::span<const std::int64_t> next_after = {}) {
    states_.commit(size(), static_cast<std::int64_t>(ids.size()), decode_rows);
    for (std::int64_t i = 0, next = next_position(); i < static_cast<std::int64_t>(ids.size()); ++i)
      next_positions_.push_back(next_after.empty() ? ++next : next_after[static_cast<std::size_t>(i)]);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  }

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
  // memory; with recurrent states, the first from.restorable(n) and the state there.
  void copy_prefix(const KVCache& from, std::int64_t n) {
    if (n < 0 || n > from.size() || n > capacity_ || from.dtype_ != dtype_ || from.n_layers_ != n_layers_ ||
        from.n_kv_heads_ != n_kv_heads_ || from.head_dim_ != head_dim_ || from.states_.layers() != states_.layers() ||
        from.states_.floats_per_layer() != states_.floats_per_layer())
      throw Error(ErrorCategory::runtime, "kv cache", "cannot copy " + std::to_string(n) + " positions from a cache of another shape");
    n = from.restorable(n);
    reset();
    states_.copy_from(from.states_, n);
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
    next_positions_.assign(from.next_positions_.begin(), from.next_positions_.begin() + n);
  }
  // The recurrent state at size() to or from host bytes (state_bytes() of them), for files.
  std::size_t state_bytes() const { return states_.bytes(); }
  void read_state(std::span<std::byte> out) const { states_.read(size(), out); }
  void read_state(std::int64_t position, std::span<std::byte> out) const { states_.read(position, out); }
  // Before restore(tokens): the state after those tokens.
  void write_state(std::int64_t position, std::span<const std::byte> in) { states_.write(position, in); }
  // After the rows of positions [0, tokens.size()) (and the state there) were written by a restore: the cache holds `tokens`.
  void restore(std::span<const int> tokens) {
    if (static_cast<std::int64_t>(tokens.size()) > capacity_)
      throw Error(ErrorCategory::runtime, "kv cache", "cannot restore " + std::to_string(tokens.size()) + " tokens into " +
                                                          std::to_string(capacity_) + " positions");
    const auto n = static_cast<std::int64_t>(tokens.size());
    if (std::ranges::any_of(tokens, [](int id) { return id < 0; }))
      throw Error(ErrorCategory::runtime, "kv cache", "cannot restore image tokens: their positions are not kept with them");
    states_.rewind(n);
    if (!states_.empty() && states_.restorable(n) != n)
      throw Error(ErrorCategory::runtime, "kv cache", "cannot restore " + std::to_string(n) + " tokens without the recurrent state after them");
    tokens_.assign(tokens.begin(), tokens.end());
    next_positions_.resize(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) next_positions_[i] = static_cast<std::int64_t>(i) + 1;
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
  Memory data_;             // [attention layers][k|v][n_kv_heads][capacity][head_dim]
  RecurrentStates states_;  // the linear layers' states at a few positions
  std::vector<int> tokens_;
  std::vector<std::int64_t> next_positions_;  // [size()] 1 + the largest position of the tokens up to each
};

}  // namespace kylin
