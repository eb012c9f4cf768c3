// A whole file in memory, for tests: read in blocks, where a std::istreambuf_iterator copies
// byte by byte (15 s of one sanitizer test to read its own 41 MB executable, measured).
#ifndef PTKIT_TESTS_SUPPORT_READ_FILE_H_
#define PTKIT_TESTS_SUPPORT_READ_FILE_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ptkit::testing {

// The bytes of `path` as a Container (std::string or a vector of a byte type), read to its end
// (a /proc or /sys file has no size); empty when it cannot be opened.
template <typename Container = std::vector<uint8_t>>
Container ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Container bytes;
  std::vector<char> block(size_t{1} << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    bytes.insert(bytes.end(), block.begin(), block.begin() + in.gcount());
  }
  return bytes;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_READ_FILE_H_
