// SPDX-License-Identifier: Apache-2.0
// (See lto_main.c.) Five calls of this file's helper.
__attribute__((noinline)) static int helper(int x) {
  int s = 1;
  for (int i = 0; i < x; i++) s ^= (i << 2) + s % 5;
  return s;
}

int b_entry(int n) {
  int s = 0;
  for (int k = 0; k < 5; k++) s += helper(n - k);
  return s;
}
