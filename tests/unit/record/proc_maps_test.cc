#include "record/proc_maps.h"

#include <sys/auxv.h>
#include <sys/mman.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptkit::record {
namespace {

TEST(ParseProcMapsTest, ReadsEveryFieldOfTheKernelsLines) {
  // Lines as Linux 6.1 prints them: padded paths, anonymous memory, a deleted file, a path
  // with a space, a pseudo-file.
  const std::vector<ProcMapping> maps = ParseProcMaps(
      "555555554000-555555556000 r--p 00000000 fe:01 1835034                    /usr/bin/true\n"
      "555555556000-55555555a000 r-xp 00002000 fe:01 1835034                    /usr/bin/true\n"
      "7ffff7d8e000-7ffff7d91000 rw-p 00000000 00:00 0 \n"
      "7ffff7fc1000-7ffff7fc5000 rw-s 0001a000 00:0f 42                         /tmp/a b "
      "(deleted)\n"
      "7ffff7fc5000-7ffff7fc7000 r-xp 00000000 00:00 0                          [vdso]\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]");
  ASSERT_EQ(maps.size(), 6u);
  EXPECT_EQ(maps[0].start, 0x555555554000u);
  EXPECT_EQ(maps[0].end, 0x555555556000u);
  EXPECT_EQ(maps[0].prot, PROT_READ);
  EXPECT_EQ(maps[0].offset, 0u);
  EXPECT_EQ(maps[0].path, "/usr/bin/true");
  EXPECT_EQ(maps[1].prot, PROT_READ | PROT_EXEC);
  EXPECT_EQ(maps[1].offset, 0x2000u);
  EXPECT_EQ(maps[1].dev_major, 0xfeu);
  EXPECT_EQ(maps[1].dev_minor, 0x01u);
  EXPECT_EQ(maps[1].inode, 1835034u);
  EXPECT_FALSE(maps[1].shared);
  EXPECT_EQ(maps[2].prot, PROT_READ | PROT_WRITE);
  EXPECT_EQ(maps[2].path, "");
  EXPECT_EQ(maps[3].offset, 0x1a000u);
  EXPECT_EQ(maps[3].path, "/tmp/a b (deleted)");
  EXPECT_TRUE(maps[3].shared);
  EXPECT_EQ(maps[3].dev_minor, 0x0fu);
  EXPECT_EQ(maps[3].inode, 42u);
  EXPECT_EQ(maps[4].path, "[vdso]");
  EXPECT_EQ(maps[5].start, 0xffffffffff600000u);
  EXPECT_EQ(maps[5].prot, PROT_EXEC);
  EXPECT_EQ(maps[5].path, "[vsyscall]");
}

TEST(ParseProcMapsTest, SkipsLinesThatAreNotMappings) {
  const std::vector<ProcMapping> maps = ParseProcMaps(
      "\n"
      "garbage\n"
      "1000-zz00 r-xp 00000000 00:00 0 /x\n"
      "1000-2000 r-xp 00000000 00:00\n"  // no inode
      "3000-4000 r-xp 00001000 08:01 7 /ok\n");
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].start, 0x3000u);
  EXPECT_EQ(maps[0].path, "/ok");
}

TEST(ReadProcMapsTest, FindsThisProcesssVdso) {
  const uintptr_t vdso = getauxval(AT_SYSINFO_EHDR);
  if (vdso == 0) GTEST_SKIP() << "no vdso";
  absl::StatusOr<std::vector<ProcMapping>> maps = ReadProcMaps("self");
  ASSERT_TRUE(maps.ok()) << maps.status();
  bool found = false;
  for (const ProcMapping& m : *maps) found |= m.path == "[vdso]" && m.start == vdso;
  EXPECT_TRUE(found);
  EXPECT_FALSE(ReadProcMaps("999999999").ok());
}

// --filter's file ranges at run time (the step backend and the qemu plugin): the kernel's
// perf_addr_filter_vma_adjust() on a mapping of file bytes [0x2000, 0x6000) at 0x555555556000.
TEST(FileRangeInMappingTest, ClipsAFileRangeToTheMapping) {
  ProcMapping m;
  m.start = 0x555555556000;
  m.end = 0x55555555a000;
  m.offset = 0x2000;
  using Range = std::pair<uint64_t, uint64_t>;
  // Inside: shifted by start - offset.
  EXPECT_EQ(FileRangeInMapping(m, 0x2100, 0x40), Range(0x555555556100, 0x555555556140));
  // Begins before the mapping: from its start.
  EXPECT_EQ(FileRangeInMapping(m, 0x1000, 0x1100), Range(0x555555556000, 0x555555556100));
  // Ends after it: to its end.
  EXPECT_EQ(FileRangeInMapping(m, 0x5f00, 0x1000), Range(0x555555559f00, 0x55555555a000));
  // Outside, on either side and touching either end.
  EXPECT_EQ(FileRangeInMapping(m, 0x1000, 0x1000), std::nullopt);
  EXPECT_EQ(FileRangeInMapping(m, 0x6000, 0x10), std::nullopt);
  EXPECT_EQ(FileRangeInMapping(m, 0x0, 0x100), std::nullopt);
}

}  // namespace
}  // namespace ptkit::record
