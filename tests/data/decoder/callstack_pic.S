// Call-stack test program (decoder_callstack_test.cc): built at 0x401000, entry main.
.text
.globl main
.type main,@function
main:
  call 1f
1: pop %rax
  call f
  nop
  jmp *%rbx
.size main,.-main
.globl f
.type f,@function
f:
  nop
  ret
.size f,.-f
