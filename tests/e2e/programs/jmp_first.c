// A program whose first instruction is a jump, as Go's _rt0_amd64_linux is: four instructions,
// each run once (emulate_cli_test).
__asm__(
    ".globl _start\n"
    "_start: jmp 1f\n"
    "1: mov $60, %eax\n"
    "xor %edi, %edi\n"
    "syscall\n");
