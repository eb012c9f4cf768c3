// A thread that goes round a loop of direct jumps only (no conditional branch: no packet)
// until main, after 100 ms, exits: how many rounds it made is not in the trace
// (qemu_emulate_cli_test: every decode says the recorder counted more than it holds).
#include <pthread.h>
#include <unistd.h>

static volatile long rounds;

static void* spin(void* arg) {
  for (;;) rounds = rounds + 1;
  return arg;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, 0, spin, 0) != 0) return 1;
  usleep(100000);
  return 0;
}
