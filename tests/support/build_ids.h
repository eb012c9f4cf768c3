// Build-ids in tests: the oracle's (readelf -n) and ptkit's bytes written as readelf writes them.
#ifndef PTKIT_TESTS_SUPPORT_BUILD_IDS_H_
#define PTKIT_TESTS_SUPPORT_BUILD_IDS_H_

#include <cstdint>
#include <span>
#include <sstream>
#include <string>

#include "run_command.h"

namespace ptkit::testing {

// The build-id readelf -n prints for `file` ("    Build ID: 0123abcd..."), "" when none.
inline std::string ReadelfBuildId(const std::string& file) {
  std::istringstream notes(RunCommand({"/usr/bin/env", "readelf", "-n", file}).out);
  for (std::string line; std::getline(notes, line);) {
    if (const size_t at = line.find("Build ID: "); at != std::string::npos) {
      return line.substr(at + 10);
    }
  }
  return "";
}

// `bytes` in lowercase hex, as readelf prints a build-id.
inline std::string HexBuildId(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_BUILD_IDS_H_
