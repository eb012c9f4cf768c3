// Works, renames itself (prctl PR_SET_NAME, as pthread_setname_np does for the calling
// thread), works again (perf_export_cli_test: the COMM record the kernel writes for it).
#include <sys/prctl.h>

__attribute__((noinline)) static int work(int n) {
  volatile int s = 0;
  for (int i = 0; i < n; ++i) s += i;
  return s;
}

int main(void) {
  work(2000);
  if (prctl(PR_SET_NAME, "renamed-task") != 0) return 1;
  return work(3000) & 1;
}
