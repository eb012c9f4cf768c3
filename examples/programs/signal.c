// A signal handler entered asynchronously (raise) and left through rt_sigreturn.
#include <signal.h>
#include <string.h>

static volatile int hits;

static void on_usr1(int sig) {
  for (int i = 0; i < 10; ++i) hits += sig;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, 0);
  raise(SIGUSR1);
  return hits == 10 * SIGUSR1 ? 0 : 1;
}
