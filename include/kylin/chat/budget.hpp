// The memory and time budget of one template render. Every value the interpreter builds
// (strings, lists, dicts, tojson/join/repr output) is charged by its size, so doubling tricks
// such as `ns.l = ns.l + ns.l` or tojson of a 40-level shared dict fail by name within the
// budget instead of reaching gigabytes; loops and long-running builtins poll a CPU-time limit.
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kylin::jinja {

// A failure inside evaluation; the interpreter turns it into kylin::Error naming the line.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw EvalError(message); }

namespace detail {

class Budget {
 public:
  Budget(std::size_t max_bytes, std::chrono::milliseconds max_time)
      : max_bytes_(max_bytes), max_time_(max_time), start_(thread_cpu()) {}

  // Counts `bytes` of newly built values against the budget (cumulative over the render).
  void charge(std::size_t bytes) {
    if (bytes > max_bytes_ - used_) over_memory();
    used_ += bytes;
    tick();
  }
  // For a value still being built: fails once `size` more bytes would not fit.
  void check_growth(std::size_t size) {
    if (size > max_bytes_ - used_) over_memory();
    tick();
  }
  // Cheap enough for every step of a loop: the clock is read once per 1024 calls.
  void tick() {
    if (++ticks_ % 1024 == 0) check_time();
  }
  void check_time() const {
    if (thread_cpu() - start_ > max_time_)
      fail("template rendering exceeded its time limit of " + std::to_string(max_time_.count()) + " ms of CPU time");
  }
  std::size_t used() const { return used_; }

 private:
  // CPU time of this thread: the work a render did, whatever else the machine is running
  // (a wall-clock limit fired on a loaded machine for renders that were merely waiting).
  static std::chrono::nanoseconds thread_cpu() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  }

  [[noreturn]] void over_memory() const {
    fail("template exceeded its memory budget of " + std::to_string(max_bytes_) +
         " bytes (size of the values built while rendering)");
  }

  std::size_t max_bytes_;
  std::size_t used_ = 0;
  std::chrono::milliseconds max_time_;
  std::chrono::nanoseconds start_;
  std::uint64_t ticks_ = 0;
};

// The budget of the render running on this thread (set by Interpreter); null outside a render,
// where builtins run unmetered (tests calling them directly).
inline thread_local Budget* current_budget = nullptr;

inline void charge(std::size_t bytes) {
  if (current_budget) current_budget->charge(bytes);
}
inline void check_growth(std::size_t size) {
  if (current_budget) current_budget->check_growth(size);
}
inline void tick() {
  if (current_budget) current_budget->tick();
}

class BudgetScope {
 public:
  explicit BudgetScope(Budget& b) : previous_(current_budget) { current_budget = &b; }
  ~BudgetScope() { current_budget = previous_; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* previous_;
};

}  // namespace detail
}  // namespace kylin::jinja
