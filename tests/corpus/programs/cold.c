/* Built at -O2, as distributions build programs: GCC moves the code that only runs on an
 * unlikely path (here, the call of a cold function) out of its function into a part of its own,
 * `walk.cold`, entered by a conditional jump and left by a jump back into the middle of `walk`.
 * `walk` is recursive, so its callers' frames are below when the cold part jumps back: that jump
 * goes on in the same frame (it is no longjmp to a caller). */
#include <stdio.h>
#include <stdlib.h>

static volatile long unusual;

__attribute__((noinline, cold)) void note_unusual(long depth) { unusual += depth; }

struct node {
  long value;
  struct node* left;
  struct node* right;
};

__attribute__((noinline)) long walk(const struct node* n, long depth) {
  if (n == NULL) return 0;
  long sum = n->value + walk(n->left, depth + 1) + walk(n->right, depth + 1);
  if (__builtin_expect(n->value % 7 == 0, 0)) note_unusual(depth);
  return sum;
}

__attribute__((noinline)) struct node* build(long lo, long hi) {
  if (lo > hi) return NULL;
  long mid = lo + (hi - lo) / 2;
  struct node* n = malloc(sizeof *n);
  n->value = mid;
  n->left = build(lo, mid - 1);
  n->right = build(mid + 1, hi);
  return n;
}

int main(int argc, char** argv) {
  long size = argc > 1 ? atol(argv[1]) : 40;
  struct node* root = build(1, size);
  long sum = walk(root, 0);
  printf("%ld %ld\n", sum, unusual);
  return 0;
}
