// Test helper: what a sink wrote to a temporary FILE*.
#ifndef PTKIT_TESTS_UNIT_DECODER_TEST_IO_H_
#define PTKIT_TESTS_UNIT_DECODER_TEST_IO_H_

#include <cstdio>
#include <string>

namespace ptkit::decoder::testing {

// Everything written to `f` so far (it is rewound first).
inline std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  return text;
}

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_TEST_IO_H_
