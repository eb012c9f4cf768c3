// A dynamically linked C program (built PIE and non-PIE): calls through the PLT (qsort,
// printf, strlen), a callback from libc (the qsort comparator), recursion and a helper that
// main calls exactly once.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

__attribute__((noinline)) int depth(int n) { return n == 0 ? 0 : 1 + depth(n - 1); }

__attribute__((noinline)) int checksum(const int* v, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum = sum * 31 + v[i];
  return sum;
}

__attribute__((noinline)) int report(const char* name, int value) {
  return printf("%s %d\n", name, value) + (int)strlen(name);
}

int main(int argc, char** argv) {
  int v[8] = {5, 3, 7, 1, 8, 2, 6, 4};
  qsort(v, 8, sizeof(v[0]), compare);
  int sum = checksum(v, 8) + depth(argc + 3);
  report(argv[0][0] == '/' ? "sorted" : "sorted.", sum);
  return v[0] == 1 && v[7] == 8 ? 0 : 1;
}
