// A signal's handler that calls functions: main raises SIGUSR1 three times between rounds of
// work; the handler runs on top of the frames it interrupted (libc's kill) and calls work and
// leaf (qemu_emulate_cli_test: the handler's frame, against the ground truth and gdb).
#include <signal.h>
#include <string.h>

static volatile unsigned long sink;

__attribute__((noinline)) void work(int n) {
  for (int i = 0; i < n; ++i) sink += (unsigned long)i * 3;
}

__attribute__((noinline)) void leaf(void) { sink++; }

__attribute__((noinline)) void on_signal(int sig) {
  work(50 + sig);
  leaf();
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, 0);
  for (int round = 0; round < 3; ++round) {
    work(20);
    raise(SIGUSR1);
  }
  return 0;
}
