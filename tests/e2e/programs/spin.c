// Runs until it is killed: for stopping `ptrecord --emulate` with a signal mid-run.
// never_called() has a page of its own: with `--filter 'filter never_called @ ...'` the
// program runs at full speed throughout (nothing else shares the region's page).
__attribute__((noinline)) static long step(long x) { return (x * 7) ^ (x >> 3); }

__attribute__((noinline, used, aligned(4096))) long never_called(long x) { return x + 1; }
__attribute__((noinline, used, aligned(4096))) long next_page(long x) { return x + 2; }

int main(void) {
  volatile long acc = 1;
  for (;;) acc = step(acc);
}
