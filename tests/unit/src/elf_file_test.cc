#include "ptkit/elf_file.h"

#include <elf.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// The build-id readelf prints for `path` ("    Build ID: 1a2b..."), the oracle.
std::string ReadelfBuildId(const std::string& path) {
  ::ptkit::testing::CommandResult r =
      ::ptkit::testing::RunCommand({"/usr/bin/readelf", "-n", path});
  const size_t at = r.out.find("Build ID: ");
  if (r.exit_code != 0 || at == std::string::npos) return "";
  const size_t begin = at + 10;
  return r.out.substr(begin, r.out.find('\n', begin) - begin);
}

TEST(ElfFileTest, BuildIdEqualsReadelfs) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string want = ReadelfBuildId(self);
  if (want.empty()) GTEST_SKIP() << "no readelf, or this test was linked without a build-id";
  absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(self);
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(Hex(*id), want);
}

// A file whose note is reachable only through its PT_NOTE segment: the section header table is
// cut off (e_shoff = e_shnum = e_shstrndx = 0), as sstrip-like tools and some loaders' images
// leave it. The build-id is still the loader's and the kernel's; reading sections only found
// none, so the decoder warned that the build-id differed from the one the recorder read.
TEST(ElfFileTest, ANoteReachableOnlyThroughPtNoteIsFound) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string want = ReadelfBuildId(self);
  if (want.empty()) GTEST_SKIP() << "no readelf, or this test was linked without a build-id";
  std::ifstream in(self, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), sizeof(Elf64_Ehdr));
  auto* ehdr = reinterpret_cast<Elf64_Ehdr*>(bytes.data());
  ehdr->e_shoff = 0;
  ehdr->e_shnum = 0;
  ehdr->e_shstrndx = 0;
  ::ptkit::testing::TempDir dir;
  const std::string cut = dir.File("no-sections");
  std::ofstream(cut, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  // The oracle agrees that no section is left.
  ::ptkit::testing::CommandResult sections =
      ::ptkit::testing::RunCommand({"/usr/bin/readelf", "-S", cut});
  EXPECT_THAT(sections.out, HasSubstr("There are no sections"));
  absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(cut);
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(Hex(*id), want);
}

TEST(ElfFileTest, ReadBuildIdErrorsNameTheFile) {
  EXPECT_THAT(ReadBuildId("/nonexistent/file"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("open /nonexistent/file")));
  ::ptkit::testing::TempDir dir;
  const std::string text = dir.File("text");
  std::ofstream(text) << "not an ELF file at all\n";
  EXPECT_THAT(ReadBuildId(text),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("text: not an ELF file")));
}

}  // namespace
}  // namespace ptkit
