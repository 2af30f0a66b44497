// Anonymous memory starting on a 2 MiB boundary with transparent huge pages asked for, for what
// every pass streams whole: weights packed or quantized at load, a checkpoint copied (--no-mmap).
// Committed on first touch a huge page at a time, so not for KV caches, written a position at a time.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace kylin::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

// The bytes a mapping of `bytes` spans: whole huge pages.
inline std::size_t huge_span(std::size_t bytes) { return (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes; }

// huge_span(bytes) writable bytes on a 2 MiB boundary, or null when the mapping fails (errno says
// why). Over-maps by one huge page and unmaps the misaligned head and the tail.
inline std::byte* map_huge(std::size_t bytes) {
  const std::size_t span = huge_span(bytes);
  void* raw = ::mmap(nullptr, span + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto* const first = static_cast<std::byte*>(raw);
  const auto at = reinterpret_cast<std::uintptr_t>(first);
  std::byte* const base = first + ((at + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes - at);
  if (base > first) ::munmap(first, static_cast<std::size_t>(base - first));
  if (const auto tail = static_cast<std::size_t>(first + span + huge_page_bytes - (base + span)); tail > 0) ::munmap(base + span, tail);
#ifdef MADV_HUGEPAGE
  ::madvise(base, span, MADV_HUGEPAGE);
#endif
  return base;
}

inline void unmap_huge(void* p, std::size_t bytes) {
  if (p) ::munmap(p, huge_span(bytes));
}

// Bump allocation from huge-page chunks, for many buffers made once and freed together: the
// weights quantized at load. An MoE checkpoint has ~10^4 matrices of under 2 MiB, which in
// allocations of their own were faulted in 4 KiB at a time (the 48-layer 30B-A3B shape's q4
// load from FP8: 92.3 s that way, 68.0 s from the arena; docs/log/2026-11-27-29-zen5-rounds.md).
class HugeArena {
 public:
  static constexpr std::size_t chunk_bytes = std::size_t{256} << 20;
  static constexpr std::size_t alignment = 64;

  // `bytes` writable bytes, 64-byte aligned, valid until the arena goes; not zeroed.
  std::byte* allocate(std::size_t bytes) {
    bytes = (std::max<std::size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    if (chunks_.empty() || used_ + bytes > chunks_.back().bytes) {
      const std::size_t n = std::max(bytes, chunk_bytes);
      std::byte* p = map_huge(n);
      if (!p) throw std::bad_alloc();
      chunks_.push_back({p, n});
      used_ = 0;
    }
    std::byte* p = chunks_.back().base.get() + used_;
    used_ += bytes;
    return p;
  }

 private:
  struct Unmap {
    std::size_t bytes;
    void operator()(std::byte* p) const { unmap_huge(p, bytes); }
  };
  struct Chunk {
    std::unique_ptr<std::byte, Unmap> base;
    std::size_t bytes;
    Chunk(std::byte* p, std::size_t n) : base(p, Unmap{n}), bytes(n) {}
  };
  std::vector<Chunk> chunks_;
  std::size_t used_ = 0;  // bytes taken from the last chunk
};

}  // namespace kylin::detail
