// Installs a SIGUSR1 handler and runs it itself, the ways a program may: through a function
// pointer (an indirect call, whose RET goes back after the call), as an indirect tail jump
// (its RET goes to the jumper's caller), and as the target of a RET (pushed, then returned
// to); the kernel delivers the same signal to it too (raise). Under `ptrecord --emulate=qemu`,
// whose plugin sees a block at a handler's address after an indirect branch or RET either way,
// the recorded flow must be what ran. Prints the handler's sum (50 calls, 5 jumps, 5 returns
// into it, 5 signals: 65 * SIGUSR1 = 650).
#include <signal.h>
#include <stdio.h>

static volatile long sum;

static void on_usr1(int sig) { sum += sig; }

static void (*volatile handler)(int) = on_usr1;

// A tail jump through the pointer: the handler returns to this function's caller.
__attribute__((noinline)) static void jump_to_handler(void) {
  __asm__ volatile(
      "mov $10, %%edi\n"  // SIGUSR1
      "jmp *%0\n"
      :
      : "m"(handler)
      : "rdi", "memory");  // (the handler returns from this function: the code after is not run)
}

// RET to the handler: its address pushed over this function's return address's slot, the
// handler returns to this function's caller.
__attribute__((noinline)) static void return_to_handler(void) {
  __asm__ volatile(
      "mov %0, %%rax\n"
      "mov $10, %%edi\n"  // SIGUSR1
      "push %%rax\n"
      "ret\n"
      :
      : "m"(handler)
      : "rax", "rdi", "memory");
}

__attribute__((noinline)) static void call_return_to_handler(void) {
  return_to_handler();  // (returns here through the handler, with the stack as before)
}

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_usr1;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 1;
  for (int i = 0; i < 50; ++i) {
    handler(SIGUSR1);
    if (i % 10 == 0) {
      jump_to_handler();
      call_return_to_handler();
      raise(SIGUSR1);
    }
  }
  printf("%ld\n", sum);
  return 0;
}
