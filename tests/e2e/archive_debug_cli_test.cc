// SPDX-License-Identifier: Apache-2.0
//
// `ptrecord --archive` keeps the separate debug file of each archived file that has one (sweep
// 38a F2): a stripped program recorded with --archive (under --emulate=qemu) decodes with the
// same function names and --srcline lines once the program and its debug file are gone, or
// with --sysroot and --buildid-dir of an empty directory ("another machine": no files, no
// /usr/lib/debug, no perf build-id cache), as with them here; nm and
// addr2line on the unstripped build are the oracle. Skips where qemu-user is not installed.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/elf_file.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace archive_debug_test {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

// The rows of `ptdecode stats` output whose image is `image` ("SELF % TOTAL % CALLS NAME
// [IMAGE]"), the function names only (empty: code no symbol names), sorted.
std::vector<std::string> FunctionsOf(const std::string& stats, const std::string& image) {
  std::vector<std::string> out;
  const std::string tag = " [" + image + "]";
  std::istringstream lines(stats);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || !line.ends_with(tag)) continue;
    std::vector<std::string> f =
        absl::StrSplit(line.substr(0, line.size() - tag.size()), ' ', absl::SkipEmpty());
    if (f.size() < 5) continue;
    out.push_back(absl::StrJoin(f.begin() + 5, f.end(), " "));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The local functions ("t") of the unstripped build, as nm names them.
std::set<std::string> LocalFunctions(const std::string& program) {
  std::set<std::string> out;
  auto nm = RunCommand({SPLIT_DEBUG_NM, program});
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() == 3 && f[1] == "t" && !f[2].starts_with("_") && !f[2].starts_with("deregister") &&
        !f[2].starts_with("register_tm") && !f[2].starts_with("frame_dummy")) {
      out.insert(f[2]);
    }
  }
  return out;
}

// The addresses [first, end) of the functions of `program` (nm -S: not PIE, its addresses are
// the run-time ones).
std::pair<uint64_t, uint64_t> CodeRange(const std::string& program) {
  uint64_t first = ~uint64_t{0}, end = 0;
  auto nm = RunCommand({SPLIT_DEBUG_NM, "-S", program});
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() != 4 || (f[2] != "t" && f[2] != "T")) continue;
    const uint64_t at = std::stoull(f[0], nullptr, 16), size = std::stoull(f[1], nullptr, 16);
    first = std::min(first, at);
    end = std::max(end, at + size);
  }
  return {first, end};
}

// `ptdecode insn --srcline` lines of the code in [range.first, range.second): address ->
// "file:line" (the text in the last parentheses), those with a line only.
std::map<uint64_t, std::string> LinesOf(const std::string& insn,
                                        std::pair<uint64_t, uint64_t> range) {
  std::map<uint64_t, std::string> out;
  std::istringstream lines(insn);
  for (std::string line; std::getline(lines, line);) {
    if (!line.ends_with(")")) continue;
    std::optional<uint64_t> address;
    for (const std::string& token :
         std::vector<std::string>(absl::StrSplit(line, ' ', absl::SkipEmpty()))) {
      if (token.size() == 16 && token.find_first_not_of("0123456789abcdef") == std::string::npos) {
        address = std::stoull(token, nullptr, 16);
        break;
      }
    }
    if (!address || *address < range.first || *address >= range.second) continue;
    const size_t open = line.rfind(" (");
    if (open == std::string::npos) continue;
    const std::string where = line.substr(open + 2, line.size() - open - 3);
    if (where.find(':') == std::string::npos) continue;
    out.emplace(*address, where);
  }
  return out;
}

class ArchiveDebugCliTest : public ::testing::Test {
 protected:
  // Splits the unstripped build `full` as distributions do: DIR/NAME stripped, naming
  // NAME.debug (DIR/NAME.debug, its .symtab and DWARF) in .gnu_debuglink.
  std::string Split(const std::string& full, const std::string& name) {
    std::string program = dir_.File(name);
    const std::string debug = program + ".debug";
    auto keep = RunCommand({SPLIT_DEBUG_OBJCOPY, "--only-keep-debug", full, debug});
    EXPECT_EQ(keep.exit_code, 0) << keep.err;
    auto strip = RunCommand(
        {SPLIT_DEBUG_OBJCOPY, "--strip-all", "--add-gnu-debuglink=" + debug, full, program});
    EXPECT_EQ(strip.exit_code, 0) << strip.err;
    EXPECT_EQ(chmod(program.c_str(), 0755), 0);
    return program;
  }
  ::ptkit::testing::CommandResult Record(const std::string& trace,
                                         const std::vector<std::string>& command) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=qemu", "--archive", "-o", trace,
                                     "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    return RunCommand(argv);
  }
  // Records the split build of `full` with --archive, then decodes it with the program and its
  // debug file here, gone, and on "another machine" (--sysroot and --buildid-dir EMPTY): the
  // same names (nm's static functions among them, no sub_ADDRESS) and the same lines
  // (addr2line's).
  void ExpectNamesAndLinesWithoutTheFiles(const std::string& full, const std::string& name,
                                          bool with_build_id) {
    const std::string program = Split(full, name);
    const std::string trace = dir_.File(name + ".pt");
    auto rec = Record(trace, {program, "12"});
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    // Its debug file was found: no word of it as stripped without one.
    EXPECT_THAT(rec.err, Not(HasSubstr(program + ","))) << rec.err;
    EXPECT_FALSE(rec.err.ends_with(program + "\n")) << rec.err;

    auto here = RunCommand({PTDECODE_PATH, "stats", trace});
    ASSERT_EQ(here.exit_code, 0) << here.err;
    auto lines_here = RunCommand({PTDECODE_PATH, "insn", "--srcline", trace});
    ASSERT_EQ(lines_here.exit_code, 0) << lines_here.err;
    const std::vector<std::string> names = FunctionsOf(here.out, name);
    for (const std::string& fn : LocalFunctions(full)) {
      EXPECT_THAT(names, ::testing::Contains(fn)) << here.out;
    }
    for (const std::string& fn : names) EXPECT_THAT(fn, Not(HasSubstr("sub_"))) << here.out;
    const std::pair<uint64_t, uint64_t> range = CodeRange(full);
    const std::map<uint64_t, std::string> lines = LinesOf(lines_here.out, range);
    ASSERT_FALSE(lines.empty()) << lines_here.err;

    // addr2line on the unstripped build (not PIE: its addresses are the run-time ones), for a
    // few addresses of each function.
    std::vector<std::string> argv = {SPLIT_DEBUG_ADDR2LINE, "-e", full};
    std::vector<uint64_t> asked;
    for (auto it = lines.begin(); it != lines.end() && asked.size() < 40; ++it) {
      if (std::distance(lines.begin(), it) % 3 != 0) continue;
      asked.push_back(it->first);
      argv.push_back(absl::StrCat("0x", absl::Hex(it->first)));
    }
    auto a2l = RunCommand(argv);
    ASSERT_EQ(a2l.exit_code, 0) << a2l.err;
    std::vector<std::string> oracle = absl::StrSplit(a2l.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(oracle.size(), asked.size());
    for (size_t i = 0; i < asked.size(); ++i) {
      std::string expected = oracle[i].substr(0, oracle[i].find(" (discriminator"));
      EXPECT_EQ(lines.at(asked[i]), expected) << std::hex << asked[i];
    }

    // Gone: the program and its debug file moved away (the debug file beside its old path was
    // looked for beside /proc/self/fd/N before), and with --sysroot and --buildid-dir EMPTY, as
    // on another machine.
    const std::string empty = dir_.File("empty_" + name);
    std::filesystem::create_directory(empty);
    std::filesystem::rename(program, program + ".away");
    std::filesystem::rename(program + ".debug", program + ".debug.away");
    for (const std::vector<std::string>& options :
         {std::vector<std::string>{},
          std::vector<std::string>{"--sysroot", empty, "--buildid-dir", empty}}) {
      SCOPED_TRACE(options.empty() ? "files gone" : "--sysroot EMPTY --buildid-dir EMPTY");
      std::vector<std::string> stats = {PTDECODE_PATH, "stats", trace};
      stats.insert(stats.end(), options.begin(), options.end());
      auto there = RunCommand(stats);
      ASSERT_EQ(there.exit_code, 0) << there.err;
      EXPECT_EQ(FunctionsOf(there.out, name), names) << there.out;
      std::vector<std::string> insn = {PTDECODE_PATH, "insn", "--srcline", trace};
      insn.insert(insn.end(), options.begin(), options.end());
      auto lines_there = RunCommand(insn);
      ASSERT_EQ(lines_there.exit_code, 0) << lines_there.err;
      EXPECT_TRUE(LinesOf(lines_there.out, range) == lines) << lines_there.err;
      EXPECT_THAT(lines_there.err, Not(HasSubstr(name + " has no DWARF line information")));
    }
    // An export keeps them: to trace.pt, the debug files' records; to perf.data, each in the
    // build-id cache as NAME/BUILDID/debug (perf's copy of a debug file), where ptdecode
    // --buildid-dir finds it too. (Without a build-id a file has no place in that cache.)
    const std::string exported = dir_.File(name + "_export.pt");
    auto to_pt = RunCommand({PTDECODE_PATH, "export", "--to", "trace.pt", trace, "-o", exported});
    ASSERT_EQ(to_pt.exit_code, 0) << to_pt.err;
    auto exported_stats =
        RunCommand({PTDECODE_PATH, "stats", "--sysroot", empty, "--buildid-dir", empty, exported});
    EXPECT_EQ(FunctionsOf(exported_stats.out, name), names) << exported_stats.err;
    if (with_build_id) {
      const std::string perf_data = dir_.File(name + ".data");
      auto to_perf =
          RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", trace, "-o", perf_data});
      ASSERT_EQ(to_perf.exit_code, 0) << to_perf.err;
      auto perf_stats = RunCommand({PTDECODE_PATH, "stats", "--sysroot", empty, "--buildid-dir",
                                    perf_data + ".debug", perf_data});
      EXPECT_EQ(FunctionsOf(perf_stats.out, name), names) << perf_stats.err;
    }
    std::filesystem::rename(program + ".away", program);
    std::filesystem::rename(program + ".debug.away", program + ".debug");

    // info lists the debug file archived.
    auto info = RunCommand({PTDECODE_PATH, "info", trace});
    EXPECT_THAT(info.out, HasSubstr("debug file:  " + program + ".debug (")) << info.out;
    auto json = RunCommand({PTDECODE_PATH, "info", "--json", trace});
    const nlohmann::json j = nlohmann::json::parse(json.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << json.out;
    bool listed = false;
    for (const auto& d : j["code"]["debug_files"]) listed |= d["path"] == program + ".debug";
    EXPECT_TRUE(listed) << j["code"].dump();
  }
  ::ptkit::testing::TempDir dir_;
};

// With a build-id: the archived debug file is the one of the program's build-id.
TEST_F(ArchiveDebugCliTest, AStrippedProgramKeepsItsNamesAndLinesWithoutItsFiles) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectNamesAndLinesWithoutTheFiles(SPLIT_DEBUG_PROGRAM, "split", /*with_build_id=*/true);
}

// Without a build-id: the archived debug file is found by .gnu_debuglink's name and CRC-32.
TEST_F(ArchiveDebugCliTest, AStrippedProgramWithoutABuildIdKeepsItsNamesAndLines) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectNamesAndLinesWithoutTheFiles(SPLIT_DEBUG_PROGRAM_NOID, "split_noid",
                                     /*with_build_id=*/false);
}

// libc's and ld.so's functions on "another machine" (--sysroot and --buildid-dir EMPTY) are
// named as here, from their archived debug files (sweep 38a F2: 22 of libc's functions and 109
// of ld.so's were sub_ADDRESS).
TEST_F(ArchiveDebugCliTest, LibcAndTheLoaderKeepTheirNamesOnAnotherMachine) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const char* lib : {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(lib);
    if (!elf.ok() || elf->FindDebugFile("").empty()) {
      GTEST_SKIP() << lib << " has no debug file here (/usr/lib/debug/.build-id: Debian's "
                   << "libc6-dbg), so there are no names to keep";
    }
  }
  const std::string trace = dir_.File("libc.pt");
  auto rec = Record(trace, {SPLIT_DEBUG_PROGRAM, "3"});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const std::string empty = dir_.File("empty");
  std::filesystem::create_directory(empty);
  auto here = RunCommand({PTDECODE_PATH, "stats", trace});
  // (Another machine: nothing under the sysroot, and no build-id cache, where perf may have
  // put copies of these debug files: ~/.debug.)
  auto there =
      RunCommand({PTDECODE_PATH, "stats", "--sysroot", empty, "--buildid-dir", empty, trace});
  ASSERT_EQ(there.exit_code, 0) << there.err;
  for (const char* image : {"libc.so.6", "ld-linux-x86-64.so.2"}) {
    SCOPED_TRACE(image);
    const std::vector<std::string> names = FunctionsOf(here.out, image);
    EXPECT_GT(names.size(), 20u) << here.out;
    EXPECT_EQ(FunctionsOf(there.out, image), names);
  }
}

// A stripped file archived without a debug file is said once, by its path.
TEST_F(ArchiveDebugCliTest, AStrippedProgramWithoutADebugFileIsSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string bare = dir_.File("bare");
  auto strip = RunCommand({SPLIT_DEBUG_OBJCOPY, "--strip-all", SPLIT_DEBUG_PROGRAM, bare});
  ASSERT_EQ(strip.exit_code, 0) << strip.err;
  ASSERT_EQ(chmod(bare.c_str(), 0755), 0);
  auto rec = Record(dir_.File("bare.pt"), {bare, "3"});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_THAT(rec.err, HasSubstr("stripped (no .symtab) and no separate debug file was found"));
  EXPECT_THAT(rec.err, HasSubstr(bare)) << rec.err;
  EXPECT_THAT(rec.err, HasSubstr("sub_ADDRESS"));
}

}  // namespace archive_debug_test
}  // namespace ptkit
