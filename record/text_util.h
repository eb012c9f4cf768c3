// Small string helpers over std::string_view for record/. Debian 12's Abseil is built with its
// own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), so absl::StripAsciiWhitespace and
// absl::StrSplit do not accept std::string_view; these do. Numbers: ptkit/numbers.h.
#ifndef PTKIT_RECORD_TEXT_UTIL_H_
#define PTKIT_RECORD_TEXT_UTIL_H_

#include <string_view>
#include <vector>

namespace ptkit::record {

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

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_TEXT_UTIL_H_
