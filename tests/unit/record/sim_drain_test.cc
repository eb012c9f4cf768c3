// The drain against the simulated PMU: byte-for-byte integrity over thousands of wraps,
// exact truncation accounting, snapshots at every head position, a concurrent producer.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/sim_pmu.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;

// The trace byte at AUX stream offset `off`: a hash of the full 64-bit offset, so a copy from
// the wrong lap or position cannot match by accident.
uint8_t StreamByte(uint64_t off) {
  uint64_t x = off * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 17));
}

std::vector<uint8_t> StreamBytes(uint64_t from, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = StreamByte(from + i);
  return v;
}

// Everything a container holds, decoded.
struct Contents {
  std::vector<AuxRecord> aux;
  std::vector<std::vector<uint8_t>> aux_data;
  std::vector<LossRecord> loss;
  std::vector<SnapshotRecord> snapshots;
  std::vector<std::vector<uint8_t>> snapshot_data;
  std::vector<uint8_t> sideband;  // all sideband records concatenated
  std::vector<std::vector<uint8_t>> sideband_batches;
  bool clean = false;
};

Contents ReadBack(const std::string& path) {
  Contents c;
  absl::StatusOr<ContainerReader> reader = ContainerReader::Open(path);
  EXPECT_THAT(reader, IsOk());
  if (!reader.ok()) return c;
  RecordView rec;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(rec);
    EXPECT_THAT(more, IsOk());
    if (!more.ok() || !*more) break;
    switch (rec.type) {
      case RecordType::kAux: {
        absl::StatusOr<AuxRecord> a = ParseAux(rec.payload);
        EXPECT_THAT(a, IsOk());
        c.aux_data.emplace_back(a->data.begin(), a->data.end());
        c.aux.push_back(*a);
        break;
      }
      case RecordType::kLoss:
        c.loss.push_back(*ParseLoss(rec.payload));
        break;
      case RecordType::kSnapshot: {
        absl::StatusOr<SnapshotRecord> s = ParseSnapshot(rec.payload);
        EXPECT_THAT(s, IsOk());
        c.snapshot_data.emplace_back(s->data.begin(), s->data.end());
        c.snapshots.push_back(*s);
        break;
      }
      case RecordType::kSideband: {
        absl::StatusOr<SidebandRecord> s = ParseSideband(rec.payload);
        EXPECT_THAT(s, IsOk());
        c.sideband.insert(c.sideband.end(), s->records.begin(), s->records.end());
        c.sideband_batches.emplace_back(s->records.begin(), s->records.end());
        break;
      }
      default:
        break;
    }
  }
  c.clean = reader->report().clean();
  return c;
}

// Checks that the AUX records tile [0, end) in order and hold StreamByte(offset) everywhere.
void ExpectAuxStream(const Contents& c, uint64_t end) {
  uint64_t next = 0;
  for (size_t i = 0; i < c.aux.size(); ++i) {
    ASSERT_EQ(c.aux[i].aux_offset, next) << "record " << i;
    const std::vector<uint8_t>& d = c.aux_data[i];
    for (size_t k = 0; k < d.size(); ++k) {
      ASSERT_EQ(d[k], StreamByte(next + k)) << "record " << i << " byte " << k;
    }
    next += d.size();
  }
  EXPECT_EQ(next, end);
}

size_t CountLoss(const Contents& c, LossKind kind) {
  size_t n = 0;
  for (const LossRecord& l : c.loss) n += l.kind == kind;
  return n;
}

class SimDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriterOptions wo;
    wo.compress = false;
    PTKIT_ASSERT_OK_AND_ASSIGN(writer_, ContainerWriter::Create(dir_.File("trace.pt"), wo));
  }
  Contents Finish() {
    EXPECT_THAT(writer_->Close(), IsOk());
    return ReadBack(dir_.File("trace.pt"));
  }
  ::ptkit::testing::TempDir dir_;
  std::unique_ptr<ContainerWriter> writer_;
};

TEST_F(SimDrainTest, FullTraceIntegrityOverThousandsOfWraps) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 2, .aux_pages = 4}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();  // 16 KiB
  std::mt19937_64 rng(1);
  uint64_t pos = 0;
  std::vector<std::string> comms;
  while (pos < ring * 3000) {
    // Never overrun: drain when the next chunk might not fit.
    const uint64_t chunk = 1 + rng() % (ring / 2 - 1);
    if (ring - (pos - sim->ring().page->aux_tail) < chunk) {
      ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
    }
    ASSERT_EQ(sim->WriteTrace(StreamBytes(pos, chunk)), chunk);
    pos += chunk;
    if (rng() % 8 == 0) {
      // Sideband of varying length so records wrap the data ring end at every alignment.
      std::string comm(rng() % 15, 'a' + comms.size() % 26);
      ASSERT_TRUE(sim->WriteRecord(
          perf::EncodeComm(perf::Comm{.pid = 1, .tid = 2, .comm = comm}, sim->layout())));
      comms.push_back(comm);
    }
  }
  ASSERT_THAT(sim->Disable(), IsOk());
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  const SimStats ss = sim->stats();
  EXPECT_EQ(ss.truncations, 0u);
  EXPECT_EQ(ss.aux_dropped, 0u);
  EXPECT_EQ(ss.records_lost, 0u);
  EXPECT_EQ(ss.aux_written, pos);
  EXPECT_EQ(drainer.Totals().aux_bytes, pos);
  EXPECT_EQ(drainer.Totals().aux_records, ss.aux_records);

  const Contents c = Finish();
  EXPECT_TRUE(c.clean);
  ExpectAuxStream(c, pos);
  EXPECT_TRUE(c.loss.empty());
  // The sideband is every record the simulation wrote, in order, each whole.
  std::vector<std::string> seen_comms;
  uint64_t aux_records = 0, last_time = 0;
  perf::RecordReader r(c.sideband);
  while (true) {
    PTKIT_ASSERT_OK_AND_ASSIGN(std::optional<perf::RecordView> rec, r.Next());
    if (!rec) break;
    PTKIT_ASSERT_OK_AND_ASSIGN(perf::SampleId sid, perf::ParseSampleId(*rec, sim->layout()));
    if (rec->type != PERF_RECORD_COMM) {  // the test's COMMs carry no time
      if (last_time != 0) {
        EXPECT_EQ(sid.time, last_time + 1);  // none missing or repeated
      }
      last_time = sid.time;
    }
    if (rec->type == PERF_RECORD_COMM) {
      PTKIT_ASSERT_OK_AND_ASSIGN(perf::Comm cm, perf::ParseComm(*rec, sim->layout()));
      seen_comms.emplace_back(cm.comm);
    } else if (rec->type == PERF_RECORD_AUX) {
      ++aux_records;
    }
  }
  EXPECT_EQ(seen_comms, comms);
  EXPECT_EQ(aux_records, ss.aux_records);
  EXPECT_GT(pos / ring, 2000u) << "wraps";
}

TEST_F(SimDrainTest, TruncationAccountingIsExact) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 4, .aux_pages = 2}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();
  std::mt19937_64 rng(2);
  uint64_t pos = 0, produced = 0;
  for (int round = 0; round < 500; ++round) {
    // Bursts of up to 3 rings between drains: some fit, some truncate.
    const uint64_t burst = rng() % (3 * ring);
    for (uint64_t done = 0; done < burst;) {
      const uint64_t n = std::min<uint64_t>(burst - done, 1 + rng() % 3000);
      pos += sim->WriteTrace(StreamBytes(pos, n));
      produced += n;
      done += n;
    }
    ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  }
  ASSERT_THAT(sim->Disable(), IsOk());
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  const SimStats ss = sim->stats();
  const StreamStats ds = drainer.Totals();
  EXPECT_GT(ss.truncations, 50u);
  EXPECT_EQ(ds.truncated, ss.truncations);
  EXPECT_EQ(ds.reenables, ss.truncations);
  EXPECT_EQ(ss.aux_written, pos);
  EXPECT_EQ(ss.aux_written + ss.aux_dropped, produced);
  EXPECT_EQ(ds.aux_bytes, pos);
  const Contents c = Finish();
  ExpectAuxStream(c, pos);
  EXPECT_EQ(CountLoss(c, LossKind::kAuxTruncated), ss.truncations);
  // Each truncation is marked where the stream stopped: at the end of an AUX record's data.
  for (const LossRecord& l : c.loss) {
    ASSERT_EQ(l.kind, LossKind::kAuxTruncated);
    EXPECT_EQ(l.stream, sim->stream());
  }
}

TEST_F(SimDrainTest, StaysStoppedWithoutReenable) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 1, .aux_pages = 1}));
  Drainer drainer(writer_.get(), {.reenable_after_truncation = false});
  const uint64_t ring = sim->ring().aux.size();
  EXPECT_EQ(sim->WriteTrace(StreamBytes(0, ring + 100)), ring);
  EXPECT_FALSE(sim->enabled());
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  EXPECT_EQ(sim->WriteTrace(StreamBytes(ring, 10)), 0u);
  EXPECT_EQ(sim->stats().aux_dropped, 110u);
  EXPECT_EQ(drainer.Totals().truncated, 1u);
  EXPECT_EQ(drainer.Totals().reenables, 0u);
  const Contents c = Finish();
  ExpectAuxStream(c, ring);
}

TEST_F(SimDrainTest, LostSidebandCountedAndAuxStillWhole) {
  // A one-page data ring fills with COMM records; the AUX records that do not fit are lost,
  // and the drain still copies every AUX byte (the kernel never overwrote them).
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim, SimulatedPmu::Create({.data_pages = 1, .aux_pages = 8, .aux_watermark = 1024}));
  Drainer drainer(writer_.get());
  uint64_t pos = 0, written_comms = 0;
  for (int i = 0; i < 200; ++i) {
    written_comms += sim->WriteRecord(
        perf::EncodeComm(perf::Comm{.pid = 1, .tid = 1, .comm = "x"}, sim->layout()));
  }
  pos += sim->WriteTrace(StreamBytes(0, 8192));  // 8 AUX records, some lost
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  pos += sim->WriteTrace(StreamBytes(pos, 4096));  // these AUX records fit
  ASSERT_THAT(sim->Disable(), IsOk());
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  const SimStats ss = sim->stats();
  EXPECT_GT(ss.records_lost, 0u);
  EXPECT_EQ(drainer.Totals().lost_records, ss.records_lost);
  EXPECT_EQ(drainer.Totals().aux_bytes, pos);
  const Contents c = Finish();
  ExpectAuxStream(c, pos);
  uint64_t lost = 0;
  for (const LossRecord& l : c.loss) {
    EXPECT_EQ(l.kind, LossKind::kLostSideband);
    lost += l.count;
  }
  EXPECT_EQ(lost, ss.records_lost);
}

void FillDataRing(SimulatedPmu& sim) {
  while (sim.WriteRecord(
      perf::EncodeComm(perf::Comm{.pid = 1, .tid = 1, .comm = "x"}, sim.layout()))) {
  }
}

// At the end of a recording the data ring can be full when Disable() ends the AUX
// transaction: its PERF_RECORD_AUX is dropped and no LOST record follows. The bytes are
// still taken, up to aux_head, as perf takes them.
TEST_F(SimDrainTest, BytesWhoseAuxRecordIsLostAtTheEndAreStored) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 1, .aux_pages = 8}));
  Drainer drainer(writer_.get());
  ASSERT_EQ(sim->WriteTrace(StreamBytes(0, 5000)), 5000u);  // under the watermark: no record
  FillDataRing(*sim);
  ASSERT_THAT(sim->Disable(), IsOk());
  EXPECT_GT(sim->stats().records_lost, 0u);
  drainer.Finish();
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  EXPECT_EQ(drainer.Totals().aux_bytes, 5000u);
  ExpectAuxStream(Finish(), 5000);
}

// A TRUNCATED PERF_RECORD_AUX lost to a full data ring: the kernel has disabled the event.
// The bytes before the stop are stored, and the LOST record that comes later re-enables it.
TEST_F(SimDrainTest, ALostTruncatedRecordStillGetsTheEventReenabled) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim, SimulatedPmu::Create({.data_pages = 1, .aux_pages = 4, .aux_watermark = 1 << 20}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();
  FillDataRing(*sim);
  ASSERT_EQ(sim->WriteTrace(StreamBytes(0, ring + 1000)), ring);
  ASSERT_FALSE(sim->enabled());
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  EXPECT_EQ(drainer.Totals().aux_bytes, ring);
  // The next record that fits is preceded by PERF_RECORD_LOST.
  ASSERT_TRUE(sim->WriteRecord(
      perf::EncodeComm(perf::Comm{.pid = 1, .tid = 1, .comm = "y"}, sim->layout())));
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  EXPECT_GT(drainer.Totals().lost_records, 0u);
  EXPECT_TRUE(sim->enabled());
  ASSERT_EQ(sim->WriteTrace(StreamBytes(ring, 4000)), 4000u);
  ASSERT_THAT(sim->Disable(), IsOk());
  drainer.Finish();
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  ExpectAuxStream(Finish(), ring + 4000);
}

// A data ring larger than a container record can hold is stored as several sideband
// batches, each of whole perf records.
TEST_F(SimDrainTest, SidebandLargerThanABatchIsSplitBetweenRecords) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 16, .aux_pages = 1}));
  Drainer drainer(writer_.get(), {.max_sideband_batch = 1000});
  std::vector<uint8_t> written;
  for (int i = 0; written.size() < 50000; ++i) {
    const std::vector<uint8_t> rec = perf::EncodeComm(
        perf::Comm{.pid = 1, .tid = 1, .comm = std::string(1 + i % 15, 'a' + i % 26)},
        sim->layout());
    ASSERT_TRUE(sim->WriteRecord(rec));
    written.insert(written.end(), rec.begin(), rec.end());
  }
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  const Contents c = Finish();
  EXPECT_EQ(c.sideband, written);
  EXPECT_GT(c.sideband_batches.size(), 50u);
  for (const std::vector<uint8_t>& batch : c.sideband_batches) {
    EXPECT_LE(batch.size(), 1000u);
    perf::RecordReader reader(batch);
    absl::StatusOr<std::optional<perf::RecordView>> next;
    while ((next = reader.Next()).ok() && next->has_value()) {
    }
    EXPECT_THAT(next, IsOk());
    EXPECT_EQ(reader.offset(), batch.size());  // whole records only
  }
}

// The last pass, after the events are disabled, must not turn tracing back on.
TEST_F(SimDrainTest, TheFinalPassDoesNotReenable) {
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 1, .aux_pages = 1}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();
  ASSERT_EQ(sim->WriteTrace(StreamBytes(0, ring + 100)), ring);  // TRUNCATED, stopped
  drainer.Finish();
  ASSERT_THAT(drainer.DrainOnce(*sim), IsOk());
  EXPECT_EQ(drainer.Totals().truncated, 1u);
  EXPECT_EQ(drainer.Totals().reenables, 0u);
  EXPECT_FALSE(sim->enabled());
  ExpectAuxStream(Finish(), ring);
}

// A watched signal that arrives after the last ppoll() (e.g. SIGUSR2 during the final
// snapshot) is counted when the watcher goes, not delivered with its default action.
TEST(SignalWatcherTest, ASignalPendingAtTheEndDoesNotKillTheProcess) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    uint64_t before = 0;
    {
      SignalWatcher signals;
      before = signals.snapshot_count();
      (void)raise(SIGUSR2);  // blocked: pending
    }
    SignalWatcher again;
    _exit(again.snapshot_count() == before + 1 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(SimDrainTest, SnapshotAtEveryHeadPosition) {
  // A 256-byte AUX ring (64-byte pages), one byte at a time over three laps, a snapshot
  // after each byte with sizes that are smaller than, equal to and larger than the ring.
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim,
      SimulatedPmu::Create({.data_pages = 8, .aux_pages = 4, .page_size = 64, .overwrite = true}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();
  ASSERT_EQ(ring, 256u);
  const uint64_t sizes[] = {16, 256, 1000, 100};
  std::vector<uint64_t> wants;
  for (uint64_t head = 0; head <= 3 * ring; ++head) {
    if (head > 0) {
      ASSERT_EQ(sim->WriteTrace(StreamBytes(head - 1, 1)), 1u);
    }
    const uint64_t want = sizes[head % 4];
    PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t got, drainer.Snapshot(*sim, want));
    ASSERT_EQ(got, std::min({want, ring, head})) << "head " << head;
    ASSERT_TRUE(sim->enabled());
    wants.push_back(want);
  }
  const Contents c = Finish();
  ASSERT_EQ(c.snapshots.size(), 3 * ring + 1);
  EXPECT_TRUE(c.aux.empty());  // overwrite mode stores snapshots only
  for (uint64_t head = 0; head < c.snapshots.size(); ++head) {
    const SnapshotRecord& s = c.snapshots[head];
    EXPECT_EQ(s.sequence, head);
    EXPECT_EQ(s.aux_head, head);
    const uint64_t len = std::min({wants[head], ring, head});
    ASSERT_EQ(c.snapshot_data[head], StreamBytes(head - len, len)) << "head " << head;
  }
  // Everything the hardware wrote that no snapshot holds is accounted as overwritten.
  uint64_t overwritten = 0;
  for (const LossRecord& l : c.loss) {
    EXPECT_EQ(l.kind, LossKind::kAuxOverwritten);
    overwritten += l.bytes;
  }
  // Snapshots of 16 bytes taken every byte never lose anything between them.
  EXPECT_EQ(overwritten, 0u);
}

// The Intel PT driver reports aux_head in snapshot mode as an offset inside the buffer and
// the whole buffer as every PERF_RECORD_AUX's size; the drain must still produce the newest
// bytes in order at every head position. Positions in the last 4096 bytes of the first lap
// are inherently ambiguous (perf's first-wrap heuristic sees non-zero bytes there) and are
// skipped. How much was overwritten between snapshots cannot be known, so none is claimed.
TEST_F(SimDrainTest, SnapshotsWithInBufferHeadLikeIntelPt) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim,
      SimulatedPmu::Create(
          {.data_pages = 8, .aux_pages = 4, .overwrite = true, .masked_overwrite_head = true}));
  Drainer drainer(writer_.get());
  const uint64_t ring = sim->ring().aux.size();      // 16 KiB
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // (written, want)
  uint64_t written = 0;
  const uint64_t sizes[] = {ring, 1000, 5000};
  for (uint64_t step = 0; written + 61 <= 3 * ring; ++step) {
    ASSERT_EQ(sim->WriteTrace(StreamBytes(written, 61)), 61u);
    written += 61;
    if (written > ring - 4096 && written < ring) continue;
    const uint64_t want = sizes[step % 3];
    PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t got, drainer.Snapshot(*sim, want));
    ASSERT_EQ(got, std::min({want, ring, written})) << "written " << written;
    ASSERT_LT(sim->ring().page->aux_head, ring);  // the head really is in-buffer
    taken.emplace_back(written, want);
  }
  // Then a long stretch without a snapshot: most of it is overwritten.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(sim->WriteTrace(StreamBytes(written, 500)), 500u);
    written += 500;
  }
  PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t last_got, drainer.Snapshot(*sim, 1000));
  ASSERT_EQ(last_got, 1000u);
  taken.emplace_back(written, 1000);
  const Contents c = Finish();
  ASSERT_EQ(c.snapshots.size(), taken.size());
  for (size_t i = 0; i < taken.size(); ++i) {
    const auto [w, want] = taken[i];
    const uint64_t len = std::min({want, ring, w});
    ASSERT_EQ(c.snapshot_data[i], StreamBytes(w - len, len)) << "written " << w;
  }
  EXPECT_GT(taken.size(), 600u);
  EXPECT_THAT(c.loss, ::testing::IsEmpty());
}

TEST_F(SimDrainTest, SnapshotsCountOverwrittenBytes) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim,
      SimulatedPmu::Create({.data_pages = 8, .aux_pages = 4, .page_size = 64, .overwrite = true}));
  Drainer drainer(writer_.get());
  sim->WriteTrace(StreamBytes(0, 1000));  // 1000 bytes into 256: 744 overwritten
  ASSERT_THAT(drainer.Snapshot(*sim, 256), IsOk());
  sim->WriteTrace(StreamBytes(1000, 100));  // fits after the last snapshot
  ASSERT_THAT(drainer.Snapshot(*sim, 256), IsOk());
  const Contents c = Finish();
  ASSERT_EQ(c.loss.size(), 1u);
  EXPECT_EQ(c.loss[0].bytes, 744u);
  EXPECT_EQ(c.snapshot_data[1], StreamBytes(1100 - 256, 256));
}

TEST_F(SimDrainTest, ConcurrentProducerThroughDrainLoop) {
  SignalWatcher signals;  // before any thread starts
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, SimulatedPmu::Create({.data_pages = 8, .aux_pages = 16}));
  Drainer drainer(writer_.get());
  constexpr uint64_t kTotal = uint64_t{64} << 20;
  std::atomic<uint64_t> pos{0};
  std::atomic<bool> done{false};
  uint64_t produced = 0;
  std::thread producer([&] {
    std::mt19937_64 rng(3);
    uint64_t p = 0;
    std::vector<uint8_t> buf;
    while (produced < kTotal) {
      const uint64_t n = 1 + rng() % 8192;
      buf.resize(n);
      for (uint64_t i = 0; i < n; ++i) buf[i] = StreamByte(p + i);
      p += sim->WriteTrace(buf);
      produced += n;
      if (rng() % 64 == 0) sim->WriteItraceStart(1, 1);
    }
    sim->EndTransaction();
    pos = p;
    done = true;
  });
  LoopOptions lo;
  lo.poll_timeout_ms = 5;
  lo.should_stop = [&] { return done.load(); };
  TraceSource* sources[] = {sim.get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  producer.join();
  ASSERT_THAT(r, IsOk());
  const SimStats ss = sim->stats();
  const StreamStats ds = drainer.Totals();
  EXPECT_EQ(ss.aux_written, pos.load());
  EXPECT_EQ(ss.aux_written + ss.aux_dropped, produced);
  EXPECT_EQ(ds.aux_bytes, pos.load());
  EXPECT_EQ(ds.truncated, ss.truncations);
  EXPECT_EQ(ds.lost_records, ss.records_lost);
  const Contents c = Finish();
  ExpectAuxStream(c, pos.load());
  EXPECT_EQ(CountLoss(c, LossKind::kAuxTruncated), ss.truncations);
  RecordProperty("truncations", static_cast<int>(ss.truncations));
}

// A snapshot-mode (overwritten) AUX ring holding StreamBytes(0, 100).
absl::StatusOr<std::unique_ptr<SimulatedPmu>> OverwrittenRingOf100Bytes() {
  absl::StatusOr<std::unique_ptr<SimulatedPmu>> sim =
      SimulatedPmu::Create({.data_pages = 8, .aux_pages = 4, .page_size = 64, .overwrite = true});
  if (sim.ok()) (*sim)->WriteTrace(StreamBytes(0, 100));
  return sim;
}

TEST_F(SimDrainTest, Sigusr2TakesSnapshotsAndSigtermStops) {
  SignalWatcher signals;
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, OverwrittenRingOf100Bytes());
  Drainer drainer(writer_.get());
  const pthread_t loop_thread = pthread_self();
  std::thread sender([&] {
    for (int i = 0; i < 3; ++i) {
      pthread_kill(loop_thread, SIGUSR2);
      // Wait until the loop has taken it, so the three signals are not merged while pending.
      while (drainer.Totals().snapshots < static_cast<uint64_t>(i) + 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    // The stop request the loop's SignalWatcher catches: it does not end the thread.
    pthread_kill(loop_thread, SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread): above
  });
  LoopOptions lo;
  lo.poll_timeout_ms = 1000;
  lo.snapshot_mode = true;
  TraceSource* sources[] = {sim.get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  sender.join();
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->stopped_by_signal);
  EXPECT_EQ(r->snapshots, 4u);  // three signals + the one at the end
  const Contents c = Finish();
  ASSERT_EQ(c.snapshots.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.snapshot_data[i], StreamBytes(0, 100));
}

// A trigger hit that lands just before the workload exits (the last thread's hit, then its
// exit, both between the loop's reads): the pass that sees the exit still reads the trigger and
// counts the hit (was lost: the exit was asked after the trigger's read, then the loop ended).
TEST_F(SimDrainTest, AHitJustBeforeTheWorkloadExitsIsCounted) {
  SignalWatcher signals;
  PTKIT_ASSERT_OK_AND_ASSIGN(auto sim, OverwrittenRingOf100Bytes());
  Drainer drainer(writer_.get());
  uint64_t unread_hits = 0;
  int passes = 0;
  LoopOptions lo;
  lo.poll_timeout_ms = 1;
  lo.snapshot_mode = true;
  lo.triggered = [&]() -> absl::StatusOr<uint64_t> { return std::exchange(unread_hits, 0); };
  lo.child_exited = [&] {
    if (++passes < 3) return false;
    ++unread_hits;  // the hit, then the exit
    return true;
  };
  TraceSource* sources[] = {sim.get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->workload_exited);
  EXPECT_EQ(r->trigger_fires, 1u);
  EXPECT_EQ(r->trigger_snapshots, 1u);
  EXPECT_EQ(r->snapshots, 2u);  // the hit's and the end round
}

}  // namespace
}  // namespace ptkit::record
