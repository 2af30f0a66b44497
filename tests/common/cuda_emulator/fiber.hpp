// The context switch under the host CUDA emulator's fibers (emulate.hpp). On x86-64 it is a few
// instructions: glibc's swapcontext makes a sigprocmask syscall per switch, and whole-model tests
// switch hundreds of millions of times. Elsewhere it is swapcontext.
#pragma once

#include <cstddef>
#include <cstdint>

// A switch that moves rsp by hand breaks a CET shadow stack, so a build that may run with one
// (-fcf-protection=return or full) keeps glibc's swapcontext, which maintains it. Debian's compilers
// do not enable it by default, and the kernels and glibc these tests run on do not enforce it.
#if defined(__x86_64__) && defined(__linux__) && !(defined(__CET__) && (__CET__ & 2))
#define KYLIN_EMULATE_FAST_SWITCH 1
#else
#define KYLIN_EMULATE_FAST_SWITCH 0
#include <ucontext.h>
#endif

#if KYLIN_EMULATE_FAST_SWITCH
// The switch saves what the SysV ABI makes callee-saved: rbp, rbx, r12-r15, and the x87 control word
// and MXCSR, so a kernel thread that changes its rounding mode keeps it to itself, as it did under
// swapcontext. The frame it leaves on the stack it leaves, from rsp up:
//   [0] MXCSR, [4] x87 control word, [8] r15, r14, r13, r12, rbx, rbp, [56] return address.
// A new fiber's stack starts with such a frame returning into the start trampoline, which calls the
// entry held in rbx; .cfi_undefined rip and rbp = 0 end a backtrace there. The section is a COMDAT
// group and the symbols weak and hidden, so every translation unit that includes this header may
// emit them and the linker keeps one copy, as it does for an inline function; .ifndef skips the copies
// GCC's LTO pastes into one assembly file.
__asm__(
    ".ifndef kylin_emulate_switch_x86_64\n"
    ".pushsection .text.kylin_emulate_switch_x86_64,\"axG\",@progbits,kylin_emulate_switch_x86_64,comdat\n"
    ".weak kylin_emulate_switch_x86_64\n"
    ".hidden kylin_emulate_switch_x86_64\n"
    ".type kylin_emulate_switch_x86_64,@function\n"
    ".p2align 4\n"
    "kylin_emulate_switch_x86_64:\n"  // (void** save_sp = rdi, void* load_sp = rsi)
    "  .cfi_startproc\n"
    "  pushq %rbp\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %rbx\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %r12\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %r13\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %r14\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %r15\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  subq $8, %rsp\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %r15\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %r14\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %r13\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %r12\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %rbx\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %rbp\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  ret\n"
    "  .cfi_endproc\n"
    ".size kylin_emulate_switch_x86_64, .-kylin_emulate_switch_x86_64\n"
    ".weak kylin_emulate_fiber_start_x86_64\n"
    ".hidden kylin_emulate_fiber_start_x86_64\n"
    ".type kylin_emulate_fiber_start_x86_64,@function\n"
    ".p2align 4\n"
    "kylin_emulate_fiber_start_x86_64:\n"  // entered by ret with rsp 16-byte aligned, as before a call
    "  .cfi_startproc\n"
    "  .cfi_undefined rip\n"
    "  callq *%rbx\n"
    "  ud2\n"  // the entry never returns
    "  .cfi_endproc\n"
    ".size kylin_emulate_fiber_start_x86_64, .-kylin_emulate_fiber_start_x86_64\n"
    ".popsection\n"
    ".endif\n");

extern "C" {
__attribute__((visibility("hidden"))) void kylin_emulate_switch_x86_64(void** save_sp, void* load_sp);
__attribute__((visibility("hidden"))) void kylin_emulate_fiber_start_x86_64();
}
#endif

namespace kylin::cuda::emulate::detail {

#if KYLIN_EMULATE_FAST_SWITCH

struct Context {
  void* sp = nullptr;  // the frame the switch left, or the one make_context built
};

// ctx runs entry() on [stack, stack + bytes) at its first switch_context; stack + bytes is 16-aligned.
inline void make_context(Context& ctx, void* stack, std::size_t bytes, void (*entry)()) {
  auto* top = reinterpret_cast<std::uint64_t*>(static_cast<char*>(stack) + bytes);
  std::uint64_t* f = top - 8;
  std::uint32_t mxcsr = 0;
  std::uint16_t x87 = 0;
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(x87));
  f[0] = mxcsr | std::uint64_t{x87} << 32;  // the new thread starts with its launcher's FP modes
  f[1] = f[2] = f[3] = f[4] = 0;  // r15..r12
  f[5] = reinterpret_cast<std::uint64_t>(entry);  // rbx
  f[6] = 0;                                       // rbp
  // At top - 8, so the trampoline runs with rsp == top, 16-aligned, and its call enters at rsp % 16 == 8.
  f[7] = reinterpret_cast<std::uint64_t>(&kylin_emulate_fiber_start_x86_64);
  ctx.sp = f;
}

inline void switch_context(Context& from, Context& to) { kylin_emulate_switch_x86_64(&from.sp, to.sp); }

#else

struct Context {
  ucontext_t uc{};  // zeroed: ASan's swapcontext reads its uc_stack
  bool made = false;
};

inline void make_context(Context& ctx, void* stack, std::size_t bytes, void (*entry)()) {
  if (!ctx.made) {  // getcontext costs a syscall; a finished fiber's context is remade in place
    getcontext(&ctx.uc);
    ctx.made = true;
  }
  ctx.uc.uc_stack.ss_sp = stack;
  ctx.uc.uc_stack.ss_size = bytes;
  ctx.uc.uc_link = nullptr;
  makecontext(&ctx.uc, entry, 0);
  // ASan's swapcontext would otherwise clear this stack's shadow at every resume, and with it the
  // redzones of the kernel's live locals; the switch annotations already tell it which stack runs.
  ctx.uc.uc_stack = {};
}

inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

#endif

}  // namespace kylin::cuda::emulate::detail
