// A small function called over and over while SIGALRM arrives every 5 ms: with
// `ptrecord --emulate --filter 'filter hot @ ...'`, signals land while the recorder enters and
// leaves the region (and while it changes the region's page protection).
#include <signal.h>
#include <string.h>
#include <sys/time.h>

// Built with other figures for tests (tests/e2e: a signal every 200 us, 40 of them).
#ifndef ALARM_INTERVAL_US
#define ALARM_INTERVAL_US 5000
#endif
#ifndef ALARM_TICKS
#define ALARM_TICKS 30
#endif

static volatile long ticks;

static void on_alarm(int sig) { ticks += sig == SIGALRM; }

__attribute__((noinline)) long hot(long x) {
  long acc = 0;
  for (int i = 0; i < 4; ++i) acc += x ^ i;
  return acc;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, 0);
  struct itimerval every = {{0, ALARM_INTERVAL_US}, {0, ALARM_INTERVAL_US}};
  setitimer(ITIMER_REAL, &every, 0);
  volatile long sum = 0;
  for (long i = 0; ticks < ALARM_TICKS && i < 100000000; ++i) sum += hot(i) & 1;
  struct itimerval off;
  memset(&off, 0, sizeof(off));
  setitimer(ITIMER_REAL, &off, 0);
  return ticks >= ALARM_TICKS ? 0 : 1;
}
