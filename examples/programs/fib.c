// Recursion, a loop and an exit code: `fib` exits 3 when given one argument.
static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char** argv) {
  volatile int sum = 0;
  for (int i = 0; i < 8; ++i) sum += fib(i);
  (void)argv;
  return argc == 2 ? 3 : 0;
}
