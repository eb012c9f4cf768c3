// Number parsing shared by every ptkit library and tool: one parser, one syntax.
#ifndef PTKIT_NUMBERS_H_
#define PTKIT_NUMBERS_H_

#include <charconv>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"

namespace ptkit {

// Parses all of `text` as an unsigned number of type T. `base` 10 or 16 reads digits of that
// base only (no prefix); base 0 reads decimal, or hexadecimal after "0x"/"0X", as perf reads
// numbers (never octal: "010" is ten). False on empty text, any other character (a sign, a
// space, a suffix) or a value T cannot hold; `*out` is unspecified then.
template <typename T>
bool ParseUnsigned(std::string_view text, T* out, int base = 10) {
  static_assert(std::is_unsigned_v<T>);
  if (base == 0) {
    base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
      text.remove_prefix(2);
      base = 16;
    }
  }
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// ParseUnsigned(text, base 0) for a value no larger than `max`, e.g. a command-line option.
// Errors: kInvalidArgument "bad WHAT 'TEXT': expected a number up to MAX".
absl::StatusOr<uint64_t> ParseUint(std::string_view text, uint64_t max, std::string_view what);

}  // namespace ptkit

#endif  // PTKIT_NUMBERS_H_
