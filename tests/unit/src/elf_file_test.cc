#include "ptkit/elf_file.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "read_file.h"
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
  std::vector<char> bytes = ::ptkit::testing::ReadWholeFile<std::vector<char>>(self);
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

// Real files of three kinds: this test (an executable with .symtab), libc (stripped: .dynsym
// only, many versioned symbols) and ld.so.
std::vector<std::string> RealFiles() {
  std::vector<std::string> out = {std::filesystem::read_symlink("/proc/self/exe")};
  for (const char* path :
       {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/usr/bin/ls"}) {
    if (access(path, R_OK) == 0) out.push_back(path);
  }
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipWhitespace());
}

uint64_t Hex(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 16); }

// `readelf -lW`'s LOAD lines: "LOAD 0xOFFSET 0xVADDR 0xPADDR 0xFILESZ 0xMEMSZ FLAGS 0xALIGN".
TEST(ElfFileTest, LoadSegmentsEqualReadelfs) {
  for (const std::string& path : RealFiles()) {
    ::ptkit::testing::CommandResult r =
        ::ptkit::testing::RunCommand({"/usr/bin/readelf", "-lW", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> want;
    for (const std::string& line : Lines(r.out)) {
      std::istringstream in(line);
      std::string type, offset, vaddr, paddr, filesz, memsz, flags, flag;
      in >> type >> offset >> vaddr >> paddr >> filesz >> memsz;
      if (type != "LOAD") continue;
      // Flags are "R E", "RW ", "R  ": up to the alignment, which starts with 0x.
      while (in >> flag && !flag.starts_with("0x")) flags += flag;
      want.push_back(fmt::format("{:#x} {:#x} {:#x} {:#x} {}", Hex(offset), Hex(vaddr), Hex(filesz),
                                 Hex(memsz), flags));
    }
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    std::vector<std::string> got;
    for (const ElfSegment& s : elf->LoadSegments()) {
      std::string flags;
      if (s.flags & PF_R) flags += "R";
      if (s.flags & PF_W) flags += "W";
      if (s.flags & PF_X) flags += "E";
      got.push_back(
          fmt::format("{:#x} {:#x} {:#x} {:#x} {}", s.offset, s.vaddr, s.filesz, s.memsz, flags));
    }
    EXPECT_FALSE(got.empty()) << path;
    EXPECT_EQ(got, want) << path;
    // FileOffset goes through them.
    const ElfSegment& first = elf->LoadSegments().front();
    EXPECT_EQ(elf->FileOffset(first.vaddr + 1), static_cast<int64_t>(first.offset + 1)) << path;
    EXPECT_EQ(elf->FileOffset(~uint64_t{0}), -1) << path;
  }
}

// `readelf -SW`: "[Nr] Name Type Address Off Size ES Flg Lk Inf Al".
TEST(ElfFileTest, SectionsEqualReadelfs) {
  for (const std::string& path : RealFiles()) {
    ::ptkit::testing::CommandResult r =
        ::ptkit::testing::RunCommand({"/usr/bin/readelf", "-SW", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> want;
    for (const std::string& line : Lines(r.out)) {
      const size_t close = line.find(']');
      if (line.find('[') == std::string::npos || close == std::string::npos ||
          line.find("Nr]") != std::string::npos) {
        continue;
      }
      std::istringstream in(line.substr(close + 1));
      std::string name, type, address, offset, size;
      in >> name >> type >> address >> offset >> size;
      if (name == "NULL") continue;  // entry 0: readelf leaves its name column empty
      want.push_back(fmt::format("{} {:#x} {:#x}", name, Hex(address), Hex(size)));
    }
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    std::vector<std::string> got;
    const std::vector<ElfSection> sections = elf->Sections();
    for (size_t i = 1; i < sections.size(); ++i) {
      EXPECT_EQ(sections[i].index, i);
      got.push_back(
          fmt::format("{} {:#x} {:#x}", sections[i].name, sections[i].addr, sections[i].size));
    }
    EXPECT_GT(got.size(), 10u) << path;
    EXPECT_EQ(got, want) << path;
    // The bytes of .interp (executables) or the names in .dynstr (all three) are the file's.
    for (const ElfSection& section : sections) {
      if (section.name != ".dynstr") continue;
      const std::span<const uint8_t> data = elf->SectionData(section);
      ASSERT_EQ(data.size(), section.size);
      EXPECT_EQ(data[0], 0);  // a string table starts with the empty string
    }
  }
}

// Every FDE readelf dumps from .eh_frame ("... FDE cie=... pc=BEGIN..END"), up to 400 spread over
// the file: FdeSize(BEGIN) is END - BEGIN, and no FDE starts a byte after BEGIN.
TEST(ElfFileTest, FdeSizesEqualReadelfs) {
  for (const std::string& path : RealFiles()) {
    ::ptkit::testing::CommandResult r =
        ::ptkit::testing::RunCommand({"/usr/bin/readelf", "--debug-dump=frames", path});
    // (readelf 2.40 exits 1 after dumping libc's and ld.so's frames, saying nothing: the count
    // below is the check that it dumped them.)
    std::vector<std::pair<uint64_t, uint64_t>> fdes;  // begin, end
    std::set<uint64_t> begins;
    for (const std::string& line : Lines(r.out)) {
      const size_t pc = line.find(" FDE cie=");
      const size_t at = line.find(" pc=");
      const size_t dots = line.find("..", at);
      if (pc == std::string::npos || at == std::string::npos || dots == std::string::npos) continue;
      const uint64_t begin = std::stoull(line.substr(at + 4, dots - at - 4), nullptr, 16);
      fdes.emplace_back(begin, std::stoull(line.substr(dots + 2), nullptr, 16));
      begins.insert(begin);
    }
    ASSERT_GT(fdes.size(), 100u) << path;
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    const size_t step = std::max<size_t>(1, fdes.size() / 400);
    for (size_t i = 0; i < fdes.size(); i += step) {
      const auto [begin, end] = fdes[i];
      EXPECT_EQ(elf->FdeSize(begin), end - begin) << fmt::format("{} FDE at {:#x}", path, begin);
      if (!begins.contains(begin + 1)) {
        EXPECT_EQ(elf->FdeSize(begin + 1), 0u) << path;
      }
    }
  }
}

// `nm --defined-only` (.symtab) and `nm -D --defined-only` (.dynsym): "VALUE TYPE NAME", or
// "TYPE NAME" without a value. nm leaves out file and section symbols, as this test does.
TEST(ElfFileTest, SymbolsEqualNms) {
  for (const std::string& path : RealFiles()) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    for (const bool dynamic : {false, true}) {
      std::vector<std::string> argv = {"/usr/bin/nm", "--defined-only", "--without-symbol-versions",
                                       path};
      if (dynamic) argv.insert(argv.begin() + 1, "-D");
      ::ptkit::testing::CommandResult r = ::ptkit::testing::RunCommand(argv);
      std::vector<std::pair<uint64_t, std::string>> want;
      for (const std::string& line : Lines(r.out)) {
        std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
        if (words.size() == 3) want.emplace_back(Hex(words[0]), words[2]);
      }
      std::vector<std::pair<uint64_t, std::string>> got;
      for (const ElfSymbol& sym : elf->Symbols()) {
        if (sym.dynamic != dynamic || sym.type == STT_FILE || sym.type == STT_SECTION) continue;
        // ld names some .symtab entries with their version ("X@GLIBCXX_3.4"), which
        // --without-symbol-versions drops.
        got.emplace_back(sym.value, std::string(sym.name.substr(0, sym.name.find('@'))));
      }
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      std::vector<std::pair<uint64_t, std::string>> only_got, only_want;
      std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                          std::back_inserter(only_got));
      std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                          std::back_inserter(only_want));
      EXPECT_THAT(only_got, ::testing::IsEmpty()) << path << (dynamic ? " .dynsym" : " .symtab");
      EXPECT_THAT(only_want, ::testing::IsEmpty()) << path << (dynamic ? " .dynsym" : " .symtab");
      EXPECT_EQ(got.size(), want.size()) << path;
      if (dynamic) {
        EXPECT_FALSE(got.empty()) << path;
      }
    }
    EXPECT_EQ(elf->HasSymtab(), path == std::filesystem::read_symlink("/proc/self/exe").string())
        << path;
  }
}

// `readelf -rW` lines of SHT_RELA sections: "OFFSET INFO TYPE [VALUE NAME + ADDEND | ADDEND]".
TEST(ElfFileTest, RelocationsEqualReadelfs) {
  for (const std::string& path : RealFiles()) {
    ::ptkit::testing::CommandResult r =
        ::ptkit::testing::RunCommand({"/usr/bin/readelf", "-rW", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> want;
    for (const std::string& line : Lines(r.out)) {
      std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (words.size() < 3 || !words[2].starts_with("R_X86_64_")) continue;
      // The symbol's name, without its version ("free@GLIBC_2.2.5").
      std::string symbol = words.size() >= 6 ? words[4].substr(0, words[4].find('@')) : "";
      want.push_back(fmt::format("{:#x} {}", Hex(words[0]), symbol));
    }
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    std::vector<std::string> got;
    for (const ElfRelocation& rela : elf->Relocations()) {
      got.push_back(fmt::format("{:#x} {}", rela.offset, rela.symbol));
    }
    EXPECT_FALSE(got.empty()) << path;
    EXPECT_EQ(got, want) << path;
  }
}

// The same file from memory reads the same (the vdso and the synthesizer read bytes).
TEST(ElfFileTest, FromMemoryReadsAsOpen) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::vector<uint8_t> bytes = ::ptkit::testing::ReadWholeFile(self);
  absl::StatusOr<ElfFile> memory = ElfFile::FromMemory("self", bytes);
  absl::StatusOr<ElfFile> file = ElfFile::Open(self);
  ASSERT_THAT(memory, IsOk());
  ASSERT_THAT(file, IsOk());
  EXPECT_EQ(memory->path(), "self");
  EXPECT_EQ(memory->BuildId(), file->BuildId());
  EXPECT_EQ(memory->LoadSegments().size(), file->LoadSegments().size());
  EXPECT_EQ(memory->Symbols().size(), file->Symbols().size());
  EXPECT_EQ(memory->machine(), EM_X86_64);
  EXPECT_TRUE(memory->is_64bit());
  EXPECT_EQ(memory->type(), ET_DYN);  // a PIE
  const std::vector<uint8_t> text = {'n', 'o', 't', ' ', 'E', 'L', 'F'};
  EXPECT_THAT(ElfFile::FromMemory("bytes", text),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes: not an ELF file")));
}

// A program header table beyond the end of the file is an error naming the file, not a file
// without segments.
TEST(ElfFileTest, ABadProgramHeaderTableIsAnError) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::vector<char> bytes = ::ptkit::testing::ReadWholeFile<std::vector<char>>(self);
  auto* ehdr = reinterpret_cast<Elf64_Ehdr*>(bytes.data());
  ehdr->e_phoff = bytes.size() + 4096;
  ::ptkit::testing::TempDir dir;
  const std::string bad = dir.File("bad-phdrs");
  std::ofstream(bad, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_THAT(ElfFile::Open(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("bad-phdrs: bad program header")));
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
