// Runs until it is killed: for stopping `ptrecord --emulate` with a signal mid-run.
__attribute__((noinline)) static long step(long x) { return (x * 7) ^ (x >> 3); }

int main(void) {
  volatile long acc = 1;
  for (;;) acc = step(acc);
}
