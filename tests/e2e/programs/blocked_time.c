// SPDX-License-Identifier: Apache-2.0
//
// A thread that sleeps 200 ms in f_sleep (nanosleep: with threads, glibc calls
// __pthread_disable_asynccancel right after the system call; with the argument "raw",
// syscall(SYS_nanosleep), a few instructions after the last branch), then works a little in
// after_sleep. Prints how long f_sleep took by CLOCK_MONOTONIC: "slept NS"
// (blocked_time_cli_test: the wait is the system call's, not the code's before or after it;
// sweep 40a F1, F2).
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;
static int raw;

static long Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) void f_sleep(void) {
  const struct timespec nap = {0, 200 * 1000 * 1000};
  if (raw) {
    syscall(SYS_nanosleep, &nap, 0);
  } else {
    nanosleep(&nap, 0);
  }
}

// (A few instructions: single-stepped, each takes tens of microseconds.)
__attribute__((noinline)) void after_sleep(void) { sink += 1; }

static void* Sleeper(void* arg) {
  const long start = Now();
  f_sleep();
  *(long*)arg = Now() - start;
  after_sleep();
  return 0;
}

int main(int argc, char** argv) {
  raw = argc > 1 && strcmp(argv[1], "raw") == 0;
  pthread_t thread;
  long slept = 0;
  if (pthread_create(&thread, 0, Sleeper, &slept) != 0) return 1;
  pthread_join(thread, 0);
  printf("slept %ld\n", slept);
  return 0;
}
