// SPDX-License-Identifier: Apache-2.0
//
// Process and thread ids that come back within one recording (emulate_cli_test,
// qemu_emulate_cli_test; sweep 34a F1): PROGRAM TARGET ROUNDS forks ROUNDS children, each
// given the pid TARGET (by /proc/sys/kernel/ns_last_pid, root only), which run a little and
// exec this program again ("a": another run of the same pid in a new image), exec
// PROGRAM_other ("a": the same built with -DOTHER, its code elsewhere at the same addresses),
// or exit, in turn;
// then ROUNDS threads one after the other: the first given the tid TARGET (the children's pid:
// a process before, now a thread of another one), the others TARGET + 50. Prints each child's
// pid and each thread's tid. The trace of every run must be kept: the later runs' trace was
// dropped (step), and under qemu a child reusing a pid hung the workload. With a third
// argument "kill": then one more child on TARGET that spins until its parent SIGKILLs it.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

#ifdef OTHER
// Before the rest: this build's functions are not where e2e_pid_reuse has them.
__attribute__((used, noinline)) void padding(void) { __asm__ volatile(".skip 4096, 0x90"); }
#endif

__attribute__((noinline)) long work(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += i;
  sink += s;
  return s;
}

static void next_pid(int pid) {
  const int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
  if (fd < 0) {
    perror("ns_last_pid");
    exit(1);
  }
  char text[32];
  const int n = snprintf(text, sizeof text, "%d", pid - 1);
  if (write(fd, text, (size_t)n) != n) perror("ns_last_pid");
  close(fd);
}

static void* thread(void* arg) {
  work(100 + 10 * (long)arg);
  return (void*)(long)syscall(SYS_gettid);
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "a") == 0) return (int)(work(5) & 1) + 11;
  if (argc < 3) return 2;
  const int target = atoi(argv[1]);
  const int rounds = atoi(argv[2]);
  for (int r = 0; r < rounds; r++) {
    next_pid(target);
    const pid_t child = fork();
    if (child == 0) {
      work(10 + r);
      if (r % 3 == 2) _exit(r);
      // Another program at this one's addresses (sweep 35b F1: the next run on the pid, forked
      // with this program's mappings, was put in that program's image, which was decoded with
      // this program's bytes).
      char other[4096];
      snprintf(other, sizeof other, "%s_other", argv[0]);
      execl(r % 3 == 1 ? other : argv[0], argv[0], "a", (char*)0);
      _exit(99);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %d\n", (int)child);
  }
  for (long r = 0; r < rounds; r++) {
    next_pid(r == 0 ? target : target + 50);
    pthread_t t;
    void* tid = 0;
    pthread_create(&t, 0, thread, (void*)r);
    pthread_join(t, &tid);
    printf("thread %ld\n", (long)tid);
  }
  if (argc > 3 && strcmp(argv[3], "kill") == 0) {
    next_pid(target);
    const pid_t child = fork();
    if (child == 0) {
      for (;;) work(1000);
    }
    usleep(200000);
    kill(child, SIGKILL);
    waitpid(child, 0, 0);
    printf("killed %d\n", (int)child);
  }
  return 0;
}
