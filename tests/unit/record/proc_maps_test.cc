#include "record/proc_maps.h"

#include <sys/auxv.h>
#include <sys/mman.h>

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
  EXPECT_EQ(maps[2].prot, PROT_READ | PROT_WRITE);
  EXPECT_EQ(maps[2].path, "");
  EXPECT_EQ(maps[3].offset, 0x1a000u);
  EXPECT_EQ(maps[3].path, "/tmp/a b (deleted)");
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

}  // namespace
}  // namespace ptkit::record
