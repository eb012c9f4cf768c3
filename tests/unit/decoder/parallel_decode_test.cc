// Parallel decoding (decoder/parallel_decode.h) gives the serial decode's output byte for byte:
// on the real hardware traces of ../shared/testdata (skipped when absent) and on those traces
// damaged, so that errors and resyncs fall at chunk edges, with chunks small enough that every
// few PSBs start one.
#include "decoder/parallel_decode.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decoder/decode.h"
#include "decoder/fast_block_decoder.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pt_synth.h"
#include "status_matchers.h"
#include "test_io.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;

using SinkMaker =
    std::function<std::unique_ptr<Sink>(const ProgramImage&, std::FILE*, const OutputOptions&)>;

using ::ptkit::decoder::testing::ReadAll;

class ParallelDecodeTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string dir =
        std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments/" + GetParam();
    struct stat st;
    if (stat((dir + "/trace").c_str(), &st) != 0) {
      GTEST_SKIP() << dir << "/trace is absent (the shared test data is not part of the repo)";
    }
    spec_.pt_path = dir + "/trace";
    spec_.page_dumps.push_back(ParsePageDumpSpec(dir));
    auto input = LoadRawInput(spec_);
    ASSERT_THAT(input, IsOk());
    input_ = std::make_unique<RawInput>(std::move(*input));
    trace_.assign(input_->trace.bytes().begin(), input_->trace.bytes().end());
    for (int i = 0; i < 4; ++i) {
      auto again = LoadRawInput(spec_);
      ASSERT_THAT(again, IsOk());
      workers_.push_back(std::move(again->image));
    }
  }

  // The output and totals of `make`'s sink: serially (jobs 0) or in parallel.
  std::string Decode(const SinkMaker& make, bool json, size_t jobs, uint64_t chunk_bytes,
                     DecodeTotals* totals_out = nullptr, ParallelStats* stats = nullptr) {
    std::FILE* out = std::tmpfile();
    EXPECT_NE(out, nullptr);
    OutputOptions options;
    options.json = json;
    std::unique_ptr<Sink> sink = make(*input_->image, out, options);
    DecodeTotals totals;
    if (jobs == 0) {
      EXPECT_THAT(DecodeIntoCanonical(trace_, input_->config, *input_->image, *sink, totals),
                  IsOk());
    } else {
      std::vector<const ProgramImage*> images;
      for (size_t i = 0; i < jobs; ++i) images.push_back(workers_[i].get());
      EXPECT_THAT(DecodeInParallel(trace_, input_->config, *input_->image, images, *sink, totals, 0,
                                   chunk_bytes, stats),
                  IsOk());
    }
    EXPECT_THAT(sink->Finish(totals), IsOk());
    if (totals_out != nullptr) *totals_out = totals;
    return ReadAll(out);
  }

  // Every output of the instruction and block decoders, serial against parallel, byte for
  // byte; and the totals. Returns what the parallel decodes did.
  ParallelStats ExpectSameAsSerial() {
    ParallelStats all;
    struct Output {
      const char* name;
      SinkMaker make;
      bool json;
    };
    const Output outputs[] = {
        {"insn", MakeInsnSink, false},        {"branches --json", MakeBranchesSink, true},
        {"stats", MakeStatsSink, false},      {"stats --json", MakeStatsSink, true},
        {"calls", MakeCallsSink, false},      {"folded", MakeFoldedSink, false},
        {"timeline", MakeTimelineSink, false}};
    for (const Output& o : outputs) {
      DecodeTotals serial_totals;
      const std::string serial = Decode(o.make, o.json, 0, 0, &serial_totals);
      EXPECT_GT(serial.size(), 1000u);
      for (auto [jobs, chunk] : {std::pair<size_t, uint64_t>{1, 1}, {2, 1}, {4, 700}}) {
        {
          SCOPED_TRACE(::testing::Message() << o.name << " -j" << jobs << " chunk " << chunk);
          DecodeTotals totals;
          ParallelStats stats;
          const std::string parallel = Decode(o.make, o.json, jobs, chunk, &totals, &stats);
          EXPECT_TRUE(parallel == serial)
              << "outputs differ (" << parallel.size() << " vs " << serial.size() << " bytes)";
          EXPECT_EQ(totals.instructions, serial_totals.instructions);
          EXPECT_EQ(totals.blocks, serial_totals.blocks);
          EXPECT_EQ(totals.events, serial_totals.events);
          EXPECT_EQ(totals.syncs, serial_totals.syncs);
          EXPECT_EQ(totals.errors, serial_totals.errors);
          EXPECT_EQ(totals.gaps, serial_totals.gaps);
          EXPECT_EQ(totals.errors_by_code, serial_totals.errors_by_code);
          EXPECT_EQ(totals.trace_bytes, serial_totals.trace_bytes);
          all.chunks += stats.chunks;
          all.stitched += stats.stitched;
          all.redecoded += stats.redecoded;
        }
      }
    }
    return all;
  }

  RawInputSpec spec_;
  std::unique_ptr<RawInput> input_;
  std::vector<std::unique_ptr<ProgramImage>> workers_;
  std::vector<uint8_t> trace_;
};

TEST_P(ParallelDecodeTest, ChunksStartAtPsbs) {
  const uint8_t kPsb[] = {0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
                          0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82};
  auto is_psb = [&](uint64_t o) {
    return o + sizeof(kPsb) <= trace_.size() && std::memcmp(&trace_[o], kPsb, sizeof(kPsb)) == 0;
  };
  // Chunks of 1 byte: every PSB starts one.
  auto starts = ChunkStarts(trace_, input_->config, 1);
  ASSERT_THAT(starts, IsOk());
  std::vector<uint64_t> psbs = {0};
  for (uint64_t o = 1; o < trace_.size(); ++o) {
    if (is_psb(o)) psbs.push_back(o);
  }
  ASSERT_GT(psbs.size(), 10u);
  EXPECT_EQ(*starts, psbs);
  // 4 KiB: the first PSB at or after 4 KiB past the last start.
  starts = ChunkStarts(trace_, input_->config, 4096);
  ASSERT_THAT(starts, IsOk());
  ASSERT_GT(starts->size(), 2u);
  for (size_t i = 1; i < starts->size(); ++i) {
    const uint64_t at = (*starts)[i];
    EXPECT_TRUE(is_psb(at)) << at;
    EXPECT_GE(at, (*starts)[i - 1] + 4096);
    for (uint64_t o = (*starts)[i - 1] + 4096; o < at; ++o) EXPECT_FALSE(is_psb(o)) << o;
  }
  auto big = ChunkStarts(trace_, input_->config, uint64_t{1} << 30);
  ASSERT_THAT(big, IsOk());
  EXPECT_EQ(big->size(), 1u);
}

// The search reads near every chunk start (and the kernel maps the pages around what is read):
// it tells how far it has read each time it passes a multiple of 4 MiB, so that the pages behind
// can be dropped (Sink::OnScanned).
TEST(ChunkStartsTest, TellsHowFarItRead) {
  const uint8_t kPsb[] = {0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
                          0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82};
  // A PSB every 64 KiB, PAD packets between: 9 MiB.
  std::vector<uint8_t> trace(uint64_t{9} << 20, 0x00);
  for (uint64_t o = 0; o + sizeof(kPsb) <= trace.size(); o += 64 << 10) {
    std::memcpy(&trace[o], kPsb, sizeof(kPsb));
    trace[o + sizeof(kPsb)] = 0x02;  // PSBEND
    trace[o + sizeof(kPsb) + 1] = 0x23;
  }
  std::vector<uint64_t> told;
  auto starts = ChunkStarts(trace, {}, 32 << 10, [&](uint64_t offset) { told.push_back(offset); });
  ASSERT_THAT(starts, IsOk());
  EXPECT_EQ(starts->size(), 144u);
  EXPECT_THAT(told, ::testing::ElementsAre(uint64_t{4} << 20, uint64_t{8} << 20));
}

// A summarising sink's chunks: the trace / (8 x threads), within 128 KiB and 4 MiB.
TEST(SummaryChunkBytesTest, AnEighthOfTheTracePerThreadWithinItsBounds) {
  EXPECT_EQ(SummaryChunkBytes(uint64_t{37} << 20, 2), (uint64_t{37} << 20) / 16);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{8} << 20, 1), uint64_t{1} << 20);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{8} << 20, 0), uint64_t{1} << 20);  // 0 threads: as 1
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 20, 2), kMinSummaryChunkBytes);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 30, 2), kMaxSummaryChunkBytes);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 30, 64), uint64_t{2} << 20);
}

// ... and at least 512 PSB periods: fewer chunks per thread where the trace is short for them.
TEST(SummaryChunkBytesTest, AtLeast512PsbPeriods) {
  // 2 KiB PSB periods: at least 1 MiB.
  EXPECT_EQ(SummaryChunkBytes(3'700'000, 2, 2048), 1'850'000u);  // a chunk per thread
  EXPECT_EQ(SummaryChunkBytes(uint64_t{5} << 20, 2, 2048), (uint64_t{5} << 20) / 4);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{37} << 20, 2, 2048), (uint64_t{37} << 20) / 16);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 20, 2, 2048), uint64_t{1} << 20);  // one chunk
  // 16 KiB periods: at least 8 MiB, over 4 MiB.
  EXPECT_EQ(SummaryChunkBytes(uint64_t{37} << 20, 2, 16384), (uint64_t{37} << 20) / 4);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 30, 2, 16384), uint64_t{16} << 20);
  EXPECT_EQ(SummaryChunkBytes(uint64_t{1} << 30, 2, 0), kMaxSummaryChunkBytes);
}

TEST_P(ParallelDecodeTest, OutputsEqualTheSerialDecode) {
  ParallelStats stats = ExpectSameAsSerial();
  // The chunks were stitched (not all decoded again on the merging thread).
  EXPECT_GT(stats.chunks, 20u);
  EXPECT_GT(stats.stitched, 0u) << stats.redecoded << " decoded again";
  std::printf("%s: %lu chunks, %lu stitched, %lu decoded again\n", GetParam(),
              static_cast<unsigned long>(stats.chunks), static_cast<unsigned long>(stats.stitched),
              static_cast<unsigned long>(stats.redecoded));
}

// A chunk whose recording passes its budget (RecordBudget; 4 KiB here, tens of MiB in ptdecode)
// stops, and the rest of the trace is decoded on the merging thread straight into the sink: the
// output is the serial decode's, byte for byte. Chunks were bounded by their trace bytes only:
// insn --decoder libipt -j2 held 5.4 GB for 1.7 MB of a loop's trace (sweep 39b F1).
TEST_P(ParallelDecodeTest, ARecordingPastItsBudgetLeavesTheRestToOneThread) {
  const ParallelOptions before = GetParallelOptions();
  ParallelOptions tight = before;
  tight.record_budget = 4096;
  SetParallelOptions(tight);
  for (auto [name, make] : {std::pair<const char*, SinkMaker>{"insn", MakeInsnSink},
                            {"branches", MakeBranchesSink},
                            {"timeline", MakeTimelineSink}}) {
    SCOPED_TRACE(name);
    const std::string serial = Decode(make, false, 0, 0);
    ParallelStats stats;
    const std::string parallel = Decode(make, false, 2, 1, nullptr, &stats);
    EXPECT_TRUE(parallel == serial)
        << "outputs differ (" << parallel.size() << " vs " << serial.size() << " bytes)";
    EXPECT_EQ(stats.overflowed, 1u);
  }
  SetParallelOptions(before);
  EXPECT_EQ(RecordBudget(1), uint64_t{128} << 20);
  EXPECT_EQ(RecordBudget(1000), uint64_t{16} << 20);
}

// calls summarises chunks (its lines' tails written on the workers, their instruction counts and
// depths by the merge, with the lines of the frames below a chunk's start that its returns pop):
// most chunks are summaries, and the lines are the serial decode's, text and JSON. Past the
// budget of a chunk's records (a trace byte may stand for any number of calls), a chunk's
// summary fails, and its lines are the serial decode's all the same.
TEST_P(ParallelDecodeTest, CallsLinesAreSummarisedByChunk) {
  const ParallelOptions before = GetParallelOptions();
  for (const bool json : {false, true}) {
    SCOPED_TRACE(json ? "--json" : "text");
    const std::string serial = Decode(MakeCallsSink, json, 0, 0);
    ParallelStats stats, stats_stats;
    EXPECT_TRUE(Decode(MakeCallsSink, json, 2, 1, nullptr, &stats) == serial);
    // As many as stats summarises (the same call-stack model; Unzip's chunks hold code it does
    // not model, foo's 12 of 15 apply).
    Decode(MakeStatsSink, false, 2, 1, nullptr, &stats_stats);
    EXPECT_EQ(stats.summarised, stats_stats.summarised);
    if (std::string(GetParam()) == "foo") {
      EXPECT_GT(stats.summarised, stats.chunks / 2);
    }
    ParallelOptions tight = before;
    tight.record_budget = 1;
    SetParallelOptions(tight);
    ParallelStats failed;
    EXPECT_TRUE(Decode(MakeCallsSink, json, 2, 1, nullptr, &failed) == serial);
    EXPECT_EQ(failed.summarised, 0u);
    if (stats.summarised > 0) {
      EXPECT_GT(failed.unsummarised, 0u);
    }
    SetParallelOptions(before);
  }
}

// Damage in the middle of the trace: decode errors and resyncs, some at chunk edges.
TEST_P(ParallelDecodeTest, ErrorsAtChunkEdgesAreTheSerialDecodesErrors) {
  auto starts = ChunkStarts(trace_, input_->config, 700);
  ASSERT_THAT(starts, IsOk());
  ASSERT_GT(starts->size(), 4u);
  // Just before a chunk start, on one, and inside chunks.
  for (size_t i : {size_t{1}, starts->size() / 2}) {
    const uint64_t at = (*starts)[i];
    for (uint64_t o : {at - 3, at - 1, at + 20}) trace_[o] ^= 0x5a;
  }
  for (uint64_t o = trace_.size() / 3; o < trace_.size() / 3 + 8; ++o) trace_[o] = 0xff;
  DecodeTotals totals;
  Decode(MakeInsnSink, false, 0, 0, &totals);
  EXPECT_GT(totals.errors, 0u);
  ExpectSameAsSerial();
}

// Software PT of a real ELF program (tests/data/decoder/tiny.c), one PSB segment per walk:
// code in file sections, which libipt's block decoder walks through its block cache.
class SynthParallelTest : public ::testing::Test {
 protected:
  static constexpr char kTiny[] = PTKIT_DECODER_TEST_BINARY_DIR "/tiny.elf";
  void SetUp() override { trace_ = Walks(60); }
  // `n` walks, a PSB segment each; after walk `ptw_after` (1-based; 0: none) a PTWRITE packet.
  static std::vector<uint8_t> Walks(uint32_t n, uint32_t ptw_after = 0) {
    auto code = testing::ElfCode::Load(kTiny);
    EXPECT_THAT(code, IsOk());
    if (!code.ok()) return {};
    testing::PtSynth synth(*code);
    for (uint32_t seed = 1; seed <= n; ++seed) {
      EXPECT_THAT(synth.AddSegment({.entry = code->Symbol(seed % 2 ? "work" : "fib").address,
                                    .seed = seed,
                                    .max_insns = 3000,
                                    .tsc = 1000 * seed}),
                  IsOk());
      if (seed == ptw_after) {
        pt_packet ptw{};
        ptw.type = ppt_ptw;
        ptw.payload.ptw.plc = 0;
        ptw.payload.ptw.payload = 0x1234;
        synth.AddPacket(ptw);
      }
    }
    return synth.bytes();
  }
  std::unique_ptr<ProgramImage> Image() {
    auto image = ProgramImage::Create();
    EXPECT_THAT(image, IsOk());
    EXPECT_THAT((*image)->AddElf({kTiny, 0}), IsOk());
    return std::move(*image);
  }
  std::vector<uint8_t> trace_;
};

// PsbSpacing: the mean distance of the first 17 PSBs, as a search for their bytes finds them.
TEST_F(SynthParallelTest, PsbSpacingOfTheFirstPsbs) {
  const std::vector<uint8_t> psb = {0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
                                    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82};
  std::vector<uint64_t> at;
  for (auto it = trace_.begin();
       (it = std::search(it, trace_.end(), psb.begin(), psb.end())) != trace_.end(); ++it) {
    at.push_back(it - trace_.begin());
  }
  ASSERT_GT(at.size(), 17u);
  EXPECT_EQ(PsbSpacing(trace_, {}), (at[16] - at[0]) / 16);
  EXPECT_EQ(PsbSpacing(std::span(trace_).first(at[1]), {}), 0u);  // one PSB
}

// libipt's blocks depend on its block cache (which lives with the image's section cache): a
// second decode with the same image gives other blocks. Joined (CanonicalBlocks), they are the
// same blocks whatever was decoded before, and the block sinks' outputs the same bytes.
TEST_F(SynthParallelTest, CanonicalBlocksDoNotDependOnTheBlockCache) {
  auto image = Image();
  auto blocks = [&](bool canonical) {
    CountSink count;
    DecodeTotals totals;
    EXPECT_THAT(canonical ? DecodeIntoCanonical(trace_, {}, *image, count, totals)
                          : DecodeInto(trace_, {}, *image, count, totals),
                IsOk());
    EXPECT_EQ(totals.blocks, count.blocks());
    return std::pair(count.blocks(), count.instructions());
  };
  const auto cold = blocks(false);
  const auto warm = blocks(false);
  EXPECT_EQ(cold.second, warm.second);
  EXPECT_NE(cold.first, warm.first) << "the block cache changed no block";
  const auto canonical = blocks(true);
  EXPECT_EQ(canonical, blocks(true));
  EXPECT_EQ(canonical.second, cold.second);
  EXPECT_LE(canonical.first, std::min(cold.first, warm.first));
  image = Image();
  EXPECT_EQ(blocks(true), canonical);  // a cold cache again
}

// Every block sink, serial against 1, 2 and 4 threads in chunks of one PSB each.
TEST_F(SynthParallelTest, BlockOutputsEqualTheSerialDecode) {
  std::vector<std::unique_ptr<ProgramImage>> workers;
  workers.reserve(4);
  for (int i = 0; i < 4; ++i) workers.push_back(Image());
  auto serial_image = Image();
  const std::pair<SinkMaker, bool> outputs[] = {
      {MakeStatsSink, false},  {MakeStatsSink, true},
      {MakeCallsSink, false},  {MakeCallsSink, true},  // ticks in JSON
      {MakeFoldedSink, false}, {MakeTimelineSink, false}};
  uint64_t stitched = 0;
  for (const auto& [make, json] : outputs) {
    // Copies: clang 14 (the fuzz preset's) cannot capture a structured binding.
    auto run = [&, make = make, json = json](size_t jobs, DecodeTotals& totals,
                                             ParallelStats* stats) {
      std::FILE* out = std::tmpfile();
      EXPECT_NE(out, nullptr);
      OutputOptions options;
      options.json = json;
      // The serial decode's image has decoded it before: a warm block cache.
      std::unique_ptr<Sink> sink = make(*serial_image, out, options);
      if (jobs == 0) {
        EXPECT_THAT(DecodeIntoCanonical(trace_, {}, *serial_image, *sink, totals), IsOk());
      } else {
        std::vector<const ProgramImage*> images;
        for (size_t i = 0; i < jobs; ++i) images.push_back(workers[i].get());
        EXPECT_THAT(DecodeInParallel(trace_, {}, *serial_image, images, *sink, totals, 0, 1, stats),
                    IsOk());
      }
      EXPECT_THAT(sink->Finish(totals), IsOk());
      return ReadAll(out);
    };
    DecodeTotals serial_totals;
    const std::string serial = run(0, serial_totals, nullptr);
    EXPECT_GT(serial.size(), 200u);
    for (size_t jobs : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << "-j" << jobs << (json ? " --json" : ""));
      DecodeTotals totals;
      ParallelStats stats;
      EXPECT_EQ(run(jobs, totals, &stats), serial);
      EXPECT_EQ(totals.blocks, serial_totals.blocks);
      EXPECT_EQ(totals.instructions, serial_totals.instructions);
      EXPECT_GT(stats.chunks, 50u);
      stitched += stats.stitched;
    }
  }
  EXPECT_GT(stitched, 0u);
}

// A chunk's summary is made from the walk's whole blocks (FastBlockDecoder::SetWalk) as the
// sink on one thread is, not from libipt's blocks joined: as many blocks walked with 2 threads
// as with one (the chunks' heads and tails are walked too, and recorded; a walk of each segment
// ends with an empty stack, so that most chunks' summaries do not apply here).
TEST_F(SynthParallelTest, SummariesAreMadeFromWalkedBlocks) {
  auto serial_image = Image();
  std::vector<std::unique_ptr<ProgramImage>> workers;
  workers.push_back(Image());
  workers.push_back(Image());
  const std::vector<const ProgramImage*> images = {workers[0].get(), workers[1].get()};
  auto walked = [&](size_t jobs, ParallelStats* stats) {
    std::FILE* out = std::tmpfile();
    EXPECT_NE(out, nullptr);
    std::unique_ptr<Sink> sink = MakeStatsSink(*serial_image, out, OutputOptions{});
    DecodeTotals totals;
    const uint64_t before = FastBlockDecoder::WalkedBlocks();
    EXPECT_THAT(
        jobs == 1 ? DecodeIntoCanonical(trace_, {}, *serial_image, *sink, totals)
                  : DecodeInParallel(trace_, {}, *serial_image, images, *sink, totals, 0, 1, stats),
        IsOk());
    EXPECT_THAT(sink->Finish(totals), IsOk());
    EXPECT_EQ(std::fclose(out), 0);
    return FastBlockDecoder::WalkedBlocks() - before;
  };
  const uint64_t one = walked(1, nullptr);
  EXPECT_GT(one, 1000u);
  ParallelStats stats;
  EXPECT_GE(walked(2, &stats), one);
  EXPECT_GT(stats.summarised, 0u);
}

// A sink that wants positions is told them before each block while they are past its
// position_limit(), and only then (the limit is asked again after each block told): what
// SummaryTap needs in a chunk's body is where the chunk ends. (Events are told theirs always;
// CanonicalBlocks tells those of the blocks it held and joined.)
TEST_F(SynthParallelTest, PositionsAreToldPastTheSinksLimit) {
  class PositionSink : public Sink {
   public:
    explicit PositionSink(uint64_t limit) : limit_(limit) {}
    bool wants_positions() const override { return true; }
    uint64_t position_limit() const override { return limit_; }
    void OnPosition(uint64_t offset) override {
      ++told_;
      if (offset <= limit_) ++told_within_;
    }
    uint64_t told() const { return told_; }
    uint64_t told_within() const { return told_within_; }

   private:
    uint64_t limit_;
    uint64_t told_ = 0, told_within_ = 0;
  };
  auto image = Image();
  auto decode = [&](uint64_t limit, DecodeTotals& totals) {
    PositionSink sink(limit);
    EXPECT_THAT(DecodeInto(trace_, {}, *image, sink, totals), IsOk());
    return std::pair(sink.told(), sink.told_within());
  };
  DecodeTotals all_totals;
  const auto all = decode(0, all_totals);
  EXPECT_EQ(all.first, all_totals.blocks + all_totals.events);
  DecodeTotals half_totals;
  const uint64_t half = trace_.size() / 2;
  const auto some = decode(half, half_totals);
  EXPECT_EQ(half_totals.instructions, all_totals.instructions);
  EXPECT_LE(some.second, half_totals.events);  // within the limit: events only
  EXPECT_LT(some.first, all.first * 2 / 3);
  EXPECT_GT(some.first, all.first / 3);
}

// A sink whose position_limit says kStopDecoding ends the decode there, as the trace's end would
// (SummaryTap past its chunk's tail): no error, no more blocks than the run it was in.
TEST_F(SynthParallelTest, ASinkCanStopTheDecode) {
  class Stopping : public CountSink {
   public:
    bool wants_positions() const override { return true; }
    uint64_t position_limit() const override { return blocks() >= 100 ? kStopDecoding : 0; }
  };
  auto image = Image();
  CountSink all;
  DecodeTotals all_totals;
  ASSERT_THAT(DecodeInto(trace_, {}, *image, all, all_totals), IsOk());
  Stopping stopping;
  DecodeTotals totals;
  ASSERT_THAT(DecodeInto(trace_, {}, *image, stopping, totals), IsOk());
  EXPECT_GE(stopping.blocks(), 100u);
  EXPECT_LT(stopping.blocks(), 200u);
  EXPECT_GT(all.blocks(), 10 * stopping.blocks());
  EXPECT_EQ(totals.errors, 0u);
}

// Summaries that fail on their workers (what a chunk held is not modelled) are not recorded
// there: each is decoded again by the merging thread, and after four in a row the rest of the
// trace is decoded there, once. The sink sees what one thread gives it.
TEST_F(SynthParallelTest, SummariesThatFailOnWorkersLeaveTheRestToOneThread) {
  class FailingSummaries : public CountSink {
   public:
    std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
      class Failing : public ChunkSummary {
       public:
        Sink& sink() override { return sink_; }
        void BeginSummary() override {}
        bool failed() const override { return true; }
        bool ApplyTo() override { return false; }

       private:
        CountSink sink_;
      };
      return std::make_unique<Failing>();
    }
  };
  auto image = Image();
  std::vector<std::unique_ptr<ProgramImage>> workers;
  workers.push_back(Image());
  workers.push_back(Image());
  const std::vector<const ProgramImage*> images = {workers[0].get(), workers[1].get()};
  CountSink serial;
  DecodeTotals serial_totals;
  ASSERT_THAT(DecodeIntoCanonical(trace_, {}, *image, serial, serial_totals), IsOk());
  FailingSummaries sink;
  DecodeTotals totals;
  ParallelStats stats;
  ASSERT_THAT(DecodeInParallel(trace_, {}, *image, images, sink, totals, 0, 1, &stats), IsOk());
  EXPECT_EQ(sink.instructions(), serial.instructions());
  EXPECT_EQ(sink.blocks(), serial.blocks());
  EXPECT_EQ(totals.instructions, serial_totals.instructions);
  EXPECT_EQ(totals.blocks, serial_totals.blocks);
  EXPECT_GT(stats.chunks, 50u);
  EXPECT_EQ(stats.summarised, 0u);
  EXPECT_EQ(stats.unsummarised, 4u);
  // Boundaries neither stitched nor decoded again: those of the rest, decoded on one thread.
  EXPECT_LT(stats.stitched + stats.redecoded + 10, stats.chunks)
      << stats.stitched << " stitched, " << stats.redecoded << " decoded again";
}

// A trace with a packet the fast decoder does not model (a PTWRITE between two walks) goes to
// libipt whole on one thread, unless the sink summarises chunks: then it is decoded chunk by
// chunk on the calling thread (DecodeInChunksAlone), libipt taking only the chunk that holds the
// packet, and the output is the serial decode's, byte for byte.
TEST_F(SynthParallelTest, OneThreadGivesLibiptOnlyTheChunkItNeeds) {
  const std::vector<uint8_t> trace = Walks(40, 20);
  auto pt = MakePtConfig(trace, {});
  ASSERT_THAT(pt, IsOk());
  ASSERT_FALSE(FastPathCovers(*pt).blocks);
  ASSERT_GT(trace.size(), 2000u);
  const uint64_t chunk = 1;  // a chunk per walk
  SetParallelOptions({.summary_chunk_bytes = chunk});
  auto image = Image();
  for (const SinkMaker& make :
       {SinkMaker(MakeStatsSink), SinkMaker(MakeFoldedSink), SinkMaker(MakeCallsSink)}) {
    // Serial: libipt decodes it all. Alone: chunk by chunk, each checked by FastPathCovers.
    auto run = [&](bool alone, uint64_t* walked, ParallelStats* stats) {
      std::FILE* out = std::tmpfile();
      EXPECT_NE(out, nullptr);
      std::unique_ptr<Sink> sink = make(*image, out, OutputOptions{});
      DecodeTotals totals;
      const uint64_t before = FastBlockDecoder::WalkedBlocks();
      if (alone) {
        EXPECT_EQ(PlanOneThread(trace, {}, *sink, *image).chunk_bytes, chunk);
        EXPECT_THAT(DecodeInChunksAlone(trace, {}, *image, *sink, totals, 0, chunk, stats), IsOk());
      } else {
        EXPECT_THAT(DecodeIntoCanonical(trace, {}, *image, *sink, totals), IsOk());
      }
      *walked = FastBlockDecoder::WalkedBlocks() - before;
      EXPECT_THAT(sink->Finish(totals), IsOk());
      return ReadAll(out);
    };
    uint64_t serial_walked = 0, alone_walked = 0;
    ParallelStats stats;
    const std::string serial = run(false, &serial_walked, nullptr);
    EXPECT_GT(serial.size(), 200u);
    EXPECT_EQ(run(true, &alone_walked, &stats), serial);
    EXPECT_EQ(serial_walked, 0u);
    EXPECT_GT(alone_walked, 1000u);  // the fast decoder took the other chunks
    EXPECT_EQ(stats.chunks, 40u);
    EXPECT_GT(stats.stitched, 0u);
    EXPECT_GT(stats.summarised, 0u);
  }
  // Not for a trace the fast decoder models all of, a sink that does not summarise, libipt.
  std::unique_ptr<Sink> stats_sink = MakeStatsSink(*image, stdout, OutputOptions{});
  std::unique_ptr<Sink> timeline_sink = MakeTimelineSink(*image, stdout, OutputOptions{});
  const OneThread covered = PlanOneThread(trace_, {}, *stats_sink, *image);
  EXPECT_EQ(covered.chunk_bytes, 0u);
  ASSERT_TRUE(covered.coverage.has_value());  // for DecodeInto, which need not read it again
  EXPECT_TRUE(covered.coverage->blocks);
  EXPECT_EQ(PlanOneThread(trace, {}, *timeline_sink, *image).chunk_bytes, 0u);
  SetBlockDecoderImpl(BlockDecoderImpl::kLibipt);
  EXPECT_EQ(PlanOneThread(trace, {}, *stats_sink, *image).chunk_bytes, 0u);
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  SetParallelOptions({});
}

INSTANTIATE_TEST_SUITE_P(Libxdc, ParallelDecodeTest, ::testing::Values("Unzip", "foo"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ptkit::decoder
