// Whether this test binary runs under AddressSanitizer or ThreadSanitizer. A test that repeats one
// property over many random draws runs fewer of them there: every code path still runs under the
// sanitizer, and the Release build runs them all (scripts/test.sh stays within its time budget).
#pragma once

namespace kylin::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

// `n` repetitions in a plain build, `few` under a sanitizer.
inline constexpr int repetitions(int n, int few) { return sanitized ? few : n; }

}  // namespace kylin::test
