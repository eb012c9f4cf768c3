// The per-line writers of decoder/output_format.h against fmt, the reference they replace.
#include "decoder/output_format.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ptkit::decoder {
namespace {

std::string Decimal(uint64_t v, size_t width) {
  char text[64];
  return std::string(text, WriteDecimal(text, v, width));
}

// Every digit count's edges (9, 10, 99, 100, ... 2^64 - 1) and values between, at the widths
// the outputs use (none, and calls' 10): as fmt's "{:>N}" writes them.
TEST(WriteDecimalTest, WritesWhatFmtWrites) {
  std::vector<uint64_t> values = {0, 1, 7, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63};
  for (uint64_t power = 1; power <= UINT64_MAX / 10; power *= 10) {
    for (uint64_t v : {power * 10 - 1, power * 10, power * 10 + 1, power * 10 / 3, power * 7}) {
      values.push_back(v);
    }
  }
  for (int bit = 0; bit < 64; ++bit) {
    values.push_back(uint64_t{1} << bit);
    values.push_back((uint64_t{1} << bit) - 1);
  }
  for (uint64_t v : values) {
    for (size_t width : {0, 1, 10, 25}) {
      EXPECT_EQ(Decimal(v, width), fmt::format("{:>{}}", v, width)) << v << " width " << width;
    }
  }
}

}  // namespace
}  // namespace ptkit::decoder
