#include "ptkit/scoped_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "gtest/gtest.h"

namespace ptkit {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

// True when [addr, addr + len) is mapped (mincore fails with ENOMEM on unmapped pages).
bool IsMapped(void* addr, size_t len) {
  unsigned char vec[4];
  return mincore(addr, len, vec) == 0;
}

TEST(ScopedFdTest, ClosesOnDestructionAndOnReset) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    ScopedFd owner(fd);
    EXPECT_TRUE(owner.valid());
    EXPECT_EQ(owner.get(), fd);
  }
  EXPECT_FALSE(IsOpen(fd));

  int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ScopedFd owner(a);
  int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
  owner.reset(b);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_TRUE(IsOpen(b));
  owner.reset();
  EXPECT_FALSE(IsOpen(b));
  EXPECT_FALSE(owner.valid());
}

TEST(ScopedFdTest, MoveAssignmentClosesWhatItOverwrites) {
  int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ScopedFd x(a), y(b);
  x = std::move(y);
  EXPECT_FALSE(IsOpen(a));  // the overwritten descriptor is not leaked
  EXPECT_EQ(x.get(), b);
  EXPECT_FALSE(y.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty
  ScopedFd z(std::move(x));
  EXPECT_EQ(z.get(), b);
  EXPECT_TRUE(IsOpen(b));
}

TEST(ScopedFdTest, ReleaseGivesUpOwnershipAndCloseReportsErrors) {
  int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
  {
    ScopedFd owner(a);
    EXPECT_EQ(owner.release(), a);
  }
  EXPECT_TRUE(IsOpen(a));
  ScopedFd owner(a);
  EXPECT_EQ(owner.Close(), 0);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_EQ(owner.Close(), 0);  // nothing held
  ScopedFd bad(1 << 20);        // not an open descriptor
  EXPECT_EQ(bad.Close(), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(ScopedMmapTest, UnmapsOnDestructionAndOnMoveAssignment) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  {
    ScopedMmap m(p, 2 * page);
    EXPECT_TRUE(m.valid());
    EXPECT_EQ(m.size(), 2 * page);
    EXPECT_TRUE(IsMapped(p, 2 * page));
  }
  EXPECT_FALSE(IsMapped(p, page));

  void* q = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* r = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ScopedMmap mq(q, page), mr(r, page);
  mq = std::move(mr);
  EXPECT_FALSE(IsMapped(q, page));
  EXPECT_TRUE(IsMapped(r, page));
  EXPECT_EQ(mq.get(), r);
  EXPECT_FALSE(mr.valid());  // NOLINT(bugprone-use-after-move)
}

TEST(ScopedMmapTest, MapFailedIsHeldAsEmpty) {
  ScopedMmap m(MAP_FAILED, 4096);
  EXPECT_FALSE(m.valid());
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
}  // namespace ptkit
