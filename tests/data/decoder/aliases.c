// Function aliases as glibc has them: one address, names of every binding (decoder symbols
// test). perf names the address `work`: global before weak before local, then the fewest
// leading underscores.
int __attribute__((noinline, used)) __libc_work(int x) { return x * 7 + 3; }
static int __GI_work(int x) __attribute__((alias("__libc_work"), used));
int __work(int x) __attribute__((weak, alias("__libc_work")));
int work(int x) __attribute__((alias("__libc_work")));

void _start(void) {
  volatile int r = __GI_work(5);
  (void)r;
  for (;;) {
  }
}
