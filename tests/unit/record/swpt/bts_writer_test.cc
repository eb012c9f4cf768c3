#include "record/swpt/bts_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ptkit::swpt {
namespace {

using ::testing::ElementsAre;
using ::testing::FieldsAre;

TEST(SwptBtsWriterTest, WritesOneRecordPerTakenBranch) {
  BtsWriter w;
  w.Add(Event::Enable(0x1000));
  w.Add(Event::Cond(0x1000, 2, /*taken=*/false, 0x1100));
  w.Add(Event::Cond(0x1002, 2, /*taken=*/true, 0x1100));
  w.Add(Event::Simple(EventKind::kDirectCall, 0x1100, 0x2000, 5));
  w.Add(Event::Simple(EventKind::kReturn, 0x2010, 0x1105));
  w.Add(Event::Simple(EventKind::kIndirectJump, 0x1105, 0x3000));
  w.Add(Event::Tick(100));
  w.Add(Event::Disable(0x3000, 0, /*suppress_ip=*/true));
  w.Add(Event::AsyncDisable(0x3002));
  ASSERT_EQ(w.bytes().size(), 6 * 24u);
  EXPECT_EQ(w.records(), 6u);
  auto records = BtsWriter::Parse(w.bytes().data(), w.bytes().size());
  EXPECT_THAT(records, ElementsAre(FieldsAre(0u, 0x1000u, 0u), FieldsAre(0x1002u, 0x1100u, 0u),
                                   FieldsAre(0x1100u, 0x2000u, 0u), FieldsAre(0x2010u, 0x1105u, 0u),
                                   FieldsAre(0x1105u, 0x3000u, 0u), FieldsAre(0x3000u, 0u, 0u)));
}

TEST(SwptBtsWriterTest, ParseIgnoresPartialRecordAndTakeEmpties) {
  BtsWriter w;
  w.Add(Event::Simple(EventKind::kDirectJump, 0x10, 0x20));
  std::vector<uint8_t> bytes = w.TakeBytes();
  EXPECT_TRUE(w.bytes().empty());
  bytes.push_back(0xff);
  auto records = BtsWriter::Parse(bytes.data(), bytes.size());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].from, 0x10u);
  EXPECT_EQ(records[0].to, 0x20u);
}

}  // namespace
}  // namespace ptkit::swpt
