// SPDX-License-Identifier: Apache-2.0
//
// A CPU-bound workload for bench/qemu_emulate_bench.sh: a sieve, an insertion sort and a
// string hash, over and over; branches of every kind, calls and returns, no system calls in
// the loop. `cpu_bound ROUNDS [THREADS]`: THREADS threads each do ROUNDS rounds.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rounds;

__attribute__((noinline)) static int sieve(unsigned char* composite, int n) {
  int primes = 0;
  memset(composite, 0, (size_t)n);
  for (int i = 2; i < n; ++i) {
    if (composite[i]) continue;
    ++primes;
    for (int j = i * 2; j < n; j += i) composite[j] = 1;
  }
  return primes;
}

__attribute__((noinline)) static void insertion_sort(int* v, int n) {
  for (int i = 1; i < n; ++i) {
    int x = v[i], j = i - 1;
    while (j >= 0 && v[j] > x) {
      v[j + 1] = v[j];
      --j;
    }
    v[j + 1] = x;
  }
}

__attribute__((noinline)) static unsigned hash(const char* s) {
  unsigned h = 2166136261u;
  while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
  return h;
}

static void* work(void* arg) {
  unsigned char composite[2000];
  int v[64];
  char text[48];
  unsigned long sum = (unsigned long)arg;
  for (long r = 0; r < rounds; ++r) {
    sum += (unsigned long)sieve(composite, (int)sizeof(composite));
    for (int i = 0; i < 64; ++i) v[i] = (int)((sum * 2654435761u + (unsigned)i * 40503u) % 1000);
    insertion_sort(v, 64);
    snprintf(text, sizeof(text), "round %ld sum %lu", r, sum);
    sum += hash(text) + (unsigned long)v[32];
  }
  return (void*)sum;
}

int main(int argc, char** argv) {
  rounds = argc > 1 ? atol(argv[1]) : 1000;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (threads < 1 || threads > 64) return 2;
  pthread_t t[64];
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], 0, work, (void*)(long)i);
  unsigned long total = 0;
  for (int i = 0; i < threads; ++i) {
    void* r;
    pthread_join(t[i], &r);
    total += (unsigned long)r;
  }
  printf("%lu\n", total);
  return 0;
}
