// A small tmpfs mounted on a new directory for a test's life (root), to fill a disk on purpose.
#ifndef PTKIT_TESTS_SUPPORT_SCOPED_TMPFS_H_
#define PTKIT_TESTS_SUPPORT_SCOPED_TMPFS_H_

#include <sys/mount.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "ptkit/errno_text.h"

namespace ptkit::testing {

// Mounts a tmpfs of `size` (mount's size= option: "size=64k") on `dir`, made here; skipped()
// says why not (empty when mounted). Unmounted (lazily) at the end.
class ScopedTmpfs {
 public:
  ScopedTmpfs(const std::string& dir, const char* size) : dir_(dir) {
    std::filesystem::create_directory(dir);
    if (::mount("ptkit-test", dir.c_str(), "tmpfs", 0, size) != 0) {
      why_ = std::string("cannot mount a tmpfs (") + size + "): " + ::ptkit::ErrnoText(errno) +
             " (needs root / CAP_SYS_ADMIN)";
    }
  }
  ~ScopedTmpfs() {
    if (why_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  ScopedTmpfs(const ScopedTmpfs&) = delete;
  ScopedTmpfs& operator=(const ScopedTmpfs&) = delete;
  const std::string& skipped() const { return why_; }

 private:
  std::string dir_, why_;
};

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_SCOPED_TMPFS_H_
