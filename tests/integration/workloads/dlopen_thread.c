// Test workload: dlopen()s a library given on the command line, calls its function, and
// runs it again on a second thread, so a recording sees the library's MMAP2, the thread's
// FORK and EXIT, and the process's EXIT.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef int (*plugin_fn)(int);
static plugin_fn fn;

static void* run(void* arg) {
  (void)arg;
  return (void*)(long)fn(2);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 3;
  }
  fn = (plugin_fn)dlsym(h, "ptkit_plugin");
  if (!fn) return 4;
  pthread_t t;
  if (pthread_create(&t, NULL, run, NULL) != 0) return 5;
  void* r;
  pthread_join(t, &r);
  return fn(1) + (int)(long)r == 3 * 7 ? 0 : 6;
}
