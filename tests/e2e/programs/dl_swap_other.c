// A library of another shape than examples' plugin.c with the same function: dl_swap.c loads it
// where that one was.
static int step(int x) { return (x * 5 + 1) % 11; }
int plugin_work(int n) {
  int acc = 3;
  for (int i = 0; i < n; ++i) {
    acc = step(acc) + i;
    if (acc & 1) acc -= 2;
  }
  return acc;
}
