#include "ptkit/elf_file.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "build_ids.h"
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

using ::ptkit::testing::HexBuildId;
using ::ptkit::testing::ReadelfBuildId;  // the oracle

TEST(ElfFileTest, BuildIdEqualsReadelfs) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string want = ReadelfBuildId(self);
  if (want.empty()) GTEST_SKIP() << "no readelf, or this test was linked without a build-id";
  absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(self);
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(HexBuildId(*id), want);
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
  EXPECT_EQ(HexBuildId(*id), want);
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

// C++ code with exceptions: libstdc++ (its LSDAs), and this test itself.
std::vector<std::string> CxxFiles() {
  std::vector<std::string> out = {std::filesystem::read_symlink("/proc/self/exe")};
  for (const char* path : {"/usr/lib/x86_64-linux-gnu/libstdc++.so.6"}) {
    if (access(path, R_OK) == 0) out.push_back(path);
  }
  return out;
}

// readelf's FDEs with an LSDA ("Augmentation data: B0 B1 B2 B3" after "OFFSET LENGTH CIE FDE
// cie=... pc=BEGIN..END", GCC's pc-relative sdata4 pointers): the LSDA is at the field's
// address (.eh_frame's address + OFFSET + 17: length, CIE pointer, start, size, augmentation
// length) plus the signed value, which Fdes() says.
TEST(ElfFileTest, LsdaPointersEqualReadelfs) {
  for (const std::string& path : CxxFiles()) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    uint64_t eh_frame = 0;
    for (const ElfSection& s : elf->Sections()) {
      if (s.name == ".eh_frame") eh_frame = s.addr;
    }
    ASSERT_NE(eh_frame, 0u) << path;
    std::map<uint64_t, uint64_t> lsda_of;  // by FDE start
    for (const ElfFde& fde : elf->Fdes()) {
      if (fde.lsda != 0) lsda_of[fde.begin] = fde.lsda;
    }
    ::ptkit::testing::CommandResult r =
        ::ptkit::testing::RunCommand({"/usr/bin/readelf", "--debug-dump=frames", path});
    size_t checked = 0;
    uint64_t offset = 0, begin = 0;
    for (const std::string& line : Lines(r.out)) {
      const size_t at = line.find(" pc=");
      if (line.find(" FDE cie=") != std::string::npos && at != std::string::npos) {
        offset = Hex(line.substr(0, line.find(' ')));
        begin = Hex(line.substr(at + 4));
        continue;
      }
      const size_t data = line.find("Augmentation data:");
      if (data == std::string::npos || offset == 0) continue;
      const std::vector<std::string> bytes =
          absl::StrSplit(line.substr(data + 18), ' ', absl::SkipWhitespace());
      const uint64_t fde = std::exchange(offset, 0);  // (a CIE's data follows no FDE line)
      if (bytes.size() != 4) continue;
      uint32_t value = 0;
      for (size_t i = 0; i < 4; ++i) value |= static_cast<uint32_t>(Hex(bytes[i])) << (8 * i);
      const uint64_t lsda = eh_frame + fde + 17 + static_cast<int64_t>(static_cast<int32_t>(value));
      EXPECT_EQ(lsda_of[begin], lsda) << fmt::format("{} FDE at {:#x}", path, begin);
      ++checked;
    }
    EXPECT_GT(checked, 0u) << path;
    EXPECT_EQ(checked, lsda_of.size()) << path;
  }
}

// Every call site with a landing pad lies in the code of an FDE that has an LSDA, and its pad
// in the code of an FDE (the function's, or its cold part's); the test's own exceptions (it
// catches, gtest's try blocks) have some.
TEST(ElfFileTest, CallSitesLieInFunctionsThatHaveLsdas) {
  for (const std::string& path : CxxFiles()) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    ASSERT_THAT(elf, IsOk());
    std::map<uint64_t, ElfFde> fdes;  // by start
    for (const ElfFde& fde : elf->Fdes()) fdes[fde.begin] = fde;
    auto fde_at = [&](uint64_t address) -> const ElfFde* {
      auto it = fdes.upper_bound(address);
      if (it == fdes.begin()) return nullptr;
      --it;
      return address < it->second.begin + it->second.size ? &it->second : nullptr;
    };
    const std::vector<ElfCallSite> sites = elf->CallSites();
    EXPECT_GT(sites.size(), 20u) << path;
    for (const ElfCallSite& site : sites) {
      const ElfFde* in = fde_at(site.begin);
      ASSERT_NE(in, nullptr) << fmt::format("{} call site at {:#x}", path, site.begin);
      EXPECT_NE(in->lsda, 0u) << path;
      EXPECT_LT(site.begin, site.end);
      EXPECT_LE(site.end, in->begin + in->size) << fmt::format("{} {:#x}", path, site.begin);
      EXPECT_NE(fde_at(site.landing_pad), nullptr)
          << fmt::format("{} pad {:#x} of {:#x}", path, site.landing_pad, site.begin);
    }
    EXPECT_TRUE(std::is_sorted(
        sites.begin(), sites.end(),
        [](const ElfCallSite& a, const ElfCallSite& b) { return a.begin < b.begin; }));
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

// An LSDA in a section whose bytes are not in the file (.gcc_except_table's offset past the
// end): no call sites from it, and no read (the elf_image fuzzer's first find: a read at an
// offset from null).
TEST(ElfFileTest, AnLsdaWithoutBytesGivesNoCallSites) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  absl::StatusOr<ElfFile> elf = ElfFile::Open(self);
  ASSERT_THAT(elf, IsOk());
  ASSERT_FALSE(elf->CallSites().empty());
  size_t index = 0;
  for (const ElfSection& s : elf->Sections()) {
    if (s.name == ".gcc_except_table") index = s.index;
  }
  ASSERT_NE(index, 0u);
  std::vector<char> bytes = ::ptkit::testing::ReadWholeFile<std::vector<char>>(self);
  const auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  auto* shdr =
      reinterpret_cast<Elf64_Shdr*>(bytes.data() + ehdr->e_shoff + index * ehdr->e_shentsize);
  shdr->sh_offset = bytes.size() + 4096;
  ::ptkit::testing::TempDir dir;
  const std::string bad = dir.File("lsda-past-the-end");
  std::ofstream(bad, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  absl::StatusOr<ElfFile> patched = ElfFile::Open(bad);
  ASSERT_THAT(patched, IsOk());
  EXPECT_TRUE(patched->CallSites().empty());
  EXPECT_EQ(patched->Fdes().size(), elf->Fdes().size());
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
