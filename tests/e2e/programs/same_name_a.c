// Two static functions named `helper`, one in each of two sources (same_name_b.c has the
// other and main): ptdecode stats shows each as a row of its own, as perf report does.
__attribute__((noinline)) static int helper(int x) { return x + 1; }

int in_a(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s = helper(s);
  return s;
}
