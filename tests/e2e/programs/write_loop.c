// Writes a line per round from two calls deep, with a little work between the writes: a
// trace in which tracing stops at every system call and resumes after it with frames on the
// call stack (ptdecode -j's chunk summaries must still apply there).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static unsigned long mix(unsigned long x) {
  for (int i = 0; i < 50; ++i) x = x * 6364136223846793005ul + 1442695040888963407ul;
  return x;
}

__attribute__((noinline)) static void emit(int fd, unsigned long x) {
  char line[32];
  int n = 0;
  for (unsigned long v = x % 100000; n < 5; v /= 10) line[4 - n++] = (char)('0' + v % 10);
  line[n++] = '\n';
  if (write(fd, line, (size_t)n) != n) exit(1);
}

__attribute__((noinline)) static void round_of(int fd, unsigned long* x) {
  *x = mix(*x);
  emit(fd, *x);
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  unsigned long x = 1;
  for (int i = 0; i < rounds; ++i) round_of(1, &x);
  return 0;
}
