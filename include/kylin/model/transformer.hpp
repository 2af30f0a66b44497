// Transformer<Norm, Attn, MLP>: the decoder-only forward pass, generic over its components.
// forward() runs one Pass: chunks of several sequences, each against and into its own cache (keys and
// values, and for a hybrid stack the recurrent states of its linear layers).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kylin/model/arch.hpp"
#include "kylin/model/components.hpp"
#include "kylin/model/hybrid_components.hpp"
#include "kylin/model/rope.hpp"

namespace kylin {

// Which stack a Transformer runs: the model's layers, or the checkpoint's multi-token-prediction head (one
// full-attention layer over the fusion of each token's embedding with the target's hidden state: ModelWeights::mtp).
enum class Stack { target, mtp_head };

// The MTP head's config: the target's shapes with one full-attention layer (its KV cache holds one layer).
inline ModelConfig mtp_head_config(ModelConfig c) {
  c.num_hidden_layers = 1;
  if (!c.layer_types.empty()) c.layer_types = {LayerType::full_attention};
  c.linear.reset();
  return c;
}

template <class Norm, class Attn, class MLP>
class Transformer {
 public:
  Transformer(const ModelConfig& c, const ModelWeights& w, Stack stack = Stack::target)
      : config_(stack == Stack::target ? c : mtp_head_config(c)), weights_(w), rope_(c),
        final_norm_{stack == Stack::target ? w.norm : w.mtp.norm, c.rms_norm_eps} {
    const std::size_t first = stack == Stack::target ? 0 : static_cast<std::size_t>(c.num_hidden_layers);
    for (std::size_t l = first; l < first + static_cast<std::size_t>(config_.num_hidden_layers); ++l) {
      const LayerWeights& L = weights_.layers.at(l);
      blocks_.push_back(Block{Norm{L.input_layernorm, c.rms_norm_eps}, Attn::from(L, config_, static_cast<std::int64_t>(l - first)),
                              Norm{L.post_attention_layernorm, c.rms_norm_eps}, MLP::from(L, config_)});
    }
    if (stack == Stack::mtp_head)
      fusion_ = Fusion{Norm{w.mtp.pre_fc_norm_embedding, c.rms_norm_eps}, Norm{w.mtp.pre_fc_norm_hidden, c.rms_norm_eps}, &weights_.mtp};
  }
  Transformer(const Transformer&) = delete;  // blocks point into weights_
  Transformer& operator=(const Transformer&) = delete;

  // One pass: every sequence's tokens at positions cache.size().., appended to its cache; the
  // rows each sequence asked for come back as logits and/or final hidden states.
  template <Backend B>
  void forward(B& b, Workspace& ws, const Pass& pass) const {
    const std::int64_t half = rope_.rotary_dim() / 2;
    float* x = ws.x;  // [R, hidden]
    ws.pass_states.clear();
    for (const PassSequence& s : pass.seqs) {
      // the pass's token ids in row order (an image key embeds as id 0, replaced below), rotary tables of the
      // rows' positions, made on the host, and where the sequence's recurrent states are read and written (hybrid stacks)
      std::ranges::transform(s.tokens, ws.ids_host.begin() + s.row0, [](int id) { return std::max(id, 0); });
      rotary_tables(ws, s);
      ws.pass_states.push_back(s.cache->begin_states(s.n(), pass.decodes(s), s.keep_states));
    }
    // token embeddings, one call for the pass; image tokens take the vision tower's (the MTP head fuses them
    // with the target's hidden states)
    b.embed(weights_.embed_tokens, std::span<const int>(ws.ids_host).first(static_cast<std::size_t>(pass.rows)), x);
    for (const PassSequence& s : pass.seqs)
      for (const ImageRows& im : s.images) b.upload(x + (s.row0 + im.row) * config_.hidden_size, im.embeds);
    if (fusion_) fuse_hidden(b, ws, pass);
    b.upload(ws.cos, std::span<const float>(ws.cos_host).first(static_cast<std::size_t>(pass.rows * half)));
    b.upload(ws.sin, std::span<const float>(ws.sin_host).first(static_cast<std::size_t>(pass.rows * half)));
    for (std::int64_t l = 0; l < static_cast<std::int64_t>(blocks_.size()); ++l) {
      const Block& blk = blocks_[static_cast<std::size_t>(l)];
      // x += attn(input_norm(x))
      blk.input_norm(b, x, ws.xn, pass.rows);
      blk.attn(b, ws, ws.xn, x, pass);
      // x += mlp(post_attention_norm(x))
      blk.post_attention_norm(b, x, ws.xn, pass.rows);
      blk.mlp(b, ws, ws.xn, x, pass);
    }
    for (const PassSequence& s : pass.seqs)
      s.cache->commit(s.tokens, pass.decodes(s), s.images.empty() ? std::span<const std::int64_t>{} : rows_of(ws.next_after_host, s));
    write_outputs(b, ws, pass);
  }

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const RotaryEmbedding& rope() const { return rope_; }

 private:
  // Rotary tables of s's rows: positions from where its cache stands, with M-RoPE's three rows where it has images
  // (their positions and the ones after each kept for KVCache::commit).
  void rotary_tables(Workspace& ws, const PassSequence& s) const {
    const std::int64_t half = rope_.rotary_dim() / 2;
    float *cos = ws.cos_host.data() + s.row0 * half, *sin = ws.sin_host.data() + s.row0 * half;
    if (s.images.empty()) return rope_.tables(s.cache->next_position(), s.n(), cos, sin);
    ws.positions_host.resize(static_cast<std::size_t>(ws.max_pass_rows));
    ws.next_after_host.resize(static_cast<std::size_t>(ws.max_pass_rows));
    const std::span<MRopePosition> pos = rows_of(ws.positions_host, s);
    image_positions(*s.cache, s.n(), s.images, pos, rows_of(ws.next_after_host, s));
    rope_.tables(pos, cos, sin);
  }
  template <class T>
  static std::span<T> rows_of(std::vector<T>& v, const PassSequence& s) {
    return std::span<T>(v).subspan(static_cast<std::size_t>(s.row0), static_cast<std::size_t>(s.n()));
  }

  // The hidden states each sequence wants (final norm) to the host; then the final norm of the rows it wants
  // logits of, gathered into xn in pass order, and their LM-head logits (logit_rows rows per product, always the
  // dot-product kernel, so a row's logits never depend on its neighbours) to the host buffers, or only each
  // row's greedy id, top-k or draw.
  template <Backend B>
  void write_outputs(B& b, Workspace& ws, const Pass& pass) const {
    const std::int64_t H = config_.hidden_size, V = config_.vocab_size;
    for (const PassSequence& s : pass.seqs) {
      if (s.out.hidden_count == 0) continue;
      final_norm_(b, ws.x + (s.row0 + s.out.hidden_first) * H, ws.xn, s.out.hidden_count);
      b.download(s.out.hidden.first(static_cast<std::size_t>(s.out.hidden_count * H)), ws.xn);
    }
    std::int64_t n_logits = 0;
    for (const PassSequence& s : pass.seqs) {
      if (s.out.count == 0) continue;
      final_norm_(b, ws.x + (s.row0 + s.out.first) * H, ws.xn + n_logits * H, s.out.count);
      n_logits += s.out.count;
    }
    const std::int64_t N = weights_.lm_head.rows;  // < V: the MTP head's draft vocabulary (ModelOptions::mtp_vocab)
    for (std::int64_t g0 = 0; g0 < n_logits; g0 += Workspace::logit_rows) {
      const std::int64_t g1 = std::min(n_logits, g0 + Workspace::logit_rows);
      b.matmul(ws.xn + g0 * H, weights_.lm_head, nullptr, ws.logits, {g1 - g0, g1 - g0});
      std::int64_t o = 0;  // first gathered row of the sequence
      for (const PassSequence& s : pass.seqs) {
        const std::int64_t r0 = std::max(o, g0), r1 = std::min(o + s.out.count, g1);
        if (r0 < r1 && !s.out.logits.empty() && N == V)
          b.download(s.out.logits.subspan(static_cast<std::size_t>((r0 - o) * V), static_cast<std::size_t>((r1 - r0) * V)),
                     ws.logits + (r0 - g0) * V);
        else if (r0 < r1 && !s.out.logits.empty())
          for (std::int64_t r = r0; r < r1; ++r) {  // rows of N logits, the ids past them -inf
            const std::span<float> row = s.out.logits.subspan(static_cast<std::size_t>((r - o) * V), static_cast<std::size_t>(V));
            b.download(row.first(static_cast<std::size_t>(N)), ws.logits + (r - g0) * N);
            std::fill(row.begin() + N, row.end(), -std::numeric_limits<float>::infinity());
          }
        o += s.out.count;
      }
      write_picks(b, ws, pass.seqs, g0, g1);
    }
  }

  // Greedy ids, top-k and draws of the gathered rows [g0, g1) (in ws.logits): one backend call for
  // each run of consecutive sequences asking the same (greedy, top-k of one k, or draws; one cut),
  // so that a device sends back one copy for a batch of decode rows, not one a sequence.
  template <Backend B>
  void write_picks(B& b, Workspace& ws, std::span<const PassSequence> seqs, std::int64_t g0, std::int64_t g1) const {
    static constexpr std::int64_t none = -1, greedy = 0, draw = -2;  // what asks() returns besides a top-k's k
    const std::int64_t V = config_.vocab_size;
    auto asks = [](const OutputRows& out) { return !out.greedy.empty() ? greedy : !out.top.empty() ? out.top_k : !out.drawn.empty() ? draw : none; };
    auto same = [&](const OutputRows& a, const OutputRows& first) { return a.count == 0 || (asks(a) == asks(first) && a.pick_end == first.pick_end); };
    std::int64_t o = 0;  // first gathered row of seqs[i]
    for (std::size_t i = 0; i < seqs.size();) {
      const OutputRows& first = seqs[i].out;
      const std::int64_t k = asks(first), r0 = std::max(o, g0);
      if (k == none || std::min(o + first.count, g1) <= r0) {
        o += first.count, ++i;
        continue;
      }
      std::size_t j = i + 1;
      std::int64_t end = o + first.count;  // past the run's gathered rows
      for (; j < seqs.size() && same(seqs[j].out, first); ++j) end += seqs[j].out.count;
      // f(out, from, to, at): each sequence's share of the run's rows, [from, to) of the run's, from `at` of its own
      auto shares = [&](auto f) {
        for (std::int64_t m = static_cast<std::int64_t>(i), om = o; m < static_cast<std::int64_t>(j); om += seqs[static_cast<std::size_t>(m++)].out.count) {
          const OutputRows& s = seqs[static_cast<std::size_t>(m)].out;
          const std::int64_t s0 = std::max(om, g0), s1 = std::min(om + s.count, g1);
          if (s0 < s1) f(s, static_cast<std::ptrdiff_t>(s0 - r0), static_cast<std::ptrdiff_t>(s1 - r0), static_cast<std::ptrdiff_t>(s0 - om));
        }
      };
      const auto n = static_cast<std::size_t>(std::min(end, g1) - r0), nk = n * static_cast<std::size_t>(std::max<std::int64_t>(k, 0));
      const LogitRows rows{ws.logits + (r0 - g0) * V, first.pick_end, V};  // [n, V]
      if (k == greedy) {
        b.argmax_rows(rows, std::span<int>(ws.picked_ids).first(n));
        shares([&](const OutputRows& s, auto from, auto to, auto at) { std::copy(ws.picked_ids.begin() + from, ws.picked_ids.begin() + to, s.greedy.begin() + at); });
      } else if (k == draw) {
        shares([&](const OutputRows& s, auto from, auto to, auto at) { std::copy(s.draws.begin() + at, s.draws.begin() + at + (to - from), ws.picked_draws.begin() + from); });
        b.draw_rows(rows, std::span<const kernels::RowDraw>(ws.picked_draws).first(n), std::span<int>(ws.picked_ids).first(n));
        shares([&](const OutputRows& s, auto from, auto to, auto at) { std::copy(ws.picked_ids.begin() + from, ws.picked_ids.begin() + to, s.drawn.begin() + at); });
      } else {
        if (ws.picked_top.size() < nk) ws.picked_top.resize(nk);  // grows to the largest k asked, once
        b.top_k_rows(rows, std::span<kernels::RankedLogit>(ws.picked_top).first(nk), k);
        shares([&](const OutputRows& s, auto from, auto to, auto at) {
          std::copy(ws.picked_top.begin() + from * k, ws.picked_top.begin() + to * k, s.top.begin() + at * k);
        });
      }
      o = end, i = j;
    }
  }

  // The MTP head's input (vLLM / SGLang qwen3_next_mtp): x = fc([pre_fc_norm_embedding(x) | pre_fc_norm_hidden(h)]),
  // h [R, hidden] each row's PassSequence::hidden_in, fc split by columns (MtpWeights) into two products.
  template <Backend B>
  void fuse_hidden(B& b, Workspace& ws, const Pass& pass) const {
    const std::int64_t H = config_.hidden_size;
    for (const PassSequence& s : pass.seqs) b.upload(ws.out + s.row0 * H, s.hidden_in);  // [n, H] each
    fusion_->hidden_norm(b, ws.out, ws.out, pass.rows);
    fusion_->embedding_norm(b, ws.x, ws.xn, pass.rows);
    b.matmul(ws.xn, fusion_->w->fc_embedding, nullptr, ws.x, pass.plan());
    b.matmul_add(ws.out, fusion_->w->fc_hidden, ws.x, pass.plan());
  }

  struct Fusion {
    Norm embedding_norm, hidden_norm;
    const MtpWeights* w;
  };

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
  std::optional<Fusion> fusion_;  // Stack::mtp_head only
};

// The Transformer an architecture (model/arch.hpp) is made of.
template <class Arch>
using ArchTransformer = Transformer<typename Arch::Norm, typename Arch::Attention, typename Arch::MLP>;

}  // namespace kylin
