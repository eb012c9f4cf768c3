// SPDX-License-Identifier: Apache-2.0
// (See lto_main.c.) Ten calls of this file's helper.
__attribute__((noinline)) static int helper(int x) {
  int s = 0;
  for (int i = 0; i < x; i++) s += (i * i) % 13;
  return s;
}

int a_entry(int n) {
  int s = 0;
  for (int k = 0; k < 10; k++) s += helper(n + k);
  return s;
}
