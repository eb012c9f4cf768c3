#include "record/proc_maps.h"

#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

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
    const std::string_view device = NextField(rest);
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
    m.shared = perms.size() > 3 && perms[3] == 's';
    m.inode = ino;
    if (const size_t colon = device.find(':'); colon != std::string_view::npos) {
      // An unparsable device stays 0:0 (a mapping is still worth its addresses).
      if (!ParseUnsigned(device.substr(0, colon), &m.dev_major, 16) ||
          !ParseUnsigned(device.substr(colon + 1), &m.dev_minor, 16)) {
        m.dev_major = m.dev_minor = 0;
      }
    }
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

absl::StatusOr<std::vector<pid_t>> ListThreads(pid_t id) {
  std::vector<pid_t> tids;
  std::error_code ec;
  const std::string dir = absl::StrCat("/proc/", id, "/task");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    unsigned t = 0;
    if (ParseUnsigned(e.path().filename().string(), &t)) tids.push_back(static_cast<pid_t>(t));
  }
  if (ec || tids.empty()) {
    return absl::NotFoundError(absl::StrCat("no process ", id, " (", dir, " not readable)"));
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

absl::StatusOr<pid_t> ThreadGroupOf(pid_t id) {
  const std::string path = absl::StrCat("/proc/", id, "/status");
  absl::StatusOr<std::string> text = ReadSystemFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no task ", id, " (", path, " not readable)"));
  }
  for (std::string_view line : Split(*text, '\n')) {
    unsigned tgid = 0;
    if (line.starts_with("Tgid:") && ParseUnsigned(Strip(line.substr(5)), &tgid)) {
      return static_cast<pid_t>(tgid);
    }
  }
  return absl::NotFoundError(absl::StrCat(path, " has no Tgid line"));
}

}  // namespace ptkit::record
