#include "record/pmu_registry.h"

#include <linux/perf_event.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kFixture = std::string(PTKIT_SOURCE_DIR) + "/tests/data/sysfs";

TEST(ParseFormatSpecTest, SingleBit) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f, ParseFormatSpec("config:10\n"));
  EXPECT_EQ(f.word, ConfigWord::kConfig);
  EXPECT_EQ(f.mask, uint64_t{1} << 10);
  EXPECT_EQ(f.width(), 1);
  EXPECT_EQ(f.max_value(), 1u);
}

TEST(ParseFormatSpecTest, Range) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f, ParseFormatSpec("config:14-17"));
  EXPECT_EQ(f.mask, uint64_t{0xf} << 14);
  EXPECT_EQ(f.max_value(), 15u);
}

TEST(ParseFormatSpecTest, Config1AndConfig2) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f1, ParseFormatSpec("config1:0-3"));
  EXPECT_EQ(f1.word, ConfigWord::kConfig1);
  EXPECT_EQ(f1.mask, 0xfu);
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f2, ParseFormatSpec("config2:63"));
  EXPECT_EQ(f2.word, ConfigWord::kConfig2);
  EXPECT_EQ(f2.mask, uint64_t{1} << 63);
}

TEST(ParseFormatSpecTest, CommaListSpreadsValueInBitOrder) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f, ParseFormatSpec("config:0-1,8,32-33"));
  EXPECT_EQ(f.mask, 0x3u | 0x100u | (uint64_t{3} << 32));
  EXPECT_EQ(f.width(), 5);
  // value 0b10110: bits 1,2,4 -> mask bits #1 (bit 1), #2 (bit 8), #4 (bit 33).
  PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t w, f.Apply(0, 0b10110));
  EXPECT_EQ(w, 0x2u | 0x100u | (uint64_t{1} << 33));
  EXPECT_EQ(f.Extract(w), 0b10110u);
}

TEST(ParseFormatSpecTest, FullWord) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f, ParseFormatSpec("config:0-63"));
  EXPECT_EQ(f.mask, ~uint64_t{0});
  EXPECT_EQ(f.max_value(), ~uint64_t{0});
  PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t w, f.Apply(0, 0xdeadbeefcafef00d));
  EXPECT_EQ(w, 0xdeadbeefcafef00du);
}

TEST(ParseFormatSpecTest, ApplyClearsOldBitsAndKeepsOthers) {
  PTKIT_ASSERT_OK_AND_ASSIGN(FormatField f, ParseFormatSpec("config:14-17"));
  PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t w, f.Apply(~uint64_t{0}, 5));
  EXPECT_EQ(w, (~uint64_t{0} & ~(uint64_t{0xf} << 14)) | (uint64_t{5} << 14));
  EXPECT_THAT(f.Apply(0, 16), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("4 bit")));
}

TEST(ParseFormatSpecTest, Errors) {
  EXPECT_THAT(ParseFormatSpec("config10"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseFormatSpec("config3:1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown word")));
  EXPECT_THAT(ParseFormatSpec("config:64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("above 63")));
  EXPECT_THAT(ParseFormatSpec("config:5-3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reversed")));
  EXPECT_THAT(ParseFormatSpec("config:"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseFormatSpec("config:1,x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PmuRegistryTest, ReadsIntelPtFixture) {
  PmuRegistry reg(kFixture);
  PTKIT_ASSERT_OK_AND_ASSIGN(Pmu pt, reg.Find("intel_pt"));
  EXPECT_EQ(pt.type, 8u);
  EXPECT_EQ(pt.formats.size(), 14u);
  EXPECT_EQ(pt.formats.at("tsc").mask, uint64_t{1} << 10);
  EXPECT_EQ(pt.formats.at("cyc").mask, uint64_t{1} << 1);
  EXPECT_EQ(pt.formats.at("mtc_period").mask, uint64_t{0xf} << 14);
  EXPECT_EQ(pt.formats.at("cyc_thresh").mask, uint64_t{0xf} << 19);
  EXPECT_EQ(pt.formats.at("psb_period").mask, uint64_t{0xf} << 24);
  EXPECT_EQ(pt.formats.at("notnt").mask, uint64_t{1} << 55);
  EXPECT_EQ(pt.Cap("psb_periods").value_or(~uint64_t{0}), 0x3fu);
  EXPECT_EQ(pt.Cap("mtc_periods").value_or(~uint64_t{0}), 0x249u);
  EXPECT_EQ(pt.Cap("cycle_thresholds").value_or(~uint64_t{0}), 0x3fffu);
  EXPECT_EQ(pt.Cap("num_address_ranges").value_or(~uint64_t{0}), 2u);
  EXPECT_THAT(pt.Cap("nonexistent"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("caps/nonexistent")));
  EXPECT_EQ(pt.CapOr("nonexistent", 7), 7u);
  EXPECT_EQ(pt.max_nonturbo_ratio, 24u);
  EXPECT_EQ(pt.tsc_art_numerator, 2u);
  EXPECT_EQ(pt.tsc_art_denominator, 168u);
  EXPECT_THAT(pt.FormatNames(), HasSubstr("branch, cyc, cyc_thresh, event"));
}

TEST(PmuRegistryTest, BtsHasOnlyType) {
  PmuRegistry reg(kFixture);
  PTKIT_ASSERT_OK_AND_ASSIGN(Pmu bts, reg.Find("intel_bts"));
  EXPECT_EQ(bts.type, 9u);
  EXPECT_TRUE(bts.formats.empty());
  EXPECT_TRUE(bts.caps.empty());
  EXPECT_FALSE(bts.max_nonturbo_ratio.has_value());
  EXPECT_FALSE(bts.tsc_art_numerator.has_value());
}

TEST(PmuRegistryTest, MissingPmuNamesThePath) {
  PmuRegistry reg(kFixture);
  EXPECT_FALSE(reg.Exists("cpu"));
  EXPECT_TRUE(reg.Exists("intel_pt"));
  EXPECT_THAT(reg.Find("cpu"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no cpu PMU (" + kFixture + "/cpu does not exist)")));
}

// Issue 12 item 12: `--event '..//'` read <root>/../type. A name that is not a PMU name is
// refused before any path is built from it; the fixture's parent has a "sysfs" directory with
// PMU-like children, so "../sysfs/intel_pt" would otherwise be found.
TEST(PmuRegistryTest, NamesThatAreNotPmuNamesReadNothingOutsideTheRoot) {
  PmuRegistry reg(kFixture + "/intel_pt/..");
  ASSERT_TRUE(reg.Exists("intel_pt"));
  for (std::string_view bad : {"..", ".", "", "../sysfs/intel_pt", "intel_pt/format", "a b"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(reg.Exists(bad));
    EXPECT_THAT(reg.Find(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a PMU name")));
  }
  EXPECT_THAT(reg.Find("uncore_imc_0"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PmuRegistryTest, List) {
  PmuRegistry reg(kFixture);
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, reg.List());
  EXPECT_THAT(names, ElementsAre("intel_bts", "intel_pt"));
  PmuRegistry missing("/nonexistent/sysfs");
  EXPECT_THAT(missing.List(), StatusIs(absl::StatusCode::kNotFound));
}

class BrokenTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("sysfs_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_ / "p" / "format");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel) << text;
  }
  std::filesystem::path root_;
};

TEST_F(BrokenTree, BadTypeNamesFile) {
  Write("p/type", "eight\n");
  EXPECT_THAT(PmuRegistry(root_.string()).Find("p"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p/type")));
}

TEST_F(BrokenTree, BadFormatNamesFile) {
  Write("p/type", "8\n");
  Write("p/format/x", "config:99\n");
  EXPECT_THAT(PmuRegistry(root_.string()).Find("p"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p/format/x")));
}

TEST_F(BrokenTree, BadTscArtRatio) {
  Write("p/type", "8\n");
  Write("p/tsc_art_ratio", "2\n");
  EXPECT_THAT(PmuRegistry(root_.string()).Find("p"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tsc_art_ratio")));
}

TEST_F(BrokenTree, MissingTypeIsNotFound) {
  EXPECT_THAT(PmuRegistry(root_.string()).Find("p"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PmuRegistryTest, RealSysfsSoftwarePmu) {
  // /sys/bus/event_source/devices/software exists on every Linux with perf events.
  PmuRegistry reg;
  if (!reg.Exists("software")) GTEST_SKIP() << "no " << reg.root() << "/software";
  PTKIT_ASSERT_OK_AND_ASSIGN(Pmu sw, reg.Find("software"));
  EXPECT_EQ(sw.type, static_cast<uint32_t>(PERF_TYPE_SOFTWARE));
}

}  // namespace
}  // namespace ptkit::record
