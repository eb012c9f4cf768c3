// decoder/profile.h (the stats --json schema both ways) and decoder/diff.h over profiles made
// here, with answers worked out by hand. Real recordings: tests/e2e/ptdecode_diff_cli_test.cc.
#include <string>
#include <vector>

#include "decoder/diff.h"
#include "decoder/profile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptkit::decoder {
namespace {

using ::testing::HasSubstr;

Profile Make(const std::string& trace, std::vector<ProfileFunction> functions) {
  Profile p;
  p.trace = trace;
  for (const ProfileFunction& fn : functions) {
    p.totals.instructions += fn.self;
    p.totals.calls += fn.calls;
  }
  p.functions = std::move(functions);
  SortProfile(p);
  return p;
}

TEST(ProfileTest, JsonRoundTripsAndSortsAsStatsDoes) {
  Profile p = Make("t.pt", {{"small", "/bin/app", 0x1010, 5, 5, 1},
                            {"big", "/bin/app", 0x1000, 50, 70, 2},
                            {"memcpy", "/lib/libc.so.6", 0x7000, 50, 50, 9}});
  p.errors = {{"pte_nomap", 2}, {"pte_bad_packet", 1}};
  p.warnings = {"w"};
  ASSERT_EQ(p.functions[0].function, "big");  // self ties: inclusive descending
  ASSERT_EQ(p.functions[1].function, "memcpy");
  ASSERT_EQ(p.images.size(), 2u);
  EXPECT_EQ(p.images[0], (ProfileImage{"/bin/app", 55, 3, 2}));
  const std::string json = ProfileToJson(p);
  EXPECT_THAT(json, HasSubstr("\"address\": \"0x1000\""));
  auto back = ProfileFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == p);
  EXPECT_EQ(ProfileToJson(*back), json);
}

TEST(ProfileTest, FromJsonNamesTheBadMember) {
  const std::string good = ProfileToJson(Make("t", {{"f", "/a", 0x10, 1, 1, 1}}));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return ProfileFromJson(s).status();
  };
  EXPECT_THAT(std::string(with("\"self\": 1", "\"self\": -1").message()),
              HasSubstr("functions[0].self: expected an unsigned integer, got number"));
  EXPECT_THAT(std::string(with("\"self\": 1", "\"selff\": 1").message()),
              HasSubstr("functions[0].self: missing"));
  EXPECT_THAT(std::string(with("\"0x10\"", "\"16\"").message()),
              HasSubstr("functions[0].address: expected \"0x\" and hex digits, got \"16\""));
  EXPECT_THAT(std::string(with("\"blocks\": 0", "\"blocks\": \"0\"").message()),
              HasSubstr("totals.blocks: expected an unsigned integer, got string"));
  EXPECT_THAT(std::string(with("ptkit-stats/1", "ptkit-stats/2").message()),
              HasSubstr("schema \"ptkit-stats/2\" is not one this ptdecode reads"));
  EXPECT_THAT(std::string(ProfileFromJson("{\"schema\": ").status().message()),
              HasSubstr("not valid JSON at byte"));
  // Members the schema does not know are ignored.
  EXPECT_TRUE(with("\"trace\": \"t\"", "\"trace\": \"t\", \"later\": [1]").ok());
}

TEST(DiffTest, MatchesByImageFileNameAndNameAndListsNewAndRemoved) {
  Profile base = Make("a", {{"main", "/build-a/app", 0x1000, 100, 300, 1},
                            {"work", "/build-a/app", 0x1100, 200, 200, 4},
                            {"gone", "/build-a/app", 0x1300, 10, 10, 1},
                            {"sub_1234", "/build-a/app", 0x1234, 7, 7, 1}});
  Profile now = Make("b", {{"main", "/build-b/app", 0x2000, 100, 330, 1},
                           {"work", "/build-b/app", 0x2100, 220, 220, 4},
                           {"fresh", "/build-b/app", 0x2300, 3, 3, 1},
                           {"sub_2234", "/build-b/app", 0x2234, 7, 7, 1}});
  DiffOptions options;
  options.fail_function_pct = 5;
  auto d = DiffProfiles({&base, 1}, {&now, 1}, options);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->rows.size(), 5u);
  EXPECT_EQ(d->rows[0].function, "work");  // largest |change| first
  EXPECT_EQ(d->rows[0].change, 20);
  EXPECT_DOUBLE_EQ(*d->rows[0].change_pct, 10.0);
  EXPECT_TRUE(d->rows[0].regression);
  EXPECT_EQ(d->rows[1].function, "gone");
  EXPECT_FALSE(d->rows[1].in_new);
  EXPECT_EQ(d->rows[2].function, "fresh");
  EXPECT_FALSE(d->rows[2].in_base);
  // Code without a symbol: by its offset from the function below it (work + 0x134).
  bool matched = false;
  for (const DiffRow& r : d->rows) {
    if (r.function == "work+0x134") matched = r.in_base && r.in_new && r.change == 0;
  }
  EXPECT_TRUE(matched);
  ASSERT_EQ(d->reasons.size(), 1u);
  EXPECT_THAT(d->reasons[0], HasSubstr("work [app]: self 200 -> 220 (+10.00%)"));
  EXPECT_EQ(d->base.total, 317u);
  EXPECT_EQ(d->now.total, 330u);
  options.allow = {"work"};
  EXPECT_FALSE(DiffProfiles({&base, 1}, {&now, 1}, options)->regression());
  options.allow.clear();
  options.min_instructions = 221;
  EXPECT_FALSE(DiffProfiles({&base, 1}, {&now, 1}, options)->regression());
  options = {};
  options.fail_total_pct = 4;  // +4.10%
  auto total = DiffProfiles({&base, 1}, {&now, 1}, options);
  EXPECT_TRUE(total->total_regression);
  options.fail_total_pct = 4.2;
  EXPECT_FALSE(DiffProfiles({&base, 1}, {&now, 1}, options)->regression());
}

TEST(DiffTest, SeveralRunsGiveTheLowerMedian) {
  std::vector<Profile> base = {Make("a1", {{"f", "/x", 0x10, 10, 10, 1}}),
                               Make("a2", {{"f", "/x", 0x10, 30, 30, 1}}),
                               Make("a3", {{"f", "/x", 0x10, 20, 20, 1}})};
  std::vector<Profile> now = {Make("b1", {{"f", "/x", 0x10, 40, 40, 1}}),
                              Make("b2", {{"f", "/x", 0x10, 25, 25, 1}})};
  auto d = DiffProfiles(base, now, {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rows[0].base.self, 20u);
  EXPECT_EQ(d->rows[0].now.self, 25u);
  EXPECT_EQ(d->base.total, 20u);
  EXPECT_THAT(FormatDiffText(*d, {}), HasSubstr("a1, a2, a3 (3 runs, medians)"));
}

TEST(DiffTest, NothingInCommonIsAnError) {
  Profile a = Make("a", {{"f", "/x/one", 0x10, 1, 1, 1}});
  Profile b = Make("b", {{"f", "/x/two", 0x10, 1, 1, 1}});
  auto d = DiffProfiles({&a, 1}, {&b, 1}, {});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("no function in common"));
}

TEST(DiffTest, IncompleteRunsAreSaidAndFailOnRequest) {
  Profile a = Make("a", {{"f", "/x", 0x10, 1, 1, 1}});
  Profile b = a;
  b.trace = "b";
  b.totals.errors = 2;
  DiffOptions options;
  auto d = DiffProfiles({&a, 1}, {&b, 1}, options);
  EXPECT_FALSE(d->regression());
  EXPECT_THAT(FormatDiffText(*d, options), HasSubstr("# warning: new side incomplete: b: 2"));
  options.fail_on_loss = true;
  EXPECT_TRUE(DiffProfiles({&a, 1}, {&b, 1}, options)->regression());
}

}  // namespace
}  // namespace ptkit::decoder
