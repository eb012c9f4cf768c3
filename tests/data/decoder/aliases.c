// Function aliases as glibc has them: one address, several names (decoder symbols test).
// perf 6.1 (choose_best_symbol) names each address: not weak before weak, global before local,
// then the fewest leading underscores, then the longest name.
//
// `work`: names of every binding; perf names it `work`.
int __attribute__((noinline, used)) __libc_work(int x) { return x * 7 + 3; }
static int __GI_work(int x) __attribute__((alias("__libc_work"), used));
int __work(int x) __attribute__((weak, alias("__libc_work")));
int work(int x) __attribute__((alias("__libc_work")));

// Locals of as many underscores: the longest name (as glibc's __memmove_avx_unaligned_erms
// and __memcpy_avx_unaligned_erms), whichever the symbol table lists first.
static int __attribute__((noinline, used)) __copy_long_first(int x) { return x * 5 + 1; }
static int __copy_short(int x) __attribute__((alias("__copy_long_first"), used));
static int __attribute__((noinline, used)) __move_short(int x) { return x * 3 + 2; }
static int __move_long_second(int x) __attribute__((alias("__move_short"), used));

// A local before a weak name, though the weak one has fewer underscores and is longer.
static int __attribute__((noinline, used)) __local_only(int x) { return x * 11 + 4; }
int weak_but_longer_name(int x) __attribute__((weak, alias("__local_only")));

// A name with a symbol version (glibc's cfree@GLIBC_2.2.5 of free) only when there is no other.
int __attribute__((noinline, used)) release(int x) { return x * 13 + 5; }
__asm__(".symver release, release_compat@OLD_1.0");

// Global names longer than 127 characters: the longest (ranks once compared lengths up to 127
// only, and the first listed won: a review). As C++ names folded together by the linker are.
int __attribute__((noinline, used)) long_target(int x) { return x * 17 + 6; }
int long_alias_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa(
    int x) __attribute__((alias("long_target")));
int long_alias_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb(
    int x) __attribute__((alias("long_target")));

void _start(void) {
  volatile int r = __GI_work(5) + __copy_short(1) + __move_short(2) + __local_only(3) + release(4) +
                   long_target(5);
  (void)r;
  for (;;) {
  }
}
