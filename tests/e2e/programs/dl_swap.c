// Loads each library named on its command line in turn with dlopen(), calls its plugin_work
// through dlsym(), prints where the library was loaded (dladdr) and the result, and dlcloses it
// before the next: natively
// the next library is mapped where the one before was (mmap reuses the hole), so code of
// another file takes that address (emulate_cli_test: the decode follows the change).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    void* lib = dlopen(argv[i], RTLD_NOW);
    if (!lib) return 3;
    int (*work)(int) = (int (*)(int))dlsym(lib, "plugin_work");
    if (!work) return 4;
    Dl_info where;
    if (!dladdr((void*)work, &where)) return 5;
    printf("%p %d\n", where.dli_fbase, work(50));
    dlclose(lib);
  }
  return 0;
}
