// SPDX-License-Identifier: Apache-2.0
//
// Signals whose handler does not return before the next one (qemu_emulate_cli_test; sweep 30c
// F1: the QEMU plugin failed the whole recording at the second signal that came after a
// conditional branch while another such signal waited for its handler's rt_sigreturn):
//   signal_nested nested N   SIGALRM every 1 ms with SA_NODEFER, each handler spinning in a
//                            loop of conditional branches until the next one comes (3 deep at
//                            most), until N handlers ran
//   signal_nested longjmp N  N rounds of a loop of conditional branches that a SIGALRM's
//                            handler leaves by siglongjmp (it never returns)
// Prints "handlers=H" (and the deepest nesting).
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static sigjmp_buf env;
static volatile int handlers, depth, deepest;
static volatile long spin;

__attribute__((noinline)) void nested_handler(int sig) {
  (void)sig;
  ++handlers;
  if (++depth > deepest) deepest = depth;
  if (depth < 3) {
    const int seen = handlers;
    for (long i = 0; i < 2000000 && handlers == seen; ++i) spin += i;
  }
  --depth;
}

__attribute__((noinline)) void leaving_handler(int sig) {
  (void)sig;
  ++handlers;
  siglongjmp(env, 1);
}

// Conditional branches only, until a signal's handler leaves it (the outer loop's too: a
// signal after an unconditional jump is no such signal, and the test counts them).
static volatile int forever = 1;
__attribute__((noinline)) void loop(void) {
  long i = 0;
  do {
    long x = i;
    for (int k = 0; k < 40; ++k) x = x * 31 + k;
    spin += x;
    ++i;
  } while (forever);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int n = atoi(argv[2]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  if (strcmp(argv[1], "nested") == 0) {
    sa.sa_handler = nested_handler;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval every = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &every, 0);
    while (handlers < n) ++spin;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
  } else {
    sa.sa_handler = leaving_handler;
    sigaction(SIGALRM, &sa, 0);
    for (volatile int i = 0; i < n; ++i) {
      if (sigsetjmp(env, 1) == 0) {
        struct itimerval once = {{0, 0}, {0, 20000}};
        setitimer(ITIMER_REAL, &once, 0);
        loop();
      }
    }
  }
  printf("handlers=%d deepest=%d\n", handlers, deepest);
  return 0;
}
