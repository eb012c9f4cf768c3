// Calls out of a filtered region (ptrecord --filter 'filter traced @ PROG'): traced() calls
// untraced code through a function pointer (an indirect call: its target only the TIP.PGD
// tells), directly, and through a function that leaves by longjmp back into traced(). Each of
// those calls must return (or be left) where tracing resumes in traced(): qemu_emulate_cli_test.
#include <setjmp.h>
#include <stdio.h>

static jmp_buf back;

__attribute__((noinline)) int by_pointer(int x) { return x * 2 + 1; }
__attribute__((noinline)) int direct(int x) { return x + 3; }
__attribute__((noinline)) void leaves(int x) {
  if (x % 2 == 0) longjmp(back, 1);
}

__attribute__((noinline)) int traced(int (*volatile f)(int), int n) {
  int s = 0;
  for (volatile int i = 0; i < n; ++i) {
    s += f(i);
    s ^= direct(i);
    if (setjmp(back) == 0) {
      leaves(i);
    } else {
      s += 100;
    }
  }
  return s;
}

// Its own filter region: recurses through a pointer and calls out of the region at every
// level, so that returns within the region follow calls out of it. The counts are the test's
// oracle.
static int recursed, outside_calls;
__attribute__((noinline)) int outside(int x) {
  ++outside_calls;
  return x * 7;
}
int (*volatile again)(int);
__attribute__((noinline)) int recurse(int n) {
  ++recursed;
  return n <= 0 ? outside(n) : again(n - 1) + outside(n);
}

int main(void) {
  printf("%d\n", traced(by_pointer, 6));
  again = recurse;
  int s = 0;
  for (int i = 0; i < 20; ++i) s += recurse(i % 7);
  printf("%d recurse %d outside %d\n", s, recursed, outside_calls);
  return 0;
}
