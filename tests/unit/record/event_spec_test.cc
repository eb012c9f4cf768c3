#include "record/event_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSysfsFixture = std::string(PTKIT_SOURCE_DIR) + "/tests/data/sysfs";

class EventSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PmuRegistry reg(kSysfsFixture);
    PTKIT_ASSERT_OK_AND_ASSIGN(pt_, reg.Find("intel_pt"));
    PTKIT_ASSERT_OK_AND_ASSIGN(bts_, reg.Find("intel_bts"));
  }
  absl::StatusOr<ResolvedEvent> Resolve(const Pmu& pmu, std::string_view text) {
    absl::StatusOr<EventSpec> spec = ParseEventString(text);
    if (!spec.ok()) return spec.status();
    return ResolveEvent(pmu, *spec);
  }
  Pmu pt_, bts_;
};

TEST(ParseEventStringTest, Forms) {
  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec a, ParseEventString("intel_pt//"));
  EXPECT_EQ(a.pmu, "intel_pt");
  EXPECT_TRUE(a.terms.empty());
  EXPECT_TRUE(a.user && a.kernel);

  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec b, ParseEventString("intel_pt"));
  EXPECT_EQ(b.pmu, "intel_pt");

  PTKIT_ASSERT_OK_AND_ASSIGN(
      EventSpec c,
      ParseEventString(
          "intel_pt/tsc=1,cyc=1,cyc_thresh=2,mtc_period=3,psb_period=2,noretcomp=0/u"));
  EXPECT_THAT(c.terms, ElementsAre(EventTerm{"tsc", 1}, EventTerm{"cyc", 1},
                                   EventTerm{"cyc_thresh", 2}, EventTerm{"mtc_period", 3},
                                   EventTerm{"psb_period", 2}, EventTerm{"noretcomp", 0}));
  EXPECT_TRUE(c.user);
  EXPECT_FALSE(c.kernel);

  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec d, ParseEventString("intel_bts//k"));
  EXPECT_FALSE(d.user);
  EXPECT_TRUE(d.kernel);

  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec e, ParseEventString(" intel_pt/cyc, mtc_period=0x3/uk "));
  EXPECT_THAT(e.terms, ElementsAre(EventTerm{"cyc", 1}, EventTerm{"mtc_period", 3}));
  EXPECT_TRUE(e.user && e.kernel);
}

TEST(ParseEventStringTest, Errors) {
  using absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ParseEventString(""), StatusIs(kInvalidArgument, HasSubstr("no PMU name")));
  EXPECT_THAT(ParseEventString("/tsc/"), StatusIs(kInvalidArgument, HasSubstr("no PMU name")));
  EXPECT_THAT(ParseEventString("intel_pt/tsc"),
              StatusIs(kInvalidArgument, HasSubstr("missing closing '/'")));
  EXPECT_THAT(ParseEventString("intel_pt/tsc,,cyc/"),
              StatusIs(kInvalidArgument, HasSubstr("empty term")));
  EXPECT_THAT(ParseEventString("intel_pt/tsc=x/"),
              StatusIs(kInvalidArgument, HasSubstr("bad value \"x\" for term tsc")));
  EXPECT_THAT(ParseEventString("intel_pt/tsc=-1/"), StatusIs(kInvalidArgument));
  EXPECT_THAT(ParseEventString("intel_pt/tsc,tsc=0/"),
              StatusIs(kInvalidArgument, HasSubstr("given twice")));
  EXPECT_THAT(ParseEventString("intel_pt//p"),
              StatusIs(kInvalidArgument, HasSubstr("unknown modifier 'p'")));
  EXPECT_THAT(ParseEventString("intel pt//"),
              StatusIs(kInvalidArgument, HasSubstr("invalid character")));
  EXPECT_THAT(ParseEventString("intel_pt/=1/"),
              StatusIs(kInvalidArgument, HasSubstr("has no name")));
  // Issue 12 item 12: '..//' named <sysfs root>/.. as a PMU.
  EXPECT_THAT(ParseEventString("..//"),
              StatusIs(kInvalidArgument, HasSubstr("\"..\" is not a PMU name")));
  EXPECT_THAT(ParseEventString(".//u"), StatusIs(kInvalidArgument, HasSubstr("not a PMU name")));
}

TEST_F(EventSpecTest, DefaultIsWhatPerfUses) {
  // perf record -e intel_pt//u on a CPU with psb_periods=3f, mtc_periods=249 shows
  // config 0x300e601: pt, mtc, tsc, branch, mtc_period=3, psb_period=3.
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, Resolve(pt_, "intel_pt//u"));
  EXPECT_EQ(e.type, 8u);
  EXPECT_EQ(e.config, 0x300e601u);
  EXPECT_EQ(e.config1, 0u);
  EXPECT_FALSE(e.exclude_user);
  EXPECT_TRUE(e.exclude_kernel);
  EXPECT_EQ(DescribeEvent(pt_, e),
            "intel_pt/branch=1,mtc=1,mtc_period=3,psb_period=3,pt=1,tsc=1/u");
}

TEST_F(EventSpecTest, DefaultsFollowCaps) {
  Pmu pt = pt_;
  pt.caps["mtc"] = "0";
  // Without MTC perf also drops its psb_period default.
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, DefaultConfig(pt));
  EXPECT_EQ(e.config, (1u << 0) | (1u << 10) | (1u << 13));
  pt = pt_;
  pt.caps["mtc_periods"] = "6";  // periods 1 and 2: nearest to 3 below is 2
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent f, DefaultConfig(pt));
  EXPECT_EQ(pt.formats.at("mtc_period").Extract(f.config), 2u);
  pt.caps["mtc_periods"] = "30";  // periods 4 and 5: none below 3, so the first above
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent g, DefaultConfig(pt));
  EXPECT_EQ(pt.formats.at("mtc_period").Extract(g.config), 4u);
}

TEST_F(EventSpecTest, TermsOverrideDefaults) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      ResolvedEvent e,
      Resolve(pt_, "intel_pt/tsc=1,cyc=1,cyc_thresh=2,mtc_period=3,psb_period=2,noretcomp=0/u"));
  const auto& f = pt_.formats;
  EXPECT_EQ(f.at("cyc").Extract(e.config), 1u);
  EXPECT_EQ(f.at("cyc_thresh").Extract(e.config), 2u);
  EXPECT_EQ(f.at("psb_period").Extract(e.config), 2u);
  EXPECT_EQ(f.at("noretcomp").Extract(e.config), 0u);
  EXPECT_EQ(e.config, 0x300e601u - (3u << 24) + (2u << 24) + (1u << 1) + (2u << 19));

  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent n, Resolve(pt_, "intel_pt/noretcomp,tsc=0/"));
  EXPECT_EQ(f.at("noretcomp").Extract(n.config), 1u);
  EXPECT_EQ(f.at("tsc").Extract(n.config), 0u);
  EXPECT_FALSE(n.exclude_user || n.exclude_kernel);
}

TEST_F(EventSpecTest, RawConfigWords) {
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, Resolve(pt_, "intel_pt/config=0x2001,config1=7/"));
  EXPECT_EQ(e.config, 0x2001u);
  EXPECT_EQ(e.config1, 7u);
}

TEST_F(EventSpecTest, PeriodNotInCapsNamesAllowedValues) {
  Pmu pt = pt_;
  pt.caps["psb_periods"] = "5";  // 0, 2 allowed (0 always)
  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec spec, ParseEventString("intel_pt/psb_period=1/"));
  EXPECT_THAT(ResolveEvent(pt, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("invalid psb_period=1 for intel_pt; valid values are: 0, 2")));
  EXPECT_THAT(
      Resolve(pt_, "intel_pt/mtc_period=2/"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid values are: 0, 3, 6, 9")));
  EXPECT_THAT(Resolve(pt_, "intel_pt/mtc_period=9/"), ::ptkit::testing::IsOk());
  EXPECT_THAT(Resolve(pt_, "intel_pt/cyc,cyc_thresh=13/"), ::ptkit::testing::IsOk());
  // cycle_thresholds=3fff has bits 0..13.
  EXPECT_THAT(Resolve(pt_, "intel_pt/cyc,cyc_thresh=14/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cycle_thresholds")));
  // psb_cyc=0 leaves only 0.
  pt = pt_;
  pt.caps["psb_cyc"] = "0";
  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec s2, ParseEventString("intel_pt/psb_period=0,cyc_thresh=1/"));
  EXPECT_THAT(ResolveEvent(pt, s2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid cyc_thresh=1")));
}

TEST_F(EventSpecTest, UnknownTermListsValidOnes) {
  EXPECT_THAT(Resolve(pt_, "intel_pt/cycles=1/"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown term \"cycles\" for intel_pt; valid terms: branch, cyc, "
                                 "cyc_thresh, event, fup_on_ptw, mtc, mtc_period, noretcomp, "
                                 "notnt, psb_period, pt, ptw, pwr_evt, tsc")));
  EXPECT_THAT(Resolve(bts_, "intel_bts/tsc/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown term \"tsc\"")));
}

TEST_F(EventSpecTest, ValueTooWide) {
  EXPECT_THAT(Resolve(pt_, "intel_pt/tsc=2/"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("tsc=2")));
  EXPECT_THAT(Resolve(pt_, "intel_pt/psb_period=16/"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("4 bit")));
}

TEST_F(EventSpecTest, FeatureNeedsCapability) {
  EXPECT_THAT(Resolve(pt_, "intel_pt/notnt/"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("does not support notnt (" + kSysfsFixture +
                                 "/intel_pt/caps/tnt_disable is 0")));
  EXPECT_THAT(Resolve(pt_, "intel_pt/event=1/"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("event_trace")));
  EXPECT_THAT(Resolve(pt_, "intel_pt/ptw,fup_on_ptw,pwr_evt/"), ::ptkit::testing::IsOk());
  EXPECT_THAT(Resolve(pt_, "intel_pt/notnt=0/"), ::ptkit::testing::IsOk());
}

TEST_F(EventSpecTest, AnUnreadableMtcCapMattersOnlyWhenMtcIsAskedFor) {
  Pmu pt = pt_;
  pt.caps["mtc"] = "zz";
  // A plain event records without the defaults that rest on the cap (as caps/mtc = 0).
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, Resolve(pt, "intel_pt//u"));
  EXPECT_EQ(pt.formats.at("mtc").Extract(e.config), 0u);
  EXPECT_EQ(e.config, (1u << 0) | (1u << 10) | (1u << 13));
  // Asked for, it fails naming the file and what is in it.
  EXPECT_THAT(Resolve(pt, "intel_pt/mtc/u"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("term mtc needs a readable capability: " + kSysfsFixture +
                                 "/intel_pt/caps/mtc: not a hex number: \"zz\"")));
  EXPECT_THAT(Resolve(pt, "intel_pt/mtc=0/u"), ::ptkit::testing::IsOk());
}

TEST_F(EventSpecTest, WrongPmuAndNoSpace) {
  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec spec, ParseEventString("intel_bts//"));
  EXPECT_THAT(ResolveEvent(pt_, spec), StatusIs(absl::StatusCode::kInvalidArgument));
  PTKIT_ASSERT_OK_AND_ASSIGN(EventSpec none, ParseEventString("intel_pt//"));
  none.user = none.kernel = false;
  EXPECT_THAT(ResolveEvent(pt_, none), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EventSpecTest, BtsHasNoConfig) {
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, Resolve(bts_, "intel_bts//k"));
  EXPECT_EQ(e.type, 9u);
  EXPECT_EQ(e.config, 0u);
  EXPECT_TRUE(e.exclude_user);
  EXPECT_FALSE(e.exclude_kernel);
  EXPECT_EQ(DescribeEvent(bts_, e), "intel_bts//k");
}

TEST_F(EventSpecTest, BuildAuxAttr) {
  PTKIT_ASSERT_OK_AND_ASSIGN(ResolvedEvent e, Resolve(pt_, "intel_pt/cyc/u"));
  const perf_event_attr a =
      BuildAuxAttr(e, {.enable_on_exec = true, .inherit = true, .aux_watermark = 4096});
  EXPECT_EQ(a.size, sizeof(perf_event_attr));
  EXPECT_EQ(a.type, 8u);
  EXPECT_EQ(a.config, e.config);
  EXPECT_EQ(a.sample_type,
            PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER);
  EXPECT_EQ(a.sample_id_all, 1u);
  EXPECT_EQ(a.disabled, 1u);
  EXPECT_EQ(a.enable_on_exec, 1u);
  EXPECT_EQ(a.inherit, 1u);
  EXPECT_EQ(a.exclude_kernel, 1u);
  EXPECT_EQ(a.exclude_user, 0u);
  EXPECT_EQ(a.exclude_hv, 1u);
  EXPECT_EQ(a.aux_watermark, 4096u);
  EXPECT_EQ(a.mmap, 0u);
  const perf_event_attr b = BuildAuxAttr(e, {});
  EXPECT_EQ(b.enable_on_exec, 0u);
  EXPECT_EQ(b.inherit, 0u);
  EXPECT_EQ(b.aux_watermark, 0u);
}

TEST(BuildTrackingAttrTest, Fields) {
  const perf_event_attr a = BuildTrackingAttr({.enable_on_exec = true, .inherit = true});
  EXPECT_EQ(a.type, static_cast<uint32_t>(PERF_TYPE_SOFTWARE));
  EXPECT_EQ(a.config, static_cast<uint64_t>(PERF_COUNT_SW_DUMMY));
  EXPECT_EQ(a.mmap + a.mmap2 + a.comm + a.comm_exec + a.task + a.context_switch, 6u);
  EXPECT_EQ(a.sample_id_all, 1u);
  EXPECT_EQ(a.sample_type, kSampleIdType);
  EXPECT_EQ(a.enable_on_exec, 1u);
  EXPECT_EQ(a.wakeup_events, 1u);
  EXPECT_EQ(a.watermark, 0u);
  const perf_event_attr b = BuildTrackingAttr({.wakeup_bytes = 8192});
  EXPECT_EQ(b.watermark, 1u);
  EXPECT_EQ(b.wakeup_watermark, 8192u);
}

}  // namespace
}  // namespace ptkit::record
