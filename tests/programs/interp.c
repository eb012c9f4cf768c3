/* A tiny stack-machine interpreter: a walk target for the trace synthesizer (record/swpt).
 * It has a switch compiled to a jump table (the opcode dispatch), recursion (eval_tree, fib),
 * function-pointer calls (binops[]) and tail calls (run_op -> apply, finish). */
#include <stdio.h>
#include <stdlib.h>

enum { OP_PUSH, OP_ADD, OP_SUB, OP_MUL, OP_DUP, OP_SWAP, OP_NEG, OP_JNZ, OP_CALL, OP_FIB, OP_HALT };

typedef long (*binop_fn)(long, long);

__attribute__((noinline)) long op_add(long a, long b) { return a + b; }
__attribute__((noinline)) long op_sub(long a, long b) { return a - b; }
__attribute__((noinline)) long op_mul(long a, long b) { return a * b; }
__attribute__((noinline)) long op_max(long a, long b) { return a > b ? a : b; }

static binop_fn binops[] = {op_add, op_sub, op_mul, op_max};
static volatile int sink;

__attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

struct node {
  int kind;
  long value;
  struct node* left;
  struct node* right;
};

__attribute__((noinline)) long eval_tree(const struct node* n) {
  if (!n) return 0;
  if (n->kind < 0) return n->value;
  long l = eval_tree(n->left);
  long r = eval_tree(n->right);
  return binops[n->kind & 3](l, r);
}

/* Tail call through a function pointer. */
__attribute__((noinline)) long apply(int which, long a, long b) { return binops[which & 3](a, b); }

/* Tail call to a direct function. */
__attribute__((noinline)) long finish(long acc, int steps) {
  sink = steps;
  return acc ^ steps;
}

__attribute__((noinline)) long run(const int* code, int len, long seed) {
  long stack[64];
  int sp = 0, pc = 0, steps = 0;
  stack[sp++] = seed;
  while (pc < len && steps < 1000) {
    ++steps;
    int op = code[pc++];
    switch (op) {
      case OP_PUSH:
        if (sp < 63) stack[sp++] = code[pc];
        ++pc;
        break;
      case OP_ADD:
        if (sp > 1) { stack[sp - 2] = apply(0, stack[sp - 2], stack[sp - 1]); --sp; }
        break;
      case OP_SUB:
        if (sp > 1) { stack[sp - 2] = apply(1, stack[sp - 2], stack[sp - 1]); --sp; }
        break;
      case OP_MUL:
        if (sp > 1) { stack[sp - 2] = op_mul(stack[sp - 2], stack[sp - 1]); --sp; }
        break;
      case OP_DUP:
        if (sp < 63) { stack[sp] = stack[sp - 1]; ++sp; }
        break;
      case OP_SWAP:
        if (sp > 1) { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; }
        break;
      case OP_NEG:
        stack[sp - 1] = -stack[sp - 1];
        break;
      case OP_JNZ:
        if (stack[sp - 1] != 0 && code[pc] < pc) pc = code[pc]; else ++pc;
        break;
      case OP_CALL:
        stack[sp - 1] = binops[code[pc++] & 3](stack[sp - 1], 3);
        break;
      case OP_FIB:
        stack[sp - 1] = fib(stack[sp - 1] & 15);
        break;
      case OP_HALT:
        return finish(stack[sp - 1], steps);
      default:
        sink = op;
        break;
    }
  }
  return finish(stack[sp - 1], steps);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 5;
  static const int program[] = {OP_PUSH, 7,  OP_DUP, OP_MUL, OP_PUSH, 3, OP_SUB, OP_FIB,
                                OP_CALL, 2,  OP_NEG, OP_SWAP, OP_PUSH, 1, OP_ADD, OP_HALT};
  struct node leaves[4] = {{-1, 2, 0, 0}, {-1, 3, 0, 0}, {-1, 5, 0, 0}, {-1, 7, 0, 0}};
  struct node inner[3] = {{0, 0, &leaves[0], &leaves[1]}, {2, 0, &leaves[2], &leaves[3]},
                          {3, 0, &inner[0], &inner[1]}};
  long total = 0;
  for (int i = 0; i < n; ++i) {
    total += run(program, (int)(sizeof(program) / sizeof(program[0])), i);
    total += eval_tree(&inner[2]);
  }
  printf("%ld\n", total);
  return 0;
}
