// execve the ways a shell does, for `ptrecord --emulate=qemu` following exec (its output must
// be the same as when it runs natively):
//   qemu_exec args...      prints its argc and argv, exits 5 (the #! interpreter below)
//   qemu_exec run STATIC SCRIPT NOEXEC MISSING
//   qemu_exec closed STATIC  closes every descriptor from 3 on, then execs STATIC "x"
// run: the execs the kernel refuses (no such file, a directory, a file without x, one that is
// neither ELF nor #!, a #! whose interpreter is missing) print their errno and the program
// goes on; a child execs the #! SCRIPT (its interpreter is this program with an argument) and
// prints its exit status; then the program execs STATIC with one argument (emulate_fib: it
// exits 3).
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc >= 2 && strncmp(argv[1], "args", 4) == 0) {
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; ++i) printf("argv[%d]=%s\n", i, argv[i]);
    return 5;
  }
  if (argc == 3 && strcmp(argv[1], "closed") == 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    char* fib[] = {argv[2], "x", NULL};
    execv(argv[2], fib);
    return 1;
  }
  if (argc != 6 || strcmp(argv[1], "run") != 0) return 2;
  const char* fails[] = {"/nonexistent/program", "/", "/etc/passwd", argv[4], argv[5]};
  for (unsigned i = 0; i < sizeof(fails) / sizeof(fails[0]); ++i) {
    char* none[] = {"none", NULL};
    execv(fails[i], none);
    printf("exec %s: %s\n", i < 3 ? fails[i] : i == 3 ? "NOEXEC" : "MISSING", strerror(errno));
  }
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    char* script[] = {argv[3], "ignored", "last", NULL};
    execv(argv[3], script);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("script: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  fflush(stdout);
  char* fib[] = {argv[2], "x", NULL};
  execv(argv[2], fib);
  return 1;
}
