// The text of an errno value, for messages that are not an absl::Status (ptkit/status.h's
// ErrnoStatus makes one that is).
#ifndef PTKIT_ERRNO_TEXT_H_
#define PTKIT_ERRNO_TEXT_H_

#include <string.h>  // strerror_r (GNU's, returning the text)

#include <string>

namespace ptkit {

// What std::strerror(err) says, without its static buffer: glibc documents strerror as
// MT-Unsafe (clang-tidy's concurrency-mt-unsafe), and ptkit runs threads.
inline std::string ErrnoText(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof(buf));
}

}  // namespace ptkit

#endif  // PTKIT_ERRNO_TEXT_H_
