// Loads the library named by argv[1] with dlopen() and calls into it through dlsym().
#include <dlfcn.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) return 3;
  int (*work)(int) = (int (*)(int))dlsym(lib, "plugin_work");
  if (!work) return 4;
  int result = work(50);
  dlclose(lib);
  return result == 98 ? 0 : 1;
}
