// ScopedFd and ScopedMmap: move-only owners of what the kernel hands out (STYLE.md §3). Every
// class that holds a file descriptor or a mapping holds one of these, so none writes its own
// destructor, move constructor or move assignment.
#ifndef PTKIT_SCOPED_FD_H_
#define PTKIT_SCOPED_FD_H_

#include <cstddef>
#include <utility>

namespace ptkit {

// For a main(): each of descriptors 0-2 that is closed (`cmd >&- 2>&-`, a daemon's or cron's
// context) is held open on /dev/null, close-on-exec, for as long as the process runs, the other
// way than it is used (writes to 1 and 2, reads of 0 fail with EBADF as before). Else the
// process's next open takes its number, and its own messages (stderr) or output (stdout) go
// into that file: a container being written (sweep 38b H1: 47 KB of trace lost to ptrecord's
// notices), a ring that qemu passes on as the command's stderr. Close-on-exec, so that a command
// this process runs finds them closed as it would natively.
void HoldClosedStdioOpen();

// Owns a file descriptor; closes it on destruction and when another is assigned over it.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller closes the returned descriptor.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and takes `fd`. A close error is ignored: callers
  // that must see it (a file being written) call Close().
  void reset(int fd = -1);
  // Closes the descriptor now; returns close(2)'s result (0, or -1 with errno set). A
  // ScopedFd that holds nothing returns 0.
  int Close();

 private:
  int fd_ = -1;
};

// Owns one mmap(2)ed range; unmaps it on destruction and when another is assigned over it.
class ScopedMmap {
 public:
  ScopedMmap() = default;
  // Takes the range mmap returned. MAP_FAILED or nullptr is held as empty.
  ScopedMmap(void* addr, size_t length);
  ScopedMmap(ScopedMmap&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), length_(std::exchange(other.length_, 0)) {}
  ScopedMmap& operator=(ScopedMmap&& other) noexcept {
    if (this != &other) {
      reset();
      addr_ = std::exchange(other.addr_, nullptr);
      length_ = std::exchange(other.length_, 0);
    }
    return *this;
  }
  ScopedMmap(const ScopedMmap&) = delete;
  ScopedMmap& operator=(const ScopedMmap&) = delete;
  ~ScopedMmap() { reset(); }

  void* get() const { return addr_; }
  size_t size() const { return length_; }
  bool valid() const { return addr_ != nullptr; }
  // Unmaps the range held (if any); holds nothing afterwards.
  void reset();

 private:
  void* addr_ = nullptr;
  size_t length_ = 0;
};

}  // namespace ptkit

#endif  // PTKIT_SCOPED_FD_H_
