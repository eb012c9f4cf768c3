// Forks; the child execs argv[1] (e.g. emulate_fib with one argument: it exits 3) while the
// parent spins, then the parent reaps it and exits with the child's exit code.
#include <sys/wait.h>
#include <unistd.h>

static long spin(long n) {
  volatile long acc = 0;
  for (long i = 0; i < n; ++i) acc += i & 3;
  return acc;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  pid_t child = fork();
  if (child == 0) {
    spin(500);
    execv(argv[1], argv + 1);
    _exit(127);
  }
  spin(2000);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
