// SIGALRM every 100 us while main calls t1 2,000,000 times; t1 jumps on into t2 and t2 into t3
// (tail calls): signals land at a callee's first instruction (right after a call), at a
// function's entry reached by a jump, and, back to back, at a handler's rt_sigreturn. Prints
// how many times the handler ran (its calls of in_h): the oracle of the decoded calls.
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>

static volatile long ticks, acc;

__attribute__((noinline)) static void in_h(void) { ticks = ticks + 1; }
static void on_alarm(int sig) {
  (void)sig;
  in_h();
}

#define TAIL __attribute__((noinline, optimize("optimize-sibling-calls")))
TAIL long t3(long x) {
  acc = acc + x;
  return x * 3;
}
TAIL long t2(long x) { return t3(x + 1); }
TAIL long t1(long x) { return t2(x ^ 1); }

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, 0);
  struct itimerval it = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &it, 0);
  long s = 0;
  for (long i = 0; i < 2000000; ++i) s += t1(i);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, 0);
  printf("%ld\n", ticks);
  return s == 0;
}
