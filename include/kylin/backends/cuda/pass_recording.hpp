// PassRecording: a forward pass's launches and host-to-device copies, kept instead of issued, so
// that a pass equal to one seen before (a decode step at the same batch shape) replays as one CUDA
// graph (PassQueue). Per-step values (token ids, positions in the attention arguments) reach the
// kernels through staged copies into device memory, so two steps record the same operations. Plain C++: the
// emulated runtime runs the same queue, so the model tests run it without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kylin/backends/cuda/gemm_call.hpp"
#include "kylin/backends/cuda/portable.hpp"

namespace kylin::cuda {

class PassRecording {
 public:
  enum class Kind : std::uint8_t { launch, copy, gemm };
  struct Op {
    Kind kind;
    const void* entry = nullptr;  // launch: the kernel's device entry point
    LaunchShape shape{};          // launch
    std::size_t params_at = 0;    // launch: offset of the kernel's bytes in params(); gemm: of the GemmCall
    bool (*same)(const void*, const void*) = nullptr;  // launch: member-wise equality of two kernels of its type
    void* dst = nullptr;          // copy: device destination
    const void* src = nullptr;    // copy: pinned host source, read when the copy runs
    std::size_t bytes = 0;        // copy
  };

  template <class Kernel>
  void launch(const void* entry, const Kernel& k) {
    static_assert(std::is_trivially_copyable_v<Kernel>, "kernel arguments are copied as bytes");
    ops_.push_back({.kind = Kind::launch, .entry = entry, .shape = k.shape(), .params_at = store(&k, sizeof k), .same = &same_as<Kernel>});
  }
  void copy(void* dst, const void* src, std::size_t bytes) { ops_.push_back({.kind = Kind::copy, .dst = dst, .src = src, .bytes = bytes}); }
  void gemm(const GemmCall& g) { ops_.push_back({.kind = Kind::gemm, .params_at = store(&g, sizeof g)}); }

  const std::vector<Op>& ops() const { return ops_; }
  const void* params(const Op& op) const { return params_.data() + op.params_at; }
  bool empty() const { return ops_.empty(); }
  // A pass with a GEMM is never made a graph (cuBLAS may allocate inside it; prefill shapes rarely repeat).
  bool graphable() const {
    for (const Op& op : ops_)
      if (op.kind == Kind::gemm) return false;
    return !ops_.empty();
  }
  void clear() {
    ops_.clear();
    params_.clear();
  }

  // The same operations with the same arguments (kernels compared member by member, so padding
  // bytes never make two equal passes differ).
  bool operator==(const PassRecording& o) const {
    if (ops_.size() != o.ops_.size()) return false;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const Op &a = ops_[i], &b = o.ops_[i];
      if (a.kind != b.kind) return false;
      switch (a.kind) {
        case Kind::launch:
          if (a.entry != b.entry || !same_shape(a.shape, b.shape) || !a.same(params(a), o.params(b))) return false;
          break;
        case Kind::copy:
          if (a.dst != b.dst || a.src != b.src || a.bytes != b.bytes) return false;
          break;
        case Kind::gemm: return false;  // never graphable, never matched
      }
    }
    return true;
  }

 private:
  std::size_t store(const void* p, std::size_t bytes) {
    const std::size_t at = (params_.size() + 15) / 16 * 16;
    params_.resize(at + bytes);
    std::memcpy(params_.data() + at, p, bytes);
    return at;
  }
  template <class Kernel>
  static bool same_as(const void* a, const void* b) {
    Kernel ka, kb;
    std::memcpy(&ka, a, sizeof ka);
    std::memcpy(&kb, b, sizeof kb);
    return ka == kb;
  }
  static bool same_shape(const LaunchShape& a, const LaunchShape& b) {
    auto eq = [](Dim3 x, Dim3 y) { return x.x == y.x && x.y == y.y && x.z == y.z; };
    return eq(a.grid, b.grid) && eq(a.block, b.block) && a.shared_bytes == b.shared_bytes;
  }

  std::vector<Op> ops_;
  std::vector<unsigned char> params_;  // kernel argument structs and GemmCalls, 16-byte aligned offsets
};

// Recordings already made into executables (CUDA graphs), most recently used first. Exec is a
// move-only handle that releases itself. A recording becomes a graph the second time it is seen
// in a row, so one-off passes never pay for instantiation.
template <class Exec>
class GraphCache {
 public:
  explicit GraphCache(std::size_t capacity) : capacity_(capacity) {}

  // The executable recorded for r, or null.
  Exec* find(const PassRecording& r) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == r) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().second;
      }
    return nullptr;
  }
  // Whether r repeats the last recording that had no executable (then it deserves one).
  bool repeats(const PassRecording& r) {
    const bool again = has_last_ && last_ == r;
    last_ = r;
    has_last_ = true;
    return again;
  }
  Exec& insert(const PassRecording& r, Exec e) {
    if (entries_.size() == capacity_) entries_.pop_back();
    entries_.emplace_front(r, std::move(e));
    has_last_ = false;
    return entries_.front().second;
  }
  std::size_t size() const { return entries_.size(); }

 private:
  std::size_t capacity_;
  std::list<std::pair<PassRecording, Exec>> entries_;
  PassRecording last_;
  bool has_last_ = false;
};

// KYLIN_CUDA_GRAPHS=0 issues every pass launch by launch (to compare, or to rule graphs out).
inline bool graphs_wanted() {
  const char* v = std::getenv("KYLIN_CUDA_GRAPHS");
  return !(v && std::string_view(v) == "0");
}

// What a runtime holds back between begin_pass and end_pass, and how it is issued: a graph made
// earlier for the same operations, a new graph when they repeat the last recording, else one by
// one. Device: issue(const PassRecording&), make_graph(const PassRecording&) -> Exec, run(Exec&).
template <class Exec>
class PassQueue {
 public:
  explicit PassQueue(bool graphs) : graphs_(graphs) {}

  bool holding() const { return holding_; }
  PassRecording& recording() { return recording_; }
  std::size_t graphs() const { return cache_.size(); }

  template <class Device>
  void begin(Device& d) {
    flush(d);
    holding_ = graphs_;
  }
  template <class Device>
  void end(Device& d) {
    flush(d);
    holding_ = false;
  }
  template <class Device>
  void flush(Device& d) {
    if (recording_.empty()) return;
    if (recording_.graphable()) {
      if (Exec* g = cache_.find(recording_)) {
        d.run(*g);
        return recording_.clear();
      }
      if (cache_.repeats(recording_)) {
        d.run(cache_.insert(recording_, d.make_graph(recording_)));
        return recording_.clear();
      }
    }
    d.issue(recording_);
    recording_.clear();
  }

 private:
  bool graphs_;
  bool holding_ = false;
  PassRecording recording_;
  GraphCache<Exec> cache_{8};
};

}  // namespace kylin::cuda
