// SPDX-License-Identifier: Apache-2.0
#include "record/emulate/guest_pids.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "ptkit/numbers.h"
#include "record/perf_event.h"
#include "record/text_util.h"

namespace ptkit::emulate {

using record::Split;
using record::Strip;

std::vector<uint32_t> ParseNsPids(std::string_view status) {
  std::vector<uint32_t> pids;
  for (std::string_view line : Split(status, '\n')) {
    if (!line.starts_with("NSpid:")) continue;
    for (std::string_view field : Split(Strip(line.substr(6)), '\t')) {
      uint32_t pid = 0;
      if (!ParseUnsigned(Strip(field), &pid)) return {};
      pids.push_back(pid);
    }
    break;
  }
  return pids;
}

std::optional<uint32_t> ParseParentPid(std::string_view status) {
  for (std::string_view line : Split(status, '\n')) {
    uint32_t pid = 0;
    if (line.starts_with("PPid:") && ParseUnsigned(Strip(line.substr(5)), &pid)) return pid;
  }
  return std::nullopt;
}

uint64_t ParseNamespaceLink(std::string_view target) {
  const size_t open = target.find(":[");
  uint64_t inode = 0;
  if (open == std::string_view::npos || !target.ends_with(']') ||
      !ParseUnsigned(target.substr(open + 2, target.size() - open - 3), &inode)) {
    return 0;
  }
  return inode;
}

namespace {

struct TaskIds {
  std::vector<uint32_t> ns_pids;  // never empty
  uint32_t parent = 0;
};

// The pids of the task whose /proc directory is `dir`; nullopt when it is gone.
std::optional<TaskIds> ReadTaskIds(const std::string& dir) {
  absl::StatusOr<std::string> status = record::ReadSystemFile(dir + "/status");
  if (!status.ok()) return std::nullopt;
  TaskIds ids{ParseNsPids(*status), ParseParentPid(*status).value_or(0)};
  if (ids.ns_pids.empty()) return std::nullopt;
  return ids;
}

uint64_t PidNamespaceOf(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::read_symlink(dir + "/ns/pid", ec);
  return ec ? 0 : ParseNamespaceLink(target.string());
}

// The numbered entries of directory `dir` (processes, or a process's threads).
std::vector<uint32_t> Numbered(const std::string& dir) {
  std::vector<uint32_t> ids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    uint32_t id = 0;
    if (ParseUnsigned(e.path().filename().string(), &id)) ids.push_back(id);
  }
  return ids;
}

// Whether process `pid` under `proc` is `ns_pid` in the pid namespace `pidns`, its own.
bool IsProcess(const std::string& proc, uint32_t pid, uint64_t pidns, uint32_t ns_pid) {
  const std::string dir = absl::StrCat(proc, "/", pid);
  if (PidNamespaceOf(dir) != pidns) return false;
  const std::optional<TaskIds> ids = ReadTaskIds(dir);
  return ids && ids->ns_pids.back() == ns_pid;
}

QemuPidAnswer FindThread(const std::string& proc, const QemuPidQuestion& q) {
  uint32_t pid = 0;
  if (q.hint != 0 && IsProcess(proc, q.hint, q.pidns, q.ns_pid)) {
    pid = q.hint;
  } else {
    for (uint32_t p : Numbered(proc)) {
      if (IsProcess(proc, p, q.pidns, q.ns_pid)) {
        pid = p;
        break;
      }
    }
  }
  if (pid == 0) return {};
  // (The thread group leader is the process's pid in every namespace.)
  if (q.ns_tid == q.ns_pid) return {pid, pid};
  const std::string tasks = absl::StrCat(proc, "/", pid, "/task");
  for (uint32_t tid : Numbered(tasks)) {
    const std::optional<TaskIds> ids = ReadTaskIds(absl::StrCat(tasks, "/", tid));
    if (ids && ids->ns_pids.back() == q.ns_tid) return {pid, tid};
  }
  return {};
}

QemuPidAnswer FindChild(const std::string& proc, const QemuPidQuestion& q) {
  const std::optional<TaskIds> parent = ReadTaskIds(absl::StrCat(proc, "/", q.hint));
  if (!parent) return {};
  // The parent's namespace is its children's at its depth (theirs is it or one below it).
  const size_t depth = parent->ns_pids.size() - 1;
  for (uint32_t pid : Numbered(proc)) {
    const std::optional<TaskIds> ids = ReadTaskIds(absl::StrCat(proc, "/", pid));
    if (ids && ids->parent == q.hint && ids->ns_pids.size() > depth &&
        ids->ns_pids[depth] == q.ns_pid) {
      return {pid, pid};
    }
  }
  return {};
}

}  // namespace

bool ProcHasOwnPids(const std::string& proc_root) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink(proc_root + "/self", ec);
  return !ec && self.string() == std::to_string(getpid());
}

QemuPidAnswer AnswerPidQuestion(const QemuPidQuestion& q, const std::string& proc_root) {
  if (proc_root.empty()) return {};
  if (q.kind == kAskThread && q.pidns != 0) return FindThread(proc_root, q);
  if (q.kind == kAskChild && q.hint != 0) return FindChild(proc_root, q);
  return {};
}

void AnswerPidQuestions(uint8_t* base, uint32_t slots, const std::string& proc_root) {
  for (uint32_t s = 0; s < slots; ++s) {
    AnswerPids(*SlotControl(base, s),
               [&](const QemuPidQuestion& q) { return AnswerPidQuestion(q, proc_root); });
  }
}

}  // namespace ptkit::emulate
