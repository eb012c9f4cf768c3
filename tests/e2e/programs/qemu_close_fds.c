// A fork child that closes every descriptor above stderr and opens files in their place, as
// Python's subprocess does before its exec: under ptrecord --emulate=qemu --ground-truth the
// plugin's descriptors (the ring's, the ground truth's) go with them, and the first file the
// child opens takes the lowest number, maybe the ground truth's.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int sink;

static int work(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += i % 7;
  return s;
}

int main(void) {
  sink = work(1000);
  pid_t pid = fork();
  if (pid == 0) {
    close_range(3, ~0u, 0);
    int fds[4];
    for (int i = 0; i < 4; ++i) fds[i] = open("/dev/null", O_WRONLY);
    for (int i = 0; i < 200; ++i) {
      sink = work(100);
      if (write(fds[i % 4], "x", 1) != 1) _exit(2);
    }
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
  sink = work(1000);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
