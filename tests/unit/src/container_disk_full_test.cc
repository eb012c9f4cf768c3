// ENOSPC on a real, small tmpfs (needs root to mount; skips with the reason otherwise).
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include "container_test_util.h"
#include "ptkit/errno_text.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

TEST(ContainerWriterDiskFullTest, NoSpaceSurfacesAsAnErrorAndLeavesAReadableFile) {
  testing::TempDir dir;
  if (::mount("ptkit-test", dir.path().c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a 256 KiB tmpfs on " << dir.path() << ": "
                 << ::ptkit::ErrnoText(errno) << " (needs root / CAP_SYS_ADMIN)";
  }
  testing::FillUntilError(
      dir.File("full.pt"), [] {}, "No space left on device");
  ::umount2(dir.path().c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace ptkit
