// Asks for snapshots itself: under `ptrecord --emulate=qemu --snapshot`, qemu-x86_64 is
// ptrecord's child, so the program's parent is ptrecord. Three rounds of work with branches
// that depend on the data (about 7 KiB of Intel PT each, more than a small AUX ring holds),
// a SIGUSR2 to the parent and a pause after the first two (ptrecord takes the snapshot
// meanwhile; 200 ms: a ptrecord that the load keeps from running that long would see both
// signals at once and take one snapshot for them, as for any two SIGUSR2 in a row).
#include <signal.h>
#include <time.h>
#include <unistd.h>

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
  for (int round = 0; round < 3; ++round) {
    sink += work(20000);
    if (round < 2) {
      kill(getppid(), SIGUSR2);
      struct timespec pause = {0, 200 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
  }
  return 0;
}
