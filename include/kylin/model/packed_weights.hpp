// Weights repacked at load into the backend's own layout (`ModelOptions::weight_layout`): on the
// CPU every BF16/F16/F32 matrix a matmul reads (projections, MoE router and experts, the LM head,
// with the embedding table when tied to it) becomes 16-row panels (kernels/panel.hpp) in backend
// memory, each source's file pages dropped once packed. Norms and an untied table stay as stored.
#pragma once

#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/backends/backend.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// How the weights a matmul reads are held: packed into the backend's layout (the CPU's panels;
// weights a device backend uploads stay as stored), or as the checkpoint stores them, zero-copy
// from the mapped file (or its copy in memory, --no-mmap).
enum class WeightLayout { packed, stored };

inline std::string_view weight_layout_name(WeightLayout l) { return l == WeightLayout::packed ? "packed" : "stored"; }
inline std::optional<WeightLayout> parse_weight_layout(std::string_view s) {
  for (WeightLayout l : {WeightLayout::packed, WeightLayout::stored})
    if (weight_layout_name(l) == s) return l;
  return std::nullopt;
}

class PackedWeights {
 public:
  // Points every matrix of `w` a matmul reads, if BF16/F16/F32 and row-major, at a copy in
  // packed_layout_of<B> made in `backend`'s memory with `threads` threads; returns `w`. Nothing to do
  // for WeightLayout::stored or a backend whose layout is the stored one.
  template <Backend B>
  ModelWeights apply(ModelWeights w, WeightLayout layout, B& backend, int threads, const io::Checkpoint& ckpt) {
    if (layout == WeightLayout::stored || packed_layout_of<B> == kernels::Layout::rows) return w;
    ThreadPool pool(threads);
    auto pack = [&](MatRef& m) {
      if (m.data && m.layout == kernels::Layout::rows && !kernels::is_quantized(m.dtype)) m = packed(m, backend, pool, ckpt);
    };
    const bool tied = w.embed_tokens.data && w.embed_tokens.data == w.lm_head.data;
    for_each_matrix(w, [&](MatRef& m) {
      if (&m != &w.embed_tokens) pack(m);
    });
    if (tied) w.embed_tokens = w.lm_head;  // looked up in panels (kernels::embed_row)
    // The norms are copied too: faulting them in from the file would map large parts of their
    // dropped neighbours again (as QuantizedWeights found: +37 MB RSS on the Qwen3-0.6B shape).
    for (LayerWeights& L : w.layers) L.each_norm([&](MatRef& m) { own(m, backend); });
    own(w.norm, backend);
    w.mtp.each_norm([&](MatRef& m) { own(m, backend); });
    if (w.fp8) {  // BF16 widenings now packed are not read again
      std::unordered_set<const void*> used;
      for_each_matrix(w, [&](MatRef& m) { used.insert(m.data); });
      w.fp8->drop_widenings_except(used);
    }
    ckpt.advise(io::AccessHint::release);  // what is still read from the file (an untied table) faults back in
    return w;
  }

  // Bytes of the packed copies.
  std::size_t bytes() const { return bytes_; }

 private:
  // In slabs of rows, each slab's stored pages mapped in at once before it is packed and dropped
  // after, so that loading never holds much more than the packed model.
  template <Backend B>
  MatRef packed(const MatRef& m, B& backend, ThreadPool& pool, const io::Checkpoint& ckpt) {
    for (const auto& [from, to] : copies_)
      if (from == m.data) return to;
    constexpr std::int64_t slab = 4096;  // rows, a multiple of the panel width
    static_assert(slab % kernels::panel_width == 0, "slabs of whole panels");
    const std::size_t esize = dtype_size(m.dtype), row_bytes = static_cast<std::size_t>(m.cols) * esize;
    const std::size_t n = static_cast<std::size_t>(kernels::panel_elements(m.rows, m.cols)) * esize;
    memory_.push_back(backend.allocate_weights(n));
    void* out = memory_.back().data();
    bytes_ += n;
    for (std::int64_t s0 = 0; s0 < m.rows; s0 += slab) {
      const std::int64_t s1 = std::min(m.rows, s0 + slab);
      const auto* src = static_cast<const std::byte*>(m.data) + static_cast<std::size_t>(s0) * row_bytes;
      ckpt.advise(io::AccessHint::populate, src, static_cast<std::size_t>(s1 - s0) * row_bytes);
      const std::int64_t p0 = s0 / kernels::panel_width, p1 = kernels::panel_count(s1);
      parallel_chunks(pool, p1 - p0, 16, [&](int, std::int64_t a, std::int64_t b) {
        visit_dtype(m.dtype, [&]<class T>(std::type_identity<T>) {
          const std::int64_t r0 = (p0 + a) * kernels::panel_width, r1 = std::min(m.rows, (p0 + b) * kernels::panel_width);
          kernels::pack_panels(static_cast<const T*>(m.data), m.rows, m.cols, static_cast<T*>(out), r0, r1);
        });
      });
      ckpt.advise(io::AccessHint::release, src, static_cast<std::size_t>(s1 - s0) * row_bytes);
    }
    copies_.emplace_back(m.data, MatRef{m.dtype, out, m.rows, m.cols, packed_layout_of<B>});
    return copies_.back().second;
  }

  // A small tensor copied as it is.
  template <Backend B>
  void own(MatRef& m, B& backend) {
    if (!m.data) return;
    const std::size_t n = static_cast<std::size_t>(m.rows * m.cols) * dtype_size(m.dtype);
    memory_.push_back(backend.allocate(n));
    std::memcpy(memory_.back().data(), m.data, n);
    m.data = memory_.back().data();
  }

  std::vector<Memory> memory_;                          // one packed matrix or norm each
  std::vector<std::pair<const void*, MatRef>> copies_;  // stored data -> its packed copy
  std::size_t bytes_ = 0;
};

}  // namespace kylin
