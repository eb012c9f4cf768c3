// `ptdecode -j N` on synthesized recordings (record/swpt) with what makes chunk edges hard:
// return compression, timing packets (TSC, MTC, CYC), signals (asynchronous branches),
// overflows, and PSBs every 2 KiB, in chunks of two PSBs: the outputs of insn and branches are
// byte for byte those of -j 1, and insn gives the walk's ground truth.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"
#include "status_matchers.h"

namespace ptkit::swpt {
namespace {

using ::ptkit::testing::IsOk;

// The standard output of `command` and its exit status.
std::string Output(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  *exit_code = pclose(pipe);
  return out;
}

struct Case {
  const char* name;
  bool retcomp, tsc, mtc, cyc;
  uint64_t signal_every, overflow_every;
};

TEST(ParallelDecodeE2eTest, SynthesizedRecordingsDecodeAlikeWithAnyJobs) {
  const Case cases[] = {
      {"plain", true, false, false, false, 0, 0},
      {"tsc+signals", true, true, false, false, 997, 0},
      {"mtc+cyc+noretcomp", false, true, true, true, 0, 0},
      {"overflows", true, true, false, false, 0, 7919},
  };
  PTKIT_ASSERT_OK_AND_ASSIGN(
      Synthesizer synth,
      Synthesizer::Create(std::string(PTKIT_SWPT_PROGRAM_DIR) + "/sorts_O2_pie"));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SynthOptions options;
    options.max_insns = 80000;
    options.seed = 5;
    options.pt.ret_compression = c.retcomp;
    options.pt.tsc = c.tsc;
    options.pt.mtc = c.mtc;
    options.pt.cyc = c.cyc;
    options.pt.psb_period = 0;  // a PSB every 2 KiB
    options.signal_every = c.signal_every;
    options.overflow_every = c.overflow_every;
    PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
    ASSERT_GT(r.pt.size(), 8u << 10) << "too short for many chunks";
    const std::string path =
        ::testing::TempDir() + "/parallel_e2e_" + std::to_string(getpid()) + "_" + c.name + ".pt";
    ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r), IsOk());
    for (const char* command : {"insn --json", "branches"}) {
      SCOPED_TRACE(command);
      int exit_code = -1;
      const std::string serial =
          Output(absl::StrCat(PTDECODE_PATH, " ", command, " -j 1 ", path), &exit_code);
      EXPECT_EQ(exit_code, 0);
      EXPECT_GT(serial.size(), 50000u);
      for (const char* jobs : {"-j 2 --chunk-size 1", "-j 4 --chunk-size 5000"}) {
        const std::string parallel =
            Output(absl::StrCat(PTDECODE_PATH, " ", command, " ", jobs, " ", path), &exit_code);
        EXPECT_EQ(exit_code, 0) << jobs;
        EXPECT_TRUE(parallel == serial) << jobs << ": outputs differ (" << parallel.size() << " vs "
                                        << serial.size() << " bytes)";
      }
    }
    // The chunks were stitched, not all decoded again by the merging thread.
    int exit_code = -1;
    const std::string stats =
        Output(absl::StrCat(PTDECODE_PATH, " insn -j 2 --chunk-size 1 --chunk-stats ", path,
                            " 2>&1 >/dev/null"),
               &exit_code);
    EXPECT_EQ(exit_code, 0);
    uint64_t chunks = 0, stitched = 0;
    ASSERT_EQ(std::sscanf(stats.c_str(), "ptdecode: -j: %" SCNu64 " chunks, %" SCNu64 " stitched",
                          &chunks, &stitched),
              2)
        << stats;
    EXPECT_GT(chunks, 4u) << stats;
    EXPECT_GT(stitched, chunks / 2) << stats;
    std::printf("%s: %s", c.name, stats.c_str());
    unlink(path.c_str());
  }
}

}  // namespace
}  // namespace ptkit::swpt
