// ptdecode's outputs on real recordings, as users make them on a machine without Intel PT:
//   ptrecord --emulate [--bts] --ground-truth truth.txt -o trace.pt -- PROGRAM
// checked against oracles that are not ptdecode: the recorder's ground truth (every retired
// instruction, per thread) and nm's symbol sizes. One recording per program and form, shared
// by the tests (emulated recording is slow).
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decoder/container_input.h"
#include "decoder/image.h"
#include "decoder/recording.h"
#include "decoder/sinks.h"
#include "e2e_programs.h"
#include "emulated_recordings.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "run_command.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

using ::ptkit::testing::NmRange;
using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;

using ::ptkit::testing::kFib;
using ::ptkit::testing::kFork;

class PtdecodeEmulatedTest : public testing::SharedRecordingsTest<PtdecodeEmulatedTest> {};

TEST_F(PtdecodeEmulatedTest, AnEmulatedBtsRecordingDecodesToTheGroundTruth) {
  PTKIT_RECORD_OR_SKIP(rec, "fib_bts", kFib, {"--bts"});
  auto r = RunCommand({PTDECODE_PATH, "insn", rec.trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  PerThread truth = ReadTruth(rec.truth);
  PerThread got = ParseInsn(r.out);
  ASSERT_EQ(truth.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GT(truth.begin()->second.size(), 1000u);
  EXPECT_EQ(got.begin()->second.size(), truth.begin()->second.size());
  EXPECT_TRUE(got == truth);
  EXPECT_THAT(r.out, Not(HasSubstr("[gap")));
}

// Every "E" closes the innermost open "B" of its track and carries its name (speedscope
// matches ends by name; Perfetto by nesting): a stack check over the whole document.
void ExpectEndsNameTheirSlices(const std::string& json) {
  auto doc = nlohmann::json::parse(json);
  std::map<uint64_t, std::vector<std::string>> open;  // per tid
  size_t begins = 0, ends = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    const uint64_t tid = e["tid"];
    if (ph == "B") {
      ++begins;
      open[tid].push_back(e["name"]);
    } else if (ph == "E") {
      ++ends;
      ASSERT_TRUE(e.contains("name")) << e.dump();
      ASSERT_FALSE(open[tid].empty()) << "an end with no open slice: " << e.dump();
      EXPECT_EQ(e["name"], open[tid].back()) << e.dump();
      open[tid].pop_back();
    }
  }
  EXPECT_GT(begins, 10u);
  EXPECT_EQ(ends, begins);
  for (const auto& [tid, stack] : open) EXPECT_TRUE(stack.empty()) << "tid " << tid;
}

TEST_F(PtdecodeEmulatedTest, TimelineEndsNameTheSliceTheyClose) {
  PTKIT_RECORD_OR_SKIP(fib, "fib", kFib);
  auto r = RunCommand({PTDECODE_PATH, "timeline", fib.trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectEndsNameTheirSlices(r.out);
  PTKIT_RECORD_OR_SKIP(fork, "fork", kFork);  // two processes, two tracks
  r = RunCommand({PTDECODE_PATH, "timeline", fork.trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectEndsNameTheirSlices(r.out);
}

// The fast block decoder (and its packet loop) gives libipt's answer on real emulated
// recordings, with its walk of canonical blocks (fast) and without (fast-blocks): every output
// built on blocks, byte for byte.
TEST_F(PtdecodeEmulatedTest, FastDecoderGivesLibiptsOutputs) {
  PTKIT_RECORD_OR_SKIP(fib, "fib", kFib);
  PTKIT_RECORD_OR_SKIP(fork, "fork", kFork);
  for (const std::string& trace : {fib.trace, fork.trace}) {
    for (std::vector<std::string> command : {std::vector<std::string>{"stats"},
                                             {"stats", "--json"},
                                             {"folded"},
                                             {"calls"},
                                             {"timeline"}}) {
      SCOPED_TRACE(trace + " " + command[0]);
      std::string out[3];
      const char* const decoders[] = {"libipt", "fast", "fast-blocks"};
      for (int d = 0; d < 3; ++d) {
        std::vector<std::string> argv = {PTDECODE_PATH};
        argv.insert(argv.end(), command.begin(), command.end());
        argv.insert(argv.end(), {"--decoder", decoders[d], trace});
        auto r = RunCommand(argv);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        out[d] = r.out;
      }
      EXPECT_FALSE(out[0].empty());
      EXPECT_EQ(out[0], out[1]);
      EXPECT_EQ(out[0], out[2]);
    }
  }
}

TEST_F(PtdecodeEmulatedTest, StatsOfAForkingProgramHaveOneRowPerFunction) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  PerThread truth = ReadTruth(rec.truth);
  ASSERT_EQ(truth.size(), 2u);  // parent and child
  auto r = RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  uint64_t total = 0;
  for (const auto& [tid, ips] : truth) total += ips.size();
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), total);
  std::set<std::pair<std::string, std::string>> rows;
  for (const auto& fn : doc["functions"]) {
    const std::string function = fn["function"], image = fn["image"];
    EXPECT_TRUE(rows.insert({function, image}).second)
        << "two rows for " << function << " in " << image;
  }
  for (const char* name : {"main", "spin"}) {
    SCOPED_TRACE(name);
    auto [begin, end] = NmRange(kFork, name);
    ASSERT_LT(begin, end);
    uint64_t self = 0, entries = 0;  // both processes
    for (const auto& [tid, ips] : truth) {
      for (uint64_t ip : ips) {
        self += ip >= begin && ip < end;
        entries += ip == begin;
      }
    }
    int found = 0;
    for (const auto& fn : doc["functions"]) {
      if (fn["function"] != name) continue;
      ++found;
      EXPECT_EQ(fn["self"].get<uint64_t>(), self);
      if (std::string(name) == "spin") {
        EXPECT_EQ(fn["calls"].get<uint64_t>(), entries);
      }
    }
    EXPECT_EQ(found, 1);
  }
}

TEST_F(PtdecodeEmulatedTest, AFilterThatMatchesNothingNamesWhatTheRecordingHas) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  PerThread truth = ReadTruth(rec.truth);
  ASSERT_EQ(truth.size(), 2u);
  std::string tids;
  for (const auto& [tid, ips] : truth) tids += (tids.empty() ? "" : ", ") + std::to_string(tid);
  for (const char* cmd : {"stats", "insn", "timeline", "packets"}) {
    auto r = RunCommand({PTDECODE_PATH, cmd, rec.trace, "--tid", "99999"});
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_EQ(r.out, "") << cmd;
    EXPECT_EQ(r.err, "ptdecode: " + rec.trace +
                         ": no stream of thread 99999; threads in this recording: " + tids + "\n")
        << cmd;
  }
  auto r = RunCommand({PTDECODE_PATH, "stats", rec.trace, "--cpu", "7"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(": no stream of CPU 7: this recording's streams are per thread"));
}

// What the input lacks is said by every decoding sub-command, packets too (sweep 29b S6: it
// printed nothing, exit 0, on a file cut before its trace), and records of a kind a newer ptkit
// wrote are said to be skipped (U2: only `info` said so). The files: the recording cut in its
// trace, cut before it, and copied record by record with two records of an unknown kind 77.
TEST_F(PtdecodeEmulatedTest, EveryCommandSaysWhatTheInputLacks) {
  PTKIT_RECORD_OR_SKIP(rec, "fib", kFib);
  testing::TempDir temp;
  const std::string dir = temp.File("");
  const std::string newer = dir + "newer.pt";
  {
    auto reader = ContainerReader::Open(rec.trace);
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto writer = ContainerWriter::Create(newer);
    ASSERT_TRUE(writer.ok()) << writer.status();
    RecordView r;
    uint64_t aux_at = 0;
    for (absl::StatusOr<bool> more; (more = reader->Next(r)).ok() && *more;) {
      if (r.type == RecordType::kFooter) continue;
      if (r.type == RecordType::kAux && aux_at == 0) aux_at = r.offset;
      ASSERT_TRUE((*writer)->Append(r.type, {r.payload.begin(), r.payload.end()}).ok());
      if (r.type == RecordType::kMetadata) {
        ASSERT_TRUE((*writer)->Append(static_cast<RecordType>(77), {1, 2, 3}).ok());
      }
    }
    ASSERT_TRUE((*writer)->Close().ok());
    ASSERT_GT(aux_at, 0u);
    std::ifstream in(rec.trace, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "before.pt", std::ios::binary) << bytes.substr(0, aux_at + 100);
    std::ofstream(dir + "within.pt", std::ios::binary) << bytes.substr(0, bytes.size() * 2 / 3);
  }
  for (const char* cmd : {"stats", "insn", "packets"}) {
    SCOPED_TRACE(cmd);
    auto within = RunCommand({PTDECODE_PATH, cmd, dir + "within.pt"});
    EXPECT_THAT(within.err, HasSubstr("ptdecode: warning: " + dir + "within.pt: no footer"));
    auto before = RunCommand({PTDECODE_PATH, cmd, dir + "before.pt"});
    EXPECT_EQ(before.exit_code, 1);
    EXPECT_THAT(before.err, HasSubstr(" damaged bytes at offset "));
    EXPECT_THAT(before.err, HasSubstr("the input is incomplete (2 warnings above): its trace may "
                                      "be in what is missing"));
    auto n = RunCommand({PTDECODE_PATH, cmd, newer});
    EXPECT_EQ(n.exit_code, 0) << n.err;
    EXPECT_THAT(n.err, HasSubstr("ptdecode: warning: " + newer +
                                 ": skipping record kind 77 (written by a newer ptkit?): what it "
                                 "held is not in this decode (a newer ptdecode may read it)"));
  }
}

// --decoder and -j are every decoding sub-command's, as the man page says: report, diff and
// info --decode too (they were usage errors there), with the same output.
TEST_F(PtdecodeEmulatedTest, ReportDiffAndInfoTakeTheDecoderAndJobs) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  const std::vector<std::vector<std::string>> commands = {
      {PTDECODE_PATH, "report", rec.trace},
      {PTDECODE_PATH, "diff", rec.trace, rec.trace},
      {PTDECODE_PATH, "info", "--decode", rec.trace}};
  for (const std::vector<std::string>& command : commands) {
    auto plain = RunCommand(command);
    ASSERT_EQ(plain.exit_code, 0) << command[1] << ": " << plain.err;
    for (const std::vector<std::string>& extra :
         std::vector<std::vector<std::string>>{{"--decoder", "libipt"}, {"-j", "2"}}) {
      std::vector<std::string> argv = command;
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto r = RunCommand(argv);
      EXPECT_EQ(r.exit_code, 0) << command[1] << " " << extra[0] << ": " << r.err;
      EXPECT_EQ(r.out, plain.out) << command[1] << " " << extra[0];
    }
  }
}

TEST_F(PtdecodeEmulatedTest, AFileAloneGivesTheDefaultReport) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  auto r = RunCommand({PTDECODE_PATH, rec.trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("footer:      present"));         // info
  EXPECT_THAT(r.out, HasSubstr("  function [image]\n"));         // stats
  EXPECT_THAT(r.out, HasSubstr("  spin [emulate_fork]\n"));      // its top function
  EXPECT_THAT(r.out, HasSubstr("\nlosses and errors: none\n"));  // and the problems
  int rows = 0;                                                  // function rows: self% and incl%
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    rows += std::count(line.begin(), line.end(), '%') == 2 && line.find("self%") == line.npos;
  }
  EXPECT_EQ(rows, 20);
  EXPECT_THAT(r.out, HasSubstr(" more functions: ptdecode stats shows them all)\n"));
  // With the stream filters of the decoding sub-commands: one thread, whose spin() ran
  // once (twice in the whole recording: parent and child).
  PerThread truth = ReadTruth(rec.truth);
  r = RunCommand({PTDECODE_PATH, rec.trace, "--tid", std::to_string(truth.rbegin()->first)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\n# 1 stream, 0 loss points, 0 bytes lost\n"));
  EXPECT_THAT(r.out, HasSubstr("         1  spin [emulate_fork]\n"));
  r = RunCommand({PTDECODE_PATH, rec.trace});
  EXPECT_THAT(r.out, HasSubstr("         2  spin [emulate_fork]\n"));
  r = RunCommand({PTDECODE_PATH, rec.trace, "--tid", "99999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no stream of thread 99999; threads in this recording: "));
}

// A reader that goes away ends ptdecode by SIGPIPE, as it ends other tools, also where whoever
// started it ignored SIGPIPE (sweep 31b F2: the writes failed, the whole trace was decoded, and
// then "write error on output", exit 1). A write that fails otherwise says why.
TEST_F(PtdecodeEmulatedTest, AReaderThatGoesAwayEndsTheDecode) {
  PTKIT_RECORD_OR_SKIP(rec, "fib", kFib);
  const std::string script =
      "trap '' PIPE; \"$0\" insn \"$1\" | head -c 100 > /dev/null; echo ${PIPESTATUS[0]}";
  auto r = RunCommand({"/bin/bash", "-c", script, PTDECODE_PATH, rec.trace});
  EXPECT_EQ(r.out, "141\n") << r.err;
  EXPECT_EQ(r.err, "");
  // Also info, whose text fits stdio's buffer, and --help and --version (sweep 39b F3: exit 0,
  // nothing said, an empty file).
  for (const char* command :
       {"insn \"$1\"", "info \"$1\"", "info --json \"$1\"", "--help", "--version", "info --help"}) {
    SCOPED_TRACE(command);
    r = RunCommand({"/bin/bash", "-c", absl::StrCat("\"$0\" ", command, " > /dev/full"),
                    PTDECODE_PATH, rec.trace});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("write error on output: No space left on device"));
  }
}

// Decoding a recording of many processes holds the fast decoder's graphs of the processes
// being decoded only: after a process's last stream they go (its image stays: outputs name
// code by it); and the images of its processes share the symbol tables of the files they map
// (sweep 31b F1: each gcc -c of a build added 57 MB to ptdecode stats, its cc1's graphs and
// symbol tables kept to the end for every compile; 4 compiles 294 MB, now 133 MB).
TEST_F(PtdecodeEmulatedTest, ADecodedProcessLetsGoOfItsGraphsAndSharesItsSymbols) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  absl::StatusOr<decoder::Recording> r = decoder::OpenRecording(rec.trace, {});
  ASSERT_TRUE(r.ok()) << r.status();
  decoder::RecordingImages images(*r, {});
  struct Images : decoder::CountSink {
    void OnStream(const decoder::StreamInfo& stream) override { seen.insert(stream.image); }
    std::set<const decoder::ProgramImage*> seen;
  } sink;
  auto totals = decoder::DecodeRecording(*r, {}, sink, &images);
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_GT(sink.instructions(), 0u);
  ASSERT_EQ(sink.seen.size(), 2u);  // the parent's and the child's
  for (const decoder::ProgramImage* image : sink.seen) {
    EXPECT_EQ(image->fast_decoder_graphs(), nullptr);
    EXPECT_EQ(image->link_symbol_cache(), (*sink.seen.begin())->link_symbol_cache());
  }
}

// info --decode's totals are those of stats: instructions, blocks (a call ends one, as stats
// counts them: sweep 31b F3, 4-15% fewer), errors.
TEST_F(PtdecodeEmulatedTest, InfoDecodeCountsAsStatsDoes) {
  PTKIT_RECORD_OR_SKIP(rec, "fork", kFork);
  auto info = RunCommand({PTDECODE_PATH, "info", "--decode", "--json", rec.trace});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json decode = nlohmann::json::parse(info.out)["decode"];
  const nlohmann::json totals = nlohmann::json::parse(stats.out)["totals"];
  for (const char* key : {"instructions", "blocks", "errors", "streams"}) {
    EXPECT_EQ(decode[key], totals[key]) << key;
  }
  EXPECT_GT(decode["blocks"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace ptkit
