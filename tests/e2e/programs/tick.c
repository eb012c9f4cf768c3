// Works a little, then sleeps 10 ms, until it is killed: a run that goes on with few
// instructions a second even under QEMU (ptrecord_kill_test kills `ptrecord --emulate=qemu` at
// random moments and compares every instruction decoded with the ground truth).
#include <time.h>

__attribute__((noinline)) static unsigned long mix(unsigned long x) {
  return x & 1 ? 3 * x + 1 : x / 2;
}

int main(void) {
  volatile unsigned long x = 27;
  const struct timespec pause = {0, 10 * 1000 * 1000};
  for (unsigned long round = 1;; ++round) {
    for (int i = 0; i < 500; ++i) x = x > 1 ? mix(x) : round + 27;
    nanosleep(&pause, 0);
  }
}
