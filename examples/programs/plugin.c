// A shared library that dlopen.c loads at run time.
int plugin_work(int n) {
  int acc = 0;
  for (int i = 0; i < n; ++i) acc += (i * i) % 7;
  return acc;
}
