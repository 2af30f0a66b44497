// Weights quantized at load (`ModelOptions::weights`): the attention, dense-MLP and MoE expert
// projections and the LM head (with the embedding table when tied) become Q8_0 or Q4_0 copies
// owned here, which the bound ModelWeights then point to. Norms, an untied embedding table and the
// MoE router keep the checkpoint's dtype (docs/QUANTIZATION.md).
#pragma once

#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kylin/core/huge_pages.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/quant_dot.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// How the linear layers' weights are held in memory.
enum class WeightFormat { stored, q8, q4 };

inline std::string_view weight_format_name(WeightFormat f) {
  return f == WeightFormat::q8 ? "q8" : f == WeightFormat::q4 ? "q4" : "stored";
}
inline std::optional<WeightFormat> parse_weight_format(std::string_view s) {
  for (WeightFormat f : {WeightFormat::stored, WeightFormat::q8, WeightFormat::q4})
    if (weight_format_name(f) == s) return f;
  return std::nullopt;
}

class QuantizedWeights {
 public:
  // Points every projection of `w` that can be quantized (columns a multiple of 32) at a Q8_0 or
  // Q4_0 copy made with `threads` threads, and drops the stored tensor's pages from memory (read
  // again from the file if used: the tied embedding table's rows); returns `w`. WeightFormat::stored leaves
  // it as it is.
  ModelWeights apply(ModelWeights w, WeightFormat format, int threads, const io::Checkpoint& ckpt) {
    if (format == WeightFormat::stored) return w;
    ThreadPool pool(threads);
    auto replace = [&](MatRef& m) {  // (a checkpoint saved by `kylin quantize` is quantized already)
      if (!m.data || kernels::is_quantized(m.dtype) || m.cols % kernels::q8_block != 0) return;
      const Fp8Source* fp8 = w.fp8 ? w.fp8->find(m.data) : nullptr;  // (read as its BF16 widening)
      m = format == WeightFormat::q8 ? quantize<kernels::Q8View>(m, fp8, pool, ckpt) : quantize<kernels::Q4View>(m, fp8, pool, ckpt);
    };
    for (LayerWeights& L : w.layers) {
      for (MatRef* m : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) replace(*m);
      for (ExpertWeights& x : L.experts)
        for (MatRef* m : {&x.gate_proj, &x.up_proj, &x.down_proj}) replace(*m);
    }
    // A tied table is quantized once, for the LM head and the lookups alike: looking rows up in
    // the stored table would fault in far more of it than the rows read (measured: 140 MB RSS
    // after 128 lookups on the Qwen3-0.6B shape), giving back most of what quantizing saved.
    const bool tied = w.embed_tokens.data == w.lm_head.data;
    replace(w.lm_head);
    if (tied) w.embed_tokens = w.lm_head;
    // The norms are copied too: faulting them in from the file mapped large parts of the dropped
    // neighbours again (measured +37 MB RSS in the first forward pass on the Qwen3-0.6B shape).
    for (LayerWeights& L : w.layers)
      for (MatRef* m : {&L.input_layernorm, &L.post_attention_layernorm, &L.q_norm, &L.k_norm}) own(*m);
    own(w.norm);
    ckpt.advise(io::AccessHint::release);  // what is still read from the file (the router, an untied table) faults back in
    return w;
  }

  // The quantized copy of the stored tensor whose data is at `stored`, if it was quantized.
  const MatRef* copy_of(const void* stored) const {
    const auto it = copies_.find(stored);
    return it == copies_.end() ? nullptr : &it->second;
  }

  // Bytes of the quantized copies, and of the checkpoint tensors they replace.
  std::size_t bytes() const { return bytes_; }
  std::size_t replaced_bytes() const { return replaced_bytes_; }

 private:
  // A small tensor copied as it is, in its stored dtype.
  void own(MatRef& m) {
    if (!m.data) return;
    const std::size_t n = static_cast<std::size_t>(m.rows * m.cols) * dtype_size(m.dtype);
    std::byte* copy = arena_.allocate(n);
    std::memcpy(copy, m.data, n);
    m.data = copy;
  }

  // In slabs of rows, each slab's stored pages dropped once it is done, so that loading never
  // holds much more than the quantized model.
  template <kernels::QuantView W>
  MatRef quantize(const MatRef& m, const Fp8Source* fp8, ThreadPool& pool, const io::Checkpoint& ckpt) {
    constexpr std::int64_t slab = 4096;  // rows
    const std::size_t n = kernels::quant_bytes<W>(m.rows, m.cols), row_bytes = static_cast<std::size_t>(m.cols) * dtype_size(m.dtype);
    void* out = arena_.allocate(n);
    bytes_ += n;
    replaced_bytes_ += static_cast<std::size_t>(m.rows) * row_bytes;
    for (std::int64_t s0 = 0; s0 < m.rows; s0 += slab) {
      const std::int64_t s1 = std::min(m.rows, s0 + slab);
      parallel_chunks(pool, s1 - s0, 64, [&](int, std::int64_t r0, std::int64_t r1) {
        std::vector<float> row(static_cast<std::size_t>(m.cols));  // [cols]
        for (std::int64_t r = s0 + r0; r < s0 + r1; ++r) {
          if (fp8)
            fp8->row(r, row.data());
          else
            visit_dtype(m.dtype, [&]<class T>(std::type_identity<T>) {
              const T* src = static_cast<const T*>(m.data) + r * m.cols;
              for (std::int64_t c = 0; c < m.cols; ++c) row[static_cast<std::size_t>(c)] = to_float(src[c]);
            });
          kernels::detail::quantize_weight_row_simd<W>(row.data(), out, m.rows, m.cols, r);
        }
      });
      ckpt.advise(io::AccessHint::release, static_cast<const std::byte*>(m.data) + static_cast<std::size_t>(s0) * row_bytes,
                  static_cast<std::size_t>(s1 - s0) * row_bytes);
    }
    return copies_.emplace(m.data, MatRef{W::dtype, out, m.rows, m.cols}).first->second;
  }

  detail::HugeArena arena_;  // the quantized matrices and the copied norms
  std::unordered_map<const void*, MatRef> copies_;  // stored data -> its quantized copy (an MoE checkpoint has ~10^4)
  std::size_t bytes_ = 0, replaced_bytes_ = 0;
};

}  // namespace kylin
