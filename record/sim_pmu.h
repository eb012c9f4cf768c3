// SimulatedPmu: a producer with the kernel's memory layout and rules, for proving the drain
// without Intel PT. It owns one page-aligned allocation laid out like a perf mmap: the user
// page (perf_event_mmap_page with data_offset/data_size/aux_offset/aux_size filled in), the
// data ring right after it, and the AUX ring at aux_offset. The "hardware" writes trace bytes
// into the AUX ring and the "kernel" writes PERF_RECORD_AUX / ITRACE_START / LOST records
// into the data ring, with these rules (kernel/events/ring_buffer.c, arch/x86/events/intel/
// pt.c):
//
// Full-trace mode (AUX mapped writable):
//  - the AUX ring never overwrites unread data: free space is aux_tail + size - aux_head;
//  - every `aux_watermark` bytes (default: half the ring, as rb_alloc_aux()) the PMI ends the
//    AUX transaction: PERF_RECORD_AUX {offset, size, flags} for the new bytes, reader woken;
//  - when the ring is full the transaction ends with PERF_AUX_FLAG_TRUNCATED and the event is
//    disabled (perf_aux_output_begin() finds no room and sets pending_disable): bytes the
//    hardware produces until the reader calls Enable() are lost (counted in stats()).
// Overwrite mode (AUX mapped read-only, snapshot):
//  - the hardware wraps and keeps writing; no wakeups; aux_head is published only when a
//    transaction ends, free-running, or (masked_overwrite_head) as an offset inside the
//    buffer like the Intel PT driver;
//  - Disable() ends the transaction: PERF_RECORD_AUX with PERF_AUX_FLAG_OVERWRITE,
//    aux_offset = the new head and aux_size = bytes written since the last one.
// Data ring: a record that does not fit is dropped and counted; before the next record that
// fits, a PERF_RECORD_LOST {id, lost} is written (perf_output_begin()). Wakeup after every
// record (wakeup_events = 1) and on every AUX record.
//
// Thread safety: one producer thread calls the producer functions; the reader uses ring()
// and Enable()/Disable() from another thread. The rings are shared lock-free through the
// head/tail protocol; enable state is under a mutex.
#ifndef PTKIT_RECORD_SIM_PMU_H_
#define PTKIT_RECORD_SIM_PMU_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ptkit/aux_sample.h"
#include "ptkit/scoped_fd.h"
#include "record/trace_source.h"

namespace ptkit::record {

struct SimOptions {
  uint64_t data_pages = 8;  // power of two
  uint64_t aux_pages = 16;  // power of two
  uint64_t page_size = 4096;
  bool overwrite = false;      // snapshot mode
  uint64_t aux_watermark = 0;  // bytes; 0 = half the AUX ring
  int32_t cpu = 0;             // CPU of the ring and of the sample_id trailers
  uint32_t pid = 1000, tid = 1000;
  uint64_t id = 42;  // PERF_SAMPLE_IDENTIFIER of the records
  perf::SampleIdLayout layout{
      PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};
  bool start_enabled = true;
  // Overwrite mode: publish aux_head as an offset inside the buffer, as the Intel PT driver
  // does in snapshot mode (pt_event_stop(): handle.head = buf->data_size), instead of a
  // free-running count.
  bool masked_overwrite_head = false;
  // The perf time of each record (the emulations': CLOCK_MONOTONIC ns, as their sideband);
  // without it, a simulated clock that ticks once per record.
  uint64_t (*clock)() = nullptr;
};

// Ground truth kept by the simulation.
struct SimStats {
  uint64_t aux_written = 0;   // bytes that reached the AUX ring
  uint64_t aux_dropped = 0;   // bytes produced while stopped after a truncation
  uint64_t aux_records = 0;   // PERF_RECORD_AUX written
  uint64_t truncations = 0;   // of them with TRUNCATED
  uint64_t records_lost = 0;  // data-ring records dropped (sum of LOST.lost written or pending)
  uint64_t lost_records = 0;  // PERF_RECORD_LOST written
  uint64_t wakeups = 0;
  uint64_t samples = 0;           // PERF_RECORD_SAMPLE written
  uint64_t sample_aux_bytes = 0;  // AUX bytes in them
};

class SimulatedPmu : public TraceSource {
 public:
  // Errors: kInvalidArgument for page counts that are not powers of two.
  static absl::StatusOr<std::unique_ptr<SimulatedPmu>> Create(const SimOptions& options);

  // --- TraceSource (the reader's side) ---
  RingView ring() override { return view_; }
  int poll_fd() const override { return event_fd_.get(); }
  void ClearWakeup() override;
  absl::Status Enable() override;
  absl::Status Disable() override;  // overwrite mode: ends the transaction (see above)
  StreamId stream() const override { return StreamId{StreamKind::kCpu, uint64_t(options_.cpu)}; }
  int32_t cpu() const override { return options_.cpu; }
  perf::SampleIdLayout layout() const override { return options_.layout; }

  // --- The producer's side ---
  // The hardware produced `bytes`. Returns how many reached the AUX ring (all in overwrite
  // mode; in full-trace mode fewer when the ring filled up, 0 while disabled).
  uint64_t WriteTrace(std::span<const uint8_t> bytes);
  // Ends the current AUX transaction now (context switch, or the event being scheduled
  // out): a PERF_RECORD_AUX for the unreported bytes, if any.
  void EndTransaction();
  // PERF_RECORD_ITRACE_START for pid/tid. Returns false when the data ring had no room.
  bool WriteItraceStart(uint32_t pid, uint32_t tid);
  // PERF_RECORD_TEXT_POKE of `bytes` at `addr` (no old bytes: code the emulation read as it
  // ran it). Returns false when the data ring had no room.
  bool WriteTextPoke(uint64_t addr, std::span<const uint8_t> bytes);
  // Any record bytes (e.g. built with perf::Encode*) into the data ring, kernel rules.
  bool WriteRecord(std::span<const uint8_t> record);
  // AUX sampling: `sample` (its fields as the caller sets them; `aux` ignored) as a
  // PERF_RECORD_SAMPLE of `sample_type` (with PERF_SAMPLE_AUX) whose AUX part is taken as the
  // kernel does (perf_prepare_sample() caps aux_sample_size to what a 64 KiB record leaves,
  // rounded down to 8, and to the AUX ring's size; pt_event_snapshot_aux() copies that many
  // bytes ending at the hardware's current position, wrapping, so a ring not yet written that
  // far gives its zeroed bytes). Returns the AUX bytes the record carries, or 0 when the data
  // ring had no room (the record is then lost and counted, kernel rules).
  uint64_t WriteSample(const perf::Sample& sample, uint64_t sample_type, uint64_t aux_sample_size);
  // The perf time of the last record (SimOptions::clock; else every record takes the next
  // tick).
  uint64_t now() const { return time_; }
  bool enabled() const;
  SimStats stats() const;

 private:
  explicit SimulatedPmu(const SimOptions& options);
  void EmitAux(uint64_t offset, uint64_t size, uint64_t flags);
  bool WriteRecordLocked(std::span<const uint8_t> record);
  void Wake();
  perf::SampleId NextSampleId();

  const SimOptions options_;
  ScopedMmap mapping_;  // user page + data ring + AUX area, anonymous
  RingView view_;
  ScopedFd event_fd_;

  mutable absl::Mutex mu_;
  bool enabled_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t aux_head_ = 0;      // producer-private copy of aux_head
  uint64_t aux_reported_ = 0;  // aux_head at the end of the last AUX record
  uint64_t data_head_ = 0;
  uint64_t pending_lost_ = 0;
  uint64_t time_ = 1;
  SimStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_SIM_PMU_H_
