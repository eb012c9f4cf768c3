// decoder/profile.h: the stats --json schema both ways, on profiles made here.
#include <string>
#include <vector>

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

}  // namespace
}  // namespace ptkit::decoder
