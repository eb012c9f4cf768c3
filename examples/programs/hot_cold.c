// `hot` and `cold` share a code page: a --filter region of `hot` alone must not make `cold`
// (argv[1] iterations, called from main and from hot) run single-stepped. Exits 0.
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) long cold(long n) {
  long acc = 0;
  for (long i = 0; i < n; ++i) acc += (i ^ sink) & 7;
  return acc;
}

__attribute__((noinline)) long hot(long x, long n) {
  long r = x * 3;
  if (x & 1) r += cold(n / 4);
  return r + 1;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1000;
  long total = cold(n);
  for (long i = 0; i < 6; ++i) total += hot(i, n);
  sink = total;
  return 0;
}
