// Dies of SIGSEGV after a little work: a store through a null pointer (read from a volatile,
// so the compiler cannot drop it).
static int* volatile target;

int main(void) {
  volatile int sum = 0;
  for (int i = 0; i < 10; ++i) sum += i;
  *target = sum;
  return 0;
}
