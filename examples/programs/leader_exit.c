// main() starts a thread and then ends only its own thread (the exit system call, not
// exit_group): the process lives on in the thread after its leader is gone. (pthread_exit
// would do the same after unwinding the stack, which in a static binary first sorts every
// FDE: millions of instructions.)
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile long sink;

static void* work(void* arg) {
  for (long i = 0; i < 3000; ++i) sink += i;
  return arg;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, 0, work, 0);
  syscall(SYS_exit, 0);
  return 1;
}
