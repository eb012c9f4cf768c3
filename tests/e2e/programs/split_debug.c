// Static functions named only by .symtab, with source lines in DWARF: stripped, with its
// debug in a separate file (.gnu_debuglink), as distributions ship programs
// (archive_debug_cli_test: ptrecord --archive keeps the debug file).
#include <stdio.h>
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) static long square_sum(long n) {
  long s = 0;
  for (long i = 0; i < n; ++i) s += i * i;
  return s;
}

__attribute__((noinline)) static long mix(long a) {
  sink = a;
  return a ^ (a >> 3);
}

__attribute__((noinline)) static void work(int rounds) {
  for (int r = 0; r < rounds; ++r) sink += mix(square_sum(100 + r));
}

int main(int argc, char** argv) {
  work(argc > 1 ? atoi(argv[1]) : 20);
  printf("%ld\n", (long)sink);
  return 0;
}
