# Seed program of tests/fuzz/decode_fuzz.cc: a loop of 5 calls, a branch taken every other one.
        .globl _start
        .text
_start:
        mov $5, %ecx
1:      call f
        dec %ecx
        jnz 1b
        mov $60, %eax
        xor %edi, %edi
        syscall
f:      test $1, %ecx
        jz 2f
        add $1, %eax
2:      ret
