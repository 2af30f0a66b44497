// Runs a portable kylin CUDA kernel (portable.hpp) on the host, so the kernels are tested without a GPU:
// each block's threads are fibers with a faithful __syncthreads and __shfl_xor_sync, and a divergent
// barrier or shuffle, which a GPU leaves undefined, is a loud kylin::Error instead.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/cuda_emulator/fiber.hpp"
#include "kylin/backends/cuda/portable.hpp"
#include "kylin/core/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define KYLIN_EMULATE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KYLIN_EMULATE_ASAN 1
#endif
#endif
#ifndef KYLIN_EMULATE_ASAN
#define KYLIN_EMULATE_ASAN 0
#endif
#if KYLIN_EMULATE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace kylin::cuda::emulate {

class HostThread;

namespace detail {

inline constexpr unsigned max_block_threads = 1024;
// ASan's redzones make every frame several times larger. A multiple of any page size.
inline constexpr std::size_t stack_bytes = (KYLIN_EMULATE_ASAN ? 256 : 64) * 1024;
inline constexpr unsigned char shared_garbage = 0xCD;

enum class State : unsigned char { ready, at_barrier, at_warp, done };

// Thrown into the fibers still waiting when a block is abandoned, so their frames unwind.
struct Cancelled {};

struct Fiber {
  Context ctx;
  void* stack = nullptr;  // lowest usable byte; a PROT_NONE guard page lies below it
  State state = State::ready;
  bool started = false;
  void* fake_stack = nullptr;  // ASan's fake stack of this fiber while it is switched out
};

// Kept per OS thread and across launches: the stacks are mapped once, when a launch first needs that
// many threads, so a model's thousands of small launches map nothing.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    for (Fiber& f : fibers_) munmap(static_cast<char*>(f.stack) - page(), stack_bytes + page());
  }

  // Fibers 0..n-1 with stacks, their states reset. The vector never moves during a launch: a
  // suspended switch_context holds pointers to the Contexts in it.
  std::vector<Fiber>& fibers(unsigned n) {
    if (fibers_.size() < n) {
      std::vector<Fiber> grown(n);
      for (std::size_t i = 0; i < fibers_.size(); ++i) grown[i].stack = fibers_[i].stack;
      for (std::size_t i = fibers_.size(); i < n; ++i) grown[i].stack = map_stack();
      fibers_.swap(grown);
    }
    return fibers_;
  }
  bool busy = false;

 private:
  static std::size_t page() {
    static const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return bytes;
  }
  static void* map_stack() {
    void* p = mmap(nullptr, stack_bytes + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error(ErrorCategory::runtime, "cuda emulation", "cannot map a fiber stack");
    mprotect(p, page(), PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
    return static_cast<char*>(p) + page();
  }
  std::vector<Fiber> fibers_;
};

inline Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

// The block being run on this OS thread: the fiber entry takes no pointer.
struct Block;
inline thread_local Block* current_block = nullptr;

struct Block {
  const void* kernel = nullptr;
  void (*body)(const void* kernel, HostThread& t) = nullptr;
  std::string_view name;
  LaunchShape shape;
  unsigned threads = 0;
  Fiber* fibers = nullptr;
  std::vector<float> warp_slots;
  Dim3 block_idx;
  std::unique_ptr<unsigned char[]> shared;
  Context scheduler;
  unsigned running = 0;
  bool cancel = false;
  std::exception_ptr error;
  const void* scheduler_stack = nullptr;  // for ASan's switch back
  std::size_t scheduler_stack_size = 0;
};

template <class T>
constexpr std::string_view type_name() {
  std::string_view f = __PRETTY_FUNCTION__;  // "... [with T = X; ...]" (gcc) or "... [T = X]" (clang)
  const std::size_t b = f.find("T = ") + 4;
  return f.substr(b, f.find_first_of(";]", b) - b);
}

inline std::string dims(Dim3 d) {
  std::string s = "(";  // appended, not "(" + ...: GCC 12 warns falsely (-Wrestrict) on that at -O2
  s += std::to_string(d.x);
  s += ',';
  s += std::to_string(d.y);
  s += ',';
  s += std::to_string(d.z);
  s += ')';
  return s;
}

inline Error error(const Block& b, const std::string& message) {
  return Error(ErrorCategory::runtime, "cuda emulation", std::string(b.name) + ": " + message);
}

// Scheduler -> fiber i, back when it waits or returns.
inline void resume(Block& b, unsigned i) {
  Fiber& f = b.fibers[i];
  b.running = i;
  f.started = true;
#if KYLIN_EMULATE_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, stack_bytes);
#endif
  switch_context(b.scheduler, f.ctx);
#if KYLIN_EMULATE_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// Fiber -> scheduler. A returned fiber switches out for good, so ASan may drop its fake stack.
inline void yield(Block& b, Fiber& f, bool last) {
#if KYLIN_EMULATE_ASAN
  __sanitizer_start_switch_fiber(last ? nullptr : &f.fake_stack, b.scheduler_stack, b.scheduler_stack_size);
#else
  (void)last;
#endif
  switch_context(f.ctx, b.scheduler);
#if KYLIN_EMULATE_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &b.scheduler_stack, &b.scheduler_stack_size);
#endif
}

// The calling fiber waits at a barrier or a warp rendezvous until the scheduler releases it.
inline void wait(Block& b, unsigned i, State s) {
  if (b.cancel) throw Cancelled{};
  b.fibers[i].state = s;
  yield(b, b.fibers[i], false);
  if (b.cancel) throw Cancelled{};
}

}  // namespace detail

// The Thread a kernel body sees on the host; only launch() makes one.
class HostThread {
 public:
  HostThread(detail::Block& b, unsigned linear) : b_(&b), linear_(linear) {
    const Dim3 d = b.shape.block;
    idx_ = {linear % d.x, linear / d.x % d.y, linear / (d.x * d.y)};
  }
  Dim3 thread_idx() const { return idx_; }
  Dim3 block_idx() const { return b_->block_idx; }
  Dim3 block_dim() const { return b_->shape.block; }
  Dim3 grid_dim() const { return b_->shape.grid; }
  void sync() const { detail::wait(*b_, linear_, detail::State::at_barrier); }
  template <class T>
  T* shared() const {
    return reinterpret_cast<T*>(b_->shared.get());
  }
  float shfl_xor(float v, int mask) const;

 private:
  detail::Block* b_;
  unsigned linear_;
  Dim3 idx_;
};

inline float HostThread::shfl_xor(float v, int mask) const {
  detail::Block& b = *b_;
  if (b.threads % warp_size != 0)
    throw detail::error(b, "shfl_xor in a block of " + std::to_string(b.threads) +
                               " threads, not a whole number of warps of 32");
  if (mask < 0 || mask >= static_cast<int>(warp_size))
    throw detail::error(b, "shfl_xor lane mask " + std::to_string(mask) + " outside [0,32)");
  const unsigned lane = linear_ % warp_size;
  b.warp_slots[linear_] = v;
  detail::wait(b, linear_, detail::State::at_warp);  // every lane has deposited
  const float partner = b.warp_slots[linear_ - lane + (lane ^ static_cast<unsigned>(mask))];
  detail::wait(b, linear_, detail::State::at_warp);  // every lane has read: the slots may be reused
  return partner;
}

namespace detail {

// Never returns: a finished fiber is never resumed, and its stack is re-made for the next block.
inline void fiber_entry() {
  Block& b = *current_block;
  const unsigned i = b.running;
#if KYLIN_EMULATE_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack, &b.scheduler_stack_size);
#endif
  try {
    HostThread t(b, i);
    b.body(b.kernel, t);
  } catch (const Cancelled&) {
  } catch (...) {
    // Rethrown by launch() on its own stack: an exception must not cross a context switch.
    if (!b.error) b.error = std::current_exception();
  }
  b.fibers[i].state = State::done;
  yield(b, b.fibers[i], true);
}

inline void make_fiber(Fiber& f) {
  make_context(f.ctx, f.stack, stack_bytes, &fiber_entry);
  f.state = State::ready;
  f.started = false;
  f.fake_stack = nullptr;
}

// Called when no fiber is ready. Releases a warp whose 32 lanes all wait at a shuffle, else the
// barrier once every thread waits at it. False when every thread has returned.
inline bool release_waiters(Block& b) {
  unsigned done = 0, at_barrier = 0;
  bool released = false;
  for (unsigned w = 0; w < b.threads; w += warp_size) {
    unsigned at_warp = 0, warp_done = 0, warp_barrier = 0;
    for (unsigned i = w; i < w + warp_size && i < b.threads; ++i) {
      at_warp += b.fibers[i].state == State::at_warp;
      warp_done += b.fibers[i].state == State::done;
      warp_barrier += b.fibers[i].state == State::at_barrier;
    }
    done += warp_done;
    at_barrier += warp_barrier;
    if (at_warp == 0) continue;
    if (at_warp != warp_size)
      throw error(b, "block " + dims(b.block_idx) + ": warp " + std::to_string(w / warp_size) + ": " +
                         std::to_string(at_warp) + " lanes wait at shfl_xor while " + std::to_string(warp_done) +
                         " have returned and " + std::to_string(warp_barrier) + " wait at __syncthreads");
    for (unsigned i = w; i < w + warp_size; ++i) b.fibers[i].state = State::ready;
    released = true;
  }
  if (released) return true;
  if (done == b.threads) return false;
  if (done != 0)
    throw error(b, "block " + dims(b.block_idx) + ": " + std::to_string(at_barrier) +
                       " threads wait at __syncthreads while " + std::to_string(done) + " have returned");
  for (unsigned i = 0; i < b.threads; ++i) b.fibers[i].state = State::ready;
  return true;
}

// Unwinds the fibers left mid-kernel (they throw Cancelled out of their wait) so nothing leaks.
inline void cancel_block(Block& b) {
  b.cancel = true;
  for (unsigned i = 0; i < b.threads; ++i) {
    Fiber& f = b.fibers[i];
    if (f.state == State::done) continue;
    if (f.started) resume(b, i);
    f.state = State::done;
  }
  b.cancel = false;
}

// Runs one block to completion; false (with b.error set) when it failed.
inline bool run_block(Block& b) {
  if (b.shape.shared_bytes != 0) {
    // Fresh and exactly sized, so ASan sees a kernel's overrun; garbage-filled, as on a GPU.
    b.shared.reset(new unsigned char[b.shape.shared_bytes]);
    std::memset(b.shared.get(), shared_garbage, b.shape.shared_bytes);
  }
  for (unsigned i = 0; i < b.threads; ++i) make_fiber(b.fibers[i]);
  bool more = true;
  while (more && !b.error) {
    for (unsigned i = 0; i < b.threads && !b.error; ++i)
      if (b.fibers[i].state == State::ready) resume(b, i);
    if (b.error) break;
    try {
      more = release_waiters(b);
    } catch (...) {
      b.error = std::current_exception();
    }
  }
  if (b.error) cancel_block(b);
  b.shared.reset();
  return !b.error;
}

inline void validate(std::string_view name, const LaunchShape& s) {
  const auto fail = [&](const std::string& m) {
    return Error(ErrorCategory::runtime, "cuda emulation", std::string(name) + ": " + m);
  };
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0) throw fail("grid " + dims(s.grid) + " has a zero dimension");
  if (s.block.x == 0 || s.block.y == 0 || s.block.z == 0)
    throw fail("block " + dims(s.block) + " has a zero dimension");
  const unsigned long long n = 1ull * s.block.x * s.block.y * s.block.z;
  if (n > max_block_threads)
    throw fail("block " + dims(s.block) + " has " + std::to_string(n) + " threads, more than " +
               std::to_string(max_block_threads));
  if (s.shared_bytes > launch_shared_bytes)
    throw fail(std::to_string(s.shared_bytes) + " bytes of shared memory, more than a launch gets (" + std::to_string(launch_shared_bytes) + ")");
}

// Marks this OS thread's workspace in use for one launch, also when the launch throws.
class ActiveLaunch {
 public:
  ActiveLaunch(Workspace& ws, Block& b) : ws_(ws) {
    ws_.busy = true;
    current_block = &b;
  }
  ActiveLaunch(const ActiveLaunch&) = delete;
  ActiveLaunch& operator=(const ActiveLaunch&) = delete;
  ~ActiveLaunch() {
    current_block = nullptr;
    ws_.busy = false;
  }

 private:
  Workspace& ws_;
};

}  // namespace detail

// Runs k over the whole grid, block after block; throws the first kernel exception or emulation error.
template <class Kernel>
void launch(const Kernel& k, const LaunchShape& s) {
  constexpr std::string_view name = detail::type_name<Kernel>();
  detail::validate(name, s);
  detail::Workspace& ws = detail::workspace();
  if (ws.busy) throw Error(ErrorCategory::runtime, "cuda emulation", std::string(name) + ": launched from a kernel");
  detail::Block b;
  b.kernel = &k;
  b.body = [](const void* kernel, HostThread& t) { (*static_cast<const Kernel*>(kernel))(t); };
  b.name = name;
  b.shape = s;
  b.threads = s.block.x * s.block.y * s.block.z;
  b.fibers = ws.fibers(b.threads).data();
  b.warp_slots.resize(b.threads);
  const detail::ActiveLaunch active(ws, b);
  for (unsigned z = 0; z < s.grid.z; ++z)
    for (unsigned y = 0; y < s.grid.y; ++y)
      for (unsigned x = 0; x < s.grid.x; ++x) {
        b.block_idx = {x, y, z};
        if (!detail::run_block(b)) std::rethrow_exception(b.error);
      }
}

}  // namespace kylin::cuda::emulate
