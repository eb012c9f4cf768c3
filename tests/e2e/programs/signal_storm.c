// SPDX-License-Identifier: Apache-2.0
//
// Two signal sources over busy threads (qemu_emulate_cli_test; sweep 33b F2): 8 workers call
// mid -> leaf in loops, a 2 kHz ITIMER_PROF handler (onprof) and SIGUSR1s that main sends to
// the workers (onusr) both call hleaf, which nothing else calls. A handler entered right after
// a RET, and another signal right after a direct call inside it, lost the first handler's frame
// with no word: its code ran under the interrupted function ("worker;mid;hleaf").
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

enum { kThreads = 8 };
static volatile long sink, prof_hits, usr_hits;

__attribute__((noinline)) long hleaf(long i) {
  sink += i;
  return i;
}
void onprof(int sig) {
  (void)sig;
  ++prof_hits;
  for (int i = 0; i < 400; i++) hleaf(i);
}
void onusr(int sig) {
  (void)sig;
  ++usr_hits;
  for (int i = 0; i < 10; i++) hleaf(-i);
}
__attribute__((noinline)) long leaf(long i) {
  sink += i;
  return (i * 2654435761u) >> 7;
}
__attribute__((noinline)) long mid(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += leaf(i);
  return s;
}
__attribute__((noinline)) void* worker(void* arg) {
  const long id = (long)arg;
  long s = 0;
  for (int k = 0; k < 300 + id * 3; k++) {
    s += mid(2000);
    if (k % 5 == 0) sched_yield();
  }
  sink += s;
  return 0;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onprof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, 0);
  sa.sa_handler = onusr;
  sigaction(SIGUSR1, &sa, 0);
  const struct itimerval every = {{0, 500}, {0, 500}};
  setitimer(ITIMER_PROF, &every, 0);
  pthread_t threads[kThreads];
  for (long i = 0; i < kThreads; i++) pthread_create(&threads[i], 0, worker, (void*)i);
  for (int r = 0; r < 3000; r++) {
    for (int i = 0; i < kThreads; i++) pthread_kill(threads[i], SIGUSR1);
    usleep(5);
  }
  for (int i = 0; i < kThreads; i++) pthread_join(threads[i], 0);
  printf("prof=%ld usr=%ld\n", prof_hits, usr_hits);
  return 0;
}
