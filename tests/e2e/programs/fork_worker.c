// SPDX-License-Identifier: Apache-2.0
//
// Workers forked below main that _exit (qemu_emulate_cli_test; sweep 33b F1): run() forks 3
// children through spawn_worker(), each runs cwork(N) and _exits, never returning into main;
// then main runs cwork(1000) itself.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long cwork(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (s >> 3);
  sink = s;
  return s;
}

__attribute__((noinline)) void spawn_worker(long n) {
  const pid_t p = fork();
  if (p == 0) {
    cwork(n);
    _exit(0);
  }
  waitpid(p, 0, 0);
}

__attribute__((noinline)) void run(long n) {
  for (int k = 0; k < 3; k++) spawn_worker(n);
}

int main(int argc, char** argv) {
  run(argc > 1 ? atol(argv[1]) : 10000);
  cwork(1000);
  printf("%ld\n", sink);
  return 0;
}
