// A thread other than main calls execv() (argv[1], e.g. emulate_fib): the kernel gives it the
// leader's tid and the leader disappears.
#include <pthread.h>
#include <unistd.h>

static char* target;

static void* run(void* arg) {
  char* args[] = {target, 0};
  execv(target, args);
  return arg;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  target = argv[1];
  pthread_t t;
  pthread_create(&t, 0, run, 0);
  for (;;) pause();
}
