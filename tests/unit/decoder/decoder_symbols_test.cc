// Function symbols of ProgramImage (decoder/image.h).
// Separate debug files (FindDebugFile): a stripped program's function symbols
// and file:line come from its debug file, found by build-id under the sysroot's
// /usr/lib/debug/.build-id or by .gnu_debuglink, as gdb and perf find them; a debug file of
// another build is not used. tiny_split.elf is tiny_full.elf stripped, tiny_split.debug its
// debug part (tests/unit/decoder/CMakeLists.txt).
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decoder/image.h"
#include "decoder/srcline.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

namespace fs = std::filesystem;
using ::ptkit::decoder::testing::TempPath;
using ::ptkit::testing::IsOk;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const std::string kDir = PTKIT_DECODER_TEST_BINARY_DIR;

using Named = std::vector<std::pair<uint64_t, std::string>>;

Named NamesOf(const ProgramImage& image) {
  Named out;
  for (const Symbol& s : image.symbols()) out.emplace_back(s.begin, s.name);
  return out;
}

std::unique_ptr<ProgramImage> ElfImage(const std::string& path, const std::string& sysroot) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, IsOk());
  if (!image.ok()) return nullptr;
  (*image)->set_sysroot(sysroot);
  EXPECT_THAT((*image)->AddElf({path}), IsOk());
  return std::move(*image);
}

// A fresh directory for one test (ctest runs cases as parallel processes).
std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class DebugFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    full_ = ElfImage(kDir + "/tiny_full.elf", "");
    ASSERT_NE(full_, nullptr);
    expected_ = NamesOf(*full_);
    ASSERT_THAT(expected_, SizeIs(::testing::Ge(5u)));  // _start, work, fib, collatz, leaf
    // Alone (its debug file is next to it in the build directory): no symbols.
    const std::string alone = FreshDir("alone");
    fs::copy_file(kDir + "/tiny_split.elf", alone + "/prog");
    auto bare = ElfImage(alone + "/prog", "/nonexistent");
    fs::remove_all(alone);
    ASSERT_NE(bare, nullptr);
    ASSERT_THAT(NamesOf(*bare), IsEmpty()) << "tiny_split.elf is not stripped";
  }
  std::unique_ptr<ProgramImage> full_;
  Named expected_;
};

TEST_F(DebugFileTest, ByDebuglinkInTheDotDebugDirectoryNextToTheFile) {
  const std::string dir = FreshDir("debuglink");
  fs::copy_file(kDir + "/tiny_split.elf", dir + "/prog");
  fs::create_directories(dir + "/.debug");
  fs::copy_file(kDir + "/tiny_split.debug", dir + "/.debug/tiny_split.debug");
  auto image = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(NamesOf(*image), expected_);
  fs::remove_all(dir);
}

TEST_F(DebugFileTest, ByBuildIdUnderTheSysrootForAFileMapping) {
  const std::string root = FreshDir("buildid");
  fs::create_directories(root + "/bin");
  fs::copy_file(kDir + "/tiny_split.elf", root + "/bin/prog");
  auto id = ReadBuildId(kDir + "/tiny_full.elf");
  ASSERT_THAT(id, IsOk());
  ASSERT_THAT(*id, SizeIs(20u));
  std::string hex;
  for (uint8_t b : *id) hex += fmt::format("{:02x}", b);
  const std::string debug_dir = root + "/usr/lib/debug/.build-id/" + hex.substr(0, 2);
  fs::create_directories(debug_dir);
  fs::copy_file(kDir + "/tiny_split.debug", debug_dir + "/" + hex.substr(2) + ".debug");

  // As the kernel maps it (MMAP2): the whole file at its first segment's address.
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->set_sysroot(root);
  ASSERT_THAT(
      (*image)->AddFileMapping(root + "/bin/prog", 0x900000, fs::file_size(root + "/bin/prog"), 0),
      IsOk());
  EXPECT_EQ(NamesOf(**image), expected_);

  // --srcline reads the debug file's DWARF: the same answers as for the unstripped build.
  SourceLines split_lines(nullptr), full_lines(nullptr);
  size_t answered = 0;
  for (const auto& [address, name] : expected_) {
    const std::string* want = full_lines.Lookup(*full_, address);
    const std::string* got = split_lines.Lookup(**image, address);
    ASSERT_NE(want, nullptr) << name;
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(*got, *want) << name;
    ++answered;
  }
  EXPECT_EQ(answered, expected_.size());
  EXPECT_THAT(split_lines.files_without_lines(), IsEmpty());
  fs::remove_all(root);
}

TEST_F(DebugFileTest, ADebugFileOfAnotherBuildIsNotUsed) {
  const std::string dir = FreshDir("otherbuild");
  fs::copy_file(kDir + "/tiny_split.elf", dir + "/prog");
  fs::copy_file(kDir + "/tiny_other.debug", dir + "/tiny_split.debug");  // the debuglink name
  auto image = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(image, nullptr);
  EXPECT_THAT(NamesOf(*image), IsEmpty());
  SourceLines lines(nullptr);
  EXPECT_EQ(lines.Lookup(*image, expected_.front().first), nullptr);
  EXPECT_THAT(lines.files_without_lines(), SizeIs(1u));
  fs::remove_all(dir);
}

// An address with several names gets the one perf shows: global before weak before local,
// then the fewest leading underscores (.symtab lists locals first, so the first name would be
// __GI_work).
TEST(SymbolsTest, AnAliasIsNamedAsPerfNamesIt) {
  auto image = ElfImage(kDir + "/aliases.elf", "/nonexistent");
  ASSERT_NE(image, nullptr);
  std::vector<std::string> names;
  for (const Symbol& s : image->symbols()) names.push_back(s.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("work", "_start"));
}

}  // namespace
}  // namespace ptkit::decoder
