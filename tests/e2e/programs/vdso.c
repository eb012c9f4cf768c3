// Reads the clock through the vDSO (clock_gettime, gettimeofday), which is in no file, then
// forks and reads it in the child too (the child inherits the vDSO without an mmap).
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long read_clocks(void) {
  struct timespec ts;
  struct timeval tv;
  long sum = 0;
  for (int i = 0; i < 3; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    gettimeofday(&tv, 0);
    sum += ts.tv_nsec + tv.tv_usec;
  }
  return sum;
}

int main(void) {
  long sum = read_clocks();
  pid_t child = fork();
  if (child == 0) _exit(read_clocks() == 0);
  int status = 0;
  waitpid(child, &status, 0);
  return sum == 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;  // 0: the clocks moved
}
