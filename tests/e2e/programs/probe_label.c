// SPDX-License-Identifier: Apache-2.0
//
// Memory probes that recover from a fault at a label (qemu_emulate_cli_test; sweep 33a F5):
// probe() reads through a pointer; where the read faults, the SIGSEGV handler moves the
// interrupted flow to the global label probe_recover, inside probe, and returns. probe_fault
// and probe_recover are labels (STT_NOTYPE, size 0) inside the function probe: no call goes
// to either, the flow falls into probe_fault and the handler resumes at probe_recover, all in
// probe's frame, as gdb's stacks show it. ROUNDS (argv[1], default 4) scans of 30 probes, a
// third of them faulting; leaf() is called once per probe and once per handler run.
// Then a label that is an entry all the same: inner_entry, a second entry of the assembly
// function outer, called 10 times and jumped to by tail() 10 times (a review: the jumps were
// no longer counted as calls).
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

static volatile long sink;
extern char probe_recover[];

__attribute__((noinline)) void leaf(int i) { sink += i; }

// 1 where *p reads, 0 where it faults.
__attribute__((noinline)) int probe(const volatile int* p) {
  int ok;
  __asm__ volatile(
      "movl $1, %0\n"
      ".globl probe_fault\nprobe_fault:\n"
      "movl (%1), %%eax\n"
      "jmp 1f\n"
      ".globl probe_recover\nprobe_recover:\n"
      "movl $0, %0\n"
      "1:\n"
      : "=&r"(ok)
      : "r"(p)
      : "eax", "memory");
  leaf(ok);
  return ok;
}

long outer(long), inner_entry(long), tail(long);
__asm__(
    ".text\n.globl outer\n.type outer,@function\nouter:\n addq $1,%rdi\n"
    ".globl inner_entry\ninner_entry:\n leaq 2(%rdi),%rax\n ret\n.size outer,.-outer\n"
    ".globl tail\n.type tail,@function\ntail:\n jmp inner_entry\n.size tail,.-tail\n");

static void on_segv(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)info;
  leaf(7);
  ((ucontext_t*)context)->uc_mcontext.gregs[REG_RIP] = (greg_t)probe_recover;
}

__attribute__((noinline)) int scan(int n) {
  static int readable = 5;
  int good = 0;
  for (int i = 0; i < n; ++i) good += probe(i % 3 ? &readable : (int*)(long)(16 + i));
  return good;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 4;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, 0);
  int good = 0;
  for (int k = 0; k < rounds; ++k) good += scan(30);
  long entries = 0;
  for (int i = 0; i < 10; ++i) entries += inner_entry(i) + tail(i);
  printf("%d %ld %ld\n", good, sink, entries);
  return 0;
}
