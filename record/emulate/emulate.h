// `ptrecord --emulate`: records a workload without Intel PT hardware. The workload runs under
// the Stepper (ptrace single-step); each thread's control flow is encoded as genuine Intel PT
// by swpt::PtEncoder and written into a per-thread SimulatedPmu AUX ring, which the normal
// Drainer moves into the container, exactly as it does for the kernel's rings. The sideband
// (MMAP2, COMM, FORK, EXIT, ...) comes from the real kernel: a dummy tracking event on the
// workload, drained by the same Drainer. The metadata says the trace is emulated.
#ifndef PTKIT_RECORD_EMULATE_EMULATE_H_
#define PTKIT_RECORD_EMULATE_EMULATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_writer.h"
#include "record/address_filter.h"
#include "record/crash.h"
#include "record/drain.h"
#include "record/emulate/stepper.h"
#include "record/metadata.h"
#include "record/swpt/bts_writer.h"
#include "record/swpt/pt_encoder.h"
#include "record/trigger.h"

namespace ptkit::emulate {

struct EmulateOptions {
  // "step": ptrace single-step (this file); "qemu": QEMU's TCG with ptkit's plugin
  // (qemu_backend.h).
  std::string backend = "step";
  std::string qemu_plugin;        // qemu: the plugin; empty = next to `self_exe`
  std::string self_exe;           // qemu: ptrecord's own path (/proc/self/exe)
  std::vector<std::string> argv;  // the workload
  std::string output = "trace.pt";
  bool overwrite_existing = false;
  bool compress = true;
  bool bts = false;           // intel_bts: 24-byte branch records instead of Intel PT
  swpt::PtEncoderOptions pt;  // what the recorded intel_pt config would be
  std::string ground_truth;   // when set: every retired instruction, "TID 0xIP" per line
  uint64_t max_steps = 0;     // 0 = no limit
  // Also store the bytes of every executable file mapping (ptrecord --archive).
  bool archive = false;
  // perf's address-filter syntax (record/address_filter.h); 'filter' regions of files only.
  // Outside them a single-threaded process runs at full speed (see StepperOptions::filters).
  std::string filter;
  // --aux-sample (step backend): every `sample_period` instructions a thread retires, a
  // PERF_RECORD_SAMPLE of that thread with the newest `aux_sample_size` bytes of its PT, taken
  // before the next instruction retires (its IP is the sample's). The AUX rings are then
  // overwritten as perf's AUX-sample mode does: the container holds the samples, not the
  // whole trace. 0 = no sampling.
  uint64_t aux_sample_size = 0;
  uint64_t sample_period = 0;
  // --snapshot[=SIZE] (step backend): the threads' AUX rings are overwritten; on every SIGUSR2
  // each running thread's newest SIZE bytes (0: the whole ring) become a snapshot, and at the
  // end every thread's. Unset: the whole trace is kept.
  std::optional<uint64_t> snapshot_size;
  // --trigger uprobe:FUNC (snapshot mode): each time a thread of the workload reaches FUNC, a
  // snapshot of that thread's ring, its pending packets flushed, so the snapshot ends at
  // FUNC's entry. Step backend: a real uprobe event on FUNC (record/trigger.h), the snapshot
  // taken when FUNC's first instruction has retired. qemu: the plugin instruments FUNC's
  // instruction and snapshots before it runs (qemu_backend.h).
  std::optional<record::TriggerSpec> trigger;
  uint64_t trigger_count = 0;  // --trigger-count N: only the first N hits snapshot (0: all)
  // --snapshot-on-crash (snapshot mode): when a thread gets a signal that kills the process,
  // a snapshot of every thread (step: before it is delivered; qemu: as qemu dies of it); it is
  // the recording's last snapshot round (no end round follows), and the end metadata's
  // "crash" names the signal, the thread and its instruction.
  bool snapshot_on_crash = false;
  uint64_t data_pages = 64;               // tracking ring, per CPU
  uint64_t aux_pages = 64;                // simulated AUX ring, per thread
  uint64_t qemu_aux_pages = 1024;         // the same for the qemu backend (it runs ~10^4x faster)
  std::vector<std::string> command_line;  // ptrecord's argv, for the metadata
  // Told things the user should know while the run goes on (e.g. a SIGUSR2 that does not
  // apply); may be empty.
  std::function<void(const std::string&)> notice;
  // Progress on stderr, about once a second, on one line rewritten in place (ptrecord: not
  // --quiet, and record::StatusLineFits(true)).
  bool status_line = false;
};

struct EmulateResult {
  // The workload's exit code (128 + signal when a signal killed it), or 128 + stop_signal.
  int exit_code = 0;
  int stop_signal = 0;  // the SIGINT, SIGTERM or SIGHUP that stopped the recording, or 0
  StepperResult steps;
  record::StreamStats totals;              // samples and sample_aux_bytes count the AUX samples
  uint64_t trigger_hits = 0;               // --trigger: the workload's hits of FUNC
  uint64_t trigger_snapshots = 0;          // the snapshots they took
  std::optional<record::CrashInfo> crash;  // --snapshot-on-crash: the signal that killed it
  uint64_t threads = 0;
  std::vector<std::string> warnings;  // e.g. mapped files without a build-id
};

// Now on the clock of both emulations' trace and records: CLOCK_MONOTONIC ns (the tracking
// event's clockid; steady_clock on Linux).
uint64_t MonotonicNs();

// What both backends say once when the command exits while processes it started still run
// (`pids`: a daemon's), whose trace goes on: ptrecord waits for them.
std::string WaitingNotice(const std::vector<uint32_t>& pids);

// The container of a recording: options.output, refused (kAlreadyExists, exit 2, naming
// --overwrite-existing) when it exists and may not be replaced; the writer's I/O errors.
absl::StatusOr<std::unique_ptr<ContainerWriter>> CreateEmulatedWriter(
    const EmulateOptions& options);

// The metadata input both backends start from: the command, this CPU, the emulated event,
// the tracking attr (its sample_id layout), the identity time conversion of CLOCK_MONOTONIC
// ns, full-trace mode with the given ring sizes.
record::MetadataInput EmulatedMetadataInput(const EmulateOptions& options,
                                            const perf_event_attr& tracking, uint64_t data_pages,
                                            uint64_t aux_pages);

// Checks --snapshot and --aux-sample (EmulateOptions::snapshot_size, aux_sample_size,
// sample_period) against a per-thread AUX ring of `aux_pages` pages (each backend's). Errors:
// kInvalidArgument with exit code 2 (a snapshot larger than a container record, a bad sample
// size or period, both modes at once, BTS with samples, --trigger or --snapshot-on-crash
// without snapshot mode).
absl::Status CheckEmulatedModes(const EmulateOptions& options, uint64_t aux_pages);

// The end metadata's "trigger" member of both backends (options.trigger set): spec, file,
// offset, hits, snapshots, and count with --trigger-count (ptkit-format(5)).
nlohmann::json TriggerEndJson(const EmulateOptions& options, uint64_t hits, uint64_t snapshots);

// --filter for both backends: `text` parsed and resolved (record::ParseAddressFilters; empty:
// no filter). Errors (kInvalidArgument, exit code 2): a bad filter, or one that is not a
// 'filter' region of a file (start, stop, tracestop and kernel addresses are not emulated).
absl::StatusOr<std::vector<record::AddressFilter>> ParseEmulatedFilters(const std::string& text);

// "SIGSEGV" for SIGSEGV (a number for an unknown signal): record/crash.h.
using record::SignalName;

// The trace the emulation produces for an event string as ptrecord takes it:
// "intel_pt//u" (default), "intel_pt/noretcomp=1,psb_period=2,tsc=0/u", "intel_bts//u".
// intel_pt terms: noretcomp, psb_period (0..15), tsc, mtc, mtc_period (0..15), cyc,
// cyc_thresh (0..15); the defaults are perf's (tsc=1, noretcomp=0, psb_period=0 here).
// Errors (kInvalidArgument): another PMU, an unknown term (naming the supported ones), a
// value out of range, or kernel tracing ("k"): the emulation sees user space only.
struct EmulatedEvent {
  bool bts = false;
  swpt::PtEncoderOptions pt;
};
absl::StatusOr<EmulatedEvent> ParseEmulatedEvent(std::string_view text);

// Runs and records the workload (with backend "qemu": RecordQemu). SIGINT, SIGTERM and SIGHUP stop
// it as --max-steps does (the workload is killed, everything traced so far is kept, the container
// is closed with its footer); SIGUSR2 is reported once through `notice` and otherwise ignored. The
// container ends with a metadata record that repeats the first and adds "end": how the workload
// ended (exit status, signal) and whether ptrecord stopped it. The build-ids of mapped files and
// the vdso bytes are stored (record/code_capture.h), with `archive` the mapped code too.
// Nothing is left behind when the workload never ran.
// Errors: kNotFound for a program that cannot be executed,
// kPermissionDenied from perf_event_open or ptrace (with what to change), the writer's I/O
// errors, kInternal if the encoder rejects the stepped flow (a bug: the message names the
// thread and address).
absl::StatusOr<EmulateResult> RecordEmulated(const EmulateOptions& options);

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_EMULATE_H_
