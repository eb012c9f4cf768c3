// `ptrecord --trigger uprobe:FUNC[@FILE]`: a snapshot each time the workload reaches FUNC (as
// magic-trace's -trigger). The trigger is a real uprobe perf event (the `uprobe` PMU:
// attr.config1 = the file's path, attr.config2 = FUNC's file offset; kernel/trace/
// trace_event_perf.c perf_uprobe_init) that samples every hit (IP, TID, TIME) into a small
// data ring the recorder polls.
//
// The events are per CPU and system-wide (pid -1), and hits are kept only for the workload's
// processes (a predicate the caller gives): a per-task uprobe event with `inherit` never fires
// in the workload's threads or children here (Linux 6.18: 5 of 8 hits counted, the parent's
// only), and the kernel refuses to mmap a per-task inherited event anyway.
#ifndef PTKIT_RECORD_TRIGGER_H_
#define PTKIT_RECORD_TRIGGER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "record/perf_event.h"
#include "record/pmu_registry.h"
#include "record/ring_buffer.h"

namespace ptkit::record {

// "uprobe:FUNC[@FILE]", resolved: FUNC's file offset in FILE (the workload's program when no
// FILE is given), through the PT_LOAD segment that holds it (as --filter resolves symbols).
struct TriggerSpec {
  std::string text;      // as given
  std::string function;  // FUNC
  std::string file;      // absolute path
  uint64_t offset = 0;   // file offset of FUNC's first byte
};

// Parses and resolves `text`; `program` is the workload's argv[0] (looked up in PATH when it
// has no '/'), used without @FILE. Errors (kInvalidArgument, saying the expected form): no
// "uprobe:" prefix, an empty FUNC, no FILE and no workload, an unknown or ambiguous symbol,
// a file that is not a readable ELF.
absl::StatusOr<TriggerSpec> ParseTrigger(std::string_view text, const std::string& program);

// Whether process `pid` is `root` or one of its descendants, by the parent chain of
// /proc/PID/stat under `proc_root`. False once the process is gone.
bool IsDescendant(uint32_t pid, uint32_t root, const std::string& proc_root = "/proc");

// The parent pid in the text of /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold
// spaces and parentheses). Errors: kInvalidArgument when the text has no such field.
absl::StatusOr<uint32_t> ParseStatParent(std::string_view stat);

// A uprobe is an INT3 the kernel writes over the probed instruction's first byte in the
// process's copy of the page; code read from memory then shows it where the file has the
// program's byte. When `bytes` (read from thread `tid`'s memory at `ip`) start with an INT3 and
// the file mapped there has another byte at that offset, puts the file's byte back and
// returns true. False (nothing changed) for anonymous memory, a file that cannot be read, or
// an INT3 that is the program's own.
bool RestoreProbedBytes(uint32_t tid, uint64_t ip, std::span<uint8_t> bytes);

// One hit: the workload reached FUNC.
struct TriggerHit {
  uint32_t pid = 0, tid = 0;
  uint64_t ip = 0;    // FUNC's run-time address
  uint64_t time = 0;  // perf time (attr clockid when one was given)
  int cpu = 0;
};

class UprobeTrigger {
 public:
  // Opens the uprobe event of `spec` on every CPU of `cpus` (sysfs `uprobe` PMU under
  // `sysfs_root`) with a data ring of `data_pages` each; `clockid` >= 0 sets attr.clockid
  // (the emulation's CLOCK_MONOTONIC). Errors: kNotFound when there is no uprobe PMU (kernel
  // without CONFIG_UPROBE_EVENTS); perf_event_open's (EACCES: needs CAP_PERFMON or root,
  // ENOENT/EINVAL: the offset is no instruction); the ring's mmap.
  static absl::StatusOr<UprobeTrigger> Open(
      const TriggerSpec& spec, std::span<const int> cpus, int clockid = -1, uint64_t data_pages = 8,
      const std::string& sysfs_root = std::string(kDefaultSysfsRoot));

  UprobeTrigger(UprobeTrigger&&) noexcept = default;
  UprobeTrigger& operator=(UprobeTrigger&&) noexcept = default;

  // One descriptor per CPU, readable (POLLIN) after each hit (wakeup_events = 1).
  std::vector<int> poll_fds() const;
  // Whether a ring holds records not read yet: one acquire load of data_head per CPU, cheap
  // enough for every single-step.
  bool Pending() const;
  // The hits recorded since the last call for which `keep(pid)` holds (all when `keep` is
  // empty), oldest first (by time, over all CPUs); the others are counted (ignored()).
  // Errors: kDataLoss for a malformed record (the ring is skipped to its head).
  absl::StatusOr<std::vector<TriggerHit>> Poll(const std::function<bool(uint32_t)>& keep = {});
  uint64_t hits() const { return hits_; }        // kept
  uint64_t ignored() const { return ignored_; }  // other processes'
  uint64_t lost() const { return lost_; }        // PERF_RECORD_LOST: hits the ring had no room for
  const TriggerSpec& spec() const { return spec_; }

  // --trigger-count N: only the first `limit` kept hits take a snapshot (0: every hit, the
  // default), as ftrace's "snapshot:N" trigger.
  void set_snapshot_limit(uint64_t limit) { limit_ = limit; }
  uint64_t snapshot_limit() const { return limit_; }
  // Of `n` more kept hits, how many may still take a snapshot under the limit; counts them
  // (snapshot_hits()).
  uint64_t TakeForSnapshots(uint64_t n);
  uint64_t snapshot_hits() const { return snapshot_hits_; }

 private:
  struct Cpu {
    PerfEvent event;
    RingBuffer ring;
    int cpu = 0;
  };
  UprobeTrigger() = default;
  TriggerSpec spec_;
  std::vector<Cpu> cpus_;
  uint64_t sample_type_ = 0;
  uint64_t hits_ = 0, ignored_ = 0, lost_ = 0;
  uint64_t limit_ = 0, snapshot_hits_ = 0;
};

// The drain loop's LoopOptions::triggered on the kernel path: polls `trigger` (when Pending())
// for hits of `root` and its descendants (IsDescendant) and returns how many of them take a
// snapshot (TakeForSnapshots). `trigger` must outlive the function. Errors: Poll's.
std::function<absl::StatusOr<uint64_t>()> SnapshotHitsOf(UprobeTrigger& trigger, uint32_t root);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_TRIGGER_H_
