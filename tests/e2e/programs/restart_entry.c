// A program started as musl's dynamic loader starts one (emulate_cli_test): its entry point
// (_start) first runs "loader" code two calls deep (_start_c -> stage1 -> stage2), which goes
// back to the initial stack and jumps to the entry point again; the second time, _start_c
// runs the program (work) and exits. Static, no libc: built with -nostdlib.
static volatile int started;

__attribute__((noinline)) static void work(void) {
  for (volatile int i = 0; i < 100; ++i) {
  }
}

__attribute__((noinline, noreturn)) void stage2(void* sp) {
  started = 1;
  __asm__ volatile("mov %0, %%rsp\n jmp _start" : : "r"(sp));
  __builtin_unreachable();
}

__attribute__((noinline, noreturn)) void stage1(void* sp) { stage2(sp); }

__attribute__((used, noreturn)) void start_c(void* sp) {
  if (!started) stage1(sp);
  work();
  __asm__ volatile("mov $60, %eax\n xor %edi, %edi\n syscall");
  __builtin_unreachable();
}

__asm__(
    ".globl _start\n"
    "_start: mov %rsp, %rdi\n"
    "and $-16, %rsp\n"
    "call start_c\n");
