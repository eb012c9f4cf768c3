#include "ptkit/scoped_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ptkit {

void HoldClosedStdioOpen() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) continue;
    // The lowest free number: this one (those below it are open). Opened the other way than
    // the stream is used, so that a read of stdin or a write to stdout or stderr still fails
    // (EBADF) as on a closed descriptor: `ptdecode report T >&-` is an error, not silence.
    const int held = ::open("/dev/null", (fd == STDIN_FILENO ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    if (held >= 0 && held != fd) ::close(held);  // (not expected: a number below was free)
  }
}

void ScopedFd::reset(int fd) {
  // close(2) is not retried on EINTR: on Linux the descriptor is released whatever close
  // returns, so a retry could close a descriptor another thread just opened.
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

int ScopedFd::Close() {
  if (fd_ < 0) return 0;
  return ::close(std::exchange(fd_, -1));
}

ScopedMmap::ScopedMmap(void* addr, size_t length) {
  if (addr != MAP_FAILED && addr != nullptr) {
    addr_ = addr;
    length_ = length;
  }
}

void ScopedMmap::reset() {
  if (addr_ != nullptr) ::munmap(addr_, length_);
  addr_ = nullptr;
  length_ = 0;
}

}  // namespace ptkit
