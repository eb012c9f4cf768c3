// Call-stack test program (call_stack_test.cc): built at 0x401000, entry main. Jumps into
// other functions: main calls stub, which jumps on through %rax to target (as a PLT entry
// jumps to its function); target calls leaf, then jumps (direct) on to tail (a tail call),
// which returns to main.
.text
.globl main
.type main,@function
main:
  call stub
  nop
  jmp *%rbx
.size main,.-main
.globl stub
.type stub,@function
stub:
  jmp *%rax
.size stub,.-stub
.globl target
.type target,@function
target:
  call leaf
  jmp tail
.size target,.-target
.globl leaf
.type leaf,@function
leaf:
  ret
.size leaf,.-leaf
.globl tail
.type tail,@function
tail:
  nop
  ret
.size tail,.-tail
