#include "ptkit/recording_metadata.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit {
namespace {

using nlohmann::json;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the recorder writes (record/metadata.cc, the emulator's second record), with a member
// this version does not know at every level.
json Full() {
  return json::parse(R"({
    "tool": "ptrecord", "tool_version": "0.1.0", "host": "box", "kernel_release": "6.1.0",
    "machine": "x86_64", "command_line": ["ptrecord", "--", "./a"], "workload": ["./a"],
    "mode": "full-trace", "page_size": 4096, "data_pages": 64, "aux_pages": 1024,
    "cpus": [0, 1],
    "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4,
            "cpuid_15h": {"tsc_ratio_numerator": 84, "tsc_ratio_denominator": 2,
                          "crystal_hz": 0, "future_leaf_bit": 1},
            "microcode": "0x2006e05"},
    "pmu": {"name": "intel_pt", "type": 8, "caps": {"mtc": "1", "psb_periods": "3f"},
            "formats": {"mtc_period": {"word": 0, "mask": 245760, "new": true},
                        "tsc": {"word": 0, "mask": 1024}},
            "event": "intel_pt//u", "max_nonturbo_ratio": 20,
            "nominal_frequency_hz": 2000000000, "tsc_art_ratio": [84, 2], "later": [1, 2]},
    "attrs": [{"name": "trace", "type": 8, "size": 136, "config": 50177, "config1": 0,
               "config2": 0, "sample_type": 391, "read_format": 0, "sample_id_all": true,
               "disabled": true, "inherit": false, "enable_on_exec": true,
               "exclude_user": false, "exclude_kernel": true, "exclude_hv": true,
               "mmap": false, "mmap2": false, "comm": false, "comm_exec": false,
               "task": false, "context_switch": false, "aux_watermark": 0,
               "sample_regs_user": 0}],
    "time_conversion": {"cap_user_time": true, "cap_user_time_zero": true, "time_shift": 31,
                        "time_mult": 1234, "time_zero": 18446744073709551615,
                        "cap_user_time_short": false},
    "emulated": "step", "clock": "CLOCK_MONOTONIC ns",
    "emulation": {"backend": "ptrace single-step", "streams": "per-thread", "format": "pt",
                  "ret_compression": true, "psb_period": 0, "filter": "", "note": "software",
                  "qemu": null},
    "end": {"instructions": 1000, "threads": 1, "workload_exit_status": -1,
            "workload_signal": "SIGSEGV", "stopped_by": "SIGTERM"},
    "synthesizer": {"elf": "a", "load_base": 4096, "entry": "main", "seed": 1,
                    "max_insns": 10, "insns": 10, "stop": "max_insns"},
    "a_future_member": {"nested": [1, {"x": "y"}]}
  })");
}

TEST(RecordingMetadataTest, ToJsonOfFromJsonGivesTheSameObjectUnknownMembersIncluded) {
  const json in = Full();
  absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson(in);
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(m->warnings, ElementsAre());
  EXPECT_EQ(m->ToJson(), in) << m->ToJson().dump(1);
  EXPECT_EQ(m->cpu->family, 6u);
  EXPECT_EQ(m->cpu->cpuid_15h->tsc_ratio_numerator, 84u);
  EXPECT_EQ(m->cpu->extra, json({{"microcode", "0x2006e05"}}));
  EXPECT_EQ(m->attrs->at(0).extra, json({{"sample_regs_user", 0}}));
  EXPECT_EQ(m->time_conversion->time_zero, ~uint64_t{0});
  EXPECT_EQ(m->end->workload_exit_status, -1);
  EXPECT_EQ(m->extra, json({{"a_future_member", in["a_future_member"]}}));
  // Absent members stay absent.
  absl::StatusOr<RecordingMetadata> empty = RecordingMetadata::FromJson(json::object());
  ASSERT_THAT(empty, IsOk());
  EXPECT_EQ(empty->ToJson(), json::object());
}

// Each member decoding uses, mistyped or out of range: an error naming it and the value.
TEST(RecordingMetadataTest, AWrongMemberThatDecodingUsesIsAnErrorNamingIt) {
  struct Case {
    json::json_pointer at;
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {json::json_pointer("/cpu/family"), "6",
       R"(metadata: "cpu.family" must be a number, got string "6")"},
      {json::json_pointer("/cpu/model"), 300,
       R"(metadata: "cpu.model" must be an integer from 0 to 255, got number 300)"},
      {json::json_pointer("/cpu/vendor"), 7, R"(metadata: "cpu.vendor" must be a string)"},
      {json::json_pointer("/cpu/cpuid_15h/crystal_hz"), -5,
       R"("cpu.cpuid_15h.crystal_hz" must be an integer from 0 to 4294967295, got number -5)"},
      {json::json_pointer("/cpu"), json::array(),
       R"(metadata: "cpu" must be an object, got array [])"},
      {json::json_pointer("/pmu/type"), 8.5, R"("pmu.type" must be an integer from 0 to)"},
      {json::json_pointer("/pmu/formats/mtc_period/word"), 3,
       R"("pmu.formats.mtc_period.word" must be an integer from 0 to 2, got number 3)"},
      {json::json_pointer("/pmu/formats/mtc_period"), "config:14-17",
       R"("pmu.formats.mtc_period" must be an object, got string "config:14-17")"},
      {json::json_pointer("/attrs/0/sample_type"), "391",
       R"(metadata: "attrs[0].sample_type" must be a number, got string "391")"},
      {json::json_pointer("/attrs/0/sample_id_all"), 1,
       R"(metadata: "attrs[0].sample_id_all" must be true or false, got number 1)"},
      {json::json_pointer("/attrs/1"), 5,
       R"(metadata: "attrs[1]" must be an object, got number 5)"},
      {json::json_pointer("/attrs"), json::object(), R"("attrs" must be an array, got object)"},
      {json::json_pointer("/time_conversion/time_shift"), 64,
       R"("time_conversion.time_shift" must be an integer from 0 to 63, got number 64)"},
      {json::json_pointer("/time_conversion/time_mult"), "3",
       R"("time_conversion.time_mult" must be a number, got string "3")"},
      {json::json_pointer("/time_conversion/cap_user_time_zero"), "yes",
       R"("time_conversion.cap_user_time_zero" must be true or false)"},
      {json::json_pointer("/emulated"), 1, R"("emulated" must be a string, got number 1)"},
      {json::json_pointer("/emulation/format"), false,
       R"("emulation.format" must be a string, got boolean false)"},
  };
  for (const Case& c : cases) {
    json in = Full();
    in[c.at] = c.value;
    SCOPED_TRACE(c.at.to_string());
    EXPECT_THAT(RecordingMetadata::FromJson(in),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(c.message)));
  }
  EXPECT_THAT(RecordingMetadata::FromJson(json::array()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a JSON object")));
}

// A member only people read, mistyped: ignored with a warning, and kept as it was.
TEST(RecordingMetadataTest, AWrongMemberOnlyPeopleReadIsAWarningAndKept) {
  json in = Full();
  in["host"] = 5;
  in["command_line"][1] = 7;
  in["attrs"][0]["disabled"] = "no";
  in["end"]["threads"] = "one";
  absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson(in);
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(
      m->warnings,
      ElementsAre(
          R"(metadata: "host" must be a string, got number 5: ignored)",
          R"(metadata: "command_line[1]" must be a string, got number 7: ignored)",
          R"(metadata: "attrs[0].disabled" must be true or false, got string "no": ignored)",
          R"(metadata: "end.threads" must be a number, got string "one": ignored)"));
  EXPECT_FALSE(m->host.has_value());
  EXPECT_FALSE(m->command_line.has_value());
  EXPECT_EQ(m->ToJson(), in);  // shown as it is
}

TEST(RecordingMetadataTest, EmulatedReadsTheOlderBooleanForm) {
  auto emulated = [](const json& value) {
    absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson({{"emulated", value}});
    EXPECT_THAT(m, IsOk());
    return m.ok() ? m->emulated : std::nullopt;
  };
  EXPECT_EQ(emulated(true), "step");  // ptrecord --emulate before the string form
  EXPECT_EQ(emulated(false), std::nullopt);
  EXPECT_EQ(emulated("synthesized"), "synthesized");
  EXPECT_EQ(RecordingMetadata::FromJson({{"emulated", true}})->ToJson(),
            json({{"emulated", "step"}}));
}

TEST(RecordingMetadataTest, LaterRecordsReplaceTopLevelMembersWhole) {
  json merged = json::object();
  MergeMetadata(merged, {{"host", "a"}, {"cpu", {{"family", 6}, {"model", 85}}}});
  MergeMetadata(merged, {{"cpu", {{"family", 6}}}, {"end", {{"threads", 1}}}});
  EXPECT_EQ(merged, json({{"host", "a"}, {"cpu", {{"family", 6}}}, {"end", {{"threads", 1}}}}));
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(RecordingMetadataTest, ParseRefusesDeepNestingNonJsonAndNonObjects) {
  auto nested = [](int depth) {
    std::string s = R"({"a":)";
    for (int i = 1; i < depth; ++i) s += "[";
    s += "1";
    for (int i = 1; i < depth; ++i) s += "]";
    return s + "}";
  };
  EXPECT_THAT(ParseMetadataRecord(Bytes(nested(kMaxMetadataDepth))), IsOk());
  EXPECT_THAT(ParseMetadataRecord(Bytes(nested(kMaxMetadataDepth + 1))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("metadata record nested deeper than 64 levels: not read")));
  // 100,000 levels (3.7 KB in issue 12): refused, and nothing recursive ever sees it.
  EXPECT_THAT(ParseMetadataRecord(Bytes(nested(100000))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("nested deeper")));
  EXPECT_THAT(ParseMetadataRecord(Bytes("{\"a\":")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not valid JSON")));
  EXPECT_THAT(ParseMetadataRecord(Bytes("[1]")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a JSON object")));
  absl::StatusOr<json> ok = ParseMetadataRecord(Bytes(Full().dump()));
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(*ok, Full());
}

TEST(RecordingMetadataTest, FormatFieldsExtractTheirBitsLowestFirst) {
  perf_event_attr attr{};
  attr.config = uint64_t{0xb} << 14;
  attr.config1 = 0b1010'0000;
  EXPECT_EQ((PmuFormatMetadata{.word = 0, .mask = uint64_t{0xf} << 14}.Extract(attr)), 0xbu);
  // config1:5,7 (bits spread out): value bit 0 from bit 5, bit 1 from bit 7.
  EXPECT_EQ((PmuFormatMetadata{.word = 1, .mask = 0b1010'0000}.Extract(attr)), 0b11u);
  EXPECT_EQ((PmuFormatMetadata{.word = 1}.Extract(attr)), std::nullopt);
  // Every attr field through FromAttr and ToAttr.
  attr.type = 8;
  attr.sample_type = 391;
  attr.sample_id_all = 1;
  attr.exclude_kernel = 1;
  attr.aux_watermark = 4096;
  const perf_event_attr back = AttrMetadata::FromAttr("trace", attr).ToAttr();
  EXPECT_EQ(back.type, 8u);
  EXPECT_EQ(back.config, attr.config);
  EXPECT_EQ(back.config1, attr.config1);
  EXPECT_EQ(back.sample_type, 391u);
  EXPECT_TRUE(back.sample_id_all);
  EXPECT_TRUE(back.exclude_kernel);
  EXPECT_FALSE(back.exclude_user);
  EXPECT_EQ(back.aux_watermark, 4096u);
  // The sampling members, each union by the flag that selects its member.
  attr.sample_period = 1000003;
  attr.aux_sample_size = 2048;
  attr.precise_ip = 2;
  attr.exclude_guest = 1;
  attr.wakeup_events = 7;
  attr.use_clockid = 1;
  attr.clockid = 1;  // CLOCK_MONOTONIC
  attr.build_id = 1;
  AttrMetadata m = AttrMetadata::FromAttr("aux-sample", attr);
  EXPECT_EQ(m.sample_period, 1000003u);
  EXPECT_EQ(m.sample_freq, std::nullopt);
  EXPECT_EQ(m.wakeup_events, 7u);
  EXPECT_EQ(m.wakeup_watermark, std::nullopt);
  RecordingMetadata with_attr;
  with_attr.attrs = {m};
  absl::StatusOr<RecordingMetadata> through_json = RecordingMetadata::FromJson(with_attr.ToJson());
  ASSERT_THAT(through_json, IsOk());
  const perf_event_attr sampler = through_json->attrs->front().ToAttr();
  EXPECT_EQ(sampler.sample_period, 1000003u);
  EXPECT_FALSE(sampler.freq);
  EXPECT_EQ(sampler.aux_sample_size, 2048u);
  EXPECT_EQ(sampler.precise_ip, 2u);
  EXPECT_TRUE(sampler.exclude_guest);
  EXPECT_EQ(sampler.wakeup_events, 7u);
  EXPECT_TRUE(sampler.use_clockid);
  EXPECT_EQ(sampler.clockid, 1);
  EXPECT_TRUE(sampler.build_id);
  attr.freq = 1;
  attr.sample_freq = 4000;
  attr.watermark = 1;
  attr.wakeup_watermark = 65536;
  m = AttrMetadata::FromAttr("sampler", attr);
  EXPECT_EQ(m.sample_freq, 4000u);
  EXPECT_EQ(m.sample_period, std::nullopt);
  EXPECT_EQ(m.wakeup_watermark, 65536u);
  const perf_event_attr by_freq = m.ToAttr();
  EXPECT_TRUE(by_freq.freq);
  EXPECT_EQ(by_freq.sample_freq, 4000u);
  EXPECT_TRUE(by_freq.watermark);
  EXPECT_EQ(by_freq.wakeup_watermark, 65536u);
}

TEST(RecordingMetadataTest, PerfTimeConversionNeedsTimeZeroAndAMultiplier) {
  json in = Full();
  absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson(in);
  ASSERT_THAT(m, IsOk());
  ASSERT_TRUE(m->PerfTimeConversion().has_value());
  EXPECT_EQ(m->PerfTimeConversion()->time_shift, 31);
  EXPECT_EQ(m->PerfTimeConversion()->time_mult, 1234u);
  in["time_conversion"]["cap_user_time_zero"] = false;
  EXPECT_FALSE(RecordingMetadata::FromJson(in)->PerfTimeConversion().has_value());
  in["time_conversion"]["cap_user_time_zero"] = true;
  in["time_conversion"]["time_mult"] = 0;
  EXPECT_FALSE(RecordingMetadata::FromJson(in)->PerfTimeConversion().has_value());
}

}  // namespace
}  // namespace ptkit
