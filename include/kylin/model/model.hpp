// kylin::Model: load a Hugging Face directory and run the forward pass. Reads config.json,
// maps the safetensors, binds weights, picks the Transformer instantiation for model_type,
// and sizes every buffer once so decode never allocates.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <variant>

#include "kylin/model/transformer.hpp"

namespace kylin {

struct ModelOptions {
  int threads = 0;                 // 0: all hardware threads
  std::int64_t max_chunk = 512;    // prefill tokens per batched pass (activation buffers scale with it)
  KVDType kv_dtype = KVDType::f32;  // KV cache element type of new_cache(); f16 halves long-context decode reads
};

// Default KV cache length: max_position_embeddings, capped so the cache stays within
// `default_kv_budget_bytes` (2 GiB), rounded down to a multiple of 256 positions.
inline constexpr std::size_t default_kv_budget_bytes = std::size_t{2} << 30;

inline std::int64_t default_context_length(const ModelConfig& c, KVDType kv_dtype = KVDType::f32) {
  const auto per_token = static_cast<std::int64_t>(KVCache::bytes_per_token(c, kv_dtype));
  std::int64_t fit = static_cast<std::int64_t>(default_kv_budget_bytes) / per_token;
  if (fit >= 256) fit = fit / 256 * 256;
  return std::max<std::int64_t>(1, std::min(c.max_position_embeddings, fit));
}

enum class Positions { last, all };

class Model {
 public:
  static Model load(const std::filesystem::path& dir, const ModelOptions& options = {}) { return Model(dir, options); }

  const ModelConfig& config() const { return impl_->config; }
  const json::Value& generation_config() const { return impl_->generation_config; }
  const io::Checkpoint& checkpoint() const { return *impl_->checkpoint; }
  int threads() const { return impl_->backend.threads(); }
  double load_seconds() const { return impl_->load_seconds; }
  std::int64_t vocab_size() const { return impl_->config.vocab_size; }

  KVCache new_cache(std::optional<std::int64_t> context_length = std::nullopt) const {
    return KVCache(impl_->config, context_length.value_or(default_context_length(impl_->config, impl_->kv_dtype)),
                   impl_->kv_dtype);
  }
  KVDType kv_dtype() const { return impl_->kv_dtype; }

  // Feeds `tokens` at positions cache.size().. and writes logits: [1, vocab] (Positions::last)
  // or [tokens.size(), vocab] (Positions::all). Long inputs run in chunks of max_chunk tokens.
  void forward(std::span<const int> tokens, KVCache& cache, std::span<float> logits, Positions which = Positions::last) {
    validate(tokens, cache, logits, which);
    const std::int64_t V = vocab_size(), chunk = impl_->workspace.max_tokens;
    for (std::size_t begin = 0; begin < tokens.size(); begin += static_cast<std::size_t>(chunk)) {
      const auto part = tokens.subspan(begin, std::min(tokens.size() - begin, static_cast<std::size_t>(chunk)));
      const bool last_chunk = begin + part.size() == tokens.size();
      float* out = which == Positions::all ? logits.data() + static_cast<std::int64_t>(begin) * V
                   : last_chunk            ? logits.data()
                                           : nullptr;
      std::visit([&](auto& net) { net->forward(impl_->backend, impl_->workspace, part, cache, out, which == Positions::all); },
                 impl_->net);
    }
  }

  // Convenience: logits of the last token as a new vector.
  std::vector<float> logits_last(std::span<const int> tokens, KVCache& cache) {
    std::vector<float> out(static_cast<std::size_t>(vocab_size()));
    forward(tokens, cache, out);
    return out;
  }

 private:
  struct Impl {
    Impl(const std::filesystem::path& dir, const ModelOptions& o)
        : config(load_model_config(dir)),
          generation_config(load_generation_config(dir)),
          checkpoint(std::make_unique<io::Checkpoint>(dir)),
          backend(o.threads, std::max(config.hidden_size, std::max(config.intermediate_size, config.q_dim())),
                  config.n_groups(), config.head_dim, std::max<std::int64_t>(1, o.max_chunk)),
          workspace(config, std::max<std::int64_t>(1, o.max_chunk)),
          net(make_net(config, bind_weights(*checkpoint, config))),
          kv_dtype(o.kv_dtype) {}

    using Net = std::variant<std::unique_ptr<Qwen3Transformer>, std::unique_ptr<Qwen2Transformer>>;
    static Net make_net(const ModelConfig& c, const ModelWeights& w) {
      if (c.model_type == "qwen3") {
        if (c.attention_bias) throw Error(ErrorCategory::config, "attention_bias", "qwen3 with q/k/v biases is not supported");
        return std::make_unique<Qwen3Transformer>(c, w);
      }
      if (!c.attention_bias) throw Error(ErrorCategory::config, "attention_bias", "qwen2 without q/k/v biases is not supported");
      return std::make_unique<Qwen2Transformer>(c, w);
    }

    ModelConfig config;
    json::Value generation_config;
    std::unique_ptr<io::Checkpoint> checkpoint;
    CpuBackend backend;
    Workspace workspace;
    Net net;
    KVDType kv_dtype;
    double load_seconds = 0;
  };

  Model(const std::filesystem::path& dir, const ModelOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    impl_ = std::make_unique<Impl>(dir, o);
    impl_->checkpoint->advise(io::AccessHint::populate);
    impl_->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void validate(std::span<const int> tokens, const KVCache& cache, std::span<const float> logits, Positions which) const {
    if (tokens.empty()) throw Error(ErrorCategory::request, "tokens", "empty token list");
    for (int id : tokens)
      if (id < 0 || id >= vocab_size())
        throw Error(ErrorCategory::request, "tokens", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                          std::to_string(vocab_size()) + ")");
    cache.check_room(static_cast<std::int64_t>(tokens.size()));
    const std::size_t rows = which == Positions::all ? tokens.size() : 1;
    if (logits.size() < rows * static_cast<std::size_t>(vocab_size()))
      throw Error(ErrorCategory::request, "logits", "output buffer holds " + std::to_string(logits.size()) + " floats, needs " +
                                                        std::to_string(rows * static_cast<std::size_t>(vocab_size())));
  }

  std::unique_ptr<Impl> impl_;
};

}  // namespace kylin
