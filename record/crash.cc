#include "record/crash.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "ptkit/numbers.h"
#include "record/perf_event.h"
#include "record/text_util.h"

namespace ptkit::record {

bool KillsByDefault(int sig) {
  switch (sig) {
    case SIGCHLD:
    case SIGCONT:
    case SIGURG:
    case SIGWINCH:
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
      return false;
    default:
      return sig > 0 && sig < 65;
  }
}

absl::StatusOr<uint64_t> ParseStatusSignalMask(std::string_view status, std::string_view key) {
  for (std::string_view line : Split(status, '\n')) {
    if (!line.starts_with(key)) continue;
    std::string_view value = line.substr(key.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    uint64_t mask = 0;
    if (!ParseUnsigned(value, &mask, 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", std::string(key), " value '", std::string(value), "'"));
    }
    return mask;
  }
  return absl::NotFoundError(absl::StrCat("no ", std::string(key), " line"));
}

bool SignalIgnored(uint32_t pid, int sig) {
  absl::StatusOr<std::string> status = ReadSystemFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return false;
  absl::StatusOr<uint64_t> mask = ParseStatusSignalMask(*status, "SigIgn:");
  return mask.ok() && ((*mask >> (sig - 1)) & 1);
}

}  // namespace ptkit::record
