// /proc/PID/maps: the memory mappings of a process (proc(5)), parsed from text.
#ifndef PTKIT_RECORD_PROC_MAPS_H_
#define PTKIT_RECORD_PROC_MAPS_H_

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
  int prot = 0;         // PROT_READ | PROT_WRITE | PROT_EXEC from PERMS
  uint64_t offset = 0;  // file offset of `start`
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

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_PROC_MAPS_H_
