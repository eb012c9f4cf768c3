// PerfEvent: one perf_event_open(2) file descriptor, move-only, closed on destruction.
#ifndef PTKIT_RECORD_PERF_EVENT_H_
#define PTKIT_RECORD_PERF_EVENT_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::record {

// Reads a small text file (e.g. /proc/sys/kernel/perf_event_paranoid). Injected so error
// messages can be tested without touching /proc.
using FileReader = std::function<absl::StatusOr<std::string>(const std::string& path)>;
// Reads the real file system.
absl::StatusOr<std::string> ReadSystemFile(const std::string& path);

// The text of a perf_event_open failure for `what` ("intel_pt event (cpu 0)"): names the
// call and errno, and for EACCES/EPERM the value of /proc/sys/kernel/perf_event_paranoid and
// the capability needed (CAP_PERFMON, or CAP_SYS_ADMIN before Linux 5.8); for
// ENOENT/EOPNOTSUPP/ENODEV "not supported on this machine". Returns kPermissionDenied,
// kUnimplemented or the errno's code respectively. Pure given `read_file`.
absl::Status PerfEventOpenError(int err, std::string_view what, const FileReader& read_file);

// Counter value read with PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING.
struct CounterReading {
  uint64_t value = 0;
  uint64_t time_enabled = 0;
  uint64_t time_running = 0;
};

class PerfEvent {
 public:
  // perf_event_open(attr, pid, cpu, group_fd=-1, PERF_FLAG_FD_CLOEXEC). `what` names the event
  // in errors. Errors: see PerfEventOpenError().
  static absl::StatusOr<PerfEvent> Open(const perf_event_attr& attr, pid_t pid, int cpu,
                                        std::string what,
                                        const FileReader& read_file = ReadSystemFile);

  // The same in the group of the event whose descriptor is `group_fd` (-1: no group), as an
  // AUX-sampling event joins its trace event's group.
  static absl::StatusOr<PerfEvent> OpenInGroup(const perf_event_attr& attr, pid_t pid, int cpu,
                                               int group_fd, std::string what,
                                               const FileReader& read_file = ReadSystemFile);

  // Move-only (the descriptor is a ScopedFd); a moved-from event is not valid().
  PerfEvent(PerfEvent&&) noexcept = default;
  PerfEvent& operator=(PerfEvent&&) noexcept = default;

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  const std::string& name() const { return what_; }
  const perf_event_attr& attr() const { return attr_; }
  int cpu() const { return cpu_; }
  pid_t pid() const { return pid_; }

  // PERF_EVENT_IOC_ENABLE / _DISABLE. Errors name the ioctl and the event.
  absl::Status Enable();
  absl::Status Disable();
  // PERF_EVENT_IOC_SET_OUTPUT: this event's records go to `target`'s ring buffer (same CPU or
  // same task; this event must not be mmapped). Errors name both events.
  absl::Status SetOutput(const PerfEvent& target);
  // PERF_EVENT_IOC_SET_FILTER with perf's address-filter syntax ("filter main @ /bin/ls").
  // Errors name the filter.
  absl::Status SetFilter(const std::string& filter);
  // PERF_EVENT_IOC_ID: the kernel's id, as in PERF_SAMPLE_IDENTIFIER.
  absl::StatusOr<uint64_t> Id() const;
  // read(2) of a counter opened with read_format TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING (and no
  // other read_format bits). kFailedPrecondition when the attr has another read_format.
  absl::StatusOr<CounterReading> Read() const;

 private:
  PerfEvent() = default;

  ScopedFd fd_;
  int cpu_ = -1;
  pid_t pid_ = -1;
  perf_event_attr attr_{};
  std::string what_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_PERF_EVENT_H_
