// BTS: a known branch list (derived from a walk over tests/data/decoder/tiny.c) decodes to
// exactly the walk's instruction flow, through every kind of sink.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "decoder/bts.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "recording_sink.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::BtsFromWalk;
using ::ptkit::decoder::testing::BtsWalks;
using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::KernelBtsLayout;
using ::ptkit::decoder::testing::LongBtsFromWalks;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::RecordingSink;
using ::ptkit::testing::IsOk;
using ::testing::ElementsAreArray;
using ::testing::SizeIs;

using ::ptkit::decoder::testing::kTiny;

class BtsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    auto image = ProgramImage::Create();
    ASSERT_THAT(image, IsOk());
    image_ = std::move(*image);
    ASSERT_THAT(image_->AddElf({kTiny, 0}), IsOk());
  }
  std::vector<uint64_t> Walk(uint32_t seed, uint64_t n) {
    PtSynth synth(*code_);
    auto ips =
        synth.AddSegment({.entry = code_->Symbol("work").address, .seed = seed, .max_insns = n});
    EXPECT_THAT(ips, IsOk());
    return *ips;
  }
  std::unique_ptr<ElfCode> code_;
  std::unique_ptr<ProgramImage> image_;
};

TEST_F(BtsTest, BranchListDecodesToTheWalk) {
  int tested = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::vector<uint64_t> ips = Walk(seed, 3000);
    std::vector<size_t> branches;
    std::vector<uint8_t> bts = BtsFromWalk(*code_, ips, &branches);
    if (branches.size() < 10) continue;  // a walk that left work() at once
    ++tested;
    // From the first recorded branch to the last one's source.
    std::vector<uint64_t> expected(ips.begin() + branches.front(),
                                   ips.begin() + branches.back() + 1);
    RecordingSink rec;
    auto totals = DecodeBts(bts, *image_, rec);
    ASSERT_THAT(totals, IsOk());
    EXPECT_THAT(rec.errors, SizeIs(0)) << "seed " << seed;
    EXPECT_THAT(rec.runs[0], ElementsAreArray(expected)) << "seed " << seed;

    CountSink blocks(DecoderKind::kBlock);
    ASSERT_THAT(DecodeBts(bts, *image_, blocks), IsOk());
    EXPECT_EQ(blocks.instructions(), expected.size());
    EXPECT_EQ(blocks.blocks(), branches.size());  // one block per record
  }
  EXPECT_GE(tested, 10);
}

TEST_F(BtsTest, StatsCountCallsFromBranchRecords) {
  std::vector<uint64_t> ips = Walk(4, 5000);
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = BtsFromWalk(*code_, ips, &branches);
  std::FILE* out = std::tmpfile();
  OutputOptions options;
  options.json = true;
  auto sink = MakeStatsSink(*image_, out, options);
  ASSERT_THAT(DecodeBts(bts, *image_, *sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  EXPECT_EQ(std::fclose(out), 0);
  auto doc = nlohmann::json::parse(text);
  const uint64_t leaf = code_->Symbol("leaf").address;
  uint64_t leaf_entries = 0;
  for (size_t i = branches.front() + 1; i <= branches.back(); ++i) leaf_entries += ips[i] == leaf;
  for (const auto& fn : doc["functions"]) {
    if (fn["function"] == "leaf") {
      EXPECT_EQ(fn["calls"].get<uint64_t>(), leaf_entries);
    }
  }
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), branches.back() - branches.front() + 1);
}

TEST_F(BtsTest, ARecordThatDoesNotMatchTheCodeIsAnErrorAndDecodingGoesOn) {
  std::vector<uint64_t> ips = Walk(6, 3000);
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = BtsFromWalk(*code_, ips, &branches);
  ASSERT_GE(branches.size(), 10u);
  // Record 5's source becomes an address the straight-line walk cannot reach.
  const size_t bad = 5;
  uint64_t bogus = code_->Symbol("_start").address + code_->Symbol("_start").size - 1;
  std::memcpy(bts.data() + bad * 24, &bogus, 8);
  RecordingSink rec;
  auto totals = DecodeBts(bts, *image_, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.errors, SizeIs(1));
  EXPECT_EQ(rec.errors[0].code, pte_nosync);
  EXPECT_EQ(rec.errors[0].offset, bad * 24);
  ASSERT_THAT(rec.runs, SizeIs(2));
  // After the bad record the walk restarts at its target and is exact again.
  std::vector<uint64_t> after(ips.begin() + branches[bad] + 1, ips.begin() + branches.back() + 1);
  EXPECT_THAT(rec.runs[1], ElementsAreArray(after));
}

TEST_F(BtsTest, ZeroAddressesEndAndBeginTheTrace) {
  // As the emulated --bts writes a syscall, and perf's intel-bts decoder reads it: {from, 0}
  // ends the trace after `from` (into the untraced kernel), {0, to} begins it again at `to`.
  std::vector<uint64_t> ips = Walk(6, 3000);
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = BtsFromWalk(*code_, ips, &branches);
  ASSERT_GE(branches.size(), 10u);
  const size_t split = 5;
  uint64_t from, to, zero = 0;
  std::memcpy(&from, bts.data() + split * 24, 8);
  std::memcpy(&to, bts.data() + split * 24 + 8, 8);
  std::vector<uint8_t> record(24, 0);
  std::memcpy(record.data() + 8, &to, 8);
  std::memcpy(bts.data() + split * 24 + 8, &zero, 8);                        // {from, 0}
  bts.insert(bts.begin() + (split + 1) * 24, record.begin(), record.end());  // {0, to}
  bts.insert(bts.begin(), record.begin(), record.end());                     // {0, first}
  std::memcpy(bts.data() + 8, &ips[branches.front()], 8);

  struct Events : RecordingSink {
    void OnEvent(const pt_event& event) override {
      events.push_back(event);
      at.push_back(runs.back().size());
    }
    std::vector<pt_event> events;
    std::vector<size_t> at;  // instructions before each event
  } rec;
  ASSERT_THAT(DecodeBts(bts, *image_, rec), IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  std::vector<uint64_t> expected(ips.begin() + branches.front(), ips.begin() + branches.back() + 1);
  EXPECT_THAT(rec.runs[0], ElementsAreArray(expected));
  ASSERT_THAT(rec.events, SizeIs(3));
  EXPECT_EQ(rec.events[0].type, ptev_enabled);
  EXPECT_EQ(rec.events[0].variant.enabled.ip, ips[branches.front()]);
  EXPECT_EQ(rec.at[0], 0u);
  EXPECT_EQ(rec.events[1].type, ptev_disabled);
  EXPECT_TRUE(rec.events[1].ip_suppressed);
  EXPECT_EQ(rec.at[1], branches[split] - branches.front() + 1);  // after `from`
  EXPECT_EQ(rec.events[2].type, ptev_enabled);
  EXPECT_EQ(rec.events[2].variant.enabled.ip, to);
  EXPECT_EQ(rec.at[2], rec.at[1]);
}

// A piece that ends inside a record (issue 12 item 11): its bytes were dropped without a word.
// Zero bytes there are the kernel's padding at the end of an AUX buffer chunk, not a record.
TEST_F(BtsTest, APartialRecordAtTheEndIsAnErrorUnlessItIsPadding) {
  std::vector<uint64_t> ips = Walk(6, 3000);
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = BtsFromWalk(*code_, ips, &branches);
  const size_t whole = bts.size();
  std::vector<uint8_t> padded = bts;
  padded.resize(whole + 16, 0);
  RecordingSink rec;
  ASSERT_THAT(DecodeBts(padded, *image_, rec), IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));

  bts.insert(bts.end(), bts.begin(), bts.begin() + 10);  // 10 bytes of a real record
  RecordingSink cut;
  auto totals = DecodeBts(bts, *image_, cut);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(cut.errors, SizeIs(1));
  EXPECT_EQ(cut.errors[0].code, kErrorBtsPartial);
  EXPECT_EQ(cut.errors[0].offset, whole);
  EXPECT_EQ(totals->errors_by_code[kErrorBtsPartial], 1u);
  EXPECT_EQ(cut.runs[0], rec.runs[0]);  // the whole records decode as before
}

// A piece that runs over the end of the kernel's AUX ring (issue 12 item 5): the kernel skips
// the last bytes of the ring (4096 % 24 = 16) and goes on with a record at its start. Decoded
// in 24-byte steps from the piece's first byte, every record after the wrap was misread.
TEST_F(BtsTest, RecordsAfterTheKernelsRingWrapAreFoundWhereTheyAre) {
  constexpr uint64_t kRing = 4096;
  const BtsWalks walks = LongBtsFromWalks(*code_, code_->Symbol("work").address, 3 * kRing);
  RecordingSink plain;
  ASSERT_THAT(DecodeBts(walks.records, *image_, plain), IsOk());
  ASSERT_THAT(plain.errors, SizeIs(0));
  ASSERT_THAT(plain.runs, SizeIs(1));
  ASSERT_THAT(plain.runs[0], ElementsAreArray(walks.flow));
  // From the ring's start, and from an offset of a later lap (a piece after a loss).
  for (uint64_t start : {uint64_t{0}, 5 * kRing + 24 * 100}) {
    SCOPED_TRACE(start);
    const std::vector<uint8_t> laid = KernelBtsLayout(walks.records, kRing, start);
    ASSERT_GE(laid.size(), walks.records.size() + 3 * 16);  // three wraps at least
    RecordingSink rec;
    DecodeTotals totals;
    ASSERT_THAT(DecodeBtsInto(laid, *image_, rec, totals, start, kRing), IsOk());
    EXPECT_THAT(rec.errors, SizeIs(0));
    ASSERT_THAT(rec.runs, SizeIs(1));
    EXPECT_THAT(rec.runs[0], ElementsAreArray(walks.flow));
    // Padding that is not zero is part of a lost record.
    std::vector<uint8_t> dirty = laid;
    const size_t pad = kRing - start % kRing - 16;  // the first wrap's padding
    dirty[pad + 3] = 0x55;
    RecordingSink lost;
    DecodeTotals lost_totals;
    ASSERT_THAT(DecodeBtsInto(dirty, *image_, lost, lost_totals, start, kRing), IsOk());
    ASSERT_THAT(lost.errors, SizeIs(1));
    EXPECT_EQ(lost.errors[0].code, kErrorBtsPartial);
    EXPECT_EQ(lost.errors[0].offset, start + pad);
  }
}

// Records whose source no straight-line walk from the previous target reaches, over code that
// never branches (a MiB of NOPs): each walked 2^20 instructions (issue 12 item 11: 1.1 KB of
// input took 40 s); now at most kMaxBtsWalk, reported as kErrorBtsWalk.
TEST_F(BtsTest, AWalkWithoutATakenBranchIsBounded) {
  constexpr uint64_t kBase = 0x10000000;
  const std::vector<uint8_t> nops(size_t{1} << 21, 0x90);
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("nops", kBase, nops);
  constexpr int kRecords = 40;
  std::vector<uint8_t> bts;
  for (int i = 0; i < kRecords; ++i) {
    const uint64_t record[3] = {kBase + nops.size() - 1, kBase, 0};  // from: out of reach
    const auto* bytes = reinterpret_cast<const uint8_t*>(record);
    bts.insert(bts.end(), bytes, bytes + sizeof(record));
  }
  CountSink count(DecoderKind::kBlock);
  auto totals = DecodeBts(bts, **image, count);
  ASSERT_THAT(totals, IsOk());
  // The first record starts the walk at its source (the last NOP, reached at once); each of
  // the others walks from kBase and gives up after kMaxBtsWalk instructions.
  EXPECT_EQ(totals->errors, kRecords - 1u);
  EXPECT_EQ(totals->errors_by_code[kErrorBtsWalk], kRecords - 1u);
  EXPECT_EQ(totals->instructions, 1 + (kRecords - 1) * kMaxBtsWalk);
}

}  // namespace
}  // namespace ptkit::decoder
