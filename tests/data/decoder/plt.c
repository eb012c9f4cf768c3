// An ordinary dynamically linked program for the symbol and --srcline tests: its libc calls
// go through the PLT (qsort, getenv, printf, puts, strlen), built in several variants (PIE,
// -no-pie, IBT .plt.sec, -z now, -fno-plt) by tests/unit/decoder/CMakeLists.txt. It prints
// where main is, so a test knows where a PIE was loaded.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int Compare(const void* a, const void* b) { return *(const int*)a - *(const int*)b; }

int Sum(const int* v, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += v[i];
  return s;
}

int main(int argc, char** argv) {
  int v[8] = {5, 3, 7, 1, 8, 2, 6, 4};
  qsort(v, 8, sizeof v[0], Compare);
  printf("main %p %d %d\n", (void*)main, v[0], Sum(v, 8));
  if (getenv("PTKIT_PLT_TEST_NO_SUCH_VARIABLE") != NULL) return 2;
  if (argc > 1) puts(argv[0]);
  return (int)strlen(argv[0]) == 0;
}
