// Address filters in perf's syntax (perf-record(1), --filter), resolved as perf resolves them:
//
//   filter|start|stop|tracestop <start> [/ <size>] [@<file>]    (several: space or comma)
//
// <start> is a file offset (or, without a file, a kernel address) or a symbol of <file> (name,
// name #N for the N-th of that name in address order, #0/#g/#G for the global one), or '*' for
// the whole file; <size> a number or a symbol (the size runs to that symbol's end). A 'filter'
// or 'tracestop' with a symbol and no size covers the symbol. Symbols must be surrounded by
// white space. The kernel takes only numbers ("filter 0x1130/0x2a@/abs/path"): symbols are
// converted to file offsets through the PT_LOAD segment that holds them.
#ifndef PTKIT_RECORD_ADDRESS_FILTER_H_
#define PTKIT_RECORD_ADDRESS_FILTER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::record {

struct AddressFilter {
  enum class Action { kFilter, kStart, kStop, kTraceStop };
  Action action = Action::kFilter;
  uint64_t offset = 0;  // file offset in `file`; a kernel address when `file` is empty
  uint64_t size = 0;    // 0: a single address (start/stop)
  std::string file;     // absolute path; empty: the kernel
};

// Parses and resolves `text`. Errors (kInvalidArgument, naming the filter and what is wrong):
// bad syntax, an unknown or ambiguous symbol (listing the candidates' addresses), a file that
// is not a readable ELF, a symbol outside every PT_LOAD segment, a 'filter' without a size.
absl::StatusOr<std::vector<AddressFilter>> ParseAddressFilters(std::string_view text);

// What PERF_EVENT_IOC_SET_FILTER takes: "filter 0x1130/0x2a@/usr/bin/ls,start 0x...@...".
std::string KernelFilterString(const std::vector<AddressFilter>& filters);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_ADDRESS_FILTER_H_
