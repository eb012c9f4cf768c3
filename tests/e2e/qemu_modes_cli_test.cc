// SPDX-License-Identifier: Apache-2.0
//
// `ptrecord --emulate=qemu --snapshot` and `--aux-sample`, end to end, against the plugin's
// exact ground truth (QEMU's per-instruction callbacks):
//   - every snapshot (two a SIGUSR2 of the program asks for, one at the end) decodes to a run
//     of what its thread ran, the last one to the end of it exactly;
//   - the k-th AUX sample of a thread is taken before its (k*N)-th instruction retires: its IP
//     is that instruction, and its snippet decodes to the instructions right before it.
// Skips where qemu-user is not installed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "aux_samples.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

class QemuModesTest : public ::testing::Test {
 protected:
  // ptrecord --emulate=qemu --ground-truth with `options` on `command`.
  testing::CommandResult Record(const std::vector<std::string>& options,
                                const std::vector<std::string>& command) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=qemu", "-o",
                                     trace_,        "--ground-truth", truth_};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return RunCommand(argv);
  }
  testing::TempDir dir_;
  const std::string trace_ = dir_.File("trace.pt");
  const std::string truth_ = dir_.File("truth");
};

// A 4 KiB ring (-m 64,1), overwritten: the program's 20 KiB of trace wraps it several times.
TEST_F(QemuModesTest, EverySnapshotDecodesToARunOfTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  auto r = Record({"--snapshot", "-m", "64,1"}, {E2E_PROGRAM_DIR "/e2e_qemu_usr2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("; 3 snapshots"));
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));
  // The summary counts the snapshots' trace bytes (it said "0 trace bytes": sweep 27).
  EXPECT_THAT(r.err, Not(HasSubstr(" 0 trace bytes")));
  const PerThread truth = ReadTruth(truth_);
  ASSERT_EQ(truth.size(), 1u);
  const std::vector<uint64_t>& ran = truth.begin()->second;
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", trace_});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(nlohmann::json::parse(info.out)["metadata"]["mode"], "snapshot");
  size_t previous_end = 0;
  for (int k = 0; k < 3; ++k) {
    auto dec = RunCommand({PTDECODE_PATH, "insn", "--snapshot", std::to_string(k), trace_});
    ASSERT_EQ(dec.exit_code, 0) << dec.err;
    EXPECT_EQ(dec.out.find("[error"), std::string::npos) << k;
    const PerThread got = ParseInsn(dec.out);
    ASSERT_EQ(got.size(), 1u) << k;
    const std::vector<uint64_t>& insns = got.begin()->second;
    // 4 KiB of PT from the newest PSB on: thousands of instructions, not the whole run.
    ASSERT_GT(insns.size(), 1000u) << k;
    ASSERT_LT(insns.size(), ran.size() / 3) << k;
    if (k == 2) {
      EXPECT_TRUE(std::equal(insns.begin(), insns.end(), ran.end() - insns.size())) << k;
      continue;
    }
    // The run it is, after the previous snapshot's: the snapshots are in order.
    auto at = std::search(ran.begin() + previous_end, ran.end(), insns.begin(), insns.end());
    ASSERT_NE(at, ran.end()) << "snapshot " << k << " is no run of the ground truth";
    previous_end = at - ran.begin() + insns.size();
  }
}

// Without --snapshot, the program's SIGUSR2 is said once and changes nothing.
TEST_F(QemuModesTest, Sigusr2WithoutSnapshotIsSaidOnce) {
  PTKIT_SKIP_WITHOUT_QEMU();
  auto r = Record({}, {E2E_PROGRAM_DIR "/e2e_qemu_usr2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string said = "SIGUSR2 ignored: not recording with --snapshot";
  EXPECT_THAT(r.err, HasSubstr(said));
  EXPECT_EQ(r.err.find(said), r.err.rfind(said)) << r.err;
}

// A SIGUSR2 that comes as soon as ptrecord runs (its handlers' first: SIGPIPE's) asks for a
// snapshot before anything is traced: the recording goes on and the command runs (sweep 35b
// L2: the default action ended ptrecord in its first 30-50 ms, no file, the command never ran).
TEST_F(QemuModesTest, AnEarlySigusr2EndsNothing) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"--snapshot"}, std::vector<std::string>{}}) {
    SCOPED_TRACE(mode.empty() ? "full trace" : mode[0]);
    const std::string trace = dir_.File(mode.empty() ? "early.pt" : "early_snapshot.pt");
    std::vector<std::string> args = {PTRECORD_PATH, "-q", "--emulate=qemu", "-o", trace};
    args.insert(args.end(), mode.begin(), mode.end());
    args.insert(args.end(), {"--", PROGRAM_DIR "/emulate_fib", "x"});
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Until SIGPIPE (13) is caught: ptrecord's main has begun.
    bool caught = false;
    for (int i = 0; i < 20000 && !caught; ++i) {
      std::ifstream status("/proc/" + std::to_string(pid) + "/status");
      for (std::string line; std::getline(status, line);) {
        if (line.starts_with("SigCgt:")) {
          caught = (std::stoull(line.substr(7), nullptr, 16) >> (SIGPIPE - 1)) & 1;
        }
      }
      if (!caught) usleep(100);
    }
    ASSERT_TRUE(caught);
    kill(pid, SIGUSR2);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "ptrecord died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 3);  // emulate_fib's exit code: the command ran
    auto info = RunCommand({PTDECODE_PATH, "info", trace});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_THAT(info.out, HasSubstr("present (closed cleanly)"));
  }
}

constexpr uint64_t kPeriod = 1000;  // (the default; 500 would double the JSON to check)

// As the step backend's test (aux_sample_cli_test): every sample's IP is the ground truth's
// (k*N)-th instruction of its thread, and its snippet decodes to what that thread ran right
// before, ending there.
TEST_F(QemuModesTest, AuxSamplesEndAtTheSampledInstruction) {
  PTKIT_SKIP_WITHOUT_QEMU();
  auto r =
      Record({"--aux-sample", "-c", std::to_string(kPeriod)}, {PROGRAM_DIR "/emulate_threads"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("AUX samples of 4096 bytes"));
  const PerThread truth = ReadTruth(truth_);
  ASSERT_EQ(truth.size(), 3u);  // main and two workers
  auto dec =
      RunCommand({PTDECODE_PATH, "samples", "--json", "--instructions", "--branches", "0", trace_});
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  const nlohmann::json j = nlohmann::json::parse(dec.out);
  uint64_t expected_total = 0;
  size_t longest = 0;
  ::ptkit::testing::ExpectSamplesMatchTruth(j, truth, kPeriod, 4096, &expected_total, &longest);
  if (HasFatalFailure()) return;
  EXPECT_GT(expected_total, 30u);
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", trace_});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json ji = nlohmann::json::parse(info.out);
  EXPECT_EQ(ji["samples"]["count"], expected_total);
  EXPECT_EQ(ji["metadata"]["mode"], "aux-sample");
  for (const nlohmann::json& kind : ji["kinds"]) EXPECT_NE(kind["kind"], "aux");
}

// AUX samples with --filter: a sample taken outside the regions (in cold(), which hot() and
// main call) has a snippet that never reaches its IP: it is "[not traced];cold", not under
// the last traced function (sweep 27 T3: every sample under the region's function, a flame
// graph of 100 % of it for a program that spent 98.9 % elsewhere), and a branch out of the
// regions goes where the TIP.PGD says, not to where tracing came back. Oracle: perf 6.1's
// sample events of the export, by symbol.
TEST_F(QemuModesTest, AuxSamplesOutsideTheFilterRegionsHaveNoTracedStack) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (access("/usr/bin/perf", X_OK) != 0) GTEST_SKIP() << "perf (linux-perf) is not installed";
  const std::string prog = PROGRAM_DIR "/emulate_hot_cold";
  auto r =
      Record({"--aux-sample", "-c", std::to_string(kPeriod), "--filter", "filter hot @ " + prog},
             {prog, "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto folded = RunCommand({PTDECODE_PATH, "samples", "--folded", trace_});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  std::map<std::string, uint64_t> leaves;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    const std::string stack = line.substr(0, line.rfind(' '));
    const std::string leaf = stack.substr(stack.rfind(';') + 1);
    leaves[leaf] += std::stoull(line.substr(line.rfind(' ') + 1));
    // Only hot() is traced: any other leaf's sample is not (before hot() first ran, the
    // snippet has no trace at all: "[unsynchronised]").
    if (leaf != "hot") {
      EXPECT_TRUE(stack == "[not traced];" + leaf || stack == "[unsynchronised];" + leaf) << line;
    }
  }
  EXPECT_GT(leaves["cold"], 100u);
  const std::string data = dir_.File("samples.data");
  ASSERT_EQ(
      RunCommand({PTDECODE_PATH, "export", trace_, "--to", "perf.data", "-o", data}).exit_code, 0);
  // (--itrace= : the sample events only, no trace decoded from their snippets.)
  auto perf =
      RunCommand({"/usr/bin/perf", "script", "-i", data, "--itrace=", "-F", "event,ip,sym"});
  std::map<std::string, uint64_t> theirs;
  std::istringstream p(perf.out);
  for (std::string line; std::getline(p, line);) {
    std::istringstream words(line);
    std::string event, ip, sym;
    if (words >> event >> ip >> sym && event.starts_with("instructions")) ++theirs[sym];
  }
  // (libc's functions by name: the two pick different aliases of some.)
  for (const char* name : {"cold", "hot", "main"}) EXPECT_EQ(leaves[name], theirs[name]) << name;
  auto sum = [](const std::map<std::string, uint64_t>& m) {
    uint64_t n = 0;
    for (const auto& [name, count] : m) n += count;
    return n;
  };
  EXPECT_EQ(sum(leaves), sum(theirs)) << perf.err;
}

}  // namespace
}  // namespace ptkit
