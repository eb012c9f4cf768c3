// JIT code, as a regex engine or a language runtime makes it: machine code written at run time
// into anonymous memory and called. Two ways to get it executable: an RWX mapping, and an RW
// mapping made RX by mprotect (W^X). The code is a loop with a conditional branch (the sum of
// 0..n-1); a second function calls the first. Prints the results (qemu_emulate_cli_test: the
// decode of its recording equals the ground truth; no gap). With the argument "rewrite", it then
// writes other code over the first function (n * 2) and calls that too: the decoder warns; with
// "rewrite_inside", the same 5 bytes into the first function.
// With "fork", a child calls both functions again (the parent's JIT code is the child's too).
// With "memfd", the first function is also written into a memfd and called from a shared
// mapping of it (code in a file no path names: "/memfd:jit (deleted)"), then the program goes
// on with ordinary code (a loop of calls into libc), which the trace must still hold. With
// "shm", the same through POSIX shared memory (/dev/shm/NAME, removed at the end).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// int sum(int n) { int s = 0; for (int i = 0; i < n; ++i) s += i; return s; }
static const unsigned char kSum[] = {
    0x31, 0xc0,  // xor eax, eax
    0x31, 0xc9,  // xor ecx, ecx
    0x39, 0xf9,  // loop: cmp ecx, edi
    0x7d, 0x06,  // jge done
    0x01, 0xc8,  // add eax, ecx
    0xff, 0xc1,  // inc ecx
    0xeb, 0xf6,  // jmp loop
    0xc3,        // done: ret
};

typedef int (*Fn)(int);

int main(int argc, char** argv) {
  unsigned char* rwx =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  unsigned char* wx = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (rwx == MAP_FAILED || wx == MAP_FAILED) return 1;
  memcpy(rwx, kSum, sizeof(kSum));
  // At wx + 64: call rwx's sum (mov rax, imm64; call rax), add 1, return.
  memcpy(wx, kSum, sizeof(kSum));
  unsigned char* p = wx + 64;
  *p++ = 0x48;  // sub rsp, 8 (keeps the stack aligned for the call)
  *p++ = 0x83;
  *p++ = 0xec;
  *p++ = 0x08;
  *p++ = 0x48;  // mov rax, imm64
  *p++ = 0xb8;
  memcpy(p, &rwx, 8);
  p += 8;
  *p++ = 0xff;  // call rax
  *p++ = 0xd0;
  *p++ = 0xff;  // inc eax
  *p++ = 0xc0;
  *p++ = 0x48;  // add rsp, 8
  *p++ = 0x83;
  *p++ = 0xc4;
  *p++ = 0x08;
  *p++ = 0xc3;  // ret
  if (mprotect(wx, 4096, PROT_READ | PROT_EXEC) != 0) return 1;
  long total = 0;
  for (int round = 0; round < 20; ++round) {
    total += ((Fn)rwx)(100 + round);
    total += ((Fn)wx)(50);
    total += ((Fn)(wx + 64))(10);
  }
  if (argc > 1 && (strcmp(argv[1], "memfd") == 0 || strcmp(argv[1], "shm") == 0)) {
    char name[64];
    snprintf(name, sizeof name, "/ptkit-jit-%d", (int)getpid());
    const int fd = strcmp(argv[1], "memfd") == 0 ? memfd_create("jit", 0)
                                                 : shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0 ||
        pwrite(fd, kSum, sizeof(kSum), 0) != (ssize_t)sizeof(kSum)) {
      return 1;
    }
    unsigned char* code = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    if (code == MAP_FAILED) return 1;
    for (int round = 0; round < 20; ++round) total += ((Fn)code)(30 + round);
    char text[64];
    for (int round = 0; round < 50; ++round) {
      snprintf(text, sizeof text, "%d", round * 7);
      total += atoi(text);
    }
    if (strcmp(argv[1], "shm") == 0) shm_unlink(name);
  } else if (argc > 1 && strcmp(argv[1], "fork") == 0) {
    const pid_t child = fork();
    if (child == 0) _exit(((Fn)rwx)(7) + ((Fn)(wx + 64))(3) == 21 + 4 ? 0 : 1);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0) return 1;
  } else if (argc > 1) {
    // "rewrite": over the first function; "rewrite_inside": 5 bytes into it (no block of it
    // starts there).
    static const unsigned char kTwice[] = {0x8d, 0x04, 0x3f, 0xc3};  // lea eax, [rdi + rdi]; ret
    unsigned char* at = strcmp(argv[1], "rewrite_inside") == 0 ? rwx + 5 : rwx;
    memcpy(at, kTwice, sizeof(kTwice));
    total += ((Fn)at)(21);
  }
  printf("%ld\n", total);
  return 0;
}
