// The metadata of a container as decoding reads it (decoder/metadata_config.h): records merged
// by the rule of ptkit-format(5), every member decoding uses checked, the PMU's recorded
// mtc_period format, and records that cannot be read.
#include <linux/perf_event.h>

#include <cstdio>
#include <string>
#include <vector>

#include "decoder/container_input.h"
#include "decoder/tsc_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "status_matchers.h"
#include "test_container.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using nlohmann::json;
using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::testing::ExecMmap2;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::NewContainer;
using ::ptkit::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using ::ptkit::decoder::testing::kTiny;
const perf::SampleIdLayout kLayout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, true};

// Every instruction's address, one run per stream.
class Ips : public Sink {
 public:
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  void OnInsn(const pt_insn& insn) override { ips.push_back(insn.ip); }
  void OnError(const DecodeError&) override { ++errors; }
  std::vector<uint64_t> ips;
  int errors = 0;
};

class MetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    PtSynth walk(*code_);
    auto ips =
        walk.AddSegment({.entry = code_->Symbol("work").address, .seed = 21, .max_insns = 3000});
    ASSERT_THAT(ips, IsOk());
    pt_ = walk.bytes();
    pt_ips_ = *ips;
    bts_ = testing::BtsFromWalk(*code_, *ips, &branches_);
    ASSERT_GE(branches_.size(), 2u);
    path_ = ::ptkit::decoder::testing::TempPath("decoder_metadata_test.pt");
  }
  void TearDown() override { (void)std::remove(path_.c_str()); }

  // A trace.pt: `records` as metadata records (verbatim), tiny.elf's text mapped in process
  // 300, `aux` as thread 300's trace.
  void Write(const std::vector<std::string>& records, const std::vector<uint8_t>& aux) {
    auto writer = NewContainer(path_, records);
    ASSERT_THAT(writer, IsOk());
    const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
    perf::SampleId id;
    id.has_tid = id.has_time = true;
    id.pid = id.tid = 300;
    id.time = 1;
    ASSERT_THAT((*writer)->AppendSideband({-1, ExecMmap2(300, text, 0x1000, code_->FileOffset(text),
                                                         kTiny, id, kLayout)}),
                IsOk());
    ASSERT_THAT((*writer)->AppendAux({{StreamKind::kThread, 300}, 0, 0, 5, aux}), IsOk());
    ASSERT_THAT((*writer)->Close(), IsOk());
  }

  // Decodes the container, which must give the walk's instructions; returns its warnings.
  std::vector<std::string> DecodeWarnings() {
    Ips sink;
    absl::StatusOr<DecodeTotals> totals = DecodeContainer(path_, {}, sink);
    EXPECT_THAT(totals, IsOk());
    EXPECT_EQ(sink.ips, pt_ips_);
    return totals.ok() ? totals->warnings : std::vector<std::string>{};
  }

  static json PtMetadata() {
    return {
        {"pmu", {{"name", "intel_pt"}, {"type", 8}}},
        {"attrs",
         {{{"name", "trace"},
           {"type", 8},
           {"config", 1},
           {"sample_type", kLayout.sample_type},
           {"sample_id_all", true}}}},
        {"time_conversion",
         {{"cap_user_time_zero", true}, {"time_zero", 0}, {"time_mult", 1}, {"time_shift", 0}}}};
  }

  std::unique_ptr<ElfCode> code_;
  std::vector<uint8_t> pt_, bts_;
  std::vector<uint64_t> pt_ips_;
  std::vector<size_t> branches_;
  std::string path_;
};

// ptkit-format(5): several metadata records are merged in order. The second record of an
// emulated recording says how it ended; one that says only that must not hide the first.
TEST_F(MetadataTest, SeveralRecordsAreMergedInOrder) {
  json bts = PtMetadata();
  bts["pmu"] = {{"name", "intel_bts"}, {"type", 9}};
  bts["attrs"][0]["type"] = 9;
  Write({bts.dump(), R"({"end":{"threads":1}})"}, bts_);
  if (HasFatalFailure()) return;
  Ips sink;
  auto totals = DecodeContainer(path_, {}, sink);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(sink.errors, 0);
  EXPECT_THAT(sink.ips, ElementsAreArray(pt_ips_.begin() + branches_.front(),
                                         pt_ips_.begin() + branches_.back() + 1));

  // The clock too comes from every record, not the first only.
  json later = {{"time_conversion", PtMetadata()["time_conversion"]}};
  later["time_conversion"]["time_mult"] = 3;
  Write({R"({"host":"box"})", later.dump()}, pt_);
  if (HasFatalFailure()) return;
  absl::StatusOr<TscClock> clock = ReadTscClock(path_);
  ASSERT_THAT(clock, IsOk());
  ASSERT_TRUE(clock->perf.has_value());
  EXPECT_EQ(clock->perf->time_mult, 3u);
}

// Issue 12 item 2: a mistyped member decoding needs stops decoding with an error naming it
// (it used to abort: nlohmann type_error.302, exit 134). One case per group of members.
TEST_F(MetadataTest, AMistypedMemberDecodingNeedsIsAnErrorNamingIt) {
  struct Case {
    std::string pointer;
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/time_conversion/time_mult", "1",
       R"(metadata: "time_conversion.time_mult" must be a number, got string "1")"},
      {"/cpu",
       {{"vendor", "GenuineIntel"}, {"family", "6"}},
       R"(metadata: "cpu.family" must be a number, got string "6")"},
      {"/pmu/type", "8", R"(metadata: "pmu.type" must be a number, got string "8")"},
      {"/attrs/0/sample_type", "7",
       R"(metadata: "attrs[0].sample_type" must be a number, got string "7")"},
      {"/attrs/1", 5, R"(metadata: "attrs[1]" must be an object, got number 5)"},
      // The one reader that did not check it shifted by it (undefined behaviour).
      {"/time_conversion/time_shift", 64,
       R"(metadata: "time_conversion.time_shift" must be an integer from 0 to 63, got number 64)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json m = PtMetadata();
    m[json::json_pointer(c.pointer)] = c.value;
    Write({m.dump()}, pt_);
    if (HasFatalFailure()) return;
    Ips sink;
    EXPECT_THAT(DecodeContainer(path_, {}, sink),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path_ + ": " + c.message)));
    EXPECT_THAT(ReadTscClock(path_), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(c.message)));
    EXPECT_THAT(DecodeSummary(path_, {}), StatusIs(absl::StatusCode::kDataLoss));
  }
}

// A mistyped member only people read does not stop decoding: a warning, and it is ignored.
// What ptrecord warned of at the end of a recording (a thread it could not trace, a stream cut
// short) is in the end metadata's "warnings": every decode says it, as a warning of its own.
TEST_F(MetadataTest, TheRecordersWarningsAreTheDecodesToo) {
  json m = PtMetadata();
  m["cpu"] = {{"vendor", "GenuineIntel"}, {"family", 6}, {"model", 85}};  // (else: unknown)
  Write({m.dump(), R"({"end":{"threads":64,"warnings":["8 guest threads were not traced", 3]}})"},
        pt_);
  if (HasFatalFailure()) return;
  Ips sink;
  auto totals = DecodeContainer(path_, {}, sink);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(totals->warnings,
              ElementsAre(HasSubstr("recorded with a warning: 8 guest threads were not traced")));
}

TEST_F(MetadataTest, AMistypedInformationalMemberIsAWarning) {
  json m = PtMetadata();
  m["host"] = 5;
  m["attrs"][0]["disabled"] = "no";
  Write({m.dump()}, pt_);
  if (HasFatalFailure()) return;
  const std::vector<std::string> warnings = DecodeWarnings();
  EXPECT_THAT(warnings,
              Contains(path_ + R"(: metadata: "host" must be a string, got number 5: ignored)"));
  EXPECT_THAT(warnings, Contains(HasSubstr(R"("attrs[0].disabled" must be true or false)")));
}

// Issue 12 item 3: a record nested 100,000 levels deep is not read (it used to crash the
// serializer), with a warning; the other records still count.
TEST_F(MetadataTest, ADeeplyNestedRecordIsIgnoredWithAWarning) {
  std::string deep = R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  Write({PtMetadata().dump(), deep}, pt_);
  if (HasFatalFailure()) return;
  EXPECT_THAT(DecodeWarnings(),
              Contains(HasSubstr("is ignored: metadata record nested deeper than 64 levels")));
  EXPECT_THAT(ReadTscClock(path_), IsOk());
}

// The MTC frequency is the trace attr's mtc_period field where the recorded PMU format puts
// it; config:14-17 (IA32_RTIT_CTL.MTCFreq) when the metadata has no format.
TEST(MetadataConfig, MtcFrequencyFollowsTheRecordedFormat) {
  auto mtc_freq = [](const json& m) {
    absl::StatusOr<RecordingMetadata> typed = RecordingMetadata::FromJson(m);
    EXPECT_THAT(typed, IsOk());
    return typed.ok() ? TraceConfigFromMetadata(*typed).mtc_freq : -1;
  };
  json m = {
      {"pmu", {{"type", 8}}},
      {"attrs",
       {{{"type", 1}, {"config", 0}}, {{"type", 8}, {"config", (5ull << 20) | (3ull << 14)}}}}};
  EXPECT_EQ(mtc_freq(m), 3);
  m["pmu"]["formats"] = {{"mtc_period", {{"word", 0}, {"mask", 0xfull << 20}}}};
  EXPECT_EQ(mtc_freq(m), 5);
  m["pmu"]["formats"]["mtc_period"] = {{"word", 1}, {"mask", 0xfull}};  // in config1: 0 there
  EXPECT_EQ(mtc_freq(m), 0);
}

}  // namespace
}  // namespace ptkit::decoder
