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

// Its own filter regions (region_top, region_mid and region_back): region_mid calls away(),
// outside, which jumps (a tail call) to region_back, inside, whose RET returns to region_mid
// across the call that left the regions.
__attribute__((noinline)) int region_back(int x) { return x + 1; }
int away(int x);  // region_back(x * 2) as a tail call, whatever the compiler's options
__asm__(
    ".text\n"
    ".globl away\n"
    ".type away, @function\n"
    "away:\n"
    "  addl %edi, %edi\n"
    "  jmp region_back\n"
    ".size away, .-away\n");
__attribute__((noinline)) int region_mid(int x) { return away(x) + 3; }
__attribute__((noinline)) int region_top(int x) { return region_mid(x) * 5; }

// Recursion across a filter region's edge (`filter cross_a`): cross_a(4) -> cross_b(3) ->
// cross_a(2) -> cross_b(1) -> cross_a(0); cross_b runs untraced.
int cross_b(int n);
__attribute__((noinline)) int cross_a(int n) { return n <= 0 ? 1 : cross_b(n - 1) + 1; }
__attribute__((noinline)) int cross_b(int n) { return n <= 0 ? 2 : cross_a(n - 1) * 2; }

int main(void) {
  printf("%d\n", traced(by_pointer, 6));
  printf("%d\n", cross_a(4));
  int t = 0;
  for (int i = 0; i < 10; ++i) t += region_top(i);
  printf("%d\n", t);
  again = recurse;
  int s = 0;
  for (int i = 0; i < 20; ++i) s += recurse(i % 7);
  printf("%d recurse %d outside %d\n", s, recursed, outside_calls);
  return 0;
}
