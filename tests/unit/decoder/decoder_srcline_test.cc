// --srcline: file:line from DWARF (decoder/srcline.h), checked against binutils' addr2line on
// the same program built with -g (tiny_dwarf.elf), at its own addresses and relocated.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"
#include "elf_oracle.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "run_command.h"
#include "status_matchers.h"
#include "test_io.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::ReadAll;
using ::ptkit::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using ::ptkit::decoder::testing::kDir;
const std::string kDwarf = kDir + "/tiny_dwarf.elf";
const std::string kNoDwarf = kDir + "/tiny.elf";

// addr2line's "file:line" for each address (link-time), "" where it knows none.
std::map<uint64_t, std::string> Addr2Line(const std::string& elf,
                                          const std::vector<uint64_t>& addresses) {
  std::string cmd = "addr2line -e " + elf;
  for (uint64_t a : addresses) cmd += fmt::format(" {:#x}", a);
  std::map<uint64_t, std::string> out;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[4096];
  for (uint64_t a : addresses) {
    if (std::fgets(line, sizeof(line), p) == nullptr) break;
    std::string s(line);
    s = s.substr(0, s.find_first_of(" \n"));  // drops " (discriminator N)"
    out[a] = s.rfind("??", 0) == 0 || s.ends_with(":?") || s.ends_with(":0") ? "" : s;
  }
  pclose(p);
  return out;
}

// Every instruction address of the .text of `elf`, as objdump disassembles it.
std::vector<uint64_t> TextAddresses(const std::string& elf) {
  std::vector<uint64_t> ips;
  std::istringstream text(testing::ToolOutput({"objdump", "-d", "--section=.text", elf}));
  static const std::regex kInsn("^ *([0-9a-f]+):\t.*$");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (std::regex_match(line, m, kInsn)) ips.push_back(std::stoull(m[1], nullptr, 16));
  }
  return ips;
}

class SrclineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("addr2line --version >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "addr2line (binutils) is not installed";
    }
    auto code = ElfCode::Load(kDwarf);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    // The instructions of a walk: addresses that start instructions, in several functions.
    PtSynth synth(*code_);
    auto ips =
        synth.AddSegment({.entry = code_->Symbol("work").address, .seed = 21, .max_insns = 2000});
    ASSERT_THAT(ips, IsOk());
    trace_ = synth.bytes();
    for (uint64_t ip : *ips) unique_[ip] = true;
    for (const auto& [ip, _] : unique_) ips_.push_back(ip);
    expected_ = Addr2Line(kDwarf, ips_);
    ASSERT_EQ(expected_.size(), ips_.size());
  }
  std::unique_ptr<ProgramImage> Image(const std::string& path, uint64_t base) {
    auto image = ProgramImage::Create();
    EXPECT_THAT(image, IsOk());
    EXPECT_THAT((*image)->AddElf({path, base}), IsOk());
    return std::move(*image);
  }

  // A copy of tiny_dwarf.elf without `section`, at a temporary path named `name` ("": failed).
  static std::string WithoutSection(const std::string& section, const std::string& name) {
    const std::string path = ::ptkit::decoder::testing::TempPath(name);
    auto strip = ::ptkit::testing::RunCommand(
        {"/usr/bin/env", "objcopy", "--remove-section=" + section, kDwarf, path});
    EXPECT_EQ(strip.exit_code, 0) << strip.err;
    return strip.exit_code == 0 ? path : "";
  }

  std::unique_ptr<ElfCode> code_;
  std::vector<uint8_t> trace_;
  std::map<uint64_t, bool> unique_;
  std::vector<uint64_t> ips_;
  std::map<uint64_t, std::string> expected_;
};

TEST_F(SrclineTest, MatchesAddr2LineAtTheLinkAddressesAndRelocated) {
  size_t known = 0;
  for (const auto& [ip, text] : expected_) known += text.empty() ? 0 : 1;
  ASSERT_GT(known, ips_.size() / 2);  // the walk is in code with line information

  auto image = Image(kDwarf, 0);
  SourceLines lines(nullptr);
  for (uint64_t ip : ips_) {
    const std::string* text = lines.Lookup(*image, ip);
    EXPECT_EQ(text == nullptr ? "" : *text, expected_[ip]) << fmt::format("{:#x}", ip);
  }

  // Loaded elsewhere: the same answers at the relocated addresses.
  auto moved = Image(kDwarf, 0x7f0000400000);
  const uint64_t leaf = code_->Symbol("leaf").address;
  int64_t bias = 0;
  for (const Symbol& s : moved->symbols()) {
    if (s.name == "leaf") bias = static_cast<int64_t>(s.begin - leaf);
  }
  ASSERT_NE(bias, 0);
  SourceLines moved_lines(nullptr);
  for (uint64_t ip : ips_) {
    const std::string* text = moved_lines.Lookup(*moved, ip + bias);
    EXPECT_EQ(text == nullptr ? "" : *text, expected_[ip]) << fmt::format("{:#x}", ip);
  }
  // Cached: the same string for the same address.
  EXPECT_EQ(moved_lines.Lookup(*moved, leaf + bias), moved_lines.Lookup(*moved, leaf + bias));
  EXPECT_TRUE(moved_lines.files_without_lines().empty());
}

TEST_F(SrclineTest, AFileWithoutDwarfIsReportedOnceAndGivesNoLines) {
  auto image = Image(kNoDwarf, 0);
  std::FILE* diag = std::tmpfile();
  SourceLines lines(diag);
  auto code = ElfCode::Load(kNoDwarf);
  ASSERT_THAT(code, IsOk());
  EXPECT_EQ(lines.Lookup(*image, code->Symbol("leaf").address), nullptr);
  EXPECT_EQ(lines.Lookup(*image, code->Symbol("work").address), nullptr);
  EXPECT_EQ(lines.Lookup(*image, 0x10), nullptr);  // unmapped
  EXPECT_THAT(lines.files_without_lines(), ElementsAre(kNoDwarf));
  std::string text = ReadAll(diag);
  EXPECT_EQ(std::fclose(diag), 0);
  EXPECT_EQ(text, "ptdecode: warning: --srcline: " + kNoDwarf +
                      " has no DWARF line information (no file:line for its code)\n");
}

// DWARF without line tables (here removed from tiny_dwarf.elf) gives no file:line either: it is
// reported like a file without DWARF, not left silent.
TEST_F(SrclineTest, AFileWhoseDwarfHasNoLineTableIsReported) {
  const std::string path = WithoutSection(".debug_line", "no_lines.elf");
  ASSERT_FALSE(path.empty());
  auto image = Image(path, 0);
  std::FILE* diag = std::tmpfile();
  SourceLines lines(diag);
  for (uint64_t ip : ips_) EXPECT_EQ(lines.Lookup(*image, ip), nullptr);
  EXPECT_THAT(lines.files_without_lines(), ElementsAre(path));
  EXPECT_THAT(ReadAll(diag), HasSubstr(path + " has no DWARF line information"));
  EXPECT_EQ(std::fclose(diag), 0);
  (void)std::remove(path.c_str());
}

// Without .debug_aranges (clang writes none unless -gdwarf-aranges; here removed from
// tiny_dwarf.elf), the units' own address ranges find the line: addr2line's answers still.
TEST_F(SrclineTest, AFileWithoutDebugArangesStillGivesItsLines) {
  const std::string path = WithoutSection(".debug_aranges", "no_aranges.elf");
  ASSERT_FALSE(path.empty());
  auto image = Image(path, 0);
  SourceLines lines(nullptr);
  size_t known = 0;
  for (uint64_t ip : ips_) {
    const std::string* text = lines.Lookup(*image, ip);
    EXPECT_EQ(text == nullptr ? "" : *text, expected_[ip]) << fmt::format("{:#x}", ip);
    known += text == nullptr ? 0 : 1;
  }
  EXPECT_GT(known, ips_.size() / 2);
  EXPECT_EQ(lines.Lookup(*image, 0x10), nullptr);  // unmapped
  EXPECT_TRUE(lines.files_without_lines().empty());
  (void)std::remove(path.c_str());
}

TEST_F(SrclineTest, InsnBranchesAndCallsPrintFileLine) {
  auto image = Image(kDwarf, 0);
  auto decode = [&](auto make, bool json) {
    std::FILE* out = std::tmpfile();
    std::FILE* diag = std::tmpfile();
    OutputOptions options;
    options.json = json;
    options.srcline = true;
    options.diagnostics = diag;
    auto sink = make(*image, out, options);
    EXPECT_THAT(DecodeTrace(trace_, {}, *image, *sink), IsOk());
    std::string text = ReadAll(out);
    EXPECT_EQ(ReadAll(diag), "");
    EXPECT_EQ(std::fclose(out), 0);
    EXPECT_EQ(std::fclose(diag), 0);
    return text;
  };
  // insn: " (file:line)" ends each instruction line whose address has one.
  size_t checked = 0;
  std::istringstream insn(decode(MakeInsnSink, false));
  for (std::string line; std::getline(insn, line);) {
    if (line[0] == '[') continue;
    const uint64_t ip = std::stoull(line.substr(0, 16), nullptr, 16);
    if (expected_[ip].empty()) {
      EXPECT_THAT(line, Not(HasSubstr("(")));
    } else {
      EXPECT_TRUE(line.ends_with("  (" + expected_[ip] + ")")) << line;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
  std::istringstream insn_json(decode(MakeInsnSink, true));
  for (std::string line; std::getline(insn_json, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("sym")) continue;
    const uint64_t ip = std::stoull(j["ip"].get<std::string>(), nullptr, 16);
    EXPECT_EQ(j.value("srcline", ""), expected_[ip]);
  }
  // branches: both ends.
  std::istringstream branches(decode(MakeBranchesSink, true));
  checked = 0;
  for (std::string line; std::getline(branches, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("from")) continue;
    const uint64_t from = std::stoull(j["from"].get<std::string>(), nullptr, 16);
    EXPECT_EQ(j.value("from_srcline", ""), expected_[from]);
    if (j["to"].is_string()) {
      const uint64_t to = std::stoull(j["to"].get<std::string>(), nullptr, 16);
      if (unique_.contains(to)) {
        EXPECT_EQ(j.value("to_srcline", ""), expected_[to]);
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0u);
  // calls: where each called function starts.
  std::istringstream calls(decode(MakeCallsSink, true));
  checked = 0;
  for (std::string line; std::getline(calls, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("call")) continue;
    const uint64_t entry = std::stoull(j["address"].get<std::string>(), nullptr, 16);
    EXPECT_EQ(j.value("srcline", ""), expected_[entry]);
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

// A user's own `gcc -O1 -g` program, linked with crt files that have no DWARF (_init, the
// lowest symbol, is theirs): every instruction of its .text gets addr2line's file:line, at the
// link addresses and mapped as ld.so maps it, and no warning is printed.
TEST(SrclineProgramTest, AnOrdinaryProgramsLinesAreAddr2Lines) {
  if (std::system("addr2line --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "addr2line (binutils) is not installed";
  }
  for (const auto& [program, base] : std::vector<std::pair<std::string, uint64_t>>{
           {"plt_pie", 0x555555554000}, {"plt_nopie", 0}, {"plt_ibt", 0x7f0000200000}}) {
    SCOPED_TRACE(program);
    const std::string path = fmt::format("{}/{}.elf", kDir, program);
    const std::vector<uint64_t> ips = TextAddresses(path);
    ASSERT_GT(ips.size(), 40u);
    std::map<uint64_t, std::string> want = Addr2Line(path, ips);
    size_t known = 0;
    for (const auto& [ip, line] : want) known += line.empty() ? 0 : 1;
    ASSERT_GT(known, 20u);  // main, Sum and Compare

    std::unique_ptr<ProgramImage> linked = std::move(*ProgramImage::Create());
    ASSERT_THAT(linked->AddElf({path}), IsOk());
    std::unique_ptr<ProgramImage> mapped = testing::LoaderMappedImage(path, base);
    ASSERT_NE(mapped, nullptr);
    for (const auto& [image, bias] :
         {std::pair{linked.get(), uint64_t{0}}, std::pair{mapped.get(), base}}) {
      std::FILE* diag = std::tmpfile();
      SourceLines lines(diag);
      size_t answered = 0;
      for (uint64_t ip : ips) {
        const std::string* got = lines.Lookup(*image, ip + bias);
        EXPECT_EQ(got == nullptr ? "" : *got, want[ip]) << fmt::format("{:#x}", ip);
        answered += got != nullptr;
      }
      EXPECT_EQ(answered, known);
      EXPECT_EQ(ReadAll(diag), "");
      EXPECT_THAT(lines.files_without_lines(), ::testing::IsEmpty());
      EXPECT_EQ(std::fclose(diag), 0);
    }
  }
}

// A program built from a relative source path (`gcc -g src/rel.c` in its directory): each line
// as addr2line prints it, the name joined to the compilation directory; none where addr2line
// knows no line ("FILE:?", "??:0"; sweep 28a F3: "src/rel.c:8", line-0 rows as "FILE:0").
// Also a compilation directory that is relative itself (-fdebug-prefix-map, as glibc's units
// are "./math"; sweep 34b F7: the name was printed alone), and line tables in .zdebug_line.
TEST(SrclineProgramTest, RelativeSourcesAreJoinedToTheirDirectoryAsAddr2LineDoes) {
  if (std::system("addr2line --version >/dev/null 2>&1") != 0 ||
      std::system("gcc --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "addr2line or gcc is not installed";
  }
  const std::string dir = std::filesystem::path(::ptkit::decoder::testing::TempPath("srcline_rel"))
                              .lexically_normal()
                              .string();
  std::filesystem::create_directories(dir + "/src");
  std::ofstream(dir + "/src/rel.c") << R"(#include <stdlib.h>
__attribute__((noinline)) static int twice(int x) { return x * 2; }
int main(int argc, char** argv) {
  int s = 0;
  for (int i = 0; i < argc * 100; ++i) s += twice(i) + (argv[0][i % 3] == 'x');
  if (s == 42) abort();
  return s & 1;
}
)";
  // (The third: GNU's compressed .zdebug_line, which ptkit's line-program reader missed; a
  // review. binutils 2.40's addr2line reads none of it: the same code's lines uncompressed,
  // the first build's, are the answer.)
  // (The fourth: a DWARF 4 unit compiled in its source's directory whose compilation directory
  // is "." (-ffile-prefix-map=DIR=.), where libdw's file names hold it already: "./rel.c", as
  // addr2line prints it; sweep 38a F7: "././rel.c".)
  const std::string in_src = "cd '" + dir +
                             "/src' && gcc -O2 -g -gdwarf-4 -ffile-prefix-map=" + dir +
                             "/src=. rel.c -o ../rel";
  std::map<uint64_t, std::string> uncompressed;
  for (const std::string& map :
       {std::string(), " -fdebug-prefix-map=" + dir + "=./build",
        std::string(" && objcopy --compress-debug-sections=zlib-gnu rel"), in_src}) {
    SCOPED_TRACE(map);
    std::string build = in_src;
    if (map != in_src) {
      build = "cd '" + dir + "' && gcc -O2 -g src/rel.c -o rel";
      build += map;
    }
    auto cc = ::ptkit::testing::RunCommand({"/bin/sh", "-c", build});
    ASSERT_EQ(cc.exit_code, 0) << cc.err;
    const std::string path = dir + "/rel";
    const std::vector<uint64_t> ips = TextAddresses(path);
    std::string cmd = "addr2line -e " + path;
    for (uint64_t a : ips) cmd += fmt::format(" {:#x}", a);
    std::istringstream want(testing::ToolOutput({"/bin/sh", "-c", cmd}));
    std::unique_ptr<ProgramImage> image = std::move(*ProgramImage::Create());
    ASSERT_THAT(image->AddElf({path}), IsOk());
    SourceLines lines(nullptr);
    size_t joined = 0;
    for (uint64_t ip : ips) {
      std::string expected;
      ASSERT_TRUE(std::getline(want, expected));
      expected = expected.substr(0, expected.find(" ("));  // " (discriminator N)"
      if (expected.starts_with("??") || expected.ends_with(":?")) expected.clear();
      if (map.empty()) uncompressed[ip] = expected;
      if (map.find("zlib-gnu") != std::string::npos) expected = uncompressed[ip];
      const std::string* got = lines.Lookup(*image, ip);
      EXPECT_EQ(got == nullptr ? "" : *got, expected) << fmt::format("{:#x}", ip);
      const std::string prefix = map.find("=./build") != std::string::npos ? "./build/src"
                                 : map == in_src                           ? "."
                                                                           : dir + "/src";
      joined += expected.starts_with(prefix + "/rel.c:");
    }
    EXPECT_GT(joined, 5u);
  }
  std::filesystem::remove_all(dir);
}

// The source file of a function is its own, where addr2line -i's last frame and gdb put it, not
// that of a function inlined at its first instruction (sweep 38a F3: two static `helper`s of
// x.c and y.c that begin with an inline function of a header were both the header's, so diff
// summed them into one row and a 2x regression of one passed the gate).
TEST(SrclineProgramTest, AFunctionsSourceIsItsOwnNotItsInlinedCodes) {
  if (std::system("addr2line --version >/dev/null 2>&1") != 0 ||
      std::system("gcc --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "addr2line or gcc is not installed";
  }
  const std::string dir = std::filesystem::path(::ptkit::decoder::testing::TempPath("srcline_fn"))
                              .lexically_normal()
                              .string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/inl.h") << "static inline int first(const int* p) { return p[0] * 3; }\n";
  for (const char* unit : {"x", "y"}) {
    std::ofstream(fmt::format("{}/{}.c", dir, unit)) << fmt::format(
        "#include \"inl.h\"\n"
        "__attribute__((noinline)) static int helper(const int* p, int n) {{\n"
        "  int s = first(p);\n"
        "  for (int i = 1; i < n; ++i) s += p[i] {};\n"
        "  return s;\n"
        "}}\n"
        "int {}_run(const int* p, int n) {{ return helper(p, n) + 1; }}\n",
        unit[0] == 'x' ? "* 2" : "^ 5", unit);
  }
  std::ofstream(dir + "/m.c") << "int x_run(const int*, int); int y_run(const int*, int);\n"
                                 "int main(int c, char** v) { int a[4] = {c, 2, 3, 4};\n"
                                 "  return x_run(a, c + 3) + y_run(a, c + 2); }\n";
  auto cc = ::ptkit::testing::RunCommand(
      {"/bin/sh", "-c", "cd '" + dir + "' && gcc -O2 -g -o prog m.c x.c y.c"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  const std::string path = dir + "/prog";
  std::unique_ptr<ProgramImage> image = std::move(*ProgramImage::Create());
  ASSERT_THAT(image->AddElf({path}), IsOk());
  SourceLines lines(nullptr);
  std::vector<std::string> sources;
  for (const Symbol& sym : image->symbols()) {
    if (sym.name != "helper") continue;
    // The case: addr2line puts the first instruction in the header; -i's last frame, the
    // function's own file.
    const std::string line =
        testing::ToolOutput({"addr2line", "-e", path, fmt::format("{:#x}", sym.begin)});
    ASSERT_TRUE(line.starts_with(dir + "/inl.h:")) << line;
    std::istringstream frames(
        testing::ToolOutput({"addr2line", "-i", "-e", path, fmt::format("{:#x}", sym.begin)}));
    std::string last;
    for (std::string frame; std::getline(frames, frame);) last = frame;
    const std::string* got = lines.FunctionSource(*image, sym.begin);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(*got, last.substr(0, last.find(':')));
    sources.push_back(*got);
  }
  EXPECT_THAT(sources, ::testing::UnorderedElementsAre(dir + "/x.c", dir + "/y.c"));
  std::filesystem::remove_all(dir);
}

// A PIE built with -ffunction-sections -Wl,--gc-sections whose unit also had a large function
// the linker discarded: ld relocates that function's line sequence to address 0, over the
// unit's real code (sweep 34b F5: 41 of 100 addresses of `used` and `main` got lines of the
// discarded function, 107-117 for 606-607). Each instruction's line as gdb's `info line` says
// (binutils' addr2line 2.40 is wrong here, as ptdecode was).
TEST(SrclineProgramTest, DiscardedCodesLinesDoNotNameLiveCode) {
  if (std::system("gdb --version >/dev/null 2>&1") != 0 ||
      std::system("gcc --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gdb or gcc is not installed";
  }
  const std::string dir =
      std::filesystem::path(::ptkit::decoder::testing::TempPath("srcline_gc")).lexically_normal();
  std::filesystem::create_directories(dir);
  {
    std::ofstream c(dir + "/gc.c");
    c << "volatile int sink;\nint unused_big(int x) {\n";
    for (int i = 0; i < 600; ++i) {
      c << fmt::format("  sink = x * {} + sink; if (sink & {}) x ^= sink >> 3;\n", i + 3, i + 1);
    }
    c << "  return x; }\n"
         "__attribute__((noinline)) int used(int n) { int s = 0; for (int i = 0; i < n; i++) s "
         "+= i % 7; return s; }\n"
         "int main(int argc, char **argv) { return used(argc * 100) & 1; }\n";
  }
  auto cc = ::ptkit::testing::RunCommand(
      {"/bin/sh", "-c",
       "cd '" + dir +
           "' && gcc -O2 -g -fPIE -pie -ffunction-sections -Wl,--gc-sections gc.c -o gc"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  const std::string path = dir + "/gc";
  std::vector<uint64_t> ips;
  std::string gdb = "gdb -q -batch -nx";
  for (uint64_t ip : TextAddresses(path)) {
    ips.push_back(ip);
    gdb += fmt::format(" -ex 'info line *{:#x}'", ip);
  }
  std::istringstream want(testing::ToolOutput({"/bin/sh", "-c", gdb + " " + path}));
  std::unique_ptr<ProgramImage> image = std::move(*ProgramImage::Create());
  ASSERT_THAT(image->AddElf({path}), IsOk());
  SourceLines lines(nullptr);
  size_t compared = 0;
  const std::regex said(R"re(^Line (\d+) of "([^"]+)")re");
  for (uint64_t ip : ips) {
    std::string answer;
    ASSERT_TRUE(std::getline(want, answer));
    std::smatch m;
    // (gdb: "No line number information available for address ..." in crt code.)
    if (!std::regex_search(answer, m, said)) continue;
    const std::string* got = lines.Lookup(*image, ip);
    ASSERT_NE(got, nullptr) << answer;
    EXPECT_EQ(*got, fmt::format("{}/{}:{}", dir, m[2].str(), m[1].str())) << answer;
    ++compared;
  }
  EXPECT_GT(compared, 20u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptkit::decoder
