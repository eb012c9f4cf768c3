// Recording: a container decoded from memory (ReadRecording over a MemorySource, as the fuzzer
// does) gives what decoding the file gives; RecordingBuilder joins contiguous AUX bytes into
// pieces and marks every discontinuity.
#include "decoder/recording.h"

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "decoder/container_input.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/status.h"
#include "read_file.h"
#include "status_matchers.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// An emulated recording of tests/fuzz/decode_seed_tiny.S, its code archived: ptrecord said
// "37 instructions" (the single-stepped ground truth).
const std::string kSeed = std::string(PTKIT_SOURCE_DIR) + "/tests/fuzz/corpus/decode/pt.pt";

std::vector<uint8_t> ReadAll(const std::string& path) {
  return ::ptkit::testing::ReadWholeFile(path);
}

TEST(RecordingTest, AContainerInMemoryDecodesAsTheFile) {
  const std::vector<uint8_t> bytes = ReadAll(kSeed);
  ASSERT_FALSE(bytes.empty());
  auto reader = ContainerReader::Open(MemorySource(bytes, "seed.pt"));
  ASSERT_THAT(reader.status(), IsOk());
  auto r = ReadRecording(*reader, {});
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->name, "seed.pt");
  EXPECT_THAT(r->streams, SizeIs(1));
  CountSink from_memory(DecoderKind::kInsn);
  auto totals = DecodeRecording(*r, {}, from_memory);
  ASSERT_THAT(totals.status(), IsOk());
  EXPECT_EQ(from_memory.instructions(), 37u);
  EXPECT_EQ(from_memory.errors(), 0u);

  CountSink from_file(DecoderKind::kInsn);
  ASSERT_THAT(DecodeContainer(kSeed, {}, from_file).status(), IsOk());
  EXPECT_EQ(from_file.instructions(), from_memory.instructions());
}

// Counts the instructions and keeps the images of the streams it was told of.
class ImageOfStreams : public CountSink {
 public:
  ImageOfStreams() : CountSink(DecoderKind::kInsn) {}
  void OnStream(const StreamInfo& stream) override { images.push_back(stream.image); }
  std::vector<const ProgramImage*> images;
};

// The seed, read from memory (its bytes are spooled: the recording does not keep them).
absl::StatusOr<Recording> ReadSeedFromMemory() {
  const std::vector<uint8_t> bytes = ReadAll(kSeed);
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader,
                         ContainerReader::Open(MemorySource(bytes, "seed.pt")));
  return ReadRecording(reader, {});
}

TEST(RecordingTest, DecodesGivenTheSameImagesShareThemAndDecodeTheSame) {
  auto r = ReadSeedFromMemory();
  ASSERT_THAT(r.status(), IsOk());
  RecordingImages images(*r, {});
  ImageOfStreams first, second, own;
  ASSERT_THAT(DecodeRecording(*r, {}, first, &images).status(), IsOk());
  EXPECT_EQ(images.size(), 1u);
  ASSERT_THAT(DecodeRecording(*r, {}, second, &images).status(), IsOk());
  EXPECT_EQ(images.size(), 1u);
  ASSERT_THAT(DecodeRecording(*r, {}, own).status(), IsOk());
  ASSERT_THAT(first.images, SizeIs(1));
  ASSERT_THAT(second.images, SizeIs(1));
  ASSERT_THAT(own.images, SizeIs(1));
  // The second decode took the image the first made (still alive, in `images`); a decode
  // without them makes its own.
  EXPECT_EQ(second.images[0], first.images[0]);
  EXPECT_NE(own.images[0], first.images[0]);
  for (const ImageOfStreams* sink : {&first, &second, &own}) {
    EXPECT_EQ(sink->instructions(), 37u);
    EXPECT_EQ(sink->errors(), 0u);
  }
}

TEST(RecordingTest, ImagesOfAnotherRecordingOrSysrootAreRefused) {
  auto r = ReadSeedFromMemory();
  ASSERT_THAT(r.status(), IsOk());
  Recording other = RecordingBuilder("other", {}).Finish();
  RecordingImages of_other(other, {});
  CountSink sink;
  auto totals = DecodeRecording(*r, {}, sink, &of_other);
  EXPECT_EQ(totals.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(totals.status().message(), HasSubstr("another recording"));
  RecordingImages of_this(*r, {});
  RecordingOptions elsewhere;
  elsewhere.sysroot = "/elsewhere";
  EXPECT_EQ(DecodeRecording(*r, elsewhere, sink, &of_this).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RecordingTest, ContiguousAuxBytesJoinAndAJumpIsALossPoint) {
  RecordingBuilder b("test", {});
  const StreamId cpu0{StreamKind::kCpu, 0};
  const std::vector<uint8_t> four = {1, 2, 3, 4};
  ASSERT_THAT(b.AddAux(cpu0, 0, 10, four, 0), IsOk());
  ASSERT_THAT(b.AddAux(cpu0, 4, 11, four, 0), IsOk());   // joins
  ASSERT_THAT(b.AddAux(cpu0, 10, 12, four, 0), IsOk());  // a jump of 2 bytes
  ASSERT_THAT(b.AddAux(cpu0, 12, 13, four, 0), IsOk());  // 2 bytes repeat
  b.AddLoss(cpu0, "aux-truncated", 16, 0);
  Recording r = b.Finish();
  const RecordedStream& s = r.streams.at({cpu0, -1});
  ASSERT_THAT(s.pieces, SizeIs(2));
  EXPECT_EQ(s.pieces[0].run.size, 8u);
  EXPECT_EQ(s.pieces[1].aux_offset, 10u);
  EXPECT_EQ(s.pieces[1].run.size, 6u);
  ASSERT_THAT(s.pieces[1].losses_before, SizeIs(1));
  EXPECT_EQ(s.pieces[1].losses_before[0].kind, kLossDiscontinuity);
  EXPECT_EQ(s.pieces[1].losses_before[0].bytes, 2u);
  ASSERT_THAT(s.losses_after, SizeIs(1));
  EXPECT_EQ(s.bytes, 14u);
  ASSERT_THAT(r.warnings, SizeIs(1));
  EXPECT_THAT(r.warnings[0], HasSubstr("2 AUX bytes repeat"));
}

// A snapshot whose bytes from a PSB on are the end of the snapshot before goes on in that one's
// stream with its new bytes; one that is not (or only partly) stays on its own. A crafted pair
// of PSB runs that differ only at their end joins nothing, in bounded time (each of the ~2^19
// places a PSB starts used to be compared to the end: 2^38 byte comparisons).
TEST(RecordingTest, SnapshotsThatOverlapJoinByContent) {
  const std::vector<uint8_t> psb = {2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82,
                                    2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82};
  std::vector<uint8_t> a = {7, 7, 7};  // a snapshot begins anywhere
  for (int i = 0; i < 3; ++i) {
    a.insert(a.end(), psb.begin(), psb.end());
    for (uint8_t k = 0; k < 40; ++k) a.push_back(static_cast<uint8_t>(i * 40 + k));
  }
  // b: a's bytes from its second PSB on, less the first 5 of them, then new ones.
  const size_t second = 3 + 56;
  std::vector<uint8_t> b(a.begin() + second - 5, a.end());
  for (uint8_t k = 0; k < 30; ++k) b.push_back(200 + k % 50);
  std::vector<uint8_t> c = b;  // the same place, other bytes after the PSB: no join
  c[40] ^= 1;
  RecordingBuilder builder("test", {});
  const StreamId tid{StreamKind::kThread, 9};
  ASSERT_THAT(builder.AddSnapshot(tid, 0, a.size(), 10, a), IsOk());
  ASSERT_THAT(builder.AddSnapshot(tid, 1, a.size() + 30, 20, b), IsOk());
  ASSERT_THAT(builder.AddSnapshot(tid, 2, a.size() + 60, 30, c), IsOk());
  // Runs of PSBs, the second one's last byte differing.
  const StreamId other{StreamKind::kThread, 10};
  std::vector<uint8_t> runs;
  for (int i = 0; i < (1 << 16); ++i) runs.insert(runs.end(), psb.begin(), psb.end());
  std::vector<uint8_t> altered = runs;
  altered.back() = 0x99;
  ASSERT_THAT(builder.AddSnapshot(other, 0, runs.size(), 10, altered), IsOk());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_THAT(builder.AddSnapshot(other, 1, runs.size(), 20, runs), IsOk());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  Recording r = builder.Finish();
  ASSERT_THAT(r.streams, SizeIs(4));
  EXPECT_EQ(r.streams.at({tid, 0}).bytes, a.size() + 30);  // b's new bytes only
  EXPECT_FALSE(r.streams.contains({tid, 1}));
  EXPECT_EQ(r.streams.at({tid, 2}).bytes, c.size());
  EXPECT_EQ(r.streams.at({other, 1}).bytes, runs.size());
  // --snapshot 1: snapshot 1 alone, whole.
  RecordingOptions one;
  one.snapshot = 1;
  RecordingBuilder only("test", one);
  ASSERT_THAT(only.AddSnapshot(tid, 0, a.size(), 10, a), IsOk());
  ASSERT_THAT(only.AddSnapshot(tid, 1, a.size() + 30, 20, b), IsOk());
  EXPECT_EQ(only.Finish().streams.at({tid, 1}).bytes, b.size());
}

TEST(RecordingTest, StreamsTheOptionsCannotSelectAreNotKept) {
  RecordingOptions options;
  options.cpu = 1;
  RecordingBuilder b("test", options);
  const std::vector<uint8_t> four = {1, 2, 3, 4};
  ASSERT_THAT(b.AddAux({StreamKind::kCpu, 0}, 0, 0, four, 0), IsOk());
  ASSERT_THAT(b.AddAux({StreamKind::kCpu, 1}, 0, 0, four, 0), IsOk());
  Recording r = b.Finish();
  EXPECT_THAT(r.streams, SizeIs(1));
  EXPECT_THAT(r.present, SizeIs(2));  // both named when a filter selects nothing
}

}  // namespace
}  // namespace ptkit::decoder
