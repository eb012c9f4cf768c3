// Small string helpers over std::string_view for record/. Debian 12's Abseil is built with its
// own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), so absl::StrCat/StrSplit do not
// accept std::string_view; these do.
#ifndef PTKIT_RECORD_TEXT_UTIL_H_
#define PTKIT_RECORD_TEXT_UTIL_H_

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace ptkit::record {

namespace text_internal {
template <typename T>
void AppendOne(std::string& out, const T& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, char>) {
    out += fmt::to_string(v);
  } else if constexpr (std::is_same_v<T, char>) {
    out += v;
  } else if constexpr (std::is_same_v<T, absl::string_view>) {
    out.append(v.data(), v.size());
  } else {
    out += std::string_view(v);
  }
}
}  // namespace text_internal

// Concatenates strings, std/absl string_views, C strings, chars and numbers (decimal).
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (text_internal::AppendOne(out, args), ...);
  return out;
}

// Without leading and trailing ASCII whitespace.
inline std::string_view Strip(std::string_view s) {
  const char* ws = " \t\r\n\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Splits on `sep`; keeps empty pieces ("a,,b" -> "a", "", "b"; "" -> "").
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// Parses all of `s` as an unsigned number in `base`; false on junk, sign or overflow.
template <typename T>
bool ParseUnsigned(std::string_view s, T* out, int base = 10) {
  static_assert(std::is_unsigned_v<T>);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_TEXT_UTIL_H_
