// A process to attach to (attach_cli_test): `attach DIR`. Main starts two threads that spin
// until the file DIR/stop exists (the second, "early", until DIR/stop-early), then writes its
// pid to DIR/ready and waits for both. Every wait gives up after 60 s, so a failed test leaves
// nothing running.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char* dir;
static volatile unsigned long sink;

static int Exists(const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

static void* Spin(void* name) {
  const time_t start = time(NULL);
  while (!Exists((const char*)name) && time(NULL) - start < 60) {
    for (int i = 0; i < 100000; ++i) sink += (unsigned long)i;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  dir = argv[1];
  pthread_t a, b;
  pthread_create(&a, NULL, Spin, "stop");
  pthread_create(&b, NULL, Spin, "stop-early");
  char path[4096], tmp[4096];
  snprintf(path, sizeof path, "%s/ready", dir);
  snprintf(tmp, sizeof tmp, "%s/ready.tmp", dir);
  FILE* f = fopen(tmp, "w");
  if (f == NULL) return 1;
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  rename(tmp, path);
  pthread_join(b, NULL);
  pthread_join(a, NULL);
  return 0;
}
