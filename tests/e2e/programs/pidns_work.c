// SPDX-License-Identifier: Apache-2.0
//
// Says who it is, then works in two threads, a fork child and itself (qemu_pidns_cli_test;
// sweep 37c H1). Each task writes a line "ROLE OUTER INNER" (ROLE: main, thread, child): OUTER
// its tid in the pid namespace of the /proc it sees (the first field of NSpid: in
// /proc/thread-self/status: the recorder's when that /proc is the host's), INNER its tid in its
// own namespace (gettid).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;
static long rounds = 3000;

__attribute__((noinline)) long work(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (s >> 3);
  sink = s;
  return s;
}

static void say(const char* role) {
  char status[4096] = {0};
  FILE* f = fopen("/proc/thread-self/status", "r");
  size_t n = f ? fread(status, 1, sizeof(status) - 1, f) : 0;
  if (f) fclose(f);
  status[n] = '\0';
  const char* ns = strstr(status, "NSpid:");
  const unsigned long outer = ns ? strtoul(ns + 6, NULL, 10) : 0;
  char line[64];
  const int len = snprintf(line, sizeof(line), "%s %lu %ld\n", role, outer, syscall(SYS_gettid));
  if (write(1, line, (size_t)len) != len) _exit(2);
}

static void* thread_main(void* arg) {
  (void)arg;
  say("thread");
  work(rounds);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atol(argv[1]);
  say("main");
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, thread_main, NULL);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  const pid_t child = fork();
  if (child == 0) {
    say("child");
    work(rounds);
    _exit(0);
  }
  waitpid(child, NULL, 0);
  work(rounds);
  return 0;
}
