// execve the ways a shell does, for `ptrecord --emulate=qemu` following exec (its output must
// be the same as when it runs natively):
//   qemu_exec args...      prints its argc and argv, exits 5 (the #! interpreter below)
//   qemu_exec run STATIC SCRIPT NOEXEC MISSING
//   qemu_exec closed STATIC  closes every descriptor from 3 on, then execs STATIC "x"
//   qemu_exec at DIR NAME    execveat of DIR/NAME (this program; DIR/link a symlink to it) the
//                            ways there are, each in a child that prints what it got (its COMM
//                            too, natively: with PRINT_COMM=1 in the environment), and the
//                            errors execveat gives
//   qemu_exec memfd PROGRAM  fexecve(3) of a copy of PROGRAM in a memfd (a file without a name)
// run: the execs the kernel refuses (no such file, a directory, a file without x, one that is
// neither ELF nor #!, a #! whose interpreter is missing) print their errno and the program
// goes on; a child execs the #! SCRIPT (its interpreter is this program with an argument) and
// prints its exit status; then the program execs STATIC with one argument (emulate_fib: it
// exits 3).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

static int Execveat(int dirfd, const char* path, char** argv, int flags) {
  return (int)syscall(SYS_execveat, dirfd, path, argv, environ, flags);
}

// execveat each way (in a child each): the ones that run print their argv and exit 5.
static int At(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  const int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  const int opath = open(path, O_PATH | O_CLOEXEC);
  if (dirfd < 0 || fd < 0 || opath < 0) return 1;
  static const char* const kCases[] = {
      "args-dirfd",      "args-fexecve",   "args-opath",
      "args-cwd",        "args-nofollow",  "empty-path-without-flag",
      "no-such-name",    "bad-descriptor", "bad-flags",
      "not-a-directory", "args-link",      "link-nofollow",
  };
  for (int i = 0; i < (int)(sizeof(kCases) / sizeof(kCases[0])); ++i) {
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      char* argv[] = {(char*)kCases[i], (char*)kCases[i], NULL};
      switch (i) {
        case 0:
          Execveat(dirfd, name, argv, 0);
          break;
        case 1:
          Execveat(fd, "", argv, AT_EMPTY_PATH);
          break;
        case 2:
          Execveat(opath, "", argv, AT_EMPTY_PATH);
          break;
        case 3:
          if (chdir(dir) == 0) Execveat(AT_FDCWD, name, argv, 0);
          break;
        case 4:
          Execveat(dirfd, name, argv, AT_SYMLINK_NOFOLLOW);
          break;
        case 5:
          Execveat(fd, "", argv, 0);
          break;
        case 6:
          Execveat(dirfd, "no-such-name", argv, 0);
          break;
        case 7:
          Execveat(1000, name, argv, 0);
          break;
        case 8:
          Execveat(dirfd, name, argv, 0x4000);
          break;
        case 9:
          Execveat(fd, name, argv, 0);
          break;
        case 10:
          Execveat(dirfd, "link", argv, 0);
          break;
        case 11:
          Execveat(dirfd, "link", argv, AT_SYMLINK_NOFOLLOW);
          break;
      }
      printf("%s: %s\n", kCases[i], strerror(errno));
      fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("%s: exit %d\n", kCases[i], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return 0;
}

// fexecve of a copy of `program` in a memfd.
static int Memfd(const char* program) {
  const int in = open(program, O_RDONLY);
  const int fd = memfd_create("qemu_exec_copy", MFD_CLOEXEC);
  struct stat st;
  if (in < 0 || fd < 0 || fstat(in, &st) != 0) return 1;
  for (off_t at = 0; at < st.st_size;) {
    if (sendfile(fd, in, &at, (size_t)(st.st_size - at)) <= 0) return 1;
  }
  char* argv[] = {"args-memfd", "args-memfd", NULL};
  fexecve(fd, argv, environ);  // (glibc: execveat, and execve of /proc/self/fd/N on ENOSYS)
  return 1;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strncmp(argv[1], "args", 4) == 0) {
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; ++i) printf("argv[%d]=%s\n", i, argv[i]);
    char comm[32] = {0};
    FILE* f = getenv("PRINT_COMM") != NULL ? fopen("/proc/self/comm", "r") : NULL;
    if (f != NULL && fgets(comm, sizeof(comm), f) != NULL) printf("comm=%s", comm);
    return 5;
  }
  if (argc == 3 && strcmp(argv[1], "closed") == 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    char* fib[] = {argv[2], "x", NULL};
    execv(argv[2], fib);
    return 1;
  }
  if (argc == 4 && strcmp(argv[1], "at") == 0) return At(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "memfd") == 0) return Memfd(argv[2]);
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
