// Builds for `ptdecode diff` (ptdecode_diff_cli_test): WORK_ITERATIONS sets how much work()
// does; steady() and main() are the same code in every build, but for EXTRA_CALL, which adds a
// call of work() with no iteration to main (+9 of 1794 instructions under main: +0.50%).
#ifndef WORK_ITERATIONS
#define WORK_ITERATIONS 10
#endif

static int work(int n) {
  volatile int sum = 0;
  for (int i = 0; i < n * WORK_ITERATIONS; ++i) sum += i;
  return sum;
}

static int steady(int n) {
  volatile int sum = 0;
  for (int i = 0; i < n; ++i) sum += i * 3;
  return sum;
}

int main(int argc, char** argv) {
  (void)argv;
  int total = 0;
  for (int i = 0; i < 4; ++i) total += work(5) + steady(20);
#ifdef EXTRA_CALL
  total += work(argc - 1);  // argc: not a constant the compiler could fold into work()
#endif
  return total == 0 || argc == 0 ? 1 : 0;
}
