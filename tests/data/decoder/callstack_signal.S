// Call-stack test program (decoder_callstack_test.cc): built at 0x401000, entry main.
.text
.globl main
.type main,@function
main:
  call m1
  nop
  jmp *%rbx
.size main,.-main
.globl m1
.type m1,@function
m1:
  call g
  call k
  ret
.size m1,.-m1
.globl g
.type g,@function
g:
  nop
  nop
  nop
  ret
.size g,.-g
.globl k
.type k,@function
k:
  nop
  ret
.size k,.-k
.globl handler
.type handler,@function
handler:
  nop
  ret
.size handler,.-handler
.globl restorer
.type restorer,@function
restorer:
  jmp *%rbx
.size restorer,.-restorer
// A restorer that leaves by rt_sigreturn's system call (a far transfer: where the kernel may
// deliver the next signal at once).
.globl sigreturn
.type sigreturn,@function
sigreturn:
  syscall
.size sigreturn,.-sigreturn
