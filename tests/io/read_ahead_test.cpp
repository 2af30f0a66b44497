// ReadAhead: the spans' chunks mapped in order by its thread, never past the window beyond what the
// consumer reported nor behind it, and a reader still waiting stopped by the destructor.
#include "kylin/io/read_ahead.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using kylin::io::ByteSpan;
using kylin::io::ReadAhead;

namespace read_ahead_test {

// What the reader asked to map in, in order.
struct Calls {
  std::mutex mutex;
  std::condition_variable more;
  std::vector<ByteSpan> seen;

  ReadAhead::Populate recorder() {
    return [this](const std::byte* p, std::size_t n) {
      {
        std::lock_guard lock(mutex);
        seen.push_back({p, n});
      }
      more.notify_all();
    };
  }
  // Waits (up to a minute: a busy machine slows the reader, never fails it) for `n` calls, then
  // a moment for any call past them; returns how many there were.
  std::size_t settle(std::size_t n) {
    std::unique_lock lock(mutex);
    more.wait_for(lock, std::chrono::seconds(60), [&] { return seen.size() >= n; });
    more.wait_for(lock, std::chrono::milliseconds(100), [&] { return seen.size() > n; });
    return seen.size();
  }
};

}  // namespace read_ahead_test

TEST_CASE("ReadAhead maps the spans in chunks, in order, at most a window past what the consumer reached") {
  constexpr std::size_t C = ReadAhead::chunk;
  std::vector<std::byte> file(5 * C + 6);  // [A: 2 C + 5][B: 1][C: 3 C]: chunks end at C, 2C, 2C+5, 2C+6, 3C+6, 4C+6, 5C+6
  const std::byte* a = file.data();
  const std::byte* b = a + 2 * C + 5;
  const std::byte* c = b + 1;
  read_ahead_test::Calls calls;
  ReadAhead ahead(calls.recorder(), {{a, 2 * C + 5}, {b, 1}, {c, 3 * C}}, 2 * C);
  CHECK(calls.settle(2) == 2);  // A's two whole chunks end within the window; its 5-byte tail does not
  ahead.reached(2 * C + 6);     // the consumer is through A and B: A's tail and B are skipped
  CHECK(calls.settle(4) == 4);  // up to 4C + 6: C's first two chunks
  ahead.reached(4 * C + 6);
  CHECK(calls.settle(5) == 5);
  const std::vector<std::pair<const std::byte*, std::size_t>> expected = {{a, C}, {a + C, C}, {c, C}, {c + C, C}, {c + 2 * C, C}};
  REQUIRE(calls.seen.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(calls.seen[i].data == expected[i].first);
    CHECK(calls.seen[i].bytes == expected[i].second);
  }
}

TEST_CASE("ReadAhead skips what the consumer has passed before the reader got there") {
  constexpr std::size_t C = ReadAhead::chunk;
  std::vector<std::byte> file(3 * C);
  read_ahead_test::Calls calls;
  ReadAhead ahead(calls.recorder(), {{file.data(), file.size()}}, C - 10);  // no chunk fits before reached()
  ahead.reached(C + 10);  // the first chunk and 10 bytes of the second are done; the window now ends at 2C
  CHECK(calls.settle(1) == 1);
  ahead.reached(2 * C + 10);
  CHECK(calls.settle(2) == 2);
  REQUIRE(calls.seen.size() == 2);
  CHECK(calls.seen[0].data == file.data() + C + 10);  // the first chunk not at all, the others from byte 10
  CHECK(calls.seen[0].bytes == C - 10);
  CHECK(calls.seen[1].data == file.data() + 2 * C + 10);
  CHECK(calls.seen[1].bytes == C - 10);
}

TEST_CASE("ReadAhead's destructor stops a reader waiting for the consumer") {
  std::vector<std::byte> file(ReadAhead::chunk);
  read_ahead_test::Calls calls;
  {
    ReadAhead ahead(calls.recorder(), {{file.data(), file.size()}}, 0);  // nothing fits the window until reached()
  }
  CHECK(calls.seen.empty());
}
