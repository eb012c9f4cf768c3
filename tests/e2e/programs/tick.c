// Works a little, then sleeps 10 ms, until it is killed: a run that goes on with few
// instructions a second even under QEMU (ptrecord_kill_test kills `ptrecord --emulate=qemu` at
// random moments and compares every instruction decoded with the ground truth).
#include <time.h>

static unsigned long state = 12345;

__attribute__((noinline)) static unsigned long work(int n) {
  unsigned long odd = 0;
  for (int i = 0; i < n; ++i) {
    state = state * 6364136223846793005ul + 1442695040888963407ul;
    if ((state >> 33) & 1) ++odd;
  }
  return odd;
}

int main(void) {
  volatile unsigned long sink = 0;
  const struct timespec pause = {0, 10 * 1000 * 1000};
  for (;;) {
    sink += work(500);
    nanosleep(&pause, 0);
  }
}
