#include "record/session.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseCpuListTest, Forms) {
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<int> a, ParseCpuList("0-3,5\n"));
  EXPECT_THAT(a, ElementsAre(0, 1, 2, 3, 5));
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<int> b, ParseCpuList("7, 2-3,3"));
  EXPECT_THAT(b, ElementsAre(2, 3, 7));
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<int> c, ParseCpuList("0"));
  EXPECT_THAT(c, ElementsAre(0));
  EXPECT_THAT(ParseCpuList(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCpuList("3-1"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3-1")));
  EXPECT_THAT(ParseCpuList("0,x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCpuList("0-99999"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseMmapPagesTest, Forms) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto a, ParseMmapPages("64,1024"));
  EXPECT_EQ(a, std::make_pair(uint64_t{64}, uint64_t{1024}));
  PTKIT_ASSERT_OK_AND_ASSIGN(auto b, ParseMmapPages("16"));
  EXPECT_EQ(b, std::make_pair(uint64_t{16}, uint64_t{0}));
  EXPECT_THAT(ParseMmapPages("3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("-m 3: expected DATA_PAGES[,AUX_PAGES]")));
  EXPECT_THAT(ParseMmapPages("4,100"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMmapPages("0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMmapPages("4,8,16"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Issue 12 item 10: 2^63 data pages overflowed (1 + pages) * page size to one page, so
// ptrecord mapped the control page only, recorded nothing and exited 0.
TEST(ParseMmapPagesTest, HugeCountsAreRefusedBeforeAnySizeOverflows) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto max, ParseMmapPages("4194304,4194304"));
  EXPECT_EQ(max, std::make_pair(kMaxMmapPages, kMaxMmapPages));
  EXPECT_THAT(ParseMmapPages("9223372036854775808"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 4194304 pages")));
  EXPECT_THAT(ParseMmapPages("1,8388608"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most")));
}

TEST(ParseSizeTest, Suffixes) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("2m"), 2u << 20);
  EXPECT_EQ(*ParseSize("1G"), 1u << 30);
  EXPECT_THAT(ParseSize("1T"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSize("K"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSize("-1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Validation happens before anything is opened, and is marked as a usage error (exit 2).
TEST(RunSessionTest, UsageErrorsCarryExitCode2) {
  auto code = [](const absl::Status& s) {
    absl::optional<absl::Cord> p = s.GetPayload(kExitCodePayload);
    return p ? std::string(*p) : std::string("none");
  };
  SessionOptions none;
  absl::StatusOr<SessionResult> r = RunSession(none);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nothing to record")));
  EXPECT_EQ(code(r.status()), "2");

  SessionOptions two;
  two.command = {"/bin/true"};
  two.all_cpus = true;
  EXPECT_THAT(RunSession(two),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("choose one target")));

  SessionOptions bad_event;
  bad_event.command = {"/bin/true"};
  bad_event.sysfs_root = std::string(PTKIT_SOURCE_DIR) + "/tests/data/sysfs";
  bad_event.trace_event = "intel_pt/psb_period=9/";
  r = RunSession(bad_event);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("valid values are: 0, 1, 2, 3, 4, 5")));
  EXPECT_EQ(code(r.status()), "2");

  SessionOptions no_pmu;
  no_pmu.command = {"/bin/true"};
  no_pmu.sysfs_root = "/nonexistent/devices";
  r = RunSession(no_pmu);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kNotFound,
                          HasSubstr("no intel_pt PMU here (/nonexistent/devices/intel_pt does "
                                    "not exist)")));
  EXPECT_EQ(code(r.status()), "none");  // a runtime failure: exit 1

  SessionOptions snap;
  snap.command = {"/bin/true"};
  snap.sideband_only = true;
  snap.snapshot_size = 0;
  EXPECT_THAT(RunSession(snap), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("--snapshot needs a trace event")));

  SessionOptions big_snap;
  big_snap.command = {"/bin/true"};
  big_snap.snapshot_size = 0;
  big_snap.aux_pages = (uint64_t{256} << 20) / static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  r = RunSession(big_snap);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("is more than one snapshot can hold (128 MiB)")));
  EXPECT_EQ(code(r.status()), "2");

  SessionOptions counters;
  counters.command = {"/bin/true"};
  counters.sideband_only = true;
  counters.counters = "task-clock,not-an-event";
  r = RunSession(counters);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not-an-event")));
  EXPECT_EQ(code(r.status()), "2");

  SessionOptions cpus;
  cpus.all_cpus = true;
  cpus.sideband_only = true;
  cpus.cpu_list = "4000";
  EXPECT_THAT(RunSession(cpus),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CPU 4000 is not online")));
}

}  // namespace
}  // namespace ptkit::record
