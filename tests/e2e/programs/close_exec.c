// SPDX-License-Identifier: Apache-2.0
//
// close_exec PROGRAM ARGS...: closes every descriptor above stderr, then execs PROGRAM, as a
// container's launcher or a closefrom() user does before it runs the real program
// (qemu_pidns_cli_test; sweep 37c H3).
#define _GNU_SOURCE
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  close_range(3, ~0u, 0);
  execv(argv[1], argv + 1);
  return 127;
}
