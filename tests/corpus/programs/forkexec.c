// fork + exec: the child execs the program named by argv[1]; the parent waits for it and
// calls a function of its own after the child is gone.
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int after_wait(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  pid_t child = fork();
  if (child == 0) {
    execv(argv[1], argv + 1);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return after_wait(status);
}
