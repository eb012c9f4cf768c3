// Forks early; parent and child then each run a loop, and the parent reaps the child.
#include <sys/wait.h>
#include <unistd.h>

// Iterations of each loop; tests build a smaller fork with -DSPIN_ITERATIONS=...
#ifndef SPIN_ITERATIONS
#define SPIN_ITERATIONS 20000
#endif

static long spin(long n) {
  volatile long acc = 0;
  for (long i = 0; i < n; ++i) acc += i & 3;
  return acc;
}

int main(void) {
  pid_t child = fork();
  if (child == 0) _exit(spin(SPIN_ITERATIONS) > 0 ? 0 : 1);
  spin(SPIN_ITERATIONS);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
