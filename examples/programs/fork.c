// Forks early; parent and child then each run a loop, and the parent reaps the child.
#include <sys/wait.h>
#include <unistd.h>

static long spin(long n) {
  volatile long acc = 0;
  for (long i = 0; i < n; ++i) acc += i & 3;
  return acc;
}

int main(void) {
  pid_t child = fork();
  if (child == 0) _exit(spin(20000) > 0 ? 0 : 1);
  spin(20000);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
