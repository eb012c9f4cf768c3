// The perf records of what a process had before ptrecord attached to it (-p, -t, -a), read
// from /proc as perf record synthesizes them.
#ifndef PTKIT_RECORD_ATTACH_RECORDS_H_
#define PTKIT_RECORD_ATTACH_RECORDS_H_

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/perf_records.h"

namespace ptkit::record {

// The records perf writes for what a process had before it attached (-p, -t, -a): the kernel
// writes COMM and MMAP2 records only for what happens once the events are enabled, so perf
// record synthesizes them from /proc (perf_event__synthesize_thread_map), and without them
// the code the process already runs has no image to decode or name. For process `pid`: one
// COMM per thread of `tids` (its name from /proc/PID/task/TID/comm), then one MMAP2 per
// executable mapping of /proc/PID/maps (pid/tid both `pid`, as perf writes them): a file with
// its build-id (read through /proc/PID/map_files: the file mapped, whatever mount namespace
// the process runs in), else its device and inode, "[vdso]", "//anon" for anonymous memory as
// the kernel names it; not
// [vsyscall], which the kernel never reports either. Each with the `layout` trailer at time 0
// (before every kernel record, as perf's) and cpu -1. A thread that is gone by then is left
// out. Errors: kNotFound when the process is gone.
absl::StatusOr<std::vector<uint8_t>> SynthesizeProcessRecords(pid_t pid,
                                                              std::span<const pid_t> tids,
                                                              const perf::SampleIdLayout& layout);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_ATTACH_RECORDS_H_
