// Two threads besides main, each with its own loop.
#include <pthread.h>

static volatile long results[2];

static void* work(void* arg) {
  long id = (long)arg, acc = 0;
  for (long i = 0; i < 200 + 100 * id; ++i) acc += (i & 1) ? i : -i;
  results[id] = acc;
  return 0;
}

int main(void) {
  pthread_t t[2];
  for (long i = 0; i < 2; ++i) pthread_create(&t[i], 0, work, (void*)i);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], 0);
  return results[0] == 100 && results[1] == 150 ? 0 : 1;
}
