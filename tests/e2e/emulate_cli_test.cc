// The whole pipeline as users run it, on a machine without Intel PT:
//   ptrecord --emulate --ground-truth truth.txt -o trace.pt -- PROGRAM ...
//   ptdecode insn trace.pt
// The decoded instructions of every thread equal the instructions the workload retired.
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;

class EmulateCliTest : public ::testing::Test {
 protected:
  // Records `argv` emulated and checks the decode against the ground truth; returns
  // ptrecord's exit code.
  int RecordAndCheck(const std::vector<std::string>& workload, size_t threads,
                     const std::string& filter = "") {
    std::string trace = dir_.File("trace.pt"), truth = dir_.File("truth.txt");
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate", "--ground-truth",      truth,
                                     "-o",          trace,       "--overwrite-existing"};
    if (!filter.empty()) {
      argv.push_back("--filter");
      argv.push_back(filter);
    }
    argv.push_back("--");
    argv.insert(argv.end(), workload.begin(), workload.end());
    auto rec = RunCommand(argv);
    if (rec.err.find("Operation not permitted") != std::string::npos) {
      skipped_ = true;
      return rec.exit_code;
    }
    auto dec = RunCommand({PTDECODE_PATH, "insn", trace});
    EXPECT_EQ(dec.exit_code, 0) << dec.err;
    PerThread expected = ReadTruth(truth);
    PerThread got = ParseInsn(dec.out);
    EXPECT_EQ(expected.size(), threads);
    EXPECT_EQ(got.size(), expected.size());
    for (const auto& [tid, ips] : expected) {
      SCOPED_TRACE(::testing::Message() << "tid " << tid);
      EXPECT_EQ(got[tid].size(), ips.size());
      EXPECT_TRUE(got[tid] == ips);
    }
    return rec.exit_code;
  }
  testing::TempDir dir_;
  bool skipped_ = false;
};

TEST_F(EmulateCliTest, ARecursiveProgramAndItsExitCode) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_fib", "x"}, 1), 3);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

TEST_F(EmulateCliTest, AProgramWithThreads) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_threads"}, 3), 0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

TEST_F(EmulateCliTest, AProgramWithASignalHandler) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_signal"}, 1), 0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

TEST_F(EmulateCliTest, ADynamicProgramThatDlopensALibrary) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_dlopen", PROGRAM_DIR "/libemulate_plugin.so"}, 1),
            0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

TEST_F(EmulateCliTest, AnAddressFilterTracesOnlyItsRegion) {
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  EXPECT_EQ(RecordAndCheck({fib, "x"}, 1, "filter fib @ " + fib), 3);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  // A library that the program dlopen()s, by symbol.
  const std::string lib = PROGRAM_DIR "/libemulate_plugin.so";
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_dlopen", lib}, 1, "filter plugin_work @ " + lib),
            0);
}

TEST_F(EmulateCliTest, AFilterThatCannotBeEmulatedIsAnErrorNamingIt) {
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  auto r = RunCommand({PTRECORD_PATH, "--emulate", "--filter", "start main @ " + fib, "-o",
                       dir_.File("t.pt"), "--", fib});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'filter' regions"));
  r = RunCommand({PTRECORD_PATH, "--emulate", "--filter", "filter no_such_function @ " + fib, "-o",
                  dir_.File("t.pt"), "--", fib});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no_such_function"));
}

TEST_F(EmulateCliTest, AMissingProgramExits127NamingIt) {
  auto r =
      RunCommand({PTRECORD_PATH, "--emulate", "-o", dir_.File("t.pt"), "--", "/nonexistent/app"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/app"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(EmulateCliTest, AnEventThatCannotBeEmulatedIsAUsageError) {
  auto r = RunCommand({PTRECORD_PATH, "--emulate", "--event", "intel_pt//k", "-o",
                       dir_.File("t.pt"), "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("user space only"));
}

}  // namespace
}  // namespace ptkit
