// Two builds for `ptdecode diff` (ptdecode_diff_cli_test): WORK_ITERATIONS sets how much work()
// does; steady() and main() are the same code in both builds.
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

int main(void) {
  int total = 0;
  for (int i = 0; i < 4; ++i) total += work(5) + steady(20);
  return total == 0 ? 1 : 0;
}
