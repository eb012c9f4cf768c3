// SPDX-License-Identifier: Apache-2.0
//
// Two coroutines on stacks of their own (ucontext: makecontext, swapcontext), switching N times
// each way through one yield function, so that both stacks have a frame with the same return
// address (qemu_emulate_cli_test; sweep 30c F5: the decoder stacked each coroutine's frames on
// the other's, `ping;yield_to;pong;leaf_pong`); then loops of 5 rounds by setcontext back to
// where getcontext returned (a longjmp: the frames below stay; sweep 32a F2, built with -fno-plt,
// the call through the GOT was taken for a switch), from a deeper function (a review: the
// frames between stayed, growing each round), and with getcontext called through a pointer
// (a review: -j differed); and a C function named gogo, as Go's, that returns as any (a review:
// its return ended every frame):
//   coroutines N
// Prints "rounds=N".
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

static ucontext_t main_ctx, ping_ctx, pong_ctx;
static volatile long sink;
static int rounds;

__attribute__((noinline)) void yield_to(ucontext_t* from, ucontext_t* to) { swapcontext(from, to); }

__attribute__((noinline)) void leaf_ping(int i) { sink += i * 3; }
__attribute__((noinline)) void leaf_pong(int i) { sink += i * 5; }

__attribute__((noinline)) void ping(void) {
  for (int i = 0; i < rounds; ++i) {
    leaf_ping(i);
    yield_to(&ping_ctx, &pong_ctx);
  }
}

__attribute__((noinline)) void pong(void) {
  for (int i = 0; i < rounds; ++i) {
    leaf_pong(i);
    yield_to(&pong_ctx, &ping_ctx);
  }
}

__attribute__((noinline)) void leaf_again(int i) { sink += i * 7; }

static ucontext_t loop_ctx;

__attribute__((noinline)) void bounce(void) { setcontext(&loop_ctx); }

__attribute__((noinline)) void again(void) {
  static volatile int k;
  getcontext(&loop_ctx);
  leaf_again(k);
  if (++k < 5) bounce();
}

__attribute__((noinline)) void leaf_pointer(int i) { sink += i * 11; }

// getcontext called through a table of pointers (call *8(%rax)).
struct ContextOps {
  void* unused;
  int (*get)(ucontext_t*);
};
static struct ContextOps context_ops = {0, getcontext};
static struct ContextOps* volatile ops = &context_ops;

__attribute__((noinline)) void again_by_pointer(void) {
  static volatile int k;
  ops->get(&loop_ctx);
  leaf_pointer(k);
  if (++k < 5) setcontext(&loop_ctx);
}

__attribute__((noinline)) int gogo(int i) { return i * 2 + 1; }
__attribute__((noinline)) void leaf_gogo(int i) { sink += i; }

__attribute__((noinline)) void run_gogo(void) {
  for (int i = 0; i < 5; ++i) leaf_gogo(gogo(i));
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  rounds = atoi(argv[1]);
  static char ping_stack[64 * 1024], pong_stack[64 * 1024];
  getcontext(&ping_ctx);
  ping_ctx.uc_stack.ss_sp = ping_stack;
  ping_ctx.uc_stack.ss_size = sizeof ping_stack;
  ping_ctx.uc_link = &main_ctx;
  makecontext(&ping_ctx, ping, 0);
  getcontext(&pong_ctx);
  pong_ctx.uc_stack.ss_sp = pong_stack;
  pong_ctx.uc_stack.ss_size = sizeof pong_stack;
  pong_ctx.uc_link = &main_ctx;
  makecontext(&pong_ctx, pong, 0);
  swapcontext(&main_ctx, &ping_ctx);
  again();
  again_by_pointer();
  run_gogo();
  printf("rounds=%d\n", rounds);
  return 0;
}
