#include "record/drain.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ptkit/aux_sample.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {

Drainer::Drainer(ContainerWriter* writer, DrainOptions options)
    : writer_(writer), options_(std::move(options)) {}

StreamStats Drainer::Totals() const {
  StreamStats t;
  for (const auto& [id, s] : stats_) {
    t.sideband_bytes += s.sideband_bytes;
    t.sideband_records += s.sideband_records;
    t.aux_bytes += s.aux_bytes;
    t.aux_records += s.aux_records;
    t.truncated += s.truncated;
    t.collisions += s.collisions;
    t.partial += s.partial;
    t.lost_records += s.lost_records;
    t.reenables += s.reenables;
    t.snapshots += s.snapshots;
    t.snapshot_bytes += s.snapshot_bytes;
    t.samples += s.samples;
    t.sample_aux_bytes += s.sample_aux_bytes;
  }
  return t;
}

uint64_t Drainer::StreamOffset(StreamId sid, const perf_event_mmap_page* page,
                               uint64_t ring_offset) const {
  auto it = state_.find({sid, page});
  if (it != state_.end() && it->second.based) return it->second.base + ring_offset;
  auto end = ends_.find(sid);
  return (end == ends_.end() ? 0 : end->second.end) + ring_offset;
}

Drainer::StreamState& Drainer::RingState(TraceSource& source) {
  return state_[{source.stream(), source.ring().page}];
}

void Drainer::Base(StreamId sid, StreamState& st) {
  if (st.based) return;
  st.based = true;
  st.base = ends_[sid].end;
}

absl::Status Drainer::StoreAux(TraceSource& source, StreamState& st, uint64_t to, uint64_t flags,
                               uint64_t time) {
  StreamStats& stats = stats_[source.stream()];
  const RingView v = source.ring();
  uint64_t from = st.aux_consumed;
  if (to <= from) return absl::OkStatus();
  Base(source.stream(), st);
  if (to - from > v.aux.size()) {
    // Cannot happen with the kernel's rules; keep what the ring still holds and say so.
    const uint64_t gone = to - from - v.aux.size();
    PTKIT_RETURN_IF_ERROR(writer_->AppendLoss(LossRecord{.stream = source.stream(),
                                                         .kind = LossKind::kOther,
                                                         .count = 1,
                                                         .bytes = gone,
                                                         .time = time,
                                                         .aux_offset = st.base + from}));
    from += gone;
  }
  while (from < to) {
    const uint64_t n = std::min(to - from, options_.max_aux_chunk);
    scratch_.clear();
    AppendFromRing(v.aux, from, n, scratch_);
    PTKIT_RETURN_IF_ERROR(writer_->AppendAux(AuxRecord{.stream = source.stream(),
                                                       .aux_offset = st.base + from,
                                                       .flags = from + n == to ? flags : 0,
                                                       .time = time,
                                                       .data = scratch_}));
    stats.aux_bytes += n;
    from += n;
  }
  st.aux_consumed = to;
  uint64_t& end = ends_[source.stream()].end;
  end = std::max(end, st.base + to);
  return absl::OkStatus();
}

absl::Status Drainer::StoreSideband(TraceSource& source, std::span<const uint8_t> bytes) {
  const uint64_t limit = options_.max_sideband_batch;
  while (bytes.size() > limit) {
    // Cut after the last whole record under the limit (anywhere if the records are damaged:
    // the walk in DrainOnce reports that).
    size_t cut = 0;
    perf::RecordReader reader(bytes);
    for (;;) {
      absl::StatusOr<std::optional<perf::RecordView>> next = reader.Next();
      if (!next.ok() || !next->has_value() || reader.offset() > limit) break;
      cut = reader.offset();
    }
    if (cut == 0) cut = limit;
    PTKIT_RETURN_IF_ERROR(
        writer_->AppendSideband(SidebandRecord{.cpu = source.cpu(), .records = bytes.first(cut)}));
    bytes = bytes.subspan(cut);
  }
  return writer_->AppendSideband(SidebandRecord{.cpu = source.cpu(), .records = bytes});
}

absl::Status Drainer::TakeSamples(TraceSource& source, std::vector<uint8_t>& bytes) {
  StreamStats& stats = stats_[source.stream()];
  std::vector<uint8_t> rest;
  perf::RecordReader reader(bytes);
  size_t done = 0;  // bytes walked
  bool any = false;
  for (;;) {
    absl::StatusOr<std::optional<perf::RecordView>> next = reader.Next();
    if (!next.ok() || !next->has_value()) break;
    const perf::RecordView& rec = **next;
    done = reader.offset();
    if (rec.type != PERF_RECORD_SAMPLE) {
      rest.insert(rest.end(), rec.bytes.begin(), rec.bytes.end());
      continue;
    }
    any = true;
    PTKIT_RETURN_IF_ERROR(writer_->AppendSample(SampleRecord{
        .stream = source.stream(), .sample_type = options_.sample_type, .record = rec.bytes}));
    ++stats.samples;
    absl::StatusOr<perf::Sample> sample = perf::ParseSample(rec, options_.sample_type);
    if (sample.ok()) stats.sample_aux_bytes += sample->aux.size();
  }
  if (!any) return absl::OkStatus();
  rest.insert(rest.end(), bytes.begin() + static_cast<ptrdiff_t>(done), bytes.end());
  bytes = std::move(rest);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Drainer::DrainOnce(TraceSource& source) {
  const RingView v = source.ring();
  const StreamId sid = source.stream();
  StreamStats& stats = stats_[sid];
  StreamState& st = RingState(source);
  const perf::SampleIdLayout layout = source.layout();

  const uint64_t head = LoadDataHead(v.page);
  const uint64_t tail = v.page->data_tail;  // only this reader writes it
  if (head == tail) return 0;
  if (head - tail > v.data.size()) {
    StoreDataTail(v.page, head);
    return absl::DataLossError(absl::StrCat("data ring of ", StreamName(sid), ": head ", head,
                                            " is more than the ring size ahead of tail ", tail));
  }
  std::vector<uint8_t> bytes;
  AppendFromRing(v.data, tail, head - tail, bytes);
  uint64_t stored = bytes.size();
  if (options_.sample_type != 0) PTKIT_RETURN_IF_ERROR(TakeSamples(source, bytes));
  if (!bytes.empty()) PTKIT_RETURN_IF_ERROR(StoreSideband(source, bytes));
  stats.sideband_bytes += bytes.size();
  const uint64_t aux_before = stats.aux_bytes;

  const bool full_trace = !v.aux_overwrite && !v.aux.empty();
  bool reenable = false;
  perf::RecordReader reader(bytes);
  while (true) {
    absl::StatusOr<std::optional<perf::RecordView>> next = reader.Next();
    if (!next.ok()) {
      // The bytes are stored verbatim; the decoder will meet the same damage. Say where.
      PTKIT_RETURN_IF_ERROR(
          writer_->AppendLoss(LossRecord{.stream = sid,
                                         .kind = LossKind::kOther,
                                         .count = 1,
                                         .bytes = bytes.size() - reader.offset()}));
      break;
    }
    if (!next->has_value()) break;
    const perf::RecordView& rec = **next;
    ++stats.sideband_records;
    if (options_.on_record) options_.on_record(rec, layout);
    if (rec.type == PERF_RECORD_AUX) {
      absl::StatusOr<perf::Aux> aux = perf::ParseAux(rec, layout);
      if (!aux.ok()) continue;
      ++stats.aux_records;
      const uint64_t time = aux->sample_id.time;
      st.last_time = std::max(st.last_time, time);
      if (full_trace) {
        PTKIT_RETURN_IF_ERROR(
            StoreAux(source, st, aux->aux_offset + aux->aux_size, aux->flags, time));
      }
      auto loss = [&](LossKind kind) {
        Base(sid, st);
        return writer_->AppendLoss(
            LossRecord{.stream = sid,
                       .kind = kind,
                       .count = 1,
                       .time = time,
                       .aux_offset = st.base + aux->aux_offset + aux->aux_size});
      };
      if (aux->truncated()) {
        ++stats.truncated;
        PTKIT_RETURN_IF_ERROR(loss(LossKind::kAuxTruncated));
        reenable = true;
      }
      if (aux->collision()) {
        ++stats.collisions;
        PTKIT_RETURN_IF_ERROR(loss(LossKind::kAuxCollision));
      }
      if (aux->partial()) {
        ++stats.partial;
        PTKIT_RETURN_IF_ERROR(loss(LossKind::kAuxPartial));
      }
    } else if (rec.type == PERF_RECORD_LOST) {
      absl::StatusOr<perf::Lost> lost = perf::ParseLost(rec, layout);
      if (!lost.ok()) continue;
      stats.lost_records += lost->lost;
      PTKIT_RETURN_IF_ERROR(writer_->AppendLoss(LossRecord{.stream = sid,
                                                           .kind = LossKind::kLostSideband,
                                                           .count = lost->lost,
                                                           .time = lost->sample_id.time}));
      // A lost PERF_RECORD_AUX may have been TRUNCATED (the kernel then disabled the event):
      // enabling an enabled event changes nothing.
      reenable |= full_trace;
    }
  }
  if (full_trace) {
    // Everything the kernel published, also bytes whose PERF_RECORD_AUX was lost (data ring
    // full: at the end of a recording no LOST record may follow) or is not in this pass yet
    // (it is written before aux_head moves, so it comes later): as perf, which reads AUX up to
    // aux_head whatever records say.
    PTKIT_RETURN_IF_ERROR(StoreAux(source, st, LoadAuxHead(v.page), 0, st.last_time));
    // Only now that the AUX bytes are in the writer's queue may the kernel reuse them.
    StoreAuxTail(v.page, st.aux_consumed);
  }
  StoreDataTail(v.page, head);
  if (reenable && options_.reenable_after_truncation && !final_) {
    PTKIT_RETURN_IF_ERROR(source.Enable());
    ++stats.reenables;
  }
  stored += stats.aux_bytes - aux_before;
  return stored;
}

absl::StatusOr<uint64_t> Drainer::Snapshot(TraceSource& source, uint64_t size) {
  const StreamId sid = source.stream();
  // The hardware must be stopped while its buffer is read; disabling also ends the AUX
  // transaction so aux_head in the user page is current (perf_aux_output_end()).
  PTKIT_RETURN_IF_ERROR(source.Disable());
  PTKIT_ASSIGN_OR_RETURN(uint64_t drained, DrainOnce(source));
  (void)drained;
  const RingView v = source.ring();
  const uint64_t head = LoadAuxHead(v.page);
  StreamState& st = RingState(source);
  Base(sid, st);
  StreamEnd& stream = ends_[sid];
  // aux_head may be an offset inside the buffer (Intel PT in snapshot mode): then whether
  // the ring has wrapped is learned from its contents, once (tools/perf/arch/x86/util/
  // intel-pt.c, intel_pt_find_snapshot()).
  if (v.aux_head_in_buffer && !st.aux_wrapped) st.aux_wrapped = AuxRingWrapped(v.aux);
  const RingRange range = v.aux_head_in_buffer
                              ? SnapshotRangeAt(head, v.aux.size(), size, st.aux_wrapped)
                              : SnapshotRange(head, v.aux.size(), size);
  scratch_.clear();
  AppendFromRing(v.aux, range.from, range.len, scratch_);
  StreamStats& stats = stats_[sid];
  PTKIT_RETURN_IF_ERROR(
      writer_->AppendSnapshot(SnapshotRecord{.stream = sid,
                                             .sequence = stream.snapshot_sequence++,
                                             .aux_head = st.base + head,
                                             .data = scratch_}));
  // Bytes written since the previous snapshot that this one no longer holds: overwritten by
  // the hardware (by design in snapshot mode), recorded so `ptdecode info` can say so. Only
  // a free-running head tells how many: with an in-buffer head (Intel PT, BTS) every
  // PERF_RECORD_AUX gives the whole buffer as its size (pt_event_stop()), so nothing does.
  const uint64_t written = head - st.last_snapshot_head;
  if (!v.aux_head_in_buffer && written > range.len) {
    PTKIT_RETURN_IF_ERROR(
        writer_->AppendLoss(LossRecord{.stream = sid,
                                       .kind = LossKind::kAuxOverwritten,
                                       .count = 1,
                                       .bytes = written - range.len,
                                       .aux_offset = st.base + st.last_snapshot_head}));
  }
  st.last_snapshot_head = head;
  stream.end = std::max(stream.end, st.base + head);
  ++stats.snapshots;
  stats.snapshot_bytes += range.len;
  PTKIT_RETURN_IF_ERROR(source.Enable());
  return range.len;
}

}  // namespace ptkit::record
