// Test helpers: binutils as the oracle (objdump, readelf, nm), and a program mapped as ld.so maps
// it, for the symbol and --srcline tests.
#ifndef PTKIT_TESTS_UNIT_DECODER_ELF_ORACLE_H_
#define PTKIT_TESTS_UNIT_DECODER_ELF_ORACLE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "decoder/image.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "status_matchers.h"

namespace ptkit::decoder::testing {

// The standard output of a binutils tool (found on PATH), "" when it fails.
inline std::string ToolOutput(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "/usr/bin/env");
  ::ptkit::testing::CommandResult r = ::ptkit::testing::RunCommand(argv);
  return r.exit_code == 0 ? r.out : "";
}

inline bool HaveBinutils() { return !ToolOutput({"objdump", "--version"}).empty(); }

// The GNU_IFUNC symbol of each address of `path` (`readelf -sW`, .symtab and .dynsym), the one
// perf prefers among several (tools/perf/util/symbol.c choose_best_symbol: sized, not weak,
// global, fewer leading underscores, the longer name).
inline std::map<uint64_t, std::string> ReadelfIfuncs(const std::string& path) {
  using Key = std::tuple<bool, bool, bool, size_t, int64_t>;  // smaller is better
  std::map<uint64_t, std::pair<Key, std::string>> best;
  std::istringstream text(ToolOutput({"readelf", "-sW", path}));
  // "  1749: 000000000041deb0   246 IFUNC   GLOBAL DEFAULT    7 __new_memcpy"
  static const std::regex kRow(
      R"re(^ *\d+: ([0-9a-f]+) +(\d+) IFUNC +(\S+) +\S+ +\d+ ([^@ ]+).*$)re");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (!std::regex_match(line, m, kRow)) continue;
    const std::string name = m[4];
    const Key key{m[2] == "0", m[3] == "WEAK", m[3] != "GLOBAL",
                  std::min(name.find_first_not_of('_'), name.size()),
                  -static_cast<int64_t>(name.size())};
    auto [at, added] = best.try_emplace(std::stoull(m[1], nullptr, 16), key, name);
    if (!added && key < at->second.first) at->second = {key, name};
  }
  std::map<uint64_t, std::string> out;
  for (const auto& [address, b] : best) out[address] = b.second;
  return out;
}

// The `<X@plt>` labels of `objdump -d -C`: the PLT entries as gdb and objdump name them; but an
// IRELATIVE entry that objdump calls *ABS*+0xRESOLVER@plt is the IFUNC symbol at RESOLVER's
// (readelf), as perf names it since 6.3: objdump's name moved with every build.
inline std::map<uint64_t, std::string> ObjdumpPltNames(const std::string& path) {
  std::map<uint64_t, std::string> out;
  std::istringstream text(ToolOutput({"objdump", "-d", "-C", path}));
  static const std::regex kLabel("^([0-9a-f]+) <(.*@plt)>:$");
  static const std::regex kAbs(R"re(^\*ABS\*\+0x([0-9a-f]+)@plt$)re");
  std::map<uint64_t, std::string> ifuncs;
  bool read_ifuncs = false;
  std::smatch m, a;
  for (std::string line; std::getline(text, line);) {
    if (!std::regex_match(line, m, kLabel)) continue;
    std::string name = m[2];
    if (const std::string label = name; std::regex_match(label, a, kAbs)) {
      if (!read_ifuncs) {
        ifuncs = ReadelfIfuncs(path);
        read_ifuncs = true;
      }
      if (auto f = ifuncs.find(std::stoull(a[1], nullptr, 16)); f != ifuncs.end()) {
        name = f->second + "@plt";
      }
    }
    out[std::stoull(m[1], nullptr, 16)] = name;
  }
  return out;
}

struct Section {
  std::string name;
  uint64_t begin = 0, end = 0;
  bool code = false;
};

// The allocated sections of `path` from `objdump -h`.
inline std::vector<Section> ObjdumpSections(const std::string& path) {
  std::vector<Section> out;
  std::istringstream text(ToolOutput({"objdump", "-h", "-w", path}));
  static const std::regex kRow(
      "^ *[0-9]+ +(\\S+) +([0-9a-f]+) +([0-9a-f]+) +[0-9a-f]+ +[0-9a-f]+ +\\S+ +(.*)$");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (!std::regex_match(line, m, kRow)) continue;
    const std::string flags = m[4];
    if (flags.find("ALLOC") == std::string::npos) continue;
    const uint64_t begin = std::stoull(m[3], nullptr, 16);
    out.push_back({m[1], begin, begin + std::stoull(m[2], nullptr, 16),
                   flags.find("CODE") != std::string::npos});
  }
  return out;
}

// An image of `path` mapped as ld.so maps it: each PT_LOAD segment's pages at `base` + its page
// address, through AddFileMapping (what a recording's MMAP2 records give). `base` is 0 for a
// program that is not position independent.
inline std::unique_ptr<ProgramImage> LoaderMappedImage(const std::string& path, uint64_t base) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, ::ptkit::testing::IsOk());
  if (!image.ok()) return nullptr;
  (*image)->set_sysroot("/nonexistent");
  std::istringstream text(ToolOutput({"readelf", "-lW", path}));
  static const std::regex kLoad(
      "^ *LOAD +0x([0-9a-f]+) +0x([0-9a-f]+) +0x[0-9a-f]+ +0x([0-9a-f]+) +0x[0-9a-f]+ .*$");
  std::smatch m;
  int segments = 0;
  for (std::string line; std::getline(text, line);) {
    if (!std::regex_match(line, m, kLoad)) continue;
    const uint64_t offset = std::stoull(m[1], nullptr, 16);
    const uint64_t vaddr = std::stoull(m[2], nullptr, 16);
    const uint64_t filesz = std::stoull(m[3], nullptr, 16);
    const uint64_t page = vaddr & ~uint64_t{0xfff};
    const uint64_t len = (vaddr + filesz - page + 0xfff) & ~uint64_t{0xfff};
    EXPECT_THAT((*image)->AddFileMapping(path, base + page, len, offset & ~uint64_t{0xfff}),
                ::ptkit::testing::IsOk());
    ++segments;
  }
  EXPECT_GE(segments, 2) << path;
  return std::move(*image);
}

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_ELF_ORACLE_H_
