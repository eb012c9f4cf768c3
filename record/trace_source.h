// TraceSource: what the drain loop needs from one traced stream, whether the kernel
// (KernelTraceSource: a perf event + its RingBuffer) or the simulated PMU produces it.
#ifndef PTKIT_RECORD_TRACE_SOURCE_H_
#define PTKIT_RECORD_TRACE_SOURCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ptkit/container_format.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "record/perf_event.h"
#include "record/ring.h"
#include "record/ring_buffer.h"

namespace ptkit::record {

class TraceSource {
 public:
  virtual ~TraceSource() = default;
  // The mapping; stable for the source's lifetime.
  virtual RingView ring() = 0;
  // Becomes readable (POLLIN) when the producer wakes the reader; poll() on it.
  virtual int poll_fd() const = 0;
  // Called after poll_fd() was readable, to reset a level-triggered wakeup (eventfd). The
  // kernel's perf fds need nothing.
  virtual void ClearWakeup() {}
  // Start/stop the trace (AUX) event only; sideband tracking keeps running.
  virtual absl::Status Enable() = 0;
  virtual absl::Status Disable() = 0;
  virtual StreamId stream() const = 0;
  // The CPU whose ring this is, -1 for a per-thread ring (SidebandRecord::cpu).
  virtual int32_t cpu() const = 0;
  // Trailer layout of every record in the data ring.
  virtual perf::SampleIdLayout layout() const = 0;
};

// The kernel's side: the AUX (PT/BTS) event, the events whose output was redirected into
// its ring (tracking), the trace events of other threads that write into the same AUX area
// (-p with several threads: `peers`), and the mapping. Enable/Disable act on the AUX event
// and its peers, so that a snapshot sees an AUX area nobody writes to (as perf disables the
// whole evsel); tracking events stay on.
class KernelTraceSource : public TraceSource {
 public:
  KernelTraceSource(PerfEvent aux_event, std::vector<PerfEvent> redirected, RingBuffer ring,
                    StreamId stream, int32_t cpu, perf::SampleIdLayout layout,
                    std::vector<PerfEvent> peers = {})
      : aux_event_(std::move(aux_event)),
        redirected_(std::move(redirected)),
        peers_(std::move(peers)),
        ring_(std::move(ring)),
        stream_(stream),
        cpu_(cpu),
        layout_(layout) {}

  RingView ring() override { return ring_.view(); }
  int poll_fd() const override { return aux_event_.fd(); }
  absl::Status Enable() override {
    PTKIT_RETURN_IF_ERROR(aux_event_.Enable());
    for (PerfEvent& e : peers_) PTKIT_RETURN_IF_ERROR(e.Enable());
    return absl::OkStatus();
  }
  absl::Status Disable() override {
    // Peers first: the main event's state is what a failure leaves to retry.
    for (PerfEvent& e : peers_) PTKIT_RETURN_IF_ERROR(e.Disable());
    return aux_event_.Disable();
  }
  StreamId stream() const override { return stream_; }
  int32_t cpu() const override { return cpu_; }
  perf::SampleIdLayout layout() const override { return layout_; }

  PerfEvent& aux_event() { return aux_event_; }
  std::vector<PerfEvent>& redirected() { return redirected_; }
  std::vector<PerfEvent>& peers() { return peers_; }

 private:
  PerfEvent aux_event_;
  std::vector<PerfEvent> redirected_;
  std::vector<PerfEvent> peers_;
  RingBuffer ring_;
  StreamId stream_;
  int32_t cpu_;
  perf::SampleIdLayout layout_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_TRACE_SOURCE_H_
