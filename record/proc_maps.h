// /proc/PID/maps: the memory mappings of a process (proc(5)), parsed from text.
#ifndef PTKIT_RECORD_PROC_MAPS_H_
#define PTKIT_RECORD_PROC_MAPS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::record {

// One line "START-END PERMS OFFSET DEV INODE [PATH]" of a maps file.
struct ProcMapping {
  uint64_t start = 0;  // [start, end)
  uint64_t end = 0;
  int prot = 0;                           // PROT_READ | PROT_WRITE | PROT_EXEC from PERMS
  uint64_t offset = 0;                    // file offset of `start`
  uint32_t dev_major = 0, dev_minor = 0;  // the file's device (DEV, "MAJOR:MINOR" in hex)
  uint64_t inode = 0;
  bool shared = false;  // PERMS ends in 's' (MAP_SHARED), not 'p'
  // The file (" (deleted)" kept), "[vdso]", "[heap]", ...; empty for anonymous memory.
  std::string path;
};

// The mappings in the text of a maps file, in its order. Pure. A line without the five
// leading fields (hex range and offset, decimal inode) is skipped.
std::vector<ProcMapping> ParseProcMaps(std::string_view text);

// Where the file range [offset, offset + size) lies in mapping `m` of that file: its run-time
// range [first, second), clipped to the mapping, or nullopt when the mapping holds none of it.
// The kernel's perf_addr_filter_vma_adjust() for an address filter (--filter). Pure.
std::optional<std::pair<uint64_t, uint64_t>> FileRangeInMapping(const ProcMapping& m,
                                                                uint64_t offset, uint64_t size);

// Reads and parses /proc/TASK/maps (TASK: "self", a pid or a tid). Errors: the read's, e.g.
// kNotFound when the task is gone.
absl::StatusOr<std::vector<ProcMapping>> ReadProcMaps(const std::string& task);

// The threads of the process that task `id` belongs to (any of its thread ids), sorted.
// Errors: kNotFound naming /proc/ID/task when there is no such task.
absl::StatusOr<std::vector<pid_t>> ListThreads(pid_t id);

// The process (thread group) id of task `id`, from /proc/ID/status. Errors: kNotFound when
// there is no such task.
absl::StatusOr<pid_t> ThreadGroupOf(pid_t id);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_PROC_MAPS_H_
