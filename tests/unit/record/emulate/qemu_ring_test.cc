// SPDX-License-Identifier: Apache-2.0
//
// The shared ring of --emulate=qemu without QEMU: a producer thread writes as the plugin does
// (QemuSlotWriter, waiting while the ring is full) while the reader drains the slot with the
// ordinary Drainer; the container then holds every byte, in order, in the thread's stream,
// with no loss.
#include "record/emulate/qemu_ring.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "record/drain.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::emulate {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;

uint8_t TraceByte(uint64_t offset) { return static_cast<uint8_t>(offset * 7 + (offset >> 9)); }

struct Region {
  explicit Region(uint32_t slots, uint64_t data_pages, uint64_t aux_pages)
      : bytes(QemuRegionSize(slots, data_pages, aux_pages) + kQemuPage) {
    // Page-aligned, as the mmap is.
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(bytes.data()) + kQemuPage - 1) &
                                      ~(kQemuPage - 1));
    InitQemuRegion(base, slots, data_pages, aux_pages);
  }
  std::vector<uint8_t> bytes;
  uint8_t* base = nullptr;
};

TEST(QemuRingTest, ARegionIsCheckedBeforeUse) {
  Region r(2, 4, 16);
  const uint64_t size = QemuRegionSize(2, 4, 16);
  EXPECT_THAT(CheckQemuRegion(r.base, size), IsOk());
  EXPECT_THAT(CheckQemuRegion(r.base, size - 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  RegionHeader(r.base)->magic ^= 1;
  EXPECT_THAT(CheckQemuRegion(r.base, size), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(QemuRingTest, AFullRingMakesTheWriterWaitAndNothingIsLost) {
  Region r(2, 4, 16);  // a 64 KiB AUX ring for 1 MiB of trace: it fills up many times
  const uint32_t slot = 1, tid = 4242;
  QemuSlotControl* control = SlotControl(r.base, slot);
  control->pid = 4200;
  control->tid = tid;
  control->state.store(kSlotActive);
  testing::TempDir dir;
  const std::string path = dir.File("ring.pt");
  auto writer = ContainerWriter::Create(path, WriterOptions{});
  ASSERT_THAT(writer, IsOk());
  record::Drainer drainer(writer->get());
  QemuSlotSource source(SlotRing(r.base, slot), control);

  constexpr uint64_t kTotal = 1 << 20, kPiece = 10000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> waits{0};
  std::thread producer([&] {
    QemuSlotWriter out(SlotRing(r.base, slot), 4200, tid, slot);
    std::vector<uint8_t> piece;
    for (uint64_t at = 0; at < kTotal; at += piece.size()) {
      piece.clear();
      for (uint64_t i = at; i < std::min(kTotal, at + kPiece); ++i) piece.push_back(TraceByte(i));
      ASSERT_TRUE(out.WriteTrace(piece, /*time=*/at + 1, [&] {
        ++waits;
        std::this_thread::yield();
        return true;
      }));
    }
    done.store(true);
  });
  // The drain starts once the writer has found the ring full (a fast drain on an idle machine
  // would otherwise keep up and the wait would never be exercised).
  while (waits.load() == 0 && !done.load()) std::this_thread::yield();
  while (!done.load()) ASSERT_THAT(drainer.DrainOnce(source), IsOk());
  producer.join();
  ASSERT_THAT(drainer.DrainOnce(source), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  EXPECT_GT(waits.load(), 0u);  // the ring was full at least once

  absl::StatusOr<ContainerReader> reader = ContainerReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  uint64_t next = 0, loss = 0;
  RecordView rec;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(rec);
    ASSERT_THAT(more, IsOk());
    if (!*more) break;
    if (rec.type == RecordType::kLoss) ++loss;
    if (rec.type != RecordType::kAux) continue;
    absl::StatusOr<AuxRecord> a = ParseAux(rec.payload);
    ASSERT_THAT(a, IsOk());
    EXPECT_EQ(a->stream, (StreamId{StreamKind::kThread, tid}));
    ASSERT_EQ(a->aux_offset, next);
    for (size_t k = 0; k < a->data.size(); ++k) ASSERT_EQ(a->data[k], TraceByte(next + k)) << k;
    next += a->data.size();
  }
  EXPECT_EQ(next, kTotal);
  EXPECT_EQ(loss, 0u);
  EXPECT_EQ(drainer.Totals().aux_bytes, kTotal);
  EXPECT_EQ(drainer.Totals().truncated, 0u);
}

// The AUX records drained from slot 0 of `r` into a container: every byte in order from offset
// 0, each as TraceByte gives it; how many.
uint64_t DrainedTraceBytes(Region& r) {
  testing::TempDir dir;
  const std::string path = dir.File("drained.pt");
  auto writer = ContainerWriter::Create(path, WriterOptions{});
  EXPECT_THAT(writer, IsOk());
  if (!writer.ok()) return 0;
  record::Drainer drainer(writer->get());
  QemuSlotSource source(SlotRing(r.base, 0), SlotControl(r.base, 0));
  EXPECT_THAT(drainer.DrainOnce(source), IsOk());
  EXPECT_THAT((*writer)->Close(), IsOk());
  absl::StatusOr<ContainerReader> reader = ContainerReader::Open(path);
  EXPECT_THAT(reader, IsOk());
  if (!reader.ok()) return 0;
  uint64_t next = 0;
  RecordView rec;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kAux) continue;
    absl::StatusOr<AuxRecord> a = ParseAux(rec.payload);
    EXPECT_THAT(a, IsOk());
    if (!a.ok()) return next;
    EXPECT_EQ(a->aux_offset, next);
    for (size_t k = 0; k < a->data.size(); ++k) {
      if (a->data[k] != TraceByte(next + k)) {
        ADD_FAILURE() << "byte " << next + k;
        return next;
      }
    }
    next += a->data.size();
  }
  return next;
}

// A writer in the new program's qemu goes on where the exec'ing one stopped: the stream's
// offsets continue (one stream across execve, as a per-task event's), and bytes staged before
// the exec (at the execve call) go into the resumed writer's first record.
TEST(QemuRingTest, AResumedWriterContinuesTheStream) {
  Region r(1, 4, 16);
  QemuSlotControl* control = SlotControl(r.base, 0);
  control->tid = 77;
  control->state.store(kSlotActive);
  auto keep = [] { return true; };
  std::vector<uint8_t> first(3000), staged(1000), second(5000);
  for (size_t i = 0; i < first.size(); ++i) first[i] = TraceByte(i);
  for (size_t i = 0; i < staged.size(); ++i) staged[i] = TraceByte(first.size() + i);
  for (size_t i = 0; i < second.size(); ++i) {
    second[i] = TraceByte(first.size() + staged.size() + i);
  }
  {
    QemuSlotWriter before(SlotRing(r.base, 0), 77, 77, 0);
    ASSERT_TRUE(before.WriteTrace(first, 1, keep));
    ASSERT_TRUE(before.StageTrace(staged));
    EXPECT_EQ(before.staged(), staged.size());
    control->aux_recorded.store(before.recorded());
  }
  QemuSlotWriter after(SlotRing(r.base, 0), 77, 77, 0);
  after.Resume(control->aux_recorded.load());
  EXPECT_EQ(after.staged(), staged.size());
  ASSERT_TRUE(after.WriteTrace(second, 2, keep));
  EXPECT_EQ(after.staged(), 0u);
  EXPECT_EQ(DrainedTraceBytes(r), first.size() + staged.size() + second.size());
}

// A process that died in a system call (qemu runs no plugin code at a fatal signal) left bytes
// staged with no record: ptrecord's RecordStaged describes them, and they drain. Staging stops
// at a quarter of the ring (a record of them and a WriteTrace piece still fit once drained).
TEST(QemuRingTest, StagedBytesOfAWriterThatDiedAreRecordedAfterIt) {
  Region r(1, 4, 4);  // a 16 KiB AUX ring
  QemuSlotControl* control = SlotControl(r.base, 0);
  control->tid = 5;
  control->state.store(kSlotActive);
  auto keep = [] { return true; };
  std::vector<uint8_t> first(2000), staged(4096), more(1);
  for (size_t i = 0; i < first.size(); ++i) first[i] = TraceByte(i);
  for (size_t i = 0; i < staged.size(); ++i) staged[i] = TraceByte(first.size() + i);
  {
    QemuSlotWriter dying(SlotRing(r.base, 0), 5, 5, 0);
    ASSERT_TRUE(dying.WriteTrace(first, 1, keep));
    control->aux_recorded.store(dying.recorded());
    ASSERT_TRUE(dying.StageTrace(staged));
    EXPECT_FALSE(dying.StageTrace(more));  // past a quarter of the ring
  }
  QemuSlotWriter after(SlotRing(r.base, 0), 5, 5, 0);
  after.Resume(control->aux_recorded.load());
  EXPECT_EQ(after.staged(), staged.size());
  ASSERT_TRUE(after.RecordStaged(3));
  EXPECT_EQ(after.staged(), 0u);
  EXPECT_EQ(DrainedTraceBytes(r), first.size() + staged.size());
}

// Overwrite mode: the writer never waits for the AUX ring (it is never drained here), a write
// longer than the ring keeps its end, and the newest bytes are the last ones written, also
// across the ring's end.
TEST(QemuRingTest, AnOverwrittenRingKeepsTheNewestBytes) {
  Region r(1, 4, 1);  // a 4 KiB AUX ring
  RegionHeader(r.base)->overwrite = 1;
  const record::RingView ring = SlotRing(r.base, 0);
  EXPECT_TRUE(ring.aux_overwrite);
  QemuSlotWriter out(ring, 1, 1, 0, /*overwrite=*/true);
  uint64_t written = 0;
  auto write = [&](size_t n) {
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = TraceByte(written + i);
    written += n;
    // The data ring (16 KiB) takes the AUX records; it is drained here by hand.
    return out.WriteTrace(bytes, written, [&] {
      record::StoreDataTail(ring.page, record::LoadDataHead(ring.page));
      return true;
    });
  };
  ASSERT_TRUE(write(3000));
  ASSERT_TRUE(write(10000));  // more than the ring
  ASSERT_TRUE(write(1500));   // across the ring's end
  EXPECT_EQ(record::LoadAuxHead(ring.page), written);
  std::vector<uint8_t> newest(4096);
  out.CopyNewest(newest);
  for (size_t i = 0; i < newest.size(); ++i) {
    ASSERT_EQ(newest[i], TraceByte(written - newest.size() + i)) << i;
  }
}

// The snapshot lock: while ptrecord holds it the writer waits; a writer that holds it makes
// ptrecord wait, and a writer that never lets go (died) makes it give up after the timeout.
TEST(QemuRingTest, TheSnapshotLockExcludesTheWriter) {
  QemuSlotControl c{};
  EXPECT_TRUE(LockSlotForReading(c, 0));
  int waits = 0;
  EXPECT_FALSE(LockSlotForWriting(c, [&] { return ++waits < 3; }));
  EXPECT_EQ(waits, 3);
  EXPECT_EQ(c.writing.load(), 0u);
  UnlockSlotForReading(c);
  EXPECT_TRUE(LockSlotForWriting(c, [] { return false; }));
  EXPECT_FALSE(LockSlotForReading(c, 200000));  // 0.2 ms
  UnlockSlotForReading(c);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    UnlockSlotForWriting(c);
  });
  EXPECT_TRUE(LockSlotForReading(c, 10000000000));  // waits for the unlock
  writer.join();
  UnlockSlotForReading(c);
}

}  // namespace
}  // namespace ptkit::emulate
