// `ptdecode -j N`: the outputs of real recordings, decoded with many threads in small chunks,
// are byte for byte those of -j 1: emulated recordings (ptrecord --emulate, the real kernel's
// sideband) and the real hardware traces of ../shared/testdata (raw mode; skipped when absent).
#include <sched.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "e2e_programs.h"
#include "emulated_recordings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "read_file.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;

using ::ptkit::testing::kFib;
using ::ptkit::testing::kFork;

// The chunks of --chunk-stats's lines (one per stream decoded in parallel), summed.
struct ChunkStats {
  uint64_t lines = 0, chunks = 0, stitched = 0, summarised = 0;
};
ChunkStats SumChunkStats(const std::string& err) {
  ChunkStats sum;
  for (size_t at = 0; (at = err.find("ptdecode: -j: ", at)) != std::string::npos; ++at) {
    uint64_t c = 0, s = 0, again = 0, summarised = 0;
    EXPECT_EQ(std::sscanf(err.c_str() + at,
                          "ptdecode: -j: %" SCNu64 " chunks, %" SCNu64 " stitched, %" SCNu64
                          " decoded again, %" SCNu64 " summarised",
                          &c, &s, &again, &summarised),
              4)
        << err;
    ++sum.lines;
    sum.chunks += c;
    sum.stitched += s;
    sum.summarised += summarised;
  }
  return sum;
}

// Each output with -j 1 and with more threads over chunks of a few PSBs: the same bytes, the
// same exit status and messages.
// `more`: commands for this input besides those of every input. `summaries`: stats and calls
// take most chunks as summaries (ChunkSummary; not without symbols).
void ExpectSameWithJobs(const std::vector<std::string>& input, bool summaries,
                        const std::vector<std::vector<std::string>>& more = {}) {
  // The streams were decoded in chunks, and chunks were stitched (not all decoded again by
  // the merging thread): one line per stream decoded in parallel. With the instruction
  // decoder and with the block decoder.
  for (const char* command : {"insn", "stats", "calls"}) {
    std::vector<std::string> argv = {PTDECODE_PATH,  command, "-j",           "2",
                                     "--chunk-size", "1",     "--chunk-stats"};
    argv.insert(argv.end(), input.begin(), input.end());
    auto stats = RunCommand(argv);
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    const auto [lines, chunks, stitched, summarised] = SumChunkStats(stats.err);
    EXPECT_GT(chunks, 10u) << command << ": " << stats.err;
    EXPECT_GT(stitched, 0u) << command << ": " << stats.err;
    // In a recording too, whose streams are decoded following the time (an exec'd program's),
    // which stats does not use and calls does (the time a chunk's head left is the merge's).
    if (summaries && std::string(command) != "insn") {
      EXPECT_GT(summarised, chunks / 2) << stats.err;
    }
  }

  std::vector<std::vector<std::string>> commands = {
      {"insn"},   {"insn", "--json"},  {"branches"}, {"branches", "--json"},
      {"stats"},  {"stats", "--json"}, {"calls"},    {"calls", "--json"},
      {"folded"}, {"timeline"}};
  commands.insert(commands.end(), more.begin(), more.end());
  for (const auto& command : commands) {
    std::string serial_out, serial_err;
    for (const std::vector<std::string>& jobs : {std::vector<std::string>{"-j", "1"},
                                                 {"-j", "2", "--chunk-size", "1"},
                                                 {"-j", "8", "--chunk-size", "1"},
                                                 {"-j", "4", "--chunk-size", "600"}}) {
      std::vector<std::string> argv = {PTDECODE_PATH};
      argv.insert(argv.end(), command.begin(), command.end());
      argv.insert(argv.end(), jobs.begin(), jobs.end());
      argv.insert(argv.end(), input.begin(), input.end());
      SCOPED_TRACE(::testing::PrintToString(argv));
      auto r = RunCommand(argv);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      if (jobs[1] == "1") {
        serial_out = r.out;
        serial_err = r.err;
        EXPECT_GT(serial_out.size(), 1000u);
        continue;
      }
      EXPECT_TRUE(r.out == serial_out)
          << "outputs differ (" << r.out.size() << " vs " << serial_out.size() << " bytes)";
      EXPECT_EQ(r.err, serial_err);
    }
  }
}

// stats, folded and calls of `trace` with -j 2 in 1-PSB chunks: more than `min_chunks` chunks,
// more than three in four of them summarised; and every output the same with any -j.
void ExpectMostChunksSummarised(const std::string& trace, uint64_t min_chunks) {
  for (const char* command : {"stats", "folded", "calls"}) {
    auto r = RunCommand(
        {PTDECODE_PATH, command, "-j", "2", "--chunk-size", "1", "--chunk-stats", trace});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    uint64_t chunks = 0, stitched = 0, again = 0, summarised = 0;
    ASSERT_EQ(std::sscanf(r.err.c_str(),
                          "ptdecode: -j: %" SCNu64 " chunks, %" SCNu64 " stitched, %" SCNu64
                          " decoded again, %" SCNu64 " summarised",
                          &chunks, &stitched, &again, &summarised),
              4)
        << r.err;
    EXPECT_GT(chunks, min_chunks) << command << ": " << r.err;
    EXPECT_GT(summarised, chunks * 3 / 4) << command << ": " << r.err;
  }
  ExpectSameWithJobs({trace}, /*summaries=*/true);
}

class PtdecodeParallelTest : public testing::SharedRecordingsTest<PtdecodeParallelTest> {};

TEST_F(PtdecodeParallelTest, EmulatedRecordingsDecodeAlikeWithAnyJobs) {
  PTKIT_RECORD_OR_SKIP(fib, "fib", kFib);
  ExpectSameWithJobs({fib.trace}, /*summaries=*/true);
  PTKIT_RECORD_OR_SKIP(fork, "fork", kFork);  // two processes, a stream each
  ExpectSameWithJobs({fork.trace}, /*summaries=*/true);
}

// Tracing stops at every system call and resumes after it, with frames of the chunk on the call
// stack and perhaps one below the chunk's start expecting a return there: the merge checks that
// none does, so the chunks' summaries apply (they failed on their worker, and after four in a row
// the rest was decoded on one thread: 1 of 200 chunks summarised).
TEST_F(PtdecodeParallelTest, ChunksWithSystemCallsAreSummarised) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string trace = dir.File("write_loop.pt");
  const std::string program = E2E_PROGRAM_DIR "/e2e_write_loop";
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", trace, "--", program, "10000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMostChunksSummarised(trace, 50u);
}

// Signals' handlers, entered by the kernel with no call ("> onprof (signal)"), in chunks whose
// lines the merge writes from what their workers kept (each line's function and kind): the
// same lines as -j 1's (a handler's line written as a call's passed every other test).
TEST_F(PtdecodeParallelTest, SignalHandlersInChunksDecodeAlike) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string trace = dir.File("storm.pt");
  const std::string program = E2E_PROGRAM_DIR "/e2e_signal_storm";
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", trace, "--", program});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // calls alone: the program runs 72 M instructions (insn would print them for minutes).
  for (const char* json : {"--chunk-stats", "--json"}) {
    auto serial = RunCommand({PTDECODE_PATH, "calls", json, "-j", "1", trace});
    ASSERT_EQ(serial.exit_code, 0) << serial.err;
    const bool text = std::string(json) == "--chunk-stats";
    ASSERT_NE(serial.out.find(text ? "> onprof (signal)" : "\"signal\":true"), std::string::npos);
    auto chunked =
        RunCommand({PTDECODE_PATH, "calls", json, "-j", "2", "--chunk-size", "1", trace});
    ASSERT_EQ(chunked.exit_code, 0) << chunked.err;
    EXPECT_TRUE(chunked.out == serial.out) << json;
    // Chunks were summarised (their lines written by the merge).
    if (text) {
      EXPECT_GT(SumChunkStats(chunked.err).summarised, 5u) << chunked.err;
    }
  }
}

// Debian's programs are stripped: code without a symbol, in a frame below the chunk's start, is
// named by that frame (CallStack::Unnamed), which a chunk's model leaves to the merge: the
// summaries apply (they failed on their worker, as for a system call above: Debian's gzip
// compressing 300 KB, 1 of 16 chunks summarised by default, and -j 2 took 1.4x the time of -j 1
// for its stats).
TEST_F(PtdecodeParallelTest, ChunksOfStrippedProgramsAreSummarised) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string text = dir.File("text"), trace = dir.File("gzip.pt");
  {
    std::ofstream out(text);
    for (int i = 0; i < 2500; ++i) out << "line " << (i * 7919) % 30011 << " of some text\n";
  }
  auto r =
      RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", trace, "--", "/usr/bin/gzip", "-c", text});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMostChunksSummarised(trace, 30u);
}

// Without -j, stats, folded and calls decode on the CPUs ptdecode may run on (their chunks
// summarised), every other output on one thread (the fast decoder outruns merging its records),
// even where the trace makes many chunks; with -j 2 as -j says.
TEST_F(PtdecodeParallelTest, WithoutJobsOnlyTheSummarisingOutputsUseEveryCpu) {
  PTKIT_RECORD_OR_SKIP(fib, "fib", kFib);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const bool cpus = CPU_COUNT(&set) > 1;
  for (const char* command : {"insn", "branches", "stats", "calls", "folded"}) {
    const bool summarises = std::string(command) == "stats" || std::string(command) == "folded" ||
                            std::string(command) == "calls";
    for (const bool jobs : {false, true}) {
      std::vector<std::string> argv = {PTDECODE_PATH, command, "--chunk-size", "1",
                                       "--chunk-stats"};
      if (jobs) argv.insert(argv.end(), {"-j", "2"});
      argv.push_back(fib.trace);
      auto r = RunCommand(argv);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.err.find("ptdecode: -j: ") != std::string::npos, jobs || (summarises && cpus))
          << command << (jobs ? " -j 2" : "") << ": " << r.err;
    }
  }
}

// With -j and the fast decoder, only the outputs that summarise chunks (stats, folded, calls)
// decode in parallel; the others decode on one thread, which outruns merging their records,
// unless the chunk size is given (tests) or the decoder is libipt's. A trace of one chunk (fib's,
// 128 KiB at least for a summarising output) is decoded on one thread.
TEST_F(PtdecodeParallelTest, JobsDecodeInParallelWhereItPays) {
  PTKIT_RECORD_OR_SKIP(fib, "fib", kFib);
  struct Case {
    std::vector<std::string> args;
    bool parallel;
  };
  const Case cases[] = {
      {{"stats", "--chunk-size", "1"}, true},
      {{"folded", "--chunk-size", "1"}, true},
      {{"calls"}, false},
      {{"timeline"}, false},
      {{"timeline", "--chunk-size", "1"}, true},
      {{"insn"}, false},
      {{"branches"}, false},
      {{"calls", "--chunk-size", "1"}, true},
      {{"calls", "--decoder", "libipt"}, false},
      {{"timeline", "--decoder", "libipt"}, true},
      {{"insn", "--decoder", "libipt"}, true},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {PTDECODE_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"-j", "2", "--chunk-stats", fib.trace});
    SCOPED_TRACE(::testing::PrintToString(argv));
    auto r = RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("ptdecode: -j: ") != std::string::npos, c.parallel) << r.err;
  }
}

// A chunk's summary of stats or folded has no time: the outputs with time per function (stats
// --json, folded --weight=time) decode on one thread with the fast decoder, not through -j's
// per-chunk records (stats --json of this recording, 98 M instructions in 2.4 MB of trace, took
// 2.9 s and 1.0 GB at -j 2 that way; 0.1 s and 35 MB on one thread), and give what -j 1 gives.
// calls' summary has the time of each return (its lines' ticks): it decodes in parallel.
TEST_F(PtdecodeParallelTest, OutputsWithTimeDecodeOnOneThread) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string trace = dir.File("hot_cold.pt");
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", trace, "--",
                       std::string(PROGRAM_DIR) + "/emulate_hot_cold", "8000000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct Case {
    std::vector<std::string> args;
    bool parallel;
  };
  const Case cases[] = {
      {{"stats"}, true},  // the trace is long enough for -j 2's summarised chunks
      {{"stats", "--json"}, false},
      {{"folded"}, true},
      {{"folded", "--weight=time"}, false},
      {{"calls"}, true},
      {{"calls", "--json"}, true},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {PTDECODE_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"-j", "2", "--chunk-stats", trace});
    SCOPED_TRACE(::testing::PrintToString(argv));
    auto jobs = RunCommand(argv);
    ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
    EXPECT_EQ(jobs.err.find("ptdecode: -j: ") != std::string::npos, c.parallel) << jobs.err;
    argv[argv.size() - 3] = "1";
    auto one = RunCommand(argv);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(jobs.out, one.out);
  }
}

// A recording whose trace holds a packet the fast decoder does not model (a PTWRITE) is decoded
// by libipt only where it must be: stats and folded at -j 1 decode its stream chunk by chunk on
// one thread, libipt taking the chunk with the packet, and print what libipt gives for it all.
TEST_F(PtdecodeParallelTest, OneThreadGivesLibiptOnlyTheChunksThatNeedIt) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string trace = dir.File("hot_cold.pt"), data = dir.File("hot_cold.data");
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", trace, "--",
                       std::string(PROGRAM_DIR) + "/emulate_hot_cold", "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", trace, "-o", data});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // A TNT-64 packet before a PSB in the middle of the trace made a PTWRITE and two PADs.
  std::string bytes = testing::ReadWholeFile<std::string>(data);
  std::string psb;
  for (int i = 0; i < 8; ++i) psb += "\x02\x82";
  std::vector<size_t> at;
  for (size_t i = bytes.find(psb); i != std::string::npos; i = bytes.find(psb, i + 1)) {
    if (i >= 8 && bytes.compare(i - 8, 2, "\x02\xa3") == 0) at.push_back(i);
  }
  ASSERT_GT(at.size(), 4u) << "too few PSBs after a TNT-64 packet";
  bytes.replace(at[at.size() / 2] - 8, 8, std::string("\x02\x12\x34\x12\x00\x00\x00\x00", 8));
  const std::string ptw = dir.File("ptw.data");
  std::ofstream(ptw, std::ios::binary) << bytes;
  for (const char* command : {"stats", "folded"}) {
    SCOPED_TRACE(command);
    auto libipt = RunCommand({PTDECODE_PATH, command, "-j", "1", "--decoder", "libipt", ptw});
    ASSERT_EQ(libipt.exit_code, 0) << libipt.err;
    auto alone = RunCommand(
        {PTDECODE_PATH, command, "-j", "1", "--chunk-size", "2048", "--chunk-stats", ptw});
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_TRUE(alone.out == libipt.out) << alone.out << "\nlibipt:\n" << libipt.out;
    uint64_t chunks = 0, stitched = 0;
    ASSERT_EQ(
        std::sscanf(alone.err.c_str(), "ptdecode: -j: %" SCNu64 " chunks, %" SCNu64 " stitched",
                    &chunks, &stitched),
        2)
        << alone.err;
    EXPECT_GT(chunks, 4u);
    EXPECT_GT(stitched, 0u);
    // Without the packet: one decode, not in chunks.
    auto clean = RunCommand(
        {PTDECODE_PATH, command, "-j", "1", "--chunk-size", "2048", "--chunk-stats", data});
    ASSERT_EQ(clean.exit_code, 0) << clean.err;
    EXPECT_EQ(clean.err.find("ptdecode: -j: "), std::string::npos) << clean.err;
  }
}

TEST_F(PtdecodeParallelTest, RealTracesDecodeAlikeWithAnyJobs) {
  const std::string dir = std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments";
  struct stat st;
  if (stat((dir + "/Unzip/trace").c_str(), &st) != 0) {
    GTEST_SKIP() << dir << " is absent (the shared test data is not part of the repo)";
  }
  for (const char* set : {"Unzip", "foo"}) {
    ExpectSameWithJobs({"--pt", dir + "/" + set + "/trace", "--pages", dir + "/" + set},
                       /*summaries=*/false);
  }
}

}  // namespace
}  // namespace ptkit
