// End to end on an ordinary program, as a user runs it:
//   ptrecord --emulate --ground-truth truth.txt -o trace.pt -- plt_pie.elf
//   ptdecode stats --json trace.pt;  ptdecode calls --json --srcline trace.pt
// Calls through the PLT are counted on X@plt (objdump's names) as often as the recorder saw
// the stub entered, and the program's own functions get addr2line's file:line. The program
// (tests/data/decoder/plt.c) prints where main was loaded, which places objdump's and
// addr2line's link-time addresses. About 116 k instructions, ~5 s to record.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "elf_oracle.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

namespace fs = std::filesystem;
using ::ptkit::decoder::testing::ObjdumpPltNames;
using ::ptkit::decoder::testing::TempPath;
using ::ptkit::decoder::testing::ToolOutput;
using ::ptkit::testing::RunCommand;

const std::string kProgram = std::string(PTKIT_DECODER_TEST_BINARY_DIR) + "/plt_pie.elf";

TEST(PltEndToEndTest, AnEmulatedRecordingNamesPltCallsAndTheProgramsLines) {
  if (!testing::HaveBinutils()) GTEST_SKIP() << "binutils are not installed";
  const std::string dir = TempPath("plt_e2e");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = dir + "/trace.pt", truth = dir + "/truth.txt";
  auto rec = RunCommand(
      {PTRECORD_PATH, "--emulate=step", "--ground-truth", truth, "-o", trace, "--", kProgram});
  if (rec.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace is not permitted here: " << rec.err;
  }
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rec.out, m, std::regex("main 0x([0-9a-f]+)"))) << rec.out;
  const uint64_t runtime_main = std::stoull(m[1], nullptr, 16);
  const std::string nm = ToolOutput({"nm", kProgram});
  ASSERT_TRUE(std::regex_search(nm, m, std::regex("([0-9a-f]+) T main\n")));
  const uint64_t bias = runtime_main - std::stoull(m[1], nullptr, 16);

  // The recorder's count of entries into each PLT stub (plt.c makes no tail calls into them).
  std::map<uint64_t, std::string> plt;
  for (const auto& [address, name] : ObjdumpPltNames(kProgram)) plt[address + bias] = name;
  std::map<std::string, uint64_t> entered;
  {
    std::ifstream in(truth);
    uint64_t tid = 0;
    std::string ip;
    while (in >> tid >> ip) {
      auto it = plt.find(std::stoull(ip, nullptr, 16));
      if (it != plt.end()) ++entered[it->second];
    }
  }
  ASSERT_GE(entered.size(), 3u);  // qsort, printf, getenv; puts is not called

  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  std::map<std::string, uint64_t> calls;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& fn : report["functions"]) {
    if (fn["image"].get<std::string>() == kProgram) {
      calls[fn["function"].get<std::string>()] = fn["calls"].get<uint64_t>();
    }
  }
  for (const auto& [name, count] : entered) EXPECT_EQ(calls[name], count) << name;
  EXPECT_EQ(calls["_init"], 1u) << "only __libc_start_main calls _init";

  // --srcline: where each of the program's own functions is entered, addr2line's answer.
  auto calls_out = RunCommand({PTDECODE_PATH, "calls", "--json", "--srcline", trace});
  ASSERT_EQ(calls_out.exit_code, 0) << calls_out.err;
  EXPECT_EQ(calls_out.err, "") << "no warning for a program with DWARF";
  std::istringstream lines(calls_out.out);
  size_t checked = 0;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("call")) continue;
    const std::string name = j["call"];
    if (name != "main" && name != "Sum" && name != "Compare") continue;
    const uint64_t entry = std::stoull(j["address"].get<std::string>(), nullptr, 16) - bias;
    std::string want = ToolOutput({"addr2line", "-e", kProgram, fmt::format("{:#x}", entry)});
    want = want.substr(0, want.find_first_of(" \n"));
    EXPECT_EQ(j.value("srcline", ""), want) << name;
    ++checked;
  }
  EXPECT_GE(checked, 3u);  // main, Sum and Compare (several times)
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ptkit::decoder
