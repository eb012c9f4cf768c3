/* Sorting and a tokenizer state machine: a walk target for the trace synthesizer
 * (record/swpt). It has a switch compiled to a jump table (classify/tokenize), recursion
 * (quick_sort, merge_sort), function-pointer calls (the comparators) and tail calls
 * (sort_with -> quick_sort, checksum). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cmp_fn)(long, long);

__attribute__((noinline)) int cmp_up(long a, long b) { return (a > b) - (a < b); }
__attribute__((noinline)) int cmp_down(long a, long b) { return (a < b) - (a > b); }
__attribute__((noinline)) int cmp_abs(long a, long b) { return cmp_up(labs(a), labs(b)); }

static cmp_fn comparators[] = {cmp_up, cmp_down, cmp_abs};

__attribute__((noinline)) void quick_sort(long* v, int n, cmp_fn cmp) {
  while (n > 1) {
    long pivot = v[n / 2];
    int i = 0, j = n - 1;
    while (i <= j) {
      while (cmp(v[i], pivot) < 0) ++i;
      while (cmp(v[j], pivot) > 0) --j;
      if (i <= j) { long t = v[i]; v[i] = v[j]; v[j] = t; ++i; --j; }
    }
    if (j + 1 < n - i) { quick_sort(v, j + 1, cmp); v += i; n -= i; }
    else { quick_sort(v + i, n - i, cmp); n = j + 1; }
  }
}

__attribute__((noinline)) void merge_sort(long* v, long* tmp, int n, cmp_fn cmp) {
  if (n < 2) return;
  int h = n / 2;
  merge_sort(v, tmp, h, cmp);
  merge_sort(v + h, tmp, n - h, cmp);
  int i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = cmp(v[i], v[j]) <= 0 ? v[i++] : v[j++];
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, sizeof(long) * n);
}

/* Tail call. */
__attribute__((noinline)) void sort_with(long* v, int n, int which) {
  quick_sort(v, n, comparators[which % 3]);
}

enum token { T_NUM, T_WORD, T_SPACE, T_PUNCT, T_OP, T_PAREN, T_QUOTE, T_OTHER };

__attribute__((noinline)) int classify(int c, int state) {
  switch (c) {
    case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return T_NUM;
    case ' ': case '\t': case '\n': return T_SPACE;
    case '.': case ',': case ';': case ':': return T_PUNCT;
    case '+': case '-': case '*': case '/': case '=': return T_OP;
    case '(': case ')': return T_PAREN;
    case '"': case '\'': return state ? T_OTHER : T_QUOTE;
    default: return (c | 32) >= 'a' && (c | 32) <= 'z' ? T_WORD : T_OTHER;
  }
}

__attribute__((noinline)) long tokenize(const char* s) {
  long score = 0;
  int state = 0;
  for (; *s; ++s) {
    switch (classify(*s, state)) {
      case T_NUM: score = score * 3 + (*s - '0'); break;
      case T_WORD: score += 7; break;
      case T_SPACE: score ^= 1; break;
      case T_PUNCT: score -= 2; break;
      case T_OP: score *= 2; break;
      case T_PAREN: score += state++; break;
      case T_QUOTE: state = !state; break;
      default: score--; break;
    }
  }
  return score;
}

/* Tail call with an accumulator (recursion the compiler may turn into a loop). */
__attribute__((noinline)) long checksum(const long* v, int n, long acc) {
  if (n == 0) return acc;
  return checksum(v + 1, n - 1, acc * 31 + v[0]);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 32;
  if (n > 1024) n = 1024;
  long v[1024], tmp[1024];
  for (int i = 0; i < n; ++i) v[i] = (i * 7919L) % 1009 - 500;
  sort_with(v, n, n);
  merge_sort(v, tmp, n, comparators[(n + 1) % 3]);
  long t = tokenize("let x = (12 + 34) * 'y', z; 7.5");
  printf("%ld %ld\n", checksum(v, n, 0), t);
  return 0;
}
