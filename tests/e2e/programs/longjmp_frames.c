// SPDX-License-Identifier: Apache-2.0
//
// longjmp back into a frame further down the stack (qemu_emulate_cli_test; sweep 30c F2, F3):
//   longjmp_frames recursive N  f(1) recurses to f(10); f(3) called setjmp, f(10) longjmps to
//                               it, then landed(); N times
//                               (f(3) works a while before its setjmp and f(10) before its
//                               longjmp, so that -j's chunks begin inside them)
//   longjmp_frames deep D       rec(D) recurses D deep and longjmps back to main, which then
//                               calls mid() (which calls leaf()) 5 times
//   longjmp_frames cold D       cold_rec(D) recurses D deep, every 1000th frame through its
//                               cold part (cold_rec.cold, which jumps back into it), and
//                               returns; then mid() 5 times (built with
//                               -freorder-blocks-and-partition)
//   longjmp_frames chain N      level(4) recurses to level(0), each level's setjmp a TRY; the
//                               innermost throws, and each level's FINALLY (finally_) runs and
//                               rethrows to the level below, as C exception libraries and
//                               interpreters' ensure chains do; N times (sweep 33a F1)
//   longjmp_frames cleanup N    a thread's inner(5) recurses to inner(0), each with a C cleanup
//                               handler (pthread_cleanup_push: a setjmp); inner(0) calls
//                               pthread_exit, whose unwinding longjmps to each level's handler
//                               in turn; N threads one after the other
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf env;
static volatile int landings, leaves;

__attribute__((noinline)) void landed(void) { ++landings; }

static volatile long sink;

__attribute__((noinline)) void f(int d) {
  if (d == 3) {
    for (int k = 0; k < 20000; ++k) sink += k;
    if (setjmp(env) == 0) {
      f(d + 1);
    } else {
      landed();
    }
    return;
  }
  if (d < 10) {
    f(d + 1);
  } else {
    for (int k = 0; k < 3000; ++k) sink ^= k;  // (the longjmp in a later chunk than the setjmp)
    longjmp(env, 1);
  }
  __asm__ volatile("");
}

__attribute__((noinline)) void rec(int d) {
  if (d < 0) return;  // (never: a way out for the compiler's sake)
  if (d > 0) {
    rec(d - 1);
  } else {
    longjmp(env, 1);
  }
  __asm__ volatile("");
}

__attribute__((cold, noinline)) void report(int d) { sink += d; }

__attribute__((noinline)) void cold_rec(int d) {
  if (__builtin_expect(d % 1000 == 999, 0)) {
    report(d);
    sink += 2;
  }
  if (d > 0) cold_rec(d - 1);
  __asm__ volatile("");
  ++sink;
}

// A TRY frame: its jmp_buf and the one below (the chain a throw unwinds).
struct try_frame {
  jmp_buf jb;
  struct try_frame* prev;
};
static struct try_frame* top;

__attribute__((noinline, noreturn)) void throw_(int code) {
  struct try_frame* f = top;
  top = f->prev;
  longjmp(f->jb, code);
}

__attribute__((noinline)) void finally_(int d) { sink += d; }

__attribute__((noinline)) int level(int d) {
  struct try_frame f;
  f.prev = top;
  top = &f;
  const int code = setjmp(f.jb);
  if (code == 0) {
    if (d == 0) throw_(42);
    level(d - 1);
    top = f.prev;
    return 0;
  }
  finally_(d);
  if (d < 4) throw_(code);
  return code;
}

__attribute__((noinline)) void cleanup(void* d) { sink += (long)d; }

__attribute__((noinline)) void inner(int d) {
  pthread_cleanup_push(cleanup, (void*)(long)d);
  if (d == 0) pthread_exit(0);
  if (d > 0) inner(d - 1);  // (always: the compiler's sake)
  pthread_cleanup_pop(0);
}

__attribute__((noinline)) void* worker(void* arg) {
  (void)arg;
  inner(5);
  return 0;
}

__attribute__((noinline)) void leaf(void) { ++leaves; }
__attribute__((noinline)) void mid(void) { leaf(); }

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int n = atoi(argv[2]);
  if (argv[1][0] == 'r') {
    for (int i = 0; i < n; ++i) f(1);
  } else if (strcmp(argv[1], "chain") == 0) {
    for (int i = 0; i < n; ++i) landings += level(4) == 42;
  } else if (strcmp(argv[1], "cleanup") == 0) {
    for (int i = 0; i < n; ++i) {
      pthread_t t;
      if (pthread_create(&t, 0, worker, 0) != 0 || pthread_join(t, 0) != 0) return 1;
    }
  } else if (argv[1][0] == 'c') {
    cold_rec(n);
    for (int i = 0; i < 5; ++i) mid();
  } else {
    if (setjmp(env) == 0) rec(n);
    for (int i = 0; i < 5; ++i) mid();
  }
  printf("landings=%d leaves=%d\n", landings, leaves);
  return 0;
}
