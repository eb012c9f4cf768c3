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

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_TEST_PATHS_H_
