// SPDX-License-Identifier: Apache-2.0
//
// Signal handlers that are static functions, as distributions' programs have them (dash's, make's,
// CPython's), built stripped (qemu_emulate_cli_test; sweep 35a F1: without a symbol the handler
// got no frame and its return to the restorer popped every frame below it):
//   signal_stripped wait    SIGCHLD comes while main waits for each of 3 children in waitpid
//                           (onchld runs on top of wait4), then work() after each
//   signal_stripped alarm   a 2 ms SIGALRM timer interrupts spin() until onalrm ran 20 times;
//                           then work()
//   signal_stripped pending with SIGUSR1 and SIGUSR2 blocked, raises both, then unblocks them:
//                           onusr2 runs, and onusr1 at its rt_sigreturn (the kernel delivers a
//                           pending signal there; a review); 3 times, then work()
// Prints the handler runs.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long ticks, runs;

__attribute__((noinline)) static void hwork(void) {
  for (int i = 0; i < 50; i++) ticks += i & 3;
}
static void onchld(int s) {
  (void)s;
  ++runs;
  hwork();
}
static void onusr1(int s) {
  (void)s;
  runs += 1;
  hwork();
}
static void onusr2(int s) {
  (void)s;
  runs += 1 + (ticks & 0);
  ticks += 3;
  hwork();
}
static void onalrm(int s) {
  (void)s;
  runs += 1 + (ticks & 0);  // (not onchld's code: one function each)
  ticks += 2;
  hwork();
}

__attribute__((noinline)) static int waitkid(pid_t p) {
  int st = 0;
  while (waitpid(p, &st, 0) < 0) {
  }
  return WEXITSTATUS(st);
}
__attribute__((noinline)) static long work(int n) {
  long s = 0;
  for (int i = 0; i < n; i++) s += i ^ (s >> 3);
  return s;
}
__attribute__((noinline)) static long spin(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (s >> 3);
  return s;
}

int main(int argc, char** argv) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  long t = 0;
  if (argc > 1 && strcmp(argv[1], "pending") == 0) {
    sa.sa_handler = onusr1;
    sigaction(SIGUSR1, &sa, 0);
    sa.sa_handler = onusr2;
    sigaction(SIGUSR2, &sa, 0);
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    for (int k = 0; k < 3; k++) {
      sigprocmask(SIG_BLOCK, &both, 0);
      raise(SIGUSR1);
      raise(SIGUSR2);
      sigprocmask(SIG_UNBLOCK, &both, 0);
    }
    t += work(1000);
  } else if (argc > 1 && strcmp(argv[1], "alarm") == 0) {
    sa.sa_handler = onalrm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &it, 0);
    while (runs < 20) t += spin(10000);
    memset(&it, 0, sizeof(it));
    setitimer(ITIMER_REAL, &it, 0);
    t += work(1000);
  } else {
    sa.sa_handler = onchld;  // no SA_RESTART: waitpid fails with EINTR, and is called again
    sigaction(SIGCHLD, &sa, 0);
    for (int k = 0; k < 3; k++) {
      const pid_t p = fork();
      if (p == 0) {
        usleep(20000);
        _exit(k);
      }
      t += waitkid(p);
      t += work(1000) & 1;
    }
  }
  printf("runs=%ld %ld\n", runs, t & 1);
  return 0;
}
