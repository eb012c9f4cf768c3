// Function symbols of ProgramImage (decoder/image.h).
// Separate debug files (FindDebugFile): a stripped program's function symbols
// and file:line come from its debug file, found by build-id under the sysroot's
// /usr/lib/debug/.build-id or by .gnu_debuglink, as gdb and perf find them; a debug file of
// another build is not used. tiny_split.elf is tiny_full.elf stripped, tiny_split.debug its
// debug part (tests/unit/decoder/CMakeLists.txt).
// Names against binutils: every <X@plt> label of objdump -d and every code symbol of nm, on
// plt.c built with each PLT layout ld makes and on Debian's own binaries.
#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decoder/image.h"
#include "decoder/srcline.h"
#include "elf_oracle.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

namespace fs = std::filesystem;
using ::ptkit::decoder::testing::HaveBinutils;
using ::ptkit::decoder::testing::LoaderMappedImage;
using ::ptkit::decoder::testing::ObjdumpPltNames;
using ::ptkit::decoder::testing::ObjdumpSections;
using ::ptkit::decoder::testing::ReadelfIfuncs;
using ::ptkit::decoder::testing::Section;
using ::ptkit::decoder::testing::TempPath;
using ::ptkit::decoder::testing::ToolOutput;
using ::ptkit::testing::IsOk;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

using ::ptkit::decoder::testing::kDir;

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
  std::string dir = TempPath(name);
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

// A .symtab of global symbols only (strip -x, ld --discard-all): the static functions are named
// from the debug file, as gdb and perf name them (sweep 38a F8: they were sub_ADDRESS, while
// --srcline read the same debug file).
TEST_F(DebugFileTest, AlsoWhereTheSymtabKeptHasNoLocalFunction) {
  if (std::system("strip --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no strip (binutils)";
  const std::string dir = FreshDir("strip_x");
  fs::copy_file(kDir + "/tiny_full.elf", dir + "/full");
  ASSERT_EQ(std::system(("strip -x -g -o '" + dir + "/prog' '" + dir + "/full'").c_str()), 0);
  auto globals = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(globals, nullptr);
  ASSERT_LT(NamesOf(*globals).size(), expected_.size());  // leaf, collatz, fib are gone
  fs::copy_file(kDir + "/tiny_split.debug", dir + "/tiny_split.debug");
  ASSERT_EQ(
      std::system(("objcopy --add-gnu-debuglink='" + dir + "/tiny_split.debug' '" + dir + "/prog'")
                      .c_str()),
      0);
  auto image = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(NamesOf(*image), expected_);
  fs::remove_all(dir);
}

// A file opened by a relative path (ptdecode --elf prog): its directory under
// SYSROOT/usr/lib/debug is the absolute one, as gdb looks (sweep 38a F9: "/usr/lib/debug.").
TEST_F(DebugFileTest, ByDebuglinkUnderTheGlobalDirectoryForARelativePath) {
  const std::string dir = fs::path(FreshDir("relative")).lexically_normal().string();
  const std::string root = dir + "/root";
  fs::copy_file(kDir + "/tiny_split.elf", dir + "/prog");
  fs::create_directories(root + "/usr/lib/debug" + dir);
  fs::copy_file(kDir + "/tiny_split.debug", root + "/usr/lib/debug" + dir + "/tiny_split.debug");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  absl::StatusOr<ElfFile> elf = ElfFile::Open("prog");
  const std::string found = elf.ok() ? elf->FindDebugFile(root) : "";
  // A relative sysroot too (--sysroot root; a review: the absolute path no longer began with it).
  const std::string found_relative = elf.ok() ? elf->FindDebugFile("root") : "";
  fs::current_path(cwd);
  ASSERT_THAT(elf, IsOk());
  EXPECT_EQ(found, root + "/usr/lib/debug" + dir + "/tiny_split.debug");
  EXPECT_EQ(found_relative, "root/usr/lib/debug" + dir + "/tiny_split.debug");
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

// Issue 12 item 7: every mapping of a file read its ELF file (and looked for its debug file)
// again. Now a file's symbols are read once, at its first mapping, and placed at each: the
// second mapping here is named from the debug file although that is gone by then. (Read per
// mapping, the second had no names.)
// perf's build-id cache (ptdecode --buildid-dir) keeps a file's debug file as
// .build-id/NN/REST/debug beside its `elf`: a stripped program is named from it, as perf 6.1
// names it (sweep 38a F5: sub_ADDRESS).
TEST_F(DebugFileTest, ByBuildIdInPerfsBuildIdCache) {
  const std::string dir = FreshDir("buildid_cache");
  fs::copy_file(kDir + "/tiny_split.elf", dir + "/prog");
  auto id = ReadBuildId(kDir + "/tiny_full.elf");
  ASSERT_THAT(id, IsOk());
  std::string hex;
  for (uint8_t b : *id) hex += fmt::format("{:02x}", b);
  const std::string cached = dir + "/cache/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2);
  fs::create_directories(cached);
  fs::copy_file(kDir + "/tiny_split.debug", cached + "/debug");
  for (const bool cache : {false, true}) {
    auto image = ProgramImage::Create();
    ASSERT_THAT(image, IsOk());
    (*image)->set_sysroot("/nonexistent");
    if (cache) (*image)->set_buildid_dir(dir + "/cache");
    ASSERT_THAT((*image)->AddFileMapping(dir + "/prog", 0x900000, fs::file_size(dir + "/prog"), 0),
                IsOk());
    if (cache) {
      EXPECT_EQ(NamesOf(**image), expected_);
    } else {
      EXPECT_THAT(NamesOf(**image), IsEmpty());
    }
  }
  fs::remove_all(dir);
}

TEST_F(DebugFileTest, AFileIsReadOnceForAllItsMappings) {
  const std::string dir = FreshDir("readonce");
  fs::copy_file(kDir + "/tiny_split.elf", dir + "/prog");
  fs::create_directories(dir + "/.debug");
  fs::copy_file(kDir + "/tiny_split.debug", dir + "/.debug/tiny_split.debug");
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->set_sysroot("/nonexistent");
  const uint64_t size = fs::file_size(dir + "/prog");
  constexpr uint64_t kSecond = 0x900000 + 0x1000000;
  ASSERT_THAT((*image)->AddFileMapping(dir + "/prog", 0x900000, size, 0), IsOk());
  fs::remove_all(dir + "/.debug");
  ASSERT_THAT((*image)->AddFileMapping(dir + "/prog", kSecond, size, 0), IsOk());
  Named want = expected_;
  for (const auto& [address, name] : expected_) want.emplace_back(address + 0x1000000, name);
  EXPECT_EQ(NamesOf(**image), want);
  for (const Symbol& s : (*image)->symbols()) EXPECT_EQ(s.image, s.begin < kSecond ? 0u : 1u);
  fs::remove_all(dir);
}

// Bytes [offset, offset + n) of the file at `path`, read with ifstream (the oracle).
std::vector<uint8_t> FileBytes(const std::string& path, uint64_t offset, size_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  EXPECT_TRUE(in) << path;
  return out;
}

std::vector<uint8_t> ImageBytes(const ProgramImage& image, uint64_t address, size_t n) {
  std::vector<uint8_t> out(n);
  EXPECT_EQ(image.Read(address, out.data(), n), n) << std::hex << address;
  return out;
}

// Two files mapped at one address range in one image (a program and the one it execs, in a
// recording without time; a library and the one dlopen'd where it was): the later mapping's
// code is read there, the earlier one's around it, as libipt's image does (pt_image_add
// splits the sections a new one overlaps); captured bytes fill only what no file holds.
// Before, the fast decoder read the earlier file (the first mapping starting at or below the
// address) while libipt read the later one.
TEST_F(DebugFileTest, AMappingReplacesWhatItOverlapsOfAnEarlierOne) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  ProgramImage& im = **image;
  const std::string a = kDir + "/tiny_full.elf", b = "/usr/bin/true";
  const uint64_t a_size = fs::file_size(a);
  constexpr uint64_t kBase = 0x900000;  // where tiny_full.elf is linked
  // true's bytes [0x1000, 0x1040) over a's, inside a's code (leaf, collatz, fib, work, _start
  // from 0x901000 by nm).
  constexpr uint64_t kFrom = kBase + 0x1000, kTo = kBase + 0x1040;
  ASSERT_GE(a_size, 0x1100u);
  ASSERT_THAT(im.AddFileMapping(a, kBase, a_size, 0), IsOk());
  const size_t a_symbols = im.symbols().size();
  ASSERT_THAT(im.AddFileMapping(b, kFrom, kTo - kFrom, 0x1000), IsOk());
  EXPECT_EQ(ImageBytes(im, kFrom - 16, 16), FileBytes(a, 0xff0, 16));
  EXPECT_EQ(ImageBytes(im, kFrom, 16), FileBytes(b, 0x1000, 16));
  EXPECT_EQ(ImageBytes(im, kTo - 16, 16), FileBytes(b, 0x1030, 16));
  EXPECT_EQ(ImageBytes(im, kTo, 16), FileBytes(a, 0x1040, 16));
  EXPECT_EQ(im.FileAt(kFrom - 1), 0);
  EXPECT_EQ(im.FileAt(kFrom), 1);
  EXPECT_EQ(im.FileAt(kTo), 0);
  ASSERT_THAT(im.overlaps(), SizeIs(1u));
  EXPECT_EQ(im.overlaps()[0].begin, kFrom);
  EXPECT_EQ(im.overlaps()[0].end, kTo);
  EXPECT_EQ(im.overlaps()[0].replaced, 0u);
  EXPECT_EQ(im.overlaps()[0].by, 1u);
  // a's symbols starting in the replaced range name its code no more; the others stay.
  size_t inside = 0;
  for (const Symbol& s : full_->symbols()) inside += s.begin >= kFrom && s.begin < kTo;
  ASSERT_GT(inside, 0u);
  EXPECT_EQ(im.symbols().size(), a_symbols - inside);
  for (const Symbol& s : im.symbols()) {
    EXPECT_TRUE(s.begin < kFrom || s.begin >= kTo) << s.name;
  }
  // Captured bytes over a file and a hole: the file keeps its part, the hole gets the rest.
  const uint64_t end_of_a = kBase + a_size;
  im.AddBytes("captured", end_of_a - 0x100, std::vector<uint8_t>(0x200, 0xcc));
  EXPECT_EQ(ImageBytes(im, end_of_a - 16, 16), FileBytes(a, a_size - 16, 16));
  EXPECT_EQ(im.FileAt(end_of_a - 1), 0);
  EXPECT_EQ(im.FileAt(end_of_a), 2);
  EXPECT_EQ(ImageBytes(im, end_of_a, 4), std::vector<uint8_t>(4, 0xcc));
  // Later captured bytes replace earlier ones.
  im.AddBytes("again", end_of_a + 8, std::vector<uint8_t>(8, 0x90));
  EXPECT_EQ(ImageBytes(im, end_of_a + 4, 4), std::vector<uint8_t>(4, 0xcc));
  EXPECT_EQ(ImageBytes(im, end_of_a + 8, 8), std::vector<uint8_t>(8, 0x90));
  EXPECT_EQ(ImageBytes(im, end_of_a + 16, 4), std::vector<uint8_t>(4, 0xcc));
  EXPECT_EQ(im.FileAt(end_of_a + 8), 3);
  EXPECT_EQ(im.FileAt(end_of_a + 16), 2);
  EXPECT_THAT(im.overlaps(), SizeIs(2u));  // "again" over "captured"
}

// A mapping that holds only a sliver of a segment's file bytes names only the code it maps.
// lld lays a program's segments out in one file page, a virtual page apart: qemu's mapping of
// the read-only segment's last page also holds the first bytes of the text, one page below the
// text's own mapping, and each of the text's symbols was placed there too, a page low,
// interleaved with the real ones (2,126 of a Rust program's 4,159 addresses misnamed). Here
// tiny_full.elf's file bytes [0, 0x1040) mapped at 0x8ff000 hold the text's first 0x40 bytes
// (leaf, collatz and fib start there by nm), at 0x900000.
TEST_F(DebugFileTest, AMappingNamesOnlyTheCodeItMaps) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  ProgramImage& im = **image;
  const std::string a = kDir + "/tiny_full.elf";
  ASSERT_THAT(im.AddFileMapping(a, 0x8ff000, 0x1040, 0), IsOk());
  std::vector<std::string> names;
  for (const Symbol& s : im.symbols()) names.push_back(s.name);
  std::vector<std::string> want;
  for (const Symbol& s : full_->symbols()) {
    if (s.begin >= 0x901000 && s.begin < 0x901040) want.push_back(s.name);
  }
  ASSERT_THAT(want, SizeIs(::testing::Ge(2u)));
  EXPECT_EQ(names, want);
  // The text's own mapping names all of it, where it is.
  ASSERT_THAT(im.AddFileMapping(a, 0x901000, 0x1000, 0x1000), IsOk());
  for (const Symbol& s : full_->symbols()) {
    const int at = im.SymbolAt(s.begin);
    ASSERT_GE(at, 0) << s.name;
    EXPECT_EQ(im.symbols()[at].name, s.name);
  }
}

// The names ElfImage gives functions whose symbols are `mangled` (a static program made of
// them by gcc, their names as asm labels) against c++filt's `options` for each, less the
// last component's Rust build hash ("h" + 16 hex digits).
void ExpectNamedAsCxxFilt(const std::string& dir_name, const std::vector<std::string>& mangled,
                          const std::vector<std::string>& options = {}) {
  if (!HaveBinutils()) GTEST_SKIP() << "binutils (c++filt) not installed";
  const std::string dir = FreshDir(dir_name);
  {
    std::ofstream c(dir + "/names.c");
    for (size_t i = 0; i < mangled.size(); ++i) {
      c << "void f" << i << "(void) __asm__(\"" << mangled[i] << "\");\nvoid f" << i
        << "(void) {}\n";
    }
    c << "void _start(void) { for (;;) {} }\n";
  }
  auto cc = ::ptkit::testing::RunCommand({"/usr/bin/env", "gcc", "-O0", "-nostdlib", "-static",
                                          "-o", dir + "/names", dir + "/names.c"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto image = ElfImage(dir + "/names", "");
  ASSERT_NE(image, nullptr);
  std::set<std::string> got;
  for (const Symbol& s : image->symbols()) got.insert(s.name);
  for (const std::string& m : mangled) {
    std::vector<std::string> argv = {"c++filt"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(m);
    std::string want = ToolOutput(argv);
    while (!want.empty() && want.back() == '\n') want.pop_back();
    if (const size_t h = want.rfind("::h"); h != std::string::npos && want.size() - h == 19) {
      want.resize(h);
    }
    EXPECT_NE(want, m);
    EXPECT_TRUE(got.contains(want)) << m << " -> " << want << "; got " << fmt::format("{}", got);
  }
  fs::remove_all(dir);
}

// Rust's legacy mangling (rustc's default for a program's own code; the standard library's
// before v0) is named as c++filt names it, without the last component's
// build hash ("h" + 16 hex digits: main::fib::h42af...), which perf leaves out too and which
// would make every function of a rebuilt program a new one for `ptdecode diff`; LLVM's
// ".llvm.N" suffix (ThinLTO clones) is no part of the name (such names were not demangled).
TEST(SymbolsTest, RustLegacyNamesAreDemangledWithoutTheirHash) {
  const std::string drop_closure =
      "_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure"
      "$u7d$$u7d$$GT$17h0123456789abcdefE";
  ExpectNamedAsCxxFilt(
      "rust_names",
      {"_ZN4main3fib17h42af1a01a5cac11cE",
       "_ZN4core3fmt5Write10write_char17h720cda75b3d14958E.llvm.10654020189794219422", drop_closure,
       // A path element that begins with '$' has a '_' before it, no part of the name (sweep
       // 33a F4: "_<p::G as core::ops::drop::Drop>::drop", "p::main::_{{closure}}").
       "_ZN46_$LT$p..G$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE",
       "_ZN1p4main28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE", "_ZN3foo3barEv"});
}

// Rust's v0 mangling (rustc 1.9x's standard library: every Rust program's) is named as
// c++filt -i (and nm -C) names it: without the crates' disambiguators (std[e28293b1aa0f68bd]).
// Names from a real rustc 1.95 program: a function, a trait method of a generic type, a
// closure in a generic function, a trait object's impl.
TEST(SymbolsTest, RustV0NamesAreDemangledAsNmNamesThem) {
  const std::string generic =
      "_RINvMNtCsgEmfK2I1SDS_4core5sliceSh11copy_withinINtNtNtB5_3ops5range14RangeInclusive"
      "jEECsfEOYDRpO4Ta_11miniz_oxide";
  const std::string closure =
      "_RNvYNvNtNtNtCsjrHSEGnQ3l9_3std3sys2fs4unix4statINtNtNtCsgEmfK2I1SDS_4core3ops8function"
      "2FnTRNtNtNtBQ_3ffi5c_str4CStrEE4callBa_";
  ExpectNamedAsCxxFilt(
      "rust_v0_names",
      {"_RNvCskK7mfDs1mzF_1m3fib", "_RNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal", generic,
       "_RNvXsi_NtNtCsjrHSEGnQ3l9_3std2io5stdioNtB5_10StdoutLockNtB7_5Write9write_all", closure},
      {"-i"});
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

// Without build-ids (-Wl,--build-id=none) only the CRC-32 that .gnu_debuglink holds tells the
// debug file of this build from another's, as gdb checks it (sweep 38a F1: another build's
// debug file left in place named the new code with its names, 1,000 calls of beta where beta
// ran once, with no word). The image says which file it left aside.
TEST_F(DebugFileTest, ADebugFileOfAnotherBuildWithoutBuildIdsIsNotUsed) {
  const std::string dir = FreshDir("otherbuild_nb");
  fs::copy_file(kDir + "/tiny_nb_split.elf", dir + "/prog");
  fs::copy_file(kDir + "/tiny_nb_split.debug", dir + "/tiny_nb_split.debug");
  auto image = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(image, nullptr);
  EXPECT_THAT(NamesOf(*image), Not(IsEmpty()));  // this build's: used
  EXPECT_EQ(image->files()[0].refused_debug, "");
  fs::copy_file(kDir + "/tiny_nb_other.debug", dir + "/tiny_nb_split.debug",
                fs::copy_options::overwrite_existing);
  image = ElfImage(dir + "/prog", "/nonexistent");
  ASSERT_NE(image, nullptr);
  EXPECT_THAT(NamesOf(*image), IsEmpty());
  EXPECT_EQ(image->files()[0].refused_debug, dir + "/tiny_nb_split.debug");
  SourceLines lines(nullptr);
  EXPECT_EQ(lines.Lookup(*image, expected_.front().first), nullptr);
  fs::remove_all(dir);
}

// An address with several names gets the one perf 6.1 shows (tests/data/decoder/aliases.c):
// not weak before weak, global before local, the fewest leading underscores, the longest name
// (.symtab lists locals first, so the first name would be __GI_work); a versioned name only
// when there is no other (where perf shows it: ptdecode's one difference).
TEST(SymbolsTest, AnAliasIsNamedAsPerfNamesIt) {
  auto image = ElfImage(kDir + "/aliases.elf", "/nonexistent");
  ASSERT_NE(image, nullptr);
  std::vector<std::string> names;
  for (const Symbol& s : image->symbols()) names.push_back(s.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(
                         "work", "__copy_long_first", "__move_long_second", "__local_only",
                         "release", "_start", "long_alias_" + std::string(189, 'b')));
}

// --- Oracles: binutils' objdump and nm on the same files -----------------------------------

// Code symbols from `nm -C` (types t, T, w, W, i; `dynamic`: of .dynsym, nm -D): address ->
// every name at that address, without symbol versions (as perf shows them).
void AddNmFunctions(const std::string& path, bool dynamic,
                    std::map<uint64_t, std::set<std::string>>& out) {
  std::istringstream text(dynamic ? ToolOutput({"nm", "-C", "--defined-only", "-D", path})
                                  : ToolOutput({"nm", "-C", "--defined-only", path}));
  static const std::regex kRow("^([0-9a-f]+) ([tTwWi]) ([^@]*)(@.*)?$");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (std::regex_match(line, m, kRow)) out[std::stoull(m[1], nullptr, 16)].insert(m[3]);
  }
}

// The programs built from plt.c (tests/unit/decoder/CMakeLists.txt), one per PLT layout.
const std::vector<std::string> kPltPrograms = {"plt_pie",       "plt_nopie", "plt_ibt",
                                               "plt_ibt_nopie", "plt_now",   "plt_noplt"};

// What ptkit names `ip`, "" when it has no symbol there.
std::string NameAt(const ProgramImage& image, uint64_t ip) {
  const int s = image.SymbolAt(ip);
  return s < 0 ? "" : image.symbols()[s].name;
}

// An IFUNC symbol's address is its resolver's code: that code is named by the resolver's own
// function symbol, as addr2line (DWARF) and objdump name it, not by the IFUNC (sweep 36b L1: a
// call to `add`, 987 instructions, that was the resolver's one run at relocation). A static
// resolver (a local symbol, which a global IFUNC outranks otherwise) and a global one.
TEST(SymbolsTest, AnIfuncsResolverIsNamedByItsOwnSymbol) {
  if (!HaveBinutils()) GTEST_SKIP() << "nm and addr2line (binutils) are not installed";
  const std::string dir = FreshDir("ifunc");
  {
    std::ofstream c(dir + "/ifunc.c");
    c << "static int add_fast(int a, int b) { return a + b; }\n"
         "static int (*resolve_add(void))(int, int) { return add_fast; }\n"
         "int add(int, int) __attribute__((ifunc(\"resolve_add\")));\n"
         "static int mul_fast(int a, int b) { return a * b; }\n"
         "int (*pick_mul(void))(int, int) { return mul_fast; }\n"
         "int mul(int, int) __attribute__((ifunc(\"pick_mul\")));\n"
         "int main(void) { return add(1, 2) + mul(2, 3) - 9; }\n";
  }
  auto cc = ::ptkit::testing::RunCommand(
      {"/usr/bin/env", "gcc", "-O0", "-g", "-o", dir + "/ifunc", dir + "/ifunc.c"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto image = ElfImage(dir + "/ifunc", "");
  ASSERT_NE(image, nullptr);
  std::map<uint64_t, std::set<std::string>> functions;
  AddNmFunctions(dir + "/ifunc", /*dynamic=*/false, functions);
  size_t checked = 0;
  for (const auto& [address, names] : functions) {
    if (!names.contains("add") && !names.contains("mul")) continue;
    std::istringstream where(
        ToolOutput({"addr2line", "-f", "-e", dir + "/ifunc", fmt::format("{:#x}", address)}));
    std::string want;
    std::getline(where, want);
    EXPECT_THAT(want, ::testing::AnyOf("resolve_add", "pick_mul"));
    EXPECT_EQ(NameAt(*image, address), want) << fmt::format("{:#x}", address);
    ++checked;
  }
  EXPECT_EQ(checked, 2u);
  fs::remove_all(dir);
}

// Every `<X@plt>` that objdump prints is X@plt in ptkit, starting there; ptkit has no other
// @plt names; no address of a PLT section has any other name (not _init, whose size is 0).
void ExpectPltNamesAsObjdump(const ProgramImage& image, const std::string& path, int64_t bias) {
  const std::map<uint64_t, std::string> want = ObjdumpPltNames(path);
  for (const auto& [address, name] : want) {
    const int s = image.SymbolAt(address + bias);
    ASSERT_GE(s, 0) << path << ": nothing at " << name;
    EXPECT_EQ(image.symbols()[s].name, name) << fmt::format("{}: {:#x}", path, address);
    EXPECT_EQ(image.symbols()[s].begin, address + bias) << name;
  }
  size_t plt_names = 0;
  for (const Symbol& s : image.symbols()) plt_names += s.name.ends_with("@plt") ? 1 : 0;
  EXPECT_EQ(plt_names, want.size()) << path;
  size_t plt_bytes = 0;
  for (const Section& section : ObjdumpSections(path)) {
    if (!section.name.starts_with(".plt")) continue;
    for (uint64_t a = section.begin; a < section.end; ++a, ++plt_bytes) {
      const std::string name = NameAt(image, a + bias);
      if (!name.empty()) {
        EXPECT_TRUE(name.ends_with("@plt"))
            << fmt::format("{}: {:#x} in {} is {}", path, a, section.name, name);
      }
    }
  }
  EXPECT_GT(plt_bytes, 0u) << path;
}

TEST(PltTest, EntriesAreNamedAsObjdumpNamesThem) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump (binutils) is not installed";
  for (const std::string& program : kPltPrograms) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    auto image = ElfImage(path, "/nonexistent");
    ASSERT_NE(image, nullptr);
    ExpectPltNamesAsObjdump(*image, path, 0);
  }
}

TEST(PltTest, EntriesOfAProgramMappedAsTheLoaderMapsItAreNamed) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump (binutils) is not installed";
  for (const std::string program : {"plt_pie", "plt_ibt", "plt_now"}) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    constexpr uint64_t kBase = 0x555555554000;
    auto image = LoaderMappedImage(path, kBase);
    ASSERT_NE(image, nullptr);
    ExpectPltNamesAsObjdump(*image, path, kBase);
  }
}

// ld before 2.35 left sh_entsize 0 in a .plt.got of 8-byte entries (Debian's libXxf86vm.so.1
// has one): the same program with that field cleared.
TEST(PltTest, APltGotWithoutEntrySizeHasEightByteEntries) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump (binutils) is not installed";
  const std::string path = TempPath("old_ld.elf");
  fs::copy_file(kDir + "/plt_pie.elf", path, fs::copy_options::overwrite_existing);
  std::smatch m;
  const std::string header = ToolOutput({"readelf", "-hW", path});
  ASSERT_TRUE(std::regex_search(header, m, std::regex("Start of section headers: +([0-9]+)")));
  const uint64_t shoff = std::stoull(m[1]);
  const std::string sections = ToolOutput({"readelf", "-SW", path});
  ASSERT_TRUE(std::regex_search(sections, m, std::regex("\\[ *([0-9]+)\\] \\.plt\\.got ")));
  const uint64_t index = std::stoull(m[1]);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(shoff + index * sizeof(Elf64_Shdr) +
                                        offsetof(Elf64_Shdr, sh_entsize)));
    const uint64_t zero = 0;
    f.write(reinterpret_cast<const char*>(&zero), sizeof(zero));
    ASSERT_TRUE(f.good());
  }
  ASSERT_THAT(ToolOutput({"readelf", "-SW", path}),
              ::testing::ContainsRegex("\\.plt\\.got +PROGBITS +[0-9a-f]+ [0-9a-f]+ 000008 00 "));
  auto image = ElfImage(path, "/nonexistent");
  ASSERT_NE(image, nullptr);
  ASSERT_THAT(ObjdumpPltNames(path), ::testing::Contains(::testing::Pair(
                                         ::testing::_, std::string("__cxa_finalize@plt"))));
  ExpectPltNamesAsObjdump(*image, path, 0);
  fs::remove(path);
}

// Debian's own binaries: a stripped program (PLT names from .dynsym and .rela.plt only), libc
// (IRELATIVE entries, which objdump names *ABS*+0xADDEND@plt) and ld.so; and where
// gcc-multilib is installed, the i386 libc and ld.so (PIC entries through %ebx, SHT_REL
// relocations; sweep 37b H1: their entries had no name).
TEST(PltTest, EntriesOfDebianBinariesAreNamedAsObjdumpNamesThem) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump (binutils) is not installed";
  int checked = 0;
  for (const std::string path :
       {"/usr/bin/ls", "/bin/true", "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/ld-linux-x86-64.so.2", "/usr/lib32/libc.so.6", "/usr/lib32/libstdc++.so.6"}) {
    if (!fs::exists(path)) continue;
    SCOPED_TRACE(path);
    auto image = ElfImage(path, "");
    ASSERT_NE(image, nullptr);
    ExpectPltNamesAsObjdump(*image, path, 0);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no Debian binary found";
}

// A static program's PLT entries (glibc's string functions, IRELATIVE relocations) are named
// after the IFUNC symbol at the relocation's addend, as perf names them since 6.3 (readelf's
// symbols, perf's choice among aliases: ReadelfIfuncs). They were "*ABS*+0xRESOLVER@plt", a name
// that moved with every build: `ptdecode diff` saw a new function and a removed one (s35).
TEST(PltTest, AStaticProgramsEntriesAreNamedAfterTheirIfunc) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump and readelf (binutils) are not installed";
  for (const std::string program : {"plt_static", "plt_static_pie"}) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    // "00000000004a5018  0000000000000025 R_X86_64_IRELATIVE                        41e420"
    std::map<uint64_t, uint64_t> addends;  // GOT slot -> resolver
    std::istringstream relocs(ToolOutput({"readelf", "-rW", path}));
    static const std::regex kReloc(
        R"re(^([0-9a-f]+) +[0-9a-f]+ R_X86_64_IRELATIVE +([0-9a-f]+)$)re");
    std::smatch m;
    for (std::string line; std::getline(relocs, line);) {
      if (std::regex_match(line, m, kReloc)) {
        addends[std::stoull(m[1], nullptr, 16)] = std::stoull(m[2], nullptr, 16);
      }
    }
    ASSERT_FALSE(addends.empty());
    const std::map<uint64_t, std::string> ifuncs = ReadelfIfuncs(path);
    auto image = ElfImage(path, "/nonexistent");
    ASSERT_NE(image, nullptr);
    // "  401018:\tjmp    *0xa3fe2(%rip)        # 4a5000 <_GLOBAL_OFFSET_TABLE_+0x18>"
    std::istringstream plt(
        ToolOutput({"objdump", "-d", "-w", "--no-show-raw-insn", "-j", ".plt", path}));
    static const std::regex kJump(
        R"re(^ +([0-9a-f]+):\s+jmp +\*0x[0-9a-f]+\(%rip\) +# ([0-9a-f]+) .*$)re");
    int named = 0;
    for (std::string line; std::getline(plt, line);) {
      if (!std::regex_match(line, m, kJump)) continue;
      auto slot = addends.find(std::stoull(m[2], nullptr, 16));
      if (slot == addends.end()) continue;
      auto ifunc = ifuncs.find(slot->second);
      ASSERT_NE(ifunc, ifuncs.end()) << line;
      EXPECT_EQ(NameAt(*image, std::stoull(m[1], nullptr, 16)), ifunc->second + "@plt") << line;
      ++named;
    }
    EXPECT_GT(named, 2) << "strlen and printf's string functions go through IRELATIVE entries";
  }
}

// Every code symbol nm prints resolves to a symbol that starts there with one of nm's names
// for that address (perf's choice among aliases is checked by AnAliasIsNamedAsPerfNamesIt).
// `path` is the file, `debug_path` the debug file whose .symtab the image has, or "".
void ExpectNmFunctionsResolve(const ProgramImage& image, const std::string& path,
                              const std::string& debug_path) {
  const std::vector<Section> sections = ObjdumpSections(path);
  std::map<uint64_t, std::set<std::string>> functions;
  AddNmFunctions(debug_path.empty() ? path : debug_path, false, functions);
  AddNmFunctions(path, true, functions);
  size_t checked = 0;
  for (const auto& [address, names] : functions) {
    // Linker-defined labels past the end of their section (_etext) name no code. (clang 14,
    // the fuzz preset's, cannot capture a structured binding: the lambda takes a copy.)
    const bool in_code =
        std::any_of(sections.begin(), sections.end(), [&, address = address](const Section& s) {
          return s.code && address >= s.begin && address < s.end;
        });
    if (!in_code) continue;
    const int s = image.SymbolAt(address);
    ASSERT_GE(s, 0) << fmt::format("{:#x} {}", address, *names.begin());
    EXPECT_EQ(image.symbols()[s].begin, address) << *names.begin();
    EXPECT_TRUE(names.contains(image.symbols()[s].name)) << fmt::format(
        "{:#x}: {} is not among nm's {}", address, image.symbols()[s].name, fmt::join(names, ", "));
    ++checked;
  }
  EXPECT_GT(checked, 4u) << path;
}

TEST(SymbolsTest, EveryFunctionNmPrintsResolvesToItsName) {
  if (!HaveBinutils()) GTEST_SKIP() << "nm (binutils) is not installed";
  for (const std::string& program : kPltPrograms) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    auto image = ElfImage(path, "/nonexistent");
    ASSERT_NE(image, nullptr);
    ExpectNmFunctionsResolve(*image, path, "");
    // _init (size 0) covers .init, and no further.
    for (const Section& section : ObjdumpSections(path)) {
      if (section.name != ".init") continue;
      EXPECT_EQ(NameAt(*image, section.end - 1), "_init");
      EXPECT_EQ(NameAt(*image, section.end), "");  // padding up to .plt
    }
  }
}

// A function of a version not its name's default (readelf's "memcpy@GLIBC_2.2.5", glibc's
// compatibility symbols) is not named as its name's default version at another address
// ("memcpy@@GLIBC_2.14"): sweep 34b F8, both were "memcpy", two rows of one name in stats.
// With libc's .dynsym alone it is NAME@VERSION, as readelf and perf name it; with its debug
// file (libc6-dbg) an alias without a version may name it.
TEST(SymbolsTest, ACompatibilityVersionIsNotNamedAsTheDefault) {
  if (!HaveBinutils()) GTEST_SKIP() << "readelf (binutils) is not installed";
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  if (!fs::exists(libc)) GTEST_SKIP() << libc << " is not installed";
  // readelf: "  2725: 00000000000a2d70    40 FUNC    GLOBAL DEFAULT   16 memcpy@GLIBC_2.2.5"
  std::map<std::string, uint64_t> hidden, defaults;  // NAME@VERSION / NAME -> address
  std::istringstream text(ToolOutput({"readelf", "-W", "--dyn-syms", libc}));
  static const std::regex kRow(
      R"re(^ *\d+: ([0-9a-f]+) +\d+ (FUNC|IFUNC) +\S+ +\S+ +\d+ ([^@ ]+)(@@?)([^ ]+).*$)re");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (!std::regex_match(line, m, kRow)) continue;
    const uint64_t address = std::stoull(m[1], nullptr, 16);
    if (m[4] == "@@") {
      defaults[m[3]] = address;
    } else {
      hidden[m[3].str() + "@" + m[5].str()] = address;
    }
  }
  for (const std::string sysroot : {"/nonexistent", ""}) {
    SCOPED_TRACE(sysroot.empty() ? "with the debug file" : "without the debug file");
    auto image = ElfImage(libc, sysroot);
    ASSERT_NE(image, nullptr);
    size_t checked = 0;
    for (const auto& [versioned, address] : hidden) {
      const std::string name = versioned.substr(0, versioned.find('@'));
      auto other = defaults.find(name);
      if (other == defaults.end() || other->second == address) continue;
      EXPECT_NE(NameAt(*image, address), NameAt(*image, other->second)) << versioned;
      if (!sysroot.empty() && NameAt(*image, address).starts_with(name + "@")) ++checked;
      if (sysroot.empty()) ++checked;
    }
    EXPECT_TRUE(hidden.contains("memcpy@GLIBC_2.2.5") && defaults.contains("memcpy"));
    EXPECT_GT(checked, 0u);
  }
}

// ld.so's entry, _start, and where _dl_start returns to, _dl_start_user, are labels (STT_NOTYPE)
// in its debug file's .symtab: perf and gdb name that code by them.
TEST(SymbolsTest, LabelsInCodeNameTheLoadersEntry) {
  if (!HaveBinutils()) GTEST_SKIP() << "nm (binutils) is not installed";
  const std::string path = "/lib64/ld-linux-x86-64.so.2";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not installed";
  auto image = ElfImage(path, "");
  ASSERT_NE(image, nullptr);
  std::smatch m;
  const std::string notes = ToolOutput({"readelf", "-n", path});
  ASSERT_TRUE(std::regex_search(notes, m, std::regex("Build ID: ([0-9a-f]{3,})")));
  const std::string hex = m[1];
  const std::string debug =
      "/usr/lib/debug/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
  if (!fs::exists(debug)) GTEST_SKIP() << "no debug file for " << path << " (libc6-dbg)";
  ExpectNmFunctionsResolve(*image, path, debug);
  const std::string header = ToolOutput({"readelf", "-hW", path});
  ASSERT_TRUE(std::regex_search(header, m, std::regex("Entry point address: +0x([0-9a-f]+)")));
  const uint64_t entry = std::stoull(m[1], nullptr, 16);
  EXPECT_EQ(NameAt(*image, entry), "_start");
}

// The symbols of `image` named `name`.
std::vector<Symbol> SymbolsNamed(const ProgramImage& image, const std::string& name) {
  std::vector<Symbol> out;
  for (const Symbol& s : image.symbols()) {
    if (s.name == name) out.push_back(s);
  }
  return out;
}

// A stripped program has no symbol for main, so nothing ran "under main" (ptdecode diff's
// default) and its frame had no name. ptkit finds main where _start passes it to
// __libc_start_main, its extent in its .eh_frame FDE: for each way gcc links plt.c, main of the
// stripped copy is where, and as long as, the unstripped program's own symbol says (nm -S).
TEST(SymbolsTest, AStrippedProgramsMainIsFoundFromItsEntryCode) {
  if (!HaveBinutils()) GTEST_SKIP() << "nm and objcopy (binutils) are not installed";
  const std::string dir = FreshDir("stripped_main");
  std::vector<std::string> programs = kPltPrograms;
  programs.insert(programs.end(), {"plt_static", "plt_static_pie"});
  for (const std::string& program : programs) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    std::smatch m;
    const std::string nm = ToolOutput({"nm", "-S", "--defined-only", path});
    ASSERT_TRUE(std::regex_search(nm, m, std::regex("\\n([0-9a-f]+) ([0-9a-f]+) T main\\n")));
    const uint64_t address = std::stoull(m[1], nullptr, 16);
    const uint64_t size = std::stoull(m[2], nullptr, 16);
    const std::string stripped = absl::StrCat(dir, "/", program);
    ToolOutput({"objcopy", "--strip-all", path, stripped});
    ASSERT_TRUE(fs::exists(stripped));
    ASSERT_EQ(ToolOutput({"nm", stripped}), "");  // no symbols
    auto image = ElfImage(stripped, "/nonexistent");
    ASSERT_NE(image, nullptr);
    const std::vector<Symbol> mains = SymbolsNamed(*image, "main");
    ASSERT_THAT(mains, SizeIs(1));
    EXPECT_EQ(mains[0].begin, address);
    EXPECT_EQ(mains[0].end, address + size);
    // The unstripped program's own main, once.
    auto full = ElfImage(path, "/nonexistent");
    ASSERT_NE(full, nullptr);
    EXPECT_THAT(SymbolsNamed(*full, "main"), SizeIs(1));
  }
}

// MiniDebugInfo (Fedora's and RHEL's programs): stripped, with the functions .dynsym lacks in
// the xz-compressed ELF of .gnu_debugdata, made as gdb's manual says ("MiniDebugInfo"). Without
// a debug file its .symtab names them, as gdb names them: each function nm prints for the
// unstripped program resolves to its name (sweep 38a F6: they were sub_ADDRESS).
TEST(SymbolsTest, MiniDebugInfoNamesAStrippedProgramsFunctions) {
  if (!HaveBinutils()) GTEST_SKIP() << "nm, objcopy and strip (binutils) are not installed";
  if (ToolOutput({"xz", "--version"}).empty()) GTEST_SKIP() << "xz (xz-utils) is not installed";
  const std::string dir = FreshDir("minidebuginfo");
  for (const std::string program : {"plt_pie", "plt_nopie"}) {
    SCOPED_TRACE(program);
    const std::string path = absl::StrCat(kDir, "/", program, ".elf");
    const std::string mini = absl::StrCat(dir, "/", program);
    const std::string script = absl::StrCat(
        "set -e; cd '", dir, "'; cp '", path, "' ", program, "; P=", program, "\n",
        "nm -D $P --format=posix --defined-only | awk '{ print $1 }' | sort > $P.dynsyms\n",
        "nm $P --format=posix --defined-only | awk '{ if ($2 == \"T\" || $2 == \"t\" || $2 == "
        "\"D\") print $1 }' | sort > $P.funcsyms\n",
        "comm -13 $P.dynsyms $P.funcsyms > $P.keep\n", "objcopy --only-keep-debug $P $P.mini\n",
        "objcopy -S --remove-section .gdb_index --remove-section .comment "
        "--keep-symbols=$P.keep $P.mini\n",
        "strip --strip-all -R .comment $P\n", "xz -f $P.mini\n",
        "objcopy --add-section .gnu_debugdata=$P.mini.xz $P\n");
    auto made = ::ptkit::testing::RunCommand({"/bin/sh", "-c", script});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    ASSERT_THAT(ToolOutput({"readelf", "-SW", mini}), ::testing::HasSubstr(".gnu_debugdata"));
    ASSERT_EQ(ToolOutput({"nm", mini}), "");  // no .symtab
    auto image = ElfImage(mini, "/nonexistent");
    ASSERT_NE(image, nullptr);
    ExpectNmFunctionsResolve(*image, mini, path);
    // plt.c's static Compare and global Sum are in neither .dynsym nor anywhere else.
    EXPECT_THAT(SymbolsNamed(*image, "Compare"), SizeIs(1));
    EXPECT_THAT(SymbolsNamed(*image, "Sum"), SizeIs(1));
  }
}

// Debian's programs are all stripped: main is the address _start loads into %rdi before its
// call (objdump's annotation of the lea), up to the end of the FDE that starts there (readelf's
// .eh_frame dump). A library has no main (libc's entry prints its version).
TEST(SymbolsTest, ADebianProgramsMainIsWhereStartPassesItAndEndsWithItsFde) {
  if (!HaveBinutils()) GTEST_SKIP() << "objdump and readelf (binutils) are not installed";
  int checked = 0;
  for (const std::string path : {"/usr/bin/expr", "/usr/bin/ls", "/bin/true", "/usr/bin/sort"}) {
    if (!fs::exists(path)) continue;
    SCOPED_TRACE(path);
    std::smatch m;
    const std::string header = ToolOutput({"readelf", "-hW", path});
    ASSERT_TRUE(std::regex_search(header, m, std::regex("Entry point address: +0x([0-9a-f]+)")));
    const uint64_t entry = std::stoull(m[1], nullptr, 16);
    const std::string start =
        ToolOutput({"objdump", "-d", fmt::format("--start-address={:#x}", entry),
                    fmt::format("--stop-address={:#x}", entry + 48), path});
    ASSERT_TRUE(
        std::regex_search(start, m, std::regex("lea +-?0x[0-9a-f]+\\(%rip\\),%rdi +# ([0-9a-f]+)")))
        << start;
    const uint64_t address = std::stoull(m[1], nullptr, 16);
    const std::string frames = ToolOutput({"readelf", "--debug-dump=frames", path});
    ASSERT_TRUE(std::regex_search(
        frames, m,
        std::regex(fmt::format("FDE cie=[0-9a-f]+ pc=0*{:x}\\.\\.([0-9a-f]+)", address))));
    const uint64_t end = std::stoull(m[1], nullptr, 16);
    auto image = ElfImage(path, "/nonexistent");
    ASSERT_NE(image, nullptr);
    const std::vector<Symbol> mains = SymbolsNamed(*image, "main");
    ASSERT_THAT(mains, SizeIs(1));
    EXPECT_EQ(mains[0].begin, address);
    EXPECT_EQ(mains[0].end, end);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no Debian program found";
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  if (fs::exists(libc)) {
    auto image = ElfImage(libc, "/nonexistent");
    ASSERT_NE(image, nullptr);
    EXPECT_THAT(SymbolsNamed(*image, "main"), IsEmpty());
  }
}

}  // namespace
}  // namespace ptkit::decoder
