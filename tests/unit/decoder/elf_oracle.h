// Test helpers: binutils as the oracle (objdump, readelf), and a program mapped as ld.so maps
// it, for the symbol and --srcline tests.
#ifndef PTKIT_TESTS_UNIT_DECODER_ELF_ORACLE_H_
#define PTKIT_TESTS_UNIT_DECODER_ELF_ORACLE_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/image.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit::decoder::testing {

// The standard output of `command` (run by the shell).
inline std::string RunCommand(const std::string& command) {
  std::string out;
  std::FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

inline bool HaveBinutils() { return std::system("objdump --version >/dev/null 2>&1") == 0; }

struct Section {
  std::string name;
  uint64_t begin = 0, end = 0;
  bool code = false;
};

// The allocated sections of `path` from `objdump -h`.
inline std::vector<Section> ObjdumpSections(const std::string& path) {
  std::vector<Section> out;
  std::istringstream text(RunCommand("objdump -h -w " + path));
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
  std::istringstream text(RunCommand("readelf -lW " + path));
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
