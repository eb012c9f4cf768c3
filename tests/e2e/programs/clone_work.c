// SPDX-License-Identifier: Apache-2.0
//
// A function GCC turns into a clone in one build and not in the other (ptdecode_diff_cli_test;
// sweep 34b F2): at -O2, work() called from two sites stays `work`; built with -DNEW it has one
// call site with a constant argument, twice the work, and becomes `work.constprop.0`.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long work(const int* v, int n, int k) {
  long s = 0;
  for (int r = 0; r < k; r++) {
    for (int i = 0; i < n; i++) s += v[i] ^ (s >> 3);
  }
  return s;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1000;
  int* v = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) v[i] = i * 31 % 97;
  long t = 0;
#ifdef NEW
  t += work(v, n, 4);
#else
  t += work(v, n, 1) + work(v, n / 2, argc);
#endif
  printf("%ld\n", t);
  free(v);
  return 0;
}
