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

// What ptdecode's --chunk-stats says of one decode.
struct ChunkCounts {
  uint64_t chunks = 0, stitched = 0, again = 0, summarised = 0;
};

// `command` (ptdecode's arguments, with -j N) with --chunk-stats: expects its output to be
// `serial`, and adds its chunks and summarised chunks to `chunks` and `summarised`. `scratch`:
// a path for its standard error. Returns its counts.
ChunkCounts ExpectSameWithJobs(const std::string& command, const std::string& serial,
                               const std::string& scratch, uint64_t& chunks, uint64_t& summarised) {
  int exit_code = -1;
  const std::string out =
      Output(absl::StrCat(PTDECODE_PATH, " ", command, " --chunk-stats 2>", scratch), &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_TRUE(out == serial) << "outputs differ (" << out.size() << " vs " << serial.size()
                             << " bytes)";
  const std::string err = Output(absl::StrCat("cat ", scratch), &exit_code);
  ChunkCounts n;
  EXPECT_EQ(std::sscanf(err.c_str(),
                        "ptdecode: -j: %" SCNu64 " chunks, %" SCNu64 " stitched, %" SCNu64
                        " decoded again, %" SCNu64 " summarised",
                        &n.chunks, &n.stitched, &n.again, &n.summarised),
            4)
      << err;
  chunks += n.chunks;
  summarised += n.summarised;
  std::printf("%s: %s", command.c_str(), err.c_str());
  unlink(scratch.c_str());
  return n;
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

// stats and folded through chunk summaries (ChunkSummary): a walk of the O0 interpreter recurses
// thousands of frames deep and returns past many chunk starts, which the merge resolves against the
// stack the chunks before left (a function live several times on the stack, inclusive counts of
// frames entered before a chunk). Raw input (RecordingsAreSummarisedToo: containers). The same
// bytes with 1, 2 and 8 threads and chunks of 1 byte to 64 KiB, and most chunks are summaries.
// (Chunks that run code after the whole stack returned, which the walk does when it leaves main and
// enters it again, or jump with no frame of their own, are given as their records.)
TEST(ParallelDecodeE2eTest, StatsSummariesResolveReturnsPastChunkStarts) {
  const std::string program = std::string(PTKIT_SWPT_PROGRAM_DIR) + "/interp_O0_pie";
  PTKIT_ASSERT_OK_AND_ASSIGN(Synthesizer synth, Synthesizer::Create(program));
  SynthOptions options;
  options.max_insns = 3000000;
  options.seed = 1;
  options.pt.psb_period = 0;  // a PSB every 2 KiB
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  const std::string path =
      ::testing::TempDir() + "/parallel_e2e_" + std::to_string(getpid()) + "_deep.pt";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(r.pt.data(), 1, r.pt.size(), f), r.pt.size());
  ASSERT_EQ(std::fclose(f), 0);
  const std::string input =
      absl::StrCat(" --pt ", path, " --elf ", program, ":0x", absl::Hex(synth.image().exec_base()));
  int exit_code = -1;
  const std::string serial = Output(absl::StrCat(PTDECODE_PATH, " stats -j 1", input), &exit_code);
  ASSERT_EQ(exit_code, 0);
  // Deep: the walk's stack at its end (calls less returns) is thousands of frames.
  uint64_t calls = 0, returns = 0;
  ASSERT_EQ(std::sscanf(serial.c_str() + serial.find(" blocks, ") + 9,
                        "%" SCNu64 " calls, %" SCNu64 " returns", &calls, &returns),
            2)
      << serial;
  EXPECT_GT(calls, returns + 1000);
  uint64_t summarised = 0, chunks = 0;
  // (stats --json has time per function, which a summary has not: its chunks are recorded.)
  uint64_t timed_summarised = 0, timed_chunks = 0;
  // (folded cuts stacks deeper than --max-depth, 1024 by default: the chunks' frames are placed
  // at their depth by the merge; 0 writes all.)
  for (const char* command :
       {"stats", "stats --json", "folded", "folded --max-depth 0", "folded --max-depth 16"}) {
    SCOPED_TRACE(command);
    const bool timed = std::string(command) == "stats --json";
    const std::string one =
        Output(absl::StrCat(PTDECODE_PATH, " ", command, " -j 1", input), &exit_code);
    EXPECT_EQ(exit_code, 0);
    for (const char* jobs :
         {"-j 2 --chunk-size 1", "-j 8 --chunk-size 5000", "-j 2 --chunk-size 65536"}) {
      SCOPED_TRACE(jobs);
      ExpectSameWithJobs(absl::StrCat(command, " ", jobs, input), one, path + ".err",
                         timed ? timed_chunks : chunks, timed ? timed_summarised : summarised);
    }
  }
  EXPECT_GT(summarised, chunks / 2);
  EXPECT_EQ(timed_summarised, 0u);
  unlink(path.c_str());
}

// Writes a recording (container) of a walk of `insns` instructions over `program` (one of
// PTKIT_SWPT_PROGRAM_DIR's) with `seed` and a PSB every 2 KiB; `path`: the file's name's end,
// made the file's path.
void WriteWalk(const char* program, uint64_t insns, uint64_t seed, std::string& path) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      Synthesizer synth, Synthesizer::Create(absl::StrCat(PTKIT_SWPT_PROGRAM_DIR, "/", program)));
  SynthOptions options;
  options.max_insns = insns;
  options.seed = seed;
  options.pt.psb_period = 0;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  path = absl::StrCat(::testing::TempDir(), "/parallel_e2e_", getpid(), path);
  ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r), IsOk());
}

// The same summaries from a recording (container input): its stream reaches the sink through
// the recording's layers, which pass summaries on (without a task filter); else every chunk would
// be given to the sink as its records. (Recordings whose streams follow the time, which stats
// and folded do not use: tests/e2e/ptdecode_parallel_cli_test.cc.)
TEST(ParallelDecodeE2eTest, RecordingsAreSummarisedToo) {
  std::string path = "_rec.pt";
  ASSERT_NO_FATAL_FAILURE(WriteWalk("interp_O0_pie", 3000000, 1, path));
  uint64_t summarised = 0, chunks = 0;
  for (const char* command : {"stats", "folded"}) {
    SCOPED_TRACE(command);
    int exit_code = -1;
    const std::string one =
        Output(absl::StrCat(PTDECODE_PATH, " ", command, " -j 1 ", path), &exit_code);
    EXPECT_EQ(exit_code, 0);
    ExpectSameWithJobs(absl::StrCat(command, " -j 2 --chunk-size 1 ", path), one, path + ".err",
                       chunks, summarised);
  }
  // As many as from the raw trace (StatsSummariesResolveReturnsPastChunkStarts): the walk
  // leaves main (no frame) in many chunks here, which are given as their records.
  EXPECT_GT(chunks, 80u);
  EXPECT_GT(summarised, chunks / 3);
  unlink(path.c_str());
}

// A walk of the O2 interpreter calls deeper than CallStack::kMaxFrames (its fib recurses and
// the walk takes more calls than returns): no chunk's summary applies to a stack that deep, so
// after a few the rest is decoded on the merging thread (not every chunk twice, on a worker
// and again on the merging thread). The same bytes.
TEST(ParallelDecodeE2eTest, TooDeepForSummariesDecodesTheRestSerially) {
  std::string path = "_too_deep.pt";
  ASSERT_NO_FATAL_FAILURE(WriteWalk("interp_O2_pie", 8000000, 7, path));
  int exit_code = -1;
  const std::string one = Output(absl::StrCat(PTDECODE_PATH, " stats -j 1 ", path), &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_NE(one.find("call stack deeper than"), std::string::npos) << one;
  uint64_t chunks = 0, summarised = 0;
  const ChunkCounts n = ExpectSameWithJobs(absl::StrCat("stats -j 2 --chunk-size 1 ", path), one,
                                           path + ".err", chunks, summarised);
  EXPECT_GT(n.chunks, 20u);
  // Boundaries neither stitched nor decoded again: those of the rest, decoded serially.
  EXPECT_LT(n.stitched + n.again + 10, n.chunks);
  unlink(path.c_str());
}

}  // namespace
}  // namespace ptkit::swpt
