// Call-stack test program (call_stack_test.cc): built at 0x401000, entry main. Jumps into
// other functions: main calls stub, which jumps on through %rax to target (as a PLT entry
// jumps to its function); target calls leaf, then jumps (direct) on to tail (a tail call),
// which returns to main. An unwind: catcher calls thrower, thrower calls unwinder, which
// jumps through %rax into the middle of catcher (as an exception reaches a landing pad). Last,
// code without a symbol (below).
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
.globl catcher
.type catcher,@function
catcher:
  call thrower
  nop
  nop
  jmp *%rbx
.size catcher,.-catcher
.globl thrower
.type thrower,@function
thrower:
  call unwinder
  ret
.size thrower,.-thrower
.globl unwinder
.type unwinder,@function
unwinder:
  jmp *%rax
.size unwinder,.-unwinder
// Code no symbol covers (as in a stripped program): it calls stub2, which jumps on into more
// such code (as a PLT entry jumps to PLT0 there), which jumps on into leaf.
.L_nosym:
  call stub2
  jmp *%rbx
.L_plt0:
  jmp *%rcx
.globl stub2
.type stub2,@function
stub2:
  jmp .L_plt0
.size stub2,.-stub2
