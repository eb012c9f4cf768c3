#include "ptkit/numbers.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ptkit {

absl::StatusOr<uint64_t> ParseUint(std::string_view text, uint64_t max, std::string_view what) {
  uint64_t value = 0;
  if (!ParseUnsigned(text, &value, 0) || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad ", std::string(what), " '", std::string(text), "': expected a number up to ", max));
  }
  return value;
}

}  // namespace ptkit
