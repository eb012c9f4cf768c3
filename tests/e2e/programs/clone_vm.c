// A process that shares its parent's memory: clone(CLONE_VM | SIGCHLD) without CLONE_THREAD.
// Natively the child sums into `shared` and exits 7; qemu-user 7.2 refuses such a clone with
// EINVAL (qemu_emulate_cli_test: ptrecord says so). Exit 0 when it ran, 1 when clone failed.
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static volatile long shared;

static int child(void* arg) {
  long s = 0;
  for (long i = 0; i < (long)(size_t)arg; ++i) s += i;
  shared = s;
  return 7;
}

int main(void) {
  enum { kStack = 1 << 16 };
  char* stack = malloc(kStack);
  if (stack == NULL) return 2;
  const pid_t pid = clone(child, stack + kStack, CLONE_VM | SIGCHLD, (void*)(size_t)1000);
  if (pid < 0) {
    perror("clone");
    return 1;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 7) return 3;
  printf("shared=%ld\n", shared);
  return 0;
}
