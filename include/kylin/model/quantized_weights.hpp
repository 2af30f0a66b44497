// Weights quantized at load (`ModelOptions::weights`): the attention, dense-MLP and MoE expert
// projections and the LM head (with the embedding table when tied) become Q8_0 or Q4_0 copies
// owned here, which the bound ModelWeights then point to. Norms, an untied embedding table and the
// MoE router keep the checkpoint's dtype (docs/QUANTIZATION.md).
#pragma once

#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kylin/core/huge_pages.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/read_ahead.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/quant_rows.hpp"
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
    // (a checkpoint saved by `kylin quantize` is quantized already)
    auto quantizable = [](const MatRef& m) { return m.data && !kernels::is_quantized(m.dtype) && m.cols % kernels::q8_block == 0; };
    std::vector<MatRef*> todo;  // in the order they are quantized
    for (LayerWeights& L : w.layers) L.each_projection([&](MatRef& m) { todo.push_back(&m); });
    // A tied table is quantized once, for the LM head and the lookups alike: looking rows up in
    // the stored table would fault in far more of it than the rows read (measured: 140 MB RSS
    // after 128 lookups on the Qwen3-0.6B shape), giving back most of what quantizing saved.
    const bool tied = w.embed_tokens.data == w.lm_head.data;
    todo.push_back(&w.lm_head);
    todo.push_back(&w.mtp.fc_embedding);
    todo.push_back(&w.mtp.fc_hidden);
    std::erase_if(todo, [&](const MatRef* m) { return !quantizable(*m); });
    std::vector<io::ByteSpan> spans;  // what each reads from the file, in the same order
    for (const MatRef* m : todo) spans.push_back({m->data, stored_bytes(*m)});
    io::ReadAhead ahead([&](const std::byte* p, std::size_t n) { ckpt.advise(io::AccessHint::populate, p, n); }, std::move(spans),
                        read_ahead_window);
    Progress progress{ahead, drop_hint(todo, format, ckpt)};
    for (MatRef* m : todo) {
      const Fp8Source* fp8 = w.fp8 ? w.fp8->find(m->data) : nullptr;  // (read as its BF16 widening)
      *m = format == WeightFormat::q8 ? quantize<kernels::Q8View>(*m, fp8, pool, ckpt, progress)
                                      : quantize<kernels::Q4View>(*m, fp8, pool, ckpt, progress);
    }
    if (tied) w.embed_tokens = w.lm_head;
    // The norms are copied too: faulting them in from the file mapped large parts of the dropped
    // neighbours again (measured +37 MB RSS in the first forward pass on the Qwen3-0.6B shape).
    for (LayerWeights& L : w.layers) L.each_norm([&](MatRef& m) { own(m); });
    own(w.norm);
    w.mtp.each_norm([&](MatRef& m) { own(m); });
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
  // The read-ahead's lead: ~0.1 s of a disk at 1 GB/s. The pages mapped ahead count in the
  // process's RSS: a 512 MB window raised the 0.6B shape's q4 load peak from 390 to 700 MB.
  static constexpr std::size_t read_ahead_window = std::size_t{64} << 20;  // bytes

  // How far the quantizer has got through the file, and how it lets go of what it has read.
  struct Progress {
    io::ReadAhead& ahead;
    io::AccessHint drop;  // release, or evict
    std::size_t consumed = 0;  // bytes of the stored matrices quantized so far
  };

  // A checkpoint that cannot stay in the page cache beside its quantized copy is evicted as it is
  // read, so that the freed pages are what the copy is written to. On a VM where the first touch
  // of memory the guest has not used lately is slow (the Zen 5 VM: the host backs it then), the
  // 48-layer 30B-A3B shape's 16 GB copy spent ~45 % of both cores in page zeroing (perf) with the
  // file kept cached, ~30 % evicted; a test program touched 2 GB of huge pages in 0.14-0.42 s right
  // after reading and evicting 4 GB of the file, in 2.7-3.8 s after reading and keeping it.
  static io::AccessHint drop_hint(const std::vector<MatRef*>& todo, WeightFormat format, const io::Checkpoint& ckpt) {
    std::size_t copy = 0;
    for (const MatRef* m : todo)
      copy += format == WeightFormat::q8 ? kernels::quant_bytes<kernels::Q8View>(m->rows, m->cols)
                                         : kernels::quant_bytes<kernels::Q4View>(m->rows, m->cols);
    const auto memory = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return ckpt.total_bytes() + copy > memory ? io::AccessHint::evict : io::AccessHint::release;
  }

  static std::size_t stored_bytes(const MatRef& m) { return static_cast<std::size_t>(m.rows * m.cols) * dtype_size(m.dtype); }

  // A small tensor copied as it is, in its stored dtype.
  void own(MatRef& m) {
    if (!m.data) return;
    const std::size_t n = stored_bytes(m);
    std::byte* copy = arena_.allocate(n);
    std::memcpy(copy, m.data, n);
    m.data = copy;
  }

  // In slabs of rows, each slab's stored pages dropped once it is done, so that loading never
  // holds much more than the quantized model.
  // The thread of `progress.ahead` maps the next slabs in meanwhile, so that the disk reads of a
  // cold checkpoint overlap the quantizing instead of stalling it page fault by page fault.
  template <kernels::QuantView W>
  MatRef quantize(const MatRef& m, const Fp8Source* fp8, ThreadPool& pool, const io::Checkpoint& ckpt, Progress& progress) {
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
      ckpt.advise(progress.drop, static_cast<const std::byte*>(m.data) + static_cast<std::size_t>(s0) * row_bytes,
                  static_cast<std::size_t>(s1 - s0) * row_bytes);
      progress.consumed += static_cast<std::size_t>(s1 - s0) * row_bytes;
      progress.ahead.reached(progress.consumed);
    }
    return copies_.emplace(m.data, MatRef{W::dtype, out, m.rows, m.cols}).first->second;
  }

  detail::HugeArena arena_;  // the quantized matrices and the copied norms
  std::unordered_map<const void*, MatRef> copies_;  // stored data -> its quantized copy (an MoE checkpoint has ~10^4)
  std::size_t bytes_ = 0, replaced_bytes_ = 0;
};

}  // namespace kylin
