// SPDX-License-Identifier: Apache-2.0
//
// Two static functions `helper`, one in lto_a.c and one in lto_b.c, linked with -flto
// (ptdecode_diff_cli_test; sweep 34b F1): GCC names them helper.lto_priv.0 and .1 in link order,
// so two builds that list the sources in the other order swap the names of unchanged code.
#include <stdio.h>
#include <stdlib.h>

int a_entry(int n);
int b_entry(int n);

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 200;
  printf("%d\n", a_entry(n) + b_entry(n));
  return 0;
}
