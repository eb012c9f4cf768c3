// Status helpers shared by every ptkit library.
//
// The Abseil that Debian 12 ships has no status_macros.h, so ptkit keeps this one small pair.
#ifndef PTKIT_STATUS_H_
#define PTKIT_STATUS_H_

#include <sys/resource.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define PTKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define PTKIT_STATUS_CONCAT_(a, b) PTKIT_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function when `expr` (an absl::Status) is not OK.
#define PTKIT_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status ptkit_status_ = (expr);         \
    if (!ptkit_status_.ok()) return ptkit_status_; \
  } while (0)

// `PTKIT_ASSIGN_OR_RETURN(auto x, MakeX());` assigns the value of an absl::StatusOr or returns
// its error from the current function.
#define PTKIT_ASSIGN_OR_RETURN(lhs, expr) \
  PTKIT_ASSIGN_OR_RETURN_IMPL_(PTKIT_STATUS_CONCAT_(ptkit_statusor_, __LINE__), lhs, expr)
// `lhs` may be a declaration ("auto x"), so it cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define PTKIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

namespace ptkit {

// Note: Debian 12's Abseil has its own absl::string_view, distinct from std::string_view:
// absl::StrCat and absl::Status do not take a std::string_view (wrap it in std::string, or use
// fmt::format).
//
// absl::ErrnoToStatus(err, absl::StrCat(what...)), `what` naming the call and its object:
// ErrnoStatus(errno, "mmap aux area (cpu ", cpu, ")"). The errno is taken as the first
// argument, before the message is built (building it may allocate and change errno); pass a
// saved copy when other calls come between the failure and this one.
// EMFILE's also says the limit (sweep 31c F8: "Too many open files" under a low ulimit -n
// did not say which limit).
template <typename... What>
absl::Status ErrnoStatus(int err, const What&... what) {
  absl::Status status = absl::ErrnoToStatus(err, absl::StrCat(what...));
  if (rlimit limit{}; err == EMFILE && getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    status = absl::Status(status.code(),
                          absl::StrCat(status.message(), " (the open-file limit, ulimit -n, is ",
                                       limit.rlim_cur, "; raise it)"));
  }
  return status;
}

}  // namespace ptkit

#endif  // PTKIT_STATUS_H_
