// Reads the clock through the vDSO (clock_gettime and gettimeofday are vDSO calls in glibc,
// static or dynamic), then does a little work after it, so the decode must go on past the vDSO.
#include <sys/time.h>
#include <time.h>

__attribute__((noinline)) long after_clock(long x) {
  long acc = 0;
  for (long i = 0; i < 16; ++i) acc += (x >> (i & 7)) & 1;
  return acc;
}

int main(void) {
  struct timespec ts;
  struct timeval tv;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  gettimeofday(&tv, 0);
  return after_clock(ts.tv_nsec ^ tv.tv_usec) >= 0 ? 0 : 1;
}
