// The ptdecode binary: raw-mode sub-commands end to end, and its error contract (usage errors:
// one "ptdecode: ..." line, exit 2; runtime errors: one line naming the input, exit 1).
#include <linux/perf_event.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "read_file.h"
#include "status_matchers.h"
#include "test_container.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::testing::ExecMmap2;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::NewContainer;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using ::ptkit::decoder::testing::kTiny;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result RunPtdecode(const std::string& args) {
  const std::string out = ::ptkit::decoder::testing::TempPath("ptdecode.out");
  const std::string err = ::ptkit::decoder::testing::TempPath("ptdecode.err");
  std::string cmd = std::string(PTDECODE_PATH) + " " + args + " >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

class PtdecodeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    PtSynth synth(*code);
    auto truth =
        synth.AddSegment({.entry = code->Symbol("work").address, .seed = 21, .max_insns = 4000});
    ASSERT_THAT(truth, IsOk());
    instructions_ = truth->size();
    text_ = code->Symbol("leaf").address & ~0xfffull;  // page of the lowest function
    text_offset_ = code->FileOffset(text_);
    trace_ = ::ptkit::decoder::testing::TempPath("cli_tiny.pt");
    std::vector<uint8_t> bytes = synth.bytes();
    std::ofstream(trace_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  void TearDown() override {
    (void)std::remove(trace_.c_str());
    (void)std::remove(::ptkit::decoder::testing::TempPath("ptdecode.out").c_str());
    (void)std::remove(::ptkit::decoder::testing::TempPath("ptdecode.err").c_str());
  }
  std::string trace_;
  uint64_t instructions_ = 0;
  uint64_t text_ = 0, text_offset_ = 0;
};

int CountLines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST_F(PtdecodeCliTest, StatsJsonCountsEveryInstruction) {
  Result r = RunPtdecode("stats --json --pt " + trace_ + " --elf " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), instructions_);
  EXPECT_EQ(doc["totals"]["errors"].get<uint64_t>(), 0u);
}

// --decoder picks the block decoder; both give the same stats, calls and folded output.
TEST_F(PtdecodeCliTest, BothBlockDecodersGiveTheSameOutput) {
  for (const char* form : {"stats", "stats --json", "calls", "folded"}) {
    Result libipt =
        RunPtdecode(fmt::format("{} --decoder libipt --pt {} --elf {}", form, trace_, kTiny));
    Result fast =
        RunPtdecode(fmt::format("{} --decoder fast --pt {} --elf {}", form, trace_, kTiny));
    ASSERT_EQ(libipt.exit_code, 0) << libipt.err;
    ASSERT_EQ(fast.exit_code, 0) << fast.err;
    EXPECT_NE(libipt.out, "") << form;
    EXPECT_EQ(libipt.out, fast.out) << form;
  }
  Result bad = RunPtdecode("stats --decoder zydis --pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--decoder"));
}

TEST_F(PtdecodeCliTest, InsnPrintsOneLinePerInstructionPlusMarkers) {
  Result r = RunPtdecode("insn --pt " + trace_ + " --elf " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // [enabled ...] and [disabled ...] frame the instructions.
  EXPECT_EQ(CountLines(r.out), static_cast<int>(instructions_) + 2);
  EXPECT_THAT(r.out, StartsWith("[enabled 0x"));
  Result raw = RunPtdecode(
      fmt::format("insn --pt {} --raw {}:{:#x}:{:#x}", trace_, kTiny, text_offset_, text_));
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  // A raw image has no symbols: instructions are named by the file.
  EXPECT_EQ(CountLines(raw.out), static_cast<int>(instructions_) + 2);
  EXPECT_THAT(raw.out, HasSubstr("  [tiny.elf]\n"));
  EXPECT_THAT(raw.out, ::testing::Not(HasSubstr("work+")));
  EXPECT_THAT(r.out, HasSubstr("  work+0x0\n"));
}

// Code without a symbol is named "[file]": stats and calls print that name once, not
// "[tiny.elf] [tiny.elf]" or "[[tiny.elf]]" (issue 10 item 13).
TEST_F(PtdecodeCliTest, CodeWithoutASymbolIsNamedByItsFileOnce) {
  const std::string raw =
      fmt::format("--pt {} --raw {}:{:#x}:{:#x}", trace_, kTiny, text_offset_, text_);
  Result stats = RunPtdecode("stats " + raw);
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr("  [tiny.elf]\n"));
  EXPECT_THAT(stats.out, ::testing::Not(HasSubstr("[tiny.elf] [tiny.elf]")));
  Result calls = RunPtdecode("calls " + raw);
  ASSERT_EQ(calls.exit_code, 0) << calls.err;
  EXPECT_THAT(calls.out, HasSubstr(" [tiny.elf]\n"));
  EXPECT_THAT(calls.out, ::testing::Not(HasSubstr("[[")));
}

TEST_F(PtdecodeCliTest, EveryFormRuns) {
  for (const char* cmd : {"branches", "calls", "folded", "timeline", "packets", "calls --json",
                          "branches --json", "packets --json", "insn --disasm --json"}) {
    Result r = RunPtdecode(std::string(cmd) + " --pt " + trace_ + " --elf " + kTiny);
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << cmd;
    EXPECT_EQ(r.err, "") << cmd;
  }
}

TEST_F(PtdecodeCliTest, TimeWindowWithoutTimingKeepsNothingAndSaysWhy) {
  // This trace has no timing packets: no instruction has a known time.
  Result r = RunPtdecode("insn --time 0,1000000 --pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ptdecode: " + trace_ +
                       ": --time 0,1000000: no instruction ran in [0, 1000000): the trace has no "
                       "timing packets (no TSC, MTC or CYC)\n");
}

TEST_F(PtdecodeCliTest, TimeWindowTotalsAgreeWithItsRows) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  PtSynth synth(*code);
  const uint64_t work = code->Symbol("work").address;
  auto early = synth.AddSegment({.entry = work, .seed = 21, .max_insns = 3000, .tsc = 1000});
  auto late = synth.AddSegment({.entry = work, .seed = 22, .max_insns = 2000, .tsc = 9000});
  ASSERT_THAT(early, IsOk());
  ASSERT_THAT(late, IsOk());
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_two_times.pt");
  std::vector<uint8_t> bytes = synth.bytes();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const std::string input = " --pt " + path + " --elf " + kTiny;
  for (const auto& [window, expected] : {std::pair<std::string, size_t>{"0,5000", early->size()},
                                         {"5000,10000", late->size()},
                                         {"0,10000", early->size() + late->size()}}) {
    SCOPED_TRACE(window);
    Result r = RunPtdecode(fmt::format("stats --json --time {}{}", window, input));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto doc = nlohmann::json::parse(r.out);
    uint64_t self = 0;
    for (const auto& fn : doc["functions"]) self += fn["self"].get<uint64_t>();
    EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), expected);
    EXPECT_EQ(self, expected);
    uint64_t images = 0;
    for (const auto& image : doc["images"]) images += image["instructions"].get<uint64_t>();
    EXPECT_EQ(images, expected);
  }
  Result r = RunPtdecode("stats --time 1,100" + input);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, StartsWith("# " + path + ": " + std::to_string(bytes.size()) +
                                " bytes, 0 instructions, 0 blocks"));
  EXPECT_EQ(r.err, "ptdecode: " + path +
                       ": --time 1,100: no instruction ran in [1, 100); the trace's time (TSC) "
                       "runs from 1000 to 9000\n");
  for (const char* bad : {"5,1", "5,5"}) {
    r = RunPtdecode(std::string("stats --time ") + bad + input);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(r.err, fmt::format("ptdecode: bad --time '{}': FROM must be less than TO (the "
                                 "window is [FROM, TO)) (see ptdecode --help)\n",
                                 bad));
  }
  (void)std::remove(path.c_str());
}

TEST_F(PtdecodeCliTest, PacketsJsonGivesCountersAsNumbers) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  PtSynth synth(*code);
  const uint64_t tsc = 0x123456789abcull;
  ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("work").address, .tsc = tsc}), IsOk());
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_tsc.pt");
  std::vector<uint8_t> bytes = synth.bytes();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  Result r = RunPtdecode("packets --json --pt " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int tscs = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    auto packet = nlohmann::json::parse(line);
    if (packet["packet"] != "tsc") continue;
    ++tscs;
    EXPECT_TRUE(packet["tsc"].is_number_unsigned()) << line;
    EXPECT_EQ(packet["tsc"].get<uint64_t>(), tsc);
  }
  EXPECT_EQ(tscs, 1);
  Result insn = RunPtdecode("insn --json --pt " + path + " --elf " + kTiny);  // the same form
  ASSERT_EQ(insn.exit_code, 0) << insn.err;
  EXPECT_THAT(insn.out, HasSubstr(fmt::format("\"tsc\":{},", tsc)));
  (void)std::remove(path.c_str());
}

TEST_F(PtdecodeCliTest, BtsRecordsDecodeLikeTheWalk) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  PtSynth synth(*code);
  auto ips =
      synth.AddSegment({.entry = code->Symbol("work").address, .seed = 21, .max_insns = 4000});
  ASSERT_THAT(ips, IsOk());
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = ptkit::decoder::testing::BtsFromWalk(*code, *ips, &branches);
  ASSERT_GE(branches.size(), 2u);
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_tiny.bts");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bts.data()), static_cast<std::streamsize>(bts.size()));
  Result r = RunPtdecode("insn --bts " + path + " --elf " + kTiny);
  (void)std::remove(path.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CountLines(r.out), static_cast<int>(branches.back() - branches.front() + 1));
  Result bad = RunPtdecode("insn --bts " + trace_ + " --elf " + kTiny);  // not 24-byte records
  if ((std::ifstream(trace_, std::ios::ate).tellg() % 24) != 0) {
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_THAT(bad.err, HasSubstr("24-byte BTS record"));
  }
}

// Writes a trace.pt at `path`: `metadata` plus the sample layout, tiny.elf's text mapped in
// process 300 (mapped at `text`, file offset `text_offset`), `pt` as thread 300's AUX data.
void WriteTinyContainer(const std::string& path, nlohmann::json metadata,
                        const std::vector<uint8_t>& pt, uint64_t text, uint64_t text_offset) {
  const perf::SampleIdLayout layout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, true};
  if (!metadata.contains("attrs")) {
    metadata["attrs"] = {{{"sample_type", layout.sample_type}, {"sample_id_all", true}}};
  }
  auto writer = NewContainer(path, {metadata.dump()});
  ASSERT_THAT(writer, IsOk());
  ASSERT_THAT(
      (*writer)->AppendSideband(
          {-1, ExecMmap2(300, text, 0x1000, text_offset, kTiny,
                         {.has_tid = true, .has_time = true, .pid = 300, .tid = 300, .time = 1},
                         layout)}),
      IsOk());
  ASSERT_THAT((*writer)->AppendAux({{StreamKind::kThread, 300}, 0, 0, 5, pt}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
}

TEST_F(PtdecodeCliTest, DecodesATracePtContainer) {
  std::vector<uint8_t> pt = ::ptkit::testing::ReadWholeFile(trace_);
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_tiny.trace.pt");
  WriteTinyContainer(path, nlohmann::json::object(), pt, text_, text_offset_);
  if (HasFatalFailure()) return;

  Result r = RunPtdecode("stats --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), instructions_);
  EXPECT_EQ(doc["totals"]["streams"].get<uint64_t>(), 1u);
  r = RunPtdecode("insn " + path + " --tid 300");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("[stream tid 300: pid 300"));
  EXPECT_THAT(r.out, HasSubstr("  work+0x0\n"));
  EXPECT_THAT(r.out, HasSubstr("\ntid 300  0000000000"));  // stream column on every line
  r = RunPtdecode("insn --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int insns = 0;
  for (size_t start = 0, end; (end = r.out.find('\n', start)) != std::string::npos;
       start = end + 1) {
    auto line = nlohmann::json::parse(r.out.substr(start, end - start));  // every line is JSON
    if (line.contains("sym")) {  // an instruction (events have "ip" too)
      ++insns;
      EXPECT_EQ(line["stream"], "tid 300");
      EXPECT_EQ(line["tid"], 300);
    }
  }
  EXPECT_EQ(insns, static_cast<int>(instructions_));
  r = RunPtdecode("info --json --decode " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info["decode"]["instructions"].get<uint64_t>(), instructions_);
  EXPECT_EQ(info["decode"]["errors"].get<uint64_t>(), 0u);
  r = RunPtdecode("info --json " + path);  // without --decode: the container summary only
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("decode"));
  r = RunPtdecode("info --decode " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("decode: 1 stream, " + std::to_string(instructions_) +
                               " instructions, 0 errors"));
  // packets: the stream's header line, then exactly the raw trace's dump (offsets are the
  // stream's).
  r = RunPtdecode("packets " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result raw = RunPtdecode("packets --pt " + trace_);
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  ASSERT_THAT(r.out, StartsWith("[stream tid 300"));
  EXPECT_EQ(r.out.substr(r.out.find('\n') + 1), raw.out);
  r = RunPtdecode("insn " + path + " --tid 301");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "ptdecode: " + path + ": no stream of thread 301; threads in this recording: 300\n");
  r = RunPtdecode("stats " + path + " --cpu 7");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ptdecode: " + path +
                       ": no stream of CPU 7: this recording's streams are per thread (tid 300), "
                       "not per CPU\n");
  r = RunPtdecode("calls " + path + " --snapshot 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(": no snapshot 3: this recording has no snapshots"));
  // The default report: `ptdecode FILE` is `ptdecode report FILE`: info, stats, problems.
  r = RunPtdecode(path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Result summary = RunPtdecode("info " + path);
  Result stats = RunPtdecode("stats " + path);
  ASSERT_EQ(summary.exit_code, 0);
  ASSERT_EQ(stats.exit_code, 0);
  EXPECT_EQ(r.out, summary.out + "\n" + stats.out + "\nlosses and errors: none\n");
  EXPECT_EQ(RunPtdecode("report " + path).out, r.out);
  EXPECT_THAT(stats.out, HasSubstr("\n# 1 stream, 0 loss points, 0 bytes lost\n"));  // "1 stream"
  r = RunPtdecode("insn " + path + " --pt " + trace_);
  EXPECT_EQ(r.exit_code, 2);
  r = RunPtdecode("insn " + path + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 2);
  r = RunPtdecode("insn --pt " + trace_ + " --tid 3");
  EXPECT_EQ(r.exit_code, 2);
  (void)std::remove(path.c_str());
}

TEST_F(PtdecodeCliTest, ContainerTimeIsPerfTimeFromTheMetadata) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  PtSynth synth(*code);
  const uint64_t tsc = 6000000000;
  auto truth = synth.AddSegment(
      {.entry = code->Symbol("work").address, .seed = 21, .max_insns = 4000, .tsc = tsc});
  ASSERT_THAT(truth, IsOk());
  // perf time = time_zero + tsc * 3 / 4 (time_mult 3, time_shift 2).
  nlohmann::json metadata = {
      {"time_conversion",
       {{"cap_user_time_zero", true}, {"time_zero", 1000}, {"time_mult", 3}, {"time_shift", 2}}}};
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_timed.trace.pt");
  WriteTinyContainer(path, metadata, synth.bytes(), text_, text_offset_);
  if (HasFatalFailure()) return;
  const uint64_t ns = 1000 + tsc / 4 * 3;
  const std::string time = fmt::format("{}.{:09}", ns / 1000000000, ns % 1000000000);

  Result r = RunPtdecode("insn " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("\n{:>20} tid 300  0000000000", time)));
  r = RunPtdecode("timeline " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["otherData"]["ts_clock"], "perf_time");
  for (const auto& event : doc["traceEvents"]) {
    if (event.contains("ts")) {
      EXPECT_DOUBLE_EQ(event["ts"].get<double>(), static_cast<double>(ns) / 1000);
    }
  }
  r = RunPtdecode("folded --weight=time " + path);  // one segment: no interval closes
  EXPECT_EQ(r.exit_code, 0) << r.err;
  (void)std::remove(path.c_str());
}

// Issue 12 item 2: a mistyped metadata member that decoding needs (one per group:
// time_conversion, cpu, pmu, attrs[] and an attrs element that is not an object) aborted every
// decoding sub-command (type_error.302, exit 134). Each now stops with one line naming the
// member (exit 1); info shows the metadata and says the same as a warning (exit 0).
TEST_F(PtdecodeCliTest, AMistypedMetadataMemberIsARuntimeErrorNamingIt) {
  std::vector<uint8_t> pt = ::ptkit::testing::ReadWholeFile(trace_);
  const nlohmann::json attr = {{"type", 8},
                               {"config", 1},
                               {"sample_type", PERF_SAMPLE_TID | PERF_SAMPLE_TIME},
                               {"sample_id_all", true}};
  const nlohmann::json good = {
      {"cpu", {{"vendor", "GenuineIntel"}, {"family", 6}, {"model", 85}, {"stepping", 4}}},
      {"pmu", {{"name", "intel_pt"}, {"type", 8}}},
      {"attrs", {attr}},
      {"time_conversion",
       {{"cap_user_time_zero", true}, {"time_zero", 0}, {"time_mult", 1}, {"time_shift", 0}}}};
  const std::vector<std::pair<std::string, nlohmann::json>> damage = {
      {"/time_conversion/time_zero", "0"},
      {"/cpu/family", "6"},
      {"/pmu/type", "8"},
      {"/attrs/0/config", "1"},
      {"/attrs/0", 5},
  };
  const std::string path = ::ptkit::decoder::testing::TempPath("cli_mistyped.trace.pt");
  WriteTinyContainer(path, good, pt, text_, text_offset_);
  if (HasFatalFailure()) return;
  ASSERT_EQ(RunPtdecode("stats " + path).exit_code, 0);
  for (const auto& [pointer, value] : damage) {
    SCOPED_TRACE(pointer);
    nlohmann::json bad = good;
    bad[nlohmann::json::json_pointer(pointer)] = value;
    WriteTinyContainer(path, bad, pt, text_, text_offset_);
    if (HasFatalFailure()) return;
    std::string field = pointer.substr(1);
    std::replace(field.begin(), field.end(), '/', '.');
    if (field.starts_with("attrs.0")) field.replace(0, 7, "attrs[0]");
    const std::string message = fmt::format("ptdecode: {}: metadata: \"{}\" must be", path, field);
    for (const char* command : {"insn", "branches", "calls", "stats", "folded", "timeline",
                                "packets", "report", "info --decode"}) {
      SCOPED_TRACE(command);
      Result r = RunPtdecode(fmt::format("{} {}", command, path));
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_THAT(r.err, StartsWith(message));
      EXPECT_EQ(CountLines(r.err), 1) << r.err;
    }
    Result r = RunPtdecode("info " + path);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("warning:     metadata: \"{}\" must be", field)));
  }
  (void)std::remove(path.c_str());
}

TEST_F(PtdecodeCliTest, FoldedByTimeWithoutTimingFailsSayingWhy) {
  Result r = RunPtdecode("folded --weight=time --pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("ptdecode: folded --weight=time: the trace has no timing"));
  EXPECT_EQ(CountLines(r.err), 1);
  r = RunPtdecode("folded --weight=insn --pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunPtdecode("folded --weight=cycles --pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(PtdecodeCliTest, SrclineWithoutDwarfNamesTheFileOnce) {
  for (const char* cmd : {"insn", "branches", "calls"}) {
    Result plain = RunPtdecode(std::string(cmd) + " --pt " + trace_ + " --elf " + kTiny);
    Result r = RunPtdecode(std::string(cmd) + " --srcline --pt " + trace_ + " --elf " + kTiny);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out) << cmd;  // nothing to add
    EXPECT_EQ(r.err, "ptdecode: warning: --srcline: " + kTiny +
                         " has no DWARF line information (no file:line for its code)\n");
  }
  EXPECT_EQ(RunPtdecode("stats --srcline --pt " + trace_ + " --elf " + kTiny).exit_code, 2);
}

TEST_F(PtdecodeCliTest, AnEmptyTraceFileSaysSo) {
  const std::string empty = ::ptkit::decoder::testing::TempPath("cli_empty.pt");
  std::ofstream(empty, std::ios::binary).close();
  for (const char* cmd : {"insn --pt ", "stats --pt ", "packets --pt ", "stats --bts "}) {
    Result r = RunPtdecode(cmd + empty);
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_EQ(r.out, "") << cmd;
    EXPECT_EQ(r.err, "ptdecode: " + empty + ": empty file (0 bytes): no trace to decode\n") << cmd;
  }
  (void)std::remove(empty.c_str());
}

TEST_F(PtdecodeCliTest, ElfTakesOneFilePerOption) {
  // `--elf X FILE`: FILE is the trace.pt, not a second image.
  Result r = RunPtdecode("stats --elf " + kTiny + " " + trace_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: --elf, --raw and --pages apply to raw traces (--pt), not to trace.pt (see "
            "ptdecode --help)\n");
  r = RunPtdecode("stats --elf " + kTiny + " --elf " + kTiny + " --pt " + trace_);  // repeated
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(PtdecodeCliTest, SubcommandErrorsNameTheWordAndTheChoices) {
  Result r = RunPtdecode("bogus " + trace_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: unknown sub-command 'bogus' (not a file either); sub-commands: info, insn, "
            "branches, calls, stats, folded, timeline, packets, report, export, samples, diff; "
            "or give a trace.pt FILE for the default report (see ptdecode --help)\n");
  for (const char* tid : {"abc", "-1", "4294967296", "1.5"}) {
    r = RunPtdecode(std::string("stats ") + trace_ + " --tid " + tid);
    EXPECT_EQ(r.exit_code, 2) << tid;
    EXPECT_EQ(r.err, fmt::format("ptdecode: bad --tid '{}': expected a number up to 4294967295 "
                                 "(see ptdecode --help)\n",
                                 tid));
  }
  r = RunPtdecode(std::string("stats ") + trace_ + " --snapshot x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("ptdecode: bad --snapshot 'x': expected a number"));
  // A sub-command's option before any sub-command (it was CLI11's "A subcommand is required").
  r = RunPtdecode("--pt " + trace_ + " --elf " + kTiny);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: --pt is an option of a sub-command: give the sub-command first (ptdecode "
            "SUB-COMMAND --pt ...); sub-commands: info, insn, branches, calls, stats, folded, "
            "timeline, packets, report, export, samples, diff (see ptdecode --help)\n");
  EXPECT_THAT(RunPtdecode("--jobs=2 " + trace_).err, HasSubstr("ptdecode: --jobs is an option"));
  // Another sub-command's option: named as such (sweep 29b U1: "The following arguments were
  // not expected: FILE --only-under" blamed the file too).
  r = RunPtdecode("folded --only-under main " + trace_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: folded has no --only-under option (sub-commands that have it: stats, diff) "
            "(see ptdecode folded --help)\n");
  // packets decodes no instruction: the decoding options are not its (sweep 40b M2: --time,
  // --decoder, -j and the timing options were taken and did nothing).
  for (const char* option : {"--time 1,2", "--decoder libipt", "-j 2", "--mtc-freq 3"}) {
    r = RunPtdecode(fmt::format("packets {} --pt {}", option, trace_));
    EXPECT_EQ(r.exit_code, 2) << option;
    EXPECT_THAT(r.err, HasSubstr("ptdecode: packets has no ")) << option;
  }
  r = RunPtdecode("folded --bogus " + trace_);  // no sub-command's: CLI11's words
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: The following argument was not expected: --bogus (see ptdecode folded "
            "--help)\n");
  r = RunPtdecode(trace_);  // a raw trace is no trace.pt: the report says so
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(trace_));
}

// A raw trace without code to follow it through: said (sweep 29b M4: "no instructions decoded
// (0 streams, 2272 bytes of trace, ...)" and no reason); packets needs none.
TEST_F(PtdecodeCliTest, ARawTraceWithoutCodeIsAUsageError) {
  Result r = RunPtdecode("stats --pt " + trace_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ptdecode: --pt/--bts: no code given: a raw trace decodes against the code it ran, "
            "given with --elf FILE[:BASE], --raw FILE[:FROM[-TO]]:ADDRESS or --pages DIR "
            "(ptdecode packets needs none) (see ptdecode --help)\n");
  EXPECT_EQ(RunPtdecode("packets --pt " + trace_).exit_code, 0);
  // FILE:BASE with a BASE that is no number: a usage error naming BASE (sweep 40b L8: taken as
  // a file name, "No such file", exit 1).
  r = RunPtdecode(fmt::format("stats --pt {} --elf {}:0xzz", trace_, kTiny));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr(fmt::format("bad --elf '{}:0xzz': BASE '0xzz' is not a number", kTiny)));
}

TEST_F(PtdecodeCliTest, UsageErrorsExitTwoWithOneLine) {
  for (const std::string& args : {std::string("stats --pt ") + trace_ + " --raw nonsense",
                                  std::string("stats --pt ") + trace_ + " --time 5",
                                  std::string("stats --pt ") + trace_ + " --time 5,x",
                                  std::string("stats"), std::string("frobnicate"), std::string(""),
                                  std::string("stats --pt ") + trace_ + " --cpu 6",
                                  std::string("stats --pt ") + trace_ + " --mtc-freq 99"}) {
    Result r = RunPtdecode(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("ptdecode: ")) << args;
    EXPECT_EQ(CountLines(r.err), 1) << args << ": " << r.err;
  }
}

TEST_F(PtdecodeCliTest, RuntimeErrorsExitOneNamingTheInput) {
  const std::string missing = ::ptkit::decoder::testing::TempPath("no_such_trace.pt");
  Result r = RunPtdecode("stats --pt " + missing);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(missing));

  r = RunPtdecode("info -");  // perf's name for standard input
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("-: a recording is not read from standard input"));

  r = RunPtdecode("stats --pt " + kTiny);  // an ELF file is not a PT stream
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("not an Intel PT stream"));
  EXPECT_THAT(r.err, HasSubstr(kTiny));

  // A recording given as raw trace is named for what it is (a perf.data's AUX bytes hold PSBs:
  // it was decoded as one stream of gaps; a trace.pt said "no PSB").
  for (const auto& [magic, said] :
       {std::pair<std::string, std::string>{std::string("PTKIT\0\r\n", 8), "a ptkit trace.pt"},
        {"PERFILE2", "a perf.data file"}}) {
    const std::string file = ::ptkit::decoder::testing::TempPath("recording_as_raw");
    std::ofstream(file, std::ios::binary) << magic << std::string(64, '\x02');
    const std::string named = fmt::format("{}: {}", file, said);
    for (const char* kind : {"--pt", "--bts"}) {
      r = RunPtdecode(fmt::format("stats {} {}", kind, file));
      EXPECT_EQ(r.exit_code, 1) << kind;
      EXPECT_THAT(r.err, HasSubstr(named)) << kind;
      EXPECT_THAT(r.err, HasSubstr("give it without --pt/--bts")) << kind;
    }
    (void)std::remove(file.c_str());
  }

  r = RunPtdecode("stats --pt " + trace_ + " --elf " + trace_);  // a PT file is not ELF
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(trace_ + ": not an ELF file"));

  r = RunPtdecode("stats --pt " + trace_ + " --raw " + kTiny + ":0x0-0x99999999:0x1000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("outside the file"));
  for (const Result& e : {r}) EXPECT_EQ(CountLines(e.err), 1);
}

}  // namespace
}  // namespace ptkit::decoder
