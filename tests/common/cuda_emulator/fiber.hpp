// The context switch under the host CUDA emulator's fibers (emulate.hpp): Boost.Context's fcontext.
// Whole-model tests switch hundreds of millions of times: on the `backends` suite it measured 20 s
// of CPU against 28 s for a hand-written x86-64 switch, and glibc's swapcontext (a sigprocmask
// syscall per switch) over 60 times slower (docs/log/2026-11-27-emulator-context-switch.md).
#pragma once

#include <boost/context/detail/fcontext.hpp>

#include <cstddef>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define KYLIN_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KYLIN_FIBER_ASAN 1
#endif
#endif
#ifdef KYLIN_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#endif

// fcontext is the layer under Boost.Context's continuation and fiber, used as they use it
// (boost/context/continuation_fcontext.hpp): a continuation would run its function at creation and
// manage the stack itself, where the emulator makes a block's fibers first and keeps their stacks
// (Workspace). jump_fcontext saves what the SysV ABI makes callee-saved plus MXCSR and the x87
// control word, so a kernel thread that changes its rounding mode keeps it to itself, and
// make_fcontext starts a context with the FP modes of the thread that made it (emulate_test).
// libboost_context 1.74's switch does not maintain a CET shadow stack and carries no CET marking
// (readelf -n); the tests run without one (Debian 12's glibc 2.36 predates Linux user shadow stack
// support, glibc 2.39).
namespace kylin::cuda::emulate::detail {

struct Context {
  boost::context::detail::fcontext_t fctx = nullptr;  // where the context was left, or made to start
  void (*entry)() = nullptr;                           // what a made context runs at its first switch
};

// What a switch hands the context it enters: where to keep the one it left, and itself.
struct Switch {
  Context* from;
  Context* to;
};

[[noreturn]] inline void start_context(boost::context::detail::transfer_t t) {
  const auto* s = static_cast<const Switch*>(t.data);
  s->from->fctx = t.fctx;
  s->to->entry();
  std::abort();  // an entry never returns; were it to, fcontext would _exit(0), a failure passing as success
}

// ctx runs entry() on [stack, stack + bytes) at its first switch_context.
inline void make_context(Context& ctx, void* stack, std::size_t bytes, void (*entry)()) {
  char* const top = static_cast<char*>(stack) + bytes;
#ifdef KYLIN_FIBER_ASAN
  // A finished context never returns from its last switch, so ASan never unpoisons the redzones of
  // the frames it left on this stack (switch_context's `s` among them); uninstrumented code of the
  // next context (ASan's own, at a throw) would put its locals there and be reported. They lie
  // between where the context was left and the top; a new Context on a stack unpoisons all of it.
  char* const left = ctx.fctx ? static_cast<char*>(ctx.fctx) : static_cast<char*>(stack);
  if (left >= static_cast<char*>(stack) && left < top) ASAN_UNPOISON_MEMORY_REGION(left, top - left);
#endif
  ctx.fctx = boost::context::detail::make_fcontext(top, bytes, &start_context);
  ctx.entry = entry;
}

inline void switch_context(Context& from, Context& to) {
  Switch s{&from, &to};
  const boost::context::detail::transfer_t t = boost::context::detail::jump_fcontext(to.fctx, &s);
  static_cast<const Switch*>(t.data)->from->fctx = t.fctx;  // back here: keep where the switcher left off
}

}  // namespace kylin::cuda::emulate::detail
