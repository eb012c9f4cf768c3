// SPDX-License-Identifier: Apache-2.0
//
// A little work, 300 ms asleep in nanosleep, a little work (qemu_emulate_cli_test: the time
// of a system call's return; sweep 30a F2).
#include <time.h>

static volatile long sink;

__attribute__((noinline)) void work(int n) {
  for (int i = 0; i < n; ++i) sink += i;
}

int main(void) {
  const struct timespec nap = {0, 300 * 1000 * 1000};
  work(100);
  nanosleep(&nap, 0);
  work(100);
  return 0;
}
