// Drainer: moves what a TraceSource produced into a ContainerWriter.
//
// One DrainOnce() pass over a source:
//  1. loads data_head (acquire), copies [data_tail, data_head) out of the data ring in one
//     piece (a record that wraps the ring end comes out contiguous) and stores it verbatim as
//     sideband records (one, unless it is larger than max_sideband_batch);
//  2. walks those records: for each PERF_RECORD_AUX in full-trace mode, copies AUX bytes from
//     the last consumed offset up to aux_offset + aux_size (with wrap) into an AUX record;
//     TRUNCATED / COLLISION / PARTIAL flags and LOST records become loss records and
//     counters;
//  3. in full-trace mode copies the rest up to aux_head (bytes whose PERF_RECORD_AUX was
//     lost or comes later), then stores aux_tail (release);
//  4. stores data_tail (release); after a TRUNCATED or a LOST record re-enables the AUX
//     event (perf does after a truncation; a lost record may have been one), unless Finish()
//     was called.
// In overwrite (snapshot) mode AUX records are kept as sideband only; Snapshot() copies the
// newest bytes of the AUX ring instead.
// PERF_RECORD_SAMPLE records (AUX sampling: ptkit/aux_sample.h) are taken out of the sideband
// and stored one by one as sample records, with DrainOptions::sample_type.
#ifndef PTKIT_RECORD_DRAIN_H_
#define PTKIT_RECORD_DRAIN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/container_writer.h"
#include "record/trace_source.h"

namespace ptkit::record {

struct StreamStats {
  uint64_t sideband_bytes = 0;
  uint64_t sideband_records = 0;  // perf records
  uint64_t aux_bytes = 0;         // AUX bytes stored (full-trace)
  uint64_t aux_records = 0;       // PERF_RECORD_AUX seen
  uint64_t truncated = 0;
  uint64_t collisions = 0;
  uint64_t partial = 0;
  uint64_t lost_records = 0;  // sum of PERF_RECORD_LOST.lost
  uint64_t reenables = 0;
  uint64_t snapshots = 0;
  uint64_t snapshot_bytes = 0;
  uint64_t samples = 0;           // PERF_RECORD_SAMPLE stored as sample records
  uint64_t sample_aux_bytes = 0;  // AUX bytes they carry (padding included)
};

struct DrainOptions {
  // Re-enable the AUX event after a TRUNCATED record (perf does). Off only for tests that
  // inspect the stopped state.
  bool reenable_after_truncation = true;
  // Largest AUX record payload; longer ranges are split (ContainerWriter caps payloads).
  uint64_t max_aux_chunk = uint64_t{16} << 20;
  // Largest sideband batch; more is split between perf records (a data ring can be larger
  // than a container record).
  uint64_t max_sideband_batch = uint64_t{16} << 20;
  // Called for every sideband record drained (e.g. CodeCapture::OnRecord). May be empty.
  std::function<void(const perf::RecordView&, const perf::SampleIdLayout&)> on_record;
  // The sample_type of the AUX-sampling event whose PERF_RECORD_SAMPLEs arrive in the data
  // rings (stored with each sample record); 0 when there is none.
  uint64_t sample_type = 0;
};

class Drainer {
 public:
  // `writer` must outlive the Drainer.
  explicit Drainer(ContainerWriter* writer, DrainOptions options = {});

  // One pass over `source` as described above. Returns the bytes stored (sideband + AUX).
  // Errors: the writer's (sticky) error; kDataLoss when the data ring holds a malformed
  // record (the ring is then skipped to data_head so the reader does not loop); Enable()
  // failures.
  absl::StatusOr<uint64_t> DrainOnce(TraceSource& source);

  // Snapshot mode: Disable() the AUX event (ends the hardware transaction, publishes
  // aux_head), drain the data ring, copy the newest min(size, ring, written) AUX bytes in
  // chronological order into a SnapshotRecord, Enable() again. Returns the snapshot size.
  // aux_head may be free-running or an in-buffer offset (Intel PT); see SnapshotRangeAt().
  // Overwritten bytes are only accounted (kAuxOverwritten) with a free-running head.
  absl::StatusOr<uint64_t> Snapshot(TraceSource& source, uint64_t size);

  // The recording is ending (events disabled): later passes never re-enable an event.
  void Finish() { final_ = true; }

  const std::map<StreamId, StreamStats>& stats() const { return stats_; }
  // The stream's offset of `ring_offset` in the ring at `page` of stream `sid` (its records
  // are stored at the stream's offsets: a thread id that came back has a later ring).
  uint64_t StreamOffset(StreamId sid, const perf_event_mmap_page* page, uint64_t ring_offset) const;
  StreamStats Totals() const;

 private:
  // One ring of a stream. A stream has several where its thread id came back within the
  // recording (a later thread or process the kernel gave it to, with a ring of its own): each
  // ring's AUX offsets start at 0, so its records are stored at `base`, where the stream's
  // earlier rings ended, and the stream's offsets go on rising (sweep 34a F1: the later runs'
  // trace was dropped as already stored, and under qemu the first run's count written as a
  // new slot's aux_tail left it no room: the workload hung).
  struct StreamState {
    uint64_t aux_consumed = 0;  // our aux_tail
    uint64_t base = 0;          // the stream's offset of this ring's offset 0
    bool based = false;         // base is set: at the ring's first bytes stored (Base)
    uint64_t last_snapshot_head = 0;
    bool aux_wrapped = false;  // snapshot mode: the AUX ring has wrapped at least once
    uint64_t last_time = 0;    // of the latest PERF_RECORD_AUX: for bytes copied without one
  };
  // What a stream's rings share.
  struct StreamEnd {
    uint64_t end = 0;  // past the last AUX offset stored, of any ring
    uint64_t snapshot_sequence = 0;
  };
  // `source`'s ring's state.
  StreamState& RingState(TraceSource& source);
  // Sets `st`'s base, where not yet: where the stream's earlier rings ended. At the ring's first
  // bytes, not when it is first seen: an earlier ring's last bytes may be drained after a later
  // ring's first, empty pass (a review).
  void Base(StreamId sid, StreamState& st);
  // Copies the AUX bytes from our tail up to `to` into AUX records; the last carries `flags`.
  // The kernel never overwrites bytes past aux_tail in full-trace mode, so they are intact
  // even when an earlier PERF_RECORD_AUX was lost (data ring full): the copy starts at our
  // tail, not at a record's offset.
  absl::Status StoreAux(TraceSource& source, StreamState& st, uint64_t to, uint64_t flags,
                        uint64_t time);
  // Stores `bytes` (perf records) as sideband batches of at most max_sideband_batch bytes.
  absl::Status StoreSideband(TraceSource& source, std::span<const uint8_t> bytes);
  // Stores every PERF_RECORD_SAMPLE of `bytes` as a sample record and removes it from
  // `bytes`. Records after a malformed header stay as they are (DrainOnce reports them).
  absl::Status TakeSamples(TraceSource& source, std::vector<uint8_t>& bytes);

  ContainerWriter* writer_;
  DrainOptions options_;
  std::map<StreamId, StreamStats> stats_;
  std::map<std::pair<StreamId, const perf_event_mmap_page*>, StreamState> state_;
  std::map<StreamId, StreamEnd> ends_;
  std::vector<uint8_t> scratch_;
  bool final_ = false;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_DRAIN_H_
