// The other static `helper` (see same_name_a.c): main calls a's 10 times and this one 3 times.
__attribute__((noinline)) static int helper(int x) { return x * 3 + 2; }

int in_a(int n);

int main(void) {
  int s = in_a(10);
  for (int i = 0; i < 3; ++i) s = helper(s);
  return s == 0;
}
