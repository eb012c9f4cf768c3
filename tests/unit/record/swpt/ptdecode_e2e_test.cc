// End to end: a synthesized walk written as a trace.pt (record/swpt) and decoded by the real
// `ptdecode insn --json` (MMAP2 sideband, container streams) gives exactly the ground truth.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "ptkit/status.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"
#include "status_matchers.h"

namespace ptkit::swpt {
namespace {

using ::ptkit::testing::IsOk;

// Runs `command` and returns the instruction addresses of its JSON-lines output.
std::vector<uint64_t> RunAndCollectIps(const std::string& command, int* exit_code) {
  std::vector<uint64_t> ips;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return ips;
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, pipe) > 0) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("ip") || j.contains("event")) continue;
    uint64_t ip = 0;
    std::string text = j["ip"].get<std::string>();
    if (absl::SimpleHexAtoi(text.substr(text.starts_with("0x") ? 2 : 0), &ip)) ips.push_back(ip);
  }
  free(line);
  *exit_code = pclose(pipe);
  return ips;
}

TEST(SwptPtdecodeE2eTest, SynthesizedContainerDecodesToTheGroundTruth) {
  for (const char* program : {"sorts_O2_pie", "interp_O0_nopie"}) {
    for (bool retcomp : {true, false}) {
      SCOPED_TRACE(absl::StrCat(program, " retcomp ", retcomp));
      PTKIT_ASSERT_OK_AND_ASSIGN(
          Synthesizer synth,
          Synthesizer::Create(std::string(PTKIT_SWPT_PROGRAM_DIR) + "/" + program));
      SynthOptions options;
      options.max_insns = 100000;
      options.seed = 21;
      options.signal_every = 4001;
      options.pt.ret_compression = retcomp;
      options.pt.tsc = true;
      PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
      const std::string path =
          ::testing::TempDir() + "/swpt_e2e_" + std::to_string(getpid()) + "_" + program + ".pt";
      ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r), IsOk());
      int exit_code = -1;
      std::vector<uint64_t> ips =
          RunAndCollectIps(absl::StrCat(PTDECODE_PATH, " insn --json ", path), &exit_code);
      EXPECT_EQ(exit_code, 0);
      EXPECT_EQ(ips.size(), r.truth.size());
      EXPECT_TRUE(ips == r.truth);
      unlink(path.c_str());
    }
  }
}

// Runs `command` and returns its standard output.
std::string Output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  pclose(pipe);
  return out;
}

// A decode option of the configuration replaces only what it names: --cpu (the errata) keeps
// the recording's MTC period and CTC ratio (they were reset to 0, and the time of a trace timed
// by MTC packets changed: main 4350 -> 4262 ticks of folded --weight=time).
TEST(SwptPtdecodeE2eTest, CpuGivenKeepsTheRecordedTiming) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      Synthesizer synth,
      Synthesizer::Create(std::string(PTKIT_SWPT_PROGRAM_DIR) + "/interp_O2_pie"));
  SynthOptions options;
  options.max_insns = 200000;
  options.seed = 3;
  options.tick_every = 50;
  options.pt.tsc = true;
  options.pt.mtc = true;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  const std::string path =
      ::testing::TempDir() + "/swpt_e2e_" + std::to_string(getpid()) + "_mtc.pt";
  ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r), IsOk());
  const std::string folded = absl::StrCat(PTDECODE_PATH, " folded --weight=time ");
  const std::string recorded = Output(folded + path);
  ASSERT_THAT(recorded, ::testing::HasSubstr("main;eval_tree "));
  EXPECT_EQ(Output(folded + "--cpu 6/78/3 " + path), recorded);
  // (The MTC period matters: another one gives other times.)
  EXPECT_NE(Output(folded + "--mtc-freq 5 " + path), recorded);
  unlink(path.c_str());
}

}  // namespace
}  // namespace ptkit::swpt
