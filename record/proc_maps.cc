#include "record/proc_maps.h"

#include <sys/mman.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/perf_event.h"
#include "record/text_util.h"

namespace ptkit::record {
namespace {

// The next space-separated field of `rest` (consumed), or "" at the end.
std::string_view NextField(std::string_view& rest) {
  const size_t begin = rest.find_first_not_of(' ');
  if (begin == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(begin);
  const size_t end = std::min(rest.find(' '), rest.size());
  std::string_view field = rest.substr(0, end);
  rest.remove_prefix(end);
  return field;
}

}  // namespace

std::vector<ProcMapping> ParseProcMaps(std::string_view text) {
  std::vector<ProcMapping> out;
  for (std::string_view rest : Split(text, '\n')) {
    const std::string_view range = NextField(rest);
    const std::string_view perms = NextField(rest);
    const std::string_view offset = NextField(rest);
    NextField(rest);  // device
    const std::string_view inode = NextField(rest);
    const size_t dash = range.find('-');
    ProcMapping m;
    uint64_t ino = 0;
    if (dash == std::string_view::npos || perms.size() < 3 ||
        !ParseUnsigned(range.substr(0, dash), &m.start, 16) ||
        !ParseUnsigned(range.substr(dash + 1), &m.end, 16) ||
        !ParseUnsigned(offset, &m.offset, 16) || !ParseUnsigned(inode, &ino)) {
      continue;
    }
    m.prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
             (perms[2] == 'x' ? PROT_EXEC : 0);
    m.path = std::string(Strip(rest));
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<std::pair<uint64_t, uint64_t>> FileRangeInMapping(const ProcMapping& m,
                                                                uint64_t offset, uint64_t size) {
  const uint64_t length = m.end - m.start;
  if (offset + size <= m.offset || offset >= m.offset + length) return std::nullopt;
  const uint64_t from = offset < m.offset ? m.start : m.start + (offset - m.offset);
  const uint64_t to = std::min<uint64_t>(m.end, m.start + (offset + size - m.offset));
  return std::make_pair(from, to);
}

absl::StatusOr<std::vector<ProcMapping>> ReadProcMaps(const std::string& task) {
  PTKIT_ASSIGN_OR_RETURN(std::string text, ReadSystemFile(absl::StrCat("/proc/", task, "/maps")));
  return ParseProcMaps(text);
}

}  // namespace ptkit::record
