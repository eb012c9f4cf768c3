// A 64-bit program that switches to 32-bit compatibility mode (CS 0x23) and back ("heaven's
// gate") 20 times by far returns; in compatibility mode a loop of INC/DEC (0x42, 0x49: REX
// prefixes in 64-bit code). Exits with the number of rounds (20). No libc: built -nostdlib
// -static -no-pie (the 32-bit code pushes back64's address as 32 bits).
__asm__(
    "        .text\n"
    "        .globl _start\n"
    "leaf64: lea 1(%rdi), %rax\n"
    "        ret\n"
    "_start: mov %rsp, %r15\n"
    "        mov $20, %ebx\n"
    "        xor %r12d, %r12d\n"
    "1:      mov %rbx, %rdi\n"
    "        call leaf64\n"
    "        lea stack_top(%rip), %rsp\n"  // a stack below 4 GiB for the 32-bit code
    "        call to32\n"
    "        mov %r15, %rsp\n"
    "        dec %ebx\n"
    "        jnz 1b\n"
    "        mov $60, %eax\n"
    "        mov %r12d, %edi\n"
    "        syscall\n"
    "to32:   sub $8, %rsp\n"
    "        movl $0x23, 4(%rsp)\n"
    "        lea f32(%rip), %rax\n"
    "        mov %eax, (%rsp)\n"
    "        lretl\n"  // pops EIP and CS 0x23
    "        .code32\n"
    "f32:    mov $5, %ecx\n"
    "2:      inc %edx\n"
    "        dec %ecx\n"
    "        jnz 2b\n"
    "        push $0x33\n"
    "        push $back64\n"
    "        lretl\n"  // back to 64-bit code
    "        .code64\n"
    "back64: add $1, %r12d\n"
    "        ret\n"  // returns from `call to32`
    "        .bss\n"
    "        .balign 16\n"
    "stack:  .skip 4096\n"
    "stack_top:\n");
