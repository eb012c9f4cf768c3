// SPDX-License-Identifier: Apache-2.0
//
// Stripped code that tail-jumps to an exported wrapper, which tail-jumps on into stripped code
// (sweep 35a F2: CPython's static callers of PyDict_Update, a `mov; jmp dict_merge`): built
// -O2 -rdynamic and stripped, so `exported_upd` and `api` keep their dynamic symbols and the
// static functions have none. PROGRAM [N] calls api N times (default 1000).
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, noclone)) static int merge(int x, int y) {
  int s = 0;
  for (int i = 0; i < (x & 7); i++) s += y ^ i;
  return s;
}

// `mov $1, %esi; jmp merge`
__attribute__((noinline, noclone)) int exported_upd(int x) { return merge(x, 1); }

// `...; jmp exported_upd`
__attribute__((noinline, noclone)) static int helper(int x) {
  if (x & 1) x += 7;
  return exported_upd(x ^ 5);
}

__attribute__((noinline, noclone)) int api(int x) {
  int r = helper(x);
  return r + helper(r & 0xff);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1000;
  int s = 0;
  for (int i = 0; i < n; i++) s += api(i);
  printf("%d\n", s);
  return 0;
}
