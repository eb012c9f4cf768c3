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

int main(void) {
  printf("%d\n", traced(by_pointer, 6));
  return 0;
}
