// Starts a daemon the usual way (fork, setsid, fork) and exits at once; the daemon sleeps
// 300 ms, works, then writes argv[1] (qemu_emulate_cli_test: ptrecord waits for it).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) static int work(int n) {
  volatile int s = 0;
  for (int i = 0; i < n; ++i) s += i;
  return s;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (fork() == 0) {
    setsid();
    if (fork() == 0) {
      usleep(300000);
      const int r = work(50000);
      FILE* f = fopen(argv[1], "w");
      if (f == NULL) return 1;
      fprintf(f, "%d\n", r);
      fclose(f);
      return 0;
    }
    return 0;
  }
  work(1000);
  return 0;
}
