// A tiny freestanding program for decoder tests: the tests walk its machine code with a seeded
// branch oracle and encode the walk as Intel PT (tests/unit/decoder/pt_synth.cc).
// Built without libc, jump tables or CET so every branch is direct, conditional or a return.
static int __attribute__((noinline)) leaf(int x) { return x * 3 + 1; }

static int __attribute__((noinline)) collatz(int n) {
  int steps = 0;
  while (n != 1) {
    n = (n & 1) ? leaf(n) : n / 2;
    ++steps;
  }
  return steps;
}

static int __attribute__((noinline)) fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int __attribute__((noinline)) work(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += collatz(i + 1);
    if (i & 1) sum += fib(i % 7);
  }
  return sum;
}

void _start(void) {
  volatile int result = work(20);
  (void)result;
  for (;;) {
  }
}
