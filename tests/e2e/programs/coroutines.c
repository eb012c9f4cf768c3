// SPDX-License-Identifier: Apache-2.0
//
// Two coroutines on stacks of their own (ucontext: makecontext, swapcontext), switching N times
// each way through one yield function, so that both stacks have a frame with the same return
// address (qemu_emulate_cli_test; sweep 30c F5: the decoder stacked each coroutine's frames on
// the other's, `ping;yield_to;pong;leaf_pong`); then a loop of 5 rounds by setcontext back to
// where getcontext returned (a longjmp: the frames stay; sweep 32a F2, built with -fno-plt, the
// call through the GOT was taken for a switch):
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

__attribute__((noinline)) void again(void) {
  static ucontext_t loop_ctx;
  static volatile int k;
  getcontext(&loop_ctx);
  leaf_again(k);
  if (++k < 5) setcontext(&loop_ctx);
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
  printf("rounds=%d\n", rounds);
  return 0;
}
