// A statically linked C program (also built stripped, with a .gnu_debuglink to its debug
// file): direct and indirect calls, recursion, and functions main calls exactly once.
#include <unistd.h>

typedef int (*op_fn)(int, int);

__attribute__((noinline)) static int add(int a, int b) { return a + b; }
__attribute__((noinline)) static int mul(int a, int b) { return a * b; }
__attribute__((noinline)) int fold(op_fn op, const int* v, int n, int init) {
  for (int i = 0; i < n; ++i) init = op(init, v[i]);
  return init;
}
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) int say(int value) {
  char text[] = "static 0\n";
  text[7] = (char)('0' + value % 10);
  return (int)write(1, text, sizeof(text) - 1);
}

int main(int argc, char** argv) {
  (void)argv;
  static const int v[5] = {1, 2, 3, 4, 5};
  int total = fold(add, v, 5, 0) + fold(mul, v, 5, 1) + fib(argc + 6);
  say(total);
  return total == 15 + 120 + 13 ? 0 : 1;
}
