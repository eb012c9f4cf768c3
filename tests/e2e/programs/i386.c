// An i386 program (built -m32, dynamic and static): calls, a recursion, qsort's callback
// through libc, printf through lazy binding, and INC/DEC of registers (0x40-0x4f, REX
// prefixes in 64-bit code).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int leaf(int i) { return i * 3 + 1; }
__attribute__((noinline)) int mid(int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += leaf(i);
  return s;
}
__attribute__((noinline)) int rec(int d) { return d <= 0 ? 1 : rec(d - 1) + mid(d); }
__attribute__((noinline)) int incdec(int a, int b) {
  for (int i = 0; i < 4; i++) __asm__ volatile("inc %0\n\tdec %1\n\tinc %0" : "+r"(a), "+r"(b));
  return a + b;
}
static int cmp(const void* a, const void* b) { return *(const int*)a - *(const int*)b; }

int main(int argc, char** argv) {
  int t = rec(8) + incdec(argc, 7);
  int a[32];
  for (int i = 0; i < 32; i++) a[i] = (i * 37) % 32;
  qsort(a, 32, sizeof a[0], cmp);
  printf("%d %d %zu\n", t, a[5], strlen(argv[0]));
  return 0;
}
