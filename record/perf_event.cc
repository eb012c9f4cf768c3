#include "record/perf_event.h"

#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ptkit/errno_text.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<std::string> ReadSystemFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus(errno, "read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(Strip(ss.str()));
}

absl::Status PerfEventOpenError(int err, std::string_view what, const FileReader& read_file) {
  const std::string call =
      absl::StrCat("perf_event_open ", std::string(what), ": ", ErrnoText(err));
  switch (err) {
    case EACCES:
    case EPERM: {
      // Documentation/admin-guide/perf-security.rst: above 1 (2 on most distributions)
      // unprivileged users may only profile their own user space; 3 (Debian) forbids all
      // unprivileged use. CAP_PERFMON (5.8+) or CAP_SYS_ADMIN lift the restriction.
      std::string paranoid = "unknown";
      if (read_file) {
        absl::StatusOr<std::string> v = read_file("/proc/sys/kernel/perf_event_paranoid");
        if (v.ok()) paranoid = *v;
      }
      return absl::PermissionDeniedError(absl::StrCat(
          call, " (kernel.perf_event_paranoid is ", paranoid,
          "; run as root, grant CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8), or lower it: "
          "sysctl kernel.perf_event_paranoid=1)"));
    }
    case ENOENT:
    case EOPNOTSUPP:
    case ENODEV:
      return absl::UnimplementedError(absl::StrCat(call, " (not supported on this machine)"));
    case EBUSY:
      return absl::UnavailableError(absl::StrCat(
          call, " (the PMU is in use: another tracer holds intel_pt/BTS/LBR on this CPU)"));
    case EMFILE:
      return absl::ResourceExhaustedError(
          absl::StrCat(call, " (too many open files: raise `ulimit -n`)"));
    default:  // the errno's own text is added once, by ErrnoStatus
      return ErrnoStatus(err, "perf_event_open ", std::string(what));
  }
}

absl::StatusOr<PerfEvent> PerfEvent::Open(const perf_event_attr& attr, pid_t pid, int cpu,
                                          std::string what, const FileReader& read_file) {
  return OpenInGroup(attr, pid, cpu, -1, std::move(what), read_file);
}

absl::StatusOr<PerfEvent> PerfEvent::OpenInGroup(const perf_event_attr& attr, pid_t pid, int cpu,
                                                 int group_fd, std::string what,
                                                 const FileReader& read_file) {
  const long fd = syscall(SYS_perf_event_open, &attr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return PerfEventOpenError(errno, what, read_file);
  PerfEvent e;
  e.fd_.reset(static_cast<int>(fd));
  e.cpu_ = cpu;
  e.pid_ = pid;
  e.attr_ = attr;
  e.what_ = std::move(what);
  return e;
}

absl::Status PerfEvent::Enable() {
  if (ioctl(fd_.get(), PERF_EVENT_IOC_ENABLE, 0) != 0) {
    return ErrnoStatus(errno, "ioctl(PERF_EVENT_IOC_ENABLE) ", what_);
  }
  return absl::OkStatus();
}

absl::Status PerfEvent::Disable() {
  if (ioctl(fd_.get(), PERF_EVENT_IOC_DISABLE, 0) != 0) {
    return ErrnoStatus(errno, "ioctl(PERF_EVENT_IOC_DISABLE) ", what_);
  }
  return absl::OkStatus();
}

absl::Status PerfEvent::SetOutput(const PerfEvent& target) {
  if (ioctl(fd_.get(), PERF_EVENT_IOC_SET_OUTPUT, target.fd()) != 0) {
    return ErrnoStatus(errno, "ioctl(PERF_EVENT_IOC_SET_OUTPUT) ", what_, " -> ", target.what_);
  }
  return absl::OkStatus();
}

absl::Status PerfEvent::SetFilter(const std::string& filter) {
  if (ioctl(fd_.get(), PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0) {
    return ErrnoStatus(errno, "ioctl(PERF_EVENT_IOC_SET_FILTER, \"", filter, "\") ", what_);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PerfEvent::Id() const {
  uint64_t id = 0;
  if (ioctl(fd_.get(), PERF_EVENT_IOC_ID, &id) != 0) {
    return ErrnoStatus(errno, "ioctl(PERF_EVENT_IOC_ID) ", what_);
  }
  return id;
}

absl::StatusOr<CounterReading> PerfEvent::Read() const {
  constexpr uint64_t kFormat = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  if (attr_.read_format != kFormat) {
    return absl::FailedPreconditionError(
        absl::StrCat("read ", what_, ": read_format must be TOTAL_TIME_ENABLED|RUNNING"));
  }
  uint64_t buf[3] = {};
  const ssize_t n = read(fd_.get(), buf, sizeof(buf));
  if (n < 0) return ErrnoStatus(errno, "read ", what_);
  if (n != sizeof(buf)) {
    return absl::DataLossError(absl::StrCat("read ", what_, ": short read of ", n, " bytes"));
  }
  return CounterReading{buf[0], buf[1], buf[2]};
}

}  // namespace ptkit::record
