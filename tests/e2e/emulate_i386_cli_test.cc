// 32-bit code under `ptrecord --emulate=step` (sweep 37b H1): an i386 program (gcc -m32,
// dynamic and static) and a 64-bit program that runs 32-bit code between far returns. The
// trace says each instruction's mode as the hardware would (MODE.Exec 32-bit at enable and
// where the mode changes), so that `ptdecode insn` equals the ground truth thread by thread,
// perf 6.1 decodes the export to the same addresses, and calls are counted as the program
// made them (i386 lazy binding enters each imported function by `ret $0xc`).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::NmRangeDemangled;
using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kGate = E2E_PROGRAM_DIR "/e2e_compat_gate";
const std::string kI386 = E2E_PROGRAM_DIR "/e2e_i386";
const std::string kI386Static = E2E_PROGRAM_DIR "/e2e_i386_static";

#define PTKIT_SKIP_WITHOUT_M32()                                                         \
  if (!PTKIT_HAVE_M32)                                                                   \
  GTEST_SKIP() << "the toolchain cannot build i386 programs (gcc -m32: apt-get install " \
                  "gcc-multilib)"

class EmulateI386Test : public ::testing::Test {
 protected:
  static constexpr char kPerf[] = "/usr/bin/perf";
  // Records `program` with `args` stepped (with `extra` ptrecord options); false (the test
  // skipped) when ptrace is denied.
  bool Record(const std::string& program, int want_exit = 0,
              const std::vector<std::string>& extra = {},
              const std::vector<std::string>& args = {}) {
    std::vector<std::string> argv = {
        PTRECORD_PATH, "--emulate=step", "--ground-truth", truth_, "-o", trace_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", program});
    argv.insert(argv.end(), args.begin(), args.end());
    auto rec = RunCommand(argv);
    if (rec.err.find("Operation not permitted") != std::string::npos) return false;
    EXPECT_EQ(rec.exit_code, want_exit) << rec.err;
    return true;
  }
  // `ptdecode insn` equals the ground truth with no gap or error; returns its output.
  std::string CheckDecode() {
    auto dec = RunCommand({PTDECODE_PATH, "insn", trace_});
    EXPECT_EQ(dec.exit_code, 0) << dec.err;
    for (const char* marker : {"[gap", "[error"}) {
      const size_t at = dec.out.find(marker);
      EXPECT_EQ(at, std::string::npos) << dec.out.substr(at, dec.out.find('\n', at) - at);
    }
    ExpectSame(ParseInsn(dec.out), "ptdecode insn");
    return dec.out;
  }
  // perf 6.1 on the export decodes the same addresses as the ground truth.
  void CheckPerf() {
    if (::access(kPerf, X_OK) != 0) return;  // (perf_export_cli_test says why it skips)
    const std::string data = dir_.File("x.data");
    auto exp = RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", trace_, "-o", data});
    ASSERT_EQ(exp.exit_code, 0) << exp.err;
    auto perf = RunCommand({kPerf, "--buildid-dir", data + ".debug", "script", "-i", data,
                            "--itrace=i0ns", "-F", "tid,ip"});
    EXPECT_THAT(perf.err, Not(HasSubstr("error")));
    PerThread got;
    std::istringstream in(perf.out);
    uint64_t tid = 0;
    std::string ip;
    while (in >> tid >> ip) got[tid].push_back(std::stoull(ip, nullptr, 16));
    ExpectSame(got, "perf script");
  }
  void ExpectSame(const PerThread& got, const std::string& what) {
    const PerThread want = ReadTruth(truth_);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (const auto& [tid, ips] : want) {
      auto it = got.find(tid);
      ASSERT_NE(it, got.end()) << what << ": no thread " << tid;
      const auto [a, b] =
          std::mismatch(it->second.begin(), it->second.end(), ips.begin(), ips.end());
      EXPECT_TRUE(a == it->second.end() && b == ips.end())
          << what << ", thread " << tid << ": " << it->second.size() << " vs " << ips.size()
          << " instructions (truth), first difference at #" << (a - it->second.begin());
    }
  }
  // Calls of `function` in `ptdecode stats --json`.
  int64_t Calls(const std::string& function) {
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", trace_});
    auto j = nlohmann::json::parse(stats.out, nullptr, false);
    if (!j.is_object()) return -1;
    for (const auto& f : j["functions"]) {
      if (f["function"] == function) return f["calls"].get<int64_t>();
    }
    return -1;
  }
  // How many times the ground truth entered `function` of `program` (its first address).
  int64_t TruthEntries(const std::string& program, const std::string& function) {
    const uint64_t entry = NmRangeDemangled(program, function).first;
    int64_t n = 0;
    for (const auto& [tid, ips] : ReadTruth(truth_)) n += std::count(ips.begin(), ips.end(), entry);
    return entry == 0 ? -1 : n;
  }
  testing::TempDir dir_;
  std::string trace_ = dir_.File("trace.pt"), truth_ = dir_.File("truth.txt");
};

// Far returns into compatibility mode and back, 20 times: the 32-bit loop `inc edx; dec ecx;
// jnz` (42 49 75 fc) was decoded as one REX-prefixed JNZ (200 instructions missing, 200
// invented). perf 6.1 is not asked: it decodes by the ELF class of the file (64-bit here),
// not by MODE.Exec.
TEST_F(EmulateI386Test, CompatibilityModeCodeInA64BitProgram) {
  if (!Record(kGate, 20)) GTEST_SKIP() << "ptrace denied";
  const std::string insn = CheckDecode();
  EXPECT_THAT(insn, HasSubstr("bits=32"));
  EXPECT_THAT(insn, HasSubstr("bits=64"));
}

TEST_F(EmulateI386Test, ADynamicI386Program) {
  PTKIT_SKIP_WITHOUT_M32();
  if (!Record(kI386)) GTEST_SKIP() << "ptrace denied";
  const std::string insn = CheckDecode();
  EXPECT_THAT(insn, HasSubstr("bits=32"));
  EXPECT_THAT(insn, Not(HasSubstr("bits=64")));
  CheckPerf();
  // Lazy binding: printf and qsort are entered by _dl_runtime_resolve's `ret $0xc` (they had
  // 0 calls, and ran in main's caller's frame).
  EXPECT_EQ(Calls("printf"), 1);
  EXPECT_EQ(Calls("qsort"), 1);
  for (const char* f : {"leaf", "mid", "rec", "incdec", "main"}) {
    EXPECT_EQ(Calls(f), TruthEntries(kI386, f)) << f;
  }
}

TEST_F(EmulateI386Test, AStaticI386Program) {
  PTKIT_SKIP_WITHOUT_M32();
  if (!Record(kI386Static)) GTEST_SKIP() << "ptrace denied";
  CheckDecode();
  CheckPerf();
  for (const char* f : {"leaf", "mid", "rec", "incdec", "main", "qsort", "printf"}) {
    EXPECT_EQ(Calls(f), TruthEntries(kI386Static, f)) << f;
  }
}

// A 64-bit program execs an i386 one: the TIP.PGE after the exec carries MODE.Exec 32-bit, and
// the new program's vDSO (the i386 one, at its own address in the same pid) is stored.
TEST_F(EmulateI386Test, A64BitProgramExecsAnI386One) {
  PTKIT_SKIP_WITHOUT_M32();
  if (!Record(E2E_PROGRAM_DIR "/e2e_qemu_exec", 0, {}, {"closed", kI386})) {
    GTEST_SKIP() << "ptrace denied";
  }
  const std::string insn = CheckDecode();
  EXPECT_LT(insn.find("bits=64"), insn.find("bits=32"));
}

// BTS records say no mode: ptdecode decodes the code of an i386 file as 32-bit (it walked it
// as 64-bit code: 11 errors in e2e_i386_static). (A 64-bit file's compatibility-mode code, as
// in e2e_compat_gate, cannot be told from BTS; perf cannot either.)
TEST_F(EmulateI386Test, ABtsRecordingOfAnI386Program) {
  PTKIT_SKIP_WITHOUT_M32();
  if (!Record(kI386Static, 0, {"--bts"})) GTEST_SKIP() << "ptrace denied";
  CheckDecode();
}

}  // namespace
}  // namespace ptkit
