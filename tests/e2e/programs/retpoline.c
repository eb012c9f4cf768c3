// SPDX-License-Identifier: Apache-2.0
//
// Indirect calls through retpolines (qemu_emulate_cli_test; sweep 36a F3): built with
// -mindirect-branch=thunk (e2e_retpoline_thunk: `call __x86_indirect_thunk_rax`) and
// thunk-inline (e2e_retpoline_inline: the thunk inside dispatch), whose `mov %rax, (%rsp); ret`
// jumps to the callee. PROGRAM [N]: dispatch calls op_add, op_sub, op_mul and op_xor N times
// each (default 100).
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long op_add(long a, long b) { return a + b; }
__attribute__((noinline)) long op_sub(long a, long b) { return a - b; }
__attribute__((noinline)) long op_mul(long a, long b) { return a * b; }
__attribute__((noinline)) long op_xor(long a, long b) { return a ^ b; }

static long (*const ops[4])(long, long) = {op_add, op_sub, op_mul, op_xor};

// An indirect call, not a tail jump.
__attribute__((noinline)) long dispatch(int k, long a, long b) { return ops[k & 3](a, b) + 1; }

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 100;
  long s = 0;
  for (long i = 0; i < n * 4; i++) s = dispatch((int)i, s, i);
  printf("%ld\n", s);
  return 0;
}
