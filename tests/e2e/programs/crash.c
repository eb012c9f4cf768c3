// Dies of SIGSEGV after a little work: a store through a null pointer (read from a volatile,
// so the compiler cannot drop it). With an argument, a second thread makes the store (in
// fault()) while main waits for it.
#include <pthread.h>
#include <stddef.h>

static int* volatile target;

static void* fault(void* arg) {
  volatile int sum = 0;
  for (int i = 0; i < 10; ++i) sum += i;
  *target = sum;
  return arg;
}

int main(int argc, char** argv) {
  (void)argv;
  if (argc > 1) {
    pthread_t t;
    if (pthread_create(&t, NULL, fault, NULL) != 0) return 1;
    pthread_join(t, NULL);
    return 0;
  }
  volatile int sum = 0;
  for (int i = 0; i < 10; ++i) sum += i;
  *target = sum;
  return 0;
}
