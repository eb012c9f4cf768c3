// SPDX-License-Identifier: Apache-2.0
//
// Progress of the ptdecode commands that make no ProgressSink of their own: packets, samples,
// info --decode, diff (LoadProfile) and export (to a trace.pt and to perf.data). ptdecode
// gives them stderr when it is a terminal (RecordingOptions::progress); here a memory stream
// and a clock that advances 300 ms at each reading stand in, as in the ProgressSink test
// (decoder_synth_test): the line shows ("ptdecode: N% of ...") and is erased at the end; with
// no stream nothing is written, and every result is the same either way. The recordings are
// real: /bin/ls under ptrecord --emulate=qemu, whole and with --aux-sample.
#include <stdio.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "decoder/container_export.h"
#include "decoder/container_input.h"
#include "decoder/diff.h"
#include "decoder/perf_data_export.h"
#include "decoder/progress.h"
#include "decoder/recording.h"
#include "decoder/samples.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

namespace dec = ::ptkit::decoder;
using ::ptkit::testing::RunCommand;
using ::testing::EndsWith;
using ::testing::HasSubstr;

// What `run` wrote to the progress stream (none when `shown` is false), and its result text.
struct Progressed {
  std::string line;
  std::string result;
};
Progressed WithProgressTo(bool shown,
                          const std::function<std::string(const dec::ProgressOutput&)>& run) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* err = open_memstream(&text, &size);
  uint64_t clock = 0;
  Progressed p;
  p.result = run({.err = shown ? err : nullptr, .now_ms = [&clock] { return clock += 300; }});
  EXPECT_EQ(std::fclose(err), 0);
  p.line.assign(text, size);
  std::free(text);
  return p;
}

// The text `fill` writes to a stream.
std::string Written(const std::function<void(std::FILE*)>& fill) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  fill(out);
  EXPECT_EQ(std::fclose(out), 0);
  std::string s(text, size);
  std::free(text);
  return s;
}

TEST(DecodeProgressTest, EveryCommandShowsItOnlyWithAStreamAndGivesTheSameResult) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::TempDir dir;
  const std::string whole = dir.File("ls.pt"), sampled = dir.File("ls-samples.pt");
  for (const auto& [out, extra] :
       {std::pair{whole, std::string()}, std::pair{sampled, std::string("--aux-sample")}}) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=qemu", "-q", "-o", out};
    if (!extra.empty()) argv.push_back(extra);
    argv.insert(argv.end(), {"--", "/bin/ls", "/"});
    auto rec = RunCommand(argv);
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
  }
  struct Command {
    std::string name;
    std::function<std::string(const dec::ProgressOutput&)> run;
  };
  const std::vector<Command> commands = {
      {"packets",
       [&](const dec::ProgressOutput& to) {
         dec::RecordingOptions o;
         o.progress = to;
         return Written([&](std::FILE* out) {
           EXPECT_TRUE(dec::DumpContainerPackets(whole, o, out, {}).ok());
         });
       }},
      {"info --decode",
       [&](const dec::ProgressOutput& to) {
         dec::RecordingOptions o;
         o.progress = to;
         auto d = dec::DecodeSummary(whole, o);
         EXPECT_TRUE(d.ok()) << d.status();
         return d.ok() ? d->dump() : "";
       }},
      {"diff",
       [&](const dec::ProgressOutput& to) {
         dec::RecordingOptions o;
         o.progress = to;
         auto p = dec::LoadProfile(whole, o, {});
         EXPECT_TRUE(p.ok()) << p.status();
         return p.ok() ? std::to_string(p->functions.size()) : "";
       }},
      {"samples",
       [&](const dec::ProgressOutput& to) {
         dec::RecordingOptions o;
         o.progress = to;
         auto r = dec::OpenRecording(sampled, o);
         EXPECT_TRUE(r.ok()) << r.status();
         if (!r.ok()) return std::string();
         return Written(
             [&](std::FILE* out) { EXPECT_TRUE(dec::PrintSamples(*r, o, {}, out).ok()); });
       }},
      {"export --to trace.pt",
       [&](const dec::ProgressOutput& to) {
         auto r = dec::OpenRecording(whole, {});
         EXPECT_TRUE(r.ok()) << r.status();
         if (!r.ok()) return std::string();
         dec::ContainerExportOptions o;
         o.progress = to;
         auto done = dec::ExportContainer(*r, dir.File("e.pt"), o);
         EXPECT_TRUE(done.ok()) << done.status();
         return done.ok() ? std::to_string(done->trace_bytes) : "";
       }},
      {"export perf.data",
       [&](const dec::ProgressOutput& to) {
         auto r = dec::OpenRecording(whole, {});
         EXPECT_TRUE(r.ok()) << r.status();
         if (!r.ok()) return std::string();
         dec::PerfDataExportOptions o;
         o.progress = to;
         auto done = dec::ExportPerfData(*r, dir.File("e.data"), o);
         EXPECT_TRUE(done.ok()) << done.status();
         return done.ok() ? std::to_string(done->trace_bytes) : "";
       }},
  };
  for (const Command& c : commands) {
    SCOPED_TRACE(c.name);
    const Progressed quiet = WithProgressTo(false, c.run);
    const Progressed shown = WithProgressTo(true, c.run);
    EXPECT_EQ(quiet.line, "");
    EXPECT_THAT(shown.line, HasSubstr("\rptdecode: "));
    EXPECT_THAT(shown.line, HasSubstr("% of "));
    EXPECT_THAT(shown.line, EndsWith("\r")) << "erased at the end";
    ASSERT_FALSE(quiet.result.empty());
    EXPECT_EQ(shown.result, quiet.result);
  }
}

}  // namespace
}  // namespace ptkit
