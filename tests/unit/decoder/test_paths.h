// Temporary file paths for the decoder tests. ctest runs the cases of one binary as parallel
// processes, so every path carries the process id.
#ifndef PTKIT_TESTS_UNIT_DECODER_TEST_PATHS_H_
#define PTKIT_TESTS_UNIT_DECODER_TEST_PATHS_H_

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace ptkit::decoder::testing {

inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/ptkit_decoder_" + std::to_string(getpid()) + "_" + name;
}

#ifdef PTKIT_DECODER_TEST_BINARY_DIR
// Where tests/unit/decoder/CMakeLists.txt builds the test programs, and the first of them.
inline const std::string kDir = PTKIT_DECODER_TEST_BINARY_DIR;
inline const std::string kTiny = kDir + "/tiny.elf";
#endif

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_TEST_PATHS_H_
