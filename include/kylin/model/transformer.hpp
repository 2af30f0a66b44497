// Transformer<Norm, Attn, MLP>: the decoder-only forward pass, generic over its components.
// forward() runs one chunk of tokens at positions cache.size().. and appends them to the cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kylin/model/components.hpp"
#include "kylin/model/rope.hpp"

namespace kylin {

template <class Norm, class Attn, class MLP>
class Transformer {
 public:
  Transformer(const ModelConfig& c, const ModelWeights& w)
      : config_(c), weights_(w), rope_(c), final_norm_{w.norm, c.rms_norm_eps} {
    for (const LayerWeights& L : weights_.layers)
      blocks_.push_back(Block{Norm{L.input_layernorm, c.rms_norm_eps},
                              Attn{&L, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps},
                              Norm{L.post_attention_layernorm, c.rms_norm_eps}, MLP{&L, c.intermediate_size}});
  }
  Transformer(const Transformer&) = delete;  // blocks point into weights_
  Transformer& operator=(const Transformer&) = delete;

  // tokens.size() <= ws.max_tokens; logits: [rows, vocab] for the last token only (all = false)
  // or for every token (all = true), or empty to skip the LM head (an early prefill chunk).
  template <Backend B>
  void forward(B& b, Workspace& ws, std::span<const int> tokens, KVCache& cache, float* logits, bool all) const {
    const std::int64_t T = static_cast<std::int64_t>(tokens.size()), H = config_.hidden_size;
    float* x = ws.x.data();  // [T, hidden]
    // token embeddings
    for (std::int64_t t = 0; t < T; ++t) b.embed(weights_.embed_tokens, tokens[static_cast<std::size_t>(t)], x + t * H);
    // rotary tables for positions cache.size() .. + T
    rope_.tables(cache.size(), T, ws.cos.data(), ws.sin.data());
    for (std::int64_t l = 0; l < static_cast<std::int64_t>(blocks_.size()); ++l) {
      const Block& blk = blocks_[static_cast<std::size_t>(l)];
      // x += attn(input_norm(x))
      blk.input_norm(b, x, ws.xn.data(), T);
      blk.attn(b, ws, ws.xn.data(), ws.out.data(), T, cache, l);
      b.add(x, ws.out.data(), T * H);
      // x += mlp(post_attention_norm(x))
      blk.post_attention_norm(b, x, ws.xn.data(), T);
      blk.mlp(b, ws, ws.xn.data(), ws.out.data(), T);
      b.add(x, ws.out.data(), T * H);
    }
    cache.commit(tokens);
    if (!logits) return;
    // final norm and LM head, on every row or on the last one
    const std::int64_t first = all ? 0 : T - 1, rows = T - first;
    final_norm_(b, x + first * H, ws.xn.data(), rows);
    b.matmul(ws.xn.data(), weights_.lm_head, nullptr, logits, rows);
  }

  const ModelConfig& config() const { return config_; }
  const RotaryEmbedding& rope() const { return rope_; }

 private:
  struct Block {
    Norm input_norm;
    Attn attn;
    Norm post_attention_norm;
    MLP mlp;
  };

  ModelConfig config_;
  ModelWeights weights_;
  RotaryEmbedding rope_;
  Norm final_norm_;
  std::vector<Block> blocks_;
};

using Qwen3Transformer = Transformer<RMSNorm, Qwen3Attention, SwiGLU>;
using Qwen2Transformer = Transformer<RMSNorm, Qwen2Attention, SwiGLU>;

}  // namespace kylin
