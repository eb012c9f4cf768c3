// Time in the output forms: the TSC clock from metadata, insn's time column, calls' ticks,
// folded --weight=time, timeline's microseconds. Traces get their time from TSC packets in
// PSB+ (pt_synth); the exact attribution rules are checked by driving the sinks by hand.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/profile.h"
#include "decoder/sinks.h"
#include "decoder/tsc_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hand_pt.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "status_matchers.h"
#include "test_container.h"
#include "test_io.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::HandBlock;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::ReadAll;
using ::ptkit::decoder::testing::WalkOptions;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// The typed metadata of `json` (which must be valid).
using ::ptkit::testing::TypedMetadata;

using ::ptkit::decoder::testing::kTiny;

using Factory =
    std::function<std::unique_ptr<Sink>(const ProgramImage&, std::FILE*, const OutputOptions&)>;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "path count" lines of folded output.
std::map<std::string, uint64_t> ParseFolded(const std::string& text) {
  std::map<std::string, uint64_t> stacks;
  for (const std::string& line : Lines(text)) {
    size_t space = line.rfind(' ');
    stacks[line.substr(0, space)] += std::stoull(line.substr(space + 1));
  }
  return stacks;
}

// A perf time conversion with simple arithmetic: ns = zero + tsc / 2.
TscClock HalfTscClock(uint64_t zero) {
  TscClock clock;
  TscConversion c;
  c.time_zero = zero;
  c.time_mult = 1;
  c.time_shift = 1;
  clock.perf = c;
  clock.tsc_hz = 2e9;
  clock.hz_source = "time_conversion";
  return clock;
}

class TimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    work_ = code_->Symbol("work");
    collatz_ = code_->Symbol("collatz");
    ASSERT_NE(work_.address, 0u);
    ASSERT_NE(collatz_.address, 0u);
    auto image = ProgramImage::Create();
    ASSERT_THAT(image, IsOk());
    ASSERT_THAT((*image)->AddElf({kTiny, 0}), IsOk());
    image_ = std::move(*image);
  }

  // Runs `make`'s sink over `trace` and returns what it printed.
  std::string Decode(const std::vector<uint8_t>& trace, const Factory& make,
                     const OutputOptions& options, absl::Status* status = nullptr) {
    std::FILE* out = std::tmpfile();
    EXPECT_NE(out, nullptr);
    auto sink = make(*image_, out, options);
    auto totals = DecodeTrace(trace, {}, *image_, *sink);
    if (status != nullptr) {
      *status = totals.status();
    } else {
      EXPECT_THAT(totals, IsOk());
    }
    std::string text = ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    return text;
  }

  // The address of a direct call (E8 rel32) from `work` to `collatz`.
  uint64_t CallSiteInWorkToCollatz() const {
    for (uint64_t ip = work_.address; ip + 5 <= work_.address + work_.size; ++ip) {
      uint8_t b[5];
      if (code_->Read(ip, b, 5) != 5 || b[0] != 0xe8) continue;
      int32_t rel = static_cast<int32_t>(b[1] | b[2] << 8 | b[3] << 16 | uint32_t{b[4]} << 24);
      if (ip + 5 + static_cast<int64_t>(rel) == collatz_.address) return ip;
    }
    return 0;
  }

  std::unique_ptr<ElfCode> code_;
  std::unique_ptr<ProgramImage> image_;
  ElfCode::Sym work_, collatz_;
};

TEST(TscClockTest, FromMetadataPrefersTheKernelConversionThenCpuidThenNominal) {
  nlohmann::json m = {
      {"time_conversion",
       {{"cap_user_time_zero", true}, {"time_zero", 77}, {"time_mult", 3}, {"time_shift", 4}}},
      {"cpu",
       {{"cpuid_15h",
         {{"tsc_ratio_numerator", 100}, {"tsc_ratio_denominator", 2}, {"crystal_hz", 1000}}}}},
      {"pmu", {{"nominal_frequency_hz", 2100000000}}}};
  TscClock c = TscClockFromMetadata(TypedMetadata(m));
  ASSERT_TRUE(c.perf.has_value());
  EXPECT_EQ(c.perf->time_zero, 77u);
  EXPECT_EQ(c.perf->time_mult, 3u);
  EXPECT_EQ(c.perf->time_shift, 4u);
  EXPECT_DOUBLE_EQ(c.tsc_hz, 1e9 * 16 / 3);  // ns per tick = mult / 2^shift
  EXPECT_EQ(c.hz_source, "time_conversion");

  m["time_conversion"]["cap_user_time_zero"] = false;  // time_zero not valid: no conversion
  c = TscClockFromMetadata(TypedMetadata(m));
  EXPECT_FALSE(c.perf.has_value());
  EXPECT_DOUBLE_EQ(c.tsc_hz, 1000.0 * 100 / 2);
  EXPECT_EQ(c.hz_source, "cpuid_15h");

  m["cpu"]["cpuid_15h"]["crystal_hz"] = 0;  // many CPUs leave the crystal out
  c = TscClockFromMetadata(TypedMetadata(m));
  EXPECT_DOUBLE_EQ(c.tsc_hz, 2.1e9);
  EXPECT_EQ(c.hz_source, "nominal_frequency");

  c = TscClockFromMetadata(RecordingMetadata{});
  EXPECT_FALSE(c.perf.has_value());
  EXPECT_EQ(c.tsc_hz, 0);
  EXPECT_EQ(TscClockFromConfig({.nom_freq = 24}).tsc_hz, 2.4e9);
  EXPECT_EQ(TscClockFromConfig({}).tsc_hz, 0);
}

TEST(TscClockTest, ReadsTheMetadataOfAContainer) {
  const std::string path = ::ptkit::decoder::testing::TempPath("clock.trace.pt");
  const nlohmann::json m = {
      {"time_conversion",
       {{"cap_user_time_zero", true}, {"time_zero", 5}, {"time_mult", 9}, {"time_shift", 3}}}};
  auto writer = ::ptkit::testing::NewContainer(path, {m.dump()});
  ASSERT_THAT(writer, IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  auto clock = ReadTscClock(path);
  ASSERT_THAT(clock, IsOk());
  ASSERT_TRUE(clock->perf.has_value());
  EXPECT_EQ(clock->perf->time_zero, 5u);
  EXPECT_EQ(clock->perf->time_mult, 9u);
  EXPECT_EQ(clock->perf->time_shift, 3u);
  (void)std::remove(path.c_str());
  EXPECT_THAT(ReadTscClock(kTiny), Not(IsOk()));  // not a container
}

TEST(TscClockTest, PerfTimeIsSecondsDotNanoseconds) {
  EXPECT_EQ(FormatPerfTime(0), "0.000000000");
  EXPECT_EQ(FormatPerfTime(12345678901234), "12345.678901234");
  EXPECT_EQ(FormatPerfTime(1000000005), "1.000000005");
}

TEST_F(TimeTest, InsnPrintsTheTimeOfEachInstruction) {
  PtSynth synth(*code_);
  auto first =
      synth.AddSegment({.entry = work_.address, .seed = 21, .max_insns = 300, .tsc = 1000});
  auto second =
      synth.AddSegment({.entry = work_.address, .seed = 4, .max_insns = 300, .tsc = 3000});
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  const std::vector<uint8_t> trace = synth.bytes();

  // Text, TSC only: the TSC right-aligned in the first column.
  std::map<std::string, size_t> per_time;
  for (const std::string& line : Lines(Decode(trace, MakeInsnSink, {}))) {
    if (line[0] == '[') continue;  // event
    std::istringstream fields(line);
    std::string time, ip;
    fields >> time >> ip;
    EXPECT_EQ(ip.size(), 16u) << line;
    ++per_time[time];
  }
  EXPECT_EQ(per_time,
            (std::map<std::string, size_t>{{"1000", first->size()}, {"3000", second->size()}}));

  // Text with the kernel's conversion: perf time as perf script prints it.
  OutputOptions options;
  options.clock = HalfTscClock(7000000000);
  per_time.clear();
  for (const std::string& line : Lines(Decode(trace, MakeInsnSink, options))) {
    if (line[0] != '[') ++per_time[line.substr(0, 21)];  // right-aligned in 20 columns
  }
  EXPECT_EQ(per_time, (std::map<std::string, size_t>{
                          {fmt::format("{:>20} ", "7.000000500"), first->size()},
                          {fmt::format("{:>20} ", "7.000001500"), second->size()}}));

  // JSON: "tsc" and "time_ns" members.
  options.json = true;
  std::map<uint64_t, size_t> per_tsc;
  for (const std::string& line : Lines(Decode(trace, MakeInsnSink, options))) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("sym")) continue;
    ++per_tsc[j["tsc"].get<uint64_t>()];
    EXPECT_EQ(j["time_ns"].get<uint64_t>(), 7000000000 + j["tsc"].get<uint64_t>() / 2);
  }
  EXPECT_EQ(per_tsc, (std::map<uint64_t, size_t>{{1000, first->size()}, {3000, second->size()}}));
}

TEST_F(TimeTest, InsnWithoutTimingHasNoTimeColumn) {
  PtSynth synth(*code_);
  auto walk = synth.AddSegment({.entry = work_.address, .seed = 21, .max_insns = 300});
  ASSERT_THAT(walk, IsOk());
  OutputOptions options;
  options.clock = HalfTscClock(7000000000);
  for (const std::string& line : Lines(Decode(synth.bytes(), MakeInsnSink, options))) {
    if (line[0] != '[') {
      EXPECT_EQ(line.find(' '), 16u) << line;  // the address comes first
    }
  }
  options.json = true;
  EXPECT_THAT(Decode(synth.bytes(), MakeInsnSink, options), Not(HasSubstr("tsc")));
}

TEST_F(TimeTest, CallsReportTheTicksFromCallToReturn) {
  const uint64_t call = CallSiteInWorkToCollatz();
  ASSERT_NE(call, 0u);
  for (bool json : {false, true}) {
    std::FILE* out = std::tmpfile();
    OutputOptions options;
    options.json = json;
    auto sink = MakeCallsSink(*image_, out, options);
    ASSERT_TRUE(sink->wants_time());
    const uint64_t t0 = 1000, t1 = 1300, t2 = 1750;
    sink->OnTime(t0);
    sink->OnBlock(HandBlock(work_.address, call, 3, ptic_call));
    sink->OnTime(t1);
    sink->OnBlock(HandBlock(collatz_.address, collatz_.address + 4, 4, ptic_return));
    sink->OnTime(t2);
    sink->OnBlock(HandBlock(call + 5, call + 5, 2, ptic_other));
    ASSERT_THAT(sink->Finish({}), IsOk());
    std::string text = ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    // Entered when its first block ran (time t1), left when the caller resumed (t2).
    if (json) {
      EXPECT_THAT(text, HasSubstr(fmt::format("\"return\":\"collatz\",\"insns\":4,\"ticks\":{}}}",
                                              t2 - t1)));
    } else {
      EXPECT_THAT(text, HasSubstr(fmt::format("< collatz (4 insns, {} ticks)\n", t2 - t1)));
    }
  }
}

TEST_F(TimeTest, CallsWithoutATimeAtTheCallHaveNoTicks) {
  const uint64_t call = CallSiteInWorkToCollatz();
  ASSERT_NE(call, 0u);
  std::FILE* out = std::tmpfile();
  auto sink = MakeCallsSink(*image_, out, {});
  sink->OnBlock(HandBlock(work_.address, call, 3, ptic_call));
  sink->OnBlock(HandBlock(collatz_.address, collatz_.address + 4, 4, ptic_return));
  sink->OnTime(500);  // known at the return only
  sink->OnBlock(HandBlock(call + 5, call + 5, 2, ptic_other));
  ASSERT_THAT(sink->Finish({}), IsOk());
  std::string text = ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  EXPECT_THAT(text, HasSubstr("< collatz (4 insns)\n"));
}

TEST_F(TimeTest, FoldedTimeSplitsEachIntervalByInstructions) {
  const uint64_t call = CallSiteInWorkToCollatz();
  ASSERT_NE(call, 0u);
  std::FILE* out = std::tmpfile();
  OutputOptions options;
  options.weight = FoldedWeight::kTime;
  auto sink = MakeFoldedSink(*image_, out, options);
  ASSERT_TRUE(sink->wants_time());
  const uint64_t k = 11, idle = 77, odd = 10;
  uint64_t t = 2000;
  sink->OnTime(t);
  // One interval: work 3 + 2 instructions, collatz 4, then k ticks per instruction.
  sink->OnBlock(HandBlock(work_.address, call, 3, ptic_call));
  sink->OnBlock(HandBlock(collatz_.address, collatz_.address + 4, 4, ptic_return));
  sink->OnBlock(HandBlock(call + 5, call + 5, 2, ptic_other));
  sink->OnTime(t += 9 * k);
  // An interval without instructions: to the stack on top (work).
  sink->OnTime(t += idle);
  // Ticks that do not divide evenly: rounded, none lost.
  sink->OnBlock(HandBlock(work_.address, call, 3, ptic_call));
  sink->OnBlock(HandBlock(collatz_.address, collatz_.address + 4, 4, ptic_return));
  sink->OnTime(t += odd);
  // Lost trace: the time across it is not counted, nor what ran after the last update.
  sink->OnLoss({"truncated", 0, 0});
  sink->OnTime(t += 100000);
  sink->OnBlock(HandBlock(work_.address, work_.address + 4, 5, ptic_other));
  ASSERT_THAT(sink->Finish({}), IsOk());
  auto stacks = ParseFolded(ReadAll(out));
  EXPECT_EQ(std::fclose(out), 0);
  ASSERT_EQ(stacks.size(), 2u);
  const uint64_t odd_work = odd * 3 / 7;  // floor share of work's 3 of 7 instructions
  EXPECT_EQ(stacks["work"], 5 * k + idle + odd_work);
  EXPECT_EQ(stacks["work;collatz"], 4 * k + (odd - odd_work));
}

// Drives `sink` through a blocking system call in `collatz`, called from `work`: 3 + 4
// instructions at time t0 (the last 4 sharing the time of the TIP.PGD, as when the decoder
// reads the TSC before it ahead), tracing disabled for `wait` ticks, enabled where it stopped
// (the resume's TSC before the TIP.PGE), then 2 instructions of collatz and 2 of work in 40
// ticks. Returns the time at the end.
uint64_t BlockInASystemCall(Sink& sink, uint64_t work, uint64_t call, uint64_t collatz, uint64_t t0,
                            uint64_t wait) {
  sink.OnTime(t0);
  sink.OnBlock(HandBlock(work, call, 3, ptic_call));
  sink.OnBlock(HandBlock(collatz, collatz + 4, 4, ptic_far_call));
  pt_event disabled = {};
  disabled.type = ptev_disabled;
  disabled.ip_suppressed = 1;
  disabled.has_tsc = 1;
  disabled.tsc = t0;
  sink.OnEvent(disabled);
  sink.OnTime(t0 + wait);  // the decoder tells an event's time before the event
  pt_event enabled = {};
  enabled.type = ptev_enabled;
  enabled.variant.enabled.ip = collatz + 6;
  enabled.variant.enabled.resumed = 1;
  enabled.has_tsc = 1;
  enabled.tsc = t0 + wait;
  sink.OnEvent(enabled);
  sink.OnBlock(HandBlock(collatz + 6, collatz + 8, 2, ptic_return));
  sink.OnBlock(HandBlock(call + 5, call + 7, 2, ptic_other));
  sink.OnTime(t0 + wait + 40);
  return t0 + wait + 40;
}

// Sweep 40a F2: the time from a disable to the enable after it (a system call's wait) is the
// stack's on top, not split over the instructions before the call that share the old time
// (was: work 3/7 of it), nor given to those after the resume.
TEST_F(TimeTest, TimeWhileTracingIsDisabledIsTheStacksOnTop) {
  const uint64_t call = CallSiteInWorkToCollatz();
  ASSERT_NE(call, 0u);
  const uint64_t wait = 700000;
  {
    std::FILE* out = std::tmpfile();
    OutputOptions options;
    options.weight = FoldedWeight::kTime;
    auto sink = MakeFoldedSink(*image_, out, options);
    BlockInASystemCall(*sink, work_.address, call, collatz_.address, 1000, wait);
    ASSERT_THAT(sink->Finish({}), IsOk());
    auto stacks = ParseFolded(ReadAll(out));
    EXPECT_EQ(std::fclose(out), 0);
    EXPECT_EQ(stacks["work"], 20u);
    EXPECT_EQ(stacks["work;collatz"], wait + 20);
  }
  Profile profile;
  auto sink = MakeProfileSink(*image_, {}, &profile, {.timing = true});
  BlockInASystemCall(*sink, work_.address, call, collatz_.address, 1000, wait);
  ASSERT_THAT(sink->Finish({}), IsOk());
  std::map<std::string, uint64_t> ticks;
  for (const ProfileFunction& f : profile.functions) ticks[f.function] = f.ticks;
  EXPECT_EQ(ticks["work"], 20u);
  EXPECT_EQ(ticks["collatz"], wait + 20);
  ASSERT_TRUE(profile.timing.has_value());
  EXPECT_EQ(profile.timing->ticks, wait + 40);
}

TEST_F(TimeTest, FoldedTimeWithoutTimingIsAnError) {
  PtSynth synth(*code_);
  ASSERT_THAT(synth.AddSegment({.entry = work_.address, .seed = 21, .max_insns = 300}), IsOk());
  OutputOptions options;
  options.weight = FoldedWeight::kTime;
  absl::Status status;
  std::string text = Decode(synth.bytes(), MakeFoldedSink, options, &status);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no timing")));
  EXPECT_EQ(text, "");
  options.weight = FoldedWeight::kInstructions;  // the default needs no timing
  EXPECT_NE(Decode(synth.bytes(), MakeFoldedSink, options), "");
}

TEST_F(TimeTest, FoldedTimeOfADecodedTraceWeighsEachSegmentsStacksByItsTicks) {
  // Walks that end by returning from `work` (fewer instructions than the cap), so each
  // segment's stacks are the same decoded alone or after another.
  std::vector<WalkOptions> walks;
  for (uint32_t seed = 1; walks.size() < 3 && seed < 200; ++seed) {
    PtSynth probe(*code_);
    WalkOptions w{.entry = work_.address, .seed = seed, .max_insns = 3000};
    auto ips = probe.AddSegment(w);
    ASSERT_THAT(ips, IsOk());
    if (ips->size() < w.max_insns && ips->size() > 50) walks.push_back(w);
  }
  ASSERT_EQ(walks.size(), 3u);
  // Segment i alone, weighted by instructions.
  std::vector<std::map<std::string, uint64_t>> alone;
  std::vector<uint64_t> insns;
  for (const WalkOptions& w : walks) {
    PtSynth synth(*code_);
    auto ips = synth.AddSegment(w);
    ASSERT_THAT(ips, IsOk());
    insns.push_back(ips->size());
    alone.push_back(ParseFolded(Decode(synth.bytes(), MakeFoldedSink, {})));
  }
  // All three with times such that segment 0 lasts 7 ticks per instruction, segment 1 five;
  // segment 2's time is never closed by a later update.
  const uint64_t t0 = 100000, t1 = t0 + 7 * insns[0], t2 = t1 + 5 * insns[1];
  PtSynth synth(*code_);
  for (size_t i = 0; i < 3; ++i) {
    WalkOptions w = walks[i];
    w.tsc = i == 0 ? t0 : i == 1 ? t1 : t2;
    ASSERT_THAT(synth.AddSegment(w), IsOk());
  }
  OutputOptions options;
  options.weight = FoldedWeight::kTime;
  auto by_time = ParseFolded(Decode(synth.bytes(), MakeFoldedSink, options));
  std::map<std::string, uint64_t> expected;
  for (const auto& [stack, n] : alone[0]) expected[stack] += 7 * n;
  for (const auto& [stack, n] : alone[1]) expected[stack] += 5 * n;
  EXPECT_EQ(by_time, expected);
  uint64_t total = 0;
  for (const auto& [stack, ticks] : by_time) total += ticks;
  EXPECT_EQ(total, t2 - t0);
}

TEST_F(TimeTest, TimelineTsIsMicrosecondsFromTheTsc) {
  // Two segments whose walks call collatz, so each has slices.
  std::vector<uint32_t> seeds;
  for (uint32_t seed = 1; seeds.size() < 2 && seed < 200; ++seed) {
    PtSynth probe(*code_);
    auto ips = probe.AddSegment({.entry = work_.address, .seed = seed, .max_insns = 2000});
    ASSERT_THAT(ips, IsOk());
    if (std::find(ips->begin(), ips->end(), collatz_.address) != ips->end()) seeds.push_back(seed);
  }
  ASSERT_EQ(seeds.size(), 2u);
  PtSynth synth(*code_);
  const uint64_t t0 = 4000000, t1 = 9000000;
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_THAT(
        synth.AddSegment(
            {.entry = work_.address, .seed = seeds[i], .max_insns = 2000, .tsc = i == 0 ? t0 : t1}),
        IsOk());
  }
  struct Case {
    TscClock clock;
    double ts0, ts1;  // what t0 and t1 become
    nlohmann::json other;
  };
  TscClock hz;
  hz.tsc_hz = 2.5e9;
  hz.hz_source = "cpuid_15h";
  const std::vector<Case> cases = {
      {HalfTscClock(3000000000),
       (3e9 + static_cast<double>(t0 >> 1)) / 1e3,
       (3e9 + static_cast<double>(t1 >> 1)) / 1e3,
       {{"ts_unit", "us"}, {"ts_clock", "perf_time"}}},
      {hz,
       t0 / 2.5e3,
       t1 / 2.5e3,
       {{"ts_unit", "us"},
        {"ts_clock", "tsc"},
        {"tsc_hz", 2500000000},
        {"tsc_hz_source", "cpuid_15h"}}},
      {TscClock{}, t0, t1, {{"ts_unit", "tsc_ticks"}, {"ts_clock", "tsc"}}},
  };
  for (const Case& c : cases) {
    OutputOptions options;
    options.clock = c.clock;
    auto doc = nlohmann::json::parse(Decode(synth.bytes(), MakeTimelineSink, options));
    EXPECT_EQ(doc["otherData"], c.other);
    std::map<double, size_t> per_ts;
    for (const auto& ev : doc["traceEvents"]) {
      if (ev["ph"] != "M") ++per_ts[ev["ts"].get<double>()];
    }
    ASSERT_EQ(per_ts.size(), 2u) << doc.dump();
    EXPECT_DOUBLE_EQ(per_ts.begin()->first, c.ts0);
    EXPECT_DOUBLE_EQ(per_ts.rbegin()->first, c.ts1);
  }
}

}  // namespace
}  // namespace ptkit::decoder
