// Stops, and runs on only once continued: `stop_work raise PIDFILE` stops itself with
// raise(SIGSTOP); `stop_work threads PIDFILE` spins in two threads, to be stopped from outside.
// Either way it writes its pid and a newline to PIDFILE first (once its second thread runs),
// then spins until its SIGCONT handler ran, and says "continued".
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t continued;

static void on_cont(int sig) {
  (void)sig;
  continued = 1;
}

__attribute__((noinline)) static long step(long x) { return (x * 7) ^ (x >> 3); }

static void* spin(void* arg) {
  volatile long acc = (long)arg;
  while (!continued) acc = step(acc);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_cont;
  sigaction(SIGCONT, &sa, NULL);
  const int threads = strcmp(argv[1], "threads") == 0;
  pthread_t other;
  if (threads && pthread_create(&other, NULL, spin, (void*)1) != 0) return 3;
  char text[32];
  const int len = snprintf(text, sizeof text, "%d\n", (int)getpid());
  const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, text, len) != len || close(fd) != 0) return 4;
  if (!threads) raise(SIGSTOP);
  spin((void*)2);
  if (threads) pthread_join(other, NULL);
  puts("continued");
  return 0;
}
