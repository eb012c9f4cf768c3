// Dies of SIGSEGV after a little work: a store through a null pointer (read from a volatile,
// so the compiler cannot drop it). With the argument "thread", a second thread makes the store
// (in fault()) while main waits for it; with "abort", main calls abort() (SIGABRT, delivered at
// the return of the tgkill system call that raises it) instead of the store; with "child", a
// forked child makes the store while main waits for it, then works on and exits 0; with
// "spinning", as "thread" while a third thread spins in user code.
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int* volatile target;

static void* fault(void* arg) {
  volatile int sum = 0;
  for (int i = 0; i < 10; ++i) sum += i;
  *target = sum;
  return arg;
}

static volatile int spinning;
static volatile long spun;

static void* spin(void* arg) {
  spinning = 1;
  for (long i = 0;; ++i) {
    if (i % 7 == spun % 5) spun += 3;  // conditional branches: a loop the trace can show
  }
  return arg;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    const pid_t child = fork();
    if (child == 0) fault(NULL);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) return 1;
    volatile int sum = 0;
    for (int i = 0; i < 100; ++i) sum += i;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV ? 0 : 1;
  }
  if (argc > 1 && strcmp(argv[1], "spinning") == 0) {
    pthread_t s, t;
    if (pthread_create(&s, NULL, spin, NULL) != 0) return 1;
    while (!spinning) {
    }
    if (pthread_create(&t, NULL, fault, NULL) != 0) return 1;
    pthread_join(t, NULL);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "thread") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, fault, NULL) != 0) return 1;
    pthread_join(t, NULL);
    return 0;
  }
  volatile int sum = 0;
  for (int i = 0; i < 10; ++i) sum += i;
  if (argc > 1 && strcmp(argv[1], "abort") == 0) abort();
  *target = sum;
  return 0;
}
