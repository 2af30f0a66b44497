// Counts heap allocations by replacing the global operator new/delete (malloc-backed), or, under
// ThreadSanitizer (whose runtime defines those operators itself), with its allocator's malloc hook.
// Include it in exactly one file of a test executable; read kylin::test::allocations().
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace kylin::test {
inline std::atomic<long> allocation_count{0};
inline long allocations() { return allocation_count.load(std::memory_order_relaxed); }
}  // namespace kylin::test

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KYLIN_TEST_TSAN_ALLOC_HOOK 1
#endif
#endif

#ifdef KYLIN_TEST_TSAN_ALLOC_HOOK
#include <sanitizer/allocator_interface.h>

namespace kylin::test::detail {
inline void on_malloc(const volatile void*, std::size_t) { allocation_count.fetch_add(1, std::memory_order_relaxed); }
inline void on_free(const volatile void*) {}
inline const int malloc_hook_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace kylin::test::detail
#else
// GCC sees std::free in a replacement operator delete and, after inlining, pairs it with the
// new-expression of a library container: a false positive for replaced allocation functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Every unaligned form is replaced, so whatever a library allocates is freed by the same malloc.
void* operator new(std::size_t size) {
  kylin::test::allocation_count.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  kylin::test::allocation_count.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return ::operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#endif
