// Reads the clock through the vDSO (clock_gettime, gettimeofday): the traced code runs in a
// mapping that exists in no file.
#include <sys/time.h>
#include <time.h>

int main(void) {
  struct timespec ts;
  struct timeval tv;
  long sum = 0;
  for (int i = 0; i < 3; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    gettimeofday(&tv, 0);
    sum += ts.tv_nsec + tv.tv_usec;
  }
  return sum == 0;  // 0: the clock moved
}
