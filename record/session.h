// A recording session: what `ptrecord` does between parsing its flags and exiting. Resolves
// the trace event against sysfs, starts or attaches to the target, opens the per-CPU (or
// per-thread) trace and tracking events, maps their rings, writes metadata, runs the drain
// loop until the workload exits or a signal stops it, and stores counters and the footer.
#ifndef PTKIT_RECORD_SESSION_H_
#define PTKIT_RECORD_SESSION_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "record/drain.h"
#include "record/perf_event.h"
#include "record/pmu_registry.h"
#include "record/ring_buffer.h"
#include "record/trace_source.h"
#include "record/workload.h"

namespace ptkit::record {

// Parses a CPU list as in /sys/devices/system/cpu/online and `perf -C`: "0-3,5,7-8".
// Errors (kInvalidArgument) name the bad piece; the result is sorted and unique.
absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text);

// "-m DATA[,AUX]" (pages, powers of two). Errors (kInvalidArgument) name the bad value.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseMmapPages(std::string_view text);

// "--snapshot=SIZE": bytes with an optional K/M/G suffix (powers of 1024).
absl::StatusOr<uint64_t> ParseSize(std::string_view text);

// Opens the sideband tracking event `attr` (BuildTrackingAttr) of `pid` on `cpu`, for
// `what` ("tracking event (cpu 0)"). An attr.build_id the kernel rejects (a reserved bit
// before Linux 5.12: EINVAL) is cleared in `attr` and the event opened without it (file
// identities then come from the code records). Errors: PerfEvent::Open's.
absl::StatusOr<PerfEvent> OpenTrackingEvent(perf_event_attr& attr, pid_t pid, int cpu,
                                            const std::string& what);

// A tracking event (OpenTrackingEvent) with a data ring of its own (`data_pages`; `rings`
// rings in all share the mlock limits), as the sideband source of `stream`. Errors:
// OpenTrackingEvent's, RingBuffer::Map's.
absl::StatusOr<std::unique_ptr<KernelTraceSource>> OpenTrackingSource(
    perf_event_attr& attr, pid_t pid, int cpu, StreamId stream, uint64_t data_pages, uint64_t rings,
    const MlockLimits& limits, const std::string& what);

struct SessionOptions {
  std::vector<std::string> command;  // the workload (`-- cmd args`)
  std::optional<pid_t> pid;          // -p: every thread of a running process
  std::optional<pid_t> tid;          // -t: one thread
  bool all_cpus = false;             // -a: every task on the CPUs
  std::string cpu_list;              // -C: only these CPUs
  // Progress on stderr, about once a second, on one line rewritten in place (ptrecord: not
  // --quiet, and StatusLineFits(a command)).
  bool status_line = false;
  bool per_thread = false;  // one ring per thread instead of per CPU
  std::string trace_event = "intel_pt//";
  bool sideband_only = false;                   // no trace event: sideband (and counters) only
  bool user_only = false, kernel_only = false;  // -u / -k (override the event's modifiers)
  uint64_t data_pages = 64;
  uint64_t aux_pages = 1024;
  uint64_t aux_watermark = 0;  // bytes; 0 = a quarter of the AUX area
  std::string filter;          // --filter, perf's address-filter syntax
  std::string output = "trace.pt";
  bool overwrite_existing = false;
  std::optional<uint64_t> snapshot_size;  // --snapshot[=SIZE]; 0 = the whole AUX area
  // --aux-sample[=SIZE] (record/aux_sample.h): `sample_event` (a libpfm4 name) samples every
  // `sample_period` events with the newest SIZE bytes of the trace.
  std::optional<uint64_t> aux_sample_size;
  std::string sample_event = "cycles";
  uint64_t sample_period = 0;      // 0 = kDefaultSamplePeriod
  bool sample_callchain = false;   // -g: the samples carry the kernel's call chain too
  std::string counters;            // -e, libpfm4 names
  std::string control;             // --control fifo:CTL[,ACK] (record/control.h)
  std::string trigger;             // --trigger uprobe:FUNC[@FILE] (record/trigger.h)
  uint64_t trigger_count = 0;      // --trigger-count N: only the first N hits snapshot (0: all)
  bool snapshot_on_crash = false;  // --snapshot-on-crash (record/crash.h)
  bool kcore = false;  // --kcore: the kernel text, kallsyms and modules (record/kcore.h)
  bool compress = true;
  bool archive = false;  // store every mapped executable file whole, and its debug file
  std::string sysfs_root = std::string(kDefaultSysfsRoot);
  std::vector<std::string> command_line;  // for the metadata
};

// The default --sample-period of the kernel's sampling event (events between samples).
inline constexpr uint64_t kDefaultSamplePeriod = 1000000;

struct SessionResult {
  std::optional<int> workload_exit_code;  // when a workload was run
  int workload_signal = 0;                // the signal it died of (not one ptrecord sent it)
  int stop_signal = 0;  // the SIGINT, SIGTERM or SIGHUP that stopped the recording, or 0
  StreamStats totals;
  std::vector<std::string> warnings;  // e.g. skipped counters
  std::vector<std::string> notes;     // settings chosen for the user (AUX sampling's PSB period)
  bool stopped_by_control = false;    // a --control "stop" ended the recording
  uint64_t file_bytes = 0;
};

// Runs the whole session. Errors, each one clear line:
//  - kNotFound "no intel_pt PMU here (<root>/intel_pt does not exist): ..." with what to do;
//  - kInvalidArgument for bad event strings, values not allowed by the caps, conflicting
//    targets (more than one of -- cmd / -p / -t / -a), CPUs that are not online;
//  - kNotFound "program not found: NAME" from the workload;
//  - kPermissionDenied from perf_event_open / mmap with the paranoid/mlock explanation;
//  - I/O errors of the output file.
absl::StatusOr<SessionResult> RunSession(const SessionOptions& options);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_SESSION_H_
