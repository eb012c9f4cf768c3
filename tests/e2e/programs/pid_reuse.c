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
// Then a child on TARGET + 100 that exits (no exec), libm dlopen'd, and a thread on that tid
// calling cos (review 36 M1, H1: the thread was decoded with the child's images, without libm).
// With a third argument "texec": a thread on TARGET + 150, then this program exec'd ("texec"),
// whose thread on that tid runs work(5000) (review 36 M2: it was taken for the exec's thread).
#include <dlfcn.h>
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

static double (*cosine)(double);

static void* libm_thread(void* arg) {
  volatile double x = 0;
  for (int i = 0; i < 20; i++) x += cosine(i);
  return (void*)(long)syscall(SYS_gettid);
}

// A thread on tid `tid` running `run`; prints "thread TID".
static void thread_on(int tid, void* (*run)(void*), void* arg) {
  next_pid(tid);
  pthread_t t;
  void* got = 0;
  pthread_create(&t, 0, run, arg);
  pthread_join(t, &got);
  printf("thread %ld\n", (long)got);
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "a") == 0) return (int)(work(5) & 1) + 11;
  if (argc == 3 && strcmp(argv[1], "texec") == 0) {
    thread_on(atoi(argv[2]) + 150, thread, (void*)490);  // work(5000)
    return 0;
  }
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
  for (long r = 0; r < rounds; r++) thread_on(r == 0 ? target : target + 50, thread, (void*)r);
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
  next_pid(target + 100);
  const pid_t child = fork();
  if (child == 0) {
    work(20);
    _exit(0);
  }
  waitpid(child, 0, 0);
  printf("child %d\n", (int)child);
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  if (libm == NULL || (cosine = (double (*)(double))dlsym(libm, "cos")) == NULL) return 3;
  thread_on(target + 100, libm_thread, 0);
  if (argc > 3 && strcmp(argv[3], "texec") == 0) {
    thread_on(target + 150, thread, 0);
    fflush(stdout);
    execl(argv[0], argv[0], "texec", argv[1], (char*)0);
    return 4;
  }
  return 0;
}
