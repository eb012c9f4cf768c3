// Control flow that leaves functions without their RET, or returns where no CALL of theirs
// went: longjmp out of a recursion, C++ exceptions thrown through frames, and swapcontext
// between two stacks. Each makes RETs whose target is not the return stack's top (perf's and
// libipt's decoders treat those differently: perf_export_cli_test).
#include <ucontext.h>

#include <csetjmp>
#include <cstdio>
#include <stdexcept>

namespace {

std::jmp_buf jump_back;
ucontext_t main_context, co_context;
char co_stack[65536];
int co_rounds;
int caught, jumped;

[[gnu::noinline]] int JumpFrom(int depth) {
  if (depth < 0) return 0;
  if (depth == 0) std::longjmp(jump_back, 1);
  return JumpFrom(depth - 1) + 1;
}

[[gnu::noinline]] int ThrowFrom(int depth) {
  if (depth == 0) throw std::runtime_error("unwind");
  return ThrowFrom(depth - 1) + 1;
}

// Whether JumpFrom came back by longjmp (always).
[[gnu::noinline]] bool JumpedBack(int depth) {
  if (setjmp(jump_back) != 0) return true;
  JumpFrom(depth);
  return false;
}

void Coroutine() {
  for (int i = 0; i < 20; ++i) {
    co_rounds = co_rounds + 1;
    swapcontext(&co_context, &main_context);
  }
}

}  // namespace

int main() {
  for (int i = 0; i < 20; ++i) {
    try {
      ThrowFrom(i % 7);
    } catch (const std::exception&) {
      ++caught;
    }
    if (JumpedBack(i % 9)) ++jumped;
  }
  getcontext(&co_context);
  co_context.uc_stack.ss_sp = co_stack;
  co_context.uc_stack.ss_size = sizeof(co_stack);
  co_context.uc_link = &main_context;
  makecontext(&co_context, Coroutine, 0);
  for (int i = 0; i < 20; ++i) swapcontext(&main_context, &co_context);
  std::printf("%d %d %d\n", caught, jumped, static_cast<int>(co_rounds));
  return caught == 20 && jumped == 20 && co_rounds == 20 ? 0 : 1;
}
