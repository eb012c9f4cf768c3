// SPDX-License-Identifier: Apache-2.0
//
// A fault that a handler fixes, inside a block that ends in RET (qemu_emulate_cli_test; sweep
// 30c F4): writer(4) recurses to writer(0), whose store into a read-only page faults; the
// SIGSEGV handler makes the page writable and returns, the store runs again. Three times.
// With the argument "call": the store that faults is in a block that ends in a direct call
// (sweep 33a F2: the call was taken to have run, the handler ran on a frame of the callee).
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static volatile int handled, writes;
static char* page;

__attribute__((noinline)) void on_segv(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)info;
  (void)context;
  ++handled;
  mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

__attribute__((noinline)) void writer(int d) {
  ++writes;
  if (d) {
    writer(d - 1);
  } else {
    page[100] = 1;
  }
  __asm__ volatile("");
}

__attribute__((noinline)) void after(int v) { writes += v; }

__attribute__((noinline)) void store_then_call(int v) {
  page[200] = (char)v;
  after(v);
}

int main(int argc, char** argv) {
  page = mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, 0);
  const int call = argc > 1 && strcmp(argv[1], "call") == 0;
  for (int i = 0; i < 3; ++i) {
    if (call) {
      store_then_call(1);
    } else {
      writer(4);
    }
    mprotect(page, 4096, PROT_READ);
  }
  printf("handled=%d writes=%d\n", handled, writes);
  return 0;
}
