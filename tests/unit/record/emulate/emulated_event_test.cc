#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "record/emulate/emulate.h"
#include "status_matchers.h"

namespace ptkit::emulate {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseEmulatedEventTest, DefaultsAreLikePerf) {
  auto e = ParseEmulatedEvent("intel_pt//u");
  ASSERT_THAT(e, IsOk());
  EXPECT_FALSE(e->bts);
  EXPECT_TRUE(e->pt.ret_compression);
  EXPECT_TRUE(e->pt.tsc);
  EXPECT_EQ(e->pt.psb_period, 0);
}

TEST(ParseEmulatedEventTest, TermsSetTheEncoder) {
  auto e = ParseEmulatedEvent("intel_pt/noretcomp=1,psb_period=2,tsc=0,mtc,mtc_period=3/u");
  ASSERT_THAT(e, IsOk());
  EXPECT_FALSE(e->pt.ret_compression);
  EXPECT_EQ(e->pt.psb_period, 2);
  EXPECT_FALSE(e->pt.tsc);
  EXPECT_TRUE(e->pt.mtc);
  EXPECT_EQ(e->pt.mtc_freq, 3);
  EXPECT_TRUE(ParseEmulatedEvent("intel_bts//u")->bts);
  EXPECT_TRUE(ParseEmulatedEvent("intel_bts")->bts);
}

TEST(ParseEmulatedEventTest, WhatCannotBeEmulatedIsAClearError) {
  EXPECT_THAT(ParseEmulatedEvent("intel_pt//k"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("user space only")));
  EXPECT_THAT(ParseEmulatedEvent("intel_pt/ptw=1/u"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("noretcomp, psb_period")));
  EXPECT_THAT(ParseEmulatedEvent("intel_pt/psb_period=16/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0..15")));
  EXPECT_THAT(ParseEmulatedEvent("cycles"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'cycles'")));
  EXPECT_THAT(ParseEmulatedEvent("intel_pt/oops"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ptkit::emulate
