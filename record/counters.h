// Companion counters (`-e cycles,instructions,page-faults`): any libpfm4 event name, encoded
// to a perf_event_attr with pfm_get_os_event_encoding(PFM_OS_PERF_EVENT_EXT), opened next to
// the trace events and read at the end.
#ifndef PTKIT_RECORD_COUNTERS_H_
#define PTKIT_RECORD_COUNTERS_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/container_format.h"
#include "record/perf_event.h"

namespace ptkit::record {

struct CounterSpec {
  std::string name;  // as the user wrote it
  std::string
      fstr;  // libpfm4's fully qualified name, e.g. "perf::PERF_COUNT_SW_PAGE_FAULTS:u=1:k=0:..."
  perf_event_attr attr;  // read_format TOTAL_TIME_ENABLED|RUNNING, disabled=1
};

// Encodes one libpfm4 event name counting at the given privilege levels. Initializes libpfm4
// on first use (thread-safe). Errors: kInvalidArgument "unknown event NAME (libpfm4: ...)"
// for a name libpfm4 does not know; kInternal when libpfm4 cannot initialize.
absl::StatusOr<CounterSpec> EncodeCounter(std::string_view name, bool user, bool kernel);
// Encodes a comma-separated list; the first error wins.
absl::StatusOr<std::vector<CounterSpec>> EncodeCounters(std::string_view list, bool user,
                                                        bool kernel);

// Counters opened for one task (pid, any CPU) or one CPU (pid -1).
class CounterSet {
 public:
  // Opens every spec with `enable_on_exec`. A counter this machine cannot count (ENOENT,
  // EOPNOTSUPP, ENODEV — e.g. hardware events in a VM without a PMU) is skipped and
  // described in warnings(); any other failure (e.g. permission) is returned.
  static absl::StatusOr<CounterSet> Open(const std::vector<CounterSpec>& specs, pid_t pid, int cpu,
                                         bool enable_on_exec);

  // One line per skipped counter: "counter cycles is not supported on this machine (...);
  // recording continues without it".
  const std::vector<std::string>& warnings() const { return warnings_; }
  size_t size() const { return events_.size(); }
  absl::Status EnableAll();
  absl::Status DisableAll();
  // Reads every opened counter. Errors: the read(2) failure, naming the counter.
  absl::StatusOr<std::vector<CounterValue>> ReadAll() const;

 private:
  CounterSet() = default;

  std::vector<std::string> names_;
  std::vector<PerfEvent> events_;
  std::vector<std::string> warnings_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_COUNTERS_H_
