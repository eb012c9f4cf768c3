// Stands in for kernel text in the --kcore decode test: linked at the kernel's address
// (0xffffffff81000000, -mcmodel=kernel), without libc. The synthesizer walks it as if it ran,
// and its nm output serves as the recording's /proc/kallsyms.
static volatile int sink;

__attribute__((noinline)) int ksquare(int x) { return x * x; }

__attribute__((noinline)) int kwork(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += (i & 1) ? ksquare(i) : i;
  return s;
}

void kentry(void) {
  for (;;) sink = kwork(sink & 63);
}
