// Time blocked in a system call, as `ptdecode stats` and `folded --weight=time` give it: a
// thread sleeps 200 ms in f_sleep (nanosleep) and measures it by CLOCK_MONOTONIC, the oracle.
// The wait is the time from the TIP.PGD of the system call to the TIP.PGE of its return, with
// no instruction in between: it goes to the function on top at the disable, the libc wrapper
// that made the call (and inclusively to f_sleep), not to the instructions before the call
// that share the time of the disable (sweep 40a F2: --emulate=step gave f_sleep and syscall
// half each), nor to those after the resume (sweep 40a F1: under qemu the TSC of the resume
// came after the TIP.PGE, and 40% of a sleep went to __pthread_disable_asynccancel). Both
// decoders, on one thread and on two.
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "e2e_programs.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;

const char kProgram[] = E2E_PROGRAM_DIR "/e2e_blocked_time";

// Where the wait may go: the libc function that made the system call (__clock_nanosleep under
// __nanosleep, or syscall).
bool IsSleepWrapper(const std::string& function) {
  return function.find("nanosleep") != std::string::npos || function == "syscall";
}
// What runs after the resume: glibc's cancellation epilogue, the thread's next function.
bool RunsAfterTheResume(const std::string& function) {
  return function.find("disable_asynccancel") != std::string::npos || function == "after_sleep";
}

// The emulation, and how the program sleeps ("libc": nanosleep; "raw": syscall).
using Param = std::tuple<std::string, std::string>;

class BlockedTimeTest : public ::testing::TestWithParam<Param> {
 protected:
  // Records the program with --emulate=EMULATION, then checks each decoder's answers.
  void Check() {
    const auto& [emulation, how] = GetParam();
    const std::string trace = dir_.File("blocked.pt");
    auto rec = RunCommand(
        {PTRECORD_PATH, "--emulate=" + emulation, "-q", "-o", trace, "--", kProgram, how});
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    uint64_t slept = 0;
    ASSERT_EQ(std::sscanf(rec.out.c_str(), "slept %lu", &slept), 1) << rec.out;
    ASSERT_GE(slept, 200'000'000u);
    for (const std::string decoder : {"libipt", "fast"}) {
      for (const std::string jobs : {"-j1", "-j2"}) {
        SCOPED_TRACE(fmt::format("{} {}", decoder, jobs));
        // stats: self ticks (the emulations' TSC is nanoseconds).
        auto stats =
            RunCommand({PTDECODE_PATH, "stats", "--json", "--decoder", decoder, jobs, trace});
        ASSERT_EQ(stats.exit_code, 0) << stats.err;
        uint64_t wrapper = 0, after = 0;
        const auto doc = nlohmann::json::parse(stats.out);
        for (const auto& f : doc.at("functions")) {
          const std::string name = f["function"].get<std::string>();
          const uint64_t ticks = f.value("ticks", uint64_t{0});
          if (IsSleepWrapper(name)) wrapper += ticks;
          if (RunsAfterTheResume(name)) after += ticks;
        }
        EXPECT_GE(wrapper, slept * 9 / 10) << stats.out;
        EXPECT_LT(after, slept / 10) << stats.out;
        // folded --weight=time: the stacks under f_sleep with the wrapper on top.
        auto folded = RunCommand(
            {PTDECODE_PATH, "folded", "--weight=time", "--decoder", decoder, jobs, trace});
        ASSERT_EQ(folded.exit_code, 0) << folded.err;
        uint64_t asleep = 0, resumed = 0;
        std::istringstream lines(folded.out);
        for (std::string line; std::getline(lines, line);) {
          const std::string stack = line.substr(0, line.rfind(' '));
          const std::string top = stack.substr(stack.rfind(';') + 1);
          const uint64_t ns = std::stoull(line.substr(line.rfind(' ') + 1));
          if (stack.find(";f_sleep;") != std::string::npos && IsSleepWrapper(top)) asleep += ns;
          if (RunsAfterTheResume(top)) resumed += ns;
        }
        EXPECT_GE(asleep, slept * 9 / 10) << folded.out;
        EXPECT_LT(resumed, slept / 10) << folded.out;
      }
    }
  }

  ::ptkit::testing::TempDir dir_;
};

TEST_P(BlockedTimeTest, TheWaitIsTheSystemCallers) {
  if (std::get<0>(GetParam()) == "qemu") PTKIT_SKIP_WITHOUT_QEMU();
  Check();
}

INSTANTIATE_TEST_SUITE_P(Emulations, BlockedTimeTest,
                         ::testing::Combine(::testing::Values("step", "qemu"),
                                            ::testing::Values("libc", "raw")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ptkit
