// AUX sampling: the sample record layout (against <linux/perf_event.h>'s field order), the
// simulated PMU's samples (the kernel's AUX part: the newest bytes ending at the hardware's
// position, capped and padded as perf_prepare_sample() does) and the drain, which stores each
// PERF_RECORD_SAMPLE as its own container record with exact sizes and counts.
#include "record/aux_sample.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/aux_sample.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "ptkit/status.h"
#include "record/drain.h"
#include "record/metadata.h"
#include "record/sim_pmu.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;

uint8_t TraceByte(uint64_t off) {
  uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 17)) | 1;  // never 0: zeros mean "never written"
}

std::vector<uint8_t> TraceBytes(uint64_t from, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = TraceByte(from + i);
  return v;
}

// What a sample taken when `written` bytes of trace went into a ring of `ring` bytes must
// carry, computed from the stream, not from the ring: the last `size` bytes of the stream
// that the ring still holds, zeros for positions never written, zero padding to 8.
std::vector<uint8_t> Expected(uint64_t written, uint64_t ring, uint64_t size) {
  const uint64_t n = std::min(size & ~uint64_t{7}, ring);
  std::vector<uint8_t> v;
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t pos =
        static_cast<int64_t>(written) - static_cast<int64_t>(n) + static_cast<int64_t>(i);
    // A position before 0 is the ring's slot pos + ring, written once `written` reaches it.
    const int64_t slot_pos = pos >= 0 ? pos : pos + static_cast<int64_t>(ring);
    v.push_back(pos >= 0 || static_cast<uint64_t>(slot_pos) < written ? TraceByte(slot_pos) : 0);
  }
  return v;
}

TEST(AuxSampleRecordTest, LayoutIsTheKernelsFieldOrder) {
  const uint8_t aux[5] = {1, 2, 3, 4, 5};
  perf::Sample s{.id = 7, .ip = 0x401000, .pid = 10, .tid = 11, .time = 99, .cpu = 3};
  s.callchain = {0x1, 0x2};
  s.aux = aux;
  const uint64_t type = kAuxSampleType | PERF_SAMPLE_CALLCHAIN;
  std::vector<uint8_t> rec = perf::EncodeSample(s, type);
  // header, id, ip, pid/tid, time, cpu/res, nr, 2 ips, size, 8 padded AUX bytes.
  ASSERT_EQ(rec.size(), 8u + 8 + 8 + 8 + 8 + 8 + 8 + 16 + 8 + 8);
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, rec.data() + at, 8);
    return v;
  };
  EXPECT_EQ(u64(8), 7u);
  EXPECT_EQ(u64(16), 0x401000u);
  EXPECT_EQ(u64(24), (uint64_t{11} << 32) | 10);
  EXPECT_EQ(u64(32), 99u);
  EXPECT_EQ(u64(40), 3u);
  EXPECT_EQ(u64(48), 2u);
  EXPECT_EQ(u64(72), 8u);  // the padded size, as perf_prepare_sample_aux()
  EXPECT_EQ(u64(80), 0x0000000504030201u);

  PTKIT_ASSERT_OK_AND_ASSIGN(perf::RecordView view, perf::ReadRecord(rec));
  PTKIT_ASSERT_OK_AND_ASSIGN(perf::Sample back, perf::ParseSample(view, type));
  EXPECT_EQ(back.id, 7u);
  EXPECT_EQ(back.ip, 0x401000u);
  EXPECT_EQ(back.tid, 11u);
  EXPECT_EQ(back.cpu, 3u);
  EXPECT_THAT(back.callchain, ::testing::ElementsAre(1, 2));
  EXPECT_THAT(back.aux, ::testing::ElementsAre(1, 2, 3, 4, 5, 0, 0, 0));

  // A record cut inside its AUX data, or written with bits ptkit does not read.
  std::vector<uint8_t> cut(rec.begin(), rec.end() - 8);
  const uint16_t size = static_cast<uint16_t>(cut.size());
  std::memcpy(cut.data() + 6, &size, 2);
  PTKIT_ASSERT_OK_AND_ASSIGN(perf::RecordView short_view, perf::ReadRecord(cut));
  EXPECT_THAT(perf::ParseSample(short_view, type), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(perf::ParseSample(view, type | PERF_SAMPLE_RAW),
              StatusIs(absl::StatusCode::kUnimplemented));
}

TEST(AuxSampleRecordTest, ContainerSampleRecordRoundTripsAndRejectsOtherRecords) {
  const std::vector<uint8_t> rec =
      perf::EncodeSample(perf::Sample{.ip = 1, .pid = 2, .tid = 3}, kEmulatedAuxSampleType);
  const std::vector<uint8_t> payload = EncodeSample(SampleRecord{
      .stream = {StreamKind::kThread, 3}, .sample_type = kEmulatedAuxSampleType, .record = rec});
  PTKIT_ASSERT_OK_AND_ASSIGN(SampleRecord back, ParseSample(payload));
  EXPECT_EQ(back.stream, (StreamId{StreamKind::kThread, 3}));
  EXPECT_EQ(back.sample_type, kEmulatedAuxSampleType);
  EXPECT_TRUE(std::equal(back.record.begin(), back.record.end(), rec.begin(), rec.end()));
  std::vector<uint8_t> extra = payload;
  extra.push_back(0);
  EXPECT_THAT(ParseSample(extra), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ParseSample(std::span(payload).first(20)), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(AuxSampleOptionsTest, SizeLimitsAreSaid) {
  EXPECT_THAT(CheckAuxSampleSize(4096, 0), IsOk());
  EXPECT_THAT(CheckAuxSampleSize(61440, 1 << 20), IsOk());
  for (uint64_t bad : {uint64_t{0}, uint64_t{4}, uint64_t{4097}, uint64_t{61448}}) {
    absl::Status s = CheckAuxSampleSize(bad, 0);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(s.message(), ::testing::HasSubstr("from 8 to 61440 bytes")) << bad;
  }
  EXPECT_THAT(CheckAuxSampleSize(8192, 4096).message(),
              ::testing::HasSubstr("larger than the AUX area (4096 bytes)"));
}

TEST(AuxSampleOptionsTest, ShortPsbPeriodUnlessTheUserSetsOne) {
  EventSpec spec{.pmu = "intel_pt"};
  EXPECT_THAT(AddAuxSampleTerms(spec), ::testing::HasSubstr("psb_period=0"));
  EXPECT_THAT(spec.terms, ::testing::ElementsAre(EventTerm{"psb_period", 0}));
  EventSpec own{.pmu = "intel_pt", .terms = {{"psb_period", 3}}};
  EXPECT_EQ(AddAuxSampleTerms(own), "");
  EXPECT_THAT(own.terms, ::testing::ElementsAre(EventTerm{"psb_period", 3}));
}

TEST(AuxSampleOptionsTest, SamplingAttrFollowsItsLeader) {
  perf_event_attr counter{};
  counter.type = PERF_TYPE_HARDWARE;
  counter.config = PERF_COUNT_HW_CPU_CYCLES;
  counter.disabled = 1;
  counter.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED;
  const perf_event_attr a = BuildAuxSampleAttr(counter, 100000, 4096, true);
  EXPECT_EQ(a.type, static_cast<uint32_t>(PERF_TYPE_HARDWARE));
  EXPECT_EQ(a.sample_period, 100000u);
  EXPECT_EQ(a.sample_type, kAuxSampleType);
  EXPECT_EQ(a.aux_sample_size, 4096u);
  EXPECT_EQ(a.disabled, 0u);
  EXPECT_EQ(a.read_format, 0u);
  EXPECT_EQ(a.inherit, 1u);
  EXPECT_EQ(a.sample_id_all, 1u);
  // -g: the kernel's call chain too.
  EXPECT_EQ(BuildAuxSampleAttr(counter, 100000, 4096, true, /*callchain=*/true).sample_type,
            kAuxSampleType | PERF_SAMPLE_CALLCHAIN);
}

// The metadata keeps the sampling members of the attr (export writes them for perf).
TEST(AuxSampleOptionsTest, TheMetadataKeepsThePeriodAndTheSampleSize) {
  perf_event_attr counter{};
  counter.type = PERF_TYPE_HARDWARE;
  counter.config = PERF_COUNT_HW_CPU_CYCLES;
  MetadataInput in;
  in.attrs = {{"aux-sample", BuildAuxSampleAttr(counter, 123457, 2048, true)},
              {"emulated", EmulatedAuxSampleAttr(500, 1024, false)}};
  const nlohmann::json attrs = BuildMetadata(in)["attrs"];
  ASSERT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs[0]["sample_period"], 123457);
  EXPECT_EQ(attrs[0]["freq"], false);
  EXPECT_EQ(attrs[0]["aux_sample_size"], 2048);
  EXPECT_EQ(attrs[0]["wakeup_events"], 1);
  EXPECT_EQ(attrs[0]["sample_type"], kAuxSampleType);
  EXPECT_EQ(attrs[1]["config"], PERF_COUNT_HW_INSTRUCTIONS);
  EXPECT_EQ(attrs[1]["exclude_kernel"], true);
  EXPECT_EQ(attrs[1]["sample_period"], 500);
  EXPECT_EQ(attrs[1]["aux_sample_size"], 1024);
  EXPECT_EQ(attrs[1]["sample_type"], kEmulatedAuxSampleType);
}

class AuxSampleDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriterOptions wo;
    wo.compress = false;
    PTKIT_ASSERT_OK_AND_ASSIGN(writer_, ContainerWriter::Create(dir_.File("trace.pt"), wo));
  }
  ::ptkit::testing::TempDir dir_;
  std::unique_ptr<ContainerWriter> writer_;
};

// Samples of every size class at random points of a trace that wraps the overwritten AUX ring
// many times: every one reaches the container once, as its own record, with exactly the
// bytes the stream says; the sideband holds no sample.
TEST_F(AuxSampleDrainTest, EverySampleArrivesWithTheNewestTraceBytes) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim, SimulatedPmu::Create({.data_pages = 32, .aux_pages = 4, .overwrite = true}));
  const uint64_t ring = sim->ring().aux.size();  // 16 KiB
  Drainer drainer(writer_.get(), DrainOptions{.sample_type = kAuxSampleType});
  std::mt19937_64 rng(7);
  struct Taken {
    uint64_t ip, written, size;
  };
  std::vector<Taken> taken;
  uint64_t written = 0;
  // Sizes below the ring, equal, above it (capped to it), not a multiple of 8 (rounded
  // down), above what a 64 KiB record holds.
  const uint64_t sizes[] = {8, 100, 4096, ring, ring + 8, 65535, 70000};
  for (int i = 0; i < 400; ++i) {
    const uint64_t chunk = i == 0 ? 3 : rng() % (ring * 2);  // the first sample: ring unfilled
    ASSERT_EQ(sim->WriteTrace(TraceBytes(written, chunk)), chunk);
    written += chunk;
    const uint64_t size = sizes[rng() % std::size(sizes)];
    const perf::Sample s{
        .id = 5, .ip = 0x400000u + i, .pid = 9, .tid = 9, .time = 1000u + i, .cpu = 0};
    ASSERT_EQ(sim->WriteSample(s, kAuxSampleType, size), std::min(size & ~uint64_t{7}, ring));
    taken.push_back({s.ip, written, size});
    if (rng() % 3 == 0) {
      ASSERT_TRUE(sim->WriteRecord(
          perf::EncodeComm(perf::Comm{.pid = 9, .tid = 9, .comm = "w"}, sim->layout())));
    }
    // Now and then, and before the data ring could overflow (no record may be lost here).
    const perf_event_mmap_page* page = sim->ring().page;
    if (rng() % 4 == 0 || page->data_head - page->data_tail > sim->ring().data.size() / 2) {
      ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
    }
  }
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  ASSERT_THAT(writer_->Close(), IsOk());

  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(dir_.File("trace.pt")));
  RecordView rec;
  size_t n = 0;
  uint64_t aux_bytes = 0;
  for (;;) {
    PTKIT_ASSERT_OK_AND_ASSIGN(bool more, reader.Next(rec));
    if (!more) break;
    if (rec.type == RecordType::kSideband) {
      PTKIT_ASSERT_OK_AND_ASSIGN(SidebandRecord sb, ParseSideband(rec.payload));
      for (perf::RecordReader r(sb.records);;) {
        PTKIT_ASSERT_OK_AND_ASSIGN(std::optional<perf::RecordView> v, r.Next());
        if (!v) break;
        EXPECT_NE(v->type, static_cast<uint32_t>(PERF_RECORD_SAMPLE));
      }
    }
    if (rec.type != RecordType::kSample) continue;
    PTKIT_ASSERT_OK_AND_ASSIGN(SampleRecord sr, ParseSample(rec.payload));
    ASSERT_LT(n, taken.size());
    EXPECT_EQ(sr.sample_type, kAuxSampleType);
    EXPECT_EQ(sr.stream, sim->stream());
    PTKIT_ASSERT_OK_AND_ASSIGN(perf::RecordView view, perf::ReadRecord(sr.record));
    PTKIT_ASSERT_OK_AND_ASSIGN(perf::Sample s, perf::ParseSample(view, sr.sample_type));
    const Taken& t = taken[n];
    EXPECT_EQ(s.ip, t.ip);
    const std::vector<uint8_t> want = Expected(t.written, ring, t.size);
    ASSERT_EQ(s.aux.size(), want.size()) << "sample " << n << " size " << t.size;
    EXPECT_TRUE(std::equal(s.aux.begin(), s.aux.end(), want.begin())) << "sample " << n;
    aux_bytes += s.aux.size();
    ++n;
  }
  EXPECT_TRUE(reader.report().clean());
  EXPECT_EQ(n, taken.size());
  EXPECT_EQ(drainer.Totals().samples, taken.size());
  EXPECT_EQ(drainer.Totals().sample_aux_bytes, aux_bytes);
  EXPECT_EQ(sim->stats().samples, taken.size());
  EXPECT_EQ(sim->stats().sample_aux_bytes, aux_bytes);
  EXPECT_EQ(sim->stats().records_lost, 0u);
}

}  // namespace
}  // namespace ptkit::record
