// The library dlopen_thread loads.
int ptkit_plugin(int x) { return 7 * x; }
