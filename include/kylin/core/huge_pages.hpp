// Anonymous memory starting on a 2 MiB boundary with transparent huge pages asked for, for what
// every pass streams whole: weights packed at load, a checkpoint copied (--no-mmap). Committed on
// first touch a huge page at a time, so not for KV caches, which are written a position at a time.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

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

}  // namespace kylin::detail
