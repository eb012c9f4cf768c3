// The other static `helper` (see same_name_a.c): main calls a's 10 times and this one
// B_ROUNDS times (3; builds for ptdecode diff: e2e_same_name_more 9, e2e_same_name_none
// argc - 1, none without arguments, the function still in the program).
#ifndef B_ROUNDS
#define B_ROUNDS 3
#endif
__attribute__((noinline)) static int helper(int x) { return x * 3 + 2; }

int in_a(int n);

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  int s = in_a(10);
  for (int i = 0; i < B_ROUNDS; ++i) s = helper(s);
  return s == 0;
}
