// Call-stack test program (call_stack_test.cc): built at 0x401000, entry main. Its call at
// 0x401000 is 2 bytes long (callstack_signal.S has a 5-byte call there): f is at 0x401005.
.text
.globl main
.type main,@function
main:
  call *%rax
  nop
  jmp *%rbx
.size main,.-main
.globl f
.type f,@function
f:
  nop
  ret
.size f,.-f
