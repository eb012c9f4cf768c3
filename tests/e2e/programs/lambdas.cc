// SPDX-License-Identifier: Apache-2.0
//
// Lambdas GCC numbers in the order of the source (ptdecode_diff_cli_test; sweep 34b F3): built
// with -DMORE, an unrelated lambda comes first in main, and every lambda after it is numbered
// one more ({lambda(int)#2} is the cheap one here, #1 without MORE). The code of each is the
// same in both builds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <class F>
__attribute__((noinline)) long apply(const std::vector<int>& v, F f) {
  long s = 0;
  for (int x : v) s += f(x);
  return s;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200;
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) v[static_cast<size_t>(i)] = (i * 7919) % 1009;
#ifdef MORE
  const long pre = apply(v, [](int x) { return x & 1; });
#else
  const long pre = 0;
#endif
  const long a = apply(v, [](int x) { return x % 3; });  // cheap
  const long b = apply(v, [](int x) {                    // dear
    long s = 0;
    for (int i = 0; i < 20; i++) s += (x * i) % 11;
    return static_cast<int>(s);
  });
  std::sort(v.begin(), v.end(), [](int p, int q) { return p % 100 < q % 100; });
  std::printf("%ld %ld %ld %d\n", pre, a, b, v[0]);
  return 0;
}
