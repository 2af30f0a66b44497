// Refuses a load whose weight copies would not fit in memory before any is made: the quantized
// (--weights q8|q4), packed (--weight-layout packed) and FP8-widened copies live in this process's
// own memory, and running out of it part-way is an out-of-memory kill, not an error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>

#include "kylin/core/error.hpp"
#include "kylin/model/quantized_weights.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// How the bound weights are turned into what the net reads.
struct HoldPlan {
  WeightFormat format = WeightFormat::stored;  // q8/q4: the projections quantized
  bool packs = false;                          // every other matmul weight copied into panels
};

// Bytes of the copies loading `w` (bound, mapped experts already set aside) under `plan` makes:
// as QuantizedWeights and PackedWeights size them, FP8 matrices widened to BF16 first.
inline std::size_t weight_copy_bytes(ModelWeights w, const HoldPlan& plan) {
  std::unordered_set<const void*> quantized, seen;
  auto quantizable = [&](const MatRef& m) { return plan.format != WeightFormat::stored && !kernels::is_quantized(m.dtype) && m.cols % kernels::q8_block == 0; };
  for (LayerWeights& L : w.layers)
    L.each_projection([&](MatRef& m) {
      if (m.data && quantizable(m)) quantized.insert(m.data);
    });
  if (w.lm_head.data && quantizable(w.lm_head)) quantized.insert(w.lm_head.data);
  std::size_t bytes = 0;
  auto count = [&](MatRef& m) {
    if (!m.data || !seen.insert(m.data).second) return;
    const auto elements = static_cast<std::size_t>(m.rows * m.cols);
    const bool fp8 = m.dtype == DType::f8_e4m3;
    if (quantized.contains(m.data))
      bytes += plan.format == WeightFormat::q8 ? kernels::quant_bytes<kernels::Q8View>(m.rows, m.cols) : kernels::quant_bytes<kernels::Q4View>(m.rows, m.cols);
    else if (plan.packs && !kernels::is_quantized(m.dtype))
      bytes += static_cast<std::size_t>(kernels::panel_elements(m.rows, m.cols)) * (fp8 ? 2 : dtype_size(m.dtype)) + (fp8 ? elements * 2 : 0);
    else if (fp8)
      bytes += elements * 2;
  };
  const bool tied = w.embed_tokens.data == w.lm_head.data;
  count(w.lm_head);
  for (LayerWeights& L : w.layers) L.each_matrix(count);
  if (!tied && w.embed_tokens.dtype == DType::f8_e4m3) count(w.embed_tokens);  // (an untied table stays in the file otherwise)
  return bytes;
}

namespace detail {
// The first number after `key` in the "key value" lines of `path` (memory.stat, /proc/meminfo), or
// the file's first token as a number when `key` is empty; nullopt when absent or not a number.
inline std::optional<std::size_t> read_number(const std::string& path, const std::string& key = "") {
  std::ifstream in(path);
  std::string k;
  if (key.empty()) {
    std::size_t v = 0;
    if (in >> v) return v;
    return std::nullopt;
  }
  std::size_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
    in.ignore(256, '\n');
  }
  return std::nullopt;
}

// What this process's cgroup (a container's) lets it take beyond what it holds, page cache counted
// as free: v2 memory.max - memory.current + file, v1 memory.limit_in_bytes - usage_in_bytes + total_cache.
inline std::optional<std::size_t> cgroup_memory_left() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const bool v2 = line.starts_with("0::");
    const std::size_t at = line.find(":memory:");
    if (!v2 && at == std::string::npos) continue;
    const std::string dir = v2 ? "/sys/fs/cgroup" + line.substr(3) : "/sys/fs/cgroup/memory" + line.substr(at + 8);
    const auto limit = read_number(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));  // v2 "max": no number
    const auto used = read_number(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    const auto cache = read_number(dir + "/memory.stat", v2 ? "file" : "total_cache");
    if (!limit || !used || *limit >= (std::size_t{1} << 60)) continue;  // unlimited
    const std::size_t held = *used - std::min(*used, cache.value_or(0));
    return *limit > held ? *limit - held : 0;
  }
  return std::nullopt;
}
}  // namespace detail

// What the system can still give this process, if known: MemAvailable + SwapFree of /proc/meminfo,
// or less where its cgroup's limit leaves less.
inline std::optional<std::size_t> available_memory_bytes() {
  const auto mem = detail::read_number("/proc/meminfo", "MemAvailable:"), swap = detail::read_number("/proc/meminfo", "SwapFree:");
  const auto cgroup = detail::cgroup_memory_left();
  if (!mem) return cgroup;
  const std::size_t system = (*mem + swap.value_or(0)) * 1024;  // kB
  return cgroup ? std::min(system, *cgroup) : system;
}

// Throws when `needed` bytes of copies exceed `available`, naming what would make them and what
// loads without them (`moe`: the model has routed experts that --experts mapped leaves in the file).
inline void check_copies_fit(std::size_t needed, std::optional<std::size_t> available, const HoldPlan& plan, bool moe, const std::string& where) {
  if (!available || needed <= *available) return;
  std::ostringstream msg;
  msg.precision(1);
  msg << std::fixed << "loading makes " << static_cast<double>(needed) / 1e9 << " GB of weight copies (";
  if (plan.format != WeightFormat::stored) msg << "--weights " << weight_format_name(plan.format) << (plan.packs ? ", " : "");
  if (plan.packs) msg << "packed layout";
  if (plan.format == WeightFormat::stored && !plan.packs) msg << "FP8 widened to BF16";
  msg << ") and " << static_cast<double>(*available) / 1e9 << " GB of memory is available:";
  if (moe) msg << " --experts mapped reads the routed experts from the file as they are picked;";
  if (plan.packs) msg << " --weight-layout stored reads the weights in place;";
  if (plan.format != WeightFormat::stored) msg << " `kylin quantize` on a machine with the memory saves a checkpoint that maps quantized;";
  std::string text = msg.str();
  text.back() = '.';
  throw Error(ErrorCategory::load, where, text);
}

}  // namespace kylin
