#include "record/counters.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

// libpfm4's generic "perf" PMU is always present: these encode on any Linux machine.
TEST(EncodeCounterTest, SoftwareEvents) {
  PTKIT_ASSERT_OK_AND_ASSIGN(CounterSpec pf, EncodeCounter("page-faults", true, false));
  EXPECT_EQ(pf.attr.type, static_cast<uint32_t>(PERF_TYPE_SOFTWARE));
  EXPECT_EQ(pf.attr.config, static_cast<uint64_t>(PERF_COUNT_SW_PAGE_FAULTS));
  EXPECT_EQ(pf.attr.exclude_kernel, 1u);
  EXPECT_EQ(pf.attr.exclude_user, 0u);
  EXPECT_EQ(pf.attr.disabled, 1u);
  EXPECT_EQ(pf.attr.read_format, PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
  EXPECT_THAT(pf.fstr, HasSubstr("PERF_COUNT_SW_PAGE_FAULTS"));

  PTKIT_ASSERT_OK_AND_ASSIGN(CounterSpec tc, EncodeCounter("task-clock", true, true));
  EXPECT_EQ(tc.attr.config, static_cast<uint64_t>(PERF_COUNT_SW_TASK_CLOCK));
  EXPECT_EQ(tc.attr.exclude_kernel, 0u);
  PTKIT_ASSERT_OK_AND_ASSIGN(CounterSpec cs, EncodeCounter("context-switches", false, true));
  EXPECT_EQ(cs.attr.config, static_cast<uint64_t>(PERF_COUNT_SW_CONTEXT_SWITCHES));
  EXPECT_EQ(cs.attr.exclude_user, 1u);
}

TEST(EncodeCounterTest, HardwareEventsEncodeEvenWithoutPmu) {
  // Encoding is independent of the hardware; opening is what fails on this VM.
  PTKIT_ASSERT_OK_AND_ASSIGN(CounterSpec c, EncodeCounter("cycles", true, false));
  EXPECT_EQ(c.name, "cycles");
}

TEST(EncodeCounterTest, UnknownName) {
  EXPECT_THAT(EncodeCounter("no-such-event-xyz", true, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown counter event \"no-such-event-xyz\"")));
}

TEST(EncodeCountersTest, List) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<CounterSpec> v,
      EncodeCounters("task-clock, page-faults,context-switches", true, true));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].name, "page-faults");
  EXPECT_THAT(EncodeCounters("task-clock,bogus-event", true, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bogus-event")));
}

TEST(PerfEventOpenErrorTest, PermissionNamesParanoidAndCapability) {
  auto reader = [](const std::string& path) -> absl::StatusOr<std::string> {
    EXPECT_EQ(path, "/proc/sys/kernel/perf_event_paranoid");
    return std::string("3");
  };
  EXPECT_THAT(
      PerfEventOpenError(EACCES, "intel_pt event (cpu 0)", reader),
      StatusIs(absl::StatusCode::kPermissionDenied,
               ::testing::AllOf(HasSubstr("perf_event_open intel_pt event (cpu 0)"),
                                HasSubstr("perf_event_paranoid is 3"), HasSubstr("CAP_PERFMON"))));
  EXPECT_THAT(PerfEventOpenError(EPERM, "x", nullptr),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is unknown")));
  EXPECT_THAT(
      PerfEventOpenError(ENOENT, "counter cycles", nullptr),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("not supported on this machine")));
  EXPECT_THAT(PerfEventOpenError(EBUSY, "x", nullptr),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("in use")));
  // The errno's text once ("Invalid argument: Invalid argument" before).
  EXPECT_THAT(PerfEventOpenError(EINVAL, "x", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, "perf_event_open x: Invalid argument"));
}

}  // namespace
}  // namespace ptkit::record
