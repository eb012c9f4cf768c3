// Uses an AVX-512 instruction (at the symbol avx512_insn), which QEMU 7.2's TCG does not
// implement: under qemu-x86_64 the program dies of SIGILL there; natively (on a CPU with
// AVX-512) it prints "before" and "after".
#include <stdio.h>

int main(void) {
  puts("before");
  fflush(stdout);
  __asm__ volatile(
      ".globl avx512_insn\n"
      "avx512_insn:\n"
      "vpxorq %%zmm1, %%zmm1, %%zmm1\n"
      ".size avx512_insn, . - avx512_insn\n" ::
          : "xmm1");
  puts("after");
  return 0;
}
