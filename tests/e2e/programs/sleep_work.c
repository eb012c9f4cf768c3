// SPDX-License-Identifier: Apache-2.0
//
// A little work, 300 ms asleep in nanosleep, a little work (qemu_emulate_cli_test: the time
// of a system call's return; sweep 30a F2). With the argument "longjmp", first a SIGALRM in a
// loop of conditional branches whose handler siglongjmps out (its branch never resolved: the
// plugin holds the events after it, with their times); "longjmp_work" the same with 100,000
// rounds of work after it instead of 100 (more trace held). With "again", first a 1 ms nap and
// the work again, so that the long nap comes soon after the short one's return: its entry
// gives no time (the plugin's last TSC is less than 100 us before it).
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile long sink;
static sigjmp_buf env;

__attribute__((noinline)) void work(int n) {
  for (int i = 0; i < n; ++i) sink += i;
}

__attribute__((noinline)) void on_alarm(int sig) {
  (void)sig;
  siglongjmp(env, 1);
}

__attribute__((noinline)) void loop(void) {
  for (long i = 0;; ++i) {
    if (i % 3 == sink % 2) sink += i;
  }
}

int main(int argc, char** argv) {
  // "longjmp_work": the same with more work after the handler (more trace held: PSBs in it).
  const int more = argc > 1 && strcmp(argv[1], "longjmp_work") == 0;
  if (argc > 1 && (strcmp(argv[1], "longjmp") == 0 || more)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    if (sigsetjmp(env, 1) == 0) {
      const struct itimerval once = {{0, 0}, {0, 20000}};
      setitimer(ITIMER_REAL, &once, 0);
      loop();
    }
  }
  const struct timespec nap = {0, 300 * 1000 * 1000};
  work(more ? 100000 : 100);
  if (argc > 1 && strcmp(argv[1], "again") == 0) {
    const struct timespec short_nap = {0, 1000 * 1000};
    nanosleep(&short_nap, 0);
    work(100);
  }
  nanosleep(&nap, 0);
  work(100);
  return 0;
}
