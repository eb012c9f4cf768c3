#include "record/metadata.h"

#include <sys/utsname.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using nlohmann::json;
using ::ptkit::testing::IsOk;

// The recorder's metadata object, member by member as ptkit-format(5) lists it (written out
// here, not produced by the code under test), and read back by the typed reader unchanged.
TEST(MetadataTest, BuildMetadataWritesTheDocumentedMembers) {
  MetadataInput in;
  in.command_line = {"ptrecord", "--", "./a"};
  in.workload = {"./a"};
  in.cpu = {.vendor = "GenuineIntel",
            .family = 6,
            .model = 85,
            .stepping = 4,
            .tsc_ratio_numerator = 84,
            .tsc_ratio_denominator = 2,
            .crystal_hz = 0};
  Pmu pmu;
  pmu.name = "intel_pt";
  pmu.type = 8;
  pmu.caps = {{"mtc", "1"}};
  pmu.formats = {{"mtc_period", {ConfigWord::kConfig, uint64_t{0xf} << 14}}};
  pmu.max_nonturbo_ratio = 20;
  pmu.tsc_art_numerator = 84;
  pmu.tsc_art_denominator = 2;
  in.pmu = pmu;
  in.event = "intel_pt/mtc_period=3/u";
  perf_event_attr attr{};
  attr.type = 8;
  attr.size = sizeof(attr);
  attr.config = (3 << 14) | 1;
  attr.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  attr.sample_id_all = 1;
  attr.exclude_kernel = 1;
  attr.aux_watermark = 4096;
  in.attrs = {{"trace", attr}};
  in.time = TimeConversion{.cap_user_time = true,
                           .cap_user_time_zero = true,
                           .time_shift = 31,
                           .time_mult = 1234,
                           .time_zero = 99};
  in.page_size = 4096;
  in.mode = "full-trace";
  in.cpus = {0, 1};
  in.data_pages = 64;
  in.aux_pages = 1024;

  const json out = BuildMetadata(in);
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  json expected = {
      {"tool", "ptrecord"},
      {"tool_version", PTKIT_VERSION},
      {"host", u.nodename},
      {"kernel_release", u.release},
      {"machine", u.machine},
      {"command_line", {"ptrecord", "--", "./a"}},
      {"workload", {"./a"}},
      {"mode", "full-trace"},
      {"page_size", 4096},
      {"data_pages", 64},
      {"aux_pages", 1024},
      {"cpus", {0, 1}},
      {"cpu",
       {{"vendor", "GenuineIntel"},
        {"family", 6},
        {"model", 85},
        {"stepping", 4},
        {"cpuid_15h",
         {{"tsc_ratio_numerator", 84}, {"tsc_ratio_denominator", 2}, {"crystal_hz", 0}}}}},
      {"pmu",
       {{"name", "intel_pt"},
        {"type", 8},
        {"caps", {{"mtc", "1"}}},
        {"formats", {{"mtc_period", {{"word", 0}, {"mask", 0xf << 14}}}}},
        {"event", "intel_pt/mtc_period=3/u"},
        {"max_nonturbo_ratio", 20},
        {"nominal_frequency_hz", 2000000000},
        {"tsc_art_ratio", {84, 2}}}},
      {"attrs",
       {{{"name", "trace"},
         {"type", 8},
         {"size", sizeof(attr)},
         {"config", (3 << 14) | 1},
         {"config1", 0},
         {"config2", 0},
         {"sample_type", PERF_SAMPLE_TID | PERF_SAMPLE_TIME},
         {"read_format", 0},
         {"sample_id_all", true},
         {"disabled", false},
         {"inherit", false},
         {"enable_on_exec", false},
         {"exclude_user", false},
         {"exclude_kernel", true},
         {"exclude_hv", false},
         {"mmap", false},
         {"mmap2", false},
         {"comm", false},
         {"comm_exec", false},
         {"task", false},
         {"context_switch", false},
         {"aux_watermark", 4096},
         {"freq", false},
         {"sample_period", 0},
         {"aux_sample_size", 0},
         {"precise_ip", 0},
         {"exclude_guest", false},
         {"watermark", false},
         {"wakeup_events", 0},
         {"use_clockid", false},
         {"build_id", false}}}},
      {"time_conversion",
       {{"cap_user_time", true},
        {"cap_user_time_zero", true},
        {"time_shift", 31},
        {"time_mult", 1234},
        {"time_zero", 99}}}};
  EXPECT_EQ(out, expected) << out.dump(1);
  absl::StatusOr<RecordingMetadata> typed = RecordingMetadata::FromJson(out);
  ASSERT_THAT(typed, IsOk());
  EXPECT_TRUE(typed->warnings.empty());
  EXPECT_EQ(typed->ToJson(), out);
}

}  // namespace
}  // namespace ptkit::record
